//! The region's own zaps in flight: which remove events are the region's.
//!
//! An eviction drops a page run's mapping with `madvise(MADV_DONTNEED)`,
//! which the kernel reports to the handler as a remove event, exactly as
//! it reports the program's own `madvise`. Before its call, the evicting
//! thread registers the exact range (first page, pages); the handler, for
//! each remove event, takes the registration equal to the event's range,
//! if there is one, and then knows the event as the region's own. An event
//! that matches none is the program's, whatever pages it shares with a
//! pending eviction: the program dropped those pages too.
//!
//! A program's event with exactly a pending eviction's range is taken as
//! the region's own, and the eviction's own event, which follows, then as
//! the program's: the same pages are dropped either way.
//!
//! Owns a fixed array of atomics (no allocation, no lock); knows nothing
//! of page states. Each evicting thread has at most one registration
//! (its `madvise` waits until the handler reads the event), so a full
//! array only means more evicting threads than slots, and `register`
//! waits for a slot.

use std::sync::atomic::{AtomicU64, Ordering};

/// Registrations at once: more than the evicting threads of any region
/// (its evictor and the threads calling hints).
const SLOTS: usize = 64;

/// Bits of a key for the range's length (an eviction's is at most
/// `window::WINDOW_MAX` pages, a program's can be anything: a longer one
/// never matches).
const LEN_BITS: u32 = 24;

/// The registrations: 0 is a free slot.
#[derive(Debug)]
pub(crate) struct Zaps {
    slots: [AtomicU64; SLOTS],
}

impl Default for Zaps {
    fn default() -> Zaps {
        Zaps {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// The key of `pages` pages from page `first`; `None` for a range no
/// eviction makes (empty, or too long for the key).
fn key(first: usize, pages: usize) -> Option<u64> {
    if pages == 0 || pages >= 1 << LEN_BITS || (first as u64) >= 1 << (64 - LEN_BITS) {
        return None;
    }
    Some(((first as u64) << LEN_BITS) | pages as u64)
}

impl Zaps {
    /// Registers the zap of `pages` pages from page `first` (waiting for a
    /// free slot if every one is taken); returns its key for `cancel`.
    pub(crate) fn register(&self, first: usize, pages: usize) -> u64 {
        let k = key(first, pages).expect("an eviction's run fits a key");
        loop {
            for s in &self.slots {
                if s.compare_exchange(0, k, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    return k;
                }
            }
            std::thread::yield_now();
        }
    }

    /// Withdraws a registration whose `madvise` failed (no event comes).
    pub(crate) fn cancel(&self, k: u64) {
        self.take_key(k);
    }

    /// Whether a remove event of `pages` pages from page `first` is the
    /// region's own; takes the registration if so.
    pub(crate) fn take(&self, first: usize, pages: usize) -> bool {
        key(first, pages).is_some_and(|k| self.take_key(k))
    }

    fn take_key(&self, k: u64) -> bool {
        self.slots.iter().any(|s| {
            s.compare_exchange(k, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_range_is_the_regions_own() {
        let z = Zaps::default();
        z.register(10, 5);
        // The program's drop of a range that starts at the same page, or
        // lies inside, or covers it, is the program's.
        assert!(!z.take(10, 64));
        assert!(!z.take(11, 2));
        assert!(!z.take(0, 64));
        assert!(z.take(10, 5));
        // Taken once.
        assert!(!z.take(10, 5));
        // Two evictions of the same range (one after the other's event).
        z.register(3, 1);
        z.register(3, 1);
        assert!(z.take(3, 1));
        assert!(z.take(3, 1));
        assert!(!z.take(3, 1));
        let k = z.register(7, 2);
        z.cancel(k);
        assert!(!z.take(7, 2));
        assert!(!z.take(0, 0));
    }
}
