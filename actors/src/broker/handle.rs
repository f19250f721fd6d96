//! [`BrokerHandle`]: the broker's front door. The in-process [`BrokerApi`] and the remoting
//! server both come through here; the wire-level rules (pull status mapping and offset
//! correction, piggybacked commits, long polling, QUERY_CONSUMER_OFFSET's zero rule) live here so
//! both paths share them.

use crate::broker::consumer_offsets::{
    CommitOffset, CommitResult, ConsumerOffsetsActor, ListGroup, OffsetSlot, QueryOffset,
    ResetOffset, TakePendingReset,
};
use crate::broker::long_poll::{LongPollActor, ParkPull};
use crate::broker::membership::{
    connection_id, CloseConnection, DescribeGroup, HeartbeatOutcome, ListConsumers,
    LookupSubscription, MembershipActor, NotifierInbox, RecordHeartbeat, UnregisterClient,
};
use crate::broker::message_store::{AppendMessages, CloseStore, MessageStoreActor};
use crate::broker::queue_locks::{LockBatch, QueueLocksActor, UnlockBatch};
use crate::broker::registry::Registry;
use crate::broker::retry::{RetryActor, SendBackOutcome, SendMessageBack};
use crate::broker::schedule::{without_properties, DelaySchedulerActor};
use crate::broker::{BrokerClock, BrokerConfig, Stop};
use crate::broker_api::{
    BrokerApi, BrokerError, BrokerFuture, ConsumerHeartbeat, ConsumerNotifier, PullRequest,
    PullResponse, PullStatus, SendBackRequest, SendResult, TopicRoute,
};
use crate::logic::delay::{dlq_topic, RETRY_TOPIC_PREFIX};
use crate::logic::filter::Subscription;
use crate::logic::queue::MessageQueue;
use crate::persister::{Persister, StopPersister};
use actix::prelude::*;
use bytes::Bytes;
use skiff_storage::message::property::{DELAY, MAX_RECONSUME_TIMES};
use skiff_storage::message::{offset_message_id, MessageToAppend};
use skiff_storage::metadata::TopicConfig;
use skiff_storage::store::{BoundaryType, ReadStatus, StoreReader};
use std::cell::Cell;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

/// Addresses of the broker's actors, for embedding code and tests (`Observe` snapshots).
#[derive(Clone)]
pub struct BrokerAddrs {
    pub store: Addr<MessageStoreActor>,
    pub offsets: Addr<ConsumerOffsetsActor>,
    pub persister: Addr<Persister>,
    pub long_poll: Addr<LongPollActor>,
    pub membership: Addr<MembershipActor>,
    pub locks: Addr<QueueLocksActor>,
    pub retry: Addr<RetryActor>,
    pub scheduler: Addr<DelaySchedulerActor>,
}

/// One row of `skiff admin progress <group>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueProgress {
    pub topic: String,
    pub queue_id: u32,
    /// The queue's max offset (next offset to be written).
    pub broker_offset: u64,
    pub consumer_offset: Option<u64>,
    /// Messages not yet committed: from the consumer offset, or from the queue's min offset
    /// when the group has none.
    pub lag: u64,
    /// Pulled by the group but not committed yet (the last pull's next offset minus the
    /// consumer offset), as RocketMQ 5's consumerProgress "Inflight" column.
    pub in_flight: u64,
    pub last_commit_ms: Option<i64>,
}

