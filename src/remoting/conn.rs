//! One remoting connection, shared by the server and the client: a reader loop decoding
//! frames, a writer task fed by a bounded channel, and a table of requests awaiting their
//! response (correlated by opaque).

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::{debug, info, trace, warn};

use super::frame::{self, RemotingCommand, FLAG_RESPONSE};
use crate::error_text::error_chain;
use crate::listener::{ConnectionSlot, Stop, Stopped};

/// Identifies one connection for the lifetime of the process; the broker's registry of
/// client connections knows a remoting connection by it.
pub use skiff_actors::broker_api::ConnectionId;

/// A command could not be queued for writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("connection {0} is closed")]
    Closed(ConnectionId),
    #[error("write queue of connection {0} is full")]
    Full(ConnectionId),
}

/// A request sent on a connection got no usable response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvokeError {
    #[error("connection {conn} closed before the response to request {opaque}")]
    Closed { conn: ConnectionId, opaque: i32 },
    #[error("request {opaque} on connection {conn} timed out after {timeout:?}")]
    Timeout {
        conn: ConnectionId,
        opaque: i32,
        timeout: Duration,
    },
    #[error("response to request {opaque} on connection {conn} could not be decoded: {reason}")]
    BadResponse {
        conn: ConnectionId,
        opaque: i32,
        reason: String,
    },
}

type Pending = oneshot::Sender<Result<RemotingCommand, String>>;

struct Shared {
    id: ConnectionId,
    peer: SocketAddr,
    /// This end's address: the one the peer dialled.
    local: Option<SocketAddr>,
    tx: mpsc::Sender<RemotingCommand>,
    closed: Stop,
    pending: Mutex<HashMap<i32, Pending>>,
}

/// A cloneable handle on one connection: identifies it, sends commands on it (responses,
/// server-initiated requests), and tells whether it is closed.
#[derive(Clone)]
pub struct ConnectionHandle {
    shared: Arc<Shared>,
}

impl fmt::Debug for ConnectionHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionHandle")
            .field("id", &self.shared.id)
            .field("peer", &self.shared.peer)
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl ConnectionHandle {
    /// The connection id.
    pub fn id(&self) -> ConnectionId {
        self.shared.id
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.shared.peer
    }

    /// The address the peer dialled (this end of the connection), when the socket told it.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.shared.local
    }

    /// True once the connection is closed (by either side or by shutdown).
    pub fn is_closed(&self) -> bool {
        self.shared.closed.is_stopped()
    }

    /// Completes when the connection is closed.
    pub async fn closed(&self) {
        self.shared.closed.stopped().wait().await;
    }

    /// Closes the connection: stops reading and writing; queued commands are dropped.
    pub fn close(&self) {
        self.shared.closed.stop();
    }

    /// Queues a command for writing, waiting while the write queue is full.
    pub async fn send(&self, cmd: RemotingCommand) -> Result<(), SendError> {
        if self.is_closed() {
            return Err(SendError::Closed(self.id()));
        }
        self.shared
            .tx
            .send(cmd)
            .await
            .map_err(|_| SendError::Closed(self.id()))
    }

    /// Queues a command for writing without waiting.
    pub fn try_send(&self, cmd: RemotingCommand) -> Result<(), SendError> {
        if self.is_closed() {
            return Err(SendError::Closed(self.id()));
        }
        self.shared.tx.try_send(cmd).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => SendError::Full(self.id()),
            mpsc::error::TrySendError::Closed(_) => SendError::Closed(self.id()),
        })
    }

    /// Sends a request on this connection and waits for its response. The request gets a
    /// fresh opaque; it must not be oneway.
    pub async fn invoke(
        &self,
        mut cmd: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, InvokeError> {
        let deadline = tokio::time::Instant::now() + timeout;
        cmd.opaque = frame::next_opaque();
        cmd.flag &= !FLAG_RESPONSE;
        let opaque = cmd.opaque;
        let conn = self.id();
        let rx = self.register(opaque);
        let closed = InvokeError::Closed { conn, opaque };
        let timed_out = InvokeError::Timeout {
            conn,
            opaque,
            timeout,
        };
        match tokio::time::timeout_at(deadline, self.send(cmd)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                self.unregister(opaque);
                return Err(closed);
            }
            Err(_) => {
                self.unregister(opaque);
                return Err(timed_out);
            }
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(Ok(resp))) => Ok(resp),
            Ok(Ok(Err(reason))) => Err(InvokeError::BadResponse {
                conn,
                opaque,
                reason,
            }),
            Ok(Err(_)) => Err(closed),
            Err(_) => {
                self.unregister(opaque);
                Err(timed_out)
            }
        }
    }

    fn register(&self, opaque: i32) -> oneshot::Receiver<Result<RemotingCommand, String>> {
        let (tx, rx) = oneshot::channel();
        let mut pending = lock(&self.shared.pending);
        pending.insert(opaque, tx);
        // If the connection closed meanwhile, the reader may already have drained the table.
        if self.is_closed() {
            pending.remove(&opaque);
        }
        rx
    }

    fn unregister(&self, opaque: i32) {
        lock(&self.shared.pending).remove(&opaque);
    }

    /// Hands a response to whoever waits for it; false when nobody does.
    fn complete(&self, opaque: i32, result: Result<RemotingCommand, String>) -> bool {
        let waiter = lock(&self.shared.pending).remove(&opaque);
        match waiter {
            Some(tx) => {
                let _ = tx.send(result);
                true
            }
            None => false,
        }
    }

    fn fail_all_pending(&self) {
        let drained: Vec<Pending> = lock(&self.shared.pending).drain().map(|(_, v)| v).collect();
        drop(drained);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned table is still consistent (single inserts/removes): keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a connection does with inbound requests (server: run the handler; client: the hook).
pub(crate) trait RequestSink: Send + 'static {
    fn on_request(&mut self, conn: &ConnectionHandle, cmd: RemotingCommand);
}

