//! Per (topic, queue id) consume-queue index files.
//!
//! A queue is a directory `<topic>/<queue id>/` of files named by the 20-digit logical offset of
//! their first entry; each is a dense array of fixed-size entries, one per logical offset, each
//! pointing at a commit-log record. The files are contiguous (a file starts where the previous
//! one's entries end) and a new one is started once the last holds `file_entries` entries, so
//! retention can delete the oldest files whole; the last file is never deleted, so the queue's
//! next offset survives even when every entry is gone. Entries below [`ConsumeQueue::min_offset`]
//! point at deleted commit-log segments and are never served. Only the store's single writer appends; readers learn how many entries are
//! complete from an in-memory counter the writer publishes after its write, so they never see a
//! half-written entry.
//!
//! The newest entries wait in an in-memory tail and reach the file [`TAIL_ENTRIES`] at a time or
//! at the next [`sync`](ConsumeQueue::sync): one small `pwrite` per queue per send request was
//! about 7% of the broker's CPU under a produce benchmark. Readers see the tail as if it were in
//! the file. A crash loses only tail entries newer than the last checkpoint, and recovery
//! rebuilds those from the commit log as it rebuilds any lost index entry.
//!
//! # Files
//! - this file: the entry format, [`ConsumeQueue`] and its writer's side (the tail, rolling
//!   files, truncation, retention, sync);
//! - `read`: reading entries by logical offset and searching them by store timestamp;
//! - `on_disk`: what a queue's directory holds at open: listing and repairing its files, and
//!   moving a legacy single-file queue into its directory.

mod on_disk;
mod read;

pub(crate) use on_disk::queue_on_disk;

use crate::disk::{Disk, OpenMode};
use crate::file_cache::{CachedFile, FileCache};
use on_disk::{existing_files, legacy_file_aside, migrate_legacy_file};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// Entry layout: commit-log position (i64), record size (i32), tag hash (i64), store
/// timestamp (i64), big-endian.
pub const ENTRY_SIZE: usize = 28;

/// Entries buffered per queue before they are written: 7 KiB, so a thousand queues hold at most
/// 7 MiB of unwritten index.
pub const TAIL_ENTRIES: usize = 256;

/// Entries per consume-queue file (RocketMQ's 300,000): 8.4 MB files.
pub const DEFAULT_FILE_ENTRIES: u64 = 300_000;

pub fn queue_file_name(base: u64) -> String {
    format!("{base:020}")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqEntry {
    pub physical_offset: u64,
    pub size: u32,
    pub tag_hash: i64,
    pub store_timestamp: i64,
}

impl CqEntry {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.physical_offset as i64).to_be_bytes());
        out.extend_from_slice(&(self.size as i32).to_be_bytes());
        out.extend_from_slice(&self.tag_hash.to_be_bytes());
        out.extend_from_slice(&self.store_timestamp.to_be_bytes());
    }

    /// Decodes one entry; `None` for a value no writer produces (negative position, zero or
    /// negative size), which is how zero-filled or garbage tails are recognised.
    pub fn decode(b: &[u8; ENTRY_SIZE]) -> Option<CqEntry> {
        let mut p = [0u8; 8];
        p.copy_from_slice(&b[0..8]);
        let pos = i64::from_be_bytes(p);
        let mut s = [0u8; 4];
        s.copy_from_slice(&b[8..12]);
        let size = i32::from_be_bytes(s);
        p.copy_from_slice(&b[12..20]);
        let tag_hash = i64::from_be_bytes(p);
        p.copy_from_slice(&b[20..28]);
        let store_timestamp = i64::from_be_bytes(p);
        if pos < 0 || size <= 0 {
            return None;
        }
        Some(CqEntry {
            physical_offset: pos as u64,
            size: size as u32,
            tag_hash,
            store_timestamp,
        })
    }

    pub fn end(&self) -> u64 {
        self.physical_offset + u64::from(self.size)
    }
}

/// One file of a queue: entries from logical offset `base`. Its descriptor comes and goes
/// with the store's [`FileCache`].
#[derive(Debug, Clone)]
struct CqFile {
    base: u64,
    file: Arc<CachedFile>,
}

impl CqFile {
    fn path(&self) -> &Path {
        self.file.path()
    }
}

