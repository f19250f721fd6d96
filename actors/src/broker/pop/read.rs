//! One queue of one pop: the claim that keeps other pops of the group off it, where the group
//! pops from, the filtered read and its offset correction, the hand-out to the [`PopActor`] and
//! the commit; retried messages are rewritten to the consumer's topic with their receipt.

use super::actor::{Claim, ClaimQueue, HandOut, NextOffsets, PopActor, ReleaseQueue};
use super::{PopAnswer, PopRequest, PopRound, QueueRead};
use crate::broker::consumer_offsets::{PopStart, QueryOffset, QueryOffsets, TakePopStart};
use crate::broker::handle::{mailbox, BrokerHandle};
use crate::broker_api::BrokerError;
use crate::logic::delay::RETRY_TOPIC_PREFIX;
use crate::logic::pop::{initial_pop_offset, PopMode, Receipt, TopicKind};
use crate::logic::queue::GroupQueue;
use actix::prelude::*;
use bytes::Bytes;
use skiff_storage::message::property::POP_CK;
use skiff_storage::message::{decode_records, encode_record, with_properties, MessageToAppend};
use skiff_storage::store::ReadStatus;

/// A queue claimed for one pop ([`Claim::Claimed`]); dropped, however the pop ends, it frees
/// the queue, unless the pop's hand-out freed it already.
struct QueueClaim {
    actor: Addr<PopActor>,
    queue: Option<GroupQueue>,
}

impl Drop for QueueClaim {
    fn drop(&mut self) {
        if let Some(queue) = self.queue.take() {
            // Queued behind every claim sent before it, so the queue is never freed early; an
            // actor gone (shutdown) has no claims left to free.
            self.actor.do_send(ReleaseQueue { queue });
        }
    }
}

impl BrokerHandle {
    /// Messages of a queue the group has not popped yet; `next` is where the group's last pop
    /// of it ended, when the pop actor knows it.
    pub(super) async fn backlog(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        next: Option<u64>,
    ) -> Result<u64, BrokerError> {
        let max = self.inner.reader.max_offset(topic, queue_id);
        let offset = match next {
            Some(next) => next,
            None => self
                .stored_offset(group, topic, queue_id)
                .await?
                .unwrap_or(0),
        };
        Ok(max.saturating_sub(offset))
    }

    /// Where the group's next pop of each queue reads: where its last pop ended while the stored
    /// offset lags behind it, else the stored offset (`None` for a queue the group never
    /// popped). One look at the pop actor and at most one at the offsets for all of them.
    pub(super) async fn next_offsets(
        &self,
        queues: Vec<GroupQueue>,
    ) -> Result<Vec<(GroupQueue, Option<u64>)>, BrokerError> {
        if queues.is_empty() {
            return Ok(Vec::new());
        }
        let nexts = self
            .pop_actor()
            .send(NextOffsets { queues })
            .await
            .map_err(mailbox("pop"))?;
        self.or_stored_offsets(nexts).await
    }

    /// Fills in the stored offset of each queue the pop actor had no position for, in one look
    /// at the offsets.
    pub(super) async fn or_stored_offsets(
        &self,
        mut nexts: Vec<(GroupQueue, Option<u64>)>,
    ) -> Result<Vec<(GroupQueue, Option<u64>)>, BrokerError> {
        let (idle, slots): (Vec<usize>, Vec<GroupQueue>) = nexts
            .iter()
            .enumerate()
            .filter(|(_, (_, next))| next.is_none())
            .map(|(i, (queue, _))| (i, queue.clone()))
            .unzip();
        if slots.is_empty() {
            return Ok(nexts);
        }
        let stored = self
            .inner
            .addrs
            .offsets
            .send(QueryOffsets { slots })
            .await
            .map_err(mailbox("consumer offsets"))??;
        for (i, offset) in idle.into_iter().zip(stored) {
            nexts[i].1 = offset;
        }
        Ok(nexts)
    }

    pub(super) async fn stored_offset(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
    ) -> Result<Option<u64>, BrokerError> {
        self.inner
            .addrs
            .offsets
            .send(QueryOffset {
                slot: GroupQueue::new(group, topic, queue_id),
            })
            .await
            .map_err(mailbox("consumer offsets"))?
    }

