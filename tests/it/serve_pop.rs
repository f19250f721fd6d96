//! Pop consumption over TCP against `skiff serve`, with raw frames as a 5.x client sends them:
//! SET_MESSAGE_REQUEST_MODE and QUERY_ASSIGNMENT, POP_MESSAGE with its bookkeeping header,
//! ACK_MESSAGE, BATCH_ACK_MESSAGE (Java's base64 bit set), CHANGE_MESSAGE_INVISIBLETIME, the
//! revival that a held pop is woken by, NOTIFICATION, and the refusals Java answers.

use crate::common;
use skiff::testsuite;

use common::request;
use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{ensure, Context};
use skiff::actors::logic::pop::{Receipt, TopicKind};
use skiff::remoting::body::{
    BatchAck, BatchAckBody, JsonBody, MessageRequestMode, QueryAssignmentBody,
    QueryAssignmentResponseBody, SetMessageRequestModeBody,
};
use skiff::remoting::codes::{request as rc, response as code};
use skiff::remoting::frame::RemotingCommand;
use skiff::remoting::headers::{
    ChangeInvisibleTimeResponseHeader, CustomHeader, NotificationResponseHeader,
    PopMessageResponseHeader,
};
use skiff::remoting::{ClientConfig, RemotingClient};
use skiff::serve;
use skiff::storage::message::{decode_records, property, StoredMessage};
use skiff::NodeConfig;

const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const TOPIC: &str = "PopWire";
const GROUP: &str = "pop-wire-group";

fn send(topic: &str, body: &str) -> RemotingCommand {
    testsuite::send_v2(topic, body)
        .queue_nums(1)
        .properties(testsuite::properties(&[("TAGS", "TagA")]))
        .build()
}

fn pop(queue_id: i32, max: u32, invisible_ms: u64, poll_ms: u64) -> RemotingCommand {
    testsuite::pop(GROUP, TOPIC)
        .queue(queue_id)
        .max(max)
        .invisible_ms(invisible_ms)
        .poll_ms(poll_ms)
        .order(false)
        .build()
}

fn ack_header(code_: i32, topic: &str, message: &StoredMessage, receipt: &str) -> RemotingCommand {
    request(
        code_,
        &[
            ("consumerGroup", GROUP),
            ("topic", topic),
            ("queueId", &message.queue_id.to_string()),
            ("extraInfo", receipt),
            ("offset", &message.queue_offset.to_string()),
        ],
    )
}

fn body_of(response: &RemotingCommand) -> String {
    String::from_utf8_lossy(&response.body).into_owned()
}

/// The receipt the Java client builds for a message of a pop answer.
fn receipt(header: &PopMessageResponseHeader, message: &StoredMessage) -> String {
    if let Some(set) = message.property(property::POP_CK) {
        return set.to_owned();
    }
    let start: BTreeMap<String, u64> = header
        .start_offset_info
        .split(';')
        .filter_map(|entry| {
            let mut parts = entry.split(' ');
            let kind = parts.next()?;
            let queue = parts.next()?;
            Some((format!("{kind}@{queue}"), parts.next()?.parse().ok()?))
        })
        .collect();
    Receipt {
        checkpoint_offset: start[&format!("0@{}", message.queue_id)],
        pop_time_ms: header.pop_time,
        invisible_ms: header.invisible_time,
        revive_queue_id: header.revive_qid,
        kind: TopicKind::Normal,
        broker_name: "skiff".into(),
        queue_id: message.queue_id,
        queue_offset: Some(message.queue_offset),
    }
    .to_string()
}

