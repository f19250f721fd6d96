//! `skiff admin progress <group>` and `skiff admin reset-offset <group> <topic> --to-time T`: a
//! group's consume progress per queue, and moving its offsets to a point in time (see the
//! [`admin`](super) module doc for the requests each sends).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

use super::{bad, format_time, missing, table, Admin, AdminError, Rendered};
use crate::remoting::body::{ConsumeStats, MessageQueue, ResetOffsetBody};
use crate::remoting::codes::{request as rc, response as code};
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    BoundaryType, CustomHeader, GetConsumeStatsRequestHeader, GetMaxOffsetRequestHeader,
    OffsetResponseHeader, ResetOffsetRequestHeader, SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
};

impl Admin {
    /// GET_CONSUME_STATS (208) on every master. When no broker has a queue for the group, its
    /// settings (201) tell a group without progress yet from one that does not exist.
    pub(super) async fn progress(&self, group: &str) -> Result<Rendered, AdminError> {
        let mut merged = ConsumeStats::default();
        for addr in self.all_masters().await? {
            let request = RemotingCommand::new_request(rc::GET_CONSUME_STATS).with_ext_fields(
                GetConsumeStatsRequestHeader {
                    consumer_group: group.to_owned(),
                    ..Default::default()
                }
                .to_ext(),
            );
            let response = match self.call(&addr, request).await {
                Ok(response) => response,
                Err(AdminError::Remote { code: c, .. })
                    if c == code::SUBSCRIPTION_GROUP_NOT_EXIST =>
                {
                    continue
                }
                Err(e) => return Err(e),
            };
            let stats =
                ConsumeStats::decode(&response.body).map_err(|e| bad(&addr, "consume stats", e))?;
            merged.offset_table.extend(stats.offset_table);
        }
        if merged.offset_table.is_empty() && self.group_configs(group).await?.is_empty() {
            return Err(AdminError::GroupNotExist {
                group: group.to_owned(),
            });
        }
        Ok(progress_table(group, &merged))
    }

    pub(super) async fn reset_offset(
        &self,
        group: &str,
        topic: &str,
        timestamp: i64,
    ) -> Result<Rendered, AdminError> {
        let mut reset = BTreeMap::new();
        for holder in self.topic_masters(topic).await? {
            let addr = holder.addr;
            let request = RemotingCommand::new_request(rc::INVOKE_BROKER_TO_RESET_OFFSET)
                .with_ext_fields(
                    ResetOffsetRequestHeader {
                        topic: topic.to_owned(),
                        group: group.to_owned(),
                        timestamp: Some(timestamp),
                        is_force: true,
                        ..Default::default()
                    }
                    .to_ext(),
                );
            match self.call(&addr, request).await {
                Ok(response) => {
                    let body = ResetOffsetBody::decode(&response.body)
                        .map_err(|e| bad(&addr, "reset answer", e))?;
                    reset.extend(body.offset_table);
                }
                // A Java broker that resets through its online consumers refuses when there
                // are none; then the offsets are written directly, as Java's admin does.
                Err(AdminError::Remote { code: c, .. }) if c == code::CONSUMER_NOT_ONLINE => {
                    reset.extend(self.reset_offline(&addr, group, topic, timestamp).await?);
                }
                Err(e) => return Err(missing(e, Some(topic), Some(group))),
            }
        }
        let rows: Vec<Vec<String>> = reset
            .iter()
            .map(|(mq, offset)| {
                vec![
                    mq.topic.clone(),
                    mq.broker_name.clone(),
                    mq.queue_id.to_string(),
                    offset.to_string(),
                ]
            })
            .collect();
        let mut text = format!(
            "reset group {group} on topic {topic} to {} ({timestamp} ms)\n",
            format_time(timestamp)
        );
        text.push_str(&table(&["TOPIC", "BROKER", "QID", "NEW OFFSET"], &rows));
        let queues: Vec<Value> = reset
            .iter()
            .map(|(mq, offset)| {
                json!({
                    "topic": mq.topic,
                    "broker": mq.broker_name,
                    "queue_id": mq.queue_id,
                    "offset": offset,
                })
            })
            .collect();
        Ok(Rendered {
            text,
            json: json!({
                "group": group,
                "topic": topic,
                "timestamp_ms": timestamp,
                "queues": queues,
            }),
        })
    }
}

