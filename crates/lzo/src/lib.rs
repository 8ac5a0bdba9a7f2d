//! LZO1X-1 and lzo-rle, the compressors behind zram's `lzo` and `lzo-rle`.
//!
//! [`Compressor::compress`] produces, for every input, the same bytes as the
//! Linux kernel's `lzo1x_1_compress` (variant [`Variant::Lzo`]) and
//! `lzorle1x_1_compress` (variant [`Variant::LzoRle`]) as they run on 64-bit
//! little-endian machines: the same multiplicative hash into an 8192-entry
//! table of 16-bit positions, the same literal-skipping heuristic (one more
//! byte skipped for every 32 bytes since the last match), the same match
//! length search and the same instruction encodings. lzo-rle differs from
//! plain LZO1X-1 in three ways: the stream starts with the version marker
//! `17, 1`, runs of four or more zero bytes are coded as one zero-run
//! instruction (up to 2051 bytes), and the largest M4 distance is one less.
//! [`decompress()`] reads both variants into a caller's buffer of known size
//! and rejects malformed, truncated or overlong input with a [`DecodeError`];
//! it never allocates and never reads or writes outside its two slices.
//!
//! The stream format is the one the kernel's Documentation/staging/lzo.rst
//! describes; this crate is written from that description and the
//! algorithm's published behaviour, with no code taken from LZO or Linux.
//!
//! Modules: [`mod@compress`] (the compressor), [`mod@decompress`] (the decoder).
//! This file owns the shared constants, [`Variant`] and [`compress_bound`].
//! `unsafe` only in the decoder's fast loop (decompress/fast.rs) and the
//! compressor's unchecked input loads and room-checked instruction writes
//! (compress.rs), every block with the bounds that make it sound.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod compress;
pub mod decompress;

pub use compress::{compress, Compressor, OutputTooSmall};
pub use decompress::{decompress, decompress_checked, DecodeError};

/// Which of the kernel's two LZO1X-1 compressors to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Plain LZO1X-1 (zram's `lzo`).
    Lzo,
    /// LZO1X-1 with the zero-run extension and its version marker (zram's
    /// `lzo-rle`, the kernel's default).
    LzoRle,
}

/// The largest compressed size of `len` input bytes for either variant: the
/// kernel's `lzo1x_worst_compress` plus the two bytes of lzo-rle's marker.
pub const fn compress_bound(len: usize) -> usize {
    len + len / 16 + 64 + 3 + 2
}

/// The first byte of an lzo-rle stream. Plain LZO1X-1 never starts with it
/// (except for empty input, whose whole stream is 3 bytes).
pub(crate) const VERSION_MARKER: u8 = 17;
/// The bitstream version lzo-rle writes after [`VERSION_MARKER`].
pub(crate) const RLE_VERSION: u8 = 1;

/// Longest match of an M2 instruction (two bytes, distance up to 2 KiB).
pub(crate) const M2_MAX_LEN: usize = 8;
/// Largest M2 distance.
pub(crate) const M2_MAX_OFFSET: usize = 0x0800;
/// Longest match an M3 instruction codes without extra length bytes.
pub(crate) const M3_MAX_LEN: usize = 33;
/// Largest M3 distance.
pub(crate) const M3_MAX_OFFSET: usize = 0x4000;
/// Longest match an M4 instruction codes without extra length bytes.
pub(crate) const M4_MAX_LEN: usize = 9;
/// The M3 instruction's tag (`001LLLLL`).
pub(crate) const M3_MARKER: u8 = 32;
/// The M4 instruction's tag (`0001HLLL`); `M4_MARKER | 1, 0, 0` ends a stream.
pub(crate) const M4_MARKER: u8 = 16;
/// The shortest zero run lzo-rle codes as a run.
pub(crate) const MIN_ZERO_RUN: usize = 4;
/// The longest zero run one lzo-rle instruction codes (11 bits of length).
pub(crate) const MAX_ZERO_RUN: usize = 2047 + MIN_ZERO_RUN;
