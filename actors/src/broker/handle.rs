//! [`BrokerHandle`]: the broker's front door. The in-process `BrokerApi` and the remoting server
//! both come through here; the wire-level rules (offset correction and pending resets on pull,
//! piggybacked commits, long polling, QUERY_CONSUMER_OFFSET's zero rule) live in the sibling
//! files that extend the handle, so both paths share them: `sends.rs` (routes, sends,
//! send-backs, END_TRANSACTION), `offsets.rs` (consumer and queue offsets), `members.rs`
//! (heartbeats, member lists, queue locks), `pull.rs`, `admin.rs`. This file holds the handle
//! itself, shutdown, and its one [`BrokerApi`](crate::broker_api::BrokerApi) impl, written by
//! [`forward_broker_api!`](crate::forward_broker_api) from those methods. The pull status
//! itself is derived by [`crate::logic::pull::pull_status`].

use crate::broker::connections::Connections;
use crate::broker::consumer_offsets::{ConsumerOffsetsActor, PendingResets};
use crate::broker::key_index::{KeyIndexActor, KeyQueryResult, QueryByKey};
use crate::broker::long_poll::LongPollActor;
use crate::broker::membership::MembershipActor;
use crate::broker::message_store::MessageStoreActor;
use crate::broker::queue_locks::QueueLocksActor;
use crate::broker::registry::Registry;
use crate::broker::release::Holdings;
use crate::broker::retry::RetryActor;
use crate::broker::schedule::DelaySchedulerActor;
use crate::broker::schedule::SCHEDULE_GROUP;
use crate::broker::transaction::TransactionActor;
use crate::broker::{BrokerClock, BrokerConfig};
use crate::broker_api::BrokerError;
use crate::forward_broker_api;
use crate::logic::delay::SCHEDULE_TOPIC;
use crate::logic::queue::GroupQueue;
use crate::logic::transaction::{HALF_CONSUMER_GROUP, HALF_TOPIC};
use crate::metrics::Metrics;
use crate::persister::Persister;
use crate::quit::Quit;
use crate::refused::Refused;
use actix::prelude::*;
use skiff_storage::offset_table::OffsetTableError;
use skiff_storage::store::StoreReader;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;

/// Addresses of the broker's actors, for embedding code and tests (`Observe` snapshots).
#[derive(Clone)]
pub struct BrokerAddrs {
    pub store: Addr<MessageStoreActor>,
    pub offsets: Addr<ConsumerOffsetsActor>,
    pub persister: Addr<Persister<OffsetTableError>>,
    pub long_poll: Addr<LongPollActor>,
    pub membership: Addr<MembershipActor>,
    pub locks: Addr<QueueLocksActor>,
    pub retry: Addr<RetryActor>,
    pub scheduler: Addr<DelaySchedulerActor>,
    pub key_index: Addr<KeyIndexActor>,
    pub transactions: Addr<TransactionActor>,
    pub timer: Addr<crate::broker::timer::TimerActor>,
    pub pop: Addr<crate::broker::pop::actor::PopActor>,
    pub lite_arrivals: Addr<crate::broker::lite::arrivals::LiteArrivals>,
}

/// Cheap to clone; every clone talks to the same actors. Not `Send`: use it on the broker's
/// arbiter.
#[derive(Clone)]
pub struct BrokerHandle {
    pub(super) inner: Rc<Inner>,
}

pub(super) struct Inner {
    pub(super) config: BrokerConfig,
    pub(super) clock: BrokerClock,
    pub(super) store_host: SocketAddr,
    pub(super) reader: StoreReader,
    pub(super) registry: Registry,
    pub(super) connections: Connections,
    shut_down: Cell<bool>,
    /// Taken by [`BrokerHandle::shutdown`], which waits until every actor holding storage is gone.
    holdings: RefCell<Option<Holdings>>,
    pub(super) addrs: BrokerAddrs,
    /// RocketMQ 5's pullOffsetTable: the next offset each (group, topic, queue) will pull, so
    /// progress can show what is in flight (pulled, not committed). Not persisted.
    pub(super) pull_offsets: RefCell<HashMap<GroupQueue, u64>>,
    pub(super) metrics: Metrics,
    /// Whether an admin offset reset waits for a pop to take it.
    pub(super) pending_resets: PendingResets,
    /// Unordered pops so far: the round robin of the revive queue ids they report.
    pub(super) pop_rounds: Cell<u64>,
    /// Clients' lite subscriptions (kept in memory, as Java's broker keeps them), shared with
    /// the actor that marks lite topics ready as messages arrive.
    pub(super) lite: Rc<super::lite::state::LiteState>,
}

/// The broker's own cursors (the delay scheduler's, the transaction checker's) live in the
/// offset table under system groups and topics; a client moving or deleting them would make
/// the broker redeliver delayed messages or skip pending halves.
pub(super) fn refuse_broker_cursor(group: &str, topic: &str) -> Result<(), BrokerError> {
    let system = [SCHEDULE_GROUP, HALF_CONSUMER_GROUP].contains(&group)
        || [SCHEDULE_TOPIC, HALF_TOPIC].contains(&topic);
    if system {
        return Err(Refused::BrokerCursor {
            group: group.to_owned(),
            topic: topic.to_owned(),
        }
        .into());
    }
    Ok(())
}

/// How long shutdown waits for stopped actors to let go of their storage; they need only a
/// turn of their arbiter, so reaching this means one of them is stuck.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

