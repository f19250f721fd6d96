//! Randomised power-loss test on the simulated disk.
//!
//! Each run starts a store on an empty [`SimDisk`] with tiny segments and tiny consume-queue
//! files and goes through `CUTS_PER_RUN` power cuts. Between cuts it appends batches, flushes,
//! runs retention by age, and lets the disk fill up now and then; the power goes either after a
//! random number of file operations (so it lands inside an append, a checkpoint, a segment roll
//! or a retention run) or between operations. Then the store is reopened and checked:
//! - it opens (no corruption reported, whatever the cut interrupted);
//! - `sync`: every acknowledged message is there, byte for byte, at its offsets; `async`:
//!   every message appended before the last completed flush is;
//! - a message is missing only when retention was entitled to delete it (older than the age);
//! - every served record passes its CRC and is a message the test sent to that queue;
//! - the consume queues agree with the commit log, both ways, and reads below the min offset
//!   answer `OffsetTooSmall`;
//! - the key index (tiny files, so it rolls and prunes too), reopened and caught up, covers
//!   the whole commit log and finds stored messages by key, and only messages that carry it.
//!
//! The seed of every run is printed; `SKIFF_POWERCUT_SEED=<seed>` replays that run alone, and
//! `SKIFF_POWERCUT_RUNS=<n>` sets how many runs each flush policy gets.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use skiff_storage::disk::sim::SimDisk;
use skiff_storage::disk::Disk;
use skiff_storage::key_index::{KeyBatch, KeyIndex, KEY_INDEX_DIR};
use skiff_storage::message::{decode_records, encode_properties, MessageToAppend};
use skiff_storage::store::{
    FlushPolicy, MessageStore, ReadStatus, RetentionRequest, StoreConfig, StoreError,
};
use skiff_storage::testsuite::{message, store_config};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const TOPIC: &str = "PowerCut";
const QUEUES: u32 = 3;
const CUTS_PER_RUN: u32 = 20;
const DEFAULT_RUNS: u64 = 150;
const MAX_AGE_MS: i64 = 3_000;
const SEED_ENV: &str = "SKIFF_POWERCUT_SEED";
const RUNS_ENV: &str = "SKIFF_POWERCUT_RUNS";
const INDEX_ENTRIES_PER_FILE: u64 = 16;
/// Stored messages looked up by key after each reopen.
const LOOKUPS_PER_CUT: usize = 8;

/// How the run's flushes checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Checkpoints {
    /// Every flush fsyncs the queues and advances the checkpoint.
    Thorough,
    /// Flushes are interval passes of a store with more queues written than it fsyncs each
    /// time: two light passes (the commit log fsynced, the queues' entries written without an
    /// fsync, the checkpoint left where it was), then a thorough one.
    Light,
}

/// Interval passes per thorough one under [`Checkpoints::Light`].
const PASSES_PER_THOROUGH: u32 = 3;

fn config(policy: FlushPolicy, checkpoints: Checkpoints, disk: &SimDisk) -> StoreConfig {
    let base = StoreConfig {
        queue_file_entries: 8,
        // Fewer than the queues' files: descriptors come and go through every cut.
        open_queue_files: 2,
        disk: Disk::Simulated(disk.clone()),
        // Prepared when the run asks (`prepare_ahead`): cuts land in prepared space too.
        prepare_ahead: 1500,
        ..store_config(Path::new("/store"), 4096, policy)
    };
    match checkpoints {
        Checkpoints::Thorough => base,
        Checkpoints::Light => StoreConfig {
            queues_fsynced_every_checkpoint: 0,
            thorough_checkpoint_interval: base.flush_interval * PASSES_PER_THOROUGH,
            ..base
        },
    }
}

/// What the test knows of a message it sent.
#[derive(Clone, Debug)]
struct Sent {
    queue_id: u32,
    body: Vec<u8>,
}

/// A message the store acknowledged, where it said it put it.
#[derive(Clone, Debug)]
struct Acked {
    id: u64,
    physical_offset: u64,
    store_timestamp: i64,
}

