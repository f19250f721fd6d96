//! The remoting frame: `RemotingCommand`, the streaming frame decoder and the encoder
//! (`reference/rocketmq-remoting.md` §1).
//!
//! ```text
//! length:i32 | serType:u8 hdrLen:u24 | header (hdrLen bytes) | body (length - 4 - hdrLen bytes)
//! ```
//!
//! Framing is strict (length cap, header length inside the frame, known serialize type);
//! header content is lenient like fastjson (see [`decode_json_header`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicI32, Ordering};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::Serialize;
use serde_json::Value;

use super::codes::{self, response, serialize_type};

/// Default cap on a whole frame, length field included (Java `com.rocketmq.remoting.frameMaxLength`).
pub const DEFAULT_MAX_FRAME_LEN: usize = 16 * 1024 * 1024;
/// The header length travels in 24 bits.
pub const MAX_HEADER_LEN: usize = 0x00FF_FFFF;
/// `flag` bit 0: the command is a response.
pub const FLAG_RESPONSE: i32 = 0x1;
/// `flag` bit 1: the request is oneway (no response is sent).
pub const FLAG_ONEWAY: i32 = 0x2;

/// Largest single buffer growth while waiting for the rest of a frame.
const RESERVE_STEP: usize = 64 * 1024;

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

    /// Builder: sets the remark.
    pub fn with_remark(mut self, remark: impl Into<String>) -> Self {
        self.remark = Some(remark.into());
        self
    }

    /// One ext field.
    pub fn ext(&self, key: &str) -> Option<&str> {
        self.ext_fields.get(key).map(String::as_str)
    }
}

/// Opaque and flag recovered from a frame whose header could not be fully decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveredIds {
    pub opaque: i32,
    /// `None` when the flag could not be recovered.
    pub flag: Option<i32>,
}

/// Why a header could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum HeaderDecodeError {
    #[error("invalid json")]
    Json(#[source] serde_json::Error),
    #[error("json header is not an object")]
    NotAnObject,
    #[error("field `{field}` has an invalid value: {value}")]
    InvalidField { field: &'static str, value: String },
    #[error("binary header truncated reading {what}")]
    Truncated { what: &'static str },
    #[error("invalid length {len} for {what}")]
    BadLength { what: &'static str, len: i64 },
    #[error("{what} is not valid utf-8")]
    Utf8 {
        what: &'static str,
        #[source]
        source: std::str::Utf8Error,
    },
}

/// Errors of [`decode_frame`].
///
/// [`FrameError::is_fatal`] errors leave the byte stream out of sync: the connection must be
/// closed. The others consumed exactly one frame; the stream can go on.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame length {len} exceeds the maximum of {max} bytes")]
    TooLong { len: u64, max: usize },
    #[error("invalid frame length {len}: it must be at least 4")]
    InvalidLength { len: i32 },
    #[error("header length {header_len} exceeds the frame length {frame_len}")]
    HeaderTooLong { header_len: usize, frame_len: usize },
    #[error("unknown serialize type {0}")]
    UnknownSerializeType(u8),
    #[error("malformed {ser_type} header")]
    MalformedHeader {
        ser_type: SerializeType,
        recovered: Option<RecoveredIds>,
        #[source]
        source: HeaderDecodeError,
    },
}

impl FrameError {
    /// True when the stream is out of sync (length field unusable): close the connection.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            FrameError::TooLong { .. } | FrameError::InvalidLength { .. }
        )
    }

    /// Opaque and flag of the offending frame, when they could be recovered.
    pub fn recovered(&self) -> Option<RecoveredIds> {
        match self {
            FrameError::MalformedHeader { recovered, .. } => *recovered,
            _ => None,
        }
    }

    /// The error answer for the offending frame, when it can be addressed: its opaque was
    /// recovered and it was neither a response nor a oneway request. The answer is
    /// SYSTEM_ERROR (1), what Java's remoting layer answers for a request that fails to
    /// process, with this error as remark.
    pub fn error_response(&self) -> Option<RemotingCommand> {
        let ids = self.recovered()?;
        let flag = ids.flag?;
        if flag & (FLAG_RESPONSE | FLAG_ONEWAY) != 0 {
            return None;
        }
        let mut remark = self.to_string();
        if let Some(src) = std::error::Error::source(self) {
            remark.push_str(": ");
            remark.push_str(&src.to_string());
        }
        let mut cmd = RemotingCommand::new_response(response::SYSTEM_ERROR, Some(remark));
        cmd.opaque = ids.opaque;
        Some(cmd)
    }
}

