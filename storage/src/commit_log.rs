//! Append-only commit-log segments.
//!
//! Segment files live in one directory, each named by the 20-digit zero-padded physical offset
//! of its first byte. A new segment starts exactly where the previous one's data ends, so
//! physical offsets are contiguous and a record never spans two files. Files grow by `pwrite`
//! and are read by `pread`: nothing is mapped, so a large backlog costs page cache, not RSS.
//!
//! The last segment may be *prepared* past its data: zeros written and made durable ahead of
//! the appender ([`CommitLog::prepare`], under sync flush), so that a group commit's fdatasync
//! writes the records' blocks only, not the file's new size and block map too. A record never
//! starts with eight zero bytes (its size is at least [`MIN_RECORD_SIZE`]), so the scan tells a
//! prepared, never-written tail ([`ScanStep::Unwritten`]) from a torn record. Every other
//! segment ends where its data ends: a roll cuts the prepared rest off the full segment.

use crate::disk::{Disk, DiskFile, OpenMode};
use crate::error::{io_err, StoreError};
use crate::message::{parse_record, RecordLayout, MAGIC_V1, MAGIC_V2, PHYSICAL_OFFSET_POSITION};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

use crate::stats::{LatencyCounter, LatencySnapshot};

/// Smallest possible record: IPv4 hosts, empty body, topic and properties.
pub const MIN_RECORD_SIZE: u64 = 91;

/// Scan read size during recovery.
const SCAN_CHUNK: usize = 4 << 20;

/// What preparation writes. Never written to, so its pages stay the kernel's shared zero page
/// and cost no resident memory.
static ZEROS: [u8; 1 << 20] = [0; 1 << 20];

pub fn segment_file_name(base: u64) -> String {
    format!("{base:020}")
}

#[derive(Debug)]
pub struct Segment {
    base: u64,
    path: PathBuf,
    file: DiskFile,
}

impl Segment {
    pub fn base(&self) -> u64 {
        self.base
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn len(&self) -> Result<u64, StoreError> {
        self.file.len().map_err(|e| io_err(&self.path, e))
    }
}

/// The segment list plus the published end of written data.
#[derive(Debug)]
pub struct CommitLog {
    disk: Disk,
    dir: PathBuf,
    segments: RwLock<Vec<Arc<Segment>>>,
    /// End of the bytes readers may rely on; the writer publishes it after each batch's write.
    written: AtomicU64,
    /// How long each durability fsync ([`Self::sync_range`]) took, for the metrics.
    fsync_latency: LatencyCounter,
    /// The end of what was written to the last segment, records or prepared zeros: past it
    /// the file holds nothing. Held while zeros are written, so they never land on records.
    frontier: Mutex<u64>,
    /// `frontier` as last published, read without the lock: a write ending at or below it lies
    /// in prepared space the preparer is done with.
    prepared_end: AtomicU64,
}

/// One step of a recovery scan.
pub enum ScanStep<'a> {
    Record {
        position: u64,
        layout: RecordLayout,
        bytes: &'a [u8],
    },
    /// The bytes at `position` are not a valid record (torn tail or corruption).
    Invalid {
        position: u64,
        path: PathBuf,
        reason: String,
    },
    End {
        position: u64,
    },
    /// Eight zero bytes where a record would start in the last segment: its prepared space,
    /// never written. `data_follows` when non-zero bytes lie after it (a batch whose later
    /// blocks reached the disk before its first, never fsynced): the log ends here either way.
    Unwritten {
        position: u64,
        data_follows: bool,
    },
}

