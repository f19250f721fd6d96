//! The signatures RocketMQ's clients put on requests, computed and checked in constant time.
//!
//! * Remoting (`AclClientRPCHook`): the values of every extension field except `Signature`, in
//!   the fields' name order, then the body, signed with HMAC-SHA1 under the secret key; the
//!   signature travels Base64-encoded in the `Signature` field beside `AccessKey`.
//! * gRPC (the 5.x clients): HMAC-SHA1 of the `x-mq-date-time` value under the secret key, in
//!   hex, in `authorization: MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time,
//!   Signature=HEX`.

use base64::Engine;
use ring::hmac;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::calendar::{civil_from_days, days_from_civil};

/// The extension field holding the caller's access key.
pub const ACCESS_KEY: &str = "AccessKey";
/// The extension field holding the Base64 signature.
pub const SIGNATURE: &str = "Signature";
/// Clients up to 4.9.3 sign before adding this field, so their signature does not cover it.
const UNIQUE_KEY_QUERY: &str = "_UNIQUE_KEY_QUERY";
/// The remoting version number of RocketMQ 4.9.3.
const V4_9_3: i32 = 400;

/// The gRPC metadata with the date-time the signature covers.
pub const GRPC_DATE_TIME: &str = "x-mq-date-time";
/// How far a gRPC request's date-time may be from the broker's clock: a captured header stops
/// working after this long.
pub const GRPC_ALLOWED_SKEW: Duration = Duration::from_secs(15 * 60);

fn key(secret: &str) -> hmac::Key {
    hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret.as_bytes())
}

/// The bytes a remoting request's signature covers.
fn remoting_content(fields: &BTreeMap<String, String>, body: &[u8], version: i32) -> Vec<u8> {
    let mut content = Vec::with_capacity(body.len() + 256);
    // A BTreeMap iterates in byte order, which for these ASCII names is Java's TreeMap order.
    for (name, value) in fields {
        if name == SIGNATURE || (version <= V4_9_3 && name == UNIQUE_KEY_QUERY) {
            continue;
        }
        content.extend_from_slice(value.as_bytes());
    }
    content.extend_from_slice(body);
    content
}

/// The `Signature` value a client with `secret` puts on a request with these fields and body.
pub fn remoting(
    secret: &str,
    fields: &BTreeMap<String, String>,
    body: &[u8],
    version: i32,
) -> String {
    let tag = hmac::sign(&key(secret), &remoting_content(fields, body, version));
    base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
}

/// An account's keys, for signing requests as a client.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

/// Signs `request` as `AclClientRPCHook` does: adds `AccessKey`, then `Signature` over the
/// rest. Sign last: a field added afterwards breaks the signature.
pub fn sign_remoting(request: &mut crate::remoting::RemotingCommand, credentials: &Credentials) {
    request.ext_fields.remove(SIGNATURE);
    request
        .ext_fields
        .insert(ACCESS_KEY.to_owned(), credentials.access_key.clone());
    let signature = remoting(
        &credentials.secret_key,
        &request.ext_fields,
        &request.body,
        request.version,
    );
    request.ext_fields.insert(SIGNATURE.to_owned(), signature);
}

/// Whether the request's `Signature` field is `secret`'s signature of it.
pub fn verify_remoting(
    secret: &str,
    fields: &BTreeMap<String, String>,
    body: &[u8],
    version: i32,
) -> bool {
    let Some(claimed) = fields.get(SIGNATURE) else {
        return false;
    };
    let Ok(claimed) = base64::engine::general_purpose::STANDARD.decode(claimed.trim()) else {
        return false;
    };
    hmac::verify(
        &key(secret),
        &remoting_content(fields, body, version),
        &claimed,
    )
    .is_ok()
}

/// The parts of a gRPC `authorization` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcAuthorization {
    pub access_key: String,
    signature: Vec<u8>,
}

