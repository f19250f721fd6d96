//! Reopen and crash recovery: checkpoints, torn tails, lost consume-queue entries and the
//! corruption policy (see `skiff_storage::store` module docs).
//!
//! A process crash leaves the files exactly as the page cache shows them, so a copy of a live
//! store directory is a faithful "crashed" store.

use skiff_storage::consume_queue::ENTRY_SIZE;
use skiff_storage::message::{decode_records, encode_properties, MessageToAppend};
use skiff_storage::store::{
    AppendResult, FlushPolicy, MessageStore, ReadStatus, StoreConfig, StoreError,
};
use skiff_storage::testsuite::{message, store_config};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const TOPIC: &str = "TopicTest";
/// Offset of the body inside a record with IPv4 hosts.
const BODY_POSITION: u64 = 88;

fn config(dir: &Path, segment_size: u64) -> StoreConfig {
    store_config(dir, segment_size, FlushPolicy::Async)
}

fn body_for(queue_id: u32, offset: u64) -> Vec<u8> {
    let len = 20 + ((offset * 53 + u64::from(queue_id) * 7) % 150) as usize;
    (0..len)
        .map(|i| (i as u64 * 13 + offset * 3 + u64::from(queue_id)) as u8)
        .collect()
}

fn msg(queue_id: u32, offset: u64) -> MessageToAppend {
    MessageToAppend {
        properties: encode_properties(&[("TAGS", "TagA")]),
        ..message(TOPIC, queue_id, body_for(queue_id, offset))
    }
}

/// Appends `n` messages per queue for `queues` queues in batches of 10, continuing each
/// queue's offsets from the store's max.
fn fill(store: &mut MessageStore, queues: u32, n: u64) -> Vec<AppendResult> {
    let reader = store.reader();
    let mut out = Vec::new();
    for q in 0..queues {
        let start = reader.max_offset(TOPIC, q);
        let mut o = start;
        while o < start + n {
            let end = (o + 10).min(start + n);
            let msgs: Vec<_> = (o..end).map(|i| msg(q, i)).collect();
            out.extend(store.append_batch(&msgs).unwrap().unwrap());
            o = end;
        }
    }
    out
}

/// Checks that every queue holds exactly `expected[q]` messages with the generated bodies.
fn verify(store: &MessageStore, expected: &[u64]) {
    let reader = store.reader();
    for (q, &n) in expected.iter().enumerate() {
        let q = q as u32;
        assert_eq!(reader.max_offset(TOPIC, q), n, "max offset of queue {q}");
        let mut offset = 0;
        while offset < n {
            let r = reader.read(TOPIC, q, offset, 32, u32::MAX, None).unwrap();
            assert_eq!(r.status, ReadStatus::Found);
            for m in decode_records(r.records).unwrap() {
                assert_eq!(m.queue_offset, offset);
                assert_eq!(
                    &m.body[..],
                    &body_for(q, offset)[..],
                    "queue {q} offset {offset}"
                );
                offset += 1;
            }
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else if e.file_name() != "lock" {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// A copy of the live store as a crash at this instant would leave it.
fn crash_copy(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    copy_dir(from, to.path());
    to
}

fn segment_path(dir: &Path, physical_offset: u64) -> PathBuf {
    let mut bases: Vec<u64> = std::fs::read_dir(dir.join("commitlog"))
        .unwrap()
        .map(|e| {
            e.unwrap()
                .file_name()
                .into_string()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    bases.sort();
    let base = bases
        .into_iter()
        .rev()
        .find(|b| *b <= physical_offset)
        .unwrap();
    dir.join("commitlog").join(format!("{base:020}"))
}

fn flip_byte(dir: &Path, physical_offset: u64) -> PathBuf {
    let path = segment_path(dir, physical_offset);
    let base: u64 = path.file_name().unwrap().to_str().unwrap().parse().unwrap();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, physical_offset - base).unwrap();
    b[0] ^= 0x5A;
    f.write_all_at(&b, physical_offset - base).unwrap();
    path
}

/// The first (with the default file size, the only) file of a queue.
fn cq_path(dir: &Path, queue_id: u32) -> PathBuf {
    dir.join("consumequeue")
        .join(TOPIC)
        .join(queue_id.to_string())
        .join("00000000000000000000")
}

#[test]
fn reopen_recovers_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path(), 4096)).unwrap();
    let first = fill(&mut store, 3, 70);
    let end = store.commit_log_end();
    store.close().unwrap();

    let mut store = MessageStore::open(config(dir.path(), 4096)).unwrap();
    assert_eq!(store.commit_log_end(), end);
    verify(&store, &[70, 70, 70]);
    let reader = store.reader();
    for r in first.iter().step_by(17) {
        let m = reader
            .read_by_physical_offset(r.physical_offset)
            .unwrap()
            .unwrap();
        assert_eq!(m.queue_offset, r.queue_offset);
    }
    // Appends continue where the log and each queue left off.
    let more = fill(&mut store, 3, 5);
    assert_eq!(more[0].physical_offset, end);
    assert_eq!(more[0].queue_offset, 70);
    assert!(more[0].store_timestamp >= first.last().unwrap().store_timestamp);
    drop(store);

    let store = MessageStore::open(config(dir.path(), 4096)).unwrap();
    verify(&store, &[75, 75, 75]);
}

#[test]
fn a_second_open_of_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path(), 4096)).unwrap();
    match MessageStore::open(config(dir.path(), 4096)) {
        Err(StoreError::Io { path, .. }) => assert!(path.ends_with("lock")),
        Err(e) => panic!("unexpected error {e:?}"),
        Ok(_) => panic!("second open succeeded"),
    }
    drop(store);
    MessageStore::open(config(dir.path(), 4096)).unwrap();
}

