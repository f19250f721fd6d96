//! Request-reply over TCP against `skiff serve`, with raw frames: a requester connection (a
//! producer's heartbeat with its client id, then the request), a replier on another connection
//! sending SEND_REPLY_MESSAGE(_V2), and the PUSH_REPLY_MESSAGE_TO_CLIENT (326) the broker sends
//! on the requester's connection, answered by the test.

use crate::common;

use common::{expect_code, request, Harness};
use skiff::testsuite::{self, RawConn};

use anyhow::{anyhow, ensure};
use skiff::remoting::body::{JsonBody, TopicRouteData};
use skiff::remoting::codes::{request as rc, response as code, AUTO_CREATE_TOPIC_KEY};
use skiff::remoting::frame::RemotingCommand;
use skiff::remoting::headers::{CustomHeader, ReplyMessageRequestHeader};
use skiff::remoting::{ClientConfig, RemotingClient};
use skiff::storage::message::{decode_records, property};

/// Failure bound for one request or one awaited frame.
const REPLY_TOPIC: &str = "DefaultCluster_REPLY_TOPIC";
const REQUESTER_ID: &str = "10.0.0.7@requester";

/// A send with the V2 (single-letter) header: SEND_MESSAGE_V2 or SEND_REPLY_MESSAGE_V2.
fn send_v2(code: i32, topic: &str, body: &str, properties: &str) -> RemotingCommand {
    testsuite::send_v2(topic, body)
        .code(code)
        .properties(properties)
        .build()
}

/// SEND_REPLY_MESSAGE (324) with the V1 header.
fn reply_v1(body: &str, properties: &str) -> RemotingCommand {
    request(
        rc::SEND_REPLY_MESSAGE,
        &[
            ("producerGroup", "replier"),
            ("topic", REPLY_TOPIC),
            ("defaultTopic", AUTO_CREATE_TOPIC_KEY),
            ("defaultTopicQueueNums", "4"),
            ("queueId", "0"),
            ("sysFlag", "0"),
            ("bornTimestamp", "1700000000000"),
            ("flag", "0"),
            ("properties", properties),
        ],
    )
    .with_body(body.as_bytes().to_vec())
}

fn reply_properties(correlation_id: &str, to: &str) -> String {
    testsuite::properties(&[
        ("MSG_TYPE", "reply"),
        ("CORRELATION_ID", correlation_id),
        ("REPLY_TO_CLIENT", to),
        ("TTL", "3000"),
    ])
}

fn pull(topic: &str, offset: u64) -> RemotingCommand {
    // The subscription is in the request.
    testsuite::pull("reader", topic, 0, offset)
        .sys_flag(4)
        .build()
}

/// The requester: a producer heartbeat registers its client id on this connection.
async fn requester(addr: &str) -> anyhow::Result<RawConn> {
    let mut conn = RawConn::connect(addr).await?;
    let body = format!(
        r#"{{"clientID":"{REQUESTER_ID}","producerDataSet":[{{"groupName":"requesters"}},{{"groupName":"CLIENT_INNER_PRODUCER"}}],"consumerDataSet":[]}}"#
    );
    let resp = conn.call(testsuite::heartbeat(&body)).await?;
    expect_code(&resp, code::SUCCESS)?;
    Ok(conn)
}

