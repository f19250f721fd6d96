//! SendMessage and EndTransaction. A send is the broker's [`ClientSend`]: the broker checks it
//! and picks its queue (a FIFO message's group hashed as the proxy hashes it, else any queue);
//! the door checks only what the gRPC wire adds, the message types a topic takes.

use skiff_actors::broker::ClientSend;
use skiff_actors::broker_api::{Answer, EndTransactionRequest, SendResult, SendStatus};
use skiff_actors::logic::sends::QueueChoice;
use skiff_actors::logic::transaction::TransactionResolution;
use skiff_storage::metadata::TopicMessageType;

use super::route::accepted_types;
use super::{bad_request, Caller, GrpcService};
use crate::acl::rules;
use crate::grpc::convert::{self, message_to_append};
use crate::grpc::pb::{self, Code};
use crate::grpc::resource;
use crate::grpc::status::{ok, status};
use crate::grpc::transaction_id::TransactionId;

impl GrpcService {
    /// SendMessage: the request's messages, of one topic, stored as one send (a batch when
    /// there are several, as the proxy sends them to its broker).
    pub(super) async fn send(
        &self,
        caller: Caller,
        request: pb::SendMessageRequest,
    ) -> Result<pb::SendMessageResponse, pb::Status> {
        let Some(first) = request.messages.first() else {
            return Err(bad_request("no message to send"));
        };
        let Some(topic) = first.topic.clone() else {
            return Err(status(Code::IllegalTopic, "the message names no topic"));
        };
        let stored_topic = resource::stored(&topic);
        let checks = request
            .messages
            .iter()
            .filter_map(|m| m.topic.as_ref())
            .flat_map(|t| rules::send_checks(&resource::stored(t), ""))
            .collect();
        caller.authorize(checks)?;
        // One queue per request, as the proxy picks it: the message group's for a single FIFO
        // message, else any.
        let queue = (request.messages.len() == 1)
            .then(|| first.system_properties.as_ref()?.message_group.clone())
            .flatten()
            .filter(|g| !g.is_empty())
            .map_or(QueueChoice::Random, QueueChoice::ByKey);
        let mut messages = Vec::with_capacity(request.messages.len());
        let mut types = Vec::with_capacity(request.messages.len());
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
                return Err(status(s.code(), s.to_string()));
            }
            // The broker chooses the queue.
            let append = message_to_append(
                message,
                &stored_topic,
                0,
                caller.peer,
                self.config.max_body_size,
            )
            .map_err(|e| status(e.code(), e.to_string()))?;
            messages.push(append);
            types.push(
                message
                    .system_properties
                    .as_ref()
                    .map_or(pb::MessageType::Normal as i32, |s| s.message_type),
            );
        }
        let batch = messages.len() > 1;
        let message_types = types.clone();
        let results = self
            .broker(move |broker| async move {
                let topic_type = broker.topic(&stored_topic)?.and_then(|t| t.message_type);
                if let Some(refused) = type_conflict(topic_type, &message_types) {
                    return Ok(Err(refused));
                }
                let send = ClientSend {
                    messages,
                    queue,
                    batch,
                    auto_create_queue_nums: None,
                };
                broker.send(send).await.map(Ok)
            })
            .await??;
        let entries: Vec<pb::SendResultEntry> = results
            .iter()
            .zip(&request.messages)
            .zip(types)
            .map(|((result, message), message_type)| {
                let message_id = message
                    .system_properties
                    .as_ref()
                    .map(|s| s.message_id.clone())
                    .unwrap_or_default();
                send_entry(
                    result,
                    message_id,
                    message_type == pb::MessageType::Transaction as i32,
                )
            })
            .collect();
        Ok(pb::SendMessageResponse {
            status: Some(overall(entries.iter().filter_map(|e| e.status.clone()))),
            entries,
        })
    }

    /// RecallMessage: the broker's one recall (the remoting door's RECALL_MESSAGE).
    pub(super) async fn recall(
        &self,
        caller: Caller,
        request: pb::RecallMessageRequest,
    ) -> Result<pb::RecallMessageResponse, pb::Status> {
        let stored_topic = published_topic(&caller, request.topic.as_ref())?;
        let handle = request.recall_handle;
        let message_id = self
            .broker(move |broker| async move { broker.recall(&stored_topic, &handle).await })
            .await?;
        Ok(pb::RecallMessageResponse {
            status: Some(ok()),
            message_id,
        })
    }

    /// EndTransaction: commits or rolls back the half its transaction id names.
    pub(super) async fn end(
        &self,
        caller: Caller,
        request: pb::EndTransactionRequest,
    ) -> Result<pb::EndTransactionResponse, pb::Status> {
        let stored_topic = published_topic(&caller, request.topic.as_ref())?;
        let id = TransactionId::parse(&request.transaction_id)
            .map_err(|e| status(Code::InvalidTransactionId, e.to_string()))?;
        let resolution = match pb::TransactionResolution::try_from(request.resolution) {
            Ok(pb::TransactionResolution::Commit) => TransactionResolution::Commit,
            Ok(pb::TransactionResolution::Rollback) => TransactionResolution::Rollback,
            _ => {
                return Err(bad_request(format!(
                    "transaction resolution {} is neither COMMIT nor ROLLBACK",
                    request.resolution
                )))
            }
        };
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
        self.broker(move |broker| async move {
            Answer::<()>::answer(broker.end_transaction(end).await?)
        })
        .await?;
        Ok(pb::EndTransactionResponse { status: Some(ok()) })
    }
}

