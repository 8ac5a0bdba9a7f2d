//! What writeback and recompression (the kernel's "post-processing") share:
//! the lock that lets one of them run at a time, and the order candidates
//! are taken in.
//!
//! Owns the post-processing lock and the bucket order. May not touch the
//! slots or either path: `writeback` and `recompress` sit above it.
//!
//! The lock (`running`) is held by a writeback or a recompression for its
//! whole run, as the kernel's writers of `writeback` and `recompress` hold
//! its device lock; it is taken before any slot lock, never inside one.

use std::sync::{Mutex, MutexGuard};

/// The post-processing lock of one store.
#[derive(Default)]
pub(crate) struct PostProcess {
    running: Mutex<()>,
}

impl PostProcess {
    /// Held while one writeback or recompression runs (no two at once).
    pub(crate) fn run(&self) -> MutexGuard<'_, ()> {
        // A unit: a panic cannot leave it half-updated.
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The kernel's post-processing buckets: 64-byte size ranges.
pub(crate) const BUCKET_BYTES: usize = 64;

/// Orders candidates `(index, stored length)` as the kernel takes them: by
/// bucket of 64 bytes of stored length, the largest first (the most memory
/// back per page), in index order within a bucket.
pub(crate) fn by_bucket(candidates: &mut [(u64, usize)]) {
    candidates.sort_by_key(|&(index, size)| (std::cmp::Reverse(size / BUCKET_BYTES), index));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_take_the_largest_first() {
        let mut c = vec![(0, 100), (1, 4096), (2, 70), (3, 127), (4, 200)];
        by_bucket(&mut c);
        let order: Vec<u64> = c.iter().map(|x| x.0).collect();
        // 70, 100 and 127 bytes share the 64..127 bucket: index order there.
        assert_eq!(order, vec![1, 4, 0, 2, 3]);
    }
}
