//! zswap's figures by the kernel's names: the debugfs files of
//! `/sys/kernel/debug/zswap`, the `/proc/vmstat` events the swap path counts
//! for zswap, and the metadata beside the pool (the slab memory of the
//! entries, their zsmalloc handles and the xarrays' nodes), which the kernel
//! counts in `Slab`, not in `pool_total_size`.
//!
//! Owns the statistics types and their table; holds no state of its own
//! (the model fills them in).

use serde::Serialize;

use crate::slab::SlabCache;

/// The files of `/sys/kernel/debug/zswap`, by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Debugfs {
    /// `pool_limit_hit`: stores that found the pool at `max_pool_percent`.
    pub pool_limit_hit: u64,
    /// `reject_reclaim_fail`: writebacks that failed.
    pub reject_reclaim_fail: u64,
    /// `reject_alloc_fail`: zsmalloc (or the xarray) had no memory.
    pub reject_alloc_fail: u64,
    /// `reject_kmemcache_fail`: no `zswap_entry` could be allocated.
    pub reject_kmemcache_fail: u64,
    /// `reject_compress_fail`: the compressor failed (or did not shrink the
    /// page) where writeback is off, so the page was not stored as-is.
    pub reject_compress_fail: u64,
    /// `reject_compress_poor`: compression or allocation said `-ENOSPC`.
    pub reject_compress_poor: u64,
    /// `decompress_fail`: loads or writebacks whose data did not
    /// decompress to a page.
    pub decompress_fail: u64,
    /// `written_back_pages`: entries the shrink worker wrote back to the
    /// swap device.
    pub written_back_pages: u64,
    /// `pool_total_size`: the zsmalloc pool's pages, in bytes.
    pub pool_total_size: u64,
    /// `stored_pages`: entries held.
    pub stored_pages: u64,
    /// `stored_incompressible_pages`: entries held as-is (a whole page).
    pub stored_incompressible_pages: u64,
}

/// The `/proc/vmstat` events of the swap path that concern zswap, by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VmEvents {
    /// `zswpout`: pages stored.
    pub zswpout: u64,
    /// `zswpin`: pages loaded.
    pub zswpin: u64,
    /// `zswpwb`: pages written back.
    pub zswpwb: u64,
    /// `swpout_zero`: zero-filled pages, kept in the swap table's zero map
    /// and never given to zswap.
    pub swpout_zero: u64,
    /// `swpin_zero`: zero-filled pages read back from the zero map.
    pub swpin_zero: u64,
    /// `pswpout`: pages written to the swap device: stores zswap rejected
    /// and entries written back.
    pub pswpout: u64,
}

/// The memory of zswap's metadata, outside `pool_total_size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Metadata {
    /// `zswap_entry` objects (one per stored page).
    pub entries: u64,
    /// Their slabs' bytes, packed full.
    pub zswap_entry_bytes: u64,
    /// The `zs_handle` slabs' bytes of their zsmalloc objects.
    pub zs_handle_bytes: u64,
    /// `radix_tree_node`s of the xarrays.
    pub xa_nodes: u64,
    /// Their slabs' bytes.
    pub xa_node_bytes: u64,
    /// The sum of the three.
    pub total_bytes: u64,
    /// The caches' geometry the bytes come from.
    pub caches: [SlabCache; 3],
}

/// `max_pool_percent` and `accept_threshold_percent` in pages for the RAM
/// the model was given, and where the hysteresis stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// `totalram_pages()`.
    pub totalram_pages: u64,
    /// `zswap_max_pages()`: `totalram_pages * max_pool_percent / 100`.
    pub max_pages: u64,
    /// `zswap_accept_thr_pages()`: `max_pages * accept_threshold_percent /
    /// 100`.
    pub accept_thr_pages: u64,
    /// `zswap_pool_reached_full`: stores are refused until the pool is back
    /// at the accept threshold.
    pub reached_full: bool,
}

/// Every figure of a zswap model at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ZswapStats {
    /// The debugfs files.
    pub debugfs: Debugfs,
    /// The vmstat events.
    pub vmstat: VmEvents,
    /// The bytes of the stored objects (`memory.stat`'s `zswap` of the
    /// cgroups: every entry's `length`).
    pub compressed_bytes: u64,
    /// Pages whose data is on the swap device (rejected or written back).
    pub swap_device_pages: u64,
    /// The metadata's memory.
    pub metadata: Metadata,
    /// The limit and the hysteresis.
    pub limits: Limits,
}

impl ZswapStats {
    /// The memory zswap uses: `pool_total_size` and the metadata.
    pub fn memory_bytes(&self) -> u64 {
        self.debugfs.pool_total_size + self.metadata.total_bytes
    }

    /// The debugfs files as `grep -r . /sys/kernel/debug/zswap` prints
    /// them, one `name:value` line each, in name order.
    pub fn debugfs_lines(&self) -> String {
        let d = &self.debugfs;
        let mut rows = [
            ("decompress_fail", d.decompress_fail),
            ("pool_limit_hit", d.pool_limit_hit),
            ("pool_total_size", d.pool_total_size),
            ("reject_alloc_fail", d.reject_alloc_fail),
            ("reject_compress_fail", d.reject_compress_fail),
            ("reject_compress_poor", d.reject_compress_poor),
            ("reject_kmemcache_fail", d.reject_kmemcache_fail),
            ("reject_reclaim_fail", d.reject_reclaim_fail),
            ("stored_incompressible_pages", d.stored_incompressible_pages),
            ("stored_pages", d.stored_pages),
            ("written_back_pages", d.written_back_pages),
        ];
        rows.sort_by_key(|r| r.0);
        rows.iter()
            .map(|(n, v)| format!("/sys/kernel/debug/zswap/{n}:{v}\n"))
            .collect()
    }
}
