//! The RocketMQ 5 gRPC front door: `apache.rocketmq.v2.MessagingService`, which every client
//! Apache ships for RocketMQ 5 speaks (Java `rocketmq-client-java`, Python, Node, Rust, Go,
//! C#, C++). A sibling of [`crate::remoting`]: it decodes its wire and calls the same broker.
//!
//! # Layout
//!
//! * `proto/`: the schema (`apache/rocketmq/v2/*.proto`), compiled by `build.rs` into [`pb`].
//! * [`service`]: the RPCs, each mapped to broker calls.
//! * [`convert`]: messages between their gRPC form and the store's (pure).
//! * [`resource`]: topic and group names between a client's resources and the broker.
//! * [`clients`]: gRPC clients by client id, their settings and Telemetry streams; how the
//!   broker's connection registry reaches them.
//! * [`status`]: the one table from broker errors and refusals to gRPC codes.
//! * [`transaction_id`]: the transaction id a producer holds for a half message.
//! * `crate::broker_link`: the hop from tonic's tasks onto the broker's arbiter (shared with the
//!   HTTP console).
//! * This module: [`GrpcServer`], which serves connections from its own listener
//!   (`grpc_listen`) and those the main port hands over after reading their first bytes.
//!
//! # Connections
//!
//! A connection's first byte tells what it is: `0x16` a TLS ClientHello, `P` the HTTP/2 preface
//! (plaintext gRPC); the rest are remoting frames (whose first byte is the high byte of a length,
//! 0 for any frame under 16 MiB). The main port completes TLS handshakes itself and hands over
//! the connections that agreed on ALPN `h2`, and the plaintext ones starting with `P`; its own
//! listener's connections are all gRPC.

pub mod clients;
pub mod convert;

pub mod pb;
pub mod resource;
pub mod service;
pub mod status;
pub mod transaction_id;

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tracing::{debug, info, warn};

use skiff_actors::broker::BrokerHandle;

use crate::listener::{ConnectionSlot, ConnectionSlots, SHUTDOWN_GRACE};
use crate::remoting::server::ConnectionHandoff;

use crate::broker_link::{self as link, LinkTask};
use pb::messaging_service_server::MessagingServiceServer;
use tonic::service::interceptor::InterceptedService;

use crate::acl::{signature, Acl, AclHandle, Identity, Refusal};
use crate::protected::{self, PeerPolicy};
use crate::tls::{TlsMode, HANDSHAKE_RECORD};
pub use service::{GrpcService, ServiceConfig};

/// The first byte of the HTTP/2 connection preface (`PRI * HTTP/2.0`).
pub const HTTP2_PREFACE: u8 = b'P';
/// How long a connection may take to send its first byte, and then its TLS handshake.
const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections accepted and waiting for the server, before new ones are refused.
const HANDOFF_QUEUE: usize = 256;

/// The gRPC server's settings.
pub struct GrpcConfig {
    /// Its own listener (`grpc_listen`), bound by the caller; `None` serves only what the main
    /// port hands over.
    pub listener: Option<TcpListener>,
    /// The acceptor the main port shares, for TLS on the gRPC listener.
    pub tls: TlsAcceptor,
    pub tls_mode: TlsMode,
    pub service: ServiceConfig,
    /// The largest request a client may send (a send of `max_body_size` plus its metadata).
    pub max_request_bytes: usize,
    /// Which peers' requests are served; the others get PERMISSION_DENIED (protected mode).
    pub peers: PeerPolicy,
    /// Users and permissions; with any account configured, each call's `authorization` is
    /// checked (and protected mode no longer applies).
    pub acl: AclHandle,
}

/// A connection as the gRPC server reads it, with its place under the node's connection cap
/// (given back when tonic drops the connection).
pub enum GrpcIo {
    Plain(TcpStream, ConnectionSlot),
    Tls(Box<TlsStream<TcpStream>>, ConnectionSlot),
}

impl GrpcIo {
    fn tcp(&self) -> &TcpStream {
        match self {
            GrpcIo::Plain(s, _) => s,
            GrpcIo::Tls(s, _) => s.get_ref().0,
        }
    }
}

