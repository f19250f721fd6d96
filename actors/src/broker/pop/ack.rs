//! Acknowledging popped messages (ACK_MESSAGE, BATCH_ACK_MESSAGE), changing their invisible
//! time (CHANGE_MESSAGE_INVISIBLETIME), and NOTIFICATION, which tells a waiting client there is
//! something to pop.

use super::actor::{Ack, Acked, ChangeInvisible, OrderlyBlocked};
use super::{PopRequest, SourcesFor};
use crate::broker::handle::{mailbox, BrokerHandle};
use crate::broker::long_poll::WakeQueue;
use crate::broker_api::{BrokerError, ExpressionType};
use crate::logic::delay::RETRY_TOPIC_PREFIX;
use crate::logic::pop::{initial_pop_offset, PopMode, Receipt};
use crate::logic::queue::GroupQueue;
use skiff_storage::metadata::TopicConfig;
use std::time::Duration;

impl BrokerHandle {
    /// ACK_MESSAGE (and each entry of BATCH_ACK_MESSAGE): `topic` is the topic the message was
    /// read from (the receipt's kind resolved). Answers whether the message was still held; an
    /// acknowledgement of one already revived is accepted and changes nothing, as in Java.
    pub async fn ack_popped(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        queue_offset: u64,
        receipt: &Receipt,
    ) -> Result<bool, BrokerError> {
        Self::check_names(group, topic)?;
        let acked = self
            .pop_actor()
            .send(Ack {
                queue: GroupQueue::new(group, topic, queue_id),
                mode: receipt.mode(),
                offset: queue_offset,
                pop_time_ms: receipt.pop_time_ms,
            })
            .await
            .map_err(mailbox("pop"))??;
        match acked {
            Acked::NotHeld => Ok(false),
            Acked::Held => Ok(true),
            Acked::MovesOffset(offset) => {
                self.commit(group, topic, queue_id, offset).await?;
                // A pop held on the queue while it was blocked can go on now.
                self.inner.addrs.long_poll.do_send(WakeQueue {
                    topic: topic.to_owned(),
                    queue_id,
                });
                Ok(true)
            }
        }
    }

    /// CHANGE_MESSAGE_INVISIBLETIME: the message stays invisible `invisible_ms` from now.
    /// Answers the pop time and invisible time its new receipt carries.
    pub async fn change_invisible_time(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        queue_offset: u64,
        receipt: &Receipt,
        invisible_ms: i64,
    ) -> Result<(i64, i64), BrokerError> {
        Self::check_names(group, topic)?;
        let now = self.inner.clock.now_ms();
        self.pop_actor()
            .send(ChangeInvisible {
                queue: GroupQueue::new(group, topic, queue_id),
                mode: receipt.mode(),
                offset: queue_offset,
                pop_time_ms: receipt.pop_time_ms,
                batch_start_offset: receipt.checkpoint_offset,
                now_ms: now,
                invisible_ms,
            })
            .await
            .map_err(mailbox("pop"))??;
        // A message no longer held (acknowledged, revived) is left so; the answer is the same,
        // as Java's is.
        Ok(match receipt.mode() {
            // An orderly receipt keeps its pop time: the batch is still that pop's.
            PopMode::Orderly => (
                receipt.pop_time_ms,
                now.saturating_add(invisible_ms)
                    .saturating_sub(receipt.pop_time_ms),
            ),
            PopMode::Unordered => (now, invisible_ms),
        })
    }

    /// NOTIFICATION: whether the group has something to pop in the request's queues or its pop
    /// retry topic; when not, waits up to `poll` for an arrival and looks once more.
    pub async fn pop_notification(
        &self,
        group: &str,
        topic: &str,
        queue_id: Option<u32>,
        orderly: bool,
        poll: Duration,
    ) -> Result<bool, BrokerError> {
        let config = self.pop_topic(topic)?;
        self.pop_group(group)?;
        let request = PopRequest {
            group: group.to_owned(),
            topic: topic.to_owned(),
            queue_id,
            max_messages: 1,
            invisible_ms: 0,
            poll,
            from_min: false,
            expression_type: ExpressionType::Tag,
            expression: None,
            orderly,
        };
        let found = self.has_message(&request, &config).await?;
        if found || poll.is_zero() {
            return Ok(found);
        }
        self.wait_for_arrival(&request, &config, poll).await?;
        self.has_message(&request, &config).await
    }

    async fn has_message(
        &self,
        request: &PopRequest,
        config: &TopicConfig,
    ) -> Result<bool, BrokerError> {
        let now = self.inner.clock.now_ms();
        for (source, queue_id) in self.pop_sources(request, config, false, SourcesFor::Reading)? {
            let max = self.inner.reader.max_offset(&source, queue_id);
            let offset = match self
                .stored_offset(&request.group, &source, queue_id)
                .await?
            {
                Some(offset) => offset,
                None => initial_pop_offset(
                    request.from_min,
                    source.starts_with(RETRY_TOPIC_PREFIX),
                    self.inner.reader.min_offset(&source, queue_id),
                    max,
                ),
            };
            if max <= offset {
                continue;
            }
            let blocked = request.mode() == PopMode::Orderly
                && self
                    .pop_actor()
                    .send(OrderlyBlocked {
                        queue: GroupQueue::new(&request.group, &source, queue_id),
                        now_ms: now,
                    })
                    .await
                    .map_err(mailbox("pop"))?;
            if !blocked {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
