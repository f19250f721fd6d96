//! The remoting server: accepts connections and passes each request to a [`RequestHandler`].
//!
//! Plain tokio code: it runs on any tokio runtime, including the current-thread runtime of an
//! actix system (it only needs `tokio::spawn`). Per connection a reader decodes frames and a
//! writer task drains a bounded queue; every request runs as its own task, so a slow request
//! (or a long poll) never blocks the connection.
//!
//! Bad input: a frame whose length is over the cap or invalid closes the connection (the
//! stream cannot be re-synchronised); a frame with a bad header is answered SYSTEM_ERROR with
//! a remark when its opaque can be recovered, otherwise the connection is closed (Java's
//! decoder always closes). Other connections are unaffected.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, TcpStream, ToSocketAddrs};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, error, info, warn};

use super::codes::response;
use super::conn::{flag_set, ConnOptions, Connection, ReadEnd, RequestSink};
pub use super::conn::{ConnectionHandle, ConnectionId, InvokeError, SendError};
use super::frame::{RemotingCommand, DEFAULT_MAX_FRAME_LEN};
use crate::acl::AclHandle;
pub use crate::listener::{ConnectionSlot, ConnectionSlots};
use crate::protected::{self, PeerPolicy};
use crate::tls::{speaks_grpc, TlsMode, HANDSHAKE_RECORD};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The future a handler returns: the response, or `None` for no response now (oneway
/// requests, or a long poll answered later with [`ConnectionHandle::send`]).
pub type HandlerFuture = Pin<Box<dyn Future<Output = Option<RemotingCommand>> + Send + 'static>>;

/// Application logic behind a [`RemotingServer`].
pub trait RequestHandler: Send + Sync + 'static {
    /// Handles one request. A returned response gets the request's opaque and the response
    /// flag set by the server; responses to oneway requests are not sent (as in Java).
    /// Unknown codes are the handler's business: answer [`RemotingCommand::not_supported`].
    fn handle(&self, conn: ConnectionHandle, request: RemotingCommand) -> HandlerFuture;

    /// A connection was accepted.
    fn on_open(&self, _conn: &ConnectionHandle) {}

    /// A connection ended (peer close, error, or shutdown). Called once per connection.
    fn on_close(&self, _conn_id: ConnectionId) {}

    /// A connection was closed on accept: the open ones were at the cap.
    fn on_refused(&self) {}

    /// An accept failed; the server backs off before the next.
    fn on_accept_failed(&self) {}

    /// An idle connection was closed at the cap to make room for a newcomer.
    fn on_evicted(&self) {}

    /// A connection was closed for completing no request, or no frame, in time.
    fn on_timed_out(&self) {}
}

/// Takes the connections of another protocol that arrive on the remoting port, told apart by
/// their first byte (a remoting frame starts with the high byte of its length, 0 for any frame
/// under 16 MiB).
pub trait ConnectionHandoff: Send + Sync + std::fmt::Debug {
    /// Whether a connection starting with `first_byte` is this protocol's.
    fn wants(&self, first_byte: u8) -> bool;
    /// Takes the connection, its first bytes still unread, with its place under the cap.
    fn hand_over(&self, stream: TcpStream, peer: SocketAddr, slot: ConnectionSlot);
    /// Takes a connection whose TLS handshake agreed on this protocol (ALPN).
    fn hand_over_tls(&self, stream: TlsStream<TcpStream>, peer: SocketAddr, slot: ConnectionSlot);
}

/// A new connection must complete a request within this (every RocketMQ client sends one as
/// soon as it connects).
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A frame must arrive whole within this once its first bytes have.
pub const DEFAULT_FRAME_TIMEOUT: Duration = Duration::from_secs(30);

