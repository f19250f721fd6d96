//! SIGKILL crash test: a child process appends batches under `FlushPolicy::Sync` and prints
//! every batch the store acknowledged; the parent kills it after a random number of
//! acknowledgements, reopens the store and checks that every acknowledged batch is still there
//! byte for byte and that nothing served fails its CRC. Twenty crashes on one directory.
//!
//! The child is this test binary re-executed with `CHILD_DIR_ENV` set, running only
//! [`crash_child`] (`--ignored --exact store_crash::crash_child`). It is `#[ignore]`d so that an ordinary run
//! never executes it, and it panics without its environment, so it cannot pass for nothing.

use rand::{Rng, SeedableRng};
use skiff_storage::message::{decode_records, encode_properties, MessageToAppend};
use skiff_storage::store::{FlushPolicy, MessageStore, ReadStatus, StoreConfig};
use skiff_storage::testsuite::{message, store_config};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD_DIR_ENV: &str = "SKIFF_CRASH_CHILD_DIR";
const CHILD_RUN_ENV: &str = "SKIFF_CRASH_CHILD_RUN";
const TOPIC: &str = "CrashTopic";
const QUEUES: u64 = 4;
const RUNS: u32 = 20;

fn config(dir: &Path) -> StoreConfig {
    StoreConfig {
        // Frequent checkpoints so crashes also land around them.
        flush_interval: Duration::from_millis(20),
        // Small segments so crashes also land around segment rolls, and the commit log
        // prepared ahead by its thread, so they land in prepared space.
        prepare_ahead: 16 * 1024,
        prepare_in_background: true,
        ..store_config(dir, 64 * 1024, FlushPolicy::Sync)
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The batch a seed stands for: its queue and messages, regenerated identically by the parent.
fn batch_for(seed: u64) -> (u32, Vec<MessageToAppend>) {
    let mut s = seed;
    let queue_id = (splitmix(&mut s) % QUEUES) as u32;
    let count = 1 + splitmix(&mut s) % 8;
    // Now and then a large batch, so kills also interrupt long writes.
    let max_len = if splitmix(&mut s).is_multiple_of(10) {
        20_000
    } else {
        400
    };
    let msgs = (0..count)
        .map(|i| {
            let len = (splitmix(&mut s) % max_len) as usize;
            let body: Vec<u8> = (0..len).map(|_| splitmix(&mut s) as u8).collect();
            MessageToAppend {
                flag: i as i32,
                born_timestamp: seed as i64,
                properties: encode_properties(&[("TAGS", "crash"), ("KEYS", &seed.to_string())]),
                ..message(TOPIC, queue_id, body)
            }
        })
        .collect();
    (queue_id, msgs)
}

/// `crash_child`'s name as `--exact` wants it: libtest names a test by its module path within the
/// test binary (the crate's name left out), and a filter matching no test would run nothing.
fn child_test_name() -> String {
    match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::crash_child"),
        None => "crash_child".to_owned(),
    }
}

/// Child mode: append forever, acknowledging each batch on stdout once append returned.
#[test]
#[ignore = "the child process of acknowledged_batches_survive_sigkill, which starts it"]
fn crash_child() {
    let dir = std::env::var(CHILD_DIR_ENV)
        .unwrap_or_else(|_| panic!("{CHILD_DIR_ENV} is unset: run only as the crash test's child"));
    let run: u64 = std::env::var(CHILD_RUN_ENV)
        .unwrap_or_else(|_| panic!("{CHILD_RUN_ENV} is unset: run only as the crash test's child"))
        .parse()
        .unwrap();
    let mut store = MessageStore::open(config(Path::new(&dir))).unwrap();
    // Bounded so an orphaned child cannot run forever.
    for batch in 0..100_000u64 {
        let seed = (run << 32) | batch;
        let (queue_id, msgs) = batch_for(seed);
        let results = store.append_batch(&msgs).unwrap().unwrap();
        println!(
            "ack {seed} {queue_id} {} {} {}",
            results[0].queue_offset,
            results.len(),
            results[0].physical_offset
        );
    }
}

struct Ack {
    seed: u64,
    queue_id: u32,
    first_offset: u64,
    count: u32,
    first_physical: u64,
}

fn parse_ack(line: &str) -> Option<Ack> {
    let mut it = line
        .strip_prefix("ack ")?
        .split(' ')
        .map(|f| f.parse::<u64>());
    let mut next = || it.next()?.ok();
    Some(Ack {
        seed: next()?,
        queue_id: next()? as u32,
        first_offset: next()?,
        count: next()? as u32,
        first_physical: next()?,
    })
}

fn verify(dir: &Path, acked: &[Ack]) {
    let store = MessageStore::open(config(dir)).unwrap();
    let reader = store.reader();
    for a in acked {
        let (queue_id, expected) = batch_for(a.seed);
        assert_eq!(queue_id, a.queue_id);
        assert_eq!(expected.len(), a.count as usize);
        let r = reader
            .read(TOPIC, a.queue_id, a.first_offset, a.count, u32::MAX, None)
            .unwrap();
        assert_eq!(
            r.status,
            ReadStatus::Found,
            "acknowledged batch {} lost",
            a.seed
        );
        let got = decode_records(r.records).unwrap();
        assert_eq!(
            got.len(),
            expected.len(),
            "acknowledged batch {} cut short",
            a.seed
        );
        assert_eq!(got[0].physical_offset, a.first_physical);
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(g.queue_offset, a.first_offset + i as u64);
            assert_eq!(g.body, e.body, "batch {} message {i} body differs", a.seed);
            assert_eq!(g.properties, e.properties);
            assert_eq!(g.flag, e.flag);
            assert_eq!(g.born_timestamp, e.born_timestamp);
        }
    }
    // Everything the store holds reads back and passes its CRC, acknowledged or not.
    for (topic, queue_id) in reader.queues().unwrap() {
        let max = reader.max_offset(&topic, queue_id);
        let mut offset = 0;
        while offset < max {
            let r = reader
                .read(&topic, queue_id, offset, 64, u32::MAX, None)
                .unwrap();
            assert_eq!(r.status, ReadStatus::Found);
            let msgs = decode_records(r.records).unwrap();
            for m in &msgs {
                assert_eq!(m.queue_offset, offset);
                offset += 1;
            }
        }
    }
    store.close().unwrap();
}

#[test]
fn acknowledged_batches_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let seed: u64 = rand::random();
    println!("crash test rng seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let exe = std::env::current_exe().unwrap();
    let mut acked: Vec<Ack> = Vec::new();
    for run in 0..RUNS {
        let kill_after = rng.gen_range(1..=80);
        let mut child = Command::new(&exe)
            .args([
                child_test_name().as_str(),
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DIR_ENV, dir.path())
            .env(CHILD_RUN_ENV, run.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut seen = 0;
        // Held open until the kill: a closed pipe would make the child's next println panic,
        // and its unwinding would drop the store cleanly instead of crashing it.
        let mut ack_lines = BufReader::new(stdout).lines();
        for line in ack_lines.by_ref() {
            let line = line.unwrap();
            if let Some(a) = parse_ack(&line) {
                acked.push(a);
                seen += 1;
                if seen == kill_after {
                    break;
                }
            }
        }
        // Child::kill sends SIGKILL: no destructor, no flush, no checkpoint.
        child.kill().unwrap();
        let status = child.wait().unwrap();
        drop(ack_lines);
        assert_eq!(
            seen, kill_after,
            "run {run}: child exited early with {status}"
        );
        verify(dir.path(), &acked);
    }
    println!(
        "{} acknowledged batches verified over {RUNS} crashes",
        acked.len()
    );
}
