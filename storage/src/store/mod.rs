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
//! when first used and settled then (`recovery::settle_queue`): a queue whose files show damage
//! is re-indexed from its last good entry, and one that lost entries without a trace is
//! re-indexed when a record past the checkpoint shows the gap.
//!
//! # Files
//! - this file: the configuration and public types, and [`MessageStore`], the single writer;
//! - `reader`: [`StoreReader`], the cloneable read handle;
//! - `durability`: the fsync state shared by writer and waiters, the group-commit thread,
//!   [`SyncWaiter`] and the background flusher;
//! - `checkpoint`: the checkpoint file format;
//! - `recovery`: validating the commit log on open, and settling each queue on first use;
//! - `retention`: deleting old segments with their queue entries ([`MessageStore::delete_expired`]).

mod checkpoint;
mod durability;
mod reader;
mod recovery;
mod retention;

pub use crate::error::{AppendRejected, Appended, StoreError};
pub use durability::{Durability, SyncWaiter};
pub use reader::StoreReader;
pub use retention::{DeletedSegment, RetentionOutcome, RetentionRequest};

use crate::clock::epoch_millis;
use crate::commit_log::{CommitLog, Segment, MIN_RECORD_SIZE};
use crate::consume_queue::{queue_on_disk, ConsumeQueue, CqEntry, DEFAULT_FILE_ENTRIES};
use crate::disk::{DirLock, Disk};
use crate::error::io_err;
use crate::file_cache::FileCache;
use crate::message::{
    encode_record, encoded_len, property, tag_hash_code, MessageToAppend, MAX_PROPERTIES_LEN,
};
use bytes::Bytes;
use durability::{
    spawn_flusher, spawn_group_commit, stop_group_commit, CheckpointPass, CommitState, Flusher,
    GroupCommit, GroupQueue, LastCheckpoint,
};
use recovery::{recover, settle_queue};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
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
}

impl StoreConfig {
    pub const DEFAULT_SEGMENT_SIZE: u64 = 1 << 30;
    pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_millis(500);
    pub const DEFAULT_QUEUES_FSYNCED_EVERY_CHECKPOINT: usize = 1_024;
    pub const DEFAULT_THOROUGH_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(10);
    pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 4 << 20;
    pub const DEFAULT_OPEN_QUEUE_FILES: usize = 256;
    pub const DEFAULT_SYNC_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

    /// Defaults: 1 GiB segments, `Async` flush every 500 ms, store host 127.0.0.1:10911,
    /// 4 MiB bodies, 256 open queue files, a 5 s sync flush timeout.
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
/// ([`is_topic_character`]), 1 to 255 bytes (the file-name limit).
pub fn is_valid_topic(topic: &str) -> bool {
    !topic.is_empty() && topic.len() <= 255 && topic.bytes().all(is_topic_character)
}

/// RocketMQ's characters for topic and group names: letters, digits, `%`, `|`, `_`, `-`.
pub fn is_topic_character(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'%' | b'|' | b'_' | b'-')
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every consume queue in memory, by topic then queue id.
type QueueMap = HashMap<String, TopicQueues>;

/// One topic's queues in memory, sorted by id. A topic has a few; a vector of them costs a
/// fraction of a hash table each, which with tens of thousands of topics (and two maps: the
/// writer's and the readers') was megabytes.
#[derive(Clone, Default)]
struct TopicQueues(Vec<Arc<ConsumeQueue>>);

impl TopicQueues {
    fn get(&self, queue_id: &u32) -> Option<&Arc<ConsumeQueue>> {
        let at = self
            .0
            .binary_search_by_key(queue_id, |q| q.queue_id())
            .ok()?;
        self.0.get(at)
    }

    fn insert(&mut self, queue_id: u32, queue: Arc<ConsumeQueue>) {
        match self.0.binary_search_by_key(&queue_id, |q| q.queue_id()) {
            Ok(at) => self.0[at] = queue,
            Err(at) => self.0.insert(at, queue),
        }
    }