#[derive(Clone)]
pub(crate) struct ConnOptions {
    pub max_frame_len: usize,
    pub write_queue_capacity: usize,
    /// Close the connection when the peer sent nothing for this long (server side).
    pub idle_timeout: Option<Duration>,
    /// Close the connection when it has completed no request this long after opening (server
    /// side): a flood of silent or trickling connections does not stay.
    pub handshake_timeout: Option<Duration>,
    /// Close the connection when a frame takes longer than this to arrive whole (server side):
    /// a peer trickling bytes keeps the idle timer away but not this one.
    pub frame_timeout: Option<Duration>,
    /// Bytes of unfinished frames the server's connections may buffer together beyond
    /// [`FREE_PARTIAL_FRAME`] each, in KiB permits (server side); a connection that needs more
    /// stops reading until some is given back.
    pub partial_frame_budget: Option<Arc<Semaphore>>,
}

/// What each connection may buffer of an unfinished frame without drawing on the shared budget:
/// every ordinary request fits.
pub(crate) const FREE_PARTIAL_FRAME: usize = 32 * 1024;

/// Why a connection's reader stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadEnd {
    /// The peer closed, a read failed, a fatal decode error, a local close or shutdown.
    Closed,
    /// Idle, no request completed in time, or a frame too slow.
    TimedOut,
    /// Chosen to make room for a newcomer at the connection cap.
    Evicted,
}

/// Creates the handle and the writer task of a new connection; the caller then drives
/// [`read_loop`] and, when it returns, awaits [`Connection::finish`].
pub(crate) struct Connection {
    pub handle: ConnectionHandle,
    read: ConnReader,
    writer: tokio::task::JoinHandle<()>,
    opts: ConnOptions,
}

/// The read half of a connection: a TCP stream's, or a TLS stream's.
pub(crate) type ConnReader = Box<dyn AsyncRead + Send + Unpin>;
/// The write half of a connection.
pub(crate) type ConnWriter = Box<dyn AsyncWrite + Send + Unpin>;

impl Connection {
    pub fn start(stream: TcpStream, peer: SocketAddr, opts: &ConnOptions) -> Connection {
        if let Err(e) = stream.set_nodelay(true) {
            debug!(peer = %peer, error = %e, "set_nodelay failed");
        }
        let local = stream.local_addr().ok();
        let (read, write) = stream.into_split();
        Connection::start_halves(Box::new(read), Box::new(write), peer, local, opts)
    }

