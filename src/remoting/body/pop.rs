//! Bodies of pop consumption (`docs/wire-protocol.md` §4.6): BATCH_ACK_MESSAGE,
//! QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE, with Java's JSON names.

use base64::Engine as _;
use serde::de::{Deserializer, Error as _};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{de_i32, de_i64, de_string, JsonBody, MessageModel, MessageQueue, MessageRequestMode};

/// One entry of a BATCH_ACK_MESSAGE body (Java's `BatchAck`): the messages of one pop from one
/// queue, as bits over offsets from `start_offset`. fastjson writes the short names; the long
/// ones are accepted too.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BatchAck {
    #[serde(
        rename = "c",
        alias = "consumerGroup",
        default,
        deserialize_with = "de_string"
    )]
    pub consumer_group: String,
    #[serde(rename = "t", alias = "topic", default, deserialize_with = "de_string")]
    pub topic: String,
    /// The receipt's topic kind: `0` the topic, `1` its pop retry topic.
    #[serde(rename = "r", alias = "retry", default, deserialize_with = "de_string")]
    pub retry: String,
    #[serde(
        rename = "so",
        alias = "startOffset",
        default,
        deserialize_with = "de_i64"
    )]
    pub start_offset: i64,
    #[serde(rename = "q", alias = "queueId", default, deserialize_with = "de_i32")]
    pub queue_id: i32,
    #[serde(
        rename = "rq",
        alias = "reviveQueueId",
        default,
        deserialize_with = "de_i32"
    )]
    pub revive_queue_id: i32,
    #[serde(rename = "pt", alias = "popTime", default, deserialize_with = "de_i64")]
    pub pop_time: i64,
    #[serde(
        rename = "it",
        alias = "invisibleTime",
        default,
        deserialize_with = "de_i64"
    )]
    pub invisible_time: i64,
    /// Java's `BitSet.toByteArray()` (bit `i` is byte `i / 8`, bit `i % 8`), which fastjson
    /// writes as base64; a JSON array of byte values is accepted too.
    #[serde(
        rename = "b",
        alias = "bitSet",
        default,
        serialize_with = "ser_bits",
        deserialize_with = "de_bits"
    )]
    pub bits: Vec<u8>,
}

impl BatchAck {
    /// The acknowledged offsets within `[min, max]`: `start_offset` plus each set bit's index.
    /// Only the bits that can name an offset in that range are looked at, so a huge bit set
    /// from the network costs nothing beyond the queue's own length.
    pub fn offsets_within(&self, min: u64, max: u64) -> Vec<u64> {
        let Ok(start) = u64::try_from(self.start_offset) else {
            return Vec::new();
        };
        if max < start {
            return Vec::new();
        }
        let first_bit = min.saturating_sub(start);
        let last_bit = max - start;
        let mut out = Vec::new();
        let first_byte = usize::try_from(first_bit / 8).unwrap_or(usize::MAX);
        for (byte_index, byte) in self.bits.iter().enumerate().skip(first_byte) {
            if *byte == 0 {
                continue;
            }
            for bit in 0..8u64 {
                let index = byte_index as u64 * 8 + bit;
                if index > last_bit {
                    return out;
                }
                if index >= first_bit && byte & (1 << bit) != 0 {
                    out.push(start + index);
                }
            }
        }
        out
    }

    /// Sets the bit of one offset (`offset >= start_offset`).
    pub fn set(&mut self, offset: i64) {
        let index = usize::try_from(offset - self.start_offset).unwrap_or(0);
        if self.bits.len() <= index / 8 {
            self.bits.resize(index / 8 + 1, 0);
        }
        self.bits[index / 8] |= 1 << (index % 8);
    }
}

fn ser_bits<S: serde::Serializer>(bits: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bits))
}

fn de_bits<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(Vec::new()),
        Value::String(s) => base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .map_err(|e| D::Error::custom(format!("bit set is not base64: {e}"))),
        Value::Array(values) => values
            .iter()
            .map(|v| {
                v.as_i64()
                    .map(|n| n as u8)
                    .ok_or_else(|| D::Error::custom(format!("bit set byte {v} is not a number")))
            })
            .collect(),
        other => Err(D::Error::custom(format!(
            "bit set {other} is neither base64 nor bytes"
        ))),
    }
}

/// BATCH_ACK_MESSAGE body (Java's `BatchAckMessageRequestBody`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchAckBody {
    #[serde(default, deserialize_with = "de_string")]
    pub broker_name: String,
    #[serde(default, deserialize_with = "super::de_null_default")]
    pub acks: Vec<BatchAck>,
}

impl JsonBody for BatchAckBody {
    const KIND: &'static str = "BatchAckMessageRequestBody";
}

