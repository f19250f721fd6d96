//! Broker-side actors and the [`BrokerHandle`] in front of them.
//!
//! One actor per concern, all on the arbiter that calls [`Broker::start`] (consumer notifiers
//! are not `Send`, and one thread keeps every broker decision ordered without locks):
//!
//! - [`message_store::MessageStoreActor`]: the single writer (appends, group commit, topic
//!   auto-creation, delayed-message routing); readers share a [`StoreReader`].
//! - [`consumer_offsets::ConsumerOffsetsActor`]: the offset table and pending admin resets,
//!   flushed by a [`Persister`] every `flush_consumer_offset_interval` and at shutdown.
//! - [`long_poll::LongPollActor`]: parked pulls, woken by message arrival.
//! - [`membership::MembershipActor`]: heartbeats, expiry, consumer-ids-changed notifications.
//! - [`queue_locks::QueueLocksActor`]: orderly-consumption locks.
//! - [`retry::RetryActor`]: send-back to `%RETRY%group` / `%DLQ%group`.
//! - [`schedule::DelaySchedulerActor`]: delivers delayed messages when due.

pub mod consumer_offsets;
mod handle;
pub mod long_poll;
pub mod membership;
pub mod message_store;
pub mod queue_locks;
pub mod registry;
pub mod retry;
pub mod schedule;

pub use handle::{pull_status, BrokerAddrs, BrokerHandle, QueueProgress};

use crate::broker_api::BrokerError;
use crate::persister::Persister;
use actix::prelude::*;
use skiff_storage::metadata::MetadataStore;
use skiff_storage::offset_table::OffsetTable;
use skiff_storage::store::{MessageStore, StoreReader};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Broker settings; [`Default`] gives RocketMQ's defaults for a single node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerConfig {
    pub broker_name: String,
    pub cluster_name: String,
    /// `ip:port` clients reach this broker at, reported in routes. (Offset message ids use the
    /// store's `store_host`, which is what the records carry.)
    pub listen_addr: String,
    /// Queue count of a topic auto-created without a producer's ask (route lookups, the
    /// in-process `send`).
    pub default_topic_queue_nums: u32,
    pub auto_create_topic: bool,
    pub auto_create_subscription_group: bool,
    /// Caps of one pull, whatever the consumer asks for.
    pub max_pull_messages: u32,
    pub max_pull_bytes: u32,
    /// A consumer channel silent this long is dropped (RocketMQ `channelExpiredTimeout`).
    pub channel_expiry: Duration,
    /// A queue lock not renewed this long lapses (`rocketmq.broker.rebalance.lockMaxLiveTime`).
    pub lock_expiry: Duration,
    pub flush_consumer_offset_interval: Duration,
    /// Park pulls for the consumer's suspend time; when off, for `short_polling` only.
    pub long_polling: bool,
    pub short_polling: Duration,
    /// How often parked pulls are re-checked against the store besides arrival notices.
    pub long_poll_sweep_interval: Duration,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            broker_name: "skiff".to_string(),
            cluster_name: "DefaultCluster".to_string(),
            listen_addr: "127.0.0.1:9876".to_string(),
            default_topic_queue_nums: 4,
            auto_create_topic: true,
            auto_create_subscription_group: true,
            max_pull_messages: 32,
            max_pull_bytes: 256 * 1024,
            channel_expiry: Duration::from_secs(120),
            lock_expiry: Duration::from_secs(60),
            flush_consumer_offset_interval: Duration::from_secs(5),
            long_polling: true,
            short_polling: Duration::from_secs(1),
            long_poll_sweep_interval: Duration::from_secs(5),
        }
    }
}

/// Stops a broker actor (its timers with it).
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct Stop;

/// The broker's notion of "now" in epoch milliseconds: the wall clock at start plus tokio time
/// elapsed since. It follows the wall clock in production and paused, advanced time in tests,
/// so due times computed from store timestamps fire on tokio timers either way.
#[derive(Clone, Copy, Debug)]
pub struct BrokerClock {
    wall_ms_at_start: i64,
    started: tokio::time::Instant,
}

impl BrokerClock {
    pub fn start() -> Self {
        let wall_ms_at_start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        BrokerClock {
            wall_ms_at_start,
            started: tokio::time::Instant::now(),
        }
    }

    pub fn now_ms(&self) -> i64 {
        self.wall_ms_at_start + self.started.elapsed().as_millis() as i64
    }
}

/// Starts a broker.
pub struct Broker;

impl Broker {
    /// Starts every broker actor on the current arbiter and answers the handle to them. Fails
    /// when a delay-level cursor in the offset table is corrupt (a broker that guessed it would
    /// re-deliver or lose delayed messages).
    pub fn start(
        config: BrokerConfig,
        store: MessageStore,
        offsets: Box<dyn OffsetTable>,
        metadata: MetadataStore,
    ) -> Result<BrokerHandle, BrokerError> {
        let clock = BrokerClock::start();
        let mut store = store;
        // One time base for store timestamps, commit times and delay due times: delays are
        // computed from store timestamps but fire on tokio timers.
        store.set_clock(move || clock.now_ms());
        let reader: StoreReader = store.reader();
        let flush_policy = store.config().flush_policy;
        let store_host = store.config().store_host;
        let registry = registry::Registry::new(
            metadata,
            config.auto_create_topic,
            config.auto_create_subscription_group,
        );
        let cursors = schedule::load_cursors(offsets.as_ref(), &reader)?;

        let store_addr =
            message_store::MessageStoreActor::new(store, flush_policy, registry.clone()).start();
        let offsets_addr = consumer_offsets::ConsumerOffsetsActor::new(offsets).start();
        let persister = Persister::new(
            "broker offsets",
            config.flush_consumer_offset_interval,
            offsets_addr.clone().recipient(),
        )
        .start();
        let long_poll =
            long_poll::LongPollActor::new(reader.clone(), config.long_poll_sweep_interval).start();
        let locks = queue_locks::QueueLocksActor::new(config.lock_expiry).start();
        let inbox = membership::NotifierInbox::default();
        let membership = membership::MembershipActor::new(
            inbox.clone(),
            config.channel_expiry,
            locks.clone().recipient(),
        )
        .start();
        let retry =
            retry::RetryActor::new(reader.clone(), registry.clone(), store_addr.clone()).start();
        let scheduler = schedule::DelaySchedulerActor::new(
            reader.clone(),
            store_addr.clone(),
            offsets_addr.clone(),
            clock,
            config.default_topic_queue_nums,
            cursors,
        )
        .start();
        // Arrival notices are sent with `try_send`; a subscription queued behind a full
        // mailbox would be lost, so these go first, before anyone can send.
        store_addr.do_send(message_store::SubscribeArrivals {
            recipient: long_poll.clone().recipient(),
        });
        store_addr.do_send(message_store::SubscribeArrivals {
            recipient: scheduler.clone().recipient(),
        });
        tracing::info!(broker = %config.broker_name, addr = %config.listen_addr, "broker started");
        Ok(BrokerHandle::new(
            config,
            clock,
            store_host,
            reader,
            registry,
            inbox,
            BrokerAddrs {
                store: store_addr,
                offsets: offsets_addr,
                persister,
                long_poll,
                membership,
                locks,
                retry,
                scheduler,
            },
        ))
    }
}
