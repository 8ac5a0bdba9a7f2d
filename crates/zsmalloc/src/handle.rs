//! Handles and handle-table entries.
//!
//! A [`Handle`] is what `malloc` returns and every other call takes. It names a
//! slot of its class's handle table, never an address, so compaction can move
//! an object by rewriting one table entry. The handle also carries the slot's
//! *generation*: freeing an object bumps it, so a freed (stale) handle no
//! longer matches and is refused, as is a forged one that names no live slot.
//! A per-pool tag in the handle catches most handles of another pool.
//!
//! Handle bits: `slot + 1` (28) | class (13) | generation (16) | pool tag (7).
//! Zero is never a handle, so the C API can return 0 for failure as the kernel
//! does.
//!
//! The entry of a slot ([`EntryCell`], one `AtomicU64`) is also the object's
//! lock:
//! - allocated: `1` | exclusive (1) | readers (6) | generation (16) | zspage id
//!   (25) | object index (15)
//! - free: `0` | 0 | 0 | generation (16) | next free slot (28)
//!
//! A reader adds one to `readers` while the object is not held exclusive; the
//! location cannot change until it subtracts it. A writer, a freer or the
//! compactor sets `exclusive` once `readers` is 0; the compactor only tries.
//!
//! This module owns the encodings and the per-object lock. Who may change an
//! entry's location (the class lock holder) is written in `pool.rs`.

use std::fmt;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

const SLOT_BITS: u32 = 28;
const CLASS_BITS: u32 = 13;
const GEN_BITS: u32 = 16;
const TAG_BITS: u32 = 7;

/// Handle slots one class can have.
pub(crate) const MAX_SLOTS: u32 = (1 << SLOT_BITS) - 2;
/// Physical classes a pool can have.
pub(crate) const MAX_CLASSES: usize = 1 << CLASS_BITS;
/// Zspages one class can have.
pub(crate) const MAX_ZSPAGES: u32 = 1 << 25;
/// Objects one zspage can have (16 pages of 64 KiB in 32-byte slots).
pub(crate) const MAX_OBJS: u32 = 1 << 15;
/// End of the handle free list.
pub(crate) const NO_SLOT: u32 = (1 << SLOT_BITS) - 1;

const GEN_MASK: u64 = (1 << GEN_BITS) - 1;
const ALLOCATED: u64 = 1 << 63;
const EXCLUSIVE: u64 = 1 << 62;
const READER: u64 = 1 << 56;
const READERS: u64 = 0x3f << 56;
const LOCK_BITS: u64 = EXCLUSIVE | READERS;
/// Shared holds one object can have at once (the `readers` field is full).
pub(crate) const MAX_READERS: u32 = (READERS / READER) as u32;
const ENTRY_GEN_SHIFT: u32 = 40;
const ZSPAGE_SHIFT: u32 = 15;
const OBJ_MASK: u64 = (1 << ZSPAGE_SHIFT) - 1;

/// An object in a [`Pool`](crate::Pool). Copy it freely; it stays valid until
/// the object is freed, across compaction.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Handle(NonZeroU64);

impl Handle {
    /// Every raw handle is below this: the pool tag in the top 7 bits is never
    /// all ones. So no handle falls in the top 4095 values of a `u64`, which C
    /// callers read as negative error codes (`IS_ERR_VALUE`).
    pub const RAW_LIMIT: u64 = 0x7f << (SLOT_BITS + CLASS_BITS + GEN_BITS);

    pub(crate) fn new(class: usize, slot: u32, generation: u32, tag: u8) -> Handle {
        debug_assert!(class < MAX_CLASSES && slot <= MAX_SLOTS && tag < 0x7f);
        let raw = u64::from(slot + 1)
            | (class as u64) << SLOT_BITS
            | (u64::from(generation) & GEN_MASK) << (SLOT_BITS + CLASS_BITS)
            | (u64::from(tag) & ((1 << TAG_BITS) - 1)) << (SLOT_BITS + CLASS_BITS + GEN_BITS);
        Handle(NonZeroU64::new(raw).expect("slot + 1 is never zero"))
    }

    /// The handle as a number (never 0, always below [`Handle::RAW_LIMIT`]),
    /// e.g. to keep it in a table or pass it through C.
    pub fn to_raw(self) -> u64 {
        self.0.get()
    }

    /// A handle from [`Handle::to_raw`]'s number; `None` for 0. Any other number
    /// is accepted here and checked by the pool when used.
    pub fn from_raw(raw: u64) -> Option<Handle> {
        NonZeroU64::new(raw).map(Handle)
    }

    pub(crate) fn class(self) -> usize {
        ((self.0.get() >> SLOT_BITS) & ((1 << CLASS_BITS) - 1)) as usize
    }

    /// The slot, or `None` for a number whose slot field is 0 (never issued).
    pub(crate) fn slot(self) -> Option<u32> {
        let field = (self.0.get() & ((1 << SLOT_BITS) - 1)) as u32;
        field.checked_sub(1)
    }

    pub(crate) fn generation(self) -> u32 {
        ((self.0.get() >> (SLOT_BITS + CLASS_BITS)) & GEN_MASK) as u32
    }

