//! Very many queues under a small open-file limit, against a `skiff serve` child process.
//!
//! The child runs with `RLIMIT_NOFILE` at `--open-files` (soft and hard, so it cannot raise
//! it) and the default configuration. Then:
//! 1. `--topics` × 4 queues each take one message (auto-created topics, one send per queue,
//!    `--senders` at a time), while `--idle-connections` idle connections are held open from
//!    outside; every send must succeed: the descriptors connections may take are capped below
//!    the limit, so they cannot starve the store.
//! 2. Every queue serves its message back (PULL_MESSAGE from offset 0).
//! 3. The idle connections go, the node is stopped (SIGTERM) and started again; the time to the
//!    first answered send is the restart time.
//! 4. Every queue takes a second message after the restart: the store is writable for every
//!    topic.
//! 5. With `--idle-secs N`, idle: every queue leaves memory (`idle_queue_release_ms`, 1 s here)
//!    and RSS falls; read until it settles, for at most N seconds (in `--mode lite` also after
//!    step 2, once the consumers are done).
//!
//! Printed: the most descriptors the child held (sampled from /proc every 10 ms), its peak RSS,
//! the send cost per message into a new queue and into an existing one, the restart time, and
//! the RSS once idle. Exits non-zero when any step fails.
//!
//! `--mode lite` does the same with RocketMQ 5.5's lite topics: every queue is a lite topic of one
//! LITE parent topic (created first, with a group bound to it), sent to one message at a time
//! (SEND_MESSAGE_V2 carrying `__LITE_TOPIC`, as Apache's proxy forwards a lite send). Step 2 is
//! then lite consumers over gRPC (`--consumers`, 4) as RocketMQ 5.5's `LitePushConsumer` works:
//! each subscribes its share of the lite topics `--lite-batch` (1000) at a time, receives and
//! acknowledges every message of the batch, and unsubscribes it (`support/lite_consumer.rs`).
//!
//! ```sh
//! cargo build --release --bin skiff --example many_queues
//! target/release/examples/many_queues --skiff-bin target/release/skiff --topics 25000
//! target/release/examples/many_queues --skiff-bin target/release/skiff --topics 25000 --mode lite
//! ```

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
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
#[path = "support/lite_consumer.rs"]
mod lite_consumer;
use child::{proc_kib, request, Server};
use lite_consumer::{consume_all, LiteConsume};

const GROUP: &str = "many-queues-pg";
const QUEUES: u32 = 4;
/// The parent of every lite topic in `--mode lite`.
const LITE_PARENT: &str = "ScaleLite";
/// The group bound to [`LITE_PARENT`] whose lite consumers receive every lite topic.
const LITE_GROUP: &str = "ScaleLiteReaders";

/// What each queue of the run is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A queue of an auto-created topic.
    Queues,
    /// A lite topic of one LITE parent.
    Lite,
}

struct Args {
    skiff_bin: String,
    topics: u32,
    open_files: u64,
    senders: usize,
    idle_connections: usize,
    mode: Mode,
    /// How long step 5 may wait for the RSS to settle; 0 skips it.
    idle_secs: u64,
    /// `--mode lite`: lite consumers side by side, and lite topics each subscribes at once.
    consumers: usize,
    lite_batch: usize,
}

const USAGE: &str = "\
usage: many_queues [--skiff-bin PATH] [--topics N] [--mode queues|lite] [--idle-secs S]
                   [--open-files N] [--senders N] [--idle-connections N]
                   [--consumers N] [--lite-batch N]
  --skiff-bin PATH        the skiff binary to run as the child (target/release/skiff)
  --topics N              topics of 4 queues each, or N x 4 lite topics with --mode lite (25000)
  --mode queues|lite      queues of auto-created topics, or lite topics of one parent (queues)
  --idle-secs S           wait up to S seconds for the RSS to settle once idle; 0 skips (0)
  --open-files N          the child's open-file limit, soft and hard (256)
  --senders N             sends in flight (16)
  --idle-connections N    idle connections held open during the first messages (400)
  --consumers N           lite consumers with --mode lite (4)
  --lite-batch N          lite topics each consumer subscribes at a time (1000)";

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        skiff_bin: "target/release/skiff".to_string(),
        topics: 25_000,
        open_files: 256,
        senders: 16,
        idle_connections: 400,
        mode: Mode::Queues,
        idle_secs: 0,
        consumers: 4,
        lite_batch: 1000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value = it
            .next()
            .with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
        match flag.as_str() {
            "--skiff-bin" => args.skiff_bin = value,
            "--topics" => args.topics = value.parse()?,
            "--open-files" => args.open_files = value.parse()?,
            "--senders" => args.senders = value.parse()?,
            "--idle-connections" => args.idle_connections = value.parse()?,
            "--idle-secs" => args.idle_secs = value.parse()?,
            "--consumers" => args.consumers = value.parse()?,
            "--lite-batch" => args.lite_batch = value.parse()?,
            "--mode" => {
                args.mode = match value.as_str() {
                    "queues" => Mode::Queues,
                    "lite" => Mode::Lite,
                    other => anyhow::bail!("--mode is queues or lite, not {other}"),
                }
            }
            other => anyhow::bail!("unknown flag {other}\n{USAGE}"),
        }
    }
    Ok(args)
}

