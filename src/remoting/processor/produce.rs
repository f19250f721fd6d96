//! Producer requests: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320),
//! RECALL_MESSAGE (370).

use bytes::Bytes;

use skiff_actors::broker::ClientSend;
use skiff_actors::broker_api::SendResult;
use skiff_actors::logic::delay::RETRY_TOPIC_PREFIX;
use skiff_actors::logic::sends::QueueChoice;
use skiff_storage::message::property::{
    CLUSTER, MAX_RECONSUME_TIMES, MSG_REGION, TRACE_ON, UNIQ_KEY,
};
use skiff_storage::message::{property, push_property, set_property, MessageToAppend};

use super::refusal::failure_to;
use super::{broker_failure, ext, Failure, Outcome, Processor};
use crate::remoting::body::decode_batch;
use crate::remoting::codes::{request as rc, response as code, send_status_code};
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    self, CustomHeader, RecallMessageRequestHeader, RecallMessageResponseHeader,
    SendMessageRequestHeader, SendMessageResponseHeader,
};
use crate::remoting::server::ConnectionHandle;
use crate::remoting::wire::{clamp_i32, clamp_i64};

/// Java's `BrokerConfig.regionId` default, answered as `MSG_REGION`.
pub(super) const DEFAULT_REGION: &str = "DefaultRegion";
/// Java's `BrokerConfig.traceOn` default, answered as `TRACE_ON`.
pub(super) const TRACE_SWITCH: &str = "true";

impl Processor {
    /// SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320).
    pub(super) async fn send(&self, conn: &ConnectionHandle, request: &RemotingCommand) -> Outcome {
        let header = SendMessageRequestHeader::from_request(request)?;
        // Java's broker decides by the header's batch flag, not by the request code: the code
        // only picks the header's form. The C++ client sends its batches as SEND_MESSAGE (10)
        // with `batch: "1"`, which Java reads as false (`Boolean.parseBoolean`) and stores as one
        // message holding the encoded batch; skiff reads "1" as true, as it reads every boolean
        // (docs/wire-protocol.md §9), and stores the three messages the client sent.
        let batch = header.batch.unwrap_or(false);
        check_properties_length(&header)?;
        let cluster = &self.broker.config().cluster_name;
        let messages = messages_to_append(&header, conn, &request.body, batch, cluster)?;
        let echoed = EchoedIds::of(&header, &messages, batch);
        let results = self
            .broker
            .send(ClientSend {
                messages,
                queue: queue_choice(&header),
                batch,
                auto_create_queue_nums: Some(self.auto_create_queue_nums(&header)),
            })
            .await
            .map_err(broker_failure)?;
        send_answer(&results, echoed)
    }

    /// How many queues the topic gets if this send creates it: what the producer asks for, at
    /// most the broker's default.
    pub(super) fn auto_create_queue_nums(&self, header: &SendMessageRequestHeader) -> u32 {
        let config = self.broker.config();
        let asked = u32::try_from(header.default_topic_queue_nums)
            .ok()
            .filter(|n| *n > 0)
            .unwrap_or(config.default_topic_queue_nums);
        asked.min(config.default_topic_queue_nums).max(1)
    }

    /// RECALL_MESSAGE (370): the broker's one recall; answered with the recalled message's id
    /// and the region Java's broker adds.
    pub(super) async fn recall(&self, request: &RemotingCommand) -> Outcome {
        let header = RecallMessageRequestHeader::from_command(request)?;
        let msg_id = self
            .broker
            .recall(&header.topic, &header.recall_handle)
            .await
            .map_err(failure_to(rc::RECALL_MESSAGE))?;
        let mut ext = RecallMessageResponseHeader { msg_id }.to_ext();
        ext.insert(MSG_REGION.to_string(), DEFAULT_REGION.to_string());
        Ok(RemotingCommand::new_response(code::SUCCESS, None).with_ext_fields(ext))
    }
}

/// The header's properties string is capped on the wire, before any message is built.
pub(super) fn check_properties_length(header: &SendMessageRequestHeader) -> Result<(), Failure> {
    if header.properties_too_long() {
        return Err(Failure::new(
            code::MESSAGE_ILLEGAL,
            format!(
                "the message properties length is {}, over the limit of {}",
                header.properties.as_ref().map_or(0, String::len),
                headers::MAX_PROPERTIES_LEN
            ),
        ));
    }
    Ok(())
}

/// The queue a send names: the header's, or any when it is negative (Java's
/// `randomQueueId(writeQueueNums)`).
pub(super) fn queue_choice(header: &SendMessageRequestHeader) -> QueueChoice {
    u32::try_from(header.queue_id).map_or(QueueChoice::Random, QueueChoice::Given)
}

/// The message a send header and body describe, from `conn`, with `properties` in wire form.
pub(super) fn sent_message(
    header: &SendMessageRequestHeader,
    queue_id: u32,
    conn: &ConnectionHandle,
    properties: String,
    body: &Bytes,
) -> MessageToAppend {
    MessageToAppend {
        topic: header.topic.clone(),
        queue_id,
        flag: header.flag,
        sys_flag: header.sys_flag,
        born_timestamp: header.born_timestamp,
        born_host: conn.peer_addr(),
        reconsume_times: header.reconsume_times.unwrap_or(0),
        prepared_transaction_offset: 0,
        properties,
        body: body.clone(),
    }
}

