//! Message-store throughput: `cargo bench -p skiff-storage --bench storage [-- <name filter>]`.
//!
//! Every benchmark runs `RUNS` times on a fresh directory (under `SKIFF_BENCH_DIR`, default
//! the system temp dir) and reports the median wall-clock rate, plus the process CPU time per
//! operation (a figure that stays meaningful when other work shares the cores).
//!
//! Workload: 1,000,000 messages with 100-byte bodies (plus TAGS, KEYS and UNIQ_KEY properties,
//! as a Java producer sends), in batches of 100 spread round robin over 4 queues of one topic.
//! A RocketMQ batch send targets one queue, so each batch goes to one queue; the
//! `..._interleaved` read variant spreads every batch's messages over the 4 queues instead,
//! the worst case for read coalescing.

use bytes::Bytes;
use skiff_storage::message::{encode_properties, MessageToAppend};
use skiff_storage::store::{FlushPolicy, MessageStore, ReadStatus, StoreConfig};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const RUNS: usize = 3;
const MESSAGES: u64 = 1_000_000;
const BODY: usize = 100;
const BATCH: usize = 100;
const QUEUES: u32 = 4;
const SYNC_APPENDERS: usize = 16;
const READ_BATCH: u32 = 32;
const READ_MAX_BYTES: u32 = 256 * 1024;
const TOPIC: &str = "BenchTopic";

/// What one timed section did.
struct Sample {
    ops: u64,
    wall: Duration,
    cpu: Duration,
}

/// Times `f` (which returns how many operations it did) in wall-clock and process CPU time.
fn measure(f: impl FnOnce() -> u64) -> Sample {
    let cpu0 = process_cpu();
    let start = Instant::now();
    let ops = f();
    let wall = start.elapsed();
    let cpu = process_cpu().saturating_sub(cpu0);
    Sample { ops, wall, cpu }
}

/// User + system time of this process from /proc (clock ticks of 10 ms on Linux).
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<u64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let ticks = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// A benchmark: one run in a fresh directory, returning its timed section.
type Bench = fn(&Path) -> Sample;

/// Add benchmarks here; each entry is run `RUNS` times and reported the same way.
/// Offset-table commits (another engineer's) slot in as one more entry, e.g.
/// `("offset_commit", "commits", offset_commit)`, with `offset_commit` timing its commits in a
/// `measure` call like the benchmarks below.
const BENCHES: &[(&str, &str, Bench)] = &[
    ("append_async", "msgs", append_async),
    ("append_sync_16_appenders", "msgs", append_sync),
    ("read_sequential_by_queue", "msgs", read_sequential),
    (
        "read_sequential_by_queue_interleaved",
        "msgs",
        read_interleaved,
    ),
];

fn config(dir: &Path, policy: FlushPolicy) -> StoreConfig {
    let mut c = StoreConfig::new(dir);
    c.flush_policy = policy;
    c
}

/// A producer-like batch for `queue_id`, or spread over all queues when `None`.
fn batch(queue_id: Option<u32>) -> Vec<MessageToAppend> {
    let body = Bytes::from(vec![0xABu8; BODY]);
    (0..BATCH)
        .map(|i| MessageToAppend {
            topic: TOPIC.to_string(),
            queue_id: queue_id.unwrap_or(i as u32 % QUEUES),
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            born_host: SocketAddr::from(([10, 0, 0, 1], 50000)),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            properties: encode_properties(&[
                ("TAGS", "TagA"),
                ("KEYS", "order-1"),
                ("UNIQ_KEY", &format!("0A00000100002A9F00000000{i:08X}")),
            ]),
            body: body.clone(),
        })
        .collect()
}

fn queue_batches() -> Vec<Vec<MessageToAppend>> {
    (0..QUEUES).map(|q| batch(Some(q))).collect()
}

fn append_all(store: &mut MessageStore, interleaved: bool) -> u64 {
    let batches = if interleaved {
        vec![batch(None)]
    } else {
        queue_batches()
    };
    let n = MESSAGES / BATCH as u64;
    for i in 0..n {
        store
            .append_batch(&batches[i as usize % batches.len()])
            .expect("append")
            .expect("append rejected");
    }
    n * BATCH as u64
}

