//! Interop driver: the published `rocketmq-client-rust` crate against `skiff serve`.
//!
//! ```text
//! interop-rust-client --namesrv ADDR --topic T --group G --count N --mode produce
//! interop-rust-client --namesrv ADDR --topic T --group G --count N --mode consume [--timeout S] [--linger S]
//! interop-rust-client --namesrv ADDR --topic T --group G --count N --mode consume --expect-none S [--timeout S]
//! ```
//!
//! * `produce` sends N messages with bodies `msg-0` .. `msg-{N-1}` through a `DefaultMQProducer`
//!   (synchronous sends; every one must come back SEND_OK).
//! * `consume` runs a `DefaultMQPushConsumer` (clustering, CONSUME_FROM_FIRST_OFFSET, concurrent
//!   listener) until all N distinct bodies arrived or `--timeout` passed; it then keeps running
//!   for `--linger` seconds (so at least one periodic offset persist happens) and shuts the
//!   consumer down cleanly (which persists offsets once more). It prints the distinct and
//!   duplicate counts and, on failure, which bodies are missing.
//! * `consume --expect-none S` runs the same group for S seconds and fails if ANY message of the
//!   `msg-i` set arrives. To prove the consumer was really rebalanced and pulling during that
//!   window (a consumer that never pulls would pass vacuously), it then sends one probe message
//!   `probe-<pid>-<millis>` to the topic with a producer and requires the consumer to receive it
//!   within `--timeout`; old bodies arriving at any time are a failure.
//!
//! Output: one `RESULT ...` line on stdout; client logs go to stderr (RUST_LOG, default `warn`).
//! Exit code 0 = pass, 1 = check failed, 2 = usage or client error.

#![recursion_limit = "512"]

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use rocketmq_client_rust::ClientError;
use rocketmq_client_rust::ClientResult;
use rocketmq_client_rust::ClientRuntime;
use rocketmq_client_rust::ClientRuntimeConfig;
use rocketmq_client_rust::ConsumeConcurrentlyContext;
use rocketmq_client_rust::ConsumeConcurrentlyStatus;
use rocketmq_client_rust::DefaultMQProducer;
use rocketmq_client_rust::DefaultMQPushConsumer;
use rocketmq_client_rust::MQPushConsumer;
use rocketmq_client_rust::MessageListenerConcurrently;
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_model::result::SendStatus;
use rocketmq_protocol::protocol::heartbeat::message_model::MessageModel;
use rocketmq_runtime::RuntimeConfig;
use rocketmq_runtime::RuntimeOwner;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Produce,
    Consume,
}

#[derive(Debug)]
struct Args {
    namesrv: String,
    topic: String,
    group: String,
    count: usize,
    mode: Mode,
    /// consume: give up after this long without all N bodies; expect-none: wait this long for
    /// the probe message.
    timeout: Duration,
    /// consume: keep the consumer running this long after the last body arrived.
    linger: Duration,
    expect_none: Option<Duration>,
    /// per-send timeout in ms
    send_timeout_ms: u64,
}

fn usage() -> &'static str {
    "usage: interop-rust-client --namesrv ADDR --topic T --group G --count N \
     --mode produce|consume [--expect-none SECONDS] [--timeout SECONDS] [--linger SECONDS] \
     [--send-timeout-ms MS]"
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut namesrv = None;
    let mut topic = None;
    let mut group = None;
    let mut count = None;
    let mut mode = None;
    let mut timeout = Duration::from_secs(120);
    let mut linger = Duration::from_secs(6);
    let mut expect_none = None;
    let mut send_timeout_ms = 3000;
    let secs = |v: String, name: &str| -> Result<Duration, String> {
        v.parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0 && *s <= 3600.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| format!("{name}: expected seconds in 0..=3600, got {v:?}"))
    };
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--namesrv" => namesrv = Some(val()?),
            "--topic" => topic = Some(val()?),
            "--group" => group = Some(val()?),
            "--count" => {
                count = Some(
                    val()?
                        .parse::<usize>()
                        .map_err(|e| format!("--count: {e}"))?,
                )
            }
            "--mode" => {
                mode = Some(match val()?.as_str() {
                    "produce" => Mode::Produce,
                    "consume" => Mode::Consume,
                    other => return Err(format!("--mode: unknown mode {other:?}")),
                })
            }
            "--timeout" => timeout = secs(val()?, "--timeout")?,
            "--linger" => linger = secs(val()?, "--linger")?,
            "--expect-none" => expect_none = Some(secs(val()?, "--expect-none")?),
            "--send-timeout-ms" => {
                send_timeout_ms = val()?
                    .parse()
                    .map_err(|e| format!("--send-timeout-ms: {e}"))?
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let args = Args {
        namesrv: namesrv.ok_or("--namesrv is required")?,
        topic: topic.ok_or("--topic is required")?,
        group: group.ok_or("--group is required")?,
        count: count.ok_or("--count is required")?,
        mode: mode.ok_or("--mode is required")?,
        timeout,
        linger,
        expect_none,
        send_timeout_ms,
    };
    if args.expect_none.is_some() && args.mode != Mode::Consume {
        return Err("--expect-none only applies to --mode consume".into());
    }
    Ok(args)
}

