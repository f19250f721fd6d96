//! The broker and name-server request processor: every request code skiff serves
//! (`reference/rocketmq-remoting.md` §2, §8) mapped to [`BrokerHandle`] calls with RocketMQ's
//! wire semantics (codes, remarks, header fields, bodies).
//!
//! # Threading
//!
//! [`BrokerHandle`] is `Rc`-based and lives on the actix arbiter that opened the node, while the
//! transport's [`RequestHandler`] must be `Send + Sync`. [`channel`] makes both halves of the
//! bridge: the [`RequestBridge`] (given to [`super::RemotingServer`]) forwards each request,
//! with a oneshot for its reply, over a bounded channel; [`spawn`] starts the loop on the arbiter
//! that owns the [`Processor`] and runs one local task per request. When the channel is full the
//! bridge answers SYSTEM_BUSY (2) at once, as Java's rejected thread pool does. A long poll is a
//! parked local task, never a slot in the channel; its response is sent when the broker's pull
//! future resolves.
//!
//! # Connections
//!
//! Each connection that sends a heartbeat gets one [`ConsumerNotifier`] (NOTIFY_CONSUMER_IDS_CHANGED,
//! code 40, oneway, on that connection). When the connection closes every client registered
//! through it leaves its groups at once ([`BrokerHandle::connection_closed`]), so a killed
//! consumer's queues and locks move to the others without waiting for the 120 s expiry.
//!
//! # Bad input
//!
//! A header that cannot be decoded is answered SYSTEM_ERROR (1) with Java's remark naming the
//! field ("the custom field <queueId> is null"), or the code Java's processor uses where it
//! checks itself (INVALID_PARAMETER 29 for UPDATE_CONSUMER_OFFSET). Bodies that cannot be
//! decoded are answered SYSTEM_ERROR or MESSAGE_ILLEGAL (13) with a remark. Nothing here
//! panics on network data.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tracing::{debug, error, info, trace, warn};

use skiff_actors::broker::BrokerHandle;
use skiff_actors::broker_api::{
    self, BrokerError, ConsumerHeartbeat, ConsumerNotifier, PullRequest, PullResponse, PullStatus,
    SendBackRequest, SubscriptionEntry,
};
use skiff_actors::logic::delay::RETRY_TOPIC_PREFIX;
use skiff_actors::logic::queue::MessageQueue as QueueRef;
use skiff_storage::message::property::{MAX_RECONSUME_TIMES, UNIQ_KEY};
use skiff_storage::message::{encode_properties, property, MessageToAppend, PROPERTY_SEPARATOR};
use skiff_storage::store::{is_valid_topic, BoundaryType as StoreBoundary, StoreError};

use super::body::{
    self, BodyError, BrokerData, ConsumeType, ConsumerListBody, HeartbeatData, JsonBody,
    LockBatchRequestBody, LockBatchResponseBody, MessageModel, MessageQueue, QueueData,
    TopicRouteData, UnlockBatchRequestBody,
};
use super::codes::{request as rc, response as code, version};
use super::frame::RemotingCommand;
use super::headers::{
    self, BoundaryType, ConsumerSendMsgBackRequestHeader, CustomHeader, ExtFields,
    GetConsumerListByGroupRequestHeader, GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader,
    GetRouteInfoRequestHeader, HeaderError, NotifyConsumerIdsChangedRequestHeader,
    OffsetResponseHeader, PullMessageRequestHeader, PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader, SearchOffsetRequestHeader, SendMessageRequestHeader,
    SendMessageResponseHeader, UnregisterClientRequestHeader, UpdateConsumerOffsetRequestHeader,
};
use super::server::{ConnectionHandle, ConnectionId, HandlerFuture, RequestHandler};

/// Requests waiting for the arbiter, across all connections, before SYSTEM_BUSY.
pub const DEFAULT_QUEUE_CAPACITY: usize = 4096;

/// The topic producers fall back to when their topic has no route (`TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC`).
pub const AUTO_CREATE_TOPIC_KEY: &str = "TBW102";

/// Ext keys of responses (`MixAll`, `MessageConst`).
pub mod ext {
    pub const MSG_REGION: &str = "MSG_REGION";
    pub const TRACE_ON: &str = "TRACE_ON";
    pub const IS_SUPPORT_HEART_BEAT_V2: &str = "IS_SUPPORT_HEART_BEAT_V2";
    pub const IS_SUB_CHANGE: &str = "IS_SUB_CHANGE";
}

/// Java's `BrokerConfig.regionId` default, answered as `MSG_REGION`.
const DEFAULT_REGION: &str = "DefaultRegion";
/// `FAQUrl.DEFAULT_FAQ_URL`.
const FAQ_URL: &str = "https://rocketmq.apache.org/docs/bestPractice/06FAQ";
/// Java's answer to a rejected request.
const BUSY_REMARK: &str = "[OVERLOAD]system busy, start flow control for a while";
/// `PermName`: inherit 1, write 2, read 4.
const PERM_RW: i32 = 6;
const PERM_INHERIT_RW: i32 = 7;
/// MessageSysFlag transaction type bits and the prepared (half) type.
const TRANSACTION_TYPE_MASK: i32 = 0xC;
const TRANSACTION_PREPARED: i32 = 0x4;
/// Topics producers may not send to (`TopicValidator.isNotAllowedSendTopic`, the subset skiff has).
const NOT_ALLOWED_SEND_TOPICS: [&str; 1] = ["SCHEDULE_TOPIC_XXXX"];

/// `FAQUrl.suggestTodo`.
fn suggest_todo() -> String {
    format!("\nSee {FAQ_URL} for further details.")
}

// ---- the bridge ----------------------------------------------------------------------------

struct Job {
    conn: ConnectionHandle,
    request: RemotingCommand,
    reply: oneshot::Sender<Option<RemotingCommand>>,
}

/// The `Send + Sync` half given to the remoting server: forwards requests to the arbiter.
pub struct RequestBridge {
    jobs: mpsc::Sender<Job>,
    closed: mpsc::UnboundedSender<ConnectionId>,
}

/// The arbiter half: what [`spawn`] consumes.
pub struct ProcessorInbox {
    jobs: mpsc::Receiver<Job>,
    closed: mpsc::UnboundedReceiver<ConnectionId>,
}

/// Makes the two halves of the bridge; `capacity` bounds the requests waiting for the arbiter.
pub fn channel(capacity: usize) -> (Arc<RequestBridge>, ProcessorInbox) {
    let (jobs_tx, jobs_rx) = mpsc::channel(capacity.max(1));
    let (closed_tx, closed_rx) = mpsc::unbounded_channel();
    (
        Arc::new(RequestBridge {
            jobs: jobs_tx,
            closed: closed_tx,
        }),
        ProcessorInbox {
            jobs: jobs_rx,
            closed: closed_rx,
        },
    )
}

impl RequestHandler for RequestBridge {
    fn handle(&self, conn: ConnectionHandle, request: RemotingCommand) -> HandlerFuture {
        let code = request.code;
        let opaque = request.opaque;
        let (reply, answer) = oneshot::channel();
        match self.jobs.try_send(Job {
            conn,
            request,
            reply,
        }) {
            Ok(()) => Box::pin(async move {
                match answer.await {
                    Ok(response) => response,
                    Err(_) => Some(RemotingCommand::new_response(
                        code::SYSTEM_ERROR,
                        Some("the request was dropped before it completed".to_owned()),
                    )),
                }
            }),
            Err(mpsc::error::TrySendError::Full(job)) => {
                warn!(conn = %job.conn.id(), code, opaque, "request queue full, answering system busy");
                Box::pin(std::future::ready(Some(RemotingCommand::new_response(
                    code::SYSTEM_BUSY,
                    Some(BUSY_REMARK.to_owned()),
                ))))
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                debug!(code, opaque, "request after the processor stopped");
                Box::pin(std::future::ready(Some(RemotingCommand::new_response(
                    code::SERVICE_NOT_AVAILABLE,
                    Some("the broker is shutting down".to_owned()),
                ))))
            }
        }
    }

    fn on_close(&self, conn_id: ConnectionId) {
        // Fails only once the processor stopped, which releases every connection itself.
        let _ = self.closed.send(conn_id);
    }
}

