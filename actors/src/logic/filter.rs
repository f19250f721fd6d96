//! Tag subscriptions (RocketMQ `FilterAPI` / `SubscriptionData`, expression type TAG).
//!
//! A subscription is matched twice: the broker compares the tag hash stored in each consume-queue
//! entry against the subscription's hash set (cheap, no commit-log read, but hashes can collide),
//! and the consumer re-checks the exact tag string of every message it receives.

use std::collections::BTreeSet;

/// The "everything" expression.
pub const SUB_ALL: &str = "*";

/// What a consumer subscribed to on one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub topic: String,
    /// The expression as stored and sent in heartbeats (`subString`): `*` for all.
    pub expression: String,
    /// The tags of a `"A || B"` expression; empty for `*`.
    pub tags: BTreeSet<String>,
    /// [`tag_code`] of each tag, what the broker matches against.
    pub tag_codes: BTreeSet<i64>,
    /// Version the broker compares to keep the newest subscription (RocketMQ: creation time in
    /// millis; given by the caller, as nothing here reads a clock).
    pub sub_version: i64,
}

impl Subscription {
    /// Parse a tag expression. Empty, blank or `*` means every message; otherwise the expression
    /// is split on `||`, each tag trimmed, and empty tags dropped (`"A || B ||"` is `{A, B}`).
    ///
    /// Java checks for `*` before trimming, so it reads `" * "` as a tag named `*`; skiff trims
    /// first because nobody means that. A `*` inside a list (`"A || *"`) stays a literal tag, as in
    /// Java. An expression with no tag left (`"||"`) matches nothing, on both sides.
    pub fn parse(topic: impl Into<String>, expression: &str, sub_version: i64) -> Subscription {
        let trimmed = expression.trim();
        if trimmed.is_empty() || trimmed == SUB_ALL {
            return Subscription {
                topic: topic.into(),
                expression: SUB_ALL.to_string(),
                tags: BTreeSet::new(),
                tag_codes: BTreeSet::new(),
                sub_version,
            };
        }
        let tags: BTreeSet<String> = trimmed
            .split("||")
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect();
        let tag_codes = tags.iter().map(|t| tag_code(t)).collect();
        Subscription {
            topic: topic.into(),
            expression: expression.to_string(),
            tags,
            tag_codes,
            sub_version,
        }
    }

    pub fn is_all(&self) -> bool {
        self.expression == SUB_ALL
    }

    /// Broker side: does a consume-queue entry with this tag code match? Only the low 32 bits are
    /// compared, as Java's `codeSet.contains(tagsCode.intValue())` does (the 8-byte consume-queue
    /// field holds a 32-bit `String.hashCode`).
    pub fn matches_tag_code(&self, code: i64) -> bool {
        self.is_all() || self.tag_codes.contains(&i64::from(code as i32))
    }

    /// Consumer side: the exact re-check after the broker's hash match. A message without a tag
    /// matches only `*`.
    pub fn matches_tag(&self, tag: Option<&str>) -> bool {
        self.is_all() || tag.is_some_and(|t| self.tags.contains(t))
    }
}

/// The tag code stored in consume-queue entries: Java's `String.hashCode` of the tag, widened.
/// A message without tags gets 0 (which is also the code of the empty string).
pub fn tag_code(tag: &str) -> i64 {
    i64::from(java_string_hash(tag))
}

/// Java's `String.hashCode`: `s[0]*31^(n-1) + ... + s[n-1]` with wrapping 32-bit arithmetic over
/// UTF-16 code units (so a character outside the BMP counts as its two surrogates). Must match
/// Java bit for bit: Java producers and brokers compute the same codes.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(sub: &Subscription) -> Vec<&str> {
        sub.tags.iter().map(String::as_str).collect()
    }

    #[test]
    fn java_string_hash_matches_java() {
        // Values from Java's String.hashCode.
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("*"), 42);
        assert_eq!(java_string_hash("TagA"), 2_598_919);
        assert_eq!(java_string_hash("TagB"), 2_598_920);
        assert_eq!(java_string_hash("Hello World"), -862_545_276);
    }

    #[test]
    fn java_string_hash_counts_utf16_code_units() {
        // U+1F600 is the surrogate pair D83D DE00: 0xD83D * 31 + 0xDE00.
        assert_eq!(java_string_hash("\u{1F600}"), 1_772_899);
        assert_eq!(java_string_hash("é"), 0xE9);
    }

    #[test]
    fn star_empty_and_blank_expressions_subscribe_all() {
        for expr in ["*", "", "  ", " * "] {
            let sub = Subscription::parse("t", expr, 1);
            assert!(sub.is_all(), "{expr:?}");
            assert_eq!(sub.expression, "*");
            assert!(sub.tags.is_empty() && sub.tag_codes.is_empty());
        }
    }

    #[test]
    fn expression_splits_on_double_bar_trims_and_drops_empties() {
        let sub = Subscription::parse("t", " TagA ||TagB||  || TagA ", 7);
        assert_eq!(tags(&sub), ["TagA", "TagB"]);
        assert_eq!(sub.tag_codes, BTreeSet::from([2_598_919, 2_598_920]));
        assert_eq!(sub.expression, " TagA ||TagB||  || TagA ");
        assert_eq!(sub.sub_version, 7);
        assert!(!sub.is_all());
    }

    #[test]
    fn single_bar_is_part_of_a_tag() {
        let sub = Subscription::parse("t", "A|B", 0);
        assert_eq!(tags(&sub), ["A|B"]);
    }

    #[test]
    fn star_inside_a_list_is_a_literal_tag() {
        let sub = Subscription::parse("t", "A || *", 0);
        assert!(!sub.is_all());
        assert!(sub.matches_tag(Some("*")));
        assert!(!sub.matches_tag(Some("B")));
    }

    #[test]
    fn expression_with_no_tags_matches_nothing() {
        let sub = Subscription::parse("t", "||", 0);
        assert!(!sub.is_all());
        assert!(!sub.matches_tag_code(0));
        assert!(!sub.matches_tag(Some("A")));
        assert!(!sub.matches_tag(None));
    }

    #[test]
    fn broker_matches_by_tag_code() {
        let sub = Subscription::parse("t", "TagA || TagB", 0);
        assert!(sub.matches_tag_code(tag_code("TagA")));
        assert!(!sub.matches_tag_code(tag_code("TagC")));
        assert!(Subscription::parse("t", "*", 0).matches_tag_code(12345));
    }

    #[test]
    fn broker_compares_only_low_32_bits_of_tag_code() {
        let sub = Subscription::parse("t", "Hello World", 0);
        let code = tag_code("Hello World");
        assert!(code < 0);
        assert!(sub.matches_tag_code(code));
        // The same 32 bits zero-extended (how a reader could see a u32 field) still match.
        assert!(sub.matches_tag_code(i64::from(code as u32)));
    }

    #[test]
    fn consumer_rechecks_exact_tag() {
        let sub = Subscription::parse("t", "TagA", 0);
        assert!(sub.matches_tag(Some("TagA")));
        assert!(!sub.matches_tag(Some("taga")));
        assert!(!sub.matches_tag(None), "untagged messages match only *");
        let all = Subscription::parse("t", "*", 0);
        assert!(all.matches_tag(None));
        assert!(all.matches_tag(Some("anything")));
    }
}
