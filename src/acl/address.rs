//! Address allow-lists, in the patterns RocketMQ's ACL accepts: `*` (anyone), an exact address
//! (IPv4 or IPv6), IPv4 with per-segment `*`, ranges `1-10` and sets `{1,2,3}`
//! (`192.168.*.*`, `10.0.0.1-20`, `192.168.0.{1,2}`), and CIDR blocks (`10.0.0.0/8`, `fd00::/8`).

use std::net::IpAddr;

/// A set of peers; empty contains nobody.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressSet {
    patterns: Vec<Pattern>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Any,
    /// Each segment's allowed values, as inclusive ranges.
    V4([Vec<(u8, u8)>; 4]),
    Block {
        network: IpAddr,
        prefix_len: u8,
    },
}

impl AddressSet {
    /// Parses every entry; an entry may hold several patterns separated by commas outside
    /// braces. The error says which pattern is wrong and why.
    pub fn parse_all(entries: &[String]) -> Result<AddressSet, String> {
        let mut patterns = Vec::new();
        for entry in entries {
            for pattern in split_outside_braces(entry) {
                let pattern = pattern.trim();
                if !pattern.is_empty() {
                    patterns.push(
                        Pattern::parse(pattern).map_err(|why| format!("{pattern:?}: {why}"))?,
                    );
                }
            }
        }
        Ok(AddressSet { patterns })
    }

    pub fn contains(&self, peer: IpAddr) -> bool {
        let peer = canonical(peer);
        self.patterns.iter().any(|p| p.matches(peer))
    }
}

/// An IPv4 address mapped into IPv6 (a dual-stack listener's view of an IPv4 peer) as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn split_outside_braces(entry: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in entry.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&entry[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&entry[start..]);
    parts
}

impl Pattern {
    fn parse(text: &str) -> Result<Pattern, String> {
        if text == "*" || text == "*.*.*.*" {
            return Ok(Pattern::Any);
        }
        if let Some((network, len)) = text.split_once('/') {
            let network: IpAddr = network
                .parse()
                .map_err(|_| "the block's address is not an IP address".to_string())?;
            let max = if network.is_ipv4() { 32 } else { 128 };
            let prefix_len: u8 = len
                .parse()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| format!("the prefix length is not 0 to {max}"))?;
            return Ok(Pattern::Block {
                network,
                prefix_len,
            });
        }
        if let Ok(exact) = text.parse::<IpAddr>() {
            let prefix_len = if exact.is_ipv4() { 32 } else { 128 };
            return Ok(Pattern::Block {
                network: exact,
                prefix_len,
            });
        }
        let segments: Vec<&str> = text.split('.').collect();
        if segments.len() != 4 {
            return Err("not an address, a CIDR block or four IPv4 segments".to_string());
        }
        let mut parsed: [Vec<(u8, u8)>; 4] = Default::default();
        for (slot, segment) in parsed.iter_mut().zip(segments) {
            *slot = parse_segment(segment)?;
        }
        Ok(Pattern::V4(parsed))
    }

    fn matches(&self, peer: IpAddr) -> bool {
        match (self, peer) {
            (Pattern::Any, _) => true,
            (Pattern::V4(segments), IpAddr::V4(v4)) => segments
                .iter()
                .zip(v4.octets())
                .all(|(ranges, octet)| ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&octet))),
            (
                Pattern::Block {
                    network: IpAddr::V4(net),
                    prefix_len,
                },
                IpAddr::V4(v4),
            ) => same_prefix(&net.octets(), &v4.octets(), *prefix_len),
            (
                Pattern::Block {
                    network: IpAddr::V6(net),
                    prefix_len,
                },
                IpAddr::V6(v6),
            ) => same_prefix(&net.octets(), &v6.octets(), *prefix_len),
            _ => false,
        }
    }
}

fn parse_segment(segment: &str) -> Result<Vec<(u8, u8)>, String> {
    let octet = |s: &str| {
        s.trim()
            .parse::<u8>()
            .map_err(|_| format!("segment {segment:?} is not 0 to 255, *, a-b or {{a,b}}"))
    };
    if segment == "*" {
        return Ok(vec![(0, 255)]);
    }
    if let Some(set) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
        return set.split(',').map(|v| octet(v).map(|v| (v, v))).collect();
    }
    if let Some((lo, hi)) = segment.split_once('-') {
        let (lo, hi) = (octet(lo)?, octet(hi)?);
        if lo > hi {
            return Err(format!("range {segment:?} runs backwards"));
        }
        return Ok(vec![(lo, hi)]);
    }
    octet(segment).map(|v| vec![(v, v)])
}

fn same_prefix(a: &[u8], b: &[u8], prefix_len: u8) -> bool {
    let full = usize::from(prefix_len / 8);
    let rest = prefix_len % 8;
    if a[..full] != b[..full] {
        return false;
    }
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        a[full] & mask == b[full] & mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(entries: &[&str]) -> AddressSet {
        AddressSet::parse_all(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .expect("valid patterns")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn rocketmq_address_patterns_match_what_they_say() {
        let cases = [
            ("*", "203.0.113.9", true),
            ("192.168.0.1", "192.168.0.1", true),
            ("192.168.0.1", "192.168.0.2", false),
            ("192.168.*.*", "192.168.77.3", true),
            ("192.168.*.*", "192.169.0.1", false),
            ("10.0.0.1-20", "10.0.0.20", true),
            ("10.0.0.1-20", "10.0.0.21", false),
            ("192.168.0.{1,2}", "192.168.0.2", true),
            ("192.168.0.{1,2}", "192.168.0.3", false),
            ("10.0.0.0/8", "10.200.1.1", true),
            ("10.0.0.0/9", "10.200.1.1", false),
            ("fd00::/8", "fd12::1", true),
            ("::1", "::1", true),
            ("127.0.0.1", "::ffff:127.0.0.1", true),
            ("10.0.0.0/8", "fd00::1", false),
        ];
        for (pattern, peer, expected) in cases {
            assert_eq!(
                set(&[pattern]).contains(ip(peer)),
                expected,
                "{pattern} vs {peer}"
            );
        }
    }

    #[test]
    fn an_entry_may_list_several_patterns_and_an_empty_set_holds_nobody() {
        let both = set(&["192.168.0.{1,2}, 10.0.0.0/8"]);
        assert!(both.contains(ip("192.168.0.1")));
        assert!(both.contains(ip("10.1.2.3")));
        assert!(!AddressSet::default().contains(ip("127.0.0.1")));
    }

    #[test]
    fn a_bad_pattern_is_refused_with_the_reason() {
        for bad in [
            "300.1.1.1",
            "10.0.0.0/33",
            "1.2.3",
            "10.0.0.9-1",
            "host.example",
        ] {
            let err = AddressSet::parse_all(&[bad.to_string()]).expect_err(bad);
            assert!(err.contains(bad), "{err}");
        }
    }
}
