//! Produces, consumes with a group, stops, restarts and shows that consumption resumes from the
//! committed offset.
//!
//! ```sh
//! cargo run --example quickstart            # data in a fresh temporary directory
//! cargo run --example quickstart -- ./data  # or in a directory of your choice
//! ```

use skiff::prelude::*;
use std::path::Path;
use std::time::Duration;

const TOPIC: &str = "QuickstartTopic";
const GROUP: &str = "quickstart-group";

/// Consumes until `expected` new messages arrived; returns their bodies.
async fn consume(node: &Node, expected: usize) -> anyhow::Result<Vec<String>> {
    let (deliver, mut inbox) = tokio::sync::mpsc::unbounded_channel();
    let listener = Listener::concurrent(move |batch| {
        for message in &batch {
            let _ = deliver.send(String::from_utf8_lossy(message.body()).into_owned());
        }
        async { ConsumeStatus::SUCCESS }
    });
    let consumer = node.start_consumer(
        node.push_consumer(GROUP)
            .subscribe(TOPIC, "*")
            .consume_from(ConsumeFromWhere::FirstOffset)
            .listener(listener),
    )?;
    let mut bodies = Vec::new();
    while bodies.len() < expected {
        match tokio::time::timeout(Duration::from_secs(30), inbox.recv()).await {
            Ok(Some(body)) => bodies.push(body),
            _ => anyhow::bail!("only {} of {expected} messages arrived", bodies.len()),
        }
    }
    // Graceful: the final offsets are persisted (acknowledged) before the queues are released.
    consumer.shutdown().await?;
    Ok(bodies)
}

async fn produce(node: &Node, from: usize, to: usize) -> anyhow::Result<()> {
    let producer = node.producer("quickstart-producer");
    let batch = (from..to)
        .map(|i| OutgoingMessage::new(TOPIC, format!("order-{i}")))
        .collect();
    producer.send_batch(batch).await?;
    Ok(())
}

async fn run(data_dir: &Path) -> anyhow::Result<()> {
    let node = Node::open(NodeConfig::in_dir(data_dir))?;
    produce(&node, 0, 10).await?;
    let first = consume(&node, 10).await?;
    println!("first run consumed {} messages: {first:?}", first.len());
    node.shutdown().await?;

    println!("restarting the node from {}", data_dir.display());
    let node = Node::open(NodeConfig::in_dir(data_dir))?;
    produce(&node, 10, 15).await?;
    let second = consume(&node, 5).await?;
    println!("second run consumed {} messages: {second:?}", second.len());
    anyhow::ensure!(
        second.iter().all(|body| !first.contains(body)),
        "the second run re-delivered something already committed"
    );
    println!("consumption resumed from the committed offset: nothing was re-delivered");
    for row in node.progress(GROUP).await? {
        println!(
            "{}:{} broker offset {} consumer offset {:?} lag {}",
            row.topic, row.queue_id, row.broker_offset, row.consumer_offset, row.lag
        );
    }
    node.shutdown().await?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let temp = tempfile::tempdir()?;
    let data_dir = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| temp.path().to_path_buf());
    actix_rt::System::new().block_on(run(&data_dir))
}