/// The running processor loop (see [`spawn`]).
pub struct ProcessorTask {
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl ProcessorTask {
    /// Stops taking requests, cancels the ones in progress (parked long polls included; their
    /// connections are closed by then) and lets every client still registered leave its groups.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Err(e) = (&mut self.done).await {
            error!(error = %e, "request processor loop failed");
        }
    }
}

/// Starts the processor loop on the current arbiter (inside an actix system / `LocalSet`).
pub fn spawn(processor: Processor, inbox: ProcessorInbox) -> ProcessorTask {
    let (stop, stopped) = oneshot::channel();
    let done = tokio::task::spawn_local(run(Rc::new(processor), inbox, stopped));
    ProcessorTask {
        stop: Some(stop),
        done,
    }
}

async fn run(processor: Rc<Processor>, inbox: ProcessorInbox, mut stop: oneshot::Receiver<()>) {
    let ProcessorInbox {
        mut jobs,
        mut closed,
    } = inbox;
    let mut tasks: JoinSet<()> = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => break,
            Some(id) = closed.recv() => {
                let processor = processor.clone();
                tasks.spawn_local(async move { processor.connection_closed(id).await });
            }
            Some(res) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(e) = res {
                    if e.is_panic() {
                        error!(error = %e, "request task panicked");
                    }
                }
            }
            job = jobs.recv() => match job {
                Some(Job { conn, request, reply }) => {
                    let processor = processor.clone();
                    tasks.spawn_local(async move {
                        let response = processor.process(conn, request).await;
                        let _ = reply.send(response);
                    });
                }
                None => break,
            },
        }
    }
    jobs.close();
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    processor.release_all().await;
    debug!("request processor stopped");
}

// ---- the processor -------------------------------------------------------------------------

/// Tells one connection's consumers that their group changed (code 40, oneway).
struct ConnectionNotifier {
    conn: ConnectionHandle,
}

impl ConsumerNotifier for ConnectionNotifier {
    fn consumer_ids_changed(&self, group: &str) {
        let header = NotifyConsumerIdsChangedRequestHeader {
            consumer_group: group.to_owned(),
        };
        let request = RemotingCommand::new_request(rc::NOTIFY_CONSUMER_IDS_CHANGED)
            .oneway()
            .with_ext_fields(header.to_ext());
        if let Err(e) = self.conn.try_send(request) {
            debug!(conn = %self.conn.id(), group, error = %e, "consumer ids changed notification not sent");
        }
    }
}

/// What the processor remembers of one connection that sent heartbeats.
struct ConnState {
    notifier: Arc<dyn ConsumerNotifier>,
    /// Last full subscription set per (group, client id), for heartbeat V2 without subscriptions.
    subscriptions: HashMap<(String, String), Vec<SubscriptionEntry>>,
}

/// Maps requests to broker calls. Lives on the broker's arbiter.
pub struct Processor {
    broker: BrokerHandle,
    conns: RefCell<HashMap<ConnectionId, ConnState>>,
    /// Heartbeat V2 fingerprint per group (Java's `consumerGroupHeartbeatTable`).
    fingerprints: RefCell<HashMap<String, i32>>,
}

/// An error answer: code and remark.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure {
    code: i32,
    remark: String,
}

impl Failure {
    fn new(code: i32, remark: impl Into<String>) -> Self {
        Failure {
            code,
            remark: remark.into(),
        }
    }

    fn system(remark: impl Into<String>) -> Self {
        Failure::new(code::SYSTEM_ERROR, remark)
    }
}

impl From<HeaderError> for Failure {
    fn from(e: HeaderError) -> Self {
        Failure::system(e.to_string())
    }
}

type Outcome = Result<RemotingCommand, Failure>;

fn success() -> RemotingCommand {
    RemotingCommand::new_response(code::SUCCESS, None)
}

/// The generic answer for a broker error; handlers override where Java words it differently.
fn broker_failure(e: BrokerError) -> Failure {
    match e {
        BrokerError::TopicNotExist { topic } => Failure::new(
            code::TOPIC_NOT_EXIST,
            format!(
                "topic[{topic}] not exist, apply first please!{}",
                suggest_todo()
            ),
        ),
        BrokerError::SubscriptionGroupNotExist { group } => Failure::new(
            code::SUBSCRIPTION_GROUP_NOT_EXIST,
            format!(
                "subscription group [{group}] does not exist, {}",
                suggest_todo()
            ),
        ),
        BrokerError::SubscriptionNotExist { .. } => Failure::new(
            code::SUBSCRIPTION_NOT_EXIST,
            format!("the consumer's subscription not exist{}", suggest_todo()),
        ),
        BrokerError::NoConsumer { group } => {
            Failure::system(format!("no consumer for this group, {group}"))
        }
        BrokerError::MessageNotFound { physical_offset } => {
            Failure::system(format!("look message by offset failed, {physical_offset}"))
        }
        BrokerError::Store(
            e @ (StoreError::MessageTooLarge { .. }
            | StoreError::PropertiesTooLarge { .. }
            | StoreError::InvalidTopic { .. }),
        ) => Failure::new(code::MESSAGE_ILLEGAL, e.to_string()),
        other => {
            warn!(error = %other, "broker call failed");
            Failure::system(other.to_string())
        }
    }
}

/// A queue id from a header; negative ids are illegal.
fn queue_index(queue_id: i32, topic: &str) -> Result<u32, Failure> {
    u32::try_from(queue_id)
        .map_err(|_| Failure::system(format!("queueId[{queue_id}] is illegal, topic:[{topic}]")))
}

fn body_failure(e: BodyError) -> Failure {
    let mut remark = e.to_string();
    if let Some(source) = std::error::Error::source(&e) {
        let _ = write!(remark, ": {source}");
    }
    Failure::system(remark)
}

impl Processor {
    pub fn new(broker: BrokerHandle) -> Self {
        Processor {
            broker,
            conns: RefCell::new(HashMap::new()),
            fingerprints: RefCell::new(HashMap::new()),
        }
    }

    pub fn broker(&self) -> &BrokerHandle {
        &self.broker
    }

    /// Handles one request: the response (with the request's opaque), or `None` for oneway
    /// requests.
    pub async fn process(
        self: Rc<Self>,
        conn: ConnectionHandle,
        request: RemotingCommand,
    ) -> Option<RemotingCommand> {
        trace!(conn = %conn.id(), code = request.code, opaque = request.opaque, "request");
        let outcome = match request.code {
            rc::GET_ROUTEINFO_BY_TOPIC => self.route(&request).await,
            rc::GET_BROKER_CLUSTER_INFO => self.cluster_info(&request),
            rc::GET_ALL_TOPIC_LIST_FROM_NAMESERVER => self.topic_list(),
            rc::SEND_MESSAGE | rc::SEND_MESSAGE_V2 | rc::SEND_BATCH_MESSAGE => {
                self.send(&conn, &request).await
            }
            rc::PULL_MESSAGE => {
                // A long poll whose connection closes is dropped at once, not at its timeout.
                tokio::select! {
                    outcome = self.pull(&request) => outcome,
                    _ = conn.closed() => {
                        debug!(conn = %conn.id(), opaque = request.opaque, "pull abandoned: connection closed");
                        return None;
                    }
                }
            }
            rc::QUERY_CONSUMER_OFFSET => self.query_offset(&request).await,
            rc::UPDATE_CONSUMER_OFFSET => self.update_offset(&request).await,
            rc::GET_MAX_OFFSET => self.max_offset(&request),
            rc::GET_MIN_OFFSET => self.min_offset(&request),
            rc::SEARCH_OFFSET_BY_TIMESTAMP => self.search_offset(&request),
            rc::HEART_BEAT => self.heartbeat(&conn, &request).await,
            rc::UNREGISTER_CLIENT => self.unregister(&conn, &request).await,
            rc::GET_CONSUMER_LIST_BY_GROUP => self.consumer_list(&request).await,
            rc::CONSUMER_SEND_MSG_BACK => self.send_back(&request).await,
            rc::LOCK_BATCH_MQ => self.lock(&request).await,
            rc::UNLOCK_BATCH_MQ => self.unlock(&request).await,
            rc::CHECK_CLIENT_CONFIG => check_client_config(&request),
            rc::GET_CONSUME_STATS => self.consume_stats(&request).await,
            rc::INVOKE_BROKER_TO_RESET_OFFSET => self.reset_offset(&request).await,
            other => {
                debug!(conn = %conn.id(), code = other, "request code not supported");
                return Some(RemotingCommand::not_supported(&request));
            }
        };
        if request.is_oneway() {
            if let Err(f) = &outcome {
                debug!(conn = %conn.id(), code = request.code, answer = f.code, remark = %f.remark, "oneway request failed");
            }
            return None;
        }
        let mut response = match outcome {
            Ok(response) => response,
            Err(f) => {
                debug!(conn = %conn.id(), code = request.code, answer = f.code, remark = %f.remark, "request refused");
                RemotingCommand::new_response(f.code, Some(f.remark))
            }
        };
        response.opaque = request.opaque;
        response.mark_response();
        Some(response)
    }

