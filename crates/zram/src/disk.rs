//! The core store: the slot table, the allocator, the compression streams
//! (the primary's and the secondaries'), the counters, the backing store's
//! blocks and the memory limit; and the paths every page takes: write, read
//! (a written-back page included), discard and reset.
//!
//! Owns the slots and everything a slot's contents can name (an object, a
//! page beside the allocator, a block, a compressor priority). May not touch
//! idle marking, writeback, recompression or the policy: they come to it
//! through the narrow crate-internal API below (lock a slot, scan slots
//! with a filter, free a slot's contents, account), and the write path asks
//! the memory-aware rule above it only through [`LimitRule`].
//!
//! A store's *page* (`page_size`, the disk's block) is what is compressed
//! whole: the allocator's page by default, or a larger compression unit
//! (`Store::with_block_size`, the `--unit` option) whose objects span
//! several of the allocator's pages. Memory (`mem_used_total`,
//! `mem_limit`) is always counted in the allocator's pages.
//!
//! # Paths (as the kernel's zram_drv.c)
//! - **write**: a page that is one repeated 8-byte word is kept in its slot
//!   (SAME, no allocator memory). Otherwise it is compressed with this
//!   thread's stream; if the result reaches `huge_class_size` the raw page is
//!   stored instead (HUGE). The object is allocated, the memory limit checked
//!   (over it: the object is freed and the write fails, the old page stays;
//!   within 1/16 of it, the pages the allocator keeps resident for reuse,
//!   which `mem_used_total` does not count, go back to the OS first), and
//!   written; only then is the slot locked and its old contents swapped
//!   out, to be freed after the unlock. Past the memory-aware rule's
//!   ceiling, the object is freed, the stream dropped, and the rule
//!   ([`LimitRule::reclaim`]) runs with no lock of this module held before
//!   the write is tried once more.
//! - **read**: under the slot lock: empty slots read as zeros, SAME slots as
//!   their word, HUGE slots are copied, others decompressed straight from the
//!   allocator's memory, written-back pages read from the backing store
//!   (a `pread`, no lock) and, packed, decompressed with the compressor
//!   that made them.
//! - **huge pages** go to the allocator as page-sized objects, or, for an
//!   allocator whose largest object is smaller than a page (zbud, zblock),
//!   to whole pages kept beside it (`huge`), counted in `mem_used_total`.
//! - **discard / write-zeroes**: each page's slot is emptied and
//!   `notify_free` counted; replacing or discarding a written-back page
//!   frees its block.
//!
//! # Locks, in the order they are taken
//! 1. one slot lock (never two at once);
//! 2. a compression stream;
//! 3. the allocator's own locks (behind [`ZPool`]).
//!
//! There is no device-wide lock: `reset` empties the slots one by one under
//! their own locks, and the counters are per-thread shards, so threads on
//! different pages share no written cache line in the store.
//!
//! The write path takes a stream and the allocator before the slot lock,
//! never while holding it; the read path takes them inside it (a stream
//! only for a compressor whose decoder keeps state: zstd, deflate). Neither holds
//! a stream while waiting for a slot, so the order has no cycle. The
//! `RwLock`s of the backing store and of the secondaries are leaves, held
//! only to clone an `Arc`.

use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Serialize;
use zcomp::Compressor;
use zpool::{ZCompacted, ZPool};

use crate::backing::Blocks;
use crate::compactor::{AutoCompactPolicy, Compactor, Watched};
use crate::error::StoreError;
use crate::huge::HugePages;
use crate::slot::{self, HugeHome, Layout, Slot, SlotContent, SlotGuard};
use crate::stats::{AutoCompactStats, Counter, Counters, IoStat, MmStat, CUMULATIVE};
use crate::streams::Streams;

/// Secondary compressors: priorities 1 to 3 (the kernel's `ZRAM_MAX_COMPS`
/// is 4 with the primary).
pub const MAX_SECONDARIES: usize = 3;

/// What the write path asks of the memory-aware rule, which lives above
/// this module (`policy`) and implements this.
pub(crate) trait LimitRule {
    /// The pages the rule keeps memory within under a limit of
    /// `limit_pages` (not 0); `None` when the rule is off.
    fn ceiling_pages(&self, limit_pages: u64) -> Option<u64>;
    /// Frees memory before a write that would pass the ceiling (writes
    /// pages back). Called with no slot lock and no stream held.
    fn reclaim(&self, limit_pages: u64);
    /// A write took `used` pages of `limit_pages` (0: no limit).
    fn note_usage(&self, used: u64, limit_pages: u64);
    /// A write failed the limit although the rule is on.
    fn note_limit_failure(&self);
}

/// What one slot holds, for inspection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SlotState {
    /// Never written, or discarded: reads as zeros.
    Empty,
    /// One repeated 8-byte word (native byte order).
    Same(u64),
    /// A compressed object of this many bytes.
    Compressed(usize),
    /// The page stored uncompressed.
    Huge,
    /// The page is on the backing store, in this block.
    WrittenBack(u64),
}

