//! ACL as a user meets it: `skiff serve` with accounts in `skiff.toml` serves each signed
//! request its account may make, refuses the others with NO_PERMISSION and a remark naming the
//! user and the resource, and stores nothing for a refused send; name-server lookups stay open
//! as RocketMQ's name server keeps them. An `acl_file` in `plain_acl.yml` format is re-read
//! when it changes, and the connection that was refused before is served after, unbroken.

use crate::common;

use std::time::Duration;

use anyhow::{ensure, Context};
use common::{request, spawn_serve, wait_serving};
use skiff::acl::signature::Credentials;
use skiff::remoting::codes::{request as rc, response as code};
use skiff::remoting::frame::RemotingCommand;
use skiff::remoting::{ClientConfig, RemotingClient};
use skiff::testsuite::{pull, send_v2, RawConn};

const TIMEOUT: Duration = Duration::from_secs(5);

const SKIFF_TOML: &str = r#"
[acl]
[[acl.accounts]]
access_key = "root"
secret_key = "root-secret"
admin = true

[[acl.accounts]]
access_key = "alice"
secret_key = "alice-secret-1"
default_topic_perm = "DENY"
default_group_perm = "DENY"
topic_perms = ["AclTopic=PUB|SUB"]
group_perms = ["GID_acl=SUB"]
"#;

fn client(keys: Option<(&str, &str)>) -> RemotingClient {
    RemotingClient::new(ClientConfig {
        credentials: keys.map(|(access_key, secret_key)| Credentials {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
        }),
        ..ClientConfig::default()
    })
}

