//! Topic and subscription-group attributes as RocketMQ's admin requests change them, by the
//! rules of Java's broker (`AttributeParser.parseToMap`, then `AttributeUtil
//! .alterCurrentAttributes` over `TopicAttributes` or `SubscriptionGroupAttributes`).
//!
//! A topic's attributes come as the `attributes` header of UPDATE_AND_CREATE_TOPIC (17):
//! `+key=value,+key2=value2,-key3`, what `mqadmin updateTopic -a` sends. A group's come as the
//! `attributes` map of UPDATE_AND_CREATE_SUBSCRIPTIONGROUP's (200) body, keys signed the same
//! way (`mqadmin updateSubGroup --attributes +priority.factor=50`). The rules, with Java's
//! refusals:
//!
//! - In the header, entries are separated by `,`; `+key=value` adds or replaces, `-key` removes.
//!   An entry with `=` but no `+` in its key, or without `=` and without `-`, or one given
//!   twice, is refused.
//! - The key after the sign must be non-empty and contain no `+` or `-`; each key once.
//! - Creating (the topic or group does not exist yet) takes only `+` entries. Changing one:
//!   `-key` needs the key to be set.
//! - Every key must be one the kind knows, and every value must pass its check (a set of names,
//!   a range of numbers, `true`/`false`, any text).
//! - Keys not named keep their values.
//!
//! skiff keeps two topic attributes: `lite.topic.expiration` ([`LITE_TOPIC_EXPIRATION`], minutes,
//! -1 to 43,200) and `message.type` ([`MESSAGE_TYPE_ATTRIBUTE`]), as the topic's
//! [`TopicMessageType`]: `UNSPECIFIED` is stored as no message type, `+message.type=MIXED` is
//! refused ([`AttributeRefusal::MixedNotSupported`]) as Java's broker refuses it unless
//! `enableMixedMessageType` is set (off by default). Java also knows `queue.type`, `cleanup.policy` and `reserve.time`;
//! skiff keeps none of them and refuses them as Java refuses a key it does not know. A group
//! keeps every attribute of Java 5.5's `SubscriptionGroupAttributes` ([`GROUP_ATTRIBUTES`]).
//!
//! Every refusal leaves the topic or group as it was.

use std::collections::BTreeMap;

use skiff_storage::metadata::{TopicMessageType, MESSAGE_TYPE_ATTRIBUTE};

/// Java's name of the unspecified message type, a valid value that skiff stores as `None`.
pub const UNSPECIFIED: &str = "UNSPECIFIED";

/// A group's share of pops of a priority topic (0 to 100) that read its highest queue first.
pub const PRIORITY_FACTOR: &str = "priority.factor";

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

/// What values an attribute takes (Java's `Attribute` subclasses and their `verify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttributeKind {
    /// One of `values`; `printed` is the set as Java's refusal prints it (a `HashSet`'s order).
    Names {
        values: &'static [&'static str],
        printed: &'static str,
    },
    /// A number from `min` to `max`, both included.
    Range { min: i64, max: i64 },
    /// `true` or `false`, in any case.
    Boolean,
    /// Any text.
    Text,
}

/// One attribute a topic or group may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttributeSpec {
    pub name: &'static str,
    /// Whether a request may change it once set at creation.
    pub changeable: bool,
    pub kind: AttributeKind,
}

impl AttributeSpec {
    const fn new(name: &'static str, kind: AttributeKind) -> Self {
        AttributeSpec {
            name,
            changeable: true,
            kind,
        }
    }

    fn verify(&self, value: &str) -> Result<(), AttributeRefusal> {
        match self.kind {
            AttributeKind::Names { values, printed } => {
                if values.contains(&value) {
                    Ok(())
                } else {
                    Err(AttributeRefusal::invalid(format!(
                        "value is not in set: {printed}"
                    )))
                }
            }
            AttributeKind::Range { min, max } => {
                // Java's Long.parseLong, then the range.
                let number = value.parse::<i64>().map_err(|_| {
                    AttributeRefusal::invalid(format!("For input string: \"{value}\""))
                })?;
                if number < min || number > max {
                    return Err(AttributeRefusal::invalid(format!(
                        "value is not in range({min}, {max})"
                    )));
                }
                Ok(())
            }
            AttributeKind::Boolean => {
                if value.eq_ignore_ascii_case("true") || value.eq_ignore_ascii_case("false") {
                    Ok(())
                } else {
                    Err(AttributeRefusal::invalid(
                        "boolean attribute format is wrong.",
                    ))
                }
            }
            AttributeKind::Text => Ok(()),
        }
    }
}

