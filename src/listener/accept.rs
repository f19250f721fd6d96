//! The accept loop every port runs: bind with a deep backlog, take a place under the cap for
//! each connection, admit it in a task of its own, and hand it to the door that serves it.
//!
//! A failed accept (typically out of file descriptors) backs off instead of spinning, 10 ms
//! doubling to 1 s while failures last, and is counted; so are connections refused at the cap
//! and those closed to make room. Stopping ends the loop and every connection task it started,
//! and waits for them.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, ToSocketAddrs};
use tokio::task::JoinSet;
use tracing::{error, info, warn};

use super::admit::{Admission, Admitted};
use super::shutdown::{Stopped, Tasks};
use super::slots::ConnectionSlots;

/// Pending connections the kernel queues for a listener (capped by `net.core.somaxconn`). Above
/// tokio's 1,024: under a flood of connections a full queue drops a newcomer's SYN, and its
/// client waits a second to try again.
pub const LISTEN_BACKLOG: u32 = 4096;

/// The pause after a failed accept, doubled while failures last.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

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

/// What accept loops report, for the broker's connection counters.
pub trait AcceptEvents: Send + Sync + 'static {
    /// A connection was closed on accept: the open ones were at the cap.
    fn on_refused(&self) {}
    /// An accept failed; the loop backs off before the next.
    fn on_accept_failed(&self) {}
    /// An idle connection was closed at the cap to make room for a newcomer.
    fn on_evicted(&self) {}
}

/// Counts nothing (a bare server in a test, an embedder's).
#[derive(Debug, Clone, Copy, Default)]
pub struct Uncounted;

impl AcceptEvents for Uncounted {}

/// Where a port's admitted connections go.
pub trait Serve: Send + Sync + 'static {
    /// Serves one connection, or hands it to whoever does. The loop's shutdown waits for the
    /// returned future, which must end soon after `stopped`.
    fn serve(
        &self,
        admitted: Admitted,
        peer: SocketAddr,
        stopped: Stopped,
    ) -> impl Future<Output = ()> + Send;
}

/// A port's settings besides its listener.
#[derive(Clone)]
pub struct Port {
    /// Named in the logs: "remoting", "grpc", "http".
    pub door: &'static str,
    pub admission: Admission,
    /// The node's connection cap, shared by every port.
    pub slots: ConnectionSlots,
    pub events: Arc<dyn AcceptEvents>,
}

/// A port being served. Dropping it, or [`Listening::shutdown`], stops accepting and ends the
/// connection tasks; `shutdown` also waits for them.
#[derive(Debug)]
pub struct Listening {
    local_addr: SocketAddr,
    tasks: Tasks,
}

impl Listening {
    /// Starts the accept loop on `listener`. Must be called inside a tokio runtime.
    pub fn start<S: Serve>(
        listener: TcpListener,
        port: Port,
        serve: Arc<S>,
    ) -> std::io::Result<Listening> {
        let local_addr = listener.local_addr()?;
        let mut tasks = Tasks::new(port.door);
        let stopped = tasks.stopped();
        tasks.add(tokio::spawn(accept_loop(listener, port, serve, stopped)));
        Ok(Listening { local_addr, tasks })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, ends every connection and waits until all connection tasks ended.
    pub async fn shutdown(self) {
        self.tasks.shutdown().await;
    }
}

async fn accept_loop<S: Serve>(listener: TcpListener, port: Port, serve: Arc<S>, stopped: Stopped) {
    let Port {
        door,
        admission,
        slots,
        events,
    } = port;
    let admission = Arc::new(admission);
    let mut conns = JoinSet::new();
    let mut backoff = ACCEPT_BACKOFF_MIN;
    let stop = stopped.wait();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            Some(res) = conns.join_next(), if !conns.is_empty() => {
                if let Err(e) = res {
                    error!(door, error = %e, "connection task failed");
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Some(slot) = slots.take(peer) else {
                        // Closed at once: the client sees the connection drop and retries, the
                        // operator sees why in the log (the cap writes it).
                        drop(stream);
                        events.on_refused();
                        continue;
                    };
                    if slot.made_room() {
                        events.on_evicted();
                    }
                    backoff = ACCEPT_BACKOFF_MIN;
                    let admission = admission.clone();
                    let serve = serve.clone();
                    let stopped = stopped.clone();
                    conns.spawn(async move {
                        if let Some(admitted) = admission.admit(stream, peer, slot, &stopped).await {
                            serve.serve(admitted, peer, stopped).await;
                        }
                    });
                    // Under a flood of connections, let the ones accepted read their first
                    // request before more arrive to compete for their places.
                    tokio::task::yield_now().await;
                }
                Err(e) => {
                    // Typically out of file descriptors: back off instead of spinning, longer
                    // while it lasts, and take connections again once descriptors are free.
                    warn!(door, error = %e, backoff_ms = backoff.as_millis() as u64, "accept failed; backing off");
                    events.on_accept_failed();
                    tokio::select! {
                        _ = &mut stop => break,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                }
            }
        }
    }
    drop(listener);
    info!(door, open_connections = conns.len(), "listener stopping");
    while let Some(res) = conns.join_next().await {
        if let Err(e) = res {
            error!(door, error = %e, "connection task failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listener::admit::Doors;
    use crate::listener::handoff::handoff;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::AsyncWriteExt;
    use tokio_stream::StreamExt;

    #[derive(Default)]
    struct Counted {
        evicted: AtomicU64,
    }

    impl AcceptEvents for Counted {
        fn on_evicted(&self) {
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[tokio::test]
    async fn the_http_port_counts_against_the_cap_it_shares_with_the_others() {
        let slots = ConnectionSlots::new(1);
        let events = Arc::new(Counted::default());
        let (http, mut inbox) = handoff("http");
        let port = Port {
            door: "http",
            admission: Admission::plaintext(Doors::Http),
            slots: slots.clone(),
            events: events.clone(),
        };
        let listener = listen("127.0.0.1:0").await.expect("bind");
        let listening = Listening::start(listener, port, Arc::new(http)).expect("start");
        // Another port's connection holds the only place.
        let elsewhere = slots.take(listening.local_addr()).expect("room");
        let mut client = tokio::net::TcpStream::connect(listening.local_addr())
            .await
            .expect("connect");
        client
            .write_all(b"GET /metrics HTTP/1.1\r\n")
            .await
            .expect("write");
        let served = tokio::time::timeout(Duration::from_secs(5), inbox.next())
            .await
            .expect("handed over")
            .expect("open inbox");
        assert!(served.is_ok());
        assert_eq!(slots.open(), 2, "the other still closes");
        assert_eq!(events.evicted.load(Ordering::Relaxed), 1);
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        assert!(elsewhere.poll_evicted(&mut cx).is_ready());
        listening.shutdown().await;
    }
}
