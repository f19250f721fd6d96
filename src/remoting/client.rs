//! The remoting client: a pool of connections keyed by address, request/response correlation
//! by opaque, oneway sends, timeouts, and a hook for requests the server sends on the
//! connection (e.g. NOTIFY_CONSUMER_IDS_CHANGED, which can arrive before the response being
//! awaited).
//!
//! Plain tokio code, usable inside an actix system.

use crate::acl::signature::{sign_remoting, Credentials};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::conn::{ConnOptions, Connection, RequestSink};
pub use super::conn::{ConnectionHandle, ConnectionId, InvokeError, SendError};
use super::frame::{self, RemotingCommand, DEFAULT_MAX_FRAME_LEN};
use crate::listener::Stop;

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Cap on a whole frame received, length field included (default 16 MiB).
    pub max_frame_len: usize,
    /// Bounded write queue per connection.
    pub write_queue_capacity: usize,
    /// Upper bound on connecting (the request timeout also bounds it).
    pub connect_timeout: Duration,
    /// Signs every request with these keys (a broker with ACL on needs it).
    pub credentials: Option<Credentials>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            max_frame_len: DEFAULT_MAX_FRAME_LEN,
            write_queue_capacity: 1024,
            connect_timeout: Duration::from_secs(3),
            credentials: None,
        }
    }
}

/// Client errors.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connecting to {addr} failed")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("connecting to {addr} timed out after {timeout:?}")]
    ConnectTimeout { addr: String, timeout: Duration },
    #[error("request {opaque} to {addr} timed out after {timeout:?}")]
    Timeout {
        addr: String,
        opaque: i32,
        timeout: Duration,
    },
    #[error("connection to {addr} closed before request {opaque} completed")]
    ConnectionClosed { addr: String, opaque: i32 },
    #[error("response to request {opaque} from {addr} could not be decoded: {reason}")]
    BadResponse {
        addr: String,
        opaque: i32,
        reason: String,
    },
    #[error("the remoting client is shut down")]
    Shutdown,
}

/// A request the server sent on one of the client's connections.
#[derive(Debug, Clone)]
pub struct InboundRequest {
    /// The address the connection was opened to (the pool key).
    pub addr: String,
    pub request: RemotingCommand,
    /// The connection it arrived on, to answer with [`InboundRequest::reply`].
    pub conn: ConnectionHandle,
}

impl InboundRequest {
    /// Answers the request (opaque copied, response flag set). Oneway requests get no answer.
    pub async fn reply(&self, mut response: RemotingCommand) -> Result<(), SendError> {
        if self.request.is_oneway() {
            return Ok(());
        }
        response.opaque = self.request.opaque;
        response.mark_response();
        self.conn.send(response).await
    }
}

/// Called on the connection's reader for every request the server sends; keep it quick
/// (forward into a channel). Without a hook, requests are answered REQUEST_CODE_NOT_SUPPORTED.
pub type RequestHook = Arc<dyn Fn(InboundRequest) + Send + Sync>;

type HookSlot = Arc<RwLock<Option<RequestHook>>>;
type PoolSlot = Arc<tokio::sync::Mutex<Option<ConnectionHandle>>>;

struct Inner {
    config: ClientConfig,
    hook: HookSlot,
    pool: Mutex<HashMap<String, PoolSlot>>,
    /// Raised by `shutdown` and when the last clone goes: ends every connection.
    stop: Stop,
}

/// A cloneable remoting client. Dropping the last clone closes its connections.
#[derive(Clone)]
pub struct RemotingClient {
    inner: Arc<Inner>,
}

impl RemotingClient {
    /// A client without a request hook.
    pub fn new(config: ClientConfig) -> Self {
        let stop = Stop::new();
        RemotingClient {
            inner: Arc::new(Inner {
                config,
                hook: Arc::new(RwLock::new(None)),
                pool: Mutex::new(HashMap::new()),
                stop,
            }),
        }
    }

    /// Installs (or replaces) the hook for server-initiated requests; it applies to existing
    /// connections too.
    pub fn set_request_hook(&self, hook: RequestHook) {
        *self.inner.hook.write().unwrap_or_else(|e| e.into_inner()) = Some(hook);
    }

    /// Installs a hook forwarding server-initiated requests into a bounded channel; requests
    /// that do not fit are dropped with a warning (the reader never blocks).
    pub fn request_channel(&self, capacity: usize) -> mpsc::Receiver<InboundRequest> {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        self.set_request_hook(Arc::new(move |req: InboundRequest| {
            let code = req.request.code;
            if let Err(e) = tx.try_send(req) {
                warn!(code, error = %e, "server request dropped: request channel full or closed");
            }
        }));
        rx
    }

