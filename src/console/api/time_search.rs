//! `GET /messages?topic=T&begin_ms=A&end_ms=B`: the messages of every queue of a topic stored
//! in a time range, oldest first. Each queue is entered where its consume queue's time search
//! puts the range's start, and read until a message stored after its end.

use axum::http::StatusCode;
use serde_json::{json, Value};

use skiff_actors::broker::BrokerHandle;
use skiff_storage::message::{decode_records, StoredMessage};
use skiff_storage::store::BoundaryType;

use super::lookup::summary;
use super::ApiError;
use crate::error_text::error_chain;

/// Messages read from one queue per step.
const STEP: u32 = 64;

/// At most `max` messages of `topic` stored from `begin_ms` to `end_ms` (both included), oldest
/// first over all queues, and whether more were left out.
pub(super) fn search(
    broker: &BrokerHandle,
    topic: &str,
    begin_ms: i64,
    end_ms: i64,
    max: usize,
) -> Result<Value, ApiError> {
    if end_ms < begin_ms {
        return Err(ApiError::bad_request(format!(
            "end_ms ({end_ms}) is before begin_ms ({begin_ms})"
        )));
    }
    let Some(config) = broker.topic(topic)? else {
        return Err(ApiError::not_found(format!("topic {topic} does not exist")));
    };
    let reader = broker.reader();
    let mut found: Vec<StoredMessage> = Vec::new();
    let mut more = false;
    for queue in 0..config.read_queue_nums.max(config.write_queue_nums) {
        let end = reader.max_offset(topic, queue);
        let mut offset = reader
            .search_offset_by_timestamp(topic, queue, begin_ms, BoundaryType::Lower)?
            .max(reader.min_offset(topic, queue));
        let mut taken = 0;
        'queue: while offset < end {
            let read = reader.read(topic, queue, offset, STEP, 4 << 20, None)?;
            let messages = decode_records(read.records)
                .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error_chain(&e)))?;
            if messages.is_empty() {
                break;
            }
            for message in messages {
                if message.store_timestamp > end_ms {
                    break 'queue;
                }
                if message.store_timestamp >= begin_ms {
                    // One queue alone may fill the answer: past that it only tells there is more.
                    if taken == max {
                        more = true;
                        break 'queue;
                    }
                    found.push(message);
                    taken += 1;
                }
            }
            offset = read.next_begin_offset.max(offset + 1);
        }
    }
    found.sort_by_key(|m| (m.store_timestamp, m.queue_id, m.queue_offset));
    if found.len() > max {
        more = true;
        found.truncate(max);
    }
    Ok(json!({
        "messages": found.iter().map(summary).collect::<Vec<_>>(),
        "next": Value::Null,
        "more": more,
    }))
}
