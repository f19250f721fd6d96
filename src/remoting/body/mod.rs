//! Request and response bodies (`docs/wire-protocol.md` §5, §3.8, §3.9).
//!
//! * This module: the JSON bodies (route data, heartbeat, consumer list, lock bodies, message
//!   queue) and the lenient decoding they share.
//! * [`batch`]: the binary SEND_BATCH_MESSAGE body.
//! * [`pop`]: the bodies of pop consumption (batch acks, queue assignments, request modes).
//! * [`admin`]: the admin bodies keyed by `MessageQueue` objects (consume stats, reset offsets).
//! * `fastjson`: the lenient reading of fastjson's JSON that every JSON body goes through.
//! * `java_enum`: the Java enums bodies carry by name or ordinal.
//!
//! JSON decoding is lenient like fastjson: bodies pass through [`normalize_fastjson`] (unquoted
//! object keys such as `{0:"127.0.0.1:10911"}` and single-quoted strings become standard JSON),
//! missing fields and nulls take Java's defaults, numbers may arrive as strings, booleans as
//! strings or numbers, enums as names or ordinals, and unknown fields are ignored.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod admin;
pub mod batch;
mod fastjson;
mod java_enum;
pub mod lite;
pub mod pop;

use fastjson::{
    de_bool, de_broker_addrs, de_i32, de_i32_vec, de_i64, de_null_default, de_opt_string,
    de_string, de_string_vec, skip_string, value_to_string,
};
pub use fastjson::{decode_json, normalize_fastjson};
pub use java_enum::{ConsumeFromWhere, ConsumeType, MessageModel, MessageRequestMode};

pub use admin::{
    Connection, ConsumeStats, ConsumerConnection, DataVersion, GroupList, KvTable, OffsetWrapper,
    ProducerConnection, ResetOffsetBody, SubscriptionGroupBody, SubscriptionGroupWrapper,
    TopicConfigBody, TopicConfigWrapper, TopicOffset, TopicStatsTable,
};
pub use batch::{decode_batch, encode_batch, BatchEntry, BatchError, BatchMessage};
pub use pop::{
    BatchAck, BatchAckBody, QueryAssignmentBody, QueryAssignmentResponseBody, QueueAssignment,
    SetMessageRequestModeBody,
};

/// A body that cannot be decoded.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("{kind} body is not valid utf-8")]
    Utf8 {
        kind: &'static str,
        #[source]
        source: std::str::Utf8Error,
    },
    #[error("invalid {kind} body")]
    Json {
        kind: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// A JSON body type.
pub trait JsonBody: Serialize + DeserializeOwned {
    /// Name used in errors.
    const KIND: &'static str;

    /// Decodes leniently (see the module docs).
    fn decode(bytes: &[u8]) -> Result<Self, BodyError> {
        decode_json(bytes, Self::KIND)
    }

    /// Encodes as standard JSON.
    fn encode(&self) -> Vec<u8> {
        // Serializing these plain structs (string keys or integer map keys) cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

// ---- message queue -----------------------------------------------------------------------

/// `MessageQueue` (§5.3).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageQueue {
    #[serde(default, deserialize_with = "de_string")]
    pub topic: String,
    #[serde(default, deserialize_with = "de_string")]
    pub broker_name: String,
    #[serde(default, deserialize_with = "de_i32")]
    pub queue_id: i32,
}

impl JsonBody for MessageQueue {
    const KIND: &'static str = "MessageQueue";
}

fn de_mq_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<MessageQueue>, D::Error> {
    de_null_default(d)
}

// ---- route data ----------------------------------------------------------------------------

/// `QueueData` of a route.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueData {
    #[serde(default, deserialize_with = "de_string")]
    pub broker_name: String,
    #[serde(default, deserialize_with = "de_i32")]
    pub read_queue_nums: i32,
    #[serde(default, deserialize_with = "de_i32")]
    pub write_queue_nums: i32,
    /// PermName bits: inherit 1, write 2, read 4, priority 8.
    #[serde(default, deserialize_with = "de_i32")]
    pub perm: i32,
    #[serde(default, deserialize_with = "de_i32")]
    pub topic_sys_flag: i32,
}

/// `BrokerData` of a route.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerData {
    #[serde(default, deserialize_with = "de_string")]
    pub cluster: String,
    #[serde(default, deserialize_with = "de_string")]
    pub broker_name: String,
    /// brokerId → "ip:port"; 0 is the master.
    #[serde(default, deserialize_with = "de_broker_addrs")]
    pub broker_addrs: BTreeMap<i64, String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de_opt_string"
    )]
    pub zone_name: Option<String>,
    #[serde(default, deserialize_with = "de_bool")]
    pub enable_acting_master: bool,
}