struct Run {
    seed: u64,
    policy: FlushPolicy,
    checkpoints: Checkpoints,
    rng: StdRng,
    disk: SimDisk,
    clock: Arc<AtomicI64>,
    /// Every message ever offered to the store, by id (the first 8 bytes of its body).
    sent: HashMap<u64, Sent>,
    /// Acknowledged messages by (queue, offset).
    acked: BTreeMap<(u32, u64), Acked>,
    /// Commit-log position below which every acknowledged message must survive (`async`:
    /// the end at the last completed flush; `sync`: unused, every ack is durable).
    flushed_end: u64,
    /// The newest cutoff a retention run was given: only older messages may be deleted.
    retention_cutoff: i64,
    next_id: u64,
    cut: u32,
    tally: Tally,
    /// Whole lite queues appended to and deleted beside the run's own ([`lite`]); none in the
    /// runs that replay recorded seeds.
    lite: Option<LiteQueues>,
}

/// What a run went through, so the output shows the test exercised each path.
#[derive(Default, Debug, Clone, Copy)]
struct Tally {
    acked: u64,
    disk_full_refusals: u64,
    segments_deleted: u64,
    queue_files_deleted: u64,
    cuts_mid_operation: u64,
    key_lookups: u64,
    /// Queues let go of from memory as idle (and opened again by the next use).
    queues_released: u64,
    lite_appended: u64,
    lite_queues_deleted: u64,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, o: Tally) {
        self.acked += o.acked;
        self.disk_full_refusals += o.disk_full_refusals;
        self.segments_deleted += o.segments_deleted;
        self.queue_files_deleted += o.queue_files_deleted;
        self.cuts_mid_operation += o.cuts_mid_operation;
        self.key_lookups += o.key_lookups;
        self.queues_released += o.queues_released;
        self.lite_appended += o.lite_appended;
        self.lite_queues_deleted += o.lite_queues_deleted;
    }
}

macro_rules! check {
    ($run:expr, $cond:expr, $($fmt:tt)+) => {
        if !$cond {
            panic!(
                "power-loss run {:?} {:?} seed {} (replay: {}={}) cut {}: {}",
                $run.policy, $run.checkpoints, $run.seed, SEED_ENV, $run.seed, $run.cut, format!($($fmt)+)
            );
        }
    };
}

// After `check!`, which it uses.
mod lite;
use lite::LiteQueues;

impl Run {
    fn new(seed: u64, policy: FlushPolicy, checkpoints: Checkpoints) -> Run {
        Run {
            seed,
            policy,
            checkpoints,
            rng: StdRng::seed_from_u64(seed),
            disk: SimDisk::new(),
            clock: Arc::new(AtomicI64::new(1_700_000_000_000)),
            sent: HashMap::new(),
            acked: BTreeMap::new(),
            flushed_end: 0,
            retention_cutoff: i64::MIN,
            next_id: 0,
            cut: 0,
            tally: Tally::default(),
            lite: None,
        }
    }

    /// The run also appends to and deletes lite queues.
    fn with_lite_queues(mut self) -> Run {
        self.lite = Some(LiteQueues::new(self.seed));
        self
    }

    fn open(&mut self) -> MessageStore {
        let store = match MessageStore::open(config(self.policy, self.checkpoints, &self.disk)) {
            Ok(s) => s,
            Err(e) => {
                check!(
                    self,
                    false,
                    "the store does not open after a power cut: {e:?}"
                );
                unreachable!()
            }
        };
        let clock = self.clock.clone();
        let mut store = store;
        store.set_clock(move || clock.load(Ordering::Relaxed));
        store
    }

    /// The key index of `store`, reopened and caught up with its commit log (its recovery).
    fn open_index(&mut self, store: &MessageStore) -> KeyIndex {
        let reader = store.reader();
        let opened = KeyIndex::open(
            &Disk::Simulated(self.disk.clone()),
            Path::new("/store").join(KEY_INDEX_DIR),
            &reader,
        )
        .map(|index| index.with_entries_per_file(INDEX_ENTRIES_PER_FILE))
        .and_then(|mut index| index.catch_up_all(&reader).map(|_| index));
        match opened {
            Ok(index) => index,
            Err(e) => {
                check!(
                    self,
                    false,
                    "the key index does not open after a power cut: {e:?}"
                );
                unreachable!()
            }
        }
    }

