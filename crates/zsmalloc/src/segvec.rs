//! An append-only table whose elements never move, readable without a lock.
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

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Mutex;

/// log2 of the first segment's length.
const FIRST_SHIFT: u32 = 6;
/// Number of segments: enough for 64 * (2^28 - 1) elements.
const SEGMENTS: usize = 28;

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

impl<T: Default> SegVec<T> {
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

    /// Publishes one more element (created with `Default`) and returns its
    /// index, or `None` when the table is full.
    pub(crate) fn push_default(&self) -> Option<usize> {
        let _guard = self.grow_lock.lock().unwrap_or_else(|e| e.into_inner());
        let i = self.len.load(Ordering::Relaxed);
        let (seg, off) = locate(i);
        if seg >= SEGMENTS {
            return None;
        }
        if off == 0 {
            let n = segment_len(seg);
            let boxed: Box<[T]> = (0..n).map(|_| T::default()).collect();
            let ptr = Box::into_raw(boxed).cast::<T>();
            self.segments[seg].store(ptr, Ordering::Release);
        }
        self.len.store(i + 1, Ordering::Release);
        Some(i)
    }
}

impl<T> Drop for SegVec<T> {
    fn drop(&mut self) {
        for (seg, slot) in self.segments.iter_mut().enumerate() {
            let ptr = *slot.get_mut();
            if !ptr.is_null() {
                let n = segment_len(seg);
                // SAFETY: the pointer came from `Box::<[T]>::into_raw` of a
                // slice of exactly `segment_len(seg)` elements in
                // `push_default`, and is freed only here, once.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, n)) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

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
