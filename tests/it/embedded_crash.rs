//! Crash and restart of the embedded node (issue "The actor system and the embedded Node",
//! must-show 3, crash part).
//!
//! `sigkill_mid_stream_loses_nothing_and_bounds_redelivery` re-executes this test binary as a
//! child process (`crash_child`, selected by `SKIFF_CRASH_CHILD`) that opens a node in a shared
//! directory and consumes in real time, printing one line per consumed message; the parent kills
//! it with SIGKILL after a seeded random number of lines, ten times, then lets a last child
//! consume to the end. Nothing may be lost, and what each restart re-delivers is bounded by the
//! in-flight window plus what was consumed shortly before the kill (offsets reach the broker
//! within the consumer's persist interval and disk within the broker's flush interval).
//!
//! `graceful_shutdown_redelivers_nothing`: a graceful consumer and node shutdown, then a restart,
//! re-delivers nothing; see `docs/architecture.md` (rule 2).

use crate::common;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use skiff::actors::consumer::{ConsumeStatus, Listener};
use skiff::actors::logic::pull_from_where::ConsumeFromWhere;
use skiff::actors::producer::OutgoingMessage;
use skiff::{Node, NodeConfig};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const CHILD_ENV: &str = "SKIFF_CRASH_CHILD";
const DIR_ENV: &str = "SKIFF_CRASH_DIR";
const TOPIC: &str = "TopicCrash";
const GROUP: &str = "group-crash";
const QUEUES: u32 = 4;
const MESSAGES: usize = 100_000;
const KILLS: usize = 10;
/// The child's consumer settings, which the parent's bound is computed from.
const PERSIST_INTERVAL: Duration = Duration::from_millis(500);
const BROKER_FLUSH_INTERVAL: Duration = Duration::from_millis(200);
const PULL_THRESHOLD: usize = 400;
const PULL_BATCH: u32 = 32;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn child_config(dir: &Path) -> NodeConfig {
    let mut config = NodeConfig::in_dir(dir);
    config.segment_size = 64 << 20;
    // The host's disk use must not delete these segments early or refuse sends.
    config.disk_max_used_ratio = 0.999;
    config.disk_full_ratio = 1.0;
    config.default_topic_queue_nums = QUEUES;
    config.flush_consumer_offset_interval = BROKER_FLUSH_INTERVAL;
    config
}

/// `crash_child`'s name as `--exact` wants it: libtest names a test by its module path within the
/// test binary (the crate's name left out), and a filter matching no test would run nothing.
fn child_test_name() -> String {
    match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::crash_child"),
        None => "crash_child".to_owned(),
    }
}

