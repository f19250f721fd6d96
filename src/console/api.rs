//! `/api/v1`: the console's JSON API (documented in `docs/console.md`). Each handler reads or
//! changes the broker through the console's [`BrokerLink`](crate::broker_link::BrokerLink), with
//! the broker's own calls; errors are `{"error": "..."}` with a status that says whose fault it
//! is (400 bad input, 401 no or a wrong login, 403 refused, 404 unknown, 409 exists, 503 broker
//! busy or stopping).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio_stream::Stream;

use skiff_actors::broker::BrokerHandle;
use skiff_actors::broker_api::{BrokerError, SendRequest};
use skiff_actors::logic::delay::{dlq_topic, retry_topic};
use skiff_actors::logic::names;
use skiff_actors::refused::Refused;
use skiff_storage::message::{
    decode_records, encode_properties, parse_properties, property, MessageToAppend, StoredMessage,
};
use skiff_storage::metadata::{TopicConfig, TopicMessageType, PERM_READ, PERM_WRITE};

use super::{Console, ConsoleUser};
use crate::acl::{Acl, Action, Check, Need};
use crate::broker_link::LinkError;
use crate::error_text::error_chain;

/// Messages one browse answers at most.
const MAX_BROWSE: u64 = 200;
/// Bytes one browse reads at most.
const MAX_BROWSE_BYTES: u32 = 8 << 20;
/// How often a live tail looks for new messages.
const TAIL_POLL: Duration = Duration::from_millis(250);
/// Queues a created topic may have.
const MAX_QUEUES: u32 = 1024;

pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/overview", get(overview))
        .route("/topics", get(topics).post(create_topic))
        .route("/topics/{name}", get(topic).delete(delete_topic))
        .route("/topics/{name}/messages", post(send_message))
        .route("/topics/{name}/tail", get(tail))
        .route("/groups", get(groups))
        .route("/groups/{name}", get(group))
        .route("/groups/{name}/reset-offset", post(reset_offset))
        .route("/messages", get(browse))
        .route("/messages/{id}", get(message))
        .route("/messages/{id}/resend", post(resend_one))
        .route("/messages/{id}/traces", get(traces))
        .route("/groups/{name}/dlq/resend", post(resend_dead_letters))
}

/// An API error: its status and the message the page shows.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

impl From<LinkError> for ApiError {
    fn from(e: LinkError) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
    }
}

impl From<BrokerError> for ApiError {
    fn from(e: BrokerError) -> ApiError {
        match &e {
            BrokerError::Refused(Refused::TopicNotExist { topic }) => {
                ApiError::not_found(format!("topic {topic} does not exist"))
            }
            BrokerError::Refused(Refused::GroupNotExist { group }) => {
                ApiError::not_found(format!("group {group} does not exist"))
            }
            BrokerError::Refused(refused) => ApiError::bad_request(refused.to_string()),
            _ => {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "console request failed"
                );
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error_chain(&e))
            }
        }
    }
}

impl From<skiff_storage::store::StoreError> for ApiError {
    fn from(e: skiff_storage::store::StoreError) -> ApiError {
        BrokerError::Store(e).into()
    }
}

type ApiResult<T> = Result<Json<T>, ApiError>;

/// A JSON body, any content type; a body that does not parse is a 400 in the API's shape.
pub(super) struct ApiJson<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> axum::extract::FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let body = Bytes::from_request(request, state).await.map_err(|e| {
            ApiError::bad_request(format!("the request body could not be read: {e}"))
        })?;
        let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &body
        };
        serde_json::from_slice(body).map(ApiJson).map_err(|e| {
            ApiError::bad_request(format!("the request body is not the JSON expected: {e}"))
        })
    }
}

/// Query parameters; ones that do not parse are a 400 in the API's shape.
pub(super) struct ApiQuery<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> axum::extract::FromRequestParts<S>
    for ApiQuery<T>
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| ApiQuery(q))
            .map_err(|e| ApiError::bad_request(e.body_text()))
    }
}

