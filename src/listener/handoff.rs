//! Connections admitted for a door that a library serves (tonic for gRPC, axum for HTTP): the
//! queue they wait in for that server, and the stream it reads, which keeps the connection's
//! place under the cap and closes it when it is chosen to make room.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tracing::{debug, warn};

use super::accept::Serve;
use super::admit::{Admitted, Stream};
use super::shutdown::Stopped;
use super::slots::ConnectionSlot;

/// Admitted connections waiting for their server, before new ones are closed.
pub const HANDOFF_QUEUE: usize = 256;

/// Where ports send the connections one server serves. Cheap to clone: several ports (the main
/// port and `grpc_listen`) feed one server.
#[derive(Clone, Debug)]
pub struct Handoff {
    /// Named in the logs: "grpc", "http".
    door: &'static str,
    queue: mpsc::Sender<CappedStream>,
}

/// The server's end of a [`Handoff`]: a stream of connections for tonic, a listener for axum.
#[derive(Debug)]
pub struct Inbox {
    queue: mpsc::Receiver<CappedStream>,
}

/// A handoff and its inbox. Made before the ports bind, so connections can wait in it until
/// the server starts.
pub fn handoff(door: &'static str) -> (Handoff, Inbox) {
    let (queue, inbox) = mpsc::channel(HANDOFF_QUEUE);
    (Handoff { door, queue }, Inbox { queue: inbox })
}

impl Handoff {
    /// Queues the connection for the server; a full queue closes it (the client retries).
    pub fn send(&self, stream: Stream, slot: ConnectionSlot, peer: SocketAddr) {
        let capped = CappedStream { stream, slot, peer };
        if self.queue.try_send(capped).is_err() {
            warn!(door = self.door, peer = %peer, "connection closed: too many waiting for the server");
        }
    }
}

/// A port whose every connection is this handoff's door (`grpc_listen`, `metrics_listen`).
impl Serve for Handoff {
    async fn serve(&self, admitted: Admitted, peer: SocketAddr, _stopped: Stopped) {
        match admitted {
            Admitted::Grpc(stream, slot) | Admitted::Http(stream, slot) => {
                self.send(stream, slot, peer)
            }
            Admitted::Remoting(..) => {
                debug!(door = self.door, peer = %peer, "remoting connection closed: this port does not serve it")
            }
        }
    }
}

impl tokio_stream::Stream for Inbox {
    type Item = Result<CappedStream, std::io::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().queue.poll_recv(cx).map(|next| next.map(Ok))
    }
}

impl axum::serve::Listener for Inbox {
    type Io = CappedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (CappedStream, SocketAddr) {
        match self.queue.recv().await {
            Some(stream) => {
                let peer = stream.peer;
                (stream, peer)
            }
            // Every port has stopped: so has the server, which waits for its own shutdown.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "an inbox is fed by ports, it has no address of its own",
        ))
    }
}

/// An admitted connection as hyper reads it, with its place under the node's connection cap
/// (given back when the server drops the connection).
#[derive(Debug)]
pub struct CappedStream {
    stream: Stream,
    slot: ConnectionSlot,
    peer: SocketAddr,
}

impl Connected for CappedStream {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo {
            local_addr: self.stream.tcp().local_addr().ok(),
            remote_addr: Some(self.peer),
        }
    }
}

impl AsyncRead for CappedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.slot.poll_evicted(cx).is_ready() {
            // Chosen to make room at the connection cap; hyper closes the connection.
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "closed to make room for a newcomer at the connection cap",
            )));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            // HTTP has no request boundary at this level: any bytes count as activity.
            this.slot.mark_active();
        }
        read
    }
}

impl AsyncWrite for CappedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
