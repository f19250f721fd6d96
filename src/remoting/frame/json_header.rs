//! The JSON header (serType 0, `docs/wire-protocol.md` §1.3): a writer byte-compatible with
//! `serde_json`'s serialization, and a one-pass lenient reader that takes what fastjson and the
//! other clients write.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::super::codes;
use super::{EncodeError, HeaderDecodeError, RemotingCommand};

/// Writes the header as `serde_json` would serialize it (same key order, same escapes), without
/// its per-fragment `io::Write` calls: encoding responses this way was 6% of the broker's
/// instructions under a produce benchmark, most of it the 800-byte `msgId` of batch sends.
pub(super) fn write_json_header(
    cmd: &RemotingCommand,
    dst: &mut BytesMut,
) -> Result<(), EncodeError> {
    dst.extend_from_slice(b"{\"code\":");
    write_json_i32(cmd.code, dst);
    if !cmd.ext_fields.is_empty() {
        dst.extend_from_slice(b",\"extFields\":{");
        for (i, (name, value)) in cmd.ext_fields.iter().enumerate() {
            if i > 0 {
                dst.put_u8(b',');
            }
            write_json_str(name, dst)?;
            dst.put_u8(b':');
            write_json_str(value, dst)?;
        }
        dst.put_u8(b'}');
    }
    dst.extend_from_slice(b",\"flag\":");
    write_json_i32(cmd.flag, dst);
    dst.extend_from_slice(b",\"language\":");
    write_json_str(&cmd.language, dst)?;
    dst.extend_from_slice(b",\"opaque\":");
    write_json_i32(cmd.opaque, dst);
    if let Some(remark) = &cmd.remark {
        dst.extend_from_slice(b",\"remark\":");
        write_json_str(remark, dst)?;
    }
    dst.extend_from_slice(b",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
    write_json_i32(cmd.version, dst);
    dst.put_u8(b'}');
    Ok(())
}

/// A JSON string literal; only strings that need escapes go through `serde_json`.
fn write_json_str(text: &str, dst: &mut BytesMut) -> Result<(), EncodeError> {
    if needs_json_escape(text.as_bytes()) {
        return serde_json::to_writer(dst.writer(), text).map_err(EncodeError::Json);
    }
    dst.reserve(text.len() + 2);
    dst.put_u8(b'"');
    dst.extend_from_slice(text.as_bytes());
    dst.put_u8(b'"');
    Ok(())
}

/// Whether a string has a byte JSON must escape (a control byte, `"` or `\\`), eight bytes
/// per step: the 800-byte `msgId` of every batch-send response passes through here.
fn needs_json_escape(text: &[u8]) -> bool {
    const LOW_BITS: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH_BITS: u64 = u64::from_ne_bytes([0x80; 8]);
    const QUOTES: u64 = u64::from_ne_bytes([b'"'; 8]);
    const BACKSLASHES: u64 = u64::from_ne_bytes([b'\\'; 8]);
    let has_zero_byte = |w: u64| w.wrapping_sub(LOW_BITS) & !w & HIGH_BITS != 0;
    let mut chunks = text.chunks_exact(8);
    for chunk in &mut chunks {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(chunk);
        let word = u64::from_ne_bytes(bytes);
        // Some byte below 0x20 (exact as a yes/no answer for bounds up to 0x80).
        let control = word.wrapping_sub(0x20 * LOW_BITS) & !word & HIGH_BITS != 0;
        if control || has_zero_byte(word ^ QUOTES) || has_zero_byte(word ^ BACKSLASHES) {
            return true;
        }
    }
    chunks
        .remainder()
        .iter()
        .any(|b| *b < 0x20 || *b == b'"' || *b == b'\\')
}

fn write_json_i32(n: i32, dst: &mut BytesMut) {
    let mut digits = [0u8; 11];
    let mut at = digits.len();
    let mut rest = n.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if n < 0 {
        at -= 1;
        digits[at] = b'-';
    }
    dst.extend_from_slice(&digits[at..]);
}

/// Decodes a JSON (serType 0) header, leniently like fastjson: every field is optional
/// (Java's bean defaults), numbers may be numeric strings, `language` is a name or a number,
/// `extFields` values may be strings, numbers, booleans (normalised to strings) or nested JSON
/// (kept as JSON text), nulls are absent, unknown keys (`serializeTypeCurrentRPC` included)
/// are ignored, a repeated key replaces the earlier value. The returned command has an empty
/// body.
pub fn decode_json_header(header: &[u8]) -> Result<RemotingCommand, HeaderDecodeError> {
    let parsed: ParsedJsonHeader<'_> =
        serde_json::from_slice(header).map_err(HeaderDecodeError::Json)?;
    let ParsedJsonHeader::Object(fields) = parsed else {
        return Err(HeaderDecodeError::NotAnObject);
    };
    fields.into_command()
}

/// A JSON header parsed in one pass, straight into its fields (no `serde_json::Value` tree:
/// every request and response header passes through here).
// One per call, on the stack; boxing the fields would cost the allocation this parser avoids.
#[allow(clippy::large_enum_variant)]
pub(super) enum ParsedJsonHeader<'de> {
    Object(HeaderFields<'de>),
    NotAnObject,
}

/// The top-level fields as they appeared, not yet converted. Conversion waits until the whole
/// text has parsed, so that a syntax error anywhere wins over a bad field value and a repeated
/// key is judged on its last value only (as when the header was first parsed into a map).
pub(super) struct HeaderFields<'de> {
    code: Option<JsonFieldValue<'de>>,
    language: Option<JsonFieldValue<'de>>,
    version: Option<JsonFieldValue<'de>>,
    pub(super) opaque: Option<JsonFieldValue<'de>>,
    pub(super) flag: Option<JsonFieldValue<'de>>,
    remark: Option<JsonFieldValue<'de>>,
    /// `Err` holds an `extFields` value that is neither an object nor null.
    ext_fields: Result<BTreeMap<String, String>, JsonFieldValue<'de>>,
}

