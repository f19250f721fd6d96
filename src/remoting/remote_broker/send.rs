//! Sends: SEND_MESSAGE_V2, or SEND_BATCH_MESSAGE for several messages of one queue, to the
//! master of the broker named in the request or of the topic's first broker.

use bytes::Bytes;
use tracing::warn;

use skiff_actors::broker_api::{BrokerError, SendRequest, SendResult, SendStatus};
use skiff_actors::logic::transaction::is_prepared;
use skiff_storage::message::MessageToAppend;

use super::{bad_answer, remote, RemoteBroker};
use crate::remoting::body::encode_batch;
use crate::remoting::codes::{request as rc, send_status_of, AUTO_CREATE_TOPIC_KEY};
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{CustomHeader, SendMessageRequestHeader, SendMessageResponseHeader};
use crate::remoting::wire::{batches, clamp_i32, send_results};

impl RemoteBroker {
    /// Sends to `broker_name`'s master, or without a name to the first broker of the topic.
    pub(super) async fn send_messages(
        &self,
        request: SendRequest,
    ) -> Result<Vec<SendResult>, BrokerError> {
        let queue_nums = request
            .auto_create_queue_nums
            .unwrap_or(self.inner.config.default_topic_queue_nums);
        let mut results = Vec::with_capacity(request.messages.len());
        for group in batches(request.messages) {
            let (name, addr) = match &request.broker_name {
                Some(name) => (
                    name.to_owned(),
                    self.queue_addr(&group[0].topic, name).await?,
                ),
                None => self.first_broker(&group[0].topic).await?,
            };
            if group.iter().any(|m| is_prepared(m.sys_flag)) {
                // The broker checks a half back over the connection of the producer heartbeat.
                self.producer_heartbeats(&addr).await?;
            }
            let sent = self.send_group(&addr, group, queue_nums).await?;
            results.extend(sent.into_iter().map(|r| SendResult {
                broker_name: name.clone(),
                ..r
            }));
        }
        Ok(results)
    }

    /// One SEND_MESSAGE_V2, or one SEND_BATCH_MESSAGE for several messages of one queue.
    pub(super) async fn send_group(
        &self,
        addr: &str,
        group: Vec<MessageToAppend>,
        auto_create_queue_nums: u32,
    ) -> Result<Vec<SendResult>, BrokerError> {
        let first = &group[0];
        let batch = group.len() > 1;
        let header = SendMessageRequestHeader {
            producer_group: self.inner.config.producer_group.clone(),
            topic: first.topic.clone(),
            default_topic: AUTO_CREATE_TOPIC_KEY.to_owned(),
            default_topic_queue_nums: clamp_i32(auto_create_queue_nums),
            queue_id: clamp_i32(first.queue_id),
            sys_flag: first.sys_flag,
            born_timestamp: first.born_timestamp,
            flag: first.flag,
            properties: (!batch).then(|| first.properties.clone()),
            reconsume_times: Some(first.reconsume_times),
            unit_mode: Some(false),
            max_reconsume_times: None,
            batch: Some(batch),
            broker_name: None,
        };
        let (code_used, body) = if batch {
            (rc::SEND_BATCH_MESSAGE, Bytes::from(encode_batch(&group)))
        } else {
            (rc::SEND_MESSAGE_V2, first.body.clone())
        };
        let request = RemotingCommand::new_request(code_used)
            .with_ext_fields(header.to_v2_ext())
            .with_body(body);
        let response = self
            .invoke(addr, request, self.inner.config.rpc_timeout)
            .await?;
        // Stored, not yet as durable as configured: Java's client gives a SendResult with
        // that status, not an error.
        let Some(status) = send_status_of(response.code) else {
            return Err(remote(addr, &response));
        };
        if status != SendStatus::Ok {
            warn!(addr, status = status.name(), remark = ?response.remark, "message stored without the requested durability");
        }
        let header = SendMessageResponseHeader::from_command(&response)
            .map_err(|e| bad_answer(addr, "send response header", e))?;
        send_results(&header, group.len(), status)
            .map_err(|e| bad_answer(addr, "send response header", e))
    }
}
