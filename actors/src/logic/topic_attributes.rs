//! Topic attributes as UPDATE_AND_CREATE_TOPIC (17) changes them: the `attributes` header
//! (`+key=value,+key2=value2,-key3`, what `mqadmin updateTopic -a` sends) applied to a topic's
//! current attributes, by the rules of Java's broker (`AttributeParser.parseToMap`, then
//! `AttributeUtil.alterCurrentAttributes` over `TopicAttributes`).
//!
//! skiff keeps one attribute, `message.type` ([`MESSAGE_TYPE_ATTRIBUTE`]), as the topic's
//! [`TopicMessageType`]. The rules, with Java's refusals:
//!
//! - Entries are separated by `,`; `+key=value` adds or replaces, `-key` removes. An entry with
//!   `=` but no `+` in its key, or without `=` and without `-`, or one given twice, is refused.
//! - `+message.type=MIXED` is refused ([`AttributeRefusal::MixedNotSupported`]), as Java's broker
//!   refuses it unless `enableMixedMessageType` is set (off by default).
//! - The key after the sign must be non-empty and contain no `+` or `-`; each key once.
//! - Creating a topic (it does not exist yet) takes only `+` entries. Changing one: `-key` needs
//!   the key to be set.
//! - The only key is `message.type`; anything else is an unsupported key. Java also knows
//!   `queue.type`, `cleanup.policy` and `reserve.time`; skiff keeps none of them and refuses
//!   them as Java refuses a key it does not know.
//! - The value must be one of Java's names, exactly (case matters): `UNSPECIFIED`, `NORMAL`,
//!   `FIFO`, `DELAY`, `TRANSACTION`, `PRIORITY`, `MIXED`. `UNSPECIFIED` is stored as no message
//!   type. Java 5.5 also takes `LITE`, for lite topics, which skiff does not serve: refused.
//!
//! Every refusal leaves the topic as it was.

use skiff_storage::metadata::{TopicMessageType, MESSAGE_TYPE_ATTRIBUTE};

/// Java's name of the unspecified message type, a valid value that skiff stores as `None`.
pub const UNSPECIFIED: &str = "UNSPECIFIED";

/// Java's refusal of an `attributes` modification. Java's broker answers
/// [`AttributeRefusal::MixedNotSupported`] with INVALID_PARAMETER and the others with
/// SYSTEM_ERROR; the `Display` text is its remark.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttributeRefusal {
    /// `+message.type=MIXED`.
    #[error("MIXED message type is not supported.")]
    MixedNotSupported,
    /// A malformed, unknown, duplicated or misplaced entry, or a value outside the set.
    #[error("{0}")]
    Invalid(String),
}

impl AttributeRefusal {
    fn invalid(remark: impl Into<String>) -> Self {
        AttributeRefusal::Invalid(remark.into())
    }
}

/// Java's `String.split` with a one-character separator: trailing empty parts are dropped.
fn java_split(s: &str, separator: char) -> Vec<&str> {
    let mut parts: Vec<&str> = s.split(separator).collect();
    while parts.last() == Some(&"") {
        parts.pop();
    }
    parts
}

/// Java's `AttributeParser.parseToMap`: the `(signed key, value)` entries, in request order.
fn parse(modification: &str) -> Result<Vec<(&str, &str)>, AttributeRefusal> {
    let mut entries: Vec<(&str, &str)> = Vec::new();
    if modification.is_empty() {
        return Ok(entries);
    }
    for kv in java_split(modification, ',') {
        let (key, value) = if kv.contains('=') {
            let splits = java_split(kv, '=');
            let key = *splits
                .first()
                .ok_or_else(|| AttributeRefusal::invalid("Index 0 out of bounds for length 0"))?;
            let value = *splits.get(1).ok_or_else(|| {
                AttributeRefusal::invalid(format!(
                    "Index 1 out of bounds for length {}",
                    splits.len()
                ))
            })?;
            if !key.contains('+') {
                return Err(AttributeRefusal::invalid(format!(
                    "add/alter attribute format is wrong: {key}"
                )));
            }
            (key, value)
        } else {
            if !kv.contains('-') {
                return Err(AttributeRefusal::invalid(format!(
                    "delete attribute format is wrong: {kv}"
                )));
            }
            (kv, "")
        };
        if entries.iter().any(|(k, _)| *k == key) {
            return Err(AttributeRefusal::invalid(format!("key duplication: {key}")));
        }
        entries.push((key, value));
    }
    Ok(entries)
}

