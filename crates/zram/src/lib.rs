//! A zram-style compressed block store in user space.
//!
//! A [`Store`] is a disk of N pages. Each page written is compressed and kept
//! in an allocator (any [`zpool::ZPool`]: zsmalloc by default), as the
//! kernel's zram keeps it: pages of one repeated word take no allocator
//! memory, pages that compress badly are kept raw, and the statistics are the
//! kernel's, printed in its exact format.
//!
//! ```
//! use std::sync::Arc;
//! use zram::Store;
//!
//! let pool = Arc::new(zsmalloc::Pool::new(zsmalloc::PoolConfig::kernel_compat()).unwrap());
//! let store = Store::new(pool, zcomp::Compressor::parse("lz4", "").unwrap(), 256).unwrap();
//! let mut page = vec![0u8; 4096];
//! page[..11].copy_from_slice(b"hello, zram");
//! store.write_page(3, &page).unwrap();
//! let mut back = vec![0u8; 4096];
//! store.read_page(3, &mut back).unwrap();
//! assert_eq!(back, page);
//! println!("{}", store.mm_stat());
//! ```
//!
//! The crate is a tower, built bottom-up; a module imports only modules on
//! floors below its own (no cycle), and each module's first comment says
//! what it owns and what it may not touch:
//!
//! 0. [`mod@error`]: the [`StoreError`] type; `shard`: per-thread indexes and
//!    cache-line padding.
//! 1. [`stats`]: the counters and every statistics type (`mm_stat`,
//!    `io_stat`, `bd_stat`, `debug_stat` with the compactor's and the
//!    policy's lines); `streams`: per-thread compression contexts; `huge`:
//!    raw pages kept beside allocators that cannot hold a page;
//!    [`backing`]: the backing store (a file or block device) and its
//!    block bitmap.
//! 2. `slot`: the 16-byte slot, its bit layout and lock, and what it
//!    holds, decoded once (`SlotContent`).
//! 3. [`compactor`]: the background compactor, its policy and counters. It
//!    sees only the allocator and the counters, so it sits below the core,
//!    which tells it of each free with one relaxed load.
//! 4. `disk`: **the core store**: the slot table, the allocator, the
//!    streams (primary and secondaries), the counters, the backing store's
//!    blocks and the memory limit; the write, read, discard and reset
//!    paths; and the narrow crate-internal API the floors above use (lock
//!    a slot, scan slots with a filter, free a slot's contents, account).
//!    Its write path asks the memory-aware rule through its own
//!    `LimitRule` trait, implemented above.
//! 5. [`idle`]: idle marking and [`IdleCutoff::parse`], the one parser of
//!    the `idle` syntax; `postprocess`: the lock that lets one writeback or
//!    recompression run at a time, and the kernel's bucket order.
//! 6. [`writeback`]: writing pages to the backing store (its budget, batch
//!    size and `compressed_writeback`); [`recompress`]: recompressing
//!    pages with secondary compressors (their `algorithm_params`).
//! 7. [`policy`]: idle marking, recompression and writeback on a timer,
//!    and writeback as memory nears `mem_limit`, on a thread per store.
//! 8. [`store`]: the public [`Store`], which assembles the floors and
//!    delegates each method to the module that owns it.
//!
//! The kernel's own zram, the peer the store is measured against, is
//! tune's (`tune::kernel_zram`).

#![warn(missing_docs)]

pub mod backing;
pub mod compactor;
mod disk;
pub mod error;
mod huge;
pub mod idle;
pub mod policy;
mod postprocess;
pub mod recompress;
mod shard;
mod slot;
pub mod stats;
pub mod store;
mod streams;
pub mod writeback;

pub use backing::{BackingFile, BackingStore};
pub use compactor::{AutoCompactMode, AutoCompactPolicy};
pub use disk::MAX_SECONDARIES;
pub use error::StoreError;
pub use idle::IdleCutoff;
pub use policy::{PolicyConfig, PolicyRunner};
pub use recompress::{RecompAlgorithm, RecompressRequest};
pub use stats::{
    AutoCompactStats, BdStat, DebugStat, IoStat, MmStat, PolicyStats, BD_STAT_COLUMNS,
    IO_STAT_COLUMNS, MM_STAT_COLUMNS,
};
pub use store::{same_filled, SlotInfo, SlotState, Store};
pub use writeback::{
    WritebackLimit, WritebackMode, WritebackReport, WritebackRequest, DEFAULT_WRITEBACK_BATCH,
    MAX_WRITEBACK_BATCH,
};
