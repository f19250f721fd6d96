//! Admin requests: GET_CONSUME_STATS (208) and INVOKE_BROKER_TO_RESET_OFFSET (222), as `skiff
//! admin` and RocketMQ's `mqadmin` send them.

use tracing::info;

use skiff_storage::store::BoundaryType as StoreBoundary;

use super::{broker_failure, success, Failure, Outcome, Processor};
use crate::remoting::body::{
    ConsumeStats, MessageQueue as WireQueue, OffsetWrapper, ResetOffsetBody,
};
use crate::remoting::codes::response as code;
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    CustomHeader, GetConsumeStatsRequestHeader, HeaderError, ResetOffsetRequestHeader,
};
use crate::remoting::wire::{clamp_i32, clamp_i64};

impl Processor {
    /// GET_CONSUME_STATS (208): RocketMQ's `ConsumeStats` for the group.
    pub(super) async fn consume_stats(&self, request: &RemotingCommand) -> Outcome {
        let header = GetConsumeStatsRequestHeader::from_command(request)?;
        let topic = header
            .topic
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let rows = self
            .broker
            .progress(&header.consumer_group)
            .await
            .map_err(broker_failure)?;
        let broker_name = self.broker.config().broker_name.clone();
        let reader = self.broker.reader();
        let mut stats = ConsumeStats::default();
        for row in rows {
            let wanted = if !header.topic_list.is_empty() {
                header.topic_list.contains(&row.topic)
            } else {
                topic.is_none_or(|t| t == row.topic)
            };
            if !wanted {
                continue;
            }
            let consumer_offset = row.consumer_offset.unwrap_or(0);
            // Java's `max(consumerOffset, pullOffset)`: the next offset the group will pull.
            let pulled_from = row
                .consumer_offset
                .unwrap_or_else(|| self.broker.reader().min_offset(&row.topic, row.queue_id));
            let pull_offset = consumer_offset.max(pulled_from.saturating_add(row.in_flight));
            let last_timestamp = match consumer_offset.checked_sub(1) {
                Some(last) => reader
                    .store_timestamp_at(&row.topic, row.queue_id, last)
                    .ok()
                    .flatten()
                    .unwrap_or(0),
                None => 0,
            };
            stats.offset_table.insert(
                WireQueue {
                    topic: row.topic.clone(),
                    broker_name: broker_name.clone(),
                    queue_id: clamp_i32(row.queue_id),
                },
                OffsetWrapper {
                    broker_offset: clamp_i64(row.broker_offset),
                    consumer_offset: clamp_i64(consumer_offset),
                    pull_offset: clamp_i64(pull_offset),
                    last_timestamp,
                },
            );
        }
        Ok(success().with_body(stats.encode()))
    }

    /// INVOKE_BROKER_TO_RESET_OFFSET (222), server-side reset (Java 5.x
    /// `useServerSideResetOffset`): each reset is pending until the group's next pull of the
    /// queue, which answers PULL_OFFSET_MOVED with it.
    pub(super) async fn reset_offset(&self, request: &RemotingCommand) -> Outcome {
        let ResetOffsetRequestHeader {
            topic,
            group,
            queue_id,
            offset,
            timestamp,
            ..
        } = ResetOffsetRequestHeader::from_command(request)?;
        let offset = offset.filter(|o| *o != -1);
        let config = self
            .broker
            .topic(&topic)
            .map_err(broker_failure)?
            .ok_or_else(|| {
                Failure::new(
                    code::TOPIC_NOT_EXIST,
                    format!("Topic {topic} does not exist"),
                )
            })?;
        let resets: Vec<(u32, u64)> = if let Ok(queue_id) = u32::try_from(queue_id) {
            let min = self.broker.reader().min_offset(&topic, queue_id);
            let max = self.broker.reader().max_offset(&topic, queue_id);
            let target = match offset {
                Some(offset) => match u64::try_from(offset) {
                    Ok(o) if o >= min && o <= max.saturating_add(1) => o,
                    _ => {
                        return Err(Failure::system(format!(
                            "Target offset {offset} not in consume queue range [{min}-{max}]"
                        )))
                    }
                },
                None => {
                    let timestamp = timestamp.ok_or(HeaderError::Missing { field: "timestamp" })?;
                    if timestamp < 0 {
                        max
                    } else {
                        self.broker
                            .reader()
                            .search_offset_by_timestamp(
                                &topic,
                                queue_id,
                                timestamp,
                                StoreBoundary::Lower,
                            )
                            .map_err(|e| broker_failure(e.into()))?
                    }
                }
            };
            self.broker
                .reset_offset(&group, &topic, queue_id, target)
                .await
                .map_err(broker_failure)?;
            vec![(queue_id, target)]
        } else {
            let timestamp = timestamp.ok_or(HeaderError::Missing { field: "timestamp" })?;
            if config.read_queue_nums == 0 {
                return Err(Failure::system("No queues to reset."));
            }
            self.broker
                .reset_offset_by_time(&group, &topic, timestamp)
                .await
                .map_err(broker_failure)?
        };
        info!(group = %group, topic = %topic, queues = resets.len(), "consumer offsets reset by admin request");
        let broker_name = self.broker.config().broker_name.clone();
        let body = ResetOffsetBody {
            offset_table: resets
                .into_iter()
                .map(|(queue_id, offset)| {
                    (
                        WireQueue {
                            topic: topic.clone(),
                            broker_name: broker_name.clone(),
                            queue_id: clamp_i32(queue_id),
                        },
                        clamp_i64(offset),
                    )
                })
                .collect(),
        };
        Ok(success().with_body(body.encode()))
    }
}