/// Errors of [`encode`].
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("header of {len} bytes exceeds the 24-bit header length field")]
    HeaderTooLong { len: usize },
    #[error("frame of {len} bytes exceeds the i32 length field")]
    FrameTooLong { len: usize },
    #[error("code {code} does not fit the binary header's i16")]
    CodeOutOfRange { code: i32 },
    #[error("version {version} does not fit the binary header's i16")]
    VersionOutOfRange { version: i32 },
    #[error("json header serialization failed")]
    Json(#[source] serde_json::Error),
}

/// Streaming decoder: takes one whole frame off the front of `src`.
///
/// Returns `Ok(None)` until a whole frame is buffered. `max_frame_len` caps the whole frame,
/// length field included (Netty's `LengthFieldBasedFrameDecoder` semantics); an over-long
/// frame is rejected as soon as its length field is read.
pub fn decode_frame(
    src: &mut BytesMut,
    max_frame_len: usize,
) -> Result<Option<RemotingCommand>, FrameError> {
    let Some(frame) = split_frame(src, max_frame_len)? else {
        return Ok(None);
    };
    decode_frame_body(frame).map(Some)
}

/// The number of bytes `src` must hold before the next frame can be decoded (best effort:
/// 4 while the length is unknown). Useful to reserve buffer space.
pub fn bytes_needed(src: &[u8]) -> usize {
    if src.len() < 4 {
        return 4;
    }
    let len = i32::from_be_bytes([src[0], src[1], src[2], src[3]]);
    usize::try_from(len).map_or(4, |l| l.saturating_add(4))
}

/// Splits the next frame (without its length field) off `src`, checking the length.
fn split_frame(src: &mut BytesMut, max_frame_len: usize) -> Result<Option<Bytes>, FrameError> {
    if src.len() < 4 {
        return Ok(None);
    }
    let len = i32::from_be_bytes([src[0], src[1], src[2], src[3]]);
    if len < 4 {
        return Err(FrameError::InvalidLength { len });
    }
    let total = u64::from(len.unsigned_abs()) + 4;
    if total > max_frame_len as u64 {
        return Err(FrameError::TooLong {
            len: total,
            max: max_frame_len,
        });
    }
    // len >= 4 and total <= max_frame_len, so this fits in usize.
    let total = total as usize;
    if src.len() < total {
        // Grow in steps: a peer announcing a large frame gets no large buffer up front.
        src.reserve((total - src.len()).min(RESERVE_STEP));
        return Ok(None);
    }
    let mut frame = src.split_to(total);
    frame.advance(4);
    Ok(Some(frame.freeze()))
}

/// Decodes a frame without its length field: `oriHeaderLen | header | body`.
pub fn decode_frame_body(mut frame: Bytes) -> Result<RemotingCommand, FrameError> {
    let frame_len = frame.len();
    if frame_len < 4 {
        return Err(FrameError::InvalidLength {
            len: i32::try_from(frame_len).unwrap_or(i32::MAX),
        });
    }
    let ori = frame.get_u32();
    let ser_code = (ori >> 24) as u8;
    let header_len = (ori & 0x00FF_FFFF) as usize;
    if header_len > frame_len - 4 {
        return Err(FrameError::HeaderTooLong {
            header_len,
            frame_len,
        });
    }
    let ser_type =
        SerializeType::from_code(ser_code).ok_or(FrameError::UnknownSerializeType(ser_code))?;
    let header = frame.split_to(header_len);
    let mut cmd = match ser_type {
        SerializeType::Json => decode_json_header(&header),
        SerializeType::RocketMq => decode_rocketmq_header(&header),
    }
    .map_err(|source| FrameError::MalformedHeader {
        ser_type,
        recovered: recover_ids(ser_type, &header),
        source,
    })?;
    cmd.body = frame;
    Ok(cmd)
}

