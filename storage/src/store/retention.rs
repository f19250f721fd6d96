//! Retention: deleting the oldest commit-log segments, by age or because the disk fills up,
//! together with the consume-queue files that only index them.
//!
//! Only full segments go (never the active one), always the oldest first, so the log stays a
//! contiguous run of segments. The order of the steps makes a power cut anywhere harmless:
//! 1. every queue's min offset moves past the entries pointing into the doomed segments, so
//!    readers stop serving them (a read below the min answers `OffsetTooSmall`);
//! 2. the segments are removed one at a time, the directory fsynced after each, so the
//!    segments a cut leaves are always a suffix of the old ones;
//! 3. the queue files whose entries all lie below the min go (a queue's last file always stays,
//!    so its next offset survives even when it holds nothing live);
//! 4. a checkpoint is written.
//!
//! At open, each queue's min offset is found again from where the log starts, so a cut between
//! the steps leaves nothing to repair but files that the next run deletes.

use super::durability::CheckpointPass;
use super::{MessageStore, StoreError};
use crate::commit_log::MIN_RECORD_SIZE;
use crate::consume_queue::ConsumeQueue;
use crate::error::io_err;
use crate::message::parse_record;
use std::io;
use std::sync::Arc;
use std::time::Duration;

/// What one retention run may delete. The caller measures the disk; the store only compares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetentionRequest {
    /// Now, in milliseconds since the Unix epoch (the clock store timestamps come from).
    pub now_ms: i64,
    /// A full segment whose newest record is older than this is deleted (RocketMQ's
    /// `fileReservedTime`, 72 h by default).
    pub max_age: Duration,
    /// The measured share of the store's file system in use, `0.0..=1.0`.
    pub disk_used_ratio: f64,
    /// Above this share the oldest full segment is deleted whatever its age, one per run, so
    /// the caller measures again before the next (RocketMQ's `diskMaxUsedSpaceRatio`, 0.75).
    pub disk_max_used_ratio: f64,
    /// The most segments one run deletes (RocketMQ's `deleteFileBatchMax`, 10), bounding how
    /// long the writer is held.
    pub max_segments: usize,
}

impl RetentionRequest {
    pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(72 * 3600);
    pub const DEFAULT_DISK_MAX_USED_RATIO: f64 = 0.75;
    pub const DEFAULT_MAX_SEGMENTS: usize = 10;

    /// Deletes by age only (a disk use of 0), with the default ratio and batch bound.
    pub fn by_age(now_ms: i64, max_age: Duration) -> RetentionRequest {
        RetentionRequest {
            now_ms,
            max_age,
            disk_used_ratio: 0.0,
            disk_max_used_ratio: Self::DEFAULT_DISK_MAX_USED_RATIO,
            max_segments: Self::DEFAULT_MAX_SEGMENTS,
        }
    }
}

/// One deleted commit-log segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeletedSegment {
    /// Physical offset of its first byte (its file name).
    pub base: u64,
    pub bytes: u64,
    /// Store timestamp of its newest record, as the first record after it bounds it (store
    /// timestamps never go back along the log, so no record of the segment is newer).
    pub newest_timestamp: i64,
    /// Deleted because the disk was above the ratio, not because of its age.
    pub forced: bool,
}

/// What a retention run deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    /// Oldest first; empty when nothing was due.
    pub segments: Vec<DeletedSegment>,
    pub queue_files_deleted: usize,
    /// Bytes of segments and queue files deleted.
    pub bytes_freed: u64,
    /// Where the commit log now starts: key-index entries below it point at nothing
    /// ([`crate::key_index::KeyIndex::prune_below`]).
    pub min_commit_log_offset: u64,
}

