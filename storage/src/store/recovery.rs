//! Recovery on open: validating the commit log from the checkpoint (the corruption policy is
//! in the [`crate::store`] docs) and re-indexing what the consume queues lack.
//!
//! Recovery opens only the queues that records past the checkpoint belong to: every other
//! queue's entries were fsynced before the checkpoint was written, so it stays on disk until a
//! read or a write needs it, and is settled then ([`settle_queue`](super::settle::settle_queue)). Start-up work grows with
//! the tail a crash could have left unindexed, not with the number of queues.

use super::checkpoint::read_checkpoint;
use super::deleted::DeletedQueues;
use super::queues::{NewDirs, QueueMap, QueueOpener};
use super::settle::{entry_for, PendingIndex};
use super::{is_valid_topic, StoreConfig, StoreError};
use crate::commit_log::{CommitLog, ScanStep};
use crate::consume_queue::ConsumeQueue;
use crate::error::io_err;
use crate::file_cache::FileCache;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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
    opener: QueueOpener<'a>,
    queues: QueueMap,
    pending: BTreeMap<(String, u32), (Arc<ConsumeQueue>, PendingIndex)>,
    /// The newest store timestamp met by the scan.
    newest: i64,
}

impl Recovery<'_> {
    /// The queue, opened (and settled, or created) on first touch.
    fn queue(&mut self, topic: &str, queue_id: u32) -> Result<Arc<ConsumeQueue>, StoreError> {
        if let Some(q) = self.queues.get(topic).and_then(|m| m.get(&queue_id)) {
            return Ok(q.clone());
        }
        let q = self.opener.open(topic, queue_id, true)?.ok_or_else(|| {
            io_err(
                &self.config.dir,
                std::io::Error::other(format!("queue {topic}/{queue_id} could not be created")),
            )
        })?;
        self.queues
            .entry(topic.to_string())
            .or_default()
            .insert(queue_id, q.clone());
        Ok(q)
    }

    fn flush_pending(&mut self) -> Result<(), StoreError> {
        for (queue, p) in self.pending.values_mut() {
            p.flush(queue)?;
        }
        self.pending.clear();
        Ok(())
    }

    /// The next queue offset `key` expects: past what is pending, or the queue's end.
    fn next_offset(&mut self, key: &(String, u32)) -> Result<u64, StoreError> {
        match self.pending.get(key) {
            Some((_, p)) => Ok(p.next_offset()),
            None => Ok(self.queue(&key.0, key.1)?.max_offset()),
        }
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
                    self.newest = self.newest.max(layout.store_timestamp);
                    // A record of a deleted life of its queue stays out of the queue.
                    if super::lock(self.opener.deleted).hides(&topic, layout.queue_id, position) {
                        continue;
                    }
                    let entry = entry_for(position, &layout, bytes);
                    let key = (topic, layout.queue_id);
                    let next = self.next_offset(&key)?;
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
                    let next = self.next_offset(&key)?;
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
                            (
                                queue,
                                PendingIndex {
                                    start: next,
                                    bytes: Vec::new(),
                                },
                            ),
                        );
                    }
                    if let Some((queue, p)) = self.pending.get_mut(&key) {
                        entry.encode_into(&mut p.bytes);
                        if p.bytes.len() >= 256 * 1024 {
                            p.flush(queue)?;
                        }
                    }
                }
                ScanStep::Invalid {
                    position,
                    path,
                    reason,
                } => return self.invalid(position, path, reason, durable),
                ScanStep::Unwritten {
                    position,
                    data_follows,
                } => return self.unwritten(position, data_follows, durable),
            }
        }
    }

    /// The log ends where the last segment's prepared space begins. Bytes after that start
    /// belong to a batch whose later blocks reached the disk before its first: never fsynced,
    /// so never acknowledged under `Sync`, a torn tail cut off (RocketMQ ends its log at the
    /// first blank too). Below the checkpoint nothing may be missing: that is corruption.
    fn unwritten(
        &mut self,
        position: u64,
        data_follows: bool,
        durable: u64,
    ) -> Result<ScanOutcome, StoreError> {
        self.flush_pending()?;
        let path = self.log.path_for(position);
        let reason = "zeros where a record should start";
        refuse_below_checkpoint(position, &path, reason, durable)?;
        if data_follows {
            self.cut_torn_tail(position, &path, &format!("{reason}, data after them"))?;
        }
        Ok(ScanOutcome::Done {
            valid_end: position,
        })
    }

    fn invalid(
        &mut self,
        position: u64,
        path: PathBuf,
        reason: String,
        durable: u64,
    ) -> Result<ScanOutcome, StoreError> {
        self.flush_pending()?;
        refuse_below_checkpoint(position, &path, &reason, durable)?;
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
        self.cut_torn_tail(position, &path, &reason)?;
        Ok(ScanOutcome::Done {
            valid_end: position,
        })
    }

    /// Cuts the log at `position`, logging what it drops and why.
    fn cut_torn_tail(&self, position: u64, path: &Path, reason: &str) -> Result<(), StoreError> {
        let files_end = self.log.files_end()?;
        tracing::warn!(
            file = %path.display(),
            physical_offset = position,
            dropped_bytes = files_end.saturating_sub(position),
            reason = %reason,
            "truncating torn commit-log tail"
        );
        self.log.truncate_at(position)
    }
}

/// A record position below the checkpoint is durable: anything wrong there is corruption.
fn refuse_below_checkpoint(
    position: u64,
    path: &Path,
    reason: &str,
    durable: u64,
) -> Result<(), StoreError> {
    if position < durable {
        return Err(StoreError::CorruptRecord {
            path: path.to_path_buf(),
            physical_offset: position,
            reason: format!("{reason} (below the checkpointed durable position {durable})"),
        });
    }
    Ok(())
}

/// What [`recover`] found.
pub(super) struct Recovered {
    /// The valid end of the commit log.
    pub(super) valid_end: u64,
    /// The position known durable (the checkpoint's, or the log's start).
    pub(super) durable: u64,
    /// Where the scan was to start (the checkpoint's position): the queues not opened by
    /// recovery hold no valid entry at or past it.
    pub(super) checkpointed: u64,
    /// The queues recovery opened: those that records past the checkpoint belong to.
    pub(super) queues: QueueMap,
    /// The newest store timestamp in the log, as far as the checkpoint and the scan tell.
    pub(super) last_timestamp: i64,
}

/// Validates the commit log from the checkpoint and indexes what lies past it.
pub(super) fn recover(
    config: &StoreConfig,
    log: &CommitLog,
    files: &Arc<FileCache>,
    new_dirs: &Mutex<NewDirs>,
    deleted: &Mutex<DeletedQueues>,
) -> Result<Recovered, StoreError> {
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
    let (durable, last_timestamp) = match checkpoint {
        Some(ck) => (ck.position, ck.last_timestamp),
        None => (first_base, 0),
    };
    let mut rec = Recovery {
        config,
        log,
        opener: QueueOpener {
            config,
            log,
            files,
            new_dirs,
            deleted,
            recovered_from: durable,
        },
        queues: HashMap::new(),
        pending: BTreeMap::new(),
        newest: last_timestamp,
    };
    let mut start = durable;
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
    Ok(Recovered {
        valid_end,
        durable: durable.min(valid_end),
        checkpointed: durable,
        queues: rec.queues,
        last_timestamp: rec.newest,
    })
}