impl HeaderFields<'_> {
    /// Converts in a fixed field order, so the error reported for a header with several bad
    /// fields does not depend on key order.
    fn into_command(self) -> Result<RemotingCommand, HeaderDecodeError> {
        let code = lenient_i32_or_zero(self.code.as_ref(), "code")?;
        let version = lenient_i32_or_zero(self.version.as_ref(), "version")?;
        let opaque = lenient_i32_or_zero(self.opaque.as_ref(), "opaque")?;
        let flag = lenient_i32_or_zero(self.flag.as_ref(), "flag")?;
        let language = match self.language {
            // Java's `RemotingCommand` default.
            None | Some(JsonFieldValue::Null) => "JAVA".to_owned(),
            Some(JsonFieldValue::Str(s)) => s.into_owned(),
            Some(
                v @ (JsonFieldValue::PosInt(_)
                | JsonFieldValue::NegInt(_)
                | JsonFieldValue::Float(_)),
            ) => lenient_i32(&v, "language")?
                .and_then(|n| u8::try_from(n).ok())
                .map_or(codes::LANGUAGE_OTHER, codes::language_name)
                .to_owned(),
            Some(v) => return Err(invalid_field("language", &v)),
        };
        let remark = match self.remark {
            None | Some(JsonFieldValue::Null) => None,
            Some(JsonFieldValue::Str(s)) => Some(s.into_owned()),
            Some(v) => Some(v.to_json_text()),
        };
        let ext_fields = self
            .ext_fields
            .map_err(|v| invalid_field("extFields", &v))?;
        Ok(RemotingCommand {
            code,
            language,
            version,
            opaque,
            flag,
            remark,
            ext_fields,
            body: Bytes::new(),
        })
    }
}

/// A top-level field's JSON value as the parser delivered it. Strings borrow from the header
/// unless they had escapes; arrays and objects are rare enough to be kept as a `Value`, only
/// ever written back out as text (a non-string remark, or the value quoted in an error).
#[derive(Debug)]
pub(super) enum JsonFieldValue<'de> {
    Null,
    Bool(bool),
    PosInt(u64),
    NegInt(i64),
    Float(f64),
    Str(Cow<'de, str>),
    Compound(Value),
}

impl JsonFieldValue<'_> {
    /// The value as compact JSON text, as `Value`'s `Display` writes it.
    fn to_json_text(&self) -> String {
        match self {
            JsonFieldValue::Null => "null".to_owned(),
            JsonFieldValue::Bool(b) => b.to_string(),
            JsonFieldValue::PosInt(n) => n.to_string(),
            JsonFieldValue::NegInt(n) => n.to_string(),
            JsonFieldValue::Float(f) => Value::from(*f).to_string(),
            JsonFieldValue::Str(s) => Value::from(s.as_ref()).to_string(),
            JsonFieldValue::Compound(v) => v.to_string(),
        }
    }
}

impl<'de> Deserialize<'de> for JsonFieldValue<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonFieldValueVisitor)
    }
}

struct JsonFieldValueVisitor;

impl<'de> Visitor<'de> for JsonFieldValueVisitor {
    type Value = JsonFieldValue<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(JsonFieldValue::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(JsonFieldValue::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(JsonFieldValue::Bool(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(JsonFieldValue::PosInt(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        // `Value` stores non-negative integers as unsigned whichever way they arrive.
        Ok(u64::try_from(v).map_or(JsonFieldValue::NegInt(v), JsonFieldValue::PosInt))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        // `Value` has no NaN or infinity: it turns them into null.
        Ok(if v.is_finite() {
            JsonFieldValue::Float(v)
        } else {
            JsonFieldValue::Null
        })
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(JsonFieldValue::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(JsonFieldValue::Str(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(JsonFieldValue::Str(Cow::Owned(v)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Value::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(JsonFieldValue::Compound)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        Value::deserialize(de::value::MapAccessDeserializer::new(map)).map(JsonFieldValue::Compound)
    }
}

impl<'de> Deserialize<'de> for ParsedJsonHeader<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ParsedJsonHeaderVisitor)
    }
}

struct ParsedJsonHeaderVisitor;

impl<'de> Visitor<'de> for ParsedJsonHeaderVisitor {
    type Value = ParsedJsonHeader<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON header")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = HeaderFields {
            code: None,
            language: None,
            version: None,
            opaque: None,
            flag: None,
            remark: None,
            ext_fields: Ok(BTreeMap::new()),
        };
        while let Some(key) = map.next_key::<HeaderKey>()? {
            match key {
                HeaderKey::Code => fields.code = Some(map.next_value()?),
                HeaderKey::Language => fields.language = Some(map.next_value()?),
                HeaderKey::Version => fields.version = Some(map.next_value()?),
                HeaderKey::Opaque => fields.opaque = Some(map.next_value()?),
                HeaderKey::Flag => fields.flag = Some(map.next_value()?),
                HeaderKey::Remark => fields.remark = Some(map.next_value()?),
                HeaderKey::ExtFields => {
                    fields.ext_fields = map.next_value::<ExtFieldsValue<'de>>()?.0;
                }
                HeaderKey::Other => {
                    map.next_value::<ValidatedAny>()?;
                }
            }
        }
        Ok(ParsedJsonHeader::Object(fields))
    }

    // Any other top-level value is parsed through (a syntax error in it must still be
    // reported as such) and then rejected as not an object.

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(ParsedJsonHeader::NotAnObject)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(ParsedJsonHeader::NotAnObject)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(ParsedJsonHeader::NotAnObject)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(ParsedJsonHeader::NotAnObject)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(ParsedJsonHeader::NotAnObject)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(ParsedJsonHeader::NotAnObject)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<ValidatedAny>()?.is_some() {}
        Ok(ParsedJsonHeader::NotAnObject)
    }
}

/// A top-level key, recognised without allocating (escaped keys included).
enum HeaderKey {
    Code,
    Language,
    Version,
    Opaque,
    Flag,
    Remark,
    ExtFields,
    Other,
}

impl<'de> Deserialize<'de> for HeaderKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(HeaderKeyVisitor)
    }
}

struct HeaderKeyVisitor;

impl Visitor<'_> for HeaderKeyVisitor {
    type Value = HeaderKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a header key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(match v {
            "code" => HeaderKey::Code,
            "language" => HeaderKey::Language,
            "version" => HeaderKey::Version,
            "opaque" => HeaderKey::Opaque,
            "flag" => HeaderKey::Flag,
            "remark" => HeaderKey::Remark,
            "extFields" => HeaderKey::ExtFields,
            _ => HeaderKey::Other,
        })
    }
}