#[test]
fn unflushed_appends_survive_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path(), 4096)).unwrap();
    fill(&mut store, 2, 30);
    store.flush().unwrap();
    fill(&mut store, 2, 25);
    let crashed = crash_copy(dir.path());
    let store2 = MessageStore::open(config(crashed.path(), 4096)).unwrap();
    assert_eq!(store2.commit_log_end(), store.commit_log_end());
    verify(&store2, &[55, 55]);
}

#[test]
fn torn_tail_mid_record_is_truncated_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path(), 1 << 20)).unwrap();
    fill(&mut store, 1, 20);
    store.flush().unwrap();
    let last = *fill(&mut store, 1, 10).last().unwrap();
    let crashed = crash_copy(dir.path());
    let seg = segment_path(crashed.path(), last.physical_offset);
    let f = OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(last.physical_offset + u64::from(last.stored_size) - 10)
        .unwrap();
    drop(f);

    let mut store = MessageStore::open(config(crashed.path(), 1 << 20)).unwrap();
    assert_eq!(store.commit_log_end(), last.physical_offset);
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), last.physical_offset);
    verify(&store, &[29]);
    // The lost offset is handed out again.
    let again = store.append_batch(&[msg(0, 29)]).unwrap().unwrap();
    assert_eq!(
        (again[0].queue_offset, again[0].physical_offset),
        (29, last.physical_offset)
    );
    drop(store);
    let store = MessageStore::open(config(crashed.path(), 1 << 20)).unwrap();
    verify(&store, &[30]);
}

#[test]
fn garbage_after_the_tail_is_truncated_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path(), 1 << 20)).unwrap();
    let results = fill(&mut store, 2, 15);
    let end = store.commit_log_end();
    store.flush().unwrap();
    let template = std::fs::read(segment_path(dir.path(), 0)).unwrap();
    let first_size = results[0].stored_size as usize;

    // (Zeros after the tail are prepared space, kept: see the prepared-tail tests.)
    let garbage: Vec<Vec<u8>> = vec![
        (0..333u32).map(|i| (i * 7919 % 251) as u8).collect(),
        // A plausible header whose body fails its CRC: what a write cut mid-body leaves.
        {
            let mut rec = template[..first_size].to_vec();
            rec[28..36].copy_from_slice(&end.to_be_bytes());
            rec[BODY_POSITION as usize] ^= 1;
            rec
        },
        // Half a record.
        template[..first_size / 2].to_vec(),
    ];
    for g in garbage {
        let crashed = crash_copy(dir.path());
        let seg = segment_path(crashed.path(), end);
        OpenOptions::new()
            .append(true)
            .open(&seg)
            .unwrap()
            .write_all(&g)
            .unwrap();
        let mut store = MessageStore::open(config(crashed.path(), 1 << 20)).unwrap();
        assert_eq!(store.commit_log_end(), end);
        assert_eq!(std::fs::metadata(&seg).unwrap().len(), end);
        verify(&store, &[15, 15]);
        fill(&mut store, 2, 1);
        verify(&store, &[16, 16]);
    }
}

