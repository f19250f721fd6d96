//! Transactional messages over the wire: END_TRANSACTION (37) from producers, and
//! CHECK_TRANSACTION_STATE (39), pushed oneway on a producer's connection (§3.14).

use std::sync::Arc;

use tracing::{debug, warn};

use skiff_actors::broker::transaction::EndOutcome;
use skiff_actors::broker_api::{
    EndTransactionRequest, TransactionCheck, TransactionCheckListener, TransactionResolution,
};
use skiff_actors::refused::Refused;
use skiff_storage::message::{encode_record, MessageToAppend, StoredMessage};

use super::refusal::refusal_answer;
use super::{broker_failure, success, Failure, Outcome, Processor};
use crate::remoting::codes::{request as rc, response as code};
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    CheckTransactionStateRequestHeader, CustomHeader, EndTransactionRequestHeader,
};
use crate::remoting::server::{ConnectionHandle, ConnectionId};

/// Asks the producers of one connection about a pending half (code 39, oneway, as Java sends it).
pub(super) struct ConnectionChecker {
    pub(super) conn: ConnectionHandle,
}

impl TransactionCheckListener for ConnectionChecker {
    fn connection(&self) -> ConnectionId {
        self.conn.id()
    }

    fn check_transaction_state(&self, check: TransactionCheck) {
        let request = match check_request(&check) {
            Ok(request) => request,
            Err(e) => {
                warn!(error = %e, offset = check.commit_log_offset, "check request not encodable");
                return;
            }
        };
        if let Err(e) = self.conn.try_send(request) {
            debug!(conn = %self.conn.id(), group = %check.producer_group, error = %e, "transaction check not sent");
        }
    }
}

/// The CHECK_TRANSACTION_STATE request of a check: the half's offsets and ids in the header, the
/// half (real topic and queue) encoded as a stored record in the body (Java's
/// `MessageDecoder.encode`), which the client decodes with `MessageDecoder.decode`.
pub fn check_request(
    check: &TransactionCheck,
) -> Result<RemotingCommand, skiff_storage::message::MessageEncodeError> {
    let header = CheckTransactionStateRequestHeader {
        topic: Some(check.message.topic.clone()),
        tran_state_table_offset: i64::try_from(check.tran_state_table_offset).unwrap_or(i64::MAX),
        commit_log_offset: i64::try_from(check.commit_log_offset).unwrap_or(i64::MAX),
        msg_id: check.msg_id.clone(),
        transaction_id: check.msg_id.clone(),
        offset_msg_id: Some(check.offset_msg_id.clone()),
        broker_name: Some(check.broker_name.clone()),
    };
    let body = encode_stored(&check.message)?;
    Ok(RemotingCommand::new_request(rc::CHECK_TRANSACTION_STATE)
        .oneway()
        .with_ext_fields(header.to_ext())
        .with_body(body))
}

fn encode_stored(
    message: &StoredMessage,
) -> Result<Vec<u8>, skiff_storage::message::MessageEncodeError> {
    let to_encode = MessageToAppend::copy_of(message);
    let mut out = Vec::with_capacity(message.stored_size as usize + 64);
    encode_record(
        &to_encode,
        message.queue_offset,
        message.physical_offset,
        message.store_timestamp,
        message.store_host,
        &mut out,
    )?;
    Ok(out)
}

impl Processor {
    /// Registers the producer groups of a heartbeat for check-backs on this connection.
    pub(super) fn register_producers<'a>(
        &self,
        conn: &ConnectionHandle,
        client_id: &str,
        groups: impl Iterator<Item = &'a str>,
    ) {
        let checker: Arc<dyn TransactionCheckListener> =
            Arc::new(ConnectionChecker { conn: conn.clone() });
        for group in groups.map(str::trim).filter(|g| !g.is_empty()) {
            self.broker
                .connections()
                .register_producer(group, client_id, checker.clone());
        }
    }

    /// END_TRANSACTION (37). Usually oneway; a request that wants an answer gets Java's codes.
    pub(super) async fn end_transaction(&self, request: &RemotingCommand) -> Outcome {
        let header = EndTransactionRequestHeader::from_command(request)?;
        let Some(resolution) = TransactionResolution::from_wire(header.commit_or_rollback) else {
            // Java returns null and answers nothing, leaving a two-way caller to time out;
            // skiff says why at once (a oneway request, the usual case, gets nothing either way).
            debug!(
                value = header.commit_or_rollback,
                "end transaction with an unknown type ignored"
            );
            return Err(Failure::new(code::SYSTEM_ERROR, "unknown commitOrRollback"));
        };
        let (Ok(tran_state_table_offset), Ok(commit_log_offset)) = (
            u64::try_from(header.tran_state_table_offset),
            u64::try_from(header.commit_log_offset),
        ) else {
            return Err(Failure::system("Find prepared transaction message failed"));
        };
        let ended = self
            .broker
            .end_transaction(EndTransactionRequest {
                producer_group: header.producer_group,
                tran_state_table_offset,
                commit_log_offset,
                resolution,
                from_transaction_check: header.from_transaction_check,
                msg_id: header.msg_id,
                transaction_id: header.transaction_id,
                broker_name: header.broker_name.unwrap_or_default(),
            })
            .await
            .map_err(broker_failure)?;
        match ended.outcome {
            EndOutcome::LeftPending
            | EndOutcome::Committed
            | EndOutcome::RolledBack
            | EndOutcome::AlreadyResolved(_) => Ok(success()),
            EndOutcome::Refused(reason) => Err(refusal_answer(
                &Refused::EndTransaction {
                    commit_log_offset,
                    reason,
                },
                Some(rc::END_TRANSACTION),
            )),
        }
    }
}
