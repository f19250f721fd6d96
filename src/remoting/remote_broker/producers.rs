//! The producer side of the client that needs the broker to reach back: transactional producers
//! (the producer groups that answer check-backs, END_TRANSACTION, and the broker's
//! CHECK_TRANSACTION_STATE (39) handed to the group's checker) and request-reply requesters (a
//! request, and the PUSH_REPLY_MESSAGE_TO_CLIENT (326) that brings its reply).
//!
//! A broker reaches a producer over the connection its last heartbeat naming it came over, and
//! forgets it 120 s after that heartbeat. So every producer client id, with its groups, is sent
//! in a heartbeat on the current connection to a broker before a half or a request goes there
//! (to every broker known for a request: the reply may be sent to any of them), and to every
//! known broker every 30 s while the client lives, as Java's client does. END_TRANSACTION goes
//! oneway, as Java's client sends it (Java's broker answers nothing for UNKNOW): to the broker
//! that stored the half, or for a check-back's answer, to the broker that asked.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use skiff_actors::broker_api::{
    BrokerError, EndTransactionRequest, RemoteError, TransactionCheck, TransactionCheckListener,
};
use skiff_actors::logic::transaction::PRODUCER_GROUP;
use skiff_actors::refused::Refused;
use skiff_storage::message::property::{CORRELATION_ID, REPLY_TO_CLIENT};
use skiff_storage::message::{decode_record, property, MessageToAppend, StoredMessage};
use tokio::sync::oneshot;

use super::{Inner, RemoteBroker};
use crate::remoting::body::{HeartbeatData, JsonBody, ProducerData};
use crate::remoting::client::{ConnectionId, InboundRequest};
use crate::remoting::codes::request as rc;
use crate::remoting::codes::response as code;
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    CheckTransactionStateRequestHeader, CustomHeader, EndTransactionRequestHeader,
    ReplyMessageRequestHeader,
};

/// How often every broker hears the producers again (Java's `heartbeatBrokerInterval`).
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(30);
/// A check-back unanswered this long is forgotten (the broker asks again).
const CHECK_ORIGIN_TTL: Duration = Duration::from_secs(600);

/// The transactional producers and requesters of this client.
#[derive(Default)]
pub(super) struct Producers {
    /// Producer client id → its producer groups: what the heartbeats say.
    clients: BTreeMap<String, BTreeSet<String>>,
    /// Producer group → its checker.
    checkers: BTreeMap<String, Arc<dyn TransactionCheckListener>>,
    /// Broker address → the connection the heartbeats last went over, and what they said.
    heartbeats: HashMap<String, (ConnectionId, BTreeMap<String, BTreeSet<String>>)>,
    /// (broker the check named, half's commit-log offset) → the address of the broker that
    /// asked, and when.
    check_origins: HashMap<(String, u64), (String, Instant)>,
    /// A request's `CORRELATION_ID` → where its reply goes.
    replies: HashMap<String, oneshot::Sender<StoredMessage>>,
    /// The periodic heartbeat task runs.
    heartbeating: bool,
}

/// Removes a request's reply slot however the request ends (answered, timed out, dropped).
struct ReplySlot<'a> {
    producers: &'a RefCell<Producers>,
    correlation_id: String,
}

impl Drop for ReplySlot<'_> {
    fn drop(&mut self) {
        self.producers
            .borrow_mut()
            .replies
            .remove(&self.correlation_id);
    }
}

impl RemoteBroker {
    /// Registers a transactional producer group and tells every broker known so far.
    pub(super) async fn register_producer(
        &self,
        group: String,
        client_id: String,
        listener: Arc<dyn TransactionCheckListener>,
    ) -> Result<(), BrokerError> {
        {
            let mut producers = self.inner.producers.borrow_mut();
            producers.checkers.insert(group.clone(), listener);
            producers
                .clients
                .entry(client_id)
                .or_default()
                .insert(group);
        }
        self.start_heartbeats();
        for addr in self.inner.routes.known_addrs() {
            self.producer_heartbeats(&addr).await?;
        }
        Ok(())
    }

