//! Append/read behaviour of the message store: segment rolls, read statuses, filters, limits,
//! timestamp search, physical-offset lookups, validation and group commit.

use skiff_storage::message::{
    self, decode_records, encode_properties, tag_hash_code, MessageToAppend,
};
use skiff_storage::store::{
    AppendRejected, BoundaryType, FlushPolicy, MessageStore, ReadStatus, StoreConfig,
};
use skiff_storage::testsuite::{self, store_config};
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

const TOPIC: &str = "TopicTest";

fn config(dir: &Path) -> StoreConfig {
    store_config(dir, 4096, FlushPolicy::Async)
}

fn body_for(queue_id: u32, offset: u64) -> Vec<u8> {
    let len = 10 + ((offset * 37 + u64::from(queue_id) * 11) % 190) as usize;
    (0..len)
        .map(|i| (i as u64 * 31 + offset + u64::from(queue_id)) as u8)
        .collect()
}

fn msg(topic: &str, queue_id: u32, body: Vec<u8>, tags: Option<&str>) -> MessageToAppend {
    let props = match tags {
        Some(t) => encode_properties(&[
            ("TAGS", t),
            ("UNIQ_KEY", "AC11000100002A9F0000000000000001"),
        ]),
        None => String::new(),
    };
    MessageToAppend {
        properties: props,
        ..testsuite::message(topic, queue_id, body)
    }
}

fn read_all(store: &MessageStore, topic: &str, queue_id: u32) -> Vec<message::StoredMessage> {
    let reader = store.reader();
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let r = reader
            .read(topic, queue_id, offset, 32, u32::MAX, None)
            .unwrap();
        if r.status != ReadStatus::Found {
            assert_eq!(r.status, ReadStatus::OffsetOverflowOne);
            break;
        }
        let msgs = decode_records(r.records).unwrap();
        assert_eq!(msgs.len() as u32, r.message_count);
        assert_eq!(r.next_begin_offset, offset + msgs.len() as u64);
        offset = r.next_begin_offset;
        out.extend(msgs);
    }
    out
}

#[test]
fn append_and_read_across_segment_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path())).unwrap();
    let mut next = [0u64; 3];
    let mut expected_phys = 0;
    let mut all = Vec::new();
    for batch in 0..60 {
        let msgs: Vec<_> = (0..7)
            .map(|i| {
                let q = (batch + i) % 3;
                let m = msg(TOPIC, q, body_for(q, next[q as usize]), Some("TagA"));
                next[q as usize] += 1;
                m
            })
            .collect();
        let results = store.append_batch(&msgs).unwrap().unwrap();
        for (m, r) in msgs.iter().zip(&results) {
            assert_eq!(r.queue_id, m.queue_id);
            assert_eq!(
                r.physical_offset, expected_phys,
                "physical offsets are contiguous"
            );
            expected_phys += u64::from(r.stored_size);
            all.push(*r);
        }
    }
    assert_eq!(store.commit_log_end(), expected_phys);
    let segments: Vec<String> = std::fs::read_dir(dir.path().join("commitlog"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        segments.len() > 10,
        "expected many 4 KiB segments, got {segments:?}"
    );
    assert!(segments
        .iter()
        .all(|s| s.len() == 20 && s.bytes().all(|b| b.is_ascii_digit())));
    for s in &segments {
        let len = std::fs::metadata(dir.path().join("commitlog").join(s))
            .unwrap()
            .len();
        assert!(len <= 4096);
    }
    for q in 0..3u32 {
        let msgs = read_all(&store, TOPIC, q);
        assert_eq!(msgs.len() as u64, next[q as usize]);
        for (i, m) in msgs.iter().enumerate() {
            assert_eq!(m.queue_offset, i as u64);
            assert_eq!(m.queue_id, q);
            assert_eq!(m.topic, TOPIC);
            assert_eq!(&m.body[..], &body_for(q, i as u64)[..]);
            let r = all
                .iter()
                .find(|r| r.queue_id == q && r.queue_offset == i as u64)
                .unwrap();
            assert_eq!(m.physical_offset, r.physical_offset);
            assert_eq!(m.store_timestamp, r.store_timestamp);
            assert_eq!(m.store_host, store.config().store_host);
        }
    }
    assert_eq!(
        store.reader().queues().unwrap(),
        vec![
            (TOPIC.to_string(), 0),
            (TOPIC.to_string(), 1),
            (TOPIC.to_string(), 2)
        ]
    );
    store.close().unwrap();
}

