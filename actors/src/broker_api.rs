//! The one trait through which the consumer and producer side reach a broker, with the request
//! and response types it carries. Two implementations, in-process ([`crate::broker::BrokerHandle`])
//! and remoting (TCP, in the root crate), so embedded and remote consumers run the same actors.
//! Each operation is written once per implementation, as an inherent `async fn` taking the
//! trait's owned arguments; [`forward_broker_api!`](crate::forward_broker_api) writes the trait
//! impl from them, and a decorator (a test double failing chosen calls) from a `dyn BrokerApi`.

use crate::logic::delay::InvalidDelayLevel;
pub use crate::logic::filter::ExpressionType;
use crate::logic::queue::MessageQueue;
pub use crate::logic::transaction::{HalfProblem, TransactionResolution};
pub use crate::refused::{InvalidSelector, Refused};
use crate::LocalFuture;
use bytes::Bytes;
use skiff_storage::key_index::KeyIndexError;
pub use skiff_storage::message::{MessageToAppend, StoredMessage};
use skiff_storage::metadata::MetadataError;
use skiff_storage::offset_table::OffsetTableError;
pub use skiff_storage::store::BoundaryType;
use skiff_storage::store::{AppendRejected, StoreError};
use skiff_storage::timer_index::TimerIndexError;
use skiff_storage::transaction_states::TransactionStatesError;
use std::sync::Arc;
use std::time::Duration;

/// Futures returned by [`BrokerApi`].
pub type BrokerFuture<T> = LocalFuture<Result<T, BrokerError>>;

