//! The RocketMQ stored-message layout (`docs/wire-protocol.md` §6.1).
//!
//! The commit log stores exactly these bytes, so a pull response body is a concatenation of
//! stored records and needs no re-encoding.

use bytes::Bytes;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::Range;

/// Magic code of a V1 record (topic length fits in one byte).
pub const MAGIC_V1: i32 = -626_843_481;
/// Magic code of a V2 record (topic length as i16, used when the topic is longer than 127 bytes).
pub const MAGIC_V2: i32 = -626_843_477;

/// Property separators of the properties string (§6.4).
pub const NAME_VALUE_SEPARATOR: char = '\u{1}';
pub const PROPERTY_SEPARATOR: char = '\u{2}';

pub mod property;

/// MessageSysFlag bits the codec itself manages (§6.3).
pub mod sys_flag {
    pub const COMPRESSED: i32 = 0x1;
    pub const MULTI_TAGS: i32 = 0x2;
    pub const BORNHOST_V6: i32 = 0x10;
    pub const STOREHOST_V6: i32 = 0x20;
}

/// Byte positions of fixed fields (`MessageDecoder` constants).
pub const MAGIC_POSITION: usize = 4;
pub const BODY_CRC_POSITION: usize = 8;
pub const QUEUE_ID_POSITION: usize = 12;
pub const FLAG_POSITION: usize = 16;
pub const QUEUE_OFFSET_POSITION: usize = 20;
pub const PHYSICAL_OFFSET_POSITION: usize = 28;
pub const SYSFLAG_POSITION: usize = 36;
pub const BORN_TIMESTAMP_POSITION: usize = 40;
pub const BORN_HOST_POSITION: usize = 48;

/// Largest properties string the i16 length prefix can describe.
pub const MAX_PROPERTIES_LEN: usize = i16::MAX as usize;
/// Largest topic a V2 record can describe.
pub const MAX_TOPIC_LEN: usize = i16::MAX as usize;
/// Longest topic that still fits a V1 record's one-byte length.
pub const MAX_V1_TOPIC_LEN: usize = 127;

/// A message as a producer hands it to the store; the store assigns offsets and timestamps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageToAppend {
    pub topic: String,
    pub queue_id: u32,
    pub flag: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    /// Properties in wire form (`name\x01value\x02...`), kept encoded so the hot path copies bytes.
    pub properties: String,
    pub body: Bytes,
}

impl MessageToAppend {
    /// The stored message to be appended again (to a retry, dead-letter or real topic, or
    /// re-encoded for a client) as it was sent: topic, queue, flags, born time and host,
    /// reconsume count, prepared offset, properties and body. Struct-update syntax changes the
    /// rest: `MessageToAppend { topic, queue_id, ..MessageToAppend::copy_of(stored) }`.
    pub fn copy_of(stored: &StoredMessage) -> MessageToAppend {
        MessageToAppend {
            topic: stored.topic.clone(),
            queue_id: stored.queue_id,
            flag: stored.flag,
            sys_flag: stored.sys_flag,
            born_timestamp: stored.born_timestamp,
            born_host: stored.born_host,
            reconsume_times: stored.reconsume_times,
            prepared_transaction_offset: stored.prepared_transaction_offset,
            properties: stored.properties.clone(),
            body: stored.body.clone(),
        }
    }
}

/// A decoded stored record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredMessage {
    pub queue_id: u32,
    pub flag: i32,
    pub queue_offset: u64,
    pub physical_offset: u64,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: Bytes,
    pub topic: String,
    pub properties: String,
    /// Length of the whole record in bytes.
    pub stored_size: u32,
}

impl StoredMessage {
    /// Value of one property (see [`property`]).
    pub fn property(&self, name: &str) -> Option<&str> {
        property(&self.properties, name)
    }