/// The pull answer for a store read at `offset` (`reference/rocketmq-remoting.md` §4.1): the
/// client-visible status and the next offset to pull from. The illegal cases carry the corrected
/// offset (offset-lifecycle §1.A.12): an empty queue restarts at 0, an offset below the queue
/// at its min, one beyond it at its max. `next` is the store's next offset for a found or
/// filtered read. Status codes: Found 0, NoNewMessage 19, NoMatchedMessage 20, OffsetIllegal 21.
pub fn pull_status(
    read: ReadStatus,
    offset: u64,
    min: u64,
    max: u64,
    next: u64,
) -> (PullStatus, u64) {
    match read {
        ReadStatus::Found => (PullStatus::Found, next),
        ReadStatus::NoMatchedMessage => (PullStatus::NoMatchedMessage, next),
        ReadStatus::NoMessageInQueue if offset == 0 => (PullStatus::NoNewMessage, 0),
        ReadStatus::NoMessageInQueue => (PullStatus::OffsetIllegal, 0),
        ReadStatus::OffsetOverflowOne => (PullStatus::NoNewMessage, offset),
        ReadStatus::OffsetOverflowBadly => (PullStatus::OffsetIllegal, max),
        ReadStatus::OffsetTooSmall => (PullStatus::OffsetIllegal, min),
    }
}

/// Cheap to clone; every clone talks to the same actors. Not `Send`: use it on the broker's
/// arbiter.
#[derive(Clone)]
pub struct BrokerHandle {
    inner: Rc<Inner>,
}

struct Inner {
    config: BrokerConfig,
    clock: BrokerClock,
    store_host: SocketAddr,
    reader: StoreReader,
    registry: Registry,
    inbox: NotifierInbox,
    next_ticket: Cell<u64>,
    shut_down: Cell<bool>,
    addrs: BrokerAddrs,
    /// RocketMQ 5's pullOffsetTable: the next offset each (group, topic, queue) will pull, so
    /// progress can show what is in flight (pulled, not committed). Not persisted.
    pull_offsets: std::cell::RefCell<std::collections::HashMap<(String, String, u32), u64>>,
}

fn mailbox(actor: &'static str) -> impl FnOnce(MailboxError) -> BrokerError {
    move |source| BrokerError::Mailbox { actor, source }
}

impl BrokerHandle {
    pub(crate) fn new(
        config: BrokerConfig,
        clock: BrokerClock,
        store_host: SocketAddr,
        reader: StoreReader,
        registry: Registry,
        inbox: NotifierInbox,
        addrs: BrokerAddrs,
    ) -> Self {
        BrokerHandle {
            inner: Rc::new(Inner {
                config,
                clock,
                store_host,
                reader,
                registry,
                inbox,
                next_ticket: Cell::new(0),
                pull_offsets: Default::default(),
                shut_down: Cell::new(false),
                addrs,
            }),
        }
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.inner.config
    }

    pub fn addrs(&self) -> &BrokerAddrs {
        &self.inner.addrs
    }

    /// The shared read handle of the message store.
    pub fn reader(&self) -> &StoreReader {
        &self.inner.reader
    }

    /// The broker clock (epoch ms; follows tokio time, see [`BrokerClock`]).
    pub fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// A topic's route, auto-creating the topic when enabled (else `TopicNotExist`).
    pub async fn route_topic(&self, topic: &str) -> Result<TopicRoute, BrokerError> {
        let config = self
            .inner
            .registry
            .topic_for_route(topic, self.inner.config.default_topic_queue_nums)?;
        Ok(TopicRoute {
            topic: config.name,
            broker_name: self.inner.config.broker_name.clone(),
            read_queue_nums: config.read_queue_nums,
            write_queue_nums: config.write_queue_nums,
        })
    }

