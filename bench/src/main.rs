//! skiff-bench: one fixed workload against skiff, Redis Streams, NATS JetStream and Apache
//! RocketMQ in one run; prints one table of medians and the ratios skiff / peer. See
//! bench/README.md.

mod broker;
mod load;
mod nats_driver;
mod redis_driver;
mod report;
mod resp;
mod skiff_driver;
mod startup;
mod workload;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;

use broker::{Binaries, Kind};
use nats_driver::NatsDriver;
use redis_driver::RedisDriver;
use report::{CpuPerMsg, RunResult, Sample};
use skiff_driver::{SendMode, SkiffDriver};
use workload::{progress, say, LatencySummary, Workload};

#[derive(Parser, Debug)]
#[command(
    name = "skiff-bench",
    about = "Runs one fixed queue workload against skiff, Redis Streams, NATS JetStream and Apache RocketMQ and prints medians and skiff/peer ratios"
)]
struct Args {
    /// Messages in the throughput run.
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Runs per broker; the table shows medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Brokers, comma separated: skiff-async, skiff-sync, redis-everysec, redis-always,
    /// jetstream, apache; also skiff-noindex (skiff-async with its key index off) and
    /// skiff-sync-unprepared (skiff-sync without its commit log prepared ahead).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "skiff-async,redis-everysec,skiff-sync,redis-always,jetstream,apache"
    )]
    brokers: Vec<String>,
    /// Idle RSS: seconds after the first acknowledged send at which the broker's RSS is read
    /// (before the workload).
    #[arg(long, default_value_t = 2)]
    idle_secs: u64,
    /// Latency run: messages per second.
    #[arg(long, default_value_t = 20_000)]
    latency_rate: u64,
    /// Latency run: seconds of producing.
    #[arg(long, default_value_t = 10)]
    latency_secs: u64,
    /// Latency run: leading seconds dropped.
    #[arg(long, default_value_t = 1)]
    latency_warmup_secs: u64,
    /// Every message carries a key (`KEYS` property, remoting brokers): with `skiff-noindex` in
    /// the same run, the cost of skiff's key index.
    #[arg(long)]
    keys: bool,
    /// Payload bytes.
    #[arg(long, default_value_t = 100)]
    payload: usize,
    /// Messages per produce batch (experiments only: the workload is 100).
    #[arg(long, default_value_t = 100, hide = true)]
    batch: usize,
    /// The skiff binary (built with `cargo build --release --bin skiff`); default: beside
    /// skiff-bench.
    #[arg(long)]
    skiff_bin: Option<PathBuf>,
    /// What skiff build this is, for the report (run.sh passes `git describe`).
    #[arg(long)]
    skiff_rev: Option<String>,
    /// Extra arguments for `skiff serve`.
    #[arg(long, allow_hyphen_values = true, value_delimiter = ' ')]
    skiff_args: Vec<String>,
    /// How skiff is sent to: `batch` (SEND_BATCH_MESSAGE per queue) or `single` (SEND_MESSAGE_V2
    /// per message).
    #[arg(long, default_value = "batch")]
    skiff_send: String,
    #[arg(long, default_value = "redis-server")]
    redis_server: PathBuf,
    #[arg(long, default_value = "nats-server")]
    nats_server: PathBuf,
    /// Apache RocketMQ: tests/conformance/apache/start.sh (stop.sh beside it); run.sh passes
    /// it. The broker JVMs get start.sh's `--profile bench`.
    #[arg(long)]
    apache_start: Option<PathBuf>,
    /// More about the Apache build, for the report (run.sh passes the JVM's version; start.sh
    /// says which RocketMQ ran).
    #[arg(long)]
    apache_desc: Option<String>,
    /// Where the brokers' data dirs go (on a real disk, not tmpfs); removed afterwards.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep the data dirs and logs.
    #[arg(long)]
    keep: bool,
    /// Also write the report (markdown) to this file.
    #[arg(long)]
    out: Option<PathBuf>,
}

enum Driver {
    Skiff(SkiffDriver),
    Redis(RedisDriver),
    Nats(NatsDriver),
}

impl Driver {
    async fn setup(kind: Kind, addr: &str, w: &Workload, mode: SendMode) -> Result<Driver> {
        Ok(match kind {
            Kind::SkiffAsync
            | Kind::SkiffSync
            | Kind::SkiffNoIndex
            | Kind::SkiffSyncUnprepared
            | Kind::Apache => Driver::Skiff(SkiffDriver::setup(addr, w, mode).await?),
            Kind::RedisEverysec | Kind::RedisAlways => Driver::Redis(RedisDriver::setup(addr, w).await?),
            Kind::JetStream => Driver::Nats(NatsDriver::setup(&format!("nats://{addr}"), w).await?),
        })
    }

