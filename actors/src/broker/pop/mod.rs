//! Pop consumption (`docs/wire-protocol.md` §4.6, `docs/offset-lifecycle.md` §1.H): the broker
//! handle's POP_MESSAGE, its acknowledgements and invisible-time changes, NOTIFICATION, and the
//! broker-side assignment (QUERY_ASSIGNMENT, SET_MESSAGE_REQUEST_MODE) that tells a client
//! whether to pull or pop.
//!
//! A pop reads from the group's offset like a pull, but the broker, not the client, owns what
//! happens next: the group's next pop reads past the popped messages at once, and each message
//! is held invisible by a checkpoint until it is acknowledged or its invisible time passes and
//! it is revived into the group's pop retry topic. The stored offset follows as the checkpoints
//! allow (`logic/pop_buffer.rs`). An orderly pop instead leaves the offset where
//! it is and blocks the queue until the batch is acknowledged.
//!
//! - `mod.rs`: a pop's request and answer, the wait for an arrival, the queues a pop reads.
//! - `read.rs`: one queue of one pop: the claim, the offset, the filtered read, the hand-out,
//!   the commit; retried messages rewritten to the consumer's topic.
//! - `ack.rs`: ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, NOTIFICATION.
//! - `assignment.rs`: SET_MESSAGE_REQUEST_MODE and QUERY_ASSIGNMENT.
//! - [`actor`]: [`PopActor`], the one owner of pop state: the queues being popped and where
//!   each pop of them ends, checkpoints (in memory first, written when not acknowledged within
//!   the window, `actor/held.rs` indexes them) and their revival (`actor/revive.rs`), the
//!   offsets of popped queues, orderly blocks, request modes.

mod ack;
pub use ack::{AckRequest, ExpiredReceipt, PoppedAck};
pub mod actor;
mod assignment;
mod read;

use crate::broker::handle::{mailbox, BrokerHandle};
use crate::broker::long_poll::ParkPull;
use crate::broker_api::{BrokerError, ExpressionType, InvalidSelector};
use crate::logic::attributes::priority_factor;
use crate::logic::filter::Subscription;
use crate::logic::pop::{
    pop_retry_topic, OffsetInfo, PopMode, Receipt, TopicKind, ORDER_REVIVE_QUEUE,
    POP_RETRY_QUEUE_NUMS, REVIVE_QUEUE_NUM,
};
use crate::logic::priority::{PopWalk, DEFAULT_PRIORITY_FACTOR};
use crate::logic::queue::GroupQueue;
use crate::refused::{NameKind, NameRule, Refused};
use actix::Addr;
use actor::PopActor;
use bytes::Bytes;
use skiff_storage::message::property::POP_CK;
use skiff_storage::message::StoredMessage;
use skiff_storage::metadata::{TopicConfig, TopicMessageType};
use skiff_storage::offset_table::is_valid_name;
use skiff_storage::pop_state::RequestMode;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
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

impl PopRequest {
    pub fn mode(&self) -> PopMode {
        PopMode::of(self.orderly)
    }
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
    /// The earliest time an orderly queue this pop found blocked (a batch still out) becomes
    /// visible again.
    pub blocked_until_ms: Option<i64>,
}

impl PopAnswer {
    /// The receipt of `message`, one of this answer's records: the one it carries (`POP_CK`,
    /// a retried message), else the one the answer's bookkeeping gives it, as a remoting client
    /// builds it. `None` for a message of a queue the answer did not read.
    pub fn receipt(&self, message: &StoredMessage, broker_name: &str) -> Option<Receipt> {
        if let Some(carried) = message.property(POP_CK) {
            return Receipt::parse(carried).ok();
        }
        let kind = TopicKind::of(&message.topic);
        let share = self
            .offset_info
            .queues
            .iter()
            .find(|q| q.kind == kind && q.queue_id == message.queue_id)?;
        Some(Receipt {
            checkpoint_offset: share.start_offset,
            pop_time_ms: self.pop_time_ms,
            invisible_ms: self.invisible_ms,
            revive_queue_id: self.revive_queue_id,
            kind,
            broker_name: broker_name.to_owned(),
            queue_id: message.queue_id,
            queue_offset: Some(message.queue_offset),
        })
    }

    /// How often `message`, one of this answer's records, was consumed before: for an orderly
    /// pop, how often its queue handed it out (Java's remoting client sets it from the answer's
    /// order counts the same way, when above 0); else what the record says.
    pub fn reconsume_times(&self, message: &StoredMessage) -> i32 {
        let kind = TopicKind::of(&message.topic);
        self.offset_info
            .counts
            .iter()
            .find(|(k, q, o, _)| *k == kind && *q == message.queue_id && *o == message.queue_offset)
            .map(|(.., count)| i32::try_from(*count).unwrap_or(i32::MAX))
            .filter(|count| *count > 0)
            .unwrap_or(message.reconsume_times)
    }
}

