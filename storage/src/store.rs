//! The message store: one writer appending batches to the commit log and indexing them in
//! consume queues, and a cloneable read handle shared by every reader.
//!
//! Layout under `StoreConfig::dir`:
//! - `commitlog/<20-digit base offset>`: commit-log segments ([`crate::commit_log`]);
//! - `consumequeue/<topic>/<queue id>`: consume queues ([`crate::consume_queue`]);
//! - `checkpoint`: the commit-log position and per-queue entry counts known durable.
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
//! is never served. Consume-queue entries past the checkpointed counts are rebuilt from the log,
//! and a queue that lost checkpointed entries is re-indexed from its last good entry.

use crate::commit_log::{io_err, sync_dir, CommitLog, ScanStep, Segment, MIN_RECORD_SIZE};
use crate::consume_queue::{ConsumeQueue, CqEntry, ENTRY_SIZE};
use crate::message::{
    decode_records, encode_record, encoded_len, parse_record, property, tag_hash_code,
    MessageToAppend, StoredMessage, MAGIC_V1, MAGIC_V2, MAX_PROPERTIES_LEN,
};
use bytes::Bytes;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

impl StoreConfig {
    pub const DEFAULT_SEGMENT_SIZE: u64 = 1 << 30;
    pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_millis(500);
    pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 4 << 20;

