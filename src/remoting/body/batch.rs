//! The SEND_BATCH_MESSAGE (320) body (`docs/wire-protocol.md` §3.1): the messages of one batch
//! back to back, each as Java's `MessageDecoder.encodeMessage` writes it:
//!
//! ```text
//! totalSize:i32 magic:i32 bodyCRC:i32 flag:i32 bodyLen:i32 body propsLen:i16 props
//! ```
//!
//! Clients send magic and CRC as 0 and the broker checks neither. Decoding is strict: every
//! length must agree with the record's total size.

use bytes::Bytes;

/// Fixed part of a record: total size, magic, body CRC, flag, body length.
const FIXED_LEN: usize = 20;

/// One message of a batch body, as the broker decodes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchEntry {
    pub flag: i32,
    pub body: Bytes,
    /// Encoded properties (`name\u{1}value\u{2}`...).
    pub properties: String,
}

/// What [`encode_batch`] writes a record from.
pub trait BatchMessage {
    fn flag(&self) -> i32;
    fn body(&self) -> &[u8];
    /// Encoded properties (`name\u{1}value\u{2}`...).
    fn properties(&self) -> &str;
}

impl BatchMessage for BatchEntry {
    fn flag(&self) -> i32 {
        self.flag
    }

    fn body(&self) -> &[u8] {
        &self.body
    }

    fn properties(&self) -> &str {
        &self.properties
    }
}

/// A batch body that cannot be decoded: the message (`index`), the byte its record starts at
/// (`offset`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("batch message {index} at byte {offset}: truncated {field}")]
    Truncated {
        index: usize,
        offset: usize,
        field: &'static str,
    },
    #[error("batch message {index} at byte {offset}: invalid total size {total}")]
    InvalidTotalSize {
        index: usize,
        offset: usize,
        total: i32,
    },
    #[error("batch message {index} at byte {offset}: invalid body length {body_len}")]
    InvalidBodyLength {
        index: usize,
        offset: usize,
        body_len: i32,
    },
    #[error("batch message {index} at byte {offset}: properties length {props_len} does not match the record size {total}")]
    PropertiesLength {
        index: usize,
        offset: usize,
        props_len: i16,
        total: usize,
    },
    #[error("batch message {index} at byte {offset}: properties are not valid utf-8")]
    PropertiesNotUtf8 {
        index: usize,
        offset: usize,
        #[source]
        source: std::str::Utf8Error,
    },
}

fn be_i32(buf: &[u8], at: usize) -> Option<i32> {
    buf.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map(i32::from_be_bytes)
}

fn be_i16(buf: &[u8], at: usize) -> Option<i16> {
    buf.get(at..at + 2)
        .and_then(|b| b.try_into().ok())
        .map(i16::from_be_bytes)
}

/// Decodes a batch body into its messages; the bodies share `body`'s buffer.
pub fn decode_batch(body: &Bytes) -> Result<Vec<BatchEntry>, BatchError> {
    let mut entries = Vec::new();
    let mut offset = 0usize;
    while offset < body.len() {
        let index = entries.len();
        let rest = &body[offset..];
        let truncated = |field| BatchError::Truncated {
            index,
            offset,
            field,
        };
        let total = be_i32(rest, 0).ok_or_else(|| truncated("total size"))?;
        let total = usize::try_from(total)
            .ok()
            .filter(|t| *t >= FIXED_LEN + 2 && *t <= rest.len())
            .ok_or(BatchError::InvalidTotalSize {
                index,
                offset,
                total,
            })?;
        let flag = be_i32(rest, 12).ok_or_else(|| truncated("flag"))?;
        let body_len = be_i32(rest, 16).ok_or_else(|| truncated("body length"))?;
        let body_len = usize::try_from(body_len)
            .ok()
            .filter(|l| FIXED_LEN + l + 2 <= total)
            .ok_or(BatchError::InvalidBodyLength {
                index,
                offset,
                body_len,
            })?;
        let props_at = FIXED_LEN + body_len;
        let props_len = be_i16(rest, props_at).ok_or_else(|| truncated("properties length"))?;
        let props_len = usize::try_from(props_len)
            .ok()
            .filter(|l| props_at + 2 + l == total)
            .ok_or(BatchError::PropertiesLength {
                index,
                offset,
                props_len,
                total,
            })?;
        let properties = std::str::from_utf8(&rest[props_at + 2..props_at + 2 + props_len])
            .map_err(|source| BatchError::PropertiesNotUtf8 {
                index,
                offset,
                source,
            })?
            .to_owned();
        entries.push(BatchEntry {
            flag,
            body: body.slice(offset + FIXED_LEN..offset + FIXED_LEN + body_len),
            properties,
        });
        offset += total;
    }
    Ok(entries)
}

