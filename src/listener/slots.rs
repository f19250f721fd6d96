//! Places under the node's connection cap, and who gives theirs up when the cap is reached.
//!
//! One cap covers every port and door (remoting, gRPC, HTTP): each descriptor a connection holds
//! is one the store cannot use. A cap alone lets anyone who opens enough idle connections
//! lock every other client out, so at the cap a newcomer takes the place of a connection that is
//! doing nothing: first one that never completed a request (an idle or trickling flood, a frame
//! that never ends), oldest first, then one idle for at least [`MIN_IDLE_TO_EVICT`], longest
//! idle first; one part-way through a large frame goes last. A connection with a request in
//! progress is never chosen. Only when none qualifies is the newcomer refused.

use std::collections::HashMap;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tracing::warn;

/// A connection that has completed requests must have been quiet this long before a newcomer
/// may take its place: a client between two requests is not idle.
pub const MIN_IDLE_TO_EVICT: Duration = Duration::from_secs(1);

/// How often refusals and evictions at the cap are logged while they last.
pub const CAP_LOG_EVERY: Duration = Duration::from_secs(10);

/// How far past the cap admissions may run while the connections chosen to make room close
/// (each closes as soon as its task is polled, so this is reached only by a burst).
const EVICTION_SLACK: usize = 64;

/// The connections a node has open on all its listeners, against one cap.
#[derive(Clone, Debug)]
pub struct ConnectionSlots {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    max: usize,
    epoch: Instant,
    next_id: AtomicU64,
    live: Mutex<HashMap<u64, Arc<SlotState>>>,
    open: AtomicUsize,
    evictions: AtomicU64,
    log: Mutex<CapLog>,
}

/// One connection's place under the cap, given back when dropped (with the connection).
#[derive(Debug)]
pub struct ConnectionSlot {
    state: Arc<SlotState>,
    inner: Arc<Inner>,
    made_room: bool,
}

/// What the cap knows of a connection: when it last did something and whether it is busy.
#[derive(Debug)]
struct SlotState {
    id: u64,
    /// Milliseconds since the slots' epoch.
    opened_ms: u64,
    last_active_ms: AtomicU64,
    requests_done: AtomicU64,
    in_flight: AtomicUsize,
    /// Reading a frame larger than a connection's free allowance, on the shared budget.
    receiving_large_frame: AtomicBool,
    evicted: AtomicBool,
    /// The connection's reader, woken when the connection is chosen to make room.
    reader: Mutex<Option<Waker>>,
}

impl ConnectionSlots {
    pub fn new(max: usize) -> ConnectionSlots {
        ConnectionSlots {
            inner: Arc::new(Inner {
                max: max.max(1),
                epoch: Instant::now(),
                next_id: AtomicU64::new(0),
                live: Mutex::new(HashMap::new()),
                open: AtomicUsize::new(0),
                evictions: AtomicU64::new(0),
                log: Mutex::new(CapLog::default()),
            }),
        }
    }

    /// A place for one more connection. At the cap, an idle connection is closed to make room
    /// ([`ConnectionSlot::made_room`]); `None` when every connection is busy or recently
    /// active. Both are logged (the first, then one line per [`CAP_LOG_EVERY`] with counts).
    pub fn take(&self, peer: SocketAddr) -> Option<ConnectionSlot> {
        let inner = &self.inner;
        let now = inner.now_ms();
        let mut live = lock(&inner.live);
        let open = inner.open.load(Ordering::Acquire);
        let mut made_room = false;
        if open >= inner.max {
            let victim = (open < inner.max + EVICTION_SLACK)
                .then(|| {
                    pick_victim(
                        live.values().map(|s| (s.id, s.candidate())),
                        now,
                        MIN_IDLE_TO_EVICT.as_millis() as u64,
                    )
                })
                .flatten()
                .and_then(|id| live.get(&id));
            let Some(victim) = victim else {
                lock(&inner.log).refused(peer, open, inner.max);
                return None;
            };
            victim.evict();
            inner.evictions.fetch_add(1, Ordering::Relaxed);
            lock(&inner.log).evicted(peer, open, inner.max);
            made_room = true;
        }
        let state = Arc::new(SlotState {
            id: inner.next_id.fetch_add(1, Ordering::Relaxed),
            opened_ms: now,
            last_active_ms: AtomicU64::new(now),
            requests_done: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            receiving_large_frame: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            reader: Mutex::new(None),
        });
        live.insert(state.id, state.clone());
        inner.open.fetch_add(1, Ordering::AcqRel);
        Some(ConnectionSlot {
            state,
            inner: inner.clone(),
            made_room,
        })
    }

