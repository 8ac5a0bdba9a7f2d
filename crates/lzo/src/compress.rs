//! The LZO1X-1 compressor, as the kernel runs it, with lzo-rle's zero runs.
//!
//! This module owns the compressor's hash table ([`Compressor`]) and the
//! encoder: the block loop over the input, the match search and the output
//! of literal runs, matches and zero runs. It reads only its input slice and
//! writes only its output slice. Two things are unchecked, each with the
//! bounds that make it sound: the search loop's input loads, and the writes
//! of an instruction once the output's room for all of it (literal run,
//! 16-byte chunk excess, match or zero run: `instruction_room`) has been
//! checked; an instruction without that room is written with checked
//! writes. It refuses an output buffer smaller than [`crate::compress_bound`]
//! before it starts. It knows nothing of decoding.
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
    /// Writes one byte at `pos`, bounds-checked.
    fn byte(&mut self, b: u8) {
        // SAFETY: checked writes (`FAST` is false).
        unsafe { self.put::<false>(b) };
    }

    /// Writes `b` at `pos`, bounds-checked.
    fn bytes(&mut self, b: &[u8]) {
        // SAFETY: checked writes (`FAST` is false).
        unsafe { self.put_all::<false>(b) };
    }

    /// Writes one byte at `pos`.
    ///
    /// # Safety
    /// With `FAST`, `pos < buf.len()`: the caller checked the room of the
    /// whole instruction ([`instruction_room`]) before writing any of it.
    #[inline(always)]
    unsafe fn put<const FAST: bool>(&mut self, b: u8) {
        if FAST {
            debug_assert!(self.pos < self.buf.len());
            // SAFETY: pos < buf.len() by the caller's contract.
            unsafe { *self.buf.as_mut_ptr().add(self.pos) = b };
        } else {
            self.buf[self.pos] = b;
        }
        self.pos += 1;
    }

    /// Writes `b` at `pos`.
    ///
    /// # Safety
    /// With `FAST`, `pos + b.len() <= buf.len()` (see [`Output::put`]).
    #[inline(always)]
    unsafe fn put_all<const FAST: bool>(&mut self, b: &[u8]) {
        if FAST {
            debug_assert!(self.pos + b.len() <= self.buf.len());
            // SAFETY: the caller's contract keeps the bytes inside `buf`,
            // and `b` cannot overlap it (`buf` is borrowed mutably).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    b.as_ptr(),
                    self.buf.as_mut_ptr().add(self.pos),
                    b.len(),
                )
            };
        } else {
            self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        }
        self.pos += b.len();
    }

    /// A length beyond what an instruction's own bits hold: zero bytes for
    /// each 255, then the rest (at least 1).
    ///
    /// # Safety
    /// With `FAST`, room for `rest / 255 + 1` bytes (see [`Output::put`]).
    #[inline(always)]
    unsafe fn long_length<const FAST: bool>(&mut self, mut rest: usize) {
        while rest > 255 {
            rest -= 255;
            // SAFETY: at most rest / 255 zero bytes, within the room.
            unsafe { self.put::<FAST>(0) };
        }
        // SAFETY: the last byte of the room.
        unsafe { self.put::<FAST>(rest as u8) };
    }

    /// The instruction bytes that announce a literal run of `t` bytes (not
    /// the stream's first instruction): up to three literals go in the
    /// previous instruction's state bits, up to 18 in one length byte, more
    /// in a zero byte and a long length.
    ///
    /// # Safety
    /// With `FAST`, room for `t / 255 + 2` bytes (see [`Output::put`]).
    #[inline(always)]
    unsafe fn literal_header<const FAST: bool>(&mut self, t: usize) {
        if t <= 3 {
            let at = self.pos - self.state_back;
            self.buf[at] |= t as u8;
        } else if t <= 18 {
            // SAFETY: one byte of the room.
            unsafe { self.put::<FAST>((t - 3) as u8) };
        } else {
            // SAFETY: 1 + (t - 18) / 255 + 1 <= t / 255 + 2 bytes.
            unsafe {
                self.put::<FAST>(0);
                self.long_length::<FAST>(t - 18);
            }
        }
    }

    /// A literal run of `lit` after the stream's first instruction.
    #[inline(always)]
    fn literals(&mut self, lit: &[u8]) {
        // SAFETY: checked writes (`FAST` is false).
        unsafe {
            self.literal_header::<false>(lit.len());
            self.put_all::<false>(lit);
        }
    }

    /// The literal run `src[from..to]` inside a block, where at least 16
    /// bytes of input follow `to`: copied in 16-byte chunks when the output
    /// has room for the last chunk's excess, which the next instruction
    /// overwrites.
    ///
    /// # Safety
    /// With `FAST`, room for `n + n / 255 + 2 + 16` bytes, `n = to - from`
    /// (see [`Output::put`]); and `to + 16 <= src.len()` in either case.
    #[inline(always)]
    unsafe fn block_literals<const FAST: bool>(&mut self, src: &[u8], from: usize, to: usize) {
        let n = to - from;
        // SAFETY: n / 255 + 2 bytes of the room.
        unsafe { self.literal_header::<FAST>(n) };
        if FAST {
            debug_assert!(to + 16 <= src.len() && self.pos + n + 16 <= self.buf.len());
            let (s, d) = (src.as_ptr(), self.buf.as_mut_ptr());
            let mut i = 0;
            while i < n {
                // SAFETY: from + i < to, so the 16 bytes read end before
                // to + 16 <= src.len(); the 16 written end before
                // pos + n + 16, within the room. `src` and `buf` do not
                // overlap (`buf` is borrowed mutably).
                unsafe {
                    d.add(self.pos + i)
                        .cast::<[u8; 16]>()
                        .write_unaligned(s.add(from + i).cast::<[u8; 16]>().read_unaligned())
                };
                i += 16;
            }
            self.pos += n;
        } else if self.pos + n + 16 <= self.buf.len() {
            let mut i = 0;
            while i < n {
                let chunk: [u8; 16] = src[from + i..from + i + 16].try_into().expect("16 bytes");
                self.buf[self.pos + i..self.pos + i + 16].copy_from_slice(&chunk);
                i += 16;
            }
            self.pos += n;
        } else {
            // SAFETY: checked writes.
            unsafe { self.put_all::<false>(&src[from..to]) };
        }
    }

    /// One instruction of a block: the literal run `src[lit..ip]` (if any),
    /// then the zero run of `zero_run` bytes at `ip` or, if that is 0, the
    /// match of `m_len` bytes at `ip` with `src[m_pos..]`. Returns the
    /// position after it.
    ///
    /// # Safety
    /// With `FAST`, room for [`instruction_room`]`(ip - lit, m_len)` bytes
    /// (see [`Output::put`]); and `ip + 16 <= src.len()` in either case.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn instruction<const FAST: bool>(
        &mut self,
        src: &[u8],
        lit: usize,
        mut ip: usize,
        m_pos: usize,
        mut m_len: usize,
        zero_run: usize,
        rle: bool,
    ) -> usize {
        // The room: the literal run takes at most n + n / 255 + 2 + 16
        // bytes of it, the match or zero run at most m_len / 255 + 5, which
        // `instruction_room` bounds.
        if ip > lit {
            // SAFETY: the literal run's share of the room; ip + 16 <= src.len().
            unsafe { self.block_literals::<FAST>(src, lit, ip) };
        }
        if zero_run > 0 {
            ip += zero_run;
            let run = (zero_run - MIN_ZERO_RUN) as u32;
            // An M4 tag with the high-distance bit and distance bits all
            // ones, which no match of lzo-rle uses: 0001 1RRR, 1111 11SS,
            // 1111 1111, RRRR RRRR (run length less 4, low 3 bits first).
            let word = (run << 21) | 0x00ff_fc18 | (run & 7);
            // SAFETY: four bytes, the zero run's share of the room.
            unsafe { self.put_all::<FAST>(&word.to_le_bytes()) };
            self.state_back = 3;
            return ip;
        }
        let m_off = ip - m_pos;
        ip += m_len;
        if m_len <= M2_MAX_LEN && m_off <= M2_MAX_OFFSET {
            let d = m_off - 1;
            let word = (((m_len - 1) << 5) | ((d & 7) << 2)) as u16 | (((d >> 3) as u16) << 8);
            // SAFETY: two bytes, within the match's share of the room.
            unsafe { self.put_all::<FAST>(&word.to_le_bytes()) };
        } else if m_off <= M3_MAX_OFFSET {
            let d = m_off - 1;
            // SAFETY: a tag, (m_len - 33) / 255 + 1 length bytes and two
            // distance bytes, within the match's share of the room.
            unsafe {
                if m_len <= M3_MAX_LEN {
                    self.put::<FAST>(M3_MARKER | (m_len - 2) as u8);
                } else {
                    self.put::<FAST>(M3_MARKER);
                    self.long_length::<FAST>(m_len - M3_MAX_LEN);
                }
                self.put_all::<FAST>(&((d << 2) as u16).to_le_bytes());
            }
        } else {
            let d = m_off - 0x4000;
            let high = ((d >> 11) & 8) as u8;
            if rle && m_len > M4_MAX_LEN && (d & 0x403f) == 0x403f && (261..=264).contains(&m_len) {
                // Its length byte and first distance byte would read as a
                // zero run: shorten the match to 260.
                ip -= m_len - 260;
                m_len = 260;
            }
            // SAFETY: a tag, (m_len - 9) / 255 + 1 length bytes and two
            // distance bytes, within the match's share of the room.
            unsafe {
                if m_len <= M4_MAX_LEN {
                    self.put::<FAST>(M4_MARKER | high | (m_len - 2) as u8);
                } else {
                    self.put::<FAST>(M4_MARKER | high);
                    self.long_length::<FAST>(m_len - M4_MAX_LEN);
                }
                self.put_all::<FAST>(&((d << 2) as u16).to_le_bytes());
            }
        }
        self.state_back = 2;
        ip
    }
}