    /// The offset message id of this record (§6.5).
    pub fn offset_msg_id(&self) -> String {
        offset_message_id(self.store_host, self.physical_offset)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageEncodeError {
    #[error("topic of {len} bytes exceeds the {MAX_TOPIC_LEN}-byte limit")]
    TopicTooLong { len: usize },
    #[error("properties of {len} bytes exceed the {MAX_PROPERTIES_LEN}-byte limit")]
    PropertiesTooLong { len: usize },
    #[error("record of {len} bytes does not fit the i32 size field")]
    RecordTooLarge { len: usize },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageDecodeError {
    #[error("record truncated: needs {needed} bytes, {available} available")]
    Truncated { needed: usize, available: usize },
    #[error("bad magic code {magic:#010x}")]
    BadMagic { magic: u32 },
    #[error("bad total size {size}")]
    BadTotalSize { size: i32 },
    #[error("field {field} has invalid length {len}")]
    BadLength { field: &'static str, len: i64 },
    #[error("fields end at byte {fields_end} but the total size says {total_size}")]
    SizeMismatch {
        fields_end: usize,
        total_size: usize,
    },
    #[error("field {field} has invalid value {value}")]
    BadField { field: &'static str, value: i64 },
    #[error("field {field} is not valid utf-8")]
    NotUtf8 { field: &'static str },
    #[error("body crc mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    BodyCrcMismatch { stored: u32, computed: u32 },
}

/// RocketMQ's body checksum: CRC32 (IEEE) with the sign bit cleared, as `UtilAll.crc32` does so
/// the value survives Java's signed int.
pub fn body_crc(body: &[u8]) -> i32 {
    (crc32fast::hash(body) & 0x7FFF_FFFF) as i32
}

fn host_len(addr: &SocketAddr) -> usize {
    match addr {
        SocketAddr::V4(_) => 8,
        SocketAddr::V6(_) => 20,
    }
}

/// Size in bytes [`encode_record`] will produce for `msg` (before any limit checks).
pub fn encoded_len(msg: &MessageToAppend, store_host: SocketAddr) -> usize {
    let topic_len_field = if msg.topic.len() > MAX_V1_TOPIC_LEN {
        2
    } else {
        1
    };
    // 4 size + 4 magic + 4 crc + 4 queue id + 4 flag + 8 queue offset + 8 physical offset
    // + 4 sys flag + 8 born ts + 8 store ts + 4 reconsume + 8 prepared offset = 68.
    68 + host_len(&msg.born_host)
        + host_len(&store_host)
        + 4
        + msg.body.len()
        + topic_len_field
        + msg.topic.len()
        + 2
        + msg.properties.len()
}

fn put_host(out: &mut Vec<u8>, addr: &SocketAddr) {
    match addr.ip() {
        IpAddr::V4(ip) => out.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => out.extend_from_slice(&ip.octets()),
    }
    out.extend_from_slice(&(addr.port() as i32).to_be_bytes());
}

/// Appends the stored-record bytes of `msg` to `out` and returns the record size.
///
/// The host-kind bits of `sys_flag` (0x10 born host IPv6, 0x20 store host IPv6) are derived
/// from the addresses, whatever the caller set, because a decoder trusts them for the layout.
pub fn encode_record(
    msg: &MessageToAppend,
    queue_offset: u64,
    physical_offset: u64,
    store_timestamp: i64,
    store_host: SocketAddr,
    out: &mut Vec<u8>,
) -> Result<u32, MessageEncodeError> {
    let topic = msg.topic.as_bytes();
    if topic.len() > MAX_TOPIC_LEN {
        return Err(MessageEncodeError::TopicTooLong { len: topic.len() });
    }
    let props = msg.properties.as_bytes();
    if props.len() > MAX_PROPERTIES_LEN {
        return Err(MessageEncodeError::PropertiesTooLong { len: props.len() });
    }
    let len = encoded_len(msg, store_host);
    if len > i32::MAX as usize {
        return Err(MessageEncodeError::RecordTooLarge { len });
    }
    let v2 = topic.len() > MAX_V1_TOPIC_LEN;
    let mut flags = msg.sys_flag & !(sys_flag::BORNHOST_V6 | sys_flag::STOREHOST_V6);
    if msg.born_host.is_ipv6() {
        flags |= sys_flag::BORNHOST_V6;
    }
    if store_host.is_ipv6() {
        flags |= sys_flag::STOREHOST_V6;
    }
    out.reserve(len);
    let start = out.len();
    out.extend_from_slice(&(len as i32).to_be_bytes());
    out.extend_from_slice(&(if v2 { MAGIC_V2 } else { MAGIC_V1 }).to_be_bytes());
    out.extend_from_slice(&body_crc(&msg.body).to_be_bytes());
    out.extend_from_slice(&(msg.queue_id as i32).to_be_bytes());
    out.extend_from_slice(&msg.flag.to_be_bytes());
    out.extend_from_slice(&(queue_offset as i64).to_be_bytes());
    out.extend_from_slice(&(physical_offset as i64).to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&msg.born_timestamp.to_be_bytes());
    put_host(out, &msg.born_host);
    out.extend_from_slice(&store_timestamp.to_be_bytes());
    put_host(out, &store_host);
    out.extend_from_slice(&msg.reconsume_times.to_be_bytes());
    out.extend_from_slice(&msg.prepared_transaction_offset.to_be_bytes());
    out.extend_from_slice(&(msg.body.len() as i32).to_be_bytes());
    out.extend_from_slice(&msg.body);
    if v2 {
        out.extend_from_slice(&(topic.len() as i16).to_be_bytes());
    } else {
        out.push(topic.len() as u8);
    }
    out.extend_from_slice(topic);
    out.extend_from_slice(&(props.len() as i16).to_be_bytes());
    out.extend_from_slice(props);
    debug_assert_eq!(out.len() - start, len);
    Ok(len as u32)
}

/// Where the fields of one verified record lie in its buffer; produced without allocating, for
/// the store's read and recovery paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordLayout {
    pub total_size: u32,
    pub queue_id: u32,
    pub flag: i32,
    pub queue_offset: u64,
    pub physical_offset: u64,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: Range<usize>,
    pub topic: Range<usize>,
    pub properties: Range<usize>,
}

/// Bounds-checked big-endian reader; every accessor fails instead of panicking.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], MessageDecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.buf.len())
            .ok_or(MessageDecodeError::Truncated {
                needed: self.pos.saturating_add(n),
                available: self.buf.len(),
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], MessageDecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn i16(&mut self) -> Result<i16, MessageDecodeError> {
        Ok(i16::from_be_bytes(self.array()?))
    }
    fn i32(&mut self) -> Result<i32, MessageDecodeError> {
        Ok(i32::from_be_bytes(self.array()?))
    }
    fn i64(&mut self) -> Result<i64, MessageDecodeError> {
        Ok(i64::from_be_bytes(self.array()?))
    }
    fn u8(&mut self) -> Result<u8, MessageDecodeError> {
        Ok(self.take(1)?[0])
    }
    fn host(&mut self, v6: bool) -> Result<SocketAddr, MessageDecodeError> {
        let ip = if v6 {
            IpAddr::V6(Ipv6Addr::from(self.array::<16>()?))
        } else {
            IpAddr::V4(Ipv4Addr::from(self.array::<4>()?))
        };
        let port = self.i32()?;
        let port = u16::try_from(port).map_err(|_| MessageDecodeError::BadField {
            field: "port",
            value: port.into(),
        })?;
        Ok(SocketAddr::new(ip, port))
    }
    fn range(&mut self, n: usize) -> Result<Range<usize>, MessageDecodeError> {
        let start = self.pos;
        self.take(n)?;
        Ok(start..self.pos)
    }
}

fn non_negative(field: &'static str, v: i64) -> Result<u64, MessageDecodeError> {
    u64::try_from(v).map_err(|_| MessageDecodeError::BadField { field, value: v })
}

/// Parses and verifies the record at the start of `buf`: magic, size fields that add up to the
/// total size, non-negative offsets and the body CRC. Topic and properties are not checked for
/// UTF-8 here (the store's read path serves bytes and need not pay for it); the decoders do.
pub fn parse_record(buf: &[u8]) -> Result<RecordLayout, MessageDecodeError> {
    let mut c = Cursor { buf, pos: 0 };
    let total = c.i32()?;
    let magic = c.i32()?;
    let v2 = match magic {
        MAGIC_V1 => false,
        MAGIC_V2 => true,
        _ => {
            return Err(MessageDecodeError::BadMagic {
                magic: magic as u32,
            })
        }
    };
    let total_size = usize::try_from(total)
        .ok()
        .filter(|t| *t >= 4)
        .ok_or(MessageDecodeError::BadTotalSize { size: total })?;
    if total_size > buf.len() {
        return Err(MessageDecodeError::Truncated {
            needed: total_size,
            available: buf.len(),
        });
    }
    // Confine every later field to this record so a lying length cannot reach the next one.
    c.buf = &buf[..total_size];
    let crc = c.i32()?;
    let queue_id = c.i32()?;
    let queue_id = u32::try_from(queue_id).map_err(|_| MessageDecodeError::BadField {
        field: "queue id",
        value: queue_id.into(),
    })?;
    let flag = c.i32()?;
    let queue_offset = non_negative("queue offset", c.i64()?)?;
    let physical_offset = non_negative("physical offset", c.i64()?)?;
    let sys_flag = c.i32()?;
    let born_timestamp = c.i64()?;
    let born_host = c.host(sys_flag & sys_flag::BORNHOST_V6 != 0)?;
    let store_timestamp = c.i64()?;
    let store_host = c.host(sys_flag & sys_flag::STOREHOST_V6 != 0)?;
    let reconsume_times = c.i32()?;
    let prepared_transaction_offset = c.i64()?;
    let body_len = c.i32()?;
    let body_len = usize::try_from(body_len).map_err(|_| MessageDecodeError::BadLength {
        field: "body",
        len: body_len.into(),
    })?;
    let body = c.range(body_len)?;
    let topic_len = if v2 {
        let l = c.i16()?;
        usize::try_from(l).map_err(|_| MessageDecodeError::BadLength {
            field: "topic",
            len: l.into(),
        })?
    } else {
        usize::from(c.u8()?)
    };
    let topic = c.range(topic_len)?;
    let props_len = c.i16()?;
    let props_len = usize::try_from(props_len).map_err(|_| MessageDecodeError::BadLength {
        field: "properties",
        len: props_len.into(),
    })?;
    let properties = c.range(props_len)?;
    if c.pos != total_size {
        return Err(MessageDecodeError::SizeMismatch {
            fields_end: c.pos,
            total_size,
        });
    }
    let computed = body_crc(&buf[body.clone()]);
    if computed != crc {
        return Err(MessageDecodeError::BodyCrcMismatch {
            stored: crc as u32,
            computed: computed as u32,
        });
    }
    Ok(RecordLayout {
        total_size: total_size as u32,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        body,
        topic,
        properties,
    })
}

/// Walks back-to-back records (a pull or pop body) by their layouts, decoding nothing else; a
/// malformed record is yielded as the error and ends the walk.
pub fn record_layouts(
    buf: &[u8],
) -> impl Iterator<Item = Result<RecordLayout, MessageDecodeError>> + '_ {
    let mut rest = buf;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let parsed = parse_record(rest);
        // `parse_record` checked the size against the buffer.
        rest = match &parsed {
            Ok(layout) => &rest[layout.total_size as usize..],
            Err(_) => &[],
        };
        Some(parsed)
    })
}

fn utf8_string(
    buf: &[u8],
    range: Range<usize>,
    field: &'static str,
) -> Result<String, MessageDecodeError> {
    std::str::from_utf8(&buf[range])
        .map(str::to_string)
        .map_err(|_| MessageDecodeError::NotUtf8 { field })
}

fn to_message(
    layout: RecordLayout,
    buf: &[u8],
    body: Bytes,
) -> Result<StoredMessage, MessageDecodeError> {
    Ok(StoredMessage {
        queue_id: layout.queue_id,
        flag: layout.flag,
        queue_offset: layout.queue_offset,
        physical_offset: layout.physical_offset,
        sys_flag: layout.sys_flag,
        born_timestamp: layout.born_timestamp,
        born_host: layout.born_host,
        store_timestamp: layout.store_timestamp,
        store_host: layout.store_host,
        reconsume_times: layout.reconsume_times,
        prepared_transaction_offset: layout.prepared_transaction_offset,
        body,
        topic: utf8_string(buf, layout.topic, "topic")?,
        properties: utf8_string(buf, layout.properties, "properties")?,
        stored_size: layout.total_size,
    })
}

/// Decodes the record at the start of `buf`, returning it and the bytes it occupied.
pub fn decode_record(buf: &[u8]) -> Result<(StoredMessage, usize), MessageDecodeError> {
    let layout = parse_record(buf)?;
    let size = layout.total_size as usize;
    let body = Bytes::copy_from_slice(&buf[layout.body.clone()]);
    Ok((to_message(layout, buf, body)?, size))
}

/// Decodes back-to-back records (a pull response body); bodies share `buf` without copying.
pub fn decode_records(buf: Bytes) -> Result<Vec<StoredMessage>, MessageDecodeError> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let rest = &buf[pos..];
        let layout = parse_record(rest)?;
        let size = layout.total_size as usize;
        let body = buf.slice(pos + layout.body.start..pos + layout.body.end);
        out.push(to_message(layout, rest, body)?);
        pos += size;
    }
    Ok(out)
}

