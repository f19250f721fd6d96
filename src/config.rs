//! Node configuration: defaults, then `skiff.toml`, then `SKIFF_*` environment variables, then
//! command-line flags (applied by the binary as overrides).

use serde::{Deserialize, Serialize};
use skiff_storage::store::{FlushPolicy, StoreConfig};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod origin;
pub mod values;

pub use origin::{Origin, Origins};
use values::{duration, flush, listen_addr, millis, size, switch, tls_mode};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read or parsed (its syntax, not a setting's value).
    #[error("configuration is invalid")]
    Load {
        #[source]
        source: config::ConfigError,
    },
    /// A setting's value is refused: what was written, where, and what is accepted.
    #[error("setting {key} (from {origin}) is invalid: {reason}")]
    Invalid {
        key: String,
        origin: Origin,
        reason: String,
    },
    /// The file names a setting skiff does not have.
    #[error("{key} (in {origin}) is not a setting{}", suggestion.as_ref().map(|s| format!("; did you mean {s}?")).unwrap_or_default())]
    UnknownKey {
        key: String,
        origin: Origin,
        suggestion: Option<String>,
    },
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
    /// The remoting listener (name server and broker on one port): `ip:port`, or
    /// `localhost:port` for 127.0.0.1.
    #[serde(with = "listen_addr")]
    pub listen: SocketAddr,
    /// The address routes tell clients to connect to; defaults to `listen`.
    pub advertised_address: Option<String>,
    pub broker_name: String,
    pub cluster_name: String,
    /// `async` (fsync on an interval) or `sync` (group commit before the send is acked).
    #[serde(with = "flush")]
    pub flush: FlushPolicy,
    /// How often `async` flush fsyncs the commit log (key `flush_interval_ms`, in ms).
    #[serde(rename = "flush_interval_ms", with = "millis")]
    pub flush_interval: Duration,
    /// Under `sync` flush, how long a send waits for its fsync before it is answered
    /// FLUSH_DISK_TIMEOUT, stored but not yet durable (key `sync_flush_timeout_ms`, in ms;
    /// RocketMQ's `syncFlushTimeout`).
    #[serde(rename = "sync_flush_timeout_ms", with = "millis")]
    pub sync_flush_timeout: Duration,
    /// Bytes of one commit-log segment; retention deletes whole segments. Sizes take units
    /// (`1GiB`, `512MiB`) or plain bytes.
    #[serde(with = "size")]
    pub segment_size: u64,
    /// Under `sync` flush: how far ahead of the appender the last segment's blocks are written
    /// (zeros) and fsynced, so a group commit's fsync carries only the records; `0` turns it off.
    #[serde(with = "size")]
    pub segment_prepare_ahead: u64,
    /// Full segments whose newest message is older than this are deleted (`72h`).
    #[serde(with = "duration")]
    pub retention: Duration,
    /// How often retention and the disk guard run (`10s`).
    #[serde(with = "duration")]
    pub cleanup_interval: Duration,
    /// Past this share of the disk in use, the oldest segments are deleted early.
    pub disk_max_used_ratio: f64,
    /// Past this share, sends are refused with SERVICE_NOT_AVAILABLE until space returns.
    pub disk_full_ratio: f64,
    /// The largest message body a producer may send.
    #[serde(with = "size")]
    pub max_message_size: usize,
    /// Broker offset-table flush interval (RocketMQ `flushConsumerOffsetInterval`; key
    /// `flush_consumer_offset_interval_ms`, in ms).
    #[serde(rename = "flush_consumer_offset_interval_ms", with = "millis")]
    pub flush_consumer_offset_interval: Duration,
    /// Queues of an auto-created topic.
    pub default_topic_queue_nums: u32,
    /// Whether a send to an unknown topic creates it (RocketMQ `autoCreateTopicEnable`).
    #[serde(with = "switch")]
    pub auto_create_topic: bool,
    /// Whether a consumer of an unknown group creates it (RocketMQ
    /// `autoCreateSubscriptionGroup`).
    #[serde(with = "switch")]
    pub auto_create_subscription_group: bool,
    /// Largest accepted remoting frame.
    #[serde(with = "size")]
    pub max_frame_bytes: usize,
    /// A consumer channel with no heartbeat for this long is dropped (key `channel_expiry_ms`,
    /// in ms).
    #[serde(rename = "channel_expiry_ms", with = "millis")]
    pub channel_expiry: Duration,
    /// Orderly queue locks expire after this long without renewal (key `lock_expiry_ms`, in ms).
    #[serde(rename = "lock_expiry_ms", with = "millis")]
    pub lock_expiry: Duration,
    /// How long a popped message's checkpoint waits in memory for its acknowledgement before it
    /// is written to the store (key `pop_checkpoint_window_ms`, in ms; RocketMQ's
    /// `popCkStayBufferTime`); 0 writes each within a second.
    #[serde(rename = "pop_checkpoint_window_ms", with = "millis")]
    pub pop_checkpoint_window: Duration,
    /// A lite consumer's subscription not refreshed this long is dropped (key
    /// `lite_subscription_expiry_ms`, in ms; RocketMQ's `liteSubscriptionCheckTimeoutMills`, 3
    /// minutes; its clients refresh every 30 s).
    #[serde(rename = "lite_subscription_expiry_ms", with = "millis")]
    pub lite_subscription_expiry: Duration,
    /// How often idle lite topics are looked for (key `lite_ttl_check_interval_ms`, in ms;
    /// RocketMQ's `liteTtlCheckInterval`, 2 minutes).
    #[serde(rename = "lite_ttl_check_interval_ms", with = "millis")]
    pub lite_ttl_check_interval: Duration,
    /// The least idle time that expires a lite topic, whatever its parent's
    /// `lite.topic.expiration`, and the time after a start before any expires (key
    /// `lite_min_ttl_ms`, in ms; RocketMQ's fixed 15 minutes).
    #[serde(rename = "lite_min_ttl_ms", with = "millis")]
    pub lite_min_ttl: Duration,
    /// How often the store looks for consume queues unused since its last look, all on disk,
    /// and lets them go from memory until their next use (key `idle_queue_release_ms`, in ms;
    /// 0 keeps every opened queue in memory).
    #[serde(rename = "idle_queue_release_ms", with = "millis")]
    pub idle_queue_release: Duration,
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
    #[serde(with = "tls_mode")]
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
    #[serde(with = "switch")]
    pub protected_mode: bool,
    /// Users and their permissions (RocketMQ's `plain_acl.yml` in TOML: `[[acl.accounts]]`);
    /// with any account configured, every request must be signed. See `docs/security.md`.
    pub acl: crate::acl::AclConfig,
    /// A `plain_acl.yml`-format file whose accounts join `[acl]`'s; re-read when it changes
    /// and on SIGHUP.
    pub acl_file: Option<PathBuf>,
    /// Producers may recall their timer messages before they fire (RECALL_MESSAGE,
    /// RecallMessage). On by default; `false` refuses recalls as Apache RocketMQ does by default
    /// (its `recallMessageEnable`).
    pub recall_message_enable: bool,
    /// Index message keys and unique keys for lookups by key (`SKIFF_KEY_INDEX=false` turns
    /// it off; every lookup by key then finds nothing).
    #[serde(with = "switch")]
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
            segment_prepare_ahead: StoreConfig::DEFAULT_PREPARE_AHEAD,
            retention: Duration::from_secs(72 * 3600),
            cleanup_interval: Duration::from_secs(10),
            disk_max_used_ratio: 0.75,
            disk_full_ratio: 0.90,
            max_message_size: 4 << 20,
            flush_consumer_offset_interval: Duration::from_secs(5),
            default_topic_queue_nums: 4,
            auto_create_topic: true,
            auto_create_subscription_group: true,
            recall_message_enable: true,
            max_frame_bytes: 16 << 20,
            channel_expiry: Duration::from_secs(120),
            lock_expiry: Duration::from_secs(60),
            pop_checkpoint_window: skiff_actors::logic::pop_buffer::DEFAULT_WINDOW,
            lite_subscription_expiry: Duration::from_secs(180),
            lite_ttl_check_interval: Duration::from_secs(120),
            lite_min_ttl: Duration::from_secs(15 * 60),
            idle_queue_release: Duration::from_secs(60),
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

/// A refused value, before its origin is known: the key as written and why.
struct Refusal {
    key: &'static str,
    reason: String,
}

impl Refusal {
    fn new(key: &'static str, reason: impl Into<String>) -> Self {
        Refusal {
            key,
            reason: reason.into(),
        }
    }

    fn from(self, origins: &Origins) -> ConfigError {
        ConfigError::Invalid {
            key: self.key.to_owned(),
            origin: origins.of(self.key),
            reason: self.reason,
        }
    }
}

/// An HTTP or gRPC listener setting: an address (as [`values::parse_listen_addr`]) or `off`.
fn optional_listener(key: &'static str, written: &str) -> Result<Option<SocketAddr>, Refusal> {
    if written.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    values::parse_listen_addr(written)
        .map(Some)
        .map_err(|reason| Refusal::new(key, format!("{reason}, or off")))
}

impl NodeConfig {
    /// [`Self::metrics_listen`] as an address; `None` when it is `off`.
    pub fn metrics_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        optional_listener("metrics_listen", &self.metrics_listen)
            .map_err(|refusal| refusal.from(&Origins::default()))
    }

    /// [`Self::grpc_listen`] as an address; `None` when it is `off`.
    pub fn grpc_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        optional_listener("grpc_listen", &self.grpc_listen)
            .map_err(|refusal| refusal.from(&Origins::default()))
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
        self.checked_tls_identity()
            .map_err(|refusal| refusal.from(&Origins::default()))
    }

    fn checked_tls_identity(&self) -> Result<crate::tls::TlsIdentity, Refusal> {
        use crate::tls::TlsIdentity;
        match (&self.tls_cert_file, &self.tls_key_file) {
            (None, None) => Ok(TlsIdentity::SelfSigned),
            (Some(cert), Some(key)) => Ok(TlsIdentity::Files {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (Some(_), None) => Err(Refusal::new(
                "tls_cert_file",
                "tls_cert_file is set, its key is not: set tls_key_file too",
            )),
            (None, Some(_)) => Err(Refusal::new(
                "tls_key_file",
                "tls_key_file is set, its certificate is not: set tls_cert_file too",
            )),
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
        Self::load_with_origins(config_file).map(|(config, _)| config)
    }

    /// [`Self::load`], and where each setting came from, for the binary to add its flags to
    /// and check with [`Self::validate_from`].
    pub fn load_with_origins(config_file: Option<&Path>) -> Result<(Self, Origins), ConfigError> {
        let load = |source| ConfigError::Load { source };
        let defaults = config::Config::try_from(&NodeConfig::default()).map_err(load)?;
        let (file, file_path) = match config_file {
            Some(path) => (config::File::from(path).required(true), path.to_path_buf()),
            None => (
                config::File::with_name("skiff.toml").required(false),
                PathBuf::from("skiff.toml"),
            ),
        };
        let mut origins = Origins::default();
        let file = with_canonical_keys(file, &file_path)?;
        let known = field_names();
        let file_keys = config::Source::collect(&file).map_err(load)?;
        for key in file_keys.keys() {
            let origin = Origin::File(file_path.clone());
            if !known.contains(key) {
                return Err(ConfigError::UnknownKey {
                    suggestion: closest_key(key, &known),
                    key: key.clone(),
                    origin,
                });
            }
            origins.set(key.clone(), origin);
        }
        let environment = known_environment();
        for (key, variable) in &environment.origins {
            origins.set(key.clone(), Origin::Environment(variable.clone()));
        }
        let loaded: NodeConfig = config::Config::builder()
            .add_source(defaults)
            .add_source(file)
            .add_source(
                config::Environment::with_prefix("SKIFF")
                    .try_parsing(true)
                    .source(Some(environment.vars)),
            )
            .build()
            .map_err(load)?
            .try_deserialize()
            .map_err(|error| refused_value(error, &origins))?;
        loaded.validate_from(&origins)?;
        Ok((loaded, origins))
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

    /// Checks the values together (a config built in code; a refusal cannot say where a value
    /// came from). See [`Self::validate_from`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_from(&Origins::default())
    }

    /// Checks the values together; a refusal names the key, where its value came from
    /// (`origins`) and what is accepted.
    pub fn validate_from(&self, origins: &Origins) -> Result<(), ConfigError> {
        self.checked().map_err(|refusal| refusal.from(origins))
    }

    fn checked(&self) -> Result<(), Refusal> {
        let positive = |key: &'static str, value: u128| {
            if value == 0 {
                Err(Refusal::new(key, "must be greater than zero"))
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
        for (key, ratio) in [
            ("disk_max_used_ratio", self.disk_max_used_ratio),
            ("disk_full_ratio", self.disk_full_ratio),
        ] {
            if !(ratio > 0.0 && ratio <= 1.0) {
                return Err(Refusal::new(
                    key,
                    format!("{ratio} is not a share of the disk: expected a number in (0, 1]"),
                ));
            }
        }
        if self.disk_max_used_ratio >= self.disk_full_ratio {
            // Sends would be refused before the early deletion that frees space ever starts.
            return Err(Refusal::new(
                "disk_max_used_ratio",
                format!(
                    "{} must be below disk_full_ratio ({})",
                    self.disk_max_used_ratio, self.disk_full_ratio
                ),
            ));
        }
        optional_listener("metrics_listen", &self.metrics_listen)?;
        optional_listener("grpc_listen", &self.grpc_listen)?;
        self.checked_tls_identity()?;
        positive(
            "transaction_check_interval_ms",
            self.transaction_check_interval.as_millis(),
        )?;
        if self.segment_size < self.max_message_size as u64 + 4096 {
            return Err(Refusal::new(
                "segment_size",
                format!(
                    "{} bytes cannot hold a message of max_message_size {} bytes: expected at \
                     least max_message_size + 4KiB",
                    self.segment_size, self.max_message_size
                ),
            ));
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

/// A value the config crate could not read as its setting, as [`ConfigError::Invalid`] naming
/// the key and its origin; an error naming no key stays a [`ConfigError::Load`].
fn refused_value(error: config::ConfigError, origins: &Origins) -> ConfigError {
    let (key, reason) = match &error {
        config::ConfigError::At {
            error: inner,
            key: Some(key),
            ..
        } => (key.clone(), inner.to_string()),
        config::ConfigError::Type {
            unexpected,
            expected,
            key: Some(key),
            ..
        } => (
            key.clone(),
            format!("found {unexpected}, expected {expected}"),
        ),
        _ => return ConfigError::Load { source: error },
    };
    ConfigError::Invalid {
        origin: origins.of(&key),
        key,
        reason,
    }
}

/// The setting `unknown` most likely meant: one at most two edits away, or one it is part of.
fn closest_key(unknown: &str, known: &std::collections::HashSet<String>) -> Option<String> {
    let mut candidates: Vec<(usize, &String)> = known
        .iter()
        .map(|key| (edit_distance(unknown, key), key))
        .filter(|(distance, key)| *distance <= 2 || (unknown.len() >= 4 && key.contains(unknown)))
        .collect();
    candidates.sort();
    candidates.first().map(|(_, key)| (*key).clone())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Keys the file and the environment may spell another way, and the field each names: one
/// setting keeps one name once read, so a key and its other spelling never meet as two fields.
const OTHER_SPELLINGS: [(&str, &str); 1] = [("http_listen", "metrics_listen")];

/// The file's settings with every other spelling renamed to its field; both spellings of one
/// setting in one file are refused.
fn with_canonical_keys(
    file: config::File<config::FileSourceFile, config::FileFormat>,
    path: &Path,
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
                    key: field.to_owned(),
                    origin: Origin::File(path.to_path_buf()),
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

/// `SKIFF_*` variables restricted to config fields, in the form `config::Environment` reads,
/// and the variable that set each key.
struct KnownEnvironment {
    vars: config::Map<String, String>,
    origins: Vec<(String, String)>,
}

fn known_environment() -> KnownEnvironment {
    let known = field_names();
    let mut vars = config::Map::new();
    let mut origins = Vec::new();
    for (name, value) in std::env::vars() {
        let Some(key) = name.strip_prefix("SKIFF_").map(str::to_ascii_lowercase) else {
            continue;
        };
        if known.contains(&key) {
            origins.push((key, name.clone()));
            vars.insert(name, value);
        }
    }
    for (other, field) in OTHER_SPELLINGS {
        let field_var = format!("SKIFF_{}", field.to_ascii_uppercase());
        let other_var = format!("SKIFF_{}", other.to_ascii_uppercase());
        if let Ok(value) = std::env::var(&other_var) {
            // The field's own spelling wins when both are set.
            if origins.iter().all(|(key, _)| key != field) {
                vars.insert(field_var, value);
                origins.push((field.to_owned(), other_var));
            }
        }
    }
    KnownEnvironment { vars, origins }
}

#[cfg(test)]
mod tests;