impl Console {
    /// Runs `call` with the broker on its arbiter.
    async fn on_broker<T, F, Fut>(&self, call: F) -> Result<T, ApiError>
    where
        F: FnOnce(BrokerHandle) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, ApiError>> + 'static,
        T: Send + 'static,
    {
        self.link.call(call).await?
    }
}

/// With ACL on, reading a topic's messages needs `SUB` on it.
fn may_read(user: Option<&ConsoleUser>, topic: &str) -> Result<(), ApiError> {
    let Some(ConsoleUser(identity)) = user else {
        return Ok(());
    };
    let need = Need::Access(vec![Check::topic(topic, Action::Sub)]);
    Acl::authorize(identity, &need, 0, std::net::IpAddr::from([0, 0, 0, 0]))
        .map_err(|refusal| ApiError::forbidden(refusal.to_string()))
}

fn perm_text(perm: u32) -> &'static str {
    match (perm & PERM_READ != 0, perm & PERM_WRITE != 0) {
        (true, true) => "RW",
        (true, false) => "R",
        (false, true) => "W",
        (false, false) => "-",
    }
}

// ---- overview --------------------------------------------------------------------------------

#[derive(Serialize)]
struct Overview {
    version: &'static str,
    broker_name: String,
    cluster_name: String,
    uptime_ms: u64,
    listen: String,
    disk: Value,
    connections: Value,
    topics: usize,
    groups: usize,
    rates: Vec<super::samples::Rate>,
}

