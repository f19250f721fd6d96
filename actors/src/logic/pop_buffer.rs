//! The pop checkpoint buffer (§1.H; Java's `PopBufferMergeService`, which skiff keeps on): a
//! message handed out by an unordered pop is held by a checkpoint in memory first, and the
//! checkpoint is written to the store only if the message is still unacknowledged a window
//! later (or the buffer is full, or the broker stops). A message acknowledged within the window,
//! the common case, costs no store write at all.
//!
//! What keeps this safe across a crash is the offset rule: the group's stored offset of a queue
//! never passes a message whose checkpoint is only in memory and not acknowledged. So a crash
//! loses no message: those whose checkpoints were in memory are popped again from the stored
//! offset. What a crash may deliver again is exactly the messages of a queue from its first
//! such message on (acknowledged ones behind it included), all handed out within the window
//! before the crash; written checkpoints revive as before.
//!
//! This module decides; the pop actor writes checkpoints and commits offsets as told: the writes
//! [`CheckpointBuffer::due`] lists, then [`CheckpointBuffer::written`], then the commits of
//! [`CheckpointBuffer::commit_for`], in that order.

use crate::logic::queue::GroupQueue;
use fxhash::FxHashMap;
use std::collections::VecDeque;
use std::time::Duration;

/// Apache's `popCkStayBufferTime`: how long a checkpoint waits in memory for its ack.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(10);
/// Apache's `popCkMaxBufferSize`: past this many checkpoints in memory, the oldest are written.
pub const DEFAULT_CAPACITY: usize = 200_000;

/// One queue of one group being popped: kept while it is popped, so a pop need not look its
/// stored offset up, and until it is level and idle for a window.
#[derive(Debug, Clone, PartialEq, Eq)]
struct QueueCursor {
    /// Where the group's next pop of the queue reads.
    next: u64,
    last_pop_ms: i64,
    /// The offset last committed for the queue (by this buffer, or where the pop started).
    committed: u64,
    /// Offsets handed out whose checkpoints are in memory only and not settled.
    unwritten: PendingOffsets,
}

/// A set of offsets kept in ascending order, as pops hand them out: adding one past the last is
/// a push, settling one is a binary search and a mark, and settled ones at the front drop off,
/// so the first is always pending. Settled offsets behind a pending one wait for it (at most a
/// window: then it is written and settled).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct PendingOffsets {
    /// Each offset and whether it is still pending.
    entries: VecDeque<(u64, bool)>,
    pending: usize,
}

impl PendingOffsets {
    fn len(&self) -> usize {
        self.pending
    }

    fn is_empty(&self) -> bool {
        self.pending == 0
    }

    fn first(&self) -> Option<u64> {
        self.entries.front().map(|(offset, _)| *offset)
    }

    fn contains(&self, offset: u64) -> bool {
        self.find(offset)
            .is_ok_and(|i| self.entries.get(i).is_some_and(|(_, pending)| *pending))
    }

    fn find(&self, offset: u64) -> Result<usize, usize> {
        self.entries.binary_search_by_key(&offset, |(o, _)| *o)
    }

    /// Answers whether `offset` was not pending before.
    fn insert(&mut self, offset: u64) -> bool {
        if self.entries.back().is_none_or(|(last, _)| *last < offset) {
            self.entries.push_back((offset, true));
        } else {
            // Behind the last (a pop after an admin reset): in its place.
            match self.find(offset) {
                Ok(i) => match self.entries.get_mut(i) {
                    Some((_, pending)) if !*pending => *pending = true,
                    _ => return false,
                },
                Err(i) => self.entries.insert(i, (offset, true)),
            }
        }
        self.pending += 1;
        true
    }

    /// Answers whether `offset` was pending.
    fn remove(&mut self, offset: u64) -> bool {
        let Ok(i) = self.find(offset) else {
            return false;
        };
        match self.entries.get_mut(i) {
            Some((_, pending)) if *pending => *pending = false,
            _ => return false,
        }
        self.pending -= 1;
        while self.entries.front().is_some_and(|(_, pending)| !*pending) {
            self.entries.pop_front();
        }
        true
    }

    fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries
            .iter()
            .filter(|(_, pending)| *pending)
            .map(|(offset, _)| *offset)
    }
}

impl QueueCursor {
    /// How far the stored offset may go: up to the first unwritten checkpoint, else all the way.
    fn safe_offset(&self) -> u64 {
        self.unwritten.first().unwrap_or(self.next)
    }
}