/// A slot's state and flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SlotInfo {
    /// What it holds.
    pub state: SlotState,
    /// Not accessed since the last idle marking.
    pub idle: bool,
    /// Seconds since the store was made, at the last access.
    pub ac_time: u32,
    /// Stored uncompressed (kept on a written-back page, as the kernel's
    /// `ZRAM_HUGE`).
    pub huge: bool,
    /// Recompression could not make it smaller with the highest priority.
    pub incompressible: bool,
    /// The priority of the compressor that compressed it (0: the primary).
    pub priority: usize,
    /// For a page written back compressed (`compressed_writeback`): the
    /// byte offset of its object in its block and the object's length (an
    /// object reaching past its block runs on into the next).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packed: Option<(u32, usize)>,
}

/// The core of a store (see the module's comment); the public
/// `Store` is built on it.
pub(crate) struct Disk {
    pool: Arc<dyn ZPool>,
    streams: Streams,
    /// Streams of priorities 1..=3 (index 0 is priority 1).
    secondaries: RwLock<[Option<Arc<Streams>>; MAX_SECONDARIES]>,
    slots: Box<[Slot]>,
    layout: Layout,
    /// Bytes per disk page: the unit compressed whole (the allocator's page
    /// unless the store was made with a larger block).
    page_size: usize,
    /// Bytes per allocator page: the unit memory is counted in.
    mem_page: usize,
    huge_class_size: usize,
    /// Raw pages kept beside an allocator that cannot hold a whole page.
    huge: Option<HugePages>,
    limit_pages: Arc<AtomicU64>,
    counters: Arc<Counters>,
    /// The backing store and its block bitmap (written-back slots name its
    /// blocks).
    backing: RwLock<Option<Arc<Blocks>>>,
    /// The kernel's `init_done` (disksize set). A zmem store always has its
    /// size, so here a store is initialised from its first page write until
    /// `reset`: before that, `backing_dev`, `recomp_algorithm` and the like
    /// may be set (afterwards they fail with `EBUSY`).
    initialised: AtomicBool,
    /// When the store was made, on [`coarse_clock_ns`]'s clock.
    born: u64,
    /// The allocator's (pages_compacted, objs_moved) at the last reset: the
    /// kernel makes a new pool on reset, so its counters start again at 0.
    pool_base: [AtomicU64; 2],
    /// The background compactor (off unless `Store::set_auto_compact`
    /// turned it on).
    compactor: Compactor,
}

impl std::fmt::Debug for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("allocator", &self.pool.name())
            .field("compressor", &self.streams.compressor())
            .field("pages", &self.slots.len())
            .field("page_size", &self.page_size)
            .field("mem_page", &self.mem_page)
            .finish()
    }
}

/// The fill word if `page` is one 8-byte word repeated: the kernel's
/// `page_same_filled`, which checks the last word against the first before
/// the rest.
pub fn same_filled(page: &[u8]) -> Option<u64> {
    let word = |i: usize| u64::from_ne_bytes(page[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
    let n = page.len() / 8;
    if n == 0 || page.len() % 8 != 0 {
        return None;
    }
    let first = word(0);
    if word(n - 1) != first {
        return None;
    }
    page.chunks_exact(8)
        .all(|w| u64::from_ne_bytes(w.try_into().unwrap_or([0; 8])) == first)
        .then_some(first)
}

fn fill_word(buf: &mut [u8], word: u64) {
    let bytes = word.to_ne_bytes();
    for chunk in buf.chunks_exact_mut(8) {
        chunk.copy_from_slice(&bytes);
    }
}

fn zeroed_slots(n: usize) -> Result<Box<[Slot]>, StoreError> {
    if n == 0 {
        return Ok(Box::new([]));
    }
    let layout = std::alloc::Layout::array::<Slot>(n)
        .map_err(|_| StoreError::Config(format!("{n} pages is too many")))?;
    // SAFETY: `layout` has a nonzero size (n > 0 and a Slot is 16 bytes).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Slot>();
    if ptr.is_null() {
        return Err(StoreError::Config(format!(
            "cannot allocate the slot table for {n} pages"
        )));
    }
    // SAFETY: `ptr` is a fresh allocation of `n` Slots made with the global
    // allocator and this exact layout, so a Box may own it; a Slot is only
    // atomics, for which all-zero bytes are a valid (empty, unlocked) value.
    // A large table comes from calloc's mmap, so untouched slots cost no RSS.
    Ok(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, n)) })
}

impl Disk {
    /// A store of `disk_pages` pages of the allocator's page size.
    pub(crate) fn new(
        pool: Arc<dyn ZPool>,
        compressor: Compressor,
        disk_pages: u64,
    ) -> Result<Disk, StoreError> {
        let page_size = pool.page_size();
        Disk::with_block_size(pool, compressor, disk_pages, page_size)
    }

