//! Topic and group names: which are well formed (Java's `TopicValidator`), and the four kinds of
//! system topic, which are different rules and live here side by side so none is mistaken for
//! another:
//!
//! - [`is_rocketmq_system_topic`]: the topics Java's broker keeps for itself; admin requests
//!   may not create or delete them.
//! - [`is_broker_written_topic`]: the topics skiff's broker writes to itself (delays, halves,
//!   timers, retries, dead letters); they are created on first use whatever `auto_create_topic`
//!   says.
//! - [`is_send_forbidden`]: the topics a producer may not send to directly.
//! - [`is_system_or_group_topic`]: the topics a listing marks as not the user's own (the
//!   console's `system` flag).

use crate::logic::delay::{DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX, SCHEDULE_TOPIC};
use crate::logic::timer::TIMER_TOPIC;
use crate::logic::transaction::HALF_TOPIC;
pub use skiff_storage::store::is_topic_character;

/// The topic whose route a client asks for when it sends to a topic that does not exist yet
/// (Java's `TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC`; the remoting codes carry it too).
pub const AUTO_CREATE_TOPIC_KEY: &str = "TBW102";
/// Longest topic name (Java's `TopicValidator.TOPIC_MAX_LENGTH`).
pub const TOPIC_MAX_LENGTH: usize = 127;
/// Longest retry or dead-letter topic name.
pub const RETRY_OR_DLQ_TOPIC_MAX_LENGTH: usize = 255;
/// Longest group name.
pub const GROUP_MAX_LENGTH: usize = 255;
/// Prefix of the topics the Java broker keeps for itself.
const SYSTEM_TOPIC_PREFIX: &str = "rmq_sys_";
/// Topics the Java broker keeps for itself (`TopicValidator.SYSTEM_TOPIC_SET`).
const SYSTEM_TOPICS: &[&str] = &[
    AUTO_CREATE_TOPIC_KEY,
    SCHEDULE_TOPIC,
    "BenchmarkTest",
    HALF_TOPIC,
    "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "CHECKPOINT_TOPIC",
];
/// Topics producers may not send to (`TopicValidator.isNotAllowedSendTopic`, the subset skiff
/// has), and the timer topic: a message written there directly would skip the 3-day limit and
/// name any destination.
const NOT_ALLOWED_SEND_TOPICS: [&str; 3] = [SCHEDULE_TOPIC, HALF_TOPIC, TIMER_TOPIC];

/// What is wrong with a name, as Java's `TopicValidator` sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameProblem {
    Blank,
    /// A character outside `[%|a-zA-Z0-9_-]`.
    IllegalCharacters,
    /// Longer than `max` bytes.
    TooLong {
        max: usize,
    },
}

impl std::fmt::Display for NameProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NameProblem::Blank => f.write_str("the name is blank"),
            NameProblem::IllegalCharacters => {
                f.write_str("only the characters [%|a-zA-Z0-9_-] are allowed")
            }
            NameProblem::TooLong { max } => write!(f, "the name is longer than {max} bytes"),
        }
    }
}

/// Whether every byte of `name` is one RocketMQ allows in topic and group names.
pub fn has_only_name_characters(name: &str) -> bool {
    name.bytes().all(is_topic_character)
}

/// Java's `TopicValidator.validateTopic`.
pub fn topic_name_problem(topic: &str) -> Option<NameProblem> {
    if topic.trim().is_empty() {
        return Some(NameProblem::Blank);
    }
    if !has_only_name_characters(topic) {
        return Some(NameProblem::IllegalCharacters);
    }
    let max = if topic.starts_with(RETRY_TOPIC_PREFIX) || topic.starts_with(DLQ_TOPIC_PREFIX) {
        RETRY_OR_DLQ_TOPIC_MAX_LENGTH
    } else {
        TOPIC_MAX_LENGTH
    };
    (topic.len() > max).then_some(NameProblem::TooLong { max })
}

/// Java's `TopicValidator.validateGroup`.
pub fn group_name_problem(group: &str) -> Option<NameProblem> {
    if group.trim().is_empty() {
        return Some(NameProblem::Blank);
    }
    if !has_only_name_characters(group) {
        return Some(NameProblem::IllegalCharacters);
    }
    (group.len() > GROUP_MAX_LENGTH).then_some(NameProblem::TooLong {
        max: GROUP_MAX_LENGTH,
    })
}

