//! A LITE parent's lite topics: `GET /topics/{name}/lite?after=&limit=`, a page by name with
//! offsets, last write, subscribing clients and each bound group's lag (what `skiff admin lite`
//! shows, read from the same `BrokerHandle::lite_topics_page`).

use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use skiff_storage::metadata::TopicMessageType;

use super::{ApiError, ApiQuery, ApiResult};
use crate::console::Console;

#[derive(Deserialize)]
pub(super) struct LitePage {
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

pub(super) async fn lite_topics(
    State(console): State<Console>,
    Path(name): Path<String>,
    ApiQuery(query): ApiQuery<LitePage>,
) -> ApiResult<Value> {
    let limit = query.limit.unwrap_or(50);
    if limit == 0 {
        return Err(ApiError::bad_request("limit must be at least 1"));
    }
    console
        .on_broker(move |broker| async move {
            let Some(config) = broker.topic(&name)? else {
                return Err(ApiError::not_found(format!("topic {name} does not exist")));
            };
            if config.message_type != Some(TopicMessageType::Lite) {
                return Err(ApiError::bad_request(format!(
                    "topic {name} is not a LITE topic"
                )));
            }
            let after = query.after.as_deref().filter(|a| !a.is_empty());
            let page = broker.lite_topics_page(&config, after, limit).await?;
            let groups = page.groups;
            let rows: Vec<Value> = page
                .rows
                .into_iter()
                .map(|row| {
                    json!({
                        "lite_topic": row.lite,
                        "min_offset": row.min_offset,
                        "max_offset": row.max_offset,
                        "last_update_ms": row.last_update_ms,
                        "subscribers": row.subscribers.iter()
                            .map(|(client, group)| json!({"client_id": client, "group": group}))
                            .collect::<Vec<_>>(),
                        "lag": groups.iter().zip(&row.lags)
                            .map(|(g, lag)| (g.clone(), json!(lag)))
                            .collect::<serde_json::Map<_, _>>(),
                    })
                })
                .collect();
            Ok(Json(json!({
                "parent": page.parent,
                "total": page.total,
                "groups": groups,
                "lite_topics": rows,
                "next_after": page.next_after,
            })))
        })
        .await
}
