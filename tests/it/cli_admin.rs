//! `skiff admin` as a user runs it: the built binary against a `skiff serve` child, checking
//! stdout, stderr and the exit code. Groups are created, changed and deleted; the name server
//! comes from NAMESRV_ADDR or ./skiff.toml when no flag names it; every verb's `--json` parses,
//! with numbers as numbers; a missing topic or group, a refusal and a change that would hide
//! messages exit 1 with a message saying so.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use serde_json::Value;
use skiff::remoting::codes::{request as rc, response as code, version};
use skiff::testsuite::{heartbeat, request, send_v2, RawConn};

const TOPIC: &str = "CliTopic";
const GROUP: &str = "CliGroup";

/// A `skiff serve` child on a free loopback port and a directory to run `skiff admin` in.
struct Setup {
    _serve: common::ServeChild,
    _dir: tempfile::TempDir,
    /// Empty: no skiff.toml for `skiff admin` to find.
    workdir: PathBuf,
    addr: String,
}

impl Setup {
    fn start(skiff_toml: Option<&str>) -> anyhow::Result<Setup> {
        let dir = tempfile::tempdir()?;
        if let Some(toml) = skiff_toml {
            std::fs::write(dir.path().join("skiff.toml"), toml)?;
        }
        let workdir = dir.path().join("work");
        std::fs::create_dir(&workdir)?;
        let addr = format!("127.0.0.1:{}", common::free_port()?);
        let serve = common::spawn_serve(
            dir.path(),
            &addr,
            &[
                ("SKIFF_METRICS_LISTEN", "off".to_owned()),
                ("SKIFF_GRPC_LISTEN", "off".to_owned()),
            ],
        )?;
        let setup = Setup {
            _serve: serve,
            _dir: dir,
            workdir,
            addr,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Err(e) = std::net::TcpStream::connect(&setup.addr) {
            ensure!(
                Instant::now() < deadline,
                "skiff serve did not listen on {}: {e}",
                setup.addr
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(setup)
    }

    /// `skiff admin --namesrv <addr> args...`, without NAMESRV_ADDR, in the empty directory.
    fn run(&self, args: &[&str]) -> anyhow::Result<Output> {
        admin(&self.workdir, Some(&self.addr), None, args)
    }

    /// Stdout of a command that must succeed.
    fn ok(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.run(args)?;
        ensure!(
            out.status.code() == Some(0),
            "skiff admin {args:?}: {:?}, stderr {}",
            out.status,
            text(&out.stderr)
        );
        Ok(text(&out.stdout))
    }

    /// Stderr of a command that must fail with exit code 1 and print nothing on stdout.
    fn fails(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.run(args)?;
        ensure!(
            out.status.code() == Some(1) && out.stdout.is_empty(),
            "skiff admin {args:?} should fail: {:?}, stdout {}",
            out.status,
            text(&out.stdout)
        );
        Ok(text(&out.stderr))
    }

    fn json(&self, args: &[&str]) -> anyhow::Result<Value> {
        let mut with_json = vec!["--json"];
        with_json.extend_from_slice(args);
        let out = self.ok(&with_json)?;
        serde_json::from_str(&out).with_context(|| format!("skiff admin {args:?}: {out}"))
    }

    async fn send(&self, conn: &mut RawConn, queue_id: i32, keys: &str) -> anyhow::Result<()> {
        let send = send_v2(TOPIC, "hello")
            .queue(queue_id)
            .properties(format!("KEYS\u{1}{keys}\u{2}"))
            .build();
        let answer = conn.call(send).await?;
        ensure!(answer.code == code::SUCCESS, "send: {answer:?}");
        Ok(())
    }
}

fn admin(
    workdir: &Path,
    namesrv: Option<&str>,
    namesrv_env: Option<&str>,
    args: &[&str],
) -> anyhow::Result<Output> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_skiff"));
    command.arg("admin");
    if let Some(addr) = namesrv {
        command.args(["--namesrv", addr]);
    }
    command
        .args(args)
        .current_dir(workdir)
        .env_remove("NAMESRV_ADDR");
    if let Some(value) = namesrv_env {
        command.env("NAMESRV_ADDR", value);
    }
    command.output().context("running skiff admin")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The object of `array` whose `key` is `value`.
fn find<'a>(array: &'a Value, key: &str, value: &str) -> anyhow::Result<&'a Value> {
    array
        .as_array()
        .and_then(|items| items.iter().find(|item| item[key] == value))
        .with_context(|| format!("no {key} {value} in {array}"))
}

fn number(value: &Value) -> anyhow::Result<i64> {
    value
        .as_i64()
        .with_context(|| format!("{value} is not a JSON number"))
}

#[test]
fn cli_groups_are_created_changed_and_deleted_and_a_missing_one_is_an_error() -> anyhow::Result<()>
{
    let s = Setup::start(None)?;
    s.ok(&[
        "group",
        "create",
        GROUP,
        "--retry-max-times",
        "3",
        "--consume-message-orderly",
        "true",
    ])?;
    let group = find(&s.json(&["groups"])?, "group", GROUP)?.clone();
    ensure!(number(&group["retry_max_times"])? == 3, "{group}");
    ensure!(number(&group["retry_queue_nums"])? == 1, "{group}");
    ensure!(group["consume_message_orderly"] == true, "{group}");
    let again = s.fails(&["group", "create", GROUP])?;
    ensure!(again.contains("exists already"), "{again}");

    let updated = s.json(&["group", "update", GROUP, "--retry-queue-nums", "2"])?;
    ensure!(
        number(&updated["settings"]["retry_queue_nums"])? == 2,
        "{updated}"
    );
    let group = find(&s.json(&["groups"])?, "group", GROUP)?.clone();
    ensure!(
        number(&group["retry_queue_nums"])? == 2 && number(&group["retry_max_times"])? == 3,
        "update changes only what it is given: {group}"
    );
    let nothing = s.fails(&["group", "update", GROUP])?;
    ensure!(nothing.contains("nothing to change"), "{nothing}");
    let missing = s.fails(&["group", "update", "NoSuchGroup", "--retry-max-times", "1"])?;
    ensure!(
        missing.contains("consumer group NoSuchGroup does not exist"),
        "{missing}"
    );
    // skiff's broker keeps no consumeEnable: the command says so instead of claiming success.
    let lost = s.fails(&["group", "update", GROUP, "--consume-enable", "false"])?;
    ensure!(lost.contains("did not keep consume_enable=false"), "{lost}");

    // The columns name settings, not how the members consume.
    let table = s.ok(&["groups"])?;
    let headers: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split("  ")
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    ensure!(
        headers.contains(&"BROADCAST ALLOWED")
            && headers.contains(&"ORDERLY (POP/GRPC)")
            && !headers.contains(&"BROADCAST")
            && !headers.contains(&"ORDERLY"),
        "{table}"
    );
    s.ok(&["group", "delete", GROUP])?;
    ensure!(
        find(&s.json(&["groups"])?, "group", GROUP).is_err(),
        "deleted, yet listed"
    );
    let gone = s.fails(&["group", "delete", GROUP])?;
    ensure!(
        gone.contains(&format!("consumer group {GROUP} does not exist")),
        "{gone}"
    );
    let progress = s.fails(&["progress", "NoSuchGroup"])?;
    ensure!(
        progress.contains("consumer group NoSuchGroup does not exist"),
        "{progress}"
    );
    Ok(())
}

#[test]
fn cli_the_name_server_comes_from_the_flag_then_namesrv_addr_then_skiff_toml() -> anyhow::Result<()>
{
    let s = Setup::start(None)?;
    let closed = format!("127.0.0.1:{}", common::free_port()?);
    let from_env = admin(&s.workdir, None, Some(&s.addr), &["cluster"])?;
    ensure!(from_env.status.success(), "{}", text(&from_env.stderr));
    ensure!(text(&from_env.stdout).contains(&s.addr));
    // The flag wins over the variable.
    let flag = admin(&s.workdir, Some(&s.addr), Some(&closed), &["cluster"])?;
    ensure!(flag.status.success(), "{}", text(&flag.stderr));
    let unreachable = admin(&s.workdir, None, Some(&closed), &["cluster"])?;
    ensure!(unreachable.status.code() == Some(1));
    let stderr = text(&unreachable.stderr);
    ensure!(
        stderr.contains(&closed) && stderr.contains("from NAMESRV_ADDR"),
        "{stderr}"
    );
    // Then the listen address of ./skiff.toml, a wildcard one dialled on loopback.
    let port = s.addr.rsplit(':').next().context("a port")?;
    let confdir = tempfile::tempdir()?;
    std::fs::write(
        confdir.path().join("skiff.toml"),
        format!("listen = \"0.0.0.0:{port}\"\n"),
    )?;
    let from_file = admin(confdir.path(), None, None, &["cluster"])?;
    ensure!(from_file.status.success(), "{}", text(&from_file.stderr));
    let help = admin(confdir.path(), None, None, &["--help"])?;
    ensure!(
        text(&help.stdout).contains("here: the listen address of ./skiff.toml"),
        "{}",
        text(&help.stdout)
    );
    Ok(())
}

#[test]
fn cli_every_verb_prints_json_with_numbers_as_numbers() -> anyhow::Result<()> {
    let s = Setup::start(None)?;
    let created = s.json(&["topic", "create", TOPIC, "--queues", "2"])?;
    ensure!(number(&created["queues"])? == 2, "{created}");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Kept open while the verbs run: the consumer stays online for `connections`.
    let mut conn = runtime.block_on(RawConn::connect(&s.addr))?;
    runtime.block_on(async {
        for queue_id in [0, 1, 1] {
            s.send(&mut conn, queue_id, "order-7").await?;
        }
        let beat = format!(
            r#"{{"clientID":"10.0.0.9@cli","consumerDataSet":[{{"groupName":"{GROUP}","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{{"topic":"{TOPIC}","subString":"*","expressionType":"TAG"}}]}}],"producerDataSet":[]}}"#
        );
        ensure!(conn.call(heartbeat(&beat)).await?.code == code::SUCCESS);
        let commit = request(
            rc::UPDATE_CONSUMER_OFFSET,
            &[
                ("consumerGroup", GROUP),
                ("topic", TOPIC),
                ("queueId", "1"),
                ("commitOffset", "1"),
            ],
        );
        ensure!(conn.call(commit).await?.code == code::SUCCESS);
        anyhow::Ok(())
    })?;

    let topics = s.json(&["topics"])?;
    let topic = find(&topics, "topic", TOPIC)?;
    ensure!(
        number(&topic["read_queues"])? == 2 && topic["perm"] == "RW-",
        "{topic}"
    );
    let status = s.json(&["topic", "status", TOPIC])?;
    let status1 = status
        .as_array()
        .and_then(|a| a.iter().find(|q| q["queue_id"] == 1))
        .context("queue 1 in topic status")?;
    ensure!(number(&status1["max_offset"])? == 2, "{status}");
    ensure!(s.json(&["topic-status", TOPIC])? == status);
    let progress = s.json(&["progress", GROUP])?;
    ensure!(number(&progress["total_lag"])? == 2, "{progress}");
    let queue1 = progress["queues"]
        .as_array()
        .and_then(|q| q.iter().find(|r| r["queue_id"] == 1))
        .context("queue 1 in progress")?;
    ensure!(number(&queue1["lag"])? == 1 && number(&queue1["consumer_offset"])? == 1);
    ensure!(!s.ok(&["progress", GROUP])?.contains("tps"));
    let connections = s.json(&["connections", GROUP])?;
    // The version's name, as `cluster` prints it, not its ordinal.
    ensure!(
        connections["connections"][0]["version"] == version::desc(version::CURRENT),
        "{connections}"
    );
    let cluster = s.json(&["cluster"])?;
    ensure!(number(&cluster[0]["messages_put"])? >= 3, "{cluster}");
    ensure!(number(&cluster[0]["broker_id"])? == 0, "{cluster}");
    let found = s.json(&["query", TOPIC, "order-7"])?;
    ensure!(found.as_array().map(Vec::len) == Some(3), "{found}");
    let offset_id = found[0]["offset_msg_id"].as_str().context("an offset id")?;
    let message = s.json(&["message", offset_id])?;
    ensure!(number(&message[0]["queue_offset"]).is_ok(), "{message}");
    let reset = s.json(&["reset-offset", GROUP, TOPIC, "--to-time", "0"])?;
    ensure!(number(&reset["queues"][0]["offset"])? == 0, "{reset}");
    let groups = s.json(&["groups"])?;
    ensure!(number(&find(&groups, "group", GROUP)?["retry_max_times"])? == 16);
    let updated = s.json(&["topic", "update", TOPIC, "--perm", "r"])?;
    ensure!(
        number(&updated["brokers"][0]["read_queues"])? == 2,
        "{updated}"
    );
    ensure!(updated["brokers"][0]["perm"] == "R--", "{updated}");
    let deleted = s.json(&["topic", "delete", TOPIC])?;
    ensure!(deleted["topic"] == TOPIC, "{deleted}");
    drop(conn);
    Ok(())
}

#[test]
fn cli_missing_topics_refusals_and_hiding_changes_exit_1() -> anyhow::Result<()> {
    let s = Setup::start(Some(
        "[acl]\n[[acl.accounts]]\naccess_key = \"root\"\nsecret_key = \"root-secret\"\nadmin = true\n",
    ))?;
    let signed = ["--access-key", "root", "--secret-key", "root-secret"];
    let with = |args: &[&str]| -> Vec<String> {
        signed.iter().chain(args).map(|a| (*a).to_owned()).collect()
    };
    let run = |args: &[&str]| {
        let owned = with(args);
        let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
        s.run(&refs)
    };
    let unsigned = s.fails(&["topics"])?;
    ensure!(unsigned.contains("refused the request"), "{unsigned}");

    for args in [
        &["topic", "delete", "NeverExisted"][..],
        &["topic", "status", "NeverExisted"],
        &["topic", "update", "NeverExisted", "--read-queues", "1"],
        &["query", "NeverExisted", "k"],
        &["reset-offset", GROUP, "NeverExisted", "--to-time", "now"],
    ] {
        let out = run(args)?;
        let stderr = text(&out.stderr);
        ensure!(
            out.status.code() == Some(1) && stderr.contains("topic NeverExisted does not exist"),
            "{args:?}: {:?} {stderr}",
            out.status
        );
    }
    let out = run(&["topics"])?;
    ensure!(
        out.status.success() && !text(&out.stdout).contains("NeverExisted"),
        "looking created nothing: {}",
        text(&out.stdout)
    );

    let out = run(&["topic", "create", TOPIC, "--queues", "4"])?;
    ensure!(out.status.success(), "{}", text(&out.stderr));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut conn = RawConn::connect(&s.addr).await?;
        let root = skiff::acl::signature::Credentials {
            access_key: "root".into(),
            secret_key: "root-secret".into(),
        };
        let mut send = send_v2(TOPIC, "kept").queue(3).build();
        skiff::acl::signature::sign_remoting(&mut send, &root);
        let answer = conn.call(send).await?;
        if answer.code != code::SUCCESS {
            bail!("send: {answer:?}");
        }
        anyhow::Ok(())
    })?;
    let out = run(&["topic", "update", TOPIC, "--read-queues", "2"])?;
    let stderr = text(&out.stderr);
    ensure!(
        out.status.code() == Some(1)
            && stderr.contains("1 stored messages in queues 3")
            && stderr.contains("--yes"),
        "{:?} {stderr}",
        out.status
    );
    let topics = run(&["--json", "topics"])?;
    let listed: Value = serde_json::from_slice(&topics.stdout)?;
    ensure!(
        number(&find(&listed, "topic", TOPIC)?["read_queues"])? == 4,
        "a refused update changes nothing"
    );
    let out = run(&["topic", "update", TOPIC, "--write-queues", "2"])?;
    ensure!(
        out.status.success(),
        "fewer write queues hide nothing: {}",
        text(&out.stderr)
    );
    let out = run(&["topic", "update", TOPIC, "--read-queues", "2", "--yes"])?;
    ensure!(out.status.success(), "{}", text(&out.stderr));
    ensure!(text(&out.stdout).contains("read queues 4 -> 2"));
    Ok(())
}

