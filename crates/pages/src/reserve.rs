//! The locked reserve: memory that every page source of the process
//! carves its chunks from once it exists, populated and locked before the
//! stores need it, for a process that must never wait for the kernel to
//! find a fresh page while it serves I/O (a swap device's server: such a
//! fault may have to swap a page out to the very process that took it, or,
//! for a thread that may not start I/O, spin in reclaim with nothing to
//! reclaim).
//!
//! [`lock_reserve`] reserves address space for the most the stores may
//! hold and populates and locks the *resident* part of it at once, before
//! the caller offers any device: pieces of [`PIECE_BYTES`] kept ready, the
//! memory the device absorbs writes with when the kernel has none to give.
//! Frontiers take ready pieces instead of mapping chunks. A taker never
//! waits: when no piece is ready it gets [`PagesError::ReserveExhausted`]
//! at once (the store's write fails, as the kernel's zram fails a write it
//! has no memory for), and so it does past the address space reserved.
//!
//! A refill thread ([`start_refill`]) brings the ready pieces back to the
//! resident size as they are taken, but only from memory that is free: it
//! populates a piece only while the system's free memory (`MemFree`, read
//! with `sysinfo(2)`, the watermarks once a second) stays
//! above the zones' min watermarks (`/proc/zoneinfo`) by
//! [`FREE_MARGIN_BYTES`] plus the piece, where an allocation is served
//! from the free lists without entering reclaim (between the low and the
//! min watermark the kernel wakes kswapd, which is then at work already,
//! and serves it all the same; a program's faults take memory down to the
//! min watermark, so a refill that stopped at the low one would lose every
//! race to them). Below that it waits ([`FREE_POLL`]) and looks again,
//! with one exception, for a caller that asks for it (a device whose
//! kernel side needs no memory to hand a request over: ublk, not nbd.ko,
//! whose worker allocates socket buffers for each request it sends): when
//! no piece at all is ready (writes are failing
//! for want of one) and the kernel holds cache it can drop without writing
//! anything ([`cache_droppable_for`]: the swap cache and clean file cache,
//! at least [`CLEAN_CACHE_BYTES`] beyond the piece), it populates the next
//! piece anyway, and its fault's reclaim finds the memory in that cache.
//! On Linux 7.x a page swapped in from a device that is not synchronous
//! (this process's, over NBD or ublk) keeps its swap-cache copy, tens of
//! MiB under a swap storm, while free memory sits at the min watermark and
//! a refill from free memory alone gets nothing. Where there is no such
//! cache, or for other callers, it never faults under pressure: reclaim
//! would have to swap out, to this very process, through a kernel that
//! may lack the memory to send the request. Two 6.1 guests over nbd.ko
//! wedged so: with no cache to drop (the nbd worker, kswapd and the
//! program in `mempool_alloc`), and with 36 MiB of swap cache that was
//! itself on its way out (the refill's reclaim writing pages out and
//! throttled behind them). It also runs its caller's `top_up`, for other memory kept
//! ahead the same way. A source that drops gives its pieces back, zeroed.
//!
//! Pages inside a piece a source holds cannot go back to the kernel one run
//! at a time (`MADV_DONTNEED` refuses locked ranges, and a piece is locked
//! whole), so released runs are zeroed instead (`release.rs` asks
//! [`active`]): they read as zero afterwards, as released pages do, and
//! stay resident and locked. A whole piece goes back: a source gives the
//! reserve every piece none of whose runs it still holds (`free_runs.rs`
//! counts them), kept ready, and the refill thread gives the kernel the
//! ready pieces beyond the resident part, unlocked and dropped (`munlock`,
//! then `MADV_DONTNEED`, the address space kept to populate first), once
//! free memory has stayed above the zones' high watermarks for
//! [`CALM_FOR`]: never while the system is short, since the stores that
//! gave them back in a swap storm take them again before it ends (given
//! back at once, a storm that began by freeing a burst's pieces failed
//! more writes). So after a storm the memory locked follows what the
//! stores hold plus the resident part, not their high-water mark.
//!
//! This module owns the reserve's mapping, its ready pieces, the pieces
//! given back to the kernel and the refill thread; which runs are carved
//! from a piece is the frontier's business, and it never reads or writes a
//! piece that is handed out. Its mutex is a leaf: a source takes and gives
//! pieces with its own held, and nothing is locked under this one.

