//! Page runs from the operating system for zmem's allocators.
//!
//! This crate owns every call that maps, advises or unmaps memory. An
//! allocator asks a [`PageSource`] for a [`Run`]: `n` contiguous pages of the
//! source's page size. Freed runs go back to the kernel (`MADV_DONTNEED`), so
//! the process's resident set follows what the allocators hold, and their
//! address ranges are kept for reuse. An allocator can also give back part of
//! a run it keeps ([`PageSource::discard`], [`PageSource::discard_later`]).
//!
//! Address space is reserved in large chunks with `MAP_NORESERVE`. A run from
//! [`PageSource::alloc_clean`] costs memory only as its pages are touched;
//! fresh runs from [`PageSource::alloc`], whose holders write every page at
//! once, come from a frontier populated ahead with transparent huge pages,
//! which costs the kernel one fault per 2 MiB instead of one per page
//! (`frontier.rs` explains how huge pages are kept from covering pages
//! nobody counts). Free runs are kept by length and split when a shorter run
//! is wanted, so the address space a source holds is bounded by its peak use.
//!
//! # Giving pages back in batches
//!
//! Giving pages back costs more than the system call: the kernel must shoot
//! their translations out of the TLB of every CPU the process runs on, with
//! an interrupt to each. A thread reading objects on another CPU while
//! compaction frees hundreds of zspages takes hundreds of interrupts (this
//! made a reader's p99.9 latency 11x worse in `zmem bench read-latency`). So
//! pages are not given back one run at a time:
//!
//! - [`PageSource::free`] puts a freed run in a small cache, still resident.
//!   [`PageSource::alloc`] hands out a cached run of the requested length
//!   first: no system call, no page fault, no interrupt. Its bytes are
//!   whatever the previous holder left (zsmalloc, like the kernel's
//!   `alloc_page` without `__GFP_ZERO`, writes before it reads). A caller
//!   that needs zero-filled pages none of which is resident calls
//!   [`PageSource::alloc_clean`], which never takes from the cache.
//! - [`PageSource::discard_later`] gives up the tail of a run that stays
//!   out, without a system call: the pages are *pending*. The holder must not
//!   touch them until it calls [`PageSource::reclaim`], which cancels what is
//!   still pending (and waits for a release in progress).
//! - Cached and pending pages share one bound ([`PageSource::set_cache_limit`],
//!   default [`DEFAULT_CACHE_BYTES`]). When they pass it, all of them are
//!   released in one batch: the ranges sorted by address, adjacent ones
//!   coalesced, and all given to the kernel by one `process_madvise` call,
//!   which recent kernels (6.16+) turn into a single TLB shootdown (one
//!   `madvise` per range where that call is refused; see `release.rs`).
//!   Released runs join the free lists.
//! - [`PageSource::hold`] raises the bound (to [`DEFAULT_HOLD_BYTES`] by
//!   default) for a burst of frees such as a compaction: the runs it frees
//!   were resident when it started, so keeping them to its end does not
//!   raise the resident set above where it was, and the whole burst costs
//!   one batch.
//! - [`PageSource::flush`] releases everything cached and pending now (an
//!   allocator calls it after compaction and when it holds nothing).
//!
//! So the resident set exceeds what the holders use by at most the bound
//! (the hold limit during a hold), and the number of shootdowns falls from
//! one per run to one per batch. [`PageSource::discard`] remains for an
//! immediate release (one call).
//!
//! # Accounting
//!
//! - [`PageSource::pages_out`] counts pages in runs handed out and not
//!   freed; cached runs are not out, pending pages are (their run is).
//! - The limit given to [`PageSource::new`] is on pages out, as before the
//!   cache: an allocation fails only if the pages out would pass it. Cached
//!   pages never make it fail, but they count towards the memory the limit
//!   bounds: when a run must come from outside the cache and pages out plus
//!   cached plus the request would pass the limit, the cache is released
//!   first. So pages out plus cached pages stay within the limit.
//!
//! What it must not do: look inside the memory it hands out, or know what an
//! allocator keeps there. Any read or write through a [`Run`]'s pointer is the
//! caller's business and its own `unsafe`.
//!
//! Lock order: the source's mutex is a leaf; nothing is locked under it. A
//! batch is released with the mutex held, so that [`PageSource::reclaim`]
//! (which takes it) cannot return while pages it reclaims are being dropped.

