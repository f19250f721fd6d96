//! `GET /overview`: the node at a glance: version, uptime, disk, connections by protocol and
//! language, topic and group counts, and the last hour's rates.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use serde_json::{json, Value};

use super::ApiResult;
use crate::console::Console;

#[derive(Serialize)]
pub(super) struct Overview {
    version: &'static str,
    broker_name: String,
    cluster_name: String,
    uptime_ms: u64,
    listen: String,
    disk: Value,
    connections: Value,
    topics: usize,
    groups: usize,
    rates: Vec<crate::console::samples::Rate>,
}

pub(super) async fn overview(State(console): State<Console>) -> ApiResult<Overview> {
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
