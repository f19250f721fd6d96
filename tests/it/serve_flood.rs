//! A flood of connections does not lock a well-behaved client out of `skiff serve` with its
//! default configuration (1,000 connections): 3,000 idle connections, 1,000 trickling a byte at
//! a time (slowloris) and 200 stopped half-way through a declared 16 MiB frame, while a client
//! connects anew every 100 ms and sends a message. Each of its sends is answered within 1 s,
//! the node makes room by closing connections that never completed a request (counted in its
//! metrics), and its peak RSS stays under 128 MiB.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use bytes::Bytes;
use common::{request, spawn_serve, wait_serving};
use skiff::remoting::codes::{request as rc, response as code, AUTO_CREATE_TOPIC_KEY};
use skiff::remoting::{ClientConfig, RemotingClient};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const IDLE: usize = 3_000;
const SLOWLORIS: usize = 1_000;
const HALF_FRAMES: usize = 200;
const DECLARED_FRAME: usize = 16 * 1024 * 1024;
const ANSWER_WITHIN: Duration = Duration::from_secs(1);
const RSS_LIMIT_KIB: u64 = 128 * 1024;

fn peak_rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM in /proc/<pid>/status")
}

/// A fresh client (its own new connection) sends one message; answers how long that took.
async fn probe(addr: &str, n: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let client = RemotingClient::new(ClientConfig::default());
    let send = request(
        rc::SEND_MESSAGE,
        &[
            ("producerGroup", "flood-probe"),
            ("topic", "FloodProbe"),
            ("defaultTopic", AUTO_CREATE_TOPIC_KEY),
            ("defaultTopicQueueNums", "4"),
            ("queueId", "0"),
            ("sysFlag", "0"),
            ("bornTimestamp", "0"),
            ("flag", "0"),
            ("properties", ""),
        ],
    )
    .with_body(Bytes::from(format!("probe {n}")));
    let answer = client
        .invoke(addr, send, Duration::from_secs(10))
        .await
        .with_context(|| format!("probe {n}"))?;
    ensure!(
        answer.code == code::SUCCESS,
        "probe {n} answered {} {:?}",
        answer.code,
        answer.remark
    );
    client.shutdown();
    Ok(started.elapsed())
}

/// Opens the flood's connections in rounds, mixed; keeps every one open until the test ends.
async fn flood(addr: String, held: Arc<tokio::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>) {
    let half_frame = Bytes::from(vec![0u8; DECLARED_FRAME / 2]);
    let rounds = 100;
    for round in 0..rounds {
        let mut tasks = Vec::new();
        for _ in 0..IDLE / rounds {
            if let Ok(stream) = TcpStream::connect(&addr).await {
                tasks.push(tokio::spawn(async move {
                    let _stream = stream;
                    std::future::pending::<()>().await;
                }));
            }
        }
        for _ in 0..SLOWLORIS / rounds {
            if let Ok(mut stream) = TcpStream::connect(&addr).await {
                tasks.push(tokio::spawn(async move {
                    // A frame that never ends: its length, then a byte every half second.
                    let _ = stream.write_all(&1024u32.to_be_bytes()).await;
                    loop {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        if stream.write_all(b"x").await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                }));
            }
        }
        for _ in 0..HALF_FRAMES / rounds {
            if let Ok(mut stream) = TcpStream::connect(&addr).await {
                let half_frame = half_frame.clone();
                tasks.push(tokio::spawn(async move {
                    let declared = (DECLARED_FRAME - 4) as u32;
                    let _ = stream.write_all(&declared.to_be_bytes()).await;
                    let _ = stream.write_all(&half_frame).await;
                    std::future::pending::<()>().await;
                }));
            }
        }
        held.lock().await.extend(tasks);
        if round % 10 == 9 {
            tokio::task::yield_now().await;
        }
    }
}

#[test]
fn a_connection_flood_does_not_lock_a_client_out() -> anyhow::Result<()> {
    // The flood needs more descriptors than a common soft limit allows.
    let limit = skiff::descriptors::raise_open_file_limit(0)?.soft;
    ensure!(
        limit > (IDLE + SLOWLORIS + HALF_FRAMES + 512) as u64,
        "the flood needs {} descriptors; the hard limit is {limit}",
        IDLE + SLOWLORIS + HALF_FRAMES + 512
    );
    let dir = tempfile::tempdir()?;
    let addr = format!("127.0.0.1:{}", common::free_port()?);
    let metrics_addr = format!("127.0.0.1:{}", common::free_port()?);
    let serve = spawn_serve(
        dir.path(),
        &addr,
        &[("SKIFF_METRICS_LISTEN", metrics_addr.clone())],
    )?;
    let pid = serve.0.id();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = runtime.block_on(async {
        let client = RemotingClient::new(ClientConfig::default());
        wait_serving(&client, &addr, "FloodProbe").await?;
        client.shutdown();

        let held = Arc::new(tokio::sync::Mutex::new(Vec::new()));
        let flooding = tokio::spawn(flood(addr.clone(), held.clone()));
        let mut latencies = Vec::new();
        let mut flood_done_at = None;
        let mut n = 0;
        loop {
            latencies.push(probe(&addr, n).await?);
            n += 1;
            if flood_done_at.is_none() && flooding.is_finished() {
                flood_done_at = Some(Instant::now());
            }
            // Probing goes on for 3 s after the last flood connection opened.
            if flood_done_at.is_some_and(|at| at.elapsed() > Duration::from_secs(3)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        flooding.await?;
        let attackers = held.lock().await.len();
        ensure!(
            attackers == IDLE + SLOWLORIS + HALF_FRAMES,
            "only {attackers} flood connections were made"
        );
        let metrics = common::http_get(&metrics_addr, "/metrics").await?;
        for task in held.lock().await.drain(..) {
            task.abort();
        }
        Ok::<_, anyhow::Error>((latencies, metrics))
    });
    let peak = peak_rss_kib(pid)?;
    drop(serve);
    if result.is_err() {
        let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        eprintln!("skiff serve's log, last lines first:\n{}", tail.join("\n"));
    }
    let (mut latencies, metrics) = result?;
    let count = latencies.len();
    latencies.sort();
    let worst = latencies.last().copied().unwrap_or_default();
    let median = latencies[count / 2];
    eprintln!(
        "flood: {count} probes, median {median:?}, worst {worst:?}, peak RSS {} MiB",
        peak / 1024
    );
    ensure!(count >= 20, "only {count} probes ran");
    ensure!(
        worst <= ANSWER_WITHIN,
        "a probe waited {worst:?} (median {median:?})"
    );
    ensure!(peak < RSS_LIMIT_KIB, "peak RSS {} KiB", peak);
    let evicted = metric(&metrics, "skiff_connections_evicted_total")?;
    ensure!(
        evicted >= (IDLE + SLOWLORIS + HALF_FRAMES - 1_000) as u64,
        "only {evicted} connections were closed to make room"
    );
    Ok(())
}

fn metric(text: &str, name: &str) -> anyhow::Result<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .with_context(|| format!("{name} not in the metrics"))
}
