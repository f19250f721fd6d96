//! Topic and group names between a gRPC client's `Resource{resource_namespace, name}` and the
//! broker's.
//!
//! As the Apache proxy (5.5) does, a request's names are used as they are: neither the
//! resource's namespace nor `x-mq-namespace` prefixes them, so a client with namespace `ns` and
//! topic `T` reads and writes `T`. A name the broker stores with a namespace (`ns%T`, as a
//! remoting client with a namespace writes it; `%RETRY%ns%g`) is split back into both parts on
//! the way out.

use skiff_actors::logic::delay::{DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX};

use super::pb;

/// The broker's name for a resource a client names.
pub fn stored(resource: &pb::Resource) -> String {
    resource.name.clone()
}

/// The resource a client is shown for a stored name (RocketMQ's `NamespaceUtil` split).
pub fn resource(stored: &str) -> pb::Resource {
    let (prefix, rest) = [RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX]
        .iter()
        .find_map(|p| stored.strip_prefix(p).map(|rest| (*p, rest)))
        .unwrap_or(("", stored));
    match rest.split_once('%') {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => pb::Resource {
            resource_namespace: namespace.to_owned(),
            name: format!("{prefix}{name}"),
        },
        _ => pb::Resource {
            resource_namespace: String::new(),
            name: stored.to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requests_namespace_does_not_change_the_name_it_reaches() {
        let named = pb::Resource {
            resource_namespace: "dev".into(),
            name: "Orders".into(),
        };
        assert_eq!(stored(&named), "Orders");
    }

    #[test]
    fn stored_names_with_a_namespace_are_split_for_the_client() {
        let split = resource("dev%Orders");
        assert_eq!(
            (split.resource_namespace.as_str(), split.name.as_str()),
            ("dev", "Orders")
        );
        let retry = resource("%RETRY%dev%g");
        assert_eq!(
            (retry.resource_namespace.as_str(), retry.name.as_str()),
            ("dev", "%RETRY%g")
        );
        let plain = resource("%DLQ%g");
        assert_eq!(
            (plain.resource_namespace.as_str(), plain.name.as_str()),
            ("", "%DLQ%g")
        );
        assert_eq!(resource("Orders").name, "Orders");
    }
}
