//! The message store: one writer appending batches to the commit log and indexing them in
//! consume queues, and a cloneable read handle shared by every reader.
//!
//! Layout under `StoreConfig::dir`:
//! - `commitlog/<20-digit base offset>`: commit-log segments ([`crate::commit_log`]);
//! - `consumequeue/<topic>/<queue id>`: consume queues ([`crate::consume_queue`]);
//! - `checkpoint`: the commit-log position below which records and their index entries are
//!   durable, and the newest store timestamp below it.
//!
//! # Recovery and the corruption policy
//!
//! On open the store validates the commit log from the checkpointed position forward (from the
//! start without a checkpoint): magic, size bounds, the physical offset each record carries and
//! the body CRC. The first record that fails decides what happens:
//! - if it lies before the checkpointed position, or any valid record follows it anywhere in the
//!   log, it is **corruption**: `open` fails with [`StoreError::CorruptRecord`] naming the
//!   segment file and physical offset. Dropping it and everything after would silently lose
//!   records that were durable and possibly acknowledged; an operator has to decide.
//! - otherwise it is a **torn tail** (a write cut short by a crash, never acknowledged under
//!   `Sync`): the log is truncated there, later segments are deleted, and the cut is logged.
//!
//! Records before the checkpoint are not re-validated on open (that is the point of the
//! checkpoint); a read that meets one failing its CRC returns `CorruptRecord`, so a bad record
//! is never served. Consume-queue entries pointing past the checkpoint are rebuilt from the log
//! by the scan, which opens only the queues its records belong to; any other queue is opened
//! when first used and settled then (`settle::settle_queue`): a queue whose files show damage
//! is re-indexed from its last good entry, and one that lost entries without a trace is
//! re-indexed when a record past the checkpoint shows the gap.
//!
//! # Files
//! - this file: the configuration and public types, [`MessageStore`], the single writer:
//!   opening, flushing and closing it, and `Shared`, the state every handle and thread of the
//!   store shares;
//! - `append`: the writer's append path (validate, encode, index, undo a failed batch);
//! - `queues`: the consume queues in memory, opened on first use;
//! - `reader`: [`StoreReader`], the cloneable read handle;
//! - `durability`: the fsync state shared by writer and waiters, the group-commit thread,
//!   [`SyncWaiter`] and the background flusher;
//! - `prepare`: the thread writing the commit log's blocks ahead of the appender under `Sync`;
//! - `checkpoint`: the checkpoint file format;
//! - `recovery`: validating the commit log on open and re-indexing what the queues lack;
//! - `settle`: settling a queue that was on disk when it is first opened (recovery and the
//!   queue map both call it; it calls neither);
//! - `retention`: deleting old segments with their queue entries ([`MessageStore::delete_expired`]);
//! - `delete`: deleting whole queues ([`MessageStore::delete_queues`]), for expired lite topics.

mod append;
mod checkpoint;
mod delete;
mod deleted;
mod durability;
mod idle;
mod prepare;
mod queues;
mod reader;
mod recovery;
mod retention;
mod settle;

pub use crate::error::{AppendRejected, Appended, StoreError};
pub use durability::{Durability, SyncWaiter};
pub use reader::StoreReader;
pub use retention::{DeletedSegment, RetentionOutcome, RetentionRequest};

use crate::clock::epoch_millis;
use crate::commit_log::{CommitLog, Segment, MIN_RECORD_SIZE};
use crate::consume_queue::DEFAULT_FILE_ENTRIES;
use crate::disk::{DirLock, Disk};
use crate::error::io_err;
use crate::file_cache::FileCache;
use crate::message::MAX_PROPERTIES_LEN;
use append::BatchQueue;
use bytes::Bytes;
use durability::{
    spawn_flusher, spawn_group_commit, stop_group_commit, CheckpointPass, CommitState, Flusher,
    GroupCommit, GroupQueue, LastCheckpoint,
};
use prepare::{spawn_preparer, Preparer};
use queues::{queue_dir, NewDirs, QueueMap, TopicQueues};
use recovery::recover;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
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
    /// Up to this many queues written between checkpoints, every checkpoint fsyncs their files
    /// (default 1,024).
    pub queues_fsynced_every_checkpoint: usize,
    /// With more, how often a checkpoint fsyncs them and advances: once this long after the
    /// last did, or after this interval over `flush_interval` passes, whichever comes first
    /// (default 10 s; RocketMQ's is 60 s). The others write the queues' buffered entries
    /// without an fsync; recovery re-indexes the log written since.
    pub thorough_checkpoint_interval: Duration,
    /// Address written as STOREHOSTADDRESS into every record.
    pub store_host: SocketAddr,
    /// Largest accepted message body in bytes (default 4 MiB).
    pub max_message_size: usize,
    /// Entries per consume-queue file (default 300,000; tests use small ones so retention
    /// deletes queue files too).
    pub queue_file_entries: u64,
    /// The file system under the store: the real one, or a simulated disk in tests.
    pub disk: Disk,
    /// How long a durability request waits for its fsync before it is answered
    /// [`Durability::TimedOut`] (RocketMQ's `syncFlushTimeout`; default 5 s).
    pub sync_flush_timeout: Duration,
    /// Consume-queue files held open at once (default 256); the rest are opened when used.
    /// What the store holds beyond it: the commit-log segments, the lock file, and a
    /// descriptor for a moment while a directory is listed.
    pub open_queue_files: usize,
    /// Under `Sync`: how far past the written end the last segment's blocks are written
    /// (zeros) and fsynced ahead of the appender, so that a group commit's fsync carries only
    /// the records (default 32 MiB; 0 turns preparation off).
    pub prepare_ahead: u64,
    /// Whether a thread prepares (default; under `Sync` with a lead); without it only
    /// [`MessageStore::prepare_ahead`] does, for tests that count every write and fsync.
    pub prepare_in_background: bool,
}