    pub(crate) fn tag(self) -> u8 {
        (self.0.get() >> (SLOT_BITS + CLASS_BITS + GEN_BITS)) as u8
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Handle(class {}, slot {:?}, gen {}, tag {})",
            self.class(),
            self.slot(),
            self.generation(),
            self.tag()
        )
    }
}

/// A decoded handle-table entry, lock bits aside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// The slot holds a live object at (zspage, index).
    Allocated {
        generation: u32,
        zspage: u32,
        obj: u32,
    },
    /// The slot is free; `next` links the class's free slots.
    Free { generation: u32, next: u32 },
}

impl Entry {
    pub(crate) fn encode(self) -> u64 {
        match self {
            Entry::Allocated {
                generation,
                zspage,
                obj,
            } => {
                debug_assert!(zspage < MAX_ZSPAGES && obj < MAX_OBJS);
                ALLOCATED
                    | (u64::from(generation) & GEN_MASK) << ENTRY_GEN_SHIFT
                    | u64::from(zspage) << ZSPAGE_SHIFT
                    | u64::from(obj)
            }
            Entry::Free { generation, next } => {
                (u64::from(generation) & GEN_MASK) << ENTRY_GEN_SHIFT | u64::from(next)
            }
        }
    }

    pub(crate) fn decode(raw: u64) -> Entry {
        let generation = ((raw >> ENTRY_GEN_SHIFT) & GEN_MASK) as u32;
        if raw & ALLOCATED != 0 {
            Entry::Allocated {
                generation,
                zspage: ((raw >> ZSPAGE_SHIFT) & (u64::from(MAX_ZSPAGES) - 1)) as u32,
                obj: (raw & OBJ_MASK) as u32,
            }
        } else {
            Entry::Free {
                generation,
                next: (raw & u64::from(NO_SLOT)) as u32,
            }
        }
    }

    pub(crate) fn generation(self) -> u32 {
        match self {
            Entry::Allocated { generation, .. } | Entry::Free { generation, .. } => generation,
        }
    }
}

/// The generation after `g`, wrapping within the field.
pub(crate) fn next_generation(g: u32) -> u32 {
    ((u64::from(g) + 1) & GEN_MASK) as u32
}

/// Why a handle was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The slot is free: the object was freed.
    Freed,
    /// The slot holds another generation.
    Stale,
}

/// Where a locked object lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Location {
    pub(crate) zspage: u32,
    pub(crate) obj: u32,
}

fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// One handle-table slot: the entry and the object's lock in one word.
#[derive(Default)]
pub(crate) struct EntryCell(AtomicU64);

// SAFETY: all-zero bytes are `EntryCell(AtomicU64::new(0))`, its default (a
// free entry, generation 0, next 0); it needs no drop.
unsafe impl crate::segvec::ZeroDefault for EntryCell {}

impl EntryCell {
    /// The entry, lock bits ignored.
    pub(crate) fn load(&self) -> Entry {
        Entry::decode(self.0.load(Ordering::Acquire))
    }

    /// True if a reader or an exclusive holder has the object.
    pub(crate) fn is_locked(&self) -> bool {
        self.0.load(Ordering::Acquire) & LOCK_BITS != 0
    }

    /// Replaces the entry. Only for an unlocked entry (a free slot, or a new
    /// object no one can reach yet), under the class lock.
    pub(crate) fn store(&self, e: Entry) {
        debug_assert!(!self.is_locked());
        self.0.store(e.encode(), Ordering::Release);
    }

    fn check(raw: u64, generation: u32) -> Result<Location, Refusal> {
        match Entry::decode(raw) {
            Entry::Allocated {
                generation: g,
                zspage,
                obj,
            } if g == generation => Ok(Location { zspage, obj }),
            Entry::Allocated { .. } => Err(Refusal::Stale),
            Entry::Free { .. } => Err(Refusal::Freed),
        }
    }

    /// Takes a shared hold on the object of `generation`, waiting while it is
    /// held exclusive. Its location cannot change until [`Self::unlock_shared`].
    pub(crate) fn lock_shared(&self, generation: u32) -> Result<Location, Refusal> {
        let mut spins = 0;
        loop {
            let raw = self.0.load(Ordering::Relaxed);
            let loc = Self::check(raw, generation)?;
            if raw & EXCLUSIVE == 0
                && raw & READERS != READERS
                && self
                    .0
                    .compare_exchange_weak(raw, raw + READER, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return Ok(loc);
            }
            backoff(&mut spins);
        }
    }

    pub(crate) fn unlock_shared(&self) {
        let prev = self.0.fetch_sub(READER, Ordering::Release);
        debug_assert!(prev & READERS != 0);
    }

    /// Takes the exclusive hold on the object of `generation`, waiting for
    /// readers and for another exclusive holder to leave.
    pub(crate) fn lock_exclusive(&self, generation: u32) -> Result<Location, Refusal> {
        let mut spins = 0;
        loop {
            let raw = self.0.load(Ordering::Relaxed);
            let loc = Self::check(raw, generation)?;
            if raw & LOCK_BITS == 0
                && self
                    .0
                    .compare_exchange_weak(
                        raw,
                        raw | EXCLUSIVE,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                return Ok(loc);
            }
            backoff(&mut spins);
        }
    }