    /// Connections open now (those chosen to make room count until they have closed).
    pub fn open(&self) -> usize {
        self.inner.open.load(Ordering::Acquire)
    }

    pub fn max(&self) -> usize {
        self.inner.max
    }

    /// Connections closed so far to make room for a newcomer.
    pub fn evictions(&self) -> u64 {
        self.inner.evictions.load(Ordering::Relaxed)
    }
}

impl Inner {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

impl ConnectionSlot {
    /// Whether taking this place closed an idle connection.
    pub fn made_room(&self) -> bool {
        self.made_room
    }

    /// The connection received bytes.
    pub fn mark_read(&self) {
        self.state
            .last_active_ms
            .store(self.inner.now_ms(), Ordering::Relaxed);
    }

    /// The connection sent something that counts as a request (gRPC and HTTP: any bytes, having
    /// no request boundary where the cap sees the connection).
    pub fn mark_active(&self) {
        self.state.requests_done.fetch_add(1, Ordering::Relaxed);
        self.mark_read();
    }

    /// A request arrived whole; the connection is busy until the guard drops.
    pub fn request_started(&self) -> RequestInProgress {
        self.state.in_flight.fetch_add(1, Ordering::AcqRel);
        self.state.requests_done.fetch_add(1, Ordering::Relaxed);
        self.mark_read();
        RequestInProgress {
            state: self.state.clone(),
            epoch: self.inner.epoch,
        }
    }

    /// The connection holds part of the shared budget for unfinished frames (`true`) or gave it
    /// back (`false`).
    pub fn receiving_large_frame(&self, receiving: bool) {
        self.state
            .receiving_large_frame
            .store(receiving, Ordering::Relaxed);
    }

