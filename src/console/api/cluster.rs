//! `GET /cluster` (the node: its names, addresses and running configuration, secrets left out)
//! and `GET /producers` (every registered producer with what its client said of itself).

use axum::extract::State;
use axum::Json;
use serde_json::{json, Map, Value};

use super::ApiResult;
use crate::console::Console;

/// Setting names whose value is never shown, at any depth: the ACL's accounts hold secret keys,
/// and a name that says secret, password or token is one.
fn is_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name == "acl"
        || name == "accounts"
        || ["secret", "password", "token", "credential"]
            .iter()
            .any(|word| name.contains(word))
}

/// `settings` (a node configuration as JSON) without its secrets: each secret's value replaced
/// by a note that it is set, so the page shows what is configured and never the value.
pub fn without_secrets(settings: Value) -> Value {
    match settings {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(name, value)| {
                    let value = if is_secret(&name) {
                        json!("(set; not shown)")
                    } else {
                        without_secrets(value)
                    };
                    (name, value)
                })
                .collect::<Map<String, Value>>(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_secrets).collect()),
        other => other,
    }
}

pub(super) async fn cluster(State(console): State<Console>) -> ApiResult<Value> {
    let (broker_config, started_ms) = console
        .on_broker(|broker| async move {
            let config = broker.config();
            let broker_config = json!({
                "listen_addr": config.listen_addr,
                "default_topic_queue_nums": config.default_topic_queue_nums,
                "auto_create_topic": config.auto_create_topic,
                "auto_create_subscription_group": config.auto_create_subscription_group,
                "max_pull_messages": config.max_pull_messages,
                "max_pull_bytes": config.max_pull_bytes,
                "long_polling": config.long_polling,
                "key_index": config.key_index,
            });
            Ok((broker_config, broker.now_ms()))
        })
        .await?;
    let acl = console.acl.current();
    let info = &console.info;
    let uptime_ms = u64::try_from(console.started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "broker_name": info.broker_name,
        "cluster_name": info.cluster_name,
        "listen": info.listen,
        "started_ms": u64::try_from(started_ms).unwrap_or(0).saturating_sub(uptime_ms),
        "uptime_ms": uptime_ms,
        "acl": { "on": acl.is_on(), "accounts": acl.account_count() },
        "broker": broker_config,
        "settings": without_secrets(info.settings.clone()),
    })))
}

pub(super) async fn producers(State(console): State<Console>) -> ApiResult<Value> {
    let rows = console
        .on_broker(|broker| async move {
            let connections = broker.connections();
            let mut rows = Vec::new();
            for group in connections.producer_groups() {
                for (client_id, d) in connections.producer_descriptions(&group) {
                    rows.push(json!({
                        "group": group,
                        "client_id": client_id,
                        "address": d.address,
                        "language": d.language,
                        "version": d.version,
                        "protocol": d.protocol,
                    }));
                }
            }
            Ok(rows)
        })
        .await?;
    Ok(Json(json!({ "producers": rows })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_replaced_at_any_depth_and_the_rest_kept() {
        let settings = json!({
            "broker_name": "b",
            "acl": { "accounts": [{ "access_key": "k", "secret_key": "s3cr3t" }] },
            "nested": { "db_password": "hunter2", "port": 1, "list": [{ "api_token": "t" }] },
        });
        let shown = without_secrets(settings).to_string();
        for secret in ["s3cr3t", "hunter2", "\"t\"", "access_key"] {
            assert!(!shown.contains(secret), "{secret} shown in {shown}");
        }
        assert!(shown.contains("\"broker_name\":\"b\"") && shown.contains("\"port\":1"));
    }
}
