//! What a store keeps for work done on pages after they are stored
//! (writeback and recompression, the kernel's "post-processing"): the
//! backing store, the writeback budget, the secondary compressors, whether
//! the store is initialised, and the order candidates are taken in.
//!
//! "Initialised" is the kernel's `init_done` (disksize set). A zmem store
//! always has its size, so here a store is initialised from its first page
//! write until `reset`: before that, `backing_dev` and `recomp_algorithm`
//! may be set (afterwards they fail with `EBUSY`, as the kernel's do once
//! disksize is set).
//!
//! This module owns that state and its locks: `running` (one writeback or
//! recompression at a time, taken before any slot lock), and the `RwLock`s
//! of the backing store and the secondaries and the mutex of the
//! secondaries' `algorithm_params`, which are leaves (held only to clone
//! or replace a value). The paths themselves are in `writeback` and `recompress`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::backing::Blocks;
use crate::streams::Streams;

/// Secondary compressors: priorities 1 to 3 (the kernel's `ZRAM_MAX_COMPS`
/// is 4 with the primary).
pub const MAX_SECONDARIES: usize = 3;

/// Pages one batched write takes by default (`writeback_batch_size`).
pub const DEFAULT_WRITEBACK_BATCH: usize = 32;

/// The largest `writeback_batch_size` (its buffer is this many pages).
pub const MAX_WRITEBACK_BATCH: usize = 256;

/// The writeback budget (`writeback_limit_enable`, `writeback_limit`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WritebackLimit {
    /// Whether the budget applies.
    pub enabled: bool,
    /// 4 KiB units writeback may still write.
    pub limit: u64,
}

/// The post-processing state of one store.
#[derive(Default)]
pub struct PostProcess {
    /// The backing store and its block bitmap.
    backing: RwLock<Option<Arc<Blocks>>>,
    limit: Mutex<WritebackLimit>,
    /// `writeback_batch_size` (0: [`DEFAULT_WRITEBACK_BATCH`]).
    batch: AtomicUsize,
    /// `writeback_compressed`: write compressed objects, packed, instead of
    /// decompressed pages.
    compressed: AtomicBool,
    /// Streams of priorities 1..=3 (index 0 is priority 1).
    secondaries: RwLock<[Option<Arc<Streams>>; MAX_SECONDARIES]>,
    /// `algorithm_params` of priorities 1..=3, kept whether or not that
    /// priority has a compressor yet (as the kernel keeps them).
    secondary_params: Mutex<[zcomp::Params; MAX_SECONDARIES]>,
    initialised: AtomicBool,
    running: Mutex<()>,
    /// The policies that run by themselves (the `policy` module).
    pub(crate) policy: crate::policy::Policy,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The values under these mutexes are plain words: a panic cannot leave
    // them half-updated.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl PostProcess {
    /// Marks the store initialised (a load first: the write path calls this
    /// for every page, and must not write a shared line each time).
    pub fn mark_initialised(&self) {
        if !self.initialised.load(Ordering::Relaxed) {
            self.initialised.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a page has been written since the store was made or reset.
    pub fn initialised(&self) -> bool {
        self.initialised.load(Ordering::Relaxed)
    }

    /// After `reset`: not initialised any more.
    pub fn clear_initialised(&self) {
        self.initialised.store(false, Ordering::Relaxed);
    }

    /// The backing store, if one is set.
    pub fn backing(&self) -> Option<Arc<Blocks>> {
        self.backing
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sets (or replaces) the backing store.
    pub fn set_backing(&self, blocks: Option<Arc<Blocks>>) {
        *self.backing.write().unwrap_or_else(|p| p.into_inner()) = blocks;
    }

    /// The writeback budget, to read or change.
    pub fn limit(&self) -> MutexGuard<'_, WritebackLimit> {
        lock(&self.limit)
    }

    /// Pages a batched write takes (`writeback_batch_size`).
    pub fn batch(&self) -> usize {
        match self.batch.load(Ordering::Relaxed) {
            0 => DEFAULT_WRITEBACK_BATCH,
            n => n,
        }
    }

    /// Sets `writeback_batch_size` (the caller checks the range).
    pub fn set_batch(&self, pages: usize) {
        self.batch.store(pages, Ordering::Relaxed);
    }

    /// Whether writeback writes compressed objects (`writeback_compressed`).
    pub fn compressed(&self) -> bool {
        self.compressed.load(Ordering::Relaxed)
    }

    /// Sets `writeback_compressed` (the caller checks the store is not
    /// initialised).
    pub fn set_compressed(&self, on: bool) {
        self.compressed.store(on, Ordering::Relaxed);
    }

    /// The streams of `priority` (0 is the caller's primary: `None`).
    pub fn secondary(&self, priority: usize) -> Option<Arc<Streams>> {
        let table = self.secondaries.read().unwrap_or_else(|p| p.into_inner());
        table.get(priority.checked_sub(1)?)?.clone()
    }

    /// Sets the compressor of `priority` (1..=3).
    pub fn set_secondary(&self, priority: usize, streams: Streams) {
        let mut table = self.secondaries.write().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = table.get_mut(priority.wrapping_sub(1)) {
            *entry = Some(Arc::new(streams));
        }
    }

    /// The `algorithm_params` settings of `priority` (1..=3).
    pub fn secondary_params(&self, priority: usize) -> zcomp::Params {
        lock(&self.secondary_params)
            .get(priority.wrapping_sub(1))
            .cloned()
            .unwrap_or_default()
    }

    /// Keeps the `algorithm_params` settings of `priority` (1..=3).
    pub fn set_secondary_params(&self, priority: usize, params: zcomp::Params) {
        if let Some(entry) = lock(&self.secondary_params).get_mut(priority.wrapping_sub(1)) {
            *entry = params;
        }
    }

    /// The highest priority with a compressor (0: only the primary).
    pub fn highest_priority(&self) -> usize {
        let table = self.secondaries.read().unwrap_or_else(|p| p.into_inner());
        table.iter().rposition(Option::is_some).map_or(0, |i| i + 1)
    }

    /// Held while one writeback or recompression runs (no two at once, as
    /// the kernel's writers of `writeback` and `recompress` hold its device
    /// lock).
    pub fn run(&self) -> MutexGuard<'_, ()> {
        lock(&self.running)
    }
}

/// The kernel's post-processing buckets: 64-byte size ranges.
pub const BUCKET_BYTES: usize = 64;

/// Orders candidates `(index, stored length)` as the kernel takes them: by
/// bucket of 64 bytes of stored length, the largest first (the most memory
/// back per page), in index order within a bucket.
pub fn by_bucket(candidates: &mut [(u64, usize)]) {
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

    #[test]
    fn highest_priority_follows_the_table() {
        let pp = PostProcess::default();
        assert_eq!(pp.highest_priority(), 0);
        let zstd = zcomp::Compressor::parse("zstd", "").unwrap();
        pp.set_secondary(2, Streams::new(zstd));
        assert_eq!(pp.highest_priority(), 2);
        assert!(pp.secondary(1).is_none() && pp.secondary(2).is_some());
        assert!(pp.secondary(0).is_none() && pp.secondary(4).is_none());
    }
}
