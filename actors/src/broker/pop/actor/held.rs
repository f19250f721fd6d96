//! [`HeldCheckpoints`]: the checkpoints the pop actor holds, by message and by the time each
//! message becomes visible again.
//!
//! A pop hands out and an ack settles one message after another of the same few queues, so each
//! queue is named once, in a slot, and a checkpoint is a slot and an offset: holding and
//! settling a message hashes and compares numbers, never names, and allocates nothing. The
//! messages of one pop share their times, so the index by visibility has one entry per pop's
//! batch, not one per message.

use crate::logic::queue::GroupQueue;
use fxhash::FxHashMap;
use skiff_storage::pop_state::CheckpointTimes;
use std::collections::BTreeMap;

/// A queue's place in [`HeldCheckpoints`], valid while the queue holds a checkpoint.
pub(super) type Slot = u32;

#[derive(Debug, Default)]
pub(super) struct HeldCheckpoints {
    slots: FxHashMap<GroupQueue, Slot>,
    /// Each slot's queue and how many checkpoints it holds; a slot holding none is free.
    queues: Vec<(Option<GroupQueue>, usize)>,
    free: Vec<Slot>,
    times: FxHashMap<(Slot, u64), CheckpointTimes>,
    /// The offsets held under the same times, by when they become visible again.
    by_visible_at: BTreeMap<VisibleKey, Vec<u64>>,
}

/// When a batch becomes visible again, its queue's slot and the batch's start offset.
type VisibleKey = (i64, Slot, u64);

fn visible_key(slot: Slot, times: &CheckpointTimes) -> VisibleKey {
    (times.visible_at_ms(), slot, times.batch_start_offset)
}

impl HeldCheckpoints {
    pub(super) fn len(&self) -> usize {
        self.times.len()
    }

    /// Holds the message at `offset` of `queue` until `times` says, replacing what held it.
    pub(super) fn insert(&mut self, queue: &GroupQueue, offset: u64, times: CheckpointTimes) {
        self.insert_all(queue, &[offset], times);
    }

    /// [`Self::insert`] for the messages one pop hands out of one queue.
    pub(super) fn insert_all(
        &mut self,
        queue: &GroupQueue,
        offsets: &[u64],
        times: CheckpointTimes,
    ) {
        if offsets.is_empty() {
            // A pop whose read was all filtered out holds nothing: no slot to open.
            return;
        }
        let slot = match self.slots.get(queue) {
            Some(slot) => *slot,
            None => self.open_slot(queue),
        };
        let mut added = Vec::with_capacity(offsets.len());
        for offset in offsets {
            match self.times.insert((slot, *offset), times) {
                Some(old) if old == times => continue,
                Some(old) => self.unindex(slot, *offset, &old),
                None => self.queues[slot as usize].1 += 1,
            }
            added.push(*offset);
        }
        if !added.is_empty() {
            self.by_visible_at
                .entry(visible_key(slot, &times))
                .or_default()
                .extend(added);
        }
    }

    /// Takes `offset` out of the index entry `times` put it in.
    fn unindex(&mut self, slot: Slot, offset: u64, times: &CheckpointTimes) {
        let key = visible_key(slot, times);
        if let Some(offsets) = self.by_visible_at.get_mut(&key) {
            if let Some(i) = offsets.iter().position(|o| *o == offset) {
                offsets.swap_remove(i);
            }
            if offsets.is_empty() {
                self.by_visible_at.remove(&key);
            }
        }
    }