    // ---- name server ----------------------------------------------------------------------

    /// GET_ROUTEINFO_BY_TOPIC (105): one broker, this listener, as master.
    async fn route(&self, request: &RemotingCommand) -> Outcome {
        let header = GetRouteInfoRequestHeader::from_command(request)?;
        let config = self.broker.config();
        let (read, write, perm) = if header.topic == AUTO_CREATE_TOPIC_KEY {
            // Producers ask for it to fall back to auto-creation; it exists only when enabled.
            if !config.auto_create_topic {
                return Err(no_route(&header.topic));
            }
            let queues = config.default_topic_queue_nums;
            (queues, queues, PERM_INHERIT_RW)
        } else {
            match self.broker.route_topic(&header.topic).await {
                Ok(route) => (route.read_queue_nums, route.write_queue_nums, PERM_RW),
                Err(BrokerError::TopicNotExist { .. }) => return Err(no_route(&header.topic)),
                Err(e) => return Err(broker_failure(e)),
            }
        };
        let route = TopicRouteData {
            order_topic_conf: None,
            queue_datas: vec![QueueData {
                broker_name: config.broker_name.clone(),
                read_queue_nums: clamp_i32(read),
                write_queue_nums: clamp_i32(write),
                perm,
                topic_sys_flag: 0,
            }],
            broker_datas: vec![self.broker_data()],
            filter_server_table: BTreeMap::new(),
            topic_queue_mapping_by_broker: None,
        };
        let standard = header.wants_standard_json(request.version);
        Ok(success().with_body(route.encode_route(standard)))
    }

    fn broker_data(&self) -> BrokerData {
        let config = self.broker.config();
        BrokerData {
            cluster: config.cluster_name.clone(),
            broker_name: config.broker_name.clone(),
            broker_addrs: BTreeMap::from([(0, config.listen_addr.clone())]),
            zone_name: None,
            enable_acting_master: false,
        }
    }

    /// GET_BROKER_CLUSTER_INFO (106): `ClusterInfo` with this one broker.
    fn cluster_info(&self, request: &RemotingCommand) -> Outcome {
        let config = self.broker.config();
        let broker = self.broker_data();
        let body = serde_json::json!({
            "brokerAddrTable": { config.broker_name.clone(): broker },
            "clusterAddrTable": { config.cluster_name.clone(): [config.broker_name.clone()] },
        })
        .to_string();
        let body = if request.version >= version::V4_9_4 {
            body
        } else {
            // fastjson's default form, as a Java name server sends it to older clients.
            body.replace("\"brokerAddrs\":{\"0\":", "\"brokerAddrs\":{0:")
        };
        Ok(success().with_body(body))
    }

    /// GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206): `TopicList`.
    fn topic_list(&self) -> Outcome {
        let topics = self.broker.topics().map_err(broker_failure)?;
        let names: Vec<String> = topics.into_iter().map(|t| t.name).collect();
        let body = serde_json::json!({ "topicList": names }).to_string();
        Ok(success().with_body(body))
    }

    // ---- producer ---------------------------------------------------------------------------

