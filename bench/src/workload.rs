//! The workload every broker runs, and what is shared between the drivers: payloads, the
//! clock stamped into them, pacing, latency samples and the progress line.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// One fixed workload (identical for every broker).
#[derive(Debug, Clone)]
pub struct Workload {
    /// Messages of the throughput run (N).
    pub messages: u64,
    /// Queues / streams / subjects; message i goes to queue i mod `queues`.
    pub queues: usize,
    /// Messages per produce batch (confirmed before the next).
    pub batch: usize,
    /// Payload bytes per message.
    pub payload: usize,
    /// At most this many messages per queue per fetch.
    pub fetch: usize,
    /// Latency run: messages per second.
    pub latency_rate: u64,
    /// Latency run: seconds of producing.
    pub latency_secs: u64,
    /// Latency run: leading seconds whose samples are dropped.
    pub latency_warmup_secs: u64,
    /// Every message also carries a `KEYS` property (RocketMQ brokers index it for lookups).
    pub keys: bool,
}

impl Workload {
    pub fn latency_messages(&self) -> u64 {
        self.latency_rate * self.latency_secs
    }
}

/// Where the payload keeps its send stamp: bytes 0..8, ns since [`now_ns`]'s base, little
/// endian; bytes 8..16 hold the message sequence number, the rest is random.
pub const STAMP_AT: usize = 0;

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Monotonic nanoseconds since the process's first call (producer and consumer run in this
/// one process, so stamps compare directly).
pub fn now_ns() -> u64 {
    base().elapsed().as_nanos() as u64
}

/// Incompressible payloads from xorshift64*: cheap enough to make on the fly.
pub struct PayloadGen {
    state: u64,
    len: usize,
}

