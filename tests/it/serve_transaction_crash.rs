//! Transactional half messages survive a SIGKILL of `skiff serve`: after the restart no
//! rolled-back message is ever delivered, every committed one is (once), and the halves that
//! were still pending are checked back with their producer, whose answers decide them.

use crate::common;
use skiff::testsuite;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, ensure, Context};
use common::{request, ServeChild};
use skiff::remoting::codes::{request as rc, response as code};
use skiff::remoting::frame::RemotingCommand;
use skiff::remoting::headers::{CheckTransactionStateRequestHeader, CustomHeader};
use skiff::remoting::{ClientConfig, RemotingClient};
use skiff::storage::message::decode_records;

const TOPIC: &str = "TxnCrash";
const GROUP: &str = "txn-crash-pg";
const HALVES: usize = 30;

/// `skiff serve` with a 1 s transaction timeout and this check interval.
fn spawn(data_dir: &Path, listen: &str, check_interval_ms: u64) -> anyhow::Result<ServeChild> {
    common::spawn_serve(
        data_dir,
        listen,
        &[
            ("SKIFF_TRANSACTION_TIMEOUT_MS", "1000".to_owned()),
            (
                "SKIFF_TRANSACTION_CHECK_INTERVAL_MS",
                check_interval_ms.to_string(),
            ),
        ],
    )
}

/// What the test decides for half `i`: ended before the crash (commit or rollback), or left
/// pending and decided by the check-back after the restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Commit,
    Rollback,
    CheckCommit,
    CheckRollback,
}

fn fate(i: usize) -> Fate {
    match i % 4 {
        0 => Fate::Commit,
        1 => Fate::Rollback,
        2 => Fate::CheckCommit,
        _ => Fate::CheckRollback,
    }
}

struct Half {
    queue_offset: String,
    commit_log_offset: u64,
    uniq: String,
}

async fn send_half(client: &RemotingClient, addr: &str, i: usize) -> anyhow::Result<Half> {
    let uniq = format!("TXNCRASH{i:04}");
    let props = format!(
        "TRAN_MSG\u{1}true\u{2}PGROUP\u{1}{GROUP}\u{2}UNIQ_KEY\u{1}{uniq}\u{2}WAIT\u{1}true\u{2}"
    );
    // Born a minute ago: old enough to be checked as soon as the restarted broker looks.
    let born = skiff::storage::clock::epoch_millis() - 60_000;
    let send = testsuite::send_v2(TOPIC, format!("body-{i}"))
        .producer_group(GROUP)
        .queue((i % 4) as i32)
        .sys_flag(4)
        .born_ms(born)
        .properties(props)
        .build();
    let answer = client.invoke(addr, send, Duration::from_secs(5)).await?;
    ensure!(answer.code == code::SUCCESS, "half {i} refused: {answer:?}");
    let msg_id = answer
        .ext_fields
        .get("msgId")
        .ok_or_else(|| anyhow!("no msgId"))?;
    let commit_log_offset = u64::from_str_radix(&msg_id[msg_id.len() - 16..], 16)?;
    let queue_offset = answer
        .ext_fields
        .get("queueOffset")
        .cloned()
        .ok_or_else(|| anyhow!("no queueOffset"))?;
    Ok(Half {
        queue_offset,
        commit_log_offset,
        uniq,
    })
}

fn end_transaction(
    queue_offset: &str,
    commit_log_offset: u64,
    uniq: &str,
    commit: bool,
    from_check: bool,
) -> RemotingCommand {
    request(
        rc::END_TRANSACTION,
        &[
            ("producerGroup", GROUP),
            ("tranStateTableOffset", queue_offset),
            ("commitLogOffset", &commit_log_offset.to_string()),
            ("commitOrRollback", if commit { "8" } else { "12" }),
            (
                "fromTransactionCheck",
                if from_check { "true" } else { "false" },
            ),
            ("msgId", uniq),
            ("transactionId", uniq),
        ],
    )
}

async fn delivered_bodies(client: &RemotingClient, addr: &str) -> anyhow::Result<Vec<String>> {
    let mut bodies = Vec::new();
    for queue_id in 0..4 {
        let pull = request(
            rc::PULL_MESSAGE,
            &[
                ("consumerGroup", "txn-crash-reader"),
                ("topic", TOPIC),
                ("queueId", &queue_id.to_string()),
                ("queueOffset", "0"),
                ("maxMsgNums", "32"),
                ("sysFlag", "4"),
                ("commitOffset", "0"),
                ("suspendTimeoutMillis", "0"),
                ("subscription", "*"),
                ("subVersion", "0"),
            ],
        );
        let answer = client.invoke(addr, pull, Duration::from_secs(5)).await?;
        if answer.code != code::SUCCESS {
            continue;
        }
        for record in decode_records(answer.body.clone())? {
            bodies.push(String::from_utf8_lossy(&record.body).into_owned());
        }
    }
    bodies.sort();
    Ok(bodies)
}

