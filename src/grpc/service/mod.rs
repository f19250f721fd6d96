//! `apache.rocketmq.v2.MessagingService`: a door onto the broker. Each RPC decodes its request,
//! calls the broker once through [`BrokerLink`] (as a remoting request runs once on the broker's
//! arbiter), and encodes the answer with the codes the Apache proxy answers. No broker rule lives
//! here: what a send may do, which queue it takes, what an acknowledgement may name and when a
//! receipt has expired are the broker's ([`ClientSend`](skiff_actors::broker::ClientSend),
//! [`AckRequest`](skiff_actors::broker::AckRequest)), as for the remoting processor. What stays
//! here is what only the proxy does: its bounds on invisible and polling times, message types per
//! topic, the dead-letter rule on receive, and the client settings it answers.
//!
//! The RPCs are split by job as the remoting processor is: `route.rs` (QueryRoute,
//! QueryAssignment), `produce.rs` (SendMessage, EndTransaction), `consume.rs` (ReceiveMessage,
//! AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue), `lite.rs`
//! (SyncLiteSubscription) and `session.rs`
//! (Telemetry, Heartbeat, NotifyClientTermination: a client's settings and registration). Each
//! is a method answering `Result<Response, pb::Status>`; [`respond`] puts a refusal into the
//! response's own `status`, and the gRPC status stays OK unless the request could not be read at
//! all (as the proxy answers).

mod consume;
mod lite;
mod produce;
mod route;
mod session;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Streaming};
use tracing::debug;

use skiff_actors::broker::BrokerHandle;
use skiff_actors::broker_api::BrokerError;

use super::clients::Clients;
use super::pb::messaging_service_server::MessagingService;
use super::pb::{self, Code};
use super::status::{broker_status, status};
use super::CallerIdentity;
use crate::acl::{Acl, Check, Identity, Need};
use crate::broker_link::{BrokerLink, LinkError};
use crate::listener::Stopped;

/// What the service needs to know of the node.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub broker_name: String,
    /// The largest body a producer may send (`publishing.max_body_size`).
    pub max_body_size: usize,
}

/// The service tonic serves.
#[derive(Clone)]
pub struct GrpcService {
    link: BrokerLink,
    clients: Clients,
    config: Arc<ServiceConfig>,
    /// Set when the server stops: Telemetry streams end then.
    stopped: Stopped,
}

/// Who sent a request: the metadata every RPC carries.
struct Caller {
    client_id: String,
    /// `x-mq-language` and `x-mq-client-version`, for admin listings.
    language: String,
    version: String,
    peer: SocketAddr,
    /// The address the client dialled (the connection's local address), when known.
    dialled: Option<SocketAddr>,
    /// What is left of the call's deadline (`grpc-timeout`), when the client set one.
    deadline: Option<Duration>,
    /// Who signed the call; `None` when ACL is off.
    identity: Option<Identity>,
}

impl Caller {
    /// Whether the caller may do all of `checks`; UNAUTHORIZED naming the first it may not (the
    /// code RocketMQ's proxy answers for a permission refused, as for a signature).
    fn authorize(&self, checks: Vec<Check>) -> Result<(), pb::Status> {
        let Some(identity) = &self.identity else {
            return Ok(());
        };
        Acl::authorize(identity, &Need::Access(checks), 0, self.peer.ip()).map_err(|refusal| {
            debug!(client_id = %self.client_id, reason = %refusal, "grpc call refused by the acl");
            status(Code::Unauthorized, refusal.to_string())
        })
    }
}

/// The caller of `request` (or why it is refused) and the request itself.
fn caller<T>(request: Request<T>) -> (Result<Caller, pb::Status>, T) {
    let caller = caller_of(&request);
    (caller, request.into_inner())
}

fn caller_of<T>(request: &Request<T>) -> Result<Caller, pb::Status> {
    let metadata = request.metadata();
    let text = |key: &str| {
        metadata
            .get(key)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .unwrap_or("")
            .to_owned()
    };
    let identity = match request.extensions().get::<CallerIdentity>() {
        None => None,
        Some(CallerIdentity(Ok(identity))) => Some(identity.clone()),
        Some(CallerIdentity(Err(refusal))) => {
            return Err(status(Code::Unauthorized, refusal.to_string()))
        }
    };
    let client_id = text("x-mq-client-id");
    if client_id.is_empty() {
        return Err(status(
            Code::ClientIdRequired,
            "x-mq-client-id is required in the request metadata",
        ));
    }
    Ok(Caller {
        client_id,
        language: text("x-mq-language"),
        version: text("x-mq-client-version"),
        peer: request
            .remote_addr()
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0))),
        dialled: request.local_addr(),
        deadline: metadata
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout),
        identity,
    })
}

