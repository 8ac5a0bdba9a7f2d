//! Swap mode: what a server that may be its own kernel's swap device does
//! to itself before it serves, so that storing a page never needs a page
//! the kernel would have to find by swapping.
//!
//! A kernel that swaps onto this process waits for it to store the pages;
//! if the process then faults on memory the kernel does not have, the
//! fault's reclaim swaps out to the same process and waits for itself (or,
//! for a thread that may not start I/O, spins in reclaim). So in swap mode,
//! before any I/O thread starts:
//! - the pages the stores hold come from a locked reserve
//!   (`pages::reserve`): address space for the exports' `mem_limit`, its
//!   resident part ([`default_resident`], or `--swap-reserve`) populated
//!   and locked now, before any device is offered, and a thread that
//!   brings the ready pieces back to that size from free memory (or, over
//!   ublk when none is ready, from cache the kernel can drop without I/O),
//!   outside the I/O path; a write that finds no ready piece fails at once
//!   with an error the kernel sees, as the kernel's zram fails a write it
//!   has no memory for;
//! - the C heap never gives memory back, never maps a fresh region per
//!   allocation and is one arena for every thread (`M_TRIM_THRESHOLD`,
//!   `M_MMAP_MAX` 0, `M_ARENA_MAX` 1: a thread's own arena would grow by
//!   faults on the I/O path), and is grown ahead by the in-flight bound
//!   plus [`HEAP_SPARE_BYTES`] plus the stores' bookkeeping at their
//!   `mem_limit` ([`HEAP_PER_POOL_DIVISOR`]), and after that by the
//!   reserve's thread, from free memory, whenever its free top falls below
//!   [`HEAP_TOP_LOW_BYTES`], so that
//!   request buffers, compression contexts and the stores' bookkeeping
//!   are carved from resident, locked memory;
//! - every page the process has is locked, and so is every page it faults
//!   in later (`mlockall`, `MCL_FUTURE | MCL_ONFAULT`): none can be swapped
//!   out, onto itself or elsewhere. Writable mappings (heap, tables,
//!   buffers, stacks, data) are populated whole (`mlock`). Code and
//!   constants are populated whole too (`MCL_CURRENT`), except for a front
//!   end that runs its whole I/O path once before it announces a device
//!   (ublk: `ublk_exports::warm_up`): there they are locked as they are
//!   touched (`MCL_CURRENT | MCL_ONFAULT`), so that the pages a swap write
//!   executes are present and locked before the first one, and the rest
//!   of the binary is not (docs/serve.md says what a later first touch
//!   costs);
//! - `PR_SET_IO_FLUSHER` (Linux 5.6) marks the I/O threads as I/O flushers:
//!   the kernel neither makes their own allocations start I/O nor throttles
//!   them on the device they serve (the reserve's thread, started before,
//!   is not one: its faults are the ones allowed to wait for reclaim);
//! - `oom_score_adj` -1000: the OOM killer picks the programs whose pages
//!   fill the device, never the device;
//! - when writes keep failing (the reserve used up with no free memory to
//!   refill it, or `mem_limit` reached) for `oom_after` on end
//!   ([`StallWatch`]), the kernel's OOM killer is asked to run
//!   (`/proc/sysrq-trigger`, `f`): the kernel retries a failed swap write
//!   instead of counting the device full, so memory no one can free would
//!   otherwise end in a machine that swaps in a loop.
//!
//! This module applies those settings and reports them; the idle-memory
//! trimmer (`trim`) must not run in swap mode (the caller leaves it off).
//! Its `unsafe` code is C calls (`mallopt`, `mallinfo2`, `mlockall`, `mlock`,
//! `madvise`, `prctl`, and `pthread_getattr_np` to find a thread's stack),
//! each with its SAFETY argument.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Why swap mode could not be entered: the setting the kernel or the C
/// library refused. Nothing is undone (the caller exits).
#[derive(Debug)]
pub enum SwapError {
    /// A system call or a /proc file refused.
    Os {
        /// What was asked (`mlockall`, `mlock RANGE`, `oom_score_adj -1000`).
        what: String,
        /// The error.
        error: io::Error,
        /// What the call needs, for the message (empty: nothing to add).
        needs: &'static str,
    },
    /// The C heap cannot be kept from shrinking (glibc refused a tunable,
    /// or the C library is not glibc).
    Heap(&'static str),
    /// The locked reserve could not be made.
    Reserve(pages::PagesError),
    /// The reserve's refill thread could not be started.
    Thread(io::Error),
}

impl SwapError {
    fn os(what: impl Into<String>, error: io::Error, needs: &'static str) -> SwapError {
        SwapError::Os {
            what: what.into(),
            error,
            needs,
        }
    }
}

impl fmt::Display for SwapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SwapError::Os {
                what,
                error,
                needs: "",
            } => write!(f, "{what}: {error}"),
            SwapError::Os { what, error, needs } => write!(f, "{what}: {error} ({needs})"),
            SwapError::Heap(why) => f.write_str(why),
            SwapError::Reserve(e) => write!(f, "{e}"),
            SwapError::Thread(e) => write!(f, "cannot start a thread: {e}"),
        }
    }
}

