//! The bookkeeping of one process queue: the messages pulled from a queue and not yet consumed,
//! ordered by queue offset (RocketMQ's `ProcessQueue`, without its locks and timers).
//!
//! The one number that matters is the commit offset: the smallest offset still held, or the
//! highest offset ever put + 1 once nothing is held. Committing anything higher would lose the
//! held messages on a crash or a rebalance; committing anything lower only re-delivers.
//!
//! Precondition shared with RocketMQ: each batch is put in pull order, i.e. its offsets are above
//! every offset put before (gaps are fine: tag filtering skips offsets). An offset below that
//! which is no longer held (it was consumed) would be taken as new and could sit below an
//! already-committed offset.

use std::collections::BTreeMap;

/// One message as it comes off a pull: its queue offset, its body size (what the byte limit
/// counts, like RocketMQ's `msgSize`) and whatever the actor keeps for consuming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled<T> {
    pub offset: u64,
    pub body_size: u64,
    pub payload: T,
}

#[derive(Debug, Clone)]
struct Entry<T> {
    payload: T,
    body_size: u64,
}

/// Result of [`InFlight::remove`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoveOutcome {
    /// How many of the given offsets were held (unknown or repeated offsets are ignored).
    pub removed: usize,
    /// The offset to report to the offset store (with `increase_only = true`): `None` if nothing
    /// was held before the call (RocketMQ's -1: do not update), else the smallest offset still
    /// held, or the highest offset ever put + 1 when nothing is left.
    pub commit_offset: Option<u64>,
}

/// Flow-control thresholds for one queue. Pulling pauses (RocketMQ retries after 50 ms) while
/// any is exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowLimits {
    /// `pullThresholdForQueue`, 1000.
    pub max_count: usize,
    /// `pullThresholdSizeForQueue`, 100 MiB. (RocketMQ compares whole MiB, so it trips one MiB
    /// later; skiff compares bytes.)
    pub max_bytes: u64,
    /// `consumeConcurrentlyMaxSpan`, 2000, in concurrent mode. `None` in orderly mode, where
    /// messages are consumed in order and a wide span cannot mean one message is stuck.
    pub max_span: Option<u64>,
}

impl FlowLimits {
    pub const fn concurrent() -> Self {
        FlowLimits {
            max_count: 1000,
            max_bytes: 100 * 1024 * 1024,
            max_span: Some(2000),
        }
    }

    pub const fn orderly() -> Self {
        FlowLimits {
            max_span: None,
            ..Self::concurrent()
        }
    }
}

impl Default for FlowLimits {
    fn default() -> Self {
        Self::concurrent()
    }
}

/// Which threshold stopped the pull, with the numbers for the log line and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowControlReason {
    Count { cached: usize, limit: usize },
    Bytes { cached: u64, limit: u64 },
    Span { span: u64, limit: u64 },
}

/// Messages held by one process queue, by queue offset.
///
/// Concurrent mode uses `put` and `remove`. Orderly mode uses `put`, then `take` / `commit` /
/// `rollback`: taken messages move to a consuming set and stay counted (count, bytes, span)
/// until committed, as in RocketMQ.
///
/// A stuck message (`docs/architecture.md` rule 1) is not this module's business: the consume
/// dispatcher aborts a listener call past the consume timeout and sends its messages back, and
/// they are then removed here like any consumed message, so the commit offset moves past them.
#[derive(Debug, Clone)]
pub struct InFlight<T> {
    /// Held and not taken.
    pending: BTreeMap<u64, Entry<T>>,
    /// Orderly: taken by `take`, not yet committed.
    taken: BTreeMap<u64, Entry<T>>,
    bytes: u64,
    /// Highest offset ever put; survives the queue becoming empty, so the commit offset can move
    /// past the last consumed message.
    max_offset: Option<u64>,
}

impl<T> Default for InFlight<T> {
    fn default() -> Self {
        InFlight {
            pending: BTreeMap::new(),
            taken: BTreeMap::new(),
            bytes: 0,
            max_offset: None,
        }
    }
}

