//! Test helpers shared by skiff-actors' tests and the crates above it (feature `testsuite`): an
//! actix system on a current-thread runtime whose clock starts paused, so tests move time with
//! `tokio::time::advance` instead of sleeping; a broker over a real store, sled offset table and
//! metadata in a directory the test owns; and builders for the messages, pulls and heartbeats the
//! broker tests send.

use crate::broker::retention::DiskMeter;
use crate::broker::{Broker, BrokerConfig, BrokerHandle};
use crate::broker_api::{
    ConnectionId, ConsumeType, ConsumerHeartbeat, ConsumerNotifier, MessageModel, PullRequest,
    QueryOffsetRequest, SubscriptionEntry,
};
use crate::logic::queue::MessageQueue;
use bytes::Bytes;
use skiff_storage::message::property::{TAGS, WAIT};
use skiff_storage::message::{encode_properties, push_property, MessageToAppend};
use skiff_storage::metadata::{open_db, MetadataStore, SubscriptionGroupConfig};
use skiff_storage::offset_table::SledOffsetTable;
use skiff_storage::store::{FlushPolicy, MessageStore, StoreConfig};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Runs `test` on an actix system over a current-thread tokio runtime with paused time.
pub fn run_paused<F: Future>(test: impl FnOnce() -> F) -> F::Output {
    actix_rt::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("tokio runtime")
    })
    .block_on(test())
}

/// Where [`start_broker`] keeps the message store under `root`.
pub fn store_dir(root: &Path) -> PathBuf {
    root.join("store")
}

/// Where [`start_broker`] keeps the offset table and metadata under `root`.
pub fn meta_dir(root: &Path) -> PathBuf {
    root.join("meta")
}

/// Puts a subscription group config into the metadata before a broker starts.
pub fn put_group(root: &Path, group: SubscriptionGroupConfig) {
    let db = open_db(meta_dir(root)).expect("open meta db");
    let metadata = MetadataStore::open(&db, meta_dir(root)).expect("open metadata");
    metadata.put_subscription_group(&group).expect("put group");
    metadata.flush().expect("flush metadata");
}

/// A broker over a store (8 MiB segments, asynchronous flush), offset table and metadata under
/// `root`; a directory that held one before resumes its state.
pub fn start_broker(root: &Path, config: BrokerConfig) -> BrokerHandle {
    start_broker_with(root, config, FlushPolicy::Async)
}

/// [`start_broker`] with the given flush policy. The broker sees an empty disk whatever the
/// host's: a test machine's disk use must neither delete a test's segments early nor refuse its
/// sends (a test of the disk guard gives its own meter through [`start_broker_measured`]).
pub fn start_broker_with(
    root: &Path,
    mut config: BrokerConfig,
    flush: FlushPolicy,
) -> BrokerHandle {
    config.retention.meter = DiskMeter::new(|_| Ok(0.0));
    start_broker_measured(root, config, flush)
}

/// [`start_broker_with`] keeping `config`'s disk meter.
pub fn start_broker_measured(
    root: &Path,
    config: BrokerConfig,
    flush: FlushPolicy,
) -> BrokerHandle {
    start_broker_on(
        root,
        config,
        StoreConfig {
            segment_size: 8 << 20,
            flush_policy: flush,
            ..StoreConfig::new(store_dir(root))
        },
    )
}

/// A broker on the store `store_config` describes (a simulated disk, say), its metadata and
/// offsets under `root`; `config`'s disk meter is kept.
pub fn start_broker_on(
    root: &Path,
    config: BrokerConfig,
    store_config: StoreConfig,
) -> BrokerHandle {
    let store = MessageStore::open(store_config).expect("open store");
    let db = open_db(meta_dir(root)).expect("open meta db");
    let offsets = SledOffsetTable::open(&db, meta_dir(root)).expect("open offset table");
    let metadata = MetadataStore::open(&db, meta_dir(root)).expect("open metadata");
    drop(db);
    Broker::start(config, store, Box::new(offsets), metadata).expect("start broker")
}

