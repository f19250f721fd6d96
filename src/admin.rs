//! `skiff admin`: RocketMQ admin requests over the network, against `skiff serve` or a real
//! RocketMQ name server + brokers, so that a user needs no `mqadmin` beside it.
//!
//! Every command finds the master brokers with GET_BROKER_CLUSTER_INFO (106) at the name server
//! (the name server itself when it lists none: `skiff serve` is both), and which of them have a
//! topic with GET_TOPIC_CONFIG (351; GET_ALL_TOPIC_CONFIG, 21, where a 4.x broker lacks 351):
//! no command sends a route query, which on some brokers creates the topic it asks about.
//!
//! * `topics`: GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), and GET_ALL_TOPIC_CONFIG (21) of every
//!   master for queue counts, perm and message type (the `message.type` attribute), see
//!   [`topic_list`].
//! * `progress <group>`: GET_CONSUME_STATS (208) from every master. Per queue: broker offset,
//!   consumer offset, lag, in-flight (the broker's pull offset minus the consumer offset:
//!   pulled, not yet committed) and the store time of the last consumed message. A group no
//!   master has stats or settings for is an error.
//! * `reset-offset <group> <topic> --to-time T`: INVOKE_BROKER_TO_RESET_OFFSET (222) on every
//!   master that has the topic; `T` is milliseconds since the epoch, `now`, or RocketMQ's
//!   `yyyy-MM-dd#HH:mm:ss:SSS` (read as UTC). Each queue restarts at the first message stored at
//!   or after `T`. A broker answering CONSUMER_NOT_ONLINE (a Java broker that resets through
//!   its online consumers) gets the offsets written directly instead, as Java's admin does:
//!   per queue SEARCH_OFFSET_BY_TIMESTAMP, then an acknowledged UPDATE_CONSUMER_OFFSET. Both
//!   are in [`offsets`].
//! * `topic create|delete|status`, `topic-status`, `connections <group>`, `cluster`: see
//!   [`resources`]; `topic update`: see [`topic_update`].
//! * `groups`, `group create|update|delete`: see [`groups`].
//! * `message <msg-id> [--topic T]`, `query <topic> <key>`: finding stored messages, see
//!   [`lookup`].
//!
//! The command line and the choice of name server (`--namesrv`, else `NAMESRV_ADDR`, else the
//! `listen` of `./skiff.toml`, else 127.0.0.1:9876) are in [`cli`]. This file holds the errors,
//! the request helpers every command shares and the time formats.
//!
//! Every command renders text, or with `--json` one JSON value (numbers as numbers). Any
//! answer but SUCCESS (a refusal under ACL included) is an error carrying the broker's code and
//! remark, and a topic or group that does not exist is an error naming it; `skiff admin` then
//! exits with code 1. [`run`] returns the text to print.

mod auth;
mod cli;
mod groups;
mod lite;
mod lookup;
mod offsets;
mod resources;
mod topic_list;
mod topic_update;

use std::time::Duration;

use serde_json::Value;
use skiff_storage::clock::epoch_millis;

use crate::acl::signature::Credentials;
use crate::calendar::{civil_from_days, days_from_civil, days_in_month};
use crate::remoting::body::{BodyError, JsonBody, TopicConfigBody};
use crate::remoting::client::{ClientConfig, ClientError, RemotingClient};
use crate::remoting::codes::{request as rc, response as code};
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{CustomHeader, HeaderError, TopicRequestHeader};

pub use cli::{
    resolve_namesrv, AdminArgs, AdminCommand, GroupCommand, GroupSettings, NamesrvSource,
    TopicCommand, CONFIG_FILE, DEFAULT_NAMESRV, NAMESRV_ENV,
};

