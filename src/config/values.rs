//! How settings are written: the readers `skiff.toml`, `SKIFF_*` variables and the flags share,
//! so one value is spelled one way wherever it is set, and a refusal names what is accepted.

use std::net::{Ipv4Addr, SocketAddr};

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// The binary units a size may carry; `B` (or none) is bytes. Decimal units (`KB`, `MB`, `GB`)
/// are refused rather than guessed at, since RocketMQ and most tools mean binary ones by them.
const SIZE_UNITS: [(&str, u64); 5] = [
    ("b", 1),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
];

const SIZE_FORMS: &str = "a number of bytes or a size with a unit: 1073741824, 1GiB, 1 GiB, \
                          512MiB, 64KiB (units B, KiB, MiB, GiB, TiB)";

/// A size in bytes: a plain number, or a number and a binary unit (`1GiB`, `1 GiB`, `512MiB`,
/// `64KiB`), the unit in any case.
pub fn parse_size(written: &str) -> Result<u64, String> {
    let trimmed = written.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    let refused = || format!("{written:?} is not a size: expected {SIZE_FORMS}");
    let number: u64 = digits.parse().map_err(|_| refused())?;
    let multiplier = if unit.is_empty() {
        1
    } else {
        SIZE_UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, multiplier)| *multiplier)
            .ok_or_else(refused)?
    };
    number
        .checked_mul(multiplier)
        .ok_or_else(|| format!("{written:?} is more bytes than fit in 64 bits"))
}

/// A listen address: `ip:port`, or `localhost:port` for the IPv4 loopback (what `localhost`
/// names on every system skiff runs on, resolved here without asking a resolver, so the same
/// text binds the same socket everywhere). Any other host name is refused: a listener binds
/// addresses, and a name can resolve to several or to none.
pub fn parse_listen_addr(written: &str) -> Result<SocketAddr, String> {
    let trimmed = written.trim();
    if let Ok(addr) = trimmed.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let what_to_write = "expected ip:port (127.0.0.1:9876 for this machine only, \
                         0.0.0.0:9876 for every interface, [::1]:9876 for IPv6) or localhost:port";
    match trimmed.rsplit_once(':') {
        Some((host, port)) if host.eq_ignore_ascii_case("localhost") => port
            .parse::<u16>()
            .map(|port| SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
            .map_err(|_| {
                format!("{written:?}: {port:?} is not a port (0 to 65535); {what_to_write}")
            }),
        Some((host, _)) if !host.is_empty() && host.parse::<std::net::IpAddr>().is_err() => {
            Err(format!(
                "{written:?}: a listener binds an IP address, and {host:?} is a host name \
                 (only localhost is understood); {what_to_write}"
            ))
        }
        _ => Err(format!("{written:?} is not an address: {what_to_write}")),
    }
}

/// An on/off setting: `true`/`false` (TOML's booleans) or `on`/`off`, as the flags take it.
pub fn parse_switch(written: &str) -> Result<bool, String> {
    match written.trim().to_ascii_lowercase().as_str() {
        "true" | "on" => Ok(true),
        "false" | "off" => Ok(false),
        _ => Err(format!(
            "{written:?} is not on or off: expected true, false, on or off"
        )),
    }
}

/// One of a fixed set of words, in any case; the refusal lists them.
fn one_of<'de, D: Deserializer<'de>, T: Copy>(
    deserializer: D,
    choices: &[(&str, T)],
) -> Result<T, D::Error> {
    let written = String::deserialize(deserializer)?;
    choices
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(written.trim()))
        .map(|(_, value)| *value)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
            de::Error::custom(format!(
                "{written:?} is not one of the allowed values: {}",
                names.join(", ")
            ))
        })
}

/// `flush`: `async` or `sync`.
pub mod flush {
    use super::*;
    use skiff_storage::store::FlushPolicy;

    pub fn serialize<S: Serializer>(value: &FlushPolicy, serializer: S) -> Result<S::Ok, S::Error> {
        value.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<FlushPolicy, D::Error> {
        one_of(
            deserializer,
            &[("async", FlushPolicy::Async), ("sync", FlushPolicy::Sync)],
        )
    }
}

/// `tls_mode`: `disabled`, `permissive` or `enforcing`.
pub mod tls_mode {
    use super::*;
    use crate::tls::TlsMode;

    pub fn serialize<S: Serializer>(value: &TlsMode, serializer: S) -> Result<S::Ok, S::Error> {
        value.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<TlsMode, D::Error> {
        one_of(
            deserializer,
            &[
                ("disabled", TlsMode::Disabled),
                ("permissive", TlsMode::Permissive),
                ("enforcing", TlsMode::Enforcing),
            ],
        )
    }
}

/// `listen`: see [`parse_listen_addr`]; written back as `ip:port`.
pub mod listen_addr {
    use super::*;

    pub fn serialize<S: Serializer>(value: &SocketAddr, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(value)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SocketAddr, D::Error> {
        let written = String::deserialize(deserializer)?;
        parse_listen_addr(&written).map_err(de::Error::custom)
    }
}

/// Sizes in bytes (see [`parse_size`]); written back as a number of bytes.
pub mod size {
    use super::*;

