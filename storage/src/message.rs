//! The RocketMQ stored-message layout (`reference/rocketmq-remoting.md` §6.1).
//!
//! The commit log stores exactly these bytes, so a pull response body is a concatenation of
//! stored records and needs no re-encoding.

use bytes::Bytes;
use std::net::SocketAddr;

/// Magic code of a V1 record (topic length fits in one byte).
pub const MAGIC_V1: i32 = -626_843_481;
/// Magic code of a V2 record (topic length as i16, used when the topic is longer than 127 bytes).
pub const MAGIC_V2: i32 = -626_843_477;

/// Property separators of the properties string (§6.4).
pub const NAME_VALUE_SEPARATOR: char = '\u{1}';
pub const PROPERTY_SEPARATOR: char = '\u{2}';

/// Well-known property names.
pub mod property {
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
}

/// A message as a producer hands it to the store; the store assigns offsets and timestamps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageToAppend {
    pub topic: String,
    pub queue_id: u32,
    pub flag: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    /// Properties in wire form (`name\x01value\x02...`), kept encoded so the hot path copies bytes.
    pub properties: String,
    pub body: Bytes,
}

/// A decoded stored record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredMessage {
    pub queue_id: u32,
    pub flag: i32,
    pub queue_offset: u64,
    pub physical_offset: u64,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: Bytes,
    pub topic: String,
    pub properties: String,
    /// Length of the whole record in bytes.
    pub stored_size: u32,
}
