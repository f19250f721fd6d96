//! `skiff admin`: RocketMQ admin requests over the network, against `skiff serve` or a real
//! RocketMQ name server + brokers.
//!
//! * `topics`: GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), then each topic's route (105) for its
//!   broker and queue counts, and GET_ALL_TOPIC_CONFIG (21) of every master for its message
//!   type (the `message.type` attribute; `-` when unspecified).
//! * `progress <group>`: GET_CONSUME_STATS (208) from every master broker (found with
//!   GET_BROKER_CLUSTER_INFO, 106; else the route of the group's retry topic; else the name server
//!   address itself, which is the broker with `skiff serve`). Per queue: broker offset, consumer
//!   offset, lag, in-flight (the broker's pull offset minus the consumer offset: pulled, not yet
//!   committed) and the store time of the last consumed message.
//! * `reset-offset <group> <topic> --to-time T`: INVOKE_BROKER_TO_RESET_OFFSET (222) on every
//!   master broker of the topic's route; `T` is milliseconds since the epoch, `now`, or RocketMQ's
//!   `yyyy-MM-dd#HH:mm:ss:SSS` (read as UTC). Each queue restarts at the first message stored at
//!   or after `T`. A broker answering CONSUMER_NOT_ONLINE (a Java broker that resets through
//!   its online consumers) gets the offsets written directly instead, as Java's admin does:
//!   per queue SEARCH_OFFSET_BY_TIMESTAMP, then an acknowledged UPDATE_CONSUMER_OFFSET.
//!
//! * `topic create|delete|status`, `topic-status`, `groups`, `connections <group>`, `cluster`:
//!   see [`resources`].
//! * `message <msg-id> [--topic T]`, `query <topic> <key>`: finding stored messages, see
//!   [`lookup`].
//!
//! `--json` prints JSON instead of a table (for the commands of [`resources`] and [`lookup`];
//! the others print their table either way). [`run`] returns the text to print.

mod lookup;
mod resources;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use skiff_actors::logic::delay::retry_topic;
use skiff_storage::clock::epoch_millis;
use skiff_storage::metadata::{TopicMessageType, MESSAGE_TYPE_ATTRIBUTE};

use crate::acl::signature::Credentials;
use crate::remoting::body::{
    self, BodyError, BrokerData, ConsumeStats, JsonBody, MessageQueue, ResetOffsetBody,
    TopicRouteData,
};
use crate::remoting::client::{ClientConfig, ClientError, RemotingClient};
use crate::remoting::codes::{request as rc, response as code};
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    BoundaryType, CustomHeader, GetConsumeStatsRequestHeader, GetMaxOffsetRequestHeader,
    GetRouteInfoRequestHeader, HeaderError, OffsetResponseHeader, ResetOffsetRequestHeader,
    SearchOffsetRequestHeader, UpdateConsumerOffsetRequestHeader,
};

fn parse_message_type(name: &str) -> Result<TopicMessageType, String> {
    TopicMessageType::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = TopicMessageType::ALL.iter().map(|t| t.as_str()).collect();
        format!("expected one of {}", names.join(", "))
    })
}

