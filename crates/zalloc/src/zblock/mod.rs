//! zblock in user space: whole slots of fixed size in multi-page blocks.
//!
//! zblock was proposed for the kernel in 2022 and reworked in 2025 (v4, in
//! mm.git for a while, never merged). It trades zsmalloc's dense packing for
//! simple, bounded operations:
//!
//! - A *block* is a run of 1..=8 contiguous pages starting with a 48-byte
//!   header, followed by equal *slots*. Its *type* fixes the slot size, the
//!   slot count and the page count; the types come from a table per page size
//!   ([`table`]; on 4 KiB pages, the patch's 37 types).
//! - `malloc(len)` picks the type with the smallest slot that holds `len`
//!   (a binary search), takes the first block on that type's list of blocks
//!   with free slots and claims the lowest free bit of its slot bitmap. With
//!   no such block it maps a new one (at the list's head) with slot 0 taken.
//!   A block whose last free slot is taken leaves the list.
//! - `free` clears the bit. A block that had been full goes to the list's
//!   tail; a block left empty is given back to the OS at once.
//! - Nothing moves: no compaction, no pauses. Density is an integer number
//!   of objects per block, so each object wastes `slot_size - len`.
//!
//! # The largest-slot edge case
//!
//! The patch looks a size up as the type `i` with `slot[i-1] <= size <
//! slot[i]`, so a size equal to a slot size goes one type up, and a size
//! equal to the largest slot indexes one past the table. zmem takes the
//! smallest slot that is at least `size`: an object of exactly a slot's
//! size goes in that slot, the largest slot (4080 bytes on 4 KiB pages) is
//! usable, and only larger sizes are refused ([`ZPoolError::TooLarge`]).
//!
//! # Handles
//!
//! The kernel's handle was `block address | slot`. zmem's packs the type,
//! the block's index in the type's block table, the slot, the slot's
//! *generation* (bumped by every free) and the pool's tag, so forged,
//! foreign and stale handles are refused with [`ZPoolError::InvalidHandle`].
//! Bits: tag (7) | generation (16) | type (6) | block (27) | slot (8).
//!
//! # Lock order
//!
//! ```text
//!   block-type mutex (`TypePool::inner`: that type's blocks, list,
//!                     slot bitmaps, generations, read holds)
//!     -> page source mutex (leaf, inside `PageSource`)
//! ```
//!
//! Each type has its own mutex (the kernel had a list spinlock per type), so
//! objects of different types never wait on each other. No thread holds two
//! type mutexes. The pool's page and object counts are atomics updated under a
//! type mutex. `read_begin` counts a *read hold* on the slot, and `read_end`
//! drops it; the bytes are read with the mutex released. `write` and `free`
//! wait (on the condition variable of the type's `inner`, a `holds::HoldLock`,
//! private to this crate) until the object has no read holds. Every update
//! under a type mutex completes before anything that can panic, so a poisoned
//! mutex still guards consistent state.
//!
//! This module owns zblock's blocks, slot bitmaps and handles; it may not map
//! memory (blocks come from its `PageSource`) or know about other allocators.

pub mod table;

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::bookkeeping::{FOREIGN, FREED, STALE};
use crate::holds::HoldLock;
use pages::{PageSource, Run};
use zpool::{ZHandle, ZPool, ZPoolError, ZPoolStats};

pub use table::{BlockType, BLOCK_HEADER};

const NIL: u32 = u32::MAX;

const TAG_SHIFT: u32 = 57;
const GEN_SHIFT: u32 = 41;
const TYPE_SHIFT: u32 = 35;
const TYPE_MASK: u64 = (1 << 6) - 1;
const BLOCK_SHIFT: u32 = 8;
const BLOCK_MASK: u64 = (1 << 27) - 1;
const SLOT_MASK: u64 = (1 << 8) - 1;
const MAX_BLOCKS: usize = BLOCK_MASK as usize;

/// One slot's bookkeeping.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// Bumped by every free of the slot.
    generation: u16,
    /// Outstanding `read_begin`s.
    readers: u16,
}

