//! Topic and subscription-group administration, as Java's `AdminBrokerProcessor` answers it:
//! UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215), GET_ALL_TOPIC_CONFIG (21),
//! GET_TOPIC_CONFIG (351), GET_TOPIC_STATS_INFO (202), UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
//! GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) and DELETE_SUBSCRIPTIONGROUP (207).

use std::collections::BTreeMap;

use skiff_actors::logic::attributes::{
    alter_group_attributes, alter_topic_attributes, AttributeRefusal, TopicAttributes,
};
use skiff_actors::logic::names::{self, is_rocketmq_system_topic, NameProblem};
use skiff_storage::metadata::{SubscriptionGroupConfig, TopicConfig, MESSAGE_TYPE_ATTRIBUTE};

use super::{broker_failure, success, Failure, Outcome, Processor};
use crate::remoting::body::{
    DataVersion, JsonBody, MessageQueue as WireQueue, SubscriptionGroupBody,
    SubscriptionGroupWrapper, TopicConfigBody, TopicConfigWrapper, TopicOffset, TopicStatsTable,
};
use crate::remoting::codes::response as code;
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    CreateTopicRequestHeader, CustomHeader, DeleteSubscriptionGroupRequestHeader,
    TopicRequestHeader,
};
use crate::remoting::wire::{clamp_i32, clamp_i64};

