//! One slot of the disk: the kernel's 16-byte `zram_table_entry`, and what
//! it holds.
//!
//! Owns the slot's bit layout, lock and decoding; may not touch the
//! allocator, memory or any module but `huge` (floor 2).
//!
//! A slot is a `handle` word (an allocator handle, the index of a page kept
//! beside the allocator, the fill word of a same-filled page, or 0 for an
//! empty slot) and a `flags` word whose low `size_bits` hold the compressed
//! length and whose upper bits hold the flags, one of which is the slot's
//! lock, plus the last access time.
//!
//! This module owns the bit layout, the lock, and the one translation between
//! those words and [`SlotContent`]: every reader of a slot gets the decoded
//! enum, every writer gives one. It never calls the allocator or the huge
//! pages: the store does what a slot's contents ask.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use zpool::ZHandle;

use crate::huge::HugePageId;

/// The page is one repeated 8-byte word, kept in the handle word.
pub const SAME: u32 = 1 << 0;
/// The slot's lock (held while its contents are read or replaced).
pub const LOCK: u32 = 1 << 1;
/// The page is stored uncompressed.
pub const HUGE: u32 = 1 << 2;
/// Not accessed since the last idle marking.
pub const IDLE: u32 = 1 << 3;
/// The page lives on the backing store; the handle word is its block.
pub const WB: u32 = 1 << 4;
/// Chosen by a running writeback or recompression (the kernel's
/// `ZRAM_PP_SLOT`); any access or replacement clears it, and the
/// post-processing then leaves the slot alone.
pub const PP_SLOT: u32 = 1 << 5;
/// Even the highest-priority recompression did not make the page smaller.
pub const INCOMPRESSIBLE: u32 = 1 << 6;
/// The two bits of the compressor priority (0: the primary) that compressed
/// the page (the kernel's `ZRAM_COMP_PRIORITY_BIT1/BIT2`).
const PRIORITY_SHIFT: u32 = 7;
const PRIORITY_MASK: u32 = 0b11;
/// A [`WB`] slot whose page was written back compressed, packed with other
/// objects (`compressed_writeback`): the handle word holds its first block
/// above the object's byte offset in it, the size field its length (an
/// object reaching past the block runs on into the next), and the priority
/// bits the compressor that made it.
pub const WB_PACKED: u32 = 1 << 9;

/// Where a store keeps pages that do not compress (what the handle word of
/// a [`HUGE`] slot names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HugeHome {
    /// In the allocator, as page-sized objects: the word is a handle.
    Allocator,
    /// In whole pages beside the allocator, for allocators whose largest
    /// object is smaller than a page: the word is a [`HugePageId`].
    BesideAllocator,
}

/// What a slot holds, decoded once from its words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotContent {
    /// Never written, or discarded: reads as zeros.
    Empty,
    /// One 8-byte word repeated over the page ([`SAME`]; no memory).
    SameFilled(u64),
    /// A compressed page: an allocator object of `size` bytes.
    Compressed {
        /// The allocator's handle.
        handle: ZHandle,
        /// Compressed length.
        size: usize,
    },
    /// A page that did not compress, stored raw as a page-sized allocator
    /// object ([`HUGE`], [`HugeHome::Allocator`]).
    RawObject(ZHandle),
    /// A page that did not compress, stored raw in a page beside the
    /// allocator ([`HUGE`], [`HugeHome::BesideAllocator`]).
    RawPage(HugePageId),
    /// A page written to the backing store ([`WB`]): the handle word is its
    /// block. As in the kernel the slot keeps the stored length and the
    /// [`HUGE`] flag of the page it was (neither counts in the statistics).
    WrittenBack {
        /// Block of the backing store.
        block: u64,
        /// The length the page had in memory.
        size: usize,
        /// Whether it was stored raw.
        huge: bool,
        /// `None`: the block holds the whole page, as it reads. `Some(n)`:
        /// the block holds the page's compressed object (`size` bytes) at
        /// byte `n`, beside other objects ([`WB_PACKED`]).
        packed: Option<u32>,
    },
}

impl SlotContent {
    /// Whether the page was stored uncompressed (counted in `huge_pages`).
    pub fn is_raw(self) -> bool {
        matches!(self, SlotContent::RawObject(_) | SlotContent::RawPage(_))
    }