use std::ptr::NonNull;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::PagesError;

/// Bytes of one piece: the chunk a frontier carves runs from in reserve
/// mode. Every run of a source with pages up to 16 KiB fits (64 pages of
/// 16 KiB); a longer run (64 KiB pages) cannot come from the reserve, and its
/// allocation fails.
pub const PIECE_BYTES: usize = 1 << 20;

/// Free memory the refill thread leaves above the zones' min watermarks
/// beyond the piece it populates: the kernel's own allocations between two
/// looks (socket buffers, bios, page tables) come from it, and the refill
/// never brings free memory down to where allocations enter reclaim.
pub const FREE_MARGIN_BYTES: u64 = 2 << 20;

/// How long the refill thread waits before it looks at free memory again
/// when there was too little to take a piece: short, since free memory
/// rises above the floor only between kswapd's reclaim and the next
/// program's faults.
pub const FREE_POLL: Duration = Duration::from_millis(10);

/// How often the refill thread runs its caller's `top_up` when no piece is
/// taken.
pub const TOP_UP_EVERY: Duration = Duration::from_millis(250);

/// `MADV_POPULATE_WRITE` (Linux 5.14), which the libc crate may not name.
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// The reserve: one mapping, its ready pieces and how far it is populated.
struct Reserve {
    base: NonNull<u8>,
    /// Bytes of address space reserved.
    len: usize,
    /// Pieces the refill thread keeps ready: the resident part.
    target: usize,
    state: Mutex<State>,
    /// Signalled when pieces are taken below the target (the refill thread
    /// waits on it).
    changed: Condvar,
}

struct State {
    /// Offsets of the ready pieces (populated, locked, zero, not handed
    /// out). Its capacity is every piece, so a push never allocates.
    ready: Vec<usize>,
    /// Offsets of pieces below `populated` given back to the kernel
    /// (unlocked, dropped): address space only again, populated first by
    /// the refill thread. Its capacity is every piece.
    returned: Vec<usize>,
    /// Bytes from the start populated at least once; pieces past it are
    /// address space only.
    populated: usize,
    /// Pieces given back to the kernel since the reserve was made.
    returned_total: u64,
    /// Set when populating failed (the kernel refused memory): the refill
    /// thread stops trying until a piece is given back.
    refused: bool,
    /// Takes that found no ready piece.
    exhausted: u64,
    /// Times the refill thread found too little free memory to take a
    /// piece.
    waited: u64,
}

impl State {
    /// Bytes populated and locked now: those populated at least once, less
    /// the pieces given back to the kernel.
    fn locked_bytes(&self) -> u64 {
        (self.populated - self.returned.len() * PIECE_BYTES) as u64
    }
}

// SAFETY: the mapping is process memory handed out piece by piece; the
// state is behind a mutex and `base`/`len` never change.
unsafe impl Send for Reserve {}
// SAFETY: as above.
unsafe impl Sync for Reserve {}

static RESERVE: OnceLock<Reserve> = OnceLock::new();