/// One queue's index files.
#[derive(Debug)]
pub struct ConsumeQueue {
    topic: Box<str>,
    queue_id: u32,
    files_cache: Arc<FileCache>,
    file_entries: u64,
    /// Never empty; contiguous; sorted by base.
    files: RwLock<Vec<CqFile>>,
    /// First logical offset readers may use (entries below point at deleted segments).
    min: AtomicU64,
    /// Number of complete entries readers may use.
    max: AtomicU64,
    /// Number of entries known to be fsynced.
    synced: AtomicU64,
    tail: Mutex<Tail>,
    /// Used (read or appended to) since the store last looked for idle queues.
    used: AtomicBool,
}

/// Entries `start..` not yet written to the files (which end exactly at `start`).
#[derive(Debug)]
struct Tail {
    start: u64,
    bytes: Vec<u8>,
}

impl Tail {
    fn end(&self) -> u64 {
        self.start + (self.bytes.len() / ENTRY_SIZE) as u64
    }
}

fn entries_bytes(n: u64) -> u64 {
    n * ENTRY_SIZE as u64
}

/// What [`ConsumeQueue::open`] repaired, for the caller to log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueRepairs {
    /// Bytes of a partial trailing entry cut off.
    pub cut_bytes: u64,
    /// Files after a gap in the file sequence, deleted.
    pub dropped_files: usize,
    /// The queue was new: its directory and first file were created, not yet fsynced into
    /// their parents (the caller makes them durable before anything counts on them).
    pub created: bool,
    /// The directory existed but held no file: an empty first file was made, and whatever
    /// entries the queue had are gone.
    pub refilled: bool,
}

impl ConsumeQueue {
    /// Opens or creates the queue directory `dir`, cutting a partial trailing entry (a torn
    /// index write) and files past a gap. A legacy single file at `dir` (the layout before
    /// queues were split into files) becomes the directory's first file. Holds no descriptor
    /// afterwards: the files are opened through `files_cache` when used.
    pub fn open(
        files_cache: &Arc<FileCache>,
        topic: &str,
        queue_id: u32,
        dir: &Path,
        file_entries: u64,
    ) -> io::Result<(ConsumeQueue, QueueRepairs)> {
        let disk = files_cache.disk();
        if disk.kind(dir)?.is_none() && !legacy_file_aside(disk, dir)? {
            return Self::create(files_cache, topic, queue_id, dir, file_entries);
        }
        let mut repairs = QueueRepairs::default();
        migrate_legacy_file(disk, dir)?;
        let (files, min, count) = existing_files(files_cache, dir, &mut repairs)?;
        Ok((
            Self::with_files(
                files_cache,
                topic,
                queue_id,
                file_entries,
                files,
                min,
                count,
            ),
            repairs,
        ))
    }

    /// Creates the queue directory `dir` and its first file, for a queue known to have nothing
    /// on disk (its topic's directory was just made): a new lite topic pays no look for what
    /// cannot be there.
    pub fn create(
        files_cache: &Arc<FileCache>,
        topic: &str,
        queue_id: u32,
        dir: &Path,
        file_entries: u64,
    ) -> io::Result<(ConsumeQueue, QueueRepairs)> {
        files_cache.disk().create_dir_all(dir)?;
        let file = files_cache.open(dir.join(queue_file_name(0)), OpenMode::Create)?;
        let files = vec![CqFile { base: 0, file }];
        let repairs = QueueRepairs {
            created: true,
            ..QueueRepairs::default()
        };
        Ok((
            Self::with_files(files_cache, topic, queue_id, file_entries, files, 0, 0),
            repairs,
        ))
    }

