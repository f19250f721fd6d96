//! Message recall (RocketMQ 5.3.2): the handle a timer send answers, and the checks a recall
//! passes before its timer is cancelled.
//!
//! A handle is RocketMQ's `RecallMessageHandle.HandleV1`: URL-safe base64 (padded) of
//! `v1 <topic> <broker> <due ms + 1> <message id>`, the due time being the timer's stored one
//! (`TIMER_OUT_MS`) and the id the message's `UNIQ_KEY`. Clients treat it as opaque, so a
//! handle from an Apache broker and one from skiff read alike. The checks and their order are
//! the Java broker's `RecallMessageProcessor`: switched on, the topic exists (the caller looks
//! that up), the handle decodes, its topic is the request's, its broker is this one, and its
//! time lies ahead, within the timer horizon. Nothing checks that such a timer exists: a handle
//! naming none cancels nothing and is answered like any other, as Apache answers it.

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::{DecodePaddingMode, Engine};

const VERSION: &str = "v1";

/// URL-safe, written with padding as Java's `Base64.getUrlEncoder()`, read with or without it
/// as Java's decoder.
const URL_SAFE: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Why a recall is refused; the messages are the Java broker's remarks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRecall {
    /// Recall is switched off (`recall_message_enable = false`, Apache's default).
    #[error("recall failed, operation is forbidden")]
    Disabled,
    #[error("recall handle is invalid")]
    InvalidHandle,
    #[error("recall failed, topic not match")]
    TopicMismatch,
    /// The handle names another broker.
    #[error("recall failed, broker service not available")]
    OtherBroker,
    /// The handle's time has passed (the timer fired, or is firing) or lies past the horizon.
    #[error("recall failed, timestamp invalid")]
    TimestampInvalid,
}

/// A decoded handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecallHandle {
    pub topic: String,
    pub broker_name: String,
    /// The handle's time (the due time plus one); `None` when it is not a number, which no
    /// check lets through.
    pub timestamp_ms: Option<i64>,
    pub message_id: String,
}

impl RecallHandle {
    /// The handle of a timer stored to fire at `due_ms` (its `TIMER_OUT_MS`).
    pub fn encode(topic: &str, broker_name: &str, due_ms: i64, message_id: &str) -> String {
        let raw = format!(
            "{VERSION} {topic} {broker_name} {} {message_id}",
            due_ms + 1
        );
        URL_SAFE.encode(raw)
    }

    /// Reads a handle as Java does: five or more space-separated parts after decoding, the
    /// first `v1`.
    pub fn decode(handle: &str) -> Result<RecallHandle, InvalidRecall> {
        let raw = URL_SAFE
            .decode(handle.trim())
            .map_err(|_| InvalidRecall::InvalidHandle)?;
        let raw = String::from_utf8(raw).map_err(|_| InvalidRecall::InvalidHandle)?;
        let parts: Vec<&str> = raw.split(' ').collect();
        if parts.len() < 5 || parts[0] != VERSION {
            return Err(InvalidRecall::InvalidHandle);
        }
        Ok(RecallHandle {
            topic: parts[1].to_string(),
            broker_name: parts[2].to_string(),
            timestamp_ms: parts[3].parse().ok(),
            message_id: parts[4].to_string(),
        })
    }

    /// The checks after decoding; answers the due time of the timer to cancel.
    pub fn check(
        &self,
        topic: &str,
        broker_name: &str,
        now_ms: i64,
        max_delay_ms: i64,
    ) -> Result<i64, InvalidRecall> {
        if self.topic != topic {
            return Err(InvalidRecall::TopicMismatch);
        }
        if self.broker_name != broker_name {
            return Err(InvalidRecall::OtherBroker);
        }
        let timestamp = self.timestamp_ms.ok_or(InvalidRecall::TimestampInvalid)?;
        let left = timestamp.saturating_sub(now_ms);
        if left <= 0 || left >= max_delay_ms {
            return Err(InvalidRecall::TimestampInvalid);
        }
        Ok(timestamp - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY_MS: i64 = 86_400_000;

    #[test]
    fn a_handle_reads_back_what_it_was_made_of() {
        let handle = RecallHandle::encode("orders", "skiff", 1_700_000_004_000, "ID-1");
        let read = RecallHandle::decode(&handle).unwrap();
        assert_eq!(read.topic, "orders");
        assert_eq!(read.broker_name, "skiff");
        assert_eq!(read.timestamp_ms, Some(1_700_000_004_001));
        assert_eq!(read.message_id, "ID-1");
        assert_eq!(
            read.check("orders", "skiff", 1_700_000_000_000, 3 * DAY_MS),
            Ok(1_700_000_004_000)
        );
    }

    #[test]
    fn a_handle_is_the_java_brokers_text() {
        // Base64.getUrlEncoder().encodeToString("v1 T b 1001 X".getBytes(UTF_8)) in Java.
        assert_eq!(
            RecallHandle::encode("T", "b", 1000, "X"),
            "djEgVCBiIDEwMDEgWA=="
        );
        // URL-safe: '-' and '_' where the standard alphabet has '+' and '/'; read without
        // padding too.
        let raw = "v1 T?> b 1001 X";
        let encoded = RecallHandle::encode("T?>", "b", 1000, "X");
        assert!(encoded.contains('-') || encoded.contains('_'), "{encoded}");
        let unpadded = encoded.trim_end_matches('=');
        assert_eq!(RecallHandle::decode(unpadded).unwrap().topic, "T?>");
        assert_eq!(
            String::from_utf8(URL_SAFE.decode(&encoded).unwrap()).unwrap(),
            raw
        );
    }

    #[test]
    fn forged_and_mismatched_handles_are_refused_as_java_refuses_them() {
        let bad = |h: &str| RecallHandle::decode(h).unwrap_err();
        assert_eq!(bad(""), InvalidRecall::InvalidHandle);
        assert_eq!(bad("not base64 !"), InvalidRecall::InvalidHandle);
        assert_eq!(
            bad(&URL_SAFE.encode("v2 a b c d")),
            InvalidRecall::InvalidHandle
        );
        assert_eq!(
            bad(&URL_SAFE.encode("v1 a b c")),
            InvalidRecall::InvalidHandle
        );
        let now = 1_700_000_000_000;
        let handle =
            RecallHandle::decode(&RecallHandle::encode("T", "b", now + 5_000, "X")).unwrap();
        assert_eq!(
            handle.check("U", "b", now, DAY_MS),
            Err(InvalidRecall::TopicMismatch)
        );
        assert_eq!(
            handle.check("T", "c", now, DAY_MS),
            Err(InvalidRecall::OtherBroker)
        );
        assert_eq!(
            handle.check("T", "b", now + 5_001, DAY_MS),
            Err(InvalidRecall::TimestampInvalid)
        );
        assert_eq!(
            handle.check("T", "b", now, 5_001),
            Err(InvalidRecall::TimestampInvalid)
        );
        assert_eq!(handle.check("T", "b", now + 5_000, DAY_MS), Ok(now + 5_000));
        let not_a_time = RecallHandle::decode(&URL_SAFE.encode("v1 T b soon X")).unwrap();
        assert_eq!(
            not_a_time.check("T", "b", now, DAY_MS),
            Err(InvalidRecall::TimestampInvalid)
        );
    }
}