#[test]
fn torn_first_record_of_a_new_segment_is_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path(), 4096)).unwrap();
    store.flush().unwrap();
    let mut results = Vec::new();
    // Append until a segment starts with the last record appended.
    let mut o = 0;
    loop {
        let r = store.append_batch(&[msg(0, o)]).unwrap().unwrap()[0];
        o += 1;
        results.push(r);
        if o > 25
            && segment_path(dir.path(), r.physical_offset)
                .ends_with(format!("{:020}", r.physical_offset))
        {
            break;
        }
    }
    let last = *results.last().unwrap();
    let crashed = crash_copy(dir.path());
    let seg = segment_path(crashed.path(), last.physical_offset);
    OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(40)
        .unwrap();
    let mut store = MessageStore::open(config(crashed.path(), 4096)).unwrap();
    assert_eq!(store.commit_log_end(), last.physical_offset);
    verify(&store, &[o - 1]);
    let again = store.append_batch(&[msg(0, o - 1)]).unwrap().unwrap()[0];
    assert_eq!(again.physical_offset, last.physical_offset);
    verify(&store, &[o]);
}

#[test]
fn consume_queue_rebuilt_when_its_file_lost_entries() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path(), 4096)).unwrap();
    fill(&mut store, 3, 100);
    store.close().unwrap();

    // Queue 0 keeps 10 entries and half of the 11th; queue 1 loses its file; queue 2's last
    // entry is zeroed.
    let q0 = OpenOptions::new()
        .write(true)
        .open(cq_path(dir.path(), 0))
        .unwrap();
    q0.set_len(10 * ENTRY_SIZE as u64 + 5).unwrap();
    std::fs::remove_file(cq_path(dir.path(), 1)).unwrap();
    let q2 = OpenOptions::new()
        .write(true)
        .open(cq_path(dir.path(), 2))
        .unwrap();
    q2.write_all_at(&[0u8; ENTRY_SIZE], 99 * ENTRY_SIZE as u64)
        .unwrap();
    drop((q0, q2));

    let store = MessageStore::open(config(dir.path(), 4096)).unwrap();
    verify(&store, &[100, 100, 100]);
    // The rebuilt entries reach the files by the next checkpoint (here, the close's).
    store.close().unwrap();
    for q in 0..3 {
        assert_eq!(
            std::fs::metadata(cq_path(dir.path(), q)).unwrap().len(),
            100 * ENTRY_SIZE as u64
        );
    }
}

#[test]
fn consume_queue_tail_past_the_checkpoint_is_rebuilt_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path(), 4096)).unwrap();
    fill(&mut store, 2, 40);
    store.flush().unwrap();
    fill(&mut store, 2, 10);
    let crashed = crash_copy(dir.path());
    // The index writes after the checkpoint never reached the file, and one is half there.
    let q0 = OpenOptions::new()
        .write(true)
        .open(cq_path(crashed.path(), 0))
        .unwrap();
    q0.set_len(40 * ENTRY_SIZE as u64 + 13).unwrap();
    std::fs::remove_file(cq_path(crashed.path(), 1)).unwrap();
    drop(q0);
    let store = MessageStore::open(config(crashed.path(), 4096)).unwrap();
    verify(&store, &[50, 50]);
}

