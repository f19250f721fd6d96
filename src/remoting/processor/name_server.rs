//! Name-server requests: skiff answers as a name server that knows one broker, itself.

use super::{broker_failure, failure_to, success, suggest_todo, Failure, Outcome, Processor};
use crate::listener::reachable::reachable_addr;
use crate::remoting::body::{BrokerData, QueueData, TopicRouteData};
use crate::remoting::codes::{request as rc, response as code, version, AUTO_CREATE_TOPIC_KEY};
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    CustomHeader, GetKvConfigRequestHeader, GetRouteInfoRequestHeader, TopicRequestHeader,
};
use crate::remoting::server::ConnectionHandle;
use crate::remoting::wire::clamp_i32;
use std::collections::BTreeMap;

/// `PermName`: inherit 1, write 2, read 4.
const PERM_RW: i32 = 6;
const PERM_INHERIT_RW: i32 = 7;

impl Processor {
    /// The address this broker is reached at, as routes and cluster listings name it (see
    /// [`reachable_addr`]).
    pub(super) fn reachable_addr(&self, conn: &ConnectionHandle) -> String {
        reachable_addr(&self.broker.config().listen_addr, conn.local_addr())
    }

    /// GET_ROUTEINFO_BY_TOPIC (105): one broker, this listener, as master.
    pub(super) async fn route(
        &self,
        conn: &ConnectionHandle,
        request: &RemotingCommand,
    ) -> Outcome {
        let header = GetRouteInfoRequestHeader::from_command(request)?;
        let config = self.broker.config();
        let (read, write, perm) = if header.topic == AUTO_CREATE_TOPIC_KEY {
            // Producers ask for it to fall back to auto-creation; it exists only when enabled.
            if !config.auto_create_topic {
                return Err(no_route(&header.topic));
            }
            let queues = config.default_topic_queue_nums;
            (queues, queues, PERM_INHERIT_RW)
        } else {
            let route = self
                .broker
                .route(header.topic.clone())
                .await
                .map_err(failure_to(rc::GET_ROUTEINFO_BY_TOPIC))?;
            (route.read_queue_nums(), route.write_queue_nums(), PERM_RW)
        };
        let route = TopicRouteData {
            order_topic_conf: None,
            queue_datas: vec![QueueData {
                broker_name: config.broker_name.clone(),
                read_queue_nums: clamp_i32(read),
                write_queue_nums: clamp_i32(write),
                perm,
                topic_sys_flag: 0,
            }],
            broker_datas: vec![self.broker_data(conn)],
            filter_server_table: BTreeMap::new(),
            topic_queue_mapping_by_broker: None,
        };
        let standard = header.wants_standard_json(request.version);
        Ok(success().with_body(route.encode_route(standard)))
    }

    fn broker_data(&self, conn: &ConnectionHandle) -> BrokerData {
        let config = self.broker.config();
        BrokerData {
            cluster: config.cluster_name.clone(),
            broker_name: config.broker_name.clone(),
            broker_addrs: BTreeMap::from([(0, self.reachable_addr(conn))]),
            zone_name: None,
            enable_acting_master: false,
        }
    }

    /// GET_BROKER_CLUSTER_INFO (106): `ClusterInfo` with this one broker.
    pub(super) fn cluster_info(
        &self,
        conn: &ConnectionHandle,
        request: &RemotingCommand,
    ) -> Outcome {
        let config = self.broker.config();
        let broker = self.broker_data(conn);
        let body = serde_json::json!({
            "brokerAddrTable": { config.broker_name.clone(): broker },
            "clusterAddrTable": { config.cluster_name.clone(): [config.broker_name.clone()] },
        })
        .to_string();
        let body = if request.version >= version::V4_9_4 {
            body
        } else {
            // fastjson's default form, as a Java name server sends it to older clients.
            body.replace("\"brokerAddrs\":{\"0\":", "\"brokerAddrs\":{0:")
        };
        Ok(success().with_body(body))
    }

    /// GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206): `TopicList`.
    pub(super) fn topic_list(&self) -> Outcome {
        let topics = self.broker.topics().map_err(broker_failure)?;
        let names: Vec<String> = topics.into_iter().map(|t| t.name).collect();
        let body = serde_json::json!({ "topicList": names }).to_string();
        Ok(success().with_body(body))
    }
}

impl Processor {
    /// GET_SYSTEM_TOPIC_LIST_FROM_NS (304): `TopicList` of the cluster and broker names (which a
    /// Java broker keeps as topics). No `brokerAddr`, so tools do not ask the broker for more.
    pub(super) fn system_topic_list(&self) -> Outcome {
        let config = self.broker.config();
        let body = serde_json::json!({
            "topicList": [config.cluster_name.clone(), config.broker_name.clone()],
        })
        .to_string();
        Ok(success().with_body(body))
    }
}

/// DELETE_TOPIC_IN_NAMESRV (216): skiff's routes come from the broker's topic configs, which
/// DELETE_TOPIC_IN_BROKER already removed, so there is nothing more to forget.
pub(super) fn delete_topic_route(request: &RemotingCommand) -> Outcome {
    TopicRequestHeader::from_command(request)?;
    Ok(success())
}

/// GET_KV_CONFIG (101): skiff keeps no name-server KV config, so every key is missing
/// (QUERY_NOT_FOUND with Java's remark).
pub(super) fn kv_config(request: &RemotingCommand) -> Outcome {
    let header = GetKvConfigRequestHeader::from_command(request)?;
    Err(Failure::new(
        code::QUERY_NOT_FOUND,
        format!(
            "No config item, Namespace: {} Key: {}",
            header.namespace, header.key
        ),
    ))
}

fn no_route(topic: &str) -> Failure {
    Failure::new(
        code::TOPIC_NOT_EXIST,
        format!(
            "No topic route info in name server for the topic: {topic}{}",
            suggest_todo()
        ),
    )
}
