//! The page table: what each page of the region is now (never written,
//! mapped, being evicted, in the store, in probation, being brought back,
//! unmapped), its referenced and own-zap flags, and its stamp (the last
//! known reference, or its probation slot).
//!
//! Owns the states and their transitions' compare-and-swap; a state taken
//! by compare-and-swap (`EVICTING`, `LOADING`) is that thread's lock on the
//! page. It makes no system call and knows no address.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

/// Never written (or dropped by the program): a fault gets the zero page.
pub(crate) const UNTOUCHED: u8 = 0;
/// Mapped.
pub(crate) const RESIDENT: u8 = 1;
/// Being evicted by one thread (write-protected, copied out).
pub(crate) const EVICTING: u8 = 2;
/// In the store; the mapping is dropped (or about to be).
pub(crate) const STORED: u8 = 3;
/// In a probation slot, uncompressed; the mapping is dropped (or about to
/// be).
pub(crate) const PROBATION: u8 = 4;
/// Being brought back by one thread.
pub(crate) const LOADING: u8 = 5;
/// Unmapped by the program.
pub(crate) const GONE: u8 = 6;

/// Flag: faulted in since the clock hand last passed.
pub(crate) const REFERENCED: u8 = 1;
/// Flag: the page's soft-dirty bit this epoch is counted already (the
/// hand spared the page for it, or the region mapped the page, which sets
/// it): `soft_dirty`.
pub(crate) const WRITE_SEEN: u8 = 2;
/// Flag: the program dropped the page (`madvise`) while a thread held it
/// `EVICTING`; the holder drops it when it lets go (`evict::settle_removed`).
pub(crate) const REMOVED: u8 = 4;
/// Flag: the program unmapped the page while a thread held it `EVICTING`.
pub(crate) const UNMAPPED: u8 = 8;

/// `n` atomics, all 0, from a zeroed allocation.
fn zeroed_u8(n: usize) -> Box<[AtomicU8]> {
    let raw = Box::into_raw(vec![0u8; n].into_boxed_slice());
    // SAFETY: `AtomicU8` has the size, alignment and bit validity of `u8`;
    // the box's allocation is handed over whole, with its length.
    unsafe { Box::from_raw(raw as *mut [AtomicU8]) }
}

/// `n` atomics, all 0, from a zeroed allocation.
fn zeroed_u32(n: usize) -> Box<[AtomicU32]> {
    let raw = Box::into_raw(vec![0u32; n].into_boxed_slice());
    // SAFETY: `AtomicU32` has the size, alignment and bit validity of
    // `u32`; the box's allocation is handed over whole, with its length.
    unsafe { Box::from_raw(raw as *mut [AtomicU32]) }
}

/// One entry per page.
#[derive(Debug)]
pub(crate) struct PageTable {
    state: Box<[AtomicU8]>,
    flags: Box<[AtomicU8]>,
    stamp: Box<[AtomicU32]>,
}

impl PageTable {
    /// `pages` entries, all `UNTOUCHED`.
    /// The arrays are zeroed allocations: a large one is fresh zero pages
    /// from the system, so a region's table costs memory only where its
    /// pages are used (a large region that a program fills from its start
    /// pays for the part it fills).
    pub(crate) fn new(pages: usize) -> PageTable {
        const { assert!(UNTOUCHED == 0) };
        PageTable {
            state: zeroed_u8(pages),
            flags: zeroed_u8(pages),
            stamp: zeroed_u32(pages),
        }
    }

    /// Pages.
    #[allow(clippy::len_without_is_empty)]
    pub(crate) fn len(&self) -> usize {
        self.state.len()
    }

    /// The state of `p`.
    pub(crate) fn state(&self, p: usize) -> u8 {
        self.state[p].load(Ordering::Acquire)
    }

    /// Moves `p` from `from` to `to`; false if it was not in `from`.
    pub(crate) fn cas(&self, p: usize, from: u8, to: u8) -> bool {
        self.state[p]
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Sets the state of `p` (by the thread that holds it).
    pub(crate) fn set(&self, p: usize, to: u8) {
        self.state[p].store(to, Ordering::Release)
    }

    /// Sets or clears flag `f`; returns whether it was set.
    pub(crate) fn set_flag(&self, p: usize, f: u8, on: bool) -> bool {
        let old = if on {
            self.flags[p].fetch_or(f, Ordering::AcqRel)
        } else {
            self.flags[p].fetch_and(!f, Ordering::AcqRel)
        };
        old & f != 0
    }

    /// Whether flag `f` is set.
    pub(crate) fn flag(&self, p: usize, f: u8) -> bool {
        self.flags[p].load(Ordering::Acquire) & f != 0
    }

    /// Clears the flags of `mask`; returns which of them were set.
    pub(crate) fn take_flags(&self, p: usize, mask: u8) -> u8 {
        self.flags[p].fetch_and(!mask, Ordering::AcqRel) & mask
    }

    /// The stamp of `p`: milliseconds since the region began at its last
    /// known reference; the slot index while in probation.
    pub(crate) fn stamp(&self, p: usize) -> u32 {
        self.stamp[p].load(Ordering::Acquire)
    }

    /// Sets the stamp of `p`.
    pub(crate) fn set_stamp(&self, p: usize, v: u32) {
        self.stamp[p].store(v, Ordering::Release)
    }

    /// Pages in state `s` now (a walk: for statistics and tests).
    pub(crate) fn count(&self, s: u8) -> u64 {
        self.state
            .iter()
            .filter(|x| x.load(Ordering::Relaxed) == s)
            .count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_is_taken_once() {
        let t = PageTable::new(4);
        assert!(t.cas(1, UNTOUCHED, RESIDENT));
        assert!(t.cas(1, RESIDENT, EVICTING));
        assert!(!t.cas(1, RESIDENT, EVICTING), "held by the first");
        t.set(1, STORED);
        assert_eq!(t.count(STORED), 1);
        assert!(!t.set_flag(2, REMOVED, true));
        assert!(t.set_flag(2, REMOVED, true));
        assert!(t.set_flag(2, REMOVED, false));
        assert!(!t.set_flag(2, REMOVED, false));
    }
}
