//! Settling a queue that was on disk: making it agree with the commit log as recovery left it
//! when it is first opened (its min offset, entries no writer produced, a torn tail, a re-index
//! from the commit log), and the index entries recovery and settling both write. Recovery scans
//! the commit log; the queue map opens queues; both call here, and this file calls neither.

use super::deleted::DeletedQueues;
use super::{StoreConfig, StoreError};
use crate::commit_log::{CommitLog, ScanStep, MIN_RECORD_SIZE};
use crate::consume_queue::{ConsumeQueue, CqEntry, ENTRY_SIZE};
use crate::error::io_err;
use crate::message::{property, tag_hash_code, RecordLayout};

/// The index entry of a record found at `position`.
pub(super) fn entry_for(position: u64, layout: &RecordLayout, record: &[u8]) -> CqEntry {
    let props = std::str::from_utf8(&record[layout.properties.clone()]).unwrap_or("");
    CqEntry {
        physical_offset: position,
        size: layout.total_size,
        tag_hash: property(props, crate::message::property::TAGS).map_or(0, tag_hash_code),
        store_timestamp: layout.store_timestamp,
    }
}

/// Makes a queue that existed on disk agree with the commit log as recovery left it: its min
/// offset moves past deleted segments; entries at or past `checkpointed` go (a queue opened
/// here either gets them back from the recovery scan, which starts no later, or never had
/// valid ones: the scan would have opened it); a damaged tail is cut; and when the open or the
/// cut found damage (`damaged`: a partial entry, files lost), the queue is re-indexed from
/// the commit log up to `checkpointed`.
pub(super) fn settle_queue(
    config: &StoreConfig,
    log: &CommitLog,
    q: &ConsumeQueue,
    checkpointed: u64,
    damaged: bool,
    deleted: &DeletedQueues,
) -> Result<(), StoreError> {
    let log_start = log.first_base();
    if log_start > 0 {
        q.advance_min_to_physical(log_start)
            .map_err(|e| io_err(q.path(), e))?;
    }
    // An entry no writer produced below the checkpoint is damage (a crash only tears writes
    // made after the last checkpoint, which point past it).
    let garbage = drop_entries_from(q, checkpointed)?;
    let before = q.max_offset();
    let resume = if before > 0 {
        repair_tail(config, log, q)?
    } else {
        None
    };
    if damaged || garbage || q.max_offset() < before {
        let from = resume.unwrap_or(log_start);
        tracing::warn!(
            dir = %q.path().display(),
            entries = before,
            kept = q.max_offset(),
            resume_from = from,
            "consume queue lost entries, rebuilding it from the commit log"
        );
        reindex_queue(config, log, q, from, checkpointed, deleted)?;
    }
    Ok(())
}

