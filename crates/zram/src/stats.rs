//! The store's counters and the kernel's statistics files.
//!
//! Owns the counters and every statistics type and its format; may not touch
//! any module but `shard` (floor 1).
//!
//! [`Counters`] are the per-thread sharded atomics the I/O paths update (the
//! kernel's `zram_stats`); [`MmStat`], [`IoStat`] and [`DebugStat`] are snapshots that
//! print exactly as `/sys/block/zramN/{mm_stat,io_stat,debug_stat}` do, column
//! for column. This module does no I/O and takes no lock.

use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use serde::Serialize;

use crate::shard::{shard_count, thread_index, Padded};

/// One counter of the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Bytes of compressed data stored (huge pages count a whole page).
    ComprDataSize,
    /// Pages stored, same-filled ones included.
    PagesStored,
    /// Same-filled pages stored.
    SamePages,
    /// Pages stored uncompressed now.
    HugePages,
    /// Pages ever stored uncompressed.
    HugePagesSince,
    /// Reads that failed.
    FailedReads,
    /// Writes that failed.
    FailedWrites,
    /// Pages freed by discard and write-zeroes.
    NotifyFree,
    /// Frees skipped because the slot was busy (kept for the format; the
    /// store always waits, so it stays 0).
    MissFree,
    /// Page reads served.
    NumReads,
    /// Page writes served.
    NumWrites,
    /// Pages read from the backing store.
    BdReads,
    /// Pages written to the backing store.
    BdWrites,
    /// Pages the backing store failed to take during writeback (zmem's;
    /// each stayed in memory).
    FailedWritebacks,
}

const NR_COUNTERS: usize = 14;

/// Counters that only grow (zeroed by `reset`); the others are gauges that
/// follow the slots and return to 0 when every slot is freed.
pub const CUMULATIVE: [Counter; 10] = [
    Counter::HugePagesSince,
    Counter::FailedReads,
    Counter::FailedWrites,
    Counter::NotifyFree,
    Counter::MissFree,
    Counter::NumReads,
    Counter::NumWrites,
    Counter::BdReads,
    Counter::BdWrites,
    Counter::FailedWritebacks,
];

/// The counters the I/O paths update (the kernel's `zram_stats`), sharded
/// per thread: each thread adds to its own shard, and a read sums them. A
/// gauge may be raised in one shard and lowered in another, so shards hold
/// wrapping signed values and only their sum is meaningful.
#[derive(Debug)]
pub struct Counters {
    shards: Box<[Padded<[AtomicI64; NR_COUNTERS]>]>,
    /// Most pages the allocator has held (reset by `reset_mem_used_max`).
    /// On a line of its own: a filling store raises it often, and every
    /// update of a counter reads `shards` beside it.
    max_used_pages: Padded<AtomicU64>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            shards: (0..shard_count()).map(|_| Padded::default()).collect(),
            max_used_pages: Padded(AtomicU64::new(0)),
        }
    }
}

impl Counters {
    fn mine(&self) -> &[AtomicI64; NR_COUNTERS] {
        &self.shards[thread_index() % self.shards.len()]
    }

    /// Adds `n` to a counter.
    pub fn add(&self, c: Counter, n: u64) {
        self.mine()[c as usize].fetch_add(n as i64, Ordering::Relaxed);
    }

    /// Subtracts `n` from a counter.
    pub fn sub(&self, c: Counter, n: u64) {
        self.mine()[c as usize].fetch_sub(n as i64, Ordering::Relaxed);
    }

    /// A counter's value (the sum over the shards; a gauge read while
    /// another thread updates it may be off by that update).
    pub fn get(&self, c: Counter) -> u64 {
        let sum = self.shards.iter().fold(0i64, |acc, s| {
            acc.wrapping_add(s[c as usize].load(Ordering::Relaxed))
        });
        sum.max(0) as u64
    }

    /// Every counter at once, as a snapshot consistent with itself.
    ///
    /// A gauge raised in one shard and lowered in another (a page stored by
    /// one thread and freed by another) can be summed half-way: the sum
    /// over shards read one by one is not a value the store ever had. So
    /// this collects every counter of every shard, collects again, and
    /// returns once two collects agree: no update landed in between, so the
    /// values are the store's at one instant. Under a storm of updates it
    /// gives up after a few tries and returns the last collect with the
    /// gauges clamped to what every instant satisfies (same-filled and huge
    /// pages never more than the pages stored).
    pub fn snapshot(&self) -> CounterSnapshot {
        const TRIES: usize = 8;
        let mut last = self.collect();
        for _ in 1..TRIES {
            let next = self.collect();
            if next == last {
                return CounterSnapshot::from_sums(last);
            }
            last = next;
        }
        CounterSnapshot::from_sums(last)
    }

    fn collect(&self) -> [i64; NR_COUNTERS] {
        let mut sums = [0i64; NR_COUNTERS];
        for shard in self.shards.iter() {
            for (sum, v) in sums.iter_mut().zip(shard.iter()) {
                *sum = sum.wrapping_add(v.load(Ordering::Acquire));
            }
        }
        sums
    }