    /// SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE: appends a batch. A topic the batch
    /// auto-creates gets `default_queue_nums` queues. A message sent to `%RETRY%group` that has
    /// used up its reconsumes goes to `%DLQ%group` instead; one carrying `DELAY` waits in the
    /// schedule topic. Answers once the batch is as durable as the flush policy promises.
    pub async fn send_messages(
        &self,
        mut messages: Vec<MessageToAppend>,
        default_queue_nums: u32,
    ) -> Result<Vec<SendResult>, BrokerError> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        for message in &mut messages {
            self.dead_letter_if_exhausted(message)?;
        }
        let queue_ids: Vec<u32> = messages.iter().map(|m| m.queue_id).collect();
        let results = self
            .inner
            .addrs
            .store
            .send(AppendMessages {
                messages,
                default_queue_nums,
            })
            .await
            .map_err(mailbox("message store"))??;
        Ok(results
            .into_iter()
            .zip(queue_ids)
            .map(|(r, queue_id)| SendResult {
                // A delayed message reports the queue it was sent to, as RocketMQ does, and its
                // offset in the schedule queue where it waits.
                queue_id,
                queue_offset: r.queue_offset,
                physical_offset: r.physical_offset,
                offset_msg_id: offset_message_id(self.inner.store_host, r.physical_offset),
            })
            .collect())
    }

    /// RocketMQ's `handleRetryAndDLQ`: a client that could not send back falls back to a plain
    /// send to the retry topic, so the reconsume limit is enforced here too.
    fn dead_letter_if_exhausted(&self, message: &mut MessageToAppend) -> Result<(), BrokerError> {
        let Some(group) = message.topic.strip_prefix(RETRY_TOPIC_PREFIX) else {
            return Ok(());
        };
        let group = group.to_string();
        let from_message =
            skiff_storage::message::property(&message.properties, MAX_RECONSUME_TIMES)
                .and_then(|v| v.trim().parse::<i32>().ok());
        let max = match from_message {
            Some(max) => max,
            None => match self.inner.registry.group_or_create(&group)? {
                Some(config) => i32::try_from(config.retry_max_times).unwrap_or(i32::MAX),
                None => return Ok(()),
            },
        };
        if message.reconsume_times >= max {
            tracing::warn!(group = %group, topic = %message.topic, reconsume_times = message.reconsume_times, "retry send past max reconsume times goes to the dead-letter queue");
            message.topic = dlq_topic(&group);
            message.queue_id = 0;
            message.properties = without_properties(&message.properties, &[DELAY]);
        }
        Ok(())
    }

    /// PULL_MESSAGE (`reference/rocketmq-remoting.md` §4.1). `has_commit_flag` is
    /// FLAG_COMMIT_OFFSET; `allow_suspend` is RocketMQ's `brokerAllowSuspend`: true on a
    /// request's first arrival. The piggybacked commit is applied only then, and only then may
    /// a pull that found nothing be parked; a parked pull re-runs once, without the commit, when
    /// a message arrives or its suspend time passes.
    pub async fn pull_message(
        &self,
        request: PullRequest,
        has_commit_flag: bool,
        allow_suspend: bool,
    ) -> Result<PullResponse, BrokerError> {
        let first = self
            .pull_once(&request, has_commit_flag && allow_suspend)
            .await?;
        self.record_pull_offset(&request, &first);
        let Some(suspend) = request.suspend_timeout else {
            return Ok(first);
        };
        if !allow_suspend || first.status != PullStatus::NoNewMessage {
            return Ok(first);
        }
        let hold = if self.inner.config.long_polling {
            suspend
        } else {
            self.inner.config.short_polling
        };
        let woken = self
            .inner
            .addrs
            .long_poll
            .send(ParkPull {
                topic: request.topic.clone(),
                queue_id: request.queue_id,
                offset: request.queue_offset,
            })
            .await
            .map_err(mailbox("long poll"))?;
        tracing::trace!(group = %request.group, topic = %request.topic, queue_id = request.queue_id, offset = request.queue_offset, "pull parked");
        // Woken, timed out, or the long-poll actor went away: all end in the one re-run.
        let _ = tokio::time::timeout(hold, woken).await;
        let replay = self.pull_once(&request, false).await?;
        self.record_pull_offset(&request, &replay);
        Ok(replay)
    }

    fn record_pull_offset(&self, request: &PullRequest, response: &PullResponse) {
        self.inner.pull_offsets.borrow_mut().insert(
            (
                request.group.clone(),
                request.topic.clone(),
                request.queue_id,
            ),
            response.next_begin_offset,
        );
    }

    async fn pull_once(
        &self,
        request: &PullRequest,
        commit: bool,
    ) -> Result<PullResponse, BrokerError> {
        let reader = &self.inner.reader;
        let slot = OffsetSlot::new(&request.group, &request.topic, request.queue_id);
        let pending = self
            .inner
            .addrs
            .offsets
            .send(TakePendingReset { slot: slot.clone() })
            .await
            .map_err(mailbox("consumer offsets"))?;
        if let Some(reset) = pending {
            tracing::info!(group = %request.group, topic = %request.topic, queue_id = request.queue_id, offset = reset, "pull answers a pending admin reset");
            return Ok(PullResponse {
                status: PullStatus::OffsetIllegal,
                next_begin_offset: reset,
                min_offset: reader.min_offset(&request.topic, request.queue_id),
                max_offset: reader.max_offset(&request.topic, request.queue_id),
                records: Bytes::new(),
            });
        }
        let subscription = self.subscription_for(request).await?;
        let matches = |code: i64| subscription.matches_tag_code(code);
        let filter: Option<&dyn Fn(i64) -> bool> = if subscription.is_all() {
            None
        } else {
            Some(&matches)
        };
        let max_messages = request
            .max_messages
            .clamp(1, self.inner.config.max_pull_messages.max(1));
        let read = reader.read(
            &request.topic,
            request.queue_id,
            request.queue_offset,
            max_messages,
            self.inner.config.max_pull_bytes,
            filter,
        )?;
        let offset = request.queue_offset;
        let (status, next_begin_offset) = pull_status(
            read.status,
            offset,
            read.min_offset,
            read.max_offset,
            read.next_begin_offset,
        );
        if status == PullStatus::OffsetIllegal {
            tracing::info!(group = %request.group, topic = %request.topic, queue_id = request.queue_id, offset, next = next_begin_offset, status = ?read.status, "pull offset corrected");
        }
        if commit {
            if let Some(commit_offset) = request.commit_offset {
                // The pull itself succeeded; a failed piggybacked commit is repaired by the
                // consumer's next one, so it is reported, not returned.
                if let Err(e) = self
                    .commit(
                        &request.group,
                        &request.topic,
                        request.queue_id,
                        commit_offset,
                    )
                    .await
                {
                    tracing::error!(group = %request.group, topic = %request.topic, queue_id = request.queue_id, offset = commit_offset, error = %e, "piggybacked commit failed");
                }
            }
        }
        Ok(PullResponse {
            status,
            next_begin_offset,
            min_offset: read.min_offset,
            max_offset: read.max_offset,
            records: if status == PullStatus::Found {
                read.records
            } else {
                Bytes::new()
            },
        })
    }

    /// The pull's tag filter: the request's own subscription (FLAG_SUBSCRIPTION), else the one
    /// the group registered by heartbeat; neither is SUBSCRIPTION_NOT_EXIST.
    async fn subscription_for(&self, request: &PullRequest) -> Result<Subscription, BrokerError> {
        let expression = match &request.subscription {
            Some(expression) => expression.clone(),
            None => self
                .inner
                .addrs
                .membership
                .send(LookupSubscription {
                    group: request.group.clone(),
                    topic: request.topic.clone(),
                })
                .await
                .map_err(mailbox("membership"))?
                .map(|entry| entry.expression)
                .ok_or_else(|| BrokerError::SubscriptionNotExist {
                    group: request.group.clone(),
                    topic: request.topic.clone(),
                })?,
        };
        Ok(Subscription::parse(request.topic.clone(), &expression, 0))
    }

    async fn commit(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        offset: u64,
    ) -> Result<CommitResult, BrokerError> {
        self.inner
            .addrs
            .offsets
            .send(CommitOffset {
                slot: OffsetSlot::new(group, topic, queue_id),
                offset,
                now_ms: self.inner.clock.now_ms(),
            })
            .await
            .map_err(mailbox("consumer offsets"))?
    }

    /// QUERY_CONSUMER_OFFSET (§4.2, offset-lifecycle §1.A.6): the stored offset; when there is
    /// none and `set_zero_if_not_found`, 0 if the queue still starts at 0 and its first message
    /// is still stored (so a new group on a young queue starts from the beginning even with
    /// CONSUME_FROM_LAST_OFFSET); else `None` (QUERY_NOT_FOUND). A corrupt record is an error.
    pub async fn query_consumer_offset(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        set_zero_if_not_found: bool,
    ) -> Result<Option<u64>, BrokerError> {
        let stored = self
            .inner
            .addrs
            .offsets
            .send(QueryOffset {
                slot: OffsetSlot::new(group, topic, queue_id),
            })
            .await
            .map_err(mailbox("consumer offsets"))??;
        if stored.is_some() || !set_zero_if_not_found {
            return Ok(stored);
        }
        let reader = &self.inner.reader;
        if reader.min_offset(topic, queue_id) == 0
            && reader.store_timestamp_at(topic, queue_id, 0)?.is_some()
        {
            return Ok(Some(0));
        }
        Ok(None)
    }

    /// UPDATE_CONSUMER_OFFSET (§4.3): unknown group or topic is an error; while an admin reset is
    /// pending the update is acknowledged and ignored.
    pub async fn update_consumer_offset(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        offset: u64,
    ) -> Result<CommitResult, BrokerError> {
        if self.inner.registry.group_or_create(group)?.is_none() {
            return Err(BrokerError::SubscriptionGroupNotExist {
                group: group.to_string(),
            });
        }
        if self.inner.registry.topic(topic)?.is_none() {
            return Err(BrokerError::TopicNotExist {
                topic: topic.to_string(),
            });
        }
        self.commit(group, topic, queue_id, offset).await
    }

    /// CONSUMER_SEND_MSG_BACK (§4.5).
    pub async fn send_back_message(
        &self,
        request: SendBackRequest,
    ) -> Result<SendBackOutcome, BrokerError> {
        self.inner
            .addrs
            .retry
            .send(SendMessageBack { request })
            .await
            .map_err(mailbox("retry"))?
    }

    /// HEART_BEAT for one consumer group (§4.4): auto-creates the group and its retry topic,
    /// registers the client; `notifier` is how the broker reaches it (one per connection).
    pub async fn register_consumer(
        &self,
        heartbeat: ConsumerHeartbeat,
        notifier: Arc<dyn ConsumerNotifier>,
    ) -> Result<HeartbeatOutcome, BrokerError> {
        let Some(group) = self.inner.registry.group_or_create(&heartbeat.group)? else {
            tracing::warn!(group = %heartbeat.group, client_id = %heartbeat.client_id, "heartbeat for an unknown group ignored");
            return Ok(HeartbeatOutcome::default());
        };
        self.inner.registry.ensure_retry_topic(&group)?;
        let ticket = self.inner.next_ticket.get();
        self.inner.next_ticket.set(ticket.wrapping_add(1));
        self.inner.inbox.borrow_mut().insert(ticket, notifier);
        let outcome = self
            .inner
            .addrs
            .membership
            .send(RecordHeartbeat { heartbeat, ticket })
            .await;
        if outcome.is_err() {
            self.inner.inbox.borrow_mut().remove(&ticket);
        }
        outcome.map_err(mailbox("membership"))
    }

    /// UNREGISTER_CLIENT: from one group, or every group when `group` is `None`.
    pub async fn unregister_client(
        &self,
        client_id: &str,
        group: Option<&str>,
    ) -> Result<usize, BrokerError> {
        self.inner
            .addrs
            .membership
            .send(UnregisterClient {
                client_id: client_id.to_string(),
                group: group.map(str::to_string),
            })
            .await
            .map_err(mailbox("membership"))
    }

    /// A connection closed: every client registered through its `notifier` leaves its groups
    /// (and their members are told).
    pub async fn connection_closed(
        &self,
        notifier: &Arc<dyn ConsumerNotifier>,
    ) -> Result<usize, BrokerError> {
        self.inner
            .addrs
            .membership
            .send(CloseConnection {
                connection: connection_id(notifier),
            })
            .await
            .map_err(mailbox("membership"))
    }

    /// GET_CONSUMER_LIST_BY_GROUP: sorted client ids; `NoConsumer` when the group has none.
    pub async fn consumers(&self, group: &str) -> Result<Vec<String>, BrokerError> {
        let ids = self
            .inner
            .addrs
            .membership
            .send(ListConsumers {
                group: group.to_string(),
            })
            .await
            .map_err(mailbox("membership"))?;
        if ids.is_empty() {
            return Err(BrokerError::NoConsumer {
                group: group.to_string(),
            });
        }
        Ok(ids)
    }

    pub async fn lock_queues(
        &self,
        group: &str,
        client_id: &str,
        queues: Vec<MessageQueue>,
    ) -> Result<Vec<MessageQueue>, BrokerError> {
        self.inner
            .addrs
            .locks
            .send(LockBatch {
                group: group.to_string(),
                client_id: client_id.to_string(),
                queues,
            })
            .await
            .map_err(mailbox("queue locks"))
    }

    pub async fn unlock_queues(
        &self,
        group: &str,
        client_id: &str,
        queues: Vec<MessageQueue>,
    ) -> Result<(), BrokerError> {
        self.inner
            .addrs
            .locks
            .send(UnlockBatch {
                group: group.to_string(),
                client_id: client_id.to_string(),
                queues,
            })
            .await
            .map_err(mailbox("queue locks"))
    }

    pub fn min_offset_of(&self, topic: &str, queue_id: u32) -> u64 {
        self.inner.reader.min_offset(topic, queue_id)
    }

    pub fn max_offset_of(&self, topic: &str, queue_id: u32) -> u64 {
        self.inner.reader.max_offset(topic, queue_id)
    }

    pub fn search_offset_of(
        &self,
        topic: &str,
        queue_id: u32,
        timestamp_ms: i64,
        boundary: BoundaryType,
    ) -> Result<u64, BrokerError> {
        Ok(self
            .inner
            .reader
            .search_offset_by_timestamp(topic, queue_id, timestamp_ms, boundary)?)
    }

    /// Admin: every topic config, sorted by name.
    pub fn topics(&self) -> Result<Vec<TopicConfig>, BrokerError> {
        self.inner.registry.topics()
    }

    /// Admin: per queue of every topic the group has offsets for or subscribes to, the broker
    /// offset, the consumer offset, the lag and the last commit time.
    pub async fn progress(&self, group: &str) -> Result<Vec<QueueProgress>, BrokerError> {
        let offsets = self
            .inner
            .addrs
            .offsets
            .send(ListGroup {
                group: group.to_string(),
            })
            .await
            .map_err(mailbox("consumer offsets"))??;
        let view = self
            .inner
            .addrs
            .membership
            .send(DescribeGroup {
                group: group.to_string(),
            })
            .await
            .map_err(mailbox("membership"))?;
        let mut topics: BTreeSet<String> = offsets.iter().map(|o| o.topic.clone()).collect();
        if let Some(view) = view {
            topics.extend(view.subscriptions.into_iter().map(|s| s.topic));
        }
        let reader = &self.inner.reader;
        let mut rows = Vec::new();
        for topic in topics {
            let known = offsets
                .iter()
                .filter(|o| o.topic == topic)
                .map(|o| o.queue_id + 1)
                .max()
                .unwrap_or(0);
            let configured = self
                .inner
                .registry
                .topic(&topic)?
                .map(|t| t.read_queue_nums.max(t.write_queue_nums))
                .unwrap_or(0);
            for queue_id in 0..configured.max(known) {
                let entry = offsets
                    .iter()
                    .find(|o| o.topic == topic && o.queue_id == queue_id);
                let broker_offset = reader.max_offset(&topic, queue_id);
                let consumer_offset = entry.map(|e| e.offset);
                let from = consumer_offset.unwrap_or_else(|| reader.min_offset(&topic, queue_id));
                let pulled = self
                    .inner
                    .pull_offsets
                    .borrow()
                    .get(&(group.to_string(), topic.clone(), queue_id))
                    .copied();
                rows.push(QueueProgress {
                    topic: topic.clone(),
                    queue_id,
                    broker_offset,
                    consumer_offset,
                    lag: broker_offset.saturating_sub(from),
                    in_flight: pulled.map_or(0, |pulled| pulled.saturating_sub(from)),
                    last_commit_ms: entry.and_then(|e| e.last_commit_ms),
                });
            }
        }
        Ok(rows)
    }

    /// Admin: resets the group's offsets on every queue of `topic` to the first message stored
    /// at or after `timestamp_ms` (a negative timestamp means the queue's end). Each reset is
    /// pending until the group's next pull of the queue, which answers OFFSET_ILLEGAL with it.
    pub async fn reset_offset_by_time(
        &self,
        group: &str,
        topic: &str,
        timestamp_ms: i64,
    ) -> Result<Vec<(u32, u64)>, BrokerError> {
        let config =
            self.inner
                .registry
                .topic(topic)?
                .ok_or_else(|| BrokerError::TopicNotExist {
                    topic: topic.to_string(),
                })?;
        let mut done = Vec::new();
        for queue_id in 0..config.read_queue_nums {
            let offset = if timestamp_ms < 0 {
                self.inner.reader.max_offset(topic, queue_id)
            } else {
                self.inner.reader.search_offset_by_timestamp(
                    topic,
                    queue_id,
                    timestamp_ms,
                    BoundaryType::Lower,
                )?
            };
            self.reset_offset(group, topic, queue_id, offset).await?;
            done.push((queue_id, offset));
        }
        Ok(done)
    }

    /// Admin: resets one queue's offset (see [`Self::reset_offset_by_time`]).
    pub async fn reset_offset(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        offset: u64,
    ) -> Result<(), BrokerError> {
        self.inner
            .addrs
            .offsets
            .send(ResetOffset {
                slot: OffsetSlot::new(group, topic, queue_id),
                offset,
            })
            .await
            .map_err(mailbox("consumer offsets"))?
    }

    /// Stops the broker: timers first, then a final awaited offset flush, then the offset table,
    /// the message store (flushed and closed) and the metadata are released. Idempotent.
    pub async fn shutdown(&self) -> Result<(), BrokerError> {
        if self.inner.shut_down.replace(true) {
            return Ok(());
        }
        let addrs = &self.inner.addrs;
        // Scheduler and retry write to the store, so they stop before it closes.
        let _ = addrs.scheduler.send(Stop).await;
        let _ = addrs.retry.send(Stop).await;
        let _ = addrs.membership.send(Stop).await;
        let _ = addrs.locks.send(Stop).await;
        let _ = addrs.long_poll.send(Stop).await;
        match addrs.persister.send(StopPersister).await {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => tracing::error!(%reason, "final offset flush failed"),
            Err(e) => tracing::error!(error = %e, "offset persister unavailable at shutdown"),
        }
        // Flushes again and surfaces a typed error if the table cannot be made durable.
        let offsets = addrs
            .offsets
            .send(crate::broker::consumer_offsets::CloseTable)
            .await
            .map_err(mailbox("consumer offsets"))
            .and_then(|r| r);
        let store = addrs
            .store
            .send(CloseStore)
            .await
            .map_err(mailbox("message store"))
            .and_then(|r| r);
        let metadata = self.inner.registry.close();
        self.inner.inbox.borrow_mut().clear();
        tracing::info!(broker = %self.inner.config.broker_name, "broker stopped");
        offsets.and(store).and(metadata)
    }
}

