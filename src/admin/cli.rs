//! The command line of `skiff admin`, and which name server it dials.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use skiff_storage::metadata::TopicMessageType;

use super::AdminError;
use crate::config::NodeConfig;

/// The name server `skiff admin` dials when nothing else says.
pub const DEFAULT_NAMESRV: &str = "127.0.0.1:9876";
/// The variable `mqadmin` reads the name server from.
pub const NAMESRV_ENV: &str = "NAMESRV_ADDR";
/// The file whose `listen` address is dialled when neither the flag nor the variable is set.
pub const CONFIG_FILE: &str = "skiff.toml";

fn parse_message_type(name: &str) -> Result<TopicMessageType, String> {
    match TopicMessageType::from_name(name) {
        Some(TopicMessageType::Mixed) => Err(
            "MIXED is refused by skiff and by RocketMQ brokers without enableMixedMessageType"
                .to_owned(),
        ),
        Some(t) => Ok(t),
        None => Err("expected one of NORMAL, FIFO, DELAY, TRANSACTION, PRIORITY, LITE".to_owned()),
    }
}

/// `--perm`: RocketMQ's permission bits as `mqadmin updateTopic -p` takes them (a number, 2 =
/// write, 4 = read, 6 = both) or as letters (`rw`, `r`, `w`, `none`).
fn parse_perm(value: &str) -> Result<u32, String> {
    if let Ok(n) = value.parse::<u32>() {
        return if n <= 7 {
            Ok(n)
        } else {
            Err("a number is RocketMQ's perm bits, 0 to 7 (6 = read and write)".to_owned())
        };
    }
    match value.to_ascii_lowercase().as_str() {
        "rw" => Ok(6),
        "r" => Ok(4),
        "w" => Ok(2),
        "none" => Ok(0),
        _ => Err("expected rw, r, w, none or RocketMQ's perm number (6 = rw)".to_owned()),
    }
}

fn namesrv_help() -> String {
    let here = match (std::env::var(NAMESRV_ENV), Path::new(CONFIG_FILE).exists()) {
        (Ok(value), _) => format!("here: {NAMESRV_ENV}={value}"),
        (Err(_), true) => format!("here: the listen address of ./{CONFIG_FILE}"),
        (Err(_), false) => format!("here: {DEFAULT_NAMESRV}"),
    };
    format!(
        "Name server address (`skiff serve` answers as name server and broker). Without it: \
         {NAMESRV_ENV}, else the listen address of ./{CONFIG_FILE} (a wildcard address is \
         dialled on loopback), else {DEFAULT_NAMESRV} ({here})"
    )
}

