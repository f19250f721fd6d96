//! `skiff serve` over TCP: a node and its remoting listener started in the test (an actix
//! system, real time) and driven with hand-built RemotingCommands through the transport's
//! `RemotingClient` (and a raw socket where the client would hide what is tested).

use crate::common;

use common::{expect_code, request, Harness, CALL_TIMEOUT};
use skiff::testsuite::{self, heartbeat, RawConn};
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context};
use bytes::Bytes;
use skiff::remoting::body::{
    encode_batch, BatchEntry, ConsumeStats, ConsumerListBody, JsonBody, LockBatchResponseBody,
    MessageQueue, ResetOffsetBody, TopicRouteData,
};
use skiff::remoting::codes::{
    pull_sys_flag, request as rc, response as code, AUTO_CREATE_TOPIC_KEY,
};
use skiff::remoting::frame::RemotingCommand;
use skiff::remoting::processor;
use skiff::remoting::{ClientConfig, InboundRequest, RemotingClient, RemotingServer, ServerConfig};
use skiff::storage::message::{decode_records, StoredMessage};
use tokio::sync::mpsc;

fn client() -> RemotingClient {
    RemotingClient::new(ClientConfig::default())
}

/// A send tagged `tags`, with a unique key of topic and body.
fn send_v2(topic: &str, queue_id: i32, body: &str, tags: &str) -> RemotingCommand {
    let unique_key = format!("{topic}{body}");
    testsuite::send_v2(topic, body)
        .queue(queue_id)
        .properties(testsuite::properties(&[
            ("TAGS", tags),
            ("WAIT", "true"),
            ("UNIQ_KEY", &unique_key),
        ]))
        .build()
}

fn pull(
    group: &str,
    topic: &str,
    queue_id: u32,
    offset: u64,
    sys_flag: i32,
    suspend_ms: u64,
) -> RemotingCommand {
    testsuite::pull(group, topic, queue_id, offset)
        .sys_flag(sys_flag)
        .suspend_ms(suspend_ms)
        .build()
}

fn query_offset(
    group: &str,
    topic: &str,
    queue_id: u32,
    set_zero: Option<bool>,
) -> RemotingCommand {
    let mut cmd = request(
        rc::QUERY_CONSUMER_OFFSET,
        &[
            ("consumerGroup", group),
            ("topic", topic),
            ("queueId", &queue_id.to_string()),
        ],
    );
    if let Some(set_zero) = set_zero {
        cmd = cmd.with_ext("setZeroIfNotFound", set_zero.to_string());
    }
    cmd
}

fn update_offset(group: &str, topic: &str, queue_id: u32, offset: u64) -> RemotingCommand {
    request(
        rc::UPDATE_CONSUMER_OFFSET,
        &[
            ("consumerGroup", group),
            ("topic", topic),
            ("queueId", &queue_id.to_string()),
            ("commitOffset", &offset.to_string()),
        ],
    )
}

fn ext_i64(cmd: &RemotingCommand, key: &str) -> anyhow::Result<i64> {
    cmd.ext(key)
        .ok_or_else(|| anyhow!("response has no {key}: {cmd:?}"))?
        .parse()
        .with_context(|| format!("{key} is not a number"))
}

fn records(cmd: &RemotingCommand) -> anyhow::Result<Vec<StoredMessage>> {
    Ok(decode_records(cmd.body.clone())?)
}

async fn recv_request(rx: &mut mpsc::Receiver<InboundRequest>) -> anyhow::Result<InboundRequest> {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .context("no server request within 10 s")?
        .ok_or_else(|| anyhow!("request channel closed"))
}

#[actix_rt::test]
async fn route_answers_this_listener_in_both_json_key_forms() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();
    // No route before the first send (a route query creates nothing); the send creates Orders.
    let resp = h
        .call(
            &c,
            request(rc::GET_ROUTEINFO_BY_TOPIC, &[("topic", "Orders")]),
        )
        .await?;
    expect_code(&resp, code::TOPIC_NOT_EXIST)?;
    let resp = h.call(&c, send_v2("Orders", 0, "first", "a")).await?;
    expect_code(&resp, code::SUCCESS)?;

    let mut old = request(rc::GET_ROUTEINFO_BY_TOPIC, &[("topic", "Orders")]);
    old.version = 400;
    let resp = h.call(&c, old).await?;
    expect_code(&resp, code::SUCCESS)?;
    let text = String::from_utf8(resp.body.to_vec())?;
    ensure!(
        text.contains(&format!("{{0:\"{}\"}}", h.addr)),
        "version 400 gets unquoted broker ids: {text}"
    );
    let route = TopicRouteData::decode(&resp.body)?;
    ensure!(route.master_addr() == Some(h.addr.as_str()));
    ensure!(route.queue_datas.len() == 1 && route.queue_datas[0].write_queue_nums == 4);
    ensure!(route.queue_datas[0].perm == 6);

    for (version, accept_standard) in [(401, None), (479, None), (300, Some("true"))] {
        let mut new = request(rc::GET_ROUTEINFO_BY_TOPIC, &[("topic", "Orders")]);
        new.version = version;
        if let Some(v) = accept_standard {
            new = new.with_ext("acceptStandardJsonOnly", v);
        }
        let resp = h.call(&c, new).await?;
        expect_code(&resp, code::SUCCESS)?;
        let text = String::from_utf8(resp.body.to_vec())?;
        ensure!(
            text.contains(&format!("{{\"0\":\"{}\"}}", h.addr)),
            "version {version} gets quoted broker ids: {text}"
        );
        let parsed: serde_json::Value = serde_json::from_str(&text)?;
        ensure!(parsed["brokerDatas"][0]["brokerName"] == "skiff");
    }

    // Producers ask for the auto-create key topic; it is answered without creating it.
    let resp = h
        .call(
            &c,
            request(
                rc::GET_ROUTEINFO_BY_TOPIC,
                &[("topic", AUTO_CREATE_TOPIC_KEY)],
            ),
        )
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let route = TopicRouteData::decode(&resp.body)?;
    ensure!(route.queue_datas[0].perm == 7, "{route:?}");

    let resp = h
        .call(&c, request(rc::GET_ALL_TOPIC_LIST_FROM_NAMESERVER, &[]))
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let topics: serde_json::Value = serde_json::from_slice(&resp.body)?;
    let list = topics["topicList"]
        .as_array()
        .ok_or_else(|| anyhow!("no topicList: {topics}"))?;
    ensure!(list.iter().any(|t| t == "Orders"), "{topics}");
    ensure!(!list.iter().any(|t| t == "TBW102"), "{topics}");

    let resp = h
        .call(&c, request(rc::GET_BROKER_CLUSTER_INFO, &[]))
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let info: serde_json::Value = serde_json::from_slice(&resp.body)?;
    ensure!(
        info["brokerAddrTable"]["skiff"]["brokerAddrs"]["0"] == h.addr.as_str(),
        "{info}"
    );
    ensure!(
        info["clusterAddrTable"]["DefaultCluster"][0] == "skiff",
        "{info}"
    );

    let check = |expression_type: &str, expression: &str| {
        RemotingCommand::new_request(rc::CHECK_CLIENT_CONFIG).with_body(format!(
            r#"{{"clientId":"c","group":"g","subscriptionData":{{"topic":"Orders","subString":"{expression}","expressionType":"{expression_type}"}}}}"#
        ))
    };
    expect_code(&h.call(&c, check("TAG", "a > 1")).await?, code::SUCCESS)?;
    expect_code(&h.call(&c, check("SQL92", "a > 1")).await?, code::SUCCESS)?;
    let resp = h.call(&c, check("SQL92", "a > ")).await?;
    expect_code(&resp, code::SUBSCRIPTION_PARSE_FAILED)?;
    let remark = resp.remark.unwrap_or_default();
    ensure!(
        remark.contains("a > ") && remark.contains("column 5"),
        "remark names the expression and where it fails: {remark}"
    );
    h.stop().await
}

#[actix_rt::test]
async fn route_of_an_unknown_topic_without_auto_create_is_topic_not_exist() -> anyhow::Result<()> {
    let h = Harness::start_with(|c| c.auto_create_topic = false).await?;
    let c = client();
    for topic in ["Nope", "TBW102"] {
        let resp = h
            .call(&c, request(rc::GET_ROUTEINFO_BY_TOPIC, &[("topic", topic)]))
            .await?;
        expect_code(&resp, code::TOPIC_NOT_EXIST)?;
        let remark = resp.remark.unwrap_or_default();
        ensure!(
            remark.starts_with(&format!(
                "No topic route info in name server for the topic: {topic}"
            )),
            "{remark}"
        );
    }
    let resp = h.call(&c, send_v2("Nope", 0, "x", "a")).await?;
    expect_code(&resp, code::TOPIC_NOT_EXIST)?;
    h.stop().await
}

