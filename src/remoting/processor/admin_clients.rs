//! What the tools ask about connected clients and the broker itself, as Java's
//! `AdminBrokerProcessor` answers it: GET_CONSUMER_CONNECTION_LIST (203),
//! GET_PRODUCER_CONNECTION_LIST (204), QUERY_TOPIC_CONSUME_BY_WHO (300), GET_BROKER_RUNTIME_INFO
//! (28), GET_BROKER_CONFIG (26), and the requests forwarded to one client on its own connection:
//! GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309).

use skiff_actors::refused::Refused;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tracing::debug;

use super::{broker_failure, success, Failure, Outcome, Processor};
use skiff_actors::broker::connections::{ClientDescription, ConnectedConsumer};

use crate::remoting::body::{
    Connection, ConsumerConnection, GroupList, JsonBody, KvTable, ProducerConnection,
    SubscriptionData,
};
use crate::remoting::codes::{response as code, version};
use crate::remoting::conn::InvokeError;
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    ClientTargetRequestHeader, CustomHeader, GetConsumerConnectionListRequestHeader,
    GetProducerConnectionListRequestHeader, TopicRequestHeader,
};
use crate::remoting::server::ConnectionHandle;
use crate::remoting::wire::{consumer_data, physical_offset_of};

/// How long the broker waits for a client's answer to a forwarded request (Java's
/// `Broker2Client.callClient`).
pub(super) const CALL_CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// A client as a connection listing shows it. A client that names its version only (gRPC)
/// shows version 0, unknown.
fn listed_connection(client_id: &str, description: &ClientDescription) -> Connection {
    Connection {
        client_id: client_id.to_owned(),
        client_addr: description.address.clone(),
        language: description.language.clone(),
        version: description.version_code,
    }
}

impl Processor {
    /// GET_CONSUMER_CONNECTION_LIST (203): the group's connected consumers with their
    /// subscriptions; CONSUMER_NOT_ONLINE when none is.
    pub(super) async fn consumer_connections(&self, request: &RemotingCommand) -> Outcome {
        let header = GetConsumerConnectionListRequestHeader::from_command(request)?;
        let group = header.name;
        // Membership decides who is still in the group (heartbeat expiry included).
        let members: BTreeSet<String> = match self.broker.consumer_list(group.clone()).await {
            Ok(ids) => ids.into_iter().collect(),
            Err(skiff_actors::broker_api::BrokerError::Refused(Refused::NoConsumer { .. })) => {
                BTreeSet::new()
            }
            Err(e) => return Err(broker_failure(e)),
        };
        let online: Vec<ConnectedConsumer> = self
            .broker
            .connections()
            .consumers_of(&group)
            .into_iter()
            .filter(|c| members.contains(&c.consumer.client_id))
            .collect();
        let Some(first) = online.first() else {
            return Err(Failure::new(
                code::CONSUMER_NOT_ONLINE,
                format!("the consumer group[{group}] not online"),
            ));
        };
        let first = consumer_data(&first.consumer);
        let mut body = ConsumerConnection {
            consume_type: first.consume_type,
            message_model: first.message_model,
            consume_from_where: first.consume_from_where,
            ..ConsumerConnection::default()
        };
        let mut subscriptions: BTreeMap<String, SubscriptionData> = BTreeMap::new();
        for client in &online {
            body.connection_set.push(listed_connection(
                &client.consumer.client_id,
                &client.description,
            ));
            for sub in consumer_data(&client.consumer).subscription_data_set {
                let newer = subscriptions
                    .get(&sub.topic)
                    .is_none_or(|known| known.sub_version < sub.sub_version);
                if newer {
                    subscriptions.insert(sub.topic.clone(), sub);
                }
            }
        }
        body.subscription_table = subscriptions;
        Ok(success().with_body(body.encode()))
    }

    /// GET_PRODUCER_CONNECTION_LIST (204): the group's connected producers; SYSTEM_ERROR when
    /// the group has none.
    pub(super) fn producer_connections(&self, request: &RemotingCommand) -> Outcome {
        let header = GetProducerConnectionListRequestHeader::from_command(request)?;
        // gRPC producers are registered under their topics' names.
        let connection_set: Vec<Connection> = self
            .broker
            .connections()
            .producer_descriptions(&header.name)
            .iter()
            .map(|(client_id, description)| listed_connection(client_id, description))
            .collect();
        if connection_set.is_empty() {
            return Err(Failure::system(format!(
                "the producer group[{}] not exist",
                header.name
            )));
        }
        let body = ProducerConnection { connection_set };
        Ok(success().with_body(body.encode()))
    }