/// `grpc-timeout`: up to eight digits and a unit (H, M, S, m, u, n).
fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

fn link_status(e: LinkError) -> pb::Status {
    match e {
        LinkError::Busy => status(Code::TooManyRequests, e.to_string()),
        LinkError::Stopped => status(Code::InternalServerError, e.to_string()),
    }
}

fn bad_request(message: impl Into<String>) -> pb::Status {
    status(Code::BadRequest, message)
}

fn not_served(rpc: &str) -> pb::Status {
    status(
        Code::NotImplemented,
        format!("{rpc} is not served by this broker yet"),
    )
}

/// A response that carries its own status, which a refused request gets with nothing else set.
trait WithStatus: Default {
    fn set_status(&mut self, status: pb::Status);

    fn refused(status: pb::Status) -> Self {
        let mut response = Self::default();
        response.set_status(status);
        response
    }
}

macro_rules! with_status {
    ($($response:ident),* $(,)?) => {
        $(impl WithStatus for pb::$response {
            fn set_status(&mut self, status: pb::Status) {
                self.status = Some(status);
            }
        })*
    };
}

with_status!(
    QueryRouteResponse,
    HeartbeatResponse,
    SendMessageResponse,
    QueryAssignmentResponse,
    AckMessageResponse,
    ForwardMessageToDeadLetterQueueResponse,
    UpdateOffsetResponse,
    GetOffsetResponse,
    QueryOffsetResponse,
    EndTransactionResponse,
    NotifyClientTerminationResponse,
    ChangeInvisibleDurationResponse,
    RecallMessageResponse,
    SyncLiteSubscriptionResponse,
);

type Reply<T> = Result<Response<T>, tonic::Status>;

/// The one place an RPC's outcome becomes its response: a refusal goes into the response's
/// own status.
fn respond<T: WithStatus>(outcome: Result<T, pb::Status>) -> Reply<T> {
    Ok(Response::new(outcome.unwrap_or_else(T::refused)))
}

/// Runs an RPC body `$rpc(caller, request)` once the caller is known, and responds.
macro_rules! rpc {
    ($service:ident . $rpc:ident($request:ident)) => {{
        let (caller, request) = caller($request);
        respond(match caller {
            Ok(caller) => $service.$rpc(caller, request).await,
            Err(refused) => Err(refused),
        })
    }};
}

impl GrpcService {
    pub fn new(link: BrokerLink, config: ServiceConfig, stopped: Stopped) -> GrpcService {
        GrpcService {
            link,
            clients: Clients::default(),
            config: Arc::new(config),
            stopped,
        }
    }

    /// Runs `call` on the broker: the one hop a request makes. A link failure becomes the
    /// status the client gets.
    async fn broker<T, F, Fut>(&self, call: F) -> Result<T, pb::Status>
    where
        F: FnOnce(BrokerHandle) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, BrokerError>> + 'static,
        T: Send + 'static,
    {
        match self.link.call(call).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(broker_status(&e)),
            Err(e) => Err(link_status(e)),
        }
    }
}

type ReceiveStream =
    Pin<Box<dyn Stream<Item = Result<pb::ReceiveMessageResponse, tonic::Status>> + Send>>;