/// Server settings.
#[derive(Clone)]
pub struct ServerConfig {
    /// Cap on a whole frame, length field included (default 16 MiB).
    pub max_frame_len: usize,
    /// Bounded write queue per connection.
    pub write_queue_capacity: usize,
    /// Requests of one connection being handled at once; over it the server answers
    /// SYSTEM_BUSY (2) like Java's rejected thread pool.
    pub max_in_flight_per_connection: usize,
    /// A connection that sends nothing for this long is closed (RocketMQ
    /// `serverChannelMaxIdleTimeSeconds`, 120 s); `None` keeps idle connections.
    pub idle_timeout: Option<Duration>,
    /// A connection that has completed no request this long after opening is closed.
    pub handshake_timeout: Option<Duration>,
    /// A connection whose frame takes longer than this to arrive whole is closed.
    pub frame_timeout: Option<Duration>,
    /// Bytes that unfinished frames of all connections may buffer together beyond 32 KiB each
    /// (default twice `max_frame_len`); a connection that needs more waits for its share.
    pub partial_frame_budget: usize,
    /// Connections open at once. At the cap a newcomer takes the place of an idle connection
    /// (see [`ConnectionSlots`]), or is closed as soon as it is accepted, with a log line.
    pub max_connections: usize,
    /// The cap shared with other listeners (the gRPC one); `None`: this server's own, of
    /// `max_connections`.
    pub connection_slots: Option<ConnectionSlots>,
    /// Which peers' requests are served; the others are answered NO_PERMISSION (protected mode).
    pub peers: PeerPolicy,
    /// Users and permissions; with any account configured every request is checked (and
    /// protected mode no longer applies), each failure answered NO_PERMISSION.
    pub acl: AclHandle,
    /// TLS on this port: the acceptor (`None`: plaintext only) and which connections are served.
    pub tls: Option<TlsAcceptor>,
    pub tls_mode: TlsMode,
    /// Where connections of another protocol go (gRPC on the main port); `None`: every
    /// connection is remoting.
    pub handoff: Option<Arc<dyn ConnectionHandoff>>,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("max_frame_len", &self.max_frame_len)
            .field("max_connections", &self.max_connections)
            .field("idle_timeout", &self.idle_timeout)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("frame_timeout", &self.frame_timeout)
            .field("peers", &self.peers)
            .field("tls", &self.tls.as_ref().map(|_| self.tls_mode))
            .finish_non_exhaustive()
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_frame_len: DEFAULT_MAX_FRAME_LEN,
            write_queue_capacity: 1024,
            max_in_flight_per_connection: 1024,
            idle_timeout: Some(Duration::from_secs(120)),
            handshake_timeout: Some(DEFAULT_HANDSHAKE_TIMEOUT),
            frame_timeout: Some(DEFAULT_FRAME_TIMEOUT),
            partial_frame_budget: 2 * DEFAULT_MAX_FRAME_LEN,
            max_connections: 1000,
            connection_slots: None,
            peers: PeerPolicy::Everyone,
            acl: AclHandle::default(),
            tls: None,
            tls_mode: TlsMode::Permissive,
            handoff: None,
        }
    }
}

/// Server errors.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("binding the remoting listener failed")]
    Bind(#[source] std::io::Error),
    #[error("reading the listener's local address failed")]
    LocalAddr(#[source] std::io::Error),
}

/// A running server. Dropping it, or [`RemotingServer::shutdown`], stops accepting and closes
/// every connection.
pub struct RemotingServer {
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// Pending connections the kernel queues for a listener (capped by `net.core.somaxconn`). Above
/// tokio's 1,024: under a flood of connections a full queue drops a newcomer's SYN, and its
/// client waits a second to try again.
pub const LISTEN_BACKLOG: u32 = 4096;

/// Binds a listener on the first address of `addr` that binds, with [`LISTEN_BACKLOG`].
pub async fn listen(addr: impl ToSocketAddrs) -> std::io::Result<TcpListener> {
    let mut last_error = None;
    for addr in tokio::net::lookup_host(addr).await? {
        let socket = match addr {
            SocketAddr::V4(_) => TcpSocket::new_v4()?,
            SocketAddr::V6(_) => TcpSocket::new_v6()?,
        };
        socket.set_reuseaddr(true)?;
        match socket
            .bind(addr)
            .and_then(|()| socket.listen(LISTEN_BACKLOG))
        {
            Ok(listener) => return Ok(listener),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the address resolved to nothing",
        )
    }))
}

