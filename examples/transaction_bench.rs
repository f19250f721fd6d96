//! Transactional send throughput next to plain send, through the embedded node (broker in
//! process, `flush` async, the defaults otherwise). Each run opens a fresh node and sends
//! `--messages` messages of 100 bytes one after another, each awaited: plain `send`, or
//! `send_in_transaction` whose local transaction commits (a half message, END_TRANSACTION, and
//! the committed copy: two records per message). The modes alternate run by run; the medians
//! and their ratio are printed.
//!
//! ```sh
//! cargo run --release --example transaction_bench -- --messages 20000 --runs 5
//! ```

use clap::Parser;
use skiff::actors::logic::transaction::TransactionResolution;
use skiff::prelude::*;
use skiff::storage::store::FlushPolicy;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(about = "Transactional vs plain send throughput through the embedded node")]
struct Args {
    /// Messages per run and mode.
    #[arg(long, default_value_t = 20_000)]
    messages: usize,
    /// Runs per mode (alternating).
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Plain,
    Transactional,
}

async fn one_run(mode: Mode, messages: usize) -> anyhow::Result<f64> {
    let dir = tempfile::tempdir()?;
    let mut config = NodeConfig::in_dir(dir.path());
    config.flush = FlushPolicy::Async;
    let node = Node::open(config)?;
    let producer = node.producer("transaction-bench");
    producer
        .register_transaction_checker(|_| async { TransactionResolution::Commit })
        .await?;
    let body = vec![b'x'; 100];
    // The topic's route is created by the first send, outside the timed loop.
    producer
        .send(OutgoingMessage::new("TxBench", body.clone()))
        .await?;
    let started = Instant::now();
    for _ in 0..messages {
        let message = OutgoingMessage::new("TxBench", body.clone());
        match mode {
            Mode::Plain => {
                producer.send(message).await?;
            }
            Mode::Transactional => {
                let sent = producer
                    .send_in_transaction(message, |_| async { TransactionResolution::Commit })
                    .await?;
                anyhow::ensure!(
                    sent.resolution == TransactionResolution::Commit,
                    "local transaction answered {:?}",
                    sent.resolution
                );
            }
        }
    }
    let rate = messages as f64 / started.elapsed().as_secs_f64();
    node.shutdown().await?;
    Ok(rate)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.runs > 0 && args.messages > 0, "nothing to measure");
    actix_rt::System::new().block_on(async {
        let (mut plain, mut transactional) = (Vec::new(), Vec::new());
        for run in 1..=args.runs {
            for mode in [Mode::Plain, Mode::Transactional] {
                let rate = one_run(mode, args.messages).await?;
                println!("run {run} {mode:?}: {rate:.0} msgs/s");
                match mode {
                    Mode::Plain => plain.push(rate),
                    Mode::Transactional => transactional.push(rate),
                }
            }
        }
        let (plain, transactional) = (median(plain), median(transactional));
        println!(
            "medians of {} runs, {} messages each: plain {plain:.0} msgs/s, transactional \
             {transactional:.0} msgs/s, transactional / plain {:.2}x",
            args.runs,
            args.messages,
            transactional / plain
        );
        Ok(())
    })
}