#[derive(Debug, clap::Args)]
pub struct AdminArgs {
    #[arg(long, global = true, value_name = "HOST:PORT", help = namesrv_help())]
    pub namesrv: Option<String>,
    /// Print JSON instead of text (every command): one value, numbers as numbers.
    #[arg(long, global = true)]
    pub json: bool,
    /// Sign requests with this account's access key (a broker with ACL on needs it; admin
    /// commands that change state need an admin account).
    #[arg(long, global = true, env = "SKIFF_ACCESS_KEY", requires = "secret_key")]
    pub access_key: Option<String>,
    /// The account's secret key; prefer the environment variable, which `ps` does not show.
    #[arg(long, global = true, env = "SKIFF_SECRET_KEY", hide_env_values = true)]
    pub secret_key: Option<String>,
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum AdminCommand {
    /// List every topic with its broker, queue counts, permission and message type.
    Topics,
    /// Per queue of a consumer group: broker offset, consumer offset, lag, in-flight, last
    /// consume time. A group no broker knows is an error.
    Progress {
        /// Consumer group.
        group: String,
    },
    /// Reset a group's offsets on a topic to a point in time (server side: each queue restarts
    /// at its next pull).
    ResetOffset {
        /// Consumer group.
        group: String,
        /// Topic.
        topic: String,
        /// Milliseconds since the epoch, `now`, or `yyyy-MM-dd#HH:mm:ss:SSS` (UTC).
        #[arg(long)]
        to_time: String,
    },
    /// Create, change or delete a topic, or show its queues' offsets.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Per queue of a topic: min and max offset and last update (same as `topic status`).
    TopicStatus {
        /// Topic.
        topic: String,
    },
    /// Create, change or delete a subscription (consumer) group.
    #[command(subcommand)]
    Group(GroupCommand),
    /// Every subscription group's settings.
    Groups,
    /// The consumers connected for a group, with their subscriptions.
    Connections {
        /// Consumer group.
        group: String,
    },
    /// The brokers of the cluster with their version and message count.
    Cluster,
    /// A stored message by id: an offset message id, or a unique key (`msgId`) with `--topic`.
    Message {
        /// Offset message id or unique key.
        id: String,
        /// The topic, to look a unique key up in.
        #[arg(long)]
        topic: Option<String>,
    },
    /// The stored messages of a topic carrying a key (`KEYS`), newest first.
    Query { topic: String, key: String },
    /// A page of a LITE parent topic's lite topics, by name: offsets, last write, subscribing
    /// clients and each bound group's lag.
    Lite {
        /// The parent topic (message type LITE).
        parent: String,
        /// Start after this lite topic (the `next page` a previous page printed).
        #[arg(long)]
        after: Option<String>,
        /// Lite topics per page (at most 1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// ACL 2.0 users (RocketMQ 5's `mqadmin createUser` ... `listUser`), on every master.
    #[command(subcommand)]
    User(UserCommand),
    /// ACL 2.0 policies (RocketMQ 5's `mqadmin createAcl` ... `listAcl`), on every master.
    #[command(subcommand)]
    Acl(AclCommand),
}

#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum UserCommand {
    /// Create a user; it signs requests with its name and password as access and secret key.
    Create {
        name: String,
        /// The user's password (secret key).
        #[arg(long, env = "SKIFF_USER_PASSWORD", hide_env_values = true)]
        password: String,
        /// A super user, who may do anything (only a super user may create one).
        #[arg(long = "super")]
        super_user: bool,
    },
    /// Change a user's password, type or status; what is not given stays.
    Update {
        name: String,
        #[arg(long, env = "SKIFF_USER_PASSWORD", hide_env_values = true)]
        password: Option<String>,
        /// `super` or `normal`.
        #[arg(long = "type", value_parser = ["super", "normal"])]
        user_type: Option<String>,
        /// Refuse every request of the user from now on.
        #[arg(long, conflicts_with = "enable")]
        disable: bool,
        /// Serve the user's requests again.
        #[arg(long)]
        enable: bool,
    },
    /// Delete a user and its ACL.
    Delete { name: String },
    /// Every user (never a password), those whose name contains --filter with it.
    List {
        #[arg(long)]
        filter: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum AclCommand {
    /// Allow or deny a user actions on resources: each resource's entry is added, or replaced
    /// when the user's ACL has one for it.
    Set {
        /// The user.
        user: String,
        /// Resources, comma-separated: `Topic:orders`, `Topic:order*`, `Group:GID_a`, `Topic:*`,
        /// `Cluster:DefaultCluster`, `*`.
        #[arg(long, required = true, value_delimiter = ',')]
        resource: Vec<String>,
        /// Actions, comma-separated: Pub, Sub, Create, Update, Delete, Get, List, All.
        #[arg(long, required = true, value_delimiter = ',')]
        action: Vec<String>,
        /// allow or deny.
        #[arg(long, value_parser = ["allow", "deny"])]
        decision: String,
        /// Source addresses or CIDR blocks the entries apply to, comma-separated (none: any).
        #[arg(long, value_delimiter = ',')]
        source_ip: Vec<String>,
    },
    /// Delete one resource's entry of a user's ACL, or without --resource the whole ACL.
    Delete {
        user: String,
        #[arg(long)]
        resource: Option<String>,
    },
    /// Every ACL entry, those of users whose subject contains --user and of resources that
    /// contain --resource.
    List {
        #[arg(long)]
        user: Option<String>,
        #[arg(long)]
        resource: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum TopicCommand {
    /// Create a topic on every master broker. An existing topic gets these queue counts and
    /// read-write permission (`topic update` changes only what it is given).
    Create {
        topic: String,
        /// Read and write queue count (at least 1: a topic without queues takes no message).
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
        queues: u32,
        /// The topic's message type (`message.type` attribute): NORMAL, FIFO, DELAY,
        /// TRANSACTION, PRIORITY or LITE, in any case. Without it an existing topic keeps its type.
        #[arg(long, value_parser = parse_message_type)]
        message_type: Option<TopicMessageType>,
    },
    /// Change an existing topic's queue counts or permission on every master that has it;
    /// what is not given stays. Refuses a change that would leave stored messages in queues
    /// consumers no longer read (fewer read queues, or more write than read queues) unless
    /// --yes.
    Update {
        topic: String,
        /// Queues consumers read.
        #[arg(long, value_name = "N")]
        read_queues: Option<u32>,
        /// Queues producers write.
        #[arg(long, value_name = "N")]
        write_queues: Option<u32>,
        /// Permission: rw, r, w, none, or RocketMQ's perm number (6 = rw).
        #[arg(long, value_parser = parse_perm)]
        perm: Option<u32>,
        /// Apply a change that hides stored messages from consumers.
        #[arg(long)]
        yes: bool,
    },
    /// Delete a topic from every master broker and the name server.
    Delete { topic: String },
    /// Per queue: min and max offset and the store time of the newest message.
    Status { topic: String },
}

#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum GroupCommand {
    /// Create a group on every master broker: RocketMQ's defaults for what is not given. A
    /// group that exists already is an error (use `group update`).
    Create {
        group: String,
        #[command(flatten)]
        settings: GroupSettings,
    },
    /// Change the given settings of an existing group; the others stay.
    Update {
        group: String,
        #[command(flatten)]
        settings: GroupSettings,
    },
    /// Delete a group's settings from every master broker that has them.
    Delete {
        group: String,
        /// Also delete the group's committed offsets.
        #[arg(long)]
        clean_offsets: bool,
    },
}

/// The settings of RocketMQ's `SubscriptionGroupConfig` that `group create|update` sets. A
/// broker that answers success but does not keep one makes the command fail, naming it.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct GroupSettings {
    /// Redeliveries before a message goes to %DLQ%<group> (retryMaxTimes; default 16).
    #[arg(long, value_name = "N")]
    pub retry_max_times: Option<u32>,
    /// Queues of %RETRY%<group> when it is created (retryQueueNums; default 1).
    #[arg(long, value_name = "N")]
    pub retry_queue_nums: Option<u32>,
    /// Deliver in queue order to pop and gRPC (RocketMQ 5) consumers (consumeMessageOrderly;
    /// default false). Remoting push consumers choose orderly consumption themselves.
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    pub consume_message_orderly: Option<bool>,
    /// Whether members may consume in broadcasting mode (consumeBroadcastEnable; default
    /// true).
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    pub consume_broadcast_enable: Option<bool>,
    /// consumeFromMinEnable (default true).
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    pub consume_from_min_enable: Option<bool>,
    /// Whether the group may consume at all (consumeEnable; default true).
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    pub consume_enable: Option<bool>,
}

/// Where the name server address came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamesrvSource {
    Flag,
    Environment,
    ConfigFile,
    Default,
}

impl NamesrvSource {
    pub fn describe(self) -> String {
        match self {
            NamesrvSource::Flag => "--namesrv".to_owned(),
            NamesrvSource::Environment => NAMESRV_ENV.to_owned(),
            NamesrvSource::ConfigFile => format!("the listen address of ./{CONFIG_FILE}"),
            NamesrvSource::Default => "the default".to_owned(),
        }
    }
}

/// The name server to dial: `flag`, else `env` (`NAMESRV_ADDR`; of a `;`-separated list as
/// `mqadmin` takes, the first), else the `listen` of `config_file` when it exists (read as
/// `skiff serve` reads it; a wildcard address is dialled on loopback), else
/// [`DEFAULT_NAMESRV`].
pub fn resolve_namesrv(
    flag: Option<&str>,
    env: Option<&str>,
    config_file: &Path,
) -> Result<(String, NamesrvSource), AdminError> {
    if let Some(addr) = flag {
        return Ok((addr.to_owned(), NamesrvSource::Flag));
    }
    if let Some(first) = env
        .and_then(|list| list.split(';').map(str::trim).find(|a| !a.is_empty()))
        .map(str::to_owned)
    {
        return Ok((first, NamesrvSource::Environment));
    }
    if config_file.exists() {
        let config = NodeConfig::load(Some(config_file)).map_err(|source| AdminError::Config {
            file: config_file.display().to_string(),
            source: Box::new(source),
        })?;
        return Ok((
            dialable(config.listen).to_string(),
            NamesrvSource::ConfigFile,
        ));
    }
    Ok((DEFAULT_NAMESRV.to_owned(), NamesrvSource::Default))
}

/// A listen address as a client dials it: a wildcard means this host's loopback.
fn dialable(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), listen.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), listen.port())
        }
        _ => listen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Top,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Top {
        Admin(AdminArgs),
    }

    fn parse(args: &[&str]) -> Result<AdminArgs, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("skiff").chain(args.iter().copied()))?;
        let Top::Admin(admin) = cli.command;
        Ok(admin)
    }

    #[test]
    fn command_line() -> anyhow::Result<()> {
        let a = parse(&["admin", "topics"])?;
        assert_eq!(a.namesrv, None);
        assert_eq!(a.command, AdminCommand::Topics);
        let a = parse(&["admin", "progress", "g", "--namesrv", "10.0.0.1:9876"])?;
        assert_eq!(a.namesrv.as_deref(), Some("10.0.0.1:9876"));
        assert_eq!(a.command, AdminCommand::Progress { group: "g".into() });
        assert!(parse(&["admin", "reset-offset", "g", "T"]).is_err());
        let a = parse(&["admin", "topic", "create", "T", "--message-type", "fifo"])?;
        assert_eq!(
            a.command,
            AdminCommand::Topic(TopicCommand::Create {
                topic: "T".into(),
                queues: 8,
                message_type: Some(TopicMessageType::Fifo),
            })
        );
        assert!(parse(&["admin", "topic", "create", "T", "--queues", "0"]).is_err());
        assert!(parse(&["admin", "topic", "create", "T", "--message-type", "ORDER"]).is_err());
        assert!(
            parse(&["admin", "topic", "create", "T", "--message-type", "mixed"]).is_err(),
            "no broker skiff talks to takes MIXED"
        );
        assert!(parse(&["admin", "topic", "show", "T"]).is_err());
        let a = parse(&[
            "admin",
            "topic",
            "update",
            "T",
            "--read-queues",
            "2",
            "--perm",
            "r",
        ])?;
        assert_eq!(
            a.command,
            AdminCommand::Topic(TopicCommand::Update {
                topic: "T".into(),
                read_queues: Some(2),
                write_queues: None,
                perm: Some(4),
                yes: false,
            })
        );
        assert!(parse(&["admin", "topic", "update", "T", "--perm", "9"]).is_err());
        let a = parse(&[
            "admin",
            "group",
            "update",
            "g",
            "--retry-max-times",
            "3",
            "--consume-message-orderly",
            "true",
        ])?;
        assert_eq!(
            a.command,
            AdminCommand::Group(GroupCommand::Update {
                group: "g".into(),
                settings: GroupSettings {
                    retry_max_times: Some(3),
                    consume_message_orderly: Some(true),
                    ..GroupSettings::default()
                },
            })
        );
        assert!(parse(&["admin", "group", "create", "g", "--consume-enable", "maybe"]).is_err());
        Ok(())
    }

    #[test]
    fn the_flag_wins_then_the_environment_then_the_config_file_then_the_default(
    ) -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("skiff.toml");
        let absent = dir.path().join("absent.toml");
        assert_eq!(
            resolve_namesrv(Some("h:1"), Some("e:2"), &file)?,
            ("h:1".to_owned(), NamesrvSource::Flag)
        );
        assert_eq!(
            resolve_namesrv(None, Some(" e:2;f:3"), &file)?,
            ("e:2".to_owned(), NamesrvSource::Environment)
        );
        assert_eq!(
            resolve_namesrv(None, None, &absent)?,
            (DEFAULT_NAMESRV.to_owned(), NamesrvSource::Default)
        );
        std::fs::write(&file, "listen = \"0.0.0.0:19876\"\n")?;
        assert_eq!(
            resolve_namesrv(None, None, &file)?,
            ("127.0.0.1:19876".to_owned(), NamesrvSource::ConfigFile)
        );
        std::fs::write(&file, "listen = \"[::]:19876\"\n")?;
        assert_eq!(resolve_namesrv(None, Some(""), &file)?.0, "[::1]:19876");
        std::fs::write(&file, "listen = \"10.1.2.3:19876\"\n")?;
        assert_eq!(resolve_namesrv(None, None, &file)?.0, "10.1.2.3:19876");
        std::fs::write(&file, "not_a_setting = 1\n")?;
        assert!(matches!(
            resolve_namesrv(None, None, &file),
            Err(AdminError::Config { .. })
        ));
        Ok(())
    }
}