#[test]
fn missing_or_damaged_checkpoint_recovers_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path(), 4096)).unwrap();
    fill(&mut store, 2, 60);
    store.close().unwrap();

    let ck = dir.path().join("checkpoint");
    let mut bytes = std::fs::read(&ck).unwrap();
    bytes[10] ^= 0xFF;
    std::fs::write(&ck, &bytes).unwrap();
    let store = MessageStore::open(config(dir.path(), 4096)).unwrap();
    verify(&store, &[60, 60]);
    drop(store);

    std::fs::remove_file(&ck).unwrap();
    std::fs::remove_dir_all(dir.path().join("consumequeue")).unwrap();
    let store = MessageStore::open(config(dir.path(), 4096)).unwrap();
    verify(&store, &[60, 60]);
}

#[test]
fn corrupt_body_is_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path(), 1 << 20)).unwrap();
    let results = fill(&mut store, 1, 50);
    store.close().unwrap();
    let victim = results[20];
    let seg = flip_byte(dir.path(), victim.physical_offset + BODY_POSITION + 3);

    // The checkpoint covers the record, so open does not re-validate it; reads do.
    let store = MessageStore::open(config(dir.path(), 1 << 20)).unwrap();
    let reader = store.reader();
    for start in [20, 5] {
        match reader.read(TOPIC, 0, start, 32, u32::MAX, None) {
            Err(StoreError::CorruptRecord {
                path,
                physical_offset,
                reason,
            }) => {
                assert_eq!(path, seg);
                assert_eq!(physical_offset, victim.physical_offset);
                assert!(reason.contains("crc"), "{reason}");
            }
            other => panic!("expected CorruptRecord, got {other:?}"),
        }
    }
    match reader.read_by_physical_offset(victim.physical_offset) {
        Err(StoreError::CorruptRecord {
            path,
            physical_offset,
            ..
        }) => {
            assert_eq!(
                (path, physical_offset),
                (seg.clone(), victim.physical_offset)
            );
        }
        other => panic!("expected CorruptRecord, got {other:?}"),
    }
    let err = reader
        .read(TOPIC, 0, 20, 1, u32::MAX, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&victim.physical_offset.to_string()) && err.contains("00000000000000000000")
    );
    // Records around it are still served.
    let r = reader.read(TOPIC, 0, 0, 20, u32::MAX, None).unwrap();
    assert_eq!(r.message_count, 20);
    let r = reader.read(TOPIC, 0, 21, 32, u32::MAX, None).unwrap();
    assert_eq!(r.message_count, 29);
}

#[test]
fn corruption_followed_by_valid_records_fails_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path(), 1 << 20)).unwrap();
    let results = fill(&mut store, 1, 50);
    store.close().unwrap();
    std::fs::remove_file(dir.path().join("checkpoint")).unwrap();

    // A flipped body byte, and separately a flipped magic byte (the header itself is damaged).
    for (victim, delta) in [(results[20], BODY_POSITION + 1), (results[33], 5)] {
        let copy = crash_copy(dir.path());
        let seg = flip_byte(copy.path(), victim.physical_offset + delta);
        match MessageStore::open(config(copy.path(), 1 << 20)) {
            Err(StoreError::CorruptRecord {
                path,
                physical_offset,
                reason,
            }) => {
                assert_eq!(path, seg);
                assert_eq!(physical_offset, victim.physical_offset);
                assert!(reason.contains("valid record follows"), "{reason}");
            }
            Err(e) => panic!("unexpected error {e:?}"),
            Ok(_) => panic!("open accepted a corrupt record in the middle of the log"),
        }
        // Nothing was truncated.
        assert_eq!(
            std::fs::metadata(&seg).unwrap().len(),
            std::fs::metadata(segment_path(dir.path(), 0))
                .unwrap()
                .len()
        );
    }
}

#[test]
fn corruption_after_the_checkpoint_followed_by_valid_records_fails_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path(), 1 << 20)).unwrap();
    fill(&mut store, 1, 10);
    store.flush().unwrap();
    let results = fill(&mut store, 1, 10);
    let crashed = crash_copy(dir.path());
    let victim = results[4];
    flip_byte(crashed.path(), victim.physical_offset + BODY_POSITION);
    match MessageStore::open(config(crashed.path(), 1 << 20)) {
        Err(StoreError::CorruptRecord {
            physical_offset, ..
        }) => {
            assert_eq!(physical_offset, victim.physical_offset)
        }
        Err(e) => panic!("unexpected error {e:?}"),
        Ok(_) => panic!("open accepted a corrupt record followed by valid ones"),
    }
}