    /// A connection over any byte stream (TLS), split into its halves.
    pub fn start_halves(
        read: ConnReader,
        write: ConnWriter,
        peer: SocketAddr,
        local: Option<SocketAddr>,
        opts: &ConnOptions,
    ) -> Connection {
        let (tx, rx) = mpsc::channel(opts.write_queue_capacity.max(1));
        let closed = Stop::new();
        let id = ConnectionId::next();
        let handle = ConnectionHandle {
            shared: Arc::new(Shared {
                id,
                peer,
                local,
                tx,
                closed,
                pending: Mutex::new(HashMap::new()),
            }),
        };
        let writer = tokio::spawn(write_loop(write, rx, handle.clone(), opts.max_frame_len));
        Connection {
            handle,
            read,
            writer,
            opts: opts.clone(),
        }
    }

    /// Reads until the peer closes, a fatal decode error, a close of the handle, `stop`, a
    /// deadline or (with a `slot`) an eviction; then closes the connection, fails pending
    /// requests and waits for the writer.
    pub async fn run<S: RequestSink>(
        self,
        sink: &mut S,
        stop: Stopped,
        slot: Option<&ConnectionSlot>,
    ) -> ReadEnd {
        let Connection {
            handle,
            read,
            writer,
            opts,
        } = self;
        let end = read_loop(read, &handle, sink, &stop, &opts, slot).await;
        handle.close();
        handle.fail_all_pending();
        if let Err(e) = writer.await {
            warn!(conn = %handle.id(), error = %e, "connection writer task failed");
        }
        end
    }
}

/// Far enough ahead to stand for "never" in a timer whose branch is disabled.
const NEVER: Duration = Duration::from_secs(86_400 * 365);

