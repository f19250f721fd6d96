//! `skiff-bench load`: the shape of RocketMQ's own benchmark producer (many connections, each
//! sending one message per request and waiting for its answer) against one running broker,
//! optionally with consumer groups pulling the first topic while it runs. Prints one line (or
//! JSON with `--json`): sends per second, send latency percentiles, messages consumed per second,
//! and, given the broker's pids, its CPU per message and RSS. `bench/scale.sh` drives it for
//! the scale curve.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;

use skiff::remoting::codes::{request, response};
use skiff::remoting::headers::{CustomHeader, PullMessageResponseHeader};
use skiff::remoting::{ClientConfig, ConnectionHandle, RemotingClient, RemotingCommand};

use crate::broker::{cpu_secs, proc_status_kib};
use crate::skiff_driver::{check, e, for_each_body, heartbeat, properties, pull_header, send_header, TIMEOUT};
use crate::workload::{now_ns, PayloadGen};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "skiff-bench load",
    about = "Many connections sending one message per request (RocketMQ's benchmark producer's shape) against one running broker"
)]
pub struct LoadArgs {
    /// The broker's remoting address (skiff: its --listen address).
    #[arg(long)]
    addr: String,
    /// Producer connections, each with one send in flight.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Body bytes per message.
    #[arg(long, default_value_t = 128)]
    size: usize,
    /// Seconds measured.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Seconds of load before the measurement starts.
    #[arg(long, default_value_t = 2)]
    warmup_secs: u64,
    /// Topics the sends rotate over (`<prefix>-0` …); each is created by its first send.
    #[arg(long, default_value_t = 1)]
    topics: usize,
    #[arg(long, default_value = "load")]
    topic_prefix: String,
    /// Queues per topic (the send header's defaultTopicQueueNums).
    #[arg(long, default_value_t = 4)]
    queues: usize,
    /// Consumer groups pulling every queue of the first topic (one connection each) while the
    /// producers run.
    #[arg(long, default_value_t = 0)]
    groups: usize,
    /// Messages put into the first topic (batched) before the run; the groups start at its
    /// first offset, so they drain it while the producers run.
    #[arg(long, default_value_t = 0)]
    backlog: u64,
    /// Broker pids (comma separated) whose CPU and RSS are reported.
    #[arg(long, value_delimiter = ',')]
    pid: Vec<u32>,
    /// Worker threads of the load generator's runtime.
    #[arg(long, default_value_t = 2)]
    client_threads: usize,
    /// Print one JSON object instead of the text line.
    #[arg(long)]
    json: bool,
}

/// What one run measured.
#[derive(Debug, Default)]
struct Measured {
    secs: f64,
    sent: u64,
    consumed: u64,
    latencies_us: Vec<u32>,
    broker_cpu_secs: Option<f64>,
    client_cpu_secs: f64,
    broker_rss_kib: Option<u64>,
    broker_hwm_kib: Option<u64>,
}

/// Counters shared by the connections and the controller.
struct Shared {
    stop: AtomicBool,
    measuring: AtomicBool,
    sent: AtomicU64,
    consumed: AtomicU64,
}

pub fn main(argv: impl Iterator<Item = String>) -> Result<()> {
    let args = LoadArgs::parse_from(argv);
    if args.connections == 0 || args.topics == 0 || args.queues == 0 || args.size < 16 {
        bail!("--connections, --topics and --queues must be positive and --size at least 16");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.client_threads.max(1))
        .enable_all()
        .build()?;
    let m = rt.block_on(run(&args))?;
    report(&args, &m);
    Ok(())
}

fn topic(args: &LoadArgs, i: usize) -> String {
    format!("{}-{i}", args.topic_prefix)
}

async fn connect(addr: &str) -> Result<(RemotingClient, ConnectionHandle)> {
    let client = RemotingClient::new(ClientConfig::default());
    let conn = client.connection_to(addr, TIMEOUT).await.map_err(e)?;
    Ok((client, conn))
}

