//! The address a client is told to reach this node at, the one rule both doors follow (remoting
//! routes and cluster listings, gRPC QueryRoute and QueryAssignment endpoints).
//!
//! A wildcard (`0.0.0.0`, `[::]`) means "every interface": it is where skiff listens, never
//! where a client can connect (a client in a container's host would dial `0.0.0.0` and reach
//! itself). In its place a client is told the address it dialled, the connection's local
//! address, which it can reach by definition.

use std::net::{IpAddr, SocketAddr};

/// `ip`, unless it is a wildcard and the connection's local address is known; then that
/// address's IP (an IPv4 client on a dual-stack socket as plain IPv4).
pub fn reachable_ip(ip: IpAddr, dialled: Option<SocketAddr>) -> IpAddr {
    match dialled {
        Some(dialled) if ip.is_unspecified() => dialled.ip().to_canonical(),
        _ => ip,
    }
}

/// `advertised` (`host:port`) with a wildcard IP replaced by [`reachable_ip`], the port kept; a
/// host name is kept as written.
pub fn reachable_addr(advertised: &str, dialled: Option<SocketAddr>) -> String {
    match advertised.parse::<SocketAddr>() {
        Ok(addr) if addr.ip().is_unspecified() && dialled.is_some() => {
            SocketAddr::new(reachable_ip(addr.ip(), dialled), addr.port()).to_string()
        }
        _ => advertised.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_listener_advertises_the_address_each_client_dialled() {
        let dialled: SocketAddr = "172.17.0.2:9876".parse().expect("an address");
        assert_eq!(
            reachable_addr("0.0.0.0:9876", Some(dialled)),
            "172.17.0.2:9876"
        );
        assert_eq!(
            reachable_addr(
                "[::]:9876",
                Some("[fd00::2]:9876".parse().expect("an address"))
            ),
            "[fd00::2]:9876"
        );
        assert_eq!(
            reachable_addr(
                "[::]:9876",
                Some("[::ffff:10.1.2.3]:9876".parse().expect("an address"))
            ),
            "10.1.2.3:9876",
            "an IPv4 client of a dual-stack listener is told IPv4"
        );
        assert_eq!(
            reachable_addr("10.0.0.5:9876", Some(dialled)),
            "10.0.0.5:9876",
            "an advertised address is kept"
        );
        assert_eq!(
            reachable_addr("broker.example:9876", Some(dialled)),
            "broker.example:9876"
        );
        assert_eq!(reachable_addr("0.0.0.0:9876", None), "0.0.0.0:9876");
    }
}
