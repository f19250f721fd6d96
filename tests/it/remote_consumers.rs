//! skiff's own producer and consumers over TCP (`RemoteBroker`) against `skiff serve` running as
//! a child process.
//!
//! * `two_consumers_split_queues_via_notify`: a second consumer joins; the first one gives up
//!   half of the queues because the broker notifies it (NOTIFY_CONSUMER_IDS_CHANGED): periodic
//!   rebalancing is set to 10 minutes, so nothing else could trigger it in time.
//! * `killed_consumer_queues_move_to_the_survivor`: a consumer running in a child process is
//!   SIGKILLed mid-stream; the broker sees its connection close, the survivor is notified, takes
//!   every queue and everything is consumed (duplicates allowed, nothing lost).
//! * `offsets_resume_after_broker_restart`: a group consumes, the broker is stopped with SIGTERM
//!   and restarted on the same data directory; the group receives only the new messages.
//! * `running_consumer_survives_broker_restart`: a consumer keeps running through a restart on
//!   the same address; its client registers again on the new connection at once.
//! * `orderly_consumer_keeps_each_order_in_sequence`, `broadcasting_consumers_each_get_everything`,
//!   `failed_message_comes_back_from_the_retry_topic`: the other consumer modes and send-back.
//! * `admin_progress_topics_and_reset_offset`: `skiff admin` over the network.
//!
//! Waiting is always bounded and on a condition (connect until the port accepts, poll a
//! consumer snapshot or the received messages), never a fixed sleep.

use crate::common;

use skiff::actors::broker_api::BrokerApi;
use skiff::actors::consumer::push_consumer::{PushConsumer, PushConsumerBuilder};
use skiff::actors::logic::delay::retry_topic;
use skiff::admin::{AdminArgs, AdminCommand, TopicCommand};
use skiff::prelude::*;
use skiff::remoting::client::{ClientConfig, RemotingClient};
use skiff::remoting::codes;
use skiff::remoting::frame::RemotingCommand;
use skiff::remoting::remote_broker::{RemoteBroker, RemoteBrokerConfig};
use skiff::storage::metadata::TopicMessageType;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "SKIFF_REMOTE_CHILD_NAMESRV";
const TOPIC: &str = "RemoteTopic";

// ---- the serve child process ------------------------------------------------------------------

struct Serve {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Serve {
    /// Starts `skiff serve` on a free port with its data in `data_dir` and waits until the port
    /// accepts connections (bounded; fails at once if the child exits).
    fn start(data_dir: &Path, log: &Path) -> anyhow::Result<Serve> {
        Serve::start_on(
            data_dir,
            log,
            &format!("127.0.0.1:{}", common::free_port()?),
        )
    }

    /// As [`Serve::start`], on `addr`.
    fn start_on(data_dir: &Path, log: &Path, addr: &str) -> anyhow::Result<Serve> {
        std::fs::create_dir_all(data_dir)?;
        let addr = addr.to_owned();
        let log_file = File::options().create(true).append(true).open(log)?;
        let child = Command::new(env!("CARGO_BIN_EXE_skiff"))
            .args(["serve", "--listen", &addr, "--data-dir"])
            .arg(data_dir)
            .env("RUST_LOG", "info")
            .current_dir(data_dir.parent().unwrap_or(data_dir))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()?;
        let mut serve = Serve {
            child,
            addr,
            log: log.to_path_buf(),
        };
        serve.wait_accepting()?;
        Ok(serve)
    }

