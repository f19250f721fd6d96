//! Pop consumption (`docs/wire-protocol.md` §4.6): POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE,
//! CHANGE_MESSAGE_INVISIBLETIME, NOTIFICATION, and the broker-side assignment a Java push
//! consumer with `setClientRebalance(false)` asks for (QUERY_ASSIGNMENT, SET_MESSAGE_REQUEST_MODE).
//! Codes and remarks are those of Java's pop processors.

use std::time::Duration;

use skiff_actors::broker::{AckRequest, ExpiredReceipt, PopRequest, PoppedAck};
use skiff_actors::broker_api::ExpressionType;
use skiff_actors::logic::pop::{PopMode, Receipt, TopicKind, MAX_POP_MESSAGES};
use skiff_storage::pop_state::RequestModeEntry;

use super::{
    body_failure, broker_failure, code, failure_to, rc, success, Failure, Outcome, Processor,
};
use crate::remoting::body::{
    BatchAckBody, JsonBody, MessageModel, MessageQueue, MessageRequestMode, QueryAssignmentBody,
    QueryAssignmentResponseBody, QueueAssignment, SetMessageRequestModeBody,
};
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    AckMessageRequestHeader, ChangeInvisibleTimeResponseHeader, CustomHeader, HeaderError,
    NotificationRequestHeader, NotificationResponseHeader, PopMessageRequestHeader,
    PopMessageResponseHeader, INIT_MODE_MIN,
};

fn receipt_failure(e: skiff_actors::logic::pop::InvalidReceipt) -> Failure {
    Failure::system(e.to_string())
}

/// What an ACK_MESSAGE or CHANGE_MESSAGE_INVISIBLETIME header names, for the broker to check.
/// Java's broker takes an acknowledgement of an expired receipt, so remoting does too.
fn acked(header: &AckMessageRequestHeader) -> Result<AckRequest, Failure> {
    Ok(AckRequest {
        group: header.consumer_group.clone(),
        topic: header.topic.clone(),
        queue_id: header.queue_id,
        offset: header.offset,
        receipt: Receipt::parse(&header.extra_info).map_err(receipt_failure)?,
        expired: ExpiredReceipt::Accept,
    })
}

