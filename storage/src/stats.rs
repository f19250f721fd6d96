//! Latency counts the store keeps for the node's metrics (fsync time), lock-free so the group
//! commit thread records without waiting on anyone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the latency histogram buckets: 100 µs to 10 s. The node's request
/// latencies use the same ones.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Observations per bucket of [`LATENCY_BUCKETS`] (not cumulative), their count and sum.
#[derive(Debug, Default)]
pub struct LatencyCounter {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

/// A [`LatencyCounter`] read at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatencySnapshot {
    pub buckets: [u64; LATENCY_BUCKETS.len()],
    pub count: u64,
    pub sum_seconds: f64,
}

/// The bucket of [`LATENCY_BUCKETS`] an observation falls in; `None` past the last.
fn bucket_of(elapsed: Duration) -> Option<usize> {
    let seconds = elapsed.as_secs_f64();
    LATENCY_BUCKETS.iter().position(|&le| seconds <= le)
}

impl LatencySnapshot {
    /// Counts one observation (the plain form, for counts kept under a lock).
    pub fn observe(&mut self, elapsed: Duration) {
        if let Some(i) = bucket_of(elapsed) {
            self.buckets[i] += 1;
        }
        self.count += 1;
        self.sum_seconds += elapsed.as_secs_f64();
    }
}

impl LatencyCounter {
    pub fn observe(&self, elapsed: Duration) {
        if let Some(i) = bucket_of(elapsed) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> LatencySnapshot {
        LatencySnapshot {
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            count: self.count.load(Ordering::Relaxed),
            sum_seconds: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_bucket_and_the_sum() {
        let c = LatencyCounter::default();
        c.observe(Duration::from_micros(50));
        c.observe(Duration::from_millis(3));
        c.observe(Duration::from_secs(20));
        let s = c.snapshot();
        assert_eq!(s.buckets[0], 1);
        assert_eq!(
            s.buckets[LATENCY_BUCKETS
                .iter()
                .position(|&b| b == 0.005)
                .unwrap_or(0)],
            1
        );
        assert_eq!(
            s.buckets.iter().sum::<u64>(),
            2,
            "20 s is past the last bucket"
        );
        assert_eq!(s.count, 3);
        assert!((s.sum_seconds - 20.00305).abs() < 1e-9, "{}", s.sum_seconds);
    }
}
