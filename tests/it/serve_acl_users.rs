//! ACL 2.0 users and ACLs as RocketMQ 5's admin requests make them: a super user of `skiff.toml`
//! creates users (a normal one with an ACL of allow, deny and source-address entries, a super
//! one, a disabled one) with AUTH_CREATE_USER, AUTH_UPDATE_USER and AUTH_CREATE_ACL, `skiff serve`
//! is SIGKILLed right after the answers, and after the restart each user is allowed and refused
//! as before, the listings show them, and the log (at debug) carries no password; a refused
//! admin request changes nothing.

use crate::common;

use std::time::Duration;

use common::{request, spawn_serve, wait_serving};
use skiff::acl::signature::Credentials;
use skiff::remoting::codes::{request as rc, response as code};
use skiff::remoting::frame::RemotingCommand;
use skiff::remoting::{ClientConfig, RemotingClient};
use skiff::testsuite::send_v2;

const TIMEOUT: Duration = Duration::from_secs(5);

const SKIFF_TOML: &str = r#"
[acl]
[[acl.accounts]]
access_key = "root"
secret_key = "root-secret"
admin = true
"#;

fn client(access_key: &str, secret_key: &str) -> RemotingClient {
    RemotingClient::new(ClientConfig {
        credentials: Some(Credentials {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
        }),
        ..ClientConfig::default()
    })
}

fn with_body(mut cmd: RemotingCommand, json: &str) -> RemotingCommand {
    cmd.body = bytes::Bytes::from(json.to_owned());
    cmd
}

fn create_topic(topic: &str) -> RemotingCommand {
    request(
        rc::UPDATE_AND_CREATE_TOPIC,
        &[
            ("topic", topic),
            ("defaultTopic", "TBW102"),
            ("readQueueNums", "1"),
            ("writeQueueNums", "1"),
            ("perm", "6"),
            ("topicFilterType", "SINGLE_TAG"),
            ("topicSysFlag", "0"),
            ("order", "false"),
        ],
    )
}

async fn answer(
    client: &RemotingClient,
    addr: &str,
    cmd: RemotingCommand,
) -> anyhow::Result<(i32, String, String)> {
    let response = client.invoke(addr, cmd, TIMEOUT).await?;
    Ok((
        response.code,
        response.remark.unwrap_or_default(),
        String::from_utf8_lossy(&response.body).into_owned(),
    ))
}

