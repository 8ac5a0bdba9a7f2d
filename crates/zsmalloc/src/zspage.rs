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
//! The owner array and bitmap (one allocation, `ZsPageMeta`'s `table`) cover
//! only the zspage's first `slots` slots: default mode grows them as placement
//! reaches the slot past their end (to the next power of two, at most the
//! zspage's object count), since objects are placed lowest slot first and a
//! zspage of a small class in a large-page pool has thousands of slots but
//! often a few dozen objects. A slot past `slots` is free and has no owner.
//! They do not shrink until the zspage is released. Huge classes of
//! kernel-compat mode (the only ones there with no in-object header) get their
//! owner array whole at creation, and no bitmap.
//!
//! In a *framed* pool (default mode on system pages above 4 KiB, see
//! `frames.rs`) a zspage has no run: its memory is 4 KiB frames of shared
//! system pages, taken as objects reach them (the `populated` count is then
//! in frames), and [`FramedMemory`] finds an object's bytes frame by frame.
//! An object inside one frame is still one slice; one that crosses frames
//! is copied out to be read, as the kernel does for objects across pages.
//!
//! This module owns the memory layout of objects. It does not decide which
//! zspage an object goes to (that is `class.rs`) and takes no lock: who may
//! touch which bytes is the contract of each `unsafe fn` here, kept by `pool.rs`.

use std::sync::atomic::{AtomicPtr, Ordering};

use ilist::Links;
use pages::Run;

use crate::config::Mode;
use crate::frames::FRAME_SIZE;
use crate::geometry::MAX_ZSPAGE_PAGES;
use crate::segvec::SegVec;

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
///
/// A class keeps one per zspage id in a `Vec`, so its size counts: fields are
/// ordered and sized to leave no padding (56 bytes).
pub(crate) struct ZsPageMeta {
    /// The pages; `None` while the id is vacant.
    pub(crate) run: Option<Run>,
    /// The owner of each of the first `slots` slots ([`NO_OWNER`] if free),
    /// followed in default mode by their live bits, 32 slots a word
    /// (`slots.div_ceil(32)` words; bits at and above `slots` are clear).
    /// Empty in kernel-compat classes with an in-object header.
    table: Box<[u32]>,
    /// Live objects.
    pub(crate) inuse: u32,
    /// Its place on its fullness list (zspage ids).
    pub(crate) links: Links,
    /// kernel-compat: head of the in-object free list.
    pub(crate) free_head: u32,
    /// Slots covered by `table`. Every slot at or above it is free.
    slots: u32,
    /// Pages counted for this zspage (at most [`MAX_ZSPAGE_PAGES`]): all of them in
    /// kernel-compat mode; in default mode the pages up to the end of the
    /// highest live object. Read and set through [`Self::populated`] and
    /// [`Self::set_populated`].
    populated: u8,
    /// Fullness group the zspage is listed in.
    pub(crate) group: u8,
    /// Taken out of the lists by compaction (its group is set on putback).
    pub(crate) isolated: bool,
    /// default: pages above `populated` were given up with
    /// `PageSource::discard_later` and may not be released yet; they must be
    /// reclaimed before they are touched again.
    pub(crate) tail_pending: bool,
}

// `populated` is a u8: a zspage has at most `MAX_ZSPAGE_PAGES` pages.
const _: () = assert!(MAX_ZSPAGE_PAGES <= u8::MAX as u32);

/// Slots the table of a default-mode zspage first covers (fewer if the
/// zspage has fewer).
const MIN_TABLE_SLOTS: u32 = 8;

ilist::impl_linked!(ZsPageMeta, links);

impl ZsPageMeta {
    pub(crate) fn vacant() -> Self {
        ZsPageMeta {
            run: None,
            table: Box::new([]),
            inuse: 0,
            links: Links::NONE,
            free_head: END_OF_LIST,
            slots: 0,
            populated: 0,
            group: 0,
            isolated: false,
            tail_pending: false,
        }
    }

    /// True if the id holds a zspage: it has a run, or (framed pools,
    /// whose zspages have none) live objects. A zspage is created and given
    /// its first object under one class lock hold, and released when its
    /// last object goes, so no one sees a live zspage without either.
    pub(crate) fn holds_zspage(&self) -> bool {
        self.run.is_some() || self.inuse > 0
    }

    /// Pages counted for this zspage.
    pub(crate) fn populated(&self) -> u32 {
        u32::from(self.populated)
    }

