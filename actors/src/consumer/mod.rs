//! Consumer-side actors: one set per consumer instance.
//!
//! - [`rebalance_coordinator`]: allocates queues and starts/stops process queues.
//! - [`process_queue`]: one actor per assigned queue: pulls, flow control, in-flight bookkeeping.
//! - [`consume_dispatcher`]: runs the user's listener with bounded concurrency.
//! - [`offset_store`]: the offset cache and its broker or local backend.
//! - [`push_consumer`]: the builder that wires them together and shuts them down in order.
//! - [`listener`]: what the user's code sees: received messages, listener kinds, outcomes.

pub mod consume_dispatcher;
pub mod listener;
pub mod offset_store;
pub mod process_queue;
pub mod push_consumer;
pub mod rebalance_coordinator;

pub use listener::{ConsumeStatus, Listener, OrderlyStatus, ReceivedMessage};