fn single_send(args: &LoadArgs, gen: &mut PayloadGen, topic: &str, seq: u64) -> RemotingCommand {
    let mut props = Vec::with_capacity(64);
    properties(&mut props, seq, false);
    // Java's Message sets WAIT=true unless told otherwise.
    props.extend_from_slice(b"WAIT\x01true\x02");
    let props = String::from_utf8(props).expect("ascii properties");
    let header = send_header(topic, args.queues, (seq % args.queues as u64) as usize, false, Some(props));
    RemotingCommand::new_request(request::SEND_MESSAGE_V2)
        .with_ext_fields(header.to_v2_ext())
        .with_body(gen.make(seq, now_ns()))
}

/// One message into every queue of every topic, so the run measures sends to queues that
/// exist (a queue's first message creates its directory and file, a cost of its own).
async fn create_topics(args: &LoadArgs, conns: &[ConnectionHandle]) -> Result<()> {
    let mut gen = PayloadGen::new(0xc0de, args.size);
    let queues = args.queues as u64;
    let all: Vec<u64> = (0..args.topics as u64 * queues).collect();
    for chunk in all.chunks(conns.len() * 4) {
        let sends = chunk.iter().map(|&n| {
            // Sequence n goes to queue n mod queues (see `single_send`).
            let t = (n / queues) as usize;
            let req = single_send(args, &mut gen, &topic(args, t), n);
            let conn = &conns[n as usize % conns.len()];
            async move { check(&conn.invoke(req, TIMEOUT).await.map_err(e)?, "send") }
        });
        for r in futures::future::join_all(sends.collect::<Vec<_>>()).await {
            r?;
        }
    }
    Ok(())
}

/// `args.backlog` messages into the first topic, 100 per SEND_BATCH_MESSAGE.
async fn fill_backlog(args: &LoadArgs, conn: &ConnectionHandle) -> Result<()> {
    let first = topic(args, 0);
    let mut gen = PayloadGen::new(0xbac, args.size);
    let mut seq = 0u64;
    while seq < args.backlog {
        let mut inflight = Vec::new();
        for queue in 0..args.queues {
            let mut body = Vec::with_capacity(100 * (args.size + 80));
            for _ in 0..100 {
                if seq >= args.backlog {
                    break;
                }
                crate::skiff_driver::encode_batch_record(&mut body, &mut gen, seq, now_ns(), false);
                seq += 1;
            }
            if body.is_empty() {
                break;
            }
            let header = send_header(&first, args.queues, queue, true, None);
            inflight.push(conn.invoke(
                RemotingCommand::new_request(request::SEND_BATCH_MESSAGE)
                    .with_ext_fields(header.to_v2_ext())
                    .with_body(body),
                TIMEOUT,
            ));
        }
        for r in futures::future::join_all(inflight).await {
            check(&r.map_err(e)?, "batch send")?;
        }
    }
    Ok(())
}