    /// Sends `request` to `addr` and waits for its response, at most `timeout` in all
    /// (connecting included). The request gets a fresh opaque.
    pub async fn invoke(
        &self,
        addr: &str,
        mut request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, ClientError> {
        if let Some(credentials) = &self.inner.config.credentials {
            sign_remoting(&mut request, credentials);
        }
        let deadline = Instant::now() + timeout;
        let conn = self.connection(addr, deadline).await?;
        match conn.invoke(request, remaining(deadline)).await {
            Ok(resp) => Ok(resp),
            Err(e) => Err(match e {
                InvokeError::Closed { opaque, .. } => {
                    self.evict(addr, &conn);
                    ClientError::ConnectionClosed {
                        addr: addr.to_owned(),
                        opaque,
                    }
                }
                InvokeError::Timeout { opaque, .. } => ClientError::Timeout {
                    addr: addr.to_owned(),
                    opaque,
                    timeout,
                },
                InvokeError::BadResponse { opaque, reason, .. } => ClientError::BadResponse {
                    addr: addr.to_owned(),
                    opaque,
                    reason,
                },
            }),
        }
    }

    /// Sends `request` as a oneway request (flag bit 1, fresh opaque); completes once it is
    /// queued for writing, within `timeout`.
    pub async fn invoke_oneway(
        &self,
        addr: &str,
        mut request: RemotingCommand,
        timeout: Duration,
    ) -> Result<(), ClientError> {
        let deadline = Instant::now() + timeout;
        let conn = self.connection(addr, deadline).await?;
        request.opaque = frame::next_opaque();
        request.flag &= !frame::FLAG_RESPONSE;
        request.mark_oneway();
        if let Some(credentials) = &self.inner.config.credentials {
            sign_remoting(&mut request, credentials);
        }
        let opaque = request.opaque;
        match tokio::time::timeout_at(deadline, conn.send(request)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => {
                self.evict(addr, &conn);
                Err(ClientError::ConnectionClosed {
                    addr: addr.to_owned(),
                    opaque,
                })
            }
            Err(_) => Err(ClientError::Timeout {
                addr: addr.to_owned(),
                opaque,
                timeout,
            }),
        }
    }

    /// The pooled connection to `addr`, connecting (or reconnecting) when needed.
    pub async fn connection_to(
        &self,
        addr: &str,
        timeout: Duration,
    ) -> Result<ConnectionHandle, ClientError> {
        self.connection(addr, Instant::now() + timeout).await
    }

    /// Closes the pooled connection to `addr`, if any.
    pub fn close_connection(&self, addr: &str) {
        let slot = lock(&self.inner.pool).remove(addr);
        if let Some(slot) = slot {
            if let Ok(guard) = slot.try_lock() {
                if let Some(conn) = guard.as_ref() {
                    conn.close();
                }
            }
        }
    }

    /// Closes every connection; later calls fail with [`ClientError::Shutdown`].
    pub fn shutdown(&self) {
        self.inner.stop.stop();
        lock(&self.inner.pool).clear();
    }

    async fn connection(
        &self,
        addr: &str,
        deadline: Instant,
    ) -> Result<ConnectionHandle, ClientError> {
        if self.inner.stop.is_stopped() {
            return Err(ClientError::Shutdown);
        }
        let slot = lock(&self.inner.pool)
            .entry(addr.to_owned())
            .or_default()
            .clone();
        let connect_deadline = deadline.min(Instant::now() + self.inner.config.connect_timeout);
        let timed_out = || ClientError::ConnectTimeout {
            addr: addr.to_owned(),
            timeout: self.inner.config.connect_timeout,
        };
        // One connect at a time per address; others wait for its outcome.
        let mut guard = tokio::time::timeout_at(connect_deadline, slot.lock())
            .await
            .map_err(|_| timed_out())?;
        if let Some(conn) = guard.as_ref() {
            if !conn.is_closed() {
                return Ok(conn.clone());
            }
            debug!(addr, conn = %conn.id(), "pooled connection closed, reconnecting");
        }
        let stream = tokio::time::timeout_at(connect_deadline, TcpStream::connect(addr))
            .await
            .map_err(|_| timed_out())?
            .map_err(|source| ClientError::Connect {
                addr: addr.to_owned(),
                source,
            })?;
        let peer = stream.peer_addr().map_err(|source| ClientError::Connect {
            addr: addr.to_owned(),
            source,
        })?;
        let opts = ConnOptions {
            max_frame_len: self.inner.config.max_frame_len,
            write_queue_capacity: self.inner.config.write_queue_capacity,
            // The server side closes idle connections; a client keeps its own.
            idle_timeout: None,
            handshake_timeout: None,
            frame_timeout: None,
            partial_frame_budget: None,
        };
        let conn = Connection::start(stream, peer, &opts);
        let handle = conn.handle.clone();
        debug!(addr, conn = %handle.id(), "connected");
        let mut sink = ClientSink {
            addr: addr.to_owned(),
            hook: self.inner.hook.clone(),
        };
        let stop = self.inner.stop.stopped();
        tokio::spawn(async move {
            let id = conn.handle.id();
            conn.run(&mut sink, stop, None).await;
            debug!(conn = %id, addr = %sink.addr, "connection closed");
        });
        *guard = Some(handle.clone());
        Ok(handle)
    }

    fn evict(&self, addr: &str, conn: &ConnectionHandle) {
        conn.close();
        let slot = lock(&self.inner.pool).get(addr).cloned();
        if let Some(slot) = slot {
            if let Ok(mut guard) = slot.try_lock() {
                if guard.as_ref().is_some_and(|c| c.id() == conn.id()) {
                    *guard = None;
                }
            }
        }
    }
}

fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct ClientSink {
    addr: String,
    hook: HookSlot,
}

impl RequestSink for ClientSink {
    fn on_request(&mut self, conn: &ConnectionHandle, request: RemotingCommand) {
        let hook = self.hook.read().unwrap_or_else(|e| e.into_inner()).clone();
        match hook {
            Some(hook) => hook(InboundRequest {
                addr: self.addr.clone(),
                request,
                conn: conn.clone(),
            }),
            None => {
                debug!(conn = %conn.id(), code = request.code, "server request without a hook");
                if !request.is_oneway() {
                    let _ = conn.try_send(RemotingCommand::not_supported(&request));
                }
            }
        }
    }
}
