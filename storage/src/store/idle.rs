//! Idle queues leave memory: a store may hold millions of queues (a lite topic is one), most of
//! them written once and then left alone, and each open queue costs about a kilobyte. A queue
//! neither read nor appended to between two looks, whose entries are all in its files and
//! fsynced, and that nobody holds, is dropped from the writer's and the readers' maps; the next
//! read or write opens it again from its files.
//!
//! A queue opened from disk is normally settled against the commit log as recovery left it
//! (entries at or past recovery's starting point are dropped: no writer of this run made them).
//! A queue that left memory during this run did get such entries from this run's writer, so it
//! is remembered as released, by a keyed 64-bit hash of its name, and opened again without that
//! cut. A hash collision would only skip the cut for a queue this run never opened; with a
//! million released queues that takes about one open in 10^13.

use super::queues::remove_from;
use super::{lock, MessageStore};
use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

/// The queues released from memory during this run, by [`ReleasedQueues::key`].
#[derive(Debug, Default)]
pub(super) struct ReleasedQueues {
    hasher: RandomState,
    keys: HashSet<u64>,
}

impl ReleasedQueues {
    fn key(&self, topic: &str, queue_id: u32) -> u64 {
        self.hasher.hash_one((topic, queue_id))
    }

    fn insert(&mut self, topic: &str, queue_id: u32) {
        let key = self.key(topic, queue_id);
        self.keys.insert(key);
    }

    /// Whether the queue was released (and forgets it: it is being opened again).
    pub(super) fn take(&mut self, topic: &str, queue_id: u32) -> bool {
        let key = self.key(topic, queue_id);
        self.keys.remove(&key)
    }

    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }
}

impl MessageStore {
    /// Drops from memory every queue not used since the last call whose entries are all fsynced
    /// in its files and that nobody else holds; answers how many went. Called at an interval,
    /// a queue leaves after one to two intervals without use.
    pub fn release_idle_queues(&mut self) -> usize {
        // The last append's scratch holds its queues' handles; the next append starts anew.
        self.batch.clear();
        let mut shared = self
            .shared
            .queues
            .write()
            .unwrap_or_else(|e| e.into_inner());
        let mut released = lock(&self.shared.released);
        let mut count = 0;
        shared.retain(|topic, queues| {
            queues.retain(|q| {
                if q.take_used() || q.needs_sync() {
                    return true;
                }
                let in_writer = self
                    .queues
                    .get(topic)
                    .and_then(|m| m.get(&q.queue_id()))
                    .is_some();
                // This map's handle, the writer's, and nobody else's: a reader holding one
                // reads on from it, but two handles of one queue must never both take entries.
                if Arc::strong_count(q) > 1 + usize::from(in_writer) {
                    return true;
                }
                if in_writer {
                    remove_from(&mut self.queues, topic, q.queue_id());
                }
                released.insert(topic, q.queue_id());
                count += 1;
                false
            });
            queues.len() > 0
        });
        // A map keeps its table after removals: two tables sized for a million queues were
        // most of an idle broker's memory once they had left.
        if shared.len() < shared.capacity() / 4 {
            shared.shrink_to_fit();
        }
        if self.queues.len() < self.queues.capacity() / 4 {
            self.queues.shrink_to_fit();
        }
        if count > 0 {
            tracing::debug!(
                queues = count,
                released_in_all = released.len(),
                "idle consume queues left memory"
            );
        }
        count
    }
}
