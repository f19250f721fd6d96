//! ACL 2.0 users and ACLs as RocketMQ 5's admin requests make them: a super user of `skiff.toml`
//! creates a user and its ACL with AUTH_CREATE_USER and AUTH_CREATE_ACL, `skiff serve` is
//! SIGKILLed right after the answers, and after the restart the user signs in, is allowed what
//! its ACL allows and refused the rest, and the listings show it; a refused admin request changes
//! nothing.

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
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let root = client("root", "root-secret");
    let alice = client("alice", "alice-secret-1");
    let serve = spawn_serve(dir.path(), &addr, &env)?;
    runtime.block_on(async {
        wait_serving(&root, &addr, "Orders").await?;
        for topic in ["Orders", "Secret"] {
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
        let acl = with_body(
            request(rc::AUTH_CREATE_ACL, &[("subject", "User:alice")]),
            r#"{"policies":[{"entries":[{"actions":["Pub"],"decision":"Allow","resource":"Topic:Orders"}]}],"subject":"User:alice"}"#,
        );
        let (c, remark, _) = answer(&root, &addr, acl).await?;
        anyhow::ensure!(c == code::SUCCESS, "createAcl: {c} {remark}");
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
            c == code::SUCCESS && acl.contains("Topic:Orders") && !acl.contains("Topic:Secret"),
            "getAcl: {c} {acl}"
        );
        anyhow::Ok(())
    })
}