/// The child side, started by the crash tests with `--ignored --exact embedded_crash::crash_child` (ignored in a
/// normal run, and an error without `SKIFF_CRASH_CHILD`, so it cannot pass for nothing). Runs
/// one mode against the node in `SKIFF_CRASH_DIR`:
/// - `produce`: sends the messages and shuts down gracefully;
/// - `consume`: consumes, rate-limited, until killed;
/// - `final`: consumes at full speed until the group's committed offsets reach the end, then
///   shuts down gracefully.
///
/// Every consumed message is printed, before the listener returns, as
/// `MSG <queue offset> <queue id> <body> <epoch ms>` and flushed.
#[test]
#[ignore = "the child process of the crash tests, which start it"]
fn crash_child() -> anyhow::Result<()> {
    let mode = std::env::var(CHILD_ENV)
        .map_err(|_| anyhow::anyhow!("{CHILD_ENV} is unset: run only as a crash test's child"))?;
    let dir = std::path::PathBuf::from(std::env::var(DIR_ENV)?);
    // Ends the harness's "test crash_child ... " line, so every line below starts clean.
    println!();
    let system = actix_rt::System::new();
    system.block_on(async move {
        let node = Node::open(child_config(&dir))?;
        match mode.as_str() {
            "produce" => {
                let producer = node.producer("crash-producer");
                for start in (0..MESSAGES).step_by(1000) {
                    let batch = (start..(start + 1000).min(MESSAGES))
                        .map(|i| OutgoingMessage::new(TOPIC, format!("m-{i}")))
                        .collect();
                    producer.send_batch(batch).await?;
                }
                node.shutdown().await?;
                println!("PRODUCED {MESSAGES}");
                Ok(())
            }
            "consume" | "final" => {
                let rate_limited = mode == "consume";
                let out = Rc::new(RefCell::new(std::io::stdout()));
                let listener = Listener::concurrent(move |batch| {
                    let mut text = String::new();
                    for message in &batch {
                        text.push_str(&format!(
                            "MSG {} {} {} {}\n",
                            message.queue_offset(),
                            message.queue.queue_id,
                            String::from_utf8_lossy(message.body()),
                            now_ms()
                        ));
                    }
                    let written = {
                        let mut out = out.borrow_mut();
                        out.write_all(text.as_bytes()).and_then(|()| out.flush())
                    };
                    async move {
                        if written.is_err() {
                            return ConsumeStatus::ReconsumeLater;
                        }
                        if rate_limited {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                        ConsumeStatus::SUCCESS
                    }
                });
                let consumer = node.start_consumer(
                    node.push_consumer(GROUP)
                        .subscribe(TOPIC, "*")
                        .consume_from(ConsumeFromWhere::FirstOffset)
                        .configure(|config| {
                            config.persist_interval = PERSIST_INTERVAL;
                            config.pull_batch_size = PULL_BATCH;
                            config.flow_limits.max_count = PULL_THRESHOLD;
                            config.max_concurrency = 8;
                        })
                        .listener(listener),
                )?;
                if rate_limited {
                    // Runs until the parent kills it.
                    std::future::pending::<()>().await;
                }
                loop {
                    let rows = node.progress(GROUP).await?;
                    let done = rows.iter().filter(|row| row.topic == TOPIC).all(|row| {
                        row.broker_offset > 0 && row.consumer_offset == Some(row.broker_offset)
                    });
                    if done && rows.iter().any(|row| row.topic == TOPIC) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                consumer.shutdown().await?;
                node.shutdown().await?;
                println!("DONE");
                Ok(())
            }
            other => anyhow::bail!("unknown child mode {other}"),
        }
    })
}

/// One line a child printed.
#[derive(Debug, Clone)]
struct Consumed {
    offset: u64,
    queue: u32,
    index: usize,
    at_ms: i64,
}

fn parse(line: &str) -> anyhow::Result<Consumed> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [_, offset, queue, body, at] = fields[..] else {
        anyhow::bail!("malformed line {line:?}");
    };
    let index = body
        .strip_prefix("m-")
        .ok_or_else(|| anyhow::anyhow!("unexpected body in {line:?}"))?
        .parse()?;
    Ok(Consumed {
        offset: offset.parse()?,
        queue: queue.parse()?,
        index,
        at_ms: at.parse()?,
    })
}

enum Line {
    Consumed(Consumed),
    Other(String),
}

struct ChildRun {
    child: std::process::Child,
    lines: mpsc::Receiver<anyhow::Result<Line>>,
    reader: std::thread::JoinHandle<()>,
}

/// Starts this test binary as a child running only `crash_child` in `mode`; a thread forwards
/// its stdout line by line, so the child never blocks on a full pipe.
fn spawn_child(dir: &Path, mode: &str) -> anyhow::Result<ChildRun> {
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            child_test_name().as_str(),
            "--ignored",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, mode)
        .env(DIR_ENV, dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("child stdout is piped"))?;
    let (sender, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let parsed = match line {
                Ok(line) => match line.find("MSG ") {
                    Some(at) => parse(&line[at..]).map(Line::Consumed),
                    None => Ok(Line::Other(line)),
                },
                Err(e) => Err(e.into()),
            };
            if sender.send(parsed).is_err() {
                return;
            }
        }
    });
    Ok(ChildRun {
        child,
        lines,
        reader,
    })
}

impl ChildRun {
    /// Reads consumed lines until `target` arrived, then SIGKILLs the child and collects what
    /// it printed before dying. Answers the lines and the kill time.
    fn kill_after(mut self, target: usize) -> anyhow::Result<(Vec<Consumed>, i64)> {
        let mut consumed = Vec::new();
        while consumed.len() < target {
            match self.lines.recv_timeout(Duration::from_secs(20)) {
                Ok(line) => {
                    if let Line::Consumed(c) = line? {
                        consumed.push(c);
                    }
                }
                Err(e) => {
                    let _ = self.child.kill();
                    anyhow::bail!(
                        "child stopped printing after {} of {target} lines: {e}",
                        consumed.len()
                    );
                }
            }
        }
        let killed_at = now_ms();
        self.child.kill()?; // SIGKILL on Unix.
        let status = self.child.wait()?;
        anyhow::ensure!(!status.success(), "the child was killed, not finished");
        consumed.extend(self.drain()?);
        Ok((consumed, killed_at))
    }

