//! Post-processing that runs by itself: idle marking, recompression and
//! writeback on a timer, and the memory-aware rule that writes pages back
//! as `mem_used_total` nears `mem_limit` instead of failing writes.
//!
//! - **The timed rule** ([`PolicyConfig`]): every `interval`, pages not
//!   accessed for `idle_after` are marked idle (`echo N > idle`), then,
//!   when asked, recompressed (`recompress type=idle`) and written back
//!   (`writeback TYPE`), exactly as those commands would.
//! - **The memory-aware rule** (`Store::set_writeback_near_limit`): when
//!   a write takes `mem_used_total` past `high` percent of the rule's
//!   ceiling (`Store::writeback_ceiling`: `mem_limit` minus the store's
//!   own metadata, the slot table and block bitmap, and the writeback's
//!   batch buffers, so that the store as a whole keeps within
//!   `mem_limit`), the policy thread is woken and writes
//!   back pages until memory is [`LOW_GAP_PERCENT`] below `high`; a write
//!   that would pass the ceiling first does the same synchronously, then
//!   tries once more, failing only past `mem_limit` itself. The
//!   pages written back are the idle ones first, then the least recently
//!   accessed (oldest access time, then lowest index), and the allocator is
//!   compacted after each round, so the freed objects become free pages.
//!   It needs a backing store; without one (or with it full, or the
//!   writeback budget spent) the write fails as before.
//! - **The thread** ([`PolicyRunner`]) holds only a weak reference to its
//!   store, so a store being dropped is never kept alive by it; it waits on
//!   a condition variable (stop, pressure, or the next tick) and holds no
//!   lock while it works. [`PolicyRunner::stop`] (or dropping it) wakes and
//!   joins it.
//!
//! Locks: the reclaim mutex (one reclaim at a time; a writer that waited
//! for it looks at memory again before doing anything) is taken with no
//! other store lock held, before the post-processing lock that writeback
//! takes; the signal's mutex is a leaf. The write path reaches the rule
//! through the core's `LimitRule`, which `Parts` implements here, and
//! calls it with no slot lock or stream held.
//!
//! Owns the policy state, its thread and counters. May not touch the slots
//! but through the core's scan, nor the paths below it but through idle
//! marking, `recompress`, `writeback` and the allocator's compaction.

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::disk::{Disk, LimitRule};
use crate::error::StoreError;
use crate::idle::{self, IdleCutoff};
use crate::postprocess::PostProcess;
use crate::recompress::{Recompress, RecompressRequest};
use crate::slot;
use crate::stats::PolicyStats;
use crate::writeback::{Writeback, WritebackRequest};

/// How far below the high mark the memory-aware rule writes back to, in
/// percent of `mem_limit` (high 90: back to 80%), so that it runs once per
/// tenth of the limit filled, not once per page.
pub const LOW_GAP_PERCENT: u32 = 10;

/// Rounds of writeback and compaction one reclaim tries before giving up.
const RECLAIM_ROUNDS: usize = 4;

/// The timed rule of one store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyConfig {
    /// Time between runs of the timed rule.
    pub interval: Duration,
    /// Mark pages idle that were not accessed for this long (`None`: the
    /// timed rule does not mark, and recompresses or writes back pages
    /// someone else marked).
    pub idle_after: Option<Duration>,
    /// Recompress idle pages after each marking (needs a secondary
    /// compressor).
    pub recompress: Option<RecompressRequest>,
    /// Write back after each marking (needs a backing store).
    pub writeback: Option<WritebackRequest>,
}

impl PolicyConfig {
    /// Whether the timed rule does anything.
    pub fn timed(&self) -> bool {
        self.idle_after.is_some() || self.recompress.is_some() || self.writeback.is_some()
    }
}