/// Request timeout of every admin call (Java `mqClientApiTimeout`).
const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("invalid time {value:?}: expected milliseconds since the epoch, \"now\" or yyyy-MM-dd#HH:mm:ss:SSS")]
    InvalidTime { value: String },
    #[error(
        "reading the name server address from {file} (--namesrv or {} skip it)",
        cli::NAMESRV_ENV
    )]
    Config {
        file: String,
        // Boxed: a configuration error carries where each value came from.
        #[source]
        source: Box<crate::config::ConfigError>,
    },
    #[error("request to {addr}{via} failed")]
    Request {
        addr: String,
        /// For the name server: where its address came from.
        via: String,
        #[source]
        source: ClientError,
    },
    #[error("{addr} refused the request: {} ({code}): {remark}", code_name(*code))]
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
    #[error("topic {topic} does not exist")]
    TopicNotExist { topic: String },
    #[error("consumer group {group} does not exist")]
    GroupNotExist { group: String },
    #[error(
        "consumer group {group} exists already on {brokers}; `skiff admin group update` changes it"
    )]
    GroupExists { group: String, brokers: String },
    #[error("{addr} answered success but did not keep {settings} of consumer group {group}")]
    NotKept {
        addr: String,
        group: String,
        settings: String,
    },
    #[error("nothing to change: give at least one of {options}")]
    NothingToChange { options: &'static str },
    #[error("refused to change topic {topic}: {detail}; --yes applies it anyway")]
    WouldHide { topic: String, detail: String },
    #[error("no {what} found")]
    NotFound { what: String },
}

/// RocketMQ's name of a response code, for error messages.
fn code_name(value: i32) -> &'static str {
    match value {
        code::SYSTEM_ERROR => "SYSTEM_ERROR",
        code::SYSTEM_BUSY => "SYSTEM_BUSY",
        code::REQUEST_CODE_NOT_SUPPORTED => "REQUEST_CODE_NOT_SUPPORTED",
        code::SERVICE_NOT_AVAILABLE => "SERVICE_NOT_AVAILABLE",
        code::NO_PERMISSION => "NO_PERMISSION",
        code::TOPIC_NOT_EXIST => "TOPIC_NOT_EXIST",
        code::QUERY_NOT_FOUND => "QUERY_NOT_FOUND",
        code::SUBSCRIPTION_GROUP_NOT_EXIST => "SUBSCRIPTION_GROUP_NOT_EXIST",
        code::INVALID_PARAMETER => "INVALID_PARAMETER",
        code::CONSUMER_NOT_ONLINE => "CONSUMER_NOT_ONLINE",
        _ => "code",
    }
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