impl RemotingServer {
    /// Binds `addr` and starts accepting. Must be called inside a tokio runtime.
    pub async fn bind(
        addr: impl ToSocketAddrs,
        config: ServerConfig,
        handler: Arc<dyn RequestHandler>,
    ) -> Result<RemotingServer, ServerError> {
        let listener = listen(addr).await.map_err(ServerError::Bind)?;
        let local_addr = listener.local_addr().map_err(ServerError::LocalAddr)?;
        let (stop, stop_rx) = watch::channel(false);
        info!(addr = %local_addr, "remoting server listening");
        let task = tokio::spawn(accept_loop(listener, config, handler, stop_rx));
        Ok(RemotingServer {
            local_addr,
            stop,
            task: Some(task),
        })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, closes every connection and waits until all connection tasks ended
    /// (and `on_close` ran for each).
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            if let Err(e) = task.await {
                error!(error = %e, "remoting accept task failed");
            }
        }
    }
}

impl Drop for RemotingServer {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

/// The pause after a failed accept, doubled while failures last.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

async fn accept_loop(
    listener: TcpListener,
    config: ServerConfig,
    handler: Arc<dyn RequestHandler>,
    mut stop: watch::Receiver<bool>,
) {
    let opts = ConnOptions {
        max_frame_len: config.max_frame_len,
        write_queue_capacity: config.write_queue_capacity,
        idle_timeout: config.idle_timeout,
        handshake_timeout: config.handshake_timeout,
        frame_timeout: config.frame_timeout,
        partial_frame_budget: Some(Arc::new(Semaphore::new(
            config.partial_frame_budget.div_ceil(1024),
        ))),
    };
    let mut conns = JoinSet::new();
    let conn_stop = stop.clone();
    let slots = config
        .connection_slots
        .clone()
        .unwrap_or_else(|| ConnectionSlots::new(config.max_connections));
    let mut accept_backoff = ACCEPT_BACKOFF_MIN;
    loop {
        tokio::select! {
            _ = flag_set(&mut stop) => break,
            Some(res) = conns.join_next(), if !conns.is_empty() => {
                if let Err(e) = res {
                    error!(error = %e, "remoting connection task failed");
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Some(slot) = slots.take(peer) else {
                        // Closed at once: the client sees the connection drop and retries, the
                        // operator sees why in the log.
                        drop(stream);
                        handler.on_refused();
                        continue;
                    };
                    if slot.made_room() {
                        handler.on_evicted();
                    }
                    accept_backoff = ACCEPT_BACKOFF_MIN;
                    let handler = handler.clone();
                    let stop = conn_stop.clone();
                    let handoff = config.handoff.clone();
                    let opts = opts.clone();
                    let requests = RequestLimits {
                        max_in_flight: config.max_in_flight_per_connection,
                        peers: config.peers,
                        acl: config.acl.clone(),
                    };
                    let tls = (config.tls.clone(), config.tls_mode);
                    conns.spawn(async move {
                        let Some((stream, slot)) = admit(stream, peer, &opts, handoff, tls, &stop, slot).await else {
                            return;
                        };
                        serve_connection(stream, peer, &opts, handler, requests, stop, slot).await;
                    });
                    // Under a flood of connections, let the ones accepted read their first
                    // request before more arrive to compete for their places.
                    tokio::task::yield_now().await;
                }
                Err(e) => {
                    // Typically out of file descriptors: back off instead of spinning, longer
                    // while it lasts, and take connections again once descriptors are free.
                    warn!(error = %e, backoff_ms = accept_backoff.as_millis() as u64, "accept failed; backing off");
                    handler.on_accept_failed();
                    tokio::select! {
                        _ = flag_set(&mut stop) => break,
                        _ = tokio::time::sleep(accept_backoff) => {}
                    }
                    accept_backoff = (accept_backoff * 2).min(ACCEPT_BACKOFF_MAX);
                }
            }
        }
    }
    drop(listener);
    info!(open_connections = conns.len(), "remoting server stopping");
    while let Some(res) = conns.join_next().await {
        if let Err(e) = res {
            error!(error = %e, "remoting connection task failed");
        }
    }
}

/// A connection the main port serves as remoting, plaintext or after its TLS handshake.
enum RemotingStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// Reads a connection's first byte when there is a choice to make: TLS or not (by the TLS mode),
/// and whose protocol it is. Answers the connection to serve as remoting, or `None` when it went
/// elsewhere (the handoff), closed, or was refused.
async fn admit(
    stream: TcpStream,
    peer: SocketAddr,
    opts: &ConnOptions,
    handoff: Option<Arc<dyn ConnectionHandoff>>,
    (acceptor, tls_mode): (Option<TlsAcceptor>, TlsMode),
    stop: &watch::Receiver<bool>,
    slot: ConnectionSlot,
) -> Option<(RemotingStream, ConnectionSlot)> {
    if handoff.is_none() && acceptor.is_none() {
        return Some((RemotingStream::Plain(stream), slot));
    }
    // A silent connection must not hold up the server's shutdown.
    let mut stopping = stop.clone();
    let within = opts.handshake_timeout.or(opts.idle_timeout);
    let first = tokio::select! {
        _ = flag_set(&mut stopping) => return None,
        _ = slot.evicted() => return None,
        first = first_byte(&stream, within) => first,
    };
    let Some(first) = first else {
        debug!(peer = %peer, "connection closed or silent before its first byte");
        return None;
    };
    if first != HANDSHAKE_RECORD {
        if !tls_mode.serves_plaintext() {
            warn!(peer = %peer, "plaintext connection closed: tls_mode is enforcing");
            return None;
        }
        return match handoff {
            Some(handoff) if handoff.wants(first) => {
                handoff.hand_over(stream, peer, slot);
                None
            }
            _ => Some((RemotingStream::Plain(stream), slot)),
        };
    }
    let Some(acceptor) = acceptor.filter(|_| tls_mode.serves_tls()) else {
        debug!(peer = %peer, "TLS connection closed: tls_mode is disabled");
        return None;
    };
    if let Err(e) = stream.set_nodelay(true) {
        debug!(peer = %peer, error = %e, "set_nodelay failed");
    }
    let handshake = tokio::time::timeout(
        within.unwrap_or(DEFAULT_HANDSHAKE_TIMEOUT),
        acceptor.accept(stream),
    );
    let tls = tokio::select! {
        _ = flag_set(&mut stopping) => return None,
        _ = slot.evicted() => return None,
        tls = handshake => match tls {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                debug!(peer = %peer, error = %e, "TLS handshake failed");
                return None;
            }
            Err(_) => {
                debug!(peer = %peer, "TLS handshake did not finish in time");
                return None;
            }
        },
    };
    match handoff {
        Some(handoff) if speaks_grpc(&tls) => {
            handoff.hand_over_tls(tls, peer, slot);
            None
        }
        _ => Some((RemotingStream::Tls(Box::new(tls)), slot)),
    }
}

