//! The consumer's calls: PULL_MESSAGE, QUERY/UPDATE_CONSUMER_OFFSET, CONSUMER_SEND_MSG_BACK,
//! HEART_BEAT and UNREGISTER_CLIENT, the member list, and LOCK/UNLOCK_BATCH_MQ, each to the
//! master of the broker that owns the queue (or knows the group).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use tracing::{debug, warn};

use skiff_actors::broker_api::{
    BrokerError, ConsumerHeartbeat, ConsumerNotifier, OffsetUpdate, PullRequest, PullResponse,
    PullStatus, QueryOffsetRequest, RemoteError, SendBackRequest,
};
use skiff_actors::logic::delay::retry_topic;
use skiff_actors::logic::queue::MessageQueue;
use skiff_actors::refused::Refused;

use super::{answered_offset, bad_answer, client_error, offset_header, remote, RemoteBroker};
use crate::remoting::body::{
    ConsumerListBody, JsonBody, LockBatchRequestBody, LockBatchResponseBody,
    MessageQueue as WireQueue, UnlockBatchRequestBody,
};
use crate::remoting::codes::{request as rc, response as code};
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    ConsumerSendMsgBackRequestHeader, CustomHeader, GetConsumerListByGroupRequestHeader,
    PullMessageResponseHeader, QueryConsumerOffsetRequestHeader, UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
};
use crate::remoting::wire::{
    clamp_i32, clamp_i64, heartbeat_data, pull_request_header, pull_status_of,
};

