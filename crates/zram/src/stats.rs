//! The store's counters and the kernel's statistics files.
//!
//! [`Counters`] are the atomics the I/O paths update (the kernel's
//! `zram_stats`); [`MmStat`], [`IoStat`] and [`DebugStat`] are snapshots that
//! print exactly as `/sys/block/zramN/{mm_stat,io_stat,debug_stat}` do, column
//! for column. This module does no I/O and takes no lock.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Counters updated by the I/O paths.
#[derive(Debug, Default)]
pub struct Counters {
    /// Bytes of compressed data stored (huge pages count a whole page).
    pub compr_data_size: AtomicU64,
    /// Pages stored, same-filled ones included.
    pub pages_stored: AtomicU64,
    /// Same-filled pages stored.
    pub same_pages: AtomicU64,
    /// Pages stored uncompressed now.
    pub huge_pages: AtomicU64,
    /// Pages ever stored uncompressed.
    pub huge_pages_since: AtomicU64,
    /// Reads that failed.
    pub failed_reads: AtomicU64,
    /// Writes that failed.
    pub failed_writes: AtomicU64,
    /// Pages freed by discard and write-zeroes.
    pub notify_free: AtomicU64,
    /// Frees skipped because the slot was busy (kept for the format; the
    /// store always waits, so it stays 0).
    pub miss_free: AtomicU64,
    /// Most pages the allocator has held (reset by `reset_mem_used_max`).
    pub max_used_pages: AtomicU64,
    /// Page reads served.
    pub num_reads: AtomicU64,
    /// Page writes served.
    pub num_writes: AtomicU64,
}

impl Counters {
    /// Adds to a counter.
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// Subtracts from a counter.
    pub fn sub(c: &AtomicU64, n: u64) {
        c.fetch_sub(n, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    /// Raises `max_used_pages` to `pages` if it is higher.
    pub fn update_max(&self, pages: u64) {
        self.max_used_pages.fetch_max(pages, Ordering::Relaxed);
    }

    /// Zeroes everything.
    pub fn clear(&self) {
        for c in [
            &self.compr_data_size,
            &self.pages_stored,
            &self.same_pages,
            &self.huge_pages,
            &self.huge_pages_since,
            &self.failed_reads,
            &self.failed_writes,
            &self.notify_free,
            &self.miss_free,
            &self.max_used_pages,
            &self.num_reads,
            &self.num_writes,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

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
    /// Objects moved by compaction (seed 001's counter; not a kernel
    /// `mm_stat` column, printed apart).
    pub objs_moved: u64,
}

impl MmStat {
    /// Seed 003's overhead ratio, `(mem_used_total - compr_data_size) /
    /// compr_data_size`, as a fraction (0 when nothing is stored).
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

/// `debug_stat`: `version: 1`, then `0 <miss_free>`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DebugStat {
    /// Frees skipped because the slot was busy.
    pub miss_free: u64,
}

impl fmt::Display for DebugStat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The retired writestall field is printed as a bare 0.
        write!(f, "version: 1\n0 {:8}", self.miss_free)
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
            DebugStat { miss_free: 4 }.to_string(),
            "version: 1\n0        4"
        );
    }

    #[test]
    fn overhead_ratio_is_seed_003s() {
        let mm = MmStat {
            compr_data_size: 1000,
            mem_used_total: 1033,
            ..MmStat::default()
        };
        assert!((mm.overhead_ratio() - 0.033).abs() < 1e-12);
        assert_eq!(MmStat::default().overhead_ratio(), 0.0);
    }
}
