//! Helpers shared by the integration tests: a paused-time actix system, a node in a temporary
//! directory, recording listeners and a way to advance time until a condition holds; for the
//! tests over the wire, a `skiff serve` child process and raw requests.
#![allow(dead_code)]

pub mod grpc;

use skiff::actors::broker_api::{BrokerApi, BrokerError, RemoteError};
use skiff::actors::consumer::push_consumer::PushConsumer;
use skiff::actors::consumer::{ConsumeStatus, Listener, ReceivedMessage};
use skiff::actors::producer::OutgoingMessage;
use skiff::remoting::codes::{request as rc, response as code};
use skiff::remoting::frame::RemotingCommand;
use skiff::remoting::RemotingClient;
use skiff::{Node, NodeConfig};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::time::Duration;

/// `run_paused` runs a test on an actix system whose tokio clock starts paused: timers fire
/// only when the test advances time (or when every task is idle), so no test waits on the wall
/// clock. The rest is `skiff::testsuite`'s; new tests open their node as a `TestNode`.
pub use skiff::testsuite::{request, run_paused, test_config as node_config, TestNode};

/// Polls `condition` every `interval` of real time until it holds; fails after `limit`. For
/// tests over real TCP, where another process decides when the condition comes true.
pub async fn poll_until<F, Fut>(
    what: &str,
    limit: Duration,
    interval: Duration,
    mut condition: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if condition().await? {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{what}: not reached within {limit:?}"
        );
        tokio::time::sleep(interval).await;
    }
}

/// Advances paused time in `step`s until `condition` holds; fails after `limit` of test time.
pub async fn advance_until(
    what: &str,
    limit: Duration,
    mut condition: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let step = Duration::from_millis(10);
    let mut waited = Duration::ZERO;
    while !condition() {
        if waited >= limit {
            anyhow::bail!("{what}: not reached within {limit:?} of test time");
        }
        tokio::time::sleep(step).await;
        waited += step;
    }
    Ok(())
}

/// Advances paused time by `duration` (timers due meanwhile fire). Unlike
/// `skiff_actors::testsuite::advance`, which moves the clock in 100 ms steps and yields between
/// them, this sleeps: the runtime moves the clock only when no task is ready. The two are not
/// interchangeable; the node tests were written against this one.
pub async fn advance(duration: Duration) {
    tokio::time::sleep(duration).await;
}

pub fn open_node(dir: &std::path::Path) -> anyhow::Result<Node> {
    Ok(Node::open(node_config(dir))?)
}

/// What a listener saw, by body, in arrival order.
#[derive(Default, Debug)]
pub struct Seen {
    pub bodies: Vec<String>,
    pub messages: Vec<ReceivedMessage>,
    pub counts: BTreeMap<String, usize>,
}

impl Seen {
    pub fn distinct(&self) -> usize {
        self.counts.len()
    }

    pub fn total(&self) -> usize {
        self.bodies.len()
    }

    pub fn duplicates(&self) -> usize {
        self.total() - self.distinct()
    }
}

pub type SeenLog = Rc<RefCell<Seen>>;

pub fn record(seen: &SeenLog, batch: &[std::sync::Arc<ReceivedMessage>]) {
    let mut seen = seen.borrow_mut();
    for message in batch {
        let body = String::from_utf8_lossy(message.body()).into_owned();
        *seen.counts.entry(body.clone()).or_default() += 1;
        seen.bodies.push(body);
        seen.messages.push((**message).clone());
    }
}

/// A concurrent listener that records every message and succeeds.
pub fn recording_listener(seen: &SeenLog) -> Listener {
    let seen = seen.clone();
    Listener::concurrent(move |batch| {
        record(&seen, &batch);
        async { ConsumeStatus::SUCCESS }
    })
}

/// Sends `count` messages `prefix-0..` to `topic` in batches of `batch`.
pub async fn produce(
    node: &Node,
    topic: &str,
    prefix: &str,
    count: usize,
    batch: usize,
) -> anyhow::Result<()> {
    let producer = node.producer("test-producer");
    // Message i goes to queue i % queues: tests name where a message landed.
    producer.start_round_robin_at(0);
    let mut sent = 0;
    while sent < count {
        let end = (sent + batch).min(count);
        let messages = (sent..end)
            .map(|i| OutgoingMessage::new(topic, format!("{prefix}-{i}")))
            .collect();
        producer.send_batch(messages).await?;
        sent = end;
    }
    Ok(())
}