/// Owns the client's runtime, as the crate's own examples do.
struct Runtime {
    owner: RuntimeOwner,
    client: Arc<ClientRuntime>,
    telemetry: rocketmq_observability::TelemetryRuntimeGuard,
}

impl Runtime {
    fn new(scope: &str) -> ClientResult<Self> {
        // The default sizing derives blocking-lane capacity from the CPU count; on a 2-CPU host
        // (CI) a burst of pulled messages overflows its queue ("runtime.capacity.exhausted"),
        // and the client then sends those messages back to %RETRY% (redelivered 10 s later).
        // Size the runtime as for 8 CPUs so the main path is what this test measures; any
        // retry delivery still shows up as `reconsumed=` in the RESULT line.
        let parallelism = std::thread::available_parallelism()
            .map_or(8, |n| n.get())
            .max(8);
        let owner = RuntimeOwner::plan(RuntimeConfig::for_parallelism(
            format!("interop-{scope}"),
            parallelism,
        ))
        .map_err(|e| ClientError::internal("plan client runtime", e))?
        .build()
        .map_err(|e| ClientError::internal("build client runtime", e))?;
        let mut telemetry_config = rocketmq_observability::TelemetryBootstrapConfig::default();
        // Client logs go to stderr; keep them quiet unless RUST_LOG says otherwise.
        telemetry_config.logging.filter = "warn".to_string();
        telemetry_config.logging.console.ansi = false;
        let telemetry = rocketmq_observability::install_global(&telemetry_config)
            .map_err(|e| ClientError::internal("initialize telemetry", e))?;
        let client = ClientRuntime::try_new(
            owner.root_context().component("client"),
            ClientRuntimeConfig::default(),
            telemetry.handle(),
        )?;
        Ok(Self {
            owner,
            client,
            telemetry,
        })
    }

    async fn shutdown(self) {
        let report = self.client.shutdown().await;
        if !report.is_healthy() {
            eprintln!("client runtime shutdown report: {}", report.to_json());
        }
        let _ = self.owner.shutdown_tasks().await;
        let _ = self.owner.shutdown_background();
        let _ = self.telemetry.shutdown();
    }
}

fn body_of(i: usize) -> String {
    format!("msg-{i}")
}

async fn produce(rt: &Runtime, args: &Args) -> ClientResult<bool> {
    let mut producer = DefaultMQProducer::builder(rt.client.clone())
        .producer_group(format!("{}_producer", args.group))
        .name_server_addr(args.namesrv.clone())
        .build();
    producer.start().await?;
    let started = Instant::now();
    let mut ok = 0usize;
    let mut failed = Vec::new();
    let mut queues = BTreeMap::<i32, usize>::new();
    for i in 0..args.count {
        let msg = Message::builder()
            .topic(args.topic.clone())
            .tags("interop")
            .body_slice(body_of(i).as_bytes())
            .build_unchecked();
        match producer.send_with_timeout(msg, args.send_timeout_ms).await {
            Ok(Some(r)) if r.send_status == SendStatus::SendOk => {
                ok += 1;
                if let Some(mq) = r.message_queue.as_ref() {
                    *queues.entry(mq.queue_id()).or_default() += 1;
                }
            }
            Ok(Some(r)) => failed.push(format!("{}: status {:?}", body_of(i), r.send_status)),
            Ok(None) => failed.push(format!("{}: no send result", body_of(i))),
            Err(e) => failed.push(format!("{}: {e}", body_of(i))),
        }
    }
    let elapsed = started.elapsed();
    producer.shutdown().await;
    for f in failed.iter().take(20) {
        eprintln!("send failed: {f}");
    }
    println!(
        "RESULT client=rust mode=produce topic={} sent_ok={} failed={} per_queue={:?} elapsed_s={:.2}",
        args.topic,
        ok,
        failed.len(),
        queues,
        elapsed.as_secs_f64()
    );
    Ok(failed.is_empty() && ok == args.count)
}

