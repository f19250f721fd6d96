//! Admission: what an accepted connection speaks, and its TLS handshake when it starts one.
//!
//! A connection's first byte tells it: `0x16` a TLS ClientHello, `P` the HTTP/2 preface
//! (plaintext gRPC), anything else a remoting frame (whose first byte is the high byte of its
//! length, 0 for any frame under 16 MiB). A TLS connection then says by ALPN: `h2` is gRPC, none
//! is remoting (the Java remoting client with `tls.enable`). The TLS mode decides which of the
//! two kinds a port serves at all.
//!
//! The first byte is peeked, never read, so the door that serves the connection reads it whole.
//! Admission runs in the connection's own task and holds its place under the cap: a silent
//! connection is dropped after the handshake timeout, and sooner when it is chosen to make room
//! or the node stops.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

use super::shutdown::Stopped;
use super::slots::ConnectionSlot;
use crate::tls::{speaks_grpc, TlsMode, HANDSHAKE_RECORD};

/// The first byte of the HTTP/2 connection preface (`PRI * HTTP/2.0`).
pub const HTTP2_PREFACE: u8 = b'P';

/// A new connection must send its first byte, and then finish its TLS handshake, within this
/// (every client speaks as soon as it connects).
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The protocols a port serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Doors {
    /// Remoting only (a bare [`RemotingServer`](crate::remoting::RemotingServer)).
    Remoting,
    /// The main port of `skiff serve`: remoting, and gRPC told apart by its first bytes.
    RemotingAndGrpc,
    /// `grpc_listen`: every connection is gRPC.
    Grpc,
    /// `metrics_listen`: every connection is HTTP/1 (the console and `/metrics`).
    Http,
}

/// How a port admits its connections.
#[derive(Clone)]
pub struct Admission {
    pub doors: Doors,
    /// The acceptor for TLS connections; `None`: plaintext only.
    pub tls: Option<TlsAcceptor>,
    pub tls_mode: TlsMode,
    /// How long a connection may take to send its first byte (`None`: no limit) and, separately,
    /// its TLS handshake (`None`: [`DEFAULT_HANDSHAKE_TIMEOUT`]).
    pub within: Option<Duration>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("doors", &self.doors)
            .field("tls", &self.tls.as_ref().map(|_| self.tls_mode))
            .field("within", &self.within)
            .finish()
    }
}

/// A connection's bytes: as accepted, or after its TLS handshake.
#[derive(Debug)]
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// An admitted connection, by the door that serves it, with its place under the cap.
#[derive(Debug)]
pub enum Admitted {
    Remoting(Stream, ConnectionSlot),
    Grpc(Stream, ConnectionSlot),
    Http(Stream, ConnectionSlot),
}

impl Admission {
    /// Plaintext connections of one protocol, let in without a look at their bytes.
    pub fn plaintext(doors: Doors) -> Admission {
        Admission {
            doors,
            tls: None,
            tls_mode: TlsMode::Permissive,
            within: None,
        }
    }