/// Request timeout of every admin call (Java `mqClientApiTimeout`).
const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, clap::Args)]
pub struct AdminArgs {
    /// Name server address (`skiff serve` answers as name server and broker).
    #[arg(long, global = true, default_value = "127.0.0.1:9876")]
    pub namesrv: String,
    /// Print JSON instead of a table (topic, topic-status, groups, connections, cluster,
    /// message, query).
    #[arg(long, global = true)]
    pub json: bool,
    /// Sign requests with this account's access key (a broker with ACL on needs it; admin
    /// commands that change state need an admin account).
    #[arg(long, global = true, env = "SKIFF_ACCESS_KEY", requires = "secret_key")]
    pub access_key: Option<String>,
    /// The account's secret key; prefer the environment variable, which `ps` does not show.
    #[arg(long, global = true, env = "SKIFF_SECRET_KEY", hide_env_values = true)]
    pub secret_key: Option<String>,
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum AdminCommand {
    /// List every topic with its broker, queue counts, permission and message type.
    Topics,
    /// Per queue of a consumer group: broker offset, consumer offset, lag, in-flight, last
    /// consume time.
    Progress {
        /// Consumer group.
        group: String,
    },
    /// Reset a group's offsets on a topic to a point in time (server side: each queue restarts
    /// at its next pull).
    ResetOffset {
        /// Consumer group.
        group: String,
        /// Topic.
        topic: String,
        /// Milliseconds since the epoch, `now`, or `yyyy-MM-dd#HH:mm:ss:SSS` (UTC).
        #[arg(long)]
        to_time: String,
    },
    /// Create, delete or show a topic.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Per queue of a topic: min and max offset and last update (same as `topic status`).
    TopicStatus {
        /// Topic.
        topic: String,
    },
    /// Every subscription group's config.
    Groups,
    /// The consumers connected for a group, with their subscriptions.
    Connections {
        /// Consumer group.
        group: String,
    },
    /// The brokers of the cluster with their version and message count.
    Cluster,
    /// A stored message by id: an offset message id, or a unique key (`msgId`) with `--topic`.
    Message {
        /// Offset message id or unique key.
        id: String,
        /// The topic, to look a unique key up in.
        #[arg(long)]
        topic: Option<String>,
    },
    /// The stored messages of a topic carrying a key (`KEYS`), newest first.
    Query { topic: String, key: String },
}

#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum TopicCommand {
    /// Create a topic (or change its queue count) on every master broker.
    Create {
        topic: String,
        /// Read and write queue count.
        #[arg(long, default_value_t = 8)]
        queues: u32,
        /// The topic's message type (`message.type` attribute): NORMAL, FIFO, DELAY,
        /// TRANSACTION or MIXED, in any case. Without it an existing topic keeps its type.
        #[arg(long, value_parser = parse_message_type)]
        message_type: Option<TopicMessageType>,
    },
    /// Delete a topic from every master broker and the name server.
    Delete { topic: String },
    /// Per queue: min and max offset and the store time of the newest message.
    Status { topic: String },
}

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("invalid time {value:?}: expected milliseconds since the epoch, \"now\" or yyyy-MM-dd#HH:mm:ss:SSS")]
    InvalidTime { value: String },
    #[error("request to {addr} failed")]
    Request {
        addr: String,
        #[source]
        source: ClientError,
    },
    #[error("{addr} answered code {code}: {remark}")]
    Remote {
        addr: String,
        code: i32,
        remark: String,
    },
    #[error("{addr} answered an undecodable {what}")]
    BadAnswer {
        addr: String,
        what: &'static str,
        #[source]
        source: AnswerError,
    },
    #[error("topic {topic} has no master broker in its route")]
    NoBroker { topic: String },
    #[error("no {what} found")]
    NotFound { what: String },
}

