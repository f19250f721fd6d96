//! Set-up shared by skiff-storage's tests, and by the tests of the crates above through the
//! `testsuite` feature: store configurations and messages ready to append.
//!
//! Compiled only for this crate's unit tests or with the feature, so production builds carry
//! none of it.

use crate::disk::sim::SimDisk;
use crate::disk::Disk;
use crate::message::{decode_records, MessageToAppend};
use crate::store::{FlushPolicy, MessageStore, StoreConfig};
use bytes::Bytes;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// A flush interval no test outlives: the background flusher never checkpoints, so every fsync
/// and checkpoint a test sees is one it asked for.
pub const NO_BACKGROUND_FLUSH: Duration = Duration::from_secs(3600);

/// A store in `dir` with `segment_size`-byte segments, flushed by `policy`, no background
/// checkpoint ([`NO_BACKGROUND_FLUSH`]) and no background preparation of the commit log.
/// Adjust other fields with struct-update syntax:
/// `StoreConfig { flush_interval, ..store_config(dir, size, policy) }`.
pub fn store_config(dir: &Path, segment_size: u64, policy: FlushPolicy) -> StoreConfig {
    StoreConfig {
        segment_size,
        flush_policy: policy,
        flush_interval: NO_BACKGROUND_FLUSH,
        prepare_in_background: false,
        ..StoreConfig::new(dir)
    }
}

/// A message for `topic`/`queue_id` carrying `body`, no properties, and a fixed born time and
/// IPv4 born host, so record sizes depend only on topic, body and properties. Set other fields
/// with struct-update syntax: `MessageToAppend { properties, ..message(topic, 0, body) }`.
pub fn message(topic: &str, queue_id: u32, body: impl Into<Bytes>) -> MessageToAppend {
    MessageToAppend {
        topic: topic.to_string(),
        queue_id,
        flag: 0,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        born_host: SocketAddr::from(([10, 0, 0, 7], 40000)),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        properties: String::new(),
        body: body.into(),
    }
}

/// [`store_config`] at `/store` on the simulated `disk`, 64 KiB segments, `Async`.
pub fn sim_store_config(disk: &SimDisk) -> StoreConfig {
    StoreConfig {
        disk: Disk::Simulated(disk.clone()),
        ..store_config(Path::new("/store"), 1 << 16, FlushPolicy::Async)
    }
}

/// The bodies (as text) of `topic`'s queue 0 from offset 0, at most 64.
pub fn queue_bodies(store: &MessageStore, topic: &str) -> Vec<String> {
    let read = store
        .reader()
        .read(topic, 0, 0, 64, u32::MAX, None)
        .expect("read");
    decode_records(read.records)
        .expect("decode")
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect()
}
