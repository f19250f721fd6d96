//! The durable index of pending timer messages (RocketMQ 5's timer wheel and timer log).
//!
//! A timer message itself is an ordinary commit-log record in the timer topic; this index,
//! append-only files in [`TIMER_INDEX_DIR`] under the store's directory, says when each one is
//! due. Pending timers cost disk, not memory: nothing per timer is held in RAM.
//!
//! - **Slot files** `<second>.slot`, one per due second (deliver times are rounded to the
//!   second), each a run of 16-byte records (deliver ms, commit-log physical offset, big-endian)
//!   in the order the timers were indexed. A slot is delivered front to back, so its progress is
//!   one position.
//! - **The state file** `state`, replaced atomically (write, fsync, rename) by [`TimerIndex::flush`]:
//!   the ingest cursor (next timer-queue offset to index), the ingest mark (every timer message
//!   below that commit-log offset is in a slot file that was fsynced), the delivery position
//!   (slot, records done; every earlier slot is delivered and its file deleted) and the delivery
//!   in flight, if any ([`InFlight`]).
//!
//! A timer indexed after the delivery position has passed its second goes to the current slot,
//! so nothing is ever written behind the position. In memory the index keeps only the set of
//! slot seconds that have a file (at most one per second of the 3-day horizon) and the state.
//!
//! - **The recall file** `recalls`, replaced atomically as the state: the timers a client
//!   recalled (due time and message id, `UNIQ_KEY`), written before the recall is answered and
//!   read by the delivery, which drops a recalled timer's message; an entry goes once its
//!   second is a minute behind the delivery position.
//!
//! **Crashes.** Slot appends are not fsynced one by one; [`TimerIndex::flush`] fsyncs the slot
//! files written since the last flush before it writes the state. At open, every slot record at
//! or past the ingest mark is one written after the last flush: its commit-log offset is
//! remembered, and ingesting that timer again (the cursor went back with the state) skips it, so
//! each timer is indexed once whether or not its record survived. The state goes through the
//! [`record`](crate::record) codec; one that does not decode is an error, never a fresh start.

use std::collections::{BTreeSet, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::disk::Disk;
use crate::error::StoreError;
use crate::record::{self, Decoded};

/// The index's directory, under the message store's directory.
pub const TIMER_INDEX_DIR: &str = "timerindex";

const STATE_FILE: &str = "state";
const RECALLS_FILE: &str = "recalls";
/// How far behind the delivery position a recalled timer's second may be before its entry is
/// dropped: a timer indexed late (the ingest behind after a restart) is delivered in a later
/// slot than its second, and must still find its recall.
const RECALL_KEPT_SECONDS: u64 = 60;
const SLOT_SUFFIX: &str = ".slot";
const RECORD_LEN: u64 = 16;
const RECORD_VERSION: u8 = 1;

/// One pending timer: when it is due and where its message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TimerEntry {
    /// Due time, epoch ms (already rounded to the timer precision).
    pub deliver_ms: u64,
    /// Commit-log physical offset of the message in the timer topic.
    pub physical_offset: u64,
}

impl TimerEntry {
    fn encode(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.deliver_ms.to_be_bytes());
        out[8..].copy_from_slice(&self.physical_offset.to_be_bytes());
        out
    }

    fn decode(raw: &[u8]) -> TimerEntry {
        let mut due = [0u8; 8];
        let mut offset = [0u8; 8];
        due.copy_from_slice(&raw[..8]);
        offset.copy_from_slice(&raw[8..16]);
        TimerEntry {
            deliver_ms: u64::from_be_bytes(due),
            physical_offset: u64::from_be_bytes(offset),
        }
    }
}

/// A delivery that was started: `entries` (records `from_pos..` of `slot`) are being appended
/// to their real topics, every copy at a commit-log position at or past `log_from` and stamped
/// with `dequeue_ms` as its delivery time. After a crash, recovery looks at the records from
/// `log_from` on to tell which entries were delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    pub log_from: u64,
    pub dequeue_ms: i64,
    pub slot: u64,
    pub from_pos: u64,
    pub entries: Vec<TimerEntry>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct State {
    cursor: Option<u64>,
    ingest_mark: u64,
    slot: u64,
    pos: u64,
    in_flight: Option<InFlight>,
}

