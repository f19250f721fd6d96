//! Versioned, checksummed bincode records: the only way a value enters or leaves a sled tree.
//!
//! API CONTRACT (implementation pending; keep these public signatures).

/// What decoding a stored value yields. A corrupt record is never read as a default value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded<T> {
    Value(T),
    Corrupt { reason: String },
    UnknownVersion { version: u8 },
}
