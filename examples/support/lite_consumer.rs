//! A lite consumer over gRPC as RocketMQ 5.5's `LitePushConsumer` works, for `many_queues
//! --mode lite`: each consumer announces itself as a lite push consumer on its Telemetry
//! stream, then takes its share of the lite topics a batch at a time as an application would:
//! subscribes the batch (SyncLiteSubscription PARTIAL_ADD), receives until every lite topic of
//! the batch delivered its message, acknowledges each received batch in one AckMessage, and
//! unsubscribes the batch (PARTIAL_REMOVE).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Context};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::transport::{Channel, Endpoint};
use tonic::Request;

use skiff::grpc::pb::messaging_service_client::MessagingServiceClient;
use skiff::grpc::pb::{self, Code};

/// How long a receive waits for a message before the server answers with none.
const LONG_POLL: Duration = Duration::from_secs(5);
/// A batch that delivers nothing for this long fails the run.
const STALL: Duration = Duration::from_secs(60);

/// What the consumers are to take: `expected` maps each lite topic to its one message's body.
pub struct LiteConsume {
    pub grpc: SocketAddr,
    pub parent: String,
    pub group: String,
    pub expected: Vec<(String, String)>,
    pub consumers: usize,
    /// Lite topics each consumer subscribes at once.
    pub batch: usize,
}

