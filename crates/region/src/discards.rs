//! The pending discards: store slots of pages brought back, freed later by
//! the evictor rather than on the fault path (freeing a compressed object
//! can release a zspage, and the page source's bookkeeping allocates).
//!
//! Owns a fixed ring of page indexes, one producer (the fault handler) and
//! one consumer at a time (whoever holds the evicting side's drain). Knows
//! nothing of the store or the page states.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The ring.
#[derive(Debug)]
pub struct Discards {
    slots: Box<[AtomicU32]>,
    head: AtomicUsize,
    tail: AtomicUsize,
    consumer: Mutex<()>,
}

impl Discards {
    /// A ring of `cap` entries (a power of two).
    pub fn new(cap: usize) -> Discards {
        let cap = cap.next_power_of_two();
        Discards {
            slots: (0..cap).map(|_| AtomicU32::new(0)).collect(),
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            consumer: Mutex::new(()),
        }
    }

    /// Queues page `p`; false if the ring is full (the caller frees the
    /// slot itself). Only the handler pushes.
    pub fn push(&self, p: usize) -> bool {
        let tail = self.tail.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Acquire);
        if tail - head == self.slots.len() {
            return false;
        }
        self.slots[tail & (self.slots.len() - 1)].store(p as u32, Ordering::Relaxed);
        self.tail.store(tail + 1, Ordering::Release);
        true
    }

    /// Entries queued.
    pub fn len(&self) -> usize {
        self.tail.load(Ordering::Acquire) - self.head.load(Ordering::Acquire)
    }

    /// Whether at least half full.
    pub fn half_full(&self) -> bool {
        2 * self.len() >= self.slots.len()
    }

    /// Takes every queued page, one at a time, to `f` (one consumer at a
    /// time).
    pub fn drain(&self, mut f: impl FnMut(usize)) {
        let _one = self.consumer.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let head = self.head.load(Ordering::Relaxed);
            if head == self.tail.load(Ordering::Acquire) {
                return;
            }
            let p = self.slots[head & (self.slots.len() - 1)].load(Ordering::Relaxed);
            self.head.store(head + 1, Ordering::Release);
            f(p as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_and_full() {
        let d = Discards::new(4);
        for p in 0..4 {
            assert!(d.push(p));
        }
        assert!(!d.push(9), "full");
        assert!(d.half_full());
        let mut got = Vec::new();
        d.drain(|p| got.push(p));
        assert_eq!(got, [0, 1, 2, 3]);
        assert!(d.push(5));
        d.drain(|p| got.push(p));
        assert_eq!(got, [0, 1, 2, 3, 5]);
        assert_eq!(d.len(), 0);
    }
}