    /// Zeroes a counter.
    pub fn zero(&self, c: Counter) {
        for s in self.shards.iter() {
            s[c as usize].store(0, Ordering::Relaxed);
        }
    }

    /// Raises `max_used_pages` to `pages` if it is higher (a load first, so
    /// the common case writes nothing).
    pub fn update_max(&self, pages: u64) {
        if pages > self.max_used_pages.load(Ordering::Relaxed) {
            self.max_used_pages.fetch_max(pages, Ordering::Relaxed);
        }
    }

    /// Sets `max_used_pages`.
    pub fn set_max(&self, pages: u64) {
        self.max_used_pages.store(pages, Ordering::Relaxed);
    }

    /// `max_used_pages`.
    pub fn max_used_pages(&self) -> u64 {
        self.max_used_pages.load(Ordering::Relaxed)
    }
}

/// Every [`Counter`] read at once by [`Counters::snapshot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterSnapshot([u64; NR_COUNTERS]);

impl CounterSnapshot {
    fn from_sums(sums: [i64; NR_COUNTERS]) -> Self {
        let mut v = sums.map(|x| x.max(0) as u64);
        let stored = v[Counter::PagesStored as usize];
        for part in [Counter::SamePages, Counter::HugePages] {
            v[part as usize] = v[part as usize].min(stored);
        }
        CounterSnapshot(v)
    }

    /// One counter's value in this snapshot.
    pub fn get(&self, c: Counter) -> u64 {
        self.0[c as usize]
    }
}

/// `mm_stat`'s columns, in the kernel's order and with its names (zram.rst).
pub const MM_STAT_COLUMNS: [&str; 9] = [
    "orig_data_size",
    "compr_data_size",
    "mem_used_total",
    "mem_limit",
    "mem_used_max",
    "same_pages",
    "pages_compacted",
    "huge_pages",
    "huge_pages_since",
];

/// `io_stat`'s columns, in the kernel's order and with its names.
pub const IO_STAT_COLUMNS: [&str; 4] =
    ["failed_reads", "failed_writes", "invalid_io", "notify_free"];

/// `bd_stat`'s columns, in the kernel's order and with its names.
pub const BD_STAT_COLUMNS: [&str; 3] = ["bd_count", "bd_reads", "bd_writes"];

/// `mm_stat`: memory use, in the kernel's nine columns and order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MmStat {
    /// Bytes of pages stored (`pages_stored × PAGE_SIZE`).
    pub orig_data_size: u64,
    /// Bytes of compressed data.
    pub compr_data_size: u64,
    /// Bytes of allocator pages (`total_pages × PAGE_SIZE`).
    pub mem_used_total: u64,
    /// The memory limit in bytes (0: none).
    pub mem_limit: u64,
    /// Most bytes of allocator pages held.
    pub mem_used_max: u64,
    /// Same-filled pages.
    pub same_pages: u64,
    /// Pages freed by compaction.
    pub pages_compacted: u64,
    /// Pages stored uncompressed now.
    pub huge_pages: u64,
    /// Pages ever stored uncompressed.
    pub huge_pages_since: u64,
    /// Objects moved by compaction (added with the fine-grained fullness
    /// groups series; not a kernel `mm_stat` column, printed apart).
    pub objs_moved: u64,
}

impl MmStat {
    /// The class-merging patch's overhead ratio,
    /// `(mem_used_total - compr_data_size) / compr_data_size`, as a fraction
    /// (0 when nothing is stored).
    pub fn overhead_ratio(&self) -> f64 {
        if self.compr_data_size == 0 {
            return 0.0;
        }
        (self.mem_used_total as f64 - self.compr_data_size as f64) / self.compr_data_size as f64
    }
}

impl fmt::Display for MmStat {
    /// Exactly the kernel's line: `%8llu %8llu %8llu %8lu %8ld %8llu %8lu
    /// %8llu %8llu`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:8} {:8} {:8} {:8} {:8} {:8} {:8} {:8} {:8}",
            self.orig_data_size,
            self.compr_data_size,
            self.mem_used_total,
            self.mem_limit,
            self.mem_used_max,
            self.same_pages,
            self.pages_compacted,
            self.huge_pages,
            self.huge_pages_since
        )
    }
}

/// `io_stat`: `failed_reads failed_writes 0 notify_free`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct IoStat {
    /// Reads that failed.
    pub failed_reads: u64,
    /// Writes that failed.
    pub failed_writes: u64,
    /// Pages freed by discard and write-zeroes.
    pub notify_free: u64,
}

impl fmt::Display for IoStat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The kernel prints the retired invalid_io column as a bare 0.
        write!(
            f,
            "{:8} {:8} 0 {:8}",
            self.failed_reads, self.failed_writes, self.notify_free
        )
    }
}

/// `debug_stat`: `version: 1`, then `0 <miss_free>`, then zmem's extra
/// line for the background compactor when it is or was on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DebugStat {
    /// Frees skipped because the slot was busy.
    pub miss_free: u64,
    /// The background compactor's counters, when it is or was on (a store
    /// with it off prints exactly the kernel's two lines).
    pub auto_compact: Option<AutoCompactStats>,
    /// The policies' counters, when a policy was ever set (zmem's line).
    pub policy: Option<PolicyStats>,
}

