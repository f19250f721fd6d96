//! The listener layer under every door of `skiff serve`: remoting, RocketMQ 5 gRPC and HTTP
//! (the console and `/metrics`) stand on the same accept loop, admission and connection cap,
//! and end at the same kind of stop.
//!
//! From the bottom up; each module uses only those above it:
//!
//! * [`shutdown`]: [`Stop`] and [`Stopped`], how every task that must end at shutdown is told
//!   to, and [`Tasks`], a stop with the tasks it ends.
//! * [`slots`]: the node's connection cap, one for every port, and who makes room at it.
//! * [`admit`]: what a connection speaks (its first byte, then ALPN), the TLS mode and the
//!   handshake, bounded in time and abandoned on eviction or stop.
//! * [`accept`]: binding, and the one accept loop with back-off and counters.
//! * [`handoff`]: the queue from the ports to the servers libraries run (tonic, axum), and the
//!   stream those read, which keeps its place under the cap.
//! * [`reachable`]: the address a client is told to reach the node at, never a wildcard; every
//!   door's routes follow it.
//!
//! The doors stay where they are: `remoting::server` serves remoting connections itself,
//! `grpc` and `http` run tonic and axum on a [`handoff::Inbox`]. `serve` wires them onto ports.

pub mod accept;
pub mod admit;
pub mod handoff;
pub mod reachable;
pub mod shutdown;
pub mod slots;

pub use accept::{listen, AcceptEvents, Listening, Port, Serve, Uncounted};
pub use admit::{Admission, Admitted, Doors, Stream};
pub use handoff::{handoff, CappedStream, Handoff, Inbox};
pub use shutdown::{Stop, Stopped, Tasks, SHUTDOWN_GRACE};
pub use slots::{ConnectionSlot, ConnectionSlots};
