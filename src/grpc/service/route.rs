//! QueryRoute and QueryAssignment: the queues a client sees, with the message types each takes.

use std::net::{IpAddr, SocketAddr};

use skiff_actors::refused::Refused;
use skiff_storage::metadata::{TopicMessageType, PERM_READ, PERM_WRITE};

use super::{bad_request, Caller, GrpcService};
use crate::acl::rules;
use crate::grpc::pb::{self, Code};
use crate::grpc::resource;
use crate::grpc::status::{ok, status};
use crate::listener::reachable::reachable_ip;

impl GrpcService {
    /// QueryRoute: every queue of the topic on this broker, at the endpoints the client dialled
    /// (see [`reachable_endpoints`]).
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
        // The topic's config is its route here: one broker, this one.
        let config = self
            .broker(move |broker| async move {
                Ok(broker.topic(&stored)?.ok_or(Refused::TopicNotExist {
                    topic: stored.clone(),
                })?)
            })
            .await?;
        let endpoints = reachable_endpoints(request.endpoints.as_ref(), caller.dialled);
        let count = config.read_queue_nums.max(config.write_queue_nums);
        let mut queues = Vec::new();
        for id in 0..count {
            let read = id < config.read_queue_nums && config.perm & PERM_READ != 0;
            let write = id < config.write_queue_nums && config.perm & PERM_WRITE != 0;
            let permission = match (read, write) {
                (true, true) => pb::Permission::ReadWrite,
                (true, false) => pb::Permission::Read,
                (false, true) => pb::Permission::Write,
                (false, false) => pb::Permission::None,
            };
            queues.push(pb::MessageQueue {
                topic: Some(resource::resource(&config.name)),
                id: id as i32,
                permission: permission as i32,
                broker: Some(pb::Broker {
                    name: self.config.broker_name.clone(),
                    id: 0,
                    endpoints: endpoints.clone(),
                }),
                accept_message_types: accepted_types(config.message_type),
            });
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
        let endpoints = reachable_endpoints(request.endpoints.as_ref(), caller.dialled);
        let queue = |id: i32| pb::Assignment {
            message_queue: Some(pb::MessageQueue {
                topic: Some(resource::resource(&config.name)),
                id,
                permission: pb::Permission::ReadWrite as i32,
                broker: Some(pb::Broker {
                    name: self.config.broker_name.clone(),
                    id: 0,
                    endpoints: endpoints.clone(),
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

/// The endpoints a queue is reached at: those the client dialled, since they reach this broker
/// whatever port mapping lies between (a container's), with a wildcard host (`0.0.0.0`, `::`)
/// replaced by the connection's local address as remoting routes do ([`reachable_ip`]); that
/// local address when the client named none.
fn reachable_endpoints(
    requested: Option<&pb::Endpoints>,
    dialled: Option<SocketAddr>,
) -> Option<pb::Endpoints> {
    let Some(requested) = requested.filter(|e| !e.addresses.is_empty()) else {
        return dialled.map(|dialled| {
            let ip = dialled.ip().to_canonical();
            pb::Endpoints {
                scheme: scheme_of(ip) as i32,
                addresses: vec![pb::Address {
                    host: ip.to_string(),
                    port: i32::from(dialled.port()),
                }],
            }
        });
    };
    let mut endpoints = requested.clone();
    for address in &mut endpoints.addresses {
        let host = address.host.trim_start_matches('[').trim_end_matches(']');
        let Ok(ip) = host.parse::<IpAddr>() else {
            continue;
        };
        let reachable = reachable_ip(ip, dialled);
        if reachable != ip {
            address.host = reachable.to_string();
            endpoints.scheme = scheme_of(reachable) as i32;
        }
    }
    Some(endpoints)
}

fn scheme_of(ip: IpAddr) -> pb::AddressScheme {
    match ip {
        IpAddr::V4(_) => pb::AddressScheme::IPv4,
        IpAddr::V6(_) => pb::AddressScheme::IPv6,
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
        Some(TopicMessageType::Priority) => one(pb::MessageType::Priority),
        Some(TopicMessageType::Lite) => one(pb::MessageType::Lite),
        Some(TopicMessageType::Mixed) | None => vec![
            pb::MessageType::Normal as i32,
            pb::MessageType::Fifo as i32,
            pb::MessageType::Delay as i32,
            pb::MessageType::Transaction as i32,
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(scheme: pb::AddressScheme, hosts: &[(&str, i32)]) -> pb::Endpoints {
        pb::Endpoints {
            scheme: scheme as i32,
            addresses: hosts
                .iter()
                .map(|(host, port)| pb::Address {
                    host: (*host).to_owned(),
                    port: *port,
                })
                .collect(),
        }
    }

    #[test]
    fn route_endpoints_never_name_a_wildcard_and_keep_what_the_client_dialled() {
        let dialled: Option<SocketAddr> = Some("172.17.0.2:8081".parse().expect("an address"));
        let wildcard = endpoints(pb::AddressScheme::IPv4, &[("0.0.0.0", 18081)]);
        assert_eq!(
            reachable_endpoints(Some(&wildcard), dialled),
            Some(endpoints(pb::AddressScheme::IPv4, &[("172.17.0.2", 18081)])),
            "the wildcard host is the dialled address; the client's port (a mapped one) is kept"
        );
        let v6_wildcard = endpoints(pb::AddressScheme::IPv6, &[("[::]", 8081)]);
        assert_eq!(
            reachable_endpoints(Some(&v6_wildcard), dialled),
            Some(endpoints(pb::AddressScheme::IPv4, &[("172.17.0.2", 8081)]))
        );
        let named = endpoints(pb::AddressScheme::DomainName, &[("localhost", 18081)]);
        assert_eq!(
            reachable_endpoints(Some(&named), dialled),
            Some(named.clone()),
            "a host name the client dialled is kept"
        );
        assert_eq!(
            reachable_endpoints(None, Some("[::ffff:10.0.0.7]:8081".parse().expect("addr"))),
            Some(endpoints(pb::AddressScheme::IPv4, &[("10.0.0.7", 8081)])),
            "no endpoints in the request: the dialled address"
        );
    }
}
