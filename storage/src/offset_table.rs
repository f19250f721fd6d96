//! The broker's durable consumer-offset table: `topic@group` -> queue id -> offset.
//!
//! Two implementations of [`OffsetTable`] share one contract test suite:
//! - [`SledOffsetTable`]: a sled tree named [`OFFSETS_TREE`]. Key = `topic@group`, a `0x00`
//!   byte, then the queue id as a big-endian `u32` (so `topic@group\0` is an exact prefix of
//!   every queue of one key); value = a [`crate::record`] of [`OffsetRecord`].
//! - [`MemoryOffsetTable`]: a `BTreeMap`, for tests and embedded nodes without persistence.
//!
//! Rules (see `docs/offset-lifecycle.md` §1.A): a commit always writes, even a lower
//! offset, which is reported as [`CommitOutcome::Lowered`] and logged; a corrupt or
//! unknown-version record is an error naming the key, queue and file, never offset 0 or "absent".

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::clock::epoch_millis;
use crate::record::{self, Decoded};

/// Name of the sled tree holding consumer offsets.
pub const OFFSETS_TREE: &str = "consumer_offsets";

/// Record version of [`OffsetRecord`] values in [`OFFSETS_TREE`].
pub const OFFSET_RECORD_VERSION: u8 = 1;

/// Byte separating `topic@group` from the queue id in a stored key.
const KEY_SEPARATOR: u8 = 0x00;

/// `topic@group`, the key RocketMQ uses (names cannot contain `@`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OffsetKey {
    pub topic: String,
    pub group: String,
}

impl OffsetKey {
    pub fn new(topic: impl Into<String>, group: impl Into<String>) -> Self {
        OffsetKey {
            topic: topic.into(),
            group: group.into(),
        }
    }

    /// Whether this key can be stored: topic and group are non-empty and contain neither `@`
    /// nor a NUL byte (either would make the stored key ambiguous).
    pub fn is_valid(&self) -> bool {
        is_valid_name(&self.topic) && is_valid_name(&self.group)
    }

    /// `topic@group` followed by the `0x00` separator: the prefix of every stored key of this
    /// key, whatever the queue id.
    pub fn stored_prefix(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.topic.len() + self.group.len() + 6);
        self.push_prefix(&mut out);
        out
    }

    /// The sled key of (`self`, `queue_id`): [`Self::stored_prefix`] then `queue_id` as a
    /// big-endian `u32`.
    pub fn stored_key(&self, queue_id: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.topic.len() + self.group.len() + 6);
        self.push_prefix(&mut out);
        out.extend_from_slice(&queue_id.to_be_bytes());
        out
    }

    fn push_prefix(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.topic.as_bytes());
        out.push(b'@');
        out.extend_from_slice(self.group.as_bytes());
        out.push(KEY_SEPARATOR);
    }

    /// Parses a stored sled key back into (key, queue id). `file` only names the table in the
    /// [`OffsetTableError::MalformedKey`] error.
    pub fn parse_stored_key(raw: &[u8], file: &Path) -> Result<(OffsetKey, u32), OffsetTableError> {
        let malformed = || OffsetTableError::MalformedKey {
            key: escape_bytes(raw),
            file: file.to_path_buf(),
        };
        let Some((name, queue)) = raw.split_last_chunk::<4>() else {
            return Err(malformed());
        };
        let Some((&KEY_SEPARATOR, name)) = name.split_last() else {
            return Err(malformed());
        };
        let name = std::str::from_utf8(name).map_err(|_| malformed())?;
        let key: OffsetKey = name.parse().map_err(|_| malformed())?;
        Ok((key, u32::from_be_bytes(*queue)))
    }

    fn check(&self, file: &Path) -> Result<(), OffsetTableError> {
        if self.is_valid() {
            Ok(())
        } else {
            Err(OffsetTableError::MalformedKey {
                key: self.to_string(),
                file: file.to_path_buf(),
            })
        }
    }
}

/// Whether `name` can be a topic or group of a stored key: non-empty, no `@`, no NUL.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['@', '\0'])
}

fn check_group(group: &str, file: &Path) -> Result<(), OffsetTableError> {
    if is_valid_name(group) {
        Ok(())
    } else {
        Err(OffsetTableError::MalformedKey {
            key: format!("*@{group}"),
            file: file.to_path_buf(),
        })
    }
}