async fn overview(State(console): State<Console>) -> ApiResult<Overview> {
    let data_dir = console.info.data_dir.clone();
    let (snapshot, topics, groups, clients) = console
        .on_broker(|broker| async move {
            let snapshot = broker.metrics().await?;
            Ok((
                snapshot,
                broker.topics()?.len(),
                broker.groups()?.len(),
                broker.connections().descriptions(),
            ))
        })
        .await?;
    // As df and the disk guard count: used is total minus free, and the size is used plus what
    // this process may still use (the root reserve left out), so the ratio is used over size.
    let (total, free, available) = (
        fs2::total_space(&data_dir).unwrap_or(0),
        fs2::free_space(&data_dir).unwrap_or(0),
        fs2::available_space(&data_dir).unwrap_or(0),
    );
    let used = total.saturating_sub(free);
    let used_ratio = skiff_actors::broker::retention::used_ratio(total, free, available);
    let mut by_protocol: BTreeMap<&str, u64> = BTreeMap::new();
    let mut by_language: BTreeMap<String, u64> = BTreeMap::new();
    for client in &clients {
        *by_protocol.entry(client.protocol).or_default() += 1;
        *by_language.entry(client.language.clone()).or_default() += 1;
    }
    let info = &console.info;
    Ok(Json(Overview {
        version: env!("CARGO_PKG_VERSION"),
        broker_name: info.broker_name.clone(),
        cluster_name: info.cluster_name.clone(),
        uptime_ms: u64::try_from(console.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        listen: info.listen.clone(),
        disk: json!({
            "data_dir": info.data_dir.display().to_string(),
            "store_bytes": snapshot.store_bytes,
            "used_bytes": used,
            "total_bytes": used.saturating_add(available),
            "used_ratio": used_ratio,
            "max_used_ratio": info.disk_max_used_ratio,
            "full_ratio": info.disk_full_ratio,
            "retention_ms": u64::try_from(info.retention.as_millis()).unwrap_or(u64::MAX),
        }),
        connections: json!({
            "total": snapshot.connections_open,
            "clients": clients.len(),
            "by_protocol": by_protocol,
            "by_language": by_language,
        }),
        topics,
        groups,
        rates: console.samples().rates(),
    }))
}

// ---- topics ----------------------------------------------------------------------------------

#[derive(Serialize)]
struct TopicRow {
    name: String,
    read_queues: u32,
    write_queues: u32,
    perm: &'static str,
    message_type: Option<&'static str>,
    messages: u64,
    max_offset: u64,
    system: bool,
}

fn topic_row(broker: &BrokerHandle, config: &TopicConfig) -> TopicRow {
    let reader = broker.reader();
    let queues = config.read_queue_nums.max(config.write_queue_nums);
    let (mut messages, mut max_offset) = (0, 0);
    for queue in 0..queues {
        let max = reader.max_offset(&config.name, queue);
        messages += max.saturating_sub(reader.min_offset(&config.name, queue));
        max_offset += max;
    }
    TopicRow {
        name: config.name.clone(),
        read_queues: config.read_queue_nums,
        write_queues: config.write_queue_nums,
        perm: perm_text(config.perm),
        message_type: config.message_type.map(TopicMessageType::as_str),
        messages,
        max_offset,
        system: names::is_system_or_group_topic(&config.name),
    }
}

async fn topics(State(console): State<Console>) -> ApiResult<Value> {
    let rows = console
        .on_broker(|broker| async move {
            let mut topics = broker.topics()?;
            topics.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(topics
                .iter()
                .map(|t| topic_row(&broker, t))
                .collect::<Vec<_>>())
        })
        .await?;
    Ok(Json(json!({ "topics": rows })))
}

#[derive(Deserialize)]
struct NewTopic {
    name: String,
    #[serde(default)]
    queues: Option<u32>,
    #[serde(default)]
    message_type: Option<String>,
}

async fn create_topic(
    State(console): State<Console>,
    ApiJson(new): ApiJson<NewTopic>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let name = new.name.trim().to_owned();
    if names::topic_name_problem(&name).is_some() {
        return Err(ApiError::bad_request(format!(
            "{name:?} is not a valid topic name: 1 to {} of letters, digits, %, - and _",
            names::TOPIC_MAX_LENGTH
        )));
    }
    if names::is_rocketmq_system_topic(&name) {
        return Err(ApiError::bad_request(format!(
            "{name} is one of RocketMQ's system topics"
        )));
    }
    let queues = new.queues.unwrap_or(4);
    if queues == 0 || queues > MAX_QUEUES {
        return Err(ApiError::bad_request(format!(
            "queues must be 1 to {MAX_QUEUES}, not {queues}"
        )));
    }
    let message_type = match new.message_type.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => match TopicMessageType::from_name(text) {
            Some(TopicMessageType::Mixed) | None => {
                return Err(ApiError::bad_request(format!(
                    "message type {text:?} is not NORMAL, FIFO, DELAY or TRANSACTION"
                )))
            }
            found => found,
        },
    };
    let created = name.clone();
    console
        .on_broker(move |broker| async move {
            if broker.topic(&name)?.is_some() {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!("topic {name} exists"),
                ));
            }
            let mut config = TopicConfig::new(name, queues);
            config.message_type = message_type;
            broker.put_topic(&config)?;
            Ok(())
        })
        .await?;
    Ok((StatusCode::CREATED, Json(json!({ "name": created }))))
}

async fn delete_topic(
    State(console): State<Console>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    console
        .on_broker(move |broker| async move {
            if broker.remove_topic(&name).await? {
                Ok(StatusCode::NO_CONTENT)
            } else {
                Err(ApiError::not_found(format!("topic {name} does not exist")))
            }
        })
        .await
}

