//! The LZO1X-1 compressor, as the kernel runs it, with lzo-rle's zero runs.
//!
//! This module owns the compressor's hash table ([`Compressor`]) and the
//! encoder: the block loop over the input, the match search and the output
//! of literal runs, matches and zero runs. It reads only its input slice and
//! writes only its output slice (bounds-checked indexing, except the search
//! loop's unchecked loads, each with the bounds that make it sound), and
//! it refuses an output buffer smaller than [`crate::compress_bound`] before
//! it starts, so it never fails half-way. It knows nothing of decoding.
//!
//! The instruction choice follows LZO1X-1 exactly (see the crate docs);
//! where the kernel's 64-bit build compares eight bytes at a time, this one
//! does too, because the point where a match search stops near the end of
//! the input decides the output bytes.
#![allow(unsafe_code)]

use std::fmt;

use crate::{
    compress_bound, Variant, M2_MAX_LEN, M2_MAX_OFFSET, M3_MARKER, M3_MAX_LEN, M3_MAX_OFFSET,
    M4_MARKER, M4_MAX_LEN, MAX_ZERO_RUN, MIN_ZERO_RUN, RLE_VERSION, VERSION_MARKER,
};

/// log2 of the hash table's entries.
const HASH_BITS: u32 = 13;
/// Entries of the hash table (16-bit positions: 16 KiB, as the kernel's).
const HASH_SIZE: usize = 1 << HASH_BITS;
/// The multiplier of LZO1X-1's hash of four input bytes.
const HASH_MULTIPLIER: u32 = 0x1824_429d;
/// No match is searched for in a block's last 20 bytes.
const BLOCK_TAIL: usize = 20;

/// The output buffer offered is smaller than [`crate::compress_bound`] of
/// the input: nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputTooSmall {
    /// The capacity offered.
    pub capacity: usize,
    /// The capacity needed.
    pub needed: usize,
}

impl fmt::Display for OutputTooSmall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lzo output buffer of {} bytes is below the bound of {}",
            self.capacity, self.needed
        )
    }
}

impl std::error::Error for OutputTooSmall {}

/// A compressor: its 16 KiB hash table, reused from call to call (the
/// kernel's per-stream working memory). One per thread.
#[derive(Clone)]
pub struct Compressor {
    table: Box<[u16]>,
}

impl Default for Compressor {
    fn default() -> Self {
        Compressor::new()
    }
}

impl fmt::Debug for Compressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compressor").finish_non_exhaustive()
    }
}

/// Compresses `src` into `dst` with a fresh table; see [`Compressor::compress`].
pub fn compress(variant: Variant, src: &[u8], dst: &mut [u8]) -> Result<usize, OutputTooSmall> {
    Compressor::new().compress(variant, src, dst)
}

/// Where the encoder writes: the output and the place of the last
/// instruction's two state bits, which a following run of up to three
/// literals fills in.
struct Output<'a> {
    buf: &'a mut [u8],
    pos: usize,
    /// How many bytes before `pos` the state bits are: 2 after a match
    /// (the low bits of its first distance byte), 3 after a zero run.
    state_back: usize,
}

impl Output<'_> {
    #[inline(always)]
    fn byte(&mut self, b: u8) {
        self.buf[self.pos] = b;
        self.pos += 1;
    }

    #[inline(always)]
    fn bytes(&mut self, b: &[u8]) {
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }

    /// A length beyond what an instruction's own bits hold: zero bytes for
    /// each 255, then the rest (at least 1).
    #[inline(always)]
    fn long_length(&mut self, mut rest: usize) {
        while rest > 255 {
            rest -= 255;
            self.byte(0);
        }
        self.byte(rest as u8);
    }

    /// A literal run of `lit` (not the stream's first instruction): up to
    /// three literals go in the previous instruction's state bits, up to 18
    /// in one length byte, more in a zero byte and a long length.
    #[inline(always)]
    fn literals(&mut self, lit: &[u8]) {
        self.literal_header(lit.len());
        self.bytes(lit);
    }

    /// The literal run `src[from..to]` inside a block, where at least 16
    /// bytes of input follow `to`: copied in 16-byte chunks when the output
    /// has room for the last chunk's excess, which the next instruction
    /// overwrites.
    #[inline(always)]
    fn block_literals(&mut self, src: &[u8], from: usize, to: usize) {
        let n = to - from;
        self.literal_header(n);
        if self.pos + n + 16 <= self.buf.len() {
            let mut i = 0;
            while i < n {
                let chunk: [u8; 16] = src[from + i..from + i + 16].try_into().expect("16 bytes");
                self.buf[self.pos + i..self.pos + i + 16].copy_from_slice(&chunk);
                i += 16;
            }
            self.pos += n;
        } else {
            self.bytes(&src[from..to]);
        }
    }

    /// The instruction bytes that announce a literal run of `t` bytes.
    #[inline(always)]
    fn literal_header(&mut self, t: usize) {
        if t <= 3 {
            let at = self.pos - self.state_back;
            self.buf[at] |= t as u8;
        } else if t <= 18 {
            self.byte((t - 3) as u8);
        } else {
            self.byte(0);
            self.long_length(t - 18);
        }
    }
}

