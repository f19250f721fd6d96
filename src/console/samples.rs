//! The console's memory of the last hour: produce and consume rates and each group's lag, one
//! sample per interval, in fixed-size rings (a sample of a node with G groups is a few dozen
//! bytes plus G entries; an hour at 10 s is 360 of them).

use std::collections::{BTreeMap, VecDeque};

/// Samples kept: an hour at the default 10 s interval.
pub const KEPT: usize = 360;
/// Groups whose lag is remembered; past this, the groups with the least lag are left out of a
/// sample (a dev broker with this many groups has bigger questions than a chart).
pub const MAX_GROUPS: usize = 1000;

/// Counter readings at one moment: messages produced and consumed since start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    pub at_ms: i64,
    pub produced: u64,
    pub consumed: u64,
}

/// Produce and consume rates over one interval, per second.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Rate {
    pub at_ms: i64,
    pub produced_per_s: f64,
    pub consumed_per_s: f64,
}

/// A group's total lag at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LagPoint {
    pub at_ms: i64,
    pub lag: u64,
}

#[derive(Debug, Default)]
pub struct Samples {
    last: Option<Reading>,
    rates: VecDeque<Rate>,
    lag: BTreeMap<String, VecDeque<LagPoint>>,
}

impl Samples {
    /// Records counter readings and each group's total lag at `reading.at_ms`.
    pub fn record(&mut self, reading: Reading, lags: impl IntoIterator<Item = (String, u64)>) {
        if let Some(last) = self.last {
            let seconds = (reading.at_ms - last.at_ms) as f64 / 1000.0;
            if seconds > 0.0 {
                push_bounded(
                    &mut self.rates,
                    Rate {
                        at_ms: reading.at_ms,
                        // A counter that went down (a restart of what it counts) reads as zero.
                        produced_per_s: reading.produced.saturating_sub(last.produced) as f64
                            / seconds,
                        consumed_per_s: reading.consumed.saturating_sub(last.consumed) as f64
                            / seconds,
                    },
                );
            }
        }
        self.last = Some(reading);
        let mut lags: Vec<(String, u64)> = lags.into_iter().collect();
        if lags.len() > MAX_GROUPS {
            lags.sort_by_key(|(_, lag)| std::cmp::Reverse(*lag));
            lags.truncate(MAX_GROUPS);
        }
        let present: std::collections::BTreeSet<&str> =
            lags.iter().map(|(g, _)| g.as_str()).collect();
        // A group gone from the node is forgotten with its history.
        self.lag.retain(|group, _| present.contains(group.as_str()));
        for (group, lag) in lags {
            push_bounded(
                self.lag.entry(group).or_default(),
                LagPoint {
                    at_ms: reading.at_ms,
                    lag,
                },
            );
        }
    }

    /// Rates, oldest first.
    pub fn rates(&self) -> Vec<Rate> {
        self.rates.iter().copied().collect()
    }

    /// A group's lag history, oldest first.
    pub fn lag_of(&self, group: &str) -> Vec<LagPoint> {
        self.lag
            .get(group)
            .map(|points| points.iter().copied().collect())
            .unwrap_or_default()
    }
}

fn push_bounded<T>(ring: &mut VecDeque<T>, item: T) {
    if ring.len() == KEPT {
        ring.pop_front();
    }
    ring.push_back(item);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(at_s: i64, produced: u64, consumed: u64) -> Reading {
        Reading {
            at_ms: at_s * 1000,
            produced,
            consumed,
        }
    }

    #[test]
    fn rates_are_the_counters_difference_over_the_interval() {
        let mut samples = Samples::default();
        samples.record(reading(0, 0, 0), []);
        assert!(samples.rates().is_empty(), "one reading is no rate yet");
        samples.record(reading(10, 100, 50), []);
        samples.record(reading(20, 100, 150), []);
        let rates = samples.rates();
        assert_eq!(rates.len(), 2);
        assert_eq!(
            (rates[0].produced_per_s, rates[0].consumed_per_s),
            (10.0, 5.0)
        );
        assert_eq!(
            (rates[1].produced_per_s, rates[1].consumed_per_s),
            (0.0, 10.0)
        );
        samples.record(reading(30, 5, 5), []);
        assert_eq!(
            samples.rates()[2].produced_per_s,
            0.0,
            "a counter reset is no negative rate"
        );
    }

    #[test]
    fn an_hour_is_kept_and_older_samples_drop_off() {
        let mut samples = Samples::default();
        for i in 0..(KEPT as i64 + 10) {
            samples.record(reading(i * 10, i as u64, 0), [("G".to_string(), i as u64)]);
        }
        assert_eq!(samples.rates().len(), KEPT);
        let lag = samples.lag_of("G");
        assert_eq!(lag.len(), KEPT);
        assert_eq!(lag[0].lag, 10, "the oldest kept");
        assert_eq!(lag[KEPT - 1].lag, KEPT as u64 + 9);
    }

    #[test]
    fn a_group_that_disappears_is_forgotten() {
        let mut samples = Samples::default();
        samples.record(reading(0, 0, 0), [("A".into(), 1), ("B".into(), 2)]);
        samples.record(reading(10, 0, 0), [("B".into(), 3)]);
        assert!(samples.lag_of("A").is_empty());
        assert_eq!(samples.lag_of("B").len(), 2);
    }
}