    /// Where the group pops a queue from: a pending admin reset, where its last pop ended
    /// (`next`, while the stored offset lags behind it), its stored offset, or where a new group
    /// starts (committed, as Java does, so the start does not move as messages arrive).
    async fn pop_offset(
        &self,
        request: &PopRequest,
        topic: &str,
        queue_id: u32,
        next: Option<u64>,
    ) -> Result<u64, BrokerError> {
        if let Some(next) = next.filter(|_| !self.inner.pending_resets.any()) {
            // The queue is being popped and no reset waits: no need to ask the offsets.
            return Ok(next);
        }
        let slot = GroupQueue::new(&request.group, topic, queue_id);
        let start = self
            .inner
            .addrs
            .offsets
            .send(TakePopStart { slot })
            .await
            .map_err(mailbox("consumer offsets"))??;
        let stored = match start {
            PopStart::Reset(reset) => {
                // An admin reset (Java's `resetPopOffset`): pops continue from it.
                tracing::info!(group = %request.group, topic, queue_id, offset = reset, "pop takes a pending admin reset");
                self.commit(&request.group, topic, queue_id, reset).await?;
                return Ok(reset);
            }
            PopStart::Stored(stored) => stored,
        };
        if let Some(offset) = next.or(stored) {
            return Ok(offset);
        }
        let reader = &self.inner.reader;
        let offset = initial_pop_offset(
            request.from_min,
            topic.starts_with(RETRY_TOPIC_PREFIX),
            reader.min_offset(topic, queue_id),
            reader.max_offset(topic, queue_id),
        );
        self.commit(&request.group, topic, queue_id, offset).await?;
        Ok(offset)
    }

    /// Pops one queue; the positions its claim looked ahead at are added to `known`.
    pub(super) async fn pop_queue(
        &self,
        round: &PopRound<'_>,
        read: QueueRead<'_>,
        answer: &mut PopAnswer,
        body: &mut Vec<u8>,
        known: &mut Vec<(GroupQueue, Option<u64>)>,
    ) -> Result<(), BrokerError> {
        let QueueRead {
            topic,
            queue_id,
            left,
            look_ahead,
        } = read;
        let request = round.request;
        let queue = GroupQueue::new(&request.group, topic, queue_id);
        let (claim, ahead) = self
            .pop_actor()
            .send(ClaimQueue {
                queue: queue.clone(),
                mode: request.mode(),
                now_ms: round.pop_time_ms,
                look_ahead,
            })
            .await
            .map_err(mailbox("pop"))?;
        known.extend(ahead);
        let (mut claim, next) = match claim {
            // Nothing can cut the pop short between the answer and the guard: no await.
            Claim::Claimed { next } => (
                QueueClaim {
                    actor: self.pop_actor().clone(),
                    queue: Some(queue.clone()),
                },
                next,
            ),
            Claim::Busy { next } => {
                // Another pop of the group holds this queue; Java skips it the same way.
                answer.rest += self.backlog(&request.group, topic, queue_id, next).await?;
                return Ok(());
            }
            Claim::Blocked { visible_at_ms } => {
                answer.blocked_until_ms = Some(
                    answer
                        .blocked_until_ms
                        .map_or(visible_at_ms, |t| t.min(visible_at_ms)),
                );
                return Ok(());
            }
        };
        let mut offset = self.pop_offset(request, topic, queue_id, next).await?;
        let is_retry = topic != request.topic;
        let mut filters = round.subscription.store_filters();
        if is_retry {
            // Retried messages are revived copies of popped ones: they passed the filter already.
            filters = filters.none();
        }
        let reader = &self.inner.reader;
        let max_bytes = self.inner.config.max_pull_bytes;
        let read_at = |offset: u64| {
            reader.read_filtered(
                topic,
                queue_id,
                offset,
                left as u32,
                max_bytes,
                filters.tag_codes(),
                filters.properties(),
            )
        };
        let mut read = read_at(offset)?;
        if matches!(
            read.status,
            ReadStatus::OffsetTooSmall | ReadStatus::OffsetOverflowBadly
        ) {
            // The stored offset is outside the queue (retention, a deleted topic): Java commits
            // where the store says to continue and reads again.
            tracing::warn!(group = %request.group, topic, queue_id, offset, next = read.next_begin_offset, "pop offset corrected");
            offset = read.next_begin_offset;
            self.commit(&request.group, topic, queue_id, offset).await?;
            read = read_at(offset)?;
        }
        answer.rest += read.max_offset.saturating_sub(read.next_begin_offset);
        if read.records.is_empty() && read.next_begin_offset <= offset {
            return Ok(());
        }
        if read.records.is_empty() && request.mode() == PopMode::Orderly {
            // Everything read was filtered out: nothing to hold, the group moves on.
            self.commit(&request.group, topic, queue_id, read.next_begin_offset)
                .await?;
            return Ok(());
        }
        // Unordered: the pop actor moves the offset past what it holds (and past what was
        // filtered out), never past a checkpoint it has not written and nobody acknowledged.
        let offsets = read.offsets;
        // The hand-out frees the queue: the claim need not.
        claim.queue = None;
        let counts = self
            .pop_actor()
            .send(HandOut {
                queue,
                mode: request.mode(),
                offsets: offsets.clone(),
                batch_start_offset: offset,
                next_offset: read.next_begin_offset,
                pop_time_ms: round.pop_time_ms,
                invisible_ms: request.invisible_ms,
            })
            .await
            .map_err(mailbox("pop"))??;
        if request.mode() == PopMode::Orderly {
            answer
                .offset_info
                .add_order_counts(topic, queue_id, &counts);
        }
        // The offset info must list exactly the messages in the body, in body order.
        let read_count = offsets.len() as u64;
        let sent = if is_retry {
            self.append_retried(round, offset, &read.records, body)?
        } else {
            body.extend_from_slice(&read.records);
            offsets
        };
        if sent.is_empty() {
            return Ok(());
        }
        answer.message_count += sent.len();
        answer.offset_info.add_queue(topic, queue_id, offset, sent);
        self.inner
            .metrics
            .record_pulled(&request.group, topic, queue_id, read_count);
        Ok(())
    }

