//! `skiff admin message <msg-id>` and `skiff admin query <topic> <key>`: finding stored
//! messages, as `mqadmin queryMsgById`, `queryMsgByUniqueKey` and `queryMsgByKey` do.
//!
//! * An offset message id (what `SendResult.offsetMsgId` holds: store address and commit-log
//!   offset) goes to that broker as VIEW_MESSAGE_BY_ID (33); when the address does not answer
//!   (an id from before a restart on another port), to every master broker.
//! * A unique key (`SendResult.msgId`, the `UNIQ_KEY` property) needs its topic (`--topic`):
//!   QUERY_MESSAGE (12) with `_UNIQUE_KEY_QUERY` to every master that has the topic.
//! * A key: QUERY_MESSAGE to every master that has the topic, the newest 64 per broker.
//!
//! A topic no master has is an error, as is a broker's refusal (NO_PERMISSION).
//!
//! Each message is shown with its headers, its properties and its body: as text when it is
//! UTF-8, else as hex (decompressed first when the producer compressed it).

use std::io::Read as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::Bytes;
use serde_json::{json, Value};

use skiff_storage::message::{decode_records, property, property_pairs, StoredMessage};

use super::{bad, Admin, AdminError, Rendered};
use crate::remoting::codes::{request as rc, response as code};
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{CustomHeader, QueryMessageRequestHeader, ViewMessageRequestHeader};

/// Records one QUERY_MESSAGE asks each broker for (Java's `queryMsgByKey` default is 64).
const QUERY_MAX: i32 = 64;
/// Most bytes a compressed body is inflated to for display (4 × the default largest message).
const MAX_DECOMPRESSED: u64 = 16 << 20;
/// `MessageSysFlag.COMPRESSED_FLAG`.
const COMPRESSED: i32 = 0x1;

/// The store address and commit-log offset inside an offset message id (IPv4: 32 hex digits,
/// IPv6: 56); `None` when `id` is not one.
pub fn decode_offset_msg_id(id: &str) -> Option<(SocketAddr, u64)> {
    if !id.len().is_multiple_of(2) || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let bytes: Vec<u8> = (0..id.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&id[i..i + 2], 16).ok())
        .collect::<Option<_>>()?;
    let (ip, rest): (IpAddr, &[u8]) = match bytes.len() {
        16 => {
            let octets: [u8; 4] = bytes[..4].try_into().ok()?;
            (Ipv4Addr::from(octets).into(), &bytes[4..])
        }
        28 => {
            let octets: [u8; 16] = bytes[..16].try_into().ok()?;
            (Ipv6Addr::from(octets).into(), &bytes[16..])
        }
        _ => return None,
    };
    let port = i32::from_be_bytes(rest[..4].try_into().ok()?);
    let offset = i64::from_be_bytes(rest[4..12].try_into().ok()?);
    let port = u16::try_from(port).ok().filter(|p| *p != 0)?;
    Some((SocketAddr::new(ip, port), u64::try_from(offset).ok()?))
}

impl Admin {
    pub(super) async fn message(
        &self,
        id: &str,
        topic: Option<&str>,
    ) -> Result<Rendered, AdminError> {
        let mut found = Vec::new();
        if let Some((addr, offset)) = decode_offset_msg_id(id) {
            let mut targets = vec![addr.to_string()];
            targets.extend(self.all_masters().await?);
            targets.dedup();
            for target in targets {
                match self.view(&target, offset).await {
                    Ok(Some(m)) => {
                        found.push(m);
                        break;
                    }
                    // A refusal is the answer; anything else (an old address that does not
                    // answer, a broker without that offset) leaves the next one to try.
                    Err(e @ AdminError::Remote { code: c, .. }) if c == code::NO_PERMISSION => {
                        return Err(e)
                    }
                    _ => {}
                }
            }
        }
        if found.is_empty() {
            if let Some(topic) = topic {
                found = self.query_brokers(topic, id, true).await?;
            }
        }
        if found.is_empty() {
            return Err(AdminError::NotFound {
                what: match topic {
                    Some(topic) => format!("message {id} (as offset id, or unique key in {topic})"),
                    None => format!("message {id} (as offset id; a unique key needs --topic)"),
                },
            });
        }
        Ok(show(&found))
    }

    pub(super) async fn query(&self, topic: &str, key: &str) -> Result<Rendered, AdminError> {
        let found = self.query_brokers(topic, key, false).await?;
        if found.is_empty() {
            return Err(AdminError::NotFound {
                what: format!("message with key {key} in {topic}"),
            });
        }
        Ok(show(&found))
    }

    /// VIEW_MESSAGE_BY_ID at `addr`: the record, `None` when the broker has none there.
    async fn view(&self, addr: &str, offset: u64) -> Result<Option<StoredMessage>, AdminError> {
        let request = RemotingCommand::new_request(rc::VIEW_MESSAGE_BY_ID).with_ext_fields(
            ViewMessageRequestHeader {
                offset: i64::try_from(offset).unwrap_or(i64::MAX),
            }
            .to_ext(),
        );
        let response = self.call(addr, request).await?;
        Ok(decode_records(Bytes::from(response.body.to_vec()))
            .map_err(|e| bad(addr, "message", e))?
            .into_iter()
            .next())
    }