impl StoreConfig {
    pub const DEFAULT_SEGMENT_SIZE: u64 = 1 << 30;
    pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_millis(500);
    pub const DEFAULT_QUEUES_FSYNCED_EVERY_CHECKPOINT: usize = 1_024;
    pub const DEFAULT_THOROUGH_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(10);
    pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 4 << 20;
    pub const DEFAULT_OPEN_QUEUE_FILES: usize = 256;
    pub const DEFAULT_SYNC_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
    pub const DEFAULT_PREPARE_AHEAD: u64 = 32 << 20;

    /// Defaults: 1 GiB segments, `Async` flush every 500 ms, store host 127.0.0.1:10911,
    /// 4 MiB bodies, 256 open queue files, a 5 s sync flush timeout, 32 MiB prepared ahead
    /// under `Sync`.
    pub fn new(dir: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig {
            dir: dir.into(),
            segment_size: Self::DEFAULT_SEGMENT_SIZE,
            flush_policy: FlushPolicy::Async,
            flush_interval: Self::DEFAULT_FLUSH_INTERVAL,
            queues_fsynced_every_checkpoint: Self::DEFAULT_QUEUES_FSYNCED_EVERY_CHECKPOINT,
            thorough_checkpoint_interval: Self::DEFAULT_THOROUGH_CHECKPOINT_INTERVAL,
            store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
            max_message_size: Self::DEFAULT_MAX_MESSAGE_SIZE,
            queue_file_entries: DEFAULT_FILE_ENTRIES,
            disk: Disk::Os,
            open_queue_files: Self::DEFAULT_OPEN_QUEUE_FILES,
            sync_flush_timeout: Self::DEFAULT_SYNC_FLUSH_TIMEOUT,
            prepare_ahead: Self::DEFAULT_PREPARE_AHEAD,
            prepare_in_background: true,
        }
    }