async fn topic(State(console): State<Console>, Path(name): Path<String>) -> ApiResult<Value> {
    console
        .on_broker(move |broker| async move {
            let Some(config) = broker.topic(&name)? else {
                return Err(ApiError::not_found(format!("topic {name} does not exist")));
            };
            let reader = broker.reader();
            let queues: Vec<Value> = (0..config.read_queue_nums.max(config.write_queue_nums))
                .map(|q| {
                    json!({
                        "queue_id": q,
                        "min_offset": reader.min_offset(&name, q),
                        "max_offset": reader.max_offset(&name, q),
                    })
                })
                .collect();
            let mut groups = Vec::new();
            for group in broker.groups_with_offsets(&name).await? {
                let lag: u64 = broker
                    .progress(&group)
                    .await?
                    .iter()
                    .filter(|row| row.topic == name)
                    .map(|row| row.lag)
                    .sum();
                groups.push(json!({ "group": group, "lag": lag }));
            }
            let row = topic_row(&broker, &config);
            Ok(Json(json!({
                "name": row.name,
                "read_queues": row.read_queues,
                "write_queues": row.write_queues,
                "perm": row.perm,
                "message_type": row.message_type,
                "system": row.system,
                "queues": queues,
                "groups": groups,
            })))
        })
        .await
}

#[derive(Deserialize)]
struct TestMessage {
    #[serde(default)]
    body: String,
    #[serde(default)]
    tag: Option<String>,
    #[serde(default)]
    keys: Option<String>,
    #[serde(default)]
    properties: BTreeMap<String, String>,
    #[serde(default)]
    delay_level: Option<u32>,
}

async fn send_message(
    State(console): State<Console>,
    Path(topic): Path<String>,
    ApiJson(message): ApiJson<TestMessage>,
) -> ApiResult<Value> {
    let max_level = skiff_actors::logic::delay::DELAY_LEVELS.len() as u32;
    if message.delay_level.is_some_and(|l| l > max_level) {
        return Err(ApiError::bad_request(format!(
            "delay_level must be 0 to {max_level}"
        )));
    }
    let bad_property = message
        .properties
        .keys()
        .chain(message.properties.values())
        .any(|s| s.contains(['\u{1}', '\u{2}']));
    if bad_property {
        return Err(ApiError::bad_request(
            "property names and values may not contain \\u0001 or \\u0002",
        ));
    }
    let unique_id = skiff_actors::producer::unique_id();
    let mut pairs: Vec<(String, String)> = message.properties.into_iter().collect();
    if let Some(tag) = message.tag.filter(|t| !t.is_empty()) {
        pairs.push((property::TAGS.into(), tag));
    }
    if let Some(keys) = message.keys.filter(|k| !k.trim().is_empty()) {
        pairs.push((property::KEYS.into(), keys));
    }
    if let Some(level) = message.delay_level.filter(|l| *l > 0) {
        pairs.push((property::DELAY.into(), level.to_string()));
    }
    pairs.push((property::UNIQ_KEY.into(), unique_id.clone()));
    pairs.push((property::WAIT.into(), "true".into()));
    let borrowed: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let properties = encode_properties(&borrowed);
    let body = Bytes::from(message.body.into_bytes());
    console
        .on_broker(move |broker| async move {
            let config = broker.topic(&topic)?.ok_or_else(|| {
                ApiError::not_found(format!("topic {topic} does not exist; create it first"))
            })?;
            if config.write_queue_nums == 0 || !config.is_writable() {
                return Err(ApiError::bad_request(format!(
                    "topic {topic} is not writable"
                )));
            }
            let queue_id = (rand::random::<u32>()) % config.write_queue_nums;
            let now = broker.now_ms();
            let append = MessageToAppend {
                topic: topic.clone(),
                queue_id,
                flag: 0,
                sys_flag: 0,
                born_timestamp: now,
                born_host: broker.store_host(),
                reconsume_times: 0,
                prepared_transaction_offset: 0,
                properties,
                body,
            };
            let result = send_one(&broker, append).await?;
            Ok(Json(json!({
                "msg_id": result.offset_msg_id,
                "uniq_key": unique_id,
                "queue_id": result.queue_id,
                "queue_offset": result.queue_offset,
            })))
        })
        .await
}