/// The offsets one pop handed out of one queue, in hand-out order.
#[derive(Debug)]
struct Batch {
    handed_out_ms: i64,
    queue: GroupQueue,
    offsets: Vec<u64>,
}

/// Checkpoints to write, per queue: the caller writes them, then calls
/// [`CheckpointBuffer::written`].
pub type Writes = Vec<(GroupQueue, Vec<u64>)>;

#[derive(Debug)]
pub struct CheckpointBuffer {
    window_ms: i64,
    capacity: usize,
    cursors: FxHashMap<GroupQueue, QueueCursor>,
    /// Oldest first; an offset settled since stays in its batch and is skipped when due.
    batches: VecDeque<Batch>,
    unwritten: usize,
}

impl CheckpointBuffer {
    /// A zero window writes every checkpoint at the next [`Self::due`].
    pub fn new(window: Duration, capacity: usize) -> Self {
        CheckpointBuffer {
            window_ms: i64::try_from(window.as_millis()).unwrap_or(i64::MAX),
            capacity,
            cursors: FxHashMap::default(),
            batches: VecDeque::new(),
            unwritten: 0,
        }
    }

    /// Where the group's next pop of `queue` reads, while the queue is being popped (its stored
    /// offset may lag behind: checkpoints in memory hold it back).
    pub fn next_offset(&self, queue: &GroupQueue) -> Option<u64> {
        self.cursors.get(queue).map(|c| c.next)
    }

    /// Whether the checkpoint of `offset` is in memory only.
    pub fn is_unwritten(&self, queue: &GroupQueue, offset: u64) -> bool {
        self.cursors
            .get(queue)
            .is_some_and(|c| c.unwritten.contains(offset))
    }

    /// Whether more checkpoints are in memory than the buffer keeps: [`Self::due`] lists the
    /// oldest now.
    pub fn over_capacity(&self) -> bool {
        self.unwritten > self.capacity
    }

    /// Checkpoints in memory only, over every queue.
    pub fn unwritten(&self) -> usize {
        self.unwritten
    }

    /// Records one pop of `queue` that read from `start` and hands out `offsets` (none when
    /// everything read was filtered out), its next read at `next`. A pop that does not start
    /// where the last one ended (an admin reset, an offset outside the queue) starts the
    /// queue's commits afresh from `start`; checkpoints still unwritten before it keep holding
    /// the stored offset back until they are settled.
    pub fn hand_out(
        &mut self,
        queue: &GroupQueue,
        start: u64,
        offsets: &[u64],
        next: u64,
        now_ms: i64,
    ) {
        if !self.cursors.contains_key(queue) {
            self.cursors.insert(
                queue.clone(),
                QueueCursor {
                    next: start,
                    last_pop_ms: now_ms,
                    committed: start,
                    unwritten: PendingOffsets::default(),
                },
            );
        }
        let Some(cursor) = self.cursors.get_mut(queue) else {
            return;
        };
        if cursor.next != start {
            cursor.committed = start;
        }
        cursor.next = next;
        cursor.last_pop_ms = now_ms;
        for offset in offsets {
            if cursor.unwritten.insert(*offset) {
                self.unwritten += 1;
            }
        }
        if !offsets.is_empty() {
            self.batches.push_back(Batch {
                handed_out_ms: now_ms,
                queue: queue.clone(),
                offsets: offsets.to_vec(),
            });
        }
    }

    /// The checkpoint of `offset` needs no write any more: acknowledged, or its message revived.
    /// Answers whether it was in memory only.
    pub fn settle(&mut self, queue: &GroupQueue, offset: u64) -> bool {
        self.settle_all(queue, std::slice::from_ref(&offset)) == [true]
    }

    /// [`Self::settle`] for several offsets of one queue, answered each.
    pub fn settle_all(&mut self, queue: &GroupQueue, offsets: &[u64]) -> Vec<bool> {
        let Some(cursor) = self.cursors.get_mut(queue) else {
            return vec![false; offsets.len()];
        };
        let settled: Vec<bool> = offsets
            .iter()
            .map(|offset| cursor.unwritten.remove(*offset))
            .collect();
        self.unwritten -= settled.iter().filter(|s| **s).count();
        settled
    }

    /// The checkpoints of `offsets` are in the store now.
    pub fn written(&mut self, queue: &GroupQueue, offsets: &[u64]) {
        self.settle_all(queue, offsets);
    }

