//! The region's counters: faults by kind, evictions by cause, the fault
//! service time as a log2 histogram of nanoseconds, and where that time
//! goes; and their snapshot, serialised with serde as JSON.
//!
//! Owns the counters (relaxed atomics, bumped by the handler and the
//! evictor without allocating) and the snapshot types; it reads no page
//! state and touches no memory of the region.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;
use zram::MmStat;

use crate::uffd::UffdMode;

/// Buckets of the latency histogram: bucket `i` counts times in
/// `[2^i, 2^(i+1))` nanoseconds (bucket 0 also counts 0).
pub const BUCKETS: usize = 40;

/// A log2 histogram of nanoseconds.
#[derive(Debug)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    max: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            max: AtomicU64::new(0),
        }
    }
}

/// The bucket of `ns`.
pub fn bucket_of(ns: u64) -> usize {
    ((63 - ns.max(1).leading_zeros()) as usize).min(BUCKETS - 1)
}

impl Histogram {
    /// Counts one time.
    pub fn record(&self, ns: u64) {
        self.buckets[bucket_of(ns)].fetch_add(1, Relaxed);
        self.max.fetch_max(ns, Relaxed);
    }

    /// The counts now.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let buckets: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        HistogramSnapshot::from_buckets(buckets, self.max.load(Relaxed))
    }
}

/// A histogram's counts, with percentiles read from them (each the upper
/// bound of the bucket it falls in, so within a factor of two above).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HistogramSnapshot {
    /// Count per log2 bucket of nanoseconds; trailing empty buckets dropped.
    pub buckets_log2_ns: Vec<u64>,
    /// Times counted.
    pub count: u64,
    /// Median, as the upper bound of its bucket, in ns.
    pub p50_ns: u64,
    /// 99th percentile bound, in ns.
    pub p99_ns: u64,
    /// 99.9th percentile bound, in ns.
    pub p999_ns: u64,
    /// The longest time seen, in ns.
    pub max_ns: u64,
}

impl HistogramSnapshot {
    fn from_buckets(mut buckets: Vec<u64>, max: u64) -> HistogramSnapshot {
        let count = buckets.iter().sum();
        let pct = |q: f64| -> u64 {
            if count == 0 {
                return 0;
            }
            let want = ((count as f64) * q).ceil() as u64;
            let mut seen = 0;
            for (i, &b) in buckets.iter().enumerate() {
                seen += b;
                if seen >= want.max(1) {
                    return ((1u64 << (i + 1)) - 1).min(max);
                }
            }
            max
        };
        let (p50_ns, p99_ns, p999_ns) = (pct(0.5), pct(0.99), pct(0.999));
        while buckets.last() == Some(&0) {
            buckets.pop();
        }
        HistogramSnapshot {
            buckets_log2_ns: buckets,
            count,
            p50_ns,
            p99_ns,
            p999_ns,
            max_ns: max,
        }
    }
}

/// The live counters.
#[derive(Debug, Default)]
pub struct Counters {
    /// Missing faults on never-written pages (`UFFDIO_ZEROPAGE`).
    pub missing_zero: AtomicU64,
    /// Missing faults served from the store (promotions).
    pub missing_store: AtomicU64,
    /// Missing faults on probed pages, served from the probation copy.
    pub missing_probation: AtomicU64,
    /// Missing faults on a page already mapped (a second thread's fault on
    /// the same page, answered by the first one's copy).
    pub missing_duplicate: AtomicU64,
    /// Missing faults outside the region's pages (a mapping the program
    /// grew with mremap): given the zero page.
    pub missing_foreign: AtomicU64,
    /// Write-protect faults (a write to a page being evicted).
    pub wp: AtomicU64,
    /// Faults put off and served later: the mapping was changing
    /// (`EAGAIN`), another thread owned the page, or the resident limit was
    /// reached.
    pub deferred: AtomicU64,
    /// Faults that mapped a page past the resident limit: the evictor made
    /// no room within 5 ms.
    pub over_limit: AtomicU64,
    /// Faults the watchdog reported (waiting past `stuck_after`).
    pub stuck: AtomicU64,
    /// Faults refused with `SIGBUS`: the store could not read the page, or
    /// the handler thread had stopped.
    pub refused: AtomicU64,
    /// Pages evicted to keep under the resident limit.
    pub evicted_limit: AtomicU64,
    /// Pages evicted because they stayed untouched past the age threshold.
    pub evicted_age: AtomicU64,
    /// Pages evicted by `Region::cold`.
    pub evicted_hint: AtomicU64,
    /// Evictions given up (the store refused the page).
    pub evict_failed: AtomicU64,
    /// Pages probed (mapping dropped, uncompressed copy kept).
    pub probed: AtomicU64,
    /// Windows evicted under the limit (one zap each).
    pub window_zaps: AtomicU64,
    /// Referenced pages a window zapped and mapped back.
    pub window_spared: AtomicU64,
    /// Pages brought back by `willneed` or `hot`.
    pub prefetched: AtomicU64,
    /// Pages the clock hand spared for a write its soft-dirty bit showed.
    pub written_spared: AtomicU64,
    /// Clears of the process's soft-dirty bits (epochs ended).
    pub soft_dirty_epochs: AtomicU64,
    /// Nanoseconds the evictor spent ending epochs: the sweeps of the
    /// bits and the clears.
    pub soft_dirty_ns: AtomicU64,
    /// Pages the program dropped itself (madvise) or unmapped.
    pub removed_by_program: AtomicU64,
    /// mremap events followed.
    pub remaps: AtomicU64,
    /// Times a forked child rebuilt its userfaultfd and threads.
    pub fork_reinits: AtomicU64,
    /// Times the fault handler moved onto a faulting thread's CPU or back.
    pub handler_moves: AtomicU64,
    /// Times it left such a CPU because the thread waited for that CPU.
    pub handler_contended: AtomicU64,
    /// Fault service time on the handler: from reading the message to the
    /// faulting thread woken.
    pub latency: Histogram,
    /// Missing-from-store faults timed part by part (one in
    /// `evict::SPLIT_EVERY`).
    pub split_faults: AtomicU64,
    /// Nanoseconds decompressing, in the timed faults.
    pub decompress_ns: AtomicU64,
    /// Nanoseconds in `UFFDIO_COPY` (which also wakes the faulting
    /// thread), in the timed faults.
    pub copy_ns: AtomicU64,
    /// Nanoseconds from taking the page to publishing it, in the timed
    /// faults.
    pub store_fault_ns: AtomicU64,
}