/// Builds a properties string: every pair ends with the property separator, as Java writes it.
pub fn encode_properties(pairs: &[(&str, &str)]) -> String {
    let mut s = String::with_capacity(pairs.iter().map(|(n, v)| n.len() + v.len() + 2).sum());
    for (name, value) in pairs {
        s.push_str(name);
        s.push(NAME_VALUE_SEPARATOR);
        s.push_str(value);
        s.push(PROPERTY_SEPARATOR);
    }
    s
}

/// The pairs of a properties string in order, skipping what Java's parser skips: segments
/// shorter than 3 bytes and segments without a name-value separator.
pub fn property_pairs(props: &str) -> impl Iterator<Item = (&str, &str)> {
    props
        .split(PROPERTY_SEPARATOR)
        .filter(|seg| seg.len() >= 3)
        .filter_map(|seg| seg.split_once(NAME_VALUE_SEPARATOR))
}

/// Value of property `name`; with duplicates the last one wins, as in Java's map.
///
/// A plain byte scan: the store looks up TAGS for every appended message, and the generic
/// `split` iterators cost several times more on these short strings.
pub fn property<'a>(props: &'a str, name: &str) -> Option<&'a str> {
    let bytes = props.as_bytes();
    let mut found = None;
    let mut seg_start = 0;
    while seg_start < bytes.len() {
        let seg_end = find_byte(&bytes[seg_start..], PROPERTY_SEPARATOR as u8)
            .map_or(bytes.len(), |p| seg_start + p);
        let seg = &bytes[seg_start..seg_end];
        if seg.len() >= 3 && seg.len() > name.len() && seg.starts_with(name.as_bytes()) {
            // Both separators are ASCII, so these indices are char boundaries.
            if seg[name.len()] == NAME_VALUE_SEPARATOR as u8 {
                found = Some(&props[seg_start + name.len() + 1..seg_end]);
            }
        }
        seg_start = seg_end + 1;
    }
    found
}