    /// Retried messages go out under the consumer's topic, with their receipt already set, as
    /// Java's broker answers them (`popResponseReturnActualRetryTopic` false).
    fn append_retried(
        &self,
        round: &PopRound<'_>,
        start_offset: u64,
        records: &Bytes,
        body: &mut Vec<u8>,
    ) -> Result<Vec<u64>, BrokerError> {
        let request = round.request;
        let mut kept = Vec::new();
        let messages =
            decode_records(records.clone()).map_err(|source| BrokerError::UnreadableMessage {
                topic: request.topic.clone(),
                queue_id: 0,
                queue_offset: start_offset,
                source,
            })?;
        for message in messages {
            let receipt = Receipt {
                checkpoint_offset: start_offset,
                pop_time_ms: round.pop_time_ms,
                invisible_ms: request.invisible_ms,
                revive_queue_id: round.revive_queue_id,
                kind: TopicKind::of(&message.topic),
                broker_name: round.broker_name.to_owned(),
                queue_id: message.queue_id,
                queue_offset: Some(message.queue_offset),
            };
            let properties = if message.property(POP_CK).is_some() {
                message.properties.clone()
            } else {
                with_properties(&message.properties, &[(POP_CK, &receipt.to_string())])
            };
            let rewritten = MessageToAppend {
                topic: request.topic.clone(),
                properties,
                ..MessageToAppend::copy_of(&message)
            };
            let before = body.len();
            if let Err(e) = encode_record(
                &rewritten,
                message.queue_offset,
                message.physical_offset,
                message.store_timestamp,
                message.store_host,
                body,
            ) {
                // Only this message is left out (as Java does); it is revived when invisible.
                body.truncate(before);
                tracing::warn!(group = %request.group, topic = %message.topic, offset = message.queue_offset, error = &e as &dyn std::error::Error, "retried message left out of a pop: it does not re-encode");
                continue;
            }
            kept.push(message.queue_offset);
        }
        Ok(kept)
    }
}