/// How a broker call failed: the broker refused it ([`BrokerError::Refused`], typed, nothing
/// changed), or something failed that the caller cannot fix by asking differently.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("message store failed")]
    Store(#[from] StoreError),
    #[error("offset table failed")]
    OffsetTable(#[from] OffsetTableError),
    #[error("metadata store failed")]
    Metadata(#[from] MetadataError),
    #[error("key index failed")]
    KeyIndex(#[from] KeyIndexError),
    #[error("transaction states failed")]
    TransactionStates(#[from] TransactionStatesError),
    #[error("timer index failed")]
    TimerIndex(#[from] TimerIndexError),
    #[error("pop state failed")]
    PopState(#[from] skiff_storage::pop_state::PopStateError),
    #[error("stored message {topic}:{queue_id} at offset {queue_offset} does not decode")]
    UnreadableMessage {
        topic: String,
        queue_id: u32,
        queue_offset: u64,
        #[source]
        source: skiff_storage::message::MessageDecodeError,
    },
    /// Shutdown told the broker's actors to stop, but after `waited` one of them still held
    /// its files or sled trees.
    #[error("broker actors still held their storage {waited:?} after being told to stop")]
    StillHeld { waited: Duration },
    /// The broker is shutting down and `what` was already released.
    #[error("{what} is closed")]
    Closed { what: &'static str },
    /// A stored half message that cannot be read back or committed.
    #[error("transactional half message at half-queue offset {queue_offset} is unusable")]
    UnusableHalf {
        queue_offset: u64,
        #[source]
        source: HalfProblem,
    },
    #[error("broker actor {actor} is unavailable")]
    Mailbox {
        actor: &'static str,
        #[source]
        source: actix::MailboxError,
    },
    /// The broker (or the client side, before sending) refused what was asked; nothing changed.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The broker answered a call with no result where one was due.
    #[error("the broker answered {call} with no result")]
    EmptyAnswer { call: &'static str },
    /// A call to a broker over the network failed (the remoting client in the root crate).
    #[error(transparent)]
    Remote(#[from] RemoteError),
}

/// Causes that are refusals convert into [`BrokerError::Refused`], so `?` keeps working on them.
macro_rules! refused_from {
    ($($cause:ty),*) => {$(
        impl From<$cause> for BrokerError {
            fn from(cause: $cause) -> Self {
                BrokerError::Refused(Refused::from(cause))
            }
        }
    )*};
}
refused_from!(
    AppendRejected,
    crate::logic::timer::InvalidTimer,
    InvalidDelayLevel,
    crate::logic::pop::InvalidReceipt
);

/// How a call to a remote broker failed: the broker said no, or the request or its answer was
/// lost, unreadable or late.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// A name server address that is not `host:port`.
    #[error("name server address {addr:?} is not host:port")]
    InvalidAddress { addr: String },
    /// The broker answered with a code the call does not accept; `remark` is its text, not a
    /// cause on this side.
    #[error("broker {addr} answered code {code}: {remark}")]
    Answered {
        addr: String,
        code: i32,
        remark: String,
    },
    /// The request did not reach `addr` or its answer did not come back: no connection, a lost
    /// one, a client already shut down.
    #[error("request to {addr} failed")]
    Transport {
        addr: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// `addr` answered, but `what` in the answer cannot be read.
    #[error("undecodable {what} from {addr}")]
    Undecodable {
        addr: String,
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The name server's route of `topic` names no master broker with queues.
    #[error("the route of topic {topic} from {namesrv} names no master broker with queues")]
    NoBroker { namesrv: String, topic: String },
    /// No route known to this client names a master of `broker_name` (a queue of `topic`).
    #[error("no master address known for broker {broker_name} (topic {topic})")]
    UnknownBroker { broker_name: String, topic: String },
    #[error("request to {addr} timed out after {timeout:?}")]
    Timeout { addr: String, timeout: Duration },
}

/// How a stored message stands when its send is answered (RocketMQ's `SendStatus`): under every
/// status the message is stored; all but `Ok` say a durability the broker was configured to
/// wait for had not come within its timeout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SendStatus {
    #[default]
    Ok,
    /// Under the `Sync` flush policy: the fsync had not finished within the sync flush timeout.
    FlushDiskTimeout,
    /// A remote broker's slave had not caught up within its timeout.
    FlushSlaveTimeout,
    /// A remote broker had no slave to replicate to.
    SlaveNotAvailable,
}

impl SendStatus {
    /// Every status, for code that maps from another vocabulary back to this one.
    pub const ALL: [SendStatus; 4] = [
        SendStatus::Ok,
        SendStatus::FlushDiskTimeout,
        SendStatus::FlushSlaveTimeout,
        SendStatus::SlaveNotAvailable,
    ];

    /// The name RocketMQ's clients give it.
    pub fn name(self) -> &'static str {
        match self {
            SendStatus::Ok => "SEND_OK",
            SendStatus::FlushDiskTimeout => "FLUSH_DISK_TIMEOUT",
            SendStatus::FlushSlaveTimeout => "FLUSH_SLAVE_TIMEOUT",
            SendStatus::SlaveNotAvailable => "SLAVE_NOT_AVAILABLE",
        }
    }
}

/// Where a sent message landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendResult {
    /// The broker that stored the message (owner of the queue `queue_id`).
    pub broker_name: String,
    pub queue_id: u32,
    pub queue_offset: u64,
    pub physical_offset: u64,
    /// The offset message id (store host + commit-log offset, hex).
    pub offset_msg_id: String,
    pub status: SendStatus,
    /// A timer message's recall handle (RocketMQ 5.3's `recallHandle`): what a recall names it
    /// by. `None` for any other message.
    pub recall_handle: Option<String>,
}

/// A pull as the push consumer issues it (PULL_MESSAGE).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullRequest {
    pub group: String,
    pub topic: String,
    /// The broker that owns the queue (a remote client pulls from its master; the in-process
    /// broker is the only one and ignores it).
    pub broker_name: String,
    pub queue_id: u32,
    pub queue_offset: u64,
    pub max_messages: u32,
    /// Piggybacked commit (FLAG_COMMIT_OFFSET); applied only on a request's first arrival.
    pub commit_offset: Option<u64>,
    /// Long-poll hold time (FLAG_SUSPEND); `None` answers at once.
    pub suspend_timeout: Option<Duration>,
    /// Subscription expression carried in the request (FLAG_SUBSCRIPTION), e.g. `*`, `A || B`,
    /// or a SQL92 selector.
    pub subscription: Option<String>,
    /// How `subscription` is read.
    pub expression_type: ExpressionType,
}

/// A pull's outcome; defined with the rule that derives it from a store read.
pub use crate::logic::pull::{NoNewMessage, OffsetMoved, PullStatus};

#[derive(Clone, Debug)]
pub struct PullResponse {
    pub status: PullStatus,
    pub next_begin_offset: u64,
    pub min_offset: u64,
    pub max_offset: u64,
    /// Stored records back to back (decode with `skiff_storage::message::decode_records`).
    pub records: Bytes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum MessageModel {
    Clustering,
    Broadcasting,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ConsumeType {
    /// Push consumer (CONSUME_PASSIVELY).
    Passively,
    /// Pull consumer (CONSUME_ACTIVELY).
    Actively,
}

/// One topic a consumer subscribes to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SubscriptionEntry {
    pub topic: String,
    pub expression_type: ExpressionType,
    pub expression: String,
    pub sub_version: i64,
}

/// What a consumer tells the broker in its heartbeat.
#[derive(Clone, Debug)]
pub struct ConsumerHeartbeat {
    pub client_id: String,
    pub group: String,
    pub consume_type: ConsumeType,
    pub message_model: MessageModel,
    /// RocketMQ's ConsumeFromWhere name, kept for admin display.
    pub consume_from_where: String,
    pub subscriptions: Vec<SubscriptionEntry>,
}

/// One client connection to the broker, for the lifetime of the process: a remoting connection
/// takes one when it is accepted, an in-process client (an embedded consumer or producer) when
/// it is created, and a gRPC client session when the client is first seen. One counter for all,
/// so they never collide on one broker.
///
/// A gRPC client is one `x-mq-client-id` over however many HTTP/2 connections it opens, and its
/// way back is its Telemetry stream, not a socket: the broker registers the session, not its
/// transport connections, under one id (`ClientSessionId` in `src/grpc/clients.rs` names the
/// same value), so everywhere in the broker "connection" means what clients are reached and
/// released through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionId(pub u64);

static NEXT_CONNECTION_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl ConnectionId {
    /// A connection id no other connection of this process has.
    pub fn next() -> ConnectionId {
        ConnectionId(NEXT_CONNECTION_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl std::fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "conn-{}", self.0)
    }
}

/// How the broker reaches a registered consumer (NOTIFY_CONSUMER_IDS_CHANGED).
pub trait ConsumerNotifier {
    /// The connection this notifier writes to: every client registered through it leaves when
    /// that connection closes.
    fn connection(&self) -> ConnectionId;
    /// Best effort: a lost notification is repaired by the periodic rebalance.
    fn consumer_ids_changed(&self, group: &str);
}

/// The connection a notifier writes to.
impl From<&Arc<dyn ConsumerNotifier>> for ConnectionId {
    fn from(notifier: &Arc<dyn ConsumerNotifier>) -> Self {
        notifier.connection()
    }
}

/// How the broker reaches a live producer of a group to ask about a pending transaction
/// (CHECK_TRANSACTION_STATE, oneway as in Java): a connection over the network, the embedded
/// producer's checker in process.
pub trait TransactionCheckListener {
    /// The connection this listener writes to.
    fn connection(&self) -> ConnectionId;
    /// Best effort: an unanswered check is repeated at the next check round.
    fn check_transaction_state(&self, check: TransactionCheck);
}

/// One check-back of a half message (CHECK_TRANSACTION_STATE's header and body).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionCheck {
    pub producer_group: String,
    pub broker_name: String,
    /// The half's offset in the half queue, echoed as `tranStateTableOffset`.
    pub tran_state_table_offset: u64,
    /// The half's commit-log offset, echoed as `commitLogOffset`.
    pub commit_log_offset: u64,
    /// The half's offset message id.
    pub offset_msg_id: String,
    /// The producer's message id (`UNIQ_KEY`), also the transaction id.
    pub msg_id: Option<String>,
    /// The half message with its real topic and queue.
    pub message: StoredMessage,
}

/// END_TRANSACTION as a producer sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndTransactionRequest {
    pub producer_group: String,
    pub tran_state_table_offset: u64,
    pub commit_log_offset: u64,
    pub resolution: TransactionResolution,
    /// This is the answer to a check-back.
    pub from_transaction_check: bool,
    pub msg_id: String,
    pub transaction_id: Option<String>,
    /// The broker holding the half (a remote client sends it there).
    pub broker_name: String,
}

/// Send-back of a failed message (CONSUMER_SEND_MSG_BACK).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendBackRequest {
    pub group: String,
    /// Commit-log offset of the original message.
    pub physical_offset: u64,
    /// 0 = the broker decides (3 + reconsume times); < 0 = dead-letter now.
    pub delay_level: i32,
    pub origin_msg_id: Option<String>,
    pub origin_topic: Option<String>,
    pub max_reconsume_times: Option<u32>,
    /// The broker the message was pulled from, which holds it at `physical_offset`; `None`
    /// lets a remote client pick the broker of the origin topic.
    pub broker_name: Option<String>,
}

/// The queues one broker holds of a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerQueues {
    pub broker_name: String,
    pub read_queue_nums: u32,
    pub write_queue_nums: u32,
}

/// A topic's route: every broker (master) holding queues of it, in route order. The in-process
/// broker reports itself alone; a cluster's name server one entry per master broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicRoute {
    pub topic: String,
    pub brokers: Vec<BrokerQueues>,
}

impl TopicRoute {
    /// The route of a topic held by one broker.
    pub fn single(
        topic: impl Into<String>,
        broker_name: impl Into<String>,
        read_queue_nums: u32,
        write_queue_nums: u32,
    ) -> TopicRoute {
        TopicRoute {
            topic: topic.into(),
            brokers: vec![BrokerQueues {
                broker_name: broker_name.into(),
                read_queue_nums,
                write_queue_nums,
            }],
        }
    }

    /// Every queue consumers read, broker by broker.
    pub fn read_queues(&self) -> Vec<MessageQueue> {
        self.queues(|b| b.read_queue_nums)
    }

    /// Every queue producers write, broker by broker.
    pub fn write_queues(&self) -> Vec<MessageQueue> {
        self.queues(|b| b.write_queue_nums)
    }

    /// Read queues over all brokers.
    pub fn read_queue_nums(&self) -> u32 {
        self.brokers.iter().map(|b| b.read_queue_nums).sum()
    }

    /// Write queues over all brokers.
    pub fn write_queue_nums(&self) -> u32 {
        self.brokers.iter().map(|b| b.write_queue_nums).sum()
    }

    fn queues(&self, count: impl Fn(&BrokerQueues) -> u32) -> Vec<MessageQueue> {
        self.brokers
            .iter()
            .flat_map(|b| {
                (0..count(b)).map(move |id| MessageQueue::new(&self.topic, &b.broker_name, id))
            })
            .collect()
    }
}

/// How an offset update reaches the broker (UPDATE_CONSUMER_OFFSET).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetUpdate {
    /// The caller does not need the broker's verdict: RocketMQ's periodic persist, repeated at
    /// the next tick anyway. A remote broker gets a oneway request, whose failures only the
    /// broker sees; the in-process broker still answers (see
    /// [`crate::broker::BrokerHandle::update_offset`]).
    Oneway,
    /// The caller waits for the broker's answer: a graceful handoff, after which the queue's
    /// next owner reads the offset.
    Acknowledged,
}

/// A send (SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendRequest {
    pub messages: Vec<MessageToAppend>,
    /// The broker that owns the messages' queues; `None` sends to the broker of the topic (the
    /// in-process broker; a remote client: the first broker of the route). Only a client of
    /// several brokers needs the name; the in-process broker ignores it.
    pub broker_name: Option<String>,
    /// Queues a topic this send auto-creates gets (the header's `defaultTopicQueueNums`);
    /// `None` takes the configured default.
    pub auto_create_queue_nums: Option<u32>,
}

