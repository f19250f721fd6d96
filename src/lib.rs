//! skiff: a single-node message-queue node that speaks RocketMQ's remoting protocol.
//!
//! Layout: [`config`] (defaults, `skiff.toml`, `SKIFF_*`), [`node`] (the embedded [`Node`]),
//! [`remoting`] (wire codec, server, client). The actors live in the `skiff-actors` crate and
//! durable state in `skiff-storage`; both are re-exported.

pub mod config;
pub mod node;
pub mod remoting;

pub use config::NodeConfig;
pub use node::{Node, NodeError};
pub use skiff_actors as actors;
pub use skiff_storage as storage;
