//! Transactional messages: where a half message waits, what a commit stores, and when a pending
//! half is checked back with its producer (RocketMQ's `TransactionalMessageBridge`,
//! `EndTransactionProcessor` and `TransactionalMessageServiceImpl.check`).
//!
//! A half (prepared) message is stored like any other record, but in [`HALF_TOPIC`] queue 0,
//! with its destination in `REAL_TOPIC` / `REAL_QID`, so no consumer of the real topic sees it.
//! COMMIT copies it to the real queue ([`committed_message`]); ROLLBACK stores nothing. Which
//! halves are resolved is the broker's business (`broker/transaction.rs`); the decisions here are
//! plain functions of the message and the clock.

use skiff_storage::message::property::{REAL_QID, REAL_TOPIC, UNIQ_KEY};
use skiff_storage::message::{property, with_properties, without_properties};
use skiff_storage::message::{MessageToAppend, StoredMessage};
use skiff_storage::transaction_states::HalfState;
use std::time::Duration;

/// Where half messages wait (Java's `TransactionalMessageUtil.buildHalfTopic`). One queue.
pub const HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
/// Offset-table group under which the half queue's check cursor is stored (Java stores its half
/// queue progress under the same consumer group).
pub const HALF_CONSUMER_GROUP: &str = "CID_RMQ_SYS_TRANS";

/// `TRAN_MSG` marks a half (a commit removes it); `PGROUP` names the producer group, whose live
/// members are asked in a check-back.
pub use skiff_storage::message::property::{PRODUCER_GROUP, TRAN_MSG};
/// `__transactionId__`: the half's `UNIQ_KEY`, stamped by the broker when it stores the half.
pub const TRANSACTION_ID: &str = "__transactionId__";
/// Per-message override of the first check time, in seconds.
pub const CHECK_IMMUNITY_TIME_IN_SECONDS: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
/// How often the half was checked back; carried on the check request and the committed message.
pub const TRANSACTION_CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";

/// Transaction type bits of the message sys flag.
pub const TRANSACTION_TYPE_MASK: i32 = 0xC;
pub const TRANSACTION_NOT_TYPE: i32 = 0x0;
pub const TRANSACTION_PREPARED_TYPE: i32 = 0x4;
pub const TRANSACTION_COMMIT_TYPE: i32 = 0x8;
pub const TRANSACTION_ROLLBACK_TYPE: i32 = 0xC;

/// Whether a message to append is a half (prepared) message.
pub fn is_prepared(sys_flag: i32) -> bool {
    sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_PREPARED_TYPE
}

/// The resolution a producer sends in END_TRANSACTION (`commitOrRollback`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionResolution {
    Commit,
    Rollback,
    /// UNKNOW: the producer does not know yet; the half waits for a check-back.
    Unknown,
}

impl TransactionResolution {
    /// The `commitOrRollback` value of END_TRANSACTION: 8, 12, or 0 (UNKNOW). `None` for anything
    /// else, which Java's broker ignores without an answer.
    pub fn from_wire(commit_or_rollback: i32) -> Option<Self> {
        match commit_or_rollback {
            TRANSACTION_COMMIT_TYPE => Some(TransactionResolution::Commit),
            TRANSACTION_ROLLBACK_TYPE => Some(TransactionResolution::Rollback),
            TRANSACTION_NOT_TYPE => Some(TransactionResolution::Unknown),
            _ => None,
        }
    }

    pub fn to_wire(self) -> i32 {
        match self {
            TransactionResolution::Commit => TRANSACTION_COMMIT_TYPE,
            TransactionResolution::Rollback => TRANSACTION_ROLLBACK_TYPE,
            TransactionResolution::Unknown => TRANSACTION_NOT_TYPE,
        }
    }
}

/// Diverts a half message to [`HALF_TOPIC`] queue 0, as Java's `parseHalfMessageInner` does: the
/// destination goes into `REAL_TOPIC` / `REAL_QID`, the `UNIQ_KEY` into `__transactionId__`, and
/// the sys flag's transaction type is cleared. Anything else passes unchanged; the answer says
/// whether the message was diverted.
pub fn route_half(message: MessageToAppend) -> (MessageToAppend, bool) {
    if !is_prepared(message.sys_flag) || message.topic == HALF_TOPIC {
        return (message, false);
    }
    let real_queue = message.queue_id.to_string();
    let uniq = property(&message.properties, UNIQ_KEY)
        .filter(|u| !u.is_empty())
        .map(str::to_owned);
    let mut updates: Vec<(&str, &str)> = Vec::with_capacity(3);
    if let Some(uniq) = uniq.as_deref() {
        updates.push((TRANSACTION_ID, uniq));
    }
    updates.push((REAL_TOPIC, &message.topic));
    updates.push((REAL_QID, &real_queue));
    let properties = with_properties(&message.properties, &updates);
    let half = MessageToAppend {
        topic: HALF_TOPIC.to_string(),
        queue_id: 0,
        sys_flag: message.sys_flag & !TRANSACTION_TYPE_MASK,
        properties,
        ..message
    };
    (half, true)
}

