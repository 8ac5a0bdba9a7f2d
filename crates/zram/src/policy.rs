//! Post-processing that runs by itself: idle marking, recompression and
//! writeback on a timer, and the memory-aware rule that writes pages back
//! as `mem_used_total` nears `mem_limit` instead of failing writes.
//!
//! - **The timed rule** ([`PolicyConfig`]): every `interval`, pages not
//!   accessed for `idle_after` are marked idle (`echo N > idle`), then,
//!   when asked, recompressed (`recompress type=idle`) and written back
//!   (`writeback TYPE`), exactly as those commands would.
//! - **The memory-aware rule** ([`Store::set_writeback_near_limit`]): when
//!   a write takes `mem_used_total` past `high` percent of `mem_limit`, the
//!   policy thread is woken and writes back pages until memory is
//!   [`LOW_GAP_PERCENT`] below `high`; a write that would pass the limit
//!   itself first does the same synchronously, then tries once more. The
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
//! takes; the signal's mutex is a leaf. This module owns that state and the
//! policy counters; it reaches pages only through the store's own
//! `mark_idle`, `recompress`, `writeback` and `compact`.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::StoreError;
use crate::recompress::RecompressRequest;
use crate::slot;
use crate::store::{IdleCutoff, Store};
use crate::writeback::WritebackRequest;

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

/// What the policies have done since the store was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PolicyStats {
    /// Runs of the timed rule.
    pub ticks: u64,
    /// Pages the timed rule marked idle (summed over runs).
    pub marked_idle: u64,
    /// Pages the timed rule recompressed.
    pub recompressed: u64,
    /// Pages the timed rule wrote back.
    pub written_back: u64,
    /// Reclaims by the memory-aware rule on the policy thread.
    pub pressure_reclaims: u64,
    /// Reclaims a write did itself because it would have passed the limit.
    pub write_reclaims: u64,
    /// Pages the memory-aware rule wrote back (both kinds of reclaim).
    pub reclaimed_pages: u64,
    /// Reclaimed pages that were not idle (taken by least recent access).
    pub reclaimed_not_idle: u64,
    /// Writes that still failed the limit after a reclaim.
    pub limit_failures: u64,
    /// Timed runs or reclaims whose recompression or writeback failed.
    pub errors: u64,
}

impl fmt::Display for PolicyStats {
    /// One line, as `debug_stat`'s extra line prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "policy: ticks {} marked_idle {} recompressed {} written_back {} pressure_reclaims {} write_reclaims {} reclaimed_pages {} reclaimed_not_idle {} limit_failures {} errors {}",
            self.ticks,
            self.marked_idle,
            self.recompressed,
            self.written_back,
            self.pressure_reclaims,
            self.write_reclaims,
            self.reclaimed_pages,
            self.reclaimed_not_idle,
            self.limit_failures,
            self.errors
        )
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

/// The policy state a store keeps (in its post-processing state).
#[derive(Default)]
pub(crate) struct Policy {
    /// The memory-aware rule's high mark, percent of `mem_limit` (0: off).
    high_percent: AtomicU32,
    /// Set when the write path has woken the thread and it has not looked
    /// yet (so writers above the mark do one load, not a lock, each).
    pressure_sent: AtomicBool,
    /// Whether a policy was ever configured (debug_stat shows its line).
    configured: AtomicBool,
    signal: Arc<Signal>,
    reclaiming: Mutex<()>,
    tally: Tally,
}

