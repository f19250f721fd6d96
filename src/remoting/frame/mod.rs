//! The remoting frame (`docs/wire-protocol.md` §1):
//!
//! ```text
//! length:i32 | serType:u8 hdrLen:u24 | header (hdrLen bytes) | body (length - 4 - hdrLen bytes)
//! ```
//!
//! * This module: [`RemotingCommand`], its flags and [`SerializeType`].
//! * `codec`: the streaming frame decoder and the encoder ([`decode_frame`], [`encode`]) and
//!   their errors.
//! * `json_header`: the JSON header (serType 0) writer and its lenient reader
//!   ([`decode_json_header`]).
//! * `binary_header`: the ROCKETMQ binary header (serType 1), both ways.
//! * `recover`: the opaque and flag of a frame whose header cannot be decoded, so it can still
//!   be answered.
//!
//! Framing is strict (length cap, header length inside the frame, known serialize type);
//! header content is lenient like fastjson.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicI32, Ordering};

use bytes::Bytes;

use super::codes::{self, response, serialize_type};

mod binary_header;
mod codec;
mod json_header;
mod recover;

pub use binary_header::decode_rocketmq_header;
pub use codec::{
    decode_frame, decode_frame_body, encode, encode_with, EncodeError, FrameError,
    HeaderDecodeError,
};
pub use json_header::decode_json_header;
pub use recover::RecoveredIds;

/// Default cap on a whole frame, length field included (Java `com.rocketmq.remoting.frameMaxLength`).
pub const DEFAULT_MAX_FRAME_LEN: usize = 16 * 1024 * 1024;
/// The header length travels in 24 bits.
pub const MAX_HEADER_LEN: usize = 0x00FF_FFFF;
/// `flag` bit 0: the command is a response.
pub const FLAG_RESPONSE: i32 = 0x1;
/// `flag` bit 1: the request is oneway (no response is sent).
pub const FLAG_ONEWAY: i32 = 0x2;

static NEXT_OPAQUE: AtomicI32 = AtomicI32::new(0);

/// Allocates a request id from the per-process counter (starts at 0, wraps around).
pub fn next_opaque() -> i32 {
    NEXT_OPAQUE.fetch_add(1, Ordering::Relaxed)
}

/// Header serialization of a frame (`SerializeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SerializeType {
    /// fastjson object (code 0).
    Json,
    /// compact binary header (code 1).
    RocketMq,
}

impl SerializeType {
    /// The wire code.
    pub fn code(self) -> u8 {
        match self {
            SerializeType::Json => serialize_type::JSON,
            SerializeType::RocketMq => serialize_type::ROCKETMQ,
        }
    }

    /// Parses a wire code.
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            serialize_type::JSON => Some(SerializeType::Json),
            serialize_type::ROCKETMQ => Some(SerializeType::RocketMq),
            _ => None,
        }
    }
}

impl fmt::Display for SerializeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SerializeType::Json => "JSON",
            SerializeType::RocketMq => "ROCKETMQ",
        })
    }
}

/// One remoting command: a request or a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotingCommand {
    /// Request code or response code.
    pub code: i32,
    /// `LanguageCode` name of the sender, e.g. `"JAVA"`.
    pub language: String,
    /// Sender's `MQVersion` ordinal.
    pub version: i32,
    /// Request id; a response carries the id of its request.
    pub opaque: i32,
    /// Bit 0 response, bit 1 oneway.
    pub flag: i32,
    /// Error text (responses).
    pub remark: Option<String>,
    /// Custom header fields, all strings.
    pub ext_fields: BTreeMap<String, String>,
    /// Body bytes (may be empty).
    pub body: Bytes,
}

impl Default for RemotingCommand {
    fn default() -> Self {
        RemotingCommand {
            code: 0,
            language: codes::LANGUAGE_RUST.to_owned(),
            version: codes::version::CURRENT,
            opaque: 0,
            flag: 0,
            remark: None,
            ext_fields: BTreeMap::new(),
            body: Bytes::new(),
        }
    }
}

