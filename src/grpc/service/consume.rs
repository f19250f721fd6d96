//! ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue:
//! pop consumption. The broker pops and judges every acknowledgement ([`AckRequest`]: topic,
//! queue, offset range, and the receipt's expiry by the broker's clock); the door keeps the
//! proxy's own rules: bounds on invisible and polling times, the batch size, and the
//! dead-letter rule on receive.

use std::time::Duration;

use skiff_actors::broker::{AckRequest, ExpiredReceipt, LitePop, PopRequest};
use skiff_actors::broker_api::{BrokerError, ExpressionType};
use skiff_actors::logic::delay::DEFAULT_MAX_RECONSUME_TIMES;
use skiff_actors::logic::lite::lmq_name;
use skiff_actors::logic::pop::{Receipt, MAX_POP_MESSAGES};
use skiff_storage::clock::epoch_millis;
use skiff_storage::message::decode_records;

use super::produce::overall;
use super::{bad_request, Caller, GrpcService};
use crate::acl::rules;
use crate::grpc::convert::{self, duration, duration_ms, message_from_stored};
use crate::grpc::pb::{self, Code};
use crate::grpc::resource;
use crate::grpc::status::{broker_status, ok, status};

/// Invisible times a receive may ask for (the proxy's bounds).
const MIN_INVISIBLE: Duration = Duration::from_secs(10);
const MAX_INVISIBLE: Duration = Duration::from_secs(12 * 60 * 60);
/// What an auto-renewed receive holds a message for; the client acknowledges or changes it.
const AUTO_RENEW_INVISIBLE: Duration = Duration::from_secs(60);
/// Long-poll bounds (the proxy's `grpcClientConsumer{Min,Max}LongPollingTimeoutMillis`).
pub(super) const MIN_LONG_POLL: Duration = Duration::from_secs(5);
pub(super) const MAX_LONG_POLL: Duration = Duration::from_secs(20);
/// What a receive keeps of its deadline to send its answer in.
const DEADLINE_MARGIN: Duration = Duration::from_millis(500);
/// Messages per receive when the client asks for none or too many.
pub(super) const RECEIVE_BATCH: u32 = 32;

/// A receive that ends with `status` alone.
pub(super) fn receive_status(status: pb::Status) -> pb::ReceiveMessageResponse {
    pb::ReceiveMessageResponse {
        content: Some(pb::receive_message_response::Content::Status(status)),
    }
}