    async fn produce(&self, w: &Workload) -> Result<Duration> {
        match self {
            Driver::Skiff(d) => d.produce(w).await,
            Driver::Redis(d) => d.produce(w).await,
            Driver::Nats(d) => d.produce(w).await,
        }
    }

    async fn consume(&self, w: &Workload) -> Result<Duration> {
        match self {
            Driver::Skiff(d) => d.consume(w).await,
            Driver::Redis(d) => d.consume(w).await,
            Driver::Nats(d) => d.consume(w).await,
        }
    }

    async fn latency(&self, w: &Workload) -> Result<LatencySummary> {
        match self {
            Driver::Skiff(d) => d.latency(w).await,
            Driver::Redis(d) => d.latency(w).await,
            Driver::Nats(d) => d.latency(w).await,
        }
    }
}

async fn one_run(
    kind: Kind,
    run: usize,
    runs: usize,
    w: &Workload,
    bins: &Binaries,
    run_dir: &std::path::Path,
    args: &Args,
    mode: SendMode,
) -> Result<Sample> {
    let tag = format!("run {run}/{runs} {}", kind.name());
    progress().phase(format!("{tag} start → first acknowledged send"), 0);
    let mut broker = broker::start(kind, bins, run_dir, &args.skiff_args)?;
    let me = std::process::id();
    let cpu = |b: &broker::Running| -> Result<(f64, f64)> { Ok((b.cpu_secs()?, broker::cpu_secs(me)?)) };
    let per_msg = |a: (f64, f64), b: (f64, f64), n: u64| ((b.0 - a.0) * 1e6 / n as f64, (b.1 - a.1) * 1e6 / n as f64);
    let started = startup::first_ack(&mut broker, Duration::from_secs(180))
        .await
        .with_context(|| format!("{tag}: start"));
    let result = async {
        let started = started?;
        say(format!(
            "{tag}: first acknowledged send {:.0} ms after the start ({} attempts)",
            startup::ms(started.elapsed),
            started.attempts
        ));
        tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
        let idle_rss = broker.rss()?;
        let addr = started.addr;
        let driver = Driver::setup(kind, &addr, w, mode).await?;
        progress().phase(format!("{tag} produce"), w.messages);
        let c0 = cpu(&broker)?;
        let produce = driver.produce(w).await.context("produce")?;
        let c1 = cpu(&broker)?;
        let backlog_rss = broker.peak_rss()?;
        progress().phase(format!("{tag} consume+commit"), w.messages);
        let c2 = cpu(&broker)?;
        let consume = driver.consume(w).await.context("consume")?;
        let c3 = cpu(&broker)?;
        progress().phase(
            format!("{tag} latency @ {}/s", w.latency_rate),
            w.latency_messages(),
        );
        let latency = driver.latency(w).await.context("latency")?;
        let peak_rss = broker.peak_rss()?;
        drop(driver);
        let cpu = CpuPerMsg {
            produce: per_msg(c0, c1, w.messages),
            consume: per_msg(c2, c3, w.messages),
        };
        let first_ack = started.elapsed;
        anyhow::Ok((first_ack, idle_rss, produce, consume, latency, backlog_rss, peak_rss, cpu))
    }
    .await;
    let data_dir = broker.data_dir.clone();
    let remove_dir = broker.remove_dir.clone();
    let log = broker.log.clone();
    progress().phase(format!("{tag} stop"), 0);
    let stopped = broker.stop(Duration::from_secs(30));
    let (first_ack, idle_rss, produce, consume, latency, backlog_rss, peak_rss, cpu) =
        result.with_context(|| format!("{tag} (broker log: {})", log.display()))?;
    stopped?;
    let disk = broker::du(&data_dir)?;
    if !args.keep {
        let _ = std::fs::remove_dir_all(&remove_dir);
    }
    let s = Sample {
        first_ack_ms: startup::ms(first_ack),
        idle_rss,
        produce_mps: w.messages as f64 / produce.as_secs_f64(),
        consume_mps: w.messages as f64 / consume.as_secs_f64(),
        p50_us: latency.p50_us,
        p99_us: latency.p99_us,
        p999_us: latency.p999_us,
        latency_samples: latency.samples,
        latency_rate: w.latency_messages() as f64 / latency.produce_secs.max(1e-9),
        backlog_rss,
        peak_rss,
        disk_bytes: disk,
        cpu,
    };
    say(format!(
        "{tag}: start → first ack {:.0} ms, idle RSS {:.1} MiB, produce {:.0}/s, consume+commit {:.0}/s, p50/p99/p99.9 {:.0}/{:.0}/{:.0} us, peak RSS {:.1} MiB (after produce {:.1}), disk {:.1} MiB; CPU µs/msg broker+client produce {:.2}+{:.2}, consume {:.2}+{:.2}",
        s.first_ack_ms,
        s.idle_rss as f64 / 1048576.0,
        s.produce_mps,
        s.consume_mps,
        s.p50_us,
        s.p99_us,
        s.p999_us,
        s.peak_rss as f64 / 1048576.0,
        s.backlog_rss as f64 / 1048576.0,
        s.disk_bytes as f64 / 1048576.0,
        s.cpu.produce.0,
        s.cpu.produce.1,
        s.cpu.consume.0,
        s.cpu.consume.1
    ));
    Ok(s)
}