    /// A store of `disk_pages` blocks of `block_size` bytes, each compressed
    /// whole (the compression unit): a power of two from the allocator's
    /// page size to 64 KiB. A block that compresses to `huge_class_size` or
    /// more is stored raw.
    pub(crate) fn with_block_size(
        pool: Arc<dyn ZPool>,
        compressor: Compressor,
        disk_pages: u64,
        block_size: usize,
    ) -> Result<Disk, StoreError> {
        let mem_page = pool.page_size();
        let page_size = block_size;
        if !page_size.is_power_of_two() || !(mem_page..=65536).contains(&page_size) {
            return Err(StoreError::Config(format!(
                "block size {page_size} is not a power of two from the page size ({mem_page}) to 65536"
            )));
        }
        // zram keeps incompressible pages raw, as page-sized objects; for an
        // allocator that cannot hold one, they are kept beside it.
        let (huge, huge_home) = if pool.max_object_size() < page_size {
            (Some(HugePages::new(page_size)?), HugeHome::BesideAllocator)
        } else {
            (None, HugeHome::Allocator)
        };
        let huge_class_size = pool
            .huge_class_size()
            .min(page_size)
            .min(pool.max_object_size() + 1);
        let n = usize::try_from(disk_pages)
            .map_err(|_| StoreError::Config(format!("{disk_pages} pages is too many")))?;
        Ok(Disk {
            huge_class_size,
            secondaries: RwLock::default(),
            backing: RwLock::new(None),
            initialised: AtomicBool::new(false),
            huge,
            streams: Streams::new(compressor),
            slots: zeroed_slots(n)?,
            layout: Layout::new(page_size, huge_home),
            page_size,
            mem_page,
            limit_pages: Arc::new(AtomicU64::new(0)),
            counters: Arc::new(Counters::default()),
            born: coarse_clock_ns(),
            pool_base: [AtomicU64::new(0), AtomicU64::new(0)],
            pool,
            compactor: Compactor::new(),
        })
    }

    /// Bytes per page.
    pub(crate) fn page_size(&self) -> usize {
        self.page_size
    }

    /// Pages on the disk.
    pub(crate) fn disk_pages(&self) -> u64 {
        self.slots.len() as u64
    }

    /// Bytes on the disk.
    pub(crate) fn disk_size(&self) -> u64 {
        self.disk_pages() * self.page_size as u64
    }

    /// The allocator.
    pub(crate) fn allocator(&self) -> &dyn ZPool {
        &*self.pool
    }

    /// The compressor.
    pub(crate) fn compressor(&self) -> &Compressor {
        self.streams.compressor()
    }

    /// Compressed pages of at least this many bytes are stored raw.
    pub(crate) fn huge_class_size(&self) -> usize {
        self.huge_class_size
    }

    /// Whole seconds since the store was made: a slot's access time. Every
    /// read and write takes it, so it comes from the coarse clock (see
    /// [`coarse_clock_ns`]).
    pub(crate) fn now(&self) -> u32 {
        let secs = coarse_clock_ns().saturating_sub(self.born) / 1_000_000_000;
        u32::try_from(secs).unwrap_or(u32::MAX)
    }

    pub(crate) fn check_range(&self, first: u64, count: u64) -> Result<(), StoreError> {
        let pages = self.disk_pages();
        match first.checked_add(count) {
            Some(end) if end <= pages => Ok(()),
            _ => Err(StoreError::OutOfRange {
                index: first.max(pages),
                pages,
            }),
        }
    }

    fn check_page(&self, index: u64, len: usize) -> Result<(), StoreError> {
        self.check_range(index, 1)?;
        if len != self.page_size {
            return Err(StoreError::BadLength {
                len,
                page_size: self.page_size,
            });
        }
        Ok(())
    }

    /// Stores one page at `index`, asking `rule` (the memory-aware rule
    /// above) when memory nears the limit.
    pub(crate) fn write_page(
        &self,
        index: u64,
        page: &[u8],
        rule: &impl LimitRule,
    ) -> Result<(), StoreError> {
        self.check_page(index, page.len())?;
        self.mark_initialised();
        self.counters.add(Counter::NumWrites, 1);
        let result = self.store_once(index, page, rule, true);
        if result.is_err() {
            self.counters.add(Counter::FailedWrites, 1);
        }
        result
    }

