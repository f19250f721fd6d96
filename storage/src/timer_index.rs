//! The durable index of pending timer messages (RocketMQ 5's timer wheel and timer log).
//!
//! A timer message itself is an ordinary commit-log record in the timer topic; this sled tree,
//! [`TIMER_INDEX_TREE`] in its own database ([`TIMER_INDEX_DIR`] in the store's directory,
//! opened with a small cache of [`TIMER_INDEX_CACHE_BYTES`] so that a million pending timers
//! cost disk, not memory), says when each one is due. It holds
//! three kinds of keys, each behind its own one-byte prefix so one tree (and so one atomic
//! `apply_batch`) covers them all:
//!
//! - `e` + deliver time (ms, big-endian `u64`) + commit-log physical offset (big-endian `u64`):
//!   one pending timer. Keys sort by due time, then by log order, so the due window is one range
//!   scan from the start and nothing but the window is ever read into memory. Values are empty:
//!   the message is in the commit log.
//! - `c`: the ingest cursor, the next timer-queue offset not yet indexed. It is written in the
//!   same batch as the entries it covers, so an entry is indexed once whatever the crash.
//! - `f`: the delivery in flight, if any: the entries being copied to their real topics and the
//!   commit-log end before the copies were appended. Written and flushed before the copies are
//!   appended, removed with the entries once the copies are durable; see [`InFlight`].
//!
//! Values go through the [`record`](crate::record) codec; one that does not decode is an error
//! naming the key, never taken as "no cursor" (which would index every timer again).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::record::{self, Decoded};

/// Name of the sled tree.
pub const TIMER_INDEX_TREE: &str = "timer_index";

/// The index's own sled database, under the message store's directory.
pub const TIMER_INDEX_DIR: &str = "timerindex";

/// sled's page cache for the index: the due window and the tree's upper levels fit; the rest
/// of the pending timers stays on disk.
pub const TIMER_INDEX_CACHE_BYTES: u64 = 8 << 20;

const RECORD_VERSION: u8 = 1;
const ENTRY_PREFIX: u8 = b'e';
const CURSOR_KEY: &[u8] = b"c";
const IN_FLIGHT_KEY: &[u8] = b"f";

/// One pending timer: when it is due and where its message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TimerEntry {
    /// Due time, epoch ms (already rounded to the timer precision).
    pub deliver_ms: u64,
    /// Commit-log physical offset of the message in the timer topic.
    pub physical_offset: u64,
}

impl TimerEntry {
    fn key(&self) -> [u8; 17] {
        let mut key = [0u8; 17];
        key[0] = ENTRY_PREFIX;
        key[1..9].copy_from_slice(&self.deliver_ms.to_be_bytes());
        key[9..].copy_from_slice(&self.physical_offset.to_be_bytes());
        key
    }

    fn from_key(key: &[u8]) -> Option<TimerEntry> {
        let (&prefix, rest) = key.split_first()?;
        if prefix != ENTRY_PREFIX || rest.len() != 16 {
            return None;
        }
        let (due, offset) = rest.split_at(8);
        Some(TimerEntry {
            deliver_ms: u64::from_be_bytes(due.try_into().ok()?),
            physical_offset: u64::from_be_bytes(offset.try_into().ok()?),
        })
    }
}

/// A delivery that was started: `entries` are being appended to their real topics, every copy
/// at a commit-log position at or past `log_from` and stamped with `dequeue_ms` as its delivery
/// time. After a crash, recovery looks at the records from `log_from` on: an entry whose copy is
/// there was delivered and is dropped, the others stay pending.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    pub log_from: u64,
    pub dequeue_ms: i64,
    pub entries: Vec<TimerEntry>,
}