/// Printable form of raw key bytes: UTF-8 kept, anything else as `\xNN`.
fn escape_bytes(raw: &[u8]) -> String {
    raw.utf8_chunks()
        .flat_map(|chunk| {
            let valid = chunk.valid().escape_debug().collect::<String>();
            let invalid = chunk
                .invalid()
                .iter()
                .map(|b| format!("\\x{b:02x}"))
                .collect::<String>();
            [valid, invalid]
        })
        .collect()
}

impl fmt::Display for OffsetKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.topic, self.group)
    }
}

/// `"topic@group"` did not split into a valid topic and group.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a valid topic@group offset key")]
pub struct ParseOffsetKeyError {
    pub input: String,
}

impl FromStr for OffsetKey {
    type Err = ParseOffsetKeyError;

    /// Parses `topic@group`; exactly one `@`, both sides non-empty, no NUL byte.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key = s
            .split_once('@')
            .map(|(topic, group)| OffsetKey::new(topic, group))
            .filter(OffsetKey::is_valid);
        key.ok_or_else(|| ParseOffsetKeyError {
            input: s.to_owned(),
        })
    }
}

/// What a commit did, so callers can log a lowered offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitOutcome {
    Inserted,
    Advanced {
        previous: u64,
    },
    Unchanged,
    /// Stored although lower than before (RocketMQ always writes; callers log this).
    Lowered {
        previous: u64,
    },
}

