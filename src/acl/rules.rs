//! What each request needs, as RocketMQ's broker decides it: a send needs PUB on its topic, a
//! read SUB on its topic and its group (an offset or stats read ACL 2.0's Get, an offset
//! commit its Update, which the ACL file knows as SUB), and so on; a retry topic
//! (`%RETRY%group`) stands for its group. [`remoting_need`] reads it from a remoting request's header fields and, for the
//! few requests that name their groups and topics only in the body, from the body; the gRPC
//! service asks [`send_checks`], [`consume_checks`] and [`route_checks`] once it has read a
//! call's topic and group. Name-server lookups need nothing, as RocketMQ's name server checks no
//! signature; every remoting request not listed here changes or reveals the broker as a whole
//! and needs an admin account of the ACL file, or of an ACL 2.0 user what [`admin_checks`]
//! says (Apache 5.5's `DefaultAuthorizationContextBuilder` and its header annotations).

use super::{Action, AdminCheck, Check, Need};
use crate::remoting::body::{
    BatchAckBody, HeartbeatData, JsonBody, LockBatchRequestBody, QueryAssignmentBody,
    SetMessageRequestModeBody, UnlockBatchRequestBody,
};
use crate::remoting::codes::request as code;
use crate::remoting::RemotingCommand;
use skiff_actors::logic::delay::is_retry_topic;

/// What serving `request` takes; `cluster` is the node's cluster, which the ACL 2.0 rule of
/// some admin requests names.
pub fn remoting_need(request: &RemotingCommand, cluster: &str) -> Need {
    let field = |name: &str| request.ext(name).unwrap_or("");
    let checks = match request.code {
        code::GET_ROUTEINFO_BY_TOPIC
        | code::GET_BROKER_CLUSTER_INFO
        | code::GET_ALL_TOPIC_LIST_FROM_NAMESERVER
        | code::GET_KV_CONFIG
        | code::GET_SYSTEM_TOPIC_LIST_FROM_NS => return Need::Nothing,
        code::SEND_MESSAGE | code::SEND_REPLY_MESSAGE => {
            send_checks(field("topic"), field("producerGroup"))
        }
        code::SEND_MESSAGE_V2 | code::SEND_BATCH_MESSAGE | code::SEND_REPLY_MESSAGE_V2 => {
            send_checks(field("b"), field("a"))
        }
        code::END_TRANSACTION => optional_topic(field("topic"), Action::Pub),
        code::RECALL_MESSAGE => vec![Check::topic(field("topic"), Action::Pub)],
        code::CONSUMER_SEND_MSG_BACK => vec![Check::group(field("group"), Action::Sub)],
        code::PULL_MESSAGE
        | code::LITE_PULL_MESSAGE
        | code::POP_MESSAGE
        | code::ACK_MESSAGE
        | code::CHANGE_MESSAGE_INVISIBLETIME
        | code::NOTIFICATION => consume_checks(field("topic"), field("consumerGroup")),
        code::QUERY_CONSUMER_OFFSET => {
            group_reads(field("topic"), field("consumerGroup"), Action::SubOrGet)
        }
        code::UPDATE_CONSUMER_OFFSET => {
            group_reads(field("topic"), field("consumerGroup"), Action::SubOrUpdate)
        }
        code::QUERY_MESSAGE => vec![Check::topic(field("topic"), Action::SubOrGet)],
        code::SEARCH_OFFSET_BY_TIMESTAMP
        | code::GET_MAX_OFFSET
        | code::GET_MIN_OFFSET
        | code::GET_EARLIEST_MSG_STORETIME
        | code::GET_TOPIC_STATS_INFO
        | code::GET_TOPIC_CONFIG
        | code::QUERY_TOPIC_CONSUME_BY_WHO => vec![Check::topic(field("topic"), Action::Get)],
        code::VIEW_MESSAGE_BY_ID => optional_topic(field("topic"), Action::Get),
        code::GET_CONSUMER_LIST_BY_GROUP => {
            vec![Check::group(field("consumerGroup"), Action::SubOrGet)]
        }
        code::GET_CONSUMER_CONNECTION_LIST => {
            vec![Check::group(field("consumerGroup"), Action::Get)]
        }
        code::GET_CONSUME_STATS => {
            let mut checks = optional_topic(field("topic"), Action::Get);
            checks.push(Check::group(field("consumerGroup"), Action::Get));
            checks
        }
        code::UNREGISTER_CLIENT => optional_group(field("consumerGroup")),
        // Checked against the broker's subscription rules; naming a group changes nothing.
        code::CHECK_CLIENT_CONFIG => Vec::new(),
        code::HEART_BEAT => match HeartbeatData::decode(&request.body) {
            Ok(heartbeat) => heartbeat
                .consumer_data_set
                .iter()
                .flat_map(|consumer| {
                    let topics = consumer
                        .subscription_data_set
                        .iter()
                        .filter(|s| !is_retry_topic(&s.topic))
                        .map(|s| Check::topic(&s.topic, Action::Sub));
                    std::iter::once(Check::group(&consumer.group_name, Action::Sub)).chain(topics)
                })
                .collect(),
            // The processor answers an undecodable body; there is nothing to grant.
            Err(_) => Vec::new(),
        },
        code::LOCK_BATCH_MQ => match LockBatchRequestBody::decode(&request.body) {
            Ok(body) => queues_of_group(
                &body.consumer_group,
                body.mq_set.iter().map(|q| q.topic.as_str()),
            ),
            Err(_) => Vec::new(),
        },
        code::UNLOCK_BATCH_MQ => match UnlockBatchRequestBody::decode(&request.body) {
            Ok(body) => queues_of_group(
                &body.consumer_group,
                body.mq_set.iter().map(|q| q.topic.as_str()),
            ),
            Err(_) => Vec::new(),
        },
        code::QUERY_ASSIGNMENT => match QueryAssignmentBody::decode(&request.body) {
            Ok(body) => consume_checks(&body.topic, &body.consumer_group),
            Err(_) => Vec::new(),
        },
        code::SET_MESSAGE_REQUEST_MODE => match SetMessageRequestModeBody::decode(&request.body) {
            Ok(body) => consume_checks(&body.topic, &body.consumer_group),
            Err(_) => Vec::new(),
        },
        code::BATCH_ACK_MESSAGE => match BatchAckBody::decode(&request.body) {
            Ok(body) => body
                .acks
                .iter()
                .flat_map(|ack| consume_checks(&ack.topic, &ack.consumer_group))
                .collect(),
            Err(_) => Vec::new(),
        },
        _ => return Need::Admin(admin_checks(request, cluster)),
    };
    Need::Access(checks)
}

