//! The probation slab: uncompressed copies of pages whose mapping was
//! dropped to see whether they are still used. A fault on such a page is
//! served by copying the slot back (no decompression); a page left
//! untouched for the probation time goes to the store.
//!
//! Owns the slots and their free list; which page a slot holds is the page
//! table's (the page's stamp) and the slot's owner word here. Makes no
//! system call after it is made.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::buf::LockedBuf;

/// No owner.
const FREE: u32 = u32::MAX;

/// The slab.
#[derive(Debug)]
pub(crate) struct Probation {
    mem: Option<LockedBuf>,
    page_size: usize,
    owner: Box<[AtomicU32]>,
    since_ms: Box<[AtomicU64]>,
    free: Mutex<Vec<u32>>,
}

impl Probation {
    /// `slots` slots of `page_size` bytes (none: probation off).
    pub(crate) fn new(slots: usize, page_size: usize) -> std::io::Result<Probation> {
        // Locked as slots are first written: a region whose pages never go
        // on probation (evicted at the limit, not by age) pays nothing for
        // the slab, and slots are reused last-freed first, so the pages
        // written stay few.
        let mem = if slots > 0 {
            Some(LockedBuf::on_fault(slots * page_size)?)
        } else {
            None
        };
        Ok(Probation {
            mem,
            page_size,
            owner: (0..slots).map(|_| AtomicU32::new(FREE)).collect(),
            since_ms: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            free: Mutex::new((0..slots as u32).rev().collect()),
        })
    }

    /// Slots in all.
    pub(crate) fn slots(&self) -> usize {
        self.owner.len()
    }

    /// Takes a free slot for page `page` at time `now_ms` (no allocation:
    /// the free list never grows past its first capacity).
    pub(crate) fn take(&self, page: usize, now_ms: u64) -> Option<u32> {
        let s = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop()?;
        self.owner[s as usize].store(page as u32, Ordering::Release);
        self.since_ms[s as usize].store(now_ms, Ordering::Release);
        Some(s)
    }

    /// Gives slot `s` back.
    pub(crate) fn give(&self, s: u32) {
        self.owner[s as usize].store(FREE, Ordering::Release);
        self.free.lock().unwrap_or_else(|e| e.into_inner()).push(s);
    }

    /// The page slot `s` holds and when it went in, if taken.
    pub(crate) fn owner(&self, s: usize) -> Option<(usize, u64)> {
        let o = self.owner[s].load(Ordering::Acquire);
        (o != FREE).then(|| (o as usize, self.since_ms[s].load(Ordering::Acquire)))
    }

    /// Slots taken now.
    pub(crate) fn used(&self) -> usize {
        self.slots() - self.free.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The memory of slot `s`.
    pub(crate) fn slot_ptr(&self, s: u32) -> *mut u8 {
        let mem = self.mem.as_ref().map_or(std::ptr::null_mut(), |m| m.ptr());
        mem.wrapping_add(s as usize * self.page_size)
    }
}
