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
//! - [`timer::TimerActor`]: indexes timer messages by due time and delivers them when due,
//!   exactly once across crashes.
//! - [`transaction::TransactionActor`]: transactional half messages: END_TRANSACTION, check-backs.
//! - [`pop::actor::PopActor`]: pop state: the queues being popped, durable checkpoints of
//!   popped messages and the revival of unacknowledged ones into the pop retry topic, orderly
//!   pop's queue blocks, request modes.
//! - [`key_index::KeyIndexActor`]: indexes message keys off the send path (told of appends like
//!   the long-poll actor) and answers QUERY_MESSAGE lookups.
//!
//! Not actors: [`registry`], the topic and group configuration they share; [`connections`],
//! the one registry of client connections (callbacks, producers, reported subscriptions);
//! [`release`], how shutdown knows every actor that held storage is gone; and the
//! [`BrokerHandle`], split over `handle.rs` (the handle, shutdown, its one `BrokerApi` impl),
//! `sends.rs` (routes, sends, send-backs, END_TRANSACTION, producers), `offsets.rs` (consumer
//! and queue offsets), `members.rs` (heartbeats, member lists, queue locks), `pull.rs`
//! (PULL_MESSAGE), [`pop`] (POP_MESSAGE, acks, NOTIFICATION, QUERY_ASSIGNMENT), [`lite`]
//! (SyncLiteSubscription and lite receives; the clients' lite subscriptions in `lite/state.rs`)
//! and `admin.rs` (progress, offset resets).

mod admin;
pub mod connections;
pub mod consumer_offsets;
mod handle;
pub mod key_index;
pub mod lite;
pub mod long_poll;
mod members;
pub mod membership;
pub mod message_store;
mod offsets;
pub mod pop;
mod pull;
pub mod queue_locks;
pub mod registry;
pub mod release;
pub mod retention;
pub mod retry;
pub mod schedule;
mod sends;
pub mod timer;
pub mod transaction;

pub use admin::QueueProgress;
pub use handle::{BrokerAddrs, BrokerHandle};
pub use lite::{LitePop, LiteSync};
pub use pop::{AckRequest, Assignment, ExpiredReceipt, PopAnswer, PopRequest, PoppedAck};
pub use sends::{ClientSend, TransactionEnded};

use crate::broker_api::BrokerError;
use crate::metrics::Metrics;
use crate::persister::Persister;
use actix::prelude::*;
pub use retention::RetentionConfig;
use skiff_storage::clock::since_epoch;
use skiff_storage::key_index::KeyIndex;
use skiff_storage::metadata::MetadataStore;
use skiff_storage::offset_table::OffsetTable;
use skiff_storage::store::{MessageStore, StoreReader};
use std::time::Duration;

/// How often every subscribed lite topic is marked ready for its subscribers' next receive,
/// behind the arrival notices ([`lite::arrivals`]): a notice lost to a full mailbox delays a
/// lite message by at most this.
const LITE_READY_SWEEP: Duration = Duration::from_secs(30);

/// Broker settings; [`Default`] gives RocketMQ's defaults for a single node.
#[derive(Clone, Debug, PartialEq)]
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
    /// Index `KEYS` and `UNIQ_KEY` for QUERY_MESSAGE (RocketMQ `messageIndexEnable`). Off, the
    /// index is neither written nor read and every lookup finds nothing; turned on again, it
    /// catches up from where it stopped.
    pub key_index: bool,
    /// When old commit-log segments go, and when sends are refused for want of disk.
    pub retention: RetentionConfig,
    /// Transactional messages: check-back timeout, interval and maximum.
    pub transactions: transaction::TransactionConfig,
    /// Pop checkpoints: how often they are revived, how long they wait in memory for an ack.
    pub pop: pop::actor::PopConfig,
    /// Producers may recall their timer messages (RocketMQ's `recallMessageEnable`, off by
    /// default in Apache; on in skiff, a development broker).
    pub recall: bool,
    /// A client's lite subscription not refreshed this long is dropped (Java's
    /// `liteSubscriptionCheckTimeoutMills`, 3 minutes; clients refresh every 30 seconds).
    pub lite_subscription_expiry: Duration,
    /// How often idle lite topics are looked for, and the least idle time that expires one.
    pub lite_expiry: crate::logic::lite::LiteExpiry,
    /// How often the store looks for queues unused since its last look, fully on disk, to let
    /// go of (a queue leaves memory after one to two of these idle); zero keeps every queue.
    pub idle_queue_release: Duration,
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
            key_index: true,
            retention: RetentionConfig::default(),
            transactions: transaction::TransactionConfig::default(),
            pop: pop::actor::PopConfig {
                revive_interval: Duration::from_secs(1),
                checkpoint_window: crate::logic::pop_buffer::DEFAULT_WINDOW,
                checkpoint_capacity: crate::logic::pop_buffer::DEFAULT_CAPACITY,
            },
            recall: true,
            lite_subscription_expiry: Duration::from_secs(180),
            lite_expiry: crate::logic::lite::LiteExpiry::default(),
            idle_queue_release: Duration::from_secs(60),
        }
    }
}

/// The broker's notion of "now" in epoch milliseconds: the wall clock at start plus tokio time
/// elapsed since. It follows the wall clock in production and paused, advanced time in tests,
/// so due times computed from store timestamps fire on tokio timers either way.
///
/// The sum is rounded to milliseconds once, after adding: rounding the start and the elapsed
/// time apart put store timestamps up to 2 ms behind the wall clock, so a client on the same
/// machine saw a message stored before it was born.
#[derive(Clone, Copy, Debug)]
pub struct BrokerClock {
    wall_at_start: Duration,
    started: tokio::time::Instant,
}

