//! [`StoreReader`]: the cloneable, thread-safe read handle over the commit log and consume
//! queues.

use super::Shared;
use super::{BoundaryType, ReadResult, ReadStatus, StoreError};
use crate::commit_log::ScanStep;
use crate::commit_log::MIN_RECORD_SIZE;
use crate::consume_queue::CqEntry;
use crate::error::io_err;
use crate::message::{
    decode_records, parse_record, RecordLayout, StoredMessage, MAGIC_V1, MAGIC_V2,
};
use bytes::Bytes;
use std::io;
use std::sync::Arc;

/// A cheap, cloneable, thread-safe read handle; sees every append once `append_batch` returned.
#[derive(Clone)]
pub struct StoreReader {
    shared: Arc<Shared>,
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
    pub(super) fn new(shared: Arc<Shared>) -> StoreReader {
        StoreReader { shared }
    }

    fn empty(status: ReadStatus, next: u64, min: u64, max: u64) -> ReadResult {
        ReadResult {
            status,
            records: Bytes::new(),
            message_count: 0,
            offsets: Vec::new(),
            next_begin_offset: next,
            min_offset: min,
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
        self.read_filtered(
            topic,
            queue_id,
            offset,
            max_messages,
            max_bytes,
            tag_filter,
            None,
        )
    }

    /// [`StoreReader::read`] with a second filter over each record's properties (wire form),
    /// applied to the entries the tag filter kept: RocketMQ's commit-log filter, which SQL92
    /// subscriptions use. Records it refuses advance `next_begin_offset` like tag misses; each
    /// one it examines is read from the log and CRC-checked first.
    #[allow(clippy::too_many_arguments)]
    pub fn read_filtered(
        &self,
        topic: &str,
        queue_id: u32,
        offset: u64,
        max_messages: u32,
        max_bytes: u32,
        tag_filter: Option<&dyn Fn(i64) -> bool>,
        property_filter: Option<&dyn Fn(&str) -> bool>,
    ) -> Result<ReadResult, StoreError> {
        let Some(q) = self.shared.queue(topic, queue_id) else {
            return Ok(Self::empty(ReadStatus::NoMessageInQueue, 0, 0, 0));
        };
        let max = q.max_offset();
        let min = q.min_offset();
        // As RocketMQ's getMessage: only a queue never written to answers NoMessageInQueue;
        // one whose entries retention deleted (min == max > 0) answers by the offset.
        if max == 0 {
            return Ok(Self::empty(ReadStatus::NoMessageInQueue, 0, 0, 0));
        }
        if offset < min {
            return Ok(Self::empty(ReadStatus::OffsetTooSmall, min, min, max));
        }
        if offset == max {
            return Ok(Self::empty(ReadStatus::OffsetOverflowOne, offset, min, max));
        }
        if offset > max {
            return Ok(Self::empty(ReadStatus::OffsetOverflowBadly, max, min, max));
        }
        if max_messages == 0 {
            return Ok(Self::empty(ReadStatus::NoMatchedMessage, offset, min, max));
        }
        let window = if tag_filter.is_some() || property_filter.is_some() {
            u64::from(max_messages).max(FILTER_SCAN_ENTRIES)
        } else {
            u64::from(max_messages)
        }
        .min(MAX_ENTRIES_PER_READ);
        let mut scratch = Vec::new();
        let entries = match q.read_entries(offset, window, &mut scratch) {
            Ok(entries) => entries,
            // Retention moved the min past `offset` and deleted its file meanwhile.
            Err(_) if offset < q.min_offset() => {
                let min = q.min_offset();
                return Ok(Self::empty(ReadStatus::OffsetTooSmall, min, min, max));
            }
            Err(e) => return Err(io_err(q.path(), e)),
        };
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
            if let Some(f) = property_filter {
                if !self.record_matches(topic, queue_id, logical, &e, f)? {
                    scanned = i as u64 + 1;
                    continue;
                }
            }
            bytes += u64::from(e.size);
            selected.push((logical, e));
            scanned = i as u64 + 1;
        }
        let next = offset + scanned;
        if selected.is_empty() {
            return Ok(Self::empty(ReadStatus::NoMatchedMessage, next, min, max));
        }
        let records = self.fetch(topic, queue_id, &selected, bytes)?;
        Ok(ReadResult {
            status: ReadStatus::Found,
            records,
            message_count: selected.len() as u32,
            offsets: selected.iter().map(|(logical, _)| *logical).collect(),
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

    /// Reads one record and asks `filter` about its properties.
    fn record_matches(
        &self,
        topic: &str,
        queue_id: u32,
        logical: u64,
        e: &CqEntry,
        filter: &dyn Fn(&str) -> bool,
    ) -> Result<bool, StoreError> {
        let mut rec = vec![0u8; e.size as usize];
        self.shared.log.read_at(e.physical_offset, &mut rec)?;
        self.verify(&rec, topic, queue_id, logical, e)?;
        let layout = parse_record(&rec).map_err(|err| StoreError::CorruptRecord {
            path: self.shared.log.path_for(e.physical_offset),
            physical_offset: e.physical_offset,
            reason: err.to_string(),
        })?;
        let properties = String::from_utf8_lossy(&rec[layout.properties]);
        Ok(filter(&properties))
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

    /// First logical offset still served: retention moves it past entries whose segments it
    /// deleted (0 for an unknown queue).
    pub fn min_offset(&self, topic: &str, queue_id: u32) -> u64 {
        self.shared
            .queue(topic, queue_id)
            .map_or(0, |q| q.min_offset())
    }

    /// Where the commit log starts (the physical offset of its oldest segment).
    pub fn commit_log_start(&self) -> u64 {
        self.shared.log.first_base()
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
        Ok(self.record_at(physical_offset)?.map(|(_, message)| message))
    }

    /// The stored bytes of the record at a commit-log physical offset, checked as
    /// [`StoreReader::read_by_physical_offset`] checks them (VIEW_MESSAGE_BY_ID answers them as
    /// they are).
    pub fn raw_record_at(&self, physical_offset: u64) -> Result<Option<Bytes>, StoreError> {
        Ok(self.record_at(physical_offset)?.map(|(raw, _)| raw))
    }

    fn record_at(
        &self,
        physical_offset: u64,
    ) -> Result<Option<(Bytes, StoredMessage)>, StoreError> {
        let log = &self.shared.log;
        let end = log.written_end();
        if physical_offset.saturating_add(MIN_RECORD_SIZE) > end
            || physical_offset < log.first_base()
        {
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
        let raw = Bytes::from(buf);
        let mut msgs = decode_records(raw.clone()).map_err(|e| corrupt(e.to_string()))?;
        match msgs.pop() {
            Some(m) if msgs.is_empty() => Ok(Some((raw, m))),
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

    /// The store time of the queue's newest message; `None` when it is empty or missing. A
    /// look, not a use: it leaves the queue to leave memory when idle, also one it had to open
    /// from disk, so a sweep over every queue (lite expiry) does not keep them all in memory.
    pub fn newest_store_timestamp(
        &self,
        topic: &str,
        queue_id: u32,
    ) -> Result<Option<i64>, StoreError> {
        let q = match self.shared.queue_in_memory(topic, queue_id) {
            Some(q) => q,
            None => match self.shared.load_queue(topic, queue_id, false)? {
                Some(q) => {
                    q.take_used();
                    q
                }
                None => return Ok(None),
            },
        };
        match q.max_offset() {
            0 => Ok(None),
            max => Ok(q
                .entry(max - 1)
                .map_err(|e| io_err(q.path(), e))?
                .map(|e| e.store_timestamp)),
        }
    }

    /// Every (topic, queue id) with a consume queue, sorted. Lists the queue directories
    /// without opening any queue.
    pub fn queues(&self) -> Result<Vec<(String, u32)>, StoreError> {
        self.shared.known_queues()
    }

    /// The topics starting with `prefix` that have queue `queue_id`, sorted; reads the queue
    /// root and one entry per match, opens nothing (see [`Self::queues`] for every queue).
    pub fn topics_with_queue(
        &self,
        prefix: &str,
        queue_id: u32,
    ) -> Result<Vec<String>, StoreError> {
        self.shared.topics_with_queue(prefix, queue_id)
    }

    /// The consume-queue files held open now, the most held at once, and how often one was
    /// opened or closed to make room.
    pub fn queue_file_stats(&self) -> crate::file_cache::FileCacheStats {
        self.shared.files.stats()
    }

    /// Visits the records of the commit log from `from` (a record boundary) up to `end`, at
    /// most `max_records` of them, with each one's position, layout and bytes; answers the
    /// position reached (`end`, or where an unreadable record or the limit stopped the scan).
    pub fn scan_records(
        &self,
        from: u64,
        end: u64,
        max_records: usize,
        mut visit: impl FnMut(u64, &RecordLayout, &[u8]),
    ) -> Result<u64, StoreError> {
        let log = &self.shared.log;
        let end = end.min(log.written_end());
        let mut scanner = log.scan(from, self.shared.config.max_record_size())?;
        let mut seen = 0usize;
        while scanner.position() < end && seen < max_records {
            match scanner.next_step()? {
                ScanStep::Record {
                    position,
                    layout,
                    bytes,
                } => {
                    if position + u64::from(layout.total_size) > end {
                        return Ok(position);
                    }
                    visit(position, &layout, bytes);
                    seen += 1;
                }
                ScanStep::Invalid { position, .. }
                | ScanStep::End { position }
                | ScanStep::Unwritten { position, .. } => return Ok(position),
            }
        }
        Ok(scanner.position())
    }

    /// How long the commit log's durability fsyncs took so far (for the metrics).
    pub fn fsync_latency(&self) -> crate::stats::LatencySnapshot {
        self.shared.log.fsync_latency()
    }

    /// End of the commit log as readers see it.
    pub fn commit_log_end(&self) -> u64 {
        self.shared.log.written_end()
    }
}