#[actix_rt::test]
async fn a_raw_pop_client_pops_acks_and_sees_the_unacked_message_revived() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut config = NodeConfig::in_dir(dir.path());
    config.listen = "127.0.0.1:0".parse()?;
    config.disk_max_used_ratio = 0.999;
    config.disk_full_ratio = 1.0;
    let serving = serve::start(config).await?;
    let addr = serving.local_addr().to_string();
    let client = RemotingClient::new(ClientConfig::default());
    let call = |cmd: RemotingCommand| {
        let client = &client;
        let addr = &addr;
        async move { Ok::<_, anyhow::Error>(client.invoke(addr, cmd, CALL_TIMEOUT).await?) }
    };

    for body in ["m0", "m1", "m2", "m3"] {
        let sent = call(send(TOPIC, body)).await?;
        ensure!(sent.code == code::SUCCESS, "send: {sent:?}");
    }

    // The broker hands the group's queues out for pop once the mode says so.
    let mut set_mode = RemotingCommand::new_request(rc::SET_MESSAGE_REQUEST_MODE);
    set_mode.body = SetMessageRequestModeBody {
        topic: TOPIC.into(),
        consumer_group: GROUP.into(),
        mode: MessageRequestMode::Pop,
        pop_share_queue_num: 0,
    }
    .encode()
    .into();
    let answer = call(set_mode.clone()).await?;
    ensure!(answer.code == code::SUCCESS, "set mode: {answer:?}");
    set_mode.body = SetMessageRequestModeBody {
        topic: format!("%RETRY%{GROUP}"),
        consumer_group: GROUP.into(),
        mode: MessageRequestMode::Pop,
        pop_share_queue_num: 0,
    }
    .encode()
    .into();
    ensure!(call(set_mode).await?.code == code::NO_PERMISSION);
    let heartbeat = format!(
        r#"{{"clientID":"10.0.0.1@pop","consumerDataSet":[{{"groupName":"{GROUP}","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{{"topic":"{TOPIC}","subString":"*","expressionType":"TAG"}}]}}],"producerDataSet":[]}}"#
    );
    let beat = RemotingCommand::new_request(rc::HEART_BEAT).with_body(heartbeat.into_bytes());
    ensure!(call(beat).await?.code == code::SUCCESS);
    let mut query = RemotingCommand::new_request(rc::QUERY_ASSIGNMENT);
    query.body = QueryAssignmentBody {
        topic: TOPIC.into(),
        consumer_group: GROUP.into(),
        client_id: "10.0.0.1@pop".into(),
        strategy_name: "AVG".into(),
        ..QueryAssignmentBody::default()
    }
    .encode()
    .into();
    let answer = call(query).await?;
    ensure!(answer.code == code::SUCCESS);
    let assignments = QueryAssignmentResponseBody::decode(&answer.body)?
        .message_queue_assignments
        .context("no assignment")?;
    ensure!(
        assignments.len() == 1
            && assignments[0].message_queue.queue_id == -1
            && assignments[0].mode == MessageRequestMode::Pop,
        "assignments: {}",
        body_of(&answer)
    );

    // Java's refusals.
    ensure!(call(pop(-1, 33, 60_000, 0)).await?.code == code::INVALID_PARAMETER);
    let mut unknown = pop(-1, 4, 60_000, 0);
    unknown
        .ext_fields
        .insert("topic".into(), "NoSuchTopic".into());
    ensure!(call(unknown).await?.code == code::TOPIC_NOT_EXIST);

    let first = call(pop(-1, 32, 60_000, 0)).await?;
    ensure!(first.code == code::SUCCESS, "pop: {first:?}");
    let header = PopMessageResponseHeader::from_command(&first)?;
    ensure!(header.msg_offset_info == "0 0 0,1,2,3", "{header:?}");
    ensure!(header.start_offset_info == "0 0 0", "{header:?}");
    let messages = decode_records(first.body.clone())?;
    ensure!(messages.len() == 4);
    let nothing = call(pop(-1, 32, 60_000, 0)).await?;
    ensure!(nothing.code == code::POLLING_TIMEOUT, "{nothing:?}");

    // m0 by ACK_MESSAGE; m1 and m2 by one BATCH_ACK_MESSAGE; m3 becomes visible in a second.
    let acked = call(ack_header(
        rc::ACK_MESSAGE,
        TOPIC,
        &messages[0],
        &receipt(&header, &messages[0]),
    ))
    .await?;
    ensure!(acked.code == code::SUCCESS, "ack: {acked:?}");
    let mut batch = BatchAck {
        consumer_group: GROUP.into(),
        topic: TOPIC.into(),
        retry: "0".into(),
        start_offset: 0,
        queue_id: 0,
        revive_queue_id: header.revive_qid,
        pop_time: header.pop_time,
        invisible_time: header.invisible_time,
        bits: Vec::new(),
    };
    batch.set(1);
    batch.set(2);
    let mut batch_ack = RemotingCommand::new_request(rc::BATCH_ACK_MESSAGE);
    batch_ack.body = BatchAckBody {
        broker_name: "skiff".into(),
        acks: vec![batch],
    }
    .encode()
    .into();
    ensure!(call(batch_ack).await?.code == code::SUCCESS);
    let mut change = ack_header(
        rc::CHANGE_MESSAGE_INVISIBLETIME,
        TOPIC,
        &messages[3],
        &receipt(&header, &messages[3]),
    );
    change
        .ext_fields
        .insert("invisibleTime".into(), "1000".into());
    let changed = call(change).await?;
    ensure!(changed.code == code::SUCCESS, "change: {changed:?}");
    let changed = ChangeInvisibleTimeResponseHeader::from_command(&changed)?;
    ensure!(changed.invisible_time == 1000 && changed.pop_time >= header.pop_time);

    // A held pop is woken by the revival of m3 into the retry topic.
    let held_since = std::time::Instant::now();
    let revived = call(pop(-1, 32, 60_000, 20_000)).await?;
    ensure!(revived.code == code::SUCCESS, "revived pop: {revived:?}");
    ensure!(
        held_since.elapsed() < Duration::from_secs(19),
        "the held pop ran out its poll time instead of being woken by the revival"
    );
    let messages = decode_records(revived.body.clone())?;
    ensure!(messages.len() == 1 && &messages[0].body[..] == b"m3");
    let m3 = &messages[0];
    ensure!(m3.topic == TOPIC && m3.reconsume_times == 1, "{m3:?}");
    let m3_receipt = m3.property(property::POP_CK).context("no POP_CK")?;
    ensure!(Receipt::parse(m3_receipt)?.kind == TopicKind::Retry);
    let acked = call(ack_header(
        rc::ACK_MESSAGE,
        &format!("%RETRY%{GROUP}_{TOPIC}"),
        m3,
        m3_receipt,
    ))
    .await?;
    ensure!(acked.code == code::SUCCESS, "ack of the revived: {acked:?}");

    let notification = request(
        rc::NOTIFICATION,
        &[
            ("consumerGroup", GROUP),
            ("topic", TOPIC),
            ("queueId", "-1"),
            ("pollTime", "0"),
            ("bornTime", "1700000000000"),
        ],
    );
    let answer = call(notification.clone()).await?;
    ensure!(!NotificationResponseHeader::from_command(&answer)?.has_msg);
    ensure!(call(send(TOPIC, "m4")).await?.code == code::SUCCESS);
    let answer = call(notification).await?;
    ensure!(NotificationResponseHeader::from_command(&answer)?.has_msg);

    serving.shutdown().await?;
    Ok(())
}
