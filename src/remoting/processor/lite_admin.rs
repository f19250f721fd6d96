//! RocketMQ 5.5's lite admin requests (GET_BROKER_LITE_INFO 200074 ... TRIGGER_LITE_DISPATCH
//! 200079), as `mqadmin getParentTopicInfo`, `getLiteTopicInfo`, `getLiteClientInfo`,
//! `getLiteGroupInfo`, `getBrokerLiteInfo` and `triggerLiteDispatch` send them, answered with
//! Java's bodies (`GetParentTopicInfoResponseBody` ...) and refusals. What they read is the
//! broker's ([`skiff_actors::broker::lite::admin`]).

use bytes::Bytes;
use serde_json::{json, Value};
use std::collections::BTreeMap;

use super::refusal::broker_failure;
use super::{code, rc, success, Failure, Outcome, Processor};
use crate::remoting::body::lite::{LiteSubscriber, LiteTopicEntry, LiteTopicListBody};
use crate::remoting::body::JsonBody;
use crate::remoting::RemotingCommand;
use skiff_actors::broker::lite::admin::LiteTopicPage;
use skiff_actors::logic::attributes::lite_topic_expiration;
use skiff_actors::logic::lite::{lmq_name, BIND_TOPIC, LMQ_PREFIX};
use skiff_storage::metadata::{SubscriptionGroupConfig, TopicConfig, TopicMessageType};

/// Most lite topics GET_LITE_CLIENT_INFO lists (Java's cap).
const MAX_CLIENT_LITE_TOPICS: usize = 10_000;

