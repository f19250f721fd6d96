//! Random commit / reset / remove / flush / reopen sequences against a `BTreeMap` model.
//!
//! After a reopen that follows a flush (no write in between), `list_all` equals the model
//! exactly. A reopen after unflushed writes may only show, per entry, the flushed value or one
//! written since the flush (sled also flushes on a clean drop, so in practice it is exact).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use skiff_storage::metadata::open_db;
use skiff_storage::offset_table::{CommitOutcome, OffsetKey, OffsetTable, SledOffsetTable};

const TOPICS: [&str; 3] = ["TopicTest", "%RETRY%g1", "a-b"];
const GROUPS: [&str; 3] = ["g1", "g2", "a"];

type Model = BTreeMap<(OffsetKey, u32), u64>;

#[derive(Clone, Debug)]
enum Op {
    Commit {
        key: OffsetKey,
        queue: u32,
        offset: u64,
    },
    Reset {
        key: OffsetKey,
        queue: u32,
        offset: u64,
    },
    RemoveGroup(&'static str),
    Flush,
    Reopen,
}

fn key_strategy() -> impl Strategy<Value = OffsetKey> {
    (
        prop::sample::select(&TOPICS[..]),
        prop::sample::select(&GROUPS[..]),
    )
        .prop_map(|(t, g)| OffsetKey::new(t, g))
}

fn offset_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0u64..200, 1 => Just(u64::MAX), 1 => any::<u64>()]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let queue = prop_oneof![4 => 0u32..4, 1 => Just(u32::MAX), 1 => 255u32..258];
    prop_oneof![
        10 => (key_strategy(), queue.clone(), offset_strategy())
            .prop_map(|(key, queue, offset)| Op::Commit { key, queue, offset }),
        2 => (key_strategy(), queue, offset_strategy())
            .prop_map(|(key, queue, offset)| Op::Reset { key, queue, offset }),
        1 => prop::sample::select(&GROUPS[..]).prop_map(Op::RemoveGroup),
        2 => Just(Op::Flush),
        2 => Just(Op::Reopen),
    ]
}

struct Harness {
    dir: tempfile::TempDir,
    db: Option<sled::Db>,
    table: Option<SledOffsetTable>,
    model: Model,
    /// The model as of the last flush.
    durable: Model,
    /// Entries written since the last flush, with every value they took (`None` = removed).
    pending: BTreeMap<(OffsetKey, u32), Vec<Option<u64>>>,
    exact_reopens: usize,
}

impl Harness {
    fn new() -> Self {
        let mut h = Harness {
            dir: tempfile::tempdir().expect("tempdir"),
            db: None,
            table: None,
            model: Model::new(),
            durable: Model::new(),
            pending: BTreeMap::new(),
            exact_reopens: 0,
        };
        h.open();
        h
    }

    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("meta")
    }

    fn open(&mut self) {
        let db = open_db(self.path()).expect("open db");
        self.table = Some(SledOffsetTable::open(&db, self.path()).expect("open table"));
        self.db = Some(db);
    }

    fn table(&mut self) -> &mut SledOffsetTable {
        self.table.as_mut().expect("open")
    }

    fn listed(&mut self) -> Model {
        self.table()
            .list_all()
            .expect("list_all")
            .into_iter()
            .map(|(k, q, o)| ((k, q), o))
            .collect()
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Commit { key, queue, offset } => {
                let previous = self.model.get(&(key.clone(), *queue)).copied();
                let expected = match previous {
                    None => CommitOutcome::Inserted,
                    Some(p) if *offset > p => CommitOutcome::Advanced { previous: p },
                    Some(p) if *offset == p => CommitOutcome::Unchanged,
                    Some(p) => CommitOutcome::Lowered { previous: p },
                };
                let outcome = self.table().commit(key, *queue, *offset).expect("commit");
                prop_assert_eq!(outcome, expected);
                self.write(key.clone(), *queue, Some(*offset));
                prop_assert_eq!(
                    self.table().query(key, *queue).expect("query"),
                    Some(*offset)
                );
            }
            Op::Reset { key, queue, offset } => {
                self.table().reset(key, *queue, *offset).expect("reset");
                self.write(key.clone(), *queue, Some(*offset));
                prop_assert_eq!(
                    self.table().query(key, *queue).expect("query"),
                    Some(*offset)
                );
            }
            Op::RemoveGroup(group) => {
                let doomed: Vec<_> = self
                    .model
                    .keys()
                    .filter(|(k, _)| k.group == *group)
                    .cloned()
                    .collect();
                let removed = self.table().remove_group(group).expect("remove_group");
                prop_assert_eq!(removed, doomed.len());
                for (k, q) in doomed {
                    self.write(k, q, None);
                }
            }
            Op::Flush => {
                self.table().flush().expect("flush");
                self.durable = self.model.clone();
                self.pending.clear();
            }
            Op::Reopen => self.reopen()?,
        }
        Ok(())
    }

    fn write(&mut self, key: OffsetKey, queue: u32, value: Option<u64>) {
        match value {
            Some(v) => self.model.insert((key.clone(), queue), v),
            None => self.model.remove(&(key.clone(), queue)),
        };
        self.pending.entry((key, queue)).or_default().push(value);
    }

    fn reopen(&mut self) -> Result<(), TestCaseError> {
        self.table = None;
        self.db = None;
        self.open();
        let observed = self.listed();
        if self.pending.is_empty() {
            prop_assert_eq!(&observed, &self.model, "reopen after flush");
            self.exact_reopens += 1;
        } else {
            let entries: BTreeSet<_> = observed
                .keys()
                .chain(self.durable.keys())
                .chain(self.pending.keys())
                .cloned()
                .collect();
            for entry in entries {
                let seen = observed.get(&entry).copied();
                let mut allowed = vec![self.durable.get(&entry).copied()];
                allowed.extend(self.pending.get(&entry).into_iter().flatten().copied());
                prop_assert!(
                    allowed.contains(&seen),
                    "{:?}: saw {:?}, allowed {:?}",
                    entry,
                    seen,
                    allowed
                );
            }
            self.model = observed.clone();
        }
        self.durable = observed;
        self.pending.clear();
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn sled_offsets_match_model_across_flush_and_reopen(ops in prop::collection::vec(op_strategy(), 1..60)) {
        let mut h = Harness::new();
        for op in &ops {
            h.apply(op)?;
        }
        // Always end with a flush and a reopen, so every case checks an exact reopen.
        h.apply(&Op::Flush)?;
        h.apply(&Op::Reopen)?;
        prop_assert!(h.exact_reopens >= 1);
        let listed = h.listed();
        prop_assert_eq!(listed, h.model.clone());
    }
}