    fn with_files(
        files_cache: &Arc<FileCache>,
        topic: &str,
        queue_id: u32,
        file_entries: u64,
        files: Vec<CqFile>,
        min: u64,
        count: u64,
    ) -> ConsumeQueue {
        ConsumeQueue {
            topic: topic.into(),
            queue_id,
            files_cache: files_cache.clone(),
            file_entries: file_entries.max(1),
            files: RwLock::new(files),
            min: AtomicU64::new(min),
            max: AtomicU64::new(count),
            // What is on disk at open either was fsynced before the store's checkpoint or
            // is cut or re-indexed by recovery, which publishes (and so marks) what it adds.
            synced: AtomicU64::new(count),
            tail: Mutex::new(Tail {
                start: count,
                bytes: Vec::new(),
            }),
            used: AtomicBool::new(true),
        }
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Marks the queue used: it stays in memory past the next look for idle queues.
    pub fn mark_used(&self) {
        self.used.store(true, Ordering::Relaxed);
    }

    /// Whether the queue was used since the last call (which clears the mark).
    pub fn take_used(&self) -> bool {
        self.used.swap(false, Ordering::Relaxed)
    }

    pub fn queue_id(&self) -> u32 {
        self.queue_id
    }

    /// The queue's directory (errors name it). Not kept apart: it is the parent of every file's
    /// path, and with hundreds of thousands of queues each path held once counts.
    pub fn path(&self) -> PathBuf {
        dir_of(&self.files.read().unwrap_or_else(|e| e.into_inner()))
    }

    fn disk(&self) -> &Disk {
        self.files_cache.disk()
    }

    /// Logical offset of the next entry to be written.
    pub fn max_offset(&self) -> u64 {
        self.max.load(Ordering::Acquire)
    }

    /// First logical offset that is served; entries below it point at deleted segments.
    pub fn min_offset(&self) -> u64 {
        self.min.load(Ordering::Acquire).min(self.max_offset())
    }

    /// Logical offset of the first entry still on disk.
    pub fn first_file_base(&self) -> u64 {
        self.files_snapshot().first().map_or(0, |f| f.base)
    }

    fn files_snapshot(&self) -> Vec<CqFile> {
        self.files.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn tail(&self) -> MutexGuard<'_, Tail> {
        self.tail.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The file holding logical offset `offset` and the offset its entries end at (exclusive;
    /// for the last file, where it stops taking entries).
    fn file_at(&self, offset: u64) -> io::Result<(CqFile, Option<u64>)> {
        let files = self.files.read().unwrap_or_else(|e| e.into_inner());
        let idx = files.partition_point(|f| f.base <= offset);
        if idx == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("consume-queue offset {offset} lies below the first file"),
            ));
        }
        Ok((files[idx - 1].clone(), files.get(idx).map(|f| f.base)))
    }

    /// Writes whole entries at logical offset `start`, across files, starting new files as
    /// the last one fills up.
    fn write_files(&self, start: u64, bytes: &[u8]) -> io::Result<()> {
        let mut offset = start;
        let mut rest = bytes;
        while !rest.is_empty() {
            let (file, next) = self.file_at(offset)?;
            let limit = match next {
                Some(next) => next,
                None => {
                    let end = file.base + file.file.handle()?.len()? / ENTRY_SIZE as u64;
                    (file.base + self.file_entries).max(end)
                }
            };
            if offset >= limit {
                self.roll(offset)?;
                continue;
            }
            let n = ((rest.len() / ENTRY_SIZE) as u64).min(limit - offset);
            let (now, later) = rest.split_at(n as usize * ENTRY_SIZE);
            file.file
                .handle()?
                .write_all_at(now, entries_bytes(offset - file.base))?;
            offset += n;
            rest = later;
        }
        Ok(())
    }

    /// Starts a new file at logical offset `base` (the end of the last one).
    fn roll(&self, base: u64) -> io::Result<()> {
        let dir = self.path();
        let path = dir.join(queue_file_name(base));
        let file = self.files_cache.open(path.clone(), OpenMode::CreateNew)?;
        if let Err(e) = self.disk().sync_dir(&dir) {
            let _ = self.disk().remove_file(&path);
            return Err(store_to_io(e));
        }
        self.files
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(CqFile { base, file });
        Ok(())
    }

    /// Writes `bytes` (whole encoded entries) at logical offset `start`, into the in-memory tail
    /// while it has room. Readers do not see them until [`publish`](Self::publish). Writer only.
    pub fn write_entries(&self, start: u64, bytes: &[u8]) -> io::Result<()> {
        debug_assert_eq!(bytes.len() % ENTRY_SIZE, 0);
        let mut tail = self.tail();
        if start != tail.end() {
            // Not an append (recovery rewriting entries): write through, the tail after it.
            self.write_tail(&mut tail)?;
            self.write_files(start, bytes)?;
            tail.start = tail.start.max(start + (bytes.len() / ENTRY_SIZE) as u64);
            return Ok(());
        }
        if tail.bytes.is_empty() && bytes.len() >= TAIL_ENTRIES * ENTRY_SIZE {
            self.write_files(start, bytes)?;
            tail.start = start + (bytes.len() / ENTRY_SIZE) as u64;
            return Ok(());
        }
        tail.bytes.extend_from_slice(bytes);
        if tail.bytes.len() >= TAIL_ENTRIES * ENTRY_SIZE {
            self.write_tail(&mut tail)?;
        }
        Ok(())
    }

    /// Writes the buffered entries to the files. On error they stay buffered.
    fn write_tail(&self, tail: &mut Tail) -> io::Result<()> {
        if tail.bytes.is_empty() {
            return Ok(());
        }
        self.write_files(tail.start, &tail.bytes)?;
        tail.start = tail.end();
        tail.bytes.clear();
        Ok(())
    }

