//! Topics: `GET /topics` (every topic with its queues, permission, type and message count),
//! `POST /topics` (create), `GET /topics/{name}` (its queues and the groups that consume it) and
//! `DELETE /topics/{name}`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use skiff_actors::broker::BrokerHandle;
use skiff_actors::logic::names;
use skiff_storage::metadata::{TopicConfig, TopicMessageType, PERM_READ, PERM_WRITE};

use super::{ApiError, ApiJson, ApiResult};
use crate::console::Console;

/// Queues a created topic may have.
const MAX_QUEUES: u32 = 1024;

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

pub(super) async fn topics(State(console): State<Console>) -> ApiResult<Value> {
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
pub(super) struct NewTopic {
    name: String,
    #[serde(default)]
    queues: Option<u32>,
    #[serde(default)]
    message_type: Option<String>,
}

pub(super) async fn create_topic(
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
                let known = "NORMAL, FIFO, DELAY, TRANSACTION, PRIORITY or LITE";
                return Err(ApiError::bad_request(format!(
                    "message type {text:?} is not {known}"
                )));
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

pub(super) async fn delete_topic(
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

pub(super) async fn topic(
    State(console): State<Console>,
    Path(name): Path<String>,
) -> ApiResult<Value> {
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

fn perm_text(perm: u32) -> &'static str {
    match (perm & PERM_READ != 0, perm & PERM_WRITE != 0) {
        (true, true) => "RW",
        (true, false) => "R",
        (false, true) => "W",
        (false, false) => "-",
    }
}
