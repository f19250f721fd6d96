//! Consumer requests: pulls (long polling included), consumer offsets, queue offsets,
//! heartbeats and unregistration, the group's member list, send-back, queue locks and the
//! client config check.

use skiff_actors::broker::connections::ClientDescription;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tracing::{debug, warn};

use skiff_actors::broker_api::ExpressionType;
use skiff_actors::broker_api::{
    ConsumerHeartbeat, ConsumerNotifier, OffsetMoved, OffsetUpdate, PullRequest, PullResponse,
    PullStatus, QueryOffsetRequest, SendBackRequest, SubscriptionEntry,
};
use skiff_actors::logic::queue::MessageQueue;
use skiff_actors::logic::sql92::{Selector, Sql92Error};

use super::{
    body_failure, broker_failure, ext, failure_to, queue_index, success, ConnectionNotifier,
    Failure, Outcome, Processor,
};
use crate::remoting::body::{
    self, ConsumerListBody, HeartbeatData, JsonBody, LockBatchRequestBody, LockBatchResponseBody,
    MessageQueue as WireQueue, UnlockBatchRequestBody,
};
use crate::remoting::codes::{request as rc, response as code};
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    ConsumerSendMsgBackRequestHeader, CustomHeader, GetConsumerListByGroupRequestHeader,
    GetEarliestMsgStoretimeRequestHeader, GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader, OffsetResponseHeader,
    PullMessageRequestHeader, PullMessageResponseHeader, QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader, UnregisterClientRequestHeader, UpdateConsumerOffsetRequestHeader,
};
use crate::remoting::server::ConnectionHandle;
use crate::remoting::wire::{clamp_i64, pull_status_answer};

impl Processor {
    /// PULL_MESSAGE (11), long polling included.
    pub(super) async fn pull(&self, request: &RemotingCommand) -> Outcome {
        let header = PullMessageRequestHeader::from_command(request)?;
        let queue_id = queue_index(header.queue_id, &header.topic)?;
        let kind = header.expression_type_or_tag();
        let Some(expression_type) = ExpressionType::from_wire(kind) else {
            return Err(Failure::new(
                code::SUBSCRIPTION_PARSE_FAILED,
                format!(
                    "parse the consumer's subscription failed: unsupported expression type {kind}"
                ),
            ));
        };
        let subscription = if header.has_subscription() {
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
            let min = self.broker.reader().min_offset(&header.topic, queue_id);
            return Ok(pull_response(PullResponse {
                status: PullStatus::OffsetMoved(OffsetMoved::TooSmall),
                next_begin_offset: min,
                min_offset: min,
                max_offset: self.broker.reader().max_offset(&header.topic, queue_id),
                records: Bytes::new(),
            }));
        };
        let pull = PullRequest {
            group: header.consumer_group.clone(),
            topic: header.topic.clone(),
            broker_name: self.broker.config().broker_name.clone(),
            queue_id,
            queue_offset,
            max_messages: u32::try_from(header.max_msg_nums).unwrap_or(1).max(1),
            commit_offset: if header.has_commit_offset() {
                u64::try_from(header.commit_offset).ok()
            } else {
                None
            },
            suspend_timeout: header.has_suspend().then(|| {
                Duration::from_millis(u64::try_from(header.suspend_timeout_millis).unwrap_or(0))
            }),
            subscription,
            expression_type,
        };
        let response = self.broker.pull(pull).await.map_err(broker_failure)?;
        Ok(pull_response(response))
    }