    /// Largest record size recovery accepts: any body up to the limit plus the largest
    /// possible properties, topic and header.
    fn max_record_size(&self) -> u64 {
        let body = self.max_message_size.max(Self::DEFAULT_MAX_MESSAGE_SIZE) as u64;
        body + 2 * MAX_PROPERTIES_LEN as u64 + 1024
    }
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
    /// The queue offset of each record, in order: what a pop hands out, without parsing the
    /// records again.
    pub offsets: Vec<u64>,
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

/// Topic names become directory names, so only RocketMQ's topic characters are accepted
/// ([`is_topic_character`]) and `$`, which joins a lite topic's queue name to its parent's
/// (`%LMQ%$parent$lite`), 1 to 255 bytes (the file-name limit).
pub fn is_valid_topic(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= 255
        && topic.bytes().all(|b| is_topic_character(b) || b == b'$')
}

/// RocketMQ's characters for topic and group names: letters, digits, `%`, `|`, `_`, `-`.
pub fn is_topic_character(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'%' | b'|' | b'_' | b'-')
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Creates `dir` when missing and fsyncs its parent, so the directory survives a power cut.
fn create_durable_dir(disk: &Disk, dir: &Path) -> Result<(), StoreError> {
    if disk.kind(dir).map_err(|e| io_err(dir, e))?.is_some() {
        return Ok(());
    }
    disk.create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    if let Some(parent) = dir.parent() {
        disk.sync_dir(parent)?;
    }
    Ok(())
}

/// The single writer. Owned by the message-store actor (or a benchmark thread).
pub struct MessageStore {
    shared: Arc<Shared>,
    active: Arc<Segment>,
    write_pos: u64,
    last_timestamp: i64,
    /// The writer's own copy of the queue map, so lookups take no lock.
    queues: QueueMap,
    buf: Vec<u8>,
    batch: Vec<BatchQueue>,
    clock: Box<dyn FnMut() -> i64 + Send>,
    flusher: Option<Flusher>,
    group_commit: Option<GroupCommit>,
    preparer: Option<Preparer>,
    /// Set after an I/O error mid-append: memory and disk may disagree until a reopen recovers.
    broken: bool,
    /// Newest store timestamp of each full segment, by base, once retention has looked.
    segment_newest: HashMap<u64, i64>,
    closed: bool,
    /// Held for the store's life: two writers on one directory would interleave records.
    _lock: DirLock,
}

impl MessageStore {
    /// Opens (creating if needed) the store in `config.dir`, recovering the commit-log tail and
    /// the consume queues (see the module docs for the corruption policy); starts the
    /// background flusher thread, which under `Async` fsyncs the commit log every
    /// `flush_interval` and under both policies checkpoints the consume queues, and the
    /// group-commit thread serving [`SyncWaiter::notify_when_durable`].
    pub fn open(config: StoreConfig) -> Result<Self, StoreError> {
        if config.segment_size < MIN_RECORD_SIZE {
            return Err(io_err(
                &config.dir,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("segment size {} is too small", config.segment_size),
                ),
            ));
        }
        let disk = config.disk.clone();
        create_durable_dir(&disk, &config.dir)?;
        let lock_file = disk.lock_dir(&config.dir)?;
        let cl_dir = config.dir.join("commitlog");
        create_durable_dir(&disk, &cl_dir)?;
        let cq_dir = queue_dir(&config.dir);
        create_durable_dir(&disk, &cq_dir)?;
        let log = CommitLog::open(&disk, &cl_dir)?;
        let files = FileCache::new(disk.clone(), config.open_queue_files);
        let new_dirs = Mutex::new(NewDirs::default());
        let deleted = Mutex::new(deleted::DeletedQueues::load(
            &disk,
            &config.dir,
            log.first_base(),
        )?);
        let recovered = recover(&config, &log, &files, &new_dirs, &deleted)?;
        let valid_end = recovered.valid_end;
        log.publish_written(valid_end);
        let active = match log.last_segment() {
            Some(s) => s,
            None => log.roll(valid_end)?,
        };
        let queues = recovered.queues;
        let last_timestamp = recovered.last_timestamp;
        let shared = Arc::new(Shared {
            log,
            queues: RwLock::new(queues.clone()),
            files,
            new_dirs,
            deleted,
            recovered_from: recovered.checkpointed,
            released: Mutex::default(),
            last_timestamp: AtomicI64::new(last_timestamp),
            commit: Mutex::new(CommitState::new(recovered.durable)),
            commit_cv: Condvar::new(),
            indexed_end: AtomicU64::new(valid_end),
            checkpoint: Mutex::new(LastCheckpoint::default()),
            fsyncs: AtomicU64::new(0),
            group: Mutex::new(GroupQueue::default()),
            group_cv: Condvar::new(),
            timeout_cv: Condvar::new(),
            config,
        });
        // Recovery may have re-indexed or cut files: make that durable before serving.
        shared.checkpoint(CheckpointPass::Forced)?;
        let flusher = spawn_flusher(&shared)?;
        // Started under `Async` too: a `SyncWaiter` is handed out under both policies and
        // `notify_when_durable` must answer under both, while a thread parked on an empty queue
        // costs only its stack. Spawned after the flusher, whose weak handle lets it exit on its
        // own should this spawn fail and drop the shared state.
        let group_commit = spawn_group_commit(&shared)?;
        let preparer = spawn_preparer(&shared)?;
        tracing::info!(
            dir = %shared.config.dir.display(),
            commit_log_end = valid_end,
            recovered_from = recovered.checkpointed,
            queues_opened = queues.values().map(TopicQueues::len).sum::<usize>(),
            open_queue_files = shared.config.open_queue_files,
            policy = ?shared.config.flush_policy,
            "message store opened"
        );
        Ok(MessageStore {
            shared,
            active,
            write_pos: valid_end,
            last_timestamp,
            queues,
            buf: Vec::new(),
            batch: Vec::new(),
            clock: Box::new(epoch_millis),
            flusher: Some(flusher),
            group_commit: Some(group_commit),
            preparer,
            broken: false,
            segment_newest: HashMap::new(),
            closed: false,
            _lock: lock_file,
        })
    }

    /// Replaces the wall clock used for store timestamps (tests, replays). Timestamps stay
    /// non-decreasing whatever the clock does, so timestamp search can bisect.
    pub fn set_clock(&mut self, clock: impl FnMut() -> i64 + Send + 'static) {
        self.clock = Box::new(clock);
    }

