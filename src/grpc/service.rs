//! `apache.rocketmq.v2.MessagingService`: each RPC decoded, answered by the broker through
//! [`BrokerLink`], and encoded with the codes the Apache proxy answers. No broker rule lives
//! here: sends, pops, acknowledgements, invisible-time changes, transactions, dead letters and
//! membership are the broker calls the remoting processor makes.
//!
//! Every response carries its own `Status`; the gRPC status stays OK unless the request could not
//! be read at all (as the proxy answers).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Streaming};
use tracing::{debug, info};

use skiff_actors::broker::connections::ClientDescription;
use skiff_actors::broker::{BrokerHandle, PopRequest};
use skiff_actors::broker_api::{
    BrokerError, ConsumeType, ConsumerHeartbeat, EndTransactionRequest, ExpressionType,
    MessageModel, SendBackRequest, SendRequest, SendStatus, SubscriptionEntry,
};
use skiff_actors::logic::delay::DELAY_LEVELS;
use skiff_actors::logic::pop::{Receipt, MAX_POP_MESSAGES};
use skiff_actors::logic::transaction::TransactionResolution;
use skiff_actors::refused::Refused;
use skiff_storage::message::property::UNIQ_KEY;
use skiff_storage::message::{decode_records, StoredMessage};
use skiff_storage::metadata::{TopicMessageType, PERM_READ, PERM_WRITE};

use super::clients::{Client, Clients, GrpcConsumer, GrpcTransactionChecker, TELEMETRY_QUEUE};
use super::convert::{self, duration, duration_ms, message_from_stored, message_to_append};
use super::pb::messaging_service_server::MessagingService;
use super::pb::{self, Code};
use super::resource;
use super::status::{broker_status, ok, status};
use super::transaction_id::TransactionId;
use super::CallerIdentity;
use crate::acl::{rules, Acl, Action, Check, Identity, Need};
use crate::broker_link::{BrokerLink, LinkError};

/// What the service needs to know of the node.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub broker_name: String,
    /// The largest body a producer may send (`publishing.max_body_size`).
    pub max_body_size: usize,
}

/// Invisible times a receive may ask for (the proxy's bounds).
const MIN_INVISIBLE: Duration = Duration::from_secs(10);
const MAX_INVISIBLE: Duration = Duration::from_secs(12 * 60 * 60);
/// What an auto-renewed receive holds a message for; the client acknowledges or changes it.
const AUTO_RENEW_INVISIBLE: Duration = Duration::from_secs(60);
/// Long-poll bounds (the proxy's `grpcClientConsumer{Min,Max}LongPollingTimeoutMillis`).
const MIN_LONG_POLL: Duration = Duration::from_secs(5);
const MAX_LONG_POLL: Duration = Duration::from_secs(20);
/// What a receive keeps of its deadline to send its answer in.
const DEADLINE_MARGIN: Duration = Duration::from_millis(500);
/// Messages per receive when the client asks for none or too many.
const RECEIVE_BATCH: u32 = 32;
/// Producer retries the server tells clients (the proxy's defaults).
const PRODUCER_MAX_ATTEMPTS: i32 = 3;

/// The service tonic serves.
#[derive(Clone)]
pub struct GrpcService {
    link: BrokerLink,
    clients: Clients,
    config: Arc<ServiceConfig>,
    /// Set when the server stops: Telemetry streams end then.
    stopped: watch::Receiver<bool>,
}

/// Who sent a request: the metadata every RPC carries.
struct Caller {
    client_id: String,
    /// `x-mq-language` and `x-mq-client-version`, for admin listings.
    language: String,
    version: String,
    peer: SocketAddr,
    /// What is left of the call's deadline (`grpc-timeout`), when the client set one.
    deadline: Option<Duration>,
    /// Who signed the call; `None` when ACL is off.
    identity: Option<Identity>,
}

impl Caller {
    /// Whether the caller may do all of `checks`; UNAUTHORIZED naming the first it may not (the
    /// code RocketMQ's proxy answers for a permission refused, as for a signature).
    fn authorize(&self, checks: Vec<Check>) -> Result<(), pb::Status> {
        let Some(identity) = &self.identity else {
            return Ok(());
        };
        Acl::authorize(identity, &Need::Access(checks), 0, self.peer.ip()).map_err(|refusal| {
            debug!(client_id = %self.client_id, reason = %refusal, "grpc call refused by the acl");
            status(Code::Unauthorized, refusal.to_string())
        })
    }
}

fn caller<T>(request: &Request<T>) -> Result<Caller, pb::Status> {
    let metadata = request.metadata();
    let text = |key: &str| {
        metadata
            .get(key)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .unwrap_or("")
            .to_owned()
    };
    let identity = match request.extensions().get::<CallerIdentity>() {
        None => None,
        Some(CallerIdentity(Ok(identity))) => Some(identity.clone()),
        Some(CallerIdentity(Err(refusal))) => {
            return Err(status(Code::Unauthorized, refusal.to_string()))
        }
    };
    let client_id = text("x-mq-client-id");
    if client_id.is_empty() {
        return Err(status(
            Code::ClientIdRequired,
            "x-mq-client-id is required in the request metadata",
        ));
    }
    Ok(Caller {
        client_id,
        language: text("x-mq-language"),
        version: text("x-mq-client-version"),
        peer: request
            .remote_addr()
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0))),
        deadline: metadata
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout),
        identity,
    })
}

/// `grpc-timeout`: up to eight digits and a unit (H, M, S, m, u, n).
fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

fn link_status(e: LinkError) -> pb::Status {
    match e {
        LinkError::Busy => status(Code::TooManyRequests, e.to_string()),
        LinkError::Stopped => status(Code::InternalServerError, e.to_string()),
    }
}

fn bad_request(message: impl Into<String>) -> pb::Status {
    status(Code::BadRequest, message)
}

type Reply<T> = Result<Response<T>, tonic::Status>;

fn reply<T>(message: T) -> Reply<T> {
    Ok(Response::new(message))
}

