//! What pop consumption keeps on disk, in place of RocketMQ's revive topic
//! (`rmq_sys_REVIVE_LOG_<cluster>`) and its `messageRequestMode.json`.
//!
//! Two sled trees in the broker's metadata database:
//! - [`POP_CHECKPOINTS_TREE`]: one entry per popped and not yet acknowledged message, keyed by
//!   group, topic, queue id and queue offset ([`CheckpointKey::stored`], so one group's or one
//!   topic's entries can be found by scanning), valued with the pop time and invisible time of
//!   the pop that handed it out. An acknowledgement removes the entry; an entry whose invisible
//!   time has passed is revived (copied to the group's pop retry topic) and then removed.
//! - [`REQUEST_MODES_TREE`]: per `topic@group`, whether the broker hands its queues out for pull
//!   or for pop (SET_MESSAGE_REQUEST_MODE), and how many consumers share a queue.
//! - [`ORDERLY_TREE`]: per group, topic and queue, orderly pop's state (the batch out and how
//!   often each offset was handed out; Java's `consumerOrderInfo.json`), as a value the actors
//!   define.
//!
//! A checkpoint is written before the group's offset moves past its message, and both live in
//! the same sled database, whose log recovers a prefix of what was written: after a crash an
//! offset past a popped message never survives without the checkpoint that accounts for it.
//! Values go through the [`record`](crate::record) codec; one that does not decode is an error
//! naming its key, never skipped (a skipped checkpoint is a message that is never redelivered).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::record::{self, Decoded};

/// Name of the checkpoint tree.
pub const POP_CHECKPOINTS_TREE: &str = "pop_checkpoints";
/// Name of the request-mode tree.
pub const REQUEST_MODES_TREE: &str = "message_request_modes";
/// Name of the tree of orderly pops' per-queue state.
pub const ORDERLY_TREE: &str = "pop_orderly";

const CHECKPOINT_RECORD_VERSION: u8 = 1;
const REQUEST_MODE_RECORD_VERSION: u8 = 1;
const ORDERLY_RECORD_VERSION: u8 = 1;

/// Which popped message a checkpoint stands for. `topic` is the topic the message was read
/// from: the consumer's topic, or the group's pop retry topic for a revived message.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CheckpointKey {
    pub group: String,
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: u64,
}

impl CheckpointKey {
    /// `group\0topic\0` then the queue id and offset big-endian: group and topic names cannot
    /// hold a NUL byte, so the prefix of one group (or group and topic) is exact.
    pub fn stored(&self) -> Vec<u8> {
        let mut out = Self::prefix(&self.group, Some(&self.topic));
        out.extend_from_slice(&self.queue_id.to_be_bytes());
        out.extend_from_slice(&self.queue_offset.to_be_bytes());
        out
    }

    fn prefix(group: &str, topic: Option<&str>) -> Vec<u8> {
        let mut out = Vec::with_capacity(group.len() + topic.map_or(0, str::len) + 14);
        out.extend_from_slice(group.as_bytes());
        out.push(0);
        if let Some(topic) = topic {
            out.extend_from_slice(topic.as_bytes());
            out.push(0);
        }
        out
    }

    fn parse(raw: &[u8]) -> Option<CheckpointKey> {
        let group_end = raw.iter().position(|b| *b == 0)?;
        let rest = &raw[group_end + 1..];
        let topic_end = rest.iter().position(|b| *b == 0)?;
        let numbers = &rest[topic_end + 1..];
        if numbers.len() != 12 {
            return None;
        }
        let queue_id = u32::from_be_bytes(numbers[..4].try_into().ok()?);
        let queue_offset = u64::from_be_bytes(numbers[4..].try_into().ok()?);
        Some(CheckpointKey {
            group: String::from_utf8(raw[..group_end].to_vec()).ok()?,
            topic: String::from_utf8(rest[..topic_end].to_vec()).ok()?,
            queue_id,
            queue_offset,
        })
    }
}