    /// Sets the pages counted for this zspage (at most its page count).
    pub(crate) fn set_populated(&mut self, pages: u32) {
        debug_assert!(pages <= MAX_ZSPAGE_PAGES);
        self.populated = pages as u8;
    }

    /// Slots covered by the owner array (and bitmap): every slot at or above
    /// this is free.
    pub(crate) fn slots(&self) -> u32 {
        self.slots
    }

    /// kernel-compat, huge class: an owner array for all `objs` slots, no
    /// bitmap (the in-object free list tracks free slots).
    pub(crate) fn give_all_owners(&mut self, objs: u32) {
        self.table = vec![NO_OWNER; objs as usize].into_boxed_slice();
        self.slots = objs;
    }

    /// Elements of the table: the owner array, then the bitmap if any.
    #[cfg(test)]
    pub(crate) fn table_len(&self) -> usize {
        self.table.len()
    }

    /// True if the table's length is right for its slots in `mode`: owners
    /// only (kernel-compat, whose free slots are an in-object list), or
    /// owners and bitmap words (default).
    pub(crate) fn table_is_consistent(&self, mode: Mode) -> bool {
        let words = match mode {
            Mode::Default => self.slots.div_ceil(32),
            Mode::KernelCompat => 0,
        };
        self.table.len() == (self.slots + words) as usize
    }

    fn bitmap(&self) -> &[u32] {
        &self.table[self.slots as usize..]
    }

    /// default mode: makes the table cover slot `idx` (just past its end:
    /// placement takes the lowest free slot): the next power of two above
    /// `idx`, at least [`MIN_TABLE_SLOTS`], at most `objs`. Owners and bits of
    /// the new slots are free.
    pub(crate) fn grow(&mut self, idx: u32, objs: u32) {
        debug_assert!(idx >= self.slots && idx < objs);
        debug_assert!(self.table_is_consistent(Mode::Default));
        let slots = (idx + 1).next_power_of_two().max(MIN_TABLE_SLOTS).min(objs);
        let words = slots.div_ceil(32);
        let mut table = Vec::with_capacity((slots + words) as usize);
        let (owners, bitmap) = self.table.split_at(self.slots as usize);
        table.extend_from_slice(owners);
        table.resize(slots as usize, NO_OWNER);
        table.extend_from_slice(bitmap);
        table.resize((slots + words) as usize, 0);
        self.table = table.into_boxed_slice();
        self.slots = slots;
    }

    /// The handle slot owning slot `idx`, or [`NO_OWNER`] if it is free.
    pub(crate) fn owner(&self, idx: u32) -> u32 {
        if idx < self.slots {
            self.table[idx as usize]
        } else {
            NO_OWNER
        }
    }

    /// Sets the owner of slot `idx`, which the table covers.
    pub(crate) fn set_owner(&mut self, idx: u32, owner: u32) {
        debug_assert!(idx < self.slots);
        self.table[idx as usize] = owner;
    }

    /// default mode: the lowest free slot, if any below `objs`. It may be the
    /// first slot past the table ([`Self::grow`] it before use).
    pub(crate) fn lowest_free(&self, objs: u32) -> Option<u32> {
        let bitmap = self.bitmap();
        let idx = bitmap
            .iter()
            .position(|&word| word != u32::MAX)
            .map_or(bitmap.len() as u32 * 32, |w| {
                w as u32 * 32 + bitmap[w].trailing_ones()
            });
        (idx < objs).then_some(idx)
    }

    /// default mode: one past the highest live slot (0 if none).
    pub(crate) fn live_end(&self) -> u32 {
        for (w, word) in self.bitmap().iter().enumerate().rev() {
            if *word != 0 {
                return w as u32 * 32 + 32 - word.leading_zeros();
            }
        }
        0
    }

    /// default mode: true if slot `idx` is live.
    pub(crate) fn is_live(&self, idx: u32) -> bool {
        self.bitmap()
            .get((idx / 32) as usize)
            .is_some_and(|word| word & (1 << (idx % 32)) != 0)
    }

