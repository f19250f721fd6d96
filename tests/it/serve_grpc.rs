//! The gRPC front door of `skiff serve`, driven by a client generated from the same schema:
//! the settings handshake on the Telemetry stream, routes, sends, receives with receipt
//! handles, acknowledgements, invisible-time changes, the codes bad requests get, and the
//! crossing between protocols (a remoting producer's message received over gRPC). Over the
//! main port (told apart from remoting by its first bytes) and the dedicated gRPC port, in
//! plaintext and with a TLS handshake.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::transport::{Channel, Endpoint};

use crate::common::grpc::{call, code_of, connect, message, resource};
use tonic::Request;

use skiff::grpc::pb::messaging_service_client::MessagingServiceClient;
use skiff::grpc::pb::{self, Code};
use skiff::remoting::codes::response as code;
use skiff::remoting::{ClientConfig, RemotingClient};
use skiff::serve::{self, Serving};
use skiff::testsuite;
use skiff::NodeConfig;
use skiff_storage::metadata::TopicConfig;

const CALL_TIMEOUT: Duration = Duration::from_secs(30);

async fn start(dir: &std::path::Path) -> anyhow::Result<Serving> {
    let mut config = NodeConfig::in_dir(dir);
    config.listen = "127.0.0.1:0".parse()?;
    config.grpc_listen = "127.0.0.1:0".to_owned();
    config.metrics_listen = "off".to_owned();
    config.disk_max_used_ratio = 0.999;
    config.disk_full_ratio = 1.0;
    Ok(serve::start(config).await?)
}

/// Creates `topics` with 4 queues each, as `skiff admin topic create` would: a gRPC client's
/// route or send never creates its topic, as at the proxy.
fn create_topics(serving: &Serving, topics: &[&str]) -> anyhow::Result<()> {
    for topic in topics {
        serving
            .node()
            .broker()
            .put_topic(&TopicConfig::new(*topic, 4))?;
    }
    Ok(())
}