/// The refusal of messages whose types the topic does not take: an explicitly typed topic takes
/// only its type, as the proxy checks it.
fn type_conflict(
    topic_type: Option<TopicMessageType>,
    message_types: &[i32],
) -> Option<pb::Status> {
    let accepted = accepted_types(topic_type);
    let wrong = message_types.iter().find(|t| !accepted.contains(t))?;
    Some(status(
        Code::MessagePropertyConflictWithType,
        format!(
            "current message type {} does not match the topic's accepted message types {:?}",
            pb::MessageType::try_from(*wrong).map_or("UNKNOWN", |t| t.as_str_name()),
            topic_type.map_or("any", TopicMessageType::as_str),
        ),
    ))
}

/// The topic a producer's request (a recall, a transaction's end) names, stored form, once the
/// caller may publish to it.
fn published_topic(caller: &Caller, topic: Option<&pb::Resource>) -> Result<String, pb::Status> {
    let Some(topic) = topic else {
        return Err(status(Code::IllegalTopic, "the request names no topic"));
    };
    let stored_topic = resource::stored(topic);
    caller.authorize(rules::send_checks(&stored_topic, ""))?;
    Ok(stored_topic)
}

/// One message's send entry.
fn send_entry(result: &SendResult, message_id: String, transactional: bool) -> pb::SendResultEntry {
    match stored_but_not(result.status) {
        // As the Apache proxy answers a stored message its broker could not make as durable as
        // configured in time: the entry's status only.
        Some(code) => pb::SendResultEntry {
            status: Some(status(
                code,
                format!("send message failed, sendStatus={}", result.status.name()),
            )),
            ..pb::SendResultEntry::default()
        },
        None => pb::SendResultEntry {
            status: Some(ok()),
            message_id,
            transaction_id: if transactional {
                TransactionId {
                    commit_log_offset: result.physical_offset,
                    tran_state_table_offset: result.queue_offset,
                }
                .to_string()
            } else {
                String::new()
            },
            offset: i64::try_from(result.queue_offset).unwrap_or(i64::MAX),
            recall_handle: result.recall_handle.clone().unwrap_or_default(),
        },
    }
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
pub(super) fn overall(statuses: impl IntoIterator<Item = pb::Status>) -> pb::Status {
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