    /// default mode: marks slot `idx`, which the table covers, live or free.
    pub(crate) fn set_live(&mut self, idx: u32, live: bool) {
        debug_assert!(idx < self.slots);
        let at = (self.slots + idx / 32) as usize;
        let word = &mut self.table[at];
        if live {
            *word |= 1 << (idx % 32);
        } else {
            *word &= !(1 << (idx % 32));
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

// ---------------------------------------------------------------------------
// Object memory of a framed zspage.

/// Address arithmetic over one framed zspage: objects of `size` bytes back
/// to back over its frames, whose first bytes are the zspage's entries of
/// the class's frame table (`first` is the zspage's first entry). An entry
/// is set under the class lock before any object reaches its frame, and
/// changed only by compaction, with every object on the frame held
/// exclusive; a holder of an object therefore reads the entries of its
/// object's frames without the class lock.
#[derive(Clone, Copy)]
pub(crate) struct FramedMemory<'a> {
    pub(crate) frames: &'a SegVec<AtomicPtr<u8>>,
    pub(crate) first: usize,
    pub(crate) size: u32,
}

impl FramedMemory<'_> {
    /// The first byte of frame `f`.
    fn frame(self, f: usize) -> *mut u8 {
        let ptr = self
            .frames
            .get(self.first + f)
            .expect("a zspage's frame entries are published with it")
            .load(Ordering::Acquire);
        debug_assert!(!ptr.is_null(), "frame {f} of a live object is taken");
        ptr
    }

    /// Calls `visit(frame pointer at the piece, offset in the range, piece
    /// length)` for each frame piece of bytes `offset..offset + len`.
    fn pieces(self, offset: usize, len: usize, mut visit: impl FnMut(*mut u8, usize, usize)) {
        let frame = FRAME_SIZE as usize;
        let mut done = 0;
        while done < len {
            let at = offset + done;
            let n = (frame - at % frame).min(len - done);
            // SAFETY: `at % frame < frame`: inside the frame.
            let ptr = unsafe { self.frame(at / frame).add(at % frame) };
            visit(ptr, done, n);
            done += n;
        }
    }

    /// The bytes of object `idx` from `skip`, `len` long, if they lie in one
    /// frame (`None`: they cross frames; see [`Self::copy_out`]).
    ///
    /// # Safety
    /// `skip + len <= size`, the object is live and held shared for `'b`
    /// (so its frames stay taken and unwritten).
    pub(crate) unsafe fn bytes<'b>(self, idx: u32, skip: u32, len: usize) -> Option<&'b [u8]> {
        debug_assert!(skip as usize + len <= self.size as usize);
        let frame = FRAME_SIZE as usize;
        let at = idx as usize * self.size as usize + skip as usize;
        if len > 0 && at / frame != (at + len - 1) / frame {
            return None;
        }
        // SAFETY: the range lies inside one frame of the live object, which
        // stays taken and unwritten for `'b` by the caller's contract.
        Some(unsafe { std::slice::from_raw_parts(self.frame(at / frame).add(at % frame), len) })
    }

    /// Copies the bytes of object `idx` from `skip` into `buf`.
    ///
    /// # Safety
    /// As for [`Self::bytes`] with `len = buf.len()`.
    pub(crate) unsafe fn copy_out(self, idx: u32, skip: u32, buf: &mut [u8]) {
        debug_assert!(skip as usize + buf.len() <= self.size as usize);
        let at = idx as usize * self.size as usize + skip as usize;
        self.pieces(at, buf.len(), |ptr, done, n| {
            // SAFETY: the piece lies in a frame of the held object; `buf` is
            // the caller's own memory.
            unsafe { std::ptr::copy_nonoverlapping(ptr, buf[done..].as_mut_ptr(), n) }
        });
    }

    /// Copies `data` into object `idx` at byte `skip`.
    ///
    /// # Safety
    /// `skip + data.len() <= size`, and the caller holds the object
    /// exclusive (or the slot is free and unreachable by readers).
    pub(crate) unsafe fn write_bytes(self, idx: u32, skip: u32, data: &[u8]) {
        debug_assert!(skip as usize + data.len() <= self.size as usize);
        let at = idx as usize * self.size as usize + skip as usize;
        self.pieces(at, data.len(), |ptr, done, n| {
            // SAFETY: the piece lies in a frame of the object, which no one
            // else accesses (caller's contract); `data` is distinct memory.
            unsafe { std::ptr::copy_nonoverlapping(data[done..].as_ptr(), ptr, n) }
        });
    }

    /// Copies a whole slot from `self` at `from` to `to` at `into`
    /// (compaction).
    ///
    /// # Safety
    /// As for [`ObjectMemory::copy_slot`]: the source object is held
    /// exclusive, the destination slot is free and unreachable by readers,
    /// and the frames of both are taken.
    pub(crate) unsafe fn copy_slot(self, from: u32, to: FramedMemory<'_>, into: u32) {
        debug_assert_eq!(self.size, to.size);
        let at = from as usize * self.size as usize;
        let dst = into as usize * to.size as usize;
        self.pieces(at, self.size as usize, |src, done, n| {
            to.pieces(dst + done, n, |d, sub, m| {
                // SAFETY: `src..src + n` lies in one frame of the source slot
                // and `sub + m <= n`; `d..d + m` in one frame of the
                // destination slot; distinct slots never share bytes.
                unsafe { std::ptr::copy_nonoverlapping(src.add(sub), d, m) }
            });
        });
    }
}

/// The object memory of a zspage of either kind, for the accesses both
/// kinds have: a run (kernel-compat, and default mode on 4 KiB pages) or
/// frames (a framed pool).
#[derive(Clone, Copy)]
pub(crate) enum SlotMemory<'a> {
    /// One virtually contiguous run.
    Run(ObjectMemory),
    /// Frames of shared system pages.
    Frames(FramedMemory<'a>),
}

impl SlotMemory<'_> {
    /// Copies `data` into object `idx` at byte `skip`.
    ///
    /// # Safety
    /// As for [`ObjectMemory::write_bytes`].
    pub(crate) unsafe fn write_bytes(self, idx: u32, skip: u32, data: &[u8]) {
        match self {
            // SAFETY: the caller's contract is the callee's.
            SlotMemory::Run(m) => unsafe { m.write_bytes(idx, skip, data) },
            // SAFETY: the caller's contract is the callee's.
            SlotMemory::Frames(m) => unsafe { m.write_bytes(idx, skip, data) },
        }
    }