impl fmt::Display for DebugStat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The retired writestall field is printed as a bare 0.
        write!(f, "version: 1\n0 {:8}", self.miss_free)?;
        if let Some(a) = &self.auto_compact {
            write!(f, "\n{a}")?;
        }
        if let Some(p) = &self.policy {
            write!(f, "\n{p}")?;
        }
        Ok(())
    }
}

/// `bd_stat`: the backing store's use, in 4 KiB units whatever the page
/// size (the kernel's `FOUR_K`): `bd_count bd_reads bd_writes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BdStat {
    /// 4 KiB units of the backing store holding pages now.
    pub bd_count: u64,
    /// 4 KiB units read from the backing store.
    pub bd_reads: u64,
    /// 4 KiB units written to the backing store.
    pub bd_writes: u64,
    /// Pages whose writeback the backing store failed (an I/O error); each
    /// stayed in memory (zmem's; not a kernel column, printed apart).
    pub failed_writebacks: u64,
}

impl fmt::Display for BdStat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:8} {:8} {:8}",
            self.bd_count, self.bd_reads, self.bd_writes
        )
    }
}

/// What the background compactor has done since the store was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AutoCompactStats {
    /// Times it woke and looked.
    pub wakeups: u64,
    /// Looks that found less than the minimum gain (or, for the shrinker,
    /// memory not tight) and did nothing.
    pub skipped: u64,
    /// Settling times added to wait for a lull in writes.
    pub postponed: u64,
    /// Runs: looks that compacted.
    pub runs: u64,
    /// Steps (size classes) compacted.
    pub steps: u64,
    /// Pages freed.
    pub pages_freed: u64,
    /// Objects moved.
    pub objs_moved: u64,
    /// The lower bound of `objs_moved`: summed over the steps run, the
    /// fewest objects any compaction had to move to free every zspage the
    /// step could free when it started (`ZPool::step_lower_bound`; 0 for
    /// allocators that cannot tell).
    pub objs_lower_bound: u64,
    /// Of `objs_moved`, those moved by default mode's trim (giving back
    /// pages of zspages that stay), which the lower bound does not cover.
    pub objs_moved_trim: u64,
    /// The thread's CPU time, nanoseconds.
    pub cpu_ns: u64,
    /// Time spent waiting for the CPU budget, nanoseconds.
    pub budget_wait_ns: u64,
    /// The longest single step, wall nanoseconds: the most a step held the
    /// compaction (others wait for at most one object's move of it, one
    /// source zspage's with the kernel's algorithms).
    pub longest_step_ns: u64,
    /// Epochs of the pages the allocator keeps for reuse ended while the
    /// thread was idle (each gives back what no store took since the
    /// previous one).
    pub idle_decays: u64,
}

impl fmt::Display for AutoCompactStats {
    /// One line, as `debug_stat`'s extra line prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "auto_compact: wakeups {} skipped {} postponed {} runs {} steps {} pages_freed {} objs_moved {} objs_lower_bound {} objs_moved_trim {} cpu_us {} budget_wait_us {} longest_step_us {} idle_decays {}",
            self.wakeups,
            self.skipped,
            self.postponed,
            self.runs,
            self.steps,
            self.pages_freed,
            self.objs_moved,
            self.objs_lower_bound,
            self.objs_moved_trim,
            self.cpu_ns / 1000,
            self.budget_wait_ns / 1000,
            self.longest_step_ns / 1000,
            self.idle_decays
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_match_the_kernel_columns() {
        let mm = MmStat {
            orig_data_size: 4096,
            compr_data_size: 100,
            mem_used_total: 8192,
            mem_limit: 0,
            mem_used_max: 8192,
            same_pages: 1,
            pages_compacted: 0,
            huge_pages: 0,
            huge_pages_since: 2,
            objs_moved: 9,
        };
        assert_eq!(
            mm.to_string(),
            "    4096      100     8192        0     8192        1        0        0        2"
        );
        let io = IoStat {
            failed_reads: 1,
            failed_writes: 2,
            notify_free: 3,
        };
        assert_eq!(io.to_string(), "       1        2 0        3");
        assert_eq!(
            DebugStat {
                miss_free: 4,
                auto_compact: None,
                policy: None
            }
            .to_string(),
            "version: 1\n0        4"
        );
        let bd = BdStat {
            bd_count: 8,
            bd_reads: 4,
            bd_writes: 12,
            failed_writebacks: 1,
        };
        assert_eq!(bd.to_string(), "       8        4       12");
    }

    #[test]
    fn overhead_ratio_is_the_class_merging_patchs() {
        let mm = MmStat {
            compr_data_size: 1000,
            mem_used_total: 1033,
            ..MmStat::default()
        };
        assert!((mm.overhead_ratio() - 0.033).abs() < 1e-12);
        assert_eq!(MmStat::default().overhead_ratio(), 0.0);
    }
}
