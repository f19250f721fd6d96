//! The console's API on `skiff serve`'s HTTP listener, endpoint by endpoint, checked against
//! the broker's own answers: topics and their offsets, a group's lag and its history, a test
//! message found again by its id and its key, an offset reset; and bad input: an unknown
//! topic, malformed offsets, a reset without confirmation, a change without the CSRF header,
//! and with ACL on a request without a login or a change by a non-admin.

use crate::common;

use std::time::Duration;

use anyhow::{ensure, Context};
use serde_json::Value;
use skiff::acl::{AccountConfig, AclConfig};
use skiff::remoting::codes::{request as rc, response as code};
use skiff::remoting::{ClientConfig, RemotingClient};
use skiff::serve::{self, Serving};
use skiff::testsuite::{java_trace_body, pull, send_v2};
use skiff::NodeConfig;

const CSRF: (&str, &str) = ("X-Skiff-Console", "1");

async fn start(dir: &std::path::Path, acl: AclConfig) -> anyhow::Result<Serving> {
    let mut config = NodeConfig::in_dir(dir);
    config.listen = "127.0.0.1:0".parse()?;
    config.grpc_listen = "off".to_owned();
    config.metrics_listen = "127.0.0.1:0".to_owned();
    config.console_sample_interval = Duration::from_millis(100);
    config.disk_max_used_ratio = 0.999;
    config.disk_full_ratio = 1.0;
    config.acl = acl;
    Ok(serve::start(config).await?)
}