#[actix_rt::test]
async fn send_v1_v2_and_batch_then_pull_finds_them() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();

    let v1 = request(
        rc::SEND_MESSAGE,
        &[
            ("producerGroup", "pg"),
            ("topic", "Sends"),
            ("defaultTopic", "TBW102"),
            ("defaultTopicQueueNums", "4"),
            ("queueId", "1"),
            ("sysFlag", "0"),
            ("bornTimestamp", "1700000000000"),
            ("flag", "0"),
            ("properties", "TAGS\u{1}a\u{2}UNIQ_KEY\u{1}AABB\u{2}"),
            ("unitMode", "0"),
            ("batch", "false"),
            ("AccessKey", "ignored"),
        ],
    )
    .with_body(&b"first"[..]);
    let resp = h.call(&c, v1).await?;
    expect_code(&resp, code::SUCCESS)?;
    ensure!(ext_i64(&resp, "queueId")? == 1 && ext_i64(&resp, "queueOffset")? == 0);
    let msg_id = resp.ext("msgId").unwrap_or_default().to_owned();
    ensure!(
        msg_id.len() == 32 && msg_id.starts_with("7F000001"),
        "{msg_id}"
    );
    ensure!(resp.ext("MSG_REGION") == Some("DefaultRegion"));
    ensure!(resp.ext("TRACE_ON") == Some("true"));
    ensure!(resp.ext("transactionId") == Some("AABB"));

    let resp = h.call(&c, send_v2("Sends", 1, "second", "b")).await?;
    expect_code(&resp, code::SUCCESS)?;
    ensure!(ext_i64(&resp, "queueOffset")? == 1);

    let entries: Vec<BatchEntry> = ["b1", "b2", "b3"]
        .iter()
        .map(|b| BatchEntry {
            flag: 3,
            body: Bytes::from(b.as_bytes().to_vec()),
            properties: format!("TAGS\u{1}t\u{2}UNIQ_KEY\u{1}{b}\u{2}"),
        })
        .collect();
    let batch = request(
        rc::SEND_BATCH_MESSAGE,
        &[
            ("a", "pg"),
            ("b", "Sends"),
            ("c", AUTO_CREATE_TOPIC_KEY),
            ("d", "4"),
            ("e", "1"),
            ("f", "0"),
            ("g", "1700000000001"),
            ("h", "0"),
            ("m", "true"),
        ],
    )
    .with_body(encode_batch(&entries));
    let resp = h.call(&c, batch).await?;
    expect_code(&resp, code::SUCCESS)?;
    ensure!(ext_i64(&resp, "queueOffset")? == 2);
    let ids: Vec<&str> = resp.ext("msgId").unwrap_or_default().split(',').collect();
    ensure!(
        ids.len() == 3 && ids.iter().all(|id| id.len() == 32),
        "{ids:?}"
    );

    let resp = h
        .call(&c, pull("g", "Sends", 1, 0, pull_sys_flag::SUBSCRIPTION, 0))
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    ensure!(resp.remark.as_deref() == Some("FOUND"));
    ensure!(ext_i64(&resp, "nextBeginOffset")? == 5);
    ensure!(ext_i64(&resp, "maxOffset")? == 5 && ext_i64(&resp, "minOffset")? == 0);
    ensure!(ext_i64(&resp, "suggestWhichBrokerId")? == 0);
    let got = records(&resp)?;
    let bodies: Vec<&[u8]> = got.iter().map(|m| &m.body[..]).collect();
    ensure!(
        bodies == [&b"first"[..], b"second", b"b1", b"b2", b"b3"],
        "{bodies:?}"
    );
    ensure!(got[0].offset_msg_id() == msg_id);
    // Stamped on every stored message, as Java's broker does; a batch's messages keep their own.
    ensure!(got[0].property("CLUSTER") == Some("DefaultCluster"));
    ensure!(got[0].property("MSG_REGION") == Some("DefaultRegion"));
    ensure!(got[0].property("TRACE_ON") == Some("true"));
    ensure!(got[2].property("CLUSTER").is_none());
    ensure!(got[2].flag == 3 && got[2].property("UNIQ_KEY") == Some("b1"));
    ensure!(got[1].property("TAGS") == Some("b"));

    // A tag filter from the request: only `b` matches.
    let mut tagged = pull("g", "Sends", 1, 0, pull_sys_flag::SUBSCRIPTION, 0);
    tagged.ext_fields.insert("subscription".into(), "b".into());
    let resp = h.call(&c, tagged).await?;
    expect_code(&resp, code::SUCCESS)?;
    let got = records(&resp)?;
    ensure!(got.len() == 1 && &got[0].body[..] == b"second");
    h.stop().await
}

/// Java's broker reads a send as a batch by the header's batch flag; the request code only
/// picks the header's form. The C++ client sends batches as SEND_MESSAGE (10) with `batch: "1"`
/// (Java reads "1" as false; skiff reads it as true, as every boolean it accepts).
#[actix_rt::test]
async fn the_header_batch_flag_decides_a_batch_not_the_request_code() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();
    let entries: Vec<BatchEntry> = ["x1", "x2", "x3"]
        .iter()
        .map(|b| BatchEntry {
            flag: 0,
            body: Bytes::from(b.as_bytes().to_vec()),
            properties: format!("TAGS\u{1}t{b}\u{2}UNIQ_KEY\u{1}{b}\u{2}"),
        })
        .collect();
    let body = encode_batch(&entries);
    let v1_header = |flag: &str| {
        let fields = [
            ("producerGroup", "pg"),
            ("topic", "Flags"),
            ("defaultTopic", "TBW102"),
            ("defaultTopicQueueNums", "4"),
            ("queueId", "0"),
            ("sysFlag", "0"),
            ("bornTimestamp", "1700000000000"),
            ("flag", "0"),
            ("properties", "WAIT\u{1}true\u{2}UNIQ_KEY\u{1}WRAPPER\u{2}"),
            ("batch", flag),
        ];
        request(rc::SEND_MESSAGE, &fields).with_body(body.clone())
    };

    // The C++ client's form: code 10, `batch: "1"`: three messages, the wrapper's id echoed.
    let resp = h.call(&c, v1_header("1")).await?;
    expect_code(&resp, code::SUCCESS)?;
    ensure!(resp.ext("msgId").unwrap_or_default().split(',').count() == 3);
    ensure!(resp.ext("transactionId") == Some("WRAPPER"));
    ensure!(resp.ext("batchUniqId").is_none());

    // Code 320 without the flag is one message holding the encoded batch, as on Java's broker.
    let mut unflagged = send_v2("Flags", 0, "", "");
    unflagged.code = rc::SEND_BATCH_MESSAGE;
    unflagged.body = Bytes::from(body.clone());
    let resp = h.call(&c, unflagged).await?;
    expect_code(&resp, code::SUCCESS)?;
    ensure!(resp.ext("msgId").unwrap_or_default().split(',').count() == 1);

    let resp = h
        .call(&c, pull("g", "Flags", 0, 0, pull_sys_flag::SUBSCRIPTION, 0))
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let got = records(&resp)?;
    let bodies: Vec<&[u8]> = got.iter().map(|m| &m.body[..]).collect();
    ensure!(bodies[..3] == [&b"x1"[..], b"x2", b"x3"], "{bodies:?}");
    ensure!(got[1].property("TAGS") == Some("tx2"));
    ensure!(
        got.len() == 4 && got[3].body[..] == body[..],
        "{}",
        got.len()
    );
    h.stop().await
}

/// A pull with a SQL92 subscription (`expressionType` SQL92) is filtered on the record's
/// properties; a malformed one is SUBSCRIPTION_PARSE_FAILED (23) naming the error, and an
/// unknown expression type is refused the same way.
#[actix_rt::test]
async fn pull_with_sql92_subscription_filters_and_refuses_malformed_ones() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();
    for (body, tag) in [("one", "a"), ("two", "b"), ("three", "a")] {
        expect_code(
            &h.call(&c, send_v2("Sql", 0, body, tag)).await?,
            code::SUCCESS,
        )?;
    }
    let sql_pull = |expression_type: &str, expression: &str| {
        let mut cmd = pull("g", "Sql", 0, 0, pull_sys_flag::SUBSCRIPTION, 0);
        cmd.ext_fields
            .insert("subscription".into(), expression.into());
        cmd.ext_fields
            .insert("expressionType".into(), expression_type.into());
        cmd
    };
    let resp = h.call(&c, sql_pull("SQL92", "TAGS = 'a'")).await?;
    expect_code(&resp, code::SUCCESS)?;
    let bodies: Vec<_> = records(&resp)?.into_iter().map(|m| m.body).collect();
    ensure!(bodies == ["one", "three"], "{bodies:?}");

    let resp = h.call(&c, sql_pull("SQL92", "TAGS = 'a")).await?;
    expect_code(&resp, code::SUBSCRIPTION_PARSE_FAILED)?;
    let remark = resp.remark.unwrap_or_default();
    ensure!(
        remark.contains("TAGS = 'a") && remark.contains("not closed"),
        "{remark}"
    );

    let resp = h.call(&c, sql_pull("CLASS", "x")).await?;
    expect_code(&resp, code::SUBSCRIPTION_PARSE_FAILED)?;
    h.stop().await
}

/// The 5.x DefaultLitePullConsumer pulls with LITE_PULL_MESSAGE (361), answered as PULL_MESSAGE;
/// GET_EARLIEST_MSG_STORETIME (32) gives the first message's store time, -1 for an empty queue.
#[actix_rt::test]
async fn lite_pull_and_earliest_store_time() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();
    expect_code(
        &h.call(&c, send_v2("Lite", 0, "one", "a")).await?,
        code::SUCCESS,
    )?;
    expect_code(
        &h.call(&c, send_v2("Lite", 0, "two", "a")).await?,
        code::SUCCESS,
    )?;

    let mut lite = pull("g", "Lite", 0, 0, pull_sys_flag::SUBSCRIPTION, 0);
    lite.code = rc::LITE_PULL_MESSAGE;
    let resp = h.call(&c, lite).await?;
    expect_code(&resp, code::SUCCESS)?;
    let got = records(&resp)?;
    ensure!(
        got.len() == 2 && &got[1].body[..] == b"two",
        "{}",
        got.len()
    );

    let earliest = |queue_id: &str| {
        request(
            rc::GET_EARLIEST_MSG_STORETIME,
            &[("topic", "Lite"), ("queueId", queue_id)],
        )
    };
    let resp = h.call(&c, earliest("0")).await?;
    expect_code(&resp, code::SUCCESS)?;
    ensure!(ext_i64(&resp, "timestamp")? == got[0].store_timestamp);
    let resp = h.call(&c, earliest("3")).await?;
    expect_code(&resp, code::SUCCESS)?;
    ensure!(ext_i64(&resp, "timestamp")? == -1);
    h.stop().await
}