    fn wait_accepting(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match TcpStream::connect(&self.addr) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    if let Some(status) = self.child.try_wait()? {
                        anyhow::bail!("skiff serve exited with {status}:\n{}", self.log_tail());
                    }
                    anyhow::ensure!(
                        Instant::now() < deadline,
                        "skiff serve did not accept on {} within 60 s:\n{}",
                        self.addr,
                        self.log_tail()
                    );
                    std::thread::yield_now();
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// SIGTERM, then waits for a clean exit; a watchdog SIGKILLs it after 30 s.
    fn terminate(mut self) -> anyhow::Result<()> {
        let pid = i32::try_from(self.child.id())?;
        // SAFETY: sending a signal to our own, not yet reaped, child process.
        let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
        anyhow::ensure!(sent == 0, "kill(SIGTERM) failed");
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if wait.recv_timeout(Duration::from_secs(30)).is_err() {
                // SAFETY: as above; the parent has not reaped it yet.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        });
        let status = self.child.wait()?;
        let _ = done.send(());
        let _ = watchdog.join();
        anyhow::ensure!(
            status.success(),
            "skiff serve exited with {status} after SIGTERM (SIGKILL = did not stop within 30 s):\n{}",
            self.log_tail()
        );
        Ok(())
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `test` on a fresh actix system; on failure the serve log tail is appended.
fn run<F, Fut>(log: &Path, test: F) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let result = actix_rt::System::new().block_on(test());
    result.map_err(|e| {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(60)..].join("\n");
        e.context(format!("serve log tail:\n{tail}"))
    })
}

// ---- consumers --------------------------------------------------------------------------------

fn remote(addr: &str) -> anyhow::Result<Rc<RemoteBroker>> {
    Ok(Rc::new(RemoteBroker::connect(
        addr,
        RemoteBrokerConfig::default(),
    )?))
}

/// (queue id, queue offset, body) of every delivery, in order.
type Received = Rc<RefCell<Vec<(u32, u64, String)>>>;

fn recording_listener(received: &Received) -> Listener {
    let received = received.clone();
    Listener::concurrent(move |batch| {
        for message in &batch {
            if message.queue.topic == TOPIC {
                received.borrow_mut().push((
                    message.queue.queue_id,
                    message.queue_offset(),
                    String::from_utf8_lossy(message.body()).into_owned(),
                ));
            }
        }
        async { ConsumeStatus::SUCCESS }
    })
}

fn builder(group: &str, listener: Listener) -> PushConsumerBuilder {
    PushConsumerBuilder::new(group)
        .subscribe(TOPIC, "*")
        .consume_from(ConsumeFromWhere::FirstOffset)
        .listener(listener)
        .configure(|c| {
            // Only NOTIFY_CONSUMER_IDS_CHANGED (and unfinished rounds) trigger a rebalance.
            c.rebalance_interval = Duration::from_secs(600);
            c.persist_interval = Duration::from_millis(500);
            c.suspend_timeout = Duration::from_secs(2);
        })
}

/// The consumer's assigned queues of [`TOPIC`].
async fn topic_queues(consumer: &PushConsumer) -> anyhow::Result<BTreeSet<u32>> {
    Ok(consumer
        .observe()
        .await?
        .coordinator
        .assigned
        .iter()
        .filter(|q| q.topic == TOPIC)
        .map(|q| q.queue_id)
        .collect())
}

/// Polls `condition` every 20 ms until it holds; fails after `limit`.
async fn wait_until<F, Fut>(what: &str, limit: Duration, condition: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    common::poll_until(what, limit, Duration::from_millis(20), condition).await
}

async fn produce(broker: &Rc<RemoteBroker>, prefix: &str, count: usize) -> anyhow::Result<()> {
    let producer = Producer::new("remote-test-producer", broker.clone());
    for chunk in (0..count).collect::<Vec<_>>().chunks(50) {
        let batch = chunk
            .iter()
            .map(|i| OutgoingMessage::new(TOPIC, format!("{prefix}-{i}")))
            .collect();
        producer.send_batch(batch).await?;
    }
    Ok(())
}

fn bodies(prefix: &str, count: usize) -> BTreeSet<String> {
    (0..count).map(|i| format!("{prefix}-{i}")).collect()
}

fn distinct(received: &Received) -> BTreeSet<String> {
    received
        .borrow()
        .iter()
        .map(|(_, _, b)| b.clone())
        .collect()
}

/// `skiff admin progress` rows of [`TOPIC`]: queue id → (broker offset, consumer offset, lag).
async fn progress(addr: &str, group: &str) -> anyhow::Result<BTreeMap<u32, (u64, u64, u64)>> {
    let text = skiff::admin::run(AdminArgs {
        namesrv: Some(addr.to_owned()),
        json: false,
        access_key: None,
        secret_key: None,
        command: AdminCommand::Progress {
            group: group.to_owned(),
        },
    })
    .await?;
    let mut rows = BTreeMap::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split_whitespace().collect();
        if cells.first() == Some(&TOPIC) && cells.len() >= 7 {
            rows.insert(
                cells[2].parse()?,
                (cells[3].parse()?, cells[4].parse()?, cells[5].parse()?),
            );
        }
    }
    Ok(rows)
}

// ---- (a) rebalance by notification ----------------------------------------------------------------

#[test]
fn two_consumers_split_queues_via_notify() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("serve.log");
    let data = dir.path().join("data");
    let serve = Serve::start(&data, &log)?;
    let addr = serve.addr.clone();
    run(&log, || async move {
        let group = "remote-split";
        let producer_broker = remote(&addr)?;
        // Creates the topic (4 queues).
        anyhow::ensure!(
            producer_broker
                .route(TOPIC.to_owned())
                .await?
                .read_queue_nums()
                == 4
        );

        let (got_a, got_b): (Received, Received) = Default::default();
        let a = builder(group, recording_listener(&got_a)).start(remote(&addr)?)?;
        let (a_ref, got_a_ref) = (&a, &got_a);
        wait_until(
            "the first consumer owns every queue",
            Duration::from_secs(30),
            || async move { Ok(topic_queues(a_ref).await?.len() == 4) },
        )
        .await?;

        let b = builder(group, recording_listener(&got_b)).start(remote(&addr)?)?;
        let (b_ref, got_b_ref) = (&b, &got_b);
        wait_until(
            "the queues are split 2/2",
            Duration::from_secs(30),
            || async move {
                let (qa, qb) = (topic_queues(a_ref).await?, topic_queues(b_ref).await?);
                Ok(qa.len() == 2 && qb.len() == 2 && qa.is_disjoint(&qb))
            },
        )
        .await?;
        let (qa, qb) = (topic_queues(&a).await?, topic_queues(&b).await?);

        produce(&producer_broker, "split", 200).await?;
        let expected = bodies("split", 200);
        let expected_ref = &expected;
        wait_until(
            "every message is consumed",
            Duration::from_secs(30),
            || async move {
                Ok(distinct(got_a_ref).union(&distinct(got_b_ref)).count() == expected_ref.len())
            },
        )
        .await?;
        for (received, owned, name) in [(&got_a, &qa, "first"), (&got_b, &qb, "second")] {
            let queues: BTreeSet<u32> = received.borrow().iter().map(|(q, _, _)| *q).collect();
            anyhow::ensure!(
                queues.is_subset(owned),
                "the {name} consumer received from {queues:?} but owns {owned:?}"
            );
            anyhow::ensure!(!queues.is_empty(), "the {name} consumer received nothing");
        }
        let total = got_a.borrow().len() + got_b.borrow().len();
        anyhow::ensure!(total == 200, "{total} deliveries of 200 messages");

        a.shutdown().await?;
        b.shutdown().await?;
        let rows = progress(&addr, group).await?;
        anyhow::ensure!(rows.len() == 4, "progress rows {rows:?}");
        for (queue, (broker_offset, consumer_offset, lag)) in &rows {
            anyhow::ensure!(
                *broker_offset == 50 && *consumer_offset == 50 && *lag == 0,
                "queue {queue}: broker {broker_offset} consumer {consumer_offset} lag {lag}"
            );
        }
        producer_broker.close();
        Ok(())
    })
}

// ---- (b) a killed consumer ---------------------------------------------------------------------------

const KILL_GROUP: &str = "remote-kill";

/// `remote_consumer_child`'s name as `--exact` wants it: libtest names a test by its module
/// path within the test binary (the crate's name left out), and a filter matching no test would
/// run nothing.
fn child_test_name() -> String {
    match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::remote_consumer_child"),
        None => "remote_consumer_child".to_owned(),
    }
}