/// The most output bytes one instruction of a block writes, counting the
/// 16-byte chunks' excess: a literal run of `n` bytes (its header, the run
/// and a chunk's excess) and a match of `m_len` bytes (tag, extra length
/// bytes, two distance bytes) or a zero run (four bytes). Each `x / 255`
/// is bounded by `x >> 7`, a shift where a division costs a multiply.
#[inline(always)]
fn instruction_room(n: usize, m_len: usize) -> usize {
    n + (n >> 7) + 2 + 16 + (m_len >> 7) + 5
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
        self.compress_with::<false>(variant, src, dst)
    }

    /// [`Compressor::compress`], with every instruction written by checked
    /// writes when `CHECKED_ONLY` (for the test that holds the two write
    /// paths to the same bytes).
    fn compress_with<const CHECKED_ONLY: bool>(
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
            pending = self.block::<CHECKED_ONLY>(src, block, len, &mut out, pending, rle);
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
    fn block<const CHECKED_ONLY: bool>(
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
        // The first position searched is one past the block's start: the
        // search steps one byte forward, and one more for every 32 bytes
        // without a match, and restarts right after each match.
        ip += 1 + ((ip - lit) >> 5);
        'block: loop {
            let mut zero_run = 0;
            let m_pos = loop {
                if ip >= search_end {
                    break 'block;
                }
                // SAFETY: ip < search_end = end - 20 <= src.len() - 20.
                let dv = unsafe { load_u32(src, ip) };
                if dv == 0 && rle {
                    let limit = search_end.min(ip + MAX_ZERO_RUN + 1);
                    zero_run = (zeros_from(src, ip + 4, limit) - ip).min(MAX_ZERO_RUN);
                    break 0;
                }
                let h = (dv.wrapping_mul(HASH_MULTIPLIER) >> (32 - HASH_BITS)) as usize;
                let candidate = base + usize::from(table[h & (HASH_SIZE - 1)]);
                table[h & (HASH_SIZE - 1)] = (ip - base) as u16;
                // SAFETY: the table holds only positions of this block
                // before `ip` (it is cleared for each block), or 0: so
                // candidate <= ip, and ip + 4 <= src.len() as above.
                if unsafe { load_u32(src, candidate) } == dv {
                    break candidate;
                }
                ip += 1 + ((ip - lit) >> 5);
            };

            lit -= pending;
            pending = 0;
            let m_len = if zero_run > 0 {
                0
            } else {
                match_len(src, ip, m_pos, search_end)
            };
            let n = ip - lit;
            if !CHECKED_ONLY && out.buf.len() - out.pos >= instruction_room(n, m_len) {
                // SAFETY: the output has the room `instruction_room` counts
                // for this instruction (checked just above), and
                // `lit <= ip < search_end`, so the literal chunks' 16-byte
                // loads end before `search_end + 16 <= src.len()`.
                ip = unsafe { out.instruction::<true>(src, lit, ip, m_pos, m_len, zero_run, rle) };
            } else {
                // SAFETY: checked writes; ip + 16 < search_end + 16 <= src.len().
                ip = unsafe { out.instruction::<false>(src, lit, ip, m_pos, m_len, zero_run, rle) };
            }
            lit = ip;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Inputs whose instructions cover every kind: literal runs of every
    /// length class, short and long matches at every distance class, zero
    /// runs, and incompressible stretches; in one block and across blocks.
    fn inputs() -> Vec<Vec<u8>> {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut all = Vec::new();
        for len in [0usize, 5, 21, 64, 300, 4096, 70_000] {
            if cfg!(miri) && len > 4096 {
                break; // Miri is some 10^4 times slower: short inputs only.
            }
            let random: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let mut mixed = Vec::with_capacity(len);
            while mixed.len() < len {
                match next() % 5 {
                    0 => mixed.extend((0..next() % 40).map(|_| next() as u8)),
                    1 => mixed.extend(std::iter::repeat_n(0, (next() % 3000) as usize)),
                    2 if mixed.len() > 8 => {
                        let back = 1 + (next() as usize) % mixed.len().min(0xc000);
                        let from = mixed.len() - back;
                        for i in 0..(next() % 600) as usize {
                            mixed.push(mixed[from + i]);
                        }
                    }
                    _ => mixed.extend(b"the quick brown fox jumps over the lazy dog "),
                }
            }
            mixed.truncate(len);
            all.push(random);
            all.push(mixed);
        }
        // An M4 match whose length byte and first distance byte would read
        // as a zero run in lzo-rle (distance 0x803f, 262 bytes long), which
        // the encoder shortens to 260: a 262-byte pattern after a zero run,
        // zeros, the pattern again right after a zero run, then noise.
        let pattern: Vec<u8> = (0..262).map(|_| next() as u8 | 1).collect();
        let mut m4 = vec![0u8; 64];
        m4.extend(&pattern);
        m4.resize(64 + 0x803f, 0);
        m4.extend(&pattern);
        m4.extend((0..64).map(|_| next() as u8 | 1));
        all.push(m4);
        all
    }

    #[test]
    fn checked_and_room_checked_writes_give_the_same_bytes() {
        let mut c = Compressor::new();
        for input in inputs() {
            for variant in [Variant::Lzo, Variant::LzoRle] {
                let mut fast = vec![0u8; compress_bound(input.len())];
                let mut checked = vec![0u8; compress_bound(input.len())];
                let n = c.compress(variant, &input, &mut fast).unwrap();
                let m = c
                    .compress_with::<true>(variant, &input, &mut checked)
                    .unwrap();
                assert_eq!(
                    fast[..n],
                    checked[..m],
                    "{variant:?}, {} bytes",
                    input.len()
                );
            }
        }
    }
}