/// Index of the first `needle` in `hay`, eight bytes per step: the byte-at-a-time scan was most
/// of `property`, which runs twice per appended message.
fn find_byte(hay: &[u8], needle: u8) -> Option<usize> {
    const LOW_BITS: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH_BITS: u64 = u64::from_ne_bytes([0x80; 8]);
    let pattern = u64::from_ne_bytes([needle; 8]);
    let mut chunks = hay.chunks_exact(8);
    let mut base = 0;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let diff = u64::from_le_bytes(word) ^ pattern;
        // A zero byte of `diff` is a match; the lowest flagged byte is exact (only bytes above a
        // real zero can be flagged falsely).
        let zeros = diff.wrapping_sub(LOW_BITS) & !diff & HIGH_BITS;
        if zeros != 0 {
            return Some(base + (zeros.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|b| *b == needle)
        .map(|p| base + p)
}

/// Every property as a map (the last of duplicate names wins).
pub fn parse_properties(props: &str) -> HashMap<String, String> {
    property_pairs(props)
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// Java's `String.hashCode` of a tag (over UTF-16 code units), widened to i64 as RocketMQ
/// stores it in the consume queue; an empty tag hashes to 0.
pub fn tag_hash_code(tag: &str) -> i64 {
    let mut h: i32 = 0;
    for unit in tag.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    i64::from(h)
}

/// Offset message id (§6.5): store ip, port (i32) and commit-log offset (i64), upper-case hex.
pub fn offset_message_id(store_host: SocketAddr, physical_offset: u64) -> String {
    let mut bytes = Vec::with_capacity(28);
    put_host(&mut bytes, &store_host);
    bytes.extend_from_slice(&physical_offset.to_be_bytes());
    // A lookup table: `write!` per byte cost more than the whole append on the send path.
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0x0F)]));
    }
    s
}