impl Compressor {
    /// A compressor with its table.
    pub fn new() -> Compressor {
        Compressor {
            table: vec![0u16; HASH_SIZE].into_boxed_slice(),
        }
    }

    /// Compresses `src` into the start of `dst` and returns the compressed
    /// length: the kernel's bytes for `variant`. `dst` must hold at least
    /// [`crate::compress_bound`]`(src.len())` bytes, else nothing is
    /// written and the error says how many are needed.
    pub fn compress(
        &mut self,
        variant: Variant,
        src: &[u8],
        dst: &mut [u8],
    ) -> Result<usize, OutputTooSmall> {
        let needed = compress_bound(src.len());
        if dst.len() < needed {
            return Err(OutputTooSmall {
                capacity: dst.len(),
                needed,
            });
        }
        let mut out = Output {
            buf: dst,
            pos: 0,
            state_back: 2,
        };
        let rle = variant == Variant::LzoRle;
        // A block's positions fit the table's 16 bits; lzo-rle keeps one
        // distance free so that an M4 match never looks like a zero run.
        let max_block = if rle {
            out.byte(VERSION_MARKER);
            out.byte(RLE_VERSION);
            0xbffe + 1
        } else {
            0xbfff + 1
        };
        let data_start = out.pos;

        let mut block = 0;
        let mut left = src.len();
        // Literals not yet written, ending where the next block starts.
        let mut pending = 0;
        while left > BLOCK_TAIL {
            let len = left.min(max_block);
            // The kernel's overflow guard on `end + (pending + len) / 32`
            // also stops here when that sum is under 32: short inputs are
            // stored as literals.
            if (pending + len) >> 5 == 0 {
                break;
            }
            self.table.fill(0);
            pending = self.block(src, block, len, &mut out, pending, rle);
            block += len;
            left -= len;
        }
        pending += left;

        if pending > 0 {
            let lit = &src[src.len() - pending..];
            if out.pos == data_start && pending <= 238 {
                // A stream that starts with literals says so in its first byte.
                out.byte((17 + pending) as u8);
                out.bytes(lit);
            } else {
                out.literals(lit);
            }
        }
        out.bytes(&[M4_MARKER | 1, 0, 0]);
        Ok(out.pos)
    }

    /// Compresses the block `src[base..base + len]` (its table cleared),
    /// with `pending` literals before `base` still to write; returns the
    /// literals left unwritten at its end (counted back from its end).
    fn block(
        &mut self,
        src: &[u8],
        base: usize,
        len: usize,
        out: &mut Output<'_>,
        mut pending: usize,
        rle: bool,
    ) -> usize {
        let end = base + len;
        let search_end = end - BLOCK_TAIL;
        let table = &mut self.table[..HASH_SIZE];
        // `lit` is where the literals not yet written start (less `pending`).
        let mut lit = base;
        let mut ip = base + 4usize.saturating_sub(pending);
        let mut skip = true;
        loop {
            if skip {
                // One byte forward, and one more for every 32 without a match.
                ip += 1 + ((ip - lit) >> 5);
            }
            skip = true;
            if ip >= search_end {
                break;
            }
            // SAFETY: ip < search_end = end - 20 <= src.len() - 20.
            let dv = unsafe { load_u32(src, ip) };
            let mut zero_run = 0;
            let mut m_pos = 0;
            if dv == 0 && rle {
                let limit = search_end.min(ip + MAX_ZERO_RUN + 1);
                zero_run = (zeros_from(src, ip + 4, limit) - ip).min(MAX_ZERO_RUN);
            } else {
                let h = (dv.wrapping_mul(HASH_MULTIPLIER) >> (32 - HASH_BITS)) as usize;
                m_pos = base + usize::from(table[h & (HASH_SIZE - 1)]);
                table[h & (HASH_SIZE - 1)] = (ip - base) as u16;
                // SAFETY: the table holds only positions of this block
                // before `ip` (it is cleared for each block), or 0: so
                // m_pos <= ip, and ip + 4 <= src.len() as above.
                if unsafe { load_u32(src, m_pos) } != dv {
                    continue;
                }
            }

            lit -= pending;
            pending = 0;
            if ip > lit {
                out.block_literals(src, lit, ip);
            }

            if zero_run > 0 {
                ip += zero_run;
                let run = (zero_run - MIN_ZERO_RUN) as u32;
                // An M4 tag with the high-distance bit and distance bits all
                // ones, which no match of lzo-rle uses: 0001 1RRR, 1111 11SS,
                // 1111 1111, RRRR RRRR (run length less 4, low 3 bits first).
                out.bytes(&((run << 21) | 0x00ff_fc18 | (run & 7)).to_le_bytes());
                out.state_back = 3;
            } else {
                let mut m_len = match_len(src, ip, m_pos, search_end);
                let m_off = ip - m_pos;
                ip += m_len;
                if m_len <= M2_MAX_LEN && m_off <= M2_MAX_OFFSET {
                    let d = m_off - 1;
                    out.byte((((m_len - 1) << 5) | ((d & 7) << 2)) as u8);
                    out.byte((d >> 3) as u8);
                } else if m_off <= M3_MAX_OFFSET {
                    let d = m_off - 1;
                    if m_len <= M3_MAX_LEN {
                        out.byte(M3_MARKER | (m_len - 2) as u8);
                    } else {
                        out.byte(M3_MARKER);
                        out.long_length(m_len - M3_MAX_LEN);
                    }
                    out.byte((d << 2) as u8);
                    out.byte((d >> 6) as u8);
                } else {
                    let d = m_off - 0x4000;
                    let high = ((d >> 11) & 8) as u8;
                    if m_len <= M4_MAX_LEN {
                        out.byte(M4_MARKER | high | (m_len - 2) as u8);
                    } else {
                        if rle && (d & 0x403f) == 0x403f && (261..=264).contains(&m_len) {
                            // Its length byte and first distance byte would
                            // read as a zero run: shorten the match to 260.
                            ip -= m_len - 260;
                            m_len = 260;
                        }
                        out.byte(M4_MARKER | high);
                        out.long_length(m_len - M4_MAX_LEN);
                    }
                    out.byte((d << 2) as u8);
                    out.byte((d >> 6) as u8);
                }
                out.state_back = 2;
            }
            lit = ip;
            skip = false;
        }
        end - (lit - pending)
    }
}

