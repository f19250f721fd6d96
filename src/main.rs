//! The `skiff` binary.
//!
//! `skiff serve [--config FILE] [--data-dir DIR] [--listen ADDR] [--advertised-address HOST:PORT]
//! [--flush async|sync]
//! [--metrics-listen ADDR|off] [--grpc-listen ADDR|off] [--tls-cert-file F --tls-key-file F]` runs a
//! node as RocketMQ name server and broker on one port (default 127.0.0.1:9876). Configuration:
//! defaults, then `skiff.toml` (or `--config`), then `SKIFF_*` variables, then these flags.
//! SIGINT/SIGTERM stop it cleanly (offsets persisted, store flushed) with exit code 0.
//!
//! `skiff admin [--namesrv ADDR] [--json] <command>` (topics, progress, topic, group, ...) runs
//! [`skiff::admin`]; an error exits with code 1.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use skiff::config::Origin;
use skiff::storage::store::FlushPolicy;
use skiff::NodeConfig;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tracing_subscriber::EnvFilter;

// The send path allocates a few small buffers per message and frees them on another task; with
// glibc's allocator that was ~15% of the broker's CPU under a produce benchmark.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "skiff",
    version,
    about = "A single-node message queue speaking RocketMQ's remoting protocol"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a node as RocketMQ name server and broker on one port.
    Serve(ServeArgs),
    /// Admin requests against `skiff serve` or a RocketMQ name server.
    Admin(skiff::admin::AdminArgs),
    // Slot: `bench`.
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// Configuration file (default: ./skiff.toml when present).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory of the commit log, consume queues and metadata.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Listen address (name server and broker on one port): ip:port (0.0.0.0:9876 for every
    /// interface), or localhost:port for 127.0.0.1.
    #[arg(long, value_name = "ADDR", value_parser = skiff::config::values::parse_listen_addr)]
    listen: Option<SocketAddr>,
    /// The broker address routes tell remoting clients (`host:port`), e.g. the host's address
    /// and mapped port when skiff runs in a container. Unset, a wildcard listener advertises the
    /// address each client dialled.
    #[arg(long, value_name = "HOST:PORT")]
    advertised_address: Option<String>,
    /// When appended messages are made durable.
    #[arg(long, value_enum)]
    flush: Option<FlushArg>,
    /// Size of one commit-log segment (retention deletes whole segments): bytes, or with a
    /// unit (1GiB, 512MiB).
    #[arg(long, value_name = "SIZE", value_parser = skiff::config::values::parse_size)]
    segment_size: Option<u64>,
    /// Delete full segments whose newest message is older than this (`72h`, `10s`, `500ms`).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    retention: Option<std::time::Duration>,
    /// How often retention and the disk-full guard run (`10s`).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    cleanup_interval: Option<std::time::Duration>,
    /// The HTTP listener: the web console at `/` and Prometheus's `GET /metrics`; an address,
    /// or `off`.
    #[arg(long, visible_alias = "http-listen", value_name = "ADDR|off")]
    metrics_listen: Option<String>,
    /// gRPC listener for RocketMQ 5 clients (the main port serves gRPC too): an address, or
    /// `off`.
    #[arg(long, value_name = "ADDR|off")]
    grpc_listen: Option<String>,
    /// PEM certificate chain for TLS (with --tls-key-file); default: self-signed.
    #[arg(long, value_name = "FILE")]
    tls_cert_file: Option<PathBuf>,
    /// PEM private key for TLS (with --tls-cert-file).
    #[arg(long, value_name = "FILE")]
    tls_key_file: Option<PathBuf>,
    /// Which connections every port serves: TLS and plaintext (permissive), TLS only
    /// (enforcing) or plaintext only (disabled). Over TLS, ALPN h2 is gRPC; no ALPN is remoting
    /// (the Java client's tls.enable).
    #[arg(long, value_enum)]
    tls_mode: Option<TlsModeArg>,
    /// Raise the open-file limit (soft RLIMIT_NOFILE) to this at start; default: the hard
    /// limit. 64 descriptors are kept for the node itself, a quarter of the rest (16 to 4,096)
    /// for the store's open queue files, and the remainder caps connections (with
    /// max_connections, whichever is lower), so connections can never starve the store.
    #[arg(long, value_name = "N")]
    max_open_files: Option<u64>,
    /// When a listener binds beyond loopback (e.g. --listen 0.0.0.0:9876) and no users are
    /// configured, only loopback clients are served; the others are refused with a remark
    /// saying so. `off` serves every client that can reach the port.
    #[arg(long, value_name = "on|off", value_parser = skiff::config::values::parse_switch)]
    protected_mode: Option<bool>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TlsModeArg {
    Disabled,
    Permissive,
    Enforcing,
}