    fn open_slot(&mut self, queue: &GroupQueue) -> Slot {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.queues.push((None, 0));
                Slot::try_from(self.queues.len() - 1).unwrap_or(Slot::MAX)
            }
        };
        self.queues[slot as usize] = (Some(queue.clone()), 0);
        self.slots.insert(queue.clone(), slot);
        slot
    }

    pub(super) fn get(&self, queue: &GroupQueue, offset: u64) -> Option<CheckpointTimes> {
        let slot = self.slots.get(queue)?;
        self.times.get(&(*slot, offset)).copied()
    }

    /// Lets the message go; a queue left holding nothing frees its slot.
    pub(super) fn remove(&mut self, queue: &GroupQueue, offset: u64) -> Option<CheckpointTimes> {
        let slot = self.slot_of(queue)?;
        self.remove_from_slot(slot, offset, |_| true)
    }

    /// The slot of `queue`, while it holds anything: for several removals in a row, which name
    /// the queue once.
    pub(super) fn slot_of(&self, queue: &GroupQueue) -> Option<Slot> {
        self.slots.get(queue).copied()
    }

    /// Lets the message at `offset` of the slot's queue go if what holds it passes `check` (an
    /// ack names the pop it answers). Once the queue's last message is let go the slot is free,
    /// and holds nothing until a later insert takes it.
    pub(super) fn remove_from_slot(
        &mut self,
        slot: Slot,
        offset: u64,
        check: impl FnOnce(&CheckpointTimes) -> bool,
    ) -> Option<CheckpointTimes> {
        let std::collections::hash_map::Entry::Occupied(held) = self.times.entry((slot, offset))
        else {
            return None;
        };
        if !check(held.get()) {
            return None;
        }
        let times = held.remove();
        self.unindex(slot, offset, &times);
        let held = &mut self.queues[slot as usize];
        held.1 -= 1;
        if held.1 == 0 {
            if let Some(queue) = held.0.take() {
                self.slots.remove(&queue);
            }
            self.free.push(slot);
        }
        Some(times)
    }

    /// The messages visible again by `now_ms`, soonest first.
    pub(super) fn visible_by(
        &self,
        now_ms: i64,
    ) -> impl Iterator<Item = (&GroupQueue, u64, CheckpointTimes)> {
        self.by_visible_at
            .iter()
            .take_while(move |((visible_at, _, _), _)| *visible_at <= now_ms)
            .flat_map(|((_, slot, _), offsets)| offsets.iter().map(move |o| (*slot, *o)))
            .filter_map(|(slot, offset)| {
                let queue = self.queues[slot as usize].0.as_ref()?;
                let times = self.times.get(&(slot, offset))?;
                Some((queue, offset, *times))
            })
    }

    /// Every message held for `group`.
    pub(super) fn of_group(&self, group: &str) -> Vec<(GroupQueue, u64)> {
        self.times
            .keys()
            .filter_map(|(slot, offset)| {
                let queue = self.queues[*slot as usize].0.as_ref()?;
                (queue.group == group).then(|| (queue.clone(), *offset))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(pop_time_ms: i64) -> CheckpointTimes {
        CheckpointTimes {
            pop_time_ms,
            invisible_ms: 100,
            batch_start_offset: 0,
        }
    }

    #[test]
    fn messages_are_held_by_queue_and_offset_and_listed_soonest_visible_first() {
        let mut held = HeldCheckpoints::default();
        let (a, b) = (GroupQueue::new("g", "a", 0), GroupQueue::new("g", "b", 0));
        held.insert(&a, 7, times(50));
        held.insert(&b, 7, times(0));
        held.insert(&a, 8, times(10));
        assert_eq!(held.get(&a, 7), Some(times(50)));
        let due: Vec<(String, u64)> = held
            .visible_by(120)
            .map(|(q, offset, _)| (q.topic.clone(), offset))
            .collect();
        assert_eq!(due, [("b".to_owned(), 7), ("a".to_owned(), 8)]);
        held.insert(&b, 7, times(100));
        assert_eq!(
            held.visible_by(120).count(),
            1,
            "a new time replaces the old"
        );
        assert_eq!(held.len(), 3);
    }

    #[test]
    fn a_batch_shares_one_visibility_entry_and_leaves_it_message_by_message() {
        let mut held = HeldCheckpoints::default();
        let a = GroupQueue::new("g", "a", 0);
        held.insert_all(&a, &[3, 4, 5], times(0));
        held.insert_all(&a, &[3, 4, 5], times(0));
        assert_eq!(held.by_visible_at.len(), 1, "one entry for the batch");
        assert_eq!(held.visible_by(100).count(), 3, "held once each");
        assert_eq!(held.remove(&a, 4), Some(times(0)));
        held.insert(&a, 5, times(50));
        let due: Vec<u64> = held.visible_by(100).map(|(_, o, _)| o).collect();
        assert_eq!(due, [3], "4 acknowledged, 5 invisible longer");
        assert_eq!(held.remove(&a, 3), Some(times(0)));
        assert_eq!(held.by_visible_at.len(), 1, "the empty entry is gone");
        assert_eq!(
            held.visible_by(150).map(|(_, o, _)| o).collect::<Vec<_>>(),
            [5]
        );
        let slot = held.slot_of(&a).expect("a holds 5");
        assert_eq!(
            held.remove_from_slot(slot, 5, |t| t.pop_time_ms == 0),
            None,
            "an ack of the old pop does not take it"
        );
        assert_eq!(held.len(), 1);
    }

    #[test]
    fn a_queue_holding_nothing_frees_its_slot_for_the_next() {
        let mut held = HeldCheckpoints::default();
        let (a, b) = (GroupQueue::new("g", "a", 0), GroupQueue::new("h", "b", 1));
        held.insert_all(&a, &[], times(0));
        assert!(held.queues.is_empty(), "holding nothing takes no slot");
        held.insert(&a, 1, times(0));
        assert_eq!(held.remove(&a, 1), Some(times(0)));
        assert_eq!(held.remove(&a, 1), None);
        held.insert(&b, 1, times(0));
        assert_eq!(held.get(&a, 1), None, "the slot now names another queue");
        assert_eq!(held.queues.len(), 1, "one slot, reused");
        assert_eq!(held.of_group("h"), [(b.clone(), 1)]);
        assert!(held.of_group("g").is_empty());
    }

    #[test]
    fn removals_by_slot_free_it_with_the_last_message_and_take_nothing_after() {
        let mut held = HeldCheckpoints::default();
        let a = GroupQueue::new("g", "a", 0);
        held.insert_all(&a, &[1, 2], times(0));
        let slot = held.slot_of(&a).expect("a holds messages");
        assert_eq!(held.remove_from_slot(slot, 1, |_| true), Some(times(0)));
        assert_eq!(held.remove_from_slot(slot, 2, |t| t.pop_time_ms == 5), None);
        assert_eq!(held.remove_from_slot(slot, 2, |_| true), Some(times(0)));
        assert_eq!(held.slot_of(&a), None, "the last message freed the slot");
        assert_eq!(held.remove_from_slot(slot, 2, |_| true), None);
        assert_eq!(held.len(), 0);
        assert!(held.by_visible_at.is_empty());
    }
}
