//! skiff-actors' integration tests, as one binary (one link instead of one per file). Run one
//! module with `cargo test -p skiff-actors --test it MODULE::`.
//!
//! - `broker_*`: the broker actors, one subject each: disk guard, key index, membership and
//!   queue locks, lite topics, offsets, pop, pull, retry and dead letters, sends, timer,
//!   transactions.
//! - `consumer_handoff`: queues handed off between two push consumers of one group.
//! - `logic_*_proptest`: properties of the pure rules (queue allocation, in-flight tracking).

mod broker_disk_guard;
mod broker_key_index;
mod broker_lite;
mod broker_membership;
mod broker_offsets;
mod broker_pop;
mod broker_pull;
mod broker_retry;
mod broker_sends;
mod broker_timer;
mod broker_transactions;
mod consumer_handoff;
mod logic_allocate_proptest;
mod logic_inflight_proptest;
