//! The push consumer: wires one consumer instance's actors together and shuts them down in the
//! right order (hand every queue off, final persist awaited, unregister).

use super::consume_dispatcher::{self, ConsumeDispatcher, DispatcherConfig, DispatcherSnapshot};
use super::listener::Listener;
use super::offset_store::{
    self, OffsetBackend, OffsetStore, OffsetStoreError, OffsetStoreSnapshot,
};
use super::process_queue::{ProcessQueueConfig, ProcessQueueSnapshot};
use super::rebalance_coordinator::{
    self, CoordinatorConfig, CoordinatorSnapshot, ObserveQueues, RebalanceCoordinator,
};
use crate::broker_api::InvalidSelector;
use crate::broker_api::{BrokerApi, MessageModel, OffsetUpdate};
use crate::logic::allocate::AllocateStrategy;
use crate::logic::delay::retry_topic;
use crate::logic::filter::{ExpressionType, Subscription};
use crate::logic::inflight::FlowLimits;
use crate::logic::pull_from_where::ConsumeFromWhere;
use crate::logic::queue::MessageQueue;
use crate::persister::{PersistError, Persister};
use crate::quit::Quit;
use actix::prelude::*;
use skiff_storage::clock::epoch_millis;
use skiff_storage::offset_table::{OffsetTableError, SledOffsetTable};
use std::error::Error;
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
    /// SUBSCRIPTION_PARSE_FAILED on a Java broker: refused before anything starts.
    #[error("consumer of group {group} subscribes to topic {topic} with an invalid selector")]
    InvalidSubscription {
        group: String,
        topic: String,
        #[source]
        source: Box<InvalidSelector>,
    },
    #[error("broadcasting consumer of group {group} needs a local offset directory")]
    NoLocalOffsetDir { group: String },
    #[error("local offset store at {path} failed to open")]
    LocalOffsets {
        path: PathBuf,
        #[source]
        source: OffsetTableError,
    },
    #[error("consumer actor {actor} is unavailable")]
    Mailbox {
        actor: &'static str,
        #[source]
        source: actix::MailboxError,
    },
    #[error("final offset {offset} of {queue} for group {group} could not be persisted")]
    HandoffPersist {
        group: String,
        queue: MessageQueue,
        offset: u64,
        #[source]
        source: Box<OffsetStoreError>,
    },
    #[error("final offset persist of group {group} failed")]
    FinalPersist {
        group: String,
        #[source]
        source: Box<PersistError<OffsetStoreError>>,
    },
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
    /// A message consuming longer than this is sent back (`docs/architecture.md` rule 1;
    /// RocketMQ 15 min).
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