impl Server {
    /// `grpc`: where the child serves gRPC (`--mode lite`'s consumers), or off.
    fn start(
        args: &Args,
        addr: &str,
        grpc: Option<&str>,
        data: &std::path::Path,
    ) -> anyhow::Result<Server> {
        let limit = args.open_files;
        let mut command = Command::new(&args.skiff_bin);
        command
            .args(["serve", "--listen", addr, "--metrics-listen", "off"])
            .args(["--grpc-listen", grpc.unwrap_or("off"), "--data-dir"])
            .arg(data)
            .env("RUST_LOG", "warn")
            // Idle queues leave memory within two seconds, for the idle measurement (step 5).
            .env("SKIFF_IDLE_QUEUE_RELEASE_MS", IDLE_RELEASE_MS.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // One warning per connection refused at the cap: hundreds of lines.
            .stderr(Stdio::null());
        // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            command.pre_exec(move || {
                let rl = libc::rlimit {
                    rlim_cur: limit as libc::rlim_t,
                    rlim_max: limit as libc::rlim_t,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &rl) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(Server(command.spawn().context("spawning skiff serve")?))
    }

    fn stop(mut self) -> anyhow::Result<()> {
        // SAFETY: kill sends a signal to our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let status = self.0.wait()?;
        ensure!(status.success(), "skiff serve exited with {status}");
        Ok(())
    }
}

fn topic(i: u32) -> String {
    format!("ScaleT{i}")
}

fn body(topic: &str, queue_id: u32, round: u32) -> String {
    format!("{topic}/{queue_id}/{round}")
}

/// The lite topic standing for `topic`/`queue_id` in `--mode lite`.
fn lite_topic(topic: &str, queue_id: u32) -> String {
    format!("{topic}-{queue_id}")
}

/// Creates the LITE parent of `--mode lite` and the group bound to it.
async fn create_lite_parent(client: &RemotingClient, addr: &str) -> anyhow::Result<()> {
    let create = request(
        rc::UPDATE_AND_CREATE_TOPIC,
        &[
            ("topic", LITE_PARENT),
            ("defaultTopic", AUTO_CREATE_TOPIC_KEY),
            ("readQueueNums", "4"),
            ("writeQueueNums", "4"),
            ("perm", "6"),
            ("topicFilterType", "SINGLE_TAG"),
            ("topicSysFlag", "0"),
            ("order", "false"),
            ("attributes", "+message.type=LITE"),
        ],
    );
    let answer = client.invoke(addr, create, Duration::from_secs(30)).await?;
    ensure!(
        answer.code == code::SUCCESS,
        "creating the lite parent refused: {} {:?}",
        answer.code,
        answer.remark
    );
    let group = request(rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, &[]).with_body(
        format!(
            r#"{{"groupName":"{LITE_GROUP}","attributes":{{"+lite.bind.topic":"{LITE_PARENT}"}}}}"#
        )
        .into_bytes(),
    );
    let answer = client.invoke(addr, group, Duration::from_secs(30)).await?;
    ensure!(
        answer.code == code::SUCCESS,
        "creating the lite group refused: {} {:?}",
        answer.code,
        answer.remark
    );
    Ok(())
}

/// Sends one message to `topic`/`queue_id` (in `--mode lite`, to its lite topic); answers its
/// queue offset.
async fn send(
    client: &RemotingClient,
    addr: &str,
    mode: Mode,
    topic: &str,
    queue_id: u32,
    round: u32,
) -> anyhow::Result<u64> {
    if mode == Mode::Lite {
        let born = epoch_millis().to_string();
        let properties = format!(
            "__LITE_TOPIC\u{1}{}\u{2}WAIT\u{1}true\u{2}",
            lite_topic(topic, queue_id)
        );
        let send = request(
            rc::SEND_MESSAGE_V2,
            &[
                ("a", GROUP),
                ("b", LITE_PARENT),
                ("c", AUTO_CREATE_TOPIC_KEY),
                ("d", "4"),
                ("e", "0"),
                ("f", "0"),
                ("g", &born),
                ("h", "0"),
                ("i", &properties),
                ("m", "false"),
            ],
        )
        .with_body(body(topic, queue_id, round).into_bytes());
        return send_answer(client, addr, send, topic, queue_id).await;
    }
    let entry = BatchEntry {
        flag: 0,
        body: Bytes::from(body(topic, queue_id, round)),
        properties: String::new(),
    };
    let queue = queue_id.to_string();
    let born = epoch_millis().to_string();
    let send = request(
        rc::SEND_BATCH_MESSAGE,
        &[
            ("a", GROUP),
            ("b", topic),
            ("c", AUTO_CREATE_TOPIC_KEY),
            ("d", "4"),
            ("e", &queue),
            ("f", "0"),
            ("g", &born),
            ("h", "0"),
            ("i", ""),
            ("m", "true"),
        ],
    )
    .with_body(encode_batch(&[entry]));
    send_answer(client, addr, send, topic, queue_id).await
}

/// The queue offset a send's answer reports.
async fn send_answer(
    client: &RemotingClient,
    addr: &str,
    send: skiff::remoting::RemotingCommand,
    topic: &str,
    queue_id: u32,
) -> anyhow::Result<u64> {
    let answer = client.invoke(addr, send, Duration::from_secs(30)).await?;
    ensure!(
        answer.code == code::SUCCESS,
        "send to {topic}/{queue_id} refused: {} {:?}",
        answer.code,
        answer.remark
    );
    answer
        .ext_fields
        .get("queueOffset")
        .and_then(|o| o.parse().ok())
        .context("send answer without queueOffset")
}

/// The bodies `topic`/`queue_id` serves from offset 0.
async fn pull(
    client: &RemotingClient,
    addr: &str,
    topic: &str,
    queue_id: u32,
) -> anyhow::Result<Vec<String>> {
    let queue = queue_id.to_string();
    let ask = request(
        rc::PULL_MESSAGE,
        &[
            ("consumerGroup", "many-queues-reader"),
            ("topic", topic),
            ("queueId", &queue),
            ("queueOffset", "0"),
            ("maxMsgNums", "32"),
            ("sysFlag", "4"),
            ("commitOffset", "0"),
            ("suspendTimeoutMillis", "0"),
            ("subscription", "*"),
            ("subVersion", "0"),
        ],
    );
    let answer = client.invoke(addr, ask, Duration::from_secs(30)).await?;
    ensure!(
        answer.code == code::SUCCESS,
        "pull of {topic}/{queue_id} answered {} {:?}",
        answer.code,
        answer.remark
    );
    Ok(decode_records(answer.body.clone())?
        .into_iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect())
}

/// Runs `work(topic, queue)` over every queue, `senders` at a time.
async fn every_queue<F, Fut>(topics: u32, senders: usize, work: F) -> anyhow::Result<()>
where
    F: Fn(String, u32) -> Fut + Clone + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + 'static,
{
    let next = Arc::new(AtomicUsize::new(0));
    let total = topics as usize * QUEUES as usize;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..senders {
        let next = next.clone();
        let work = work.clone();
        workers.spawn_local(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return Ok::<(), anyhow::Error>(());
                }
                work(
                    topic((i / QUEUES as usize) as u32),
                    (i % QUEUES as usize) as u32,
                )
                .await?;
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done??;
    }
    Ok(())
}

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Samples the child's open descriptors every 10 ms until dropped; keeps the most seen.
struct FdSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FdSampler {
    fn start(pid: u32) -> FdSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (stop, peak) = (stop.clone(), peak.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(open_descriptors(pid), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        FdSampler {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    fn peak(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.load(Ordering::Relaxed)
    }
}

async fn wait_ready(client: &RemotingClient, addr: &str) -> anyhow::Result<()> {
    let ready = Instant::now() + Duration::from_secs(60);
    loop {
        let ask = request(rc::GET_MAX_OFFSET, &[("topic", "Ready"), ("queueId", "0")]);
        if client
            .invoke(addr, ask, Duration::from_secs(5))
            .await
            .is_ok()
        {
            return Ok(());
        }
        ensure!(Instant::now() < ready, "skiff serve did not start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[actix_rt::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let dir = tempfile::Builder::new()
        .prefix("skiff-many-queues")
        .tempdir_in("/var/tmp")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let grpc_port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let grpc_addr = format!("127.0.0.1:{grpc_port}");
    let grpc = (args.mode == Mode::Lite).then_some(grpc_addr.as_str());
    let data = dir.path().join("data");
    let queues = u64::from(args.topics) * u64::from(QUEUES);

    let server = Server::start(&args, &addr, grpc, &data)?;
    let pid = server.0.id();
    let sampler = FdSampler::start(pid);
    let client = Arc::new(RemotingClient::new(ClientConfig::default()));
    wait_ready(&client, &addr).await?;
    let mode = args.mode;
    if mode == Mode::Lite {
        create_lite_parent(&client, &addr).await?;
    }

    // 1. One message per queue, with idle connections held from outside.
    let idle: Vec<std::net::TcpStream> = (0..args.idle_connections)
        .filter_map(|_| std::net::TcpStream::connect(&addr).ok())
        .collect();
    let cpu_before = proc_cpu_ms(pid);
    let started = Instant::now();
    {
        let (client, addr) = (client.clone(), addr.clone());
        every_queue(args.topics, args.senders, move |t, q| {
            let (client, addr) = (client.clone(), addr.clone());
            async move {
                let offset = send(&client, &addr, mode, &t, q, 0).await?;
                ensure!(offset == 0, "{t}/{q}: first message at offset {offset}");
                Ok(())
            }
        })
        .await?;
    }
    let send_secs = started.elapsed().as_secs_f64();
    let send_cpu_ms = proc_cpu_ms(pid) - cpu_before;

    // 2. Every queue serves its message: in `--mode lite` to lite consumers, each lite topic
    // subscribed in a batch, received and acknowledged; else to a pull from offset 0.
    let mut lite_consumed = None;
    if mode == Mode::Lite {
        let expected = (0..args.topics)
            .flat_map(|i| (0..QUEUES).map(move |q| (topic(i), q)))
            .map(|(t, q)| (lite_topic(&t, q), body(&t, q, 0)))
            .collect();
        let cpu_before = proc_cpu_ms(pid);
        let started = Instant::now();
        consume_all(LiteConsume {
            grpc: grpc_addr.parse()?,
            parent: LITE_PARENT.to_owned(),
            group: LITE_GROUP.to_owned(),
            expected,
            consumers: args.consumers,
            batch: args.lite_batch,
        })
        .await?;
        lite_consumed = Some((
            started.elapsed().as_secs_f64(),
            proc_cpu_ms(pid) - cpu_before,
        ));
    } else {
        let (client, addr) = (client.clone(), addr.clone());
        every_queue(args.topics, args.senders, move |t, q| {
            let (client, addr) = (client.clone(), addr.clone());
            async move {
                let bodies = pull(&client, &addr, &t, q).await?;
                ensure!(bodies == [body(&t, q, 0)], "{t}/{q} served {bodies:?}");
                Ok(())
            }
        })
        .await?;
    }
    let rss_kib = proc_kib(pid, "VmHWM:");
    let peak_fds = sampler.peak();
    drop(idle);
    // In `--mode lite` with `--idle-secs`, the RSS once idle after the consumers too: what a
    // million received and acknowledged lite topics leave behind before any restart.
    let idle_after_consumers = match (mode, args.idle_secs) {
        (Mode::Lite, wait) if wait > 0 => Some(settled_rss_kib(pid, rss_kib, wait).await),
        _ => None,
    };

    // 3. Restart: the time from the spawn to the first answered send.
    client.close_connection(&addr);
    server.stop()?;
    let restarted = Instant::now();
    let server = Server::start(&args, &addr, grpc, &data)?;
    let sampler = FdSampler::start(server.0.id());
    wait_ready(&client, &addr).await?;
    let offset = send(&client, &addr, mode, &topic(0), 0, 1).await?;
    let restart_ms = restarted.elapsed().as_secs_f64() * 1e3;
    ensure!(
        offset == 1,
        "after the restart the send got offset {offset}"
    );
    let rss_after_restart_kib = proc_kib(server.0.id(), "VmRSS:");

    // 4. Every queue takes a second message.
    let cpu_before = proc_cpu_ms(server.0.id());
    let started = Instant::now();
    {
        let (client, addr) = (client.clone(), addr.clone());
        every_queue(args.topics, args.senders, move |t, q| {
            let (client, addr) = (client.clone(), addr.clone());
            async move {
                if t == topic(0) && q == 0 {
                    return Ok(());
                }
                let offset = send(&client, &addr, mode, &t, q, 1).await?;
                ensure!(offset == 1, "{t}/{q}: second message at offset {offset}");
                Ok(())
            }
        })
        .await?;
    }
    let second_secs = started.elapsed().as_secs_f64();
    let second_cpu_ms = proc_cpu_ms(server.0.id()) - cpu_before;
    let peak_fds_after_restart = sampler.peak();
    let peak_after_restart_kib = proc_kib(server.0.id(), "VmHWM:");

    // 5. Idle: the queues leave memory; RSS is read once it stops falling.
    let idle = match args.idle_secs {
        0 => None,
        wait => Some(settled_rss_kib(server.0.id(), peak_after_restart_kib, wait).await),
    };
    server.stop()?;

    let unit = match mode {
        Mode::Queues => format!("{queues} queues ({} topics x {QUEUES})", args.topics),
        Mode::Lite => format!("{queues} lite topics of {LITE_PARENT}"),
    };
    println!(
        "many_queues: {unit}, open-file limit {}, {} idle connections held",
        args.open_files, args.idle_connections
    );
    println!("  most descriptors held: {peak_fds} (after the restart: {peak_fds_after_restart})");
    println!(
        "  peak RSS {:.1} MiB; RSS after the restart's first answered send {:.1} MiB",
        rss_kib as f64 / 1024.0,
        rss_after_restart_kib as f64 / 1024.0
    );
    println!(
        "  first messages: {:.0} msgs/s, broker CPU {:.1} us/msg",
        queues as f64 / send_secs,
        send_cpu_ms * 1e3 / queues as f64
    );
    println!(
        "  second messages (each queue opened from disk after the restart): {:.0} msgs/s, broker CPU {:.1} us/msg",
        queues as f64 / second_secs,
        second_cpu_ms * 1e3 / queues as f64
    );
    if let Some((secs, cpu_ms)) = lite_consumed {
        println!(
            "  received by {} lite consumers, {} lite topics subscribed at a time each: {:.0} msgs/s, broker CPU {:.1} us/msg (subscribe, receive, ack, unsubscribe)",
            args.consumers,
            args.lite_batch,
            queues as f64 / secs,
            cpu_ms * 1e3 / queues as f64
        );
    }
    println!("  restart to the first answered send: {restart_ms:.0} ms");
    println!(
        "  after the restart: peak RSS {:.1} MiB",
        peak_after_restart_kib as f64 / 1024.0
    );
    if let Some((idle_kib, idle_secs)) = idle_after_consumers {
        println!(
            "  RSS once idle after the consumers {:.1} MiB (read {idle_secs} s after the last acknowledgement)",
            idle_kib as f64 / 1024.0
        );
    }
    if let Some((idle_kib, idle_secs)) = idle {
        println!(
            "  RSS once idle {:.1} MiB (read {idle_secs} s after the last message)",
            idle_kib as f64 / 1024.0
        );
    }
    Ok(())
}

/// The release interval the child runs with (`idle_queue_release_ms`).
const IDLE_RELEASE_MS: u64 = 1000;

/// The child's RSS once idle, and the seconds it took: a queue leaves memory once a thorough
/// checkpoint has fsynced it (after a burst of new queues that checkpoint fsyncs each one's
/// file, minutes for a million) and it went unused for two release intervals. Read every 5 s
/// until it fell below half of `peak_kib` and held within 1% for a reading, or for at most
/// `wait_secs` (`--idle-secs`).
async fn settled_rss_kib(pid: u32, peak_kib: u64, wait_secs: u64) -> (u64, u64) {
    let started = Instant::now();
    let mut last = proc_kib(pid, "VmRSS:");
    while started.elapsed().as_secs() < wait_secs {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = proc_kib(pid, "VmRSS:");
        if now < peak_kib / 2 && now + now / 100 >= last {
            return (now, started.elapsed().as_secs());
        }
        last = now;
    }
    (last, started.elapsed().as_secs())
}

/// The child's user + system CPU time in milliseconds (from /proc/PID/stat, clock ticks).
fn proc_cpu_ms(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 11 and 12 after the name.
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) * 1e3 / hz.max(1.0)
}