impl CommitLog {
    /// Lists the segment files in `dir` (creating it if needed). The written end starts at the
    /// end of the last file; recovery corrects it.
    pub fn open(disk: &Disk, dir: &Path) -> Result<CommitLog, StoreError> {
        disk.create_dir_all(dir).map_err(|e| io_err(dir, e))?;
        let mut segments = Vec::new();
        for entry in disk.read_dir(dir).map_err(|e| io_err(dir, e))? {
            let Some(base) = entry
                .name
                .as_deref()
                .filter(|n| n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|_| !entry.is_dir)
            else {
                tracing::warn!(dir = %dir.display(), name = ?entry.name, "ignoring unexpected file in commit-log directory");
                continue;
            };
            let path = dir.join(segment_file_name(base));
            let file = disk
                .open(&path, OpenMode::Existing)
                .map_err(|e| io_err(&path, e))?;
            segments.push(Arc::new(Segment { base, path, file }));
        }
        segments.sort_by_key(|s| s.base);
        let end = match segments.last() {
            Some(s) => s.base + s.len()?,
            None => 0,
        };
        Ok(CommitLog {
            disk: disk.clone(),
            dir: dir.to_path_buf(),
            segments: RwLock::new(segments),
            written: AtomicU64::new(end),
            fsync_latency: LatencyCounter::default(),
            frontier: Mutex::new(end),
            prepared_end: AtomicU64::new(end),
        })
    }

    fn frontier(&self) -> MutexGuard<'_, u64> {
        self.frontier.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves the frontier to `end` (a roll, a cut, or a write or zeros past it).
    fn set_frontier(&self, frontier: &mut u64, end: u64) {
        *frontier = end;
        self.prepared_end.store(end, Ordering::Release);
    }