/// The child side of `killed_consumer_queues_move_to_the_survivor`, which starts it with
/// `--ignored --exact` (ignored in a normal run, and an error without
/// `SKIFF_REMOTE_CHILD_NAMESRV`, so it cannot pass for nothing). Consumes slowly (one message at a time, 20 ms
/// each), printing `MSG <queue id> <offset> <body>` per message, until killed.
#[test]
#[ignore = "the child process of killed_consumer_queues_move_to_the_survivor, which starts it"]
fn remote_consumer_child() -> anyhow::Result<()> {
    let addr = std::env::var(CHILD_ENV)
        .map_err(|_| anyhow::anyhow!("{CHILD_ENV} is unset: run only as the kill test's child"))?;
    actix_rt::System::new().block_on(async move {
        let listener = Listener::concurrent(|batch| {
            let mut text = String::new();
            for message in &batch {
                if message.queue.topic == TOPIC {
                    text.push_str(&format!(
                        "MSG {} {} {}\n",
                        message.queue.queue_id,
                        message.queue_offset(),
                        String::from_utf8_lossy(message.body())
                    ));
                }
            }
            let written = {
                let mut out = std::io::stdout().lock();
                out.write_all(text.as_bytes()).and_then(|()| out.flush())
            };
            async move {
                if written.is_err() {
                    return ConsumeStatus::ReconsumeLater;
                }
                // Simulated work, so the child is mid-stream when it is killed.
                tokio::time::sleep(Duration::from_millis(20)).await;
                ConsumeStatus::SUCCESS
            }
        });
        let _consumer = builder(KILL_GROUP, listener)
            .configure(|c| c.max_concurrency = 1)
            .start(remote(&addr)?)?;
        std::future::pending::<anyhow::Result<()>>().await
    })
}

