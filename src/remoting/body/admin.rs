//! Bodies of the admin requests. GET_CONSUME_STATS (208), INVOKE_BROKER_TO_RESET_OFFSET (222)
//! and GET_TOPIC_STATS_INFO (202) answer maps keyed by `MessageQueue`, which fastjson writes as
//! JSON objects in key position (`{{"brokerName":"b","queueId":0,"topic":"T"}:...}`). That is
//! not standard JSON, so encoding writes the form by hand and decoding first rewrites such keys
//! into strings (`object_keys_to_strings`). The others (connections, topic and group configs,
//! runtime info) are plain JSON objects with Java's field names.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    decode_json, skip_string, BodyError, ConsumeFromWhere, ConsumeType, JsonBody, MessageModel,
    MessageQueue, SubscriptionData,
};

/// One queue of [`ConsumeStats`] (`OffsetWrapper`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OffsetWrapper {
    #[serde(default)]
    pub broker_offset: i64,
    #[serde(default)]
    pub consumer_offset: i64,
    #[serde(default)]
    pub pull_offset: i64,
    /// Store time of the last consumed message (0 when none).
    #[serde(default)]
    pub last_timestamp: i64,
}

/// GET_CONSUME_STATS (208) response body (`ConsumeStats`).
///
/// Encoded as a Java broker's fastjson does: the `offsetTable` keys are MessageQueue JSON
/// objects (`{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}`, not standard JSON). Decoding
/// accepts those and keys that are strings holding the MessageQueue JSON.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConsumeStats {
    pub offset_table: BTreeMap<MessageQueue, OffsetWrapper>,
    pub consume_tps: f64,
}

impl ConsumeStats {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = String::from("{\"consumeTps\":");
        out.push_str(&json_f64(self.consume_tps));
        out.push_str(",\"offsetTable\":");
        write_mq_map(&mut out, &self.offset_table, |w| {
            serde_json::to_string(w).unwrap_or_else(|_| "{}".to_owned())
        });
        out.push('}');
        out.into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, BodyError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Raw {
            #[serde(default)]
            offset_table: BTreeMap<String, OffsetWrapper>,
            #[serde(default)]
            consume_tps: Option<f64>,
        }
        let raw: Raw = decode_mq_keyed(bytes, "ConsumeStats")?;
        Ok(ConsumeStats {
            offset_table: mq_keys(raw.offset_table, "ConsumeStats")?,
            consume_tps: raw.consume_tps.unwrap_or(0.0),
        })
    }
}

/// INVOKE_BROKER_TO_RESET_OFFSET (222) response body (`ResetOffsetBody`): the offset each queue
/// was reset to. Same key encoding as [`ConsumeStats`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResetOffsetBody {
    pub offset_table: BTreeMap<MessageQueue, i64>,
}

impl ResetOffsetBody {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = String::from("{\"offsetTable\":");
        write_mq_map(&mut out, &self.offset_table, |o| o.to_string());
        out.push('}');
        out.into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, BodyError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Raw {
            #[serde(default)]
            offset_table: BTreeMap<String, i64>,
        }
        let raw: Raw = decode_mq_keyed(bytes, "ResetOffsetBody")?;
        Ok(ResetOffsetBody {
            offset_table: mq_keys(raw.offset_table, "ResetOffsetBody")?,
        })
    }
}

/// One queue of [`TopicStatsTable`] (`TopicOffset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicOffset {
    #[serde(default)]
    pub min_offset: i64,
    #[serde(default)]
    pub max_offset: i64,
    /// Store time of the queue's newest message (0 when the queue is empty).
    #[serde(default)]
    pub last_update_timestamp: i64,
}

/// GET_TOPIC_STATS_INFO (202) response body (`TopicStatsTable`). Same key encoding as
/// [`ConsumeStats`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopicStatsTable {
    pub offset_table: BTreeMap<MessageQueue, TopicOffset>,
    pub topic_put_tps: f64,
}

