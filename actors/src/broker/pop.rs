//! Pop consumption on the broker handle (`docs/wire-protocol.md` §4.6, `docs/offset-lifecycle.md`
//! §1.H): POP_MESSAGE, its acknowledgements and invisible-time changes, NOTIFICATION, and the
//! broker-side assignment (QUERY_ASSIGNMENT, SET_MESSAGE_REQUEST_MODE) that tells a client
//! whether to pull or pop.
//!
//! A pop reads from the group's offset like a pull, but the broker, not the client, owns what
//! happens next: the group's offset moves past the popped messages at once, and each message is
//! held invisible by a checkpoint in the [`InvisibilityActor`] until it is acknowledged or its
//! invisible time passes and it is revived into the group's pop retry topic. An orderly pop
//! instead leaves the offset where it is and blocks the queue until the batch is acknowledged.

use crate::broker::consumer_offsets::{QueryOffset, TakePendingReset};
use crate::broker::handle::{mailbox, BrokerHandle};
use crate::broker::invisibility::{
    AckPopped, ChangeInvisible, HoldPopped, InvisibilityActor, OrderlyAck, OrderlyBlocked,
    OrderlyChangeInvisible, OrderlyHandOut,
};
use crate::broker::long_poll::{ParkPull, WakeQueue};
use crate::broker::retry::copy_of;
use crate::broker_api::{BrokerError, ExpressionType, InvalidSelector};
use crate::logic::allocate::{allocate, pop_share_assignment, AllocateStrategy};
use crate::logic::delay::RETRY_TOPIC_PREFIX;
use crate::logic::filter::Subscription;
use crate::logic::pop::{
    initial_pop_offset, pop_retry_topic, OffsetInfo, Receipt, ORDER_REVIVE_QUEUE,
    POP_RETRY_QUEUE_NUMS, REVIVE_QUEUE_NUM,
};
use crate::logic::queue::GroupQueue;
use crate::logic::queue::MessageQueue;
use actix::Addr;
use bytes::Bytes;
use skiff_storage::message::property::POP_CK;
use skiff_storage::message::{decode_records, encode_record, record_layouts, with_properties};
use skiff_storage::metadata::TopicConfig;
use skiff_storage::offset_table::OffsetKey;
use skiff_storage::pop_state::{
    Checkpoint, CheckpointKey, CheckpointTimes, RequestMode, RequestModeEntry,
};
use skiff_storage::store::ReadStatus;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;
use tokio::sync::oneshot;

/// One POP_MESSAGE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopRequest {
    pub group: String,
    pub topic: String,
    /// `None`: every queue of the topic (the client's queue id -1).
    pub queue_id: Option<u32>,
    pub max_messages: u32,
    pub invisible_ms: i64,
    /// How long to wait for a message when none is there; zero answers at once.
    pub poll: Duration,
    /// A group without an offset starts at the oldest message (init mode MIN), else the newest.
    pub from_min: bool,
    pub expression_type: ExpressionType,
    pub expression: Option<String>,
    pub orderly: bool,
}

/// What a pop found. No records means nothing was there within the poll time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopAnswer {
    pub pop_time_ms: i64,
    pub invisible_ms: i64,
    pub revive_queue_id: i32,
    /// Messages left in the queues read, after this pop.
    pub rest: u64,
    pub offset_info: OffsetInfo,
    /// Stored records back to back; retried ones rewritten to the consumer's topic and carrying
    /// their receipt, as Java's broker answers them.
    pub records: Bytes,
    pub message_count: usize,
}

/// How long a pop that saw unread messages (a busy queue) waits before it looks again.
const BUSY_RETRY: Duration = Duration::from_millis(50);

/// What QUERY_ASSIGNMENT answers for one topic of this broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub mode: RequestMode,
    /// `None`: every queue, popped as one (the client's queue id -1).
    pub queue_ids: Vec<Option<u32>>,
}

/// Whether queues are listed to read them now or to wait for an arrival in them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SourcesFor {
    Reading,
    Waiting,
}

/// Everything about a pop that does not change from queue to queue.
struct PopRound<'a> {
    request: &'a PopRequest,
    subscription: Subscription,
    pop_time_ms: i64,
    revive_queue_id: i32,
    broker_name: &'a str,
}

