//! [`RemoteBroker`]: the [`BrokerApi`] over TCP, so skiff's own consumer and producer actors run
//! against `skiff serve` or a real RocketMQ name server + broker.
//!
//! * Routes come from the name server (GET_ROUTEINFO_BY_TOPIC, 105), standard or fastjson
//!   (unquoted numeric keys) JSON. The master (`brokerAddrs[0]`) of the first broker that has one
//!   is the topic's broker address. Routes are cached for [`RemoteBrokerConfig::route_ttl`]; a
//!   transport failure or timeout on a broker marks its routes stale, so the next call asks the
//!   name server again; a stale route is still used while the name server is unreachable (as
//!   Java's client keeps its last route). A topic the name server does not know falls back to
//!   the route of `TBW102` (broker auto-creation), as Java producers do.
//! * Every other call goes to the broker address of its topic; calls that only name a group
//!   (consumer list, send-back without origin topic) go to the last broker address resolved, or
//!   the broker of the group's retry topic. Against `skiff serve` name server and broker are the
//!   same listener, so one connection carries everything.
//! * The broker's NOTIFY_CONSUMER_IDS_CHANGED (40) arrives on that connection, possibly before
//!   the response being awaited; it is dispatched on the current arbiter to every notifier a
//!   heartbeat registered for the group. Other server-initiated requests are answered
//!   REQUEST_CODE_NOT_SUPPORTED (3).
//! * Heartbeats are remembered with the connection they went over. When a pull or a member
//!   list finds the connection to that broker re-made (the broker restarted or dropped it, and
//!   with it this client's registrations), the heartbeats are sent again first, so the broker
//!   knows the subscriptions and members at once rather than at the next periodic heartbeat.
//! * Errors: a non-success answer is [`BrokerError::Remote`] (broker address, code, remark); a
//!   connection that cannot be made or is lost, or an undecodable answer, is
//!   [`BrokerError::Transport`]; no answer in time is [`BrokerError::Timeout`].
//!
//! Not `Send`: create and use it on one actix arbiter (its futures are `BrokerFuture`s).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, warn};

use skiff_actors::broker_api::{
    BrokerApi, BrokerError, BrokerFuture, ConsumeType as ApiConsumeType, ConsumerHeartbeat,
    ConsumerNotifier, MessageModel as ApiMessageModel, PullRequest, PullResponse, PullStatus,
    SendBackRequest, SendResult, TopicRoute,
};
use skiff_actors::logic::delay::retry_topic;
use skiff_actors::logic::filter::Subscription;
use skiff_actors::logic::queue::MessageQueue;
use skiff_storage::message::{
    encode_properties, property, property::DELAY, property::UNIQ_KEY, MessageToAppend,
    PROPERTY_SEPARATOR,
};
use skiff_storage::store::BoundaryType as StoreBoundary;

use super::body::{
    ConsumeFromWhere, ConsumeType, ConsumerData, ConsumerListBody, HeartbeatData, JsonBody,
    LockBatchRequestBody, LockBatchResponseBody, MessageModel, MessageQueue as WireQueue,
    SubscriptionData, TopicRouteData, UnlockBatchRequestBody,
};
use super::client::{ClientConfig, ClientError, ConnectionId, InboundRequest, RemotingClient};
use super::codes::{pull_sys_flag, request as rc, response as code};
use super::frame::RemotingCommand;
use super::headers::{
    BoundaryType, ConsumerSendMsgBackRequestHeader, CustomHeader,
    GetConsumerListByGroupRequestHeader, GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader,
    GetRouteInfoRequestHeader, NotifyConsumerIdsChangedRequestHeader, OffsetResponseHeader,
    PullMessageRequestHeader, PullMessageResponseHeader, QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader, SendMessageRequestHeader, SendMessageResponseHeader,
    UnregisterClientRequestHeader, UpdateConsumerOffsetRequestHeader,
};

/// The topic whose route producers fall back to for a topic the name server does not know
/// (`TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC`).
pub const AUTO_CREATE_TOPIC_KEY: &str = "TBW102";

/// Settings of a [`RemoteBroker`], with Java's client defaults.
#[derive(Debug, Clone)]
pub struct RemoteBrokerConfig {
    /// Transport settings (frame cap, write queue, connect timeout).
    pub client: ClientConfig,
    /// Timeout of every request but long-polling pulls (Java `mqClientApiTimeout`, 3 s).
    pub rpc_timeout: Duration,
    /// A long-polling pull may take its suspend time plus this (Java: 15 s suspend, 30 s
    /// timeout; the broker's hold sweep may answer a few seconds late).
    pub pull_timeout_margin: Duration,
    /// How long a route is used before the name server is asked again (Java
    /// `pollNameServerInterval`, 30 s).
    pub route_ttl: Duration,
    /// Producer group named in sends (`a` of SEND_MESSAGE_V2).
    pub producer_group: String,
    /// Queues the broker gives a topic it auto-creates on send (`d`; Java default 4).
    pub default_topic_queue_nums: u32,
    /// Server-initiated requests buffered for the arbiter before they are dropped.
    pub inbound_capacity: usize,
}

impl Default for RemoteBrokerConfig {
    fn default() -> Self {
        RemoteBrokerConfig {
            client: ClientConfig::default(),
            rpc_timeout: Duration::from_secs(3),
            pull_timeout_margin: Duration::from_secs(15),
            route_ttl: Duration::from_secs(30),
            producer_group: "skiff-producer".to_owned(),
            default_topic_queue_nums: 4,
            inbound_capacity: 256,
        }
    }
}

/// A cached route and the broker address it resolved to.
#[derive(Debug, Clone)]
struct CachedRoute {
    route: TopicRoute,
    addr: String,
    fetched: Instant,
    /// Marked when a call to `addr` failed in transport, or when the route is the TBW102
    /// fallback: the next lookup asks the name server again.
    stale: bool,
}

/// Notifiers registered by heartbeats, by (group, client id).
type Notifiers = RefCell<BTreeMap<(String, String), Arc<dyn ConsumerNotifier>>>;

/// What a broker knows of this client: the connection its heartbeats went over and the
/// heartbeats themselves, to send again on a new connection (the broker restarted, or dropped
/// the old connection and with it the registrations).
#[derive(Default)]
struct Registrations {
    /// Broker address → the connection the last heartbeats were sent on.
    connections: HashMap<String, ConnectionId>,
    /// (group, client id) → the last heartbeat.
    heartbeats: BTreeMap<(String, String), ConsumerHeartbeat>,
}

struct Inner {
    namesrv: String,
    config: RemoteBrokerConfig,
    client: RemotingClient,
    routes: RefCell<HashMap<String, CachedRoute>>,
    /// The broker address last resolved, for calls that name no topic.
    last_addr: RefCell<Option<String>>,
    /// Subscription versions from heartbeats, by (group, topic), sent with pulls as Java does.
    sub_versions: RefCell<HashMap<(String, String), i64>>,
    notifiers: Rc<Notifiers>,
    registrations: RefCell<Registrations>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.client.shutdown();
    }
}

/// The remoting [`BrokerApi`]. Cheap to clone; clones share the connection and the caches.
/// Dropping the last clone (or [`RemoteBroker::close`]) closes the connections.
#[derive(Clone)]
pub struct RemoteBroker {
    inner: Rc<Inner>,
}

impl std::fmt::Debug for RemoteBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteBroker")
            .field("namesrv", &self.inner.namesrv)
            .finish_non_exhaustive()
    }
}

impl RemoteBroker {
    /// A broker client for the name server at `namesrv` (`host:port`). Connections are made on
    /// first use and re-made after a failure. Must be called on a running actix arbiter (or
    /// inside a tokio `LocalSet`): it spawns the local task that dispatches the broker's
    /// notifications.
    pub fn connect(namesrv: &str, config: RemoteBrokerConfig) -> Result<RemoteBroker, BrokerError> {
        let namesrv = namesrv.trim();
        let valid = namesrv
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !valid {
            return Err(BrokerError::InvalidRequest {
                reason: format!("name server address {namesrv:?} is not host:port"),
            });
        }
        let client = RemotingClient::new(config.client.clone());
        let inbound = client.request_channel(config.inbound_capacity);
        let notifiers: Rc<Notifiers> = Rc::default();
        actix_rt::spawn(dispatch_inbound(inbound, Rc::downgrade(&notifiers)));
        Ok(RemoteBroker {
            inner: Rc::new(Inner {
                namesrv: namesrv.to_owned(),
                config,
                client,
                routes: RefCell::default(),
                last_addr: RefCell::default(),
                sub_versions: RefCell::default(),
                notifiers,
                registrations: RefCell::default(),
            }),
        })
    }