impl BrokerApi for BrokerHandle {
    fn route(&self, topic: &str) -> BrokerFuture<TopicRoute> {
        let this = self.clone();
        let topic = topic.to_string();
        Box::pin(async move { this.route_topic(&topic).await })
    }

    fn send(&self, messages: Vec<MessageToAppend>) -> BrokerFuture<Vec<SendResult>> {
        let this = self.clone();
        Box::pin(async move {
            let queues = this.inner.config.default_topic_queue_nums;
            this.send_messages(messages, queues).await
        })
    }

    fn pull(&self, request: PullRequest) -> BrokerFuture<PullResponse> {
        let this = self.clone();
        Box::pin(async move {
            let has_commit_flag = request.commit_offset.is_some();
            this.pull_message(request, has_commit_flag, true).await
        })
    }

    fn query_offset(&self, group: &str, queue: &MessageQueue) -> BrokerFuture<Option<u64>> {
        let this = self.clone();
        let group = group.to_string();
        let queue = queue.clone();
        Box::pin(async move {
            // skiff's consumers ask without the zero rule (setZeroIfNotFound = false, as the
            // remoting implementation sends it), so ConsumeFromWhere decides for every new
            // group; Java clients reach the rule through `query_consumer_offset`.
            this.query_consumer_offset(&group, &queue.topic, queue.queue_id, false)
                .await
        })
    }