pub(super) fn mailbox(actor: &'static str) -> impl FnOnce(MailboxError) -> BrokerError {
    move |source| BrokerError::Mailbox { actor, source }
}

impl BrokerHandle {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        config: BrokerConfig,
        clock: BrokerClock,
        store_host: SocketAddr,
        reader: StoreReader,
        registry: Registry,
        connections: Connections,
        metrics: Metrics,
        holdings: Holdings,
        pending_resets: PendingResets,
        lite: Rc<super::lite::state::LiteState>,
        addrs: BrokerAddrs,
    ) -> Self {
        BrokerHandle {
            inner: Rc::new(Inner {
                config,
                clock,
                store_host,
                reader,
                registry,
                connections,
                pull_offsets: Default::default(),
                metrics,
                shut_down: Cell::new(false),
                holdings: RefCell::new(Some(holdings)),
                pending_resets,
                pop_rounds: Cell::new(0),
                lite,
                addrs,
            }),
        }
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.inner.config
    }

    pub fn addrs(&self) -> &BrokerAddrs {
        &self.inner.addrs
    }

    /// QUERY_MESSAGE's lookup: the stored records of `topic` indexed under `key` (a `KEYS`
    /// entry or a `UNIQ_KEY`) with a store timestamp in `[begin, end]`, at most `max`, the
    /// newest first.
    pub async fn query_by_key(
        &self,
        topic: &str,
        key: &str,
        begin: i64,
        end: i64,
        max: usize,
    ) -> Result<KeyQueryResult, BrokerError> {
        self.inner
            .addrs
            .key_index
            .send(QueryByKey {
                topic: topic.to_string(),
                key: key.to_string(),
                begin,
                end,
                max,
            })
            .await
            .map_err(mailbox("key index"))?
    }

    /// The shared read handle of the message store.
    pub fn reader(&self) -> &StoreReader {
        &self.inner.reader
    }

    /// The address stored messages carry as their store host (and offset message ids encode).
    pub fn store_host(&self) -> SocketAddr {
        self.inner.store_host
    }

    /// The broker clock (epoch ms; follows tokio time, see [`BrokerClock`]).
    pub fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// The registry of client connections (callbacks, producers, reported subscriptions).
    pub fn connections(&self) -> &Connections {
        &self.inner.connections
    }

    /// Stops the broker: timers first, then a final awaited offset flush, then the offset table,
    /// the message store (flushed and closed) and the metadata are released. Idempotent.
    pub async fn shutdown(&self) -> Result<(), BrokerError> {
        if self.inner.shut_down.replace(true) {
            return Ok(());
        }
        let addrs = &self.inner.addrs;
        // Scheduler and retry write to the store, so they stop before it closes.
        let quits = [
            ("scheduler", addrs.scheduler.send(Quit::new()).await),
            ("timer", addrs.timer.send(Quit::new()).await),
            ("transactions", addrs.transactions.send(Quit::new()).await),
            ("retry", addrs.retry.send(Quit::new()).await),
            ("membership", addrs.membership.send(Quit::new()).await),
            ("queue locks", addrs.locks.send(Quit::new()).await),
            ("long poll", addrs.long_poll.send(Quit::new()).await),
            ("lite arrivals", addrs.lite_arrivals.send(Quit::new()).await),
        ];
        for (actor, stopped) in quits {
            // Already gone is what stopping wants; the rest of the shutdown goes on either way.
            if let Err(error) = stopped {
                tracing::warn!(actor, %error, "broker actor unavailable at shutdown");
            }
        }
        // Revivals write to the store too; its checkpoints are durable before the offsets that
        // moved past their messages are flushed below.
        let pop = addrs
            .pop
            .send(Quit::new())
            .await
            .map_err(mailbox("pop"))
            .and_then(|r| r);
        // After the writers above, so its final pass indexes everything they appended.
        if let Err(error) = addrs.key_index.send(Quit::new()).await {
            tracing::warn!(actor = "key index", %error, "broker actor unavailable at shutdown");
        }
        // The persister logs a failed final flush itself; the close below reports it typed.
        if let Err(error) = addrs.persister.send(Quit::new()).await {
            tracing::error!(%error, "offset persister unavailable at shutdown");
        }
        // Flushes again and surfaces a typed error if the table cannot be made durable.
        let offsets = addrs
            .offsets
            .send(Quit::new())
            .await
            .map_err(mailbox("consumer offsets"))
            .and_then(|r| r);
        let store = addrs
            .store
            .send(Quit::new())
            .await
            .map_err(mailbox("message store"))
            .and_then(|r| r);
        let metadata = self.inner.registry.close();
        self.inner.connections.clear();
        let released = self.released().await;
        tracing::info!(broker = %self.inner.config.broker_name, "broker stopped");
        pop.and(offsets).and(store).and(metadata).and(released)
    }

    /// Waits until every actor that held storage has been dropped: a stopped actor is dropped,
    /// with its files and sled trees, only when its arbiter next polls it.
    async fn released(&self) -> Result<(), BrokerError> {
        let Some(holdings) = self.inner.holdings.borrow_mut().take() else {
            return Ok(());
        };
        tokio::time::timeout(RELEASE_WAIT, holdings.released())
            .await
            .map_err(|_| BrokerError::StillHeld {
                waited: RELEASE_WAIT,
            })
    }
}

forward_broker_api!(BrokerHandle);