/// The filter a subscription or receive names, as the broker reads it.
pub(super) fn filter_of(
    expression: Option<&pb::FilterExpression>,
) -> Result<(ExpressionType, String), pb::Status> {
    let Some(expression) = expression else {
        return Ok((ExpressionType::Tag, "*".to_owned()));
    };
    let kind = match pb::FilterType::try_from(expression.r#type) {
        Ok(pb::FilterType::Sql) => ExpressionType::Sql92,
        Ok(pb::FilterType::Tag | pb::FilterType::Unspecified) => ExpressionType::Tag,
        Err(_) => {
            return Err(status(
                Code::IllegalFilterExpression,
                format!("filter type {} is unknown", expression.r#type),
            ))
        }
    };
    let text = if expression.expression.trim().is_empty() {
        "*".to_owned()
    } else {
        expression.expression.clone()
    };
    Ok((kind, text))
}

/// The invisible time a receive holds its messages for, within the proxy's bounds.
fn receive_invisible(request: &pb::ReceiveMessageRequest) -> Result<Duration, pb::Status> {
    if request.auto_renew {
        return Ok(AUTO_RENEW_INVISIBLE);
    }
    let asked = request
        .invisible_duration
        .as_ref()
        .map_or(0, duration_ms)
        .max(0) as u64;
    let asked = Duration::from_millis(asked);
    if asked < MIN_INVISIBLE || asked > MAX_INVISIBLE {
        return Err(status(
            Code::IllegalInvisibleTime,
            format!(
                "the invisible time {} ms is outside [{} ms, {} ms]",
                asked.as_millis(),
                MIN_INVISIBLE.as_millis(),
                MAX_INVISIBLE.as_millis()
            ),
        ));
    }
    Ok(asked)
}

/// How long a receive may wait for a message: the asked time within the proxy's bounds, and
/// within the call's deadline less the margin its answer needs.
fn receive_poll(
    request: &pb::ReceiveMessageRequest,
    deadline: Option<Duration>,
) -> Result<Duration, pb::Status> {
    let poll = request
        .long_polling_timeout
        .as_ref()
        .map(|d| Duration::from_millis(duration_ms(d).max(0) as u64))
        .unwrap_or(MAX_LONG_POLL)
        .clamp(MIN_LONG_POLL, MAX_LONG_POLL);
    let Some(left) = deadline else {
        return Ok(poll);
    };
    let left = left.saturating_sub(DEADLINE_MARGIN);
    if left < MIN_LONG_POLL.min(poll) {
        return Err(status(
            Code::IllegalPollingTime,
            "the deadline time remaining is not enough for polling",
        ));
    }
    Ok(poll.min(left))
}

/// What a receipt handle names, as an acknowledgement the broker checks; `lite_topic` (of a lite
/// consumer's request) names the lite topic of `topic` the message came from. As the proxy
/// answers: a handle that does not parse is INTERNAL_SERVER_ERROR; the broker refuses an
/// expired one.
fn acknowledged(
    group: &str,
    topic: &str,
    lite_topic: Option<&str>,
    handle: &str,
) -> Result<AckRequest, pb::Status> {
    let lmq;
    let topic = match lite_topic.filter(|l| !l.is_empty()) {
        Some(lite) => {
            lmq = lmq_name(topic, lite);
            lmq.as_str()
        }
        None => topic,
    };
    let unreadable = || {
        status(
            Code::InternalServerError,
            format!("receipt handle {handle:?} does not parse"),
        )
    };
    let receipt = Receipt::parse(handle).map_err(|_| unreadable())?;
    let offset = receipt.queue_offset.ok_or_else(unreadable)?;
    Ok(AckRequest {
        group: group.to_owned(),
        topic: receipt.kind.stored_topic(group, topic),
        queue_id: i32::try_from(receipt.queue_id).unwrap_or(i32::MAX),
        offset: i64::try_from(offset).unwrap_or(i64::MAX),
        receipt,
        expired: ExpiredReceipt::Refuse,
    })
}

/// The group and topic a consume request names, stored, once the caller may consume them.
fn consumed(
    caller: &Caller,
    topic: Option<&pb::Resource>,
    group: Option<&pb::Resource>,
) -> Result<(String, String), pb::Status> {
    let (Some(topic), Some(group)) = (topic, group) else {
        return Err(bad_request("the request names no topic or no group"));
    };
    let stored_topic = resource::stored(topic);
    let stored_group = resource::stored(group);
    caller.authorize(rules::consume_checks(&stored_topic, &stored_group))?;
    Ok((stored_group, stored_topic))
}

impl GrpcService {
    /// ReceiveMessage: the stream's items, a status first, then the messages and the delivery
    /// timestamp.
    pub(super) async fn receive(
        &self,
        caller: Caller,
        request: pb::ReceiveMessageRequest,
    ) -> Vec<pb::ReceiveMessageResponse> {
        use pb::receive_message_response::Content;
        let started = epoch_millis();
        match self.popped(caller, request).await {
            Err(refused) => vec![receive_status(refused)],
            Ok(messages) if messages.is_empty() => {
                vec![receive_status(status(
                    Code::MessageNotFound,
                    "no new message",
                ))]
            }
            Ok(messages) => {
                let mut items = Vec::with_capacity(messages.len() + 2);
                items.push(receive_status(ok()));
                items.extend(messages.into_iter().map(|m| pb::ReceiveMessageResponse {
                    content: Some(Content::Message(m)),
                }));
                items.push(pb::ReceiveMessageResponse {
                    content: Some(Content::DeliveryTimestamp(convert::timestamp(started))),
                });
                items
            }
        }
    }

    /// One pop for a receive, in one call on the broker: the group's settings, the pop, and
    /// the proxy's rule that a message received max-attempts times already goes to the
    /// dead-letter topic instead of to the consumer.
    async fn popped(
        &self,
        caller: Caller,
        request: pb::ReceiveMessageRequest,
    ) -> Result<Vec<pb::Message>, pb::Status> {
        let Some(group) = request.group.as_ref() else {
            return Err(status(
                Code::IllegalConsumerGroup,
                "the request names no group",
            ));
        };
        let Some(queue) = request.message_queue.as_ref() else {
            return Err(bad_request("the request names no message queue"));
        };
        let Some(topic) = queue.topic.as_ref() else {
            return Err(status(
                Code::IllegalTopic,
                "the message queue names no topic",
            ));
        };
        let stored_group = resource::stored(group);
        let stored_topic = resource::stored(topic);
        caller.authorize(rules::consume_checks(&stored_topic, &stored_group))?;
        let settings = self.clients.get(&caller.client_id).and_then(|c| c.settings);
        let lite = settings
            .as_ref()
            .is_some_and(|s| s.client_type == Some(pb::ClientType::LitePushConsumer as i32));
        let fifo_setting = settings.and_then(|s| match s.pub_sub? {
            pb::settings::PubSub::Subscription(s) => s.fifo,
            _ => None,
        });
        let client_id = caller.client_id.clone();
        let invisible = receive_invisible(&request)?;
        let poll = receive_poll(&request, caller.deadline)?;
        let (expression_type, expression) = filter_of(request.filter_expression.as_ref())?;
        let max_messages = u32::try_from(request.batch_size)
            .ok()
            .filter(|b| *b > 0)
            .unwrap_or(RECEIVE_BATCH)
            .min(MAX_POP_MESSAGES as u32);
        let broker_name = self.config.broker_name.clone();
        let popped = self
            .broker(move |broker| async move {
                let group_config = broker.group(&stored_group)?;
                let orderly = group_config
                    .as_ref()
                    .map(|g| g.consume_message_orderly)
                    .or(fifo_setting)
                    .unwrap_or(false);
                let max_attempts = group_config
                    .as_ref()
                    .map_or(DEFAULT_MAX_RECONSUME_TIMES.unsigned_abs() + 1, |g| {
                        g.retry_max_times + 1
                    });
                let answers = if lite {
                    // A lite consumer's receive spans the lite topics it subscribes; the proxy
                    // filters lite messages after the pop, and skiff's lite pops take them all.
                    broker
                        .pop_lite(LitePop {
                            client_id,
                            group: stored_group.clone(),
                            topic: stored_topic.clone(),
                            max_messages,
                            invisible_ms: invisible.as_millis() as i64,
                            poll,
                        })
                        .await?
                } else {
                    let pop = PopRequest {
                        group: stored_group.clone(),
                        topic: stored_topic.clone(),
                        // Every queue, whatever the request names, as the proxy pops (its
                        // selector reads only the broker name): a client that asks for one
                        // queue still gets the topic's messages, and a FIFO group's order holds
                        // per queue either way.
                        queue_id: None,
                        max_messages,
                        invisible_ms: invisible.as_millis() as i64,
                        poll,
                        from_min: false,
                        expression_type,
                        expression: Some(expression).filter(|e| e != "*"),
                        orderly,
                    };
                    vec![broker.pop(pop).await?]
                };
                let mut delivered = Vec::new();
                for answer in answers.iter().filter(|a| a.message_count > 0) {
                    let records = decode_records(answer.records.clone()).map_err(|source| {
                        BrokerError::UnreadableMessage {
                            topic: stored_topic.clone(),
                            queue_id: 0,
                            queue_offset: 0,
                            source,
                        }
                    })?;
                    for mut message in records {
                        let Some(receipt) = answer.receipt(&message, &broker_name) else {
                            // Not of a queue this pop read: nothing could acknowledge it.
                            continue;
                        };
                        // An orderly pop counts its deliveries beside the records, as the proxy's
                        // remoting client applies them: the attempt the consumer sees and the
                        // dead-letter rule below both need them.
                        message.reconsume_times = answer.reconsume_times(&message);
                        if i64::from(message.reconsume_times) >= i64::from(max_attempts) {
                            broker
                                .dead_letter_popped(&stored_group, &message, &receipt, max_attempts)
                                .await?;
                            continue;
                        }
                        delivered.push((message, receipt));
                    }
                }
                Ok(delivered)
            })
            .await?;
        Ok(popped
            .iter()
            .map(|(message, receipt)| {
                let mut converted = message_from_stored(message);
                if let Some(system) = converted.system_properties.as_mut() {
                    system.receipt_handle = Some(receipt.to_string());
                    system.invisible_duration = Some(duration(receipt.invisible_ms));
                }
                converted
            })
            .collect())
    }

    /// AckMessage: every entry in one call on the broker, each answered on its own.
    pub(super) async fn ack(
        &self,
        caller: Caller,
        request: pb::AckMessageRequest,
    ) -> Result<pb::AckMessageResponse, pb::Status> {
        let (group, topic) = consumed(&caller, request.topic.as_ref(), request.group.as_ref())?;
        // Entries whose handle does not parse are answered here; the rest go to the broker in
        // one call and are answered in order.
        let mut unreadable = Vec::with_capacity(request.entries.len());
        let mut valid = Vec::with_capacity(request.entries.len());
        for entry in &request.entries {
            match acknowledged(
                &group,
                &topic,
                entry.lite_topic.as_deref(),
                &entry.receipt_handle,
            ) {
                Ok(ack) => {
                    valid.push(ack);
                    unreadable.push(None);
                }
                Err(refused) => unreadable.push(Some(refused)),
            }
        }
        let mut answers = if valid.is_empty() {
            Vec::new()
        } else {
            self.broker(move |broker| async move { Ok(broker.ack_all(valid).await) })
                .await?
        }
        .into_iter();
        let entries: Vec<pb::AckMessageResultEntry> = request
            .entries
            .into_iter()
            .zip(unreadable)
            .map(|(entry, unreadable)| {
                let result = match unreadable {
                    Some(refused) => refused,
                    None => match answers.next() {
                        Some(Ok(_)) => ok(),
                        Some(Err(e)) => broker_status(&e),
                        None => status(Code::InternalServerError, "no answer for this entry"),
                    },
                };
                pb::AckMessageResultEntry {
                    message_id: entry.message_id,
                    receipt_handle: entry.receipt_handle,
                    status: Some(result),
                }
            })
            .collect();
        Ok(pb::AckMessageResponse {
            status: Some(overall(entries.iter().filter_map(|e| e.status.clone()))),
            entries,
        })
    }

    /// ForwardMessageToDeadLetterQueue: the message a receipt names goes to the group's
    /// dead-letter topic.
    pub(super) async fn forward_to_dead_letters(
        &self,
        caller: Caller,
        request: pb::ForwardMessageToDeadLetterQueueRequest,
    ) -> Result<pb::ForwardMessageToDeadLetterQueueResponse, pb::Status> {
        let (group, topic) = consumed(&caller, request.topic.as_ref(), request.group.as_ref())?;
        let forwarded = acknowledged(
            &group,
            &topic,
            request.lite_topic.as_deref(),
            &request.receipt_handle,
        )?;
        let max_attempts = u32::try_from(request.max_delivery_attempts).unwrap_or(0);
        self.broker(move |broker| async move { broker.dead_letter(forwarded, max_attempts).await })
            .await?;
        Ok(pb::ForwardMessageToDeadLetterQueueResponse { status: Some(ok()) })
    }

    /// ChangeInvisibleDuration: answers the receipt handle that now names the message.
    pub(super) async fn change_invisible(
        &self,
        caller: Caller,
        request: pb::ChangeInvisibleDurationRequest,
    ) -> Result<pb::ChangeInvisibleDurationResponse, pb::Status> {
        let (group, topic) = consumed(&caller, request.topic.as_ref(), request.group.as_ref())?;
        let changed = acknowledged(
            &group,
            &topic,
            request.lite_topic.as_deref(),
            &request.receipt_handle,
        )?;
        let invisible_ms = request.invisible_duration.as_ref().map_or(0, duration_ms);
        if invisible_ms < 0 || invisible_ms > MAX_INVISIBLE.as_millis() as i64 {
            return Err(status(
                Code::IllegalInvisibleTime,
                format!(
                    "the invisible time {invisible_ms} ms is outside [0, {} ms]",
                    MAX_INVISIBLE.as_millis()
                ),
            ));
        }
        let receipt = changed.receipt.clone();
        let (pop_time_ms, invisible_ms) = self
            .broker(
                move |broker| async move { broker.change_invisible(changed, invisible_ms).await },
            )
            .await?;
        Ok(pb::ChangeInvisibleDurationResponse {
            status: Some(ok()),
            receipt_handle: Receipt {
                pop_time_ms,
                invisible_ms,
                ..receipt
            }
            .to_string(),
        })
    }
}