/// Java's `TopicValidator.validateTopic`: the remark when the name is refused.
pub(super) fn topic_name_problem(topic: &str) -> Option<String> {
    Some(match names::topic_name_problem(topic)? {
        NameProblem::Blank => "The specified topic is blank.".to_owned(),
        NameProblem::IllegalCharacters => format!(
            "The specified topic: {topic}, contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        ),
        NameProblem::TooLong { max } if max == names::RETRY_OR_DLQ_TOPIC_MAX_LENGTH => format!(
            "The specified topic is DLQ or Retry topic: {topic}, and it's longer than topic max length: {max}"
        ),
        NameProblem::TooLong { max } => {
            format!("The specified topic: {topic}, is longer than topic max length: {max}")
        }
    })
}

/// Java's `TopicValidator.validateGroup`: the remark when the name is refused.
pub(super) fn group_name_problem(group: &str) -> Option<String> {
    Some(match names::group_name_problem(group)? {
        NameProblem::Blank => "The specified group is blank.".to_owned(),
        NameProblem::IllegalCharacters => format!(
            "The specified group: {group}, contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        ),
        NameProblem::TooLong { max } => {
            format!("The specified group: {group}, is longer than group max length: {max}")
        }
    })
}

fn topic_body(config: &TopicConfig) -> TopicConfigBody {
    TopicConfigBody {
        topic_name: config.name.clone(),
        read_queue_nums: clamp_i32(config.read_queue_nums),
        write_queue_nums: clamp_i32(config.write_queue_nums),
        perm: clamp_i32(config.perm),
        topic_filter_type: "SINGLE_TAG".to_owned(),
        topic_sys_flag: 0,
        order: false,
        attributes: config
            .message_type
            .map(|t| (MESSAGE_TYPE_ATTRIBUTE.to_owned(), t.as_str().to_owned()))
            .into_iter()
            .chain(config.attributes.clone())
            .collect(),
    }
}

/// Java's answer to a refused attribute change.
fn attribute_failure(refusal: AttributeRefusal) -> Failure {
    match refusal {
        AttributeRefusal::MixedNotSupported => {
            Failure::new(code::INVALID_PARAMETER, refusal.to_string())
        }
        AttributeRefusal::Invalid(remark) => Failure::new(code::SYSTEM_ERROR, remark),
    }
}

fn group_body(config: &SubscriptionGroupConfig) -> SubscriptionGroupBody {
    SubscriptionGroupBody {
        group_name: config.name.clone(),
        consume_from_min_enable: config.consume_from_min_enable,
        consume_broadcast_enable: config.consume_broadcast_enable,
        consume_message_orderly: config.consume_message_orderly,
        retry_queue_nums: clamp_i32(config.retry_queue_nums),
        retry_max_times: clamp_i32(config.retry_max_times),
        attributes: config.attributes.clone(),
        ..SubscriptionGroupBody::default()
    }
}

/// Most queues a topic may have: every per-queue answer (stats, routes) walks them all, so an
/// absurd count from a request must not become a broker-wide loop.
const MAX_QUEUE_NUMS: u32 = 1024;

impl Processor {
    fn data_version(&self, counter: usize) -> DataVersion {
        DataVersion {
            state_version: 0,
            timestamp: self.broker.now_ms(),
            counter: i64::try_from(counter).unwrap_or(i64::MAX),
        }
    }

    /// UPDATE_AND_CREATE_TOPIC (17): creates or replaces the topic's queue counts and
    /// permission, and applies the `attributes` header to its message type (kept when the
    /// header has none). INVALID_PARAMETER for a bad name, a Java system topic or
    /// `+message.type=MIXED`; SYSTEM_ERROR with Java's remark for any other refused attribute
    /// change. A refused request changes nothing.
    pub(super) fn create_topic(&self, request: &RemotingCommand) -> Outcome {
        let header = CreateTopicRequestHeader::from_command(request)?;
        if let Some(problem) = topic_name_problem(&header.topic) {
            return Err(Failure::new(code::INVALID_PARAMETER, problem));
        }
        if is_rocketmq_system_topic(&header.topic) {
            return Err(Failure::new(
                code::INVALID_PARAMETER,
                format!("The topic[{}] is conflict with system topic.", header.topic),
            ));
        }
        let queues = |n: i32, field: &str| match u32::try_from(n) {
            Ok(n) if n <= MAX_QUEUE_NUMS => Ok(n),
            _ => Err(Failure::new(
                code::INVALID_PARAMETER,
                format!(
                    "{field} {n} of topic {} is outside 0..={MAX_QUEUE_NUMS}",
                    header.topic
                ),
            )),
        };
        let read_queue_nums = queues(header.read_queue_nums, "readQueueNums")?;
        let write_queue_nums = queues(header.write_queue_nums, "writeQueueNums")?;
        let perm = u32::try_from(header.perm).map_err(|_| {
            Failure::new(
                code::INVALID_PARAMETER,
                format!("perm {} of topic {} is negative", header.perm, header.topic),
            )
        })?;
        // Attributes not named in the request stay as they are (Java merges them the same way).
        let current = self.broker.topic(&header.topic).map_err(broker_failure)?;
        let attributes = alter_topic_attributes(
            &header.attributes,
            current.is_none(),
            &current
                .map(|c| TopicAttributes {
                    message_type: c.message_type,
                    others: c.attributes,
                })
                .unwrap_or_default(),
        )
        .map_err(attribute_failure)?;
        let config = TopicConfig {
            name: header.topic.clone(),
            read_queue_nums,
            write_queue_nums,
            perm,
            message_type: attributes.message_type,
            attributes: attributes.others,
        };
        self.broker.put_topic(&config).map_err(broker_failure)?;
        Ok(success())
    }

    /// DELETE_TOPIC_IN_BROKER (215): forgets the topic's config (its route disappears with it).
    /// Unlike Java, the topic's stored messages and its groups' offsets stay (until retention
    /// removes the messages), so a topic created again under the same name shows them again.
    pub(super) async fn delete_topic(&self, request: &RemotingCommand) -> Outcome {
        let header = TopicRequestHeader::from_command(request)?;
        if header.name.trim().is_empty() {
            return Err(Failure::new(
                code::INVALID_PARAMETER,
                "The specified topic is blank.",
            ));
        }
        if is_rocketmq_system_topic(&header.name) {
            return Err(Failure::new(
                code::INVALID_PARAMETER,
                format!("The topic[{}] is conflict with system topic.", header.name),
            ));
        }
        self.broker
            .remove_topic(&header.name)
            .await
            .map_err(broker_failure)?;
        Ok(success())
    }

    /// GET_ALL_TOPIC_CONFIG (21): every topic's config, or, when the request asks for a page
    /// (`topicSeq`, `maxTopicNum`, `dataVersion`, as 5.x clients and tools send), the topics
    /// from the `topicSeq`-th in name order, at most [`TOPIC_CONFIG_PAGE`] or `maxTopicNum`,
    /// with `totalTopicNum` in the answer's header. A `dataVersion` other than the current one
    /// (the topics changed between pages) starts again from the first, as the Java broker does:
    /// one frame of every topic passes the 16 MiB frame cap at about 100,000 topics.
    pub(super) fn all_topic_config(&self, request: &RemotingCommand) -> Outcome {
        let version = self.broker.topics_version();
        let data_version = DataVersion {
            state_version: 0,
            timestamp: version.changed_at_ms,
            counter: version.changes,
        };
        let page = TopicPageRequest::from_command(request);
        let (topics, total) = match &page {
            None => {
                let topics = self.broker.topics().map_err(broker_failure)?;
                let total = topics.len();
                (topics, total)
            }
            Some(page) => {
                let from = if page.data_version == Some(data_version) {
                    page.topic_seq
                } else {
                    0
                };
                self.broker
                    .topics_page(from, page.max_topics.min(TOPIC_CONFIG_PAGE))
                    .map_err(broker_failure)?
            }
        };
        let wrapper = TopicConfigWrapper {
            data_version,
            topic_config_table: topics
                .iter()
                .map(|t| (t.name.clone(), topic_body(t)))
                .collect(),
            ..TopicConfigWrapper::default()
        };
        let answer = success().with_body(wrapper.encode());
        Ok(match page {
            Some(_) => answer.with_ext("totalTopicNum", total.to_string()),
            None => answer,
        })
    }

    /// GET_TOPIC_CONFIG (351): one topic's config; TOPIC_NOT_EXIST when unknown (which 5.x tools
    /// read as "absent").
    pub(super) fn topic_config(&self, request: &RemotingCommand) -> Outcome {
        let header = TopicRequestHeader::from_command(request)?;
        match self.broker.topic(&header.name).map_err(broker_failure)? {
            Some(config) => Ok(success().with_body(topic_body(&config).encode())),
            None => Err(Failure::new(
                code::TOPIC_NOT_EXIST,
                format!("No topic in this broker. topic: {}", header.name),
            )),
        }
    }

    /// GET_TOPIC_STATS_INFO (202): per queue the min and max offset and the store time of the
    /// newest message.
    pub(super) fn topic_stats(&self, request: &RemotingCommand) -> Outcome {
        let header = TopicRequestHeader::from_command(request)?;
        let topic = header.name;
        let Some(config) = self.broker.topic(&topic).map_err(broker_failure)? else {
            return Err(Failure::new(
                code::TOPIC_NOT_EXIST,
                format!("topic[{topic}] not exist"),
            ));
        };
        let broker_name = self.broker.config().broker_name.clone();
        let reader = self.broker.reader();
        let mut table = TopicStatsTable::default();
        for queue_id in 0..config.read_queue_nums.max(config.write_queue_nums) {
            let min = reader.min_offset(&topic, queue_id);
            let max = reader.max_offset(&topic, queue_id);
            let last_update_timestamp = match max.checked_sub(1) {
                Some(last) => reader
                    .store_timestamp_at(&topic, queue_id, last)
                    .map_err(|e| broker_failure(e.into()))?
                    .unwrap_or(0),
                None => 0,
            };
            table.offset_table.insert(
                WireQueue {
                    topic: topic.clone(),
                    broker_name: broker_name.clone(),
                    queue_id: clamp_i32(queue_id),
                },
                TopicOffset {
                    min_offset: clamp_i64(min),
                    max_offset: clamp_i64(max),
                    last_update_timestamp,
                },
            );
        }
        Ok(success().with_body(table.encode()))
    }

    /// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): creates or replaces the group's config from
    /// the `SubscriptionGroupConfig` body. skiff keeps the retry settings, the broadcast,
    /// consume-from-min and orderly switches, and the attributes (the body's signed entries
    /// applied to the group's current ones; SYSTEM_ERROR with Java's remark for a refused
    /// change, which changes nothing); the other fields are accepted and not kept.
    pub(super) fn create_group(&self, request: &RemotingCommand) -> Outcome {
        if request.body.is_empty() {
            return Ok(success());
        }
        let body = SubscriptionGroupBody::decode(&request.body).map_err(super::body_failure)?;
        if let Some(problem) = group_name_problem(&body.group_name) {
            return Err(Failure::new(code::INVALID_PARAMETER, problem));
        }
        let current = self
            .broker
            .group(&body.group_name)
            .map_err(broker_failure)?;
        let attributes = alter_group_attributes(
            &body.attributes,
            current.is_none(),
            &current.map(|c| c.attributes).unwrap_or_default(),
        )
        .map_err(attribute_failure)?;
        let config = SubscriptionGroupConfig {
            retry_max_times: u32::try_from(body.retry_max_times).unwrap_or(0),
            retry_queue_nums: u32::try_from(body.retry_queue_nums).unwrap_or(0),
            consume_broadcast_enable: body.consume_broadcast_enable,
            consume_from_min_enable: body.consume_from_min_enable,
            consume_message_orderly: body.consume_message_orderly,
            attributes,
            ..SubscriptionGroupConfig::new(body.group_name)
        };
        self.broker.put_group(&config).map_err(broker_failure)?;
        Ok(success())
    }

    /// GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): every group's config.
    pub(super) fn all_group_config(&self) -> Outcome {
        let groups = self.broker.groups().map_err(broker_failure)?;
        let wrapper = SubscriptionGroupWrapper {
            data_version: self.data_version(groups.len()),
            subscription_group_table: groups
                .iter()
                .map(|g| (g.name.clone(), group_body(g)))
                .collect(),
            forbidden_table: BTreeMap::new(),
        };
        Ok(success().with_body(wrapper.encode()))
    }

    /// DELETE_SUBSCRIPTIONGROUP (207): forgets the group's config and, with `cleanOffset`, its
    /// offsets. SUCCESS whether or not it existed, as Java answers.
    pub(super) async fn delete_group(&self, request: &RemotingCommand) -> Outcome {
        let header = DeleteSubscriptionGroupRequestHeader::from_command(request)?;
        self.broker
            .remove_group(&header.group_name, header.clean_offset)
            .await
            .map_err(broker_failure)?;
        Ok(success())
    }
}

/// Topics in one page of GET_ALL_TOPIC_CONFIG at most (the Java broker's `splitMetadataSize`).
pub(super) const TOPIC_CONFIG_PAGE: usize = 2000;

/// The page a GET_ALL_TOPIC_CONFIG request asks for; `None` when it asks for every topic (no
/// paging field at all, as older clients send).
#[derive(Debug, PartialEq, Eq)]
struct TopicPageRequest {
    topic_seq: usize,
    max_topics: usize,
    /// The version the client read its earlier pages at; `None` when blank or unreadable.
    data_version: Option<DataVersion>,
}

impl TopicPageRequest {
    fn from_command(request: &RemotingCommand) -> Option<TopicPageRequest> {
        let seq = request.ext("topicSeq");
        let max = request.ext("maxTopicNum");
        let version = request.ext("dataVersion");
        if seq.is_none() && max.is_none() && version.is_none() {
            return None;
        }
        Some(TopicPageRequest {
            topic_seq: seq.and_then(|s| s.parse().ok()).unwrap_or(0),
            max_topics: max
                .and_then(|m| m.parse().ok())
                .filter(|m| *m > 0)
                .unwrap_or(TOPIC_CONFIG_PAGE),
            data_version: version
                .filter(|v| !v.trim().is_empty())
                .and_then(|v| serde_json::from_str(v).ok()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_are_checked_as_java_checks_them() {
        assert_eq!(topic_name_problem("Orders_1-a%b|c"), None);
        assert_eq!(
            topic_name_problem("  ").as_deref(),
            Some("The specified topic is blank.")
        );
        assert!(topic_name_problem("a b").is_some_and(|r| r.contains("illegal characters")));
        assert!(topic_name_problem(&"t".repeat(128)).is_some_and(|r| r.contains("127")));
        assert_eq!(
            topic_name_problem(&format!("%RETRY%{}", "g".repeat(200))),
            None
        );
    }

    #[test]
    fn group_names_are_checked_as_java_checks_them() {
        assert_eq!(group_name_problem("G_1"), None);
        assert!(group_name_problem("").is_some());
        assert!(group_name_problem("g.1").is_some_and(|r| r.contains("illegal characters")));
        assert!(group_name_problem(&"g".repeat(256)).is_some_and(|r| r.contains("255")));
    }
}