impl TopicStatsTable {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = String::from("{\"offsetTable\":");
        write_mq_map(&mut out, &self.offset_table, |o| {
            serde_json::to_string(o).unwrap_or_else(|_| "{}".to_owned())
        });
        out.push_str(",\"topicPutTps\":");
        out.push_str(&json_f64(self.topic_put_tps));
        out.push('}');
        out.into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, BodyError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Raw {
            #[serde(default)]
            offset_table: BTreeMap<String, TopicOffset>,
            #[serde(default)]
            topic_put_tps: Option<f64>,
        }
        let raw: Raw = decode_mq_keyed(bytes, "TopicStatsTable")?;
        Ok(TopicStatsTable {
            offset_table: mq_keys(raw.offset_table, "TopicStatsTable")?,
            topic_put_tps: raw.topic_put_tps.unwrap_or(0.0),
        })
    }
}

/// One client connection (`Connection`) of [`ConsumerConnection`] and [`ProducerConnection`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Connection {
    #[serde(default)]
    pub client_id: String,
    /// `host:port` of the client's end of the connection.
    #[serde(default)]
    pub client_addr: String,
    /// `LanguageCode` name.
    #[serde(default)]
    pub language: String,
    /// `MQVersion.Version` ordinal.
    #[serde(default)]
    pub version: i32,
}

/// GET_CONSUMER_CONNECTION_LIST (203) response body (`ConsumerConnection`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerConnection {
    #[serde(default)]
    pub connection_set: Vec<Connection>,
    #[serde(default)]
    pub subscription_table: BTreeMap<String, SubscriptionData>,
    #[serde(default)]
    pub consume_type: ConsumeType,
    #[serde(default)]
    pub message_model: MessageModel,
    #[serde(default)]
    pub consume_from_where: ConsumeFromWhere,
}

impl JsonBody for ConsumerConnection {
    const KIND: &'static str = "ConsumerConnection";
}

/// GET_PRODUCER_CONNECTION_LIST (204) response body (`ProducerConnection`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProducerConnection {
    #[serde(default)]
    pub connection_set: Vec<Connection>,
}

impl JsonBody for ProducerConnection {
    const KIND: &'static str = "ProducerConnection";
}

/// GET_BROKER_RUNTIME_INFO (28) response body (`KVTable`): every value a string.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KvTable {
    #[serde(default)]
    pub table: BTreeMap<String, String>,
}

impl JsonBody for KvTable {
    const KIND: &'static str = "KVTable";
}

/// QUERY_TOPIC_CONSUME_BY_WHO (300) response body (`GroupList`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupList {
    #[serde(default)]
    pub group_list: Vec<String>,
}

impl JsonBody for GroupList {
    const KIND: &'static str = "GroupList";
}

/// `DataVersion` of the config wrappers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataVersion {
    #[serde(default)]
    pub state_version: i64,
    #[serde(default)]
    pub timestamp: i64,
    #[serde(default)]
    pub counter: i64,
}

/// A topic's configuration as Java's `TopicConfig` serialises it (GET_TOPIC_CONFIG 351 body,
/// and the values of GET_ALL_TOPIC_CONFIG 21).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicConfigBody {
    #[serde(default)]
    pub topic_name: String,
    #[serde(default)]
    pub read_queue_nums: i32,
    #[serde(default)]
    pub write_queue_nums: i32,
    #[serde(default)]
    pub perm: i32,
    #[serde(default = "single_tag")]
    pub topic_filter_type: String,
    #[serde(default)]
    pub topic_sys_flag: i32,
    #[serde(default)]
    pub order: bool,
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
}

fn single_tag() -> String {
    "SINGLE_TAG".to_owned()
}

impl JsonBody for TopicConfigBody {
    const KIND: &'static str = "TopicConfig";
}

/// GET_ALL_TOPIC_CONFIG (21) response body (`TopicConfigAndMappingSerializeWrapper`; skiff has
/// no static topics, so the mapping tables are empty).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicConfigWrapper {
    #[serde(default)]
    pub topic_config_table: BTreeMap<String, TopicConfigBody>,
    #[serde(default)]
    pub data_version: DataVersion,
    #[serde(default)]
    pub topic_queue_mapping_info_map: BTreeMap<String, Value>,
    #[serde(default)]
    pub topic_queue_mapping_detail_map: BTreeMap<String, Value>,
}