/// VIEW_MESSAGE_BY_ID (33): the client reads the commit-log offset out of the offset message id
/// (its last 16 hex digits) and gets the stored record back; a wrong offset is SYSTEM_ERROR.
#[actix_rt::test]
async fn view_message_by_the_offset_inside_its_message_id() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();
    expect_code(
        &h.call(&c, send_v2("View", 0, "first", "a")).await?,
        code::SUCCESS,
    )?;
    let resp = h.call(&c, send_v2("View", 0, "second", "b")).await?;
    expect_code(&resp, code::SUCCESS)?;
    let msg_id = resp.ext("msgId").unwrap_or_default().to_owned();
    let offset = i64::from_str_radix(&msg_id[msg_id.len() - 16..], 16)?;
    ensure!(offset > 0, "{msg_id}");

    let view = |offset: i64| request(rc::VIEW_MESSAGE_BY_ID, &[("offset", &offset.to_string())]);
    let resp = h.call(&c, view(offset)).await?;
    expect_code(&resp, code::SUCCESS)?;
    let got = records(&resp)?;
    ensure!(
        got.len() == 1 && &got[0].body[..] == b"second",
        "{}",
        got.len()
    );
    ensure!(got[0].offset_msg_id() == msg_id && got[0].property("TAGS") == Some("b"));

    let resp = h.call(&c, view(offset + 1)).await?;
    expect_code(&resp, code::SYSTEM_ERROR)?;
    let remark = format!("can not find message by the offset, {}", offset + 1);
    ensure!(
        resp.remark.as_deref() == Some(remark.as_str()),
        "{:?}",
        resp.remark
    );
    h.stop().await
}

/// QUERY_MESSAGE (12) as Java answers it: the records indexed under the key within the time
/// range, back to back; by unique key with `_UNIQUE_KEY_QUERY`; QUERY_NOT_FOUND otherwise.
#[actix_rt::test]
async fn query_message_by_key_and_by_unique_key() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();
    for (body, keys) in [("first", "k1 both"), ("second", "k2 both")] {
        let mut send = send_v2("Query", 0, body, "a");
        let props = format!(
            "TAGS\u{1}a\u{2}WAIT\u{1}true\u{2}KEYS\u{1}{keys}\u{2}UNIQ_KEY\u{1}U-{body}\u{2}"
        );
        send.ext_fields.insert("i".to_owned(), props);
        expect_code(&h.call(&c, send).await?, code::SUCCESS)?;
    }
    let query = |key: &str, max: &str, begin: &str, unique: bool| {
        let mut cmd = request(
            rc::QUERY_MESSAGE,
            &[
                ("topic", "Query"),
                ("key", key),
                ("maxNum", max),
                ("beginTimestamp", begin),
                ("endTimestamp", &i64::MAX.to_string()),
            ],
        );
        if unique {
            cmd.ext_fields
                .insert("_UNIQUE_KEY_QUERY".to_owned(), "true".to_owned());
        }
        cmd
    };
    let bodies = |resp: &RemotingCommand| -> anyhow::Result<Vec<String>> {
        Ok(records(resp)?
            .iter()
            .map(|m| String::from_utf8_lossy(&m.body).into_owned())
            .collect())
    };

    let resp = h.call(&c, query("both", "32", "0", false)).await?;
    expect_code(&resp, code::SUCCESS)?;
    ensure!(
        bodies(&resp)? == ["second", "first"],
        "{:?}",
        bodies(&resp)?
    );
    ensure!(ext_i64(&resp, "indexLastUpdatePhyoffset")? > 0);
    ext_i64(&resp, "indexLastUpdateTimestamp")?;

    // The newest first, and maxNum keeps the newest, as Java's index walks it.
    let resp = h.call(&c, query("both", "1", "0", false)).await?;
    ensure!(bodies(&resp)? == ["second"], "{:?}", bodies(&resp)?);

    // By unique key maxNum is the broker's 32, whatever the request says.
    let resp = h.call(&c, query("U-second", "0", "0", true)).await?;
    expect_code(&resp, code::SUCCESS)?;
    ensure!(bodies(&resp)? == ["second"], "{:?}", bodies(&resp)?);

    for resp in [
        h.call(&c, query("absent", "32", "0", false)).await?,
        h.call(&c, query("both", "32", &i64::MAX.to_string(), false))
            .await?,
    ] {
        expect_code(&resp, code::QUERY_NOT_FOUND)?;
        ensure!(
            resp.remark.as_deref() == Some("can not find message, maybe time range not correct"),
            "{:?}",
            resp.remark
        );
        ensure!(resp.body.is_empty());
    }
    h.stop().await
}

#[actix_rt::test]
async fn pull_not_found_offset_moved_and_timed_out_long_poll() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();
    expect_code(
        &h.call(&c, send_v2("Polls", 0, "one", "a")).await?,
        code::SUCCESS,
    )?;

    let resp = h
        .call(&c, pull("g", "Polls", 0, 1, pull_sys_flag::SUBSCRIPTION, 0))
        .await?;
    expect_code(&resp, code::PULL_NOT_FOUND)?;
    ensure!(resp.remark.as_deref() == Some("OFFSET_OVERFLOW_ONE"));
    ensure!(ext_i64(&resp, "nextBeginOffset")? == 1);
    ensure!(resp.body.is_empty());

    let resp = h
        .call(&c, pull("g", "Polls", 0, 7, pull_sys_flag::SUBSCRIPTION, 0))
        .await?;
    expect_code(&resp, code::PULL_OFFSET_MOVED)?;
    ensure!(resp.remark.as_deref() == Some("OFFSET_OVERFLOW_BADLY"));
    ensure!(ext_i64(&resp, "nextBeginOffset")? == 1 && ext_i64(&resp, "maxOffset")? == 1);

    let resp = h
        .call(&c, pull("g", "Polls", 3, 0, pull_sys_flag::SUBSCRIPTION, 0))
        .await?;
    expect_code(&resp, code::PULL_NOT_FOUND)?;
    ensure!(resp.remark.as_deref() == Some("NO_MESSAGE_IN_QUEUE"));

    // Held for its suspend time, then answered "no new message".
    let started = tokio::time::Instant::now();
    let resp = h
        .call(
            &c,
            pull(
                "g",
                "Polls",
                0,
                1,
                pull_sys_flag::SUBSCRIPTION | pull_sys_flag::SUSPEND,
                300,
            ),
        )
        .await?;
    expect_code(&resp, code::PULL_NOT_FOUND)?;
    ensure!(
        started.elapsed() >= Duration::from_millis(300),
        "answered before the suspend time"
    );

    // Without a subscription in the request nor a registered one: SUBSCRIPTION_NOT_EXIST.
    let resp = h.call(&c, pull("g", "Polls", 0, 0, 0, 0)).await?;
    expect_code(&resp, code::SUBSCRIPTION_NOT_EXIST)?;
    h.stop().await
}

#[actix_rt::test]
async fn long_poll_is_answered_when_a_send_wakes_it() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let puller = client();
    let sender = client();
    expect_code(
        &h.call(&sender, send_v2("Wake", 0, "one", "a")).await?,
        code::SUCCESS,
    )?;

    let addr = h.addr.clone();
    let held = tokio::spawn(async move {
        puller
            .invoke(
                &addr,
                pull(
                    "g",
                    "Wake",
                    0,
                    1,
                    pull_sys_flag::SUBSCRIPTION | pull_sys_flag::SUSPEND,
                    15_000,
                ),
                CALL_TIMEOUT,
            )
            .await
    });
    // Send only once the pull is parked, so the answer can only come from the wake-up.
    let long_poll = h.serving.node().broker().addrs().long_poll.clone();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match long_poll
                .send(skiff::actors::broker::long_poll::Observe)
                .await
            {
                Ok(snapshot) if snapshot.parked > 0 => return,
                _ => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    })
    .await
    .context("the pull was never parked")?;
    ensure!(
        !held.is_finished(),
        "a parked pull answered before any send"
    );
    let started = tokio::time::Instant::now();
    expect_code(
        &h.call(&sender, send_v2("Wake", 0, "two", "a")).await?,
        code::SUCCESS,
    )?;
    let resp = held.await??;
    ensure!(
        started.elapsed() < Duration::from_secs(5),
        "woken by the send, not by the suspend timeout"
    );
    expect_code(&resp, code::SUCCESS)?;
    let got = records(&resp)?;
    ensure!(got.len() == 1 && &got[0].body[..] == b"two" && got[0].queue_offset == 1);
    h.stop().await
}