type PullStream =
    Pin<Box<dyn Stream<Item = Result<pb::PullMessageResponse, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl MessagingService for GrpcService {
    async fn query_route(
        &self,
        request: Request<pb::QueryRouteRequest>,
    ) -> Reply<pb::QueryRouteResponse> {
        rpc!(self.route(request))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Reply<pb::HeartbeatResponse> {
        rpc!(self.heartbeat_of(request))
    }

    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Reply<pb::SendMessageResponse> {
        rpc!(self.send(request))
    }

    async fn query_assignment(
        &self,
        request: Request<pb::QueryAssignmentRequest>,
    ) -> Reply<pb::QueryAssignmentResponse> {
        rpc!(self.assignment(request))
    }

    type ReceiveMessageStream = ReceiveStream;

    async fn receive_message(
        &self,
        request: Request<pb::ReceiveMessageRequest>,
    ) -> Result<Response<Self::ReceiveMessageStream>, tonic::Status> {
        let (caller, request) = caller(request);
        let items = match caller {
            Ok(caller) => self.receive(caller, request).await,
            Err(refused) => vec![consume::receive_status(refused)],
        };
        Ok(Response::new(Box::pin(tokio_stream::iter(
            items.into_iter().map(Ok),
        ))))
    }

    async fn ack_message(
        &self,
        request: Request<pb::AckMessageRequest>,
    ) -> Reply<pb::AckMessageResponse> {
        rpc!(self.ack(request))
    }

    async fn forward_message_to_dead_letter_queue(
        &self,
        request: Request<pb::ForwardMessageToDeadLetterQueueRequest>,
    ) -> Reply<pb::ForwardMessageToDeadLetterQueueResponse> {
        rpc!(self.forward_to_dead_letters(request))
    }

    type PullMessageStream = PullStream;

    async fn pull_message(
        &self,
        _request: Request<pb::PullMessageRequest>,
    ) -> Result<Response<Self::PullMessageStream>, tonic::Status> {
        let item = pb::PullMessageResponse {
            content: Some(pb::pull_message_response::Content::Status(status(
                Code::NotImplemented,
                "the gRPC pull consumer is not served yet; use a simple or push consumer",
            ))),
        };
        Ok(Response::new(Box::pin(tokio_stream::iter([Ok(item)]))))
    }

    async fn update_offset(
        &self,
        _request: Request<pb::UpdateOffsetRequest>,
    ) -> Reply<pb::UpdateOffsetResponse> {
        respond(Err(not_served("UpdateOffset")))
    }

    async fn get_offset(
        &self,
        _request: Request<pb::GetOffsetRequest>,
    ) -> Reply<pb::GetOffsetResponse> {
        respond(Err(not_served("GetOffset")))
    }

    async fn query_offset(
        &self,
        _request: Request<pb::QueryOffsetRequest>,
    ) -> Reply<pb::QueryOffsetResponse> {
        respond(Err(not_served("QueryOffset")))
    }

    async fn end_transaction(
        &self,
        request: Request<pb::EndTransactionRequest>,
    ) -> Reply<pb::EndTransactionResponse> {
        rpc!(self.end(request))
    }

    type TelemetryStream = ReceiverStream<Result<pb::TelemetryCommand, tonic::Status>>;

    async fn telemetry(
        &self,
        request: Request<Streaming<pb::TelemetryCommand>>,
    ) -> Result<Response<Self::TelemetryStream>, tonic::Status> {
        let (caller, inbound) = caller(request);
        let caller = caller.map_err(|s| tonic::Status::invalid_argument(s.message))?;
        Ok(Response::new(self.open_telemetry(caller, inbound)))
    }

    async fn notify_client_termination(
        &self,
        request: Request<pb::NotifyClientTerminationRequest>,
    ) -> Reply<pb::NotifyClientTerminationResponse> {
        rpc!(self.terminated(request))
    }

    async fn change_invisible_duration(
        &self,
        request: Request<pb::ChangeInvisibleDurationRequest>,
    ) -> Reply<pb::ChangeInvisibleDurationResponse> {
        rpc!(self.change_invisible(request))
    }

    async fn recall_message(
        &self,
        request: Request<pb::RecallMessageRequest>,
    ) -> Reply<pb::RecallMessageResponse> {
        rpc!(self.recall(request))
    }

    async fn sync_lite_subscription(
        &self,
        request: Request<pb::SyncLiteSubscriptionRequest>,
    ) -> Reply<pb::SyncLiteSubscriptionResponse> {
        rpc!(self.sync_lite(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_read_in_every_unit() {
        assert_eq!(parse_grpc_timeout("20S"), Some(Duration::from_secs(20)));
        assert_eq!(parse_grpc_timeout("3000m"), Some(Duration::from_secs(3)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("5x"), None);
        assert_eq!(parse_grpc_timeout(""), None);
    }

    #[test]
    fn a_refused_rpc_answers_its_status_and_nothing_else() {
        let refused = bad_request("no");
        let reply = respond::<pb::SendMessageResponse>(Err(refused.clone()))
            .expect("the grpc status stays ok")
            .into_inner();
        assert_eq!(reply.status, Some(refused));
        assert!(reply.entries.is_empty());
    }
}
