//! One contract suite for every `OffsetTable` implementation: each case function takes
//! an empty table, and `contract_suites!` instantiates every one as a `#[test]` for
//! `MemoryOffsetTable` and `SledOffsetTable`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use skiff_storage::offset_table::{
    CommitOutcome, MemoryOffsetTable, OffsetKey, OffsetTable, OffsetTableError, SledOffsetTable,
};

type Entries = Vec<(OffsetKey, u32, u64)>;

fn key(topic: &str, group: &str) -> OffsetKey {
    OffsetKey::new(topic, group)
}

fn commit_then_query<T: OffsetTable>(t: &mut T) {
    let k = key("TopicTest", "g1");
    assert_eq!(t.commit(&k, 0, 10).unwrap(), CommitOutcome::Inserted);
    assert_eq!(t.query(&k, 0).unwrap(), Some(10));
    assert_eq!(
        t.commit(&k, 0, 15).unwrap(),
        CommitOutcome::Advanced { previous: 10 }
    );
    assert_eq!(t.query(&k, 0).unwrap(), Some(15));
    assert_eq!(t.commit(&k, 0, 15).unwrap(), CommitOutcome::Unchanged);
    assert_eq!(t.query(&k, 0).unwrap(), Some(15));
    assert_eq!(t.commit(&k, 1, 0).unwrap(), CommitOutcome::Inserted);
    assert_eq!(t.query(&k, 1).unwrap(), Some(0));
    assert_eq!(t.query(&k, 0).unwrap(), Some(15));
    assert_eq!(t.commit(&k, 2, u64::MAX).unwrap(), CommitOutcome::Inserted);
    assert_eq!(t.query(&k, 2).unwrap(), Some(u64::MAX));
}

fn not_found_is_none_not_error<T: OffsetTable>(t: &mut T) {
    let k = key("TopicTest", "g1");
    assert_eq!(t.query(&k, 0).unwrap(), None);
    t.commit(&k, 0, 7).unwrap();
    // Another queue, group, topic, or a group/topic sharing a prefix: all absent.
    assert_eq!(t.query(&k, 1).unwrap(), None);
    assert_eq!(t.query(&key("TopicTest", "g"), 0).unwrap(), None);
    assert_eq!(t.query(&key("TopicTest", "g10"), 0).unwrap(), None);
    assert_eq!(t.query(&key("TopicTes", "g1"), 0).unwrap(), None);
    assert_eq!(t.query(&key("%RETRY%g1", "g1"), 0).unwrap(), None);
    // A key that cannot exist is an error, not "absent".
    for bad in [
        key("a@b", "g1"),
        key("t", "g@h"),
        key("", "g1"),
        key("t", ""),
        key("t\0", "g"),
    ] {
        assert!(
            matches!(t.query(&bad, 0), Err(OffsetTableError::MalformedKey { .. })),
            "query {bad}"
        );
        assert!(
            matches!(
                t.commit(&bad, 0, 1),
                Err(OffsetTableError::MalformedKey { .. })
            ),
            "commit {bad}"
        );
        assert!(
            matches!(
                t.reset(&bad, 0, 1),
                Err(OffsetTableError::MalformedKey { .. })
            ),
            "reset {bad}"
        );
    }
    assert!(matches!(
        t.list_group("a@b"),
        Err(OffsetTableError::MalformedKey { .. })
    ));
    assert!(matches!(
        t.remove_group(""),
        Err(OffsetTableError::MalformedKey { .. })
    ));
    assert_eq!(t.list_all().unwrap(), vec![(k, 0, 7)]);
}

fn lower_commit_is_stored_and_reported<T: OffsetTable>(t: &mut T) {
    let k = key("TopicTest", "orderly");
    t.commit(&k, 3, 100).unwrap();
    assert_eq!(
        t.commit(&k, 3, 40).unwrap(),
        CommitOutcome::Lowered { previous: 100 }
    );
    assert_eq!(t.query(&k, 3).unwrap(), Some(40));
    assert_eq!(
        t.commit(&k, 3, 0).unwrap(),
        CommitOutcome::Lowered { previous: 40 }
    );
    assert_eq!(t.query(&k, 3).unwrap(), Some(0));
    assert_eq!(
        t.commit(&k, 3, 41).unwrap(),
        CommitOutcome::Advanced { previous: 0 }
    );
}