#[actix_rt::test]
async fn consumer_offsets_query_update_and_oneway_gets_no_response() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();
    for body in ["m0", "m1", "m2"] {
        expect_code(
            &h.call(&c, send_v2("Offs", 0, body, "a")).await?,
            code::SUCCESS,
        )?;
    }

    let resp = h
        .call(&c, query_offset("og", "Offs", 0, Some(false)))
        .await?;
    expect_code(&resp, code::QUERY_NOT_FOUND)?;
    // Unset means true: a new group on a young queue starts at 0.
    let resp = h.call(&c, query_offset("og", "Offs", 0, None)).await?;
    expect_code(&resp, code::SUCCESS)?;
    ensure!(ext_i64(&resp, "offset")? == 0);
    let resp = h.call(&c, query_offset("og", "Offs", 1, None)).await?;
    expect_code(&resp, code::QUERY_NOT_FOUND)?;

    let resp = h.call(&c, update_offset("og", "Offs", 0, 2)).await?;
    expect_code(&resp, code::SUCCESS)?;
    let resp = h
        .call(&c, query_offset("og", "Offs", 0, Some(false)))
        .await?;
    ensure!(ext_i64(&resp, "offset")? == 2);

    let resp = h.call(&c, update_offset("og", "NoSuchTopic", 0, 2)).await?;
    expect_code(&resp, code::TOPIC_NOT_EXIST)?;

    let resp = h
        .call(
            &c,
            request(rc::GET_MAX_OFFSET, &[("topic", "Offs"), ("queueId", "0")]),
        )
        .await?;
    ensure!(ext_i64(&resp, "offset")? == 3);
    let resp = h
        .call(
            &c,
            request(rc::GET_MIN_OFFSET, &[("topic", "Offs"), ("queueId", "0")]),
        )
        .await?;
    ensure!(ext_i64(&resp, "offset")? == 0);
    let search = |ts: &str| {
        request(
            rc::SEARCH_OFFSET_BY_TIMESTAMP,
            &[("topic", "Offs"), ("queueId", "0"), ("timestamp", ts)],
        )
    };
    let resp = h.call(&c, search("0")).await?;
    expect_code(&resp, code::SUCCESS)?;
    ensure!(ext_i64(&resp, "offset")? == 0);
    let resp = h.call(&c, search("9999999999999")).await?;
    ensure!(ext_i64(&resp, "offset")? == 3);

    // A oneway update is applied and answered with nothing.
    let mut raw = RawConn::connect(&h.addr).await?;
    let mut oneway = update_offset("og", "Offs", 0, 3).oneway();
    oneway.opaque = 900_001;
    raw.write(&oneway).await?;
    let mut seen = Vec::new();
    let mut applied = false;
    for attempt in 0..200 {
        let mut q = query_offset("og", "Offs", 0, Some(false));
        q.opaque = 900_100 + attempt;
        raw.write(&q).await?;
        let resp = raw.read().await?;
        seen.push(resp.opaque);
        ensure!(resp.opaque == q.opaque, "unexpected frame {resp:?}");
        if ext_i64(&resp, "offset")? == 3 {
            applied = true;
            break;
        }
    }
    ensure!(applied, "the oneway update was not applied");
    ensure!(!seen.contains(&900_001));
    h.stop().await
}

const HEARTBEAT_C1: &str = r#"{"clientID":"10.0.0.1@c1","producerDataSet":[{"groupName":"pg"}],"consumerDataSet":[{"groupName":"hg","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{"classFilterMode":false,"topic":"HT","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"TAG"}],"unitMode":false}],"heartbeatFingerprint":0,"withoutSub":false}"#;
/// rocketmq-client-cpp style: enums as ordinals, subVersion as a string, no expressionType.
const HEARTBEAT_C2: &str = r#"{"clientID":"10.0.0.2@c2","consumerDataSet":[{"groupName":"hg","consumeType":1,"messageModel":1,"consumeFromWhere":0,"subscriptionDataSet":[{"topic":"HT","subString":"*","subVersion":"2"}],"unitMode":"0"}]}"#;

#[actix_rt::test]
async fn heartbeats_notify_members_and_a_closed_connection_releases_its_consumers(
) -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c1 = client();
    let mut rx1 = c1.request_channel(16);
    let c2 = client();
    let _rx2 = c2.request_channel(16);

    let resp = h.call(&c1, heartbeat(HEARTBEAT_C1)).await?;
    expect_code(&resp, code::SUCCESS)?;
    ensure!(resp.ext("IS_SUPPORT_HEART_BEAT_V2") == Some("true"));
    ensure!(resp.ext("IS_SUB_CHANGE") == Some("true"));
    // Its own join is announced first, before the heartbeat response.
    let joined = rx1
        .try_recv()
        .context("code 40 precedes the heartbeat response")?;
    ensure!(joined.request.code == rc::NOTIFY_CONSUMER_IDS_CHANGED && joined.request.is_oneway());
    ensure!(joined.request.ext("consumerGroup") == Some("hg"));

    expect_code(&h.call(&c2, heartbeat(HEARTBEAT_C2)).await?, code::SUCCESS)?;
    let notified = recv_request(&mut rx1).await?;
    ensure!(notified.request.code == rc::NOTIFY_CONSUMER_IDS_CHANGED);
    ensure!(notified.request.ext("consumerGroup") == Some("hg"));

    let list = |group: &str| request(rc::GET_CONSUMER_LIST_BY_GROUP, &[("consumerGroup", group)]);
    let resp = h.call(&c1, list("hg")).await?;
    expect_code(&resp, code::SUCCESS)?;
    let ids = ConsumerListBody::decode(&resp.body)?.consumer_id_list;
    ensure!(ids == ["10.0.0.1@c1", "10.0.0.2@c2"], "{ids:?}");

    // The group's subscription is registered: a pull without one in the request works.
    expect_code(
        &h.call(&c1, send_v2("HT", 0, "x", "a")).await?,
        code::SUCCESS,
    )?;
    let resp = h.call(&c1, pull("hg", "HT", 0, 0, 0, 0)).await?;
    expect_code(&resp, code::SUCCESS)?;

    // A killed consumer: its connection closes, it leaves at once and the others are told.
    c2.shutdown();
    let notified = recv_request(&mut rx1).await?;
    ensure!(notified.request.code == rc::NOTIFY_CONSUMER_IDS_CHANGED);
    let resp = h.call(&c1, list("hg")).await?;
    let ids = ConsumerListBody::decode(&resp.body)?.consumer_id_list;
    ensure!(ids == ["10.0.0.1@c1"], "{ids:?}");

    let resp = h
        .call(
            &c1,
            request(
                rc::UNREGISTER_CLIENT,
                &[("clientID", "10.0.0.1@c1"), ("consumerGroup", "hg")],
            ),
        )
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let resp = h.call(&c1, list("hg")).await?;
    expect_code(&resp, code::SYSTEM_ERROR)?;
    ensure!(resp.remark.as_deref() == Some("no consumer for this group, hg"));
    h.stop().await
}

#[actix_rt::test]
async fn send_back_moves_the_message_to_the_retry_topic() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();
    expect_code(
        &h.call(&c, send_v2("Back", 0, "failing", "a")).await?,
        code::SUCCESS,
    )?;
    let resp = h
        .call(&c, pull("bg", "Back", 0, 0, pull_sys_flag::SUBSCRIPTION, 0))
        .await?;
    let original = records(&resp)?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("nothing pulled"))?;

    let back = request(
        rc::CONSUMER_SEND_MSG_BACK,
        &[
            ("offset", &original.physical_offset.to_string()),
            ("group", "bg"),
            ("delayLevel", "1"),
            ("originMsgId", &original.offset_msg_id()),
            ("originTopic", "Back"),
            ("maxReconsumeTimes", "16"),
        ],
    );
    expect_code(&h.call(&c, back).await?, code::SUCCESS)?;

    // Delay level 1 (1 s), then it lands in %RETRY%bg and wakes this long poll.
    let resp = h
        .call(
            &c,
            pull(
                "bg",
                "%RETRY%bg",
                0,
                0,
                pull_sys_flag::SUBSCRIPTION | pull_sys_flag::SUSPEND,
                15_000,
            ),
        )
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let retried = records(&resp)?;
    ensure!(retried.len() == 1, "{retried:?}");
    ensure!(retried[0].topic == "%RETRY%bg" && &retried[0].body[..] == b"failing");
    ensure!(retried[0].reconsume_times == 1);
    ensure!(retried[0].property("RETRY_TOPIC") == Some("Back"));

    // A client's fallback send to the retry topic, past its own reconsume limit (header `l`):
    // dead-lettered.
    let mut fallback = send_v2("%RETRY%bg", 0, "again", "a");
    fallback.ext_fields.insert("j".into(), "3".into());
    fallback.ext_fields.insert("l".into(), "3".into());
    expect_code(&h.call(&c, fallback).await?, code::SUCCESS)?;
    let resp = h
        .call(
            &c,
            request(
                rc::GET_MAX_OFFSET,
                &[("topic", "%DLQ%bg"), ("queueId", "0")],
            ),
        )
        .await?;
    ensure!(ext_i64(&resp, "offset")? == 1, "dead-lettered: {resp:?}");

    let missing = request(
        rc::CONSUMER_SEND_MSG_BACK,
        &[("offset", "99999999"), ("group", "bg"), ("delayLevel", "0")],
    );
    let resp = h.call(&c, missing).await?;
    expect_code(&resp, code::SYSTEM_ERROR)?;
    ensure!(resp.remark.as_deref() == Some("look message by offset failed, 99999999"));
    h.stop().await
}

