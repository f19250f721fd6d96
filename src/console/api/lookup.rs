//! The lookups the API's modules share: a message's summary, a message by its offset id, the
//! messages the key index holds under a key, and a dead letter's resends (found by key).

use serde_json::{json, Value};

use skiff_actors::broker::BrokerHandle;
use skiff_storage::message::{decode_records, property, StoredMessage};

use super::ApiError;

/// A message as lists show it.
pub(super) fn summary(message: &StoredMessage) -> Value {
    json!({
        "msg_id": message.offset_msg_id(),
        "uniq_key": message.property(property::UNIQ_KEY),
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "tags": message.property(property::TAGS),
        "keys": message.property(property::KEYS),
        "born_ms": message.born_timestamp,
        "store_ms": message.store_timestamp,
        "body_size": message.body.len(),
    })
}

/// The stored message whose offset message id is `id` (a producer's id has the same shape, so
/// the message found at that offset must carry `id` as its own).
pub(super) fn by_offset_id(
    broker: &BrokerHandle,
    id: &str,
) -> Result<Option<StoredMessage>, ApiError> {
    let Some(physical) = crate::remoting::wire::physical_offset_of(id) else {
        return Ok(None);
    };
    Ok(broker
        .reader()
        .read_by_physical_offset(physical)?
        .filter(|m| m.offset_msg_id().eq_ignore_ascii_case(id)))
}

/// The messages of `topic` the key index holds under `key` (a `KEYS` entry or a `UNIQ_KEY`),
/// the newest first, at most `max`.
pub(super) async fn indexed(
    broker: &BrokerHandle,
    topic: &str,
    key: &str,
    max: usize,
) -> Result<Vec<StoredMessage>, ApiError> {
    let found = broker.query_by_key(topic, key, 0, i64::MAX, max).await?;
    Ok(found
        .records
        .into_iter()
        .filter_map(|record| decode_records(record).ok())
        .flatten()
        .collect())
}

/// The property a resent copy carries: the offset message id of the dead letter it came from.
pub(super) const RESENT_FROM: &str = "SKIFF_RESENT_FROM";

/// The copies of a dead letter that were resent to the topic it came from, oldest first
/// (none for a message that is no dead letter or has no producer's id to find them by).
pub(super) async fn resends_of(
    broker: &BrokerHandle,
    letter: &StoredMessage,
) -> Result<Vec<StoredMessage>, ApiError> {
    let (Some(origin), Some(uniq)) = (
        letter.property(property::RETRY_TOPIC),
        letter.property(property::UNIQ_KEY),
    ) else {
        return Ok(Vec::new());
    };
    if broker.topic(origin)?.is_none() {
        return Ok(Vec::new());
    }
    let letter_id = letter.offset_msg_id();
    let mut copies: Vec<StoredMessage> = indexed(broker, origin, uniq, 64)
        .await?
        .into_iter()
        .filter(|m| m.property(RESENT_FROM) == Some(letter_id.as_str()))
        .collect();
    copies.sort_by_key(|m| m.physical_offset);
    Ok(copies)
}