impl CommitOutcome {
    fn of(previous: Option<u64>, offset: u64) -> Self {
        match previous {
            None => CommitOutcome::Inserted,
            Some(previous) if offset > previous => CommitOutcome::Advanced { previous },
            Some(previous) if offset == previous => CommitOutcome::Unchanged,
            Some(previous) => CommitOutcome::Lowered { previous },
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OffsetTableError {
    #[error("offset record for {key} queue {queue_id} in {file} is corrupt: {reason}")]
    Corrupt {
        key: String,
        queue_id: u32,
        file: PathBuf,
        reason: String,
    },
    #[error("offset record for {key} queue {queue_id} in {file} has unknown version {version}")]
    UnknownVersion {
        key: String,
        queue_id: u32,
        file: PathBuf,
        version: u8,
    },
    #[error("malformed offset-table key {key:?} in {file}")]
    MalformedKey { key: String, file: PathBuf },
    #[error("sled error on {file}")]
    Sled {
        file: PathBuf,
        #[source]
        source: sled::Error,
    },
}

/// The durable offset table. Implementations: [`SledOffsetTable`] and [`MemoryOffsetTable`],
/// held to one contract test suite.
pub trait OffsetTable: Send {
    /// Stores `offset`, even when lower than the stored one (see [`CommitOutcome::Lowered`]).
    fn commit(
        &mut self,
        key: &OffsetKey,
        queue_id: u32,
        offset: u64,
    ) -> Result<CommitOutcome, OffsetTableError>;
    /// `Ok(None)` when absent; a corrupt record is an error, never `None`.
    fn query(&self, key: &OffsetKey, queue_id: u32) -> Result<Option<u64>, OffsetTableError>;
    /// An explicit (admin) write, allowed to lower the offset.
    fn reset(
        &mut self,
        key: &OffsetKey,
        queue_id: u32,
        offset: u64,
    ) -> Result<(), OffsetTableError>;
    /// Removes every entry of `group`; returns how many were removed.
    fn remove_group(&mut self, group: &str) -> Result<usize, OffsetTableError>;
    /// Removes every group's entries on `topic` (a deleted topic); returns how many.
    fn remove_topic(&mut self, topic: &str) -> Result<usize, OffsetTableError>;
    /// Every (key, queue id, offset) of `group`, sorted.
    fn list_group(&self, group: &str) -> Result<Vec<(OffsetKey, u32, u64)>, OffsetTableError>;
    /// Every entry, sorted.
    fn list_all(&self) -> Result<Vec<(OffsetKey, u32, u64)>, OffsetTableError>;
    /// Makes every commit so far durable.
    fn flush(&mut self) -> Result<(), OffsetTableError>;
}

fn log_lowered(key: &OffsetKey, queue_id: u32, offset: u64, outcome: CommitOutcome) {
    if let CommitOutcome::Lowered { previous } = outcome {
        tracing::warn!(
            topic = %key.topic,
            group = %key.group,
            queue_id,
            offset,
            previous,
            "consumer offset lowered by commit"
        );
    }
}

fn log_reset(key: &OffsetKey, queue_id: u32, offset: u64, previous: Option<u64>) {
    tracing::info!(
        topic = %key.topic,
        group = %key.group,
        queue_id,
        offset,
        previous = ?previous,
        "consumer offset reset"
    );
}

/// The value stored for one (key, queue id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetRecord {
    pub offset: u64,
    /// Wall-clock time of the write, milliseconds since the Unix epoch.
    pub updated_at_ms: i64,
}

impl OffsetRecord {
    fn now(offset: u64) -> Self {
        OffsetRecord {
            offset,
            updated_at_ms: epoch_millis(),
        }
    }
}

/// [`OffsetTable`] over the sled tree [`OFFSETS_TREE`].
#[derive(Clone, Debug)]
pub struct SledOffsetTable {
    db: sled::Db,
    tree: sled::Tree,
    path: PathBuf,
}

impl SledOffsetTable {
    /// Removes every entry whose key matches; answers how many went.
    fn remove_matching(
        &mut self,
        matches: impl Fn(&OffsetKey) -> bool,
    ) -> Result<usize, OffsetTableError> {
        let mut doomed = Vec::new();
        for item in self.tree.iter().keys() {
            let raw_key = item.map_err(|e| self.sled_error(e))?;
            let (key, _) = OffsetKey::parse_stored_key(&raw_key, &self.path)?;
            if matches(&key) {
                doomed.push(raw_key);
            }
        }
        let mut removed = 0;
        for raw_key in doomed {
            if self
                .tree
                .remove(raw_key)
                .map_err(|e| self.sled_error(e))?
                .is_some()
            {
                removed += 1;
            }
        }
        Ok(removed)
    }
    /// Opens (creating if needed) the [`OFFSETS_TREE`] tree of `db`. `path_for_errors` is the
    /// database directory, named in every error.
    pub fn open(db: &sled::Db, path_for_errors: PathBuf) -> Result<Self, OffsetTableError> {
        let tree = db
            .open_tree(OFFSETS_TREE)
            .map_err(|source| OffsetTableError::Sled {
                file: path_for_errors.clone(),
                source,
            })?;
        Ok(SledOffsetTable {
            db: db.clone(),
            tree,
            path: path_for_errors,
        })
    }

    /// Opens a sled database of its own at `dir` (see [`crate::metadata::open_db`]) and the
    /// table in it.
    pub fn open_path(dir: impl AsRef<Path>) -> Result<Self, OffsetTableError> {
        let dir = dir.as_ref();
        let db = crate::metadata::open_db(dir).map_err(|e| OffsetTableError::Sled {
            file: e.path,
            source: e.source,
        })?;
        Self::open(&db, dir.to_path_buf())
    }

    /// The database path named in errors.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole stored record (offset and time of the last write), `Ok(None)` when absent.
    pub fn query_record(
        &self,
        key: &OffsetKey,
        queue_id: u32,
    ) -> Result<Option<OffsetRecord>, OffsetTableError> {
        key.check(&self.path)?;
        let raw = self
            .tree
            .get(key.stored_key(queue_id))
            .map_err(|e| self.sled_error(e))?;
        raw.map(|raw| self.decode(key, queue_id, &raw)).transpose()
    }

    fn sled_error(&self, source: sled::Error) -> OffsetTableError {
        OffsetTableError::Sled {
            file: self.path.clone(),
            source,
        }
    }

    fn decode(
        &self,
        key: &OffsetKey,
        queue_id: u32,
        raw: &[u8],
    ) -> Result<OffsetRecord, OffsetTableError> {
        match record::decode::<OffsetRecord>(raw, OFFSET_RECORD_VERSION) {
            Decoded::Value(v) => Ok(v),
            Decoded::Corrupt { reason } => Err(OffsetTableError::Corrupt {
                key: key.to_string(),
                queue_id,
                file: self.path.clone(),
                reason,
            }),
            Decoded::UnknownVersion { version } => Err(OffsetTableError::UnknownVersion {
                key: key.to_string(),
                queue_id,
                file: self.path.clone(),
                version,
            }),
        }
    }

    /// Every entry, decoded, in stored-key order; `keep` filters before values are decoded.
    fn scan(
        &self,
        keep: impl Fn(&OffsetKey) -> bool,
    ) -> Result<Vec<(OffsetKey, u32, u64)>, OffsetTableError> {
        let mut out = Vec::new();
        for item in self.tree.iter() {
            let (raw_key, raw_value) = item.map_err(|e| self.sled_error(e))?;
            let (key, queue_id) = OffsetKey::parse_stored_key(&raw_key, &self.path)?;
            if keep(&key) {
                let value = self.decode(&key, queue_id, &raw_value)?;
                out.push((key, queue_id, value.offset));
            }
        }
        // Stored-key byte order differs from `OffsetKey` order ('@' sorts after '-'), so sort
        // to match the contract (and `MemoryOffsetTable`).
        out.sort_unstable();
        Ok(out)
    }
}

impl OffsetTable for SledOffsetTable {
    fn commit(
        &mut self,
        key: &OffsetKey,
        queue_id: u32,
        offset: u64,
    ) -> Result<CommitOutcome, OffsetTableError> {
        key.check(&self.path)?;
        let stored_key = key.stored_key(queue_id);
        // Read first: a corrupt previous record is reported, not silently overwritten.
        let previous = match self.tree.get(&stored_key).map_err(|e| self.sled_error(e))? {
            Some(raw) => Some(self.decode(key, queue_id, &raw)?.offset),
            None => None,
        };
        let value = record::encode(OFFSET_RECORD_VERSION, &OffsetRecord::now(offset));
        self.tree
            .insert(stored_key, value)
            .map_err(|e| self.sled_error(e))?;
        let outcome = CommitOutcome::of(previous, offset);
        log_lowered(key, queue_id, offset, outcome);
        Ok(outcome)
    }

    fn query(&self, key: &OffsetKey, queue_id: u32) -> Result<Option<u64>, OffsetTableError> {
        Ok(self.query_record(key, queue_id)?.map(|r| r.offset))
    }

    /// Overwrites whatever is stored, a corrupt record included: an explicit reset is how an
    /// operator repairs one.
    fn reset(
        &mut self,
        key: &OffsetKey,
        queue_id: u32,
        offset: u64,
    ) -> Result<(), OffsetTableError> {
        key.check(&self.path)?;
        let value = record::encode(OFFSET_RECORD_VERSION, &OffsetRecord::now(offset));
        let previous = self
            .tree
            .insert(key.stored_key(queue_id), value)
            .map_err(|e| self.sled_error(e))?;
        let previous = previous.and_then(|raw| {
            record::decode::<OffsetRecord>(&raw, OFFSET_RECORD_VERSION)
                .value()
                .map(|r| r.offset)
        });
        log_reset(key, queue_id, offset, previous);
        Ok(())
    }

    fn remove_group(&mut self, group: &str) -> Result<usize, OffsetTableError> {
        check_group(group, &self.path)?;
        self.remove_matching(|key| key.group == group)
    }

    fn remove_topic(&mut self, topic: &str) -> Result<usize, OffsetTableError> {
        self.remove_matching(|key| key.topic == topic)
    }

    fn list_group(&self, group: &str) -> Result<Vec<(OffsetKey, u32, u64)>, OffsetTableError> {
        check_group(group, &self.path)?;
        self.scan(|key| key.group == group)
    }

    fn list_all(&self) -> Result<Vec<(OffsetKey, u32, u64)>, OffsetTableError> {
        self.scan(|_| true)
    }

    fn flush(&mut self) -> Result<(), OffsetTableError> {
        self.db.flush().map_err(|e| self.sled_error(e))?;
        Ok(())
    }
}

/// In-memory [`OffsetTable`]: nothing survives the process; `flush` does nothing.
#[derive(Clone, Debug, Default)]
pub struct MemoryOffsetTable {
    entries: BTreeMap<(OffsetKey, u32), u64>,
}

impl MemoryOffsetTable {
    /// The path named in this table's errors.
    pub const PATH: &'static str = "<memory>";

    pub fn new() -> Self {
        Self::default()
    }

    fn path() -> &'static Path {
        Path::new(Self::PATH)
    }
}

impl OffsetTable for MemoryOffsetTable {
    fn commit(
        &mut self,
        key: &OffsetKey,
        queue_id: u32,
        offset: u64,
    ) -> Result<CommitOutcome, OffsetTableError> {
        key.check(Self::path())?;
        let previous = self.entries.insert((key.clone(), queue_id), offset);
        let outcome = CommitOutcome::of(previous, offset);
        log_lowered(key, queue_id, offset, outcome);
        Ok(outcome)
    }