    /// Stores one page; `may_reclaim`: a write that would pass the rule's
    /// ceiling may first have the rule reclaim (write pages back), with no
    /// lock held, then try once more.
    fn store_once(
        &self,
        index: u64,
        page: &[u8],
        rule: &impl LimitRule,
        may_reclaim: bool,
    ) -> Result<(), StoreError> {
        if let Some(word) = same_filled(page) {
            self.counters.add(Counter::SamePages, 1);
            self.counters.add(Counter::PagesStored, 1);
            self.replace(index, SlotContent::SameFilled(word));
            return Ok(());
        }
        let mut stream = self.streams.get()?;
        let compressed = stream.context().compress_buffered(page)?;
        let (content, bytes) = if compressed.len() < self.huge_class_size {
            let handle = self.pool.malloc(compressed.len())?;
            let size = compressed.len();
            (SlotContent::Compressed { handle, size }, compressed)
        } else if let Some(huge) = &self.huge {
            (SlotContent::RawPage(huge.store(page)?), page)
        } else {
            (SlotContent::RawObject(self.pool.malloc(page.len())?), page)
        };
        let total = self.used_pages();
        let limit = self.limit_pages.load(Ordering::Relaxed);
        let ceiling = if limit != 0 {
            rule.ceiling_pages(limit)
        } else {
            None
        };
        if may_reclaim && ceiling.is_some_and(|c| total > c) {
            // The memory-aware rule keeps memory within its ceiling
            // (mem_limit minus the store's metadata): pages are written
            // back first, with no lock held, and the write tried once more;
            // that try fails only past mem_limit itself, as in the kernel.
            self.free_content(content);
            drop(stream);
            rule.reclaim(limit);
            return self.store_once(index, page, rule, false);
        }
        if limit != 0 && total >= limit - limit / 16 {
            // Memory is tight: pages the allocator kept resident for reuse
            // (not counted in mem_used) go back to the OS.
            self.pool.release_retained_pages();
        }
        if limit != 0 && total > limit {
            self.free_content(content);
            if ceiling.is_some() {
                rule.note_limit_failure();
            }
            self.compactor.note_limit_hit();
            return Err(StoreError::MemLimit {
                used_pages: total,
                limit_pages: limit,
            });
        }
        self.counters.update_max(total);
        rule.note_usage(total, limit);
        if let SlotContent::Compressed { handle, .. } | SlotContent::RawObject(handle) = content {
            if let Err(e) = self.pool.write(handle, bytes) {
                self.free_content(content);
                return Err(e.into());
            }
        }
        let size = bytes.len();
        drop(stream);
        self.counters.add(Counter::ComprDataSize, size as u64);
        self.counters.add(Counter::PagesStored, 1);
        if content.is_raw() {
            self.counters.add(Counter::HugePages, 1);
            self.counters.add(Counter::HugePagesSince, 1);
        }
        self.replace(index, content);
        Ok(())
    }

    /// Puts `new` in the slot and frees what it held.
    fn replace(&self, index: u64, new: SlotContent) {
        let old = {
            let mut guard = self.slots[index as usize].lock(self.layout);
            let old = guard.content();
            guard.set(new);
            guard.touch(self.now());
            old
        };
        self.release(old);
    }

    /// Frees a slot's former contents and takes them out of the counters.
    pub(crate) fn release(&self, old: SlotContent) {
        let mut blocks = Vec::new();
        self.release_into(old, &mut blocks);
        // Only a written-back page frees blocks: every other write skips the
        // backing store's lock, whose word every writing thread would
        // otherwise take and release in turn.
        if blocks.is_empty() {
            return;
        }
        if let Some(backing) = self.backing() {
            for b in blocks {
                backing.release(b);
            }
        }
    }

    /// `Store::release`, except that a backing-store block is added to
    /// `blocks` for the caller to free.
    fn release_into(&self, old: SlotContent, blocks: &mut Vec<u64>) {
        match old {
            SlotContent::Empty => {}
            SlotContent::WrittenBack {
                block,
                size,
                packed,
                ..
            } => {
                // Its length and huge_pages share left the counters when
                // it was written back.
                blocks.push(block);
                // A packed object may run on into the next block.
                if packed.is_some_and(|at| at as usize + size > self.page_size) {
                    blocks.push(block + 1);
                }
                self.counters.sub(Counter::PagesStored, 1);
            }
            SlotContent::SameFilled(_) => {
                self.counters.sub(Counter::SamePages, 1);
                self.counters.sub(Counter::PagesStored, 1);
            }
            SlotContent::Compressed { .. }
            | SlotContent::RawObject(_)
            | SlotContent::RawPage(_) => {
                self.free_content(old);
                let size = old.stored_bytes(self.page_size);
                self.counters.sub(Counter::ComprDataSize, size as u64);
                self.counters.sub(Counter::PagesStored, 1);
                if old.is_raw() {
                    self.counters.sub(Counter::HugePages, 1);
                }
            }
        }
    }

    /// Frees the allocator object, or the page kept beside it, that holds a
    /// slot's page (nothing for an empty or same-filled slot).
    pub(crate) fn free_content(&self, content: SlotContent) {
        match content {
            SlotContent::Compressed { handle, .. } | SlotContent::RawObject(handle) => {
                // The handle came from this allocator and was in one slot
                // only, so the free cannot fail; if it ever did, the object
                // would only leak.
                let freed = self.pool.free(handle);
                debug_assert!(freed.is_ok(), "freeing a stored object: {freed:?}");
                self.compactor.note_free();
            }
            SlotContent::RawPage(id) => {
                if let Some(huge) = &self.huge {
                    huge.free(id);
                }
            }
            SlotContent::Empty | SlotContent::SameFilled(_) | SlotContent::WrittenBack { .. } => {}
        }
    }

