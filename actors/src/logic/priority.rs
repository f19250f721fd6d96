//! Priority messages (RocketMQ 5.4, RIP-80): where a message carrying a priority is stored, and
//! the order a pop walks a priority topic's queues in.
//!
//! The facts, from Apache RocketMQ 5.5.0's broker:
//! - A single send (not a batch) whose `_SYS_MSG_PRIORITY_` property reads as a number of 0 or
//!   more is a priority message when nothing else claims it: not a transaction half, not
//!   delayed, not in a message group (Java's `TopicMessageType.parseFromMessageProperty`, which
//!   checks those first). Such a message goes to queue `min(priority, write queues - 1)` of its
//!   topic, whatever queue the producer picked, and keeps its property (a priority of 99 reads
//!   back as 99). Any other message loses the property (`SendMessageProcessor.sendMessage`).
//!   The topic's own type is not consulted: the gRPC door and the client check that.
//! - An unordered pop of a topic of type `PRIORITY` reads its queues from the highest down and
//!   the pop retry topic only after them, unless a draw in 0..100 reaches the group's
//!   `priority.factor` (default 100: always); an orderly pop, or a pop of another topic, reads
//!   the queues from a random one and the retry topic first one time in five
//!   (`PopMessageProcessor.processRequest`, `popFromRetryProbabilityForPriority` 0,
//!   `priorityOrderAsc` true).

use skiff_storage::message::property;
use skiff_storage::message::property::{
    DELAY, PRIORITY, SHARDING_KEY, TIMER_DELAY_MS, TIMER_DELAY_SEC, TIMER_DELIVER_MS, TRAN_MSG,
};

use super::pop::POP_FROM_RETRY_PERCENT;

/// A group's `priority.factor` when it sets none: every pop of a priority topic reads the
/// highest queue first.
pub const DEFAULT_PRIORITY_FACTOR: u32 = 100;

/// What the broker does with a single send's priority property.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriorityPlacement {
    /// No priority, or one that does not read as a number of 0 or more: left as it is.
    Unchanged,
    /// A priority message: stored in this queue.
    Queue(u32),
    /// A priority on a message of another kind (a transaction half, a delayed or grouped
    /// message): the property is dropped.
    DropProperty,
}

/// Where a single send with `properties` (RocketMQ's encoded property string) goes, for a topic
/// of `write_queues` write queues.
pub fn placement(properties: &str, write_queues: u32) -> PriorityPlacement {
    // Java's NumberUtils.toInt(value, -1): anything unparsable counts as no priority.
    let Some(priority) = property(properties, PRIORITY).and_then(|v| v.parse::<i32>().ok()) else {
        return PriorityPlacement::Unchanged;
    };
    let Ok(priority) = u32::try_from(priority) else {
        return PriorityPlacement::Unchanged;
    };
    let transaction =
        property(properties, TRAN_MSG).is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let other_kind = transaction
        || [
            DELAY,
            TIMER_DELIVER_MS,
            TIMER_DELAY_SEC,
            TIMER_DELAY_MS,
            SHARDING_KEY,
        ]
        .iter()
        .any(|name| property(properties, name).is_some());
    if other_kind {
        PriorityPlacement::DropProperty
    } else {
        PriorityPlacement::Queue(priority.min(write_queues.saturating_sub(1)))
    }
}

/// How one pop walks its topic and the pop retry topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PopWalk {
    /// The topic's queues from the highest down (a priority pop) rather than from a random one.
    pub highest_first: bool,
    /// The pop retry topic before the topic's queues rather than after them.
    pub retry_first: bool,
}

impl PopWalk {
    /// A look at every source where the order does not matter (a long poll's wait, whether
    /// anything is left to pop).
    pub const ANY_ORDER: PopWalk = PopWalk {
        highest_first: false,
        retry_first: false,
    };

    /// The walk of a pop of a `priority_topic` by a group with `priority_factor`, `orderly` or
    /// not; `draw` is the pop's number in 0..100 (Java draws one per pop and uses it for both
    /// choices).
    pub fn new(priority_topic: bool, orderly: bool, priority_factor: u32, draw: u32) -> Self {
        let highest_first = priority_topic && !orderly && draw < priority_factor;
        // Java's popFromRetryProbabilityForPriority is 0: a priority pop reads the backlog
        // before any retry.
        let retry_percent = if highest_first {
            0
        } else {
            POP_FROM_RETRY_PERCENT
        };
        PopWalk {
            highest_first,
            retry_first: !orderly && draw < retry_percent,
        }
    }

