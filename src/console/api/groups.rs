//! Consumer groups: `GET /groups` (each with members and lag), `GET /groups/{name}` (its
//! members, subscriptions and per-queue progress) and `POST /groups/{name}/reset-offset`.

use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use skiff_actors::logic::delay::{dlq_topic, retry_topic};

use super::{ApiError, ApiJson, ApiResult};
use crate::console::Console;

pub(super) async fn groups(State(console): State<Console>) -> ApiResult<Value> {
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

pub(super) async fn group(
    State(console): State<Console>,
    Path(name): Path<String>,
) -> ApiResult<Value> {
    let group = name.clone();
    let (config, view, progress, member_details) = console
        .on_broker(move |broker| async move {
            let config = broker.group(&group)?;
            let view = broker.describe_group(&group).await?;
            let progress = broker.progress(&group).await?;
            let members = match &view {
                Some(view) => {
                    let topics: Vec<String> =
                        view.subscriptions.iter().map(|s| s.topic.clone()).collect();
                    super::members::describe(&broker, &view.members, view.message_model, &topics)?
                }
                None => Vec::new(),
            };
            Ok((config, view, progress, members))
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
        "member_details": member_details,
        "message_model": model,
        "consume_type": consume_type,
        "config": config.as_ref().map(super::group_admin::config_json),
        "consume_orderly": config.as_ref().map(|c| c.consume_message_orderly),
        "retry_max_times": config.as_ref().map(|c| c.retry_max_times),
        "subscriptions": subscriptions,
        "queues": queues,
        "lag": lag,
        "lag_history": console.samples().lag_of(&name),
        // Samples live in memory: a restart starts the history again, which the page says.
        "history_since_ms": history_since_ms(&console),
        "retry_topic": retry_topic(&name),
        "dlq_topic": dlq_topic(&name),
    })))
}

/// When the console began sampling (this process's start), in epoch milliseconds.
fn history_since_ms(console: &Console) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    u64::try_from(now.saturating_sub(console.started.elapsed().as_millis())).unwrap_or(u64::MAX)
}

#[derive(Deserialize)]
pub(super) struct Reset {
    topic: String,
    to: Value,
    #[serde(default)]
    confirm: bool,
}

pub(super) async fn reset_offset(
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