    /// Allocator pages held: the allocator's, plus the blocks kept beside it
    /// (each `page_size / mem_page` of them).
    pub(crate) fn used_pages(&self) -> u64 {
        let per_block = self.page_size / self.mem_page;
        (self.pool.total_pages() + self.huge.as_ref().map_or(0, HugePages::pages) * per_block)
            as u64
    }

    /// Bytes per allocator page, the unit `mem_used_total` and `mem_limit`
    /// are counted in (equal to `Store::page_size` unless the store was
    /// made with a larger block).
    pub(crate) fn mem_page_size(&self) -> usize {
        self.mem_page
    }

    /// Reads the page at `index` into `buf` (one page long).
    pub(crate) fn read_page(&self, index: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        self.check_page(index, buf.len())?;
        self.counters.add(Counter::NumReads, 1);
        let result = self.load(index, buf);
        if result.is_err() {
            self.counters.add(Counter::FailedReads, 1);
        }
        result
    }

    fn load(&self, index: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        let mut guard = self.slots[index as usize].lock(self.layout);
        self.read_locked(index, &guard, buf)?;
        guard.touch(self.now());
        Ok(())
    }

    /// Reads the page of the locked slot `index` into `buf`: from memory,
    /// decompressed with the compressor that compressed it, or from the
    /// backing store.
    pub(crate) fn read_locked(
        &self,
        index: u64,
        guard: &SlotGuard<'_>,
        buf: &mut [u8],
    ) -> Result<(), StoreError> {
        match guard.content() {
            SlotContent::Empty => buf.fill(0),
            SlotContent::SameFilled(word) => fill_word(buf, word),
            SlotContent::RawPage(id) => {
                // Slots decode to pages beside the allocator only in a store
                // that keeps them.
                let huge = self.huge.as_ref().ok_or(StoreError::Alloc(
                    zpool::ZPoolError::InvalidHandle("this store keeps no huge pages"),
                ))?;
                huge.load(id, buf)?;
            }
            SlotContent::RawObject(handle) => {
                self.pool
                    .read_with(handle, self.page_size, &mut |obj| buf.copy_from_slice(obj))?;
            }
            SlotContent::Compressed { handle, size } => {
                let mut decoded = Ok(());
                self.pool.read_with(handle, size, &mut |obj| {
                    decoded = self.decompress(index, guard.priority(), obj, buf);
                })?;
                decoded?;
            }
            SlotContent::WrittenBack {
                block,
                size,
                packed,
                ..
            } => {
                let object = packed.map(|at| (at as usize, size));
                self.read_back(index, block, object, guard.priority(), buf)?
            }
        }
        Ok(())
    }

    /// Decompresses the object `src` of page `index` into `buf` with the
    /// compressor of `priority` (0: the primary).
    pub(crate) fn decompress(
        &self,
        index: u64,
        priority: usize,
        src: &[u8],
        buf: &mut [u8],
    ) -> Result<(), StoreError> {
        let secondary;
        let streams = match priority {
            // A decoder that keeps no state needs no stream (lzo, lz4: the
            // store's default compressors), so a read takes no lock for it.
            0 => match self.streams.compressor().decompress_stateless(src, buf) {
                Some(result) => {
                    return result.map(|_| ()).map_err(|e| StoreError::Corrupt {
                        index,
                        reason: e.to_string(),
                    })
                }
                None => &self.streams,
            },
            p => {
                secondary = self.secondary(p).ok_or(StoreError::Corrupt {
                    index,
                    reason: format!("no compressor of priority {p}"),
                })?;
                &*secondary
            }
        };
        let mut stream = streams.get()?;
        stream
            .context()
            .decompress(src, buf)
            .map(|_| ())
            .map_err(|e| StoreError::Corrupt {
                index,
                reason: e.to_string(),
            })
    }

    /// Reads the written-back page at `block` into `buf` (the slot lock of
    /// `index` held): the block itself, or for a packed page the `(offset,
    /// length)` object in it, decompressed with the compressor of
    /// `priority`.
    pub(crate) fn read_back(
        &self,
        index: u64,
        block: u64,
        object: Option<(usize, usize)>,
        priority: usize,
        buf: &mut [u8],
    ) -> Result<(), StoreError> {
        let backing = self.backing().ok_or_else(|| {
            StoreError::os(
                libc::EIO,
                format!("page {index} is written back but no backing store is set"),
            )
        })?;
        self.counters.add(Counter::BdReads, 1);
        let io_error = |e: io::Error| {
            StoreError::os(
                e.raw_os_error().unwrap_or(libc::EIO),
                format!(
                    "page {index}: reading block {block} of {}: {e}",
                    backing.dev().describe()
                ),
            )
        };
        let Some((offset, len)) = object else {
            return backing.dev().read_block(block, buf).map_err(io_error);
        };
        // The object's block, and the next one if it runs on into it.
        let blocks = if offset + len > self.page_size { 2 } else { 1 };
        let mut whole = vec![0u8; blocks * self.page_size];
        for (k, part) in whole.chunks_exact_mut(self.page_size).enumerate() {
            if k > 0 {
                self.counters.add(Counter::BdReads, 1);
            }
            backing
                .dev()
                .read_block(block + k as u64, part)
                .map_err(io_error)?;
        }
        let src = whole.get(offset..offset + len).ok_or(StoreError::Corrupt {
            index,
            reason: format!("object at {offset}+{len} is past its blocks"),
        })?;
        self.decompress(index, priority, src, buf)
    }