impl JsonBody for TopicConfigWrapper {
    const KIND: &'static str = "TopicConfigAndMappingSerializeWrapper";
}

/// A subscription group's configuration as Java's `SubscriptionGroupConfig` serialises it
/// (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP 200 request body, values of 201). Absent fields take
/// Java's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubscriptionGroupBody {
    pub group_name: String,
    pub consume_enable: bool,
    pub consume_from_min_enable: bool,
    pub consume_broadcast_enable: bool,
    pub consume_message_orderly: bool,
    pub retry_queue_nums: i32,
    pub retry_max_times: i32,
    pub broker_id: i64,
    pub which_broker_when_consume_slowly: i64,
    pub notify_consumer_ids_changed_enable: bool,
    pub group_sys_flag: i32,
    pub consume_timeout_minute: i32,
    pub attributes: BTreeMap<String, String>,
}

impl Default for SubscriptionGroupBody {
    fn default() -> Self {
        SubscriptionGroupBody {
            group_name: String::new(),
            consume_enable: true,
            consume_from_min_enable: true,
            consume_broadcast_enable: true,
            consume_message_orderly: false,
            retry_queue_nums: 1,
            retry_max_times: 16,
            broker_id: 0,
            which_broker_when_consume_slowly: 1,
            notify_consumer_ids_changed_enable: true,
            group_sys_flag: 0,
            consume_timeout_minute: 15,
            attributes: BTreeMap::new(),
        }
    }
}

impl JsonBody for SubscriptionGroupBody {
    const KIND: &'static str = "SubscriptionGroupConfig";
}

/// GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) response body (`SubscriptionGroupWrapper`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionGroupWrapper {
    #[serde(default)]
    pub subscription_group_table: BTreeMap<String, SubscriptionGroupBody>,
    #[serde(default)]
    pub forbidden_table: BTreeMap<String, Value>,
    #[serde(default)]
    pub data_version: DataVersion,
}

impl JsonBody for SubscriptionGroupWrapper {
    const KIND: &'static str = "SubscriptionGroupWrapper";
}

fn json_f64(v: f64) -> String {
    if v.is_finite() {
        let s = v.to_string();
        if s.contains('.') || s.contains('e') {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        "0.0".to_owned()
    }
}

/// fastjson's `MessageQueue` key: fields sorted by name.
fn mq_key(mq: &MessageQueue) -> String {
    serde_json::json!({
        "brokerName": mq.broker_name,
        "queueId": mq.queue_id,
        "topic": mq.topic,
    })
    .to_string()
}

fn write_mq_map<V>(
    out: &mut String,
    map: &BTreeMap<MessageQueue, V>,
    value: impl Fn(&V) -> String,
) {
    out.push('{');
    for (i, (mq, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{}:{}", mq_key(mq), value(v));
    }
    out.push('}');
}

fn decode_mq_keyed<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    kind: &'static str,
) -> Result<T, BodyError> {
    let text = std::str::from_utf8(bytes).map_err(|source| BodyError::Utf8 { kind, source })?;
    let text = object_keys_to_strings(text);
    decode_json(text.as_bytes(), kind)
}

fn mq_keys<V>(
    map: BTreeMap<String, V>,
    kind: &'static str,
) -> Result<BTreeMap<MessageQueue, V>, BodyError> {
    map.into_iter()
        .map(|(k, v)| {
            MessageQueue::decode(k.as_bytes())
                .map(|mq| (mq, v))
                .map_err(|e| match e {
                    BodyError::Json { source, .. } => BodyError::Json { kind, source },
                    other => other,
                })
        })
        .collect()
}

/// Rewrites object-valued map keys (fastjson's encoding of non-string keys, e.g.
/// `{{"topic":"T"}:1}`) into JSON strings holding the object (`{"{\"topic\":\"T\"}":1}`).
/// Everything else is left as is; text without such keys is returned borrowed.
fn object_keys_to_strings(input: &str) -> Cow<'_, str> {
    #[derive(Clone, Copy)]
    enum Frame {
        /// An object; true while a key is expected.
        Object(bool),
        Array,
    }
    let b = input.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0usize;
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0usize;
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' => {
                i = skip_string(b, i);
                continue;
            }
            b'{' => {
                if let Some(Frame::Object(true)) = stack.last() {
                    let end = matching_brace(b, i);
                    let key = &input[i..end];
                    let out = out.get_or_insert_with(|| String::with_capacity(input.len() + 16));
                    out.push_str(&input[copied..i]);
                    out.push_str(&Value::String(key.to_owned()).to_string());
                    copied = end;
                    i = end;
                    continue;
                }
                stack.push(Frame::Object(true));
            }
            b'[' => stack.push(Frame::Array),
            b'}' | b']' => {
                stack.pop();
            }
            b':' => {
                if let Some(Frame::Object(expect_key)) = stack.last_mut() {
                    *expect_key = false;
                }
            }
            b',' => {
                if let Some(Frame::Object(expect_key)) = stack.last_mut() {
                    *expect_key = true;
                }
            }
            _ => {}
        }
        i += 1;
    }
    match out {
        Some(mut out) => {
            out.push_str(&input[copied..]);
            Cow::Owned(out)
        }
        None => Cow::Borrowed(input),
    }
}