struct ChildConsumer {
    child: Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl ChildConsumer {
    fn spawn(addr: &str) -> anyhow::Result<ChildConsumer> {
        let mut child = Command::new(std::env::current_exe()?)
            .args([
                child_test_name().as_str(),
                "--ignored",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, addr)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("child stdout is piped"))?;
        let (sender, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    // libtest may print "test remote_consumer_child ... " before the first line.
                    Ok(line) => {
                        if let Some(at) = line.find("MSG ") {
                            if sender.send(line[at..].to_owned()).is_err() {
                                return;
                            }
                        }
                    }
                    Err(_) => return,
                }
            }
        });
        Ok(ChildConsumer { child, lines })
    }

    /// Collects `n` more consumed bodies (bounded).
    async fn read(&mut self, n: usize, into: &mut BTreeSet<String>) -> anyhow::Result<()> {
        for _ in 0..n {
            let line = tokio::time::timeout(Duration::from_secs(30), self.lines.recv())
                .await
                .map_err(|_| anyhow::anyhow!("the child consumer stopped printing"))?
                .ok_or_else(|| anyhow::anyhow!("the child consumer exited"))?;
            into.insert(line.splitn(4, ' ').nth(3).unwrap_or_default().to_owned());
        }
        Ok(())
    }

    /// SIGKILL; then everything it printed before dying.
    async fn kill(mut self, into: &mut BTreeSet<String>) -> anyhow::Result<()> {
        self.child.kill()?;
        let status = self.child.wait()?;
        anyhow::ensure!(!status.success(), "the child was killed, not finished");
        while let Some(line) = self.lines.recv().await {
            into.insert(line.splitn(4, ' ').nth(3).unwrap_or_default().to_owned());
        }
        Ok(())
    }
}

impl Drop for ChildConsumer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn killed_consumer_queues_move_to_the_survivor() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("serve.log");
    let serve = Serve::start(&dir.path().join("data"), &log)?;
    let addr = serve.addr.clone();
    run(&log, || async move {
        let producer_broker = remote(&addr)?;
        produce(&producer_broker, "kill", 400).await?;
        let expected = bodies("kill", 400);

        let mut child = ChildConsumer::spawn(&addr)?;
        let mut by_child = BTreeSet::new();
        child.read(10, &mut by_child).await?;

        let got: Received = Received::default();
        let survivor = builder(KILL_GROUP, recording_listener(&got)).start(remote(&addr)?)?;
        let survivor_ref = &survivor;
        wait_until(
            "the survivor owns half of the queues",
            Duration::from_secs(30),
            || async move { Ok(topic_queues(survivor_ref).await?.len() == 2) },
        )
        .await?;
        let survivor_queues = topic_queues(&survivor).await?;
        let child_queues: BTreeSet<u32> = (0..4).filter(|q| !survivor_queues.contains(q)).collect();
        // The child is still consuming its half when it dies.
        child.read(10, &mut by_child).await?;
        child.kill(&mut by_child).await?;
        let seen_at_kill = got.borrow().len();

        wait_until(
            "the survivor owns every queue",
            Duration::from_secs(30),
            || async move { Ok(topic_queues(survivor_ref).await?.len() == 4) },
        )
        .await?;
        let (got_ref, by_child_ref, expected_ref) = (&got, &by_child, &expected);
        let all_consumed =
            wait_until(
                "every message is consumed by someone",
                Duration::from_secs(60),
                || async move {
                    Ok(distinct(got_ref).union(by_child_ref).count() == expected_ref.len())
                },
            )
            .await;
        if let Err(e) = all_consumed {
            let consumed: BTreeSet<String> = distinct(&got).union(&by_child).cloned().collect();
            let missing: Vec<&String> = expected.difference(&consumed).take(20).collect();
            let mut last: BTreeMap<u32, u64> = BTreeMap::new();
            for (q, offset, _) in got.borrow().iter() {
                let entry = last.entry(*q).or_default();
                *entry = (*entry).max(*offset);
            }
            let rows = progress(&addr, KILL_GROUP).await.unwrap_or_default();
            let snapshot = survivor.observe().await?;
            anyhow::bail!(
                "{e}: missing {} e.g. {missing:?}; child consumed {}, survivor's last offsets {last:?}; \
                 progress {rows:?}; survivor queues {:?}",
                expected.len() - consumed.len(),
                by_child.len(),
                snapshot.queues
            );
        }
        let moved = got.borrow()[seen_at_kill..]
            .iter()
            .filter(|(q, _, _)| child_queues.contains(q))
            .count();
        anyhow::ensure!(
            moved > 0,
            "the survivor consumed nothing from the killed consumer's queues {child_queues:?}"
        );
        let everything: BTreeSet<String> = distinct(&got).union(&by_child).cloned().collect();
        anyhow::ensure!(everything == expected, "unexpected bodies consumed");

        survivor.shutdown().await?;
        let rows = progress(&addr, KILL_GROUP).await?;
        let lag: u64 = rows.values().map(|(_, _, lag)| lag).sum();
        let end: u64 = rows.values().map(|(broker, _, _)| broker).sum();
        anyhow::ensure!(lag == 0 && end == 400, "after the survivor: {rows:?}");
        producer_broker.close();
        Ok(())
    })
}

