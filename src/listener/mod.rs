//! The listener layer under every door of `skiff serve`: remoting, RocketMQ 5 gRPC and HTTP
//! (the console and `/metrics`) are to stand on one layer.
//!
//! From the bottom up; each module uses only those above it:
//!
//! * [`shutdown`]: [`Stop`] and [`Stopped`], how every task that must end at shutdown is told
//!   to, and [`Tasks`], a stop with the tasks it ends.
//! * [`slots`]: the node's connection cap, one for every port, and who makes room at it.

pub mod shutdown;
pub mod slots;

pub use shutdown::{Stop, Stopped, Tasks, SHUTDOWN_GRACE};
pub use slots::{ConnectionSlot, ConnectionSlots};