fn create_topic(topic: &str) -> RemotingCommand {
    request(
        rc::UPDATE_AND_CREATE_TOPIC,
        &[
            ("topic", topic),
            ("defaultTopic", "TBW102"),
            ("readQueueNums", "4"),
            ("writeQueueNums", "4"),
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
) -> anyhow::Result<(i32, String)> {
    let response = client.invoke(addr, cmd, TIMEOUT).await?;
    Ok((response.code, response.remark.unwrap_or_default()))
}

async fn max_offset(
    root: &RemotingClient,
    addr: &str,
    topic: &str,
    queue: u32,
) -> anyhow::Result<i64> {
    let response = root
        .invoke(
            addr,
            request(
                rc::GET_MAX_OFFSET,
                &[("topic", topic), ("queueId", &queue.to_string())],
            ),
            TIMEOUT,
        )
        .await?;
    common::expect_code(&response, code::SUCCESS)?;
    response
        .ext("offset")
        .context("no offset field")?
        .parse()
        .context("offset")
}

#[test]
fn signed_requests_are_served_by_permission_and_the_rest_refused_with_nothing_stored(
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("skiff.toml"), SKIFF_TOML)?;
    let port = common::free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let _serve = spawn_serve(
        dir.path(),
        &addr,
        &[
            ("SKIFF_METRICS_LISTEN", "off".to_string()),
            ("SKIFF_GRPC_LISTEN", "off".to_string()),
        ],
    )?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let unsigned = client(None);
        // Route lookups are name-server requests: served unsigned.
        wait_serving(&unsigned, &addr, "AclTopic").await?;
        let root = client(Some(("root", "root-secret")));
        let alice = client(Some(("alice", "alice-secret-1")));
        let impostor = client(Some(("alice", "guessed")));
        let stranger = client(Some(("bob", "bob-secret")));

        for topic in ["AclTopic", "AclDenied"] {
            let (got, remark) = answer(&root, &addr, create_topic(topic)).await?;
            ensure!(
                got == code::SUCCESS,
                "admin creating {topic}: {got} {remark}"
            );
        }
        let (got, remark) = answer(&alice, &addr, create_topic("AliceOwn")).await?;
        ensure!(
            got == code::NO_PERMISSION && remark.contains("User:alice is not an admin"),
            "a non-admin creating a topic: {got} {remark}"
        );

        let send = |topic: &str| send_v2(topic, "hello").queue(0).build();
        let (got, remark) = answer(&alice, &addr, send("AclTopic")).await?;
        ensure!(
            got == code::SUCCESS,
            "alice sending to AclTopic: {got} {remark}"
        );
        let (got, remark) = answer(&alice, &addr, send("AclDenied")).await?;
        ensure!(
            got == code::NO_PERMISSION
                && remark.contains("User:alice")
                && remark.contains("Topic:AclDenied"),
            "alice sending to AclDenied: {got} {remark}"
        );
        let (got, remark) = answer(&impostor, &addr, send("AclTopic")).await?;
        ensure!(
            got == code::NO_PERMISSION && remark == "check signature failed.",
            "a wrong secret: {got} {remark}"
        );
        let (got, remark) = answer(&stranger, &addr, send("AclTopic")).await?;
        ensure!(
            got == code::NO_PERMISSION && remark == "User:bob is not found.",
            "an unknown access key: {got} {remark}"
        );
        let (got, remark) = answer(&unsigned, &addr, send("AclTopic")).await?;
        ensure!(
            got == code::NO_PERMISSION && remark.contains("not signed"),
            "an unsigned send: {got} {remark}"
        );

        // A signed request altered on the way (its topic changed after signing) fails too.
        let mut tampered = send("AclTopic");
        tampered.version = skiff::remoting::codes::version::CURRENT;
        skiff::acl::signature::sign_remoting(
            &mut tampered,
            &Credentials {
                access_key: "alice".into(),
                secret_key: "alice-secret-1".into(),
            },
        );
        tampered.ext_fields.insert("b".into(), "AclDenied".into());
        let mut raw = RawConn::connect(&addr).await?;
        let refused = raw.call(tampered).await?;
        ensure!(
            refused.code == code::NO_PERMISSION,
            "a tampered request: {} {:?}",
            refused.code,
            refused.remark
        );

        let pull = |group: &str| {
            pull(group, "AclTopic", 0, 0)
                .sys_flag(skiff::remoting::codes::pull_sys_flag::SUBSCRIPTION)
                .build()
        };
        let (got, remark) = answer(&alice, &addr, pull("GID_acl")).await?;
        ensure!(
            got == code::SUCCESS,
            "alice pulling with GID_acl: {got} {remark}"
        );
        let (got, remark) = answer(&alice, &addr, pull("GID_acl_denied")).await?;
        ensure!(
            got == code::NO_PERMISSION && remark.contains("Group:GID_acl_denied"),
            "alice pulling with GID_acl_denied: {got} {remark}"
        );

        ensure!(
            max_offset(&root, &addr, "AclTopic", 0).await? == 1,
            "one allowed send stored"
        );
        for queue in 0..4 {
            let stored = max_offset(&root, &addr, "AclDenied", queue).await?;
            ensure!(
                stored == 0,
                "a refused send stored {stored} messages in queue {queue}"
            );
        }
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(())
}

#[test]
fn an_acl_file_is_reloaded_when_it_changes_and_open_connections_keep_going() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let acl_file = dir.path().join("plain_acl.yml");
    // plain_acl.yml as RocketMQ writes it: camel case, a numeric secret, an empty address.
    let plain_acl = |topic_perms: &str| {
        format!(
            "accounts:\n  - accessKey: alice\n    secretKey: 12345678\n    whiteRemoteAddress:\n    \
             admin: false\n    defaultTopicPerm: DENY\n    topicPerms:\n{topic_perms}"
        )
    };
    std::fs::write(&acl_file, plain_acl("      - AclTopic=PUB\n"))?;
    std::fs::write(
        dir.path().join("skiff.toml"),
        format!("acl_file = {:?}\n", acl_file.display().to_string()),
    )?;
    let port = common::free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let _serve = spawn_serve(
        dir.path(),
        &addr,
        &[
            ("SKIFF_METRICS_LISTEN", "off".to_string()),
            ("SKIFF_GRPC_LISTEN", "off".to_string()),
        ],
    )?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        wait_serving(&client(None), &addr, "Later").await?;
        let alice = Credentials {
            access_key: "alice".into(),
            secret_key: "12345678".into(),
        };
        let signed = |topic: &str| {
            let mut cmd = send_v2(topic, "hello").queue(0).build();
            cmd.version = skiff::remoting::codes::version::CURRENT;
            skiff::acl::signature::sign_remoting(&mut cmd, &alice);
            cmd
        };
        let mut conn = RawConn::connect(&addr).await?;
        let before = conn.call(signed("Later")).await?;
        ensure!(
            before.code == code::NO_PERMISSION,
            "before the change: {} {:?}",
            before.code,
            before.remark
        );
        std::fs::write(
            &acl_file,
            plain_acl("      - AclTopic=PUB\n      - Later=PUB\n"),
        )?;
        let started = tokio::time::Instant::now();
        let mut served = None;
        // The node polls the file every 2 s; wait on the same connection for the new rights.
        while started.elapsed() < Duration::from_secs(15) {
            let after = conn.call(signed("Later")).await?;
            if after.code == code::SUCCESS {
                served = Some(started.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        ensure!(
            served.is_some(),
            "the changed acl file was not applied within 15 s"
        );
        Ok::<_, anyhow::Error>(())
    })?;
    let log = std::fs::read_to_string(dir.path().join("serve.log"))?;
    ensure!(
        log.lines().any(|l| l.contains("acl reloaded")),
        "no reload in the log"
    );
    ensure!(!log.contains("12345678"), "the secret key reached the log");
    Ok(())
}
