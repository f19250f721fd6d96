//! The key-index actor: keeps the [`KeyIndex`] caught up with the commit log, off the send path,
//! and answers QUERY_MESSAGE lookups.
//!
//! After each append the message store hands over the batch's key entries ([`IndexBatch`], built
//! from the messages it just wrote, sent with `try_send`); this actor writes them. It runs on a
//! thread of its own ([`KeyIndexActor::start`], a one-thread `SyncArbiter`), so index writes
//! never wait in line with sends, pulls and offset commits on the broker's arbiter. A dropped
//! batch costs nothing but a scan: the next batch finds the gap and indexes it from the commit
//! log, and a query catches the index up before it looks.

use crate::broker::message_store::IndexBatch;
use crate::broker_api::BrokerError;
use crate::quit::Quit;
use actix::prelude::*;
use bytes::Bytes;
use skiff_storage::key_index::KeyIndex;
use skiff_storage::store::StoreReader;
use std::error::Error;

/// Records of `topic` indexed under `key` with a store timestamp in `[begin, end]`, at most
/// `max`, as their stored bytes.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<KeyQueryResult, BrokerError>")]
pub struct QueryByKey {
    pub topic: String,
    pub key: String,
    pub begin: i64,
    pub end: i64,
    pub max: usize,
}

/// What a [`QueryByKey`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyQueryResult {
    /// The stored records, the newest first.
    pub records: Vec<Bytes>,
    /// The commit-log physical offset the index covered when it looked.
    pub indexed_to: u64,
}

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "KeyIndexSnapshot")]
pub struct Observe;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyIndexSnapshot {
    pub indexed_records: u64,
    pub failed_passes: u64,
    pub queries: u64,
}

pub struct KeyIndexActor {
    /// `None` once [`Quit`] released the index (and with it the metadata database's tree).
    open: Option<(KeyIndex, StoreReader)>,
    /// [`super::BrokerConfig::key_index`]: when off, lookups find nothing.
    enabled: bool,
    /// Entries below this commit-log offset are gone (retention moved the log's start).
    pruned_below: u64,
    snapshot: KeyIndexSnapshot,
}

impl KeyIndexActor {
    /// Starts the indexer on a thread of its own. The thread outlives [`Quit`] until the last
    /// address is dropped, so the factory hands the index over once rather than keeping it
    /// (and its open file) after the broker shut down.
    pub fn start(index: KeyIndex, reader: StoreReader, enabled: bool) -> Addr<Self> {
        let handover = std::sync::Mutex::new(Some((index, reader)));
        SyncArbiter::start(1, move || KeyIndexActor {
            // A poisoned lock can only mean a factory call panicked; start closed then.
            open: handover.lock().ok().and_then(|mut slot| slot.take()),
            enabled,
            pruned_below: 0,
            snapshot: KeyIndexSnapshot::default(),
        })
    }

    /// Indexes what the commit log holds past the watermark, after dropping the entries of
    /// segments retention deleted since the last pass.
    fn catch_up(&mut self) -> Result<(), BrokerError> {
        self.prune()?;
        let (index, reader) = self.open.as_mut().ok_or(CLOSED)?;
        if !self.enabled {
            return Ok(());
        }
        self.snapshot.indexed_records += index.catch_up_all(reader)? as u64;
        Ok(())
    }

    /// Drops the index files of segments retention deleted since the last look.
    fn prune(&mut self) -> Result<(), BrokerError> {
        let (index, reader) = self.open.as_mut().ok_or(CLOSED)?;
        if !self.enabled {
            return Ok(());
        }
        let start = reader.commit_log_start();
        if start > self.pruned_below {
            let pruned = index.prune_below(start)?;
            tracing::info!(
                entries = pruned,
                below = start,
                "key index entries of deleted segments pruned"
            );
            self.pruned_below = start;
        }
        Ok(())
    }
}

const CLOSED: BrokerError = BrokerError::Closed { what: "key index" };

impl Actor for KeyIndexActor {
    type Context = SyncContext<Self>;
}

impl Handler<IndexBatch> for KeyIndexActor {
    type Result = ();

    fn handle(&mut self, IndexBatch(batch): IndexBatch, _: &mut Self::Context) {
        let applied = self.prune().and_then(|()| {
            let (index, reader) = self.open.as_mut().ok_or(CLOSED)?;
            index.apply(&batch, reader)?;
            Ok(())
        });
        match applied {
            Ok(()) => self.snapshot.indexed_records += batch.records as u64,
            Err(BrokerError::Closed { .. }) => {}
            Err(e) => {
                self.snapshot.failed_passes += 1;
                tracing::warn!(error = &e as &dyn Error, "key index batch failed");
            }
        }
    }
}

impl Handler<QueryByKey> for KeyIndexActor {
    type Result = Result<KeyQueryResult, BrokerError>;

    fn handle(&mut self, msg: QueryByKey, _: &mut Self::Context) -> Self::Result {
        self.snapshot.queries += 1;
        self.catch_up()?;
        let (index, reader) = self.open.as_ref().ok_or(CLOSED)?;
        if !self.enabled {
            return Ok(KeyQueryResult {
                records: Vec::new(),
                indexed_to: index.watermark(),
            });
        }
        let records = index.query(reader, &msg.topic, &msg.key, msg.begin, msg.end, msg.max)?;
        Ok(KeyQueryResult {
            records,
            indexed_to: index.watermark(),
        })
    }
}

/// In hand: the commit log past the watermark (indexed now, so the next open has nothing to
/// rebuild). Persist: the entries are handed to their files (not fsynced: the next open
/// rebuilds whatever a crash lost). Then the index is released; later requests answer
/// [`BrokerError::Closed`].
impl Handler<Quit> for KeyIndexActor {
    type Result = ();

    fn handle(&mut self, _: Quit, _: &mut Self::Context) {
        if let Err(e) = self.catch_up() {
            tracing::warn!(error = &e as &dyn Error, "key index final pass failed");
        }
        self.open = None;
    }
}

impl Handler<Observe> for KeyIndexActor {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.snapshot.clone())
    }
}