    /// Ready once the connection has been chosen to make room; its reader then closes it.
    pub fn poll_evicted(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.state.evicted.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        // Polled with every read of the connection: the waker is cloned only when it changed.
        let mut reader = lock(&self.state.reader);
        if !reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *reader = Some(cx.waker().clone());
        }
        drop(reader);
        // Checked again: an eviction between the first check and the registration woke nothing.
        if self.state.evicted.load(Ordering::Acquire) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Completes once the connection has been chosen to make room.
    pub async fn evicted(&self) {
        poll_fn(|cx| self.poll_evicted(cx)).await
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        lock(&self.inner.live).remove(&self.state.id);
        self.inner.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request being handled; the connection is not idle while it lives.
#[derive(Debug)]
pub struct RequestInProgress {
    state: Arc<SlotState>,
    epoch: Instant,
}

impl Drop for RequestInProgress {
    fn drop(&mut self) {
        self.state
            .last_active_ms
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.state.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl SlotState {
    fn candidate(&self) -> Candidate {
        Candidate {
            opened_ms: self.opened_ms,
            last_active_ms: self.last_active_ms.load(Ordering::Relaxed),
            requests_done: self.requests_done.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Acquire),
            receiving_large_frame: self.receiving_large_frame.load(Ordering::Relaxed),
            evicted: self.evicted.load(Ordering::Acquire),
        }
    }

    fn evict(&self) {
        self.evicted.store(true, Ordering::Release);
        if let Some(reader) = lock(&self.reader).take() {
            reader.wake();
        }
    }
}

/// What the choice of a connection to close looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub opened_ms: u64,
    pub last_active_ms: u64,
    pub requests_done: u64,
    pub in_flight: usize,
    pub receiving_large_frame: bool,
    pub evicted: bool,
}

/// The connection to close for a newcomer: one that never completed a request although it has
/// had `min_idle_ms` to, oldest first; else one idle for at least `min_idle_ms`, longest idle
/// first; else one that has not yet completed a request, oldest first (under a flood faster
/// than the cap, a client whose first request is still on its way is the last to go). A
/// connection receiving a large frame goes after all of those, in the same order among its
/// kind: its place on the shared budget would pass to the next such frame, which the node would
/// read only to close it in turn (a flood of half-sent large frames otherwise keeps the node
/// copying and zeroing megabytes while newcomers wait). Never one with a request in progress or
/// already chosen.
pub(crate) fn pick_victim(
    candidates: impl Iterator<Item = (u64, Candidate)>,
    now_ms: u64,
    min_idle_ms: u64,
) -> Option<u64> {
    candidates
        .filter(|(_, c)| !c.evicted && c.in_flight == 0)
        .filter_map(|(id, c)| {
            let never_active = c.requests_done == 0;
            let since = if never_active {
                c.opened_ms
            } else {
                c.last_active_ms
            };
            let quiet_long_enough = now_ms.saturating_sub(since) >= min_idle_ms;
            let rank = match (never_active, quiet_long_enough) {
                (true, true) => 0,
                (false, true) => 1,
                (true, false) => 2,
                (false, false) => return None,
            };
            let rank = if c.receiving_large_frame {
                rank + 3
            } else {
                rank
            };
            Some(((rank, since, id), id))
        })
        .min_by_key(|(key, _)| *key)
        .map(|(_, id)| id)
}

#[derive(Debug, Default)]
struct CapLog {
    last: Option<Instant>,
    refused: u64,
    evicted: u64,
}

impl CapLog {
    fn due(&mut self) -> bool {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < CAP_LOG_EVERY)
        {
            return false;
        }
        self.last = Some(now);
        true
    }

    fn refused(&mut self, peer: SocketAddr, open: usize, max: usize) {
        self.refused += 1;
        if self.due() {
            warn!(peer = %peer, open_connections = open, max_connections = max, refused = self.refused, evicted = self.evicted, "connection refused: open connections at the cap and none idle");
            (self.refused, self.evicted) = (0, 0);
        }
    }

    fn evicted(&mut self, peer: SocketAddr, open: usize, max: usize) {
        self.evicted += 1;
        if self.due() {
            warn!(peer = %peer, open_connections = open, max_connections = max, refused = self.refused, evicted = self.evicted, "open connections at the cap: closing the longest-idle connection for a newcomer");
            (self.refused, self.evicted) = (0, 0);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 1))
    }

    fn candidate(opened_ms: u64, last_active_ms: u64, requests_done: u64) -> Candidate {
        Candidate {
            opened_ms,
            last_active_ms,
            requests_done,
            in_flight: 0,
            receiving_large_frame: false,
            evicted: false,
        }
    }

    #[test]
    fn a_connection_receiving_a_large_frame_goes_after_every_other_candidate() {
        let receiving = Candidate {
            receiving_large_frame: true,
            ..candidate(0, 0, 0)
        };
        let picked = pick_victim(
            [
                (1, receiving),                  // oldest, never completed a request
                (2, candidate(9_900, 9_900, 0)), // opened 100 ms ago
            ]
            .into_iter(),
            10_000,
            1_000,
        );
        assert_eq!(picked, Some(2));
        let younger = Candidate {
            receiving_large_frame: true,
            ..candidate(5_000, 5_000, 0)
        };
        assert_eq!(
            pick_victim([(1, younger), (2, receiving)].into_iter(), 10_000, 1_000),
            Some(2),
            "among connections receiving large frames, the oldest goes first"
        );
    }

