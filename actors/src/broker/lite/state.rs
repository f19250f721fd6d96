//! The broker's lite state, apart from the requests that use it (`super`), so the broker's
//! handle and the actor that hears of lite arrivals can both hold it.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use tokio::sync::Notify;

use crate::logic::lite::LiteSubscriptions;

/// The broker's lite state: every client's subscription and which of its lite topics its next
/// receive looks at, and a wake-up per client for a receive waiting while one becomes ready or
/// its subscription changes.
#[derive(Default)]
pub(crate) struct LiteState {
    pub(super) subscriptions: RefCell<LiteSubscriptions>,
    pub(super) wakes: RefCell<HashMap<String, Rc<Notify>>>,
    /// Lite topics receives looked at, since the start.
    pub(super) looks: Cell<u64>,
}

impl LiteState {
    /// Whether `wake` is still the client's (a client that ended its session has none).
    pub(super) fn is_waking(&self, client_id: &str, wake: &Rc<Notify>) -> bool {
        self.wakes
            .borrow()
            .get(client_id)
            .is_some_and(|w| Rc::ptr_eq(w, wake))
    }

    pub(super) fn wake(&self, client_id: &str) -> Rc<Notify> {
        self.wakes
            .borrow_mut()
            .entry(client_id.to_owned())
            .or_default()
            .clone()
    }

    /// `parent`'s lite topic `lite` may have something to receive: marks it ready for its
    /// subscribers and wakes their waiting receives.
    pub(crate) fn mark_ready(&self, parent: &str, lite: &str) {
        let clients = self.subscriptions.borrow_mut().mark_ready(parent, lite);
        self.wake_clients(clients);
    }

    /// Marks every subscribed lite topic ready (the sweep behind lost arrival notices).
    pub(crate) fn mark_all_ready(&self) {
        let clients = self.subscriptions.borrow_mut().mark_all_ready();
        self.wake_clients(clients);
    }

    /// Marks ready the lite topics whose batches became visible by `now_ms`.
    pub(crate) fn mark_due_ready(&self, now_ms: i64) {
        let clients = self.subscriptions.borrow_mut().mark_due_ready(now_ms);
        self.wake_clients(clients);
    }

    fn wake_clients(&self, clients: Vec<String>) {
        let wakes = self.wakes.borrow();
        for client in clients {
            // A client with no receive yet finds its ready set on its first one.
            if let Some(wake) = wakes.get(&client) {
                wake.notify_one();
            }
        }
    }
}