/// Status and JSON body (`Value::Null` when the body is not JSON).
async fn call(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> anyhow::Result<(u16, Value)> {
    let response = common::http_request(addr, method, path, headers, body).await?;
    let status: u16 = response
        .split(' ')
        .nth(1)
        .context("no status line")?
        .parse()
        .context("status code")?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

async fn get(addr: &str, path: &str) -> anyhow::Result<(u16, Value)> {
    call(addr, "GET", path, &[], None).await
}

#[actix_rt::test]
async fn the_console_api_shows_what_the_broker_holds_and_refuses_bad_input() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let serving = start(dir.path(), AclConfig::default()).await?;
    let http = serving.metrics_addr().context("http listener")?.to_string();
    let remoting = serving.local_addr().to_string();
    let client = RemotingClient::new(ClientConfig::default());
    for i in 0..10 {
        let send = send_v2("Orders", format!("order {i}"))
            .queue(0)
            .properties(format!("KEYS\u{1}k{i}\u{2}TAGS\u{1}paid\u{2}"))
            .build();
        common::expect_code(
            &client
                .invoke(&remoting, send, Duration::from_secs(5))
                .await?,
            code::SUCCESS,
        )?;
    }
    // The group consumes four and commits them: a lag of six.
    let pulled = client
        .invoke(
            &remoting,
            pull("GID_orders", "Orders", 0, 0)
                .sys_flag(skiff::remoting::codes::pull_sys_flag::SUBSCRIPTION)
                .build(),
            Duration::from_secs(5),
        )
        .await?;
    common::expect_code(&pulled, code::SUCCESS)?;
    let commit = common::request(
        rc::UPDATE_CONSUMER_OFFSET,
        &[
            ("consumerGroup", "GID_orders"),
            ("topic", "Orders"),
            ("queueId", "0"),
            ("commitOffset", "4"),
        ],
    );
    common::expect_code(
        &client
            .invoke(&remoting, commit, Duration::from_secs(5))
            .await?,
        code::SUCCESS,
    )?;

    let (status, overview) = get(&http, "/api/v1/overview").await?;
    ensure!(
        status == 200 && overview["topics"].as_u64() >= Some(1),
        "{status} {overview}"
    );
    ensure!(overview["broker_name"] == "skiff", "{overview}");

    let (status, topics) = get(&http, "/api/v1/topics").await?;
    ensure!(status == 200, "{status} {topics}");
    let orders = topics["topics"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "Orders"))
        .context("Orders listed")?;
    ensure!(
        orders["messages"] == 10 && orders["max_offset"] == 10,
        "{orders}"
    );

    let (status, topic) = get(&http, "/api/v1/topics/Orders").await?;
    ensure!(
        status == 200 && topic["queues"][0]["max_offset"] == 10,
        "{status} {topic}"
    );
    let group_row = topic["groups"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["group"] == "GID_orders"))
        .context("the group consuming Orders")?;
    ensure!(group_row["lag"] == 6, "{group_row}");
    let (status, _) = get(&http, "/api/v1/topics/NoSuchTopic").await?;
    ensure!(status == 404, "unknown topic: {status}");

    // Lag over time: the sampler records it every 100 ms.
    let started = tokio::time::Instant::now();
    let group = loop {
        let (status, group) = get(&http, "/api/v1/groups/GID_orders").await?;
        ensure!(status == 200, "{status} {group}");
        if group["lag_history"]
            .as_array()
            .is_some_and(|h| h.len() >= 2)
        {
            break group;
        }
        ensure!(
            started.elapsed() < Duration::from_secs(10),
            "no lag history: {group}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    ensure!(
        group["lag"] == 6 && group["queues"][0]["consumer_offset"] == 4,
        "{group}"
    );
    ensure!(
        group["lag_history"]
            .as_array()
            .and_then(|h| h.last())
            .map(|p| &p["lag"])
            == Some(&Value::from(6)),
        "{group}"
    );
    let (status, groups) = get(&http, "/api/v1/groups").await?;
    ensure!(
        status == 200
            && groups["groups"]
                .as_array()
                .is_some_and(|g| g.iter().any(|g| g["name"] == "GID_orders" && g["lag"] == 6)),
        "{status} {groups}"
    );

    // Changes need the CSRF header.
    let new_topic = r#"{"name": "Created", "queues": 2, "message_type": "FIFO"}"#;
    let (status, refused) = call(&http, "POST", "/api/v1/topics", &[], Some(new_topic)).await?;
    ensure!(status == 403, "no CSRF header: {status} {refused}");
    ensure!(
        serving.node().broker().topic("Created")?.is_none(),
        "a refused create changed nothing"
    );
    let (status, _) = call(&http, "POST", "/api/v1/topics", &[CSRF], Some(new_topic)).await?;
    ensure!(status == 201, "create: {status}");
    let created = serving
        .node()
        .broker()
        .topic("Created")?
        .context("created")?;
    ensure!(created.read_queue_nums == 2, "{created:?}");
    let (status, _) = call(&http, "POST", "/api/v1/topics", &[CSRF], Some(new_topic)).await?;
    ensure!(status == 409, "create twice: {status}");
    let (status, _) = call(
        &http,
        "POST",
        "/api/v1/topics",
        &[CSRF],
        Some(r#"{"name": "bad name!"}"#),
    )
    .await?;
    ensure!(status == 400, "bad name: {status}");

    // A test message, found by its id and by its key.
    let (status, sent) = call(
        &http,
        "POST",
        "/api/v1/topics/Orders/messages",
        &[CSRF],
        Some(r#"{"body": "{\"id\": 42}", "tag": "test", "keys": "probe-key", "properties": {"origin": "console"}}"#),
    )
    .await?;
    ensure!(status == 200, "send: {status} {sent}");
    let id = sent["msg_id"].as_str().context("msg_id")?;
    let (status, message) = get(&http, &format!("/api/v1/messages/{id}")).await?;
    ensure!(status == 200, "{status} {message}");
    ensure!(
        message["body_text"] == "{\"id\": 42}"
            && message["properties"]["origin"] == "console"
            && message["tags"] == "test",
        "{message}"
    );
    let (status, by_key) = get(&http, "/api/v1/messages?topic=Orders&key=probe-key").await?;
    let found_key = by_key["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["msg_id"] == id));
    ensure!(status == 200 && found_key, "{status} {by_key}");
    let uniq = sent["uniq_key"].as_str().context("uniq_key")?;
    let (status, by_uniq) = get(&http, &format!("/api/v1/messages/{uniq}?topic=Orders")).await?;
    ensure!(
        status == 200 && by_uniq["msg_id"] == id,
        "by the producer's id: {status} {by_uniq}"
    );
    let (status, anywhere) = get(&http, &format!("/api/v1/messages/{uniq}")).await?;
    ensure!(
        status == 200 && anywhere["msg_id"] == id,
        "by the producer's id, no topic named: {status} {anywhere}"
    );
    let (status, not_json) =
        call(&http, "POST", "/api/v1/topics", &[CSRF], Some("{not json")).await?;
    ensure!(
        status == 400 && not_json["error"].is_string(),
        "a body that is not JSON: {status} {not_json}"
    );
    let (status, _) = get(&http, "/api/v1/messages/not-an-id").await?;
    ensure!(status == 400, "malformed id: {status}");

    // A dead letter, resent to the topic it came from. An offset message id ends with the
    // commit-log offset in 16 hex digits.
    let physical = u64::from_str_radix(id.get(id.len() - 16..).context("id length")?, 16)?;
    let to_dlq = common::request(
        rc::CONSUMER_SEND_MSG_BACK,
        &[
            ("group", "GID_orders"),
            ("offset", &physical.to_string()),
            ("delayLevel", "-1"),
            ("originMsgId", id),
            ("originTopic", "Orders"),
            ("maxReconsumeTimes", "16"),
        ],
    );
    common::expect_code(
        &client
            .invoke(&remoting, to_dlq, Duration::from_secs(5))
            .await?,
        code::SUCCESS,
    )?;
    let (status, letters) =
        get(&http, "/api/v1/messages?topic=%25DLQ%25GID_orders&queue=0").await?;
    ensure!(status == 200, "{status} {letters}");
    let letter = letters["messages"][0]["msg_id"]
        .as_str()
        .context("a dead letter")?
        .to_owned();
    let stored = || -> u64 {
        let reader = serving.node().broker().reader();
        (0..4).map(|q| reader.max_offset("Orders", q)).sum()
    };
    let before = stored();
    let resend = format!("/api/v1/messages/{letter}/resend");
    let (status, resent) = call(&http, "POST", &resend, &[CSRF], None).await?;
    ensure!(
        status == 200 && resent["topic"] == "Orders",
        "{status} {resent}"
    );
    let again = resent["msg_id"]
        .as_str()
        .context("the resent id")?
        .to_owned();
    let (_, copy) = get(&http, &format!("/api/v1/messages/{again}")).await?;
    ensure!(
        copy["topic"] == "Orders"
            && copy["body_text"] == "{\"id\": 42}"
            && copy["reconsume_times"] == 0,
        "{copy}"
    );
    ensure!(stored() == before + 1, "one message back in Orders");
    let all = "/api/v1/groups/GID_orders/dlq/resend";
    let (status, _) = call(&http, "POST", all, &[CSRF], Some("{}")).await?;
    ensure!(status == 400, "resend all without confirmation: {status}");
    // Resent once already: marked so, refused a second time unless asked, skipped by "all".
    let (_, marked) = get(&http, &format!("/api/v1/messages/{letter}")).await?;
    ensure!(
        marked["resent"][0]["msg_id"] == again.as_str(),
        "the letter's resends: {marked}"
    );
    let (status, _) = call(&http, "POST", &resend, &[CSRF], None).await?;
    ensure!(status == 409, "a second resend not asked for: {status}");
    let (status, all_resent) =
        call(&http, "POST", all, &[CSRF], Some(r#"{"confirm": true}"#)).await?;
    ensure!(
        status == 200
            && all_resent["resent"].as_array().map(Vec::len) == Some(0)
            && all_resent["skipped"][0] == letter.as_str(),
        "{status} {all_resent}"
    );
    ensure!(stored() == before + 1, "nothing resent twice");
    let (status, all_resent) = call(
        &http,
        "POST",
        all,
        &[CSRF],
        Some(r#"{"confirm": true, "again": true}"#),
    )
    .await?;
    ensure!(
        status == 200 && all_resent["resent"].as_array().map(Vec::len) == Some(1),
        "{status} {all_resent}"
    );
    let not_a_letter = format!("/api/v1/messages/{again}/resend");
    let (status, _) = call(&http, "POST", &not_a_letter, &[CSRF], None).await?;
    ensure!(
        status == 400,
        "resending a message that is no dead letter: {status}"
    );

    let (status, browsed) = get(
        &http,
        "/api/v1/messages?topic=Orders&queue=0&from=2&count=3",
    )
    .await?;
    let offsets: Vec<u64> = browsed["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|m| m["queue_offset"].as_u64())
                .collect()
        })
        .unwrap_or_default();
    ensure!(status == 200 && offsets == [2, 3, 4], "{status} {browsed}");
    let (status, _) = get(&http, "/api/v1/messages?topic=Orders&queue=abc").await?;
    ensure!(status == 400, "malformed queue: {status}");
    let (status, _) = get(&http, "/api/v1/messages?topic=Orders&queue=0&from=-1").await?;
    ensure!(status == 400, "malformed offset: {status}");

    // A reset needs confirmation, then moves the offsets.
    let reset =
        |confirm: bool| format!(r#"{{"topic": "Orders", "to": "earliest", "confirm": {confirm}}}"#);
    let path = "/api/v1/groups/GID_orders/reset-offset";
    let (status, _) = call(&http, "POST", path, &[CSRF], Some(&reset(false))).await?;
    ensure!(status == 400, "reset without confirmation: {status}");
    let progress = serving.node().broker().progress("GID_orders").await?;
    ensure!(
        progress[0].consumer_offset == Some(4),
        "an unconfirmed reset changed nothing"
    );
    let (status, answer) = call(&http, "POST", path, &[CSRF], Some(&reset(true))).await?;
    ensure!(
        status == 200 && answer["queues"][0]["offset"] == 0,
        "{status} {answer}"
    );

    // A trace, as a Java client with enableMsgTrace writes one: a message of the trace topic
    // keyed by the traced message's id, with Pub, SubBefore and SubAfter records (and a record of
    // another message, which the traced one's page leaves out).
    let traced = "0A0B0C0D00002A9F0000000000000ABC";
    let trace_body = java_trace_body(traced);
    let trace_send = send_v2("RMQ_SYS_TRACE_TOPIC", trace_body)
        .queue(0)
        .properties(format!("KEYS\u{1}{traced} k1\u{2}"))
        .build();
    common::expect_code(
        &client
            .invoke(&remoting, trace_send, Duration::from_secs(5))
            .await?,
        code::SUCCESS,
    )?;
    let started = tokio::time::Instant::now();
    let trace = loop {
        let (status, trace) = get(&http, &format!("/api/v1/messages/{traced}/traces")).await?;
        ensure!(status == 200, "{status} {trace}");
        if trace["events"].as_array().is_some_and(|e| !e.is_empty()) {
            break trace;
        }
        ensure!(
            started.elapsed() < Duration::from_secs(10),
            "the trace was not indexed: {trace}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let kinds: Vec<&str> = trace["events"]
        .as_array()
        .map(|e| e.iter().filter_map(|e| e["kind"].as_str()).collect())
        .unwrap_or_default();
    ensure!(kinds == ["Pub", "SubBefore", "SubAfter"], "{trace}");
    ensure!(
        trace["events"][2]["cost_ms"] == 25 && trace["events"][0]["group"] == "PG",
        "{trace}"
    );

    let page = common::http_get(&http, "/").await?;
    ensure!(
        page.starts_with("HTTP/1.1 200") && page.contains("<html"),
        "the page"
    );
    let metrics = common::http_get(&http, "/metrics").await?;
    ensure!(metrics.contains("skiff_"), "metrics still served");

    let (status, _) = call(&http, "DELETE", "/api/v1/topics/Created", &[CSRF], None).await?;
    ensure!(status == 204, "delete: {status}");
    ensure!(
        serving.node().broker().topic("Created")?.is_none(),
        "deleted"
    );
    client.shutdown();
    serving.shutdown().await?;
    Ok(())
}

#[actix_rt::test]
async fn with_acl_on_the_console_needs_a_login_and_changes_need_an_admin() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let account = |key: &str, admin: bool| AccountConfig {
        access_key: key.into(),
        secret_key: format!("{key}-secret"),
        admin,
        topic_perms: vec!["Orders=PUB|SUB".into()],
        ..AccountConfig::default()
    };
    let serving = start(
        dir.path(),
        AclConfig {
            accounts: vec![account("root", true), account("alice", false)],
            ..AclConfig::default()
        },
    )
    .await?;
    let http = serving.metrics_addr().context("http listener")?.to_string();
    let basic = |user: &str, password: &str| {
        use base64::Engine;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        )
    };
    let response = common::http_get(&http, "/api/v1/topics").await?;
    ensure!(
        response.starts_with("HTTP/1.1 401") && response.contains("www-authenticate: Basic"),
        "{response}"
    );
    let wrong = basic("alice", "guessed");
    let (status, _) = call(
        &http,
        "GET",
        "/api/v1/topics",
        &[("Authorization", &wrong)],
        None,
    )
    .await?;
    ensure!(status == 401, "a wrong secret: {status}");
    let alice = basic("alice", "alice-secret");
    let (status, _) = call(
        &http,
        "GET",
        "/api/v1/topics",
        &[("Authorization", &alice)],
        None,
    )
    .await?;
    ensure!(status == 200, "alice reads: {status}");
    let (status, _) = call(
        &http,
        "GET",
        "/api/v1/messages?topic=Secret&queue=0",
        &[("Authorization", &alice)],
        None,
    )
    .await?;
    ensure!(status == 403, "alice reads a topic she may not: {status}");
    let body = Some(r#"{"name": "ByAlice"}"#);
    let (status, _) = call(
        &http,
        "POST",
        "/api/v1/topics",
        &[("Authorization", &alice), CSRF],
        body,
    )
    .await?;
    ensure!(status == 403, "alice changes: {status}");
    ensure!(
        serving.node().broker().topic("ByAlice")?.is_none(),
        "nothing created"
    );
    let root = basic("root", "root-secret");
    let (status, _) = call(
        &http,
        "POST",
        "/api/v1/topics",
        &[("Authorization", &root), CSRF],
        body,
    )
    .await?;
    ensure!(status == 201, "root changes: {status}");
    // The cluster page's settings hold the accounts: never their secrets.
    let (status, cluster) = call(
        &http,
        "GET",
        "/api/v1/cluster",
        &[("Authorization", &root)],
        None,
    )
    .await?;
    let text = cluster.to_string();
    ensure!(
        status == 200
            && cluster["acl"]["accounts"] == 2
            && cluster["settings"]["broker_name"].is_string()
            && !text.contains("root-secret")
            && !text.contains("alice-secret"),
        "{status} {cluster}"
    );
    serving.shutdown().await?;
    Ok(())
}
