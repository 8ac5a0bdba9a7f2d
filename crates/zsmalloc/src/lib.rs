//! zsmalloc in user space.
//!
//! zsmalloc stores many variable-size objects (compressed pages, mostly)
//! densely: objects of similar size share a *size class*, and each class packs
//! its objects back to back into *zspages*, runs of 1..=16 pages (the
//! chain; up to [`geometry::MAX_ZSPAGE_PAGES`], 64, for the classes above a page of a
//! compression unit larger than a page), so an object may straddle two
//! pages. Callers hold *handles*, not addresses, so
//! that compaction can move objects to free whole zspages.
//!
//! ```
//! use zsmalloc::{Pool, PoolConfig};
//!
//! let pool = Pool::new(PoolConfig::kernel_compat()).unwrap();
//! let h = pool.malloc(100).unwrap();
//! pool.write(h, b"compressed bytes").unwrap();
//! assert_eq!(&*pool.read(h, 16).unwrap(), b"compressed bytes");
//! pool.free(h).unwrap();
//! assert_eq!(pool.total_pages(), 0);
//! ```
//!
//! The crate is built bottom-up, one concept per module:
//! - [`geometry`]: the size-class table of a configuration (pure arithmetic);
//! - `segvec`: append-only tables readable without a lock;
//! - `handle`: handles, handle-table entries, and the per-object lock;
//! - `zspage`: zspage bookkeeping and raw object memory;
//! - `frames`: default mode's 4 KiB frames of shared system pages on pages
//!   above 4 KiB (which system page a zspage's next frame comes from);
//! - [`fullness`]: fullness groups and allocation order;
//! - `class`: one size class, its zspages and lists (under the class lock);
//! - `config`: what a pool is made from: mode, compaction algorithm, policy;
//! - `pool`: the object API, the modes' behaviour and the lock order;
//! - `compact`: the three compaction algorithms and the automatic policy;
//! - `stats`, `check`: counters, the debugfs-style table, the invariant walk;
//! - `zpool_impl`: the pool behind the shared [`zpool::ZPool`] trait.
//!
//! Pages come from [`pages::PageSource`], the only place that maps memory.

#![warn(missing_docs)]

mod check;
mod class;
mod compact;
mod config;
mod frames;
pub mod fullness;
pub mod geometry;
mod handle;
mod pool;
mod segvec;
mod stats;
mod zpool_impl;
mod zspage;

pub use compact::CompactResult;
pub use config::{
    default_unit_delta, AutoCompact, CompactionAlgo, Mode, PoolConfig, DEFAULT_RETAIN_DIVISOR,
};
pub use fullness::FullnessScheme;
pub use geometry::{
    ChainRule, ClassDelta, Geometry, GeometryConfig, GeometryError, LogicalClass, RequestRow,
    RequestSummary, SizeClass,
};
pub use handle::Handle;
pub use pages::{PagesError, SourceStats};
pub use pool::{ObjectRef, Pool, PoolError};
pub use stats::{ClassStats, PoolStats};
pub use zpool::ErrorKind;