/// The filter a subscription or receive names, as the broker reads it.
fn filter_of(
    expression: Option<&pb::FilterExpression>,
) -> Result<(ExpressionType, String), pb::Status> {
    let Some(expression) = expression else {
        return Ok((ExpressionType::Tag, "*".to_owned()));
    };
    let kind = match pb::FilterType::try_from(expression.r#type) {
        Ok(pb::FilterType::Sql) => ExpressionType::Sql92,
        Ok(pb::FilterType::Tag | pb::FilterType::Unspecified) => ExpressionType::Tag,
        Err(_) => {
            return Err(status(
                Code::IllegalFilterExpression,
                format!("filter type {} is unknown", expression.r#type),
            ))
        }
    };
    let text = if expression.expression.trim().is_empty() {
        "*".to_owned()
    } else {
        expression.expression.clone()
    };
    Ok((kind, text))
}

/// The settings a client gets back: its own, with what the broker decides filled in.
fn effective_settings(
    mut settings: pb::Settings,
    group: Option<&skiff_storage::metadata::SubscriptionGroupConfig>,
    max_body_size: usize,
) -> pb::Settings {
    match &mut settings.pub_sub {
        Some(pb::settings::PubSub::Publishing(publishing)) => {
            publishing.max_body_size = i32::try_from(max_body_size).unwrap_or(i32::MAX);
            publishing.validate_message_type = true;
            settings.backoff_policy = Some(pb::RetryPolicy {
                max_attempts: PRODUCER_MAX_ATTEMPTS,
                strategy: Some(pb::retry_policy::Strategy::ExponentialBackoff(
                    pb::ExponentialBackoff {
                        initial: Some(duration(10)),
                        max: Some(duration(1000)),
                        multiplier: 2.0,
                    },
                )),
            });
        }
        Some(pb::settings::PubSub::Subscription(subscription)) => {
            subscription.receive_batch_size = Some(RECEIVE_BATCH as i32);
            subscription.long_polling_timeout = Some(duration(MAX_LONG_POLL.as_millis() as i64));
            subscription.fifo = Some(group.is_some_and(|g| g.consume_message_orderly));
            let retry_max_times = group.map_or(16, |g| g.retry_max_times);
            settings.backoff_policy = Some(pb::RetryPolicy {
                max_attempts: i32::try_from(retry_max_times)
                    .unwrap_or(i32::MAX - 1)
                    .saturating_add(1),
                // Every delay level (1 s to 2 h), as the proxy's default group retry policy.
                strategy: Some(pb::retry_policy::Strategy::CustomizedBackoff(
                    pb::CustomizedBackoff {
                        next: DELAY_LEVELS
                            .iter()
                            .map(|d| duration(d.as_millis() as i64))
                            .collect(),
                    },
                )),
            });
        }
        None => {}
    }
    settings.metric = Some(pb::Metric {
        on: false,
        endpoints: None,
    });
    settings
}

impl GrpcService {
    pub fn new(
        link: BrokerLink,
        config: ServiceConfig,
        stopped: watch::Receiver<bool>,
    ) -> GrpcService {
        GrpcService {
            link,
            clients: Clients::default(),
            config: Arc::new(config),
            stopped,
        }
    }

    /// Runs `call` on the broker; a link failure becomes the status the client gets.
    async fn broker<T, F, Fut>(&self, call: F) -> Result<T, pb::Status>
    where
        F: FnOnce(BrokerHandle) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, BrokerError>> + 'static,
        T: Send + 'static,
    {
        match self.link.call(call).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(broker_status(&e)),
            Err(e) => Err(link_status(e)),
        }
    }

    /// Registers what `client`'s settings say it is: its producer topics (answering
    /// check-backs on its Telemetry stream) or its consumer group.
    async fn register(&self, client_id: &str, client: &Client) -> Result<(), pb::Status> {
        let Some(settings) = client.settings.clone() else {
            return Err(status(
                Code::UnrecognizedClientType,
                "no settings from this client yet: open the telemetry stream and send them first",
            ));
        };
        let client_id = client_id.to_owned();
        let connection = client.connection;
        match settings.pub_sub {
            Some(pb::settings::PubSub::Publishing(publishing)) => {
                let Some(telemetry) = client.telemetry.clone() else {
                    return Ok(());
                };
                let topics: Vec<String> = publishing.topics.iter().map(resource::stored).collect();
                self.broker(move |broker| async move {
                    for topic in topics {
                        let checker = GrpcTransactionChecker {
                            connection,
                            client_id: client_id.clone(),
                            telemetry: telemetry.clone(),
                        };
                        broker.connections().register_producer(
                            &topic,
                            &client_id,
                            Arc::new(checker),
                        );
                    }
                    Ok(())
                })
                .await
            }
            Some(pb::settings::PubSub::Subscription(subscription)) => {
                let Some(group) = subscription.group.as_ref() else {
                    return Err(bad_request("the subscription names no group"));
                };
                let group = resource::stored(group);
                let mut subscriptions = Vec::new();
                for entry in &subscription.subscriptions {
                    let Some(topic) = entry.topic.as_ref() else {
                        continue;
                    };
                    let (expression_type, expression) = filter_of(entry.expression.as_ref())?;
                    subscriptions.push(SubscriptionEntry {
                        topic: resource::stored(topic),
                        expression_type,
                        expression,
                        sub_version: now_ms(),
                    });
                }
                let heartbeat = ConsumerHeartbeat {
                    client_id,
                    group,
                    consume_type: ConsumeType::Passively,
                    message_model: MessageModel::Clustering,
                    consume_from_where: "CONSUME_FROM_LAST_OFFSET".to_owned(),
                    subscriptions,
                };
                self.broker(move |broker| async move {
                    broker
                        .heartbeat(heartbeat, Arc::new(GrpcConsumer { connection }))
                        .await
                        .map(|_| ())
                })
                .await
            }
            None => Err(bad_request(
                "there is no publishing or subscription data in settings",
            )),
        }
    }

    /// The group config a consumer's settings are merged with (created as a heartbeat would).
    async fn group_config(
        &self,
        group: String,
    ) -> Result<Option<skiff_storage::metadata::SubscriptionGroupConfig>, pb::Status> {
        self.broker(move |broker| async move { broker.group(&group) })
            .await
    }

    async fn on_settings(
        &self,
        caller: &Caller,
        settings: pb::Settings,
        telemetry: &mpsc::Sender<Result<pb::TelemetryCommand, tonic::Status>>,
    ) -> Result<pb::Settings, pb::Status> {
        if settings.pub_sub.is_none() {
            return Err(bad_request(
                "there is no publishing or subscription data in settings",
            ));
        }
        let client =
            self.clients
                .update_settings(&caller.client_id, settings.clone(), telemetry.clone());
        let description = ClientDescription {
            client_id: caller.client_id.clone(),
            address: caller.peer.to_string(),
            language: caller.language.clone(),
            version: caller.version.clone(),
            protocol: "grpc",
        };
        let connection = client.connection;
        self.broker(move |broker| async move {
            broker.connections().describe(connection, description);
            Ok(())
        })
        .await?;
        self.register(&caller.client_id, &client).await?;
        let group = match &settings.pub_sub {
            Some(pb::settings::PubSub::Subscription(s)) => match &s.group {
                Some(g) => {
                    let stored = resource::stored(g);
                    self.group_config(stored).await?
                }
                None => None,
            },
            _ => None,
        };
        Ok(effective_settings(
            settings,
            group.as_ref(),
            self.config.max_body_size,
        ))
    }

    async fn do_receive(
        &self,
        caller: Caller,
        request: pb::ReceiveMessageRequest,
    ) -> Result<Vec<pb::Message>, pb::Status> {
        let Some(group) = request.group.as_ref() else {
            return Err(status(
                Code::IllegalConsumerGroup,
                "the request names no group",
            ));
        };
        let Some(queue) = request.message_queue.as_ref() else {
            return Err(bad_request("the request names no message queue"));
        };
        let Some(topic) = queue.topic.as_ref() else {
            return Err(status(
                Code::IllegalTopic,
                "the message queue names no topic",
            ));
        };
        let stored_group = resource::stored(group);
        let stored_topic = resource::stored(topic);
        caller.authorize(rules::consume_checks(&stored_topic, &stored_group))?;
        let client = self.clients.get(&caller.client_id);
        let subscription = client
            .as_ref()
            .and_then(|c| c.settings.as_ref())
            .and_then(|s| match &s.pub_sub {
                Some(pb::settings::PubSub::Subscription(s)) => Some(s.clone()),
                _ => None,
            });
        let group_config = self.group_config(stored_group.clone()).await?;
        let fifo = group_config
            .as_ref()
            .map(|g| g.consume_message_orderly)
            .or_else(|| subscription.as_ref().and_then(|s| s.fifo))
            .unwrap_or(false);
        let max_attempts = group_config.as_ref().map_or(17, |g| g.retry_max_times + 1);

        let invisible = if request.auto_renew {
            AUTO_RENEW_INVISIBLE
        } else {
            let asked = request
                .invisible_duration
                .as_ref()
                .map_or(0, duration_ms)
                .max(0) as u64;
            let asked = Duration::from_millis(asked);
            if asked < MIN_INVISIBLE || asked > MAX_INVISIBLE {
                return Err(status(
                    Code::IllegalInvisibleTime,
                    format!(
                        "the invisible time {} ms is outside [{} ms, {} ms]",
                        asked.as_millis(),
                        MIN_INVISIBLE.as_millis(),
                        MAX_INVISIBLE.as_millis()
                    ),
                ));
            }
            asked
        };
        let mut poll = request
            .long_polling_timeout
            .as_ref()
            .map(|d| Duration::from_millis(duration_ms(d).max(0) as u64))
            .unwrap_or(MAX_LONG_POLL)
            .clamp(MIN_LONG_POLL, MAX_LONG_POLL);
        if let Some(left) = caller.deadline {
            let left = left.saturating_sub(DEADLINE_MARGIN);
            if left < MIN_LONG_POLL.min(poll) {
                return Err(status(
                    Code::IllegalPollingTime,
                    "the deadline time remaining is not enough for polling",
                ));
            }
            poll = poll.min(left);
        }
        let (expression_type, expression) = filter_of(request.filter_expression.as_ref())?;
        let batch = u32::try_from(request.batch_size)
            .ok()
            .filter(|b| *b > 0)
            .unwrap_or(RECEIVE_BATCH)
            .min(MAX_POP_MESSAGES as u32);
        let pop = PopRequest {
            group: stored_group.clone(),
            topic: stored_topic,
            // Every queue, whatever the request names, as the proxy pops (its selector reads only
            // the broker name): a client that asks for one queue still gets the topic's
            // messages, and a FIFO group's order holds per queue either way.
            queue_id: None,
            max_messages: batch,
            invisible_ms: invisible.as_millis() as i64,
            poll,
            from_min: false,
            expression_type,
            expression: Some(expression).filter(|e| e != "*"),
            orderly: fifo,
        };
        let (pop_topic, pop_queue) = (pop.topic.clone(), pop.queue_id);
        let broker_name = self.config.broker_name.clone();
        let popped = self
            .broker(move |broker| async move {
                let answer = broker.pop(pop).await?;
                if answer.message_count == 0 {
                    return Ok(Vec::new());
                }
                let records = decode_records(answer.records.clone()).map_err(|source| {
                    BrokerError::UnreadableMessage {
                        topic: pop_topic,
                        queue_id: pop_queue.unwrap_or(0),
                        queue_offset: 0,
                        source,
                    }
                })?;
                let mut delivered = Vec::with_capacity(records.len());
                for message in records {
                    let Some(receipt) = answer.receipt(&message, &broker_name) else {
                        // Not of a queue this pop read: nothing could acknowledge it.
                        continue;
                    };
                    // The proxy's rule: a message received max-attempts times already goes to
                    // the dead-letter topic instead of to the consumer.
                    if i64::from(message.reconsume_times) >= i64::from(max_attempts) {
                        forward_to_dead_letters(
                            &broker,
                            &stored_group,
                            &message,
                            &receipt,
                            max_attempts,
                        )
                        .await?;
                        continue;
                    }
                    delivered.push((message, receipt));
                }
                Ok(delivered)
            })
            .await?;
        Ok(popped
            .iter()
            .map(|(message, receipt)| {
                let mut converted = message_from_stored(message);
                if let Some(system) = converted.system_properties.as_mut() {
                    system.receipt_handle = Some(receipt.to_string());
                    system.invisible_duration = Some(duration(receipt.invisible_ms));
                }
                converted
            })
            .collect())
    }
}

