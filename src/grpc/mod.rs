//! The RocketMQ 5 gRPC front door: `apache.rocketmq.v2.MessagingService`, which every client
//! Apache ships for RocketMQ 5 speaks (Java `rocketmq-client-java`, Python, Node, Rust, Go,
//! C#, C++). A sibling of [`crate::remoting`]: it decodes its wire and calls the same broker.
//!
//! # Layout
//!
//! * `proto/`: the schema (`apache/rocketmq/v2/*.proto`), compiled by `build.rs` into [`pb`].
//! * [`service`]: the RPCs, each mapped to broker calls.
//! * [`convert`]: messages between their gRPC form and the store's (pure).
//! * [`resource`]: topic and group names between a client's resources and the broker.
//! * [`clients`]: gRPC clients by client id, their settings and Telemetry streams; how the
//!   broker's connection registry reaches them.
//! * [`status`]: the one table from broker errors and refusals to gRPC codes.
//! * [`transaction_id`]: the transaction id a producer holds for a half message.
//! * `crate::broker_link`: the hop from tonic's tasks onto the broker's arbiter (shared with the
//!   HTTP console).
//! * This module: [`GrpcServer`], tonic serving the connections the ports admitted as gRPC (see
//!   [`crate::listener`]): all of `grpc_listen`'s, and the main port's that start with the
//!   HTTP/2 preface or agreed on ALPN `h2`.

pub mod clients;
pub mod convert;

pub mod pb;
pub mod resource;
pub mod service;
pub mod status;
pub mod transaction_id;

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use tracing::{debug, warn};

use skiff_actors::broker::BrokerHandle;

use crate::broker_link::{self as link, LinkTask};
use crate::listener::{Inbox, Tasks, SHUTDOWN_GRACE};
use pb::messaging_service_server::MessagingServiceServer;
use tonic::service::interceptor::InterceptedService;

use crate::acl::{signature, Acl, AclHandle, Identity, Refusal};
use crate::protected::{self, PeerPolicy};
pub use service::{GrpcService, ServiceConfig};

/// The gRPC server's settings.
pub struct GrpcConfig {
    pub service: ServiceConfig,
    /// The largest request a client may send (a send of `max_body_size` plus its metadata).
    pub max_request_bytes: usize,
    /// Which peers' requests are served; the others get PERMISSION_DENIED (protected mode).
    pub peers: PeerPolicy,
    /// Users and permissions; with any account configured, each call's `authorization` is
    /// checked (and protected mode no longer applies).
    pub acl: AclHandle,
}

/// The running gRPC server. [`GrpcServer::shutdown`] stops it.
pub struct GrpcServer {
    tasks: Tasks,
    link: Option<LinkTask>,
}

impl GrpcServer {
    /// Serves, on the current arbiter, the connections the ports send to `inbox`'s handoff,
    /// calling `broker`.
    pub fn start(config: GrpcConfig, broker: BrokerHandle, inbox: Inbox) -> GrpcServer {
        let (link, link_task) = link::spawn(broker, link::DEFAULT_QUEUE_CAPACITY);
        let mut tasks = Tasks::new("grpc server");
        let stopped = tasks.stopped();
        let service = GrpcService::new(link, config.service.clone(), stopped.clone());
        let max = config.max_request_bytes;
        let peers = config.peers;
        let acl = config.acl;
        tasks.add(tokio::spawn(async move {
            let result = tonic::transport::Server::builder()
                .http2_keepalive_interval(Some(Duration::from_secs(30)))
                .add_service(InterceptedService::new(
                    MessagingServiceServer::new(service)
                        .max_decoding_message_size(max)
                        .max_encoding_message_size(usize::MAX),
                    move |request: tonic::Request<()>| admit_call(peers, &acl, request),
                ))
                .serve_with_incoming_shutdown(inbox, stopped.wait())
                .await;
            if let Err(e) = result {
                warn!(error = %e, "grpc server failed");
            }
        }));
        GrpcServer {
            tasks,
            link: Some(link_task),
        }
    }

    /// Ends open streams (waiting [`SHUTDOWN_GRACE`] for them), and stops calling the broker.
    pub async fn shutdown(mut self) {
        self.tasks.shutdown_within(SHUTDOWN_GRACE).await;
        if let Some(link) = self.link.take() {
            link.shutdown().await;
        }
    }
}

/// Before the service sees a call: with no users configured, protected mode refuses a peer
/// beyond loopback; with users, the caller is authenticated and the outcome left in the
/// call's extensions as a [`CallerIdentity`], for the service to answer in-band (a refused
/// call gets the RPC's own response with UNAUTHORIZED, as RocketMQ's proxy answers).
fn admit_call(
    peers: PeerPolicy,
    acl: &AclHandle,
    mut request: tonic::Request<()>,
) -> Result<tonic::Request<()>, tonic::Status> {
    let acl = acl.current();
    let peer = request.remote_addr();
    if !acl.is_on() {
        return match peer {
            Some(peer) if !peers.serves(peer.ip()) => {
                debug!(peer = %peer, "grpc request refused: protected mode serves loopback peers only");
                Err(tonic::Status::permission_denied(protected::REFUSAL))
            }
            _ => Ok(request),
        };
    }
    let peer_ip = peer.map_or(IpAddr::from([0, 0, 0, 0]), |p| p.ip());
    let identity = authenticate_call(&acl, request.metadata(), peer_ip, SystemTime::now());
    if let Err(refusal) = &identity {
        debug!(peer = ?peer, reason = %refusal, "grpc call refused by the acl");
    }
    request.extensions_mut().insert(CallerIdentity(identity));
    Ok(request)
}

