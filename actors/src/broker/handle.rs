//! [`BrokerHandle`]: the broker's front door. The in-process [`BrokerApi`] and the remoting
//! server both come through here; the wire-level rules (offset correction and pending resets on
//! pull, piggybacked commits, long polling, QUERY_CONSUMER_OFFSET's zero rule) live here and in
//! the sibling files that extend the handle (`pull.rs`, `admin.rs`), so both paths share them.
//! The pull status itself is derived by [`crate::logic::pull::pull_status`].

use crate::broker::connections::Connections;
use crate::broker::consumer_offsets::{
    CommitOffset, CommitResult, ConsumerOffsetsActor, QueryOffset,
};
use crate::broker::key_index::{KeyIndexActor, KeyQueryResult, QueryByKey};
use crate::broker::long_poll::LongPollActor;
use crate::broker::membership::{
    CloseConnection, HeartbeatOutcome, ListConsumers, MembershipActor, RecordHeartbeat,
    UnregisterClient,
};
use crate::broker::message_store::{AppendMessages, MessageStoreActor};
use crate::broker::queue_locks::{LockBatch, QueueLocksActor, UnlockBatch};
use crate::broker::registry::Registry;
use crate::broker::release::Holdings;
use crate::broker::retry::{RetryActor, SendBackOutcome, SendMessageBack};
use crate::broker::schedule::DelaySchedulerActor;
use crate::broker::schedule::SCHEDULE_GROUP;
use crate::broker::transaction::{EndOutcome, EndTransaction, TransactionActor};
use crate::broker::{BrokerClock, BrokerConfig};
use crate::broker_api::{
    BrokerApi, BrokerError, BrokerFuture, ConnectionId, ConsumerHeartbeat, ConsumerNotifier,
    EndTransactionRequest, OffsetUpdate, PullRequest, PullResponse, SendBackRequest, SendResult,
    TopicRoute, TransactionCheckListener,
};
use crate::logic::delay::SCHEDULE_TOPIC;
use crate::logic::delay::{dlq_topic, RETRY_TOPIC_PREFIX};
use crate::logic::queue::GroupQueue;
use crate::logic::queue::MessageQueue;
use crate::logic::transaction::{HALF_CONSUMER_GROUP, HALF_TOPIC};
use crate::metrics::Metrics;
use crate::persister::Persister;
use crate::quit::Quit;
use crate::refused::Refused;
use actix::prelude::*;
use skiff_storage::message::property::{DELAY, MAX_RECONSUME_TIMES};
use skiff_storage::message::{offset_message_id, property, without_properties, MessageToAppend};
use skiff_storage::offset_table::OffsetTableError;
use skiff_storage::store::{BoundaryType, StoreReader};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

/// Addresses of the broker's actors, for embedding code and tests (`Observe` snapshots).
#[derive(Clone)]
pub struct BrokerAddrs {
    pub store: Addr<MessageStoreActor>,
    pub offsets: Addr<ConsumerOffsetsActor>,
    pub persister: Addr<Persister<OffsetTableError>>,
    pub long_poll: Addr<LongPollActor>,
    pub membership: Addr<MembershipActor>,
    pub locks: Addr<QueueLocksActor>,
    pub retry: Addr<RetryActor>,
    pub scheduler: Addr<DelaySchedulerActor>,
    pub key_index: Addr<KeyIndexActor>,
    pub transactions: Addr<TransactionActor>,
    pub timer: Addr<crate::broker::timer::TimerActor>,
    pub pop: Addr<crate::broker::pop::actor::PopActor>,
}

/// Cheap to clone; every clone talks to the same actors. Not `Send`: use it on the broker's
/// arbiter.
#[derive(Clone)]
pub struct BrokerHandle {
    pub(super) inner: Rc<Inner>,
}

pub(super) struct Inner {
    pub(super) config: BrokerConfig,
    pub(super) clock: BrokerClock,
    store_host: SocketAddr,
    pub(super) reader: StoreReader,
    pub(super) registry: Registry,
    connections: Connections,
    shut_down: Cell<bool>,
    /// Taken by [`BrokerHandle::shutdown`], which waits until every actor holding storage is gone.
    holdings: RefCell<Option<Holdings>>,
    pub(super) addrs: BrokerAddrs,
    /// RocketMQ 5's pullOffsetTable: the next offset each (group, topic, queue) will pull, so
    /// progress can show what is in flight (pulled, not committed). Not persisted.
    pub(super) pull_offsets: RefCell<HashMap<GroupQueue, u64>>,
    pub(super) metrics: Metrics,
}