impl From<TlsModeArg> for skiff::tls::TlsMode {
    fn from(mode: TlsModeArg) -> Self {
        match mode {
            TlsModeArg::Disabled => skiff::tls::TlsMode::Disabled,
            TlsModeArg::Permissive => skiff::tls::TlsMode::Permissive,
            TlsModeArg::Enforcing => skiff::tls::TlsMode::Enforcing,
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FlushArg {
    /// fsync on an interval (RocketMQ ASYNC_FLUSH).
    Async,
    /// Group commit: a send is acknowledged after the fsync covering it.
    Sync,
}

impl From<FlushArg> for FlushPolicy {
    fn from(flush: FlushArg) -> Self {
        match flush {
            FlushArg::Async => FlushPolicy::Async,
            FlushArg::Sync => FlushPolicy::Sync,
        }
    }
}

/// mimalloc's `mi_option_purge_delay` (its index in `mimalloc.h`, v2 and v3 alike).
#[cfg(feature = "mimalloc")]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> ExitCode {
    // Memory freed in bulk (idle queues leaving memory: a million lite topics are most of the
    // heap) goes back to the system at once: with mimalloc's default 10 ms delay the purge waits
    // for the thread that freed it to allocate again, and an idle broker kept its peak RSS. A
    // produce benchmark (RocketMQ's tool, 32 threads) cost the same broker CPU either way.
    #[cfg(feature = "mimalloc")]
    // SAFETY: sets a number in mimalloc's option table, as MIMALLOC_PURGE_DELAY=0 would.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
    }
    let cli = Cli::parse();
    init_tracing();
    let result = match cli.command {
        Command::Serve(args) => run_serve(args),
        Command::Admin(args) => run_admin(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The alternate form prints the whole chain, each cause once.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn serve_config(args: &ServeArgs) -> anyhow::Result<NodeConfig> {
    let (mut config, mut origins) =
        NodeConfig::load_with_origins(args.config.as_deref()).context("loading configuration")?;
    let mut flag =
        |key: &str| origins.set(key, Origin::Flag(format!("--{}", key.replace('_', "-"))));
    if let Some(dir) = &args.data_dir {
        config.data_dir = dir.clone();
        flag("data_dir");
    }
    if let Some(listen) = args.listen {
        config.listen = listen;
        flag("listen");
    }
    if let Some(advertised) = &args.advertised_address {
        config.advertised_address = Some(advertised.clone());
        flag("advertised_address");
    }
    if let Some(flush) = args.flush {
        config.flush = flush.into();
        flag("flush");
    }
    if let Some(bytes) = args.segment_size {
        config.segment_size = bytes;
        flag("segment_size");
    }
    if let Some(retention) = args.retention {
        config.retention = retention;
        flag("retention");
    }
    if let Some(interval) = args.cleanup_interval {
        config.cleanup_interval = interval;
        flag("cleanup_interval");
    }
    if let Some(metrics) = &args.metrics_listen {
        config.metrics_listen = metrics.clone();
        flag("metrics_listen");
    }
    if let Some(grpc) = &args.grpc_listen {
        config.grpc_listen = grpc.clone();
        flag("grpc_listen");
    }
    if let Some(cert) = &args.tls_cert_file {
        config.tls_cert_file = Some(cert.clone());
        flag("tls_cert_file");
    }
    if let Some(key) = &args.tls_key_file {
        config.tls_key_file = Some(key.clone());
        flag("tls_key_file");
    }
    if let Some(mode) = args.tls_mode {
        config.tls_mode = mode.into();
        flag("tls_mode");
    }
    if let Some(n) = args.max_open_files {
        config.max_open_files = n;
        flag("max_open_files");
    }
    if let Some(on) = args.protected_mode {
        config.protected_mode = on;
        flag("protected_mode");
    }
    config
        .validate_from(&origins)
        .context("checking configuration")?;
    for name in NodeConfig::unknown_environment() {
        tracing::warn!(variable = %name, "ignoring an environment variable that names no setting");
    }
    Ok(config)
}

fn run_serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = serve_config(&args)?;
    actix_rt::System::new().block_on(async move {
        // Installed before the listener opens, so a signal right after startup is not missed.
        let mut terminate =
            signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let mut interrupt =
            signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        let watched = [
            Some(
                args.config
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("skiff.toml")),
            ),
            config.acl_file.clone(),
        ]
        .into_iter()
        .flatten()
        .collect();
        let acl = skiff::serve::AclSource {
            watched,
            load: Box::new(move || Ok(serve_config(&args)?.acl()?)),
        };
        skiff::serve::serve_reloading_acl(
            config,
            acl,
            shutdown_signal(&mut terminate, &mut interrupt),
        )
        .await?;
        Ok(())
    })
}

fn run_admin(args: skiff::admin::AdminArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let output = runtime.block_on(skiff::admin::run(args))?;
    print!("{output}");
    if !output.is_empty() && !output.ends_with('\n') {
        println!();
    }
    Ok(())
}

async fn shutdown_signal(terminate: &mut Signal, interrupt: &mut Signal) {
    tokio::select! {
        _ = terminate.recv() => tracing::info!(signal = "SIGTERM", "shutdown requested"),
        _ = interrupt.recv() => tracing::info!(signal = "SIGINT", "shutdown requested"),
    }
}