/// Appends one message as a producer's send would, and answers where it went.
async fn send_one(
    broker: &BrokerHandle,
    message: MessageToAppend,
) -> Result<skiff_actors::broker_api::SendResult, ApiError> {
    let sent = broker
        .send_messages(SendRequest {
            messages: vec![message],
            broker_name: None,
            auto_create_queue_nums: None,
        })
        .await?;
    sent.into_iter()
        .next()
        .ok_or_else(|| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "nothing sent"))
}

// ---- groups ----------------------------------------------------------------------------------

async fn groups(State(console): State<Console>) -> ApiResult<Value> {
    let rows = console
        .on_broker(|broker| async move {
            let mut configs = broker.groups()?;
            configs.sort_by(|a, b| a.name.cmp(&b.name));
            let mut rows = Vec::with_capacity(configs.len());
            for config in configs {
                let members = broker
                    .describe_group(&config.name)
                    .await?
                    .map_or(0, |view| view.members.len());
                let lag: u64 = broker
                    .progress(&config.name)
                    .await?
                    .iter()
                    .map(|r| r.lag)
                    .sum();
                rows.push(json!({
                    "name": config.name,
                    "members": members,
                    "lag": lag,
                    "consume_orderly": config.consume_message_orderly,
                    "retry_max_times": config.retry_max_times,
                }));
            }
            Ok(rows)
        })
        .await?;
    Ok(Json(json!({ "groups": rows })))
}

async fn group(State(console): State<Console>, Path(name): Path<String>) -> ApiResult<Value> {
    let group = name.clone();
    let (config, view, progress) = console
        .on_broker(move |broker| async move {
            let config = broker.group(&group)?;
            let view = broker.describe_group(&group).await?;
            let progress = broker.progress(&group).await?;
            Ok((config, view, progress))
        })
        .await?;
    if config.is_none() && view.is_none() && progress.is_empty() {
        return Err(ApiError::not_found(format!("group {name} does not exist")));
    }
    let queues: Vec<Value> = progress
        .iter()
        .map(|row| {
            json!({
                "topic": row.topic,
                "queue_id": row.queue_id,
                "broker_offset": row.broker_offset,
                "consumer_offset": row.consumer_offset,
                "lag": row.lag,
                "in_flight": row.in_flight,
                "last_commit_ms": row.last_commit_ms,
            })
        })
        .collect();
    let lag: u64 = progress.iter().map(|r| r.lag).sum();
    let (members, model, consume_type, subscriptions) = match &view {
        Some(view) => (
            view.members.clone(),
            Some(format!("{:?}", view.message_model).to_uppercase()),
            Some(match view.consume_type {
                skiff_actors::broker_api::ConsumeType::Passively => "CONSUME_PASSIVELY",
                skiff_actors::broker_api::ConsumeType::Actively => "CONSUME_ACTIVELY",
            }),
            view.subscriptions
                .iter()
                .map(|s| json!({ "topic": s.topic, "expression": s.expression }))
                .collect::<Vec<_>>(),
        ),
        None => (Vec::new(), None, None, Vec::new()),
    };
    Ok(Json(json!({
        "name": name,
        "members": members,
        "message_model": model,
        "consume_type": consume_type,
        "consume_orderly": config.as_ref().map(|c| c.consume_message_orderly),
        "retry_max_times": config.as_ref().map(|c| c.retry_max_times),
        "subscriptions": subscriptions,
        "queues": queues,
        "lag": lag,
        "lag_history": console.samples().lag_of(&name),
        "retry_topic": retry_topic(&name),
        "dlq_topic": dlq_topic(&name),
    })))
}

#[derive(Deserialize)]
struct Reset {
    topic: String,
    to: Value,
    #[serde(default)]
    confirm: bool,
}

