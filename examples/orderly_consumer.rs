//! An orderly push consumer: each queue is locked on the broker and consumed one batch at a
//! time, so the messages of one order (sent to one queue by `producer --orderly`) arrive in
//! order. Ctrl-C shuts down gracefully.
//!
//! ```sh
//! cargo run --example producer -- --topic OrderTopic --count 40 --orderly
//! cargo run --example orderly_consumer -- --group OrderGroup --topic OrderTopic
//! ```

mod support;

use clap::Parser;
use skiff::prelude::*;

#[derive(Parser, Debug)]
#[command(about = "Consume a topic in order per queue with skiff's orderly push consumer")]
struct Args {
    #[command(flatten)]
    connection: support::Connection,
    #[arg(long, default_value = "skiff-example-orderly-group")]
    group: String,
    #[arg(long, default_value = "OrderTopic")]
    topic: String,
    /// Tag expression: `*` or `TagA || TagB`.
    #[arg(long, default_value = "*")]
    expression: String,
    /// Stop after this many messages (default: run until Ctrl-C).
    #[arg(long)]
    count: Option<usize>,
}

async fn run(args: Args) -> anyhow::Result<()> {
    let broker = args.connection.connect(None)?;
    let stop = support::Stop::after(args.count);
    let counter = stop.clone();
    let listener = Listener::orderly(move |batch| {
        counter.consumed(batch.len());
        for message in &batch {
            println!(
                "queue {} offset {} keys {}: {}",
                message.queue.queue_id,
                message.queue_offset(),
                message.keys().unwrap_or("-"),
                String::from_utf8_lossy(message.body())
            );
        }
        async { OrderlyStatus::Success }
    });
    let consumer = PushConsumerBuilder::new(args.group.clone())
        .subscribe(args.topic.clone(), args.expression.clone())
        .consume_from(ConsumeFromWhere::FirstOffset)
        .listener(listener)
        .start(broker.clone())?;
    eprintln!(
        "orderly consumer {} of group {} consuming {}; Ctrl-C to stop",
        consumer.client_id(),
        args.group,
        args.topic
    );
    stop.wait().await?;
    eprintln!("shutting down: unlocking queues and committing offsets");
    consumer.shutdown().await?;
    broker.close();
    Ok(())
}

fn main() -> anyhow::Result<()> {
    support::init_logging();
    let args = Args::parse();
    actix_rt::System::new().block_on(run(args))
}
