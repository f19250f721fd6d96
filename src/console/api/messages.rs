//! Stored messages: `GET /messages` (a queue's page, the messages under a key, or those stored
//! in a time range: [`time_search`](super::time_search)),
//! `GET /messages/{id}` (one message with its properties, body and consuming groups) and
//! `GET /messages/{id}/traces` (its trace events).

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};

use skiff_storage::message::{decode_records, parse_properties, property, StoredMessage};

use super::lookup::{by_offset_id, indexed, resends_of, summary};
use super::{may_read, ApiError, ApiQuery, ApiResult};
use crate::console::{Console, ConsoleUser};
use crate::error_text::error_chain;

/// Messages one browse answers at most.
const MAX_BROWSE: u64 = 200;
/// Bytes one browse reads at most.
const MAX_BROWSE_BYTES: u32 = 8 << 20;

#[derive(Deserialize)]
pub(super) struct Browse {
    topic: String,
    queue: Option<String>,
    from: Option<String>,
    count: Option<String>,
    key: Option<String>,
    begin_ms: Option<String>,
    end_ms: Option<String>,
}

fn number<T: std::str::FromStr>(
    field: &str,
    text: Option<&str>,
    default: T,
) -> Result<T, ApiError> {
    match text.map(str::trim).filter(|t| !t.is_empty()) {
        None => Ok(default),
        Some(t) => t.parse().map_err(|_| {
            ApiError::bad_request(format!("{field} must be a non-negative number, not {t:?}"))
        }),
    }
}

pub(super) async fn browse(
    State(console): State<Console>,
    user: Option<Extension<ConsoleUser>>,
    ApiQuery(query): ApiQuery<Browse>,
) -> ApiResult<Value> {
    may_read(user.as_deref(), &query.topic)?;
    let topic = query.topic.clone();
    if let Some(key) = query.key.clone().filter(|k| !k.is_empty()) {
        let found = console
            .on_broker(move |broker| async move {
                let found = indexed(&broker, &topic, &key, MAX_BROWSE as usize).await?;
                Ok(found.iter().map(summary).collect::<Vec<_>>())
            })
            .await?;
        return Ok(Json(json!({ "messages": found, "next": Value::Null })));
    }
    if query.begin_ms.is_some() || query.end_ms.is_some() {
        let begin: i64 = number("begin_ms", query.begin_ms.as_deref(), 0)?;
        let end: i64 = number("end_ms", query.end_ms.as_deref(), i64::MAX)?;
        let count = usize::try_from(number("count", query.count.as_deref(), MAX_BROWSE)?)
            .unwrap_or(usize::MAX)
            .min(MAX_BROWSE as usize);
        return console
            .on_broker(move |broker| async move {
                super::time_search::search(&broker, &topic, begin, end, count).map(Json)
            })
            .await;
    }
    let queue: u32 = number("queue", query.queue.as_deref(), 0)?;
    let from: u64 = number("from", query.from.as_deref(), 0)?;
    let count: u64 = number("count", query.count.as_deref(), 20)?.min(MAX_BROWSE);
    console
        .on_broker(move |broker| async move {
            let Some(config) = broker.topic(&topic)? else {
                return Err(ApiError::not_found(format!("topic {topic} does not exist")));
            };
            if queue >= config.read_queue_nums.max(config.write_queue_nums) {
                return Err(ApiError::bad_request(format!(
                    "topic {topic} has no queue {queue}"
                )));
            }
            let reader = broker.reader();
            let from = from.max(reader.min_offset(&topic, queue));
            let read = reader.read(
                &topic,
                queue,
                from,
                u32::try_from(count).unwrap_or(u32::MAX),
                MAX_BROWSE_BYTES,
                None,
            )?;
            let messages = decode_records(read.records)
                .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error_chain(&e)))?;
            Ok(Json(json!({
                "messages": messages.iter().map(summary).collect::<Vec<_>>(),
                "next": read.next_begin_offset,
                "min_offset": read.min_offset,
                "max_offset": read.max_offset,
            })))
        })
        .await
}

#[derive(Deserialize)]
pub(super) struct MessageQuery {
    topic: Option<String>,
}