impl<T> InFlight<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a pulled batch. Returns how many were added: an offset already held (pending or
    /// taken) is ignored and keeps its first copy, so a re-delivered batch is not counted twice.
    pub fn put(&mut self, batch: impl IntoIterator<Item = Pulled<T>>) -> usize {
        let mut added = 0;
        for msg in batch {
            if self.pending.contains_key(&msg.offset) || self.taken.contains_key(&msg.offset) {
                continue;
            }
            self.bytes += msg.body_size;
            self.max_offset = Some(self.max_offset.map_or(msg.offset, |m| m.max(msg.offset)));
            self.pending.insert(
                msg.offset,
                Entry {
                    payload: msg.payload,
                    body_size: msg.body_size,
                },
            );
            added += 1;
        }
        added
    }

    /// Drop consumed (or sent-back) messages and say what may be committed.
    /// RocketMQ's `removeMessage`: see [`RemoveOutcome::commit_offset`].
    pub fn remove(&mut self, offsets: &[u64]) -> RemoveOutcome {
        if self.is_empty() {
            return RemoveOutcome {
                removed: 0,
                commit_offset: None,
            };
        }
        let mut removed = 0;
        for offset in offsets {
            let entry = self
                .pending
                .remove(offset)
                .or_else(|| self.taken.remove(offset));
            if let Some(entry) = entry {
                self.bytes -= entry.body_size;
                removed += 1;
            }
        }
        RemoveOutcome {
            removed,
            commit_offset: self.next_commit_offset(),
        }
    }

    /// The smallest held offset, or the highest offset ever put + 1, or `None` if nothing was
    /// ever put.
    fn next_commit_offset(&self) -> Option<u64> {
        self.first_offset()
            .or_else(|| self.max_offset.map(|m| m + 1))
    }

    /// The first exceeded threshold, checked in RocketMQ's order (count, size, span); `None`
    /// means pulling may go on. Each comparison is strict (`>`), as in RocketMQ.
    pub fn flow_control(&self, limits: &FlowLimits) -> Option<FlowControlReason> {
        let cached = self.count();
        if cached > limits.max_count {
            return Some(FlowControlReason::Count {
                cached,
                limit: limits.max_count,
            });
        }
        if self.bytes > limits.max_bytes {
            return Some(FlowControlReason::Bytes {
                cached: self.bytes,
                limit: limits.max_bytes,
            });
        }
        if let Some(limit) = limits.max_span {
            let span = self.span();
            if span > limit {
                return Some(FlowControlReason::Span { span, limit });
            }
        }
        None
    }

    /// Orderly: move up to `n` of the lowest pending messages to the consuming set and return
    /// them (payloads cloned: store an `Arc` as `T`).
    pub fn take(&mut self, n: usize) -> Vec<(u64, T)>
    where
        T: Clone,
    {
        let mut out = Vec::with_capacity(n.min(self.pending.len()));
        while out.len() < n {
            let Some((offset, entry)) = self.pending.pop_first() else {
                break;
            };
            out.push((offset, entry.payload.clone()));
            self.taken.insert(offset, entry);
        }
        out
    }

    /// Orderly success: forget the consuming set and return the offset to commit (with
    /// `increase_only = false`), or `None` if nothing was taken.
    ///
    /// RocketMQ returns the last taken offset + 1. Skiff returns the smaller of that and the
    /// lowest pending offset: under the `put` precondition they are equal, and should a batch
    /// ever be put out of pull order, RocketMQ's value would skip the lower pending messages.
    pub fn commit(&mut self) -> Option<u64> {
        let last = *self.taken.keys().next_back()?;
        let taken = std::mem::take(&mut self.taken);
        self.bytes -= taken.values().map(|e| e.body_size).sum::<u64>();
        let after_batch = last + 1;
        Some(
            self.pending
                .keys()
                .next()
                .map_or(after_batch, |first| after_batch.min(*first)),
        )
    }

    /// Orderly: put every taken message back to be consumed again. Returns how many went back.
    pub fn rollback(&mut self) -> usize {
        let taken = std::mem::take(&mut self.taken);
        let n = taken.len();
        self.pending.extend(taken);
        n
    }

    /// The payload held at `offset` (pending or taken).
    pub fn get(&self, offset: u64) -> Option<&T> {
        self.pending
            .get(&offset)
            .or_else(|| self.taken.get(&offset))
            .map(|e| &e.payload)
    }

    /// Messages held, pending and taken (RocketMQ's `msgCount`).
    pub fn count(&self) -> usize {
        self.pending.len() + self.taken.len()
    }

    /// Sum of the body sizes held (RocketMQ's `msgSize`).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.taken.is_empty()
    }

    /// Highest held offset minus lowest held offset; 0 when fewer than two are held.
    pub fn span(&self) -> u64 {
        match (self.first_offset(), self.last_offset()) {
            (Some(first), Some(last)) => last - first,
            _ => 0,
        }
    }

    /// Lowest offset held, pending or taken.
    pub fn first_offset(&self) -> Option<u64> {
        let p = self.pending.keys().next().copied();
        let t = self.taken.keys().next().copied();
        p.into_iter().chain(t).min()
    }

    /// Highest offset held, pending or taken.
    fn last_offset(&self) -> Option<u64> {
        let p = self.pending.keys().next_back().copied();
        let t = self.taken.keys().next_back().copied();
        p.into_iter().chain(t).max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(offsets: impl IntoIterator<Item = u64>) -> Vec<Pulled<u64>> {
        offsets
            .into_iter()
            .map(|offset| Pulled {
                offset,
                body_size: 10,
                payload: offset,
            })
            .collect()
    }

    fn with(offsets: impl IntoIterator<Item = u64>) -> InFlight<u64> {
        let mut q = InFlight::new();
        q.put(batch(offsets));
        q
    }

    #[test]
    fn put_ignores_already_held_offsets() {
        let mut q = with(0..3);
        assert_eq!(q.put(batch(2..5)), 2);
        assert_eq!(q.count(), 5);
        assert_eq!(q.bytes(), 50);
    }

    #[test]
    fn put_ignores_offsets_in_the_consuming_set() {
        let mut q = with(0..3);
        q.take(2);
        assert_eq!(q.put(batch(0..3)), 0);
        assert_eq!(q.count(), 3);
    }

    #[test]
    fn remove_on_empty_tree_returns_none() {
        let mut q: InFlight<u64> = InFlight::new();
        assert_eq!(q.remove(&[0, 1]).commit_offset, None);
        // Also after everything was consumed: the tree is empty again.
        let mut q = with(0..2);
        assert_eq!(q.remove(&[0, 1]).commit_offset, Some(2));
        assert_eq!(
            q.remove(&[0, 1]),
            RemoveOutcome {
                removed: 0,
                commit_offset: None
            }
        );
    }

    #[test]
    fn remove_returns_smallest_remaining_offset() {
        let mut q = with([3, 4, 7, 9]);
        let out = q.remove(&[4, 9]);
        assert_eq!(out.removed, 2);
        assert_eq!(out.commit_offset, Some(3));
        assert_eq!(q.remove(&[3]).commit_offset, Some(7));
    }

    #[test]
    fn remove_returns_max_plus_one_when_it_empties_the_tree() {
        let mut q = with([3, 4, 7]);
        assert_eq!(q.remove(&[7, 3, 4]).commit_offset, Some(8));
        assert!(q.is_empty());
        assert_eq!(q.count(), 0);
        assert_eq!(q.bytes(), 0);
    }

    #[test]
    fn remove_of_unheld_offsets_still_reports_the_commit_offset() {
        // RocketMQ answers from the tree even when nothing given was in it.
        let mut q = with([5, 6]);
        assert_eq!(
            q.remove(&[1, 2]),
            RemoveOutcome {
                removed: 0,
                commit_offset: Some(5)
            }
        );
    }

    #[test]
    fn max_plus_one_uses_highest_offset_ever_put_not_last_batch() {
        let mut q = with([10, 11]);
        q.put(batch([5])); // out of pull order: does not lower the max
        assert_eq!(q.remove(&[5, 10, 11]).commit_offset, Some(12));
    }

    #[test]
    fn span_is_last_minus_first() {
        assert_eq!(with([]).span(), 0);
        assert_eq!(with([7]).span(), 0);
        assert_eq!(with([7, 8, 2007]).span(), 2000);
    }

    #[test]
    fn flow_control_trips_on_count_above_limit() {
        let limits = FlowLimits::concurrent();
        assert_eq!(with(0..1000).flow_control(&limits), None);
        assert_eq!(
            with(0..1001).flow_control(&limits),
            Some(FlowControlReason::Count {
                cached: 1001,
                limit: 1000
            })
        );
    }

    #[test]
    fn flow_control_trips_on_bytes_above_limit() {
        let limits = FlowLimits::concurrent();
        let mut q: InFlight<()> = InFlight::new();
        q.put([Pulled {
            offset: 0,
            body_size: 100 * 1024 * 1024,
            payload: (),
        }]);
        assert_eq!(q.flow_control(&limits), None);
        q.put([Pulled {
            offset: 1,
            body_size: 1,
            payload: (),
        }]);
        assert_eq!(
            q.flow_control(&limits),
            Some(FlowControlReason::Bytes {
                cached: 100 * 1024 * 1024 + 1,
                limit: 100 * 1024 * 1024
            })
        );
    }

    #[test]
    fn flow_control_span_applies_only_in_concurrent_mode() {
        let q = with([0, 2001]);
        assert_eq!(
            q.flow_control(&FlowLimits::concurrent()),
            Some(FlowControlReason::Span {
                span: 2001,
                limit: 2000
            })
        );
        assert_eq!(q.flow_control(&FlowLimits::orderly()), None);
        assert_eq!(with([0, 2000]).flow_control(&FlowLimits::default()), None);
    }

    #[test]
    fn flow_control_checks_count_before_bytes_before_span() {
        let limits = FlowLimits {
            max_count: 1,
            max_bytes: 1,
            max_span: Some(0),
        };
        assert!(matches!(
            with([0, 5]).flow_control(&limits),
            Some(FlowControlReason::Count { .. })
        ));
    }

    #[test]
    fn a_stuck_message_pins_the_offset_until_it_is_removed() {
        // Offset 0 hangs in the listener; 1..3 are consumed. Once the dispatcher times 0 out and
        // sends it back, its removal moves the commit offset past it.
        let mut q = with(0..4);
        assert_eq!(q.remove(&[1, 2, 3]).commit_offset, Some(0));
        assert_eq!(q.get(0), Some(&0));
        assert_eq!(q.remove(&[0]).commit_offset, Some(4));
    }

    #[test]
    fn take_moves_lowest_messages_to_consuming_set() {
        let mut q = with([4, 2, 9]);
        let taken = q.take(2);
        assert_eq!(taken, [(2, 2), (4, 4)]);
        assert_eq!(q.count(), 3, "taken messages stay counted until commit");
        assert_eq!(q.take(5), [(9, 9)]);
        assert!(q.take(1).is_empty());
    }

    #[test]
    fn commit_returns_last_taken_plus_one_and_clears_consuming_set() {
        let mut q = with([2, 4, 9]);
        q.take(2);
        assert_eq!(q.commit(), Some(5));
        assert_eq!(q.count(), 1);
        assert_eq!(q.bytes(), 10);
    }

    #[test]
    fn commit_with_nothing_taken_returns_none() {
        let mut q = with([2, 4]);
        assert_eq!(q.commit(), None);
        assert_eq!(q.count(), 2);
    }

    #[test]
    fn commit_never_passes_a_pending_message() {
        let mut q = with(5..9);
        q.take(3); // 5, 6, 7
        q.put(batch([4])); // out of pull order
        assert_eq!(q.commit(), Some(4));
    }

    #[test]
    fn rollback_puts_taken_messages_back() {
        let mut q = with(0..3);
        q.take(2);
        assert_eq!(q.rollback(), 2);
        assert_eq!(q.count(), 3);
        assert_eq!(q.take(3), [(0, 0), (1, 1), (2, 2)]);
    }
}
