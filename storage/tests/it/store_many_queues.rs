//! Very many queues on the simulated disk: the files the store holds open stay bounded
//! whatever the number of queues, a reopen opens no queue, and running out of descriptors
//! refuses the batch that met it, not the store.

use skiff_storage::disk::sim::SimDisk;
use skiff_storage::disk::Disk;
use skiff_storage::message::decode_records;
use skiff_storage::store::{FlushPolicy, MessageStore, ReadStatus, StoreConfig, StoreError};
use skiff_storage::testsuite::{message, store_config, NO_BACKGROUND_FLUSH};
use std::path::Path;

const OPEN_QUEUE_FILES: usize = 8;

fn config(disk: &SimDisk, segment_size: u64) -> StoreConfig {
    StoreConfig {
        disk: Disk::Simulated(disk.clone()),
        open_queue_files: OPEN_QUEUE_FILES,
        ..store_config(Path::new("/store"), segment_size, FlushPolicy::Async)
    }
}

fn topic(i: u32) -> String {
    format!("Many{i}")
}

fn body(topic: &str, queue_id: u32) -> String {
    format!("{topic}/{queue_id}")
}

/// One message into each of `topics` × 4 queues, 64 messages a batch.
fn fill(store: &mut MessageStore, topics: u32) {
    let all: Vec<_> = (0..topics)
        .flat_map(|t| (0..4).map(move |q| (topic(t), q)))
        .map(|(t, q)| message(&t, q, body(&t, q)))
        .collect();
    for batch in all.chunks(64) {
        store.append_batch(batch).unwrap().unwrap();
    }
}

/// Every queue holds its one message, read back through the store.
fn verify(store: &MessageStore, topics: u32) {
    let reader = store.reader();
    for t in 0..topics {
        for q in 0..4 {
            let name = topic(t);
            let r = reader.read(&name, q, 0, 8, u32::MAX, None).unwrap();
            assert_eq!(r.status, ReadStatus::Found, "{name}/{q}");
            let msgs = decode_records(r.records).unwrap();
            assert_eq!(msgs.len(), 1, "{name}/{q}");
            assert_eq!(&msgs[0].body[..], body(&name, q).as_bytes());
        }
    }
}

#[test]
fn a_thousand_queues_hold_no_more_files_than_the_cache_and_a_reopen_opens_none() {
    let disk = SimDisk::new();
    let mut store = MessageStore::open(config(&disk, 1 << 20)).unwrap();
    // The commit-log segment and the lock: what the store holds whatever its queues.
    let base = disk.open_files();
    fill(&mut store, 250);
    store.flush().unwrap();
    verify(&store, 250);
    let stats = store.reader().queue_file_stats();
    assert!(stats.peak_open <= OPEN_QUEUE_FILES, "{stats:?}");
    assert!(
        disk.open_files() <= base + OPEN_QUEUE_FILES,
        "{} files open",
        disk.open_files()
    );
    store.close().unwrap();

    let store = MessageStore::open(config(&disk, 1 << 20)).unwrap();
    assert_eq!(
        disk.open_files(),
        base,
        "a clean reopen opens no queue file"
    );
    assert_eq!(store.reader().queue_file_stats().opens, 0);
    verify(&store, 250);
    assert!(disk.open_files() <= base + OPEN_QUEUE_FILES);
    assert_eq!(store.reader().queues().unwrap().len(), 1000);
}

#[test]
fn with_more_queues_written_than_a_checkpoint_fsyncs_only_every_nth_fsyncs_them_and_a_power_cut_loses_no_entry(
) {
    const PER_THOROUGH: u32 = 4;
    let topics = (StoreConfig::DEFAULT_QUEUES_FSYNCED_EVERY_CHECKPOINT as u32) / 4 + 50;
    let queues = u64::from(topics) * 4;
    let disk = SimDisk::new();
    let config = StoreConfig {
        thorough_checkpoint_interval: NO_BACKGROUND_FLUSH * PER_THOROUGH,
        ..config(&disk, 1 << 20)
    };
    let mut store = MessageStore::open(config.clone()).unwrap();
    fill(&mut store, topics);
    // Light passes: the commit log is fsynced, the queues' entries written but not fsynced.
    for pass in 1..PER_THOROUGH {
        let before = disk.fsync_count();
        store.flush_on_interval().unwrap();
        let fsyncs = disk.fsync_count() - before;
        assert!(fsyncs <= 2, "light pass {pass} ran {fsyncs} fsyncs");
    }
    // The power goes: nothing unsynced reaches the disk. The log was fsynced, so recovery
    // rebuilds every queue's entry from it.
    disk.kill();
    drop(store);
    disk.power_cut(&mut |_| 0);
    let mut store = MessageStore::open(config.clone()).unwrap();
    verify(&store, topics);

    // A fresh round: the last pass of each round fsyncs every queue written and advances the
    // checkpoint, so after a cut nothing needs rebuilding.
    let more: Vec<_> = (0..topics)
        .flat_map(|t| (0..4).map(move |q| message(&topic(t), q, "second")))
        .collect();
    for batch in more.chunks(64) {
        store.append_batch(batch).unwrap().unwrap();
    }
    for _ in 1..PER_THOROUGH {
        store.flush_on_interval().unwrap();
    }
    let before = disk.fsync_count();
    store.flush_on_interval().unwrap();
    assert!(
        disk.fsync_count() - before >= queues,
        "a thorough pass fsyncs every queue written ({} fsyncs)",
        disk.fsync_count() - before
    );
    // An explicit flush (and a close) is always thorough.
    for batch in more.chunks(64) {
        store.append_batch(batch).unwrap().unwrap();
    }
    store.flush_on_interval().unwrap();
    let before = disk.fsync_count();
    store.flush().unwrap();
    assert!(disk.fsync_count() - before >= queues);
    disk.kill();
    drop(store);
    disk.power_cut(&mut |_| 0);
    let store = MessageStore::open(config).unwrap();
    let reader = store.reader();
    for t in 0..topics {
        for q in 0..4 {
            let r = reader.read(&topic(t), q, 1, 8, u32::MAX, None).unwrap();
            let bodies: Vec<_> = decode_records(r.records)
                .unwrap()
                .into_iter()
                .map(|m| m.body)
                .collect();
            assert_eq!(bodies, [&b"second"[..], b"second"], "{}/{q}", topic(t));
        }
    }
}