    fn batch(&mut self) -> Vec<MessageToAppend> {
        let count = self.rng.gen_range(1..=3);
        let queue_id = self.rng.gen_range(0..QUEUES);
        (0..count)
            .map(|_| {
                let id = self.next_id;
                self.next_id += 1;
                let len = self.rng.gen_range(8..700);
                let mut body: Vec<u8> = (0..len).map(|_| self.rng.gen()).collect();
                body[..8].copy_from_slice(&id.to_be_bytes());
                self.sent.insert(
                    id,
                    Sent {
                        queue_id,
                        body: body.clone(),
                    },
                );
                MessageToAppend {
                    properties: encode_properties(&[("KEYS", &key_of(id))]),
                    ..message(TOPIC, queue_id, body)
                }
            })
            .collect()
    }

    /// One append, indexed as the broker's key-index actor does; answers false once the disk
    /// is dead or the store refuses writes.
    fn append(&mut self, store: &mut MessageStore, index: &mut KeyIndex) -> bool {
        self.clock
            .fetch_add(self.rng.gen_range(1..50), Ordering::Relaxed);
        let batch = self.batch();
        match store.append_batch(&batch) {
            Ok(Ok(results)) => {
                self.tally.acked += results.len() as u64;
                // The index is best effort between cuts (a full or dying disk fails it); the
                // checks after reopening are what count.
                let _ = index.apply(&KeyBatch::of(&batch, &results), &store.reader());
                for (m, r) in batch.iter().zip(results) {
                    let id = u64::from_be_bytes(m.body[..8].try_into().unwrap_or_default());
                    self.acked.insert(
                        (r.queue_id, r.queue_offset),
                        Acked {
                            id,
                            physical_offset: r.physical_offset,
                            store_timestamp: r.store_timestamp,
                        },
                    );
                }
                true
            }
            Ok(Err(rejected)) => {
                check!(self, false, "a valid batch was rejected: {rejected}");
                false
            }
            Err(e) => self.append_failed(e),
        }
    }

    /// What an append's error means for the run: true while it may go on (a full disk).
    fn append_failed(&mut self, e: StoreError) -> bool {
        if e.is_disk_full() {
            self.tally.disk_full_refusals += 1;
            return true;
        }
        check!(
            self,
            self.disk.is_dead()
                || matches!(
                    e,
                    StoreError::WritesRefused
                        | StoreError::Io { .. }
                        | StoreError::FsyncFailed { .. }
                ),
            "unexpected append error: {e:?}"
        );
        false
    }

    /// Operations until the power goes.
    fn operate(&mut self, store: &mut MessageStore, index: &mut KeyIndex) {
        if self.rng.gen_bool(0.6) {
            self.disk.cut_power_after(self.rng.gen_range(0..300));
        }
        let ops = self.rng.gen_range(1..60);
        for _ in 0..ops {
            if self.disk.is_dead() {
                return;
            }
            if let Some(alive) = self.lite_operation(store, index) {
                if !alive {
                    return;
                }
                continue;
            }
            let roll = self.rng.gen_range(0..100);
            let alive = match roll {
                0..=64 => self.append(store, index),
                65..=69 => store.prepare_ahead().is_ok(),
                70..=79 => {
                    let end = store.commit_log_end();
                    let flushed = match self.checkpoints {
                        Checkpoints::Thorough => store.flush(),
                        Checkpoints::Light => store.flush_on_interval(),
                    };
                    match flushed {
                        Ok(()) => {
                            self.flushed_end = end;
                            // Queues unused since the last flush leave memory (no disk
                            // operation: the cuts land where they did), to be opened again by
                            // the next append or read.
                            self.tally.queues_released += store.release_idle_queues() as u64;
                            true
                        }
                        Err(_) => false,
                    }
                }
                80..=89 => {
                    self.clock
                        .fetch_add(self.rng.gen_range(0..2_000), Ordering::Relaxed);
                    let now = self.clock.load(Ordering::Relaxed);
                    let request = RetentionRequest {
                        max_segments: self.rng.gen_range(1..4),
                        ..RetentionRequest::by_age(now, Duration::from_millis(MAX_AGE_MS as u64))
                    };
                    self.retention_cutoff = self.retention_cutoff.max(now - MAX_AGE_MS);
                    let end = store.commit_log_end();
                    match store.delete_expired(&request) {
                        Ok(outcome) => {
                            let _ = index.prune_below(store.reader().commit_log_start());
                            self.tally.segments_deleted += outcome.segments.len() as u64;
                            self.tally.queue_files_deleted += outcome.queue_files_deleted as u64;
                            if !outcome.segments.is_empty() {
                                // The run ends with a checkpoint.
                                self.flushed_end = end;
                            }
                            true
                        }
                        Err(_) => false,
                    }
                }
                _ => {
                    // The disk fills up for one append, then space returns.
                    let used = self.disk.used_bytes();
                    self.disk
                        .set_capacity(Some(used + self.rng.gen_range(0..1_500)));
                    let alive = self.append(store, index);
                    self.disk.set_capacity(None);
                    alive
                }
            };
            if !alive {
                return;
            }
        }
    }