    /// SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320).
    async fn send(&self, conn: &ConnectionHandle, request: &RemotingCommand) -> Outcome {
        let header = SendMessageRequestHeader::from_request(request)?;
        let topic = header.topic.as_str();
        if topic.trim().is_empty() {
            return Err(Failure::system("The specified topic is blank."));
        }
        if !is_valid_topic(topic) {
            return Err(Failure::system(format!(
                "The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
            )));
        }
        if NOT_ALLOWED_SEND_TOPICS.contains(&topic) {
            return Err(Failure::new(
                code::NO_PERMISSION,
                format!("Sending message to topic[{topic}] is forbidden."),
            ));
        }
        if header.properties_too_long() {
            return Err(Failure::new(
                code::MESSAGE_ILLEGAL,
                format!(
                    "the message properties length is {}, over the limit of {}",
                    header.properties.as_ref().map_or(0, String::len),
                    headers::MAX_PROPERTIES_LEN
                ),
            ));
        }
        if header.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_PREPARED {
            return Err(Failure::new(
                code::NO_PERMISSION,
                format!(
                    "the broker[{}] sending transaction message is forbidden",
                    self.broker.config().broker_name
                ),
            ));
        }
        let batch = request.code == rc::SEND_BATCH_MESSAGE;
        if batch && topic.starts_with(RETRY_TOPIC_PREFIX) {
            return Err(Failure::new(
                code::MESSAGE_ILLEGAL,
                "batch request does not support retry group",
            ));
        }
        let queue_id = self.send_queue(&header)?;
        let template = MessageToAppend {
            topic: header.topic.clone(),
            queue_id,
            flag: header.flag,
            sys_flag: header.sys_flag,
            born_timestamp: header.born_timestamp,
            born_host: conn.peer_addr(),
            reconsume_times: header.reconsume_times.unwrap_or(0),
            prepared_transaction_offset: 0,
            properties: send_properties(&header),
            body: request.body.clone(),
        };
        let messages = if batch {
            let entries = decode_batch(&request.body)
                .map_err(|reason| Failure::new(code::MESSAGE_ILLEGAL, reason))?;
            if entries.is_empty() {
                return Err(Failure::new(
                    code::MESSAGE_ILLEGAL,
                    "the batch contains no message",
                ));
            }
            entries
                .into_iter()
                // Field by field: `..template.clone()` would copy the header's properties for
                // every message only to drop them.
                .map(|e| MessageToAppend {
                    topic: template.topic.clone(),
                    queue_id: template.queue_id,
                    flag: e.flag,
                    sys_flag: template.sys_flag,
                    born_timestamp: template.born_timestamp,
                    born_host: template.born_host,
                    reconsume_times: template.reconsume_times,
                    prepared_transaction_offset: template.prepared_transaction_offset,
                    properties: e.properties,
                    body: e.body,
                })
                .collect()
        } else {
            vec![template]
        };
        let transaction_id = if batch {
            None
        } else {
            messages
                .first()
                .and_then(|m| property(&m.properties, UNIQ_KEY))
                .map(str::to_owned)
        };
        let batch_uniq_id = if batch {
            header
                .properties
                .as_deref()
                .and_then(|p| property(p, UNIQ_KEY))
                .map(str::to_owned)
        } else {
            None
        };
        let config = self.broker.config();
        let asked = u32::try_from(header.default_topic_queue_nums)
            .ok()
            .filter(|n| *n > 0)
            .unwrap_or(config.default_topic_queue_nums);
        let default_queue_nums = asked.min(config.default_topic_queue_nums).max(1);
        let results = self
            .broker
            .send_messages(messages, default_queue_nums)
            .await
            .map_err(broker_failure)?;
        let Some(first) = results.first() else {
            return Err(Failure::system("putMessageResult is null"));
        };
        let msg_id = results
            .iter()
            .map(|r| r.offset_msg_id.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let response_header = SendMessageResponseHeader {
            msg_id,
            queue_id: clamp_i32(first.queue_id),
            queue_offset: clamp_i64(first.queue_offset),
            transaction_id,
            batch_uniq_id,
            recall_handle: None,
        };
        Ok(success()
            .with_ext_fields(response_header.to_ext())
            .with_ext(ext::MSG_REGION, DEFAULT_REGION)
            .with_ext(ext::TRACE_ON, "true"))
    }

    /// The queue a send goes to: the header's, or a random one when it is negative (Java's
    /// `randomQueueId(writeQueueNums)`).
    fn send_queue(&self, header: &SendMessageRequestHeader) -> Result<u32, Failure> {
        if let Ok(queue_id) = u32::try_from(header.queue_id) {
            return Ok(queue_id);
        }
        let topics = self.broker.topics().map_err(broker_failure)?;
        let queues = topics
            .iter()
            .find(|t| t.name == header.topic)
            .map(|t| t.write_queue_nums)
            .or_else(|| u32::try_from(header.default_topic_queue_nums).ok())
            .unwrap_or(1)
            .max(1);
        Ok(rand::random::<u32>() % queues)
    }

    // ---- consumer ---------------------------------------------------------------------------

    /// PULL_MESSAGE (11), long polling included.
    async fn pull(&self, request: &RemotingCommand) -> Outcome {
        let header = PullMessageRequestHeader::from_command(request)?;
        let queue_id = queue_index(header.queue_id, &header.topic)?;
        let subscription = if header.has_subscription() {
            let kind = header.expression_type_or_tag();
            if !kind.eq_ignore_ascii_case("TAG") {
                return Err(Failure::system(format!(
                    "The broker does not support consumer to filter message by {kind}"
                )));
            }
            Some(
                header
                    .subscription
                    .clone()
                    .filter(|s| !s.trim().is_empty())
                    .unwrap_or_else(|| "*".to_owned()),
            )
        } else {
            None
        };
        let Ok(queue_offset) = u64::try_from(header.queue_offset) else {
            // Below every queue's min offset: Java's OFFSET_TOO_SMALL.
            let min = self.broker.min_offset_of(&header.topic, queue_id);
            let max = self.broker.max_offset_of(&header.topic, queue_id);
            return Ok(pull_answer(
                code::PULL_OFFSET_MOVED,
                "OFFSET_TOO_SMALL",
                min,
                min,
                max,
            ));
        };
        let has_commit_flag = header.has_commit_offset();
        let pull = PullRequest {
            group: header.consumer_group.clone(),
            topic: header.topic.clone(),
            queue_id,
            queue_offset,
            max_messages: u32::try_from(header.max_msg_nums).unwrap_or(1).max(1),
            commit_offset: if has_commit_flag {
                u64::try_from(header.commit_offset).ok()
            } else {
                None
            },
            suspend_timeout: header.has_suspend().then(|| {
                Duration::from_millis(u64::try_from(header.suspend_timeout_millis).unwrap_or(0))
            }),
            subscription,
        };
        let response = self
            .broker
            .pull_message(pull, has_commit_flag, true)
            .await
            .map_err(broker_failure)?;
        Ok(pull_response(queue_offset, response))
    }

    /// QUERY_CONSUMER_OFFSET (14).
    async fn query_offset(&self, request: &RemotingCommand) -> Outcome {
        let header = QueryConsumerOffsetRequestHeader::from_command(request)?;
        let queue_id = queue_index(header.queue_id, &header.topic)?;
        // Unset reads as true, as Java's processor does.
        let set_zero = header.set_zero_if_not_found.unwrap_or(true);
        let found = self
            .broker
            .query_consumer_offset(&header.consumer_group, &header.topic, queue_id, set_zero)
            .await
            .map_err(broker_failure)?;
        match found {
            Some(offset) => Ok(success().with_ext_fields(
                OffsetResponseHeader {
                    offset: clamp_i64(offset),
                }
                .to_ext(),
            )),
            None if !set_zero => Err(Failure::new(
                code::QUERY_NOT_FOUND,
                "Not found, do not set to zero, maybe this group boot first",
            )),
            None => Err(Failure::new(
                code::QUERY_NOT_FOUND,
                "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
            )),
        }
    }

    /// UPDATE_CONSUMER_OFFSET (15), usually oneway.
    async fn update_offset(&self, request: &RemotingCommand) -> Outcome {
        let header = match UpdateConsumerOffsetRequestHeader::from_command(request) {
            Ok(header) => header,
            Err(e) => {
                let topic = request.ext("topic").unwrap_or_default();
                return Err(match e.field() {
                    "queueId" => Failure::new(
                        code::INVALID_PARAMETER,
                        format!("QueueId is null, topic is {topic}"),
                    ),
                    "commitOffset" => Failure::new(
                        code::INVALID_PARAMETER,
                        format!("Offset is null, topic is {topic}"),
                    ),
                    _ => e.into(),
                });
            }
        };
        let topic = header.topic.as_str();
        let queue_id = u32::try_from(header.queue_id).map_err(|_| {
            Failure::new(
                code::INVALID_PARAMETER,
                format!("QueueId {} is illegal, topic is {topic}", header.queue_id),
            )
        })?;
        let offset = u64::try_from(header.commit_offset).map_err(|_| {
            Failure::new(
                code::INVALID_PARAMETER,
                format!(
                    "Offset {} is illegal, topic is {topic}",
                    header.commit_offset
                ),
            )
        })?;
        match self
            .broker
            .update_consumer_offset(&header.consumer_group, topic, queue_id, offset)
            .await
        {
            Ok(_) => Ok(success()),
            Err(BrokerError::SubscriptionGroupNotExist { group }) => Err(Failure::new(
                code::SUBSCRIPTION_GROUP_NOT_EXIST,
                format!("Group {group} not exist!"),
            )),
            Err(BrokerError::TopicNotExist { topic }) => Err(Failure::new(
                code::TOPIC_NOT_EXIST,
                format!("Topic {topic} not exist!"),
            )),
            Err(e) => Err(broker_failure(e)),
        }
    }

    /// GET_MAX_OFFSET (30).
    fn max_offset(&self, request: &RemotingCommand) -> Outcome {
        let header = GetMaxOffsetRequestHeader::from_command(request)?;
        let queue_id = queue_index(header.queue_id, &header.topic)?;
        let offset = self.broker.max_offset_of(&header.topic, queue_id);
        Ok(offset_answer(offset))
    }

    /// GET_MIN_OFFSET (31).
    fn min_offset(&self, request: &RemotingCommand) -> Outcome {
        let header = GetMinOffsetRequestHeader::from_command(request)?;
        let queue_id = queue_index(header.queue_id, &header.topic)?;
        let offset = self.broker.min_offset_of(&header.topic, queue_id);
        Ok(offset_answer(offset))
    }

    /// SEARCH_OFFSET_BY_TIMESTAMP (29).
    fn search_offset(&self, request: &RemotingCommand) -> Outcome {
        let header = SearchOffsetRequestHeader::from_command(request)?;
        let queue_id = queue_index(header.queue_id, &header.topic)?;
        let boundary = match header.boundary_type {
            BoundaryType::Lower => StoreBoundary::Lower,
            BoundaryType::Upper => StoreBoundary::Upper,
        };
        let offset = self
            .broker
            .search_offset_of(&header.topic, queue_id, header.timestamp, boundary)
            .map_err(broker_failure)?;
        Ok(offset_answer(offset))
    }

    /// HEART_BEAT (34): registers every consumer of the body with this connection's notifier.
    async fn heartbeat(&self, conn: &ConnectionHandle, request: &RemotingCommand) -> Outcome {
        let data = HeartbeatData::decode(&request.body).map_err(body_failure)?;
        let v2 = data.heartbeat_fingerprint != 0;
        // Java's V1 path always answers true; V2 tells whether the fingerprint changed.
        let mut sub_change = !v2;
        if conn.is_closed() || data.consumer_data_set.is_empty() {
            // Producers are not tracked; a closed connection has no one to register.
            return Ok(heartbeat_answer(sub_change));
        }
        let notifier = self.notifier_for(conn);
        for consumer in &data.consumer_data_set {
            let group = consumer.group_name.trim();
            if group.is_empty() {
                continue;
            }
            if v2 {
                let previous = self
                    .fingerprints
                    .borrow_mut()
                    .insert(group.to_owned(), data.heartbeat_fingerprint);
                if previous.is_some_and(|p| p != data.heartbeat_fingerprint) {
                    sub_change = true;
                }
            }
            let key = (group.to_owned(), data.client_id.clone());
            let subscriptions = if v2 && data.without_sub {
                match self.cached_subscriptions(conn.id(), &key) {
                    Some(subscriptions) => subscriptions,
                    None => {
                        // Unknown here (a new connection or a restarted broker): keep the
                        // member alive and ask for the full set.
                        sub_change = true;
                        Vec::new()
                    }
                }
            } else {
                let subscriptions = consumer
                    .subscription_data_set
                    .iter()
                    .filter(|s| !s.topic.is_empty())
                    .map(|s| {
                        if !s.expression_type.eq_ignore_ascii_case("TAG") {
                            warn!(group, topic = %s.topic, expression_type = %s.expression_type, "subscription filter type not supported, treated as a tag expression");
                        }
                        SubscriptionEntry {
                            topic: s.topic.clone(),
                            expression: if s.sub_string.trim().is_empty() {
                                "*".to_owned()
                            } else {
                                s.sub_string.clone()
                            },
                            sub_version: s.sub_version,
                        }
                    })
                    .collect::<Vec<_>>();
                self.cache_subscriptions(conn.id(), key, subscriptions.clone());
                subscriptions
            };
            let heartbeat = ConsumerHeartbeat {
                client_id: data.client_id.clone(),
                group: group.to_owned(),
                consume_type: match consumer.consume_type {
                    ConsumeType::ConsumeActively => broker_api::ConsumeType::Actively,
                    ConsumeType::ConsumePassively | ConsumeType::ConsumePop => {
                        broker_api::ConsumeType::Passively
                    }
                },
                message_model: match consumer.message_model {
                    MessageModel::Clustering => broker_api::MessageModel::Clustering,
                    MessageModel::Broadcasting => broker_api::MessageModel::Broadcasting,
                },
                consume_from_where: consumer.consume_from_where.name().to_owned(),
                subscriptions,
            };
            self.broker
                .register_consumer(heartbeat, notifier.clone())
                .await
                .map_err(broker_failure)?;
        }
        if conn.is_closed() {
            // Closed while registering: the close may have been handled before the
            // registration landed, so release again.
            self.conns.borrow_mut().remove(&conn.id());
            self.release(notifier).await;
        }
        Ok(heartbeat_answer(sub_change))
    }

    /// UNREGISTER_CLIENT (35).
    async fn unregister(&self, conn: &ConnectionHandle, request: &RemotingCommand) -> Outcome {
        let header = UnregisterClientRequestHeader::from_command(request)?;
        if let Some(group) = header.consumer_group.as_deref().filter(|g| !g.is_empty()) {
            let removed = self
                .broker
                .unregister_client(&header.client_id, Some(group))
                .await
                .map_err(broker_failure)?;
            if let Some(state) = self.conns.borrow_mut().get_mut(&conn.id()) {
                state
                    .subscriptions
                    .remove(&(group.to_owned(), header.client_id.clone()));
            }
            debug!(group, client_id = %header.client_id, removed, "client unregistered");
        }
        Ok(success())
    }

    /// GET_CONSUMER_LIST_BY_GROUP (38).
    async fn consumer_list(&self, request: &RemotingCommand) -> Outcome {
        let header = GetConsumerListByGroupRequestHeader::from_command(request)?;
        let ids = self
            .broker
            .consumers(&header.consumer_group)
            .await
            .map_err(broker_failure)?;
        let body = ConsumerListBody {
            consumer_id_list: ids,
        };
        Ok(success().with_body(body.encode()))
    }

    /// CONSUMER_SEND_MSG_BACK (36).
    async fn send_back(&self, request: &RemotingCommand) -> Outcome {
        let header = ConsumerSendMsgBackRequestHeader::from_command(request)?;
        let physical_offset = u64::try_from(header.offset).map_err(|_| {
            Failure::system(format!("look message by offset failed, {}", header.offset))
        })?;
        let back = SendBackRequest {
            group: header.group.clone(),
            physical_offset,
            delay_level: header.delay_level,
            origin_msg_id: header.origin_msg_id.clone(),
            origin_topic: header.origin_topic.clone(),
            max_reconsume_times: header
                .effective_max_reconsume_times(request.version)
                .map(|n| u32::try_from(n).unwrap_or(0)),
        };
        match self.broker.send_back_message(back).await {
            Ok(outcome) => {
                debug!(group = %header.group, offset = physical_offset, outcome = ?outcome, "message sent back");
                Ok(success())
            }
            Err(BrokerError::SubscriptionGroupNotExist { group }) => Err(Failure::new(
                code::SUBSCRIPTION_GROUP_NOT_EXIST,
                format!("subscription group not exist, {group} {}", suggest_todo()),
            )),
            Err(e) => Err(broker_failure(e)),
        }
    }

    /// LOCK_BATCH_MQ (41).
    async fn lock(&self, request: &RemotingCommand) -> Outcome {
        let body = LockBatchRequestBody::decode(&request.body).map_err(body_failure)?;
        let queues = queue_refs(&body.mq_set);
        let locked = self
            .broker
            .lock_queues(&body.consumer_group, &body.client_id, queues)
            .await
            .map_err(broker_failure)?;
        let answer = LockBatchResponseBody {
            lock_ok_mq_set: locked
                .into_iter()
                .map(|q| MessageQueue {
                    topic: q.topic,
                    broker_name: q.broker_name,
                    queue_id: clamp_i32(q.queue_id),
                })
                .collect(),
        };
        Ok(success().with_body(answer.encode()))
    }

    /// UNLOCK_BATCH_MQ (42).
    async fn unlock(&self, request: &RemotingCommand) -> Outcome {
        let body = UnlockBatchRequestBody::decode(&request.body).map_err(body_failure)?;
        let queues = queue_refs(&body.mq_set);
        self.broker
            .unlock_queues(&body.consumer_group, &body.client_id, queues)
            .await
            .map_err(broker_failure)?;
        Ok(success())
    }

    // ---- admin ------------------------------------------------------------------------------

    /// GET_CONSUME_STATS (208): RocketMQ's `ConsumeStats` for the group.
    async fn consume_stats(&self, request: &RemotingCommand) -> Outcome {
        let ext = &request.ext_fields;
        let group = required(ext, "consumerGroup")?;
        let topic_list: Vec<&str> = ext
            .get("topicList")
            .map(|l| {
                l.split(';')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let topic = ext.get("topic").map(|t| t.trim()).filter(|t| !t.is_empty());
        let rows = self.broker.progress(group).await.map_err(broker_failure)?;
        let broker_name = self.broker.config().broker_name.clone();
        let reader = self.broker.reader();
        let mut stats = ConsumeStats::default();
        for row in rows {
            let wanted = if !topic_list.is_empty() {
                topic_list.contains(&row.topic.as_str())
            } else {
                topic.is_none_or(|t| t == row.topic)
            };
            if !wanted {
                continue;
            }
            let consumer_offset = row.consumer_offset.unwrap_or(0);
            // Java's `max(consumerOffset, pullOffset)`: the next offset the group will pull.
            let pulled_from = row
                .consumer_offset
                .unwrap_or_else(|| self.broker.min_offset_of(&row.topic, row.queue_id));
            let pull_offset = consumer_offset.max(pulled_from.saturating_add(row.in_flight));
            let last_timestamp = match consumer_offset.checked_sub(1) {
                Some(last) => reader
                    .store_timestamp_at(&row.topic, row.queue_id, last)
                    .ok()
                    .flatten()
                    .unwrap_or(0),
                None => 0,
            };
            stats.offset_table.insert(
                MessageQueue {
                    topic: row.topic.clone(),
                    broker_name: broker_name.clone(),
                    queue_id: clamp_i32(row.queue_id),
                },
                OffsetWrapper {
                    broker_offset: clamp_i64(row.broker_offset),
                    consumer_offset: clamp_i64(consumer_offset),
                    pull_offset: clamp_i64(pull_offset),
                    last_timestamp,
                },
            );
        }
        Ok(success().with_body(stats.encode()))
    }

    /// INVOKE_BROKER_TO_RESET_OFFSET (222), server-side reset (Java 5.x
    /// `useServerSideResetOffset`): each reset is pending until the group's next pull of the
    /// queue, which answers PULL_OFFSET_MOVED with it.
    async fn reset_offset(&self, request: &RemotingCommand) -> Outcome {
        let ext = &request.ext_fields;
        let topic = required(ext, "topic")?.to_owned();
        let group = required(ext, "group")?.to_owned();
        let queue_id: i32 = optional_num(ext, "queueId")?.unwrap_or(-1);
        let offset: Option<i64> = optional_num(ext, "offset")?.filter(|o| *o != -1);
        let timestamp: Option<i64> = optional_num(ext, "timestamp")?;
        let config = self
            .broker
            .topics()
            .map_err(broker_failure)?
            .into_iter()
            .find(|t| t.name == topic)
            .ok_or_else(|| {
                Failure::new(
                    code::TOPIC_NOT_EXIST,
                    format!("Topic {topic} does not exist"),
                )
            })?;
        let resets: Vec<(u32, u64)> = if let Ok(queue_id) = u32::try_from(queue_id) {
            let min = self.broker.min_offset_of(&topic, queue_id);
            let max = self.broker.max_offset_of(&topic, queue_id);
            let target = match offset {
                Some(offset) => match u64::try_from(offset) {
                    Ok(o) if o >= min && o <= max.saturating_add(1) => o,
                    _ => {
                        return Err(Failure::system(format!(
                            "Target offset {offset} not in consume queue range [{min}-{max}]"
                        )))
                    }
                },
                None => {
                    let timestamp = timestamp.ok_or(HeaderError::Missing { field: "timestamp" })?;
                    if timestamp < 0 {
                        max
                    } else {
                        self.broker
                            .search_offset_of(&topic, queue_id, timestamp, StoreBoundary::Lower)
                            .map_err(broker_failure)?
                    }
                }
            };
            self.broker
                .reset_offset(&group, &topic, queue_id, target)
                .await
                .map_err(broker_failure)?;
            vec![(queue_id, target)]
        } else {
            let timestamp = timestamp.ok_or(HeaderError::Missing { field: "timestamp" })?;
            if config.read_queue_nums == 0 {
                return Err(Failure::system("No queues to reset."));
            }
            self.broker
                .reset_offset_by_time(&group, &topic, timestamp)
                .await
                .map_err(broker_failure)?
        };
        info!(group = %group, topic = %topic, queues = resets.len(), "consumer offsets reset by admin request");
        let broker_name = self.broker.config().broker_name.clone();
        let body = ResetOffsetBody {
            offset_table: resets
                .into_iter()
                .map(|(queue_id, offset)| {
                    (
                        MessageQueue {
                            topic: topic.clone(),
                            broker_name: broker_name.clone(),
                            queue_id: clamp_i32(queue_id),
                        },
                        clamp_i64(offset),
                    )
                })
                .collect(),
        };
        Ok(success().with_body(body.encode()))
    }

    // ---- connections ------------------------------------------------------------------------

    fn notifier_for(&self, conn: &ConnectionHandle) -> Arc<dyn ConsumerNotifier> {
        self.conns
            .borrow_mut()
            .entry(conn.id())
            .or_insert_with(|| ConnState {
                notifier: Arc::new(ConnectionNotifier { conn: conn.clone() }),
                subscriptions: HashMap::new(),
            })
            .notifier
            .clone()
    }

    fn cached_subscriptions(
        &self,
        id: ConnectionId,
        key: &(String, String),
    ) -> Option<Vec<SubscriptionEntry>> {
        self.conns
            .borrow()
            .get(&id)
            .and_then(|s| s.subscriptions.get(key).cloned())
    }

    fn cache_subscriptions(
        &self,
        id: ConnectionId,
        key: (String, String),
        subscriptions: Vec<SubscriptionEntry>,
    ) {
        if let Some(state) = self.conns.borrow_mut().get_mut(&id) {
            state.subscriptions.insert(key, subscriptions);
        }
    }

    /// A connection closed: the clients registered through it leave their groups.
    pub async fn connection_closed(&self, id: ConnectionId) {
        let state = self.conns.borrow_mut().remove(&id);
        if let Some(state) = state {
            self.release(state.notifier).await;
        }
    }

    async fn release(&self, notifier: Arc<dyn ConsumerNotifier>) {
        match self.broker.connection_closed(&notifier).await {
            Ok(0) => {}
            Ok(removed) => debug!(removed, "clients of a closed connection left their groups"),
            Err(e) => debug!(error = %e, "releasing a closed connection's clients failed"),
        }
    }

    /// Every connection still known leaves (shutdown).
    async fn release_all(&self) {
        let states: Vec<ConnState> = self.conns.borrow_mut().drain().map(|(_, s)| s).collect();
        for state in states {
            self.release(state.notifier).await;
        }
    }
}

/// A send's stored properties: the header's, plus `MAX_RECONSUME_TIMES` from the header for a
/// (client fallback) send to a retry topic that does not carry it, so the broker's dead-letter
/// check honours the consumer's limit as Java's `handleRetryAndDLQ` does.
fn send_properties(header: &SendMessageRequestHeader) -> String {
    let mut properties = header.properties.clone().unwrap_or_default();
    if let Some(max) = header.max_reconsume_times {
        if header.topic.starts_with(RETRY_TOPIC_PREFIX)
            && property(&properties, MAX_RECONSUME_TIMES).is_none()
        {
            if !properties.is_empty() && !properties.ends_with(PROPERTY_SEPARATOR) {
                properties.push(PROPERTY_SEPARATOR);
            }
            let max = max.to_string();
            properties.push_str(&encode_properties(&[(MAX_RECONSUME_TIMES, &max)]));
        }
    }
    properties
}

fn no_route(topic: &str) -> Failure {
    Failure::new(
        code::TOPIC_NOT_EXIST,
        format!(
            "No topic route info in name server for the topic: {topic}{}",
            suggest_todo()
        ),
    )
}

fn heartbeat_answer(sub_change: bool) -> RemotingCommand {
    success()
        .with_ext(ext::IS_SUPPORT_HEART_BEAT_V2, "true")
        .with_ext(ext::IS_SUB_CHANGE, sub_change.to_string())
}

fn offset_answer(offset: u64) -> RemotingCommand {
    success().with_ext_fields(
        OffsetResponseHeader {
            offset: clamp_i64(offset),
        }
        .to_ext(),
    )
}

/// CHECK_CLIENT_CONFIG (46): only TAG filtering is supported (Java without
/// `enablePropertyFilter`).
fn check_client_config(request: &RemotingCommand) -> Outcome {
    if request.body.is_empty() {
        return Ok(success());
    }
    let text = String::from_utf8_lossy(&request.body);
    let value: Value = serde_json::from_str(&body::normalize_fastjson(&text))
        .map_err(|e| Failure::system(format!("CheckClientRequestBody is invalid: {e}")))?;
    let kind = value
        .get("subscriptionData")
        .and_then(|s| s.get("expressionType"))
        .and_then(Value::as_str)
        .unwrap_or("TAG");
    if kind.eq_ignore_ascii_case("TAG") {
        Ok(success())
    } else {
        Err(Failure::system(format!(
            "The broker does not support consumer to filter message by {kind}"
        )))
    }
}

fn required<'a>(ext: &'a ExtFields, field: &'static str) -> Result<&'a str, HeaderError> {
    ext.get(field)
        .map(String::as_str)
        .ok_or(HeaderError::Missing { field })
}

fn optional_num<T: std::str::FromStr>(
    ext: &ExtFields,
    field: &'static str,
) -> Result<Option<T>, HeaderError> {
    match ext.get(field) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| HeaderError::Invalid {
                field,
                value: v.clone(),
            }),
    }
}

fn queue_refs(queues: &[MessageQueue]) -> Vec<QueueRef> {
    queues
        .iter()
        .filter_map(|q| {
            u32::try_from(q.queue_id)
                .ok()
                .map(|id| QueueRef::new(q.topic.clone(), q.broker_name.clone(), id))
        })
        .collect()
}

fn clamp_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn clamp_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The pull answer: code, `GetMessageStatus` name as remark, header, and the records on FOUND.
fn pull_response(requested: u64, response: PullResponse) -> RemotingCommand {
    let PullResponse {
        status,
        next_begin_offset,
        min_offset,
        max_offset,
        records,
    } = response;
    let (answer, remark) = match status {
        PullStatus::Found => (code::SUCCESS, "FOUND"),
        PullStatus::NoMatchedMessage => (code::PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE"),
        PullStatus::NoNewMessage if max_offset == 0 => {
            (code::PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE")
        }
        PullStatus::NoNewMessage => (code::PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE"),
        PullStatus::OffsetIllegal => (
            code::PULL_OFFSET_MOVED,
            if max_offset == 0 {
                "NO_MESSAGE_IN_QUEUE"
            } else if requested > max_offset {
                "OFFSET_OVERFLOW_BADLY"
            } else if requested < min_offset {
                "OFFSET_TOO_SMALL"
            } else {
                // A pending admin reset.
                "OFFSET_RESET"
            },
        ),
    };
    let mut command = pull_answer(answer, remark, next_begin_offset, min_offset, max_offset);
    if status == PullStatus::Found {
        command.body = records;
    }
    command
}

fn pull_answer(answer: i32, remark: &str, next: u64, min: u64, max: u64) -> RemotingCommand {
    let header = PullMessageResponseHeader {
        suggest_which_broker_id: 0,
        next_begin_offset: clamp_i64(next),
        min_offset: clamp_i64(min),
        max_offset: clamp_i64(max),
        offset_delta: None,
        topic_sys_flag: Some(0),
        group_sys_flag: Some(0),
        forbidden_type: None,
    };
    RemotingCommand::new_response(answer, Some(remark.to_owned())).with_ext_fields(header.to_ext())
}

// ---- batch body ----------------------------------------------------------------------------

/// One message of a SEND_BATCH_MESSAGE body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchEntry {
    pub flag: i32,
    pub body: Bytes,
    pub properties: String,
}

/// Fixed part of a batch record: total size, magic, body CRC, flag, body length.
const BATCH_FIXED: usize = 20;

fn be_i32(buf: &[u8], at: usize) -> Option<i32> {
    buf.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map(i32::from_be_bytes)
}

fn be_i16(buf: &[u8], at: usize) -> Option<i16> {
    buf.get(at..at + 2)
        .and_then(|b| b.try_into().ok())
        .map(i16::from_be_bytes)
}

/// Decodes a SEND_BATCH_MESSAGE body (`MessageDecoder.encodeMessage` records back to back:
/// `totalSize:i32 magic:i32 bodyCRC:i32 flag:i32 bodyLen:i32 body propsLen:i16 props`),
/// strictly: every length must agree with the record's total size.
pub fn decode_batch(body: &Bytes) -> Result<Vec<BatchEntry>, String> {
    let mut entries = Vec::new();
    let mut pos = 0usize;
    while pos < body.len() {
        let rest = &body[pos..];
        let bad = |what: &str| format!("batch message {} at byte {pos}: {what}", entries.len());
        let total = be_i32(rest, 0).ok_or_else(|| bad("truncated total size"))?;
        let total = usize::try_from(total)
            .ok()
            .filter(|t| *t >= BATCH_FIXED + 2 && *t <= rest.len())
            .ok_or_else(|| bad(&format!("invalid total size {total}")))?;
        let flag = be_i32(rest, 12).ok_or_else(|| bad("truncated flag"))?;
        let body_len = be_i32(rest, 16).ok_or_else(|| bad("truncated body length"))?;
        let body_len = usize::try_from(body_len)
            .ok()
            .filter(|l| BATCH_FIXED + l + 2 <= total)
            .ok_or_else(|| bad(&format!("invalid body length {body_len}")))?;
        let props_at = BATCH_FIXED + body_len;
        let props_len = be_i16(rest, props_at).ok_or_else(|| bad("truncated properties length"))?;
        let props_len = usize::try_from(props_len)
            .ok()
            .filter(|l| props_at + 2 + l == total)
            .ok_or_else(|| {
                bad(&format!(
                    "properties length {props_len} does not match the record size {total}"
                ))
            })?;
        let properties = std::str::from_utf8(&rest[props_at + 2..props_at + 2 + props_len])
            .map_err(|_| bad("properties are not valid utf-8"))?
            .to_owned();
        entries.push(BatchEntry {
            flag,
            body: body.slice(pos + BATCH_FIXED..pos + BATCH_FIXED + body_len),
            properties,
        });
        pos += total;
    }
    Ok(entries)
}

/// Encodes messages as a SEND_BATCH_MESSAGE body (the inverse of [`decode_batch`]).
pub fn encode_batch(entries: &[BatchEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in entries {
        let total = BATCH_FIXED + entry.body.len() + 2 + entry.properties.len();
        out.extend_from_slice(&clamp_usize_i32(total).to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&entry.flag.to_be_bytes());
        out.extend_from_slice(&clamp_usize_i32(entry.body.len()).to_be_bytes());
        out.extend_from_slice(&entry.body);
        let props_len = i16::try_from(entry.properties.len()).unwrap_or(i16::MAX);
        out.extend_from_slice(&props_len.to_be_bytes());
        out.extend_from_slice(entry.properties.as_bytes());
    }
    out
}

fn clamp_usize_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

// ---- admin bodies --------------------------------------------------------------------------

/// One queue of [`ConsumeStats`] (`OffsetWrapper`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OffsetWrapper {
    #[serde(default)]
    pub broker_offset: i64,
    #[serde(default)]
    pub consumer_offset: i64,
    #[serde(default)]
    pub pull_offset: i64,
    /// Store time of the last consumed message (0 when none).
    #[serde(default)]
    pub last_timestamp: i64,
}

/// GET_CONSUME_STATS (208) response body (`ConsumeStats`).
///
/// Encoded as a Java broker's fastjson does: the `offsetTable` keys are MessageQueue JSON
/// objects (`{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}`, not standard JSON). Decoding
/// accepts those and keys that are strings holding the MessageQueue JSON.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConsumeStats {
    pub offset_table: BTreeMap<MessageQueue, OffsetWrapper>,
    pub consume_tps: f64,
}

impl ConsumeStats {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = String::from("{\"consumeTps\":");
        out.push_str(&json_f64(self.consume_tps));
        out.push_str(",\"offsetTable\":");
        write_mq_map(&mut out, &self.offset_table, |w| {
            serde_json::to_string(w).unwrap_or_else(|_| "{}".to_owned())
        });
        out.push('}');
        out.into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, BodyError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Raw {
            #[serde(default)]
            offset_table: BTreeMap<String, OffsetWrapper>,
            #[serde(default)]
            consume_tps: Option<f64>,
        }
        let raw: Raw = decode_mq_keyed(bytes, "ConsumeStats")?;
        Ok(ConsumeStats {
            offset_table: mq_keys(raw.offset_table, "ConsumeStats")?,
            consume_tps: raw.consume_tps.unwrap_or(0.0),
        })
    }
}

/// INVOKE_BROKER_TO_RESET_OFFSET (222) response body (`ResetOffsetBody`): the offset each queue
/// was reset to. Same key encoding as [`ConsumeStats`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResetOffsetBody {
    pub offset_table: BTreeMap<MessageQueue, i64>,
}