#[derive(Debug, thiserror::Error)]
pub enum TimerIndexError {
    #[error("timer index file {file}")]
    Io {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("timer index file could not be replaced")]
    Replace(#[source] StoreError),
    #[error("timer index state {file} is unreadable: {reason}")]
    Corrupt { file: PathBuf, reason: String },
    #[error("a timer delivery is already in flight in {dir}")]
    AlreadyInFlight { dir: PathBuf },
}

struct Inner {
    dir: PathBuf,
    state: State,
    /// Seconds that have a slot file.
    slots: BTreeSet<u64>,
    /// Slot files appended to since the last flush.
    dirty: BTreeSet<u64>,
    /// Commit-log offsets of timers whose slot record was written after the last flush before
    /// a crash: ingesting them again must not add a second record.
    written_after_flush: HashSet<u64>,
    /// Slot files whose deletion waits for the next state flush.
    done_slots: Vec<u64>,
    /// Recalled timers: (due ms, message id).
    recalls: BTreeSet<(u64, String)>,
}

/// The timer index; cheap to clone (clones share it).
#[derive(Clone)]
pub struct TimerIndex {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for TimerIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimerIndex").finish_non_exhaustive()
    }
}

fn io(file: &Path) -> impl FnOnce(std::io::Error) -> TimerIndexError + '_ {
    move |source| TimerIndexError::Io {
        file: file.to_path_buf(),
        source,
    }
}

impl Inner {
    fn slot_path(&self, slot: u64) -> PathBuf {
        self.dir.join(format!("{slot}{SLOT_SUFFIX}"))
    }

    fn slot_len(&self, slot: u64) -> Result<u64, TimerIndexError> {
        let path = self.slot_path(slot);
        match fs::metadata(&path) {
            Ok(m) => Ok(m.len() / RECORD_LEN),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(io(&path)(e)),
        }
    }

    fn read_slot(
        &self,
        slot: u64,
        from: u64,
        max: u64,
    ) -> Result<Vec<TimerEntry>, TimerIndexError> {
        let path = self.slot_path(slot);
        let mut file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&path)(e)),
        };
        let len = file.metadata().map_err(io(&path))?.len() / RECORD_LEN;
        let count = len.saturating_sub(from).min(max);
        if count == 0 {
            return Ok(Vec::new());
        }
        file.seek(SeekFrom::Start(from * RECORD_LEN))
            .map_err(io(&path))?;
        let mut buf = vec![0u8; (count * RECORD_LEN) as usize];
        file.read_exact(&mut buf).map_err(io(&path))?;
        Ok(buf
            .chunks_exact(RECORD_LEN as usize)
            .map(TimerEntry::decode)
            .collect())
    }

    fn append(&mut self, slot: u64, entries: &[TimerEntry]) -> Result<(), TimerIndexError> {
        if entries.is_empty() {
            return Ok(());
        }
        let path = self.slot_path(slot);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io(&path))?;
        let mut buf = Vec::with_capacity(entries.len() * RECORD_LEN as usize);
        for entry in entries {
            buf.extend_from_slice(&entry.encode());
        }
        // Records start at multiples of the record length: a tail shorter than one (a write
        // cut short by a crash or a full disk) is written over, and a failed write is cut
        // back, so no partial record is ever followed by whole ones.
        let len = file.metadata().map_err(io(&path))?.len();
        let start = len - len % RECORD_LEN;
        if let Err(e) = file.write_all_at(&buf, start) {
            let _ = file.set_len(start);
            return Err(io(&path)(e));
        }
        self.slots.insert(slot);
        self.dirty.insert(slot);
        Ok(())
    }

    /// Replaces `name` with `bytes` ([`Disk::replace_file`] on the operating system's disk).
    fn replace_file(&self, name: &str, bytes: &[u8]) -> Result<(), TimerIndexError> {
        Disk::Os
            .replace_file(&self.dir, name, bytes)
            .map_err(TimerIndexError::Replace)
    }

    fn write_recalls(&self) -> Result<(), TimerIndexError> {
        let recalls: Vec<&(u64, String)> = self.recalls.iter().collect();
        self.replace_file(RECALLS_FILE, &record::encode(RECORD_VERSION, &recalls))
    }

    fn write_state(&mut self) -> Result<(), TimerIndexError> {
        for slot in std::mem::take(&mut self.dirty) {
            let path = self.slot_path(slot);
            match File::open(&path) {
                Ok(f) => f.sync_data().map_err(io(&path))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&path)(e)),
            }
        }
        self.replace_file(STATE_FILE, &record::encode(RECORD_VERSION, &self.state))?;
        let kept_from = self.state.slot.saturating_sub(RECALL_KEPT_SECONDS);
        let before = self.recalls.len();
        self.recalls
            .retain(|(due_ms, _)| due_ms / 1000 >= kept_from);
        if self.recalls.len() != before {
            self.write_recalls()?;
        }
        // Slots behind the durable position are never read again.
        for slot in std::mem::take(&mut self.done_slots) {
            let path = self.slot_path(slot);
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&path)(e)),
            }
        }
        Ok(())
    }
}