// ---- (c) broker restart --------------------------------------------------------------------------------

#[test]
fn offsets_resume_after_broker_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("serve.log");
    let data = dir.path().join("data");
    let group = "remote-restart";

    let serve = Serve::start(&data, &log)?;
    let addr = serve.addr.clone();
    run(&log, || async move {
        let producer_broker = remote(&addr)?;
        produce(&producer_broker, "before", 100).await?;
        let got: Received = Received::default();
        let consumer = builder(group, recording_listener(&got)).start(remote(&addr)?)?;
        let got_ref = &got;
        wait_until(
            "the first run consumes everything",
            Duration::from_secs(30),
            || async move { Ok(distinct(got_ref).len() == 100) },
        )
        .await?;
        // Graceful: final offsets committed with acknowledged updates.
        consumer.shutdown().await?;
        let rows = progress(&addr, group).await?;
        anyhow::ensure!(
            rows.values().all(|(_, _, lag)| *lag == 0),
            "committed before the restart: {rows:?}"
        );
        producer_broker.close();
        Ok(())
    })?;
    serve.terminate()?;

    let serve = Serve::start(&data, &log)?;
    let addr = serve.addr.clone();
    run(&log, || async move {
        let rows = progress(&addr, group).await?;
        anyhow::ensure!(
            rows.len() == 4
                && rows
                    .values()
                    .all(|(b, c, lag)| *b == 25 && *c == 25 && *lag == 0),
            "offsets after the restart: {rows:?}"
        );
        let producer_broker = remote(&addr)?;
        produce(&producer_broker, "after", 20).await?;
        let got: Received = Received::default();
        let consumer = builder(group, recording_listener(&got)).start(remote(&addr)?)?;
        let expected = bodies("after", 20);
        let (got_ref, expected_ref) = (&got, &expected);
        wait_until(
            "the second run consumes the new messages",
            Duration::from_secs(30),
            || async move { Ok(distinct(got_ref).is_superset(expected_ref)) },
        )
        .await?;
        consumer.shutdown().await?;
        let received = distinct(&got);
        anyhow::ensure!(
            received == expected,
            "re-delivered after the restart: {:?}",
            received.difference(&expected).collect::<Vec<_>>()
        );
        anyhow::ensure!(got.borrow().len() == 20, "duplicates: {:?}", got.borrow());
        producer_broker.close();
        Ok(())
    })?;
    serve.terminate()
}

/// A consumer keeps running while the broker restarts on the same address: its client
/// reconnects and registers again at once (its periodic heartbeat is set to 10 minutes), so it
/// gets the messages sent after the restart and a consumer joining afterwards splits the queues
/// with it.
#[test]
fn running_consumer_survives_broker_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("serve.log");
    let data = dir.path().join("data");
    let serve = Serve::start(&data, &log)?;
    let addr = serve.addr.clone();
    let log_path = log.clone();
    run(&log, || async move {
        let group = "remote-survive";
        let producer_broker = remote(&addr)?;
        produce(&producer_broker, "first", 40).await?;
        let got: Received = Received::default();
        let c = builder(group, recording_listener(&got))
            .configure(|c| c.heartbeat_interval = Duration::from_secs(600))
            .start(remote(&addr)?)?;
        let got_ref = &got;
        wait_until(
            "the first messages are consumed",
            Duration::from_secs(30),
            || async move { Ok(distinct(got_ref).len() == 40) },
        )
        .await?;

        let restart_addr = addr.clone();
        let serve = tokio::task::spawn_blocking(move || -> anyhow::Result<Serve> {
            serve.terminate()?;
            Serve::start_on(&data, &log_path, &restart_addr)
        })
        .await??;

        produce(&producer_broker, "second", 40).await?;
        let mut expected = bodies("first", 40);
        expected.extend(bodies("second", 40));
        let expected_ref = &expected;
        wait_until(
            "the messages sent after the restart are consumed",
            Duration::from_secs(60),
            || async move { Ok(distinct(got_ref).is_superset(expected_ref)) },
        )
        .await?;

        let got_d: Received = Received::default();
        let d = builder(group, recording_listener(&got_d)).start(remote(&addr)?)?;
        let (c_ref, d_ref) = (&c, &d);
        wait_until(
            "the restarted broker splits the queues 2/2",
            Duration::from_secs(30),
            || async move {
                let (qc, qd) = (topic_queues(c_ref).await?, topic_queues(d_ref).await?);
                Ok(qc.len() == 2 && qd.len() == 2 && qc.is_disjoint(&qd))
            },
        )
        .await?;
        c.shutdown().await?;
        d.shutdown().await?;
        producer_broker.close();
        serve.terminate()
    })
}

// ---- orderly, broadcasting, retry ----------------------------------------------------------------------

