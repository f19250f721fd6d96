//! What the brokers know of this client: the heartbeats sent, the connection each went over, and
//! the notifiers those heartbeats registered. A broker that restarted, or dropped the connection
//! and with it the registrations, gets the heartbeats again before the next pull or member list
//! ([`RemoteBroker::reregister_if_reconnected`]); its NOTIFY_CONSUMER_IDS_CHANGED requests reach
//! the registered notifiers ([`super::inbound`]), and its GET_CONSUMER_RUNNING_INFO requests
//! (a tool's `mqadmin consumerStatus`, forwarded by the broker) are answered from the
//! heartbeats: the consumer's properties and subscriptions.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Weak;

use std::sync::Arc;

use tracing::{debug, warn};

use skiff_actors::broker_api::{ConsumerHeartbeat, ConsumerNotifier};

use super::RemoteBroker;
use crate::remoting::body::JsonBody;
use crate::remoting::client::ConnectionId;
use crate::remoting::codes::request as rc;
use crate::remoting::codes::{response as code, version};
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{ClientTargetRequestHeader, CustomHeader};
use crate::remoting::wire::heartbeat_data;

/// Notifiers registered by heartbeats, by (group, client id).
pub(super) type Notifiers = RefCell<BTreeMap<(String, String), Arc<dyn ConsumerNotifier>>>;

/// What a broker knows of this client: the connection its heartbeats went over and the
/// heartbeats themselves, to send again on a new connection (the broker restarted, or dropped
/// the old connection and with it the registrations).
#[derive(Default)]
pub(super) struct Registrations {
    /// Broker address → the connection the last heartbeats were sent on.
    pub(super) connections: HashMap<String, ConnectionId>,
    /// (group, client id) → the last heartbeat.
    pub(super) heartbeats: BTreeMap<(String, String), ConsumerHeartbeat>,
}

impl RemoteBroker {
    /// Before a pull or a member list: if this client's heartbeats went to `addr` over a
    /// connection that is gone, sends them again on the current one, so a restarted broker
    /// knows the subscriptions and members at once instead of after the next periodic
    /// heartbeat. Best effort: failures are left to the call that follows.
    pub(super) async fn reregister_if_reconnected(&self, addr: &str) {
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
                .with_body(heartbeat_data(&heartbeat).encode());
            match self.invoke_ok(addr, request).await {
                Ok(_) => debug!(addr, group = %group, "heartbeat sent again on a new connection"),
                Err(e) => {
                    warn!(addr, group = %group, error = &e as &dyn std::error::Error, "heartbeat on a new connection failed")
                }
            }
        }
    }

    /// Records that `heartbeat` reached `addr` over the current connection.
    pub(super) async fn registered(&self, addr: &str, heartbeat: &ConsumerHeartbeat) {
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
}

/// What a GET_CONSUMER_RUNNING_INFO answer says about this client besides its heartbeats.
pub(super) struct ClientFacts {
    pub(super) namesrv: String,
    pub(super) started_ms: i64,
}

/// Java's `ConsumerRunningInfo` body for one registered consumer: its properties (the keys
/// `mqadmin consumerStatus` prints) and subscriptions. skiff's consumers keep their queue
/// state in their own actors, so the per-queue tables are empty.
pub(crate) fn consumer_running_info(
    heartbeat: &ConsumerHeartbeat,
    namesrv: &str,
    started_ms: i64,
) -> Vec<u8> {
    let data = heartbeat_data(heartbeat);
    let consumer = data
        .consumer_data_set
        .into_iter()
        .next()
        .unwrap_or_default();
    serde_json::json!({
        "properties": {
            "PROP_NAMESERVER_ADDR": namesrv,
            "PROP_CONSUME_TYPE": consumer.consume_type.name(),
            "PROP_CLIENT_VERSION": version::desc(version::CURRENT),
            "PROP_CONSUMER_START_TIMESTAMP": started_ms.to_string(),
            "messageModel": consumer.message_model.name(),
            "consumeFromWhere": consumer.consume_from_where.name(),
        },
        "subscriptionSet": consumer.subscription_data_set,
        "mqTable": {},
        "mqPopTable": {},
        "statusTable": {},
        "userConsumerInfo": {},
    })
    .to_string()
    .into_bytes()
}

/// GET_CONSUMER_RUNNING_INFO (307): the running info of the named consumer of this client, or
/// SYSTEM_ERROR with the Java client's remark when it is not registered here.
pub(super) fn running_info_answer(
    request: &RemotingCommand,
    registrations: &Weak<RefCell<Registrations>>,
    facts: &ClientFacts,
) -> RemotingCommand {
    let header = match ClientTargetRequestHeader::from_command(request) {
        Ok(header) => header,
        Err(e) => {
            return RemotingCommand::response_to(request, code::SYSTEM_ERROR, Some(e.to_string()))
        }
    };
    let heartbeat = registrations.upgrade().and_then(|r| {
        r.borrow()
            .heartbeats
            .get(&(header.consumer_group.clone(), header.client_id.clone()))
            .cloned()
    });
    match heartbeat {
        Some(heartbeat) => RemotingCommand::success_to(request).with_body(consumer_running_info(
            &heartbeat,
            &facts.namesrv,
            facts.started_ms,
        )),
        None => RemotingCommand::response_to(
            request,
            code::SYSTEM_ERROR,
            Some(format!(
                "The Consumer Group <{}> not exist in this consumer",
                header.consumer_group
            )),
        ),
    }
}
