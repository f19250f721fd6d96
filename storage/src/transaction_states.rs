//! What became of each transactional half message, in place of RocketMQ's op topic
//! (`RMQ_SYS_TRANS_OP_HALF_TOPIC`).
//!
//! Half messages themselves are ordinary commit-log records (in the half topic); this sled tree,
//! [`TRANSACTION_STATES_TREE`] in the broker's metadata database, records per half, keyed by its
//! commit-log physical offset (big-endian `u64`, so keys sort in log order), either how often it
//! was checked back or how it ended. A half with no entry is pending and never checked. Values go
//! through the [`record`](crate::record) codec; a value that does not decode is an error naming
//! the offset, never read as "pending" (which could deliver a rolled-back message).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::record::{self, Decoded};

/// Name of the sled tree.
pub const TRANSACTION_STATES_TREE: &str = "transaction_states";

const RECORD_VERSION: u8 = 1;

/// The state of one half message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HalfState {
    /// Still pending, and already checked back this many times.
    Checked { times: u32 },
    /// Committed: the message was stored in its real queue.
    Committed,
    /// Rolled back: nothing was stored.
    RolledBack,
    /// Checked the maximum number of times without an answer; never checked again.
    SetAside,
}

impl HalfState {
    /// Whether the half is finished (no commit, rollback or check will change it).
    pub fn is_final(self) -> bool {
        !matches!(self, HalfState::Checked { .. })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TransactionStatesError {
    #[error("sled error on the transaction states in {file}")]
    Sled {
        file: PathBuf,
        #[source]
        source: sled::Error,
    },
    #[error(
        "transaction state of the half at commit-log offset {physical_offset} in {file} is unreadable: {reason}"
    )]
    Corrupt {
        file: PathBuf,
        physical_offset: u64,
        reason: String,
    },
}

/// The tree of half states; cheap to clone.
#[derive(Clone, Debug)]
pub struct TransactionStates {
    tree: sled::Tree,
    path: PathBuf,
}

impl TransactionStates {
    /// Opens (creating if needed) the tree in `db`; `path_for_errors` names the database.
    pub fn open(db: &sled::Db, path_for_errors: PathBuf) -> Result<Self, TransactionStatesError> {
        let tree = db.open_tree(TRANSACTION_STATES_TREE).map_err(|source| {
            TransactionStatesError::Sled {
                file: path_for_errors.clone(),
                source,
            }
        })?;
        Ok(TransactionStates {
            tree,
            path: path_for_errors,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sled_error(&self, source: sled::Error) -> TransactionStatesError {
        TransactionStatesError::Sled {
            file: self.path.clone(),
            source,
        }
    }

    /// The state of the half at `physical_offset`; `None` when it is pending and never checked.
    pub fn get(&self, physical_offset: u64) -> Result<Option<HalfState>, TransactionStatesError> {
        let Some(raw) = self
            .tree
            .get(physical_offset.to_be_bytes())
            .map_err(|e| self.sled_error(e))?
        else {
            return Ok(None);
        };
        match record::decode::<HalfState>(&raw, RECORD_VERSION) {
            Decoded::Value(state) => Ok(Some(state)),
            Decoded::Corrupt { reason } => Err(TransactionStatesError::Corrupt {
                file: self.path.clone(),
                physical_offset,
                reason,
            }),
            Decoded::UnknownVersion { version } => Err(TransactionStatesError::Corrupt {
                file: self.path.clone(),
                physical_offset,
                reason: format!("unknown record version {version}"),
            }),
        }
    }

    /// Records the state of the half at `physical_offset` (not yet durable: see [`Self::flush`]).
    pub fn put(
        &self,
        physical_offset: u64,
        state: HalfState,
    ) -> Result<(), TransactionStatesError> {
        self.tree
            .insert(
                physical_offset.to_be_bytes(),
                record::encode(RECORD_VERSION, &state),
            )
            .map_err(|e| self.sled_error(e))?;
        Ok(())
    }

    /// Forgets the states of every half stored before `physical_offset`: the broker's cursor has
    /// passed them, so nobody asks about them any more.
    pub fn forget_before(&self, physical_offset: u64) -> Result<usize, TransactionStatesError> {
        let mut batch = sled::Batch::default();
        let mut count = 0;
        for entry in self.tree.range(..physical_offset.to_be_bytes()) {
            let (key, _) = entry.map_err(|e| self.sled_error(e))?;
            batch.remove(key);
            count += 1;
        }
        self.tree
            .apply_batch(batch)
            .map_err(|e| self.sled_error(e))?;
        Ok(count)
    }

    /// Number of entries (for tests and snapshots).
    pub fn len(&self) -> usize {
        self.tree.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }

    /// Makes every earlier `put` durable.
    pub fn flush(&self) -> Result<(), TransactionStatesError> {
        self.tree.flush().map_err(|e| self.sled_error(e))?;
        Ok(())
    }

    /// Makes every earlier `put` durable without blocking the caller's thread.
    pub async fn flush_async(&self) -> Result<(), TransactionStatesError> {
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

    fn open(dir: &Path) -> TransactionStates {
        let db = crate::metadata::open_db(dir).unwrap();
        TransactionStates::open(&db, dir.to_path_buf()).unwrap()
    }

    #[test]
    fn states_survive_a_reopen_and_old_ones_can_be_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        {
            let states = open(dir.path());
            assert_eq!(states.get(100).unwrap(), None);
            states.put(100, HalfState::Checked { times: 2 }).unwrap();
            states.put(200, HalfState::Committed).unwrap();
            states.put(300, HalfState::RolledBack).unwrap();
            states.flush().unwrap();
        }
        let states = open(dir.path());
        assert_eq!(
            states.get(100).unwrap(),
            Some(HalfState::Checked { times: 2 })
        );
        assert_eq!(states.get(200).unwrap(), Some(HalfState::Committed));
        assert_eq!(states.forget_before(300).unwrap(), 2);
        assert_eq!(states.get(100).unwrap(), None);
        assert_eq!(states.get(300).unwrap(), Some(HalfState::RolledBack));
    }

    #[test]
    fn a_damaged_state_is_an_error_naming_the_half_not_pending() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::metadata::open_db(dir.path()).unwrap();
        let states = TransactionStates::open(&db, dir.path().to_path_buf()).unwrap();
        db.open_tree(TRANSACTION_STATES_TREE)
            .unwrap()
            .insert(42u64.to_be_bytes(), b"\x01garbage".to_vec())
            .unwrap();
        match states.get(42) {
            Err(TransactionStatesError::Corrupt {
                physical_offset, ..
            }) => {
                assert_eq!(physical_offset, 42)
            }
            other => panic!("expected a corrupt-state error, got {other:?}"),
        }
        assert!(HalfState::Committed.is_final());
        assert!(!HalfState::Checked { times: 1 }.is_final());
    }
}
