//! `skiff serve`: a node behind a RocketMQ remoting listener that answers as both the name
//! server and the broker, so unmodified RocketMQ clients can use it as a dev broker.
//!
//! [`start`] wires the doors onto the ports: the main port (`listen`: remoting, and gRPC told
//! apart by its first bytes), `grpc_listen` (gRPC) and `metrics_listen` (HTTP), all accepted by
//! [`crate::listener`] under one connection cap and counted by the processor's bridge. It binds
//! the main port first (so a port of 0 resolves to the address routes advertise), then opens the
//! node and starts the request processor, the gRPC server and the HTTP server on the current
//! actix arbiter; [`Serving::shutdown`] stops accepting, closes connections, and shuts the node
//! down (offsets persisted, store flushed). [`serve`] runs both around a shutdown signal.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tracing::{info, warn};

use crate::acl::admin::AuthAdmin;
use crate::acl::{Acl, AclHandle};
use crate::config::{ConfigError, NodeConfig};
use crate::console::ConsoleInfo;
use crate::descriptors;
use crate::grpc::{GrpcConfig, GrpcServer, ServiceConfig};
use crate::http::{HttpConfig, HttpEndpoint};
use crate::listener::admit::DEFAULT_HANDSHAKE_TIMEOUT;
use crate::listener::{
    self, listen, AcceptEvents, Admission, ConnectionSlots, Doors, Listening, Port,
};
use crate::node::{Node, NodeError};
use crate::protected::PeerPolicy;
use crate::remoting::processor::{self, Processor, ProcessorTask};
use crate::remoting::{RemotingServer, ServerConfig, ServerError};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};
use tokio::signal::unix::{signal, Signal, SignalKind};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the node in {data_dir}")]
    Open {
        data_dir: String,
        #[source]
        source: NodeError,
    },
    #[error("shutting the node down failed")]
    Shutdown(#[source] NodeError),
    #[error("the configuration cannot be served")]
    Config(#[from] ConfigError),
    #[error("cannot set up TLS")]
    Tls(#[source] crate::tls::TlsError),
}

/// Raises the open-file limit and shares it out (see [`crate::descriptors`]): the connection
/// cap comes down to the connections' share when that is smaller, and the store's open queue
/// files default to theirs. Logged, as Redis does, so an operator sees the budget.
fn apply_descriptor_budget(config: &mut NodeConfig) {
    let limit = match descriptors::raise_open_file_limit(config.max_open_files) {
        Ok(limit) => limit,
        Err(e) => {
            warn!(error = %e, "could not read the open-file limit; keeping the configured caps");
            return;
        }
    };
    let shares = descriptors::shares(limit.soft);
    let configured = config.max_connections;
    config.max_connections = configured.min(shares.connections);
    if config.open_queue_files == 0 {
        config.open_queue_files = shares.queue_files;
    }
    info!(
        soft_limit_at_start = limit.soft_before,
        soft_limit = limit.soft,
        hard_limit = limit.hard,
        max_connections = config.max_connections,
        open_queue_files = config.open_queue_files,
        "open-file limit"
    );
    if config.max_connections < configured {
        warn!(
            configured,
            max_connections = config.max_connections,
            soft_limit = limit.soft,
            "max_connections lowered to fit the open-file limit; raise the limit (ulimit -n) for more"
        );
    }
}

/// A running node with its remoting listener. Not `Send`: keep it on the arbiter that started it.
pub struct Serving {
    node: Node,
    server: RemotingServer,
    processor: ProcessorTask,
    local_addr: SocketAddr,
    /// `metrics_listen` and the server behind it.
    http: Option<(Listening, HttpEndpoint)>,
    /// `grpc_listen`, when it could bind.
    grpc_port: Option<Listening>,
    grpc: GrpcServer,
    acl: AclHandle,
}

/// Binds `config.listen`, opens the node and starts serving. Must run inside an actix system.
/// When `advertised_address` is unset, routes advertise the bound address (so port 0 works).
pub async fn start(mut config: NodeConfig) -> Result<Serving, ServeError> {
    apply_descriptor_budget(&mut config);
    let (bridge, inbox) = processor::channel(processor::DEFAULT_QUEUE_CAPACITY);
    // Every port counts its refusals and evictions with the remoting requests' counters.
    let events: Arc<dyn AcceptEvents> = bridge.clone();
    let grpc_addr = config.grpc_addr()?;
    // One acceptor, one certificate, for TLS on every port and both protocols.
    let tls = crate::tls::acceptor(&config.tls_identity()?).map_err(ServeError::Tls)?;
    // One cap for the connections of every door on every port.
    let slots = ConnectionSlots::new(config.max_connections);
    // Made before the ports bind: gRPC connections arriving there wait in it until the node is
    // open and the gRPC server serves them.
    let (grpc_handoff, grpc_inbox) = listener::handoff("grpc");
    // Validated by `NodeConfig::validate`; a config built in code gets the same check here.
    let metrics_addr = config.metrics_addr().unwrap_or_else(|e| {
        warn!(error = &e as &dyn std::error::Error, "metrics endpoint off");
        None
    });
    let listeners: Vec<SocketAddr> = [Some(config.listen), grpc_addr, metrics_addr]
        .into_iter()
        .flatten()
        .collect();
    let peers = PeerPolicy::for_listeners(config.protected_mode, &listeners);
    let acl = AclHandle::new(config.acl()?);
    if acl.current().is_on() {
        info!(
            accounts = acl.current().account_count(),
            "acl on: every request must be signed by a configured account"
        );
    } else if peers == PeerPolicy::LoopbackOnly {
        warn!(
            listen = %config.listen,
            "protected mode: a listener binds beyond loopback and no users are configured, so \
             only loopback clients are served; start with --protected-mode off to serve every client"
        );
    } else if PeerPolicy::for_listeners(true, &listeners) == PeerPolicy::LoopbackOnly {
        warn!(
            listen = %config.listen,
            "protected mode off and no users configured: every client that reaches a port is \
             served, unauthenticated; keep the ports on a private network or configure users"
        );
    }
    let server_config = ServerConfig {
        peers,
        acl: acl.clone(),
        tls: Some(tls.clone()),
        tls_mode: config.tls_mode,
        grpc: Some(grpc_handoff.clone()),
        connection_slots: Some(slots.clone()),
        events: events.clone(),
        max_frame_len: config.max_frame_bytes,
        idle_timeout: (!config.channel_idle_timeout.is_zero())
            .then_some(config.channel_idle_timeout),
        max_connections: config.max_connections,
        ..ServerConfig::default()
    };
    let server = RemotingServer::bind(config.listen, server_config, bridge)
        .await
        .map_err(|e| ServeError::Bind {
            addr: config.listen,
            source: match e {
                ServerError::Bind(io) | ServerError::LocalAddr(io) => io,
            },
        })?;
    let local_addr = server.local_addr();
    // Like the metrics port, a taken gRPC port is reported, not fatal: a dev machine may run
    // several nodes, and the main port serves gRPC too.
    let grpc_port = match grpc_addr {
        Some(addr) => {
            let port = Port {
                door: "grpc",
                admission: Admission {
                    doors: Doors::Grpc,
                    tls: Some(tls.clone()),
                    tls_mode: config.tls_mode,
                    within: Some(DEFAULT_HANDSHAKE_TIMEOUT),
                },
                slots: slots.clone(),
                events: events.clone(),
            };
            let started = listen(addr)
                .await
                .and_then(|l| Listening::start(l, port, Arc::new(grpc_handoff)));
            match started {
                Ok(listening) => {
                    info!(addr = %listening.local_addr(), "grpc listener listening");
                    Some(listening)
                }
                Err(e) => {
                    warn!(addr = %addr, error = %e, "grpc listener not started; gRPC is served on the main port only");
                    None
                }
            }
        }
        None => None,
    };
    if config.advertised_address.is_none() {
        config.advertised_address = Some(local_addr.to_string());
    }
    let data_dir = config.data_dir.display().to_string();
    let node = match Node::open(config) {
        Ok(node) => node,
        Err(source) => {
            server.shutdown().await;
            if let Some(port) = grpc_port {
                port.shutdown().await;
            }
            return Err(ServeError::Open { data_dir, source });
        }
    };
    let auth = Arc::new(AuthAdmin::open(
        node.users().clone(),
        acl.clone(),
        &node.config().cluster_name,
    ));
    if acl.current().is_on() && !acl.current().users().is_empty() {
        info!(
            users = acl.current().users().len(),
            "acl 2.0 users in force: every request must be signed"
        );
    }
    let processor = processor::spawn(
        Processor::new(node.broker().clone()).with_auth(auth.clone()),
        inbox,
    );
    let grpc_config = GrpcConfig {
        service: ServiceConfig {
            broker_name: node.config().broker_name.clone(),
            max_body_size: node.config().max_message_size,
        },
        // A send of the largest body, with room for its properties and the batch around it.
        max_request_bytes: node.config().max_message_size + (1 << 20),
        peers,
        acl: acl.clone(),
    };
    let grpc = GrpcServer::start(grpc_config, node.broker().clone(), grpc_inbox);
    // A dev machine may run several nodes: a taken HTTP port is reported, not fatal.
    let http = match metrics_addr {
        Some(addr) => match listen(addr).await {
            Ok(http_listener) => {
                let config = node.config();
                let http_config = HttpConfig {
                    peers,
                    acl: acl.clone(),
                    console: Some(ConsoleInfo {
                        broker_name: config.broker_name.clone(),
                        cluster_name: config.cluster_name.clone(),
                        listen: local_addr.to_string(),
                        data_dir: config.data_dir.clone(),
                        retention: config.retention,
                        disk_max_used_ratio: config.disk_max_used_ratio,
                        disk_full_ratio: config.disk_full_ratio,
                        settings: serde_json::to_value(config).unwrap_or_else(|e| {
                            warn!(error = %e, "the console shows no settings: they did not serialize");
                            serde_json::Value::Null
                        }),
                    }),
                    sample_interval: config.console_sample_interval,
                    auth: Some(auth.clone()),
                };
                let (handoff, inbox) = listener::handoff("http");
                let endpoint = HttpEndpoint::start(inbox, node.broker().clone(), http_config);
                let port = Port {
                    door: "http",
                    admission: Admission::plaintext(Doors::Http),
                    slots: slots.clone(),
                    events: events.clone(),
                };
                match Listening::start(http_listener, port, Arc::new(handoff)) {
                    Ok(listening) => {
                        info!(addr = %listening.local_addr(), "console at http://{0}/, metrics at http://{0}/metrics", listening.local_addr());
                        Some((listening, endpoint))
                    }
                    Err(e) => {
                        warn!(addr = %addr, error = %e, "http listener (console and metrics) not started");
                        endpoint.shutdown().await;
                        None
                    }
                }
            }
            Err(e) => {
                warn!(addr = %addr, error = %e, "http listener (console and metrics) not started");
                None
            }
        },
        None => {
            info!("http listener (console and metrics) off");
            None
        }
    };
    info!(addr = %local_addr, advertised = %node.config().advertised(), data_dir = %data_dir, "skiff ready");
    Ok(Serving {
        node,
        server,
        processor,
        local_addr,
        http,
        grpc_port,
        grpc,
        acl,
    })
}

impl Serving {
    /// The bound listener address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn node(&self) -> &Node {
        &self.node
    }

    /// Where the dedicated gRPC listener listens, when it runs (the main port serves gRPC too).
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc_port.as_ref().map(Listening::local_addr)
    }

    /// The users and permissions every listener checks; [`AclHandle::replace`] changes them
    /// for the next request without touching connections.
    pub fn acl(&self) -> &AclHandle {
        &self.acl
    }

    /// Where the HTTP listener (console and `/metrics`) listens, when it runs.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(|(port, _)| port.local_addr())
    }

    /// Stops accepting and closes every connection, stops the request processor (clients leave
    /// their groups), then shuts the node down: offsets persisted, store flushed and closed.
    pub async fn shutdown(self) -> Result<(), ServeError> {
        info!(addr = %self.local_addr, "skiff stopping");
        if let Some((port, endpoint)) = self.http {
            port.shutdown().await;
            endpoint.shutdown().await;
        }
        self.server.shutdown().await;
        if let Some(port) = self.grpc_port {
            port.shutdown().await;
        }
        self.grpc.shutdown().await;
        self.processor.shutdown().await;
        self.node.shutdown().await.map_err(ServeError::Shutdown)?;
        info!("skiff stopped");
        Ok(())
    }
}

