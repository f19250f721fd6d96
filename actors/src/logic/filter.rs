//! Subscriptions (RocketMQ `FilterAPI` / `SubscriptionData`): a tag expression (type TAG) or a
//! SQL92 selector over message properties (type SQL92, [`crate::logic::sql92`]).
//!
//! A subscription is matched twice. For tags the broker compares the tag hash stored in each
//! consume-queue entry against the subscription's hash set (cheap, no commit-log read, but hashes
//! can collide), and the consumer re-checks the exact tag string of every message it receives.
//! For SQL92 the broker evaluates the selector over each record's properties, and the consumer
//! evaluates it again (a broker that does not filter, or filters differently, is caught there).

use std::collections::BTreeSet;
use std::sync::Arc;

use skiff_storage::message::property::TAGS;

use crate::logic::sql92::{Selector, Sql92Error};

/// How a subscription's expression is read (`expressionType` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ExpressionType {
    /// `*` or `TagA || TagB`.
    #[default]
    Tag,
    /// A SQL92 selector over message properties.
    Sql92,
}

impl ExpressionType {
    /// The wire name, `TAG` or `SQL92`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExpressionType::Tag => "TAG",
            ExpressionType::Sql92 => "SQL92",
        }
    }

    /// Reads a wire name, in any case as Java's `ExpressionType` does; `None` for other types.
    pub fn from_wire(name: &str) -> Option<ExpressionType> {
        if name.eq_ignore_ascii_case("TAG") {
            Some(ExpressionType::Tag)
        } else if name.eq_ignore_ascii_case("SQL92") {
            Some(ExpressionType::Sql92)
        } else {
            None
        }
    }
}

/// The "everything" expression.
pub const SUB_ALL: &str = "*";

/// What a consumer subscribed to on one topic.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscription {
    pub topic: String,
    pub expression_type: ExpressionType,
    /// The expression as stored and sent in heartbeats (`subString`): `*` for all.
    pub expression: String,
    /// The compiled selector of a SQL92 subscription.
    pub selector: Option<Arc<Selector>>,
    /// The tags of a `"A || B"` expression; empty for `*`.
    pub tags: BTreeSet<String>,
    /// [`tag_code`] of each tag, what the broker matches against.
    pub tag_codes: BTreeSet<i64>,
    /// Version the broker compares to keep the newest subscription (RocketMQ: creation time in
    /// millis; given by the caller, as nothing here reads a clock).
    pub sub_version: i64,
}

// Selectors hold no NaN (float literals are positive and finite), so equality is reflexive.
impl Eq for Subscription {}

impl Subscription {
    /// A subscription of either type; a SQL92 expression that does not parse is an error.
    pub fn new(
        topic: impl Into<String>,
        expression_type: ExpressionType,
        expression: &str,
        sub_version: i64,
    ) -> Result<Subscription, Sql92Error> {
        match expression_type {
            ExpressionType::Tag => Ok(Subscription::parse(topic, expression, sub_version)),
            ExpressionType::Sql92 => Subscription::sql92(topic, expression, sub_version),
        }
    }

    /// A SQL92 subscription: the expression is compiled now, so a malformed one is refused at
    /// subscribe time.
    pub fn sql92(
        topic: impl Into<String>,
        expression: &str,
        sub_version: i64,
    ) -> Result<Subscription, Sql92Error> {
        let selector = Selector::parse(expression)?;
        Ok(Subscription {
            topic: topic.into(),
            expression_type: ExpressionType::Sql92,
            expression: expression.to_string(),
            selector: Some(Arc::new(selector)),
            tags: BTreeSet::new(),
            tag_codes: BTreeSet::new(),
            sub_version,
        })
    }

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
                expression_type: ExpressionType::Tag,
                expression: SUB_ALL.to_string(),
                selector: None,
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
            expression_type: ExpressionType::Tag,
            expression: expression.to_string(),
            selector: None,
            tags,
            tag_codes,
            sub_version,
        }
    }

    pub fn is_all(&self) -> bool {
        self.expression_type == ExpressionType::Tag && self.expression == SUB_ALL
    }

    /// Broker side: does a consume-queue entry with this tag code match? Only the low 32 bits are
    /// compared, as Java's `codeSet.contains(tagsCode.intValue())` does (the 8-byte consume-queue
    /// field holds a 32-bit `String.hashCode`). A SQL92 subscription passes every entry here and
    /// is decided on the record's properties ([`Subscription::matches_properties`]).
    pub fn matches_tag_code(&self, code: i64) -> bool {
        match self.expression_type {
            ExpressionType::Tag => {
                self.is_all() || self.tag_codes.contains(&i64::from(code as i32))
            }
            ExpressionType::Sql92 => true,
        }
    }

    /// Does a message with these properties (stored wire form) match? For tags this is the
    /// exact tag check, for SQL92 the selector.
    pub fn matches_properties(&self, properties: &str) -> bool {
        match &self.selector {
            Some(selector) => selector.matches(properties),
            None => self.matches_tag(skiff_storage::message::property(properties, TAGS)),
        }
    }

    /// Broker side: the filters a store read applies for this subscription. A tag expression
    /// is checked on the consume queue's tag codes, SQL92 on the record's properties, and `*`
    /// not at all (reads skip the property decode then).
    pub fn store_filters(
        &self,
    ) -> StoreFilters<impl Fn(i64) -> bool + '_, impl Fn(&str) -> bool + '_> {
        let tag_codes = move |code: i64| self.matches_tag_code(code);
        let properties = move |properties: &str| self.matches_properties(properties);
        let (tag_codes, properties) = if self.is_all() {
            (None, None)
        } else if self.selector.is_some() {
            (None, Some(properties))
        } else {
            (Some(tag_codes), None)
        };
        StoreFilters {
            tag_codes,
            properties,
        }
    }

    /// Consumer side: the exact re-check after the broker's hash match. A message without a tag
    /// matches only `*`.
    pub fn matches_tag(&self, tag: Option<&str>) -> bool {
        self.is_all() || tag.is_some_and(|t| self.tags.contains(t))
    }
}