    /// QUERY_CONSUMER_OFFSET (14).
    pub(super) async fn query_offset(&self, request: &RemotingCommand) -> Outcome {
        let header = QueryConsumerOffsetRequestHeader::from_command(request)?;
        let queue_id = queue_index(header.queue_id, &header.topic)?;
        // Unset reads as true, as Java's processor does.
        let set_zero = header.set_zero_if_not_found.unwrap_or(true);
        let queue = MessageQueue::new(&header.topic, &self.broker.config().broker_name, queue_id);
        let found = self
            .broker
            .query_offset(QueryOffsetRequest {
                group: header.consumer_group.clone(),
                queue,
                set_zero_if_not_found: set_zero,
            })
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
    pub(super) async fn update_offset(&self, request: &RemotingCommand) -> Outcome {
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
        let queue = MessageQueue::new(topic, &self.broker.config().broker_name, queue_id);
        self.broker
            .update_offset(
                header.consumer_group.clone(),
                queue,
                offset,
                OffsetUpdate::Acknowledged,
            )
            .await
            .map_err(failure_to(rc::UPDATE_CONSUMER_OFFSET))?;
        Ok(success())
    }

    /// GET_MAX_OFFSET (30).
    pub(super) fn max_offset(&self, request: &RemotingCommand) -> Outcome {
        let header = GetMaxOffsetRequestHeader::from_command(request)?;
        let queue_id = queue_index(header.queue_id, &header.topic)?;
        let offset = self.broker.reader().max_offset(&header.topic, queue_id);
        Ok(offset_answer(offset))
    }

    /// GET_MIN_OFFSET (31).
    pub(super) fn min_offset(&self, request: &RemotingCommand) -> Outcome {
        let header = GetMinOffsetRequestHeader::from_command(request)?;
        let queue_id = queue_index(header.queue_id, &header.topic)?;
        let offset = self.broker.reader().min_offset(&header.topic, queue_id);
        Ok(offset_answer(offset))
    }

    /// SEARCH_OFFSET_BY_TIMESTAMP (29).
    pub(super) fn search_offset(&self, request: &RemotingCommand) -> Outcome {
        let header = SearchOffsetRequestHeader::from_command(request)?;
        let queue_id = queue_index(header.queue_id, &header.topic)?;
        let offset = self
            .broker
            .reader()
            .search_offset_by_timestamp(
                &header.topic,
                queue_id,
                header.timestamp,
                header.boundary_type.into(),
            )
            .map_err(|e| broker_failure(e.into()))?;
        Ok(offset_answer(offset))
    }

    /// GET_EARLIEST_MSG_STORETIME (32): the store time of the queue's first message, -1 when it
    /// has none, as Java's `getEarliestMessageTime`.
    pub(super) fn earliest_store_time(&self, request: &RemotingCommand) -> Outcome {
        let header = GetEarliestMsgStoretimeRequestHeader::from_command(request)?;
        let queue_id = queue_index(header.queue_id, &header.topic)?;
        let reader = self.broker.reader();
        let first = reader.min_offset(&header.topic, queue_id);
        let timestamp = reader
            .store_timestamp_at(&header.topic, queue_id, first)
            .map_err(|e| broker_failure(e.into()))?
            .unwrap_or(-1);
        Ok(success().with_ext_fields(GetEarliestMsgStoretimeResponseHeader { timestamp }.to_ext()))
    }

    /// HEART_BEAT (34): registers every consumer of the body with this connection's notifier.
    pub(super) async fn heartbeat(
        &self,
        conn: &ConnectionHandle,
        request: &RemotingCommand,
    ) -> Outcome {
        let data = HeartbeatData::decode(&request.body).map_err(body_failure)?;
        let v2 = data.heartbeat_fingerprint != 0;
        // Java's V1 path always answers true; V2 tells whether the fingerprint changed.
        let mut sub_change = !v2;
        if conn.is_closed() {
            // A closed connection has no one to register.
            return Ok(heartbeat_answer(sub_change));
        }
        // What the client says of itself, for admin listings and the console's overview (gRPC
        // clients describe themselves in their settings).
        self.broker.connections().describe(
            conn.id(),
            ClientDescription {
                client_id: data.client_id.clone(),
                address: conn.peer_addr().to_string(),
                language: request.language.clone(),
                version: crate::remoting::codes::version::desc(request.version),
                version_code: request.version,
                protocol: "remoting",
            },
        );
        if !data.producer_data_set.is_empty() || !data.consumer_data_set.is_empty() {
            self.clients.borrow_mut().register(conn.id(), conn.clone());
        }
        self.register_producers(
            conn,
            &data.client_id,
            data.producer_data_set.iter().map(|p| p.group_name.as_str()),
        );
        if data.consumer_data_set.is_empty() {
            if conn.is_closed() {
                // Closed while registering: the close may already have cleared the table.
                self.connection_closed(conn.id()).await;
            }
            return Ok(heartbeat_answer(sub_change));
        }
        let notifier: Arc<dyn ConsumerNotifier> =
            Arc::new(ConnectionNotifier { conn: conn.clone() });
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
            let subscriptions = if v2 && data.without_sub {
                let known =
                    self.broker
                        .connections()
                        .subscriptions(conn.id(), group, &data.client_id);
                match known {
                    Some(subscriptions) => subscriptions,
                    None => {
                        // Unknown here (a new connection or a restarted broker): keep the
                        // member alive and ask for the full set.
                        sub_change = true;
                        Vec::new()
                    }
                }
            } else {
                consumer
                    .subscription_data_set
                    .iter()
                    .filter(|s| !s.topic.is_empty())
                    .map(|s| {
                        let expression_type = ExpressionType::from_wire(&s.expression_type)
                            .unwrap_or_else(|| {
                                warn!(group, topic = %s.topic, expression_type = %s.expression_type, "subscription filter type not supported, treated as a tag expression");
                                ExpressionType::Tag
                            });
                        SubscriptionEntry {
                            topic: s.topic.clone(),
                            expression_type,
                            expression: if s.sub_string.trim().is_empty() {
                                "*".to_owned()
                            } else {
                                s.sub_string.clone()
                            },
                            sub_version: s.sub_version,
                        }
                    })
                    .collect::<Vec<_>>()
            };
            let heartbeat = ConsumerHeartbeat {
                client_id: data.client_id.clone(),
                group: group.to_owned(),
                consume_type: consumer.consume_type.into(),
                message_model: consumer.message_model.into(),
                consume_from_where: consumer.consume_from_where.name().to_owned(),
                subscriptions,
            };
            self.broker
                .heartbeat(heartbeat, notifier.clone())
                .await
                .map_err(broker_failure)?;
        }
        if conn.is_closed() {
            // Closed while registering: the close may have been handled before the
            // registration landed, so release again.
            self.connection_closed(conn.id()).await;
        }
        Ok(heartbeat_answer(sub_change))
    }