mod frontier;
mod release;

use std::collections::HashMap;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use frontier::{Chunk, Frontier, Use};
use release::{Counters, Range};

/// The longest run, in pages, a source hands out (zsmalloc's longest chain).
pub const MAX_RUN_PAGES: u32 = 16;

/// The default bound of the cache of freed runs, in bytes (see the module
/// documentation; `BENCHMARKS.md` has the measurements behind it).
pub const DEFAULT_CACHE_BYTES: usize = 1 << 20;

/// The default bound while a [`Hold`] is taken, in bytes.
pub const DEFAULT_HOLD_BYTES: usize = 16 << 20;

/// A failure to provide pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PagesError {
    /// The page size is not a power of two multiple of the OS page size, or
    /// larger than 64 KiB.
    PageSize(usize),
    /// The run length is 0 or above [`MAX_RUN_PAGES`].
    RunLength(u32),
    /// The operating system refused to map more memory (errno given).
    OutOfMemory(i32),
    /// The source's page limit would be passed.
    LimitReached {
        /// The limit, in pages.
        limit: usize,
    },
}

impl fmt::Display for PagesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PagesError::PageSize(p) => write!(
                f,
                "page size {p} is not a power-of-two multiple of the system page size up to 65536"
            ),
            PagesError::RunLength(n) => {
                write!(f, "run of {n} pages is outside 1..={MAX_RUN_PAGES}")
            }
            PagesError::OutOfMemory(errno) => write!(
                f,
                "the system refused more memory: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            PagesError::LimitReached { limit } => {
                write!(f, "the page limit of {limit} pages is reached")
            }
        }
    }
}

impl std::error::Error for PagesError {}

/// `n` contiguous pages handed out by a [`PageSource`].
///
/// A run is a token: it does not free itself when dropped (pass it back to
/// [`PageSource::free`]); a run still out when its source is dropped is
/// unmapped with the source.
#[derive(Debug)]
pub struct Run {
    ptr: NonNull<u8>,
    pages: u32,
}

// SAFETY: a `Run` is an address and a length; it grants no access by itself
// (dereferencing its pointer is the holder's own unsafe operation), so moving
// or sharing it between threads cannot cause a data race.
unsafe impl Send for Run {}
// SAFETY: as for `Send`: `&Run` only exposes the address and the length.
unsafe impl Sync for Run {}

impl Run {
    /// The first byte of the run.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in pages.
    pub fn pages(&self) -> u32 {
        self.pages
    }
}

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
    /// Free runs by length in pages (index 0 unused). Their pages are not resident.
    free: Vec<Vec<NonNull<u8>>>,
    /// Cached runs by length in pages (index 0 unused), newest last. Their
    /// pages may be resident.
    cache: Vec<Vec<Cached>>,
    /// Pages of cached runs that may be resident.
    cached_pages: usize,
    /// Pending tails of runs that are out, by the run's address.
    pending: HashMap<usize, Pending>,
    /// Pages in `pending`.
    pending_pages: usize,
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
    /// [`Hold`]s taken and not dropped.
    holds: usize,
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
    /// The bound on cached plus pending pages.
    pub cache_limit_pages: usize,
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
    counters: Counters,
    inner: Mutex<Inner>,
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