#[test]
fn cli_users_and_acls_are_made_listed_and_enforced_and_a_bad_entry_exits_1() -> anyhow::Result<()> {
    let s = Setup::start(Some(
        "[acl]\n[[acl.accounts]]\naccess_key = \"root\"\nsecret_key = \"root-secret\"\nadmin = true\n",
    ))?;
    let as_user = |user: &str, secret: &str, args: &[&str]| {
        let mut all = vec!["--access-key", user, "--secret-key", secret];
        all.extend_from_slice(args);
        s.run(&all)
    };
    let root = |args: &[&str]| as_user("root", "root-secret", args);
    let out = root(&["user", "create", "carol", "--password", "carol-pw"])?;
    ensure!(out.status.success(), "{}", text(&out.stderr));
    let out = root(&[
        "acl",
        "set",
        "carol",
        "--resource",
        "Topic:Carol*",
        "--action",
        "Create",
        "--decision",
        "allow",
    ])?;
    ensure!(out.status.success(), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&root(&["--json", "user", "list"])?.stdout)?;
    let carol = find(&listed, "username", "carol")?;
    ensure!(
        carol["userType"] == "Normal" && carol.get("password").is_none(),
        "{listed}"
    );
    let out = root(&["acl", "list", "--user", "carol"])?;
    ensure!(
        text(&out.stdout).contains("Topic:Carol*") && text(&out.stdout).contains("Allow"),
        "{}",
        text(&out.stdout)
    );
    // carol may create what her entry allows and nothing else.
    let out = as_user(
        "carol",
        "carol-pw",
        &["topic", "create", "CarolTopic", "--queues", "1"],
    )?;
    ensure!(out.status.success(), "{}", text(&out.stderr));
    let out = as_user(
        "carol",
        "carol-pw",
        &["topic", "create", "Other", "--queues", "1"],
    )?;
    ensure!(
        out.status.code() == Some(1) && text(&out.stderr).contains("no matched policies"),
        "{}",
        text(&out.stderr)
    );
    let out = root(&[
        "acl",
        "set",
        "carol",
        "--resource",
        "Topic:x",
        "--action",
        "Any",
        "--decision",
        "allow",
    ])?;
    ensure!(
        out.status.code() == Some(1) && text(&out.stderr).contains("The actions can not be Any."),
        "{}",
        text(&out.stderr)
    );
    let out = root(&["user", "update", "carol", "--disable"])?;
    ensure!(out.status.success(), "{}", text(&out.stderr));
    let out = as_user(
        "carol",
        "carol-pw",
        &["topic", "create", "CarolTwo", "--queues", "1"],
    )?;
    ensure!(
        text(&out.stderr).contains("User:carol is disabled."),
        "{}",
        text(&out.stderr)
    );
    let out = root(&["user", "delete", "carol"])?;
    ensure!(out.status.success(), "{}", text(&out.stderr));
    let out = root(&["acl", "list"])?;
    ensure!(
        !text(&out.stdout).contains("carol"),
        "{}",
        text(&out.stdout)
    );
    Ok(())
}