/// Drops the entries pointing at or past `position`, and those no writer produced (entries
/// are in log order, so this is a binary search over the live ones); answers whether the
/// first one dropped was one no writer produced.
fn drop_entries_from(q: &ConsumeQueue, position: u64) -> Result<bool, StoreError> {
    let (min, max) = (q.min_offset(), q.max_offset());
    let bad = |i: u64| -> Result<bool, StoreError> {
        Ok(q.entry_raw(i)
            .map_err(|e| io_err(q.path(), e))?
            .is_none_or(|e| e.physical_offset >= position))
    };
    if max <= min || !bad(max - 1)? {
        return Ok(false);
    }
    // From the first live entry: below it retention removed the files, and a missing entry
    // there is no damage (searched from 0, such a queue lost every entry at the first crash
    // that left one past the checkpoint, and recovery rescanned the whole log for it).
    let (mut lo, mut hi) = (min, max - 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if bad(mid)? {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let garbage = q.entry_raw(lo).map_err(|e| io_err(q.path(), e))?.is_none();
    q.truncate(lo).map_err(|e| io_err(q.path(), e))?;
    Ok(garbage)
}

/// Whether entry `i` of `q` still describes the record it points at; returns the
/// commit-log position right after that record.
fn entry_matches(
    config: &StoreConfig,
    log: &CommitLog,
    q: &ConsumeQueue,
    i: u64,
) -> Result<Option<u64>, StoreError> {
    let Some(e) = q.entry_raw(i).map_err(|err| io_err(q.path(), err))? else {
        return Ok(None);
    };
    let log_start = log.first_base();
    if e.physical_offset < log_start {
        // Its segment was deleted by retention: nothing to check it against, and nothing
        // before the log's start to re-index.
        return Ok(Some(log_start));
    }
    if u64::from(e.size) < MIN_RECORD_SIZE
        || u64::from(e.size) > config.max_record_size()
        || e.end() > log.files_end()?
        || !log.same_segment(e.physical_offset, e.end())
    {
        return Ok(None);
    }
    let mut buf = vec![0u8; e.size as usize];
    log.read_at(e.physical_offset, &mut buf)?;
    Ok(crate::message::parse_record(&buf).ok().and_then(|l| {
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
fn repair_tail(
    config: &StoreConfig,
    log: &CommitLog,
    q: &ConsumeQueue,
) -> Result<Option<u64>, StoreError> {
    const LOOK_BACK: u64 = 64;
    let count = q.max_offset();
    for i in (count.saturating_sub(LOOK_BACK)..count).rev() {
        if let Some(end) = entry_matches(config, log, q, i)? {
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

/// Indexes the records of `q` between `from` and `to` that it lacks. A record whose queue
/// offset lies past the queue's end is a gap: an empty queue restarts there (its earlier
/// records lie in deleted segments), any other is corrupt.
fn reindex_queue(
    config: &StoreConfig,
    log: &CommitLog,
    q: &ConsumeQueue,
    from: u64,
    to: u64,
    deleted: &DeletedQueues,
) -> Result<(), StoreError> {
    let mut pending = PendingIndex {
        start: q.max_offset(),
        bytes: Vec::new(),
    };
    let mut scanner = log.scan(from, config.max_record_size())?;
    loop {
        let (position, layout, record) = match scanner.next_step()? {
            ScanStep::Record {
                position,
                layout,
                bytes,
            } if position < to => (position, layout, bytes),
            // The main scan decides what an invalid record means; this one only indexes.
            _ => break,
        };
        if layout.queue_id != q.queue_id()
            || &record[layout.topic.clone()] != q.topic().as_bytes()
            || deleted.hides(q.topic(), q.queue_id(), position)
        {
            continue;
        }
        let next = pending.next_offset();
        if layout.queue_offset < next {
            continue;
        }
        if layout.queue_offset > next {
            if pending.bytes.is_empty() && q.min_offset() == q.max_offset() {
                q.restart_at(layout.queue_offset)
                    .map_err(|e| io_err(q.path(), e))?;
                pending.start = layout.queue_offset;
            } else {
                return Err(StoreError::CorruptRecord {
                    path: log.path_for(position),
                    physical_offset: position,
                    reason: format!(
                        "queue offset gap in {}/{}: earlier records of the queue are missing from the commit log",
                        q.topic(),
                        q.queue_id()
                    ),
                });
            }
        }
        entry_for(position, &layout, record).encode_into(&mut pending.bytes);
        if pending.bytes.len() >= 256 * 1024 {
            pending.flush(q)?;
        }
    }
    pending.flush(q)
}

/// Entries found during a recovery scan, written per queue in large chunks.
pub(super) struct PendingIndex {
    pub(super) start: u64,
    pub(super) bytes: Vec<u8>,
}

impl PendingIndex {
    pub(super) fn next_offset(&self) -> u64 {
        self.start + (self.bytes.len() / ENTRY_SIZE) as u64
    }

    pub(super) fn flush(&mut self, queue: &ConsumeQueue) -> Result<(), StoreError> {
        if self.bytes.is_empty() {
            return Ok(());
        }
        queue
            .write_entries(self.start, &self.bytes)
            .map_err(|e| io_err(queue.path(), e))?;
        let end = self.next_offset();
        queue.publish(end);
        self.start = end;
        self.bytes.clear();
        Ok(())
    }
}