    /// UNREGISTER_CLIENT (35).
    pub(super) async fn unregister(&self, request: &RemotingCommand) -> Outcome {
        let header = UnregisterClientRequestHeader::from_command(request)?;
        if let Some(group) = header.consumer_group.as_deref().filter(|g| !g.is_empty()) {
            let removed = self
                .broker
                .unregister(header.client_id.clone(), group.to_owned())
                .await
                .map_err(broker_failure)?;
            debug!(group, client_id = %header.client_id, removed, "client unregistered");
        }
        if let Some(group) = header.producer_group.as_deref().filter(|g| !g.is_empty()) {
            self.broker
                .unregister_producer(&header.client_id, Some(group));
        }
        Ok(success())
    }

    /// GET_CONSUMER_LIST_BY_GROUP (38).
    pub(super) async fn consumer_list(&self, request: &RemotingCommand) -> Outcome {
        let header = GetConsumerListByGroupRequestHeader::from_command(request)?;
        let ids = self
            .broker
            .consumer_list(header.consumer_group.clone())
            .await
            .map_err(broker_failure)?;
        let body = ConsumerListBody {
            consumer_id_list: ids,
        };
        Ok(success().with_body(body.encode()))
    }

    /// CONSUMER_SEND_MSG_BACK (36).
    pub(super) async fn send_back(&self, request: &RemotingCommand) -> Outcome {
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
            broker_name: None,
        };
        let outcome = self
            .broker
            .send_back(back)
            .await
            .map_err(failure_to(rc::CONSUMER_SEND_MSG_BACK))?;
        debug!(group = %header.group, offset = physical_offset, outcome = ?outcome, "message sent back");
        Ok(success())
    }

    /// LOCK_BATCH_MQ (41).
    pub(super) async fn lock(&self, request: &RemotingCommand) -> Outcome {
        let body = LockBatchRequestBody::decode(&request.body).map_err(body_failure)?;
        let queues = queues_of(&body.mq_set);
        let locked = self
            .broker
            .lock_queues(body.consumer_group.clone(), body.client_id.clone(), queues)
            .await
            .map_err(broker_failure)?;
        let answer = LockBatchResponseBody {
            lock_ok_mq_set: locked.iter().map(WireQueue::from).collect(),
        };
        Ok(success().with_body(answer.encode()))
    }

    /// UNLOCK_BATCH_MQ (42).
    pub(super) async fn unlock(&self, request: &RemotingCommand) -> Outcome {
        let body = UnlockBatchRequestBody::decode(&request.body).map_err(body_failure)?;
        let queues = queues_of(&body.mq_set);
        self.broker
            .unlock_queues(body.consumer_group.clone(), body.client_id.clone(), queues)
            .await
            .map_err(broker_failure)?;
        Ok(success())
    }
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

