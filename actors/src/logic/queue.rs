//! The identity of one queue: [`MessageQueue`], one queue of a topic on one broker, the unit that
//! rebalance hands out; and [`GroupQueue`], one queue as one consumer group reads it, the unit
//! the broker keeps offsets, pending resets and pop state for.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One queue of `topic` on the broker called `broker_name`.
///
/// Field order matters: the derived `Ord` compares `topic`, then `broker_name`, then `queue_id`,
/// which is the order RocketMQ's `MessageQueue.compareTo` uses. Every consumer of a group sorts
/// the queue list this way before allocating, so all of them see the same list without talking to
/// each other. (Java compares strings by UTF-16 code unit and Rust by byte; the two orders agree
/// for the ASCII names RocketMQ allows: `[A-Za-z0-9%_|-]`.)
///
/// The serde names are RocketMQ's JSON names (`topic`, `brokerName`, `queueId`), so the type can
/// sit directly in remoting bodies such as lock/unlock batches. Unknown fields are ignored, as
/// Java's fastjson does.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageQueue {
    pub topic: String,
    pub broker_name: String,
    pub queue_id: u32,
}

impl MessageQueue {
    pub fn new(topic: impl Into<String>, broker_name: impl Into<String>, queue_id: u32) -> Self {
        MessageQueue {
            topic: topic.into(),
            broker_name: broker_name.into(),
            queue_id,
        }
    }
}

/// `topic:brokerName:queueId`. Unambiguous because `:` is not allowed in topic or broker names;
/// short enough for log lines and admin output.
impl fmt::Display for MessageQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.topic, self.broker_name, self.queue_id)
    }
}

/// One queue of `topic` as the consumer group `group` reads it: the key of the broker's offsets,
/// pending resets, pull offsets, pops in progress and orderly pop blocks.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupQueue {
    pub group: String,
    pub topic: String,
    pub queue_id: u32,
}

impl GroupQueue {
    pub fn new(group: impl Into<String>, topic: impl Into<String>, queue_id: u32) -> Self {
        GroupQueue {
            group: group.into(),
            topic: topic.into(),
            queue_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::delay::retry_topic;
    use serde::de::value::{Error as DeError, MapDeserializer};
    use serde::de::{IntoDeserializer, Visitor};
    use serde::{forward_to_deserialize_any, Deserializer};

    /// A JSON-like scalar, so the field names can be checked without a JSON crate.
    #[derive(Clone, Copy)]
    enum Scalar {
        Str(&'static str),
        U32(u32),
    }

    impl<'de> Deserializer<'de> for Scalar {
        type Error = DeError;
        fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
            match self {
                Scalar::Str(s) => visitor.visit_borrowed_str(s),
                Scalar::U32(n) => visitor.visit_u32(n),
            }
        }
        forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map struct enum identifier ignored_any
        }
    }

    impl<'de> IntoDeserializer<'de, DeError> for Scalar {
        type Deserializer = Self;
        fn into_deserializer(self) -> Self {
            self
        }
    }

    fn from_fields(fields: Vec<(&'static str, Scalar)>) -> Result<MessageQueue, DeError> {
        MessageQueue::deserialize(MapDeserializer::new(fields.into_iter()))
    }

    #[test]
    fn serde_uses_rocketmq_json_names() {
        let mq = from_fields(vec![
            ("topic", Scalar::Str("orders")),
            ("brokerName", Scalar::Str("broker-a")),
            ("queueId", Scalar::U32(3)),
        ])
        .unwrap();
        assert_eq!(mq, MessageQueue::new("orders", "broker-a", 3));
    }

    #[test]
    fn serde_rejects_rust_field_names_and_ignores_unknown_fields() {
        let snake = from_fields(vec![
            ("topic", Scalar::Str("orders")),
            ("broker_name", Scalar::Str("broker-a")),
            ("queue_id", Scalar::U32(3)),
        ]);
        assert!(snake.is_err(), "snake_case names must not be accepted");

        let extra = from_fields(vec![
            ("topic", Scalar::Str("orders")),
            ("brokerName", Scalar::Str("broker-a")),
            ("queueId", Scalar::U32(3)),
            ("extraField", Scalar::Str("ignored")),
        ])
        .unwrap();
        assert_eq!(extra, MessageQueue::new("orders", "broker-a", 3));
    }

    #[test]
    fn ord_compares_topic_then_broker_then_queue_id() {
        let mut queues = vec![
            MessageQueue::new("b", "a", 0),
            MessageQueue::new("a", "b", 0),
            MessageQueue::new("a", "a", 10),
            MessageQueue::new("a", "a", 2),
        ];
        queues.sort();
        assert_eq!(
            queues,
            vec![
                MessageQueue::new("a", "a", 2),
                MessageQueue::new("a", "a", 10),
                MessageQueue::new("a", "b", 0),
                MessageQueue::new("b", "a", 0),
            ]
        );
    }

    #[test]
    fn display_is_topic_broker_queue_id() {
        assert_eq!(
            MessageQueue::new(retry_topic("g"), "broker-a", 7).to_string(),
            format!("{}:broker-a:7", retry_topic("g"))
        );
    }
}
