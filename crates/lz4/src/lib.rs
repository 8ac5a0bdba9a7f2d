//! LZ4 and LZ4HC, the compressors behind zram's `lz4` and `lz4hc`, as the
//! Linux kernel's lib/lz4 runs them.
//!
//! For every input, [`Compressor::compress_fast`] gives the bytes of the
//! kernel's `LZ4_compress_fast` (zram's `lz4` without a dictionary, `level`
//! being the acceleration), [`Compressor::compress_fast_dict`] those of
//! zram's dictionary path (a stream loaded by `LZ4_loadDict`, copied, then
//! one `LZ4_compress_fast_continue`), [`Stream`] the kernel's streaming
//! calls (`LZ4_loadDict`, `LZ4_compress_fast_continue` on blocks in
//! separate buffers), and [`HcCompressor`] / [`HcStream`] those of
//! `LZ4_compress_HC` and `LZ4_loadDictHC` + `LZ4_compress_HC_continue` at
//! every level (1 to 16; zram's default is 9). The kernel's lib/lz4 is an
//! older import of the LZ4 library than liblz4 1.10: its hash tables, match
//! search and skipping heuristics differ from today's liblz4, which is why
//! liblz4's output is not the kernel's. Both read each other's data: the
//! block format is the same.
//!
//! [`decompress()`] and [`decompress_with_dict`] read a block into a buffer
//! of known size and reject malformed, truncated or overlong input with a
//! [`DecodeError`]; they never read or write outside their slices.
//!
//! Written from the LZ4 block format description and the kernel's
//! behaviour, as seen from its output; no code is taken from LZ4 or Linux.
//!
//! Modules: [`mod@fast`] (the fast compressor and its streams), [`mod@hc`]
//! (the high-compression one), [`mod@decompress`] (the decoder). This file
//! owns the shared constants, [`compress_bound`], [`Error`] and the match
//! length count both compressors use. No `unsafe` anywhere in the crate.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;

pub mod decompress;
pub mod fast;
pub mod hc;

pub use decompress::{decompress, decompress_with_dict, DecodeError};
pub use fast::{Compressor, Dict, Stream};
pub use hc::{HcCompressor, HcDict, HcStream};

/// The largest input the kernel compresses (`LZ4_MAX_INPUT_SIZE`).
pub const MAX_INPUT_SIZE: usize = 0x7E00_0000;

/// zram's default acceleration (`LZ4_ACCELERATION_DEFAULT`).
pub const ACCELERATION_DEFAULT: i32 = 1;

/// The lowest LZ4HC level the kernel calls useful (`LZ4HC_MIN_CLEVEL`);
/// levels 1 and 2 are accepted too.
pub const HC_MIN_LEVEL: i32 = 3;
/// zram's default LZ4HC level (`LZ4HC_DEFAULT_CLEVEL`).
pub const HC_DEFAULT_LEVEL: i32 = 9;
/// The highest LZ4HC level (`LZ4HC_MAX_CLEVEL`); higher ones act as it.
pub const HC_MAX_LEVEL: i32 = 16;

/// The largest dictionary both compressors keep (64 KiB): a longer one
/// is cut to its last 64 KiB, and zram then refuses it, because the
/// kernel's `LZ4_loadDict` reports the shorter length.
pub const DICT_MAX: usize = 64 * 1024;

/// The largest compressed size of `len` input bytes (`LZ4_COMPRESSBOUND`);
/// 0 above [`MAX_INPUT_SIZE`].
pub const fn compress_bound(len: usize) -> usize {
    if len > MAX_INPUT_SIZE {
        0
    } else {
        len + len / 255 + 16
    }
}

/// Why a compressor gave no output (the kernel returns 0 for both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The input is larger than [`MAX_INPUT_SIZE`].
    InputTooLarge {
        /// The input's length.
        len: usize,
    },
    /// The output buffer, smaller than [`compress_bound`] of the input,
    /// could not hold the compressed data (the kernel's limited-output
    /// checks, which may refuse a buffer a few bytes larger than needed).
    OutputFull {
        /// The capacity offered.
        capacity: usize,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InputTooLarge { len } => {
                write!(
                    f,
                    "lz4 input of {len} bytes is above the limit of {MAX_INPUT_SIZE}"
                )
            }
            Error::OutputFull { capacity } => {
                write!(f, "lz4 output does not fit in {capacity} bytes")
            }
        }
    }
}