/// Java's `TopicValidator.isSystemTopic`.
pub fn is_rocketmq_system_topic(topic: &str) -> bool {
    SYSTEM_TOPICS.contains(&topic) || topic.starts_with(SYSTEM_TOPIC_PREFIX)
}

/// Topics skiff's broker writes to itself.
pub fn is_broker_written_topic(name: &str) -> bool {
    name == SCHEDULE_TOPIC
        || name == HALF_TOPIC
        || name == TIMER_TOPIC
        || name.starts_with(RETRY_TOPIC_PREFIX)
        || name.starts_with(DLQ_TOPIC_PREFIX)
}

/// Topics a producer may not send to.
pub fn is_send_forbidden(topic: &str) -> bool {
    NOT_ALLOWED_SEND_TOPICS.contains(&topic)
}

/// Whether a topic is not one a user created for their own messages: one of RocketMQ's own
/// system topics, or one the broker keeps for a consumer group. Every group topic (retry,
/// dead-letter, pop retry) begins with `%`, so the prefix alone decides, and a user's topic that
/// begins with `%` (a legal name) is counted with them. Listings use it to set such topics apart.
pub fn is_system_or_group_topic(topic: &str) -> bool {
    is_rocketmq_system_topic(topic) || topic.starts_with('%')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_are_checked_as_java_checks_them() {
        let cases: &[(&str, Option<NameProblem>)] = &[
            ("Orders_1-a%b|c", None),
            ("  ", Some(NameProblem::Blank)),
            ("a b", Some(NameProblem::IllegalCharacters)),
            ("a.b", Some(NameProblem::IllegalCharacters)),
            (&"t".repeat(127), None),
        ];
        for (name, problem) in cases {
            assert_eq!(topic_name_problem(name), *problem, "{name:?}");
        }
        assert_eq!(
            topic_name_problem(&"t".repeat(128)),
            Some(NameProblem::TooLong { max: 127 })
        );
        assert_eq!(
            topic_name_problem(&format!("%RETRY%{}", "g".repeat(200))),
            None
        );
        assert_eq!(
            topic_name_problem(&format!("%DLQ%{}", "g".repeat(252))),
            Some(NameProblem::TooLong { max: 255 })
        );
    }

    #[test]
    fn group_names_are_checked_as_java_checks_them() {
        assert_eq!(group_name_problem("G_1"), None);
        assert_eq!(group_name_problem(""), Some(NameProblem::Blank));
        assert_eq!(
            group_name_problem("g.1"),
            Some(NameProblem::IllegalCharacters)
        );
        assert_eq!(
            group_name_problem(&"g".repeat(256)),
            Some(NameProblem::TooLong { max: 255 })
        );
    }

    #[test]
    fn the_four_kinds_of_system_topic_differ() {
        let cases = [
            // (topic, RocketMQ's system topic, written by skiff's broker, send forbidden,
            // system or group topic)
            ("TBW102", true, false, false, true),
            ("SCHEDULE_TOPIC_XXXX", true, true, true, true),
            ("RMQ_SYS_TRANS_HALF_TOPIC", true, true, true, true),
            ("rmq_sys_wheel_timer", true, true, true, true),
            ("rmq_sys_other", true, false, false, true),
            ("%RETRY%G", false, true, false, true),
            ("%DLQ%G", false, true, false, true),
            ("%RETRY%G_Orders", false, true, false, true),
            ("Orders", false, false, false, false),
            ("Orders%1", false, false, false, false),
        ];
        for (topic, rocketmq, broker, forbidden, system_or_group) in cases {
            assert_eq!(is_rocketmq_system_topic(topic), rocketmq, "{topic}");
            assert_eq!(is_broker_written_topic(topic), broker, "{topic}");
            assert_eq!(is_send_forbidden(topic), forbidden, "{topic}");
            assert_eq!(is_system_or_group_topic(topic), system_or_group, "{topic}");
        }
    }
}
