//! What the broker checks of a client's send before anything is stored, whatever door the send
//! came in by (Java's `AbstractSendMessageProcessor.msgCheck` and the batch rules of its
//! `SendMessageProcessor`), and how the queue of a send that names none is chosen.

use crate::logic::delay::RETRY_TOPIC_PREFIX;
use crate::logic::names::{is_send_forbidden, topic_name_problem, NameProblem};

/// Which queue of its topic a client's send goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueChoice {
    /// The queue the client picked (a remoting send's `queueId`).
    Given(u32),
    /// Any writable queue (a remoting `queueId` below 0; a gRPC send with no message group).
    Random,
    /// The queue a key hashes to, so every message of one key lands in one queue (a gRPC FIFO
    /// message's group, hashed as the proxy hashes it).
    ByKey(String),
}

impl QueueChoice {
    /// The queue this choice names among `write_queues` (at least 1); `random` is drawn by the
    /// caller so the choice itself stays deterministic.
    pub fn pick(&self, write_queues: u32, random: u32) -> u32 {
        let queues = write_queues.max(1);
        match self {
            QueueChoice::Given(queue_id) => *queue_id,
            QueueChoice::Random => random % queues,
            QueueChoice::ByKey(key) => java_string_hash(key).unsigned_abs() % queues,
        }
    }
}

/// A send the broker refuses before storing anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IllegalSend {
    #[error("topic {topic:?} is not a valid topic name: {problem}")]
    TopicName { topic: String, problem: NameProblem },
    /// The delay, transaction-half and timer topics: a message written there directly would
    /// skip the delay limits and could name any destination.
    #[error("topic {topic} is written only by the broker")]
    Forbidden { topic: String },
    /// One END_TRANSACTION names one half, so halves travel alone (Java's client never
    /// batches them).
    #[error("a batch cannot carry transactional messages")]
    BatchWithTransaction,
    #[error("a batch cannot be sent to retry topic {topic}")]
    BatchToRetryTopic { topic: String },
}

/// A client's send of messages to `topic`: `batch` when they came as one batch request,
/// `transactional` when any of them is a transaction half.
pub fn check_client_send(topic: &str, batch: bool, transactional: bool) -> Result<(), IllegalSend> {
    if let Some(problem) = topic_name_problem(topic) {
        return Err(IllegalSend::TopicName {
            topic: topic.to_owned(),
            problem,
        });
    }
    if is_send_forbidden(topic) {
        return Err(IllegalSend::Forbidden {
            topic: topic.to_owned(),
        });
    }
    if batch && transactional {
        return Err(IllegalSend::BatchWithTransaction);
    }
    if batch && topic.starts_with(RETRY_TOPIC_PREFIX) {
        return Err(IllegalSend::BatchToRetryTopic {
            topic: topic.to_owned(),
        });
    }
    Ok(())
}

/// Java's `String.hashCode` over UTF-16 units: the proxy hashes a message group with it.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::delay::SCHEDULE_TOPIC;
    use crate::logic::timer::TIMER_TOPIC;
    use crate::logic::transaction::HALF_TOPIC;

    #[test]
    fn the_message_group_hash_is_javas() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99_162_322);
    }

    #[test]
    fn a_key_always_picks_the_same_queue_and_a_given_queue_is_kept() {
        let key = QueueChoice::ByKey("order-17".to_owned());
        let first = key.pick(8, 0);
        assert!(first < 8);
        assert_eq!(key.pick(8, 12345), first, "the random draw must not matter");
        assert_eq!(
            QueueChoice::Given(6).pick(4, 1),
            6,
            "range is the store's to judge"
        );
        assert_eq!(QueueChoice::Random.pick(4, 7), 3);
        assert_eq!(
            QueueChoice::Random.pick(0, 7),
            0,
            "no queue still picks queue 0"
        );
    }

    #[test]
    fn clients_may_not_send_to_the_topics_the_broker_writes() {
        for topic in [SCHEDULE_TOPIC, HALF_TOPIC, TIMER_TOPIC] {
            assert_eq!(
                check_client_send(topic, false, false),
                Err(IllegalSend::Forbidden {
                    topic: topic.to_owned()
                })
            );
        }
        assert_eq!(check_client_send("Orders", false, false), Ok(()));
    }

    #[test]
    fn names_and_batches_are_checked_as_java_checks_them() {
        assert!(matches!(
            check_client_send("", false, false),
            Err(IllegalSend::TopicName {
                problem: NameProblem::Blank,
                ..
            })
        ));
        assert!(matches!(
            check_client_send("a b", false, false),
            Err(IllegalSend::TopicName {
                problem: NameProblem::IllegalCharacters,
                ..
            })
        ));
        assert_eq!(
            check_client_send("Orders", true, true),
            Err(IllegalSend::BatchWithTransaction)
        );
        assert_eq!(check_client_send("Orders", false, true), Ok(()));
        assert_eq!(
            check_client_send("%RETRY%g", true, false),
            Err(IllegalSend::BatchToRetryTopic {
                topic: "%RETRY%g".to_owned()
            })
        );
        assert_eq!(check_client_send("%RETRY%g", false, false), Ok(()));
    }
}