/// What the listener saw: body → delivery count, in arrival order of first delivery.
#[derive(Default)]
struct Seen {
    counts: BTreeMap<String, usize>,
    deliveries: usize,
    /// deliveries with reconsume_times > 0 (came back through %RETRY%)
    reconsumed: usize,
    first_at: Option<Instant>,
    last_new_at: Option<Instant>,
}

struct Recorder {
    seen: Arc<Mutex<Seen>>,
    notify: Arc<tokio::sync::Notify>,
}

impl MessageListenerConcurrently for Recorder {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        _context: &ConsumeConcurrentlyContext,
    ) -> ClientResult<ConsumeConcurrentlyStatus> {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap();
        for m in msgs {
            let body = m
                .body()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_else(|| "<no body>".to_string());
            seen.deliveries += 1;
            if m.reconsume_times() > 0 {
                seen.reconsumed += 1;
            }
            seen.first_at.get_or_insert(now);
            let c = seen.counts.entry(body).or_default();
            *c += 1;
            if *c == 1 {
                seen.last_new_at = Some(now);
            }
        }
        drop(seen);
        self.notify.notify_one();
        Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
    }
}

fn summarize(seen: &Seen, count: usize) -> (usize, usize, Vec<usize>, Vec<String>) {
    let expected: Vec<String> = (0..count).map(body_of).collect();
    let distinct_expected = expected
        .iter()
        .filter(|b| seen.counts.contains_key(*b))
        .count();
    let duplicates: usize = seen.counts.values().map(|c| c - 1).sum();
    let missing: Vec<usize> = (0..count)
        .filter(|i| !seen.counts.contains_key(&expected[*i]))
        .collect();
    let unexpected: Vec<String> = seen
        .counts
        .keys()
        .filter(|b| !b.starts_with("msg-") || b[4..].parse::<usize>().map_or(true, |i| i >= count))
        .cloned()
        .collect();
    (distinct_expected, duplicates, missing, unexpected)
}

fn ranges(xs: &[usize]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < xs.len() {
        let mut j = i;
        while j + 1 < xs.len() && xs[j + 1] == xs[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            format!("{}", xs[i])
        } else {
            format!("{}-{}", xs[i], xs[j])
        });
        i = j + 1;
        if out.len() >= 30 {
            out.push("...".into());
            break;
        }
    }
    out.join(",")
}

async fn start_consumer(
    rt: &Runtime,
    args: &Args,
    seen: Arc<Mutex<Seen>>,
    notify: Arc<tokio::sync::Notify>,
) -> ClientResult<DefaultMQPushConsumer> {
    let mut consumer = DefaultMQPushConsumer::builder(rt.client.clone())
        .consumer_group(args.group.clone())
        .name_server_addr(args.namesrv.clone())
        .message_model(MessageModel::Clustering)
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        // Wait for in-flight listener calls on shutdown (default 0 ms) before the final persist.
        .await_termination_millis_when_shutdown(5000)
        .build();
    consumer.subscribe(args.topic.as_str(), "*").await?;
    consumer.register_message_listener_concurrently(Recorder { seen, notify });
    consumer.start().await?;
    Ok(consumer)
}

async fn consume(rt: &Runtime, args: &Args) -> ClientResult<bool> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let notify = Arc::new(tokio::sync::Notify::new());
    let started = Instant::now();
    let mut consumer = start_consumer(rt, args, seen.clone(), notify.clone()).await?;
    let deadline = started + args.timeout;
    let complete = loop {
        {
            let s = seen.lock().unwrap();
            if summarize(&s, args.count).0 == args.count {
                break true;
            }
        }
        let now = Instant::now();
        if now >= deadline {
            break false;
        }
        let _ = tokio::time::timeout(deadline - now, notify.notified()).await;
    };
    let all_at = started.elapsed();
    if complete {
        // Let at least one periodic persist (5 s in the client) run, then shut down cleanly,
        // which persists once more.
        tokio::time::sleep(args.linger).await;
    }
    let shutdown_started = Instant::now();
    consumer.shutdown().await;
    let shutdown_took = shutdown_started.elapsed();
    let s = seen.lock().unwrap();
    let (distinct, dups, missing, unexpected) = summarize(&s, args.count);
    if !missing.is_empty() {
        println!(
            "MISSING {} bodies: msg-{{{}}}",
            missing.len(),
            ranges(&missing)
        );
    }
    if !unexpected.is_empty() {
        println!(
            "UNEXPECTED bodies: {:?}",
            unexpected.iter().take(20).collect::<Vec<_>>()
        );
    }
    let first = s
        .first_at
        .map(|t| format!("{:.2}", (t - started).as_secs_f64()))
        .unwrap_or_else(|| "-".into());
    println!(
        "RESULT client=rust mode=consume group={} expected={} distinct={} duplicates={} deliveries={} \
         reconsumed={} unexpected={} first_msg_s={} all_s={:.2} linger_s={:.1} shutdown_s={:.2} status={}",
        args.group,
        args.count,
        distinct,
        dups,
        s.deliveries,
        s.reconsumed,
        unexpected.len(),
        first,
        all_at.as_secs_f64(),
        if complete { args.linger.as_secs_f64() } else { 0.0 },
        shutdown_took.as_secs_f64(),
        if complete && unexpected.is_empty() { "PASS" } else { "FAIL" }
    );
    Ok(complete && unexpected.is_empty())
}

