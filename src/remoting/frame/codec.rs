//! Frames on a byte stream: [`decode_frame`] takes one whole frame off the front of a buffer,
//! [`encode_with`] appends one; both hand the header to its serialization's module.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::super::codes::response;
use super::binary_header::{decode_rocketmq_header, write_rocketmq_header};
use super::json_header::{decode_json_header, write_json_header};
use super::recover::{recover_ids, RecoveredIds};
use super::{RemotingCommand, SerializeType, FLAG_ONEWAY, FLAG_RESPONSE, MAX_HEADER_LEN};

/// Largest single buffer growth while waiting for the rest of a frame.
const RESERVE_STEP: usize = 64 * 1024;

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

#[cfg(test)]
mod tests {
    use super::super::{raw_frame, DEFAULT_MAX_FRAME_LEN};
    use super::*;

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
}
