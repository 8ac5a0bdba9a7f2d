//! The LZ4 block decoder.
//!
//! This module owns decoding: a block read into a caller's buffer of the
//! decoded size, optionally after a dictionary (the bytes a match may reach
//! back into before the block). It reads only `src` and the dictionary and
//! writes only `dst`; malformed input is a [`DecodeError`], never a panic
//! or an access outside the slices. It knows nothing of the compressors.
//!
//! A block is a series of sequences: a token (literal length in the high
//! four bits, match length less 4 in the low four, 15 meaning more length
//! bytes follow, each 255 meaning one more), the literals, a 16-bit
//! little-endian offset back (not 0) and the match; the last sequence has
//! literals only and ends the input.

use std::fmt;

use crate::{MINMATCH, RUN_MASK};

/// Why a block could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ends inside a sequence.
    Truncated,
    /// The data decodes to more bytes than the output holds.
    OutputFull,
    /// A match reaches back to before the output (and the dictionary), or
    /// has offset 0.
    BadOffset,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DecodeError::Truncated => "lz4 data ends inside a sequence",
            DecodeError::OutputFull => "lz4 data decodes to more than the output holds",
            DecodeError::BadOffset => "lz4 match reaches before the start of the data",
        })
    }
}

impl std::error::Error for DecodeError {}

/// Decodes the block `src` into `dst`; returns the decoded length.
pub fn decompress(src: &[u8], dst: &mut [u8]) -> Result<usize, DecodeError> {
    decompress_with_dict(src, dst, &[])
}

/// A length past a saturated 4-bit field: bytes added while they are 255.
#[inline(always)]
fn more_length(src: &[u8], ip: &mut usize, mut len: usize) -> Result<usize, DecodeError> {
    loop {
        let b = *src.get(*ip).ok_or(DecodeError::Truncated)?;
        *ip += 1;
        len += usize::from(b);
        if b != 255 {
            return Ok(len);
        }
    }
}

/// Decodes the block `src` into `dst` after the dictionary `dict` (of
/// which a match may use the last 64 KiB); returns the decoded length.
pub fn decompress_with_dict(src: &[u8], dst: &mut [u8], dict: &[u8]) -> Result<usize, DecodeError> {
    let (mut ip, mut op) = (0usize, 0usize);
    loop {
        let token = *src.get(ip).ok_or(DecodeError::Truncated)?;
        ip += 1;
        let mut lit = usize::from(token >> 4);
        if lit == RUN_MASK {
            lit = more_length(src, &mut ip, lit)?;
        }
        let lits = src.get(ip..ip + lit).ok_or(DecodeError::Truncated)?;
        dst.get_mut(op..op + lit)
            .ok_or(DecodeError::OutputFull)?
            .copy_from_slice(lits);
        ip += lit;
        op += lit;
        if ip == src.len() {
            return Ok(op);
        }

        let b = src.get(ip..ip + 2).ok_or(DecodeError::Truncated)?;
        let offset = usize::from(u16::from_le_bytes([b[0], b[1]]));
        ip += 2;
        let mut len = usize::from(token & 15);
        if len == RUN_MASK {
            len = more_length(src, &mut ip, len)?;
        }
        len += MINMATCH;
        if offset == 0 || offset > op + dict.len() {
            return Err(DecodeError::BadOffset);
        }
        let end = op + len;
        if end > dst.len() {
            return Err(DecodeError::OutputFull);
        }
        if offset > op {
            // Starts in the dictionary, may go on into the output.
            let back = offset - op;
            let from_dict = back.min(len);
            let at = dict.len() - back;
            dst[op..op + from_dict].copy_from_slice(&dict[at..at + from_dict]);
            op += from_dict;
            // The rest copies the output from its start, overlapping
            // itself where the match is longer than the distance.
            let mut from = 0;
            while op < end {
                dst[op] = dst[from];
                op += 1;
                from += 1;
            }
        } else if offset >= len {
            dst.copy_within(op - offset..op - offset + len, op);
            op = end;
        } else {
            // Overlapping: a repeating pattern of `offset` bytes.
            let start = op - offset;
            let mut done = offset;
            dst.copy_within(start..op, op);
            while done < len {
                let n = done.min(len - done);
                dst.copy_within(op..op + n, op + done);
                done += n;
            }
            op = end;
        }
    }
}
