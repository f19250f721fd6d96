//! Starting and stopping each broker on loopback with a fresh data dir, and reading its RSS,
//! CPU time and disk use. skiff, Redis and NATS run as child processes; Apache RocketMQ runs as
//! two JVMs (name server and broker) launched through tests/conformance/apache/start.sh
//! (`--profile bench --prepare-only`) and stopped with its stop.sh; its RSS and CPU are the sum
//! of both JVMs.

use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The brokers and durability settings the benchmark knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    SkiffAsync,
    SkiffSync,
    RedisEverysec,
    RedisAlways,
    JetStream,
    /// Apache RocketMQ (name server + broker JVMs), the same-protocol peer.
    Apache,
    /// skiff-async with its key index off (`SKIFF_KEY_INDEX=false`): with `--keys`, the
    /// index's cost. Not in the default set.
    SkiffNoIndex,
    /// skiff-sync without the commit log prepared ahead (`SKIFF_SEGMENT_PREPARE_AHEAD=0`):
    /// the preparation's gain. Not in the default set.
    SkiffSyncUnprepared,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::SkiffAsync,
        Kind::RedisEverysec,
        Kind::SkiffSync,
        Kind::RedisAlways,
        Kind::JetStream,
        Kind::Apache,
        Kind::SkiffNoIndex,
        Kind::SkiffSyncUnprepared,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::SkiffAsync => "skiff-async",
            Kind::SkiffSync => "skiff-sync",
            Kind::RedisEverysec => "redis-everysec",
            Kind::RedisAlways => "redis-always",
            Kind::JetStream => "jetstream",
            Kind::Apache => "apache",
            Kind::SkiffNoIndex => "skiff-noindex",
            Kind::SkiffSyncUnprepared => "skiff-sync-unprepared",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s.trim())
    }

    /// Durability as stated in the table.
    pub fn durability(self) -> &'static str {
        match self {
            Kind::SkiffAsync => "`serve --flush async` (fsync on an interval)",
            Kind::SkiffSync => "`serve --flush sync` (group commit, acked after fsync)",
            Kind::RedisEverysec => "`appendonly yes, appendfsync everysec`",
            Kind::RedisAlways => "`appendonly yes, appendfsync always`",
            Kind::JetStream => "file stream, server defaults",
            Kind::Apache => "`flushDiskType=ASYNC_FLUSH` (default: flushed every 500 ms)",
            Kind::SkiffNoIndex => "`serve --flush async`, `SKIFF_KEY_INDEX=false`",
            Kind::SkiffSyncUnprepared => "`serve --flush sync`, `SKIFF_SEGMENT_PREPARE_AHEAD=0`",
        }
    }

    /// Speaks RocketMQ remoting (the skiff driver drives it).
    pub fn is_remoting(self) -> bool {
        self.is_skiff() || self == Kind::Apache
    }

    pub fn is_skiff(self) -> bool {
        matches!(
            self,
            Kind::SkiffAsync | Kind::SkiffSync | Kind::SkiffNoIndex | Kind::SkiffSyncUnprepared
        )
    }

    /// The peer skiff is compared with for this row (skiff rows only).
    pub fn peer_of(self) -> &'static [Kind] {
        match self {
            Kind::SkiffAsync => &[Kind::RedisEverysec, Kind::JetStream, Kind::Apache, Kind::SkiffNoIndex],
            Kind::SkiffSync => &[Kind::RedisAlways, Kind::SkiffSyncUnprepared],
            _ => &[],
        }
    }
}

/// Paths of the broker executables.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub skiff: PathBuf,
    pub redis: PathBuf,
    pub nats: PathBuf,
    /// tests/conformance/apache/start.sh (stop.sh beside it).
    pub apache_start: Option<PathBuf>,
}

/// The broker's processes.
enum Procs {
    /// One child process (skiff, Redis, NATS).
    Child(Child),
    /// Apache RocketMQ: JVMs started by start.sh's launch scripts in their own sessions (not
    /// our children), stopped by stop.sh.
    Apache {
        dir: PathBuf,
        stop_sh: PathBuf,
        pids: Vec<u32>,
        stopped: bool,
    },
}

/// A running broker.
pub struct Running {
    pub kind: Kind,
    /// Where a client connects first: the broker itself, or (Apache) the name server; for the
    /// RocketMQ brokers the route from there names the broker.
    addr: String,
    /// What `du` measures after the stop (Apache: the broker's store dir).
    pub data_dir: PathBuf,
    /// What is removed after the run (Apache: start.sh's whole dir, logs and configs too).
    pub remove_dir: PathBuf,
    pub log: PathBuf,
    /// When the (first) broker process was spawned.
    pub spawned: Instant,
    procs: Procs,
}

impl Running {
    pub fn addr(&self) -> String {
        self.addr.clone()
    }

    pub fn pids(&self) -> Vec<u32> {
        match &self.procs {
            Procs::Child(c) => vec![c.id()],
            Procs::Apache { pids, .. } => pids.clone(),
        }
    }