impl MessageStore {
    /// Deletes the full segments that `request` makes due, with their consume-queue entries,
    /// and moves every queue's min offset past them; see the module docs for the order. The
    /// writer runs it between appends.
    pub fn delete_expired(
        &mut self,
        request: &RetentionRequest,
    ) -> Result<RetentionOutcome, StoreError> {
        if self.broken || self.closed {
            return Err(StoreError::WritesRefused);
        }
        let log_segments = self.shared.log.segments();
        let over_ratio = request.disk_used_ratio > request.disk_max_used_ratio;
        let max_age_ms = i64::try_from(request.max_age.as_millis()).unwrap_or(i64::MAX);
        let cutoff = request.now_ms.saturating_sub(max_age_ms);
        let mut doomed: Vec<(u64, i64, bool)> = Vec::new();
        for pair in log_segments.windows(2) {
            if doomed.len() >= request.max_segments {
                break;
            }
            let (base, end) = (pair[0].base(), pair[1].base());
            let newest = self.segment_newest(base, end)?;
            let forced = newest >= cutoff && over_ratio && doomed.is_empty();
            if newest >= cutoff && !forced {
                break;
            }
            doomed.push((base, newest, forced));
            if forced {
                break;
            }
        }
        let mut outcome = RetentionOutcome {
            min_commit_log_offset: self.shared.log.first_base(),
            ..RetentionOutcome::default()
        };
        let Some(new_start) = log_segments.get(doomed.len()).map(|s| s.base()) else {
            return Ok(outcome);
        };
        if doomed.is_empty() {
            return Ok(outcome);
        }
        // The queues in memory; the others find their min offset from where the log starts
        // when they are opened (their files below it stay until then).
        let mut queues: Vec<Arc<ConsumeQueue>> = self.shared.open_queues();
        // A fixed order, so a simulated power cut after the n-th file operation replays.
        queues.sort_by(|a, b| (a.topic(), a.queue_id()).cmp(&(b.topic(), b.queue_id())));
        for q in &queues {
            q.advance_min_to_physical(new_start)
                .map_err(|e| io_err(q.path(), e))?;
        }
        for (base, newest_timestamp, forced) in doomed {
            let Some((segment, bytes)) = self.shared.log.delete_oldest()? else {
                break;
            };
            if segment.base() != base {
                return Err(io_err(
                    segment.path(),
                    io::Error::other(format!(
                        "retention expected segment {base} first, found {}",
                        segment.base()
                    )),
                ));
            }
            self.segment_newest.remove(&base);
            outcome.bytes_freed += bytes;
            tracing::info!(
                file = %segment.path().display(),
                bytes,
                newest_timestamp,
                forced,
                "deleted commit-log segment"
            );
            outcome.segments.push(DeletedSegment {
                base,
                bytes,
                newest_timestamp,
                forced,
            });
        }
        for q in &queues {
            let (files, bytes) = q
                .delete_files_below_min()
                .map_err(|e| io_err(q.path(), e))?;
            outcome.queue_files_deleted += files;
            outcome.bytes_freed += bytes;
        }
        outcome.min_commit_log_offset = self.shared.log.first_base();
        // Deleted queues whose records went with the segments need no memory of them.
        super::lock(&self.shared.deleted).prune(outcome.min_commit_log_offset);
        self.shared.checkpoint(CheckpointPass::Forced)?;
        // The caller logs the run at info with its reason (age or disk use).
        tracing::debug!(
            segments = outcome.segments.len(),
            queue_files = outcome.queue_files_deleted,
            bytes = outcome.bytes_freed,
            min_commit_log_offset = outcome.min_commit_log_offset,
            "retention run deleted old data"
        );
        Ok(outcome)
    }

    /// A bound on the store timestamp of the newest record in the full segment `[base, end)`:
    /// that of the record at `end`, the first of the next segment (store timestamps never go
    /// back along the log). One record read, whatever the number of queues. Cached: a full
    /// segment never changes. `i64::MAX` (keep it) when no record follows yet.
    fn segment_newest(&mut self, base: u64, end: u64) -> Result<i64, StoreError> {
        if let Some(&t) = self.segment_newest.get(&base) {
            return Ok(t);
        }
        let Some(newest) = self.store_timestamp_of_record_at(end)? else {
            return Ok(i64::MAX);
        };
        self.segment_newest.insert(base, newest);
        Ok(newest)
    }

    /// The store timestamp of the record starting at `position`, if one is written there.
    fn store_timestamp_of_record_at(&self, position: u64) -> Result<Option<i64>, StoreError> {
        if position >= self.write_pos {
            return Ok(None);
        }
        let log = &self.shared.log;
        let mut size = [0u8; 4];
        log.read_at(position, &mut size)?;
        let size = u64::try_from(i32::from_be_bytes(size)).unwrap_or(0);
        if size < MIN_RECORD_SIZE || size > self.shared.config.max_record_size() {
            return Ok(None);
        }
        let mut record = vec![0u8; size as usize];
        log.read_at(position, &mut record)?;
        Ok(parse_record(&record).ok().map(|l| l.store_timestamp))
    }
}