impl Connected for GrpcIo {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo {
            local_addr: self.tcp().local_addr().ok(),
            remote_addr: self.tcp().peer_addr().ok(),
        }
    }
}

impl AsyncRead for GrpcIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let io = self.get_mut();
        let slot = match io {
            GrpcIo::Plain(_, slot) | GrpcIo::Tls(_, slot) => slot,
        };
        if slot.poll_evicted(cx).is_ready() {
            // Chosen to make room at the connection cap; hyper closes the connection.
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "closed to make room for a newcomer at the connection cap",
            )));
        }
        let before = buf.filled().len();
        let read = match io {
            GrpcIo::Plain(s, _) => Pin::new(s).poll_read(cx, buf),
            GrpcIo::Tls(s, _) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        if buf.filled().len() > before {
            // HTTP/2 has no request boundary at this level: any bytes count as activity.
            match io {
                GrpcIo::Plain(_, slot) | GrpcIo::Tls(_, slot) => slot.mark_active(),
            }
        }
        read
    }
}

impl AsyncWrite for GrpcIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            GrpcIo::Plain(s, _) => Pin::new(s).poll_write(cx, buf),
            GrpcIo::Tls(s, _) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            GrpcIo::Plain(s, _) => Pin::new(s).poll_flush(cx),
            GrpcIo::Tls(s, _) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            GrpcIo::Plain(s, _) => Pin::new(s).poll_shutdown(cx),
            GrpcIo::Tls(s, _) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            GrpcIo::Plain(s, _) => Pin::new(s).poll_write_vectored(cx, bufs),
            GrpcIo::Tls(s, _) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            GrpcIo::Plain(s, _) => s.is_write_vectored(),
            GrpcIo::Tls(s, _) => s.is_write_vectored(),
        }
    }
}

/// Where the main port (and the gRPC listener) send the connections that speak gRPC.
#[derive(Clone, Debug)]
pub struct Handoff {
    streams: mpsc::Sender<(Arrival, ConnectionSlot)>,
    /// The node's connection cap, which the gRPC listener's connections count against too.
    slots: ConnectionSlots,
}

/// The receiving end of a [`Handoff`], which [`GrpcServer::start`] serves.
pub struct HandoffInbox {
    streams: mpsc::Receiver<(Arrival, ConnectionSlot)>,
}

