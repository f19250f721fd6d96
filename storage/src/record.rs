//! Versioned, checksummed bincode records: the only way a value enters or leaves a sled tree.
//!
//! Layout of an encoded record:
//!
//! ```text
//! [version: u8][crc32 of payload: u32 little-endian][payload: bincode 2 (serde) encoding]
//! ```
//!
//! The payload uses one fixed configuration ([`bincode::config::standard`]: little-endian,
//! variable-length integers) with a decode limit of [`MAX_PAYLOAD_CLAIM`] bytes, so a corrupt
//! length prefix can never make the decoder allocate without bound. Decoding never panics: any
//! input yields [`Decoded::Value`], [`Decoded::Corrupt`] or [`Decoded::UnknownVersion`].

use serde::{de::DeserializeOwned, Serialize};

/// Size of the record header: one version byte and a four-byte CRC32.
pub const HEADER_LEN: usize = 5;

/// Upper bound on what the decoder may claim to allocate for one record (16 MiB).
pub const MAX_PAYLOAD_CLAIM: usize = 16 * 1024 * 1024;

/// What decoding a stored value yields. A corrupt record is never read as a default value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded<T> {
    Value(T),
    Corrupt { reason: String },
    UnknownVersion { version: u8 },
}

impl<T> Decoded<T> {
    /// The value, or `None` for a corrupt or unknown-version record.
    pub fn value(self) -> Option<T> {
        match self {
            Decoded::Value(v) => Some(v),
            Decoded::Corrupt { .. } | Decoded::UnknownVersion { .. } => None,
        }
    }

    /// The value passed through `f`; a corrupt or unknown-version record stays as it is.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Decoded<U> {
        match self {
            Decoded::Value(v) => Decoded::Value(f(v)),
            Decoded::Corrupt { reason } => Decoded::Corrupt { reason },
            Decoded::UnknownVersion { version } => Decoded::UnknownVersion { version },
        }
    }
}

/// Serializing a value failed: its `Serialize` impl uses something bincode cannot encode
/// (for example `serialize_any`-style or unknown-length sequences). A programming error.
#[derive(Debug, thiserror::Error)]
#[error("cannot encode record")]
pub struct EncodeError {
    #[source]
    source: bincode::error::EncodeError,
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_PAYLOAD_CLAIM>()
}

