//! The model: one swap area's pages through Linux 7.3's zswap, page by page.
//!
//! What it follows, from `mm/zswap.c` and `mm/page_io.c`:
//! - `swap_writeout`: a zero-filled page is marked in the swap table's zero
//!   map (`swpout_zero`) and never reaches zswap; any other page clears the
//!   mark and goes to `zswap_store`;
//! - `zswap_store`: `zswap_check_limits` first (the pool at
//!   `max_pool_percent` of RAM: `pool_limit_hit`, and stores refused until
//!   it is back at `accept_threshold_percent` of that), then the compressor
//!   into a page-sized buffer: a page that does not compress below a page
//!   is stored as-is (`stored_incompressible_pages`), or refused where
//!   writeback is off (`reject_compress_fail`, or `reject_compress_poor`
//!   for the compressors that say `-ENOSPC`); the object goes to the one
//!   zsmalloc pool of the compressor (kernel-compat geometry), the entry
//!   into the xarray (an older entry at the offset freed) and at the LRU's
//!   tail, referenced. A refused store erases any older entry of the offset
//!   and sends the page to the swap device; if the pool had reached its
//!   limit, the shrink worker runs;
//! - `shrink_worker`: walks the LRU from its head in steps of
//!   `SWAP_CLUSTER_MAX` entries, giving a referenced entry a second chance
//!   (the bit cleared, the entry rotated to the tail) and writing the others
//!   back to the swap device (`written_back_pages`), until the pool is at
//!   the accept threshold or `MAX_RECLAIM_RETRIES` steps wrote nothing.
//!   The kernel runs it on a workqueue; the model runs it at once, as if
//!   it finished before the next store;
//! - `zswap_load`: the zero map first, then the entry, decompressed and
//!   freed (zswap's loads are exclusive); `zswap_invalidate`: the entry
//!   freed when the swap slot is.
//!
//! Not followed: memory cgroups (one cgroup holds every page: the
//! hysteresis and the shrink worker are the system's), the memory-pressure
//! shrinker (`shrinker_enabled`, off by default), large folios (every store
//! is one page), and the swap cache (a writeback never finds the page
//! there). The compressors are zcomp's kernel-compat ones: lzo, lzo-rle,
//! lz4, lz4hc and deflate (at zram's window and memLevel) give the kernel's
//! bytes; zstd is libzstd 1.5.7, the version of the kernel's lib/zstd.
//!
//! Owns the model's state (entries, LRU, zero map, counters) and its
//! figures; the pool is zsmalloc's, the compressor zcomp's, the arithmetic
//! of the metadata `slab`'s and `xarray`'s.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use serde::Serialize;
use zcomp::{Algorithm, Compressor, Context};
use zsmalloc::{Handle, Pool, PoolConfig, PoolError};

use crate::params::{DEFAULT_ACCEPT_THRESHOLD_PERCENT, DEFAULT_MAX_POOL_PERCENT};
use crate::slab::{SlabCache, PAGE_SIZE};
use crate::stats::{Debugfs, Limits, Metadata, VmEvents, ZswapStats};
use crate::xarray;

/// `SWAP_CLUSTER_MAX`: entries one `shrink_memcg` walks per node.
pub const SWAP_CLUSTER_MAX: usize = 32;

/// `MAX_RECLAIM_RETRIES`: walks without a writeback the shrink worker takes
/// before it gives up.
pub const MAX_RECLAIM_RETRIES: u32 = 16;

/// What a model is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ZswapConfig {
    /// `compressor`.
    #[serde(serialize_with = "algorithm_name")]
    pub compressor: Algorithm,
    /// `totalram_pages()`: the machine's RAM in pages (`MemTotal`).
    pub totalram_pages: u64,
    /// `max_pool_percent` (0..=100).
    pub max_pool_percent: u32,
    /// `accept_threshold_percent` (0..=100).
    pub accept_threshold_percent: u32,
    /// `memory.zswap.writeback` of the pages' cgroup: when off, the shrink
    /// worker writes nothing back and a page that does not compress is
    /// refused instead of stored as-is.
    pub writeback: bool,
    /// The present CPUs, which set SLUB's slab orders.
    pub nr_cpus: u32,
}