impl std::error::Error for Error {}

/// The shortest match of the format.
pub(crate) const MINMATCH: usize = 4;
/// No match starts in a block's last 12 bytes (`MFLIMIT`).
pub(crate) const MFLIMIT: usize = 12;
/// A block's last 5 bytes are always literals (`LASTLITERALS`).
pub(crate) const LASTLITERALS: usize = 5;
/// The farthest a match reaches back (`LZ4_DISTANCE_MAX`).
pub(crate) const MAX_DISTANCE: u32 = 65535;
/// The 4-bit length fields of a token saturate at this value.
pub(crate) const RUN_MASK: usize = 15;
/// The multiplier of the 4-byte hashes (Knuth's golden-ratio prime).
pub(crate) const PRIME32: u32 = 2_654_435_761;

/// How many leading bytes `a` and `b` share, at most `a.len()` (the
/// kernel's `LZ4_count` with `a.len()` as its limit); `b` is at least as
/// long as `a`. Compared eight bytes at a time: the result is the same as
/// a byte loop's.
#[inline]
pub(crate) fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len();
    let b = &b[..n];
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().expect("8 bytes"));
        let y = u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let diff = x ^ y;
        if diff != 0 {
            return i + (diff.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// Four bytes of `s` at `at`, little-endian.
#[inline(always)]
pub(crate) fn read32(s: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(s[at..at + 4].try_into().expect("4 bytes"))
}

/// Where a compressor writes: `buf[..pos]` is done. Every write is
/// bounds-checked; one past the end is [`Error::OutputFull`] (where the
/// kernel, which checks only what its formulas say, would have written
/// past its buffer and then failed at a later check).
pub(crate) struct Out<'a> {
    pub(crate) buf: &'a mut [u8],
    pub(crate) pos: usize,
}

impl Out<'_> {
    #[inline(always)]
    fn full(&self) -> Error {
        Error::OutputFull {
            capacity: self.buf.len(),
        }
    }

    /// One byte.
    #[inline(always)]
    pub(crate) fn byte(&mut self, b: u8) -> Result<(), Error> {
        let Some(slot) = self.buf.get_mut(self.pos) else {
            return Err(self.full());
        };
        *slot = b;
        self.pos += 1;
        Ok(())
    }

    /// A run of bytes.
    #[inline(always)]
    pub(crate) fn bytes(&mut self, b: &[u8]) -> Result<(), Error> {
        let end = self.pos + b.len();
        let Some(slot) = self.buf.get_mut(self.pos..end) else {
            return Err(self.full());
        };
        slot.copy_from_slice(b);
        self.pos = end;
        Ok(())
    }

    /// The bytes past a saturated 4-bit length: one 255 for each whole
    /// 255 of `rest`, then what is left.
    #[inline(always)]
    pub(crate) fn length(&mut self, rest: usize) -> Result<(), Error> {
        let n = rest / 255;
        let end = self.pos + n;
        let Some(slot) = self.buf.get_mut(self.pos..end) else {
            return Err(self.full());
        };
        slot.fill(255);
        self.pos = end;
        self.byte((rest % 255) as u8)
    }

    /// A literal run's token (its match half zero, filled in later) and
    /// length bytes, then the literals; returns the token's position.
    #[inline(always)]
    pub(crate) fn literals(&mut self, lit: &[u8]) -> Result<usize, Error> {
        let token = self.pos;
        if lit.len() >= RUN_MASK {
            self.byte((RUN_MASK as u8) << 4)?;
            self.length(lit.len() - RUN_MASK)?;
        } else {
            self.byte((lit.len() as u8) << 4)?;
        }
        self.bytes(lit)?;
        Ok(token)
    }

    /// A match's offset and the length `code` (its length less 4) into
    /// the token at `token`.
    #[inline(always)]
    pub(crate) fn matched(&mut self, token: usize, offset: u16, code: usize) -> Result<(), Error> {
        self.bytes(&offset.to_le_bytes())?;
        if code >= RUN_MASK {
            self.buf[token] += RUN_MASK as u8;
            self.length(code - RUN_MASK)
        } else {
            self.buf[token] += code as u8;
            Ok(())
        }
    }
}