/// The record in `path`; `None` when the file does not exist. One that does not decode is an
/// error, never a fresh start.
fn read_record<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, TimerIndexError> {
    let raw = match fs::read(path) {
        Ok(raw) => raw,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    match record::decode::<T>(&raw, RECORD_VERSION) {
        Decoded::Value(value) => Ok(Some(value)),
        Decoded::Corrupt { reason } => Err(TimerIndexError::Corrupt {
            file: path.to_path_buf(),
            reason,
        }),
        Decoded::UnknownVersion { version } => Err(TimerIndexError::Corrupt {
            file: path.to_path_buf(),
            reason: format!("unknown record version {version}"),
        }),
    }
}

impl TimerIndex {
    /// Opens (creating if needed) the index in `dir`.
    pub fn open_dir(dir: &Path) -> Result<Self, TimerIndexError> {
        fs::create_dir_all(dir).map_err(io(dir))?;
        let state = read_record::<State>(&dir.join(STATE_FILE))?.unwrap_or_default();
        let mut inner = Inner {
            dir: dir.to_path_buf(),
            state,
            slots: BTreeSet::new(),
            dirty: BTreeSet::new(),
            written_after_flush: HashSet::new(),
            done_slots: Vec::new(),
            recalls: read_record::<Vec<(u64, String)>>(&dir.join(RECALLS_FILE))?
                .unwrap_or_default()
                .into_iter()
                .collect(),
        };
        for item in fs::read_dir(dir).map_err(io(dir))? {
            let item = item.map_err(io(dir))?;
            let name = item.file_name();
            let Some(slot) = name
                .to_str()
                .and_then(|n| n.strip_suffix(SLOT_SUFFIX))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            if slot < inner.state.slot {
                inner.done_slots.push(slot);
                continue;
            }
            inner.slots.insert(slot);
            let start = if slot == inner.state.slot {
                inner.state.pos
            } else {
                0
            };
            for entry in inner.read_slot(slot, start, u64::MAX)? {
                if entry.physical_offset >= inner.state.ingest_mark {
                    inner.written_after_flush.insert(entry.physical_offset);
                }
            }
        }
        Ok(TimerIndex {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next timer-queue offset to index; `None` before the first ingest.
    pub fn cursor(&self) -> Result<Option<u64>, TimerIndexError> {
        Ok(self.lock().state.cursor)
    }

    /// Indexes `entries` and moves the ingest cursor to `cursor` (durable at the next
    /// [`Self::flush`]). A timer already indexed before a crash is not indexed twice.
    pub fn ingest(&self, entries: &[TimerEntry], cursor: u64) -> Result<(), TimerIndexError> {
        let mut inner = self.lock();
        let mut by_slot: std::collections::BTreeMap<u64, Vec<TimerEntry>> = Default::default();
        for entry in entries {
            if inner.written_after_flush.remove(&entry.physical_offset) {
                continue;
            }
            let slot = (entry.deliver_ms / 1000).max(inner.state.slot);
            by_slot.entry(slot).or_default().push(*entry);
        }
        for (slot, entries) in by_slot {
            inner.append(slot, &entries)?;
        }
        if let Some(last) = entries.iter().map(|e| e.physical_offset).max() {
            inner.state.ingest_mark = inner.state.ingest_mark.max(last + 1);
        }
        inner.state.cursor = Some(cursor);
        Ok(())
    }

    /// At most `limit` entries due at or before `now_ms`, earliest first, all from one slot
    /// (the next call returns the next slot's). Reads only them.
    pub fn due(&self, now_ms: u64, limit: usize) -> Result<Vec<TimerEntry>, TimerIndexError> {
        let mut inner = self.lock();
        let now_slot = now_ms / 1000;
        loop {
            let (slot, pos) = (inner.state.slot, inner.state.pos);
            if inner.slots.contains(&slot) {
                if slot > now_slot {
                    return Ok(Vec::new());
                }
                let entries = inner.read_slot(slot, pos, limit as u64)?;
                if !entries.is_empty() {
                    return Ok(entries);
                }
            }
            // The current slot is exhausted: move to the next one with a file, if it is due.
            let next = inner.slots.range(slot + 1..).next().copied();
            match next {
                Some(next) if next <= now_slot => {
                    if inner.slots.remove(&slot) {
                        inner.done_slots.push(slot);
                    }
                    inner.state.slot = next;
                    inner.state.pos = 0;
                }
                _ => {
                    // Nothing due; keep later timers out of the past by moving up to now.
                    if slot < now_slot && next.is_none() {
                        if inner.slots.remove(&slot) {
                            inner.done_slots.push(slot);
                        }
                        inner.state.slot = now_slot;
                        inner.state.pos = 0;
                    }
                    return Ok(Vec::new());
                }
            }
        }
    }

    /// Pending entries (reads every slot's length: for tests and snapshots).
    pub fn pending(&self) -> Result<u64, TimerIndexError> {
        let inner = self.lock();
        let mut total = 0;
        for &slot in &inner.slots {
            let len = inner.slot_len(slot)?;
            total += if slot == inner.state.slot {
                len.saturating_sub(inner.state.pos)
            } else {
                len
            };
        }
        Ok(total)
    }

    /// Records the delivery of `entries` (just returned by [`Self::due`]) as in flight (durable
    /// at the next [`Self::flush`], which must come before the copies are appended).
    pub fn begin_delivery(
        &self,
        log_from: u64,
        dequeue_ms: i64,
        entries: Vec<TimerEntry>,
    ) -> Result<InFlight, TimerIndexError> {
        let mut inner = self.lock();
        if inner.state.in_flight.is_some() {
            return Err(TimerIndexError::AlreadyInFlight {
                dir: inner.dir.clone(),
            });
        }
        let in_flight = InFlight {
            log_from,
            dequeue_ms,
            slot: inner.state.slot,
            from_pos: inner.state.pos,
            entries,
        };
        inner.state.in_flight = Some(in_flight.clone());
        Ok(in_flight)
    }

    /// The delivery that was started and not finished, if any.
    pub fn in_flight(&self) -> Result<Option<InFlight>, TimerIndexError> {
        Ok(self.lock().state.in_flight.clone())
    }

    /// The delivery in flight is over: every entry of it was delivered (or dropped as
    /// undeliverable), except `again`, which are indexed anew in the current slot to fire again.
    /// Durable at the next [`Self::flush`].
    pub fn finish_delivery(&self, again: &[TimerEntry]) -> Result<(), TimerIndexError> {
        let mut inner = self.lock();
        let Some(in_flight) = inner.state.in_flight.take() else {
            return Ok(());
        };
        if !again.is_empty() {
            // A crash after an earlier attempt at this may have written them already.
            let tail_from = in_flight.from_pos + in_flight.entries.len() as u64;
            let written: HashSet<u64> = inner
                .read_slot(in_flight.slot, tail_from, u64::MAX)?
                .iter()
                .map(|e| e.physical_offset)
                .collect();
            let missing: Vec<TimerEntry> = again
                .iter()
                .filter(|e| !written.contains(&e.physical_offset))
                .copied()
                .collect();
            inner.append(in_flight.slot, &missing)?;
        }
        inner.state.slot = in_flight.slot;
        inner.state.pos = in_flight.from_pos + in_flight.entries.len() as u64;
        Ok(())
    }

    /// Makes every earlier change durable: the slot files written, then the state.
    pub fn flush(&self) -> Result<(), TimerIndexError> {
        self.lock().write_state()
    }

    /// Recalls the timer of message `message_id` due at `due_ms`: durable when this returns,
    /// and its message is never delivered. A recall naming no timer changes nothing.
    pub fn recall(&self, due_ms: u64, message_id: &str) -> Result<(), TimerIndexError> {
        let mut inner = self.lock();
        if inner.recalls.insert((due_ms, message_id.to_string())) {
            if let Err(e) = inner.write_recalls() {
                inner.recalls.remove(&(due_ms, message_id.to_string()));
                return Err(e);
            }
        }
        Ok(())
    }

    /// Whether the timer of `message_id` due at `due_ms` was recalled.
    pub fn is_recalled(&self, due_ms: u64, message_id: &str) -> bool {
        let inner = self.lock();
        // Looked up by borrowed parts: most deliveries meet no recall at all.
        !inner.recalls.is_empty()
            && inner
                .recalls
                .range((due_ms, String::new())..)
                .take_while(|(due, _)| *due == due_ms)
                .any(|(_, id)| id == message_id)
    }

    /// Recalled timers not yet dropped (for tests and snapshots).
    pub fn recalls(&self) -> usize {
        self.lock().recalls.len()
    }

    /// [`Self::flush`], for async callers (it blocks for the fsyncs).
    pub async fn flush_async(&self) -> Result<(), TimerIndexError> {
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn entry(deliver_ms: u64, physical_offset: u64) -> TimerEntry {
        TimerEntry {
            deliver_ms,
            physical_offset,
        }
    }

    #[test]
    fn due_entries_come_slot_by_slot_and_only_up_to_now() {
        let dir = tempfile::tempdir().unwrap();
        let index = TimerIndex::open_dir(dir.path()).unwrap();
        index
            .ingest(&[entry(3000, 10), entry(1000, 30), entry(1000, 20)], 3)
            .unwrap();
        assert_eq!(index.due(999, 10).unwrap(), vec![]);
        assert_eq!(
            index.due(1000, 10).unwrap(),
            vec![entry(1000, 30), entry(1000, 20)]
        );
        assert_eq!(index.due(5000, 1).unwrap(), vec![entry(1000, 30)]);
        assert_eq!(index.pending().unwrap(), 3);
        assert_eq!(index.cursor().unwrap(), Some(3));
    }

    #[test]
    fn a_torn_record_at_a_slot_end_is_written_over_by_the_next_append() {
        let dir = tempfile::tempdir().unwrap();
        let index = TimerIndex::open_dir(dir.path()).unwrap();
        index.ingest(&[entry(1000, 1), entry(1000, 2)], 2).unwrap();
        // A crash (or a full disk) cut the next record short: five of its sixteen bytes.
        let slot_file = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_str().unwrap() != STATE_FILE)
            .unwrap();
        let mut file = OpenOptions::new().append(true).open(&slot_file).unwrap();
        file.write_all(&[0xAB; 5]).unwrap();
        index.ingest(&[entry(1000, 3)], 3).unwrap();
        assert_eq!(
            index.due(1000, 10).unwrap(),
            vec![entry(1000, 1), entry(1000, 2), entry(1000, 3)]
        );
    }

    #[test]
    fn a_finished_delivery_moves_on_and_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let index = TimerIndex::open_dir(dir.path()).unwrap();
            index.ingest(&[entry(1000, 1), entry(2000, 2)], 2).unwrap();
            let due = index.due(1500, 10).unwrap();
            assert_eq!(due, vec![entry(1000, 1)]);
            let in_flight = index.begin_delivery(77, 1500, due).unwrap();
            index.flush().unwrap();
            assert_eq!(index.in_flight().unwrap(), Some(in_flight));
            index.finish_delivery(&[]).unwrap();
            index.flush().unwrap();
        }
        let index = TimerIndex::open_dir(dir.path()).unwrap();
        assert_eq!(index.in_flight().unwrap(), None);
        assert_eq!(index.due(u64::MAX / 2, 10).unwrap(), vec![entry(2000, 2)]);
        assert_eq!(index.cursor().unwrap(), Some(2));
        assert_eq!(index.pending().unwrap(), 1);
    }

    #[test]
    fn a_recall_is_durable_when_answered_and_dropped_a_minute_after_its_second() {
        let dir = tempfile::tempdir().unwrap();
        {
            let index = TimerIndex::open_dir(dir.path()).unwrap();
            index
                .ingest(&[entry(5_000, 1), entry(5_000, 2)], 2)
                .unwrap();
            index.recall(5_000, "ID-1").unwrap();
            index.recall(5_000, "ID-1").unwrap();
            // No flush: the recall is on disk already, as a crash would find it.
        }
        let index = TimerIndex::open_dir(dir.path()).unwrap();
        assert!(index.is_recalled(5_000, "ID-1"));
        assert!(
            !index.is_recalled(5_000, "ID-2"),
            "another message of the second"
        );
        assert!(!index.is_recalled(6_000, "ID-1"), "another second");
        assert_eq!(index.recalls(), 1);

        let due = index.due(5_500, 10).unwrap();
        index.begin_delivery(1, 5_500, due).unwrap();
        index.finish_delivery(&[]).unwrap();
        index.flush().unwrap();
        assert!(
            index.is_recalled(5_000, "ID-1"),
            "kept while its second is recent"
        );
        assert!(index.due(66_000, 10).unwrap().is_empty());
        index.flush().unwrap();
        assert_eq!(index.recalls(), 0, "dropped a minute after its second");
        let index = TimerIndex::open_dir(dir.path()).unwrap();
        assert!(!index.is_recalled(5_000, "ID-1"));
    }

    #[test]
    fn a_timer_indexed_again_after_a_crash_is_indexed_once() {
        let dir = tempfile::tempdir().unwrap();
        {
            let index = TimerIndex::open_dir(dir.path()).unwrap();
            index.ingest(&[entry(1000, 1)], 1).unwrap();
            index.flush().unwrap();
            // Written, not flushed: the cursor on disk stays at 1.
            index.ingest(&[entry(2000, 2)], 2).unwrap();
        }
        let index = TimerIndex::open_dir(dir.path()).unwrap();
        assert_eq!(index.cursor().unwrap(), Some(1));
        index.ingest(&[entry(2000, 2)], 2).unwrap();
        assert_eq!(index.pending().unwrap(), 2);
    }

    #[test]
    fn entries_not_delivered_fire_again_and_late_ones_join_the_current_slot() {
        let dir = tempfile::tempdir().unwrap();
        let index = TimerIndex::open_dir(dir.path()).unwrap();
        index
            .ingest(&[entry(5000, 1), entry(5000, 2), entry(5000, 3)], 3)
            .unwrap();
        let due = index.due(5000, 10).unwrap();
        index.begin_delivery(0, 5000, due).unwrap();
        index.finish_delivery(&[entry(5000, 2)]).unwrap();
        // Due in the past by now: indexed into the current slot.
        index.ingest(&[entry(1000, 4)], 4).unwrap();
        assert_eq!(
            index.due(5000, 10).unwrap(),
            vec![entry(5000, 2), entry(1000, 4)]
        );
    }

    #[test]
    fn a_damaged_state_is_an_error_not_a_fresh_start() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(STATE_FILE), b"\x01garbage").unwrap();
        assert!(matches!(
            TimerIndex::open_dir(dir.path()),
            Err(TimerIndexError::Corrupt { .. })
        ));
    }
}
