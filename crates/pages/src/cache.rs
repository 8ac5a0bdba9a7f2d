//! The resident cache and pending discards: pages given up by their holders
//! but not yet given back to the kernel, so that they can be released
//! together in one batch (see the crate documentation).
//!
//! This module owns the cache of freed runs (by length, newest last, each
//! with how many of its leading pages may be resident) and the pending tails
//! of runs that are still out, with the counts of both, each with a *stamp*
//! (the source's count of pages given up, at the time it was given up), so
//! that a batch can release the oldest only (see `source.rs`'s retention). It decides nothing
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
    /// When it was freed.
    stamp: u64,
}

/// Pages `from..end` of a run that is out, given up by its holder and not
/// yet released. Pages from `end` on are not resident.
#[derive(Clone, Copy, Debug)]
struct Pending {
    from: u32,
    end: u32,
    /// When pages were last given up.
    stamp: u64,
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

    /// Takes the newest cached run of `pages` pages, if there is one; with
    /// `split`, else the front of the newest run of the shortest longer
    /// length cached, whose rest (pages of `page_size` bytes) stays cached.
    /// With `as_pending`, the pages of it that may be resident become
    /// pending, stamped `stamp` (the bound counts cached and pending pages
    /// alike).
    pub(crate) fn take(
        &mut self,
        pages: u32,
        as_pending: bool,
        stamp: u64,
        split: Option<usize>,
    ) -> Option<NonNull<u8>> {
        let c = match (self.cache[pages as usize].pop(), split) {
            (Some(c), _) => c,
            (None, None) => return None,
            (None, Some(page_size)) => {
                let len = (pages as usize + 1..self.cache.len())
                    .find(|&len| !self.cache[len].is_empty())?;
                let c = self.cache[len].pop()?;
                self.cached_pages -= c.resident as usize;
                // SAFETY: `pages < c.pages`, so the rest starts inside the
                // run, which lies in one mapping of the source.
                let rest = unsafe { c.ptr.as_ptr().add(pages as usize * page_size) };
                let rest = NonNull::new(rest).expect("inside a mapping");
                self.put(
                    rest,
                    c.pages - pages,
                    c.resident.saturating_sub(pages),
                    c.stamp,
                );
                let front = Cached {
                    ptr: c.ptr,
                    pages,
                    resident: c.resident.min(pages),
                    stamp: c.stamp,
                };
                self.cached_pages += front.resident as usize;
                front
            }
        };
        self.cached_pages -= c.resident as usize;
        if as_pending && c.resident > 0 {
            let key = c.ptr.as_ptr() as usize;
            let tail = Pending {
                from: 0,
                end: c.resident,
                stamp,
            };
            self.pending.insert(key, tail);
            self.pending_pages += c.resident as usize;
        }
        Some(c.ptr)
    }

    /// Caches the freed run of `pages` pages at `ptr`, of which the first
    /// `resident` may be resident, stamped `stamp`.
    pub(crate) fn put(&mut self, ptr: NonNull<u8>, pages: u32, resident: u32, stamp: u64) {
        self.cache[pages as usize].push(Cached {
            ptr,
            pages,
            resident,
            stamp,
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

    /// Marks pages `first..end` of the run at `run` pending in `stamp`. A run
    /// has one pending range: returns false, changing nothing, if the run
    /// already has one that this range neither touches nor overlaps (the
    /// caller releases these pages at once instead).
    pub(crate) fn add_pending(&mut self, run: usize, first: u32, end: u32, stamp: u64) -> bool {
        match self.pending.get(&run).copied() {
            None => {
                self.pending.insert(
                    run,
                    Pending {
                        from: first,
                        end,
                        stamp,
                    },
                );
                self.pending_pages += (end - first) as usize;
                true
            }
            Some(p) if first <= p.end && end >= p.from => {
                let merged = Pending {
                    from: p.from.min(first),
                    end: p.end.max(end),
                    stamp,
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
            self.pending.insert(run, Pending { from, ..p });
            true
        }
    }

    /// The address ranges a batch releases, pages of `page_size` bytes:
    /// every cached run given up before stamp `before` whole, even where
    /// only a prefix may be resident (advising pages already dropped costs
    /// nothing and joins more neighbours), and every pending range given up
    /// before it (`u64::MAX`: everything). Not yet coalesced.
    pub(crate) fn ranges(&self, page_size: usize, before: u64) -> Vec<Range> {
        let mut ranges = Vec::new();
        for runs in self.cache.iter() {
            ranges.extend(runs.iter().filter(|c| c.stamp < before).map(|c| Range {
                addr: c.ptr.as_ptr() as usize,
                len: c.pages as usize * page_size,
            }));
        }
        ranges.extend(
            self.pending
                .iter()
                .filter(|(_, p)| p.stamp < before)
                .map(|(&addr, p)| Range {
                    addr: addr + p.from as usize * page_size,
                    len: (p.end - p.from) as usize * page_size,
                }),
        );
        ranges
    }

    /// After the ranges of [`ResidentCache::ranges`] with the same `before`
    /// were released: forgets those pending pages and moves those cached
    /// runs to `free`. Returns the number of cached runs moved.
    pub(crate) fn released(&mut self, free: &mut FreeRuns, before: u64) -> u64 {
        let mut pending_pages = self.pending_pages;
        self.pending.retain(|_, p| {
            let keep = p.stamp >= before;
            if !keep {
                pending_pages -= (p.end - p.from) as usize;
            }
            keep
        });
        self.pending_pages = pending_pages;
        let mut runs_released = 0;
        for len in 1..self.cache.len() {
            let runs = std::mem::take(&mut self.cache[len]);
            let (gone, kept): (Vec<Cached>, Vec<Cached>) =
                runs.into_iter().partition(|c| c.stamp < before);
            self.cache[len] = kept;
            runs_released += gone.len() as u64;
            self.cached_pages -= gone.iter().map(|c| c.resident as usize).sum::<usize>();
            free.extend(len as u32, gone.into_iter().map(|c| c.ptr));
        }
        runs_released
    }

    /// The stamp and the pages that may be resident of every cached run
    /// and pending range, in no order.
    pub(crate) fn stamps(&self) -> Vec<(u64, usize)> {
        let mut v: Vec<(u64, usize)> = self
            .pending
            .values()
            .map(|p| (p.stamp, (p.end - p.from) as usize))
            .collect();
        v.extend(
            self.cache
                .iter()
                .flatten()
                .map(|c| (c.stamp, c.resident as usize)),
        );
        v
    }
}