#[test]
fn read_statuses_follow_get_message_status() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path())).unwrap();
    let reader = store.reader();
    let r = reader.read(TOPIC, 0, 0, 32, u32::MAX, None).unwrap();
    assert_eq!(r.status, ReadStatus::NoMessageInQueue);
    assert_eq!((r.next_begin_offset, r.min_offset, r.max_offset), (0, 0, 0));
    let r = reader.read(TOPIC, 0, 7, 32, u32::MAX, None).unwrap();
    assert_eq!(r.status, ReadStatus::NoMessageInQueue);
    assert_eq!(r.next_begin_offset, 0);

    let msgs: Vec<_> = (0..5)
        .map(|i| msg(TOPIC, 0, body_for(0, i), None))
        .collect();
    store.append_batch(&msgs).unwrap().unwrap();
    assert_eq!(reader.max_offset(TOPIC, 0), 5);
    assert_eq!(reader.min_offset(TOPIC, 0), 0);
    assert_eq!(reader.max_offset(TOPIC, 1), 0);

    let r = reader.read(TOPIC, 0, 5, 32, u32::MAX, None).unwrap();
    assert_eq!(r.status, ReadStatus::OffsetOverflowOne);
    assert_eq!(
        (r.next_begin_offset, r.max_offset, r.message_count),
        (5, 5, 0)
    );
    assert!(r.records.is_empty());

    let r = reader.read(TOPIC, 0, 9, 32, u32::MAX, None).unwrap();
    assert_eq!(r.status, ReadStatus::OffsetOverflowBadly);
    assert_eq!(r.next_begin_offset, 5);

    let r = reader.read(TOPIC, 0, 2, 32, u32::MAX, None).unwrap();
    assert_eq!(r.status, ReadStatus::Found);
    assert_eq!((r.message_count, r.next_begin_offset), (3, 5));

    let r = reader.read(TOPIC, 0, 2, 0, u32::MAX, None).unwrap();
    assert_eq!(r.status, ReadStatus::NoMatchedMessage);
    assert_eq!(r.next_begin_offset, 2);
}

#[test]
fn reads_are_capped_by_max_messages_and_max_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path())).unwrap();
    let msgs: Vec<_> = (0..10)
        .map(|_| msg(TOPIC, 0, vec![7u8; 100], None))
        .collect();
    let results = store.append_batch(&msgs).unwrap().unwrap();
    let size = results[0].stored_size;
    let reader = store.reader();

    let r = reader.read(TOPIC, 0, 0, 3, u32::MAX, None).unwrap();
    assert_eq!((r.message_count, r.next_begin_offset), (3, 3));
    assert_eq!(r.records.len(), 3 * size as usize);

    // The first record is served even when it alone exceeds the byte budget.
    let r = reader.read(TOPIC, 0, 4, 32, 10, None).unwrap();
    assert_eq!(
        (r.status, r.message_count, r.next_begin_offset),
        (ReadStatus::Found, 1, 5)
    );

    let r = reader.read(TOPIC, 0, 0, 32, size * 5 / 2, None).unwrap();
    assert_eq!((r.message_count, r.next_begin_offset), (2, 2));

    // The body is the on-disk bytes, unchanged.
    let r = reader.read(TOPIC, 0, 0, 32, u32::MAX, None).unwrap();
    let seg = std::fs::read(dir.path().join("commitlog").join(format!("{:020}", 0))).unwrap();
    assert_eq!(&r.records[..], &seg[..r.records.len()]);
}