/// A connection as it reaches the gRPC server: as accepted, or after the main port's TLS
/// handshake agreed on `h2`.
#[derive(Debug)]
enum Arrival {
    Accepted(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// A handoff and its inbox: made before the main port binds, served once the node is open.
/// `slots` is the node's connection cap, shared with the main port.
pub fn handoff(slots: ConnectionSlots) -> (Handoff, HandoffInbox) {
    let (streams, inbox) = mpsc::channel(HANDOFF_QUEUE);
    (Handoff { streams, slots }, HandoffInbox { streams: inbox })
}

impl ConnectionHandoff for Handoff {
    fn wants(&self, first_byte: u8) -> bool {
        first_byte == HTTP2_PREFACE
    }

    /// A full queue closes the connection (the client retries).
    fn hand_over(&self, stream: TcpStream, peer: SocketAddr, slot: ConnectionSlot) {
        self.send(Arrival::Accepted(stream), peer, slot);
    }

    fn hand_over_tls(&self, stream: TlsStream<TcpStream>, peer: SocketAddr, slot: ConnectionSlot) {
        self.send(Arrival::Tls(Box::new(stream)), peer, slot);
    }
}

impl Handoff {
    fn send(&self, arrival: Arrival, peer: SocketAddr, slot: ConnectionSlot) {
        if self.streams.try_send((arrival, slot)).is_err() {
            warn!(peer = %peer, "grpc connection refused: too many connections negotiating");
        }
    }
}

/// The running gRPC server. [`GrpcServer::shutdown`] stops it.
pub struct GrpcServer {
    local_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    link: Option<LinkTask>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl GrpcServer {
    /// Serves, on the current arbiter, the connections of `config.listener` and those handed
    /// over through `inbox`'s [`Handoff`], calling `broker`.
    pub async fn start(
        config: GrpcConfig,
        broker: BrokerHandle,
        (handoff, inbox): (Handoff, HandoffInbox),
    ) -> GrpcServer {
        let acceptor = config.tls;
        let tls_mode = config.tls_mode;
        let listener = config.listener;
        let local_addr = listener.as_ref().and_then(|l| l.local_addr().ok());
        let (link, link_task) = link::spawn(broker, link::DEFAULT_QUEUE_CAPACITY);
        let (stop, stopped) = watch::channel(false);
        let service = GrpcService::new(link, config.service.clone(), stopped.clone());
        let (ready_tx, ready_rx) = mpsc::channel::<Result<GrpcIo, std::io::Error>>(HANDOFF_QUEUE);
        let mut tasks = Vec::new();
        if let Some(listener) = listener {
            tasks.push(tokio::spawn(accept_loop(
                listener,
                handoff,
                stopped.clone(),
            )));
        }
        tasks.push(tokio::spawn(negotiate_loop(
            inbox.streams,
            ready_tx,
            (acceptor, tls_mode),
            stopped.clone(),
        )));
        let max = config.max_request_bytes;
        let peers = config.peers;
        let acl = config.acl;
        let mut shutdown = stopped.clone();
        tasks.push(tokio::spawn(async move {
            let result = tonic::transport::Server::builder()
                .http2_keepalive_interval(Some(Duration::from_secs(30)))
                .add_service(InterceptedService::new(
                    MessagingServiceServer::new(service)
                        .max_decoding_message_size(max)
                        .max_encoding_message_size(usize::MAX),
                    move |request: tonic::Request<()>| admit_call(peers, &acl, request),
                ))
                .serve_with_incoming_shutdown(ReceiverStream::new(ready_rx), async move {
                    until_stopped(&mut shutdown).await;
                })
                .await;
            if let Err(e) = result {
                warn!(error = %e, "grpc server failed");
            }
        }));
        if let Some(addr) = local_addr {
            info!(addr = %addr, "grpc server listening");
        }
        GrpcServer {
            local_addr,
            stop,
            link: Some(link_task),
            tasks,
        }
    }

    /// The dedicated listener's address, when there is one.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// Stops accepting, ends open streams, and stops calling the broker.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        for task in std::mem::take(&mut self.tasks) {
            let abort = task.abort_handle();
            if tokio::time::timeout(SHUTDOWN_GRACE, task).await.is_err() {
                debug!("grpc server task still busy at shutdown; aborted");
                abort.abort();
            }
        }
        if let Some(link) = self.link.take() {
            link.shutdown().await;
        }
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

async fn accept_loop(listener: TcpListener, handoff: Handoff, mut stopped: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = until_stopped(&mut stopped) => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match handoff.slots.take(peer) {
                    Some(slot) => handoff.send(Arrival::Accepted(stream), peer, slot),
                    // Closed at once; the cap logs it.
                    None => drop(stream),
                },
                Err(e) => {
                    warn!(error = %e, "grpc accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// Reads each connection's first byte and, for TLS, completes the handshake, then hands it to
/// tonic. Each connection negotiates in its own task, so a slow one delays no other.
async fn negotiate_loop(
    mut streams: mpsc::Receiver<(Arrival, ConnectionSlot)>,
    ready: mpsc::Sender<Result<GrpcIo, std::io::Error>>,
    (acceptor, tls_mode): (TlsAcceptor, TlsMode),
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let (arrival, slot) = tokio::select! {
            _ = until_stopped(&mut stopped) => return,
            stream = streams.recv() => match stream {
                Some(s) => s,
                None => return,
            },
        };
        let ready = ready.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let stream = match arrival {
                Arrival::Tls(tls) => {
                    let _ = ready.send(Ok(GrpcIo::Tls(tls, slot))).await;
                    return;
                }
                Arrival::Accepted(stream) => stream,
            };
            let peer = stream.peer_addr().ok();
            match negotiate(stream, slot, &acceptor, tls_mode).await {
                Ok(io) => {
                    let _ = ready.send(Ok(io)).await;
                }
                Err(e) => {
                    debug!(peer = ?peer, error = %e, "grpc connection dropped before its first request")
                }
            }
        });
    }
}

async fn negotiate(
    stream: TcpStream,
    slot: ConnectionSlot,
    acceptor: &TlsAcceptor,
    tls_mode: TlsMode,
) -> std::io::Result<GrpcIo> {
    let _ = stream.set_nodelay(true);
    let mut first = [0u8; 1];
    let read = tokio::time::timeout(FIRST_BYTES_TIMEOUT, stream.peek(&mut first))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no first byte"))??;
    if read == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "closed before its first byte",
        ));
    }
    let tls = first[0] == HANDSHAKE_RECORD;
    if tls && !tls_mode.serves_tls() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "a TLS handshake while tls_mode is disabled",
        ));
    }
    if !tls {
        if !tls_mode.serves_plaintext() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "a plaintext connection while tls_mode is enforcing",
            ));
        }
        return Ok(GrpcIo::Plain(stream, slot));
    }
    let tls = tokio::time::timeout(FIRST_BYTES_TIMEOUT, acceptor.accept(stream))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake"))??;
    Ok(GrpcIo::Tls(Box::new(tls), slot))
}