    pub fn serialize<S: Serializer, N: Copy + TryInto<u64>>(
        value: &N,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64((*value).try_into().unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>, N: TryFrom<u64>>(
        deserializer: D,
    ) -> Result<N, D::Error> {
        let bytes = deserializer.deserialize_any(SizeVisitor)?;
        N::try_from(bytes).map_err(|_| {
            de::Error::custom(format!("{bytes} bytes is more than this machine holds"))
        })
    }

    struct SizeVisitor;

    impl Visitor<'_> for SizeVisitor {
        type Value = u64;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(SIZE_FORMS)
        }

        fn visit_u64<E: de::Error>(self, bytes: u64) -> Result<u64, E> {
            Ok(bytes)
        }

        fn visit_i64<E: de::Error>(self, bytes: i64) -> Result<u64, E> {
            u64::try_from(bytes)
                .map_err(|_| E::custom(format!("{bytes} is negative: expected {SIZE_FORMS}")))
        }

        fn visit_str<E: de::Error>(self, written: &str) -> Result<u64, E> {
            parse_size(written).map_err(E::custom)
        }
    }
}

/// On/off settings (see [`parse_switch`]); written back as booleans.
pub mod switch {
    use super::*;

    pub fn serialize<S: Serializer>(value: &bool, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bool(*value)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_any(SwitchVisitor)
    }

    struct SwitchVisitor;

    impl Visitor<'_> for SwitchVisitor {
        type Value = bool;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("true, false, on or off")
        }

        fn visit_bool<E: de::Error>(self, on: bool) -> Result<bool, E> {
            Ok(on)
        }

        fn visit_str<E: de::Error>(self, written: &str) -> Result<bool, E> {
            parse_switch(written).map_err(E::custom)
        }
    }
}

/// The `*_ms` keys: intervals written as whole milliseconds in `skiff.toml` and `SKIFF_*`, as
/// they always were, held as [`Duration`](std::time::Duration)s.
pub mod millis {
    use super::*;
    use std::time::Duration;

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        let millis = u64::try_from(value.as_millis()).unwrap_or(u64::MAX);
        serializer.serialize_u64(millis)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        deserializer
            .deserialize_any(MillisVisitor)
            .map(Duration::from_millis)
    }

    const MILLIS_FORMS: &str = "a whole number of milliseconds (the key ends in _ms), e.g. 5000";

    struct MillisVisitor;

    impl Visitor<'_> for MillisVisitor {
        type Value = u64;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(MILLIS_FORMS)
        }

        fn visit_u64<E: de::Error>(self, millis: u64) -> Result<u64, E> {
            Ok(millis)
        }

        fn visit_i64<E: de::Error>(self, millis: i64) -> Result<u64, E> {
            u64::try_from(millis)
                .map_err(|_| E::custom(format!("{millis} is negative: expected {MILLIS_FORMS}")))
        }

        fn visit_str<E: de::Error>(self, written: &str) -> Result<u64, E> {
            written
                .trim()
                .parse()
                .map_err(|_| E::custom(format!("{written:?} is not {MILLIS_FORMS}")))
        }
    }
}

/// `retention` and `cleanup_interval`: a duration with units (`72h`, `10m`, `30s`, `500ms`).
pub mod duration {
    use super::*;
    use std::time::Duration;

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&humantime::format_duration(*value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let written = String::deserialize(deserializer)?;
        humantime::parse_duration(written.trim()).map_err(|e| {
            de::Error::custom(format!(
                "{written:?} is not a duration ({e}): expected a number and a unit, e.g. 72h, \
                 10m, 30s, 500ms, 1h 30m"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        for (written, bytes) in [
            ("1GiB", 1u64 << 30),
            ("1 GiB", 1 << 30),
            ("512MiB", 512 << 20),
            ("64KiB", 64 << 10),
            ("64kib", 64 << 10),
            ("4096", 4096),
            ("4096 B", 4096),
            ("2TiB", 2 << 40),
        ] {
            assert_eq!(parse_size(written), Ok(bytes), "{written}");
        }
        for refused in ["1GB", "1.5GiB", "GiB", "-1", "lots", "", "99999999999TiB"] {
            let error = parse_size(refused).expect_err(refused);
            assert!(error.contains(refused), "{error}");
        }
        assert!(parse_size("1 gigabyte")
            .expect_err("unknown unit")
            .contains("KiB, MiB, GiB"));
    }

    #[test]
    fn localhost_listens_on_ipv4_loopback_and_other_host_names_are_refused_with_what_to_write() {
        assert_eq!(
            parse_listen_addr("localhost:9876"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 9876)))
        );
        assert_eq!(
            parse_listen_addr("[::]:9876"),
            Ok("[::]:9876".parse().expect("an address"))
        );
        let named = parse_listen_addr("broker.example:9876").expect_err("a host name");
        assert!(
            named.contains("host name") && named.contains("0.0.0.0:9876"),
            "{named}"
        );
        let no_port = parse_listen_addr("localhost:http").expect_err("no port");
        assert!(no_port.contains("not a port"), "{no_port}");
        assert!(parse_listen_addr("9876")
            .expect_err("a bare port")
            .contains("ip:port"));
    }

    #[test]
    fn switches_take_booleans_and_on_off() {
        assert_eq!(parse_switch("on"), Ok(true));
        assert_eq!(parse_switch("OFF"), Ok(false));
        assert_eq!(parse_switch("false"), Ok(false));
        assert!(parse_switch("maybe")
            .expect_err("not a switch")
            .contains("on or off"));
    }
}