/// One producer connection: send, wait, repeat, until told to stop or a send fails.
async fn produce(args: Arc<LoadArgs>, shared: Arc<Shared>, conn: ConnectionHandle, index: usize) -> Result<Vec<u32>> {
    let mut gen = PayloadGen::new(0x5eed + index as u64, args.size);
    let topics: Vec<String> = (0..args.topics).map(|t| topic(&args, t)).collect();
    let mut latencies = Vec::new();
    let mut seq = (index as u64) << 40;
    let mut next_topic = index % topics.len();
    while !shared.stop.load(Ordering::Relaxed) {
        let req = single_send(&args, &mut gen, &topics[next_topic], seq);
        next_topic = (next_topic + 1) % topics.len();
        seq += 1;
        let started = Instant::now();
        let resp = conn.invoke(req, TIMEOUT).await.map_err(e);
        if let Err(failed) = resp.and_then(|resp| check(&resp, "send")) {
            // Stops every connection: a run with failed sends measures nothing.
            shared.stop.store(true, Ordering::Relaxed);
            return Err(failed.context(format!("connection {index}")));
        }
        if shared.measuring.load(Ordering::Relaxed) {
            latencies.push(started.elapsed().as_micros().min(u32::MAX as u128) as u32);
            shared.sent.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(latencies)
}

/// One consumer group: a pull loop per queue of the first topic, from its first offset,
/// committing what it consumed on the next pull.
async fn consume(args: Arc<LoadArgs>, shared: Arc<Shared>, conn: ConnectionHandle, group: String) -> Result<()> {
    let first = topic(&args, 0);
    let loops = (0..args.queues).map(|queue| {
        let (conn, shared, first, group) = (conn.clone(), shared.clone(), first.clone(), group.clone());
        async move {
            let (mut offset, mut committed) = (0i64, 0i64);
            while !shared.stop.load(Ordering::Relaxed) {
                let h = pull_header(&group, &first, queue, offset, committed, 32, 500);
                let resp = conn
                    .invoke(
                        RemotingCommand::new_request(request::PULL_MESSAGE).with_ext_fields(h.to_ext()),
                        TIMEOUT,
                    )
                    .await
                    .map_err(e)?;
                match resp.code {
                    response::SUCCESS => {
                        let rh = PullMessageResponseHeader::from_command(&resp).map_err(e)?;
                        let n = for_each_body(&resp.body, |_| {})?;
                        if shared.measuring.load(Ordering::Relaxed) {
                            shared.consumed.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        offset = rh.next_begin_offset;
                        committed = offset;
                    }
                    response::PULL_NOT_FOUND | response::PULL_RETRY_IMMEDIATELY => {}
                    response::PULL_OFFSET_MOVED => {
                        offset = PullMessageResponseHeader::from_command(&resp).map_err(e)?.next_begin_offset;
                    }
                    other => bail!("pull of {group} on queue {queue}: code {other} ({:?})", resp.remark),
                }
            }
            anyhow::Ok(())
        }
    });
    for r in futures::future::join_all(loops).await {
        r?;
    }
    Ok(())
}

fn broker_cpu(pids: &[u32]) -> Result<Option<f64>> {
    if pids.is_empty() {
        return Ok(None);
    }
    let mut total = 0.0;
    for &pid in pids {
        total += cpu_secs(pid)?;
    }
    Ok(Some(total))
}

/// The sum of a `/proc/PID/status` field (KiB) over the broker's pids; `None` without pids or
/// when a pid is gone.
fn status_kib(pids: &[u32], key: &str) -> Option<u64> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().map(|&pid| proc_status_kib(pid, key).ok()).sum()
}

async fn run(args: &LoadArgs) -> Result<Measured> {
    let args = Arc::new(args.clone());
    let mut clients = Vec::new();
    let mut producers = Vec::new();
    for _ in 0..args.connections {
        let (client, conn) = connect(&args.addr).await.with_context(|| format!("connecting to {}", args.addr))?;
        clients.push(client);
        producers.push(conn);
    }
    let client_id = format!("127.0.0.1@load-{}", std::process::id());
    // Every connection completes a request at once: a node closes connections that complete
    // none within its handshake timeout, and a long backlog fill leaves most of them idle.
    for conn in &producers {
        heartbeat(conn, &client_id, "load-producer", None).await?;
    }
    create_topics(&args, &producers).await.context("creating the topics")?;
    fill_backlog(&args, &producers[0]).await.context("filling the backlog")?;
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        measuring: AtomicBool::new(false),
        sent: AtomicU64::new(0),
        consumed: AtomicU64::new(0),
    });
    let mut consumers = Vec::new();
    for g in 0..args.groups {
        let (client, conn) = connect(&args.addr).await?;
        let group = format!("{}-group-{g}", args.topic_prefix);
        heartbeat(&conn, &format!("{client_id}-{g}"), "load-producer", Some((&group, &topic(&args, 0)))).await?;
        consumers.push(tokio::spawn(consume(args.clone(), shared.clone(), conn, group)));
        clients.push(client);
    }
    let tasks: Vec<_> = producers
        .into_iter()
        .enumerate()
        .map(|(i, conn)| tokio::spawn(produce(args.clone(), shared.clone(), conn, i)))
        .collect();
    tokio::time::sleep(Duration::from_secs(args.warmup_secs)).await;
    let me = std::process::id();
    let (b0, c0) = (broker_cpu(&args.pid)?, cpu_secs(me)?);
    let t0 = Instant::now();
    shared.measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    shared.measuring.store(false, Ordering::Relaxed);
    let secs = t0.elapsed().as_secs_f64();
    let (b1, c1) = (broker_cpu(&args.pid)?, cpu_secs(me)?);
    let (sent, consumed) = (shared.sent.load(Ordering::Relaxed), shared.consumed.load(Ordering::Relaxed));
    shared.stop.store(true, Ordering::Relaxed);
    let mut latencies_us = Vec::with_capacity(sent as usize);
    for t in tasks {
        latencies_us.extend(t.await??);
    }
    for c in consumers {
        c.await??;
    }
    latencies_us.sort_unstable();
    for c in clients {
        c.shutdown();
    }
    Ok(Measured {
        secs,
        sent,
        consumed,
        latencies_us,
        broker_cpu_secs: b0.zip(b1).map(|(a, b)| b - a),
        client_cpu_secs: c1 - c0,
        broker_rss_kib: status_kib(&args.pid, "VmRSS:"),
        broker_hwm_kib: status_kib(&args.pid, "VmHWM:"),
    })
}