/// The reserve's size and use, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReserveStats {
    /// Bytes of address space reserved: the most the stores may hold.
    pub limit: u64,
    /// Bytes kept ready when free memory allows: the resident part, all of
    /// it populated and locked by [`lock_reserve`].
    pub resident: u64,
    /// Bytes populated and locked now: the pieces taken and the ready ones.
    pub locked: u64,
    /// Bytes of the pieces handed to page sources.
    pub taken: u64,
    /// Bytes of the ready pieces: populated, locked, not handed out.
    pub ready: u64,
    /// Takes that found no ready piece (each a failed allocation).
    pub exhausted: u64,
    /// Times the refill thread found too little free memory to take a piece.
    pub refill_waits: u64,
    /// Bytes of pieces given back to the kernel (unlocked and dropped: none
    /// of their pages held by a source, beyond the resident part, memory
    /// calm) since the reserve was made.
    pub returned: u64,
}

/// Reserves `limit` bytes of address space (rounded up to whole pieces)
/// for every page source of the process, and populates and locks the first
/// `resident` bytes of it (rounded up likewise, at most `limit`): the
/// pieces kept ready from now on. From now on every page source carves
/// from it. Once per process: a second call is an error, as is a limit of
/// 0.
///
/// Fails when the kernel refuses to lock the resident part
/// (`RLIMIT_MEMLOCK` without `CAP_IPC_LOCK`, or not enough memory): the
/// error names the errno.
pub fn lock_reserve(limit: u64, resident: u64) -> Result<ReserveStats, PagesError> {
    let whole = |bytes: u64| -> Result<usize, PagesError> {
        usize::try_from(bytes.div_ceil(PIECE_BYTES as u64))
            .ok()
            .and_then(|n| n.checked_mul(PIECE_BYTES))
            .ok_or_else(|| PagesError::Reserve(format!("a reserve of {bytes} bytes")))
    };
    if limit == 0 {
        return Err(PagesError::Reserve("a reserve of 0 bytes".into()));
    }
    let len = whole(limit)?;
    let first = whole(resident)?.min(len);
    if RESERVE.get().is_some() {
        return Err(PagesError::Reserve("the reserve is already locked".into()));
    }
    // SAFETY: an anonymous private mapping at an address of the kernel's
    // choosing; no existing memory is affected. Address space only: pieces
    // are populated one by one.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        return Err(PagesError::Reserve(format!(
            "cannot reserve {len} bytes of address space: {e}"
        )));
    }
    let base = NonNull::new(addr.cast::<u8>())
        .ok_or_else(|| PagesError::Reserve("the kernel mapped the reserve at address 0".into()))?;
    // SAFETY: the first `first` bytes of the mapping just made, which nobody
    // holds yet.
    if let Err(e) = unsafe { populate_and_lock(base.as_ptr(), first) } {
        // SAFETY: the mapping just made, never handed out.
        unsafe { libc::munmap(addr, len) };
        return Err(PagesError::Reserve(format!(
            "cannot lock {first} bytes (RLIMIT_MEMLOCK or CAP_IPC_LOCK): {e}"
        )));
    }
    let mut ready = Vec::with_capacity(len / PIECE_BYTES);
    // Highest offsets first in the list, so pieces go out from the start.
    ready.extend((0..first / PIECE_BYTES).rev().map(|i| i * PIECE_BYTES));
    let reserve = Reserve {
        base,
        len,
        target: first / PIECE_BYTES,
        state: Mutex::new(State {
            ready,
            returned: Vec::with_capacity(len / PIECE_BYTES),
            populated: first,
            returned_total: 0,
            refused: false,
            exhausted: 0,
            waited: 0,
        }),
        changed: Condvar::new(),
    };
    if RESERVE.set(reserve).is_err() {
        // Another thread locked one first: give this mapping back.
        // SAFETY: the mapping just made, never handed out.
        unsafe { libc::munmap(addr, len) };
        return Err(PagesError::Reserve("the reserve is already locked".into()));
    }
    Ok(stats().unwrap_or_default())
}

