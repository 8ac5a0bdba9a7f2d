//! The safe LZO1X decoder, for plain LZO1X and lzo-rle streams.
//!
//! This module owns the decoding of a stream into a caller's buffer and the
//! [`DecodeError`]s it can end with. It checks every length and distance
//! against what is left of the input and of the output before it copies, so
//! malformed, truncated or overlong input ends in an error, never in a read
//! or write outside the two slices, and it allocates nothing whatever the
//! input claims. Where both slices have room past a copy it copies whole
//! 8- or 16-byte chunks (the excess is overwritten by what follows), so
//! the bounds are checked once per instruction, not per byte. It knows
//! nothing of how streams are made.
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

mod fast;

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

/// How many bytes the fast paths may copy past a run's end: a literal run
/// or match is copied in whole 16-byte chunks when the input and the output
/// both have at least this much room after it, so that the last chunk's
/// excess lands inside the slices (and is overwritten by what follows).
const SLACK: usize = 16;

/// The decoder's cursors over its input and output; every method fails
/// with the [`DecodeError`] that says which one ran out.
struct Decoder<'s, 'd> {
    src: &'s [u8],
    ip: usize,
    dst: &'d mut [u8],
    op: usize,
}

impl Decoder<'_, '_> {
    #[inline(always)]
    fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = *self.src.get(self.ip).ok_or(DecodeError::Truncated)?;
        self.ip += 1;
        Ok(b)
    }

    #[inline(always)]
    fn le16(&mut self) -> Result<usize, DecodeError> {
        let b = self
            .src
            .get(self.ip..self.ip + 2)
            .ok_or(DecodeError::Truncated)?;
        self.ip += 2;
        Ok(usize::from(b[0]) | usize::from(b[1]) << 8)
    }

    /// A long length: a zero byte for each 255, then a nonzero byte; `base`
    /// plus all of that. It cannot overflow: every 255 costs an input byte.
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

    /// Copies a literal run of `n` bytes from the input to the output.
    #[inline(always)]
    fn literals(&mut self, n: usize) -> Result<(), DecodeError> {
        let (ip, op) = (self.ip, self.op);
        if ip + n + SLACK <= self.src.len() && op + n + SLACK <= self.dst.len() {
            // Whole chunks, the last one past the run's end (room checked).
            let mut i = 0;
            while i < n {
                let chunk: [u8; 16] = self.src[ip + i..ip + i + 16].try_into().expect("16 bytes");
                self.dst[op + i..op + i + 16].copy_from_slice(&chunk);
                i += 16;
            }
        } else {
            let lit = self.src.get(ip..ip + n).ok_or(DecodeError::Truncated)?;
            self.dst
                .get_mut(op..op + n)
                .ok_or(DecodeError::OutputFull)?
                .copy_from_slice(lit);
        }
        self.ip += n;
        self.op += n;
        Ok(())
    }

    /// The zero to three literals an instruction's state bits announce.
    #[inline(always)]
    fn state_literals(&mut self, n: usize) -> Result<(), DecodeError> {
        let (ip, op) = (self.ip, self.op);
        if ip + 4 <= self.src.len() && op + 4 <= self.dst.len() {
            // Four bytes whatever `n` is: the excess is overwritten next.
            let four: [u8; 4] = self.src[ip..ip + 4].try_into().expect("4 bytes");
            self.dst[op..op + 4].copy_from_slice(&four);
            self.ip += n;
            self.op += n;
            Ok(())
        } else if n > 0 {
            self.literals(n)
        } else {
            Ok(())
        }
    }

    /// Copies `len` bytes from `dist` back; the two may overlap, which
    /// repeats the last `dist` bytes.
    #[inline(always)]
    fn copy_match(&mut self, dist: usize, len: usize) -> Result<(), DecodeError> {
        let op = self.op;
        if dist > op {
            return Err(DecodeError::BadDistance);
        }
        let from = op - dist;
        let buf = &mut *self.dst;
        if op + len + SLACK <= buf.len() && dist >= 8 {
            // Forward in whole chunks, each read before it is written, the
            // last one past the match's end (room checked). A chunk no
            // longer than the distance reads only bytes already final.
            let mut i = 0;
            if dist >= 16 {
                while i < len {
                    let chunk: [u8; 16] =
                        buf[from + i..from + i + 16].try_into().expect("16 bytes");
                    buf[op + i..op + i + 16].copy_from_slice(&chunk);
                    i += 16;
                }
            } else {
                while i < len {
                    let chunk: [u8; 8] = buf[from + i..from + i + 8].try_into().expect("8 bytes");
                    buf[op + i..op + i + 8].copy_from_slice(&chunk);
                    i += 8;
                }
            }
        } else {
            if op + len > buf.len() {
                return Err(DecodeError::OutputFull);
            }
            if dist == 1 {
                let b = buf[from];
                buf[op..op + len].fill(b);
            } else {
                // The pattern of the last `dist` bytes, copied from its
                // start in pieces that double: after each, the repeated
                // pattern before the write point is twice as long, and
                // every piece starts at a multiple of `dist`.
                let mut done = 0;
                while done < len {
                    let n = (op + done - from).min(len - done);
                    buf.copy_within(from..from + n, op + done);
                    done += n;
                }
            }
        }
        self.op += len;
        Ok(())
    }

    #[inline(always)]
    fn zeros(&mut self, len: usize) -> Result<(), DecodeError> {
        let dst = self
            .dst
            .get_mut(self.op..self.op + len)
            .ok_or(DecodeError::OutputFull)?;
        dst.fill(0);
        self.op += len;
        Ok(())
    }
}

