//! Random consume histories against a model of a process queue.
//!
//! What must hold, whatever the listener does:
//! - nothing is lost: every offset ever put is either still held or was removed (consumed, or
//!   sent back, which is also how the dispatcher settles a timed-out call), and the commit offset
//!   never passes a held offset, so restarting from the committed offset re-delivers everything
//!   still in flight;
//! - the commit offset never exceeds the highest offset put + 1;
//! - with batches put in pull order, the offset `remove` reports never decreases. The exception
//!   is a remove on an already-empty queue, which reports nothing at all (`None`, RocketMQ's -1):
//!   a caller that turned that into an offset would roll back, so the caller skips the update.
//!   The committed offset the caller keeps with `increase_only` is therefore monotone too.
//!
//! Orderly histories (take / commit / rollback) get the same loss checks; there the commit is
//! stored with `increase_only = false`, so it is checked directly to be monotone.

use std::collections::BTreeSet;

use proptest::prelude::*;
use proptest::sample::Index;
use skiff_actors::logic::inflight::{InFlight, Pulled};

#[derive(Debug, Clone)]
enum ConcurrentOp {
    /// A pulled batch: offsets from the next pull offset with these gaps (tag-filtered offsets),
    /// plus re-sent copies of some held offsets.
    Put { gaps: Vec<u8>, dups: Vec<Index> },
    /// The listener finished these held messages (plus some offsets that are not held).
    Remove { picks: Vec<Index>, strays: Vec<u16> },
}

fn concurrent_op() -> impl Strategy<Value = ConcurrentOp> {
    let picks = || prop::collection::vec(any::<Index>(), 0..6);
    prop_oneof![
        3 => (prop::collection::vec(0u8..4, 0..8), prop::collection::vec(any::<Index>(), 0..3))
            .prop_map(|(gaps, dups)| ConcurrentOp::Put { gaps, dups }),
        4 => (picks(), prop::collection::vec(any::<u16>(), 0..3))
            .prop_map(|(picks, strays)| ConcurrentOp::Remove { picks, strays }),
    ]
}

fn body_size(offset: u64) -> u64 {
    offset % 7 + 1
}

fn pulled(offsets: &[u64]) -> Vec<Pulled<u64>> {
    offsets
        .iter()
        .map(|&offset| Pulled {
            offset,
            body_size: body_size(offset),
            payload: offset,
        })
        .collect()
}

/// The model: plain sets.
#[derive(Default)]
struct Model {
    held: BTreeSet<u64>,
    removed: BTreeSet<u64>,
    ever_put: BTreeSet<u64>,
    next_pull: u64,
    max_put: Option<u64>,
}

impl Model {
    fn pick(&self, picks: &[Index]) -> Vec<u64> {
        let held: Vec<u64> = self.held.iter().copied().collect();
        if held.is_empty() {
            return Vec::new();
        }
        picks.iter().map(|i| *i.get(&held)).collect()
    }
}

struct Checker {
    queue: InFlight<u64>,
    model: Model,
    /// What the caller stores with `increase_only = true`.
    committed: Option<u64>,
    last_reported: Option<u64>,
}

impl Checker {
    fn remove(&mut self, offsets: &[u64]) -> Result<(), TestCaseError> {
        let was_empty = self.model.held.is_empty();
        let expected_removed = offsets
            .iter()
            .copied()
            .collect::<BTreeSet<_>>()
            .iter()
            .filter(|o| self.model.held.contains(o))
            .count();
        let out = self.queue.remove(offsets);
        if was_empty {
            prop_assert_eq!(
                out.commit_offset,
                None,
                "remove on an empty queue reports nothing"
            );
            prop_assert_eq!(out.removed, 0);
            return Ok(());
        }
        for o in offsets {
            if self.model.held.remove(o) {
                self.model.removed.insert(*o);
            }
        }
        prop_assert_eq!(out.removed, expected_removed);
        let max = self.model.max_put.expect("something was put");
        let expected = self.model.held.first().copied().unwrap_or(max + 1);
        let reported = out.commit_offset;
        prop_assert_eq!(reported, Some(expected));
        let reported = expected;
        prop_assert!(
            reported <= max + 1,
            "commit {reported} beyond max {max} + 1"
        );
        if let Some(last) = self.last_reported {
            prop_assert!(
                reported >= last,
                "reported commit went back: {last} -> {reported}"
            );
        }
        self.last_reported = Some(reported);
        let before = self.committed;
        self.committed = Some(before.map_or(reported, |c| c.max(reported)));
        prop_assert!(self.committed >= before);
        Ok(())
    }

    fn check_invariants(&self) -> Result<(), TestCaseError> {
        let m = &self.model;
        // No offset lost: each one put is held or removed, never both, never neither.
        for o in &m.ever_put {
            let held = m.held.contains(o);
            prop_assert_ne!(held, m.removed.contains(o), "offset {} held and removed", o);
            prop_assert_eq!(self.queue.get(*o).is_some(), held, "offset {}", o);
        }
        prop_assert_eq!(self.queue.count(), m.held.len());
        prop_assert_eq!(
            self.queue.bytes(),
            m.held.iter().map(|o| body_size(*o)).sum::<u64>()
        );
        prop_assert_eq!(self.queue.first_offset(), m.held.first().copied());
        let span = match (m.held.first(), m.held.last()) {
            (Some(a), Some(b)) => b - a,
            _ => 0,
        };
        prop_assert_eq!(self.queue.span(), span);
        // The committed offset never passes a message still in flight.
        if let (Some(c), Some(first)) = (self.committed, m.held.first()) {
            prop_assert!(c <= *first, "committed {c} passes held offset {first}");
        }
        if let (Some(c), Some(max)) = (self.committed, m.max_put) {
            prop_assert!(c <= max + 1);
        }
        Ok(())
    }
}