async fn read_loop<S: RequestSink>(
    mut read: ConnReader,
    conn: &ConnectionHandle,
    sink: &mut S,
    stop: &Stopped,
    opts: &ConnOptions,
    slot: Option<&ConnectionSlot>,
) -> ReadEnd {
    let closed_flag = conn.shared.closed.stopped();
    // Made once, not per read: each read would otherwise register two fresh watch waiters.
    let closed = closed_flag.wait();
    let stopped = stop.wait();
    tokio::pin!(closed, stopped);
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let opened = Instant::now();
    // The idle timer is not moved by every read (a timer-wheel update per request): when it
    // fires, it is moved to the last read's deadline if that is still ahead.
    let mut last_read = opened;
    // Timers are made once and reset, not made per read: the loop runs for every read.
    let idle = tokio::time::sleep_until(opened + opts.idle_timeout.unwrap_or(NEVER));
    let handshake = tokio::time::sleep_until(opened + opts.handshake_timeout.unwrap_or(NEVER));
    let frame_timer = tokio::time::sleep_until(opened + NEVER);
    tokio::pin!(idle, handshake, frame_timer);
    let mut frame_started = false;
    // KiB of the shared budget this connection's unfinished frame holds.
    let mut held: Option<OwnedSemaphorePermit> = None;
    let mut completed_any = false;
    loop {
        let mut decoded = false;
        loop {
            match frame::decode_frame(&mut buf, opts.max_frame_len) {
                Ok(Some(cmd)) => {
                    decoded = true;
                    completed_any = true;
                    dispatch(conn, sink, cmd);
                }
                Ok(None) => break,
                Err(e) => {
                    if !on_decode_error(conn, &e) {
                        return ReadEnd::Closed;
                    }
                }
            }
        }
        if buf.is_empty() {
            frame_started = false;
        } else if decoded || !frame_started {
            frame_started = true;
            if let Some(timeout) = opts.frame_timeout {
                frame_timer.as_mut().reset(Instant::now() + timeout);
            }
        }
        // A frame larger than the free allowance is read only once the shared budget holds its
        // whole declared length, into a buffer of exactly that size: what unfinished frames
        // occupy stays within the budget however many peers announce large ones.
        let need_kib = match (&opts.partial_frame_budget, declared_frame_len(&buf)) {
            (Some(_), Some(total)) if total > FREE_PARTIAL_FRAME && total <= opts.max_frame_len => {
                total.div_ceil(1024)
            }
            _ => 0,
        };
        if need_kib == 0 && held.is_some() {
            // The large frame went by: let its buffer go (the frame lives on in its handler)
            // and give its share back.
            let mut smaller = BytesMut::with_capacity(8 * 1024);
            smaller.extend_from_slice(&buf);
            buf = smaller;
            held = None;
            if let Some(slot) = slot {
                slot.receiving_large_frame(false);
            }
        }
        let held_kib = held.as_ref().map_or(0, |p| p.num_permits());
        let more_kib = u32::try_from(need_kib.saturating_sub(held_kib)).unwrap_or(u32::MAX);
        let budget = opts
            .partial_frame_budget
            .as_ref()
            .filter(|_| more_kib > 0)
            .cloned();
        let waiting_for_budget = budget.is_some();
        if need_kib > 0 && !waiting_for_budget {
            buf.reserve((need_kib * 1024).saturating_sub(buf.len()));
        } else if buf.capacity() - buf.len() < 4096 {
            buf.reserve(8 * 1024);
        }
        let awaiting_first_request = opts.handshake_timeout.is_some() && !completed_any;
        let timing_frame = opts.frame_timeout.is_some() && frame_started;
        tokio::select! {
            _ = &mut closed => {
                debug!(conn = %conn.id(), "connection closed locally");
                return ReadEnd::Closed;
            }
            _ = &mut stopped => {
                debug!(conn = %conn.id(), "connection closed by shutdown");
                return ReadEnd::Closed;
            }
            _ = async { slot?.evicted().await; Some(()) }, if slot.is_some() => {
                debug!(conn = %conn.id(), peer = %conn.peer_addr(), "closing an idle connection to make room for a newcomer");
                return ReadEnd::Evicted;
            }
            _ = &mut idle, if opts.idle_timeout.is_some() => {
                let deadline = last_read + opts.idle_timeout.unwrap_or(NEVER);
                if deadline > Instant::now() {
                    idle.as_mut().reset(deadline);
                    continue;
                }
                info!(
                    conn = %conn.id(),
                    peer = %conn.peer_addr(),
                    idle_secs = opts.idle_timeout.unwrap_or_default().as_secs(),
                    "closing an idle connection"
                );
                return ReadEnd::TimedOut;
            }
            _ = &mut handshake, if awaiting_first_request => {
                debug!(
                    conn = %conn.id(),
                    peer = %conn.peer_addr(),
                    secs = opts.handshake_timeout.unwrap_or_default().as_secs(),
                    "closing a connection that completed no request in time"
                );
                return ReadEnd::TimedOut;
            }
            _ = &mut frame_timer, if timing_frame => {
                debug!(
                    conn = %conn.id(),
                    peer = %conn.peer_addr(),
                    buffered = buf.len(),
                    secs = opts.frame_timeout.unwrap_or_default().as_secs(),
                    "closing a connection whose frame did not arrive in time"
                );
                return ReadEnd::TimedOut;
            }
            permit = async { budget?.acquire_many_owned(more_kib).await.ok() }, if waiting_for_budget => {
                let Some(permit) = permit else {
                    return ReadEnd::Closed;
                };
                match held.as_mut() {
                    Some(held) => held.merge(permit),
                    None => held = Some(permit),
                }
                if let Some(slot) = slot {
                    slot.receiving_large_frame(true);
                }
            }
            res = read.read_buf(&mut buf), if !waiting_for_budget => match res {
                Ok(0) => {
                    if buf.is_empty() {
                        debug!(conn = %conn.id(), peer = %conn.peer_addr(), "peer closed the connection");
                    } else {
                        warn!(
                            conn = %conn.id(),
                            peer = %conn.peer_addr(),
                            buffered = buf.len(),
                            "peer closed the connection in the middle of a frame"
                        );
                    }
                    return ReadEnd::Closed;
                }
                Ok(n) => {
                    trace!(conn = %conn.id(), bytes = n, "read");
                    if opts.idle_timeout.is_some() {
                        last_read = Instant::now();
                    }
                    if let Some(slot) = slot {
                        slot.mark_read();
                    }
                }
                Err(e) => {
                    debug!(conn = %conn.id(), peer = %conn.peer_addr(), error = %e, "read failed");
                    return ReadEnd::Closed;
                }
            }
        }
    }
}

/// The whole length (length field included) of the frame starting `buf`, once its length field
/// is there.
fn declared_frame_len(buf: &[u8]) -> Option<usize> {
    let field: [u8; 4] = buf.get(..4)?.try_into().ok()?;
    let len = usize::try_from(i32::from_be_bytes(field)).ok()?;
    len.checked_add(4)
}

