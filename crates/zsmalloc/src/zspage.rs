//! Zspages: one run of pages holding the objects of one class, its lock, and
//! the raw memory access to its objects.
//!
//! A zspage is split in two:
//! - [`ZsPageBase`], in the class's lock-free table: the base address. Readers
//!   reach it from a handle entry without the class lock.
//! - [`ZsPageMeta`], inside the class lock: the run, in-use count, fullness
//!   list links, free-slot state and, in default mode, the owner of each slot.
//!
//! In user space a zspage is one virtually contiguous run, so an object that
//! crosses a page boundary is still one slice: reads never copy.
//!
//! Free-slot state depends on the pool mode:
//! - kernel-compat: the kernel's in-object free list. A free slot's first word
//!   is `next << 1`; allocation pops the head (LIFO); a live non-huge object's
//!   first word is its header, `slot << 1 | 1`.
//! - default: a bitmap, lowest free slot first, and an owner array. Objects
//!   are packed from the start of the run, and only the pages up to the
//!   highest live object are counted (`populated`); the pages above go back
//!   to the OS with the page source's next batch.
//!
//! This module owns the memory layout of objects. It does not decide which
//! zspage an object goes to (that is `class.rs`) and takes no lock: who may
//! touch which bytes is the contract of each `unsafe fn` here, kept by `pool.rs`.

use std::sync::atomic::AtomicPtr;

use pages::Run;

/// The kernel's end-of-free-list index.
pub(crate) const END_OF_LIST: u32 = u32::MAX >> 1;
/// No owner, in the default mode's owner array.
pub(crate) const NO_OWNER: u32 = u32::MAX;

// ---------------------------------------------------------------------------
// The lock-free part of a zspage.

/// What a reader needs to reach a zspage's bytes without the class lock: the
/// first byte of the run, null while the id is vacant. Set under the class lock
/// before any handle entry points into the zspage, cleared under it after the
/// last one left.
pub(crate) type ZsPageBase = AtomicPtr<u8>;

// ---------------------------------------------------------------------------
// The class-locked part of a zspage.

/// Bookkeeping of one zspage, protected by its class lock.
pub(crate) struct ZsPageMeta {
    /// The pages; `None` while the id is vacant.
    pub(crate) run: Option<Run>,
    /// Live objects.
    pub(crate) inuse: u32,
    /// Fullness group the zspage is listed in.
    pub(crate) group: u8,
    /// Taken out of the lists by compaction (its group is set on putback).
    pub(crate) isolated: bool,
    /// Fullness list links (zspage ids, `u32::MAX` for none).
    pub(crate) prev: u32,
    pub(crate) next: u32,
    /// kernel-compat: head of the in-object free list.
    pub(crate) free_head: u32,
    /// Pages counted for this zspage: all of them in kernel-compat mode; in
    /// default mode the pages up to the end of the highest live object.
    pub(crate) populated: u32,
    /// default: pages above `populated` were given up with
    /// `PageSource::discard_later` and may not be released yet; they must be
    /// reclaimed before they are touched again.
    pub(crate) tail_pending: bool,
    /// default: one bit per slot, set when live.
    pub(crate) bitmap: Box<[u64]>,
    /// default: handle slot owning each object slot, or [`NO_OWNER`].
    pub(crate) owners: Box<[u32]>,
}

pub(crate) const NO_LINK: u32 = u32::MAX;

impl ZsPageMeta {
    pub(crate) fn vacant() -> Self {
        ZsPageMeta {
            run: None,
            inuse: 0,
            group: 0,
            isolated: false,
            prev: NO_LINK,
            next: NO_LINK,
            free_head: END_OF_LIST,
            populated: 0,
            tail_pending: false,
            bitmap: Box::new([]),
            owners: Box::new([]),
        }
    }

    /// default mode: the lowest free slot, if any below `objs`.
    pub(crate) fn lowest_free(&self, objs: u32) -> Option<u32> {
        for (w, word) in self.bitmap.iter().enumerate() {
            if *word != u64::MAX {
                let idx = w as u32 * 64 + word.trailing_ones();
                return (idx < objs).then_some(idx);
            }
        }
        None
    }

    /// default mode: one past the highest live slot (0 if none).
    pub(crate) fn live_end(&self) -> u32 {
        for (w, word) in self.bitmap.iter().enumerate().rev() {
            if *word != 0 {
                return w as u32 * 64 + 64 - word.leading_zeros();
            }
        }
        0
    }

    pub(crate) fn is_live(&self, idx: u32) -> bool {
        self.bitmap[(idx / 64) as usize] & (1 << (idx % 64)) != 0
    }