/// A lite parent's lite topics expire this many minutes after their last message (-1: never;
/// Java's `TopicAttributes.LITE_EXPIRATION_ATTRIBUTE`).
pub const LITE_TOPIC_EXPIRATION: &str = "lite.topic.expiration";

/// The topic attributes skiff keeps.
const TOPIC_ATTRIBUTES: &[AttributeSpec] = &[
    AttributeSpec::new(
        MESSAGE_TYPE_ATTRIBUTE,
        AttributeKind::Names {
            values: &[
                UNSPECIFIED,
                "NORMAL",
                "FIFO",
                "DELAY",
                "TRANSACTION",
                "PRIORITY",
                "LITE",
                "MIXED",
            ],
            printed: "[UNSPECIFIED, MIXED, TRANSACTION, PRIORITY, FIFO, DELAY, LITE, NORMAL]",
        },
    ),
    // Java's bound: 30 days in minutes.
    AttributeSpec::new(
        LITE_TOPIC_EXPIRATION,
        AttributeKind::Range {
            min: -1,
            max: 43_200,
        },
    ),
];

/// Java 5.5's `SubscriptionGroupAttributes.ALL`, every one changeable.
pub const GROUP_ATTRIBUTES: &[AttributeSpec] = &[
    AttributeSpec::new(PRIORITY_FACTOR, AttributeKind::Range { min: 0, max: 100 }),
    AttributeSpec::new("lite.bind.topic", AttributeKind::Text),
    AttributeSpec::new(
        "lite.sub.model",
        AttributeKind::Names {
            values: &["Shared", "Exclusive"],
            printed: "[Shared, Exclusive]",
        },
    ),
    AttributeSpec::new("lite.sub.reset.offset.exclusive", AttributeKind::Boolean),
    AttributeSpec::new("lite.sub.reset.offset.unsubscribe", AttributeKind::Boolean),
    AttributeSpec::new(
        "lite.sub.client.quota",
        AttributeKind::Range {
            min: -1,
            max: i64::MAX,
        },
    ),
    AttributeSpec::new(
        "lite.sub.client.max.event.cnt",
        AttributeKind::Range {
            min: 10,
            max: i64::MAX,
        },
    ),
    AttributeSpec::new("lite.sub.wildcard", AttributeKind::Text),
];

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

/// Java's `alterCurrentAttributes`: `entries` (signed keys and values) applied to `current`
/// under `schema`. Every entry's form is checked first, then every key and value.
fn alter(
    entries: &[(&str, &str)],
    creating: bool,
    current: &BTreeMap<String, String>,
    schema: &[AttributeSpec],
) -> Result<BTreeMap<String, String>, AttributeRefusal> {
    let mut seen: Vec<&str> = Vec::new();
    let mut sets: Vec<(&str, &str)> = Vec::new();
    let mut removals: Vec<&str> = Vec::new();
    for (key, value) in entries {
        let real_key = key.get(1..).unwrap_or("");
        check_real_key(real_key)?;
        if seen.contains(&real_key) {
            return Err(AttributeRefusal::invalid(format!(
                "alter duplication key. key: {real_key}"
            )));
        }
        seen.push(real_key);
        if creating {
            if !key.starts_with('+') {
                return Err(AttributeRefusal::invalid(format!(
                    "only add attribute is supported while creating topic. key: {real_key}"
                )));
            }
            sets.push((real_key, value));
        } else if key.starts_with('+') {
            sets.push((real_key, value));
        } else if key.starts_with('-') {
            if !current.contains_key(real_key) {
                return Err(AttributeRefusal::invalid(format!(
                    "attempt to delete a nonexistent key: {real_key}"
                )));
            }
            removals.push(real_key);
        } else {
            return Err(AttributeRefusal::invalid(format!(
                "wrong format key: {real_key}"
            )));
        }
    }
    let spec_of = |key: &str| {
        schema
            .iter()
            .find(|spec| spec.name == key)
            .ok_or_else(|| AttributeRefusal::invalid(format!("unsupported key: {key}")))
    };
    for (key, value) in &sets {
        let spec = spec_of(key)?;
        let updating = current.contains_key(*key);
        if updating && !spec.changeable {
            return Err(AttributeRefusal::invalid(format!(
                "attempt to update an unchangeable attribute. key: {key}"
            )));
        }
        spec.verify(value)?;
    }
    for key in &removals {
        if !spec_of(key)?.changeable {
            return Err(AttributeRefusal::invalid(format!(
                "attempt to update an unchangeable attribute. key: {key}"
            )));
        }
    }
    let mut result = current.clone();
    for (key, value) in sets {
        result.insert(key.to_owned(), value.to_owned());
    }
    for key in removals {
        result.remove(key);
    }
    Ok(result)
}

