//! Node configuration: defaults, then `skiff.toml`, then `SKIFF_*` environment variables, then
//! command-line flags (applied by the binary as overrides).

use serde::{Deserialize, Serialize};
use skiff_storage::store::{FlushPolicy, StoreConfig};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration is invalid")]
    Load {
        #[source]
        source: config::ConfigError,
    },
    #[error("configuration value {field} is invalid: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("the ACL configuration is invalid")]
    Acl {
        #[source]
        source: crate::acl::AclError,
    },
}

/// Everything a node needs; every field has a default, so an empty `skiff.toml` (or none) runs.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// Where the commit log, consume queues and the sled metadata live.
    pub data_dir: PathBuf,
    /// The remoting listener (name server and broker on one port).
    pub listen: SocketAddr,
    /// The address routes tell clients to connect to; defaults to `listen`.
    pub advertised_address: Option<String>,
    pub broker_name: String,
    pub cluster_name: String,
    /// `async` (fsync on an interval) or `sync` (group commit before the send is acked).
    pub flush: FlushPolicy,
    /// How often `async` flush fsyncs the commit log (key `flush_interval_ms`, in ms).
    #[serde(rename = "flush_interval_ms", with = "millis")]
    pub flush_interval: Duration,
    /// Under `sync` flush, how long a send waits for its fsync before it is answered
    /// FLUSH_DISK_TIMEOUT, stored but not yet durable (key `sync_flush_timeout_ms`, in ms;
    /// RocketMQ's `syncFlushTimeout`).
    #[serde(rename = "sync_flush_timeout_ms", with = "millis")]
    pub sync_flush_timeout: Duration,
    /// Bytes of one commit-log segment; retention deletes whole segments.
    pub segment_size: u64,
    /// Full segments whose newest message is older than this are deleted (`72h`).
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    /// How often retention and the disk guard run (`10s`).
    #[serde(with = "humantime_serde")]
    pub cleanup_interval: Duration,
    /// Past this share of the disk in use, the oldest segments are deleted early.
    pub disk_max_used_ratio: f64,
    /// Past this share, sends are refused with SERVICE_NOT_AVAILABLE until space returns.
    pub disk_full_ratio: f64,
    pub max_message_size: usize,
    /// Broker offset-table flush interval (RocketMQ `flushConsumerOffsetInterval`; key
    /// `flush_consumer_offset_interval_ms`, in ms).
    #[serde(rename = "flush_consumer_offset_interval_ms", with = "millis")]
    pub flush_consumer_offset_interval: Duration,
    /// Queues of an auto-created topic.
    pub default_topic_queue_nums: u32,
    pub auto_create_topic: bool,
    pub auto_create_subscription_group: bool,
    /// Largest accepted remoting frame.
    pub max_frame_bytes: usize,
    /// A consumer channel with no heartbeat for this long is dropped (key `channel_expiry_ms`,
    /// in ms).
    #[serde(rename = "channel_expiry_ms", with = "millis")]
    pub channel_expiry: Duration,
    /// Orderly queue locks expire after this long without renewal (key `lock_expiry_ms`, in ms).
    #[serde(rename = "lock_expiry_ms", with = "millis")]
    pub lock_expiry: Duration,
    /// `skiff serve`'s HTTP listener: the web console at `/` and Prometheus's `GET /metrics`;
    /// an address, or `off` (also accepted as `http_listen`).
    #[serde(alias = "http_listen")]
    pub metrics_listen: String,
    /// How often the console samples produce and consume rates and group lag; it keeps an
    /// hour's worth at the default (key `console_sample_interval_ms`, in ms).
    #[serde(rename = "console_sample_interval_ms", with = "millis")]
    pub console_sample_interval: Duration,
    /// `skiff serve`'s own gRPC listener (RocketMQ 5 clients; the proxy's port 8081): an
    /// address, or `off`. The main port serves gRPC too, whatever this says.
    pub grpc_listen: String,
    /// PEM certificate chain for TLS; with `tls_key_file`. Without both, a self-signed
    /// certificate is made at start.
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key for TLS; with `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// Which connections every port serves: `disabled` (plaintext only), `permissive` (TLS and
    /// plaintext) or `enforcing` (TLS only), as RocketMQ's `tls.server.mode`.
    pub tls_mode: crate::tls::TlsMode,
    /// A connection that sends nothing for this long is closed (zero: never; key
    /// `channel_idle_timeout_ms`, in ms).
    #[serde(rename = "channel_idle_timeout_ms", with = "millis")]
    pub channel_idle_timeout: Duration,
    /// Connections open at once; more are closed on accept, with a log line. `skiff serve`
    /// lowers it to the connections' share of the open-file limit when that is smaller.
    pub max_connections: usize,
    /// The open-file limit `skiff serve` raises its soft `RLIMIT_NOFILE` to at start (0: the
    /// hard limit); connections and queue files share it (see `skiff::descriptors`).
    pub max_open_files: u64,
    /// Consume-queue files the store holds open at once; the others are opened when used
    /// (0: the store's share of the open-file limit under `skiff serve`, 256 embedded).
    pub open_queue_files: usize,
    /// When a listener binds beyond loopback and no users are configured, serve only loopback
    /// peers and refuse the others with a remark saying how to opt out (`false`).
    pub protected_mode: bool,
    /// Users and their permissions (RocketMQ's `plain_acl.yml` in TOML: `[[acl.accounts]]`);
    /// with any account configured, every request must be signed. See `docs/security.md`.
    pub acl: crate::acl::AclConfig,
    /// A `plain_acl.yml`-format file whose accounts join `[acl]`'s; re-read when it changes
    /// and on SIGHUP.
    pub acl_file: Option<PathBuf>,
    /// Index message keys and unique keys for lookups by key (`SKIFF_KEY_INDEX=false` turns
    /// it off; every lookup by key then finds nothing).
    pub key_index: bool,
    /// A transactional half message younger than this (from its born time) is not checked back
    /// (RocketMQ `transactionTimeOut`; key `transaction_timeout_ms`, in ms).
    #[serde(rename = "transaction_timeout_ms", with = "millis")]
    pub transaction_timeout: Duration,
    /// How often pending half messages are checked back with their producer (RocketMQ
    /// `transactionCheckInterval`, 30 s there; shorter here, for development; key
    /// `transaction_check_interval_ms`, in ms).
    #[serde(rename = "transaction_check_interval_ms", with = "millis")]
    pub transaction_check_interval: Duration,
    /// Check-backs per half message before it is set aside (RocketMQ `transactionCheckMax`).
    pub transaction_check_max: u32,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            data_dir: PathBuf::from("skiff-data"),
            listen: SocketAddr::from(([127, 0, 0, 1], 9876)),
            advertised_address: None,
            broker_name: "skiff".to_string(),
            cluster_name: "DefaultCluster".to_string(),
            flush: FlushPolicy::Async,
            flush_interval: Duration::from_millis(500),
            sync_flush_timeout: StoreConfig::DEFAULT_SYNC_FLUSH_TIMEOUT,
            segment_size: 1 << 30,
            retention: Duration::from_secs(72 * 3600),
            cleanup_interval: Duration::from_secs(10),
            disk_max_used_ratio: 0.75,
            disk_full_ratio: 0.90,
            max_message_size: 4 << 20,
            flush_consumer_offset_interval: Duration::from_secs(5),
            default_topic_queue_nums: 4,
            auto_create_topic: true,
            auto_create_subscription_group: true,
            max_frame_bytes: 16 << 20,
            channel_expiry: Duration::from_secs(120),
            lock_expiry: Duration::from_secs(60),
            metrics_listen: "127.0.0.1:5557".to_string(),
            console_sample_interval: crate::console::DEFAULT_SAMPLE_INTERVAL,
            grpc_listen: "127.0.0.1:8081".to_string(),
            tls_cert_file: None,
            tls_key_file: None,
            tls_mode: crate::tls::TlsMode::Permissive,
            channel_idle_timeout: Duration::from_secs(120),
            max_connections: 1000,
            max_open_files: 0,
            open_queue_files: 0,
            protected_mode: true,
            acl: crate::acl::AclConfig::default(),
            acl_file: None,
            key_index: true,
            transaction_timeout: Duration::from_secs(6),
            transaction_check_interval: Duration::from_secs(5),
            transaction_check_max: 15,
        }
    }
}

impl NodeConfig {
    /// [`Self::metrics_listen`] as an address; `None` when it is `off`.
    pub fn metrics_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        if self.metrics_listen.eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        self.metrics_listen
            .parse()
            .map(Some)
            .map_err(|e: std::net::AddrParseError| ConfigError::Invalid {
                field: "metrics_listen",
                reason: format!("{e}: expected ip:port or off"),
            })
    }

    /// [`Self::grpc_listen`] as an address; `None` when it is `off`.
    pub fn grpc_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        if self.grpc_listen.eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        self.grpc_listen
            .parse()
            .map(Some)
            .map_err(|e: std::net::AddrParseError| ConfigError::Invalid {
                field: "grpc_listen",
                reason: format!("{e}: expected ip:port or off"),
            })
    }

    /// The ACL: `[acl]`'s accounts and those of `acl_file`, checked.
    pub fn acl(&self) -> Result<crate::acl::Acl, ConfigError> {
        let mut written = self.acl.clone();
        if let Some(path) = &self.acl_file {
            let file = crate::acl::AclConfig::from_yaml_file(path)
                .map_err(|source| ConfigError::Acl { source })?;
            written = written.merged(file);
        }
        crate::acl::Acl::new(&written).map_err(|source| ConfigError::Acl { source })
    }

    /// The TLS identity: the configured PEM files, or a self-signed certificate.
    pub fn tls_identity(&self) -> Result<crate::tls::TlsIdentity, ConfigError> {
        use crate::tls::TlsIdentity;
        match (&self.tls_cert_file, &self.tls_key_file) {
            (None, None) => Ok(TlsIdentity::SelfSigned),
            (Some(cert), Some(key)) => Ok(TlsIdentity::Files {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (Some(_), None) => Err(ConfigError::Invalid {
                field: "tls_key_file",
                reason: "tls_cert_file is set, its key is not".to_string(),
            }),
            (None, Some(_)) => Err(ConfigError::Invalid {
                field: "tls_cert_file",
                reason: "tls_key_file is set, its certificate is not".to_string(),
            }),
        }
    }

    /// A config whose data lives in `dir`, everything else default (tests and embedding).
    pub fn in_dir(dir: impl AsRef<Path>) -> Self {
        NodeConfig {
            data_dir: dir.as_ref().to_path_buf(),
            ..NodeConfig::default()
        }
    }

    /// Defaults, then `config_file` (optional; `skiff.toml` in the working directory when
    /// `None`), then `SKIFF_*` environment variables (e.g. `SKIFF_DATA_DIR`, `SKIFF_FLUSH=sync`).
    pub fn load(config_file: Option<&Path>) -> Result<Self, ConfigError> {
        let defaults = config::Config::try_from(&NodeConfig::default())
            .map_err(|source| ConfigError::Load { source })?;
        let file = match config_file {
            Some(path) => config::File::from(path).required(true),
            None => config::File::with_name("skiff.toml").required(false),
        };
        let file = with_canonical_keys(file)?;
        let loaded: NodeConfig = config::Config::builder()
            .add_source(defaults)
            .add_source(file)
            .add_source(
                config::Environment::with_prefix("SKIFF")
                    .try_parsing(true)
                    .source(Some(known_environment())),
            )
            .build()
            .and_then(|built| built.try_deserialize())
            .map_err(|source| ConfigError::Load { source })?;
        loaded.validate()?;
        Ok(loaded)
    }

    /// The `SKIFF_*` variables that name a config field. Others (a test harness's, a shell's)
    /// are not this config's business: the file is strict about unknown keys, the environment
    /// cannot be.
    pub fn unknown_environment() -> Vec<String> {
        let known = field_names();
        std::env::vars()
            .filter_map(|(name, _)| {
                let field = name.strip_prefix("SKIFF_")?.to_ascii_lowercase();
                let spelled_otherwise = OTHER_SPELLINGS.iter().any(|(other, _)| *other == field);
                (!known.contains(&field) && !spelled_otherwise).then_some(name)
            })
            .collect()
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = |field: &'static str, value: u128| {
            if value == 0 {
                Err(ConfigError::Invalid {
                    field,
                    reason: "must be greater than zero".to_string(),
                })
            } else {
                Ok(())
            }
        };
        positive("flush_interval_ms", self.flush_interval.as_millis())?;
        positive("sync_flush_timeout_ms", self.sync_flush_timeout.as_millis())?;
        positive("segment_size", self.segment_size.into())?;
        positive(
            "flush_consumer_offset_interval_ms",
            self.flush_consumer_offset_interval.as_millis(),
        )?;
        positive(
            "default_topic_queue_nums",
            self.default_topic_queue_nums.into(),
        )?;
        positive("max_frame_bytes", self.max_frame_bytes as u128)?;
        positive("max_connections", self.max_connections as u128)?;
        positive("cleanup_interval", self.cleanup_interval.as_millis())?;
        for (field, ratio) in [
            ("disk_max_used_ratio", self.disk_max_used_ratio),
            ("disk_full_ratio", self.disk_full_ratio),
        ] {
            if !(ratio > 0.0 && ratio <= 1.0) {
                return Err(ConfigError::Invalid {
                    field,
                    reason: format!("{ratio} is not a share of the disk in (0, 1]"),
                });
            }
        }
        if self.disk_max_used_ratio >= self.disk_full_ratio {
            // Sends would be refused before the early deletion that frees space ever starts.
            return Err(ConfigError::Invalid {
                field: "disk_max_used_ratio",
                reason: format!(
                    "{} must be below disk_full_ratio ({})",
                    self.disk_max_used_ratio, self.disk_full_ratio
                ),
            });
        }
        self.metrics_addr()?;
        self.grpc_addr()?;
        self.tls_identity()?;
        positive(
            "transaction_check_interval_ms",
            self.transaction_check_interval.as_millis(),
        )?;
        if self.segment_size < self.max_message_size as u64 + 4096 {
            return Err(ConfigError::Invalid {
                field: "segment_size",
                reason: format!(
                    "{} bytes cannot hold a message of max_message_size {} bytes",
                    self.segment_size, self.max_message_size
                ),
            });
        }
        Ok(())
    }

    /// What routes advertise: `advertised_address`, else the listen address.
    pub fn advertised(&self) -> String {
        self.advertised_address
            .clone()
            .unwrap_or_else(|| self.listen.to_string())
    }
}

/// The `*_ms` keys: intervals written as whole milliseconds in `skiff.toml` and `SKIFF_*`, as
/// they always were, held as [`Duration`]s.
mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        let millis = u64::try_from(value.as_millis()).unwrap_or(u64::MAX);
        serializer.serialize_u64(millis)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}

/// Keys the file and the environment may spell another way, and the field each names: one
/// setting keeps one name once read, so a key and its other spelling never meet as two fields.
const OTHER_SPELLINGS: [(&str, &str); 1] = [("http_listen", "metrics_listen")];

/// The file's settings with every other spelling renamed to its field; both spellings of one
/// setting in one file are refused.
fn with_canonical_keys(
    file: config::File<config::FileSourceFile, config::FileFormat>,
) -> Result<config::Config, ConfigError> {
    let load = |source| ConfigError::Load { source };
    let read = config::Config::builder()
        .add_source(file)
        .build()
        .map_err(load)?;
    let mut table = config::Source::collect(&read).map_err(load)?;
    if !OTHER_SPELLINGS
        .iter()
        .any(|(other, _)| table.contains_key(*other))
    {
        return Ok(read);
    }
    for (other, field) in OTHER_SPELLINGS {
        if let Some(value) = table.remove(other) {
            if table.contains_key(field) {
                return Err(ConfigError::Invalid {
                    field,
                    reason: format!("set twice, as {field} and as {other}; keep one"),
                });
            }
            table.insert(field.to_owned(), value);
        }
    }
    table
        .into_iter()
        .try_fold(config::Config::builder(), |builder, (key, value)| {
            builder.set_override(key, value)
        })
        .and_then(|builder| builder.build())
        .map_err(load)
}

fn field_names() -> std::collections::HashSet<String> {
    match serde_json::to_value(NodeConfig::default()) {
        Ok(serde_json::Value::Object(fields)) => fields.keys().cloned().collect(),
        _ => std::collections::HashSet::new(),
    }
}

/// `SKIFF_*` variables restricted to config fields, in the form `config::Environment` reads.
fn known_environment() -> config::Map<String, String> {
    let known = field_names();
    let mut vars: config::Map<String, String> = std::env::vars()
        .filter(|(name, _)| {
            name.strip_prefix("SKIFF_")
                .is_some_and(|field| known.contains(&field.to_ascii_lowercase()))
        })
        .collect();
    for (other, field) in OTHER_SPELLINGS {
        let field_var = format!("SKIFF_{}", field.to_ascii_uppercase());
        if let Ok(value) = std::env::var(format!("SKIFF_{}", other.to_ascii_uppercase())) {
            vars.entry(field_var).or_insert(value);
        }
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_listen_spelling_sets_the_http_listener_and_both_spellings_are_refused() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let one = dir.path().join("one.toml");
        std::fs::write(&one, "http_listen = \"127.0.0.1:5999\"\n").expect("written");
        let config = NodeConfig::load(Some(&one)).expect("http_listen is accepted");
        assert_eq!(config.metrics_listen, "127.0.0.1:5999");
        let both = dir.path().join("both.toml");
        std::fs::write(
            &both,
            "http_listen = \"127.0.0.1:5999\"\nmetrics_listen = \"off\"\n",
        )
        .expect("written");
        let refused = NodeConfig::load(Some(&both));
        assert!(
            matches!(
                refused,
                Err(ConfigError::Invalid {
                    field: "metrics_listen",
                    ..
                })
            ),
            "{refused:?}"
        );
    }

    #[test]
    fn defaults_bind_loopback_9876_with_async_flush() {
        let config = NodeConfig::default();
        assert_eq!(config.listen.to_string(), "127.0.0.1:9876");
        assert_eq!(config.flush, FlushPolicy::Async);
        assert_eq!(
            config.flush_consumer_offset_interval,
            Duration::from_secs(5)
        );
        assert!(config.validate().is_ok());
    }

    #[test]
    fn file_values_override_defaults() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("skiff.toml");
        std::fs::write(&path, "flush = \"sync\"\ndefault_topic_queue_nums = 8\n")?;
        let config = NodeConfig::load(Some(&path))?;
        assert_eq!(config.flush, FlushPolicy::Sync);
        assert_eq!(config.default_topic_queue_nums, 8);
        assert_eq!(config.broker_name, "skiff");
        Ok(())
    }

    #[test]
    fn environment_overrides_the_file_and_unrelated_variables_are_ignored() -> anyhow::Result<()> {
        // The only test touching SKIFF_* variables, and on a field no other test reads, so
        // tests running in parallel are not affected.
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("skiff.toml");
        std::fs::write(&path, "channel_expiry_ms = 9000\n")?;
        std::env::set_var("SKIFF_CHANNEL_EXPIRY_MS", "7000");
        std::env::set_var("SKIFF_RETENTION", "10m");
        std::env::set_var("SKIFF_NOT_A_SETTING", "1");
        let loaded = NodeConfig::load(Some(&path));
        let unknown = NodeConfig::unknown_environment();
        std::env::remove_var("SKIFF_CHANNEL_EXPIRY_MS");
        std::env::remove_var("SKIFF_RETENTION");
        std::env::remove_var("SKIFF_NOT_A_SETTING");
        let loaded = loaded?;
        assert_eq!(loaded.channel_expiry, Duration::from_millis(7000));
        assert_eq!(loaded.retention, Duration::from_secs(600));
        assert!(
            unknown.contains(&"SKIFF_NOT_A_SETTING".to_string()),
            "{unknown:?}"
        );
        Ok(())
    }

    #[test]
    fn retention_durations_read_as_people_write_them_and_ratios_are_checked() -> anyhow::Result<()>
    {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("skiff.toml");
        std::fs::write(
            &path,
            "retention = \"90s\"\ncleanup_interval = \"500ms\"\ndisk_full_ratio = 0.95\n",
        )?;
        let config = NodeConfig::load(Some(&path))?;
        assert_eq!(config.retention, Duration::from_secs(90));
        assert_eq!(config.cleanup_interval, Duration::from_millis(500));
        assert_eq!(config.disk_full_ratio, 0.95);
        assert_eq!(
            NodeConfig::default().retention,
            Duration::from_secs(72 * 3600)
        );
        for bad in [
            "disk_full_ratio = 1.5\n",
            "disk_max_used_ratio = 0.95\n",
            "cleanup_interval = \"0s\"\n",
            "retention = \"soon\"\n",
        ] {
            std::fs::write(&path, bad)?;
            assert!(NodeConfig::load(Some(&path)).is_err(), "{bad} accepted");
        }
        Ok(())
    }

    #[test]
    fn millisecond_keys_read_whole_milliseconds_into_durations() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("skiff.toml");
        type Field = fn(&NodeConfig) -> Duration;
        let cases: [(&str, Field); 8] = [
            ("flush_interval_ms", |c| c.flush_interval),
            ("sync_flush_timeout_ms", |c| c.sync_flush_timeout),
            ("flush_consumer_offset_interval_ms", |c| {
                c.flush_consumer_offset_interval
            }),
            ("channel_expiry_ms", |c| c.channel_expiry),
            ("lock_expiry_ms", |c| c.lock_expiry),
            ("channel_idle_timeout_ms", |c| c.channel_idle_timeout),
            ("transaction_timeout_ms", |c| c.transaction_timeout),
            ("transaction_check_interval_ms", |c| {
                c.transaction_check_interval
            }),
        ];
        for (key, field) in cases {
            std::fs::write(&path, format!("{key} = 1234\n"))?;
            let config = NodeConfig::load(Some(&path))?;
            assert_eq!(field(&config), Duration::from_millis(1234), "{key}");
            let written = serde_json::to_value(&config)?;
            assert_eq!(written[key], 1234, "{key} is written back in ms");
        }
        std::fs::write(&path, "channel_expiry_ms = \"2m\"\n")?;
        assert!(
            NodeConfig::load(Some(&path)).is_err(),
            "a *_ms key takes a number of milliseconds, as before"
        );
        Ok(())
    }

    #[test]
    fn unknown_keys_and_zero_intervals_are_rejected() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("skiff.toml");
        std::fs::write(&path, "flsh = \"sync\"\n")?;
        assert!(NodeConfig::load(Some(&path)).is_err());
        std::fs::write(&path, "flush_interval_ms = 0\n")?;
        let error = NodeConfig::load(Some(&path))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("flush_interval_ms"), "{error}");
        Ok(())
    }
}