/// Where a running node's ACL comes from: re-read on SIGHUP and when one of `watched` changes.
pub struct AclSource {
    /// Files whose change (modification time or length) reloads the ACL.
    pub watched: Vec<PathBuf>,
    /// Reads the configuration again and builds the ACL from it.
    pub load: Box<dyn Fn() -> Result<Acl, Box<dyn std::error::Error + Send + Sync>>>,
}

/// How often [`AclSource::watched`] files are looked at.
const ACL_POLL_INTERVAL: Duration = Duration::from_secs(2);

/// Serves until `shutdown` completes, reloading the ACL from `source` meanwhile, then shuts
/// down cleanly. A configuration that does not load is reported and the ACL in force stays.
pub async fn serve_reloading_acl(
    config: NodeConfig,
    source: AclSource,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let serving = start(config).await?;
    tokio::select! {
        () = shutdown => {}
        () = reload_acl(serving.acl().clone(), source) => {}
    }
    serving.shutdown().await
}

async fn reload_acl(acl: AclHandle, source: AclSource) {
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(hangup) => Some(hangup),
        Err(e) => {
            warn!(error = %e, "no SIGHUP handler: the acl reloads only when its files change");
            None
        }
    };
    let fingerprint = |paths: &[PathBuf]| -> Vec<Option<(SystemTime, u64)>> {
        paths
            .iter()
            .map(|p| {
                let meta = std::fs::metadata(p).ok()?;
                Some((meta.modified().ok()?, meta.len()))
            })
            .collect()
    };
    let mut seen = fingerprint(&source.watched);
    let mut poll = tokio::time::interval(ACL_POLL_INTERVAL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let cause = tokio::select! {
            Some(()) = hung_up(&mut hangup) => "sighup",
            _ = poll.tick() => {
                let now = fingerprint(&source.watched);
                if now == seen {
                    continue;
                }
                seen = now;
                "file changed"
            }
        };
        match (source.load)() {
            Ok(new) => {
                info!(cause, accounts = new.account_count(), "acl reloaded");
                acl.replace(new);
            }
            Err(e) => {
                let reason = crate::error_text::error_chain(&*e);
                warn!(cause, error = %reason, "acl not reloaded: the configuration does not load; the acl in force stays")
            }
        }
    }
}