/// The value of `extFields`: an object read straight into the command's map, null as an
/// empty map, anything else kept for the error.
struct ExtFieldsValue<'de>(Result<BTreeMap<String, String>, JsonFieldValue<'de>>);

impl<'de> Deserialize<'de> for ExtFieldsValue<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ExtFieldsVisitor)
    }
}

struct ExtFieldsVisitor;

impl<'de> Visitor<'de> for ExtFieldsVisitor {
    type Value = ExtFieldsValue<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("extFields")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut ext = BTreeMap::new();
        while let Some(key) = map.next_key::<String>()? {
            // Last occurrence wins, and a null one removes the key: a map of JSON values would
            // have kept the null and then dropped it.
            match map.next_value::<ExtFieldValue>()?.0 {
                Some(value) => {
                    ext.insert(key, value);
                }
                None => {
                    ext.remove(&key);
                }
            }
        }
        Ok(ExtFieldsValue(Ok(ext)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(ExtFieldsValue(Ok(BTreeMap::new())))
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.visit_unit()
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        JsonFieldValueVisitor.visit_bool(v).map(Self::invalid)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        JsonFieldValueVisitor.visit_u64(v).map(Self::invalid)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        JsonFieldValueVisitor.visit_i64(v).map(Self::invalid)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        // A non-finite number becomes null (as in `Value`), and a null `extFields` is empty.
        match JsonFieldValueVisitor.visit_f64(v)? {
            JsonFieldValue::Null => self.visit_unit(),
            other => Ok(Self::invalid(other)),
        }
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        JsonFieldValueVisitor
            .visit_borrowed_str(v)
            .map(Self::invalid)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        JsonFieldValueVisitor.visit_str(v).map(Self::invalid)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        JsonFieldValueVisitor.visit_seq(seq).map(Self::invalid)
    }
}

impl<'de> ExtFieldsVisitor {
    fn invalid(value: JsonFieldValue<'de>) -> ExtFieldsValue<'de> {
        ExtFieldsValue(Err(value))
    }
}

/// One `extFields` value as the string the command stores; `None` for null.
struct ExtFieldValue(Option<String>);

impl<'de> Deserialize<'de> for ExtFieldValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ExtFieldValueVisitor)
    }
}

struct ExtFieldValueVisitor;