    /// Defaults: 1 GiB segments, `Async` flush every 500 ms, store host 127.0.0.1:10911,
    /// 4 MiB bodies.
    pub fn new(dir: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig {
            dir: dir.into(),
            segment_size: Self::DEFAULT_SEGMENT_SIZE,
            flush_policy: FlushPolicy::Async,
            flush_interval: Self::DEFAULT_FLUSH_INTERVAL,
            store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
            max_message_size: Self::DEFAULT_MAX_MESSAGE_SIZE,
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

impl StoreError {
    /// A copy for each of several waiters sharing one outcome: `io::Error` is not `Clone`, and
    /// its kind and message are what callers act on and report.
    fn duplicate(&self) -> StoreError {
        match self {
            StoreError::Io { path, source } => StoreError::Io {
                path: path.clone(),
                source: io::Error::new(source.kind(), source.to_string()),
            },
            StoreError::CorruptRecord {
                path,
                physical_offset,
                reason,
            } => StoreError::CorruptRecord {
                path: path.clone(),
                physical_offset: *physical_offset,
                reason: reason.clone(),
            },
            StoreError::MessageTooLarge { size, limit } => StoreError::MessageTooLarge {
                size: *size,
                limit: *limit,
            },
            StoreError::PropertiesTooLarge { size } => {
                StoreError::PropertiesTooLarge { size: *size }
            }
            StoreError::InvalidTopic { topic } => StoreError::InvalidTopic {
                topic: topic.clone(),
            },
        }
    }
}

/// Topic names become directory names, so only RocketMQ's topic characters are accepted
/// (letters, digits, `%`, `|`, `_`, `-`), 1 to 255 bytes (the file-name limit).
pub fn is_valid_topic(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= 255
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

type Registry = HashMap<String, HashMap<u32, Arc<ConsumeQueue>>>;

/// A failed fsync is sticky: after one, the kernel may have dropped the dirty pages, so a later
/// fsync that succeeds proves nothing.
#[derive(Clone, Debug)]
struct StickyError {
    path: PathBuf,
    kind: io::ErrorKind,
    message: String,
}

impl StickyError {
    fn from_store_error(e: &StoreError, fallback: &Path) -> StickyError {
        match e {
            StoreError::Io { path, source } => StickyError {
                path: path.clone(),
                kind: source.kind(),
                message: source.to_string(),
            },
            other => StickyError {
                path: fallback.to_path_buf(),
                kind: io::ErrorKind::Other,
                message: other.to_string(),
            },
        }
    }

    fn to_error(&self) -> StoreError {
        StoreError::Io {
            path: self.path.clone(),
            source: io::Error::new(
                self.kind,
                format!(
                    "an earlier fsync failed, the store must be reopened: {}",
                    self.message
                ),
            ),
        }
    }
}

struct CommitState {
    durable: u64,
    syncing: bool,
    failed: Option<StickyError>,
}

type DurableCallback = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// A caller waiting for the commit log to be durable up to `position`.
struct DurabilityRequest {
    position: u64,
    done: DurableCallback,
}

/// Requests handed to the group-commit thread.
#[derive(Default)]
struct GroupQueue {
    requests: Vec<DurabilityRequest>,
    /// The thread is parked on `group_cv`. Only then does a new request wake it: a notify is a
    /// futex syscall even when nobody waits, and under load the thread is busy fsyncing.
    parked: bool,
    /// Shutdown asked the thread to serve what is queued and exit.
    stopping: bool,
    /// No thread serves the queue any more; callers serve their own requests.
    exited: bool,
}

struct Shared {
    config: StoreConfig,
    log: CommitLog,
    queues: RwLock<Registry>,
    commit: Mutex<CommitState>,
    commit_cv: Condvar,
    /// Commit-log position below which every record has published consume-queue entries.
    indexed_end: AtomicU64,
    /// Serialises checkpoints; holds the position of the last one written.
    checkpoint: Mutex<Option<u64>>,
    fsyncs: AtomicU64,
    group: Mutex<GroupQueue>,
    group_cv: Condvar,
}

impl Shared {
    fn queue(&self, topic: &str, queue_id: u32) -> Option<Arc<ConsumeQueue>> {
        self.queues
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
            .and_then(|q| q.get(&queue_id))
            .cloned()
    }

    /// Group commit, leader/follower: whoever finds no fsync in flight becomes the leader and
    /// fsyncs everything written so far; the others wait for its result, which usually covers
    /// them too.
    fn wait_durable(&self, position: u64) -> Result<(), StoreError> {
        // A position past what was written can never become durable; waiting for it would spin.
        let position = position.min(self.log.written_end());
        let mut st = lock(&self.commit);
        loop {
            if let Some(e) = &st.failed {
                return Err(e.to_error());
            }
            if st.durable >= position {
                return Ok(());
            }
            if st.syncing {
                st = self.commit_cv.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            st.syncing = true;
            let from = st.durable;
            drop(st);
            let target = self.log.written_end();
            let res = self.log.sync_range(from, target);
            self.fsyncs.fetch_add(1, Ordering::Relaxed);
            st = lock(&self.commit);
            st.syncing = false;
            match &res {
                Ok(()) => st.durable = st.durable.max(target),
                Err(e) => {
                    tracing::error!(error = %e, "commit-log fsync failed");
                    st.failed = Some(StickyError::from_store_error(e, self.log.dir()));
                }
            }
            self.commit_cv.notify_all();
        }
    }

    /// Serves one group-commit round: one `wait_durable` for the furthest position answers
    /// every request (it fsyncs everything written so far, which covers all of them).
    fn serve_round(&self, round: &mut Vec<DurabilityRequest>) {
        let Some(target) = round.iter().map(|r| r.position).max() else {
            return;
        };
        let outcome = self.wait_durable(target);
        for request in round.drain(..) {
            let result = match &outcome {
                Ok(()) => Ok(()),
                Err(e) => Err(e.duplicate()),
            };
            complete(request.done, result);
        }
    }

    /// Makes the commit log and consume queues durable and records that in the checkpoint.
    /// `force` writes it even when nothing was appended since the last one.
    fn checkpoint(&self, force: bool) -> Result<(), StoreError> {
        let mut last = lock(&self.checkpoint);
        // Read the indexed end before the counts: every record below it already has its entry
        // published, so the counts read next cover it.
        let indexed = self.indexed_end.load(Ordering::Acquire);
        if !force && *last == Some(indexed) {
            return Ok(());
        }
        let queues: Vec<Arc<ConsumeQueue>> = self
            .queues
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .flat_map(|m| m.values().cloned())
            .collect();
        let counts: Vec<(String, u32, u64)> = queues
            .iter()
            .map(|q| (q.topic().to_string(), q.queue_id(), q.max_offset()))
            .collect();
        self.wait_durable(indexed)?;
        for q in &queues {
            q.sync().map_err(|e| io_err(q.path(), e))?;
        }
        write_checkpoint(&self.config.dir, indexed, &counts)?;
        *last = Some(indexed);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Checkpoint file: magic, version, commit-log position, then (topic, queue id, entry count) per
// queue, all followed by a CRC32 of the preceding bytes. Written to a temporary file, fsynced
// and renamed over the old one, so a crash leaves either checkpoint intact.

const CHECKPOINT_FILE: &str = "checkpoint";
const CHECKPOINT_MAGIC: &[u8; 4] = b"SKCP";
const CHECKPOINT_VERSION: u32 = 1;

struct Checkpoint {
    position: u64,
    counts: HashMap<(String, u32), u64>,
}

fn write_checkpoint(
    dir: &Path,
    position: u64,
    counts: &[(String, u32, u64)],
) -> Result<(), StoreError> {
    let mut buf = Vec::with_capacity(24 + counts.len() * 32);
    buf.extend_from_slice(CHECKPOINT_MAGIC);
    buf.extend_from_slice(&CHECKPOINT_VERSION.to_be_bytes());
    buf.extend_from_slice(&position.to_be_bytes());
    buf.extend_from_slice(&(counts.len() as u32).to_be_bytes());
    for (topic, queue_id, count) in counts {
        buf.extend_from_slice(&(topic.len() as u16).to_be_bytes());
        buf.extend_from_slice(topic.as_bytes());
        buf.extend_from_slice(&queue_id.to_be_bytes());
        buf.extend_from_slice(&count.to_be_bytes());
    }
    let crc = crc32fast::hash(&buf);
    buf.extend_from_slice(&crc.to_be_bytes());
    let tmp = dir.join("checkpoint.tmp");
    let mut f = File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
    f.write_all(&buf).map_err(|e| io_err(&tmp, e))?;
    f.sync_all().map_err(|e| io_err(&tmp, e))?;
    let path = dir.join(CHECKPOINT_FILE);
    std::fs::rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
    sync_dir(dir)
}

fn parse_checkpoint(buf: &[u8]) -> Option<Checkpoint> {
    let (body, crc) = buf.split_at(buf.len().checked_sub(4)?);
    if crc32fast::hash(body).to_be_bytes() != crc {
        return None;
    }
    let mut pos = 0usize;
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = body.get(pos..pos.checked_add(n)?)?;
        pos += n;
        Some(s)
    };
    if take(4)? != CHECKPOINT_MAGIC {
        return None;
    }
    if u32::from_be_bytes(take(4)?.try_into().ok()?) != CHECKPOINT_VERSION {
        return None;
    }
    let position = u64::from_be_bytes(take(8)?.try_into().ok()?);
    let n = u32::from_be_bytes(take(4)?.try_into().ok()?);
    let mut counts = HashMap::new();
    for _ in 0..n {
        let len = u16::from_be_bytes(take(2)?.try_into().ok()?);
        let topic = std::str::from_utf8(take(len.into())?).ok()?.to_string();
        let queue_id = u32::from_be_bytes(take(4)?.try_into().ok()?);
        let count = u64::from_be_bytes(take(8)?.try_into().ok()?);
        counts.insert((topic, queue_id), count);
    }
    Some(Checkpoint { position, counts })
}

fn read_checkpoint(dir: &Path) -> Result<Option<Checkpoint>, StoreError> {
    let path = dir.join(CHECKPOINT_FILE);
    let buf = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(&path, e)),
    };
    let ck = parse_checkpoint(&buf);
    if ck.is_none() {
        tracing::warn!(file = %path.display(), "checkpoint fails its checksum, recovering from the start of the commit log");
    }
    Ok(ck)
}

// ---------------------------------------------------------------------------------------------

fn queue_dir(dir: &Path) -> PathBuf {
    dir.join("consumequeue")
}

/// Opens (creating the directories when new) the consume queue of `topic`/`queue_id`.
fn open_queue(dir: &Path, topic: &str, queue_id: u32) -> Result<Arc<ConsumeQueue>, StoreError> {
    let root = queue_dir(dir);
    let tdir = root.join(topic);
    let new_dir = !tdir.exists();
    if new_dir {
        std::fs::create_dir_all(&tdir).map_err(|e| io_err(&tdir, e))?;
        sync_dir(&root)?;
    }
    let path = tdir.join(queue_id.to_string());
    let existed = path.exists();
    let (q, cut) = ConsumeQueue::open(topic, queue_id, &path).map_err(|e| io_err(&path, e))?;
    if cut > 0 {
        tracing::warn!(file = %path.display(), bytes = cut, "cut a partial consume-queue entry");
    }
    if !existed {
        sync_dir(&tdir)?;
    }
    Ok(Arc::new(q))
}

fn load_queues(dir: &Path) -> Result<Registry, StoreError> {
    let root = queue_dir(dir);
    let mut reg: Registry = HashMap::new();
    for tentry in std::fs::read_dir(&root).map_err(|e| io_err(&root, e))? {
        let tentry = tentry.map_err(|e| io_err(&root, e))?;
        let tpath = tentry.path();
        let Some(topic) = tentry
            .file_name()
            .to_str()
            .filter(|t| is_valid_topic(t) && tpath.is_dir())
            .map(str::to_string)
        else {
            tracing::warn!(path = %tpath.display(), "ignoring unexpected entry in consume-queue directory");
            continue;
        };
        for qentry in std::fs::read_dir(&tpath).map_err(|e| io_err(&tpath, e))? {
            let qentry = qentry.map_err(|e| io_err(&tpath, e))?;
            let name = qentry.file_name();
            let Some(queue_id) = name
                .to_str()
                .and_then(|n| n.parse::<u32>().ok().filter(|id| id.to_string() == n))
            else {
                tracing::warn!(path = %qentry.path().display(), "ignoring unexpected consume-queue file");
                continue;
            };
            let q = open_queue(dir, &topic, queue_id)?;
            reg.entry(topic.clone()).or_default().insert(queue_id, q);
        }
    }
    Ok(reg)
}

/// Entries found during a recovery scan, written per queue in large chunks.
struct PendingIndex {
    queue: Arc<ConsumeQueue>,
    start: u64,
    bytes: Vec<u8>,
}

impl PendingIndex {
    fn next_offset(&self) -> u64 {
        self.start + (self.bytes.len() / ENTRY_SIZE) as u64
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        if self.bytes.is_empty() {
            return Ok(());
        }
        self.queue
            .write_entries(self.start, &self.bytes)
            .map_err(|e| io_err(self.queue.path(), e))?;
        let end = self.next_offset();
        self.queue.publish(end);
        self.start = end;
        self.bytes.clear();
        Ok(())
    }
}

enum ScanOutcome {
    Done {
        valid_end: u64,
    },
    Gap {
        topic: String,
        queue_id: u32,
        position: u64,
    },
}

struct Recovery<'a> {
    config: &'a StoreConfig,
    log: &'a CommitLog,
    queues: &'a mut Registry,
    pending: HashMap<(String, u32), PendingIndex>,
}

impl Recovery<'_> {
    fn queue(&mut self, topic: &str, queue_id: u32) -> Result<Arc<ConsumeQueue>, StoreError> {
        if let Some(q) = self.queues.get(topic).and_then(|m| m.get(&queue_id)) {
            return Ok(q.clone());
        }
        let q = open_queue(&self.config.dir, topic, queue_id)?;
        self.queues
            .entry(topic.to_string())
            .or_default()
            .insert(queue_id, q.clone());
        Ok(q)
    }

    fn flush_pending(&mut self) -> Result<(), StoreError> {
        for p in self.pending.values_mut() {
            p.flush()?;
        }
        self.pending.clear();
        Ok(())
    }

    /// Whether entry `i` of `q` still describes the record it points at; returns the
    /// commit-log position right after that record.
    fn entry_matches(&self, q: &ConsumeQueue, i: u64) -> Result<Option<u64>, StoreError> {
        let Some(e) = q.entry_raw(i).map_err(|err| io_err(q.path(), err))? else {
            return Ok(None);
        };
        if u64::from(e.size) < MIN_RECORD_SIZE
            || u64::from(e.size) > self.config.max_record_size()
            || e.end() > self.log.files_end()?
            || !self.log.same_segment(e.physical_offset, e.end())
        {
            return Ok(None);
        }
        let mut buf = vec![0u8; e.size as usize];
        self.log.read_at(e.physical_offset, &mut buf)?;
        Ok(parse_record(&buf).ok().and_then(|l| {
            let same = l.physical_offset == e.physical_offset
                && l.queue_id == q.queue_id()
                && l.queue_offset == i
                && &buf[l.topic.clone()] == q.topic().as_bytes();
            same.then_some(e.end())
        }))
    }

    /// Cuts `q` after its last entry that still matches its record, looking back a bounded
    /// number of entries (a damaged index rarely has more than a damaged tail); returns where
    /// re-indexing has to resume, `None` for the start of the log.
    fn repair_tail(&self, q: &ConsumeQueue) -> Result<Option<u64>, StoreError> {
        const LOOK_BACK: u64 = 64;
        let count = q.max_offset();
        for i in (count.saturating_sub(LOOK_BACK)..count).rev() {
            if let Some(end) = self.entry_matches(q, i)? {
                if i + 1 < count {
                    q.truncate(i + 1).map_err(|e| io_err(q.path(), e))?;
                }
                return Ok(Some(end));
            }
        }
        if count > 0 {
            q.truncate(0).map_err(|e| io_err(q.path(), e))?;
        }
        Ok(None)
    }

    /// Validates records from `start`, indexing those the consume queues lack, and handles the
    /// first invalid record per the module's corruption policy.
    fn scan(&mut self, start: u64, durable: u64) -> Result<ScanOutcome, StoreError> {
        let log = self.log;
        let mut scanner = log.scan(start, self.config.max_record_size())?;
        let mut scanned = 0u64;
        loop {
            let step = scanner.next_step()?;
            match step {
                ScanStep::End { position } => {
                    self.flush_pending()?;
                    tracing::debug!(
                        from = start,
                        to = position,
                        records = scanned,
                        "commit-log scan complete"
                    );
                    return Ok(ScanOutcome::Done {
                        valid_end: position,
                    });
                }
                ScanStep::Record {
                    position,
                    layout,
                    bytes,
                } => {
                    let topic = match std::str::from_utf8(&bytes[layout.topic.clone()]) {
                        Ok(t) if is_valid_topic(t) => t.to_string(),
                        _ => {
                            return self.invalid(
                                position,
                                log.path_for(position),
                                "record carries an invalid topic name".to_string(),
                                durable,
                            )
                        }
                    };
                    scanned += 1;
                    let props =
                        std::str::from_utf8(&bytes[layout.properties.clone()]).unwrap_or("");
                    let entry = CqEntry {
                        physical_offset: position,
                        size: layout.total_size,
                        tag_hash: property(props, crate::message::property::TAGS)
                            .map_or(0, tag_hash_code),
                        store_timestamp: layout.store_timestamp,
                    };
                    let key = (topic, layout.queue_id);
                    let next = match self.pending.get(&key) {
                        Some(p) => p.next_offset(),
                        None => self.queue(&key.0, key.1)?.max_offset(),
                    };
                    if layout.queue_offset < next {
                        continue;
                    }
                    if layout.queue_offset > next {
                        self.flush_pending()?;
                        return Ok(ScanOutcome::Gap {
                            topic: key.0,
                            queue_id: key.1,
                            position,
                        });
                    }
                    if !self.pending.contains_key(&key) {
                        let queue = self.queue(&key.0, key.1)?;
                        self.pending.insert(
                            key.clone(),
                            PendingIndex {
                                queue,
                                start: next,
                                bytes: Vec::new(),
                            },
                        );
                    }
                    if let Some(p) = self.pending.get_mut(&key) {
                        entry.encode_into(&mut p.bytes);
                        if p.bytes.len() >= 256 * 1024 {
                            p.flush()?;
                        }
                    }
                }
                ScanStep::Invalid {
                    position,
                    path,
                    reason,
                } => return self.invalid(position, path, reason, durable),
            }
        }
    }

    fn invalid(
        &mut self,
        position: u64,
        path: PathBuf,
        reason: String,
        durable: u64,
    ) -> Result<ScanOutcome, StoreError> {
        self.flush_pending()?;
        if position < durable {
            return Err(StoreError::CorruptRecord {
                path,
                physical_offset: position,
                reason: format!("{reason} (below the checkpointed durable position {durable})"),
            });
        }
        if let Some(next) = self
            .log
            .find_valid_record_after(position, self.config.max_record_size())?
        {
            return Err(StoreError::CorruptRecord {
                path,
                physical_offset: position,
                reason: format!(
                    "{reason} (a valid record follows at {next}, so this is not a torn tail)"
                ),
            });
        }
        let files_end = self.log.files_end()?;
        tracing::warn!(
            file = %path.display(),
            physical_offset = position,
            dropped_bytes = files_end.saturating_sub(position),
            reason = %reason,
            "truncating torn commit-log tail"
        );
        self.log.truncate_at(position)?;
        Ok(ScanOutcome::Done {
            valid_end: position,
        })
    }

    /// Drops index entries that point at or past `valid_end` (entries are in log order).
    fn trim_past(&self, valid_end: u64) -> Result<(), StoreError> {
        for q in self.queues.values().flat_map(|m| m.values()) {
            let max = q.max_offset();
            let bad = |i: u64| -> Result<bool, StoreError> {
                Ok(q.entry_raw(i)
                    .map_err(|e| io_err(q.path(), e))?
                    .is_none_or(|e| e.end() > valid_end))
            };
            if max == 0 || !bad(max - 1)? {
                continue;
            }
            let (mut lo, mut hi) = (0, max - 1);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if bad(mid)? {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            tracing::warn!(
                file = %q.path().display(),
                kept = lo,
                dropped = max - lo,
                "dropped consume-queue entries past the commit-log end"
            );
            q.truncate(lo).map_err(|e| io_err(q.path(), e))?;
        }
        Ok(())
    }
}

/// Returns the valid end of the commit log and the durable position to start from.
fn recover(
    config: &StoreConfig,
    log: &CommitLog,
    queues: &mut Registry,
) -> Result<(u64, u64), StoreError> {
    let first_base = log.first_base();
    let files_end = log.files_end()?;
    let checkpoint = match read_checkpoint(&config.dir)? {
        Some(ck) if ck.position >= first_base && ck.position <= files_end => Some(ck),
        Some(ck) => {
            tracing::warn!(
                checkpoint = ck.position,
                files_end,
                "checkpoint lies outside the commit log, recovering from the start"
            );
            None
        }
        None => None,
    };
    let (durable, counts) = match checkpoint {
        Some(ck) => (ck.position, ck.counts),
        None => (first_base, HashMap::new()),
    };
    let mut rec = Recovery {
        config,
        log,
        queues,
        pending: HashMap::new(),
    };
    let mut start = durable;
    let existing: Vec<Arc<ConsumeQueue>> = rec
        .queues
        .values()
        .flat_map(|m| m.values().cloned())
        .collect();
    for q in &existing {
        let expected = counts
            .get(&(q.topic().to_string(), q.queue_id()))
            .copied()
            .unwrap_or(0);
        if q.max_offset() > expected {
            // Entries written after the checkpoint may be incomplete; the scan re-indexes them.
            q.truncate(expected).map_err(|e| io_err(q.path(), e))?;
        }
        let before = q.max_offset();
        let resume = if before > 0 {
            rec.repair_tail(q)?
        } else {
            None
        };
        let have = q.max_offset();
        if have < expected {
            tracing::warn!(
                file = %q.path().display(),
                entries = before,
                kept = have,
                expected,
                resume_from = resume.unwrap_or(first_base),
                "consume queue lost entries, rebuilding from the commit log"
            );
            start = start.min(resume.unwrap_or(first_base));
        }
    }
    for ((topic, queue_id), expected) in &counts {
        if *expected > 0
            && rec
                .queues
                .get(topic)
                .and_then(|m| m.get(queue_id))
                .is_none()
        {
            tracing::warn!(topic = %topic, queue_id, expected, "consume queue missing, rebuilding from the commit log");
            if is_valid_topic(topic) {
                rec.queue(topic, *queue_id)?;
            }
            start = first_base;
        }
    }
    let mut full_rescan = start == first_base;
    let valid_end = loop {
        match rec.scan(start, durable)? {
            ScanOutcome::Done { valid_end } => break valid_end,
            ScanOutcome::Gap {
                topic,
                queue_id,
                position,
            } => {
                if full_rescan {
                    return Err(StoreError::CorruptRecord {
                        path: log.path_for(position),
                        physical_offset: position,
                        reason: format!(
                            "queue offset gap in {topic}/{queue_id}: earlier records of the queue are missing from the commit log"
                        ),
                    });
                }
                let q = rec.queue(&topic, queue_id)?;
                tracing::warn!(
                    file = %q.path().display(),
                    physical_offset = position,
                    "consume queue misses entries before the scan start, re-indexing it from the start"
                );
                q.truncate(0).map_err(|e| io_err(q.path(), e))?;
                start = first_base;
                full_rescan = true;
            }
        }
    };
    rec.trim_past(valid_end)?;
    Ok((valid_end, durable.min(valid_end)))
}

// ---------------------------------------------------------------------------------------------

/// Per-queue slice of the batch being appended.
struct BatchQueue {
    queue: Arc<ConsumeQueue>,
    start: u64,
    count: u64,
    entries: Vec<u8>,
}

struct Flusher {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: JoinHandle<()>,
}

/// The single writer. Owned by the message-store actor (or a benchmark thread).
pub struct MessageStore {
    shared: Arc<Shared>,
    active: Arc<Segment>,
    write_pos: u64,
    last_timestamp: i64,
    /// The writer's own view of the queue registry, so lookups take no lock.
    queues: Registry,
    buf: Vec<u8>,
    batch: Vec<BatchQueue>,
    clock: Box<dyn FnMut() -> i64 + Send>,
    flusher: Option<Flusher>,
    group_commit: Option<JoinHandle<()>>,
    /// Set after an I/O error mid-append: memory and disk may disagree until a reopen recovers.
    broken: bool,
    closed: bool,
    /// Held for the store's life: two writers on one directory would interleave records.
    _lock: File,
}

/// A cheap, cloneable, thread-safe read handle; sees every append once `append_batch` returned.
#[derive(Clone)]
pub struct StoreReader {
    shared: Arc<Shared>,
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
        std::fs::create_dir_all(&config.dir).map_err(|e| io_err(&config.dir, e))?;
        let lock_file = lock_dir(&config.dir)?;
        let cl_dir = config.dir.join("commitlog");
        std::fs::create_dir_all(&cl_dir).map_err(|e| io_err(&cl_dir, e))?;
        let cq_dir = queue_dir(&config.dir);
        std::fs::create_dir_all(&cq_dir).map_err(|e| io_err(&cq_dir, e))?;
        let log = CommitLog::open(&cl_dir)?;
        let mut queues = load_queues(&config.dir)?;
        let (valid_end, durable) = recover(&config, &log, &mut queues)?;
        log.publish_written(valid_end);
        let active = match log.last_segment() {
            Some(s) => s,
            None => log.roll(valid_end)?,
        };
        let mut last_timestamp = 0;
        for q in queues.values().flat_map(|m| m.values()) {
            if let Some(e) = q
                .entry(q.max_offset().saturating_sub(1))
                .map_err(|e| io_err(q.path(), e))?
            {
                last_timestamp = last_timestamp.max(e.store_timestamp);
            }
        }
        let shared = Arc::new(Shared {
            log,
            queues: RwLock::new(queues.clone()),
            commit: Mutex::new(CommitState {
                durable,
                syncing: false,
                failed: None,
            }),
            commit_cv: Condvar::new(),
            indexed_end: AtomicU64::new(valid_end),
            checkpoint: Mutex::new(None),
            fsyncs: AtomicU64::new(0),
            group: Mutex::new(GroupQueue::default()),
            group_cv: Condvar::new(),
            config,
        });
        // Recovery may have re-indexed or cut files: make that durable before serving.
        shared.checkpoint(true)?;
        let flusher = spawn_flusher(&shared)?;
        // Started under `Async` too: a `SyncWaiter` is handed out under both policies and
        // `notify_when_durable` must answer under both, while a thread parked on an empty queue
        // costs only its stack. Spawned after the flusher, whose weak handle lets it exit on its
        // own should this spawn fail and drop the shared state.
        let group_commit = spawn_group_commit(&shared)?;
        tracing::info!(
            dir = %shared.config.dir.display(),
            commit_log_end = valid_end,
            queues = queues.values().map(HashMap::len).sum::<usize>(),
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
            clock: Box::new(now_millis),
            flusher: Some(flusher),
            group_commit: Some(group_commit),
            broken: false,
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
    pub fn append_batch(
        &mut self,
        messages: &[MessageToAppend],
    ) -> Result<Vec<AppendResult>, StoreError> {
        let (results, end) = self.append_batch_nowait(messages)?;
        if self.shared.config.flush_policy == FlushPolicy::Sync {
            self.shared.wait_durable(end)?;
        }
        Ok(results)
    }

    /// Appends without waiting for durability even under `Sync`; pair with
    /// [`SyncWaiter::wait_durable`] so many appenders share one fsync.
    ///
    /// The batch is validated as a whole first, so an invalid message appends nothing. After an
    /// I/O error the store refuses further appends until reopened (recovery repairs the tail).
    pub fn append_batch_nowait(
        &mut self,
        messages: &[MessageToAppend],
    ) -> Result<(Vec<AppendResult>, u64), StoreError> {
        if self.broken || self.closed {
            return Err(io_err(
                &self.shared.config.dir,
                io::Error::other("the store failed an earlier write or is closed; reopen it"),
            ));
        }
        let config = &self.shared.config;
        let host = config.store_host;
        for m in messages {
            if !is_valid_topic(&m.topic) {
                return Err(StoreError::InvalidTopic {
                    topic: m.topic.clone(),
                });
            }
            if m.body.len() > config.max_message_size {
                return Err(StoreError::MessageTooLarge {
                    size: m.body.len(),
                    limit: config.max_message_size,
                });
            }
            if m.properties.len() > MAX_PROPERTIES_LEN {
                return Err(StoreError::PropertiesTooLarge {
                    size: m.properties.len(),
                });
            }
            let size = encoded_len(m, host);
            if size as u64 > config.segment_size {
                return Err(StoreError::MessageTooLarge {
                    size,
                    limit: config.segment_size as usize,
                });
            }
        }
        if messages.is_empty() {
            return Ok((Vec::new(), self.write_pos));
        }
        let res = self.write_batch(messages);
        if res.is_err() {
            self.broken = true;
        }
        res
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
                let q = open_queue(&self.shared.config.dir, topic, queue_id)?;
                self.queues
                    .entry(topic.to_string())
                    .or_default()
                    .insert(queue_id, q.clone());
                self.shared
                    .queues
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
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
            let stored =
                encode_record(m, queue_offset, pos, now, host, &mut self.buf).map_err(|e| {
                    StoreError::MessageTooLarge {
                        size: match e {
                            crate::message::MessageEncodeError::RecordTooLarge { len } => len,
                            _ => size as usize,
                        },
                        limit: i32::MAX as usize,
                    }
                })?;
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
        SyncWaiter {
            shared: self.shared.clone(),
        }
    }

    pub fn reader(&self) -> StoreReader {
        StoreReader {
            shared: self.shared.clone(),
        }
    }

    /// fsyncs the commit log and consume queues and writes the recovery checkpoint.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        self.shared.checkpoint(false)
    }

    fn shutdown(&mut self) -> Result<(), StoreError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        if let Some(handle) = self.group_commit.take() {
            stop_group_commit(&self.shared, handle);
        }
        if let Some(f) = self.flusher.take() {
            *lock(&f.stop.0) = true;
            f.stop.1.notify_all();
            if f.handle.join().is_err() {
                tracing::error!("store flusher thread panicked");
            }
        }
        if self.broken {
            // Memory and disk disagree; leave the repair to recovery rather than checkpointing.
            return Ok(());
        }
        self.shared.checkpoint(false)
    }

    /// Answers every queued durability request, flushes and stops the background threads.
    pub fn close(mut self) -> Result<(), StoreError> {
        self.shutdown()
    }
}

impl Drop for MessageStore {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::error!(error = %e, "flush on drop failed");
        }
    }
}