    /// Starts the periodic producer heartbeats once; the task ends with the client.
    fn start_heartbeats(&self) {
        if std::mem::replace(&mut self.inner.producers.borrow_mut().heartbeating, true) {
            return;
        }
        let weak: Weak<Inner> = Rc::downgrade(&self.inner);
        actix_rt::spawn(async move {
            loop {
                tokio::time::sleep(HEARTBEAT_INTERVAL).await;
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let broker = RemoteBroker { inner };
                let addrs: BTreeSet<String> = broker
                    .inner
                    .routes
                    .known_addrs()
                    .into_iter()
                    .chain(broker.inner.producers.borrow().heartbeats.keys().cloned())
                    .collect();
                for addr in addrs {
                    if let Err(e) = broker.send_producer_heartbeats(&addr).await {
                        debug!(
                            addr,
                            error = &e as &dyn std::error::Error,
                            "periodic producer heartbeat failed"
                        );
                    }
                }
            }
        });
    }

    /// The producer heartbeats on the current connection to `addr`, unless they went over it
    /// already saying the same.
    pub(super) async fn producer_heartbeats(&self, addr: &str) -> Result<(), BrokerError> {
        let conn = self
            .inner
            .client
            .connection_to(addr, self.inner.config.rpc_timeout)
            .await
            .map_err(|e| super::client_error(addr, e))?
            .id();
        {
            let producers = self.inner.producers.borrow();
            if producers.clients.is_empty() {
                return Ok(());
            }
            if producers.heartbeats.get(addr) == Some(&(conn, producers.clients.clone())) {
                return Ok(());
            }
        }
        self.send_producer_heartbeats(addr).await
    }

    /// One HEART_BEAT per producer client id, naming its groups.
    async fn send_producer_heartbeats(&self, addr: &str) -> Result<(), BrokerError> {
        let clients = self.inner.producers.borrow().clients.clone();
        for (client_id, groups) in &clients {
            let body = HeartbeatData {
                client_id: client_id.clone(),
                producer_data_set: groups
                    .iter()
                    .map(|group| ProducerData {
                        group_name: group.clone(),
                    })
                    .collect(),
                ..HeartbeatData::default()
            }
            .encode();
            let request = RemotingCommand::new_request(rc::HEART_BEAT).with_body(body);
            self.invoke_ok(addr, request).await?;
        }
        if let Ok(conn) = self
            .inner
            .client
            .connection_to(addr, self.inner.config.rpc_timeout)
            .await
        {
            self.inner
                .producers
                .borrow_mut()
                .heartbeats
                .insert(addr.to_owned(), (conn.id(), clients));
        }
        debug!(addr, "producer heartbeats sent");
        Ok(())
    }

    /// END_TRANSACTION, oneway: a check-back's answer to the broker that asked, any other to the
    /// master of the broker that stored the half.
    pub(super) async fn end_transaction(
        &self,
        request: EndTransactionRequest,
    ) -> Result<(), BrokerError> {
        let origin = if request.from_transaction_check {
            self.inner
                .producers
                .borrow_mut()
                .check_origins
                .remove(&(request.broker_name.clone(), request.commit_log_offset))
                .map(|(addr, _)| addr)
        } else {
            None
        };
        let addr = match origin {
            Some(addr) => addr,
            None => self
                .inner
                .routes
                .broker(&request.broker_name)
                .ok_or_else(|| RemoteError::UnknownBroker {
                    broker_name: request.broker_name.clone(),
                    topic: "(the half's)".to_owned(),
                })?,
        };
        let header = EndTransactionRequestHeader {
            topic: None,
            producer_group: request.producer_group,
            tran_state_table_offset: i64::try_from(request.tran_state_table_offset)
                .unwrap_or(i64::MAX),
            commit_log_offset: i64::try_from(request.commit_log_offset).unwrap_or(i64::MAX),
            commit_or_rollback: request.resolution.to_wire(),
            from_transaction_check: request.from_transaction_check,
            msg_id: request.msg_id,
            transaction_id: request.transaction_id,
            broker_name: Some(request.broker_name),
        };
        let command = RemotingCommand::new_request(rc::END_TRANSACTION)
            .oneway()
            .with_ext_fields(header.to_ext());
        let timeout = self.inner.config.rpc_timeout;
        self.inner
            .client
            .invoke_oneway(&addr, command, timeout)
            .await
            .map_err(|e| {
                self.inner.routes.mark_stale(&addr);
                super::client_error(&addr, e)
            })
    }