    /// Tells what `stream` speaks and completes its TLS handshake; `None` when it closed, stayed
    /// silent, was refused by the TLS mode, was chosen to make room, or the node stopped.
    pub async fn admit(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        slot: ConnectionSlot,
        stopped: &Stopped,
    ) -> Option<Admitted> {
        if let Err(e) = stream.set_nodelay(true) {
            debug!(peer = %peer, error = %e, "set_nodelay failed");
        }
        let single = match self.doors {
            Doors::RemotingAndGrpc => None,
            only => Some(only),
        };
        if let (Some(door), None) = (single, &self.tls) {
            return Some(door.admit(Stream::Plain(stream), slot));
        }
        let first = tokio::select! {
            _ = stopped.wait() => return None,
            _ = slot.evicted() => return None,
            first = first_byte(&stream, self.within) => first,
        };
        let Some(first) = first else {
            debug!(peer = %peer, "connection closed or silent before its first byte");
            return None;
        };
        if first != HANDSHAKE_RECORD {
            if !self.tls_mode.serves_plaintext() {
                warn!(peer = %peer, "plaintext connection closed: tls_mode is enforcing");
                return None;
            }
            let door = single.unwrap_or(if first == HTTP2_PREFACE {
                Doors::Grpc
            } else {
                Doors::Remoting
            });
            return Some(door.admit(Stream::Plain(stream), slot));
        }
        let Some(acceptor) = self.tls.as_ref().filter(|_| self.tls_mode.serves_tls()) else {
            debug!(peer = %peer, "TLS connection closed: tls_mode is disabled");
            return None;
        };
        let handshake = tokio::time::timeout(
            self.within.unwrap_or(DEFAULT_HANDSHAKE_TIMEOUT),
            acceptor.accept(stream),
        );
        let tls = tokio::select! {
            _ = stopped.wait() => return None,
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
        let door = single.unwrap_or(if speaks_grpc(&tls) {
            Doors::Grpc
        } else {
            Doors::Remoting
        });
        Some(door.admit(Stream::Tls(Box::new(tls)), slot))
    }
}

impl Doors {
    /// `stream` as this (single) door's; the main port has decided by then.
    fn admit(self, stream: Stream, slot: ConnectionSlot) -> Admitted {
        match self {
            Doors::Remoting | Doors::RemotingAndGrpc => Admitted::Remoting(stream, slot),
            Doors::Grpc => Admitted::Grpc(stream, slot),
            Doors::Http => Admitted::Http(stream, slot),
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

impl Stream {
    /// The TCP connection under the stream.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref().0,
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listener::shutdown::Stop;
    use crate::listener::slots::ConnectionSlots;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    /// A connection from a client that first sends `first`, as the server accepted it.
    async fn accepted(first: &[u8]) -> (TcpStream, TcpStream, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let mut client = TcpStream::connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        client.write_all(first).await.expect("write");
        let (server, peer) = listener.accept().await.expect("accept");
        (client, server, peer)
    }

    fn main_port(tls_mode: TlsMode) -> Admission {
        Admission {
            doors: Doors::RemotingAndGrpc,
            tls: Some(crate::tls::acceptor(&crate::tls::TlsIdentity::SelfSigned).expect("tls")),
            tls_mode,
            within: Some(Duration::from_secs(10)),
        }
    }

    #[tokio::test]
    async fn the_main_port_tells_grpc_from_remoting_by_the_first_byte() {
        let slots = ConnectionSlots::new(10);
        let stop = Stop::new();
        let (_c, server, peer) = accepted(b"PRI * HTTP/2.0").await;
        let slot = slots.take(peer).expect("room");
        let admitted = main_port(TlsMode::Permissive)
            .admit(server, peer, slot, &stop.stopped())
            .await;
        assert!(matches!(
            admitted,
            Some(Admitted::Grpc(Stream::Plain(_), _))
        ));
        let (_c, server, peer) = accepted(&[0, 0, 0, 20]).await;
        let slot = slots.take(peer).expect("room");
        let admitted = main_port(TlsMode::Permissive)
            .admit(server, peer, slot, &stop.stopped())
            .await;
        assert!(matches!(
            admitted,
            Some(Admitted::Remoting(Stream::Plain(_), _))
        ));
        let (_c, server, peer) = accepted(&[0, 0, 0, 20]).await;
        let slot = slots.take(peer).expect("room");
        let enforcing = main_port(TlsMode::Enforcing)
            .admit(server, peer, slot, &stop.stopped())
            .await;
        assert!(
            enforcing.is_none(),
            "plaintext is closed when TLS is enforced"
        );
    }

    #[tokio::test]
    async fn a_tls_handshake_that_stalls_is_abandoned_on_stop_and_on_eviction() {
        let slots = ConnectionSlots::new(1);
        let stop = Stop::new();
        // A ClientHello's first byte, and nothing more: the handshake waits for the rest.
        let (_c, server, peer) = accepted(&[HANDSHAKE_RECORD]).await;
        let slot = slots.take(peer).expect("room");
        let stopped = stop.stopped();
        let grpc_port = Admission {
            doors: Doors::Grpc,
            ..main_port(TlsMode::Permissive)
        };
        let admitting = tokio::spawn({
            let grpc_port = grpc_port.clone();
            async move { grpc_port.admit(server, peer, slot, &stopped).await }
        });
        tokio::task::yield_now().await;
        stop.stop();
        let outcome = tokio::time::timeout(Duration::from_secs(5), admitting)
            .await
            .expect("abandoned at once")
            .expect("task");
        assert!(outcome.is_none());

        let stop = Stop::new();
        let (_c, server, peer) = accepted(&[HANDSHAKE_RECORD]).await;
        let slot = slots.take(peer).expect("room");
        let stopped = stop.stopped();
        let admitting =
            tokio::spawn(async move { grpc_port.admit(server, peer, slot, &stopped).await });
        tokio::task::yield_now().await;
        let newcomer = slots.take(peer).expect("the stalled one makes room");
        assert!(newcomer.made_room());
        let outcome = tokio::time::timeout(Duration::from_secs(5), admitting)
            .await
            .expect("abandoned at once")
            .expect("task");
        assert!(outcome.is_none());
    }
}