#[derive(Default)]
struct Tally {
    ticks: AtomicU64,
    marked_idle: AtomicU64,
    recompressed: AtomicU64,
    written_back: AtomicU64,
    pressure_reclaims: AtomicU64,
    write_reclaims: AtomicU64,
    reclaimed_pages: AtomicU64,
    reclaimed_not_idle: AtomicU64,
    limit_failures: AtomicU64,
    errors: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// What wakes the policy thread.
#[derive(Default)]
struct Wake {
    stop: bool,
    pressure: bool,
}

/// The policy thread's wake-up: a leaf mutex and its condition variable.
#[derive(Default)]
struct Signal {
    wake: Mutex<Wake>,
    cv: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain flags and a unit: a panic cannot leave them half-updated.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The policy state of one store.
#[derive(Default)]
pub(crate) struct Policy {
    /// The memory-aware rule's high mark, percent of `mem_limit` (0: off).
    high_percent: AtomicU32,
    /// Set when the write path has woken the thread and it has not looked
    /// yet (so writers above the mark do one load, not a lock, each).
    pressure_sent: AtomicBool,
    /// Whether a policy was ever configured (debug_stat shows its line).
    configured: AtomicBool,
    /// The store's own metadata in allocator pages (the slot table and the
    /// backing store's block bitmap) and the writeback's batch buffers,
    /// which the rule leaves room for below `mem_limit`; see
    /// [`Policy::ceiling_pages`].
    metadata_pages: AtomicU64,
    signal: Arc<Signal>,
    reclaiming: Mutex<()>,
    tally: Tally,
}

impl Policy {
    /// What the policies have done.
    pub(crate) fn stats(&self) -> PolicyStats {
        let t = &self.tally;
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PolicyStats {
            ticks: g(&t.ticks),
            marked_idle: g(&t.marked_idle),
            recompressed: g(&t.recompressed),
            written_back: g(&t.written_back),
            pressure_reclaims: g(&t.pressure_reclaims),
            write_reclaims: g(&t.write_reclaims),
            reclaimed_pages: g(&t.reclaimed_pages),
            reclaimed_not_idle: g(&t.reclaimed_not_idle),
            limit_failures: g(&t.limit_failures),
            errors: g(&t.errors),
        }
    }

    /// What the rule keeps the allocator's memory within, in pages, for
    /// a limit of `limit_pages`: the limit minus the store's own metadata
    /// (so that the store as a whole stays within `mem_limit`), but never
    /// below half the limit.
    pub(crate) fn ceiling_pages(&self, limit_pages: u64) -> u64 {
        let meta = self.metadata_pages.load(Ordering::Relaxed);
        limit_pages.saturating_sub(meta).max(limit_pages / 2)
    }

    /// The high mark in pages for a limit of `limit_pages` (0: rule off):
    /// the rule's percent of its ceiling.
    fn high_pages(&self, limit_pages: u64) -> u64 {
        let pct = u64::from(self.high_percent.load(Ordering::Relaxed));
        self.ceiling_pages(limit_pages) * pct / 100
    }

    /// Whether the memory-aware rule is on.
    pub(crate) fn near_limit_on(&self) -> bool {
        self.high_percent.load(Ordering::Relaxed) != 0
    }

    /// Called by the write path after it took `used` pages of `limit`:
    /// wakes the thread when past the high mark.
    pub(crate) fn note_usage(&self, used: u64, limit: u64) {
        let high = self.high_pages(limit);
        if high == 0 || used <= high || self.pressure_sent.load(Ordering::Relaxed) {
            return;
        }
        self.pressure_sent.store(true, Ordering::Relaxed);
        lock(&self.signal.wake).pressure = true;
        self.signal.cv.notify_one();
    }

