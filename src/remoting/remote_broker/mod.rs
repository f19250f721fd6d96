//! [`RemoteBroker`]: the [`BrokerApi`](skiff_actors::broker_api::BrokerApi) over TCP, so skiff's
//! own consumer and producer actors run against `skiff serve` or a real RocketMQ name server +
//! broker.
//!
//! * Routes come from the name server (GET_ROUTEINFO_BY_TOPIC, 105), standard or fastjson
//!   (unquoted numeric keys) JSON. The master (`brokerAddrs[0]`) of the first broker that has one
//!   is the topic's broker address. Routes are cached for [`RemoteBrokerConfig::route_ttl`]; a
//!   transport failure or timeout on a broker marks its routes stale, so the next call asks the
//!   name server again; a stale route is still used while the name server is unreachable (as
//!   Java's client keeps its last route). A topic the name server does not know falls back to
//!   the route of [`AUTO_CREATE_TOPIC_KEY`](super::codes::AUTO_CREATE_TOPIC_KEY) (broker
//!   auto-creation), as Java producers do.
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
//! * Errors are [`BrokerError::Remote`]: a non-success answer is [`RemoteError::Answered`]
//!   (broker address, code, remark); a connection that cannot be made or is lost is
//!   [`RemoteError::Transport`], with the client's error as its source; an answer that cannot be
//!   read is [`RemoteError::Undecodable`]; no answer in time is [`RemoteError::Timeout`].
//!
//! Not `Send`: create and use it on one actix arbiter (its futures are `BrokerFuture`s).
//!
//! Layout: this module holds the client, its transport and the one `BrokerApi` impl, written
//! by [`forward_broker_api!`](skiff_actors::forward_broker_api) from the inherent calls of the
//! files below. `send`: sends. `consume`: the consumer's calls (pull, consumer offsets,
//! send-back, heartbeats, member list, queue locks). `offsets`: a queue's min, max and timestamp
//! offsets. `routes`: routes and the route cache. `registrations`: the heartbeats to send again.
//! `producers`: transactional producers and request-reply requesters. `inbound`: the dispatch of
//! the requests the broker sends this client. Requests and answers are mapped to domain types in
//! [`super::wire`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use skiff_actors::broker_api::{BrokerError, RemoteError};
use skiff_actors::forward_broker_api;

use super::client::{ClientConfig, ClientError, RemotingClient};
use super::codes::response as code;
use super::frame::RemotingCommand;
use super::headers::{CustomHeader, OffsetResponseHeader};

mod consume;
mod inbound;
mod offsets;
mod producers;
mod registrations;
mod routes;
mod send;

use inbound::dispatch_inbound;
use registrations::{ClientFacts, Notifiers, Registrations};
use routes::RouteCache;

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

struct Inner {
    namesrv: String,
    config: RemoteBrokerConfig,
    client: RemotingClient,
    routes: RouteCache,
    /// Subscription versions from heartbeats, by (group, topic), sent with pulls as Java does.
    sub_versions: RefCell<HashMap<(String, String), i64>>,
    notifiers: Rc<Notifiers>,
    registrations: Rc<RefCell<Registrations>>,
    producers: Rc<RefCell<producers::Producers>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.client.shutdown();
    }
}