/// How long a pop that saw unread messages (a busy queue) waits before it looks again: the ack
/// that frees them wakes nobody.
pub(super) const BUSY_RETRY: Duration = Duration::from_millis(50);

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
    subscription: &'a Subscription,
    pop_time_ms: i64,
    revive_queue_id: i32,
    broker_name: &'a str,
}

/// One queue one pop reads: up to `left` messages; `look_ahead` lists queues whose positions
/// its claim looks up too.
struct QueueRead<'a> {
    topic: &'a str,
    queue_id: u32,
    left: usize,
    look_ahead: Vec<GroupQueue>,
}

/// Resolves when any of the parked waits is woken (or its actor went away).
pub(super) async fn any_woken(mut waits: Vec<oneshot::Receiver<()>>) {
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
    fn pop_actor(&self) -> &Addr<PopActor> {
        &self.inner.addrs.pop
    }

    /// What the pop actor holds: checkpoints in memory and written, acknowledgements, revivals.
    pub async fn observe_pop(&self) -> Result<actor::PopSnapshot, BrokerError> {
        self.pop_actor()
            .send(actor::Observe)
            .await
            .map_err(mailbox("pop"))
    }

    fn pop_topic(&self, topic: &str) -> Result<TopicConfig, BrokerError> {
        self.inner.registry.topic(topic)?.ok_or_else(|| {
            BrokerError::Refused(Refused::TopicNotExist {
                topic: topic.to_owned(),
            })
        })
    }

    /// Refuses names the offset table and the checkpoint keys cannot hold (empty, `@`, NUL).
    fn check_names(group: &str, topic: &str) -> Result<(), BrokerError> {
        for (kind, name) in [(NameKind::Topic, topic), (NameKind::Group, group)] {
            if !is_valid_name(name) {
                return Err(Refused::InvalidName {
                    kind,
                    name: name.to_owned(),
                    rule: NameRule::OffsetKey,
                }
                .into());
            }
        }
        Ok(())
    }

    fn pop_group(&self, group: &str) -> Result<(), BrokerError> {
        if self.inner.registry.has_group(group) {
            return Ok(());
        }
        self.inner
            .registry
            .group_or_create(group)?
            .map(|_| ())
            .ok_or_else(|| {
                BrokerError::Refused(Refused::GroupNotExist {
                    group: group.to_owned(),
                })
            })
    }

    /// POP_MESSAGE: up to `max_messages` from the request's queues and the group's pop retry
    /// topic; when nothing is there, waits up to the poll time for an arrival and looks once more.
    pub async fn pop(&self, request: PopRequest) -> Result<PopAnswer, BrokerError> {
        Self::check_names(&request.group, &request.topic)?;
        let topic = self.pop_topic(&request.topic)?;
        if let Some(queue_id) = request.queue_id {
            if queue_id >= topic.read_queue_nums {
                return Err(Refused::IllegalQueue {
                    topic: topic.name.clone(),
                    queue_id: queue_id.into(),
                    queues: topic.read_queue_nums,
                }
                .into());
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
        .map_err(|error| {
            BrokerError::Refused(Refused::SubscriptionParseFailed {
                group: request.group.clone(),
                topic: request.topic.clone(),
                source: Box::new(InvalidSelector { expression, error }),
            })
        })?;
        let call = Rc::new((request, topic, subscription));
        let first = self.pop_once_detached(call.clone()).await?;
        let (request, topic, _) = &*call;
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
        self.wait_for_arrival(request, topic, hold).await?;
        self.pop_once_detached(call.clone()).await
    }

    /// Waits up to `hold` for a message to arrive in any queue a pop of `request` reads (the
    /// pop retry topic's too, even before it exists).
    async fn wait_for_arrival(
        &self,
        request: &PopRequest,
        topic: &TopicConfig,
        hold: Duration,
    ) -> Result<(), BrokerError> {
        let sources = self.pop_sources(request, topic, PopWalk::ANY_ORDER, SourcesFor::Waiting)?;
        let waits = self.park_on(sources).await?;
        // Woken, timed out, or the long-poll actor went away: the caller looks once more.
        let _ = tokio::time::timeout(hold, any_woken(waits)).await;
        Ok(())
    }

    /// Parks a wait for the next message of each `(topic, queue)`; see [`any_woken`].
    pub(super) async fn park_on(
        &self,
        queues: Vec<(String, u32)>,
    ) -> Result<Vec<oneshot::Receiver<()>>, BrokerError> {
        let mut waits = Vec::with_capacity(queues.len());
        for (topic, queue_id) in queues {
            let offset = self.inner.reader.max_offset(&topic, queue_id);
            let park = ParkPull {
                topic,
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
        Ok(waits)
    }

    /// One [`Self::pop_once`] that runs to its end even when the caller goes away (a client
    /// closing its connection): once checkpoints are held, the offset must move past them, or
    /// the messages would be both popped again and revived.
    async fn pop_once_detached(
        &self,
        call: Rc<(PopRequest, TopicConfig, Subscription)>,
    ) -> Result<PopAnswer, BrokerError> {
        let this = self.clone();
        actix::spawn(async move {
            let (request, topic, subscription) = &*call;
            this.pop_once(request, topic, subscription).await
        })
        .await
        .map_err(|_| BrokerError::Closed {
            what: "the pop task",
        })?
    }

    /// The queues one pop reads, in the order of its `walk`: the topic's (all of them, or the
    /// one asked for) and the pop retry topic's; never the retry topic for an orderly pop.
    fn pop_sources(
        &self,
        request: &PopRequest,
        topic: &TopicConfig,
        walk: PopWalk,
        purpose: SourcesFor,
    ) -> Result<Vec<(String, u32)>, BrokerError> {
        let queues = topic.read_queue_nums.max(1);
        let mut main: Vec<(String, u32)> = match request.queue_id {
            Some(queue_id) => vec![(request.topic.clone(), queue_id)],
            None => walk
                .queue_order(queues, rand::random::<u32>() % queues)
                .into_iter()
                .map(|queue_id| (request.topic.clone(), queue_id))
                .collect(),
        };
        if request.mode() == PopMode::Orderly {
            return Ok(main);
        }
        let retry_topic = pop_retry_topic(&request.group, &request.topic);
        // A wait also watches a retry topic not created yet: the first revival creates it.
        let retry_queues = match self.inner.registry.queue_nums(&retry_topic)? {
            Some((read, _)) => read,
            None if purpose == SourcesFor::Waiting => POP_RETRY_QUEUE_NUMS,
            None => 0,
        };
        let retry: Vec<(String, u32)> = (0..retry_queues)
            .map(|q| (retry_topic.clone(), q))
            .collect();
        Ok(if walk.retry_first {
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
        subscription: &Subscription,
    ) -> Result<PopAnswer, BrokerError> {
        let revive_queue_id = match request.mode() {
            PopMode::Orderly => ORDER_REVIVE_QUEUE,
            PopMode::Unordered => {
                let round = self.inner.pop_rounds.get();
                self.inner.pop_rounds.set(round.wrapping_add(1));
                (round % REVIVE_QUEUE_NUM as u64) as i32
            }
        };
        let round = PopRound {
            request,
            subscription,
            pop_time_ms: self.inner.clock.now_ms(),
            revive_queue_id,
            broker_name: &self.inner.config.broker_name,
        };
        let priority_topic = topic.message_type == Some(TopicMessageType::Priority);
        let priority_factor = if priority_topic {
            let group = self.inner.registry.group(&request.group)?;
            group.map_or(DEFAULT_PRIORITY_FACTOR, |g| priority_factor(&g.attributes))
        } else {
            DEFAULT_PRIORITY_FACTOR
        };
        let walk = PopWalk::new(
            priority_topic,
            request.mode() == PopMode::Orderly,
            priority_factor,
            rand::random::<u32>() % 100,
        );
        let mut answer = PopAnswer {
            pop_time_ms: round.pop_time_ms,
            invisible_ms: request.invisible_ms,
            revive_queue_id,
            rest: 0,
            offset_info: OffsetInfo::default(),
            records: Bytes::new(),
            message_count: 0,
            blocked_until_ms: None,
        };
        let mut body = Vec::new();
        let sources = self.pop_sources(request, topic, walk, SourcesFor::Reading)?;
        // The first claim also looks up where the other queues stand (for `rest`, should the
        // batch fill before they are read): one look at the pop actor for all.
        let mut look_ahead: Vec<GroupQueue> = sources
            .iter()
            .skip(1)
            .map(|(source, queue_id)| GroupQueue::new(&request.group, source, *queue_id))
            .collect();
        let mut known = Vec::new();
        let mut unread = Vec::new();
        for (source, queue_id) in sources {
            let left = request.max_messages as usize
                - answer.message_count.min(request.max_messages as usize);
            if left == 0 {
                unread.push(GroupQueue::new(&request.group, source, queue_id));
                continue;
            }
            let read = QueueRead {
                topic: &source,
                queue_id,
                left,
                look_ahead: std::mem::take(&mut look_ahead),
            };
            self.pop_queue(&round, read, &mut answer, &mut body, &mut known)
                .await?;
        }
        // The first claim looked ahead at every queue after it (none when the pop asked for no
        // message at all): only an idle queue's stored offset is left to look up.
        let mut looked = Vec::with_capacity(unread.len());
        let mut missing = Vec::new();
        for queue in unread {
            match known.iter().position(|(q, _)| *q == queue) {
                Some(i) => looked.push(known.swap_remove(i)),
                None => missing.push(queue),
            }
        }
        let mut nexts = self.or_stored_offsets(looked).await?;
        nexts.extend(self.next_offsets(missing).await?);
        for (queue, next) in nexts {
            let max = self.inner.reader.max_offset(&queue.topic, queue.queue_id);
            answer.rest += max.saturating_sub(next.unwrap_or(0));
        }
        answer.records = Bytes::from(body);
        Ok(answer)
    }
}