    /// Counts a write that failed the limit although the rule is on.
    pub(crate) fn note_limit_failure(&self) {
        bump(&self.tally.limit_failures, 1);
    }
}

/// What one reclaim did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReclaimReport {
    /// Pages written back.
    pub written: u64,
    /// Of them, pages that were not idle.
    pub not_idle: u64,
    /// Whether memory ended at or below the target.
    pub reached: bool,
}

impl Policy {
    /// Turns the memory-aware rule on at `high_percent` of `mem_limit`
    /// (50 to 99), or off with 0. `EINVAL` for other values.
    pub(crate) fn set_high_percent(
        &self,
        parts: &Parts<'_>,
        high_percent: u32,
    ) -> Result<(), StoreError> {
        if high_percent != 0 && !(50..=99).contains(&high_percent) {
            return Err(StoreError::os(
                libc::EINVAL,
                format!("writeback near limit: {high_percent}% is not 50 to 99 (0: off)"),
            ));
        }
        self.refresh_metadata_pages(parts.disk, parts.writeback);
        self.high_percent.store(high_percent, Ordering::Relaxed);
        if high_percent != 0 {
            self.configured.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The memory-aware rule's high mark, percent of `mem_limit` (0: off).
    pub(crate) fn high_percent(&self) -> u32 {
        self.high_percent.load(Ordering::Relaxed)
    }

    /// Whether a policy was ever set on this store (its `debug_stat` line
    /// is shown).
    pub(crate) fn configured(&self) -> bool {
        self.configured.load(Ordering::Relaxed)
    }

    /// Recomputes what the rule leaves room for below `mem_limit` (after
    /// the backing store, the batch size or the rule is set): the metadata
    /// and the writeback's own batch buffers, which are alive exactly when
    /// the rule reclaims.
    pub(crate) fn refresh_metadata_pages(&self, disk: &Disk, writeback: &Writeback) {
        let bytes = disk.metadata_bytes() + writeback.buffer_bytes(disk);
        let pages = bytes.div_ceil(disk.mem_page_size() as u64);
        self.metadata_pages.store(pages, Ordering::Relaxed);
    }

    /// What the memory-aware rule keeps `mem_used_total` within, in bytes;
    /// 0 without a limit.
    pub(crate) fn ceiling_bytes(&self, disk: &Disk) -> u64 {
        let page = disk.mem_page_size() as u64;
        self.ceiling_pages(disk.mem_limit() / page) * page
    }

    /// The target of a reclaim: `LOW_GAP_PERCENT` of the ceiling below the
    /// high mark.
    fn reclaim_target(&self, limit_pages: u64) -> u64 {
        let high = u64::from(self.high_percent());
        self.ceiling_pages(limit_pages) * high.saturating_sub(u64::from(LOW_GAP_PERCENT)) / 100
    }
}

/// The parts of a store the policy works on: the core and the
/// post-processing beside it. The write path gets them as its
/// [`LimitRule`].
pub(crate) struct Parts<'a> {
    /// The core store.
    pub(crate) disk: &'a Disk,
    /// The post-processing lock.
    pub(crate) post: &'a PostProcess,
    /// Writeback's settings.
    pub(crate) writeback: &'a Writeback,
    /// Recompression's settings.
    pub(crate) recompress: &'a Recompress,
    /// This module's state.
    pub(crate) policy: &'a Policy,
}

impl LimitRule for Parts<'_> {
    #[inline]
    fn ceiling_pages(&self, limit_pages: u64) -> Option<u64> {
        self.policy
            .near_limit_on()
            .then(|| self.policy.ceiling_pages(limit_pages))
    }

    fn reclaim(&self, limit_pages: u64) {
        self.reclaim_for_write(limit_pages);
    }

    #[inline]
    fn note_usage(&self, used: u64, limit_pages: u64) {
        self.policy.note_usage(used, limit_pages);
    }

    fn note_limit_failure(&self) {
        self.policy.note_limit_failure();
    }
}

impl Parts<'_> {
    /// The write path's reclaim: a write would pass the rule's ceiling, so
    /// pages are written back first.
    fn reclaim_for_write(&self, limit_pages: u64) {
        let policy = self.policy;
        bump(&policy.tally.write_reclaims, 1);
        let target = policy.reclaim_target(limit_pages);
        let ceiling = policy.ceiling_pages(limit_pages);
        self.reclaim_to(target, (target + ceiling) / 2);
    }