/// One block's header (kept outside the block; the block's first
/// [`BLOCK_HEADER`] bytes stay reserved so the slot sizes are the patch's).
#[derive(Debug)]
struct Block {
    /// The memory; `None` while the record is unused.
    run: Option<Run>,
    /// Bit `i` set: slot `i` holds an object.
    bitmap: [u64; 4],
    /// Free slots.
    free: u32,
    /// Per-slot generations and read holds (kept when the record is reused,
    /// so old handles stay stale).
    slots: Box<[Slot]>,
    /// Links of the type's list of blocks with free slots.
    prev: u32,
    next: u32,
    listed: bool,
}

impl Block {
    fn used(&self, slot: usize) -> bool {
        self.bitmap[slot / 64] & (1 << (slot % 64)) != 0
    }
}

/// One type's state, under its mutex.
struct TypeInner {
    blocks: Vec<Block>,
    free_ids: Vec<u32>,
    /// Blocks with free slots: allocation takes the head.
    head: u32,
    tail: u32,
}

/// One block type and its blocks.
struct TypePool {
    info: BlockType,
    /// The type mutex, and the condition variable read holds are waited
    /// out on.
    inner: HoldLock<TypeInner>,
}

/// A zblock pool. See the [module documentation](self).
pub struct ZBlock {
    source: PageSource,
    page_size: usize,
    tag: u8,
    types: Box<[TypePool]>,
    total_pages: AtomicUsize,
    objects: AtomicU64,
}

impl fmt::Debug for ZBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZBlock")
            .field("page_size", &self.page_size)
            .field("types", &self.types.len())
            .field("total_pages", &self.total_pages())
            .finish_non_exhaustive()
    }
}

/// A parsed handle: (type, block, slot, generation).
type Parts = (usize, usize, usize, u16);

impl ZBlock {
    /// An empty pool on pages of `page_size` bytes (a power of two from the
    /// OS page size up to 64 KiB), holding at most `limit` pages at once if
    /// given: `malloc` fails with
    /// [`ZPoolError::OutOfMemory`] beyond it.
    pub fn new(page_size: usize, limit: Option<usize>) -> Result<ZBlock, ZPoolError> {
        let (source, tag) = crate::bookkeeping::source_and_tag(page_size, limit)?;
        let table = table::block_types(page_size);
        if table.is_empty()
            || table.len() > TYPE_MASK as usize + 1
            || table.windows(2).any(|w| w[0].slot_size >= w[1].slot_size)
            || table.iter().any(|t| t.slots == 0 || t.slots > 256)
        {
            return Err(ZPoolError::Config(format!(
                "no valid block-type table for {page_size}-byte pages"
            )));
        }
        let types = table
            .into_iter()
            .map(|info| TypePool {
                info,
                inner: HoldLock::new(TypeInner {
                    blocks: Vec::new(),
                    free_ids: Vec::new(),
                    head: NIL,
                    tail: NIL,
                }),
            })
            .collect();
        Ok(ZBlock {
            source,
            page_size,
            tag,
            types,
            total_pages: AtomicUsize::new(0),
            objects: AtomicU64::new(0),
        })
    }

    /// The block types, ascending in slot size.
    pub fn block_types(&self) -> Vec<BlockType> {
        self.types.iter().map(|t| t.info).collect()
    }

    /// The type an object of `len` bytes goes to: the smallest slot that
    /// holds it.
    pub fn type_for(&self, len: usize) -> Result<usize, ZPoolError> {
        if len == 0 {
            return Err(ZPoolError::ZeroSize);
        }
        let i = self
            .types
            .partition_point(|t| (t.info.slot_size as usize) < len);
        if i == self.types.len() {
            return Err(ZPoolError::TooLarge {
                len,
                max: self.max_size(),
            });
        }
        Ok(i)
    }

    fn max_size(&self) -> usize {
        self.types.last().map_or(0, |t| t.info.slot_size as usize)
    }