impl std::error::Error for SwapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SwapError::Os { error, .. } | SwapError::Thread(error) => Some(error),
            SwapError::Reserve(e) => Some(e),
            SwapError::Heap(_) => None,
        }
    }
}

/// Bytes the C heap is grown by beyond the in-flight bound: per-CPU
/// compression contexts (lz4's are 16 KiB, zstd's about 1.3 MiB at level 3),
/// reply headers and the page sources' bookkeeping, with room to spare.
pub(crate) const HEAP_SPARE_BYTES: u64 = 4 << 20;

/// The free bytes at the C heap's top below which the reserve's thread
/// grows the heap again ([`HEAP_TOP_BYTES`]). The stores' bookkeeping
/// grows with the pool (zsmalloc's zspage tables and handle table: 0.8 MiB
/// of heap for 50 MiB of pool measured, and a handle table's next segment
/// can be 1 MiB on its own), so a heap grown once at start would be
/// outgrown near a large `mem_limit`, by faults on the I/O path.
pub(crate) const HEAP_TOP_LOW_BYTES: usize = 1 << 20;

/// What the reserve's thread grows the heap's free top to.
pub(crate) const HEAP_TOP_BYTES: usize = 2 << 20;

/// The heap grown ahead at start for the stores' bookkeeping: one byte
/// in this many of their `mem_limit`s together (zsmalloc's zspage and
/// handle tables measured 0.8 MiB of heap for 50 MiB of pool, one in 62).
pub(crate) const HEAP_PER_POOL_DIVISOR: u64 = 32;

/// The share of the exports' `mem_limit`s kept resident by default: one
/// byte in this many (16 MiB of a 128M limit), unless the burst rule of
/// [`default_resident`] asks for more.
pub(crate) const RESIDENT_DIVISOR: u64 = 8;

/// The resident part of the reserve unless `--swap-reserve` gives it:
/// what the device must absorb with no fresh memory. The larger of
/// - one [`RESIDENT_DIVISOR`]th of the `mem_limit`s, and
/// - two bursts of `burst` bytes (the front end's requests in flight, all
///   writes of incompressible pages, each stored whole: one burst in
///   flight, the next arriving before the refill has free memory to take)
///   plus the pieces each store holds partly carved ([`PIECES_PER_STORE`]);
///
/// in whole pieces, at most the reserve itself ([`reserve_for`]).
pub(crate) fn default_resident(limits: &[u64], burst: u64) -> u64 {
    let piece = pages::reserve::PIECE_BYTES as u64;
    let share = limits.iter().sum::<u64>() / RESIDENT_DIVISOR;
    let bursts = 2 * burst + limits.len() as u64 * PIECES_PER_STORE * piece;
    (share.max(bursts).div_ceil(piece) * piece).min(reserve_for(limits))
}

/// The in-flight bound per connection in swap mode unless given: the
/// request buffers come from the heap grown ahead.
pub(crate) const INFLIGHT_PER_CONN: u64 = 2 << 20;

/// The in-flight bound of all connections together in swap mode unless
/// given.
pub(crate) const INFLIGHT_TOTAL: u64 = 4 << 20;