fn main() -> Result<()> {
    if std::env::args().nth(1).as_deref() == Some("load") {
        return load::main(std::env::args().skip(1));
    }
    let args = Args::parse();
    let w = Workload {
        messages: args.messages,
        queues: 4,
        batch: args.batch,
        payload: args.payload,
        fetch: 100,
        latency_rate: args.latency_rate,
        latency_secs: args.latency_secs,
        latency_warmup_secs: args.latency_warmup_secs,
        keys: args.keys,
    };
    if w.messages % w.batch as u64 != 0 || w.messages == 0 {
        bail!("--messages must be a positive multiple of {}", w.batch);
    }
    let mode = match args.skiff_send.as_str() {
        "batch" => SendMode::Batch,
        "single" => SendMode::Single,
        other => bail!("--skiff-send {other}: expected batch or single"),
    };
    let kinds: Vec<Kind> = args
        .brokers
        .iter()
        .map(|b| Kind::parse(b).with_context(|| format!("unknown broker {b}")))
        .collect::<Result<_>>()?;
    // Default: beside this binary (run.sh builds both into one target dir).
    let skiff_bin = args.skiff_bin.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("skiff")))
            .unwrap_or_else(|| PathBuf::from("skiff"))
    });
    if kinds.iter().any(|k| k.is_skiff()) && !skiff_bin.exists() {
        bail!("skiff binary {} not found (--skiff-bin)", skiff_bin.display());
    }
    let bins = Binaries {
        skiff: skiff_bin,
        redis: args.redis_server.clone(),
        nats: args.nats_server.clone(),
        apache_start: args.apache_start.clone(),
    };
    if kinds.contains(&Kind::Apache) && bins.apache_start.as_ref().is_none_or(|p| !p.exists()) {
        bail!("apache needs --apache-start tests/conformance/apache/start.sh (run.sh passes it)");
    }
    let work_dir = args
        .work_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("/var/tmp/skiff-bench-{}", std::process::id())));
    std::fs::create_dir_all(&work_dir)?;
    let load_before = report::loadavg();
    let started = report::now_utc();

    progress().spawn_printer();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut results: Vec<RunResult> = kinds
        .iter()
        .map(|&k| RunResult {
            kind: k,
            samples: Vec::new(),
            errors: Vec::new(),
        })
        .collect();
    for run in 1..=args.runs {
        for r in results.iter_mut() {
            let run_dir = work_dir.join(format!("run{run}"));
            std::fs::create_dir_all(&run_dir)?;
            match rt.block_on(one_run(r.kind, run, args.runs, &w, &bins, &run_dir, &args, mode)) {
                Ok(s) => r.samples.push(s),
                Err(e) => {
                    say(format!("run {run}/{} {}: FAILED: {e:#}", args.runs, r.kind.name()));
                    r.errors.push(format!("{e:#}"));
                }
            }
        }
    }
    let load_after = report::loadavg();
    if !args.keep {
        let _ = std::fs::remove_dir_all(&work_dir);
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let text = report::render(&report::Report {
        workload: &w,
        results: &results,
        command,
        started,
        load_before,
        load_after,
        runs: args.runs,
        skiff_send: mode,
        skiff_rev: args.skiff_rev.clone(),
        apache_desc: kinds.contains(&Kind::Apache).then(|| {
            let build = broker::APACHE_BUILD.get().cloned().unwrap_or_else(|| "Apache RocketMQ".into());
            match &args.apache_desc {
                Some(d) => format!("{build} ({d})"),
                None => build,
            }
        }),
        idle_secs: args.idle_secs,
    });
    println!("{text}");
    if let Some(out) = &args.out {
        std::fs::write(out, &text).with_context(|| format!("writing {}", out.display()))?;
    }
    if results.iter().any(|r| r.samples.is_empty()) {
        std::process::exit(1);
    }
    Ok(())
}
