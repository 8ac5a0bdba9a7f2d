//! An append-only table whose elements never move, readable without a lock.
//!
//! Segments are allocated zeroed (element types promise that all-zero bytes
//! are their default, see [`ZeroDefault`]): large segments then come from
//! fresh, untouched pages, so a table costs memory only for the slots used.
//!
//! The handle table and the zspage table are read on every object access by
//! threads that hold no class lock, and grow while they are read. A `SegVec`
//! keeps its elements in segments of doubling size that are allocated once and
//! freed only when the table drops, so `&T` stays valid for the table's
//! lifetime and a lookup is two loads. Elements are created with `Default`
//! and are expected to be made of atomics: the table publishes slots, the
//! element types synchronise their own contents.
//!
//! It owns only the segment memory; it knows nothing of what its elements mean.

use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Types whose default value is all-zero bytes.
///
/// # Safety
/// An all-zero bit pattern must be a valid value of the type, equal to its
/// `Default`, and the type must need no drop.
pub(crate) unsafe trait ZeroDefault {}

// SAFETY: an atomic integer of all-zero bytes is 0, its default; no drop.
unsafe impl ZeroDefault for AtomicU64 {}
// SAFETY: an atomic pointer of all-zero bytes is null, its default; no drop.
unsafe impl<T> ZeroDefault for AtomicPtr<T> {}

/// log2 of the first segment's length.
const FIRST_SHIFT: u32 = 4;
/// Number of segments: enough for 16 * (2^30 - 1) elements. The first
/// segment is small because most tables (one handle and one zspage table
/// per class) stay small: 370 tables of 64 elements cost 190 KiB, mostly
/// empty, in a server holding 88 MiB.
const SEGMENTS: usize = 30;

pub(crate) struct SegVec<T> {
    segments: [AtomicPtr<T>; SEGMENTS],
    len: AtomicUsize,
    grow_lock: Mutex<()>,
}

// SAFETY: the table hands out `&T` to any thread, so it is Sync when T is
// Sync; it owns its Ts, so it is Send when T is Send.
unsafe impl<T: Sync + Send> Sync for SegVec<T> {}
// SAFETY: see above.
unsafe impl<T: Send> Send for SegVec<T> {}

/// (segment, offset) of element `i`.
fn locate(i: usize) -> (usize, usize) {
    let j = i + (1 << FIRST_SHIFT);
    let top = (usize::BITS - 1 - j.leading_zeros()) as usize;
    (top - FIRST_SHIFT as usize, j - (1 << top))
}

fn segment_len(seg: usize) -> usize {
    1 << (seg + FIRST_SHIFT as usize)
}

impl<T: ZeroDefault> SegVec<T> {
    pub(crate) fn new() -> Self {
        SegVec {
            segments: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            len: AtomicUsize::new(0),
            grow_lock: Mutex::new(()),
        }
    }

    /// Number of published elements.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// The element at `i`, if published.
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len() {
            return None;
        }
        let (seg, off) = locate(i);
        let base = self.segments[seg].load(Ordering::Acquire);
        debug_assert!(!base.is_null());
        // SAFETY: `i < len`, and `len` is only raised (with Release, after the
        // segment pointer was stored) once segment `seg` exists with at least
        // `off + 1` default-initialised elements; segments are never freed
        // before the table drops, which `&self` rules out.
        Some(unsafe { &*base.add(off) })
    }

    /// Publishes one more element (all-zero, its default) and returns its
    /// index, or `None` when the table is full.
    pub(crate) fn push_default(&self) -> Option<usize> {
        let _guard = self.grow_lock.lock().unwrap_or_else(|e| e.into_inner());
        let i = self.len.load(Ordering::Relaxed);
        let (seg, off) = locate(i);
        if seg >= SEGMENTS {
            return None;
        }
        if off == 0 {
            let layout = segment_layout::<T>(seg);
            // SAFETY: the layout has a non-zero size (segments hold at least
            // 16 elements of a non-zero-sized type, checked in the layout).
            let ptr = unsafe { alloc_zeroed(layout) }.cast::<T>();
            if ptr.is_null() {
                handle_alloc_error(layout);
            }
            self.segments[seg].store(ptr, Ordering::Release);
        }
        self.len.store(i + 1, Ordering::Release);
        Some(i)
    }
}

fn segment_layout<T>(seg: usize) -> Layout {
    assert!(std::mem::size_of::<T>() > 0, "SegVec needs sized elements");
    Layout::array::<T>(segment_len(seg)).expect("segment size fits in isize")
}

impl<T> Drop for SegVec<T> {
    fn drop(&mut self) {
        for (seg, slot) in self.segments.iter_mut().enumerate() {
            let ptr = *slot.get_mut();
            if !ptr.is_null() {
                // SAFETY: the pointer came from `alloc_zeroed` with exactly
                // this layout in `push_default` and is freed only here; the
                // elements need no drop (`ZeroDefault`).
                unsafe { dealloc(ptr.cast(), segment_layout::<T>(seg)) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_covers_indices_without_gaps() {
        let mut expected = (0usize, 0usize);
        for i in 0..100_000 {
            assert_eq!(locate(i), expected, "index {i}");
            expected.1 += 1;
            if expected.1 == segment_len(expected.0) {
                expected = (expected.0 + 1, 0);
            }
        }
    }

    #[test]
    fn elements_stay_put_while_growing() {
        let v: SegVec<AtomicU64> = SegVec::new();
        assert!(v.get(0).is_none());
        let first = v.get(v.push_default().unwrap()).unwrap() as *const AtomicU64;
        for i in 1..10_000u64 {
            let idx = v.push_default().unwrap();
            v.get(idx).unwrap().store(i, Ordering::Relaxed);
        }
        assert_eq!(v.get(0).unwrap() as *const AtomicU64, first);
        assert_eq!(v.len(), 10_000);
        assert_eq!(v.get(9_999).unwrap().load(Ordering::Relaxed), 9_999);
        assert!(v.get(10_000).is_none());
    }
}