impl Counters {
    /// Adds one.
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Relaxed);
    }

    /// Adds `n`.
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }
}

/// Faults by kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FaultStats {
    /// Never-written pages given the zero page.
    pub missing_zero: u64,
    /// Pages decompressed from the store (promotions).
    pub missing_store: u64,
    /// Probed pages given back their uncompressed copy.
    pub missing_probation: u64,
    /// Second faults on a page already mapped.
    pub missing_duplicate: u64,
    /// Faults outside the region's pages.
    pub missing_foreign: u64,
    /// Write-protect faults during eviction.
    pub wp: u64,
    /// Faults served later.
    pub deferred: u64,
    /// Faults served over the resident limit (no room made within 5 ms).
    pub over_limit: u64,
    /// Faults that waited longer than `RegionConfig::stuck_after`, each
    /// reported once by the watchdog.
    pub stuck: u64,
    /// Faults refused with the program's own `SIGBUS` (each reported in
    /// `RegionConfig::report_log`): a page the store could not read, or a
    /// fault after the handler thread stopped.
    pub refused: u64,
}

/// Evictions by cause.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EvictionStats {
    /// To keep under the resident limit.
    pub limit: u64,
    /// Past the age threshold.
    pub age: u64,
    /// Asked for with `cold`.
    pub hint: u64,
    /// Refused by the store.
    pub failed: u64,
    /// Pages probed.
    pub probed: u64,
    /// Pages brought back ahead of a fault.
    pub prefetched: u64,
    /// Zaps of the windows evicted to keep under the limit (`limit`
    /// divided by this: victims per zap).
    pub window_zaps: u64,
    /// Referenced pages those windows zapped with their victims and
    /// mapped back at once (spared).
    pub window_spared: u64,
    /// Pages the clock hand spared for a write seen in their soft-dirty
    /// bit (no fault referenced them since its last pass).
    pub written_spared: u64,
    /// Clears of the process's soft-dirty bits.
    pub soft_dirty_epochs: u64,
    /// Microseconds the evictor spent ending those epochs (reading the
    /// bits, then the clear itself; the program's write faults after a
    /// clear are the program's time, not counted here).
    pub soft_dirty_us: u64,
}

/// Where the time of a missing-from-store fault goes, on the thread that
/// serves it, from taking the page to publishing it (means over one fault
/// in `evict::SPLIT_EVERY`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StoreFaultTime {
    /// Mean ns decompressing (the store's read).
    pub decompress_ns: u64,
    /// Mean ns in `UFFDIO_COPY` (page allocation, copy, map, and waking
    /// the faulting thread).
    pub copy_ns: u64,
    /// Mean ns for the rest: page state, counters, queueing the slot's
    /// discard.
    pub bookkeeping_ns: u64,
}

