//! What the consumer examples share: they run until Ctrl-C, or until `--count` messages arrived
//! (how CI runs them to completion).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

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