impl RemoteBroker {
    pub(super) async fn pull(&self, request: PullRequest) -> Result<PullResponse, BrokerError> {
        let addr = self
            .queue_addr(&request.topic, &request.broker_name)
            .await?;
        self.reregister_if_reconnected(&addr).await;
        let sub_version = self
            .inner
            .sub_versions
            .borrow()
            .get(&(request.group.clone(), request.topic.clone()))
            .copied()
            .unwrap_or(0);
        let header = pull_request_header(&request, sub_version);
        let timeout = match request.suspend_timeout {
            Some(suspend) => suspend + self.inner.config.pull_timeout_margin,
            None => self.inner.config.rpc_timeout,
        };
        let command =
            RemotingCommand::new_request(rc::PULL_MESSAGE).with_ext_fields(header.to_ext());
        let response = self.invoke(&addr, command, timeout).await?;
        let Some(status) = pull_status_of(response.code, response.remark.as_deref()) else {
            return Err(remote(&addr, &response));
        };
        let header = PullMessageResponseHeader::from_command(&response)
            .map_err(|e| bad_answer(&addr, "pull response header", e))?;
        let offset = |value: i64, field: &'static str| {
            answered_offset(&addr, "pull response header", field, value)
        };
        Ok(PullResponse {
            status,
            next_begin_offset: offset(header.next_begin_offset, "nextBeginOffset")?,
            min_offset: offset(header.min_offset, "minOffset")?,
            max_offset: offset(header.max_offset, "maxOffset")?,
            records: if status == PullStatus::Found {
                response.body
            } else {
                Bytes::new()
            },
        })
    }

    pub(super) async fn query_offset(
        &self,
        request: QueryOffsetRequest,
    ) -> Result<Option<u64>, BrokerError> {
        let queue = &request.queue;
        let addr = self.queue_addr(&queue.topic, &queue.broker_name).await?;
        let header = QueryConsumerOffsetRequestHeader {
            consumer_group: request.group,
            topic: queue.topic.clone(),
            queue_id: clamp_i32(queue.queue_id),
            // skiff's consumers ask without the zero rule: a real not-found, so the consumer's
            // ConsumeFromWhere decides.
            set_zero_if_not_found: Some(request.set_zero_if_not_found),
        };
        let request = RemotingCommand::new_request(rc::QUERY_CONSUMER_OFFSET)
            .with_ext_fields(header.to_ext());
        let response = self
            .invoke(&addr, request, self.inner.config.rpc_timeout)
            .await?;
        match response.code {
            code::SUCCESS => {
                let offset = offset_header(&addr, &response)?;
                // Java treats a negative stored offset as none.
                Ok(u64::try_from(offset).ok())
            }
            code::QUERY_NOT_FOUND => Ok(None),
            _ => Err(remote(&addr, &response)),
        }
    }

    pub(super) async fn update_offset(
        &self,
        group: String,
        queue: MessageQueue,
        offset: u64,
        update: OffsetUpdate,
    ) -> Result<(), BrokerError> {
        let addr = self.queue_addr(&queue.topic, &queue.broker_name).await?;
        let header = UpdateConsumerOffsetRequestHeader {
            consumer_group: group,
            topic: queue.topic.clone(),
            queue_id: clamp_i32(queue.queue_id),
            commit_offset: clamp_i64(offset),
        };
        let request = RemotingCommand::new_request(rc::UPDATE_CONSUMER_OFFSET)
            .with_ext_fields(header.to_ext());
        match update {
            OffsetUpdate::Acknowledged => self.invoke_ok(&addr, request).await.map(|_| ()),
            OffsetUpdate::Oneway => {
                let timeout = self.inner.config.rpc_timeout;
                match self
                    .inner
                    .client
                    .invoke_oneway(&addr, request, timeout)
                    .await
                {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        self.inner.routes.mark_stale(&addr);
                        Err(client_error(&addr, e))
                    }
                }
            }
        }
    }

    pub(super) async fn send_back(&self, request: SendBackRequest) -> Result<(), BrokerError> {
        // The broker the message came from holds it at `physical_offset`.
        let addr = match (&request.broker_name, &request.origin_topic) {
            (Some(name), topic) => {
                let topic = topic.clone().unwrap_or_else(|| retry_topic(&request.group));
                self.queue_addr(&topic, name).await?
            }
            (None, Some(topic)) => self.broker_addr(topic).await?,
            (None, None) => self.group_addr(&request.group).await?,
        };
        let header = ConsumerSendMsgBackRequestHeader {
            offset: clamp_i64(request.physical_offset),
            group: request.group.clone(),
            delay_level: request.delay_level,
            origin_msg_id: request.origin_msg_id.clone(),
            origin_topic: request.origin_topic.clone(),
            unit_mode: false,
            max_reconsume_times: request.max_reconsume_times.map(clamp_i32),
        };
        let command = RemotingCommand::new_request(rc::CONSUMER_SEND_MSG_BACK)
            .with_ext_fields(header.to_ext());
        self.invoke_ok(&addr, command).await.map(|_| ())
    }

    pub(super) async fn heartbeat(
        &self,
        heartbeat: ConsumerHeartbeat,
        notifier: Arc<dyn ConsumerNotifier>,
    ) -> Result<(), BrokerError> {
        // Registered first: the broker may notify before it answers the heartbeat.
        self.inner.notifiers.borrow_mut().insert(
            (heartbeat.group.clone(), heartbeat.client_id.clone()),
            notifier,
        );
        {
            let mut versions = self.inner.sub_versions.borrow_mut();
            for s in &heartbeat.subscriptions {
                versions.insert((heartbeat.group.clone(), s.topic.clone()), s.sub_version);
            }
        }
        let mut addrs = BTreeSet::new();
        let mut first_error = None;
        // Every master of every subscribed topic learns the subscriptions.
        for s in &heartbeat.subscriptions {
            match self.topic_addrs(&s.topic).await {
                Ok(topic_addrs) => addrs.extend(topic_addrs),
                Err(e) => {
                    warn!(group = %heartbeat.group, topic = %s.topic, error = &e as &dyn std::error::Error, "no broker for a subscribed topic");
                    first_error.get_or_insert(e);
                }
            }
        }
        if addrs.is_empty() {
            match self.inner.routes.last_addr() {
                Some(addr) => {
                    addrs.insert(addr);
                }
                None => {
                    return Err(first_error.unwrap_or_else(|| {
                        Refused::NothingSubscribed {
                            group: heartbeat.group.clone(),
                        }
                        .into()
                    }))
                }
            }
        }
        let body = heartbeat_data(&heartbeat).encode();
        let mut result = Ok(());
        for addr in addrs {
            let request = RemotingCommand::new_request(rc::HEART_BEAT).with_body(body.clone());
            match self.invoke_ok(&addr, request).await {
                Ok(_) => self.registered(&addr, &heartbeat).await,
                Err(e) => {
                    warn!(group = %heartbeat.group, addr, error = &e as &dyn std::error::Error, "heartbeat failed");
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
            }
        }
        result
    }

    pub(super) async fn unregister(
        &self,
        client_id: String,
        group: String,
    ) -> Result<(), BrokerError> {
        let key = (group.clone(), client_id.clone());
        self.inner.notifiers.borrow_mut().remove(&key);
        self.inner
            .registrations
            .borrow_mut()
            .heartbeats
            .remove(&key);
        let mut addrs = self.inner.routes.known_addrs();
        if addrs.is_empty() {
            addrs.insert(self.group_addr(&group).await?);
        }
        let header = UnregisterClientRequestHeader {
            client_id,
            producer_group: None,
            consumer_group: Some(group),
        };
        let mut result = Ok(());
        for addr in addrs {
            let request = RemotingCommand::new_request(rc::UNREGISTER_CLIENT)
                .with_ext_fields(header.to_ext());
            if let Err(e) = self.invoke_ok(&addr, request).await {
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        result
    }

    /// One broker's member list (every broker of a group's topics knows every member, as each
    /// gets every heartbeat); a broker that cannot be reached is replaced by the next known.
    pub(super) async fn consumer_list(&self, group: String) -> Result<Vec<String>, BrokerError> {
        let group = group.as_str();
        let first = self.group_addr(group).await?;
        let mut result = self.consumer_list_at(&first, group).await;
        for addr in self.inner.routes.known_addrs() {
            match &result {
                Err(BrokerError::Remote(
                    RemoteError::Transport { .. } | RemoteError::Timeout { .. },
                )) if addr != first => {
                    debug!(group, addr = %addr, "asking another broker for the member list");
                    result = self.consumer_list_at(&addr, group).await;
                }
                _ => break,
            }
        }
        result
    }

    async fn consumer_list_at(&self, addr: &str, group: &str) -> Result<Vec<String>, BrokerError> {
        let addr = addr.to_owned();
        self.reregister_if_reconnected(&addr).await;
        let header = GetConsumerListByGroupRequestHeader {
            consumer_group: group.to_owned(),
        };
        let request = RemotingCommand::new_request(rc::GET_CONSUMER_LIST_BY_GROUP)
            .with_ext_fields(header.to_ext());
        let response = self.invoke_ok(&addr, request).await?;
        let body = ConsumerListBody::decode(&response.body)
            .map_err(|e| bad_answer(&addr, "consumer list", e))?;
        Ok(body.consumer_id_list)
    }

    /// Groups queues by the master address of the broker that owns them.
    async fn queues_by_addr(
        &self,
        queues: Vec<MessageQueue>,
    ) -> Result<BTreeMap<String, Vec<MessageQueue>>, BrokerError> {
        let mut by_addr: BTreeMap<String, Vec<MessageQueue>> = BTreeMap::new();
        for queue in queues {
            let addr = self.queue_addr(&queue.topic, &queue.broker_name).await?;
            by_addr.entry(addr).or_default().push(queue);
        }
        Ok(by_addr)
    }

    pub(super) async fn lock_queues(
        &self,
        group: String,
        client_id: String,
        queues: Vec<MessageQueue>,
    ) -> Result<Vec<MessageQueue>, BrokerError> {
        let mut locked = Vec::new();
        for (addr, queues) in self.queues_by_addr(queues).await? {
            let body = LockBatchRequestBody {
                consumer_group: group.clone(),
                client_id: client_id.clone(),
                only_this_broker: false,
                mq_set: queues.iter().map(WireQueue::from).collect(),
            };
            let request = RemotingCommand::new_request(rc::LOCK_BATCH_MQ).with_body(body.encode());
            let response = self.invoke_ok(&addr, request).await?;
            let answer = LockBatchResponseBody::decode(&response.body)
                .map_err(|e| bad_answer(&addr, "lock answer", e))?;
            locked.extend(
                answer
                    .lock_ok_mq_set
                    .iter()
                    .filter_map(|q| MessageQueue::try_from(q).ok()),
            );
        }
        Ok(locked)
    }

    pub(super) async fn unlock_queues(
        &self,
        group: String,
        client_id: String,
        queues: Vec<MessageQueue>,
    ) -> Result<(), BrokerError> {
        for (addr, queues) in self.queues_by_addr(queues).await? {
            let body = UnlockBatchRequestBody {
                consumer_group: group.clone(),
                client_id: client_id.clone(),
                only_this_broker: false,
                mq_set: queues.iter().map(WireQueue::from).collect(),
            };
            let request =
                RemotingCommand::new_request(rc::UNLOCK_BATCH_MQ).with_body(body.encode());
            self.invoke_ok(&addr, request).await?;
        }
        Ok(())
    }
}