    pub(crate) fn set_live(&mut self, idx: u32, live: bool) {
        let word = &mut self.bitmap[(idx / 64) as usize];
        if live {
            *word |= 1 << (idx % 64);
        } else {
            *word &= !(1 << (idx % 64));
        }
    }
}

// ---------------------------------------------------------------------------
// Raw object memory.

/// Address arithmetic over one zspage's run: objects of `size` bytes back to
/// back from `base`.
#[derive(Clone, Copy)]
pub(crate) struct ObjectMemory {
    pub(crate) base: *mut u8,
    pub(crate) size: u32,
}

impl ObjectMemory {
    pub(crate) fn offset(self, idx: u32) -> usize {
        idx as usize * self.size as usize
    }

    /// Reads the first word of object `idx`.
    ///
    /// # Safety
    /// `base` is the live run of a zspage whose class has slots of `size`
    /// bytes, `idx` is below its object count, and nobody writes that word
    /// concurrently (the caller holds the class lock, and the word belongs to a
    /// free slot or a header only the class lock holder writes).
    pub(crate) unsafe fn read_word(self, idx: u32) -> u64 {
        // SAFETY: by the caller's contract the 8 bytes at the slot start are
        // inside the run (slots are at least 32 bytes and 8-aligned) and not
        // written concurrently. The run is page-aligned, so the read is aligned.
        unsafe { self.base.add(self.offset(idx)).cast::<u64>().read() }
    }

    /// Writes the first word of object `idx`.
    ///
    /// # Safety
    /// As for [`ObjectMemory::read_word`], and nobody reads that word
    /// concurrently (the slot is free, or the object is held exclusive).
    pub(crate) unsafe fn write_word(self, idx: u32, value: u64) {
        // SAFETY: as in `read_word`; exclusivity is the caller's contract.
        unsafe { self.base.add(self.offset(idx)).cast::<u64>().write(value) }
    }

    /// Copies `data` into object `idx` at byte `skip` (after its header).
    ///
    /// # Safety
    /// `skip + data.len() <= size`, the run is live, and the caller holds the
    /// object exclusive (or the slot is free and unreachable by readers).
    pub(crate) unsafe fn write_bytes(self, idx: u32, skip: u32, data: &[u8]) {
        debug_assert!(skip as usize + data.len() <= self.size as usize);
        // SAFETY: the destination lies inside slot `idx` of the live run and no
        // one else accesses it (caller's contract); `data` is a distinct
        // allocation, so the ranges do not overlap.
        unsafe {
            let dst = self.base.add(self.offset(idx) + skip as usize);
            std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len());
        }
    }

    /// The bytes of object `idx` from `skip`, `len` long.
    ///
    /// # Safety
    /// `skip + len <= size`, the run is live for `'a`, and no one writes these
    /// bytes during `'a` (the caller holds the object shared for `'a`).
    pub(crate) unsafe fn bytes<'a>(self, idx: u32, skip: u32, len: usize) -> &'a [u8] {
        debug_assert!(skip as usize + len <= self.size as usize);
        // SAFETY: the range is inside slot `idx` of a run that stays mapped
        // and unwritten for `'a` by the caller's contract.
        unsafe { std::slice::from_raw_parts(self.base.add(self.offset(idx) + skip as usize), len) }
    }

    /// Copies a whole slot from `self` at `from` to `to` at `into` (compaction).
    ///
    /// # Safety
    /// Both runs are live, both indices are below their object counts, the
    /// source object is held exclusive
    /// and the destination slot is free and unreachable by readers.
    pub(crate) unsafe fn copy_slot(self, from: u32, to: ObjectMemory, into: u32) {
        debug_assert_eq!(self.size, to.size);
        // SAFETY: distinct slots (different zspages, or the same zspage and
        // different indices) never overlap; both lie inside live runs; the
        // caller rules out concurrent access.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.add(self.offset(from)),
                to.base.add(to.offset(into)),
                self.size as usize,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_helpers() {
        let mut m = ZsPageMeta::vacant();
        m.bitmap = vec![0; 2].into_boxed_slice();
        assert_eq!(m.lowest_free(100), Some(0));
        assert_eq!(m.live_end(), 0);
        for i in 0..70 {
            m.set_live(i, true);
        }
        assert_eq!(m.lowest_free(100), Some(70));
        assert_eq!(m.lowest_free(70), None);
        assert_eq!(m.live_end(), 70);
        m.set_live(3, false);
        assert!(!m.is_live(3) && m.is_live(4));
        assert_eq!(m.lowest_free(100), Some(3));
    }
}