impl ZswapConfig {
    /// 7.3's defaults (20% of RAM, accept at 90% of that, writeback on) for
    /// `compressor` on a machine of `totalram_pages` pages and `nr_cpus`
    /// CPUs.
    pub fn new(compressor: Algorithm, totalram_pages: u64, nr_cpus: u32) -> ZswapConfig {
        ZswapConfig {
            compressor,
            totalram_pages,
            max_pool_percent: DEFAULT_MAX_POOL_PERCENT,
            accept_threshold_percent: DEFAULT_ACCEPT_THRESHOLD_PERCENT,
            writeback: true,
            nr_cpus,
        }
    }

    /// `zswap_max_pages()`.
    pub fn max_pages(&self) -> u64 {
        self.totalram_pages * u64::from(self.max_pool_percent) / 100
    }

    /// `zswap_accept_thr_pages()`.
    pub fn accept_thr_pages(&self) -> u64 {
        self.max_pages() * u64::from(self.accept_threshold_percent) / 100
    }
}

/// An algorithm by its name.
fn algorithm_name<S: serde::Serializer>(a: &Algorithm, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(a.name())
}

/// Why a store was refused, by the counter the kernel bumps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reject {
    /// The pool reached `max_pool_percent` and is not yet back at the
    /// accept threshold (`pool_limit_hit` counts the stores that found it
    /// at the limit itself).
    PoolLimit,
    /// `reject_compress_fail`.
    CompressFail,
    /// `reject_compress_poor`.
    CompressPoor,
    /// `reject_alloc_fail`.
    AllocFail,
}

impl Reject {
    /// The debugfs counter of the reason.
    pub fn counter(self) -> &'static str {
        match self {
            Reject::PoolLimit => "pool_limit_hit",
            Reject::CompressFail => "reject_compress_fail",
            Reject::CompressPoor => "reject_compress_poor",
            Reject::AllocFail => "reject_alloc_fail",
        }
    }
}

/// What became of one page given to the swap path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Stored compressed, in `length` bytes.
    Compressed {
        /// The compressed length (`entry->length`).
        length: u32,
    },
    /// Stored as-is, a whole page (`stored_incompressible_pages`).
    Incompressible,
    /// Zero-filled: in the zero map, not in zswap (`swpout_zero`).
    ZeroFilled,
    /// Refused: the page went to the swap device.
    Rejected(Reject),
}

/// Where a loaded page came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Loaded {
    /// From zswap, decompressed; the entry is freed.
    Zswap,
    /// From the zero map.
    ZeroFilled,
    /// Not in memory: the page is on the swap device (refused or written
    /// back); the buffer is left as it was.
    SwapDevice,
    /// Nothing was stored at the offset.
    Nothing,
}

/// A model's error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZswapError {
    /// A page of another length than 4096 bytes.
    PageSize(usize),
    /// The compressor could not be made.
    Compressor(String),
    /// The pool could not be made, or refused an operation the model
    /// relies on.
    Pool(PoolError),
    /// An entry did not decompress to a page (`decompress_fail`).
    Decompress(u64),
    /// A percentage above 100.
    Percent(&'static str, u32),
}

impl fmt::Display for ZswapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZswapError::PageSize(n) => write!(f, "a page of {n} bytes (zswap stores 4096)"),
            ZswapError::Compressor(e) => write!(f, "compressor: {e}"),
            ZswapError::Pool(e) => write!(f, "zsmalloc: {e}"),
            ZswapError::Decompress(off) => {
                write!(
                    f,
                    "the entry at swap offset {off} did not decompress to a page"
                )
            }
            ZswapError::Percent(name, v) => write!(f, "{name} {v}: at most 100"),
        }
    }
}

impl std::error::Error for ZswapError {}

/// One `struct zswap_entry`.
#[derive(Clone, Copy, Debug)]
struct Entry {
    handle: Handle,
    length: u32,
    referenced: bool,
    /// Tells this entry's LRU place from older entries' of the offset.
    generation: u64,
}

/// zswap over one swap area: see the module's comment.
pub struct Zswap {
    config: ZswapConfig,
    pool: Pool,
    ctx: Context,
    /// The xarray: swap offset to entry.
    entries: BTreeMap<u64, Entry>,
    /// The LRU, oldest first: (offset, generation); places of entries
    /// since freed are skipped.
    lru: VecDeque<(u64, u64)>,
    next_generation: u64,
    /// The swap table's zero marks.
    zero: BTreeSet<u64>,
    /// Offsets whose page is on the swap device.
    on_device: BTreeSet<u64>,
    reached_full: bool,
    debugfs: Debugfs,
    vmstat: VmEvents,
    incompressible: u64,
    compressed_bytes: u64,
    caches: [SlabCache; 3],
    page: Vec<u8>,
}