    /// Writes back pages (idle ones first, then by least recent access)
    /// and compacts until `mem_used_total` is at most `target_pages`, or
    /// nothing more can go. One reclaim at a time: a caller that waited
    /// for another finds the memory it freed, and returns at once when
    /// memory is at most `skip_at_pages`.
    pub(crate) fn reclaim_to(&self, target_pages: u64, skip_at_pages: u64) -> ReclaimReport {
        let (disk, policy) = (self.disk, self.policy);
        let _one = lock(&policy.reclaiming);
        let mut report = ReclaimReport::default();
        if disk.used_pages() <= skip_at_pages.max(target_pages) {
            report.reached = true;
            return report;
        }
        for _ in 0..RECLAIM_ROUNDS {
            let used = disk.used_pages();
            if used <= target_pages {
                break;
            }
            let need = (used - target_pages) * disk.page_size() as u64;
            let (req, not_idle) = oldest_pages(disk, need);
            if req.ranges.is_empty() {
                break;
            }
            match self.writeback.run(disk, self.post, &req) {
                Ok(r) => {
                    report.written += r.written;
                    report.not_idle += not_idle.min(r.written);
                }
                Err(_) => {
                    bump(&policy.tally.errors, 1);
                    disk.compact();
                    break;
                }
            }
            disk.compact();
        }
        report.reached = disk.used_pages() <= target_pages;
        bump(&policy.tally.reclaimed_pages, report.written);
        bump(&policy.tally.reclaimed_not_idle, report.not_idle);
        report
    }

    /// One run of the timed rule.
    fn tick(&self, config: &PolicyConfig) {
        let tally = &self.policy.tally;
        bump(&tally.ticks, 1);
        if let Some(age) = config.idle_after {
            bump(
                &tally.marked_idle,
                idle::mark(self.disk, IdleCutoff::OlderThan(age)),
            );
        }
        if let Some(req) = &config.recompress {
            match self.recompress.run(self.disk, self.post, req) {
                Ok(r) => bump(&tally.recompressed, r.recompressed),
                Err(_) => bump(&tally.errors, 1),
            }
        }
        if let Some(req) = &config.writeback {
            match self.writeback.run(self.disk, self.post, req) {
                Ok(r) => bump(&tally.written_back, r.written),
                Err(_) => bump(&tally.errors, 1),
            }
        }
    }

    /// The memory-aware rule's run on the thread: reclaims when past the
    /// high mark.
    fn relieve_pressure(&self) {
        let policy = self.policy;
        policy.pressure_sent.store(false, Ordering::Relaxed);
        let limit = self.disk.mem_limit() / self.disk.page_size() as u64;
        let high = policy.high_pages(limit);
        if high == 0 || self.disk.used_pages() <= high {
            return;
        }
        bump(&policy.tally.pressure_reclaims, 1);
        self.reclaim_to(policy.reclaim_target(limit), high);
    }

    /// One step of the policy thread: a run of the timed rule (`tick`),
    /// or of the memory-aware rule.
    pub(crate) fn step(&self, config: &PolicyConfig, tick: bool) {
        if tick {
            self.tick(config);
        } else {
            self.relieve_pressure();
        }
    }
}