/// The pop that handed a message out: when, and for how long it stays invisible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointTimes {
    /// Epoch milliseconds of the pop (or of the last invisible-time change).
    pub pop_time_ms: i64,
    pub invisible_ms: i64,
    /// The first offset of the pop's batch in this queue: the receipt's checkpoint offset.
    pub batch_start_offset: u64,
}

impl CheckpointTimes {
    /// When the message becomes visible again unless acknowledged.
    pub fn visible_at_ms(&self) -> i64 {
        self.pop_time_ms.saturating_add(self.invisible_ms)
    }
}

/// One checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub key: CheckpointKey,
    pub times: CheckpointTimes,
}

/// How the broker hands a topic's queues to one group (Java's `MessageRequestMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestMode {
    Pull,
    Pop,
}

/// A group's request mode for one topic, and for pop how many following consumers' queues each
/// consumer also pops (`popShareQueueNum`; 0 or less: every consumer pops every queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestModeEntry {
    pub mode: RequestMode,
    pub pop_share_queue_num: i32,
}

#[derive(Debug, thiserror::Error)]
pub enum PopStateError {
    #[error("sled error on the pop state in {file}")]
    Sled {
        file: PathBuf,
        #[source]
        source: sled::Error,
    },
    #[error("pop state entry {key} in {file} is unreadable: {reason}")]
    Corrupt {
        file: PathBuf,
        key: String,
        reason: String,
    },
}

/// Both trees; cheap to clone.
#[derive(Clone, Debug)]
pub struct PopState {
    checkpoints: sled::Tree,
    modes: sled::Tree,
    orderly: sled::Tree,
    path: PathBuf,
}

fn escaped(raw: &[u8]) -> String {
    raw.escape_ascii().to_string()
}