impl GrpcAuthorization {
    /// Parses `MQv2-HMAC-SHA1 Credential=AK[/...], SignedHeaders=..., Signature=HEX`.
    pub fn parse(value: &str) -> Result<GrpcAuthorization, String> {
        let (_algorithm, pairs) = value
            .trim()
            .split_once(' ')
            .ok_or_else(|| "authentication header is incorrect.".to_string())?;
        let (mut access_key, mut signature) = (None, None);
        for pair in pairs.split(',') {
            let (name, value) = pair.trim().split_once('=').ok_or_else(|| {
                format!(
                    "authentication header item {:?} is not NAME=VALUE.",
                    pair.trim()
                )
            })?;
            match name {
                "Credential" => {
                    access_key = value.split('/').next().map(str::to_owned);
                }
                "Signature" => {
                    signature = Some(
                        decode_hex(value)
                            .ok_or_else(|| "the signature is not hexadecimal.".to_string())?,
                    );
                }
                _ => {}
            }
        }
        match (access_key, signature) {
            (Some(access_key), Some(signature)) if !access_key.is_empty() => {
                Ok(GrpcAuthorization {
                    access_key,
                    signature,
                })
            }
            (None, _) | (Some(_), Some(_)) => {
                Err("authentication header has no Credential.".to_string())
            }
            (Some(_), None) => Err("authentication header has no Signature.".to_string()),
        }
    }

    /// Whether this is `secret`'s signature of `date_time`.
    pub fn verify(&self, secret: &str, date_time: &str) -> bool {
        hmac::verify(&key(secret), date_time.as_bytes(), &self.signature).is_ok()
    }
}

/// The `authorization` value a 5.x client with these credentials sends with `date_time`.
pub fn grpc(access_key: &str, secret: &str, date_time: &str) -> String {
    let tag = hmac::sign(&key(secret), date_time.as_bytes());
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02X}")).collect();
    format!(
        "MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders={GRPC_DATE_TIME}, Signature={hex}"
    )
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// `x-mq-date-time` (`yyyyMMdd'T'HHmmss'Z'`, UTC) as a time.
pub fn parse_date_time(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let b = text.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (year, month, day) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hour, minute, second) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).ok()?))
}