/// Pieces of the locked reserve each store may hold partly carved beyond
/// its `mem_limit`: its pool's two frontiers and its huge-page source's two.
pub(crate) const PIECES_PER_STORE: u64 = 4;

/// The `vm.min_free_kbytes` swap mode raises the system's to when it is
/// lower: the kernel keeps this much free, the socket memory of the
/// server's replies is allocated from it while the kernel waits for the
/// server, and the refill takes pieces only above the watermarks it sets
/// (docs/serve.md has the runs behind the figure).
pub(crate) const ADVISED_MIN_FREE_KBYTES: u64 = 32768;

/// How long the stores' writes may keep failing (the reserve used up with
/// too little free memory to refill it, or `mem_limit` reached) before the
/// OOM killer is asked to run, unless `--swap-oom-after` gives it.
pub(crate) const DEFAULT_OOM_AFTER: Duration = Duration::from_secs(10);

/// How recent a failed write must be for writes to count as failing still.
const FAILING_WITHIN: Duration = Duration::from_secs(1);

/// Times swap mode asked the kernel's OOM killer to run.
static OOM_KILLS: AtomicU64 = AtomicU64::new(0);

/// Watches the stores' writes for a stall no one else ends: a write failed
/// within every [`FAILING_WITHIN`] for `after` on end. Pure: told the time
/// and the failed writes so far, it says when to ask the OOM killer.
#[derive(Debug)]
pub(crate) struct StallWatch {
    after: Duration,
    last_failed: u64,
    last_fail: Option<Instant>,
    since: Option<Instant>,
}

impl StallWatch {
    /// A watch that fires after `after` of stall.
    pub(crate) fn new(after: Duration) -> StallWatch {
        StallWatch {
            after,
            last_failed: 0,
            last_fail: None,
            since: None,
        }
    }

    /// One look at `now`: the stores' failed writes so far. True when the
    /// stall has lasted `after` (the watch then starts over, so the next
    /// kill waits as long again).
    pub(crate) fn look(&mut self, now: Instant, failed: u64) -> bool {
        if failed > self.last_failed {
            self.last_failed = failed;
            self.last_fail = Some(now);
        }
        let failing = self
            .last_fail
            .is_some_and(|t| now.duration_since(t) < FAILING_WITHIN);
        if !failing {
            self.since = None;
            return false;
        }
        let since = *self.since.get_or_insert(now);
        if now.duration_since(since) >= self.after {
            self.since = None;
            return true;
        }
        false
    }
}

/// Asks the kernel's OOM killer to run (`f` to /proc/sysrq-trigger, which
/// the sysrq mask does not restrict): it kills the process with the
/// highest badness, never this one (`oom_score_adj` -1000).
fn ask_oom_killer(after: Duration) {
    OOM_KILLS.fetch_add(1, Ordering::Relaxed);
    log::warn!(
        "swap mode: swap writes have failed for {} s on end (the reserve used up with no free \
         memory to refill it, or mem_limit reached): asking the kernel's OOM killer to run \
         (sysrq f)",
        after.as_secs()
    );
    if let Err(e) = std::fs::write("/proc/sysrq-trigger", "f") {
        log::error!("swap mode: cannot write /proc/sysrq-trigger: {e}");
    }
}

/// What swap mode set, for `zmem ctl status` and the `swap_mode` attribute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwapMode {
    /// Bytes of address space the locked reserve may grow to.
    pub reserve_bytes: u64,
    /// Bytes of the reserve kept resident: locked before the server was
    /// ready, and refilled to from free memory.
    pub resident_bytes: u64,
    /// Bytes the C heap was grown by.
    pub heap_bytes: u64,
    /// Code and constants are locked as they are touched (`MCL_ONFAULT`),
    /// not populated whole.
    pub code_on_fault: bool,
    /// `oom_score_adj` as set.
    pub oom_score_adj: i32,
    /// `vm.min_free_kbytes` once swap mode began (0 if unreadable).
    pub min_free_kbytes: u64,
    /// `vm.min_free_kbytes` before swap mode raised it (equal to
    /// `min_free_kbytes` when it was left as it was).
    pub min_free_kbytes_was: u64,
}