/// What an admin request needs of an ACL 2.0 user who is not a super user, as Apache 5.5
/// decides it: users and ACLs need `Update` (changes) or `Get` (reads) on `Cluster:<cluster>`,
/// a topic's creation `Create` on the topic, and so on. Empty: any signed user, as Apache checks
/// nothing for the broker-wide reads clients and dashboards make and for group creation. Where
/// Apache checks nothing but the request changes the broker (its config), skiff asks `Update`
/// on the cluster.
pub fn admin_checks(request: &RemotingCommand, cluster: &str) -> Vec<AdminCheck> {
    use super::policy::{Action as A, ResourceType as T};
    let field = |name: &str| request.ext(name).unwrap_or("");
    let on = |kind, name: &str, action| AdminCheck {
        kind,
        name: name.to_owned(),
        action,
    };
    match request.code {
        code::AUTH_GET_USER
        | code::AUTH_LIST_USER
        | code::AUTH_GET_ACL
        | code::AUTH_LIST_ACL
        | code::GET_PRODUCER_CONNECTION_LIST
        | code::GET_BROKER_LITE_INFO
        | code::GET_PARENT_TOPIC_INFO
        | code::GET_LITE_TOPIC_INFO
        | code::GET_LITE_CLIENT_INFO
        | code::GET_LITE_GROUP_INFO
        | code::LIST_LITE_TOPICS => vec![on(T::Cluster, cluster, A::Get)],
        code::UPDATE_AND_CREATE_TOPIC => vec![on(T::Topic, field("topic"), A::Create)],
        code::DELETE_TOPIC_IN_BROKER => vec![on(T::Topic, field("topic"), A::Delete)],
        code::DELETE_SUBSCRIPTIONGROUP => vec![on(T::Group, field("groupName"), A::Delete)],
        code::GET_CONSUMER_RUNNING_INFO => {
            vec![on(T::Group, field("consumerGroup"), A::Get)]
        }
        code::INVOKE_BROKER_TO_RESET_OFFSET => vec![
            on(T::Group, field("group"), A::Update),
            on(T::Topic, field("topic"), A::Update),
        ],
        code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
        | code::GET_ALL_TOPIC_CONFIG
        | code::GET_ALL_SUBSCRIPTIONGROUP_CONFIG
        | code::GET_BROKER_RUNTIME_INFO
        | code::GET_BROKER_CONFIG => Vec::new(),
        _ => vec![on(T::Cluster, cluster, A::Update)],
    }
}