/// The broker's own cursors (the delay scheduler's, the transaction checker's) live in the
/// offset table under system groups and topics; a client moving or deleting them would make
/// the broker redeliver delayed messages or skip pending halves.
pub(super) fn refuse_broker_cursor(group: &str, topic: &str) -> Result<(), BrokerError> {
    let system = [SCHEDULE_GROUP, HALF_CONSUMER_GROUP].contains(&group)
        || [SCHEDULE_TOPIC, HALF_TOPIC].contains(&topic);
    if system {
        return Err(Refused::BrokerCursor {
            group: group.to_owned(),
            topic: topic.to_owned(),
        }
        .into());
    }
    Ok(())
}

/// How long shutdown waits for stopped actors to let go of their storage; they need only a
/// turn of their arbiter, so reaching this means one of them is stuck.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

pub(super) fn mailbox(actor: &'static str) -> impl FnOnce(MailboxError) -> BrokerError {
    move |source| BrokerError::Mailbox { actor, source }
}

impl BrokerHandle {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        config: BrokerConfig,
        clock: BrokerClock,
        store_host: SocketAddr,
        reader: StoreReader,
        registry: Registry,
        connections: Connections,
        metrics: Metrics,
        holdings: Holdings,
        addrs: BrokerAddrs,
    ) -> Self {
        BrokerHandle {
            inner: Rc::new(Inner {
                config,
                clock,
                store_host,
                reader,
                registry,
                connections,
                pull_offsets: Default::default(),
                metrics,
                shut_down: Cell::new(false),
                holdings: RefCell::new(Some(holdings)),
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

    /// QUERY_MESSAGE's lookup: the stored records of `topic` indexed under `key` (a `KEYS`
    /// entry or a `UNIQ_KEY`) with a store timestamp in `[begin, end]`, at most `max`, the
    /// newest first.
    pub async fn query_by_key(
        &self,
        topic: &str,
        key: &str,
        begin: i64,
        end: i64,
        max: usize,
    ) -> Result<KeyQueryResult, BrokerError> {
        self.inner
            .addrs
            .key_index
            .send(QueryByKey {
                topic: topic.to_string(),
                key: key.to_string(),
                begin,
                end,
                max,
            })
            .await
            .map_err(mailbox("key index"))?
    }

    /// The shared read handle of the message store.
    pub fn reader(&self) -> &StoreReader {
        &self.inner.reader
    }

    /// The address stored messages carry as their store host (and offset message ids encode).
    pub fn store_host(&self) -> SocketAddr {
        self.inner.store_host
    }

    /// The broker clock (epoch ms; follows tokio time, see [`BrokerClock`]).
    pub fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// A topic's route, auto-creating the topic when enabled (else `TopicNotExist`).
    pub async fn route(&self, topic: &str) -> Result<TopicRoute, BrokerError> {
        let config = self
            .inner
            .registry
            .topic_for_route(topic, self.inner.config.default_topic_queue_nums)?;
        Ok(TopicRoute::single(
            config.name,
            self.inner.config.broker_name.clone(),
            config.read_queue_nums,
            config.write_queue_nums,
        ))
    }

    /// SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE: appends a batch. A topic the batch
    /// auto-creates gets `default_queue_nums` queues. A message sent to a group's retry topic that
    /// has used up its reconsumes goes to the group's dead-letter topic instead; one carrying
    /// `DELAY` waits in the schedule topic. Answers once the batch is as durable as the flush
    /// policy promises.
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
                broker_name: self.inner.config.broker_name.clone(),
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
        let from_message = property(&message.properties, MAX_RECONSUME_TIMES)
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

    pub(super) async fn commit(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        offset: u64,
    ) -> Result<CommitResult, BrokerError> {
        refuse_broker_cursor(group, topic)?;
        self.inner
            .addrs
            .offsets
            .send(CommitOffset {
                slot: GroupQueue::new(group, topic, queue_id),
                offset,
                now_ms: self.inner.clock.now_ms(),
            })
            .await
            .map_err(mailbox("consumer offsets"))?
    }

    /// QUERY_CONSUMER_OFFSET (`docs/wire-protocol.md` §4.2, `docs/offset-lifecycle.md` §1.A.6):
    /// the stored offset; when there is none and `set_zero_if_not_found`, 0 if the queue still
    /// starts at 0 and its first message is still stored (so a new group on a young queue starts
    /// from the beginning even with CONSUME_FROM_LAST_OFFSET); else `None` (QUERY_NOT_FOUND). A
    /// corrupt record is an error.
    pub async fn query_offset(
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
                slot: GroupQueue::new(group, topic, queue_id),
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

    /// UPDATE_CONSUMER_OFFSET (`docs/wire-protocol.md` §4.3): unknown group or topic is an
    /// error; while an admin reset is pending the update is acknowledged and ignored.
    pub async fn update_offset(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        offset: u64,
    ) -> Result<CommitResult, BrokerError> {
        if self.inner.registry.group_or_create(group)?.is_none() {
            return Err(BrokerError::Refused(Refused::GroupNotExist {
                group: group.to_string(),
            }));
        }
        if self.inner.registry.topic(topic)?.is_none() {
            return Err(BrokerError::Refused(Refused::TopicNotExist {
                topic: topic.to_string(),
            }));
        }
        self.commit(group, topic, queue_id, offset).await
    }

    /// CONSUMER_SEND_MSG_BACK (`docs/wire-protocol.md` §4.5).
    pub async fn send_back(
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

    /// HEART_BEAT for one consumer group (`docs/wire-protocol.md` §4.4): auto-creates the group and its retry topic,
    /// registers the client; `notifier` is how the broker reaches it (one per connection).
    pub async fn heartbeat(
        &self,
        heartbeat: ConsumerHeartbeat,
        notifier: Arc<dyn ConsumerNotifier>,
    ) -> Result<HeartbeatOutcome, BrokerError> {
        let Some(group) = self.inner.registry.group_or_create(&heartbeat.group)? else {
            tracing::warn!(group = %heartbeat.group, client_id = %heartbeat.client_id, "heartbeat for an unknown group ignored");
            return Ok(HeartbeatOutcome::default());
        };
        self.inner.registry.ensure_retry_topic(&group)?;
        let connection = notifier.connection();
        self.inner.connections.register_notifier(notifier);
        let outcome = self
            .inner
            .addrs
            .membership
            .send(RecordHeartbeat {
                heartbeat,
                connection,
            })
            .await;
        if outcome.is_err() {
            self.inner.connections.heartbeat_recorded(connection);
        }
        outcome.map_err(mailbox("membership"))
    }

    /// UNREGISTER_CLIENT: the client leaves `group`; answers how many registrations it had.
    pub async fn unregister(&self, client_id: &str, group: &str) -> Result<usize, BrokerError> {
        self.inner
            .addrs
            .membership
            .send(UnregisterClient {
                client_id: client_id.to_string(),
                group: Some(group.to_string()),
            })
            .await
            .map_err(mailbox("membership"))
    }

    /// A connection closed: every client registered through it leaves its groups (and their
    /// remaining members are told), its producers no longer answer check-backs, and the
    /// registry forgets it. Answers how many consumer registrations it had.
    pub async fn connection_closed(
        &self,
        connection: impl Into<ConnectionId>,
    ) -> Result<usize, BrokerError> {
        let connection = connection.into();
        let producers = self.inner.connections.close(connection);
        if producers > 0 {
            tracing::debug!(%connection, producers, "producers of a closed connection unregistered");
        }
        self.inner
            .addrs
            .membership
            .send(CloseConnection { connection })
            .await
            .map_err(mailbox("membership"))
    }

    /// The registry of client connections (callbacks, producers, reported subscriptions).
    pub fn connections(&self) -> &Connections {
        &self.inner.connections
    }

    /// GET_CONSUMER_LIST_BY_GROUP: sorted client ids; `NoConsumer` when the group has none.
    pub async fn consumer_list(&self, group: &str) -> Result<Vec<String>, BrokerError> {
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
            return Err(BrokerError::Refused(Refused::NoConsumer {
                group: group.to_string(),
            }));
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

    pub fn min_offset(&self, topic: &str, queue_id: u32) -> u64 {
        self.inner.reader.min_offset(topic, queue_id)
    }

    pub fn max_offset(&self, topic: &str, queue_id: u32) -> u64 {
        self.inner.reader.max_offset(topic, queue_id)
    }

    pub fn search_offset(
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

    /// Registers a producer of `group` that answers check-backs through `listener` (a producer
    /// heartbeat over the network, [`BrokerApi::register_producer`] in process).
    pub fn register_producer(
        &self,
        group: &str,
        client_id: &str,
        listener: Arc<dyn TransactionCheckListener>,
    ) {
        self.inner
            .connections
            .register_producer(group, client_id, listener);
    }

    /// A producer leaves one group, or every group when `group` is `None`.
    pub fn unregister_producer(&self, client_id: &str, group: Option<&str>) {
        self.inner.connections.unregister_producer(client_id, group);
    }

    /// Client ids of the producers of `group` that answer check-backs.
    pub fn producers_of(&self, group: &str) -> Vec<String> {
        self.inner.connections.producers_of(group)
    }

    /// END_TRANSACTION (`docs/wire-protocol.md` §3.14): commits, rolls back, or (UNKNOW) leaves a
    /// half message pending.
    pub async fn end_transaction(
        &self,
        request: EndTransactionRequest,
    ) -> Result<EndOutcome, BrokerError> {
        self.inner
            .addrs
            .transactions
            .send(EndTransaction { request })
            .await
            .map_err(mailbox("transactions"))?
    }

    /// Stops the broker: timers first, then a final awaited offset flush, then the offset table,
    /// the message store (flushed and closed) and the metadata are released. Idempotent.
    pub async fn shutdown(&self) -> Result<(), BrokerError> {
        if self.inner.shut_down.replace(true) {
            return Ok(());
        }
        let addrs = &self.inner.addrs;
        // Scheduler and retry write to the store, so they stop before it closes.
        let quits = [
            ("scheduler", addrs.scheduler.send(Quit::new()).await),
            ("timer", addrs.timer.send(Quit::new()).await),
            ("transactions", addrs.transactions.send(Quit::new()).await),
            ("retry", addrs.retry.send(Quit::new()).await),
            ("membership", addrs.membership.send(Quit::new()).await),
            ("queue locks", addrs.locks.send(Quit::new()).await),
            ("long poll", addrs.long_poll.send(Quit::new()).await),
        ];
        for (actor, stopped) in quits {
            // Already gone is what stopping wants; the rest of the shutdown goes on either way.
            if let Err(error) = stopped {
                tracing::warn!(actor, %error, "broker actor unavailable at shutdown");
            }
        }
        // Revivals write to the store too; its checkpoints are durable before the offsets that
        // moved past their messages are flushed below.
        let pop = addrs
            .pop
            .send(Quit::new())
            .await
            .map_err(mailbox("pop"))
            .and_then(|r| r);
        // After the writers above, so its final pass indexes everything they appended.
        if let Err(error) = addrs.key_index.send(Quit::new()).await {
            tracing::warn!(actor = "key index", %error, "broker actor unavailable at shutdown");
        }
        // The persister logs a failed final flush itself; the close below reports it typed.
        if let Err(error) = addrs.persister.send(Quit::new()).await {
            tracing::error!(%error, "offset persister unavailable at shutdown");
        }
        // Flushes again and surfaces a typed error if the table cannot be made durable.
        let offsets = addrs
            .offsets
            .send(Quit::new())
            .await
            .map_err(mailbox("consumer offsets"))
            .and_then(|r| r);
        let store = addrs
            .store
            .send(Quit::new())
            .await
            .map_err(mailbox("message store"))
            .and_then(|r| r);
        let metadata = self.inner.registry.close();
        self.inner.connections.clear();
        let released = self.released().await;
        tracing::info!(broker = %self.inner.config.broker_name, "broker stopped");
        pop.and(offsets).and(store).and(metadata).and(released)
    }

    /// Waits until every actor that held storage has been dropped: a stopped actor is dropped,
    /// with its files and sled trees, only when its arbiter next polls it.
    async fn released(&self) -> Result<(), BrokerError> {
        let Some(holdings) = self.inner.holdings.borrow_mut().take() else {
            return Ok(());
        };
        tokio::time::timeout(RELEASE_WAIT, holdings.released())
            .await
            .map_err(|_| BrokerError::StillHeld {
                waited: RELEASE_WAIT,
            })
    }
}

/// The in-process [`BrokerApi`]: each call boxes the inherent method of the same name, which
/// the remoting processor calls with the wire's extra parameters.
impl BrokerApi for BrokerHandle {
    fn route(&self, topic: String) -> BrokerFuture<TopicRoute> {
        let this = self.clone();
        Box::pin(async move { this.route(&topic).await })
    }

    fn send_messages(&self, messages: Vec<MessageToAppend>) -> BrokerFuture<Vec<SendResult>> {
        let this = self.clone();
        let queue_nums = self.inner.config.default_topic_queue_nums;
        Box::pin(async move { this.send_messages(messages, queue_nums).await })
    }

    fn pull(&self, request: PullRequest) -> BrokerFuture<PullResponse> {
        let this = self.clone();
        Box::pin(async move { this.pull(request).await })
    }

    /// Without the zero rule (setZeroIfNotFound = false, as the remote broker asks too), so
    /// ConsumeFromWhere decides for every new group of skiff's consumers; Java clients reach
    /// the rule over the wire.
    fn query_offset(&self, group: String, queue: MessageQueue) -> BrokerFuture<Option<u64>> {
        let this = self.clone();
        Box::pin(async move {
            this.query_offset(&group, &queue.topic, queue.queue_id, false)
                .await
        })
    }

    /// Waits for the commit either way: the update is queued on the offsets actor's mailbox in
    /// order like any other, so [`OffsetUpdate::Oneway`] would only save one mailbox round trip
    /// and lose the error that the consumer's persister counts and logs.
    fn update_offset(
        &self,
        group: String,
        queue: MessageQueue,
        offset: u64,
        _: OffsetUpdate,
    ) -> BrokerFuture<()> {
        let this = self.clone();
        Box::pin(async move {
            this.update_offset(&group, &queue.topic, queue.queue_id, offset)
                .await
                .map(|_| ())
        })
    }

    fn send_back(&self, request: SendBackRequest) -> BrokerFuture<()> {
        let this = self.clone();
        Box::pin(async move { this.send_back(request).await.map(|_| ()) })
    }

    fn heartbeat(
        &self,
        heartbeat: ConsumerHeartbeat,
        notifier: Arc<dyn ConsumerNotifier>,
    ) -> BrokerFuture<()> {
        let this = self.clone();
        Box::pin(async move { this.heartbeat(heartbeat, notifier).await.map(|_| ()) })
    }

    fn unregister(&self, client_id: String, group: String) -> BrokerFuture<()> {
        let this = self.clone();
        Box::pin(async move { this.unregister(&client_id, &group).await.map(|_| ()) })
    }

    fn consumer_list(&self, group: String) -> BrokerFuture<Vec<String>> {
        let this = self.clone();
        Box::pin(async move { this.consumer_list(&group).await })
    }

    fn register_producer(
        &self,
        group: String,
        client_id: String,
        listener: Arc<dyn TransactionCheckListener>,
    ) -> BrokerFuture<()> {
        self.register_producer(&group, &client_id, listener);
        Box::pin(async { Ok(()) })
    }

    /// A refusal is an error here, as the remote client sees an error answer.
    fn end_transaction(&self, request: EndTransactionRequest) -> BrokerFuture<()> {
        let this = self.clone();
        Box::pin(async move {
            let commit_log_offset = request.commit_log_offset;
            match this.end_transaction(request).await? {
                EndOutcome::Refused(reason) => Err(Refused::EndTransaction {
                    commit_log_offset,
                    reason,
                }
                .into()),
                _ => Ok(()),
            }
        })
    }

    fn lock_queues(
        &self,
        group: String,
        client_id: String,
        queues: Vec<MessageQueue>,
    ) -> BrokerFuture<Vec<MessageQueue>> {
        let this = self.clone();
        Box::pin(async move { this.lock_queues(&group, &client_id, queues).await })
    }

    fn unlock_queues(
        &self,
        group: String,
        client_id: String,
        queues: Vec<MessageQueue>,
    ) -> BrokerFuture<()> {
        let this = self.clone();
        Box::pin(async move { this.unlock_queues(&group, &client_id, queues).await })
    }

    fn min_offset(&self, queue: MessageQueue) -> BrokerFuture<u64> {
        Box::pin(std::future::ready(Ok(
            self.min_offset(&queue.topic, queue.queue_id)
        )))
    }

    fn max_offset(&self, queue: MessageQueue) -> BrokerFuture<u64> {
        Box::pin(std::future::ready(Ok(
            self.max_offset(&queue.topic, queue.queue_id)
        )))
    }

    fn search_offset(
        &self,
        queue: MessageQueue,
        timestamp_ms: i64,
        boundary: BoundaryType,
    ) -> BrokerFuture<u64> {
        Box::pin(std::future::ready(self.search_offset(
            &queue.topic,
            queue.queue_id,
            timestamp_ms,
            boundary,
        )))
    }
}
