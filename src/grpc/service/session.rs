//! A client's session: its Telemetry stream (settings in, settings and transaction check-backs
//! out), Heartbeat and NotifyClientTermination. What a client's settings say it is (a producer
//! of some topics, a consumer of a group) is registered with the broker as a remoting client's
//! heartbeat is, in one call per request.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::Streaming;
use tracing::{debug, info};

use skiff_actors::broker::connections::ClientDescription;
use skiff_actors::broker::BrokerHandle;
use skiff_actors::broker_api::{
    BrokerError, ConnectionId, ConsumeType, ConsumerHeartbeat, MessageModel, SubscriptionEntry,
};
use skiff_actors::logic::delay::{DEFAULT_MAX_RECONSUME_TIMES, DELAY_LEVELS};
use skiff_actors::logic::lite::{client_quota, DEFAULT_CLIENT_QUOTA, MAX_LITE_TOPIC_SIZE};
use skiff_storage::clock::epoch_millis;
use skiff_storage::metadata::SubscriptionGroupConfig;

use super::consume::{filter_of, MAX_LONG_POLL, RECEIVE_BATCH};
use super::{bad_request, Caller, GrpcService};
use crate::acl::{Action, Check};
use crate::grpc::clients::{
    Client, GrpcConsumer, GrpcTransactionChecker, TelemetrySender, TELEMETRY_QUEUE,
};
use crate::grpc::convert::duration;
use crate::grpc::pb::{self, Code};
use crate::grpc::resource;
use crate::grpc::status::{ok, status};

/// Producer retries the server tells clients (the proxy's defaults).
const PRODUCER_MAX_ATTEMPTS: i32 = 3;

/// What a client's settings register with the broker.
enum Registration {
    /// A producer of these topics, answering transaction check-backs on its Telemetry stream.
    Producer {
        topics: Vec<String>,
        telemetry: Option<TelemetrySender>,
    },
    /// A consumer of a group, as a remoting consumer's heartbeat registers one.
    Consumer(ConsumerHeartbeat),
}

impl Registration {
    fn of(client_id: &str, client: &Client) -> Result<Registration, pb::Status> {
        let Some(settings) = &client.settings else {
            return Err(status(
                Code::UnrecognizedClientType,
                "no settings from this client yet: open the telemetry stream and send them first",
            ));
        };
        match &settings.pub_sub {
            Some(pb::settings::PubSub::Publishing(publishing)) => Ok(Registration::Producer {
                topics: publishing.topics.iter().map(resource::stored).collect(),
                telemetry: client.telemetry.clone(),
            }),
            Some(pb::settings::PubSub::Subscription(subscription)) => {
                let Some(group) = subscription.group.as_ref() else {
                    return Err(bad_request("the subscription names no group"));
                };
                let mut subscriptions = Vec::new();
                for entry in &subscription.subscriptions {
                    let Some(topic) = entry.topic.as_ref() else {
                        continue;
                    };
                    let (expression_type, expression) = filter_of(entry.expression.as_ref())?;
                    subscriptions.push(SubscriptionEntry {
                        topic: resource::stored(topic),
                        expression_type,
                        expression,
                        sub_version: epoch_millis(),
                    });
                }
                Ok(Registration::Consumer(ConsumerHeartbeat {
                    client_id: client_id.to_owned(),
                    group: resource::stored(group),
                    consume_type: ConsumeType::Passively,
                    message_model: MessageModel::Clustering,
                    consume_from_where: "CONSUME_FROM_LAST_OFFSET".to_owned(),
                    subscriptions,
                }))
            }
            None => Err(bad_request(
                "there is no publishing or subscription data in settings",
            )),
        }
    }

    /// Registers on the broker; a consumer answers its group's config.
    async fn register(
        self,
        broker: &BrokerHandle,
        client_id: &str,
        connection: ConnectionId,
    ) -> Result<Option<SubscriptionGroupConfig>, BrokerError> {
        match self {
            Registration::Producer { topics, telemetry } => {
                let Some(telemetry) = telemetry else {
                    return Ok(None);
                };
                for topic in topics {
                    let checker = GrpcTransactionChecker {
                        connection,
                        client_id: client_id.to_owned(),
                        telemetry: telemetry.clone(),
                    };
                    broker
                        .connections()
                        .register_producer(&topic, client_id, Arc::new(checker));
                }
                Ok(None)
            }
            Registration::Consumer(heartbeat) => {
                let group = heartbeat.group.clone();
                broker
                    .heartbeat(heartbeat, Arc::new(GrpcConsumer { connection }))
                    .await?;
                broker.group(&group)
            }
        }
    }
}