/// Decodes the LZO1X or lzo-rle stream `src` into the start of `dst` and
/// returns the decoded length. The variant is told by the stream's first
/// bytes (lzo-rle's marker), as the kernel's decoder tells it. Any stream
/// that does not end with the end marker exactly at the end of `src`, or
/// that would write past `dst`'s end, is an error; `dst` may then hold a
/// partial result. Copies go in whole 8- or 16-byte chunks where `dst` has
/// room, so bytes of `dst` after the decoded length may be overwritten too.
pub fn decompress(src: &[u8], dst: &mut [u8]) -> Result<usize, DecodeError> {
    decode(src, dst, true)
}

/// [`decompress()`] without its fast loop: every instruction decoded by the
/// checked code alone, which has no `unsafe`. The same result and the same
/// decoded bytes as [`decompress()`] for every input (the tests and the
/// fuzz target hold the two to that); slower.
pub fn decompress_checked(src: &[u8], dst: &mut [u8]) -> Result<usize, DecodeError> {
    decode(src, dst, false)
}

/// The decoder: `fast` lets the fast loop take every instruction it can
/// (see the `fast` module); the rest, and every error, are decoded here.
#[inline(always)]
fn decode(src: &[u8], dst: &mut [u8], fast: bool) -> Result<usize, DecodeError> {
    if src.len() < 3 {
        return Err(DecodeError::Truncated);
    }
    let mut d = Decoder {
        src,
        ip: 0,
        dst,
        op: 0,
    };
    let mut rle = false;
    if src.len() >= 5 && src[0] == VERSION_MARKER {
        rle = src[1] != 0;
        d.ip = 2;
    }
    // The number of literals the last instruction was followed by: 0..3
    // from its state bits, 4 for a literal run.
    let mut state;
    let first = src[d.ip];
    if first > 17 {
        d.ip += 1;
        let n = usize::from(first - 17);
        d.literals(n)?;
        state = n.min(4);
    } else {
        state = 0;
    }

    loop {
        if fast {
            let stop = fast::run(src, &mut *d.dst, rle, d.ip, d.op, state);
            (d.ip, d.op, state) = (stop.ip, stop.op, stop.state);
        }
        let t = d.byte()?;
        let next;
        if t >= 64 {
            next = usize::from(t & 3);
            let dist = 1 + usize::from((t >> 2) & 7) + (usize::from(d.byte()?) << 3);
            d.copy_match(dist, usize::from(t >> 5) + 1)?;
        } else if t >= 32 {
            let len = match t & 31 {
                0 => d.long_length(33)?,
                l => usize::from(l) + 2,
            };
            let dd = d.le16()?;
            next = dd & 3;
            d.copy_match(1 + (dd >> 2), len)?;
        } else if t >= 16 {
            // A far match, the end marker or (lzo-rle) a zero run.
            let dd = d
                .src
                .get(d.ip..d.ip + 2)
                .map(|b| usize::from(b[0]) | usize::from(b[1]) << 8)
                .ok_or(DecodeError::Truncated)?;
            if rle && t & 0xf8 == 0x18 && dd & 0xfffc == 0xfffc {
                d.ip += 2;
                let high = usize::from(d.byte()?);
                next = dd & 3;
                d.zeros((usize::from(t & 7) | high << 3) + MIN_ZERO_RUN)?;
            } else {
                let len = match t & 7 {
                    0 => d.long_length(9)?,
                    l => usize::from(l) + 2,
                };
                let dd = d.le16()?;
                next = dd & 3;
                let dist = (usize::from(t & 8) << 11) + (dd >> 2);
                if dist == 0 {
                    // The kernel's decoder ignores the end marker's state
                    // bits; no encoder sets them, so this one refuses them.
                    if len != 3 || next != 0 {
                        return Err(DecodeError::BadEndMarker);
                    }
                    if d.ip != src.len() {
                        return Err(DecodeError::TrailingBytes);
                    }
                    return Ok(d.op);
                }
                d.copy_match(dist + 0x4000, len)?;
            }
        } else if state == 0 {
            let n = if t == 0 {
                d.long_length(18)?
            } else {
                usize::from(t) + 3
            };
            d.literals(n)?;
            state = 4;
            continue;
        } else {
            let far = usize::from(d.byte()?) << 2 | usize::from(t >> 2);
            next = usize::from(t & 3);
            if state == 4 {
                d.copy_match(far + 1 + 0x800, 3)?;
            } else {
                d.copy_match(far + 1, 2)?;
            }
        }
        // The state bits' literals (copied even when there are none: one
        // branch less in the common case).
        state = next;
        d.state_literals(next)?;
    }
}
