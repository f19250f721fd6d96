//! The embedded node: a broker and any number of producers and consumers in one process, no
//! network. Everything runs on the current actix arbiter.

use crate::config::NodeConfig;
use skiff_actors::broker::pop::actor::PopConfig;
use skiff_actors::broker::transaction::TransactionConfig;
use skiff_actors::broker::{Broker, BrokerConfig, BrokerHandle, QueueProgress, RetentionConfig};
use skiff_actors::broker_api::{BrokerApi, BrokerError};
use skiff_actors::consumer::push_consumer::{ConsumerError, PushConsumer, PushConsumerBuilder};
use skiff_actors::logic::lite::LiteExpiry;
use skiff_actors::metrics::MetricsSnapshot;
use skiff_actors::producer::Producer;
use skiff_storage::auth::{AuthStore, AuthStoreError, AUTH_DIR};
use skiff_storage::disk::Disk;
use skiff_storage::metadata::{open_db, MetadataError, MetadataStore, OpenDbError};
use skiff_storage::offset_table::{OffsetTableError, SledOffsetTable};
use skiff_storage::store::{MessageStore, StoreConfig, StoreError};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("message store in {path} failed to open")]
    Store {
        path: PathBuf,
        #[source]
        source: StoreError,
    },
    #[error("metadata database in {path} failed to open")]
    Database {
        path: PathBuf,
        #[source]
        source: OpenDbError,
    },
    #[error("metadata in {path} failed to load")]
    Metadata {
        path: PathBuf,
        #[source]
        source: MetadataError,
    },
    #[error("ACL 2.0 users and ACLs in {path} failed to load")]
    Users {
        path: PathBuf,
        #[source]
        source: AuthStoreError,
    },
    #[error("offset table in {path} failed to open")]
    Offsets {
        path: PathBuf,
        #[source]
        source: OffsetTableError,
    },
    #[error("broker failed")]
    Broker(#[from] BrokerError),
    #[error("consumer failed")]
    Consumer(#[from] ConsumerError),
}

/// A running node. Not `Send`: keep it on the arbiter that opened it.
///
/// [`Node::shutdown`] returns once every actor has stopped and every file, lock and database
/// under the data directory is closed, so a new `Node` opens there at once. A node dropped
/// without it starts the same shutdown on its arbiter, which releases the directory as soon as
/// the arbiter runs it.
pub struct Node {
    config: NodeConfig,
    broker: BrokerHandle,
    /// The metadata database's trees.
    metadata: MetadataStore,
    /// ACL 2.0 users and ACLs, which the node keeps beside the broker.
    users: Arc<AuthStore>,
    shut_down: bool,
}

impl Node {
    /// Opens (or creates) the node's data in `config.data_dir`, recovering the commit log,
    /// consume queues and offsets, and starts the broker actors on the current arbiter. Must be
    /// called inside a running actix system.
    pub fn open(config: NodeConfig) -> Result<Node, NodeError> {
        let store_dir = config.data_dir.join("store");
        let meta_dir = config.data_dir.join("meta");
        let store = MessageStore::open(StoreConfig {
            dir: store_dir.clone(),
            segment_size: config.segment_size,
            prepare_ahead: config.segment_prepare_ahead,
            flush_policy: config.flush,
            flush_interval: config.flush_interval,
            sync_flush_timeout: config.sync_flush_timeout,
            store_host: store_host(&config),
            max_message_size: config.max_message_size,
            open_queue_files: match config.open_queue_files {
                0 => StoreConfig::DEFAULT_OPEN_QUEUE_FILES,
                n => n,
            },
            ..StoreConfig::new(store_dir.clone())
        })
        .map_err(|source| NodeError::Store {
            path: store_dir,
            source,
        })?;
        let db = open_db(&meta_dir).map_err(|source| NodeError::Database {
            path: meta_dir.clone(),
            source,
        })?;
        let metadata =
            MetadataStore::open(&db, meta_dir.clone()).map_err(|source| NodeError::Metadata {
                path: meta_dir.clone(),
                source,
            })?;
        let users_dir = config.data_dir.join(AUTH_DIR);
        let users_error = |source| NodeError::Users {
            path: users_dir.clone(),
            source,
        };
        let users = AuthStore::open(&Disk::Os, &users_dir).map_err(users_error)?;
        let moved = users.take_from_metadata(&metadata).map_err(users_error)?;
        if moved > 0 {
            tracing::info!(records = moved, path = %users_dir.display(), "acl users and acls moved out of the metadata database");
        }
        let offsets =
            SledOffsetTable::open(&db, meta_dir.clone()).map_err(|source| NodeError::Offsets {
                path: meta_dir.clone(),
                source,
            })?;
        let broker = Broker::start(
            BrokerConfig {
                broker_name: config.broker_name.clone(),
                cluster_name: config.cluster_name.clone(),
                listen_addr: config.advertised(),
                default_topic_queue_nums: config.default_topic_queue_nums,
                auto_create_topic: config.auto_create_topic,
                auto_create_subscription_group: config.auto_create_subscription_group,
                channel_expiry: config.channel_expiry,
                lock_expiry: config.lock_expiry,
                pop: PopConfig {
                    checkpoint_window: config.pop_checkpoint_window,
                    ..BrokerConfig::default().pop
                },
                flush_consumer_offset_interval: config.flush_consumer_offset_interval,
                key_index: config.key_index,
                recall: config.recall_message_enable,
                lite_subscription_expiry: config.lite_subscription_expiry,
                lite_expiry: LiteExpiry {
                    check_interval: config.lite_ttl_check_interval,
                    min_ttl: config.lite_min_ttl,
                },
                idle_queue_release: config.idle_queue_release,
                retention: RetentionConfig {
                    max_age: config.retention,
                    cleanup_interval: config.cleanup_interval,
                    disk_max_used_ratio: config.disk_max_used_ratio,
                    disk_full_ratio: config.disk_full_ratio,
                    ..RetentionConfig::default()
                },
                transactions: TransactionConfig {
                    timeout: config.transaction_timeout,
                    check_interval: config.transaction_check_interval,
                    check_max: config.transaction_check_max,
                },
                ..BrokerConfig::default()
            },
            store,
            Box::new(offsets),
            metadata.clone(),
        )?;
        tracing::info!(data_dir = %config.data_dir.display(), flush = ?config.flush, "node opened");
        Ok(Node {
            config,
            broker,
            metadata,
            users: Arc::new(users),
            shut_down: false,
        })
    }

    /// The node's metadata database (topics, groups).
    pub fn metadata(&self) -> &MetadataStore {
        &self.metadata
    }

    /// The node's ACL 2.0 users and ACLs.
    pub fn users(&self) -> &Arc<AuthStore> {
        &self.users
    }

    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The broker's handle (admin calls, actor addresses for observation).
    pub fn broker(&self) -> &BrokerHandle {
        &self.broker
    }

    /// Every metric `skiff serve` exports on `/metrics`, read now: produce and consume counts
    /// per queue, each group's lag and in-flight messages, store bytes, and (when served over
    /// the network) connections and requests by code.
    pub async fn metrics(&self) -> Result<MetricsSnapshot, NodeError> {
        Ok(self.broker.metrics().await?)
    }

    /// The broker as the consumer and producer side reach it.
    pub fn broker_api(&self) -> Rc<dyn BrokerApi> {
        Rc::new(self.broker.clone())
    }

    pub fn producer(&self, group: impl Into<String>) -> Producer {
        Producer::new(group, self.broker_api())
    }

    /// A push-consumer builder for `group`; a broadcasting consumer keeps its offsets under
    /// `<data_dir>/broadcast-offsets/<group>` unless configured otherwise.
    pub fn push_consumer(&self, group: impl Into<String>) -> PushConsumerBuilder {
        let group = group.into();
        let local_dir = self.config.data_dir.join("broadcast-offsets").join(&group);
        PushConsumerBuilder::new(group).configure(move |config| {
            config.local_offset_dir = Some(local_dir);
        })
    }

    /// Starts a consumer built with [`Node::push_consumer`] against this node.
    pub fn start_consumer(&self, builder: PushConsumerBuilder) -> Result<PushConsumer, NodeError> {
        Ok(builder.start(self.broker_api())?)
    }

    /// Per queue of every topic `group` consumes: broker offset, consumer offset, lag, in
    /// flight and last commit time.
    pub async fn progress(&self, group: &str) -> Result<Vec<QueueProgress>, NodeError> {
        Ok(self.broker.progress(group).await?)
    }

    /// Persists offsets (awaited), flushes and closes the store, and returns once every file
    /// and database under the data directory is closed. Shut consumers down first so their
    /// final offsets are in.
    pub async fn shutdown(mut self) -> Result<(), NodeError> {
        self.shut_down = true;
        self.broker.shutdown().await?;
        tracing::info!(data_dir = %self.config.data_dir.display(), "node shut down");
        Ok(())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.shut_down {
            return;
        }
        // Without an arbiter the actors are gone already, and their files with them.
        if actix_rt::Arbiter::try_current().is_none() {
            return;
        }
        let broker = self.broker.clone();
        let data_dir = self.config.data_dir.clone();
        actix_rt::spawn(async move {
            if let Err(error) = broker.shutdown().await {
                tracing::error!(data_dir = %data_dir.display(), error = &error as &dyn std::error::Error, "shutdown of a dropped node failed");
            }
        });
    }
}

fn store_host(config: &NodeConfig) -> std::net::SocketAddr {
    config
        .advertised()
        .parse()
        .unwrap_or(std::net::SocketAddr::from(([127, 0, 0, 1], 10911)))
}