    #[test]
    fn a_connection_that_never_completed_a_request_goes_first_oldest_first() {
        let picked = pick_victim(
            [
                (1, candidate(0, 0, 5)),         // idle for 10 s after requests
                (2, candidate(8_000, 9_500, 0)), // never completed a request, younger
                (3, candidate(5_000, 9_900, 0)), // never completed a request, trickling
            ]
            .into_iter(),
            10_000,
            1_000,
        );
        assert_eq!(picked, Some(3));
    }

    #[test]
    fn a_client_whose_first_request_is_on_its_way_goes_after_idle_ones() {
        let candidates = [
            (1, candidate(9_800, 9_800, 0)), // opened 200 ms ago, no request yet
            (2, candidate(0, 8_000, 3)),     // idle for 2 s after requests
        ];
        assert_eq!(pick_victim(candidates.into_iter(), 10_000, 1_000), Some(2));
        let only_fresh = [
            (1, candidate(9_900, 9_900, 0)),
            (2, candidate(9_800, 9_800, 0)),
        ];
        assert_eq!(pick_victim(only_fresh.into_iter(), 10_000, 1_000), Some(2));
    }

    #[test]
    fn among_active_connections_the_longest_idle_goes_and_a_recent_one_stays() {
        let candidates = [(1, candidate(0, 8_000, 2)), (2, candidate(0, 3_000, 9))];
        assert_eq!(pick_victim(candidates.into_iter(), 10_000, 1_000), Some(2));
        let recent = [(1, candidate(0, 9_500, 2))];
        assert_eq!(pick_victim(recent.into_iter(), 10_000, 1_000), None);
    }

    #[test]
    fn a_busy_or_already_chosen_connection_is_never_picked() {
        let busy = Candidate {
            in_flight: 1,
            ..candidate(0, 0, 0)
        };
        let chosen = Candidate {
            evicted: true,
            ..candidate(0, 0, 0)
        };
        assert_eq!(
            pick_victim([(1, busy), (2, chosen)].into_iter(), 10_000, 1_000),
            None
        );
    }

    #[test]
    fn slots_are_shared_by_every_clone_and_given_back_when_a_connection_ends() {
        let remoting = ConnectionSlots::new(2);
        let grpc = remoting.clone();
        let first = remoting.take(peer());
        let second = grpc.take(peer());
        assert!(first.is_some() && second.is_some());
        assert_eq!(remoting.open(), 2);
        drop(second);
        assert_eq!(grpc.open(), 1);
        assert!(remoting.take(peer()).is_some());
    }

    #[test]
    fn at_the_cap_a_newcomer_takes_the_place_of_a_silent_connection() {
        let slots = ConnectionSlots::new(2);
        let active = slots.take(peer()).expect("room");
        let busy = active.request_started();
        let silent = slots.take(peer()).expect("room");
        let newcomer = slots.take(peer()).expect("room made");
        assert!(newcomer.made_room());
        assert_eq!(slots.evictions(), 1);
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(
            silent.poll_evicted(&mut cx).is_ready(),
            "the silent one is told to close"
        );
        assert!(
            active.poll_evicted(&mut cx).is_pending(),
            "the busy one stays"
        );
        // The chosen one still counts until it closes, and is not chosen twice; the busy one
        // and the newcomer (which has not completed a request, but is the youngest) remain.
        drop(silent);
        assert_eq!(slots.open(), 2);
        drop(busy);
        let next = slots
            .take(peer())
            .expect("the newcomer is the one never active");
        assert!(newcomer.poll_evicted(&mut cx).is_ready());
        assert!(active.poll_evicted(&mut cx).is_pending());
        drop(next);
    }

    #[test]
    fn with_every_connection_busy_a_newcomer_is_refused() {
        let slots = ConnectionSlots::new(1);
        let only = slots.take(peer()).expect("room");
        let _busy = only.request_started();
        assert!(slots.take(peer()).is_none());
        assert_eq!(slots.evictions(), 0);
    }
}
