//! The bridge between the transport and the broker actors.
//!
//! [`BrokerHandle`](skiff_actors::broker::BrokerHandle) is `Rc`-based and lives on the actix
//! arbiter that opened the node, while the transport's [`RequestHandler`] must be `Send + Sync`.
//! [`channel`] makes both halves of the bridge: the [`RequestBridge`] (given to
//! [`RemotingServer`](crate::remoting::RemotingServer)) forwards each request, with a oneshot for
//! its reply, over a bounded channel; [`spawn`] starts the loop on the arbiter that owns the
//! [`Processor`] and runs one local task per request. When the channel is full the bridge
//! answers SYSTEM_BUSY (2) at once, as Java's rejected thread pool does. A long poll is a parked
//! local task, never a slot in the channel; its response is sent when the broker's pull future
//! resolves.
//!
//! The loop also keeps the broker's request and connection counters
//! ([`skiff_actors::metrics::Metrics`]): a request's latency runs from its arrival at the
//! bridge to its answer, queueing included. The bridge is also every port's
//! [`AcceptEvents`], so connections refused or evicted at the cap are counted whatever their
//! door.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tracing::{debug, error, warn};

use super::Processor;
use crate::listener::AcceptEvents;
use crate::remoting::codes::response as code;
use crate::remoting::frame::RemotingCommand;
use crate::remoting::server::{ConnectionHandle, ConnectionId, HandlerFuture, RequestHandler};

/// Requests waiting for the arbiter, across all connections, before SYSTEM_BUSY.
pub const DEFAULT_QUEUE_CAPACITY: usize = 4096;

struct Job {
    conn: ConnectionHandle,
    request: RemotingCommand,
    arrived: Instant,
    reply: oneshot::Sender<Option<RemotingCommand>>,
}

/// A connection opened or closed, in the order the server saw them.
enum ConnEvent {
    Opened,
    Closed(ConnectionId),
    Refused,
    AcceptFailed,
    Evicted,
    TimedOut,
}

/// The `Send + Sync` half given to the remoting server: forwards requests to the arbiter.
pub struct RequestBridge {
    jobs: mpsc::Sender<Job>,
    conn_events: mpsc::UnboundedSender<ConnEvent>,
}

/// The arbiter half: what [`spawn`] consumes.
pub struct ProcessorInbox {
    jobs: mpsc::Receiver<Job>,
    conn_events: mpsc::UnboundedReceiver<ConnEvent>,
}

/// Makes the two halves of the bridge; `capacity` bounds the requests waiting for the arbiter.
pub fn channel(capacity: usize) -> (Arc<RequestBridge>, ProcessorInbox) {
    let (jobs_tx, jobs_rx) = mpsc::channel(capacity.max(1));
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    (
        Arc::new(RequestBridge {
            jobs: jobs_tx,
            conn_events: events_tx,
        }),
        ProcessorInbox {
            jobs: jobs_rx,
            conn_events: events_rx,
        },
    )
}

impl RequestHandler for RequestBridge {
    fn handle(&self, conn: ConnectionHandle, request: RemotingCommand) -> HandlerFuture {
        let code = request.code;
        let opaque = request.opaque;
        let (reply, answer) = oneshot::channel();
        match self.jobs.try_send(Job {
            conn,
            request,
            arrived: Instant::now(),
            reply,
        }) {
            Ok(()) => Box::pin(async move {
                match answer.await {
                    Ok(response) => response,
                    Err(_) => Some(RemotingCommand::new_response(
                        code::SYSTEM_ERROR,
                        Some("the request was dropped before it completed".to_owned()),
                    )),
                }
            }),
            Err(mpsc::error::TrySendError::Full(job)) => {
                warn!(conn = %job.conn.id(), code, opaque, "request queue full, answering system busy");
                Box::pin(std::future::ready(Some(RemotingCommand::new_response(
                    code::SYSTEM_BUSY,
                    Some(crate::remoting::codes::OVERLOAD_REMARK.to_owned()),
                ))))
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                debug!(code, opaque, "request after the processor stopped");
                Box::pin(std::future::ready(Some(RemotingCommand::new_response(
                    code::SERVICE_NOT_AVAILABLE,
                    Some("the broker is shutting down".to_owned()),
                ))))
            }
        }
    }

    fn on_open(&self, _conn: &ConnectionHandle) {
        // Fails only once the processor stopped; nothing is counted after that.
        let _ = self.conn_events.send(ConnEvent::Opened);
    }

    fn on_close(&self, conn_id: ConnectionId) {
        // Fails only once the processor stopped, which releases every connection itself.
        let _ = self.conn_events.send(ConnEvent::Closed(conn_id));
    }

    fn on_timed_out(&self) {
        let _ = self.conn_events.send(ConnEvent::TimedOut);
    }
}

/// Every port's accept loop counts here, whichever door its connections go to.
impl AcceptEvents for RequestBridge {
    fn on_refused(&self) {
        let _ = self.conn_events.send(ConnEvent::Refused);
    }

    fn on_accept_failed(&self) {
        let _ = self.conn_events.send(ConnEvent::AcceptFailed);
    }

    fn on_evicted(&self) {
        let _ = self.conn_events.send(ConnEvent::Evicted);
    }
}

/// The running processor loop (see [`spawn`]).
pub struct ProcessorTask {
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl ProcessorTask {
    /// Stops taking requests, cancels the ones in progress (parked long polls included; their
    /// connections are closed by then) and lets every client still registered leave its groups.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Err(e) = (&mut self.done).await {
            error!(error = %e, "request processor loop failed");
        }
    }
}

/// Starts the processor loop on the current arbiter (inside an actix system / `LocalSet`).
pub fn spawn(processor: Processor, inbox: ProcessorInbox) -> ProcessorTask {
    let (stop, stopped) = oneshot::channel();
    let done = tokio::task::spawn_local(run(Rc::new(processor), inbox, stopped));
    ProcessorTask {
        stop: Some(stop),
        done,
    }
}

async fn run(processor: Rc<Processor>, inbox: ProcessorInbox, mut stop: oneshot::Receiver<()>) {
    let ProcessorInbox {
        mut jobs,
        mut conn_events,
    } = inbox;
    let metrics = processor.broker().metrics_counters().clone();
    let mut tasks: JoinSet<()> = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => break,
            Some(event) = conn_events.recv() => match event {
                ConnEvent::Opened => metrics.connection_opened(),
                ConnEvent::Refused => metrics.connection_refused(),
                ConnEvent::AcceptFailed => metrics.accept_failed(),
                ConnEvent::Evicted => metrics.connection_evicted(),
                ConnEvent::TimedOut => metrics.connection_timed_out(),
                ConnEvent::Closed(id) => {
                    metrics.connection_closed();
                    let processor = processor.clone();
                    tasks.spawn_local(async move { processor.connection_closed(id).await });
                }
            },
            Some(res) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(e) = res {
                    if e.is_panic() {
                        error!(error = %e, "request task panicked");
                    }
                }
            }
            job = jobs.recv() => match job {
                Some(Job { conn, request, arrived, reply }) => {
                    let processor = processor.clone();
                    let metrics = metrics.clone();
                    tasks.spawn_local(async move {
                        let code = request.code;
                        let response = processor.process(conn, request).await;
                        metrics.record_request(code, arrived.elapsed(), response.as_ref().map(|r| r.code));
                        let _ = reply.send(response);
                    });
                }
                None => break,
            },
        }
    }
    jobs.close();
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    processor.release_all().await;
    debug!("request processor stopped");
}