#[test]
fn running_out_of_descriptors_mid_batch_refuses_that_batch_and_the_next_is_served() {
    let disk = SimDisk::new();
    let mut store = MessageStore::open(config(&disk, 1 << 20)).unwrap();
    fill(&mut store, 2);
    store.flush().unwrap();
    let reader = store.reader();
    let end = store.commit_log_end();
    // Everything but the store's queue files holds the descriptors left: closing its idle
    // queue files is not enough to open a new one.
    let held_elsewhere = disk.open_files() - reader.queue_file_stats().open;
    disk.limit_open_files(Some(held_elsewhere));
    // An existing queue first (its entry is buffered: no descriptor needed), then a new queue.
    let batch = [
        message(&topic(0), 0, "first"),
        message(&topic(0), 1, "second"),
        message("BrandNew", 0, "third"),
    ];
    match store.append_batch(&batch) {
        Err(e @ StoreError::OutOfDescriptors { .. }) => assert!(e.is_out_of_descriptors()),
        other => panic!("expected OutOfDescriptors, got {other:?}"),
    }
    // Nothing of the batch is served or counted.
    assert_eq!(store.commit_log_end(), end);
    assert_eq!(reader.max_offset(&topic(0), 0), 1);
    assert_eq!(reader.max_offset(&topic(0), 1), 1);
    assert_eq!(reader.max_offset("BrandNew", 0), 0);

    // Descriptors back: the same batch goes in, at the offsets it would have had.
    disk.limit_open_files(None);
    let appended = store.append_batch(&batch).unwrap().unwrap();
    assert_eq!(
        appended.iter().map(|a| a.queue_offset).collect::<Vec<_>>(),
        [1, 1, 0]
    );
    assert_eq!(appended[0].physical_offset, end);
    let r = reader.read("BrandNew", 0, 0, 8, u32::MAX, None).unwrap();
    assert_eq!(decode_records(r.records).unwrap()[0].body, "third");
    let r = reader.read(&topic(0), 0, 0, 8, u32::MAX, None).unwrap();
    let bodies: Vec<_> = decode_records(r.records)
        .unwrap()
        .into_iter()
        .map(|m| m.body)
        .collect();
    assert_eq!(bodies, [body(&topic(0), 0).as_bytes(), b"first"]);
}

#[test]
fn running_out_of_descriptors_at_a_segment_roll_refuses_that_batch_only() {
    let disk = SimDisk::new();
    // Small segments: the batch below cannot fit in the first one.
    let mut store = MessageStore::open(config(&disk, 4096)).unwrap();
    let first: Vec<_> = (0..20).map(|i| message("Roll", 0, vec![b'a'; i])).collect();
    store.append_batch(&first).unwrap().unwrap();
    let end = store.commit_log_end();
    let reader = store.reader();
    disk.limit_open_files(Some(disk.open_files() - reader.queue_file_stats().open));
    let big: Vec<_> = (0..40)
        .map(|_| message("Roll", 0, vec![b'b'; 200]))
        .collect();
    match store.append_batch(&big) {
        Err(StoreError::OutOfDescriptors { .. }) => {}
        other => panic!("expected OutOfDescriptors, got {other:?}"),
    }
    assert_eq!(store.commit_log_end(), end);
    assert_eq!(reader.max_offset("Roll", 0), 20);
    disk.limit_open_files(None);
    let appended = store.append_batch(&big).unwrap().unwrap();
    assert_eq!(appended[0].queue_offset, 20);
    assert_eq!(appended[0].physical_offset, end);
    assert_eq!(reader.max_offset("Roll", 0), 60);
    store.close().unwrap();
    let store = MessageStore::open(config(&disk, 4096)).unwrap();
    assert_eq!(store.reader().max_offset("Roll", 0), 60);
}