fn append_async(dir: &Path) -> Sample {
    let mut store = MessageStore::open(config(dir, FlushPolicy::Async)).expect("open");
    let sample = measure(|| append_all(&mut store, false));
    store.close().expect("close");
    sample
}

fn append_sync(dir: &Path) -> Sample {
    let store = MessageStore::open(config(dir, FlushPolicy::Sync)).expect("open");
    let waiter = store.sync_waiter();
    let fsyncs_before = waiter.fsync_count();
    // The store has a single writer: the lock is held only for the append itself, and each
    // appender waits for durability outside it, so waiters pile up behind one fsync.
    let store = Arc::new(Mutex::new(store));
    let per_thread = MESSAGES / SYNC_APPENDERS as u64 / BATCH as u64;
    let sample = measure(|| {
        let threads: Vec<_> = (0..SYNC_APPENDERS)
            .map(|t| {
                let store = store.clone();
                let waiter = waiter.clone();
                std::thread::spawn(move || {
                    let batch = batch(Some(t as u32 % QUEUES));
                    for _ in 0..per_thread {
                        let (_, end) = store
                            .lock()
                            .expect("store lock")
                            .append_batch_nowait(&batch)
                            .expect("append")
                            .expect("append rejected");
                        waiter.wait_durable(end).expect("fsync");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("appender thread");
        }
        per_thread * SYNC_APPENDERS as u64 * BATCH as u64
    });
    let fsyncs = (waiter.fsync_count() - fsyncs_before).max(1);
    println!(
        "    {fsyncs} fsyncs, {:.1} batches per fsync",
        (sample.ops / BATCH as u64) as f64 / fsyncs as f64
    );
    if let Ok(store) = Arc::try_unwrap(store) {
        store
            .into_inner()
            .expect("store lock")
            .close()
            .expect("close");
    }
    sample
}

fn read_back(dir: &Path, interleaved: bool) -> Sample {
    {
        let mut store = MessageStore::open(config(dir, FlushPolicy::Async)).expect("open");
        append_all(&mut store, interleaved);
        store.close().expect("close");
    }
    let store = MessageStore::open(config(dir, FlushPolicy::Async)).expect("reopen");
    let reader = store.reader();
    let sample = measure(|| {
        let mut read = 0u64;
        for q in 0..QUEUES {
            let mut offset = 0;
            loop {
                let r = reader
                    .read(TOPIC, q, offset, READ_BATCH, READ_MAX_BYTES, None)
                    .expect("read");
                if r.status != ReadStatus::Found {
                    break;
                }
                read += u64::from(r.message_count);
                offset = r.next_begin_offset;
            }
        }
        read
    });
    assert_eq!(sample.ops, MESSAGES, "read back every message");
    sample
}

fn read_sequential(dir: &Path) -> Sample {
    read_back(dir, false)
}

fn read_interleaved(dir: &Path) -> Sample {
    read_back(dir, true)
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument filters benchmarks by name.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let root: PathBuf = std::env::var_os("SKIFF_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    for (name, unit, bench) in BENCHES {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let mut rates = Vec::with_capacity(RUNS);
        let mut cpu_per_op = Vec::with_capacity(RUNS);
        for run in 0..RUNS {
            let dir = tempfile::tempdir_in(&root).expect("bench dir");
            let s = bench(dir.path());
            let rate = s.ops as f64 / s.wall.as_secs_f64();
            let cpu_ns = s.cpu.as_nanos() as f64 / s.ops as f64;
            println!(
                "  {name} run {}: {} {unit} in {:.2?} = {rate:.0} {unit}/s, cpu {cpu_ns:.0} ns/op",
                run + 1,
                s.ops,
                s.wall
            );
            rates.push(rate);
            cpu_per_op.push(cpu_ns);
        }
        rates.sort_by(f64::total_cmp);
        cpu_per_op.sort_by(f64::total_cmp);
        println!(
            "{name}: median {:.0} {unit}/s over {RUNS} runs (cpu median {:.0} ns/op)",
            rates[RUNS / 2],
            cpu_per_op[RUNS / 2]
        );
    }
    if let Some(kib) = peak_rss_kib() {
        println!("peak rss {} MiB", kib / 1024);
    }
}