/// Populates and locks `len` bytes at `addr`.
///
/// # Safety
/// The range lies in the reserve's mapping and nobody holds a reference
/// into it.
unsafe fn populate_and_lock(addr: *mut u8, len: usize) -> std::io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let a = addr.cast::<libc::c_void>();
    // SAFETY: the caller's range; populating writes nothing visible (the
    // pages read as zero before and after).
    if unsafe { libc::madvise(a, len, MADV_POPULATE_WRITE) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
        // A kernel before 5.14: touch every page instead.
        for off in (0..len).step_by(crate::os_page_size()) {
            // SAFETY: inside the caller's range, which nobody uses.
            unsafe { addr.add(off).write_volatile(0) };
        }
    }
    // SAFETY: the caller's range; locking changes no contents.
    if unsafe { libc::mlock(a, len) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the process carves from a locked reserve.
pub fn active() -> bool {
    RESERVE.get().is_some()
}

/// The reserve's size and use, if one is locked.
pub fn stats() -> Option<ReserveStats> {
    let r = RESERVE.get()?;
    let s = r.state.lock().unwrap_or_else(|e| e.into_inner());
    let piece = PIECE_BYTES as u64;
    let ready = s.ready.len() as u64 * piece;
    let locked = s.locked_bytes();
    Some(ReserveStats {
        limit: r.len as u64,
        resident: r.target as u64 * piece,
        locked,
        taken: locked - ready,
        ready,
        exhausted: s.exhausted,
        refill_waits: s.waited,
        returned: s.returned_total * piece,
    })
}

/// The start of the reserve's piece that holds `addr`, if a reserve is
/// locked and `addr` lies in it.
pub(crate) fn piece_of(addr: usize) -> Option<usize> {
    let r = RESERVE.get()?;
    let base = r.base.as_ptr() as usize;
    let off = addr.checked_sub(base).filter(|&off| off < r.len)?;
    Some(base + off / PIECE_BYTES * PIECE_BYTES)
}

/// A field of a `/proc/meminfo` text (`"MemFree"`), in bytes.
fn meminfo_bytes(meminfo: &str, field: &str) -> Option<u64> {
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib << 10)
}

/// The system's free memory in bytes (`sysinfo(2)`'s `freeram`: the free
/// pages the kernel counts, `MemFree` of `/proc/meminfo`), with one system
/// call and no text to format: the refill thread looks every
/// [`FREE_POLL`] while it cannot take a piece, and under emulation a read
/// of `/proc/meminfo` and `/proc/zoneinfo` each time cost the guest's only
/// CPU most of its time.
fn mem_free_now() -> Option<u64> {
    // SAFETY: `sysinfo` only writes the structure it is given.
    let mut si: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: `si` is a valid, writable `struct sysinfo`.
    if unsafe { libc::sysinfo(&mut si) } != 0 {
        return None;
    }
    // `freeram` is a `c_ulong`: 32 bits wide on some targets.
    #[allow(clippy::useless_conversion)]
    let free = u64::from(si.freeram);
    Some(free * u64::from(si.mem_unit.max(1)))
}

/// How long the sums of the watermarks read from `/proc/zoneinfo` are
/// used before they are read again: they change only with
/// `vm.min_free_kbytes`, `vm.watermark_scale_factor` or memory hot-plug.
const WATERMARKS_FOR: Duration = Duration::from_secs(1);

/// The sums of the zones' min and high watermarks in bytes, read from
/// `/proc/zoneinfo` at most once every [`WATERMARKS_FOR`].
fn watermarks_now() -> Option<(u64, u64)> {
    static LAST: Mutex<Option<(Instant, (u64, u64))>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((at, marks)) = *last {
        if at.elapsed() < WATERMARKS_FOR {
            return Some(marks);
        }
    }
    let zoneinfo = std::fs::read_to_string("/proc/zoneinfo").ok()?;
    let page = crate::os_page_size() as u64;
    let marks = (
        min_watermarks_bytes(&zoneinfo, page)?,
        watermarks_bytes(&zoneinfo, "high", page)?,
    );
    *last = Some((Instant::now(), marks));
    Some(marks)
}

