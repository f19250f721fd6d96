//! Reading a queue's entries: by logical offset, one or many, and by store timestamp.
//!
//! Entries are read from the files and from the in-memory tail alike, so a reader never has to
//! know which of the two holds an entry; the writer's side (the tail, rolling files, truncation,
//! sync) stays in the parent module.

use super::{entries_bytes, ConsumeQueue, CqEntry, ENTRY_SIZE};
use std::io;

impl ConsumeQueue {
    /// Reads whole entries at logical offset `from` from the files.
    fn read_files(&self, from: u64, out: &mut [u8]) -> io::Result<()> {
        let mut offset = from;
        let mut done = 0usize;
        while done < out.len() {
            let (file, next) = self.file_at(offset)?;
            let wanted = ((out.len() - done) / ENTRY_SIZE) as u64;
            let n = next.map_or(wanted, |next| wanted.min(next - offset));
            if n == 0 {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
            }
            let len = n as usize * ENTRY_SIZE;
            file.file.handle()?.read_exact_at(
                &mut out[done..done + len],
                entries_bytes(offset - file.base),
            )?;
            offset += n;
            done += len;
        }
        Ok(())
    }

    /// Copies entries `from..from + out.len() / ENTRY_SIZE` from the files and the tail.
    fn copy_entries(&self, from: u64, out: &mut [u8]) -> io::Result<()> {
        let tail = self.tail();
        let end = from + (out.len() / ENTRY_SIZE) as u64;
        let in_file = (end.min(tail.start).saturating_sub(from) as usize) * ENTRY_SIZE;
        if in_file > 0 {
            self.read_files(from, &mut out[..in_file])?;
        }
        if in_file < out.len() {
            let skip = (from.max(tail.start) - tail.start) as usize * ENTRY_SIZE;
            let wanted = out.len() - in_file;
            let Some(buffered) = tail.bytes.get(skip..skip + wanted) else {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "consume-queue entries past the written end",
                ));
            };
            out[in_file..].copy_from_slice(buffered);
        }
        Ok(())
    }
    /// Reads up to `n` entries from logical offset `from` (bounded by the published max) with
    /// at most one pread per file into `buf`; `Ok(None)` entries mark values no writer
    /// produces.
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
        self.copy_entries(from, buf)?;
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
        match self.copy_entries(offset, &mut a) {
            Ok(()) => Ok(CqEntry::decode(&a)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::UnexpectedEof | io::ErrorKind::NotFound
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The published entry at `offset`, if it is at or above the min offset.
    pub fn entry(&self, offset: u64) -> io::Result<Option<CqEntry>> {
        if offset >= self.max_offset() || offset < self.min_offset() {
            return Ok(None);
        }
        self.entry_raw(offset)
    }

    /// Binary search over store timestamps (non-decreasing within a queue, the writer makes
    /// them so) between the min and max offsets. Lower: first offset with timestamp >= `ts`;
    /// Upper: last offset with timestamp <= `ts`. Returns the max offset when every entry is
    /// older and the min offset when every entry is newer (or the queue is empty).
    pub fn search_by_timestamp(&self, ts: i64, upper: bool) -> io::Result<u64> {
        let max = self.max_offset();
        let min = self.min_offset();
        if max == min {
            return Ok(min);
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
        if ts_at(min)? > ts {
            return Ok(min);
        }
        // First index whose timestamp is >= ts (Lower) or > ts (Upper).
        let (mut lo, mut hi) = (min, max);
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
        Ok(if upper {
            lo.saturating_sub(1).max(min)
        } else {
            lo
        })
    }
}