impl SendRequest {
    /// Sends `messages` to the broker of their topic with the configured defaults.
    pub fn new(messages: Vec<MessageToAppend>) -> SendRequest {
        SendRequest {
            messages,
            broker_name: None,
            auto_create_queue_nums: None,
        }
    }

    /// Sends `messages` to the broker called `broker_name`, which owns their queues.
    pub fn to_broker(broker_name: String, messages: Vec<MessageToAppend>) -> SendRequest {
        SendRequest {
            broker_name: Some(broker_name),
            ..SendRequest::new(messages)
        }
    }
}

/// QUERY_CONSUMER_OFFSET: the committed offset of `group` on `queue`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryOffsetRequest {
    pub group: String,
    pub queue: MessageQueue,
    /// RocketMQ's `setZeroIfNotFound`: without a stored offset, answer 0 while the queue still
    /// starts at 0 (see [`crate::broker::BrokerHandle::query_offset`]). skiff's own consumers
    /// ask without it, so ConsumeFromWhere decides for every new group; Java clients ask with
    /// it over the wire.
    pub set_zero_if_not_found: bool,
}

/// How an implementation's own answer to a call reads through [`BrokerApi`]. The in-process
/// broker answers some calls with what they did (a commit applied or ignored, where a send-back
/// went), which the remoting processor and tests read and a client only needs as done.
pub trait Answer<T> {
    fn answer(self) -> Result<T, BrokerError>;
}