fn lock_dir(dir: &Path) -> Result<File, StoreError> {
    let path = dir.join("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| io_err(&path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(io_err(
            &path,
            io::Error::new(
                io::ErrorKind::WouldBlock,
                "the store directory is already open in another store",
            ),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(io_err(&path, e)),
    }
}

/// Runs a durability callback; a panicking one must not take the group-commit thread, and with
/// it every later waiter, down.
fn complete(done: DurableCallback, result: Result<(), StoreError>) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || done(result))).is_err() {
        tracing::error!("durability callback panicked");
    }
}

/// RocketMQ's GroupCommitService: one thread turns queued durability requests into one fsync
/// per round, so a sender costs a queue push instead of a blocking-pool task and a condvar
/// hand-off of its own. Requests queued while a round fsyncs are served by the next round.
fn spawn_group_commit(shared: &Arc<Shared>) -> Result<JoinHandle<()>, StoreError> {
    let thread_shared = shared.clone();
    std::thread::Builder::new()
        .name("skiff-group-commit".to_string())
        .spawn(move || group_commit_loop(&thread_shared))
        .map_err(|e| io_err(&shared.config.dir, e))
}

fn group_commit_loop(shared: &Shared) {
    let mut round = Vec::new();
    let (mut rounds, mut requests) = (0u64, 0u64);
    loop {
        {
            let mut q = lock(&shared.group);
            while q.requests.is_empty() {
                if q.stopping {
                    q.exited = true;
                    let fsyncs = shared.fsyncs.load(Ordering::Relaxed);
                    tracing::info!(rounds, requests, fsyncs, "group-commit thread stopped");
                    return;
                }
                q.parked = true;
                q = shared.group_cv.wait(q).unwrap_or_else(|e| e.into_inner());
                q.parked = false;
            }
            // Swapped, not taken: both vectors keep their capacity across rounds.
            std::mem::swap(&mut q.requests, &mut round);
        }
        rounds += 1;
        requests += round.len() as u64;
        shared.serve_round(&mut round);
    }
}

