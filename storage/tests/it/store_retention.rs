//! Retention and a full or failing disk, on the simulated disk.

use skiff_storage::disk::sim::SimDisk;
use skiff_storage::disk::Disk;
use skiff_storage::store::{
    FlushPolicy, MessageStore, ReadStatus, RetentionRequest, StoreConfig, StoreError,
};
use skiff_storage::testsuite::{message, store_config};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const TOPIC: &str = "Retained";

fn open(disk: &SimDisk, clock: &Arc<AtomicI64>) -> MessageStore {
    let config = StoreConfig {
        queue_file_entries: 4,
        disk: Disk::Simulated(disk.clone()),
        ..store_config(Path::new("/store"), 2048, FlushPolicy::Sync)
    };
    let mut store = MessageStore::open(config).expect("the store opens");
    let clock = clock.clone();
    store.set_clock(move || clock.load(Ordering::Relaxed));
    store
}

fn append(store: &mut MessageStore, queue_id: u32, n: u8) -> Result<u64, StoreError> {
    let results = store
        .append_batch(&[message(TOPIC, queue_id, vec![n; 300])])?
        .expect("a valid message");
    Ok(results[0].queue_offset)
}

fn body_at(store: &MessageStore, queue_id: u32, offset: u64) -> Option<Vec<u8>> {
    let read = store
        .reader()
        .read(TOPIC, queue_id, offset, 1, u32::MAX, None)
        .ok()?;
    let messages = skiff_storage::message::decode_records(read.records).ok()?;
    messages.first().map(|m| m.body.to_vec())
}

#[test]
fn a_full_disk_refuses_the_batch_and_appends_resume_when_space_returns() -> Result<(), StoreError> {
    let disk = SimDisk::new();
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let mut store = open(&disk, &clock);
    for n in 0..3 {
        append(&mut store, 0, n)?;
    }
    let end = store.commit_log_end();
    // Room for part of a record only: the write stores what fits, then fails.
    disk.set_capacity(Some(disk.used_bytes() + 100));
    let refused = append(&mut store, 0, 9);
    assert!(
        matches!(&refused, Err(e) if e.is_disk_full()),
        "{refused:?}"
    );
    assert_eq!(store.commit_log_end(), end, "nothing of the batch is kept");
    assert_eq!(store.reader().max_offset(TOPIC, 0), 3);
    assert!(append(&mut store, 0, 9).is_err_and(|e| e.is_disk_full()));
    disk.set_capacity(None);
    assert_eq!(
        append(&mut store, 0, 3)?,
        3,
        "the next offset was not used up"
    );
    for n in 0..4u8 {
        assert_eq!(body_at(&store, 0, u64::from(n)), Some(vec![n; 300]));
    }
    // And a power cut now keeps all four acknowledged messages, nothing of the refused one.
    disk.kill();
    drop(store);
    disk.power_cut(&mut |n| n - 1);
    let store = open(&disk, &clock);
    assert_eq!(store.reader().max_offset(TOPIC, 0), 4);
    for n in 0..4u8 {
        assert_eq!(body_at(&store, 0, u64::from(n)), Some(vec![n; 300]));
    }
    Ok(())
}

#[test]
fn a_failing_write_stops_writes_until_the_store_is_reopened() -> Result<(), StoreError> {
    let disk = SimDisk::new();
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let mut store = open(&disk, &clock);
    append(&mut store, 0, 0)?;
    disk.fail_writes(Some(io::ErrorKind::Other));
    let failed = append(&mut store, 0, 1);
    assert!(matches!(failed, Err(StoreError::Io { .. })), "{failed:?}");
    disk.fail_writes(None);
    assert!(matches!(
        append(&mut store, 0, 1),
        Err(StoreError::WritesRefused)
    ));
    drop(store);
    let mut store = open(&disk, &clock);
    assert_eq!(append(&mut store, 0, 1)?, 1);
    Ok(())
}

#[test]
fn retention_deletes_old_segments_and_moves_the_min_offsets() -> Result<(), StoreError> {
    let disk = SimDisk::new();
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let mut store = open(&disk, &clock);
    // Six 2 KiB segments' worth: about five records of ~400 bytes each per segment.
    for n in 0..30u8 {
        clock.fetch_add(1_000, Ordering::Relaxed);
        append(&mut store, u32::from(n % 2), n)?;
    }
    // Queue entries reach their files at a checkpoint (the flusher's job in a running store).
    store.flush()?;
    let reader = store.reader();
    assert_eq!(reader.commit_log_start(), 0);
    let now = clock.load(Ordering::Relaxed);

    // Nothing is older than an hour.
    let none = store.delete_expired(&RetentionRequest::by_age(now, Duration::from_secs(3600)))?;
    assert!(none.segments.is_empty());
    assert_eq!(none.min_commit_log_offset, 0);

    // Records are a second apart: a 12 s age keeps roughly the newest twelve.
    let aged = store.delete_expired(&RetentionRequest::by_age(now, Duration::from_secs(12)))?;
    assert!(!aged.segments.is_empty());
    assert!(aged
        .segments
        .iter()
        .all(|s| !s.forced && s.newest_timestamp < now - 12_000));
    let start = aged.min_commit_log_offset;
    assert_eq!(reader.commit_log_start(), start);
    assert_eq!(start, aged.segments.iter().map(|s| s.bytes).sum::<u64>());
    assert!(aged.queue_files_deleted > 0);
    for queue_id in 0..2 {
        let min = reader.min_offset(TOPIC, queue_id);
        assert!(min > 0);
        let below = reader.read(TOPIC, queue_id, min - 1, 1, u32::MAX, None)?;
        assert_eq!(below.status, ReadStatus::OffsetTooSmall);
        assert_eq!(below.next_begin_offset, min);
        let first = reader.read(TOPIC, queue_id, min, 1, u32::MAX, None)?;
        assert_eq!(first.status, ReadStatus::Found);
        assert_eq!(first.min_offset, min);
    }
    let kept_min = reader.min_offset(TOPIC, 0);

    // Above the disk ratio the oldest segment goes whatever its age, one per run.
    let forced = store.delete_expired(&RetentionRequest {
        disk_used_ratio: 0.8,
        ..RetentionRequest::by_age(now, Duration::from_secs(3600))
    })?;
    assert_eq!(forced.segments.len(), 1);
    assert!(forced.segments[0].forced);
    assert!(reader.min_offset(TOPIC, 0) > kept_min);

    // The mins survive a reopen, and so does each queue's next offset.
    let mins = [reader.min_offset(TOPIC, 0), reader.min_offset(TOPIC, 1)];
    drop(reader);
    store.close()?;
    let mut store = open(&disk, &clock);
    let reader = store.reader();
    assert_eq!(
        [reader.min_offset(TOPIC, 0), reader.min_offset(TOPIC, 1)],
        mins
    );
    assert_eq!(append(&mut store, 0, 99)?, 15);
    Ok(())
}