impl fmt::Debug for Zswap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Zswap")
            .field("config", &self.config)
            .field("stored_pages", &self.entries.len())
            .finish()
    }
}

fn is_zero_filled(page: &[u8]) -> bool {
    page.iter().all(|&b| b == 0)
}

impl Zswap {
    /// A model with an empty pool.
    pub fn new(config: ZswapConfig) -> Result<Zswap, ZswapError> {
        if config.max_pool_percent > 100 {
            return Err(ZswapError::Percent(
                "max_pool_percent",
                config.max_pool_percent,
            ));
        }
        if config.accept_threshold_percent > 100 {
            return Err(ZswapError::Percent(
                "accept_threshold_percent",
                config.accept_threshold_percent,
            ));
        }
        let compressor = Compressor::with_defaults(config.compressor).kernel_compat();
        let ctx = compressor
            .context()
            .map_err(|e| ZswapError::Compressor(e.to_string()))?;
        let pool = Pool::new(PoolConfig::kernel_compat()).map_err(ZswapError::Pool)?;
        let caches = [
            SlabCache::zswap_entry(config.nr_cpus),
            SlabCache::zs_handle(config.nr_cpus),
            SlabCache::radix_tree_node(config.nr_cpus),
        ];
        Ok(Zswap {
            config,
            pool,
            ctx,
            entries: BTreeMap::new(),
            lru: VecDeque::new(),
            next_generation: 0,
            zero: BTreeSet::new(),
            on_device: BTreeSet::new(),
            reached_full: false,
            debugfs: Debugfs::default(),
            vmstat: VmEvents::default(),
            incompressible: 0,
            compressed_bytes: 0,
            caches,
            page: vec![0; PAGE_SIZE],
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ZswapConfig {
        &self.config
    }

    /// `zswap_total_pages()`: the pool's pages.
    pub fn total_pages(&self) -> u64 {
        self.pool.total_pages() as u64
    }

    /// `zswap_check_limits()`.
    fn check_limits(&mut self) -> bool {
        let cur = self.total_pages();
        if cur >= self.config.max_pages() {
            self.debugfs.pool_limit_hit += 1;
            self.reached_full = true;
        } else if self.reached_full && cur <= self.config.accept_thr_pages() {
            self.reached_full = false;
        }
        self.reached_full
    }

    /// `zswap_entry_free()`.
    fn free_entry(&mut self, entry: Entry) -> Result<(), ZswapError> {
        self.pool.free(entry.handle).map_err(ZswapError::Pool)?;
        if entry.length as usize == PAGE_SIZE {
            self.incompressible -= 1;
        }
        self.compressed_bytes -= u64::from(entry.length);
        Ok(())
    }

    /// Erases the entry at `offset`, if any, and frees it.
    fn erase(&mut self, offset: u64) -> Result<(), ZswapError> {
        match self.entries.remove(&offset) {
            Some(e) => self.free_entry(e),
            None => Ok(()),
        }
    }

    /// The swap path's store of one page at swap offset `offset`
    /// (`swap_writeout` and `zswap_store`): what became of it.
    pub fn store(&mut self, offset: u64, page: &[u8]) -> Result<Outcome, ZswapError> {
        if page.len() != PAGE_SIZE {
            return Err(ZswapError::PageSize(page.len()));
        }
        if is_zero_filled(page) {
            // The zero map; an older zswap entry of the offset stays
            // until the slot is invalidated (the mark is read first).
            self.zero.insert(offset);
            self.on_device.remove(&offset);
            self.vmstat.swpout_zero += 1;
            return Ok(Outcome::ZeroFilled);
        }
        self.zero.remove(&offset);
        let outcome = self.zswap_store(offset, page)?;
        if let Outcome::Rejected(_) = outcome {
            self.erase(offset)?;
            self.on_device.insert(offset);
            self.vmstat.pswpout += 1;
            if self.reached_full {
                self.shrink_worker()?;
            }
        } else {
            self.on_device.remove(&offset);
            self.vmstat.zswpout += 1;
        }
        Ok(outcome)
    }

    fn zswap_store(&mut self, offset: u64, page: &[u8]) -> Result<Outcome, ZswapError> {
        if self.check_limits() {
            return Ok(Outcome::Rejected(Reject::PoolLimit));
        }
        let compressed = match self.ctx.compress_buffered(page) {
            Ok(c) if !c.is_empty() && c.len() < PAGE_SIZE => Some(c),
            _ => None,
        };
        let (data, outcome) = match compressed {
            Some(c) => (
                c,
                Outcome::Compressed {
                    length: c.len() as u32,
                },
            ),
            None if !self.config.writeback => {
                // comp_ret, or -EINVAL for a page that did not shrink:
                // -ENOSPC is zstd's and deflate's for output that did not
                // fit, -EINVAL lzo's and lz4's.
                let reason = match self.config.compressor {
                    Algorithm::Zstd | Algorithm::Deflate => Reject::CompressPoor,
                    _ => Reject::CompressFail,
                };
                match reason {
                    Reject::CompressPoor => self.debugfs.reject_compress_poor += 1,
                    _ => self.debugfs.reject_compress_fail += 1,
                }
                return Ok(Outcome::Rejected(reason));
            }
            None => (page, Outcome::Incompressible),
        };
        let length = data.len();
        let handle = match self.pool.malloc(length) {
            Ok(h) => h,
            Err(PoolError::OutOfMemory(_) | PoolError::TableFull) => {
                self.debugfs.reject_alloc_fail += 1;
                return Ok(Outcome::Rejected(Reject::AllocFail));
            }
            Err(e) => return Err(ZswapError::Pool(e)),
        };
        self.pool.write(handle, data).map_err(ZswapError::Pool)?;
        let generation = self.next_generation;
        self.next_generation += 1;
        let entry = Entry {
            handle,
            length: length as u32,
            referenced: true,
            generation,
        };
        if let Some(old) = self.entries.insert(offset, entry) {
            self.free_entry(old)?;
        }
        if length == PAGE_SIZE {
            self.incompressible += 1;
        }
        self.compressed_bytes += length as u64;
        self.lru.push_back((offset, generation));
        self.trim_lru();
        Ok(outcome)
    }

    /// Drops the LRU places of freed entries once they outnumber the live
    /// ones.
    fn trim_lru(&mut self) {
        if self.lru.len() > 2 * self.entries.len() + 1024 {
            let entries = &self.entries;
            self.lru
                .retain(|(off, g)| entries.get(off).is_some_and(|e| e.generation == *g));
        }
    }

    /// The LRU's oldest live entry, taken off the list.
    fn pop_lru(&mut self) -> Option<u64> {
        while let Some((off, g)) = self.lru.pop_front() {
            if self.entries.get(&off).is_some_and(|e| e.generation == g) {
                return Some(off);
            }
        }
        None
    }

    /// `shrink_memcg()` of the one cgroup: walks up to `SWAP_CLUSTER_MAX`
    /// entries; returns (walked, written back).
    fn shrink_memcg(&mut self) -> Result<(usize, usize), ZswapError> {
        let (mut walked, mut written) = (0, 0);
        while walked < SWAP_CLUSTER_MAX {
            let Some(off) = self.pop_lru() else { break };
            walked += 1;
            let entry = self.entries.get_mut(&off).expect("a live LRU place");
            if entry.referenced {
                // Second chance: rotated to the tail.
                entry.referenced = false;
                let g = entry.generation;
                self.lru.push_back((off, g));
                continue;
            }
            if self.writeback_entry(off)? {
                written += 1;
            }
        }
        Ok((walked, written))
    }

    /// `zswap_writeback_entry()`: the entry decompressed and written to
    /// the swap device, then freed. False when it did not decompress
    /// (`reject_reclaim_fail`; the entry stays, rotated).
    fn writeback_entry(&mut self, off: u64) -> Result<bool, ZswapError> {
        let entry = self.entries[&off];
        let mut page = std::mem::take(&mut self.page);
        let ok = self.decompress(entry, &mut page);
        self.page = page;
        if !ok? {
            self.debugfs.reject_reclaim_fail += 1;
            self.lru.push_back((off, entry.generation));
            return Ok(false);
        }
        self.entries.remove(&off);
        self.free_entry(entry)?;
        self.on_device.insert(off);
        self.debugfs.written_back_pages += 1;
        self.vmstat.zswpwb += 1;
        self.vmstat.pswpout += 1;
        Ok(true)
    }

    /// `shrink_worker()`: writes back until the pool is at the accept
    /// threshold, or `MAX_RECLAIM_RETRIES` walks wrote nothing, or the LRU
    /// is empty. Nothing where writeback is off.
    fn shrink_worker(&mut self) -> Result<(), ZswapError> {
        if !self.config.writeback {
            return Ok(());
        }
        let thr = self.config.accept_thr_pages();
        let mut failures = 0;
        loop {
            let (walked, written) = self.shrink_memcg()?;
            if walked == 0 {
                break;
            }
            if written == 0 {
                failures += 1;
                if failures == MAX_RECLAIM_RETRIES {
                    break;
                }
            }
            if self.total_pages() <= thr {
                break;
            }
        }
        Ok(())
    }

    /// Decompresses `entry` into `out` (a page); false and
    /// `decompress_fail` counted when it does not give a page.
    fn decompress(&mut self, entry: Entry, out: &mut [u8]) -> Result<bool, ZswapError> {
        let len = entry.length as usize;
        let obj = self
            .pool
            .read(entry.handle, len)
            .map_err(ZswapError::Pool)?;
        let ok = if len == PAGE_SIZE {
            out.copy_from_slice(&obj);
            true
        } else {
            matches!(self.ctx.decompress(&obj, out), Ok(n) if n == PAGE_SIZE)
        };
        drop(obj);
        if !ok {
            self.debugfs.decompress_fail += 1;
        }
        Ok(ok)
    }

    /// The swap path's read of the page at `offset` into `out` (a page):
    /// the zero map, then zswap (`zswap_load`: the entry is freed), else
    /// the swap device.
    pub fn load(&mut self, offset: u64, out: &mut [u8]) -> Result<Loaded, ZswapError> {
        if out.len() != PAGE_SIZE {
            return Err(ZswapError::PageSize(out.len()));
        }
        if self.zero.contains(&offset) {
            out.fill(0);
            self.vmstat.swpin_zero += 1;
            return Ok(Loaded::ZeroFilled);
        }
        if let Some(&entry) = self.entries.get(&offset) {
            if !self.decompress(entry, out)? {
                return Err(ZswapError::Decompress(offset));
            }
            self.entries.remove(&offset);
            self.free_entry(entry)?;
            self.vmstat.zswpin += 1;
            return Ok(Loaded::Zswap);
        }
        if self.on_device.contains(&offset) {
            return Ok(Loaded::SwapDevice);
        }
        Ok(Loaded::Nothing)
    }

    /// `zswap_invalidate()` as the swap slot at `offset` is freed: its
    /// entry, zero mark and swap-device copy are gone.
    pub fn invalidate(&mut self, offset: u64) -> Result<(), ZswapError> {
        self.zero.remove(&offset);
        self.on_device.remove(&offset);
        self.erase(offset)
    }

    /// Compacts the pool (`zs_compact`, which the kernel's zsmalloc
    /// shrinker runs under memory pressure); returns the pages freed.
    pub fn compact(&mut self) -> u64 {
        self.pool.compact().pages_freed
    }

    /// The metadata's memory now.
    pub fn metadata(&self) -> Metadata {
        let entries = self.entries.len() as u64;
        let xa_nodes = xarray::nodes(self.entries.keys().copied());
        let [entry_cache, handle_cache, node_cache] = self.caches;
        let zswap_entry_bytes = entry_cache.bytes_for(entries);
        let zs_handle_bytes = handle_cache.bytes_for(entries);
        let xa_node_bytes = node_cache.bytes_for(xa_nodes);
        Metadata {
            entries,
            zswap_entry_bytes,
            zs_handle_bytes,
            xa_nodes,
            xa_node_bytes,
            total_bytes: zswap_entry_bytes + zs_handle_bytes + xa_node_bytes,
            caches: self.caches,
        }
    }

    /// Every figure now.
    pub fn stats(&self) -> ZswapStats {
        let mut debugfs = self.debugfs;
        debugfs.pool_total_size = self.total_pages() * PAGE_SIZE as u64;
        debugfs.stored_pages = self.entries.len() as u64;
        debugfs.stored_incompressible_pages = self.incompressible;
        ZswapStats {
            debugfs,
            vmstat: self.vmstat,
            compressed_bytes: self.compressed_bytes,
            swap_device_pages: self.on_device.len() as u64,
            metadata: self.metadata(),
            limits: Limits {
                totalram_pages: self.config.totalram_pages,
                max_pages: self.config.max_pages(),
                accept_thr_pages: self.config.accept_thr_pages(),
                reached_full: self.reached_full,
            },
        }
    }
}