fn reset_writes_any_offset<T: OffsetTable>(t: &mut T) {
    let k = key("TopicTest", "g1");
    // Reset of an absent entry creates it.
    t.reset(&k, 0, 5).unwrap();
    assert_eq!(t.query(&k, 0).unwrap(), Some(5));
    t.commit(&k, 0, 500).unwrap();
    t.reset(&k, 0, 1).unwrap();
    assert_eq!(t.query(&k, 0).unwrap(), Some(1));
    t.reset(&k, 0, 900).unwrap();
    assert_eq!(t.query(&k, 0).unwrap(), Some(900));
    // The next commit compares against the reset value.
    assert_eq!(
        t.commit(&k, 0, 901).unwrap(),
        CommitOutcome::Advanced { previous: 900 }
    );
    assert_eq!(t.list_all().unwrap(), vec![(k, 0, 901)]);
}

fn remove_group<T: OffsetTable>(t: &mut T) {
    t.commit(&key("A", "g"), 0, 1).unwrap();
    t.commit(&key("A", "g"), 1, 2).unwrap();
    t.commit(&key("B", "g"), 0, 3).unwrap();
    t.commit(&key("%RETRY%g", "g"), 0, 4).unwrap();
    t.commit(&key("A", "g2"), 0, 5).unwrap();
    t.commit(&key("A", "h"), 0, 6).unwrap();
    t.commit(&key("g", "x"), 0, 7).unwrap(); // topic named like the group
    assert_eq!(t.remove_group("g").unwrap(), 4);
    assert_eq!(t.query(&key("A", "g"), 0).unwrap(), None);
    assert_eq!(t.query(&key("%RETRY%g", "g"), 0).unwrap(), None);
    assert_eq!(t.list_group("g").unwrap(), vec![]);
    assert_eq!(
        t.list_all().unwrap(),
        vec![
            (key("A", "g2"), 0, 5),
            (key("A", "h"), 0, 6),
            (key("g", "x"), 0, 7)
        ]
    );
    assert_eq!(t.remove_group("g").unwrap(), 0);
    assert_eq!(t.remove_group("never").unwrap(), 0);
    // A removed group starts afresh.
    assert_eq!(
        t.commit(&key("A", "g"), 0, 9).unwrap(),
        CommitOutcome::Inserted
    );
}

fn lists_are_sorted<T: OffsetTable>(t: &mut T) {
    // "a" < "a-b" as strings, but "a@" > "a-" as bytes: the trap for byte-ordered keys.
    let commits = [
        (key("a-b", "g"), 2, 20),
        (key("a", "g"), 10, 30),
        (key("a", "g"), 2, 40),
        (key("%RETRY%g", "g"), 0, 50),
        (key("a", "g-x"), 0, 60),
        (key("a", "f"), 0, 70),
        (key("Z", "g"), 256, 80),
        (key("Z", "g"), 1, 90),
        (key("a", "g"), 0x0100_0000, 100),
    ];
    for (k, q, o) in &commits {
        t.commit(k, *q, *o).unwrap();
    }
    let mut expected: Entries = commits.to_vec();
    expected.sort();
    assert_eq!(t.list_all().unwrap(), expected);
    let group_g: Entries = expected
        .iter()
        .filter(|(k, _, _)| k.group == "g")
        .cloned()
        .collect();
    assert_eq!(group_g.len(), 7);
    assert_eq!(t.list_group("g").unwrap(), group_g);
    assert_eq!(t.list_group("f").unwrap(), vec![(key("a", "f"), 0, 70)]);
    assert_eq!(t.list_group("none").unwrap(), vec![]);
}

fn retry_topics<T: OffsetTable>(t: &mut T) {
    let normal = key("TopicTest", "CID_1");
    let retry = key("%RETRY%CID_1", "CID_1");
    let dlq = key("%DLQ%CID_1", "CID_1");
    assert_eq!(retry.to_string(), "%RETRY%CID_1@CID_1");
    t.commit(&normal, 0, 11).unwrap();
    t.commit(&retry, 0, 22).unwrap();
    t.commit(&dlq, 0, 33).unwrap();
    assert_eq!(t.query(&normal, 0).unwrap(), Some(11));
    assert_eq!(t.query(&retry, 0).unwrap(), Some(22));
    assert_eq!(t.query(&dlq, 0).unwrap(), Some(33));
    assert_eq!(
        t.list_group("CID_1").unwrap(),
        vec![(dlq, 0, 33), (retry, 0, 22), (normal, 0, 11)]
    );
}

