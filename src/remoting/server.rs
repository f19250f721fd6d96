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

use tokio::net::ToSocketAddrs;
use tokio::sync::Semaphore;
use tracing::{debug, error, info, warn};

use super::codes::response;
use super::conn::{ConnOptions, Connection, ReadEnd, RequestSink};
pub use super::conn::{ConnectionHandle, ConnectionId, InvokeError, SendError};
use super::frame::{RemotingCommand, DEFAULT_MAX_FRAME_LEN};
use crate::acl::AclHandle;
pub use crate::listener::admit::DEFAULT_HANDSHAKE_TIMEOUT;
use crate::listener::{
    listen, AcceptEvents, Admission, Admitted, ConnectionSlot, ConnectionSlots, Doors, Handoff,
    Listening, Port, Serve, Stopped, Stream, Uncounted,
};
use crate::protected::{self, PeerPolicy};
use crate::tls::TlsMode;
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

    /// A connection was closed for completing no request, or no frame, in time.
    fn on_timed_out(&self) {}
}

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
    /// The cap shared with the node's other ports; `None`: this server's own, of
    /// `max_connections`.
    pub connection_slots: Option<ConnectionSlots>,
    /// Where refusals, evictions and failed accepts are counted.
    pub events: Arc<dyn AcceptEvents>,
    /// Which peers' requests are served; the others are answered NO_PERMISSION (protected mode).
    pub peers: PeerPolicy,
    /// Users and permissions; with any account configured every request is checked (and
    /// protected mode no longer applies), each failure answered NO_PERMISSION.
    pub acl: AclHandle,
    /// TLS on this port: the acceptor (`None`: plaintext only) and which connections are served.
    pub tls: Option<TlsAcceptor>,
    pub tls_mode: TlsMode,
    /// Where gRPC connections on this port go, told apart by their first bytes; `None`: every
    /// connection is remoting.
    pub grpc: Option<Handoff>,
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
            events: Arc::new(Uncounted),
            peers: PeerPolicy::Everyone,
            acl: AclHandle::default(),
            tls: None,
            tls_mode: TlsMode::Permissive,
            grpc: None,
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
#[derive(Debug)]
pub struct RemotingServer {
    listening: Listening,
}

impl RemotingServer {
    /// Binds `addr` and starts accepting. Must be called inside a tokio runtime.
    pub async fn bind(
        addr: impl ToSocketAddrs,
        config: ServerConfig,
        handler: Arc<dyn RequestHandler>,
    ) -> Result<RemotingServer, ServerError> {
        let listener = listen(addr).await.map_err(ServerError::Bind)?;
        let port = Port {
            door: "remoting",
            admission: Admission {
                doors: match config.grpc {
                    Some(_) => Doors::RemotingAndGrpc,
                    None => Doors::Remoting,
                },
                tls: config.tls.clone(),
                tls_mode: config.tls_mode,
                within: config.handshake_timeout.or(config.idle_timeout),
            },
            slots: config
                .connection_slots
                .clone()
                .unwrap_or_else(|| ConnectionSlots::new(config.max_connections)),
            events: config.events.clone(),
        };
        let door = RemotingDoor {
            opts: ConnOptions {
                max_frame_len: config.max_frame_len,
                write_queue_capacity: config.write_queue_capacity,
                idle_timeout: config.idle_timeout,
                handshake_timeout: config.handshake_timeout,
                frame_timeout: config.frame_timeout,
                partial_frame_budget: Some(Arc::new(Semaphore::new(
                    config.partial_frame_budget.div_ceil(1024),
                ))),
            },
            requests: RequestLimits {
                max_in_flight: config.max_in_flight_per_connection,
                peers: config.peers,
                acl: config.acl.clone(),
            },
            handler,
            grpc: config.grpc,
        };
        let listening =
            Listening::start(listener, port, Arc::new(door)).map_err(ServerError::LocalAddr)?;
        info!(addr = %listening.local_addr(), "remoting server listening");
        Ok(RemotingServer { listening })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listening.local_addr()
    }

    /// Stops accepting, closes every connection and waits until all connection tasks ended
    /// (and `on_close` ran for each).
    pub async fn shutdown(self) {
        self.listening.shutdown().await;
    }
}

/// Serves the main port's admitted connections: remoting here, gRPC handed to its server.
struct RemotingDoor {
    opts: ConnOptions,
    requests: RequestLimits,
    handler: Arc<dyn RequestHandler>,
    grpc: Option<Handoff>,
}

impl Serve for RemotingDoor {
    async fn serve(&self, admitted: Admitted, peer: SocketAddr, stopped: Stopped) {
        match admitted {
            Admitted::Remoting(stream, slot) => {
                let requests = self.requests.clone();
                let handler = self.handler.clone();
                serve_connection(stream, peer, &self.opts, handler, requests, stopped, slot).await
            }
            Admitted::Grpc(stream, slot) => match &self.grpc {
                Some(grpc) => grpc.send(stream, slot, peer),
                None => debug!(peer = %peer, "grpc connection closed: this port does not serve it"),
            },
            Admitted::Http(..) => {
                debug!(peer = %peer, "http connection closed: this port does not serve it")
            }
        }
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
    stream: Stream,
    peer: SocketAddr,
    opts: &ConnOptions,
    handler: Arc<dyn RequestHandler>,
    requests: RequestLimits,
    stop: Stopped,
    slot: ConnectionSlot,
) {
    let conn = match stream {
        Stream::Plain(stream) => Connection::start(stream, peer, opts),
        Stream::Tls(tls) => {
            let local = tls.get_ref().0.local_addr().ok();
            let (read, write) = tokio::io::split(*tls);
            Connection::start_halves(Box::new(read), Box::new(write), peer, local, opts)
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