/// The operating system's page size.
pub fn os_page_size() -> usize {
    // SAFETY: sysconf has no preconditions; it only reads a constant.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
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
        fn by_length<T>() -> Vec<Vec<T>> {
            (0..=MAX_RUN_PAGES).map(|_| Vec::new()).collect()
        }
        Ok(PageSource {
            page_size,
            limit_pages,
            cache_limit: AtomicUsize::new(
                (DEFAULT_CACHE_BYTES / page_size).max(MAX_RUN_PAGES as usize),
            ),
            hold_limit: AtomicUsize::new(DEFAULT_HOLD_BYTES / page_size),
            counters: Counters::default(),
            inner: Mutex::new(Inner {
                chunks: Vec::new(),
                free: by_length(),
                cache: by_length(),
                cached_pages: 0,
                pending: HashMap::new(),
                pending_pages: 0,
                sparse: Frontier::new(Use::Sparse),
                dense: Frontier::new(Use::Dense),
                pages_out: 0,
                cache_hits: 0,
                runs_released: 0,
                batches: 0,
                holds: 0,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic under this lock leaves `Inner` consistent (every update is a
        // single push, pop or add), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
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
        self.lock().cached_pages
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
        let mut inner = self.lock();
        self.release_if_over(&mut inner);
    }

    /// The source's counters.
    pub fn stats(&self) -> SourceStats {
        let inner = self.lock();
        SourceStats {
            pages_out: inner.pages_out,
            cached_pages: inner.cached_pages,
            pending_pages: inner.pending_pages,
            cache_limit_pages: self.cache_limit(),
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
            if let Some(c) = inner.cache[want].pop() {
                inner.cached_pages -= c.resident as usize;
                inner.cache_hits += 1;
                inner.pages_out += want;
                if how == Fresh::Pending {
                    // From cached to pending: the bound counts both alike.
                    let key = c.ptr.as_ptr() as usize;
                    let tail = Pending {
                        from: 0,
                        end: c.resident,
                    };
                    inner.pending.insert(key, tail);
                    inner.pending_pages += c.resident as usize;
                }
                return Ok(Run { ptr: c.ptr, pages });
            }
        }
        if let Some(limit) = self.limit_pages {
            // Fresh pages would take pages out plus cached pages over the
            // limit: give the cache back first.
            if inner.cached_pages > 0 && inner.pages_out + inner.cached_pages + want > limit {
                self.release_all(&mut inner);
            }
        }
        let ptr = match self.take_free(&mut inner, pages) {
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

    /// A free run of exactly `pages`, or the front of a longer one split.
    fn take_free(&self, inner: &mut Inner, pages: u32) -> Option<NonNull<u8>> {
        let want = pages as usize;
        if let Some(ptr) = inner.free[want].pop() {
            return Some(ptr);
        }
        let longer = (want + 1..inner.free.len()).find(|&n| !inner.free[n].is_empty())?;
        let ptr = inner.free[longer].pop()?;
        // SAFETY: `ptr` starts a free run of `longer` pages inside one chunk,
        // so the address `want` pages further is inside the same chunk.
        let rest = unsafe { ptr.add(want * self.page_size) };
        inner.free[longer - want].push(rest);
        Some(ptr)
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
        if let Some(p) = inner.pending.remove(&(run.ptr.as_ptr() as usize)) {
            // Its pending tail is still resident: it goes with the run.
            inner.pending_pages -= (p.end - p.from) as usize;
            resident = resident.max(p.end);
        }
        if resident == 0 {
            inner.free[run.pages as usize].push(run.ptr);
            return;
        }
        inner.cache[run.pages as usize].push(Cached {
            ptr: run.ptr,
            pages: run.pages,
            resident,
        });
        inner.cached_pages += resident as usize;
        self.release_if_over(&mut inner);
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
        match inner.pending.get(&key).copied() {
            None => {
                inner.pending.insert(key, Pending { from: first, end });
                inner.pending_pages += (end - first) as usize;
            }
            Some(p) if first <= p.end && end >= p.from => {
                let merged = Pending {
                    from: p.from.min(first),
                    end: p.end.max(end),
                };
                inner.pending.insert(key, merged);
                inner.pending_pages += (merged.end - merged.from - (p.end - p.from)) as usize;
            }
            Some(_) => {
                drop(inner);
                self.discard(run, first, count);
                return;
            }
        }
        self.release_if_over(&mut inner);
    }

    /// Takes back pages below `upto` of `run` that were given up with
    /// [`PageSource::discard_later`] and not yet released; the holder calls
    /// it before touching them again. Pages already released read as zero,
    /// the others keep their bytes. Returns true if pages of the run from
    /// `upto` on are still pending.
    pub fn reclaim(&self, run: &Run, upto: u32) -> bool {
        let key = run.ptr.as_ptr() as usize;
        let mut inner = self.lock();
        let Some(p) = inner.pending.get(&key).copied() else {
            return false;
        };
        if upto <= p.from {
            return true;
        }
        let from = upto.min(p.end);
        inner.pending_pages -= (from - p.from) as usize;
        if from == p.end {
            inner.pending.remove(&key);
            false
        } else {
            inner.pending.insert(key, Pending { from, end: p.end });
            true
        }
    }

    /// Gives every cached run and every pending page back to the kernel now
    /// (one batch). Returns the pages released (those that may have been
    /// resident).
    pub fn flush(&self) -> usize {
        let mut inner = self.lock();
        let pages = inner.cached_pages + inner.pending_pages;
        self.release_all(&mut inner);
        pages
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

    fn release_if_over(&self, inner: &mut Inner) {
        let mut limit = self.cache_limit();
        if inner.holds > 0 {
            limit = limit.max(self.hold_limit.load(Ordering::Relaxed));
        }
        if inner.cached_pages + inner.pending_pages > limit {
            self.release_all(inner);
        }
    }

    /// Releases the cache and the pending pages as one batch, with the lock
    /// held (see the lock order in the module documentation), and puts the
    /// cached runs in the free lists.
    fn release_all(&self, inner: &mut Inner) {
        let mut ranges = Vec::new();
        for runs in inner.cache.iter() {
            // Whole runs, even where only a prefix may be resident: advising
            // pages already dropped costs nothing and joins more neighbours.
            ranges.extend(runs.iter().map(|c| Range {
                addr: c.ptr.as_ptr() as usize,
                len: c.pages as usize * self.page_size,
            }));
        }
        ranges.extend(inner.pending.iter().map(|(&addr, p)| Range {
            addr: addr + p.from as usize * self.page_size,
            len: (p.end - p.from) as usize * self.page_size,
        }));
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
        inner.pending.clear();
        inner.pending_pages = 0;
        inner.batches += 1;
        for len in 1..inner.cache.len() {
            let runs = std::mem::take(&mut inner.cache[len]);
            inner.runs_released += runs.len() as u64;
            inner.free[len].extend(runs.into_iter().map(|c| c.ptr));
        }
        inner.cached_pages = 0;
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
        self.0.release_if_over(&mut inner);
    }
}

impl Drop for PageSource {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        for chunk in inner.chunks.drain(..) {
            // SAFETY: each chunk is a mapping made by a frontier and unmapped
            // only here; `&mut self` means no run of this source is in use
            // through it (runs outliving the source are documented as unmapped).
            unsafe {
                libc::munmap(chunk.base.as_ptr().cast(), chunk.len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PS: usize = 4096;

    fn fill(run: &Run, value: u8) {
        // SAFETY: the run is `pages * PS` bytes long and held by this test alone.
        unsafe { std::ptr::write_bytes(run.as_ptr(), value, run.pages() as usize * PS) };
    }

    fn byte_at(run: &Run, offset: usize) -> u8 {
        assert!(offset < run.pages() as usize * PS);
        // SAFETY: `offset` is inside the run, which this test alone holds.
        unsafe { run.as_ptr().add(offset).read() }
    }

    /// Pages of `pages * PS` bytes from `addr` that are resident (mincore).
    fn resident(addr: *mut u8, pages: u32) -> usize {
        let os = os_page_size();
        let len = pages as usize * PS;
        let mut v = vec![0u8; len.div_ceil(os)];
        // SAFETY: the range lies in a mapping of the source under test, which
        // outlives this call; mincore only writes `v`, one byte per OS page.
        let rc = unsafe { libc::mincore(addr.cast(), len, v.as_mut_ptr()) };
        assert_eq!(rc, 0);
        v.iter().filter(|&&b| b & 1 != 0).count() * os / PS
    }

    #[test]
    fn fresh_runs_are_zeroed() {
        let src = PageSource::new(PS, None).unwrap();
        let a = src.alloc(3).unwrap();
        let b = src.alloc_clean(2).unwrap();
        assert_eq!(
            resident(b.as_ptr(), 2),
            0,
            "untouched clean pages cost nothing"
        );
        assert_eq!((byte_at(&a, 0), byte_at(&a, 3 * PS - 1)), (0, 0));
        assert_eq!((byte_at(&b, 0), byte_at(&b, PS + 5)), (0, 0));
    }

    /// `AnonHugePages` of the mapping that contains `addr`, in bytes.
    fn anon_huge_bytes_at(addr: *mut u8) -> usize {
        let addr = addr as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let head = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = head.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = (a..b).contains(&addr);
                    continue;
                }
            }
            if let (true, Some(v)) = (inside, line.strip_prefix("AnonHugePages:")) {
                let kb: usize = v.trim().trim_end_matches("kB").trim().parse().unwrap();
                return kb * 1024;
            }
        }
        panic!("no mapping contains {addr:#x}");
    }

    /// The kernel's count of huge-page faults that fell back to small pages.
    fn thp_fallbacks() -> u64 {
        let vmstat = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
        vmstat
            .lines()
            .find_map(|l| l.strip_prefix("thp_fault_fallback "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    #[test]
    fn the_dense_frontier_stays_within_one_window_of_what_is_out() {
        let src = PageSource::new(PS, None).unwrap();
        let runs: Vec<Run> = (0..300).map(|_| src.alloc(4).unwrap()).collect();
        let first = runs[0].as_ptr();
        // Runs are carved in address order from one chunk.
        let span = runs[299].as_ptr() as usize + 4 * PS - first as usize;
        assert_eq!(span, 1200 * PS);
        let window = frontier::huge_page_bytes().unwrap_or(0) / PS;
        let held = resident(first, (1200 + window) as u32);
        assert!(
            held <= 1200 + window,
            "{held} pages resident for 1200 out and a window of {window}"
        );
        if window > 0 {
            assert!(held >= 1200, "populated ahead: {held} of 1200");
        }
        for r in runs {
            src.free(r);
        }
        src.flush();
        assert_eq!(
            resident(first, 1200),
            0,
            "released parts of huge pages are dropped"
        );
    }

    #[test]
    fn dense_runs_use_huge_pages_where_the_system_offers_them() {
        let Some(window) = frontier::huge_page_bytes() else {
            eprintln!("skipped: transparent huge pages are not offered here");
            return;
        };
        let src = PageSource::new(PS, None).unwrap();
        let fallbacks = thp_fallbacks();
        let run = src.alloc(8).unwrap();
        let clean = src.alloc_clean(8).unwrap();
        // SAFETY: the run is 8 pages long and held by this test alone.
        unsafe { clean.as_ptr().write(1) };
        let huge = anon_huge_bytes_at(run.as_ptr());
        if huge == 0 {
            // The kernel may have had no free 2 MiB block; then it says so.
            assert!(
                thp_fallbacks() > fallbacks,
                "no huge page and no fallback counted: the window was not populated"
            );
            eprintln!("the kernel had no huge page to give (thp_fault_fallback rose)");
        } else {
            assert!(huge >= window, "{huge} bytes of huge pages");
        }
        // Mappings merge, so the clean run's may be the same as the dense
        // one's; its residency tells that no huge page backs it.
        assert_eq!(
            resident(clean.as_ptr(), 8),
            1,
            "touching a clean page faults in that page only"
        );
        src.free(run);
        src.free(clean);
    }

    #[test]
    fn a_cached_run_is_reused_without_a_system_call() {
        let src = PageSource::new(PS, None).unwrap();
        let a = src.alloc(3).unwrap();
        fill(&a, 0xab);
        let addr = a.as_ptr();
        src.free(a);
        assert_eq!(src.cached_pages(), 3);
        assert_eq!(src.pages_out(), 0);
        let b = src.alloc(3).unwrap();
        assert_eq!(
            b.as_ptr(),
            addr,
            "the cached run of the same length is reused"
        );
        assert_eq!(
            byte_at(&b, 2 * PS),
            0xab,
            "stale bytes: alloc does not zero"
        );
        assert_eq!(resident(addr, 3), 3);
        let st = src.stats();
        assert_eq!((st.cache_hits, st.advise_calls, st.cached_pages), (1, 0, 0));
        assert_eq!(st.pages_out, 3);
    }

    #[test]
    fn alloc_clean_never_takes_from_the_cache() {
        let src = PageSource::new(PS, None).unwrap();
        let a = src.alloc(3).unwrap();
        fill(&a, 0xab);
        let addr = a.as_ptr();
        src.free(a);
        let b = src.alloc_clean(3).unwrap();
        assert_ne!(b.as_ptr(), addr);
        assert_eq!(byte_at(&b, 0), 0);
        assert_eq!(src.cached_pages(), 3);
        // Once released, the run is clean and alloc_clean may have it.
        src.flush();
        let c = src.alloc_clean(3).unwrap();
        assert_eq!(c.as_ptr(), addr);
        assert_eq!((byte_at(&c, 0), byte_at(&c, 2 * PS)), (0, 0));
    }

    #[test]
    fn alloc_pending_reuses_a_cached_run_with_every_page_pending() {
        let src = PageSource::new(PS, None).unwrap();
        let a = src.alloc(4).unwrap();
        fill(&a, 0xcd);
        let addr = a.as_ptr();
        src.free(a);
        let b = src.alloc_pending(4).unwrap();
        assert_eq!(b.as_ptr(), addr, "the cached run is reused");
        let st = src.stats();
        assert_eq!(
            (st.cached_pages, st.pending_pages, st.cache_hits),
            (0, 4, 1)
        );
        // Taking back the first two pages: no system call, bytes kept.
        let calls = src.stats().advise_calls;
        assert!(src.reclaim(&b, 2), "pages 2 and 3 are still pending");
        assert_eq!(byte_at(&b, PS + 7), 0xcd);
        assert_eq!(src.stats().pending_pages, 2);
        // The rest goes with the next batch; the pages taken back stay.
        src.flush();
        assert_eq!(src.stats().advise_calls, calls + 1);
        assert_eq!(resident(b.as_ptr(), 4), 2);
        assert!(!src.reclaim(&b, 4), "nothing is pending after the batch");
        assert_eq!(byte_at(&b, 3 * PS), 0, "a released page reads as zero");
        src.free(b);
        // With nothing cached it is a clean fresh run.
        src.flush();
        let c = src.alloc_pending(2).unwrap();
        assert_eq!(resident(c.as_ptr(), 2), 0);
        assert_eq!(src.stats().pending_pages, 0);
        src.free(c);
    }

    #[test]
    fn the_bound_is_respected_and_released_in_batches() {
        let src = PageSource::new(PS, None).unwrap();
        src.set_cache_limit(8);
        let runs: Vec<Run> = (0..10).map(|_| src.alloc(2).unwrap()).collect();
        for r in &runs {
            fill(r, 1);
        }
        for (i, r) in runs.into_iter().enumerate() {
            src.free(r);
            let st = src.stats();
            assert!(
                st.cached_pages <= 8,
                "{} cached after free {i}",
                st.cached_pages
            );
        }
        // 5 runs (10 pages) pass the bound of 8: two batches of 5 runs.
        let st = src.stats();
        assert_eq!((st.batches, st.runs_released, st.cached_pages), (2, 10, 0));
        // The 10 runs were carved back to back: each batch is one range.
        assert_eq!(st.ranges_advised, 2);
    }

    #[test]
    fn adjacent_runs_are_released_as_one_range() {
        let src = PageSource::new(PS, None).unwrap();
        let runs: Vec<Run> = (0..4).map(|_| src.alloc(2).unwrap()).collect();
        let base = runs[0].as_ptr();
        for r in &runs {
            fill(r, 9);
        }
        assert_eq!(resident(base, 8), 8);
        // Freed out of address order: sorted, they still touch.
        let mut runs: Vec<Option<Run>> = runs.into_iter().map(Some).collect();
        for i in [2, 0, 3, 1] {
            src.free(runs[i].take().unwrap());
        }
        assert_eq!(src.flush(), 8);
        let st = src.stats();
        assert_eq!((st.ranges_advised, st.advise_calls), (1, 1));
        assert_eq!(resident(base, 8), 0);

        // Two runs with one still out between them: two ranges, given to the
        // kernel in one call where process_madvise works, one each otherwise.
        // (Runs of 3 pages: freshly carved, back to back.)
        let a = src.alloc(3).unwrap();
        let b = src.alloc(3).unwrap();
        let c = src.alloc(3).unwrap();
        assert_eq!(c.as_ptr(), a.as_ptr().wrapping_add(6 * PS));
        src.free(a);
        src.free(c);
        src.flush();
        let st2 = src.stats();
        assert_eq!(st2.ranges_advised - st.ranges_advised, 2);
        assert!((1..=2).contains(&(st2.advise_calls - st.advise_calls)));
        src.free(b);
    }

    #[test]
    fn flush_releases_everything() {
        let src = PageSource::new(PS, None).unwrap();
        let runs: Vec<Run> = (0..6).map(|i| src.alloc(1 + i % 3).unwrap()).collect();
        let spans: Vec<(*mut u8, u32)> = runs.iter().map(|r| (r.as_ptr(), r.pages())).collect();
        for r in &runs {
            fill(r, 5);
        }
        for r in runs {
            src.free(r);
        }
        let total: u32 = spans.iter().map(|s| s.1).sum();
        assert_eq!(src.cached_pages(), total as usize);
        assert!(spans.iter().all(|&(p, n)| resident(p, n) == n as usize));
        assert_eq!(src.flush(), total as usize);
        assert_eq!(src.cached_pages(), 0);
        assert!(spans.iter().all(|&(p, n)| resident(p, n) == 0));
        assert_eq!(src.flush(), 0, "nothing left");
        assert_eq!(src.stats().batches, 1, "an empty flush makes no batch");
    }

    #[test]
    fn a_zero_bound_releases_every_free_at_once() {
        let src = PageSource::new(PS, None).unwrap();
        src.set_cache_limit(0);
        let a = src.alloc(2).unwrap();
        fill(&a, 1);
        let addr = a.as_ptr();
        src.free(a);
        let st = src.stats();
        assert_eq!(
            (st.cached_pages, st.advise_calls, st.runs_released),
            (0, 1, 1)
        );
        assert_eq!(resident(addr, 2), 0);
    }

    #[test]
    fn lowering_the_bound_releases_what_is_over_it() {
        let src = PageSource::new(PS, None).unwrap();
        let a = src.alloc(4).unwrap();
        src.free(a);
        src.set_cache_limit(8);
        assert_eq!(src.cached_pages(), 4);
        src.set_cache_limit(2);
        assert_eq!(src.cached_pages(), 0);
    }

    #[test]
    fn a_hold_raises_the_bound_until_dropped() {
        let src = PageSource::new(PS, None).unwrap();
        src.set_cache_limit(4);
        src.set_hold_limit(100);
        let runs: Vec<Run> = (0..5).map(|_| src.alloc(2).unwrap()).collect();
        let hold = src.hold();
        for r in runs {
            src.free(r);
        }
        assert_eq!(src.cached_pages(), 10, "kept while held");
        assert_eq!(src.stats().batches, 0);
        drop(hold);
        let st = src.stats();
        assert_eq!(
            (st.cached_pages, st.batches),
            (0, 1),
            "one batch at the end"
        );
    }

    #[test]
    fn the_limit_counts_cached_pages_but_never_fails_because_of_them() {
        let src = PageSource::new(PS, Some(10)).unwrap();
        let a = src.alloc(8).unwrap();
        assert_eq!(
            src.alloc(3).unwrap_err(),
            PagesError::LimitReached { limit: 10 }
        );
        src.free(a);
        assert_eq!(src.cached_pages(), 8);
        // 3 fresh pages and 8 cached would pass 10: the cache goes first.
        let b = src.alloc(3).unwrap();
        assert_eq!(src.cached_pages(), 0);
        assert_eq!(src.pages_out(), 3);
        src.free(b);
        // A cached run of the right length is taken without a release.
        let c = src.alloc(3).unwrap();
        assert_eq!(src.stats().cache_hits, 1);
        src.free(c);
        assert!(src.alloc(10).is_ok());
    }

    #[test]
    fn bad_requests_are_errors() {
        let src = PageSource::new(PS, None).unwrap();
        assert_eq!(src.alloc(0).unwrap_err(), PagesError::RunLength(0));
        assert_eq!(src.alloc_clean(17).unwrap_err(), PagesError::RunLength(17));
        assert_eq!(
            PageSource::new(1000, None).unwrap_err(),
            PagesError::PageSize(1000)
        );
        assert_eq!(
            PageSource::new(131072, None).unwrap_err(),
            PagesError::PageSize(131072)
        );
    }

    #[test]
    fn longer_free_runs_are_split() {
        let src = PageSource::new(PS, None).unwrap();
        let a = src.alloc(8).unwrap();
        let base = a.as_ptr();
        src.free(a);
        src.flush();
        let b = src.alloc(3).unwrap();
        let c = src.alloc(5).unwrap();
        assert_eq!(b.as_ptr(), base);
        assert_eq!(c.as_ptr(), base.wrapping_add(3 * PS));
    }

    #[test]
    fn discard_zeroes_part_of_a_run_at_once() {
        let src = PageSource::new(PS, None).unwrap();
        let a = src.alloc(4).unwrap();
        fill(&a, 7);
        src.discard(&a, 2, 5);
        assert_eq!((byte_at(&a, PS), byte_at(&a, 2 * PS)), (7, 0));
        assert_eq!(src.stats().advise_calls, 1);
    }

    #[test]
    fn discard_later_is_released_with_the_next_batch() {
        let src = PageSource::new(PS, None).unwrap();
        let a = src.alloc(8).unwrap();
        fill(&a, 7);
        src.discard_later(&a, 6, 2);
        src.discard_later(&a, 4, 2); // touches the pending tail: merged
        let st = src.stats();
        assert_eq!((st.pending_pages, st.advise_calls), (4, 0));
        assert_eq!(byte_at(&a, 7 * PS), 7, "not released yet");
        // Pages 4 and 5 are wanted again.
        assert!(src.reclaim(&a, 6), "pages 6.. stay pending");
        assert!(src.reclaim(&a, 3), "nothing below 6 is pending");
        assert_eq!(src.stats().pending_pages, 2);
        assert_eq!(src.flush(), 2);
        assert_eq!(resident(a.as_ptr(), 8), 6);
        assert_eq!(
            (
                byte_at(&a, 5 * PS),
                byte_at(&a, 6 * PS),
                byte_at(&a, 7 * PS)
            ),
            (7, 0, 0)
        );
        assert!(!src.reclaim(&a, 8), "nothing pending after the batch");
        assert_eq!(src.stats().advise_calls, 1);
    }

    #[test]
    fn pending_pages_share_the_bound() {
        let src = PageSource::new(PS, None).unwrap();
        src.set_cache_limit(6);
        let a = src.alloc(8).unwrap();
        let b = src.alloc(4).unwrap();
        fill(&a, 1);
        src.discard_later(&a, 4, 4);
        src.free(b); // 4 pending + 4 cached > 6
        let st = src.stats();
        assert_eq!((st.pending_pages, st.cached_pages, st.batches), (0, 0, 1));
        assert_eq!(st.ranges_advised, 1, "a's tail and b touch: one range");
        assert_eq!(resident(a.as_ptr(), 4), 4);
    }

    #[test]
    fn a_freed_run_takes_its_pending_tail_along() {
        let src = PageSource::new(PS, None).unwrap();
        let a = src.alloc(8).unwrap();
        fill(&a, 1);
        src.discard_later(&a, 3, 5);
        src.free_resident(a, 3);
        let st = src.stats();
        assert_eq!((st.pending_pages, st.cached_pages), (0, 8));
        // A run whose tail was really released counts only its prefix.
        let b = src.alloc_clean(8).unwrap();
        fill(&b, 1);
        src.discard(&b, 2, 6);
        src.free_resident(b, 2);
        assert_eq!(src.cached_pages(), 10);
    }

    #[test]
    fn reclaimed_pages_are_never_dropped_under_a_writer() {
        // One thread gives up a run's tail and reclaims it to write a pattern,
        // which it checks; another flushes all the time. Whatever the
        // interleaving, a reclaimed page keeps what is written to it.
        let src = std::sync::Arc::new(PageSource::new(PS, None).unwrap());
        src.set_cache_limit(1 << 20);
        let run = src.alloc(8).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flusher = {
            let (src, stop) = (src.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    src.flush();
                }
            })
        };
        for round in 0..20_000u32 {
            let value = (round % 250) as u8 + 1;
            src.discard_later(&run, 2, 6);
            if round % 2 == 0 {
                std::thread::yield_now(); // a window for the flusher
            }
            src.reclaim(&run, 8);
            // SAFETY: pages 2..8 were reclaimed and the run is ours.
            unsafe { std::ptr::write_bytes(run.as_ptr().add(2 * PS), value, 6 * PS) };
            for page in 2..8 {
                assert_eq!(byte_at(&run, page * PS + 17), value, "round {round}");
            }
        }
        stop.store(true, Ordering::Relaxed);
        flusher.join().unwrap();
    }

    #[test]
    fn many_chunks() {
        let src = PageSource::new(65536, None).unwrap();
        let runs: Vec<Run> = (0..100).map(|_| src.alloc(16).unwrap()).collect();
        assert_eq!(src.pages_out(), 1600);
        for r in runs {
            src.free(r);
        }
        assert_eq!(src.pages_out(), 0);
        assert!(src.cached_pages() <= src.cache_limit());
    }
}