    fn handle(&self, ty: usize, block: u32, slot: usize, generation: u16) -> ZHandle {
        let raw = u64::from(self.tag) << TAG_SHIFT
            | u64::from(generation) << GEN_SHIFT
            | (ty as u64) << TYPE_SHIFT
            | u64::from(block) << BLOCK_SHIFT
            | slot as u64;
        ZHandle::from_raw(raw).expect("the tag is never 0")
    }

    /// Splits a handle of this pool into its fields (not yet checked against
    /// the blocks).
    fn parse(&self, h: ZHandle) -> Result<(&TypePool, Parts), ZPoolError> {
        let raw = h.to_raw();
        if (raw >> TAG_SHIFT) as u8 != self.tag {
            return Err(FOREIGN);
        }
        let ty = ((raw >> TYPE_SHIFT) & TYPE_MASK) as usize;
        let tp = self.types.get(ty).ok_or(FOREIGN)?;
        let block = ((raw >> BLOCK_SHIFT) & BLOCK_MASK) as usize;
        let slot = (raw & SLOT_MASK) as usize;
        let generation = (raw >> GEN_SHIFT) as u16;
        Ok((tp, (ty, block, slot, generation)))
    }

    /// Checks that `parts` names a live object of `tp`.
    fn locate(tp: &TypePool, inner: &TypeInner, parts: Parts) -> Result<(), ZPoolError> {
        let (_, block, slot, generation) = parts;
        let b = inner.blocks.get(block).ok_or(FOREIGN)?;
        if slot >= tp.info.slots as usize {
            return Err(FOREIGN);
        }
        if b.run.is_none() || !b.used(slot) {
            return Err(FREED);
        }
        if b.slots[slot].generation != generation {
            return Err(STALE);
        }
        Ok(())
    }

    fn address(tp: &TypePool, inner: &TypeInner, block: usize, slot: usize) -> *mut u8 {
        let run = inner.blocks[block]
            .run
            .as_ref()
            .expect("a live block has memory");
        let offset = BLOCK_HEADER + slot * tp.info.slot_size as usize;
        // SAFETY: `slot < slots` and the table guarantees `BLOCK_HEADER +
        // slots * slot_size <= pages * page_size`, so the slot is inside the run.
        unsafe { run.as_ptr().add(offset) }
    }

    /// Verifies every type's list, bitmaps and counts. Returns the first
    /// violation. Call it while no other thread uses the pool.
    pub fn check_invariants(&self) -> Result<(), String> {
        let (mut pages, mut objects) = (0usize, 0u64);
        for (ty, tp) in self.types.iter().enumerate() {
            let inner = tp.inner.lock();
            let slots = tp.info.slots;
            let mut listed = vec![false; inner.blocks.len()];
            let (mut prev, mut cur) = (NIL, inner.head);
            while cur != NIL {
                let b = inner
                    .blocks
                    .get(cur as usize)
                    .ok_or(format!("type {ty}: list leaves the table"))?;
                if std::mem::replace(&mut listed[cur as usize], true) || b.prev != prev {
                    return Err(format!("type {ty}: bad list at block {cur}"));
                }
                prev = cur;
                cur = b.next;
            }
            if prev != inner.tail {
                return Err(format!("type {ty}: list tail is wrong"));
            }
            let mut live = 0;
            for (bid, b) in inner.blocks.iter().enumerate() {
                if b.listed != listed[bid] {
                    return Err(format!("type {ty} block {bid}: listed flag is wrong"));
                }
                if b.run.is_none() {
                    if b.bitmap != [0; 4] || b.listed {
                        return Err(format!("type {ty}: unused block {bid} has contents"));
                    }
                    continue;
                }
                live += 1;
                let used: u32 = b.bitmap.iter().map(|w| w.count_ones()).sum();
                let in_range = (0..slots as usize).filter(|&s| b.used(s)).count() as u32;
                if used != in_range || used + b.free != slots || used == 0 {
                    return Err(format!(
                        "type {ty} block {bid}: {used} used, {} free of {slots}",
                        b.free
                    ));
                }
                if b.listed != (b.free > 0) {
                    return Err(format!("type {ty} block {bid}: listed {}", b.listed));
                }
                if b.slots.iter().any(|s| s.readers != 0) {
                    return Err(format!("type {ty} block {bid}: an object is being read"));
                }
                objects += u64::from(used);
            }
            if inner.free_ids.len() + live != inner.blocks.len() {
                return Err(format!("type {ty}: free block records miscounted"));
            }
            pages += live * tp.info.pages as usize;
        }
        crate::bookkeeping::check_totals(
            (pages, objects),
            (self.total_pages(), self.objects.load(Ordering::Relaxed)),
            self.source.pages_out(),
        )
    }
}