impl Policy {
    fn stats(&self) -> PolicyStats {
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

    /// The high mark in pages for a limit of `limit_pages` (0: rule off).
    fn high_pages(&self, limit_pages: u64) -> u64 {
        let pct = u64::from(self.high_percent.load(Ordering::Relaxed));
        limit_pages * pct / 100
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

impl Store {
    /// Turns the memory-aware rule on at `high_percent` of `mem_limit`
    /// (50 to 99), or off with 0. `EINVAL` for other values.
    pub fn set_writeback_near_limit(&self, high_percent: u32) -> Result<(), StoreError> {
        if high_percent != 0 && !(50..=99).contains(&high_percent) {
            return Err(StoreError::os(
                libc::EINVAL,
                format!("writeback near limit: {high_percent}% is not 50 to 99 (0: off)"),
            ));
        }
        let policy = &self.post.policy;
        policy.high_percent.store(high_percent, Ordering::Relaxed);
        if high_percent != 0 {
            policy.configured.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The memory-aware rule's high mark, percent of `mem_limit` (0: off).
    pub fn writeback_near_limit(&self) -> u32 {
        self.post.policy.high_percent.load(Ordering::Relaxed)
    }

    /// What the policies have done.
    pub fn policy_stats(&self) -> PolicyStats {
        self.post.policy.stats()
    }

    /// Whether a policy was ever set on this store (its `debug_stat` line
    /// is shown).
    pub fn policy_configured(&self) -> bool {
        self.post.policy.configured.load(Ordering::Relaxed)
    }

    /// The target of a reclaim: `LOW_GAP_PERCENT` below the high mark.
    fn reclaim_target(&self, limit_pages: u64) -> u64 {
        let high = u64::from(self.writeback_near_limit());
        limit_pages * high.saturating_sub(u64::from(LOW_GAP_PERCENT)) / 100
    }

    /// The write path's reclaim: a write would pass the limit, so pages are
    /// written back first. Returns whether memory is now below the limit.
    pub(crate) fn reclaim_for_write(&self, limit_pages: u64) -> bool {
        let policy = &self.post.policy;
        bump(&policy.tally.write_reclaims, 1);
        let target = self.reclaim_target(limit_pages);
        let report = self.reclaim_to(target, (target + limit_pages) / 2);
        report.reached || self.used_pages() < limit_pages
    }

    /// Writes back pages (idle ones first, then by least recent access)
    /// and compacts until `mem_used_total` is at most `target_pages`, or
    /// nothing more can go. One reclaim at a time: a caller that waited
    /// for another finds the memory it freed, and returns at once when
    /// memory is at most `skip_at_pages`.
    pub fn reclaim_to(&self, target_pages: u64, skip_at_pages: u64) -> ReclaimReport {
        let policy = &self.post.policy;
        let _one = lock(&policy.reclaiming);
        let mut report = ReclaimReport::default();
        if self.used_pages() <= skip_at_pages.max(target_pages) {
            report.reached = true;
            return report;
        }
        for _ in 0..RECLAIM_ROUNDS {
            let used = self.used_pages();
            if used <= target_pages {
                break;
            }
            let need = (used - target_pages) * self.page_size as u64;
            let (req, not_idle) = self.oldest_pages(need);
            if req.ranges.is_empty() {
                break;
            }
            match self.writeback(&req) {
                Ok(r) => {
                    report.written += r.written;
                    report.not_idle += not_idle.min(r.written);
                }
                Err(_) => {
                    bump(&policy.tally.errors, 1);
                    self.compact();
                    break;
                }
            }
            self.compact();
        }
        report.reached = self.used_pages() <= target_pages;
        bump(&policy.tally.reclaimed_pages, report.written);
        bump(&policy.tally.reclaimed_not_idle, report.not_idle);
        report
    }

    /// A writeback request for the pages holding memory, idle ones first,
    /// then by oldest access time and lowest index, whose stored bytes add
    /// up to `bytes`; and how many of them are not idle.
    fn oldest_pages(&self, bytes: u64) -> (WritebackRequest, u64) {
        // One word per candidate, so that a large disk's scan stays small
        // (2 MiB for 1 GiB of 4 KiB pages): not idle (bit 63), access time
        // (31 bits), index (32 bits; a disk has at most 2^28 pages).
        const NOT_IDLE: u64 = 1 << 63;
        let mut candidates: Vec<u64> = Vec::new();
        for (index, s) in self.slots.iter().enumerate() {
            let guard = s.lock(self.layout);
            if !guard.content().holds_memory() || guard.has(slot::PP_SLOT) {
                continue;
            }
            let not_idle = if guard.has(slot::IDLE) { 0 } else { NOT_IDLE };
            let at = u64::from(s.ac_time().min(u32::MAX >> 1));
            candidates.push(not_idle | at << 32 | index as u64);
        }
        candidates.sort_unstable();
        let mut req = WritebackRequest::default();
        let (mut sum, mut not_idle) = (0u64, 0u64);
        for key in candidates {
            if sum >= bytes {
                break;
            }
            let index = key & u64::from(u32::MAX);
            // The slot may have changed since the scan: it is counted as it
            // is now, and writeback looks at it again.
            let size = {
                let guard = self.slots[index as usize].lock(self.layout);
                guard.content().stored_bytes(self.page_size)
            };
            sum += size as u64;
            not_idle += u64::from(key & NOT_IDLE != 0);
            match req.ranges.last_mut() {
                Some(r) if r.end == index => r.end += 1,
                _ => req.ranges.push(index..index + 1),
            }
        }
        (req, not_idle)
    }

    /// One run of the timed rule.
    fn policy_tick(&self, config: &PolicyConfig) {
        let tally = &self.post.policy.tally;
        bump(&tally.ticks, 1);
        if let Some(age) = config.idle_after {
            bump(
                &tally.marked_idle,
                self.mark_idle(IdleCutoff::OlderThan(age)),
            );
        }
        if let Some(req) = &config.recompress {
            match self.recompress(req) {
                Ok(r) => bump(&tally.recompressed, r.recompressed),
                Err(_) => bump(&tally.errors, 1),
            }
        }
        if let Some(req) = &config.writeback {
            match self.writeback(req) {
                Ok(r) => bump(&tally.written_back, r.written),
                Err(_) => bump(&tally.errors, 1),
            }
        }
    }

    /// The memory-aware rule's run on the thread: reclaims when past the
    /// high mark.
    fn relieve_pressure(&self) {
        let policy = &self.post.policy;
        policy.pressure_sent.store(false, Ordering::Relaxed);
        let limit = self.mem_limit() / self.page_size as u64;
        let high = policy.high_pages(limit);
        if high == 0 || self.used_pages() <= high {
            return;
        }
        bump(&policy.tally.pressure_reclaims, 1);
        self.reclaim_to(self.reclaim_target(limit), high);
    }
}

/// The policy thread of one store.
pub struct PolicyRunner {
    signal: Arc<Signal>,
    thread: Option<JoinHandle<()>>,
}

impl PolicyRunner {
    /// Starts the thread for `store` with the timed rule `config` (which
    /// may do nothing: the thread then serves the memory-aware rule only).
    pub fn start(store: &Arc<Store>, config: PolicyConfig) -> std::io::Result<PolicyRunner> {
        let policy = &store.post.policy;
        policy.configured.store(true, Ordering::Relaxed);
        let signal = Arc::clone(&policy.signal);
        lock(&signal.wake).stop = false;
        let weak: Weak<Store> = Arc::downgrade(store);
        let s = Arc::clone(&signal);
        let thread = std::thread::Builder::new()
            .name("zram-policy".into())
            .spawn(move || run(&weak, &s, &config))?;
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

fn run(store: &Weak<Store>, signal: &Signal, config: &PolicyConfig) {
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
        let Some(store) = store.upgrade() else { return };
        if pressure {
            store.relieve_pressure();
        } else {
            store.policy_tick(config);
            next_tick = Instant::now() + config.interval;
            // Marking may have made idle pages the rule can now take.
            store.relieve_pressure();
        }
    }
}