    /// Whether the slot holds memory: an object or a page kept beside the
    /// allocator (not an empty or same-filled slot).
    pub fn holds_memory(self) -> bool {
        !matches!(
            self,
            SlotContent::Empty | SlotContent::SameFilled(_) | SlotContent::WrittenBack { .. }
        )
    }

    /// Bytes stored for the page (`compr_data_size`'s share): the compressed
    /// length, a whole page for a raw page, 0 otherwise.
    pub fn stored_bytes(self, page_size: usize) -> usize {
        match self {
            SlotContent::Compressed { size, .. } => size,
            SlotContent::RawObject(_) | SlotContent::RawPage(_) => page_size,
            SlotContent::Empty | SlotContent::SameFilled(_) | SlotContent::WrittenBack { .. } => 0,
        }
    }
}

/// Bit layout of the flags word for one page size, and where the store keeps
/// raw pages.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Bits for the compressed size (`PAGE_SHIFT + 1`, as the kernel's
    /// `ZRAM_FLAG_SHIFT`, so that a whole page's length fits).
    size_bits: u32,
    huge: HugeHome,
}

impl Layout {
    /// The layout for pages of `page_size` bytes (a power of two), raw pages
    /// kept in `huge`.
    pub fn new(page_size: usize, huge: HugeHome) -> Layout {
        Layout {
            size_bits: page_size.trailing_zeros() + 1,
            huge,
        }
    }

    fn size_mask(self) -> u32 {
        (1 << self.size_bits) - 1
    }

    fn page_size(self) -> usize {
        1 << (self.size_bits - 1)
    }

    /// Packs a size and flags.
    pub fn pack(self, size: usize, flags: u32) -> u32 {
        debug_assert!(size as u32 <= self.size_mask());
        (flags << self.size_bits) | size as u32
    }

    /// The size in a packed word.
    pub fn size(self, word: u32) -> usize {
        (word & self.size_mask()) as usize
    }

    /// The flags in a packed word.
    pub fn flags(self, word: u32) -> u32 {
        word >> self.size_bits
    }

    /// The packed bit of a flag.
    pub fn bit(self, flag: u32) -> u32 {
        flag << self.size_bits
    }

    /// What the words `(handle, size, flags)` of a slot hold: the one place
    /// they are read. A same-filled page keeps its word even when it is 0.
    fn decode(self, handle: u64, size: usize, flags: u32) -> SlotContent {
        if flags & SAME != 0 {
            return SlotContent::SameFilled(handle);
        }
        if flags & WB != 0 {
            let (block, packed) = if flags & WB_PACKED != 0 {
                let offset = handle & ((1 << self.size_bits) - 1);
                (handle >> self.size_bits, Some(offset as u32))
            } else {
                (handle, None)
            };
            return SlotContent::WrittenBack {
                block,
                size,
                huge: flags & HUGE != 0,
                packed,
            };
        }
        let raw = flags & HUGE != 0;
        match (raw, self.huge) {
            (true, HugeHome::BesideAllocator) => {
                HugePageId::from_raw(handle).map_or(SlotContent::Empty, SlotContent::RawPage)
            }
            (true, HugeHome::Allocator) => {
                ZHandle::from_raw(handle).map_or(SlotContent::Empty, SlotContent::RawObject)
            }
            (false, _) => ZHandle::from_raw(handle).map_or(SlotContent::Empty, |handle| {
                SlotContent::Compressed { handle, size }
            }),
        }
    }

    /// The words `(handle, size, flags)` that hold `content`: the one place
    /// they are written.
    fn encode(self, content: SlotContent) -> (u64, usize, u32) {
        match content {
            SlotContent::Empty => (0, 0, 0),
            SlotContent::SameFilled(word) => (word, 0, SAME),
            SlotContent::Compressed { handle, size } => (handle.to_raw(), size, 0),
            SlotContent::RawObject(handle) => {
                debug_assert_eq!(self.huge, HugeHome::Allocator);
                (handle.to_raw(), self.page_size(), HUGE)
            }
            SlotContent::RawPage(id) => {
                debug_assert_eq!(self.huge, HugeHome::BesideAllocator);
                (id.to_raw(), self.page_size(), HUGE)
            }
            SlotContent::WrittenBack {
                block,
                size,
                huge,
                packed,
            } => {
                let flags = WB | if huge { HUGE } else { 0 };
                match packed {
                    None => (block, size, flags),
                    Some(offset) => {
                        debug_assert!((offset as usize) < self.page_size());
                        (
                            (block << self.size_bits) | u64::from(offset),
                            size,
                            flags | WB_PACKED,
                        )
                    }
                }
            }
        }
    }
}