/// QUERY_ASSIGNMENT request body (Java's `QueryAssignmentRequestBody`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryAssignmentBody {
    #[serde(default, deserialize_with = "de_string")]
    pub topic: String,
    #[serde(default, deserialize_with = "de_string")]
    pub consumer_group: String,
    #[serde(default, deserialize_with = "de_string")]
    pub client_id: String,
    #[serde(default, deserialize_with = "de_string")]
    pub strategy_name: String,
    #[serde(default)]
    pub message_model: MessageModel,
}

impl JsonBody for QueryAssignmentBody {
    const KIND: &'static str = "QueryAssignmentRequestBody";
}

/// One `MessageQueueAssignment`: a queue (queue id -1 for "every queue") and how to read it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueAssignment {
    pub message_queue: MessageQueue,
    #[serde(default)]
    pub mode: MessageRequestMode,
}

/// QUERY_ASSIGNMENT response body; `None` assignments are Java's "no assignment" (the field is
/// left out, and the client falls back to its own rebalance for that round).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryAssignmentResponseBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_queue_assignments: Option<Vec<QueueAssignment>>,
}

impl JsonBody for QueryAssignmentResponseBody {
    const KIND: &'static str = "QueryAssignmentResponseBody";
}

/// SET_MESSAGE_REQUEST_MODE body (Java's `SetMessageRequestModeRequestBody`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetMessageRequestModeBody {
    #[serde(default, deserialize_with = "de_string")]
    pub topic: String,
    #[serde(default, deserialize_with = "de_string")]
    pub consumer_group: String,
    #[serde(default)]
    pub mode: MessageRequestMode,
    #[serde(default, deserialize_with = "de_i32")]
    pub pop_share_queue_num: i32,
}

impl JsonBody for SetMessageRequestModeBody {
    const KIND: &'static str = "SetMessageRequestModeRequestBody";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fastjson_batch_ack_decodes_its_bit_set_from_base64() {
        // Offsets 3, 4 and 12 past start 10: bits 0b0001_1000 and 0b0001_0000.
        let java = r#"{"acks":[{"b":"GBA=","c":"g","it":60000,"pt":1700000000000,"q":2,"r":"0","rq":5,"so":3,"t":"t"}],"brokerName":"broker-a"}"#;
        let body = BatchAckBody::decode(java.as_bytes()).unwrap();
        assert_eq!(body.broker_name, "broker-a");
        let ack = &body.acks[0];
        assert_eq!(
            (ack.queue_id, ack.revive_queue_id, ack.start_offset),
            (2, 5, 3)
        );
        assert_eq!(ack.offsets_within(0, 100), vec![6, 7, 15]);
        assert_eq!(ack.offsets_within(7, 14), vec![7]);
        assert_eq!(ack.offsets_within(0, 2), Vec::<u64>::new());
        let again = BatchAckBody::decode(&body.encode()).unwrap();
        assert_eq!(again, body);
        let mut built = BatchAck {
            start_offset: 3,
            ..BatchAck::default()
        };
        for offset in [6, 7, 15] {
            built.set(offset);
        }
        assert_eq!(built.bits, ack.bits);
        let as_bytes = r#"{"acks":[{"consumerGroup":"g","startOffset":0,"bitSet":[1,1]}]}"#;
        assert_eq!(
            BatchAckBody::decode(as_bytes.as_bytes()).unwrap().acks[0].offsets_within(0, 8),
            vec![0, 8]
        );
    }

    #[test]
    fn assignments_and_request_modes_use_java_names() {
        let mode = SetMessageRequestModeBody::decode(
            br#"{"consumerGroup":"g","mode":"POP","popShareQueueNum":0,"topic":"t"}"#,
        )
        .unwrap();
        assert_eq!(mode.mode, MessageRequestMode::Pop);
        let query = QueryAssignmentBody::decode(
            br#"{"clientId":"c1","consumerGroup":"g","messageModel":"CLUSTERING","strategyName":"AVG","topic":"t"}"#,
        )
        .unwrap();
        assert_eq!(query.strategy_name, "AVG");
        let answer = QueryAssignmentResponseBody {
            message_queue_assignments: Some(vec![QueueAssignment {
                message_queue: MessageQueue {
                    topic: "t".into(),
                    broker_name: "b".into(),
                    queue_id: -1,
                },
                mode: MessageRequestMode::Pop,
            }]),
        };
        let json = String::from_utf8(answer.encode()).unwrap();
        assert_eq!(
            json,
            r#"{"messageQueueAssignments":[{"messageQueue":{"topic":"t","brokerName":"b","queueId":-1},"mode":"POP"}]}"#
        );
        assert_eq!(
            QueryAssignmentResponseBody::default().encode(),
            b"{}".to_vec()
        );
    }
}