    /// VmHWM (peak resident set) of the broker process, in bytes; for Apache the sum of both
    /// JVMs' peaks.
    pub fn peak_rss(&self) -> Result<u64> {
        self.pids()
            .into_iter()
            .map(|p| proc_status_kib(p, "VmHWM:").map(|k| k * 1024))
            .sum()
    }

    /// VmRSS (resident set now) in bytes; for Apache the sum of both JVMs.
    pub fn rss(&self) -> Result<u64> {
        self.pids()
            .into_iter()
            .map(|p| proc_status_kib(p, "VmRSS:").map(|k| k * 1024))
            .sum()
    }

    /// CPU seconds the broker has used so far (Apache: both JVMs).
    pub fn cpu_secs(&self) -> Result<f64> {
        self.pids().into_iter().map(cpu_secs).sum()
    }

    /// Err with the log's tail when a broker process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        let gone = match &mut self.procs {
            Procs::Child(c) => c.try_wait()?.map(|s| s.to_string()),
            Procs::Apache { pids, .. } => pids
                .iter()
                .find(|&&p| !pid_alive(p))
                .map(|p| format!("pid {p} exited")),
        };
        match gone {
            None => Ok(()),
            Some(status) => bail!(
                "{} exited ({status}); log {}:\n{}",
                self.kind.name(),
                self.log.display(),
                tail(&self.log, 20)
            ),
        }
    }

    /// Stops the broker: SIGTERM, then SIGKILL after `grace` (Apache: stop.sh, which waits
    /// 15 s before SIGKILL).
    pub fn stop(mut self, grace: Duration) -> Result<()> {
        let child = match &mut self.procs {
            Procs::Child(c) => c,
            Procs::Apache {
                dir,
                stop_sh,
                pids,
                stopped,
            } => {
                *stopped = true;
                let out = Command::new(&*stop_sh)
                    .arg(&*dir)
                    .arg("--keep")
                    .stdin(Stdio::null())
                    .output()
                    .with_context(|| format!("running {}", stop_sh.display()))?;
                if !out.status.success() {
                    bail!("{} {}: {}", stop_sh.display(), dir.display(), String::from_utf8_lossy(&out.stderr));
                }
                // stop.sh returns right after its SIGKILL (when SIGTERM took over 15 s): give
                // the kernel time to tear down the JVMs and their mappings.
                let deadline = Instant::now() + grace;
                while let Some(p) = pids.iter().find(|&&p| pid_alive(p)) {
                    if Instant::now() >= deadline {
                        bail!("apache: pid {p} still running {grace:?} after stop.sh");
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                return Ok(());
            }
        };
        let pid = child.id() as libc::pid_t;
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        loop {
            if child.try_wait()?.is_some() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "{} did not stop within {:?} after SIGTERM; killed (log: {})",
                    self.kind.name(),
                    grace,
                    self.log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        match &mut self.procs {
            Procs::Child(child) => {
                if let Ok(None) = child.try_wait() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
            Procs::Apache {
                dir,
                stop_sh,
                stopped: false,
                ..
            } => {
                let _ = Command::new(&*stop_sh)
                    .arg(&*dir)
                    .arg("--keep")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
            Procs::Apache { .. } => {}
        }
    }
}

/// A process exists and is not a zombie (the Apache JVMs are not our children, so nobody here
/// reaps them).
fn pid_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The last `n` lines of a log file.
fn tail(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// CPU seconds (user + system, all threads) a process has used so far.
pub fn cpu_secs(pid: u32) -> Result<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).context("bad /proc stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11).context("utime")?.parse::<u64>()? + f.get(12).context("stime")?.parse::<u64>()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok(ticks as f64 / hz)
}

pub fn proc_status_kib(pid: u32, key: &str) -> Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix(key) {
            let kib = rest.trim().trim_end_matches("kB").trim();
            return Ok(kib.parse()?);
        }
    }
    bail!("{key} missing in /proc/{pid}/status")
}

/// A free loopback port (bound then released).
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Disk bytes of a directory tree as `du` counts them (allocated blocks).
pub fn du(dir: &Path) -> Result<u64> {
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                stack.push(entry.path());
            }
            total += meta.blocks() * 512;
        }
    }
    Ok(total)
}