async fn hung_up(hangup: &mut Option<Signal>) -> Option<()> {
    match hangup {
        Some(signal) => signal.recv().await,
        None => std::future::pending().await,
    }
}

/// Serves until `shutdown` completes, then shuts down cleanly.
pub async fn serve(
    config: NodeConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let serving = start(config).await?;
    shutdown.await;
    serving.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Log output, kept for the test to read.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
        }
    }

    #[test]
    fn a_failed_acl_reload_logs_why_the_configuration_does_not_load() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("skiff.toml");
        std::fs::write(&file, "")?;
        let log = Captured::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        let source = AclSource {
            watched: vec![file.clone()],
            load: Box::new(|| {
                let refused: Box<dyn std::error::Error + Send + Sync> =
                    anyhow::anyhow!("setting flush (from file skiff.toml) is invalid")
                        .context("loading configuration")
                        .into();
                Err(refused)
            }),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            tokio::select! {
                biased;
                () = reload_acl(AclHandle::default(), source) => anyhow::bail!("reload_acl ended"),
                logged = async {
                    std::fs::write(&file, "flush = \"sometimes\"\n")?;
                    let deadline = tokio::time::Instant::now() + ACL_POLL_INTERVAL * 5;
                    while !log.text().contains("acl not reloaded") {
                        anyhow::ensure!(tokio::time::Instant::now() < deadline, "no reload: {}", log.text());
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Ok(log.text())
                } => {
                    let logged = logged?;
                    anyhow::ensure!(
                        logged.contains("loading configuration: setting flush (from file skiff.toml) is invalid"),
                        "{logged}"
                    );
                    Ok(())
                }
            }
        })
    }
}