#[test]
fn cli_lite_lists_a_parents_lite_topics_a_page_at_a_time_with_each_groups_lag() -> anyhow::Result<()>
{
    let s = Setup::start(None)?;
    s.ok(&[
        "topic",
        "create",
        "Chats",
        "--queues",
        "1",
        "--message-type",
        "lite",
    ])?;
    s.ok(&["topic", "create", "Plain", "--queues", "1"])?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut conn = RawConn::connect(&s.addr).await?;
        let group = request(rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, &[]).with_body(
            br#"{"groupName":"chat-readers","attributes":{"+lite.bind.topic":"Chats"}}"#.to_vec(),
        );
        ensure!(conn.call(group).await?.code == code::SUCCESS, "group");
        for (lite, count) in [("s1", 2), ("s2", 1), ("s3", 1)] {
            for i in 0..count {
                let send = send_v2("Chats", format!("{lite}-{i}"))
                    .properties(format!("__LITE_TOPIC\u{1}{lite}\u{2}"))
                    .build();
                let answer = conn.call(send).await?;
                ensure!(answer.code == code::SUCCESS, "send: {answer:?}");
            }
        }
        let commit = request(
            rc::UPDATE_CONSUMER_OFFSET,
            &[
                ("consumerGroup", "chat-readers"),
                ("topic", "%LMQ%$Chats$s1"),
                ("queueId", "0"),
                ("commitOffset", "1"),
            ],
        );
        ensure!(conn.call(commit).await?.code == code::SUCCESS, "commit");
        Ok(())
    })?;
    let first = s.ok(&["lite", "Chats", "--limit", "2"])?;
    let lines: Vec<&str> = first.lines().collect();
    ensure!(
        lines.len() == 4
            && lines[0].starts_with("LITE TOPIC")
            && lines[0].contains("LAG chat-readers")
            && lines[1].starts_with("s1 ")
            && lines[1].trim_end().ends_with(" 1")
            && lines[2].starts_with("s2 ")
            && lines[3] == "2 of 3 lite topics of Chats on skiff; next page: --after s2",
        "{first}"
    );
    let rest = s.json(&["lite", "Chats", "--after", "s2"])?;
    let page = &rest[0];
    ensure!(
        page["total"] == 3
            && page["lite_topics"].as_array().map(Vec::len) == Some(1)
            && page["lite_topics"][0]["lite_topic"] == "s3"
            && page["lite_topics"][0]["max_offset"] == 1
            && page["lite_topics"][0]["lag"]["chat-readers"] == 1
            && page["next_after"].is_null(),
        "{rest}"
    );
    let refused = s.fails(&["lite", "Plain"])?;
    ensure!(
        refused.contains("Topic [Plain] type not match."),
        "{refused}"
    );
    let missing = s.fails(&["lite", "Nope"])?;
    ensure!(missing.contains("Nope"), "{missing}");
    Ok(())
}