/// Lets the group-commit thread serve what is queued (durability before the answer), joins it,
/// then serves anything it left behind by panicking.
fn stop_group_commit(shared: &Shared, handle: JoinHandle<()>) {
    lock(&shared.group).stopping = true;
    shared.group_cv.notify_all();
    if handle.join().is_err() {
        tracing::error!("group-commit thread panicked");
    }
    let mut rest = {
        let mut q = lock(&shared.group);
        q.exited = true;
        std::mem::take(&mut q.requests)
    };
    shared.serve_round(&mut rest);
}

fn spawn_flusher(shared: &Arc<Shared>) -> Result<Flusher, StoreError> {
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let thread_stop = stop.clone();
    // Weak, so a forgotten reader clone cannot keep a flusher running for a dropped store.
    let weak = Arc::downgrade(shared);
    let interval = shared.config.flush_interval.max(Duration::from_millis(1));
    let handle = std::thread::Builder::new()
        .name("skiff-store-flush".to_string())
        .spawn(move || loop {
            let stopped = lock(&thread_stop.0);
            let (stopped, _) = thread_stop
                .1
                .wait_timeout_while(stopped, interval, |s| !*s)
                .unwrap_or_else(|e| e.into_inner());
            if *stopped {
                return;
            }
            drop(stopped);
            let Some(shared) = weak.upgrade() else { return };
            if let Err(e) = shared.checkpoint(false) {
                tracing::error!(error = %e, "background flush failed");
            }
        })
        .map_err(|e| io_err(&shared.config.dir, e))?;
    Ok(Flusher { stop, handle })
}

