//! Per (topic, queue id) consume-queue index files.
//!
//! A file is a dense array of fixed-size entries, one per logical offset, each pointing at a
//! commit-log record. Only the store's single writer appends; readers learn how many entries are
//! complete from an in-memory counter the writer publishes after its write, so they never see a
//! half-written entry.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Entry layout: commit-log position (i64), record size (i32), tag hash (i64), store
/// timestamp (i64), big-endian.
pub const ENTRY_SIZE: usize = 28;

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

/// One queue's index file.
#[derive(Debug)]
pub struct ConsumeQueue {
    topic: String,
    queue_id: u32,
    path: PathBuf,
    file: File,
    /// Number of complete entries readers may use.
    max: AtomicU64,
    /// Number of entries known to be fsynced.
    synced: AtomicU64,
}

impl ConsumeQueue {
    /// Opens or creates the file, cutting a partial trailing entry (a torn index write).
    /// Returns the queue and how many bytes were cut.
    pub fn open(topic: &str, queue_id: u32, path: &Path) -> io::Result<(ConsumeQueue, u64)> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let len = file.metadata()?.len();
        let whole = len - len % ENTRY_SIZE as u64;
        if whole != len {
            file.set_len(whole)?;
        }
        let count = whole / ENTRY_SIZE as u64;
        Ok((
            ConsumeQueue {
                topic: topic.to_string(),
                queue_id,
                path: path.to_path_buf(),
                file,
                max: AtomicU64::new(count),
                synced: AtomicU64::new(0),
            },
            len - whole,
        ))
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn queue_id(&self) -> u32 {
        self.queue_id
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Logical offset of the next entry to be written.
    pub fn max_offset(&self) -> u64 {
        self.max.load(Ordering::Acquire)
    }

    /// Writes `bytes` (whole encoded entries) at logical offset `start`. Readers do not see them
    /// until [`publish`](Self::publish). Writer only.
    pub fn write_entries(&self, start: u64, bytes: &[u8]) -> io::Result<()> {
        debug_assert_eq!(bytes.len() % ENTRY_SIZE, 0);
        self.file.write_all_at(bytes, start * ENTRY_SIZE as u64)
    }

    /// Makes entries below `max` visible to readers. Writer only.
    pub fn publish(&self, max: u64) {
        self.max.store(max, Ordering::Release);
    }

    /// Drops every entry at or after `count`. Writer only (recovery).
    pub fn truncate(&self, count: u64) -> io::Result<()> {
        self.file.set_len(count * ENTRY_SIZE as u64)?;
        self.max.store(count, Ordering::Release);
        if self.synced.load(Ordering::Acquire) > count {
            self.synced.store(count, Ordering::Release);
        }
        Ok(())
    }

    /// fsyncs the file if entries were published since the last sync; returns whether it did.
    pub fn sync(&self) -> io::Result<bool> {
        let max = self.max_offset();
        if self.synced.load(Ordering::Acquire) >= max {
            return Ok(false);
        }
        self.file.sync_data()?;
        self.synced.fetch_max(max, Ordering::AcqRel);
        Ok(true)
    }

    /// Reads up to `n` entries from logical offset `from` (bounded by the published max) with
    /// one pread into `buf`; `Ok(None)` entries mark values no writer produces.
    pub fn read_entries(
        &self,
        from: u64,
        n: u64,
        buf: &mut Vec<u8>,
    ) -> io::Result<Vec<Option<CqEntry>>> {
        let max = self.max_offset();
        if from >= max || n == 0 {
            return Ok(Vec::new());
        }
        let n = n.min(max - from) as usize;
        buf.clear();
        buf.resize(n * ENTRY_SIZE, 0);
        self.file.read_exact_at(buf, from * ENTRY_SIZE as u64)?;
        Ok(buf
            .chunks_exact(ENTRY_SIZE)
            .map(|c| {
                let mut a = [0u8; ENTRY_SIZE];
                a.copy_from_slice(c);
                CqEntry::decode(&a)
            })
            .collect())
    }

    /// The entry at `offset`, reading past the published max (recovery inspects unpublished
    /// tails too). `Ok(None)` when absent or invalid.
    pub fn entry_raw(&self, offset: u64) -> io::Result<Option<CqEntry>> {
        let mut a = [0u8; ENTRY_SIZE];
        match self.file.read_exact_at(&mut a, offset * ENTRY_SIZE as u64) {
            Ok(()) => Ok(CqEntry::decode(&a)),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The published entry at `offset`.
    pub fn entry(&self, offset: u64) -> io::Result<Option<CqEntry>> {
        if offset >= self.max_offset() {
            return Ok(None);
        }
        self.entry_raw(offset)
    }

    /// Binary search over store timestamps (non-decreasing within a queue, the writer makes
    /// them so). Lower: first offset with timestamp >= `ts`; Upper: last offset with
    /// timestamp <= `ts`. Returns the max offset when every entry is older and 0 when every
    /// entry is newer (or the queue is empty).
    pub fn search_by_timestamp(&self, ts: i64, upper: bool) -> io::Result<u64> {
        let max = self.max_offset();
        if max == 0 {
            return Ok(0);
        }
        let ts_at = |i: u64| -> io::Result<i64> {
            Ok(self
                .entry_raw(i)?
                .map(|e| e.store_timestamp)
                .unwrap_or(i64::MAX))
        };
        if ts_at(max - 1)? < ts {
            return Ok(max);
        }
        if ts_at(0)? > ts {
            return Ok(0);
        }
        // First index whose timestamp is >= ts (Lower) or > ts (Upper).
        let (mut lo, mut hi) = (0u64, max);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let t = ts_at(mid)?;
            let go_right = if upper { t <= ts } else { t < ts };
            if go_right {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(if upper { lo.saturating_sub(1) } else { lo })
    }
}