/// The filters of one store read ([`Subscription::store_filters`]), in the form the store's
/// reader takes them.
pub struct StoreFilters<T, P> {
    tag_codes: Option<T>,
    properties: Option<P>,
}

impl<T: Fn(i64) -> bool, P: Fn(&str) -> bool> StoreFilters<T, P> {
    /// The check of a consume-queue entry's tag code, if any.
    pub fn tag_codes(&self) -> Option<&dyn Fn(i64) -> bool> {
        self.tag_codes.as_ref().map(|f| f as &dyn Fn(i64) -> bool)
    }

    /// The check of a record's properties, if any.
    pub fn properties(&self) -> Option<&dyn Fn(&str) -> bool> {
        self.properties.as_ref().map(|f| f as &dyn Fn(&str) -> bool)
    }

    /// No check at all, whatever the subscription.
    pub fn none(self) -> Self {
        StoreFilters {
            tag_codes: None,
            properties: None,
        }
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
    fn store_filters_check_tag_codes_for_tags_properties_for_sql92_and_nothing_for_all() {
        // (type, expression, what the tag-code filter and the property filter say of TagA, a=7)
        let cases = [
            (ExpressionType::Tag, "*", None, None),
            (ExpressionType::Tag, "", None, None),
            (ExpressionType::Tag, "TagA || TagB", Some(true), None),
            (ExpressionType::Tag, "TagB", Some(false), None),
            (ExpressionType::Sql92, "a > 5", None, Some(true)),
            (ExpressionType::Sql92, "a < 5", None, Some(false)),
        ];
        let properties = "TAGS\u{1}TagA\u{2}a\u{1}7\u{2}";
        for (expression_type, expression, tag_match, property_match) in cases {
            let sub = Subscription::new("t", expression_type, expression, 0).unwrap();
            let filters = sub.store_filters();
            let case = format!("{expression_type:?} {expression:?}");
            let tag_said = filters.tag_codes().map(|f| f(tag_code("TagA")));
            assert_eq!(tag_said, tag_match, "{case}");
            assert_eq!(
                filters.properties().map(|f| f(properties)),
                property_match,
                "{case}"
            );
            let none = filters.none();
            assert!(
                none.tag_codes().is_none() && none.properties().is_none(),
                "{case}"
            );
        }
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
    fn sql92_subscriptions_match_on_properties_not_tag_codes() {
        let sub = Subscription::new("t", ExpressionType::Sql92, "a > 5 AND TAGS = 'TagA'", 3)
            .expect("valid selector");
        assert!(!sub.is_all());
        assert!(
            sub.matches_tag_code(tag_code("TagB")),
            "decided on properties"
        );
        assert!(sub.matches_properties("a\u{1}6\u{2}TAGS\u{1}TagA\u{2}"));
        assert!(!sub.matches_properties("a\u{1}6\u{2}TAGS\u{1}TagB\u{2}"));
        assert!(!sub.matches_properties("TAGS\u{1}TagA\u{2}"));
        assert!(Subscription::new("t", ExpressionType::Sql92, "a >", 3).is_err());
        // The tag path still reads TAGS out of the properties.
        let tags = Subscription::new("t", ExpressionType::Tag, "TagA", 3).expect("tags parse");
        assert!(tags.matches_properties("TAGS\u{1}TagA\u{2}"));
        assert!(!tags.matches_properties("a\u{1}1\u{2}"));
    }

    #[test]
    fn expression_type_names_read_in_any_case() {
        assert_eq!(
            ExpressionType::from_wire("sql92"),
            Some(ExpressionType::Sql92)
        );
        assert_eq!(ExpressionType::from_wire("TAG"), Some(ExpressionType::Tag));
        assert_eq!(ExpressionType::from_wire("CLASS"), None);
        assert_eq!(ExpressionType::Sql92.as_str(), "SQL92");
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
