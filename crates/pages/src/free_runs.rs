//! Free runs indexed by length: address ranges a source mapped and holds,
//! whose pages are not resident, kept for reuse.
//!
//! This module owns the lists of free runs and the split of a longer run when
//! a shorter one is wanted, so the address space a source holds is bounded by
//! its peak use. It never maps, advises or touches memory: runs arrive here
//! already given back to the kernel (see `cache.rs` and `release.rs`), and a
//! run taken from here is only an address.

use std::ptr::NonNull;

use crate::MAX_RUN_PAGES;

/// Free runs by length in pages (index 0 unused).
///
/// Invariant: every entry starts a run of its list's length in pages that
/// lies inside one mapping of the source (the source's "chunks"), none of its
/// pages resident and none handed out.
pub(crate) struct FreeRuns {
    by_length: Vec<Vec<NonNull<u8>>>,
}

impl FreeRuns {
    /// No free runs, with a list for every length up to [`MAX_RUN_PAGES`].
    pub(crate) fn new() -> FreeRuns {
        FreeRuns {
            by_length: (0..=MAX_RUN_PAGES).map(|_| Vec::new()).collect(),
        }
    }

    /// Adds the free run of `pages` pages at `ptr` (see the type's invariant).
    pub(crate) fn push(&mut self, pages: u32, ptr: NonNull<u8>) {
        self.by_length[pages as usize].push(ptr);
    }

    /// Adds free runs of `pages` pages each.
    pub(crate) fn extend(&mut self, pages: u32, runs: impl IntoIterator<Item = NonNull<u8>>) {
        self.by_length[pages as usize].extend(runs);
    }

    /// A free run of exactly `pages` (of `page_size` bytes), or the front of
    /// a longer one split, its rest kept as a shorter free run.
    pub(crate) fn take(&mut self, pages: u32, page_size: usize) -> Option<NonNull<u8>> {
        let want = pages as usize;
        if let Some(ptr) = self.by_length[want].pop() {
            return Some(ptr);
        }
        let longer = (want + 1..self.by_length.len()).find(|&n| !self.by_length[n].is_empty())?;
        let ptr = self.by_length[longer].pop()?;
        // SAFETY: `ptr` starts a free run of `longer` pages inside one chunk
        // (the type's invariant), so the address `want` pages further is
        // inside the same chunk.
        let rest = unsafe { ptr.add(want * page_size) };
        self.by_length[longer - want].push(rest);
        Some(ptr)
    }
}
