//! Messages between their gRPC form (`apache.rocketmq.v2.Message`) and the broker's: what a
//! send stores, and what a receive hands out. Pure functions, tested without a runtime.
//!
//! The gRPC client keeps its system fields apart from user properties; the store keeps both in
//! one property string, as RocketMQ's remoting clients send them. So a message sent over one
//! protocol reads the same over the other: tag, keys, message id (`UNIQ_KEY`), message group
//! (`__SHARDINGKEY`), delivery time (`TIMER_DELIVER_MS`), transaction mark (`TRAN_MSG`).

use std::io::Read;
use std::net::SocketAddr;

use bytes::Bytes;
use md5::{Digest as _, Md5};
use prost_types::Timestamp;

use skiff_actors::logic::lite::{check_name, split_lmq, LiteRefusal};
use skiff_actors::logic::transaction::{CHECK_IMMUNITY_TIME_IN_SECONDS, TRANSACTION_PREPARED_TYPE};
use skiff_storage::clock::epoch_millis;
use skiff_storage::message::property::{
    DELAY, KEYS, LITE_TOPIC, POP_CK, PRIORITY, PRODUCER_GROUP, TAGS, TIMER_DELAY_SEC,
    TIMER_DELIVER_MS, TRAN_MSG, UNIQ_KEY,
};
use skiff_storage::message::{
    property_pairs, push_property, sys_flag, MessageToAppend, StoredMessage,
};

use super::pb;
use super::resource;

/// The property names the gRPC door reads and writes beyond the remoting ones.
pub use skiff_storage::message::property::{
    BORN_HOST, BORN_TIMESTAMP, DLQ_ORIGIN_MESSAGE_ID, DLQ_ORIGIN_TOPIC, RECONSUME_TIME, RESERVED,
    SHARDING_KEY, TRACE_CONTEXT,
};

/// The longest delay a send may ask for (the proxy's `maxDelayTimeMills`, one day).
pub const MAX_DELAY_MS: i64 = 24 * 60 * 60 * 1000;

/// Why a gRPC message cannot be stored; each names the code the proxy answers.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unstorable {
    #[error("message id cannot be empty")]
    NoMessageId,
    #[error("message id {id:?} contains a control character")]
    IllegalMessageId { id: String },
    #[error("property {key:?} is used by the system")]
    SystemPropertyKey { key: String },
    #[error("the key or value of user property {key:?} contains a control character")]
    ControlCharacter { key: String },
    #[error("tag {tag:?} is blank or contains '|' or a control character")]
    IllegalTag { tag: String },
    #[error("message key {key:?} is blank or contains a control character")]
    IllegalKey { key: String },
    #[error("message group {group:?} is blank, too long or contains a control character")]
    IllegalMessageGroup { group: String },
    #[error("body of {size} bytes is over the limit of {limit} bytes")]
    BodyTooLarge { size: usize, limit: usize },
    #[error("body is empty")]
    EmptyBody,
    #[error("the body says it is gzip but does not decompress")]
    CorruptedBody(#[source] std::sync::Arc<std::io::Error>),
    #[error("delivery time {deliver_at_ms} ms is more than a day ahead")]
    IllegalDeliveryTime { deliver_at_ms: i64 },
    #[error("the message's topic {message_topic:?} is not the request's {topic:?}")]
    TopicMismatch {
        topic: String,
        message_topic: String,
    },
    #[error("message type {message_type} is unknown")]
    UnknownMessageType { message_type: i32 },
    #[error("priority {priority} is negative")]
    NegativePriority { priority: i32 },
    #[error(transparent)]
    IllegalLiteTopic(LiteRefusal),
}

impl Unstorable {
    pub fn code(&self) -> pb::Code {
        use pb::Code;
        match self {
            Unstorable::NoMessageId | Unstorable::IllegalMessageId { .. } => Code::IllegalMessageId,
            Unstorable::SystemPropertyKey { .. } | Unstorable::ControlCharacter { .. } => {
                Code::IllegalMessagePropertyKey
            }
            Unstorable::IllegalTag { .. } => Code::IllegalMessageTag,
            Unstorable::IllegalKey { .. } => Code::IllegalMessageKey,
            Unstorable::IllegalMessageGroup { .. } => Code::IllegalMessageGroup,
            Unstorable::BodyTooLarge { .. } => Code::MessageBodyTooLarge,
            Unstorable::EmptyBody => Code::MessageBodyEmpty,
            Unstorable::CorruptedBody(_) => Code::MessageCorrupted,
            Unstorable::IllegalDeliveryTime { .. } => Code::IllegalDeliveryTime,
            Unstorable::TopicMismatch { .. } => Code::MessageCorrupted,
            Unstorable::UnknownMessageType { .. } | Unstorable::NegativePriority { .. } => {
                Code::BadRequest
            }
            Unstorable::IllegalLiteTopic(_) => Code::IllegalLiteTopic,
        }
    }
}

