//! Message traces as RocketMQ's clients write them (`enableMsgTrace`): messages of the trace
//! topic (`RMQ_SYS_TRACE_TOPIC` by default) whose keys are the traced messages' ids and whose
//! body holds trace records, each a `\u{1}`-separated line ended by `\u{2}`:
//!
//! * `Pub`: time, region, producer group, topic, message id, tags, keys, store host, body
//!   length, cost (ms), message type, then (newer clients) offset message id, success, client host;
//! * `SubBefore`: time, region, consumer group, request id, message id, retry times, keys;
//! * `SubAfter`: request id, message id, cost, success, keys, then (newer) context code, time,
//!   consumer group;
//! * `EndTransaction`: time, region, group, topic, message id, tags, keys, store host, message
//!   type, transaction id, transaction state, from a check-back;
//! * `Recall`: time, region, group, topic, message id, success.
//!
//! [`events_of`] reads a trace body into the events of one message, for its timeline.

use serde::Serialize;

/// The trace topic RocketMQ's clients write to unless configured otherwise.
pub const DEFAULT_TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";

const CONTENT_SEPARATOR: char = '\u{1}';
const RECORD_SEPARATOR: char = '\u{2}';

/// One step in a message's life, as a client traced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceEvent {
    /// `Pub`, `SubBefore`, `SubAfter`, `EndTransaction` or `Recall`.
    pub kind: String,
    pub msg_id: String,
    /// When it happened (ms since the epoch); old clients' `SubAfter` records have none.
    pub at_ms: Option<i64>,
    /// The producer or consumer group.
    pub group: Option<String>,
    pub topic: Option<String>,
    pub cost_ms: Option<i64>,
    pub success: Option<bool>,
    /// Pairs a consumer's `SubBefore` with its `SubAfter`.
    pub request_id: Option<String>,
    pub retry_times: Option<i64>,
    pub store_host: Option<String>,
    pub client_host: Option<String>,
    pub transaction_state: Option<String>,
}

impl TraceEvent {
    fn new(kind: &str, msg_id: &str) -> TraceEvent {
        TraceEvent {
            kind: kind.to_owned(),
            msg_id: msg_id.to_owned(),
            at_ms: None,
            group: None,
            topic: None,
            cost_ms: None,
            success: None,
            request_id: None,
            retry_times: None,
            store_host: None,
            client_host: None,
            transaction_state: None,
        }
    }
}

/// The events of `msg_id` (a client message id, or for `Pub` records also the offset message
/// id) in a trace body, in the order written; records that do not parse are skipped.
pub fn events_of(body: &str, msg_id: &str) -> Vec<TraceEvent> {
    body.split(RECORD_SEPARATOR)
        .filter_map(parse_record)
        .filter(|(event, offset_id)| event.msg_id == msg_id || offset_id.as_deref() == Some(msg_id))
        .map(|(event, _)| event)
        .collect()
}

/// A record and, for `Pub`, the offset message id it names.
fn parse_record(record: &str) -> Option<(TraceEvent, Option<String>)> {
    let line: Vec<&str> = record.split(CONTENT_SEPARATOR).collect();
    let text = |i: usize| line.get(i).map(|s| s.to_string()).filter(|s| !s.is_empty());
    let number = |i: usize| line.get(i).and_then(|s| s.trim().parse::<i64>().ok());
    let flag = |i: usize| line.get(i).and_then(|s| s.trim().parse::<bool>().ok());
    let kind = *line.first()?;
    match kind {
        "Pub" if line.len() >= 12 => {
            let mut event = TraceEvent::new(kind, line[5]);
            event.at_ms = number(1);
            event.group = text(3);
            event.topic = text(4);
            event.store_host = text(8);
            event.cost_ms = number(10);
            let offset_id = if line.len() >= 14 { text(12) } else { None };
            event.success = match line.len() {
                13 => flag(12),
                n if n >= 14 => flag(13),
                _ => None,
            };
            event.client_host = text(14);
            Some((event, offset_id))
        }
        "SubBefore" if line.len() >= 7 => {
            let mut event = TraceEvent::new(kind, line[5]);
            event.at_ms = number(1);
            event.group = text(3);
            event.request_id = text(4);
            event.retry_times = number(6);
            Some((event, None))
        }
        "SubAfter" if line.len() >= 6 => {
            let mut event = TraceEvent::new(kind, line[2]);
            event.request_id = text(1);
            event.cost_ms = number(3);
            event.success = flag(4);
            event.at_ms = number(7);
            event.group = text(8);
            Some((event, None))
        }
        "EndTransaction" if line.len() >= 13 => {
            let mut event = TraceEvent::new(kind, line[5]);
            event.at_ms = number(1);
            event.group = text(3);
            event.topic = text(4);
            event.store_host = text(8);
            event.transaction_state = text(11);
            Some((event, None))
        }
        "Recall" if line.len() >= 7 => {
            let mut event = TraceEvent::new(kind, line[5]);
            event.at_ms = number(1);
            event.group = text(3);
            event.topic = text(4);
            event.success = flag(6);
            Some((event, None))
        }
        _ => None,
    }
}

