//! `skiff admin` commands about topics, connections and the cluster:
//!
//! * `topic create <topic> [--queues N] [--message-type T]`: UPDATE_AND_CREATE_TOPIC (17) on
//!   every master broker of the cluster (GET_BROKER_CLUSTER_INFO, 106); `--message-type` sends
//!   `attributes` `+message.type=T` as `mqadmin updateTopic -a` does.
//! * `topic delete <topic>`: DELETE_TOPIC_IN_BROKER (215) on every master that has the topic,
//!   then DELETE_TOPIC_IN_NAMESRV (216) on the name server. A topic no master has is an error.
//! * `topic status <topic>` (also `topic-status <topic>`): GET_TOPIC_STATS_INFO (202) on every
//!   master that has the topic: per queue min and max offset and the store time of the newest
//!   message. With `--json`, an array of `{"broker", "queue_id", "min_offset", "max_offset",
//!   "last_update_ms"}` objects.
//! * `connections <group>`: GET_CONSUMER_CONNECTION_LIST (203) from every master; with no
//!   consumer online, an error that says whether the group exists.
//! * `cluster`: GET_BROKER_CLUSTER_INFO (106), plus GET_BROKER_RUNTIME_INFO (28) per master.
//!
//! Which masters have a topic is asked of each master (GET_TOPIC_CONFIG, 351), not of the name
//! server's route: a route query can create the topic.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use skiff_storage::metadata::{TopicMessageType, MESSAGE_TYPE_ATTRIBUTE};

use super::{bad, format_time, missing, table, Admin, AdminError, Rendered};
use crate::remoting::body::{
    self, BodyError, BrokerData, ConsumerConnection, JsonBody, KvTable, TopicStatsTable,
};
use crate::remoting::codes::{request as rc, response as code, version};
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    CreateTopicRequestHeader, CustomHeader, GetConsumerConnectionListRequestHeader,
    TopicRequestHeader,
};

/// A `ClusterInfo` body: broker name → broker data, cluster name → broker names.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClusterInfo {
    #[serde(default)]
    broker_addr_table: Option<BTreeMap<String, BrokerData>>,
    #[serde(default)]
    cluster_addr_table: Option<BTreeMap<String, Vec<String>>>,
}

fn decode_cluster(bytes: &[u8]) -> Result<ClusterInfo, BodyError> {
    body::decode_json(bytes, "ClusterInfo")
}

impl Admin {
    async fn cluster_info(&self) -> Result<ClusterInfo, AdminError> {
        let request = RemotingCommand::new_request(rc::GET_BROKER_CLUSTER_INFO);
        let response = self.call(&self.namesrv, request).await?;
        decode_cluster(&response.body).map_err(|e| bad(&self.namesrv, "cluster info", e))
    }

    /// Master address of every broker in the cluster info; the name server itself when there
    /// is none (`skiff serve` is both).
    pub(super) async fn all_masters(&self) -> Result<Vec<String>, AdminError> {
        Ok(self
            .masters_by_name()
            .await?
            .into_iter()
            .map(|(_, addr)| addr)
            .collect())
    }