    fn query(&self, key: &OffsetKey, queue_id: u32) -> Result<Option<u64>, OffsetTableError> {
        key.check(Self::path())?;
        Ok(self.entries.get(&(key.clone(), queue_id)).copied())
    }

    fn reset(
        &mut self,
        key: &OffsetKey,
        queue_id: u32,
        offset: u64,
    ) -> Result<(), OffsetTableError> {
        key.check(Self::path())?;
        let previous = self.entries.insert((key.clone(), queue_id), offset);
        log_reset(key, queue_id, offset, previous);
        Ok(())
    }

    fn remove_group(&mut self, group: &str) -> Result<usize, OffsetTableError> {
        check_group(group, Self::path())?;
        let before = self.entries.len();
        self.entries.retain(|(key, _), _| key.group != group);
        Ok(before - self.entries.len())
    }

    fn remove_topic(&mut self, topic: &str) -> Result<usize, OffsetTableError> {
        let before = self.entries.len();
        self.entries.retain(|(key, _), _| key.topic != topic);
        Ok(before - self.entries.len())
    }

    fn list_group(&self, group: &str) -> Result<Vec<(OffsetKey, u32, u64)>, OffsetTableError> {
        check_group(group, Self::path())?;
        Ok(self
            .entries
            .iter()
            .filter(|((key, _), _)| key.group == group)
            .map(|((key, queue_id), offset)| (key.clone(), *queue_id, *offset))
            .collect())
    }

