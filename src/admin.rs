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
//! `topics` is in [`topic_list`]; `progress` and `reset-offset` are in [`offsets`]. This file
//! holds the command line, the errors, the request helper every command shares and the time
//! formats.
//!
//! `--json` prints JSON instead of a table (for the commands of [`resources`] and [`lookup`];
//! the others print their table either way). [`run`] returns the text to print.

mod lookup;
mod offsets;
mod resources;
mod topic_list;

use std::collections::BTreeSet;
use std::time::Duration;

use skiff_storage::clock::epoch_millis;
use skiff_storage::metadata::TopicMessageType;

use crate::acl::signature::Credentials;
use crate::calendar::{civil_from_days, days_from_civil, days_in_month};
use crate::remoting::body::{BodyError, JsonBody, TopicRouteData};
use crate::remoting::client::{ClientConfig, ClientError, RemotingClient};
use crate::remoting::codes::{request as rc, response as code};
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{CustomHeader, GetRouteInfoRequestHeader, HeaderError};

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
        /// Read and write queue count (at least 1: a topic without queues takes no message).
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
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
}

fn bad(addr: &str, what: &'static str, error: impl Into<AnswerError>) -> AdminError {
    AdminError::BadAnswer {
        addr: addr.to_owned(),
        what,
        source: error.into(),
    }
}

fn masters(route: &TopicRouteData) -> BTreeSet<String> {
    route
        .broker_datas
        .iter()
        .filter_map(|b| b.broker_addrs.get(&0).cloned())
        .collect()
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
    use crate::remoting::body::{ConsumeStats, MessageQueue, OffsetWrapper};
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
        assert!(
            parse(&["admin", "topic", "create", "T", "--queues", "0"]).is_err(),
            "a topic without queues is refused before anything is sent"
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