/// The settings a client gets back: its own, with what the broker decides filled in.
fn effective_settings(
    mut settings: pb::Settings,
    group: Option<&SubscriptionGroupConfig>,
    max_body_size: usize,
) -> pb::Settings {
    match &mut settings.pub_sub {
        Some(pb::settings::PubSub::Publishing(publishing)) => {
            publishing.max_body_size = i32::try_from(max_body_size).unwrap_or(i32::MAX);
            publishing.validate_message_type = true;
            settings.backoff_policy = Some(pb::RetryPolicy {
                max_attempts: PRODUCER_MAX_ATTEMPTS,
                strategy: Some(pb::retry_policy::Strategy::ExponentialBackoff(
                    pb::ExponentialBackoff {
                        initial: Some(duration(10)),
                        max: Some(duration(1000)),
                        multiplier: 2.0,
                    },
                )),
            });
        }
        Some(pb::settings::PubSub::Subscription(subscription)) => {
            subscription.receive_batch_size = Some(RECEIVE_BATCH as i32);
            subscription.long_polling_timeout = Some(duration(MAX_LONG_POLL.as_millis() as i64));
            subscription.fifo = Some(group.is_some_and(|g| g.consume_message_orderly));
            // Every consumer's settings carry them, as the proxy's do: a lite consumer refuses
            // every subscribeLite until it has learnt its quota.
            let quota = group.map_or(DEFAULT_CLIENT_QUOTA, |g| client_quota(&g.attributes));
            subscription.lite_subscription_quota =
                Some(i32::try_from(quota.max(0)).unwrap_or(i32::MAX));
            subscription.max_lite_topic_size = Some(MAX_LITE_TOPIC_SIZE as i32);
            let retry_max_times = group.map_or(DEFAULT_MAX_RECONSUME_TIMES.unsigned_abs(), |g| {
                g.retry_max_times
            });
            settings.backoff_policy = Some(pb::RetryPolicy {
                max_attempts: i32::try_from(retry_max_times)
                    .unwrap_or(i32::MAX - 1)
                    .saturating_add(1),
                // Every delay level (1 s to 2 h), as the proxy's default group retry policy.
                strategy: Some(pb::retry_policy::Strategy::CustomizedBackoff(
                    pb::CustomizedBackoff {
                        next: DELAY_LEVELS
                            .iter()
                            .map(|d| duration(d.as_millis() as i64))
                            .collect(),
                    },
                )),
            });
        }
        None => {}
    }
    settings.metric = Some(pb::Metric {
        on: false,
        endpoints: None,
    });
    settings
}

impl GrpcService {
    /// Heartbeat: registers the client again as its last settings describe it.
    pub(super) async fn heartbeat_of(
        &self,
        caller: Caller,
        request: pb::HeartbeatRequest,
    ) -> Result<pb::HeartbeatResponse, pb::Status> {
        if let Some(group) = request.group.as_ref().filter(|g| !g.name.is_empty()) {
            caller.authorize(vec![Check::group(&resource::stored(group), Action::Sub)])?;
        }
        let Some(client) = self.clients.get(&caller.client_id) else {
            return Err(status(
                Code::UnrecognizedClientType,
                "cannot find client settings for this client",
            ));
        };
        let registration = Registration::of(&caller.client_id, &client)?;
        let (client_id, connection) = (caller.client_id, client.session);
        self.broker(move |broker| async move {
            registration
                .register(&broker, &client_id, connection)
                .await
                .map(|_| ())
        })
        .await?;
        Ok(pb::HeartbeatResponse { status: Some(ok()) })
    }

    /// NotifyClientTermination: the client leaves its producer topics and its group.
    pub(super) async fn terminated(
        &self,
        caller: Caller,
        request: pb::NotifyClientTerminationRequest,
    ) -> Result<pb::NotifyClientTerminationResponse, pb::Status> {
        let group = request
            .group
            .as_ref()
            .filter(|g| !g.name.is_empty())
            .map(resource::stored);
        if let Some(group) = &group {
            caller.authorize(vec![Check::group(group, Action::Sub)])?;
        }
        let client_id = caller.client_id.clone();
        let left = self
            .broker(move |broker| async move {
                broker.unregister_producer(&client_id, None);
                broker.forget_lite_client(&client_id);
                if let Some(group) = group {
                    broker.unregister(client_id, group).await?;
                }
                Ok(())
            })
            .await;
        self.clients.remove(&caller.client_id);
        left?;
        Ok(pb::NotifyClientTerminationResponse { status: Some(ok()) })
    }