/// A topic's attributes: its message type, and the others by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicAttributes {
    pub message_type: Option<TopicMessageType>,
    pub others: BTreeMap<String, String>,
}

/// The topic's attributes after `modification` (the `attributes` header of
/// UPDATE_AND_CREATE_TOPIC; empty for none) is applied to `current`. `creating` is true when
/// the topic does not exist yet. An empty modification keeps `current`.
pub fn alter_topic_attributes(
    modification: &str,
    creating: bool,
    current: &TopicAttributes,
) -> Result<TopicAttributes, AttributeRefusal> {
    let entries = parse(modification)?;
    let set_key = format!("+{MESSAGE_TYPE_ATTRIBUTE}");
    let sets = |name: &str| entries.iter().any(|(k, v)| *k == set_key && *v == name);
    if sets(TopicMessageType::Mixed.as_str()) {
        return Err(AttributeRefusal::MixedNotSupported);
    }
    let mut all = current.others.clone();
    if let Some(t) = current.message_type {
        all.insert(MESSAGE_TYPE_ATTRIBUTE.to_owned(), t.as_str().to_owned());
    }
    let mut altered = alter(&entries, creating, &all, TOPIC_ATTRIBUTES)?;
    let message_type = altered
        .remove(MESSAGE_TYPE_ATTRIBUTE)
        .filter(|name| name.as_str() != UNSPECIFIED)
        .and_then(|name| TopicMessageType::from_name(&name));
    Ok(TopicAttributes {
        message_type,
        others: altered,
    })
}

/// The topic's message type after `modification` is applied to `current` (other attributes
/// left out; see [`alter_topic_attributes`]).
pub fn alter_message_type(
    modification: &str,
    creating: bool,
    current: Option<TopicMessageType>,
) -> Result<Option<TopicMessageType>, AttributeRefusal> {
    let current = TopicAttributes {
        message_type: current,
        others: BTreeMap::new(),
    };
    Ok(alter_topic_attributes(modification, creating, &current)?.message_type)
}

/// How long a lite parent's lite topics live after their last message: `None` for never
/// (unset, -1 or 0, as Java reads `lite.topic.expiration`).
pub fn lite_topic_expiration(attributes: &BTreeMap<String, String>) -> Option<std::time::Duration> {
    let minutes = attributes
        .get(LITE_TOPIC_EXPIRATION)
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|m| *m > 0)?;
    Some(std::time::Duration::from_secs(minutes * 60))
}