impl BrokerClock {
    pub fn start() -> Self {
        BrokerClock {
            wall_at_start: since_epoch(),
            started: tokio::time::Instant::now(),
        }
    }

    pub fn now_ms(&self) -> i64 {
        let now = self.wall_at_start + self.started.elapsed();
        i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
    }
}

/// Starts a broker.
pub struct Broker;

impl Broker {
    /// Starts every broker actor on the current arbiter and answers the handle to them. Fails
    /// when the half queue's cursor or a half's state is unreadable, or a delay-level cursor in
    /// the offset table is corrupt (a broker that guessed it would
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
        // Recovery of the key index: whatever the commit log holds past the watermark.
        let mut index = KeyIndex::open(
            &store.config().disk,
            store
                .config()
                .dir
                .join(skiff_storage::key_index::KEY_INDEX_DIR),
            &reader,
        )?;
        if config.key_index {
            let recovered = index.catch_up_all(&reader)?;
            tracing::info!(records = recovered, "key index caught up");
        } else {
            tracing::info!("key index disabled");
        }
        let transaction_states = skiff_storage::transaction_states::TransactionStates::open(
            metadata.db(),
            metadata.path().to_path_buf(),
        )?;
        let pop_state =
            skiff_storage::pop_state::PopState::open(metadata.db(), metadata.path().to_path_buf())?;
        let timer_index = skiff_storage::timer_index::TimerIndex::open_dir(
            &store
                .config()
                .dir
                .join(skiff_storage::timer_index::TIMER_INDEX_DIR),
        )?;
        // Before anything appends: a delivery cut short by a crash is settled against the log.
        timer::resolve_in_flight(&timer_index, &reader)?;
        let timer_cursor = timer::load_cursor(&timer_index, &reader)?;
        let registry = registry::Registry::new(
            metadata,
            config.auto_create_topic,
            config.auto_create_subscription_group,
        );
        // Replies to requests go to the cluster's reply topic, which must be routable before
        // any replier asks for it (Java's broker creates it at start too).
        registry.ensure_topic(
            &crate::logic::reply::reply_topic(&config.cluster_name),
            crate::logic::reply::REPLY_TOPIC_QUEUE_NUMS,
        )?;
        let metrics = Metrics::default();
        let holdings = release::Holdings::new();
        let cursors = schedule::load_cursors(offsets.as_ref(), &reader)?;
        let halves = transaction::load_halves(
            offsets.as_ref(),
            &reader,
            &transaction_states,
            config.transactions.timeout,
        )?;

        let offsets_actor = consumer_offsets::ConsumerOffsetsActor::new(offsets);
        let pending_resets = offsets_actor.pending_resets();
        let offsets_addr = offsets_actor.start();
        let store_addr = message_store::MessageStoreActor::new(
            store,
            flush_policy,
            registry.clone(),
            metrics.clone(),
            clock,
            config.retention.clone(),
        )
        .with_lite_expiry(config.lite_expiry, offsets_addr.clone().recipient())
        .with_idle_queue_release(config.idle_queue_release)
        .start();
        let persister = Persister::new(
            "broker offsets",
            config.flush_consumer_offset_interval,
            offsets_addr.clone().recipient(),
        )
        .start();
        let long_poll =
            long_poll::LongPollActor::new(reader.clone(), config.long_poll_sweep_interval).start();
        let locks = queue_locks::QueueLocksActor::new(config.lock_expiry).start();
        let connections = connections::Connections::default();
        let membership = membership::MembershipActor::new(
            connections.clone(),
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
        let timer = timer::TimerActor::new(
            reader.clone(),
            store_addr.clone(),
            timer_index,
            clock,
            flush_policy,
            config.default_topic_queue_nums,
            timer_cursor,
            holdings.holder(),
        )
        .start();
        let pop = pop::actor::PopActor::new(
            pop_state,
            reader.clone(),
            registry.clone(),
            (store_addr.clone(), offsets_addr.clone()),
            clock,
            &config.pop,
            holdings.holder(),
        )?
        .start();
        let key_index = key_index::KeyIndexActor::start(index, reader.clone(), config.key_index);
        let transactions = transaction::TransactionActor::new(
            reader.clone(),
            store_addr.clone(),
            offsets_addr.clone(),
            transaction_states,
            connections.clone(),
            clock,
            config.transactions.clone(),
            config.broker_name.clone(),
            halves,
            flush_policy,
            holdings.holder(),
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
        if config.key_index {
            store_addr.do_send(message_store::SubscribeKeys {
                recipient: key_index.clone().recipient(),
            });
        }
        store_addr.do_send(message_store::SubscribeArrivals {
            recipient: transactions.clone().recipient(),
        });
        store_addr.do_send(message_store::SubscribeArrivals {
            recipient: timer.clone().recipient(),
        });
        let lite = std::rc::Rc::new(lite::state::LiteState::default());
        let lite_arrivals =
            lite::arrivals::LiteArrivals::new(lite.clone(), LITE_READY_SWEEP, clock).start();
        store_addr.do_send(message_store::SubscribeArrivals {
            recipient: lite_arrivals.clone().recipient(),
        });
        tracing::info!(broker = %config.broker_name, addr = %config.listen_addr, "broker started");
        Ok(BrokerHandle::new(
            config,
            clock,
            store_host,
            reader,
            registry,
            connections,
            metrics,
            holdings,
            pending_resets,
            lite,
            BrokerAddrs {
                store: store_addr,
                offsets: offsets_addr,
                persister,
                long_poll,
                membership,
                locks,
                retry,
                scheduler,
                key_index,
                transactions,
                timer,
                pop,
                lite_arrivals,
            },
        ))
    }
}