/// Orderly consumption over TCP: queues locked on the broker (LOCK_BATCH_MQ), each order's
/// messages (one queue per order) arrive in the order they were sent.
#[test]
fn orderly_consumer_keeps_each_order_in_sequence() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("serve.log");
    let serve = Serve::start(&dir.path().join("data"), &log)?;
    let addr = serve.addr.clone();
    run(&log, || async move {
        let broker = remote(&addr)?;
        let producer = Producer::new("remote-orderly-producer", broker.clone());
        let queues = producer.write_queues(TOPIC).await?;
        anyhow::ensure!(queues.len() == 4, "write queues {queues:?}");
        for step in 0..10 {
            for (order, queue) in queues.iter().enumerate() {
                let message = OutgoingMessage::new(TOPIC, format!("order-{order}-{step}"));
                producer.send_to_queue(queue, vec![message]).await?;
            }
        }
        let got: Received = Received::default();
        let sink = got.clone();
        let listener = Listener::orderly(move |batch| {
            for message in &batch {
                sink.borrow_mut().push((
                    message.queue.queue_id,
                    message.queue_offset(),
                    String::from_utf8_lossy(message.body()).into_owned(),
                ));
            }
            async { OrderlyStatus::Success }
        });
        let consumer = builder("remote-orderly", listener).start(remote(&addr)?)?;
        let got_ref = &got;
        wait_until(
            "every order is consumed",
            Duration::from_secs(30),
            || async move { Ok(distinct(got_ref).len() == 40) },
        )
        .await?;
        consumer.shutdown().await?;
        for order in 0..4u32 {
            let steps: Vec<String> = got
                .borrow()
                .iter()
                .filter(|(q, _, _)| *q == order)
                .map(|(_, _, body)| body.clone())
                .collect();
            let expected: Vec<String> = (0..10).map(|s| format!("order-{order}-{s}")).collect();
            anyhow::ensure!(steps == expected, "order {order} arrived as {steps:?}");
        }
        broker.close();
        Ok(())
    })
}

/// Broadcasting over TCP: every instance gets every message; offsets stay local.
#[test]
fn broadcasting_consumers_each_get_everything() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("serve.log");
    let serve = Serve::start(&dir.path().join("data"), &log)?;
    let addr = serve.addr.clone();
    let offsets = dir.path().to_path_buf();
    run(&log, || async move {
        let group = "remote-broadcast";
        let broker = remote(&addr)?;
        produce(&broker, "bcast", 20).await?;
        let mut consumers = Vec::new();
        let mut received = Vec::new();
        for instance in 0..2 {
            let got: Received = Received::default();
            let local = offsets.join(format!("offsets-{instance}"));
            let consumer = builder(group, recording_listener(&got))
                .message_model(MessageModel::Broadcasting)
                .configure(move |c| c.local_offset_dir = Some(local))
                .start(remote(&addr)?)?;
            consumers.push(consumer);
            received.push(got);
        }
        let received_ref = &received;
        wait_until(
            "both instances get every message",
            Duration::from_secs(30),
            || async move { Ok(received_ref.iter().all(|got| distinct(got).len() == 20)) },
        )
        .await?;
        for consumer in consumers {
            consumer.shutdown().await?;
        }
        // Nothing was committed on the broker for a broadcasting group.
        let rows = progress(&addr, group).await?;
        anyhow::ensure!(
            rows.values()
                .all(|(_, consumer_offset, _)| *consumer_offset == 0),
            "broker-side offsets of a broadcasting group: {rows:?}"
        );
        broker.close();
        Ok(())
    })
}

/// A failed message is sent back over TCP (CONSUMER_SEND_MSG_BACK) and comes again from the
/// group's retry topic (first retry delay 10 s).
#[test]
fn failed_message_comes_back_from_the_retry_topic() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("serve.log");
    let serve = Serve::start(&dir.path().join("data"), &log)?;
    let addr = serve.addr.clone();
    run(&log, || async move {
        let broker = remote(&addr)?;
        produce(&broker, "retry", 4).await?;
        // (topic, reconsume times, body) of every delivery.
        let deliveries: Rc<RefCell<Vec<(String, i32, String)>>> = Rc::default();
        let sink = deliveries.clone();
        let listener = Listener::concurrent(move |batch| {
            let mut status = ConsumeStatus::SUCCESS;
            for message in &batch {
                let body = String::from_utf8_lossy(message.body()).into_owned();
                if body == "retry-0" && message.reconsume_times() == 0 {
                    status = ConsumeStatus::ReconsumeLater;
                }
                sink.borrow_mut().push((
                    message.queue.topic.clone(),
                    message.reconsume_times(),
                    body,
                ));
            }
            async move { status }
        });
        let consumer = builder("remote-retry", listener).start(remote(&addr)?)?;
        let deliveries_ref = &deliveries;
        wait_until(
            "the failed message comes back",
            Duration::from_secs(40),
            || async move {
                Ok(deliveries_ref.borrow().iter().any(|(topic, times, body)| {
                    body == "retry-0" && *times == 1 && *topic == retry_topic("remote-retry")
                }))
            },
        )
        .await?;
        consumer.shutdown().await?;
        let others = deliveries
            .borrow()
            .iter()
            .filter(|(_, _, body)| body != "retry-0")
            .count();
        anyhow::ensure!(others == 3, "deliveries {:?}", deliveries.borrow());
        broker.close();
        Ok(())
    })
}

