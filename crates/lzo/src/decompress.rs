//! The safe LZO1X decoder, for plain LZO1X and lzo-rle streams.
//!
//! This module owns the decoding of a stream into a caller's buffer and the
//! [`DecodeError`]s it can end with. It checks every length and distance
//! against what is left of the input and of the output before it copies, so
//! malformed, truncated or overlong input ends in an error, never in a read
//! or write outside the two slices, and it allocates nothing whatever the
//! input claims. It knows nothing of how streams are made.
//!
//! The stream is a sequence of instructions whose first byte says its kind;
//! each match or zero run carries two state bits that count the literals
//! (0 to 3) that follow it directly, and the kind of a first byte below 16
//! depends on them (see the crate docs and the kernel's lzo.rst):
//!
//! | first byte | after       | meaning                                          |
//! |------------|-------------|--------------------------------------------------|
//! | 0000LLLL   | state 0     | literal run of L+3 (L = 0: long length, +18)     |
//! | 0000DDSS   | state 1..3  | 2-byte match, distance 1 + D + 4·next byte       |
//! | 0000DDSS   | 4+ literals | 3-byte match, distance 2049 + D + 4·next byte    |
//! | 01LDDDSS / 1LLDDDSS | any | 3..8-byte match, distance up to 2 KiB            |
//! | 001LLLLL   | any         | match, distance up to 16 KiB, 2-byte distance    |
//! | 0001HLLL   | any         | match, distance 16..48 KiB; H=0, D=0 ends stream |
//! | 00011RRR 111111SS 11111111 RRRRRRRR | lzo-rle | zero run of R+4 bytes      |

use std::fmt;

use crate::{MIN_ZERO_RUN, VERSION_MARKER};

/// Why a stream could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ends inside an instruction or before the end marker.
    Truncated,
    /// The stream decodes to more bytes than the output holds.
    OutputFull,
    /// A match reaches back before the start of the output.
    BadDistance,
    /// The end marker carries a length or state bits other than the ones it
    /// must have.
    BadEndMarker,
    /// Bytes follow the end marker.
    TrailingBytes,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DecodeError::Truncated => "input ends before the end of the stream",
            DecodeError::OutputFull => "stream decodes to more bytes than the output holds",
            DecodeError::BadDistance => "match reaches back before the start of the output",
            DecodeError::BadEndMarker => "malformed end-of-stream marker",
            DecodeError::TrailingBytes => "bytes after the end of the stream",
        })
    }
}

impl std::error::Error for DecodeError {}

/// A cursor over the input that fails with [`DecodeError::Truncated`].
struct Input<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    #[inline(always)]
    fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = *self.buf.get(self.pos).ok_or(DecodeError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    #[inline(always)]
    fn le16(&mut self) -> Result<usize, DecodeError> {
        let b = self
            .buf
            .get(self.pos..self.pos + 2)
            .ok_or(DecodeError::Truncated)?;
        self.pos += 2;
        Ok(usize::from(b[0]) | usize::from(b[1]) << 8)
    }

    #[inline(always)]
    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::Truncated)?;
        let b = self.buf.get(self.pos..end).ok_or(DecodeError::Truncated)?;
        self.pos = end;
        Ok(b)
    }

    /// A long length: a zero byte for each 255, then a nonzero byte; `base`
    /// plus all of that.
    #[inline(always)]
    fn long_length(&mut self, base: usize) -> Result<usize, DecodeError> {
        let mut n = base;
        loop {
            match self.byte()? {
                0 => n += 255,
                b => return Ok(n + usize::from(b)),
            }
        }
    }
}

/// The output written so far.
struct Output<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl Output<'_> {
    #[inline(always)]
    fn literals(&mut self, lit: &[u8]) -> Result<(), DecodeError> {
        let dst = self
            .buf
            .get_mut(self.pos..self.pos + lit.len())
            .ok_or(DecodeError::OutputFull)?;
        dst.copy_from_slice(lit);
        self.pos += lit.len();
        Ok(())
    }

    /// Copies `len` bytes from `dist` back; the two may overlap, which
    /// repeats the last `dist` bytes.
    #[inline(always)]
    fn copy_match(&mut self, dist: usize, len: usize) -> Result<(), DecodeError> {
        if dist > self.pos {
            return Err(DecodeError::BadDistance);
        }
        let end = self.pos + len;
        if end > self.buf.len() {
            return Err(DecodeError::OutputFull);
        }
        let from = self.pos - dist;
        if dist >= len {
            self.buf.copy_within(from..from + len, self.pos);
        } else {
            for i in 0..len {
                self.buf[self.pos + i] = self.buf[from + i];
            }
        }
        self.pos = end;
        Ok(())
    }

    #[inline(always)]
    fn zeros(&mut self, len: usize) -> Result<(), DecodeError> {
        let dst = self
            .buf
            .get_mut(self.pos..self.pos + len)
            .ok_or(DecodeError::OutputFull)?;
        dst.fill(0);
        self.pos += len;
        Ok(())
    }
}