/// The system's `vm.min_free_kbytes`, if readable.
pub(crate) fn min_free_kbytes() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/vm/min_free_kbytes")
        .ok()?
        .trim()
        .parse()
        .ok()
}

impl fmt::Display for SwapMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = pages::reserve::stats().unwrap_or_default();
        write!(
            f,
            "on reserve={} resident={} locked={} ready={} taken={} returned={} exhausted={} \
             refill_waits={} oom_kills={} heap={} heap_in_use={} heap_top={} mlockall={} \
             io_flusher=1 oom_score_adj={} min_free_kbytes={} min_free_kbytes_was={}",
            self.reserve_bytes,
            self.resident_bytes,
            s.locked,
            s.ready,
            s.taken,
            s.returned,
            s.exhausted,
            s.refill_waits,
            OOM_KILLS.load(Ordering::Relaxed),
            self.heap_bytes,
            heap_in_use(),
            heap_top_free(),
            if self.code_on_fault {
                "current-onfault,future-onfault"
            } else {
                "current,future-onfault"
            },
            self.oom_score_adj,
            self.min_free_kbytes,
            self.min_free_kbytes_was
        )
    }
}

/// The reserve for stores whose `mem_limit`s are `limits` (bytes): their
/// sum, plus [`PIECES_PER_STORE`] pieces each.
pub(crate) fn reserve_for(limits: &[u64]) -> u64 {
    let piece = pages::reserve::PIECE_BYTES as u64;
    limits
        .iter()
        .map(|l| l.div_ceil(piece) * piece + PIECES_PER_STORE * piece)
        .sum()
}

/// Enters swap mode's first half, before the stores are made: the heap
/// that never shrinks, grown by `inflight_total` plus [`HEAP_SPARE_BYTES`]
/// plus the bookkeeping of pools of `pool_bytes` ([`HEAP_PER_POOL_DIVISOR`]);
/// the I/O-flusher flag, which every thread created after inherits (the
/// stores' own threads too: they take locks the I/O path waits for); and
/// `oom_score_adj`. Then [`lock`]. An error names the setting the kernel
/// refused; nothing is undone (the caller exits).
pub(crate) fn enter(inflight_total: u64, pool_bytes: u64) -> Result<u64, SwapError> {
    heap_never_shrinks()?;
    let heap_bytes = inflight_total + HEAP_SPARE_BYTES + pool_bytes / HEAP_PER_POOL_DIVISOR;
    grow_heap(heap_bytes as usize);
    // SAFETY: prctl with integer arguments only sets a flag on this task.
    if unsafe { libc::prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0) } != 0 {
        return Err(SwapError::os(
            "prctl(PR_SET_IO_FLUSHER)",
            io::Error::last_os_error(),
            "Linux 5.6 and CAP_SYS_RESOURCE",
        ));
    }
    std::fs::write("/proc/self/oom_score_adj", format!("{OOM_SCORE_ADJ}\n")).map_err(|e| {
        SwapError::os(
            format!("oom_score_adj {OOM_SCORE_ADJ}"),
            e,
            "needs CAP_SYS_RESOURCE",
        )
    })?;
    Ok(heap_bytes)
}

