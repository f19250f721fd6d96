//! ACL 2.0 (RocketMQ 5.3+): users, their policies, and the decision on one request, by Apache
//! RocketMQ 5.5.0's rules (`rocketmq-auth`):
//!
//! - `UserAuthorizationHandler`: an unknown user is refused (`User:{name} not found.`), a
//!   disabled one too (`User:{name} is disabled.`); a super user may do anything.
//! - `AclAuthorizationHandler`: of the user's policy entries that match the request's resource,
//!   one of its actions and its source address, the custom policy's are taken, or the default
//!   policy's when no custom entry matches; none matching refuses (`no matched policies.`).
//!   The matching entries are ordered by `comparePolicyEntries` and the first decides (`the
//!   decision is deny.` when it denies): an entry naming a resource type beats `*` (any
//!   resource); of the same type, a literal name beats a prefix, which beats any name (`Topic:*`);
//!   of two prefixes, the longer wins; at equal rank, Deny beats Allow; otherwise the first
//!   written.
//! - `PolicyEntry.isMatchAction`: an entry with `All` matches every action; a request that asks
//!   for `Any` action matches every entry with an action.
//! - `Environment.isMatch`: an entry without source addresses matches every one; otherwise the
//!   request's address must equal one of them or lie in one of them written as CIDR
//!   (`IPAddressUtils.isIPInRange`).
//! - `Resource.ofGroup`: a group named by its retry topic (`%RETRY%G`) is the group `G`.
//!
//! Pure: the caller looks the user and its ACL up, and answers the refusal as its door does.

use std::cmp::Ordering;
use std::fmt;
use std::net::IpAddr;

/// What a policy entry or a request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceType {
    Cluster,
    Namespace,
    Topic,
    Group,
}

impl ResourceType {
    /// RocketMQ's name: `Cluster`, `Namespace`, `Topic`, `Group`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceType::Cluster => "Cluster",
            ResourceType::Namespace => "Namespace",
            ResourceType::Topic => "Topic",
            ResourceType::Group => "Group",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        [
            ResourceType::Cluster,
            ResourceType::Namespace,
            ResourceType::Topic,
            ResourceType::Group,
        ]
        .into_iter()
        .find(|t| t.as_str().eq_ignore_ascii_case(name))
    }
}

/// The names of one type a policy resource covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// Exactly this name.
    Literal(String),
    /// Every name starting with this (written `prefix*`).
    Prefixed(String),
    /// Every name (written `*`).
    Any,
}

/// A resource a policy entry covers: `*` (everything), or names of one type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyResource {
    Any,
    Of {
        kind: ResourceType,
        pattern: Pattern,
    },
}

impl PolicyResource {
    /// RocketMQ's resource key: `*`, `Topic:orders`, `Topic:order*`, `Group:*`. `None` for a
    /// blank key or an unknown type (Java's `Resource.of`).
    pub fn parse(key: &str) -> Option<Self> {
        let key = key.trim();
        if key.is_empty() {
            return None;
        }
        if key == "*" {
            return Some(PolicyResource::Any);
        }
        let (kind, name) = key.split_once(':').unwrap_or((key, ""));
        let kind = ResourceType::parse(kind)?;
        let pattern = if name == "*" {
            Pattern::Any
        } else if let Some(prefix) = name.strip_suffix('*') {
            Pattern::Prefixed(prefix.to_owned())
        } else {
            Pattern::Literal(name.to_owned())
        };
        Some(PolicyResource::Of { kind, pattern })
    }

    fn matches(&self, kind: ResourceType, name: &str) -> bool {
        match self {
            PolicyResource::Any => true,
            PolicyResource::Of { kind: own, pattern } => {
                *own == kind
                    && match pattern {
                        Pattern::Any => true,
                        Pattern::Literal(literal) => literal == name,
                        Pattern::Prefixed(prefix) => name.starts_with(prefix.as_str()),
                    }
            }
        }
    }

    /// How specific the resource is, for ordering (higher first); a prefix's length breaks ties.
    fn rank(&self) -> (u8, usize) {
        match self {
            PolicyResource::Any => (0, 0),
            PolicyResource::Of { pattern, .. } => match pattern {
                Pattern::Any => (1, 0),
                Pattern::Prefixed(prefix) => (2, prefix.len()),
                Pattern::Literal(_) => (3, 0),
            },
        }
    }
}

