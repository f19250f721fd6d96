//! A concurrent push consumer (clustering): skiff's consumer actors over TCP (`RemoteBroker`).
//! Prints every message; Ctrl-C shuts down gracefully (queues handed off, offsets committed
//! with acknowledged updates, client unregistered).
//!
//! ```sh
//! cargo run --example push_consumer -- --group G --topic TopicTest --expression 'TagA || TagB'
//! cargo run --example push_consumer -- --group G --topic TopicTest --sql92 "a > 5 AND TAGS = 'TagA'"
//! ```

mod support;

use clap::Parser;
use skiff::prelude::*;

#[derive(Parser, Debug)]
#[command(about = "Consume a topic with skiff's concurrent push consumer")]
struct Args {
    #[command(flatten)]
    connection: support::Connection,
    #[arg(long, default_value = "skiff-example-group")]
    group: String,
    #[arg(long, default_value = "TopicTest")]
    topic: String,
    /// Tag expression: `*` or `TagA || TagB`.
    #[arg(long, default_value = "*")]
    expression: String,
    /// A SQL92 selector over message properties and TAGS instead of the tag expression, such as
    /// `a > 5 AND TAGS IN ('TagA')`.
    #[arg(long)]
    sql92: Option<String>,
    /// Where a group without offsets starts: `first`, `last` or epoch milliseconds.
    #[arg(long, default_value = "first")]
    from: String,
    /// Stop after this many messages (default: run until Ctrl-C).
    #[arg(long)]
    count: Option<usize>,
}

fn consume_from(value: &str) -> anyhow::Result<ConsumeFromWhere> {
    Ok(match value {
        "first" => ConsumeFromWhere::FirstOffset,
        "last" => ConsumeFromWhere::LastOffset,
        ms => ConsumeFromWhere::Timestamp(
            ms.parse()
                .map_err(|_| anyhow::anyhow!("--from takes first, last or epoch milliseconds"))?,
        ),
    })
}

async fn run(args: Args) -> anyhow::Result<()> {
    let broker = args.connection.connect(None)?;
    let stop = support::Stop::after(args.count);
    let counter = stop.clone();
    let listener = Listener::concurrent(move |batch| {
        counter.consumed(batch.len());
        for message in &batch {
            println!(
                "{} queue {} offset {} msgId {} tags {} reconsume {}: {}",
                message.queue.topic,
                message.queue.queue_id,
                message.queue_offset(),
                message.msg_id(),
                message.tags().unwrap_or("-"),
                message.reconsume_times(),
                String::from_utf8_lossy(message.body())
            );
        }
        async { ConsumeStatus::SUCCESS }
    });
    let builder = PushConsumerBuilder::new(args.group.clone());
    let (builder, filter) = match &args.sql92 {
        Some(selector) => (
            builder.subscribe_sql92(args.topic.clone(), selector.clone()),
            selector,
        ),
        None => (
            builder.subscribe(args.topic.clone(), args.expression.clone()),
            &args.expression,
        ),
    };
    let consumer = builder
        .consume_from(consume_from(&args.from)?)
        .listener(listener)
        .start(broker.clone())?;
    eprintln!(
        "consumer {} of group {} consuming {} ({}); Ctrl-C to stop",
        consumer.client_id(),
        args.group,
        args.topic,
        filter
    );
    stop.wait().await?;
    eprintln!("shutting down: handing queues off and committing offsets");
    consumer.shutdown().await?;
    broker.close();
    Ok(())
}

fn main() -> anyhow::Result<()> {
    support::init_logging();
    let args = Args::parse();
    actix_rt::System::new().block_on(run(args))
}