    /// Settings from the client's Telemetry stream: recorded, described and registered with
    /// the broker in one call, and answered with what the broker decides.
    async fn on_settings(
        &self,
        caller: &Caller,
        settings: pb::Settings,
        telemetry: &TelemetrySender,
    ) -> Result<pb::Settings, pb::Status> {
        if settings.pub_sub.is_none() {
            return Err(bad_request(
                "there is no publishing or subscription data in settings",
            ));
        }
        let client =
            self.clients
                .update_settings(&caller.client_id, settings.clone(), telemetry.clone());
        let registration = Registration::of(&caller.client_id, &client)?;
        let description = ClientDescription {
            client_id: caller.client_id.clone(),
            address: caller.peer.to_string(),
            language: caller.language.clone(),
            version: caller.version.clone(),
            version_code: 0,
            protocol: "grpc",
        };
        let (client_id, connection) = (caller.client_id.clone(), client.session);
        let group = self
            .broker(move |broker| async move {
                broker.connections().describe(connection, description);
                registration.register(&broker, &client_id, connection).await
            })
            .await?;
        Ok(effective_settings(
            settings,
            group.as_ref(),
            self.config.max_body_size,
        ))
    }

    /// Telemetry: the stream to the client ends when the task serving it does (the client
    /// half-closed, or the server stops), whoever else holds a way to push commands: the
    /// broker's check listener writes to `pushed`, which the task forwards.
    pub(super) fn open_telemetry(
        &self,
        caller: Caller,
        mut inbound: Streaming<pb::TelemetryCommand>,
    ) -> ReceiverStream<Result<pb::TelemetryCommand, tonic::Status>> {
        let (outbound, stream) = mpsc::channel(TELEMETRY_QUEUE);
        let (pushed, mut from_broker) = mpsc::channel(TELEMETRY_QUEUE);
        let connection = self.clients.get_or_insert(&caller.client_id).session;
        let service = self.clone();
        let stopped = self.stopped.clone();
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    _ = stopped.wait() => break,
                    Some(command) = from_broker.recv() => {
                        if outbound.send(command).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    next = inbound.next() => next,
                };
                let command = match next {
                    Some(Ok(command)) => command,
                    Some(Err(e)) => {
                        debug!(client_id = %caller.client_id, error = %e, "telemetry stream broken");
                        break;
                    }
                    None => break,
                };
                use pb::telemetry_command::Command;
                match command.command {
                    Some(Command::Settings(settings)) => {
                        let answer = match service.on_settings(&caller, settings, &pushed).await {
                            Ok(settings) => pb::TelemetryCommand {
                                status: Some(ok()),
                                command: Some(Command::Settings(settings)),
                            },
                            Err(s) => {
                                let _ = outbound
                                    .send(Err(tonic::Status::invalid_argument(s.message)))
                                    .await;
                                break;
                            }
                        };
                        if outbound.send(Ok(answer)).await.is_err() {
                            break;
                        }
                    }
                    Some(Command::ThreadStackTrace(trace)) => {
                        info!(client_id = %caller.client_id, nonce = %trace.nonce, "thread stack trace from client:\n{}", trace.thread_stack_trace.unwrap_or_default());
                    }
                    Some(Command::VerifyMessageResult(result)) => {
                        info!(client_id = %caller.client_id, nonce = %result.nonce, status = ?command.status, "verify message result from client");
                    }
                    Some(_) | None => {
                        debug!(client_id = %caller.client_id, "telemetry command ignored");
                    }
                }
            }
            service.clients.telemetry_closed(&caller.client_id, &pushed);
            // Everything registered through this client leaves; a client that reconnects
            // registers again with its next settings or heartbeat.
            let _ = service
                .broker(move |broker| async move {
                    broker.connection_closed(connection).await.map(|_| ())
                })
                .await;
        });
        ReceiverStream::new(stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::convert::duration_ms;

    #[test]
    fn consumers_get_their_groups_retry_policy() {
        let mut group = SubscriptionGroupConfig::new("g");
        group.retry_max_times = 2;
        let settings = pb::Settings {
            pub_sub: Some(pb::settings::PubSub::Subscription(
                pb::Subscription::default(),
            )),
            ..Default::default()
        };
        let merged = effective_settings(settings, Some(&group), 1024);
        let policy = merged.backoff_policy.expect("a retry policy");
        assert_eq!(policy.max_attempts, 3);
        let Some(pb::retry_policy::Strategy::CustomizedBackoff(backoff)) = policy.strategy else {
            panic!("customized backoff expected");
        };
        assert_eq!(duration_ms(&backoff.next[0]), 1000);
        assert_eq!(backoff.next.len(), 18);
        assert_eq!(merged.metric.map(|m| m.on), Some(false));
    }
}