    /// Makes entries below `max` visible to readers. Writer only.
    pub fn publish(&self, max: u64) {
        self.max.store(max, Ordering::Release);
    }

    /// Drops every entry at or after `count` (never below the first file's base, where the
    /// queue is then empty). Writer only (recovery, and undoing a failed append).
    pub fn truncate(&self, count: u64) -> io::Result<()> {
        let mut tail = self.tail();
        let count = count.max(self.first_file_base());
        if count <= tail.start {
            let mut files = self.files.write().unwrap_or_else(|e| e.into_inner());
            let mut removed = false;
            while files.len() > 1 && files.last().is_some_and(|f| f.base >= count) {
                if let Some(f) = files.pop() {
                    self.disk().remove_file(f.path())?;
                    removed = true;
                }
            }
            if let Some(last) = files.last() {
                let len = entries_bytes(count - last.base);
                // Most truncations (recovery's) cut nothing: a length read needs no descriptor.
                if self.disk().file_len(last.path())? != len {
                    last.file.handle()?.set_len(len)?;
                }
            }
            drop(files);
            if removed {
                self.disk().sync_dir(&self.path()).map_err(store_to_io)?;
            }
            tail.start = count;
            tail.bytes.clear();
        } else {
            let keep = ((count - tail.start) as usize * ENTRY_SIZE).min(tail.bytes.len());
            tail.bytes.truncate(keep);
        }
        drop(tail);
        self.max.store(count, Ordering::Release);
        if self.min.load(Ordering::Acquire) > count {
            self.min.store(count, Ordering::Release);
        }
        if self.synced.load(Ordering::Acquire) > count {
            self.synced.store(count, Ordering::Release);
        }
        Ok(())
    }

    /// Empties the queue and restarts it at logical offset `base`: recovery found its first
    /// record in the commit log at `base`, every earlier one lying in deleted segments. The new
    /// file is made durable before the old ones are removed, so a crash in between leaves
    /// either the old files or a run [`open`](Self::open) repairs. Writer only.
    pub fn restart_at(&self, base: u64) -> io::Result<()> {
        let mut tail = self.tail();
        let mut files = self.files.write().unwrap_or_else(|e| e.into_inner());
        let dir = dir_of(&files);
        let path = dir.join(queue_file_name(base));
        let old: Vec<CqFile> = std::mem::take(&mut *files);
        for f in old.iter().filter(|f| f.base >= base) {
            self.disk().remove_file(f.path())?;
        }
        let file = self.files_cache.open(path, OpenMode::Create)?;
        let handle = file.handle()?;
        handle.set_len(0)?;
        handle.sync_all()?;
        drop(handle);
        self.disk().sync_dir(&dir).map_err(store_to_io)?;
        for f in old.iter().filter(|f| f.base < base) {
            self.disk().remove_file(f.path())?;
        }
        self.disk().sync_dir(&dir).map_err(store_to_io)?;
        files.push(CqFile { base, file });
        drop(files);
        tail.start = base;
        tail.bytes.clear();
        drop(tail);
        self.max.store(base, Ordering::Release);
        self.min.store(base, Ordering::Release);
        self.synced.store(base, Ordering::Release);
        Ok(())
    }

    /// Moves the min offset to the first entry pointing at or past `physical_offset` (the new
    /// start of the commit log), the max offset when none does; answers it. Entries are in log
    /// order, so this is a binary search.
    pub fn advance_min_to_physical(&self, physical_offset: u64) -> io::Result<u64> {
        let max = self.max_offset();
        let (mut lo, mut hi) = (self.min.load(Ordering::Acquire).min(max), max);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let below = self
                .entry_raw(mid)?
                .is_some_and(|e| e.physical_offset < physical_offset);
            if below {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        self.min.fetch_max(lo, Ordering::AcqRel);
        Ok(self.min_offset())
    }

    /// Deletes the files all of whose entries lie below the min offset, except the last file;
    /// answers how many files and bytes went. The directory is fsynced once after. Writer only.
    pub fn delete_files_below_min(&self) -> io::Result<(usize, u64)> {
        let min = self.min.load(Ordering::Acquire);
        let doomed: Vec<CqFile> = {
            let files = self.files.read().unwrap_or_else(|e| e.into_inner());
            files
                .windows(2)
                .take_while(|w| w[1].base <= min)
                .map(|w| w[0].clone())
                .collect()
        };
        let mut bytes = 0;
        for f in &doomed {
            bytes += self.disk().file_len(f.path())?;
            self.disk().remove_file(f.path())?;
            self.files
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|g| g.base != f.base);
        }
        if !doomed.is_empty() {
            self.disk().sync_dir(&self.path()).map_err(store_to_io)?;
        }
        Ok((doomed.len(), bytes))
    }

