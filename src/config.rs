//! Node configuration: defaults, then `skiff.toml`, then `SKIFF_*` environment variables, then
//! command-line flags (applied by the binary as overrides).

use serde::{Deserialize, Serialize};
use skiff_storage::store::FlushPolicy;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration is invalid: {source}")]
    Load {
        #[source]
        source: config::ConfigError,
    },
    #[error("configuration value {field} is invalid: {reason}")]
    Invalid { field: &'static str, reason: String },
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
    pub flush_interval_ms: u64,
    pub segment_size: u64,
    pub max_message_size: usize,
    /// Broker offset-table flush interval (RocketMQ `flushConsumerOffsetInterval`).
    pub flush_consumer_offset_interval_ms: u64,
    /// Queues of an auto-created topic.
    pub default_topic_queue_nums: u32,
    pub auto_create_topic: bool,
    pub auto_create_subscription_group: bool,
    /// Largest accepted remoting frame.
    pub max_frame_bytes: usize,
    /// A consumer channel with no heartbeat for this long is dropped.
    pub channel_expiry_ms: u64,
    /// Orderly queue locks expire after this long without renewal.
    pub lock_expiry_ms: u64,
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
            flush_interval_ms: 500,
            segment_size: 1 << 30,
            max_message_size: 4 << 20,
            flush_consumer_offset_interval_ms: 5_000,
            default_topic_queue_nums: 4,
            auto_create_topic: true,
            auto_create_subscription_group: true,
            max_frame_bytes: 16 << 20,
            channel_expiry_ms: 120_000,
            lock_expiry_ms: 60_000,
        }
    }
}

impl NodeConfig {
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
                (!known.contains(&field)).then_some(name)
            })
            .collect()
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = |field: &'static str, value: u64| {
            if value == 0 {
                Err(ConfigError::Invalid {
                    field,
                    reason: "must be greater than zero".to_string(),
                })
            } else {
                Ok(())
            }
        };
        positive("flush_interval_ms", self.flush_interval_ms)?;
        positive("segment_size", self.segment_size)?;
        positive(
            "flush_consumer_offset_interval_ms",
            self.flush_consumer_offset_interval_ms,
        )?;
        positive(
            "default_topic_queue_nums",
            self.default_topic_queue_nums as u64,
        )?;
        positive("max_frame_bytes", self.max_frame_bytes as u64)?;
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

    pub fn flush_interval(&self) -> Duration {
        Duration::from_millis(self.flush_interval_ms)
    }

    pub fn flush_consumer_offset_interval(&self) -> Duration {
        Duration::from_millis(self.flush_consumer_offset_interval_ms)
    }
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
    std::env::vars()
        .filter(|(name, _)| {
            name.strip_prefix("SKIFF_")
                .is_some_and(|field| known.contains(&field.to_ascii_lowercase()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_bind_loopback_9876_with_async_flush() {
        let config = NodeConfig::default();
        assert_eq!(config.listen.to_string(), "127.0.0.1:9876");
        assert_eq!(config.flush, FlushPolicy::Async);
        assert_eq!(
            config.flush_consumer_offset_interval(),
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
        std::env::set_var("SKIFF_NOT_A_SETTING", "1");
        let loaded = NodeConfig::load(Some(&path));
        let unknown = NodeConfig::unknown_environment();
        std::env::remove_var("SKIFF_CHANNEL_EXPIRY_MS");
        std::env::remove_var("SKIFF_NOT_A_SETTING");
        assert_eq!(loaded?.channel_expiry_ms, 7000);
        assert!(
            unknown.contains(&"SKIFF_NOT_A_SETTING".to_string()),
            "{unknown:?}"
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
