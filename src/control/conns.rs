//! The admin listener's open connections, and which one gives way when it is
//! full.
//!
//! A connection is *busy* from the moment hyper hands a complete request head to
//! the service until the response body is done (an event stream stays busy while
//! it streams), and *idle* otherwise: before its first request, and between
//! requests on a keep-alive connection. When a new connection needs a slot and
//! none is free, the idle connection that has been idle longest is told to close
//! ([`Conns::shed_oldest_idle`]), so idle and half-sent connections cannot keep
//! a probe or an operator out; busy ones are never interrupted. The slots
//! themselves are a semaphore in `control::server`.
//!
//! Idle order is a sequence number, not a clock: the entry that became idle
//! first has the smallest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// The registry of open admin connections.
#[derive(Default)]
pub struct Conns {
    inner: Mutex<Inner>,
    /// Woken whenever a connection turns idle after a request: a listener
    /// waiting for a slot may shed it.
    idle_again: Notify,
}

#[derive(Default)]
struct Inner {
    /// Id of the next registered connection.
    next_id: u64,
    /// Last idle-order number handed out.
    seq: u64,
    /// Open connections by id.
    open: HashMap<u64, Entry>,
}

struct Entry {
    /// `Some(n)` while idle: the `n`-th connection to become idle.
    idle_since: Option<u64>,
    /// Requests whose head arrived on it so far.
    served: u64,
    /// Requests being answered (0 or 1 on HTTP/1).
    in_flight: u32,
    /// Told to close already.
    shedding: bool,
    /// Wakes the connection's task to close it.
    shed: Arc<Notify>,
}

/// What a connection told to close should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    /// It never received a request: drop it at once.
    Drop,
    /// It answered requests (or is answering one): close once hyper has it
    /// idle (at once between requests).
    Graceful,
}

/// A registered connection; leaves the registry when dropped.
pub struct ConnHandle {
    conns: Arc<Conns>,
    /// Its id in the registry.
    pub id: u64,
    /// Notified when the connection should close.
    pub shed: Arc<Notify>,
}

impl Drop for ConnHandle {
    fn drop(&mut self) {
        self.conns.lock().open.remove(&self.id);
    }
}

/// One request being answered; the connection turns idle again when the last
/// one is dropped (with the response body, once it has been sent).
pub struct RequestGuard {
    conns: Arc<Conns>,
    id: u64,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let mut g = self.conns.lock();
        g.seq += 1;
        let seq = g.seq;
        let mut idle = false;
        if let Some(e) = g.open.get_mut(&self.id) {
            e.in_flight = e.in_flight.saturating_sub(1);
            if e.in_flight == 0 {
                e.idle_since = Some(seq);
                idle = true;
            }
        }
        drop(g);
        if idle {
            self.conns.idle_again.notify_waiters();
        }
    }
}

impl Conns {
    /// An empty registry.
    pub fn new() -> Arc<Conns> {
        Arc::new(Conns::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a new (idle) connection.
    pub fn register(self: &Arc<Self>) -> ConnHandle {
        let mut g = self.lock();
        g.next_id += 1;
        g.seq += 1;
        let (id, seq) = (g.next_id, g.seq);
        let shed = Arc::new(Notify::new());
        g.open.insert(
            id,
            Entry {
                idle_since: Some(seq),
                served: 0,
                in_flight: 0,
                shedding: false,
                shed: shed.clone(),
            },
        );
        ConnHandle {
            conns: self.clone(),
            id,
            shed,
        }
    }

    /// A request head arrived on connection `id`: busy until the guard drops.
    pub fn request_started(self: &Arc<Self>, id: u64) -> RequestGuard {
        let mut g = self.lock();
        if let Some(e) = g.open.get_mut(&id) {
            e.served += 1;
            e.in_flight += 1;
            e.idle_since = None;
        }
        RequestGuard {
            conns: self.clone(),
            id,
        }
    }

    /// Resolves when a connection turns idle after this is enabled (a
    /// connection registered idle does not count: it was idle when looked at).
    pub fn idle_again(&self) -> tokio::sync::futures::Notified<'_> {
        self.idle_again.notified()
    }

    /// Tells the longest-idle connection to close; false when none is idle.
    pub fn shed_oldest_idle(&self) -> bool {
        let mut g = self.lock();
        let oldest = g
            .open
            .iter_mut()
            .filter(|(_, e)| !e.shedding)
            .filter_map(|(id, e)| e.idle_since.map(|s| (s, *id)))
            .min();
        let Some((_, id)) = oldest else { return false };
        let Some(e) = g.open.get_mut(&id) else {
            return false;
        };
        e.shedding = true;
        e.shed.notify_one();
        true
    }

    /// How connection `id`, told to close, closes now.
    pub fn closing(&self, id: u64) -> Closing {
        match self.lock().open.get(&id) {
            Some(e) if e.served == 0 && e.in_flight == 0 => Closing::Drop,
            Some(_) => Closing::Graceful,
            None => Closing::Drop,
        }
    }

    /// Open connections, and how many of them are idle.
    pub fn counts(&self) -> (usize, usize) {
        let g = self.lock();
        let idle = g.open.values().filter(|e| e.idle_since.is_some()).count();
        (g.open.len(), idle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_idle_connection_is_shed_first_and_busy_ones_never() {
        let c = Conns::new();
        let a = c.register();
        let b = c.register();
        let d = c.register();
        // `a` serves a request and finishes it: idle again, but after `b` and `d`.
        drop(c.request_started(a.id));
        // `b` is answering one.
        let busy = c.request_started(b.id);
        assert_eq!(c.counts(), (3, 2));
        assert!(c.shed_oldest_idle());
        assert_eq!(c.closing(d.id), Closing::Drop, "d never sent a request");
        assert!(c.shed_oldest_idle());
        assert_eq!(c.closing(a.id), Closing::Graceful);
        assert!(!c.shed_oldest_idle(), "only the busy one is left");
        drop(busy);
        assert!(c.shed_oldest_idle());
        drop((a, b, d));
        assert_eq!(c.counts(), (0, 0));
        assert!(!c.shed_oldest_idle());
    }

    #[test]
    fn a_listener_waiting_for_a_slot_hears_of_a_connection_turning_idle() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let c = Conns::new();
        let a = c.register();
        let busy = c.request_started(a.id);
        rt.block_on(async {
            let idle = c.idle_again();
            tokio::pin!(idle);
            idle.as_mut().enable();
            assert!(!c.shed_oldest_idle(), "nothing idle yet");
            drop(busy);
            idle.await;
        });
        assert!(c.shed_oldest_idle());
    }

    #[test]
    fn a_shed_connection_is_woken() {
        let c = Conns::new();
        let a = c.register();
        assert!(c.shed_oldest_idle());
        // The permit is stored: the task sees it whenever it next waits.
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(a.shed.notified());
    }
}
