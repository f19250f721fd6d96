//! The node's counters, for the Prometheus endpoint of `skiff serve` and `Node::metrics()`.
//!
//! [`Metrics`] is cheap to clone and `Send + Sync`: the message store counts appends, the
//! broker handle counts pulled messages, the remoting bridge counts connections and requests.
//! Each update takes one short lock per batch (a whole append, a whole pull), never one per
//! message. Gauges that are facts of the store (lag, store bytes) are not counted here: the
//! broker reads them when asked ([`crate::broker::BrokerHandle::metrics`]), so they cannot drift.
//! [`MetricsSnapshot::to_prometheus`] renders the text exposition format; it is pure.

use crate::logic::lite::{split_lmq, LMQ_PREFIX};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Distinct request codes counted one by one (RocketMQ has about 150).
pub const MAX_REQUEST_CODES: usize = 256;
/// Where requests of further codes are counted; rendered as `code="other"`.
pub const OTHER_CODE: i32 = i32::MIN;

pub use skiff_storage::stats::LATENCY_BUCKETS;

/// Counts of observations per bucket of [`LATENCY_BUCKETS`] (not cumulative), the count and
/// the sum: the store's fsync counts and the request latencies share one shape.
pub type Histogram = skiff_storage::stats::LatencySnapshot;

/// Requests of one request code.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestStats {
    pub count: u64,
    /// Answers by response code (a pull that finds nothing new answers 19, which is no error,
    /// so the codes are kept rather than judged); oneway requests have none.
    pub responses: BTreeMap<i32, u64>,
    pub latency: Histogram,
}

/// Messages appended to one queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueCounts {
    pub messages: u64,
    pub body_bytes: u64,
}

/// Where a consumer group stands on one queue, read from the store and the offset table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupLag {
    pub group: String,
    pub topic: String,
    pub queue_id: u32,
    /// The queue's max offset (the next to be written).
    pub broker_offset: u64,
    pub consumer_offset: u64,
    pub lag: u64,
    /// Pulled but not committed yet.
    pub in_flight: u64,
}

/// Everything the node reports, at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// Per (topic, queue id).
    pub produced: BTreeMap<(String, u32), QueueCounts>,
    /// Messages handed to consumers by pulls, per (group, topic, queue id).
    pub consumed: BTreeMap<(String, String, u32), u64>,
    pub lag: Vec<GroupLag>,
    /// Bytes of the commit log still stored (its end minus its start).
    pub store_bytes: u64,
    pub connections_open: u64,
    pub connections_accepted: u64,
    /// Connections closed on accept because the open ones were at the cap.
    pub connections_refused: u64,
    /// Idle connections closed at the cap to make room for a newcomer.
    pub connections_evicted: u64,
    /// Connections closed for completing no request, or no frame, in time.
    pub connections_timed_out: u64,
    /// Accepts that failed (out of descriptors, most of the time).
    pub accept_failures: u64,
    /// Consume-queue files holding a descriptor now, and the cap on them.
    pub queue_files_open: u64,
    pub queue_files_open_max: u64,
    /// Consume-queue files closed to make room for another.
    pub queue_file_evictions: u64,
    /// How long the commit log's durability fsyncs took.
    pub fsync: Histogram,
    /// Per request code.
    pub requests: BTreeMap<i32, RequestStats>,
}

#[derive(Default)]
struct Counters {
    /// By topic, then queue id: looked up by `&str`, so counting allocates only for a new topic
    /// or queue. A topic's queues are a few, kept sorted by id in a vector: a map per topic cost
    /// a node of several hundred bytes each, megabytes with tens of thousands of topics.
    produced: Mutex<BTreeMap<String, Vec<(u32, QueueCounts)>>>,
    consumed: Mutex<BTreeMap<(String, String, u32), u64>>,
    requests: Mutex<BTreeMap<i32, RequestStats>>,
    connections_open: AtomicU64,
    connections_accepted: AtomicU64,
    connections_refused: AtomicU64,
    connections_evicted: AtomicU64,
    connections_timed_out: AtomicU64,
    accept_failures: AtomicU64,
}

