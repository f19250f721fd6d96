//! `skiff admin topics`: every topic the name server lists (GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
//! 206) with its brokers, queue counts, permission and message type, summed from each master's
//! GET_ALL_TOPIC_CONFIG (21).

use std::collections::{BTreeMap, BTreeSet};

use skiff_storage::metadata::MESSAGE_TYPE_ATTRIBUTE;

use serde_json::{json, Value};

use super::{bad, table, Admin, AdminError, Rendered};
use crate::remoting::body::{self, BodyError, JsonBody};
use crate::remoting::codes::request as rc;
use crate::remoting::frame::RemotingCommand;

impl Admin {
    /// One GET_ALL_TOPIC_LIST_FROM_NAMESERVER and one GET_ALL_TOPIC_CONFIG (21) per master,
    /// whatever the number of topics: a route lookup per topic costs a round trip each, which
    /// at 100,000 topics is most of a minute.
    pub(super) async fn topics(&self) -> Result<Rendered, AdminError> {
        let request = RemotingCommand::new_request(rc::GET_ALL_TOPIC_LIST_FROM_NAMESERVER);
        let response = self.call(&self.namesrv, request).await?;
        let topics =
            decode_topic_list(&response.body).map_err(|e| bad(&self.namesrv, "topic list", e))?;
        let summaries = self.topic_summaries().await?;
        let json = Value::Array(
            topics
                .iter()
                .map(|topic| {
                    let summary = summaries.get(topic);
                    json!({
                        "topic": topic,
                        "brokers": summary.map(|s| s.brokers.clone()),
                        "read_queues": summary.map(|s| s.read_queues),
                        "write_queues": summary.map(|s| s.write_queues),
                        "perm": summary.map(|s| perm_name(s.perm)),
                        "message_type": summary.and_then(|s| s.message_type.clone()),
                    })
                })
                .collect(),
        );
        let rows = topics
            .into_iter()
            .map(|topic| match summaries.get(&topic) {
                // A listed name no broker keeps (e.g. a cluster name on RocketMQ) shows dashes.
                None => vec![
                    topic,
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ],
                Some(summary) => vec![
                    topic,
                    summary.brokers.join(","),
                    summary.read_queues.to_string(),
                    summary.write_queues.to_string(),
                    perm_name(summary.perm),
                    summary.message_type.clone().unwrap_or_else(|| "-".into()),
                ],
            })
            .collect::<Vec<_>>();
        Ok(Rendered {
            text: table(
                &[
                    "TOPIC",
                    "BROKER",
                    "READ QUEUES",
                    "WRITE QUEUES",
                    "PERM",
                    "MESSAGE TYPE",
                ],
                &rows,
            ),
            json,
        })
    }

    /// Each topic's queues, perm and `message.type` summed over the masters that keep it, from
    /// GET_ALL_TOPIC_CONFIG (21). A broker that refuses (ACL) or does not answer is an error:
    /// a listing of dashes would look like topics without queues.
    async fn topic_summaries(&self) -> Result<BTreeMap<String, TopicSummary>, AdminError> {
        let mut summaries: BTreeMap<String, TopicSummary> = BTreeMap::new();
        for (broker, addr) in self.masters_by_name().await? {
            let configs = self.all_topic_configs(&addr).await?;
            for (topic, mut config) in configs {
                let summary = summaries.entry(topic).or_insert_with(|| TopicSummary {
                    perm: config.perm,
                    ..TopicSummary::default()
                });
                summary.brokers.push(broker.clone());
                summary.read_queues += config.read_queue_nums;
                summary.write_queues += config.write_queue_nums;
                if let Some(message_type) = config.attributes.remove(MESSAGE_TYPE_ATTRIBUTE) {
                    summary.message_type = Some(message_type);
                }
            }
        }
        Ok(summaries)
    }

    /// Every topic config of the broker at `addr`, read in pages as the Java client does (a
    /// broker that does not page answers them all at once, without `totalTopicNum`). When the
    /// topics change between pages, the broker's data version moves and the reading starts over.
    pub(super) async fn all_topic_configs(
        &self,
        addr: &str,
    ) -> Result<BTreeMap<String, body::TopicConfigBody>, AdminError> {
        let mut configs = BTreeMap::new();
        let mut version: Option<body::DataVersion> = None;
        let mut seq = 0usize;
        loop {
            let version_json = version
                .map(|v| serde_json::to_string(&v).unwrap_or_default())
                .unwrap_or_default();
            let request = RemotingCommand::new_request(rc::GET_ALL_TOPIC_CONFIG)
                .with_ext("topicSeq", seq.to_string())
                .with_ext("maxTopicNum", TOPIC_PAGE.to_string())
                .with_ext("dataVersion", version_json);
            let response = self.call(addr, request).await?;
            let page = body::TopicConfigWrapper::decode(&response.body)
                .map_err(|e| bad(addr, "topic configs", e))?;
            let Some(total) = response
                .ext("totalTopicNum")
                .and_then(|t| t.parse::<usize>().ok())
            else {
                return Ok(page.topic_config_table);
            };
            if version.is_some_and(|v| v != page.data_version) {
                configs.clear();
                seq = 0;
                version = Some(page.data_version);
                continue;
            }
            version = Some(page.data_version);
            let got = page.topic_config_table.len();
            seq += got;
            configs.extend(page.topic_config_table);
            if got == 0 || seq >= total {
                return Ok(configs);
            }
        }
    }
}

/// `TopicList` body: `{"topicList":[...],"brokerAddr":...}`; sorted, deduplicated.
fn decode_topic_list(bytes: &[u8]) -> Result<BTreeSet<String>, BodyError> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct TopicList {
        #[serde(default)]
        topic_list: Option<Vec<String>>,
    }
    let list: TopicList = body::decode_json(bytes, "TopicList")?;
    Ok(list.topic_list.unwrap_or_default().into_iter().collect())
}

/// Topics asked for per GET_ALL_TOPIC_CONFIG page (the Java client's `maxPageSizeInGetMetadata`).
const TOPIC_PAGE: usize = 2000;

/// What `skiff admin topics` shows of one topic, over every master that keeps it.
#[derive(Debug, Default)]
struct TopicSummary {
    brokers: Vec<String>,
    read_queues: i32,
    write_queues: i32,
    perm: i32,
    message_type: Option<String>,
}

/// `PermName.perm2String`: `RW-`-style read, write, inherit flags.
pub(super) fn perm_name(perm: i32) -> String {
    let flag = |bit: i32, c: char| if perm & bit != 0 { c } else { '-' };
    [flag(4, 'R'), flag(2, 'W'), flag(1, 'X')].iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies() -> anyhow::Result<()> {
        let topics = decode_topic_list(br#"{"topicList":["b","a","b"],"brokerAddr":null}"#)?;
        assert_eq!(topics.into_iter().collect::<Vec<_>>(), vec!["a", "b"]);
        assert_eq!(perm_name(6), "RW-");
        assert_eq!(perm_name(7), "RWX");
        Ok(())
    }
}