/// The message types a topic takes: the one its `message.type` attribute names, or every one
/// when it names none (an auto-created topic, as a dev broker should) or MIXED.
fn accepted_types(message_type: Option<TopicMessageType>) -> Vec<i32> {
    let one = |t: pb::MessageType| vec![t as i32];
    match message_type {
        Some(TopicMessageType::Normal) => one(pb::MessageType::Normal),
        Some(TopicMessageType::Fifo) => one(pb::MessageType::Fifo),
        Some(TopicMessageType::Delay) => one(pb::MessageType::Delay),
        Some(TopicMessageType::Transaction) => one(pb::MessageType::Transaction),
        Some(TopicMessageType::Mixed) | None => vec![
            pb::MessageType::Normal as i32,
            pb::MessageType::Fifo as i32,
            pb::MessageType::Delay as i32,
            pb::MessageType::Transaction as i32,
        ],
    }
}

/// Sends a popped message to the group's dead-letter topic and acknowledges it.
async fn forward_to_dead_letters(
    broker: &BrokerHandle,
    group: &str,
    message: &StoredMessage,
    receipt: &Receipt,
    max_attempts: u32,
) -> Result<(), BrokerError> {
    broker
        .send_back(SendBackRequest {
            group: group.to_owned(),
            physical_offset: message.physical_offset,
            delay_level: -1,
            origin_msg_id: message.property(UNIQ_KEY).map(str::to_owned),
            origin_topic: Some(message.topic.clone()),
            max_reconsume_times: Some(max_attempts.saturating_sub(1)),
            broker_name: None,
        })
        .await?;
    let topic = receipt.kind.stored_topic(group, &message.topic);
    broker
        .ack_popped(
            group,
            &topic,
            receipt.queue_id,
            message.queue_offset,
            receipt,
        )
        .await?;
    Ok(())
}

