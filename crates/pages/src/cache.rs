//! The resident cache and pending discards: pages given up by their holders
//! but not yet given back to the kernel, so that they can be released
//! together in one batch (see the crate documentation).
//!
//! This module owns the cache of freed runs (by length, newest last, each
//! with how many of its leading pages may be resident) and the pending tails
//! of runs that are still out, with the counts of both. It decides nothing
//! about bounds or limits (the source does) and never touches memory or
//! calls the kernel: it lists the address ranges to release, and the source
//! releases them through `release.rs`.

use std::collections::HashMap;
use std::ptr::NonNull;

use crate::free_runs::FreeRuns;
use crate::release::Range;
use crate::MAX_RUN_PAGES;

/// A freed run kept resident in the cache.
struct Cached {
    ptr: NonNull<u8>,
    pages: u32,
    /// Leading pages that may be resident (the rest were discarded).
    resident: u32,
}

/// Pages `from..end` of a run that is out, given up by its holder and not
/// yet released. Pages from `end` on are not resident.
#[derive(Clone, Copy, Debug)]
struct Pending {
    from: u32,
    end: u32,
}

/// Cached runs and pending pages of one source.
pub(crate) struct ResidentCache {
    /// Cached runs by length in pages (index 0 unused), newest last. Their
    /// pages may be resident.
    cache: Vec<Vec<Cached>>,
    /// Pages of cached runs that may be resident.
    cached_pages: usize,
    /// Pending tails of runs that are out, by the run's address.
    pending: HashMap<usize, Pending>,
    /// Pages in `pending`.
    pending_pages: usize,
}

impl ResidentCache {
    /// Nothing cached, nothing pending.
    pub(crate) fn new() -> ResidentCache {
        ResidentCache {
            cache: (0..=MAX_RUN_PAGES).map(|_| Vec::new()).collect(),
            cached_pages: 0,
            pending: HashMap::new(),
            pending_pages: 0,
        }
    }

    /// Pages of cached runs that may be resident.
    pub(crate) fn cached_pages(&self) -> usize {
        self.cached_pages
    }

    /// Pages given up with `discard_later` and not yet released.
    pub(crate) fn pending_pages(&self) -> usize {
        self.pending_pages
    }

    /// Takes the newest cached run of `pages` pages, if there is one. With
    /// `as_pending`, the pages of it that may be resident become pending (the
    /// bound counts cached and pending pages alike).
    pub(crate) fn take(&mut self, pages: u32, as_pending: bool) -> Option<NonNull<u8>> {
        let c = self.cache[pages as usize].pop()?;
        self.cached_pages -= c.resident as usize;
        if as_pending {
            let key = c.ptr.as_ptr() as usize;
            let tail = Pending {
                from: 0,
                end: c.resident,
            };
            self.pending.insert(key, tail);
            self.pending_pages += c.resident as usize;
        }
        Some(c.ptr)
    }

    /// Caches the freed run of `pages` pages at `ptr`, of which the first
    /// `resident` (at least one) may be resident.
    pub(crate) fn put(&mut self, ptr: NonNull<u8>, pages: u32, resident: u32) {
        self.cache[pages as usize].push(Cached {
            ptr,
            pages,
            resident,
        });
        self.cached_pages += resident as usize;
    }

    /// Forgets the pending tail of the run at `run` (being freed), if it has
    /// one, and returns the end of that tail: its pages are still resident
    /// and go with the run.
    pub(crate) fn forget_pending(&mut self, run: usize) -> Option<u32> {
        let p = self.pending.remove(&run)?;
        self.pending_pages -= (p.end - p.from) as usize;
        Some(p.end)
    }

    /// Marks pages `first..end` of the run at `run` pending. A run has one
    /// pending range: returns false, changing nothing, if the run already has
    /// one that this range neither touches nor overlaps (the caller releases
    /// these pages at once instead).
    pub(crate) fn add_pending(&mut self, run: usize, first: u32, end: u32) -> bool {
        match self.pending.get(&run).copied() {
            None => {
                self.pending.insert(run, Pending { from: first, end });
                self.pending_pages += (end - first) as usize;
                true
            }
            Some(p) if first <= p.end && end >= p.from => {
                let merged = Pending {
                    from: p.from.min(first),
                    end: p.end.max(end),
                };
                self.pending.insert(run, merged);
                self.pending_pages += (merged.end - merged.from - (p.end - p.from)) as usize;
                true
            }
            Some(_) => false,
        }
    }

    /// Takes back the pending pages below `upto` of the run at `run`.
    /// Returns true if pages of the run from `upto` on are still pending.
    pub(crate) fn reclaim(&mut self, run: usize, upto: u32) -> bool {
        let Some(p) = self.pending.get(&run).copied() else {
            return false;
        };
        if upto <= p.from {
            return true;
        }
        let from = upto.min(p.end);
        self.pending_pages -= (from - p.from) as usize;
        if from == p.end {
            self.pending.remove(&run);
            false
        } else {
            self.pending.insert(run, Pending { from, end: p.end });
            true
        }
    }

    /// The address ranges a batch releases, pages of `page_size` bytes:
    /// every cached run whole, even where only a prefix may be resident
    /// (advising pages already dropped costs nothing and joins more
    /// neighbours), and every pending range. Not yet coalesced.
    pub(crate) fn ranges(&self, page_size: usize) -> Vec<Range> {
        let mut ranges = Vec::new();
        for runs in self.cache.iter() {
            ranges.extend(runs.iter().map(|c| Range {
                addr: c.ptr.as_ptr() as usize,
                len: c.pages as usize * page_size,
            }));
        }
        ranges.extend(self.pending.iter().map(|(&addr, p)| Range {
            addr: addr + p.from as usize * page_size,
            len: (p.end - p.from) as usize * page_size,
        }));
        ranges
    }

    /// After the ranges of [`ResidentCache::ranges`] were released: clears
    /// the pending pages and moves the cached runs to `free`. Returns the
    /// number of cached runs moved.
    pub(crate) fn released(&mut self, free: &mut FreeRuns) -> u64 {
        self.pending.clear();
        self.pending_pages = 0;
        let mut runs_released = 0;
        for len in 1..self.cache.len() {
            let runs = std::mem::take(&mut self.cache[len]);
            runs_released += runs.len() as u64;
            free.extend(len as u32, runs.into_iter().map(|c| c.ptr));
        }
        self.cached_pages = 0;
        runs_released
    }
}
