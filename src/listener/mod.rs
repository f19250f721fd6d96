//! The listener layer under every door of `skiff serve`: remoting, RocketMQ 5 gRPC and HTTP
//! (the console and `/metrics`) are to stand on one layer; it starts with the connection cap.
//!
//! * [`slots`]: the node's connection cap, one for every port, and who makes room at it.

pub mod slots;

pub use slots::{ConnectionSlot, ConnectionSlots};