fn lock_body(code_: i32, client_id: &str, queues: &[i32]) -> RemotingCommand {
    let mqs: Vec<String> = queues
        .iter()
        .map(|q| format!(r#"{{"topic":"LT","brokerName":"skiff","queueId":{q}}}"#))
        .collect();
    RemotingCommand::new_request(code_).with_body(format!(
        r#"{{"consumerGroup":"lg","clientId":"{client_id}","onlyThisBroker":false,"mqSet":[{}]}}"#,
        mqs.join(",")
    ))
}

fn locked(resp: &RemotingCommand) -> anyhow::Result<Vec<i32>> {
    expect_code(resp, code::SUCCESS)?;
    let mut ids: Vec<i32> = LockBatchResponseBody::decode(&resp.body)?
        .lock_ok_mq_set
        .into_iter()
        .map(|mq: MessageQueue| mq.queue_id)
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

#[actix_rt::test]
async fn lock_and_unlock_batch() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();
    let resp = h
        .call(&c, lock_body(rc::LOCK_BATCH_MQ, "c1", &[0, 1]))
        .await?;
    ensure!(locked(&resp)? == [0, 1]);
    let resp = h
        .call(&c, lock_body(rc::LOCK_BATCH_MQ, "c2", &[0, 1, 2]))
        .await?;
    ensure!(locked(&resp)? == [2]);
    let resp = h
        .call(&c, lock_body(rc::UNLOCK_BATCH_MQ, "c1", &[0]))
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let resp = h
        .call(&c, lock_body(rc::LOCK_BATCH_MQ, "c2", &[0, 1]))
        .await?;
    ensure!(locked(&resp)? == [0]);
    h.stop().await
}

#[actix_rt::test]
async fn unknown_codes_and_bad_input_are_answered_while_other_connections_keep_working(
) -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let bad = client();
    let good = client();

    let resp = h.call(&bad, request(9999, &[])).await?;
    expect_code(&resp, code::REQUEST_CODE_NOT_SUPPORTED)?;
    ensure!(resp.remark.as_deref() == Some(" request type 9999 not supported"));

    let mut no_group = pull("g", "T", 0, 0, pull_sys_flag::SUBSCRIPTION, 0);
    no_group.ext_fields.remove("consumerGroup");
    let resp = h.call(&bad, no_group).await?;
    expect_code(&resp, code::SYSTEM_ERROR)?;
    ensure!(resp.remark.as_deref() == Some("the custom field <consumerGroup> is null"));

    let mut no_queue = update_offset("g", "T", 0, 1);
    no_queue.ext_fields.remove("queueId");
    let resp = h.call(&bad, no_queue).await?;
    expect_code(&resp, code::INVALID_PARAMETER)?;
    ensure!(resp.remark.as_deref() == Some("QueueId is null, topic is T"));

    let mut not_a_number = send_v2("T", 0, "x", "a");
    not_a_number.ext_fields.insert("e".into(), "zero".into());
    let resp = h.call(&bad, not_a_number).await?;
    expect_code(&resp, code::SYSTEM_ERROR)?;
    ensure!(
        resp.remark.as_deref().is_some_and(|r| r.contains("<e>")),
        "{:?}",
        resp.remark
    );

    let resp = h.call(&bad, heartbeat("{not json")).await?;
    expect_code(&resp, code::SYSTEM_ERROR)?;

    let mut broken_batch = send_v2("T", 0, "", "a");
    broken_batch.code = rc::SEND_BATCH_MESSAGE;
    broken_batch.ext_fields.insert("m".into(), "true".into());
    broken_batch.body = Bytes::from_static(&[0, 0, 0, 40, 1, 2]);
    let resp = h.call(&bad, broken_batch).await?;
    expect_code(&resp, code::MESSAGE_ILLEGAL)?;

    let mut long_props = send_v2("T", 0, "x", "a");
    long_props
        .ext_fields
        .insert("i".into(), "K\u{1}".to_owned() + &"v".repeat(40_000));
    let resp = h.call(&bad, long_props).await?;
    expect_code(&resp, code::MESSAGE_ILLEGAL)?;

    let resp = h.call(&bad, send_v2("bad topic!", 0, "x", "a")).await?;
    expect_code(&resp, code::SYSTEM_ERROR)?;

    let resp = h
        .call(
            &bad,
            request(
                rc::QUERY_CONSUMER_OFFSET,
                &[("consumerGroup", "g"), ("topic", "T"), ("queueId", "-1")],
            ),
        )
        .await?;
    expect_code(&resp, code::SYSTEM_ERROR)?;

    // The misbehaving connection and the other one both still work.
    let resp = h
        .call(
            &good,
            request(
                rc::GET_ROUTEINFO_BY_TOPIC,
                &[("topic", AUTO_CREATE_TOPIC_KEY)],
            ),
        )
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let resp = h
        .call(
            &bad,
            request(
                rc::GET_ROUTEINFO_BY_TOPIC,
                &[("topic", AUTO_CREATE_TOPIC_KEY)],
            ),
        )
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    h.stop().await
}

#[actix_rt::test]
async fn consume_stats_and_reset_offset() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();
    let before = skiff_now_ms();
    for body in ["r0", "r1", "r2"] {
        expect_code(
            &h.call(&c, send_v2("Reset", 0, body, "a")).await?,
            code::SUCCESS,
        )?;
    }
    expect_code(
        &h.call(&c, update_offset("rg", "Reset", 0, 2)).await?,
        code::SUCCESS,
    )?;
    // Pulled but not committed: the last message is in flight.
    let resp = h
        .call(
            &c,
            pull("rg", "Reset", 0, 2, pull_sys_flag::SUBSCRIPTION, 0),
        )
        .await?;
    expect_code(&resp, code::SUCCESS)?;

    let stats_req = request(
        rc::GET_CONSUME_STATS,
        &[("consumerGroup", "rg"), ("topic", "Reset")],
    );
    let resp = h.call(&c, stats_req).await?;
    expect_code(&resp, code::SUCCESS)?;
    let text = String::from_utf8(resp.body.to_vec())?;
    ensure!(
        text.contains(r#"{"brokerName":"skiff","queueId":0,"topic":"Reset"}:{"#),
        "offsetTable keyed by MessageQueue JSON: {text}"
    );
    let stats = ConsumeStats::decode(&resp.body)?;
    ensure!(stats.offset_table.len() == 4, "{stats:?}");
    let q0 = MessageQueue {
        topic: "Reset".into(),
        broker_name: "skiff".into(),
        queue_id: 0,
    };
    let w = stats
        .offset_table
        .get(&q0)
        .ok_or_else(|| anyhow!("no queue 0: {stats:?}"))?;
    ensure!(
        w.broker_offset == 3 && w.consumer_offset == 2 && w.pull_offset == 3,
        "{w:?}"
    );
    ensure!(w.last_timestamp >= before, "{w:?}");
    let resp = h
        .call(
            &c,
            request(rc::GET_CONSUME_STATS, &[("consumerGroup", "nobody")]),
        )
        .await?;
    ensure!(ConsumeStats::decode(&resp.body)?.offset_table.is_empty());

    // Back to the start of every queue.
    let reset = request(
        rc::INVOKE_BROKER_TO_RESET_OFFSET,
        &[
            ("topic", "Reset"),
            ("group", "rg"),
            ("timestamp", "0"),
            ("isForce", "true"),
        ],
    );
    let resp = h.call(&c, reset).await?;
    expect_code(&resp, code::SUCCESS)?;
    let body = ResetOffsetBody::decode(&resp.body)?;
    ensure!(
        body.offset_table.len() == 4 && body.offset_table.get(&q0) == Some(&0),
        "{body:?}"
    );

    // The group's next pull of the queue is told to move there.
    let resp = h
        .call(
            &c,
            pull("rg", "Reset", 0, 2, pull_sys_flag::SUBSCRIPTION, 0),
        )
        .await?;
    expect_code(&resp, code::PULL_OFFSET_MOVED)?;
    ensure!(resp.remark.as_deref() == Some("OFFSET_RESET"), "{resp:?}");
    ensure!(ext_i64(&resp, "nextBeginOffset")? == 0, "{resp:?}");

    // One queue, to an explicit offset; out of range is refused.
    let one = |offset: &str| {
        request(
            rc::INVOKE_BROKER_TO_RESET_OFFSET,
            &[
                ("topic", "Reset"),
                ("group", "rg"),
                ("queueId", "0"),
                ("offset", offset),
                ("timestamp", "0"),
                ("isForce", "false"),
            ],
        )
    };
    let resp = h.call(&c, one("1")).await?;
    expect_code(&resp, code::SUCCESS)?;
    ensure!(ResetOffsetBody::decode(&resp.body)?.offset_table.get(&q0) == Some(&1));
    let resp = h
        .call(&c, query_offset("rg", "Reset", 0, Some(false)))
        .await?;
    ensure!(ext_i64(&resp, "offset")? == 1);
    let resp = h.call(&c, one("50")).await?;
    expect_code(&resp, code::SYSTEM_ERROR)?;

    let resp = h
        .call(
            &c,
            request(
                rc::INVOKE_BROKER_TO_RESET_OFFSET,
                &[
                    ("topic", "Missing"),
                    ("group", "rg"),
                    ("timestamp", "0"),
                    ("isForce", "true"),
                ],
            ),
        )
        .await?;
    expect_code(&resp, code::TOPIC_NOT_EXIST)?;
    h.stop().await
}

fn skiff_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
        - 1000
}

#[actix_rt::test]
async fn a_full_request_queue_is_answered_system_busy() -> anyhow::Result<()> {
    // Nothing drains this bridge: the first request fills its queue of one and waits.
    let (bridge, _inbox) = processor::channel(1);
    let server = RemotingServer::bind("127.0.0.1:0", ServerConfig::default(), bridge).await?;
    let mut raw = RawConn::connect(&server.local_addr().to_string()).await?;
    let mut first = request(rc::GET_MAX_OFFSET, &[("topic", "T"), ("queueId", "0")]);
    first.opaque = 7001;
    let mut second = first.clone();
    second.opaque = 7002;
    raw.write(&first).await?;
    raw.write(&second).await?;
    let resp = raw.read().await?;
    ensure!(resp.opaque == 7002 && resp.is_response(), "{resp:?}");
    expect_code(&resp, code::SYSTEM_BUSY)?;
    ensure!(resp
        .remark
        .as_deref()
        .is_some_and(|r| r.contains("system busy")));
    server.shutdown().await;
    Ok(())
}