impl TypeInner {
    fn push_front(&mut self, bid: u32) {
        let head = self.head;
        let b = &mut self.blocks[bid as usize];
        b.prev = NIL;
        b.next = head;
        b.listed = true;
        if head == NIL {
            self.tail = bid;
        } else {
            self.blocks[head as usize].prev = bid;
        }
        self.head = bid;
    }

    fn push_back(&mut self, bid: u32) {
        let tail = self.tail;
        let b = &mut self.blocks[bid as usize];
        b.prev = tail;
        b.next = NIL;
        b.listed = true;
        if tail == NIL {
            self.head = bid;
        } else {
            self.blocks[tail as usize].next = bid;
        }
        self.tail = bid;
    }

    fn unlink(&mut self, bid: u32) {
        let b = &mut self.blocks[bid as usize];
        if !b.listed {
            return;
        }
        let (prev, next) = (b.prev, b.next);
        b.listed = false;
        b.prev = NIL;
        b.next = NIL;
        if prev == NIL {
            self.head = next;
        } else {
            self.blocks[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.blocks[next as usize].prev = prev;
        }
    }
}

impl ZPool for ZBlock {
    fn name(&self) -> &'static str {
        "zblock"
    }

    fn page_size(&self) -> usize {
        self.page_size
    }

    fn max_object_size(&self) -> usize {
        self.max_size()
    }

    fn malloc(&self, len: usize) -> Result<ZHandle, ZPoolError> {
        let ty = self.type_for(len)?;
        let tp = &self.types[ty];
        let info = tp.info;
        let mut inner = tp.inner.lock();
        let (bid, slot) = if inner.head != NIL {
            let bid = inner.head;
            let b = &mut inner.blocks[bid as usize];
            let slot = (0..info.slots as usize)
                .find(|&s| !b.used(s))
                .expect("a listed block has a free slot");
            b.bitmap[slot / 64] |= 1 << (slot % 64);
            b.free -= 1;
            if b.free == 0 {
                inner.unlink(bid);
            }
            (bid, slot)
        } else {
            let run = self
                .source
                .alloc(info.pages)
                .map_err(|e| ZPoolError::OutOfMemory(e.to_string()))?;
            let bid = if let Some(bid) = inner.free_ids.pop() {
                inner.blocks[bid as usize].run = Some(run);
                bid
            } else if inner.blocks.len() < MAX_BLOCKS {
                inner.blocks.push(Block {
                    run: Some(run),
                    bitmap: [0; 4],
                    free: 0,
                    slots: vec![Slot::default(); info.slots as usize].into_boxed_slice(),
                    prev: NIL,
                    next: NIL,
                    listed: false,
                });
                (inner.blocks.len() - 1) as u32
            } else {
                self.source.free(run);
                return Err(ZPoolError::OutOfMemory("the block table is full".into()));
            };
            let b = &mut inner.blocks[bid as usize];
            b.bitmap = [0; 4];
            b.bitmap[0] = 1;
            b.free = info.slots - 1;
            if b.free > 0 {
                inner.push_front(bid);
            }
            self.total_pages
                .fetch_add(info.pages as usize, Ordering::Relaxed);
            (bid, 0)
        };
        let generation = inner.blocks[bid as usize].slots[slot].generation;
        self.objects.fetch_add(1, Ordering::Relaxed);
        Ok(self.handle(ty, bid, slot, generation))
    }