/// Shared group-commit handle (thread-safe, cloneable).
#[derive(Clone)]
pub struct SyncWaiter {
    shared: Arc<Shared>,
}

impl SyncWaiter {
    /// Blocks until the commit log is fsynced at least up to `position` (an end position
    /// returned by `append_batch_nowait`); one fsync serves every waiter whose position it covers.
    pub fn wait_durable(&self, position: u64) -> Result<(), StoreError> {
        self.shared.wait_durable(position)
    }

    /// Calls `done` once the commit log is fsynced at least up to `position` (an end position
    /// returned by `append_batch_nowait`), or with the error that prevents it; never blocks on
    /// an fsync.
    ///
    /// When the position is already durable, or an earlier fsync failed, `done` runs at once on
    /// the calling thread. Otherwise it runs on the store's group-commit thread after the fsync
    /// that covers it, so `done` must be quick (hand the result on, don't work in it). After the
    /// store is closed, the caller's thread does the wait itself.
    pub fn notify_when_durable(
        &self,
        position: u64,
        done: impl FnOnce(Result<(), StoreError>) + Send + 'static,
    ) {
        let shared = &self.shared;
        // As in `wait_durable`: a position past what was written can never become durable.
        let position = position.min(shared.log.written_end());
        let st = lock(&shared.commit);
        if let Some(e) = &st.failed {
            let e = e.to_error();
            drop(st);
            done(Err(e));
            return;
        }
        if st.durable >= position {
            drop(st);
            done(Ok(()));
            return;
        }
        drop(st);
        let mut q = lock(&shared.group);
        if q.exited {
            drop(q);
            // Raced with shutdown: no thread is left to hand the request to. The caller waits
            // itself; the shutdown drain has usually made the position durable already.
            done(shared.wait_durable(position));
            return;
        }
        q.requests.push(DurabilityRequest {
            position,
            done: Box::new(done),
        });
        if q.parked {
            q.parked = false;
            drop(q);
            shared.group_cv.notify_one();
        }
    }