#[test]
fn tag_filter_skips_and_advances_next_begin_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.segment_size = 1 << 20;
    let mut store = MessageStore::open(cfg).unwrap();
    let tags = ["TagA", "TagB", "TagB", "TagC"];
    let msgs: Vec<_> = (0..40)
        .map(|i| msg(TOPIC, 0, body_for(0, i), Some(tags[i as usize % 4])))
        .collect();
    store.append_batch(&msgs).unwrap().unwrap();
    let reader = store.reader();
    let a = tag_hash_code("TagA");
    let only_a = move |h: i64| h == a;

    let r = reader
        .read(TOPIC, 0, 0, 3, u32::MAX, Some(&only_a))
        .unwrap();
    assert_eq!(r.status, ReadStatus::Found);
    let got = decode_records(r.records).unwrap();
    assert_eq!(
        got.iter().map(|m| m.queue_offset).collect::<Vec<_>>(),
        vec![0, 4, 8]
    );
    assert!(got.iter().all(|m| m.property("TAGS") == Some("TagA")));
    // Stops right after the third match; entries 9.. are examined next time.
    assert_eq!(r.next_begin_offset, 9);

    let r = reader
        .read(TOPIC, 0, 37, 32, u32::MAX, Some(&only_a))
        .unwrap();
    assert_eq!(r.status, ReadStatus::NoMatchedMessage);
    assert_eq!(
        r.next_begin_offset, 40,
        "skipped entries still advance the offset"
    );

    let none = |_: i64| false;
    let r = reader.read(TOPIC, 0, 0, 32, u32::MAX, Some(&none)).unwrap();
    assert_eq!(
        (r.status, r.next_begin_offset),
        (ReadStatus::NoMatchedMessage, 40)
    );

    // A long run of non-matching entries is examined in bounded windows.
    let b: Vec<_> = (0..900)
        .map(|i| msg(TOPIC, 1, body_for(1, i), Some("TagB")))
        .collect();
    store.append_batch(&b).unwrap().unwrap();
    store
        .append_batch(&[msg(TOPIC, 1, b"wanted".to_vec(), Some("TagA"))])
        .unwrap()
        .unwrap();
    let r = reader
        .read(TOPIC, 1, 0, 32, u32::MAX, Some(&only_a))
        .unwrap();
    assert_eq!(
        (r.status, r.next_begin_offset),
        (ReadStatus::NoMatchedMessage, 800)
    );
    let r = reader
        .read(TOPIC, 1, 800, 32, u32::MAX, Some(&only_a))
        .unwrap();
    assert_eq!(
        (r.status, r.message_count, r.next_begin_offset),
        (ReadStatus::Found, 1, 901)
    );
    assert_eq!(&decode_records(r.records).unwrap()[0].body[..], b"wanted");
}

#[test]
fn search_offset_by_timestamp_lower_and_upper() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path())).unwrap();
    let now = Arc::new(AtomicI64::new(1000));
    let clock = now.clone();
    store.set_clock(move || clock.load(Ordering::SeqCst));
    let mut append = |ts: i64, n: u64| {
        now.store(ts, Ordering::SeqCst);
        let msgs: Vec<_> = (0..n)
            .map(|i| msg(TOPIC, 0, body_for(0, i), None))
            .collect();
        store.append_batch(&msgs).unwrap().unwrap();
    };
    append(1000, 3);
    append(2000, 2);
    append(2000, 1);
    append(3000, 1);
    // A clock stepping back must not break the ordering the search relies on.
    append(2500, 1);
    let reader = store.reader();
    let ts: Vec<i64> = (0..8)
        .map(|i| reader.store_timestamp_at(TOPIC, 0, i).unwrap().unwrap())
        .collect();
    assert_eq!(ts, vec![1000, 1000, 1000, 2000, 2000, 2000, 3000, 3000]);
    assert_eq!(reader.store_timestamp_at(TOPIC, 0, 8).unwrap(), None);
    assert_eq!(reader.store_timestamp_at("Nope", 0, 0).unwrap(), None);

    let search = |t, b| reader.search_offset_by_timestamp(TOPIC, 0, t, b).unwrap();
    use BoundaryType::{Lower, Upper};
    assert_eq!(search(2000, Lower), 3);
    assert_eq!(search(2000, Upper), 5);
    assert_eq!(search(1500, Lower), 3);
    assert_eq!(search(1500, Upper), 2);
    assert_eq!(search(1000, Lower), 0);
    assert_eq!(search(1000, Upper), 2);
    assert_eq!(search(3000, Lower), 6);
    assert_eq!(search(3000, Upper), 7);
    // Older than everything: min; newer than everything: max.
    assert_eq!(search(10, Lower), 0);
    assert_eq!(search(10, Upper), 0);
    assert_eq!(search(9999, Lower), 8);
    assert_eq!(search(9999, Upper), 8);
    assert_eq!(
        reader
            .search_offset_by_timestamp("Nope", 0, 5, Lower)
            .unwrap(),
        0
    );
}