fn has_control_character(s: &str) -> bool {
    s.chars().any(char::is_control)
}

/// The longest message group the proxy accepts (`maxMessageGroupSize`).
const MAX_MESSAGE_GROUP_LEN: usize = 64;

/// What a send of one gRPC message stores. `stored_topic` is the topic as the broker names it;
/// `queue_id` the queue chosen for it; `born_host` the peer when the client named none.
pub fn message_to_append(
    message: &pb::Message,
    stored_topic: &str,
    queue_id: u32,
    peer: SocketAddr,
    max_body_size: usize,
) -> Result<MessageToAppend, Unstorable> {
    let system = message.system_properties.clone().unwrap_or_default();
    if system.message_id.trim().is_empty() {
        return Err(Unstorable::NoMessageId);
    }
    // Properties are stored joined by control characters: none may hide in a value.
    if has_control_character(&system.message_id) {
        return Err(Unstorable::IllegalMessageId {
            id: system.message_id.clone(),
        });
    }
    let mut properties = String::new();
    let mut user: Vec<(&String, &String)> = message.user_properties.iter().collect();
    // Stable order, so the same message is stored the same way.
    user.sort();
    for (key, value) in user {
        if RESERVED.contains(&key.as_str()) {
            return Err(Unstorable::SystemPropertyKey { key: key.clone() });
        }
        if has_control_character(key) || has_control_character(value) {
            return Err(Unstorable::ControlCharacter { key: key.clone() });
        }
        push_property(&mut properties, key, value);
    }
    if let Some(tag) = &system.tag {
        if tag.trim().is_empty() || tag.contains('|') || has_control_character(tag) {
            return Err(Unstorable::IllegalTag { tag: tag.clone() });
        }
        push_property(&mut properties, TAGS, tag);
    }
    for key in &system.keys {
        if key.trim().is_empty() || has_control_character(key) {
            return Err(Unstorable::IllegalKey { key: key.clone() });
        }
    }
    if !system.keys.is_empty() {
        push_property(&mut properties, KEYS, &system.keys.join(" "));
    }
    push_property(&mut properties, UNIQ_KEY, &system.message_id);
    let message_type = pb::MessageType::try_from(system.message_type).map_err(|_| {
        Unstorable::UnknownMessageType {
            message_type: system.message_type,
        }
    })?;
    let mut flags = 0;
    if message_type == pb::MessageType::Transaction {
        flags |= TRANSACTION_PREPARED_TYPE;
        push_property(&mut properties, TRAN_MSG, "true");
        if let Some(recovery) = &system.orphaned_transaction_recovery_duration {
            push_property(
                &mut properties,
                CHECK_IMMUNITY_TIME_IN_SECONDS,
                &recovery.seconds.max(0).to_string(),
            );
        }
    }
    if let Some(deliver_at) = &system.delivery_timestamp {
        let deliver_at_ms = timestamp_ms(deliver_at);
        let now = epoch_millis();
        if deliver_at_ms - now > MAX_DELAY_MS {
            return Err(Unstorable::IllegalDeliveryTime { deliver_at_ms });
        }
        // A time already passed is delivered at once, as the timer does for any past time.
        push_property(
            &mut properties,
            TIMER_DELIVER_MS,
            &deliver_at_ms.to_string(),
        );
    }
    push_property(
        &mut properties,
        RECONSUME_TIME,
        &system.delivery_attempt.unwrap_or(0).to_string(),
    );
    // The proxy names a gRPC transaction's producer group after its topic: check-backs go to
    // any producer publishing to that topic.
    push_property(&mut properties, PRODUCER_GROUP, stored_topic);
    if let Some(group) = system.message_group.as_deref().filter(|g| !g.is_empty()) {
        if group.trim().is_empty()
            || group.len() > MAX_MESSAGE_GROUP_LEN
            || has_control_character(group)
        {
            return Err(Unstorable::IllegalMessageGroup {
                group: group.to_owned(),
            });
        }
        push_property(&mut properties, SHARDING_KEY, group);
    }
    if let Some(trace) = system
        .trace_context
        .as_deref()
        .filter(|t| !t.is_empty() && !has_control_character(t))
    {
        push_property(&mut properties, TRACE_CONTEXT, trace);
    }
    // Whatever the message's type, as the proxy sets it: the broker decides what it means.
    if let Some(priority) = system.priority {
        if priority < 0 {
            return Err(Unstorable::NegativePriority { priority });
        }
        push_property(&mut properties, PRIORITY, &priority.to_string());
    }
    if let Some(lite) = system.lite_topic.as_deref().filter(|l| !l.is_empty()) {
        check_name(lite).map_err(Unstorable::IllegalLiteTopic)?;
        push_property(&mut properties, LITE_TOPIC, lite);
    }
    let born_host =
        if system.born_host.trim().is_empty() || has_control_character(&system.born_host) {
            peer.to_string()
        } else {
            system.born_host.clone()
        };
    push_property(&mut properties, BORN_HOST, &born_host);
    let born_timestamp = system
        .born_timestamp
        .as_ref()
        .map(timestamp_ms)
        .unwrap_or_else(epoch_millis);
    push_property(&mut properties, BORN_TIMESTAMP, &born_timestamp.to_string());

    // Stored as plain bytes whatever the client sent, so a remoting consumer (whose clients
    // inflate zlib, not gzip) reads the same body as a gRPC one.
    let body = match pb::Encoding::try_from(system.body_encoding) {
        Ok(pb::Encoding::Gzip) => gunzip(&message.body, max_body_size)?,
        _ => message.body.clone(),
    };
    if body.len() > max_body_size {
        return Err(Unstorable::BodyTooLarge {
            size: body.len(),
            limit: max_body_size,
        });
    }
    Ok(MessageToAppend {
        topic: stored_topic.to_owned(),
        queue_id,
        flag: 0,
        sys_flag: flags,
        born_timestamp,
        born_host: peer,
        reconsume_times: system.delivery_attempt.unwrap_or(0).max(0),
        prepared_transaction_offset: 0,
        properties,
        body,
    })
}

