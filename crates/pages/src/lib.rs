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
//! compaction frees hundreds of zspages takes hundreds of interrupts (what
//! that does to a reader's tail is `zmem bench read-latency`'s, in
//! BENCHMARKS.md). So
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
//!   coalesced, and given to the kernel by one `process_madvise` call per
//!   chunk of at most 256 pages (see the lock order below), which recent
//!   kernels (6.16+) turn into a single TLB shootdown (one `madvise` per
//!   range where that call is refused; see `release.rs`).
//!   Released runs join the free lists.
//! - [`PageSource::hold`] raises the bound (to [`DEFAULT_HOLD_BYTES`] by
//!   default) for a burst of frees such as a compaction: the runs it frees
//!   were resident when it started, so keeping them to its end does not
//!   raise the resident set above where it was, and the whole burst costs
//!   one batch.
//! - [`PageSource::flush`] releases everything cached and pending now (an
//!   allocator calls it after compaction and when it holds nothing).
//! - [`PageSource::set_retain_divisor`] adds a *retained share* to the
//!   bound: pages out over the divisor, so the pages kept grow with what the
//!   holders use, as the kernel's free page lists keep what one allocator
//!   frees for the next (zsmalloc's default mode keeps 1/8: a churning
//!   workload's stores then take the pages compaction and the trim gave up
//!   without a page fault). With a share, a batch over the bound releases the
//!   oldest pages first and keeps the newest three quarters of the bound, a
//!   longer cached run is split for a shorter request, and pages *decay*:
//!   [`PageSource::decay`] (an allocator's background compaction calls it
//!   at its end), or [`DEFAULT_DECAY_MS`] without one, noticed at the next
//!   free, releases what was not reused since the previous decay.
//!
//! So the resident set exceeds what the holders use by at most the bound
//! (the fixed part plus the retained share; the hold limit during a hold), and the number of shootdowns falls from
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
//! Lock order: under the source's mutex only the locked reserve's (a
//! source takes and gives its pieces with its own held), which is a leaf. A
//! batch is released oldest first in chunks of at most 256 pages, each with
//! the mutex held, so that [`PageSource::reclaim`] (which takes it) cannot
//! return while pages it reclaims are being dropped; between two chunks the
//! releasing thread lets the threads waiting for the mutex take it (up to
//! 50 µs), so an allocation, free or reclaim waits for one chunk, not for a
//! whole batch (a compaction's hold is up to 16 MiB). A free let in does not
//! start a batch of its own (the releasing thread checks the bound again
//! when its batch ends), and a decay starts its new epoch before it
//! releases, so one let in never finds a decay due again.
//!
//! # Files
//!
//! One mechanism each: `source.rs` (the [`PageSource`] facade: the mutex,
//! limits, bounds and counters), `free_runs.rs` (free runs by length),
//! `cache.rs` (the resident cache and pending discards), `frontier.rs`
//! (fresh address space), `release.rs` (batched release), `tests.rs`. This
//! file holds the shared types: [`Run`], [`PagesError`] and the constants.

mod cache;
mod free_runs;
mod frontier;
mod release;
pub mod reserve;
mod source;
#[cfg(test)]
mod tests;

use std::fmt;
use std::ptr::NonNull;

pub use source::{Hold, PageSource, SourceStats};

/// The longest run, in pages, a source hands out (zsmalloc's longest
/// zspage: 16 pages for classes of at most a page, 64 for the multi-page
/// classes of a compression unit larger than a page).
pub const MAX_RUN_PAGES: u32 = 64;

/// The default bound of the cache of freed runs, in bytes (see the module
/// documentation; `BENCHMARKS.md` has the measurements behind it).
pub const DEFAULT_CACHE_BYTES: usize = 1 << 20;

/// The default bound while a [`Hold`] is taken, in bytes.
pub const DEFAULT_HOLD_BYTES: usize = 16 << 20;

/// The default time, in milliseconds, after which cached and pending pages a
/// retaining source kept through a whole epoch are released without a call
/// to [`PageSource::decay`] (see [`PageSource::set_decay_interval`]).
pub const DEFAULT_DECAY_MS: u64 = 1000;

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
    /// No piece of the locked reserve is ready ([`reserve`]): all are
    /// taken and the refill has not made another from free memory, or the
    /// reserve is used up. Returned at once, never after a wait.
    ReserveExhausted {
        /// Bytes of the reserve locked when it happened.
        bytes: u64,
    },
    /// The locked reserve cannot be made (the reason).
    Reserve(String),
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
            PagesError::ReserveExhausted { bytes } => {
                write!(
                    f,
                    "no piece of the locked reserve is ready ({bytes} bytes locked, all taken)"
                )
            }
            PagesError::Reserve(why) => write!(f, "locked reserve: {why}"),
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
