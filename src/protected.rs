//! Protected mode: a node that listens beyond loopback with no users configured serves only
//! loopback peers (as Redis does). Every other peer's request is refused with a remark that says
//! why and how to opt out, on every listener: remoting, gRPC and the metrics endpoint.
//!
//! skiff has no users to configure yet (ACL is still to come), so today protected mode is on
//! whenever a listener binds a non-loopback address, unless `protected_mode = false`
//! (`--protected-mode off`).

use std::net::{IpAddr, SocketAddr};

/// The remark a refused peer gets.
pub const REFUSAL: &str = "skiff is in protected mode: it listens beyond loopback with no users \
configured, so it serves loopback clients only. To serve this client, start skiff with \
--protected-mode off (or protected_mode = false in skiff.toml, SKIFF_PROTECTED_MODE=false), \
or bind a loopback address";

/// Whether `ip` is a loopback address (an IPv4 loopback mapped into IPv6 included).
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Which peers a node serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PeerPolicy {
    /// Every peer that can reach a listener.
    #[default]
    Everyone,
    /// Loopback peers only: protected mode is on.
    LoopbackOnly,
}

impl PeerPolicy {
    /// The policy for a node whose listeners bind `listeners`: loopback only when protected
    /// mode is wanted and any listener reaches beyond loopback.
    pub fn for_listeners(protected_mode: bool, listeners: &[SocketAddr]) -> PeerPolicy {
        if protected_mode && listeners.iter().any(|a| !is_loopback(a.ip())) {
            PeerPolicy::LoopbackOnly
        } else {
            PeerPolicy::Everyone
        }
    }

    /// Whether a request from `peer` is served.
    pub fn serves(self, peer: IpAddr) -> bool {
        self == PeerPolicy::Everyone || is_loopback(peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("address")
    }

    #[test]
    fn protected_mode_applies_only_when_a_listener_reaches_beyond_loopback() {
        let local = [addr("127.0.0.1:9876"), addr("[::1]:8081")];
        assert_eq!(
            PeerPolicy::for_listeners(true, &local),
            PeerPolicy::Everyone
        );
        let open = [addr("127.0.0.1:9876"), addr("0.0.0.0:8081")];
        assert_eq!(
            PeerPolicy::for_listeners(true, &open),
            PeerPolicy::LoopbackOnly
        );
        assert_eq!(
            PeerPolicy::for_listeners(false, &open),
            PeerPolicy::Everyone
        );
    }

    #[test]
    fn loopback_peers_are_served_in_every_form_and_others_are_not() {
        let policy = PeerPolicy::LoopbackOnly;
        for served in ["127.0.0.1", "127.4.5.6", "::1", "::ffff:127.0.0.1"] {
            assert!(policy.serves(served.parse().expect("ip")), "{served}");
        }
        for refused in [
            "192.0.2.2",
            "10.0.0.1",
            "::ffff:10.0.0.1",
            "fe80::1",
            "0.0.0.0",
        ] {
            assert!(!policy.serves(refused.parse().expect("ip")), "{refused}");
        }
        assert!(PeerPolicy::Everyone.serves("192.0.2.2".parse().expect("ip")));
    }
}
