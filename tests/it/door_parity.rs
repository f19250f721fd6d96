//! One broker, three doors: every bad request of one table is driven through the remoting
//! protocol and through the gRPC protocol (and through the console's HTTP API where it sends),
//! and each door must refuse it with its own protocol's code while the broker stores and changes
//! nothing. A rule written in one door only fails here.
//!
//! Two cases are accepted rather than refused, as Apache RocketMQ accepts them: an
//! acknowledgement by a group that holds nothing acknowledges nothing, on both doors; and an
//! acknowledgement of an expired receipt is refused by the gRPC door (the proxy's
//! INVALID_RECEIPT_HANDLE) and taken by the remoting door (Java's broker takes it).

use std::collections::BTreeMap;

use anyhow::{ensure, Context};
use skiff::actors::broker::{AckRequest, ExpiredReceipt};
use skiff::actors::logic::pop::{Receipt, TopicKind};
use skiff::actors::logic::transaction::TRANSACTION_PREPARED_TYPE;
use skiff::grpc::pb::messaging_service_client::MessagingServiceClient;
use skiff::grpc::pb::{self, Code};
use skiff::remoting::body::encode_batch;
use skiff::remoting::codes::{request as rc, response as code};
use skiff::remoting::frame::RemotingCommand;
use skiff::serve::{self, Serving};
use skiff::storage::clock::epoch_millis;
use skiff::storage::message::{decode_records, MessageToAppend};
use skiff::testsuite::{self, RawConn};
use skiff::NodeConfig;
use tonic::transport::Channel;

use crate::common::grpc::{call, code_of, connect, message, resource};
use crate::common::{http_request, request};

const TOPIC: &str = "Parity";
const HOLDER: &str = "parity-holder";
const STRANGER: &str = "parity-stranger";
/// The header the console asks of every change (against cross-site forms).
const CSRF: (&str, &str) = (skiff::console::CSRF_HEADER, "1");
/// Larger than the default `max_message_size` (4 MiB).
const OVERSIZE: usize = (4 << 20) + 1;

/// One bad request as each door says it, and what each door must answer.
struct Case {
    name: &'static str,
    remoting: RemotingCommand,
    remoting_code: i32,
    grpc: GrpcRequest,
    grpc_code: Code,
    /// The console's test-message send of the same, and the HTTP status it must answer.
    console: Option<(&'static str, &'static str)>,
}

enum GrpcRequest {
    Send(pb::SendMessageRequest),
    Ack(pb::AckMessageRequest),
    Route(pb::QueryRouteRequest),
    Recall(pb::RecallMessageRequest),
}

impl GrpcRequest {
    async fn answer(self, client: &mut MessagingServiceClient<Channel>) -> anyhow::Result<Code> {
        let status = match self {
            GrpcRequest::Send(r) => client.send_message(call(r)).await?.into_inner().status,
            GrpcRequest::Ack(r) => client.ack_message(call(r)).await?.into_inner().status,
            GrpcRequest::Route(r) => client.query_route(call(r)).await?.into_inner().status,
            GrpcRequest::Recall(r) => client.recall_message(call(r)).await?.into_inner().status,
        };
        code_of(&status).context("an answer without a status")
    }
}

fn grpc_recall(topic: &str, handle: &str) -> GrpcRequest {
    GrpcRequest::Recall(pb::RecallMessageRequest {
        topic: resource(topic),
        recall_handle: handle.to_owned(),
    })
}

fn remoting_recall(topic: &str, handle: &str) -> RemotingCommand {
    request(
        rc::RECALL_MESSAGE,
        &[
            ("topic", topic),
            ("recallHandle", handle),
            ("producerGroup", "pg"),
        ],
    )
}

/// A recall handle as a timer send answers it (`v1 topic broker due+1 id`, URL-safe base64).
fn recall_handle(topic: &str, broker: &str, due_ms: i64, id: &str) -> String {
    skiff::actors::logic::recall::RecallHandle::encode(topic, broker, due_ms, id)
}

fn grpc_send(messages: Vec<pb::Message>) -> GrpcRequest {
    GrpcRequest::Send(pb::SendMessageRequest { messages })
}

fn grpc_ack(group: &str, topic: &str, handle: &str) -> GrpcRequest {
    GrpcRequest::Ack(pb::AckMessageRequest {
        group: resource(group),
        topic: resource(topic),
        entries: vec![pb::AckMessageEntry {
            message_id: "01".into(),
            receipt_handle: handle.into(),
            lite_topic: None,
        }],
    })
}

