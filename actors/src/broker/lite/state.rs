//! The broker's lite state, apart from the requests that use it (`super`), so the broker's
//! handle can hold it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use tokio::sync::Notify;

use crate::logic::lite::LiteSubscriptions;

/// The broker's lite state: every client's subscription, and a wake-up per client for a receive
/// waiting while its subscription changes.
#[derive(Default)]
pub(crate) struct LiteState {
    pub(super) subscriptions: RefCell<LiteSubscriptions>,
    pub(super) wakes: RefCell<HashMap<String, Rc<Notify>>>,
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
}
