//! skiff-actors: every actor of a skiff node and the typed messages between them.
//!
//! - [`broker`]: the broker side (message store, offset table, long-poll holds, group membership,
//!   queue locks, retry and delay scheduling) behind [`broker::BrokerHandle`].
//! - [`consumer`]: one set per consumer instance (rebalance coordinator, process queues,
//!   consume dispatcher, offset store) and the producer.
//! - [`persister`]: the timer that drives periodic and final persists on both sides.
//! - [`broker_api`]: the trait the consumer side reaches a broker through.
//! - [`logic`]: pure logic the actors call, testable without a runtime.

pub mod broker;
pub mod broker_api;
pub mod consumer;
pub mod logic;
pub mod persister;