/// Swap mode's second half, once the stores are made (their tables exist)
/// and before the server's threads start: locks every page the process has
/// and every page it faults in later, populates the writable mappings
/// whole, makes the locked reserve of at most `reserve_bytes` with
/// `resident_bytes` of it populated and locked now, and starts its refill
/// thread. `heap_bytes` is what [`enter`] returned; `min_free_kbytes_was`
/// what `vm.min_free_kbytes` was before swap mode raised it; `oom_after`
/// the stall after which the refill thread asks the OOM killer to run
/// (`None`: never), with `failed_writes` the stores' failed writes so far.
///
/// With `ublk` (the front end runs its I/O path once before it announces
/// a device, ublk's `warm_up`, and the kernel hands it requests without
/// allocating, where nbd.ko's worker needs socket buffers), code and
/// constants are locked as they are touched instead of populated whole,
/// and the refill may also take droppable cache when no piece is ready
/// (`pages::reserve::start_refill`).
pub(crate) fn lock(
    reserve_bytes: u64,
    resident_bytes: u64,
    heap_bytes: u64,
    ublk: bool,
    min_free_kbytes_was: u64,
    oom_after: Option<Duration>,
    failed_writes: impl Fn() -> u64 + Send + 'static,
) -> Result<SwapMode, SwapError> {
    if ublk {
        drop_code_pages()?;
    }
    let current = if ublk {
        // SAFETY: mlockall only changes how this process's mappings are
        // paged; it has no memory-safety preconditions. With
        // `MCL_ONFAULT` the pages present now and every page faulted in
        // later are locked, and nothing is populated: the binary's and
        // the libraries' code and constants are locked as they are
        // touched, not whole.
        unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_ONFAULT) }
    } else {
        // SAFETY: as above. This populates every page mapped so far.
        unsafe { libc::mlockall(libc::MCL_CURRENT) }
    };
    // SAFETY: as above. Later mappings are locked page by page as they are
    // faulted in, so that address space reserved is not populated whole.
    let future = unsafe { libc::mlockall(libc::MCL_FUTURE | libc::MCL_ONFAULT) };
    if current != 0 || future != 0 {
        return Err(SwapError::os(
            "mlockall",
            io::Error::last_os_error(),
            "swap mode needs CAP_IPC_LOCK or a large RLIMIT_MEMLOCK",
        ));
    }
    // Every writable mapping (the heap grown ahead, the stores' tables,
    // the queues' buffers, the threads' stacks, the binary's data) is
    // populated and locked whole: a write to one never faults.
    lock_writable_mappings()?;
    // After the writable mappings are populated: the reserve's address
    // space is populated as far as its resident part now, and beyond only
    // as its refill thread takes free memory.
    pages::reserve::lock_reserve(reserve_bytes, resident_bytes.min(reserve_bytes))
        .map_err(SwapError::Reserve)?;
    keep_heap_ahead();
    let mut watch = oom_after.map(StallWatch::new);
    pages::reserve::start_refill(
        || {
            // The refill thread is no I/O flusher: its allocations are
            // ordinary ones. It gives up the inherited flag.
            // SAFETY: prctl with integer arguments only clears a flag on
            // this task.
            unsafe { libc::prctl(PR_SET_IO_FLUSHER, 0, 0, 0, 0) };
        },
        move || {
            keep_heap_ahead();
            if let Some(w) = watch.as_mut() {
                if w.look(Instant::now(), failed_writes()) {
                    ask_oom_killer(w.after);
                }
            }
        },
        ublk,
    )
    .map_err(SwapError::Thread)?;
    Ok(SwapMode {
        reserve_bytes,
        resident_bytes: pages::reserve::stats().map_or(0, |s| s.resident),
        heap_bytes,
        code_on_fault: ublk,
        oom_score_adj: OOM_SCORE_ADJ,
        min_free_kbytes: min_free_kbytes().unwrap_or(0),
        min_free_kbytes_was,
    })
}

/// One line of /proc/self/maps: the range, the permissions (`rwxp`), the
/// path or name (empty for an anonymous mapping), and the line itself.
struct MapsLine<'a> {
    start: usize,
    end: usize,
    perms: &'a [u8],
    path: &'a str,
    line: &'a str,
}

/// Calls `f` with each mapping of this process, in /proc/self/maps order;
/// stops at `f`'s first error.
fn each_mapping(mut f: impl FnMut(&MapsLine) -> Result<(), SwapError>) -> Result<(), SwapError> {
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| SwapError::os("/proc/self/maps", e, ""))?;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        else {
            continue;
        };
        f(&MapsLine {
            start,
            end,
            perms: perms.as_bytes(),
            path: fields.nth(3).unwrap_or(""),
            line,
        })?;
    }
    Ok(())
}