    fn verify(&mut self, store: &MessageStore, index: &KeyIndex) {
        let reader = store.reader();
        let log_start = reader.commit_log_start();
        let log_end = reader.commit_log_end();
        // Everything the queues serve, checked record by record.
        let mut served: BTreeMap<(u32, u64), (u64, i64, u64)> = BTreeMap::new();
        for queue_id in 0..QUEUES {
            let (min, max) = (
                reader.min_offset(TOPIC, queue_id),
                reader.max_offset(TOPIC, queue_id),
            );
            check!(self, min <= max, "queue {queue_id}: min {min} > max {max}");
            if min > 0 {
                let below = reader.read(TOPIC, queue_id, min - 1, 1, u32::MAX, None);
                check!(
                    self,
                    matches!(&below, Ok(r) if r.status == ReadStatus::OffsetTooSmall && r.next_begin_offset == min),
                    "queue {queue_id}: a read below the min {min} answered {below:?}"
                );
            }
            let mut offset = min;
            while offset < max {
                let read = reader.read(TOPIC, queue_id, offset, 32, u32::MAX, None);
                let read = match read {
                    Ok(r) => r,
                    Err(e) => {
                        check!(
                            self,
                            false,
                            "queue {queue_id} offset {offset}: read failed: {e:?}"
                        );
                        unreachable!()
                    }
                };
                check!(
                    self,
                    read.status == ReadStatus::Found,
                    "queue {queue_id} offset {offset} of {min}..{max}: {:?}",
                    read.status
                );
                let records = decode_records(read.records.clone());
                check!(
                    self,
                    records.is_ok(),
                    "served records fail to decode: {records:?}"
                );
                for m in records.unwrap_or_default() {
                    check!(
                        self,
                        m.queue_offset == offset,
                        "queue {queue_id}: offset {} served at {offset}",
                        m.queue_offset
                    );
                    let id = u64::from_be_bytes(m.body[..8].try_into().unwrap_or_default());
                    let sent = self.sent.get(&id);
                    check!(
                        self,
                        sent.is_some_and(|s| s.queue_id == queue_id && s.body[..] == m.body[..]),
                        "queue {queue_id} offset {offset}: a message the test never sent there (id {id})"
                    );
                    check!(
                        self,
                        m.physical_offset >= log_start,
                        "served a record below the log start"
                    );
                    served.insert(
                        (queue_id, offset),
                        (id, m.store_timestamp, m.physical_offset),
                    );
                    offset += 1;
                }
            }
        }
        // The commit log holds exactly the served records, and nothing else past the mins.
        let mut in_log = 0usize;
        let mut disagreements = Vec::new();
        let scanned = reader.scan_records(
            log_start,
            log_end,
            usize::MAX,
            |position, layout, record| {
                // The lite queues' records are checked against their queues by `verify_lite`.
                if record.get(layout.topic.clone()) != Some(TOPIC.as_bytes()) {
                    return;
                }
                let min = reader.min_offset(TOPIC, layout.queue_id);
                if layout.queue_offset < min {
                    return;
                }
                in_log += 1;
                match served.get(&(layout.queue_id, layout.queue_offset)) {
                    Some(&(_, _, physical)) if physical == position => {}
                    other => disagreements.push((
                        position,
                        layout.queue_id,
                        layout.queue_offset,
                        other.copied(),
                    )),
                }
            },
        );
        check!(
            self,
            matches!(scanned, Ok(end) if end == log_end),
            "the commit-log scan stopped early: {scanned:?} of {log_end}"
        );
        check!(
            self,
            disagreements.is_empty(),
            "consume queues and commit log disagree: {disagreements:?}"
        );
        check!(
            self,
            in_log == served.len(),
            "{in_log} records in the log, {} served",
            served.len()
        );
        // Acknowledged messages.
        for (&(queue_id, offset), acked) in &self.acked {
            let must_survive = match self.policy {
                FlushPolicy::Sync => true,
                FlushPolicy::Async => acked.physical_offset < self.flushed_end,
            };
            match served.get(&(queue_id, offset)) {
                Some(&(id, ts, physical)) => {
                    check!(
                        self,
                        id == acked.id && ts == acked.store_timestamp && physical == acked.physical_offset,
                        "queue {queue_id} offset {offset}: acknowledged id {} at {}, found id {id} at {physical}",
                        acked.id,
                        acked.physical_offset
                    );
                }
                None if acked.physical_offset < log_start => {
                    check!(
                        self,
                        acked.store_timestamp < self.retention_cutoff,
                        "queue {queue_id} offset {offset}: deleted by retention although stored at {} (cutoff {})",
                        acked.store_timestamp,
                        self.retention_cutoff
                    );
                }
                None => {
                    check!(
                        self,
                        !must_survive,
                        "queue {queue_id} offset {offset}: acknowledged message id {} lost (physical {}, flushed end {})",
                        acked.id,
                        acked.physical_offset,
                        self.flushed_end
                    );
                }
            }
        }
        // The key index covers the whole log and finds stored messages by key.
        check!(
            self,
            index.watermark() == log_end,
            "key index caught up to {} of a commit log ending at {log_end}",
            index.watermark()
        );
        let stored: Vec<(u64, u64)> = served
            .values()
            .map(|&(id, _, physical)| (id, physical))
            .collect();
        for _ in 0..LOOKUPS_PER_CUT.min(stored.len()) {
            let (id, physical) = stored[self.rng.gen_range(0..stored.len())];
            let raws = match index.query(&reader, TOPIC, &key_of(id), i64::MIN, i64::MAX, 4) {
                Ok(raws) => raws,
                Err(e) => {
                    check!(self, false, "key lookup of id {id} failed: {e:?}");
                    unreachable!()
                }
            };
            let mut found = Vec::new();
            for raw in raws {
                let decoded = decode_records(raw);
                check!(self, decoded.is_ok(), "a key lookup served {decoded:?}");
                found.extend(decoded.unwrap_or_default().iter().map(|m| {
                    (
                        u64::from_be_bytes(m.body[..8].try_into().unwrap_or_default()),
                        m.physical_offset,
                    )
                }));
            }
            check!(
                self,
                found == [(id, physical)],
                "key {} (stored at {physical}) looked up: {found:?}",
                key_of(id)
            );
            self.tally.key_lookups += 1;
        }
        self.verify_lite(store);
        // From here on the store's content is the truth (opening checkpointed it).
        self.acked = served
            .into_iter()
            .map(|(k, (id, store_timestamp, physical_offset))| {
                (
                    k,
                    Acked {
                        id,
                        physical_offset,
                        store_timestamp,
                    },
                )
            })
            .collect();
        self.flushed_end = log_end;
    }