/// What a receipt handle names: the receipt, and the stored topic and offset it holds. As the
/// proxy answers: a handle that does not parse is INTERNAL_SERVER_ERROR, one whose invisible
/// time has passed INVALID_RECEIPT_HANDLE.
fn popped(group: &str, topic: &str, handle: &str) -> Result<(Receipt, String, u64), pb::Status> {
    let unreadable = || {
        status(
            Code::InternalServerError,
            format!("receipt handle {handle:?} does not parse"),
        )
    };
    let receipt = Receipt::parse(handle).map_err(|_| unreadable())?;
    let offset = receipt.queue_offset.ok_or_else(unreadable)?;
    if receipt.pop_time_ms.saturating_add(receipt.invisible_ms) < now_ms() {
        return Err(status(
            Code::InvalidReceiptHandle,
            "the receipt handle is expired",
        ));
    }
    let stored_topic = receipt.kind.stored_topic(group, topic);
    Ok((receipt, stored_topic, offset))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The code of a send entry whose message is stored without the durability the broker waits
/// for; `None` for a plain success.
fn stored_but_not(send: SendStatus) -> Option<Code> {
    match send {
        SendStatus::Ok => None,
        SendStatus::FlushDiskTimeout => Some(Code::MasterPersistenceTimeout),
        SendStatus::FlushSlaveTimeout => Some(Code::SlavePersistenceTimeout),
        SendStatus::SlaveNotAvailable => Some(Code::HaNotAvailable),
    }
}

/// The overall status of per-entry results: theirs when they agree, MULTIPLE_RESULTS if not.
fn overall(statuses: impl IntoIterator<Item = pb::Status>) -> pb::Status {
    let mut first: Option<pb::Status> = None;
    for s in statuses {
        match &first {
            None => first = Some(s),
            Some(f) if f.code != s.code => {
                return status(Code::MultipleResults, "entries have different results")
            }
            Some(_) => {}
        }
    }
    first.unwrap_or_else(ok)
}

type ReceiveStream =
    Pin<Box<dyn Stream<Item = Result<pb::ReceiveMessageResponse, tonic::Status>> + Send>>;
type PullStream =
    Pin<Box<dyn Stream<Item = Result<pb::PullMessageResponse, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl MessagingService for GrpcService {
    async fn query_route(
        &self,
        request: Request<pb::QueryRouteRequest>,
    ) -> Reply<pb::QueryRouteResponse> {
        let answer = |status| pb::QueryRouteResponse {
            status: Some(status),
            message_queues: Vec::new(),
        };
        let caller = match caller(&request) {
            Ok(c) => c,
            Err(s) => return reply(answer(s)),
        };
        let request = request.into_inner();
        let Some(topic) = request.topic else {
            return reply(answer(status(
                Code::IllegalTopic,
                "the request names no topic",
            )));
        };
        let stored = resource::stored(&topic);
        if let Err(s) = caller.authorize(rules::route_checks(&stored)) {
            return reply(answer(s));
        }
        let route = self
            .broker(move |broker| async move {
                let route = broker.route(stored.clone()).await?;
                let config = broker.topic(&stored)?;
                let perm = config.as_ref().map_or(PERM_READ | PERM_WRITE, |t| t.perm);
                Ok((route, perm, config.and_then(|t| t.message_type)))
            })
            .await;
        let (route, perm, message_type) = match route {
            Ok(r) => r,
            Err(s) => return reply(answer(s)),
        };
        let mut queues = Vec::new();
        for brokers in &route.brokers {
            let count = brokers.read_queue_nums.max(brokers.write_queue_nums);
            for id in 0..count {
                let read = id < brokers.read_queue_nums && perm & PERM_READ != 0;
                let write = id < brokers.write_queue_nums && perm & PERM_WRITE != 0;
                let permission = match (read, write) {
                    (true, true) => pb::Permission::ReadWrite,
                    (true, false) => pb::Permission::Read,
                    (false, true) => pb::Permission::Write,
                    (false, false) => pb::Permission::None,
                };
                queues.push(pb::MessageQueue {
                    topic: Some(resource::resource(&route.topic)),
                    id: id as i32,
                    permission: permission as i32,
                    broker: Some(pb::Broker {
                        name: brokers.broker_name.clone(),
                        id: 0,
                        // The endpoints the client dialled reach this broker.
                        endpoints: request.endpoints.clone(),
                    }),
                    accept_message_types: accepted_types(message_type),
                });
            }
        }
        reply(pb::QueryRouteResponse {
            status: Some(ok()),
            message_queues: queues,
        })
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Reply<pb::HeartbeatResponse> {
        let answer = |status| pb::HeartbeatResponse {
            status: Some(status),
        };
        let caller = match caller(&request) {
            Ok(c) => c,
            Err(s) => return reply(answer(s)),
        };
        let request = request.into_inner();
        if let Some(group) = request.group.as_ref().filter(|g| !g.name.is_empty()) {
            let group = resource::stored(group);
            if let Err(s) = caller.authorize(vec![Check::group(&group, Action::Sub)]) {
                return reply(answer(s));
            }
        }
        let Some(client) = self.clients.get(&caller.client_id) else {
            return reply(answer(status(
                Code::UnrecognizedClientType,
                "cannot find client settings for this client",
            )));
        };
        match self.register(&caller.client_id, &client).await {
            Ok(()) => reply(answer(ok())),
            Err(s) => reply(answer(s)),
        }
    }

    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Reply<pb::SendMessageResponse> {
        let answer = |status| pb::SendMessageResponse {
            status: Some(status),
            entries: Vec::new(),
        };
        let caller = match caller(&request) {
            Ok(c) => c,
            Err(s) => return reply(answer(s)),
        };
        let request = request.into_inner();
        let Some(first) = request.messages.first() else {
            return reply(answer(bad_request("no message to send")));
        };
        let Some(topic) = first.topic.clone() else {
            return reply(answer(status(
                Code::IllegalTopic,
                "the message names no topic",
            )));
        };
        let stored_topic = resource::stored(&topic);
        let checks = request
            .messages
            .iter()
            .filter_map(|m| m.topic.as_ref())
            .flat_map(|t| rules::send_checks(&resource::stored(t), ""))
            .collect();
        if let Err(s) = caller.authorize(checks) {
            return reply(answer(s));
        }
        let route_topic = stored_topic.clone();
        let (write_queues, topic_type) = match self
            .broker(move |broker| async move {
                let route = broker.route(route_topic.clone()).await?;
                let message_type = broker.topic(&route_topic)?.and_then(|t| t.message_type);
                Ok((
                    route.brokers.first().map_or(0, |b| b.write_queue_nums),
                    message_type,
                ))
            })
            .await
        {
            Ok((0, _)) => {
                return reply(answer(status(
                    Code::Forbidden,
                    format!("topic {} has no writable queue", topic.name),
                )))
            }
            Ok(found) => found,
            Err(s) => return reply(answer(s)),
        };
        // An explicitly typed topic takes only its type, as the proxy checks it.
        let accepted = accepted_types(topic_type);
        for message in &request.messages {
            let message_type = message
                .system_properties
                .as_ref()
                .map_or(pb::MessageType::Normal as i32, |s| s.message_type);
            if !accepted.contains(&message_type) {
                return reply(answer(status(
                    Code::MessagePropertyConflictWithType,
                    format!(
                        "current message type {} does not match the topic's accepted message types {:?}",
                        pb::MessageType::try_from(message_type).map_or("UNKNOWN", |t| t.as_str_name()),
                        topic_type.map_or("any", TopicMessageType::as_str),
                    ),
                )));
            }
        }
        // One queue per request, as the proxy picks it: the message group's for a single
        // FIFO message, else any.
        let group = (request.messages.len() == 1)
            .then(|| first.system_properties.as_ref()?.message_group.clone())
            .flatten()
            .filter(|g| !g.is_empty());
        let queue_id = match group {
            Some(g) => java_string_hash(&g).unsigned_abs() % write_queues,
            None => rand::random::<u32>() % write_queues,
        };
        let mut messages = Vec::with_capacity(request.messages.len());
        let mut transactional = Vec::with_capacity(request.messages.len());
        for message in &request.messages {
            if message.topic.as_ref().map(|t| &t.name) != Some(&topic.name) {
                let s = convert::Unstorable::TopicMismatch {
                    topic: topic.name.clone(),
                    message_topic: message
                        .topic
                        .as_ref()
                        .map(|t| t.name.clone())
                        .unwrap_or_default(),
                };
                return reply(answer(status(s.code(), s.to_string())));
            }
            match message_to_append(
                message,
                &stored_topic,
                queue_id,
                caller.peer,
                self.config.max_body_size,
            ) {
                Ok(m) => {
                    transactional.push(
                        message.system_properties.as_ref().map(|s| s.message_type)
                            == Some(pb::MessageType::Transaction as i32),
                    );
                    messages.push(m)
                }
                Err(e) => return reply(answer(status(e.code(), e.to_string()))),
            }
        }
        let ids: Vec<String> = request
            .messages
            .iter()
            .map(|m| {
                m.system_properties
                    .as_ref()
                    .map(|s| s.message_id.clone())
                    .unwrap_or_default()
            })
            .collect();
        let results = match self
            .broker(
                move |broker| async move { broker.send_messages(SendRequest::new(messages)).await },
            )
            .await
        {
            Ok(r) => r,
            Err(s) => return reply(answer(s)),
        };
        let entries: Vec<pb::SendResultEntry> = results
            .iter()
            .zip(ids)
            .zip(transactional)
            .map(
                |((r, message_id), transactional)| match stored_but_not(r.status) {
                    // As the Apache proxy answers a stored message its broker could not make as
                    // durable as configured in time: the entry's status only.
                    Some(code) => pb::SendResultEntry {
                        status: Some(status(
                            code,
                            format!("send message failed, sendStatus={}", r.status.name()),
                        )),
                        ..pb::SendResultEntry::default()
                    },
                    None => pb::SendResultEntry {
                        status: Some(ok()),
                        message_id,
                        transaction_id: if transactional {
                            TransactionId {
                                commit_log_offset: r.physical_offset,
                                tran_state_table_offset: r.queue_offset,
                            }
                            .to_string()
                        } else {
                            String::new()
                        },
                        offset: i64::try_from(r.queue_offset).unwrap_or(i64::MAX),
                        recall_handle: String::new(),
                    },
                },
            )
            .collect();
        reply(pb::SendMessageResponse {
            status: Some(overall(entries.iter().filter_map(|e| e.status.clone()))),
            entries,
        })
    }

    async fn query_assignment(
        &self,
        request: Request<pb::QueryAssignmentRequest>,
    ) -> Reply<pb::QueryAssignmentResponse> {
        let answer = |status| pb::QueryAssignmentResponse {
            status: Some(status),
            assignments: Vec::new(),
        };
        let caller = match caller(&request) {
            Ok(c) => c,
            Err(s) => return reply(answer(s)),
        };
        let request = request.into_inner();
        let (Some(topic), Some(group)) = (request.topic.as_ref(), request.group.as_ref()) else {
            return reply(answer(bad_request(
                "the request names no topic or no group",
            )));
        };
        let stored_topic = resource::stored(topic);
        let stored_group = resource::stored(group);
        if let Err(s) = caller.authorize(rules::consume_checks(&stored_topic, &stored_group)) {
            return reply(answer(s));
        }
        let found = self
            .broker(move |broker| async move {
                let topic = broker.topic(&stored_topic)?.ok_or(Refused::TopicNotExist {
                    topic: stored_topic.clone(),
                })?;
                let orderly = broker
                    .group(&stored_group)?
                    .is_some_and(|g| g.consume_message_orderly);
                Ok((topic, orderly))
            })
            .await;
        let (config, orderly) = match found {
            Ok(f) => f,
            Err(s) => return reply(answer(s)),
        };
        if !config.is_readable() || config.read_queue_nums == 0 {
            return reply(answer(status(
                Code::Forbidden,
                format!("topic {} has no readable queue", topic.name),
            )));
        }
        let queue = |id: i32| pb::Assignment {
            message_queue: Some(pb::MessageQueue {
                topic: Some(resource::resource(&config.name)),
                id,
                permission: pb::Permission::ReadWrite as i32,
                broker: Some(pb::Broker {
                    name: self.config.broker_name.clone(),
                    id: 0,
                    endpoints: request.endpoints.clone(),
                }),
                accept_message_types: accepted_types(config.message_type),
            }),
        };
        // A FIFO group pops each queue in order; any other pops the topic as one (queue -1).
        let assignments = if orderly {
            (0..config.read_queue_nums as i32).map(queue).collect()
        } else {
            vec![queue(-1)]
        };
        reply(pb::QueryAssignmentResponse {
            status: Some(ok()),
            assignments,
        })
    }

    type ReceiveMessageStream = ReceiveStream;

    async fn receive_message(
        &self,
        request: Request<pb::ReceiveMessageRequest>,
    ) -> Result<Response<Self::ReceiveMessageStream>, tonic::Status> {
        let single = |s: pb::Status| -> Result<Response<ReceiveStream>, tonic::Status> {
            let item = pb::ReceiveMessageResponse {
                content: Some(pb::receive_message_response::Content::Status(s)),
            };
            Ok(Response::new(Box::pin(tokio_stream::iter([Ok(item)]))))
        };
        let caller = match caller(&request) {
            Ok(c) => c,
            Err(s) => return single(s),
        };
        let started = now_ms();
        match self.do_receive(caller, request.into_inner()).await {
            Err(s) => single(s),
            Ok(messages) if messages.is_empty() => {
                single(status(Code::MessageNotFound, "no new message"))
            }
            Ok(messages) => {
                use pb::receive_message_response::Content;
                let mut items = Vec::with_capacity(messages.len() + 2);
                items.push(Ok(pb::ReceiveMessageResponse {
                    content: Some(Content::Status(ok())),
                }));
                for message in messages {
                    items.push(Ok(pb::ReceiveMessageResponse {
                        content: Some(Content::Message(message)),
                    }));
                }
                items.push(Ok(pb::ReceiveMessageResponse {
                    content: Some(Content::DeliveryTimestamp(convert::timestamp(started))),
                }));
                Ok(Response::new(Box::pin(tokio_stream::iter(items))))
            }
        }
    }

    async fn ack_message(
        &self,
        request: Request<pb::AckMessageRequest>,
    ) -> Reply<pb::AckMessageResponse> {
        let answer = |status| pb::AckMessageResponse {
            status: Some(status),
            entries: Vec::new(),
        };
        let caller = match caller(&request) {
            Ok(c) => c,
            Err(s) => return reply(answer(s)),
        };
        let request = request.into_inner();
        let (Some(topic), Some(group)) = (request.topic.as_ref(), request.group.as_ref()) else {
            return reply(answer(bad_request(
                "the request names no topic or no group",
            )));
        };
        let stored_topic = resource::stored(topic);
        let stored_group = resource::stored(group);
        if let Err(s) = caller.authorize(rules::consume_checks(&stored_topic, &stored_group)) {
            return reply(answer(s));
        }
        let mut entries = Vec::with_capacity(request.entries.len());
        for entry in request.entries {
            let result = match popped(&stored_group, &stored_topic, &entry.receipt_handle) {
                Err(s) => s,
                Ok((receipt, stored, offset)) => {
                    let group = stored_group.clone();
                    match self
                        .broker(move |broker| async move {
                            broker
                                .ack_popped(&group, &stored, receipt.queue_id, offset, &receipt)
                                .await
                        })
                        .await
                    {
                        Ok(_) => ok(),
                        Err(s) => s,
                    }
                }
            };
            entries.push(pb::AckMessageResultEntry {
                message_id: entry.message_id,
                receipt_handle: entry.receipt_handle,
                status: Some(result),
            });
        }
        reply(pb::AckMessageResponse {
            status: Some(overall(entries.iter().filter_map(|e| e.status.clone()))),
            entries,
        })
    }

    async fn forward_message_to_dead_letter_queue(
        &self,
        request: Request<pb::ForwardMessageToDeadLetterQueueRequest>,
    ) -> Reply<pb::ForwardMessageToDeadLetterQueueResponse> {
        let answer = |status| pb::ForwardMessageToDeadLetterQueueResponse {
            status: Some(status),
        };
        let caller = match caller(&request) {
            Ok(c) => c,
            Err(s) => return reply(answer(s)),
        };
        let request = request.into_inner();
        let (Some(topic), Some(group)) = (request.topic.as_ref(), request.group.as_ref()) else {
            return reply(answer(bad_request(
                "the request names no topic or no group",
            )));
        };
        let stored_topic = resource::stored(topic);
        let stored_group = resource::stored(group);
        if let Err(s) = caller.authorize(rules::consume_checks(&stored_topic, &stored_group)) {
            return reply(answer(s));
        }
        let (receipt, stored, offset) =
            match popped(&stored_group, &stored_topic, &request.receipt_handle) {
                Ok(p) => p,
                Err(s) => return reply(answer(s)),
            };
        let max_attempts = u32::try_from(request.max_delivery_attempts).unwrap_or(0);
        let result = self
            .broker(move |broker| async move {
                let read =
                    broker
                        .reader()
                        .read(&stored, receipt.queue_id, offset, 1, 1 << 20, None)?;
                let message = decode_records(read.records)
                    .ok()
                    .and_then(|m| m.into_iter().next())
                    .filter(|m| m.queue_offset == offset)
                    .ok_or(Refused::MessageNotFound { physical_offset: 0 })?;
                forward_to_dead_letters(&broker, &stored_group, &message, &receipt, max_attempts)
                    .await
            })
            .await;
        reply(answer(result.map_or_else(|s| s, |()| ok())))
    }

    type PullMessageStream = PullStream;

    async fn pull_message(
        &self,
        _request: Request<pb::PullMessageRequest>,
    ) -> Result<Response<Self::PullMessageStream>, tonic::Status> {
        let item = pb::PullMessageResponse {
            content: Some(pb::pull_message_response::Content::Status(status(
                Code::NotImplemented,
                "the gRPC pull consumer is not served yet; use a simple or push consumer",
            ))),
        };
        Ok(Response::new(Box::pin(tokio_stream::iter([Ok(item)]))))
    }

    async fn update_offset(
        &self,
        _request: Request<pb::UpdateOffsetRequest>,
    ) -> Reply<pb::UpdateOffsetResponse> {
        reply(pb::UpdateOffsetResponse {
            status: Some(not_served("UpdateOffset")),
        })
    }

    async fn get_offset(
        &self,
        _request: Request<pb::GetOffsetRequest>,
    ) -> Reply<pb::GetOffsetResponse> {
        reply(pb::GetOffsetResponse {
            status: Some(not_served("GetOffset")),
            offset: 0,
        })
    }

    async fn query_offset(
        &self,
        _request: Request<pb::QueryOffsetRequest>,
    ) -> Reply<pb::QueryOffsetResponse> {
        reply(pb::QueryOffsetResponse {
            status: Some(not_served("QueryOffset")),
            offset: 0,
        })
    }

    async fn end_transaction(
        &self,
        request: Request<pb::EndTransactionRequest>,
    ) -> Reply<pb::EndTransactionResponse> {
        let answer = |status| pb::EndTransactionResponse {
            status: Some(status),
        };
        let caller = match caller(&request) {
            Ok(c) => c,
            Err(s) => return reply(answer(s)),
        };
        let request = request.into_inner();
        let Some(topic) = request.topic.as_ref() else {
            return reply(answer(status(
                Code::IllegalTopic,
                "the request names no topic",
            )));
        };
        if let Err(s) = caller.authorize(rules::send_checks(&resource::stored(topic), "")) {
            return reply(answer(s));
        }
        let id = match TransactionId::parse(&request.transaction_id) {
            Ok(id) => id,
            Err(e) => return reply(answer(status(Code::InvalidTransactionId, e.to_string()))),
        };
        let resolution = match pb::TransactionResolution::try_from(request.resolution) {
            Ok(pb::TransactionResolution::Commit) => TransactionResolution::Commit,
            Ok(pb::TransactionResolution::Rollback) => TransactionResolution::Rollback,
            _ => {
                return reply(answer(bad_request(format!(
                    "transaction resolution {} is neither COMMIT nor ROLLBACK",
                    request.resolution
                ))))
            }
        };
        let stored_topic = resource::stored(topic);
        let end = EndTransactionRequest {
            producer_group: stored_topic,
            tran_state_table_offset: id.tran_state_table_offset,
            commit_log_offset: id.commit_log_offset,
            resolution,
            from_transaction_check: request.source
                == pb::TransactionSource::SourceServerCheck as i32,
            msg_id: request.message_id.clone(),
            transaction_id: Some(request.message_id),
            broker_name: self.config.broker_name.clone(),
        };
        let result = self
            .broker(move |broker| async move {
                use skiff_actors::broker_api::Answer;
                broker.end_transaction(end).await?.answer()
            })
            .await;
        reply(answer(result.map_or_else(|s| s, |()| ok())))
    }

    type TelemetryStream = ReceiverStream<Result<pb::TelemetryCommand, tonic::Status>>;

    async fn telemetry(
        &self,
        request: Request<Streaming<pb::TelemetryCommand>>,
    ) -> Result<Response<Self::TelemetryStream>, tonic::Status> {
        let caller = caller(&request).map_err(|s| tonic::Status::invalid_argument(s.message))?;
        let mut inbound = request.into_inner();
        // The stream to the client ends when this task does (the client half-closed, or the
        // server stops), whoever else holds a way to push commands: the broker's check
        // listener writes to `pushed`, which this task forwards.
        let (outbound, stream) = mpsc::channel(TELEMETRY_QUEUE);
        let (pushed, mut from_broker) = mpsc::channel(TELEMETRY_QUEUE);
        let connection = self.clients.get_or_insert(&caller.client_id).connection;
        let service = self.clone();
        let mut stopped = self.stopped.clone();
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    _ = super::until_stopped(&mut stopped) => break,
                    Some(command) = from_broker.recv() => {
                        if outbound.send(command).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    next = inbound.next() => next,
                };
                let command = match next {
                    Some(Ok(command)) => command,
                    Some(Err(e)) => {
                        debug!(client_id = %caller.client_id, error = %e, "telemetry stream broken");
                        break;
                    }
                    None => break,
                };
                use pb::telemetry_command::Command;
                match command.command {
                    Some(Command::Settings(settings)) => {
                        let answer = match service.on_settings(&caller, settings, &pushed).await {
                            Ok(settings) => pb::TelemetryCommand {
                                status: Some(ok()),
                                command: Some(Command::Settings(settings)),
                            },
                            Err(s) => {
                                let _ = outbound
                                    .send(Err(tonic::Status::invalid_argument(s.message)))
                                    .await;
                                break;
                            }
                        };
                        if outbound.send(Ok(answer)).await.is_err() {
                            break;
                        }
                    }
                    Some(Command::ThreadStackTrace(trace)) => {
                        info!(client_id = %caller.client_id, nonce = %trace.nonce, "thread stack trace from client:\n{}", trace.thread_stack_trace.unwrap_or_default());
                    }
                    Some(Command::VerifyMessageResult(result)) => {
                        info!(client_id = %caller.client_id, nonce = %result.nonce, status = ?command.status, "verify message result from client");
                    }
                    Some(_) | None => {
                        debug!(client_id = %caller.client_id, "telemetry command ignored");
                    }
                }
            }
            service.clients.telemetry_closed(&caller.client_id, &pushed);
            // Everything registered through this client leaves; a client that reconnects
            // registers again with its next settings or heartbeat.
            let _ = service
                .broker(move |broker| async move {
                    broker.connection_closed(connection).await.map(|_| ())
                })
                .await;
        });
        Ok(Response::new(ReceiverStream::new(stream)))
    }

    async fn notify_client_termination(
        &self,
        request: Request<pb::NotifyClientTerminationRequest>,
    ) -> Reply<pb::NotifyClientTerminationResponse> {
        let answer = |status| pb::NotifyClientTerminationResponse {
            status: Some(status),
        };
        let caller = match caller(&request) {
            Ok(c) => c,
            Err(s) => return reply(answer(s)),
        };
        let request = request.into_inner();
        let client_id = caller.client_id.clone();
        let group = request
            .group
            .as_ref()
            .filter(|g| !g.name.is_empty())
            .map(resource::stored);
        if let Some(group) = &group {
            if let Err(s) = caller.authorize(vec![Check::group(group, Action::Sub)]) {
                return reply(answer(s));
            }
        }
        let result = self
            .broker(move |broker| async move {
                broker.unregister_producer(&client_id, None);
                if let Some(group) = group {
                    broker.unregister(client_id, group).await?;
                }
                Ok(())
            })
            .await;
        self.clients.remove(&caller.client_id);
        reply(answer(result.map_or_else(|s| s, |()| ok())))
    }

    async fn change_invisible_duration(
        &self,
        request: Request<pb::ChangeInvisibleDurationRequest>,
    ) -> Reply<pb::ChangeInvisibleDurationResponse> {
        let answer = |status| pb::ChangeInvisibleDurationResponse {
            status: Some(status),
            receipt_handle: String::new(),
        };
        let caller = match caller(&request) {
            Ok(c) => c,
            Err(s) => return reply(answer(s)),
        };
        let request = request.into_inner();
        let (Some(topic), Some(group)) = (request.topic.as_ref(), request.group.as_ref()) else {
            return reply(answer(bad_request(
                "the request names no topic or no group",
            )));
        };
        let stored_topic = resource::stored(topic);
        let stored_group = resource::stored(group);
        if let Err(s) = caller.authorize(rules::consume_checks(&stored_topic, &stored_group)) {
            return reply(answer(s));
        }
        let (receipt, stored, offset) =
            match popped(&stored_group, &stored_topic, &request.receipt_handle) {
                Ok(p) => p,
                Err(s) => return reply(answer(s)),
            };
        let invisible_ms = request.invisible_duration.as_ref().map_or(0, duration_ms);
        if invisible_ms < 0 || invisible_ms > MAX_INVISIBLE.as_millis() as i64 {
            return reply(answer(status(
                Code::IllegalInvisibleTime,
                format!(
                    "the invisible time {invisible_ms} ms is outside [0, {} ms]",
                    MAX_INVISIBLE.as_millis()
                ),
            )));
        }
        let changed = self
            .broker(move |broker| async move {
                let (pop_time_ms, invisible_ms) = broker
                    .change_invisible_time(
                        &stored_group,
                        &stored,
                        receipt.queue_id,
                        offset,
                        &receipt,
                        invisible_ms,
                    )
                    .await?;
                Ok(Receipt {
                    pop_time_ms,
                    invisible_ms,
                    ..receipt
                })
            })
            .await;
        match changed {
            Ok(receipt) => reply(pb::ChangeInvisibleDurationResponse {
                status: Some(ok()),
                receipt_handle: receipt.to_string(),
            }),
            Err(s) => reply(answer(s)),
        }
    }

    async fn recall_message(
        &self,
        request: Request<pb::RecallMessageRequest>,
    ) -> Reply<pb::RecallMessageResponse> {
        let answer = |status| pb::RecallMessageResponse {
            status: Some(status),
            message_id: String::new(),
        };
        if let Err(s) = caller(&request) {
            return reply(answer(s));
        }
        // As the Apache broker answers with recall off (its default).
        reply(answer(status(
            Code::Forbidden,
            "recalling delay messages is not served by this broker",
        )))
    }

    async fn sync_lite_subscription(
        &self,
        _request: Request<pb::SyncLiteSubscriptionRequest>,
    ) -> Reply<pb::SyncLiteSubscriptionResponse> {
        reply(pb::SyncLiteSubscriptionResponse {
            status: Some(not_served("SyncLiteSubscription")),
        })
    }
}

