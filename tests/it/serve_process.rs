//! The `skiff serve` binary as a child process: starts on a free port, answers a route
//! request, refuses a taken port and a locked data directory with a clear error, and on
//! SIGTERM exits 0 with its messages and consumer offsets on disk.

use crate::common;

use common::request;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, ensure, Context};
use skiff::actors::broker_api::QueryOffsetRequest;
use skiff::actors::logic::queue::MessageQueue;
use skiff::remoting::body::{JsonBody, TopicRouteData};
use skiff::remoting::codes::{request as rc, response as code, AUTO_CREATE_TOPIC_KEY};
use skiff::remoting::{ClientConfig, RemotingClient};
use skiff::{Node, NodeConfig};

const STARTUP: Duration = Duration::from_secs(30);

/// A child `skiff serve`; killed on drop if still running (a failing test leaves no process).
struct Server {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    ready: mpsc::Receiver<()>,
    /// Disconnects when the log reader has seen the end of stderr: only then is the log whole.
    log_complete: mpsc::Receiver<()>,
}

impl Server {
    fn spawn(data_dir: &Path, listen: &str) -> anyhow::Result<Server> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_skiff"))
            .args([
                "serve",
                "--listen",
                listen,
                "--flush",
                "async",
                "--data-dir",
            ])
            .arg(data_dir)
            // No stray skiff.toml from the working directory.
            .current_dir(data_dir)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawning skiff serve")?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| anyhow!("no stderr pipe"))?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready) = mpsc::channel();
        let (log_complete_tx, log_complete) = mpsc::channel::<()>();
        let lines = log.clone();
        std::thread::spawn(move || {
            let _log_complete_tx = log_complete_tx;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("skiff ready") {
                    let _ = ready_tx.send(());
                }
                lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            }
        });
        Ok(Server {
            child,
            log,
            ready,
            log_complete,
        })
    }

    fn log(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .join("\n")
    }

    fn wait_ready(&self) -> anyhow::Result<()> {
        self.ready
            .recv_timeout(STARTUP)
            .with_context(|| format!("skiff serve did not become ready:\n{}", self.log()))
    }

    /// Waits for the exit and for the last line of its log, at most `limit` each.
    fn wait_exit(&mut self, limit: Duration) -> anyhow::Result<ExitStatus> {
        let pid = self.child.id();
        let (tx, rx) = mpsc::channel();
        // `Child::wait` blocks; a helper thread turns it into a bounded wait.
        let waiter = std::thread::spawn(move || {
            let status = wait_pid(pid);
            let _ = tx.send(status);
        });
        let status = rx
            .recv_timeout(limit)
            .with_context(|| format!("skiff serve did not exit:\n{}", self.log()))??;
        let _ = waiter.join();
        // The process can be reaped before the reader thread has taken its last lines from
        // the pipe; a check of the log right after the exit would race that reader.
        match self.log_complete.recv_timeout(limit) {
            Err(mpsc::RecvTimeoutError::Disconnected) => Ok(status),
            _ => Err(anyhow!(
                "stderr of skiff serve stayed open after its exit:\n{}",
                self.log()
            )),
        }
    }
}

/// `waitpid` on the child (std's `Child::wait` needs `&mut Child`, which cannot move to the
/// helper thread while the guard keeps it).
fn wait_pid(pid: u32) -> anyhow::Result<ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    let mut status: libc::c_int = 0;
    let pid = libc::pid_t::try_from(pid)?;
    // SAFETY: waitpid on our own child with a valid out pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    ensure!(
        r == pid,
        "waitpid failed: {}",
        std::io::Error::last_os_error()
    );
    Ok(ExitStatus::from_raw(status))
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn terminate(server: &Server) -> anyhow::Result<()> {
    let pid = libc::pid_t::try_from(server.child.id())?;
    // SAFETY: sending a signal to our own child process.
    let r = unsafe { libc::kill(pid, libc::SIGTERM) };
    ensure!(r == 0, "kill failed: {}", std::io::Error::last_os_error());
    Ok(())
}

