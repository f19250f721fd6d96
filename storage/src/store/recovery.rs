//! Recovery on open: loading the consume queues, validating the commit log from the
//! checkpoint (the corruption policy is in the [`crate::store`] docs) and re-indexing what the
//! consume queues lack.

use super::checkpoint::read_checkpoint;
use super::{is_valid_topic, open_queue, queue_dir, QueueMap, StoreConfig, StoreError};
use crate::commit_log::{CommitLog, ScanStep, MIN_RECORD_SIZE};
use crate::consume_queue::{ConsumeQueue, CqEntry, ENTRY_SIZE};
use crate::error::io_err;
use crate::message::{parse_record, property, tag_hash_code};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

/// Opens every consume queue under `dir/consumequeue`; entries that are not a topic directory
/// holding queue-id files are logged and left alone.
pub(super) fn load_queues(config: &StoreConfig) -> Result<QueueMap, StoreError> {
    let disk = &config.disk;
    let root = queue_dir(&config.dir);
    let mut queues: QueueMap = HashMap::new();
    for tentry in disk.read_dir(&root).map_err(|e| io_err(&root, e))? {
        let Some(topic) = tentry
            .name
            .clone()
            .filter(|t| is_valid_topic(t) && tentry.is_dir)
        else {
            tracing::warn!(dir = %root.display(), name = ?tentry.name, "ignoring unexpected entry in consume-queue directory");
            continue;
        };
        let tpath = root.join(&topic);
        for qentry in disk.read_dir(&tpath).map_err(|e| io_err(&tpath, e))? {
            // A queue is a directory; a plain file is a queue of the single-file layout, and
            // `<id>.migrating` one caught mid-move, which opening the queue completes.
            let Some(queue_id) = qentry.name.as_deref().and_then(|n| {
                let n = n.strip_suffix(".migrating").unwrap_or(n);
                n.parse::<u32>().ok().filter(|id| id.to_string() == n)
            }) else {
                tracing::warn!(dir = %tpath.display(), name = ?qentry.name, "ignoring unexpected consume-queue file");
                continue;
            };
            if queues
                .get(&topic)
                .is_some_and(|m| m.contains_key(&queue_id))
            {
                continue;
            }
            let q = open_queue(config, &topic, queue_id)?;
            queues.entry(topic.clone()).or_default().insert(queue_id, q);
        }
    }
    Ok(queues)
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
    queues: &'a mut QueueMap,
    pending: BTreeMap<(String, u32), PendingIndex>,
}

impl Recovery<'_> {
    fn queue(&mut self, topic: &str, queue_id: u32) -> Result<Arc<ConsumeQueue>, StoreError> {
        if let Some(q) = self.queues.get(topic).and_then(|m| m.get(&queue_id)) {
            return Ok(q.clone());
        }
        let q = open_queue(self.config, topic, queue_id)?;
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
        let log_start = self.log.first_base();
        if e.physical_offset < log_start {
            // Its segment was deleted by retention: nothing to check it against, and nothing
            // before the log's start to re-index.
            return Ok(Some(log_start));
        }
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
        // Scanning from the start of a log whose head retention deleted, the first record of
        // a queue with no live entries may carry any offset: the earlier ones were deleted.
        let head_deleted_scan = start == log.first_base() && start > 0;
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
                    if layout.queue_offset > next
                        && head_deleted_scan
                        && !self.pending.contains_key(&key)
                    {
                        let q = self.queue(&key.0, key.1)?;
                        if q.min_offset() == q.max_offset() {
                            tracing::warn!(
                                dir = %q.path().display(),
                                from = q.max_offset(),
                                to = layout.queue_offset,
                                "consume queue restarts at its first record in the commit log"
                            );
                            q.restart_at(layout.queue_offset)
                                .map_err(|e| io_err(q.path(), e))?;
                        }
                    }
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
pub(super) fn recover(
    config: &StoreConfig,
    log: &CommitLog,
    queues: &mut QueueMap,
) -> Result<(u64, u64), StoreError> {
    let first_base = log.first_base();
    let files_end = log.files_end()?;
    let checkpoint = match read_checkpoint(&config.disk, &config.dir)? {
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
        pending: BTreeMap::new(),
    };
    let mut start = durable;
    let mut existing: Vec<Arc<ConsumeQueue>> = rec
        .queues
        .values()
        .flat_map(|m| m.values().cloned())
        .collect();
    // A fixed order, so a simulated power cut during recovery replays.
    existing.sort_by(|a, b| (a.topic(), a.queue_id()).cmp(&(b.topic(), b.queue_id())));
    for q in &existing {
        // Entries pointing below the log's start belong to deleted segments: they cannot be
        // checked and are kept (they hold the queue's offsets), whatever the checkpoint says.
        let dead = if first_base > 0 {
            q.advance_min_to_physical(first_base)
                .map_err(|e| io_err(q.path(), e))?
        } else {
            0
        };
        let expected = counts
            .get(&(q.topic().to_string(), q.queue_id()))
            .copied()
            .unwrap_or(0)
            .max(dead);
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