/// A group's attributes after `modification` (the `attributes` map of an
/// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP body, keys signed `+` or `-`) is applied to `current`.
/// `creating` is true when the group does not exist yet.
pub fn alter_group_attributes(
    modification: &BTreeMap<String, String>,
    creating: bool,
    current: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, AttributeRefusal> {
    let entries: Vec<(&str, &str)> = modification
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    alter(&entries, creating, current, GROUP_ATTRIBUTES)
}

/// A group's `priority.factor`, or its default (100) when unset or unreadable.
pub fn priority_factor(attributes: &BTreeMap<String, String>) -> u32 {
    attributes
        .get(PRIORITY_FACTOR)
        .and_then(|v| v.parse::<u32>().ok())
        .map_or(super::priority::DEFAULT_PRIORITY_FACTOR, |f| f.min(100))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lite_parents_expiration_is_kept_beside_its_type_within_javas_range() {
        let lite = alter_topic_attributes(
            "+message.type=LITE,+lite.topic.expiration=30",
            true,
            &TopicAttributes::default(),
        )
        .unwrap();
        assert_eq!(lite.message_type, Some(TopicMessageType::Lite));
        assert_eq!(
            lite_topic_expiration(&lite.others),
            Some(std::time::Duration::from_secs(30 * 60))
        );
        // A change naming only the type keeps the expiration, and -1 means never.
        let changed = alter_topic_attributes("+message.type=LITE", false, &lite).unwrap();
        assert_eq!(changed.others, lite.others);
        let never = alter_topic_attributes("+lite.topic.expiration=-1", false, &lite).unwrap();
        assert_eq!(lite_topic_expiration(&never.others), None);
        assert_eq!(
            alter_topic_attributes("+lite.topic.expiration=43201", false, &lite),
            Err(AttributeRefusal::Invalid(
                "value is not in range(-1, 43200)".to_owned()
            ))
        );
    }
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

    fn signed(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_group_takes_javas_attributes_and_keeps_those_not_named() {
        let created = alter_group_attributes(
            &signed(&[("+priority.factor", "30"), ("+lite.bind.topic", "Chats")]),
            true,
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(
            created,
            signed(&[("lite.bind.topic", "Chats"), ("priority.factor", "30")])
        );
        assert_eq!(priority_factor(&created), 30);
        let changed = alter_group_attributes(
            &signed(&[("-priority.factor", ""), ("+lite.sub.model", "Exclusive")]),
            false,
            &created,
        )
        .unwrap();
        assert_eq!(
            changed,
            signed(&[
                ("lite.bind.topic", "Chats"),
                ("lite.sub.model", "Exclusive")
            ])
        );
        assert_eq!(priority_factor(&changed), 100, "unset is the default");
        assert_eq!(
            alter_group_attributes(&BTreeMap::new(), false, &changed),
            Ok(changed.clone()),
            "a body without attributes keeps them (mqadmin sends none unless asked)"
        );
    }

    #[test]
    fn a_group_attribute_value_is_checked_as_java_checks_it() {
        let cases = [
            ("+priority.factor", "101", "value is not in range(0, 100)"),
            ("+priority.factor", "high", "For input string: \"high\""),
            (
                "+lite.sub.model",
                "shared",
                "value is not in set: [Shared, Exclusive]",
            ),
            (
                "+lite.sub.reset.offset.exclusive",
                "yes",
                "boolean attribute format is wrong.",
            ),
            (
                "+lite.sub.client.max.event.cnt",
                "9",
                "value is not in range(10, 9223372036854775807)",
            ),
            ("+consume.timeout", "1", "unsupported key: consume.timeout"),
        ];
        let current = signed(&[("priority.factor", "50")]);
        for (key, value, remark) in cases {
            assert_eq!(
                alter_group_attributes(&signed(&[(key, value)]), false, &current),
                Err(AttributeRefusal::Invalid(remark.to_owned())),
                "{key}={value}"
            );
        }
        assert_eq!(
            alter_group_attributes(&signed(&[("priority.factor", "5")]), false, &current),
            Err(AttributeRefusal::Invalid(
                "wrong format key: riority.factor".to_owned()
            )),
            "an unsigned key, as a config read back and sent again has, loses its first letter"
        );
        assert_eq!(
            alter_group_attributes(&signed(&[("-priority.factor", "")]), true, &current),
            Err(AttributeRefusal::Invalid(
                "only add attribute is supported while creating topic. key: priority.factor"
                    .to_owned()
            ))
        );
    }
}