    /// The name server address.
    pub fn namesrv(&self) -> &str {
        &self.inner.namesrv
    }

    pub fn config(&self) -> &RemoteBrokerConfig {
        &self.inner.config
    }

    /// The underlying remoting client (admin requests, tests).
    pub fn client(&self) -> &RemotingClient {
        &self.inner.client
    }

    /// Closes every connection at once, as a crashed process would: registered consumers
    /// learn nothing, later calls fail with [`BrokerError::Transport`].
    pub fn close(&self) {
        self.inner.client.shutdown();
        self.inner.notifiers.borrow_mut().clear();
        *self.inner.registrations.borrow_mut() = Registrations::default();
    }

    /// The broker address of `topic` (from its cached or fresh route).
    pub async fn broker_addr(&self, topic: &str) -> Result<String, BrokerError> {
        Ok(self.route_entry(topic).await?.addr)
    }

    // ---- transport --------------------------------------------------------------------------

    /// One request/response; transport failures mark `addr`'s routes stale.
    async fn invoke(
        &self,
        addr: &str,
        request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, BrokerError> {
        match self.inner.client.invoke(addr, request, timeout).await {
            Ok(response) => Ok(response),
            Err(e) => {
                self.mark_stale(addr);
                Err(client_error(addr, e))
            }
        }
    }

    /// A request whose answer must be SUCCESS.
    async fn invoke_ok(
        &self,
        addr: &str,
        request: RemotingCommand,
    ) -> Result<RemotingCommand, BrokerError> {
        let response = self
            .invoke(addr, request, self.inner.config.rpc_timeout)
            .await?;
        expect_success(addr, response)
    }

    /// Before a pull or a member list: if this client's heartbeats went to `addr` over a
    /// connection that is gone, sends them again on the current one, so a restarted broker
    /// knows the subscriptions and members at once instead of after the next periodic
    /// heartbeat. Best effort: failures are left to the call that follows.
    async fn reregister_if_reconnected(&self, addr: &str) {
        let Some(previous) = self
            .inner
            .registrations
            .borrow()
            .connections
            .get(addr)
            .copied()
        else {
            return;
        };
        let Ok(conn) = self
            .inner
            .client
            .connection_to(addr, self.inner.config.rpc_timeout)
            .await
        else {
            return;
        };
        if conn.id() == previous {
            return;
        }
        let heartbeats: Vec<ConsumerHeartbeat> = {
            let mut registrations = self.inner.registrations.borrow_mut();
            // Claimed before sending, so concurrent calls send them once.
            registrations.connections.insert(addr.to_owned(), conn.id());
            registrations.heartbeats.values().cloned().collect()
        };
        for heartbeat in heartbeats {
            let group = heartbeat.group.clone();
            let request = RemotingCommand::new_request(rc::HEART_BEAT)
                .with_body(heartbeat_body(&heartbeat).encode());
            match self.invoke_ok(addr, request).await {
                Ok(_) => debug!(addr, group = %group, "heartbeat sent again on a new connection"),
                Err(e) => {
                    warn!(addr, group = %group, error = %e, "heartbeat on a new connection failed")
                }
            }
        }
    }

    /// Records that `heartbeat` reached `addr` over the current connection.
    async fn registered(&self, addr: &str, heartbeat: &ConsumerHeartbeat) {
        let conn = self
            .inner
            .client
            .connection_to(addr, self.inner.config.rpc_timeout)
            .await;
        let mut registrations = self.inner.registrations.borrow_mut();
        registrations.heartbeats.insert(
            (heartbeat.group.clone(), heartbeat.client_id.clone()),
            heartbeat.clone(),
        );
        if let Ok(conn) = conn {
            registrations.connections.insert(addr.to_owned(), conn.id());
        }
    }

    fn mark_stale(&self, addr: &str) {
        for cached in self.inner.routes.borrow_mut().values_mut() {
            if cached.addr == addr {
                cached.stale = true;
            }
        }
    }

    // ---- routes -----------------------------------------------------------------------------

    async fn route_entry(&self, topic: &str) -> Result<CachedRoute, BrokerError> {
        let cached = self.inner.routes.borrow().get(topic).cloned();
        if let Some(cached) = &cached {
            if !cached.stale && cached.fetched.elapsed() < self.inner.config.route_ttl {
                return Ok(cached.clone());
            }
        }
        match self.fetch_route(topic).await {
            Ok(fresh) => {
                *self.inner.last_addr.borrow_mut() = Some(fresh.addr.clone());
                self.inner
                    .routes
                    .borrow_mut()
                    .insert(topic.to_owned(), fresh.clone());
                Ok(fresh)
            }
            Err(e) => match cached {
                Some(stale) => {
                    warn!(topic, error = %e, "route refresh failed; using the last known route");
                    Ok(stale)
                }
                None => Err(e),
            },
        }
    }

    /// Asks the name server; a topic it does not know gets TBW102's broker (marked stale, so
    /// the real route is picked up once the topic exists).
    async fn fetch_route(&self, topic: &str) -> Result<CachedRoute, BrokerError> {
        match self.query_route(topic).await {
            // Retry and dead-letter topics are made by the broker, never by a send.
            Err(BrokerError::Remote { code: c, .. })
                if c == code::TOPIC_NOT_EXIST
                    && topic != AUTO_CREATE_TOPIC_KEY
                    && !topic.starts_with("%RETRY%")
                    && !topic.starts_with("%DLQ%") =>
            {
                let mut fallback = self.query_route(AUTO_CREATE_TOPIC_KEY).await?;
                debug!(topic, addr = %fallback.addr, "no route yet; using the auto-create topic's broker");
                let queues = self
                    .inner
                    .config
                    .default_topic_queue_nums
                    .min(fallback.route.write_queue_nums)
                    .max(1);
                fallback.route = TopicRoute {
                    topic: topic.to_owned(),
                    broker_name: fallback.route.broker_name,
                    read_queue_nums: queues,
                    write_queue_nums: queues,
                };
                fallback.stale = true;
                Ok(fallback)
            }
            other => other,
        }
    }

    async fn query_route(&self, topic: &str) -> Result<CachedRoute, BrokerError> {
        let namesrv = self.inner.namesrv.clone();
        let request = RemotingCommand::new_request(rc::GET_ROUTEINFO_BY_TOPIC).with_ext_fields(
            GetRouteInfoRequestHeader {
                topic: topic.to_owned(),
                accept_standard_json_only: None,
            }
            .to_ext(),
        );
        let response = self.invoke_ok(&namesrv, request).await?;
        let data = TopicRouteData::decode(&response.body)
            .map_err(|e| bad_answer(&namesrv, "route data", &e))?;
        let (route, addr) = route_from(topic, &data).ok_or_else(|| BrokerError::Transport {
            addr: namesrv.clone(),
            reason: format!("the route of topic {topic} names no master broker with queues"),
        })?;
        Ok(CachedRoute {
            route,
            addr,
            fetched: Instant::now(),
            stale: false,
        })
    }

    /// The broker for calls that name only a group: the last broker resolved, else the broker
    /// of the group's retry topic.
    async fn group_addr(&self, group: &str) -> Result<String, BrokerError> {
        let last = self.inner.last_addr.borrow().clone();
        match last {
            Some(addr) => Ok(addr),
            None => self.broker_addr(&retry_topic(group)).await,
        }
    }

    /// Every broker address currently known (for unregistering everywhere).
    fn known_addrs(&self) -> BTreeSet<String> {
        let mut addrs: BTreeSet<String> = self
            .inner
            .routes
            .borrow()
            .values()
            .map(|c| c.addr.clone())
            .collect();
        if let Some(last) = self.inner.last_addr.borrow().clone() {
            addrs.insert(last);
        }
        addrs
    }

    // ---- calls ------------------------------------------------------------------------------

    async fn send_all(
        &self,
        messages: Vec<MessageToAppend>,
    ) -> Result<Vec<SendResult>, BrokerError> {
        let mut results = Vec::with_capacity(messages.len());
        for group in batches(messages) {
            let addr = self.broker_addr(&group[0].topic).await?;
            results.extend(self.send_group(&addr, group).await?);
        }
        Ok(results)
    }

    /// One SEND_MESSAGE_V2, or one SEND_BATCH_MESSAGE for several messages of one queue.
    async fn send_group(
        &self,
        addr: &str,
        mut group: Vec<MessageToAppend>,
    ) -> Result<Vec<SendResult>, BrokerError> {
        for message in &mut group {
            if property(&message.properties, UNIQ_KEY).is_none() {
                let id = unique_id();
                let props = &mut message.properties;
                if !props.is_empty() && !props.ends_with(PROPERTY_SEPARATOR) {
                    props.push(PROPERTY_SEPARATOR);
                }
                props.push_str(&encode_properties(&[(UNIQ_KEY, id.as_str())]));
            }
        }
        let first = &group[0];
        let batch = group.len() > 1;
        let header = SendMessageRequestHeader {
            producer_group: self.inner.config.producer_group.clone(),
            topic: first.topic.clone(),
            default_topic: AUTO_CREATE_TOPIC_KEY.to_owned(),
            default_topic_queue_nums: clamp_i32(self.inner.config.default_topic_queue_nums),
            queue_id: clamp_i32(first.queue_id),
            sys_flag: first.sys_flag,
            born_timestamp: first.born_timestamp,
            flag: first.flag,
            properties: (!batch).then(|| first.properties.clone()),
            reconsume_times: Some(first.reconsume_times),
            unit_mode: Some(false),
            max_reconsume_times: None,
            batch: Some(batch),
            broker_name: None,
        };
        let (code_used, body) = if batch {
            (rc::SEND_BATCH_MESSAGE, Bytes::from(encode_batch(&group)))
        } else {
            (rc::SEND_MESSAGE_V2, first.body.clone())
        };
        let request = RemotingCommand::new_request(code_used)
            .with_ext_fields(header.to_v2_ext())
            .with_body(body);
        let response = self
            .invoke(addr, request, self.inner.config.rpc_timeout)
            .await?;
        match response.code {
            code::SUCCESS => {}
            c @ (code::FLUSH_DISK_TIMEOUT
            | code::FLUSH_SLAVE_TIMEOUT
            | code::SLAVE_NOT_AVAILABLE) => {
                // Stored, not yet as durable as configured (Java: a SendResult, not an error).
                warn!(addr, code = c, remark = ?response.remark, "message stored without the requested durability");
            }
            _ => return Err(remote(addr, &response)),
        }
        let header = SendMessageResponseHeader::from_command(&response)
            .map_err(|e| bad_answer(addr, "send response header", &e))?;
        send_results(addr, &header, group.len())
    }

    async fn pull_remote(&self, request: PullRequest) -> Result<PullResponse, BrokerError> {
        let addr = self.broker_addr(&request.topic).await?;
        self.reregister_if_reconnected(&addr).await;
        let mut sys_flag = 0;
        if request.commit_offset.is_some() {
            sys_flag |= pull_sys_flag::COMMIT_OFFSET;
        }
        if request.suspend_timeout.is_some() {
            sys_flag |= pull_sys_flag::SUSPEND;
        }
        if request.subscription.is_some() {
            sys_flag |= pull_sys_flag::SUBSCRIPTION;
        }
        let sub_version = self
            .inner
            .sub_versions
            .borrow()
            .get(&(request.group.clone(), request.topic.clone()))
            .copied()
            .unwrap_or(0);
        let suspend = request.suspend_timeout.unwrap_or_default();
        let header = PullMessageRequestHeader {
            consumer_group: request.group.clone(),
            topic: request.topic.clone(),
            queue_id: clamp_i32(request.queue_id),
            queue_offset: clamp_i64(request.queue_offset),
            max_msg_nums: clamp_i32(request.max_messages),
            sys_flag,
            commit_offset: request.commit_offset.map_or(0, clamp_i64),
            suspend_timeout_millis: clamp_i64(
                u64::try_from(suspend.as_millis()).unwrap_or(u64::MAX),
            ),
            subscription: request.subscription.clone(),
            sub_version,
            expression_type: Some("TAG".to_owned()),
            max_msg_bytes: None,
            request_source: None,
            proxy_forward_client_id: None,
        };
        let timeout = match request.suspend_timeout {
            Some(suspend) => suspend + self.inner.config.pull_timeout_margin,
            None => self.inner.config.rpc_timeout,
        };
        let command =
            RemotingCommand::new_request(rc::PULL_MESSAGE).with_ext_fields(header.to_ext());
        let response = self.invoke(&addr, command, timeout).await?;
        let status = match response.code {
            code::SUCCESS => PullStatus::Found,
            code::PULL_NOT_FOUND => PullStatus::NoNewMessage,
            code::PULL_RETRY_IMMEDIATELY => PullStatus::NoMatchedMessage,
            code::PULL_OFFSET_MOVED => PullStatus::OffsetIllegal,
            _ => return Err(remote(&addr, &response)),
        };
        let header = PullMessageResponseHeader::from_command(&response)
            .map_err(|e| bad_answer(&addr, "pull response header", &e))?;
        let offset = |value: i64, what: &str| {
            u64::try_from(value).map_err(|_| BrokerError::Transport {
                addr: addr.clone(),
                reason: format!("pull response has a negative {what} ({value})"),
            })
        };
        Ok(PullResponse {
            status,
            next_begin_offset: offset(header.next_begin_offset, "nextBeginOffset")?,
            min_offset: offset(header.min_offset, "minOffset")?,
            max_offset: offset(header.max_offset, "maxOffset")?,
            records: if status == PullStatus::Found {
                response.body
            } else {
                Bytes::new()
            },
        })
    }

    async fn query_offset_remote(
        &self,
        group: &str,
        queue: &MessageQueue,
    ) -> Result<Option<u64>, BrokerError> {
        let addr = self.broker_addr(&queue.topic).await?;
        let header = QueryConsumerOffsetRequestHeader {
            consumer_group: group.to_owned(),
            topic: queue.topic.clone(),
            queue_id: clamp_i32(queue.queue_id),
            // A real not-found, so the consumer's ConsumeFromWhere decides.
            set_zero_if_not_found: Some(false),
        };
        let request = RemotingCommand::new_request(rc::QUERY_CONSUMER_OFFSET)
            .with_ext_fields(header.to_ext());
        let response = self
            .invoke(&addr, request, self.inner.config.rpc_timeout)
            .await?;
        match response.code {
            code::SUCCESS => {
                let offset = offset_header(&addr, &response)?;
                // Java treats a negative stored offset as none.
                Ok(u64::try_from(offset).ok())
            }
            code::QUERY_NOT_FOUND => Ok(None),
            _ => Err(remote(&addr, &response)),
        }
    }

    async fn update_offset_remote(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: u64,
        acknowledged: bool,
    ) -> Result<(), BrokerError> {
        let addr = self.broker_addr(&queue.topic).await?;
        let header = UpdateConsumerOffsetRequestHeader {
            consumer_group: group.to_owned(),
            topic: queue.topic.clone(),
            queue_id: clamp_i32(queue.queue_id),
            commit_offset: clamp_i64(offset),
        };
        let request = RemotingCommand::new_request(rc::UPDATE_CONSUMER_OFFSET)
            .with_ext_fields(header.to_ext());
        if acknowledged {
            self.invoke_ok(&addr, request).await.map(|_| ())
        } else {
            let timeout = self.inner.config.rpc_timeout;
            match self
                .inner
                .client
                .invoke_oneway(&addr, request, timeout)
                .await
            {
                Ok(()) => Ok(()),
                Err(e) => {
                    self.mark_stale(&addr);
                    Err(client_error(&addr, e))
                }
            }
        }
    }

    async fn send_back_remote(&self, request: SendBackRequest) -> Result<(), BrokerError> {
        let addr = match &request.origin_topic {
            Some(topic) => self.broker_addr(topic).await?,
            None => self.group_addr(&request.group).await?,
        };
        let header = ConsumerSendMsgBackRequestHeader {
            offset: clamp_i64(request.physical_offset),
            group: request.group.clone(),
            delay_level: request.delay_level,
            origin_msg_id: request.origin_msg_id.clone(),
            origin_topic: request.origin_topic.clone(),
            unit_mode: false,
            max_reconsume_times: request.max_reconsume_times.map(clamp_i32),
        };
        let command = RemotingCommand::new_request(rc::CONSUMER_SEND_MSG_BACK)
            .with_ext_fields(header.to_ext());
        self.invoke_ok(&addr, command).await.map(|_| ())
    }

    async fn heartbeat_remote(
        &self,
        heartbeat: ConsumerHeartbeat,
        notifier: Arc<dyn ConsumerNotifier>,
    ) -> Result<(), BrokerError> {
        // Registered first: the broker may notify before it answers the heartbeat.
        self.inner.notifiers.borrow_mut().insert(
            (heartbeat.group.clone(), heartbeat.client_id.clone()),
            notifier,
        );
        {
            let mut versions = self.inner.sub_versions.borrow_mut();
            for s in &heartbeat.subscriptions {
                versions.insert((heartbeat.group.clone(), s.topic.clone()), s.sub_version);
            }
        }
        let mut addrs = BTreeSet::new();
        let mut first_error = None;
        for s in &heartbeat.subscriptions {
            match self.broker_addr(&s.topic).await {
                Ok(addr) => {
                    addrs.insert(addr);
                }
                Err(e) => {
                    warn!(group = %heartbeat.group, topic = %s.topic, error = %e, "no broker for a subscribed topic");
                    first_error.get_or_insert(e);
                }
            }
        }
        if addrs.is_empty() {
            match self.inner.last_addr.borrow().clone() {
                Some(addr) => {
                    addrs.insert(addr);
                }
                None => {
                    return Err(first_error.unwrap_or_else(|| BrokerError::InvalidRequest {
                        reason: format!("group {} subscribes to nothing", heartbeat.group),
                    }))
                }
            }
        }
        let body = heartbeat_body(&heartbeat).encode();
        let mut result = Ok(());
        for addr in addrs {
            let request = RemotingCommand::new_request(rc::HEART_BEAT).with_body(body.clone());
            match self.invoke_ok(&addr, request).await {
                Ok(_) => self.registered(&addr, &heartbeat).await,
                Err(e) => {
                    warn!(group = %heartbeat.group, addr, error = %e, "heartbeat failed");
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
            }
        }
        result
    }

    async fn unregister_remote(&self, client_id: &str, group: &str) -> Result<(), BrokerError> {
        let key = (group.to_owned(), client_id.to_owned());
        self.inner.notifiers.borrow_mut().remove(&key);
        self.inner
            .registrations
            .borrow_mut()
            .heartbeats
            .remove(&key);
        let mut addrs = self.known_addrs();
        if addrs.is_empty() {
            addrs.insert(self.group_addr(group).await?);
        }
        let header = UnregisterClientRequestHeader {
            client_id: client_id.to_owned(),
            producer_group: None,
            consumer_group: Some(group.to_owned()),
        };
        let mut result = Ok(());
        for addr in addrs {
            let request = RemotingCommand::new_request(rc::UNREGISTER_CLIENT)
                .with_ext_fields(header.to_ext());
            if let Err(e) = self.invoke_ok(&addr, request).await {
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        result
    }

    async fn consumer_list_remote(&self, group: &str) -> Result<Vec<String>, BrokerError> {
        let addr = self.group_addr(group).await?;
        self.reregister_if_reconnected(&addr).await;
        let header = GetConsumerListByGroupRequestHeader {
            consumer_group: group.to_owned(),
        };
        let request = RemotingCommand::new_request(rc::GET_CONSUMER_LIST_BY_GROUP)
            .with_ext_fields(header.to_ext());
        let response = self.invoke_ok(&addr, request).await?;
        let body = ConsumerListBody::decode(&response.body)
            .map_err(|e| bad_answer(&addr, "consumer list", &e))?;
        Ok(body.consumer_id_list)
    }

    /// Groups queues by the broker address of their topic.
    async fn queues_by_addr(
        &self,
        queues: Vec<MessageQueue>,
    ) -> Result<BTreeMap<String, Vec<MessageQueue>>, BrokerError> {
        let mut by_addr: BTreeMap<String, Vec<MessageQueue>> = BTreeMap::new();
        for queue in queues {
            let addr = self.broker_addr(&queue.topic).await?;
            by_addr.entry(addr).or_default().push(queue);
        }
        Ok(by_addr)
    }

    async fn lock_remote(
        &self,
        group: &str,
        client_id: &str,
        queues: Vec<MessageQueue>,
    ) -> Result<Vec<MessageQueue>, BrokerError> {
        let mut locked = Vec::new();
        for (addr, queues) in self.queues_by_addr(queues).await? {
            let body = LockBatchRequestBody {
                consumer_group: group.to_owned(),
                client_id: client_id.to_owned(),
                only_this_broker: false,
                mq_set: queues.iter().map(to_wire).collect(),
            };
            let request = RemotingCommand::new_request(rc::LOCK_BATCH_MQ).with_body(body.encode());
            let response = self.invoke_ok(&addr, request).await?;
            let answer = LockBatchResponseBody::decode(&response.body)
                .map_err(|e| bad_answer(&addr, "lock answer", &e))?;
            locked.extend(answer.lock_ok_mq_set.iter().filter_map(from_wire));
        }
        Ok(locked)
    }

    async fn unlock_remote(
        &self,
        group: &str,
        client_id: &str,
        queues: Vec<MessageQueue>,
    ) -> Result<(), BrokerError> {
        for (addr, queues) in self.queues_by_addr(queues).await? {
            let body = UnlockBatchRequestBody {
                consumer_group: group.to_owned(),
                client_id: client_id.to_owned(),
                only_this_broker: false,
                mq_set: queues.iter().map(to_wire).collect(),
            };
            let request =
                RemotingCommand::new_request(rc::UNLOCK_BATCH_MQ).with_body(body.encode());
            self.invoke_ok(&addr, request).await?;
        }
        Ok(())
    }

    /// GET_MIN_OFFSET / GET_MAX_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP: `{offset}` answers.
    async fn offset_call(&self, topic: &str, request: RemotingCommand) -> Result<u64, BrokerError> {
        let addr = self.broker_addr(topic).await?;
        let response = self.invoke_ok(&addr, request).await?;
        let offset = offset_header(&addr, &response)?;
        u64::try_from(offset).map_err(|_| BrokerError::Transport {
            addr: addr.clone(),
            reason: format!("the broker answered a negative offset ({offset})"),
        })
    }
}

impl BrokerApi for RemoteBroker {
    fn route(&self, topic: &str) -> BrokerFuture<TopicRoute> {
        let this = self.clone();
        let topic = topic.to_owned();
        Box::pin(async move { Ok(this.route_entry(&topic).await?.route) })
    }

    fn send(&self, messages: Vec<MessageToAppend>) -> BrokerFuture<Vec<SendResult>> {
        let this = self.clone();
        Box::pin(async move { this.send_all(messages).await })
    }

    fn pull(&self, request: PullRequest) -> BrokerFuture<PullResponse> {
        let this = self.clone();
        Box::pin(async move { this.pull_remote(request).await })
    }

    fn query_offset(&self, group: &str, queue: &MessageQueue) -> BrokerFuture<Option<u64>> {
        let this = self.clone();
        let group = group.to_owned();
        let queue = queue.clone();
        Box::pin(async move { this.query_offset_remote(&group, &queue).await })
    }

    fn update_offset(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: u64,
        acknowledged: bool,
    ) -> BrokerFuture<()> {
        let this = self.clone();
        let group = group.to_owned();
        let queue = queue.clone();
        Box::pin(async move {
            this.update_offset_remote(&group, &queue, offset, acknowledged)
                .await
        })
    }

    fn send_back(&self, request: SendBackRequest) -> BrokerFuture<()> {
        let this = self.clone();
        Box::pin(async move { this.send_back_remote(request).await })
    }

    fn heartbeat(
        &self,
        heartbeat: ConsumerHeartbeat,
        notifier: Arc<dyn ConsumerNotifier>,
    ) -> BrokerFuture<()> {
        let this = self.clone();
        Box::pin(async move { this.heartbeat_remote(heartbeat, notifier).await })
    }

    fn unregister(&self, client_id: &str, group: &str) -> BrokerFuture<()> {
        let this = self.clone();
        let client_id = client_id.to_owned();
        let group = group.to_owned();
        Box::pin(async move { this.unregister_remote(&client_id, &group).await })
    }

    fn consumer_list(&self, group: &str) -> BrokerFuture<Vec<String>> {
        let this = self.clone();
        let group = group.to_owned();
        Box::pin(async move { this.consumer_list_remote(&group).await })
    }

    fn lock_batch(
        &self,
        group: &str,
        client_id: &str,
        queues: Vec<MessageQueue>,
    ) -> BrokerFuture<Vec<MessageQueue>> {
        let this = self.clone();
        let group = group.to_owned();
        let client_id = client_id.to_owned();
        Box::pin(async move { this.lock_remote(&group, &client_id, queues).await })
    }

    fn unlock_batch(
        &self,
        group: &str,
        client_id: &str,
        queues: Vec<MessageQueue>,
    ) -> BrokerFuture<()> {
        let this = self.clone();
        let group = group.to_owned();
        let client_id = client_id.to_owned();
        Box::pin(async move { this.unlock_remote(&group, &client_id, queues).await })
    }

    fn min_offset(&self, queue: &MessageQueue) -> BrokerFuture<u64> {
        let this = self.clone();
        let topic = queue.topic.clone();
        let request = RemotingCommand::new_request(rc::GET_MIN_OFFSET).with_ext_fields(
            GetMinOffsetRequestHeader {
                topic: queue.topic.clone(),
                queue_id: clamp_i32(queue.queue_id),
            }
            .to_ext(),
        );
        Box::pin(async move { this.offset_call(&topic, request).await })
    }

    fn max_offset(&self, queue: &MessageQueue) -> BrokerFuture<u64> {
        let this = self.clone();
        let topic = queue.topic.clone();
        let request = RemotingCommand::new_request(rc::GET_MAX_OFFSET).with_ext_fields(
            GetMaxOffsetRequestHeader {
                topic: queue.topic.clone(),
                queue_id: clamp_i32(queue.queue_id),
                committed: true,
            }
            .to_ext(),
        );
        Box::pin(async move { this.offset_call(&topic, request).await })
    }

    fn search_offset(
        &self,
        queue: &MessageQueue,
        timestamp_ms: i64,
        boundary: StoreBoundary,
    ) -> BrokerFuture<u64> {
        let this = self.clone();
        let topic = queue.topic.clone();
        let request = RemotingCommand::new_request(rc::SEARCH_OFFSET_BY_TIMESTAMP).with_ext_fields(
            SearchOffsetRequestHeader {
                topic: queue.topic.clone(),
                queue_id: clamp_i32(queue.queue_id),
                timestamp: timestamp_ms,
                boundary_type: match boundary {
                    StoreBoundary::Lower => BoundaryType::Lower,
                    StoreBoundary::Upper => BoundaryType::Upper,
                },
            }
            .to_ext(),
        );
        Box::pin(async move { this.offset_call(&topic, request).await })
    }
}

// ---- server-initiated requests ----------------------------------------------------------------

/// Runs on the arbiter: NOTIFY_CONSUMER_IDS_CHANGED goes to the group's notifiers; other
/// requests are answered REQUEST_CODE_NOT_SUPPORTED. Ends when the client is gone.
async fn dispatch_inbound(mut inbound: mpsc::Receiver<InboundRequest>, notifiers: Weak<Notifiers>) {
    while let Some(request) = inbound.recv().await {
        let Some(notifiers) = notifiers.upgrade() else {
            break;
        };
        if request.request.code == rc::NOTIFY_CONSUMER_IDS_CHANGED {
            match NotifyConsumerIdsChangedRequestHeader::from_command(&request.request) {
                Ok(header) => {
                    let group = header.consumer_group;
                    // Cloned out first: a notifier may call back into the broker.
                    let targets: Vec<Arc<dyn ConsumerNotifier>> = notifiers
                        .borrow()
                        .iter()
                        .filter(|((g, _), _)| *g == group)
                        .map(|(_, n)| n.clone())
                        .collect();
                    debug!(group = %group, consumers = targets.len(), "consumer ids changed");
                    for notifier in targets {
                        notifier.consumer_ids_changed(&group);
                    }
                }
                Err(e) => {
                    warn!(addr = %request.addr, error = %e, "bad NOTIFY_CONSUMER_IDS_CHANGED ignored")
                }
            }
            if !request.request.is_oneway() {
                let _ = request
                    .reply(RemotingCommand::success_to(&request.request))
                    .await;
            }
        } else {
            debug!(addr = %request.addr, code = request.request.code, "server request not supported");
            let answer = RemotingCommand::not_supported(&request.request);
            let _ = request.reply(answer).await;
        }
    }
}

// ---- pure helpers (unit-tested) -----------------------------------------------------------------

/// The route of `topic` from route data: the first broker data with a master (id 0), its
/// address, and that broker's queue data.
fn route_from(topic: &str, data: &TopicRouteData) -> Option<(TopicRoute, String)> {
    data.broker_datas.iter().find_map(|broker| {
        let addr = broker.broker_addrs.get(&0)?;
        let queues = data
            .queue_datas
            .iter()
            .find(|q| q.broker_name == broker.broker_name)?;
        Some((
            TopicRoute {
                topic: topic.to_owned(),
                broker_name: broker.broker_name.clone(),
                read_queue_nums: u32::try_from(queues.read_queue_nums).unwrap_or(0),
                write_queue_nums: u32::try_from(queues.write_queue_nums).unwrap_or(0),
            },
            addr.clone(),
        ))
    })
}

/// Splits a send into requests: runs of messages for the same topic and queue with the same
/// header fields become one batch; delayed and retry messages (which Java refuses in batches)
/// and everything else go one by one. Order is kept.
fn batches(messages: Vec<MessageToAppend>) -> Vec<Vec<MessageToAppend>> {
    fn batchable(m: &MessageToAppend) -> bool {
        m.reconsume_times == 0
            && !m.topic.starts_with("%RETRY%")
            && !m.topic.starts_with("%DLQ%")
            && property(&m.properties, DELAY).is_none()
    }
    let mut out: Vec<Vec<MessageToAppend>> = Vec::new();
    for message in messages {
        if let Some(last) = out.last_mut() {
            let head = &last[0];
            if batchable(head)
                && batchable(&message)
                && head.topic == message.topic
                && head.queue_id == message.queue_id
                && head.sys_flag == message.sys_flag
            {
                last.push(message);
                continue;
            }
        }
        out.push(vec![message]);
    }
    out
}

/// A SEND_BATCH_MESSAGE body (`reference/rocketmq-remoting.md` §3.1): per message
/// `totalSize magic(0) bodyCRC(0) flag bodyLen body propsLen(i16) props`.
fn encode_batch(messages: &[MessageToAppend]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        let props = m.properties.as_bytes();
        let props_len = i16::try_from(props.len()).unwrap_or(i16::MAX);
        let props = &props[..usize::try_from(props_len).unwrap_or(0)];
        let total = 20 + m.body.len() + 2 + props.len();
        out.extend_from_slice(&clamp_usize(total).to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&m.flag.to_be_bytes());
        out.extend_from_slice(&clamp_usize(m.body.len()).to_be_bytes());
        out.extend_from_slice(&m.body);
        out.extend_from_slice(&props_len.to_be_bytes());
        out.extend_from_slice(props);
    }
    out
}

/// Send results from a send answer: one per message, offsets consecutive from the header's,
/// offset message ids from the comma-separated `msgId` (a batch answer lists one per message).
fn send_results(
    addr: &str,
    header: &SendMessageResponseHeader,
    count: usize,
) -> Result<Vec<SendResult>, BrokerError> {
    let bad = |reason: String| BrokerError::Transport {
        addr: addr.to_owned(),
        reason,
    };
    let queue_id = u32::try_from(header.queue_id)
        .map_err(|_| bad(format!("send answer has queueId {}", header.queue_id)))?;
    let first = u64::try_from(header.queue_offset).map_err(|_| {
        bad(format!(
            "send answer has queueOffset {}",
            header.queue_offset
        ))
    })?;
    let ids: Vec<&str> = header.msg_id.split(',').map(str::trim).collect();
    (0..count)
        .map(|i| {
            let id = if ids.len() == count {
                ids[i]
            } else {
                ids.first().copied().unwrap_or_default()
            };
            Ok(SendResult {
                queue_id,
                queue_offset: first + i as u64,
                physical_offset: physical_offset_of(id).unwrap_or(0),
                offset_msg_id: id.to_owned(),
            })
        })
        .collect()
}

/// The commit-log offset in an offset message id: its last 16 hex digits (§6.5).
fn physical_offset_of(offset_msg_id: &str) -> Option<u64> {
    let tail = offset_msg_id.get(offset_msg_id.len().checked_sub(16)?..)?;
    u64::from_str_radix(tail, 16).ok()
}

fn heartbeat_body(heartbeat: &ConsumerHeartbeat) -> HeartbeatData {
    let subscription_data_set = heartbeat
        .subscriptions
        .iter()
        .map(|s| {
            let parsed = Subscription::parse(s.topic.clone(), &s.expression, s.sub_version);
            SubscriptionData {
                class_filter_mode: false,
                topic: s.topic.clone(),
                sub_string: parsed.expression.clone(),
                tags_set: parsed.tags.iter().cloned().collect(),
                // Java's String.hashCode values, stored widened; the low 32 bits are the hash.
                code_set: parsed.tag_codes.iter().map(|c| *c as i32).collect(),
                sub_version: s.sub_version,
                expression_type: "TAG".to_owned(),
            }
        })
        .collect();
    HeartbeatData {
        client_id: heartbeat.client_id.clone(),
        producer_data_set: Vec::new(),
        consumer_data_set: vec![ConsumerData {
            group_name: heartbeat.group.clone(),
            consume_type: match heartbeat.consume_type {
                ApiConsumeType::Passively => ConsumeType::ConsumePassively,
                ApiConsumeType::Actively => ConsumeType::ConsumeActively,
            },
            message_model: match heartbeat.message_model {
                ApiMessageModel::Clustering => MessageModel::Clustering,
                ApiMessageModel::Broadcasting => MessageModel::Broadcasting,
            },
            consume_from_where: ConsumeFromWhere::from_name(&heartbeat.consume_from_where)
                .unwrap_or_default(),
            subscription_data_set,
            unit_mode: false,
        }],
        heartbeat_fingerprint: 0,
        without_sub: false,
    }
}

fn to_wire(queue: &MessageQueue) -> WireQueue {
    WireQueue {
        topic: queue.topic.clone(),
        broker_name: queue.broker_name.clone(),
        queue_id: clamp_i32(queue.queue_id),
    }
}

fn from_wire(queue: &WireQueue) -> Option<MessageQueue> {
    u32::try_from(queue.queue_id)
        .ok()
        .map(|id| MessageQueue::new(queue.topic.clone(), queue.broker_name.clone(), id))
}

/// A client message id (`UNIQ_KEY`, §6.5): 16 bytes as 32 upper-case hex digits: IPv4 (4),
/// pid (2), a per-process random (4, Java: class-loader hash), milliseconds (4), counter (2).
pub fn unique_id() -> String {
    static PREFIX: OnceLock<[u8; 10]> = OnceLock::new();
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let prefix = PREFIX.get_or_init(|| {
        let mut p = [0u8; 10];
        p[..4].copy_from_slice(&[127, 0, 0, 1]);
        p[4..6].copy_from_slice(&(std::process::id() as u16).to_be_bytes());
        p[6..].copy_from_slice(&rand::random::<u32>().to_be_bytes());
        p
    });
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u32)
        .unwrap_or(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed) as u16;
    let mut id = String::with_capacity(32);
    for b in prefix
        .iter()
        .chain(millis.to_be_bytes().iter())
        .chain(count.to_be_bytes().iter())
    {
        id.push_str(&format!("{b:02X}"));
    }
    id
}

fn offset_header(addr: &str, response: &RemotingCommand) -> Result<i64, BrokerError> {
    OffsetResponseHeader::from_command(response)
        .map(|h| h.offset)
        .map_err(|e| bad_answer(addr, "offset answer", &e))
}

fn expect_success(addr: &str, response: RemotingCommand) -> Result<RemotingCommand, BrokerError> {
    if response.code == code::SUCCESS {
        Ok(response)
    } else {
        Err(remote(addr, &response))
    }
}

fn remote(addr: &str, response: &RemotingCommand) -> BrokerError {
    BrokerError::Remote {
        addr: addr.to_owned(),
        code: response.code,
        remark: response.remark.clone().unwrap_or_default(),
    }
}

fn bad_answer(addr: &str, what: &str, error: &dyn std::fmt::Display) -> BrokerError {
    BrokerError::Transport {
        addr: addr.to_owned(),
        reason: format!("undecodable {what}: {error}"),
    }
}

/// Maps a transport error; the address is the one the request went to.
pub fn client_error(addr: &str, error: ClientError) -> BrokerError {
    match error {
        ClientError::Timeout { timeout, .. } | ClientError::ConnectTimeout { timeout, .. } => {
            BrokerError::Timeout {
                addr: addr.to_owned(),
                timeout,
            }
        }
        other => BrokerError::Transport {
            addr: addr.to_owned(),
            reason: other.to_string(),
        },
    }
}

fn clamp_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn clamp_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn clamp_usize(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::server::{
        ConnectionHandle, HandlerFuture, RemotingServer, RequestHandler, ServerConfig,
    };
    use skiff_actors::broker_api::SubscriptionEntry;
    use std::cell::Cell;
    use std::net::SocketAddr;
    use std::sync::Mutex;

    fn message(topic: &str, queue_id: u32, body: &str) -> MessageToAppend {
        MessageToAppend {
            topic: topic.to_owned(),
            queue_id,
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1,
            born_host: SocketAddr::from(([127, 0, 0, 1], 0)),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            properties: encode_properties(&[("TAGS", "a")]),
            body: Bytes::from(body.to_owned()),
        }
    }

    #[test]
    fn route_from_reads_unquoted_and_quoted_broker_ids() {
        for body in [
            r#"{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"b","cluster":"c"}],"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":4}]}"#,
            r#"{"brokerDatas":[{"brokerAddrs":{"1":"10.0.0.2:10911","0":"10.0.0.1:10911"},"brokerName":"b","cluster":"c"}],"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":"8","writeQueueNums":4}]}"#,
        ] {
            let data = TopicRouteData::decode(body.as_bytes()).expect("route data decodes");
            let (route, addr) = route_from("T", &data).expect("a master with queues");
            assert_eq!(addr, "10.0.0.1:10911");
            assert_eq!(route.broker_name, "b");
            assert_eq!((route.read_queue_nums, route.write_queue_nums), (8, 4));
        }
        let slave_only = TopicRouteData::decode(
            br#"{"brokerDatas":[{"brokerAddrs":{1:"h:1"},"brokerName":"b"}],"queueDatas":[{"brokerName":"b"}]}"#,
        )
        .expect("decodes");
        assert!(route_from("T", &slave_only).is_none());
    }

    #[test]
    fn batches_group_runs_of_one_queue_only() {
        let mut delayed = message("T", 0, "d");
        delayed
            .properties
            .push_str(&encode_properties(&[(DELAY, "3")]));
        let groups = batches(vec![
            message("T", 0, "a"),
            message("T", 0, "b"),
            message("T", 1, "c"),
            delayed,
            message("T", 0, "e"),
            message("%RETRY%g", 0, "f"),
            message("%RETRY%g", 0, "g"),
        ]);
        let sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![2, 1, 1, 1, 1, 1]);
        let bodies: Vec<&[u8]> = groups.iter().flatten().map(|m| &m.body[..]).collect();
        assert_eq!(bodies, vec![&b"a"[..], b"b", b"c", b"d", b"e", b"f", b"g"]);
    }

    #[test]
    fn batch_body_layout() {
        let messages = vec![message("T", 0, "hello"), message("T", 0, "")];
        let body = encode_batch(&messages);
        let props = messages[0].properties.as_bytes();
        let first_len = 20 + 5 + 2 + props.len();
        assert_eq!(&body[0..4], &(first_len as i32).to_be_bytes());
        assert_eq!(&body[4..12], &[0u8; 8]);
        assert_eq!(&body[16..20], &5i32.to_be_bytes());
        assert_eq!(&body[20..25], b"hello");
        assert_eq!(&body[25..27], &(props.len() as i16).to_be_bytes());
        assert_eq!(&body[27..first_len], props);
        assert_eq!(body.len(), first_len + 20 + 2 + props.len());
    }

    #[test]
    fn send_results_split_batch_ids() {
        let header = SendMessageResponseHeader {
            msg_id: "7F00000100002A9F00000000000001CE,7F00000100002A9F0000000000000200".into(),
            queue_id: 2,
            queue_offset: 10,
            ..Default::default()
        };
        let results = send_results("a", &header, 2).expect("valid answer");
        assert_eq!(results[0].queue_offset, 10);
        assert_eq!(results[1].queue_offset, 11);
        assert_eq!(results[0].physical_offset, 0x1CE);
        assert_eq!(results[1].physical_offset, 0x200);
        assert_eq!(results[1].queue_id, 2);
        let negative = SendMessageResponseHeader {
            queue_offset: -1,
            ..header
        };
        assert!(matches!(
            send_results("a", &negative, 1),
            Err(BrokerError::Transport { .. })
        ));
        assert_eq!(physical_offset_of("short"), None);
    }

    #[test]
    fn heartbeat_body_carries_tags_and_codes() {
        let heartbeat = ConsumerHeartbeat {
            client_id: "c1".into(),
            group: "g".into(),
            consume_type: ApiConsumeType::Passively,
            message_model: ApiMessageModel::Broadcasting,
            consume_from_where: "CONSUME_FROM_FIRST_OFFSET".into(),
            subscriptions: vec![
                SubscriptionEntry {
                    topic: "T".into(),
                    expression: "TagA || TagB".into(),
                    sub_version: 7,
                },
                SubscriptionEntry {
                    topic: "%RETRY%g".into(),
                    expression: "*".into(),
                    sub_version: 7,
                },
            ],
        };
        let json: serde_json::Value =
            serde_json::from_slice(&heartbeat_body(&heartbeat).encode()).expect("json");
        let consumer = &json["consumerDataSet"][0];
        assert_eq!(json["clientID"], "c1");
        assert_eq!(consumer["consumeType"], "CONSUME_PASSIVELY");
        assert_eq!(consumer["messageModel"], "BROADCASTING");
        assert_eq!(consumer["consumeFromWhere"], "CONSUME_FROM_FIRST_OFFSET");
        let sub = &consumer["subscriptionDataSet"][0];
        assert_eq!(sub["tagsSet"], serde_json::json!(["TagA", "TagB"]));
        // Java: "TagA".hashCode() == 2598919, "TagB".hashCode() == 2598920.
        assert_eq!(sub["codeSet"], serde_json::json!([2598919, 2598920]));
        assert_eq!(sub["subVersion"], 7);
        assert_eq!(sub["expressionType"], "TAG");
        assert_eq!(consumer["subscriptionDataSet"][1]["subString"], "*");
    }

    #[test]
    fn unique_ids_are_32_hex_and_distinct() {
        let a = unique_id();
        let b = unique_id();
        assert_eq!(a.len(), 32);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase()));
        assert_ne!(a, b);
    }

    #[test]
    fn connect_rejects_bad_addresses() {
        actix_rt::System::new().block_on(async {
            for bad in ["", "localhost", ":9876", "h:x"] {
                assert!(RemoteBroker::connect(bad, RemoteBrokerConfig::default()).is_err());
            }
        });
    }

    // ---- against a scripted server ---------------------------------------------------------

    /// Answers like a broker would, from hand-built responses; records every request.
    struct Scripted {
        addr: Mutex<String>,
        seen: Arc<Mutex<Vec<RemotingCommand>>>,
    }

    impl Scripted {
        fn answer(
            &self,
            conn: &ConnectionHandle,
            request: &RemotingCommand,
        ) -> Option<RemotingCommand> {
            let ok = || RemotingCommand::new_response(code::SUCCESS, None);
            let queue = request.ext("queueId").unwrap_or("0");
            Some(match request.code {
                rc::GET_ROUTEINFO_BY_TOPIC => {
                    if request.ext("topic") == Some("Missing") {
                        return Some(RemotingCommand::new_response(
                            code::TOPIC_NOT_EXIST,
                            Some("no route".into()),
                        ));
                    }
                    let addr = self.addr.lock().map(|a| a.clone()).unwrap_or_default();
                    // fastjson's default form: unquoted broker ids.
                    let body = format!(
                        r#"{{"brokerDatas":[{{"brokerAddrs":{{0:"{addr}"}},"brokerName":"b1","cluster":"c"}}],"queueDatas":[{{"brokerName":"b1","perm":6,"readQueueNums":4,"writeQueueNums":4}}]}}"#
                    );
                    ok().with_body(body)
                }
                rc::HEART_BEAT => {
                    // The notification goes out before the heartbeat's answer.
                    let notify = RemotingCommand::new_request(rc::NOTIFY_CONSUMER_IDS_CHANGED)
                        .oneway()
                        .with_ext("consumerGroup", "g");
                    let _ = conn.try_send(notify);
                    ok()
                }
                rc::PULL_MESSAGE => {
                    let header = PullMessageResponseHeader {
                        next_begin_offset: 7,
                        min_offset: 0,
                        max_offset: 9,
                        ..Default::default()
                    };
                    let answer = match request.ext("queueOffset") {
                        Some("0") => code::PULL_NOT_FOUND,
                        Some("1") => code::PULL_RETRY_IMMEDIATELY,
                        Some("2") => code::PULL_OFFSET_MOVED,
                        Some("3") => code::SUCCESS,
                        _ => code::SUBSCRIPTION_NOT_LATEST,
                    };
                    RemotingCommand::new_response(answer, Some("r".into()))
                        .with_ext_fields(header.to_ext())
                        .with_body(if answer == code::SUCCESS {
                            &b"records"[..]
                        } else {
                            &b""[..]
                        })
                }
                rc::QUERY_CONSUMER_OFFSET => match queue {
                    "0" => RemotingCommand::new_response(code::QUERY_NOT_FOUND, Some("nf".into())),
                    "1" => ok().with_ext("offset", "42"),
                    _ => RemotingCommand::new_response(code::SYSTEM_ERROR, Some("corrupt".into())),
                },
                rc::UPDATE_CONSUMER_OFFSET => ok(),
                rc::GET_MAX_OFFSET if queue == "9" => return None,
                rc::GET_MAX_OFFSET => ok().with_ext("offset", "12"),
                rc::GET_MIN_OFFSET => ok().with_ext("offset", "-3"),
                rc::GET_CONSUMER_LIST_BY_GROUP => {
                    ok().with_body(&br#"{"consumerIdList":["a","b"]}"#[..])
                }
                rc::SEND_MESSAGE_V2 | rc::SEND_BATCH_MESSAGE => {
                    let ids = if request.code == rc::SEND_BATCH_MESSAGE {
                        "7F00000100002A9F0000000000000010,7F00000100002A9F0000000000000020"
                    } else {
                        "7F00000100002A9F0000000000000030"
                    };
                    ok().with_ext("msgId", ids)
                        .with_ext("queueId", request.ext("e").unwrap_or("0"))
                        .with_ext("queueOffset", "5")
                }
                rc::LOCK_BATCH_MQ => ok().with_body(
                    &br#"{"lockOKMQSet":[{"topic":"T","brokerName":"b1","queueId":1}]}"#[..],
                ),
                _ => RemotingCommand::not_supported(request),
            })
        }
    }

    impl RequestHandler for Scripted {
        fn handle(&self, conn: ConnectionHandle, request: RemotingCommand) -> HandlerFuture {
            if let Ok(mut seen) = self.seen.lock() {
                seen.push(request.clone());
            }
            let answer = self.answer(&conn, &request);
            Box::pin(async move { answer })
        }
    }

    struct Flag(Rc<Cell<u32>>);

    // The test runs on one thread; the notifier is only ever called there.
    impl ConsumerNotifier for Flag {
        fn consumer_ids_changed(&self, group: &str) {
            assert_eq!(group, "g");
            self.0.set(self.0.get() + 1);
        }
    }

    #[test]
    #[allow(clippy::arc_with_non_send_sync)]
    fn talks_to_a_scripted_broker() {
        actix_rt::System::new().block_on(async {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let handler = Arc::new(Scripted {
                addr: Mutex::new(String::new()),
                seen: seen.clone(),
            });
            let server =
                RemotingServer::bind("127.0.0.1:0", ServerConfig::default(), handler.clone())
                    .await
                    .expect("binds");
            let addr = server.local_addr().to_string();
            *handler.addr.lock().expect("lock") = addr.clone();
            let config = RemoteBrokerConfig {
                rpc_timeout: Duration::from_millis(300),
                ..Default::default()
            };
            let broker = RemoteBroker::connect(&addr, config).expect("valid address");

            let route = broker.route("T").await.expect("route");
            assert_eq!(
                (route.broker_name.as_str(), route.read_queue_nums),
                ("b1", 4)
            );
            // Unknown topic: TBW102's broker, asked again next time.
            let fallback = broker.route("Missing").await.expect("fallback route");
            assert_eq!(
                (fallback.topic.as_str(), fallback.write_queue_nums),
                ("Missing", 4)
            );
            broker.route("Missing").await.expect("fallback route");
            broker.route("T").await.expect("cached route");

            // Heartbeat: notification before the answer reaches the registered notifier.
            let calls = Rc::new(Cell::new(0));
            let heartbeat = ConsumerHeartbeat {
                client_id: "c1".into(),
                group: "g".into(),
                consume_type: ApiConsumeType::Passively,
                message_model: ApiMessageModel::Clustering,
                consume_from_where: "CONSUME_FROM_LAST_OFFSET".into(),
                subscriptions: vec![SubscriptionEntry {
                    topic: "T".into(),
                    expression: "*".into(),
                    sub_version: 99,
                }],
            };
            broker
                .heartbeat(heartbeat, Arc::new(Flag(calls.clone())))
                .await
                .expect("heartbeat");
            for _ in 0..100 {
                if calls.get() > 0 {
                    break;
                }
                tokio::task::yield_now().await;
            }
            assert_eq!(calls.get(), 1, "notifier called once");

            // Pull status mapping, sysFlag and the long-poll timeout.
            let mut pull = PullRequest {
                group: "g".into(),
                topic: "T".into(),
                queue_id: 1,
                queue_offset: 0,
                max_messages: 32,
                commit_offset: Some(5),
                suspend_timeout: Some(Duration::from_millis(100)),
                subscription: Some("*".into()),
            };
            for (offset, status) in [
                (0, PullStatus::NoNewMessage),
                (1, PullStatus::NoMatchedMessage),
                (2, PullStatus::OffsetIllegal),
                (3, PullStatus::Found),
            ] {
                pull.queue_offset = offset;
                let answer = broker.pull(pull.clone()).await.expect("pull");
                assert_eq!(answer.status, status);
                assert_eq!((answer.next_begin_offset, answer.max_offset), (7, 9));
                assert_eq!(answer.records.is_empty(), status != PullStatus::Found);
            }
            pull.queue_offset = 4;
            assert!(matches!(
                broker.pull(pull).await,
                Err(BrokerError::Remote { code: 25, .. })
            ));

            let q = |id| MessageQueue::new("T", "b1", id);
            assert_eq!(
                broker.query_offset("g", &q(0)).await.expect("22 is none"),
                None
            );
            assert_eq!(
                broker.query_offset("g", &q(1)).await.expect("found"),
                Some(42)
            );
            assert!(matches!(
                broker.query_offset("g", &q(2)).await,
                Err(BrokerError::Remote { code: 1, .. })
            ));
            broker
                .update_offset("g", &q(1), 8, false)
                .await
                .expect("oneway");
            broker
                .update_offset("g", &q(1), 9, true)
                .await
                .expect("two-way");
            assert_eq!(broker.max_offset(&q(1)).await.expect("max"), 12);
            assert!(matches!(
                broker.min_offset(&q(1)).await,
                Err(BrokerError::Transport { .. })
            ));
            assert!(matches!(
                broker.max_offset(&q(9)).await,
                Err(BrokerError::Timeout { .. })
            ));
            assert_eq!(
                broker.consumer_list("g").await.expect("list"),
                vec!["a", "b"]
            );
            assert_eq!(
                broker
                    .lock_batch("g", "c1", vec![q(0), q(1)])
                    .await
                    .expect("lock"),
                vec![q(1)]
            );

            let sent = broker
                .send(vec![
                    message("T", 2, "a"),
                    message("T", 2, "b"),
                    message("T", 3, "c"),
                ])
                .await
                .expect("send");
            let offsets: Vec<(u32, u64, u64)> = sent
                .iter()
                .map(|r| (r.queue_id, r.queue_offset, r.physical_offset))
                .collect();
            assert_eq!(offsets, vec![(2, 5, 0x10), (2, 6, 0x20), (3, 5, 0x30)]);
            // Properties without the trailing separator keep their last pair intact.
            let mut unterminated = message("T", 1, "u");
            unterminated.properties = "TAGS\u{1}a".to_owned();
            broker.send(vec![unterminated]).await.expect("send");

            let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
            let routes: Vec<Option<&str>> = seen
                .iter()
                .filter(|r| r.code == rc::GET_ROUTEINFO_BY_TOPIC)
                .map(|r| r.ext("topic"))
                .collect();
            assert_eq!(
                routes,
                vec![
                    Some("T"),
                    Some("Missing"),
                    Some("TBW102"),
                    Some("Missing"),
                    Some("TBW102"),
                    // The timeout marked the broker's routes stale.
                    Some("T"),
                ]
            );
            let pulls: Vec<&RemotingCommand> =
                seen.iter().filter(|r| r.code == rc::PULL_MESSAGE).collect();
            assert_eq!(pulls[0].ext("sysFlag"), Some("7"));
            assert_eq!(pulls[0].ext("commitOffset"), Some("5"));
            assert_eq!(pulls[0].ext("subVersion"), Some("99"));
            let queries: Vec<&RemotingCommand> = seen
                .iter()
                .filter(|r| r.code == rc::QUERY_CONSUMER_OFFSET)
                .collect();
            assert!(queries
                .iter()
                .all(|r| r.ext("setZeroIfNotFound") == Some("false")));
            let updates: Vec<bool> = seen
                .iter()
                .filter(|r| r.code == rc::UPDATE_CONSUMER_OFFSET)
                .map(RemotingCommand::is_oneway)
                .collect();
            assert_eq!(updates, vec![true, false]);
            let sends: Vec<&RemotingCommand> = seen
                .iter()
                .filter(|r| r.code == rc::SEND_MESSAGE_V2 || r.code == rc::SEND_BATCH_MESSAGE)
                .collect();
            assert_eq!(sends.len(), 3);
            assert_eq!(sends[0].code, rc::SEND_BATCH_MESSAGE);
            assert_eq!(sends[0].ext("m"), Some("true"));
            let single_props = sends[1].ext("i").unwrap_or_default();
            assert_eq!(property(single_props, UNIQ_KEY).map(str::len), Some(32));
            let unterminated = sends[2].ext("i").unwrap_or_default();
            assert_eq!(property(unterminated, "TAGS"), Some("a"));
            assert_eq!(property(unterminated, UNIQ_KEY).map(str::len), Some(32));

            broker.close();
            assert!(matches!(
                broker.consumer_list("g").await,
                Err(BrokerError::Transport { .. })
            ));
            server.shutdown().await;
        });
    }
}