impl<T> Answer<T> for T {
    fn answer(self) -> Result<T, BrokerError> {
        Ok(self)
    }
}

/// Everything the consumer and producer sides need from a broker. Arguments are owned, so an
/// implementation can move them into the future it returns. Implementations write each call
/// once, as an inherent method, and get this impl from
/// [`forward_broker_api!`](crate::forward_broker_api).
pub trait BrokerApi {
    fn route(&self, topic: String) -> BrokerFuture<TopicRoute>;
    /// A producer's route: a missing topic gets the queues its first send would create.
    fn publish_route(&self, topic: String) -> BrokerFuture<TopicRoute>;
    fn send_messages(&self, request: SendRequest) -> BrokerFuture<Vec<SendResult>>;
    fn pull(&self, request: PullRequest) -> BrokerFuture<PullResponse>;
    /// `Ok(None)` when the broker has no offset (QUERY_NOT_FOUND); errors stay errors.
    fn query_offset(&self, request: QueryOffsetRequest) -> BrokerFuture<Option<u64>>;
    fn update_offset(
        &self,
        group: String,
        queue: MessageQueue,
        offset: u64,
        update: OffsetUpdate,
    ) -> BrokerFuture<()>;
    fn send_back(&self, request: SendBackRequest) -> BrokerFuture<()>;
    fn heartbeat(
        &self,
        heartbeat: ConsumerHeartbeat,
        notifier: Arc<dyn ConsumerNotifier>,
    ) -> BrokerFuture<()>;
    fn unregister(&self, client_id: String, group: String) -> BrokerFuture<()>;
    fn consumer_list(&self, group: String) -> BrokerFuture<Vec<String>>;
    /// Registers a producer of `group` whose `listener` answers check-backs of the group's
    /// pending transactions (Java's producer heartbeat).
    fn register_producer(
        &self,
        group: String,
        client_id: String,
        listener: Arc<dyn TransactionCheckListener>,
    ) -> BrokerFuture<()>;
    /// END_TRANSACTION: commits or rolls back a half message (UNKNOW leaves it for check-back).
    /// A refusal is an error, as a remote client sees an error answer.
    fn end_transaction(&self, request: EndTransactionRequest) -> BrokerFuture<()>;
    /// Request-reply: sends `message` (carrying `CORRELATION_ID` and `REPLY_TO_CLIENT`) to the
    /// broker called `broker_name` and waits up to `timeout` for the reply a consumer sends
    /// back. Only a client reached over the network gets replies pushed to it.
    fn request(
        &self,
        message: MessageToAppend,
        broker_name: String,
        timeout: Duration,
    ) -> BrokerFuture<StoredMessage>;
    /// LOCK_BATCH_MQ: the queues now locked by `client_id` (a subset of `queues`).
    fn lock_queues(
        &self,
        group: String,
        client_id: String,
        queues: Vec<MessageQueue>,
    ) -> BrokerFuture<Vec<MessageQueue>>;
    fn unlock_queues(
        &self,
        group: String,
        client_id: String,
        queues: Vec<MessageQueue>,
    ) -> BrokerFuture<()>;
    fn min_offset(&self, queue: MessageQueue) -> BrokerFuture<u64>;
    fn max_offset(&self, queue: MessageQueue) -> BrokerFuture<u64>;
    fn search_offset(
        &self,
        queue: MessageQueue,
        timestamp_ms: i64,
        boundary: BoundaryType,
    ) -> BrokerFuture<u64>;
}