    fn values(&self) -> impl Iterator<Item = &Arc<ConsumeQueue>> {
        self.0.iter()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// Opens consume queues from disk on first use: the open itself (creating a new queue's
/// directory and file), and settling a queue that already existed against the commit log as
/// recovery left it (see [`settle_queue`]). Recovery and the running store share it.
struct QueueOpener<'a> {
    config: &'a StoreConfig,
    log: &'a CommitLog,
    files: &'a Arc<FileCache>,
    new_dirs: &'a Mutex<NewDirs>,
    recovered_from: u64,
}

impl QueueOpener<'_> {
    /// The queue `topic`/`queue_id` as on disk, settled; `None` when it is not on disk and
    /// `create` is false.
    fn open(
        &self,
        topic: &str,
        queue_id: u32,
        create: bool,
    ) -> Result<Option<Arc<ConsumeQueue>>, StoreError> {
        let disk = &self.config.disk;
        let root = queue_dir(&self.config.dir);
        let tdir = root.join(topic);
        let path = queue_path(&tdir, queue_id);
        if !create && !queue_on_disk(disk, &path).map_err(|e| io_err(&path, e))? {
            return Ok(None);
        }
        let new_topic = disk.kind(&tdir).map_err(|e| io_err(&tdir, e))?.is_none();
        if new_topic {
            disk.create_dir_all(&tdir).map_err(|e| io_err(&tdir, e))?;
        }
        let (q, repairs) = ConsumeQueue::open(
            self.files,
            topic,
            queue_id,
            &path,
            self.config.queue_file_entries,
        )
        .map_err(|e| io_err(&path, e))?;
        if repairs.cut_bytes > 0 {
            tracing::warn!(dir = %path.display(), bytes = repairs.cut_bytes, "cut a partial consume-queue entry");
        }
        if repairs.dropped_files > 0 {
            tracing::warn!(dir = %path.display(), files = repairs.dropped_files, "deleted consume-queue files past a gap");
        }
        if !repairs.created {
            let damaged = repairs.cut_bytes > 0 || repairs.dropped_files > 0 || repairs.refilled;
            settle_queue(self.config, self.log, &q, self.recovered_from, damaged)?;
        }
        if new_topic || repairs.created {
            // Made durable by the next thorough checkpoint, which is what vouches for the
            // queue's entries: a crash before it re-creates the queue from the commit log.
            lock(self.new_dirs).add(new_topic, repairs.created.then_some((topic, queue_id)));
        }
        Ok(Some(Arc::new(q)))
    }
}

/// Directories created since the last thorough checkpoint, which fsyncs them before it counts
/// on what they hold. Kept as names, not paths: a burst of new queues (tens of thousands at a
/// start) would otherwise hold two paths apiece until then.
#[derive(Debug, Default)]
struct NewDirs {
    /// The consume-queue root gained a topic directory.
    root: bool,
    /// Topic directories that gained queue directories, and those queues.
    queues: BTreeMap<String, Vec<u32>>,
}

impl NewDirs {
    fn is_empty(&self) -> bool {
        !self.root && self.queues.is_empty()
    }

    /// Records a topic directory made in the root, and a queue directory made in its topic's.
    fn add(&mut self, new_topic: bool, new_queue: Option<(&str, u32)>) {
        self.root |= new_topic;
        if let Some((topic, queue_id)) = new_queue {
            match self.queues.get_mut(topic) {
                Some(ids) => ids.push(queue_id),
                None => {
                    self.queues.insert(topic.to_string(), vec![queue_id]);
                }
            }
        }
    }