/// CHECK_CLIENT_CONFIG (46), which the Java client sends at start for every non-TAG
/// subscription: TAG always passes; a SQL92 expression is compiled and, if it does not parse,
/// answered SUBSCRIPTION_PARSE_FAILED naming the error (Java's broker with
/// `enablePropertyFilter=true`, which skiff always behaves as).
pub(super) fn check_client_config(request: &RemotingCommand) -> Outcome {
    if request.body.is_empty() {
        return Ok(success());
    }
    let text = String::from_utf8_lossy(&request.body);
    let value: Value = serde_json::from_str(&body::normalize_fastjson(&text))
        .map_err(|e| Failure::system(format!("CheckClientRequestBody is invalid: {e}")))?;
    let Some(subscription) = value.get("subscriptionData").filter(|s| !s.is_null()) else {
        return Ok(success());
    };
    let kind = subscription
        .get("expressionType")
        .and_then(Value::as_str)
        .unwrap_or("TAG");
    let expression = subscription
        .get("subString")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match ExpressionType::from_wire(kind) {
        Some(ExpressionType::Tag) => Ok(success()),
        Some(ExpressionType::Sql92) => match Selector::parse(expression) {
            Ok(_) => Ok(success()),
            Err(error) => {
                let group = value
                    .get("group")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                warn!(group, expression, %error, "client config refused: sql92 expression does not parse");
                Err(Failure::new(
                    code::SUBSCRIPTION_PARSE_FAILED,
                    sql92_parse_remark(expression, &error),
                ))
            }
        },
        None => Err(Failure::new(
            code::SUBSCRIPTION_PARSE_FAILED,
            format!("unsupported expression type {kind}"),
        )),
    }
}

/// The remark of a SUBSCRIPTION_PARSE_FAILED answer: the expression and what is wrong with it.
pub(super) fn sql92_parse_remark(expression: &str, error: &Sql92Error) -> String {
    format!("Invalid MessageSelector {expression:?}: {error}")
}

/// The queues a lock body names; entries with a negative queue id name none and are skipped.
fn queues_of(queues: &[WireQueue]) -> Vec<MessageQueue> {
    queues
        .iter()
        .filter_map(|q| MessageQueue::try_from(q).ok())
        .collect()
}

/// The pull answer: code, `GetMessageStatus` name as remark, header, and the records on FOUND.
fn pull_response(response: PullResponse) -> RemotingCommand {
    let PullResponse {
        status,
        next_begin_offset,
        min_offset,
        max_offset,
        records,
    } = response;
    let (answer, remark) = pull_status_answer(status);
    let header = PullMessageResponseHeader {
        suggest_which_broker_id: 0,
        next_begin_offset: clamp_i64(next_begin_offset),
        min_offset: clamp_i64(min_offset),
        max_offset: clamp_i64(max_offset),
        offset_delta: None,
        topic_sys_flag: Some(0),
        group_sys_flag: Some(0),
        forbidden_type: None,
    };
    let command = RemotingCommand::new_response(answer, Some(remark.to_owned()))
        .with_ext_fields(header.to_ext());
    if status == PullStatus::Found {
        command.with_body(records)
    } else {
        command
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: PullStatus, next: u64, min: u64, max: u64) -> RemotingCommand {
        pull_response(PullResponse {
            status,
            next_begin_offset: next,
            min_offset: min,
            max_offset: max,
            records: Bytes::from_static(b"records"),
        })
    }

    #[test]
    fn pull_remarks_name_the_status_the_broker_carried() {
        use skiff_actors::broker_api::NoNewMessage;
        let remark = |c: RemotingCommand| (c.code, c.remark.unwrap_or_default());
        assert_eq!(
            remark(answer(
                PullStatus::NoNewMessage(NoNewMessage::CaughtUp),
                5,
                0,
                5
            )),
            (19, "OFFSET_OVERFLOW_ONE".to_owned())
        );
        assert_eq!(
            remark(answer(
                PullStatus::NoNewMessage(NoNewMessage::EmptyQueue),
                0,
                0,
                0
            )),
            (19, "NO_MESSAGE_IN_QUEUE".to_owned())
        );
        assert_eq!(
            remark(answer(
                PullStatus::OffsetMoved(OffsetMoved::OverflowBadly),
                5,
                0,
                5
            )),
            (21, "OFFSET_OVERFLOW_BADLY".to_owned())
        );
        // A pending reset says so whatever the requested offset was.
        assert_eq!(
            remark(answer(
                PullStatus::OffsetMoved(OffsetMoved::PendingReset),
                0,
                0,
                5
            )),
            (21, "OFFSET_RESET".to_owned())
        );
        let moved = answer(PullStatus::OffsetMoved(OffsetMoved::OverflowBadly), 5, 0, 5);
        assert_eq!(moved.ext("nextBeginOffset"), Some("5"));
        assert_eq!(moved.ext("suggestWhichBrokerId"), Some("0"));
        assert_eq!(moved.ext("maxOffset"), Some("5"));
        assert!(moved.body.is_empty(), "only FOUND carries the records");
        let found = answer(PullStatus::Found, 3, 0, 5);
        assert_eq!(
            (found.code, found.remark.as_deref(), &found.body[..]),
            (0, Some("FOUND"), &b"records"[..])
        );
    }
}
