//! The push consumer: wires one consumer instance's actors together and shuts them down in the
//! right order (hand every queue off, final persist awaited, unregister).

use super::consume_dispatcher::{self, ConsumeDispatcher, DispatcherConfig, DispatcherSnapshot};
use super::listener::Listener;
use super::offset_store::{self, OffsetBackend, OffsetStore, OffsetStoreSnapshot};
use super::process_queue::{ProcessQueueConfig, ProcessQueueSnapshot};
use super::rebalance_coordinator::{
    self, CoordinatorConfig, CoordinatorSnapshot, ObserveQueues, RebalanceCoordinator, Shutdown,
};
use crate::broker_api::{BrokerApi, MessageModel};
use crate::logic::allocate::AllocateStrategy;
use crate::logic::delay::retry_topic;
use crate::logic::filter::Subscription;
use crate::logic::inflight::FlowLimits;
use crate::logic::pull_from_where::ConsumeFromWhere;
use crate::persister::{Persister, StopPersister};
use actix::prelude::*;
use skiff_storage::offset_table::SledOffsetTable;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    #[error("consumer of group {group} has no listener")]
    NoListener { group: String },
    #[error("consumer of group {group} subscribes to nothing")]
    NoSubscription { group: String },
    #[error("broadcasting consumer of group {group} needs a local offset directory")]
    NoLocalOffsetDir { group: String },
    #[error("local offset store at {path} failed to open: {source}")]
    LocalOffsets {
        path: PathBuf,
        #[source]
        source: skiff_storage::offset_table::OffsetTableError,
    },
    #[error("consumer actor {actor} is unavailable: {source}")]
    Mailbox {
        actor: &'static str,
        #[source]
        source: actix::MailboxError,
    },
    #[error("final offset persist of group {group} failed: {reason}")]
    FinalPersist { group: String, reason: String },
}

/// Every knob of a push consumer, with RocketMQ's defaults.
#[derive(Clone, Debug)]
pub struct PushConsumerConfig {
    pub group: String,
    pub client_id: String,
    pub message_model: MessageModel,
    pub consume_from: ConsumeFromWhere,
    pub strategy: AllocateStrategy,
    /// Messages per pull (RocketMQ `pullBatchSize`, 32).
    pub pull_batch_size: u32,
    /// Messages per listener call (RocketMQ `consumeMessageBatchMaxSize`, 1).
    pub consume_batch_size: usize,
    /// Listener calls running at once (RocketMQ `consumeThreadMax`, 20).
    pub max_concurrency: usize,
    pub flow_limits: FlowLimits,
    /// A message consuming longer than this is sent back (DESIGN rule 1; RocketMQ 15 min).
    pub consume_timeout: Duration,
    /// How long a revoked queue waits for running work before its final persist.
    pub handoff_timeout: Duration,
    pub persist_interval: Duration,
    pub rebalance_interval: Duration,
    pub heartbeat_interval: Duration,
    pub suspend_timeout: Duration,
    pub local_retry_delay: Duration,
    /// Lock each queue on the broker in clustering mode so a new owner starts only after the
    /// previous owner's final persist.
    pub exclusive_queues: bool,
    /// Where a broadcasting consumer keeps its offsets.
    pub local_offset_dir: Option<PathBuf>,
}

static CLIENT_SEQUENCE: AtomicU64 = AtomicU64::new(0);

impl PushConsumerConfig {
    pub fn new(group: impl Into<String>) -> Self {
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        PushConsumerConfig {
            group: group.into(),
            client_id: format!(
                "127.0.0.1@{}#{}#{}",
                std::process::id(),
                started,
                CLIENT_SEQUENCE.fetch_add(1, Ordering::Relaxed)
            ),
            message_model: MessageModel::Clustering,
            consume_from: ConsumeFromWhere::LastOffset,
            strategy: AllocateStrategy::Averagely,
            pull_batch_size: 32,
            consume_batch_size: 1,
            max_concurrency: 20,
            flow_limits: FlowLimits::concurrent(),
            consume_timeout: Duration::from_secs(15 * 60),
            handoff_timeout: Duration::from_secs(10),
            persist_interval: Duration::from_secs(5),
            rebalance_interval: Duration::from_secs(20),
            heartbeat_interval: Duration::from_secs(30),
            suspend_timeout: Duration::from_secs(15),
            local_retry_delay: Duration::from_secs(5),
            exclusive_queues: true,
            local_offset_dir: None,
        }
    }
}