async fn reset_offset(
    State(console): State<Console>,
    Path(group): Path<String>,
    ApiJson(reset): ApiJson<Reset>,
) -> ApiResult<Value> {
    if !reset.confirm {
        return Err(ApiError::bad_request(
            "resetting offsets moves where the group consumes from: send \"confirm\": true",
        ));
    }
    let target = match &reset.to {
        Value::String(s) if s == "earliest" => ResetTo::Earliest,
        Value::String(s) if s == "latest" => ResetTo::Latest,
        Value::Number(n) => match n.as_i64() {
            Some(ms) if ms >= 0 => ResetTo::Time(ms),
            _ => {
                return Err(ApiError::bad_request(
                    "to: a time is epoch milliseconds, 0 or more",
                ))
            }
        },
        other => {
            return Err(ApiError::bad_request(format!(
                "to must be \"earliest\", \"latest\" or epoch milliseconds, not {other}"
            )))
        }
    };
    let topic = reset.topic;
    let done = console
        .on_broker(move |broker| async move {
            let done = match target {
                // Time 0 finds every queue's first stored message.
                ResetTo::Earliest => broker.reset_offset_by_time(&group, &topic, 0).await?,
                ResetTo::Latest => broker.reset_offset_by_time(&group, &topic, -1).await?,
                ResetTo::Time(ms) => broker.reset_offset_by_time(&group, &topic, ms).await?,
            };
            Ok(done)
        })
        .await?;
    let queues: Vec<Value> = done
        .iter()
        .map(|(queue_id, offset)| json!({ "queue_id": queue_id, "offset": offset }))
        .collect();
    Ok(Json(json!({ "queues": queues })))
}

#[derive(Clone, Copy)]
enum ResetTo {
    Earliest,
    Latest,
    Time(i64),
}

// ---- dead letters ---------------------------------------------------------------------------

/// Sends a dead letter back to the topic it was first sent to (its `RETRY_TOPIC` property),
/// as a new message with the same body, keys and properties and no reconsume count, so the
/// group consumes it again. The dead letter stays where it is.
async fn resend_dead_letter(
    broker: &BrokerHandle,
    letter: &StoredMessage,
) -> Result<Value, ApiError> {
    if !letter
        .topic
        .starts_with(skiff_actors::logic::delay::DLQ_TOPIC_PREFIX)
    {
        return Err(ApiError::bad_request(format!(
            "message {} is in {}, not a dead-letter topic",
            letter.offset_msg_id(),
            letter.topic
        )));
    }
    let Some(original) = letter.property(property::RETRY_TOPIC).map(str::to_owned) else {
        return Err(ApiError::bad_request(format!(
            "dead letter {} does not name the topic it came from (no RETRY_TOPIC)",
            letter.offset_msg_id()
        )));
    };
    let config = broker
        .topic(&original)?
        .ok_or_else(|| ApiError::not_found(format!("topic {original} does not exist")))?;
    let append = MessageToAppend {
        topic: original.clone(),
        queue_id: letter.queue_id % config.write_queue_nums.max(1),
        reconsume_times: 0,
        properties: skiff_storage::message::without_properties(
            &letter.properties,
            &[
                property::RETRY_TOPIC,
                property::DELAY,
                property::REAL_TOPIC,
                property::REAL_QID,
                property::ORIGIN_MESSAGE_ID,
            ],
        ),
        ..MessageToAppend::copy_of(letter)
    };
    let result = send_one(broker, append).await?;
    Ok(json!({
        "from": letter.offset_msg_id(),
        "topic": original,
        "msg_id": result.offset_msg_id,
        "queue_id": result.queue_id,
        "queue_offset": result.queue_offset,
    }))
}

async fn resend_one(State(console): State<Console>, Path(id): Path<String>) -> ApiResult<Value> {
    if crate::remoting::wire::physical_offset_of(&id).is_none() {
        return Err(ApiError::bad_request(format!(
            "{id:?} is not an offset message id"
        )));
    }
    console
        .on_broker(move |broker| async move {
            let letter = by_offset_id(&broker, &id)?
                .ok_or_else(|| ApiError::not_found(format!("no message has id {id}")))?;
            Ok(Json(resend_dead_letter(&broker, &letter).await?))
        })
        .await
}