/// The sum of the zones' min watermarks in bytes ([`watermarks_now`]).
fn min_watermarks_now() -> Option<u64> {
    watermarks_now().map(|(min, _)| min)
}

/// Whether the system's free memory is above the zones' high watermarks
/// by `bytes`: where kswapd stops reclaiming, so nobody is short of memory.
fn memory_calm_for(bytes: u64) -> bool {
    match (mem_free_now(), watermarks_now()) {
        (Some(free), Some((_, high))) => free >= high + bytes,
        _ => false,
    }
}

/// How long free memory must stay above the high watermarks before the
/// refill thread gives the kernel back ready pieces beyond the resident
/// part: in a swap storm free memory reaches them for a moment between
/// kswapd's passes, and the pool that gave those pieces back takes them
/// again before the storm ends.
pub const CALM_FOR: Duration = Duration::from_secs(1);

/// What the kernel can free without writing anything, from a
/// `/proc/meminfo` text: the swap cache and the file cache, less what is
/// dirty or under writeback. An estimate (mapped pages need unmapping,
/// a swap-cache page written since its swap-in is dirty), kept only to
/// tell a kernel with cache to drop from one with none.
fn clean_cache_bytes(meminfo: &str) -> Option<u64> {
    let f = |name| meminfo_bytes(meminfo, name);
    let cache = f("SwapCached")? + f("Active(file)")? + f("Inactive(file)")?;
    Some(cache.saturating_sub(f("Dirty")? + f("Writeback")?))
}

/// Clean cache the refill thread needs the kernel to hold before it
/// populates a piece without free memory for it ([`CLEAN_CACHE_BYTES`]).
pub const CLEAN_CACHE_BYTES: u64 = 8 << 20;

/// Whether the kernel holds at least [`CLEAN_CACHE_BYTES`] plus `bytes`
/// of cache it can drop without I/O (`clean_cache_bytes`): a fault that
/// enters reclaim now finds its memory there, not in a swap-out (to this
/// very process, whose requests the kernel may not even be able to send
/// for want of memory). `false` when the file cannot be read.
pub fn cache_droppable_for(bytes: u64) -> bool {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| clean_cache_bytes(&m))
        .is_some_and(|clean| clean >= CLEAN_CACHE_BYTES + bytes)
}

/// The sum of every zone's min watermark in a `/proc/zoneinfo` text, in
/// bytes (`page` bytes a page): an allocation above it is served from the
/// free lists, one below it enters direct reclaim.
fn min_watermarks_bytes(zoneinfo: &str, page: u64) -> Option<u64> {
    watermarks_bytes(zoneinfo, "min", page)
}

/// The sum of every zone's watermark `which` (`min`, `low`, `high`) in a
/// `/proc/zoneinfo` text, in bytes (`page` bytes a page).
fn watermarks_bytes(zoneinfo: &str, which: &str, page: u64) -> Option<u64> {
    let mut pages = 0u64;
    let mut zones = 0;
    for line in zoneinfo.lines() {
        let mut words = line.split_whitespace();
        if words.next() == Some(which) {
            pages += words.next()?.parse::<u64>().ok()?;
            zones += 1;
        }
    }
    (zones > 0).then_some(pages * page)
}

/// Whether `bytes` more can be taken from the kernel now without bringing
/// free memory within [`FREE_MARGIN_BYTES`] of the zones' min watermarks:
/// an allocation the kernel serves from its free lists, with no reclaim.
/// `false` when either cannot be read.
pub fn memory_free_for(bytes: u64) -> bool {
    match (mem_free_now(), min_watermarks_now()) {
        (Some(free), Some(min)) => free >= min + FREE_MARGIN_BYTES + bytes,
        _ => false,
    }
}