/// Builds a push consumer: subscribe, choose where to start and the message model, give a
/// listener, start against a broker.
pub struct PushConsumerBuilder {
    config: PushConsumerConfig,
    subscriptions: Vec<(String, String)>,
    listener: Option<Listener>,
}

impl PushConsumerBuilder {
    pub fn new(group: impl Into<String>) -> Self {
        PushConsumerBuilder {
            config: PushConsumerConfig::new(group),
            subscriptions: Vec::new(),
            listener: None,
        }
    }

    pub fn subscribe(mut self, topic: impl Into<String>, expression: impl Into<String>) -> Self {
        self.subscriptions.push((topic.into(), expression.into()));
        self
    }

    pub fn consume_from(mut self, from: ConsumeFromWhere) -> Self {
        self.config.consume_from = from;
        self
    }

    pub fn message_model(mut self, model: MessageModel) -> Self {
        self.config.message_model = model;
        self
    }

    pub fn listener(mut self, listener: Listener) -> Self {
        self.listener = Some(listener);
        self
    }

    /// Adjusts any other setting.
    pub fn configure(mut self, change: impl FnOnce(&mut PushConsumerConfig)) -> Self {
        change(&mut self.config);
        self
    }

    pub fn config(&self) -> &PushConsumerConfig {
        &self.config
    }

    /// Starts the consumer's actors on the current arbiter.
    pub fn start(self, broker: Rc<dyn BrokerApi>) -> Result<PushConsumer, ConsumerError> {
        let config = self.config;
        let group = config.group.clone();
        let listener = self.listener.ok_or_else(|| ConsumerError::NoListener {
            group: group.clone(),
        })?;
        if self.subscriptions.is_empty() {
            return Err(ConsumerError::NoSubscription { group });
        }
        let sub_version = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let mut subscriptions: Vec<Subscription> = self
            .subscriptions
            .iter()
            .map(|(topic, expression)| Subscription::parse(topic, expression, sub_version))
            .collect();
        if config.message_model == MessageModel::Clustering {
            // Clustering consumers receive their group's retries (offset-lifecycle B.6).
            subscriptions.push(Subscription::parse(retry_topic(&group), "*", sub_version));
        }
        let backend = match config.message_model {
            MessageModel::Clustering => OffsetBackend::Broker(broker.clone()),
            MessageModel::Broadcasting => {
                let dir = config.local_offset_dir.clone().ok_or_else(|| {
                    ConsumerError::NoLocalOffsetDir {
                        group: group.clone(),
                    }
                })?;
                let table = SledOffsetTable::open_path(&dir)
                    .map_err(|source| ConsumerError::LocalOffsets { path: dir, source })?;
                OffsetBackend::Local(Box::new(table))
            }
        };
        let orderly = listener.is_orderly();
        let offset_store = OffsetStore::new(group.clone(), backend).start();
        let persister = Persister::new(
            "consumer-offsets",
            config.persist_interval,
            offset_store.clone().recipient(),
        )
        .start();
        let dispatcher = ConsumeDispatcher::new(
            DispatcherConfig {
                group: group.clone(),
                message_model: config.message_model,
                max_concurrency: config.max_concurrency.max(1),
                consume_batch_size: config.consume_batch_size.max(1),
                consume_timeout: config.consume_timeout,
                local_retry_delay: config.local_retry_delay,
            },
            broker.clone(),
            listener,
        )
        .start();
        let coordinator = RebalanceCoordinator::new(
            CoordinatorConfig {
                client_id: config.client_id.clone(),
                group: group.clone(),
                message_model: config.message_model,
                consume_from: config.consume_from,
                strategy: config.strategy,
                rebalance_interval: config.rebalance_interval,
                unbalanced_retry: Duration::from_secs(1),
                heartbeat_interval: config.heartbeat_interval,
                relock_interval: Duration::from_secs(20),
                exclusive_queues: config.exclusive_queues,
                process_queue: ProcessQueueConfig {
                    group: group.clone(),
                    message_model: config.message_model,
                    orderly,
                    pull_batch_size: config.pull_batch_size,
                    suspend_timeout: config.suspend_timeout,
                    flow_limits: if orderly {
                        FlowLimits {
                            max_span: None,
                            ..config.flow_limits
                        }
                    } else {
                        config.flow_limits
                    },
                    flow_control_delay: Duration::from_millis(50),
                    pull_error_delay: Duration::from_secs(3),
                    handoff_timeout: config.handoff_timeout,
                    consume_batch_size: config.consume_batch_size.max(1),
                    suspend_delay: Duration::from_secs(1),
                },
            },
            subscriptions,
            broker,
            dispatcher.clone(),
            offset_store.clone(),
        )
        .start();
        Ok(PushConsumer {
            config,
            coordinator,
            dispatcher,
            offset_store,
            persister,
        })
    }
}