/// `TopicRouteData` (§5.1), answered by GET_ROUTEINFO_BY_TOPIC.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicRouteData {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de_opt_string"
    )]
    pub order_topic_conf: Option<String>,
    #[serde(default, deserialize_with = "de_null_default")]
    pub queue_datas: Vec<QueueData>,
    #[serde(default, deserialize_with = "de_null_default")]
    pub broker_datas: Vec<BrokerData>,
    #[serde(default, deserialize_with = "de_null_default")]
    pub filter_server_table: BTreeMap<String, Vec<String>>,
    /// Static-topic mappings, kept as raw JSON (rocketmq-rust names it `topicQueueMappingInfo`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "topicQueueMappingInfo"
    )]
    pub topic_queue_mapping_by_broker: Option<Value>,
}

impl JsonBody for TopicRouteData {
    const KIND: &'static str = "TopicRouteData";
}

impl TopicRouteData {
    /// Encodes for a GET_ROUTEINFO_BY_TOPIC answer: standard JSON (quoted `brokerAddrs` keys)
    /// when `standard` (request version >= 401 or `acceptStandardJsonOnly`, see
    /// `GetRouteInfoRequestHeader::wants_standard_json`), else fastjson's default form with
    /// unquoted numeric `brokerAddrs` keys, as older clients get from a Java name server.
    pub fn encode_route(&self, standard: bool) -> Vec<u8> {
        if standard {
            self.encode()
        } else {
            self.encode_legacy().into_bytes()
        }
    }

    fn encode_legacy(&self) -> String {
        let mut out = String::from("{\"brokerDatas\":[");
        for (i, bd) in self.broker_datas.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"brokerAddrs\":{");
            for (j, (id, addr)) in bd.broker_addrs.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{id}:{}", json_string(addr));
            }
            out.push('}');
            if let Ok(Value::Object(rest)) = serde_json::to_value(bd) {
                for (k, v) in rest.iter().filter(|(k, _)| k.as_str() != "brokerAddrs") {
                    let _ = write!(out, ",{}:{v}", json_string(k));
                }
            }
            out.push('}');
        }
        out.push(']');
        if let Ok(Value::Object(rest)) = serde_json::to_value(self) {
            for (k, v) in rest.iter().filter(|(k, _)| k.as_str() != "brokerDatas") {
                let _ = write!(out, ",{}:{v}", json_string(k));
            }
        }
        out.push('}');
        out
    }

    /// Address of the master (broker id 0) of the first broker data, as clients pick it.
    pub fn master_addr(&self) -> Option<&str> {
        self.broker_datas
            .iter()
            .find_map(|bd| bd.broker_addrs.get(&0))
            .map(String::as_str)
    }
}

fn json_string(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

// ---- heartbeat ----------------------------------------------------------------------------

// Not `skiff_storage::clock`: the fuzz crate compiles `body` on its own, without the storage crate.
fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn tag() -> String {
    "TAG".to_owned()
}

fn de_expression_type<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(value_to_string(Value::deserialize(d)?)
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(tag))
}

/// `SubscriptionData` of a consumer (§5.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionData {
    #[serde(default, deserialize_with = "de_bool")]
    pub class_filter_mode: bool,
    #[serde(default, deserialize_with = "de_string")]
    pub topic: String,
    /// `"*"` or empty = all tags.
    #[serde(default, deserialize_with = "de_string")]
    pub sub_string: String,
    #[serde(default, deserialize_with = "de_string_vec")]
    pub tags_set: Vec<String>,
    #[serde(default, deserialize_with = "de_i32_vec")]
    pub code_set: Vec<i32>,
    /// Number or numeric string; when absent Java's constructor default (now, in ms) applies.
    #[serde(default = "now_millis", deserialize_with = "de_i64")]
    pub sub_version: i64,
    /// Defaults to `"TAG"` when absent, null or empty.
    #[serde(default = "tag", deserialize_with = "de_expression_type")]
    pub expression_type: String,
}

