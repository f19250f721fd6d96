//! A damaged offset record is an error naming key, queue and file: never offset 0, never absent.

use std::path::{Path, PathBuf};

use skiff_storage::metadata::open_db;
use skiff_storage::offset_table::{
    CommitOutcome, OffsetKey, OffsetRecord, OffsetTable, OffsetTableError, SledOffsetTable,
    OFFSETS_TREE, OFFSET_RECORD_VERSION,
};
use skiff_storage::record;

struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
    db: sled::Db,
    table: SledOffsetTable,
    key: OffsetKey,
}

const QUEUE: u32 = 3;

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta");
    let db = open_db(&path).unwrap();
    let mut table = SledOffsetTable::open(&db, path.clone()).unwrap();
    let key = OffsetKey::new("TopicTest", "CID_corrupt");
    table.commit(&key, QUEUE, 4242).unwrap();
    table.commit(&key, QUEUE + 1, 7).unwrap();
    Fixture {
        _dir: dir,
        path,
        db,
        table,
        key,
    }
}

impl Fixture {
    fn raw_tree(&self) -> sled::Tree {
        self.db.open_tree(OFFSETS_TREE).unwrap()
    }

    fn raw_value(&self) -> Vec<u8> {
        self.raw_tree()
            .get(self.key.stored_key(QUEUE))
            .unwrap()
            .expect("stored")
            .to_vec()
    }

    fn overwrite_raw(&self, value: &[u8]) {
        self.raw_tree()
            .insert(self.key.stored_key(QUEUE), value)
            .unwrap();
    }
}

/// The error is `Corrupt` for the fixture's key and queue, and its message names them and the file.
fn assert_corrupt(result: Result<impl std::fmt::Debug, OffsetTableError>, path: &Path) {
    let err = result.expect_err("a corrupt record must be an error");
    let message = err.to_string();
    match &err {
        OffsetTableError::Corrupt {
            key,
            queue_id,
            file,
            reason,
        } => {
            assert_eq!(key, "TopicTest@CID_corrupt");
            assert_eq!(*queue_id, QUEUE);
            assert_eq!(file, path);
            assert!(!reason.is_empty());
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(message.contains("TopicTest@CID_corrupt"), "{message}");
    assert!(message.contains(&format!("queue {QUEUE}")), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
}

#[test]
fn flipped_payload_byte_is_corrupt_everywhere() {
    let mut f = fixture();
    let mut raw = f.raw_value();
    let last = raw.len() - 1;
    raw[last] ^= 0x01;
    f.overwrite_raw(&raw);

    assert_corrupt(f.table.query(&f.key, QUEUE), &f.path);
    assert_corrupt(f.table.query_record(&f.key, QUEUE), &f.path);
    assert_corrupt(f.table.list_all(), &f.path);
    assert_corrupt(f.table.list_group("CID_corrupt"), &f.path);
    // Other entries still read.
    assert_eq!(f.table.query(&f.key, QUEUE + 1).unwrap(), Some(7));
    // A commit does not paper over the damage: it fails and leaves the record as it was.
    assert_corrupt(f.table.commit(&f.key, QUEUE, 5000), &f.path);
    assert_eq!(f.raw_value(), raw);
}

#[test]
fn every_single_byte_flip_is_an_error() {
    let f = fixture();
    let good = f.raw_value();
    for i in 0..good.len() {
        for bit in [0x01u8, 0x80] {
            let mut raw = good.clone();
            raw[i] ^= bit;
            f.overwrite_raw(&raw);
            match f.table.query(&f.key, QUEUE) {
                Err(OffsetTableError::Corrupt { .. }) => {}
                // Byte 0 is the version.
                Err(OffsetTableError::UnknownVersion { version, .. }) if i == 0 => {
                    assert_eq!(version, good[0] ^ bit)
                }
                other => panic!("byte {i} bit {bit:#x}: got {other:?}"),
            }
        }
    }
}

#[test]
fn truncated_and_empty_values_are_corrupt() {
    let f = fixture();
    let good = f.raw_value();
    for len in 0..good.len() {
        f.overwrite_raw(&good[..len]);
        match f.table.query(&f.key, QUEUE) {
            Err(OffsetTableError::Corrupt { .. }) => {}
            other => panic!("{len} bytes: got {other:?}"),
        }
    }
    let mut longer = good.clone();
    longer.push(0);
    f.overwrite_raw(&longer);
    assert_corrupt(f.table.query(&f.key, QUEUE), &f.path);
}

#[test]
fn unknown_version_is_reported() {
    let mut f = fixture();
    let future = record::encode(
        OFFSET_RECORD_VERSION + 1,
        &OffsetRecord {
            offset: 1,
            updated_at_ms: 0,
        },
    );
    f.overwrite_raw(&future);
    for result in [
        f.table.query(&f.key, QUEUE).map(|_| ()),
        f.table.list_all().map(|_| ()),
        f.table.commit(&f.key, QUEUE, 9).map(|_| ()),
    ] {
        let err = result.expect_err("unknown version must be an error");
        let message = err.to_string();
        match err {
            OffsetTableError::UnknownVersion {
                key,
                queue_id,
                file,
                version,
            } => {
                assert_eq!(key, "TopicTest@CID_corrupt");
                assert_eq!(queue_id, QUEUE);
                assert_eq!(file, f.path);
                assert_eq!(version, OFFSET_RECORD_VERSION + 1);
            }
            other => panic!("expected UnknownVersion, got {other:?}"),
        }
        assert!(message.contains("TopicTest@CID_corrupt"), "{message}");
        assert!(message.contains(&f.path.display().to_string()), "{message}");
    }
}

#[test]
fn reset_repairs_a_corrupt_record() {
    let mut f = fixture();
    f.overwrite_raw(b"\x01garbage"); // right version, wrong checksum
    assert_corrupt(f.table.query(&f.key, QUEUE), &f.path);
    f.table.reset(&f.key, QUEUE, 100).unwrap();
    assert_eq!(f.table.query(&f.key, QUEUE).unwrap(), Some(100));
    assert_eq!(
        f.table.commit(&f.key, QUEUE, 101).unwrap(),
        CommitOutcome::Advanced { previous: 100 }
    );
}

#[test]
fn malformed_stored_key_is_reported() {
    let mut f = fixture();
    f.raw_tree()
        .insert(b"no-separator", b"x".as_slice())
        .unwrap();
    for result in [f.table.list_all(), f.table.list_group("CID_corrupt")] {
        match result {
            Err(OffsetTableError::MalformedKey { key, file }) => {
                assert_eq!(key, "no-separator");
                assert_eq!(file, f.path);
            }
            other => panic!("expected MalformedKey, got {other:?}"),
        }
    }
    assert!(matches!(
        f.table.remove_group("CID_corrupt"),
        Err(OffsetTableError::MalformedKey { .. })
    ));
}

#[test]
fn corruption_survives_reopen() {
    let f = fixture();
    let mut raw = f.raw_value();
    raw[1] ^= 0xff; // the checksum
    f.overwrite_raw(&raw);
    f.db.flush().unwrap();
    let Fixture {
        _dir,
        path,
        db,
        table,
        ..
    } = f;
    drop(table);
    drop(db);
    let table = SledOffsetTable::open_path(&path).unwrap();
    let key = OffsetKey::new("TopicTest", "CID_corrupt");
    assert_corrupt(table.query(&key, QUEUE), &path);
    assert_eq!(table.query(&key, QUEUE + 1).unwrap(), Some(7));
}