/// One slot. All zero is an empty, unlocked slot.
#[derive(Debug, Default)]
pub struct Slot {
    handle: AtomicU64,
    flags: AtomicU32,
    /// Seconds since the store was made, at the last access.
    ac_time: AtomicU32,
}

/// A held slot lock; dropping it unlocks.
pub struct SlotGuard<'a> {
    slot: &'a Slot,
    layout: Layout,
}

impl Slot {
    /// Locks the slot, spinning briefly and then yielding while another
    /// thread holds it (holders only copy or decompress one page).
    pub fn lock(&self, layout: Layout) -> SlotGuard<'_> {
        let bit = layout.bit(LOCK);
        let mut spins = 0u32;
        loop {
            let old = self.flags.fetch_or(bit, Ordering::Acquire);
            if old & bit == 0 {
                return SlotGuard { slot: self, layout };
            }
            while self.flags.load(Ordering::Relaxed) & bit != 0 {
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Last access time (seconds since the store was made).
    pub fn ac_time(&self) -> u32 {
        self.ac_time.load(Ordering::Relaxed)
    }
}

impl SlotGuard<'_> {
    /// Last access time (seconds since the store was made).
    pub fn ac_time(&self) -> u32 {
        self.slot.ac_time()
    }

    /// What the slot holds.
    pub fn content(&self) -> SlotContent {
        let word = self.slot.flags.load(Ordering::Relaxed);
        let handle = self.slot.handle.load(Ordering::Relaxed);
        self.layout
            .decode(handle, self.layout.size(word), self.layout.flags(word))
    }

    /// Whether the slot is marked idle.
    pub fn is_idle(&self) -> bool {
        self.flags() & IDLE != 0
    }

    /// Flags other than [`LOCK`].
    fn flags(&self) -> u32 {
        self.layout.flags(self.slot.flags.load(Ordering::Relaxed)) & !LOCK
    }

    /// Whether `flag` is set.
    pub fn has(&self, flag: u32) -> bool {
        self.flags() & flag != 0
    }

    /// The priority of the compressor that compressed the page (0: the
    /// primary).
    pub fn priority(&self) -> usize {
        ((self.flags() >> PRIORITY_SHIFT) & PRIORITY_MASK) as usize
    }

    /// Records the compressor priority (0 to 3) of the page.
    pub fn set_priority(&mut self, priority: usize) {
        let bits = (priority as u32 & PRIORITY_MASK) << PRIORITY_SHIFT;
        self.update_flags(bits, (PRIORITY_MASK << PRIORITY_SHIFT) & !bits);
    }

    /// Replaces the contents, keeping the lock held. Every other flag goes
    /// ([`IDLE`], [`PP_SLOT`], [`INCOMPRESSIBLE`], the priority), as the
    /// kernel's `slot_free` clears them.
    pub fn set(&mut self, content: SlotContent) {
        let (handle, size, flags) = self.layout.encode(content);
        self.slot.handle.store(handle, Ordering::Relaxed);
        self.store_word(size, flags);
    }

    fn store_word(&mut self, size: usize, flags: u32) {
        let word = self.layout.pack(size, (flags & !LOCK) | LOCK);
        self.slot.flags.store(word, Ordering::Relaxed);
    }

    /// Sets or clears flags (not [`LOCK`]); the contents stay.
    pub fn update_flags(&mut self, set: u32, clear: u32) {
        let word = self.slot.flags.load(Ordering::Relaxed);
        let flags = (self.flags() | set) & !clear;
        self.store_word(self.layout.size(word), flags);
    }

    /// Records an access at `now` (clears [`IDLE`] and [`PP_SLOT`]).
    pub fn touch(&mut self, now: u32) {
        self.slot.ac_time.store(now, Ordering::Relaxed);
        self.update_flags(0, IDLE | PP_SLOT);
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        self.slot
            .flags
            .fetch_and(!self.layout.bit(LOCK), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(raw: u64) -> ZHandle {
        ZHandle::from_raw(raw).unwrap()
    }

    #[test]
    fn layout_round_trips_every_page_size() {
        for shift in 12..=16 {
            let page = 1usize << shift;
            let l = Layout::new(page, HugeHome::Allocator);
            for size in [0, 1, page - 1, page] {
                for flags in [0, SAME, HUGE | IDLE, SAME | HUGE | IDLE] {
                    let w = l.pack(size, flags);
                    assert_eq!((l.size(w), l.flags(w)), (size, flags));
                }
            }
        }
    }

    #[test]
    fn contents_round_trip_through_the_words() {
        let page = 4096;
        let in_pool = Layout::new(page, HugeHome::Allocator);
        let beside = Layout::new(page, HugeHome::BesideAllocator);
        let raw_page = SlotContent::RawPage(HugePageId::from_raw(3).unwrap());
        for (layout, content, words) in [
            (in_pool, SlotContent::Empty, (0, 0, 0)),
            (in_pool, SlotContent::SameFilled(0), (0, 0, SAME)),
            (beside, SlotContent::SameFilled(!0), (!0, 0, SAME)),
            (
                in_pool,
                SlotContent::Compressed {
                    handle: handle(9),
                    size: 1234,
                },
                (9, 1234, 0),
            ),
            (in_pool, SlotContent::RawObject(handle(7)), (7, page, HUGE)),
            (beside, raw_page, (3, page, HUGE)),
            (
                in_pool,
                SlotContent::WrittenBack {
                    block: 5,
                    size: 77,
                    huge: false,
                    packed: None,
                },
                (5, 77, WB),
            ),
            (
                in_pool,
                SlotContent::WrittenBack {
                    block: 5,
                    size: 77,
                    huge: false,
                    packed: Some(4000),
                },
                ((5 << 13) | 4000, 77, WB | WB_PACKED),
            ),
        ] {
            assert_eq!(layout.encode(content), words, "{content:?}");
            assert_eq!(layout.decode(words.0, words.1, words.2), content);
        }
        // The same HUGE words name an allocator object or a page beside it,
        // as the store keeps raw pages.
        assert_eq!(
            in_pool.decode(3, page, HUGE),
            SlotContent::RawObject(handle(3))
        );
        assert_eq!(beside.decode(3, page, HUGE), raw_page);
        assert_eq!(raw_page.stored_bytes(page), page, "a raw page counts whole");
        assert!(!SlotContent::SameFilled(5).holds_memory());
        assert!(raw_page.is_raw() && raw_page.holds_memory());
    }

    #[test]
    fn lock_excludes_and_keeps_contents() {
        let l = Layout::new(4096, HugeHome::Allocator);
        let slot = Slot::default();
        {
            let mut g = slot.lock(l);
            g.set(SlotContent::RawObject(handle(7)));
            g.update_flags(IDLE, 0);
            assert_ne!(slot.flags.load(Ordering::Relaxed) & l.bit(LOCK), 0);
        }
        assert_eq!(slot.flags.load(Ordering::Relaxed) & l.bit(LOCK), 0);
        let mut g = slot.lock(l);
        assert_eq!(g.content(), SlotContent::RawObject(handle(7)));
        assert!(g.is_idle());
        g.touch(5);
        assert!(!g.is_idle());
        assert_eq!(g.content(), SlotContent::RawObject(handle(7)));
    }

    #[test]
    fn lock_serialises_threads() {
        let l = Layout::new(4096, HugeHome::Allocator);
        let slot = Slot::default();
        slot.lock(l).set(SlotContent::SameFilled(0));
        let counter = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        let mut g = slot.lock(l);
                        // A non-atomic read-modify-write, safe only under the lock.
                        let SlotContent::SameFilled(n) = g.content() else {
                            unreachable!("only same-filled words are written")
                        };
                        g.set(SlotContent::SameFilled(n + 1));
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(slot.lock(l).content(), SlotContent::SameFilled(40_000));
        assert_eq!(counter.load(Ordering::Relaxed), 40_000);
    }
}
