//! Read holds as zbud, z3fold and zblock keep them. An allocator's state (or
//! one independent part of it) is under one mutex; `read_begin` counts a
//! *read hold* on the object and `read_end` drops it, both under the mutex,
//! and the bytes are read with the mutex released. `write` and `free` of a
//! held object wait on a condition variable until its last hold ends, so a
//! reader's bytes never change and never move.
//!
//! [`HoldLock`] owns the mutex, the condition variable and the count of
//! threads waiting on it; the holds themselves are counted in the
//! allocator's own records, and what a hold blocks is the allocator's to
//! decide.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

/// An allocator's state under a mutex, with the condition variable that
/// `write` and `free` wait on for read holds to end.
///
/// An allocator that uses it finishes every update under the mutex before
/// anything that can panic, so a poisoned mutex still guards consistent
/// state and [`HoldLock::lock`] takes it as it is.
pub struct HoldLock<T> {
    state: Mutex<T>,
    /// Signalled when an object's last read hold ends.
    released: Condvar,
    /// Threads in [`HoldLock::wait`]; changed and read only with the mutex
    /// held (an atomic only so that the mutex can guard `T` alone).
    waiters: AtomicUsize,
}

impl<T> HoldLock<T> {
    /// `state` under a new mutex, with nobody waiting.
    pub const fn new(state: T) -> Self {
        HoldLock {
            state: Mutex::new(state),
            released: Condvar::new(),
            waiters: AtomicUsize::new(0),
        }
    }

    /// Locks the state (a poisoned mutex as it is).
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives the mutex up until some object's last read hold ends (see
    /// [`HoldLock::released`]), then takes it again. Anything may have
    /// changed meanwhile: the caller looks its object up again.
    pub fn wait<'a>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.waiters.fetch_add(1, Ordering::Relaxed);
        let guard = self.released.wait(guard).unwrap_or_else(|e| e.into_inner());
        self.waiters.fetch_sub(1, Ordering::Relaxed);
        guard
    }

    /// Wakes the threads in [`HoldLock::wait`], if there are any. Call it
    /// when an object's last read hold ends, with the mutex still held
    /// (`_guard`).
    pub fn released(&self, _guard: &MutexGuard<'_, T>) {
        if self.waiters.load(Ordering::Relaxed) > 0 {
            self.released.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_waiter_wakes_when_a_hold_ends() {
        // The state: read holds on one object.
        let lock = Arc::new(HoldLock::new(1u32));
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                let mut holds = lock.lock();
                while *holds != 0 {
                    holds = lock.wait(holds);
                }
            })
        };
        while lock.waiters.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        let mut holds = lock.lock();
        *holds -= 1;
        lock.released(&holds);
        drop(holds);
        waiter.join().unwrap();
        assert_eq!(lock.waiters.load(Ordering::Relaxed), 0);
    }
}