/// Looking a topic's route up: PUB or SUB on it, or for a retry topic SUB on its group.
pub fn route_checks(topic: &str) -> Vec<Check> {
    if is_retry_topic(topic) {
        vec![Check::group(topic, Action::Sub)]
    } else {
        vec![Check::topic(topic, Action::PubOrSub)]
    }
}

/// A send: PUB on the topic, or, for a message back to a retry topic, SUB on its group.
pub fn send_checks(topic: &str, group: &str) -> Vec<Check> {
    if is_retry_topic(topic) {
        let group = if group.is_empty() { topic } else { group };
        vec![Check::group(group, Action::Sub)]
    } else {
        vec![Check::topic(topic, Action::Pub)]
    }
}

/// A read by a group: SUB on the group and on the topic, unless it is the group's retry topic.
pub fn consume_checks(topic: &str, group: &str) -> Vec<Check> {
    group_reads(topic, group, Action::Sub)
}

/// `action` on the group and on the topic, unless it is the group's retry topic: a group's
/// offsets read (SUB, or ACL 2.0's Get) or committed (SUB, or Update).
fn group_reads(topic: &str, group: &str, action: Action) -> Vec<Check> {
    let mut checks = Vec::with_capacity(2);
    if !is_retry_topic(topic) {
        checks.push(Check::topic(topic, action));
    }
    checks.push(Check::group(group, action));
    checks
}

fn queues_of_group<'a>(group: &str, topics: impl Iterator<Item = &'a str>) -> Vec<Check> {
    std::iter::once(Check::group(group, Action::Sub))
        .chain(
            topics
                .filter(|t| !is_retry_topic(t))
                .map(|t| Check::topic(t, Action::Sub)),
        )
        .collect()
}

fn optional_topic(topic: &str, action: Action) -> Vec<Check> {
    if topic.is_empty() {
        Vec::new()
    } else {
        vec![Check::topic(topic, action)]
    }
}

