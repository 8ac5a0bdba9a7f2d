//! Page compressors for zram in user space.
//!
//! The design follows the kernel's zcomp: a [`Compressor`] holds the shared,
//! immutable part (the [`Algorithm`], its level, dictionary and deflate
//! window, with prepared dictionaries) and hands out [`Context`]s, the
//! per-thread mutable part (the library state and scratch buffers), one per
//! thread as zram keeps one stream per CPU.
//!
//! Algorithms are chosen by zram's names (`lzo-rle`, `lzo`, `lz4`, `lz4hc`,
//! `zstd`, `deflate`, plus `lz4-flex`, a pure-Rust lz4), and settings by zram's
//! `algorithm_params` syntax (`"level=3 dict=/path"`). lz4, lz4hc and
//! deflate have two encoders ([`Encoder`]): liblz4 1.10 and zlib-rs, the
//! faster, by default, and the kernel's output byte for byte (zmem-lz4, the
//! kernel's lib/lz4, and the C zlib at the kernel's memLevel, whose encoder
//! is lib/zlib_deflate's), which [`Compressor::kernel_compat`] picks
//! (kernel-compat mode) and every lz4 or lz4hc dictionary uses (liblz4's
//! dictionary calls are not in the `lz4` crate's API).
//!
//! ```
//! use zcomp::Compressor;
//!
//! let zstd = Compressor::parse("zstd", "level=-1")?;
//! let mut ctx = zstd.context()?; // one per thread
//! let page = [42u8; 4096];
//! let compressed = ctx.compress_buffered(&page)?.to_vec();
//! let mut back = [0u8; 4096];
//! ctx.decompress(&compressed, &mut back)?;
//! assert_eq!(back, page);
//! # Ok::<(), zcomp::Error>(())
//! ```
//!
//! Modules, bottom-up:
//! - [`algorithm`]: names, level ranges and defaults, capabilities.
//! - [`params`]: [`Params`], [`Dictionary`], the `algorithm_params` parser.
//! - [`mod@error`]: the [`Error`] type.
//! - `zlib` (private): the C zlib's deflate stream, the crate's only
//!   `unsafe` code.
//! - `backend` (private): the library calls.
//! - [`compressor`]: [`Compressor`] and [`Context`].

#![warn(missing_docs)]

pub mod algorithm;
mod backend;
pub mod compressor;
pub mod error;
pub mod params;
mod zlib;

pub use algorithm::{Algorithm, UnknownAlgorithm};
pub use compressor::{Compressor, Context, Encoder};
pub use error::{Error, Result};
pub use params::{AlgorithmParams, Dictionary, Params};