    /// Request-reply: sends `message` (carrying `CORRELATION_ID` and `REPLY_TO_CLIENT`) to the
    /// broker of its queue and waits up to `timeout` for the reply a broker pushes back on the
    /// requester's connection, which a producer heartbeat of `REPLY_TO_CLIENT` names.
    pub(super) async fn request(
        &self,
        message: MessageToAppend,
        broker_name: String,
        timeout: Duration,
    ) -> Result<StoredMessage, BrokerError> {
        let missing = |property: &'static str| Refused::MissingProperty { property };
        let correlation_id = property(&message.properties, CORRELATION_ID)
            .ok_or_else(|| missing(CORRELATION_ID))?
            .to_owned();
        let client_id = property(&message.properties, REPLY_TO_CLIENT)
            .ok_or_else(|| missing(REPLY_TO_CLIENT))?
            .to_owned();
        let addr = self.queue_addr(&message.topic, &broker_name).await?;
        let newly_known = self
            .inner
            .producers
            .borrow_mut()
            .clients
            .entry(client_id)
            .or_default()
            .insert(self.inner.config.producer_group.clone());
        if newly_known {
            self.start_heartbeats();
        }
        // The replier may send its reply to any broker of the cluster: all of them must know
        // this client's connection.
        let mut addrs = self.inner.routes.known_addrs();
        addrs.insert(addr.clone());
        for known in &addrs {
            self.producer_heartbeats(known).await?;
        }
        let (tx, rx) = oneshot::channel();
        self.inner
            .producers
            .borrow_mut()
            .replies
            .insert(correlation_id.clone(), tx);
        let _slot = ReplySlot {
            producers: &self.inner.producers,
            correlation_id,
        };
        let queue_nums = self.inner.config.default_topic_queue_nums;
        self.send_group(&addr, vec![message], queue_nums).await?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err(BrokerError::Closed {
                what: "the client's reply dispatch",
            }),
            Err(_) => Err(RemoteError::Timeout { addr, timeout }.into()),
        }
    }
}

/// PUSH_REPLY_MESSAGE_TO_CLIENT (326): the reply goes to the request waiting for its
/// `CORRELATION_ID` and the broker is answered SUCCESS; a reply nobody waits for any more is
/// refused with [`reply_push_answer`].
pub(super) fn dispatch_reply(
    request: &InboundRequest,
    producers: &Weak<RefCell<Producers>>,
) -> RemotingCommand {
    let waiter = producers.upgrade().and_then(|producers| {
        let correlation_id = request
            .request
            .ext("properties")
            .and_then(|p| property(p, CORRELATION_ID))?
            .to_owned();
        producers.borrow_mut().replies.remove(&correlation_id)
    });
    let Some(waiter) = waiter else {
        return reply_push_answer(&request.request);
    };
    let reply = match reply_message(&request.request) {
        Ok(reply) => reply,
        Err(e) => {
            warn!(addr = %request.addr, error = %e, "undecodable reply push");
            return RemotingCommand::response_to(
                &request.request,
                code::SYSTEM_ERROR,
                Some(format!("undecodable reply: {e}")),
            );
        }
    };
    // The requester may have given up meanwhile; the broker was reached either way.
    let _ = waiter.send(reply);
    RemotingCommand::success_to(&request.request)
}

/// The reply as the push carries it: the replier's send header and the body.
fn reply_message(
    request: &RemotingCommand,
) -> Result<StoredMessage, crate::remoting::headers::HeaderError> {
    let header = ReplyMessageRequestHeader::from_command(request)?;
    let host = |addr: &str| {
        addr.parse()
            .unwrap_or_else(|_| std::net::SocketAddr::from(([0, 0, 0, 0], 0)))
    };
    Ok(StoredMessage {
        queue_id: u32::try_from(header.queue_id).unwrap_or(0),
        flag: header.flag,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: header.sys_flag,
        born_timestamp: header.born_timestamp,
        born_host: host(&header.born_host),
        store_timestamp: header.store_timestamp,
        store_host: host(&header.store_host),
        reconsume_times: header.reconsume_times.unwrap_or(0),
        prepared_transaction_offset: 0,
        body: request.body.clone(),
        stored_size: 0,
        topic: header.topic,
        properties: header.properties.unwrap_or_default(),
    })
}