/// Inflates a gzip body, refusing one that grows past `limit` (a small bomb stays small).
fn gunzip(body: &[u8], limit: usize) -> Result<Bytes, Unstorable> {
    let mut out = Vec::with_capacity(body.len().saturating_mul(2).min(limit));
    let mut decoder = flate2::read::GzDecoder::new(body).take(limit as u64 + 1);
    decoder
        .read_to_end(&mut out)
        .map_err(|e| Unstorable::CorruptedBody(std::sync::Arc::new(e)))?;
    if out.len() > limit {
        return Err(Unstorable::BodyTooLarge {
            size: out.len(),
            limit,
        });
    }
    Ok(Bytes::from(out))
}

/// The body as a consumer should see it: a remoting producer's zlib-compressed body inflated.
fn plain_body(stored: &StoredMessage) -> Bytes {
    if stored.sys_flag & sys_flag::COMPRESSED == 0 {
        return stored.body.clone();
    }
    let mut out = Vec::new();
    match flate2::read::ZlibDecoder::new(&stored.body[..]).read_to_end(&mut out) {
        Ok(_) => Bytes::from(out),
        // Not zlib after all: hand over what is stored rather than nothing.
        Err(_) => stored.body.clone(),
    }
}

/// The gRPC form of a stored (popped, looked-up or checked-back) message.
pub fn message_from_stored(stored: &StoredMessage) -> pb::Message {
    let mut system = pb::SystemProperties::default();
    let mut user = std::collections::HashMap::new();
    let mut deliver_ms = None;
    let mut delay_sec = None;
    let mut transaction = false;
    let mut delayed = false;
    let mut prioritized = false;
    let mut lite = false;
    let mut dlq_topic = None;
    let mut dlq_message_id = None;
    let mut born_host = None;
    for (name, value) in property_pairs(&stored.properties) {
        match name {
            TAGS => system.tag = Some(value.to_owned()),
            KEYS => {
                system.keys = value
                    .split(' ')
                    .filter(|k| !k.is_empty())
                    .map(str::to_owned)
                    .collect()
            }
            UNIQ_KEY => system.message_id = value.to_owned(),
            TRAN_MSG => transaction = value == "true",
            DELAY => delayed = true,
            TIMER_DELIVER_MS => {
                delayed = true;
                deliver_ms = value.parse::<i64>().ok();
            }
            TIMER_DELAY_SEC => {
                delayed = true;
                delay_sec = value.parse::<i64>().ok();
            }
            // Not among RocketMQ's system properties: the proxy hands these over as user
            // properties too.
            SHARDING_KEY | TRACE_CONTEXT => {
                if name == SHARDING_KEY {
                    system.message_group = Some(value.to_owned());
                } else {
                    system.trace_context = Some(value.to_owned());
                }
                user.insert(name.to_owned(), value.to_owned());
            }
            POP_CK => system.receipt_handle = Some(value.to_owned()),
            LITE_TOPIC => {
                lite = true;
                system.lite_topic = Some(value.to_owned());
            }
            PRIORITY => {
                prioritized = true;
                // Java's getPriority: an unreadable or negative one is no priority.
                system.priority = value.parse::<i32>().ok().filter(|p| *p >= 0);
            }
            BORN_HOST => born_host = Some(value.to_owned()),
            DLQ_ORIGIN_TOPIC => dlq_topic = Some(value.to_owned()),
            DLQ_ORIGIN_MESSAGE_ID => dlq_message_id = Some(value.to_owned()),
            _ if RESERVED.contains(&name) => {}
            _ => {
                user.insert(name.to_owned(), value.to_owned());
            }
        }
    }
    if system.message_id.is_empty() {
        system.message_id = stored.offset_msg_id();
    }
    let body = plain_body(stored);
    system.body_digest = Some(pb::Digest {
        r#type: pb::DigestType::Md5 as i32,
        checksum: md5_hex(&body),
    });
    system.body_encoding = pb::Encoding::Identity as i32;
    system.message_type = if transaction {
        pb::MessageType::Transaction
    } else if delayed {
        pb::MessageType::Delay
    } else if system.message_group.is_some() {
        pb::MessageType::Fifo
    } else if prioritized {
        pb::MessageType::Priority
    } else if lite {
        pb::MessageType::Lite
    } else {
        pb::MessageType::Normal
    } as i32;
    system.born_timestamp = Some(timestamp(stored.born_timestamp));
    system.born_host = born_host.unwrap_or_else(|| stored.born_host.to_string());
    system.store_timestamp = Some(timestamp(stored.store_timestamp));
    system.store_host = stored.store_host.to_string();
    system.delivery_timestamp = match (delay_sec, deliver_ms) {
        (Some(sec), _) => Some(timestamp(stored.store_timestamp + sec * 1000)),
        (None, Some(ms)) => Some(timestamp(ms)),
        (None, None) => None,
    };
    system.queue_id = i32::try_from(stored.queue_id).unwrap_or(i32::MAX);
    system.queue_offset = Some(i64::try_from(stored.queue_offset).unwrap_or(i64::MAX));
    system.delivery_attempt = Some(stored.reconsume_times.saturating_add(1));
    if let (Some(topic), Some(message_id)) = (dlq_topic, dlq_message_id) {
        system.dead_letter_queue = Some(pb::DeadLetterQueue { topic, message_id });
    }
    // A lite topic's message names its parent; the lite topic rides in the system properties.
    let topic = split_lmq(&stored.topic).map_or(stored.topic.as_str(), |(parent, _)| parent);
    pb::Message {
        topic: Some(resource::resource(topic)),
        user_properties: user,
        system_properties: Some(system),
        body,
    }
}

