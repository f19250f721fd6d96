//! Idle lite topics expire: every `check_interval` the message store actor looks for lite
//! queues (`%LMQ%$parent$lite`, queue 0) of parents that set `lite.topic.expiration` whose
//! newest message is older than that ([`LiteExpiry::expired`]), deletes the queues from the
//! store ([`MessageStore::delete_queues`]: the next message starts one again at offset 0) and
//! answers their names, whose group offsets the actor then has removed. Like Java's
//! `LiteLifecycleManager`, subscriptions and backlog keep no lite topic alive, and a client
//! still subscribed is not told (it keeps the name; a new message brings the topic back).

use std::collections::BTreeMap;
use std::time::Duration;

use skiff_storage::metadata::TopicMessageType;
use skiff_storage::store::MessageStore;

use crate::broker::registry::Registry;
use crate::broker_api::BrokerError;
use crate::logic::attributes::lite_topic_expiration;
use crate::logic::lite::{lmq_name, LiteExpiry};

/// Deletes the lite queues that expired at `now_ms`, the broker up since `up_since_ms`;
/// answers their topic names.
pub(crate) fn expire_idle(
    store: &mut MessageStore,
    registry: &Registry,
    expiry: &LiteExpiry,
    now_ms: i64,
    up_since_ms: i64,
) -> Result<Vec<String>, BrokerError> {
    let ttls: BTreeMap<String, Duration> = registry
        .topics()?
        .into_iter()
        .filter(|t| t.message_type == Some(TopicMessageType::Lite))
        .filter_map(|t| Some((t.name.clone(), lite_topic_expiration(&t.attributes)?)))
        .collect();
    if ttls.is_empty() {
        return Ok(Vec::new());
    }
    let reader = store.reader();
    let mut expired = Vec::new();
    for (parent, ttl) in &ttls {
        // A lite topic is queue 0 of its own topic.
        for topic in reader.topics_with_queue(&lmq_name(parent, ""), 0)? {
            let newest = reader.newest_store_timestamp(&topic, 0)?;
            if expiry.expired(*ttl, newest, now_ms, up_since_ms) {
                expired.push((topic, 0));
            }
        }
    }
    if expired.is_empty() {
        return Ok(Vec::new());
    }
    store.delete_queues(&expired)?;
    tracing::info!(lite_topics = expired.len(), "idle lite topics expired");
    Ok(expired.into_iter().map(|(topic, _)| topic).collect())
}
