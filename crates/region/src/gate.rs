//! The fork gate: lets `fork` wait until no worker is in the middle of a
//! unit of work, and holds them off until the fork is done, so the child
//! copies no page half-evicted and no store lock held.
//!
//! Two classes, frozen in order: the evicting side (the evictor thread and
//! any thread running a hint) first, then the fault handler. The handler
//! must run until the evicting side has stopped, because an eviction's
//! `madvise` waits for the handler to read its remove event.
//!
//! Owns the gate's mutex and condition variable; no other lock is taken
//! inside it.

use std::sync::{Condvar, Mutex};

/// A side of the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The evictor thread and hint callers.
    Evict,
    /// The fault handler.
    Handler,
}

#[derive(Debug, Default)]
struct State {
    frozen: [bool; 2],
    busy: [usize; 2],
}

/// The gate.
#[derive(Debug, Default)]
pub struct Gate {
    state: Mutex<State>,
    cv: Condvar,
}

fn ix(side: Side) -> usize {
    match side {
        Side::Evict => 0,
        Side::Handler => 1,
    }
}

impl Gate {
    /// Starts a unit of work on `side`, waiting while it is frozen.
    pub fn enter(&self, side: Side) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.frozen[ix(side)] {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.busy[ix(side)] += 1;
    }

    /// Ends a unit of work on `side`.
    pub fn leave(&self, side: Side) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.busy[ix(side)] -= 1;
        // Only a freeze waits on the busy counts (the polling handler
        // leaves the gate at a high rate; a wake-up each time is a
        // system call for nobody).
        if s.frozen.iter().any(|&f| f) {
            self.cv.notify_all();
        }
    }

    /// Freezes the evicting side, then the handler, each after its units in
    /// progress end.
    pub fn freeze(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for side in [Side::Evict, Side::Handler] {
            s.frozen[ix(side)] = true;
            while s.busy[ix(side)] > 0 {
                s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
            }
        }
    }

    /// Lets both sides run again.
    pub fn thaw(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        *s = State::default();
        self.cv.notify_all();
    }
}
