//! The broker and name-server request processor: every request code skiff serves
//! (`docs/wire-protocol.md` §2, §8) mapped to [`BrokerHandle`] calls with RocketMQ's wire
//! semantics (codes, remarks, header fields, bodies).
//!
//! # Layout
//!
//! * This module: [`Processor::process`], which dispatches on the request code, the error
//!   answer (`Failure`) and the connections' registrations.
//! * [`bridge`]: the `Send + Sync` handler given to the server, and the loop that runs requests
//!   on the broker's arbiter.
//! * `name_server`: routes, cluster info and the topic list (GET_ROUTEINFO_BY_TOPIC,
//!   GET_BROKER_CLUSTER_INFO, GET_ALL_TOPIC_LIST_FROM_NAMESERVER).
//! * `produce`: SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE, RECALL_MESSAGE.
//! * `consume`: pulls, offsets, heartbeats, send-back, queue locks and the other consumer
//!   requests.
//! * `admin`: GET_CONSUME_STATS and INVOKE_BROKER_TO_RESET_OFFSET.
//! * `admin_config`: topic and subscription-group configs and topic stats (17, 215, 21, 351,
//!   202, 200, 201, 207).
//! * `auth`: ACL 2.0 users and ACLs (AUTH_CREATE_USER 3001 ... AUTH_LIST_ACL 3010).
//! * `admin_clients`: connected clients (203, 204, 300), runtime info and config (28, 26), and
//!   the requests forwarded to a client on its own connection (307, 309).
//! * `clients`: the table of clients by group and connection that those read.
//! * `lite_admin`: RocketMQ 5.5's lite admin requests (200074-200079).
//! * `lookup`: finding stored messages (VIEW_MESSAGE_BY_ID, QUERY_MESSAGE).
//! * `transaction`: END_TRANSACTION, and the CHECK_TRANSACTION_STATE pushed to producers.
//! * `pop`: pop consumption (POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE,
//!   CHANGE_MESSAGE_INVISIBLETIME, NOTIFICATION) and broker-side assignment (QUERY_ASSIGNMENT,
//!   SET_MESSAGE_REQUEST_MODE).
//! * `refusal`: the one table from broker errors and typed refusals to codes and remarks.
//! * `reply`: request-reply (SEND_REPLY_MESSAGE, SEND_REPLY_MESSAGE_V2), and the
//!   PUSH_REPLY_MESSAGE_TO_CLIENT pushed to the requester.
//!
//! A new request code gets an arm in [`Processor::process`] and a handler in the file of its
//! side.
//!
//! # Connections
//!
//! The broker's registry of client connections (`skiff_actors::broker::connections`) holds,
//! by connection id, what the client said of itself, how the broker calls each connection back
//! (a [`ConsumerNotifier`] (NOTIFY_CONSUMER_IDS_CHANGED, code 40, oneway) and a transaction
//! check listener (CHECK_TRANSACTION_STATE, code 39), both writing to that connection), its
//! producer groups and what its consumers last reported; the admin listings read it. The
//! processor keeps only the handles of the connections clients registered through (`clients`),
//! for the requests it forwards to a client, and the heartbeat V2 fingerprints. When the connection closes
//! ([`Processor::connection_closed`]) every client registered through it leaves its groups at
//! once ([`BrokerHandle::connection_closed`]), so a killed consumer's queues and locks move to
//! the others without waiting for the 120 s expiry.
//!
//! # Bad input
//!
//! A header that cannot be decoded is answered SYSTEM_ERROR (1) with Java's remark naming the
//! field (`the custom field <queueId> is null`), or the code Java's processor uses where it
//! checks itself (INVALID_PARAMETER 29 for UPDATE_CONSUMER_OFFSET). Bodies that cannot be
//! decoded are answered SYSTEM_ERROR or MESSAGE_ILLEGAL (13) with a remark. Nothing here
//! panics on network data.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use tracing::{debug, trace};

use skiff_actors::broker::BrokerHandle;
use skiff_actors::broker_api::ConsumerNotifier;

use super::body::BodyError;
use super::codes::{request as rc, response as code};
use super::frame::RemotingCommand;
use super::headers::{CustomHeader, HeaderError, NotifyConsumerIdsChangedRequestHeader};
use super::server::{ConnectionHandle, ConnectionId};
use crate::error_text::error_chain;
use clients::ClientHandles;
use refusal::{broker_failure, failure_to};