    /// QUERY_MESSAGE on every master that has `topic`; QUERY_NOT_FOUND counts as none.
    async fn query_brokers(
        &self,
        topic: &str,
        key: &str,
        unique: bool,
    ) -> Result<Vec<StoredMessage>, AdminError> {
        let mut found = Vec::new();
        for holder in self.topic_masters(topic).await? {
            let addr = holder.addr;
            let mut request = RemotingCommand::new_request(rc::QUERY_MESSAGE).with_ext_fields(
                QueryMessageRequestHeader {
                    topic: topic.to_owned(),
                    key: key.to_owned(),
                    max_num: QUERY_MAX,
                    begin_timestamp: 0,
                    end_timestamp: i64::MAX,
                }
                .to_ext(),
            );
            if unique {
                request = request.with_ext("_UNIQUE_KEY_QUERY", "true");
            }
            match self.call(&addr, request).await {
                Ok(response) => found.extend(
                    decode_records(Bytes::from(response.body.to_vec()))
                        .map_err(|e| bad(&addr, "messages", e))?,
                ),
                Err(AdminError::Remote { code, .. }) if code == code::QUERY_NOT_FOUND => {}
                Err(e) => return Err(super::missing(e, Some(topic), None)),
            }
        }
        // Java's client keeps only exact matches: an index hit may be another key's.
        found.retain(|m| {
            let keys = m.property(property::KEYS).unwrap_or_default();
            if unique {
                m.property(property::UNIQ_KEY) == Some(key)
            } else {
                keys.split(' ').any(|k| k == key)
            }
        });
        Ok(found)
    }
}

/// The body for display: decompressed when flagged, then text if UTF-8, else hex.
fn body_text(m: &StoredMessage) -> (String, &'static str) {
    let mut body = m.body.to_vec();
    if m.sys_flag & COMPRESSED != 0 {
        let mut out = Vec::new();
        // Producer-controlled: stop where a body of the broker's largest size could end.
        if flate2::read::ZlibDecoder::new(&body[..])
            .take(MAX_DECOMPRESSED)
            .read_to_end(&mut out)
            .is_ok()
        {
            body = out;
        }
    }
    match String::from_utf8(body) {
        Ok(text) => (text, "text"),
        Err(e) => (
            e.into_bytes().iter().map(|b| format!("{b:02x}")).collect(),
            "hex",
        ),
    }
}

fn show(found: &[StoredMessage]) -> Rendered {
    let mut text = String::new();
    let mut json = Vec::new();
    for m in found {
        let (body, encoding) = body_text(m);
        let properties: Vec<(String, String)> = property_pairs(&m.properties)
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let headers = [
            ("Topic", m.topic.clone()),
            ("Queue ID", m.queue_id.to_string()),
            ("Queue Offset", m.queue_offset.to_string()),
            (
                "Message ID (unique key)",
                m.property(property::UNIQ_KEY).unwrap_or("-").to_owned(),
            ),
            ("Offset Message ID", m.offset_msg_id()),
            ("Tags", m.property(property::TAGS).unwrap_or("-").to_owned()),
            ("Keys", m.property(property::KEYS).unwrap_or("-").to_owned()),
            ("Born Timestamp", super::format_time(m.born_timestamp)),
            ("Store Timestamp", super::format_time(m.store_timestamp)),
            ("Born Host", m.born_host.to_string()),
            ("Store Host", m.store_host.to_string()),
            ("Reconsume Times", m.reconsume_times.to_string()),
            ("Commit-log Offset", m.physical_offset.to_string()),
            ("Stored Size", m.stored_size.to_string()),
        ];
        for (name, value) in &headers {
            text.push_str(&format!("{name:<24}{value}\n"));
        }
        text.push_str("Properties\n");
        for (k, v) in &properties {
            text.push_str(&format!("  {k} = {v}\n"));
        }
        text.push_str(&format!(
            "Body ({encoding}, {} bytes stored)\n{body}\n\n",
            m.body.len()
        ));
        json.push(json!({
            "topic": m.topic,
            "queue_id": m.queue_id,
            "queue_offset": m.queue_offset,
            "msg_id": m.property(property::UNIQ_KEY),
            "offset_msg_id": m.offset_msg_id(),
            "born_timestamp": m.born_timestamp,
            "store_timestamp": m.store_timestamp,
            "born_host": m.born_host.to_string(),
            "store_host": m.store_host.to_string(),
            "reconsume_times": m.reconsume_times,
            "physical_offset": m.physical_offset,
            "sys_flag": m.sys_flag,
            "properties": properties.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
            "body": body,
            "body_encoding": encoding,
        }));
    }
    Rendered {
        text,
        json: Value::Array(json),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_storage::message::offset_message_id;

    #[test]
    fn offset_message_ids_decode_to_their_store_address_and_offset() {
        for addr in ["127.0.0.1:10911", "[::1]:9876"] {
            let addr: SocketAddr = addr.parse().expect("addr");
            let id = offset_message_id(addr, 123_456_789);
            assert_eq!(decode_offset_msg_id(&id), Some((addr, 123_456_789)), "{id}");
        }
        // Not ids: wrong length, not hex, a port of 0.
        assert_eq!(decode_offset_msg_id("ABC"), None);
        assert_eq!(decode_offset_msg_id(&"Z".repeat(32)), None);
        assert_eq!(decode_offset_msg_id(&"0".repeat(32)), None);
    }
}