/// A CHECK_TRANSACTION_STATE from the broker at `request.addr`: the half goes to its producer
/// group's checker, whose answer goes back as END_TRANSACTION. A check for a group this client
/// does not have, or one that does not decode, is logged and dropped (the broker asks again).
pub(super) fn dispatch_check(request: &InboundRequest, producers: &Weak<RefCell<Producers>>) {
    let Some(producers) = producers.upgrade() else {
        return;
    };
    let header = match CheckTransactionStateRequestHeader::from_command(&request.request) {
        Ok(header) => header,
        Err(e) => {
            warn!(addr = %request.addr, error = %e, "bad CHECK_TRANSACTION_STATE ignored");
            return;
        }
    };
    let message = match decode_record(&request.request.body) {
        Ok((message, _)) => message,
        Err(e) => {
            warn!(addr = %request.addr, error = &e as &dyn std::error::Error, "CHECK_TRANSACTION_STATE with an undecodable half ignored");
            return;
        }
    };
    let (Ok(tran_state_table_offset), Ok(commit_log_offset)) = (
        u64::try_from(header.tran_state_table_offset),
        u64::try_from(header.commit_log_offset),
    ) else {
        warn!(addr = %request.addr, "CHECK_TRANSACTION_STATE with negative offsets ignored");
        return;
    };
    let group = message
        .property(PRODUCER_GROUP)
        .unwrap_or_default()
        .to_owned();
    // The answer names this broker; without a name in the check, its address stands in.
    let broker_name = header.broker_name.unwrap_or_else(|| request.addr.clone());
    let listener = {
        let mut producers = producers.borrow_mut();
        let Some(listener) = producers.checkers.get(&group).cloned() else {
            debug!(addr = %request.addr, group = %group, "check-back for a producer group this client does not have");
            return;
        };
        let now = Instant::now();
        producers
            .check_origins
            .retain(|_, (_, asked)| now.duration_since(*asked) < CHECK_ORIGIN_TTL);
        producers.check_origins.insert(
            (broker_name.clone(), commit_log_offset),
            (request.addr.clone(), now),
        );
        listener
    };
    listener.check_transaction_state(TransactionCheck {
        producer_group: group,
        broker_name,
        tran_state_table_offset,
        commit_log_offset,
        offset_msg_id: header
            .offset_msg_id
            .unwrap_or_else(|| message.offset_msg_id()),
        msg_id: header.msg_id.or(header.transaction_id),
        message,
    });
}

/// PUSH_REPLY_MESSAGE_TO_CLIENT (326) of a reply no request of this client waits for (it timed
/// out, or was never sent): SYSTEM_ERROR naming the correlation id, which the broker passes on
/// to the replier (a Java client answers SUCCESS and drops such a reply).
pub(super) fn reply_push_answer(request: &RemotingCommand) -> RemotingCommand {
    let correlation_id = request
        .ext("properties")
        .and_then(|p| property(p, CORRELATION_ID))
        .unwrap_or("none");
    RemotingCommand::response_to(
        request,
        code::SYSTEM_ERROR,
        Some(format!(
            "no request waits for this reply (CORRELATION_ID {correlation_id})"
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_push_is_refused_with_its_correlation_id() {
        let push = RemotingCommand::new_request(rc::PUSH_REPLY_MESSAGE_TO_CLIENT).with_ext(
            "properties",
            "CORRELATION_ID\u{1}c-42\u{2}MSG_TYPE\u{1}reply\u{2}",
        );
        let answer = reply_push_answer(&push);
        assert!(answer.is_response());
        assert_eq!(answer.opaque, push.opaque);
        assert_eq!(answer.code, code::SYSTEM_ERROR);
        let remark = answer.remark.unwrap_or_default();
        assert!(remark.contains("c-42"), "{remark}");
    }
}
