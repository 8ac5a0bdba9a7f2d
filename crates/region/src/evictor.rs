//! The evictor thread and the hints: what leaves memory, and when.
//!
//! - **Over the limit** (woken by the handler): the clock hand sweeps the
//!   pages; a page faulted in since the hand last passed (`REFERENCED`),
//!   or written this epoch where the kernel has soft-dirty bits
//!   (`soft_dirty`), gets a second chance, any other resident page is
//!   compressed into the store, by windows (`window`) of at least
//!   `window::VICTIMS_MIN` victims, until the resident pages are a batch
//!   under the limit; then the soft-dirty epoch ends if it is due.
//! - **Every scan** (`RegionConfig::scan_interval`), cold detection by
//!   probing: a page whose last known reference is older than half the age
//!   threshold is *probed*: its mapping is dropped and its uncompressed
//!   copy kept in a probation slot, so a touch costs one cheap fault
//!   (`UFFDIO_COPY` of the copy, no decompression) and refreshes its age.
//!   A page left untouched in probation for the other half of the threshold
//!   is compressed into the store (an age eviction). The only references
//!   the region can see without root on a kernel without soft-dirty bits
//!   are faults; probes make faults out of a sample of references.
//! - **Compaction**: at most every 20 ms, at any wake-up, the store is
//!   compacted when that would give back a 32nd of its pool
//!   (`compact_if_fragmented`).
//! - **The controller**: at each period's end it is given the promotions
//!   (faults served from the store) and the working set (resident and
//!   probation pages) and sets the age threshold.
//! - **Hints** (`cold`, `willneed`, `hot`) run the same sequences on the
//!   caller's thread.
//! - **The limit's share** (`budget`): with a limit that covers the
//!   process, at most every 10 ms, the region's share is set to what the
//!   rest of the process leaves of it.
//! - **The handler's watch**: while the handler sits on a followed CPU
//!   (`follow`), every `WATCH_MS` the evictor checks that it still reads
//!   its faults.
//!
//! Owns the victim choice and the timing; the sequences are `evict`'s,
//! and it makes no userfaultfd or `madvise` call of its own beyond polling
//! the userfaultfd for the watch.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::budget::{self, LimitCovers};
use crate::buf::{lock_stack, LockedBuf};
use crate::evict::{bring_in, drain_discards, probe, settle_probation};
use crate::follow::WATCH_MS;
use crate::gate::Side;
use crate::shared::{drain, room_made, Shared};
use crate::soft_dirty::Written;
use crate::stats::Counters;
use crate::table::{LOADING, PROBATION, REFERENCED, RESIDENT, STORED};
use crate::window::{self, evict_window, Choice};

/// Pages evicted below the limit at each wake-up: a batch, so the handler
/// does not wake the evictor for every fault.
pub(crate) fn batch(sh: &Shared) -> u64 {
    (sh.limit_pages() / 32).clamp(1, 64)
}

/// Whether the evictor should make room: the resident pages are within
/// half a batch of the limit, and the region has more pages than the limit
/// (otherwise everything fits).
pub(crate) fn needs_room(sh: &Shared) -> bool {
    (sh.pages() as u64) > sh.limit_pages()
        && sh.resident.load(Ordering::Relaxed) + batch(sh) / 2 >= sh.limit_pages()
}