/// Why an answer could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error(transparent)]
    Body(#[from] BodyError),
    #[error(transparent)]
    Header(#[from] HeaderError),
    #[error(transparent)]
    Message(#[from] skiff_storage::message::MessageDecodeError),
}

/// Runs one admin command; returns the text to print. Needs a tokio runtime.
pub async fn run(args: AdminArgs) -> Result<String, AdminError> {
    let admin = Admin {
        namesrv: args.namesrv,
        client: RemotingClient::new(ClientConfig {
            credentials: args.access_key.clone().zip(args.secret_key.clone()).map(
                |(access_key, secret_key)| Credentials {
                    access_key,
                    secret_key,
                },
            ),
            ..ClientConfig::default()
        }),
    };
    let result = match args.command {
        AdminCommand::Topics => admin.topics().await,
        AdminCommand::Progress { group } => admin.progress(&group).await,
        AdminCommand::ResetOffset {
            group,
            topic,
            to_time,
        } => {
            let timestamp = parse_time(&to_time, epoch_millis())?;
            admin.reset_offset(&group, &topic, timestamp).await
        }
        AdminCommand::Topic(TopicCommand::Create {
            topic,
            queues,
            message_type,
        }) => render(
            admin.topic_create(&topic, queues, message_type).await,
            args.json,
        ),
        AdminCommand::Topic(TopicCommand::Delete { topic }) => {
            render(admin.topic_delete(&topic).await, args.json)
        }
        AdminCommand::Topic(TopicCommand::Status { topic })
        | AdminCommand::TopicStatus { topic } => {
            render(admin.topic_status(&topic).await, args.json)
        }
        AdminCommand::Groups => render(admin.groups().await, args.json),
        AdminCommand::Connections { group } => render(admin.connections(&group).await, args.json),
        AdminCommand::Cluster => render(admin.cluster().await, args.json),
        AdminCommand::Message { id, topic } => {
            render(admin.message(&id, topic.as_deref()).await, args.json)
        }
        AdminCommand::Query { topic, key } => render(admin.query(&topic, &key).await, args.json),
    };
    admin.client.shutdown();
    result
}

/// The table, or with `json` the JSON value on one line.
fn render(
    rendered: Result<resources::Rendered, AdminError>,
    json: bool,
) -> Result<String, AdminError> {
    let rendered = rendered?;
    Ok(if json {
        format!("{}\n", rendered.json)
    } else {
        rendered.text
    })
}

struct Admin {
    namesrv: String,
    client: RemotingClient,
}

impl Admin {
    async fn call(
        &self,
        addr: &str,
        request: RemotingCommand,
    ) -> Result<RemotingCommand, AdminError> {
        let response = self
            .client
            .invoke(addr, request, TIMEOUT)
            .await
            .map_err(|source| AdminError::Request {
                addr: addr.to_owned(),
                source,
            })?;
        if response.code != code::SUCCESS {
            return Err(AdminError::Remote {
                addr: addr.to_owned(),
                code: response.code,
                remark: response.remark.unwrap_or_default(),
            });
        }
        Ok(response)
    }

    async fn route(&self, topic: &str) -> Result<TopicRouteData, AdminError> {
        let request = RemotingCommand::new_request(rc::GET_ROUTEINFO_BY_TOPIC).with_ext_fields(
            GetRouteInfoRequestHeader {
                topic: topic.to_owned(),
                accept_standard_json_only: None,
            }
            .to_ext(),
        );
        let response = self.call(&self.namesrv, request).await?;
        TopicRouteData::decode(&response.body).map_err(|e| bad(&self.namesrv, "route", e))
    }

    /// One GET_ALL_TOPIC_LIST_FROM_NAMESERVER and one GET_ALL_TOPIC_CONFIG (21) per master,
    /// whatever the number of topics: a route lookup per topic costs a round trip each, which
    /// at 100,000 topics is most of a minute.
    async fn topics(&self) -> Result<String, AdminError> {
        let request = RemotingCommand::new_request(rc::GET_ALL_TOPIC_LIST_FROM_NAMESERVER);
        let response = self.call(&self.namesrv, request).await?;
        let topics =
            decode_topic_list(&response.body).map_err(|e| bad(&self.namesrv, "topic list", e))?;
        let summaries = self.topic_summaries().await;
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
        Ok(table(
            &[
                "TOPIC",
                "BROKER",
                "READ QUEUES",
                "WRITE QUEUES",
                "PERM",
                "MESSAGE TYPE",
            ],
            &rows,
        ))
    }

    /// Each topic's queues, perm and `message.type` summed over the masters that keep it, from
    /// GET_ALL_TOPIC_CONFIG (21). Best effort: a broker that does not answer adds nothing.
    async fn topic_summaries(&self) -> BTreeMap<String, TopicSummary> {
        let mut summaries: BTreeMap<String, TopicSummary> = BTreeMap::new();
        for (broker, addr) in self.masters_by_name().await.unwrap_or_default() {
            let Ok(configs) = self.all_topic_configs(&addr).await else {
                continue;
            };
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
        summaries
    }

    /// Every topic config of the broker at `addr`, read in pages as the Java client does (a
    /// broker that does not page answers them all at once, without `totalTopicNum`). When the
    /// topics change between pages, the broker's data version moves and the reading starts over.
    async fn all_topic_configs(
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

    /// Master addresses of every broker: cluster info, else the group's retry topic route,
    /// else the name server itself.
    async fn brokers_for_group(&self, group: &str) -> Vec<String> {
        let request = RemotingCommand::new_request(rc::GET_BROKER_CLUSTER_INFO);
        if let Ok(response) = self.call(&self.namesrv, request).await {
            if let Ok(addrs) = cluster_masters(&response.body) {
                if !addrs.is_empty() {
                    return addrs.into_iter().collect();
                }
            }
        }
        if let Ok(route) = self.route(&retry_topic(group)).await {
            let addrs = masters(&route);
            if !addrs.is_empty() {
                return addrs.into_iter().collect();
            }
        }
        vec![self.namesrv.clone()]
    }

    async fn progress(&self, group: &str) -> Result<String, AdminError> {
        let mut merged = ConsumeStats::default();
        for addr in self.brokers_for_group(group).await {
            let request = RemotingCommand::new_request(rc::GET_CONSUME_STATS).with_ext_fields(
                GetConsumeStatsRequestHeader {
                    consumer_group: group.to_owned(),
                    ..Default::default()
                }
                .to_ext(),
            );
            let response = self.call(&addr, request).await?;
            let stats =
                ConsumeStats::decode(&response.body).map_err(|e| bad(&addr, "consume stats", e))?;
            merged.offset_table.extend(stats.offset_table);
            merged.consume_tps += stats.consume_tps;
        }
        Ok(progress_table(group, &merged))
    }

    async fn reset_offset(
        &self,
        group: &str,
        topic: &str,
        timestamp: i64,
    ) -> Result<String, AdminError> {
        let route = self.route(topic).await?;
        let addrs = masters(&route);
        if addrs.is_empty() {
            return Err(AdminError::NoBroker {
                topic: topic.to_owned(),
            });
        }
        let mut reset = BTreeMap::new();
        for addr in addrs {
            let request = RemotingCommand::new_request(rc::INVOKE_BROKER_TO_RESET_OFFSET)
                .with_ext_fields(
                    ResetOffsetRequestHeader {
                        topic: topic.to_owned(),
                        group: group.to_owned(),
                        timestamp: Some(timestamp),
                        is_force: true,
                        ..Default::default()
                    }
                    .to_ext(),
                );
            match self.call(&addr, request).await {
                Ok(response) => {
                    let body = ResetOffsetBody::decode(&response.body)
                        .map_err(|e| bad(&addr, "reset answer", e))?;
                    reset.extend(body.offset_table);
                }
                // A Java broker that resets through its online consumers refuses when there
                // are none; then the offsets are written directly, as Java's admin does.
                Err(AdminError::Remote { code: c, .. }) if c == code::CONSUMER_NOT_ONLINE => {
                    reset.extend(self.reset_offline(&addr, group, topic, timestamp).await?);
                }
                Err(e) => return Err(e),
            }
        }
        let rows: Vec<Vec<String>> = reset
            .iter()
            .map(|(mq, offset)| {
                vec![
                    mq.topic.clone(),
                    mq.broker_name.clone(),
                    mq.queue_id.to_string(),
                    offset.to_string(),
                ]
            })
            .collect();
        let mut out = format!(
            "reset group {group} on topic {topic} to {} ({timestamp} ms)\n",
            format_time(timestamp)
        );
        out.push_str(&table(&["TOPIC", "BROKER", "QID", "NEW OFFSET"], &rows));
        Ok(out)
    }
}

impl Admin {
    /// Java's `resetOffsetByTimestampOld`: per queue of the topic the broker has stats for, the
    /// offset at `timestamp` (SEARCH_OFFSET_BY_TIMESTAMP; the end for a negative time) written
    /// with an acknowledged UPDATE_CONSUMER_OFFSET.
    async fn reset_offline(
        &self,
        addr: &str,
        group: &str,
        topic: &str,
        timestamp: i64,
    ) -> Result<BTreeMap<MessageQueue, i64>, AdminError> {
        let request = RemotingCommand::new_request(rc::GET_CONSUME_STATS).with_ext_fields(
            GetConsumeStatsRequestHeader {
                consumer_group: group.to_owned(),
                topic: Some(topic.to_owned()),
                topic_list: Vec::new(),
            }
            .to_ext(),
        );
        let response = self.call(addr, request).await?;
        let stats =
            ConsumeStats::decode(&response.body).map_err(|e| bad(addr, "consume stats", e))?;
        let mut reset = BTreeMap::new();
        for mq in stats.offset_table.keys().filter(|mq| mq.topic == topic) {
            let lookup = if timestamp < 0 {
                RemotingCommand::new_request(rc::GET_MAX_OFFSET).with_ext_fields(
                    GetMaxOffsetRequestHeader {
                        topic: topic.to_owned(),
                        queue_id: mq.queue_id,
                        committed: true,
                    }
                    .to_ext(),
                )
            } else {
                RemotingCommand::new_request(rc::SEARCH_OFFSET_BY_TIMESTAMP).with_ext_fields(
                    SearchOffsetRequestHeader {
                        topic: topic.to_owned(),
                        queue_id: mq.queue_id,
                        timestamp,
                        boundary_type: BoundaryType::Lower,
                    }
                    .to_ext(),
                )
            };
            let response = self.call(addr, lookup).await?;
            let offset = OffsetResponseHeader::from_command(&response)
                .map_err(|e| bad(addr, "offset answer", e))?
                .offset;
            let update = RemotingCommand::new_request(rc::UPDATE_CONSUMER_OFFSET).with_ext_fields(
                UpdateConsumerOffsetRequestHeader {
                    consumer_group: group.to_owned(),
                    topic: topic.to_owned(),
                    queue_id: mq.queue_id,
                    commit_offset: offset,
                }
                .to_ext(),
            );
            self.call(addr, update).await?;
            reset.insert(mq.clone(), offset);
        }
        Ok(reset)
    }
}

fn bad(addr: &str, what: &'static str, error: impl Into<AnswerError>) -> AdminError {
    AdminError::BadAnswer {
        addr: addr.to_owned(),
        what,
        source: error.into(),
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

/// Master addresses of a `ClusterInfo` body (`brokerAddrTable`: name → BrokerData).
fn cluster_masters(bytes: &[u8]) -> Result<BTreeSet<String>, BodyError> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct ClusterInfo {
        #[serde(default)]
        broker_addr_table: Option<BTreeMap<String, BrokerData>>,
    }
    let info: ClusterInfo = body::decode_json(bytes, "ClusterInfo")?;
    Ok(info
        .broker_addr_table
        .unwrap_or_default()
        .values()
        .filter_map(|b| b.broker_addrs.get(&0).cloned())
        .collect())
}

fn masters(route: &TopicRouteData) -> BTreeSet<String> {
    route
        .broker_datas
        .iter()
        .filter_map(|b| b.broker_addrs.get(&0).cloned())
        .collect()
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
fn perm_name(perm: i32) -> String {
    let flag = |bit: i32, c: char| if perm & bit != 0 { c } else { '-' };
    [flag(4, 'R'), flag(2, 'W'), flag(1, 'X')].iter().collect()
}

fn progress_table(group: &str, stats: &ConsumeStats) -> String {
    let mut rows = Vec::new();
    let (mut total_lag, mut total_in_flight) = (0i64, 0i64);
    for (mq, w) in &stats.offset_table {
        let lag = (w.broker_offset - w.consumer_offset).max(0);
        let in_flight = (w.pull_offset - w.consumer_offset).max(0);
        total_lag += lag;
        total_in_flight += in_flight;
        rows.push(vec![
            mq.topic.clone(),
            mq.broker_name.clone(),
            mq.queue_id.to_string(),
            w.broker_offset.to_string(),
            w.consumer_offset.to_string(),
            lag.to_string(),
            in_flight.to_string(),
            if w.last_timestamp > 0 {
                format_time(w.last_timestamp)
            } else {
                "-".to_owned()
            },
        ]);
    }
    let mut out = format!("consumer group {group}\n");
    out.push_str(&table(
        &[
            "TOPIC",
            "BROKER",
            "QID",
            "BROKER OFFSET",
            "CONSUMER OFFSET",
            "LAG",
            "IN-FLIGHT",
            "LAST CONSUME TIME (UTC)",
        ],
        &rows,
    ));
    let _ = writeln!(
        out,
        "total lag: {total_lag}, in flight: {total_in_flight}, consume tps: {:.2}",
        stats.consume_tps
    );
    out
}

/// Left-aligned columns separated by two spaces.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let text: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(text.join("  ").trim_end());
        out.push('\n');
    };
    line(headers.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// `now`, milliseconds since the epoch, or `yyyy-MM-dd#HH:mm:ss:SSS` (UTC), as RocketMQ's
/// `resetOffsetByTime -s` accepts (Java reads the date in the JVM's zone; skiff in UTC).
pub fn parse_time(value: &str, now_ms: i64) -> Result<i64, AdminError> {
    let value = value.trim();
    let invalid = || AdminError::InvalidTime {
        value: value.to_owned(),
    };
    if value.eq_ignore_ascii_case("now") {
        return Ok(now_ms);
    }
    if let Ok(ms) = value.parse::<i64>() {
        return Ok(ms);
    }
    let (date, time) = value.split_once('#').ok_or_else(invalid)?;
    let num = |s: &str, len: usize| -> Option<i64> {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let d: Vec<&str> = date.split('-').collect();
    let t: Vec<&str> = time.split(':').collect();
    let [y, mo, da] = d[..] else {
        return Err(invalid());
    };
    let [h, mi, s, ms] = t[..] else {
        return Err(invalid());
    };
    let (y, mo, da) = (num(y, 4), num(mo, 2), num(da, 2));
    let (h, mi, s, ms) = (num(h, 2), num(mi, 2), num(s, 2), num(ms, 3));
    let (Some(y), Some(mo), Some(da), Some(h), Some(mi), Some(s), Some(ms)) =
        (y, mo, da, h, mi, s, ms)
    else {
        return Err(invalid());
    };
    if !(1..=12).contains(&mo) || da < 1 || da > days_in_month(y, mo) || h > 23 || mi > 59 || s > 59
    {
        return Err(invalid());
    }
    let days = days_from_civil(y, mo, da);
    Ok((((days * 24 + h) * 60 + mi) * 60 + s) * 1000 + ms)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub(crate) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01.
pub(crate) fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `yyyy-MM-dd HH:mm:ss.SSS` in UTC.
pub fn format_time(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rest = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}",
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::body::OffsetWrapper;
    use crate::remoting::server::{
        ConnectionHandle, HandlerFuture, RemotingServer, RequestHandler, ServerConfig,
    };
    use clap::Parser;
    use std::sync::{Arc, Mutex};

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Top,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Top {
        Admin(AdminArgs),
    }

    fn parse(args: &[&str]) -> Result<AdminArgs, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("skiff").chain(args.iter().copied()))?;
        let Top::Admin(admin) = cli.command;
        Ok(admin)
    }

    #[test]
    fn command_line() -> anyhow::Result<()> {
        let a = parse(&["admin", "topics"])?;
        assert_eq!(a.namesrv, "127.0.0.1:9876");
        assert_eq!(a.command, AdminCommand::Topics);
        let a = parse(&["admin", "progress", "g", "--namesrv", "10.0.0.1:9876"])?;
        assert_eq!(a.namesrv, "10.0.0.1:9876");
        assert_eq!(a.command, AdminCommand::Progress { group: "g".into() });
        let a = parse(&["admin", "reset-offset", "g", "T", "--to-time", "now"])?;
        assert_eq!(
            a.command,
            AdminCommand::ResetOffset {
                group: "g".into(),
                topic: "T".into(),
                to_time: "now".into()
            }
        );
        assert!(parse(&["admin", "reset-offset", "g", "T"]).is_err());
        let a = parse(&["admin", "topic", "create", "T", "--message-type", "fifo"])?;
        assert_eq!(
            a.command,
            AdminCommand::Topic(TopicCommand::Create {
                topic: "T".into(),
                queues: 8,
                message_type: Some(TopicMessageType::Fifo),
            })
        );
        let a = parse(&["admin", "topic", "create", "T", "--queues", "2"])?;
        assert!(matches!(
            a.command,
            AdminCommand::Topic(TopicCommand::Create {
                message_type: None,
                ..
            })
        ));
        assert!(parse(&["admin", "topic", "create", "T", "--message-type", "ORDER"]).is_err());
        Ok(())
    }

    #[test]
    fn times() -> anyhow::Result<()> {
        assert_eq!(parse_time("now", 5)?, 5);
        assert_eq!(parse_time("1700000000123", 5)?, 1_700_000_000_123);
        assert_eq!(parse_time("1970-01-01#00:00:00:000", 5)?, 0);
        assert_eq!(parse_time("2023-11-14#22:13:20:123", 5)?, 1_700_000_000_123);
        assert_eq!(parse_time("2024-02-29#00:00:00:000", 5)?, 1_709_164_800_000);
        for bad in [
            "yesterday",
            "2023-11-14 22:13:20:123",
            "2023-13-14#22:13:20:123",
            "2023-02-29#00:00:00:000",
            "2023-11-14#24:00:00:000",
            "2023-11-14#22:13:20",
            "2023-1-14#22:13:20:123",
        ] {
            assert!(parse_time(bad, 0).is_err(), "{bad}");
        }
        assert_eq!(format_time(1_700_000_000_123), "2023-11-14 22:13:20.123");
        assert_eq!(format_time(0), "1970-01-01 00:00:00.000");
        Ok(())
    }

    #[test]
    fn bodies() -> anyhow::Result<()> {
        let topics = decode_topic_list(br#"{"topicList":["b","a","b"],"brokerAddr":null}"#)?;
        assert_eq!(topics.into_iter().collect::<Vec<_>>(), vec!["a", "b"]);
        let masters = cluster_masters(
            br#"{"brokerAddrTable":{"b1":{"brokerName":"b1","brokerAddrs":{0:"h1:1",1:"h2:1"}},"b2":{"brokerName":"b2","brokerAddrs":{"1":"h3:1"}}},"clusterAddrTable":{"c":["b1","b2"]}}"#,
        )?;
        assert_eq!(masters.into_iter().collect::<Vec<_>>(), vec!["h1:1"]);
        assert_eq!(perm_name(6), "RW-");
        assert_eq!(perm_name(7), "RWX");
        Ok(())
    }

    #[test]
    fn progress_rows() {
        let mut stats = ConsumeStats::default();
        stats.offset_table.insert(
            MessageQueue {
                topic: "T".into(),
                broker_name: "skiff".into(),
                queue_id: 1,
            },
            OffsetWrapper {
                broker_offset: 10,
                consumer_offset: 4,
                pull_offset: 6,
                last_timestamp: 1_700_000_000_123,
            },
        );
        let text = progress_table("g", &stats);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "consumer group g");
        assert!(lines[1].starts_with("TOPIC  BROKER  QID  BROKER OFFSET"));
        let cells: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            cells,
            vec![
                "T",
                "skiff",
                "1",
                "10",
                "4",
                "6",
                "2",
                "2023-11-14",
                "22:13:20.123"
            ]
        );
        assert!(lines[3].starts_with("total lag: 6, in flight: 2"));
    }

    /// A Java-like broker without online consumers: 222 is refused with CONSUMER_NOT_ONLINE.
    struct Offline {
        addr: Mutex<String>,
        updates: Mutex<Vec<(String, String)>>,
    }

    impl RequestHandler for Offline {
        fn handle(&self, _conn: ConnectionHandle, request: RemotingCommand) -> HandlerFuture {
            let ok = || RemotingCommand::new_response(code::SUCCESS, None);
            let answer = match request.code {
                rc::GET_ROUTEINFO_BY_TOPIC => {
                    let addr = self.addr.lock().map(|a| a.clone()).unwrap_or_default();
                    ok().with_body(format!(
                        r#"{{"brokerDatas":[{{"brokerAddrs":{{0:"{addr}"}},"brokerName":"b"}}],"queueDatas":[{{"brokerName":"b","readQueueNums":2,"writeQueueNums":2,"perm":6}}]}}"#
                    ))
                }
                rc::INVOKE_BROKER_TO_RESET_OFFSET => RemotingCommand::new_response(
                    code::CONSUMER_NOT_ONLINE,
                    Some("Consumer not online".into()),
                ),
                rc::GET_CONSUME_STATS => {
                    let mut stats = ConsumeStats::default();
                    for (topic, queue_id) in [("T", 0), ("T", 1), ("Other", 0)] {
                        stats.offset_table.insert(
                            MessageQueue {
                                topic: topic.into(),
                                broker_name: "b".into(),
                                queue_id,
                            },
                            OffsetWrapper::default(),
                        );
                    }
                    ok().with_body(stats.encode())
                }
                rc::SEARCH_OFFSET_BY_TIMESTAMP => {
                    let queue = request.ext("queueId").unwrap_or_default();
                    ok().with_ext("offset", format!("1{queue}"))
                }
                rc::UPDATE_CONSUMER_OFFSET => {
                    if let Ok(mut updates) = self.updates.lock() {
                        updates.push((
                            request.ext("queueId").unwrap_or_default().to_owned(),
                            request.ext("commitOffset").unwrap_or_default().to_owned(),
                        ));
                    }
                    ok()
                }
                _ => RemotingCommand::not_supported(&request),
            };
            Box::pin(async move { Some(answer) })
        }
    }

    #[test]
    fn reset_falls_back_to_direct_updates_when_no_consumer_is_online() -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let handler = Arc::new(Offline {
                addr: Mutex::new(String::new()),
                updates: Mutex::new(Vec::new()),
            });
            let server =
                RemotingServer::bind("127.0.0.1:0", ServerConfig::default(), handler.clone())
                    .await?;
            let addr = server.local_addr().to_string();
            *handler
                .addr
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))? = addr.clone();
            let text = run(AdminArgs {
                namesrv: addr,
                json: false,
                access_key: None,
                secret_key: None,
                command: AdminCommand::ResetOffset {
                    group: "g".into(),
                    topic: "T".into(),
                    to_time: "1000".into(),
                },
            })
            .await?;
            let rows: Vec<Vec<&str>> = text
                .lines()
                .filter(|l| l.starts_with("T "))
                .map(|l| l.split_whitespace().collect())
                .collect();
            assert_eq!(
                rows,
                vec![vec!["T", "b", "0", "10"], vec!["T", "b", "1", "11"]]
            );
            let updates = handler
                .updates
                .lock()
                .map(|u| u.clone())
                .unwrap_or_default();
            assert_eq!(
                updates,
                vec![("0".into(), "10".into()), ("1".into(), "11".into())]
            );
            server.shutdown().await;
            Ok(())
        })
    }
}