    /// The order of a topic's `queues` queues; `start` picks the first of an unordered walk.
    pub fn queue_order(&self, queues: u32, start: u32) -> Vec<u32> {
        let queues = queues.max(1);
        if self.highest_first {
            (0..queues).rev().collect()
        } else {
            (0..queues).map(|i| (start + i) % queues).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_storage::message::encode_properties;

    fn props(pairs: &[(&str, &str)]) -> String {
        encode_properties(pairs)
    }

    #[test]
    fn a_priority_picks_its_queue_and_the_last_queue_takes_every_higher_one() {
        for (priority, queue) in [("0", 0), ("5", 5), ("7", 7), ("99", 7)] {
            assert_eq!(
                placement(&props(&[(PRIORITY, priority)]), 8),
                PriorityPlacement::Queue(queue),
                "priority {priority}"
            );
        }
        assert_eq!(
            placement(&props(&[(PRIORITY, "3")]), 0),
            PriorityPlacement::Queue(0),
            "a topic without write queues is refused by the store, not here"
        );
    }

    #[test]
    fn no_priority_or_an_unreadable_one_changes_nothing() {
        for properties in [
            props(&[("KEYS", "k")]),
            props(&[(PRIORITY, "-1")]),
            props(&[(PRIORITY, "high")]),
            props(&[(PRIORITY, "99999999999")]),
        ] {
            assert_eq!(placement(&properties, 8), PriorityPlacement::Unchanged);
        }
    }

    #[test]
    fn a_half_a_delayed_or_a_grouped_message_loses_its_priority() {
        for claim in [
            (TRAN_MSG, "true"),
            (DELAY, "3"),
            (TIMER_DELIVER_MS, "1700000000000"),
            (TIMER_DELAY_SEC, "10"),
            (TIMER_DELAY_MS, "10000"),
            (SHARDING_KEY, "order-1"),
        ] {
            assert_eq!(
                placement(&props(&[(PRIORITY, "2"), claim]), 8),
                PriorityPlacement::DropProperty,
                "{claim:?}"
            );
        }
        assert_eq!(
            placement(&props(&[(PRIORITY, "2"), (TRAN_MSG, "false")]), 8),
            PriorityPlacement::Queue(2),
            "TRAN_MSG=false is not a half"
        );
    }

    #[test]
    fn a_priority_pop_reads_the_highest_queue_first_and_retries_last() {
        let walk = PopWalk::new(true, false, DEFAULT_PRIORITY_FACTOR, 0);
        assert_eq!(
            walk,
            PopWalk {
                highest_first: true,
                retry_first: false
            }
        );
        assert_eq!(walk.queue_order(4, 2), [3, 2, 1, 0]);
    }

    #[test]
    fn the_priority_factor_is_the_share_of_pops_that_read_by_priority() {
        let by_priority = (0..100)
            .filter(|draw| PopWalk::new(true, false, 30, *draw).highest_first)
            .count();
        assert_eq!(by_priority, 30);
        assert!(
            !PopWalk::new(true, false, 0, 0).highest_first,
            "0 turns it off"
        );
        let off = PopWalk::new(true, false, 0, 5);
        assert!(
            off.retry_first,
            "a pop not by priority reads retries first at times"
        );
    }

    #[test]
    fn other_pops_start_anywhere_and_read_retries_first_one_time_in_five() {
        let walk = PopWalk::new(false, false, DEFAULT_PRIORITY_FACTOR, 50);
        assert!(!walk.highest_first);
        assert_eq!(walk.queue_order(4, 2), [2, 3, 0, 1]);
        let retry_first = (0..100)
            .filter(|draw| PopWalk::new(false, false, 100, *draw).retry_first)
            .count();
        assert_eq!(retry_first, POP_FROM_RETRY_PERCENT as usize);
        let orderly = PopWalk::new(true, true, 100, 0);
        assert_eq!(
            orderly,
            PopWalk {
                highest_first: false,
                retry_first: false
            },
            "an orderly pop never reads by priority nor retries"
        );
    }
}