    pub fn config(&self) -> &StoreConfig {
        &self.shared.config
    }

    /// End of the commit log (the physical offset the next record gets).
    pub fn commit_log_end(&self) -> u64 {
        self.write_pos
    }

    /// A handle that waits until the commit log is durable up to a physical position.
    pub fn sync_waiter(&self) -> SyncWaiter {
        SyncWaiter::new(self.shared.clone())
    }

    pub fn reader(&self) -> StoreReader {
        StoreReader::new(self.shared.clone())
    }

    /// fsyncs the commit log and consume queues and writes the recovery checkpoint.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        self.shared.checkpoint(CheckpointPass::Thorough)
    }

    /// What the background flusher runs every `flush_interval`: [`flush`](Self::flush), or with
    /// more than `StoreConfig::queues_fsynced_every_checkpoint` queues written since the last
    /// checkpoint, a light pass for all but one per `thorough_checkpoint_interval`. For
    /// callers driving the store without the flusher.
    pub fn flush_on_interval(&mut self) -> Result<(), StoreError> {
        self.shared.checkpoint(CheckpointPass::Interval)
    }

    /// Writes zeros into the last segment up to `StoreConfig::prepare_ahead` bytes past the
    /// written end (not past the segment's size) and fsyncs them: what the preparer thread
    /// does, for callers driving the store without it. Answers whether anything was written.
    pub fn prepare_ahead(&mut self) -> Result<bool, StoreError> {
        self.shared.prepare_ahead()
    }

    fn shutdown(&mut self) -> Result<(), StoreError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        if let Some(preparer) = self.preparer.take() {
            preparer.stop();
        }
        if let Some(handle) = self.group_commit.take() {
            stop_group_commit(&self.shared, handle);
        }
        if let Some(flusher) = self.flusher.take() {
            flusher.stop();
        }
        let checkpointed = if self.broken {
            // Memory and disk disagree; leave the repair to recovery rather than checkpointing.
            Ok(())
        } else {
            self.shared.checkpoint(CheckpointPass::Thorough)
        };
        self.shared.release_files();
        checkpointed
    }

    /// Answers every queued durability request, flushes and stops the background threads.
    pub fn close(mut self) -> Result<(), StoreError> {
        self.shutdown()
    }
}

impl Drop for MessageStore {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::error!(error = &e as &dyn std::error::Error, "flush on drop failed");
        }
    }
}

/// What the writer, the readers, the waiters and the background threads share.
struct Shared {
    config: StoreConfig,
    log: CommitLog,
    /// The queues opened so far; the others stay on disk until a read or a write needs them.
    queues: RwLock<QueueMap>,
    /// Every consume-queue file's descriptor comes from here.
    files: Arc<FileCache>,
    /// Directories to fsync at the next thorough checkpoint.
    new_dirs: Mutex<NewDirs>,
    /// Where deleted queues ended in the log, so no re-index brings their records back.
    deleted: Mutex<deleted::DeletedQueues>,
    /// The commit-log position recovery started from: a queue opened later, which the scan
    /// from here never met, holds no valid entry at or past it.
    recovered_from: u64,
    /// Queues that left memory idle during this run (see `idle`).
    released: Mutex<idle::ReleasedQueues>,
    /// The newest store timestamp appended (for the checkpoint: timestamps never go back).
    last_timestamp: AtomicI64,
    commit: Mutex<CommitState>,
    commit_cv: Condvar,
    /// Commit-log position below which every record has published consume-queue entries.
    indexed_end: AtomicU64,
    /// Serialises checkpoints; holds the position of the last one written and when.
    checkpoint: Mutex<LastCheckpoint>,
    fsyncs: AtomicU64,
    group: Mutex<GroupQueue>,
    group_cv: Condvar,
    /// Wakes the group commit's watchdog.
    timeout_cv: Condvar,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>() {}
    fn assert_sync<T: Sync>() {}

    #[test]
    fn handles_are_send_and_sync() {
        assert_send::<MessageStore>();
        assert_send::<StoreReader>();
        assert_sync::<StoreReader>();
        assert_send::<SyncWaiter>();
        assert_sync::<SyncWaiter>();
    }

    #[test]
    fn topic_names() {
        assert!(is_valid_topic("TopicTest"));
        assert!(is_valid_topic("%RETRY%group-1_a|b"));
        assert!(is_valid_topic("%LMQ%$Chats$session-1"));
        assert!(!is_valid_topic(""));
        assert!(!is_valid_topic("a/b"));
        assert!(!is_valid_topic(".."));
        assert!(!is_valid_topic(&"x".repeat(256)));
    }
}
