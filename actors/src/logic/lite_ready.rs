//! Which lite topics a lite receive looks at. A client may subscribe thousands of lite topics and
//! most hold nothing for it at any moment, so a receive looks only at those marked ready (a
//! message arrived, a batch was acknowledged, the subscription was added) or come due (a batch
//! handed out becomes visible again), never at every subscription: Apache's broker keeps an event
//! queue per client for the same reason (`LiteEventDispatcher`).

use std::collections::{BTreeSet, HashMap};

/// Per client, its ready lite topics; for all, when a lite topic is to be looked at again.
#[derive(Debug, Default)]
pub struct LiteReadiness {
    clients: HashMap<String, Ready>,
    /// `(due_ms, parent, lite)`: a lite topic to mark ready for its subscribers at `due_ms`.
    due: BTreeSet<(i64, String, String)>,
}

#[derive(Debug, Default)]
struct Ready {
    lites: BTreeSet<String>,
    /// The last lite topic a receive looked at: the next receive starts after it, so each ready
    /// lite topic gets its turn however many there are.
    cursor: String,
}

/// What a receive's look at one lite topic found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// A batch was handed out; the lite topic blocks until it is acknowledged or visible again
    /// at `visible_at_ms`.
    HandedOut { visible_at_ms: i64 },
    /// A batch handed out before is still out until `visible_at_ms`.
    Blocked { visible_at_ms: i64 },
    /// Another receive of the group was reading it: look again on the next round.
    Busy,
    /// Nothing to read.
    Empty,
}

impl Look {
    /// When the lite topic is to be looked at again though nothing marks it: a batch out
    /// becomes visible.
    pub fn due_ms(self) -> Option<i64> {
        match self {
            Look::HandedOut { visible_at_ms } | Look::Blocked { visible_at_ms } => {
                Some(visible_at_ms)
            }
            Look::Busy | Look::Empty => None,
        }
    }
}

impl LiteReadiness {
    /// Marks `lite` ready for `client`.
    pub fn mark(&mut self, client: &str, lite: &str) {
        let ready = self.clients.entry(client.to_owned()).or_default();
        if !ready.lites.contains(lite) {
            ready.lites.insert(lite.to_owned());
        }
    }

    /// `client` no longer subscribes `lite`.
    pub fn unmark(&mut self, client: &str, lite: &str) {
        if let Some(ready) = self.clients.get_mut(client) {
            ready.lites.remove(lite);
        }
    }

    /// `client` has no subscription any more.
    pub fn forget_client(&mut self, client: &str) {
        self.clients.remove(client);
    }

    /// Whether `client` has a lite topic to look at.
    pub fn has_ready(&self, client: &str) -> bool {
        self.clients
            .get(client)
            .is_some_and(|r| !r.lites.is_empty())
    }

    /// The client's ready lite topics in the order a receive looks at them: after the last one
    /// looked at, then from the start.
    pub fn round(&self, client: &str) -> Vec<String> {
        let Some(ready) = self.clients.get(client) else {
            return Vec::new();
        };
        let after = ready
            .lites
            .range::<str, _>((
                std::ops::Bound::Excluded(ready.cursor.as_str()),
                std::ops::Bound::Unbounded,
            ))
            .cloned();
        let before = ready
            .lites
            .range::<str, _>((
                std::ops::Bound::Unbounded,
                std::ops::Bound::Included(ready.cursor.as_str()),
            ))
            .cloned();
        after.chain(before).collect()
    }

    /// Takes `lite` out of `client`'s ready set as a receive looks at it, so an arrival during
    /// the look marks it again; answers whether it was there.
    pub fn take(&mut self, client: &str, lite: &str) -> bool {
        let Some(ready) = self.clients.get_mut(client) else {
            return false;
        };
        ready.cursor = lite.to_owned();
        ready.lites.remove(lite)
    }

    /// Marks `parent`'s `lite` ready for its subscribers at `due_ms` (a batch's new invisible
    /// time, so a shortened one is not waited out).
    pub fn due_at(&mut self, due_ms: i64, parent: &str, lite: &str) {
        self.due
            .insert((due_ms, parent.to_owned(), lite.to_owned()));
    }

    /// Takes the lite topics due by `now_ms`, as `(parent, lite)`.
    pub fn take_due(&mut self, now_ms: i64) -> Vec<(String, String)> {
        let mut taken = Vec::new();
        while let Some(first) = self.due.first() {
            if first.0 > now_ms {
                break;
            }
            if let Some((_, parent, lite)) = self.due.pop_first() {
                taken.push((parent, lite));
            }
        }
        taken
    }

    /// When the next lite topic comes due.
    pub fn next_due_ms(&self) -> Option<i64> {
        self.due.first().map(|d| d.0)
    }

    /// `(clients with a ready lite topic, ready lite topics in all, lite topics due later)`.
    pub fn counts(&self) -> (usize, usize, usize) {
        let with = self.clients.values().filter(|r| !r.lites.is_empty());
        (
            with.clone().count(),
            with.map(|r| r.lites.len()).sum(),
            self.due.len(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(lites: &[&str]) -> LiteReadiness {
        let mut ready = LiteReadiness::default();
        for lite in lites {
            ready.mark("c1", lite);
        }
        ready
    }

    #[test]
    fn each_receive_starts_after_the_lite_topic_the_last_one_looked_at() {
        let mut ready = marked(&["a", "b", "c", "d"]);
        assert_eq!(ready.round("c1"), ["a", "b", "c", "d"]);
        assert!(ready.take("c1", "b"));
        ready.mark("c1", "b");
        assert_eq!(ready.round("c1"), ["c", "d", "a", "b"]);
        assert!(ready.take("c1", "d"));
        ready.mark("c1", "d");
        assert_eq!(ready.round("c1"), ["a", "b", "c", "d"]);
        assert!(ready.round("nobody").is_empty());
    }

    #[test]
    fn a_lite_topic_taken_leaves_the_ready_set_until_marked_again() {
        let mut ready = marked(&["a", "b"]);
        assert!(ready.take("c1", "a"));
        assert!(!ready.take("c1", "a"), "taken once");
        assert_eq!(ready.round("c1"), ["b"]);
        ready.mark("c1", "a");
        assert_eq!(ready.round("c1"), ["b", "a"]);
        ready.unmark("c1", "b");
        ready.unmark("c1", "a");
        assert!(!ready.has_ready("c1"));
        ready.mark("c1", "a");
        ready.forget_client("c1");
        assert!(!ready.has_ready("c1") && !ready.take("c1", "a"));
    }

    #[test]
    fn lite_topics_come_due_in_time_order_each_entry_once() {
        let mut ready = LiteReadiness::default();
        ready.due_at(500, "P", "a");
        ready.due_at(300, "P", "b");
        assert_eq!(ready.next_due_ms(), Some(300));
        assert!(ready.take_due(299).is_empty());
        assert_eq!(ready.take_due(300), [("P".to_owned(), "b".to_owned())]);
        // A change of invisible time files it earlier; both entries come due, each once.
        ready.due_at(100, "P", "a");
        assert_eq!(
            ready.take_due(1000),
            [
                ("P".to_owned(), "a".to_owned()),
                ("P".to_owned(), "a".to_owned())
            ]
        );
        assert_eq!(ready.next_due_ms(), None);
        assert_eq!(Look::Blocked { visible_at_ms: 7 }.due_ms(), Some(7));
        assert_eq!(Look::Empty.due_ms(), None);
    }
}
