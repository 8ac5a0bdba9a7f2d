//! The fork gate: lets `fork` wait until no thread is in the middle of a
//! unit of the region's work, and holds them off until the fork is done,
//! so the child copies no page half-evicted or half brought back and no
//! store lock held.
//!
//! Two classes, frozen in order: the evicting side (the evictor thread and
//! any thread running a hint) first, then the fault side (the handler
//! thread, and program threads serving their own faults). The fault side
//! must run until the evicting side has stopped, because an eviction's
//! `madvise` waits for the handler to read its remove event; and a thread
//! serving its own fault never waits inside the gate for the handler
//! thread or the evictor, which a freeze may have stopped.
//!
//! Lock-free (a count and a flag per side): program threads enter it, and
//! a lock one of them held at the instant of a fork would stay held in the
//! child. Owns the counts and flags; takes no lock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// A side of the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// The evictor thread and hint callers.
    Evict,
    /// The fault handler, and threads serving their own faults.
    Handler,
}

/// The gate.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    frozen: [AtomicBool; 2],
    busy: [AtomicUsize; 2],
}

fn ix(side: Side) -> usize {
    match side {
        Side::Evict => 0,
        Side::Handler => 1,
    }
}

/// How long a waiter sleeps between looks (a fork holds the gate for the
/// time it takes to copy the address space).
const NAP: Duration = Duration::from_micros(50);

fn nap() {
    let t = libc::timespec {
        tv_sec: 0,
        tv_nsec: NAP.as_nanos() as libc::c_long,
    };
    // SAFETY: sleeps; no remaining time wanted. (A plain system call: the
    // fault side enters the gate from a signal handler.)
    unsafe { libc::nanosleep(&t, std::ptr::null_mut()) };
}

impl Gate {
    /// Starts a unit of work on `side`, waiting while it is frozen.
    pub(crate) fn enter(&self, side: Side) {
        let i = ix(side);
        loop {
            // Counted first, then the flag looked at; `freeze` sets the
            // flag first, then looks at the count (both sequentially
            // consistent): one of the two sees the other.
            self.busy[i].fetch_add(1, Ordering::SeqCst);
            if !self.frozen[i].load(Ordering::SeqCst) {
                return;
            }
            self.busy[i].fetch_sub(1, Ordering::SeqCst);
            while self.frozen[i].load(Ordering::SeqCst) {
                nap();
            }
        }
    }

    /// Ends a unit of work on `side`.
    pub(crate) fn leave(&self, side: Side) {
        self.busy[ix(side)].fetch_sub(1, Ordering::SeqCst);
    }

    /// Freezes one side after its units in progress end: the evicting
    /// side first, then the fault side (what runs between the two may
    /// still fault on the region, not evict).
    pub(crate) fn freeze_side(&self, side: Side) {
        let i = ix(side);
        self.frozen[i].store(true, Ordering::SeqCst);
        while self.busy[i].load(Ordering::SeqCst) > 0 {
            nap();
        }
    }

    /// Lets both sides run again (in the parent).
    pub(crate) fn thaw(&self) {
        for f in &self.frozen {
            f.store(false, Ordering::SeqCst);
        }
    }

    /// In a forked child: no thread of the parent's is inside (only the
    /// forking thread was copied, and it was not), and both sides run.
    pub(crate) fn reset(&self) {
        for b in &self.busy {
            b.store(0, Ordering::SeqCst);
        }
        self.thaw();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_freeze_waits_for_units_in_progress_and_holds_off_new_ones() {
        let g = Arc::new(Gate::default());
        let froze = Arc::new(AtomicBool::new(false));
        g.enter(Side::Handler);
        let freezer = {
            let (g, froze) = (Arc::clone(&g), Arc::clone(&froze));
            std::thread::spawn(move || {
                g.freeze_side(Side::Evict);
                g.freeze_side(Side::Handler);
                froze.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !froze.load(Ordering::SeqCst),
            "froze with a unit in progress"
        );
        g.leave(Side::Handler);
        freezer.join().unwrap();
        assert!(froze.load(Ordering::SeqCst));
        let entered = Arc::new(AtomicBool::new(false));
        let worker = {
            let (g, entered) = (Arc::clone(&g), Arc::clone(&entered));
            std::thread::spawn(move || {
                g.enter(Side::Evict);
                entered.store(true, Ordering::SeqCst);
                g.leave(Side::Evict);
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(!entered.load(Ordering::SeqCst), "entered a frozen gate");
        g.thaw();
        worker.join().unwrap();
        assert!(entered.load(Ordering::SeqCst));
    }
}