    fn update_offset(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: u64,
        _acknowledged: bool,
    ) -> BrokerFuture<()> {
        let this = self.clone();
        let group = group.to_string();
        let queue = queue.clone();
        Box::pin(async move {
            this.update_consumer_offset(&group, &queue.topic, queue.queue_id, offset)
                .await
                .map(|_| ())
        })
    }

    fn send_back(&self, request: SendBackRequest) -> BrokerFuture<()> {
        let this = self.clone();
        Box::pin(async move { this.send_back_message(request).await.map(|_| ()) })
    }

    fn heartbeat(
        &self,
        heartbeat: ConsumerHeartbeat,
        notifier: Arc<dyn ConsumerNotifier>,
    ) -> BrokerFuture<()> {
        let this = self.clone();
        Box::pin(async move {
            this.register_consumer(heartbeat, notifier)
                .await
                .map(|_| ())
        })
    }

    fn unregister(&self, client_id: &str, group: &str) -> BrokerFuture<()> {
        let this = self.clone();
        let client_id = client_id.to_string();
        let group = group.to_string();
        Box::pin(async move {
            this.unregister_client(&client_id, Some(&group))
                .await
                .map(|_| ())
        })
    }

    fn consumer_list(&self, group: &str) -> BrokerFuture<Vec<String>> {
        let this = self.clone();
        let group = group.to_string();
        Box::pin(async move { this.consumers(&group).await })
    }