    /// The offset to commit for `queue` now, if its stored offset may move forward.
    pub fn commit_for(&mut self, queue: &GroupQueue) -> Option<u64> {
        let cursor = self.cursors.get_mut(queue)?;
        let safe = cursor.safe_offset();
        (safe > cursor.committed).then(|| {
            cursor.committed = safe;
            safe
        })
    }

    /// Forgets the queues not popped for a window whose stored offsets are level with their
    /// last pop: the next pop of one reads its stored offset again.
    pub fn forget_idle(&mut self, now_ms: i64) {
        let window_ms = self.window_ms;
        self.cursors.retain(|_, c| {
            let level = c.unwritten.is_empty() && c.committed == c.next;
            !level || c.last_pop_ms.saturating_add(window_ms) > now_ms
        });
    }

    /// Checkpoints to write now: those handed out a window ago or longer and still in memory,
    /// and the oldest beyond the buffer's capacity. Each batch is listed once; one whose write
    /// fails stays in memory (holding its queue's stored offset back) until it is settled.
    pub fn due(&mut self, now_ms: i64) -> Writes {
        let mut over = self.unwritten.saturating_sub(self.capacity);
        let mut writes = Writes::new();
        while let Some(batch) = self.batches.front() {
            let expired = batch.handed_out_ms.saturating_add(self.window_ms) <= now_ms;
            if !expired && over == 0 {
                break;
            }
            let Some(batch) = self.batches.pop_front() else {
                break;
            };
            let Some(cursor) = self.cursors.get(&batch.queue) else {
                continue;
            };
            let still: Vec<u64> = batch
                .offsets
                .into_iter()
                .filter(|o| cursor.unwritten.contains(*o))
                .collect();
            if still.is_empty() {
                continue;
            }
            over = over.saturating_sub(still.len());
            writes.push((batch.queue, still));
        }
        writes
    }

    /// Every checkpoint still in memory (the broker is stopping).
    pub fn drain(&mut self) -> Writes {
        self.batches.clear();
        self.cursors
            .iter()
            .filter(|(_, c)| !c.unwritten.is_empty())
            .map(|(q, c)| (q.clone(), c.unwritten.iter().collect()))
            .collect()
    }