// ---- admin -------------------------------------------------------------------------------------------------

#[test]
fn admin_progress_topics_and_reset_offset() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("serve.log");
    let serve = Serve::start(&dir.path().join("data"), &log)?;
    let addr = serve.addr.clone();
    run(&log, || async move {
        let group = "remote-admin";
        let producer_broker = remote(&addr)?;
        produce(&producer_broker, "admin", 20).await?;

        let topics = skiff::admin::run(AdminArgs {
            namesrv: Some(addr.clone()),
            json: false,
            access_key: None,
            secret_key: None,
            command: AdminCommand::Topics,
        })
        .await?;
        let row = topics
            .lines()
            .find(|l| l.split_whitespace().next() == Some(TOPIC))
            .ok_or_else(|| anyhow::anyhow!("{TOPIC} not listed:\n{topics}"))?;
        let cells: Vec<&str> = row.split_whitespace().collect();
        // Auto-created: no message type.
        anyhow::ensure!(cells[2..] == ["4", "4", "RW-", "-"], "topic row {row:?}");

        let got: Received = Received::default();
        let consumer = builder(group, recording_listener(&got)).start(remote(&addr)?)?;
        let got_ref = &got;
        wait_until(
            "everything is consumed",
            Duration::from_secs(30),
            || async move { Ok(distinct(got_ref).len() == 20) },
        )
        .await?;
        consumer.shutdown().await?;
        let rows = progress(&addr, group).await?;
        anyhow::ensure!(
            rows.len() == 4
                && rows
                    .values()
                    .all(|(b, c, lag)| *b == 5 && *c == 5 && *lag == 0),
            "progress after consuming: {rows:?}"
        );

        // Back to the beginning: the next pulls answer the reset and everything comes again.
        let reset = skiff::admin::run(AdminArgs {
            namesrv: Some(addr.clone()),
            json: false,
            access_key: None,
            secret_key: None,
            command: AdminCommand::ResetOffset {
                group: group.to_owned(),
                topic: TOPIC.to_owned(),
                to_time: "1970-01-01#00:00:00:000".to_owned(),
            },
        })
        .await?;
        let reset_rows = reset
            .lines()
            .filter(|l| l.split_whitespace().next() == Some(TOPIC))
            .count();
        anyhow::ensure!(reset_rows == 4, "reset answer:\n{reset}");
        let again: Received = Received::default();
        let consumer = builder(group, recording_listener(&again)).start(remote(&addr)?)?;
        let again_ref = &again;
        wait_until(
            "everything is consumed again",
            Duration::from_secs(30),
            || async move { Ok(distinct(again_ref).len() == 20) },
        )
        .await?;
        consumer.shutdown().await?;
        producer_broker.close();
        Ok(())
    })
}

async fn admin_json(addr: &str, command: AdminCommand) -> anyhow::Result<serde_json::Value> {
    let text = skiff::admin::run(AdminArgs {
        namesrv: Some(addr.to_owned()),
        json: true,
        access_key: None,
        secret_key: None,
        command,
    })
    .await?;
    Ok(serde_json::from_str(&text)?)
}