/// Passes on the future of an inherent call in [`forward_broker_api!`]. A call that resolved to
/// the [`BrokerApi`] method itself (the inherent one is missing) returns a [`BrokerFuture`],
/// for which both [`InherentCall`] impls apply: the marker cannot be inferred and the impl does
/// not compile, where it would otherwise recurse forever at run time.
#[doc(hidden)]
pub fn inherent_call<Marker, F: InherentCall<Marker>>(future: F) -> F {
    future
}

/// See [`inherent_call`].
#[doc(hidden)]
pub trait InherentCall<Marker> {}

impl<F: std::future::Future> InherentCall<()> for F {}

impl<T> InherentCall<BrokerFuture<T>> for BrokerFuture<T> {}

/// Writes `impl BrokerApi` for a type, so no implementation repeats the trait's signatures:
///
/// - `forward_broker_api!(Type)`: each call clones the (cheap, `Rc`-backed) value and awaits
///   its inherent `async fn` of the same name, which takes the trait's owned arguments; the
///   answer reads through [`Answer`]. Every call must exist as an inherent method: a missing
///   one would resolve to the trait method itself, which [`inherent_call`] refuses to compile.
/// - `forward_broker_api!(Type, delegate to field, intercept by method)`: a decorator. Each
///   call first asks `self.method(name)` (the call's name as the trait spells it) for an error
///   to answer instead; `None` passes the call on to `self.field` (an `Rc<dyn BrokerApi>`).
///
/// The call list below mirrors the trait; the compiler holds the two together.
#[macro_export]
macro_rules! forward_broker_api {
    ($ty:ty) => {
        $crate::forward_broker_api!(@impl $ty, (inherent $ty));
    };
    ($ty:ty, delegate to $inner:ident, intercept by $intercept:ident) => {
        $crate::forward_broker_api!(@impl $ty, (delegate $inner $intercept));
    };
    (@impl $ty:ty, $mode:tt) => {
        impl $crate::broker_api::BrokerApi for $ty {
            $crate::forward_broker_api!(@call $mode
                route(topic: String) -> $crate::broker_api::TopicRoute);
            $crate::forward_broker_api!(@call $mode
                publish_route(topic: String) -> $crate::broker_api::TopicRoute);
            $crate::forward_broker_api!(@call $mode
                send_messages(request: $crate::broker_api::SendRequest)
                    -> Vec<$crate::broker_api::SendResult>);
            $crate::forward_broker_api!(@call $mode
                pull(request: $crate::broker_api::PullRequest) -> $crate::broker_api::PullResponse);
            $crate::forward_broker_api!(@call $mode
                query_offset(request: $crate::broker_api::QueryOffsetRequest) -> Option<u64>);
            $crate::forward_broker_api!(@call $mode
                update_offset(
                    group: String,
                    queue: $crate::logic::queue::MessageQueue,
                    offset: u64,
                    update: $crate::broker_api::OffsetUpdate
                ) -> ());
            $crate::forward_broker_api!(@call $mode
                send_back(request: $crate::broker_api::SendBackRequest) -> ());
            $crate::forward_broker_api!(@call $mode
                heartbeat(
                    heartbeat: $crate::broker_api::ConsumerHeartbeat,
                    notifier: ::std::sync::Arc<dyn $crate::broker_api::ConsumerNotifier>
                ) -> ());
            $crate::forward_broker_api!(@call $mode
                unregister(client_id: String, group: String) -> ());
            $crate::forward_broker_api!(@call $mode consumer_list(group: String) -> Vec<String>);
            $crate::forward_broker_api!(@call $mode
                register_producer(
                    group: String,
                    client_id: String,
                    listener: ::std::sync::Arc<dyn $crate::broker_api::TransactionCheckListener>
                ) -> ());
            $crate::forward_broker_api!(@call $mode
                end_transaction(request: $crate::broker_api::EndTransactionRequest) -> ());
            $crate::forward_broker_api!(@call $mode
                request(
                    message: $crate::broker_api::MessageToAppend,
                    broker_name: String,
                    timeout: ::std::time::Duration
                ) -> $crate::broker_api::StoredMessage);
            $crate::forward_broker_api!(@call $mode
                lock_queues(
                    group: String,
                    client_id: String,
                    queues: Vec<$crate::logic::queue::MessageQueue>
                ) -> Vec<$crate::logic::queue::MessageQueue>);
            $crate::forward_broker_api!(@call $mode
                unlock_queues(
                    group: String,
                    client_id: String,
                    queues: Vec<$crate::logic::queue::MessageQueue>
                ) -> ());
            $crate::forward_broker_api!(@call $mode
                min_offset(queue: $crate::logic::queue::MessageQueue) -> u64);
            $crate::forward_broker_api!(@call $mode
                max_offset(queue: $crate::logic::queue::MessageQueue) -> u64);
            $crate::forward_broker_api!(@call $mode
                search_offset(
                    queue: $crate::logic::queue::MessageQueue,
                    timestamp_ms: i64,
                    boundary: $crate::broker_api::BoundaryType
                ) -> u64);
        }
    };
    (@call (inherent $ty:ty) $call:ident($($arg:ident: $arg_ty:ty),* $(,)?) -> $answer:ty) => {
        fn $call(&self, $($arg: $arg_ty),*) -> $crate::broker_api::BrokerFuture<$answer> {
            let this: $ty = ::std::clone::Clone::clone(self);
            ::std::boxed::Box::pin(async move {
                let answer =
                    $crate::broker_api::inherent_call(<$ty>::$call(&this, $($arg),*)).await?;
                $crate::broker_api::Answer::<$answer>::answer(answer)
            })
        }
    };
    (@call (delegate $inner:ident $intercept:ident)
        $call:ident($($arg:ident: $arg_ty:ty),* $(,)?) -> $answer:ty) => {
        fn $call(&self, $($arg: $arg_ty),*) -> $crate::broker_api::BrokerFuture<$answer> {
            match self.$intercept(stringify!($call)) {
                Some(error) => ::std::boxed::Box::pin(::std::future::ready(Err(error))),
                None => self.$inner.$call($($arg),*),
            }
        }
    };
}