    fn list_all(&self) -> Result<Vec<(OffsetKey, u32, u64)>, OffsetTableError> {
        Ok(self
            .entries
            .iter()
            .map(|((key, queue_id), offset)| (key.clone(), *queue_id, *offset))
            .collect())
    }

    fn flush(&mut self) -> Result<(), OffsetTableError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_key_layout() {
        let key = OffsetKey::new("%RETRY%g", "g");
        let raw = key.stored_key(0x0102_0304);
        assert_eq!(raw, b"%RETRY%g@g\0\x01\x02\x03\x04");
        assert!(raw.starts_with(&key.stored_prefix()));
        let parsed = OffsetKey::parse_stored_key(&raw, Path::new("x")).expect("parses");
        assert_eq!(parsed, (key, 0x0102_0304));
    }

    #[test]
    fn malformed_stored_keys() {
        for raw in [
            &b""[..],
            b"\0\0\0\0",
            b"t@g\x01\0\0\0\x01",
            b"tg\0\0\0\0\x01",
            b"@g\0\0\0\0\x01",
            b"t@\0\0\0\0\x01",
            b"t@g@h\0\0\0\0\x01",
            b"t@\xffg\0\0\0\0\x01",
        ] {
            match OffsetKey::parse_stored_key(raw, Path::new("/db")) {
                Err(OffsetTableError::MalformedKey { file, .. }) => {
                    assert_eq!(file, Path::new("/db"))
                }
                other => panic!("{raw:?}: expected MalformedKey, got {other:?}"),
            }
        }
    }

    #[test]
    fn display_and_parse() {
        let key = OffsetKey::new("TopicTest", "please_rename_unique_group_name");
        assert_eq!(key.to_string(), "TopicTest@please_rename_unique_group_name");
        assert_eq!(key.to_string().parse::<OffsetKey>(), Ok(key));
        assert!("no-at-sign".parse::<OffsetKey>().is_err());
        assert!("a@b@c".parse::<OffsetKey>().is_err());
    }

    #[test]
    fn escape_keeps_text_and_hexes_bytes() {
        assert_eq!(escape_bytes(b"t@g\0\xff"), "t@g\\0\\xff");
    }
}
