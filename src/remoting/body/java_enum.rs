//! The Java enums bodies carry, by name or (from some clients) by ordinal.

use serde::de::{Deserializer, Error as _};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Defines a Java enum carried by name (or, from some clients, by ordinal). Variants are
/// listed in Java's ordinal order.
macro_rules! java_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vattr:meta])* $variant:ident = $java:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub enum $name {
            $($(#[$vattr])* $variant),+
        }

        impl $name {
            const ALL: &'static [($name, &'static str)] = &[$(($name::$variant, $java)),+];

            /// Java name.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $java),+
                }
            }

            /// By Java name (case-insensitive).
            pub fn from_name(name: &str) -> Option<Self> {
                let name = name.trim();
                Self::ALL
                    .iter()
                    .find(|(_, n)| n.eq_ignore_ascii_case(name))
                    .map(|(v, _)| *v)
            }

            /// By Java ordinal.
            pub fn from_ordinal(ordinal: i64) -> Option<Self> {
                usize::try_from(ordinal)
                    .ok()
                    .and_then(|i| Self::ALL.get(i))
                    .map(|(v, _)| *v)
            }

            /// Java ordinal.
            pub fn ordinal(self) -> usize {
                Self::ALL.iter().position(|(v, _)| *v == self).unwrap_or(0)
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let v = Value::deserialize(d)?;
                let found = match &v {
                    Value::Null => Some($name::default()),
                    Value::String(s) => $name::from_name(s).or_else(|| {
                        s.trim().parse::<i64>().ok().and_then($name::from_ordinal)
                    }),
                    Value::Number(n) => n.as_i64().and_then($name::from_ordinal),
                    _ => None,
                };
                found.ok_or_else(|| {
                    D::Error::custom(format!(concat!("unknown ", stringify!($name), " {}"), v))
                })
            }
        }
    };
}

java_enum!(
    /// `ConsumeType`: pull (actively), push (passively), pop.
    ConsumeType {
        ConsumeActively = "CONSUME_ACTIVELY",
        #[default]
        ConsumePassively = "CONSUME_PASSIVELY",
        ConsumePop = "CONSUME_POP",
    }
);

java_enum!(
    /// `MessageModel`.
    MessageModel {
        Broadcasting = "BROADCASTING",
        #[default]
        Clustering = "CLUSTERING",
    }
);

java_enum!(
    /// `MessageRequestMode`: whether the broker hands a group's queues out for pull or pop.
    MessageRequestMode {
        #[default]
        Pull = "PULL",
        Pop = "POP",
    }
);

java_enum!(
    /// `ConsumeFromWhere`.
    ConsumeFromWhere {
        #[default]
        ConsumeFromLastOffset = "CONSUME_FROM_LAST_OFFSET",
        ConsumeFromLastOffsetAndFromMinWhenBootFirst =
            "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
        ConsumeFromMinOffset = "CONSUME_FROM_MIN_OFFSET",
        ConsumeFromMaxOffset = "CONSUME_FROM_MAX_OFFSET",
        ConsumeFromFirstOffset = "CONSUME_FROM_FIRST_OFFSET",
        ConsumeFromTimestamp = "CONSUME_FROM_TIMESTAMP",
    }
);