/// Nearest-rank percentile of sorted samples, `p_milli` in thousandths of a percent (integers,
/// so that 99.9 % of 1,000 samples is the 999th).
fn percentile(sorted: &[u32], p_milli: u64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p_milli * sorted.len() as u64).div_ceil(100_000) as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn report(args: &LoadArgs, m: &Measured) {
    let sends_per_sec = m.sent as f64 / m.secs;
    let consumed_per_sec = m.consumed as f64 / m.secs;
    let per_msg = |cpu: f64| cpu * 1e6 / (m.sent.max(1)) as f64;
    let (p50, p99, p999) = (
        percentile(&m.latencies_us, 50_000),
        percentile(&m.latencies_us, 99_000),
        percentile(&m.latencies_us, 99_900),
    );
    let max = m.latencies_us.last().copied().unwrap_or(0);
    let broker = m.broker_cpu_secs.map(per_msg);
    if args.json {
        let v = serde_json::json!({
            "connections": args.connections, "topics": args.topics, "groups": args.groups,
            "backlog": args.backlog, "size": args.size, "seconds": m.secs,
            "sent": m.sent, "sends_per_sec": sends_per_sec, "consumed_per_sec": consumed_per_sec,
            "p50_us": p50, "p99_us": p99, "p999_us": p999, "max_us": max,
            "broker_cpu_us_per_send": broker, "client_cpu_us_per_send": per_msg(m.client_cpu_secs),
            "broker_cpu_us_per_message": m.broker_cpu_secs.map(|c| c * 1e6 / (m.sent + m.consumed).max(1) as f64),
            "broker_rss_kib": m.broker_rss_kib, "broker_hwm_kib": m.broker_hwm_kib,
        });
        println!("{v}");
        return;
    }
    println!(
        "{} connections, {} topics, {} groups, backlog {}: {:.0} sends/s, {:.0} consumed/s, send p50/p99/p99.9/max {}/{}/{}/{} µs, broker CPU {} µs/send, client CPU {:.2} µs/send, broker RSS {} (peak {})",
        args.connections,
        args.topics,
        args.groups,
        args.backlog,
        sends_per_sec,
        consumed_per_sec,
        p50,
        p99,
        p999,
        max,
        broker.map_or("-".into(), |b| format!("{b:.2}")),
        per_msg(m.client_cpu_secs),
        m.broker_rss_kib.map_or("-".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0)),
        m.broker_hwm_kib.map_or("-".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<u32> = (1..=1000).collect();
        assert_eq!(percentile(&v, 50_000), 500);
        assert_eq!(percentile(&v, 99_000), 990);
        assert_eq!(percentile(&v, 99_900), 999);
        assert_eq!(percentile(&[], 99_000), 0);
    }

    #[test]
    fn single_send_carries_the_java_client_properties() {
        let args = LoadArgs::parse_from(["load", "--addr", "x", "--queues", "4"]);
        let mut gen = PayloadGen::new(1, 128);
        let req = single_send(&args, &mut gen, "load-0", 6);
        assert_eq!(req.code, request::SEND_MESSAGE_V2);
        assert_eq!(req.body.len(), 128);
        assert_eq!(req.ext("e"), Some("2"));
        assert!(req.ext("i").is_some_and(|p| p.contains("WAIT\x01true\x02")));
    }
}
