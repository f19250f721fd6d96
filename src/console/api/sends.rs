//! `POST /topics/{name}/messages`: the console's test message, appended as a producer's send
//! would be, and [`send_one`], the append the dead-letter resend shares with it.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};

use skiff_actors::broker::{BrokerHandle, ClientSend};
use skiff_actors::logic::sends::QueueChoice;
use skiff_storage::message::{encode_properties, property, MessageToAppend};

use super::{ApiError, ApiJson, ApiResult};
use crate::console::Console;

#[derive(Deserialize)]
pub(super) struct TestMessage {
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

pub(super) async fn send_message(
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
            // A console send makes no topic: a typo must not create one.
            if broker.topic(&topic)?.is_none() {
                return Err(ApiError::not_found(format!(
                    "topic {topic} does not exist; create it first"
                )));
            }
            let now = broker.now_ms();
            let append = MessageToAppend {
                topic: topic.clone(),
                queue_id: 0,
                flag: 0,
                sys_flag: 0,
                born_timestamp: now,
                born_host: broker.store_host(),
                reconsume_times: 0,
                prepared_transaction_offset: 0,
                properties,
                body,
            };
            let result = send_one(&broker, append, QueueChoice::Random).await?;
            Ok(Json(json!({
                "msg_id": result.offset_msg_id,
                "uniq_key": unique_id,
                "queue_id": result.queue_id,
                "queue_offset": result.queue_offset,
            })))
        })
        .await
}

/// Sends one message as a producer's send is sent (the broker's checks, the queue `queue`
/// names), and answers where it went.
pub(super) async fn send_one(
    broker: &BrokerHandle,
    message: MessageToAppend,
    queue: QueueChoice,
) -> Result<skiff_actors::broker_api::SendResult, ApiError> {
    let sent = broker
        .send(ClientSend {
            messages: vec![message],
            queue,
            batch: false,
            auto_create_queue_nums: None,
        })
        .await?;
    sent.into_iter()
        .next()
        .ok_or_else(|| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "nothing sent"))
}