pub async fn assigned_queues(consumer: &PushConsumer) -> anyhow::Result<usize> {
    Ok(consumer.observe().await?.coordinator.assigned.len())
}

/// Switches for [`FaultyBroker`]: the counters count down how many calls of that kind fail;
/// `send_back_rate` fails each send-back with a seeded probability.
#[derive(Default)]
pub struct Faults {
    pub send_back: std::cell::Cell<u32>,
    pub query_offset: std::cell::Cell<u32>,
    pub update_offset: std::cell::Cell<u32>,
    pub send_back_rate: Option<(RefCell<rand::rngs::StdRng>, f64)>,
    /// Send-backs failed by injection, either way.
    pub send_backs_failed: std::cell::Cell<u64>,
}

impl Faults {
    /// Fails every send-back with probability `rate`, from a seeded generator.
    pub fn flaky_send_back(seed: u64, rate: f64) -> Self {
        use rand::SeedableRng;
        Faults {
            send_back_rate: Some((RefCell::new(rand::rngs::StdRng::seed_from_u64(seed)), rate)),
            ..Faults::default()
        }
    }

    fn send_back_fails(&self) -> bool {
        use rand::Rng;
        let fails = take_fault(&self.send_back)
            || self
                .send_back_rate
                .as_ref()
                .is_some_and(|(rng, rate)| rng.borrow_mut().gen_bool(*rate));
        if fails {
            self.send_backs_failed.set(self.send_backs_failed.get() + 1);
        }
        fails
    }
}

/// A broker decorator that fails chosen calls, for the failure paths of the offset rules.
pub struct FaultyBroker {
    pub inner: Rc<dyn BrokerApi>,
    pub faults: Rc<Faults>,
}

fn injected(what: &str) -> BrokerError {
    RemoteError::Transport {
        addr: "test".to_string(),
        source: format!("injected {what} failure").into(),
    }
    .into()
}

fn take_fault(counter: &std::cell::Cell<u32>) -> bool {
    let left = counter.get();
    if left > 0 {
        counter.set(left - 1);
        true
    } else {
        false
    }
}

impl FaultyBroker {
    /// The injected failure of `call`, if this one fails; every other call goes to `inner`.
    fn intercept(&self, call: &str) -> Option<BrokerError> {
        match call {
            "query_offset" if take_fault(&self.faults.query_offset) => {
                Some(injected("query offset"))
            }
            "update_offset" if take_fault(&self.faults.update_offset) => {
                Some(injected("update offset"))
            }
            "send_back" if self.faults.send_back_fails() => Some(injected("send back")),
            _ => None,
        }
    }
}

skiff::actors::forward_broker_api!(FaultyBroker, delegate to inner, intercept by intercept);

/// The committed (consumer-side cached) offset of every queue of `topic`, by queue id.
pub async fn consumer_offsets(
    consumer: &PushConsumer,
    topic: &str,
) -> anyhow::Result<BTreeMap<u32, u64>> {
    Ok(consumer
        .observe()
        .await?
        .offsets
        .offsets
        .into_iter()
        .filter(|(queue, _)| queue.topic == topic)
        .map(|(queue, offset)| (queue.queue_id, offset))
        .collect())
}

/// The broker's stored offsets of `group` on `topic`, by queue id.
pub async fn broker_offsets(
    node: &Node,
    group: &str,
    topic: &str,
) -> anyhow::Result<BTreeMap<u32, Option<u64>>> {
    Ok(node
        .progress(group)
        .await?
        .into_iter()
        .filter(|row| row.topic == topic)
        .map(|row| (row.queue_id, row.consumer_offset))
        .collect())
}

/// Fails unless `cmd` answered `expected`, naming the code and remark it had.
pub fn expect_code(cmd: &RemotingCommand, expected: i32) -> anyhow::Result<()> {
    anyhow::ensure!(
        cmd.code == expected,
        "expected code {expected}, got {} (remark {:?})",
        cmd.code,
        cmd.remark
    );
    Ok(())
}

