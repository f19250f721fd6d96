//! Embedded end-to-end benchmark: one node, one topic with 4 queues, 1,000,000 messages of 100
//! bytes produced in batches through `Producer::send_batch`, then consumed by one push consumer
//! of one group until every message is committed. Real time, a fresh directory per run, the
//! median of 3 runs.
//!
//! Run with `cargo bench --bench embedded`. Overrides (for profiling): `SKIFF_BENCH_MESSAGES`,
//! `SKIFF_BENCH_RUNS`, `SKIFF_BENCH_PRODUCE_BATCH`, `SKIFF_BENCH_PRODUCERS`,
//! `SKIFF_BENCH_PULL_BATCH`, `SKIFF_BENCH_CONSUME_BATCH`, `SKIFF_BENCH_ONLY` (`produce`).

use bytes::Bytes;
use skiff::actors::consumer::{ConsumeStatus, Listener};
use skiff::actors::logic::pull_from_where::ConsumeFromWhere;
use skiff::actors::producer::OutgoingMessage;
use skiff::{Node, NodeConfig};
use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

const TOPIC: &str = "BenchTopic";
const GROUP: &str = "bench-group";
const QUEUES: u32 = 4;
const BODY_BYTES: usize = 100;

#[derive(Clone, Copy, Debug)]
struct Settings {
    messages: usize,
    runs: usize,
    produce_batch: usize,
    producers: usize,
    pull_batch: u32,
    consume_batch: usize,
    produce_only: bool,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

impl Settings {
    fn from_env() -> Self {
        Settings {
            messages: env_or("SKIFF_BENCH_MESSAGES", 1_000_000),
            runs: env_or("SKIFF_BENCH_RUNS", 3),
            produce_batch: env_or("SKIFF_BENCH_PRODUCE_BATCH", 100),
            producers: env_or("SKIFF_BENCH_PRODUCERS", 4),
            pull_batch: env_or("SKIFF_BENCH_PULL_BATCH", 32),
            consume_batch: env_or("SKIFF_BENCH_CONSUME_BATCH", 32),
            produce_only: std::env::var("SKIFF_BENCH_ONLY").is_ok_and(|v| v == "produce"),
        }
    }
}

struct RunResult {
    produce: Duration,
    consume: Option<Duration>,
}

fn node_config(dir: &std::path::Path) -> NodeConfig {
    let mut config = NodeConfig::in_dir(dir);
    config.default_topic_queue_nums = QUEUES;
    config
}

/// Sends `settings.messages` messages through `settings.producers` concurrent tasks, each
/// sending its batches one after another (so up to `producers` batches are in flight).
async fn produce(node: &Node, settings: Settings) -> anyhow::Result<Duration> {
    let body = Bytes::from(vec![b'x'; BODY_BYTES]);
    let batches = settings.messages.div_ceil(settings.produce_batch);
    let producer = node.producer("bench-producer");
    // Route lookup (and topic creation) outside the timed part.
    node.broker().route(TOPIC).await?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..settings.producers.max(1) {
        let producer = producer.clone();
        let body = body.clone();
        tasks.push(actix_rt::spawn(async move {
            let mut sent = 0usize;
            let mut batch_index = worker;
            while batch_index < batches {
                let start = batch_index * settings.produce_batch;
                let end = (start + settings.produce_batch).min(settings.messages);
                let batch = (start..end)
                    .map(|_| OutgoingMessage::new(TOPIC, body.clone()))
                    .collect();
                sent += producer.send_batch(batch).await?.len();
                batch_index += settings.producers.max(1);
            }
            Ok::<_, anyhow::Error>(sent)
        }));
    }
    let mut sent = 0;
    for task in tasks {
        sent += task.await??;
    }
    let took = started.elapsed();
    anyhow::ensure!(sent == settings.messages, "sent {sent}");
    let stored: u64 = (0..QUEUES)
        .map(|q| node.broker().reader().max_offset(TOPIC, q))
        .sum();
    anyhow::ensure!(stored == settings.messages as u64, "stored {stored}");
    Ok(took)
}

/// One consumer consumes everything; done when its committed offsets reach every queue's end.
async fn consume(node: &Node, settings: Settings) -> anyhow::Result<Duration> {
    let maxima: Vec<u64> = (0..QUEUES)
        .map(|q| node.broker().reader().max_offset(TOPIC, q))
        .collect();
    let count = Rc::new(Cell::new(0u64));
    let listener = {
        let count = count.clone();
        Listener::concurrent(move |batch| {
            count.set(count.get() + batch.len() as u64);
            async { ConsumeStatus::SUCCESS }
        })
    };
    let started = Instant::now();
    let consumer = node.start_consumer(
        node.push_consumer(GROUP)
            .subscribe(TOPIC, "*")
            .consume_from(ConsumeFromWhere::FirstOffset)
            .configure(|config| {
                config.pull_batch_size = settings.pull_batch;
                config.consume_batch_size = settings.consume_batch;
            })
            .listener(listener),
    )?;
    let deadline = Duration::from_secs(600);
    while count.get() < settings.messages as u64 {
        anyhow::ensure!(started.elapsed() < deadline, "consumed {}", count.get());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Every message was handed to the listener; now wait for the commits.
    loop {
        let offsets = consumer.observe().await?.offsets.offsets;
        let committed = (0..QUEUES).all(|q| {
            offsets.iter().any(|(queue, offset)| {
                queue.topic == TOPIC && queue.queue_id == q && *offset == maxima[q as usize]
            })
        });
        if committed {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < deadline,
            "commits did not reach the end"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took = started.elapsed();
    anyhow::ensure!(
        count.get() == settings.messages as u64,
        "consumed {} (duplicates?)",
        count.get()
    );
    consumer.shutdown().await?;
    // After the final persist the broker holds every committed offset.
    for row in node.progress(GROUP).await? {
        if row.topic == TOPIC {
            anyhow::ensure!(
                row.consumer_offset == Some(row.broker_offset),
                "broker offset not at the end after shutdown: {row:?}"
            );
        }
    }
    Ok(took)
}

fn one_run(settings: Settings) -> anyhow::Result<RunResult> {
    let dir = tempfile::tempdir()?;
    let system = actix_rt::System::new();
    system.block_on(async {
        let node = Node::open(node_config(dir.path()))?;
        let produce = produce(&node, settings).await?;
        let consume = if settings.produce_only {
            None
        } else {
            Some(consume(&node, settings).await?)
        };
        node.shutdown().await?;
        Ok(RunResult { produce, consume })
    })
}

fn rate(messages: usize, took: Duration) -> f64 {
    messages as f64 / took.as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let settings = Settings::from_env();
    println!(
        "embedded: {} messages x {BODY_BYTES} B, topic with {QUEUES} queues, async flush; \
         produce: send_batch of {}, {} concurrent senders; consume: 1 push consumer, \
         pull_batch_size {}, consume_batch_size {}, max_concurrency 20, until committed; {} runs",
        settings.messages,
        settings.produce_batch,
        settings.producers,
        settings.pull_batch,
        settings.consume_batch,
        settings.runs
    );
    let mut produce_rates = Vec::new();
    let mut consume_rates = Vec::new();
    for run in 1..=settings.runs.max(1) {
        let result = one_run(settings)?;
        let produce = rate(settings.messages, result.produce);
        produce_rates.push(produce);
        let consumed = match result.consume {
            Some(took) => {
                let consume = rate(settings.messages, took);
                consume_rates.push(consume);
                format!("consume {consume:>10.0} msgs/s ({took:.2?})")
            }
            None => "consume skipped".to_string(),
        };
        println!(
            "run {run}: produce {produce:>10.0} msgs/s ({:.2?}), {consumed}",
            result.produce
        );
    }
    println!(
        "median of {}: produce {:.0} msgs/s",
        produce_rates.len(),
        median(produce_rates)
    );
    if !consume_rates.is_empty() {
        println!(
            "median of {}: consume {:.0} msgs/s",
            consume_rates.len(),
            median(consume_rates)
        );
    }
    Ok(())
}
