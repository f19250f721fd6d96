//! Group configuration: `POST /groups` (create), `PUT /groups/{name}` (change) and
//! `DELETE /groups/{name}`, through the broker calls UPDATE_AND_CREATE_SUBSCRIPTIONGROUP and
//! DELETE_SUBSCRIPTIONGROUP reach ([`BrokerHandle::put_group`], [`BrokerHandle::remove_group`])
//! and the same name check ([`names::group_name_problem`]).
//!
//! [`BrokerHandle::put_group`]: skiff_actors::broker::BrokerHandle::put_group
//! [`BrokerHandle::remove_group`]: skiff_actors::broker::BrokerHandle::remove_group

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use skiff_actors::logic::names;
use skiff_storage::metadata::SubscriptionGroupConfig;

use super::{ApiError, ApiJson, ApiQuery, ApiResult};
use crate::console::Console;

/// The settings a request may give; those it leaves out keep their value (a new group's are
/// RocketMQ's defaults).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct GroupSettings {
    #[serde(default)]
    name: Option<String>,
    retry_max_times: Option<u32>,
    retry_queue_nums: Option<u32>,
    consume_orderly: Option<bool>,
    consume_broadcast_enable: Option<bool>,
    consume_from_min_enable: Option<bool>,
}

impl GroupSettings {
    fn apply(&self, config: &mut SubscriptionGroupConfig) {
        if let Some(v) = self.retry_max_times {
            config.retry_max_times = v;
        }
        if let Some(v) = self.retry_queue_nums {
            config.retry_queue_nums = v;
        }
        if let Some(v) = self.consume_orderly {
            config.consume_message_orderly = v;
        }
        if let Some(v) = self.consume_broadcast_enable {
            config.consume_broadcast_enable = v;
        }
        if let Some(v) = self.consume_from_min_enable {
            config.consume_from_min_enable = v;
        }
    }
}

/// A group's configuration as the API shows it.
pub(super) fn config_json(config: &SubscriptionGroupConfig) -> Value {
    json!({
        "name": config.name,
        "retry_max_times": config.retry_max_times,
        "retry_queue_nums": config.retry_queue_nums,
        "consume_orderly": config.consume_message_orderly,
        "consume_broadcast_enable": config.consume_broadcast_enable,
        "consume_from_min_enable": config.consume_from_min_enable,
    })
}

pub(super) async fn create_group(
    State(console): State<Console>,
    ApiJson(settings): ApiJson<GroupSettings>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let name = settings.name.clone().unwrap_or_default().trim().to_owned();
    if let Some(problem) = names::group_name_problem(&name) {
        return Err(ApiError::bad_request(format!(
            "{name:?} is not a valid group name: {problem}"
        )));
    }
    let config = console
        .on_broker(move |broker| async move {
            if broker.group(&name)?.is_some() {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!("group {name} exists"),
                ));
            }
            let mut config = SubscriptionGroupConfig::new(name);
            settings.apply(&mut config);
            broker.put_group(&config)?;
            Ok(config)
        })
        .await?;
    Ok((StatusCode::CREATED, Json(config_json(&config))))
}

pub(super) async fn update_group(
    State(console): State<Console>,
    Path(name): Path<String>,
    ApiJson(settings): ApiJson<GroupSettings>,
) -> ApiResult<Value> {
    if settings.name.as_ref().is_some_and(|n| *n != name) {
        return Err(ApiError::bad_request(
            "a group cannot be renamed: create the new one and delete this one",
        ));
    }
    let config = console
        .on_broker(move |broker| async move {
            let Some(mut config) = broker.group(&name)? else {
                return Err(ApiError::not_found(format!(
                    "group {name} has no configuration to change (create it first)"
                )));
            };
            settings.apply(&mut config);
            broker.put_group(&config)?;
            Ok(config)
        })
        .await?;
    Ok(Json(config_json(&config)))
}

#[derive(Deserialize)]
pub(super) struct DeleteQuery {
    /// Also forget the group's consumer offsets (and its popped messages).
    clean_offsets: Option<bool>,
}

pub(super) async fn delete_group(
    State(console): State<Console>,
    Path(name): Path<String>,
    ApiQuery(query): ApiQuery<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    let clean = query.clean_offsets.unwrap_or(false);
    console
        .on_broker(move |broker| async move {
            if broker.remove_group(&name, clean).await? {
                Ok(StatusCode::NO_CONTENT)
            } else {
                Err(ApiError::not_found(format!("group {name} does not exist")))
            }
        })
        .await
}