/// Before the service sees a call: with no users configured, protected mode refuses a peer
/// beyond loopback; with users, the caller is authenticated and the outcome left in the
/// call's extensions as a [`CallerIdentity`], for the service to answer in-band (a refused
/// call gets the RPC's own response with UNAUTHORIZED, as RocketMQ's proxy answers).
fn admit_call(
    peers: PeerPolicy,
    acl: &AclHandle,
    mut request: tonic::Request<()>,
) -> Result<tonic::Request<()>, tonic::Status> {
    let acl = acl.current();
    let peer = request.remote_addr();
    if !acl.is_on() {
        return match peer {
            Some(peer) if !peers.serves(peer.ip()) => {
                debug!(peer = %peer, "grpc request refused: protected mode serves loopback peers only");
                Err(tonic::Status::permission_denied(protected::REFUSAL))
            }
            _ => Ok(request),
        };
    }
    let peer_ip = peer.map_or(IpAddr::from([0, 0, 0, 0]), |p| p.ip());
    let identity = authenticate_call(&acl, request.metadata(), peer_ip, SystemTime::now());
    if let Err(refusal) = &identity {
        debug!(peer = ?peer, reason = %refusal, "grpc call refused by the acl");
    }
    request.extensions_mut().insert(CallerIdentity(identity));
    Ok(request)
}

/// Who a call comes from, by its `authorization` and `x-mq-date-time` metadata.
fn authenticate_call(
    acl: &Acl,
    metadata: &tonic::metadata::MetadataMap,
    peer: IpAddr,
    now: SystemTime,
) -> Result<Identity, Refusal> {
    let text = |key: &str| metadata.get(key).and_then(|v| v.to_str().ok());
    let Some(authorization) = text("authorization").filter(|a| !a.trim().is_empty()) else {
        return acl.authenticate(None, peer, |_| false);
    };
    let date_time = text(signature::GRPC_DATE_TIME)
        .filter(|d| !d.trim().is_empty())
        .ok_or_else(|| Refusal::MalformedCredentials("datetime is null.".to_string()))?;
    let when = signature::parse_date_time(date_time).ok_or_else(|| {
        Refusal::MalformedCredentials(format!(
            "{}: {date_time:?} is not yyyyMMddTHHmmssZ.",
            signature::GRPC_DATE_TIME
        ))
    })?;
    if !signature::date_time_is_current(when, now) {
        return Err(Refusal::MalformedCredentials(format!(
            "{}: {date_time} is more than {} minutes from the broker's clock ({}).",
            signature::GRPC_DATE_TIME,
            signature::GRPC_ALLOWED_SKEW.as_secs() / 60,
            signature::format_date_time(now)
        )));
    }
    let parsed = signature::GrpcAuthorization::parse(authorization)
        .map_err(Refusal::MalformedCredentials)?;
    acl.authenticate(Some(&parsed.access_key), peer, |secret| {
        parsed.verify(secret, date_time)
    })
}

/// A call's authentication outcome, present when ACL is on.
#[derive(Debug, Clone)]
pub(crate) struct CallerIdentity(pub(crate) Result<Identity, Refusal>);

