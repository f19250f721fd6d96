//! Request-reply: SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325) from the replier,
//! and PUSH_REPLY_MESSAGE_TO_CLIENT (326), which the broker sends on the requester's own
//! connection.
//!
//! The requester is a producer whose heartbeat registered its client id on a connection; the
//! reply names it in `REPLY_TO_CLIENT`. The broker pushes the reply there and waits for the
//! requester's answer, then stores the reply in its topic (the cluster's reply topic), as Java's
//! broker does with `storeReplyMessageEnable` at its default (on). The send is answered by the
//! push: SUCCESS once the requester took the reply, SYSTEM_ERROR with a remark saying why not
//! otherwise. The answer's `msgId`, `queueId` and `queueOffset` are those of the stored reply,
//! or `"0"`, the header's queue and 0 when storing failed.

use std::net::SocketAddr;

use bytes::Bytes;
use tracing::{debug, warn};

use skiff_actors::broker::ClientSend;
use skiff_actors::logic::sends::QueueChoice;
use skiff_storage::message::property::{PUSH_REPLY_TIME, REPLY_TO_CLIENT};
use skiff_storage::message::{property, set_property};

use super::admin_clients::CALL_CLIENT_TIMEOUT;
use super::produce::{
    check_properties_length, queue_choice, sent_message, DEFAULT_REGION, TRACE_SWITCH,
};
use super::{broker_failure, ext, Outcome, Processor};
use crate::remoting::codes::{request as rc, response as code};
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    CustomHeader, ReplyMessageRequestHeader, SendMessageRequestHeader, SendMessageResponseHeader,
};
use crate::remoting::server::ConnectionHandle;
use crate::remoting::wire::{clamp_i32, clamp_i64};

/// Why a reply did not reach its requester; the text is the send's remark.
#[derive(Debug, thiserror::Error)]
enum PushFailure {
    #[error("reply message properties[{REPLY_TO_CLIENT}] is null")]
    NoRequester,
    #[error("push reply message fail, channel of <{client_id}> not found")]
    NotConnected { client_id: String },
    #[error(
        "push reply message to <{client_id}> fail: the client answered code {code} ({remark})"
    )]
    Refused {
        client_id: String,
        code: i32,
        remark: String,
    },
    #[error("push reply message to <{client_id}> fail")]
    Unreachable {
        client_id: String,
        #[source]
        source: crate::remoting::conn::InvokeError,
    },
}

impl Processor {
    /// SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325): pushes the reply to the
    /// requester named by `REPLY_TO_CLIENT`, then stores it.
    pub(super) async fn send_reply(
        &self,
        conn: &ConnectionHandle,
        request: &RemotingCommand,
    ) -> Outcome {
        let header = SendMessageRequestHeader::from_request(request)?;
        check_properties_length(&header)?;
        let auto_create_queue_nums = Some(self.auto_create_queue_nums(&header));
        let queue_id = self
            .broker
            .prepare_send(
                &header.topic,
                &queue_choice(&header),
                auto_create_queue_nums,
            )
            .await
            .map_err(broker_failure)?;
        let properties = reply_properties(&header);

        let pushed = self
            .push_reply(conn, &header, &properties, &request.body)
            .await;

        let message = sent_message(&header, queue_id, conn, properties, &request.body);
        let mut response_header = SendMessageResponseHeader {
            msg_id: "0".to_owned(),
            queue_id: clamp_i32(queue_id),
            queue_offset: 0,
            transaction_id: None,
            batch_uniq_id: None,
            recall_handle: None,
        };
        match self
            .broker
            .send(ClientSend {
                messages: vec![message],
                queue: QueueChoice::Given(queue_id),
                batch: false,
                auto_create_queue_nums,
            })
            .await
        {
            Ok(results) => {
                if let Some(stored) = results.first() {
                    response_header.msg_id = stored.offset_msg_id.clone();
                    response_header.queue_id = clamp_i32(stored.queue_id);
                    response_header.queue_offset = clamp_i64(stored.queue_offset);
                }
            }
            // The answer is the push's: a reply that reached its requester is delivered even
            // when it could not be kept.
            Err(e) => {
                let failure = broker_failure(e);
                warn!(topic = %header.topic, code = failure.code, remark = %failure.remark, "reply message not stored");
            }
        }

        let response = match pushed {
            Ok(()) => RemotingCommand::new_response(code::SUCCESS, None),
            Err(failure) => {
                let remark = crate::error_text::error_chain(&failure);
                RemotingCommand::new_response(code::SYSTEM_ERROR, Some(remark))
            }
        };
        Ok(response
            .with_ext_fields(response_header.to_ext())
            .with_ext(ext::MSG_REGION, DEFAULT_REGION)
            .with_ext(ext::TRACE_ON, TRACE_SWITCH))
    }

