//! What the region's threads share: the page table, the mapping, the
//! store, the probation slab, the counters, the fork gate, the descriptors
//! (userfaultfd and the two workers' eventfds), the controller and the
//! handler's placement.
//!
//! Owns the assembly and the small system calls on its descriptors
//! (eventfd kicks); the fault path is `handler`'s, eviction is `evict`'s.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use zram::Store;

use crate::config::RegionConfig;
use crate::controller::PromotionController;
use crate::copies::Copies;
use crate::discards::Discards;
use crate::follow::FollowState;
use crate::gate::Gate;
use crate::mapping::Mapping;
use crate::probation::Probation;
use crate::soft_dirty::SoftDirty;
use crate::stats::Counters;
use crate::table::PageTable;
use crate::uffd::{Uffd, UffdMode};
use crate::zaps::Zaps;

/// The region's shared state.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Bytes per page.
    pub page_size: usize,
    /// Bytes of the region as made.
    pub len: usize,
    /// The userfaultfd's descriptor (replaced in a forked child).
    pub uffd_fd: AtomicI32,
    /// How it was opened.
    pub uffd_mode: UffdMode,
    /// The handler's eventfd (stop, or room made under the limit).
    pub handler_efd: AtomicI32,
    /// The evictor's eventfd (over the limit, stop).
    pub evictor_efd: AtomicI32,
    /// Page states.
    pub table: PageTable,
    /// Page addresses.
    pub mapping: RwLock<Mapping>,
    /// Held for writing while the handler reads a batch of messages and
    /// serves its events (its faults are served after); for reading while
    /// any other thread brings a page back (a hint, a fault served in its
    /// own thread) or looks an address up (such a fault,
    /// `Region::as_ptr`). The kernel counts an event as
    /// read when `read(2)` returns it (`madvise` then zaps, `mremap`
    /// returns), and until the handler has served it the page's state and
    /// the mapping are the old ones: a page brought back in between would
    /// come back with the contents the program dropped, an address looked
    /// up would be the old one.
    pub events: RwLock<()>,
    /// Probed pages' copies.
    pub probation: Probation,
    /// The compressed pages, one disk page per region page.
    pub store: Store,
    /// Store slots of pages brought back, to free off the fault path.
    pub discards: Discards,
    /// The region's own zaps whose remove events are still to come.
    pub zaps: Zaps,
    /// The evicting threads copying their pages out now.
    pub copies: Copies,
    /// Pages mapped now.
    pub resident: AtomicU64,
    /// Bumped each time the evictor makes room under the limit: a futex
    /// word that threads serving their own faults wait on.
    pub room: AtomicU32,
    /// Threads waiting on `room` (the evictor wakes them only if any).
    pub room_waiters: AtomicU32,
    /// Whether the evictor is awake (between two sleeps): a fault that
    /// wants room kicks it only while it sleeps (`wake_evictor`).
    pub evictor_awake: AtomicBool,
    /// Faults the handler thread has put off, as of its last look: the
    /// evictor kicks it when it makes room only if there are any (it
    /// tries them again every 20 µs regardless).
    pub handler_waiting: AtomicU32,
    /// The resident limit in pages, as set.
    pub cap_pages: u64,
    /// The region's share of it in pages: all of it, or what the rest of
    /// the process leaves (`budget`).
    pub share_pages: AtomicU64,
    /// The process's memory outside the region and the pool at the last
    /// measurement, in bytes (0 unless the limit covers the process).
    pub outside_bytes: AtomicU64,
    /// Counters.
    pub counters: Counters,
    /// The fork gate.
    pub gate: Gate,
    /// Set to stop the evictor.
    pub stop: AtomicBool,
    /// Set to stop the handler (after the evictor: its evictions need it).
    pub stop_handler: AtomicBool,
    /// When the region was made (stamps count milliseconds from it).
    pub started: Instant,
    /// The same, on the coarse clock (`coarse_ns`).
    pub started_coarse_ns: u64,
    /// The age threshold in milliseconds.
    pub threshold_ms: AtomicU64,
    /// The promotion-rate controller.
    pub controller: Mutex<PromotionController>,
    /// The last period's promotions per minute (f64 bits).
    pub promo_per_min: AtomicU64,
    /// The last period's promotion rate (f64 bits).
    pub promo_rate: AtomicU64,
    /// The settings.
    pub config: RegionConfig,
    /// How long the handler polls after a message, in nanoseconds
    /// (`RegionConfig::poll_window`, fixed when the region is made).
    pub poll_ns: u64,
    /// The wake-up cost the default poll was set from, in nanoseconds (0:
    /// the poll was set, or not measured).
    pub wake_cost_ns: u64,
    /// The workers' handles.
    pub threads: Mutex<Vec<crate::os_thread::OsThread>>,
    /// The clock hand (a page index).
    pub hand: AtomicUsize,
    /// Where the handler runs, watched by the evictor.
    pub follow: FollowState,
    /// The process's soft-dirty bits, if this region uses them.
    pub soft_dirty: SoftDirty,
}