/// A plain message for `queue_id` of `topic`, tagged `tag` when given: the store's test
/// message (`skiff_storage::testsuite::message`) with `WAIT` set and a loopback born host.
pub fn message(topic: &str, queue_id: u32, body: &str, tag: Option<&str>) -> MessageToAppend {
    let properties = match tag {
        Some(tag) => encode_properties(&[(TAGS, tag), (WAIT, "true")]),
        None => encode_properties(&[(WAIT, "true")]),
    };
    MessageToAppend {
        born_host: SocketAddr::from(([127, 0, 0, 1], 40000)),
        properties,
        ..skiff_storage::testsuite::message(topic, queue_id, Bytes::from(body.to_string()))
    }
}

/// `message` with one more property.
pub fn with_property(mut message: MessageToAppend, name: &str, value: &str) -> MessageToAppend {
    push_property(&mut message.properties, name, value);
    message
}

/// A pull of up to 32 messages with the request's own subscription `*`.
pub fn pull(group: &str, topic: &str, queue_id: u32, offset: u64) -> PullRequest {
    PullRequest {
        group: group.to_string(),
        topic: topic.to_string(),
        broker_name: String::new(),
        queue_id,
        queue_offset: offset,
        max_messages: 32,
        commit_offset: None,
        suspend_timeout: None,
        subscription: Some("*".to_string()),
        expression_type: crate::broker_api::ExpressionType::Tag,
    }
}

/// Queue `queue_id` of `topic` on the in-process broker (which does not read the broker name).
pub fn queue_of(topic: &str, queue_id: u32) -> MessageQueue {
    MessageQueue::new(topic, "", queue_id)
}

/// QUERY_CONSUMER_OFFSET of `group` on queue `queue_id` of `topic`.
pub fn offset_query(
    group: &str,
    topic: &str,
    queue_id: u32,
    set_zero_if_not_found: bool,
) -> QueryOffsetRequest {
    QueryOffsetRequest {
        group: group.to_string(),
        queue: queue_of(topic, queue_id),
        set_zero_if_not_found,
    }
}

/// A clustering push consumer's heartbeat subscribing to one topic.
pub fn heartbeat(client_id: &str, group: &str, topic: &str, expression: &str) -> ConsumerHeartbeat {
    ConsumerHeartbeat {
        client_id: client_id.to_string(),
        group: group.to_string(),
        consume_type: ConsumeType::Passively,
        message_model: MessageModel::Clustering,
        consume_from_where: "CONSUME_FROM_LAST_OFFSET".to_string(),
        subscriptions: vec![SubscriptionEntry {
            topic: topic.to_string(),
            expression_type: crate::broker_api::ExpressionType::Tag,
            expression: expression.to_string(),
            sub_version: 1,
        }],
    }
}

/// Records every NOTIFY_CONSUMER_IDS_CHANGED it receives; each one is a connection of its own.
pub struct RecordingNotifier {
    connection: ConnectionId,
    calls: Mutex<Vec<String>>,
}

impl Default for RecordingNotifier {
    fn default() -> Self {
        RecordingNotifier {
            connection: ConnectionId::next(),
            calls: Mutex::default(),
        }
    }
}

impl RecordingNotifier {
    pub fn count(&self) -> usize {
        self.calls.lock().map(|c| c.len()).unwrap_or(0)
    }
}

impl ConsumerNotifier for RecordingNotifier {
    fn connection(&self) -> ConnectionId {
        self.connection
    }

    fn consumer_ids_changed(&self, group: &str) {
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(group.to_string());
        }
    }
}

/// A fresh [`RecordingNotifier`].
pub fn notifier() -> Arc<RecordingNotifier> {
    Arc::new(RecordingNotifier::default())
}

/// The same notifier as the trait object the broker takes.
pub fn as_notifier(n: &Arc<RecordingNotifier>) -> Arc<dyn ConsumerNotifier> {
    n.clone()
}

/// Advances paused time in steps, letting timers and the actors they wake run between steps.
pub async fn advance(total: Duration) {
    let step = Duration::from_millis(100);
    let mut left = total;
    while left > Duration::ZERO {
        let d = left.min(step);
        tokio::time::advance(d).await;
        settle().await;
        left -= d;
    }
}

/// Lets every ready task and actor run (a few scheduler rounds).
pub async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}