/// What Apache build ran (start.sh's `BUILD=` line), for the report.
pub static APACHE_BUILD: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Starts Apache RocketMQ: start.sh writes the configs and launch scripts (not timed: it
/// resolves the classpath and picks ports), then the launch scripts start the name server and
/// the broker; `spawned` is taken just before the first launch.
fn start_apache(bins: &Binaries, run_dir: &Path) -> Result<Running> {
    let start_sh = bins
        .apache_start
        .clone()
        .context("apache: no --apache-start (tests/conformance/apache/start.sh)")?;
    let stop_sh = start_sh.with_file_name("stop.sh");
    let dir = run_dir.join("apache");
    if dir.exists() {
        fs::remove_dir_all(&dir)?;
    }
    let out = Command::new(&start_sh)
        .args(["--profile", "bench", "--prepare-only", "--max-lifetime", "7200", "--dir"])
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", start_sh.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{} --prepare-only failed ({}):\n{}{}",
            start_sh.display(),
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if let Some(build) = stdout.lines().find_map(|l| l.strip_prefix("BUILD=")) {
        let _ = APACHE_BUILD.set(build.trim().to_owned());
    }
    let namesrv = stdout
        .lines()
        .find_map(|l| l.strip_prefix("NAMESRV="))
        .context("start.sh printed no NAMESRV=")?
        .trim()
        .to_owned();
    let order = fs::read_to_string(dir.join("launch-order"))?;
    let mut running = Running {
        kind: Kind::Apache,
        addr: namesrv,
        data_dir: dir.join("store-broker-a"),
        remove_dir: dir.clone(),
        log: dir.join("broker-a.out"),
        spawned: Instant::now(),
        procs: Procs::Apache {
            dir: dir.clone(),
            stop_sh,
            pids: Vec::new(),
            stopped: false,
        },
    };
    for name in order.lines().filter(|l| !l.trim().is_empty()) {
        let launch = dir.join(format!("launch-{}.sh", name.trim()));
        let out = Command::new(&launch)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", launch.display()))?;
        let pid: u32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .with_context(|| format!("{} printed no pid", launch.display()))?;
        if let Procs::Apache { pids, .. } = &mut running.procs {
            pids.push(pid);
        }
    }
    Ok(running)
}

/// Starts `kind` with a fresh data dir under `run_dir` and returns at once (the caller times
/// the start up to the first acknowledged send).
pub fn start(kind: Kind, bins: &Binaries, run_dir: &Path, skiff_extra: &[String]) -> Result<Running> {
    if kind == Kind::Apache {
        return start_apache(bins, run_dir);
    }
    let port = free_port()?;
    let data_dir = run_dir.join(format!("{}-data", kind.name()));
    if data_dir.exists() {
        fs::remove_dir_all(&data_dir)?;
    }
    fs::create_dir_all(&data_dir)?;
    let log = run_dir.join(format!("{}.log", kind.name()));
    let logf = fs::File::create(&log)?;
    let mut cmd = match kind {
        Kind::SkiffAsync | Kind::SkiffSync | Kind::SkiffNoIndex | Kind::SkiffSyncUnprepared => {
            let sync = matches!(kind, Kind::SkiffSync | Kind::SkiffSyncUnprepared);
            let flush = if sync { "sync" } else { "async" };
            let mut c = Command::new(&bins.skiff);
            c.arg("serve")
                .arg("--listen")
                .arg(format!("127.0.0.1:{port}"))
                .arg("--data-dir")
                .arg(&data_dir)
                .arg("--flush")
                .arg(flush)
                .args(skiff_extra)
                // No stray skiff.toml: run in the (empty) run directory.
                .current_dir(run_dir)
                .env_remove("RUST_LOG");
            // skiff reads SKIFF_* variables as configuration and rejects unknown ones (e.g.
            // SKIFF_BENCH_TARGET_DIR): the flags above are the whole configuration.
            for (key, _) in std::env::vars_os() {
                if key.to_string_lossy().starts_with("SKIFF_") {
                    c.env_remove(&key);
                }
            }
            if kind == Kind::SkiffNoIndex {
                c.env("SKIFF_KEY_INDEX", "false");
            }
            if kind == Kind::SkiffSyncUnprepared {
                c.env("SKIFF_SEGMENT_PREPARE_AHEAD", "0");
            }
            c
        }
        Kind::RedisEverysec | Kind::RedisAlways => {
            let fsync = if kind == Kind::RedisAlways { "always" } else { "everysec" };
            let mut c = Command::new(&bins.redis);
            c.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .arg("--dir")
                .arg(&data_dir)
                .args(["--appendonly", "yes", "--appendfsync", fsync, "--save", ""])
                .args(["--daemonize", "no", "--protected-mode", "yes"])
                .current_dir(run_dir);
            c
        }
        Kind::JetStream => {
            let mut c = Command::new(&bins.nats);
            c.args(["-js", "-a", "127.0.0.1", "-p", &port.to_string()])
                .arg("-sd")
                .arg(&data_dir)
                .current_dir(run_dir);
            c
        }
        Kind::Apache => unreachable!("started above"),
    };
    let spawned = Instant::now();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf)
        .spawn()
        .with_context(|| format!("starting {} ({:?})", kind.name(), cmd.get_program()))?;
    Ok(Running {
        kind,
        addr: format!("127.0.0.1:{port}"),
        remove_dir: data_dir.clone(),
        data_dir,
        log,
        spawned,
        procs: Procs::Child(child),
    })
}
