//! The [`PageSource`] facade: one mutex over the free runs, the resident
//! cache with the pending discards and the two frontiers; the page limit and
//! the bound on cached plus pending pages (with its share that scales with
//! the pages out, the retained pages, and their decay by epochs); [`Hold`];
//! the counters.
//!
//! This module decides which mechanism serves an allocation and when a batch
//! is released. It may not keep runs itself (`free_runs.rs` and `cache.rs`
//! do), map memory (`frontier.rs` does) or advise it (`release.rs` does, and
//! [`PageSource::discard`] here through it); it never reads or writes the
//! memory it hands out.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use crate::cache::ResidentCache;
use crate::free_runs::FreeRuns;
use crate::frontier::{Chunk, Frontier, Use};
use crate::release::{self, Counters, Range};
use crate::reserve;
use crate::{
    os_page_size, PagesError, Run, DEFAULT_CACHE_BYTES, DEFAULT_DECAY_MS, DEFAULT_HOLD_BYTES,
    MAX_RUN_PAGES,
};

/// How an allocation may be served (see [`PageSource::alloc`],
/// [`PageSource::alloc_clean`], [`PageSource::alloc_pending`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fresh {
    /// A cached run, else the dense frontier.
    Dense,
    /// A free run or the sparse frontier, never the cache.
    Clean,
    /// A cached run with its pages pending, else as `Clean`.
    Pending,
}

struct Inner {
    /// Every mapping made; unmapped when the source drops.
    chunks: Vec<Chunk>,
    /// Free runs by length. Their pages are not resident.
    free: FreeRuns,
    /// Cached freed runs and pending tails of runs that are out. Their pages
    /// may be resident.
    cache: ResidentCache,
    /// Fresh runs for holders that touch pages one by one ([`PageSource::alloc_clean`]).
    sparse: Frontier,
    /// Fresh runs for holders that write every page at once ([`PageSource::alloc`]).
    dense: Frontier,
    /// Pages in runs currently handed out.
    pages_out: usize,
    /// Allocations served from the cache.
    cache_hits: u64,
    /// Runs given back to the kernel from the cache.
    runs_released: u64,
    /// Batches released (cache and pending pages together).
    batches: u64,
    /// Batches being released by threads that let the lock go between two
    /// chunks: while one is, a free does not start another.
    releasing: usize,
    /// [`Hold`]s taken and not dropped.
    holds: usize,
    /// The next stamp: cached runs and pending pages are stamped when given
    /// up, so that batches can release the oldest first.
    stamp: u64,
    /// The stamp when the current epoch began (the last decay): a decay
    /// releases what was given up before it.
    epoch_start: u64,
    /// When the last decay ran (or the source was made).
    last_decay: Instant,
    /// Decays run ([`PageSource::decay`], or due by time).
    decays: u64,
}

/// Counters of a [`PageSource`], for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SourceStats {
    /// Pages in runs handed out.
    pub pages_out: usize,
    /// Pages of cached freed runs that may still be resident.
    pub cached_pages: usize,
    /// Pages given up by [`PageSource::discard_later`] and not yet released.
    pub pending_pages: usize,
    /// The fixed part of the bound on cached plus pending pages
    /// ([`PageSource::set_cache_limit`]).
    pub cache_limit_pages: usize,
    /// The retained share's divisor ([`PageSource::set_retain_divisor`]; 0:
    /// none).
    pub retain_divisor: usize,
    /// The bound on cached plus pending pages now, outside a [`Hold`]: the
    /// fixed part plus pages out over the divisor.
    pub bound_pages: usize,
    /// Decays run (each releases what was not reused for a whole epoch).
    pub decays: u64,
    /// Allocations served from the cache (no system call, no page fault).
    pub cache_hits: u64,
    /// Freed runs given back to the kernel (in batches).
    pub runs_released: u64,
    /// Batches released.
    pub batches: u64,
    /// System calls that gave pages back (`madvise`, `process_madvise`),
    /// immediate discards included.
    pub advise_calls: u64,
    /// Address ranges given back, after coalescing, immediate discards
    /// included.
    pub ranges_advised: u64,
}