    // The narrow API the modules above use.

    /// Marks the store initialised (a load first: the write path calls this
    /// for every page, and must not write a shared line each time).
    fn mark_initialised(&self) {
        if !self.initialised.load(Ordering::Relaxed) {
            self.initialised.store(true, Ordering::Relaxed);
        }
    }

    /// `EBUSY` once a page has been written since the store was made or
    /// reset: for settings the kernel takes only before `disksize`.
    pub(crate) fn refuse_if_initialised(&self, what: &str) -> Result<(), StoreError> {
        if self.initialised.load(Ordering::Relaxed) {
            return Err(StoreError::os(
                libc::EBUSY,
                format!("{what} can only be set before the store holds data (reset it first)"),
            ));
        }
        Ok(())
    }

    /// The backing store, if one is set.
    pub(crate) fn backing(&self) -> Option<Arc<Blocks>> {
        self.backing
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sets (or replaces) the backing store.
    pub(crate) fn set_backing(&self, blocks: Option<Arc<Blocks>>) {
        *self.backing.write().unwrap_or_else(|p| p.into_inner()) = blocks;
    }

    /// The streams of `priority` (0 is the primary: `None`).
    pub(crate) fn secondary(&self, priority: usize) -> Option<Arc<Streams>> {
        let table = self.secondaries.read().unwrap_or_else(|p| p.into_inner());
        table.get(priority.checked_sub(1)?)?.clone()
    }

    /// Sets the compressor of `priority` (1..=3).
    pub(crate) fn set_secondary(&self, priority: usize, streams: Streams) {
        let mut table = self.secondaries.write().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = table.get_mut(priority.wrapping_sub(1)) {
            *entry = Some(Arc::new(streams));
        }
    }

    /// The highest priority with a compressor (0: only the primary).
    pub(crate) fn highest_priority(&self) -> usize {
        let table = self.secondaries.read().unwrap_or_else(|p| p.into_inner());
        table.iter().rposition(Option::is_some).map_or(0, |i| i + 1)
    }

    /// The allocator, for objects the modules above make or read.
    pub(crate) fn pool(&self) -> &dyn ZPool {
        &*self.pool
    }

    /// The counters, for the modules above to account what they move.
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Locks the slot of page `index` (in range).
    pub(crate) fn lock(&self, index: u64) -> SlotGuard<'_> {
        self.slots[index as usize].lock(self.layout)
    }