/// The remoting [`BrokerApi`](skiff_actors::broker_api::BrokerApi). Cheap to clone; clones share
/// the connection and the caches.
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
            return Err(RemoteError::InvalidAddress {
                addr: namesrv.to_owned(),
            }
            .into());
        }
        let client = RemotingClient::new(config.client.clone());
        let inbound = client.request_channel(config.inbound_capacity);
        let notifiers: Rc<Notifiers> = Rc::default();
        let registrations: Rc<RefCell<Registrations>> = Rc::default();
        let producers: Rc<RefCell<producers::Producers>> = Rc::default();
        actix_rt::spawn(dispatch_inbound(
            inbound,
            Rc::downgrade(&notifiers),
            Rc::downgrade(&registrations),
            Rc::downgrade(&producers),
            ClientFacts {
                namesrv: namesrv.to_owned(),
                started_ms: skiff_storage::clock::epoch_millis(),
            },
        ));
        Ok(RemoteBroker {
            inner: Rc::new(Inner {
                namesrv: namesrv.to_owned(),
                config,
                client,
                routes: RouteCache::default(),
                sub_versions: RefCell::default(),
                notifiers,
                registrations,
                producers,
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
    /// learn nothing, later calls fail with [`RemoteError::Transport`].
    pub fn close(&self) {
        self.inner.client.shutdown();
        self.inner.notifiers.borrow_mut().clear();
        *self.inner.registrations.borrow_mut() = Registrations::default();
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
                self.inner.routes.mark_stale(addr);
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
}

forward_broker_api!(RemoteBroker);

// ---- helpers ----------------------------------------------------------------------------------

fn offset_header(addr: &str, response: &RemotingCommand) -> Result<i64, BrokerError> {
    OffsetResponseHeader::from_command(response)
        .map(|h| h.offset)
        .map_err(|e| bad_answer(addr, "offset answer", e))
}

fn expect_success(addr: &str, response: RemotingCommand) -> Result<RemotingCommand, BrokerError> {
    if response.code == code::SUCCESS {
        Ok(response)
    } else {
        Err(remote(addr, &response))
    }
}

fn remote(addr: &str, response: &RemotingCommand) -> BrokerError {
    RemoteError::Answered {
        addr: addr.to_owned(),
        code: response.code,
        remark: response.remark.clone().unwrap_or_default(),
    }
    .into()
}

fn bad_answer(
    addr: &str,
    what: &'static str,
    error: impl std::error::Error + Send + Sync + 'static,
) -> BrokerError {
    RemoteError::Undecodable {
        addr: addr.to_owned(),
        what,
        source: Box::new(error),
    }
    .into()
}

/// An answer field that must not be negative, and was.
#[derive(Debug, thiserror::Error)]
#[error("{field} is negative ({value})")]
struct NegativeField {
    field: &'static str,
    value: i64,
}

/// `value` of the answer field `field` as an offset.
fn answered_offset(
    addr: &str,
    what: &'static str,
    field: &'static str,
    value: i64,
) -> Result<u64, BrokerError> {
    u64::try_from(value).map_err(|_| bad_answer(addr, what, NegativeField { field, value }))
}

/// Maps a transport error; the address is the one the request went to.
pub fn client_error(addr: &str, error: ClientError) -> BrokerError {
    let addr = addr.to_owned();
    match error {
        ClientError::Timeout { timeout, .. } | ClientError::ConnectTimeout { timeout, .. } => {
            RemoteError::Timeout { addr, timeout }
        }
        other => RemoteError::Transport {
            addr,
            source: Box::new(other),
        },
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::codes::{request as rc, AUTO_CREATE_TOPIC_KEY};
    use crate::remoting::headers::PullMessageResponseHeader;
    use crate::remoting::server::{
        ConnectionHandle, HandlerFuture, RemotingServer, RequestHandler, ServerConfig,
    };
    use bytes::Bytes;
    use skiff_actors::broker_api::{
        ConsumeType as ApiConsumeType, ConsumerHeartbeat, ConsumerNotifier,
        MessageModel as ApiMessageModel, NoNewMessage, OffsetMoved, OffsetUpdate, PullRequest,
        PullStatus, QueryOffsetRequest, SendRequest, SubscriptionEntry,
    };
    use skiff_actors::logic::queue::MessageQueue;
    use skiff_storage::message::{
        encode_properties, property, property::UNIQ_KEY, MessageToAppend,
    };
    use std::cell::Cell;
    use std::net::SocketAddr;
    use std::sync::Arc;
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
                    let (answer, remark) = match request.ext("queueOffset") {
                        Some("0") => (code::PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE"),
                        Some("1") => (code::PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE"),
                        Some("2") => (code::PULL_OFFSET_MOVED, "OFFSET_RESET"),
                        Some("3") => (code::SUCCESS, "FOUND"),
                        _ => (code::SUBSCRIPTION_NOT_LATEST, "r"),
                    };
                    RemotingCommand::new_response(answer, Some(remark.into()))
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
        fn connection(&self) -> skiff_actors::broker_api::ConnectionId {
            skiff_actors::broker_api::ConnectionId(1)
        }

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

            let route = broker.route("T".into()).await.expect("route");
            assert_eq!(
                (
                    route.brokers[0].broker_name.as_str(),
                    route.read_queue_nums()
                ),
                ("b1", 4)
            );
            // Unknown topic: the auto-create topic's broker, asked again next time.
            let fallback = broker
                .route("Missing".into())
                .await
                .expect("fallback route");
            assert_eq!(
                (fallback.topic.as_str(), fallback.write_queue_nums()),
                ("Missing", 4)
            );
            broker
                .route("Missing".into())
                .await
                .expect("fallback route");
            broker.route("T".into()).await.expect("cached route");

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
                    expression_type: skiff_actors::broker_api::ExpressionType::Tag,
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
                broker_name: "b1".into(),
                queue_id: 1,
                queue_offset: 0,
                max_messages: 32,
                commit_offset: Some(5),
                suspend_timeout: Some(Duration::from_millis(100)),
                subscription: Some("*".into()),
                expression_type: skiff_actors::broker_api::ExpressionType::Tag,
            };
            for (offset, status) in [
                (0, PullStatus::NoNewMessage(NoNewMessage::CaughtUp)),
                (1, PullStatus::NoMatchedMessage),
                (2, PullStatus::OffsetMoved(OffsetMoved::PendingReset)),
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
                Err(BrokerError::Remote(RemoteError::Answered { code: 25, .. }))
            ));

            let q = |id| MessageQueue::new("T", "b1", id);
            let query = |group: &str, queue| QueryOffsetRequest {
                group: group.into(),
                queue,
                set_zero_if_not_found: false,
            };
            assert_eq!(
                broker
                    .query_offset(query("g", q(0)))
                    .await
                    .expect("22 is none"),
                None
            );
            assert_eq!(
                broker.query_offset(query("g", q(1))).await.expect("found"),
                Some(42)
            );
            assert!(matches!(
                broker.query_offset(query("g", q(2))).await,
                Err(BrokerError::Remote(RemoteError::Answered { code: 1, .. }))
            ));
            broker
                .update_offset("g".into(), q(1), 8, OffsetUpdate::Oneway)
                .await
                .expect("oneway");
            broker
                .update_offset("g".into(), q(1), 9, OffsetUpdate::Acknowledged)
                .await
                .expect("two-way");
            assert_eq!(broker.max_offset(q(1)).await.expect("max"), 12);
            assert!(matches!(
                broker.min_offset(q(1)).await,
                Err(BrokerError::Remote(RemoteError::Undecodable {
                    what: "offset answer",
                    ..
                }))
            ));
            assert!(matches!(
                broker.max_offset(q(9)).await,
                Err(BrokerError::Remote(RemoteError::Timeout { .. }))
            ));
            assert_eq!(
                broker.consumer_list("g".into()).await.expect("list"),
                vec!["a", "b"]
            );
            assert_eq!(
                broker
                    .lock_queues("g".into(), "c1".into(), vec![q(0), q(1)])
                    .await
                    .expect("lock"),
                vec![q(1)]
            );

            let sent = broker
                .send_messages(SendRequest::to_broker(
                    "b1".into(),
                    vec![
                        message("T", 2, "a"),
                        message("T", 2, "b"),
                        message("T", 3, "c"),
                    ],
                ))
                .await
                .expect("send");
            let offsets: Vec<(u32, u64, u64)> = sent
                .iter()
                .map(|r| (r.queue_id, r.queue_offset, r.physical_offset))
                .collect();
            assert_eq!(offsets, vec![(2, 5, 0x10), (2, 6, 0x20), (3, 5, 0x30)]);
            assert!(sent.iter().all(|r| r.broker_name == "b1"), "{sent:?}");
            // Properties go out as given, even without the trailing separator.
            let mut unterminated = message("T", 1, "u");
            unterminated.properties = "TAGS\u{1}a".to_owned();
            broker
                .send_messages(SendRequest::new(vec![unterminated]))
                .await
                .expect("send");

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
                    Some(AUTO_CREATE_TOPIC_KEY),
                    Some("Missing"),
                    Some(AUTO_CREATE_TOPIC_KEY),
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
            // Stamping UNIQ_KEY is the producer's job, not the transport's.
            let single_props = sends[1].ext("i").unwrap_or_default();
            assert_eq!(single_props, encode_properties(&[("TAGS", "a")]));
            assert_eq!(property(single_props, UNIQ_KEY), None);
            assert_eq!(sends[2].ext("i"), Some("TAGS\u{1}a"));

            broker.close();
            // The client's own error is kept as the cause.
            match broker.consumer_list("g".into()).await {
                Err(BrokerError::Remote(RemoteError::Transport { source, .. })) => assert!(
                    matches!(source.downcast_ref(), Some(ClientError::Shutdown)),
                    "{source:?}"
                ),
                other => panic!("a closed client answers a transport error: {other:?}"),
            }
            server.shutdown().await;
        });
    }
}