/// Starts the thread (named `reserve`) that brings the ready pieces back
/// to the resident part as they are taken, from free memory
/// ([`memory_free_for`]), or, with `from_cache` and none ready, from cache
/// the kernel can drop ([`cache_droppable_for`]); it runs `setup` first. It must not be a thread
/// the kernel spares I/O (`PR_SET_IO_FLUSHER`), so that a fault of its own
/// in a race with the kernel's other allocations is an ordinary one
/// (`setup` is where the caller clears such a flag). It also runs `top_up`
/// whenever a piece is taken and at least every [`TOP_UP_EVERY`]: the
/// caller's other memory kept ahead of need the same way (the C heap),
/// which should ask [`memory_free_for`] too. Does nothing without a
/// reserve.
pub fn start_refill(
    setup: impl FnOnce() + Send + 'static,
    top_up: impl FnMut() + Send + 'static,
    from_cache: bool,
) -> std::io::Result<()> {
    let Some(r) = RESERVE.get() else {
        return Ok(());
    };
    std::thread::Builder::new()
        .name("reserve".into())
        .spawn(move || {
            setup();
            r.refill_forever(top_up, from_cache)
        })?;
    Ok(())
}

impl Reserve {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the refill thread has a piece to make: fewer than the
    /// target ready, address space left (a piece given back, or past the
    /// populated part), and the kernel not refusing.
    fn wants(&self, s: &State) -> bool {
        !s.refused
            && s.ready.len() < self.target
            && (!s.returned.is_empty() || s.populated + PIECE_BYTES <= self.len)
    }

    /// The piece the refill thread populates next: the last one given back
    /// to the kernel, else the first past the populated part. `None` when
    /// it has none to make ([`Reserve::wants`]).
    fn next_piece(&self, s: &State) -> Option<usize> {
        if !self.wants(s) {
            return None;
        }
        Some(s.returned.last().copied().unwrap_or(s.populated))
    }

    /// The refill thread's loop: populate a piece whenever fewer than the
    /// target are ready, address space is left and memory is free (or none
    /// is ready and the kernel has cache to drop); run `top_up` after
    /// every wake-up.
    fn refill_forever(&self, mut top_up: impl FnMut(), from_cache: bool) -> ! {
        let mut calm_since = None;
        loop {
            top_up();
            self.trim_surplus(&mut calm_since);
            let next = {
                let s = self.lock();
                let s = if self.wants(&s) {
                    s
                } else {
                    // A take's notification or the period ends the wait;
                    // either way `top_up` runs again first.
                    self.changed
                        .wait_timeout(s, TOP_UP_EVERY)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                };
                let Some(next) = self.next_piece(&s) else {
                    continue;
                };
                (next, s.ready.is_empty())
            };
            let (next, starved) = next;
            let piece = PIECE_BYTES as u64;
            let may =
                memory_free_for(piece) || (from_cache && starved && cache_droppable_for(piece));
            if !may {
                self.lock().waited += 1;
                std::thread::sleep(FREE_POLL);
                continue;
            }
            // SAFETY: `next..next + PIECE_BYTES` lies in the mapping (checked
            // above) and is either past every populated piece or a piece given
            // back to the kernel, so nobody holds it; only this thread
            // advances `populated` and takes pieces off `returned`.
            let made = unsafe { populate_and_lock(self.base.as_ptr().add(next), PIECE_BYTES) };
            let mut s = self.lock();
            match made {
                Ok(()) => {
                    if next == s.populated {
                        s.populated = next + PIECE_BYTES;
                    } else {
                        let at = s.returned.iter().rposition(|&o| o == next);
                        s.returned
                            .swap_remove(at.expect("the piece was given back"));
                    }
                    s.ready.push(next);
                }
                Err(_) => s.refused = true,
            }
        }
    }

