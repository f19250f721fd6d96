//! Popped messages survive a SIGKILL of `skiff serve`: every message popped and not
//! acknowledged before the crash is delivered again after the restart, and no message is lost.
//! Within the checkpoint window (checkpoints still in memory) they are popped afresh, and
//! acknowledged ones behind them may come too, which the first test reports but does not forbid.
//! After the window, with the offsets flushed, the second test holds skiff to its promise
//! (`docs/offset-lifecycle.md` §1.H): only the unacknowledged come back, revived, and no
//! acknowledged message comes again.

use crate::common;
use skiff::testsuite;

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::ensure;
use common::{request, ServeChild};
use skiff::remoting::codes::{request as rc, response as code};
use skiff::remoting::frame::RemotingCommand;
use skiff::remoting::headers::{
    CustomHeader, OffsetResponseHeader, PopMessageResponseHeader, QueryConsumerOffsetRequestHeader,
};
use skiff::remoting::{ClientConfig, RemotingClient};
use skiff::storage::message::{decode_records, StoredMessage};

const TOPIC: &str = "PopCrash";
const GROUP: &str = "pop-crash-group";
const MESSAGES: usize = 40;
/// Short, so revivals after the restart come quickly.
const INVISIBLE_MS: u64 = 2000;

fn spawn(data_dir: &std::path::Path, listen: &str) -> anyhow::Result<ServeChild> {
    common::spawn_serve(data_dir, listen, &[])
}

/// Checkpoints written 200 ms after a pop, offsets flushed every 200 ms.
fn spawn_short_window(data_dir: &std::path::Path, listen: &str) -> anyhow::Result<ServeChild> {
    common::spawn_serve(
        data_dir,
        listen,
        &[
            ("SKIFF_POP_CHECKPOINT_WINDOW_MS", "200".to_owned()),
            ("SKIFF_FLUSH_CONSUMER_OFFSET_INTERVAL_MS", "200".to_owned()),
        ],
    )
}

/// The group's stored offset of one queue.
async fn stored_offset(
    client: &RemotingClient,
    addr: &str,
    queue_id: i32,
) -> anyhow::Result<Option<i64>> {
    let query = RemotingCommand::new_request(rc::QUERY_CONSUMER_OFFSET).with_ext_fields(
        QueryConsumerOffsetRequestHeader {
            consumer_group: GROUP.to_owned(),
            topic: TOPIC.to_owned(),
            queue_id,
            set_zero_if_not_found: Some(false),
        }
        .to_ext(),
    );
    let answer = client.invoke(addr, query, Duration::from_secs(5)).await?;
    match answer.code {
        code::SUCCESS => Ok(Some(OffsetResponseHeader::from_command(&answer)?.offset)),
        code::QUERY_NOT_FOUND => Ok(None),
        other => anyhow::bail!("QUERY_CONSUMER_OFFSET answered {other} {:?}", answer.remark),
    }
}

fn send(i: usize) -> RemotingCommand {
    testsuite::send_v2(TOPIC, format!("m{i:02}"))
        .queue((i % 4) as i32)
        .build()
}

fn pop(poll_ms: u64) -> RemotingCommand {
    testsuite::pop(GROUP, TOPIC)
        .invisible_ms(INVISIBLE_MS)
        .poll_ms(poll_ms)
        .build()
}

/// Pops once: the messages and the answer's header.
async fn pop_once(
    client: &RemotingClient,
    addr: &str,
    poll_ms: u64,
) -> anyhow::Result<(Vec<StoredMessage>, Option<PopMessageResponseHeader>)> {
    let answer = client
        .invoke(addr, pop(poll_ms), Duration::from_secs(30))
        .await?;
    if answer.code == code::POLLING_TIMEOUT {
        return Ok((Vec::new(), None));
    }
    ensure!(answer.code == code::SUCCESS, "pop: {answer:?}");
    let header = PopMessageResponseHeader::from_command(&answer)?;
    Ok((decode_records(answer.body.clone())?, Some(header)))
}

fn body(message: &StoredMessage) -> String {
    String::from_utf8_lossy(&message.body).into_owned()
}

async fn ack(
    client: &RemotingClient,
    addr: &str,
    header: &PopMessageResponseHeader,
    message: &StoredMessage,
) -> anyhow::Result<()> {
    let receipt = format!(
        "0 {} {} {} 0 skiff {} {}",
        header.pop_time,
        header.invisible_time,
        header.revive_qid,
        message.queue_id,
        message.queue_offset
    );
    let answer = client
        .invoke(
            addr,
            request(
                rc::ACK_MESSAGE,
                &[
                    ("consumerGroup", GROUP),
                    ("topic", TOPIC),
                    ("queueId", &message.queue_id.to_string()),
                    ("extraInfo", &receipt),
                    ("offset", &message.queue_offset.to_string()),
                ],
            ),
            Duration::from_secs(5),
        )
        .await?;
    ensure!(answer.code == code::SUCCESS, "ack: {answer:?}");
    Ok(())
}