#[actix_rt::test]
async fn a_reply_is_pushed_to_the_requester_connection_and_stored() -> anyhow::Result<()> {
    let h = Harness::start_with(|_| {}).await?;
    let mut req = requester(&h.addr).await?;
    let replier = RemotingClient::new(ClientConfig::default());

    // The request: an ordinary send carrying the correlation properties.
    let request_props = testsuite::properties(&[
        ("CORRELATION_ID", "corr-1"),
        ("REPLY_TO_CLIENT", REQUESTER_ID),
        ("TTL", "3000"),
    ]);
    let resp = req
        .call(send_v2(rc::SEND_MESSAGE_V2, "RQ", "ping", &request_props))
        .await?;
    expect_code(&resp, code::SUCCESS)?;

    // The replier reads it: the broker stamped its cluster, which names the reply topic.
    let resp = h.call(&replier, pull("RQ", 0)).await?;
    expect_code(&resp, code::SUCCESS)?;
    let stored = decode_records(resp.body.clone())?;
    let cluster = stored
        .first()
        .and_then(|m| property(&m.properties, "CLUSTER"))
        .ok_or_else(|| anyhow!("the stored request has no CLUSTER: {stored:?}"))?;
    ensure!(format!("{cluster}_REPLY_TOPIC") == REPLY_TOPIC);

    // The reply (325) waits for the requester's answer to the push (326).
    let replier_side = h.call(
        &replier,
        send_v2(
            rc::SEND_REPLY_MESSAGE_V2,
            REPLY_TOPIC,
            "pong",
            &reply_properties("corr-1", REQUESTER_ID),
        ),
    );
    let requester_side = async {
        let push = req.read().await?;
        ensure!(
            push.code == rc::PUSH_REPLY_MESSAGE_TO_CLIENT && !push.is_response(),
            "expected a 326 push, got {push:?}"
        );
        req.write(&RemotingCommand::success_to(&push)).await?;
        Ok::<_, anyhow::Error>(push)
    };
    let (answer, push) = tokio::join!(replier_side, requester_side);
    let (answer, push) = (answer?, push?);

    let header = ReplyMessageRequestHeader::from_command(&push)?;
    ensure!(push.body.as_ref() == b"pong", "{:?}", push.body);
    ensure!(header.topic == REPLY_TOPIC && header.producer_group == "pg");
    ensure!(header.queue_id == 0 && header.born_timestamp == 1_700_000_000_000);
    ensure!(header.store_timestamp > 0 && header.store_host.contains(':'));
    ensure!(
        header.born_host.starts_with("127.0.0.1:"),
        "{}",
        header.born_host
    );
    let pushed = header.properties.unwrap_or_default();
    ensure!(property(&pushed, "CORRELATION_ID") == Some("corr-1"));
    ensure!(property(&pushed, "REPLY_TO_CLIENT") == Some(REQUESTER_ID));
    ensure!(property(&pushed, "MSG_TYPE") == Some("reply"));
    ensure!(property(&pushed, "PUSH_REPLY_TIME").is_some(), "{pushed:?}");

    // SUCCESS, with the ids of the stored reply.
    expect_code(&answer, code::SUCCESS)?;
    ensure!(answer.ext("MSG_REGION").is_some() && answer.ext("TRACE_ON").is_some());
    ensure!(answer.ext("queueOffset") == Some("0"), "{answer:?}");
    let msg_id = answer.ext("msgId").unwrap_or_default().to_owned();

    let resp = h.call(&replier, pull(REPLY_TOPIC, 0)).await?;
    expect_code(&resp, code::SUCCESS)?;
    let replies = decode_records(resp.body.clone())?;
    ensure!(replies.len() == 1, "{replies:?}");
    let reply = &replies[0];
    ensure!(reply.body.as_ref() == b"pong");
    ensure!(reply.offset_msg_id() == msg_id, "{msg_id} vs {reply:?}");
    ensure!(property(&reply.properties, "CORRELATION_ID") == Some("corr-1"));
    ensure!(property(&reply.properties, "PUSH_REPLY_TIME").is_none());

    // The V1 form (324) reaches the requester the same way; a refusing requester makes the
    // send a SYSTEM_ERROR that says so.
    let replier_side = h.call(
        &replier,
        reply_v1("pong-2", &reply_properties("corr-2", REQUESTER_ID)),
    );
    let requester_side = async {
        let push = req.read().await?;
        ensure!(push.code == rc::PUSH_REPLY_MESSAGE_TO_CLIENT, "{push:?}");
        ensure!(push.body.as_ref() == b"pong-2");
        req.write(&RemotingCommand::response_to(
            &push,
            code::SYSTEM_ERROR,
            Some("process reply message fail".to_owned()),
        ))
        .await?;
        Ok::<_, anyhow::Error>(())
    };
    let (answer, pushed) = tokio::join!(replier_side, requester_side);
    pushed?;
    let answer = answer?;
    expect_code(&answer, code::SYSTEM_ERROR)?;
    let remark = answer.remark.clone().unwrap_or_default();
    ensure!(
        remark.contains(REQUESTER_ID) && remark.contains("process reply message fail"),
        "{remark}"
    );
    h.stop().await
}

#[actix_rt::test]
async fn a_reply_to_an_unknown_or_missing_client_is_a_system_error() -> anyhow::Result<()> {
    let h = Harness::start_with(|_| {}).await?;
    let _req = requester(&h.addr).await?;
    let replier = RemotingClient::new(ClientConfig::default());

    let resp = h
        .call(
            &replier,
            send_v2(
                rc::SEND_REPLY_MESSAGE_V2,
                REPLY_TOPIC,
                "lost",
                &reply_properties("corr-x", "10.0.0.9@nobody"),
            ),
        )
        .await?;
    expect_code(&resp, code::SYSTEM_ERROR)?;
    let remark = resp.remark.clone().unwrap_or_default();
    ensure!(
        remark.contains("10.0.0.9@nobody") && remark.contains("not found"),
        "{remark}"
    );

    let resp = h
        .call(
            &replier,
            send_v2(
                rc::SEND_REPLY_MESSAGE_V2,
                REPLY_TOPIC,
                "lost",
                &testsuite::properties(&[("MSG_TYPE", "reply")]),
            ),
        )
        .await?;
    expect_code(&resp, code::SYSTEM_ERROR)?;
    ensure!(
        resp.remark.as_deref() == Some("reply message properties[REPLY_TO_CLIENT] is null"),
        "{resp:?}"
    );
    h.stop().await
}

#[actix_rt::test]
async fn the_reply_topic_is_routable_without_auto_creation() -> anyhow::Result<()> {
    let h = Harness::start_with(|c| {
        c.cluster_name = "OtherCluster".to_owned();
        c.auto_create_topic = false;
    })
    .await?;
    let client = RemotingClient::new(ClientConfig::default());
    let resp = h
        .call(
            &client,
            request(
                rc::GET_ROUTEINFO_BY_TOPIC,
                &[("topic", "OtherCluster_REPLY_TOPIC")],
            ),
        )
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let route = TopicRouteData::decode(&resp.body)?;
    let queues: Vec<i32> = route
        .queue_datas
        .iter()
        .map(|q| q.write_queue_nums)
        .collect();
    ensure!(queues == [1], "{route:?}");
    let resp = h
        .call(
            &client,
            request(rc::GET_ROUTEINFO_BY_TOPIC, &[("topic", REPLY_TOPIC)]),
        )
        .await?;
    expect_code(&resp, code::TOPIC_NOT_EXIST)?;
    h.stop().await
}
