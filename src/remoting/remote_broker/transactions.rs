//! Transactional producers over TCP: the producer groups that answer check-backs, the producer
//! heartbeat that tells a broker which connection reaches them, END_TRANSACTION, and the
//! broker's CHECK_TRANSACTION_STATE (39) handed to the group's checker.
//!
//! A broker sends a check-back on the connection a heartbeat naming the producer group came
//! over, so before a half goes to a broker the producer heartbeat is sent on the current
//! connection to it (again after a reconnect). END_TRANSACTION goes oneway, as Java's client
//! sends it (Java's broker answers nothing for UNKNOW): to the broker that stored the half, or
//! for a check-back's answer, to the broker that asked.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Weak;
use std::sync::Arc;

use tracing::{debug, warn};

use skiff_actors::broker_api::{
    BrokerError, EndTransactionRequest, RemoteError, TransactionCheck, TransactionCheckListener,
};
use skiff_actors::logic::transaction::PRODUCER_GROUP;
use skiff_storage::message::decode_record;

use super::RemoteBroker;
use crate::remoting::body::{HeartbeatData, JsonBody, ProducerData};
use crate::remoting::client::{ConnectionId, InboundRequest};
use crate::remoting::codes::request as rc;
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    CheckTransactionStateRequestHeader, CustomHeader, EndTransactionRequestHeader,
};

/// The transactional producers of this client.
#[derive(Default)]
pub(super) struct Producers {
    /// Producer group → its client id and checker.
    checkers: BTreeMap<String, (String, Arc<dyn TransactionCheckListener>)>,
    /// Broker address → the connection the producer heartbeat last went over.
    heartbeats: HashMap<String, ConnectionId>,
    /// A check-back's half (commit-log offset) → the address of the broker that asked.
    check_origins: HashMap<u64, String>,
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
            producers.checkers.insert(group, (client_id, listener));
            producers.heartbeats.clear();
        }
        for addr in self.inner.routes.known_addrs() {
            self.producer_heartbeat(&addr).await?;
        }
        Ok(())
    }

    /// Before a half goes to `addr`: the producer heartbeat on the current connection, unless
    /// it went over it already.
    pub(super) async fn producer_heartbeat_before_half(
        &self,
        addr: &str,
    ) -> Result<(), BrokerError> {
        let conn = self
            .inner
            .client
            .connection_to(addr, self.inner.config.rpc_timeout)
            .await
            .ok()
            .map(|c| c.id());
        let sent_on = self.inner.producers.borrow().heartbeats.get(addr).copied();
        if conn.is_some() && conn == sent_on {
            return Ok(());
        }
        self.producer_heartbeat(addr).await
    }

    async fn producer_heartbeat(&self, addr: &str) -> Result<(), BrokerError> {
        let body = {
            let producers = self.inner.producers.borrow();
            let Some((client_id, _)) = producers.checkers.values().next() else {
                return Ok(());
            };
            HeartbeatData {
                client_id: client_id.clone(),
                producer_data_set: producers
                    .checkers
                    .keys()
                    .map(|group| ProducerData {
                        group_name: group.clone(),
                    })
                    .collect(),
                ..HeartbeatData::default()
            }
            .encode()
        };
        let request = RemotingCommand::new_request(rc::HEART_BEAT).with_body(body);
        self.invoke_ok(addr, request).await?;
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
                .insert(addr.to_owned(), conn.id());
        }
        debug!(addr, "producer heartbeat sent");
        Ok(())
    }

    /// END_TRANSACTION, oneway: to the broker that asked (a check-back's answer) or the master
    /// of the broker that stored the half.
    pub(super) async fn end_transaction(
        &self,
        request: EndTransactionRequest,
    ) -> Result<(), BrokerError> {
        let origin = self
            .inner
            .producers
            .borrow_mut()
            .check_origins
            .remove(&request.commit_log_offset);
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
    let listener = {
        let mut producers = producers.borrow_mut();
        let Some((_, listener)) = producers.checkers.get(&group) else {
            debug!(addr = %request.addr, group = %group, "check-back for a producer group this client does not have");
            return;
        };
        let listener = listener.clone();
        producers
            .check_origins
            .insert(commit_log_offset, request.addr.clone());
        listener
    };
    listener.check_transaction_state(TransactionCheck {
        producer_group: group,
        broker_name: header.broker_name.unwrap_or_default(),
        tran_state_table_offset,
        commit_log_offset,
        offset_msg_id: header
            .offset_msg_id
            .unwrap_or_else(|| message.offset_msg_id()),
        msg_id: header.msg_id.or(header.transaction_id),
        message,
    });
}