/// Sends the messages (queue = number mod 4), pops them all and acknowledges the even ones (all
/// of queues 0 and 2, none of 1 and 3): answers the names popped and acknowledged.
async fn send_pop_and_ack_the_even_ones(
    client: &RemotingClient,
    addr: &str,
) -> anyhow::Result<(BTreeSet<String>, BTreeSet<String>)> {
    common::wait_serving(client, addr, TOPIC).await?;
    for i in 0..MESSAGES {
        let answer = client.invoke(addr, send(i), Duration::from_secs(5)).await?;
        ensure!(answer.code == code::SUCCESS, "send {i}: {answer:?}");
    }
    // Pop everything; acknowledge the even ones.
    let mut popped = BTreeSet::new();
    let mut acked = BTreeSet::new();
    while popped.len() < MESSAGES {
        let (messages, header) = pop_once(client, addr, 0).await?;
        ensure!(!messages.is_empty(), "only {} popped", popped.len());
        let header = header.expect("a pop with messages has a header");
        for m in messages {
            let name = body(&m);
            if name[1..].parse::<usize>()? % 2 == 0 {
                ack(client, addr, &header, &m).await?;
                acked.insert(name.clone());
            }
            popped.insert(name);
        }
    }
    Ok((popped, acked))
}

/// A server on a free loopback port, started by `spawn`.
struct Crashing {
    dir: tempfile::TempDir,
    addr: String,
    client: RemotingClient,
    server: ServeChild,
    spawn: fn(&std::path::Path, &str) -> anyhow::Result<ServeChild>,
}

impl Crashing {
    fn start(
        spawn: fn(&std::path::Path, &str) -> anyhow::Result<ServeChild>,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let addr = format!("127.0.0.1:{port}");
        let server = spawn(dir.path(), &addr)?;
        Ok(Crashing {
            dir,
            addr,
            client: RemotingClient::new(ClientConfig::default()),
            server,
            spawn,
        })
    }

    /// SIGKILL, then a new server on the same directory, serving.
    async fn crash_and_restart(&mut self) -> anyhow::Result<()> {
        self.server.0.kill()?;
        self.server.0.wait()?;
        self.client.close_connection(&self.addr);
        self.server = (self.spawn)(self.dir.path(), &self.addr)?;
        common::wait_serving(&self.client, &self.addr, TOPIC).await
    }

    /// Pops (each held up to 5 s for a revival) until every message of `expected` came again,
    /// within a minute: answers every message popped meanwhile.
    async fn pop_until_again(
        &self,
        expected: &BTreeSet<String>,
    ) -> anyhow::Result<Vec<StoredMessage>> {
        let mut again = Vec::new();
        let mut seen = BTreeSet::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !expected.is_subset(&seen) {
            ensure!(
                std::time::Instant::now() < deadline,
                "not delivered again after the restart: {:?}",
                expected.difference(&seen).collect::<Vec<_>>()
            );
            let (messages, _) = pop_once(&self.client, &self.addr, 5_000).await?;
            seen.extend(messages.iter().map(body));
            again.extend(messages);
        }
        Ok(again)
    }
}

#[actix_rt::test]
async fn sigkill_with_popped_messages_out_loses_none_of_them() -> anyhow::Result<()> {
    let mut node = Crashing::start(spawn)?;
    let (popped, acked) = send_pop_and_ack_the_even_ones(&node.client, &node.addr).await?;
    node.crash_and_restart().await?;
    let unacked: BTreeSet<String> = popped.difference(&acked).cloned().collect();
    // Within the window: popped afresh (the stored offsets stayed behind them), or revived.
    let again: BTreeSet<String> = node
        .pop_until_again(&unacked)
        .await?
        .iter()
        .map(body)
        .collect();
    let acked_again: Vec<&String> = again.intersection(&acked).collect();
    eprintln!(
        "after the restart: {} unacked delivered again, {} acked delivered again",
        unacked.len(),
        acked_again.len()
    );
    Ok(())
}

#[actix_rt::test]
async fn sigkill_after_the_window_brings_back_only_what_was_not_acknowledged() -> anyhow::Result<()>
{
    let mut node = Crashing::start(spawn_short_window)?;
    let (popped, acked) = send_pop_and_ack_the_even_ones(&node.client, &node.addr).await?;
    // Queues 1 and 3 hold only unacknowledged messages: their stored offsets move past them
    // only once their checkpoints are written, a window after the pop.
    let per_queue = (MESSAGES / 4) as i64;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for queue_id in 0..4 {
        while stored_offset(&node.client, &node.addr, queue_id).await? != Some(per_queue) {
            ensure!(
                std::time::Instant::now() < deadline,
                "queue {queue_id}'s offset never reached {per_queue}"
            );
            tokio::task::yield_now().await;
        }
    }
    // The promise is about time: what was committed this long before a crash is on disk, the
    // offsets being flushed every 200 ms (five intervals here).
    tokio::time::sleep(Duration::from_secs(1)).await;
    node.crash_and_restart().await?;
    let unacked: BTreeSet<String> = popped.difference(&acked).cloned().collect();
    let mut again = node.pop_until_again(&unacked).await?;
    let (rest, _) = pop_once(&node.client, &node.addr, 0).await?;
    again.extend(rest);
    for m in &again {
        ensure!(
            m.reconsume_times >= 1,
            "{} came back popped afresh: its queue's offset was lost",
            body(m)
        );
    }
    let acked_again: Vec<String> = again
        .iter()
        .map(body)
        .filter(|b| acked.contains(b))
        .collect();
    ensure!(
        acked_again.is_empty(),
        "acknowledged before the window delivered again: {acked_again:?}"
    );
    Ok(())
}