    fn free(&self, h: ZHandle) -> Result<(), ZPoolError> {
        let (tp, parts) = self.parse(h)?;
        let (_, block, slot, _) = parts;
        let mut inner = tp.inner.lock();
        loop {
            Self::locate(tp, &inner, parts)?;
            if inner.blocks[block].slots[slot].readers == 0 {
                break;
            }
            inner = tp.inner.wait(inner);
        }
        let b = &mut inner.blocks[block];
        b.bitmap[slot / 64] &= !(1 << (slot % 64));
        b.slots[slot].generation = b.slots[slot].generation.wrapping_add(1);
        b.free += 1;
        let free = b.free;
        self.objects.fetch_sub(1, Ordering::Relaxed);
        let bid = block as u32;
        if free == tp.info.slots {
            inner.unlink(bid);
            let run = inner.blocks[block]
                .run
                .take()
                .expect("a live block has memory");
            self.source.free(run);
            inner.free_ids.push(bid);
            self.total_pages
                .fetch_sub(tp.info.pages as usize, Ordering::Relaxed);
        } else if free == 1 {
            inner.push_back(bid);
        }
        Ok(())
    }

    fn write(&self, h: ZHandle, data: &[u8]) -> Result<(), ZPoolError> {
        let (tp, parts) = self.parse(h)?;
        let (_, block, slot, _) = parts;
        let capacity = tp.info.slot_size as usize;
        let mut inner = tp.inner.lock();
        loop {
            Self::locate(tp, &inner, parts)?;
            if data.len() > capacity {
                return Err(ZPoolError::TooLong {
                    len: data.len(),
                    capacity,
                });
            }
            if inner.blocks[block].slots[slot].readers == 0 {
                break;
            }
            inner = tp.inner.wait(inner);
        }
        let dst = Self::address(tp, &inner, block, slot);
        // SAFETY: the slot is live and `data.len() <= slot_size`, so the copy
        // stays inside the slot; nobody reads it (no read holds) and no other
        // write or free of it can run (we hold the type mutex); `data` is
        // caller memory, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        Ok(())
    }

    fn read_begin(&self, h: ZHandle, len: usize) -> Result<NonNull<[u8]>, ZPoolError> {
        let (tp, parts) = self.parse(h)?;
        let (_, block, slot, _) = parts;
        let mut inner = tp.inner.lock();
        Self::locate(tp, &inner, parts)?;
        let capacity = tp.info.slot_size as usize;
        if len > capacity {
            return Err(ZPoolError::TooLong { len, capacity });
        }
        let s = &mut inner.blocks[block].slots[slot];
        s.readers = s.readers.checked_add(1).ok_or(ZPoolError::OutOfMemory(
            "too many reads of one object".into(),
        ))?;
        let ptr = NonNull::new(Self::address(tp, &inner, block, slot)).expect("not null");
        Ok(NonNull::slice_from_raw_parts(ptr, len))
    }

    unsafe fn read_end(&self, h: ZHandle) {
        let Ok((tp, parts)) = self.parse(h) else {
            return;
        };
        let (_, block, slot, _) = parts;
        let mut inner = tp.inner.lock();
        if Self::locate(tp, &inner, parts).is_ok() {
            let s = &mut inner.blocks[block].slots[slot];
            s.readers = s.readers.saturating_sub(1);
            if s.readers == 0 {
                tp.inner.released(&inner);
            }
        }
    }

    crate::bookkeeping::retained_page_methods!(source);

    fn total_pages(&self) -> usize {
        self.total_pages.load(Ordering::Relaxed)
    }

    fn stats(&self) -> ZPoolStats {
        ZPoolStats {
            total_pages: self.total_pages() as u64,
            objects: self.objects.load(Ordering::Relaxed),
            pages_compacted: 0,
            objs_moved: 0,
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        ZBlock::check_invariants(self)
    }
}

#[cfg(test)]
mod tests;