/// Over the wire: a route, one message, an acknowledged consumer offset.
async fn exercise(addr: &str) -> anyhow::Result<()> {
    let client = RemotingClient::new(ClientConfig::default());
    let timeout = Duration::from_secs(10);
    let resp = client
        .invoke(
            addr,
            request(
                rc::GET_ROUTEINFO_BY_TOPIC,
                &[("topic", AUTO_CREATE_TOPIC_KEY)],
            ),
            timeout,
        )
        .await?;
    ensure!(resp.code == code::SUCCESS, "route: {resp:?}");
    let route = TopicRouteData::decode(&resp.body)?;
    ensure!(route.master_addr() == Some(addr), "{route:?}");

    let send = request(
        rc::SEND_MESSAGE_V2,
        &[
            ("a", "pg"),
            ("b", "Durable"),
            ("c", AUTO_CREATE_TOPIC_KEY),
            ("d", "4"),
            ("e", "0"),
            ("f", "0"),
            ("g", "1700000000000"),
            ("h", "0"),
        ],
    )
    .with_body(&b"kept"[..]);
    let resp = client.invoke(addr, send, timeout).await?;
    ensure!(resp.code == code::SUCCESS, "send: {resp:?}");

    let update = request(
        rc::UPDATE_CONSUMER_OFFSET,
        &[
            ("consumerGroup", "dg"),
            ("topic", "Durable"),
            ("queueId", "0"),
            ("commitOffset", "1"),
        ],
    );
    let resp = client.invoke(addr, update, timeout).await?;
    ensure!(resp.code == code::SUCCESS, "update: {resp:?}");
    client.shutdown();
    Ok(())
}

#[test]
fn serve_binary_answers_routes_refuses_conflicts_and_flushes_on_sigterm() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data)?;
    let addr = format!("127.0.0.1:{}", common::free_port()?);
    let mut server = Server::spawn(&data, &addr)?;
    server.wait_ready()?;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(exercise(&addr))?;

    // Same data directory, another port: the store lock refuses it.
    let mut locked = Server::spawn(&data, &format!("127.0.0.1:{}", common::free_port()?))?;
    let status = locked.wait_exit(STARTUP)?;
    ensure!(
        !status.success(),
        "a second node on a locked data dir must fail"
    );
    let log = locked.log();
    ensure!(log.contains("error: cannot open the node in"), "{log}");
    ensure!(log.contains("already open"), "{log}");

    // Same port, another data directory: the bind fails.
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other)?;
    let mut taken = Server::spawn(&other, &addr)?;
    let status = taken.wait_exit(STARTUP)?;
    ensure!(!status.success(), "a taken port must fail");
    let log = taken.log();
    ensure!(
        log.contains(&format!("error: cannot listen on {addr}")),
        "{log}"
    );

    terminate(&server)?;
    let status = server.wait_exit(STARTUP)?;
    ensure!(
        status.code() == Some(0),
        "exit {status:?}:\n{}",
        server.log()
    );
    ensure!(server.log().contains("skiff stopped"), "{}", server.log());

    // Reopened: the message and the committed offset are there.
    actix_rt::System::new().block_on(async {
        let node = Node::open(NodeConfig::in_dir(&data))?;
        let broker = node.broker().clone();
        ensure!(broker.reader().max_offset("Durable", 0) == 1);
        let offset = broker
            .query_offset(QueryOffsetRequest {
                group: "dg".into(),
                queue: MessageQueue::new("Durable", "", 0),
                set_zero_if_not_found: false,
            })
            .await?;
        ensure!(offset == Some(1), "offset {offset:?}");
        node.shutdown().await?;
        Ok(())
    })
}

/// `skiff serve` with `args`, `env` and `skiff.toml` (when given) in a fresh working directory:
/// it must refuse to start; its stderr.
fn refused_start(
    args: &[&str],
    env: &[(&str, &str)],
    file: Option<&str>,
) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    if let Some(text) = file {
        std::fs::write(dir.path().join("skiff.toml"), text)?;
    }
    let output = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .arg("serve")
        .args(args)
        .args(["--data-dir", "data"])
        .envs(env.iter().copied())
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .context("running skiff serve")?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    ensure!(!output.status.success(), "started: {stderr}");
    Ok(stderr)
}

#[test]
fn serve_refusals_name_the_setting_its_source_and_what_is_accepted() -> anyhow::Result<()> {
    let file = refused_start(&[], &[], Some("flush = \"sometimes\"\n"))?;
    ensure!(
        file.contains("setting flush (from file skiff.toml)") && file.contains("async, sync"),
        "{file}"
    );
    let env = refused_start(&[], &[("SKIFF_SEGMENT_SIZE", "1GB")], None)?;
    ensure!(
        env.contains("setting segment_size (from environment variable SKIFF_SEGMENT_SIZE)")
            && env.contains("GiB"),
        "{env}"
    );
    let flag = refused_start(&["--listen", "broker.example:9876"], &[], None)?;
    ensure!(
        flag.contains("--listen") && flag.contains("host name") && flag.contains("0.0.0.0:9876"),
        "{flag}"
    );
    let too_small = refused_start(&["--segment-size", "64KiB"], &[], None)?;
    ensure!(
        too_small.contains("setting segment_size (from flag --segment-size)"),
        "{too_small}"
    );
    Ok(())
}
