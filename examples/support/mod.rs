//! What the networked examples share: the broker they connect to and the account they sign
//! with ([`Connection`]), their logging ([`init_logging`]), and for consumers, running until
//! Ctrl-C or until `--count` messages arrived (how CI runs them to completion, [`Stop`]).

// Each example uses a part of this module; the rest is dead code in that example's crate.
#![allow(dead_code)]

use skiff::acl::signature::Credentials;
use skiff::remoting::client::ClientConfig;
use skiff::remoting::remote_broker::{RemoteBroker, RemoteBrokerConfig};
use std::io::IsTerminal;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// Where an example connects and whom it signs as.
#[derive(clap::Args, Debug)]
pub struct Connection {
    /// Name server address (`skiff serve` is name server and broker).
    #[arg(long, env = "NAMESRV_ADDR", default_value = "127.0.0.1:9876")]
    pub namesrv: String,
    /// Sign requests with this account's access key (a broker with ACL on needs it).
    #[arg(long, env = "SKIFF_ACCESS_KEY", requires = "secret_key")]
    pub access_key: Option<String>,
    /// The account's secret key; prefer the environment variable, which `ps` does not show.
    #[arg(long, env = "SKIFF_SECRET_KEY", hide_env_values = true)]
    pub secret_key: Option<String>,
}

impl Connection {
    /// A client of the name server, signing as the account when one is given; `producer_group`
    /// is the group a producer registers as.
    pub fn connect(&self, producer_group: Option<&str>) -> anyhow::Result<Rc<RemoteBroker>> {
        let credentials =
            self.access_key
                .clone()
                .zip(self.secret_key.clone())
                .map(|(access_key, secret_key)| Credentials {
                    access_key,
                    secret_key,
                });
        let mut config = RemoteBrokerConfig {
            client: ClientConfig {
                credentials,
                ..ClientConfig::default()
            },
            ..RemoteBrokerConfig::default()
        };
        if let Some(group) = producer_group {
            config.producer_group = group.to_owned();
        }
        Ok(Rc::new(RemoteBroker::connect(&self.namesrv, config)?))
    }
}

/// Logs to stderr at `RUST_LOG` (default `warn`), in colour only on a terminal, so output
/// redirected to a file carries no escape codes.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

/// Counts consumed messages and says when to stop.
#[derive(Clone)]
pub struct Stop {
    consumed: Arc<AtomicUsize>,
    enough: Arc<Notify>,
    count: Option<usize>,
}

impl Stop {
    /// Stops on Ctrl-C, or once `count` messages were consumed when given.
    pub fn after(count: Option<usize>) -> Self {
        Stop {
            consumed: Arc::default(),
            enough: Arc::default(),
            count,
        }
    }

    /// Called by the listener for each batch it consumed.
    pub fn consumed(&self, messages: usize) {
        let total = self.consumed.fetch_add(messages, Ordering::SeqCst) + messages;
        if self.count.is_some_and(|count| total >= count) {
            self.enough.notify_one();
        }
    }

    /// Resolves on Ctrl-C or when enough messages were consumed.
    pub async fn wait(&self) -> anyhow::Result<()> {
        tokio::select! {
            signal = tokio::signal::ctrl_c() => Ok(signal?),
            () = self.enough.notified() => {
                eprintln!("{} messages consumed", self.consumed.load(Ordering::SeqCst));
                Ok(())
            }
        }
    }
}