    fn merge(&mut self, other: NewDirs) {
        self.root |= other.root;
        for (topic, ids) in other.queues {
            self.queues.entry(topic).or_default().extend(ids);
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
    /// The commit-log position recovery started from: a queue opened later, which the scan
    /// from here never met, holds no valid entry at or past it.
    recovered_from: u64,
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

impl Shared {
    /// Closes every commit-log and consume-queue file. Readers outlive the store (they are
    /// cloned into every actor and handle), so the files are let go here, at close, rather than
    /// when the last reader drops; a read after this finds no segment and fails.
    fn release_files(&self) {
        self.log.release_files();
        self.queues
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The queue `topic`/`queue_id`, opened from disk if needed; `None` when it does not
    /// exist (or cannot be opened, which is logged: readers answer as for an empty queue).
    fn queue(&self, topic: &str, queue_id: u32) -> Option<Arc<ConsumeQueue>> {
        if let Some(q) = self
            .queues
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
            .and_then(|q| q.get(&queue_id))
        {
            return Some(q.clone());
        }
        match self.load_queue(topic, queue_id, false) {
            Ok(q) => q,
            Err(e) => {
                tracing::warn!(
                    topic,
                    queue_id,
                    error = &e as &dyn std::error::Error,
                    "consume queue could not be opened"
                );
                None
            }
        }
    }

    /// The queue from memory, or opened from disk (created there when `create`).
    fn load_queue(
        &self,
        topic: &str,
        queue_id: u32,
        create: bool,
    ) -> Result<Option<Arc<ConsumeQueue>>, StoreError> {
        if !is_valid_topic(topic) {
            return Ok(None);
        }
        // Held across the open: two opens of one queue would keep two tails.
        let mut queues = self.queues.write().unwrap_or_else(|e| e.into_inner());
        if let Some(q) = queues.get(topic).and_then(|m| m.get(&queue_id)) {
            return Ok(Some(q.clone()));
        }
        let opener = QueueOpener {
            config: &self.config,
            log: &self.log,
            files: &self.files,
            new_dirs: &self.new_dirs,
            recovered_from: self.recovered_from,
        };
        let q = opener.open(topic, queue_id, create)?;
        if let Some(q) = &q {
            queues
                .entry(topic.to_string())
                .or_default()
                .insert(queue_id, q.clone());
        }
        Ok(q)
    }

    /// Every queue in memory.
    fn open_queues(&self) -> Vec<Arc<ConsumeQueue>> {
        self.open_queues_where(|_| true)
    }

    /// The queues in memory that `keep` selects, chosen under the lock so that a checkpoint
    /// looking for the few written since the last one clones no handle of the others.
    fn open_queues_where(&self, keep: impl Fn(&ConsumeQueue) -> bool) -> Vec<Arc<ConsumeQueue>> {
        self.queues
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .flat_map(|m| m.values())
            .filter(|q| keep(q))
            .cloned()
            .collect()
    }

    /// Every (topic, queue id) on disk or in memory, sorted; lists directories, opens nothing.
    fn known_queues(&self) -> Result<Vec<(String, u32)>, StoreError> {
        let disk = &self.config.disk;
        let root = queue_dir(&self.config.dir);
        let mut out: BTreeSet<(String, u32)> = self
            .queues
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .flat_map(|(t, m)| m.values().map(move |q| (t.clone(), q.queue_id())))
            .collect();
        for tentry in disk.read_dir(&root).map_err(|e| io_err(&root, e))? {
            let Some(topic) = tentry.name.filter(|t| tentry.is_dir && is_valid_topic(t)) else {
                continue;
            };
            let tpath = root.join(&topic);
            for qentry in disk.read_dir(&tpath).map_err(|e| io_err(&tpath, e))? {
                let id = qentry.name.as_deref().and_then(|n| {
                    let n = n.strip_suffix(".migrating").unwrap_or(n);
                    n.parse::<u32>().ok().filter(|id| id.to_string() == n)
                });
                if let Some(id) = id {
                    out.insert((topic.clone(), id));
                }
            }
        }
        Ok(out.into_iter().collect())
    }

    /// fsyncs the directories created since the last thorough checkpoint.
    fn sync_new_dirs(&self) -> Result<(), StoreError> {
        let dirs = std::mem::take(&mut *lock(&self.new_dirs));
        if let Err(e) = self.sync_dirs(&dirs) {
            // Put them back, so the next checkpoint tries again (a second fsync of a directory
            // already done costs nothing but the call).
            lock(&self.new_dirs).merge(dirs);
            return Err(e);
        }
        Ok(())
    }

    fn sync_dirs(&self, dirs: &NewDirs) -> Result<(), StoreError> {
        let disk = &self.config.disk;
        let root = queue_dir(&self.config.dir);
        if dirs.root {
            disk.sync_dir(&root)?;
        }
        for (topic, ids) in &dirs.queues {
            let topic_dir = root.join(topic);
            disk.sync_dir(&topic_dir)?;
            for id in ids {
                disk.sync_dir(&queue_path(&topic_dir, *id))?;
            }
        }
        Ok(())
    }
}

/// The root of the consume-queue files under the store directory.
fn queue_dir(dir: &Path) -> PathBuf {
    dir.join("consumequeue")
}

/// A queue's directory: its id under its topic's directory (`<queue root>/<topic>/<queue id>`).
fn queue_path(topic_dir: &Path, queue_id: u32) -> PathBuf {
    topic_dir.join(queue_id.to_string())
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

/// Per-queue slice of the batch being appended.
struct BatchQueue {
    queue: Arc<ConsumeQueue>,
    start: u64,
    count: u64,
    entries: Vec<u8>,
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
        let recovered = recover(&config, &log, &files, &new_dirs)?;
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
            recovered_from: recovered.checkpointed,
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

    /// Appends a batch; assigns queue offsets, physical offsets and store timestamps in order.
    /// With `Sync` the call returns after an fsync that covers the batch.
    pub fn append_batch(&mut self, messages: &[MessageToAppend]) -> Appended<Vec<AppendResult>> {
        let (results, end) = match self.append_batch_nowait(messages)? {
            Ok(appended) => appended,
            Err(rejected) => return Ok(Err(rejected)),
        };
        if self.shared.config.flush_policy == FlushPolicy::Sync {
            self.shared.wait_durable(end)?;
        }
        Ok(Ok(results))
    }

    /// Appends without waiting for durability even under `Sync`; pair with
    /// [`SyncWaiter::wait_durable`] so many appenders share one fsync.
    ///
    /// The batch is validated as a whole first, so an invalid message appends nothing. After an
    /// I/O error the store refuses further appends until reopened (recovery repairs the tail).
    pub fn append_batch_nowait(
        &mut self,
        messages: &[MessageToAppend],
    ) -> Appended<(Vec<AppendResult>, u64)> {
        if self.broken || self.closed {
            return Err(StoreError::WritesRefused);
        }
        if let Err(rejected) = self.validate(messages) {
            return Ok(Err(rejected));
        }
        if messages.is_empty() {
            return Ok(Ok((Vec::new(), self.write_pos)));
        }
        let start = self.write_pos;
        match self.write_batch(messages) {
            Ok(appended) => Ok(Ok(appended)),
            Err(e) => Err(self.undo_failed_batch(start, e)),
        }
    }

    /// Takes back whatever a failed batch wrote: its consume-queue entries and the commit-log
    /// bytes (and segments) past `start`, so that nothing of it can be served or recovered and
    /// the next batch starts at `start` again. A full device or a descriptor shortage is then
    /// only an error for this batch: nothing was lost, and the store takes appends again once
    /// there is room (for descriptors, idle queue files are closed at once). Any other failure,
    /// or a failed undo, stops writes until the store is reopened and recovery repairs the
    /// tail: after an EIO the device's state is not known.
    fn undo_failed_batch(&mut self, start: u64, cause: StoreError) -> StoreError {
        let undone = self.undo_batch(start);
        match undone {
            Ok(()) if cause.io_says_disk_full() => {
                tracing::warn!(
                    error = &cause as &dyn std::error::Error,
                    commit_log_end = start,
                    "append refused: the disk is full"
                );
                match cause {
                    StoreError::Io { path, source } => StoreError::DiskFull { path, source },
                    other => other,
                }
            }
            Ok(()) if cause.io_says_out_of_descriptors() => {
                let closed = self.shared.files.shed();
                tracing::warn!(
                    error = &cause as &dyn std::error::Error,
                    commit_log_end = start,
                    closed_queue_files = closed,
                    "append refused: out of file descriptors"
                );
                match cause {
                    StoreError::Io { path, source } => {
                        StoreError::OutOfDescriptors { path, source }
                    }
                    other => other,
                }
            }
            Ok(()) => {
                tracing::error!(
                    error = &cause as &dyn std::error::Error,
                    "append failed; the store refuses writes until reopened"
                );
                self.broken = true;
                cause
            }
            Err(undo) => {
                tracing::error!(
                    error = &cause as &dyn std::error::Error,
                    undo_error = &undo as &dyn std::error::Error,
                    "append failed and could not be undone; the store refuses writes until reopened"
                );
                self.broken = true;
                cause
            }
        }
    }

    fn undo_batch(&mut self, start: u64) -> Result<(), StoreError> {
        for bq in &self.batch {
            bq.queue
                .truncate(bq.start)
                .map_err(|e| io_err(bq.queue.path(), e))?;
        }
        self.shared.log.truncate_at(start)?;
        self.write_pos = start;
        self.shared.indexed_end.store(start, Ordering::Release);
        self.active = match self.shared.log.last_segment() {
            Some(s) => s,
            None => self.shared.log.roll(start)?,
        };
        Ok(())
    }

    /// What the store refuses by content, checked for the whole batch before anything is
    /// written. A writer that merges several callers' batches into one append checks each
    /// alone first, so one caller's bad message fails only that caller.
    pub fn validate(&self, messages: &[MessageToAppend]) -> Result<(), AppendRejected> {
        let config = &self.shared.config;
        let host = config.store_host;
        for m in messages {
            if !is_valid_topic(&m.topic) {
                return Err(AppendRejected::InvalidTopic {
                    topic: m.topic.clone(),
                });
            }
            if m.body.len() > config.max_message_size {
                return Err(AppendRejected::MessageTooLarge {
                    size: m.body.len(),
                    limit: config.max_message_size,
                });
            }
            if m.properties.len() > MAX_PROPERTIES_LEN {
                return Err(AppendRejected::PropertiesTooLarge {
                    size: m.properties.len(),
                });
            }
            let size = encoded_len(m, host);
            if size as u64 > config.segment_size {
                return Err(AppendRejected::MessageTooLarge {
                    size,
                    limit: config.segment_size as usize,
                });
            }
        }
        Ok(())
    }

    fn batch_slot(&mut self, topic: &str, queue_id: u32) -> Result<usize, StoreError> {
        if let Some(i) = self
            .batch
            .iter()
            .position(|b| b.queue.queue_id() == queue_id && b.queue.topic() == topic)
        {
            return Ok(i);
        }
        let queue = match self.queues.get(topic).and_then(|m| m.get(&queue_id)) {
            Some(q) => q.clone(),
            None => {
                let q = self
                    .shared
                    .load_queue(topic, queue_id, true)?
                    .ok_or_else(|| {
                        io_err(
                            queue_dir(&self.shared.config.dir).join(topic),
                            io::Error::new(io::ErrorKind::InvalidInput, "invalid topic name"),
                        )
                    })?;
                self.queues
                    .entry(topic.to_string())
                    .or_default()
                    .insert(queue_id, q.clone());
                q
            }
        };
        self.batch.push(BatchQueue {
            start: queue.max_offset(),
            queue,
            count: 0,
            entries: Vec::new(),
        });
        Ok(self.batch.len() - 1)
    }

    fn write_batch(
        &mut self,
        messages: &[MessageToAppend],
    ) -> Result<(Vec<AppendResult>, u64), StoreError> {
        let now = (self.clock)().max(self.last_timestamp);
        self.last_timestamp = now;
        // Before any record carries it: a checkpoint reading the indexed end then this value
        // sees a timestamp at least as new as every record below that end.
        self.shared.last_timestamp.store(now, Ordering::Release);
        let host = self.shared.config.store_host;
        let segment_size = self.shared.config.segment_size;
        self.batch.clear();
        self.buf.clear();
        let mut results = Vec::with_capacity(messages.len());
        let mut pos = self.write_pos;
        let mut buf_start = pos;
        for m in messages {
            let size = encoded_len(m, host) as u64;
            if pos + size > self.active.base() + segment_size && pos > self.active.base() {
                if !self.buf.is_empty() {
                    self.shared
                        .log
                        .write_at(&self.active, buf_start, &self.buf)?;
                    self.buf.clear();
                }
                self.active = self.shared.log.roll(pos)?;
                buf_start = pos;
            }
            let slot = self.batch_slot(&m.topic, m.queue_id)?;
            let bq = &mut self.batch[slot];
            let queue_offset = bq.start + bq.count;
            let stored = encode_record(m, queue_offset, pos, now, host, &mut self.buf)
                .map_err(|source| StoreError::Encode { source })?;
            CqEntry {
                physical_offset: pos,
                size: stored,
                tag_hash: property(&m.properties, crate::message::property::TAGS)
                    .map_or(0, tag_hash_code),
                store_timestamp: now,
            }
            .encode_into(&mut bq.entries);
            bq.count += 1;
            results.push(AppendResult {
                queue_id: m.queue_id,
                queue_offset,
                physical_offset: pos,
                stored_size: stored,
                store_timestamp: now,
            });
            pos += u64::from(stored);
        }
        if !self.buf.is_empty() {
            self.shared
                .log
                .write_at(&self.active, buf_start, &self.buf)?;
        }
        self.write_pos = pos;
        self.shared.log.publish_written(pos);
        for bq in &self.batch {
            bq.queue
                .write_entries(bq.start, &bq.entries)
                .map_err(|e| io_err(bq.queue.path(), e))?;
        }
        for bq in &self.batch {
            bq.queue.publish(bq.start + bq.count);
        }
        self.shared.indexed_end.store(pos, Ordering::Release);
        Ok((results, pos))
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

    fn shutdown(&mut self) -> Result<(), StoreError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
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
        assert!(!is_valid_topic(""));
        assert!(!is_valid_topic("a/b"));
        assert!(!is_valid_topic(".."));
        assert!(!is_valid_topic(&"x".repeat(256)));
    }
}