    /// Reads to the end and waits for a successful exit.
    fn finish(mut self, last_line: &str) -> anyhow::Result<Vec<Consumed>> {
        let mut consumed = Vec::new();
        let mut saw_last = false;
        loop {
            match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => match line? {
                    Line::Consumed(c) => consumed.push(c),
                    Line::Other(other) => saw_last |= other.contains(last_line),
                },
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    anyhow::bail!("child did not finish");
                }
            }
        }
        let status = self.child.wait()?;
        anyhow::ensure!(status.success(), "child failed: {status}");
        anyhow::ensure!(saw_last, "child did not print {last_line:?}");
        let _ = self.reader.join();
        Ok(consumed)
    }

    fn drain(self) -> anyhow::Result<Vec<Consumed>> {
        let mut consumed = Vec::new();
        for line in self.lines.iter() {
            if let Line::Consumed(c) = line? {
                consumed.push(c);
            }
        }
        let _ = self.reader.join();
        Ok(consumed)
    }
}

#[test]
fn sigkill_mid_stream_loses_nothing_and_bounds_redelivery() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let wall = std::time::Instant::now();
    spawn_child(dir.path(), "produce")?.finish("PRODUCED")?;

    let mut rng = StdRng::seed_from_u64(0xc4a5_4001);
    let mut runs: Vec<Vec<Consumed>> = Vec::new();
    let mut kills: Vec<i64> = Vec::new();
    for _ in 0..KILLS {
        // At most 80,000 lines in all: the killed runs never reach the end.
        let target = rng.gen_range(3_000..=8_000);
        let (consumed, killed_at) = spawn_child(dir.path(), "consume")?.kill_after(target)?;
        runs.push(consumed);
        kills.push(killed_at);
    }
    runs.push(spawn_child(dir.path(), "final")?.finish("DONE")?);

    // Nothing lost: every message was consumed in some run.
    let mut seen = vec![false; MESSAGES];
    for consumed in runs.iter().flatten() {
        anyhow::ensure!(consumed.index < MESSAGES, "unknown message {consumed:?}");
        seen[consumed.index] = true;
    }
    let missing: Vec<usize> = (0..MESSAGES).filter(|&i| !seen[i]).collect();
    assert!(
        missing.is_empty(),
        "{} messages never consumed, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );

    // Messages map to fixed (queue, offset) positions across runs, and a run consumes each at
    // most once (one consumer, no failures, no rebalance).
    let mut position: HashMap<usize, (u32, u64)> = HashMap::new();
    for (run, consumed) in runs.iter().enumerate() {
        let mut in_run = HashSet::new();
        for c in consumed {
            assert!(
                in_run.insert(c.index),
                "run {run} consumed m-{} twice",
                c.index
            );
            let at = *position.entry(c.index).or_insert((c.queue, c.offset));
            assert_eq!(at, (c.queue, c.offset), "m-{} moved", c.index);
        }
    }

    // Bounded re-delivery after each kill.
    let window = QUEUES as usize * (PULL_THRESHOLD + PULL_BATCH as usize);
    let recent_ms =
        (PERSIST_INTERVAL + BROKER_FLUSH_INTERVAL + Duration::from_secs(1)).as_millis() as i64;
    let mut consumed_so_far: HashSet<usize> = HashSet::new();
    let mut report = Vec::new();
    for k in 0..KILLS {
        consumed_so_far.extend(runs[k].iter().map(|c| c.index));
        let redelivered = runs[k + 1]
            .iter()
            .filter(|c| consumed_so_far.contains(&c.index))
            .count();
        let recent = runs[k]
            .iter()
            .filter(|c| c.at_ms >= kills[k] - recent_ms)
            .count();
        report.push(format!(
            "kill {k}: run consumed {}, re-delivered next {redelivered} <= {window} + {recent}",
            runs[k].len()
        ));
        assert!(
            redelivered <= window + recent,
            "after kill {k}, run {} re-delivered {redelivered} already consumed messages; bound \
             is the in-flight window {window} + {recent} consumed in the last {recent_ms} ms \
             before the kill\n{}",
            k + 1,
            report.join("\n")
        );
    }
    assert!(
        runs[KILLS].len() < MESSAGES,
        "the final run resumed from committed offsets, not from the start"
    );
    eprintln!(
        "{}\nfinal run consumed {}; {} deliveries for {MESSAGES} messages in {:?}",
        report.join("\n"),
        runs[KILLS].len(),
        runs.iter().map(Vec::len).sum::<usize>(),
        wall.elapsed()
    );
    Ok(())
}