    /// Gives the kernel back the ready pieces beyond the resident part
    /// (pieces sources gave back), unlocked and dropped, once free memory
    /// has stayed above the zones' high watermarks by a piece for
    /// [`CALM_FOR`] (`calm_since`: when this thread first saw it so, since
    /// it last saw it not): never while the system is short, when the
    /// stores that gave them back are likely to need them again.
    fn trim_surplus(&self, calm_since: &mut Option<Instant>) {
        if self.lock().ready.len() <= self.target {
            *calm_since = None;
            return;
        }
        if !memory_calm_for(PIECE_BYTES as u64) {
            *calm_since = None;
            return;
        }
        let since = *calm_since.get_or_insert_with(Instant::now);
        if since.elapsed() < CALM_FOR {
            return;
        }
        loop {
            let off = {
                let mut s = self.lock();
                if s.ready.len() <= self.target {
                    return;
                }
                s.ready.pop().expect("more ready than the resident part")
            };
            // SAFETY: a ready piece, taken off the list: inside the mapping,
            // handed to nobody.
            let dropped = unsafe { unlock_and_drop(self.base.as_ptr().add(off), PIECE_BYTES) };
            let mut s = self.lock();
            if dropped {
                s.returned.push(off);
                s.returned_total += 1;
            } else {
                s.ready.push(off);
                return;
            }
        }
    }
}

/// A ready piece (its start; [`PIECE_BYTES`] long, every byte zero,
/// resident and locked). Never waits: an error at once when none is ready
/// (the refill thread is told) or the reserve is used up.
pub(crate) fn take_piece() -> Result<NonNull<u8>, PagesError> {
    let r = RESERVE.get().ok_or(PagesError::OutOfMemory(libc::ENOMEM))?;
    let mut s = r.lock();
    let Some(off) = s.ready.pop() else {
        s.exhausted += 1;
        let bytes = s.locked_bytes();
        drop(s);
        r.changed.notify_all();
        return Err(PagesError::ReserveExhausted { bytes });
    };
    let low = s.ready.len() < r.target;
    drop(s);
    if low {
        r.changed.notify_all();
    }
    // SAFETY: every ready offset is a piece inside the mapping.
    Ok(unsafe { r.base.add(off) })
}

/// Gives a piece back: kept ready, zeroed (a frontier's fresh bytes read
/// as zero). Beyond the resident part, the refill thread gives it to the
/// kernel once memory is calm ([`CALM_FOR`]).
///
/// # Safety
/// `piece` came from [`take_piece`], is given back once, and nobody holds a
/// reference into it any more.
pub(crate) unsafe fn give_piece(piece: NonNull<u8>) {
    let Some(r) = RESERVE.get() else { return };
    let off = piece.as_ptr() as usize - r.base.as_ptr() as usize;
    // SAFETY: the caller's contract: the piece is ours alone now, and it
    // lies in the reserve's writable mapping.
    unsafe { piece.as_ptr().write_bytes(0, PIECE_BYTES) };
    let mut s = r.lock();
    // The list's capacity is every piece: this push never allocates.
    s.ready.push(off);
    s.refused = false;
    drop(s);
    r.changed.notify_all();
}