    /// Whether entries were published since the last [`sync`](Self::sync).
    pub fn needs_sync(&self) -> bool {
        self.synced.load(Ordering::Acquire) < self.max_offset()
    }

    /// Writes the buffered tail to the files without an fsync, letting its buffer go: the
    /// entries reach the page cache and stay [`needs_sync`](Self::needs_sync) until a
    /// [`sync`](Self::sync).
    pub fn write_buffered(&self) -> io::Result<()> {
        let mut tail = self.tail();
        self.write_tail(&mut tail)?;
        // A checkpoint meets every queue written since the last one, most of them a few entries
        // a second: the buffer goes with its entries instead of staying at its largest, which
        // with tens of thousands of queues was several MiB. A busy queue fills it again at the
        // cost of a few reallocations per checkpoint.
        tail.bytes = Vec::new();
        Ok(())
    }

    /// Writes the buffered tail and fsyncs every file holding entries published since the
    /// last sync; returns whether it did.
    pub fn sync(&self) -> io::Result<bool> {
        let max = self.max_offset();
        let synced = self.synced.load(Ordering::Acquire);
        if synced >= max {
            return Ok(false);
        }
        self.write_buffered()?;
        let files = self.files_snapshot();
        for (i, f) in files.iter().enumerate() {
            let end = files.get(i + 1).map_or(u64::MAX, |n| n.base);
            if end > synced {
                f.file.handle()?.sync_data()?;
            }
        }
        self.synced.fetch_max(max, Ordering::AcqRel);
        Ok(true)
    }
}

/// The directory fsync helper answers a `StoreError`; inside this io-level module its cause is
/// what matters.
fn store_to_io(e: crate::error::StoreError) -> io::Error {
    match e {
        crate::error::StoreError::Io { source, .. } => {
            io::Error::new(source.kind(), source.to_string())
        }
        other => io::Error::other(other.to_string()),
    }
}