/// The first byte a connection sends, without reading it; `None` if it closes (or sends
/// nothing within `within`) first.
async fn first_byte(stream: &TcpStream, within: Option<Duration>) -> Option<u8> {
    let mut first = [0u8; 1];
    let peek = stream.peek(&mut first);
    let read = match within {
        Some(limit) => tokio::time::timeout(limit, peek).await.ok()?,
        None => peek.await,
    };
    match read {
        Ok(n) if n > 0 => Some(first[0]),
        _ => None,
    }
}

/// What the server allows each connection's requests.
#[derive(Debug, Clone)]
struct RequestLimits {
    max_in_flight: usize,
    peers: PeerPolicy,
    acl: AclHandle,
}

/// Serves one remoting connection until it closes or the server stops.
async fn serve_connection(
    stream: RemotingStream,
    peer: SocketAddr,
    opts: &ConnOptions,
    handler: Arc<dyn RequestHandler>,
    requests: RequestLimits,
    stop: watch::Receiver<bool>,
    slot: ConnectionSlot,
) {
    let conn = match stream {
        RemotingStream::Plain(stream) => Connection::start(stream, peer, opts),
        RemotingStream::Tls(tls) => {
            let (read, write) = tokio::io::split(*tls);
            Connection::start_halves(Box::new(read), Box::new(write), peer, opts)
        }
    };
    debug!(conn = %conn.handle.id(), peer = %peer, "connection accepted");
    handler.on_open(&conn.handle);
    let slot = Arc::new(slot);
    let mut sink = ServerSink {
        handler: handler.clone(),
        permits: Arc::new(Semaphore::new(requests.max_in_flight.max(1))),
        slot: slot.clone(),
        in_protected_reach: requests.peers.serves(peer.ip()),
        acl: requests.acl,
    };
    let id = conn.handle.id();
    let end = conn.run(&mut sink, stop, Some(&slot)).await;
    if end == ReadEnd::TimedOut {
        handler.on_timed_out();
    }
    debug!(conn = %id, "connection closed");
    handler.on_close(id);
}