impl fmt::Display for PolicyResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyResource::Any => f.write_str("*"),
            PolicyResource::Of { kind, pattern } => match pattern {
                Pattern::Any => write!(f, "{}:*", kind.as_str()),
                Pattern::Literal(name) => write!(f, "{}:{name}", kind.as_str()),
                Pattern::Prefixed(prefix) => write!(f, "{}:{prefix}*", kind.as_str()),
            },
        }
    }
}

/// What a request does to its resource (Java's `Action`, without `Unknown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// In a policy entry: every action.
    All,
    /// In a request: matches any action an entry names.
    Any,
    Pub,
    Sub,
    Create,
    Update,
    Delete,
    Get,
    List,
}

impl Action {
    /// The action named `name`, in any case (`Pub`, `sub`, `ALL`).
    pub fn parse(name: &str) -> Option<Self> {
        use Action::*;
        [All, Any, Pub, Sub, Create, Update, Delete, Get, List]
            .into_iter()
            .find(|a| a.as_str().eq_ignore_ascii_case(name.trim()))
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Action::All => "All",
            Action::Any => "Any",
            Action::Pub => "Pub",
            Action::Sub => "Sub",
            Action::Create => "Create",
            Action::Update => "Update",
            Action::Delete => "Delete",
            Action::Get => "Get",
            Action::List => "List",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
}

/// One entry of a policy: a resource, the actions it covers, the source addresses it applies
/// to (none: every address), and its decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyEntry {
    pub resource: PolicyResource,
    pub actions: Vec<Action>,
    pub source_ips: Vec<String>,
    pub decision: Decision,
}

impl PolicyEntry {
    fn matches(&self, request: &Request<'_>) -> bool {
        self.resource.matches(request.kind, request.name)
            && !self.actions.is_empty()
            && (request.actions.contains(&Action::Any)
                || request
                    .actions
                    .iter()
                    .any(|a| self.actions.contains(a) || self.actions.contains(&Action::All)))
            && (self.source_ips.is_empty()
                || self
                    .source_ips
                    .iter()
                    .any(|range| ip_in_range(request.source_ip, range)))
    }
}

/// Java's `comparePolicyEntries`: the more specific resource first, then Deny before Allow.
fn compare(a: &PolicyEntry, b: &PolicyEntry) -> Ordering {
    b.resource
        .rank()
        .cmp(&a.resource.rank())
        .then_with(|| match (a.decision, b.decision) {
            (Decision::Deny, Decision::Allow) => Ordering::Less,
            (Decision::Allow, Decision::Deny) => Ordering::Greater,
            _ => Ordering::Equal,
        })
}

/// A user's policies: the custom one (what `createAcl` writes) and the default one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acl {
    pub custom: Vec<PolicyEntry>,
    pub default: Vec<PolicyEntry>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserType {
    Super,
    Normal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserStatus {
    Enable,
    Disable,
}

/// An ACL 2.0 user, as the decision needs it (never its password).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserAccess {
    pub name: String,
    pub user_type: UserType,
    pub status: UserStatus,
}

/// One request as the decision sees it: its user, the resource it touches, the actions it
/// needs and the address it came from.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub user: &'a str,
    pub kind: ResourceType,
    pub name: &'a str,
    pub actions: &'a [Action],
    pub source_ip: IpAddr,
}

impl Request<'_> {
    /// The resource as Java's refusal names it (`Topic:orders`).
    fn resource_key(&self) -> String {
        format!("{}:{}", self.kind.as_str(), self.name)
    }
}

/// Why a request is refused, with Java's messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("User:{user} not found.")]
    UnknownUser { user: String },
    #[error("User:{user} is disabled.")]
    DisabledUser { user: String },
    #[error(
        "User:{user} has no permission to access {resource} from {source_ip}, no matched policies."
    )]
    NoMatchedPolicy {
        user: String,
        resource: String,
        source_ip: IpAddr,
    },
    #[error("User:{user} has no permission to access {resource} from {source_ip}, the decision is deny.")]
    Denied {
        user: String,
        resource: String,
        source_ip: IpAddr,
    },
}

