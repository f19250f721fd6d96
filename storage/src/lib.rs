//! skiff-storage: everything a skiff node keeps on disk.
//!
//! Synchronous by design (no actix, no tokio): the actors own these values and decide when to
//! block. Layout, from the bottom up:
//! - [`error`]: [`error::StoreError`], the error of the commit log, the consume queues and the
//!   message store.
//! - [`disk`]: the file-system seam under the store: the real disk and, with the `testsuite`
//!   feature, a simulated one that can lose power or fill up.
//! - [`clock`]: wall-clock milliseconds since the Unix epoch, as RocketMQ stores them.
//! - [`stats`]: lock-free latency histograms the store keeps for the node's metrics (fsync time).
//! - [`message`]: the RocketMQ stored-message record layout, shared by the commit log and the wire.
//! - [`commit_log`]: append-only segment files of stored-message records.
//! - [`file_cache`]: the bounded set of open consume-queue files, so descriptors do not grow
//!   with the number of queues.
//! - [`consume_queue`]: per (topic, queue id) fixed-size index entries into the commit log; its
//!   module docs list its files (read, on_disk).
//! - [`store`]: [`store::MessageStore`], the single writer over both, with recovery and flush
//!   policies, and [`store::StoreReader`], the shared read handle; its module docs list its
//!   files (append, queues, reader, durability, checkpoint, recovery, settle, retention).
//! - [`record`]: the versioned, checksummed bincode codec every sled value goes through.
//! - [`offset_table`]: the durable consumer-offset table (`topic@group` -> queue -> offset).
//! - [`metadata`]: topic and subscription-group configuration.
//! - [`auth`]: ACL 2.0 users and ACLs, in two more trees of the metadata database.
//! - [`key_index`]: message key -> commit-log offsets, for QUERY_MESSAGE; built off the send
//!   path and caught up from its watermark at open.
//! - [`pop_state`]: pop checkpoints (popped, not yet acknowledged messages) and each group's
//!   request mode (pull or pop) per topic.
//! - [`timer_index`]: pending timer messages by due time, with the ingest cursor and the
//!   delivery in flight that make each timer fire once across crashes.
//! - [`transaction_states`]: what became of each transactional half message (checked back,
//!   committed, rolled back), in place of RocketMQ's op topic.
//! - `testsuite` (feature `testsuite`, and this crate's unit tests): set-up shared by tests,
//!   such as store configurations and ready-to-append messages.

pub mod auth;
pub mod clock;
pub mod commit_log;
pub mod consume_queue;
pub mod disk;
pub mod error;
pub mod file_cache;
pub mod key_index;
pub mod message;
pub mod metadata;
pub mod offset_table;
pub mod pop_state;
pub mod record;
pub mod stats;
pub mod store;
#[cfg(any(test, feature = "testsuite"))]
pub mod testsuite;
pub mod timer_index;
pub mod transaction_states;
