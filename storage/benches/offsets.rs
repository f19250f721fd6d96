//! Offset commits into sled: 1,000,000 commits over 100 groups x 8 queues, median of 3 runs.
//!
//! Run with `cargo bench -p skiff-storage --bench offsets`.

use std::time::{Duration, Instant};

use anyhow::Context;
use skiff_storage::metadata::open_db;
use skiff_storage::offset_table::{OffsetKey, OffsetTable, SledOffsetTable};

const COMMITS: u64 = 1_000_000;
const GROUPS: usize = 100;
const QUEUES: u32 = 8;
const RUNS: usize = 3;

/// One run in a fresh database; returns the time for all commits plus the final flush.
fn run() -> anyhow::Result<Duration> {
    let dir = tempfile::tempdir().context("tempdir")?;
    let path = dir.path().join("meta");
    let db = open_db(&path)?;
    let mut table = SledOffsetTable::open(&db, path)?;
    let keys: Vec<OffsetKey> = (0..GROUPS)
        .map(|g| OffsetKey::new("TopicTest", format!("CID_bench_{g:03}")))
        .collect();
    let slots = keys.len() as u64 * u64::from(QUEUES);

    let start = Instant::now();
    for i in 0..COMMITS {
        let slot = i % slots;
        let key = &keys[(slot / u64::from(QUEUES)) as usize];
        let queue = (slot % u64::from(QUEUES)) as u32;
        // Each (group, queue) advances by one per round, as a steady consumer would.
        table.commit(key, queue, i / slots + 1)?;
    }
    table.flush()?;
    let elapsed = start.elapsed();

    let stored = table.list_all()?;
    anyhow::ensure!(stored.len() as u64 == slots, "expected {slots} entries");
    Ok(elapsed)
}

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; a filter that does not name this bench skips it.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if !args.is_empty() && !args.iter().any(|a| "offsets".contains(a.as_str())) {
        return Ok(());
    }
    let mut rates = Vec::with_capacity(RUNS);
    for n in 1..=RUNS {
        let elapsed = run()?;
        let rate = COMMITS as f64 / elapsed.as_secs_f64();
        println!(
            "offsets run {n}: {COMMITS} commits over {GROUPS} groups x {QUEUES} queues in {:.3} s = {:.0} commits/s",
            elapsed.as_secs_f64(),
            rate
        );
        rates.push(rate);
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "offsets median of {RUNS}: {:.0} commits/s (sled, commit + final flush)",
        rates[RUNS / 2]
    );
    Ok(())
}