/// Encodes `cmd` as one frame with a JSON header (what skiff always sends).
pub fn encode(cmd: &RemotingCommand, dst: &mut BytesMut) -> Result<(), EncodeError> {
    encode_with(cmd, SerializeType::Json, dst)
}

/// Encodes `cmd` as one frame with the given header serialization. On error `dst` is left as
/// it was.
pub fn encode_with(
    cmd: &RemotingCommand,
    ser_type: SerializeType,
    dst: &mut BytesMut,
) -> Result<(), EncodeError> {
    let start = dst.len();
    dst.reserve(8 + 128 + cmd.body.len());
    dst.put_u64(0);
    let res = match ser_type {
        SerializeType::Json => write_json_header(cmd, dst),
        SerializeType::RocketMq => write_rocketmq_header(cmd, dst),
    };
    if let Err(e) = res {
        dst.truncate(start);
        return Err(e);
    }
    let header_len = dst.len() - start - 8;
    if header_len > MAX_HEADER_LEN {
        dst.truncate(start);
        return Err(EncodeError::HeaderTooLong { len: header_len });
    }
    let length = 4 + header_len + cmd.body.len();
    let Ok(length_field) = i32::try_from(length) else {
        dst.truncate(start);
        return Err(EncodeError::FrameTooLong { len: length + 4 });
    };
    dst.extend_from_slice(&cmd.body);
    let ori = (u32::from(ser_type.code()) << 24) | (header_len as u32);
    dst[start..start + 4].copy_from_slice(&length_field.to_be_bytes());
    dst[start + 4..start + 8].copy_from_slice(&ori.to_be_bytes());
    Ok(())
}

#[derive(Serialize)]
struct JsonHeaderOut<'a> {
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

fn write_json_header(cmd: &RemotingCommand, dst: &mut BytesMut) -> Result<(), EncodeError> {
    let out = JsonHeaderOut {
        code: cmd.code,
        ext_fields: &cmd.ext_fields,
        flag: cmd.flag,
        language: &cmd.language,
        opaque: cmd.opaque,
        remark: cmd.remark.as_deref(),
        serialize_type_current_rpc: "JSON",
        version: cmd.version,
    };
    serde_json::to_writer(dst.writer(), &out).map_err(EncodeError::Json)
}

fn write_rocketmq_header(cmd: &RemotingCommand, dst: &mut BytesMut) -> Result<(), EncodeError> {
    let code =
        i16::try_from(cmd.code).map_err(|_| EncodeError::CodeOutOfRange { code: cmd.code })?;
    let version = i16::try_from(cmd.version).map_err(|_| EncodeError::VersionOutOfRange {
        version: cmd.version,
    })?;
    dst.put_i16(code);
    dst.put_u8(codes::language_code(&cmd.language));
    dst.put_i16(version);
    dst.put_i32(cmd.opaque);
    dst.put_i32(cmd.flag);
    let remark = cmd.remark.as_deref().unwrap_or("");
    put_len_i32(dst, remark.len())?;
    dst.put_slice(remark.as_bytes());
    let ext_len_pos = dst.len();
    dst.put_i32(0);
    for (k, v) in &cmd.ext_fields {
        let key_len =
            i16::try_from(k.len()).map_err(|_| EncodeError::HeaderTooLong { len: k.len() })?;
        dst.put_i16(key_len);
        dst.put_slice(k.as_bytes());
        put_len_i32(dst, v.len())?;
        dst.put_slice(v.as_bytes());
    }
    let ext_len = dst.len() - ext_len_pos - 4;
    let ext_len =
        i32::try_from(ext_len).map_err(|_| EncodeError::HeaderTooLong { len: ext_len })?;
    dst[ext_len_pos..ext_len_pos + 4].copy_from_slice(&ext_len.to_be_bytes());
    Ok(())
}

fn put_len_i32(dst: &mut BytesMut, len: usize) -> Result<(), EncodeError> {
    let l = i32::try_from(len).map_err(|_| EncodeError::HeaderTooLong { len })?;
    dst.put_i32(l);
    Ok(())
}