/// The thread's body.
pub(crate) fn run(sh: Arc<Shared>) {
    lock_stack(64 * 1024);
    sh.follow.evictor_started();
    let Ok(mut buf) = LockedBuf::new(window::RESIDENT_MAX * sh.page_size) else {
        return;
    };
    let efd = sh.evictor_efd.load(Ordering::Acquire);
    let scan_ms = sh.config.scan_interval.as_millis().max(1) as u64;
    let mut next_scan = sh.now_ms() + scan_ms;
    let mut next_compact = sh.now_ms() + COMPACT_EVERY_MS;
    let mut next_watch = 0;
    let mut next_measure = 0;
    let mut stuck = false;
    loop {
        let mut until = next_scan;
        if sh.follow.pinned() {
            next_watch = next_watch.max(sh.now_ms() + 1);
            until = until.min(next_watch);
        }
        let wait = until.saturating_sub(sh.now_ms()).min(i32::MAX as u64) as i32;
        // Asleep from here for `wake_evictor`; a fault that wanted room
        // before the flag went down and did not kick is seen below.
        sh.evictor_awake.store(false, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        let wait = if !stuck && (needs_room(&sh) || sh.discards.half_full()) {
            0
        } else {
            wait
        };
        let mut fds = [libc::pollfd {
            fd: efd,
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, wait) };
        sh.evictor_awake.store(true, Ordering::SeqCst);
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        drain(efd);
        if sh.config.limit_covers == LimitCovers::Process && sh.now_ms() >= next_measure {
            measure_outside(&sh);
            next_measure = sh.now_ms() + budget::EVERY_MS;
        }
        if sh.follow.pinned() && sh.now_ms() >= next_watch {
            sh.follow
                .watch(fault_pending(&sh), sh.started.elapsed().as_nanos() as u64);
            next_watch = sh.now_ms() + WATCH_MS;
        }
        sh.gate.enter(Side::Evict);
        drain_discards(&sh);
        // Stuck: room was wanted and none could be made (every page
        // referenced or held, the store refusing): sleep until kicked
        // rather than spin.
        stuck = false;
        if needs_room(&sh) {
            stuck = make_room(&sh, buf.bytes()) == 0;
        }
        if sh.now_ms() >= next_scan {
            scan(&sh);
            next_scan = sh.now_ms() + scan_ms;
        }
        if sh.now_ms() >= next_compact {
            compact_if_fragmented(&sh);
            next_compact = sh.now_ms() + COMPACT_EVERY_MS;
        }
        sh.gate.leave(Side::Evict);
    }
}

/// With a limit that covers the process: measures the process's memory
/// outside the region and the pool, and sets the region's share to what
/// the limit leaves.
fn measure_outside(sh: &Shared) {
    let Some(mut charged) = budget::process_bytes(None) else {
        return;
    };
    // The other process counts while it is this one's parent: a forked
    // child inherits the setting, not the parent.
    // SAFETY: getppid has no arguments.
    let parent = unsafe { libc::getppid() } as u32;
    if let Some(pid) = sh.config.limit_also_covers.filter(|&p| p == parent) {
        charged += budget::process_bytes(Some(pid)).unwrap_or(0);
    }
    let ps = sh.page_size as u64;
    let region = sh.resident.load(Ordering::Relaxed) * ps;
    let pool = sh.store.mm_stat().mem_used_total;
    let outside = charged.saturating_sub(region + pool);
    sh.outside_bytes.store(outside, Ordering::Relaxed);
    sh.share_pages.store(
        budget::share(sh.cap_pages, outside.div_ceil(ps)),
        Ordering::Relaxed,
    );
}

/// Whether the userfaultfd holds a message no one has read.
fn fault_pending(sh: &Shared) -> bool {
    let mut fd = libc::pollfd {
        fd: sh.uffd().fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    unsafe { libc::poll(&mut fd, 1, 0) > 0 && fd.revents & libc::POLLIN != 0 }
}

/// Evicts by the clock until a batch under the limit; returns the pages
/// evicted.
fn make_room(sh: &Shared, buf: &mut [u8]) -> usize {
    let n = sh.pages();
    let mut evicted = 0;
    let target = sh.limit_pages().saturating_sub(batch(sh));
    // Two sweeps at most: the first clears the referenced flags.
    let mut steps = 2 * n;
    let mut written = Written::new();
    while sh.resident.load(Ordering::Acquire) > target && steps > 0 {
        steps -= 1;
        let p = sh.hand.fetch_add(1, Ordering::Relaxed) % n;
        if sh.table.state(p) != RESIDENT {
            continue;
        }
        if sh.table.set_flag(p, REFERENCED, false) {
            continue;
        }
        if sh.soft_dirty.on() {
            // The block covers the window that may start here.
            if !written.holds(p, window::WINDOW_MAX, n) {
                written.fill_from(&sh.soft_dirty, &sh.mapping, p);
            }
            // The block's address, not a lookup under the mapping's lock
            // at every step of the hand.
            let addr = written.addr_of(p, sh.page_size);
            if addr.is_some_and(|a| window::written_this_epoch(sh, p, a, &written)) {
                continue;
            }
        }
        // The window from the victim takes the victims after it, up to
        // what is needed but never fewer than `window::VICTIMS_MIN`: a zap
        // costs a flush and the handler's reading of its event, which a
        // window of a few victims would pay again and again while the
        // faults the limit holds back wait. The hand passes over the
        // window.
        let need = (sh.resident.load(Ordering::Acquire).saturating_sub(target) as usize)
            .max(window::VICTIMS_MIN);
        // Slots of pages brought back since are freed before a window is
        // stored: their space goes to the window, and in a slow fault
        // storm the queue would otherwise hold thousands of stale copies
        // while this loop evicts.
        drain_discards(sh);
        let (len, went) = evict_window(sh, p, need, buf, Choice::Clock(&written));
        if len > 0 {
            sh.hand.fetch_add(len - 1, Ordering::Relaxed);
        }
        if went > 0 {
            evicted += went;
            sh.counters
                .evicted_limit
                .fetch_add(went as u64, Ordering::Relaxed);
            room_made(sh);
        }
    }
    let hand = sh.hand.load(Ordering::Relaxed);
    let (now, stamp) = (sh.now_ms(), sh.stamp_ms() as u32);
    if let Some(took) = sh
        .soft_dirty
        .end_epoch_if_due(&sh.table, &sh.mapping, hand, now, stamp)
    {
        Counters::bump(&sh.counters.soft_dirty_epochs);
        sh.counters
            .soft_dirty_ns
            .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
    }
    evicted
}

/// One scan: settle probation, probe old pages, run the controller.
fn scan(sh: &Shared) {
    let now = sh.now_ms();
    let threshold = sh.threshold_ms.load(Ordering::Relaxed);
    let half = threshold / 2;
    if sh.config.age_eviction {
        for s in 0..sh.probation.slots() {
            if let Some((p, since)) = sh.probation.owner(s) {
                if now.saturating_sub(since) >= half && settle_probation(sh, p) {
                    Counters::bump(&sh.counters.evicted_age);
                }
            }
        }
        let n = sh.pages();
        let mut free = sh.probation.slots() - sh.probation.used();
        for p in 0..n {
            if free == 0 {
                break;
            }
            if sh.table.state(p) != RESIDENT {
                continue;
            }
            let stamp = sh.table.stamp(p) as u64;
            if now.saturating_sub(stamp) >= half && probe(sh, p) {
                Counters::bump(&sh.counters.probed);
                free -= 1;
            }
        }
    }
    let wss = sh.resident.load(Ordering::Relaxed) + sh.probation.used() as u64;
    let promotions = sh.counters.missing_store.load(Ordering::Relaxed);
    let mut c = sh.controller.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = c.tick(Duration::from_millis(now), promotions, wss) {
        sh.threshold_ms
            .store(t.as_millis() as u64, Ordering::Relaxed);
        sh.promo_per_min
            .store(c.last_per_minute().to_bits(), Ordering::Relaxed);
        sh.promo_rate
            .store(c.last_rate().to_bits(), Ordering::Relaxed);
    }
}

/// The shortest time between two compactions of the store. Compacting a
/// pool that pages keep leaving and entering costs the evictor, the
/// busiest thread of a region at its limit, CPU it owes the faults; the
/// estimate below keeps it to compactions that give pages back.
const COMPACT_EVERY_MS: u64 = 20;

/// Compaction runs when it would give back at least this share of the
/// pool (1/32)...
const COMPACT_SHARE: u64 = 32;

/// ... and at least this many pages (256 KiB of 4 KiB pages).
const COMPACT_MIN_PAGES: u64 = 64;

/// Compacts the store when compaction would give back a 32nd of its pool
/// (and 64 pages): pages coming back free objects all over its zspages,
/// and a region's store has no background compactor (a forked child would
/// inherit a store whose thread it does not have), so the evictor's scan
/// is where it compacts. The allocator's own estimate (`can_compact`,
/// zsmalloc's per-class count of zspages its objects would no longer
/// need) decides; an allocator without one is compacted when its pool
/// holds more than an eighth (and a MiB) beyond its compressed bytes.
fn compact_if_fragmented(sh: &Shared) {
    let m = sh.store.mm_stat();
    let pool_pages = m.mem_used_total / sh.store.mem_page_size() as u64;
    let freeable = sh.store.allocator().can_compact();
    let worth = freeable >= (pool_pages / COMPACT_SHARE).max(COMPACT_MIN_PAGES);
    let loose = m.mem_used_total > m.compr_data_size + m.compr_data_size / 8 + (1 << 20);
    if worth || (freeable == 0 && loose) {
        let _ = sh.store.compact();
    }
}

/// Evicts pages `first..end` now (probation pages too); returns how many.
pub(crate) fn cold(sh: &Shared, first: usize, end: usize) -> usize {
    let Ok(mut buf) = LockedBuf::new(window::RESIDENT_MAX * sh.page_size) else {
        return 0;
    };
    sh.gate.enter(Side::Evict);
    let mut done = 0;
    let mut p = first;
    while p < end {
        // A page being brought back by the handler: wait for it (its
        // thread is woken only once it is published).
        let mut state = sh.table.state(p);
        let mut spins = 0;
        while state == LOADING && spins < 100_000 {
            std::thread::yield_now();
            spins += 1;
            state = sh.table.state(p);
        }
        // A run of resident pages goes as one window (one write-protect,
        // one copy, one zap); the next page is looked at after it.
        let (len, went) = match state {
            RESIDENT => evict_window(sh, p, end - p, buf.bytes(), Choice::All { end }),
            PROBATION => (1, usize::from(settle_probation(sh, p))),
            _ => (1, 0),
        };
        sh.counters
            .evicted_hint
            .fetch_add(went as u64, Ordering::Relaxed);
        done += went;
        p += len.max(1);
    }
    sh.gate.leave(Side::Evict);
    if done > 0 {
        room_made(sh);
    }
    done
}

/// Brings the stored and probation pages of `first..end` back, as far as
/// the limit allows; marks every resident one referenced now when `hot`.
/// Returns the pages brought back.
pub(crate) fn willneed(sh: &Shared, first: usize, end: usize, hot: bool) -> usize {
    let Ok(mut buf) = LockedBuf::new(sh.page_size) else {
        return 0;
    };
    sh.gate.enter(Side::Evict);
    let mut done = 0;
    for p in first..end {
        let s = sh.table.state(p);
        if (s == STORED || s == PROBATION) && !sh.at_limit() {
            let addr = sh.read_mapping().addr_of(p);
            if let Some(addr) = addr {
                // EAGAIN (the mapping is changing) leaves the page stored:
                // a hint, not a promise.
                let batch = sh.events.read().unwrap_or_else(|e| e.into_inner());
                let got = bring_in(sh, p, addr, buf.bytes(), false, false, false);
                drop(batch);
                if got == crate::evict::BringIn::Done {
                    Counters::bump(&sh.counters.prefetched);
                    done += 1;
                }
            }
        }
        if hot && sh.table.state(p) == RESIDENT {
            sh.table.set_stamp(p, sh.now_ms() as u32);
            sh.table.set_flag(p, REFERENCED, true);
        }
    }
    sh.gate.leave(Side::Evict);
    done
}
