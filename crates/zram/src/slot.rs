//! One slot of the disk: the kernel's 16-byte `zram_table_entry`.
//!
//! A slot is a `handle` word (an allocator handle, the fill word of a
//! same-filled page, or 0 for an empty slot) and a `flags` word whose low
//! `size_bits` hold the compressed length and whose upper bits hold the
//! flags, one of which is the slot's lock, plus the last access time.
//!
//! This module owns the bit layout and the lock. It never calls the
//! allocator: the store decides what a slot's contents mean.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The page is one repeated 8-byte word, kept in the handle word.
pub const SAME: u32 = 1 << 0;
/// The slot's lock (held while its contents are read or replaced).
pub const LOCK: u32 = 1 << 1;
/// The page is stored uncompressed.
pub const HUGE: u32 = 1 << 2;
/// Not accessed since the last idle marking.
pub const IDLE: u32 = 1 << 3;

/// Bit layout of the flags word for one page size.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Bits for the compressed size (`PAGE_SHIFT + 1`, as the kernel's
    /// `ZRAM_FLAG_SHIFT`, so that a whole page's length fits).
    size_bits: u32,
}

impl Layout {
    /// The layout for pages of `page_size` bytes (a power of two).
    pub fn new(page_size: usize) -> Layout {
        Layout {
            size_bits: page_size.trailing_zeros() + 1,
        }
    }

    fn size_mask(self) -> u32 {
        (1 << self.size_bits) - 1
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
}

/// One slot. All zero is an empty, unlocked slot.
#[derive(Debug, Default)]
pub struct Slot {
    handle: AtomicU64,
    flags: AtomicU32,
    /// Seconds since the store was made, at the last access.
    ac_time: AtomicU32,
}

/// What a slot holds, read under its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Contents {
    /// The handle word.
    pub handle: u64,
    /// Compressed length (0 for empty and same-filled slots).
    pub size: usize,
    /// Flags other than [`LOCK`].
    pub flags: u32,
}

impl Contents {
    /// An empty slot.
    pub const EMPTY: Contents = Contents {
        handle: 0,
        size: 0,
        flags: 0,
    };

    /// Whether the slot holds an allocator object.
    pub fn has_object(&self) -> bool {
        self.handle != 0 && self.flags & SAME == 0
    }
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
    /// The slot's contents.
    pub fn contents(&self) -> Contents {
        let word = self.slot.flags.load(Ordering::Relaxed);
        Contents {
            handle: self.slot.handle.load(Ordering::Relaxed),
            size: self.layout.size(word),
            flags: self.layout.flags(word) & !LOCK,
        }
    }

    /// Replaces the contents, keeping the lock held.
    pub fn set(&mut self, c: Contents) {
        self.slot.handle.store(c.handle, Ordering::Relaxed);
        let word = self.layout.pack(c.size, (c.flags & !LOCK) | LOCK);
        self.slot.flags.store(word, Ordering::Relaxed);
    }

    /// Sets or clears flags (not [`LOCK`]).
    pub fn update_flags(&mut self, set: u32, clear: u32) {
        let mut c = self.contents();
        c.flags = (c.flags | set) & !clear;
        self.set(c);
    }

    /// Records an access at `now` (clears [`IDLE`]).
    pub fn touch(&mut self, now: u32) {
        self.slot.ac_time.store(now, Ordering::Relaxed);
        self.update_flags(0, IDLE);
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

    #[test]
    fn layout_round_trips_every_page_size() {
        for shift in 12..=16 {
            let page = 1usize << shift;
            let l = Layout::new(page);
            for size in [0, 1, page - 1, page] {
                for flags in [0, SAME, HUGE | IDLE, SAME | HUGE | IDLE] {
                    let w = l.pack(size, flags);
                    assert_eq!((l.size(w), l.flags(w)), (size, flags));
                }
            }
        }
    }

    #[test]
    fn lock_excludes_and_keeps_contents() {
        let l = Layout::new(4096);
        let slot = Slot::default();
        {
            let mut g = slot.lock(l);
            g.set(Contents {
                handle: 7,
                size: 4096,
                flags: HUGE,
            });
            assert_ne!(slot.flags.load(Ordering::Relaxed) & l.bit(LOCK), 0);
        }
        assert_eq!(slot.flags.load(Ordering::Relaxed) & l.bit(LOCK), 0);
        let g = slot.lock(l);
        assert_eq!(
            g.contents(),
            Contents {
                handle: 7,
                size: 4096,
                flags: HUGE
            }
        );
    }

    #[test]
    fn lock_serialises_threads() {
        let l = Layout::new(4096);
        let slot = Slot::default();
        let counter = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        let mut g = slot.lock(l);
                        // A non-atomic read-modify-write, safe only under the lock.
                        let c = g.contents();
                        g.set(Contents {
                            handle: c.handle + 1,
                            ..c
                        });
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(slot.lock(l).contents().handle, 40_000);
    }
}