/// The decision on `request`, given its user (`None`: unknown) and the user's ACL (`None`:
/// none written).
pub fn decide(
    user: Option<&UserAccess>,
    acl: Option<&Acl>,
    request: &Request<'_>,
) -> Result<(), Refusal> {
    let Some(user) = user else {
        return Err(Refusal::UnknownUser {
            user: request.user.to_owned(),
        });
    };
    if user.status == UserStatus::Disable {
        return Err(Refusal::DisabledUser {
            user: user.name.clone(),
        });
    }
    if user.user_type == UserType::Super {
        return Ok(());
    }
    let no_match = || Refusal::NoMatchedPolicy {
        user: user.name.clone(),
        resource: request.resource_key(),
        source_ip: request.source_ip,
    };
    let acl = acl.ok_or_else(no_match)?;
    let matching = |entries: &[PolicyEntry]| -> Vec<PolicyEntry> {
        entries
            .iter()
            .filter(|e| e.matches(request))
            .cloned()
            .collect()
    };
    let mut entries = matching(&acl.custom);
    if entries.is_empty() {
        entries = matching(&acl.default);
    }
    // A stable sort, as Java's List.sort: at equal rank the first written stays first.
    entries.sort_by(compare);
    match entries.first() {
        None => Err(no_match()),
        Some(entry) if entry.decision == Decision::Deny => Err(Refusal::Denied {
            user: user.name.clone(),
            resource: request.resource_key(),
            source_ip: request.source_ip,
        }),
        Some(_) => Ok(()),
    }
}

/// The group a request names: a retry topic (`%RETRY%G`) names its group `G`.
pub fn group_resource(name: &str) -> &str {
    name.strip_prefix("%RETRY%").unwrap_or(name)
}

