//! QueryRoute and QueryAssignment: the queues a client sees, with the message types each takes.

use skiff_actors::refused::Refused;
use skiff_storage::metadata::{TopicMessageType, PERM_READ, PERM_WRITE};

use super::{bad_request, Caller, GrpcService};
use crate::acl::rules;
use crate::grpc::pb::{self, Code};
use crate::grpc::resource;
use crate::grpc::status::{ok, status};

impl GrpcService {
    /// QueryRoute: every queue of the topic on this broker, at the endpoints the client dialled.
    pub(super) async fn route(
        &self,
        caller: Caller,
        request: pb::QueryRouteRequest,
    ) -> Result<pb::QueryRouteResponse, pb::Status> {
        let Some(topic) = request.topic else {
            return Err(status(Code::IllegalTopic, "the request names no topic"));
        };
        let stored = resource::stored(&topic);
        caller.authorize(rules::route_checks(&stored))?;
        let (route, perm, message_type) = self
            .broker(move |broker| async move {
                let route = broker.route(stored.clone()).await?;
                let config = broker.topic(&stored)?;
                let perm = config.as_ref().map_or(PERM_READ | PERM_WRITE, |t| t.perm);
                Ok((route, perm, config.and_then(|t| t.message_type)))
            })
            .await?;
        let mut queues = Vec::new();
        for brokers in &route.brokers {
            let count = brokers.read_queue_nums.max(brokers.write_queue_nums);
            for id in 0..count {
                let read = id < brokers.read_queue_nums && perm & PERM_READ != 0;
                let write = id < brokers.write_queue_nums && perm & PERM_WRITE != 0;
                let permission = match (read, write) {
                    (true, true) => pb::Permission::ReadWrite,
                    (true, false) => pb::Permission::Read,
                    (false, true) => pb::Permission::Write,
                    (false, false) => pb::Permission::None,
                };
                queues.push(pb::MessageQueue {
                    topic: Some(resource::resource(&route.topic)),
                    id: id as i32,
                    permission: permission as i32,
                    broker: Some(pb::Broker {
                        name: brokers.broker_name.clone(),
                        id: 0,
                        // The endpoints the client dialled reach this broker.
                        endpoints: request.endpoints.clone(),
                    }),
                    accept_message_types: accepted_types(message_type),
                });
            }
        }
        Ok(pb::QueryRouteResponse {
            status: Some(ok()),
            message_queues: queues,
        })
    }

    /// QueryAssignment: a FIFO group pops each queue in order; any other pops the topic as one
    /// (queue -1).
    pub(super) async fn assignment(
        &self,
        caller: Caller,
        request: pb::QueryAssignmentRequest,
    ) -> Result<pb::QueryAssignmentResponse, pb::Status> {
        let (Some(topic), Some(group)) = (request.topic.as_ref(), request.group.as_ref()) else {
            return Err(bad_request("the request names no topic or no group"));
        };
        let stored_topic = resource::stored(topic);
        let stored_group = resource::stored(group);
        caller.authorize(rules::consume_checks(&stored_topic, &stored_group))?;
        let (config, orderly) = self
            .broker(move |broker| async move {
                let topic = broker.topic(&stored_topic)?.ok_or(Refused::TopicNotExist {
                    topic: stored_topic.clone(),
                })?;
                let orderly = broker
                    .group(&stored_group)?
                    .is_some_and(|g| g.consume_message_orderly);
                Ok((topic, orderly))
            })
            .await?;
        if !config.is_readable() || config.read_queue_nums == 0 {
            return Err(status(
                Code::Forbidden,
                format!("topic {} has no readable queue", topic.name),
            ));
        }
        let queue = |id: i32| pb::Assignment {
            message_queue: Some(pb::MessageQueue {
                topic: Some(resource::resource(&config.name)),
                id,
                permission: pb::Permission::ReadWrite as i32,
                broker: Some(pb::Broker {
                    name: self.config.broker_name.clone(),
                    id: 0,
                    endpoints: request.endpoints.clone(),
                }),
                accept_message_types: accepted_types(config.message_type),
            }),
        };
        let assignments = if orderly {
            (0..config.read_queue_nums as i32).map(queue).collect()
        } else {
            vec![queue(-1)]
        };
        Ok(pb::QueryAssignmentResponse {
            status: Some(ok()),
            assignments,
        })
    }
}

/// The message types a topic takes: the one its `message.type` attribute names, or every one
/// when it names none (an auto-created topic, as a dev broker should) or MIXED.
pub(super) fn accepted_types(message_type: Option<TopicMessageType>) -> Vec<i32> {
    let one = |t: pb::MessageType| vec![t as i32];
    match message_type {
        Some(TopicMessageType::Normal) => one(pb::MessageType::Normal),
        Some(TopicMessageType::Fifo) => one(pb::MessageType::Fifo),
        Some(TopicMessageType::Delay) => one(pb::MessageType::Delay),
        Some(TopicMessageType::Transaction) => one(pb::MessageType::Transaction),
        Some(TopicMessageType::Mixed) | None => vec![
            pb::MessageType::Normal as i32,
            pb::MessageType::Fifo as i32,
            pb::MessageType::Delay as i32,
            pb::MessageType::Transaction as i32,
        ],
    }
}
