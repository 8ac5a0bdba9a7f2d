//! Memory budgets: how many payload bytes one connection, and the whole
//! server, may hold for requests in flight.
//!
//! This module owns two counters and nothing else:
//! - [`ConnBudget`], one per connection, counts the bytes its requests claim
//!   (a READ's or WRITE's length) from the moment the request is read until
//!   its reply is sent. The connection's reading thread takes the bytes
//!   *before* it reads a payload or hands a READ to a worker, and waits while
//!   they are used up: a client that does not read its replies stops being
//!   read (back-pressure) and holds at most this bound.
//! - [`ServerBudget`], one per server, counts the bytes of payload buffers
//!   that exist (lent to a request, or kept for reuse) over all connections.
//!   A buffer is only allocated after its bytes are granted, so no client's
//!   claim sizes memory before a budget admits it.
//!
//! Fairness of the server-wide budget: a caller that cannot be served at
//! once takes a ticket and waits its turn in arrival order (first come,
//! first served); nobody, not even a small request, overtakes a waiter. So a
//! waiting connection gets its bytes as soon as the bytes ahead of it are
//! returned, however many other clients keep asking. Bytes come back when
//! replies are sent; a connection whose replies make no progress for
//! `Config::stall_timeout` while someone waits here is closed by its own
//! sender (see `transmission`), which returns everything it held. So a slow
//! reader slows itself, and a reader that stopped holds memory others need
//! for at most the stall timeout.
//!
//! Locks: each budget has one mutex, a leaf: nothing is taken while holding
//! it. It knows nothing of sockets or the protocol.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

/// What the budgets of a server have seen, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetStats {
    /// The server-wide bound, in bytes.
    pub limit: u64,
    /// Bytes of payload buffers that exist now, over all connections.
    pub in_use: u64,
    /// The most `in_use` has been.
    pub peak: u64,
    /// Times a buffer had to wait for the server-wide budget.
    pub server_waits: u64,
    /// Times a connection stopped reading requests because its own bound
    /// was used up (its replies had not drained).
    pub connection_waits: u64,
    /// Connections closed because their replies made no progress for the
    /// stall timeout while others waited for memory.
    pub stalled_closed: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The server-wide budget: bytes of payload buffers over all connections,
/// granted first come, first served.
#[derive(Debug)]
pub(crate) struct ServerBudget {
    limit: u64,
    state: Mutex<Queue>,
    turn: Condvar,
    peak: AtomicU64,
    server_waits: AtomicU64,
    connection_waits: AtomicU64,
    stalled_closed: AtomicU64,
}

#[derive(Debug)]
struct Queue {
    avail: u64,
    /// The next ticket to hand out.
    next: u64,
    /// The ticket whose turn it is.
    serving: u64,
}

impl Queue {
    fn waiting(&self) -> u64 {
        self.next - self.serving
    }
}

impl ServerBudget {
    /// A budget of `limit` bytes.
    pub(crate) fn new(limit: u64) -> ServerBudget {
        ServerBudget {
            limit,
            state: Mutex::new(Queue {
                avail: limit,
                next: 0,
                serving: 0,
            }),
            turn: Condvar::new(),
            peak: AtomicU64::new(0),
            server_waits: AtomicU64::new(0),
            connection_waits: AtomicU64::new(0),
            stalled_closed: AtomicU64::new(0),
        }
    }

    /// A budget no request ever waits for (the fuzzer's).
    pub(crate) fn unlimited() -> ServerBudget {
        ServerBudget::new(u64::MAX / 2)
    }

    fn note_peak(&self, q: &Queue) {
        self.peak.fetch_max(self.limit - q.avail, Ordering::Relaxed);
    }

    /// Takes `n` bytes if they are free and nobody is waiting.
    pub(crate) fn try_acquire(&self, n: u64) -> bool {
        let mut q = lock(&self.state);
        if q.waiting() == 0 && q.avail >= n {
            q.avail -= n;
            self.note_peak(&q);
            return true;
        }
        false
    }

