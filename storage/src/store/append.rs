//! The write path of [`MessageStore`]: validating a batch, encoding its records into the
//! commit log, indexing them in their consume queues, and taking all of it back when a write
//! fails.
//!
//! Kept apart from `mod.rs`, which opens, flushes and closes the store: this is the code every
//! send request runs, and the undo that decides whether a failed write stops the store.

use super::queues::queue_dir;
use super::{is_valid_topic, AppendResult, FlushPolicy, MessageStore};
use crate::consume_queue::{ConsumeQueue, CqEntry};
use crate::error::{io_err, AppendRejected, Appended, StoreError};
use crate::message::{
    encode_record, encoded_len, property, tag_hash_code, MessageToAppend, MAX_PROPERTIES_LEN,
};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Per-queue slice of the batch being appended.
pub(super) struct BatchQueue {
    queue: Arc<ConsumeQueue>,
    start: u64,
    count: u64,
    entries: Vec<u8>,
}

impl MessageStore {
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
    /// [`SyncWaiter::wait_durable`](super::SyncWaiter::wait_durable) so many appenders share
    /// one fsync.
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
            Some(q) => {
                q.mark_used();
                q.clone()
            }
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
        if let Some(preparer) = &self.preparer {
            if self.shared.wants_preparing(pos) {
                preparer.ask();
            }
        }
        Ok((results, pos))
    }
}
