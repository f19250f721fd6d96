//! skiff-actors: every actor of a skiff node and the typed messages between them.
//!
//! # Layout
//!
//! - [`broker`]: the broker side (message store, offset table, long-poll holds, group membership,
//!   queue locks, retry and delay scheduling, timers, transactions, pop, the key index, the
//!   connection registry) behind [`broker::BrokerHandle`]; its module docs list every file.
//! - [`consumer`]: one set per consumer instance (rebalance coordinator, process queues,
//!   consume dispatcher, offset store) and the push consumer that wires it.
//! - [`producer`]: sending, a plain value over [`broker_api::BrokerApi`].
//! - [`persister`]: the timer that drives periodic and final persists on both sides.
//! - [`quit`]: [`Quit`], the one control message: finish the work in hand, persist, stop.
//! - [`broker_api`]: the trait the consumer and producer sides reach a broker through, and
//!   [`forward_broker_api!`], which writes its impls from each implementation's own calls.
//! - [`refused`]: [`refused::Refused`], every typed "no" a broker answers, free of any wire.
//! - [`logic`]: pure logic the actors call, testable without a runtime.
//! - `testsuite` (feature `testsuite`): paused-time runtime and broker set-up for tests.
//!
//! Dependencies run one way: the actors use `broker_api`, `logic` and `skiff-storage`;
//! `broker_api` uses `logic`'s types; `logic` uses only `skiff-storage` types, no actor and no
//! actix.

pub mod broker;
pub mod broker_api;
pub mod consumer;
pub mod logic;
pub mod metrics;
pub mod persister;
pub mod producer;
pub mod quit;
pub mod refused;
#[cfg(feature = "testsuite")]
pub mod testsuite;

pub use quit::Quit;

use std::future::Future;
use std::pin::Pin;

/// A boxed future that stays on its arbiter's thread: actix runs each arbiter on one thread, so
/// nothing the actors await needs to be `Send`.
pub type LocalFuture<T> = Pin<Box<dyn Future<Output = T>>>;