/// The admin codes as `mqadmin` sends them: topic and group configs, topic stats, who consumes
/// a topic, producer connections, and the name-server leftovers (KV config, system topics).
#[actix_rt::test]
async fn admin_topic_group_and_connection_codes() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();

    // GET_TOPIC_CONFIG of an unknown topic: TOPIC_NOT_EXIST, which 5.x tools read as absent.
    let resp = h
        .call(&c, request(rc::GET_TOPIC_CONFIG, &[("topic", "Made")]))
        .await?;
    expect_code(&resp, code::TOPIC_NOT_EXIST)?;
    let create = |topic: &str| {
        request(
            rc::UPDATE_AND_CREATE_TOPIC,
            &[
                ("topic", topic),
                ("defaultTopic", "TBW102"),
                ("readQueueNums", "3"),
                ("writeQueueNums", "3"),
                ("perm", "6"),
                ("topicFilterType", "SINGLE_TAG"),
            ],
        )
    };
    expect_code(&h.call(&c, create("Made")).await?, code::SUCCESS)?;
    for refused in ["bad topic", "TBW102", "rmq_sys_wheel_timer"] {
        expect_code(&h.call(&c, create(refused)).await?, code::INVALID_PARAMETER)?;
    }
    let resp = h
        .call(&c, request(rc::GET_TOPIC_CONFIG, &[("topic", "Made")]))
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let config: serde_json::Value = serde_json::from_slice(&resp.body)?;
    ensure!(
        config["topicName"] == "Made" && config["readQueueNums"] == 3 && config["perm"] == 6,
        "topic config {config}"
    );
    let resp = h.call(&c, request(rc::GET_ALL_TOPIC_CONFIG, &[])).await?;
    let all: serde_json::Value = serde_json::from_slice(&resp.body)?;
    ensure!(
        all["topicConfigTable"]["Made"]["writeQueueNums"] == 3,
        "all topics {all}"
    );

    // Topic stats after two sends to queue 1.
    for body in ["a", "b"] {
        expect_code(
            &h.call(&c, send_v2("Made", 1, body, "t")).await?,
            code::SUCCESS,
        )?;
    }
    let resp = h
        .call(&c, request(rc::GET_TOPIC_STATS_INFO, &[("topic", "Made")]))
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let stats = skiff::remoting::body::TopicStatsTable::decode(&resp.body)?;
    let maxes: Vec<(i32, i64)> = stats
        .offset_table
        .iter()
        .map(|(mq, o)| (mq.queue_id, o.max_offset))
        .collect();
    ensure!(maxes == [(0, 0), (1, 2), (2, 0)], "max offsets {maxes:?}");
    ensure!(
        stats
            .offset_table
            .values()
            .filter(|o| o.last_update_timestamp > 0)
            .count()
            == 1,
        "last update times {stats:?}"
    );
    let resp = h
        .call(&c, request(rc::GET_TOPIC_STATS_INFO, &[("topic", "Nope")]))
        .await?;
    expect_code(&resp, code::TOPIC_NOT_EXIST)?;

    // A producer and a consumer heartbeat: connections by group, and who consumes the topic.
    let resp = h
        .call(
            &c,
            heartbeat(
                r#"{"clientID":"10.0.0.1@1","producerDataSet":[{"groupName":"PG"}],
                "consumerDataSet":[{"groupName":"CG","consumeType":"CONSUME_PASSIVELY",
                "messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET",
                "subscriptionDataSet":[{"topic":"Made","subString":"*","subVersion":1}]}]}"#,
            ),
        )
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let resp = h
        .call(
            &c,
            request(rc::GET_PRODUCER_CONNECTION_LIST, &[("producerGroup", "PG")]),
        )
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let producers: serde_json::Value = serde_json::from_slice(&resp.body)?;
    ensure!(
        producers["connectionSet"][0]["clientId"] == "10.0.0.1@1"
            && producers["connectionSet"][0]["clientAddr"]
                .as_str()
                .is_some_and(|a| a.starts_with("127.0.0.1:")),
        "producer connections {producers}"
    );
    let resp = h
        .call(
            &c,
            request(
                rc::GET_PRODUCER_CONNECTION_LIST,
                &[("producerGroup", "Other")],
            ),
        )
        .await?;
    expect_code(&resp, code::SYSTEM_ERROR)?;
    let resp = h
        .call(
            &c,
            request(rc::GET_CONSUMER_CONNECTION_LIST, &[("consumerGroup", "CG")]),
        )
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let consumers: serde_json::Value = serde_json::from_slice(&resp.body)?;
    ensure!(
        consumers["subscriptionTable"]["Made"]["subString"] == "*"
            && consumers["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET",
        "consumer connections {consumers}"
    );
    let resp = h
        .call(
            &c,
            request(
                rc::GET_CONSUMER_CONNECTION_LIST,
                &[("consumerGroup", "Gone")],
            ),
        )
        .await?;
    expect_code(&resp, code::CONSUMER_NOT_ONLINE)?;
    expect_code(
        &h.call(&c, update_offset("Offsets", "Made", 1, 2)).await?,
        code::SUCCESS,
    )?;
    let resp = h
        .call(
            &c,
            request(rc::QUERY_TOPIC_CONSUME_BY_WHO, &[("topic", "Made")]),
        )
        .await?;
    let by_who: serde_json::Value = serde_json::from_slice(&resp.body)?;
    ensure!(
        by_who["groupList"] == serde_json::json!(["CG", "Offsets"]),
        "consumed by {by_who}"
    );
    // Leaving the groups takes the client out of both listings.
    let resp = h
        .call(
            &c,
            request(
                rc::UNREGISTER_CLIENT,
                &[
                    ("clientID", "10.0.0.1@1"),
                    ("producerGroup", "PG"),
                    ("consumerGroup", "CG"),
                ],
            ),
        )
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let resp = h
        .call(
            &c,
            request(rc::GET_CONSUMER_CONNECTION_LIST, &[("consumerGroup", "CG")]),
        )
        .await?;
    expect_code(&resp, code::CONSUMER_NOT_ONLINE)?;
    let resp = h
        .call(
            &c,
            request(rc::GET_PRODUCER_CONNECTION_LIST, &[("producerGroup", "PG")]),
        )
        .await?;
    expect_code(&resp, code::SYSTEM_ERROR)?;

    // Subscription groups: create, list, delete with its offsets.
    let group = request(rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, &[])
        .with_body(br#"{"groupName":"Made","retryMaxTimes":3,"retryQueueNums":1}"#.to_vec());
    expect_code(&h.call(&c, group).await?, code::SUCCESS)?;
    let resp = h
        .call(&c, request(rc::GET_ALL_SUBSCRIPTIONGROUP_CONFIG, &[]))
        .await?;
    let groups: serde_json::Value = serde_json::from_slice(&resp.body)?;
    ensure!(
        groups["subscriptionGroupTable"]["Made"]["retryMaxTimes"] == 3,
        "groups {groups}"
    );
    let delete = request(
        rc::DELETE_SUBSCRIPTIONGROUP,
        &[("groupName", "Offsets"), ("cleanOffset", "true")],
    );
    expect_code(&h.call(&c, delete).await?, code::SUCCESS)?;
    let resp = h
        .call(&c, query_offset("Offsets", "Made", 1, Some(false)))
        .await?;
    expect_code(&resp, code::QUERY_NOT_FOUND)?;

    // Name-server leftovers.
    let resp = h
        .call(
            &c,
            request(
                rc::GET_KV_CONFIG,
                &[("namespace", "ORDER_TOPIC_CONFIG"), ("key", "Made")],
            ),
        )
        .await?;
    expect_code(&resp, code::QUERY_NOT_FOUND)?;
    let resp = h
        .call(&c, request(rc::GET_SYSTEM_TOPIC_LIST_FROM_NS, &[]))
        .await?;
    let system: serde_json::Value = serde_json::from_slice(&resp.body)?;
    ensure!(
        system["topicList"].as_array().map_or(0, Vec::len) == 2,
        "system topics {system}"
    );

    // Delete the topic: gone from routes and configs.
    let resp = h
        .call(
            &c,
            request(rc::DELETE_TOPIC_IN_BROKER, &[("topic", "Made")]),
        )
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let resp = h
        .call(
            &c,
            request(rc::DELETE_TOPIC_IN_NAMESRV, &[("topic", "Made")]),
        )
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let resp = h
        .call(&c, request(rc::GET_TOPIC_CONFIG, &[("topic", "Made")]))
        .await?;
    expect_code(&resp, code::TOPIC_NOT_EXIST)?;
    h.stop().await
}

/// UPDATE_AND_CREATE_TOPIC (17) as `mqadmin updateTopic -a` sends it: `topic` plus the
/// `attributes` header, the rest as `mqadmin` fills them in.
fn update_topic(topic: &str, write_queue_nums: &str, attributes: &str) -> RemotingCommand {
    request(
        rc::UPDATE_AND_CREATE_TOPIC,
        &[
            ("topic", topic),
            ("defaultTopic", "TBW102"),
            ("readQueueNums", "8"),
            ("writeQueueNums", write_queue_nums),
            ("perm", "6"),
            ("topicFilterType", "SINGLE_TAG"),
            ("topicSysFlag", "0"),
            ("order", "false"),
            ("attributes", attributes),
        ],
    )
}

/// GET_TOPIC_CONFIG (351) and GET_ALL_TOPIC_CONFIG (21)'s entry for `topic`, which must agree.
async fn topic_config_bodies(
    h: &Harness,
    c: &RemotingClient,
    topic: &str,
) -> anyhow::Result<serde_json::Value> {
    let resp = h
        .call(c, request(rc::GET_TOPIC_CONFIG, &[("topic", topic)]))
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let one: serde_json::Value = serde_json::from_slice(&resp.body)?;
    let resp = h.call(c, request(rc::GET_ALL_TOPIC_CONFIG, &[])).await?;
    expect_code(&resp, code::SUCCESS)?;
    let all: serde_json::Value = serde_json::from_slice(&resp.body)?;
    ensure!(
        all["topicConfigTable"][topic] == one,
        "GET_TOPIC_CONFIG {one} and GET_ALL_TOPIC_CONFIG {all} disagree"
    );
    Ok(one)
}

/// `mqadmin updateTopic -a +message.type=FIFO` stores the type, both topic config answers carry
/// it as Java's `attributes`, an update without `-a` keeps it, it survives a restart, and
/// `-a -message.type` removes it.
#[actix_rt::test]
async fn mqadmin_update_topic_sets_keeps_and_removes_the_message_type() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();
    expect_code(
        &h.call(&c, update_topic("Orders", "8", "+message.type=FIFO"))
            .await?,
        code::SUCCESS,
    )?;
    let config = topic_config_bodies(&h, &c, "Orders").await?;
    ensure!(
        config["attributes"] == serde_json::json!({"message.type": "FIFO"}),
        "topic config {config}"
    );
    // Changing the queues without `-a` (mqadmin sends an empty `attributes`) keeps the type.
    expect_code(
        &h.call(&c, update_topic("Orders", "4", "")).await?,
        code::SUCCESS,
    )?;
    let h = h.restart().await?;
    let config = topic_config_bodies(&h, &c, "Orders").await?;
    ensure!(
        config["writeQueueNums"] == 4
            && config["attributes"] == serde_json::json!({"message.type": "FIFO"}),
        "topic config after the update and a restart {config}"
    );
    expect_code(
        &h.call(&c, update_topic("Orders", "4", "+message.type=TRANSACTION"))
            .await?,
        code::SUCCESS,
    )?;
    let config = topic_config_bodies(&h, &c, "Orders").await?;
    ensure!(
        config["attributes"] == serde_json::json!({"message.type": "TRANSACTION"}),
        "topic config {config}"
    );
    expect_code(
        &h.call(&c, update_topic("Orders", "4", "-message.type"))
            .await?,
        code::SUCCESS,
    )?;
    let config = topic_config_bodies(&h, &c, "Orders").await?;
    ensure!(
        config["attributes"] == serde_json::json!({}),
        "topic config after the removal {config}"
    );
    // Removing it again: Java's refusal of a key that is not set.
    let resp = h
        .call(&c, update_topic("Orders", "4", "-message.type"))
        .await?;
    expect_code(&resp, code::SYSTEM_ERROR)?;
    ensure!(
        resp.remark.as_deref() == Some("attempt to delete a nonexistent key: message.type"),
        "remark {:?}",
        resp.remark
    );
    h.stop().await
}