impl Default for SubscriptionData {
    fn default() -> Self {
        SubscriptionData {
            class_filter_mode: false,
            topic: String::new(),
            sub_string: "*".to_owned(),
            tags_set: Vec::new(),
            code_set: Vec::new(),
            sub_version: now_millis(),
            expression_type: tag(),
        }
    }
}

/// `ConsumerData` of a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerData {
    #[serde(default, deserialize_with = "de_string")]
    pub group_name: String,
    #[serde(default)]
    pub consume_type: ConsumeType,
    #[serde(default)]
    pub message_model: MessageModel,
    #[serde(default)]
    pub consume_from_where: ConsumeFromWhere,
    #[serde(default, deserialize_with = "de_null_default")]
    pub subscription_data_set: Vec<SubscriptionData>,
    #[serde(default, deserialize_with = "de_bool")]
    pub unit_mode: bool,
}

/// `ProducerData` of a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProducerData {
    #[serde(default, deserialize_with = "de_string")]
    pub group_name: String,
}

/// HEART_BEAT (34) body (§5.2).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatData {
    #[serde(
        rename = "clientID",
        alias = "clientId",
        default,
        deserialize_with = "de_string"
    )]
    pub client_id: String,
    #[serde(default, deserialize_with = "de_null_default")]
    pub producer_data_set: Vec<ProducerData>,
    #[serde(default, deserialize_with = "de_null_default")]
    pub consumer_data_set: Vec<ConsumerData>,
    /// 5.x; non-zero selects the heartbeat V2 path.
    #[serde(default, deserialize_with = "de_i32")]
    pub heartbeat_fingerprint: i32,
    /// 5.x; subscriptions omitted because unchanged.
    #[serde(default, alias = "isWithoutSub", deserialize_with = "de_bool")]
    pub without_sub: bool,
}

impl JsonBody for HeartbeatData {
    const KIND: &'static str = "HeartbeatData";
}

// ---- small bodies --------------------------------------------------------------------------

/// GET_CONSUMER_LIST_BY_GROUP (38) response body (§3.8).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerListBody {
    #[serde(default, deserialize_with = "de_string_vec")]
    pub consumer_id_list: Vec<String>,
}

impl JsonBody for ConsumerListBody {
    const KIND: &'static str = "GetConsumerListByGroupResponseBody";
}

/// LOCK_BATCH_MQ (41) request body (§3.9).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LockBatchRequestBody {
    #[serde(default, deserialize_with = "de_string")]
    pub consumer_group: String,
    #[serde(default, deserialize_with = "de_string")]
    pub client_id: String,
    #[serde(default, deserialize_with = "de_bool")]
    pub only_this_broker: bool,
    #[serde(default, deserialize_with = "de_mq_vec")]
    pub mq_set: Vec<MessageQueue>,
}

impl JsonBody for LockBatchRequestBody {
    const KIND: &'static str = "LockBatchRequestBody";
}

/// UNLOCK_BATCH_MQ (42) request body (§3.9).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnlockBatchRequestBody {
    #[serde(default, deserialize_with = "de_string")]
    pub consumer_group: String,
    #[serde(default, deserialize_with = "de_string")]
    pub client_id: String,
    #[serde(default, deserialize_with = "de_bool")]
    pub only_this_broker: bool,
    #[serde(default, deserialize_with = "de_mq_vec")]
    pub mq_set: Vec<MessageQueue>,
}

impl JsonBody for UnlockBatchRequestBody {
    const KIND: &'static str = "UnlockBatchRequestBody";
}

/// LOCK_BATCH_MQ response body (§3.9).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LockBatchResponseBody {
    #[serde(rename = "lockOKMQSet", default, deserialize_with = "de_mq_vec")]
    pub lock_ok_mq_set: Vec<MessageQueue>,
}