/// A half message that cannot be committed: it names no valid destination.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("half message at commit-log offset {physical_offset} has no valid REAL_TOPIC/REAL_QID")]
pub struct NoDestination {
    pub physical_offset: u64,
}

/// Where a half message was headed: its real topic and queue.
pub fn destination(half: &StoredMessage) -> Result<(String, u32), NoDestination> {
    let missing = NoDestination {
        physical_offset: half.physical_offset,
    };
    let topic = half
        .property(REAL_TOPIC)
        .filter(|t| !t.is_empty() && *t != HALF_TOPIC)
        .ok_or_else(|| missing.clone())?;
    let queue_id = half
        .property(REAL_QID)
        .and_then(|q| q.trim().parse().ok())
        .ok_or(missing)?;
    Ok((topic.to_string(), queue_id))
}

/// What a COMMIT stores (Java's `endMessageTransaction`): the half's body, flag, born time and
/// host and properties, for its real topic and queue, with `REAL_TOPIC`, `REAL_QID` and
/// `TRAN_MSG` removed, the sys flag's transaction type set to commit, and the half's commit-log
/// offset as the prepared-transaction offset. A half that was checked back keeps its
/// `TRANSACTION_CHECK_TIMES` (Java's re-appended half carries it).
pub fn committed_message(
    half: &StoredMessage,
    check_times: u32,
) -> Result<MessageToAppend, NoDestination> {
    let (topic, queue_id) = destination(half)?;
    let mut properties = without_properties(&half.properties, &[REAL_TOPIC, REAL_QID, TRAN_MSG]);
    if check_times > 0 {
        properties = with_properties(
            &properties,
            &[(TRANSACTION_CHECK_TIMES, &check_times.to_string())],
        );
    }
    Ok(MessageToAppend {
        topic,
        queue_id,
        sys_flag: (half.sys_flag & !TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE,
        prepared_transaction_offset: i64::try_from(half.physical_offset).unwrap_or(i64::MAX),
        properties,
        ..MessageToAppend::copy_of(half)
    })
}

/// The half as a check-back request carries it (Java's `sendCheckMessage`): topic and queue reset
/// to the real ones, `TRANSACTION_CHECK_TIMES` set to this check's number.
pub fn message_to_check(
    half: &StoredMessage,
    check_times: u32,
) -> Result<StoredMessage, NoDestination> {
    let (topic, queue_id) = destination(half)?;
    Ok(StoredMessage {
        topic,
        queue_id,
        properties: with_properties(
            &half.properties,
            &[(TRANSACTION_CHECK_TIMES, &check_times.to_string())],
        ),
        ..half.clone()
    })
}

/// How long a half must be pending before its first check: `CHECK_IMMUNITY_TIME_IN_SECONDS`
/// when it parses as a number of seconds, else the broker's `transaction_timeout` (Java's
/// `getImmunityTime`: the property replaces the timeout, it does not raise it).
pub fn check_immunity(properties: &str, transaction_timeout: Duration) -> Duration {
    property(properties, CHECK_IMMUNITY_TIME_IN_SECONDS)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(transaction_timeout)
}

/// Whether an END_TRANSACTION that is not the answer to a check-back comes too late: the half set
/// its own immunity time and is older than it, so only a check-back may resolve it (Java answers
/// ILLEGAL_OPERATION, `rejectCommitOrRollback`).
pub fn end_is_too_late(
    properties: &str,
    born_timestamp: i64,
    now_ms: i64,
    transaction_timeout: Duration,
    from_check: bool,
) -> bool {
    if from_check || property(properties, CHECK_IMMUNITY_TIME_IN_SECONDS).is_none() {
        return false;
    }
    let immunity = check_immunity(properties, transaction_timeout);
    now_ms.saturating_sub(born_timestamp) > duration_ms(immunity)
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// What the check-back loop does with one pending half this round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckDecision {
    /// Too young (or immune) for a check yet.
    Wait,
    /// Ask its producer; this is check number `times` (1-based).
    Check { times: u32 },
    /// Checked `check_max` times already: set it aside for good.
    SetAside,
}

/// The check-back rule (Java's `check` / `needDiscard`): a half whose age (from its born time, as
/// Java measures it) exceeds its immunity ([`check_immunity`]) is checked, at most `check_max`
/// times; the round after the last check sets it aside. A half born in the future (a producer's
/// clock ahead of the broker's) is checked at once, as Java does.
pub fn check_decision(
    born_timestamp: i64,
    immunity: Duration,
    checks_done: u32,
    check_max: u32,
    now_ms: i64,
) -> CheckDecision {
    let age = now_ms.saturating_sub(born_timestamp);
    if age >= 0 && age <= duration_ms(immunity) {
        return CheckDecision::Wait;
    }
    if checks_done >= check_max {
        return CheckDecision::SetAside;
    }
    CheckDecision::Check {
        times: checks_done + 1,
    }
}

/// Why an END_TRANSACTION was refused (Java's `checkPrepareMessage`, `rejectCommitOrRollback`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndRefusal {
    /// No half message at that commit-log offset ("Find prepared transaction message failed").
    NotFound,
    WrongProducerGroup,
    WrongTranStateTableOffset,
    /// The half set its own immunity time and is older: only a check-back may resolve it
    /// (ILLEGAL_OPERATION).
    TooLate,
    /// The half is being resolved by another request right now.
    InProgress,
    /// The half was resolved the other way (or set aside).
    Conflicting(HalfState),
}