    /// How far the last segment is written or prepared.
    pub fn prepared_end(&self) -> u64 {
        self.prepared_end.load(Ordering::Acquire)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn snapshot(&self) -> Vec<Arc<Segment>> {
        self.segments
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn last_segment(&self) -> Option<Arc<Segment>> {
        self.segments
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .cloned()
    }

    pub fn first_base(&self) -> u64 {
        self.segments
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .first()
            .map_or(0, |s| s.base)
    }

    /// End of the last file's bytes, whatever they hold.
    pub fn files_end(&self) -> Result<u64, StoreError> {
        match self.last_segment() {
            Some(s) => Ok(s.base + s.len()?),
            None => Ok(0),
        }
    }

    pub fn written_end(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    pub fn publish_written(&self, end: u64) {
        self.written.store(end, Ordering::Release);
    }

    /// Drops this log's hold on every segment file (see `Shared::release_files`).
    pub fn release_files(&self) {
        self.segments
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The segment holding `position` and the base of the segment after it, if any.
    fn locate(&self, position: u64) -> Option<(Arc<Segment>, Option<u64>)> {
        let segs = self.segments.read().unwrap_or_else(|e| e.into_inner());
        let idx = segs.partition_point(|s| s.base <= position);
        if idx == 0 {
            return None;
        }
        Some((segs[idx - 1].clone(), segs.get(idx).map(|s| s.base)))
    }

    pub fn segment_for(&self, position: u64) -> Option<Arc<Segment>> {
        self.locate(position).map(|(s, _)| s)
    }

    /// Path of the file holding `position` (for error messages), or the directory.
    pub fn path_for(&self, position: u64) -> PathBuf {
        self.segment_for(position)
            .map_or_else(|| self.dir.clone(), |s| s.path.clone())
    }

    /// Whether `[start, end)` lies inside one segment.
    pub fn same_segment(&self, start: u64, end: u64) -> bool {
        match self.locate(start) {
            Some((_, Some(next))) => end <= next,
            Some((_, None)) => true,
            None => false,
        }
    }

    /// Reads `buf.len()` bytes at `position`; the range must lie in one segment.
    pub fn read_at(&self, position: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        let Some((seg, next)) = self.locate(position) else {
            return Err(io_err(
                &self.dir,
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no commit-log segment holds position {position}"),
                ),
            ));
        };
        let end = position + buf.len() as u64;
        if next.is_some_and(|n| end > n) {
            return Err(io_err(
                &seg.path,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("read {position}..{end} crosses a segment boundary"),
                ),
            ));
        }
        seg.file
            .read_exact_at(buf, position - seg.base)
            .map_err(|e| io_err(&seg.path, e))
    }

    /// Writes `bytes` at `position` of `seg`. Writer only.
    pub fn write_at(&self, seg: &Segment, position: u64, bytes: &[u8]) -> Result<(), StoreError> {
        let end = position + bytes.len() as u64;
        let write = || {
            seg.file
                .write_all_at(bytes, position - seg.base)
                .map_err(|e| io_err(&seg.path, e))
        };
        if end <= self.prepared_end() {
            return write();
        }
        // Past the prepared space: the preparer may be writing zeros there right now.
        let mut frontier = self.frontier();
        write()?;
        if end > *frontier {
            self.set_frontier(&mut frontier, end);
        }
        Ok(())
    }

    /// Writes zeros past the frontier of the last segment toward `target`, but not past
    /// `segment_size` from its base, `chunk` bytes at a time, each fsynced before the next:
    /// a group commit's fdatasync, which flushes every dirty page of the file, then finds at
    /// most one chunk of zeros to write besides its records. Answers whether anything was
    /// written.
    pub fn prepare(&self, target: u64, segment_size: u64, chunk: u64) -> Result<bool, StoreError> {
        let mut prepared = false;
        loop {
            let seg = {
                let mut frontier = self.frontier();
                let Some(seg) = self.last_segment() else {
                    break;
                };
                let start = (*frontier).max(seg.base);
                let end = target.min(seg.base + segment_size).min(start + chunk);
                if end <= start {
                    break;
                }
                let mut at = start;
                while at < end {
                    let n = ((end - at) as usize).min(ZEROS.len());
                    seg.file
                        .write_all_at(&ZEROS[..n], at - seg.base)
                        .map_err(|e| io_err(&seg.path, e))?;
                    at += n as u64;
                }
                self.set_frontier(&mut frontier, end);
                seg
            };
            // Outside the lock: the appender may write into these zeros meanwhile.
            seg.file.sync_data().map_err(|e| io_err(&seg.path, e))?;
            prepared = true;
        }
        Ok(prepared)
    }

    /// Creates the segment starting at `base` (the current end of data). Writer only.
    pub fn roll(&self, base: u64) -> Result<Arc<Segment>, StoreError> {
        let mut frontier = self.frontier();
        // The full segment is made durable before any byte of the next one is written: the
        // page cache writes files back independently, so after a power cut the new segment
        // could otherwise hold records while the old one lost its unsynced end, a gap
        // followed by valid records that recovery must treat as corruption. Its prepared rest
        // is cut off first: only the last segment may end in zeros.
        if let Some(full) = self.last_segment() {
            if full.base + full.len()? > base {
                full.file
                    .set_len(base - full.base)
                    .map_err(|e| io_err(&full.path, e))?;
            }
            full.file.sync_data().map_err(|e| io_err(&full.path, e))?;
        }
        let path = self.dir.join(segment_file_name(base));
        let file = self
            .disk
            .open(&path, OpenMode::CreateNew)
            .map_err(|e| io_err(&path, e))?;
        // The new name must survive a crash before any fsync of its data can mean anything.
        if let Err(e) = self.disk.sync_dir(&self.dir) {
            // Not listed yet: remove it, or the next roll to this base finds it in the way.
            if let Err(remove) = self.disk.remove_file(&path) {
                tracing::error!(file = %path.display(), error = &remove as &dyn std::error::Error, "could not remove a segment whose creation failed");
            }
            return Err(e);
        }
        let seg = Arc::new(Segment { base, path, file });
        self.segments
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(seg.clone());
        self.set_frontier(&mut frontier, base);
        tracing::debug!(base, "rolled commit-log segment");
        Ok(seg)
    }

    /// fsyncs every segment holding bytes in `[from, to)`.
    pub fn sync_range(&self, from: u64, to: u64) -> Result<(), StoreError> {
        if from >= to {
            return Ok(());
        }
        let started = Instant::now();
        let segs = self.snapshot();
        for (i, seg) in segs.iter().enumerate() {
            let seg_end = segs.get(i + 1).map_or(u64::MAX, |n| n.base);
            if seg.base < to && seg_end > from {
                seg.file.sync_data().map_err(|e| io_err(&seg.path, e))?;
            }
        }
        self.fsync_latency.observe(started.elapsed());
        Ok(())
    }

    /// How long durability fsyncs took so far.
    pub fn fsync_latency(&self) -> LatencySnapshot {
        self.fsync_latency.snapshot()
    }

    /// Cuts the log at `position`: later segments are deleted, the one holding it shortened to
    /// end there. Used by recovery and to undo an append that failed. Later segments go first,
    /// each removal made durable before the next step, so a power cut part way never leaves a
    /// shortened segment followed by one still holding records (which recovery would have to
    /// call corruption).
    pub fn truncate_at(&self, position: u64) -> Result<(), StoreError> {
        let mut frontier = self.frontier();
        let mut segs = self.segments.write().unwrap_or_else(|e| e.into_inner());
        while let Some(seg) = segs.last().filter(|s| s.base > position).cloned() {
            self.disk
                .remove_file(&seg.path)
                .map_err(|e| io_err(&seg.path, e))?;
            self.disk.sync_dir(&self.dir)?;
            segs.pop();
            tracing::warn!(file = %seg.path.display(), "deleted commit-log segment past the valid end");
        }
        if let Some(seg) = segs.last() {
            let len = seg.len()?;
            if seg.base + len > position {
                seg.file
                    .set_len(position - seg.base)
                    .map_err(|e| io_err(&seg.path, e))?;
                seg.file.sync_all().map_err(|e| io_err(&seg.path, e))?;
            }
        }
        drop(segs);
        self.set_frontier(&mut frontier, position);
        self.publish_written(position);
        Ok(())
    }

    /// All segments, oldest first.
    pub fn segments(&self) -> Vec<Arc<Segment>> {
        self.snapshot()
    }

    /// Deletes the oldest segment (never the only one), making the removal durable before it
    /// returns so that deletions stay a prefix whatever a power cut interrupts. Readers holding
    /// the segment keep reading it until they let go. Answers the segment and its length.
    pub fn delete_oldest(&self) -> Result<Option<(Arc<Segment>, u64)>, StoreError> {
        let mut segs = self.segments.write().unwrap_or_else(|e| e.into_inner());
        if segs.len() < 2 {
            return Ok(None);
        }
        let seg = segs[0].clone();
        let len = seg.len()?;
        self.disk
            .remove_file(&seg.path)
            .map_err(|e| io_err(&seg.path, e))?;
        segs.remove(0);
        drop(segs);
        self.disk.sync_dir(&self.dir)?;
        Ok(Some((seg, len)))
    }

    /// A forward scan over records from `start` (a record boundary).
    pub fn scan(&self, start: u64, max_record: u64) -> Result<Scanner<'_>, StoreError> {
        let segs = self.snapshot();
        let mut lens = Vec::with_capacity(segs.len());
        for s in &segs {
            lens.push(s.len()?);
        }
        let idx = segs.partition_point(|s| s.base <= start).saturating_sub(1);
        Ok(Scanner {
            log: self,
            segs,
            lens,
            idx,
            position: start,
            buf: Vec::new(),
            buf_start: 0,
            max_record,
        })
    }

    /// Looks for any valid record starting after `after`, anywhere to the end of the log; used
    /// to tell a torn tail (nothing valid follows) from corruption in the middle of the log.
    pub fn find_valid_record_after(
        &self,
        after: u64,
        max_record: u64,
    ) -> Result<Option<u64>, StoreError> {
        const WINDOW: usize = 1 << 20;
        const HEADER: usize = PHYSICAL_OFFSET_POSITION + 8;
        let mut buf = vec![0u8; WINDOW + HEADER];
        for seg in self.snapshot() {
            let len = seg.len()?;
            let end = seg.base + len;
            if end <= after + 1 {
                continue;
            }
            let mut from = seg.base.max(after + 1);
            while from < end {
                let n = ((end - from) as usize).min(WINDOW + HEADER);
                let chunk = &mut buf[..n];
                seg.file
                    .read_exact_at(chunk, from - seg.base)
                    .map_err(|e| io_err(&seg.path, e))?;
                let candidates = n.saturating_sub(HEADER - 1).min(WINDOW);
                for i in 0..candidates {
                    let pos = from + i as u64;
                    let magic = i32::from_be_bytes([
                        chunk[i + 4],
                        chunk[i + 5],
                        chunk[i + 6],
                        chunk[i + 7],
                    ]);
                    if magic != MAGIC_V1 && magic != MAGIC_V2 {
                        continue;
                    }
                    let mut phys = [0u8; 8];
                    phys.copy_from_slice(&chunk[i + 28..i + 36]);
                    if u64::from_be_bytes(phys) != pos {
                        continue;
                    }
                    let size =
                        i32::from_be_bytes([chunk[i], chunk[i + 1], chunk[i + 2], chunk[i + 3]]);
                    let Ok(size) = u64::try_from(size) else {
                        continue;
                    };
                    if !(MIN_RECORD_SIZE..=max_record).contains(&size) || pos + size > end {
                        continue;
                    }
                    let mut rec = vec![0u8; size as usize];
                    seg.file
                        .read_exact_at(&mut rec, pos - seg.base)
                        .map_err(|e| io_err(&seg.path, e))?;
                    if parse_record(&rec).is_ok() {
                        return Ok(Some(pos));
                    }
                }
                from += WINDOW as u64;
            }
        }
        Ok(None)
    }
}

/// Sequential record reader for recovery, reading the log in large chunks.
pub struct Scanner<'a> {
    log: &'a CommitLog,
    segs: Vec<Arc<Segment>>,
    lens: Vec<u64>,
    idx: usize,
    position: u64,
    buf: Vec<u8>,
    buf_start: u64,
    max_record: u64,
}

