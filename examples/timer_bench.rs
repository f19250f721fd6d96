//! Timer-message benchmark against a `skiff serve` child process over loopback TCP.
//!
//! 1. Lateness: `--rate` timer messages per second for `--secs` seconds (batches every 10 ms),
//!    each due `--delay-ms` after it is sent (plus a random 0..1000 ms, so deliver times are not
//!    on second boundaries). When all have fired, every delivered copy's store timestamp is
//!    compared with its `TIMER_OUT_MS` (the broker's rounded due time): p50, p99, max.
//! 2. Memory: `--pending` timers due two days ahead are sent; the broker's RSS (VmRSS, VmHWM)
//!    is read from /proc once it has settled, with the timer index's size on disk.
//!
//! ```sh
//! cargo build --release --bin skiff --example timer_bench
//! target/release/examples/timer_bench --skiff-bin target/release/skiff
//! ```

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use bytes::Bytes;
use skiff::remoting::body::{encode_batch, BatchEntry};
use skiff::remoting::codes::{request as rc, response as code, AUTO_CREATE_TOPIC_KEY};
use skiff::remoting::{ClientConfig, RemotingClient};
use skiff::storage::clock::epoch_millis;
use skiff::storage::message::decode_records;

#[path = "support/child.rs"]
mod child;
use child::{proc_kib, request, Server};

const TOPIC: &str = "TimerBench";
const PENDING_TOPIC: &str = "TimerBenchPending";
const GROUP: &str = "timer-bench-pg";
const BODY: &[u8] = &[b'x'; 100];

struct Args {
    skiff_bin: String,
    rate: u64,
    secs: u64,
    delay_ms: i64,
    pending: u64,
    /// Send the `--pending` messages without a deliver time (a baseline for the RSS figure).
    plain: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        skiff_bin: "target/release/skiff".into(),
        rate: 10_000,
        secs: 10,
        delay_ms: 2_000,
        pending: 1_000_000,
        plain: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--skiff-bin" => args.skiff_bin = value,
            "--rate" => args.rate = value.parse()?,
            "--secs" => args.secs = value.parse()?,
            "--delay-ms" => args.delay_ms = value.parse()?,
            "--pending" => args.pending = value.parse()?,
            "--plain" => args.plain = value.parse()?,
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    Ok(args)
}

fn timer_entry(deliver_ms: i64, i: u64) -> BatchEntry {
    BatchEntry {
        flag: 0,
        body: Bytes::from_static(BODY),
        properties: format!("UNIQ_KEY\u{1}TB{i:016X}\u{2}TIMER_DELIVER_MS\u{1}{deliver_ms}\u{2}"),
    }
}

async fn send_batch(
    client: &RemotingClient,
    addr: &str,
    topic: &str,
    entries: &[BatchEntry],
) -> anyhow::Result<()> {
    let send = request(
        rc::SEND_BATCH_MESSAGE,
        &[
            ("a", GROUP),
            ("b", topic),
            ("c", AUTO_CREATE_TOPIC_KEY),
            ("d", "1"),
            ("e", "0"),
            ("f", "0"),
            ("g", &epoch_millis().to_string()),
            ("h", "0"),
            ("i", ""),
            ("m", "true"),
        ],
    )
    .with_body(encode_batch(entries));
    let answer = client.invoke(addr, send, Duration::from_secs(10)).await?;
    ensure!(answer.code == code::SUCCESS, "send refused: {answer:?}");
    Ok(())
}

async fn max_offset(client: &RemotingClient, addr: &str, topic: &str) -> anyhow::Result<u64> {
    let ask = request(rc::GET_MAX_OFFSET, &[("topic", topic), ("queueId", "0")]);
    let answer = client.invoke(addr, ask, Duration::from_secs(5)).await?;
    if answer.code != code::SUCCESS {
        return Ok(0);
    }
    Ok(answer
        .ext_fields
        .get("offset")
        .and_then(|o| o.parse().ok())
        .unwrap_or(0))
}