mod admin;
mod admin_clients;
mod admin_config;
mod auth;
pub mod bridge;
mod clients;
mod consume;
mod lite_admin;
mod lookup;
mod name_server;
mod pop;
mod produce;
mod refusal;
mod reply;
mod transaction;

pub use bridge::{
    channel, spawn, ProcessorInbox, ProcessorTask, RequestBridge, DEFAULT_QUEUE_CAPACITY,
};

/// Ext keys of responses (`MixAll`, `MessageConst`).
pub mod ext {
    pub const MSG_REGION: &str = "MSG_REGION";
    pub const TRACE_ON: &str = "TRACE_ON";
    pub const IS_SUPPORT_HEART_BEAT_V2: &str = "IS_SUPPORT_HEART_BEAT_V2";
    pub const IS_SUB_CHANGE: &str = "IS_SUB_CHANGE";
}

/// `FAQUrl.DEFAULT_FAQ_URL`.
const FAQ_URL: &str = "https://rocketmq.apache.org/docs/bestPractice/06FAQ";

/// `FAQUrl.suggestTodo`.
fn suggest_todo() -> String {
    format!("\nSee {FAQ_URL} for further details.")
}

/// Maps requests to broker calls. Lives on the broker's arbiter.
pub struct Processor {
    broker: BrokerHandle,
    /// Heartbeat V2 fingerprint per group (Java's `consumerGroupHeartbeatTable`).
    fingerprints: RefCell<HashMap<String, i32>>,
    /// The connections clients registered through, for requests the broker forwards to them.
    clients: RefCell<ClientHandles<ConnectionHandle>>,
    /// When this processor started (epoch ms): the broker's boot time in runtime info.
    started_ms: i64,
    /// ACL 2.0 users and ACLs, for the AUTH_* admin requests.
    auth: Option<std::sync::Arc<crate::acl::admin::AuthAdmin>>,
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

/// A queue id from a header; negative ids are illegal.
fn queue_index(queue_id: i32, topic: &str) -> Result<u32, Failure> {
    u32::try_from(queue_id)
        .map_err(|_| Failure::system(format!("queueId[{queue_id}] is illegal, topic:[{topic}]")))
}

fn body_failure(e: BodyError) -> Failure {
    Failure::system(error_chain(&e))
}

impl Processor {
    pub fn new(broker: BrokerHandle) -> Self {
        Processor {
            fingerprints: RefCell::new(HashMap::new()),
            clients: RefCell::new(ClientHandles::default()),
            started_ms: broker.now_ms(),
            broker,
            auth: None,
        }
    }