impl JsonBody for LockBatchResponseBody {
    const KIND: &'static str = "LockBatchResponseBody";
}

#[cfg(test)]
mod tests {
    use super::*;

    const JAVA_ROUTE_LEGACY: &str = r#"{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#;

    #[test]
    fn route_decodes_java_legacy_and_standard_forms() {
        let legacy = TopicRouteData::decode(JAVA_ROUTE_LEGACY.as_bytes()).unwrap();
        assert_eq!(legacy.master_addr(), Some("127.0.0.1:10911"));
        assert_eq!(legacy.queue_datas[0].perm, 6);
        assert_eq!(legacy.queue_datas[0].write_queue_nums, 4);
        let standard = JAVA_ROUTE_LEGACY.replace("{0:", "{\"0\":");
        assert_eq!(TopicRouteData::decode(standard.as_bytes()).unwrap(), legacy);
        // rocketmq-rust form: explicit nulls, topicQueueMappingInfo, numbers as strings.
        let rust = r#"{"orderTopicConf":null,"queueDatas":[{"brokerName":"broker-a","readQueueNums":"4","writeQueueNums":4,"perm":6,"topicSysFlag":0}],"brokerDatas":[{"cluster":"DefaultCluster","brokerName":"broker-a","brokerAddrs":{"0":"127.0.0.1:10911"},"zoneName":null,"enableActingMaster":false}],"filterServerTable":null,"topicQueueMappingInfo":null,"extra":1}"#;
        assert_eq!(TopicRouteData::decode(rust.as_bytes()).unwrap(), legacy);
    }