/// `time` as `x-mq-date-time`.
pub fn format_date_time(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rest = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Whether `date_time` lies within [`GRPC_ALLOWED_SKEW`] of `now`.
pub fn date_time_is_current(date_time: SystemTime, now: SystemTime) -> bool {
    let apart = match now.duration_since(date_time) {
        Ok(behind) => behind,
        Err(ahead) => ahead.duration(),
    };
    apart <= GRPC_ALLOWED_SKEW
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Fixed vectors made with the Java clients' own code on 2026-12-05: rocketmq-client
    /// 5.5.0's `AclClientRPCHook.doBeforeRequest` on a request (code 310) with ext fields
    /// a, b, c and body "hello acl"; rocketmq-client-java 5.2.0's `Signature.sign` with
    /// `StaticSessionCredentialsProvider("alice", "alice-secret-1")`.
    #[test]
    fn signatures_match_the_java_clients_output() {
        let request = fields(&[
            ("AccessKey", "alice"),
            ("a", "ProducerGroup"),
            ("b", "AclTopic"),
            ("c", "TBW102"),
        ]);
        let java = "nTsG31ubT3ELk8YwkaQvxL1fOmg=";
        assert_eq!(
            remoting("alice-secret-1", &request, b"hello acl", 413),
            java
        );
        let mut signed = request.clone();
        signed.insert(SIGNATURE.into(), java.into());
        assert!(verify_remoting(
            "alice-secret-1",
            &signed,
            b"hello acl",
            413
        ));

        let date_time = "20261205T063538Z";
        let java = "MQv2-HMAC-SHA1 Credential=alice, SignedHeaders=x-mq-date-time, \
                    Signature=DCF8B43F7DBC17DBAAD6742A74C411FB53C3C743";
        assert_eq!(grpc("alice", "alice-secret-1", date_time), java);
        let parsed = GrpcAuthorization::parse(java).expect("parses");
        assert!(parsed.verify("alice-secret-1", date_time));
    }

    #[test]
    fn a_remoting_signature_covers_sorted_field_values_then_the_body() {
        let request = fields(&[
            ("b", "TopicTest"),
            ("a", "ProducerGroup"),
            ("AccessKey", "alice"),
        ]);
        let signature = remoting("alice-secret", &request, b"hello", 413);
        // Values in name order: AccessKey < a < b.
        let mut manual = Vec::new();
        manual.extend_from_slice(b"aliceProducerGroupTopicTesthello");
        let expected = base64::engine::general_purpose::STANDARD
            .encode(hmac::sign(&key("alice-secret"), &manual).as_ref());
        assert_eq!(signature, expected);
        let mut signed = request.clone();
        signed.insert(SIGNATURE.into(), signature);
        assert!(verify_remoting("alice-secret", &signed, b"hello", 413));
        assert!(!verify_remoting("wrong", &signed, b"hello", 413));
        assert!(!verify_remoting("alice-secret", &signed, b"hellO", 413));
        let mut altered = signed.clone();
        altered.insert("b".into(), "OtherTopic".into());
        assert!(!verify_remoting("alice-secret", &altered, b"hello", 413));
    }

    #[test]
    fn old_clients_sign_without_the_unique_key_query_flag() {
        let request = fields(&[("AccessKey", "alice"), ("topic", "T")]);
        let signature = remoting("s", &request, b"", 400);
        let mut sent = request.clone();
        sent.insert(SIGNATURE.into(), signature);
        sent.insert(UNIQUE_KEY_QUERY.into(), "true".into());
        assert!(verify_remoting("s", &sent, b"", 400));
        assert!(
            !verify_remoting("s", &sent, b"", 413),
            "newer clients sign it"
        );
    }

    #[test]
    fn hmac_sha1_matches_the_published_test_vector() {
        // RFC 2202 test case 2.
        let tag = hmac::sign(&key("Jefe"), b"what do ya want for nothing?");
        let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79");
    }

    #[test]
    fn a_grpc_authorization_header_round_trips_and_checks_its_signature() {
        let header = grpc("alice", "alice-secret", "20261205T071500Z");
        assert!(header.starts_with(
            "MQv2-HMAC-SHA1 Credential=alice, SignedHeaders=x-mq-date-time, Signature="
        ));
        let parsed = GrpcAuthorization::parse(&header).expect("parses");
        assert_eq!(parsed.access_key, "alice");
        assert!(parsed.verify("alice-secret", "20261205T071500Z"));
        assert!(!parsed.verify("alice-secret", "20261205T071501Z"));
        assert!(!parsed.verify("other", "20261205T071500Z"));
        let with_scope = header.replace("Credential=alice", "Credential=alice/region/service");
        assert_eq!(
            GrpcAuthorization::parse(&with_scope)
                .expect("parses")
                .access_key,
            "alice"
        );
    }

    #[test]
    fn malformed_grpc_authorization_headers_are_refused_with_a_reason() {
        for bad in [
            "",
            "MQv2-HMAC-SHA1",
            "MQv2-HMAC-SHA1 Credential=alice",
            "MQv2-HMAC-SHA1 Credential=alice, Signature=XYZ",
            "MQv2-HMAC-SHA1 Signature=00ff",
            "MQv2-HMAC-SHA1 Credential",
        ] {
            assert!(GrpcAuthorization::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn grpc_date_times_parse_format_and_are_checked_for_skew() {
        let t = parse_date_time("20261205T071530Z").expect("parses");
        assert_eq!(format_date_time(t), "20261205T071530Z");
        assert_eq!(parse_date_time("19700101T000000Z"), Some(UNIX_EPOCH));
        assert_eq!(
            parse_date_time("20240229T120000Z")
                .map(format_date_time)
                .as_deref(),
            Some("20240229T120000Z")
        );
        for bad in [
            "2026-12-05T07:15:30Z",
            "20261305T071530Z",
            "20261205T071530",
            "x",
        ] {
            assert_eq!(parse_date_time(bad), None, "{bad}");
        }
        let now = t;
        assert!(date_time_is_current(now - Duration::from_secs(60), now));
        assert!(date_time_is_current(now + Duration::from_secs(60), now));
        assert!(!date_time_is_current(
            now - Duration::from_secs(16 * 60),
            now
        ));
        assert!(!date_time_is_current(
            now + Duration::from_secs(16 * 60),
            now
        ));
    }
}