impl Shared {
    /// The page addresses, read-locked; a poisoned lock is taken as it is,
    /// as the region's other locks are.
    pub(crate) fn read_mapping(&self) -> RwLockReadGuard<'_, Mapping> {
        self.mapping.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The page addresses, write-locked (poison ignored as for
    /// [`read_mapping`](Shared::read_mapping)).
    pub(crate) fn write_mapping(&self) -> RwLockWriteGuard<'_, Mapping> {
        self.mapping.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The userfaultfd.
    pub(crate) fn uffd(&self) -> Uffd {
        Uffd::from_raw(self.uffd_fd.load(Ordering::Acquire), self.uffd_mode)
    }

    /// Milliseconds since the region was made.
    pub(crate) fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Milliseconds since the region was made, on the coarse clock (at
    /// most a scheduler tick behind `now_ms`): a page's stamp at each
    /// fault, read without the clock device.
    pub(crate) fn stamp_ms(&self) -> u64 {
        coarse_ns().saturating_sub(self.started_coarse_ns) / 1_000_000
    }

    /// Pages in the region.
    pub(crate) fn pages(&self) -> usize {
        self.table.len()
    }

    /// The resident pages the region may keep now.
    pub(crate) fn limit_pages(&self) -> u64 {
        self.share_pages.load(Ordering::Relaxed)
    }

    /// Whether the region's pages would pass the limit with one more.
    pub(crate) fn at_limit(&self) -> bool {
        self.resident.load(Ordering::Acquire) >= self.limit_pages()
    }
}

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds: the time at the last
/// scheduler tick, read from the vDSO without the clock device (which in a
/// guest under TCG, the HPET, costs microseconds a read).
pub(crate) fn coarse_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: fills the valid timespec; the clock exists on every Linux
    // since 2.6.32.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The evictor made room under the limit: wakes the handler thread and
/// every thread waiting in [`wait_for_room`].
pub(crate) fn room_made(sh: &Shared) {
    // The handler thread waits for room only with faults it serves, and
    // only with faults put off.
    if sh.config.fault_service == crate::config::FaultService::HandlerThread
        && sh.handler_waiting.load(Ordering::Relaxed) > 0
    {
        kick(&sh.handler_efd);
    }
    sh.room.fetch_add(1, Ordering::SeqCst);
    if sh.room_waiters.load(Ordering::SeqCst) > 0 {
        // SAFETY: FUTEX_WAKE on a word of the region's shared state, which
        // outlives the call.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                sh.room.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                i32::MAX,
            )
        };
    }
}

/// Sleeps until the evictor makes room (`room_made`) or `ns` pass,
/// whichever is first; `seen` is `room` as read before the caller found
/// the region at its limit (room made since then returns at once).
/// Async-signal-safe: one system call.
pub(crate) fn wait_for_room(sh: &Shared, seen: u32, ns: u64) {
    sh.room_waiters.fetch_add(1, Ordering::SeqCst);
    let t = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a word of the region's shared state, with a
    // relative timeout; returns at once if the word is no longer `seen`.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            sh.room.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            seen,
            &t as *const libc::timespec,
        )
    };
    sh.room_waiters.fetch_sub(1, Ordering::SeqCst);
}

/// A new eventfd (non-blocking, close-on-exec, at a high number).
pub(crate) fn new_eventfd() -> std::io::Result<libc::c_int> {
    // SAFETY: eventfd takes an initial value and flags.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(crate::descriptors::out_of_the_way(fd))
}

/// Wakes the evictor to make room, unless it is awake: a system call
/// (and on a virtual machine, an interrupt to the evictor's CPU) saved on
/// most faults at the limit, while the evictor works through its batch.
/// The evictor clears `evictor_awake` and then looks at the resident
/// count before it sleeps; the caller has changed that count (or the
/// discards) and then looks at the flag: with a full fence on each side,
/// one of the two sees the other.
pub(crate) fn wake_evictor(sh: &Shared) {
    std::sync::atomic::fence(Ordering::SeqCst);
    if !sh.evictor_awake.load(Ordering::SeqCst) {
        kick(&sh.evictor_efd);
    }
}

/// Adds one to an eventfd (wakes its poller); no allocation.
pub(crate) fn kick(fd: &AtomicI32) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a local to a descriptor the region owns.
    unsafe {
        libc::write(
            fd.load(Ordering::Acquire),
            std::ptr::addr_of!(one).cast(),
            8,
        )
    };
}

/// Empties an eventfd.
pub(crate) fn drain(fd: libc::c_int) {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a local; the fd is non-blocking.
    unsafe { libc::read(fd, std::ptr::addr_of_mut!(v).cast(), 8) };
}