#[test]
fn corrupt_last_record_past_the_checkpoint_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path(), 1 << 20)).unwrap();
    fill(&mut store, 1, 10);
    store.flush().unwrap();
    let last = *fill(&mut store, 1, 10).last().unwrap();
    let crashed = crash_copy(dir.path());
    flip_byte(crashed.path(), last.physical_offset + BODY_POSITION + 2);
    let store = MessageStore::open(config(crashed.path(), 1 << 20)).unwrap();
    assert_eq!(store.commit_log_end(), last.physical_offset);
    verify(&store, &[19]);
}

#[test]
fn truncation_below_the_checkpoint_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path(), 1 << 20)).unwrap();
    let results = fill(&mut store, 1, 30);
    store.flush().unwrap();
    fill(&mut store, 1, 1);
    let crashed = crash_copy(dir.path());
    drop(store);
    // Damage a checkpointed record and lose a queue's index entries: the record past the
    // checkpoint shows the gap, so recovery rescans the log from its start.
    let victim = results[25];
    flip_byte(crashed.path(), victim.physical_offset + BODY_POSITION);
    OpenOptions::new()
        .write(true)
        .open(cq_path(crashed.path(), 0))
        .unwrap()
        .set_len(20 * ENTRY_SIZE as u64)
        .unwrap();
    match MessageStore::open(config(crashed.path(), 1 << 20)) {
        Err(StoreError::CorruptRecord {
            physical_offset,
            reason,
            ..
        }) => {
            assert_eq!(physical_offset, victim.physical_offset);
            assert!(reason.contains("checkpoint"), "{reason}");
        }
        Err(e) => panic!("unexpected error {e:?}"),
        Ok(_) => panic!("a damaged durable record was silently dropped"),
    }
}

#[test]
fn damaged_index_entry_in_the_middle_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path(), 1 << 20)).unwrap();
    fill(&mut store, 1, 30);
    store.close().unwrap();
    // Entry 5 claims a 2 GiB record: it must be refused before it sizes any buffer.
    let cq = OpenOptions::new()
        .write(true)
        .open(cq_path(dir.path(), 0))
        .unwrap();
    cq.write_all_at(&i32::MAX.to_be_bytes(), 5 * ENTRY_SIZE as u64 + 8)
        .unwrap();
    drop(cq);
    let store = MessageStore::open(config(dir.path(), 1 << 20)).unwrap();
    let reader = store.reader();
    match reader.read(TOPIC, 0, 0, 32, u32::MAX, None) {
        Err(StoreError::Io { path, source }) => {
            // The error names the queue's directory.
            assert_eq!(Some(path.as_path()), cq_path(dir.path(), 0).parent());
            assert!(source.to_string().contains("offset 5"), "{source}");
        }
        other => panic!("expected an index error, got {other:?}"),
    }
    assert_eq!(
        reader
            .read(TOPIC, 0, 0, 5, u32::MAX, None)
            .unwrap()
            .message_count,
        5
    );
    assert_eq!(
        reader
            .read(TOPIC, 0, 6, 32, u32::MAX, None)
            .unwrap()
            .message_count,
        24
    );
}

#[test]
fn every_cut_of_the_tail_recovers_the_complete_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path(), 1 << 20)).unwrap();
    fill(&mut store, 1, 10);
    store.flush().unwrap();
    let tail = fill(&mut store, 1, 3);
    let seg = segment_path(dir.path(), 0);
    let first = tail[0].physical_offset;
    let end = store.commit_log_end();
    for cut in (first..end).step_by(11) {
        let crashed = crash_copy(dir.path());
        let path = crashed.path().join(seg.strip_prefix(dir.path()).unwrap());
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(cut)
            .unwrap();
        let store = MessageStore::open(config(crashed.path(), 1 << 20)).unwrap();
        let complete = tail
            .iter()
            .take_while(|r| r.physical_offset + u64::from(r.stored_size) <= cut)
            .count() as u64;
        let valid_end = tail
            .get(complete as usize)
            .map_or(end, |r| r.physical_offset);
        assert_eq!(store.commit_log_end(), valid_end, "cut at {cut}");
        verify(&store, &[10 + complete]);
    }
}