/// Populates and locks (`mlock`) every writable mapping of the process, as
/// /proc/self/maps lists them. Mappings the kernel will not populate
/// (device memory such as io_uring's rings, which are the kernel's own
/// pages) are passed over; any other failure is an error.
fn lock_writable_mappings() -> Result<(), SwapError> {
    each_mapping(|m| {
        if m.perms.get(1) != Some(&b'w') {
            return Ok(());
        }
        // SAFETY: mlock only populates and pins pages of a range this
        // process has mapped; it changes no memory's contents.
        if unsafe { libc::mlock(m.start as *const libc::c_void, m.end - m.start) } != 0 {
            let e = std::io::Error::last_os_error();
            // Shared mappings of a device (io_uring's rings, ublk's
            // descriptors) may refuse; they are kernel memory.
            if m.perms.get(3) != Some(&b's') {
                return Err(SwapError::os(format!("mlock {}", m.line), e, ""));
            }
        }
        Ok(())
    })
}

/// The stack of a thread started after [`lock`] that serves I/O (an NBD
/// connection's reader and workers, whose stacks [`lock`] could not see):
/// small enough to populate whole, with room for a store's deepest call,
/// its compressor included (as a ublk queue thread's).
pub(crate) const IO_THREAD_STACK_BYTES: usize = 512 << 10;

/// Populates and locks the calling thread's whole stack, as
/// `pthread_getattr_np` gives it. For an I/O thread started after [`lock`]:
/// under `MCL_ONFAULT` its stack would otherwise be faulted in a page at a
/// time as its calls first go deeper, on the I/O path, with the kernel
/// short of memory and waiting for this thread (seen in a guest: an NBD
/// connection's reader stuck in reclaim on a fresh stack page). A failure
/// is logged; the thread then faults its stack in as before.
pub(crate) fn lock_own_stack() {
    match own_stack() {
        // SAFETY: mlock only populates and pins pages of the calling
        // thread's own stack mapping; it changes no memory's contents.
        Some((low, len)) if unsafe { libc::mlock(low as *const libc::c_void, len) } == 0 => {}
        Some((low, len)) => log::warn!(
            "swap mode: cannot lock this thread's stack ({len} bytes at {low:#x}): {}",
            std::io::Error::last_os_error()
        ),
        None => log::warn!("swap mode: cannot find this thread's stack"),
    }
}

/// The calling thread's stack: its lowest address and its length.
fn own_stack() -> Option<(usize, usize)> {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    // SAFETY: pthread_getattr_np fills `attr` for the calling thread;
    // it is read only after it succeeded, and destroyed once read.
    unsafe {
        if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
            return None;
        }
        let mut low: *mut libc::c_void = std::ptr::null_mut();
        let mut len: libc::size_t = 0;
        let rc = libc::pthread_attr_getstack(attr.as_ptr(), &mut low, &mut len);
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        (rc == 0 && !low.is_null() && len > 0).then_some((low as usize, len))
    }
}

/// Unmaps from this process the pages of code it has touched so far
/// (`MADV_DONTNEED` on every private executable mapping that is not
/// writable): the start-up's code (argument parsing, store making) is then
/// not locked by `MCL_CURRENT`; what runs later faults its pages back from
/// the page cache, and they are locked then. Only code: its pages are the
/// file's own (a writable or relocated mapping's private copies would be
/// lost).
fn drop_code_pages() -> Result<(), SwapError> {
    each_mapping(|m| {
        // Exactly r-xp: executable, not writable, private; a named file
        // (not [vdso] or [vsyscall], which the kernel keeps).
        if m.perms != b"r-xp" || !m.path.starts_with('/') {
            return Ok(());
        }
        // SAFETY: the range is a read-only, executable private mapping of
        // a file: it holds no page this process wrote, so dropping its
        // pages loses nothing, and the next execution of any of them
        // faults the file's page back in.
        let rc = unsafe {
            libc::madvise(
                m.start as *mut libc::c_void,
                m.end - m.start,
                libc::MADV_DONTNEED,
            )
        };
        if rc != 0 {
            return Err(SwapError::os(
                format!("madvise(MADV_DONTNEED) {}", m.line),
                io::Error::last_os_error(),
                "",
            ));
        }
        Ok(())
    })
}

/// `PR_SET_IO_FLUSHER` (Linux 5.6), which the libc crate may not name.
const PR_SET_IO_FLUSHER: libc::c_int = 57;

/// The OOM killer's adjustment in swap mode: never this process.
const OOM_SCORE_ADJ: i32 = -1000;