/// store timestamp − TIMER_OUT_MS of every message in the topic.
async fn lateness(client: &RemotingClient, addr: &str, topic: &str) -> anyhow::Result<Vec<i64>> {
    let mut late = Vec::new();
    let mut offset = 0u64;
    loop {
        let pull = request(
            rc::PULL_MESSAGE,
            &[
                ("consumerGroup", "timer-bench-reader"),
                ("topic", topic),
                ("queueId", "0"),
                ("queueOffset", &offset.to_string()),
                ("maxMsgNums", "1000"),
                ("sysFlag", "4"),
                ("commitOffset", "0"),
                ("suspendTimeoutMillis", "0"),
                ("subscription", "*"),
                ("subVersion", "0"),
            ],
        );
        let answer = client.invoke(addr, pull, Duration::from_secs(5)).await?;
        if answer.code != code::SUCCESS {
            return Ok(late);
        }
        let records = decode_records(answer.body.clone())?;
        if records.is_empty() {
            return Ok(late);
        }
        offset += records.len() as u64;
        for record in records {
            let due: i64 = record
                .property("TIMER_OUT_MS")
                .context("delivered copy without TIMER_OUT_MS")?
                .parse()?;
            late.push(record.store_timestamp - due);
        }
    }
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_bytes(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

#[actix_rt::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let dir = tempfile::Builder::new()
        .prefix("skiff-timer-bench")
        .tempdir_in("/var/tmp")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let data = dir.path().join("data");
    let server = Server(
        Command::new(&args.skiff_bin)
            .args(["serve", "--listen", &addr, "--data-dir"])
            .arg(&data)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("spawning skiff serve")?,
    );
    let pid = server.0.id();
    let client = RemotingClient::new(ClientConfig::default());
    let ready = Instant::now() + Duration::from_secs(30);
    while max_offset(&client, &addr, TOPIC).await.is_err() {
        ensure!(Instant::now() < ready, "skiff serve did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // 1. Lateness at `rate` timers per second.
    let total = args.rate * args.secs;
    let per_tick = (args.rate / 100).max(1);
    let start = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut sent = 0u64;
    while sent < total {
        tick.tick().await;
        let now = epoch_millis();
        let entries: Vec<BatchEntry> = (sent..(sent + per_tick).min(total))
            .map(|i| timer_entry(now + args.delay_ms + (i * 7919 % 1000) as i64, i))
            .collect();
        send_batch(&client, &addr, TOPIC, &entries).await?;
        sent += entries.len() as u64;
    }
    let send_secs = start.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(args.secs + 60);
    while max_offset(&client, &addr, TOPIC).await? < total {
        ensure!(Instant::now() < deadline, "not every timer fired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut late = lateness(&client, &addr, TOPIC).await?;
    ensure!(
        late.len() as u64 == total,
        "{} copies for {total} timers",
        late.len()
    );
    late.sort_unstable();
    println!(
        "lateness: {total} timers sent at {:.0}/s (asked {}/s), delay {} ms + 0..1 s; store time - due time: p50 {} ms, p99 {} ms, max {} ms, min {} ms",
        total as f64 / send_secs,
        args.rate,
        args.delay_ms,
        percentile(&late, 50.0),
        percentile(&late, 99.0),
        late.last().copied().unwrap_or(0),
        late.first().copied().unwrap_or(0),
    );

    // 2. RSS with `pending` timers waiting.
    let rss_before = proc_kib(pid, "VmRSS:");
    let far = epoch_millis() + 2 * 24 * 3600 * 1000;
    let start = Instant::now();
    let mut i = 0u64;
    while i < args.pending {
        let n = (args.pending - i).min(1000);
        let entries: Vec<BatchEntry> = (i..i + n)
            .map(|j| {
                let mut entry = timer_entry(far + j as i64, j);
                if args.plain {
                    entry.properties = format!("UNIQ_KEY\u{1}TB{j:016X}\u{2}");
                }
                entry
            })
            .collect();
        send_batch(&client, &addr, PENDING_TOPIC, &entries).await?;
        i += n;
    }
    let send_secs = start.elapsed().as_secs_f64();
    // Settled: RSS unchanged (within 1 MiB) over three one-second samples.
    let mut samples = vec![proc_kib(pid, "VmRSS:")];
    let settle_deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < settle_deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        samples.push(proc_kib(pid, "VmRSS:"));
        let last = &samples[samples.len().saturating_sub(3)..];
        if last.len() == 3
            && last.iter().max().unwrap_or(&0) - last.iter().min().unwrap_or(&0) < 1024
        {
            break;
        }
    }
    let rss = samples.last().copied().unwrap_or(0);
    println!(
        "pending: {} {} sent in {:.1} s; broker VmRSS {:.1} MiB before, {:.1} MiB with them pending (peak VmHWM {:.1} MiB); timer index on disk {:.1} MiB, store {:.1} MiB",
        args.pending,
        if args.plain { "plain messages" } else { "timers" },
        send_secs,
        rss_before as f64 / 1024.0,
        rss as f64 / 1024.0,
        proc_kib(pid, "VmHWM:") as f64 / 1024.0,
        dir_bytes(&data.join("store").join("timerindex")) as f64 / (1 << 20) as f64,
        dir_bytes(&data.join("store")) as f64 / (1 << 20) as f64,
    );
    drop(server);
    Ok(())
}