/// Decodes a JSON (serType 0) header, leniently like fastjson: every field is optional
/// (Java's bean defaults), numbers may be numeric strings, `language` is a name or a number,
/// `extFields` values may be strings, numbers, booleans (normalised to strings) or nested JSON
/// (kept as JSON text), nulls are absent, unknown keys (`serializeTypeCurrentRPC` included)
/// are ignored. The returned command has an empty body.
pub fn decode_json_header(header: &[u8]) -> Result<RemotingCommand, HeaderDecodeError> {
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
        cmd.code = lenient_i32(v, "code")?.unwrap_or(0);
    }
    if let Some(v) = map.get("version") {
        cmd.version = lenient_i32(v, "version")?.unwrap_or(0);
    }
    if let Some(v) = map.get("opaque") {
        cmd.opaque = lenient_i32(v, "opaque")?.unwrap_or(0);
    }
    if let Some(v) = map.get("flag") {
        cmd.flag = lenient_i32(v, "flag")?.unwrap_or(0);
    }
    match map.get("language") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => cmd.language = s.clone(),
        Some(v @ Value::Number(_)) => {
            let n = lenient_i32(v, "language")?.unwrap_or(7);
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
    // Taken out of the map, not cloned: every request's custom header passes through here.
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

/// A JSON value as i32: integer numbers, integral floats, numeric strings (trimmed); null is
/// `None`.
fn lenient_i32(v: &Value, field: &'static str) -> Result<Option<i32>, HeaderDecodeError> {
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

/// Decodes a ROCKETMQ (serType 1) binary header (§1.4). The returned command has an empty body.
pub fn decode_rocketmq_header(header: &[u8]) -> Result<RemotingCommand, HeaderDecodeError> {
    let mut r = Reader { buf: header };
    let code = i32::from(r.i16("code")?);
    let language = codes::language_name(r.u8("language")?).to_owned();
    let version = i32::from(r.i16("version")?);
    let opaque = r.i32("opaque")?;
    let flag = r.i32("flag")?;
    let remark_len = r.len_i32("remark length", header.len())?;
    let remark_bytes = r.take(remark_len, "remark")?;
    let remark = if remark_bytes.is_empty() {
        None
    } else {
        Some(utf8(remark_bytes, "remark")?.to_owned())
    };
    let ext_len = r.len_i32("ext fields length", header.len())?;
    let mut ext = Reader {
        buf: r.take(ext_len, "ext fields")?,
    };
    let mut ext_fields = BTreeMap::new();
    while !ext.buf.is_empty() {
        let key_len = ext.i16("ext key length")?;
        let key_len = usize::try_from(key_len).map_err(|_| HeaderDecodeError::BadLength {
            what: "ext key",
            len: i64::from(key_len),
        })?;
        let key = ext.take(key_len, "ext key")?;
        let val_len = ext.len_i32("ext value length", header.len())?;
        let val = ext.take(val_len, "ext value")?;
        // A zero-length string decodes as null in Java: such entries are absent.
        if key.is_empty() || val.is_empty() {
            continue;
        }
        ext_fields.insert(
            utf8(key, "ext key")?.to_owned(),
            utf8(val, "ext value")?.to_owned(),
        );
    }
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

fn utf8<'a>(b: &'a [u8], what: &'static str) -> Result<&'a str, HeaderDecodeError> {
    std::str::from_utf8(b).map_err(|source| HeaderDecodeError::Utf8 { what, source })
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], HeaderDecodeError> {
        if self.buf.len() < n {
            return Err(HeaderDecodeError::Truncated { what });
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], HeaderDecodeError> {
        let b = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, HeaderDecodeError> {
        Ok(self.array::<1>(what)?[0])
    }

    fn i16(&mut self, what: &'static str) -> Result<i16, HeaderDecodeError> {
        Ok(i16::from_be_bytes(self.array(what)?))
    }

    fn i32(&mut self, what: &'static str) -> Result<i32, HeaderDecodeError> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }

    /// An i32 length that must be >= 0 and <= the header length (Java's check).
    fn len_i32(
        &mut self,
        what: &'static str,
        header_len: usize,
    ) -> Result<usize, HeaderDecodeError> {
        let l = self.i32(what)?;
        match usize::try_from(l) {
            Ok(n) if n <= header_len => Ok(n),
            _ => Err(HeaderDecodeError::BadLength {
                what,
                len: i64::from(l),
            }),
        }
    }
}

/// Best-effort recovery of opaque and flag from an undecodable header, so the peer can be
/// answered instead of left waiting.
fn recover_ids(ser_type: SerializeType, header: &[u8]) -> Option<RecoveredIds> {
    match ser_type {
        SerializeType::RocketMq => {
            let mut r = Reader { buf: header };
            r.take(5, "prefix").ok()?;
            let opaque = r.i32("opaque").ok()?;
            let flag = r.i32("flag").ok();
            Some(RecoveredIds { opaque, flag })
        }
        SerializeType::Json => {
            if let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(header) {
                let opaque = map
                    .get("opaque")
                    .and_then(|v| lenient_i32(v, "opaque").ok().flatten())?;
                let flag = match map.get("flag") {
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
fn scan_json_int(text: &[u8], key: &[u8]) -> Option<i32> {
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
    use super::*;

    /// Builds a frame by hand: length, serType + header length, header, body.
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

    #[test]
    fn decodes_java_json_request_with_body() {
        let header = br#"{"code":310,"extFields":{"a":"pg","b":"TopicTest","e":"0"},"flag":0,"language":"JAVA","opaque":42,"serializeTypeCurrentRPC":"JSON","version":479}"#;
        let bytes = raw_frame(0, header, b"hello");
        let mut buf = BytesMut::from(&bytes[..]);
        let cmd = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN)
            .expect("decodes")
            .expect("whole frame");
        assert!(buf.is_empty());
        assert_eq!(cmd.code, 310);
        assert_eq!(cmd.language, "JAVA");
        assert_eq!(cmd.version, 479);
        assert_eq!(cmd.opaque, 42);
        assert_eq!(cmd.flag, 0);
        assert_eq!(cmd.remark, None);
        assert_eq!(cmd.ext("b"), Some("TopicTest"));
        assert_eq!(&cmd.body[..], b"hello");
        assert!(!cmd.is_response());
        assert!(!cmd.is_oneway());
    }

    #[test]
    fn exact_bytes_of_a_minimal_frame() {
        // length 4 + 2 ("{}") = 6, serType 0, header length 2.
        let bytes = [0, 0, 0, 6, 0, 0, 0, 2, b'{', b'}'];
        let mut buf = BytesMut::from(&bytes[..]);
        let cmd = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN)
            .unwrap()
            .unwrap();
        assert_eq!(cmd.code, 0);
        assert_eq!(cmd.language, "JAVA");
        assert_eq!(cmd.opaque, 0);
        assert!(cmd.ext_fields.is_empty());
        assert!(cmd.body.is_empty());
    }

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

    #[test]
    fn streaming_returns_none_until_whole_frame() {
        let mut out = BytesMut::new();
        let cmd = RemotingCommand::new_request(34).with_body(&b"0123456789"[..]);
        encode(&cmd, &mut out).unwrap();
        let all = out.freeze();
        let mut buf = BytesMut::new();
        for (i, b) in all.iter().enumerate() {
            let before = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap();
            assert!(before.is_none(), "frame reported early at byte {i}");
            buf.put_u8(*b);
        }
        let got = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN)
            .unwrap()
            .unwrap();
        assert_eq!(got, cmd);
        assert!(buf.is_empty());
    }

    #[test]
    fn two_frames_back_to_back() {
        let mut buf = BytesMut::new();
        let a = RemotingCommand::new_request(10);
        let b = RemotingCommand::response_to(&a, 0, Some("ok".into()));
        encode(&a, &mut buf).unwrap();
        encode(&b, &mut buf).unwrap();
        buf.extend_from_slice(&[0, 0]); // start of a third frame
        assert_eq!(decode_frame(&mut buf, 1 << 20).unwrap().unwrap(), a);
        assert_eq!(decode_frame(&mut buf, 1 << 20).unwrap().unwrap(), b);
        assert!(decode_frame(&mut buf, 1 << 20).unwrap().is_none());
        assert_eq!(buf.len(), 2);
    }

    #[test]
    fn length_over_cap_is_rejected_before_buffering() {
        let mut buf = BytesMut::from(&[0x01, 0x00, 0x00, 0x00][..]); // 16 MiB announced
        let err = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap_err();
        assert!(matches!(err, FrameError::TooLong { len, .. } if len == 16 * 1024 * 1024 + 4));
        assert!(err.is_fatal());
        // Exactly at the cap is fine (waits for more bytes).
        let at_cap = (DEFAULT_MAX_FRAME_LEN - 4) as i32;
        let mut buf = BytesMut::from(&at_cap.to_be_bytes()[..]);
        assert!(decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN)
            .unwrap()
            .is_none());
    }

    #[test]
    fn negative_and_short_lengths_are_fatal() {
        for bytes in [[0xff, 0xff, 0xff, 0xff], [0, 0, 0, 3], [0, 0, 0, 0]] {
            let mut buf = BytesMut::from(&bytes[..]);
            let err = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap_err();
            assert!(matches!(err, FrameError::InvalidLength { .. }), "{err}");
            assert!(err.is_fatal());
        }
    }

    #[test]
    fn header_length_larger_than_frame() {
        // length 8: hdr word + 4 bytes, but header length says 5.
        let bytes = [0, 0, 0, 8, 0, 0, 0, 5, b'{', b'}', b' ', b' '];
        let mut buf = BytesMut::from(&bytes[..]);
        let err = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap_err();
        assert!(matches!(
            err,
            FrameError::HeaderTooLong {
                header_len: 5,
                frame_len: 8
            }
        ));
        assert!(!err.is_fatal());
        assert!(buf.is_empty(), "the bad frame is consumed");
    }

    #[test]
    fn unknown_serialize_type() {
        let bytes = raw_frame(7, b"{}", b"");
        let mut buf = BytesMut::from(&bytes[..]);
        let err = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap_err();
        assert!(matches!(err, FrameError::UnknownSerializeType(7)));
        assert!(!err.is_fatal());
        assert!(err.error_response().is_none());
    }

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

    /// A hand-written ROCKETMQ binary header: code 11, language CPP, version 401, opaque 77,
    /// flag 0, remark "hi", ext {topic: T, queueId: 3} plus an empty value (null in Java).
    fn binary_header() -> Vec<u8> {
        let mut h = vec![
            0x00, 0x0b, // code 11
            0x01, // CPP
            0x01, 0x91, // version 401
            0x00, 0x00, 0x00, 0x4d, // opaque 77
            0x00, 0x00, 0x00, 0x00, // flag
            0x00, 0x00, 0x00, 0x02, b'h', b'i', // remark
        ];
        let mut ext = Vec::new();
        for (k, v) in [("topic", "T"), ("queueId", "3"), ("empty", "")] {
            ext.extend_from_slice(&(k.len() as i16).to_be_bytes());
            ext.extend_from_slice(k.as_bytes());
            ext.extend_from_slice(&(v.len() as i32).to_be_bytes());
            ext.extend_from_slice(v.as_bytes());
        }
        h.extend_from_slice(&(ext.len() as i32).to_be_bytes());
        h.extend_from_slice(&ext);
        h
    }

    #[test]
    fn decodes_binary_header_frame() {
        let bytes = raw_frame(1, &binary_header(), b"BODY");
        let mut buf = BytesMut::from(&bytes[..]);
        let cmd = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN)
            .unwrap()
            .unwrap();
        assert_eq!(cmd.code, 11);
        assert_eq!(cmd.language, "CPP");
        assert_eq!(cmd.version, 401);
        assert_eq!(cmd.opaque, 77);
        assert_eq!(cmd.flag, 0);
        assert_eq!(cmd.remark.as_deref(), Some("hi"));
        assert_eq!(cmd.ext("topic"), Some("T"));
        assert_eq!(cmd.ext("queueId"), Some("3"));
        assert_eq!(cmd.ext("empty"), None);
        assert_eq!(&cmd.body[..], b"BODY");
    }

    #[test]
    fn binary_header_without_remark_or_ext() {
        let h = [
            0x00, 0x22, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        let cmd = decode_rocketmq_header(&h).unwrap();
        assert_eq!(cmd.code, 34);
        assert_eq!(cmd.language, "RUST");
        assert_eq!(cmd.opaque, 1);
        assert!(cmd.is_response());
        assert_eq!(cmd.remark, None);
        assert!(cmd.ext_fields.is_empty());
    }

    #[test]
    fn binary_header_errors() {
        let good = binary_header();
        // Every truncation fails cleanly.
        for cut in 0..good.len() {
            assert!(
                decode_rocketmq_header(&good[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        // Remark length larger than the header.
        let mut bad = good.clone();
        bad[13..17].copy_from_slice(&1000i32.to_be_bytes());
        assert!(matches!(
            decode_rocketmq_header(&bad),
            Err(HeaderDecodeError::BadLength { .. })
        ));
        // Negative ext key length.
        let mut bad = good.clone();
        bad[23..25].copy_from_slice(&(-1i16).to_be_bytes());
        assert!(decode_rocketmq_header(&bad).is_err());
        // Invalid UTF-8 in the remark.
        let mut bad = good;
        bad[17] = 0xff;
        assert!(matches!(
            decode_rocketmq_header(&bad),
            Err(HeaderDecodeError::Utf8 { what: "remark", .. })
        ));
        // The opaque is still recoverable from a broken binary header.
        let bytes = raw_frame(1, &bad, b"");
        let mut buf = BytesMut::from(&bytes[..]);
        let err = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap_err();
        assert_eq!(err.error_response().unwrap().opaque, 77);
    }

    #[test]
    fn encode_writes_sorted_json_with_serialize_type() {
        let mut cmd = RemotingCommand::new_response(0, None);
        cmd.opaque = 3;
        cmd.version = 479;
        let cmd = cmd.with_ext("queueId", "1").with_ext("msgId", "X");
        let mut out = BytesMut::new();
        encode(&cmd, &mut out).unwrap();
        let header = br#"{"code":0,"extFields":{"msgId":"X","queueId":"1"},"flag":1,"language":"RUST","opaque":3,"serializeTypeCurrentRPC":"JSON","version":479}"#;
        assert_eq!(&out[..], &raw_frame(0, header, b"")[..]);
    }

    #[test]
    fn encode_omits_null_remark_and_empty_ext() {
        let mut out = BytesMut::new();
        let mut cmd = RemotingCommand::new_request(105);
        cmd.opaque = 1;
        encode(&cmd, &mut out).unwrap();
        let text = std::str::from_utf8(&out[8..]).unwrap();
        assert!(!text.contains("remark"), "{text}");
        assert!(!text.contains("extFields"), "{text}");
        assert!(text.contains(r#""serializeTypeCurrentRPC":"JSON""#));
    }

    #[test]
    fn binary_encoding_round_trips() {
        let cmd = RemotingCommand::new_request(11)
            .with_ext("topic", "T")
            .with_remark("r")
            .with_body(&b"xyz"[..]);
        let mut out = BytesMut::new();
        encode_with(&cmd, SerializeType::RocketMq, &mut out).unwrap();
        assert_eq!(out[4], 1);
        let got = decode_frame(&mut out, DEFAULT_MAX_FRAME_LEN)
            .unwrap()
            .unwrap();
        assert_eq!(got, cmd);
        let too_big = RemotingCommand::new_request(200_050);
        let mut out = BytesMut::new();
        assert!(matches!(
            encode_with(&too_big, SerializeType::RocketMq, &mut out),
            Err(EncodeError::CodeOutOfRange { .. })
        ));
        assert!(out.is_empty());
    }

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

    #[test]
    fn bytes_needed_reports_frame_size() {
        assert_eq!(bytes_needed(&[0, 0]), 4);
        assert_eq!(bytes_needed(&[0, 0, 0, 10]), 14);
        assert_eq!(bytes_needed(&[0xff, 0, 0, 10]), 4);
    }
}