/// A source of page runs of one page size.
pub struct PageSource {
    page_size: usize,
    limit_pages: Option<usize>,
    /// The bound on cached plus pending pages (0: every free and
    /// `discard_later` is released at once).
    cache_limit: AtomicUsize,
    /// The bound while a [`Hold`] is taken.
    hold_limit: AtomicUsize,
    /// Pages out over this are added to the bound (0: nothing added).
    retain_divisor: AtomicUsize,
    /// Milliseconds after which a decay is due without a call to
    /// [`PageSource::decay`] (0: only by calls).
    decay_ms: AtomicU64,
    counters: Counters,
    /// Threads waiting for `inner` (counted only when the lock was taken):
    /// a release in progress lets them in between its chunks.
    waiting: AtomicUsize,
    inner: Mutex<Inner>,
}

/// The most pages one chunk of a batch releases under the mutex. A batch of
/// a compaction's hold (up to 16 MiB) released in one call held the mutex
/// for milliseconds, and every allocation, free and reclaim of the source
/// waited for it.
/// Released a chunk at a time, with waiters let in between, they wait for
/// one chunk at most.
const RELEASE_CHUNK_PAGES: usize = 256;

/// How long a release in progress waits, between two chunks, for the
/// threads waiting for the mutex to take it.
const LET_IN: Duration = Duration::from_micros(50);

type Guard<'a> = MutexGuard<'a, Inner>;

impl Inner {
    /// Cached plus pending pages.
    fn held(&self) -> usize {
        self.cache.cached_pages() + self.cache.pending_pages()
    }

    /// Gives the reserve every piece of it none of whose pages this source
    /// holds any more: no run of it out, cached or pending.
    fn give_back_whole_pieces(&mut self) {
        for start in self.free.take_whole_pieces() {
            let Some(at) = self
                .chunks
                .iter()
                .position(|c| c.reserved && c.base.as_ptr() as usize == start)
            else {
                debug_assert!(false, "a free piece that is not a chunk of this source");
                continue;
            };
            let chunk = self.chunks.swap_remove(at);
            // SAFETY: a piece this source took from the reserve: every page of
            // it is in the free lists, which no longer name it, so no run of
            // it is out and none will be handed out; a frontier that carved it
            // has carved it to its end and never reads it again. It leaves
            // `chunks`, so it is given back once.
            unsafe { reserve::give_piece(chunk.base) };
        }
    }

    /// A new stamp, later than every one before.
    fn next_stamp(&mut self) -> u64 {
        self.stamp += 1;
        self.stamp
    }
}

// SAFETY: the raw pointers in `Inner` are only touched under the mutex, and
// the memory they point to is handed out as `Run` tokens whose use is the
// holder's responsibility.
unsafe impl Send for PageSource {}
// SAFETY: every method takes the mutex before touching `Inner`; the other
// fields are atomics or immutable.
unsafe impl Sync for PageSource {}

impl fmt::Debug for PageSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageSource")
            .field("page_size", &self.page_size)
            .field("limit_pages", &self.limit_pages)
            .field("stats", &self.stats())
            .finish()
    }
}

impl PageSource {
    /// A source of pages of `page_size` bytes that refuses to have more
    /// than `limit_pages` pages out at once (`None`: no limit).
    pub fn new(page_size: usize, limit_pages: Option<usize>) -> Result<Self, PagesError> {
        let os = os_page_size();
        if !page_size.is_power_of_two() || page_size < os || page_size > 65536 {
            return Err(PagesError::PageSize(page_size));
        }
        Ok(PageSource {
            page_size,
            limit_pages,
            cache_limit: AtomicUsize::new(
                (DEFAULT_CACHE_BYTES / page_size).max(MAX_RUN_PAGES as usize),
            ),
            hold_limit: AtomicUsize::new(DEFAULT_HOLD_BYTES / page_size),
            retain_divisor: AtomicUsize::new(0),
            decay_ms: AtomicU64::new(DEFAULT_DECAY_MS),
            counters: Counters::default(),
            waiting: AtomicUsize::new(0),
            inner: Mutex::new(Inner {
                chunks: Vec::new(),
                free: FreeRuns::new(page_size),
                cache: ResidentCache::new(),
                sparse: Frontier::new(Use::Sparse),
                dense: Frontier::new(Use::Dense),
                pages_out: 0,
                cache_hits: 0,
                runs_released: 0,
                batches: 0,
                releasing: 0,
                holds: 0,
                stamp: 0,
                epoch_start: 0,
                last_decay: Instant::now(),
                decays: 0,
            }),
        })
    }