impl ResetOffsetBody {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = String::from("{\"offsetTable\":");
        write_mq_map(&mut out, &self.offset_table, |o| o.to_string());
        out.push('}');
        out.into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, BodyError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Raw {
            #[serde(default)]
            offset_table: BTreeMap<String, i64>,
        }
        let raw: Raw = decode_mq_keyed(bytes, "ResetOffsetBody")?;
        Ok(ResetOffsetBody {
            offset_table: mq_keys(raw.offset_table, "ResetOffsetBody")?,
        })
    }
}

fn json_f64(v: f64) -> String {
    if v.is_finite() {
        let s = v.to_string();
        if s.contains('.') || s.contains('e') {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        "0.0".to_owned()
    }
}

/// fastjson's `MessageQueue` key: fields sorted by name.
fn mq_key(mq: &MessageQueue) -> String {
    serde_json::json!({
        "brokerName": mq.broker_name,
        "queueId": mq.queue_id,
        "topic": mq.topic,
    })
    .to_string()
}

fn write_mq_map<V>(
    out: &mut String,
    map: &BTreeMap<MessageQueue, V>,
    value: impl Fn(&V) -> String,
) {
    out.push('{');
    for (i, (mq, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{}:{}", mq_key(mq), value(v));
    }
    out.push('}');
}

fn decode_mq_keyed<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    kind: &'static str,
) -> Result<T, BodyError> {
    let text = std::str::from_utf8(bytes).map_err(|source| BodyError::Utf8 { kind, source })?;
    let text = object_keys_to_strings(text);
    body::decode_json(text.as_bytes(), kind)
}

fn mq_keys<V>(
    map: BTreeMap<String, V>,
    kind: &'static str,
) -> Result<BTreeMap<MessageQueue, V>, BodyError> {
    map.into_iter()
        .map(|(k, v)| {
            MessageQueue::decode(k.as_bytes())
                .map(|mq| (mq, v))
                .map_err(|e| match e {
                    BodyError::Json { source, .. } => BodyError::Json { kind, source },
                    other => other,
                })
        })
        .collect()
}

/// Rewrites object-valued map keys (fastjson's encoding of non-string keys, e.g.
/// `{{"topic":"T"}:1}`) into JSON strings holding the object (`{"{\"topic\":\"T\"}":1}`).
/// Everything else is left as is; text without such keys is returned borrowed.
fn object_keys_to_strings(input: &str) -> Cow<'_, str> {
    #[derive(Clone, Copy)]
    enum Frame {
        /// An object; true while a key is expected.
        Object(bool),
        Array,
    }
    let b = input.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0usize;
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0usize;
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' => {
                i = skip_string(b, i);
                continue;
            }
            b'{' => {
                if let Some(Frame::Object(true)) = stack.last() {
                    let end = matching_brace(b, i);
                    let key = &input[i..end];
                    let out = out.get_or_insert_with(|| String::with_capacity(input.len() + 16));
                    out.push_str(&input[copied..i]);
                    out.push_str(&Value::String(key.to_owned()).to_string());
                    copied = end;
                    i = end;
                    continue;
                }
                stack.push(Frame::Object(true));
            }
            b'[' => stack.push(Frame::Array),
            b'}' | b']' => {
                stack.pop();
            }
            b':' => {
                if let Some(Frame::Object(expect_key)) = stack.last_mut() {
                    *expect_key = false;
                }
            }
            b',' => {
                if let Some(Frame::Object(expect_key)) = stack.last_mut() {
                    *expect_key = true;
                }
            }
            _ => {}
        }
        i += 1;
    }
    match out {
        Some(mut out) => {
            out.push_str(&input[copied..]);
            Cow::Owned(out)
        }
        None => Cow::Borrowed(input),
    }
}