    /// This processor, serving the ACL 2.0 admin requests over `auth`.
    pub fn with_auth(self, auth: std::sync::Arc<crate::acl::admin::AuthAdmin>) -> Self {
        Processor {
            auth: Some(auth),
            ..self
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
            rc::GET_ROUTEINFO_BY_TOPIC => self.route(&conn, &request).await,
            rc::GET_BROKER_CLUSTER_INFO => self.cluster_info(&conn, &request),
            rc::GET_ALL_TOPIC_LIST_FROM_NAMESERVER => self.topic_list(),
            rc::SEND_MESSAGE | rc::SEND_MESSAGE_V2 | rc::SEND_BATCH_MESSAGE => {
                self.send(&conn, &request).await
            }
            rc::SEND_REPLY_MESSAGE | rc::SEND_REPLY_MESSAGE_V2 => {
                self.send_reply(&conn, &request).await
            }
            rc::PULL_MESSAGE | rc::LITE_PULL_MESSAGE => {
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
            rc::GET_EARLIEST_MSG_STORETIME => self.earliest_store_time(&request),
            rc::HEART_BEAT => self.heartbeat(&conn, &request).await,
            rc::UNREGISTER_CLIENT => self.unregister(&request).await,
            rc::GET_CONSUMER_LIST_BY_GROUP => self.consumer_list(&request).await,
            rc::CONSUMER_SEND_MSG_BACK => self.send_back(&request).await,
            rc::LOCK_BATCH_MQ => self.lock(&request).await,
            rc::UNLOCK_BATCH_MQ => self.unlock(&request).await,
            rc::CHECK_CLIENT_CONFIG => consume::check_client_config(&request),
            rc::GET_CONSUME_STATS => self.consume_stats(&request).await,
            rc::INVOKE_BROKER_TO_RESET_OFFSET => self.reset_offset(&request).await,
            rc::VIEW_MESSAGE_BY_ID => self.view_message(&request),
            rc::QUERY_MESSAGE => self.query_message(&request).await,
            rc::UPDATE_AND_CREATE_TOPIC => self.create_topic(&request),
            rc::DELETE_TOPIC_IN_BROKER => self.delete_topic(&request).await,
            rc::AUTH_CREATE_USER..=rc::AUTH_LIST_ACL => self.auth_admin(&request),
            rc::GET_BROKER_LITE_INFO..=rc::TRIGGER_LITE_DISPATCH | rc::LIST_LITE_TOPICS => {
                self.lite_admin(&request).await
            }
            rc::DELETE_TOPIC_IN_NAMESRV => name_server::delete_topic_route(&request),
            rc::GET_ALL_TOPIC_CONFIG => self.all_topic_config(&request),
            rc::GET_TOPIC_CONFIG => self.topic_config(&request),
            rc::GET_TOPIC_STATS_INFO => self.topic_stats(&request),
            rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP => self.create_group(&request),
            rc::GET_ALL_SUBSCRIPTIONGROUP_CONFIG => self.all_group_config(),
            rc::DELETE_SUBSCRIPTIONGROUP => self.delete_group(&request).await,
            rc::GET_CONSUMER_CONNECTION_LIST => self.consumer_connections(&request).await,
            rc::GET_PRODUCER_CONNECTION_LIST => self.producer_connections(&request),
            rc::QUERY_TOPIC_CONSUME_BY_WHO => self.topic_consumed_by(&request).await,
            rc::GET_BROKER_RUNTIME_INFO => self.runtime_info(),
            rc::GET_BROKER_CONFIG => self.broker_config(&conn),
            rc::GET_KV_CONFIG => name_server::kv_config(&request),
            rc::GET_SYSTEM_TOPIC_LIST_FROM_NS => self.system_topic_list(),
            rc::GET_CONSUMER_RUNNING_INFO | rc::CONSUME_MESSAGE_DIRECTLY => {
                self.call_consumer(&request).await
            }
            rc::END_TRANSACTION => self.end_transaction(&request).await,
            rc::RECALL_MESSAGE => self.recall(&request).await,
            rc::POP_MESSAGE | rc::NOTIFICATION => {
                // A held pop whose connection closes is dropped at once, as a held pull is.
                let held = async {
                    if request.code == rc::POP_MESSAGE {
                        self.pop(&request).await
                    } else {
                        self.notification(&request).await
                    }
                };
                tokio::select! {
                    outcome = held => outcome,
                    _ = conn.closed() => {
                        debug!(conn = %conn.id(), opaque = request.opaque, "pop abandoned: connection closed");
                        return None;
                    }
                }
            }
            rc::ACK_MESSAGE => self.ack(&request).await,
            rc::BATCH_ACK_MESSAGE => self.batch_ack(&request).await,
            rc::CHANGE_MESSAGE_INVISIBLETIME => self.change_invisible_time(&request).await,
            rc::QUERY_ASSIGNMENT => self.query_assignment(&request).await,
            rc::SET_MESSAGE_REQUEST_MODE => self.set_request_mode(&request).await,
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
}

// ---- connections ------------------------------------------------------------------------------

/// Tells one connection's consumers that their group changed (code 40, oneway).
struct ConnectionNotifier {
    conn: ConnectionHandle,
}

impl ConsumerNotifier for ConnectionNotifier {
    fn connection(&self) -> ConnectionId {
        self.conn.id()
    }

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

impl Processor {
    /// A connection closed: the clients registered through it leave their groups, and the
    /// broker's registry and the handle index forget it.
    pub async fn connection_closed(&self, id: ConnectionId) {
        self.clients.borrow_mut().connection_closed(id);
        match self.broker.connection_closed(id).await {
            Ok(0) => {}
            Ok(removed) => {
                debug!(conn = %id, removed, "clients of a closed connection left their groups")
            }
            Err(e) => {
                debug!(conn = %id, error = %error_chain(&e), "releasing a closed connection's clients failed")
            }
        }
    }

    /// Every connection still registered leaves (shutdown).
    async fn release_all(&self) {
        let ids = self.clients.borrow().connection_ids();
        for id in ids {
            self.connection_closed(id).await;
        }
    }
}