impl PopState {
    /// Opens (creating if needed) both trees in `db`; `path_for_errors` names the database.
    pub fn open(db: &sled::Db, path_for_errors: PathBuf) -> Result<Self, PopStateError> {
        let open = |name: &str| {
            db.open_tree(name).map_err(|source| PopStateError::Sled {
                file: path_for_errors.clone(),
                source,
            })
        };
        Ok(PopState {
            checkpoints: open(POP_CHECKPOINTS_TREE)?,
            modes: open(REQUEST_MODES_TREE)?,
            orderly: open(ORDERLY_TREE)?,
            path: path_for_errors,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sled_error(&self, source: sled::Error) -> PopStateError {
        PopStateError::Sled {
            file: self.path.clone(),
            source,
        }
    }

    fn corrupt(&self, key: &[u8], reason: impl Into<String>) -> PopStateError {
        PopStateError::Corrupt {
            file: self.path.clone(),
            key: escaped(key),
            reason: reason.into(),
        }
    }

    fn decode<T: serde::de::DeserializeOwned>(
        &self,
        key: &[u8],
        raw: &[u8],
        version: u8,
    ) -> Result<T, PopStateError> {
        match record::decode::<T>(raw, version) {
            Decoded::Value(value) => Ok(value),
            Decoded::Corrupt { reason } => Err(self.corrupt(key, reason)),
            Decoded::UnknownVersion { version } => {
                Err(self.corrupt(key, format!("unknown record version {version}")))
            }
        }
    }

    /// Records checkpoints, all or none (not yet durable: see the module docs and
    /// [`Self::flush`]).
    pub fn put_checkpoints(&self, checkpoints: &[Checkpoint]) -> Result<(), PopStateError> {
        let mut batch = sled::Batch::default();
        for checkpoint in checkpoints {
            batch.insert(
                checkpoint.key.stored(),
                record::encode(CHECKPOINT_RECORD_VERSION, &checkpoint.times),
            );
        }
        self.checkpoints
            .apply_batch(batch)
            .map_err(|e| self.sled_error(e))
    }

    /// Removes one checkpoint, answering what it held.
    pub fn remove_checkpoint(
        &self,
        key: &CheckpointKey,
    ) -> Result<Option<CheckpointTimes>, PopStateError> {
        let stored = key.stored();
        let Some(raw) = self
            .checkpoints
            .remove(&stored)
            .map_err(|e| self.sled_error(e))?
        else {
            return Ok(None);
        };
        self.decode(&stored, &raw, CHECKPOINT_RECORD_VERSION)
            .map(Some)
    }

    /// Every checkpoint, in key order.
    pub fn checkpoints(&self) -> Result<Vec<Checkpoint>, PopStateError> {
        let mut out = Vec::new();
        for entry in self.checkpoints.iter() {
            let (key, raw) = entry.map_err(|e| self.sled_error(e))?;
            let parsed = CheckpointKey::parse(&key)
                .ok_or_else(|| self.corrupt(&key, "the key is not group, topic, queue, offset"))?;
            let times = self.decode(&key, &raw, CHECKPOINT_RECORD_VERSION)?;
            out.push(Checkpoint { key: parsed, times });
        }
        Ok(out)
    }

    /// Removes every checkpoint of `group` (all topics), answering how many went.
    pub fn remove_group(&self, group: &str) -> Result<usize, PopStateError> {
        let mut batch = sled::Batch::default();
        let mut count = 0;
        for entry in self
            .checkpoints
            .scan_prefix(CheckpointKey::prefix(group, None))
        {
            let (key, _) = entry.map_err(|e| self.sled_error(e))?;
            batch.remove(key);
            count += 1;
        }
        self.checkpoints
            .apply_batch(batch)
            .map_err(|e| self.sled_error(e))?;
        Ok(count)
    }

    /// Sets a group's request mode for a topic.
    pub fn put_request_mode(
        &self,
        topic: &str,
        group: &str,
        entry: RequestModeEntry,
    ) -> Result<(), PopStateError> {
        self.modes
            .insert(
                format!("{topic}@{group}"),
                record::encode(REQUEST_MODE_RECORD_VERSION, &entry),
            )
            .map_err(|e| self.sled_error(e))?;
        Ok(())
    }

    /// A group's request mode for a topic, if one was set.
    pub fn request_mode(
        &self,
        topic: &str,
        group: &str,
    ) -> Result<Option<RequestModeEntry>, PopStateError> {
        let key = format!("{topic}@{group}");
        let Some(raw) = self.modes.get(&key).map_err(|e| self.sled_error(e))? else {
            return Ok(None);
        };
        self.decode(key.as_bytes(), &raw, REQUEST_MODE_RECORD_VERSION)
            .map(Some)
    }

    /// Records one queue's orderly state, or forgets it (`None`).
    pub fn put_orderly<T: Serialize>(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        value: Option<&T>,
    ) -> Result<(), PopStateError> {
        let key = CheckpointKey {
            group: group.to_owned(),
            topic: topic.to_owned(),
            queue_id,
            queue_offset: 0,
        }
        .stored();
        match value {
            Some(value) => self
                .orderly
                .insert(key, record::encode(ORDERLY_RECORD_VERSION, value))
                .map(|_| ()),
            None => self.orderly.remove(key).map(|_| ()),
        }
        .map_err(|e| self.sled_error(e))
    }

    /// Every queue's orderly state: (group, topic, queue id, state).
    pub fn orderly_states<T: serde::de::DeserializeOwned>(
        &self,
    ) -> Result<Vec<(String, String, u32, T)>, PopStateError> {
        let mut out = Vec::new();
        for entry in self.orderly.iter() {
            let (key, raw) = entry.map_err(|e| self.sled_error(e))?;
            let parsed = CheckpointKey::parse(&key)
                .ok_or_else(|| self.corrupt(&key, "the key is not group, topic, queue"))?;
            let value = self.decode(&key, &raw, ORDERLY_RECORD_VERSION)?;
            out.push((parsed.group, parsed.topic, parsed.queue_id, value));
        }
        Ok(out)
    }

    /// Forgets every orderly state of `group`.
    pub fn remove_orderly_group(&self, group: &str) -> Result<(), PopStateError> {
        let mut batch = sled::Batch::default();
        for entry in self.orderly.scan_prefix(CheckpointKey::prefix(group, None)) {
            let (key, _) = entry.map_err(|e| self.sled_error(e))?;
            batch.remove(key);
        }
        self.orderly
            .apply_batch(batch)
            .map_err(|e| self.sled_error(e))
    }

    /// Makes every earlier write durable.
    pub fn flush(&self) -> Result<(), PopStateError> {
        self.checkpoints.flush().map_err(|e| self.sled_error(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(group: &str, topic: &str, queue_id: u32, queue_offset: u64) -> CheckpointKey {
        CheckpointKey {
            group: group.into(),
            topic: topic.into(),
            queue_id,
            queue_offset,
        }
    }

    fn times(pop_time_ms: i64) -> CheckpointTimes {
        CheckpointTimes {
            pop_time_ms,
            invisible_ms: 30_000,
            batch_start_offset: 0,
        }
    }

    #[test]
    fn checkpoints_survive_a_reopen_and_leave_one_by_one_or_by_group() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = crate::metadata::open_db(dir.path()).unwrap();
            let state = PopState::open(&db, dir.path().to_path_buf()).unwrap();
            state
                .put_checkpoints(&[
                    Checkpoint {
                        key: key("g1", "t", 0, 7),
                        times: times(1_000),
                    },
                    Checkpoint {
                        key: key("g1", "%RETRY%g1_t", 0, 1),
                        times: times(2_000),
                    },
                    Checkpoint {
                        key: key("g10", "t", 3, u64::MAX),
                        times: times(3_000),
                    },
                ])
                .unwrap();
            state.flush().unwrap();
        }
        let db = crate::metadata::open_db(dir.path()).unwrap();
        let state = PopState::open(&db, dir.path().to_path_buf()).unwrap();
        let all = state.checkpoints().unwrap();
        assert_eq!(all.len(), 3);
        assert!(all.contains(&Checkpoint {
            key: key("g10", "t", 3, u64::MAX),
            times: times(3_000)
        }));
        assert_eq!(
            state.remove_checkpoint(&key("g1", "t", 0, 7)).unwrap(),
            Some(times(1_000))
        );
        assert_eq!(
            state.remove_checkpoint(&key("g1", "t", 0, 7)).unwrap(),
            None
        );
        // "g1" must not take "g10" with it.
        assert_eq!(state.remove_group("g1").unwrap(), 1);
        assert_eq!(state.checkpoints().unwrap().len(), 1);
    }

    #[test]
    fn a_damaged_checkpoint_is_an_error_naming_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::metadata::open_db(dir.path()).unwrap();
        let state = PopState::open(&db, dir.path().to_path_buf()).unwrap();
        db.open_tree(POP_CHECKPOINTS_TREE)
            .unwrap()
            .insert(key("g", "t", 1, 2).stored(), b"\x01garbage".to_vec())
            .unwrap();
        match state.checkpoints() {
            Err(PopStateError::Corrupt { key, .. }) => assert!(key.starts_with("g\\x00t")),
            other => panic!("expected a corrupt-entry error, got {other:?}"),
        }
    }

    #[test]
    fn request_modes_are_kept_per_topic_and_group() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::metadata::open_db(dir.path()).unwrap();
        let state = PopState::open(&db, dir.path().to_path_buf()).unwrap();
        assert_eq!(state.request_mode("t", "g").unwrap(), None);
        let pop = RequestModeEntry {
            mode: RequestMode::Pop,
            pop_share_queue_num: 0,
        };
        state.put_request_mode("t", "g", pop).unwrap();
        assert_eq!(state.request_mode("t", "g").unwrap(), Some(pop));
        assert_eq!(state.request_mode("t", "g2").unwrap(), None);
    }
}
