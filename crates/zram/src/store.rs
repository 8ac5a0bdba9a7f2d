//! The public [`Store`]: the core store with the post-processing built on
//! it, assembled into one value.
//!
//! Owns nothing but the assembly: each method's body is in the module that
//! owns its concept (`disk` for pages and statistics, `idle`, `writeback`,
//! `recompress`, `compactor` through the core, `policy`), and the write path
//! is given the memory-aware rule (`policy::Parts`) as the core's
//! `LimitRule`. It is the top floor: no module imports it.
//!
//! # Locks
//! The order is the core's (one slot lock, then a compression stream, then
//! the allocator's locks) with the post-processing above it: the policy's
//! reclaim lock, then the post-processing lock (one writeback or
//! recompression at a time), both taken with no slot lock held; see the
//! `disk`, `postprocess` and `policy` modules and docs/design.md.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use zcomp::Compressor;
use zpool::{ZCompacted, ZPool};

use crate::backing::BackingStore;
use crate::compactor::AutoCompactPolicy;
use crate::disk::Disk;
pub use crate::disk::{same_filled, SlotInfo, SlotState};
use crate::error::StoreError;
use crate::idle::{self, IdleCutoff};
use crate::policy::{Parts, Policy, PolicyConfig, PolicyRunner, ReclaimReport};
use crate::postprocess::PostProcess;
use crate::recompress::{RecompAlgorithm, Recompress, RecompressReport, RecompressRequest};
use crate::stats::{AutoCompactStats, BdStat, DebugStat, IoStat, MmStat, PolicyStats};
use crate::writeback::{Writeback, WritebackLimit, WritebackReport, WritebackRequest};

/// A zram-style compressed block store.
pub struct Store {
    /// The slot table, allocator, streams, counters and backing blocks.
    disk: Disk,
    /// One writeback or recompression at a time.
    post: PostProcess,
    /// Writeback's budget, batch size and `compressed_writeback`.
    writeback: Writeback,
    /// The secondaries' `algorithm_params`.
    recompress: Recompress,
    /// The memory-aware rule and the timed rule's counters.
    policy: Policy,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.disk.fmt(f)
    }
}

impl Store {
    /// A store of `disk_pages` pages of the allocator's page size.
    pub fn new(
        pool: Arc<dyn ZPool>,
        compressor: Compressor,
        disk_pages: u64,
    ) -> Result<Store, StoreError> {
        Ok(Store::assemble(Disk::new(pool, compressor, disk_pages)?))
    }

    /// A store of `disk_pages` blocks of `block_size` bytes, each compressed
    /// whole (the compression unit): a power of two from the allocator's
    /// page size to 64 KiB. A block that compresses to `huge_class_size` or
    /// more is stored raw.
    pub fn with_block_size(
        pool: Arc<dyn ZPool>,
        compressor: Compressor,
        disk_pages: u64,
        block_size: usize,
    ) -> Result<Store, StoreError> {
        let disk = Disk::with_block_size(pool, compressor, disk_pages, block_size)?;
        Ok(Store::assemble(disk))
    }

    fn assemble(disk: Disk) -> Store {
        Store {
            disk,
            post: PostProcess::default(),
            writeback: Writeback::default(),
            recompress: Recompress::default(),
            policy: Policy::default(),
        }
    }