/// Who a call comes from, by its `authorization` and `x-mq-date-time` metadata.
fn authenticate_call(
    acl: &Acl,
    metadata: &tonic::metadata::MetadataMap,
    peer: IpAddr,
    now: SystemTime,
) -> Result<Identity, Refusal> {
    let text = |key: &str| metadata.get(key).and_then(|v| v.to_str().ok());
    let Some(authorization) = text("authorization").filter(|a| !a.trim().is_empty()) else {
        return acl.authenticate(None, peer, |_| false);
    };
    let date_time = text(signature::GRPC_DATE_TIME)
        .filter(|d| !d.trim().is_empty())
        .ok_or_else(|| Refusal::MalformedCredentials("datetime is null.".to_string()))?;
    let when = signature::parse_date_time(date_time).ok_or_else(|| {
        Refusal::MalformedCredentials(format!(
            "{}: {date_time:?} is not yyyyMMddTHHmmssZ.",
            signature::GRPC_DATE_TIME
        ))
    })?;
    if !signature::date_time_is_current(when, now) {
        return Err(Refusal::MalformedCredentials(format!(
            "{}: {date_time} is more than {} minutes from the broker's clock ({}).",
            signature::GRPC_DATE_TIME,
            signature::GRPC_ALLOWED_SKEW.as_secs() / 60,
            signature::format_date_time(now)
        )));
    }
    let parsed = signature::GrpcAuthorization::parse(authorization)
        .map_err(Refusal::MalformedCredentials)?;
    acl.authenticate(Some(&parsed.access_key), peer, |secret| {
        parsed.verify(secret, date_time)
    })
}

/// A call's authentication outcome, present when ACL is on.
#[derive(Debug, Clone)]
pub(crate) struct CallerIdentity(pub(crate) Result<Identity, Refusal>);

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::transport::server::TcpConnectInfo;

    fn from(peer: &str) -> tonic::Request<()> {
        let mut request = tonic::Request::new(());
        request.extensions_mut().insert(TcpConnectInfo {
            local_addr: None,
            remote_addr: Some(peer.parse().expect("address")),
        });
        request
    }

    #[test]
    fn protected_mode_refuses_a_grpc_request_from_beyond_loopback_with_the_way_out() {
        let off = AclHandle::default();
        let refused = admit_call(PeerPolicy::LoopbackOnly, &off, from("192.0.2.2:40000"))
            .expect_err("a non-loopback peer is refused");
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        assert!(refused.message().contains("--protected-mode off"));
        assert!(admit_call(PeerPolicy::LoopbackOnly, &off, from("127.0.0.1:40000")).is_ok());
        assert!(admit_call(PeerPolicy::Everyone, &off, from("192.0.2.2:40000")).is_ok());
    }

    fn alice_acl() -> Acl {
        Acl::new(&crate::acl::AclConfig {
            accounts: vec![crate::acl::AccountConfig {
                access_key: "alice".into(),
                secret_key: "alice-secret".into(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .expect("valid acl")
    }

    fn signed(
        authorization: Option<&str>,
        date_time: Option<&str>,
    ) -> tonic::metadata::MetadataMap {
        let mut metadata = tonic::metadata::MetadataMap::new();
        if let Some(a) = authorization {
            metadata.insert("authorization", a.parse().expect("ascii"));
        }
        if let Some(d) = date_time {
            metadata.insert(signature::GRPC_DATE_TIME, d.parse().expect("ascii"));
        }
        metadata
    }

    #[test]
    fn with_users_a_grpc_call_is_authenticated_by_its_signed_date_time() {
        let acl = alice_acl();
        let peer = IpAddr::from([127, 0, 0, 1]);
        let now = signature::parse_date_time("20261205T080000Z").expect("time");
        let good = signature::grpc("alice", "alice-secret", "20261205T075930Z");
        let outcome = |metadata| authenticate_call(&acl, &metadata, peer, now);
        assert!(matches!(
            outcome(signed(Some(&good), Some("20261205T075930Z"))),
            Ok(Identity::User(_))
        ));
        let wrong_secret = signature::grpc("alice", "guess", "20261205T075930Z");
        assert_eq!(
            outcome(signed(Some(&wrong_secret), Some("20261205T075930Z"))).err(),
            Some(Refusal::BadSignature)
        );
        assert_eq!(outcome(signed(None, None)).err(), Some(Refusal::Unsigned));
        let stale = signature::grpc("alice", "alice-secret", "20261205T073000Z");
        let refused = outcome(signed(Some(&stale), Some("20261205T073000Z")))
            .expect_err("a half-hour-old signature is refused");
        assert!(refused.to_string().contains("15 minutes"), "{refused}");
        assert!(matches!(
            outcome(signed(Some(&good), None)),
            Err(Refusal::MalformedCredentials(_))
        ));
        assert!(matches!(
            outcome(signed(
                Some("MQv2-HMAC-SHA1 nonsense"),
                Some("20261205T075930Z")
            )),
            Err(Refusal::MalformedCredentials(_))
        ));
        let unknown = signature::grpc("bob", "x", "20261205T075930Z");
        assert_eq!(
            outcome(signed(Some(&unknown), Some("20261205T075930Z"))).err(),
            Some(Refusal::UnknownUser("bob".into()))
        );
    }

    #[test]
    fn with_users_protected_mode_no_longer_refuses_and_the_outcome_goes_to_the_service() {
        let acl = AclHandle::new(alice_acl());
        let admitted = admit_call(PeerPolicy::LoopbackOnly, &acl, from("192.0.2.2:40000"))
            .expect("reaches the service, which answers in-band");
        let identity = admitted
            .extensions()
            .get::<CallerIdentity>()
            .expect("outcome recorded");
        assert!(matches!(identity.0, Err(Refusal::Unsigned)));
    }
}
