//! The Prometheus endpoint of `skiff serve`: `GET /metrics` on its own listener
//! (`metrics_listen`, 127.0.0.1:5557 by default, RocketMQ's exporter port), answered with
//! [`MetricsSnapshot::to_prometheus`](skiff_actors::metrics::MetricsSnapshot::to_prometheus).
//!
//! A plain HTTP/1.1 responder, one request per connection (`Connection: close`): scrapers need
//! nothing more, and it keeps the node free of an HTTP stack. It runs on the broker's arbiter
//! because the snapshot reads the broker handle, which lives there.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tracing::{debug, warn};

use skiff_actors::broker::BrokerHandle;

use crate::protected::{self, PeerPolicy};

/// Longest request head read; a scraper's is a few hundred bytes.
const MAX_HEAD: usize = 8 * 1024;
/// A client that has not sent its request head by then is dropped.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A whole exchange (read, snapshot, write) that takes longer is dropped: a reader that never
/// reads must not hold its task.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// Metrics connections open at once.
const MAX_CONNECTIONS: usize = 16;

/// The running endpoint; dropping it (or [`MetricsEndpoint::shutdown`]) stops it.
pub struct MetricsEndpoint {
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl MetricsEndpoint {
    /// Binds `addr` and serves on the current arbiter (inside an actix system / `LocalSet`).
    /// Peers `peers` does not serve are answered 403 (protected mode).
    pub async fn start(
        addr: SocketAddr,
        broker: BrokerHandle,
        peers: PeerPolicy,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let task = tokio::task::spawn_local(accept_loop(listener, broker, peers, stopped));
        Ok(MetricsEndpoint {
            local_addr,
            stop,
            task: Some(task),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            if let Err(e) = task.await {
                warn!(error = %e, "metrics endpoint task failed");
            }
        }
    }
}

impl Drop for MetricsEndpoint {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

async fn accept_loop(
    listener: TcpListener,
    broker: BrokerHandle,
    peers: PeerPolicy,
    mut stop: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    // Scrapers come one at a time; more at once is someone else, turned away.
                    let Ok(permit) = permits.clone().try_acquire_owned() else {
                        debug!(peer = %peer, "metrics connection refused: too many open");
                        continue;
                    };
                    let broker = broker.clone();
                    tokio::task::spawn_local(async move {
                        let served = peers.serves(peer.ip());
                        let answered = tokio::time::timeout(IO_TIMEOUT, answer(stream, &broker, served)).await;
                        match answered {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => debug!(peer = %peer, error = %e, "metrics request failed"),
                            Err(_) => debug!(peer = %peer, "metrics request timed out"),
                        }
                        drop(permit);
                    });
                }
                Err(e) => {
                    warn!(error = %e, "metrics endpoint accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// Reads one request head and answers it.
async fn answer(mut stream: TcpStream, broker: &BrokerHandle, served: bool) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let complete = tokio::time::timeout(READ_TIMEOUT, async {
        let mut chunk = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok::<bool, std::io::Error>(false);
            }
            head.extend_from_slice(&chunk[..n]);
        }
        Ok(true)
    })
    .await
    .unwrap_or(Ok(false))?;
    if !complete {
        return Ok(());
    }
    let response = match route(&head) {
        _ if !served => response(
            "403 Forbidden",
            "text/plain",
            &format!("{}\n", protected::REFUSAL),
        ),
        Route::Metrics => match broker.metrics().await {
            Ok(snapshot) => response(
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                &snapshot.to_prometheus(),
            ),
            Err(e) => {
                warn!(
                    error = &e as &dyn std::error::Error,
                    "reading metrics failed"
                );
                response(
                    "503 Service Unavailable",
                    "text/plain",
                    "the broker is not available\n",
                )
            }
        },
        Route::NotFound => response("404 Not Found", "text/plain", "skiff serves /metrics\n"),
        Route::BadMethod => response("405 Method Not Allowed", "text/plain", "GET only\n"),
    };
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    NotFound,
    BadMethod,
}

/// What the request line asks for (`GET /metrics` and `GET /metrics?…` are the metrics).
fn route(head: &[u8]) -> Route {
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, target) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    if method != b"GET" {
        return Route::BadMethod;
    }
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    if path == b"/metrics" {
        Route::Metrics
    } else {
        Route::NotFound
    }
}

fn response(status: &str, content_type: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_by_method_and_path() {
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Route::Metrics
        );
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n"), Route::Metrics);
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(route(b"POST /metrics HTTP/1.1\r\n\r\n"), Route::BadMethod);
        assert_eq!(route(b""), Route::BadMethod);
    }
}