/// A snapshot of a region's statistics.
#[derive(Clone, Debug, Serialize)]
pub struct RegionStats {
    /// Bytes of the region.
    pub len: usize,
    /// Bytes per page.
    pub page_size: usize,
    /// How the userfaultfd was opened.
    pub uffd_mode: UffdMode,
    /// Which thread serves a fault (`handler-thread`, `faulting-thread`).
    pub fault_service: &'static str,
    /// Pages mapped now.
    pub resident_pages: u64,
    /// The resident limit in pages.
    pub resident_limit_pages: u64,
    /// What the limit covers: `region` (its pages) or `process` (the
    /// process's memory except the pool).
    pub limit_covers: &'static str,
    /// The pages the region may keep now: the limit, or what the rest of
    /// the process leaves of it.
    pub region_share_pages: u64,
    /// The process's memory outside the region and the pool at the last
    /// measurement (0 unless the limit covers the process), in bytes.
    pub outside_bytes: u64,
    /// Pages in the store.
    pub stored_pages: u64,
    /// Pages in probation (mapping dropped, uncompressed copy kept).
    pub probation_pages: u64,
    /// Faults by kind.
    pub faults: FaultStats,
    /// Evictions by cause.
    pub evictions: EvictionStats,
    /// Pages the program dropped itself (madvise DONTNEED or FREE, munmap).
    pub removed_by_program: u64,
    /// mremap events followed.
    pub remaps: u64,
    /// Forked children that rebuilt the region (counted in the child).
    pub fork_reinits: u64,
    /// Whether the fault handler follows the thread that faults most
    /// (asked for, and possible here: more than one CPU, and `SCHED_IDLE`
    /// can be left).
    pub handler_follows: bool,
    /// Whether the clock sees writes through the kernel's soft-dirty bits
    /// (asked for, the kernel has them, and no other region of the process
    /// uses them).
    pub soft_dirty: bool,
    /// How long the fault handler polls after a message before it sleeps,
    /// in nanoseconds (0: it sleeps at once; the poll is skipped while it
    /// follows a thread's CPU).
    pub handler_poll_ns: u64,
    /// What waking a sleeping thread costs on this machine, in nanoseconds,
    /// as measured for the default poll (0 when the poll was set, or could
    /// not be measured).
    pub wake_cost_ns: u64,
    /// Times the fault handler moved onto a faulting thread's CPU or back.
    pub handler_moves: u64,
    /// Times it left a followed CPU because the thread it followed waited
    /// for that CPU (other work there would starve the handler).
    pub handler_contended: u64,
    /// Times the evictor found the handler starved on a followed CPU and
    /// gave it its normal policy back.
    pub handler_rescues: u64,
    /// Fault service time on the handler thread.
    pub fault_latency: HistogramSnapshot,
    /// Mean time of a missing-from-store fault, by part.
    pub store_fault_time: StoreFaultTime,
    /// Promotions (missing-from-store faults) per minute over the last
    /// control period.
    pub promotions_per_minute: f64,
    /// The same, as a share of the working set (the controller's input).
    pub promotion_rate: f64,
    /// The age threshold now, in milliseconds.
    pub age_threshold_ms: u64,
    /// The store's `mm_stat`.
    pub mm_stat: MmStat,
}

impl Counters {
    /// Fault and eviction counts and times now.
    pub fn parts(&self) -> (FaultStats, EvictionStats, HistogramSnapshot, StoreFaultTime) {
        let l = |c: &AtomicU64| c.load(Relaxed);
        let faults = FaultStats {
            missing_zero: l(&self.missing_zero),
            missing_store: l(&self.missing_store),
            missing_probation: l(&self.missing_probation),
            missing_duplicate: l(&self.missing_duplicate),
            missing_foreign: l(&self.missing_foreign),
            wp: l(&self.wp),
            deferred: l(&self.deferred),
            over_limit: l(&self.over_limit),
            stuck: l(&self.stuck),
            refused: l(&self.refused),
        };
        let ev = EvictionStats {
            limit: l(&self.evicted_limit),
            age: l(&self.evicted_age),
            hint: l(&self.evicted_hint),
            failed: l(&self.evict_failed),
            probed: l(&self.probed),
            prefetched: l(&self.prefetched),
            window_zaps: l(&self.window_zaps),
            window_spared: l(&self.window_spared),
            written_spared: l(&self.written_spared),
            soft_dirty_epochs: l(&self.soft_dirty_epochs),
            soft_dirty_us: l(&self.soft_dirty_ns) / 1000,
        };
        let n = l(&self.split_faults).max(1);
        let (d, c, t) = (
            l(&self.decompress_ns),
            l(&self.copy_ns),
            l(&self.store_fault_ns),
        );
        let time = StoreFaultTime {
            decompress_ns: d / n,
            copy_ns: c / n,
            bookkeeping_ns: t.saturating_sub(d + c) / n,
        };
        (faults, ev, self.latency.snapshot(), time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_log2() {
        for (ns, bucket) in [
            (0, 0),
            (1, 0),
            (2, 1),
            (3, 1),
            (4096, 12),
            (u64::MAX, BUCKETS - 1),
        ] {
            assert_eq!(bucket_of(ns), bucket, "{ns} ns");
        }
    }

    #[test]
    fn percentiles_come_from_the_buckets() {
        let h = Histogram::default();
        for _ in 0..990 {
            h.record(3000); // bucket 11: [2048, 4096)
        }
        for _ in 0..10 {
            h.record(100_000); // bucket 16
        }
        let s = h.snapshot();
        assert_eq!(s.count, 1000);
        assert_eq!(s.p50_ns, 4095);
        assert_eq!(s.p99_ns, 4095);
        assert_eq!(s.p999_ns, 100_000, "capped at the max");
        assert_eq!(s.max_ns, 100_000);
        assert_eq!(s.buckets_log2_ns.len(), 17);
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"p99_ns\":4095"), "{json}");
    }
}
