//! Pop consumption's cost next to pull, through the embedded node's broker handle (`flush`
//! async, the defaults otherwise). Each run opens a fresh node, stores `--messages` messages of
//! 100 bytes in 4 queues, then drains them with one consumer: batches of 32 by PULL with the
//! offset committed after each batch, or by POP (every queue, 60 s invisible) with each batch
//! acknowledged in one call, as a gRPC AckMessage or a remoting batch ack carries it (the
//! checkpoints stay in memory: acknowledged within the window, none is written). The modes
//! alternate run by run; the medians and their ratio are printed, and the median of each run's
//! own pop / pull ratio, which a machine whose speed drifts between runs moves less. Beside the
//! rates, the process's CPU time per message drained (every thread's: the broker's actors and
//! the store's), which does not count time the machine's other guests take from it. The node
//! runs on mimalloc, as `skiff serve` does.
//!
//! ```sh
//! cargo run --release --example pop_bench -- --messages 100000 --runs 5
//! ```

use clap::Parser;
use skiff::actors::broker::{AckRequest, BrokerHandle, ExpiredReceipt, PopRequest};
use skiff::actors::broker_api::{
    BrokerApi, ExpressionType, OffsetUpdate, PullRequest, PullStatus, SendRequest,
};
use skiff::actors::logic::queue::MessageQueue;
use skiff::prelude::*;
use skiff::storage::message::{decode_records, MessageToAppend};
use skiff::storage::store::FlushPolicy;
use std::time::{Duration, Instant};

// The allocator `skiff serve` runs with: the broker's costs as shipped.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TOPIC: &str = "PopBench";
const GROUP: &str = "pop-bench";
const QUEUES: u32 = 4;
const BATCH: u32 = 32;

#[derive(Parser, Debug)]
#[command(about = "Pop + ack vs pull + commit throughput through the embedded node")]
struct Args {
    /// Messages per run and mode.
    #[arg(long, default_value_t = 100_000)]
    messages: usize,
    /// Runs per mode (alternating).
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Pull,
    Pop,
}

async fn fill(broker: &BrokerHandle, messages: usize) -> anyhow::Result<()> {
    let template = MessageToAppend {
        topic: TOPIC.to_owned(),
        queue_id: 0,
        flag: 0,
        sys_flag: 0,
        born_timestamp: 0,
        born_host: "127.0.0.1:1".parse()?,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        properties: String::new(),
        body: vec![b'x'; 100].into(),
    };
    let mut sent = 0;
    while sent < messages {
        let batch: Vec<MessageToAppend> = (sent..messages.min(sent + 256))
            .map(|i| MessageToAppend {
                queue_id: i as u32 % QUEUES,
                ..template.clone()
            })
            .collect();
        sent += batch.len();
        BrokerApi::send_messages(broker, SendRequest::new(batch)).await?;
    }
    Ok(())
}

async fn drain_by_pull(broker: &BrokerHandle, messages: usize) -> anyhow::Result<usize> {
    let mut consumed = 0;
    for queue_id in 0..QUEUES {
        let mut offset = 0;
        loop {
            let response = broker
                .pull(PullRequest {
                    group: GROUP.into(),
                    topic: TOPIC.into(),
                    broker_name: broker.config().broker_name.clone(),
                    queue_id,
                    queue_offset: offset,
                    max_messages: BATCH,
                    commit_offset: None,
                    suspend_timeout: None,
                    subscription: Some("*".into()),
                    expression_type: ExpressionType::Tag,
                })
                .await?;
            if response.status != PullStatus::Found {
                break;
            }
            consumed += decode_records(response.records)?.len();
            offset = response.next_begin_offset;
            let queue = MessageQueue::new(TOPIC, &broker.config().broker_name, queue_id);
            broker
                .update_offset(GROUP, queue, offset, OffsetUpdate::Acknowledged)
                .await?;
        }
    }
    anyhow::ensure!(consumed == messages, "pulled {consumed} of {messages}");
    Ok(consumed)
}