/// Receives every lite topic's message with `consumers` consumers side by side; fails on a
/// missing, unexpected or repeated message.
pub async fn consume_all(job: LiteConsume) -> anyhow::Result<()> {
    let shares = job.consumers.max(1);
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..shares {
        let mine: Vec<(String, String)> = job
            .expected
            .iter()
            .skip(c)
            .step_by(shares)
            .cloned()
            .collect();
        let (parent, group) = (job.parent.clone(), job.group.clone());
        let (grpc, batch) = (job.grpc, job.batch.max(1));
        tasks.spawn_local(async move {
            let client_id = format!("many-queues-lite-{c}@{}", std::process::id());
            let mut consumer = LiteConsumer::start(grpc, client_id, &parent, &group).await?;
            for chunk in mine.chunks(batch) {
                consumer.take_batch(chunk).await?;
            }
            Ok::<(), anyhow::Error>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

struct LiteConsumer {
    client: MessagingServiceClient<Channel>,
    client_id: String,
    parent: String,
    group: String,
    /// Keeps the Telemetry stream, and so the client's session, open.
    _telemetry: (
        mpsc::Sender<pb::TelemetryCommand>,
        tonic::Streaming<pb::TelemetryCommand>,
    ),
}

fn resource(name: &str) -> Option<pb::Resource> {
    Some(pb::Resource {
        resource_namespace: String::new(),
        name: name.to_owned(),
    })
}

fn seconds(d: Duration) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: 0,
    })
}

fn code_of(status: &Option<pb::Status>) -> Option<Code> {
    status.as_ref().and_then(|s| Code::try_from(s.code).ok())
}

impl LiteConsumer {
    async fn start(
        grpc: SocketAddr,
        client_id: String,
        parent: &str,
        group: &str,
    ) -> anyhow::Result<LiteConsumer> {
        let channel = Endpoint::from_shared(format!("http://{grpc}"))?
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .with_context(|| format!("connecting to {grpc}"))?;
        let mut client = MessagingServiceClient::new(channel);
        let settings = pb::Settings {
            client_type: Some(pb::ClientType::LitePushConsumer as i32),
            request_timeout: seconds(Duration::from_secs(10)),
            pub_sub: Some(pb::settings::PubSub::Subscription(pb::Subscription {
                group: resource(group),
                subscriptions: vec![pb::SubscriptionEntry {
                    topic: resource(parent),
                    expression: Some(pb::FilterExpression {
                        r#type: pb::FilterType::Tag as i32,
                        expression: "*".into(),
                    }),
                }],
                ..Default::default()
            })),
            ..Default::default()
        };
        let (commands, outbound) = mpsc::channel(8);
        commands
            .send(pb::TelemetryCommand {
                status: None,
                command: Some(pb::telemetry_command::Command::Settings(settings)),
            })
            .await?;
        let mut inbound = client
            .telemetry(call(&client_id, ReceiverStream::new(outbound)))
            .await?
            .into_inner();
        let answer = tokio::time::timeout(Duration::from_secs(10), inbound.next())
            .await
            .context("no settings answer")?
            .context("telemetry stream ended")??;
        ensure!(
            code_of(&answer.status) == Some(Code::Ok),
            "settings refused: {answer:?}"
        );
        Ok(LiteConsumer {
            client,
            client_id,
            parent: parent.to_owned(),
            group: group.to_owned(),
            _telemetry: (commands, inbound),
        })
    }

    async fn sync(
        &mut self,
        action: pb::LiteSubscriptionAction,
        lites: Vec<String>,
    ) -> anyhow::Result<()> {
        let request = pb::SyncLiteSubscriptionRequest {
            action: action as i32,
            topic: resource(&self.parent),
            group: resource(&self.group),
            lite_topic_set: lites,
            ..Default::default()
        };
        let answer = self
            .client
            .sync_lite_subscription(call(&self.client_id, request))
            .await?
            .into_inner();
        ensure!(
            code_of(&answer.status) == Some(Code::Ok),
            "SyncLiteSubscription {action:?}: {:?}",
            answer.status
        );
        Ok(())
    }

    /// Subscribes `chunk`'s lite topics, receives and acknowledges each one's message, and
    /// unsubscribes them.
    async fn take_batch(&mut self, chunk: &[(String, String)]) -> anyhow::Result<()> {
        let mut waiting: HashMap<&str, &str> = chunk
            .iter()
            .map(|(lite, body)| (lite.as_str(), body.as_str()))
            .collect();
        let lites: Vec<String> = chunk.iter().map(|(lite, _)| lite.clone()).collect();
        self.sync(pb::LiteSubscriptionAction::PartialAdd, lites.clone())
            .await?;
        let mut last_progress = tokio::time::Instant::now();
        while !waiting.is_empty() {
            let messages = self.receive().await?;
            if messages.is_empty() {
                ensure!(
                    last_progress.elapsed() < STALL,
                    "{} lite topics of a batch delivered nothing for {STALL:?}",
                    waiting.len()
                );
                continue;
            }
            last_progress = tokio::time::Instant::now();
            let mut entries = Vec::with_capacity(messages.len());
            for message in messages {
                let properties = message.system_properties.unwrap_or_default();
                let lite = properties.lite_topic.unwrap_or_default();
                let body = String::from_utf8_lossy(&message.body);
                ensure!(
                    waiting.get(lite.as_str()) == Some(&&*body),
                    "received {body:?} of lite topic {lite:?}, not one waited for"
                );
                waiting.remove(lite.as_str());
                entries.push(pb::AckMessageEntry {
                    message_id: properties.message_id,
                    receipt_handle: properties.receipt_handle.unwrap_or_default(),
                    lite_topic: Some(lite),
                });
            }
            self.ack(entries).await?;
        }
        self.sync(pb::LiteSubscriptionAction::PartialRemove, lites)
            .await
    }

    async fn receive(&mut self) -> anyhow::Result<Vec<pb::Message>> {
        let request = pb::ReceiveMessageRequest {
            group: resource(&self.group),
            message_queue: Some(pb::MessageQueue {
                topic: resource(&self.parent),
                id: -1,
                ..Default::default()
            }),
            filter_expression: Some(pb::FilterExpression {
                r#type: pb::FilterType::Tag as i32,
                expression: "*".into(),
            }),
            batch_size: 32,
            invisible_duration: seconds(Duration::from_secs(60)),
            long_polling_timeout: seconds(LONG_POLL),
            ..Default::default()
        };
        let mut stream = self
            .client
            .receive_message(call(&self.client_id, request))
            .await?
            .into_inner();
        let mut messages = Vec::new();
        while let Some(item) = stream.next().await {
            match item?.content {
                Some(pb::receive_message_response::Content::Message(m)) => messages.push(m),
                Some(pb::receive_message_response::Content::Status(s)) => {
                    let code = Code::try_from(s.code).ok();
                    ensure!(
                        matches!(code, Some(Code::Ok | Code::MessageNotFound)),
                        "receive answered {s:?}"
                    );
                }
                _ => {}
            }
        }
        Ok(messages)
    }

    async fn ack(&mut self, entries: Vec<pb::AckMessageEntry>) -> anyhow::Result<()> {
        let request = pb::AckMessageRequest {
            group: resource(&self.group),
            topic: resource(&self.parent),
            entries,
        };
        let answer = self
            .client
            .ack_message(call(&self.client_id, request))
            .await?
            .into_inner();
        ensure!(
            code_of(&answer.status) == Some(Code::Ok),
            "ack answered {:?}",
            answer.status
        );
        Ok(())
    }
}

/// `message` with the client id every RocketMQ 5 client sends, and a deadline past the long
/// poll.
fn call<T>(client_id: &str, message: T) -> Request<T> {
    let mut request = Request::new(message);
    if let Ok(id) = client_id.parse() {
        request.metadata_mut().insert("x-mq-client-id", id);
    }
    request.set_timeout(LONG_POLL + Duration::from_secs(10));
    request
}
