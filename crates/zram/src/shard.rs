//! Per-thread sharding: a small index per thread and cache-line padding, so
//! that threads working on different pages do not write the same cache line
//! (the kernel uses per-CPU data for the same reason).
//!
//! Owns the per-thread index and the padding; may not touch any other module
//! (floor 0).
//!
//! Owns nothing but these two helpers.

use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A value alone on its cache line (two lines: adjacent-line prefetch).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Padded<T>(pub T);

impl<T> Deref for Padded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// This thread's index: threads are numbered in the order they first ask.
pub fn thread_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static ID: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    ID.with(|id| *id)
}

/// Shards for this machine: twice the CPUs.
pub fn shard_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()) * 2
}
