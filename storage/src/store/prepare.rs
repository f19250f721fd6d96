//! Preparing the commit log ahead of the appender, under `FlushPolicy::Sync`.
//!
//! An fdatasync after an append that grew the file must also commit the file's new size and
//! block map (a journal commit on ext4), about 130 µs on the development machine against
//! 80 µs for blocks written before. The preparer thread keeps the last segment written with
//! zeros and fsynced `StoreConfig::prepare_ahead` bytes past the written end, as RocketMQ
//! warms a mapped file before use (`warmMapedFileEnable`), so a group commit's fsync writes
//! the records only. It runs when the appender asks (the prepared space fell under half the
//! lead), never on the send path; recovery tells the prepared tail from a torn record
//! (`crate::commit_log`).

use super::{lock, Shared, StoreError};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// Zeros written (and fsynced) at a time: a write past the prepared space waits at most for
/// one of these, and a group commit's fsync writes at most one besides its records.
const CHUNK: u64 = 1 << 20;

/// How long the thread rests after a failed preparation.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Wake {
    asked: bool,
    stop: bool,
}

#[derive(Default)]
struct Signal {
    wake: Mutex<Wake>,
    cv: Condvar,
}

/// The running preparer thread.
pub(super) struct Preparer {
    signal: Arc<Signal>,
    handle: JoinHandle<()>,
}

impl Preparer {
    /// Wakes the thread to prepare up to the lead past the written end.
    pub(super) fn ask(&self) {
        let mut wake = lock(&self.signal.wake);
        if !wake.asked {
            wake.asked = true;
            self.signal.cv.notify_one();
        }
    }

    /// Tells the thread to exit and joins it.
    pub(super) fn stop(self) {
        lock(&self.signal.wake).stop = true;
        self.signal.cv.notify_one();
        if self.handle.join().is_err() {
            tracing::error!("commit-log preparer thread panicked");
        }
    }
}

impl Shared {
    /// Prepares the last segment up to `prepare_ahead` bytes past the written end.
    pub(super) fn prepare_ahead(&self) -> Result<bool, StoreError> {
        let target = self.log.written_end() + self.config.prepare_ahead;
        self.log.prepare(target, self.config.segment_size, CHUNK)
    }

    /// Whether the appender should ask for more prepared space after writing up to `end`.
    pub(super) fn wants_preparing(&self, end: u64) -> bool {
        self.log.prepared_end() < end + self.config.prepare_ahead / 2
    }
}

/// Starts the preparer when the store prepares in the background (`Sync`, a lead, and
/// `prepare_in_background`).
pub(super) fn spawn_preparer(shared: &Arc<Shared>) -> Result<Option<Preparer>, StoreError> {
    let config = &shared.config;
    if config.flush_policy != super::FlushPolicy::Sync
        || config.prepare_ahead == 0
        || !config.prepare_in_background
    {
        return Ok(None);
    }
    let signal = Arc::new(Signal::default());
    let thread_signal = signal.clone();
    // Weak, as the flusher's: a forgotten handle cannot keep the thread running.
    let weak = Arc::downgrade(shared);
    let handle = std::thread::Builder::new()
        .name("skiff-store-prep".to_string())
        .spawn(move || prepare_loop(&thread_signal, &weak))
        .map_err(|e| crate::error::io_err(&config.dir, e))?;
    // The first append asks: preparing at open would hold up the first answered send.
    Ok(Some(Preparer { signal, handle }))
}

fn prepare_loop(signal: &Signal, shared: &Weak<Shared>) {
    loop {
        {
            let wake = lock(&signal.wake);
            let mut wake = signal
                .cv
                .wait_while(wake, |w| !w.asked && !w.stop)
                .unwrap_or_else(|e| e.into_inner());
            if wake.stop {
                return;
            }
            wake.asked = false;
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let Err(e) = shared.prepare_ahead() else {
            continue;
        };
        drop(shared);
        // The appender still writes, growing the file as without preparation; a full disk
        // shows here first. It asks again with every batch: try again a while later.
        tracing::warn!(
            error = &e as &dyn std::error::Error,
            "could not prepare the commit log ahead of the appender"
        );
        let wake = lock(&signal.wake);
        let (wake, _) = signal
            .cv
            .wait_timeout_while(wake, RETRY_AFTER_FAILURE, |w| !w.stop)
            .unwrap_or_else(|e| e.into_inner());
        if wake.stop {
            return;
        }
    }
}