/// Index just past the `}` matching the `{` at `start`, or the end.
fn matching_brace(b: &[u8], start: usize) -> usize {
    let mut depth = 0usize;
    let mut i = start;
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' => {
                i = skip_string(b, i);
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mq(topic: &str, queue_id: i32) -> MessageQueue {
        MessageQueue {
            topic: topic.to_owned(),
            broker_name: "skiff".to_owned(),
            queue_id,
        }
    }

    #[test]
    fn consume_stats_use_fastjson_object_keys_and_decode_both_forms() -> Result<(), BodyError> {
        let mut stats = ConsumeStats::default();
        stats.offset_table.insert(
            mq("T", 0),
            OffsetWrapper {
                broker_offset: 10,
                consumer_offset: 4,
                pull_offset: 4,
                last_timestamp: 1_700_000_000_000,
            },
        );
        stats
            .offset_table
            .insert(mq("T", 1), OffsetWrapper::default());
        let encoded = String::from_utf8(stats.encode()).unwrap_or_default();
        assert!(
            encoded.starts_with(
                r#"{"consumeTps":0.0,"offsetTable":{{"brokerName":"skiff","queueId":0,"topic":"T"}:{"brokerOffset":10,"#
            ),
            "{encoded}"
        );
        assert_eq!(ConsumeStats::decode(encoded.as_bytes())?, stats);
        let string_keys = r#"{"offsetTable":{"{\"topic\":\"T\",\"brokerName\":\"skiff\",\"queueId\":1}":{"brokerOffset":3}},"consumeTps":1.5}"#;
        let decoded = ConsumeStats::decode(string_keys.as_bytes())?;
        assert_eq!(decoded.consume_tps, 1.5);
        assert_eq!(
            decoded
                .offset_table
                .get(&mq("T", 1))
                .map(|w| w.broker_offset),
            Some(3)
        );
        Ok(())
    }

    #[test]
    fn reset_offset_body_round_trips() -> Result<(), BodyError> {
        let body = ResetOffsetBody {
            offset_table: BTreeMap::from([(mq("T", 0), 5), (mq("T", 1), 0)]),
        };
        let encoded = body.encode();
        assert_eq!(ResetOffsetBody::decode(&encoded)?, body);
        assert!(ResetOffsetBody::decode(b"{\"offsetTable\":{{\"topic\":").is_err());
        Ok(())
    }

    #[test]
    fn object_key_rewrite_leaves_other_json_alone() {
        let plain = r#"{"a":{"b":[{"c":"{x}"}]}}"#;
        assert!(matches!(object_keys_to_strings(plain), Cow::Borrowed(_)));
        assert_eq!(
            object_keys_to_strings(r#"{"m":{{"k":"}"}:1,{"k":2}:[{}]}}"#),
            r#"{"m":{"{\"k\":\"}\"}":1,"{\"k\":2}":[{}]}}"#
        );
    }
}
