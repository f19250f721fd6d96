//! Knowing when the broker has let go of its files. An actor stops after the message that stopped
//! it, but it (and the futures it runs) is dropped only when its arbiter next polls it; until then
//! its sled trees and files stay open, and a new node on the same directory cannot open them.
//!
//! Every broker actor that owns storage keeps a [`Holder`]; [`Holdings::released`] resolves
//! once the last holder is dropped, that is once the last of those actors is gone. Nothing is
//! ever sent on the channel: its closing is the signal.

use tokio::sync::mpsc;

/// The broker's side: hands out holders and waits for them to be gone.
pub struct Holdings {
    holder: Holder,
    released: mpsc::Receiver<()>,
}

/// Kept by an actor for as long as it holds broker storage.
#[derive(Clone, Debug)]
pub struct Holder {
    _keeps_open: mpsc::Sender<()>,
}

impl Holdings {
    pub fn new() -> Self {
        let (sender, released) = mpsc::channel(1);
        Holdings {
            holder: Holder {
                _keeps_open: sender,
            },
            released,
        }
    }

    pub fn holder(&self) -> Holder {
        self.holder.clone()
    }

    /// Resolves when every holder handed out has been dropped.
    pub async fn released(self) {
        let Holdings {
            holder,
            mut released,
        } = self;
        drop(holder);
        while released.recv().await.is_some() {}
    }
}

impl Default for Holdings {
    fn default() -> Self {
        Self::new()
    }
}
