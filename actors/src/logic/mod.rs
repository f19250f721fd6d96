//! Pure logic the actors use, kept free of actix so it tests without a runtime.
//!
//! Plain data in, plain data out; no clocks, no I/O. Each module holds one RocketMQ rule set
//! (section numbers are those of `docs/offset-lifecycle.md`):
//!
//! - [`queue`]: `MessageQueue`, the unit of allocation; `GroupQueue`, a group's queue, the unit the
//!   broker keeps offsets and pop state for.
//! - [`allocate`]: queue allocation strategies, the rebalance diff (§1.B.2-3) and the broker's
//!   pop-mode share of queues.
//! - [`inflight`]: a process queue's held messages and its commit offset (§1.C, §1.D flow
//!   control).
//! - [`filter`]: subscriptions (tag expressions, Java's `String.hashCode` tag codes, and the
//!   expression type that picks between tags and SQL92).
//! - [`sql92`]: SQL92 property selectors: parser and evaluator.
//! - [`delay`]: delay levels and where delayed messages wait, the send-back / DLQ decision,
//!   retry and DLQ topic names (§1.E).
//! - [`pull`]: a pull's status and next offset for a store read (`docs/wire-protocol.md` §4.1,
//!   §1.A.12).
//! - [`pull_from_where`]: where a newly assigned queue starts (§1.B.5).
//! - [`pop`]: pop consumption: receipts, the offset bookkeeping of a pop answer, the pop retry
//!   topic, revival of unacknowledged messages and orderly pop's per-queue state (§1.H).
//! - [`pop_buffer`]: which pop checkpoints are still only in memory, and how far the stored
//!   offset of a popped queue may move (§1.H).
//! - [`lite`]: lite topics: lite queue names, name checks, clients' lite subscriptions and
//!   where a new subscription starts.
//! - [`lite_ready`]: which of a client's lite topics its next lite receive looks at.
//! - [`priority`]: priority messages: the queue a message's priority picks, and the order a pop
//!   walks a priority topic's queues and its retry topic in.
//! - [`ack`]: the concurrent `ackIndex` split of a consumed batch (§1.E).
//! - [`timer`]: timer messages (RocketMQ 5): which sends wait in the timer topic, until when,
//!   and what their real topic gets when they fire.
//! - [`transaction`]: where half messages wait, what a commit stores, when a half is checked back.
//! - [`reply`]: request-reply's reply topic and message type.
//! - [`sends`]: what the broker refuses of a client's send, and how a send's queue is chosen.
//! - [`names`]: well-formed topic and group names, and the three kinds of system topic.
//! - [`attributes`]: topic and group attributes as admin requests change them (`+key=value`,
//!   `-key`): a topic's `message.type`, a group's `priority.factor` and lite settings.

pub mod ack;
pub mod allocate;
pub mod attributes;
pub mod delay;
pub mod filter;
pub mod inflight;
pub mod lite;
pub mod lite_ready;
pub mod names;
pub mod pop;
pub mod pop_buffer;
pub mod priority;
pub mod pull;
pub mod pull_from_where;
pub mod queue;
pub mod recall;
pub mod reply;
pub mod sends;
pub mod sql92;
pub mod timer;
pub mod transaction;

pub use queue::MessageQueue;