/// The counting half of the metrics; see the module docs.
#[derive(Clone, Default)]
pub struct Metrics {
    counters: Arc<Counters>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// The topic a queue's counts go under: its own, but one series for all the lite topics of a
/// parent (`%LMQ%$<parent>`, queue 0): a parent may have millions, each made by a first message
/// and gone after its TTL, and a series each would grow the counters and the scrape without
/// bound.
fn series_topic(topic: &str) -> &str {
    match split_lmq(topic) {
        Some((parent, _)) => &topic[..LMQ_PREFIX.len() + parent.len()],
        None => topic,
    }
}

/// A poisoned counter lock means a panic while counting; the counts are still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Metrics {
    /// One appended batch: `(topic, queue id, body bytes)` per message.
    pub fn record_appends<'a>(&self, messages: impl IntoIterator<Item = (&'a str, u32, usize)>) {
        let mut produced = lock(&self.counters.produced);
        for (topic, queue_id, body) in messages {
            let topic = series_topic(topic);
            if !produced.contains_key(topic) {
                produced.insert(topic.to_owned(), Vec::new());
            }
            let Some(queues) = produced.get_mut(topic) else {
                continue;
            };
            let at = match queues.binary_search_by_key(&queue_id, |(id, _)| *id) {
                Ok(at) => at,
                Err(at) => {
                    queues.insert(at, (queue_id, QueueCounts::default()));
                    at
                }
            };
            let counts = &mut queues[at].1;
            counts.messages += 1;
            counts.body_bytes += body as u64;
        }
    }

    /// `messages` handed to `group` by one pull of a queue.
    pub fn record_pulled(&self, group: &str, topic: &str, queue_id: u32, messages: u64) {
        if messages == 0 {
            return;
        }
        *lock(&self.counters.consumed)
            .entry((group.to_owned(), series_topic(topic).to_owned(), queue_id))
            .or_default() += messages;
    }

    /// One request of `code`, answered with `response_code` (none: oneway) after `elapsed`.
    /// Past [`MAX_REQUEST_CODES`] distinct codes (a peer sending made-up ones), new codes are
    /// counted together under [`OTHER_CODE`], so a peer cannot grow the series without bound.
    pub fn record_request(&self, code: i32, elapsed: Duration, response_code: Option<i32>) {
        let mut requests = lock(&self.counters.requests);
        let code = if requests.len() >= MAX_REQUEST_CODES && !requests.contains_key(&code) {
            OTHER_CODE
        } else {
            code
        };
        let stats = requests.entry(code).or_default();
        stats.count += 1;
        if let Some(response_code) = response_code {
            *stats.responses.entry(response_code).or_default() += 1;
        }
        stats.latency.observe(elapsed);
    }

    pub fn connection_opened(&self) {
        self.counters
            .connections_accepted
            .fetch_add(1, Ordering::Relaxed);
        self.counters
            .connections_open
            .fetch_add(1, Ordering::Relaxed);
    }

    /// A connection closed on accept: the open ones were at the cap.
    pub fn connection_refused(&self) {
        self.counters
            .connections_refused
            .fetch_add(1, Ordering::Relaxed);
    }

    /// An idle connection closed at the cap to make room for a newcomer.
    pub fn connection_evicted(&self) {
        self.counters
            .connections_evicted
            .fetch_add(1, Ordering::Relaxed);
    }

    /// A connection closed for completing no request, or no frame, in time.
    pub fn connection_timed_out(&self) {
        self.counters
            .connections_timed_out
            .fetch_add(1, Ordering::Relaxed);
    }

    /// An accept failed (the listener backs off and tries again).
    pub fn accept_failed(&self) {
        self.counters
            .accept_failures
            .fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_closed(&self) {
        // Saturating: a close without its open (a server started before the metrics) is no
        // reason to wrap around.
        let _ = self.counters.connections_open.fetch_update(
            Ordering::Relaxed,
            Ordering::Relaxed,
            |open| Some(open.saturating_sub(1)),
        );
    }

    /// The counters; the broker adds its gauges (lag, store bytes).
    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            produced: lock(&self.counters.produced)
                .iter()
                .flat_map(|(topic, queues)| {
                    queues
                        .iter()
                        .map(|(queue_id, counts)| ((topic.clone(), *queue_id), counts.clone()))
                })
                .collect(),
            consumed: lock(&self.counters.consumed).clone(),
            lag: Vec::new(),
            store_bytes: 0,
            connections_open: self.counters.connections_open.load(Ordering::Relaxed),
            connections_accepted: self.counters.connections_accepted.load(Ordering::Relaxed),
            connections_refused: self.counters.connections_refused.load(Ordering::Relaxed),
            connections_evicted: self.counters.connections_evicted.load(Ordering::Relaxed),
            connections_timed_out: self.counters.connections_timed_out.load(Ordering::Relaxed),
            accept_failures: self.counters.accept_failures.load(Ordering::Relaxed),
            queue_files_open: 0,
            queue_files_open_max: 0,
            queue_file_evictions: 0,
            fsync: Histogram::default(),
            requests: lock(&self.counters.requests).clone(),
        }
    }
}