/// A message by its offset message id, or by the id its producer gave it (`UNIQ_KEY`, what
/// Java's `SendResult.getMsgId()` and consumers print): within `?topic=` when given, else in
/// every topic the caller may read.
pub(super) async fn message(
    State(console): State<Console>,
    user: Option<Extension<ConsoleUser>>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<MessageQuery>,
) -> ApiResult<Value> {
    let physical = crate::remoting::wire::physical_offset_of(&id);
    let topic = query.topic.filter(|t| !t.is_empty());
    // Both kinds of id are hex: anything else cannot name a message, whatever the topic.
    if physical.is_none() && (id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit())) {
        return Err(ApiError::bad_request(format!(
            "{id:?} is not a message id: an offset message id or a producer's id (unique key) \
             is hex digits"
        )));
    }
    if let Some(topic) = &topic {
        may_read(user.as_deref(), topic)?;
    }
    let reader = user.as_deref().cloned();
    let message = console
        .on_broker(move |broker| async move {
            // A producer's id has the shape of an offset id too: it is looked up as one first,
            // then, when that names no message of its own id, by key.
            let mut found = match physical {
                Some(_) => by_offset_id(&broker, &id)?,
                None => None,
            };
            let mut copies = Vec::new();
            if found.is_none() {
                let topics = match topic {
                    Some(topic) => vec![topic],
                    None => broker
                        .topics()?
                        .into_iter()
                        .map(|t| t.name)
                        .filter(|t| may_read(reader.as_ref(), t).is_ok())
                        .collect(),
                };
                let mut same_id = Vec::new();
                for topic in &topics {
                    same_id.extend(
                        indexed(&broker, topic, &id, 32)
                            .await?
                            .into_iter()
                            .filter(|m| m.property(property::UNIQ_KEY) == Some(id.as_str())),
                    );
                }
                // A retried or dead-lettered message keeps its producer's id: the one stored
                // first is the message as sent, the others its copies.
                same_id.sort_by_key(|m| m.physical_offset);
                let mut same_id = same_id.into_iter();
                found = same_id.next();
                copies = same_id
                    .map(|m| json!({ "msg_id": m.offset_msg_id(), "topic": m.topic }))
                    .collect();
            }
            let Some(message) = found else {
                return Err(ApiError::not_found(format!("no message has id {id}")));
            };
            let mut consumed_by = Vec::new();
            for group in broker.groups_with_offsets(&message.topic).await? {
                let consumed = broker.progress(&group).await?.iter().any(|row| {
                    row.topic == message.topic
                        && row.queue_id == message.queue_id
                        && row
                            .consumer_offset
                            .is_some_and(|o| o > message.queue_offset)
                });
                consumed_by.push(json!({ "group": group, "consumed": consumed }));
            }
            let resent: Vec<Value> = resends_of(&broker, &message)
                .await?
                .iter()
                .map(|m| json!({ "msg_id": m.offset_msg_id(), "topic": m.topic, "store_ms": m.store_timestamp }))
                .collect();
            Ok((message, consumed_by, copies, resent))
        })
        .await?;
    let (message, consumed_by, copies, resent) = message;
    may_read(user.as_deref(), &message.topic)?;
    let mut detail = summary(&message);
    let properties: BTreeMap<String, String> =
        parse_properties(&message.properties).into_iter().collect();
    detail["properties"] = json!(properties);
    detail["body_text"] = json!(std::str::from_utf8(&message.body).ok());
    detail["body_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(&message.body));
    detail["store_host"] = json!(message.store_host.to_string());
    detail["born_host"] = json!(message.born_host.to_string());
    detail["reconsume_times"] = json!(message.reconsume_times);
    detail["consumed_by"] = json!(consumed_by);
    detail["copies"] = json!(copies);
    if message
        .topic
        .starts_with(skiff_actors::logic::delay::DLQ_TOPIC_PREFIX)
    {
        detail["resent"] = json!(resent);
    }
    Ok(Json(detail))
}

#[derive(Deserialize)]
pub(super) struct TraceQuery {
    trace_topic: Option<String>,
}

/// The trace events the clients recorded for a message (by its producer's id, or its offset id
/// when it is stored here), oldest first.
pub(super) async fn traces(
    State(console): State<Console>,
    user: Option<Extension<ConsoleUser>>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<TraceQuery>,
) -> ApiResult<Value> {
    let trace_topic = query
        .trace_topic
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| crate::console::traces::DEFAULT_TRACE_TOPIC.to_owned());
    may_read(user.as_deref(), &trace_topic)?;
    let topic = trace_topic.clone();
    let message_id = id.clone();
    let events = console
        .on_broker(move |broker| async move {
            let mut ids = vec![message_id.clone()];
            let stored = by_offset_id(&broker, &message_id)?;
            if let Some(uniq) = stored.as_ref().and_then(|m| m.property(property::UNIQ_KEY)) {
                ids.push(uniq.to_owned());
            }
            if broker.topic(&topic)?.is_none() {
                return Ok(Vec::new());
            }
            // Trace messages by their own id: one found under both ids is read once.
            let mut found: BTreeMap<u64, StoredMessage> = BTreeMap::new();
            for key in &ids {
                for message in indexed(&broker, &topic, key, 64).await? {
                    found.insert(message.physical_offset, message);
                }
            }
            let mut events = Vec::new();
            for message in found.values() {
                let Ok(body) = std::str::from_utf8(&message.body) else {
                    continue;
                };
                for key in &ids {
                    events.extend(crate::console::traces::events_of(body, key));
                }
            }
            Ok(crate::console::traces::in_order(events))
        })
        .await?;
    Ok(Json(json!({
        "msg_id": id,
        "trace_topic": trace_topic,
        "events": events,
    })))
}
