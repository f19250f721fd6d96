//! Popped messages survive a SIGKILL of `skiff serve`: every message popped and not
//! acknowledged before the crash is delivered again after the restart (from the pop retry topic
//! once its invisible time passes, or popped afresh if the crash also took the offset), and no
//! message is lost. Acknowledged ones may come again only if the crash took the acknowledgement
//! (at least once), which the test reports but does not forbid.

use crate::common;
use skiff::testsuite;

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::ensure;
use common::{request, ServeChild};
use skiff::remoting::codes::{request as rc, response as code};
use skiff::remoting::frame::RemotingCommand;
use skiff::remoting::headers::{CustomHeader, PopMessageResponseHeader};
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

#[actix_rt::test]
async fn sigkill_with_popped_messages_out_loses_none_of_them() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let client = RemotingClient::new(ClientConfig::default());

    let mut server = spawn(dir.path(), &addr)?;
    common::wait_serving(&client, &addr, TOPIC).await?;
    for i in 0..MESSAGES {
        let answer = client
            .invoke(&addr, send(i), Duration::from_secs(5))
            .await?;
        ensure!(answer.code == code::SUCCESS, "send {i}: {answer:?}");
    }
    // Pop everything; acknowledge the even ones.
    let mut popped = BTreeSet::new();
    let mut acked = BTreeSet::new();
    while popped.len() < MESSAGES {
        let (messages, header) = pop_once(&client, &addr, 0).await?;
        ensure!(!messages.is_empty(), "only {} popped", popped.len());
        let header = header.expect("a pop with messages has a header");
        for m in messages {
            let name = body(&m);
            if name[1..].parse::<usize>()? % 2 == 0 {
                ack(&client, &addr, &header, &m).await?;
                acked.insert(name.clone());
            }
            popped.insert(name);
        }
    }
    server.0.kill()?;
    server.0.wait()?;
    client.close_connection(&addr);

    let _server = spawn(dir.path(), &addr)?;
    common::wait_serving(&client, &addr, TOPIC).await?;
    let unacked: BTreeSet<String> = popped.difference(&acked).cloned().collect();
    let mut again = BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !unacked.is_subset(&again) {
        ensure!(
            std::time::Instant::now() < deadline,
            "not delivered again after the restart: {:?}",
            unacked.difference(&again).collect::<Vec<_>>()
        );
        // A held pop: answered when a revival lands, or after its poll time.
        let (messages, header) = pop_once(&client, &addr, 5_000).await?;
        for m in messages {
            if let Some(header) = &header {
                if m.reconsume_times == 0 {
                    // Popped afresh (the crash took the offset): acknowledged like the rest.
                    ack(&client, &addr, header, &m).await?;
                }
            }
            again.insert(body(&m));
        }
    }
    let acked_again: Vec<&String> = again.intersection(&acked).collect();
    eprintln!(
        "after the restart: {} unacked delivered again, {} acked delivered again",
        unacked.len(),
        acked_again.len()
    );
    Ok(())
}