    /// Visits the slots of `range` in order, one slot lock at a time:
    /// `pick` runs under the slot's lock and says what to keep of it,
    /// `take` gets that after the lock is dropped.
    pub(crate) fn scan<T>(
        &self,
        range: Range<u64>,
        mut pick: impl FnMut(u64, &mut SlotGuard<'_>) -> Option<T>,
        mut take: impl FnMut(T),
    ) {
        for index in range {
            let kept = {
                let mut guard = self.lock(index);
                pick(index, &mut guard)
            };
            if let Some(kept) = kept {
                take(kept);
            }
        }
    }

    /// Clears the slot's `PP_SLOT` mark (a post-processing run is done with
    /// it).
    pub(crate) fn clear_pp(&self, index: u64) {
        self.lock(index).update_flags(0, slot::PP_SLOT);
    }

    /// Bytes of the store's own metadata outside `mem_limit`: the slot
    /// table (16 bytes a page of the disk, the kernel's
    /// `zram_table_entry`) and the backing store's block bitmap (a bit a
    /// block).
    pub(crate) fn metadata_bytes(&self) -> u64 {
        let table = std::mem::size_of_val(&*self.slots) as u64;
        let bitmap = self
            .backing()
            .map_or(0, |b| b.dev().blocks().div_ceil(64) * 8);
        table + bitmap
    }

    /// Frees `count` pages from `first` (a discard or trim): they read as
    /// zeros afterwards and hold no memory.
    pub(crate) fn discard(&self, first: u64, count: u64) -> Result<(), StoreError> {
        self.check_range(first, count)?;
        for index in first..first + count {
            self.replace(index, SlotContent::Empty);
            self.counters.add(Counter::NotifyFree, 1);
        }
        Ok(())
    }

    /// Zeroes `count` pages from `first`. As in zram this frees them: an
    /// empty slot reads as zeros.
    pub(crate) fn write_zeroes(&self, first: u64, count: u64) -> Result<(), StoreError> {
        self.discard(first, count)
    }

    /// Frees every page and zeroes the counters and the memory limit (the
    /// kernel's `reset`). The kernel refuses a reset while the device is
    /// open; here calls may run alongside it, and a write that lands on a
    /// slot after `reset` has passed it stays (as a write just after the
    /// reset would).
    pub(crate) fn reset(&self) {
        // Blocks on the backing store are freed together at the end, one
        // hole punched per run of them rather than one per block.
        let mut blocks = Vec::new();
        for slot in self.slots.iter() {
            let old = {
                let mut guard = slot.lock(self.layout);
                let old = guard.content();
                guard.set(SlotContent::Empty);
                old
            };
            self.release_into(old, &mut blocks);
        }
        if let Some(backing) = self.backing() {
            backing.release_many(&mut blocks);
        }
        // The gauges went to 0 as the slots were freed (and with them the
        // backing store's blocks; the backing store itself stays, as the
        // compressor does).
        self.initialised.store(false, Ordering::Relaxed);
        for c in CUMULATIVE {
            self.counters.zero(c);
        }
        self.counters.set_max(self.used_pages());
        self.limit_pages.store(0, Ordering::Relaxed);
        let pool = self.pool.stats();
        self.pool_base[0].store(pool.pages_compacted, Ordering::Relaxed);
        self.pool_base[1].store(pool.objs_moved, Ordering::Relaxed);
    }

    /// Compacts the allocator (`echo 1 > compact`).
    pub(crate) fn compact(&self) -> ZCompacted {
        self.pool.compact()
    }

    /// Sets the background compactor's policy (see the `compactor` module):
    /// [`AutoCompactMode::On`](crate::AutoCompactMode::On) starts its
    /// thread, `Off` stops it and waits for it. A store starts with it off.
    pub(crate) fn set_auto_compact(&self, policy: AutoCompactPolicy) -> Result<(), StoreError> {
        self.compactor
            .set_policy(policy, || Watched {
                pool: Arc::clone(&self.pool),
                counters: Arc::clone(&self.counters),
                limit_pages: Arc::clone(&self.limit_pages),
            })
            .map_err(StoreError::Config)
    }

    /// The background compactor's policy.
    pub(crate) fn auto_compact(&self) -> AutoCompactPolicy {
        self.compactor.policy()
    }

    /// What the background compactor has done since the store was made.
    pub(crate) fn auto_compact_stats(&self) -> AutoCompactStats {
        self.compactor.stats()
    }

    /// Waits until the background compactor has dealt with every free so
    /// far (true), or `timeout` passed (false): for a caller that wants
    /// figures after the compactor, such as the replay engine between stages.
    /// True at once when it is off.
    pub(crate) fn wait_auto_compact_idle(&self, timeout: Duration) -> bool {
        self.compactor.wait_idle(timeout)
    }

    /// Whether the background compactor's thread is running.
    pub(crate) fn auto_compact_running(&self) -> bool {
        self.compactor.running()
    }

    /// Sets the memory limit in bytes, rounded up to whole pages; 0 removes
    /// it. Pages already stored stay; later writes that would pass it fail.
    pub(crate) fn set_mem_limit(&self, bytes: u64) {
        let pages = bytes.div_ceil(self.mem_page as u64);
        self.limit_pages.store(pages, Ordering::Relaxed);
    }

    /// The memory limit in bytes (0: none).
    pub(crate) fn mem_limit(&self) -> u64 {
        self.limit_pages.load(Ordering::Relaxed) * self.mem_page as u64
    }

    /// Resets `mem_used_max` to the memory used now (`echo 0 >
    /// mem_used_max`).
    pub(crate) fn reset_mem_used_max(&self) {
        let now = self.used_pages();
        self.counters.set_max(now);
    }

    /// What the slot at `index` holds.
    pub(crate) fn slot_info(&self, index: u64) -> Result<SlotInfo, StoreError> {
        self.check_range(index, 1)?;
        let slot = &self.slots[index as usize];
        let guard = slot.lock(self.layout);
        let state = match guard.content() {
            SlotContent::Empty => SlotState::Empty,
            SlotContent::SameFilled(word) => SlotState::Same(word),
            SlotContent::Compressed { size, .. } => SlotState::Compressed(size),
            SlotContent::RawObject(_) | SlotContent::RawPage(_) => SlotState::Huge,
            SlotContent::WrittenBack { block, .. } => SlotState::WrittenBack(block),
        };
        Ok(SlotInfo {
            state,
            idle: guard.is_idle(),
            ac_time: slot.ac_time(),
            huge: guard.has(slot::HUGE),
            incompressible: guard.has(slot::INCOMPRESSIBLE),
            priority: guard.priority(),
            packed: match guard.content() {
                SlotContent::WrittenBack {
                    size,
                    packed: Some(at),
                    ..
                } => Some((at, size)),
                _ => None,
            },
        })
    }

    /// `mm_stat` now.
    pub(crate) fn mm_stat(&self) -> MmStat {
        let page = self.page_size as u64;
        let mem_page = self.mem_page as u64;
        let pool = self.pool.stats();
        let c = self.counters.snapshot();
        let used = self.used_pages();
        MmStat {
            orig_data_size: c.get(Counter::PagesStored) * page,
            compr_data_size: c.get(Counter::ComprDataSize),
            mem_used_total: used * mem_page,
            mem_limit: self.mem_limit(),
            // The maximum is raised just after the pages are taken: never
            // show it below the total read after it.
            mem_used_max: self.counters.max_used_pages().max(used) * mem_page,
            same_pages: c.get(Counter::SamePages),
            pages_compacted: pool
                .pages_compacted
                .saturating_sub(self.pool_base[0].load(Ordering::Relaxed)),
            huge_pages: c.get(Counter::HugePages),
            huge_pages_since: c.get(Counter::HugePagesSince),
            objs_moved: pool
                .objs_moved
                .saturating_sub(self.pool_base[1].load(Ordering::Relaxed)),
        }
    }

    /// `io_stat` now.
    pub(crate) fn io_stat(&self) -> IoStat {
        IoStat {
            failed_reads: self.counters.get(Counter::FailedReads),
            failed_writes: self.counters.get(Counter::FailedWrites),
            notify_free: self.counters.get(Counter::NotifyFree),
        }
    }

    /// Bytes the allocator gave back to its page source and keeps resident
    /// for reuse (not in `mem_used_total`), and their bound now: the
    /// resident set may exceed `mem_used_total` by up to the bound (see
    /// `zpool::ZPool::retained_pages`).
    pub(crate) fn retained_bytes(&self) -> (u64, u64) {
        let r = self.pool.retained_pages();
        let page = self.pool.page_size() as u64;
        (r.pages as u64 * page, r.bound as u64 * page)
    }

    /// The divisor of the allocator's retained share: freed pages up to one
    /// in this many of the pages it holds stay resident for reuse, on top of
    /// its page source's fixed cache (0: the fixed cache only, or an
    /// allocator that keeps none).
    pub(crate) fn retain_divisor(&self) -> usize {
        self.pool.retained_pages().divisor
    }

    /// Sets the retained share's divisor on the running store (see
    /// `Store::retain_divisor`); what is kept over the new bound goes back
    /// to the OS now.
    pub(crate) fn set_retain_divisor(&self, divisor: usize) {
        self.pool.set_page_retain_divisor(divisor);
    }

    /// Frees skipped because a slot was busy (`debug_stat`'s second line).
    pub(crate) fn miss_free(&self) -> u64 {
        self.counters.get(Counter::MissFree)
    }

    /// Page reads and writes served since the last reset.
    pub(crate) fn io_counts(&self) -> (u64, u64) {
        (
            self.counters.get(Counter::NumReads),
            self.counters.get(Counter::NumWrites),
        )
    }

    /// Gives back the compression contexts no thread is using (see the
    /// `streams` module: zstd's are about 0.5 MiB each); the next page
    /// written or read makes one again. For a caller that knows the store is
    /// idle, such as a server after a quiet spell (reads with lzo, lzo-rle
    /// or lz4, whose decoders keep no state, take none). Returns how many were
    /// released.
    pub(crate) fn release_idle_streams(&self) -> usize {
        self.streams.release_idle()
    }

    /// How many pages the store compresses at once (`max_comp_streams`:
    /// the kernel's per-CPU streams; here the stripes, twice the CPUs).
    pub(crate) fn max_comp_streams(&self) -> usize {
        self.streams.max()
    }

    /// Compression contexts the store holds now (at most twice the CPUs).
    pub(crate) fn live_streams(&self) -> usize {
        self.streams.live()
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        // The compactor's thread first: nothing runs on a store being taken
        // apart. Turning it off cannot fail.
        let off = AutoCompactPolicy::new(crate::AutoCompactMode::Off);
        let _ = self.set_auto_compact(off);
        // Give the allocator's memory back even if it outlives the store.
        self.reset();
    }
}

/// The monotonic clock in nanoseconds, at the resolution of the kernel's
/// tick (`CLOCK_MONOTONIC_COARSE`): enough for access times in whole
/// seconds, and read from the vDSO's data without reading the hardware
/// clock, so it costs a few nanoseconds where `Instant::now` cost a read
/// of the store's page about 40 (measured in BENCHMARKS.md).
fn coarse_clock_ns() -> u64 {
    #[cfg(target_os = "linux")]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC_COARSE;
    #[cfg(not(target_os = "linux"))]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration;
    // the clock exists on every system the store builds for, so the call
    // cannot fail (and on failure `ts` stays 0, an access time of 0).
    unsafe { libc::clock_gettime(CLOCK, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highest_priority_follows_the_table() {
        let pool = Arc::new(zsmalloc::Pool::new(zsmalloc::PoolConfig::kernel_compat()).unwrap());
        let lz4 = Compressor::parse("lz4", "").unwrap();
        let disk = Disk::new(pool, lz4, 16).unwrap();
        assert_eq!(disk.highest_priority(), 0);
        let zstd = Compressor::parse("zstd", "").unwrap();
        disk.set_secondary(2, Streams::new(zstd));
        assert_eq!(disk.highest_priority(), 2);
        assert!(disk.secondary(1).is_none() && disk.secondary(2).is_some());
        assert!(disk.secondary(0).is_none() && disk.secondary(4).is_none());
    }
}