#[test]
fn read_by_physical_offset_returns_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path())).unwrap();
    let msgs: Vec<_> = (0..40)
        .map(|i| msg(TOPIC, i % 2, body_for(i % 2, u64::from(i)), Some("T")))
        .collect();
    let results = store.append_batch(&msgs).unwrap().unwrap();
    let reader = store.reader();
    for (m, r) in msgs.iter().zip(&results) {
        let got = reader
            .read_by_physical_offset(r.physical_offset)
            .unwrap()
            .unwrap();
        assert_eq!(got.body, m.body);
        assert_eq!(got.queue_id, m.queue_id);
        assert_eq!(got.queue_offset, r.queue_offset);
        assert_eq!(got.physical_offset, r.physical_offset);
        assert_eq!(got.stored_size, r.stored_size);
        assert_eq!(
            got.offset_msg_id(),
            format!("7F00000100002A9F{:016X}", r.physical_offset)
        );
        assert_eq!(
            reader
                .read_by_physical_offset(r.physical_offset + 1)
                .unwrap(),
            None
        );
    }
    assert_eq!(
        reader
            .read_by_physical_offset(store.commit_log_end())
            .unwrap(),
        None
    );
    assert_eq!(reader.read_by_physical_offset(u64::MAX).unwrap(), None);
}

#[test]
fn invalid_messages_are_rejected_and_append_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_message_size = 1000;
    let mut store = MessageStore::open(cfg).unwrap();
    let good = msg(TOPIC, 0, vec![1; 10], None);
    type Check = fn(&AppendRejected) -> bool;
    let cases: Vec<(MessageToAppend, Check)> = vec![
        (msg("bad/topic", 0, vec![1], None), |e| {
            matches!(e, AppendRejected::InvalidTopic { .. })
        }),
        (msg("", 0, vec![1], None), |e| {
            matches!(e, AppendRejected::InvalidTopic { .. })
        }),
        (msg(TOPIC, 0, vec![1; 1001], None), |e| {
            matches!(
                e,
                AppendRejected::MessageTooLarge {
                    size: 1001,
                    limit: 1000
                }
            )
        }),
        (
            MessageToAppend {
                properties: "x".repeat(40_000),
                ..good.clone()
            },
            |e| matches!(e, AppendRejected::PropertiesTooLarge { size: 40_000 }),
        ),
        // Cannot fit a 4 KiB segment whatever the body limit says.
        (
            MessageToAppend {
                properties: "x".repeat(4000),
                ..good.clone()
            },
            |e| matches!(e, AppendRejected::MessageTooLarge { .. }),
        ),
    ];
    for (bad, check) in cases {
        let err = store
            .append_batch(&[good.clone(), bad])
            .unwrap()
            .unwrap_err();
        assert!(check(&err), "unexpected error {err:?}");
    }
    assert_eq!(store.reader().max_offset(TOPIC, 0), 0);
    assert_eq!(store.commit_log_end(), 0);
    assert!(store.append_batch(&[]).unwrap().unwrap().is_empty());
    store
        .append_batch(std::slice::from_ref(&good))
        .unwrap()
        .unwrap();
    assert_eq!(store.reader().max_offset(TOPIC, 0), 1);
    // A topic longer than 127 bytes is stored as a V2 record.
    let long = "L".repeat(200);
    store
        .append_batch(&[msg(&long, 0, vec![9; 5], None)])
        .unwrap()
        .unwrap();
    let r = store.reader().read(&long, 0, 0, 1, u32::MAX, None).unwrap();
    let bytes = &r.records[..];
    assert_eq!(
        i32::from_be_bytes(bytes[4..8].try_into().unwrap()),
        message::MAGIC_V2
    );
    assert_eq!(decode_records(r.records.clone()).unwrap()[0].topic, long);
}

#[test]
fn one_fsync_covers_every_batch_written_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.flush_policy = FlushPolicy::Sync;
    let mut store = MessageStore::open(cfg).unwrap();
    let waiter = store.sync_waiter();
    let (_, end1) = store
        .append_batch_nowait(&[msg(TOPIC, 0, vec![1; 50], None)])
        .unwrap()
        .unwrap();
    let (_, end2) = store
        .append_batch_nowait(&[msg(TOPIC, 1, vec![2; 50], None)])
        .unwrap()
        .unwrap();
    assert!(end2 > end1);
    let before = waiter.fsync_count();
    waiter.wait_durable(end2).unwrap();
    assert_eq!(waiter.fsync_count(), before + 1);
    assert!(waiter.durable_position() >= end2);
    waiter.wait_durable(end1).unwrap();
    assert_eq!(
        waiter.fsync_count(),
        before + 1,
        "end1 was covered by the same fsync"
    );
    // append_batch under Sync returns durable.
    store
        .append_batch(&[msg(TOPIC, 0, vec![3; 50], None)])
        .unwrap()
        .unwrap();
    assert_eq!(waiter.durable_position(), store.commit_log_end());
}