/// Upper-case hex MD5, as the proxy writes `Digest.checksum`.
pub fn md5_hex(body: &[u8]) -> String {
    let digest = Md5::digest(body);
    let mut hex = String::with_capacity(32);
    for byte in digest {
        hex.push_str(&format!("{byte:02X}"));
    }
    hex
}

pub fn timestamp(ms: i64) -> Timestamp {
    Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

pub fn timestamp_ms(t: &Timestamp) -> i64 {
    t.seconds
        .saturating_mul(1000)
        .saturating_add(i64::from(t.nanos / 1_000_000))
}

pub fn duration_ms(d: &prost_types::Duration) -> i64 {
    d.seconds
        .saturating_mul(1000)
        .saturating_add(i64::from(d.nanos / 1_000_000))
}

pub fn duration(ms: i64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_storage::message::property;

    fn peer() -> SocketAddr {
        "127.0.0.1:40000".parse().unwrap()
    }

    fn sent(system: pb::SystemProperties, body: &'static [u8]) -> pb::Message {
        pb::Message {
            topic: Some(pb::Resource {
                resource_namespace: String::new(),
                name: "T".into(),
            }),
            user_properties: [("color".to_owned(), "red".to_owned())].into(),
            system_properties: Some(system),
            body: Bytes::from_static(body),
        }
    }

    fn stored_from(append: &MessageToAppend) -> StoredMessage {
        StoredMessage {
            queue_id: append.queue_id,
            flag: append.flag,
            queue_offset: 7,
            physical_offset: 1234,
            sys_flag: append.sys_flag,
            born_timestamp: append.born_timestamp,
            born_host: append.born_host,
            store_timestamp: 1_700_000_000_000,
            store_host: "127.0.0.1:9876".parse().unwrap(),
            reconsume_times: append.reconsume_times,
            prepared_transaction_offset: 0,
            body: append.body.clone(),
            topic: append.topic.clone(),
            properties: append.properties.clone(),
            stored_size: 0,
        }
    }

    #[test]
    fn a_fifo_message_keeps_tag_keys_id_group_and_user_properties_both_ways() {
        let system = pb::SystemProperties {
            tag: Some("TagA".into()),
            keys: vec!["k1".into(), "k2".into()],
            message_id: "01AABBCCDDEEFF00112233445566778899".into(),
            message_type: pb::MessageType::Fifo as i32,
            message_group: Some("order-7".into()),
            ..Default::default()
        };
        let append = message_to_append(&sent(system, b"hello"), "ns%T", 2, peer(), 1024).unwrap();
        assert_eq!(append.topic, "ns%T");
        assert_eq!(append.queue_id, 2);
        assert_eq!(property(&append.properties, TAGS), Some("TagA"));
        assert_eq!(property(&append.properties, KEYS), Some("k1 k2"));
        assert_eq!(property(&append.properties, SHARDING_KEY), Some("order-7"));
        assert_eq!(
            property(&append.properties, UNIQ_KEY),
            Some("01AABBCCDDEEFF00112233445566778899")
        );
        let back = message_from_stored(&stored_from(&append));
        let system = back.system_properties.unwrap();
        let topic = back.topic.unwrap();
        assert_eq!(
            (topic.resource_namespace.as_str(), topic.name.as_str()),
            ("ns", "T")
        );
        assert_eq!(system.tag.as_deref(), Some("TagA"));
        assert_eq!(system.keys, vec!["k1", "k2"]);
        assert_eq!(system.message_group.as_deref(), Some("order-7"));
        assert_eq!(system.message_type, pb::MessageType::Fifo as i32);
        assert_eq!(system.delivery_attempt, Some(1));
        assert_eq!(system.queue_offset, Some(7));
        assert_eq!(
            back.user_properties.get("color").map(String::as_str),
            Some("red")
        );
        // As the proxy answers: the message group is a user property too.
        assert_eq!(
            back.user_properties.get(SHARDING_KEY).map(String::as_str),
            Some("order-7")
        );
        assert_eq!(back.user_properties.len(), 2, "{:?}", back.user_properties);
        assert_eq!(system.body_digest.unwrap().checksum, md5_hex(b"hello"));
        assert_eq!(&back.body[..], b"hello");
    }

    #[test]
    fn a_transaction_message_is_stored_prepared_in_its_topic_producer_group() {
        let system = pb::SystemProperties {
            message_id: "id".into(),
            message_type: pb::MessageType::Transaction as i32,
            ..Default::default()
        };
        let append = message_to_append(&sent(system, b"x"), "T", 0, peer(), 1024).unwrap();
        assert_eq!(
            append.sys_flag & TRANSACTION_PREPARED_TYPE,
            TRANSACTION_PREPARED_TYPE
        );
        assert_eq!(property(&append.properties, TRAN_MSG), Some("true"));
        assert_eq!(property(&append.properties, PRODUCER_GROUP), Some("T"));
    }

    #[test]
    fn a_gzip_body_is_stored_plain_and_a_bomb_is_refused() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&[b'a'; 4096]).unwrap();
        let packed: &'static [u8] = Box::leak(gz.finish().unwrap().into_boxed_slice());
        let system = pb::SystemProperties {
            message_id: "id".into(),
            body_encoding: pb::Encoding::Gzip as i32,
            ..Default::default()
        };
        let append =
            message_to_append(&sent(system.clone(), packed), "T", 0, peer(), 8192).unwrap();
        assert_eq!(&append.body[..], &[b'a'; 4096][..]);
        let refused = message_to_append(&sent(system, packed), "T", 0, peer(), 1000).unwrap_err();
        assert_eq!(refused.code(), pb::Code::MessageBodyTooLarge);
    }

    #[test]
    fn bad_messages_get_the_proxys_codes() {
        let base = pb::SystemProperties {
            message_id: "id".into(),
            ..Default::default()
        };
        let no_id = pb::SystemProperties {
            message_id: " ".into(),
            ..base.clone()
        };
        assert_eq!(
            message_to_append(&sent(no_id, b"x"), "T", 0, peer(), 10)
                .unwrap_err()
                .code(),
            pb::Code::IllegalMessageId
        );
        let separator_in_id = pb::SystemProperties {
            message_id: "01\u{1}UNIQ_KEY\u{2}forged".into(),
            ..base.clone()
        };
        assert_eq!(
            message_to_append(&sent(separator_in_id, b"x"), "T", 0, peer(), 10)
                .unwrap_err()
                .code(),
            pb::Code::IllegalMessageId
        );
        let bad_tag = pb::SystemProperties {
            tag: Some("a|b".into()),
            ..base.clone()
        };
        assert_eq!(
            message_to_append(&sent(bad_tag, b"x"), "T", 0, peer(), 10)
                .unwrap_err()
                .code(),
            pb::Code::IllegalMessageTag
        );
        let mut system_key = sent(base.clone(), b"x");
        system_key
            .user_properties
            .insert("UNIQ_KEY".into(), "forged".into());
        assert_eq!(
            message_to_append(&system_key, "T", 0, peer(), 10)
                .unwrap_err()
                .code(),
            pb::Code::IllegalMessagePropertyKey
        );
        let far = pb::SystemProperties {
            delivery_timestamp: Some(timestamp(epoch_millis() + MAX_DELAY_MS + 60_000)),
            ..base.clone()
        };
        assert_eq!(
            message_to_append(&sent(far, b"x"), "T", 0, peer(), 10)
                .unwrap_err()
                .code(),
            pb::Code::IllegalDeliveryTime
        );
        assert_eq!(
            message_to_append(&sent(base, b"too long"), "T", 0, peer(), 3)
                .unwrap_err()
                .code(),
            pb::Code::MessageBodyTooLarge
        );
    }

    #[test]
    fn a_remoting_producers_zlib_body_reaches_a_grpc_consumer_inflated() {
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(b"compressed by a remoting client").unwrap();
        let append = MessageToAppend {
            topic: "T".into(),
            queue_id: 0,
            flag: 0,
            sys_flag: sys_flag::COMPRESSED,
            born_timestamp: 1,
            born_host: peer(),
            reconsume_times: 2,
            prepared_transaction_offset: 0,
            properties: String::new(),
            body: Bytes::from(z.finish().unwrap()),
        };
        let back = message_from_stored(&stored_from(&append));
        assert_eq!(&back.body[..], b"compressed by a remoting client");
        let system = back.system_properties.unwrap();
        assert_eq!(system.body_encoding, pb::Encoding::Identity as i32);
        assert_eq!(system.delivery_attempt, Some(3));
        assert_eq!(
            system.message_id,
            "7F00000100002694000000000000".to_owned() + "04D2"
        );
    }

    #[test]
    fn timestamps_and_durations_round_trip_in_milliseconds() {
        for ms in [0, 1, 999, 1000, 1_700_000_000_123, -1] {
            assert_eq!(timestamp_ms(&timestamp(ms)), ms);
            assert_eq!(duration_ms(&duration(ms)), ms);
        }
    }
}