    #[test]
    fn route_encodes_both_forms() {
        let route = TopicRouteData::decode(JAVA_ROUTE_LEGACY.as_bytes()).unwrap();
        let standard = String::from_utf8(route.encode_route(true)).unwrap();
        assert!(
            standard.contains(r#""brokerAddrs":{"0":"127.0.0.1:10911"}"#),
            "{standard}"
        );
        assert!(!standard.contains("orderTopicConf"));
        serde_json::from_str::<Value>(&standard).unwrap();
        let legacy = String::from_utf8(route.encode_route(false)).unwrap();
        assert!(
            legacy.contains(r#""brokerAddrs":{0:"127.0.0.1:10911"}"#),
            "{legacy}"
        );
        assert!(serde_json::from_str::<Value>(&legacy).is_err());
        assert_eq!(TopicRouteData::decode(legacy.as_bytes()).unwrap(), route);
        assert_eq!(TopicRouteData::decode(standard.as_bytes()).unwrap(), route);
    }

    #[test]
    fn heartbeat_java_form() {
        let java = r#"{"clientID":"192.168.0.2@12345#123456789","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"cg","messageModel":"CLUSTERING","subscriptionDataSet":[{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*","subVersion":1700000000000,"tagsSet":[],"topic":"TopicTest"},{"classFilterMode":false,"codeSet":[2598919],"expressionType":"TAG","subString":"TagA","subVersion":1700000000001,"tagsSet":["TagA"],"topic":"TopicTagged"}],"unitMode":false}],"heartbeatFingerprint":0,"producerDataSet":[{"groupName":"pg"}],"withoutSub":false}"#;
        let hb = HeartbeatData::decode(java.as_bytes()).unwrap();
        assert_eq!(hb.client_id, "192.168.0.2@12345#123456789");
        assert_eq!(hb.producer_data_set[0].group_name, "pg");
        let c = &hb.consumer_data_set[0];
        assert_eq!(c.consume_type, ConsumeType::ConsumePassively);
        assert_eq!(c.message_model, MessageModel::Clustering);
        assert_eq!(
            c.consume_from_where,
            ConsumeFromWhere::ConsumeFromLastOffset
        );
        assert_eq!(c.subscription_data_set[1].code_set, vec![2598919]);
        assert_eq!(c.subscription_data_set[1].sub_version, 1_700_000_000_001);
        let again = HeartbeatData::decode(&hb.encode()).unwrap();
        assert_eq!(again, hb);
        let text = String::from_utf8(hb.encode()).unwrap();
        assert!(
            text.contains(r#""clientID":"#)
                && text.contains(r#""consumeType":"CONSUME_PASSIVELY""#)
        );
    }

    #[test]
    fn heartbeat_cpp_form_with_ordinals_and_string_sub_version() {
        let cpp = r#"{"clientID":"10.0.0.1@9876","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,"groupName":"cg","messageModel":1,"subscriptionDataSet":[{"classFilterMode":false,"codeSet":[],"subString":"*","subVersion":"1700000000000","tagsSet":[],"topic":"T"}],"unitMode":"false"}],"producerDataSet":[]}"#;
        let hb = HeartbeatData::decode(cpp.as_bytes()).unwrap();
        let c = &hb.consumer_data_set[0];
        assert_eq!(c.consume_type, ConsumeType::ConsumePassively);
        assert_eq!(c.message_model, MessageModel::Clustering);
        assert_eq!(
            c.consume_from_where,
            ConsumeFromWhere::ConsumeFromLastOffset
        );
        let s = &c.subscription_data_set[0];
        assert_eq!(s.sub_version, 1_700_000_000_000);
        assert_eq!(s.expression_type, "TAG");
        assert_eq!(hb.heartbeat_fingerprint, 0);
        assert!(!hb.without_sub);
    }

    #[test]
    fn heartbeat_enum_ordinals_and_bad_values() {
        assert_eq!(
            MessageModel::from_ordinal(0),
            Some(MessageModel::Broadcasting)
        );
        assert_eq!(
            ConsumeFromWhere::from_ordinal(5),
            Some(ConsumeFromWhere::ConsumeFromTimestamp)
        );
        assert_eq!(ConsumeFromWhere::ConsumeFromFirstOffset.ordinal(), 4);
        assert_eq!(
            ConsumeType::from_name("consume_pop"),
            Some(ConsumeType::ConsumePop)
        );
        let bad = r#"{"consumerDataSet":[{"consumeType":"SOMETIMES"}]}"#;
        assert!(matches!(
            HeartbeatData::decode(bad.as_bytes()),
            Err(BodyError::Json { .. })
        ));
        let minimal = HeartbeatData::decode(
            br#"{"consumerDataSet":[{"groupName":"g","subscriptionDataSet":[{"topic":"T"}]}]}"#,
        )
        .unwrap();
        let s = &minimal.consumer_data_set[0].subscription_data_set[0];
        assert_eq!(s.expression_type, "TAG");
        assert!(s.sub_version > 0);
        assert!(HeartbeatData::decode(b"\xff").is_err());
        assert!(HeartbeatData::decode(b"\"x\"").is_err());
    }

    #[test]
    fn lock_and_list_bodies() {
        let req = br#"{"clientId":"c1","consumerGroup":"g","mqSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"},{"brokerName":"broker-a","queueId":"1","topic":"T"}],"onlyThisBroker":false}"#;
        let lock = LockBatchRequestBody::decode(req).unwrap();
        assert_eq!(lock.mq_set.len(), 2);
        assert_eq!(lock.mq_set[1].queue_id, 1);
        let unlock = UnlockBatchRequestBody::decode(req).unwrap();
        assert_eq!(unlock.client_id, "c1");
        let resp = LockBatchResponseBody {
            lock_ok_mq_set: lock.mq_set.clone(),
        };
        let text = String::from_utf8(resp.encode()).unwrap();
        assert!(
            text.starts_with(
                r#"{"lockOKMQSet":[{"topic":"T","brokerName":"broker-a","queueId":0}"#
            ),
            "{text}"
        );
        assert_eq!(
            LockBatchResponseBody::decode(text.as_bytes()).unwrap(),
            resp
        );
        let list = ConsumerListBody {
            consumer_id_list: vec!["a".into(), "b".into()],
        };
        assert_eq!(
            String::from_utf8(list.encode()).unwrap(),
            r#"{"consumerIdList":["a","b"]}"#
        );
        assert_eq!(
            ConsumerListBody::decode(br#"{"consumerIdList":null}"#).unwrap(),
            ConsumerListBody::default()
        );
        let mq = MessageQueue::decode(br#"{topic:'T',brokerName:'b',queueId:3}"#).unwrap();
        assert_eq!(mq.queue_id, 3);
    }
}
