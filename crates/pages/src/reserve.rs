//! The locked reserve: memory that every page source of the process
//! carves its chunks from once it exists, populated and locked before the
//! stores need it, for a process that must never wait for the kernel to
//! find a fresh page while it serves I/O (a swap device's server: such a
//! fault may have to swap a page out to the very process that took it, or,
//! for a thread that may not start I/O, spin in reclaim with nothing to
//! reclaim).
//!
//! [`lock_reserve`] reserves address space for the most the stores may
//! hold and populates and locks a first part of it. Frontiers take
//! [`PIECE_BYTES`] pieces of populated memory from it instead of mapping
//! chunks. A refill thread ([`start_refill`]) keeps [`LOW_WATER_PIECES`]
//! pieces ready: when fewer are left it populates more, ahead of need,
//! outside the I/O path (and runs its caller's `top_up`, for other memory
//! kept ahead the same way). That thread may wait in reclaim, and reclaim may
//! swap pages out to this very process: those writes are stored with the
//! pieces still ready. A frontier that finds none waits for the thread at
//! most [`TAKE_WAIT`], then gets an error (the store's write fails, as the
//! kernel's zram fails a write it has no memory for); past the address
//! space reserved, it gets an error at once. A source that drops gives its
//! pieces back, zeroed.
//!
//! Giving pages back to the kernel is impossible in locked memory
//! (`MADV_DONTNEED` refuses locked ranges), so released ranges are zeroed
//! instead (`release.rs` asks [`active`]): they read as zero afterwards, as
//! released pages do, and stay resident and locked.
//!
//! This module owns the reserve's mapping, its ready pieces and the refill
//! thread; which runs are carved from a piece is the frontier's business,
//! and it never reads or writes a piece that is handed out.

use std::ptr::NonNull;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use crate::PagesError;

/// Bytes of one piece: the chunk a frontier carves runs from in reserve
/// mode. Every run of a source with pages up to 16 KiB fits (64 pages of
/// 16 KiB); a longer run (64 KiB pages) cannot come from the reserve, and its
/// allocation fails.
pub const PIECE_BYTES: usize = 1 << 20;

/// Pieces the refill thread keeps ready. A swap-out burst is bounded by
/// the requests in flight (ublk's default, two queues of 32 requests of at
/// most 128 KiB, is 8 MiB of pages, about 4 MiB stored at 2:1), and the
/// thread populates a piece in well under the [`TAKE_WAIT`] a taker waits;
/// every locked piece not yet taken is memory the machine that swaps does
/// not have.
pub const LOW_WATER_PIECES: usize = 4;

/// How long a frontier that finds no ready piece waits for the refill
/// thread before its allocation fails.
pub const TAKE_WAIT: Duration = Duration::from_millis(100);

/// `MADV_POPULATE_WRITE` (Linux 5.14), which the libc crate may not name.
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// The reserve: one mapping, its ready pieces and how far it is populated.
struct Reserve {
    base: NonNull<u8>,
    /// Bytes of address space reserved.
    len: usize,
    state: Mutex<State>,
    /// Signalled when pieces are taken below the low water mark (the refill
    /// thread waits on it) and when pieces are made ready (takers wait).
    changed: Condvar,
}

struct State {
    /// Offsets of the ready pieces (populated, locked, zero, not handed
    /// out). Its capacity is every piece, so a push never allocates.
    ready: Vec<usize>,
    /// Bytes from the start populated so far; pieces past it are address
    /// space only.
    populated: usize,
    /// Set when populating failed (the kernel refused memory): the refill
    /// thread stops trying until a piece is given back.
    refused: bool,
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
    /// Bytes populated and locked so far.
    pub locked: u64,
    /// Bytes of the pieces handed to page sources.
    pub taken: u64,
}