    /// Forgets a deleted group's queues.
    pub fn forget_group(&mut self, group: &str) {
        let mut dropped = 0;
        self.cursors.retain(|q, c| {
            let keep = q.group != group;
            if !keep {
                dropped += c.unwritten.len();
            }
            keep
        });
        self.unwritten -= dropped;
        self.batches.retain(|b| b.queue.group != group);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(id: u32) -> GroupQueue {
        GroupQueue::new("g", "t", id)
    }

    fn buffer() -> CheckpointBuffer {
        CheckpointBuffer::new(Duration::from_millis(1_000), 100)
    }

    #[test]
    fn a_batch_acked_within_the_window_commits_past_it_and_writes_nothing() {
        let mut b = buffer();
        let q = queue(0);
        b.hand_out(&q, 0, &[0, 1, 2], 3, 0);
        assert_eq!(b.commit_for(&q), None, "nothing settled: the offset stays");
        assert_eq!(
            b.next_offset(&q),
            Some(3),
            "the next pop reads past the batch"
        );
        assert!(b.settle(&q, 2));
        assert_eq!(b.commit_for(&q), None, "offset 0 still holds the commit");
        assert!(b.settle(&q, 0));
        assert_eq!(b.commit_for(&q), Some(1), "up to offset 1, still out");
        assert!(b.settle(&q, 1));
        assert_eq!(b.commit_for(&q), Some(3));
        assert!(b.due(500).is_empty(), "nothing left to write");
        assert_eq!(b.unwritten(), 0);
        b.forget_idle(999);
        assert_eq!(b.next_offset(&q), Some(3), "popped within the window: kept");
        b.forget_idle(1_000);
        assert_eq!(
            b.next_offset(&q),
            None,
            "level and idle: the stored offset is right"
        );
    }

    #[test]
    fn the_stored_offset_moves_up_to_the_first_unsettled_checkpoint() {
        let mut b = buffer();
        let q = queue(0);
        b.hand_out(&q, 10, &[10, 11, 12, 13], 14, 0);
        b.settle(&q, 10);
        b.settle(&q, 11);
        b.settle(&q, 13);
        assert_eq!(b.commit_for(&q), Some(12));
        assert_eq!(b.commit_for(&q), None, "committed already");
        assert!(!b.settle(&q, 11), "settled twice is not in memory any more");
    }

    #[test]
    fn checkpoints_left_a_window_are_written_once_and_then_free_the_offset() {
        let mut b = buffer();
        let (q0, q1) = (queue(0), queue(1));
        b.hand_out(&q0, 0, &[0, 1], 2, 0);
        b.hand_out(&q1, 0, &[0], 1, 500);
        b.settle(&q0, 0);
        assert!(b.due(999).is_empty(), "not a window old yet");
        assert_eq!(b.due(1_000), vec![(q0.clone(), vec![1])]);
        assert!(b.due(1_000).is_empty(), "listed once");
        b.written(&q0, &[1]);
        assert_eq!(b.commit_for(&q0), Some(2));
        assert_eq!(b.due(1_500), vec![(q1.clone(), vec![0])]);
    }

    #[test]
    fn a_failed_write_keeps_holding_the_offset_until_settled() {
        let mut b = buffer();
        let q = queue(0);
        b.hand_out(&q, 0, &[0], 1, 0);
        assert_eq!(b.due(1_000).len(), 1);
        // The write failed: no `written`. Later pops commit nothing past offset 0.
        b.hand_out(&q, 1, &[1], 2, 1_100);
        b.settle(&q, 1);
        assert_eq!(b.commit_for(&q), None);
        b.settle(&q, 0);
        assert_eq!(b.commit_for(&q), Some(2));
    }

    #[test]
    fn past_capacity_the_oldest_are_written_at_once() {
        let mut b = CheckpointBuffer::new(Duration::from_secs(10), 3);
        let q = queue(0);
        b.hand_out(&q, 0, &[0, 1], 2, 0);
        b.hand_out(&q, 2, &[2, 3], 4, 1);
        assert_eq!(b.unwritten(), 4);
        assert_eq!(b.due(2), vec![(q.clone(), vec![0, 1])]);
    }

    #[test]
    fn a_pop_that_jumps_commits_from_where_it_started_never_past_what_is_in_memory() {
        let mut b = buffer();
        let q = queue(0);
        b.hand_out(&q, 0, &[0, 1], 2, 0);
        b.hand_out(&q, 2, &[2, 3], 4, 1);
        b.settle(&q, 0);
        // An admin reset to 1 while 1, 2 and 3 are out and unacknowledged.
        b.hand_out(&q, 1, &[1], 2, 2);
        assert_eq!(b.commit_for(&q), None, "1 is only in memory");
        b.settle(&q, 1);
        assert_eq!(b.commit_for(&q), Some(2), "up to 2, still only in memory");
        b.settle(&q, 2);
        b.settle(&q, 3);
        assert_eq!(b.commit_for(&q), None, "the reset's pops end at 2");
        assert_eq!(b.next_offset(&q), Some(2));
    }

    #[test]
    fn pending_offsets_keep_order_and_drop_settled_ones_from_the_front() {
        let mut set = PendingOffsets::default();
        for offset in [4, 5, 6, 7] {
            assert!(set.insert(offset));
        }
        assert!(!set.insert(6), "already pending");
        assert!(set.remove(5) && set.remove(6));
        assert_eq!(set.first(), Some(4), "4 still holds the front");
        assert!(!set.contains(5) && set.contains(7));
        assert!(set.insert(2), "behind the last: in its place");
        assert!(set.insert(5), "settled, then handed out again");
        assert_eq!(set.iter().collect::<Vec<_>>(), [2, 4, 5, 7]);
        assert!(set.remove(2) && set.remove(4));
        assert_eq!(set.first(), Some(5));
        assert!(!set.remove(4) && !set.remove(9));
        assert!(set.remove(5) && set.remove(7));
        assert!(set.is_empty() && set.entries.is_empty() && set.first().is_none());
    }

    #[test]
    fn a_filtered_read_moves_the_offset_without_a_checkpoint() {
        let mut b = buffer();
        let q = queue(0);
        b.hand_out(&q, 5, &[], 9, 0);
        assert_eq!(b.commit_for(&q), Some(9));
        assert_eq!(b.next_offset(&q), Some(9));
    }

    #[test]
    fn drain_lists_everything_in_memory_and_forgetting_a_group_drops_its_queues() {
        let mut b = buffer();
        b.hand_out(&queue(0), 0, &[0, 1], 2, 0);
        b.hand_out(&GroupQueue::new("other", "t", 0), 0, &[0], 1, 0);
        b.forget_group("other");
        assert_eq!(b.unwritten(), 2);
        assert_eq!(b.drain(), vec![(queue(0), vec![0, 1])]);
    }
}