/// Encodes messages as one batch body (the inverse of [`decode_batch`]). Properties longer
/// than the i16 length field can say are cut at `i16::MAX` bytes, so the record stays
/// self-consistent.
pub fn encode_batch<M: BatchMessage>(messages: &[M]) -> Vec<u8> {
    let mut out = Vec::new();
    for message in messages {
        let body = message.body();
        let props = message.properties().as_bytes();
        let props_len = i16::try_from(props.len()).unwrap_or(i16::MAX);
        let props = &props[..usize::try_from(props_len).unwrap_or(0)];
        let total = FIXED_LEN + body.len() + 2 + props.len();
        out.extend_from_slice(&length_field(total).to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&message.flag().to_be_bytes());
        out.extend_from_slice(&length_field(body.len()).to_be_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(&props_len.to_be_bytes());
        out.extend_from_slice(props);
    }
    out
}

/// A length for an i32 field. Saturating only avoids a wrapping cast: a body that long cannot
/// be sent anyway, as the frame's own length is an i32.
fn length_field(len: usize) -> i32 {
    i32::try_from(len).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(flag: i32, body: &'static [u8], properties: &str) -> BatchEntry {
        BatchEntry {
            flag,
            body: Bytes::from_static(body),
            properties: properties.to_owned(),
        }
    }

    #[test]
    fn batch_round_trip_and_strict_lengths() {
        let entries = vec![entry(0, b"one", "TAGS\u{1}a\u{2}"), entry(7, b"", "")];
        let encoded = Bytes::from(encode_batch(&entries));
        assert_eq!(decode_batch(&encoded), Ok(entries));
        assert_eq!(decode_batch(&Bytes::new()), Ok(Vec::new()));
        // Truncated, and a total size that disagrees with the fields.
        let cut = encoded.slice(..encoded.len() - 1);
        assert!(matches!(
            decode_batch(&cut),
            Err(BatchError::InvalidTotalSize { index: 1, .. })
        ));
        let mut bad = encoded.to_vec();
        bad[3] = bad[3].wrapping_add(1);
        assert!(matches!(
            decode_batch(&Bytes::from(bad)),
            Err(BatchError::PropertiesLength { index: 0, .. })
        ));
        let mut negative = encoded.to_vec();
        negative[16..20].copy_from_slice(&(-5i32).to_be_bytes());
        let err = decode_batch(&Bytes::from(negative)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "batch message 0 at byte 0: invalid body length -5"
        );
    }

    #[test]
    fn batch_body_layout() {
        let props = "TAGS\u{1}a\u{2}";
        let body = encode_batch(&[entry(0, b"hello", props), entry(0, b"", props)]);
        let first_len = 20 + 5 + 2 + props.len();
        assert_eq!(&body[0..4], &(first_len as i32).to_be_bytes());
        assert_eq!(&body[4..12], &[0u8; 8]);
        assert_eq!(&body[16..20], &5i32.to_be_bytes());
        assert_eq!(&body[20..25], b"hello");
        assert_eq!(&body[25..27], &(props.len() as i16).to_be_bytes());
        assert_eq!(&body[27..first_len], props.as_bytes());
        assert_eq!(body.len(), first_len + 20 + 2 + props.len());
    }

    #[test]
    fn overlong_properties_are_cut_to_a_consistent_record() {
        let long = "k\u{1}".to_owned() + &"v".repeat(40_000);
        let encoded = Bytes::from(encode_batch(&[entry(1, b"x", &long)]));
        let decoded = decode_batch(&encoded).expect("a self-consistent record");
        assert_eq!(
            decoded[0].properties.len(),
            usize::from(i16::MAX.unsigned_abs())
        );
        assert!(long.starts_with(&decoded[0].properties));
        assert_eq!(&decoded[0].body[..], b"x");
    }

    #[test]
    fn invalid_utf8_properties_are_refused() {
        let mut encoded = encode_batch(&[entry(0, b"", "ab")]);
        let last = encoded.len() - 1;
        encoded[last] = 0xff;
        assert!(matches!(
            decode_batch(&Bytes::from(encoded)),
            Err(BatchError::PropertiesNotUtf8 { index: 0, .. })
        ));
    }
}