/// Runs one admin command; returns the text to print. The name server is `--namesrv`, else
/// `NAMESRV_ADDR`, else the listen address of `./skiff.toml`, else 127.0.0.1:9876 (see
/// [`resolve_namesrv`]). Needs a tokio runtime.
pub async fn run(args: AdminArgs) -> Result<String, AdminError> {
    let (namesrv, source) = resolve_namesrv(
        args.namesrv.as_deref(),
        std::env::var(NAMESRV_ENV).ok().as_deref(),
        std::path::Path::new(CONFIG_FILE),
    )?;
    let admin = Admin {
        namesrv,
        namesrv_source: source,
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
    let result = admin.dispatch(args.command).await;
    admin.client.shutdown();
    let rendered = result?;
    Ok(if args.json {
        format!("{}\n", rendered.json)
    } else {
        rendered.text
    })
}

/// What a command shows: a table for people, a JSON value for scripts.
pub struct Rendered {
    pub text: String,
    pub json: Value,
}

impl Admin {
    async fn dispatch(&self, command: AdminCommand) -> Result<Rendered, AdminError> {
        match command {
            AdminCommand::Topics => self.topics().await,
            AdminCommand::Progress { group } => self.progress(&group).await,
            AdminCommand::ResetOffset {
                group,
                topic,
                to_time,
            } => {
                let timestamp = parse_time(&to_time, epoch_millis())?;
                self.reset_offset(&group, &topic, timestamp).await
            }
            AdminCommand::Topic(TopicCommand::Create {
                topic,
                queues,
                message_type,
            }) => self.topic_create(&topic, queues, message_type).await,
            AdminCommand::Topic(TopicCommand::Update {
                topic,
                read_queues,
                write_queues,
                perm,
                yes,
            }) => {
                let change = topic_update::TopicChange {
                    read_queues,
                    write_queues,
                    perm,
                };
                self.topic_update(&topic, change, yes).await
            }
            AdminCommand::Topic(TopicCommand::Delete { topic }) => self.topic_delete(&topic).await,
            AdminCommand::Topic(TopicCommand::Status { topic })
            | AdminCommand::TopicStatus { topic } => self.topic_status(&topic).await,
            AdminCommand::Group(GroupCommand::Create { group, settings }) => {
                self.group_create(&group, &settings).await
            }
            AdminCommand::Group(GroupCommand::Update { group, settings }) => {
                self.group_update(&group, &settings).await
            }
            AdminCommand::Group(GroupCommand::Delete {
                group,
                clean_offsets,
            }) => self.group_delete(&group, clean_offsets).await,
            AdminCommand::Groups => self.groups().await,
            AdminCommand::Connections { group } => self.connections(&group).await,
            AdminCommand::Cluster => self.cluster().await,
            AdminCommand::Message { id, topic } => self.message(&id, topic.as_deref()).await,
            AdminCommand::Query { topic, key } => self.query(&topic, &key).await,
            AdminCommand::Lite {
                parent,
                after,
                limit,
            } => self.lite(&parent, after.as_deref(), limit).await,
            AdminCommand::User(command) => self.user(command).await,
            AdminCommand::Acl(command) => self.acl(command).await,
        }
    }
}

struct Admin {
    namesrv: String,
    namesrv_source: NamesrvSource,
    client: RemotingClient,
}

/// A master broker that has a topic, with the topic's config there.
struct TopicHolder {
    broker: String,
    addr: String,
    config: TopicConfigBody,
}

impl Admin {
    /// One request; any answer but SUCCESS is an error carrying the broker's code and remark.
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
                via: if addr == self.namesrv {
                    format!(
                        " (the name server, from {})",
                        self.namesrv_source.describe()
                    )
                } else {
                    String::new()
                },
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

    /// Every master broker that has `topic`, with its config there: GET_TOPIC_CONFIG (351) on
    /// each master of the cluster, or GET_ALL_TOPIC_CONFIG (21) where 351 is not served (4.x).
    /// Unlike a route query, neither creates the topic. None has it: [`AdminError::TopicNotExist`].
    async fn topic_masters(&self, topic: &str) -> Result<Vec<TopicHolder>, AdminError> {
        let mut holders = Vec::new();
        for (broker, addr) in self.masters_by_name().await? {
            let request = RemotingCommand::new_request(rc::GET_TOPIC_CONFIG)
                .with_ext_fields(TopicRequestHeader::new(topic).to_ext());
            let config = match self.call(&addr, request).await {
                Ok(response) => Some(
                    TopicConfigBody::decode(&response.body)
                        .map_err(|e| bad(&addr, "topic config", e))?,
                ),
                Err(AdminError::Remote { code: c, .. }) if c == code::TOPIC_NOT_EXIST => None,
                Err(AdminError::Remote { code: c, .. })
                    if c == code::REQUEST_CODE_NOT_SUPPORTED =>
                {
                    self.all_topic_configs(&addr).await?.remove(topic)
                }
                Err(e) => return Err(e),
            };
            if let Some(config) = config {
                holders.push(TopicHolder {
                    broker,
                    addr,
                    config,
                });
            }
        }
        if holders.is_empty() {
            return Err(AdminError::TopicNotExist {
                topic: topic.to_owned(),
            });
        }
        Ok(holders)
    }
}

/// Turns a broker's TOPIC_NOT_EXIST into [`AdminError::TopicNotExist`] and
/// SUBSCRIPTION_GROUP_NOT_EXIST into [`AdminError::GroupNotExist`].
fn missing(error: AdminError, topic: Option<&str>, group: Option<&str>) -> AdminError {
    match (&error, topic, group) {
        (AdminError::Remote { code: c, .. }, Some(topic), _) if *c == code::TOPIC_NOT_EXIST => {
            AdminError::TopicNotExist {
                topic: topic.to_owned(),
            }
        }
        (AdminError::Remote { code: c, .. }, _, Some(group))
            if *c == code::SUBSCRIPTION_GROUP_NOT_EXIST =>
        {
            AdminError::GroupNotExist {
                group: group.to_owned(),
            }
        }
        _ => error,
    }
}

fn bad(addr: &str, what: &'static str, error: impl Into<AnswerError>) -> AdminError {
    AdminError::BadAnswer {
        addr: addr.to_owned(),
        what,
        source: error.into(),
    }
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
    use std::sync::{Arc, Mutex};

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
                rc::GET_BROKER_CLUSTER_INFO => {
                    let addr = self.addr.lock().map(|a| a.clone()).unwrap_or_default();
                    ok().with_body(format!(
                        r#"{{"brokerAddrTable":{{"b":{{"brokerAddrs":{{0:"{addr}"}},"brokerName":"b"}}}},"clusterAddrTable":{{"c":["b"]}}}}"#
                    ))
                }
                rc::GET_TOPIC_CONFIG => ok().with_body(
                    r#"{"topicName":"T","readQueueNums":2,"writeQueueNums":2,"perm":6}"#,
                ),
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
                namesrv: Some(addr),
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
