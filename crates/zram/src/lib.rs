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
//! Modules:
//! - `slot`: the 16-byte slot, its bit layout and lock, and what it holds,
//!   decoded once (`SlotContent`);
//! - `shard`: per-thread indexes and cache-line padding;
//! - `streams`: per-thread compression contexts;
//! - `huge`: raw pages kept beside allocators that cannot hold a page;
//! - [`compactor`]: the background compactor, its policy and counters;
//! - [`stats`]: counters and the `mm_stat` / `io_stat` / `debug_stat` files;
//! - [`store`]: the write, read, discard and control paths, and the lock
//!   order;
//! - [`mod@error`]: the [`StoreError`] type;
//! - [`backing`]: the backing store (a file or block device) and its block
//!   bitmap;
//! - `postprocess`: the state writeback and recompression share (backing
//!   store, budget, secondary compressors, "initialised") and their order;
//! - [`writeback`]: writing pages to the backing store and reading them back;
//! - [`recompress`]: recompressing pages with secondary compressors;
//! - [`policy`]: idle marking, recompression and writeback on a timer, and
//!   writeback as memory nears `mem_limit`, on a thread per store.
//!
//! The kernel's own zram, the peer the store is measured against, is the
//! lab's (`lab::kernel_zram`).

#![warn(missing_docs)]

pub mod backing;
pub mod compactor;
pub mod error;
mod huge;
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
pub use compactor::{AutoCompactMode, AutoCompactPolicy, AutoCompactStats};
pub use error::StoreError;
pub use policy::{PolicyConfig, PolicyRunner, PolicyStats};
pub use postprocess::{WritebackLimit, DEFAULT_WRITEBACK_BATCH, MAX_WRITEBACK_BATCH};
pub use recompress::RecompressRequest;
pub use stats::{
    BdStat, DebugStat, IoStat, MmStat, BD_STAT_COLUMNS, IO_STAT_COLUMNS, MM_STAT_COLUMNS,
};
pub use store::{same_filled, IdleCutoff, SlotInfo, SlotState, Store};
pub use writeback::{WritebackMode, WritebackReport, WritebackRequest};