impl<'de> Visitor<'de> for ExtFieldValueVisitor {
    type Value = ExtFieldValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an extFields value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(ExtFieldValue(None))
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.visit_unit()
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(ExtFieldValue(Some(v.to_string())))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(ExtFieldValue(Some(v.to_string())))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(ExtFieldValue(Some(v.to_string())))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        // serde_json's number formatting ("1.0", "1e20"), not `f64`'s ("1", "100000000000000000000").
        Ok(ExtFieldValue(
            serde_json::Number::from_f64(v).map(|n| n.to_string()),
        ))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(ExtFieldValue(Some(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(ExtFieldValue(Some(v)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        JsonFieldValueVisitor
            .visit_seq(seq)
            .map(|v| ExtFieldValue(Some(v.to_json_text())))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        JsonFieldValueVisitor
            .visit_map(map)
            .map(|v| ExtFieldValue(Some(v.to_json_text())))
    }
}

/// Any JSON value, parsed through the same parser paths as a `Value` (so the same syntax,
/// number range and nesting depth checks apply) but kept nowhere. `serde::de::IgnoredAny`
/// would not do: serde_json skips ignored values with laxer checks (e.g. it accepts `1e400`).
struct ValidatedAny;

impl<'de> Deserialize<'de> for ValidatedAny {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValidatedAnyVisitor)
    }
}

struct ValidatedAnyVisitor;

impl<'de> Visitor<'de> for ValidatedAnyVisitor {
    type Value = ValidatedAny;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(ValidatedAny)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(ValidatedAny)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(ValidatedAny)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(ValidatedAny)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(ValidatedAny)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(ValidatedAny)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(ValidatedAny)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<ValidatedAny>()?.is_some() {}
        Ok(ValidatedAny)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<ValidatedAny, ValidatedAny>()?.is_some() {}
        Ok(ValidatedAny)
    }
}

fn invalid_field(field: &'static str, value: &JsonFieldValue<'_>) -> HeaderDecodeError {
    HeaderDecodeError::InvalidField {
        field,
        value: truncate_for_error(&value.to_json_text()),
    }
}

fn truncate_for_error(s: &str) -> String {
    const MAX: usize = 64;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// [`lenient_i32`] of an optional field, absent and null being 0 (Java's `int` default).
fn lenient_i32_or_zero(
    value: Option<&JsonFieldValue<'_>>,
    field: &'static str,
) -> Result<i32, HeaderDecodeError> {
    match value {
        None => Ok(0),
        Some(v) => Ok(lenient_i32(v, field)?.unwrap_or(0)),
    }
}

/// A JSON value as i32: integer numbers, integral floats, numeric strings (trimmed); null is
/// `None`.
pub(super) fn lenient_i32(
    v: &JsonFieldValue<'_>,
    field: &'static str,
) -> Result<Option<i32>, HeaderDecodeError> {
    let invalid = || invalid_field(field, v);
    match v {
        JsonFieldValue::Null => Ok(None),
        JsonFieldValue::PosInt(n) => i32::try_from(*n).map(Some).map_err(|_| invalid()),
        JsonFieldValue::NegInt(n) => i32::try_from(*n).map(Some).map_err(|_| invalid()),
        // The bound is symmetric, so -2147483648.0 is refused although -2147483648 is not.
        JsonFieldValue::Float(f) if f.fract() == 0.0 && f.abs() <= i32::MAX as f64 => {
            Ok(Some(*f as i32))
        }
        JsonFieldValue::Str(s) => {
            let n = s.trim().parse::<i64>().map_err(|_| invalid())?;
            i32::try_from(n).map(Some).map_err(|_| invalid())
        }
        JsonFieldValue::Float(_) | JsonFieldValue::Bool(_) | JsonFieldValue::Compound(_) => {
            Err(invalid())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::codes::AUTO_CREATE_TOPIC_KEY;
    use super::*;

    #[test]
    fn json_header_without_serialize_type_and_with_loose_types() {
        // As rocketmq-client-cpp / node clients send it: no serializeTypeCurrentRPC, numbers and
        // booleans in extFields, language as a number, unknown keys.
        let header = br#"{"code":"10","language":1,"version":0,"opaque":7,"flag":2,"extFields":{"queueId":3,"batch":false,"unitMode":"0","bornTimestamp":1700000000000,"nothing":null,"nested":{"x":1}},"whatever":[1,2]}"#;
        let cmd = decode_json_header(header).unwrap();
        assert_eq!(cmd.code, 10);
        assert_eq!(cmd.language, "CPP");
        assert_eq!(cmd.opaque, 7);
        assert!(cmd.is_oneway());
        assert_eq!(cmd.ext("queueId"), Some("3"));
        assert_eq!(cmd.ext("batch"), Some("false"));
        assert_eq!(cmd.ext("unitMode"), Some("0"));
        assert_eq!(cmd.ext("bornTimestamp"), Some("1700000000000"));
        assert_eq!(cmd.ext("nothing"), None);
        assert_eq!(cmd.ext("nested"), Some(r#"{"x":1}"#));
    }

    #[test]
    fn json_header_missing_fields_default() {
        let cmd = decode_json_header(br#"{"opaque":5}"#).unwrap();
        assert_eq!(cmd.code, 0);
        assert_eq!(cmd.flag, 0);
        assert_eq!(cmd.version, 0);
        assert_eq!(cmd.remark, None);
        let cmd = decode_json_header(br#"{"code":1,"remark":null,"extFields":null}"#).unwrap();
        assert_eq!(cmd.code, 1);
        assert_eq!(cmd.remark, None);
    }

    #[test]
    fn json_header_rejects_wrong_types() {
        assert!(matches!(
            decode_json_header(br#"[1,2]"#),
            Err(HeaderDecodeError::NotAnObject)
        ));
        assert!(matches!(
            decode_json_header(br#"{"code":"ten"}"#),
            Err(HeaderDecodeError::InvalidField { field: "code", .. })
        ));
        assert!(matches!(
            decode_json_header(br#"{"opaque":4294967296}"#),
            Err(HeaderDecodeError::InvalidField {
                field: "opaque",
                ..
            })
        ));
        assert!(matches!(
            decode_json_header(br#"{"extFields":[1]}"#),
            Err(HeaderDecodeError::InvalidField {
                field: "extFields",
                ..
            })
        ));
        assert!(matches!(
            decode_json_header(br#"{"code":1"#),
            Err(HeaderDecodeError::Json(_))
        ));
    }

    /// The SEND_BATCH_MESSAGE header the bench client sends, as encoded by `encode`.
    fn send_batch_header() -> String {
        format!(
            r#"{{"code":320,"extFields":{{"a":"bench-producer","b":"bench","c":"{AUTO_CREATE_TOPIC_KEY}","d":"4","e":"2","f":"0","g":"1764700000000","h":"0","j":"0","k":"false","m":"true"}},"flag":0,"language":"RUST","opaque":123456,"serializeTypeCurrentRPC":"JSON","version":479}}"#
        )
    }

    /// A deterministic cost probe for `valgrind --tool=callgrind` (instruction counts do not
    /// depend on the load of a shared machine):
    /// `valgrind --tool=callgrind <test binary> --ignored --exact
    /// remoting::frame::json_header::tests::decode_send_batch_header_100k_times`.
    #[test]
    #[ignore = "cost probe, run under callgrind"]
    fn decode_send_batch_header_100k_times() {
        let header = send_batch_header();
        let mut ext_fields = 0;
        for _ in 0..100_000 {
            let cmd = decode_json_header(std::hint::black_box(header.as_bytes())).unwrap();
            ext_fields += cmd.ext_fields.len();
        }
        assert_eq!(ext_fields, 11 * 100_000);
    }

    /// The streaming JSON header decoder against the `Value`-tree decoder it replaced, kept
    /// here verbatim as the reference: same command, or the same error (variant, field, quoted
    /// value, serde_json message and position), and the same recovered ids and SYSTEM_ERROR
    /// answer for the frame.
    mod json_equivalence {
        use super::super::super::recover::scan_json_int;
        use super::super::super::{
            decode_frame_body, raw_frame, FrameError, RecoveredIds, SerializeType,
        };
        use super::*;
        use bytes::Bytes;
        use proptest::prelude::*;

        /// The decoder before the streaming one, unchanged but for its name.
        fn value_tree_decode_json_header(
            header: &[u8],
        ) -> Result<RemotingCommand, HeaderDecodeError> {
            let value: Value = serde_json::from_slice(header).map_err(HeaderDecodeError::Json)?;
            let Value::Object(mut map) = value else {
                return Err(HeaderDecodeError::NotAnObject);
            };
            let mut cmd = RemotingCommand {
                language: "JAVA".to_owned(),
                version: 0,
                ..Default::default()
            };
            if let Some(v) = map.get("code") {
                cmd.code = value_tree_lenient_i32(v, "code")?.unwrap_or(0);
            }
            if let Some(v) = map.get("version") {
                cmd.version = value_tree_lenient_i32(v, "version")?.unwrap_or(0);
            }
            if let Some(v) = map.get("opaque") {
                cmd.opaque = value_tree_lenient_i32(v, "opaque")?.unwrap_or(0);
            }
            if let Some(v) = map.get("flag") {
                cmd.flag = value_tree_lenient_i32(v, "flag")?.unwrap_or(0);
            }
            match map.get("language") {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) => cmd.language = s.clone(),
                Some(v @ Value::Number(_)) => {
                    let n = value_tree_lenient_i32(v, "language")?.unwrap_or(7);
                    cmd.language = u8::try_from(n)
                        .map(codes::language_name)
                        .unwrap_or(codes::LANGUAGE_OTHER)
                        .to_owned();
                }
                Some(v) => {
                    return Err(HeaderDecodeError::InvalidField {
                        field: "language",
                        value: truncate_for_error(&v.to_string()),
                    })
                }
            }
            match map.get("remark") {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) => cmd.remark = Some(s.clone()),
                Some(v) => cmd.remark = Some(v.to_string()),
            }
            match map.remove("extFields") {
                None | Some(Value::Null) => {}
                Some(Value::Object(ext)) => {
                    for (k, v) in ext {
                        let s = match v {
                            Value::Null => continue,
                            Value::String(s) => s,
                            Value::Bool(b) => b.to_string(),
                            Value::Number(n) => n.to_string(),
                            other => other.to_string(),
                        };
                        cmd.ext_fields.insert(k, s);
                    }
                }
                Some(v) => {
                    return Err(HeaderDecodeError::InvalidField {
                        field: "extFields",
                        value: truncate_for_error(&v.to_string()),
                    })
                }
            }
            Ok(cmd)
        }

        fn value_tree_lenient_i32(
            v: &Value,
            field: &'static str,
        ) -> Result<Option<i32>, HeaderDecodeError> {
            let invalid = || HeaderDecodeError::InvalidField {
                field,
                value: truncate_for_error(&v.to_string()),
            };
            let n: i64 = match v {
                Value::Null => return Ok(None),
                Value::Number(n) => match n.as_i64() {
                    Some(i) => i,
                    None => match n.as_f64() {
                        Some(f) if f.fract() == 0.0 && f.abs() <= i32::MAX as f64 => f as i64,
                        _ => return Err(invalid()),
                    },
                },
                Value::String(s) => s.trim().parse::<i64>().map_err(|_| invalid())?,
                _ => return Err(invalid()),
            };
            i32::try_from(n).map(Some).map_err(|_| invalid())
        }

        /// `recover_ids` for JSON headers before the streaming decoder.
        fn value_tree_recover_ids(header: &[u8]) -> Option<RecoveredIds> {
            if let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(header) {
                let opaque = map
                    .get("opaque")
                    .and_then(|v| value_tree_lenient_i32(v, "opaque").ok().flatten())?;
                let flag = match map.get("flag") {
                    None => Some(0),
                    Some(v) => value_tree_lenient_i32(v, "flag").ok().flatten(),
                };
                return Some(RecoveredIds { opaque, flag });
            }
            let opaque = scan_json_int(header, b"\"opaque\"")?;
            let flag = scan_json_int(header, b"\"flag\"");
            Some(RecoveredIds { opaque, flag })
        }

        fn check_same_as_value_tree(header: &[u8]) -> Result<(), TestCaseError> {
            let text = String::from_utf8_lossy(header);
            let streamed = decode_json_header(header);
            let reference = value_tree_decode_json_header(header);
            match (&streamed, &reference) {
                (Ok(s), Ok(r)) => prop_assert_eq!(s, r, "header {}", text),
                (Err(s), Err(r)) => {
                    prop_assert_eq!(format!("{s:?}"), format!("{r:?}"), "header {}", text)
                }
                _ => prop_assert!(
                    false,
                    "streamed {:?} but value tree {:?} for header {}",
                    streamed,
                    reference,
                    text
                ),
            }
            let frame = Bytes::from(raw_frame(0, header, b"")).slice(4..);
            match (decode_frame_body(frame), reference) {
                (Ok(cmd), Ok(r)) => prop_assert_eq!(cmd, r),
                (Err(err), Err(source)) => {
                    let reference_err = FrameError::MalformedHeader {
                        ser_type: SerializeType::Json,
                        recovered: value_tree_recover_ids(header),
                        source,
                    };
                    prop_assert_eq!(
                        err.recovered(),
                        reference_err.recovered(),
                        "header {}",
                        text
                    );
                    prop_assert_eq!(
                        err.error_response(),
                        reference_err.error_response(),
                        "header {}",
                        text
                    );
                }
                (got, _) => prop_assert!(false, "frame decode {:?} for header {}", got, text),
            }
            Ok(())
        }

        #[test]
        fn typical_and_edge_case_headers_decode_as_with_the_value_tree() {
            let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
            let mut headers: Vec<String> = [
                r#"{"code":"10","language":1,"version":0,"opaque":7,"flag":2,"extFields":{"queueId":3,"batch":false,"bornTimestamp":1700000000000,"nothing":null,"nested":{"x":1}},"whatever":[1,2]}"#,
                // Repeated keys: the last value counts, an earlier bad one is forgotten.
                r#"{"code":"x","code":5,"opaque":[1],"opaque":"6"}"#,
                r#"{"code":5,"code":"x"}"#,
                r#"{"extFields":{"a":"1","a":null,"b":"2","b":"3"}}"#,
                r#"{"extFields":{"a":"1"},"extFields":{"b":"2"}}"#,
                r#"{"extFields":{"a":"1"},"extFields":null}"#,
                r#"{"extFields":7,"extFields":{"b":"2"}}"#,
                r#"{"extFields":{"b":"2"},"extFields":"x"}"#,
                // A syntax error anywhere wins over a bad field; bad fields in a fixed order.
                r#"{"code":"x","remark":"#,
                r#"{"extFields":[],"flag":true,"language":{},"version":"v","code":1}"#,
                r#"{"version":"v","code":"c"}"#,
                // Escaped and unicode keys and values.
                r#"{"c\u006fde":12,"extFields":{"k\"ey":"v\u00e9\ud83d\ude00\n","\u4e2d":"\/"}}"#,
                // Numbers as Value would have read them.
                r#"{"code":-0,"version":1e2,"opaque":2147483647.0,"flag":"  -3 "}"#,
                r#"{"opaque":-2147483648}"#,
                r#"{"opaque":-2147483648.0}"#,
                r#"{"opaque":18446744073709551616}"#,
                r#"{"opaque":1.5,"flag":0}"#,
                r#"{"extFields":{"f":1.0,"g":-0.0,"h":1e20,"i":-0,"j":18446744073709551615,"k":2.5e-8}}"#,
                r#"{"whatever":1e400,"opaque":3}"#,
                r#"{"extFields":{"a":1e400}}"#,
                r#"{"language":256}"#,
                r#"{"language":-1}"#,
                r#"{"language":12.0}"#,
                r#"{"language":true}"#,
                r#"{"language":null,"remark":{"a":[1,"x",null]}}"#,
                r#"{"remark":12.50}"#,
                r#"{"remark":"x\u0000y"}"#,
                "[1, 1e400]",
                "\"text\"",
                "12",
                "null",
                "{} x",
                " {} \n",
                "",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            headers.push(send_batch_header());
            // serde_json's nesting limit (128) counts from the top-level object.
            for depth in [126, 127, 128, 200] {
                headers.push(format!(r#"{{"opaque":1,"x":{}}}"#, deep(depth)));
                headers.push(format!(
                    r#"{{"opaque":1,"extFields":{{"a":{}}}}}"#,
                    deep(depth)
                ));
            }
            headers.push(format!(r#"{{"remark":"{}"}}"#, "é".repeat(100)));
            headers.push(format!(r#"{{"code":"{}"}}"#, "é".repeat(100)));
            for header in &headers {
                if let Err(e) = check_same_as_value_tree(header.as_bytes()) {
                    panic!("{e}");
                }
            }
        }

        #[test]
        fn repeated_keys_and_nulls_are_decided_by_the_last_value() {
            let cmd = decode_json_header(
                br#"{"code":"x","code":5,"extFields":{"a":"1","a":null,"b":2,"b":"3"}}"#,
            )
            .unwrap();
            assert_eq!(cmd.code, 5);
            assert_eq!(cmd.ext("a"), None);
            assert_eq!(cmd.ext("b"), Some("3"));
            let err =
                decode_json_header(br#"{"extFields":[],"flag":true,"version":"v"}"#).unwrap_err();
            assert!(
                matches!(
                    err,
                    HeaderDecodeError::InvalidField {
                        field: "version",
                        ..
                    }
                ),
                "{err:?}"
            );
            assert!(matches!(
                decode_json_header(br#"{"code":"x","remark":"#),
                Err(HeaderDecodeError::Json(_))
            ));
        }

        /// JSON text with the choices a test case should vary: escapes, number spellings,
        /// whitespace, key order and repetition.
        #[derive(Debug, Clone)]
        enum Json {
            /// A literal token (number, `true`, `null`, or an already encoded string).
            Token(String),
            Array(Vec<Json>),
            Object(Vec<(String, Json)>),
        }

        impl Json {
            fn render(&self, ws: &mut Whitespace, out: &mut String) {
                match self {
                    Json::Token(t) => out.push_str(t),
                    Json::Array(items) => {
                        out.push('[');
                        for (i, item) in items.iter().enumerate() {
                            if i > 0 {
                                out.push(',');
                            }
                            out.push_str(ws.next());
                            item.render(ws, out);
                            out.push_str(ws.next());
                        }
                        out.push(']');
                    }
                    Json::Object(entries) => {
                        out.push('{');
                        for (i, (key, value)) in entries.iter().enumerate() {
                            if i > 0 {
                                out.push(',');
                            }
                            out.push_str(ws.next());
                            out.push_str(key);
                            out.push_str(ws.next());
                            out.push(':');
                            out.push_str(ws.next());
                            value.render(ws, out);
                            out.push_str(ws.next());
                        }
                        out.push('}');
                    }
                }
            }
        }

        struct Whitespace {
            choices: Vec<u8>,
            at: usize,
        }

        impl Whitespace {
            fn next(&mut self) -> &'static str {
                const SPELLINGS: [&str; 8] = ["", "", "", "", "", " ", "\n  ", "\t\r\n"];
                let Some(c) = self.choices.get(self.at % self.choices.len().max(1)) else {
                    return "";
                };
                self.at += 1;
                SPELLINGS[usize::from(*c) % SPELLINGS.len()]
            }
        }

        /// A JSON string literal for `content`, each character spelled literally, as a short
        /// escape or as `\uXXXX` (surrogate pairs above the BMP) as `spelling` picks.
        fn encode_string(content: &str, spelling: &[u8]) -> String {
            let mut out = String::from("\"");
            for (i, c) in content.chars().enumerate() {
                let pick = spelling
                    .get(i % spelling.len().max(1))
                    .copied()
                    .unwrap_or(0)
                    % 8;
                let must_escape = c == '"' || c == '\\' || c < ' ';
                let short = match c {
                    '"' => Some("\\\""),
                    '\\' => Some("\\\\"),
                    '/' => Some("\\/"),
                    '\n' => Some("\\n"),
                    '\t' => Some("\\t"),
                    '\r' => Some("\\r"),
                    '\u{8}' => Some("\\b"),
                    '\u{c}' => Some("\\f"),
                    _ => None,
                };
                if pick < 5 && !must_escape {
                    out.push(c);
                } else if let (Some(s), true) = (short, pick < 7) {
                    out.push_str(s);
                } else {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
            }
            out.push('"');
            out
        }

        fn string_content() -> impl Strategy<Value = String> {
            let special = prop::sample::select(vec![
                'a', 'Z', '0', '9', ' ', '"', '\\', '/', '\n', '\t', '\u{0}', '\u{1f}', 'é', '中',
                '😀', '\u{a0}', '\u{2028}', '\u{feff}', '-', '+', '.', 'e',
            ]);
            prop::collection::vec(prop_oneof![3 => special, 1 => any::<char>()], 0..12)
                .prop_map(|chars| chars.into_iter().collect())
        }

        fn string_token(content: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
            (content, prop::collection::vec(any::<u8>(), 1..8))
                .prop_map(|(content, spelling)| encode_string(&content, &spelling))
        }

        fn number_token() -> impl Strategy<Value = String> {
            let edges = prop::sample::select(vec![
                "0",
                "-0",
                "0.0",
                "-0.0",
                "1.5",
                "-1.5",
                "1e2",
                "1E2",
                "1e+2",
                "25e-1",
                "2.5e-3",
                "2147483647",
                "2147483648",
                "-2147483648",
                "-2147483649",
                "2147483647.0",
                "2147483648.0",
                "-2147483648.0",
                "-2147483647.0",
                "4294967296",
                "9223372036854775807",
                "9223372036854775808",
                "-9223372036854775808",
                "-9223372036854775809",
                "18446744073709551615",
                "18446744073709551616",
                "1e400",
                "-1e400",
                "1e-400",
                "123456789012345678901234567890",
                "0.1e1",
                "3e9",
                "7",
                "12",
                "13",
                "255",
                "256",
                "-1",
            ]);
            prop_oneof![
                3 => edges.prop_map(str::to_owned),
                2 => any::<i32>().prop_map(|n| n.to_string()),
                1 => any::<i64>().prop_map(|n| n.to_string()),
                1 => any::<u64>().prop_map(|n| n.to_string()),
                1 => (any::<i32>(), prop::sample::select(vec![".0", ".5", "e0", "E+1", "e-1", ".25e1"]))
                    .prop_map(|(n, suffix)| format!("{n}{suffix}")),
                1 => any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| format!("{f:?}")),
                1 => any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| format!("{f:e}")),
            ]
        }

        /// Strings a lenient number field might hold.
        fn numeric_string_token() -> impl Strategy<Value = String> {
            let content = prop_oneof![
                number_token(),
                (
                    number_token(),
                    prop::sample::select(vec![" ", "\t", "\n", "\u{a0}", "\u{3000}"])
                )
                    .prop_map(|(n, w)| format!("{w}{n}{w}")),
                prop::sample::select(vec!["+7", "-", "", " ", "abc", "0x10", "1_000", "07"])
                    .prop_map(str::to_owned),
            ];
            string_token(content)
        }

        fn scalar_token() -> impl Strategy<Value = String> {
            prop_oneof![
                1 => prop::sample::select(vec!["null", "true", "false"]).prop_map(str::to_owned),
                2 => number_token(),
                3 => string_token(string_content()),
            ]
        }

        fn any_json() -> impl Strategy<Value = Json> {
            scalar_token()
                .prop_map(Json::Token)
                .prop_recursive(3, 24, 4, |inner| {
                    prop_oneof![
                        prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
                        prop::collection::vec((string_token(string_content()), inner), 0..4)
                            .prop_map(Json::Object),
                    ]
                })
        }

        /// A top-level key: a known one or not, spelled with or without escapes.
        fn key_token(known: &'static [&'static str]) -> impl Strategy<Value = String> {
            string_token(prop_oneof![
                6 => prop::sample::select(known).prop_map(str::to_owned),
                1 => string_content(),
            ])
        }

        fn ext_fields_json() -> impl Strategy<Value = Json> {
            let key = string_token(prop_oneof![
                prop::sample::select(vec!["a", "b", "queueId", "properties", "é"])
                    .prop_map(str::to_owned),
                string_content(),
            ]);
            let value = prop_oneof![
                5 => string_token(string_content()).prop_map(Json::Token),
                2 => number_token().prop_map(Json::Token),
                1 => prop::sample::select(vec!["null", "true", "false"]).prop_map(|t| Json::Token(t.to_owned())),
                1 => any_json(),
            ];
            prop::collection::vec((key, value), 0..8).prop_map(Json::Object)
        }

        fn header_entry() -> impl Strategy<Value = (String, Json)> {
            const NUMBER_KEYS: &[&str] = &["code", "version", "opaque", "flag"];
            const OTHER_KEYS: &[&str] = &["serializeTypeCurrentRPC", "remark", "language", "x"];
            // Mostly valid, so that whole headers often decode and their ext fields get compared.
            let number_value = prop_oneof![
                12 => prop_oneof![any::<i32>().prop_map(|n| n.to_string()), (0..1000).prop_map(|n: i32| n.to_string())].prop_map(Json::Token),
                3 => number_token().prop_map(Json::Token),
                2 => numeric_string_token().prop_map(Json::Token),
                1 => any_json(),
            ];
            let language = prop_oneof![
                6 => string_token(prop::sample::select(vec!["JAVA", "RUST", "CPP", ""]).prop_map(str::to_owned)).prop_map(Json::Token),
                2 => number_token().prop_map(Json::Token),
                1 => any_json(),
            ];
            let ext = prop_oneof![12 => ext_fields_json(), 1 => any_json()];
            prop_oneof![
                4 => (key_token(NUMBER_KEYS), number_value),
                1 => (key_token(&["language"]), language),
                3 => (key_token(&["extFields"]), ext),
                2 => (key_token(OTHER_KEYS), any_json()),
            ]
        }

        fn header_text() -> impl Strategy<Value = String> {
            let top = prop_oneof![
                3 => prop::collection::vec(header_entry(), 0..10).prop_map(Json::Object),
                // Like a real header: one extFields object somewhere among the other keys.
                6 => (
                    prop::collection::vec(header_entry(), 0..8),
                    (key_token(&["extFields"]), ext_fields_json()),
                    any::<prop::sample::Index>(),
                )
                    .prop_map(|(mut entries, ext, at)| {
                        entries.insert(at.index(entries.len() + 1), ext);
                        Json::Object(entries)
                    }),
                1 => any_json(),
            ];
            (top, prop::collection::vec(any::<u8>(), 0..16)).prop_map(|(json, ws)| {
                let mut out = String::new();
                let mut ws = Whitespace { choices: ws, at: 0 };
                out.push_str(ws.next());
                json.render(&mut ws, &mut out);
                out.push_str(ws.next());
                out
            })
        }

        #[derive(Debug, Clone)]
        enum Mutation {
            Truncate(prop::sample::Index),
            Delete(prop::sample::Index),
            Insert(prop::sample::Index, u8),
            Replace(prop::sample::Index, u8),
        }

        fn mutation() -> impl Strategy<Value = Mutation> {
            let byte = prop_oneof![
                3 => prop::sample::select(b"{}[],:\"\\ne0-.+u\x00 ".to_vec()),
                1 => any::<u8>(),
            ];
            prop_oneof![
                1 => any::<prop::sample::Index>().prop_map(Mutation::Truncate),
                2 => any::<prop::sample::Index>().prop_map(Mutation::Delete),
                2 => (any::<prop::sample::Index>(), byte.clone()).prop_map(|(i, b)| Mutation::Insert(i, b)),
                2 => (any::<prop::sample::Index>(), byte).prop_map(|(i, b)| Mutation::Replace(i, b)),
            ]
        }

        fn mutate(text: &str, mutations: &[Mutation]) -> Vec<u8> {
            let mut bytes = text.as_bytes().to_vec();
            for m in mutations {
                match m {
                    Mutation::Truncate(i) => bytes.truncate(i.index(bytes.len() + 1)),
                    Mutation::Delete(i) if !bytes.is_empty() => {
                        bytes.remove(i.index(bytes.len()));
                    }
                    Mutation::Insert(i, b) => bytes.insert(i.index(bytes.len() + 1), *b),
                    Mutation::Replace(i, b) if !bytes.is_empty() => {
                        let at = i.index(bytes.len());
                        bytes[at] = *b;
                    }
                    Mutation::Delete(_) | Mutation::Replace(..) => {}
                }
            }
            bytes
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(3000))]

            #[test]
            fn generated_headers_decode_as_with_the_value_tree(text in header_text()) {
                check_same_as_value_tree(text.as_bytes())?;
            }

            #[test]
            fn mutated_headers_decode_as_with_the_value_tree(
                text in header_text(),
                mutations in prop::collection::vec(mutation(), 1..4),
            ) {
                check_same_as_value_tree(&mutate(&text, &mutations))?;
            }

            #[test]
            fn arbitrary_bytes_decode_as_with_the_value_tree(
                bytes in prop::collection::vec(any::<u8>(), 0..64),
            ) {
                check_same_as_value_tree(&bytes)?;
            }
        }
    }

    /// The direct JSON writer against the `serde_json` serialization it replaced.
    mod json_writer_equivalence {
        use super::*;
        use bytes::Bytes;
        use proptest::prelude::*;
        use serde::Serialize;

        #[derive(Serialize)]
        struct SerdeHeader<'a> {
            code: i32,
            #[serde(rename = "extFields", skip_serializing_if = "BTreeMap::is_empty")]
            ext_fields: &'a BTreeMap<String, String>,
            flag: i32,
            language: &'a str,
            opaque: i32,
            #[serde(skip_serializing_if = "Option::is_none")]
            remark: Option<&'a str>,
            #[serde(rename = "serializeTypeCurrentRPC")]
            serialize_type_current_rpc: &'static str,
            version: i32,
        }

        fn serde_header(cmd: &RemotingCommand) -> Vec<u8> {
            serde_json::to_vec(&SerdeHeader {
                code: cmd.code,
                ext_fields: &cmd.ext_fields,
                flag: cmd.flag,
                language: &cmd.language,
                opaque: cmd.opaque,
                remark: cmd.remark.as_deref(),
                serialize_type_current_rpc: "JSON",
                version: cmd.version,
            })
            .expect("serde_json serializes any command")
        }

        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                "[a-zA-Z0-9_,%|-]{0,40}",
                any::<String>(),
                "[\\\\\"\\x00-\\x1f\\x7f\\u{80}-\\u{10ffff}a]{0,12}",
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            #[test]
            fn direct_writer_matches_serde_json(
                code in any::<i32>(),
                flag in any::<i32>(),
                opaque in any::<i32>(),
                version in any::<i32>(),
                language in text(),
                remark in proptest::option::of(text()),
                ext_fields in prop::collection::btree_map(text(), text(), 0..6),
            ) {
                let cmd = RemotingCommand {
                    code, flag, opaque, version, language, remark, ext_fields,
                    body: Bytes::new(),
                };
                let mut direct = BytesMut::new();
                write_json_header(&cmd, &mut direct).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(&direct[..], &serde_header(&cmd)[..]);
            }
        }

        #[test]
        fn escape_check_agrees_with_a_plain_scan() {
            let special = [0x00u8, 0x1f, b'"', b'\\'];
            let near = [0x20u8, 0x21, b'#', b'[', b']', 0x7f, 0x80, 0xff, b'a'];
            for len in 0..24 {
                for filler in near {
                    let mut text = vec![filler; len];
                    assert!(!needs_json_escape(&text), "len {len} filler {filler:#x}");
                    for at in 0..len {
                        for b in special {
                            text[at] = b;
                            assert!(needs_json_escape(&text), "len {len} at {at} byte {b:#x}");
                            text[at] = filler;
                        }
                    }
                }
            }
        }

        #[test]
        fn extreme_integers_match_serde_json() {
            for n in [0, -1, 1, 9, 10, -10, i32::MIN, i32::MAX] {
                let cmd = RemotingCommand {
                    code: n,
                    opaque: n,
                    ..Default::default()
                };
                let mut direct = BytesMut::new();
                assert!(write_json_header(&cmd, &mut direct).is_ok());
                assert_eq!(&direct[..], &serde_header(&cmd)[..]);
            }
        }
    }
}
