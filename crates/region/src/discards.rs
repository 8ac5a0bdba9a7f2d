//! The pending discards: store slots of pages brought back, freed later by
//! the evictor rather than on the fault path (freeing a compressed object
//! can release a zspage, and the page source's bookkeeping allocates).
//!
//! Owns a fixed ring of page indexes, any number of producers (whoever
//! brings a page back) and one consumer at a time (whoever holds the
//! evicting side's drain). Knows
//! nothing of the store or the page states.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The ring.
#[derive(Debug)]
pub(crate) struct Discards {
    slots: Box<[AtomicU32]>,
    head: AtomicUsize,
    tail: AtomicUsize,
    consumer: Mutex<()>,
}

impl Discards {
    /// A ring of `cap` entries (a power of two).
    pub(crate) fn new(cap: usize) -> Discards {
        let cap = cap.next_power_of_two();
        Discards {
            slots: (0..cap).map(|_| AtomicU32::new(0)).collect(),
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            consumer: Mutex::new(()),
        }
    }

    /// Queues page `p`; false if the ring is full (the caller frees the
    /// slot itself). Any thread may push: the fault handler, a hint caller,
    /// a thread serving its own fault.
    pub(crate) fn push(&self, p: usize) -> bool {
        let cap = self.slots.len();
        let tail = loop {
            // `head` first: it never passes a `tail` read after it.
            let head = self.head.load(Ordering::Acquire);
            let tail = self.tail.load(Ordering::Acquire);
            if tail - head >= cap {
                return false;
            }
            // Reserves entry `tail`; the consumer cleared it (to 0) before
            // moving `head` past it, so it is free.
            if self
                .tail
                .compare_exchange_weak(tail, tail + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                break tail;
            }
        };
        // Published as `p + 1`: 0 marks an entry reserved and not written
        // yet, where the consumer stops.
        self.slots[tail & (cap - 1)].store(p as u32 + 1, Ordering::Release);
        true
    }

    /// Entries queued.
    pub(crate) fn len(&self) -> usize {
        // `head` first: it never passes a `tail` read after it.
        let head = self.head.load(Ordering::Acquire);
        self.tail.load(Ordering::Acquire) - head
    }

    /// Whether at least half full.
    pub(crate) fn half_full(&self) -> bool {
        2 * self.len() >= self.slots.len()
    }

    /// Takes every queued page, one at a time, to `f` (one consumer at a
    /// time); stops early at an entry a producer reserved and has not
    /// written yet (the next drain takes it).
    pub(crate) fn drain(&self, mut f: impl FnMut(usize)) {
        let _one = self.consumer.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let head = self.head.load(Ordering::Relaxed);
            if head == self.tail.load(Ordering::Acquire) {
                return;
            }
            let entry = &self.slots[head & (self.slots.len() - 1)];
            let v = entry.load(Ordering::Acquire);
            if v == 0 {
                return;
            }
            entry.store(0, Ordering::Relaxed);
            self.head.store(head + 1, Ordering::Release);
            f(v as usize - 1);
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

    #[test]
    fn producers_on_many_threads_lose_nothing() {
        let d = Discards::new(1024);
        let mut got = Vec::new();
        std::thread::scope(|s| {
            for t in 0..4usize {
                let d = &d;
                s.spawn(move || {
                    for i in 0..10_000 {
                        while !d.push(t * 10_000 + i) {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            while got.len() < 40_000 {
                d.drain(|p| got.push(p));
            }
        });
        got.sort_unstable();
        assert_eq!(got, (0..40_000).collect::<Vec<_>>());
    }
}
