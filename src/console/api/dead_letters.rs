//! Dead letters sent back to the topic they came from: one (`POST /messages/{id}/resend`) or
//! every one of a group (`POST /groups/{name}/dlq/resend`).
//!
//! A resent copy names the dead letter it came from ([`RESENT_FROM`]) and keeps its producer's
//! id, so the key index finds a letter's resends in the store itself: a letter resent once is
//! marked so on its page and after a restart, and is not resent again unless asked (`again`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use skiff_actors::broker::BrokerHandle;
use skiff_actors::logic::delay::dlq_topic;
use skiff_storage::message::{decode_records, property, MessageToAppend, StoredMessage};

use super::lookup::{by_offset_id, resends_of, RESENT_FROM};
use super::sends::send_one;
use super::{ApiError, ApiJson, ApiResult};
use crate::console::Console;
use crate::error_text::error_chain;
use skiff_actors::logic::sends::QueueChoice;

/// Sends a dead letter back to the topic it was first sent to (its `RETRY_TOPIC` property),
/// as a new message with the same body, keys and properties and no reconsume count, so the
/// group consumes it again. The dead letter stays where it is.
async fn resend_dead_letter(
    broker: &BrokerHandle,
    letter: &StoredMessage,
) -> Result<Value, ApiError> {
    if !letter
        .topic
        .starts_with(skiff_actors::logic::delay::DLQ_TOPIC_PREFIX)
    {
        return Err(ApiError::bad_request(format!(
            "message {} is in {}, not a dead-letter topic",
            letter.offset_msg_id(),
            letter.topic
        )));
    }
    let Some(original) = letter.property(property::RETRY_TOPIC).map(str::to_owned) else {
        return Err(ApiError::bad_request(format!(
            "dead letter {} does not name the topic it came from (no RETRY_TOPIC)",
            letter.offset_msg_id()
        )));
    };
    let config = broker
        .topic(&original)?
        .ok_or_else(|| ApiError::not_found(format!("topic {original} does not exist")))?;
    // Back to the queue it came from, or the same slot of a topic that has fewer queues now.
    let queue = QueueChoice::Given(letter.queue_id % config.write_queue_nums.max(1));
    let append = MessageToAppend {
        topic: original.clone(),
        queue_id: 0,
        reconsume_times: 0,
        properties: skiff_storage::message::with_properties(
            &skiff_storage::message::without_properties(
                &letter.properties,
                &[
                    property::RETRY_TOPIC,
                    property::DELAY,
                    property::REAL_TOPIC,
                    property::REAL_QID,
                    property::ORIGIN_MESSAGE_ID,
                ],
            ),
            &[(RESENT_FROM, &letter.offset_msg_id())],
        ),
        ..MessageToAppend::copy_of(letter)
    };
    let result = send_one(broker, append, queue).await?;
    Ok(json!({
        "from": letter.offset_msg_id(),
        "topic": original,
        "msg_id": result.offset_msg_id,
        "queue_id": result.queue_id,
        "queue_offset": result.queue_offset,
    }))
}

#[derive(Deserialize)]
pub(super) struct ResendOne {
    /// Resend a letter that was resent before.
    #[serde(default)]
    again: bool,
}

pub(super) async fn resend_one(
    State(console): State<Console>,
    Path(id): Path<String>,
    ApiJson(resend): ApiJson<ResendOne>,
) -> ApiResult<Value> {
    if crate::remoting::wire::physical_offset_of(&id).is_none() {
        return Err(ApiError::bad_request(format!(
            "{id:?} is not an offset message id"
        )));
    }
    console
        .on_broker(move |broker| async move {
            let letter = by_offset_id(&broker, &id)?
                .ok_or_else(|| ApiError::not_found(format!("no message has id {id}")))?;
            if !resend.again {
                if let Some(copy) = resends_of(&broker, &letter).await?.last() {
                    return Err(ApiError::new(
                        StatusCode::CONFLICT,
                        format!(
                            "dead letter {id} was resent before, as {} to {}: send \
                             \"again\": true to send it once more",
                            copy.offset_msg_id(),
                            copy.topic
                        ),
                    ));
                }
            }
            Ok(Json(resend_dead_letter(&broker, &letter).await?))
        })
        .await
}

#[derive(Deserialize)]
pub(super) struct Confirmed {
    #[serde(default)]
    confirm: bool,
    /// Resend the letters that were resent before too.
    #[serde(default)]
    again: bool,
}

/// Every dead letter of the group sent back, but for those resent before (unless `again`).
pub(super) async fn resend_dead_letters(
    State(console): State<Console>,
    Path(group): Path<String>,
    ApiJson(confirmed): ApiJson<Confirmed>,
) -> ApiResult<Value> {
    if !confirmed.confirm {
        return Err(ApiError::bad_request(
            "resending every dead letter delivers them all again: send \"confirm\": true",
        ));
    }
    console
        .on_broker(move |broker| async move {
            let topic = dlq_topic(&group);
            let Some(config) = broker.topic(&topic)? else {
                return Ok(Json(json!({ "resent": [], "skipped": [] })));
            };
            let (mut resent, mut skipped) = (Vec::new(), Vec::new());
            for queue in 0..config.read_queue_nums.max(config.write_queue_nums) {
                let reader = broker.reader();
                let mut offset = reader.min_offset(&topic, queue);
                let end = reader.max_offset(&topic, queue);
                while offset < end {
                    let read = reader.read(&topic, queue, offset, 32, 1 << 20, None)?;
                    let letters = decode_records(read.records).map_err(|e| {
                        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error_chain(&e))
                    })?;
                    if letters.is_empty() {
                        break;
                    }
                    for letter in &letters {
                        if !confirmed.again && !resends_of(&broker, letter).await?.is_empty() {
                            skipped.push(letter.offset_msg_id());
                            continue;
                        }
                        resent.push(resend_dead_letter(&broker, letter).await?);
                    }
                    offset = read.next_begin_offset.max(offset + 1);
                }
            }
            Ok(Json(json!({ "resent": resent, "skipped": skipped })))
        })
        .await
}
