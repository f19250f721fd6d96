//! The hop from `Send` tasks (the gRPC server's calls, the HTTP console's requests) onto the
//! broker's arbiter.
//!
//! [`BrokerHandle`] is `Rc`-based and lives on the arbiter that opened the node; tonic runs each
//! call in a `Send` task. [`BrokerLink::call`] sends a closure over a bounded channel to the loop
//! [`spawn`] starts on the arbiter, which runs it as a local task with the handle and sends its
//! result back. A full channel answers at once (the client is told the broker is busy) rather
//! than queueing without bound; a long poll is a parked local task, not a slot in the channel.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tracing::error;

use skiff_actors::broker::BrokerHandle;

use crate::listener::Tasks;

type Job = Box<dyn FnOnce(BrokerHandle) -> Pin<Box<dyn Future<Output = ()>>> + Send>;

/// Calls waiting for the arbiter, across all callers of one link, before the broker answers busy.
pub const DEFAULT_QUEUE_CAPACITY: usize = 4096;

/// Why a call did not reach the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("the broker is busy; retry later")]
    Busy,
    #[error("the broker is shutting down")]
    Stopped,
}

/// The `Send + Sync` half: how handlers on other tasks call the broker.
#[derive(Clone)]
pub struct BrokerLink {
    jobs: mpsc::Sender<Job>,
}

impl BrokerLink {
    /// Runs `call` with the broker handle on its arbiter and answers its result.
    pub async fn call<T, F, Fut>(&self, call: F) -> Result<T, LinkError>
    where
        F: FnOnce(BrokerHandle) -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        let job: Job = Box::new(move |broker| {
            Box::pin(async move {
                // The caller may have gone (a cancelled RPC); the result is then dropped.
                let _ = answer.send(call(broker).await);
            })
        });
        self.jobs.try_send(job).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => LinkError::Busy,
            mpsc::error::TrySendError::Closed(_) => LinkError::Stopped,
        })?;
        answered.await.map_err(|_| LinkError::Stopped)
    }
}

/// The running loop on the arbiter; [`LinkTask::shutdown`] stops it and every call in flight.
pub struct LinkTask {
    tasks: Tasks,
}

/// Starts the loop on the current arbiter (inside an actix system / `LocalSet`).
pub fn spawn(broker: BrokerHandle, capacity: usize) -> (BrokerLink, LinkTask) {
    let (jobs, mut inbox) = mpsc::channel::<Job>(capacity.max(1));
    let mut tasks = Tasks::new("broker link");
    let stopped = tasks.stopped();
    tasks.add(tokio::task::spawn_local(async move {
        let mut running = JoinSet::new();
        let stop = stopped.wait();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                Some(done) = running.join_next(), if !running.is_empty() => {
                    if let Err(e) = done {
                        if e.is_panic() {
                            error!(error = %e, "broker call panicked");
                        }
                    }
                }
                job = inbox.recv() => match job {
                    Some(job) => {
                        running.spawn_local(job(broker.clone()));
                    }
                    None => break,
                },
            }
        }
        // Parked receives end here: their callers see the broker stopping.
        running.shutdown().await;
    }));
    (BrokerLink { jobs }, LinkTask { tasks })
}

impl LinkTask {
    pub async fn shutdown(self) {
        self.tasks.shutdown().await;
    }
}