    /// Commit-log position known durable.
    pub fn durable_position(&self) -> u64 {
        lock(&self.shared.commit).durable
    }

    /// How many group-commit fsyncs ran so far (a metric; tests check sharing with it).
    pub fn fsync_count(&self) -> u64 {
        self.shared.fsyncs.load(Ordering::Relaxed)
    }
}

/// RocketMQ scans at most this many index entries per filtered read (16000 bytes of 20-byte
/// entries), so a selective filter cannot turn one pull into a scan of the whole queue.
const FILTER_SCAN_ENTRIES: u64 = 800;
/// Most index entries one read examines: `max_messages` arrives from pull requests, and an
/// absurd value must not load a whole queue's index (the caller continues from
/// `next_begin_offset`).
const MAX_ENTRIES_PER_READ: u64 = 16 * 1024;
/// Largest commit-log span a read fetches with one pread.
const COALESCE_LIMIT: u64 = 1 << 20;
/// Largest stretch of other records a pread may carry between two wanted ones: copying 8 KiB
/// costs about what another pread does.
const RUN_GAP_LIMIT: u64 = 8 << 10;

thread_local! {
    /// Run buffer of coalesced reads, at most `COALESCE_LIMIT` bytes per reading thread.
    static SPAN_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl StoreReader {
    fn empty(status: ReadStatus, next: u64, max: u64) -> ReadResult {
        ReadResult {
            status,
            records: Bytes::new(),
            message_count: 0,
            next_begin_offset: next,
            min_offset: 0,
            max_offset: max,
        }
    }

    /// Reads up to `max_messages` (and about `max_bytes`) records from `offset` of one queue.
    /// `tag_filter`, when given, keeps only entries whose tag hash it accepts; entries skipped by
    /// the filter still advance `next_begin_offset`. Every served record passed its body CRC.
    ///
    /// The first matching record is served even when larger than `max_bytes`. With a filter at
    /// most `max(max_messages, 800)` entries are examined per call, and never more than 16384;
    /// callers bound `max_bytes` (RocketMQ uses 256 KiB).
    pub fn read(
        &self,
        topic: &str,
        queue_id: u32,
        offset: u64,
        max_messages: u32,
        max_bytes: u32,
        tag_filter: Option<&dyn Fn(i64) -> bool>,
    ) -> Result<ReadResult, StoreError> {
        let Some(q) = self.shared.queue(topic, queue_id) else {
            return Ok(Self::empty(ReadStatus::NoMessageInQueue, 0, 0));
        };
        let max = q.max_offset();
        let min = 0;
        if max == 0 {
            return Ok(Self::empty(ReadStatus::NoMessageInQueue, 0, 0));
        }
        if offset < min {
            return Ok(Self::empty(ReadStatus::OffsetTooSmall, min, max));
        }
        if offset == max {
            return Ok(Self::empty(ReadStatus::OffsetOverflowOne, offset, max));
        }
        if offset > max {
            return Ok(Self::empty(ReadStatus::OffsetOverflowBadly, max, max));
        }
        if max_messages == 0 {
            return Ok(Self::empty(ReadStatus::NoMatchedMessage, offset, max));
        }
        let window = match tag_filter {
            Some(_) => u64::from(max_messages).max(FILTER_SCAN_ENTRIES),
            None => u64::from(max_messages),
        }
        .min(MAX_ENTRIES_PER_READ);
        let mut scratch = Vec::new();
        let entries = q
            .read_entries(offset, window, &mut scratch)
            .map_err(|e| io_err(q.path(), e))?;
        let mut selected: Vec<(u64, CqEntry)> = Vec::with_capacity(max_messages.min(64) as usize);
        let mut bytes = 0u64;
        let mut scanned = 0u64;
        let log_end = self.shared.log.written_end();
        let max_record = self.shared.config.max_record_size();
        for (i, e) in entries.iter().enumerate() {
            let logical = offset + i as u64;
            // Sizes are checked before they size any buffer: a damaged index must not make a
            // read allocate gigabytes.
            let Some(e) = e.filter(|e| {
                (MIN_RECORD_SIZE..=max_record).contains(&u64::from(e.size)) && e.end() <= log_end
            }) else {
                return Err(io_err(
                    q.path(),
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("invalid consume-queue entry at offset {logical}"),
                    ),
                ));
            };
            if selected.len() >= max_messages as usize {
                break;
            }
            if let Some(f) = tag_filter {
                if !f(e.tag_hash) {
                    scanned = i as u64 + 1;
                    continue;
                }
            }
            if !selected.is_empty() && bytes + u64::from(e.size) > u64::from(max_bytes) {
                break;
            }
            bytes += u64::from(e.size);
            selected.push((logical, e));
            scanned = i as u64 + 1;
        }
        let next = offset + scanned;
        if selected.is_empty() {
            return Ok(Self::empty(ReadStatus::NoMatchedMessage, next, max));
        }
        let records = self.fetch(topic, queue_id, &selected, bytes)?;
        Ok(ReadResult {
            status: ReadStatus::Found,
            records,
            message_count: selected.len() as u32,
            next_begin_offset: next,
            min_offset: min,
            max_offset: max,
        })
    }

    /// Reads the records of `selected` back to back, verifying each.
    ///
    /// Records close together in the log (the usual case: a queue's messages arrive in
    /// batches) are fetched with one pread per run; a new run starts where the next record is
    /// far away, so the bytes of other queues between two batches are not copied for nothing.
    fn fetch(
        &self,
        topic: &str,
        queue_id: u32,
        selected: &[(u64, CqEntry)],
        total: u64,
    ) -> Result<Bytes, StoreError> {
        let log = &self.shared.log;
        let mut out = Vec::with_capacity(total as usize);
        let mut i = 0;
        while i < selected.len() {
            let run_start = selected[i].1.physical_offset;
            let mut run_end = selected[i].1.end();
            let mut j = i + 1;
            while let Some((_, e)) = selected.get(j) {
                if e.physical_offset < run_end
                    || e.physical_offset - run_end > RUN_GAP_LIMIT
                    || e.end() - run_start > COALESCE_LIMIT
                {
                    break;
                }
                run_end = e.end();
                j += 1;
            }
            if j - i > 1 && !log.same_segment(run_start, run_end) {
                j = i + 1;
                run_end = selected[i].1.end();
            }
            let run = &selected[i..j];
            SPAN_SCRATCH.with(|scratch| -> Result<(), StoreError> {
                let mut scratch = scratch.borrow_mut();
                let span = (run_end - run_start) as usize;
                if scratch.len() < span {
                    scratch.resize(span, 0);
                }
                let buf = &mut scratch[..span];
                log.read_at(run_start, buf)?;
                for (logical, e) in run {
                    let r = (e.physical_offset - run_start) as usize;
                    let rec = &buf[r..r + e.size as usize];
                    self.verify(rec, topic, queue_id, *logical, e)?;
                    out.extend_from_slice(rec);
                }
                Ok(())
            })?;
            i = j;
        }
        Ok(Bytes::from(out))
    }

    fn verify(
        &self,
        rec: &[u8],
        topic: &str,
        queue_id: u32,
        logical: u64,
        e: &CqEntry,
    ) -> Result<(), StoreError> {
        let corrupt = |reason: String| StoreError::CorruptRecord {
            path: self.shared.log.path_for(e.physical_offset),
            physical_offset: e.physical_offset,
            reason,
        };
        let l = parse_record(rec).map_err(|err| corrupt(err.to_string()))?;
        if l.total_size != e.size
            || l.physical_offset != e.physical_offset
            || l.queue_id != queue_id
            || l.queue_offset != logical
            || &rec[l.topic.clone()] != topic.as_bytes()
        {
            return Err(corrupt(format!(
                "record is not {topic}/{queue_id} offset {logical} as its index entry says"
            )));
        }
        Ok(())
    }

    pub fn min_offset(&self, _topic: &str, _queue_id: u32) -> u64 {
        // Segments are never deleted yet, so every queue starts at 0.
        0
    }

    /// Next logical offset to be written (the number of entries in the queue).
    pub fn max_offset(&self, topic: &str, queue_id: u32) -> u64 {
        self.shared
            .queue(topic, queue_id)
            .map_or(0, |q| q.max_offset())
    }

    /// First offset whose store timestamp is >= `timestamp` (Lower) or last offset whose store
    /// timestamp is <= `timestamp` (Upper); max offset when every entry is older, min when newer.
    pub fn search_offset_by_timestamp(
        &self,
        topic: &str,
        queue_id: u32,
        timestamp: i64,
        boundary: BoundaryType,
    ) -> Result<u64, StoreError> {
        let Some(q) = self.shared.queue(topic, queue_id) else {
            return Ok(0);
        };
        q.search_by_timestamp(timestamp, boundary == BoundaryType::Upper)
            .map_err(|e| io_err(q.path(), e))
    }

    /// The record at a commit-log physical offset (CONSUMER_SEND_MSG_BACK looks messages up so).
    /// `Ok(None)` when no record starts there; `CorruptRecord` when one does but fails its CRC.
    pub fn read_by_physical_offset(
        &self,
        physical_offset: u64,
    ) -> Result<Option<StoredMessage>, StoreError> {
        let log = &self.shared.log;
        let end = log.written_end();
        if physical_offset.saturating_add(MIN_RECORD_SIZE) > end {
            return Ok(None);
        }
        let mut head = [0u8; 36];
        let head_len = (end - physical_offset).min(36) as usize;
        if !log.same_segment(physical_offset, physical_offset + head_len as u64) {
            return Ok(None);
        }
        log.read_at(physical_offset, &mut head[..head_len])?;
        let size = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let magic = i32::from_be_bytes([head[4], head[5], head[6], head[7]]);
        let mut phys = [0u8; 8];
        phys.copy_from_slice(&head[28..36]);
        let Ok(size) = u64::try_from(size) else {
            return Ok(None);
        };
        if (magic != MAGIC_V1 && magic != MAGIC_V2)
            || u64::from_be_bytes(phys) != physical_offset
            || size < MIN_RECORD_SIZE
            || size > self.shared.config.max_record_size()
            || physical_offset + size > end
            || !log.same_segment(physical_offset, physical_offset + size)
        {
            return Ok(None);
        }
        let mut buf = vec![0u8; size as usize];
        log.read_at(physical_offset, &mut buf)?;
        let corrupt = |reason: String| StoreError::CorruptRecord {
            path: log.path_for(physical_offset),
            physical_offset,
            reason,
        };
        let mut msgs = decode_records(Bytes::from(buf)).map_err(|e| corrupt(e.to_string()))?;
        match msgs.pop() {
            Some(m) if msgs.is_empty() => Ok(Some(m)),
            _ => Err(corrupt("record size disagrees with its fields".to_string())),
        }
    }

    /// Store timestamp of the entry at `offset`, if present.
    pub fn store_timestamp_at(
        &self,
        topic: &str,
        queue_id: u32,
        offset: u64,
    ) -> Result<Option<i64>, StoreError> {
        let Some(q) = self.shared.queue(topic, queue_id) else {
            return Ok(None);
        };
        Ok(q.entry(offset)
            .map_err(|e| io_err(q.path(), e))?
            .map(|e| e.store_timestamp))
    }

    /// Every (topic, queue id) with at least one consume-queue file, sorted.
    pub fn queues(&self) -> Vec<(String, u32)> {
        let reg = self.shared.queues.read().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<(String, u32)> = reg
            .iter()
            .flat_map(|(t, m)| m.keys().map(move |id| (t.clone(), *id)))
            .collect();
        out.sort();
        out
    }

    /// End of the commit log as readers see it.
    pub fn commit_log_end(&self) -> u64 {
        self.shared.log.written_end()
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
    fn checkpoint_round_trips_and_rejects_damage() {
        let dir = tempfile::tempdir().unwrap();
        let counts = vec![("A".to_string(), 0, 5), ("%RETRY%g".to_string(), 3, 9)];
        write_checkpoint(dir.path(), 1234, &counts).unwrap();
        let ck = read_checkpoint(dir.path()).unwrap().unwrap();
        assert_eq!(ck.position, 1234);
        assert_eq!(ck.counts[&("A".to_string(), 0)], 5);
        assert_eq!(ck.counts[&("%RETRY%g".to_string(), 3)], 9);
        let path = dir.path().join(CHECKPOINT_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[12] ^= 1;
        assert!(parse_checkpoint(&bytes).is_none());
        for cut in 0..bytes.len() {
            assert!(parse_checkpoint(&bytes[..cut]).is_none());
        }
    }

    fn sync_store(dir: &Path) -> MessageStore {
        let mut c = StoreConfig::new(dir);
        c.segment_size = 1 << 20;
        c.flush_policy = FlushPolicy::Sync;
        // No background checkpoint: every fsync comes from the waits under test.
        c.flush_interval = Duration::from_secs(3600);
        MessageStore::open(c).unwrap()
    }

    fn message(i: u8) -> MessageToAppend {
        MessageToAppend {
            topic: "TopicTest".to_string(),
            queue_id: 0,
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            born_host: SocketAddr::from(([10, 0, 0, 7], 40000)),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            properties: String::new(),
            body: Bytes::from(vec![i; 64]),
        }
    }

    /// Queues requests behind a round whose callback blocks, and releases it only once shutdown
    /// has asked the thread to stop: the requests are then certainly still queued when the
    /// store closes, and closing must answer each of them, durable.
    fn shutdown_answers_queued_requests(close: bool) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = sync_store(dir.path());
        let waiter = store.sync_waiter();
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let (_, first) = store.append_batch_nowait(&[message(0)]).unwrap();
        waiter.notify_when_durable(first, move |result| {
            let _ = entered_tx.send(result.is_ok());
            let _ = gate_rx.recv();
        });
        assert_eq!(
            entered_rx.recv_timeout(Duration::from_secs(30)),
            Ok(true),
            "the first round answers"
        );
        let fsyncs = waiter.fsync_count();
        let (tx, rx) = std::sync::mpsc::channel();
        let mut positions = Vec::new();
        for i in 1..=20 {
            let (_, end) = store.append_batch_nowait(&[message(i)]).unwrap();
            positions.push(end);
            let (tx, w) = (tx.clone(), waiter.clone());
            waiter.notify_when_durable(end, move |result| {
                let _ = tx.send((end, w.durable_position(), result));
            });
        }
        drop(tx);
        assert!(
            matches!(rx.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty)),
            "appended after the first fsync, so queued, not answered inline"
        );
        let shared = waiter.shared.clone();
        let releaser = std::thread::spawn(move || {
            let q = lock(&shared.group);
            let q = shared
                .group_cv
                .wait_while(q, |q| !q.stopping)
                .unwrap_or_else(|e| e.into_inner());
            assert_eq!(q.requests.len(), 20, "still queued when shutdown began");
            drop(q);
            let _ = gate_tx.send(());
        });
        if close {
            store.close().unwrap();
        } else {
            drop(store);
        }
        releaser.join().unwrap();
        let answers: Vec<_> = rx.try_iter().collect();
        assert_eq!(answers.len(), 20, "closing answered every queued request");
        for (end, durable, result) in answers {
            assert!(result.is_ok(), "{result:?}");
            assert!(durable >= end, "{end} answered with only {durable} durable");
        }
        assert_eq!(
            waiter.fsync_count(),
            fsyncs + 1,
            "one fsync served the drain"
        );
        assert!(matches!(
            rx.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Disconnected)
        ));
        // After close, a request is answered on the caller's thread before the call returns.
        let (late_tx, late_rx) = std::sync::mpsc::channel();
        waiter.notify_when_durable(*positions.last().unwrap(), move |result| {
            let _ = late_tx.send(result.is_ok());
        });
        assert_eq!(late_rx.try_recv(), Ok(true));
    }

    #[test]
    fn close_answers_queued_requests_durable() {
        shutdown_answers_queued_requests(true);
    }

    #[test]
    fn drop_answers_queued_requests_durable() {
        shutdown_answers_queued_requests(false);
    }

    #[test]
    fn duplicated_errors_keep_kind_and_message() {
        let e = StoreError::Io {
            path: PathBuf::from("/x/commitlog"),
            source: io::Error::new(io::ErrorKind::StorageFull, "no space"),
        };
        let d = e.duplicate();
        assert_eq!(d.to_string(), e.to_string());
        match d {
            StoreError::Io { source, .. } => assert_eq!(source.kind(), io::ErrorKind::StorageFull),
            other => panic!("{other:?}"),
        }
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