impl Admin {
    /// Java's `resetOffsetByTimestampOld`: per queue of the topic the broker has stats for, the
    /// offset at `timestamp` (SEARCH_OFFSET_BY_TIMESTAMP; the end for a negative time) written
    /// with an acknowledged UPDATE_CONSUMER_OFFSET.
    async fn reset_offline(
        &self,
        addr: &str,
        group: &str,
        topic: &str,
        timestamp: i64,
    ) -> Result<BTreeMap<MessageQueue, i64>, AdminError> {
        let request = RemotingCommand::new_request(rc::GET_CONSUME_STATS).with_ext_fields(
            GetConsumeStatsRequestHeader {
                consumer_group: group.to_owned(),
                topic: Some(topic.to_owned()),
                topic_list: Vec::new(),
            }
            .to_ext(),
        );
        let response = self.call(addr, request).await?;
        let stats =
            ConsumeStats::decode(&response.body).map_err(|e| bad(addr, "consume stats", e))?;
        let mut reset = BTreeMap::new();
        for mq in stats.offset_table.keys().filter(|mq| mq.topic == topic) {
            let lookup = if timestamp < 0 {
                RemotingCommand::new_request(rc::GET_MAX_OFFSET).with_ext_fields(
                    GetMaxOffsetRequestHeader {
                        topic: topic.to_owned(),
                        queue_id: mq.queue_id,
                        committed: true,
                    }
                    .to_ext(),
                )
            } else {
                RemotingCommand::new_request(rc::SEARCH_OFFSET_BY_TIMESTAMP).with_ext_fields(
                    SearchOffsetRequestHeader {
                        topic: topic.to_owned(),
                        queue_id: mq.queue_id,
                        timestamp,
                        boundary_type: BoundaryType::Lower,
                    }
                    .to_ext(),
                )
            };
            let response = self.call(addr, lookup).await?;
            let offset = OffsetResponseHeader::from_command(&response)
                .map_err(|e| bad(addr, "offset answer", e))?
                .offset;
            let update = RemotingCommand::new_request(rc::UPDATE_CONSUMER_OFFSET).with_ext_fields(
                UpdateConsumerOffsetRequestHeader {
                    consumer_group: group.to_owned(),
                    topic: topic.to_owned(),
                    queue_id: mq.queue_id,
                    commit_offset: offset,
                }
                .to_ext(),
            );
            self.call(addr, update).await?;
            reset.insert(mq.clone(), offset);
        }
        Ok(reset)
    }
}

fn progress_table(group: &str, stats: &ConsumeStats) -> Rendered {
    let mut rows = Vec::new();
    let mut queues = Vec::new();
    let (mut total_lag, mut total_in_flight) = (0i64, 0i64);
    for (mq, w) in &stats.offset_table {
        let lag = (w.broker_offset - w.consumer_offset).max(0);
        let in_flight = (w.pull_offset - w.consumer_offset).max(0);
        total_lag += lag;
        total_in_flight += in_flight;
        rows.push(vec![
            mq.topic.clone(),
            mq.broker_name.clone(),
            mq.queue_id.to_string(),
            w.broker_offset.to_string(),
            w.consumer_offset.to_string(),
            lag.to_string(),
            in_flight.to_string(),
            if w.last_timestamp > 0 {
                format_time(w.last_timestamp)
            } else {
                "-".to_owned()
            },
        ]);
        queues.push(json!({
            "topic": mq.topic,
            "broker": mq.broker_name,
            "queue_id": mq.queue_id,
            "broker_offset": w.broker_offset,
            "consumer_offset": w.consumer_offset,
            "lag": lag,
            "in_flight": in_flight,
            "last_consume_ms": (w.last_timestamp > 0).then_some(w.last_timestamp),
        }));
    }
    let mut text = format!("consumer group {group}\n");
    if rows.is_empty() {
        text.push_str("no consume progress yet: no committed offset and no subscription\n");
    } else {
        text.push_str(&table(
            &[
                "TOPIC",
                "BROKER",
                "QID",
                "BROKER OFFSET",
                "CONSUMER OFFSET",
                "LAG",
                "IN-FLIGHT",
                "LAST CONSUME TIME (UTC)",
            ],
            &rows,
        ));
        let _ = writeln!(text, "total lag: {total_lag}, in flight: {total_in_flight}");
    }
    Rendered {
        text,
        json: json!({
            "group": group,
            "queues": queues,
            "total_lag": total_lag,
            "in_flight": total_in_flight,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::body::OffsetWrapper;

    #[test]
    fn progress_rows() {
        let mut stats = ConsumeStats::default();
        stats.offset_table.insert(
            MessageQueue {
                topic: "T".into(),
                broker_name: "skiff".into(),
                queue_id: 1,
            },
            OffsetWrapper {
                broker_offset: 10,
                consumer_offset: 4,
                pull_offset: 6,
                last_timestamp: 1_700_000_000_123,
            },
        );
        let rendered = progress_table("g", &stats);
        let text = rendered.text;
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "consumer group g");
        assert!(lines[1].starts_with("TOPIC  BROKER  QID  BROKER OFFSET"));
        let cells: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            cells,
            vec![
                "T",
                "skiff",
                "1",
                "10",
                "4",
                "6",
                "2",
                "2023-11-14",
                "22:13:20.123"
            ]
        );
        assert_eq!(lines[3], "total lag: 6, in flight: 2");
        assert_eq!(rendered.json["queues"][0]["lag"], 6);
        assert_eq!(rendered.json["total_lag"], 6);
    }
}