/// The service waits on the stop through its own `watch` receiver.
pub(crate) use crate::listener::shutdown::until_stopped;

#[cfg(test)]
mod tests {
    use super::*;

    fn from(peer: &str) -> tonic::Request<()> {
        let mut request = tonic::Request::new(());
        request.extensions_mut().insert(TcpConnectInfo {
            local_addr: None,
            remote_addr: Some(peer.parse().expect("address")),
        });
        request
    }

    #[test]
    fn protected_mode_refuses_a_grpc_request_from_beyond_loopback_with_the_way_out() {
        let off = AclHandle::default();
        let refused = admit_call(PeerPolicy::LoopbackOnly, &off, from("192.0.2.2:40000"))
            .expect_err("a non-loopback peer is refused");
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        assert!(refused.message().contains("--protected-mode off"));
        assert!(admit_call(PeerPolicy::LoopbackOnly, &off, from("127.0.0.1:40000")).is_ok());
        assert!(admit_call(PeerPolicy::Everyone, &off, from("192.0.2.2:40000")).is_ok());
    }

    fn alice_acl() -> Acl {
        Acl::new(&crate::acl::AclConfig {
            accounts: vec![crate::acl::AccountConfig {
                access_key: "alice".into(),
                secret_key: "alice-secret".into(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .expect("valid acl")
    }

    fn signed(
        authorization: Option<&str>,
        date_time: Option<&str>,
    ) -> tonic::metadata::MetadataMap {
        let mut metadata = tonic::metadata::MetadataMap::new();
        if let Some(a) = authorization {
            metadata.insert("authorization", a.parse().expect("ascii"));
        }
        if let Some(d) = date_time {
            metadata.insert(signature::GRPC_DATE_TIME, d.parse().expect("ascii"));
        }
        metadata
    }

    #[test]
    fn with_users_a_grpc_call_is_authenticated_by_its_signed_date_time() {
        let acl = alice_acl();
        let peer = IpAddr::from([127, 0, 0, 1]);
        let now = signature::parse_date_time("20261205T080000Z").expect("time");
        let good = signature::grpc("alice", "alice-secret", "20261205T075930Z");
        let outcome = |metadata| authenticate_call(&acl, &metadata, peer, now);
        assert!(matches!(
            outcome(signed(Some(&good), Some("20261205T075930Z"))),
            Ok(Identity::User(_))
        ));
        let wrong_secret = signature::grpc("alice", "guess", "20261205T075930Z");
        assert_eq!(
            outcome(signed(Some(&wrong_secret), Some("20261205T075930Z"))).err(),
            Some(Refusal::BadSignature)
        );
        assert_eq!(outcome(signed(None, None)).err(), Some(Refusal::Unsigned));
        let stale = signature::grpc("alice", "alice-secret", "20261205T073000Z");
        let refused = outcome(signed(Some(&stale), Some("20261205T073000Z")))
            .expect_err("a half-hour-old signature is refused");
        assert!(refused.to_string().contains("15 minutes"), "{refused}");
        assert!(matches!(
            outcome(signed(Some(&good), None)),
            Err(Refusal::MalformedCredentials(_))
        ));
        assert!(matches!(
            outcome(signed(
                Some("MQv2-HMAC-SHA1 nonsense"),
                Some("20261205T075930Z")
            )),
            Err(Refusal::MalformedCredentials(_))
        ));
        let unknown = signature::grpc("bob", "x", "20261205T075930Z");
        assert_eq!(
            outcome(signed(Some(&unknown), Some("20261205T075930Z"))).err(),
            Some(Refusal::UnknownUser("bob".into()))
        );
    }

    #[test]
    fn with_users_protected_mode_no_longer_refuses_and_the_outcome_goes_to_the_service() {
        let acl = AclHandle::new(alice_acl());
        let admitted = admit_call(PeerPolicy::LoopbackOnly, &acl, from("192.0.2.2:40000"))
            .expect("reaches the service, which answers in-band");
        let identity = admitted
            .extensions()
            .get::<CallerIdentity>()
            .expect("outcome recorded");
        assert!(matches!(identity.0, Err(Refusal::Unsigned)));
    }
}
