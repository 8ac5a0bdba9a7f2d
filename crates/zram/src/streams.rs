//! Compression contexts, one per thread at a time, as zram keeps one stream
//! per CPU.
//!
//! A fixed array of stripes (twice the CPUs), each a mutex (on its own cache
//! line) around a lazily
//! made [`Context`]. A thread starts at its own stripe and takes the first
//! free one; only when all are busy does it wait, on its own. So threads never
//! share one global context, and a context is made at most once per stripe.
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

impl Stream<'_> {
    /// The context.
    pub fn context(&mut self) -> &mut Context {
        self.guard
            .as_mut()
            .expect("a stream's context is made before it is handed out")
    }
}