/// A message type Java refuses is refused with Java's code and remark, and the topic (or its
/// absence) stays as it was.
#[actix_rt::test]
async fn an_invalid_message_type_is_refused_and_changes_nothing() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();
    expect_code(
        &h.call(&c, update_topic("Orders", "8", "+message.type=DELAY"))
            .await?,
        code::SUCCESS,
    )?;
    let before = topic_config_bodies(&h, &c, "Orders").await?;
    let not_in_set = "value is not in set: [UNSPECIFIED, MIXED, TRANSACTION, PRIORITY, FIFO, DELAY, LITE, NORMAL]";
    let refusals = [
        ("+message.type=ORDER", code::SYSTEM_ERROR, not_in_set),
        ("+message.type=fifo", code::SYSTEM_ERROR, not_in_set),
        (
            "+message.type=MIXED",
            code::INVALID_PARAMETER,
            "MIXED message type is not supported.",
        ),
        (
            "+queue.type=BatchCQ",
            code::SYSTEM_ERROR,
            "unsupported key: queue.type",
        ),
        (
            "message.type=FIFO",
            code::SYSTEM_ERROR,
            "add/alter attribute format is wrong: message.type",
        ),
    ];
    for (attributes, expected, remark) in refusals {
        // The queue count changes too, and must not be stored either.
        let resp = h.call(&c, update_topic("Orders", "2", attributes)).await?;
        expect_code(&resp, expected).context(attributes)?;
        ensure!(
            resp.remark.as_deref() == Some(remark),
            "{attributes}: remark {:?}",
            resp.remark
        );
        let after = topic_config_bodies(&h, &c, "Orders").await?;
        ensure!(after == before, "{attributes}: {before} became {after}");
    }
    // A topic that does not exist yet takes only additions, and is not created when refused.
    for (attributes, remark) in [
        (
            "-message.type",
            "only add attribute is supported while creating topic. key: message.type",
        ),
        ("+message.type=ORDER", not_in_set),
    ] {
        let resp = h.call(&c, update_topic("Fresh", "8", attributes)).await?;
        expect_code(&resp, code::SYSTEM_ERROR)?;
        ensure!(resp.remark.as_deref() == Some(remark), "{:?}", resp.remark);
        let resp = h
            .call(&c, request(rc::GET_TOPIC_CONFIG, &[("topic", "Fresh")]))
            .await?;
        expect_code(&resp, code::TOPIC_NOT_EXIST)?;
    }
    h.stop().await
}

/// `consumeMessageOrderly` in an UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) body is stored and
/// answered in GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), across a restart; absent, it is false.
#[actix_rt::test]
async fn group_orderly_flag_round_trips_through_update_and_the_group_config_answer(
) -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();
    for body in [
        &br#"{"groupName":"Ordered","consumeMessageOrderly":true,"retryMaxTimes":5}"#[..],
        &br#"{"groupName":"Plain"}"#[..],
    ] {
        let group = request(rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, &[]).with_body(body.to_vec());
        expect_code(&h.call(&c, group).await?, code::SUCCESS)?;
    }
    let h = h.restart().await?;
    let resp = h
        .call(&c, request(rc::GET_ALL_SUBSCRIPTIONGROUP_CONFIG, &[]))
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let groups: serde_json::Value = serde_json::from_slice(&resp.body)?;
    let table = &groups["subscriptionGroupTable"];
    ensure!(
        table["Ordered"]["consumeMessageOrderly"] == true
            && table["Ordered"]["retryMaxTimes"] == 5
            && table["Plain"]["consumeMessageOrderly"] == false,
        "groups {groups}"
    );
    // Updating the group without the flag turns it off, as Java replaces the whole config.
    let group = request(rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, &[])
        .with_body(br#"{"groupName":"Ordered"}"#.to_vec());
    expect_code(&h.call(&c, group).await?, code::SUCCESS)?;
    let resp = h
        .call(&c, request(rc::GET_ALL_SUBSCRIPTIONGROUP_CONFIG, &[]))
        .await?;
    let groups: serde_json::Value = serde_json::from_slice(&resp.body)?;
    ensure!(
        groups["subscriptionGroupTable"]["Ordered"]["consumeMessageOrderly"] == false,
        "groups {groups}"
    );
    h.stop().await
}