impl RemotingCommand {
    /// A request with a fresh opaque from [`next_opaque`].
    pub fn new_request(code: i32) -> Self {
        RemotingCommand {
            code,
            opaque: next_opaque(),
            ..Default::default()
        }
    }

    /// A response (flag bit 0 set); its opaque is 0 until set or built with [`Self::response_to`].
    pub fn new_response(code: i32, remark: Option<String>) -> Self {
        RemotingCommand {
            code,
            remark,
            flag: FLAG_RESPONSE,
            ..Default::default()
        }
    }

    /// A response to `request`: copies its opaque and marks the response bit.
    pub fn response_to(request: &RemotingCommand, code: i32, remark: Option<String>) -> Self {
        RemotingCommand {
            opaque: request.opaque,
            ..Self::new_response(code, remark)
        }
    }

    /// A SUCCESS response to `request`.
    pub fn success_to(request: &RemotingCommand) -> Self {
        Self::response_to(request, response::SUCCESS, None)
    }

    /// The REQUEST_CODE_NOT_SUPPORTED (3) answer Java gives to an unknown request code.
    pub fn not_supported(request: &RemotingCommand) -> Self {
        Self::response_to(
            request,
            response::REQUEST_CODE_NOT_SUPPORTED,
            Some(format!(" request type {} not supported", request.code)),
        )
    }

    /// True when flag bit 0 is set.
    pub fn is_response(&self) -> bool {
        self.flag & FLAG_RESPONSE == FLAG_RESPONSE
    }

    /// True when flag bit 1 is set (requests only).
    pub fn is_oneway(&self) -> bool {
        self.flag & FLAG_ONEWAY == FLAG_ONEWAY
    }

    /// Sets flag bit 0.
    pub fn mark_response(&mut self) {
        self.flag |= FLAG_RESPONSE;
    }

    /// Sets flag bit 1.
    pub fn mark_oneway(&mut self) {
        self.flag |= FLAG_ONEWAY;
    }

    /// Builder form of [`Self::mark_oneway`].
    pub fn oneway(mut self) -> Self {
        self.mark_oneway();
        self
    }

    /// Builder: adds one ext field.
    pub fn with_ext(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.ext_fields.insert(key.into(), value.into());
        self
    }

    /// Builder: merges ext fields (e.g. from a typed header's `to_ext()`).
    pub fn with_ext_fields(mut self, fields: BTreeMap<String, String>) -> Self {
        self.ext_fields.extend(fields);
        self
    }

    /// Builder: sets the body.
    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// One ext field.
    pub fn ext(&self, key: &str) -> Option<&str> {
        self.ext_fields.get(key).map(String::as_str)
    }
}

/// Builds a frame by hand for tests: length, serType + header length, header, body.
#[cfg(test)]
fn raw_frame(ser: u8, header: &[u8], body: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    let len = (4 + header.len() + body.len()) as i32;
    v.extend_from_slice(&len.to_be_bytes());
    v.push(ser);
    let hl = header.len() as u32;
    v.extend_from_slice(&hl.to_be_bytes()[1..]);
    v.extend_from_slice(header);
    v.extend_from_slice(body);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        let req = RemotingCommand::new_request(999);
        let resp = RemotingCommand::not_supported(&req);
        assert_eq!(resp.code, 3);
        assert_eq!(resp.opaque, req.opaque);
        assert!(resp.is_response());
        assert_eq!(
            resp.remark.as_deref(),
            Some(" request type 999 not supported")
        );
        let ow = RemotingCommand::new_request(15).oneway();
        assert!(ow.is_oneway() && !ow.is_response());
        let a = next_opaque();
        let b = next_opaque();
        assert!(b > a || (a == i32::MAX && b == i32::MIN));
    }
}