#[derive(Deserialize)]
struct Confirmed {
    #[serde(default)]
    confirm: bool,
}

/// Every dead letter of the group, each sent back once.
async fn resend_dead_letters(
    State(console): State<Console>,
    Path(group): Path<String>,
    ApiJson(confirmed): ApiJson<Confirmed>,
) -> ApiResult<Value> {
    if !confirmed.confirm {
        return Err(ApiError::bad_request(
            "resending every dead letter delivers them all again: send \"confirm\": true",
        ));
    }
    console
        .on_broker(move |broker| async move {
            let topic = dlq_topic(&group);
            let Some(config) = broker.topic(&topic)? else {
                return Ok(Json(json!({ "resent": [] })));
            };
            let mut resent = Vec::new();
            for queue in 0..config.read_queue_nums.max(config.write_queue_nums) {
                let reader = broker.reader();
                let mut offset = reader.min_offset(&topic, queue);
                let end = reader.max_offset(&topic, queue);
                while offset < end {
                    let read = reader.read(&topic, queue, offset, 32, 1 << 20, None)?;
                    let letters = decode_records(read.records).map_err(|e| {
                        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error_chain(&e))
                    })?;
                    if letters.is_empty() {
                        break;
                    }
                    for letter in &letters {
                        resent.push(resend_dead_letter(&broker, letter).await?);
                    }
                    offset = read.next_begin_offset.max(offset + 1);
                }
            }
            Ok(Json(json!({ "resent": resent })))
        })
        .await
}

// ---- messages --------------------------------------------------------------------------------

fn summary(message: &StoredMessage) -> Value {
    json!({
        "msg_id": message.offset_msg_id(),
        "uniq_key": message.property(property::UNIQ_KEY),
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "tags": message.property(property::TAGS),
        "keys": message.property(property::KEYS),
        "born_ms": message.born_timestamp,
        "store_ms": message.store_timestamp,
        "body_size": message.body.len(),
    })
}

#[derive(Deserialize)]
struct Browse {
    topic: String,
    queue: Option<String>,
    from: Option<String>,
    count: Option<String>,
    key: Option<String>,
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

async fn browse(
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

/// The stored message whose offset message id is `id` (a producer's id has the same shape, so
/// the message found at that offset must carry `id` as its own).
fn by_offset_id(broker: &BrokerHandle, id: &str) -> Result<Option<StoredMessage>, ApiError> {
    let Some(physical) = crate::remoting::wire::physical_offset_of(id) else {
        return Ok(None);
    };
    Ok(broker
        .reader()
        .read_by_physical_offset(physical)?
        .filter(|m| m.offset_msg_id().eq_ignore_ascii_case(id)))
}

/// The messages of `topic` the key index holds under `key` (a `KEYS` entry or a `UNIQ_KEY`),
/// the newest first, at most `max`.
async fn indexed(
    broker: &BrokerHandle,
    topic: &str,
    key: &str,
    max: usize,
) -> Result<Vec<StoredMessage>, ApiError> {
    let found = broker.query_by_key(topic, key, 0, i64::MAX, max).await?;
    Ok(found
        .records
        .into_iter()
        .filter_map(|record| decode_records(record).ok())
        .flatten()
        .collect())
}

#[derive(Deserialize)]
struct MessageQuery {
    topic: Option<String>,
}

/// A message by its offset message id, or by the id its producer gave it (`UNIQ_KEY`) within
/// `?topic=`.
async fn message(
    State(console): State<Console>,
    user: Option<Extension<ConsoleUser>>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<MessageQuery>,
) -> ApiResult<Value> {
    let physical = crate::remoting::wire::physical_offset_of(&id);
    let topic = query.topic.filter(|t| !t.is_empty());
    if physical.is_none() && topic.is_none() {
        return Err(ApiError::bad_request(format!(
            "{id:?} is not an offset message id (32 hex digits of the store's address and \
             offset); to find a message by its producer's id, name its topic (?topic=)"
        )));
    }
    if let Some(topic) = &topic {
        may_read(user.as_deref(), topic)?;
    }
    let message = console
        .on_broker(move |broker| async move {
            // A producer's id has the shape of an offset id too: it is looked up as one first,
            // then, when that names no message of its own id, by key in the topic.
            let mut found = match physical {
                Some(_) => by_offset_id(&broker, &id)?,
                None => None,
            };
            if let (None, Some(topic)) = (&found, topic) {
                found = indexed(&broker, &topic, &id, 32)
                    .await?
                    .into_iter()
                    .find(|m| m.property(property::UNIQ_KEY) == Some(id.as_str()));
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
            Ok((message, consumed_by))
        })
        .await?;
    let (message, consumed_by) = message;
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
    Ok(Json(detail))
}

#[derive(Deserialize)]
struct TraceQuery {
    trace_topic: Option<String>,
}

/// The trace events the clients recorded for a message (by its producer's id, or its offset id
/// when it is stored here), oldest first.
async fn traces(
    State(console): State<Console>,
    user: Option<Extension<ConsoleUser>>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<TraceQuery>,
) -> ApiResult<Value> {
    let trace_topic = query
        .trace_topic
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| super::traces::DEFAULT_TRACE_TOPIC.to_owned());
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
                    events.extend(super::traces::events_of(body, key));
                }
            }
            Ok(super::traces::in_order(events))
        })
        .await?;
    Ok(Json(json!({
        "msg_id": id,
        "trace_topic": trace_topic,
        "events": events,
    })))
}