#[test]
fn users_and_acls_made_by_admin_requests_survive_a_sigkill_and_decide_requests(
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("skiff.toml"), SKIFF_TOML)?;
    let addr = format!("127.0.0.1:{}", common::free_port()?);
    let env = [
        ("SKIFF_METRICS_LISTEN", "off".to_string()),
        ("SKIFF_GRPC_LISTEN", "off".to_string()),
        ("RUST_LOG", "debug".to_string()),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let root = client("root", "root-secret");
    let alice = client("alice", "alice-secret-1");
    let serve = spawn_serve(dir.path(), &addr, &env)?;
    runtime.block_on(async {
        wait_serving(&root, &addr, "Orders").await?;
        for topic in ["Orders", "Orders2", "Ordinal", "Secret"] {
            let (c, remark, _) = answer(&root, &addr, create_topic(topic)).await?;
            anyhow::ensure!(c == code::SUCCESS, "creating {topic}: {c} {remark}");
        }
        let create = with_body(
            request(rc::AUTH_CREATE_USER, &[("username", "alice")]),
            r#"{"password":"alice-secret-1","username":"alice"}"#,
        );
        let (c, remark, _) = answer(&root, &addr, create).await?;
        anyhow::ensure!(c == code::SUCCESS, "createUser: {c} {remark}");
        // A refused ACL (an invalid source address) stores nothing.
        let bad = with_body(
            request(rc::AUTH_CREATE_ACL, &[("subject", "User:alice")]),
            r#"{"policies":[{"entries":[{"actions":["Pub"],"decision":"Allow","resource":"Topic:Secret","sourceIps":["300.1.1.1"]}]}],"subject":"User:alice"}"#,
        );
        let (c, remark, _) = answer(&root, &addr, bad).await?;
        anyhow::ensure!(
            c == code::NO_PERMISSION && remark == "The source ip is invalid.",
            "a bad source ip: {c} {remark}"
        );
        // An allow, a deny by prefix (the literal Orders beats it) and an entry limited to
        // 10.0.0.0/8 (which 127.0.0.1 never matches).
        let acl = with_body(
            request(rc::AUTH_CREATE_ACL, &[("subject", "User:alice")]),
            r#"{"policies":[{"entries":[{"actions":["Pub"],"decision":"Allow","resource":"Topic:Orders"},{"actions":["Pub"],"decision":"Deny","resource":"Topic:Orders*"},{"actions":["Pub"],"decision":"Allow","resource":"Topic:Ord*","sourceIps":["10.0.0.0/8"]}]}],"subject":"User:alice"}"#,
        );
        let (c, remark, _) = answer(&root, &addr, acl).await?;
        anyhow::ensure!(c == code::SUCCESS, "createAcl: {c} {remark}");
        // bob is a stored super user; carol is made, then disabled.
        for (user, body) in [
            ("bob", r#"{"password":"bob-secret-1","username":"bob","userType":"Super"}"#),
            ("carol", r#"{"password":"carol-secret-1","username":"carol"}"#),
        ] {
            let create = with_body(request(rc::AUTH_CREATE_USER, &[("username", user)]), body);
            let (c, remark, _) = answer(&root, &addr, create).await?;
            anyhow::ensure!(c == code::SUCCESS, "createUser {user}: {c} {remark}");
        }
        let disable = with_body(
            request(rc::AUTH_UPDATE_USER, &[("username", "carol")]),
            r#"{"username":"carol","userStatus":"disable"}"#,
        );
        let (c, remark, _) = answer(&root, &addr, disable).await?;
        anyhow::ensure!(c == code::SUCCESS, "disabling carol: {c} {remark}");
        // alice may not manage users: the admin requests need Update on the cluster.
        let by_alice = with_body(
            request(rc::AUTH_CREATE_USER, &[("username", "mallory")]),
            r#"{"password":"m"}"#,
        );
        let (c, remark, _) = answer(&alice, &addr, by_alice).await?;
        anyhow::ensure!(
            c == code::NO_PERMISSION && remark.contains("Cluster:DefaultCluster"),
            "alice creating a user: {c} {remark}"
        );
        anyhow::Ok(())
    })?;
    // Killed right after the answers: what was answered must be on disk.
    drop(serve);
    let _serve = spawn_serve(dir.path(), &addr, &env)?;
    runtime.block_on(async {
        wait_serving(&root, &addr, "Orders").await?;
        let (c, remark, _) = answer(&alice, &addr, send_v2("Orders", "hello").build()).await?;
        anyhow::ensure!(c == code::SUCCESS, "alice sending to Orders after the restart: {c} {remark}");
        let (c, remark, _) = answer(&alice, &addr, send_v2("Secret", "no").build()).await?;
        anyhow::ensure!(
            c == code::NO_PERMISSION
                && remark == "User:alice has no permission to access Topic:Secret from 127.0.0.1, no matched policies.",
            "alice sending to Secret: {c} {remark}"
        );
        let (c, remark, _) = answer(&alice, &addr, send_v2("Orders2", "no").build()).await?;
        anyhow::ensure!(
            c == code::NO_PERMISSION
                && remark == "User:alice has no permission to access Topic:Orders2 from 127.0.0.1, the decision is deny.",
            "alice sending to Orders2 (denied by prefix): {c} {remark}"
        );
        let (c, remark, _) = answer(&alice, &addr, send_v2("Ordinal", "no").build()).await?;
        anyhow::ensure!(
            c == code::NO_PERMISSION && remark.ends_with("Topic:Ordinal from 127.0.0.1, no matched policies."),
            "alice sending to Ordinal (allowed from 10.0.0.0/8 only): {c} {remark}"
        );
        let bob = client("bob", "bob-secret-1");
        let (c, remark, _) = answer(&bob, &addr, create_topic("BobsTopic")).await?;
        anyhow::ensure!(c == code::SUCCESS, "super bob creating a topic: {c} {remark}");
        let carol = client("carol", "carol-secret-1");
        let (c, remark, _) = answer(&carol, &addr, send_v2("Orders", "no").build()).await?;
        anyhow::ensure!(
            c == code::NO_PERMISSION && remark == "User:carol is disabled.",
            "disabled carol sending: {c} {remark}"
        );
        let (c, _, users) = answer(&root, &addr, request(rc::AUTH_LIST_USER, &[])).await?;
        anyhow::ensure!(
            c == code::SUCCESS
                && users.contains(r#""username":"alice""#)
                && !users.contains("alice-secret-1")
                && !users.contains("mallory"),
            "listUser: {c} {users}"
        );
        let get = request(rc::AUTH_GET_ACL, &[("subject", "User:alice")]);
        let (c, _, acl) = answer(&root, &addr, get).await?;
        anyhow::ensure!(
            c == code::SUCCESS
                && acl.contains(r#""resource":"Topic:Orders*""#)
                && acl.contains("10.0.0.0/8")
                && !acl.contains("Topic:Secret"),
            "getAcl: {c} {acl}"
        );
        anyhow::Ok(())
    })?;
    // Logged at debug, across both runs: no password of a stored user.
    let log = std::fs::read_to_string(dir.path().join("serve.log"))?;
    anyhow::ensure!(log.contains("alice"), "the log names the users it made");
    for secret in ["alice-secret-1", "bob-secret-1", "carol-secret-1"] {
        anyhow::ensure!(!log.contains(secret), "the log shows {secret}");
    }
    Ok(())
}
