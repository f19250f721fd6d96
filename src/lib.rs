//! skiff: a single-node message-queue node that reimplements Apache RocketMQ's consumer-offset
//! lifecycle and speaks RocketMQ's remoting protocol and RocketMQ 5's gRPC protocol.
//!
//! Embedded use: open a [`Node`], produce, consume with a group. Offsets are committed only up
//! to the smallest message still in flight, persisted every 5 s and at shutdown, so a crash
//! re-delivers and never loses.
//!
//! ```
//! use skiff::prelude::*;
//!
//! # fn main() -> anyhow::Result<()> {
//! let dir = tempfile::tempdir()?;
//! actix_rt::System::new().block_on(async {
//!     let node = Node::open(NodeConfig::in_dir(dir.path()))?;
//!     let producer = node.producer("demo-producer");
//!     producer.send(OutgoingMessage::new("Orders", "hello").with_tags("new")).await?;
//!
//!     let (received, mut inbox) = tokio::sync::mpsc::unbounded_channel();
//!     let consumer = node.start_consumer(
//!         node.push_consumer("demo-group")
//!             .subscribe("Orders", "new || paid")
//!             .consume_from(ConsumeFromWhere::FirstOffset)
//!             .listener(Listener::concurrent(move |batch| {
//!                 for message in &batch {
//!                     let _ = received.send(message.body().to_vec());
//!                 }
//!                 async { ConsumeStatus::SUCCESS }
//!             })),
//!     )?;
//!     assert_eq!(inbox.recv().await.as_deref(), Some(&b"hello"[..]));
//!
//!     // Hands every queue off with an acknowledged final offset, then flushes the node.
//!     consumer.shutdown().await?;
//!     node.shutdown().await?;
//!     Ok(())
//! })
//! # }
//! ```
//!
//! # Layout
//!
//! * [`config`]: defaults, `skiff.toml`, `SKIFF_*`.
//! * [`node`]: the embedded [`Node`].
//! * [`remoting`]: RocketMQ's wire codec, transport, request processor and remote broker client.
//! * [`grpc`]: the RocketMQ 5 gRPC front door (`apache.rocketmq.v2.MessagingService`), a sibling
//!   of `remoting` calling the same broker.
//! * [`listener`]: the layer under every door: ports, the accept loop, admission (first byte,
//!   TLS, ALPN), the one connection cap, and the stop every task ends at.
//! * [`serve`]: `skiff serve`, the doors (remoting, gRPC, HTTP) wired onto their ports.
//! * [`descriptors`]: the open-file limit `skiff serve` raises, shared between connections and
//!   the store's queue files.
//! * [`acl`]: users, their permissions and the request signatures both protocols check.
//! * [`protected`]: protected mode, which peers a node beyond loopback serves.
//! * [`tls`]: the TLS acceptor both protocols share, and the TLS mode.
//! * [`admin`]: `skiff admin`, admin requests over the network.
//! * `calendar`: day counts to and from dates, which `admin`'s times and `acl`'s signed
//!   date-times share; it imports nothing, so neither depends on the other through it.
//! * `error_text`: an error and its sources as one line of text, for every door's answers and
//!   logs.
//! * [`http`]: the HTTP listener `skiff serve` runs beside the others: `/metrics` and the web
//!   console.
//! * [`console`]: the web console's API and page, and its samples of the last hour.
//! * [`broker_link`]: the hop from `Send` tasks (gRPC, HTTP) onto the broker's arbiter.
//! * `testsuite` (feature `testsuite`): test nodes that must be shut down, raw remoting
//!   connections and request builders, for skiff's tests and embedders'.
//!
//! The actors live in the `skiff-actors` crate and durable state in `skiff-storage`; both are
//! re-exported as [`actors`] and [`storage`]. The `skiff` binary (`src/main.rs`) only parses
//! its command line and runs [`serve`] or [`admin`].
//!
//! # Features
//!
//! * `cli` (default): the binary's own dependencies (anyhow, a log subscriber); the binary
//!   requires it, the library never uses it, so embedders can build with
//!   `default-features = false`.
//! * `mimalloc` (default): the binary's global allocator.
//! * `testsuite`: the `testsuite` module.

pub mod acl;
pub mod admin;
pub mod broker_link;
mod calendar;
pub mod config;
pub mod console;
pub mod descriptors;
mod error_text;
pub mod grpc;
pub mod http;
pub mod listener;
pub mod node;
pub mod protected;
pub mod remoting;
pub mod serve;
#[cfg(any(test, feature = "testsuite"))]
pub mod testsuite;
pub mod tls;

pub use config::NodeConfig;
pub use node::{Node, NodeError};
pub use skiff_actors as actors;
pub use skiff_storage as storage;

/// What embedding code usually needs.
pub mod prelude {
    pub use crate::config::NodeConfig;
    pub use crate::node::Node;
    pub use skiff_actors::broker_api::MessageModel;
    pub use skiff_actors::consumer::push_consumer::{PushConsumer, PushConsumerBuilder};
    pub use skiff_actors::consumer::{ConsumeStatus, Listener, OrderlyStatus, ReceivedMessage};
    pub use skiff_actors::logic::pull_from_where::ConsumeFromWhere;
    pub use skiff_actors::producer::{DeliverTime, OutgoingMessage, Producer};
}
