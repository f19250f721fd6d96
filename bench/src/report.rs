//! Medians, ratios and the markdown table.

use std::fmt::Write as _;
use std::process::Command;

use crate::broker::Kind;
use crate::skiff_driver::SendMode;
use crate::workload::Workload;

/// One run of one broker.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Spawn of the broker process(es) to the first acknowledged send, ms.
    pub first_ack_ms: f64,
    /// VmRSS (Apache: both JVMs) `--idle-secs` after the first acknowledged send, before the
    /// workload.
    pub idle_rss: u64,
    pub produce_mps: f64,
    pub consume_mps: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub latency_samples: u64,
    /// Rate the latency run's producer achieved.
    pub latency_rate: f64,
    /// VmHWM right after the produce phase (the 1M backlog).
    pub backlog_rss: u64,
    /// VmHWM at the end.
    pub peak_rss: u64,
    pub disk_bytes: u64,
    pub cpu: CpuPerMsg,
}

/// CPU microseconds per message (broker, bench client) of the throughput phases: on a shared
/// 2-core machine this is the load-independent cost.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuPerMsg {
    pub produce: (f64, f64),
    pub consume: (f64, f64),
}

pub struct RunResult {
    pub kind: Kind,
    pub samples: Vec<Sample>,
    pub errors: Vec<String>,
}

/// Medians per metric.
#[derive(Debug, Clone, Copy)]
pub struct Medians {
    pub first_ack_ms: f64,
    pub idle_rss: f64,
    pub produce_mps: f64,
    pub consume_mps: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub backlog_rss: f64,
    pub peak_rss: f64,
    pub disk_bytes: f64,
}

pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl RunResult {
    pub fn medians(&self) -> Option<Medians> {
        if self.samples.is_empty() {
            return None;
        }
        let m = |f: fn(&Sample) -> f64| median(self.samples.iter().map(f).collect());
        Some(Medians {
            first_ack_ms: m(|s| s.first_ack_ms),
            idle_rss: m(|s| s.idle_rss as f64),
            produce_mps: m(|s| s.produce_mps),
            consume_mps: m(|s| s.consume_mps),
            p50_us: m(|s| s.p50_us),
            p99_us: m(|s| s.p99_us),
            p999_us: m(|s| s.p999_us),
            backlog_rss: m(|s| s.backlog_rss as f64),
            peak_rss: m(|s| s.peak_rss as f64),
            disk_bytes: m(|s| s.disk_bytes as f64),
        })
    }
}

pub struct Report<'a> {
    pub workload: &'a Workload,
    pub results: &'a [RunResult],
    pub command: String,
    pub started: String,
    pub load_before: String,
    pub load_after: String,
    pub runs: usize,
    pub skiff_send: SendMode,
    pub skiff_rev: Option<String>,
    /// Apache RocketMQ's version and JVM, when it ran.
    pub apache_desc: Option<String>,
    pub idle_secs: u64,
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// "YYYY-MM-DD HH:MM UTC" without a date crate.
pub fn now_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02} UTC", rem / 3600, (rem % 3600) / 60)
}

fn version_of(cmd: &str, arg: &str) -> String {
    Command::new(cmd)
        .arg(arg)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "?".into())
}

fn mib(b: f64) -> String {
    format!("{:.1}", b / 1_048_576.0)
}