fn remoting_send(topic: &str) -> RemotingCommand {
    testsuite::send_v2(topic, "x").build()
}

fn remoting_ack(
    group: &str,
    topic: &str,
    queue_id: u32,
    offset: u64,
    receipt: &str,
) -> RemotingCommand {
    request(
        rc::ACK_MESSAGE,
        &[
            ("consumerGroup", group),
            ("topic", topic),
            ("queueId", &queue_id.to_string()),
            ("extraInfo", receipt),
            ("offset", &offset.to_string()),
        ],
    )
}

/// A receipt as the broker hands them out, naming `queue_id` and `offset`, popped at `pop_ms`.
fn receipt(queue_id: u32, offset: u64, pop_ms: i64) -> String {
    Receipt {
        checkpoint_offset: offset,
        pop_time_ms: pop_ms,
        invisible_ms: 60_000,
        revive_queue_id: 0,
        kind: TopicKind::Normal,
        broker_name: "skiff".into(),
        queue_id,
        queue_offset: Some(offset),
    }
    .to_string()
}

fn typed(mut message: pb::Message, message_type: pb::MessageType) -> pb::Message {
    if let Some(system) = message.system_properties.as_mut() {
        system.message_type = message_type as i32;
    }
    message
}

/// A SEND_BATCH_MESSAGE of two transaction halves.
fn remoting_batch_of_halves() -> RemotingCommand {
    let half = |body: &str| MessageToAppend {
        topic: TOPIC.into(),
        queue_id: 0,
        flag: 0,
        sys_flag: TRANSACTION_PREPARED_TYPE,
        born_timestamp: 0,
        born_host: "127.0.0.1:1".parse().expect("an address"),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        properties: String::new(),
        body: body.as_bytes().to_vec().into(),
    };
    testsuite::send_v2(TOPIC, encode_batch(&[half("a"), half("b")]))
        .code(rc::SEND_BATCH_MESSAGE)
        .sys_flag(TRANSACTION_PREPARED_TYPE)
        .build()
        .with_ext("m", "true")
}

/// A node on free loopback ports (the console's on `metrics_listen`) that never refuses for
/// disk space, with a remoting connection and a gRPC client to it.
async fn start(
    dir: &std::path::Path,
    metrics_listen: &str,
) -> anyhow::Result<(Serving, RawConn, MessagingServiceClient<Channel>)> {
    let mut config = NodeConfig::in_dir(dir);
    config.listen = "127.0.0.1:0".parse()?;
    config.grpc_listen = "127.0.0.1:0".to_owned();
    config.metrics_listen = metrics_listen.to_owned();
    config.disk_max_used_ratio = 0.999;
    config.disk_full_ratio = 1.0;
    let serving = serve::start(config).await?;
    let remoting = RawConn::connect(&serving.local_addr().to_string()).await?;
    let grpc = connect(serving.grpc_addr().context("the grpc listener")?).await?;
    Ok((serving, remoting, grpc))
}

/// What a client can see of the broker's state: every topic and every queue's max offset.
fn state(serving: &Serving) -> anyhow::Result<BTreeMap<String, Vec<u64>>> {
    let broker = serving.node().broker();
    let mut state = BTreeMap::new();
    for topic in broker.topics()? {
        let queues = topic.read_queue_nums.max(topic.write_queue_nums);
        let offsets = (0..queues)
            .map(|q| broker.reader().max_offset(&topic.name, q))
            .collect();
        state.insert(topic.name, offsets);
    }
    Ok(state)
}

