//! The message store: one writer appending batches to the commit log and indexing them in
//! consume queues, and a cloneable read handle shared by every reader.
//!
//! API CONTRACT (implementation pending; keep these public signatures).

use crate::message::{MessageToAppend, StoredMessage};
use bytes::Bytes;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// When appended bytes are made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushPolicy {
    /// fsync on an interval (RocketMQ ASYNC_FLUSH); an append returns once written to the OS.
    Async,
    /// Group commit: an append returns only after an fsync that covers it; concurrent
    /// appenders share one fsync.
    Sync,
}

#[derive(Clone, Debug)]
pub struct StoreConfig {
    pub dir: PathBuf,
    /// Commit-log segment size in bytes (default 1 GiB; tests use small ones).
    pub segment_size: u64,
    pub flush_policy: FlushPolicy,
    /// For `Async`: how often the background flusher fsyncs.
    pub flush_interval: Duration,
    /// Address written as STOREHOSTADDRESS into every record.
    pub store_host: SocketAddr,
    /// Largest accepted message body in bytes (default 4 MiB).
    pub max_message_size: usize,
}

/// Where one appended message landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendResult {
    pub queue_id: u32,
    pub queue_offset: u64,
    pub physical_offset: u64,
    pub stored_size: u32,
    pub store_timestamp: i64,
}

/// Outcome of a read by logical offset (RocketMQ's GetMessageStatus subset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadStatus {
    Found,
    /// Entries existed in range but none matched the tag filter.
    NoMatchedMessage,
    NoMessageInQueue,
    /// offset == max offset: nothing new yet.
    OffsetOverflowOne,
    /// offset > max offset.
    OffsetOverflowBadly,
    /// offset < min offset.
    OffsetTooSmall,
}

/// Result of [`StoreReader::read`].
#[derive(Clone, Debug)]
pub struct ReadResult {
    pub status: ReadStatus,
    /// Stored records back to back, exactly as on disk (a pull response body).
    pub records: Bytes,
    pub message_count: u32,
    /// Where the next read of this queue should start.
    pub next_begin_offset: u64,
    pub min_offset: u64,
    pub max_offset: u64,
}

/// Which end of a run of equal timestamps a timestamp search returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundaryType {
    Lower,
    Upper,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("i/o error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("corrupt commit-log record at physical offset {physical_offset} in {path}: {reason}")]
    CorruptRecord {
        path: PathBuf,
        physical_offset: u64,
        reason: String,
    },
    #[error("message body of {size} bytes exceeds the limit of {limit} bytes")]
    MessageTooLarge { size: usize, limit: usize },
    #[error("properties of {size} bytes exceed the 32767-byte limit")]
    PropertiesTooLarge { size: usize },
    #[error("invalid topic name {topic:?}")]
    InvalidTopic { topic: String },
}

/// The single writer. Owned by the message-store actor (or a benchmark thread).
pub struct MessageStore {
    _private: (),
}

/// A cheap, cloneable, thread-safe read handle; sees every append once `append_batch` returned.
#[derive(Clone)]
pub struct StoreReader {
    _private: (),
}

impl MessageStore {
    /// Opens (creating if needed) the store in `config.dir`, recovering the commit-log tail and
    /// the consume queues; starts the async flusher thread when the policy is `Async`.
    pub fn open(_config: StoreConfig) -> Result<Self, StoreError> {
        todo!("storage: open")
    }

    /// Appends a batch; assigns queue offsets, physical offsets and store timestamps in order.
    /// With `Sync` the call returns after an fsync that covers the batch.
    pub fn append_batch(
        &mut self,
        _messages: &[MessageToAppend],
    ) -> Result<Vec<AppendResult>, StoreError> {
        todo!("storage: append_batch")
    }

    /// Appends without waiting for durability even under `Sync`; pair with
    /// [`SyncWaiter::wait_durable`] so many appenders share one fsync.
    pub fn append_batch_nowait(
        &mut self,
        _messages: &[MessageToAppend],
    ) -> Result<(Vec<AppendResult>, u64), StoreError> {
        todo!("storage: append_batch_nowait")
    }

    /// A handle that waits until the commit log is durable up to a physical position.
    pub fn sync_waiter(&self) -> SyncWaiter {
        todo!("storage: sync_waiter")
    }

    pub fn reader(&self) -> StoreReader {
        todo!("storage: reader")
    }

    /// fsyncs the commit log and consume queues and writes the recovery checkpoint.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        todo!("storage: flush")
    }

    /// Flushes and stops the background flusher.
    pub fn close(self) -> Result<(), StoreError> {
        todo!("storage: close")
    }
}

/// Shared group-commit handle (thread-safe, cloneable).
#[derive(Clone)]
pub struct SyncWaiter {
    _private: (),
}

impl SyncWaiter {
    /// Blocks until the commit log is fsynced at least up to `position` (an end position
    /// returned by `append_batch_nowait`); one fsync serves every waiter whose position it covers.
    pub fn wait_durable(&self, _position: u64) -> Result<(), StoreError> {
        todo!("storage: wait_durable")
    }
}

impl StoreReader {
    /// Reads up to `max_messages` (and about `max_bytes`) records from `offset` of one queue.
    /// `tag_filter`, when given, keeps only entries whose tag hash it accepts; entries skipped by
    /// the filter still advance `next_begin_offset`. Every served record passed its body CRC.
    pub fn read(
        &self,
        _topic: &str,
        _queue_id: u32,
        _offset: u64,
        _max_messages: u32,
        _max_bytes: u32,
        _tag_filter: Option<&dyn Fn(i64) -> bool>,
    ) -> Result<ReadResult, StoreError> {
        todo!("storage: read")
    }

    pub fn min_offset(&self, _topic: &str, _queue_id: u32) -> u64 {
        todo!("storage: min_offset")
    }

    /// Next logical offset to be written (the number of entries in the queue).
    pub fn max_offset(&self, _topic: &str, _queue_id: u32) -> u64 {
        todo!("storage: max_offset")
    }

    /// First offset whose store timestamp is >= `timestamp` (Lower) or last offset whose store
    /// timestamp is <= `timestamp` (Upper); max offset when every entry is older, min when newer.
    pub fn search_offset_by_timestamp(
        &self,
        _topic: &str,
        _queue_id: u32,
        _timestamp: i64,
        _boundary: BoundaryType,
    ) -> Result<u64, StoreError> {
        todo!("storage: search_offset_by_timestamp")
    }

    /// The record at a commit-log physical offset (CONSUMER_SEND_MSG_BACK looks messages up so).
    pub fn read_by_physical_offset(
        &self,
        _physical_offset: u64,
    ) -> Result<Option<StoredMessage>, StoreError> {
        todo!("storage: read_by_physical_offset")
    }

    /// Store timestamp of the entry at `offset`, if present.
    pub fn store_timestamp_at(&self, _topic: &str, _queue_id: u32, _offset: u64) -> Result<Option<i64>, StoreError> {
        todo!("storage: store_timestamp_at")
    }

    /// Every (topic, queue id) with at least one consume-queue file.
    pub fn queues(&self) -> Vec<(String, u32)> {
        todo!("storage: queues")
    }
}
