//! The evicting threads' copies in flight: which threads are copying pages
//! they hold `EVICTING` out of the region right now.
//!
//! An eviction copies its pages out with `process_vm_readv`. If the
//! program dropped one of them meanwhile (`madvise`), the kernel zapped it
//! and the copy faults on it: on the handler thread that fault must be
//! served (the zero page, which is what the program dropped to), since the
//! holder cannot let go of the page before its copy returns. Any other
//! fault on a page held `EVICTING` is the program's and waits for the
//! holder: mapping anything there before the holder's own zap would lose
//! it to that zap. The faulting thread's id (`UFFD_FEATURE_THREAD_ID`)
//! tells the two apart, looked up here.
//!
//! Owns a fixed array of thread ids (no allocation, no lock); knows nothing
//! of pages. A thread has at most one copy in flight, so a full array only
//! means more evicting threads than slots, and `begin` waits for a slot.

use std::sync::atomic::{AtomicU32, Ordering};

/// Copies at once: more than the evicting threads of any region (its
/// evictor and the threads calling hints).
const SLOTS: usize = 64;

/// No thread.
const FREE: u32 = 0;

/// The threads copying now.
#[derive(Debug)]
pub(crate) struct Copies {
    slots: [AtomicU32; SLOTS],
}

impl Default for Copies {
    fn default() -> Copies {
        Copies {
            slots: std::array::from_fn(|_| AtomicU32::new(FREE)),
        }
    }
}

/// A copy in flight; its slot is freed when it is dropped.
#[must_use]
pub(crate) struct Copy<'a> {
    slot: &'a AtomicU32,
}

impl Drop for Copy<'_> {
    fn drop(&mut self) {
        self.slot.store(FREE, Ordering::SeqCst);
    }
}

/// The calling thread's id (`gettid`), read once per thread.
pub(crate) fn this_thread() -> u32 {
    thread_local! {
        static TID: u32 = {
            // SAFETY: `gettid` takes no argument and cannot fail.
            unsafe { libc::syscall(libc::SYS_gettid) as u32 }
        };
    }
    TID.with(|t| *t)
}

impl Copies {
    /// Registers the calling thread as copying until the guard is dropped
    /// (waiting for a free slot if every one is taken).
    pub(crate) fn begin(&self) -> Copy<'_> {
        let me = this_thread();
        loop {
            for s in &self.slots {
                if s.compare_exchange(FREE, me, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
                {
                    return Copy { slot: s };
                }
            }
            std::thread::yield_now();
        }
    }

    /// Whether thread `tid` is copying now.
    pub(crate) fn by(&self, tid: u32) -> bool {
        tid != FREE && self.slots.iter().any(|s| s.load(Ordering::SeqCst) == tid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_copying_while_its_guard_lives() {
        let c = Copies::default();
        let me = this_thread();
        assert_ne!(me, FREE);
        assert!(!c.by(me));
        {
            let _g = c.begin();
            assert!(c.by(me));
            let other = std::thread::spawn(this_thread).join().unwrap();
            assert_ne!(other, me);
            assert!(!c.by(other));
        }
        assert!(!c.by(me));
        assert!(!c.by(FREE));
    }
}