fn dispatch<S: RequestSink>(conn: &ConnectionHandle, sink: &mut S, cmd: RemotingCommand) {
    if cmd.is_response() {
        let opaque = cmd.opaque;
        if !conn.complete(opaque, Ok(cmd)) {
            debug!(conn = %conn.id(), opaque, "response matches no pending request");
        }
    } else {
        trace!(conn = %conn.id(), code = cmd.code, opaque = cmd.opaque, "request received");
        sink.on_request(conn, cmd);
    }
}

/// Handles a frame decode error; returns false when the connection must close.
fn on_decode_error(conn: &ConnectionHandle, err: &frame::FrameError) -> bool {
    let error = error_chain(err);
    if err.is_fatal() {
        warn!(conn = %conn.id(), peer = %conn.peer_addr(), error = %error, "undecodable stream, closing connection");
        return false;
    }
    if let Some(resp) = err.error_response() {
        warn!(conn = %conn.id(), peer = %conn.peer_addr(), opaque = resp.opaque, error = %error, "undecodable request answered with an error");
        if conn.try_send(resp).is_err() {
            return false;
        }
        return true;
    }
    if let Some(ids) = err.recovered() {
        if ids.flag.is_some_and(|f| f & FLAG_RESPONSE != 0)
            && conn.complete(ids.opaque, Err(error.clone()))
        {
            warn!(conn = %conn.id(), opaque = ids.opaque, error = %error, "undecodable response");
            return true;
        }
        if ids.flag.is_some_and(|f| f & frame::FLAG_ONEWAY != 0) {
            warn!(conn = %conn.id(), opaque = ids.opaque, error = %error, "undecodable oneway request dropped");
            return true;
        }
    }
    warn!(conn = %conn.id(), peer = %conn.peer_addr(), error = %error, "undecodable frame, closing connection");
    false
}

const WRITE_BATCH_BYTES: usize = 256 * 1024;

async fn write_loop(
    mut write: ConnWriter,
    mut rx: mpsc::Receiver<RemotingCommand>,
    conn: ConnectionHandle,
    max_frame_len: usize,
) {
    let closed_flag = conn.shared.closed.stopped();
    let closed = closed_flag.wait();
    tokio::pin!(closed);
    let mut buf = BytesMut::with_capacity(8 * 1024);
    loop {
        let first = tokio::select! {
            _ = &mut closed => break,
            msg = rx.recv() => match msg {
                Some(cmd) => cmd,
                None => break,
            },
        };
        encode_into(&conn, &first, &mut buf, max_frame_len);
        while buf.len() < WRITE_BATCH_BYTES {
            match rx.try_recv() {
                Ok(cmd) => encode_into(&conn, &cmd, &mut buf, max_frame_len),
                Err(_) => break,
            }
        }
        if buf.is_empty() {
            continue;
        }
        let res = tokio::select! {
            _ = &mut closed => break,
            res = write.write_all(&buf) => res,
        };
        buf.clear();
        if let Err(e) = res {
            debug!(conn = %conn.id(), peer = %conn.peer_addr(), error = %e, "write failed");
            break;
        }
    }
    conn.close();
    let _ = write.shutdown().await;
}

fn encode_into(conn: &ConnectionHandle, cmd: &RemotingCommand, buf: &mut BytesMut, max: usize) {
    let start = buf.len();
    match frame::encode(cmd, buf) {
        Ok(()) => {
            let len = buf.len() - start;
            if len > max {
                warn!(conn = %conn.id(), code = cmd.code, opaque = cmd.opaque, len, max, "outgoing frame over the frame cap dropped");
                buf.truncate(start);
                if cmd.is_response() {
                    // The peer waits for this answer: it gets an error it can act on instead.
                    let mut refused = RemotingCommand::new_response(
                        super::codes::response::SYSTEM_ERROR,
                        Some(format!(
                            "the answer is {len} bytes, over the frame cap of {max} bytes; ask for less (GET_ALL_TOPIC_CONFIG in pages: topicSeq, maxTopicNum)"
                        )),
                    );
                    refused.opaque = cmd.opaque;
                    refused.mark_response();
                    if let Err(e) = frame::encode(&refused, buf) {
                        warn!(conn = %conn.id(), error = %error_chain(&e), "refusal could not be encoded");
                    }
                }
            }
        }
        Err(e) => {
            warn!(conn = %conn.id(), code = cmd.code, opaque = cmd.opaque, error = %error_chain(&e), "outgoing command could not be encoded");
        }
    }
}