/// Marks a queue as being popped, so two pops of one group never read the same offset; dropped,
/// the queue is free again.
struct QueueBusy<'a> {
    handle: &'a BrokerHandle,
    slot: GroupQueue,
}

impl Drop for QueueBusy<'_> {
    fn drop(&mut self) {
        self.handle
            .inner
            .pops_in_progress
            .borrow_mut()
            .remove(&self.slot);
    }
}

/// Resolves when any of the parked waits is woken (or its actor went away).
async fn any_woken(mut waits: Vec<oneshot::Receiver<()>>) {
    std::future::poll_fn(|cx| {
        for wait in waits.iter_mut() {
            if Pin::new(wait).poll(cx).is_ready() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    })
    .await
}

impl BrokerHandle {
    fn invisibility(&self) -> &Addr<InvisibilityActor> {
        &self.inner.addrs.invisibility
    }

    fn pop_topic(&self, topic: &str) -> Result<TopicConfig, BrokerError> {
        self.inner
            .registry
            .topic(topic)?
            .ok_or_else(|| BrokerError::TopicNotExist {
                topic: topic.to_owned(),
            })
    }

    /// Refuses names the offset table and the checkpoint keys cannot hold (empty, `@`, NUL).
    fn check_names(group: &str, topic: &str) -> Result<(), BrokerError> {
        if OffsetKey::new(topic, group).is_valid() {
            return Ok(());
        }
        Err(BrokerError::InvalidRequest {
            reason: format!("group {group:?} or topic {topic:?} is not a valid name"),
        })
    }

    fn pop_group(&self, group: &str) -> Result<(), BrokerError> {
        self.inner
            .registry
            .group_or_create(group)?
            .map(|_| ())
            .ok_or_else(|| BrokerError::SubscriptionGroupNotExist {
                group: group.to_owned(),
            })
    }

    /// POP_MESSAGE: up to `max_messages` from the request's queues and the group's pop retry
    /// topic; when nothing is there, waits up to the poll time for an arrival and looks once more.
    pub async fn pop(&self, request: PopRequest) -> Result<PopAnswer, BrokerError> {
        Self::check_names(&request.group, &request.topic)?;
        let topic = self.pop_topic(&request.topic)?;
        if let Some(queue_id) = request.queue_id {
            if queue_id >= topic.read_queue_nums {
                return Err(BrokerError::InvalidRequest {
                    reason: format!(
                        "queueId[{queue_id}] is illegal, topic:[{}] topicConfig.readQueueNums:[{}]",
                        topic.name, topic.read_queue_nums
                    ),
                });
            }
        }
        self.pop_group(&request.group)?;
        let expression = request.expression.clone().unwrap_or_else(|| "*".to_owned());
        let subscription = Subscription::new(
            request.topic.clone(),
            request.expression_type,
            &expression,
            0,
        )
        .map_err(|error| BrokerError::SubscriptionParseFailed {
            group: request.group.clone(),
            topic: request.topic.clone(),
            source: Box::new(InvalidSelector { expression, error }),
        })?;
        let first = self
            .pop_once_detached(&request, &topic, &subscription)
            .await?;
        if first.message_count > 0 || request.poll.is_zero() {
            return Ok(first);
        }
        // Messages are there but were not read (a queue busy with another pop of the group, the
        // byte limit): look again soon rather than wait for an arrival.
        let hold = if first.rest > 0 {
            request.poll.min(BUSY_RETRY)
        } else {
            request.poll
        };
        tracing::trace!(group = %request.group, topic = %request.topic, "pop parked");
        self.wait_for_arrival(&request, &topic, hold).await?;
        self.pop_once_detached(&request, &topic, &subscription)
            .await
    }

    /// Waits up to `hold` for a message to arrive in any queue a pop of `request` reads (the
    /// pop retry topic's too, even before it exists).
    async fn wait_for_arrival(
        &self,
        request: &PopRequest,
        topic: &TopicConfig,
        hold: Duration,
    ) -> Result<(), BrokerError> {
        let mut waits = Vec::new();
        for (source, queue_id) in self.pop_sources(request, topic, false, SourcesFor::Waiting)? {
            let offset = self.inner.reader.max_offset(&source, queue_id);
            let park = ParkPull {
                topic: source,
                queue_id,
                offset,
            };
            waits.push(
                self.inner
                    .addrs
                    .long_poll
                    .send(park)
                    .await
                    .map_err(mailbox("long poll"))?,
            );
        }
        // Woken, timed out, or the long-poll actor went away: the caller looks once more.
        let _ = tokio::time::timeout(hold, any_woken(waits)).await;
        Ok(())
    }

    /// One [`Self::pop_once`] that runs to its end even when the caller goes away (a client
    /// closing its connection): once checkpoints are held, the offset must move past them, or
    /// the messages would be both popped again and revived.
    async fn pop_once_detached(
        &self,
        request: &PopRequest,
        topic: &TopicConfig,
        subscription: &Subscription,
    ) -> Result<PopAnswer, BrokerError> {
        let this = self.clone();
        let (request, topic, subscription) = (request.clone(), topic.clone(), subscription.clone());
        actix::spawn(async move { this.pop_once(&request, &topic, subscription).await })
            .await
            .map_err(|_| BrokerError::Closed {
                what: "the pop task",
            })?
    }

    /// The queues one pop reads, in order: the topic's (from a random one when all are asked
    /// for) and the pop retry topic's, the retry topic first one time in five (Java's
    /// `popFromRetryProbability`); never the retry topic for an orderly pop.
    fn pop_sources(
        &self,
        request: &PopRequest,
        topic: &TopicConfig,
        retry_first: bool,
        purpose: SourcesFor,
    ) -> Result<Vec<(String, u32)>, BrokerError> {
        let queues = topic.read_queue_nums.max(1);
        let start = rand::random::<u32>() % queues;
        let mut main: Vec<(String, u32)> = match request.queue_id {
            Some(queue_id) => vec![(request.topic.clone(), queue_id)],
            None => (0..queues)
                .map(|i| (request.topic.clone(), (start + i) % queues))
                .collect(),
        };
        if request.orderly {
            return Ok(main);
        }
        let retry_topic = pop_retry_topic(&request.group, &request.topic);
        // A wait also watches a retry topic not created yet: the first revival creates it.
        let retry_queues = match self.inner.registry.topic(&retry_topic)? {
            Some(config) => config.read_queue_nums,
            None if purpose == SourcesFor::Waiting => POP_RETRY_QUEUE_NUMS,
            None => 0,
        };
        let retry: Vec<(String, u32)> = (0..retry_queues)
            .map(|q| (retry_topic.clone(), q))
            .collect();
        Ok(if retry_first {
            retry.into_iter().chain(main).collect()
        } else {
            main.extend(retry);
            main
        })
    }

    async fn pop_once(
        &self,
        request: &PopRequest,
        topic: &TopicConfig,
        subscription: Subscription,
    ) -> Result<PopAnswer, BrokerError> {
        let revive_queue_id = if request.orderly {
            ORDER_REVIVE_QUEUE
        } else {
            let n = self.inner.pop_counter.get();
            self.inner.pop_counter.set(n.wrapping_add(1));
            (n % REVIVE_QUEUE_NUM as u64) as i32
        };
        let round = PopRound {
            request,
            subscription,
            pop_time_ms: self.inner.clock.now_ms(),
            revive_queue_id,
            broker_name: &self.inner.config.broker_name,
        };
        let retry_first = rand::random::<u32>() % 100 < crate::logic::pop::POP_FROM_RETRY_PERCENT;
        let mut answer = PopAnswer {
            pop_time_ms: round.pop_time_ms,
            invisible_ms: request.invisible_ms,
            revive_queue_id,
            rest: 0,
            offset_info: OffsetInfo::default(),
            records: Bytes::new(),
            message_count: 0,
        };
        let mut body = Vec::new();
        for (source, queue_id) in
            self.pop_sources(request, topic, retry_first, SourcesFor::Reading)?
        {
            let left = request.max_messages as usize
                - answer.message_count.min(request.max_messages as usize);
            if left == 0 {
                answer.rest += self.backlog(&request.group, &source, queue_id).await?;
                continue;
            }
            self.pop_queue(&round, &source, queue_id, left, &mut answer, &mut body)
                .await?;
        }
        answer.records = Bytes::from(body);
        Ok(answer)
    }

    /// Messages of a queue the group has not popped yet.
    async fn backlog(&self, group: &str, topic: &str, queue_id: u32) -> Result<u64, BrokerError> {
        let max = self.inner.reader.max_offset(topic, queue_id);
        let offset = self
            .stored_offset(group, topic, queue_id)
            .await?
            .unwrap_or(0);
        Ok(max.saturating_sub(offset))
    }

    async fn stored_offset(
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

    /// Where the group pops a queue from: its offset, or where a new group starts (committed,
    /// as Java does, so the start does not move as messages arrive).
    async fn pop_offset(
        &self,
        request: &PopRequest,
        topic: &str,
        queue_id: u32,
    ) -> Result<u64, BrokerError> {
        let slot = GroupQueue::new(&request.group, topic, queue_id);
        let reset = self
            .inner
            .addrs
            .offsets
            .send(TakePendingReset { slot })
            .await
            .map_err(mailbox("consumer offsets"))?;
        if let Some(reset) = reset {
            // An admin reset (Java's `resetPopOffset`): pops continue from it.
            tracing::info!(group = %request.group, topic, queue_id, offset = reset, "pop takes a pending admin reset");
            self.commit(&request.group, topic, queue_id, reset).await?;
            return Ok(reset);
        }
        if let Some(offset) = self.stored_offset(&request.group, topic, queue_id).await? {
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

    async fn pop_queue(
        &self,
        round: &PopRound<'_>,
        topic: &str,
        queue_id: u32,
        left: usize,
        answer: &mut PopAnswer,
        body: &mut Vec<u8>,
    ) -> Result<(), BrokerError> {
        let request = round.request;
        let slot = GroupQueue::new(&request.group, topic, queue_id);
        if !self
            .inner
            .pops_in_progress
            .borrow_mut()
            .insert(slot.clone())
        {
            // Another pop of the group holds this queue; Java skips it the same way.
            answer.rest += self.backlog(&request.group, topic, queue_id).await?;
            return Ok(());
        }
        let _busy = QueueBusy { handle: self, slot };
        let queue = GroupQueue {
            group: request.group.clone(),
            topic: topic.to_owned(),
            queue_id,
        };
        if request.orderly
            && self
                .invisibility()
                .send(OrderlyBlocked {
                    queue: queue.clone(),
                    now_ms: round.pop_time_ms,
                })
                .await
                .map_err(mailbox("invisibility"))?
        {
            return Ok(());
        }
        let mut offset = self.pop_offset(request, topic, queue_id).await?;
        let is_retry = topic != request.topic;
        let (tag_filter, property_filter) = round.subscription.store_filters();
        // Retried messages are revived copies of popped ones: they passed the filter already.
        let (tag_filter, property_filter) = if is_retry {
            (None, None)
        } else {
            (tag_filter, property_filter)
        };
        let reader = &self.inner.reader;
        let max_bytes = self.inner.config.max_pull_bytes;
        let read_at = |offset: u64| {
            reader.read_filtered(
                topic,
                queue_id,
                offset,
                left as u32,
                max_bytes,
                tag_filter.as_ref().map(|f| f as &dyn Fn(i64) -> bool),
                property_filter.as_ref().map(|f| f as &dyn Fn(&str) -> bool),
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
        if read.records.is_empty() {
            if read.next_begin_offset > offset {
                // Everything read was filtered out: nothing to hold, the group moves on.
                self.commit(&request.group, topic, queue_id, read.next_begin_offset)
                    .await?;
            }
            return Ok(());
        }
        let offsets = record_offsets(&read.records, topic, queue_id)?;
        if request.orderly {
            let counts = self
                .invisibility()
                .send(OrderlyHandOut {
                    queue,
                    offsets: offsets.clone(),
                    next_offset: read.next_begin_offset,
                    pop_time_ms: round.pop_time_ms,
                    invisible_ms: request.invisible_ms,
                })
                .await
                .map_err(mailbox("invisibility"))?;
            answer
                .offset_info
                .add_order_counts(topic, queue_id, &counts);
        } else {
            let times = CheckpointTimes {
                pop_time_ms: round.pop_time_ms,
                invisible_ms: request.invisible_ms,
                batch_start_offset: offset,
            };
            let checkpoints = offsets
                .iter()
                .map(|queue_offset| Checkpoint {
                    key: CheckpointKey {
                        group: request.group.clone(),
                        topic: topic.to_owned(),
                        queue_id,
                        queue_offset: *queue_offset,
                    },
                    times,
                })
                .collect();
            // The checkpoints first: an offset past a message with no checkpoint loses it.
            self.invisibility()
                .send(HoldPopped { checkpoints })
                .await
                .map_err(mailbox("invisibility"))??;
            self.commit(&request.group, topic, queue_id, read.next_begin_offset)
                .await?;
        }
        // The offset info must list exactly the messages in the body, in body order.
        let sent = if is_retry {
            self.append_retried(round, offset, &read.records, body)?
        } else {
            body.extend_from_slice(&read.records);
            offsets.clone()
        };
        if sent.is_empty() {
            return Ok(());
        }
        answer.offset_info.add_queue(topic, queue_id, offset, &sent);
        answer.message_count += sent.len();
        self.inner
            .metrics
            .record_pulled(&request.group, topic, queue_id, offsets.len() as u64);
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
                kind: crate::logic::pop::TopicKind::of(&message.topic),
                broker_name: round.broker_name.to_owned(),
                queue_id: message.queue_id,
                queue_offset: Some(message.queue_offset),
            };
            let properties = if message.property(POP_CK).is_some() {
                message.properties.clone()
            } else {
                with_properties(&message.properties, &[(POP_CK, &receipt.to_string())])
            };
            let rewritten = copy_of(
                &message,
                request.topic.clone(),
                message.queue_id,
                message.reconsume_times,
                properties,
            );
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
        if receipt.is_orderly() {
            let commit = self
                .invisibility()
                .send(OrderlyAck {
                    queue: GroupQueue {
                        group: group.to_owned(),
                        topic: topic.to_owned(),
                        queue_id,
                    },
                    offset: queue_offset,
                    pop_time_ms: receipt.pop_time_ms,
                })
                .await
                .map_err(mailbox("invisibility"))?;
            if let Some(offset) = commit {
                self.commit(group, topic, queue_id, offset).await?;
                // A pop held on the queue while it was blocked can go on now.
                self.inner.addrs.long_poll.do_send(WakeQueue {
                    topic: topic.to_owned(),
                    queue_id,
                });
            }
            return Ok(commit.is_some());
        }
        self.invisibility()
            .send(AckPopped {
                key: CheckpointKey {
                    group: group.to_owned(),
                    topic: topic.to_owned(),
                    queue_id,
                    queue_offset,
                },
                pop_time_ms: receipt.pop_time_ms,
            })
            .await
            .map_err(mailbox("invisibility"))?
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
        if receipt.is_orderly() {
            let visible_at_ms = now.saturating_add(invisible_ms);
            self.invisibility()
                .send(OrderlyChangeInvisible {
                    queue: GroupQueue {
                        group: group.to_owned(),
                        topic: topic.to_owned(),
                        queue_id,
                    },
                    pop_time_ms: receipt.pop_time_ms,
                    visible_at_ms,
                })
                .await
                .map_err(mailbox("invisibility"))?;
            return Ok((
                receipt.pop_time_ms,
                visible_at_ms.saturating_sub(receipt.pop_time_ms),
            ));
        }
        self.invisibility()
            .send(ChangeInvisible {
                key: CheckpointKey {
                    group: group.to_owned(),
                    topic: topic.to_owned(),
                    queue_id,
                    queue_offset,
                },
                times: CheckpointTimes {
                    pop_time_ms: now,
                    invisible_ms,
                    batch_start_offset: receipt.checkpoint_offset,
                },
            })
            .await
            .map_err(mailbox("invisibility"))??;
        // A message no longer held (acknowledged, revived) is left so; the answer is the same,
        // as Java's is.
        Ok((now, invisible_ms))
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
            let blocked = request.orderly
                && self
                    .invisibility()
                    .send(OrderlyBlocked {
                        queue: GroupQueue {
                            group: request.group.clone(),
                            topic: source.clone(),
                            queue_id,
                        },
                        now_ms: now,
                    })
                    .await
                    .map_err(mailbox("invisibility"))?;
            if !blocked {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// SET_MESSAGE_REQUEST_MODE: from now on QUERY_ASSIGNMENT answers `entry` for the group's
    /// queues of `topic`.
    pub fn set_request_mode(
        &self,
        topic: &str,
        group: &str,
        entry: RequestModeEntry,
    ) -> Result<(), BrokerError> {
        if topic.starts_with(RETRY_TOPIC_PREFIX) {
            return Err(BrokerError::InvalidRequest {
                reason: "retry topic is not allowed to set mode".to_owned(),
            });
        }
        self.pop_topic(topic)?;
        self.pop_group(group)?;
        self.inner.pop_state.put_request_mode(topic, group, entry)?;
        tracing::info!(topic, group, mode = ?entry.mode, pop_share_queue_num = entry.pop_share_queue_num, "request mode set");
        Ok(())
    }

    /// QUERY_ASSIGNMENT: the queues of `topic` the broker gives `client_id` and how to read them.
    /// Pull mode (the default, and always for retry topics) splits the queues among the group's
    /// consumers by `strategy`; pop mode gives every consumer every queue as one entry with queue
    /// id -1 per broker, unless `pop_share_queue_num` narrows it. `None` when the topic does not
    /// exist, the group has no consumer online or the strategy is unknown (Java answers no
    /// assignment then).
    pub async fn query_assignment(
        &self,
        topic: &str,
        group: &str,
        client_id: &str,
        strategy_name: &str,
        broadcasting: bool,
    ) -> Result<Option<Assignment>, BrokerError> {
        let Some(config) = self.inner.registry.topic(topic)? else {
            return Ok(None);
        };
        let entry = match self.inner.pop_state.request_mode(topic, group)? {
            Some(entry) if !topic.starts_with(RETRY_TOPIC_PREFIX) => entry,
            _ => RequestModeEntry {
                mode: RequestMode::Pull,
                pop_share_queue_num: 0,
            },
        };
        let broker = &self.inner.config.broker_name;
        let all: Vec<MessageQueue> = (0..config.read_queue_nums)
            .map(|q| MessageQueue::new(topic, broker.as_str(), q))
            .collect();
        let assigned = |queues: Vec<MessageQueue>| Assignment {
            mode: entry.mode,
            queue_ids: queues.into_iter().map(|q| Some(q.queue_id)).collect(),
        };
        if broadcasting {
            return Ok(Some(assigned(all)));
        }
        let Some(strategy) = AllocateStrategy::from_name(strategy_name) else {
            tracing::warn!(
                group,
                topic,
                strategy = strategy_name,
                "query assignment: unsupported strategy"
            );
            return Ok(None);
        };
        // Like Java's broker: no consumer of the group online, no assignment.
        let mut clients = match self.consumer_list(group).await {
            Ok(clients) => clients,
            Err(BrokerError::NoConsumer { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        clients.sort();
        let queues = if entry.mode == RequestMode::Pop {
            let share = entry.pop_share_queue_num;
            match pop_share_assignment(strategy, client_id, &all, &clients, share) {
                Some(queues) => queues,
                None => {
                    return Ok(Some(Assignment {
                        mode: entry.mode,
                        queue_ids: vec![None],
                    }))
                }
            }
        } else {
            allocate(strategy, client_id, &all, &clients)
        };
        Ok(Some(assigned(queues)))
    }
}

/// The queue offset of each record, in order.
fn record_offsets(records: &[u8], topic: &str, queue_id: u32) -> Result<Vec<u64>, BrokerError> {
    let mut offsets = Vec::new();
    for layout in record_layouts(records) {
        let layout = layout.map_err(|source| BrokerError::UnreadableMessage {
            topic: topic.to_owned(),
            queue_id,
            queue_offset: offsets.last().map_or(0, |o| o + 1),
            source,
        })?;
        offsets.push(layout.queue_offset);
    }
    Ok(offsets)
}