/// Index just past the string starting at `start` (double or single quoted), or the end.
fn skip_string(b: &[u8], start: usize) -> usize {
    let quote = b[start];
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// Index just past the `}` matching the `{` at `start`, or the end.
fn matching_brace(b: &[u8], start: usize) -> usize {
    let mut depth = 0usize;
    let mut i = start;
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' => {
                i = skip_string(b, i);
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mq(topic: &str, queue_id: i32) -> MessageQueue {
        MessageQueue {
            topic: topic.to_owned(),
            broker_name: "skiff".to_owned(),
            queue_id,
        }
    }

    #[test]
    fn batch_round_trip_and_strict_lengths() {
        let entries = vec![
            BatchEntry {
                flag: 0,
                body: Bytes::from_static(b"one"),
                properties: "TAGS\u{1}a\u{2}".to_owned(),
            },
            BatchEntry {
                flag: 7,
                body: Bytes::new(),
                properties: String::new(),
            },
        ];
        let encoded = Bytes::from(encode_batch(&entries));
        assert_eq!(decode_batch(&encoded), Ok(entries));
        assert_eq!(decode_batch(&Bytes::new()), Ok(Vec::new()));
        // Truncated, and a total size that disagrees with the fields.
        let cut = encoded.slice(..encoded.len() - 1);
        assert!(decode_batch(&cut).is_err());
        let mut bad = encoded.to_vec();
        bad[3] = bad[3].wrapping_add(1);
        assert!(decode_batch(&Bytes::from(bad)).is_err());
        let mut negative = encoded.to_vec();
        negative[16..20].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(decode_batch(&Bytes::from(negative)).is_err());
    }

    #[test]
    fn consume_stats_use_fastjson_object_keys_and_decode_both_forms() -> Result<(), BodyError> {
        let mut stats = ConsumeStats::default();
        stats.offset_table.insert(
            mq("T", 0),
            OffsetWrapper {
                broker_offset: 10,
                consumer_offset: 4,
                pull_offset: 4,
                last_timestamp: 1_700_000_000_000,
            },
        );
        stats
            .offset_table
            .insert(mq("T", 1), OffsetWrapper::default());
        let encoded = String::from_utf8(stats.encode()).unwrap_or_default();
        assert!(
            encoded.starts_with(
                r#"{"consumeTps":0.0,"offsetTable":{{"brokerName":"skiff","queueId":0,"topic":"T"}:{"brokerOffset":10,"#
            ),
            "{encoded}"
        );
        assert_eq!(ConsumeStats::decode(encoded.as_bytes())?, stats);
        let string_keys = r#"{"offsetTable":{"{\"topic\":\"T\",\"brokerName\":\"skiff\",\"queueId\":1}":{"brokerOffset":3}},"consumeTps":1.5}"#;
        let decoded = ConsumeStats::decode(string_keys.as_bytes())?;
        assert_eq!(decoded.consume_tps, 1.5);
        assert_eq!(
            decoded
                .offset_table
                .get(&mq("T", 1))
                .map(|w| w.broker_offset),
            Some(3)
        );
        Ok(())
    }

    #[test]
    fn reset_offset_body_round_trips() -> Result<(), BodyError> {
        let body = ResetOffsetBody {
            offset_table: BTreeMap::from([(mq("T", 0), 5), (mq("T", 1), 0)]),
        };
        let encoded = body.encode();
        assert_eq!(ResetOffsetBody::decode(&encoded)?, body);
        assert!(ResetOffsetBody::decode(b"{\"offsetTable\":{{\"topic\":").is_err());
        Ok(())
    }

    #[test]
    fn object_key_rewrite_leaves_other_json_alone() {
        let plain = r#"{"a":{"b":[{"c":"{x}"}]}}"#;
        assert!(matches!(object_keys_to_strings(plain), Cow::Borrowed(_)));
        assert_eq!(
            object_keys_to_strings(r#"{"m":{{"k":"}"}:1,{"k":2}:[{}]}}"#),
            r#"{"m":{"{\"k\":\"}\"}":1,"{\"k\":2}":[{}]}}"#
        );
    }

    #[test]
    fn pull_remarks_follow_the_store_status() {
        let resp = |status, next, min, max| PullResponse {
            status,
            next_begin_offset: next,
            min_offset: min,
            max_offset: max,
            records: Bytes::new(),
        };
        let remark = |c: RemotingCommand| (c.code, c.remark.unwrap_or_default());
        assert_eq!(
            remark(pull_response(5, resp(PullStatus::NoNewMessage, 5, 0, 5))),
            (19, "OFFSET_OVERFLOW_ONE".to_owned())
        );
        assert_eq!(
            remark(pull_response(0, resp(PullStatus::NoNewMessage, 0, 0, 0))),
            (19, "NO_MESSAGE_IN_QUEUE".to_owned())
        );
        assert_eq!(
            remark(pull_response(9, resp(PullStatus::OffsetIllegal, 5, 0, 5))),
            (21, "OFFSET_OVERFLOW_BADLY".to_owned())
        );
        assert_eq!(
            remark(pull_response(2, resp(PullStatus::OffsetIllegal, 0, 0, 5))),
            (21, "OFFSET_RESET".to_owned())
        );
        let moved = pull_response(9, resp(PullStatus::OffsetIllegal, 5, 0, 5));
        assert_eq!(moved.ext("nextBeginOffset"), Some("5"));
        assert_eq!(moved.ext("suggestWhichBrokerId"), Some("0"));
        assert_eq!(moved.ext("maxOffset"), Some("5"));
    }
}