/// Keeps freed heap memory in the heap and serves every allocation from it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap_never_shrinks() -> Result<(), SwapError> {
    // SAFETY: mallopt only sets glibc tunables; called before the I/O
    // threads start.
    let ok = unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX) == 1
            && libc::mallopt(libc::M_MMAP_MAX, 0) == 1
            && libc::mallopt(libc::M_ARENA_MAX, 1) == 1
    };
    if ok {
        Ok(())
    } else {
        Err(SwapError::Heap(
            "mallopt refused M_TRIM_THRESHOLD, M_MMAP_MAX or M_ARENA_MAX",
        ))
    }
}

/// Off glibc there is no tunable to set; swap mode is refused.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap_never_shrinks() -> Result<(), SwapError> {
    Err(SwapError::Heap("swap mode needs glibc's malloc tunables"))
}

/// Bytes of the C heap's arenas in use by allocations now (glibc's
/// `mallinfo2().uordblks`, every arena), the figure the heap grown ahead
/// must stay above.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn heap_in_use() -> u64 {
    // SAFETY: mallinfo2 only reads the allocator's counters under its locks.
    unsafe { libc::mallinfo2() }.uordblks as u64
}

/// Off glibc swap mode is refused; nothing to report.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn heap_in_use() -> u64 {
    0
}

/// Bytes free at the top of the C heap (glibc's `mallinfo2().keepcost`):
/// what an allocation no free chunk fits is carved from without growing
/// the heap.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap_top_free() -> usize {
    // SAFETY: as in `heap_in_use`.
    unsafe { libc::mallinfo2() }.keepcost
}

/// Off glibc swap mode is refused; nothing to report.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap_top_free() -> usize {
    0
}

/// Grows the C heap's free top back to [`HEAP_TOP_BYTES`] once it is below
/// [`HEAP_TOP_LOW_BYTES`], from free memory only
/// (`pages::reserve::memory_free_for`): run by the reserve's thread as the
/// stores grow, so that the I/O path's allocations find resident, locked
/// heap.
fn keep_heap_ahead() {
    let top = heap_top_free();
    if top < HEAP_TOP_LOW_BYTES && pages::reserve::memory_free_for(HEAP_TOP_BYTES as u64) {
        grow_heap(HEAP_TOP_BYTES);
    }
}

