//! [`Refused`]: every "no" the broker (or the client side, before a request leaves) answers for
//! what a request asks, as opposed to a failure of the broker itself ([`BrokerError`]'s other
//! variants). Each refusal carries the names and numbers it is about; it knows no wire. Each front
//! door maps a refusal to its own answer in one table: remoting to a response code and remark
//! (`src/remoting/processor/refusal.rs` in the root crate), gRPC to a status code.
//!
//! A refusal changes nothing: whatever was asked is not done, and the broker goes on serving.
//!
//! [`BrokerError`]: crate::broker_api::BrokerError

use crate::logic::delay::InvalidDelayLevel;
use crate::logic::pop::InvalidReceipt;
use crate::logic::recall::InvalidRecall;
use crate::logic::sends::IllegalSend;
use crate::logic::sql92::Sql92Error;
use crate::logic::timer::InvalidTimer;
use skiff_storage::store::AppendRejected;

/// Why a request was refused. See the module docs.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("topic {topic} does not exist")]
    TopicNotExist { topic: String },
    /// The group is unknown and auto-creation of subscription groups is off.
    #[error("subscription group {group} does not exist")]
    GroupNotExist { group: String },
    /// A pull without a subscription from a group that registered none for the topic.
    #[error("group {group} has no subscription for topic {topic}")]
    SubscriptionNotExist { group: String, topic: String },
    /// A SQL92 subscription that does not parse.
    #[error("group {group} subscribes to topic {topic} with an invalid selector")]
    SubscriptionParseFailed {
        group: String,
        topic: String,
        #[source]
        source: Box<InvalidSelector>,
    },
    /// A call that needs a live member of the group (consumer running info, a direct consume).
    #[error("no consumer of group {group} is online")]
    NoConsumer { group: String },
    #[error("message at commit-log offset {physical_offset} not found")]
    MessageNotFound { physical_offset: u64 },
    /// A send to a topic whose permission has no write bit.
    #[error("topic {topic} is not writable")]
    TopicNotWritable { topic: String },
    /// A queue id at or past the number of queues the topic has (its read queues for a
    /// consume, the larger of read and write queues for a send).
    #[error("queue {queue_id} of topic {topic} is out of range: the topic has {queues} queues")]
    IllegalQueue {
        topic: String,
        queue_id: i64,
        queues: u32,
    },
    /// An acknowledgement or invisible-time change of an offset the queue does not hold.
    #[error(
        "offset {offset} of queue {queue_id} of topic {topic} is outside the stored {min}..{max}"
    )]
    OffsetOutOfQueue {
        topic: String,
        queue_id: u32,
        offset: i64,
        min: u64,
        max: u64,
    },
    /// A receipt whose invisible time ended before the acknowledgement or change came, judged
    /// by the broker's clock.
    #[error(
        "the receipt handle is expired: it was invisible until {expired_at_ms}, now is {now_ms}"
    )]
    ReceiptExpired { expired_at_ms: i64, now_ms: i64 },
    /// A client's send the broker refuses before storing anything.
    #[error(transparent)]
    IllegalSend(#[from] IllegalSend),
    /// A name the offset table and the pop checkpoints cannot hold (empty, `@`, NUL).
    #[error("{kind} {name:?} is not a valid name: {rule}")]
    InvalidName {
        kind: NameKind,
        name: String,
        rule: NameRule,
    },
    /// The broker's own cursors (the delay scheduler's, the transaction checker's) live in the
    /// offset table under system groups and topics; a client may not move or delete them.
    #[error("the offsets of {group} on {topic} are the broker's own")]
    BrokerCursor { group: String, topic: String },
    /// A request mode (pull or pop) set on a topic that cannot have one.
    #[error("topic {topic} cannot be given a request mode: {rule}")]
    ModeForbidden { topic: String, rule: ModeRule },
    /// Sends are refused while the store's disk is past `full_ratio` in use.
    #[error("the disk is full: {:.1}% used, sends refused from {:.1}%", used_ratio * 100.0, full_ratio * 100.0)]
    DiskFull { used_ratio: f64, full_ratio: f64 },
    /// The store refused a batch for what it contains; nothing of it was appended.
    #[error(transparent)]
    Rejected(#[from] AppendRejected),
    /// A send's timer properties are refused; nothing was stored.
    #[error(transparent)]
    IllegalTimer(#[from] InvalidTimer),
    #[error("the message's delay level is invalid")]
    InvalidDelay(#[from] InvalidDelayLevel),
    #[error(transparent)]
    InvalidReceipt(#[from] InvalidReceipt),
    /// END_TRANSACTION for a half that cannot be resolved that way.
    #[error("end of transaction for commit-log offset {commit_log_offset} refused: {reason:?}")]
    EndTransaction {
        commit_log_offset: u64,
        reason: crate::logic::transaction::EndRefusal,
    },
    /// A transactional send from a producer that registered no transaction checker.
    #[error("producer group {group} sends a transaction without a registered transaction checker")]
    NoTransactionChecker { group: String },
    /// A send to a topic whose route has no write queue.
    #[error("topic {topic} has no write queue")]
    NoWriteQueue { topic: String },
    /// A consumer heartbeat with no subscription any broker could be found for.
    #[error("group {group} subscribes to nothing")]
    NothingSubscribed { group: String },
    /// A request-reply message without a property the exchange needs.
    #[error("a request message needs the {property} property")]
    MissingProperty { property: &'static str },
    /// A recall the broker refuses (switched off, a handle it cannot use).
    #[error(transparent)]
    Recall(InvalidRecall),
    /// A lite request the broker refuses (its group, its quota, a lite topic's name).
    #[error(transparent)]
    Lite(crate::logic::lite::LiteRefusal),
    /// Request-reply needs a broker reached over the network: replies are pushed to the
    /// requester's connection.
    #[error("request-reply needs a broker reached over the network")]
    RequestReplyNeedsNetwork,
}

impl Refused {
    /// The message's destination cannot take it, now or later: its topic is gone, not writable,
    /// or has fewer queues. A broker copying a message there (a delay or timer firing) drops it
    /// rather than retrying forever; a full disk, by contrast, passes.
    pub fn is_destination_gone(&self) -> bool {
        matches!(
            self,
            Refused::TopicNotExist { .. }
                | Refused::TopicNotWritable { .. }
                | Refused::IllegalQueue { .. }
        )
    }
}

/// Which kind of name broke a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    Topic,
    Group,
}

impl std::fmt::Display for NameKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NameKind::Topic => "topic",
            NameKind::Group => "group",
        })
    }
}

/// The rule a name broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// The offset table's key joins topic and group with `@`, and keys end at NUL; an empty
    /// name addresses nothing.
    OffsetKey,
}

impl std::fmt::Display for NameRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NameRule::OffsetKey => "names are non-empty and hold no '@' and no NUL",
        })
    }
}

/// Why a topic cannot be given a request mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeRule {
    /// Retry topics follow their group's mode (Java: "retry topic is not allowed to set mode").
    RetryTopic,
}

impl std::fmt::Display for ModeRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ModeRule::RetryTopic => "retry topic is not allowed to set mode",
        })
    }
}

/// A SQL92 subscription expression that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("SQL92 expression {expression:?} does not parse")]
pub struct InvalidSelector {
    pub expression: String,
    #[source]
    pub error: Sql92Error,
}