/// A writeback request for the pages holding memory, idle ones first,
/// then by oldest access time and lowest index, whose stored bytes add
/// up to `bytes`; and how many of them are not idle.
///
/// The slots are streamed through a bounded selection: a max-heap of
/// the best candidates seen so far that drops its worst as soon as the
/// others still add up to `bytes`, so the memory it takes is one entry
/// per page the reclaim needs (about 100 KiB for a reclaim of 10% of a
/// 90 MiB limit), not one per page of the disk.
fn oldest_pages(disk: &Disk, bytes: u64) -> (WritebackRequest, u64) {
    // Each candidate as one word that sorts in the order pages are
    // taken: not idle (bit 63), access time (31 bits), index (32 bits;
    // a disk has at most 2^28 pages); beside it its stored bytes.
    const NOT_IDLE: u64 = 1 << 63;
    const INDEX: u64 = u32::MAX as u64;
    let page_size = disk.page_size();
    let mut best: BinaryHeap<(u64, u32)> = BinaryHeap::new();
    let mut sum = 0u64;
    disk.scan(
        0..disk.disk_pages(),
        |index, guard| {
            let content = guard.content();
            if !content.holds_memory() || guard.has(slot::PP_SLOT) {
                return None;
            }
            let not_idle = if guard.has(slot::IDLE) { 0 } else { NOT_IDLE };
            let at = u64::from(guard.ac_time().min(u32::MAX >> 1));
            let size = content.stored_bytes(page_size) as u32;
            Some((not_idle | at << 32 | index, size))
        },
        |(key, size)| {
            if sum >= bytes && best.peek().is_some_and(|&(worst, _)| key > worst) {
                return;
            }
            best.push((key, size));
            sum += u64::from(size);
            // Drop the worst while the rest still reach `bytes`.
            while let Some(&(_, worst_size)) = best.peek() {
                if sum - u64::from(worst_size) < bytes {
                    break;
                }
                best.pop();
                sum -= u64::from(worst_size);
            }
        },
    );
    let mut keys: Vec<u64> = best.into_iter().map(|(key, _)| key).collect();
    let not_idle = keys.iter().filter(|&&k| k & NOT_IDLE != 0).count() as u64;
    // The slots may have changed since the scan: writeback looks at
    // each again. In index order, so adjacent pages make one range.
    keys.sort_unstable_by_key(|&k| k & INDEX);
    let mut req = WritebackRequest::default();
    for key in keys {
        let index = key & INDEX;
        match req.ranges.last_mut() {
            Some(r) if r.end == index => r.end += 1,
            _ => req.ranges.push(index..index + 1),
        }
    }
    (req, not_idle)
}

/// The policy thread of one store.
pub struct PolicyRunner {
    signal: Arc<Signal>,
    thread: Option<JoinHandle<()>>,
}

impl PolicyRunner {
    /// Starts the thread on `policy` with the timed rule `config` (which
    /// may do nothing: the thread then serves the memory-aware rule only).
    /// `work` runs one step on the store ([`Parts::step`]: the timed rule
    /// when its flag is true, else the memory-aware rule), and returns
    /// false once the store is gone. `Store` calls this
    /// from `PolicyRunner::start`, with a weak reference to itself.
    pub(crate) fn spawn(
        policy: &Policy,
        config: PolicyConfig,
        work: impl Fn(&PolicyConfig, bool) -> bool + Send + 'static,
    ) -> std::io::Result<PolicyRunner> {
        policy.configured.store(true, Ordering::Relaxed);
        let signal = Arc::clone(&policy.signal);
        lock(&signal.wake).stop = false;
        let s = Arc::clone(&signal);
        let thread = std::thread::Builder::new()
            .name("zram-policy".into())
            .spawn(move || run(&s, &config, work))?;
        Ok(PolicyRunner {
            signal,
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it (a run in progress finishes).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        lock(&self.signal.wake).stop = true;
        self.signal.cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for PolicyRunner {
    fn drop(&mut self) {
        self.halt();
    }
}

fn run(signal: &Signal, config: &PolicyConfig, work: impl Fn(&PolicyConfig, bool) -> bool) {
    let mut next_tick = Instant::now() + config.interval;
    loop {
        let pressure = {
            let mut wake = lock(&signal.wake);
            loop {
                if wake.stop {
                    return;
                }
                if wake.pressure {
                    wake.pressure = false;
                    break true;
                }
                let now = Instant::now();
                if config.timed() && now >= next_tick {
                    break false;
                }
                let wait = if config.timed() {
                    next_tick - now
                } else {
                    Duration::from_secs(3600)
                };
                wake = signal
                    .cv
                    .wait_timeout(wake, wait)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        };
        if !pressure {
            if !work(config, true) {
                return;
            }
            next_tick = Instant::now() + config.interval;
            // Marking may have made idle pages the rule can now take.
        }
        if !work(config, false) {
            return;
        }
    }
}