/// A label value in the exposition format: backslash, double quote and newline escaped.
fn label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The sample lines of one histogram: cumulative buckets, `+Inf`, sum and count; `labels` (may
/// be empty) go before `le`.
fn histogram(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    let sep = if labels.is_empty() { "" } else { "," };
    let mut cumulative = 0;
    for (le, n) in LATENCY_BUCKETS.iter().zip(h.buckets) {
        cumulative += n;
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
        );
    }
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", h.count);
    let braces = |l: &str| {
        if l.is_empty() {
            String::new()
        } else {
            format!("{{{l}}}")
        }
    };
    let _ = writeln!(out, "{name}_sum{} {}", braces(labels), h.sum_seconds);
    let _ = writeln!(out, "{name}_count{} {}", braces(labels), h.count);
}

fn code_label(code: i32) -> String {
    if code == OTHER_CODE {
        "other".to_owned()
    } else {
        code.to_string()
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A per-group gauge: name, help, and the field of [`GroupLag`] it reports.
type GroupGauge = (&'static str, &'static str, fn(&GroupLag) -> u64);

impl MetricsSnapshot {
    /// The Prometheus text exposition format (version 0.0.4).
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        header(
            &mut out,
            "skiff_produced_messages_total",
            "counter",
            "Messages appended, per topic and queue.",
        );
        for ((topic, queue_id), counts) in &self.produced {
            let _ = writeln!(
                out,
                "skiff_produced_messages_total{{topic=\"{}\",queue_id=\"{queue_id}\"}} {}",
                label(topic),
                counts.messages
            );
        }
        header(
            &mut out,
            "skiff_produced_body_bytes_total",
            "counter",
            "Message body bytes appended, per topic and queue.",
        );
        for ((topic, queue_id), counts) in &self.produced {
            let _ = writeln!(
                out,
                "skiff_produced_body_bytes_total{{topic=\"{}\",queue_id=\"{queue_id}\"}} {}",
                label(topic),
                counts.body_bytes
            );
        }
        header(
            &mut out,
            "skiff_consumed_messages_total",
            "counter",
            "Messages handed to consumers by pulls, per group, topic and queue.",
        );
        for ((group, topic, queue_id), messages) in &self.consumed {
            let _ = writeln!(
                out,
                "skiff_consumed_messages_total{{group=\"{}\",topic=\"{}\",queue_id=\"{queue_id}\"}} {messages}",
                label(group),
                label(topic)
            );
        }
        let gauges: [GroupGauge; 3] = [
            (
                "skiff_consumer_lag_messages",
                "Messages of the queue not committed by the group.",
                |l| l.lag,
            ),
            (
                "skiff_consumer_in_flight_messages",
                "Messages pulled by the group and not committed yet.",
                |l| l.in_flight,
            ),
            (
                "skiff_consumer_offset",
                "The group's committed offset.",
                |l| l.consumer_offset,
            ),
        ];
        for (name, help, value) in gauges {
            header(&mut out, name, "gauge", help);
            for l in &self.lag {
                let _ = writeln!(
                    out,
                    "{name}{{group=\"{}\",topic=\"{}\",queue_id=\"{}\"}} {}",
                    label(&l.group),
                    label(&l.topic),
                    l.queue_id,
                    value(l)
                );
            }
        }
        header(
            &mut out,
            "skiff_store_bytes",
            "gauge",
            "Bytes of commit log stored.",
        );
        let _ = writeln!(out, "skiff_store_bytes {}", self.store_bytes);
        header(
            &mut out,
            "skiff_connections_open",
            "gauge",
            "Remoting connections open.",
        );
        let _ = writeln!(out, "skiff_connections_open {}", self.connections_open);
        header(
            &mut out,
            "skiff_connections_accepted_total",
            "counter",
            "Remoting connections accepted.",
        );
        let _ = writeln!(
            out,
            "skiff_connections_accepted_total {}",
            self.connections_accepted
        );
        header(
            &mut out,
            "skiff_connections_refused_total",
            "counter",
            "Remoting connections closed on accept because the open ones were at the cap.",
        );
        let _ = writeln!(
            out,
            "skiff_connections_refused_total {}",
            self.connections_refused
        );
        header(
            &mut out,
            "skiff_connections_evicted_total",
            "counter",
            "Idle connections closed at the cap to make room for a newcomer.",
        );
        let _ = writeln!(
            out,
            "skiff_connections_evicted_total {}",
            self.connections_evicted
        );
        header(
            &mut out,
            "skiff_connections_timed_out_total",
            "counter",
            "Connections closed for completing no request, or no frame, in time.",
        );
        let _ = writeln!(
            out,
            "skiff_connections_timed_out_total {}",
            self.connections_timed_out
        );
        header(
            &mut out,
            "skiff_accept_failures_total",
            "counter",
            "Accepts that failed (out of file descriptors, most often); the listener backs off.",
        );
        let _ = writeln!(out, "skiff_accept_failures_total {}", self.accept_failures);
        header(
            &mut out,
            "skiff_queue_files_open",
            "gauge",
            "Consume-queue files holding a file descriptor.",
        );
        let _ = writeln!(out, "skiff_queue_files_open {}", self.queue_files_open);
        header(
            &mut out,
            "skiff_queue_files_open_max",
            "gauge",
            "The cap on consume-queue files holding a file descriptor.",
        );
        let _ = writeln!(
            out,
            "skiff_queue_files_open_max {}",
            self.queue_files_open_max
        );
        header(
            &mut out,
            "skiff_queue_file_evictions_total",
            "counter",
            "Consume-queue files closed to make room for another.",
        );
        let _ = writeln!(
            out,
            "skiff_queue_file_evictions_total {}",
            self.queue_file_evictions
        );
        header(
            &mut out,
            "skiff_requests_total",
            "counter",
            "Remoting requests, per request code.",
        );
        for (code, stats) in &self.requests {
            let code = code_label(*code);
            let _ = writeln!(
                out,
                "skiff_requests_total{{code=\"{code}\"}} {}",
                stats.count
            );
        }
        header(
            &mut out,
            "skiff_responses_total",
            "counter",
            "Answers, per request code and response code.",
        );
        for (code, stats) in &self.requests {
            let code = code_label(*code);
            for (response_code, n) in &stats.responses {
                let _ = writeln!(
                    out,
                    "skiff_responses_total{{code=\"{code}\",response_code=\"{response_code}\"}} {n}"
                );
            }
        }
        header(
            &mut out,
            "skiff_request_duration_seconds",
            "histogram",
            "Time from a request's arrival to its answer, per request code (long polls included).",
        );
        for (code, stats) in &self.requests {
            let labels = format!("code=\"{}\"", code_label(*code));
            histogram(
                &mut out,
                "skiff_request_duration_seconds",
                &labels,
                &stats.latency,
            );
        }
        header(
            &mut out,
            "skiff_fsync_duration_seconds",
            "histogram",
            "Time of each commit-log durability fsync (group commit or the async flush).",
        );
        histogram(&mut out, "skiff_fsync_duration_seconds", "", &self.fsync);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_and_pulls_are_counted_per_queue_and_group() {
        let m = Metrics::default();
        m.record_appends([("T", 3, 1), ("T", 0, 10), ("T", 0, 5), ("T", 1, 1)]);
        m.record_pulled("g", "T", 0, 2);
        m.record_pulled("g", "T", 0, 0);
        let s = m.snapshot();
        assert_eq!(
            s.produced[&("T".to_owned(), 0)],
            QueueCounts {
                messages: 2,
                body_bytes: 15
            }
        );
        assert_eq!(s.produced[&("T".to_owned(), 1)].messages, 1);
        assert_eq!(s.produced[&("T".to_owned(), 3)].messages, 1);
        assert_eq!(s.produced.len(), 3);
        m.record_appends([("%LMQ%$Chats$s1", 0, 4), ("%LMQ%$Chats$s2", 0, 6)]);
        m.record_pulled("g", "%LMQ%$Chats$s2", 0, 1);
        let s = m.snapshot();
        assert_eq!(s.produced[&("%LMQ%$Chats".to_owned(), 0)].messages, 2);
        assert_eq!(s.produced[&("%LMQ%$Chats".to_owned(), 0)].body_bytes, 10);
        assert_eq!(
            s.consumed[&("g".to_owned(), "%LMQ%$Chats".to_owned(), 0)],
            1
        );
        assert_eq!(
            s.produced.len(),
            4,
            "lite topics count under their parent's one series"
        );
        assert_eq!(s.consumed[&("g".to_owned(), "T".to_owned(), 0)], 2);
        assert_eq!(s.consumed.len(), 2);
    }

    #[test]
    fn histogram_buckets_render_cumulatively_with_inf_sum_and_count() {
        let m = Metrics::default();
        m.record_request(10, Duration::from_micros(50), Some(0));
        m.record_request(10, Duration::from_millis(3), Some(1));
        m.record_request(10, Duration::from_secs(60), None);
        let text = m.snapshot().to_prometheus();
        assert!(
            text.contains("skiff_requests_total{code=\"10\"} 3\n"),
            "{text}"
        );
        assert!(text.contains("skiff_responses_total{code=\"10\",response_code=\"0\"} 1\n"));
        assert!(text.contains("skiff_responses_total{code=\"10\",response_code=\"1\"} 1\n"));
        assert!(
            text.contains("skiff_request_duration_seconds_bucket{code=\"10\",le=\"0.0001\"} 1\n")
        );
        assert!(
            text.contains("skiff_request_duration_seconds_bucket{code=\"10\",le=\"0.0025\"} 1\n")
        );
        assert!(
            text.contains("skiff_request_duration_seconds_bucket{code=\"10\",le=\"0.005\"} 2\n")
        );
        assert!(text.contains("skiff_request_duration_seconds_bucket{code=\"10\",le=\"10\"} 2\n"));
        assert!(text.contains("skiff_request_duration_seconds_bucket{code=\"10\",le=\"+Inf\"} 3\n"));
        assert!(text.contains("skiff_request_duration_seconds_count{code=\"10\"} 3\n"));
    }

    #[test]
    fn made_up_request_codes_beyond_the_cap_share_one_series() {
        let m = Metrics::default();
        for code in 0..MAX_REQUEST_CODES as i32 + 10 {
            m.record_request(code, Duration::from_millis(1), None);
        }
        m.record_request(0, Duration::from_millis(1), None);
        let s = m.snapshot();
        assert_eq!(s.requests.len(), MAX_REQUEST_CODES + 1);
        assert_eq!(s.requests[&OTHER_CODE].count, 10);
        assert_eq!(s.requests[&0].count, 2);
        assert!(s
            .to_prometheus()
            .contains("skiff_requests_total{code=\"other\"} 10\n"));
    }

    #[test]
    fn label_values_are_escaped_and_connections_never_wrap() {
        let m = Metrics::default();
        m.record_appends([("a\"b\\c\nd", 3, 1)]);
        m.connection_closed();
        m.connection_opened();
        let s = m.snapshot();
        assert_eq!((s.connections_open, s.connections_accepted), (1, 1));
        let text = s.to_prometheus();
        assert!(
            text.contains(
                "skiff_produced_messages_total{topic=\"a\\\"b\\\\c\\nd\",queue_id=\"3\"} 1\n"
            ),
            "{text}"
        );
        // Every sample line is `name{labels} value` or `name value`; comments start with '#'.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap_or_default();
            assert!(value.parse::<f64>().is_ok(), "not a sample: {line}");
        }
    }
}