struct ServerSink {
    handler: Arc<dyn RequestHandler>,
    permits: Arc<Semaphore>,
    /// The connection's place under the cap: busy while a request runs.
    slot: Arc<ConnectionSlot>,
    /// False for a peer protected mode does not serve: with no users configured, each request
    /// is refused unprocessed.
    in_protected_reach: bool,
    acl: AclHandle,
}

impl ServerSink {
    /// Why `request` is not served, if it is not: protected mode, or the ACL.
    fn refusal(&self, conn: &ConnectionHandle, request: &RemotingCommand) -> Option<String> {
        let acl = self.acl.current();
        if !acl.is_on() {
            if self.in_protected_reach {
                return None;
            }
            debug!(conn = %conn.id(), peer = %conn.peer_addr(), code = request.code, "request refused: protected mode serves loopback peers only");
            return Some(protected::REFUSAL.to_owned());
        }
        let refusal = acl.check_remoting(request, conn.peer_addr().ip()).err()?;
        debug!(
            conn = %conn.id(),
            peer = %conn.peer_addr(),
            code = request.code,
            access_key = request.ext(crate::acl::signature::ACCESS_KEY).unwrap_or(""),
            reason = %refusal,
            "request refused by the acl"
        );
        Some(refusal.to_string())
    }
}

impl RequestSink for ServerSink {
    fn on_request(&mut self, conn: &ConnectionHandle, request: RemotingCommand) {
        let oneway = request.is_oneway();
        let opaque = request.opaque;
        let code = request.code;
        if let Some(remark) = self.refusal(conn, &request) {
            if !oneway {
                let refused =
                    RemotingCommand::response_to(&request, response::NO_PERMISSION, Some(remark));
                let _ = conn.try_send(refused);
            }
            return;
        }
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            warn!(conn = %conn.id(), code, opaque, "too many requests in flight on one connection");
            if !oneway {
                let busy = RemotingCommand::response_to(
                    &request,
                    response::SYSTEM_BUSY,
                    Some(crate::remoting::codes::OVERLOAD_REMARK.to_owned()),
                );
                let _ = conn.try_send(busy);
            }
            return;
        };
        let fut = self.handler.handle(conn.clone(), request);
        let conn = conn.clone();
        let busy = self.slot.request_started();
        tokio::spawn(async move {
            // A panic in the handler is contained and answered, as a task of its own would
            // contain it, without a second task per request.
            let outcome = CatchPanic(fut).await;
            drop(permit);
            drop(busy);
            let response = match outcome {
                Ok(resp) => resp,
                Err(panic) => {
                    error!(conn = %conn.id(), code, opaque, panic = %panic, "request handler failed");
                    Some(RemotingCommand::new_response(
                        response::SYSTEM_ERROR,
                        Some(format!("request handler failed: {panic}")),
                    ))
                }
            };
            let Some(mut response) = response else {
                return;
            };
            if oneway {
                debug!(conn = %conn.id(), code, opaque, "response to a oneway request not sent");
                return;
            }
            response.opaque = opaque;
            response.mark_response();
            if let Err(e) = conn.send(response).await {
                debug!(conn = %conn.id(), code, opaque, error = %e, "response not sent");
            }
        });
    }
}

/// A handler's future whose panic becomes an error: the panic's message.
struct CatchPanic(HandlerFuture);

impl Future for CatchPanic {
    type Output = Result<Option<RemotingCommand>, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let polled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.0.as_mut().poll(cx)));
        match polled {
            Ok(Poll::Ready(response)) => Poll::Ready(Ok(response)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panicked".to_owned()))),
        }
    }
}
