//! skiff-storage: everything a skiff node keeps on disk.
//!
//! Synchronous by design (no actix, no tokio): the actors own these values and decide when to
//! block. Layout:
//! - [`message`]: the RocketMQ stored-message record layout, shared by the commit log and the wire.
//! - [`commit_log`]: append-only segment files of stored-message records.
//! - [`consume_queue`]: per (topic, queue id) fixed-size index entries into the commit log.
//! - [`store`]: [`store::MessageStore`], the single writer over both, with recovery and flush
//!   policies, and [`store::StoreReader`], the shared read handle.
//! - [`record`]: the versioned, checksummed bincode codec every sled value goes through.
//! - [`offset_table`]: the durable consumer-offset table (`topic@group` -> queue -> offset).
//! - [`metadata`]: topic and subscription-group configuration.

pub mod commit_log;
pub mod consume_queue;
pub mod message;
pub mod metadata;
pub mod offset_table;
pub mod record;
pub mod store;