/// Decodes the LZO1X or lzo-rle stream `src` into the start of `dst` and
/// returns the decoded length. The variant is told by the stream's first
/// bytes (lzo-rle's marker), as the kernel's decoder tells it. Any stream
/// that does not end with the end marker exactly at the end of `src`, or
/// that would write past `dst`'s end, is an error; `dst` may then hold a
/// partial result.
pub fn decompress(src: &[u8], dst: &mut [u8]) -> Result<usize, DecodeError> {
    let mut input = Input { buf: src, pos: 0 };
    let mut out = Output { buf: dst, pos: 0 };
    if src.len() < 3 {
        return Err(DecodeError::Truncated);
    }
    let mut rle = false;
    if src.len() >= 5 && src[0] == VERSION_MARKER {
        rle = src[1] != 0;
        input.pos = 2;
    }
    // The number of literals the last instruction was followed by: 0..3
    // from its state bits, 4 for a literal run.
    let mut state;
    let first = src[input.pos];
    if first > 17 {
        input.pos += 1;
        let n = usize::from(first - 17);
        out.literals(input.take(n)?)?;
        state = n.min(4);
    } else {
        state = 0;
    }

    loop {
        let t = input.byte()?;
        let next;
        if t < 16 {
            if state == 0 {
                let n = if t == 0 {
                    input.long_length(18)?
                } else {
                    usize::from(t) + 3
                };
                out.literals(input.take(n)?)?;
                state = 4;
                continue;
            }
            let far = usize::from(input.byte()?) << 2 | usize::from(t >> 2);
            next = usize::from(t & 3);
            if state == 4 {
                out.copy_match(far + 1 + 0x800, 3)?;
            } else {
                out.copy_match(far + 1, 2)?;
            }
        } else if t >= 64 {
            next = usize::from(t & 3);
            let dist = 1 + usize::from((t >> 2) & 7) + (usize::from(input.byte()?) << 3);
            out.copy_match(dist, usize::from(t >> 5) + 1)?;
        } else if t >= 32 {
            let len = match t & 31 {
                0 => input.long_length(33)?,
                l => usize::from(l) + 2,
            };
            let d = input.le16()?;
            next = d & 3;
            out.copy_match(1 + (d >> 2), len)?;
        } else {
            // 16..=31: a far match, the end marker or (lzo-rle) a zero run.
            let peek = input.buf.get(input.pos..input.pos + 2);
            let d = peek
                .map(|b| usize::from(b[0]) | usize::from(b[1]) << 8)
                .ok_or(DecodeError::Truncated)?;
            if rle && t & 0xf8 == 0x18 && d & 0xfffc == 0xfffc {
                input.pos += 2;
                let high = usize::from(input.byte()?);
                next = d & 3;
                out.zeros((usize::from(t & 7) | high << 3) + MIN_ZERO_RUN)?;
            } else {
                let len = match t & 7 {
                    0 => input.long_length(9)?,
                    l => usize::from(l) + 2,
                };
                let d = input.le16()?;
                next = d & 3;
                let dist = (usize::from(t & 8) << 11) + (d >> 2);
                if dist == 0 {
                    // The kernel's decoder ignores the end marker's state
                    // bits; no encoder sets them, so this one refuses them.
                    if len != 3 || next != 0 {
                        return Err(DecodeError::BadEndMarker);
                    }
                    if input.pos != src.len() {
                        return Err(DecodeError::TrailingBytes);
                    }
                    return Ok(out.pos);
                }
                out.copy_match(dist + 0x4000, len)?;
            }
        }
        // The state bits' literals.
        state = next;
        if next > 0 {
            out.literals(input.take(next)?)?;
        }
    }
}
