//! The half queue at start-up: the stored cursor, the pending halves past it, and the commits
//! a crash left unrecorded (their copies are in the log). Also the step the actor repeats as new
//! halves arrive ([`scan_halves`]).

use crate::broker_api::BrokerError;
use crate::logic::transaction::{
    check_immunity, HALF_CONSUMER_GROUP, HALF_TOPIC, PRODUCER_GROUP, TRANSACTION_COMMIT_TYPE,
    TRANSACTION_TYPE_MASK,
};
use skiff_storage::message::decode_records;
use skiff_storage::offset_table::{OffsetKey, OffsetTable};
use skiff_storage::store::{ReadStatus, StoreReader};
use skiff_storage::transaction_states::{HalfState, TransactionStates};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Halves read from the half queue per step.
const SCAN_BATCH: u32 = 256;
const SCAN_BATCH_BYTES: u32 = 8 * 1024 * 1024;

/// One half waiting for its producer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PendingHalf {
    pub(super) physical_offset: u64,
    pub(super) born_timestamp: i64,
    pub(super) immunity: Duration,
    pub(super) checks: u32,
    pub(super) producer_group: String,
}

/// What the broker knows of the half queue when the actor starts.
pub(crate) struct LoadedHalves {
    pub(super) cursor: u64,
    pub(super) scanned: u64,
    pub(super) pending: BTreeMap<u64, PendingHalf>,
}

/// Reads the half queue's stored cursor and the halves past it, forgetting the states of halves
/// below the cursor (the cursor is durable, so nobody asks about them again). Done before the
/// broker serves anything: a damaged cursor or state stops the broker rather than deliver a
/// rolled-back message or lose a pending one.
pub(crate) fn load_halves(
    table: &dyn OffsetTable,
    reader: &StoreReader,
    states: &TransactionStates,
    timeout: Duration,
) -> Result<LoadedHalves, BrokerError> {
    let key = OffsetKey::new(HALF_TOPIC, HALF_CONSUMER_GROUP);
    // A cursor past the queue's end (the log's unsynced tail lost to a power cut while the
    // offset table kept the cursor) would leave every new half below it, never read: clamp.
    let cursor = table
        .query(&key, 0)?
        .unwrap_or_else(|| reader.min_offset(HALF_TOPIC, 0))
        .min(reader.max_offset(HALF_TOPIC, 0));
    let mut loaded = LoadedHalves {
        cursor,
        scanned: cursor,
        pending: BTreeMap::new(),
    };
    let first = scan_halves(reader, states, timeout, &mut loaded)?;
    recover_commits(reader, states, &mut loaded)?;
    if let Some(first) = first {
        let forgotten = states.forget_before(first)?;
        if forgotten > 0 {
            tracing::debug!(forgotten, "states of halves below the cursor forgotten");
        }
    }
    tracing::info!(
        cursor,
        pending = loaded.pending.len(),
        "transactional half messages loaded"
    );
    Ok(loaded)
}

/// Marks committed every pending half whose committed copy is in the commit log. END_TRANSACTION
/// records a commit in the state tree without waiting for it to be flushed (the copy in the log
/// is the durable record, as Java's op messages are), so a crash can lose the state but never
/// the copy: the copy names its half by `prepared_transaction_offset`. Without this a check-back
/// after the restart would commit such a half a second time.
fn recover_commits(
    reader: &StoreReader,
    states: &TransactionStates,
    loaded: &mut LoadedHalves,
) -> Result<(), BrokerError> {
    let Some(from) = loaded.pending.values().map(|h| h.physical_offset).min() else {
        return Ok(());
    };
    let by_offset: HashMap<u64, u64> = loaded
        .pending
        .iter()
        .map(|(queue_offset, half)| (half.physical_offset, *queue_offset))
        .collect();
    let mut committed = Vec::new();
    // One pass over the log from the oldest pending half (copies always come after their half).
    reader.scan_records(
        from.max(reader.commit_log_start()),
        reader.commit_log_end(),
        usize::MAX,
        |_, layout, _| {
            if layout.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_COMMIT_TYPE {
                let half = u64::try_from(layout.prepared_transaction_offset).ok();
                if let Some(queue_offset) = half.and_then(|h| by_offset.get(&h)) {
                    committed.push(*queue_offset);
                }
            }
        },
    )?;
    for queue_offset in committed {
        if let Some(half) = loaded.pending.remove(&queue_offset) {
            states.put(half.physical_offset, HalfState::Committed)?;
            tracing::info!(
                physical_offset = half.physical_offset,
                "committed half recovered from its copy in the log"
            );
        }
    }
    Ok(())
}

/// Reads the half queue from `loaded.scanned` to its end, adding the halves that are not final
/// to `pending`. Answers the commit-log offset of the first half read.
pub(super) fn scan_halves(
    reader: &StoreReader,
    states: &TransactionStates,
    timeout: Duration,
    loaded: &mut LoadedHalves,
) -> Result<Option<u64>, BrokerError> {
    let mut first = None;
    loop {
        let read = reader.read(
            HALF_TOPIC,
            0,
            loaded.scanned,
            SCAN_BATCH,
            SCAN_BATCH_BYTES,
            None,
        )?;
        match read.status {
            ReadStatus::Found => {}
            ReadStatus::OffsetTooSmall if read.next_begin_offset > loaded.scanned => {
                loaded.scanned = read.next_begin_offset;
                continue;
            }
            _ => return Ok(first),
        }
        let halves = decode_records(read.records).map_err(|e| BrokerError::UnusableHalf {
            queue_offset: loaded.scanned,
            source: e.into(),
        })?;
        for half in halves {
            first.get_or_insert(half.physical_offset);
            loaded.scanned = half.queue_offset + 1;
            let checks = match states.get(half.physical_offset)? {
                None => 0,
                Some(HalfState::Checked { times }) => times,
                Some(_) => continue,
            };
            loaded.pending.insert(
                half.queue_offset,
                PendingHalf {
                    physical_offset: half.physical_offset,
                    born_timestamp: half.born_timestamp,
                    immunity: check_immunity(&half.properties, timeout),
                    checks,
                    producer_group: half.property(PRODUCER_GROUP).unwrap_or("").to_string(),
                },
            );
        }
        if read.next_begin_offset >= read.max_offset {
            return Ok(first);
        }
    }
}
