//! Compression contexts, one per thread at a time, as zram keeps one stream
//! per CPU.
//!
//! Owns the compression contexts; may not touch slots, allocators or any
//! module but `shard` (floor 1).
//!
//! A fixed array of stripes (twice the CPUs), each a mutex (on its own cache
//! line) around a lazily
//! made [`Context`]. A thread starts at its own stripe and takes the first
//! free one; only when all are busy does it wait, on its own. So threads never
//! share one global context, and a context is made at most once per stripe
//! while the store is busy.
//!
//! Contexts are not small: zstd's at level 3 on a 32 KiB page holds a
//! 524 KiB workspace (hash and chain tables sized for the page) plus a
//! decompression context and a scratch buffer, so four stripes pin about
//! 2 MiB, as much as 3% of a 256 MiB disk's compressed data. The kernel keeps
//! its per-CPU streams for the device's life; a user-space store that exists
//! to save memory gives them back when it goes idle instead
//! ([`Streams::release_idle`]): the next burst makes them again, which costs
//! one allocation and the workspace's first-touch page faults per stripe
//! (tens of microseconds against a burst of many pages).
//!
//! This module owns the contexts; it knows nothing of slots or allocators.

use std::sync::{Mutex, MutexGuard, TryLockError};

use zcomp::{Compressor, Context};

use crate::shard::{shard_count, thread_index, Padded};

/// The stripes of one store.
pub struct Streams {
    compressor: Compressor,
    stripes: Box<[Padded<Mutex<Option<Context>>>]>,
}

/// A context borrowed from a stripe.
pub struct Stream<'a> {
    guard: MutexGuard<'a, Option<Context>>,
}

impl Streams {
    /// Stripes for `compressor`, twice the available CPUs.
    pub fn new(compressor: Compressor) -> Streams {
        Streams {
            compressor,
            stripes: (0..shard_count())
                .map(|_| Padded(Mutex::new(None)))
                .collect(),
        }
    }

    /// The compressor.
    pub fn compressor(&self) -> &Compressor {
        &self.compressor
    }

    /// A context for this thread.
    pub fn get(&self) -> Result<Stream<'_>, zcomp::Error> {
        let n = self.stripes.len();
        let start = thread_index() % n;
        let mut guard = None;
        for i in 0..n {
            match self.stripes[(start + i) % n].try_lock() {
                Ok(g) => {
                    guard = Some(g);
                    break;
                }
                Err(TryLockError::Poisoned(p)) => {
                    guard = Some(p.into_inner());
                    break;
                }
                Err(TryLockError::WouldBlock) => {}
            }
        }
        let mut guard = match guard {
            Some(g) => g,
            None => self.stripes[start]
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        };
        if guard.is_none() {
            *guard = Some(self.compressor.context()?);
        }
        Ok(Stream { guard })
    }
}

impl Streams {
    /// Drops the contexts of the stripes no thread holds now, so that their
    /// memory goes back to the allocator; returns how many were dropped. A
    /// stripe in use keeps its context (it is busy, not idle).
    pub fn release_idle(&self) -> usize {
        let mut released = 0;
        for stripe in self.stripes.iter() {
            let mut guard = match stripe.try_lock() {
                Ok(g) => g,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => continue,
            };
            if guard.take().is_some() {
                released += 1;
            }
        }
        released
    }

    /// How many pages can be compressed at once: the stripes (the kernel's
    /// per-CPU streams, read as `max_comp_streams`).
    pub fn max(&self) -> usize {
        self.stripes.len()
    }

    /// Stripes that hold a context now.
    pub fn live(&self) -> usize {
        self.stripes
            .iter()
            .filter(|s| match s.try_lock() {
                Ok(g) => g.is_some(),
                Err(TryLockError::Poisoned(p)) => p.into_inner().is_some(),
                Err(TryLockError::WouldBlock) => true,
            })
            .count()
    }
}

impl Stream<'_> {
    /// The context.
    pub fn context(&mut self) -> &mut Context {
        self.guard
            .as_mut()
            .expect("a stream's context is made before it is handed out")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_contexts_are_released_and_made_again() {
        let streams = Streams::new(Compressor::parse("zstd", "").unwrap());
        assert_eq!(streams.live(), 0, "contexts are made lazily");
        let page: Vec<u8> = (0..32768u32).map(|i| (i % 251) as u8).collect();
        let packed = {
            let mut s = streams.get().unwrap();
            s.context().compress_buffered(&page).unwrap().to_vec()
        };
        assert_eq!(streams.live(), 1);
        {
            // A stripe in use keeps its context.
            let _held = streams.get().unwrap();
            assert_eq!(streams.release_idle(), 0);
            assert_eq!(streams.live(), 1);
        }
        assert_eq!(streams.release_idle(), 1);
        assert_eq!(streams.live(), 0);
        assert_eq!(streams.release_idle(), 0);
        // The next use makes a fresh context that reads what the old one wrote.
        let mut back = vec![0u8; page.len()];
        streams
            .get()
            .unwrap()
            .context()
            .decompress(&packed, &mut back)
            .unwrap();
        assert_eq!(back, page);
        assert_eq!(streams.live(), 1);
    }
}