    fn go(mut self) -> (u64, Tally) {
        let mut store = self.open();
        let mut index = self.open_index(&store);
        for cut in 0..CUTS_PER_RUN {
            self.cut = cut;
            self.operate(&mut store, &mut index);
            if self.disk.is_dead() {
                self.tally.cuts_mid_operation += 1;
            }
            self.disk.kill();
            drop(index);
            drop(store);
            self.disk
                .power_cut(&mut |n| self.rng.gen_range(0..n.max(1)));
            store = self.open();
            index = self.open_index(&store);
            self.verify(&store, &index);
        }
        drop(index);
        drop(store);
        (self.disk.power_cuts(), self.tally)
    }
}

fn runs(policy: FlushPolicy, checkpoints: Checkpoints) {
    runs_of(policy, checkpoints, false);
}

/// `runs`, each also appending to and deleting lite queues when `lite`.
fn runs_of(policy: FlushPolicy, checkpoints: Checkpoints, lite: bool) {
    let run = |seed| {
        let run = Run::new(seed, policy, checkpoints);
        if lite {
            run.with_lite_queues()
        } else {
            run
        }
    };
    if let Ok(seed) = std::env::var(SEED_ENV) {
        let seed: u64 = seed.parse().expect("SKIFF_POWERCUT_SEED is a u64");
        eprintln!(
            "power-loss {policy:?} {checkpoints:?} (lite queues: {lite}): replaying seed {seed}"
        );
        run(seed).go();
        return;
    }
    let runs: u64 = std::env::var(RUNS_ENV)
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(DEFAULT_RUNS);
    let base: u64 = rand::random();
    let started = std::time::Instant::now();
    let (mut cuts, mut tally) = (0, Tally::default());
    for i in 0..runs {
        let seed = base.wrapping_add(i);
        let (c, t) = run(seed).go();
        cuts += c;
        tally += t;
    }
    eprintln!(
        "power-loss {policy:?} {checkpoints:?}: {runs} runs from seed {base}, {cuts} power cuts, {tally:?}, {:?}",
        started.elapsed()
    );
    assert!(
        tally.queues_released > 0,
        "no queue left memory in {runs} runs: the suite no longer covers reopening one"
    );
    assert!(
        !lite || tally.lite_queues_deleted > 0,
        "no lite queue was deleted in {runs} runs"
    );
}

