//! Sends messages through skiff's producer over TCP (`RemoteBroker`), to `skiff serve` or a
//! RocketMQ name server + broker.
//!
//! ```sh
//! cargo run --example producer -- --topic TopicTest --count 10 --tags TagA
//! # orderly: every order's messages go to one queue (order id modulo the write queues)
//! cargo run --example producer -- --topic OrderTopic --count 40 --orderly --orders 4
//! ```

mod support;

use clap::Parser;
use skiff::prelude::*;

#[derive(Parser, Debug)]
#[command(about = "Send messages to a RocketMQ-compatible broker with skiff's producer")]
struct Args {
    #[command(flatten)]
    connection: support::Connection,
    #[arg(long, default_value = "TopicTest")]
    topic: String,
    /// Number of messages.
    #[arg(long, default_value_t = 10)]
    count: usize,
    /// Tag of every message (e.g. `TagA`).
    #[arg(long)]
    tags: Option<String>,
    /// Producer group.
    #[arg(long, default_value = "skiff-example-producer")]
    group: String,
    /// Orderly: message i belongs to order i % orders and goes to that order's queue.
    #[arg(long)]
    orderly: bool,
    /// Number of order ids with --orderly.
    #[arg(long, default_value_t = 4)]
    orders: usize,
}

async fn run(args: Args) -> anyhow::Result<()> {
    let broker = args.connection.connect(Some(&args.group))?;
    let producer = Producer::new(args.group.clone(), broker.clone());
    let queues = if args.orderly {
        producer.write_queues(&args.topic).await?
    } else {
        Vec::new()
    };
    for i in 0..args.count {
        let order = i % args.orders.max(1);
        let body = if args.orderly {
            format!("order-{order} step-{}", i / args.orders.max(1))
        } else {
            format!("message-{i}")
        };
        let mut message = OutgoingMessage::new(args.topic.clone(), body.clone());
        if let Some(tags) = &args.tags {
            message = message.with_tags(tags.clone());
        }
        let result = if args.orderly {
            message = message.with_keys(format!("order-{order}"));
            let queue = queues
                .get(order % queues.len().max(1))
                .ok_or_else(|| anyhow::anyhow!("topic {} has no write queue", args.topic))?;
            let mut sent = producer.send_to_queue(queue, vec![message]).await?;
            sent.pop()
                .ok_or_else(|| anyhow::anyhow!("the broker answered an empty send"))?
        } else {
            producer.send(message).await?
        };
        println!(
            "sent {body:?} to {}:{} offset {} msgId {}",
            args.topic, result.queue_id, result.queue_offset, result.offset_msg_id
        );
    }
    broker.close();
    Ok(())
}

fn main() -> anyhow::Result<()> {
    support::init_logging();
    let args = Args::parse();
    actix_rt::System::new().block_on(run(args))
}