    /// (broker name, master address) of every broker in the cluster info; the name server
    /// itself, named by its address, when there is none.
    pub(super) async fn masters_by_name(&self) -> Result<Vec<(String, String)>, AdminError> {
        let info = self.cluster_info().await?;
        let masters: Vec<(String, String)> = info
            .broker_addr_table
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(name, b)| Some((name, b.broker_addrs.get(&0)?.clone())))
            .collect();
        Ok(if masters.is_empty() {
            vec![(self.namesrv.clone(), self.namesrv.clone())]
        } else {
            masters
        })
    }

    pub(super) async fn topic_create(
        &self,
        topic: &str,
        queues: u32,
        message_type: Option<TopicMessageType>,
    ) -> Result<Rendered, AdminError> {
        let queues = i32::try_from(queues).unwrap_or(i32::MAX);
        let attributes = message_type
            .map(|t| format!("+{MESSAGE_TYPE_ATTRIBUTE}={}", t.as_str()))
            .unwrap_or_default();
        let mut done = Vec::new();
        for addr in self.all_masters().await? {
            let request = RemotingCommand::new_request(rc::UPDATE_AND_CREATE_TOPIC)
                .with_ext_fields(
                    CreateTopicRequestHeader {
                        topic: topic.to_owned(),
                        read_queue_nums: queues,
                        write_queue_nums: queues,
                        attributes: attributes.clone(),
                        ..CreateTopicRequestHeader::default()
                    }
                    .to_ext(),
                );
            self.call(&addr, request).await?;
            done.push(addr);
        }
        let type_name = message_type.map(TopicMessageType::as_str);
        Ok(Rendered {
            text: format!(
                "topic {topic} created with {queues} queues{} on {}\n",
                type_name.map_or(String::new(), |t| format!(", message type {t},")),
                done.join(", ")
            ),
            json: json!({
                "topic": topic,
                "queues": queues,
                "message_type": type_name,
                "brokers": done,
            }),
        })
    }

    /// Refuses a topic no master has: DELETE_TOPIC_IN_BROKER answers success either way.
    pub(super) async fn topic_delete(&self, topic: &str) -> Result<Rendered, AdminError> {
        let header = TopicRequestHeader::new(topic).to_ext();
        let mut done = Vec::new();
        for holder in self.topic_masters(topic).await? {
            let request = RemotingCommand::new_request(rc::DELETE_TOPIC_IN_BROKER)
                .with_ext_fields(header.clone());
            self.call(&holder.addr, request).await?;
            done.push(holder.addr);
        }
        let request =
            RemotingCommand::new_request(rc::DELETE_TOPIC_IN_NAMESRV).with_ext_fields(header);
        self.call(&self.namesrv, request).await?;
        Ok(Rendered {
            text: format!("topic {topic} deleted on {}\n", done.join(", ")),
            json: json!({ "topic": topic, "brokers": done }),
        })
    }

    pub(super) async fn topic_status(&self, topic: &str) -> Result<Rendered, AdminError> {
        let mut merged = TopicStatsTable::default();
        for holder in self.topic_masters(topic).await? {
            let stats = self.topic_stats(&holder.addr, topic).await?;
            merged.offset_table.extend(stats.offset_table);
        }
        let mut rows = Vec::new();
        let mut objects = Vec::new();
        for (mq, o) in &merged.offset_table {
            rows.push(vec![
                mq.broker_name.clone(),
                mq.queue_id.to_string(),
                o.min_offset.to_string(),
                o.max_offset.to_string(),
                if o.last_update_timestamp > 0 {
                    format_time(o.last_update_timestamp)
                } else {
                    "-".to_owned()
                },
            ]);
            objects.push(json!({
                "broker": mq.broker_name,
                "queue_id": mq.queue_id,
                "min_offset": o.min_offset,
                "max_offset": o.max_offset,
                "last_update_ms": o.last_update_timestamp,
            }));
        }
        let mut text = format!("topic {topic}\n");
        text.push_str(&table(
            &[
                "BROKER",
                "QID",
                "MIN OFFSET",
                "MAX OFFSET",
                "LAST UPDATE (UTC)",
            ],
            &rows,
        ));
        Ok(Rendered {
            text,
            json: Value::Array(objects),
        })
    }

    /// GET_TOPIC_STATS_INFO (202) at `addr`.
    pub(super) async fn topic_stats(
        &self,
        addr: &str,
        topic: &str,
    ) -> Result<TopicStatsTable, AdminError> {
        let request = RemotingCommand::new_request(rc::GET_TOPIC_STATS_INFO)
            .with_ext_fields(TopicRequestHeader::new(topic).to_ext());
        let response = self
            .call(addr, request)
            .await
            .map_err(|e| missing(e, Some(topic), None))?;
        TopicStatsTable::decode(&response.body).map_err(|e| bad(addr, "topic stats", e))
    }

    pub(super) async fn connections(&self, group: &str) -> Result<Rendered, AdminError> {
        // Every master rather than the route of the group's retry topic, as Java's tools do:
        // asking a broker for that route can create the topic.
        let mut merged: Option<ConsumerConnection> = None;
        let mut not_online = None;
        for addr in self.all_masters().await? {
            let request = RemotingCommand::new_request(rc::GET_CONSUMER_CONNECTION_LIST)
                .with_ext_fields(GetConsumerConnectionListRequestHeader::new(group).to_ext());
            let response = match self.call(&addr, request).await {
                Ok(response) => response,
                Err(e @ AdminError::Remote { code, .. }) if code == code::CONSUMER_NOT_ONLINE => {
                    not_online = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let found = ConsumerConnection::decode(&response.body)
                .map_err(|e| bad(&addr, "consumer connections", e))?;
            match &mut merged {
                None => merged = Some(found),
                Some(known) => {
                    for c in found.connection_set {
                        if !known.connection_set.contains(&c) {
                            known.connection_set.push(c);
                        }
                    }
                    known.subscription_table.extend(found.subscription_table);
                }
            }
        }
        let cc = match (merged, not_online) {
            (Some(cc), _) => cc,
            (None, not_online) => {
                if self.group_configs(group).await?.is_empty() {
                    return Err(AdminError::GroupNotExist {
                        group: group.to_owned(),
                    });
                }
                match not_online {
                    Some(e) => return Err(e),
                    None => ConsumerConnection::default(),
                }
            }
        };
        let rows: Vec<Vec<String>> = cc
            .connection_set
            .iter()
            .map(|c| {
                vec![
                    c.client_id.clone(),
                    c.client_addr.clone(),
                    c.language.clone(),
                    version::desc(c.version),
                ]
            })
            .collect();
        let subscriptions: BTreeMap<&str, &str> = cc
            .subscription_table
            .values()
            .map(|s| (s.topic.as_str(), s.sub_string.as_str()))
            .collect();
        let mut text = format!(
            "consumer group {group}: {} {} {}\n",
            cc.message_model.name(),
            cc.consume_type.name(),
            cc.consume_from_where.name()
        );
        text.push_str(&table(
            &["CLIENT ID", "CLIENT ADDRESS", "LANGUAGE", "VERSION"],
            &rows,
        ));
        for (topic, expression) in &subscriptions {
            text.push_str(&format!("subscribes {topic}: {expression}\n"));
        }
        let json = json!({
            "group": group,
            "message_model": cc.message_model.name(),
            "consume_type": cc.consume_type.name(),
            "consume_from_where": cc.consume_from_where.name(),
            "connections": cc.connection_set.iter().map(|c| json!({
                "client_id": c.client_id,
                "client_addr": c.client_addr,
                "language": c.language,
                "version": version::desc(c.version),
            })).collect::<Vec<_>>(),
            "subscriptions": subscriptions,
        });
        Ok(Rendered { text, json })
    }

    pub(super) async fn cluster(&self) -> Result<Rendered, AdminError> {
        let info = self.cluster_info().await?;
        let brokers = info.broker_addr_table.unwrap_or_default();
        let mut rows = Vec::new();
        let mut objects = Vec::new();
        for (cluster, names) in info.cluster_addr_table.unwrap_or_default() {
            for name in names {
                let Some(broker) = brokers.get(&name) else {
                    continue;
                };
                for (id, addr) in &broker.broker_addrs {
                    // A broker that does not answer still lists (as `mqadmin clusterList`
                    // does); one that refuses (ACL) is an error.
                    let runtime = if *id == 0 {
                        match self.runtime_info(addr).await {
                            Ok(table) => Some(table),
                            Err(AdminError::Request { .. }) => None,
                            Err(e) => return Err(e),
                        }
                    } else {
                        None
                    };
                    let value = |key: &str| {
                        runtime
                            .as_ref()
                            .and_then(|t| t.table.get(key).cloned())
                            .unwrap_or_else(|| "-".to_owned())
                    };
                    rows.push(vec![
                        cluster.clone(),
                        name.clone(),
                        id.to_string(),
                        addr.clone(),
                        value("brokerVersionDesc"),
                        value("msgPutTotalTodayNow"),
                    ]);
                    objects.push(json!({
                        "cluster": cluster,
                        "broker": name,
                        "broker_id": id,
                        "addr": addr,
                        "version": runtime.as_ref().and_then(|t| t.table.get("brokerVersionDesc")),
                        "messages_put": runtime
                            .as_ref()
                            .and_then(|t| t.table.get("msgPutTotalTodayNow"))
                            .and_then(|n| n.parse::<i64>().ok()),
                    }));
                }
            }
        }
        Ok(Rendered {
            text: table(
                &[
                    "CLUSTER",
                    "BROKER",
                    "BID",
                    "ADDRESS",
                    "VERSION",
                    "MESSAGES PUT",
                ],
                &rows,
            ),
            json: Value::Array(objects),
        })
    }

    async fn runtime_info(&self, addr: &str) -> Result<KvTable, AdminError> {
        let request = RemotingCommand::new_request(rc::GET_BROKER_RUNTIME_INFO);
        let response = self.call(addr, request).await?;
        KvTable::decode(&response.body).map_err(|e| bad(addr, "runtime info", e))
    }
}
