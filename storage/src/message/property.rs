//! Message property names: the well-known ones skiff reads and writes, and the whole set
//! RocketMQ reserves ([`RESERVED`], built from the names above it), so no name is spelled twice.

pub const TAGS: &str = "TAGS";
pub const KEYS: &str = "KEYS";
pub const UNIQ_KEY: &str = "UNIQ_KEY";
pub const DELAY: &str = "DELAY";
pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
pub const REAL_TOPIC: &str = "REAL_TOPIC";
pub const REAL_QID: &str = "REAL_QID";
pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
pub const MAX_RECONSUME_TIMES: &str = "MAX_RECONSUME_TIMES";
pub const WAIT: &str = "WAIT";
/// The cluster of the broker that stored the message (request-reply routes replies by it).
pub const CLUSTER: &str = "CLUSTER";
/// The storing broker's region.
pub const MSG_REGION: &str = "MSG_REGION";
/// The storing broker's trace switch.
pub const TRACE_ON: &str = "TRACE_ON";
/// Request-reply: the client id of the requester a reply goes back to.
pub const REPLY_TO_CLIENT: &str = "REPLY_TO_CLIENT";
/// Request-reply: what ties a reply to its request.
pub const CORRELATION_ID: &str = "CORRELATION_ID";
/// Request-reply: how long the requester waits (ms).
pub const TTL: &str = "TTL";
/// `reply` on a reply message.
pub const MSG_TYPE: &str = "MSG_TYPE";
/// When the broker pushed a reply to its requester (epoch ms).
pub const PUSH_REPLY_TIME: &str = "PUSH_REPLY_TIME";
/// Timer messages (RocketMQ 5): deliver at this absolute epoch ms ...
pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
/// ... or this many seconds after the broker receives the message ...
pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
/// ... or this many milliseconds after.
pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
/// The broker's due time of a timer message (rounded), set when it enters the timer topic.
pub const TIMER_OUT_MS: &str = "TIMER_OUT_MS";
/// On a delivered timer copy: when the timer message was stored, and when it was delivered.
pub const TIMER_ENQUEUE_MS: &str = "TIMER_ENQUEUE_MS";
pub const TIMER_DEQUEUE_MS: &str = "TIMER_DEQUEUE_MS";
/// Pop: the receipt of a popped message (`docs/wire-protocol.md` §4.6).
pub const POP_CK: &str = "POP_CK";
/// Pop: when the message was first popped (epoch ms), kept across revivals.
pub const FIRST_POP_TIME: &str = "1ST_POP_TIME";

/// Transactions: the client marks a half message with it; a commit removes it.
pub const TRAN_MSG: &str = "TRAN_MSG";
/// Transactions: the producer group a half's check-back goes to.
pub const PRODUCER_GROUP: &str = "PGROUP";
/// gRPC: a FIFO message's group.
pub const SHARDING_KEY: &str = "__SHARDINGKEY";
/// A priority topic's message: its priority, which picks its queue (RocketMQ 5.4).
pub const PRIORITY: &str = "_SYS_MSG_PRIORITY_";
/// A lite message: the lite topic of its parent it belongs to (RocketMQ 5.5).
pub const LITE_TOPIC: &str = "__LITE_TOPIC";
/// gRPC: the producer's address as the client saw it.
pub const BORN_HOST: &str = "__BORNHOST";
pub const BORN_TIMESTAMP: &str = "BORN_TIMESTAMP";
pub const TRACE_CONTEXT: &str = "TRACE_CONTEXT";
pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
/// Where a dead letter came from.
pub const DLQ_ORIGIN_TOPIC: &str = "DLQ_ORIGIN_TOPIC";
pub const DLQ_ORIGIN_MESSAGE_ID: &str = "DLQ_ORIGIN_MESSAGE_ID";
pub const MIN_OFFSET: &str = "MIN_OFFSET";
pub const MAX_OFFSET: &str = "MAX_OFFSET";
pub const BUYER_ID: &str = "BUYER_ID";
pub const TRANSFER_FLAG: &str = "TRANSFER_FLAG";
pub const CORRECTION_FLAG: &str = "CORRECTION_FLAG";
pub const MQ2_FLAG: &str = "MQ2_FLAG";
pub const CONSUME_START_TIME: &str = "CONSUME_START_TIME";
pub const POP_CK_OFFSET: &str = "POP_CK_OFFSET";
pub const TRAN_PREPARED_QUEUE_OFFSET: &str = "TRAN_PREPARED_QUEUE_OFFSET";
pub const DUP_INFO: &str = "DUP_INFO";
pub const EXTEND_UNIQ_INFO: &str = "EXTEND_UNIQ_INFO";
pub const INSTANCE_ID: &str = "INSTANCE_ID";
pub const ARRIVE_TIME: &str = "ARRIVE_TIME";
pub const INNER_MULTI_QUEUE_OFFSET: &str = "INNER_MULTI_QUEUE_OFFSET";
pub const TIMER_ROLL_TIMES: &str = "TIMER_ROLL_TIMES";
pub const TIMER_DEL_UNIQKEY: &str = "TIMER_DEL_UNIQKEY";
pub const TIMER_DELAY_LEVEL: &str = "TIMER_DELAY_LEVEL";
pub const CRC32: &str = "__CRC32#";

/// Property names RocketMQ keeps for itself (Java's `MessageConst.STRING_HASH_SET`): a user
/// property may not use one, and a stored one is not a user property of the message.
pub const RESERVED: &[&str] = &[
    TRACE_ON,
    MSG_REGION,
    KEYS,
    TAGS,
    WAIT,
    DELAY,
    RETRY_TOPIC,
    REAL_TOPIC,
    REAL_QID,
    TRAN_MSG,
    PRODUCER_GROUP,
    MIN_OFFSET,
    MAX_OFFSET,
    BUYER_ID,
    ORIGIN_MESSAGE_ID,
    TRANSFER_FLAG,
    CORRECTION_FLAG,
    MQ2_FLAG,
    RECONSUME_TIME,
    UNIQ_KEY,
    MAX_RECONSUME_TIMES,
    CONSUME_START_TIME,
    POP_CK,
    POP_CK_OFFSET,
    FIRST_POP_TIME,
    TRAN_PREPARED_QUEUE_OFFSET,
    DUP_INFO,
    EXTEND_UNIQ_INFO,
    INSTANCE_ID,
    CORRELATION_ID,
    REPLY_TO_CLIENT,
    TTL,
    ARRIVE_TIME,
    PUSH_REPLY_TIME,
    CLUSTER,
    MSG_TYPE,
    INNER_MULTI_QUEUE_OFFSET,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TIMER_ENQUEUE_MS,
    TIMER_DEQUEUE_MS,
    TIMER_ROLL_TIMES,
    TIMER_OUT_MS,
    TIMER_DEL_UNIQKEY,
    TIMER_DELAY_LEVEL,
    BORN_HOST,
    BORN_TIMESTAMP,
    DLQ_ORIGIN_TOPIC,
    DLQ_ORIGIN_MESSAGE_ID,
    CRC32,
    PRIORITY,
    LITE_TOPIC,
];
