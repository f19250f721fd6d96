//! One way to tell tasks to end: a [`Stop`] held by whoever owns the tasks, and any number of
//! [`Stopped`] clones held by the tasks themselves (accept loops, connections, the gRPC and HTTP
//! servers, the console's sampler, the broker links).
//!
//! A stop is a flag that only goes up: a task that looks late still sees it. Dropping the
//! [`Stop`] raises it too, so a server dropped without its `shutdown` still ends its tasks.
//! [`Tasks`] pairs a stop with the tasks it ends, for the owners that wait for them.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, error};

/// How long a shutdown with a grace waits for open calls (a long poll, a Telemetry stream, a
/// console's live tail) before it aborts them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The owner's end: raises the stop for every [`Stopped`] made from it.
#[derive(Debug)]
pub struct Stop {
    flag: watch::Sender<bool>,
}

/// A task's end: completes [`Stopped::wait`] once the stop is raised. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Stopped {
    flag: watch::Receiver<bool>,
}

impl Stop {
    pub fn new() -> Stop {
        Stop {
            flag: watch::Sender::new(false),
        }
    }

    /// A new task's end of this stop.
    pub fn stopped(&self) -> Stopped {
        Stopped {
            flag: self.flag.subscribe(),
        }
    }

    pub fn stop(&self) {
        self.flag.send_replace(true);
    }

    pub fn is_stopped(&self) -> bool {
        *self.flag.borrow()
    }
}

impl Default for Stop {
    fn default() -> Self {
        Stop::new()
    }
}

impl Drop for Stop {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Stopped {
    /// Completes once the stop is raised (or its [`Stop`] is gone).
    pub async fn wait(&self) {
        until_stopped(&mut self.flag.clone()).await;
    }

    pub fn is_stopped(&self) -> bool {
        *self.flag.borrow()
    }
}

/// Completes once `flag` is true or its sender is gone. Holds no borrow of the flag when it
/// returns, so the caller's future stays `Send`.
pub async fn until_stopped(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|stopped| *stopped).await;
}

/// A [`Stop`] with the tasks it ends; dropping it raises the stop without waiting.
#[derive(Debug)]
pub struct Tasks {
    /// Named in the logs: "remoting server", "grpc server", ...
    what: &'static str,
    stop: Stop,
    running: Vec<JoinHandle<()>>,
}

impl Tasks {
    pub fn new(what: &'static str) -> Tasks {
        Tasks {
            what,
            stop: Stop::new(),
            running: Vec::new(),
        }
    }

    /// The end to give a task (or a connection) that must stop with these.
    pub fn stopped(&self) -> Stopped {
        self.stop.stopped()
    }

    /// Waits for `task` at shutdown.
    pub fn add(&mut self, task: JoinHandle<()>) {
        self.running.push(task);
    }

    /// Raises the stop and waits for every task to end.
    pub async fn shutdown(mut self) {
        self.stop.stop();
        for task in std::mem::take(&mut self.running) {
            if let Err(e) = task.await {
                error!(what = self.what, error = %e, "task failed");
            }
        }
    }

    /// Raises the stop and waits up to `grace` for each task, then aborts it: a call that does
    /// not notice the stop (a parked long poll inside a library's task) must not hold the node.
    pub async fn shutdown_within(mut self, grace: Duration) {
        self.stop.stop();
        for task in std::mem::take(&mut self.running) {
            let abort = task.abort_handle();
            match tokio::time::timeout(grace, task).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => error!(what = self.what, error = %e, "task failed"),
                Err(_) => {
                    debug!(
                        what = self.what,
                        grace_ms = grace.as_millis() as u64,
                        "task still busy at shutdown; aborted"
                    );
                    abort.abort();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_clone_sees_the_stop_even_one_made_after_it() {
        let stop = Stop::new();
        let early = stop.stopped();
        let waiting = tokio::spawn({
            let early = early.clone();
            async move { early.wait().await }
        });
        assert!(!early.is_stopped());
        stop.stop();
        waiting.await.expect("the waiter ends");
        let late = stop.stopped();
        assert!(late.is_stopped());
        late.wait().await;
    }

    #[tokio::test]
    async fn dropping_the_stop_raises_it() {
        let stop = Stop::new();
        let stopped = stop.stopped();
        drop(stop);
        assert!(stopped.is_stopped());
        stopped.wait().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_ignores_the_stop_is_aborted_after_the_grace() {
        let mut tasks = Tasks::new("test");
        let stopped = tasks.stopped();
        tasks.add(tokio::spawn(async move { stopped.wait().await }));
        tasks.add(tokio::spawn(std::future::pending()));
        let started = tokio::time::Instant::now();
        tasks.shutdown_within(Duration::from_secs(2)).await;
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }
}