/// Unlocks `len` bytes at `addr` and gives their pages back to the kernel
/// (`munlock`, `MADV_DONTNEED`; later reads would see zeros). `false`,
/// with the range left locked and resident, when the kernel refuses either.
///
/// # Safety
/// The range lies in the reserve's mapping and nobody holds a reference
/// into it.
unsafe fn unlock_and_drop(addr: *mut u8, len: usize) -> bool {
    let a = addr.cast::<libc::c_void>();
    // SAFETY: the caller's range; unlocking changes no contents.
    if unsafe { libc::munlock(a, len) } != 0 {
        return false;
    }
    // SAFETY: the caller's range, whose contents nobody uses; the pages
    // read as zero afterwards.
    if unsafe { libc::madvise(a, len, libc::MADV_DONTNEED) } != 0 {
        // Keep the rule that a piece below `populated` is locked or given
        // back: lock it again (it is resident, so this cannot fail for
        // want of memory the piece does not hold already).
        // SAFETY: as above.
        unsafe { libc::mlock(a, len) };
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines of a 6.1 guest's (256 MiB) and of this machine's files, in
    /// the kernel's format.
    const MEMINFO: &str = "MemTotal:         220508 kB\nMemFree:           51204 kB\n\
                           MemAvailable:     120332 kB\n";
    const ZONEINFO: &str = "Node 0, zone      DMA\n  per-node stats\n      nr_inactive_anon 1\n\
        \x20 pages free     3968\n        boost    0\n        min      33\n        low      41\n\
        \x20       high     49\nNode 0, zone    DMA32\n  pages free     8000\n        boost    0\n\
        \x20       min      6788\n        low      8485\n        high     10182\n\
        Node 0, zone  Movable\n  pages free     0\n        min      0\n        low      0\n";

    #[test]
    fn free_memory_and_the_min_watermarks_are_read_as_the_kernel_writes_them() {
        assert_eq!(meminfo_bytes(MEMINFO, "MemFree"), Some(51204 << 10));
        assert_eq!(meminfo_bytes("MemTotal: 1 kB\n", "MemFree"), None);
        assert_eq!(
            min_watermarks_bytes(ZONEINFO, 4096),
            Some((33 + 6788) * 4096)
        );
        assert_eq!(min_watermarks_bytes("Node 0, zone DMA\n", 4096), None);
        assert_eq!(min_watermarks_bytes("        min      x\n", 4096), None);
    }

    #[test]
    fn the_clean_cache_is_the_swap_and_file_cache_less_what_is_dirty() {
        // The shape of a 7.3 guest's file during a swap storm.
        let m = "MemFree:           31000 kB\nActive(file):        120 kB\n\
                 Inactive(file):      880 kB\nDirty:                40 kB\n\
                 Writeback:           60 kB\nSwapCached:        65536 kB\n";
        assert_eq!(clean_cache_bytes(m), Some((65536 + 1000 - 100) << 10));
        // A 6.1 guest wedged with no cache to drop, its memory locked.
        let wedged = "Active(file): 0 kB\nInactive(file): 0 kB\nDirty: 0 kB\n\
                      Writeback: 700 kB\nSwapCached: 716 kB\n";
        assert_eq!(clean_cache_bytes(wedged), Some(16 << 10));
        assert!(clean_cache_bytes(wedged).unwrap() < CLEAN_CACHE_BYTES);
        // A field missing (an older kernel's file, a truncated read).
        assert_eq!(clean_cache_bytes("SwapCached: 1 kB\n"), None);
        // A field name that is a prefix of another is not taken for it.
        assert_eq!(
            meminfo_bytes("MemFreeX: 5 kB\nMemFree: 7 kB\n", "MemFree"),
            Some(7 << 10)
        );
    }

    #[cfg_attr(miri, ignore = "Miri reads no /proc")]
    #[test]
    fn the_free_memory_counted_is_what_proc_meminfo_says() {
        // Read back to back, on a machine whose other processes allocate
        // and free meanwhile.
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        let said = meminfo_bytes(&meminfo, "MemFree").unwrap();
        let counted = mem_free_now().unwrap();
        assert!(
            counted.abs_diff(said) < 64 << 20,
            "sysinfo {counted}, /proc/meminfo {said}"
        );
        let zoneinfo = std::fs::read_to_string("/proc/zoneinfo").unwrap();
        let min = min_watermarks_bytes(&zoneinfo, crate::os_page_size() as u64);
        assert_eq!(min_watermarks_now(), min);
        assert_eq!(min_watermarks_now(), min, "from the copy kept");
    }

    #[cfg_attr(miri, ignore = "Miri reads no /proc")]
    #[test]
    fn this_machine_has_memory_free_for_a_piece_and_not_for_all_of_it() {
        let free = mem_free_now().unwrap();
        assert!(memory_free_for(0) || free < 64 << 20, "{free} bytes free");
        assert!(!memory_free_for(free), "all of the free memory");
    }
}
