//! The body of LIST_LITE_TOPICS, skiff's own request (RocketMQ 5.5 lists no lite topics): a
//! page of a parent's lite topics, as `skiff admin lite` reads it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::JsonBody;

/// A page of a parent's lite topics, by name.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiteTopicListBody {
    pub parent_topic: String,
    /// Lite topics the parent has in all.
    pub total: u64,
    /// The groups bound to the parent (`lite.bind.topic`).
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub lite_topics: Vec<LiteTopicEntry>,
    /// The name to ask the next page after; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
}

/// One lite topic of a [`LiteTopicListBody`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiteTopicEntry {
    pub lite_topic: String,
    pub min_offset: u64,
    pub max_offset: u64,
    pub last_update_timestamp: i64,
    /// (client id, group) of each client subscribing it.
    #[serde(default)]
    pub subscribers: Vec<LiteSubscriber>,
    /// Messages not consumed, by bound group.
    #[serde(default)]
    pub lag: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiteSubscriber {
    pub client_id: String,
    pub group: String,
}

impl JsonBody for LiteTopicListBody {
    const KIND: &'static str = "LiteTopicList";
}