async fn tail(
    State(console): State<Console>,
    user: Option<Extension<ConsoleUser>>,
    Path(topic): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    may_read(user.as_deref(), &topic)?;
    let name = topic.clone();
    let queues = console
        .on_broker(move |broker| async move {
            let Some(config) = broker.topic(&name)? else {
                return Err(ApiError::not_found(format!("topic {name} does not exist")));
            };
            let reader = broker.reader();
            Ok((0..config.read_queue_nums.max(config.write_queue_nums))
                .map(|q| (q, reader.max_offset(&name, q)))
                .collect::<Vec<_>>())
        })
        .await?;
    let (events, receiver) = tokio::sync::mpsc::channel::<Event>(64);
    tokio::spawn(follow(console, topic, queues, events));
    let stream = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::ReceiverStream::new(receiver),
        Ok::<Event, Infallible>,
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// Sends each message stored in `topic` after `positions` until the page goes away.
async fn follow(
    console: Console,
    topic: String,
    mut positions: Vec<(u32, u64)>,
    events: tokio::sync::mpsc::Sender<Event>,
) {
    let mut poll = tokio::time::interval(TAIL_POLL);
    loop {
        tokio::select! {
            () = events.closed() => return,
            _ = poll.tick() => {}
        }
        let name = topic.clone();
        let from = positions.clone();
        let read = console
            .on_broker(move |broker| async move {
                let reader = broker.reader();
                let mut found = Vec::new();
                let mut next = Vec::with_capacity(from.len());
                for (queue, offset) in from {
                    let read = reader.read(&name, queue, offset, 32, 1 << 20, None)?;
                    if let Ok(messages) = decode_records(read.records) {
                        found.extend(messages.iter().map(summary));
                    }
                    next.push((queue, read.next_begin_offset.max(offset)));
                }
                Ok((found, next))
            })
            .await;
        let Ok((found, next)) = read else {
            // A busy or stopping broker: the page sees the stream end and may reopen it.
            return;
        };
        positions = next;
        for message in found {
            let event = Event::default().event("message").data(message.to_string());
            if events.send(event).await.is_err() {
                return;
            }
        }
    }
}