async fn drain_by_pop(broker: &BrokerHandle, messages: usize) -> anyhow::Result<usize> {
    let mut consumed = 0;
    while consumed < messages {
        let answer = broker
            .pop(PopRequest {
                group: GROUP.into(),
                topic: TOPIC.into(),
                queue_id: None,
                max_messages: BATCH,
                invisible_ms: 60_000,
                poll: Duration::ZERO,
                from_min: true,
                expression_type: ExpressionType::Tag,
                expression: None,
                orderly: false,
            })
            .await?;
        anyhow::ensure!(answer.message_count > 0, "pop found nothing at {consumed}");
        let mut acks = Vec::with_capacity(answer.message_count);
        for message in decode_records(answer.records.clone())? {
            let receipt = answer
                .receipt(&message, &broker.config().broker_name)
                .ok_or_else(|| anyhow::anyhow!("no receipt for {}", message.queue_offset))?;
            acks.push(AckRequest {
                group: GROUP.into(),
                topic: TOPIC.into(),
                queue_id: message.queue_id as i32,
                offset: message.queue_offset as i64,
                receipt,
                expired: ExpiredReceipt::Refuse,
            });
        }
        // One call for the batch, as a gRPC AckMessage or a remoting batch ack carries it.
        for (i, held) in broker.ack_all(acks).await.into_iter().enumerate() {
            anyhow::ensure!(held?, "ack {i} of a batch at {consumed} found nothing held");
            consumed += 1;
        }
    }
    Ok(consumed)
}

/// CPU time used by every thread of this process so far.
fn process_cpu_time() -> anyhow::Result<Duration> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given and nothing else.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    anyhow::ensure!(
        status == 0,
        "clock_gettime: {}",
        std::io::Error::last_os_error()
    );
    Ok(Duration::new(
        u64::try_from(now.tv_sec)?,
        u32::try_from(now.tv_nsec)?,
    ))
}

/// One run's drain: messages per second, and CPU microseconds per message.
struct Drained {
    rate: f64,
    cpu_us: f64,
}

async fn one_run(mode: Mode, messages: usize) -> anyhow::Result<Drained> {
    let dir = tempfile::tempdir()?;
    let mut config = NodeConfig::in_dir(dir.path());
    config.flush = FlushPolicy::Async;
    let node = Node::open(config)?;
    let broker = node.broker().clone();
    fill(&broker, messages).await?;
    let started = Instant::now();
    let cpu_before = process_cpu_time()?;
    let consumed = match mode {
        Mode::Pull => drain_by_pull(&broker, messages).await?,
        Mode::Pop => drain_by_pop(&broker, messages).await?,
    };
    let drained = Drained {
        rate: consumed as f64 / started.elapsed().as_secs_f64(),
        cpu_us: (process_cpu_time()? - cpu_before).as_secs_f64() * 1e6 / consumed as f64,
    };
    node.shutdown().await?;
    Ok(drained)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.runs > 0 && args.messages > 0, "nothing to measure");
    actix_rt::System::new().block_on(async {
        let (mut pull, mut pop, mut paired) = (Vec::new(), Vec::new(), Vec::new());
        let (mut pull_cpu, mut pop_cpu) = (Vec::new(), Vec::new());
        for run in 1..=args.runs {
            let pulled = one_run(Mode::Pull, args.messages).await?;
            println!(
                "run {run} {:?}: {:.0} msgs/s, {:.2} µs CPU/msg",
                Mode::Pull,
                pulled.rate,
                pulled.cpu_us
            );
            let popped = one_run(Mode::Pop, args.messages).await?;
            println!(
                "run {run} {:?}: {:.0} msgs/s, {:.2} µs CPU/msg",
                Mode::Pop,
                popped.rate,
                popped.cpu_us
            );
            pull.push(pulled.rate);
            pop.push(popped.rate);
            paired.push(popped.rate / pulled.rate);
            pull_cpu.push(pulled.cpu_us);
            pop_cpu.push(popped.cpu_us);
        }
        let (pull, pop, paired) = (median(pull), median(pop), median(paired));
        println!(
            "medians of {} runs, {} messages each: pull+commit {pull:.0} msgs/s, pop+ack \
             {pop:.0} msgs/s, pop / pull {:.2}x (median of the runs' own ratios {paired:.2}x)",
            args.runs,
            args.messages,
            pop / pull
        );
        let (pull_cpu, pop_cpu) = (median(pull_cpu), median(pop_cpu));
        println!(
            "CPU per message drained, medians: pull+commit {pull_cpu:.2} µs, pop+ack \
             {pop_cpu:.2} µs, pull / pop {:.2}x",
            pull_cpu / pop_cpu
        );
        Ok(())
    })
}