/// The messages a send stores: the request's one message, or each message of a batch body with
/// the header's topic, queue and flags.
fn messages_to_append(
    header: &SendMessageRequestHeader,
    conn: &ConnectionHandle,
    body: &Bytes,
    batch: bool,
    cluster: &str,
) -> Result<Vec<MessageToAppend>, Failure> {
    // A batch's messages keep their own properties: Java stores none of the batch's.
    let properties = if batch {
        String::new()
    } else {
        send_properties(header, cluster)
    };
    // The broker sets the queue once it has chosen one.
    let template = sent_message(header, 0, conn, properties, body);
    if !batch {
        return Ok(vec![template]);
    }
    let entries =
        decode_batch(body).map_err(|e| Failure::new(code::MESSAGE_ILLEGAL, e.to_string()))?;
    if entries.is_empty() {
        return Err(Failure::new(
            code::MESSAGE_ILLEGAL,
            "the batch contains no message",
        ));
    }
    Ok(entries
        .into_iter()
        // Field by field: `..template.clone()` would copy the header's properties for every
        // message only to drop them.
        .map(|e| MessageToAppend {
            topic: template.topic.clone(),
            queue_id: template.queue_id,
            flag: e.flag,
            sys_flag: template.sys_flag,
            born_timestamp: template.born_timestamp,
            born_host: template.born_host,
            reconsume_times: template.reconsume_times,
            prepared_transaction_offset: template.prepared_transaction_offset,
            properties: e.properties,
            body: e.body,
        })
        .collect())
}

/// The client's id a send answer echoes as `transactionId`: the UNIQ_KEY of the message, or for
/// a batch the one the client stamped on the batch as a whole (in the header's properties), as
/// Java's `MessageClientIDSetter.getUniqID` reads it from the message or the batch. Java answers
/// `batchUniqId` only for inner-batch queues, which skiff does not have; a client that gets one
/// reads the answer as a single id for the whole batch.
struct EchoedIds {
    transaction_id: Option<String>,
}

impl EchoedIds {
    fn of(header: &SendMessageRequestHeader, messages: &[MessageToAppend], batch: bool) -> Self {
        let properties = if batch {
            header.properties.as_deref()
        } else {
            messages.first().map(|m| m.properties.as_str())
        };
        EchoedIds {
            transaction_id: properties
                .and_then(|p| property(p, UNIQ_KEY))
                .map(str::to_owned),
        }
    }
}

/// The send answer: the first message's queue and offset, every message's offset message id
/// (comma-separated), and the region and trace flags Java's broker adds.
fn send_answer(results: &[SendResult], echoed: EchoedIds) -> Outcome {
    let Some(first) = results.first() else {
        return Err(Failure::system("putMessageResult is null"));
    };
    let msg_id = results
        .iter()
        .map(|r| r.offset_msg_id.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let response_header = SendMessageResponseHeader {
        msg_id,
        queue_id: clamp_i32(first.queue_id),
        queue_offset: clamp_i64(first.queue_offset),
        transaction_id: echoed.transaction_id,
        batch_uniq_id: None,
        // A timer send's, from its (first) message, as the one header Java answers.
        recall_handle: first.recall_handle.clone(),
    };
    // A message stored without the durability the broker waits for is answered with that
    // code and the same fields (Java's `sendOK` statuses); the client reads it as its status.
    Ok(
        RemotingCommand::new_response(send_status_code(first.status), None)
            .with_ext_fields(response_header.to_ext())
            .with_ext(ext::MSG_REGION, DEFAULT_REGION)
            .with_ext(ext::TRACE_ON, TRACE_SWITCH),
    )
}

/// A send's stored properties: the header's, plus `MAX_RECONSUME_TIMES` from the header for a
/// (client fallback) send to a retry topic that does not carry it, so the broker's dead-letter
/// check honours the consumer's limit as Java's `handleRetryAndDLQ` does; plus what Java's broker
/// stamps on every message it stores: its region and trace switch (`buildMsgContext`) and its
/// cluster, which request-reply reads back to route the reply.
fn send_properties(header: &SendMessageRequestHeader, cluster: &str) -> String {
    let mut properties = header.properties.clone().unwrap_or_default();
    if let Some(max) = header.max_reconsume_times {
        if header.topic.starts_with(RETRY_TOPIC_PREFIX)
            && property(&properties, MAX_RECONSUME_TIMES).is_none()
        {
            push_property(&mut properties, MAX_RECONSUME_TIMES, &max.to_string());
        }
    }
    set_property(&mut properties, MSG_REGION, DEFAULT_REGION);
    set_property(&mut properties, TRACE_ON, TRACE_SWITCH);
    set_property(&mut properties, CLUSTER, cluster);
    properties
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_actors::broker_api::SendStatus;

    fn stored(queue_offset: u64, status: SendStatus) -> SendResult {
        SendResult {
            broker_name: "skiff".to_string(),
            queue_id: 3,
            queue_offset,
            physical_offset: 0x1CE,
            offset_msg_id: format!("7F00000100002A9F{:016X}", 0x1CE + queue_offset),
            status,
            recall_handle: None,
        }
    }

    #[test]
    fn a_stored_message_past_the_flush_timeout_is_answered_flush_disk_timeout_with_its_fields() {
        let echoed = || EchoedIds {
            transaction_id: None,
        };
        let ok = send_answer(&[stored(7, SendStatus::Ok)], echoed()).expect("answer");
        assert_eq!(ok.code, code::SUCCESS);
        let results = [
            stored(7, SendStatus::FlushDiskTimeout),
            stored(8, SendStatus::FlushDiskTimeout),
        ];
        let late = send_answer(&results, echoed()).expect("answer");
        assert_eq!(late.code, code::FLUSH_DISK_TIMEOUT);
        assert_eq!(late.ext("queueId"), Some("3"));
        assert_eq!(late.ext("queueOffset"), Some("7"));
        assert_eq!(
            late.ext("msgId"),
            Some("7F00000100002A9F00000000000001D5,7F00000100002A9F00000000000001D6")
        );
    }
}