async fn consume_expect_none(rt: &Runtime, args: &Args, quiet: Duration) -> ClientResult<bool> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let notify = Arc::new(tokio::sync::Notify::new());
    let started = Instant::now();
    let mut consumer = start_consumer(rt, args, seen.clone(), notify.clone()).await?;
    // Quiet window: any delivery at all is a failure, so stop waiting at the first one.
    let quiet_deadline = started + quiet;
    loop {
        if seen.lock().unwrap().deliveries > 0 {
            break;
        }
        let now = Instant::now();
        if now >= quiet_deadline {
            break;
        }
        let _ = tokio::time::timeout(quiet_deadline - now, notify.notified()).await;
    }
    let quiet_deliveries = seen.lock().unwrap().deliveries;

    // Liveness probe: a fresh message must reach this consumer, proving it was assigned the
    // queues and pulling while nothing old arrived.
    let probe = format!(
        "probe-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    let mut probe_ok = false;
    let mut probe_latency = None;
    if quiet_deliveries == 0 {
        let mut producer = DefaultMQProducer::builder(rt.client.clone())
            .producer_group(format!("{}_probe_producer", args.group))
            .name_server_addr(args.namesrv.clone())
            .build();
        producer.start().await?;
        let sent_at = Instant::now();
        let msg = Message::builder()
            .topic(args.topic.clone())
            .tags("probe")
            .body_slice(probe.as_bytes())
            .build_unchecked();
        let sent = producer.send_with_timeout(msg, args.send_timeout_ms).await;
        producer.shutdown().await;
        match sent {
            Ok(Some(r)) if r.send_status == SendStatus::SendOk => {
                let deadline = sent_at + args.timeout;
                loop {
                    if seen.lock().unwrap().counts.contains_key(&probe) {
                        probe_ok = true;
                        probe_latency = Some(sent_at.elapsed());
                        break;
                    }
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    let _ = tokio::time::timeout(deadline - now, notify.notified()).await;
                }
            }
            other => eprintln!("probe send failed: {other:?}"),
        }
    }
    consumer.shutdown().await;
    let s = seen.lock().unwrap();
    let old: Vec<&String> = s.counts.keys().filter(|b| **b != probe).collect();
    if !old.is_empty() {
        println!(
            "RECEIVED {} already-committed bodies, e.g. {:?}",
            old.len(),
            old.iter().take(20).collect::<Vec<_>>()
        );
    }
    let pass = old.is_empty() && probe_ok;
    println!(
        "RESULT client=rust mode=expect-none group={} quiet_window_s={:.1} old_received={} \
         probe_received={} probe_latency_s={} status={}",
        args.group,
        quiet.as_secs_f64(),
        old.len(),
        probe_ok,
        probe_latency
            .map(|d| format!("{:.2}", d.as_secs_f64()))
            .unwrap_or_else(|| "-".into()),
        if pass { "PASS" } else { "FAIL" }
    );
    Ok(pass)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}");
            }
            eprintln!("{}", usage());
            return ExitCode::from(2);
        }
    };
    let tokio_rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: tokio runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let outcome = tokio_rt.block_on(async {
        let rt = Runtime::new(match args.mode {
            Mode::Produce => "producer",
            Mode::Consume => "consumer",
        })?;
        let r = match (args.mode, args.expect_none) {
            (Mode::Produce, _) => produce(&rt, &args).await,
            (Mode::Consume, None) => consume(&rt, &args).await,
            (Mode::Consume, Some(quiet)) => consume_expect_none(&rt, &args, quiet).await,
        };
        rt.shutdown().await;
        r
    });
    // Do not wait for stray client tasks.
    tokio_rt.shutdown_timeout(Duration::from_secs(2));
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            println!(
                "RESULT client=rust mode={:?} status=ERROR error={e}",
                args.mode
            );
            ExitCode::from(2)
        }
    }
}