/// Encodes `value` as a record of `version`, or reports why bincode could not encode it.
pub fn try_encode<T: Serialize>(version: u8, value: &T) -> Result<Vec<u8>, EncodeError> {
    let payload =
        bincode::serde::encode_to_vec(value, config()).map_err(|source| EncodeError { source })?;
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.push(version);
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Encodes `value` as a record of `version`.
///
/// # Panics
///
/// Only if `T`'s `Serialize` impl is one bincode cannot encode (see [`EncodeError`]); every
/// type skiff stores is a plain struct, for which encoding cannot fail. Use [`try_encode`] for
/// arbitrary types.
pub fn encode<T: Serialize>(version: u8, value: &T) -> Vec<u8> {
    match try_encode(version, value) {
        Ok(bytes) => bytes,
        Err(e) => panic!("record type is not bincode-encodable: {}", e.source),
    }
}

/// Decodes a record written by [`encode`], expecting `expected_version`. Never panics.
///
/// Checks, in order: the header is present, the version is the expected one, the CRC matches
/// the payload, bincode decodes the payload, and the payload has no trailing bytes.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], expected_version: u8) -> Decoded<T> {
    let Some(&version) = bytes.first() else {
        return Decoded::Corrupt {
            reason: "empty record".to_owned(),
        };
    };
    if version != expected_version {
        return Decoded::UnknownVersion { version };
    }
    let Some((crc_bytes, payload)) = bytes
        .get(1..)
        .and_then(|rest| rest.split_first_chunk::<4>())
    else {
        return Decoded::Corrupt {
            reason: format!(
                "record of {} bytes is shorter than its {HEADER_LEN}-byte header",
                bytes.len()
            ),
        };
    };
    let stored = u32::from_le_bytes(*crc_bytes);
    let actual = crc32fast::hash(payload);
    if stored != actual {
        return Decoded::Corrupt {
            reason: format!("crc32 mismatch: stored {stored:#010x}, computed {actual:#010x}"),
        };
    }
    match bincode::serde::decode_from_slice::<T, _>(payload, config()) {
        Ok((value, read)) if read == payload.len() => Decoded::Value(value),
        Ok((_, read)) => Decoded::Corrupt {
            reason: format!(
                "{} trailing bytes after a {read}-byte payload",
                payload.len() - read
            ),
        },
        Err(e) => Decoded::Corrupt {
            reason: format!("payload does not decode: {e}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Sample {
        offset: u64,
        at: i64,
        name: String,
        list: Vec<u32>,
        flag: bool,
    }

    fn sample() -> Sample {
        Sample {
            offset: 42,
            at: -7,
            name: "%RETRY%group".to_owned(),
            list: vec![1, 2, 3],
            flag: true,
        }
    }

    #[test]
    fn round_trip() {
        let bytes = encode(3, &sample());
        assert_eq!(bytes[0], 3);
        assert_eq!(decode::<Sample>(&bytes, 3), Decoded::Value(sample()));
    }

    #[test]
    fn crc_covers_payload() {
        let bytes = encode(1, &sample());
        let crc = u32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
        assert_eq!(crc, crc32fast::hash(&bytes[HEADER_LEN..]));
    }

    #[test]
    fn other_version_is_unknown() {
        let bytes = encode(2, &sample());
        assert_eq!(
            decode::<Sample>(&bytes, 1),
            Decoded::UnknownVersion { version: 2 }
        );
    }

    #[test]
    fn empty_and_short_records_are_corrupt() {
        for len in 0..HEADER_LEN {
            let bytes = &encode(1, &sample())[..len];
            assert!(
                matches!(decode::<Sample>(bytes, 1), Decoded::Corrupt { .. }),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn trailing_bytes_are_corrupt() {
        let mut bytes = encode(1, &7u64);
        bytes.push(0);
        // Fix the CRC so only the trailing byte is wrong.
        let crc = crc32fast::hash(&bytes[HEADER_LEN..]).to_le_bytes();
        bytes[1..HEADER_LEN].copy_from_slice(&crc);
        match decode::<u64>(&bytes, 1) {
            Decoded::Corrupt { reason } => assert!(reason.contains("trailing"), "{reason}"),
            other => panic!("expected corrupt, got {other:?}"),
        }
    }

    #[test]
    fn huge_length_prefix_is_corrupt_not_an_allocation() {
        // A valid CRC over a payload claiming a string of u64::MAX bytes.
        let mut payload = vec![253u8]; // varint marker: a u64 follows
        payload.extend_from_slice(&u64::MAX.to_le_bytes());
        let mut bytes = vec![1u8];
        bytes.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
        assert!(matches!(
            decode::<Vec<u64>>(&bytes, 1),
            Decoded::Corrupt { .. }
        ));
        assert!(matches!(
            decode::<String>(&bytes, 1),
            Decoded::Corrupt { .. }
        ));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256), version: u8) {
            let _ = decode::<Sample>(&bytes, version);
            let _ = decode::<u64>(&bytes, version);
            let _ = decode::<String>(&bytes, version);
            let _ = decode::<Vec<String>>(&bytes, version);
        }

        #[test]
        fn random_bytes_behind_a_valid_header_never_panic(payload in proptest::collection::vec(any::<u8>(), 0..256)) {
            // Valid version and CRC, so the payload reaches bincode.
            let mut bytes = vec![1u8];
            bytes.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
            bytes.extend_from_slice(&payload);
            let _ = decode::<Sample>(&bytes, 1);
            let _ = decode::<Vec<Sample>>(&bytes, 1);
        }

        #[test]
        fn any_single_bit_flip_is_detected(offset: u64, at: i64, name in "[A-Za-z%_|-]{0,20}", pos: prop::sample::Index, bit in 0u8..8) {
            let value = Sample { offset, at, name, list: vec![], flag: false };
            let mut bytes = encode(1, &value);
            let i = pos.index(bytes.len());
            bytes[i] ^= 1 << bit;
            prop_assert_ne!(decode::<Sample>(&bytes, 1), Decoded::Value(value));
        }
    }
}