/// Why a half message is unusable ([`BrokerError::UnusableHalf`](crate::broker_api::BrokerError::UnusableHalf)).
#[derive(Debug, thiserror::Error)]
pub enum HalfProblem {
    #[error(transparent)]
    Undecodable(#[from] skiff_storage::message::MessageDecodeError),
    #[error(transparent)]
    NoDestination(#[from] NoDestination),
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use skiff_storage::message::encode_properties;

    fn half_to_send(properties: &str) -> MessageToAppend {
        MessageToAppend {
            topic: "Orders".into(),
            queue_id: 3,
            flag: 7,
            sys_flag: TRANSACTION_PREPARED_TYPE | 0x2,
            born_timestamp: 1_000,
            born_host: "10.0.0.1:5000".parse().unwrap(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            properties: properties.to_string(),
            body: Bytes::from_static(b"b"),
        }
    }

    fn stored(message: &MessageToAppend, physical_offset: u64) -> StoredMessage {
        StoredMessage {
            queue_id: message.queue_id,
            flag: message.flag,
            queue_offset: 9,
            physical_offset,
            sys_flag: message.sys_flag,
            born_timestamp: message.born_timestamp,
            born_host: message.born_host,
            store_timestamp: 2_000,
            store_host: "127.0.0.1:9876".parse().unwrap(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: message.body.clone(),
            topic: message.topic.clone(),
            properties: message.properties.clone(),
            stored_size: 100,
        }
    }

    #[test]
    fn a_half_waits_in_the_half_topic_with_its_destination() {
        let props =
            encode_properties(&[(UNIQ_KEY, "U1"), (TRAN_MSG, "true"), (PRODUCER_GROUP, "pg")]);
        let (half, diverted) = route_half(half_to_send(&props));
        assert!(diverted);
        assert_eq!(half.topic, HALF_TOPIC);
        assert_eq!(half.queue_id, 0);
        assert_eq!(
            half.sys_flag, 0x2,
            "transaction type cleared, other bits kept"
        );
        assert_eq!(property(&half.properties, REAL_TOPIC), Some("Orders"));
        assert_eq!(property(&half.properties, REAL_QID), Some("3"));
        assert_eq!(property(&half.properties, TRANSACTION_ID), Some("U1"));
        assert_eq!(property(&half.properties, TRAN_MSG), Some("true"));
    }

    #[test]
    fn plain_and_committed_messages_are_not_diverted() {
        for sys_flag in [0, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE] {
            let message = MessageToAppend {
                sys_flag,
                ..half_to_send("")
            };
            let (same, diverted) = route_half(message.clone());
            assert!(!diverted);
            assert_eq!(same, message);
        }
    }

    #[test]
    fn a_commit_restores_the_destination_and_drops_the_transaction_marks() {
        let props = encode_properties(&[
            (UNIQ_KEY, "U1"),
            (TRAN_MSG, "true"),
            (PRODUCER_GROUP, "pg"),
            ("TAGS", "t"),
        ]);
        let (half, _) = route_half(half_to_send(&props));
        let half = stored(&half, 4096);
        let committed = committed_message(&half, 0).unwrap();
        assert_eq!(
            (committed.topic.as_str(), committed.queue_id),
            ("Orders", 3)
        );
        assert_eq!(committed.sys_flag, TRANSACTION_COMMIT_TYPE | 0x2);
        assert_eq!(committed.prepared_transaction_offset, 4096);
        assert_eq!(committed.flag, 7);
        let expected = encode_properties(&[
            (UNIQ_KEY, "U1"),
            (PRODUCER_GROUP, "pg"),
            ("TAGS", "t"),
            (TRANSACTION_ID, "U1"),
        ]);
        assert_eq!(
            skiff_storage::message::parse_properties(&committed.properties),
            skiff_storage::message::parse_properties(&expected)
        );
        let checked = committed_message(&half, 2).unwrap();
        assert_eq!(
            property(&checked.properties, TRANSACTION_CHECK_TIMES),
            Some("2")
        );
    }

    #[test]
    fn a_half_without_a_destination_cannot_be_committed() {
        let half = stored(&half_to_send(""), 77);
        assert_eq!(
            committed_message(&half, 0),
            Err(NoDestination {
                physical_offset: 77
            })
        );
    }

    #[test]
    fn the_check_request_names_the_real_topic_and_the_check_number() {
        let (half, _) = route_half(half_to_send(&encode_properties(&[(UNIQ_KEY, "U1")])));
        let checked = message_to_check(&stored(&half, 1), 3).unwrap();
        assert_eq!((checked.topic.as_str(), checked.queue_id), ("Orders", 3));
        assert_eq!(checked.property(TRANSACTION_CHECK_TIMES), Some("3"));
        assert_eq!(checked.physical_offset, 1, "offsets stay those of the half");
    }

    #[test]
    fn immunity_replaces_the_timeout_when_it_parses() {
        let timeout = Duration::from_secs(6);
        assert_eq!(check_immunity("", timeout), timeout);
        let props = encode_properties(&[(CHECK_IMMUNITY_TIME_IN_SECONDS, "2")]);
        assert_eq!(check_immunity(&props, timeout), Duration::from_secs(2));
        let bad = encode_properties(&[(CHECK_IMMUNITY_TIME_IN_SECONDS, "soon")]);
        assert_eq!(check_immunity(&bad, timeout), timeout);
    }

    #[test]
    fn halves_are_checked_after_their_immunity_at_most_check_max_times() {
        let immunity = Duration::from_secs(6);
        assert_eq!(
            check_decision(0, immunity, 0, 15, 6_000),
            CheckDecision::Wait
        );
        assert_eq!(
            check_decision(0, immunity, 0, 15, 6_001),
            CheckDecision::Check { times: 1 }
        );
        assert_eq!(
            check_decision(0, immunity, 14, 15, 60_000),
            CheckDecision::Check { times: 15 }
        );
        assert_eq!(
            check_decision(0, immunity, 15, 15, 60_000),
            CheckDecision::SetAside
        );
        // Born in the future by the producer's clock: checked at once, as Java does.
        assert_eq!(
            check_decision(10_000, immunity, 0, 15, 0),
            CheckDecision::Check { times: 1 }
        );
    }

    #[test]
    fn only_a_late_end_of_a_half_with_its_own_immunity_is_refused() {
        let timeout = Duration::from_secs(6);
        let immune = encode_properties(&[(CHECK_IMMUNITY_TIME_IN_SECONDS, "1")]);
        assert!(end_is_too_late(&immune, 0, 1_001, timeout, false));
        assert!(!end_is_too_late(&immune, 0, 1_000, timeout, false));
        assert!(
            !end_is_too_late(&immune, 0, 5_000, timeout, true),
            "a check answer is never late"
        );
        assert!(
            !end_is_too_late("", 0, 60_000, timeout, false),
            "no immunity set: never late"
        );
    }

    #[test]
    fn resolutions_round_trip_their_wire_values() {
        for r in [
            TransactionResolution::Commit,
            TransactionResolution::Rollback,
            TransactionResolution::Unknown,
        ] {
            assert_eq!(TransactionResolution::from_wire(r.to_wire()), Some(r));
        }
        assert_eq!(TransactionResolution::from_wire(4), None);
    }
}