/// Events in the order they happened: by time, an event without one right after the event of
/// the same request (a `SubAfter` after its `SubBefore`).
pub fn in_order(mut events: Vec<TraceEvent>) -> Vec<TraceEvent> {
    let time_of = |event: &TraceEvent, all: &[TraceEvent]| {
        event.at_ms.or_else(|| {
            all.iter()
                .find(|e| e.at_ms.is_some() && e.request_id == event.request_id)
                .and_then(|e| e.at_ms.map(|t| t + e.cost_ms.unwrap_or(0)))
        })
    };
    // An untimed event sorts after a timed one at the same moment (its request's start).
    let keys: Vec<(i64, bool, usize)> = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let at = time_of(e, &events).unwrap_or(i64::MAX);
            (at, e.at_ms.is_none(), i)
        })
        .collect();
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by_key(|&i| keys[i]);
    let mut slots: Vec<Option<TraceEvent>> = events.drain(..).map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testsuite::java_trace_body;

    #[test]
    fn a_java_clients_trace_records_read_as_the_messages_events() {
        let events = events_of(&java_trace_body("AC1"), "AC1");
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["Pub", "SubBefore", "SubAfter"]);
        let sent = &events[0];
        assert_eq!(sent.group.as_deref(), Some("PG"));
        assert_eq!(sent.topic.as_deref(), Some("Orders"));
        assert_eq!((sent.cost_ms, sent.success), (Some(3), Some(true)));
        assert_eq!(sent.client_host.as_deref(), Some("10.0.0.5"));
        let done = &events[2];
        assert_eq!(done.request_id.as_deref(), Some("req-1"));
        assert_eq!(
            (done.cost_ms, done.success, done.at_ms),
            (Some(25), Some(true), Some(1733390000125))
        );
        assert_eq!(done.group.as_deref(), Some("GID_orders"));
        assert_eq!(
            events_of(&java_trace_body("AC1"), "7F00000100002A9F0000000000000000").len(),
            1,
            "a Pub record is found by its offset message id too"
        );
    }

    #[test]
    fn old_and_broken_records_are_read_as_far_as_they_go() {
        let old_after = "SubAfter\u{1}req-9\u{1}M\u{1}5\u{1}false\u{1}k\u{2}";
        let events = events_of(old_after, "M");
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].at_ms, events[0].success), (None, Some(false)));
        assert!(events_of("Pub\u{1}x\u{2}garbage\u{2}", "x").is_empty());
    }

    #[test]
    fn events_are_ordered_by_time_and_an_untimed_one_follows_its_request() {
        let mut a = TraceEvent::new("SubAfter", "M");
        a.request_id = Some("r".into());
        a.cost_ms = Some(5);
        let mut b = TraceEvent::new("SubBefore", "M");
        b.request_id = Some("r".into());
        b.at_ms = Some(200);
        let mut p = TraceEvent::new("Pub", "M");
        p.at_ms = Some(100);
        let kinds: Vec<String> = in_order(vec![a, b, p])
            .into_iter()
            .map(|e| e.kind)
            .collect();
        assert_eq!(kinds, ["Pub", "SubBefore", "SubAfter"]);
    }
}