/// A running push consumer.
pub struct PushConsumer {
    config: PushConsumerConfig,
    coordinator: Addr<RebalanceCoordinator>,
    dispatcher: Addr<ConsumeDispatcher>,
    offset_store: Addr<OffsetStore>,
    persister: Addr<Persister>,
}

/// A plain view of a consumer for tests and progress display.
#[derive(Debug, Clone)]
pub struct ConsumerSnapshot {
    pub coordinator: CoordinatorSnapshot,
    pub dispatcher: DispatcherSnapshot,
    pub offsets: OffsetStoreSnapshot,
    pub queues: Vec<ProcessQueueSnapshot>,
}

impl PushConsumer {
    pub fn builder(group: impl Into<String>) -> PushConsumerBuilder {
        PushConsumerBuilder::new(group)
    }

    pub fn config(&self) -> &PushConsumerConfig {
        &self.config
    }

    pub fn client_id(&self) -> &str {
        &self.config.client_id
    }

    pub fn coordinator(&self) -> &Addr<RebalanceCoordinator> {
        &self.coordinator
    }

    pub async fn observe(&self) -> Result<ConsumerSnapshot, ConsumerError> {
        let mailbox = |actor| move |source| ConsumerError::Mailbox { actor, source };
        Ok(ConsumerSnapshot {
            coordinator: self
                .coordinator
                .send(rebalance_coordinator::Observe)
                .await
                .map_err(mailbox("rebalance coordinator"))?,
            dispatcher: self
                .dispatcher
                .send(consume_dispatcher::Observe)
                .await
                .map_err(mailbox("consume dispatcher"))?,
            offsets: self
                .offset_store
                .send(offset_store::Observe)
                .await
                .map_err(mailbox("offset store"))?,
            queues: self
                .coordinator
                .send(ObserveQueues)
                .await
                .map_err(mailbox("rebalance coordinator"))?,
        })
    }

    /// Graceful shutdown: every queue is handed off (running work awaited up to the handoff
    /// timeout, final offsets persisted with acknowledged updates), then a last persist of
    /// everything, then the consumer unregisters. Nothing consumed is re-delivered afterwards.
    pub async fn shutdown(self) -> Result<(), ConsumerError> {
        let group = self.config.group.clone();
        self.coordinator
            .send(Shutdown)
            .await
            .map_err(|source| ConsumerError::Mailbox {
                actor: "rebalance coordinator",
                source,
            })?;
        let persisted =
            self.persister
                .send(StopPersister)
                .await
                .map_err(|source| ConsumerError::Mailbox {
                    actor: "persister",
                    source,
                })?;
        persisted.map_err(|reason| ConsumerError::FinalPersist { group, reason })
    }
}