fn many_queues<T: OffsetTable>(t: &mut T) {
    let a = key("TopicTest", "g");
    let b = key("TopicTest", "g2");
    let queues: Vec<u32> = (0..1000)
        .chain([255, 256, 65_535, 65_536, u32::MAX - 1, u32::MAX])
        .collect();
    for &q in &queues {
        t.commit(&a, q, u64::from(q) * 3).unwrap();
        t.commit(&b, q, u64::from(q) + 1).unwrap();
    }
    for &q in &queues {
        assert_eq!(t.query(&a, q).unwrap(), Some(u64::from(q) * 3), "queue {q}");
        assert_eq!(t.query(&b, q).unwrap(), Some(u64::from(q) + 1), "queue {q}");
    }
    let mut sorted = queues.clone();
    sorted.sort_unstable();
    sorted.dedup();
    let listed = t.list_group("g").unwrap();
    assert_eq!(
        listed.iter().map(|(_, q, _)| *q).collect::<Vec<_>>(),
        sorted
    );
    assert!(listed
        .iter()
        .all(|(k, q, o)| *k == a && *o == u64::from(*q) * 3));
    assert_eq!(t.list_all().unwrap().len(), 2 * sorted.len());
    assert_eq!(t.remove_group("g2").unwrap(), sorted.len());
    assert_eq!(t.list_all().unwrap(), listed);
}

fn flush_keeps_state<T: OffsetTable>(t: &mut T) {
    let k = key("TopicTest", "g");
    t.flush().unwrap();
    t.commit(&k, 0, 1).unwrap();
    t.flush().unwrap();
    t.flush().unwrap();
    assert_eq!(t.list_all().unwrap(), vec![(k, 0, 1)]);
}

/// One captured event: its level and its fields rendered with `Debug`.
type CapturedEvent = (tracing::Level, BTreeMap<String, String>);

/// Records every event's level and fields.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<CapturedEvent>>>);

struct FieldVisitor<'a>(&'a mut BTreeMap<String, String>);

impl tracing::field::Visit for FieldVisitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut FieldVisitor(&mut fields));
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), fields));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

fn lowered_commit_is_logged<T: OffsetTable>(t: &mut T) {
    let capture = Capture::default();
    let k = key("%RETRY%g", "g");
    tracing::subscriber::with_default(capture.clone(), || {
        t.commit(&k, 5, 100).unwrap();
        t.commit(&k, 5, 101).unwrap();
        t.commit(&k, 5, 101).unwrap();
        t.commit(&k, 5, 60).unwrap();
    });
    let events = capture.0.lock().unwrap().clone();
    let warnings: Vec<_> = events
        .iter()
        .filter(|(level, _)| *level <= tracing::Level::WARN)
        .collect();
    assert_eq!(warnings.len(), 1, "{events:?}");
    let (level, fields) = warnings[0];
    assert_eq!(*level, tracing::Level::WARN);
    let message = &fields["message"];
    assert_eq!(message, &message.to_lowercase());
    assert!(message.contains("lowered"), "{message}");
    assert_eq!(fields["topic"], "%RETRY%g");
    assert_eq!(fields["group"], "g");
    assert_eq!(fields["queue_id"], "5");
    assert_eq!(fields["offset"], "60");
    assert_eq!(fields["previous"], "101");
}

macro_rules! contract_suite {
    ($suite:ident, $make:expr, [$($case:ident),* $(,)?]) => {
        mod $suite {
            use super::*;
            $(
                #[test]
                fn $case() {
                    let (mut table, _guard) = $make;
                    super::$case(&mut table);
                }
            )*
        }
    };
}

macro_rules! contract_suites {
    ($([$suite:ident, $make:expr]),* $(,)?) => {
        $(
            contract_suite!($suite, $make, [
                commit_then_query,
                not_found_is_none_not_error,
                lower_commit_is_stored_and_reported,
                reset_writes_any_offset,
                remove_group,
                lists_are_sorted,
                retry_topics,
                many_queues,
                flush_keeps_state,
                lowered_commit_is_logged,
            ]);
        )*
    };
}

fn memory_table() -> (MemoryOffsetTable, ()) {
    (MemoryOffsetTable::new(), ())
}

fn sled_table() -> (SledOffsetTable, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let table = SledOffsetTable::open_path(dir.path().join("meta")).unwrap();
    (table, dir)
}

contract_suites!([memory, memory_table()], [sled, sled_table()]);

/// The sled table keeps its state across a reopen of the database directory.
#[test]
fn sled_state_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta");
    let mut expected: Entries = Vec::new();
    {
        let mut t = SledOffsetTable::open_path(&path).unwrap();
        for g in 0..3 {
            for q in 0..4 {
                let k = key("%RETRY%x", &format!("g{g}"));
                t.commit(&k, q, u64::from(q) + 100 * g).unwrap();
                expected.push((k, q, u64::from(q) + 100 * g));
            }
        }
        t.flush().unwrap();
    }
    let t = SledOffsetTable::open_path(&path).unwrap();
    expected.sort();
    assert_eq!(t.list_all().unwrap(), expected);
}