/// A group's attributes (`mqadmin updateSubGroup --attributes`): signed entries in the body's
/// `attributes` are applied to the group's current ones and answered unsigned, across a
/// restart; a refused change answers SYSTEM_ERROR with Java's remark and changes nothing.
#[actix_rt::test]
async fn group_attributes_are_altered_as_java_alters_them_and_survive_a_restart(
) -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = client();
    let update = |body: &str| {
        request(rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, &[]).with_body(body.as_bytes().to_vec())
    };
    expect_code(
        &h.call(
            &c,
            update(r#"{"groupName":"Prio","attributes":{"+priority.factor":"40","+lite.sub.model":"Exclusive"}}"#),
        )
        .await?,
        code::SUCCESS,
    )?;
    let refused = h
        .call(
            &c,
            update(r#"{"groupName":"Prio","attributes":{"+priority.factor":"140","-lite.sub.model":""}}"#),
        )
        .await?;
    expect_code(&refused, code::SYSTEM_ERROR)?;
    ensure!(
        refused.remark.as_deref() == Some("value is not in range(0, 100)"),
        "remark {:?}",
        refused.remark
    );
    expect_code(
        &h.call(
            &c,
            update(r#"{"groupName":"Prio","attributes":{"-lite.sub.model":""}}"#),
        )
        .await?,
        code::SUCCESS,
    )?;
    let h = h.restart().await?;
    let resp = h
        .call(&c, request(rc::GET_ALL_SUBSCRIPTIONGROUP_CONFIG, &[]))
        .await?;
    expect_code(&resp, code::SUCCESS)?;
    let groups: serde_json::Value = serde_json::from_slice(&resp.body)?;
    let attributes = &groups["subscriptionGroupTable"]["Prio"]["attributes"];
    ensure!(
        *attributes == serde_json::json!({"priority.factor": "40"}),
        "attributes {attributes}"
    );
    h.stop().await
}

/// `GET /metrics` on the metrics listener, as a scraper sends it; the response body.
async fn scrape(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<(String, String)> {
    let raw = crate::common::http_get(&addr.to_string(), path).await?;
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("no header end in {raw:?}"))?;
    let status = head.lines().next().unwrap_or_default().to_owned();
    Ok((status, body.to_owned()))
}

/// The Prometheus endpoint: produce and consume counts per queue, the group's lag and
/// in-flight, connections and requests by code, all as a user's traffic left them.
#[actix_rt::test]
async fn metrics_endpoint_reports_produce_consume_lag_and_requests() -> anyhow::Result<()> {
    let h = Harness::start_with(|c| {
        c.metrics_listen = "127.0.0.1:0".to_owned();
        // Acknowledged after the fsync, so the fsync histogram has counted before the scrape.
        c.flush = skiff::storage::store::FlushPolicy::Sync;
    })
    .await?;
    let metrics = h
        .serving
        .metrics_addr()
        .ok_or_else(|| anyhow!("metrics endpoint not running"))?;
    let c = client();
    for body in ["a", "b", "c"] {
        expect_code(
            &h.call(&c, send_v2("Metered", 1, body, "t")).await?,
            code::SUCCESS,
        )?;
    }
    let pulled = h
        .call(
            &c,
            pull("mg", "Metered", 1, 0, pull_sys_flag::SUBSCRIPTION, 0),
        )
        .await?;
    expect_code(&pulled, code::SUCCESS)?;
    expect_code(
        &h.call(&c, update_offset("mg", "Metered", 1, 1)).await?,
        code::SUCCESS,
    )?;

    let (status, text) = scrape(metrics, "/metrics").await?;
    ensure!(status.contains("200"), "{status}");
    let parsed = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .with_context(|| format!("not the Prometheus text format:\n{text}"))?;
    // The value of the one sample of `metric` whose labels include `labels`.
    let value = |metric: &str, labels: &[(&str, &str)]| -> anyhow::Result<f64> {
        let sample = parsed
            .samples
            .iter()
            .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .ok_or_else(|| anyhow!("no {metric} {labels:?} in:\n{text}"))?;
        Ok(match &sample.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
            prometheus_parse::Value::Summary(_) => bail!("{metric} is a summary"),
        })
    };
    let queue = [("topic", "Metered"), ("queue_id", "1")];
    let group_queue = [("group", "mg"), ("topic", "Metered"), ("queue_id", "1")];
    for (metric, labels, want) in [
        ("skiff_produced_messages_total", &queue[..], 3.0),
        ("skiff_produced_body_bytes_total", &queue[..], 3.0),
        ("skiff_consumed_messages_total", &group_queue[..], 3.0),
        ("skiff_consumer_offset", &group_queue[..], 1.0),
        ("skiff_consumer_lag_messages", &group_queue[..], 2.0),
        // Pulled up to 3, committed 1.
        ("skiff_consumer_in_flight_messages", &group_queue[..], 2.0),
        ("skiff_connections_open", &[][..], 1.0),
        ("skiff_requests_total", &[("code", "310")][..], 3.0),
        (
            "skiff_responses_total",
            &[("code", "310"), ("response_code", "0")][..],
            3.0,
        ),
        // The +Inf bucket of the pull's latency histogram holds the one pull.
        ("skiff_request_duration_seconds", &[("code", "11")][..], 1.0),
    ] {
        let got = value(metric, labels)?;
        ensure!(got == want, "{metric} {labels:?} = {got}, want {want}");
    }
    ensure!(value("skiff_store_bytes", &[])? > 0.0);
    ensure!(
        value("skiff_fsync_duration_seconds", &[])? >= 1.0,
        "no fsync counted"
    );
    let (status, _) = scrape(metrics, "/nothing-here").await?;
    ensure!(status.contains("404"), "{status}");
    // Embedded users read the same numbers.
    let snapshot = h.serving.node().metrics().await?;
    ensure!(snapshot
        .to_prometheus()
        .contains("skiff_produced_messages_total{topic=\"Metered\",queue_id=\"1\"} 3"));
    h.stop().await
}

/// Retention through the wire: full segments older than `retention` are deleted, the queue's
/// min offset moves past them, and a group whose committed offset fell below it is moved to
/// the min (PULL_OFFSET_MOVED) and then receives everything still stored, once.
#[actix_rt::test]
async fn retention_deletes_old_segments_and_a_group_below_the_min_continues_from_it(
) -> anyhow::Result<()> {
    let h = Harness::start_with(|c| {
        c.segment_size = 64 * 1024;
        c.max_message_size = 16 * 1024;
        c.retention = Duration::from_millis(300);
        c.cleanup_interval = Duration::from_millis(100);
    })
    .await?;
    let c = client();
    let filler = "x".repeat(1024);
    let sent = 300;
    for i in 0..sent {
        let body = format!("{i:04}{filler}");
        expect_code(
            &h.call(&c, send_v2("Aging", 0, &body, "t")).await?,
            code::SUCCESS,
        )?;
        if i == 0 {
            // The group read nothing yet: it stands at 0 when the old segments go.
            expect_code(
                &h.call(&c, update_offset("rg", "Aging", 0, 0)).await?,
                code::SUCCESS,
            )?;
        }
    }
    // Five or so segments of 64 KiB; every full one ages out, the active one stays.
    let mut min = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while min == 0 {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "retention deleted nothing within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let resp = h
            .call(
                &c,
                request(rc::GET_MIN_OFFSET, &[("topic", "Aging"), ("queueId", "0")]),
            )
            .await?;
        min = ext_i64(&resp, "offset")?;
    }
    ensure!(min > 0 && min < sent, "min offset {min} of {sent}");

    // The group committed 0, now below the min: moved to the min, as RocketMQ moves it.
    let moved = h
        .call(
            &c,
            pull("rg", "Aging", 0, 0, pull_sys_flag::SUBSCRIPTION, 0),
        )
        .await?;
    expect_code(&moved, code::PULL_OFFSET_MOVED)?;
    let next = ext_i64(&moved, "nextBeginOffset")?;
    ensure!(next >= min, "moved to {next}, below the min {min}");
    let mut offset = u64::try_from(next)?;
    let mut bodies = Vec::new();
    while offset < sent as u64 {
        let resp = h
            .call(
                &c,
                pull("rg", "Aging", 0, offset, pull_sys_flag::SUBSCRIPTION, 0),
            )
            .await?;
        expect_code(&resp, code::SUCCESS)?;
        for m in records(&resp)? {
            bodies.push(String::from_utf8_lossy(&m.body[..4]).into_owned());
        }
        offset = u64::try_from(ext_i64(&resp, "nextBeginOffset")?)?;
    }
    let want: Vec<String> = (next..sent).map(|i| format!("{i:04}")).collect();
    ensure!(bodies == want, "received {bodies:?}");
    h.stop().await
}

/// `skiff admin message` by offset id and by unique key, and `skiff admin query` by key, each
/// as JSON: the stored message with its properties and body.
#[actix_rt::test]
async fn admin_finds_messages_by_offset_id_unique_key_and_key() -> anyhow::Result<()> {
    use skiff::admin::{AdminArgs, AdminCommand};
    let h = Harness::start().await?;
    let c = client();
    let mut offset_ids = Vec::new();
    for (body, keys) in [("first", "order-1 shared"), ("second", "order-2 shared")] {
        let mut send = send_v2("Lookup", 0, body, "a");
        send.ext_fields.insert(
            "i".to_owned(),
            format!("TAGS\u{1}a\u{2}KEYS\u{1}{keys}\u{2}UNIQ_KEY\u{1}U-{body}\u{2}"),
        );
        let resp = h.call(&c, send).await?;
        expect_code(&resp, code::SUCCESS)?;
        offset_ids.push(
            resp.ext("msgId")
                .ok_or_else(|| anyhow!("no msgId in the send answer"))?
                .to_owned(),
        );
    }
    let admin = |command: AdminCommand| {
        skiff::admin::run(AdminArgs {
            namesrv: Some(h.addr.clone()),
            json: true,
            access_key: None,
            secret_key: None,
            command,
        })
    };
    let bodies = |json: &serde_json::Value| -> Vec<String> {
        json.as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["body"].as_str().map(str::to_owned))
            .collect()
    };

    let by_offset: serde_json::Value = serde_json::from_str(
        &admin(AdminCommand::Message {
            id: offset_ids[1].clone(),
            topic: None,
        })
        .await?,
    )?;
    ensure!(bodies(&by_offset) == ["second"], "{by_offset}");
    ensure!(
        by_offset[0]["properties"]["KEYS"] == "order-2 shared",
        "{by_offset}"
    );
    ensure!(by_offset[0]["offset_msg_id"] == offset_ids[1].as_str());

    let by_unique: serde_json::Value = serde_json::from_str(
        &admin(AdminCommand::Message {
            id: "U-first".to_owned(),
            topic: Some("Lookup".to_owned()),
        })
        .await?,
    )?;
    ensure!(bodies(&by_unique) == ["first"], "{by_unique}");

    let by_key: serde_json::Value = serde_json::from_str(
        &admin(AdminCommand::Query {
            topic: "Lookup".to_owned(),
            key: "shared".to_owned(),
        })
        .await?,
    )?;
    ensure!(bodies(&by_key) == ["second", "first"], "{by_key}");

    let missing = admin(AdminCommand::Query {
        topic: "Lookup".to_owned(),
        key: "absent".to_owned(),
    })
    .await;
    ensure!(
        matches!(&missing, Err(skiff::admin::AdminError::NotFound { .. })),
        "{missing:?}"
    );
    h.stop().await
}
