//! The Persister: a timer that asks a target to persist on an interval and, at shutdown, runs
//! one last persist and waits for it. The consumer's offset store and the broker's offset-table
//! flush are both driven by this one actor type.

use actix::prelude::*;
use std::time::Duration;

/// Sent to the target on every tick and once more at shutdown.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "Result<(), String>")]
pub struct PersistNow;

/// Stops the timer after a final, awaited persist. Answers the final persist's outcome.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "Result<(), String>")]
pub struct StopPersister;

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "PersisterSnapshot")]
pub struct Observe;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PersisterSnapshot {
    pub ticks: u64,
    pub failures: u64,
    pub stopped: bool,
}

pub struct Persister {
    name: &'static str,
    interval: Duration,
    target: Recipient<PersistNow>,
    snapshot: PersisterSnapshot,
    // Ticks overlap when a persist is slower than the interval; skipping keeps one in flight.
    in_flight: bool,
}

impl Persister {
    pub fn new(name: &'static str, interval: Duration, target: Recipient<PersistNow>) -> Self {
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
            .send(PersistNow)
            .into_actor(self)
            .map(move |result, act, _| {
                act.in_flight = false;
                act.snapshot.ticks += 1;
                let failure = match result {
                    Ok(Ok(())) => None,
                    Ok(Err(reason)) => Some(reason),
                    Err(mailbox) => Some(mailbox.to_string()),
                };
                if let Some(reason) = failure {
                    act.snapshot.failures += 1;
                    tracing::warn!(persister = name, %reason, "periodic persist failed");
                }
            })
            .wait(ctx);
    }
}

impl Actor for Persister {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(self.interval, |act, ctx| act.tick(ctx));
    }
}

impl Handler<StopPersister> for Persister {
    type Result = ResponseActFuture<Self, Result<(), String>>;

    fn handle(&mut self, _: StopPersister, _ctx: &mut Self::Context) -> Self::Result {
        self.snapshot.stopped = true;
        let name = self.name;
        Box::pin(self.target.send(PersistNow).into_actor(self).map(
            move |result, act, ctx| {
                let outcome = match result {
                    Ok(outcome) => outcome,
                    Err(mailbox) => Err(mailbox.to_string()),
                };
                if let Err(reason) = &outcome {
                    act.snapshot.failures += 1;
                    tracing::error!(persister = name, %reason, "final persist at shutdown failed");
                }
                ctx.stop();
                outcome
            },
        ))
    }
}

impl Handler<Observe> for Persister {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.snapshot.clone())
    }
}