    /// Pushes the reply on the requester's connection and waits for its answer.
    async fn push_reply(
        &self,
        conn: &ConnectionHandle,
        header: &SendMessageRequestHeader,
        properties: &str,
        body: &Bytes,
    ) -> Result<(), PushFailure> {
        let Some(client_id) = property(properties, REPLY_TO_CLIENT).map(str::to_owned) else {
            warn!(topic = %header.topic, "reply without a requester client id");
            return Err(PushFailure::NoRequester);
        };
        let requester = self
            .broker
            .connections()
            .connection_of_producer(&client_id)
            .and_then(|id| self.clients.borrow().handle(id));
        let Some(requester) = requester else {
            warn!(client_id = %client_id, "requester of a reply not connected");
            return Err(PushFailure::NotConnected { client_id });
        };
        let mut pushed_properties = properties.to_owned();
        set_property(
            &mut pushed_properties,
            PUSH_REPLY_TIME,
            &self.broker.now_ms().to_string(),
        );
        let push_header = ReplyMessageRequestHeader {
            producer_group: header.producer_group.clone(),
            topic: header.topic.clone(),
            default_topic: header.default_topic.clone(),
            default_topic_queue_nums: header.default_topic_queue_nums,
            queue_id: header.queue_id,
            sys_flag: header.sys_flag,
            born_timestamp: header.born_timestamp,
            flag: header.flag,
            properties: Some(pushed_properties),
            reconsume_times: header.reconsume_times,
            unit_mode: header.unit_mode.unwrap_or(false),
            born_host: host_port(conn.peer_addr()),
            store_host: host_port(self.broker.store_host()),
            store_timestamp: self.broker.now_ms(),
        };
        let push = RemotingCommand::new_request(rc::PUSH_REPLY_MESSAGE_TO_CLIENT)
            .with_ext_fields(push_header.to_ext())
            .with_body(body.clone());
        match requester.invoke(push, CALL_CLIENT_TIMEOUT).await {
            Ok(answer) if answer.code == code::SUCCESS => {
                debug!(client_id = %client_id, conn = %requester.id(), "reply pushed to its requester");
                Ok(())
            }
            Ok(answer) => {
                let remark = answer.remark.unwrap_or_default();
                warn!(client_id = %client_id, code = answer.code, remark = %remark, "requester refused a reply");
                Err(PushFailure::Refused {
                    client_id,
                    code: answer.code,
                    remark,
                })
            }
            Err(source) => {
                warn!(client_id = %client_id, error = %source, "reply push failed");
                Err(PushFailure::Unreachable { client_id, source })
            }
        }
    }
}

/// The reply's properties as pushed and stored: the replier's, plus the broker's region and
/// trace switch, which Java's broker adds to every send it handles. Unlike an ordinary send,
/// a reply is not stamped with `CLUSTER`: nothing answers a reply.
fn reply_properties(header: &SendMessageRequestHeader) -> String {
    let mut properties = header.properties.clone().unwrap_or_default();
    set_property(
        &mut properties,
        skiff_storage::message::property::MSG_REGION,
        DEFAULT_REGION,
    );
    set_property(
        &mut properties,
        skiff_storage::message::property::TRACE_ON,
        TRACE_SWITCH,
    );
    properties
}

/// `ip:port` without IPv6 brackets, as Java writes `getHostAddress() + ":" + port`.
fn host_port(addr: SocketAddr) -> String {
    format!("{}:{}", addr.ip(), addr.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_keeps_its_properties_and_gains_the_broker_stamps_but_no_cluster() {
        let header = SendMessageRequestHeader {
            properties: Some("CORRELATION_ID\u{1}c1\u{2}REPLY_TO_CLIENT\u{1}me\u{2}".to_owned()),
            ..SendMessageRequestHeader::default()
        };
        let properties = reply_properties(&header);
        assert_eq!(property(&properties, "CORRELATION_ID"), Some("c1"));
        assert_eq!(property(&properties, REPLY_TO_CLIENT), Some("me"));
        assert_eq!(property(&properties, "MSG_REGION"), Some(DEFAULT_REGION));
        assert_eq!(property(&properties, "CLUSTER"), None);
    }

    #[test]
    fn push_failures_say_whom_and_why() {
        assert_eq!(
            PushFailure::NoRequester.to_string(),
            "reply message properties[REPLY_TO_CLIENT] is null"
        );
        assert_eq!(
            PushFailure::NotConnected {
                client_id: "c@1".to_owned()
            }
            .to_string(),
            "push reply message fail, channel of <c@1> not found"
        );
        assert_eq!(host_port("[::1]:9876".parse().unwrap()), "::1:9876");
    }
}
