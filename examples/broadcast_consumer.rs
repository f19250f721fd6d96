//! A broadcasting push consumer: every instance of the group receives every message; offsets
//! are kept locally (a sled tree in `--offsets-dir`), not on the broker. Ctrl-C shuts down
//! gracefully (final offsets persisted locally).
//!
//! ```sh
//! cargo run --example broadcast_consumer -- --group Bcast --topic TopicTest --offsets-dir ./bcast-a
//! cargo run --example broadcast_consumer -- --group Bcast --topic TopicTest --offsets-dir ./bcast-b
//! ```

mod support;

use clap::Parser;
use skiff::prelude::*;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(about = "Consume every message of a topic with skiff's broadcasting push consumer")]
struct Args {
    #[command(flatten)]
    connection: support::Connection,
    #[arg(long, default_value = "skiff-example-broadcast-group")]
    group: String,
    #[arg(long, default_value = "TopicTest")]
    topic: String,
    /// Tag expression: `*` or `TagA || TagB`.
    #[arg(long, default_value = "*")]
    expression: String,
    /// Where this instance keeps its offsets (one directory per instance).
    #[arg(long, default_value = "skiff-broadcast-offsets")]
    offsets_dir: PathBuf,
    /// Stop after this many messages (default: run until Ctrl-C).
    #[arg(long)]
    count: Option<usize>,
}

async fn run(args: Args) -> anyhow::Result<()> {
    let broker = args.connection.connect(None)?;
    let stop = support::Stop::after(args.count);
    let counter = stop.clone();
    let listener = Listener::concurrent(move |batch| {
        counter.consumed(batch.len());
        for message in &batch {
            println!(
                "queue {} offset {} tags {}: {}",
                message.queue.queue_id,
                message.queue_offset(),
                message.tags().unwrap_or("-"),
                String::from_utf8_lossy(message.body())
            );
        }
        async { ConsumeStatus::SUCCESS }
    });
    let offsets_dir = args.offsets_dir.clone();
    let consumer = PushConsumerBuilder::new(args.group.clone())
        .subscribe(args.topic.clone(), args.expression.clone())
        .message_model(MessageModel::Broadcasting)
        .consume_from(ConsumeFromWhere::FirstOffset)
        .configure(move |config| config.local_offset_dir = Some(offsets_dir))
        .listener(listener)
        .start(broker.clone())?;
    eprintln!(
        "broadcasting consumer {} of group {} consuming {} (offsets in {}); Ctrl-C to stop",
        consumer.client_id(),
        args.group,
        args.topic,
        args.offsets_dir.display()
    );
    stop.wait().await?;
    eprintln!("shutting down: persisting local offsets");
    consumer.shutdown().await?;
    broker.close();
    Ok(())
}

fn main() -> anyhow::Result<()> {
    support::init_logging();
    let args = Args::parse();
    actix_rt::System::new().block_on(run(args))
}