    fn lock(&self) -> Guard<'_> {
        // A panic under this lock leaves `Inner` consistent (every update is a
        // single push, pop or add), so a poisoned lock is still usable.
        match self.inner.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.waiting.fetch_add(1, Ordering::Relaxed);
                let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
                self.waiting.fetch_sub(1, Ordering::Relaxed);
                g
            }
        }
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Pages in runs currently handed out.
    pub fn pages_out(&self) -> usize {
        self.lock().pages_out
    }

    /// The page limit, if any.
    pub fn limit_pages(&self) -> Option<usize> {
        self.limit_pages
    }

    /// Pages of freed runs kept in the cache that may still be resident.
    pub fn cached_pages(&self) -> usize {
        self.lock().cache.cached_pages()
    }

    /// The bound on cached plus pending pages.
    pub fn cache_limit(&self) -> usize {
        self.cache_limit.load(Ordering::Relaxed)
    }

    /// Sets the bound on cached plus pending pages (0: every freed run and
    /// every [`PageSource::discard_later`] is released at once, with one
    /// system call each, as a source without a cache). What is over the new
    /// bound is released now.
    pub fn set_cache_limit(&self, pages: usize) {
        self.cache_limit.store(pages, Ordering::Relaxed);
        drop(self.release_if_over(self.lock()).0);
    }

    /// The source's counters.
    pub fn stats(&self) -> SourceStats {
        let inner = self.lock();
        SourceStats {
            pages_out: inner.pages_out,
            cached_pages: inner.cache.cached_pages(),
            pending_pages: inner.cache.pending_pages(),
            cache_limit_pages: self.cache_limit(),
            retain_divisor: self.retain_divisor(),
            bound_pages: self.cache_limit() + self.retained_share(&inner),
            decays: inner.decays,
            cache_hits: inner.cache_hits,
            runs_released: inner.runs_released,
            batches: inner.batches,
            advise_calls: self.counters.calls.load(Ordering::Relaxed),
            ranges_advised: self.counters.ranges.load(Ordering::Relaxed),
        }
    }

    /// Hands out `pages` contiguous pages for a holder that writes all of
    /// them at once: a cached run of that length if there is one (its bytes
    /// are stale and its pages may all be resident), otherwise a fresh
    /// zero-filled run, whose pages may be resident already (populated ahead
    /// with transparent huge pages where the system offers them; see
    /// `frontier.rs`).
    pub fn alloc(&self, pages: u32) -> Result<Run, PagesError> {
        self.alloc_from(pages, Fresh::Dense)
    }

    /// Hands out `pages` contiguous zero-filled pages, none of them resident
    /// until touched. Never takes a cached run.
    pub fn alloc_clean(&self, pages: u32) -> Result<Run, PagesError> {
        self.alloc_from(pages, Fresh::Clean)
    }

    /// Hands out `pages` contiguous pages for a holder that touches them one
    /// by one, counting only those: a cached run of that length if there is
    /// one, with every page that may be resident *pending* (as if given up
    /// with [`PageSource::discard_later`]), otherwise as
    /// [`PageSource::alloc_clean`].
    ///
    /// The holder must call [`PageSource::reclaim`] before it touches a page
    /// (pages taken back keep stale bytes; pages released meanwhile read as
    /// zero). Pages it never takes back are released with the next batch, so
    /// the resident set stays within the cache bound of what it counts, while
    /// the pages it does fill were faulted in already: no page fault, no
    /// zeroing, no system call.
    pub fn alloc_pending(&self, pages: u32) -> Result<Run, PagesError> {
        self.alloc_from(pages, Fresh::Pending)
    }

    fn alloc_from(&self, pages: u32, how: Fresh) -> Result<Run, PagesError> {
        if pages == 0 || pages > MAX_RUN_PAGES {
            return Err(PagesError::RunLength(pages));
        }
        let want = pages as usize;
        let mut inner = self.lock();
        if let Some(limit) = self.limit_pages {
            if inner.pages_out + want > limit {
                return Err(PagesError::LimitReached { limit });
            }
        }
        if how != Fresh::Clean {
            // From cached to pending for `Fresh::Pending`: the bound counts
            // both alike.
            let stamp = inner.next_stamp();
            let split = (self.retain_divisor() != 0).then_some(self.page_size);
            if let Some(ptr) = inner.cache.take(pages, how == Fresh::Pending, stamp, split) {
                inner.cache_hits += 1;
                inner.pages_out += want;
                return Ok(Run { ptr, pages });
            }
        }
        if let Some(limit) = self.limit_pages {
            // Fresh pages would take pages out plus cached pages over the
            // limit: give the cache back first.
            // The batch may let the lock go between chunks, and others may
            // take or free pages meanwhile: check again after it.
            loop {
                let cached = inner.cache.cached_pages();
                if cached == 0 || inner.pages_out + cached + want <= limit {
                    break;
                }
                inner = self.release_all(inner).0;
            }
            if inner.pages_out + want > limit {
                return Err(PagesError::LimitReached { limit });
            }
        }
        let ptr = match inner.free.take(pages) {
            Some(ptr) => ptr,
            None => {
                let bytes = pages as usize * self.page_size;
                let inner = &mut *inner;
                let frontier = match how {
                    Fresh::Dense => &mut inner.dense,
                    Fresh::Clean | Fresh::Pending => &mut inner.sparse,
                };
                frontier.carve(bytes, &mut inner.chunks)?
            }
        };
        inner.pages_out += want;
        Ok(Run { ptr, pages })
    }

    /// Takes a run back into the cache (all its pages may be resident); the
    /// cache and pending pages are released in one batch if this takes them
    /// over their bound.
    ///
    /// The caller must hold no reference into the run's memory: the run may
    /// be handed to another caller, or its pages dropped, at any time. The
    /// type system cannot check this for raw pointers, which is why
    /// dereferencing them was `unsafe` in the first place.
    pub fn free(&self, run: Run) {
        let pages = run.pages;
        self.free_resident(run, pages);
    }

    /// As [`PageSource::free`], for a run of which only the first `resident`
    /// pages may be resident: the caller discarded the others (immediately or
    /// with [`PageSource::discard_later`]) and has not touched them since.
    /// The bound counts the pages that may be resident.
    pub fn free_resident(&self, run: Run, resident: u32) {
        let mut resident = resident.min(run.pages);
        let mut inner = self.lock();
        inner.pages_out -= run.pages as usize;
        if let Some(end) = inner.cache.forget_pending(run.ptr.as_ptr() as usize) {
            // Its pending tail is still resident: it goes with the run.
            resident = resident.max(end);
        }
        if resident == 0 {
            inner.free.push(run.pages, run.ptr);
            inner.give_back_whole_pieces();
            return;
        }
        let stamp = inner.next_stamp();
        inner.cache.put(run.ptr, run.pages, resident, stamp);
        drop(self.release_if_over(inner).0);
    }

    /// Gives up pages `first..first + count` of `run`, which stays out,
    /// without a system call: they are released with the next batch (see the
    /// module documentation). Until then their bytes stay as they were; after,
    /// they read as zero. Out-of-range pages are clamped to the run.
    ///
    /// The holder must not touch these pages again before calling
    /// [`PageSource::reclaim`] for them: a batch may drop them at any time.
    /// A range that neither touches nor overlaps the run's pending pages is
    /// released at once (a run has one pending range, its tail).
    pub fn discard_later(&self, run: &Run, first: u32, count: u32) {
        let end = first.saturating_add(count).min(run.pages);
        if first >= end {
            return;
        }
        let key = run.ptr.as_ptr() as usize;
        let mut inner = self.lock();
        let stamp = inner.next_stamp();
        if !inner.cache.add_pending(key, first, end, stamp) {
            drop(inner);
            self.discard(run, first, count);
            return;
        }
        drop(self.release_if_over(inner).0);
    }

    /// Takes back pages below `upto` of `run` that were given up with
    /// [`PageSource::discard_later`] and not yet released; the holder calls
    /// it before touching them again. Pages already released read as zero,
    /// the others keep their bytes. Returns true if pages of the run from
    /// `upto` on are still pending.
    pub fn reclaim(&self, run: &Run, upto: u32) -> bool {
        let key = run.ptr.as_ptr() as usize;
        self.lock().cache.reclaim(key, upto)
    }

    /// Gives every cached run and every pending page back to the kernel now
    /// (one batch). Returns the pages released (those that may have been
    /// resident).
    pub fn flush(&self) -> usize {
        self.release_all(self.lock()).1
    }

    /// Sets the bound on cached plus pending pages while a [`Hold`] is
    /// taken (default [`DEFAULT_HOLD_BYTES`]; never below the cache's bound).
    pub fn set_hold_limit(&self, pages: usize) {
        self.hold_limit.store(pages, Ordering::Relaxed);
    }

    /// Raises the bound on cached plus pending pages to the hold limit until
    /// the returned guard drops; then the usual bound applies again (what is
    /// over it is released in one batch).
    ///
    /// For work that frees many runs in a burst, such as compaction: the runs
    /// it frees were resident when it started, so keeping them until it ends
    /// does not raise the resident set above where it was, and the burst
    /// costs one batch (one TLB shootdown) instead of one per bound's worth.
    pub fn hold(&self) -> Hold<'_> {
        self.lock().holds += 1;
        Hold(self)
    }

    /// Adds pages out over `divisor` to the bound on cached plus pending
    /// pages (0: nothing added, the default): the *retained* share, which
    /// scales with what the holders use, as the kernel's free page lists
    /// keep pages a freeing allocator gives back for the next one that asks.
    /// What is over the new bound is released now.
    ///
    /// With a divisor, releases go by epochs: what is over the bound is
    /// released oldest epoch first (everything only if that is not enough),
    /// and [`PageSource::decay`] (or the time set by
    /// [`PageSource::set_decay_interval`], checked at the next free) releases
    /// what was not reused since the previous decay. So the resident set
    /// exceeds the pages out by at most the fixed bound plus pages out over
    /// `divisor` (the hold limit during a [`Hold`]).
    pub fn set_retain_divisor(&self, divisor: usize) {
        self.retain_divisor.store(divisor, Ordering::Relaxed);
        drop(self.release_if_over(self.lock()).0);
    }

    /// The retained share's divisor (0: none).
    pub fn retain_divisor(&self) -> usize {
        self.retain_divisor.load(Ordering::Relaxed)
    }

    /// Sets how long pages may stay cached or pending without a decay call
    /// when retention is on ([`PageSource::set_retain_divisor`]; default
    /// [`DEFAULT_DECAY_MS`]; zero: only [`PageSource::decay`] calls decay).
    /// Checked when pages are freed or given up, not by a thread: a source
    /// nobody frees into keeps what it holds, within the bound.
    pub fn set_decay_interval(&self, interval: Duration) {
        let ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
        self.decay_ms.store(ms, Ordering::Relaxed);
    }

    /// Ends an epoch: releases, in one batch, every cached run and pending
    /// page given up before the epoch now ending began (not reused for a
    /// whole epoch), then starts a new one. Returns the pages released. An
    /// allocator calls it at the end of a background compaction, so that
    /// pages a compaction gives back stay resident until the next one, for
    /// the stores that fill them again in between. Without a retained share
    /// ([`PageSource::set_retain_divisor`]) there are no epochs: it does
    /// nothing and returns 0.
    pub fn decay(&self) -> usize {
        if self.retain_divisor() == 0 {
            return 0;
        }
        self.decay_locked(self.lock()).1
    }

    /// With a retained share, [`PageSource::flush`] (memory is tight: every
    /// page kept goes back now). Without one, nothing (returns 0): the fixed
    /// cache alone is released by its own bound.
    pub fn release_retained(&self) -> usize {
        if self.retain_divisor() == 0 {
            0
        } else {
            self.flush()
        }
    }

    fn decay_locked<'a>(&'a self, mut inner: Guard<'a>) -> (Guard<'a>, usize) {
        let before = inner.epoch_start;
        // The new epoch begins before the release, which may let the lock
        // go: a free meanwhile must not find a decay due again.
        inner.epoch_start = inner.stamp + 1;
        inner.last_decay = Instant::now();
        inner.decays += 1;
        let (inner, mut released) = self.release_before(inner, before);
        // What a compaction freed under its hold may be over the bound.
        let (inner, over) = self.release_if_over(inner);
        released += over;
        (inner, released)
    }

    /// Pages out over the retained share's divisor (0 without one).
    fn retained_share(&self, inner: &Inner) -> usize {
        match self.retain_divisor() {
            0 => 0,
            d => inner.pages_out / d,
        }
    }

    /// Releases what is over the bound (see [`PageSource::set_retain_divisor`]
    /// for which pages go first), and the decay if one is due. Returns the
    /// pages released. While another thread is releasing a batch (it let
    /// the lock go between two chunks), does nothing: that thread checks the
    /// bound again when its batch ends.
    fn release_if_over<'a>(&'a self, mut inner: Guard<'a>) -> (Guard<'a>, usize) {
        let mut released = 0;
        loop {
            if inner.releasing > 0 {
                return (inner, released);
            }
            let retaining = self.retain_divisor() != 0;
            if retaining {
                let ms = self.decay_ms.load(Ordering::Relaxed);
                if ms != 0 && inner.last_decay.elapsed() >= Duration::from_millis(ms) {
                    let (g, n) = self.decay_locked(inner);
                    inner = g;
                    released += n;
                    continue;
                }
            }
            let mut limit = self.cache_limit() + self.retained_share(&inner);
            if inner.holds > 0 {
                limit = limit.max(self.hold_limit.load(Ordering::Relaxed));
            }
            if inner.held() <= limit {
                return (inner, released);
            }
            let cutoff = if retaining {
                // Keep the newest (what the stores are likeliest to take
                // again) up to three quarters of the bound, so that the next
                // batch is not due at the next free; release the rest,
                // oldest first, in one batch.
                let keep = limit - limit / 4;
                let mut stamps = inner.cache.stamps();
                stamps.sort_unstable_by_key(|&(stamp, _)| std::cmp::Reverse(stamp));
                let mut kept = 0;
                let mut cutoff = 0;
                for (stamp, pages) in stamps {
                    if kept + pages > keep {
                        cutoff = stamp + 1;
                        break;
                    }
                    kept += pages;
                }
                cutoff
            } else {
                u64::MAX
            };
            let (g, n) = self.release_before(inner, cutoff);
            inner = g;
            released += n;
            // Pages given up while the batch let the lock go may have taken
            // the source over its bound again: check once more.
        }
    }

    /// Releases the cache and the pending pages as one batch (see
    /// `release_before`), and puts the cached runs in the free lists.
    fn release_all<'a>(&'a self, inner: Guard<'a>) -> (Guard<'a>, usize) {
        self.release_before(inner, u64::MAX)
    }

    /// Releases, as one batch, the cached runs and pending pages given up
    /// before stamp `before` (and before this call), and puts those cached
    /// runs in the free lists; returns the pages released (those that may
    /// have been resident). The batch goes oldest first, in chunks of at
    /// most [`RELEASE_CHUNK_PAGES`] pages that may be resident (a cached
    /// run is advised whole, its pages past those that may be resident
    /// included), each released with the lock held (see the lock order in
    /// the crate documentation); between two chunks, threads waiting for
    /// the lock are let in.
    fn release_before<'a>(&'a self, mut inner: Guard<'a>, before: u64) -> (Guard<'a>, usize) {
        // Only what was given up before the batch began, so that pages given
        // up while the lock is let go do not keep it going.
        let before = before.min(inner.stamp + 1);
        let mut stamps: Vec<(u64, usize)> = inner
            .cache
            .stamps()
            .into_iter()
            .filter(|&(stamp, _)| stamp < before)
            .collect();
        if stamps.is_empty() {
            return (inner, 0);
        }
        inner.batches += 1;
        // The chunks' cutoffs, planned once, oldest first. While the lock is
        // let go, entries given up before `before` can only be taken back,
        // merged into newer ones or split (a split's rest keeps its stamp),
        // never added, so each chunk releases at most what was planned.
        stamps.sort_unstable();
        let mut cutoffs = Vec::new();
        let mut pages = 0;
        for &(stamp, n) in &stamps {
            if pages > 0 && pages + n > RELEASE_CHUNK_PAGES {
                cutoffs.push(stamp);
                pages = 0;
            }
            pages += n;
        }
        cutoffs.push(before);
        let mut released = 0;
        inner.releasing += 1;
        for (i, &cutoff) in cutoffs.iter().enumerate() {
            if i > 0 && self.waiting.load(Ordering::Relaxed) > 0 {
                drop(inner);
                let start = Instant::now();
                while self.waiting.load(Ordering::Relaxed) > 0 && start.elapsed() < LET_IN {
                    std::thread::yield_now();
                }
                inner = self.lock();
            }
            let held = inner.held();
            self.release_chunk(&mut inner, cutoff);
            released += held - inner.held();
        }
        inner.releasing -= 1;
        (inner, released)
    }

    /// Releases, with the lock held, the cached runs and pending pages given
    /// up before stamp `before`, and puts those cached runs in the free
    /// lists.
    fn release_chunk(&self, inner: &mut Inner, before: u64) {
        let mut ranges = inner.cache.ranges(self.page_size, before);
        if ranges.is_empty() {
            return;
        }
        release::coalesce(&mut ranges);
        // SAFETY: every range lies in runs this source carved from its own
        // private anonymous mappings, which it holds until it drops. Cached
        // runs were freed by their holders, who keep no reference into them
        // (`free`'s contract). Pending pages were given up by the holders of
        // their runs, who touch them again only after `reclaim`, which waits
        // for this lock, held until the pages are dropped and the pending
        // entries cleared.
        unsafe { release::advise_dontneed(&ranges, &self.counters) };
        inner.runs_released += inner.cache.released(&mut inner.free, before);
        inner.give_back_whole_pieces();
    }

    /// Returns pages `first..first + count` of `run` to the kernel at once
    /// (one system call) while the run stays out. They read as zero when
    /// touched again. Out-of-range pages are clamped to the run.
    pub fn discard(&self, run: &Run, first: u32, count: u32) {
        let end = first.saturating_add(count).min(run.pages);
        if first >= end {
            return;
        }
        let range = Range {
            addr: run.ptr.as_ptr() as usize + first as usize * self.page_size,
            len: (end - first) as usize * self.page_size,
        };
        // SAFETY: `first < end <= run.pages`, so the range lies in the run,
        // inside a mapping this source holds; the holder gives these pages up
        // by calling `discard` (they read as zero afterwards, as documented).
        unsafe { release::advise_dontneed(&[range], &self.counters) };
    }
}

/// A raised bound on a source's cached and pending pages (see
/// [`PageSource::hold`]).
#[must_use = "the bound is raised only while the hold is kept"]
pub struct Hold<'a>(&'a PageSource);

impl fmt::Debug for Hold<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hold")
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let mut inner = self.0.lock();
        inner.holds -= 1;
        drop(self.0.release_if_over(inner).0);
    }
}

impl Drop for PageSource {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        for chunk in inner.chunks.drain(..) {
            if chunk.reserved {
                // SAFETY: a piece this source took from the reserve and gives
                // back once, here; as below, no run of it is in use.
                unsafe { reserve::give_piece(chunk.base) };
                continue;
            }
            // SAFETY: each chunk is a mapping made by a frontier and unmapped
            // only here; `&mut self` means no run of this source is in use
            // through it (runs outliving the source are documented as unmapped).
            unsafe {
                libc::munmap(chunk.base.as_ptr().cast(), chunk.len);
            }
        }
    }
}