/// The directory holding `files` (a queue's files are never none).
fn dir_of(files: &[CqFile]) -> PathBuf {
    files
        .first()
        .and_then(|f| f.path().parent())
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u64) -> CqEntry {
        CqEntry {
            physical_offset: i * 100,
            size: 100,
            tag_hash: i as i64,
            store_timestamp: 1_000 + i as i64,
        }
    }

    /// Appends entries `from..to` the way the store's writer does: write, then publish.
    fn append(q: &ConsumeQueue, from: u64, to: u64) -> io::Result<()> {
        let mut bytes = Vec::new();
        for i in from..to {
            entry(i).encode_into(&mut bytes);
        }
        q.write_entries(from, &bytes)?;
        q.publish(to);
        Ok(())
    }

    fn file_entries(q: &ConsumeQueue) -> io::Result<u64> {
        let mut total = 0;
        for f in q.files_snapshot() {
            total += f.file.handle()?.len()? / ENTRY_SIZE as u64;
        }
        Ok(total)
    }

    fn open(path: &Path, file_entries: u64) -> io::Result<(ConsumeQueue, u64)> {
        let (q, repairs) =
            ConsumeQueue::open(&FileCache::new(Disk::Os, 8), "t", 0, path, file_entries)?;
        Ok((q, repairs.cut_bytes))
    }

    #[test]
    fn buffered_entries_read_like_written_ones_and_reach_the_file_on_sync() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("q");
        let (q, _) = open(&path, DEFAULT_FILE_ENTRIES)?;
        let total = TAIL_ENTRIES as u64 + 40;
        let mut written = 0;
        while written < total {
            let next = (written + 25).min(total);
            append(&q, written, next)?;
            written = next;
        }
        // The tail went out once it held TAIL_ENTRIES or more; the rest waits in memory.
        assert_eq!(file_entries(&q)?, (TAIL_ENTRIES as u64).div_ceil(25) * 25);
        assert!(file_entries(&q)? < total);
        let mut buf = Vec::new();
        let read = q.read_entries(TAIL_ENTRIES as u64 - 5, 100, &mut buf)?;
        let expected: Vec<Option<CqEntry>> = (TAIL_ENTRIES as u64 - 5..total)
            .map(|i| Some(entry(i)))
            .collect();
        assert_eq!(read, expected);
        assert_eq!(q.entry(total - 1)?, Some(entry(total - 1)));
        assert_eq!(q.entry_raw(total)?, None);
        assert_eq!(
            q.search_by_timestamp(1_000 + total as i64 - 3, false)?,
            total - 3
        );

        assert!(q.sync()?);
        assert_eq!(file_entries(&q)?, total);
        assert_eq!(
            q.tail().bytes.capacity(),
            0,
            "the synced tail keeps no buffer"
        );
        append(&q, total, total + 1)?;
        assert_eq!(q.entry(total)?, Some(entry(total)));
        assert!(q.sync()?);
        let total = total + 1;
        drop(q);
        let (reopened, cut) = open(&path, DEFAULT_FILE_ENTRIES)?;
        assert_eq!(cut, 0);
        assert_eq!(reopened.max_offset(), total);
        assert_eq!(reopened.entry(total - 1)?, Some(entry(total - 1)));
        Ok(())
    }

    #[test]
    fn truncate_cuts_the_tail_or_the_file() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let (q, _) = open(&dir.path().join("q"), DEFAULT_FILE_ENTRIES)?;
        append(&q, 0, TAIL_ENTRIES as u64)?;
        append(&q, TAIL_ENTRIES as u64, TAIL_ENTRIES as u64 + 10)?;
        let flushed = file_entries(&q)?;
        assert_eq!(flushed, TAIL_ENTRIES as u64);

        q.truncate(flushed + 4)?;
        assert_eq!(q.max_offset(), flushed + 4);
        assert_eq!(q.entry_raw(flushed + 3)?, Some(entry(flushed + 3)));
        assert_eq!(q.entry_raw(flushed + 4)?, None);
        append(&q, flushed + 4, flushed + 6)?;
        assert_eq!(q.entry(flushed + 5)?, Some(entry(flushed + 5)));

        q.truncate(7)?;
        assert_eq!(file_entries(&q)?, 7);
        assert_eq!(q.entry_raw(7)?, None);
        append(&q, 7, 9)?;
        let mut buf = Vec::new();
        let read = q.read_entries(5, 10, &mut buf)?;
        assert_eq!(read, (5..9).map(|i| Some(entry(i))).collect::<Vec<_>>());
        Ok(())
    }
}

#[cfg(test)]
mod file_tests {
    use super::*;
    use crate::disk::sim::SimDisk;

    fn entry(i: u64) -> CqEntry {
        CqEntry {
            physical_offset: i * 100,
            size: 100,
            tag_hash: 0,
            store_timestamp: i as i64,
        }
    }

    #[test]
    fn entries_span_files_and_old_files_go_once_below_the_min() -> io::Result<()> {
        let disk = Disk::Simulated(SimDisk::new());
        let dir = Path::new("/cq/t/0");
        let (q, _) = ConsumeQueue::open(&FileCache::new(disk.clone(), 8), "t", 0, dir, 10)?;
        let mut bytes = Vec::new();
        for i in 0..35 {
            entry(i).encode_into(&mut bytes);
        }
        q.write_entries(0, &bytes)?;
        q.publish(35);
        q.sync()?;
        assert_eq!(disk.read_dir(dir)?.len(), 4, "files of 10 entries each");
        let mut buf = Vec::new();
        let read = q.read_entries(8, 5, &mut buf)?;
        assert_eq!(read, (8..13).map(|i| Some(entry(i))).collect::<Vec<_>>());

        // The log now starts at physical 2_150: entries 0..=21 point below it.
        assert_eq!(q.advance_min_to_physical(2_150)?, 22);
        assert_eq!(q.entry(21)?, None);
        assert_eq!(q.entry(22)?, Some(entry(22)));
        assert_eq!(q.delete_files_below_min()?, (2, 20 * ENTRY_SIZE as u64));
        assert_eq!(q.first_file_base(), 20);
        drop(q);
        let (q, _) = ConsumeQueue::open(&FileCache::new(disk.clone(), 8), "t", 0, dir, 10)?;
        assert_eq!((q.first_file_base(), q.max_offset()), (20, 35));
        // Every entry gone: the last file stays, so the next offset survives.
        assert_eq!(q.advance_min_to_physical(u64::MAX)?, 35);
        q.delete_files_below_min()?;
        assert_eq!(q.first_file_base(), 30);
        assert_eq!(q.min_offset(), 35);
        Ok(())
    }
}