fn num(v: f64) -> String {
    if v.is_nan() {
        return "–".into();
    }
    // Thousands separators for rates.
    let s = format!("{:.0}", v);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn us(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else if v >= 10_000.0 {
        format!("{:.1} ms", v / 1000.0)
    } else {
        format!("{v:.0} µs")
    }
}

fn ms(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else {
        format!("{v:.0} ms")
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    a / b
}

fn x(r: f64) -> String {
    if !r.is_finite() {
        "–".into()
    } else if r >= 0.1 || r == 0.0 {
        format!("{r:.2}×")
    } else {
        // Two significant digits: skiff's start can be 1/1000 of a JVM's.
        let digits = (-r.log10().floor()) as usize + 1;
        format!("{r:.digits$}×")
    }
}

pub fn render(r: &Report) -> String {
    let w = r.workload;
    let mut s = String::new();
    let _ = writeln!(s, "## skiff-bench: skiff vs Redis Streams vs NATS JetStream vs Apache RocketMQ\n");
    let _ = writeln!(s, "- Command: `{}`", r.command);
    let _ = writeln!(s, "- Date: {}", r.started);
    let _ = writeln!(
        s,
        "- Machine: {} CPUs, loopback TCP; load average (1/5/15 min) before {} / after {} (above ~1, other processes shared the cores and the numbers are noisy)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        r.load_before,
        r.load_after
    );
    let has = |f: fn(Kind) -> bool| r.results.iter().any(|x| f(x.kind));
    let mut brokers = Vec::new();
    if has(Kind::is_skiff) {
        brokers.push(format!(
            "skiff {}",
            r.skiff_rev.as_deref().map(|v| format!("@{v}")).unwrap_or_else(git_head)
        ));
    }
    if has(|k| matches!(k, Kind::RedisEverysec | Kind::RedisAlways)) {
        brokers.push(
            version_of("redis-server", "--version")
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    if has(|k| k == Kind::JetStream) {
        brokers.push(version_of("nats-server", "--version"));
    }
    if let Some(d) = r.apache_desc.as_deref() {
        brokers.push(format!(
            "{d}: name server -Xms256m -Xmx256m, broker -Xms1g -Xmx1g, G1 (tests/conformance/apache/start.sh --profile bench); its RSS and CPU are both JVMs' sum, its disk the broker's store dir"
        ));
    }
    let _ = writeln!(s, "- Brokers: {}", brokers.join("; "));
    let _ = writeln!(
        s,
        "- Workload: 1 topic × {} queues (Redis: {} streams; JetStream: {} subjects of one file stream), message i → queue i mod {}; {} messages of {} bytes (incompressible), produced in batches of {} each confirmed before the next; one consumer of one group, at most {} per queue per fetch, every message acknowledged/committed, ends when the broker reports nothing pending. Latency run: {} msgs/s for {} s with the consumer running, first {} s dropped. Medians of {} run(s); each run starts the broker on a fresh data dir.",
        w.queues, w.queues, w.queues, w.queues, w.messages, w.payload, w.batch, w.fetch,
        w.latency_rate, w.latency_secs, w.latency_warmup_secs, r.runs
    );
    let _ = writeln!(
        s,
        "- Start → first ack: from spawning the broker process(es) until a send is acknowledged, one attempt every 10 ms on a fresh connection (RocketMQ brokers: route of TBW102 from the name server, then SEND_MESSAGE_V2 to the master it names). Idle RSS: {} s after that first ack, before the workload.",
        r.idle_secs
    );
    let _ = writeln!(
        s,
        "- skiff and Apache client: {}",
        match r.skiff_send {
            SendMode::Batch => "SEND_BATCH_MESSAGE (320), each batch of 100 split by queue into 4 requests of 25 sent together; PULL_MESSAGE maxMsgNums 100 per queue with the piggybacked commit flag; acked UPDATE_CONSUMER_OFFSET at the end; QUERY_CONSUMER_OFFSET = GET_MAX_OFFSET on all queues ends the run",
            SendMode::Single => "SEND_MESSAGE_V2 (310), one request per message, 100 in flight per batch; pulls and commits as in batch mode",
        }
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "| broker | durability | start → first ack | idle RSS MiB | produce msgs/s | consume+commit msgs/s | p50 | p99 | p99.9 | peak RSS MiB (after produce) | disk MiB |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for res in r.results {
        match res.medians() {
            Some(m) => {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} ({}) | {} |",
                    res.kind.name(),
                    res.kind.durability(),
                    ms(m.first_ack_ms),
                    mib(m.idle_rss),
                    num(m.produce_mps),
                    num(m.consume_mps),
                    us(m.p50_us),
                    us(m.p99_us),
                    us(m.p999_us),
                    mib(m.peak_rss),
                    mib(m.backlog_rss),
                    mib(m.disk_bytes)
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "| {} | {} | failed: {} | | | | | | | | |",
                    res.kind.name(),
                    res.kind.durability(),
                    res.errors.first().map(|e| e.replace('|', "/").replace('\n', " ")).unwrap_or_default()
                );
            }
        }
    }
    let find = |k: Kind| r.results.iter().find(|x| x.kind == k).and_then(|x| x.medians());
    let mut pairs = Vec::new();
    for res in r.results.iter().filter(|x| x.kind.is_skiff()) {
        for &peer in res.kind.peer_of() {
            if let (Some(a), Some(b)) = (res.medians(), find(peer)) {
                pairs.push((res.kind, peer, a, b));
            }
        }
    }
    if !pairs.is_empty() {
        let _ = writeln!(s, "\nRatios skiff / peer (throughput: higher is better for skiff; start time, latency, RSS, disk: lower is better):\n");
        let _ = writeln!(s, "| skiff / peer | start → first ack | idle RSS | produce | consume+commit | p50 | p99 | p99.9 | peak RSS | disk |");
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (a, b, ma, mb) in &pairs {
            let _ = writeln!(
                s,
                "| {} / {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                a.name(),
                b.name(),
                x(ratio(ma.first_ack_ms, mb.first_ack_ms)),
                x(ratio(ma.idle_rss, mb.idle_rss)),
                x(ratio(ma.produce_mps, mb.produce_mps)),
                x(ratio(ma.consume_mps, mb.consume_mps)),
                x(ratio(ma.p50_us, mb.p50_us)),
                x(ratio(ma.p99_us, mb.p99_us)),
                x(ratio(ma.p999_us, mb.p999_us)),
                x(ratio(ma.peak_rss, mb.peak_rss)),
                x(ratio(ma.disk_bytes, mb.disk_bytes)),
            );
        }
    }
    // Targets from the issue.
    let mut targets = Vec::new();
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    if let (Some(a), Some(b)) = (find(Kind::SkiffAsync), find(Kind::RedisEverysec)) {
        let p = ratio(a.produce_mps, b.produce_mps);
        let c = ratio(a.consume_mps, b.consume_mps);
        let l = ratio(a.p99_us, b.p99_us);
        targets.push(format!("produce skiff-async / redis-everysec ≥ 2×: {} — {}", x(p), verdict(p >= 2.0)));
        targets.push(format!("consume+commit skiff-async / redis-everysec ≥ 2×: {} — {}", x(c), verdict(c >= 2.0)));
        targets.push(format!("p99 latency skiff-async ≤ redis-everysec: {} vs {} — {}", us(a.p99_us), us(b.p99_us), verdict(l <= 1.0)));
    }
    if let Some(a) = find(Kind::SkiffAsync) {
        targets.push(format!(
            "skiff-async peak RSS with the {} backlog ≤ 64 MiB: {} MiB after produce, {} MiB peak overall — {}",
            w.messages,
            mib(a.backlog_rss),
            mib(a.peak_rss),
            verdict(a.peak_rss <= 64.0 * 1_048_576.0)
        ));
    }
    if let (Some(a), Some(b)) = (find(Kind::SkiffAsync), find(Kind::SkiffNoIndex)) {
        let p = ratio(a.produce_mps, b.produce_mps);
        let keys = if w.keys { "a key on every message" } else { "UNIQ_KEY only (run with --keys)" };
        targets.push(format!("produce skiff-async / skiff-noindex ≥ 0.95×, {keys}: {} — {}", x(p), verdict(p >= 0.95)));
    }
    if let (Some(a), Some(b)) = (find(Kind::SkiffSync), find(Kind::SkiffSyncUnprepared)) {
        let p = ratio(a.produce_mps, b.produce_mps);
        targets.push(format!("produce skiff-sync / skiff-sync-unprepared (the commit log prepared ahead): {} (for reference)", x(p)));
    }
    if let (Some(a), Some(b)) = (find(Kind::SkiffSync), find(Kind::RedisAlways)) {
        let p = ratio(a.produce_mps, b.produce_mps);
        let c = ratio(a.consume_mps, b.consume_mps);
        targets.push(format!("produce skiff-sync / redis-always ≥ 2×: {} — {}", x(p), verdict(p >= 2.0)));
        targets.push(format!("consume+commit skiff-sync / redis-always: {} (for reference)", x(c)));
    }
    if !targets.is_empty() {
        let _ = writeln!(s, "\nTargets (2-core machine, loopback TCP):\n");
        for t in targets {
            let _ = writeln!(s, "- {t}");
        }
    }
    let _ = writeln!(s, "\nEvery run:\n");
    let _ = writeln!(s, "| broker | run | start → first ack | idle RSS MiB | produce msgs/s | consume+commit msgs/s | p50 | p99 | p99.9 | latency samples | latency run achieved msgs/s | RSS after produce MiB | peak RSS MiB | disk MiB | CPU µs/msg produce (broker+client) | CPU µs/msg consume (broker+client) |");
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for res in r.results {
        for (i, x) in res.samples.iter().enumerate() {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2}+{:.2} | {:.2}+{:.2} |",
                res.kind.name(),
                i + 1,
                ms(x.first_ack_ms),
                mib(x.idle_rss as f64),
                num(x.produce_mps),
                num(x.consume_mps),
                us(x.p50_us),
                us(x.p99_us),
                us(x.p999_us),
                x.latency_samples,
                num(x.latency_rate),
                mib(x.backlog_rss as f64),
                mib(x.peak_rss as f64),
                mib(x.disk_bytes as f64),
                x.cpu.produce.0,
                x.cpu.produce.1,
                x.cpu.consume.0,
                x.cpu.consume.1
            );
        }
        for e in &res.errors {
            let _ = writeln!(s, "| {} | failed | {} | | | | | | | | | | | | | |", res.kind.name(), e.replace('|', "/").replace('\n', " "));
        }
    }
    s
}

fn git_head() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    Command::new("git")
        .args(["-C", dir, "rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .map(|h| format!("@{h}"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_formatting() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0]), 2.5);
        assert_eq!(num(1234567.4), "1,234,567");
        assert_eq!(num(999.0), "999");
        assert_eq!(x(1.234), "1.23×");
        assert_eq!(x(0.0123), "0.012×");
        assert_eq!(x(0.00114), "0.0011×");
        assert!(now_utc().ends_with("UTC"));
    }
}