    /// Copies a whole slot to another zspage of the same pool (compaction).
    ///
    /// # Safety
    /// As for [`ObjectMemory::copy_slot`].
    pub(crate) unsafe fn copy_slot(self, from: u32, to: SlotMemory<'_>, into: u32) {
        match (self, to) {
            // SAFETY: the caller's contract is the callee's.
            (SlotMemory::Run(a), SlotMemory::Run(b)) => unsafe { a.copy_slot(from, b, into) },
            // SAFETY: the caller's contract is the callee's.
            (SlotMemory::Frames(a), SlotMemory::Frames(b)) => unsafe { a.copy_slot(from, b, into) },
            _ => unreachable!("the zspages of one class are of one kind"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_helpers() {
        let mut m = ZsPageMeta::vacant();
        assert_eq!(m.lowest_free(100), Some(0));
        assert_eq!(m.live_end(), 0);
        for i in 0..70 {
            let idx = m.lowest_free(100).unwrap();
            assert_eq!(idx, i);
            if idx >= m.slots() {
                m.grow(idx, 100);
            }
            m.set_live(i, true);
            m.set_owner(i, 1000 + i);
            assert!(m.table_is_consistent(Mode::Default));
        }
        assert_eq!(m.slots(), 100, "128 capped at the object count");
        assert_eq!(m.lowest_free(100), Some(70));
        assert_eq!(m.lowest_free(70), None);
        assert_eq!(m.live_end(), 70);
        m.set_live(3, false);
        m.set_owner(3, NO_OWNER);
        assert!(!m.is_live(3) && m.is_live(4));
        assert_eq!(m.lowest_free(100), Some(3));
        // Growth kept every owner and bit.
        assert!((0..70).all(|i| i == 3 || (m.is_live(i) && m.owner(i) == 1000 + i)));
        assert!((70..200).all(|i| !m.is_live(i) && m.owner(i) == NO_OWNER));
    }

    #[test]
    fn the_table_grows_by_powers_of_two_from_the_minimum() {
        let objs = 3276;
        let mut m = ZsPageMeta::vacant();
        let mut sizes = Vec::new();
        for i in 0..objs {
            if m.lowest_free(objs) == Some(m.slots()) {
                m.grow(i, objs);
                sizes.push(m.slots());
            }
            m.set_live(i, true);
            m.set_owner(i, i);
        }
        assert_eq!(
            sizes,
            [8, 16, 32, 64, 128, 256, 512, 1024, 2048, objs],
            "one reallocation per doubling"
        );
        assert_eq!(m.lowest_free(objs), None);
        assert_eq!(m.live_end(), objs);
        assert_eq!(m.table_len(), (objs + objs.div_ceil(32)) as usize);
        // A class of few objects per zspage never gets more than it has.
        let mut small = ZsPageMeta::vacant();
        small.grow(0, 3);
        assert_eq!((small.slots(), small.table_len()), (3, 4));
    }

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn meta_is_56_bytes() {
        assert_eq!(std::mem::size_of::<ZsPageMeta>(), 56);
    }
}