    /// QUERY_TOPIC_CONSUME_BY_WHO (300): groups with a connected consumer of the topic (over
    /// any door) plus groups with an offset stored for it.
    pub(super) async fn topic_consumed_by(&self, request: &RemotingCommand) -> Outcome {
        let header = TopicRequestHeader::from_command(request)?;
        let mut groups: BTreeSet<String> =
            self.broker.connections().groups_subscribing(&header.name);
        groups.extend(
            self.broker
                .groups_with_offsets(&header.name)
                .await
                .map_err(broker_failure)?,
        );
        let body = GroupList {
            group_list: groups.into_iter().collect(),
        };
        Ok(success().with_body(body.encode()))
    }

    /// GET_BROKER_RUNTIME_INFO (28): Java's runtime keys, with the values skiff has (message
    /// totals from the queues' max offsets; rates and thread-pool figures are 0).
    pub(super) fn runtime_info(&self) -> Outcome {
        let reader = self.broker.reader();
        // Figures, not state: a listing that fails leaves them at 0 rather than failing the
        // whole answer.
        let queues = reader.queues().unwrap_or_else(|e| {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "listing the consume queues failed"
            );
            Vec::new()
        });
        let put_total: u64 = queues
            .iter()
            .map(|(topic, queue_id)| reader.max_offset(topic, *queue_id))
            .sum();
        let earliest = queues
            .iter()
            .filter_map(|(topic, queue_id)| {
                let min = reader.min_offset(topic, *queue_id);
                reader
                    .store_timestamp_at(topic, *queue_id, min)
                    .ok()
                    .flatten()
            })
            .min()
            .unwrap_or(0);
        let mut table = BTreeMap::new();
        let mut put = |key: &str, value: String| {
            table.insert(key.to_owned(), value);
        };
        put("brokerVersionDesc", version::desc(version::CURRENT));
        put("brokerVersion", version::CURRENT.to_string());
        put("brokerActive", "true".to_owned());
        put("bootTimestamp", self.started_ms.to_string());
        put(
            "startAcceptSendRequestTimeStamp",
            self.started_ms.to_string(),
        );
        put("msgPutTotalYesterdayMorning", "0".to_owned());
        put("msgPutTotalTodayMorning", "0".to_owned());
        put("msgPutTotalTodayNow", put_total.to_string());
        put("msgGetTotalYesterdayMorning", "0".to_owned());
        put("msgGetTotalTodayMorning", "0".to_owned());
        put("msgGetTotalTodayNow", "0".to_owned());
        for tps in [
            "putTps",
            "getFoundTps",
            "getMissTps",
            "getTransferredTps",
            "getTotalTps",
        ] {
            put(tps, "0.0 0.0 0.0".to_owned());
        }
        put("earliestMessageTimeStamp", earliest.to_string());
        put("commitLogDiskRatio", "0.0".to_owned());
        put("commitLogMinOffset", reader.commit_log_start().to_string());
        put("commitLogMaxOffset", reader.commit_log_end().to_string());
        put("dispatchBehindBytes", "0".to_owned());
        put("pageCacheLockTimeMills", "0".to_owned());
        for pool in ["send", "pull", "litePull", "query", "ack"] {
            put(&format!("{pool}ThreadPoolQueueSize"), "0".to_owned());
            put(&format!("{pool}ThreadPoolQueueCapacity"), "0".to_owned());
            put(
                &format!("{pool}ThreadPoolQueueHeadWaitTimeMills"),
                "0".to_owned(),
            );
        }
        put("EndTransactionQueueSize", "0".to_owned());
        put("EndTransactionThreadPoolQueueCapacity", "0".to_owned());
        put("remainHowManyDataToFlush", "0 B".to_owned());
        put("remainHowManyDataToCommit", "0 B".to_owned());
        put("remainTransientStoreBufferNumbs", "0".to_owned());
        for timer in ["timerReadBehind", "timerOffsetBehind", "timerCongestNum"] {
            put(timer, "0".to_owned());
        }
        put("timerEnqueueTps", "0.0".to_owned());
        put("timerDequeueTps", "0.0".to_owned());
        Ok(success().with_body(KvTable { table }.encode()))
    }

    /// GET_BROKER_CONFIG (26): the settings as Java-named `key=value` lines; header `version`.
    pub(super) fn broker_config(&self, conn: &ConnectionHandle) -> Outcome {
        let config = self.broker.config();
        let reachable = self.reachable_addr(conn);
        let (ip, port) = reachable
            .rsplit_once(':')
            .unwrap_or((reachable.as_str(), ""));
        let settings = [
            ("brokerClusterName", config.cluster_name.clone()),
            ("brokerName", config.broker_name.clone()),
            ("brokerId", "0".to_owned()),
            ("brokerRole", "ASYNC_MASTER".to_owned()),
            ("brokerIP1", ip.to_owned()),
            ("listenPort", port.to_owned()),
            ("namesrvAddr", reachable.clone()),
            (
                "autoCreateTopicEnable",
                config.auto_create_topic.to_string(),
            ),
            (
                "autoCreateSubscriptionGroup",
                config.auto_create_subscription_group.to_string(),
            ),
            (
                "defaultTopicQueueNums",
                config.default_topic_queue_nums.to_string(),
            ),
            ("longPollingEnable", config.long_polling.to_string()),
            (
                "channelExpiredTimeout",
                config.channel_expiry.as_millis().to_string(),
            ),
            (
                "flushConsumerOffsetInterval",
                config
                    .flush_consumer_offset_interval
                    .as_millis()
                    .to_string(),
            ),
            (
                "maxTransferCountOnMessageInMemory",
                config.max_pull_messages.to_string(),
            ),
            (
                "maxTransferBytesOnMessageInMemory",
                config.max_pull_bytes.to_string(),
            ),
        ];
        let text: String = settings.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        let data_version = serde_json::json!({
            "stateVersion": 0,
            "timestamp": self.started_ms,
            "counter": 0,
        })
        .to_string();
        Ok(success().with_ext("version", data_version).with_body(text))
    }

    /// GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309): forwarded with the
    /// same code, ext fields and body to the named client on its own connection, whose answer is
    /// the answer. A client that is not connected is SYSTEM_ERROR, one that does not answer in
    /// 10 s CONSUME_MSG_TIMEOUT. CONSUME_MESSAGE_DIRECTLY carries the stored message its
    /// `msgId` (an offset message id) names.
    pub(super) async fn call_consumer(&self, request: &RemotingCommand) -> Outcome {
        let header = ClientTargetRequestHeader::from_command(request)?;
        let (group, client_id) = (&header.consumer_group, &header.client_id);
        let handle = self
            .broker
            .connections()
            .connection_of_consumer(group, client_id)
            .and_then(|id| self.clients.borrow().handle(id));
        let Some(handle) = handle else {
            return Err(Failure::system(format!(
                "The Consumer <{group}> <{client_id}> not online"
            )));
        };
        let mut forwarded = RemotingCommand::new_request(request.code)
            .with_ext_fields(request.ext_fields.clone())
            .with_body(request.body.clone());
        if request.code == crate::remoting::codes::request::CONSUME_MESSAGE_DIRECTLY {
            forwarded = forwarded
                .with_ext("brokerName", self.broker.config().broker_name.clone())
                .with_body(self.message_by_offset_id(request)?);
        }
        match handle.invoke(forwarded, CALL_CLIENT_TIMEOUT).await {
            Ok(answer) => Ok(answer),
            Err(e @ InvokeError::Timeout { .. }) => {
                debug!(group = %group, client_id = %client_id, error = %e, "forwarded request timed out");
                Err(Failure::new(
                    code::CONSUME_MSG_TIMEOUT,
                    format!("consumer <{group}> <{client_id}> Timeout: {e}"),
                ))
            }
            Err(e) => Err(Failure::system(format!(
                "invoke consumer <{group}> <{client_id}> Exception: {e}"
            ))),
        }
    }

    /// The stored record an offset message id (`msgId` ext field) points at.
    fn message_by_offset_id(&self, request: &RemotingCommand) -> Result<bytes::Bytes, Failure> {
        let msg_id = request.ext_fields.get("msgId").map(String::as_str);
        let offset = msg_id.and_then(physical_offset_of);
        let not_found = || {
            Failure::system(format!(
                "can not find message by the offset message id {}",
                msg_id.unwrap_or("")
            ))
        };
        let offset = offset.ok_or_else(not_found)?;
        self.broker
            .reader()
            .raw_record_at(offset)
            .map_err(|e| broker_failure(e.into()))?
            .ok_or_else(not_found)
    }
}
