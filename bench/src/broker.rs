//! Starting and stopping each broker as a child process on loopback with a fresh data dir,
//! and reading its peak RSS and disk use.

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
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::SkiffAsync,
        Kind::RedisEverysec,
        Kind::SkiffSync,
        Kind::RedisAlways,
        Kind::JetStream,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::SkiffAsync => "skiff-async",
            Kind::SkiffSync => "skiff-sync",
            Kind::RedisEverysec => "redis-everysec",
            Kind::RedisAlways => "redis-always",
            Kind::JetStream => "jetstream",
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
        }
    }

    pub fn is_skiff(self) -> bool {
        matches!(self, Kind::SkiffAsync | Kind::SkiffSync)
    }

    /// The peer skiff is compared with for this row (skiff rows only).
    pub fn peer_of(self) -> &'static [Kind] {
        match self {
            Kind::SkiffAsync => &[Kind::RedisEverysec, Kind::JetStream],
            Kind::SkiffSync => &[Kind::RedisAlways],
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
}

/// A running broker.
pub struct Running {
    pub kind: Kind,
    pub port: u16,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    child: Child,
}

impl Running {
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// VmHWM (peak resident set) of the broker process, in bytes.
    pub fn peak_rss(&self) -> Result<u64> {
        proc_status_kib(self.pid(), "VmHWM:").map(|k| k * 1024)
    }

    /// CPU seconds the broker has used so far.
    pub fn cpu_secs(&self) -> Result<f64> {
        cpu_secs(self.pid())
    }

    /// Stops the broker: SIGTERM, then SIGKILL after `grace`.
    pub fn stop(mut self, grace: Duration) -> Result<()> {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        loop {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
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
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
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

fn proc_status_kib(pid: u32, key: &str) -> Result<u64> {
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

/// Starts `kind` with a fresh data dir under `run_dir` and waits until it accepts TCP.
pub fn start(kind: Kind, bins: &Binaries, run_dir: &Path, skiff_extra: &[String]) -> Result<Running> {
    let port = free_port()?;
    let data_dir = run_dir.join(format!("{}-data", kind.name()));
    if data_dir.exists() {
        fs::remove_dir_all(&data_dir)?;
    }
    fs::create_dir_all(&data_dir)?;
    let log = run_dir.join(format!("{}.log", kind.name()));
    let logf = fs::File::create(&log)?;
    let mut cmd = match kind {
        Kind::SkiffAsync | Kind::SkiffSync => {
            let flush = if kind == Kind::SkiffSync { "sync" } else { "async" };
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
    };
    let child = cmd
        .stdin(Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf)
        .spawn()
        .with_context(|| format!("starting {} ({:?})", kind.name(), cmd.get_program()))?;
    let mut running = Running {
        kind,
        port,
        data_dir,
        log,
        child,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = running.child.try_wait()? {
            let tail = fs::read_to_string(&running.log).unwrap_or_default();
            bail!(
                "{} exited at start ({status}); log {}:\n{}",
                kind.name(),
                running.log.display(),
                tail.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        if Instant::now() >= deadline {
            let _ = running.child.kill();
            bail!("{} did not listen on {port} within 30 s", kind.name());
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    Ok(running)
}
