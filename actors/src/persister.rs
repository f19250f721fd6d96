//! The Persister: a timer that asks a target to persist on an interval and, at shutdown, runs
//! one last persist and waits for it. The consumer's offset store and the broker's offset-table
//! flush are both driven by this one actor type; each answers with its own error type `E`, which
//! the persister only logs and hands to whoever stops it.

use crate::quit::Quit;
use actix::prelude::*;
use std::error::Error;
use std::marker::PhantomData;
use std::time::Duration;

/// Sent to the target on every tick and once more at shutdown; the target answers with its own
/// error type.
pub struct PersistNow<E>(PhantomData<fn() -> E>);

impl<E> PersistNow<E> {
    pub fn new() -> Self {
        PersistNow(PhantomData)
    }
}

impl<E> Default for PersistNow<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: 'static> Message for PersistNow<E> {
    type Result = Result<(), E>;
}

/// Why a persist failed.
#[derive(Debug, thiserror::Error)]
pub enum PersistError<E> {
    #[error("{target} failed to persist")]
    Target {
        target: &'static str,
        #[source]
        source: E,
    },
    #[error("{target} is unavailable")]
    TargetUnavailable {
        target: &'static str,
        #[source]
        source: MailboxError,
    },
}

impl<E: Error + 'static> PersistError<E> {
    fn of(target: &'static str, outcome: Result<Result<(), E>, MailboxError>) -> Result<(), Self> {
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(source)) => Err(PersistError::Target { target, source }),
            Err(source) => Err(PersistError::TargetUnavailable { target, source }),
        }
    }
}

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "PersisterSnapshot")]
pub struct Observe;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PersisterSnapshot {
    pub ticks: u64,
    pub failures: u64,
    pub stopped: bool,
}

pub struct Persister<E: Send + 'static> {
    name: &'static str,
    interval: Duration,
    target: Recipient<PersistNow<E>>,
    snapshot: PersisterSnapshot,
    // Ticks overlap when a persist is slower than the interval; skipping keeps one in flight.
    in_flight: bool,
}

impl<E: Error + Send + 'static> Persister<E> {
    pub fn new(name: &'static str, interval: Duration, target: Recipient<PersistNow<E>>) -> Self {
        Persister {
            name,
            interval,
            target,
            snapshot: PersisterSnapshot::default(),
            in_flight: false,
        }
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.in_flight || self.snapshot.stopped {
            return;
        }
        self.in_flight = true;
        let name = self.name;
        self.target
            .send(PersistNow::new())
            .into_actor(self)
            .map(move |outcome, act, _| {
                act.in_flight = false;
                act.snapshot.ticks += 1;
                if let Err(error) = PersistError::of(name, outcome) {
                    act.snapshot.failures += 1;
                    tracing::warn!(
                        persister = name,
                        error = &error as &dyn Error,
                        "periodic persist failed"
                    );
                }
            })
            .wait(ctx);
    }
}

impl<E: Error + Send + 'static> Actor for Persister<E> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(self.interval, |act, ctx| act.tick(ctx));
    }
}

/// Stops the timer, runs a final persist, waits for it and stops. Answers the final persist's
/// outcome.
impl<E: Error + Send + 'static> Handler<Quit<Result<(), PersistError<E>>>> for Persister<E> {
    type Result = ResponseActFuture<Self, Result<(), PersistError<E>>>;

    fn handle(
        &mut self,
        _: Quit<Result<(), PersistError<E>>>,
        _: &mut Self::Context,
    ) -> Self::Result {
        self.snapshot.stopped = true;
        let name = self.name;
        Box::pin(self.target.send(PersistNow::new()).into_actor(self).map(
            move |outcome, act, ctx| {
                let outcome = PersistError::of(name, outcome);
                if let Err(error) = &outcome {
                    act.snapshot.failures += 1;
                    tracing::error!(
                        persister = name,
                        error = error as &dyn Error,
                        "final persist at shutdown failed"
                    );
                }
                ctx.stop();
                outcome
            },
        ))
    }
}

impl<E: Error + Send + 'static> Handler<Observe> for Persister<E> {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.snapshot.clone())
    }
}