#[test]
fn sync_flush_keeps_every_acknowledged_message_through_power_cuts() {
    runs(FlushPolicy::Sync, Checkpoints::Thorough);
}

/// A run that once lost a key-index entry: a full disk failed an index write mid-batch, the
/// retry put the stale entries into the older index file, a cut took the newer file's copies,
/// and retention pruned the older file while its last record was still in the log.
#[test]
fn sync_flush_replays_a_failed_key_index_write_then_a_cut_and_retention() {
    Run::new(
        9_367_625_021_464_641_759,
        FlushPolicy::Sync,
        Checkpoints::Thorough,
    )
    .go();
}

/// A run that once kept a torn record: a cut tore the last write inside the second record's
/// properties over a prepared (zero-filled) segment; its sizes and body CRC still added up, so
/// recovery kept it with its properties zeroed, and its key could not be found.
#[test]
fn async_flush_with_light_checkpoints_replays_a_write_torn_inside_the_properties() {
    Run::new(
        9_374_966_601_208_219_723,
        FlushPolicy::Async,
        Checkpoints::Light,
    )
    .go();
}

#[test]
fn async_flush_loses_at_most_the_unflushed_tail_through_power_cuts() {
    runs(FlushPolicy::Async, Checkpoints::Thorough);
}

/// Light checkpoints leave the queues' newest entries unsynced and the checkpoint behind: what
/// a flush made durable must still come back, rebuilt from the log.
#[test]
fn async_flush_with_light_checkpoints_loses_at_most_the_unflushed_tail_through_power_cuts() {
    runs(FlushPolicy::Async, Checkpoints::Light);
}

#[test]
fn sync_flush_with_light_checkpoints_keeps_every_acknowledged_message_through_power_cuts() {
    runs(FlushPolicy::Sync, Checkpoints::Light);
}

/// Expired lite topics: whole queues deleted between appends, flushes, releases from memory and
/// retention; no deleted message ever comes back, and nothing acknowledged after is lost.
#[test]
fn lite_queues_deleted_between_power_cuts_never_come_back_and_lose_nothing_acknowledged() {
    runs_of(FlushPolicy::Async, Checkpoints::Light, true);
    runs_of(FlushPolicy::Sync, Checkpoints::Thorough, true);
}

/// The `KEYS` property of the message with this id.
fn key_of(id: u64) -> String {
    format!("k{id}")
}
