//! A model of the kernel's zswap (Linux 7.3's `mm/zswap.c`), the other
//! user of zsmalloc, over zmem's parts: a program or test gives it a swap
//! area's pages one by one and reads the kernel's own figures back.
//!
//! ```
//! use zswap::{Outcome, Zswap, ZswapConfig};
//!
//! // 7.3's defaults (lzo, 20% of RAM, accept at 90%) on 1 GiB of RAM.
//! let config = ZswapConfig::new(zcomp::Algorithm::Lzo, 262_144, 2);
//! let mut zswap = Zswap::new(config).unwrap();
//! let mut page = vec![0u8; 4096];
//! assert_eq!(zswap.store(0, &page).unwrap(), Outcome::ZeroFilled);
//! page[..5].copy_from_slice(b"zswap");
//! assert!(matches!(zswap.store(1, &page).unwrap(), Outcome::Compressed { .. }));
//! let stats = zswap.stats();
//! assert_eq!(stats.debugfs.stored_pages, 1);
//! assert_eq!(stats.vmstat.swpout_zero, 1);
//! assert_eq!(stats.debugfs.pool_total_size, 4096 * zswap.total_pages());
//! ```
//!
//! A zswap is one zsmalloc pool per compressor in the kernel's geometry
//! (zsmalloc's kernel-compat mode), the kernel's compressor (zcomp's
//! kernel-compat compressors), a `struct zswap_entry` per stored page in an
//! xarray per 64 MiB of swap, an LRU the shrink worker writes back from,
//! and the limit `max_pool_percent` of RAM with `accept_threshold_percent`
//! hysteresis. `pool_total_size` is only the pool's pages, as in the
//! kernel; the metadata (the entries', the zsmalloc handles' and the xarray
//! nodes' slabs) is counted apart.
//!
//! Modules, bottom-up:
//! - [`slab`]: SLUB's slot sizes and slab orders (pure);
//! - [`xarray`]: the xarrays' node count (pure);
//! - [`params`]: the module parameters, 7.3's defaults and a running
//!   kernel's values;
//! - [`stats`]: the debugfs files, vmstat events and metadata, by the
//!   kernel's names;
//! - `model`: [`Zswap`], store, load, invalidate, the limit and the shrink
//!   worker.
//!
//! It sits beside `zram` in the layers: both are front ends over the same
//! allocator and compressors, and neither knows of the other.

#![warn(missing_docs)]

mod model;
pub mod params;
pub mod slab;
pub mod stats;
pub mod xarray;

pub use model::{
    Loaded, Outcome, Reject, Zswap, ZswapConfig, ZswapError, MAX_RECLAIM_RETRIES, SWAP_CLUSTER_MAX,
};
pub use stats::{Debugfs, Limits, Metadata, VmEvents, ZswapStats};

#[cfg(test)]
mod tests;