impl Processor {
    /// One of the lite admin requests.
    pub(super) async fn lite_admin(&self, request: &RemotingCommand) -> Outcome {
        let field = |name: &str| request.ext(name).unwrap_or("");
        let number = |name: &str, default: usize| {
            request
                .ext(name)
                .and_then(|v| v.parse::<i64>().ok())
                .map_or(Ok(default), |n| {
                    usize::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
                        Failure::new(code::INVALID_PARAMETER, format!("[{name}] field invalid"))
                    })
                })
        };
        let body = match request.code {
            rc::GET_BROKER_LITE_INFO => self.broker_lite_info()?,
            rc::GET_PARENT_TOPIC_INFO => {
                let parent = self.lite_parent(field("topic"))?;
                let info = self
                    .broker
                    .parent_topic_info(&parent)
                    .map_err(broker_failure)?;
                let mut body = json!({
                    "topic": info.topic,
                    "ttl": info.ttl_minutes,
                    "lmqNum": info.all_lite_topics,
                    "liteTopicCount": info.lite_topics,
                });
                if !info.groups.is_empty() {
                    body["groups"] = json!(info.groups);
                }
                body
            }
            rc::GET_LITE_TOPIC_INFO => {
                let parent = self.lite_parent(field("parentTopic"))?;
                let info = self
                    .broker
                    .lite_topic_info(&parent.name, field("liteTopic"))
                    .map_err(broker_failure)?;
                json!({
                    "parentTopic": info.parent,
                    "liteTopic": info.lite,
                    "subscriber": info.subscribers.iter()
                        .map(|(client, group)| json!({"clientId": client, "group": group}))
                        .collect::<Vec<_>>(),
                    "topicOffset": {
                        "minOffset": info.min_offset,
                        "maxOffset": info.max_offset,
                        "lastUpdateTimestamp": info.last_update_ms,
                    },
                    // One broker holds every lite topic.
                    "shardingToBroker": true,
                })
            }
            rc::GET_LITE_CLIENT_INFO => {
                let parent = self.lite_parent(field("parentTopic"))?;
                let group = self.lite_group_config(field("group"))?;
                if group.attributes.get(BIND_TOPIC) != Some(&parent.name) {
                    return Err(Failure::new(
                        code::INVALID_PARAMETER,
                        format!("Subscription [{}]-[{}] not match.", group.name, parent.name),
                    ));
                }
                let max = number("maxCount", 1000)?.min(MAX_CLIENT_LITE_TOPICS);
                let lites =
                    self.broker
                        .lite_client_info(&parent.name, &group.name, field("clientId"), max);
                json!({
                    "parentTopic": parent.name,
                    "group": group.name,
                    "clientId": field("clientId"),
                    // skiff's lite receives ask the store directly: no event set is polled.
                    "lastAccessTime": -1,
                    "lastConsumeTime": 0,
                    "liteTopicCount": lites.as_ref().map_or(-1, |l| l.len() as i64),
                    "liteTopicSet": lites.unwrap_or_default().iter()
                        .map(|l| lmq_name(&parent.name, l))
                        .collect::<Vec<_>>(),
                })
            }
            rc::GET_LITE_GROUP_INFO => {
                let group = self.lite_group_config(field("group"))?;
                let parent = group.attributes.get(BIND_TOPIC).cloned().ok_or_else(|| {
                    Failure::new(
                        code::INVALID_PARAMETER,
                        format!("Group [{}] is not a LITE group.", group.name),
                    )
                })?;
                let lite = Some(field("liteTopic")).filter(|l| !l.is_empty());
                let top = number("topK", 20)?;
                let info = self
                    .broker
                    .lite_group_info(&group.name, &parent, lite, top)
                    .await
                    .map_err(broker_failure)?;
                let mut body = json!({
                    "group": info.group,
                    "parentTopic": info.parent,
                    "earliestUnconsumedTimestamp": info.earliest_unconsumed_ms,
                    "totalLagCount": info.total_lag,
                    "lagCountTopK": info.lag_top.iter()
                        .map(|(lite, lag)| json!({
                            "liteTopic": lite,
                            "lagCount": lag,
                            "earliestUnconsumedTimestamp": -1,
                        }))
                        .collect::<Vec<_>>(),
                    "lagTimestampTopK": [],
                });
                if let Some(lite) = &info.lite {
                    body["liteTopic"] = json!(lite);
                }
                if let Some(offset) = &info.offset {
                    body["liteTopicOffsetWrapper"] = json!({
                        "brokerOffset": offset.broker_offset,
                        "consumerOffset": offset.consumer_offset,
                        "pullOffset": offset.consumer_offset,
                        "lastTimestamp": offset.last_consumed_ms,
                    });
                }
                body
            }
            rc::LIST_LITE_TOPICS => {
                let parent = self.lite_parent(field("parentTopic"))?;
                let after = Some(field("after")).filter(|a| !a.is_empty());
                let page = self
                    .broker
                    .lite_topics_page(&parent, after, number("limit", 100)?)
                    .await
                    .map_err(broker_failure)?;
                let mut response = success();
                response.body = Bytes::from(lite_page_body(page).encode());
                return Ok(response);
            }
            // skiff's lite receives wait on the store and on subscription changes, not on an
            // event set to dispatch: there is nothing to trigger, only the group to check.
            rc::TRIGGER_LITE_DISPATCH => {
                let group = self.lite_group_config(field("group"))?;
                if !group.attributes.contains_key(BIND_TOPIC) {
                    return Err(Failure::new(
                        code::INVALID_PARAMETER,
                        format!("Group [{}] is not a LITE group.", group.name),
                    ));
                }
                return Ok(success());
            }
            other => {
                return Err(Failure::system(format!(
                    "request code {other} is not a lite admin request"
                )))
            }
        };
        let mut response = success();
        response.body = Bytes::from(body.to_string());
        Ok(response)
    }

    /// The LITE topic `name`, refused as Java refuses a missing or other topic.
    fn lite_parent(&self, name: &str) -> Result<TopicConfig, Failure> {
        let config = self
            .broker
            .topic(name)
            .map_err(broker_failure)?
            .ok_or_else(|| {
                Failure::new(code::TOPIC_NOT_EXIST, format!("Topic [{name}] not exist."))
            })?;
        if config.message_type != Some(TopicMessageType::Lite) {
            return Err(Failure::new(
                code::INVALID_PARAMETER,
                format!("Topic [{name}] type not match."),
            ));
        }
        Ok(config)
    }

    fn lite_group_config(&self, name: &str) -> Result<SubscriptionGroupConfig, Failure> {
        self.broker
            .group(name)
            .map_err(broker_failure)?
            .ok_or_else(|| {
                Failure::new(
                    code::SUBSCRIPTION_GROUP_NOT_EXIST,
                    format!("Group [{name}] not exist."),
                )
            })
    }

    /// GET_BROKER_LITE_INFO: the broker's lite topics, subscriptions, parents and groups.
    fn broker_lite_info(&self) -> Result<Value, Failure> {
        let lite_topics = self
            .broker
            .reader()
            .queues()
            .map_err(|e| Failure::system(crate::error_text::error_chain(&e)))?
            .iter()
            .filter(|(t, _)| t.starts_with(LMQ_PREFIX))
            .count();
        let parents: Vec<TopicConfig> = self
            .broker
            .topics()
            .map_err(broker_failure)?
            .into_iter()
            .filter(|t| t.message_type == Some(TopicMessageType::Lite))
            .collect();
        let mut group_meta: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for group in self.broker.groups().map_err(broker_failure)? {
            if let Some(parent) = group.attributes.get(BIND_TOPIC) {
                group_meta
                    .entry(parent.clone())
                    .or_default()
                    .push(group.name);
            }
        }
        let topic_meta: BTreeMap<String, i64> = parents
            .iter()
            .map(|t| {
                let ttl =
                    lite_topic_expiration(&t.attributes).map_or(-1, |d| (d.as_secs() / 60) as i64);
                (t.name.clone(), ttl)
            })
            .collect();
        Ok(json!({
            "storeType": "default",
            // skiff sets no cap on lite topics (Apache's enableLmqQuota is off by default too).
            "maxLmqNum": -1,
            "currentLmqNum": lite_topics,
            "liteSubscriptionCount": self.broker.lite_subscription_count(),
            "orderInfoCount": 0,
            "cqTableSize": lite_topics,
            "offsetTableSize": 0,
            "eventMapSize": 0,
            "topicMeta": topic_meta,
            "groupMeta": group_meta,
        }))
    }
}

fn lite_page_body(page: LiteTopicPage) -> LiteTopicListBody {
    let groups = page.groups;
    LiteTopicListBody {
        parent_topic: page.parent,
        total: page.total as u64,
        lite_topics: page
            .rows
            .into_iter()
            .map(|row| LiteTopicEntry {
                lite_topic: row.lite,
                min_offset: row.min_offset,
                max_offset: row.max_offset,
                last_update_timestamp: row.last_update_ms,
                subscribers: row
                    .subscribers
                    .into_iter()
                    .map(|(client_id, group)| LiteSubscriber { client_id, group })
                    .collect(),
                lag: groups.iter().cloned().zip(row.lags).collect(),
            })
            .collect(),
        groups,
        next_after: page.next_after,
    }
}