fn optional_group(group: &str) -> Vec<Check> {
    if group.is_empty() {
        Vec::new()
    } else {
        vec![Check::group(group, Action::Sub)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(code: i32, fields: &[(&str, &str)]) -> RemotingCommand {
        let mut r = RemotingCommand::new_request(code);
        for (k, v) in fields {
            r = r.with_ext(*k, *v);
        }
        r
    }

    #[test]
    fn sends_need_pub_on_their_topic_and_retry_sends_sub_on_the_group() {
        assert_eq!(
            remoting_need(
                &request(code::SEND_MESSAGE_V2, &[("a", "PG"), ("b", "orders")]),
                "DefaultCluster"
            ),
            Need::Access(vec![Check::topic("orders", Action::Pub)])
        );
        assert_eq!(
            remoting_need(
                &request(
                    code::SEND_MESSAGE,
                    &[("topic", "%RETRY%GID_a"), ("producerGroup", "")]
                ),
                "DefaultCluster"
            ),
            Need::Access(vec![Check::group("GID_a", Action::Sub)])
        );
    }

    #[test]
    fn reads_need_sub_on_topic_and_group_but_a_retry_topic_only_its_group() {
        assert_eq!(
            remoting_need(
                &request(
                    code::PULL_MESSAGE,
                    &[("topic", "orders"), ("consumerGroup", "GID_a")]
                ),
                "DefaultCluster"
            ),
            Need::Access(vec![
                Check::topic("orders", Action::Sub),
                Check::group("GID_a", Action::Sub)
            ])
        );
        assert_eq!(
            remoting_need(
                &request(
                    code::PULL_MESSAGE,
                    &[("topic", "%RETRY%GID_a"), ("consumerGroup", "GID_a")]
                ),
                "DefaultCluster"
            ),
            Need::Access(vec![Check::group("GID_a", Action::Sub)])
        );
    }

    #[test]
    fn a_heartbeat_needs_sub_on_each_consumer_group_and_its_topics() {
        let mut r = request(code::HEART_BEAT, &[]);
        r.body = bytes::Bytes::from_static(
            br#"{"clientID":"c1","consumerDataSet":[{"groupName":"GID_a","subscriptionDataSet":[{"topic":"orders","subString":"*"},{"topic":"%RETRY%GID_a","subString":"*"}]}],"producerDataSet":[{"groupName":"PG"}]}"#,
        );
        assert_eq!(
            remoting_need(&r, "DefaultCluster"),
            Need::Access(vec![
                Check::group("GID_a", Action::Sub),
                Check::topic("orders", Action::Sub)
            ])
        );
    }

    #[test]
    fn name_server_lookups_need_nothing_and_admin_requests_an_admin() {
        assert_eq!(
            remoting_need(
                &request(code::GET_ROUTEINFO_BY_TOPIC, &[("topic", "orders")]),
                "DefaultCluster"
            ),
            Need::Nothing
        );
        for admin in [
            code::UPDATE_AND_CREATE_TOPIC,
            code::DELETE_TOPIC_IN_BROKER,
            code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            code::DELETE_SUBSCRIPTIONGROUP,
            code::INVOKE_BROKER_TO_RESET_OFFSET,
            code::GET_BROKER_CONFIG,
            code::REGISTER_BROKER,
            code::AUTH_CREATE_USER,
            99_999,
        ] {
            assert!(
                matches!(remoting_need(&request(admin, &[]), "C"), Need::Admin(_)),
                "code {admin}"
            );
        }
    }

    #[test]
    fn an_acl_2_user_needs_apaches_action_for_each_admin_request() {
        use crate::acl::policy::{Action as A, ResourceType as T};
        let checks = |code: i32, fields: &[(&str, &str)]| -> Vec<(T, String, A)> {
            admin_checks(&request(code, fields), "DefaultCluster")
                .into_iter()
                .map(|c| (c.kind, c.name, c.action))
                .collect()
        };
        let cluster = |action| vec![(T::Cluster, "DefaultCluster".to_owned(), action)];
        assert_eq!(checks(code::AUTH_CREATE_USER, &[]), cluster(A::Update));
        assert_eq!(checks(code::AUTH_DELETE_ACL, &[]), cluster(A::Update));
        assert_eq!(checks(code::AUTH_LIST_USER, &[]), cluster(A::Get));
        assert_eq!(checks(code::AUTH_GET_ACL, &[]), cluster(A::Get));
        assert_eq!(
            checks(code::UPDATE_AND_CREATE_TOPIC, &[("topic", "orders")]),
            vec![(T::Topic, "orders".to_owned(), A::Create)]
        );
        assert_eq!(
            checks(code::DELETE_SUBSCRIPTIONGROUP, &[("groupName", "G")]),
            vec![(T::Group, "G".to_owned(), A::Delete)]
        );
        // Apache checks nothing for these; a config change still needs the cluster.
        assert!(checks(code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, &[]).is_empty());
        assert!(checks(code::GET_ALL_TOPIC_CONFIG, &[]).is_empty());
        assert_eq!(checks(25, &[]), cluster(A::Update));
    }
}