#[actix_rt::test]
async fn sigkill_with_halves_in_flight_delivers_every_commit_and_no_rollback() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let client = RemotingClient::new(ClientConfig::default());

    // First life: no check-back before the crash (the interval is far away).
    let mut server = spawn(dir.path(), &addr, 3_600_000)?;
    common::wait_serving(&client, &addr, TOPIC).await?;
    let mut halves = Vec::new();
    for i in 0..HALVES {
        halves.push(send_half(&client, &addr, i).await?);
    }
    for (i, half) in halves.iter().enumerate() {
        let commit = match fate(i) {
            Fate::Commit => true,
            Fate::Rollback => false,
            Fate::CheckCommit | Fate::CheckRollback => continue,
        };
        // Acknowledged (not oneway), so the test knows the broker took the decision.
        let end = end_transaction(
            &half.queue_offset,
            half.commit_log_offset,
            &half.uniq,
            commit,
            false,
        );
        let answer = client.invoke(&addr, end, Duration::from_secs(5)).await?;
        ensure!(
            answer.code == code::SUCCESS,
            "end of half {i} refused: {answer:?}"
        );
    }
    let before = delivered_bodies(&client, &addr).await?;
    server.0.kill()?;
    server.0.wait()?;
    client.close_connection(&addr);

    // Second life: check-backs every 200 ms, answered by a producer of the group.
    let _server = spawn(dir.path(), &addr, 200)?;
    common::wait_serving(&client, &addr, TOPIC).await?;
    let mut checks = client.request_channel(64);
    let heartbeat = RemotingCommand::new_request(rc::HEART_BEAT).with_body(
        format!(r#"{{"clientID":"txn-crash@1","producerDataSet":[{{"groupName":"{GROUP}"}}],"consumerDataSet":[]}}"#)
            .into_bytes(),
    );
    let answer = client
        .invoke(&addr, heartbeat, Duration::from_secs(5))
        .await?;
    ensure!(
        answer.code == code::SUCCESS,
        "heartbeat refused: {answer:?}"
    );

    let by_offset: BTreeMap<u64, usize> = halves
        .iter()
        .enumerate()
        .map(|(i, h)| (h.commit_log_offset, i))
        .collect();
    let mut checked = BTreeSet::new();
    let expected_checks: BTreeSet<usize> = (0..HALVES)
        .filter(|i| matches!(fate(*i), Fate::CheckCommit | Fate::CheckRollback))
        .collect();
    while checked != expected_checks {
        let inbound = tokio::time::timeout(Duration::from_secs(20), checks.recv())
            .await
            .context("the pending halves were not all checked back")?
            .ok_or_else(|| anyhow!("request channel closed"))?;
        ensure!(inbound.request.code == rc::CHECK_TRANSACTION_STATE);
        let header = CheckTransactionStateRequestHeader::from_command(&inbound.request)?;
        let offset = u64::try_from(header.commit_log_offset)?;
        let i = *by_offset
            .get(&offset)
            .ok_or_else(|| anyhow!("check of an unknown half at {offset}"))?;
        ensure!(
            expected_checks.contains(&i),
            "half {i} ({:?}) was ended before the crash, yet checked",
            fate(i)
        );
        let stored = decode_records(inbound.request.body.clone())?;
        ensure!(
            stored.len() == 1 && stored[0].topic == TOPIC,
            "check body names the real topic"
        );
        let end = end_transaction(
            &header.tran_state_table_offset.to_string(),
            offset,
            &halves[i].uniq,
            fate(i) == Fate::CheckCommit,
            true,
        );
        client
            .invoke_oneway(&addr, end, Duration::from_secs(5))
            .await?;
        checked.insert(i);
    }

    let mut expected: Vec<String> = (0..HALVES)
        .filter(|i| matches!(fate(*i), Fate::Commit | Fate::CheckCommit))
        .map(|i| format!("body-{i}"))
        .collect();
    expected.sort();
    let committed_before: Vec<String> = (0..HALVES)
        .filter(|i| fate(*i) == Fate::Commit)
        .map(|i| format!("body-{i}"))
        .collect();
    let mut committed_before_sorted = committed_before.clone();
    committed_before_sorted.sort();
    ensure!(
        before == committed_before_sorted,
        "before the crash: {before:?}"
    );
    // The last check answers were oneway: read until they are applied, within a bound.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut last = delivered_bodies(&client, &addr).await?;
    while last.len() < expected.len() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        last = delivered_bodies(&client, &addr).await?;
    }
    ensure!(
        last == expected,
        "delivered after the restart {last:?}, expected exactly {expected:?}"
    );
    Ok(())
}