    /// The compactor's attempt: exclusive hold of a live object of any
    /// generation if nobody holds it.
    pub(crate) fn try_lock_exclusive(&self) -> Option<Location> {
        let raw = self.0.load(Ordering::Relaxed);
        if raw & ALLOCATED == 0 || raw & LOCK_BITS != 0 {
            return None;
        }
        let generation = Entry::decode(raw).generation();
        self.0
            .compare_exchange(raw, raw | EXCLUSIVE, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        Self::check(raw, generation).ok()
    }

    /// Drops the exclusive hold, leaving the entry as it was.
    pub(crate) fn unlock_exclusive(&self) {
        let prev = self.0.fetch_and(!EXCLUSIVE, Ordering::Release);
        debug_assert!(prev & EXCLUSIVE != 0);
    }

    /// Drops the exclusive hold and sets a new entry in one store (an object
    /// moved or freed by the holder).
    pub(crate) fn replace_exclusive(&self, e: Entry) {
        debug_assert!(self.0.load(Ordering::Relaxed) & EXCLUSIVE != 0);
        self.0.store(e.encode(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_fields_round_trip() {
        for (class, slot, generation, tag) in [
            (0, 0, 0, 0),
            (8191, MAX_SLOTS, (1 << 16) - 1, 126),
            (17, 5, 99, 3),
        ] {
            let h = Handle::new(class, slot, generation, tag);
            assert_ne!(h.to_raw(), 0);
            assert!(h.to_raw() < Handle::RAW_LIMIT);
            let back = Handle::from_raw(h.to_raw()).unwrap();
            assert_eq!(
                (back.class(), back.slot(), back.generation(), back.tag()),
                (class, Some(slot), generation, tag)
            );
        }
        assert_eq!(
            Handle::new(8191, MAX_SLOTS, (1 << 16) - 1, 126).to_raw(),
            Handle::RAW_LIMIT - 1,
            "the largest handle is just below the limit"
        );
        assert!(Handle::from_raw(0).is_none());
        assert_eq!(Handle::from_raw(1 << 30).unwrap().slot(), None);
    }

    #[test]
    fn entries_round_trip() {
        let cases = [
            Entry::Allocated {
                generation: 0,
                zspage: 0,
                obj: 0,
            },
            Entry::Allocated {
                generation: (1 << 16) - 1,
                zspage: MAX_ZSPAGES - 1,
                obj: MAX_OBJS - 1,
            },
            Entry::Free {
                generation: 5,
                next: NO_SLOT,
            },
            Entry::Free {
                generation: 0,
                next: 0,
            },
        ];
        for e in cases {
            assert_eq!(Entry::decode(e.encode()), e);
        }
        assert_eq!(next_generation((1 << 16) - 1), 0);
    }

    #[test]
    fn object_lock() {
        assert_eq!(MAX_READERS, 63);
        let cell = EntryCell::default();
        cell.store(Entry::Allocated {
            generation: 4,
            zspage: 9,
            obj: 2,
        });
        let loc = Location { zspage: 9, obj: 2 };
        assert_eq!(cell.lock_shared(4), Ok(loc));
        assert_eq!(cell.lock_shared(4), Ok(loc));
        assert_eq!(cell.lock_shared(5), Err(Refusal::Stale));
        assert!(
            cell.try_lock_exclusive().is_none(),
            "readers block the compactor"
        );
        cell.unlock_shared();
        cell.unlock_shared();
        assert_eq!(cell.try_lock_exclusive(), Some(loc));
        assert!(cell.try_lock_exclusive().is_none());
        cell.replace_exclusive(Entry::Allocated {
            generation: 4,
            zspage: 1,
            obj: 0,
        });
        assert!(!cell.is_locked());
        assert_eq!(cell.lock_exclusive(4), Ok(Location { zspage: 1, obj: 0 }));
        cell.replace_exclusive(Entry::Free {
            generation: 5,
            next: NO_SLOT,
        });
        assert_eq!(cell.lock_shared(4), Err(Refusal::Freed));
    }

    #[test]
    fn exclusive_waits_for_readers() {
        use std::sync::Arc;
        let cell = Arc::new(EntryCell::default());
        cell.store(Entry::Allocated {
            generation: 1,
            zspage: 0,
            obj: 0,
        });
        let shared = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (cell, shared) = (cell.clone(), shared.clone());
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        if t % 2 == 0 {
                            cell.lock_exclusive(1).unwrap();
                            let v = shared.load(Ordering::Relaxed);
                            std::hint::spin_loop();
                            shared.store(v + 1, Ordering::Relaxed);
                            cell.unlock_exclusive();
                        } else {
                            cell.lock_shared(1).unwrap();
                            let a = shared.load(Ordering::Relaxed);
                            std::hint::spin_loop();
                            assert_eq!(a, shared.load(Ordering::Relaxed));
                            cell.unlock_shared();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(shared.load(Ordering::Relaxed), 4000);
        assert!(!cell.is_locked());
    }
}