/// Java's `IPAddressUtils.isIPInRange`: `range` is one address (compared as text, as Java
/// does) or `address/prefix`.
pub fn ip_in_range(ip: IpAddr, range: &str) -> bool {
    let Some((base, prefix)) = range.split_once('/') else {
        return ip.to_string() == range;
    };
    let (Ok(base), Ok(prefix)) = (base.parse::<IpAddr>(), prefix.parse::<u32>()) else {
        return false;
    };
    match (base, ip) {
        (IpAddr::V4(base), IpAddr::V4(ip)) if prefix <= 32 => {
            let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
            u32::from(base) & mask == u32::from(ip) & mask
        }
        (IpAddr::V6(base), IpAddr::V6(ip)) if prefix <= 128 => {
            let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
            u128::from(base) & mask == u128::from(ip) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCAL: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1));

    fn entry(resource: &str, actions: &[Action], decision: Decision) -> PolicyEntry {
        PolicyEntry {
            resource: PolicyResource::parse(resource).expect("resource key"),
            actions: actions.to_vec(),
            source_ips: Vec::new(),
            decision,
        }
    }

    fn normal(name: &str) -> UserAccess {
        UserAccess {
            name: name.to_owned(),
            user_type: UserType::Normal,
            status: UserStatus::Enable,
        }
    }

    fn pub_topic<'a>(name: &'a str, ip: IpAddr) -> Request<'a> {
        Request {
            user: "alice",
            kind: ResourceType::Topic,
            name,
            actions: &[Action::Pub],
            source_ip: ip,
        }
    }

    fn verdict(acl: &Acl, request: &Request<'_>) -> Result<(), Refusal> {
        decide(Some(&normal("alice")), Some(acl), request)
    }

    #[test]
    fn resource_keys_read_as_java_reads_them() {
        for key in [
            "*",
            "Topic:orders",
            "Topic:order*",
            "Group:*",
            "Cluster:DefaultCluster",
        ] {
            assert_eq!(
                PolicyResource::parse(key).map(|r| r.to_string()),
                Some(key.to_owned())
            );
        }
        assert_eq!(
            PolicyResource::parse("topic:orders").map(|r| r.to_string()),
            Some("Topic:orders".to_owned())
        );
        assert_eq!(PolicyResource::parse("Queue:x"), None);
        assert_eq!(PolicyResource::parse(" "), None);
    }

    #[test]
    fn deny_beats_allow_on_the_same_resource() {
        let acl = Acl {
            custom: vec![
                entry("Topic:orders", &[Action::Pub], Decision::Allow),
                entry("Topic:orders", &[Action::All], Decision::Deny),
            ],
            default: Vec::new(),
        };
        assert!(matches!(
            verdict(&acl, &pub_topic("orders", LOCAL)),
            Err(Refusal::Denied { .. })
        ));
    }

    #[test]
    fn literal_beats_prefix_beats_any_name_beats_any_resource() {
        let ranked = [
            entry("*", &[Action::All], Decision::Deny),
            entry("Topic:*", &[Action::Pub], Decision::Allow),
            entry("Topic:ord*", &[Action::Pub], Decision::Deny),
            entry("Topic:orders-*", &[Action::Pub], Decision::Allow),
            entry("Topic:orders-eu", &[Action::Pub], Decision::Deny),
        ];
        // Each entry decides over those before it, for the names it covers.
        let cases = [
            ("anything", Ok(())),
            ("orderly", Err(())),
            ("orders-us", Ok(())),
            ("orders-eu", Err(())),
        ];
        let acl = Acl {
            custom: ranked.to_vec(),
            default: Vec::new(),
        };
        for (name, expected) in cases {
            assert_eq!(
                verdict(&acl, &pub_topic(name, LOCAL)).map_err(|_| ()),
                expected,
                "{name}"
            );
        }
        let group = Request {
            kind: ResourceType::Group,
            ..pub_topic("anything", LOCAL)
        };
        assert!(
            matches!(verdict(&acl, &group), Err(Refusal::Denied { .. })),
            "only the any-resource entry covers a group"
        );
    }

    #[test]
    fn source_addresses_limit_an_entry() {
        let mut deny_lan = entry("Topic:secret*", &[Action::Pub], Decision::Deny);
        deny_lan.source_ips = vec!["10.0.0.0/8".to_owned()];
        let acl = Acl {
            custom: vec![
                entry("Topic:secret*", &[Action::Pub], Decision::Allow),
                deny_lan,
            ],
            default: Vec::new(),
        };
        let lan: IpAddr = "10.1.2.3".parse().unwrap();
        assert!(verdict(&acl, &pub_topic("secret-1", lan)).is_err());
        assert_eq!(verdict(&acl, &pub_topic("secret-1", LOCAL)), Ok(()));
        assert!(ip_in_range("::1".parse().unwrap(), "::1/128"));
        assert!(ip_in_range(LOCAL, "127.0.0.1"));
        assert!(!ip_in_range(LOCAL, "127.0.0.2"));
        assert!(!ip_in_range(LOCAL, "not-an-address/8"));
    }

    #[test]
    fn users_unknown_disabled_or_super_are_decided_first() {
        let acl = Acl::default();
        let request = pub_topic("orders", LOCAL);
        assert_eq!(
            decide(None, Some(&acl), &request),
            Err(Refusal::UnknownUser {
                user: "alice".to_owned()
            })
        );
        let disabled = UserAccess {
            status: UserStatus::Disable,
            user_type: UserType::Super,
            ..normal("alice")
        };
        assert_eq!(
            decide(Some(&disabled), Some(&acl), &request),
            Err(Refusal::DisabledUser {
                user: "alice".to_owned()
            }),
            "even a super user"
        );
        let root = UserAccess {
            user_type: UserType::Super,
            ..normal("alice")
        };
        assert_eq!(decide(Some(&root), None, &request), Ok(()));
        assert_eq!(
            decide(Some(&normal("alice")), None, &request)
                .unwrap_err()
                .to_string(),
            "User:alice has no permission to access Topic:orders from 127.0.0.1, no matched policies."
        );
    }

    #[test]
    fn the_default_policy_answers_only_when_no_custom_entry_matches() {
        let acl = Acl {
            custom: vec![entry("Topic:orders", &[Action::Sub], Decision::Allow)],
            default: vec![entry("*", &[Action::All], Decision::Allow)],
        };
        assert_eq!(verdict(&acl, &pub_topic("orders", LOCAL)), Ok(()));
        let deny_default = Acl {
            custom: vec![entry("Topic:orders", &[Action::Pub], Decision::Allow)],
            default: vec![entry("*", &[Action::All], Decision::Deny)],
        };
        assert_eq!(verdict(&deny_default, &pub_topic("orders", LOCAL)), Ok(()));
        assert!(verdict(&deny_default, &pub_topic("other", LOCAL)).is_err());
    }

    #[test]
    fn an_any_action_request_matches_every_entry_with_an_action() {
        let acl = Acl {
            custom: vec![entry("Group:readers", &[Action::Sub], Decision::Allow)],
            default: Vec::new(),
        };
        let request = Request {
            user: "alice",
            kind: ResourceType::Group,
            name: group_resource("%RETRY%readers"),
            actions: &[Action::Any],
            source_ip: LOCAL,
        };
        assert_eq!(verdict(&acl, &request), Ok(()));
    }
}