    /// Waits for `n` bytes in arrival order and takes them. `n` is at most
    /// the limit (the server raises its limit to one connection's bound).
    pub(crate) fn acquire(&self, n: u64) {
        debug_assert!(n <= self.limit);
        let mut q = lock(&self.state);
        if q.waiting() == 0 && q.avail >= n {
            q.avail -= n;
            self.note_peak(&q);
            return;
        }
        self.server_waits.fetch_add(1, Ordering::Relaxed);
        let ticket = q.next;
        q.next += 1;
        while q.serving != ticket || q.avail < n {
            q = self.turn.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        q.avail -= n;
        q.serving += 1;
        self.note_peak(&q);
        drop(q);
        // The next ticket may be servable with what is left.
        self.turn.notify_all();
    }

    /// Gives `n` bytes back.
    pub(crate) fn release(&self, n: u64) {
        if n == 0 {
            return;
        }
        let mut q = lock(&self.state);
        q.avail += n;
        debug_assert!(q.avail <= self.limit);
        let waiting = q.waiting() > 0;
        drop(q);
        if waiting {
            self.turn.notify_all();
        }
    }

    /// Whether anyone waits for bytes now.
    pub(crate) fn has_waiters(&self) -> bool {
        lock(&self.state).waiting() > 0
    }

    /// Counts a connection that stopped reading for its own bound.
    pub(crate) fn count_connection_wait(&self) {
        self.connection_waits.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection closed for stalled replies.
    pub(crate) fn count_stalled_close(&self) {
        self.stalled_closed.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot of the counters.
    pub(crate) fn stats(&self) -> BudgetStats {
        let in_use = self.limit - lock(&self.state).avail;
        BudgetStats {
            limit: self.limit,
            in_use,
            peak: self.peak.load(Ordering::Relaxed),
            server_waits: self.server_waits.load(Ordering::Relaxed),
            connection_waits: self.connection_waits.load(Ordering::Relaxed),
            stalled_closed: self.stalled_closed.load(Ordering::Relaxed),
        }
    }
}

/// One connection's budget: bytes its requests claim until their replies
/// are sent.
pub(crate) struct ConnBudget<'s> {
    state: Mutex<ConnState>,
    freed: Condvar,
    server: &'s ServerBudget,
}

struct ConnState {
    avail: u64,
    /// Threads asleep on `freed` (the reading thread, or none): a release
    /// wakes them only if there are any (a wake-up is a system call even
    /// with nobody asleep, and every reply releases).
    sleepers: usize,
}

impl<'s> ConnBudget<'s> {
    /// A budget of `total` bytes; waits are counted in `server`'s stats.
    pub(crate) fn new(total: u64, server: &'s ServerBudget) -> ConnBudget<'s> {
        ConnBudget {
            state: Mutex::new(ConnState {
                avail: total,
                sleepers: 0,
            }),
            freed: Condvar::new(),
            server,
        }
    }

    /// Waits until `n` bytes are free and takes them. `n` never exceeds the
    /// total (requests are capped at `max_request <= budget`).
    pub(crate) fn acquire(&self, n: u64) {
        let mut s = lock(&self.state);
        if s.avail < n {
            self.server.count_connection_wait();
        }
        while s.avail < n {
            s.sleepers += 1;
            s = self.freed.wait(s).unwrap_or_else(|e| e.into_inner());
            s.sleepers -= 1;
        }
        s.avail -= n;
    }

    /// Gives `n` bytes back.
    pub(crate) fn release(&self, n: u64) {
        if n == 0 {
            return;
        }
        let mut s = lock(&self.state);
        s.avail += n;
        let wake = s.sleepers > 0;
        drop(s);
        if wake {
            self.freed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn waiters_are_served_in_arrival_order() {
        let b = Arc::new(ServerBudget::new(100));
        b.acquire(100);
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        // A big request first, then small ones: the small ones do not
        // overtake it even when their bytes would fit.
        for (i, n) in [(0, 80u64), (1, 10), (2, 10)] {
            let (b2, order) = (b.clone(), order.clone());
            threads.push(std::thread::spawn(move || {
                b2.acquire(n);
                lock(&order).push(i);
            }));
            while b.stats().server_waits < i + 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        b.release(30);
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            lock(&order).is_empty(),
            "nobody overtakes the 80-byte waiter"
        );
        assert!(b.has_waiters());
        assert!(!b.try_acquire(1), "a newcomer queues behind the waiters");
        // 80 bytes free: exactly the first waiter's; the small ones behind
        // it still wait.
        b.release(50);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while lock(&order).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the first waiter never ran"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(*lock(&order), vec![0], "the first in line is served first");
        b.release(20);
        for t in threads {
            t.join().unwrap();
        }
        // The two small ones were served together; which recorded first is
        // up to the scheduler.
        let mut after = lock(&order)[1..].to_vec();
        after.sort_unstable();
        assert_eq!(after, vec![1, 2]);
        let s = b.stats();
        assert_eq!((s.in_use, s.peak, s.server_waits), (100, 100, 3));
        assert!(!b.has_waiters());
    }

    #[test]
    fn a_connection_budget_waits_for_its_own_releases() {
        let server = ServerBudget::new(1000);
        let c = ConnBudget::new(10, &server);
        c.acquire(10);
        std::thread::scope(|s| {
            let t = s.spawn(|| c.acquire(4));
            std::thread::sleep(Duration::from_millis(20));
            assert!(!t.is_finished());
            c.release(4);
            t.join().unwrap();
        });
        assert_eq!(server.stats().connection_waits, 1);
    }
}
