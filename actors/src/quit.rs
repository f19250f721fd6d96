//! [`Quit`]: the one control message for "finish the work in hand, persist, stop" (SIGTERM, not
//! SIGKILL), implemented by every actor that has a shutdown of its own.

use actix::Message;
use std::fmt;
use std::marker::PhantomData;

/// Asks an actor to finish the work in hand, persist what must outlive it, and stop. `R` is what
/// the actor answers once it is done: `()` when there is nothing to report, else the outcome of
/// its final persist (or handoff). Each actor documents on its `Handler<Quit<..>>` what "in hand"
/// and "persist" mean for it.
pub struct Quit<R = ()>(PhantomData<fn() -> R>);

impl<R> Quit<R> {
    pub fn new() -> Self {
        Quit(PhantomData)
    }
}

impl<R> Default for Quit<R> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R> fmt::Debug for Quit<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Quit")
    }
}

impl<R: 'static> Message for Quit<R> {
    type Result = R;
}