impl Processor {
    /// POP_MESSAGE (200050).
    pub(super) async fn pop(&self, request: &RemotingCommand) -> Outcome {
        let header = PopMessageRequestHeader::from_command(request)?;
        if header.max_msg_nums > MAX_POP_MESSAGES {
            return Err(Failure::new(
                code::INVALID_PARAMETER,
                format!(
                    "the broker[{}] pop message's num is greater than {MAX_POP_MESSAGES}",
                    self.broker.config().listen_addr
                ),
            ));
        }
        let kind = header.exp_type.as_deref().unwrap_or("TAG");
        let Some(expression_type) = ExpressionType::from_wire(kind) else {
            return Err(Failure::new(
                code::SUBSCRIPTION_PARSE_FAILED,
                "parse the consumer's subscription failed",
            ));
        };
        let pop = PopRequest {
            group: header.consumer_group.clone(),
            topic: header.topic.clone(),
            queue_id: u32::try_from(header.queue_id).ok(),
            max_messages: u32::try_from(header.max_msg_nums).unwrap_or(1).max(1),
            invisible_ms: header.invisible_time.max(0),
            poll: Duration::from_millis(u64::try_from(header.poll_time).unwrap_or(0)),
            from_min: header.init_mode == INIT_MODE_MIN,
            expression_type,
            expression: header.exp.clone().filter(|e| !e.trim().is_empty()),
            orderly: header.order,
        };
        let answer = self
            .broker
            .pop(pop)
            .await
            .map_err(failure_to(rc::POP_MESSAGE))?;
        let found = answer.message_count > 0;
        let response_header = PopMessageResponseHeader {
            pop_time: answer.pop_time_ms,
            invisible_time: answer.invisible_ms,
            revive_qid: answer.revive_queue_id,
            rest_num: i64::try_from(answer.rest).unwrap_or(i64::MAX),
            start_offset_info: answer.offset_info.start_offsets(),
            msg_offset_info: answer.offset_info.message_offsets(),
            order_count_info: header.order.then(|| answer.offset_info.order_counts()),
        };
        let (status, remark) = if found {
            (code::SUCCESS, "FOUND")
        } else {
            (code::POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE")
        };
        Ok(
            RemotingCommand::new_response(status, Some(remark.to_owned()))
                .with_ext_fields(response_header.to_ext())
                .with_body(answer.records),
        )
    }

    /// ACK_MESSAGE (200051).
    pub(super) async fn ack(&self, request: &RemotingCommand) -> Outcome {
        let header = AckMessageRequestHeader::from_command(request)?;
        self.broker
            .ack(acked(&header)?)
            .await
            .map_err(failure_to(rc::ACK_MESSAGE))?;
        Ok(success())
    }

    /// BATCH_ACK_MESSAGE (200151): each entry acknowledges the offsets its bits name; offsets
    /// outside the queue are skipped, as Java does.
    pub(super) async fn batch_ack(&self, request: &RemotingCommand) -> Outcome {
        let body = if request.body.is_empty() {
            BatchAckBody::default()
        } else {
            BatchAckBody::decode(&request.body).map_err(body_failure)?
        };
        if body.acks.is_empty() {
            return Err(Failure::new(code::NO_MESSAGE, "no ack in the batch"));
        }
        let mut acks = Vec::new();
        for ack in &body.acks {
            let Some(kind) = TopicKind::from_mark(&ack.retry) else {
                return Err(Failure::new(
                    code::MESSAGE_ILLEGAL,
                    format!("batch ack topic kind {:?} is not 0, 1 or 2", ack.retry),
                ));
            };
            let topic = kind.stored_topic(&ack.consumer_group, &ack.topic);
            let Ok(queue_id) = u32::try_from(ack.queue_id) else {
                continue;
            };
            let mode = PopMode::of_revive_queue(ack.revive_queue_id);
            let min = self.broker.reader().min_offset(&topic, queue_id);
            let max = self.broker.reader().max_offset(&topic, queue_id);
            for queue_offset in ack.offsets_within(min, max) {
                acks.push(PoppedAck {
                    group: ack.consumer_group.clone(),
                    topic: topic.clone(),
                    queue_id,
                    queue_offset,
                    pop_time_ms: ack.pop_time,
                    mode,
                });
            }
        }
        self.broker
            .ack_popped_all(acks)
            .await
            .map_err(broker_failure)?;
        Ok(success())
    }

    /// CHANGE_MESSAGE_INVISIBLETIME (200053): answers the new receipt's pop and invisible time.
    pub(super) async fn change_invisible_time(&self, request: &RemotingCommand) -> Outcome {
        let header = AckMessageRequestHeader::from_command(request)?;
        let invisible_ms = header.invisible_time.ok_or(HeaderError::Missing {
            field: "invisibleTime",
        })?;
        let changed = acked(&header)?;
        let revive_qid = changed.receipt.revive_queue_id;
        let (pop_time, invisible_time) = self
            .broker
            .change_invisible(changed, invisible_ms.max(0))
            .await
            .map_err(failure_to(rc::CHANGE_MESSAGE_INVISIBLETIME))?;
        let answer = ChangeInvisibleTimeResponseHeader {
            pop_time,
            invisible_time,
            revive_qid,
        };
        Ok(success().with_ext_fields(answer.to_ext()))
    }

    /// NOTIFICATION (200054): whether the group has something to pop.
    pub(super) async fn notification(&self, request: &RemotingCommand) -> Outcome {
        let header = NotificationRequestHeader::from_command(request)?;
        let has_msg = self
            .broker
            .pop_notification(
                &header.consumer_group,
                &header.topic,
                u32::try_from(header.queue_id).ok(),
                header.order,
                Duration::from_millis(u64::try_from(header.poll_time).unwrap_or(0)),
            )
            .await
            .map_err(failure_to(rc::NOTIFICATION))?;
        let answer = NotificationResponseHeader {
            has_msg,
            polling_full: false,
        };
        Ok(success().with_ext_fields(answer.to_ext()))
    }

    /// QUERY_ASSIGNMENT (400).
    pub(super) async fn query_assignment(&self, request: &RemotingCommand) -> Outcome {
        let body = QueryAssignmentBody::decode(&request.body).map_err(body_failure)?;
        let assignment = self
            .broker
            .query_assignment(
                &body.topic,
                &body.consumer_group,
                &body.client_id,
                &body.strategy_name,
                body.message_model == MessageModel::Broadcasting,
            )
            .await
            .map_err(broker_failure)?;
        let broker_name = &self.broker.config().broker_name;
        let answer = QueryAssignmentResponseBody {
            message_queue_assignments: assignment.map(|a| {
                let mode = MessageRequestMode::from(a.mode);
                a.queue_ids
                    .into_iter()
                    .map(|queue_id| QueueAssignment {
                        message_queue: MessageQueue {
                            topic: body.topic.clone(),
                            broker_name: broker_name.clone(),
                            queue_id: queue_id.and_then(|q| i32::try_from(q).ok()).unwrap_or(-1),
                        },
                        mode,
                    })
                    .collect()
            }),
        };
        Ok(success().with_body(answer.encode()))
    }

    /// SET_MESSAGE_REQUEST_MODE (401).
    pub(super) async fn set_request_mode(&self, request: &RemotingCommand) -> Outcome {
        let body = SetMessageRequestModeBody::decode(&request.body).map_err(body_failure)?;
        let entry = RequestModeEntry {
            mode: body.mode.into(),
            pop_share_queue_num: body.pop_share_queue_num,
        };
        self.broker
            .set_request_mode(&body.topic, &body.consumer_group, entry)
            .await
            .map_err(failure_to(rc::SET_MESSAGE_REQUEST_MODE))?;
        Ok(success())
    }
}