    /// The parts the policy works on (and the write path's `LimitRule`).
    fn parts(&self) -> Parts<'_> {
        Parts {
            disk: &self.disk,
            post: &self.post,
            writeback: &self.writeback,
            recompress: &self.recompress,
            policy: &self.policy,
        }
    }

    /// Stores one page at `index` (one page long). A page of one repeated
    /// 8-byte word takes no allocator memory; one that does not compress
    /// below `huge_class_size` is kept raw. Past `mem_limit` the write
    /// fails (`ENOMEM`) and the old page stays; with the memory-aware rule
    /// on ([`Store::set_writeback_near_limit`]) pages are written back
    /// first.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use zram::Store;
    ///
    /// let pool = Arc::new(zsmalloc::Pool::new(zsmalloc::PoolConfig::kernel_compat()).unwrap());
    /// let lz4 = zcomp::Compressor::parse("lz4", "").unwrap();
    /// let store = Store::new(pool, lz4, 16).unwrap();
    /// let text: Vec<u8> = b"zram keeps pages compressed in memory. "
    ///     .iter()
    ///     .copied()
    ///     .cycle()
    ///     .take(4096)
    ///     .collect();
    /// store.write_page(0, &text).unwrap();
    /// store.write_page(1, &[0u8; 4096]).unwrap();
    ///
    /// let mm = store.mm_stat();
    /// assert_eq!(mm.orig_data_size, 2 * 4096);
    /// assert_eq!(mm.same_pages, 1, "the zero page takes no allocator memory");
    /// assert!(mm.compr_data_size < 4096 / 4, "{mm}");
    ///
    /// let mut back = vec![0u8; 4096];
    /// store.read_page(0, &mut back).unwrap();
    /// assert_eq!(back, text);
    /// assert!(store.write_page(16, &text).is_err(), "past the disk");
    /// ```
    pub fn write_page(&self, index: u64, page: &[u8]) -> Result<(), StoreError> {
        self.disk.write_page(index, page, &self.parts())
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.disk.page_size()
    }

    /// Pages on the disk.
    pub fn disk_pages(&self) -> u64 {
        self.disk.disk_pages()
    }

    /// Bytes on the disk.
    pub fn disk_size(&self) -> u64 {
        self.disk.disk_size()
    }

    /// The allocator.
    pub fn allocator(&self) -> &dyn ZPool {
        self.disk.allocator()
    }

    /// The compressor.
    pub fn compressor(&self) -> &Compressor {
        self.disk.compressor()
    }

    /// Compressed pages of at least this many bytes are stored raw.
    pub fn huge_class_size(&self) -> usize {
        self.disk.huge_class_size()
    }

    /// Bytes per allocator page, the unit `mem_used_total` and `mem_limit`
    /// are counted in (equal to [`Store::page_size`] unless the store was
    /// made with a larger block).
    pub fn mem_page_size(&self) -> usize {
        self.disk.mem_page_size()
    }

    /// Reads the page at `index` into `buf` (one page long).
    pub fn read_page(&self, index: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        self.disk.read_page(index, buf)
    }

    /// Frees `count` pages from `first` (a discard or trim): they read as
    /// zeros afterwards and hold no memory.
    pub fn discard(&self, first: u64, count: u64) -> Result<(), StoreError> {
        self.disk.discard(first, count)
    }

    /// Zeroes `count` pages from `first`. As in zram this frees them: an
    /// empty slot reads as zeros.
    pub fn write_zeroes(&self, first: u64, count: u64) -> Result<(), StoreError> {
        self.disk.write_zeroes(first, count)
    }

    /// Frees every page and zeroes the counters and the memory limit (the
    /// kernel's `reset`). The kernel refuses a reset while the device is
    /// open; here calls may run alongside it, and a write that lands on a
    /// slot after `reset` has passed it stays (as a write just after the
    /// reset would).
    pub fn reset(&self) {
        self.disk.reset()
    }

    /// Compacts the allocator (`echo 1 > compact`).
    pub fn compact(&self) -> ZCompacted {
        self.disk.compact()
    }

    /// Sets the background compactor's policy (see the `compactor` module):
    /// [`AutoCompactMode::On`](crate::AutoCompactMode::On) starts its
    /// thread, `Off` stops it and waits for it. A store starts with it off.
    pub fn set_auto_compact(&self, policy: AutoCompactPolicy) -> Result<(), StoreError> {
        self.disk.set_auto_compact(policy)
    }

    /// The background compactor's policy.
    pub fn auto_compact(&self) -> AutoCompactPolicy {
        self.disk.auto_compact()
    }

    /// What the background compactor has done since the store was made.
    pub fn auto_compact_stats(&self) -> AutoCompactStats {
        self.disk.auto_compact_stats()
    }

    /// Waits until the background compactor has dealt with every free so
    /// far (true), or `timeout` passed (false): for a caller that wants
    /// figures after the compactor, such as the replay engine between stages.
    /// True at once when it is off.
    pub fn wait_auto_compact_idle(&self, timeout: Duration) -> bool {
        self.disk.wait_auto_compact_idle(timeout)
    }

    /// Whether the background compactor's thread is running.
    pub fn auto_compact_running(&self) -> bool {
        self.disk.auto_compact_running()
    }

    /// Sets the memory limit in bytes, rounded up to whole pages; 0 removes
    /// it. Pages already stored stay; later writes that would pass it fail.
    pub fn set_mem_limit(&self, bytes: u64) {
        self.disk.set_mem_limit(bytes)
    }

    /// The memory limit in bytes (0: none).
    pub fn mem_limit(&self) -> u64 {
        self.disk.mem_limit()
    }

    /// Resets `mem_used_max` to the memory used now (`echo 0 >
    /// mem_used_max`).
    pub fn reset_mem_used_max(&self) {
        self.disk.reset_mem_used_max()
    }

    /// What the slot at `index` holds.
    pub fn slot_info(&self, index: u64) -> Result<SlotInfo, StoreError> {
        self.disk.slot_info(index)
    }

    /// `mm_stat` now.
    pub fn mm_stat(&self) -> MmStat {
        self.disk.mm_stat()
    }

    /// `io_stat` now.
    pub fn io_stat(&self) -> IoStat {
        self.disk.io_stat()
    }

    /// Bytes the allocator gave back to its page source and keeps resident
    /// for reuse (not in `mem_used_total`), and their bound now: the
    /// resident set may exceed `mem_used_total` by up to the bound (see
    /// `zpool::ZPool::retained_pages`).
    pub fn retained_bytes(&self) -> (u64, u64) {
        self.disk.retained_bytes()
    }

    /// The divisor of the allocator's retained share: freed pages up to one
    /// in this many of the pages it holds stay resident for reuse, on top of
    /// its page source's fixed cache (0: the fixed cache only, or an
    /// allocator that keeps none).
    pub fn retain_divisor(&self) -> usize {
        self.disk.retain_divisor()
    }

    /// Sets the retained share's divisor on the running store (see
    /// [`Store::retain_divisor`]); what is kept over the new bound goes back
    /// to the OS now.
    pub fn set_retain_divisor(&self, divisor: usize) {
        self.disk.set_retain_divisor(divisor)
    }

    /// Page reads and writes served since the last reset.
    pub fn io_counts(&self) -> (u64, u64) {
        self.disk.io_counts()
    }

    /// Gives back the compression contexts no thread is using (see the
    /// `streams` module: zstd's are about 0.5 MiB each); the next page
    /// written or read makes one again. For a caller that knows the store is
    /// idle, such as a server after a quiet spell (reads with lzo, lzo-rle
    /// or lz4, whose decoders keep no state, take none). Returns how many were
    /// released.
    pub fn release_idle_streams(&self) -> usize {
        self.disk.release_idle_streams()
    }

    /// How many pages the store compresses at once (`max_comp_streams`:
    /// the kernel's per-CPU streams; here the stripes, twice the CPUs).
    pub fn max_comp_streams(&self) -> usize {
        self.disk.max_comp_streams()
    }

    /// Compression contexts the store holds now (at most twice the CPUs).
    pub fn live_streams(&self) -> usize {
        self.disk.live_streams()
    }

    /// `debug_stat` now.
    pub fn debug_stat(&self) -> DebugStat {
        let stats = self.disk.auto_compact_stats();
        let shown = self.disk.auto_compact_running() || stats.wakeups > 0;
        DebugStat {
            miss_free: self.disk.miss_free(),
            auto_compact: shown.then_some(stats),
            policy: self.policy_configured().then(|| self.policy_stats()),
        }
    }

    /// Marks slots idle (`echo all > idle` or `echo N > idle`; see
    /// [`IdleCutoff::parse`]). Same-filled and empty slots are never
    /// marked. Returns the slots marked.
    pub fn mark_idle(&self, cutoff: IdleCutoff) -> u64 {
        idle::mark(&self.disk, cutoff)
    }

    // Writeback (the `writeback` module).

    /// Sets the backing store to the file or block device at `path`
    /// (`echo PATH > backing_dev`). `EBUSY` once the store is initialised
    /// (a page written since it was made or reset); see
    /// [`BackingFile::open`](crate::BackingFile::open) for the others.
    pub fn set_backing_dev(&self, path: &Path) -> Result<(), StoreError> {
        self.writeback.set_backing_dev(&self.disk, path)?;
        self.policy
            .refresh_metadata_pages(&self.disk, &self.writeback);
        Ok(())
    }

    /// Sets any [`BackingStore`] as the backing store (its blocks are
    /// pages of this store). `EBUSY` once the store is initialised.
    pub fn set_backing_store(&self, dev: Arc<dyn BackingStore>) -> Result<(), StoreError> {
        self.writeback.set_backing_store(&self.disk, dev)?;
        self.policy
            .refresh_metadata_pages(&self.disk, &self.writeback);
        Ok(())
    }

    /// What `cat backing_dev` shows: the path, or `none`.
    pub fn backing_dev(&self) -> String {
        self.writeback.backing_dev(&self.disk)
    }

    /// Sets `compressed_writeback` (`echo 1 > compressed_writeback`, the
    /// attribute Linux 7.0 adds): write compressed objects, packed several
    /// to a block, instead of decompressed pages. `EBUSY` once the store is
    /// initialised, as the kernel's.
    pub fn set_compressed_writeback(&self, on: bool) -> Result<(), StoreError> {
        self.writeback.set_compressed(&self.disk, on)
    }

    /// `compressed_writeback`.
    pub fn compressed_writeback(&self) -> bool {
        self.writeback.compressed()
    }

    /// [`Store::set_compressed_writeback`] under the attribute's name
    /// before Linux 7.0's release (`writeback_compressed`).
    pub fn set_writeback_compressed(&self, on: bool) -> Result<(), StoreError> {
        self.set_compressed_writeback(on)
    }

    /// With `compressed_writeback`, writes each compressed object into a
    /// block of its own, as Linux 7.x does (`true`: kernel-compat stores,
    /// whose `bd_stat` is then the kernel's), or packs them back to back
    /// (`false`, the default: fewer blocks written and held).
    pub fn set_writeback_one_object_per_block(&self, on: bool) {
        self.writeback.set_one_object_per_block(on);
    }

    /// [`Store::compressed_writeback`] under the attribute's name before
    /// Linux 7.0's release (`writeback_compressed`).
    pub fn writeback_compressed(&self) -> bool {
        self.compressed_writeback()
    }

    /// `bd_stat` now.
    pub fn bd_stat(&self) -> BdStat {
        self.writeback.bd_stat(&self.disk)
    }

    /// `writeback_limit_enable` and `writeback_limit`.
    pub fn writeback_limit(&self) -> WritebackLimit {
        self.writeback.budget()
    }

    /// Sets `writeback_limit` (4 KiB units, rounded down to whole pages).
    pub fn set_writeback_limit(&self, units: u64) {
        self.writeback.set_budget(&self.disk, units);
    }

    /// Sets `writeback_limit_enable`.
    pub fn set_writeback_limit_enable(&self, enabled: bool) {
        self.writeback.set_budget_enabled(enabled);
    }

    /// `writeback_batch_size`: pages written with one call.
    pub fn writeback_batch_size(&self) -> usize {
        self.writeback.batch()
    }

    /// Sets `writeback_batch_size` (1 to 256 pages; `EINVAL` otherwise).
    /// It may change at any time; a writeback running takes it when it
    /// starts.
    pub fn set_writeback_batch_size(&self, pages: u64) -> Result<(), StoreError> {
        self.writeback.set_batch(pages)?;
        self.policy
            .refresh_metadata_pages(&self.disk, &self.writeback);
        Ok(())
    }

    /// Bytes of the batch buffers a writeback holds while it runs (up to
    /// four of `writeback_batch_size` pages each).
    pub fn writeback_buffer_bytes(&self) -> u64 {
        self.writeback.buffer_bytes(&self.disk)
    }

    /// Writes the pages `req` chooses to the backing store (`echo ... >
    /// writeback`). `ENODEV` without a backing store; `ENOSPC` when it is
    /// full, `EIO` when the budget runs out, or the last write error: pages
    /// written before the error stay written.
    ///
    /// Pages go out in batches of `writeback_batch_size`: a run of adjacent
    /// free blocks is reserved, the pages are read into one aligned buffer
    /// (each under its own slot lock, held only for the copy) and written
    /// with one call by one of two writer threads, while this thread reads
    /// the next batch into another buffer (up to four); then the writer
    /// gives each slot that nobody touched meanwhile its block and frees
    /// its object. A failed batch is written again page by page, so a bad
    /// block keeps only its own page in memory.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use zram::{BackingFile, IdleCutoff, SlotState, Store, WritebackRequest};
    ///
    /// let pool = Arc::new(zsmalloc::Pool::new(zsmalloc::PoolConfig::kernel_compat()).unwrap());
    /// let lz4 = zcomp::Compressor::parse("lz4", "").unwrap();
    /// let store = Store::new(pool, lz4, 8).unwrap();
    ///
    /// // A backing file of the disk's size, set before the first write.
    /// let path = std::env::temp_dir().join(format!("zram-doc-{}.img", std::process::id()));
    /// std::fs::File::create(&path).unwrap().set_len(8 * 4096).unwrap();
    /// store.set_backing_store(Arc::new(BackingFile::open(&path, 4096).unwrap())).unwrap();
    /// std::fs::remove_file(&path).unwrap(); // the store keeps it open
    ///
    /// let page: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    /// store.write_page(2, &page).unwrap();
    /// store.mark_idle(IdleCutoff::All);
    /// let report = store.writeback(&WritebackRequest::parse("idle", 8).unwrap()).unwrap();
    /// assert_eq!(report.written, 1);
    /// assert!(matches!(store.slot_info(2).unwrap().state, SlotState::WrittenBack(_)));
    /// assert_eq!(store.mm_stat().compr_data_size, 0, "the page left memory");
    ///
    /// let mut back = vec![0u8; 4096];
    /// store.read_page(2, &mut back).unwrap(); // read from the backing file
    /// assert_eq!(back, page);
    /// assert_eq!(store.bd_stat().bd_reads, 1);
    /// ```
    pub fn writeback(&self, req: &WritebackRequest) -> Result<WritebackReport, StoreError> {
        self.writeback.run(&self.disk, &self.post, req)
    }

    // Recompression (the `recompress` module).

    /// Sets a secondary compressor (`echo "algo=NAME priority=N" >
    /// recomp_algorithm`; priority 1 when not given). `EINVAL` for a
    /// missing or unknown algorithm, a word without a value or a priority
    /// outside 1..=3; `E2BIG` for a name of 128 bytes or more; `EBUSY` once
    /// the store is initialised.
    pub fn set_recomp_algorithm(&self, text: &str) -> Result<(), StoreError> {
        self.set_recomp(RecompAlgorithm::parse(text)?)
    }

    /// Sets a secondary compressor already parsed (see
    /// [`Store::set_recomp_algorithm`]), with its default settings (the
    /// priority's `algorithm_params` are reset, as Linux 7.x does); `EBUSY`
    /// once the store is initialised.
    pub fn set_recomp(&self, recomp: RecompAlgorithm) -> Result<(), StoreError> {
        self.recompress.set_recomp_algorithm(&self.disk, recomp)
    }

    /// Which encoder compresses the lz4, lz4hc and deflate secondaries set
    /// from now on: a kernel-compat store runs the kernel's output
    /// ([`zcomp::Encoder::Kernel`]) for them, as for its primary
    /// ([`zcomp::Compressor::kernel_compat`]); stores start with
    /// [`zcomp::Encoder::Fastest`], default mode's.
    pub fn set_recomp_encoder(&self, encoder: zcomp::Encoder) {
        self.recompress.set_encoder(encoder);
    }

    /// Sets the parameters of a secondary compressor (`echo "priority=N
    /// level=L" > algorithm_params`, or `algo=NAME` for the secondary of
    /// that name): `level`, `dict` and `deflate.winbits`, as for the
    /// primary. Each write replaces the priority's whole set, kept until a
    /// `recomp_algorithm` write for that priority resets it (Linux 7.x).
    /// `EINVAL` for unknown keys, malformed values, a priority outside
    /// 1..=3, an `algo` no secondary has (or not the one at the given
    /// priority) or settings the algorithm refuses; `EBUSY` for the
    /// primary (priority 0, or neither key: its parameters are given when
    /// the store is made) and once the store is initialised.
    pub fn set_algorithm_params(&self, text: &str) -> Result<(), StoreError> {
        self.recompress.set_algorithm_params(&self.disk, text)
    }

    /// The `algorithm_params` settings kept for `priority` (1..=3).
    pub fn secondary_params(&self, priority: usize) -> zcomp::Params {
        self.recompress.secondary_params(priority)
    }

    /// The compressor set for a priority (1..=3), if any.
    pub fn secondary_compressor(&self, priority: usize) -> Option<zcomp::Compressor> {
        self.disk
            .secondary(priority)
            .map(|s| s.compressor().clone())
    }

    /// The secondary compressors: `(priority, algorithm name)`.
    pub fn recomp_algorithms(&self) -> Vec<(usize, &'static str)> {
        Recompress::recomp_algorithms(&self.disk)
    }

    /// Recompresses the pages `req` chooses (`echo ... > recompress`).
    pub fn recompress(&self, req: &RecompressRequest) -> Result<RecompressReport, StoreError> {
        self.recompress.run(&self.disk, &self.post, req)
    }

    // The memory-aware rule (the `policy` module).

    /// Turns the memory-aware rule on at `high_percent` of `mem_limit`
    /// (50 to 99), or off with 0. `EINVAL` for other values.
    pub fn set_writeback_near_limit(&self, high_percent: u32) -> Result<(), StoreError> {
        self.policy.set_high_percent(&self.parts(), high_percent)
    }

    /// The memory-aware rule's high mark, percent of `mem_limit` (0: off).
    pub fn writeback_near_limit(&self) -> u32 {
        self.policy.high_percent()
    }

    /// What the policies have done.
    pub fn policy_stats(&self) -> PolicyStats {
        self.policy.stats()
    }

    /// Whether a policy was ever set on this store (its `debug_stat` line
    /// is shown).
    pub fn policy_configured(&self) -> bool {
        self.policy.configured()
    }

    /// Bytes of the store's own metadata that the memory-aware rule leaves
    /// room for below `mem_limit`: the slot table (16 bytes a page of the
    /// disk, the kernel's `zram_table_entry`) and the backing store's block
    /// bitmap (a bit a block). Both are fixed by the sizes of the disk and
    /// the backing store, and outside `mem_limit`, as in the kernel.
    pub fn metadata_bytes(&self) -> u64 {
        self.disk.metadata_bytes()
    }

    /// What the memory-aware rule keeps `mem_used_total` within, in bytes:
    /// `mem_limit` minus [`Store::metadata_bytes`] and the writeback's batch
    /// buffers ([`Store::writeback_buffer_bytes`]), never below half the
    /// limit; 0 without a limit.
    pub fn writeback_ceiling(&self) -> u64 {
        self.policy.ceiling_bytes(&self.disk)
    }

    /// Writes back pages (idle ones first, then by least recent access)
    /// and compacts until `mem_used_total` is at most `target_pages`, or
    /// nothing more can go. One reclaim at a time: a caller that waited
    /// for another finds the memory it freed, and returns at once when
    /// memory is at most `skip_at_pages`.
    pub fn reclaim_to(&self, target_pages: u64, skip_at_pages: u64) -> ReclaimReport {
        self.parts().reclaim_to(target_pages, skip_at_pages)
    }
}

impl PolicyRunner {
    /// Starts the thread for `store` with the timed rule `config` (which
    /// may do nothing: the thread then serves the memory-aware rule only).
    /// The thread holds only a weak reference to the store.
    pub fn start(store: &Arc<Store>, config: PolicyConfig) -> std::io::Result<PolicyRunner> {
        let weak = Arc::downgrade(store);
        PolicyRunner::spawn(&store.policy, config, move |config, tick| {
            let Some(store) = weak.upgrade() else {
                return false;
            };
            store.parts().step(config, tick);
            true
        })
    }
}
