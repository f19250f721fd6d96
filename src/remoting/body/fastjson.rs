//! fastjson's JSON as Java clients write it, read leniently: [`normalize_fastjson`] turns
//! unquoted object keys and single-quoted strings into standard JSON, [`decode_json`] decodes a
//! body after it, and the field deserializers take Java's defaults for missing fields and nulls,
//! numbers sent as strings and booleans sent as strings or numbers.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::Deserialize;
use serde_json::Value;

use super::BodyError;

/// Rewrites fastjson's non-standard JSON into standard JSON: unquoted object keys
/// (`{0:"a"}`, `{brokerName:"b"}`) are quoted and single-quoted strings become double-quoted.
/// Text that needs no change is returned borrowed. Invalid JSON stays invalid.
pub fn normalize_fastjson(input: &str) -> Cow<'_, str> {
    let b = input.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    // true = object, false = array
    let mut stack: Vec<bool> = Vec::new();
    let mut expect_key = false;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'"' => {
                i = skip_string(b, i);
                expect_key = false;
            }
            b'\'' => {
                let (end, converted) = convert_single_quoted(input, i);
                let o = out.get_or_insert_with(|| String::with_capacity(input.len() + 16));
                o.push_str(&input[copied..i]);
                o.push_str(&converted);
                copied = end;
                i = end;
                expect_key = false;
            }
            b'{' => {
                stack.push(true);
                expect_key = true;
                i += 1;
            }
            b'[' => {
                stack.push(false);
                expect_key = false;
                i += 1;
            }
            b'}' | b']' => {
                stack.pop();
                expect_key = false;
                i += 1;
            }
            b',' => {
                expect_key = stack.last() == Some(&true);
                i += 1;
            }
            c if c.is_ascii_whitespace() => i += 1,
            c if expect_key && is_key_char(c) => {
                let start = i;
                let mut end = i;
                while end < b.len() && is_key_char(b[end]) {
                    end += 1;
                }
                let mut j = end;
                while j < b.len() && b[j].is_ascii_whitespace() {
                    j += 1;
                }
                if b.get(j) == Some(&b':') {
                    let o = out.get_or_insert_with(|| String::with_capacity(input.len() + 16));
                    o.push_str(&input[copied..start]);
                    o.push('"');
                    o.push_str(&input[start..end]);
                    o.push('"');
                    copied = end;
                }
                i = end;
                expect_key = false;
            }
            _ => {
                expect_key = false;
                i += 1;
            }
        }
    }
    match out {
        None => Cow::Borrowed(input),
        Some(mut o) => {
            o.push_str(&input[copied..]);
            Cow::Owned(o)
        }
    }
}

pub(super) fn is_key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c == b'-'
}

/// Index just past the string starting at `start` (double or single quoted), or the end.
pub(super) fn skip_string(b: &[u8], start: usize) -> usize {
    let quote = b[start];
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// Converts the single-quoted string starting at `start`; returns the index past it and the
/// double-quoted equivalent. An unterminated string is returned unchanged.
pub(super) fn convert_single_quoted(input: &str, start: usize) -> (usize, String) {
    let b = input.as_bytes();
    let mut s = String::from("\"");
    let mut i = start + 1;
    let mut run = i;
    while i < b.len() {
        match b[i] {
            b'\\' if b.get(i + 1) == Some(&b'\'') => {
                s.push_str(&input[run..i]);
                s.push('\'');
                i += 2;
                run = i;
            }
            b'\\' => i += 2,
            b'"' => {
                s.push_str(&input[run..i]);
                s.push_str("\\\"");
                i += 1;
                run = i;
            }
            b'\'' => {
                s.push_str(&input[run..i]);
                s.push('"');
                return (i + 1, s);
            }
            _ => i += 1,
        }
    }
    (b.len(), input[start..].to_owned())
}

/// Decodes a fastjson body into `T`.
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8], kind: &'static str) -> Result<T, BodyError> {
    let text = std::str::from_utf8(bytes).map_err(|source| BodyError::Utf8 { kind, source })?;
    let text = normalize_fastjson(text);
    serde_json::from_str(&text).map_err(|source| BodyError::Json { kind, source })
}

// ---- lenient field deserializers -------------------------------------------------------

pub(super) fn value_to_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
                .map(|f| f as i64)
        }),
        Value::String(s) => {
            let t = s.trim();
            if t.is_empty() {
                Some(0)
            } else {
                t.parse().ok()
            }
        }
        Value::Bool(b) => Some(i64::from(*b)),
        Value::Null => Some(0),
        _ => None,
    }
}

pub(super) fn de_i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let v = Value::deserialize(d)?;
    value_to_i64(&v).ok_or_else(|| D::Error::custom(format!("expected an integer, got {v}")))
}

pub(super) fn de_i32<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    let n = de_i64(d)?;
    i32::try_from(n).map_err(|_| D::Error::custom(format!("integer {n} out of range")))
}

pub(super) fn de_bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Bool(b) => b,
        Value::String(s) => super::super::headers::parse_bool(&s),
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        _ => false,
    })
}

pub(super) fn value_to_string(v: Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s),
        other => Some(other.to_string()),
    }
}

pub(super) fn de_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(value_to_string(Value::deserialize(d)?).unwrap_or_default())
}

pub(super) fn de_opt_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(value_to_string(Value::deserialize(d)?))
}

pub(super) fn de_null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

pub(super) fn de_string_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let items = Option::<Vec<Value>>::deserialize(d)?.unwrap_or_default();
    Ok(items.into_iter().filter_map(value_to_string).collect())
}

pub(super) fn de_i32_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<i32>, D::Error> {
    let items = Option::<Vec<Value>>::deserialize(d)?.unwrap_or_default();
    items
        .iter()
        .map(|v| {
            value_to_i64(v)
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| D::Error::custom(format!("expected an integer, got {v}")))
        })
        .collect()
}

pub(super) fn de_broker_addrs<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<i64, String>, D::Error> {
    let map = Option::<BTreeMap<String, Value>>::deserialize(d)?.unwrap_or_default();
    let mut out = BTreeMap::new();
    for (k, v) in map {
        let id: i64 = k
            .trim()
            .parse()
            .map_err(|_| D::Error::custom(format!("broker id {k:?} is not an integer")))?;
        if let Some(addr) = value_to_string(v) {
            out.insert(id, addr);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_quotes_unquoted_keys_and_single_quotes() {
        assert!(matches!(
            normalize_fastjson(r#"{"a":{"0":"x"}}"#),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            normalize_fastjson(r#"{"brokerAddrs":{0:"127.0.0.1:10911",1:"h:2"}}"#),
            r#"{"brokerAddrs":{"0":"127.0.0.1:10911","1":"h:2"}}"#
        );
        assert_eq!(
            normalize_fastjson(r#"{ -1 : "a", name:'it''s', "s":"{0:'x'}"}"#),
            r#"{ "-1" : "a", "name":"it""s", "s":"{0:'x'}"}"#
        );
        assert_eq!(
            normalize_fastjson(r#"{'k':'say "hi" \'x\''}"#),
            r#"{"k":"say \"hi\" 'x'"}"#
        );
        // Values that look like keys are left alone; arrays do not take keys.
        assert_eq!(
            normalize_fastjson("[1, 2, {a:true}]"),
            r#"[1, 2, {"a":true}]"#
        );
        // Broken input stays broken and does not panic.
        for s in ["{", "{'abc", "{\"a\\", "{0", "}}]]", "{a:'\\", "'"] {
            let _ = normalize_fastjson(s);
        }
    }
}