/// Reserves `limit` bytes of address space (rounded up to whole pieces)
/// for every page source of the process, and populates and locks the first
/// `initial` bytes of it (rounded up likewise, at most `limit`). From now on
/// every page source carves from it. Once per process: a second call is an
/// error, as is a limit of 0.
///
/// Fails when the kernel refuses to lock the first part (`RLIMIT_MEMLOCK`
/// without `CAP_IPC_LOCK`, or not enough memory): the error names the
/// errno.
pub fn lock_reserve(limit: u64, initial: u64) -> Result<ReserveStats, PagesError> {
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
    let first = whole(initial)?.min(len);
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
        state: Mutex::new(State {
            ready,
            populated: first,
            refused: false,
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
    Some(ReserveStats {
        limit: r.len as u64,
        locked: s.populated as u64,
        taken: (s.populated - s.ready.len() * PIECE_BYTES) as u64,
    })
}

/// How often the refill thread runs its caller's `top_up` when no piece is
/// taken.
pub const TOP_UP_EVERY: Duration = Duration::from_millis(250);

/// Starts the thread (named `reserve`) that keeps [`LOW_WATER_PIECES`]
/// pieces ready; it runs `setup` first. It must not be a thread the kernel
/// spares I/O (`PR_SET_IO_FLUSHER`): its faults are the ones allowed to
/// wait for reclaim, which may swap (`setup` is where the caller clears
/// such a flag). It also runs `top_up` whenever a piece is taken and at
/// least every [`TOP_UP_EVERY`]: the caller's other memory kept ahead of
/// need the same way (the C heap). Does nothing without a reserve.
pub fn start_refill(
    setup: impl FnOnce() + Send + 'static,
    top_up: impl FnMut() + Send + 'static,
) -> std::io::Result<()> {
    let Some(r) = RESERVE.get() else {
        return Ok(());
    };
    std::thread::Builder::new()
        .name("reserve".into())
        .spawn(move || {
            setup();
            r.refill_forever(top_up)
        })?;
    Ok(())
}

impl Reserve {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The refill thread's loop: populate a piece whenever fewer than the
    /// low water mark are ready and address space is left; run `top_up`
    /// after every wake-up.
    fn refill_forever(&self, mut top_up: impl FnMut()) -> ! {
        loop {
            top_up();
            let next = {
                let s = self.lock();
                let wanted = |s: &State| {
                    !s.refused
                        && s.ready.len() < LOW_WATER_PIECES
                        && s.populated + PIECE_BYTES <= self.len
                };
                let s = if wanted(&s) {
                    s
                } else {
                    // A take's notification or the period ends the wait;
                    // either way `top_up` runs again first.
                    self.changed
                        .wait_timeout(s, TOP_UP_EVERY)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                };
                if !wanted(&s) {
                    continue;
                }
                s.populated
            };
            // SAFETY: `next..next + PIECE_BYTES` lies in the mapping (checked
            // above) past every populated piece, so nobody holds it; only this
            // thread advances `populated`.
            let made = unsafe { populate_and_lock(self.base.as_ptr().add(next), PIECE_BYTES) };
            let mut s = self.lock();
            match made {
                Ok(()) => {
                    s.populated = next + PIECE_BYTES;
                    s.ready.push(next);
                }
                Err(_) => s.refused = true,
            }
            drop(s);
            self.changed.notify_all();
        }
    }
}

/// A ready piece (its start; [`PIECE_BYTES`] long, every byte zero,
/// resident and locked). Waits at most [`TAKE_WAIT`] for the refill thread
/// when none is ready; an error when none came or the reserve is used up.
pub(crate) fn take_piece() -> Result<NonNull<u8>, PagesError> {
    let r = RESERVE.get().ok_or(PagesError::OutOfMemory(libc::ENOMEM))?;
    let mut s = r.lock();
    if s.ready.is_empty() && s.populated + PIECE_BYTES <= r.len && !s.refused {
        r.changed.notify_all();
        s = r
            .changed
            .wait_timeout_while(s, TAKE_WAIT, |s| s.ready.is_empty() && !s.refused)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    let Some(off) = s.ready.pop() else {
        return Err(PagesError::ReserveExhausted {
            bytes: s.populated as u64,
        });
    };
    let low = s.ready.len() < LOW_WATER_PIECES;
    drop(s);
    if low {
        r.changed.notify_all();
    }
    // SAFETY: every ready offset is a piece inside the mapping.
    Ok(unsafe { r.base.add(off) })
}

/// Gives a piece back, zeroing it first (a frontier's fresh bytes read as
/// zero).
///
/// # Safety
/// `piece` came from [`take_piece`], is given back once, and nobody holds a
/// reference into it any more.
pub(crate) unsafe fn give_piece(piece: NonNull<u8>) {
    let Some(r) = RESERVE.get() else { return };
    // SAFETY: the caller's contract: the piece is ours alone now, and it lies
    // in the writable reserve mapping.
    unsafe { piece.as_ptr().write_bytes(0, PIECE_BYTES) };
    let off = piece.as_ptr() as usize - r.base.as_ptr() as usize;
    let mut s = r.lock();
    // The list's capacity is every piece: this push never allocates.
    s.ready.push(off);
    s.refused = false;
    drop(s);
    r.changed.notify_all();
}
