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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, error, info, warn};

use super::codes::response;
use super::conn::{flag_set, ConnOptions, Connection, RequestSink};
pub use super::conn::{ConnectionHandle, ConnectionId, InvokeError, SendError};
use super::frame::{RemotingCommand, DEFAULT_MAX_FRAME_LEN};

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
}

/// Takes the connections of another protocol that arrive on the remoting port, told apart by
/// their first byte (a remoting frame starts with the high byte of its length, 0 for any frame
/// under 16 MiB).
pub trait ConnectionHandoff: Send + Sync + std::fmt::Debug {
    /// Whether a connection starting with `first_byte` is this protocol's.
    fn wants(&self, first_byte: u8) -> bool;
    /// Takes the connection, its first bytes still unread, with its place under the cap.
    fn hand_over(&self, stream: TcpStream, peer: SocketAddr, slot: ConnectionSlot);
}

/// The connections a node has open on all its listeners (remoting and gRPC), against one cap:
/// each descriptor a connection holds is one the store cannot use.
#[derive(Clone, Debug)]
pub struct ConnectionSlots {
    open: Arc<AtomicUsize>,
    max: usize,
    refusals: Arc<Mutex<RefusalLog>>,
}

/// One connection's place under the cap, given back when dropped (with the connection).
#[derive(Debug)]
pub struct ConnectionSlot {
    open: Arc<AtomicUsize>,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ConnectionSlots {
    pub fn new(max: usize) -> ConnectionSlots {
        ConnectionSlots {
            open: Arc::new(AtomicUsize::new(0)),
            max: max.max(1),
            refusals: Arc::new(Mutex::new(RefusalLog::default())),
        }
    }

    /// A place for one more connection; `None` at the cap, which is logged (the first
    /// refusal, then one line per [`REFUSAL_LOG_EVERY`] with the count, so a flood of
    /// connections does not flood the log too).
    pub fn take(&self, peer: SocketAddr) -> Option<ConnectionSlot> {
        let taken = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < self.max).then_some(open + 1)
            });
        match taken {
            Ok(_) => Some(ConnectionSlot {
                open: self.open.clone(),
            }),
            Err(open) => {
                let mut log = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
                log.refused(peer, open, self.max);
                None
            }
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    pub fn max(&self) -> usize {
        self.max
    }
}

/// How often refusals at the cap are logged while they last.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct RefusalLog {
    last: Option<std::time::Instant>,
    unlogged: u64,
}

impl RefusalLog {
    fn refused(&mut self, peer: SocketAddr, open: usize, max: usize) {
        let now = std::time::Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < REFUSAL_LOG_EVERY)
        {
            self.unlogged += 1;
            return;
        }
        warn!(peer = %peer, open_connections = open, max_connections = max, refused_since_last_line = self.unlogged, "connection refused: open connections at the cap");
        self.last = Some(now);
        self.unlogged = 0;
    }
}

/// Server settings.
#[derive(Debug, Clone)]
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
    /// Connections open at once; one more is closed as soon as it is accepted, with a log line.
    pub max_connections: usize,
    /// The cap shared with other listeners (the gRPC one); `None`: this server's own, of
    /// `max_connections`.
    pub connection_slots: Option<ConnectionSlots>,
    /// Where connections of another protocol go (gRPC on the main port); `None`: every
    /// connection is remoting.
    pub handoff: Option<Arc<dyn ConnectionHandoff>>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_frame_len: DEFAULT_MAX_FRAME_LEN,
            write_queue_capacity: 1024,
            max_in_flight_per_connection: 1024,
            idle_timeout: Some(Duration::from_secs(120)),
            max_connections: 1000,
            connection_slots: None,
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

impl RemotingServer {
    /// Binds `addr` and starts accepting. Must be called inside a tokio runtime.
    pub async fn bind(
        addr: impl ToSocketAddrs,
        config: ServerConfig,
        handler: Arc<dyn RequestHandler>,
    ) -> Result<RemotingServer, ServerError> {
        let listener = TcpListener::bind(addr).await.map_err(ServerError::Bind)?;
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
                    accept_backoff = ACCEPT_BACKOFF_MIN;
                    let handler = handler.clone();
                    let stop = conn_stop.clone();
                    let handoff = config.handoff.clone();
                    let opts = opts.clone();
                    let in_flight = config.max_in_flight_per_connection;
                    conns.spawn(async move {
                        if let Some(handoff) = handoff {
                            // A silent connection must not hold up the server's shutdown.
                            let mut stopping = stop.clone();
                            let first = tokio::select! {
                                _ = flag_set(&mut stopping) => return,
                                first = first_byte(&stream, opts.idle_timeout) => first,
                            };
                            match first {
                                Some(first) if handoff.wants(first) => {
                                    handoff.hand_over(stream, peer, slot);
                                    return;
                                }
                                Some(_) => {}
                                None => {
                                    debug!(peer = %peer, "connection closed before its first byte");
                                    return;
                                }
                            }
                        }
                        serve_connection(stream, peer, &opts, handler, in_flight, stop).await;
                        drop(slot);
                    });
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

/// Serves one remoting connection until it closes or the server stops.
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    opts: &ConnOptions,
    handler: Arc<dyn RequestHandler>,
    max_in_flight: usize,
    stop: watch::Receiver<bool>,
) {
    let conn = Connection::start(stream, peer, opts);
    debug!(conn = %conn.handle.id(), peer = %peer, "connection accepted");
    handler.on_open(&conn.handle);
    let mut sink = ServerSink {
        handler: handler.clone(),
        permits: Arc::new(Semaphore::new(max_in_flight.max(1))),
    };
    let id = conn.handle.id();
    conn.run(&mut sink, stop).await;
    debug!(conn = %id, "connection closed");
    handler.on_close(id);
}

struct ServerSink {
    handler: Arc<dyn RequestHandler>,
    permits: Arc<Semaphore>,
}

impl RequestSink for ServerSink {
    fn on_request(&mut self, conn: &ConnectionHandle, request: RemotingCommand) {
        let oneway = request.is_oneway();
        let opaque = request.opaque;
        let code = request.code;
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
        tokio::spawn(async move {
            // The handler runs in its own task so that a panic is contained and answered.
            let outcome = tokio::spawn(fut).await;
            drop(permit);
            let response = match outcome {
                Ok(resp) => resp,
                Err(e) => {
                    error!(conn = %conn.id(), code, opaque, error = %e, "request handler failed");
                    Some(RemotingCommand::new_response(
                        response::SYSTEM_ERROR,
                        Some(format!("request handler failed: {e}")),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_shared_by_every_clone_and_given_back_when_a_connection_ends() {
        let peer = SocketAddr::from(([127, 0, 0, 1], 1));
        let remoting = ConnectionSlots::new(2);
        let grpc = remoting.clone();
        let first = remoting.take(peer);
        let second = grpc.take(peer);
        assert!(first.is_some() && second.is_some());
        assert!(remoting.take(peer).is_none(), "over the cap");
        assert!(grpc.take(peer).is_none(), "the cap is shared");
        assert_eq!(remoting.open(), 2);
        drop(second);
        assert_eq!(grpc.open(), 1);
        assert!(remoting.take(peer).is_some());
    }
}
