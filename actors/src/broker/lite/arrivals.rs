//! Hears of every append from the message store and marks the lite topics that took a message
//! ready for their subscribers, so a waiting lite receive wakes and looks only there.

use std::rc::Rc;
use std::time::Duration;

use actix::prelude::*;

use super::state::LiteState;
use crate::broker::long_poll::NotifyArrivals;
use crate::broker::BrokerClock;
use crate::logic::lite::split_lmq;
use crate::quit::Quit;

/// Notices queue here; one is a few bytes and handled in a hash lookup.
const MAILBOX_CAPACITY: usize = 1 << 16;

pub struct LiteArrivals {
    lite: Rc<LiteState>,
    /// How often every subscribed lite topic is marked ready, which covers a notice the store
    /// dropped at a full mailbox (an arrival is then received late, never lost).
    sweep: Duration,
    clock: BrokerClock,
}

impl LiteArrivals {
    pub(crate) fn new(lite: Rc<LiteState>, sweep: Duration, clock: BrokerClock) -> Self {
        LiteArrivals { lite, sweep, clock }
    }

    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
}

impl Actor for LiteArrivals {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        ctx.run_interval(self.sweep, |this, _| {
            this.lite.mark_all_ready();
            // Batches come due whether or not a receive runs to take them (an idle consumer's
            // would otherwise stay in memory).
            this.lite.mark_due_ready(this.now_ms());
        });
    }
}

impl Handler<NotifyArrivals> for LiteArrivals {
    type Result = ();

    fn handle(&mut self, msg: NotifyArrivals, _: &mut Self::Context) {
        for arrival in &msg.queues {
            if let Some((parent, lite)) = split_lmq(&arrival.topic) {
                self.lite.mark_ready(parent, lite);
            }
        }
    }
}

impl Handler<Quit> for LiteArrivals {
    type Result = ();

    fn handle(&mut self, _: Quit, ctx: &mut Self::Context) {
        ctx.stop();
    }
}