fn not_served(rpc: &str) -> pb::Status {
    status(
        Code::NotImplemented,
        format!("{rpc} is not served by this broker yet"),
    )
}

/// Java's `String.hashCode` over UTF-16 units: the proxy hashes a message group with it.
fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_read_in_every_unit() {
        assert_eq!(parse_grpc_timeout("20S"), Some(Duration::from_secs(20)));
        assert_eq!(parse_grpc_timeout("3000m"), Some(Duration::from_secs(3)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("5x"), None);
        assert_eq!(parse_grpc_timeout(""), None);
    }

    #[test]
    fn the_message_group_hash_is_javas() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99_162_322);
    }

    #[test]
    fn consumers_get_their_groups_retry_policy() {
        let mut group = skiff_storage::metadata::SubscriptionGroupConfig::new("g");
        group.retry_max_times = 2;
        let settings = pb::Settings {
            pub_sub: Some(pb::settings::PubSub::Subscription(
                pb::Subscription::default(),
            )),
            ..Default::default()
        };
        let merged = effective_settings(settings, Some(&group), 1024);
        let policy = merged.backoff_policy.unwrap();
        assert_eq!(policy.max_attempts, 3);
        let Some(pb::retry_policy::Strategy::CustomizedBackoff(backoff)) = policy.strategy else {
            panic!("customized backoff expected");
        };
        assert_eq!(duration_ms(&backoff.next[0]), 1000);
        assert_eq!(backoff.next.len(), 18);
        assert_eq!(merged.metric.map(|m| m.on), Some(false));
    }
}