    fn lock_batch(
        &self,
        group: &str,
        client_id: &str,
        queues: Vec<MessageQueue>,
    ) -> BrokerFuture<Vec<MessageQueue>> {
        let this = self.clone();
        let group = group.to_string();
        let client_id = client_id.to_string();
        Box::pin(async move { this.lock_queues(&group, &client_id, queues).await })
    }

    fn unlock_batch(
        &self,
        group: &str,
        client_id: &str,
        queues: Vec<MessageQueue>,
    ) -> BrokerFuture<()> {
        let this = self.clone();
        let group = group.to_string();
        let client_id = client_id.to_string();
        Box::pin(async move { this.unlock_queues(&group, &client_id, queues).await })
    }

    fn min_offset(&self, queue: &MessageQueue) -> BrokerFuture<u64> {
        let offset = self.min_offset_of(&queue.topic, queue.queue_id);
        Box::pin(async move { Ok(offset) })
    }

    fn max_offset(&self, queue: &MessageQueue) -> BrokerFuture<u64> {
        let offset = self.max_offset_of(&queue.topic, queue.queue_id);
        Box::pin(async move { Ok(offset) })
    }

    fn search_offset(
        &self,
        queue: &MessageQueue,
        timestamp_ms: i64,
        boundary: BoundaryType,
    ) -> BrokerFuture<u64> {
        let found = self.search_offset_of(&queue.topic, queue.queue_id, timestamp_ms, boundary);
        Box::pin(async move { found })
    }
}