/// `props` with `updates` set, in wire form: earlier values of those names are dropped and the
/// updates appended in their order.
pub fn with_properties(props: &str, updates: &[(&str, &str)]) -> String {
    let mut all: Vec<(&str, &str)> = property_pairs(props)
        .filter(|(name, _)| !updates.iter().any(|(n, _)| n == name))
        .collect();
    all.extend_from_slice(updates);
    encode_properties(&all)
}

/// `props` without the properties named in `names`, in wire form.
pub fn without_properties(props: &str, names: &[&str]) -> String {
    let kept: Vec<(&str, &str)> = property_pairs(props)
        .filter(|(name, _)| !names.contains(name))
        .collect();
    encode_properties(&kept)
}

/// Appends one property to `props` in place, closing an unterminated last pair first. An earlier
/// value of `name` stays in the string; readers take the last one ([`property`]).
pub fn push_property(props: &mut String, name: &str, value: &str) {
    if !props.is_empty() && !props.ends_with(PROPERTY_SEPARATOR) {
        props.push(PROPERTY_SEPARATOR);
    }
    props.push_str(name);
    props.push(NAME_VALUE_SEPARATOR);
    props.push_str(value);
    props.push(PROPERTY_SEPARATOR);
}

/// Sets `name` to `value` in `props`: appended when absent (the cheap, common case), left alone
/// when already equal, rewritten otherwise so the string holds one value for it.
pub fn set_property(props: &mut String, name: &str, value: &str) {
    match property(props, name) {
        None => push_property(props, name, value),
        Some(current) if current == value => {}
        Some(_) => *props = with_properties(props, &[(name, value)]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(topic: &str, born: SocketAddr) -> MessageToAppend {
        MessageToAppend {
            topic: topic.to_string(),
            queue_id: 3,
            flag: 7,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_123,
            born_host: born,
            reconsume_times: 2,
            prepared_transaction_offset: 0,
            properties: encode_properties(&[("TAGS", "TagA"), ("KEYS", "k1 k2")]),
            body: Bytes::from_static(b"hello, skiff"),
        }
    }

    fn v4(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn encode(msg: &MessageToAppend, store: SocketAddr) -> Vec<u8> {
        let mut out = Vec::new();
        let n = encode_record(msg, 42, 4096, 1_700_000_000_999, store, &mut out).unwrap();
        assert_eq!(n as usize, out.len());
        assert_eq!(out.len(), encoded_len(msg, store));
        out
    }

    #[test]
    fn record_layouts_walk_back_to_back_records_and_stop_at_a_broken_one() {
        let store = v4("127.0.0.1:10911");
        let one = encode(&sample("TopicTest", v4("10.0.0.1:5555")), store);
        let cases: [(&str, Vec<u8>, usize, bool); 4] = [
            ("empty", Vec::new(), 0, false),
            ("one", one.clone(), 1, false),
            ("two", [one.clone(), one.clone()].concat(), 2, false),
            (
                "two and a cut tail",
                [one.clone(), one.clone(), one[..10].to_vec()].concat(),
                2,
                true,
            ),
        ];
        for (name, buf, records, broken) in cases {
            let walked: Vec<_> = record_layouts(&buf).collect();
            let ok = walked.iter().filter(|r| r.is_ok()).count();
            assert_eq!(ok, records, "{name}");
            assert_eq!(walked.len(), records + usize::from(broken), "{name}");
            assert!(
                walked[..ok]
                    .iter()
                    .all(|r| r.as_ref().is_ok_and(|l| l.queue_offset == 42)),
                "{name}"
            );
        }
    }

    #[test]
    fn round_trip_v1_ipv4() {
        let msg = sample("TopicTest", v4("10.0.0.1:5555"));
        let store = v4("127.0.0.1:10911");
        let buf = encode(&msg, store);
        // 84 fixed + 4 body len + 12 body + 1 + 9 topic + 2 + props.
        assert_eq!(buf.len(), 84 + 4 + 12 + 1 + 9 + 2 + msg.properties.len());
        let (m, used) = decode_record(&buf).unwrap();
        assert_eq!(used, buf.len());
        assert_eq!(m.topic, "TopicTest");
        assert_eq!(m.queue_id, 3);
        assert_eq!(m.flag, 7);
        assert_eq!(m.queue_offset, 42);
        assert_eq!(m.physical_offset, 4096);
        assert_eq!(m.sys_flag, 0);
        assert_eq!(m.born_timestamp, 1_700_000_000_123);
        assert_eq!(m.born_host, msg.born_host);
        assert_eq!(m.store_timestamp, 1_700_000_000_999);
        assert_eq!(m.store_host, store);
        assert_eq!(m.reconsume_times, 2);
        assert_eq!(m.body, msg.body);
        assert_eq!(m.properties, msg.properties);
        assert_eq!(m.stored_size as usize, buf.len());
        assert_eq!(m.property("TAGS"), Some("TagA"));
    }

    #[test]
    fn fixed_field_byte_positions() {
        let msg = sample("T", v4("1.2.3.4:80"));
        let buf = encode(&msg, v4("127.0.0.1:10911"));
        let be32 = |p: usize| i32::from_be_bytes(buf[p..p + 4].try_into().unwrap());
        let be64 = |p: usize| i64::from_be_bytes(buf[p..p + 8].try_into().unwrap());
        assert_eq!(be32(0) as usize, buf.len());
        assert_eq!(be32(MAGIC_POSITION), MAGIC_V1);
        assert_eq!(&buf[4..8], &[0xDA, 0xA3, 0x20, 0xA7]);
        assert_eq!(be32(BODY_CRC_POSITION), body_crc(b"hello, skiff"));
        assert_eq!(be32(12), 3);
        assert_eq!(be32(FLAG_POSITION), 7);
        assert_eq!(be64(20), 42);
        assert_eq!(be64(28), 4096);
        assert_eq!(be32(36), 0);
        assert_eq!(be64(40), 1_700_000_000_123);
        assert_eq!(&buf[48..56], &[1, 2, 3, 4, 0, 0, 0, 80]);
        assert_eq!(be64(56), 1_700_000_000_999);
        assert_eq!(&buf[64..72], &[127, 0, 0, 1, 0, 0, 0x2A, 0x9F]);
        assert_eq!(be32(72), 2);
        assert_eq!(be64(76), 0);
        assert_eq!(be32(84), 12);
        assert_eq!(&buf[88..100], b"hello, skiff");
        assert_eq!(buf[100], 1);
        assert_eq!(buf[101], b'T');
    }

    #[test]
    fn body_crc_masks_the_sign_bit_like_util_all() {
        // zlib/IEEE CRC32 of "123456789" is 0xCBF43926; Java's UtilAll.crc32 clears bit 31.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
        assert_eq!(body_crc(b"123456789"), 0x4BF4_3926);
        assert!(body_crc(b"anything at all") >= 0);
    }

    #[test]
    fn long_topic_uses_v2() {
        let topic = "t".repeat(200);
        let msg = sample(&topic, v4("10.0.0.1:5555"));
        let buf = encode(&msg, v4("127.0.0.1:10911"));
        assert_eq!(i32::from_be_bytes(buf[4..8].try_into().unwrap()), MAGIC_V2);
        let body_end = 88 + msg.body.len();
        assert_eq!(&buf[body_end..body_end + 2], &200i16.to_be_bytes());
        let (m, _) = decode_record(&buf).unwrap();
        assert_eq!(m.topic, topic);

        let edge = sample(&"e".repeat(127), v4("10.0.0.1:5555"));
        let buf = encode(&edge, v4("127.0.0.1:10911"));
        assert_eq!(i32::from_be_bytes(buf[4..8].try_into().unwrap()), MAGIC_V1);
        assert_eq!(decode_record(&buf).unwrap().0.topic.len(), 127);
    }

    #[test]
    fn ipv6_hosts_set_flags_and_widen_fields() {
        let born: SocketAddr = "[2001:db8::1]:4321".parse().unwrap();
        let store: SocketAddr = "[::1]:10911".parse().unwrap();
        let mut msg = sample("TopicTest", born);
        msg.sys_flag = sys_flag::MULTI_TAGS;
        let buf = encode(&msg, store);
        let mut all_v4 = msg.clone();
        all_v4.born_host = v4("1.1.1.1:1");
        assert_eq!(buf.len(), encoded_len(&all_v4, v4("1.1.1.1:1")) + 24);
        let flags = i32::from_be_bytes(buf[36..40].try_into().unwrap());
        assert_eq!(
            flags,
            sys_flag::MULTI_TAGS | sys_flag::BORNHOST_V6 | sys_flag::STOREHOST_V6
        );
        let (m, _) = decode_record(&buf).unwrap();
        assert_eq!(m.born_host, born);
        assert_eq!(m.store_host, store);
        // Store timestamp follows a 20-byte born host.
        assert_eq!(
            i64::from_be_bytes(buf[68..76].try_into().unwrap()),
            1_700_000_000_999
        );

        // A stale v6 bit on an IPv4 host is cleared, or a decoder would misread the layout.
        let mut msg = sample("TopicTest", v4("10.0.0.1:1"));
        msg.sys_flag = sys_flag::BORNHOST_V6;
        let buf = encode(&msg, v4("127.0.0.1:10911"));
        assert_eq!(i32::from_be_bytes(buf[36..40].try_into().unwrap()), 0);
        assert!(decode_record(&buf).is_ok());
    }

    #[test]
    fn decode_rejects_bad_magic_size_and_crc() {
        let msg = sample("TopicTest", v4("10.0.0.1:5555"));
        let good = encode(&msg, v4("127.0.0.1:10911"));

        let mut b = good.clone();
        b[5] ^= 0xFF;
        assert!(matches!(
            decode_record(&b),
            Err(MessageDecodeError::BadMagic { .. })
        ));

        let mut b = good.clone();
        b[90] ^= 0x01;
        assert!(matches!(
            decode_record(&b),
            Err(MessageDecodeError::BodyCrcMismatch { .. })
        ));

        assert!(matches!(
            decode_record(&good[..good.len() - 1]),
            Err(MessageDecodeError::Truncated { .. })
        ));

        let mut b = good.clone();
        b[0..4].copy_from_slice(&((good.len() + 1) as i32).to_be_bytes());
        b.push(0);
        assert!(decode_record(&b).is_err());

        let mut b = good.clone();
        b[0..4].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(matches!(
            decode_record(&b),
            Err(MessageDecodeError::BadTotalSize { .. })
        ));
    }

    #[test]
    fn decode_never_panics_on_mutations_and_prefixes() {
        let msg = sample(&"x".repeat(130), "[::1]:1".parse().unwrap());
        let good = encode(&msg, v4("127.0.0.1:10911"));
        for cut in 0..good.len() {
            assert!(decode_record(&good[..cut]).is_err());
        }
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut b = good.clone();
            let pos = (seed % b.len() as u64) as usize;
            b[pos] = (seed >> 32) as u8;
            let _ = decode_record(&b);
            let _ = decode_records(Bytes::from(b));
        }
    }

    #[test]
    fn decode_records_walks_a_batch() {
        let mut buf = Vec::new();
        for i in 0..5u64 {
            let mut m = sample("TopicTest", v4("10.0.0.1:5555"));
            m.body = Bytes::from(vec![i as u8; i as usize * 10]);
            encode_record(&m, i, buf.len() as u64, 1, v4("127.0.0.1:10911"), &mut buf).unwrap();
        }
        let msgs = decode_records(Bytes::from(buf)).unwrap();
        assert_eq!(msgs.len(), 5);
        for (i, m) in msgs.iter().enumerate() {
            assert_eq!(m.queue_offset, i as u64);
            assert_eq!(m.body.len(), i * 10);
        }
        assert!(decode_records(Bytes::new()).unwrap().is_empty());
    }

    #[test]
    fn encode_rejects_oversize_properties_and_topic() {
        let mut m = sample("TopicTest", v4("10.0.0.1:5555"));
        m.properties = "a".repeat(MAX_PROPERTIES_LEN + 1);
        assert!(matches!(
            encode_record(&m, 0, 0, 0, v4("127.0.0.1:1"), &mut Vec::new()),
            Err(MessageEncodeError::PropertiesTooLong { .. })
        ));
        let mut m = sample(&"t".repeat(MAX_TOPIC_LEN + 1), v4("10.0.0.1:5555"));
        m.properties.clear();
        assert!(matches!(
            encode_record(&m, 0, 0, 0, v4("127.0.0.1:1"), &mut Vec::new()),
            Err(MessageEncodeError::TopicTooLong { .. })
        ));
    }

    #[test]
    fn properties_encode_parse_and_lookup() {
        let s = encode_properties(&[("TAGS", "TagA"), ("KEYS", "a b"), ("UNIQ_KEY", "X")]);
        assert_eq!(s, "TAGS\u{1}TagA\u{2}KEYS\u{1}a b\u{2}UNIQ_KEY\u{1}X\u{2}");
        assert_eq!(property(&s, "TAGS"), Some("TagA"));
        assert_eq!(property(&s, "KEYS"), Some("a b"));
        assert_eq!(property(&s, "NOPE"), None);
        let map = parse_properties(&s);
        assert_eq!(map.len(), 3);
        assert_eq!(map["UNIQ_KEY"], "X");
        // Java's parser: short segments and segments without a separator are skipped,
        // the last duplicate wins, and a missing trailing separator is tolerated.
        let odd = "a\u{1}\u{2}xy\u{2}noval\u{2}K\u{1}1\u{2}K\u{1}2";
        assert_eq!(property(odd, "K"), Some("2"));
        assert_eq!(property(odd, "a"), None);
        assert_eq!(parse_properties(odd).len(), 1);
        // The lookup agrees with the pair parser on awkward inputs.
        for props in [
            odd,
            "K\u{1}\u{2}K",
            "KK\u{1}x\u{2}K\u{1}y",
            "\u{2}\u{2}K\u{1}é\u{2}",
            "K\u{1}a\u{1}b",
        ] {
            for name in ["K", "KK", "a", ""] {
                let want = property_pairs(props)
                    .filter(|(n, _)| *n == name)
                    .last()
                    .map(|(_, v)| v);
                assert_eq!(property(props, name), want, "{props:?} {name:?}");
            }
        }
        assert!(parse_properties("").is_empty());
    }

    #[test]
    fn tag_hash_matches_java_string_hash_code() {
        assert_eq!(tag_hash_code("TagA"), 2_598_919);
        assert_eq!(tag_hash_code(""), 0);
        assert_eq!(tag_hash_code("a"), 97);
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE in Java.
        assert_eq!(tag_hash_code("polygenelubricants"), i64::from(i32::MIN));
        // Non-BMP chars hash as two UTF-16 surrogates: "😀" = \uD83D\uDE00.
        assert_eq!(tag_hash_code("😀"), 0xD83D * 31 + 0xDE00);
        assert_eq!(tag_hash_code("é"), 0xE9);
    }

    #[test]
    fn offset_message_id_is_upper_hex() {
        let id = offset_message_id(v4("127.0.0.1:10911"), 0x1CE);
        assert_eq!(id, "7F00000100002A9F00000000000001CE");
        let v6 = offset_message_id("[::1]:10911".parse().unwrap(), 1);
        assert_eq!(v6.len(), 56);
        assert!(v6.starts_with("00000000000000000000000000000001"));
        assert!(v6.ends_with("00002A9F0000000000000001"));
    }

    #[test]
    fn find_byte_agrees_with_a_plain_scan() {
        // Every needle position (and none) across chunk boundaries, with bytes that differ from
        // the needle by one bit or by the borrow the word trick could mis-flag.
        for len in 0..40 {
            for at in 0..=len {
                for needle in [0x00u8, 0x01, 0x02, 0x7f, 0x80, 0xff] {
                    let mut hay: Vec<u8> = (0..len)
                        .map(|i| match i % 4 {
                            0 => needle ^ 1,
                            1 => needle.wrapping_add(1),
                            2 => needle.wrapping_sub(1),
                            _ => needle ^ 0x80,
                        })
                        .collect();
                    if at < len {
                        hay[at] = needle;
                        if at + 1 < len {
                            hay[at + 1] = needle;
                        }
                    }
                    let expected = hay.iter().position(|b| *b == needle);
                    assert_eq!(
                        find_byte(&hay, needle),
                        expected,
                        "len {len} at {at} needle {needle}"
                    );
                }
            }
        }
    }

    #[test]
    fn with_properties_replaces_and_appends() {
        let props = encode_properties(&[("TAGS", "a"), ("DELAY", "3"), ("KEYS", "k")]);
        let updated = with_properties(&props, &[("DELAY", "5"), ("REAL_QID", "2")]);
        assert_eq!(
            updated,
            encode_properties(&[
                ("TAGS", "a"),
                ("KEYS", "k"),
                ("DELAY", "5"),
                ("REAL_QID", "2")
            ])
        );
    }

    #[test]
    fn without_properties_drops_the_named_ones() {
        let props = encode_properties(&[("TAGS", "a"), ("DELAY", "3"), ("REAL_TOPIC", "T")]);
        assert_eq!(
            without_properties(&props, &["DELAY", "REAL_TOPIC"]),
            encode_properties(&[("TAGS", "a")])
        );
        assert_eq!(without_properties("", &["DELAY"]), "");
    }

    #[test]
    fn push_property_closes_an_unterminated_pair_first() {
        let mut props = String::new();
        push_property(&mut props, "UNIQ_KEY", "id1");
        assert_eq!(props, encode_properties(&[("UNIQ_KEY", "id1")]));
        let mut props = format!("TAGS{NAME_VALUE_SEPARATOR}a");
        push_property(&mut props, "KEYS", "k");
        assert_eq!(props, encode_properties(&[("TAGS", "a"), ("KEYS", "k")]));
        assert_eq!(property(&props, "KEYS"), Some("k"));
    }

    #[test]
    fn set_property_appends_keeps_or_rewrites() {
        let mut props = encode_properties(&[("TAGS", "a")]);
        set_property(&mut props, "CLUSTER", "c1");
        assert_eq!(
            props,
            encode_properties(&[("TAGS", "a"), ("CLUSTER", "c1")])
        );
        set_property(&mut props, "CLUSTER", "c1");
        assert_eq!(
            props,
            encode_properties(&[("TAGS", "a"), ("CLUSTER", "c1")])
        );
        set_property(&mut props, "TAGS", "b");
        assert_eq!(
            property_pairs(&props).filter(|(n, _)| *n == "TAGS").count(),
            1
        );
        assert_eq!(property(&props, "TAGS"), Some("b"));
        assert_eq!(property(&props, "CLUSTER"), Some("c1"));
    }
}