#[test]
fn graceful_shutdown_redelivers_nothing() -> anyhow::Result<()> {
    const TOPIC: &str = "TopicGraceful";
    const GROUP: &str = "group-graceful";
    const TOTAL: usize = 20_000;
    const FIRST_PART: usize = 8_000;
    let dir = tempfile::tempdir()?;

    // A listener that takes a seeded random 0..20 ms of (paused) time per message, so calls
    // finish out of order and work is in flight when the shutdown starts.
    fn slow_listener(seen: &SeenLog, seed: u64) -> Listener {
        let seen = seen.clone();
        let rng = Rc::new(RefCell::new(StdRng::seed_from_u64(seed)));
        Listener::concurrent(move |batch| {
            let seen = seen.clone();
            let pause = Duration::from_millis(rng.borrow_mut().gen_range(0..20));
            async move {
                tokio::time::sleep(pause).await;
                record(&seen, &batch);
                ConsumeStatus::SUCCESS
            }
        })
    }

    let first: SeenLog = Rc::default();
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce(&node, TOPIC, "m", TOTAL, 500).await?;
        let consumer = node.start_consumer(
            node.push_consumer(GROUP)
                .subscribe(TOPIC, "*")
                .consume_from(ConsumeFromWhere::FirstOffset)
                .listener(slow_listener(&first, 7)),
        )?;
        advance_until("first part consumed", Duration::from_secs(600), || {
            first.borrow().distinct() >= FIRST_PART
        })
        .await?;
        let running = consumer.observe().await?.dispatcher.running_calls;
        assert!(running > 0, "work is in flight when the shutdown starts");
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok::<_, anyhow::Error>(())
    })?;
    let first = first.borrow();
    assert_eq!(first.duplicates(), 0, "no duplicates within the first run");
    assert!(first.distinct() < TOTAL, "the first run stopped part way");

    let second: SeenLog = Rc::default();
    run_paused(|| async {
        let node = open_node(dir.path())?;
        let consumer = node.start_consumer(
            node.push_consumer(GROUP)
                .subscribe(TOPIC, "*")
                .consume_from(ConsumeFromWhere::FirstOffset)
                .listener(slow_listener(&second, 8)),
        )?;
        let rest = TOTAL - first.distinct();
        advance_until("the rest consumed", Duration::from_secs(600), || {
            second.borrow().total() >= rest
        })
        .await?;
        // Anything re-delivered would arrive by now.
        advance(Duration::from_secs(30)).await;
        consumer.shutdown().await?;
        let rows = node.progress(GROUP).await?;
        for row in rows.iter().filter(|row| row.topic == TOPIC) {
            assert_eq!(
                row.consumer_offset,
                Some(row.broker_offset),
                "committed to the end: {row:?}"
            );
        }
        node.shutdown().await?;
        Ok::<_, anyhow::Error>(())
    })?;
    let second = second.borrow();
    let again: Vec<&String> = second
        .counts
        .keys()
        .filter(|body| first.counts.contains_key(*body))
        .collect();
    assert!(
        again.is_empty(),
        "{} messages re-delivered after a graceful shutdown, e.g. {:?}",
        again.len(),
        &again[..again.len().min(10)]
    );
    assert_eq!(
        second.duplicates(),
        0,
        "no duplicates within the second run"
    );
    assert_eq!(
        first.distinct() + second.distinct(),
        TOTAL,
        "every message consumed exactly once over both runs"
    );
    eprintln!(
        "graceful: first run {} (shut down with work in flight), second run {}",
        first.distinct(),
        second.distinct()
    );
    Ok(())
}