/// A port free on 127.0.0.1 when asked (for a child process to bind).
pub fn free_port() -> anyhow::Result<u16> {
    free_port_on("127.0.0.1")
}

/// A port free on `host` when asked (`0.0.0.0` for a child that binds every address).
pub fn free_port_on(host: &str) -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind((host, 0))?.local_addr()?.port())
}

/// `GET path` over a bare HTTP/1.1 connection to `addr` (no HTTP client in the
/// dev-dependencies); the whole response, status line first.
pub async fn http_get(addr: &str, path: &str) -> anyhow::Result<String> {
    http_request(addr, "GET", path, &[], None).await
}

/// Any request over a bare HTTP/1.1 connection, with extra header lines and a JSON body.
pub async fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    json_body: Option<&str>,
) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: skiff\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let body = json_body.unwrap_or("");
    if json_body.is_some() {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response)
}

/// A child `skiff serve`, SIGKILLed on drop if still running.
pub struct ServeChild(pub Child);

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `skiff serve` on `listen` with its data in `data_dir/data`, its log appended to
/// `data_dir/serve.log` (kept across restarts) and `env` added to its environment.
pub fn spawn_serve(
    data_dir: &Path,
    listen: &str,
    env: &[(&str, String)],
) -> anyhow::Result<ServeChild> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(data_dir.join("serve.log"))?;
    let child = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args(["serve", "--listen", listen, "--data-dir"])
        .arg(data_dir.join("data"))
        .current_dir(data_dir)
        .env("RUST_LOG", "info")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| anyhow::anyhow!(e).context("spawning skiff serve"))?;
    Ok(ServeChild(child))
}

/// Waits until the `skiff serve` at `addr` answers a route query for `topic` (its route, or
/// TOPIC_NOT_EXIST for a topic nobody created: a route query creates nothing).
pub async fn wait_serving(client: &RemotingClient, addr: &str, topic: &str) -> anyhow::Result<()> {
    poll_until(
        "skiff serve answers routes",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async {
            let route = request(rc::GET_ROUTEINFO_BY_TOPIC, &[("topic", topic)]);
            Ok(client
                .invoke(addr, route, Duration::from_secs(2))
                .await
                .is_ok_and(|r| r.code == code::SUCCESS || r.code == code::TOPIC_NOT_EXIST))
        },
    )
    .await
}

/// Failure bound for one request to a [`Harness`] (a long poll included).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// A `skiff serve` in this process on a free loopback port, its data in a temporary directory.
pub struct Harness {
    pub serving: skiff::serve::Serving,
    pub addr: String,
    dir: tempfile::TempDir,
}

impl Harness {
    pub async fn start() -> anyhow::Result<Harness> {
        Harness::start_with(|_| {}).await
    }

    pub async fn start_with(configure: impl FnOnce(&mut NodeConfig)) -> anyhow::Result<Harness> {
        Harness::start_in(tempfile::tempdir()?, configure).await
    }

    /// Shuts the node down and starts it again (default config, a new port) on the same data
    /// directory.
    pub async fn restart(self) -> anyhow::Result<Harness> {
        self.serving.shutdown().await?;
        Harness::start_in(self.dir, |_| {}).await
    }

    async fn start_in(
        dir: tempfile::TempDir,
        configure: impl FnOnce(&mut NodeConfig),
    ) -> anyhow::Result<Harness> {
        let mut config = NodeConfig::in_dir(dir.path());
        config.listen = "127.0.0.1:0".parse()?;
        // Whatever else fills the test machine's disk, sends are not refused for it.
        config.disk_max_used_ratio = 0.999;
        config.disk_full_ratio = 1.0;
        configure(&mut config);
        let serving = skiff::serve::start(config).await?;
        let addr = serving.local_addr().to_string();
        Ok(Harness { serving, addr, dir })
    }

    pub async fn call(
        &self,
        client: &RemotingClient,
        request: RemotingCommand,
    ) -> anyhow::Result<RemotingCommand> {
        Ok(client.invoke(&self.addr, request, CALL_TIMEOUT).await?)
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        self.serving.shutdown().await?;
        Ok(())
    }
}
