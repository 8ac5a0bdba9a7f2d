//! The C API of zmem's region, built as `libzmem_region.so` and `.a`, with
//! the header `include/zmem_region.h` (installed by
//! `scripts/install-clib zmem_region`).
//!
//! A region is compressed memory for one process: an anonymous mapping the
//! program uses as ordinary memory, whose pages beyond a resident limit are
//! compressed into a zram store and come back on a userfaultfd fault (see
//! the `zmem-region` crate). C gets it as an opaque `struct zmem_region *`
//! made by `zmem_region_new` and freed by `zmem_region_free`, the region's
//! hints (`cold`, `hot`, `willneed`, `touch`) on byte ranges, and its
//! statistics as JSON. Failures return NULL or -1 and set `errno`.
//!
//! This crate owns the C ABI only: symbol names, the opaque type, argument
//! checks, the compressor name's translation into the region's store
//! recipe, the one mapping of a region error to an errno, and the rule that
//! no panic crosses into C. It does not touch the region's internals:
//! everything goes through the public API of the `zmem-region` crate, and
//! the compressor name is judged by `recipe` (which asks `zcomp`).
//!
//! Modules:
//! - [`errno`]: errno values, the mapping of a [`region::RegionError`] to
//!   one, and setting the C caller's `errno`;
//! - [`api`]: the opaque [`ZmemRegion`] and the exported `extern "C"`
//!   functions.

#![warn(missing_docs)]

pub mod api;
pub mod errno;

pub use api::*;
