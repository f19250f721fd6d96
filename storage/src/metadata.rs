//! Topic and subscription-group configuration, in sled trees with the [`crate::record`] codec.
//!
//! API CONTRACT (implementation pending; keep these public signatures).

/// RocketMQ permission bits.
pub const PERM_READ: u32 = 4;
pub const PERM_WRITE: u32 = 2;

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TopicConfig {
    pub name: String,
    pub read_queue_nums: u32,
    pub write_queue_nums: u32,
    pub perm: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SubscriptionGroupConfig {
    pub name: String,
    /// Reconsumes before a message goes to `%DLQ%group` (default 16).
    pub retry_max_times: u32,
    /// Queues of `%RETRY%group` (default 1; 0 drops failed messages).
    pub retry_queue_nums: u32,
    pub consume_broadcast_enable: bool,
    pub consume_from_min_enable: bool,
}