/// A sync-flushed store preparing `prepare_ahead` bytes when asked (no thread).
fn prepared_config(dir: &Path, segment_size: u64, prepare_ahead: u64) -> StoreConfig {
    StoreConfig {
        prepare_ahead,
        ..store_config(dir, segment_size, FlushPolicy::Sync)
    }
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn a_prepared_tail_is_kept_on_reopen_and_written_over() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(prepared_config(dir.path(), 1 << 20, 8192)).unwrap();
    fill(&mut store, 2, 15);
    let end = store.commit_log_end();
    assert!(store.prepare_ahead().unwrap());
    assert_eq!(file_len(&segment_path(dir.path(), 0)), end + 8192);
    let crashed = crash_copy(dir.path());
    drop(store);

    let seg = segment_path(crashed.path(), 0);
    let mut store = MessageStore::open(prepared_config(crashed.path(), 1 << 20, 8192)).unwrap();
    assert_eq!(
        store.commit_log_end(),
        end,
        "the log ends where the zeros begin"
    );
    assert_eq!(file_len(&seg), end + 8192, "the prepared space is kept");
    verify(&store, &[15, 15]);
    fill(&mut store, 2, 1);
    let grown = store.commit_log_end();
    assert!(grown > end && grown < end + 8192);
    assert_eq!(
        file_len(&seg),
        end + 8192,
        "records land in the prepared space"
    );
    drop(store);

    let store = MessageStore::open(prepared_config(crashed.path(), 1 << 20, 8192)).unwrap();
    assert_eq!(store.commit_log_end(), grown);
    verify(&store, &[16, 16]);
}

#[test]
fn data_after_a_never_written_gap_in_prepared_space_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(prepared_config(dir.path(), 1 << 20, 8192)).unwrap();
    let results = fill(&mut store, 2, 15);
    let end = store.commit_log_end();
    store.flush().unwrap();
    assert!(store.prepare_ahead().unwrap());
    let crashed = crash_copy(dir.path());
    drop(store);

    // A later block of a batch reached the disk, its first did not: a whole valid record
    // 4 KiB past the end, zeros before it.
    let seg = segment_path(crashed.path(), end);
    let template = std::fs::read(&seg).unwrap();
    let mut record = template[..results[0].stored_size as usize].to_vec();
    let later = end + 4096;
    record[28..36].copy_from_slice(&later.to_be_bytes());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .write_all_at(&record, later)
        .unwrap();

    let mut store = MessageStore::open(prepared_config(crashed.path(), 1 << 20, 8192)).unwrap();
    assert_eq!(store.commit_log_end(), end);
    assert_eq!(
        file_len(&seg),
        end,
        "the stray record is cut off with the rest"
    );
    verify(&store, &[15, 15]);
    fill(&mut store, 2, 1);
    verify(&store, &[16, 16]);
}

#[test]
fn a_roll_cuts_the_prepared_rest_off_the_full_segment() {
    let dir = tempfile::tempdir().unwrap();
    let segment = 4096;
    let mut store = MessageStore::open(prepared_config(dir.path(), segment, segment)).unwrap();
    fill(&mut store, 1, 1);
    assert!(store.prepare_ahead().unwrap());
    let first = segment_path(dir.path(), 0);
    assert_eq!(
        file_len(&first),
        segment,
        "prepared up to the segment's size, not past"
    );
    let mut appended = 1;
    while segment_path(dir.path(), store.commit_log_end()) == first {
        fill(&mut store, 1, 1);
        appended += 1;
    }
    let second = segment_path(dir.path(), store.commit_log_end());
    let second_base: u64 = second
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        file_len(&first),
        second_base,
        "the full segment ends where its data does"
    );
    drop(store);

    let store = MessageStore::open(prepared_config(dir.path(), segment, segment)).unwrap();
    verify(&store, &[appended]);
}