#[test]
fn admin_topic_status_groups_connections_and_cluster() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("serve.log");
    let serve = Serve::start(&dir.path().join("data"), &log)?;
    let addr = serve.addr.clone();
    run(&log, || async move {
        let created = admin_json(
            &addr,
            AdminCommand::Topic(TopicCommand::Create {
                topic: "admin-created".to_owned(),
                queues: 3,
                message_type: Some(TopicMessageType::Fifo),
            }),
        )
        .await?;
        anyhow::ensure!(
            created["queues"] == 3 && created["message_type"] == "FIFO",
            "create answer {created}"
        );
        let topics = skiff::admin::run(AdminArgs {
            namesrv: Some(addr.clone()),
            json: false,
            access_key: None,
            secret_key: None,
            command: AdminCommand::Topics,
        })
        .await?;
        let row = topics
            .lines()
            .find(|l| l.split_whitespace().next() == Some("admin-created"))
            .ok_or_else(|| anyhow::anyhow!("admin-created not listed:\n{topics}"))?;
        anyhow::ensure!(
            row.split_whitespace().skip(2).collect::<Vec<_>>() == ["3", "3", "RW-", "FIFO"],
            "topic row {row:?}"
        );
        let empty = admin_json(
            &addr,
            AdminCommand::TopicStatus {
                topic: "admin-created".to_owned(),
            },
        )
        .await?;
        let queues = empty.as_array().map_or(0, Vec::len);
        anyhow::ensure!(queues == 3, "status of the new topic {empty}");

        let producer_broker = remote(&addr)?;
        produce(&producer_broker, "status", 20).await?;
        let status = admin_json(
            &addr,
            AdminCommand::TopicStatus {
                topic: TOPIC.to_owned(),
            },
        )
        .await?;
        let rows = status.as_array().cloned().unwrap_or_default();
        let max_total: i64 = rows.iter().filter_map(|r| r["max_offset"].as_i64()).sum();
        anyhow::ensure!(
            rows.len() == 4
                && max_total == 20
                && rows
                    .iter()
                    .all(|r| r["min_offset"] == 0 && r["queue_id"].is_number()),
            "topic-status {status}"
        );

        let group = "remote-admin-connections";
        let got: Received = Received::default();
        let consumer = builder(group, recording_listener(&got)).start(remote(&addr)?)?;
        let got_ref = &got;
        wait_until(
            "everything is consumed",
            Duration::from_secs(30),
            || async move { Ok(distinct(got_ref).len() == 20) },
        )
        .await?;
        let connections = admin_json(
            &addr,
            AdminCommand::Connections {
                group: group.to_owned(),
            },
        )
        .await?;
        let clients = connections["connections"].as_array().map_or(0, Vec::len);
        anyhow::ensure!(
            clients == 1
                && connections["subscriptions"][TOPIC].is_string()
                && connections["message_model"] == "CLUSTERING",
            "connections {connections}"
        );
        // GET_CONSUMER_RUNNING_INFO, as `mqadmin consumerStatus` sends it: skiff serve forwards
        // it to the consumer on its own connection, and skiff's client answers it.
        let client_id = connections["connections"][0]["client_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let admin_client = RemotingClient::new(ClientConfig::default());
        let request = RemotingCommand::new_request(codes::request::GET_CONSUMER_RUNNING_INFO)
            .with_ext("consumerGroup", group)
            .with_ext("clientId", client_id.clone())
            .with_ext("jstackEnable", "false");
        let answer = admin_client
            .invoke(&addr, request, Duration::from_secs(15))
            .await?;
        let info: serde_json::Value = serde_json::from_slice(&answer.body).unwrap_or_default();
        anyhow::ensure!(
            answer.code == codes::response::SUCCESS
                && info["subscriptionSet"]
                    .as_array()
                    .is_some_and(|subs| subs.iter().any(|s| s["topic"] == TOPIC))
                && info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY",
            "running info of {client_id}: code {} {:?} {info}",
            answer.code,
            answer.remark
        );
        let request = RemotingCommand::new_request(codes::request::GET_CONSUMER_RUNNING_INFO)
            .with_ext("consumerGroup", group)
            .with_ext("clientId", "nobody@1");
        let answer = admin_client
            .invoke(&addr, request, Duration::from_secs(15))
            .await?;
        anyhow::ensure!(
            answer.code == codes::response::SYSTEM_ERROR
                && answer
                    .remark
                    .as_deref()
                    .is_some_and(|r| r.contains("not online")),
            "running info of an unknown client: {} {:?}",
            answer.code,
            answer.remark
        );
        admin_client.shutdown();
        let groups = admin_json(&addr, AdminCommand::Groups).await?;
        let listed = groups.as_array().is_some_and(|g| {
            g.iter()
                .any(|g| g["group"] == group && g["consume_message_orderly"] == false)
        });
        anyhow::ensure!(listed, "groups {groups}");
        consumer.shutdown().await?;

        let cluster = admin_json(&addr, AdminCommand::Cluster).await?;
        anyhow::ensure!(
            cluster[0]["addr"] == addr.as_str()
                && cluster[0]["messages_put"].as_i64().is_some_and(|n| n > 0),
            "cluster {cluster}"
        );
        let deleted = admin_json(
            &addr,
            AdminCommand::Topic(TopicCommand::Delete {
                topic: "admin-created".to_owned(),
            }),
        )
        .await?;
        anyhow::ensure!(
            deleted["topic"] == "admin-created",
            "delete answer {deleted}"
        );
        let after = skiff::admin::run(AdminArgs {
            namesrv: Some(addr.clone()),
            json: false,
            access_key: None,
            secret_key: None,
            command: AdminCommand::Topics,
        })
        .await?;
        anyhow::ensure!(
            !after.lines().any(|l| l.starts_with("admin-created ")),
            "deleted topic still listed:\n{after}"
        );
        producer_broker.close();
        Ok(())
    })
}