/// The little-endian u32 at `src[at..at + 4]`, without a bounds check:
/// the search loop's two loads per position are most of its work.
///
/// # Safety
/// `at + 4 <= src.len()`.
#[inline(always)]
unsafe fn load_u32(src: &[u8], at: usize) -> u32 {
    debug_assert!(at + 4 <= src.len());
    // SAFETY: the caller's contract keeps the 4 bytes inside `src`.
    u32::from_le(unsafe { src.as_ptr().add(at).cast::<u32>().read_unaligned() })
}

/// The little-endian u64 at `src[at..at + 8]`, without a bounds check.
///
/// # Safety
/// `at + 8 <= src.len()`.
#[inline(always)]
unsafe fn load_u64(src: &[u8], at: usize) -> u64 {
    debug_assert!(at + 8 <= src.len());
    // SAFETY: the caller's contract keeps the 8 bytes inside `src`.
    u64::from_le(unsafe { src.as_ptr().add(at).cast::<u64>().read_unaligned() })
}

/// The first position in `from..limit` whose byte is not zero, or `limit`.
#[inline(always)]
fn zeros_from(src: &[u8], from: usize, limit: usize) -> usize {
    assert!(limit <= src.len());
    let mut at = from;
    while at + 8 <= limit {
        // SAFETY: at + 8 <= limit <= src.len() (the loop condition and
        // the assertion above).
        let v = unsafe { load_u64(src, at) };
        if v != 0 {
            return at + (v.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while at < limit && src[at] == 0 {
        at += 1;
    }
    at
}

/// The length of the match of `src[ip..]` with `src[m_pos..]`, whose first
/// four bytes are equal, found as the kernel's 64-bit build finds it: eight
/// bytes at a time, stopping without the last comparison's partial count
/// once the scan reaches `search_end`.
///
/// Needs `m_pos < ip < search_end` and `search_end + 20 <= src.len()` (a
/// block's search end), asserted: every load below then ends before
/// `search_end + 12`, as each starts before `search_end + 4`.
#[inline(always)]
fn match_len(src: &[u8], ip: usize, m_pos: usize, search_end: usize) -> usize {
    assert!(m_pos < ip && ip < search_end && search_end + BLOCK_TAIL <= src.len());
    let mut m_len = 4;
    // SAFETY: ip + 4 + 8 < search_end + 12 <= src.len(), and m_pos < ip.
    let mut v = unsafe { load_u64(src, ip + m_len) ^ load_u64(src, m_pos + m_len) };
    if v == 0 {
        loop {
            m_len += 8;
            // SAFETY: `ip + m_len - 8 < search_end` (else the loop had
            // returned), so ip + m_len + 8 < search_end + 16 <= src.len()
            // - 4; and m_pos < ip.
            v = unsafe { load_u64(src, ip + m_len) ^ load_u64(src, m_pos + m_len) };
            if ip + m_len >= search_end {
                return m_len;
            }
            if v != 0 {
                break;
            }
        }
    }
    m_len + (v.trailing_zeros() / 8) as usize
}
