//! The ROCKETMQ binary header (serType 1, `docs/wire-protocol.md` §1.4): fixed-width fields,
//! then length-prefixed remark and ext fields.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};

use super::super::codes;
use super::{EncodeError, HeaderDecodeError, RemotingCommand};

pub(super) fn write_rocketmq_header(
    cmd: &RemotingCommand,
    dst: &mut BytesMut,
) -> Result<(), EncodeError> {
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

pub(super) struct Reader<'a> {
    pub(super) buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(super) fn take(
        &mut self,
        n: usize,
        what: &'static str,
    ) -> Result<&'a [u8], HeaderDecodeError> {
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

    pub(super) fn i32(&mut self, what: &'static str) -> Result<i32, HeaderDecodeError> {
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

#[cfg(test)]
mod tests {
    use super::super::{
        decode_frame, encode_with, raw_frame, SerializeType, DEFAULT_MAX_FRAME_LEN,
    };
    use super::*;

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
    fn binary_encoding_round_trips() {
        let cmd = RemotingCommand {
            remark: Some("r".to_owned()),
            ..RemotingCommand::new_request(11)
        }
        .with_ext("topic", "T")
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
}