impl Scanner<'_> {
    pub fn position(&self) -> u64 {
        self.position
    }

    fn invalid(&self, reason: String) -> ScanStep<'static> {
        let path = self
            .segs
            .get(self.idx)
            .map_or_else(|| self.log.dir.clone(), |s| s.path.clone());
        ScanStep::Invalid {
            position: self.position,
            path,
            reason,
        }
    }

    /// Makes `[self.position, self.position + n)` of the current segment present in `buf`.
    fn fill(&mut self, n: u64, data_end: u64) -> Result<(), StoreError> {
        let have_end = self.buf_start + self.buf.len() as u64;
        if self.position >= self.buf_start && self.position + n <= have_end {
            return Ok(());
        }
        let seg = &self.segs[self.idx];
        let len = (data_end - self.position).min((SCAN_CHUNK as u64).max(n)) as usize;
        self.buf.resize(len, 0);
        seg.file
            .read_exact_at(&mut self.buf, self.position - seg.base)
            .map_err(|e| io_err(&seg.path, e))?;
        self.buf_start = self.position;
        Ok(())
    }

    /// Whether the current segment holds only zeros from the position to `data_end`.
    fn zeros_until(&self, data_end: u64) -> Result<bool, StoreError> {
        let seg = &self.segs[self.idx];
        let mut buf = vec![0u8; SCAN_CHUNK.min((data_end - self.position) as usize)];
        let mut from = self.position;
        while from < data_end {
            let chunk = &mut buf[..((data_end - from) as usize).min(SCAN_CHUNK)];
            seg.file
                .read_exact_at(chunk, from - seg.base)
                .map_err(|e| io_err(&seg.path, e))?;
            if chunk.iter().any(|&b| b != 0) {
                return Ok(false);
            }
            from += chunk.len() as u64;
        }
        Ok(true)
    }

    /// The next valid record, the first invalid position, or the end of the log. After a
    /// `Record` the scanner moves past it; after `Invalid` or `End` it stays put.
    pub fn next_step(&mut self) -> Result<ScanStep<'_>, StoreError> {
        loop {
            let Some(seg) = self.segs.get(self.idx) else {
                return Ok(ScanStep::End {
                    position: self.position,
                });
            };
            let data_end = seg.base + self.lens[self.idx];
            let next_base = self.segs.get(self.idx + 1).map(|s| s.base);
            if self.position < seg.base {
                return Ok(self.invalid(format!("position precedes segment base {}", seg.base)));
            }
            if self.position >= data_end {
                match next_base {
                    None => {
                        return Ok(ScanStep::End {
                            position: self.position,
                        })
                    }
                    Some(n) if n == self.position && data_end == self.position => {
                        self.idx += 1;
                        continue;
                    }
                    Some(n) => {
                        return Ok(self.invalid(format!(
                            "segment data ends at {data_end} but the next segment starts at {n}"
                        )))
                    }
                }
            }
            if next_base.is_some_and(|n| self.position >= n) {
                return Ok(self.invalid("bytes overlap the next segment".to_string()));
            }
            let bound = next_base.map_or(data_end, |n| n.min(data_end));
            if bound - self.position < 8 {
                return Ok(self.invalid("truncated record header".to_string()));
            }
            self.fill(8, data_end)?;
            let off = (self.position - self.buf_start) as usize;
            let head = &self.buf[off..off + 8];
            if head == [0u8; 8] && self.idx + 1 == self.segs.len() {
                let data_follows = !self.zeros_until(data_end)?;
                return Ok(ScanStep::Unwritten {
                    position: self.position,
                    data_follows,
                });
            }
            let size = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            let magic = i32::from_be_bytes([head[4], head[5], head[6], head[7]]);
            if magic != MAGIC_V1 && magic != MAGIC_V2 {
                return Ok(self.invalid(format!("bad magic code {:#010x}", magic as u32)));
            }
            let size = match u64::try_from(size) {
                Ok(s) if (MIN_RECORD_SIZE..=self.max_record).contains(&s) => s,
                _ => return Ok(self.invalid(format!("bad record size {size}"))),
            };
            if self.position + size > bound {
                return Ok(self.invalid(format!(
                    "record of {size} bytes runs past the segment's data end {bound}"
                )));
            }
            self.fill(size, data_end)?;
            let off = (self.position - self.buf_start) as usize;
            let layout = match parse_record(&self.buf[off..off + size as usize]) {
                Ok(l) => l,
                Err(e) => return Ok(self.invalid(e.to_string())),
            };
            if layout.physical_offset != self.position {
                return Ok(self.invalid(format!(
                    "record claims physical offset {}",
                    layout.physical_offset
                )));
            }
            // The body CRC (RocketMQ's) does not cover the topic and properties, which follow
            // the body: a write torn inside them over a prepared (zero-filled) segment still
            // adds up. Neither ever holds a zero byte when whole.
            let record = &self.buf[off..off + size as usize];
            if record[layout.topic.clone()].contains(&0)
                || record[layout.properties.clone()].contains(&0)
            {
                return Ok(self.invalid(
                    "record's topic or properties hold zero bytes: a write torn inside them"
                        .to_string(),
                ));
            }
            let position = self.position;
            self.position += size;
            return Ok(ScanStep::Record {
                position,
                layout,
                bytes: &self.buf[off..off + size as usize],
            });
        }
    }
}