#[test]
fn concurrent_sync_appenders_all_become_durable() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.flush_policy = FlushPolicy::Sync;
    cfg.segment_size = 1 << 20;
    let store = MessageStore::open(cfg).unwrap();
    let waiter = store.sync_waiter();
    let reader = store.reader();
    let store = Arc::new(Mutex::new(store));
    let threads: Vec<_> = (0..8u32)
        .map(|t| {
            let store = store.clone();
            let waiter = waiter.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                for i in 0..40u64 {
                    let msgs: Vec<_> = (0..5)
                        .map(|j| msg(TOPIC, t, body_for(t, i * 5 + j), None))
                        .collect();
                    let (res, end) = store
                        .lock()
                        .unwrap()
                        .append_batch_nowait(&msgs)
                        .unwrap()
                        .unwrap();
                    waiter.wait_durable(end).unwrap();
                    assert!(waiter.durable_position() >= end);
                    acked.extend(res);
                }
                acked
            })
        })
        .collect();
    let mut total = 0;
    for t in threads {
        let acked = t.join().unwrap();
        for (i, r) in acked.iter().enumerate() {
            assert_eq!(
                r.queue_offset, i as u64,
                "a queue's offsets follow its appends"
            );
        }
        total += acked.len();
    }
    assert_eq!(total, 8 * 40 * 5);
    assert!(waiter.fsync_count() <= 8 * 40 + 1);
    for t in 0..8u32 {
        let r = reader.read(TOPIC, t, 0, 1000, u32::MAX, None).unwrap();
        let msgs = decode_records(r.records).unwrap();
        assert_eq!(msgs.len(), 200);
        for (i, m) in msgs.iter().enumerate() {
            assert_eq!(&m.body[..], &body_for(t, i as u64)[..]);
        }
    }
}

#[test]
fn concurrent_reader_sees_only_complete_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.segment_size = 64 * 1024;
    let mut store = MessageStore::open(cfg).unwrap();
    let reader = store.reader();
    let total = 3000u64;
    let poller = std::thread::spawn(move || {
        let mut offset = 0;
        while offset < total {
            let r = reader.read(TOPIC, 0, offset, 32, u32::MAX, None).unwrap();
            match r.status {
                ReadStatus::Found => {
                    for m in decode_records(r.records).unwrap() {
                        assert_eq!(m.queue_offset, offset);
                        assert_eq!(&m.body[..], &body_for(0, offset)[..]);
                        offset += 1;
                    }
                    assert_eq!(offset, r.next_begin_offset);
                }
                ReadStatus::OffsetOverflowOne | ReadStatus::NoMessageInQueue => {
                    std::thread::yield_now()
                }
                other => panic!("unexpected status {other:?}"),
            }
        }
    });
    let mut offset = 0;
    while offset < total {
        let msgs: Vec<_> = (offset..offset + 10)
            .map(|o| msg(TOPIC, 0, body_for(0, o), None))
            .collect();
        store.append_batch(&msgs).unwrap().unwrap();
        offset += 10;
    }
    poller.join().unwrap();
}

#[test]
fn a_huge_max_messages_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.segment_size = 8 << 20;
    let mut store = MessageStore::open(cfg).unwrap();
    let batch: Vec<_> = (0..1000).map(|_| msg(TOPIC, 0, vec![1], None)).collect();
    for _ in 0..20 {
        store.append_batch(&batch).unwrap().unwrap();
    }
    let reader = store.reader();
    let r = reader.read(TOPIC, 0, 0, u32::MAX, u32::MAX, None).unwrap();
    assert_eq!(
        (r.status, r.message_count, r.next_begin_offset),
        (ReadStatus::Found, 16384, 16384)
    );
    let r = reader
        .read(TOPIC, 0, 16384, u32::MAX, u32::MAX, None)
        .unwrap();
    assert_eq!(
        (r.message_count, r.next_begin_offset),
        (20_000 - 16384, 20_000)
    );
}