/// Pause before a rebalance round that could not finish is run again (a lock still held by the
/// previous owner, a failed offset read).
const UNBALANCED_RETRY: Duration = Duration::from_secs(1);
/// How often held queue locks are renewed (RocketMQ's `lockInterval`, 20 s; the broker lets a
/// lock lapse after 60 s).
const RELOCK_INTERVAL: Duration = Duration::from_secs(20);
/// Pause before pulling again while flow control holds (RocketMQ: 50 ms).
const FLOW_CONTROL_DELAY: Duration = Duration::from_millis(50);
/// Pause before pulling again after a failed pull (RocketMQ's
/// `pullTimeDelayMillsWhenException`, 3 s).
const PULL_ERROR_DELAY: Duration = Duration::from_secs(3);
/// Pause before an orderly batch is retried after SUSPEND_CURRENT_QUEUE_A_MOMENT (RocketMQ's
/// `suspendCurrentQueueTimeMillis`, 1 s).
const SUSPEND_DELAY: Duration = Duration::from_secs(1);

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
    subscriptions: Vec<(String, ExpressionType, String)>,
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

    /// Subscribes to `topic` with a tag expression: `*`, or `TagA || TagB`.
    pub fn subscribe(mut self, topic: impl Into<String>, expression: impl Into<String>) -> Self {
        self.subscriptions
            .push((topic.into(), ExpressionType::Tag, expression.into()));
        self
    }

    /// Subscribes to `topic` with a SQL92 selector over message properties and `TAGS`, such as
    /// `a > 5 AND TAGS IN ('TagA', 'TagB')` (RocketMQ's `MessageSelector.bySql`). A malformed
    /// selector makes [`PushConsumerBuilder::start`] fail.
    pub fn subscribe_sql92(
        mut self,
        topic: impl Into<String>,
        selector: impl Into<String>,
    ) -> Self {
        self.subscriptions
            .push((topic.into(), ExpressionType::Sql92, selector.into()));
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
        let sub_version = epoch_millis();
        let mut subscriptions: Vec<Subscription> = self
            .subscriptions
            .iter()
            .map(|(topic, expression_type, expression)| {
                Subscription::new(topic, *expression_type, expression, sub_version).map_err(
                    |error| ConsumerError::InvalidSubscription {
                        group: group.clone(),
                        topic: topic.clone(),
                        source: Box::new(InvalidSelector {
                            expression: expression.clone(),
                            error,
                        }),
                    },
                )
            })
            .collect::<Result<_, _>>()?;
        if config.message_model == MessageModel::Clustering {
            // Clustering consumers receive their group's retries
            // (`docs/offset-lifecycle.md` §1.B.6).
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
                unbalanced_retry: UNBALANCED_RETRY,
                heartbeat_interval: config.heartbeat_interval,
                relock_interval: RELOCK_INTERVAL,
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
                    flow_control_delay: FLOW_CONTROL_DELAY,
                    pull_error_delay: PULL_ERROR_DELAY,
                    handoff_timeout: config.handoff_timeout,
                    consume_batch_size: config.consume_batch_size.max(1),
                    suspend_delay: SUSPEND_DELAY,
                },
            },
            subscriptions,
            broker.clone(),
            dispatcher.clone(),
            offset_store.clone(),
        )
        .start();
        Ok(PushConsumer {
            config,
            broker,
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
    broker: Rc<dyn BrokerApi>,
    coordinator: Addr<RebalanceCoordinator>,
    dispatcher: Addr<ConsumeDispatcher>,
    offset_store: Addr<OffsetStore>,
    persister: Addr<Persister<OffsetStoreError>>,
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
        let unpersisted =
            self.coordinator
                .send(Quit::new())
                .await
                .map_err(|source| ConsumerError::Mailbox {
                    actor: "rebalance coordinator",
                    source,
                })?;
        // A handoff whose acknowledged persist failed gets one more try: at shutdown no other
        // owner can be committing yet (this client is still registered), and without it the
        // queue's consumption would be redelivered to whoever takes it next.
        let retried = self.persist_handoffs_again(unpersisted).await;
        let persisted = self.persister.send(Quit::new()).await;
        // Last, as RocketMQ does (persist, then unregister): the other members rebalance when
        // this client leaves, and must find every offset it consumed already stored, including
        // those of a queue whose handoff could not persist.
        if let Err(error) = self
            .broker
            .unregister(self.client_id().to_owned(), group.clone())
            .await
        {
            tracing::warn!(%group, error = &error as &dyn Error, "unregister at shutdown failed");
        }
        retried?;
        persisted
            .map_err(|source| ConsumerError::Mailbox {
                actor: "persister",
                source,
            })?
            .map_err(|source| ConsumerError::FinalPersist {
                group,
                source: Box::new(source),
            })
    }

    async fn persist_handoffs_again(
        &self,
        unpersisted: Vec<(MessageQueue, u64)>,
    ) -> Result<(), ConsumerError> {
        let mut first_failure = None;
        for (queue, offset) in unpersisted {
            let store = &self.offset_store;
            store.do_send(offset_store::UpdateOffset {
                queue: queue.clone(),
                offset,
                increase_only: false,
            });
            let persisted = store
                .send(offset_store::PersistQueue {
                    queue: queue.clone(),
                    update: OffsetUpdate::Acknowledged,
                })
                .await
                .map_err(|source| ConsumerError::Mailbox {
                    actor: "offset store",
                    source,
                })?;
            store.do_send(offset_store::RemoveQueue {
                queue: queue.clone(),
            });
            if let Err(source) = persisted {
                tracing::error!(group = %self.config.group, %queue, offset,
                    error = &source as &dyn Error, "final offset persist failed again at shutdown");
                first_failure.get_or_insert(ConsumerError::HandoffPersist {
                    group: self.config.group.clone(),
                    queue,
                    offset,
                    source: Box::new(source),
                });
            }
        }
        first_failure.map_or(Ok(()), Err)
    }
}
