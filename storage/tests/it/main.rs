//! skiff-storage's integration tests, as one binary (one link instead of one per file). Run one
//! module with `cargo test -p skiff-storage --test it MODULE::`.
//!
//! - `auth_power_loss`: ACL 2.0 users and ACLs through power cuts on the simulated disk.
//! - `metadata_store`: topic and subscription-group configuration.
//! - `offset_table_*`: the offset table's contract suite, corruption and random histories.
//! - `store_*`: the message store: append and read, group commit, recovery, retention, power
//!   loss on the simulated disk, very many queues and descriptor shortages, and `store_crash`
//!   (SIGKILL of this binary run as its child).

mod auth_power_loss;
mod metadata_store;
mod offset_table_contract;
mod offset_table_corruption;
mod offset_table_proptest;
mod store_basic;
mod store_crash;
mod store_delete_queues;
mod store_group_commit;
mod store_idle_queues;
mod store_many_queues;
mod store_power_loss;
mod store_recovery;
mod store_retention;