impl PayloadGen {
    pub fn new(seed: u64, len: usize) -> Self {
        assert!(len >= 16, "payload must hold the 16 bytes of stamps");
        PayloadGen {
            state: seed | 1,
            len,
        }
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Appends one payload for message `seq` stamped `stamp_ns`.
    pub fn append(&mut self, out: &mut Vec<u8>, seq: u64, stamp_ns: u64) {
        let start = out.len();
        out.extend_from_slice(&stamp_ns.to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
        while out.len() - start < self.len {
            let r = self.next_u64().to_le_bytes();
            let take = (self.len - (out.len() - start)).min(8);
            out.extend_from_slice(&r[..take]);
        }
    }

    /// One payload as its own vector.
    pub fn make(&mut self, seq: u64, stamp_ns: u64) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        self.append(&mut v, seq, stamp_ns);
        v
    }
}

/// Reads the send stamp of a payload.
pub fn stamp_of(payload: &[u8]) -> Option<u64> {
    payload
        .get(STAMP_AT..STAMP_AT + 8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
}

/// Open-loop pacing at `rate` messages per second: messages are due at start + i / rate.
pub struct Pacer {
    start: Instant,
    rate: u64,
    total: u64,
    sent: u64,
}

impl Pacer {
    pub fn new(rate: u64, total: u64) -> Self {
        Pacer {
            start: Instant::now(),
            rate,
            total,
            sent: 0,
        }
    }

    pub fn start(&self) -> Instant {
        self.start
    }

    fn due_at(&self, i: u64) -> Instant {
        self.start + Duration::from_nanos(i.saturating_mul(1_000_000_000) / self.rate)
    }

    /// Waits until at least one message is due, then returns (first sequence, count) of the
    /// messages due now, at most `max`; `None` when all were sent.
    pub async fn next(&mut self, max: usize) -> Option<(u64, usize)> {
        if self.sent >= self.total {
            return None;
        }
        tokio::time::sleep_until(self.due_at(self.sent).into()).await;
        let elapsed = self.start.elapsed();
        let due = ((elapsed.as_nanos() * self.rate as u128) / 1_000_000_000) as u64 + 1;
        let due = due.min(self.total);
        let n = (due.saturating_sub(self.sent)).clamp(1, max as u64);
        let first = self.sent;
        self.sent += n;
        Some((first, n as usize))
    }
}

/// Latency samples of the latency run: receive time minus the send stamp, for messages sent
/// after the warm-up.
pub struct LatencyRecorder {
    warmup_until_ns: u64,
    pub samples_ns: Vec<u64>,
    pub received: u64,
}

impl LatencyRecorder {
    pub fn new(warmup_until_ns: u64, expected: u64) -> Self {
        LatencyRecorder {
            warmup_until_ns,
            samples_ns: Vec::with_capacity(expected as usize),
            received: 0,
        }
    }

    /// Records one received payload at `now`.
    pub fn record(&mut self, payload: &[u8], now: u64) {
        self.received += 1;
        if let Some(stamp) = stamp_of(payload) {
            if stamp >= self.warmup_until_ns {
                self.samples_ns.push(now.saturating_sub(stamp));
            }
        }
    }

    pub fn summary(mut self) -> LatencySummary {
        self.samples_ns.sort_unstable();
        // Nearest rank, in integers (p in thousandths of a percent) so 99.9 % of 1000 is 999.
        let pct = |p_milli: u64| -> f64 {
            if self.samples_ns.is_empty() {
                return f64::NAN;
            }
            let n = self.samples_ns.len() as u64;
            let rank = (p_milli * n).div_ceil(100_000) as usize;
            let idx = rank.clamp(1, self.samples_ns.len()) - 1;
            self.samples_ns[idx] as f64 / 1_000.0
        };
        LatencySummary {
            p50_us: pct(50_000),
            p99_us: pct(99_000),
            p999_us: pct(99_900),
            samples: self.samples_ns.len() as u64,
            produce_secs: 0.0,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct LatencySummary {
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub samples: u64,
    /// How long producing the latency run took (its rate is achieved when this is ~latency_secs).
    pub produce_secs: f64,
}

/// Counters the progress line reads.
pub struct Progress {
    pub done: AtomicU64,
    pub total: AtomicU64,
    label: Mutex<String>,
    started: Mutex<Instant>,
}

pub fn progress() -> &'static Progress {
    static P: OnceLock<Progress> = OnceLock::new();
    P.get_or_init(|| Progress {
        done: AtomicU64::new(0),
        total: AtomicU64::new(0),
        label: Mutex::new(String::new()),
        started: Mutex::new(Instant::now()),
    })
}

impl Progress {
    /// Starts a new phase.
    pub fn phase(&self, label: String, total: u64) {
        *self.label.lock().unwrap() = label;
        *self.started.lock().unwrap() = Instant::now();
        self.total.store(total, Ordering::Relaxed);
        self.done.store(0, Ordering::Relaxed);
    }

    pub fn add(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    fn line(&self) -> String {
        let done = self.done.load(Ordering::Relaxed);
        let total = self.total.load(Ordering::Relaxed);
        let secs = self.started.lock().unwrap().elapsed().as_secs_f64();
        if total == 0 {
            // A phase without a count (start, stop).
            return format!("{}: {:.0} s", self.label.lock().unwrap(), secs);
        }
        format!(
            "{}: {}/{} ({:.0}%) {:.0} msgs/s, {:.0} s",
            self.label.lock().unwrap(),
            done,
            total,
            done as f64 * 100.0 / total as f64,
            done as f64 / secs.max(1e-9),
            secs
        )
    }

    /// Prints the progress line on stderr every `every` until the process ends: rewritten in
    /// place on a terminal, one line per tick otherwise.
    pub fn spawn_printer(&'static self) {
        std::thread::spawn(move || {
            let tty = std::io::stderr().is_terminal();
            let every = if tty {
                Duration::from_millis(500)
            } else {
                Duration::from_secs(5)
            };
            loop {
                std::thread::sleep(every);
                let line = self.line();
                let mut err = std::io::stderr().lock();
                if tty {
                    let _ = write!(err, "\r\x1b[2K{line}");
                } else {
                    let _ = writeln!(err, "  .. {line}");
                }
                let _ = err.flush();
            }
        });
    }
}

/// Prints a finished line (clearing the progress line on a terminal).
pub fn say(msg: impl AsRef<str>) {
    let mut err = std::io::stderr().lock();
    if err.is_terminal() {
        let _ = write!(err, "\r\x1b[2K");
    }
    let _ = writeln!(err, "{}", msg.as_ref());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_has_stamps_and_length() {
        let mut g = PayloadGen::new(7, 100);
        let p = g.make(42, 123_456);
        assert_eq!(p.len(), 100);
        assert_eq!(stamp_of(&p), Some(123_456));
        assert_eq!(u64::from_le_bytes(p[8..16].try_into().unwrap()), 42);
        let q = g.make(43, 1);
        assert_ne!(p[16..], q[16..]);
    }

    #[test]
    fn percentiles() {
        let mut r = LatencyRecorder::new(0, 1000);
        for i in 1..=1000u64 {
            let mut p = vec![0u8; 16];
            p[..8].copy_from_slice(&0u64.to_le_bytes());
            r.record(&p, i * 1000);
        }
        let s = r.summary();
        assert_eq!(s.p50_us, 500.0);
        assert_eq!(s.p99_us, 990.0);
        assert_eq!(s.p999_us, 999.0);
    }
}
