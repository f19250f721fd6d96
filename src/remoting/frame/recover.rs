//! Best-effort recovery of the opaque and flag of a frame whose header could not be decoded,
//! so that the peer can be answered instead of left waiting.

use super::binary_header::Reader;
use super::json_header::{lenient_i32, ParsedJsonHeader};
use super::SerializeType;

/// Opaque and flag recovered from a frame whose header could not be fully decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveredIds {
    pub opaque: i32,
    /// `None` when the flag could not be recovered.
    pub flag: Option<i32>,
}

/// The opaque and flag of an undecodable header, as far as they can be read.
pub(super) fn recover_ids(ser_type: SerializeType, header: &[u8]) -> Option<RecoveredIds> {
    match ser_type {
        SerializeType::RocketMq => {
            let mut r = Reader { buf: header };
            r.take(5, "prefix").ok()?;
            let opaque = r.i32("opaque").ok()?;
            let flag = r.i32("flag").ok();
            Some(RecoveredIds { opaque, flag })
        }
        SerializeType::Json => {
            if let Ok(ParsedJsonHeader::Object(fields)) = serde_json::from_slice(header) {
                let opaque = fields
                    .opaque
                    .as_ref()
                    .and_then(|v| lenient_i32(v, "opaque").ok().flatten())?;
                let flag = match &fields.flag {
                    None => Some(0),
                    Some(v) => lenient_i32(v, "flag").ok().flatten(),
                };
                return Some(RecoveredIds { opaque, flag });
            }
            let opaque = scan_json_int(header, b"\"opaque\"")?;
            let flag = scan_json_int(header, b"\"flag\"");
            Some(RecoveredIds { opaque, flag })
        }
    }
}

/// Finds `"key" : <int>` in possibly broken JSON text.
pub(super) fn scan_json_int(text: &[u8], key: &[u8]) -> Option<i32> {
    let mut from = 0;
    while let Some(pos) = find(&text[from..], key) {
        let mut i = from + pos + key.len();
        from = i;
        while i < text.len() && text[i].is_ascii_whitespace() {
            i += 1;
        }
        if text.get(i) != Some(&b':') {
            continue;
        }
        i += 1;
        while i < text.len() && text[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        if text.get(i) == Some(&b'-') {
            i += 1;
        }
        while i < text.len() && text[i].is_ascii_digit() {
            i += 1;
        }
        // A number cut off by the end of the text may be incomplete: do not trust it.
        if i >= text.len() {
            return None;
        }
        let s = std::str::from_utf8(&text[start..i]).ok()?;
        return s.parse::<i32>().ok();
    }
    None
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::super::super::codes::response;
    use super::super::{decode_frame, raw_frame, DEFAULT_MAX_FRAME_LEN};
    use super::*;

    #[test]
    fn invalid_json_recovers_opaque_for_an_answer() {
        let bytes = raw_frame(0, br#"{"code":11,"flag":0,"opaque":99,"extFields":{"#, b"");
        let mut buf = BytesMut::from(&bytes[..]);
        let err = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap_err();
        assert!(buf.is_empty());
        assert_eq!(
            err.recovered(),
            Some(RecoveredIds {
                opaque: 99,
                flag: Some(0)
            })
        );
        let resp = err.error_response().expect("answerable");
        assert_eq!(resp.code, response::SYSTEM_ERROR);
        assert_eq!(resp.opaque, 99);
        assert!(resp.is_response());
        assert!(resp.remark.unwrap().contains("malformed JSON header"));
    }

    #[test]
    fn invalid_json_without_opaque_or_oneway_is_not_answered() {
        for header in [
            &br#"{"code":11,"#[..],
            br#"{"code":15,"flag":2,"opaque":3,"extFields":7}"#,
            br#"{"opaque":12"#,
            b"\xff\xfe",
        ] {
            let bytes = raw_frame(0, header, b"");
            let mut buf = BytesMut::from(&bytes[..]);
            let err = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap_err();
            assert!(err.error_response().is_none(), "{header:?}");
        }
    }

    #[test]
    fn wrong_typed_json_field_recovers_opaque() {
        let bytes = raw_frame(0, br#"{"code":"x","opaque":"8"}"#, b"");
        let mut buf = BytesMut::from(&bytes[..]);
        let err = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap_err();
        let resp = err.error_response().unwrap();
        assert_eq!(resp.opaque, 8);
    }
}