#[derive(Debug, thiserror::Error)]
pub enum TimerIndexError {
    #[error("sled error on the timer index in {file}")]
    Sled {
        file: PathBuf,
        #[source]
        source: sled::Error,
    },
    #[error(transparent)]
    Open(#[from] crate::metadata::OpenDbError),
    #[error("timer index record {key} in {file} is unreadable: {reason}")]
    Corrupt {
        file: PathBuf,
        key: String,
        reason: String,
    },
}

/// The timer index; cheap to clone.
#[derive(Clone, Debug)]
pub struct TimerIndex {
    tree: sled::Tree,
    path: PathBuf,
}

impl TimerIndex {
    /// Opens (creating if needed) the index's own database in `dir`.
    pub fn open_dir(dir: &Path) -> Result<Self, TimerIndexError> {
        let db = crate::metadata::open_db_with(
            sled::Config::new()
                .path(dir)
                .cache_capacity(TIMER_INDEX_CACHE_BYTES),
        )?;
        Self::open(&db, dir.to_path_buf())
    }

    /// Opens (creating if needed) the tree in `db`; `path_for_errors` names the database.
    pub fn open(db: &sled::Db, path_for_errors: PathBuf) -> Result<Self, TimerIndexError> {
        let tree = db
            .open_tree(TIMER_INDEX_TREE)
            .map_err(|source| TimerIndexError::Sled {
                file: path_for_errors.clone(),
                source,
            })?;
        Ok(TimerIndex {
            tree,
            path: path_for_errors,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sled_error(&self, source: sled::Error) -> TimerIndexError {
        TimerIndexError::Sled {
            file: self.path.clone(),
            source,
        }
    }

    fn decode<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
        raw: &[u8],
    ) -> Result<T, TimerIndexError> {
        let corrupt = |reason: String| TimerIndexError::Corrupt {
            file: self.path.clone(),
            key: key.to_string(),
            reason,
        };
        match record::decode::<T>(raw, RECORD_VERSION) {
            Decoded::Value(value) => Ok(value),
            Decoded::Corrupt { reason } => Err(corrupt(reason)),
            Decoded::UnknownVersion { version } => {
                Err(corrupt(format!("unknown record version {version}")))
            }
        }
    }

    /// The next timer-queue offset to index; `None` before the first ingest.
    pub fn cursor(&self) -> Result<Option<u64>, TimerIndexError> {
        match self.tree.get(CURSOR_KEY).map_err(|e| self.sled_error(e))? {
            Some(raw) => Ok(Some(self.decode("cursor", &raw)?)),
            None => Ok(None),
        }
    }

    /// Indexes `entries` and moves the ingest cursor to `cursor`, atomically (not yet durable:
    /// see [`Self::flush`]).
    pub fn ingest(&self, entries: &[TimerEntry], cursor: u64) -> Result<(), TimerIndexError> {
        let mut batch = sled::Batch::default();
        for entry in entries {
            batch.insert(&entry.key()[..], &[][..]);
        }
        batch.insert(CURSOR_KEY, record::encode(RECORD_VERSION, &cursor));
        self.tree.apply_batch(batch).map_err(|e| self.sled_error(e))
    }

    /// At most `limit` entries due at or before `now_ms`, earliest first. Reads only them.
    pub fn due(&self, now_ms: u64, limit: usize) -> Result<Vec<TimerEntry>, TimerIndexError> {
        let start = TimerEntry {
            deliver_ms: 0,
            physical_offset: 0,
        }
        .key();
        let end = TimerEntry {
            deliver_ms: now_ms,
            physical_offset: u64::MAX,
        }
        .key();
        let mut due = Vec::new();
        for item in self.tree.range(start..=end).take(limit) {
            let (key, _) = item.map_err(|e| self.sled_error(e))?;
            if let Some(entry) = TimerEntry::from_key(&key) {
                due.push(entry);
            }
        }
        Ok(due)
    }

    /// The earliest pending entry.
    pub fn first(&self) -> Result<Option<TimerEntry>, TimerIndexError> {
        let start = [ENTRY_PREFIX];
        let end = [ENTRY_PREFIX + 1];
        match self.tree.range(&start[..]..&end[..]).next() {
            Some(item) => {
                let (key, _) = item.map_err(|e| self.sled_error(e))?;
                Ok(TimerEntry::from_key(&key))
            }
            None => Ok(None),
        }
    }

    /// Pending entries (a full scan: for tests and snapshots, not the hot path).
    pub fn pending(&self) -> usize {
        self.tree.scan_prefix([ENTRY_PREFIX]).count()
    }

    /// Records the delivery about to start (not yet durable: see [`Self::flush`]).
    pub fn begin_delivery(&self, in_flight: &InFlight) -> Result<(), TimerIndexError> {
        self.tree
            .insert(IN_FLIGHT_KEY, record::encode(RECORD_VERSION, in_flight))
            .map_err(|e| self.sled_error(e))?;
        Ok(())
    }

    /// The delivery that was started and not finished, if any.
    pub fn in_flight(&self) -> Result<Option<InFlight>, TimerIndexError> {
        match self
            .tree
            .get(IN_FLIGHT_KEY)
            .map_err(|e| self.sled_error(e))?
        {
            Some(raw) => Ok(Some(self.decode("in-flight delivery", &raw)?)),
            None => Ok(None),
        }
    }

    /// Removes `delivered` and the in-flight record, atomically: the delivery is over.
    pub fn finish_delivery(&self, delivered: &[TimerEntry]) -> Result<(), TimerIndexError> {
        let mut batch = sled::Batch::default();
        for entry in delivered {
            batch.remove(&entry.key()[..]);
        }
        batch.remove(IN_FLIGHT_KEY);
        self.tree.apply_batch(batch).map_err(|e| self.sled_error(e))
    }

    /// Makes every earlier write durable.
    pub fn flush(&self) -> Result<(), TimerIndexError> {
        self.tree.flush().map_err(|e| self.sled_error(e))?;
        Ok(())
    }

    /// Makes every earlier write durable without blocking the caller's thread.
    pub async fn flush_async(&self) -> Result<(), TimerIndexError> {
        self.tree
            .flush_async()
            .await
            .map_err(|e| self.sled_error(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &Path) -> TimerIndex {
        let db = sled::open(dir).unwrap();
        TimerIndex::open(&db, dir.to_path_buf()).unwrap()
    }

    fn entry(deliver_ms: u64, physical_offset: u64) -> TimerEntry {
        TimerEntry {
            deliver_ms,
            physical_offset,
        }
    }

    #[test]
    fn due_entries_come_earliest_first_and_only_up_to_now() {
        let dir = tempfile::tempdir().unwrap();
        let index = open(dir.path());
        index
            .ingest(&[entry(3000, 10), entry(1000, 30), entry(1000, 20)], 3)
            .unwrap();
        assert_eq!(index.due(999, 10).unwrap(), vec![]);
        assert_eq!(
            index.due(1000, 10).unwrap(),
            vec![entry(1000, 20), entry(1000, 30)]
        );
        assert_eq!(index.due(5000, 1).unwrap(), vec![entry(1000, 20)]);
        assert_eq!(index.first().unwrap(), Some(entry(1000, 20)));
        assert_eq!(index.pending(), 3);
        assert_eq!(index.cursor().unwrap(), Some(3));
    }

    #[test]
    fn a_finished_delivery_removes_its_entries_and_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let index = open(dir.path());
            index.ingest(&[entry(1000, 1), entry(2000, 2)], 2).unwrap();
            let in_flight = InFlight {
                log_from: 77,
                dequeue_ms: 1000,
                entries: vec![entry(1000, 1)],
            };
            index.begin_delivery(&in_flight).unwrap();
            assert_eq!(index.in_flight().unwrap(), Some(in_flight));
            index.finish_delivery(&[entry(1000, 1)]).unwrap();
            index.flush().unwrap();
        }
        let index = open(dir.path());
        assert_eq!(index.in_flight().unwrap(), None);
        assert_eq!(index.due(u64::MAX, 10).unwrap(), vec![entry(2000, 2)]);
        assert_eq!(index.cursor().unwrap(), Some(2));
    }

    #[test]
    fn a_damaged_cursor_is_an_error_not_a_fresh_start() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let index = TimerIndex::open(&db, dir.path().to_path_buf()).unwrap();
        db.open_tree(TIMER_INDEX_TREE)
            .unwrap()
            .insert(CURSOR_KEY, b"\x01garbage".to_vec())
            .unwrap();
        assert!(matches!(
            index.cursor(),
            Err(TimerIndexError::Corrupt { .. })
        ));
    }
}