/// Grows the heap by `bytes`, touching every page, and frees them again:
/// with the trim threshold out of reach they stay in the heap, resident (and
/// locked by `lock` after), for later allocations.
fn grow_heap(bytes: usize) {
    let mut v: Vec<u8> = Vec::with_capacity(bytes);
    // Not `vec![0; n]`: calloc skips fresh heap memory, which reads as zero
    // without being touched. One write a page faults each in.
    let spare = v.spare_capacity_mut();
    for byte in spare.iter_mut().step_by(4096) {
        byte.write(0);
    }
    std::hint::black_box(&v);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread of swap mode's stack size finds its own stack (this
    /// variable is on it), and after `lock_own_stack` every page of it is
    /// resident (`mincore`), not only the ones its calls reached.
    #[test]
    fn a_thread_locks_its_whole_stack() {
        let seen = std::thread::Builder::new()
            .stack_size(IO_THREAD_STACK_BYTES)
            .spawn(|| {
                let local = 7u8;
                let here = std::ptr::addr_of!(local) as usize;
                let (low, len) = own_stack().expect("the thread's stack");
                assert!(
                    (low..low + len).contains(&here),
                    "{here:#x} outside {low:#x}+{len}"
                );
                lock_own_stack();
                let mut vec = vec![0u8; len.div_ceil(4096)];
                // SAFETY: the thread's own stack mapping, page aligned
                // (glibc maps stacks whole pages); one byte per page.
                let rc = unsafe { libc::mincore(low as *mut libc::c_void, len, vec.as_mut_ptr()) };
                assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
                (len, vec.iter().filter(|&&b| b & 1 == 1).count() * 4096)
            })
            .unwrap()
            .join()
            .unwrap();
        let (len, resident) = seen;
        assert!(
            len >= IO_THREAD_STACK_BYTES - 8192,
            "a stack of {len} bytes"
        );
        assert_eq!(resident, len, "resident bytes of a locked stack");
    }

    /// The maps walk sees this test binary's code (`r-xp`, a path) and a
    /// writable mapping holding a local variable, and passes an error on.
    #[test]
    fn each_mapping_parses_this_process_maps() {
        let local = 7u64;
        let here = &local as *const u64 as usize;
        let (mut code, mut holds_local) = (false, false);
        each_mapping(|m| {
            assert!(m.start < m.end, "{}", m.line);
            code |= m.perms == b"r-xp" && m.path.starts_with('/');
            holds_local |= (m.start..m.end).contains(&here) && m.perms.get(1) == Some(&b'w');
            Ok(())
        })
        .unwrap();
        assert!(code && holds_local);
        let mut seen = 0;
        let r = each_mapping(|_| {
            seen += 1;
            Err(SwapError::Heap("stop"))
        });
        assert!(matches!(r, Err(SwapError::Heap("stop"))), "{r:?}");
        assert_eq!(seen, 1);
    }

    #[test]
    fn the_reserve_covers_each_limit_and_its_partly_carved_pieces() {
        let piece = pages::reserve::PIECE_BYTES as u64;
        assert_eq!(reserve_for(&[]), 0);
        assert_eq!(reserve_for(&[64 << 20]), (64 << 20) + 4 * piece);
        // Limits are rounded up to whole pieces, each store on its own.
        assert_eq!(reserve_for(&[1, 1]), 2 * (piece + 4 * piece));
    }

    #[test]
    fn the_stall_watch_fires_only_after_a_whole_stall_of_failing_writes() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut w = StallWatch::new(Duration::from_secs(10));
        // Nothing failing: no stall, however long.
        assert!(!w.look(at(0), 0));
        assert!(!w.look(at(20_000), 0));
        // A write failing every half second: fires at 10 s, then 10 s later.
        let mut fired = Vec::new();
        for i in 0..50u64 {
            if w.look(at(30_000 + i * 500), 1 + i) {
                fired.push(i * 500);
            }
        }
        assert_eq!(fired, vec![10_000, 20_500]);
        // A second with no failure ends the stall.
        let mut w = StallWatch::new(Duration::from_secs(10));
        assert!(!w.look(at(0), 1));
        assert!(!w.look(at(5_000), 1), "no failure for 5 s");
        assert!(!w.look(at(11_000), 2));
        assert!(!w.look(at(20_000), 3));
        assert!(!w.look(at(20_500), 3));
        assert!(w.look(at(21_000), 4));
    }

    #[test]
    fn the_resident_part_covers_two_bursts_or_a_share_of_the_limit() {
        let (m, piece) = (1u64 << 20, pages::reserve::PIECE_BYTES as u64);
        // 128M over NBD (4 MiB in flight): the share, 16 MiB.
        assert_eq!(default_resident(&[128 * m], 4 * m), 16 * m);
        // Over ublk, two queues of 32 requests of 128 KiB: 8 MiB in flight.
        assert_eq!(default_resident(&[128 * m], 8 * m), 16 * m + 4 * piece);
        // A small limit: never more than the reserve itself.
        assert_eq!(default_resident(&[4 * m], 8 * m), reserve_for(&[4 * m]));
        // Whole pieces.
        assert_eq!(default_resident(&[1000 * m + 1], 0) % piece, 0);
    }

    #[test]
    fn the_report_names_every_setting() {
        let m = SwapMode {
            reserve_bytes: 8 << 20,
            resident_bytes: 4 << 20,
            heap_bytes: 8 << 20,
            code_on_fault: false,
            oom_score_adj: -1000,
            min_free_kbytes: 32768,
            min_free_kbytes_was: 1739,
        };
        let text = m.to_string();
        for want in [
            "reserve=8388608",
            "resident=4194304",
            "ready=",
            "returned=",
            "exhausted=",
            "refill_waits=",
            "oom_kills=",
            "min_free_kbytes_was=1739",
            "heap=8388608",
            "heap_in_use=",
            "heap_top=",
            "mlockall=current,future-onfault",
            "io_flusher=1",
            "oom_score_adj=-1000",
            "min_free_kbytes=32768",
        ] {
            assert!(text.contains(want), "{text}");
        }
    }
}