fn consumer_settings(group: &str, topic: &str) -> pb::Settings {
    pb::Settings {
        client_type: Some(pb::ClientType::SimpleConsumer as i32),
        request_timeout: Some(prost_types::Duration {
            seconds: 3,
            nanos: 0,
        }),
        pub_sub: Some(pb::settings::PubSub::Subscription(pb::Subscription {
            group: resource(group),
            subscriptions: vec![pb::SubscriptionEntry {
                topic: resource(topic),
                expression: Some(pb::FilterExpression {
                    r#type: pb::FilterType::Tag as i32,
                    expression: "*".into(),
                }),
            }],
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// Opens the Telemetry stream and sends `settings`; answers the server's settings and the
/// sender that keeps the stream open.
async fn handshake(
    client: &mut MessagingServiceClient<Channel>,
    settings: pb::Settings,
) -> anyhow::Result<(
    pb::Settings,
    mpsc::Sender<pb::TelemetryCommand>,
    tonic::Streaming<pb::TelemetryCommand>,
)> {
    let (commands, outbound) = mpsc::channel(8);
    commands
        .send(pb::TelemetryCommand {
            status: None,
            command: Some(pb::telemetry_command::Command::Settings(settings)),
        })
        .await?;
    let mut inbound = client
        .telemetry(call(ReceiverStream::new(outbound)))
        .await?
        .into_inner();
    let answer = tokio::time::timeout(CALL_TIMEOUT, inbound.next())
        .await
        .context("no settings answer")?
        .context("telemetry stream ended")??;
    ensure!(code_of(&answer.status) == Some(Code::Ok), "{answer:?}");
    let Some(pb::telemetry_command::Command::Settings(settings)) = answer.command else {
        anyhow::bail!("the answer carries no settings: {answer:?}");
    };
    Ok((settings, commands, inbound))
}

async fn receive(
    client: &mut MessagingServiceClient<Channel>,
    group: &str,
    topic: &str,
    invisible: Duration,
) -> anyhow::Result<(Option<Code>, Vec<pb::Message>)> {
    let request = pb::ReceiveMessageRequest {
        group: resource(group),
        message_queue: Some(pb::MessageQueue {
            topic: resource(topic),
            id: -1,
            ..Default::default()
        }),
        filter_expression: Some(pb::FilterExpression {
            r#type: pb::FilterType::Tag as i32,
            expression: "*".into(),
        }),
        batch_size: 16,
        invisible_duration: Some(prost_types::Duration {
            seconds: invisible.as_secs() as i64,
            nanos: 0,
        }),
        long_polling_timeout: Some(prost_types::Duration {
            seconds: 5,
            nanos: 0,
        }),
        ..Default::default()
    };
    let mut stream = client.receive_message(call(request)).await?.into_inner();
    let mut status = None;
    let mut messages = Vec::new();
    while let Some(item) = stream.next().await {
        match item?.content {
            Some(pb::receive_message_response::Content::Status(s)) => {
                status = Code::try_from(s.code).ok()
            }
            Some(pb::receive_message_response::Content::Message(m)) => messages.push(m),
            _ => {}
        }
    }
    Ok((status, messages))
}

fn system(message: &pb::Message) -> &pb::SystemProperties {
    message
        .system_properties
        .as_ref()
        .expect("system properties")
}

#[actix_rt::test]
async fn a_grpc_client_sends_receives_acks_and_changes_invisibility_on_the_main_port(
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let serving = start(dir.path()).await?;
    let mut client = connect(serving.local_addr()).await?;
    let (topic, group) = ("GrpcOrders", "grpc-orders-group");
    create_topics(&serving, &[topic])?;

    let (settings, _keep, _inbound) =
        handshake(&mut client, consumer_settings(group, topic)).await?;
    let policy = settings.backoff_policy.context("a retry policy")?;
    ensure!(policy.max_attempts == 17, "{policy:?}");
    let beat = client
        .heartbeat(call(pb::HeartbeatRequest {
            group: resource(group),
            client_type: pb::ClientType::SimpleConsumer as i32,
        }))
        .await?
        .into_inner();
    ensure!(code_of(&beat.status) == Some(Code::Ok), "{beat:?}");

    let route = client
        .query_route(call(pb::QueryRouteRequest {
            topic: resource(topic),
            endpoints: None,
        }))
        .await?
        .into_inner();
    ensure!(code_of(&route.status) == Some(Code::Ok), "{route:?}");
    ensure!(route.message_queues.len() == 4, "{route:?}");
    ensure!(
        route.message_queues[0].accept_message_types.len() == 4,
        "an untyped topic accepts every type: {route:?}"
    );

    let ids = ["01A0", "01A1", "01A2"];
    let sent = client
        .send_message(call(pb::SendMessageRequest {
            messages: vec![
                message(topic, "m0", "TagA", "k0", ids[0]),
                message(topic, "m1", "TagA", "k1", ids[1]),
                message(topic, "m2", "TagB", "k2", ids[2]),
            ],
        }))
        .await?
        .into_inner();
    ensure!(code_of(&sent.status) == Some(Code::Ok), "{sent:?}");
    ensure!(
        sent.entries
            .iter()
            .map(|e| e.message_id.as_str())
            .collect::<Vec<_>>()
            == ids,
        "{sent:?}"
    );

    let (status, mut received) =
        receive(&mut client, group, topic, Duration::from_secs(30)).await?;
    ensure!(status == Some(Code::Ok), "{status:?}");
    received.sort_by_key(|m| system(m).message_id.clone());
    let bodies: Vec<&[u8]> = received.iter().map(|m| &m.body[..]).collect();
    ensure!(bodies == [b"m0", b"m1", b"m2"], "{received:?}");
    let first = system(&received[0]);
    ensure!(
        first.tag.as_deref() == Some("TagA") && first.keys == ["k0"],
        "{first:?}"
    );
    ensure!(first.delivery_attempt == Some(1), "{first:?}");
    ensure!(
        received[0]
            .user_properties
            .get("origin")
            .map(String::as_str)
            == Some("grpc"),
        "{:?}",
        received[0].user_properties
    );

    // Two acknowledged; the third made visible again at once comes back on the next receive.
    let ack = client
        .ack_message(call(pb::AckMessageRequest {
            group: resource(group),
            topic: resource(topic),
            entries: received[..2]
                .iter()
                .map(|m| pb::AckMessageEntry {
                    message_id: system(m).message_id.clone(),
                    receipt_handle: system(m).receipt_handle.clone().unwrap_or_default(),
                    lite_topic: None,
                })
                .collect(),
        }))
        .await?
        .into_inner();
    ensure!(code_of(&ack.status) == Some(Code::Ok), "{ack:?}");
    let third = system(&received[2]);
    let changed = client
        .change_invisible_duration(call(pb::ChangeInvisibleDurationRequest {
            group: resource(group),
            topic: resource(topic),
            receipt_handle: third.receipt_handle.clone().unwrap_or_default(),
            invisible_duration: Some(prost_types::Duration {
                seconds: 0,
                nanos: 0,
            }),
            message_id: third.message_id.clone(),
            ..Default::default()
        }))
        .await?
        .into_inner();
    ensure!(code_of(&changed.status) == Some(Code::Ok), "{changed:?}");
    ensure!(
        changed.receipt_handle != third.receipt_handle.clone().unwrap_or_default(),
        "a new receipt handle"
    );
    let mut again = Vec::new();
    for _ in 0..6 {
        let (_, messages) = receive(&mut client, group, topic, Duration::from_secs(30)).await?;
        again.extend(messages);
        if !again.is_empty() {
            break;
        }
    }
    ensure!(
        again.len() == 1,
        "only the unacknowledged message returns: {again:?}"
    );
    ensure!(&again[0].body[..] == b"m2", "{again:?}");
    ensure!(
        system(&again[0]).delivery_attempt == Some(2),
        "{:?}",
        system(&again[0])
    );

    serving.shutdown().await?;
    Ok(())
}

#[actix_rt::test]
async fn bad_grpc_requests_get_the_proxys_codes_and_change_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let serving = start(dir.path()).await?;
    create_topics(&serving, &["Bad", "StillServing"])?;
    let grpc_addr = serving.grpc_addr().context("the grpc listener")?;
    let mut client = connect(grpc_addr).await?;

    // No client id.
    let anonymous = client
        .query_route(Request::new(pb::QueryRouteRequest {
            topic: resource("T"),
            endpoints: None,
        }))
        .await?
        .into_inner();
    ensure!(
        code_of(&anonymous.status) == Some(Code::ClientIdRequired),
        "{anonymous:?}"
    );

    // A heartbeat before any settings.
    let beat = client
        .heartbeat(call(pb::HeartbeatRequest {
            group: resource("g"),
            client_type: pb::ClientType::SimpleConsumer as i32,
        }))
        .await?
        .into_inner();
    ensure!(
        code_of(&beat.status) == Some(Code::UnrecognizedClientType),
        "{beat:?}"
    );

    // Receipt handles: one that does not parse, and one whose invisible time has passed.
    for (handle, expected) in [
        ("not a receipt", Code::InternalServerError),
        ("0 1000 1000 0 0 skiff 0 0", Code::InvalidReceiptHandle),
    ] {
        let ack = client
            .ack_message(call(pb::AckMessageRequest {
                group: resource("g"),
                topic: resource("T"),
                entries: vec![pb::AckMessageEntry {
                    message_id: "01".into(),
                    receipt_handle: handle.into(),
                    lite_topic: None,
                }],
            }))
            .await?
            .into_inner();
        ensure!(code_of(&ack.status) == Some(expected), "{handle}: {ack:?}");
        ensure!(
            ack.entries.len() == 1 && code_of(&ack.entries[0].status) == Some(expected),
            "{ack:?}"
        );
    }

    // A body over the limit, and a message with no id: nothing is stored.
    let mut big = message("Bad", "", "T", "k", "01B0");
    big.body = vec![b'x'; (4 << 20) + 1].into();
    let sent = client
        .send_message(call(pb::SendMessageRequest {
            messages: vec![big],
        }))
        .await?
        .into_inner();
    ensure!(
        code_of(&sent.status) == Some(Code::MessageBodyTooLarge),
        "{sent:?}"
    );
    let no_id = message("Bad", "x", "T", "k", "");
    let sent = client
        .send_message(call(pb::SendMessageRequest {
            messages: vec![no_id],
        }))
        .await?
        .into_inner();
    ensure!(
        code_of(&sent.status) == Some(Code::IllegalMessageId),
        "{sent:?}"
    );
    let (_, messages) = receive(&mut client, "bad-group", "Bad", Duration::from_secs(10)).await?;
    ensure!(messages.is_empty(), "{messages:?}");

    // Malformed protobuf on the wire: a gRPC error for that call, and the server serves on.
    let raw = tonic::client::Grpc::new(
        Endpoint::from_shared(format!("http://{grpc_addr}"))?
            .connect()
            .await?,
    );
    let mut raw = raw;
    raw.ready().await?;
    let garbage: Result<tonic::Response<bytes::Bytes>, tonic::Status> = raw
        .unary(
            call(bytes::Bytes::from_static(&[0xff, 0xff, 0xff, 0x0f, 0x08])),
            "/apache.rocketmq.v2.MessagingService/QueryRoute".parse()?,
            RawCodec,
        )
        .await;
    ensure!(
        garbage.is_err(),
        "malformed protobuf is refused: {garbage:?}"
    );
    let route = client
        .query_route(call(pb::QueryRouteRequest {
            topic: resource("StillServing"),
            endpoints: None,
        }))
        .await?
        .into_inner();
    ensure!(code_of(&route.status) == Some(Code::Ok), "{route:?}");

    // A topic nobody created: its route and a send to it are TOPIC_NOT_FOUND, as at the proxy,
    // and neither creates it (auto-creation is on: only a remoting producer's send creates).
    let route = client
        .query_route(call(pb::QueryRouteRequest {
            topic: resource("NoSuchTopic"),
            endpoints: None,
        }))
        .await?
        .into_inner();
    ensure!(
        code_of(&route.status) == Some(Code::TopicNotFound),
        "{route:?}"
    );
    let sent = client
        .send_message(call(pb::SendMessageRequest {
            messages: vec![message("NoSuchTopic", "typo", "T", "k", "01T0")],
        }))
        .await?
        .into_inner();
    ensure!(
        code_of(&sent.status) == Some(Code::TopicNotFound),
        "{sent:?}"
    );
    let created = serving.node().broker().topic("NoSuchTopic")?;
    ensure!(
        created.is_none(),
        "a gRPC route or send created {created:?}"
    );

    serving.shutdown().await?;
    Ok(())
}

#[actix_rt::test]
async fn a_remoting_producers_message_is_received_over_grpc() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let serving = start(dir.path()).await?;
    let addr = serving.local_addr().to_string();
    let remoting = RemotingClient::new(ClientConfig::default());
    let (topic, group) = ("CrossTopic", "cross-group");
    let send = testsuite::send_v2(topic, "from remoting")
        .queue_nums(2)
        .properties(testsuite::properties(&[
            ("TAGS", "TagR"),
            ("KEYS", "rk"),
            ("UNIQ_KEY", "01C0"),
            ("color", "blue"),
        ]))
        .build();
    let sent = remoting.invoke(&addr, send, CALL_TIMEOUT).await?;
    ensure!(sent.code == code::SUCCESS, "{sent:?}");

    // The same port speaks gRPC to this client.
    let mut client = connect(serving.local_addr()).await?;
    let (_settings, _keep, _inbound) =
        handshake(&mut client, consumer_settings(group, topic)).await?;
    let (status, messages) = receive(&mut client, group, topic, Duration::from_secs(30)).await?;
    ensure!(status == Some(Code::Ok), "{status:?}");
    ensure!(messages.len() == 1, "{messages:?}");
    let system = system(&messages[0]);
    ensure!(&messages[0].body[..] == b"from remoting", "{messages:?}");
    ensure!(
        system.tag.as_deref() == Some("TagR") && system.keys == ["rk"],
        "{system:?}"
    );
    ensure!(system.message_id == "01C0", "{system:?}");
    ensure!(
        messages[0].user_properties.get("color").map(String::as_str) == Some("blue"),
        "{:?}",
        messages[0].user_properties
    );
    serving.shutdown().await?;
    Ok(())
}

#[actix_rt::test]
async fn a_tls_client_hello_on_either_port_gets_a_certificate_and_h2() -> anyhow::Result<()> {
    use tokio_rustls::rustls;
    let dir = tempfile::tempdir()?;
    let serving = start(dir.path()).await?;
    for addr in [
        serving.local_addr(),
        serving.grpc_addr().context("grpc port")?,
    ] {
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate))
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let tls = connector
            .connect("localhost".try_into()?, tcp)
            .await
            .with_context(|| format!("TLS handshake with {addr}"))?;
        let (_, session) = tls.get_ref();
        ensure!(
            session.alpn_protocol() == Some(&b"h2"[..]),
            "ALPN h2 on {addr}"
        );
        ensure!(
            session.peer_certificates().is_some_and(|c| !c.is_empty()),
            "a certificate"
        );
    }
    serving.shutdown().await?;
    Ok(())
}

/// Passes request bytes through unencoded, to put malformed protobuf on the wire.
#[derive(Clone, Copy)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = bytes::Bytes;
    type Decode = bytes::Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = bytes::Bytes;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: bytes::Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put(item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = bytes::Bytes;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<bytes::Bytes>, tonic::Status> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// Trusts any server certificate, as RocketMQ 5 clients do by default.
#[derive(Debug)]
struct AnyCertificate;

impl tokio_rustls::rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[tokio_rustls::rustls::pki_types::CertificateDer<'_>],
        _server_name: &tokio_rustls::rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: tokio_rustls::rustls::pki_types::UnixTime,
    ) -> Result<tokio_rustls::rustls::client::danger::ServerCertVerified, tokio_rustls::rustls::Error>
    {
        Ok(tokio_rustls::rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
        _dss: &tokio_rustls::rustls::DigitallySignedStruct,
    ) -> Result<
        tokio_rustls::rustls::client::danger::HandshakeSignatureValid,
        tokio_rustls::rustls::Error,
    > {
        Ok(tokio_rustls::rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
        _dss: &tokio_rustls::rustls::DigitallySignedStruct,
    ) -> Result<
        tokio_rustls::rustls::client::danger::HandshakeSignatureValid,
        tokio_rustls::rustls::Error,
    > {
        Ok(tokio_rustls::rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<tokio_rustls::rustls::SignatureScheme> {
        #[allow(deprecated)]
        tokio_rustls::rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[actix_rt::test]
async fn a_connection_that_never_speaks_does_not_hold_up_shutdown() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let serving = start(dir.path()).await?;
    // Waiting for its first byte to tell remoting from gRPC, the main port must still stop.
    let _silent = tokio::net::TcpStream::connect(serving.local_addr()).await?;
    // A request answered on a later connection: the silent one was accepted before it.
    let remoting = RemotingClient::new(ClientConfig::default());
    let send = testsuite::send_v2("AfterSilence", "m").build();
    let sent = remoting
        .invoke(&serving.local_addr().to_string(), send, CALL_TIMEOUT)
        .await?;
    ensure!(sent.code == code::SUCCESS, "{sent:?}");
    drop(remoting);
    tokio::time::timeout(Duration::from_secs(20), serving.shutdown())
        .await
        .context("shutdown waited for a silent connection")??;
    Ok(())
}

/// A call signed as the 5.x clients sign: `authorization` over `x-mq-date-time`.
fn signed_call<T>(message: T, access_key: &str, secret_key: &str, date_time: &str) -> Request<T> {
    use skiff::acl::signature;
    let mut request = call(message);
    let metadata = request.metadata_mut();
    metadata.insert(signature::GRPC_DATE_TIME, date_time.parse().expect("ascii"));
    metadata.insert(
        "authorization",
        signature::grpc(access_key, secret_key, date_time)
            .parse()
            .expect("ascii"),
    );
    request
}

#[actix_rt::test]
async fn with_acl_on_grpc_calls_are_authenticated_and_authorized_and_a_reload_applies_at_once(
) -> anyhow::Result<()> {
    use skiff::acl::{signature, AccountConfig, Acl, AclConfig};
    let dir = tempfile::tempdir()?;
    let mut config = NodeConfig::in_dir(dir.path());
    config.listen = "127.0.0.1:0".parse()?;
    config.grpc_listen = "127.0.0.1:0".to_owned();
    config.metrics_listen = "off".to_owned();
    config.disk_max_used_ratio = 0.999;
    config.disk_full_ratio = 1.0;
    let alice = |topic_perms: &[&str]| AccountConfig {
        access_key: "alice".into(),
        secret_key: "alice-secret-1".into(),
        topic_perms: topic_perms.iter().map(|s| s.to_string()).collect(),
        ..AccountConfig::default()
    };
    config.acl = AclConfig {
        accounts: vec![alice(&["AclTopic=PUB|SUB"])],
        ..AclConfig::default()
    };
    let serving = serve::start(config).await?;
    create_topics(&serving, &["AclTopic"])?;
    let mut client = connect(serving.grpc_addr().context("the grpc listener")?).await?;
    let now = signature::format_date_time(std::time::SystemTime::now());
    let route = |topic: &str| pb::QueryRouteRequest {
        topic: resource(topic),
        endpoints: None,
    };
    let send = |topic: &str, id: &str| pb::SendMessageRequest {
        messages: vec![message(topic, "hello", "T", "k", id)],
    };

    let allowed = client
        .query_route(signed_call(
            route("AclTopic"),
            "alice",
            "alice-secret-1",
            &now,
        ))
        .await?
        .into_inner();
    ensure!(code_of(&allowed.status) == Some(Code::Ok), "{allowed:?}");
    let sent = client
        .send_message(signed_call(
            send("AclTopic", "01ACL0"),
            "alice",
            "alice-secret-1",
            &now,
        ))
        .await?
        .into_inner();
    ensure!(code_of(&sent.status) == Some(Code::Ok), "{sent:?}");

    let denied = client
        .send_message(signed_call(
            send("AclDenied", "01ACL1"),
            "alice",
            "alice-secret-1",
            &now,
        ))
        .await?
        .into_inner();
    ensure!(
        code_of(&denied.status) == Some(Code::Unauthorized)
            && denied
                .status
                .as_ref()
                .is_some_and(|s| s.message.contains("Topic:AclDenied")),
        "{denied:?}"
    );
    let wrong_secret = client
        .query_route(signed_call(route("AclTopic"), "alice", "guessed", &now))
        .await?
        .into_inner();
    ensure!(
        code_of(&wrong_secret.status) == Some(Code::Unauthorized),
        "{wrong_secret:?}"
    );
    let unsigned = client
        .query_route(call(route("AclTopic")))
        .await?
        .into_inner();
    ensure!(
        code_of(&unsigned.status) == Some(Code::Unauthorized),
        "{unsigned:?}"
    );
    let stale = client
        .query_route(signed_call(
            route("AclTopic"),
            "alice",
            "alice-secret-1",
            "20200101T000000Z",
        ))
        .await?
        .into_inner();
    ensure!(
        code_of(&stale.status) == Some(Code::Unauthorized)
            && stale
                .status
                .as_ref()
                .is_some_and(|s| s.message.contains("minutes")),
        "{stale:?}"
    );
    // Nothing of the refused send was stored.
    let denied_topic = serving.node().broker().topic("AclDenied")?;
    ensure!(
        denied_topic.is_none(),
        "the refused send created its topic: {denied_topic:?}"
    );
    create_topics(&serving, &["AclDenied"])?;

    // A new ACL applies to the next call on the same channel.
    serving.acl().replace(Acl::new(&AclConfig {
        accounts: vec![alice(&["AclTopic=PUB|SUB", "AclDenied=PUB"])],
        ..AclConfig::default()
    })?);
    let after = client
        .send_message(signed_call(
            send("AclDenied", "01ACL2"),
            "alice",
            "alice-secret-1",
            &now,
        ))
        .await?
        .into_inner();
    ensure!(
        code_of(&after.status) == Some(Code::Ok),
        "after the reload: {after:?}"
    );

    serving.shutdown().await?;
    Ok(())
}
