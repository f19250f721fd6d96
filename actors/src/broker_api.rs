//! The one trait through which the consumer and producer side reach a broker, with the request
//! and response types it carries. Two implementations: in-process
//! ([`crate::broker::BrokerHandle`], the broker actors' addresses) and remoting (TCP, in the root
//! crate). Embedded and remote consumers therefore run the same actors.

use crate::logic::queue::MessageQueue;
use bytes::Bytes;
use skiff_storage::message::MessageToAppend;
use skiff_storage::store::BoundaryType;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// Futures returned by [`BrokerApi`]; not `Send` because actix runs each arbiter on one thread.
pub type BrokerFuture<T> = Pin<Box<dyn Future<Output = Result<T, BrokerError>>>>;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("message store failed: {0}")]
    Store(#[from] skiff_storage::store::StoreError),
    #[error("offset table failed: {0}")]
    OffsetTable(#[from] skiff_storage::offset_table::OffsetTableError),
    #[error("metadata failed: {0}")]
    Metadata(String),
    #[error("broker actor {actor} is unavailable: {source}")]
    Mailbox {
        actor: &'static str,
        #[source]
        source: actix::MailboxError,
    },
    #[error("topic {topic} does not exist")]
    TopicNotExist { topic: String },
    #[error("no consumer of group {group} is online")]
    NoConsumer { group: String },
    /// SUBSCRIPTION_GROUP_NOT_EXIST (26): unknown group and auto-creation is off.
    #[error("subscription group {group} does not exist")]
    SubscriptionGroupNotExist { group: String },
    /// SUBSCRIPTION_NOT_EXIST (24): a pull without a subscription from a group that registered none
    /// for the topic.
    #[error("group {group} has no subscription for topic {topic}")]
    SubscriptionNotExist { group: String, topic: String },
    #[error("message at commit-log offset {physical_offset} not found")]
    MessageNotFound { physical_offset: u64 },
    #[error("invalid request: {reason}")]
    InvalidRequest { reason: String },
    #[error("broker {addr} answered code {code}: {remark}")]
    Remote {
        addr: String,
        code: i32,
        remark: String,
    },
    #[error("request to {addr} failed: {reason}")]
    Transport { addr: String, reason: String },
    #[error("request to {addr} timed out after {timeout:?}")]
    Timeout { addr: String, timeout: Duration },
}

/// Where a sent message landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendResult {
    pub queue_id: u32,
    pub queue_offset: u64,
    pub physical_offset: u64,
    /// The offset message id (store host + commit-log offset, hex).
    pub offset_msg_id: String,
}

/// A pull as the push consumer issues it (PULL_MESSAGE).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullRequest {
    pub group: String,
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: u64,
    pub max_messages: u32,
    /// Piggybacked commit (FLAG_COMMIT_OFFSET); applied only on a request's first arrival.
    pub commit_offset: Option<u64>,
    /// Long-poll hold time (FLAG_SUSPEND); `None` answers at once.
    pub suspend_timeout: Option<Duration>,
    /// Subscription expression carried in the request (FLAG_SUBSCRIPTION), e.g. `*`, `A || B`.
    pub subscription: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullStatus {
    Found,
    NoNewMessage,
    NoMatchedMessage,
    OffsetIllegal,
}

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

/// How the broker reaches a registered consumer (NOTIFY_CONSUMER_IDS_CHANGED).
pub trait ConsumerNotifier {
    /// Best effort: a lost notification is repaired by the periodic rebalance.
    fn consumer_ids_changed(&self, group: &str);
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
}

/// Queue counts of a topic as the route reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicRoute {
    pub topic: String,
    pub broker_name: String,
    pub read_queue_nums: u32,
    pub write_queue_nums: u32,
}

/// Everything the consumer and producer sides need from a broker.
pub trait BrokerApi {
    fn route(&self, topic: &str) -> BrokerFuture<TopicRoute>;
    fn send(&self, messages: Vec<MessageToAppend>) -> BrokerFuture<Vec<SendResult>>;
    fn pull(&self, request: PullRequest) -> BrokerFuture<PullResponse>;
    /// `Ok(None)` when the broker has no offset (QUERY_NOT_FOUND); errors stay errors.
    fn query_offset(&self, group: &str, queue: &MessageQueue) -> BrokerFuture<Option<u64>>;
    /// `acknowledged = false` is RocketMQ's oneway update; graceful handoff uses `true`.
    fn update_offset(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: u64,
        acknowledged: bool,
    ) -> BrokerFuture<()>;
    fn send_back(&self, request: SendBackRequest) -> BrokerFuture<()>;
    fn heartbeat(
        &self,
        heartbeat: ConsumerHeartbeat,
        notifier: Arc<dyn ConsumerNotifier>,
    ) -> BrokerFuture<()>;
    fn unregister(&self, client_id: &str, group: &str) -> BrokerFuture<()>;
    fn consumer_list(&self, group: &str) -> BrokerFuture<Vec<String>>;
    fn lock_batch(
        &self,
        group: &str,
        client_id: &str,
        queues: Vec<MessageQueue>,
    ) -> BrokerFuture<Vec<MessageQueue>>;
    fn unlock_batch(
        &self,
        group: &str,
        client_id: &str,
        queues: Vec<MessageQueue>,
    ) -> BrokerFuture<()>;
    fn min_offset(&self, queue: &MessageQueue) -> BrokerFuture<u64>;
    fn max_offset(&self, queue: &MessageQueue) -> BrokerFuture<u64>;
    fn search_offset(
        &self,
        queue: &MessageQueue,
        timestamp_ms: i64,
        boundary: BoundaryType,
    ) -> BrokerFuture<u64>;
}
