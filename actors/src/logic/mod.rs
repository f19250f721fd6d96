//! Pure logic the actors use, kept free of actix so it tests without a runtime.
//!
//! Plain data in, plain data out; no clocks, no I/O. Each module holds one RocketMQ rule set
//! (see `shared/reference/offset-lifecycle.md`, §1):
//!
//! - [`queue`]: `MessageQueue`, the unit of allocation and of offsets.
//! - [`allocate`]: queue allocation strategies and the rebalance diff (§1.B.2-3).
//! - [`inflight`]: a process queue's held messages and its commit offset (§1.C, §1.D flow
//!   control, skiff rule 1 for stuck messages).
//! - [`filter`]: tag subscriptions and Java's `String.hashCode` tag codes.
//! - [`delay`]: delay levels, the send-back / DLQ decision, retry and DLQ topic names (§1.E).
//! - [`pull_from_where`]: where a newly assigned queue starts (§1.B.5).
//! - [`ack`]: the concurrent `ackIndex` split of a consumed batch (§1.E).

pub mod ack;
pub mod allocate;
pub mod delay;
pub mod filter;
pub mod inflight;
pub mod pull_from_where;
pub mod queue;

pub use queue::MessageQueue;
