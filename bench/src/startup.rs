//! Time from process start to the first acknowledged send: right after spawning the broker
//! process(es), try one send every 10 ms, each attempt a fresh connection, until one is
//! acknowledged.
//!
//! * skiff, Apache RocketMQ: as a RocketMQ producer does for a topic that does not exist yet:
//!   GET_ROUTEINFO_BY_TOPIC for the auto-create topic `TBW102` at the name server (skiff is
//!   its own name server; Apache's broker must have registered with its name server), then
//!   SEND_MESSAGE_V2 of one message to topic `bench-startup` (created from `TBW102`) at the
//!   master address the route names; acknowledged = SUCCESS.
//! * Redis: `XADD bench-startup * p <payload>` answered with an id.
//! * JetStream: create (or get) the file stream `STARTUP` (subject `startup`), publish one
//!   message and receive its publish ack.

use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use async_nats::jetstream::{self, stream};

use skiff::remoting::body::{JsonBody, TopicRouteData};
use skiff::remoting::codes::{request, response, AUTO_CREATE_TOPIC_KEY};
use skiff::remoting::headers::{CustomHeader, GetRouteInfoRequestHeader, SendMessageRequestHeader};
use skiff::remoting::{ClientConfig, RemotingClient, RemotingCommand};

use crate::broker::{Kind, Running};
use crate::resp::Resp;

const TOPIC: &str = "bench-startup";
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);
const RETRY_EVERY: Duration = Duration::from_millis(10);

/// The first acknowledged send after the broker's spawn.
pub struct FirstAck {
    /// From spawning the (first) broker process to the acknowledgement.
    pub elapsed: Duration,
    /// Attempts made (the last one succeeded).
    pub attempts: u32,
    /// Where the workload's client connects: for the RocketMQ brokers the master address from
    /// the route, else the broker's address.
    pub addr: String,
}

/// Tries a send every 10 ms until one is acknowledged, the broker exits, or `limit` passes.
pub async fn first_ack(broker: &mut Running, limit: Duration) -> Result<FirstAck> {
    let addr = broker.addr();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let attempt = async {
            match broker.kind {
                k if k.is_remoting() => remoting_send(&addr).await,
                Kind::RedisEverysec | Kind::RedisAlways => redis_send(&addr).await.map(|_| addr.clone()),
                Kind::JetStream => nats_send(&addr).await.map(|_| addr.clone()),
                _ => unreachable!(),
            }
        };
        let last = match tokio::time::timeout(ATTEMPT_TIMEOUT, attempt).await {
            Ok(Ok(sent_to)) => {
                return Ok(FirstAck {
                    elapsed: broker.spawned.elapsed(),
                    attempts,
                    addr: sent_to,
                })
            }
            Ok(Err(err)) => format!("{err:#}"),
            Err(_) => format!("attempt timed out after {ATTEMPT_TIMEOUT:?}"),
        };
        broker.check_alive()?;
        if broker.spawned.elapsed() > limit {
            bail!(
                "{}: no acknowledged send within {limit:?} of the start ({attempts} attempts; last: {last})",
                broker.kind.name()
            );
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}

fn e(err: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("{err}")
}

/// Route of TBW102 from the name server, then one SEND_MESSAGE_V2 to the master it names.
/// Returns the master's address.
async fn remoting_send(namesrv: &str) -> Result<String> {
    let client = RemotingClient::new(ClientConfig {
        connect_timeout: ATTEMPT_TIMEOUT,
        ..Default::default()
    });
    let result = async {
        let conn = client.connection_to(namesrv, ATTEMPT_TIMEOUT).await.map_err(e)?;
        let route_req = RemotingCommand::new_request(request::GET_ROUTEINFO_BY_TOPIC).with_ext_fields(
            GetRouteInfoRequestHeader {
                topic: AUTO_CREATE_TOPIC_KEY.to_owned(),
                accept_standard_json_only: None,
            }
            .to_ext(),
        );
        let resp = conn.invoke(route_req, ATTEMPT_TIMEOUT).await.map_err(e)?;
        if resp.code != response::SUCCESS {
            bail!("route of {AUTO_CREATE_TOPIC_KEY}: code {} ({})", resp.code, resp.remark.unwrap_or_default());
        }
        let route = TopicRouteData::decode(&resp.body).map_err(e)?;
        let master = route
            .master_addr()
            .with_context(|| format!("route of {AUTO_CREATE_TOPIC_KEY} names no master"))?
            .to_owned();
        let conn = if master == namesrv {
            conn
        } else {
            client.connection_to(&master, ATTEMPT_TIMEOUT).await.map_err(e)?
        };
        let header = SendMessageRequestHeader {
            producer_group: "bench-startup-producer".to_owned(),
            topic: TOPIC.to_owned(),
            default_topic: AUTO_CREATE_TOPIC_KEY.to_owned(),
            default_topic_queue_nums: 4,
            queue_id: 0,
            sys_flag: 0,
            born_timestamp: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            flag: 0,
            properties: Some(format!("UNIQ_KEY\u{1}7F000001{:04X}00000000000000000001\u{2}", std::process::id() & 0xFFFF)),
            reconsume_times: Some(0),
            unit_mode: Some(false),
            max_reconsume_times: None,
            batch: Some(false),
            broker_name: None,
        };
        let send = RemotingCommand::new_request(request::SEND_MESSAGE_V2)
            .with_ext_fields(header.to_v2_ext())
            .with_body(b"startup".to_vec());
        let resp = conn.invoke(send, ATTEMPT_TIMEOUT).await.map_err(e)?;
        if resp.code != response::SUCCESS {
            bail!("send: code {} ({})", resp.code, resp.remark.unwrap_or_default());
        }
        anyhow::Ok(master)
    }
    .await;
    client.shutdown();
    result
}

async fn redis_send(addr: &str) -> Result<()> {
    let mut c = Resp::connect(addr).await?;
    c.call(&[b"XADD", TOPIC.as_bytes(), b"*", b"p", b"startup"])
        .await?
        .into_bulk()
        .context("XADD")?;
    Ok(())
}

async fn nats_send(addr: &str) -> Result<()> {
    let client = async_nats::connect(format!("nats://{addr}")).await.map_err(e)?;
    let js = jetstream::new(client);
    js.get_or_create_stream(stream::Config {
        name: "STARTUP".to_owned(),
        subjects: vec!["startup".to_owned()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .map_err(e)?;
    js.publish("startup", "startup".into())
        .await
        .map_err(e)?
        .await
        .map_err(e)?;
    Ok(())
}

/// Milliseconds, for the report.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
