//! The public [`Region`]: an anonymous private mapping the program uses as
//! ordinary memory, whose pages beyond a resident limit live compressed in
//! a zram store and come back on a fault.
//!
//! Owns the region's life: mapping and registering it, starting the
//! workers, the hints' ranges, the statistics snapshot, and teardown
//! (unregister, stop the workers, unmap). It is the top floor: no module
//! imports it.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::config::{FaultService, RegionConfig};
use crate::controller::PromotionController;
use crate::copies::Copies;
use crate::discards::Discards;
use crate::error::RegionError;
use crate::evict::drain_discards;
use crate::evictor;
use crate::follow::FollowState;
use crate::fork;
use crate::gate::{Gate, Side};
use crate::mapping::Mapping;
use crate::own::OwnCode;
use crate::probation::Probation;
use crate::shared::Shared;
use crate::signal;
use crate::soft_dirty::SoftDirty;
use crate::stats::{Counters, RegionStats};
use crate::table::{PageTable, PROBATION, STORED};
use crate::uffd::{Uffd, UffdMode};
use crate::workers;
use crate::zaps::Zaps;

/// The system's page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf takes a name and returns a number.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// A region of compressed memory for one process.
///
/// The memory is read and written through [`Region::as_ptr`] as ordinary
/// memory; a fault on a page that is not mapped is served by the region's
/// handler thread. Byte ranges given to the hints are offsets from the
/// start of the region.
///
/// Rules:
/// - Only dropping the region unmaps it. The program's `madvise(DONTNEED)`
///   (or `FREE`) of a range is followed: the range reads as zeros after,
///   and its stored copies are freed. Its `munmap` of part of the region is
///   followed (those pages are gone). Its `mremap` is followed: the moved
///   pages keep their contents at the new address; pages a growing
///   `mremap` adds are the program's (given the zero page, never evicted).
/// - In user-mode-only mode ([`UffdMode::UserModeOnly`]), and when faults
///   are served in the faulting thread ([`FaultService::FaultingThread`]),
///   a system call that reads or writes a page not mapped fails with
///   `EFAULT`: call [`Region::touch`] on the buffer first.
/// - A forked child gets its own copy: the region is rebuilt in the child
///   (see the `fork` module).
///
/// ```no_run
/// use region::{Region, RegionConfig};
///
/// // 1 GiB of address space, at most 64 MiB of it in memory.
/// let r = Region::new(1 << 30, RegionConfig::new(64 << 20)).unwrap();
/// let base = r.as_ptr();
/// for i in 0..(1 << 30) / 4096 {
///     // SAFETY: a page of the region; pages past the limit go to the store.
///     unsafe { base.add(i * 4096).write(i as u8) };
/// }
/// // SAFETY: page 3, brought back from the store by a fault.
/// assert_eq!(unsafe { base.add(3 * 4096).read() }, 3);
/// println!("{}", r.stats_json());
/// ```
#[derive(Debug)]
pub struct Region {
    sh: Arc<Shared>,
    base: usize,
}

/// Unmaps a fresh mapping if the region cannot be made.
struct MapGuard {
    addr: usize,
    len: usize,
    armed: bool,
}

impl Drop for MapGuard {
    fn drop(&mut self) {
        if self.armed {
            // SAFETY: our own mapping, not yet handed out.
            unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
        }
    }
}

