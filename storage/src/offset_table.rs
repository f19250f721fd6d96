//! The broker's durable consumer-offset table: `topic@group` -> queue id -> offset.
//!
//! API CONTRACT (implementation pending; keep these public signatures).

use std::path::PathBuf;

/// `topic@group`, the key RocketMQ uses (names cannot contain `@`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OffsetKey {
    pub topic: String,
    pub group: String,
}

/// What a commit did, so callers can log a lowered offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitOutcome {
    Inserted,
    Advanced { previous: u64 },
    Unchanged,
    /// Stored although lower than before (RocketMQ always writes; callers log this).
    Lowered { previous: u64 },
}

#[derive(Debug, thiserror::Error)]
pub enum OffsetTableError {
    #[error("offset record for {key} queue {queue_id} in {file} is corrupt: {reason}")]
    Corrupt {
        key: String,
        queue_id: u32,
        file: PathBuf,
        reason: String,
    },
    #[error("offset record for {key} queue {queue_id} in {file} has unknown version {version}")]
    UnknownVersion {
        key: String,
        queue_id: u32,
        file: PathBuf,
        version: u8,
    },
    #[error("malformed offset-table key {key:?} in {file}")]
    MalformedKey { key: String, file: PathBuf },
    #[error("sled error on {file}: {source}")]
    Sled {
        file: PathBuf,
        #[source]
        source: sled::Error,
    },
}

/// The durable offset table. Implementations: [`SledOffsetTable`] and [`MemoryOffsetTable`],
/// held to one contract test suite.
pub trait OffsetTable: Send {
    /// Stores `offset`, even when lower than the stored one (see [`CommitOutcome::Lowered`]).
    fn commit(&mut self, key: &OffsetKey, queue_id: u32, offset: u64) -> Result<CommitOutcome, OffsetTableError>;
    /// `Ok(None)` when absent; a corrupt record is an error, never `None`.
    fn query(&self, key: &OffsetKey, queue_id: u32) -> Result<Option<u64>, OffsetTableError>;
    /// An explicit (admin) write, allowed to lower the offset.
    fn reset(&mut self, key: &OffsetKey, queue_id: u32, offset: u64) -> Result<(), OffsetTableError>;
    /// Removes every entry of `group`; returns how many were removed.
    fn remove_group(&mut self, group: &str) -> Result<usize, OffsetTableError>;
    /// Every (key, queue id, offset) of `group`, sorted.
    fn list_group(&self, group: &str) -> Result<Vec<(OffsetKey, u32, u64)>, OffsetTableError>;
    /// Every entry, sorted.
    fn list_all(&self) -> Result<Vec<(OffsetKey, u32, u64)>, OffsetTableError>;
    /// Makes every commit so far durable.
    fn flush(&mut self) -> Result<(), OffsetTableError>;
}
