//! The C API of zmem's zsmalloc, built as `libzsmalloc_capi.so` and `.a`
//! and installed (`scripts/install-clib zsmalloc`) as `libzsmalloc.so` and
//! `libzsmalloc.a`, with the header `include/zsmalloc.h`.
//!
//! The functions have the kernel's names and shapes (`zs_create_pool`,
//! `zs_malloc`, `zs_obj_read_begin`, ...), adapted to user space: no `gfp`
//! or `nid` arguments, and `_checked` variants that report what the kernel's
//! `void` functions can only ignore. Handles are `unsigned long` values with
//! the kernel's error-pointer encoding (see [`errno`]).
//!
//! This crate owns the C ABI only: symbol names, `#[repr(C)]` structs, the
//! error encoding, the table of read holds that spans `zs_obj_read_begin` and
//! `zs_obj_read_end`, and the rule that no panic crosses into C. It does not
//! touch the allocator's internals: everything goes through the public API of
//! the `zmem-zsmalloc` crate (imported as `zs`, because this library is
//! itself named `zsmalloc`).
//!
//! Modules:
//! - [`errno`]: errno values and the handle error encoding;
//! - [`config`]: `struct zs_pool_config` and its translation to
//!   [`zs::PoolConfig`];
//! - `pool`: the object behind `struct zs_pool *` and its hold table;
//! - [`api`]: the exported `extern "C"` functions.

#![warn(missing_docs)]

#[cfg(not(target_pointer_width = "64"))]
compile_error!("zmem's C API passes 64-bit handles as `unsigned long`: 64-bit targets only");

pub mod api;
pub mod config;
pub mod errno;
mod pool;

pub use api::*;
pub use config::{ZsPoolConfig, ZsPoolStats};
pub use pool::ZsPool;