/// Java's `validate` of a key without its sign.
fn check_real_key(real_key: &str) -> Result<(), AttributeRefusal> {
    if real_key.is_empty() || real_key.contains('+') || real_key.contains('-') {
        return Err(AttributeRefusal::invalid("kv string format wrong."));
    }
    Ok(())
}

/// Java 5.5's name of the lite topic type, which skiff does not serve.
const LITE: &str = "LITE";

/// `EnumAttribute.verify` of `message.type`; the set is printed in the order Java 5.5 prints it.
fn message_type_value(value: &str) -> Result<Option<TopicMessageType>, AttributeRefusal> {
    if value == UNSPECIFIED {
        return Ok(None);
    }
    if value == LITE {
        return Err(AttributeRefusal::invalid(
            "message type LITE (RocketMQ 5.5's lite topics) is not served by skiff",
        ));
    }
    match TopicMessageType::from_name(value) {
        Some(t) if t.as_str() == value => Ok(Some(t)),
        _ => Err(AttributeRefusal::invalid(
            "value is not in set: [UNSPECIFIED, MIXED, TRANSACTION, PRIORITY, FIFO, DELAY, LITE, NORMAL]",
        )),
    }
}

/// What an accepted entry does to `message.type`.
enum Change<'a> {
    Set(&'a str),
    Remove,
}