impl Region {
    /// The state the region's threads share (for the crate's own tests,
    /// which drive an eviction step by step).
    #[cfg(test)]
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.sh
    }

    /// Maps `len` bytes (rounded up to whole pages) of anonymous private
    /// memory and starts its handler and evictor. At most
    /// `config.resident_limit` bytes (rounded down to whole pages) stay
    /// mapped.
    pub fn new(len: usize, config: RegionConfig) -> Result<Region, RegionError> {
        let _own = OwnCode::enter();
        let ps = page_size();
        let len = match len.checked_next_multiple_of(ps) {
            Some(l) if l > 0 && l <= isize::MAX as usize / 2 => l,
            _ => return Err(RegionError::BadLength { len }),
        };
        let limit = config.resident_limit;
        if limit == 0 || limit > len || limit < ps {
            return Err(RegionError::BadLimit { limit, len });
        }
        if config.store.page_size != ps {
            return Err(RegionError::Store(format!(
                "the store's page size {} is not the system's {ps}",
                config.store.page_size
            )));
        }
        let npages = len / ps;
        let limit_pages = (limit / ps) as u64;
        let in_thread = config.fault_service == FaultService::FaultingThread;
        if in_thread && !cfg!(target_arch = "x86_64") {
            return Err(RegionError::Unsupported(
                "faults served in the faulting thread need x86-64 (its fault error code tells a \
                 write-protect fault from a missing page)"
                    .into(),
            ));
        }
        if in_thread && ps > signal::MAX_PAGE {
            return Err(RegionError::Unsupported(format!(
                "faults served in the faulting thread need pages of at most {} bytes, not {ps}",
                signal::MAX_PAGE
            )));
        }
        let uffd = Uffd::open(config.uffd, in_thread)?;
        // SAFETY: a fresh private anonymous mapping, no address asked for.
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
            let err = std::io::Error::last_os_error();
            uffd.close();
            return Err(RegionError::Os { what: "mmap", err });
        }
        let mut guard = MapGuard {
            addr: addr as usize,
            len,
            armed: true,
        };
        // Pages of the page size: transparent huge pages would be evicted
        // and faulted 2 MiB at a time.
        // SAFETY: advice on our own mapping.
        unsafe { libc::madvise(addr, len, libc::MADV_NOHUGEPAGE) };
        if let Err(err) = uffd.register(addr as usize, len) {
            uffd.close();
            return Err(RegionError::Os {
                what: "UFFDIO_REGISTER (missing and write-protect)",
                err,
            });
        }
        let fail = |e: RegionError| {
            uffd.close();
            e
        };
        let store = config
            .store
            .open(len as u64)
            .map_err(|e| fail(RegionError::Store(e.to_string())))?;
        let slots = config.probation_slots(limit_pages as usize);
        let probation = Probation::new(slots, ps).map_err(|err| {
            fail(RegionError::Os {
                what: "mapping the probation slab",
                err,
            })
        })?;
        let controller = PromotionController::new(config.controller, Duration::ZERO);
        let soft_dirty = config.soft_dirty;
        // The handler's poll: measured for the default only, and not when
        // faults are served in their own threads (nothing to poll for).
        let wake = (!in_thread && config.handler_poll.is_none())
            .then(crate::wake_cost::wake_cost)
            .flatten();
        let poll = if in_thread {
            Duration::ZERO
        } else {
            config.poll_window(wake)
        };
        let sh = Arc::new(Shared {
            page_size: ps,
            len,
            uffd_fd: AtomicI32::new(uffd.fd()),
            uffd_mode: uffd.mode(),
            handler_efd: AtomicI32::new(-1),
            evictor_efd: AtomicI32::new(-1),
            table: PageTable::new(npages),
            mapping: RwLock::new(Mapping::new(addr as usize, len, ps)),
            events: RwLock::new(()),
            probation,
            store,
            discards: Discards::new(4096),
            zaps: Zaps::default(),
            copies: Copies::default(),
            resident: AtomicU64::new(0),
            room: AtomicU32::new(0),
            room_waiters: AtomicU32::new(0),
            evictor_awake: AtomicBool::new(true),
            handler_waiting: AtomicU32::new(0),
            cap_pages: limit_pages,
            share_pages: AtomicU64::new(limit_pages),
            outside_bytes: AtomicU64::new(0),
            counters: Counters::default(),
            gate: Gate::default(),
            stop: AtomicBool::new(false),
            stop_handler: AtomicBool::new(false),
            started: Instant::now(),
            started_coarse_ns: crate::shared::coarse_ns(),
            threshold_ms: AtomicU64::new(controller.threshold().as_millis() as u64),
            controller: Mutex::new(controller),
            promo_per_min: AtomicU64::new(0),
            promo_rate: AtomicU64::new(0),
            poll_ns: poll.as_nanos() as u64,
            wake_cost_ns: wake.map_or(0, |w| w.as_nanos() as u64),
            config,
            threads: Mutex::new(Vec::new()),
            hand: AtomicUsize::new(0),
            follow: FollowState::default(),
            soft_dirty: SoftDirty::open(soft_dirty, ps),
        });
        if in_thread {
            signal::register(&sh).inspect_err(|_| sh.uffd().close())?;
        }
        // Registered and its threads started with the registry locked: a
        // fork comes before or after, and rebuilds the child's copy.
        let started = fork::register(&sh, || {
            workers::start(&sh).inspect_err(|_| workers::stop(&sh))
        });
        if let Err(err) = started {
            signal::unregister(&sh);
            sh.uffd().close();
            return Err(RegionError::Os {
                what: "starting the region's threads",
                err,
            });
        }
        guard.armed = false;
        Ok(Region {
            sh,
            base: addr as usize,
        })
    }

    /// The first byte of the region (where it was made; after the program
    /// moves it with `mremap`, wherever it put it).
    pub fn as_ptr(&self) -> *mut u8 {
        // Inside the fork gate (a fork waits for the locks below to be
        // let go: held at the instant of a fork they would stay held in
        // the child, whose handler would then never take them).
        self.sh.gate.enter(Side::Handler);
        let addr = {
            // After the batch the handler is serving: an `mremap` returns
            // once its event is read, before the handler has moved the
            // mapping.
            let _batch = self.sh.events.read().unwrap_or_else(|e| e.into_inner());
            let map = self.sh.read_mapping();
            map.addr_of(0).unwrap_or(self.base)
        };
        self.sh.gate.leave(Side::Handler);
        addr as *mut u8
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.sh.len
    }

    /// Whether the region has no bytes (never: a region has a page at
    /// least).
    pub fn is_empty(&self) -> bool {
        self.sh.len == 0
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.sh.page_size
    }

    /// How the userfaultfd was opened.
    pub fn uffd_mode(&self) -> UffdMode {
        self.sh.uffd_mode
    }

    /// Which thread serves a fault.
    pub fn fault_service(&self) -> FaultService {
        self.sh.config.fault_service
    }

    /// Whether the kernel's own accesses to a page not mapped are served
    /// (a `read(2)` into the region, say); where they are not, such a
    /// system call fails with `EFAULT` unless the range is touched first
    /// ([`Region::touch`]).
    pub fn serves_the_kernels_accesses(&self) -> bool {
        self.sh.uffd_mode != UffdMode::UserModeOnly
            && self.sh.config.fault_service == FaultService::HandlerThread
    }

    /// The resident limit in bytes.
    pub fn resident_limit(&self) -> usize {
        self.sh.cap_pages as usize * self.sh.page_size
    }

    /// The store holding the region's compressed pages (for its
    /// statistics; writing to it would corrupt the region).
    pub fn store(&self) -> &zram::Store {
        &self.sh.store
    }

    /// The pages of a byte range (partial pages included).
    fn pages(&self, range: &Range<usize>) -> Result<(usize, usize), RegionError> {
        if range.start > range.end || range.end > self.sh.len {
            return Err(RegionError::OutOfRange {
                start: range.start,
                end: range.end,
                len: self.sh.len,
            });
        }
        let ps = self.sh.page_size;
        Ok((range.start / ps, range.end.div_ceil(ps)))
    }

    /// Compresses the resident pages of `range` now; returns how many.
    pub fn cold(&self, range: Range<usize>) -> Result<usize, RegionError> {
        let _own = OwnCode::enter();
        let (a, b) = self.pages(&range)?;
        Ok(evictor::cold(&self.sh, a, b))
    }

    /// Brings the compressed pages of `range` back ahead of use, as far as
    /// the resident limit allows; returns how many.
    pub fn willneed(&self, range: Range<usize>) -> Result<usize, RegionError> {
        let _own = OwnCode::enter();
        let (a, b) = self.pages(&range)?;
        Ok(evictor::willneed(&self.sh, a, b, false))
    }

    /// As [`Region::willneed`], and marks the range's pages referenced now,
    /// so the clock passes them over once and their age starts again.
    pub fn hot(&self, range: Range<usize>) -> Result<usize, RegionError> {
        let _own = OwnCode::enter();
        let (a, b) = self.pages(&range)?;
        Ok(evictor::willneed(&self.sh, a, b, true))
    }

    /// Faults `range` in from user mode (a read of one byte per page), so
    /// a system call on it finds its pages mapped: what a user-mode-only
    /// region, or one whose faults are served in the faulting thread, needs before passing a buffer to the kernel. The pages may be
    /// evicted again later, like any others.
    pub fn touch(&self, range: Range<usize>) -> Result<(), RegionError> {
        let (a, b) = self.pages(&range)?;
        let base = self.as_ptr();
        let ps = self.sh.page_size;
        for p in a..b {
            // SAFETY: a page of the region, mapped or served by the handler.
            unsafe { std::ptr::read_volatile(base.add(p * ps)) };
        }
        Ok(())
    }

    /// The region's statistics now. The store slots of pages brought back
    /// are freed first (the handler leaves that to the evictor), so
    /// `mm_stat` counts only the pages kept in the store.
    pub fn stats(&self) -> RegionStats {
        let _own = OwnCode::enter();
        let sh = &self.sh;
        sh.gate.enter(Side::Evict);
        drain_discards(sh);
        sh.gate.leave(Side::Evict);
        let (faults, evictions, fault_latency, store_fault_time) = sh.counters.parts();
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RegionStats {
            len: sh.len,
            page_size: sh.page_size,
            uffd_mode: sh.uffd_mode,
            fault_service: sh.config.fault_service.name(),
            resident_pages: l(&sh.resident),
            resident_limit_pages: sh.cap_pages,
            limit_covers: sh.config.limit_covers.name(),
            region_share_pages: sh.limit_pages(),
            outside_bytes: l(&sh.outside_bytes),
            stored_pages: sh.table.count(STORED),
            probation_pages: sh.table.count(PROBATION),
            faults,
            evictions,
            removed_by_program: l(&sh.counters.removed_by_program),
            remaps: l(&sh.counters.remaps),
            fork_reinits: l(&sh.counters.fork_reinits),
            soft_dirty: sh.soft_dirty.on(),
            handler_follows: sh.follow.enabled(),
            handler_poll_ns: sh.poll_ns,
            wake_cost_ns: sh.wake_cost_ns,
            handler_moves: l(&sh.counters.handler_moves),
            handler_contended: l(&sh.counters.handler_contended),
            handler_rescues: sh.follow.rescues(),
            fault_latency,
            store_fault_time,
            promotions_per_minute: f64::from_bits(l(&sh.promo_per_min)),
            promotion_rate: f64::from_bits(l(&sh.promo_rate)),
            age_threshold_ms: l(&sh.threshold_ms),
            mm_stat: sh.store.mm_stat(),
        }
    }

    /// The statistics as one line of JSON.
    pub fn stats_json(&self) -> String {
        serde_json::to_string(&self.stats()).unwrap_or_default()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _own = OwnCode::enter();
        signal::unregister(&self.sh);
        fork::unregister(&self.sh, || workers::stop(&self.sh));
        let uffd = self.sh.uffd();
        let segs: Vec<_> = self.sh.read_mapping().segments().to_vec();
        for s in &segs {
            if uffd.fd() >= 0 {
                let _ = uffd.unregister(s.addr, s.len);
            }
            // SAFETY: the region's own segments; the caller gave up every
            // pointer into them by dropping the region.
            unsafe { libc::munmap(s.addr as *mut libc::c_void, s.len) };
        }
        if uffd.fd() >= 0 {
            uffd.close();
        }
    }
}