#[actix_rt::test]
async fn every_door_refuses_the_same_bad_requests_each_with_its_own_code() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (serving, mut remoting, mut grpc) = start(dir.path(), "127.0.0.1:0").await?;
    let console = serving
        .metrics_addr()
        .context("the http listener")?
        .to_string();

    // A message waiting two hours in the delay topic, so that topic exists for the console to
    // be refused by the broker rather than by its own lookup.
    let delayed = testsuite::send_v2(TOPIC, "later")
        .properties(testsuite::properties(&[("DELAY", "18")]))
        .build();
    let delayed = remoting.call(delayed).await?;
    ensure!(delayed.code == code::SUCCESS, "{delayed:?}");

    // One message in queue 0, popped and held by HOLDER.
    let sent = remoting.call(remoting_send(TOPIC)).await?;
    ensure!(sent.code == code::SUCCESS, "{sent:?}");
    let popped = remoting
        .call(
            testsuite::pop(HOLDER, TOPIC)
                .queue(0)
                .invisible_ms(600_000)
                .build(),
        )
        .await?;
    ensure!(popped.code == code::SUCCESS, "{popped:?}");
    let held = decode_records(popped.body.clone())?;
    ensure!(held.len() == 1, "{held:?}");
    let pop_time: i64 = popped.ext("popTime").context("popTime")?.parse()?;
    let live = receipt(0, 0, pop_time);
    let before = state(&serving)?;

    let now = epoch_millis();
    let cases = vec![
        Case {
            name: "a recall by a handle that is not one",
            remoting: remoting_recall(TOPIC, "not-a-handle"),
            remoting_code: code::ILLEGAL_OPERATION,
            grpc: grpc_recall(TOPIC, "not-a-handle"),
            // Apache's proxy maps none of the broker's recall answers.
            grpc_code: Code::InternalServerError,
            console: None,
        },
        Case {
            name: "a recall whose time has passed",
            remoting: remoting_recall(TOPIC, &recall_handle(TOPIC, "skiff", now - 1_000, "01B1")),
            remoting_code: code::ILLEGAL_OPERATION,
            grpc: grpc_recall(TOPIC, &recall_handle(TOPIC, "skiff", now - 1_000, "01B1")),
            grpc_code: Code::InternalServerError,
            console: None,
        },
        Case {
            name: "a recall naming another topic than its handle's",
            remoting: remoting_recall(TOPIC, &recall_handle("Else", "skiff", now + 60_000, "01B2")),
            remoting_code: code::ILLEGAL_OPERATION,
            grpc: grpc_recall(TOPIC, &recall_handle("Else", "skiff", now + 60_000, "01B2")),
            grpc_code: Code::InternalServerError,
            console: None,
        },
        Case {
            name: "a recall on a topic that does not exist",
            remoting: remoting_recall(
                "NoSuchTopic",
                &recall_handle("NoSuchTopic", "skiff", now + 60_000, "01B3"),
            ),
            remoting_code: code::TOPIC_NOT_EXIST,
            grpc: grpc_recall(
                "NoSuchTopic",
                &recall_handle("NoSuchTopic", "skiff", now + 60_000, "01B3"),
            ),
            grpc_code: Code::TopicNotFound,
            console: None,
        },
        Case {
            name: "a send to the delay topic",
            remoting: remoting_send("SCHEDULE_TOPIC_XXXX"),
            remoting_code: code::NO_PERMISSION,
            grpc: grpc_send(vec![message("SCHEDULE_TOPIC_XXXX", "x", "T", "k", "01A1")]),
            grpc_code: Code::Forbidden,
            console: Some(("SCHEDULE_TOPIC_XXXX", "403")),
        },
        Case {
            name: "a send to the transaction half topic",
            remoting: remoting_send("RMQ_SYS_TRANS_HALF_TOPIC"),
            remoting_code: code::NO_PERMISSION,
            grpc: grpc_send(vec![message(
                "RMQ_SYS_TRANS_HALF_TOPIC",
                "x",
                "T",
                "k",
                "01A2",
            )]),
            grpc_code: Code::Forbidden,
            console: Some(("RMQ_SYS_TRANS_HALF_TOPIC", "404")),
        },
        Case {
            name: "a send to the timer topic",
            remoting: remoting_send("rmq_sys_wheel_timer"),
            remoting_code: code::NO_PERMISSION,
            grpc: grpc_send(vec![message("rmq_sys_wheel_timer", "x", "T", "k", "01A3")]),
            grpc_code: Code::Forbidden,
            console: Some(("rmq_sys_wheel_timer", "404")),
        },
        Case {
            name: "a route to the timer topic, which must not make it",
            remoting: request(
                rc::GET_ROUTEINFO_BY_TOPIC,
                &[("topic", "rmq_sys_wheel_timer")],
            ),
            remoting_code: code::TOPIC_NOT_EXIST,
            grpc: GrpcRequest::Route(pb::QueryRouteRequest {
                topic: resource("rmq_sys_wheel_timer"),
                endpoints: None,
            }),
            grpc_code: Code::TopicNotFound,
            console: None,
        },
        Case {
            name: "an illegal topic name",
            remoting: remoting_send("no spaces!"),
            remoting_code: code::SYSTEM_ERROR,
            grpc: grpc_send(vec![message("no spaces!", "x", "T", "k", "01A4")]),
            grpc_code: Code::IllegalTopic,
            console: Some(("no%20spaces!", "404")),
        },
        Case {
            name: "an oversize body",
            remoting: testsuite::send_v2(TOPIC, vec![b'x'; OVERSIZE]).build(),
            remoting_code: code::MESSAGE_ILLEGAL,
            grpc: grpc_send(vec![{
                let mut big = message(TOPIC, "", "T", "k", "01A5");
                big.body = vec![b'x'; OVERSIZE].into();
                big
            }]),
            grpc_code: Code::MessageBodyTooLarge,
            console: None,
        },
        Case {
            name: "a batch of transaction halves",
            remoting: remoting_batch_of_halves(),
            remoting_code: code::MESSAGE_ILLEGAL,
            grpc: grpc_send(vec![
                typed(
                    message(TOPIC, "a", "T", "k", "01A6"),
                    pb::MessageType::Transaction,
                ),
                typed(
                    message(TOPIC, "b", "T", "k", "01A7"),
                    pb::MessageType::Transaction,
                ),
            ]),
            grpc_code: Code::BadRequest,
            console: None,
        },
        Case {
            name: "a send to a queue the topic does not have",
            remoting: testsuite::send_v2(TOPIC, "x").queue(99).build(),
            remoting_code: code::SYSTEM_ERROR,
            // A gRPC send names no queue; its acknowledgement does.
            grpc: grpc_ack(HOLDER, TOPIC, &receipt(99, 0, now)),
            grpc_code: Code::BadRequest,
            console: None,
        },
        Case {
            name: "an acknowledgement on a queue the topic does not have",
            remoting: remoting_ack(HOLDER, TOPIC, 99, 0, &receipt(99, 0, now)),
            remoting_code: code::MESSAGE_ILLEGAL,
            grpc: grpc_ack(HOLDER, TOPIC, &receipt(99, 0, now)),
            grpc_code: Code::BadRequest,
            console: None,
        },
        Case {
            name: "an acknowledgement past the queue's end",
            remoting: remoting_ack(HOLDER, TOPIC, 0, 1000, &receipt(0, 1000, now)),
            remoting_code: code::NO_MESSAGE,
            grpc: grpc_ack(HOLDER, TOPIC, &receipt(0, 1000, now)),
            grpc_code: Code::InvalidReceiptHandle,
            console: None,
        },
        Case {
            name: "an acknowledgement on an unknown topic",
            remoting: remoting_ack(HOLDER, "NoSuchTopic", 0, 0, &receipt(0, 0, now)),
            remoting_code: code::TOPIC_NOT_EXIST,
            grpc: grpc_ack(HOLDER, "NoSuchTopic", &receipt(0, 0, now)),
            grpc_code: Code::TopicNotFound,
            console: None,
        },
        Case {
            name: "a forged receipt",
            remoting: remoting_ack(HOLDER, TOPIC, 0, 0, "forged"),
            remoting_code: code::SYSTEM_ERROR,
            grpc: grpc_ack(HOLDER, TOPIC, "forged"),
            grpc_code: Code::InternalServerError,
            console: None,
        },
        Case {
            name: "an expired receipt (taken by remoting, as Java's broker takes it)",
            remoting: remoting_ack(HOLDER, TOPIC, 0, 0, &receipt(0, 0, 1_000)),
            remoting_code: code::SUCCESS,
            grpc: grpc_ack(HOLDER, TOPIC, &receipt(0, 0, 1_000)),
            grpc_code: Code::InvalidReceiptHandle,
            console: None,
        },
        Case {
            name: "an acknowledgement by a group that holds nothing (taken, as Apache takes it)",
            remoting: remoting_ack(STRANGER, TOPIC, 0, 0, &live),
            remoting_code: code::SUCCESS,
            grpc: grpc_ack(STRANGER, TOPIC, &live),
            grpc_code: Code::Ok,
            console: None,
        },
    ];
    let mut wrong = Vec::new();
    for case in cases {
        let remoting_answer = remoting.call(case.remoting).await?;
        let grpc_answer = case.grpc.answer(&mut grpc).await?;
        if remoting_answer.code != case.remoting_code || grpc_answer != case.grpc_code {
            wrong.push(format!(
                "{}: remoting {} {:?} (want {}), grpc {grpc_answer:?} (want {:?})",
                case.name,
                remoting_answer.code,
                remoting_answer.remark,
                case.remoting_code,
                case.grpc_code
            ));
        }
        if let Some((topic, want)) = case.console {
            let path = format!("/api/v1/topics/{topic}/messages");
            let answer =
                http_request(&console, "POST", &path, &[CSRF], Some(r#"{"body":"x"}"#)).await?;
            let status_line = answer.lines().next().unwrap_or_default();
            if status_line.split(' ').nth(1) != Some(want) {
                wrong.push(format!(
                    "{}: console {status_line} (want {want})",
                    case.name
                ));
            }
        }
    }
    ensure!(
        wrong.is_empty(),
        "doors answered otherwise:\n{}",
        wrong.join("\n")
    );
    ensure!(
        state(&serving)? == before,
        "a refused request changed the broker's topics or queues"
    );
    // The message HOLDER holds is still held: nothing above acknowledged it.
    let still_held = serving
        .node()
        .broker()
        .ack(AckRequest {
            group: HOLDER.into(),
            topic: TOPIC.into(),
            queue_id: 0,
            offset: 0,
            receipt: Receipt::parse(&live)?,
            expired: ExpiredReceipt::Accept,
        })
        .await?;
    ensure!(
        still_held,
        "a refused or foreign acknowledgement released the message"
    );
    serving.shutdown().await?;
    Ok(())
}

/// A timer sent through one door is recalled through the other: each send answers a handle,
/// each door takes the other's, and neither message fires while a timer due with them does.
#[actix_rt::test]
async fn a_timer_sent_through_one_door_is_recalled_through_the_other() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (serving, mut remoting, mut grpc) = start(dir.path(), "off").await?;
    let topic = "Recalls";
    let due = (epoch_millis() + 3_000).to_string();
    let timer = |body: &str, id: &str| {
        testsuite::send_v2(topic, body)
            .properties(testsuite::properties(&[
                ("TIMER_DELIVER_MS", &due),
                ("UNIQ_KEY", id),
            ]))
            .build()
    };

    let by_remoting = remoting.call(timer("remoting", "01C1")).await?;
    ensure!(by_remoting.code == code::SUCCESS, "{by_remoting:?}");
    let remoting_handle = by_remoting
        .ext("recallHandle")
        .context("a recall handle")?
        .to_owned();
    let kept = remoting.call(timer("kept", "01C2")).await?;
    ensure!(kept.code == code::SUCCESS, "{kept:?}");
    let plain = remoting
        .call(testsuite::send_v2(topic, "now").build())
        .await?;
    ensure!(
        plain.ext("recallHandle").is_none(),
        "a plain send has no recall handle: {plain:?}"
    );

    let mut grpc_message = message(topic, "grpc", "T", "k", "01C3");
    if let Some(system) = grpc_message.system_properties.as_mut() {
        let at: i64 = due.parse()?;
        system.delivery_timestamp = Some(prost_types::Timestamp {
            seconds: at / 1000,
            nanos: i32::try_from(at % 1000)? * 1_000_000,
        });
        system.message_type = pb::MessageType::Delay as i32;
    }
    let sent = grpc
        .send_message(call(pb::SendMessageRequest {
            messages: vec![grpc_message],
        }))
        .await?
        .into_inner();
    ensure!(code_of(&sent.status) == Some(Code::Ok), "{sent:?}");
    let grpc_handle = sent.entries[0].recall_handle.clone();
    ensure!(
        !grpc_handle.is_empty(),
        "a timer sent over gRPC has a recall handle: {sent:?}"
    );

    let recalled = grpc
        .recall_message(call(pb::RecallMessageRequest {
            topic: resource(topic),
            recall_handle: remoting_handle,
        }))
        .await?
        .into_inner();
    ensure!(code_of(&recalled.status) == Some(Code::Ok), "{recalled:?}");
    ensure!(recalled.message_id == "01C1", "{recalled:?}");
    let recalled = remoting.call(remoting_recall(topic, &grpc_handle)).await?;
    ensure!(recalled.code == code::SUCCESS, "{recalled:?}");
    ensure!(recalled.ext("msgId") == Some("01C3"), "{recalled:?}");

    // The timer due with them arrives; then neither recalled one is there.
    let broker = serving.node().broker();
    let delivered = || -> anyhow::Result<Vec<String>> {
        let mut bodies = Vec::new();
        for queue_id in 0..4 {
            let read = broker
                .reader()
                .read(topic, queue_id, 0, 64, 1 << 20, None)?;
            for m in decode_records(read.records)? {
                bodies.push(String::from_utf8_lossy(&m.body).into_owned());
            }
        }
        bodies.sort();
        Ok(bodies)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !delivered()?.contains(&"kept".to_owned()) {
        ensure!(
            std::time::Instant::now() < deadline,
            "the kept timer never fired"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    ensure!(delivered()? == ["kept", "now"], "{:?}", delivered()?);
    serving.shutdown().await?;
    Ok(())
}