/// The topic's message type after `modification` (the `attributes` header of
/// UPDATE_AND_CREATE_TOPIC; empty for none) is applied to `current`. `creating` is true when
/// the topic does not exist yet. An empty modification keeps `current`.
pub fn alter_message_type(
    modification: &str,
    creating: bool,
    current: Option<TopicMessageType>,
) -> Result<Option<TopicMessageType>, AttributeRefusal> {
    let entries = parse(modification)?;
    let mixed_key = format!("+{MESSAGE_TYPE_ATTRIBUTE}");
    if entries
        .iter()
        .any(|(k, v)| *k == mixed_key && *v == TopicMessageType::Mixed.as_str())
    {
        return Err(AttributeRefusal::MixedNotSupported);
    }

    // `alterCurrentAttributes`: every entry's form first, then every key and value.
    let mut seen: Vec<&str> = Vec::new();
    let mut changes: Vec<(&str, Change)> = Vec::new();
    for (key, value) in entries {
        let mut chars = key.chars();
        chars.next();
        let real_key = chars.as_str();
        check_real_key(real_key)?;
        if seen.contains(&real_key) {
            return Err(AttributeRefusal::invalid(format!(
                "alter duplication key. key: {real_key}"
            )));
        }
        seen.push(real_key);
        let change = if creating {
            if !key.starts_with('+') {
                return Err(AttributeRefusal::invalid(format!(
                    "only add attribute is supported while creating topic. key: {real_key}"
                )));
            }
            Change::Set(value)
        } else if key.starts_with('+') {
            Change::Set(value)
        } else if key.starts_with('-') {
            let is_set = real_key == MESSAGE_TYPE_ATTRIBUTE && current.is_some();
            if !is_set {
                return Err(AttributeRefusal::invalid(format!(
                    "attempt to delete a nonexistent key: {real_key}"
                )));
            }
            Change::Remove
        } else {
            return Err(AttributeRefusal::invalid(format!(
                "wrong format key: {real_key}"
            )));
        };
        changes.push((real_key, change));
    }

    let mut result = current;
    for (key, change) in changes {
        if key != MESSAGE_TYPE_ATTRIBUTE {
            return Err(AttributeRefusal::invalid(format!("unsupported key: {key}")));
        }
        result = match change {
            Change::Set(value) => message_type_value(value)?,
            Change::Remove => None,
        };
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use TopicMessageType::*;

    fn invalid(remark: &str) -> Result<Option<TopicMessageType>, AttributeRefusal> {
        Err(AttributeRefusal::Invalid(remark.to_owned()))
    }

    #[test]
    fn no_modification_keeps_the_current_type() {
        assert_eq!(alter_message_type("", true, None), Ok(None));
        assert_eq!(alter_message_type("", false, Some(Fifo)), Ok(Some(Fifo)));
    }

    #[test]
    fn plus_sets_and_minus_removes_the_message_type() {
        assert_eq!(
            alter_message_type("+message.type=FIFO", true, None),
            Ok(Some(Fifo))
        );
        assert_eq!(
            alter_message_type("+message.type=DELAY", false, Some(Fifo)),
            Ok(Some(Delay))
        );
        assert_eq!(
            alter_message_type("+message.type=TRANSACTION", false, None),
            Ok(Some(Transaction))
        );
        assert_eq!(
            alter_message_type("-message.type", false, Some(Fifo)),
            Ok(None)
        );
        assert_eq!(
            alter_message_type("+message.type=UNSPECIFIED", false, Some(Normal)),
            Ok(None)
        );
        // A trailing comma is dropped, as Java's split drops it.
        assert_eq!(
            alter_message_type("+message.type=NORMAL,", true, None),
            Ok(Some(Normal))
        );
    }

    #[test]
    fn values_outside_javas_set_are_refused_with_its_remark() {
        let remark = "value is not in set: \
            [UNSPECIFIED, MIXED, TRANSACTION, PRIORITY, FIFO, DELAY, LITE, NORMAL]";
        for value in ["ORDER", "fifo", "Fifo", " FIFO"] {
            assert_eq!(
                alter_message_type(&format!("+message.type={value}"), false, Some(Normal)),
                invalid(remark),
                "{value:?}"
            );
        }
    }

    #[test]
    fn mixed_is_refused_as_an_invalid_parameter() {
        for creating in [true, false] {
            assert_eq!(
                alter_message_type("+message.type=MIXED", creating, None),
                Err(AttributeRefusal::MixedNotSupported)
            );
        }
        assert_eq!(
            AttributeRefusal::MixedNotSupported.to_string(),
            "MIXED message type is not supported."
        );
    }

    #[test]
    fn removals_need_an_existing_topic_and_a_set_key() {
        assert_eq!(
            alter_message_type("-message.type", true, None),
            invalid("only add attribute is supported while creating topic. key: message.type")
        );
        assert_eq!(
            alter_message_type("-message.type", false, None),
            invalid("attempt to delete a nonexistent key: message.type")
        );
    }

    #[test]
    fn malformed_entries_are_refused_as_java_refuses_them() {
        let cases = [
            (
                "message.type=FIFO",
                "add/alter attribute format is wrong: message.type",
            ),
            (
                "message.type",
                "delete attribute format is wrong: message.type",
            ),
            ("+message.type=", "Index 1 out of bounds for length 1"),
            ("=", "Index 0 out of bounds for length 0"),
            (
                "+message.type=FIFO,+message.type=FIFO",
                "key duplication: +message.type",
            ),
            (
                "+message.type=FIFO,-message.type",
                "alter duplication key. key: message.type",
            ),
            ("+=FIFO", "kv string format wrong."),
            ("-", "kv string format wrong."),
            ("++message.type=FIFO", "kv string format wrong."),
            ("x+message.type=FIFO", "kv string format wrong."),
            ("x-message.type", "kv string format wrong."),
        ];
        for (modification, remark) in cases {
            assert_eq!(
                alter_message_type(modification, false, Some(Normal)),
                invalid(remark),
                "{modification:?}"
            );
        }
    }

    #[test]
    fn other_java_attributes_are_unsupported_keys() {
        for modification in ["+queue.type=SimpleCQ", "+cleanup.policy=DELETE", "+x=1"] {
            let key = &modification[1..modification.find('=').unwrap()];
            assert_eq!(
                alter_message_type(modification, true, None),
                invalid(&format!("unsupported key: {key}"))
            );
        }
        // The form of every entry is checked before any key is.
        assert_eq!(
            alter_message_type("+x=1,-message.type", false, None),
            invalid("attempt to delete a nonexistent key: message.type")
        );
    }
}