fn orderly_op() -> impl Strategy<Value = OrderlyOp> {
    prop_oneof![
        3 => (prop::collection::vec(0u8..4, 0..8), prop::collection::vec(any::<Index>(), 0..3))
            .prop_map(|(gaps, dups)| OrderlyOp::Put { gaps, dups }),
        3 => (0usize..5).prop_map(OrderlyOp::Take),
        3 => Just(OrderlyOp::Commit),
        1 => Just(OrderlyOp::Rollback),
    ]
}

#[derive(Debug, Clone)]
enum OrderlyOp {
    Put { gaps: Vec<u8>, dups: Vec<Index> },
    Take(usize),
    Commit,
    Rollback,
}

/// Offsets of a pulled batch: from `next` with `gaps`, plus duplicates picked from `held`.
fn batch_offsets(next: &mut u64, gaps: &[u8], dups: &[Index], held: &[u64]) -> Vec<u64> {
    let mut offsets = Vec::new();
    for gap in gaps {
        let offset = *next + u64::from(*gap);
        offsets.push(offset);
        *next = offset + 1;
    }
    if !held.is_empty() {
        offsets.extend(dups.iter().map(|i| *i.get(held)));
    }
    offsets
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn concurrent_consume_never_loses_or_rolls_back_offsets(
        start in 0u64..1_000_000,
        ops in prop::collection::vec(concurrent_op(), 1..80),
    ) {
        let mut c = Checker {
            queue: InFlight::new(),
            model: Model { next_pull: start, ..Model::default() },
            committed: None,
            last_reported: None,
        };
        for op in ops {
            match op {
                ConcurrentOp::Put { gaps, dups } => {
                    let held: Vec<u64> = c.model.held.iter().copied().collect();
                    let offsets = batch_offsets(&mut c.model.next_pull, &gaps, &dups, &held);
                    let fresh: BTreeSet<u64> =
                        offsets.iter().copied().filter(|o| !c.model.held.contains(o)).collect();
                    let added = c.queue.put(pulled(&offsets));
                    prop_assert_eq!(added, fresh.len());
                    for o in fresh {
                        c.model.held.insert(o);
                        c.model.ever_put.insert(o);
                        c.model.max_put = Some(c.model.max_put.map_or(o, |m| m.max(o)));
                    }
                }
                ConcurrentOp::Remove { picks, strays } => {
                    let mut offsets = c.model.pick(&picks);
                    offsets.extend(strays.iter().map(|s| start.saturating_add(u64::from(*s))));
                    c.remove(&offsets)?;
                }
            }
            c.check_invariants()?;
        }
    }

    #[test]
    fn orderly_consume_never_loses_or_rolls_back_offsets(
        start in 0u64..1_000_000,
        ops in prop::collection::vec(orderly_op(), 1..80),
    ) {
        let mut q: InFlight<u64> = InFlight::new();
        let mut next = start;
        let mut pending: BTreeSet<u64> = BTreeSet::new();
        let mut taken: BTreeSet<u64> = BTreeSet::new();
        let mut consumed: BTreeSet<u64> = BTreeSet::new();
        let mut ever_put: BTreeSet<u64> = BTreeSet::new();
        // Stored with increase_only = false: each commit overwrites.
        let mut committed: Option<u64> = None;
        for op in ops {
            match op {
                OrderlyOp::Put { gaps, dups } => {
                    let held: Vec<u64> = pending.union(&taken).copied().collect();
                    let offsets = batch_offsets(&mut next, &gaps, &dups, &held);
                    let fresh: BTreeSet<u64> =
                        offsets.iter().copied().filter(|o| !held.contains(o)).collect();
                    prop_assert_eq!(q.put(pulled(&offsets)), fresh.len());
                    pending.extend(fresh.iter().copied());
                    ever_put.extend(fresh);
                }
                OrderlyOp::Take(n) => {
                    let expected: Vec<u64> = pending.iter().take(n).copied().collect();
                    let got: Vec<u64> = q.take(n).into_iter().map(|(o, payload)| {
                        assert_eq!(o, payload);
                        o
                    }).collect();
                    prop_assert_eq!(&got, &expected, "take must hand out the lowest offsets");
                    for o in got {
                        pending.remove(&o);
                        taken.insert(o);
                    }
                }
                OrderlyOp::Commit => {
                    let got = q.commit();
                    match taken.iter().next_back() {
                        None => prop_assert_eq!(got, None),
                        Some(last) => {
                            let expected = pending.iter().next().map_or(last + 1, |p| (last + 1).min(*p));
                            prop_assert_eq!(got, Some(expected));
                            if let Some(prev) = committed {
                                prop_assert!(expected >= prev, "orderly commit went back: {prev} -> {expected}");
                            }
                            committed = Some(expected);
                            consumed.append(&mut taken);
                        }
                    }
                }
                OrderlyOp::Rollback => {
                    prop_assert_eq!(q.rollback(), taken.len());
                    pending.append(&mut taken);
                }
            }
            // Nothing lost: every offset put is pending, taken or consumed, exactly once.
            for o in &ever_put {
                let places = [pending.contains(o), taken.contains(o), consumed.contains(o)];
                prop_assert_eq!(places.iter().filter(|p| **p).count(), 1, "offset {}", o);
            }
            prop_assert_eq!(q.count(), pending.len() + taken.len());
            prop_assert_eq!(
                q.bytes(),
                pending.iter().chain(&taken).map(|o| body_size(*o)).sum::<u64>()
            );
            // The committed offset never passes an unconsumed message.
            if let (Some(c), Some(first)) = (committed, pending.iter().chain(&taken).min()) {
                prop_assert!(c <= *first, "committed {c} passes unconsumed offset {first}");
            }
        }
    }
}
