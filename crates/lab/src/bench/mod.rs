//! The benchmarks, one file each, run side by side with their peers:
//! - [`alloc`]: zsmalloc against glibc, jemalloc and mimalloc on the object
//!   sizes real data compresses to;
//! - [`read_latency`]: object read latency with and without compaction on
//!   another thread;
//! - [`store`]: the store's write and read speed against raw compression
//!   and the kernel's zram;
//! - [`serve`]: `zmem serve` beside nbdkit's memory plugin;
//! - [`compressors`]: each compressor's own speed and ratio, beside the
//!   kernel's zram with the same algorithm;
//! - [`region`]: a region's fault service beside the kernel's own fault,
//!   and the memory it saves at a limit on real data;
//! - [`promotion`]: `zmem bench region --promotion-run`, the region's
//!   promotion rate against the controller's target over a phase change;
//! - [`data`]: the data sets they share.
//!
//! The `zmem bench` command tree and its dispatch are the `zmem` binary's.

pub mod alloc;
pub mod compressors;
pub mod data;
pub mod promotion;
pub mod read_latency;
pub mod region;
pub mod serve;
pub mod store;
