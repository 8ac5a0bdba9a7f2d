//! The decoder's fast loop: whole instructions decoded through raw pointers
//! while the input and the output have room to spare.
//!
//! This module owns only [`run`], which the checked decoder in the parent
//! module calls at an instruction boundary. It decodes instruction after
//! instruction for as long as each one is plainly valid and far from the
//! ends of both buffers, and hands back at the first instruction that is
//! not (near an end, a match reaching before the output's start, the end
//! marker), without having consumed it: the checked decoder then decodes
//! that one itself, with its errors. So every error and every last byte is
//! the checked decoder's; this loop only makes the common case cheap, with
//! one room check per instruction instead of one per byte read or copied.
//!
//! The common instructions (a short literal run, an M2 match, an M3 match
//! with its length in its first byte, from 8 or more back: 90-93% of the
//! instructions in the three data sets of BENCHMARKS.md) take one path, which reads what each
//! needs from a table indexed by the first byte ([`COMMON`]) and chooses
//! the source of the copy, the distance and the lengths with conditional
//! moves, not branches: which of the three comes next is what no branch
//! predictor can learn, and a mispredicted branch per instruction was most
//! of the decoder's time. Every other instruction takes the branches below
//! it.
//!
//! Bounds: every pointer it reads or writes through is proven inside its
//! slice by the checks named in each `// SAFETY:` comment, all of which come
//! down to three facts checked before use: `ip + IN_ROOM <= in_end` at the
//! top of each instruction, `op + OUT_ROOM <= out_end` likewise, and for
//! runs and matches longer than those rooms, `ip + n + 16 <= in_end` /
//! `op + n + 16 <= out_end` (32 for a long literal run, copied 32 bytes at
//! a time) checked against the decoded length `n`. The cursors `ip` and
//! `op` are pointers into the two slices (not indices beside their base
//! pointers, which would keep two more values live in the loop), and
//! `in_end` / `out_end` point one past the slices' ends.
#![allow(unsafe_code)]

use crate::MIN_ZERO_RUN;

/// Input bytes every instruction may read without a further check: a
/// short literal run's first byte and up to 18 literals, copied as 32 bytes
/// from the byte after the first, then four state-bit literals (copied as
/// one 4-byte load whatever their number); a match reads less.
const IN_ROOM: usize = 40;
/// Output bytes every instruction may write without a further check: a
/// match of up to 33 bytes copied as five 8-byte stores, or a shorter run
/// or match as four, then the 4-byte store of its state literals. Longer
/// runs and matches check their own length.
const OUT_ROOM: usize = 48;

/// Where [`run`] stopped: the cursors and the literal state (0..=4) at the
/// start of the instruction it did not decode.
pub(super) struct Stop {
    pub ip: usize,
    pub op: usize,
    pub state: usize,
}

/// Copies 8 bytes from `src` to `dst`, as one load and one store (the
/// two may overlap: the load happens first).
///
/// # Safety
/// `src..src+8` must be readable and `dst..dst+8` writable.
#[inline(always)]
unsafe fn copy8(dst: *mut u8, src: *const u8) {
    // SAFETY: the caller's contract.
    unsafe {
        dst.cast::<u64>()
            .write_unaligned(src.cast::<u64>().read_unaligned())
    }
}

/// Copies 16 bytes from `src` to `dst` as one load and one store.
///
/// # Safety
/// `src..src+16` must be readable and `dst..dst+16` writable.
#[inline(always)]
unsafe fn copy16(dst: *mut u8, src: *const u8) {
    // SAFETY: the caller's contract.
    unsafe {
        dst.cast::<[u8; 16]>()
            .write_unaligned(src.cast::<[u8; 16]>().read_unaligned())
    }
}

/// Copies a match of `len` bytes from `dist` back to `op`.
///
/// # Safety
/// `dist <= op - out` (the source starts inside the output written so
/// far) and `op + len + 16 <= op_end` (whole 16-byte chunks fit).
#[inline(always)]
unsafe fn copy_match(op: *mut u8, dist: usize, len: usize) {
    // SAFETY: by the contract, `op - dist` is at or after the output's
    // start and every chunk below starts before `op + len` and is at most
    // 16 bytes long, so every read is in `out..op + len + 16` and every
    // write in `op..op + len + 16`, both inside the output.
    unsafe {
        let from = op.sub(dist);
        if dist >= 16 {
            // Each chunk reads 16 bytes ending at or before the start of
            // the chunk it writes: bytes already final.
            let mut i = 0;
            loop {
                copy16(op.add(i), from.add(i));
                i += 16;
                if i >= len {
                    break;
                }
            }
        } else if dist >= 8 {
            let mut i = 0;
            loop {
                copy8(op.add(i), from.add(i));
                i += 8;
                if i >= len {
                    break;
                }
            }
        } else {
            // Under 8 back: the first 8 bytes one at a time (each reads a
            // byte written before it), after which the output repeats with
            // period `dist`, so also with period `step` (the smallest
            // multiple of `dist` of at least 8): 8-byte chunks from `step`
            // back read only final bytes.
            for i in 0..8 {
                *op.add(i) = *from.add(i);
            }
            let step = STEP[dist];
            let mut i = 8;
            while i < len {
                copy8(op.add(i), op.add(i).sub(step));
                i += 8;
            }
        }
    }
}

/// What the fast path needs of an instruction's first byte: its length,
/// its own bytes and where its state bits are.
#[derive(Clone, Copy)]
struct Common {
    /// Bytes it copies; 0 for a first byte the fast path leaves alone.
    len: u8,
    /// Bytes of input it takes (its literals too, for a run).
    adv: u8,
    /// Where its state bits are in the little-endian u32 from its start,
    /// as a u64: 32 for a literal run, which has none (the shift leaves 0).
    state_shift: u8,
    /// The state after it, ORed with its state bits: 4 for a literal run
    /// (no state bits; what follows a run of 4 or more), 0 for a match.
    state_or: u8,
}

/// [`Common`] for each first byte: a literal run of 4 to 18 (1..=15, read
/// only after a match without state literals), an M3 match of 3 to 33
/// bytes with its length in the first byte (33..=63), an M2 match (64..).
const COMMON: [Common; 256] = {
    let none = Common {
        len: 0,
        adv: 0,
        state_shift: 0,
        state_or: 0,
    };
    let mut k = [none; 256];
    let mut t = 1;
    while t < 256 {
        k[t] = if t < 16 {
            Common {
                len: t as u8 + 3,
                adv: t as u8 + 4,
                state_shift: 32,
                state_or: 4,
            }
        } else if t < 33 {
            none
        } else if t < 64 {
            Common {
                len: (t & 31) as u8 + 2,
                adv: 3,
                state_shift: 8,
                state_or: 0,
            }
        } else {
            Common {
                len: (t >> 5) as u8 + 1,
                adv: 2,
                state_shift: 0,
                state_or: 0,
            }
        };
        t += 1;
    }
    k
};

/// `a` if `c`, else `b`, computed without a branch (both are at hand).
#[inline(always)]
fn pick(c: bool, a: usize, b: usize) -> usize {
    let mask = usize::from(c).wrapping_neg();
    (a & mask) | (b & !mask)
}

/// For a distance `d` of 1 to 7, the smallest multiple of `d` that is at
/// least 8.
const STEP: [usize; 8] = [0, 8, 8, 9, 8, 10, 12, 14];

/// Bytes from `p` to `end`, for a cursor at or before the end of its
/// buffer.
#[inline(always)]
fn left(p: *const u8, end: *const u8) -> usize {
    (end as usize) - (p as usize)
}

/// Decodes instructions from `ip` (a boundary, with `state`) while each is
/// plainly valid and has room, and returns where it stopped. `rle` says
/// whether the stream is lzo-rle's (zero-run instructions). Never reads
/// outside `src` nor writes outside `dst`, for any bytes in them.
///
/// The cursors are pointers into the two slices, not indices beside their
/// base pointers: the loop keeps fewer values live, and the input's base is
/// not one of them.
#[inline(never)]
pub(super) fn run(
    src: &[u8],
    dst: &mut [u8],
    rle: bool,
    ip: usize,
    op: usize,
    mut state: usize,
) -> Stop {
    let (in_len, out_len) = (src.len(), dst.len());
    if in_len < IN_ROOM || out_len < OUT_ROOM || ip > in_len || op > out_len {
        return Stop { ip, op, state };
    }
    let inp = src.as_ptr();
    let out = dst.as_mut_ptr();
    // The ends, the last instruction starts from which the rooms hold, and
    // the cursors: `inp <= ip <= in_end` and `out <= op <= out_end` hold
    // throughout (each step below moves them up only by what its checks
    // proved is inside the slices).
    // SAFETY: every offset is at most its slice's length (the rooms and
    // the cursors checked just above), so each pointer is inside its slice
    // or one past its end.
    let (in_end, out_end, in_last, out_last, mut ip, mut op) = unsafe {
        (
            inp.add(in_len),
            out.add(out_len),
            inp.add(in_len - IN_ROOM),
            out.add(out_len - OUT_ROOM),
            inp.add(ip),
            out.add(op),
        )
    };
    // What `run` hands back: the cursors as offsets.
    let stop = |ip: *const u8, op: *mut u8, state: usize| Stop {
        ip: left(inp, ip),
        op: left(out, op),
        state,
    };
    while ip <= in_last && op <= out_last {
        let start = ip;
        // SAFETY: `ip + IN_ROOM <= in_end` by the loop condition (which
        // also covers the instruction's next 3 bytes read below).
        let t = usize::from(unsafe { *ip });
        // The common instructions, decoded together without a branch on
        // which one it is: a short literal run (after a match without state
        // literals), an M2 match or an M3 match with its length in the
        // first byte (a match from 8 or more back). Its kind comes from a
        // table, so the only branch here is whether it is one of them,
        // which nearly always holds.
        {
            let k = COMMON[t];
            // SAFETY: ip + 4 <= ip + IN_ROOM <= in_end.
            let w = u32::from_le(unsafe { ip.cast::<u32>().read_unaligned() }) as usize;
            let m2 = t >= 64;
            let lit = t < 16;
            let dist = 1 + pick(m2, ((w >> 2) & 7) | ((w >> 5) & 0x7f8), (w >> 10) & 0x3fff);
            // A run reads no distance. One that may start here (state 0)
            // takes 8, which passes the check below; after 1 to 4 literals
            // the first byte is a match's instead, and the run takes a
            // distance of half the address space or more, which fails it
            // (no output is that long): one comparison for both.
            let dist = pick(lit, 8 + (state.wrapping_neg() >> 1), dist);
            // `8 <= dist <= op - out` in one comparison (false while fewer
            // than 8 bytes are written).
            if (k.len != 0) & (dist.wrapping_sub(8) < left(out, op).saturating_sub(7)) {
                let len = usize::from(k.len);
                let from = if lit {
                    ip.wrapping_add(1)
                } else {
                    op.wrapping_sub(dist).cast_const()
                };
                // SAFETY: a run (len <= 18, so four chunks): `from` is
                // ip + 1 and the 32 bytes read end at ip + 33 <= ip +
                // IN_ROOM <= in_end; `src` and `dst` do not overlap. A
                // match: 8 <= dist <= op - out (checked), so `from` is in
                // the output, and each 8-byte chunk reads bytes at least 8
                // before the ones it writes, already final. Writes end at
                // op + 40 <= op + OUT_ROOM <= out_end.
                unsafe {
                    copy8(op, from);
                    copy8(op.add(8), from.add(8));
                    copy8(op.add(16), from.add(16));
                    copy8(op.add(24), from.add(24));
                    if len > 32 {
                        copy8(op.add(32), from.add(32));
                    }
                }
                // The state bits (0 for a run, shifted out of the u64).
                let next = ((w as u64 >> k.state_shift) & 3) as usize;
                // SAFETY: a run took at most 19 bytes of input and wrote
                // 18; a match took at most 3 and wrote 33: from IN_ROOM =
                // 40 and OUT_ROOM = 48, ip + 4 <= in_end and op + 4 <=
                // out_end after the step, and then the state's 0 to 3
                // literals keep both inside their slices.
                unsafe {
                    ip = ip.add(usize::from(k.adv));
                    op = op.add(len);
                    op.cast::<u32>()
                        .write_unaligned(ip.cast::<u32>().read_unaligned());
                    ip = ip.add(next);
                    op = op.add(next);
                }
                state = next | usize::from(k.state_or);
                continue;
            }
        }
        let next;
        if t >= 32 && (t >= 64 || t & 31 != 0) {
            // An M2 or short M3 match the fast path above left: one from
            // under 8 back, or one reaching before the output's start.
            // SAFETY: ip + 4 <= ip + IN_ROOM <= in_end.
            let w = u32::from_le(unsafe { ip.cast::<u32>().read_unaligned() }) as usize;
            let m2 = t >= 64;
            let len = pick(m2, (t >> 5) + 1, (t & 31) + 2);
            let dist = 1 + pick(m2, ((w >> 2) & 7) | ((w >> 5) & 0x7f8), (w >> 10) & 0x3fff);
            if dist > left(out, op) || len + 16 > left(op, out_end) {
                return stop(start, op, state);
            }
            // SAFETY: both conditions of `copy_match`, checked just above;
            // the match takes 2 or 3 bytes of the IN_ROOM after `ip` and
            // writes `len` of the `len + 16` after `op`.
            unsafe {
                copy_match(op, dist, len);
                ip = ip.add(3 - usize::from(m2));
                op = op.add(len);
            }
            next = pick(m2, w, w >> 8) & 3;
        } else if t >= 32 {
            // A match from up to 16 KiB back with a long length.
            let Some((len, at)) = long_length(ip.wrapping_add(1), in_end, 33) else {
                return stop(start, op, state);
            };
            ip = at;
            if 6 > left(ip, in_end) {
                return stop(start, op, state);
            }
            // SAFETY: ip + 2 <= in_end (checked just above).
            let dd = usize::from(unsafe { ip.cast::<u16>().read_unaligned() }.to_le());
            let dist = 1 + (dd >> 2);
            if dist > left(out, op) || len + 16 > left(op, out_end) {
                return stop(start, op, state);
            }
            // SAFETY: both conditions of `copy_match`, checked just above;
            // `ip + 6 <= in_end` and `op + len + 16 <= out_end` cover the
            // two steps.
            unsafe {
                copy_match(op, dist, len);
                ip = ip.add(2);
                op = op.add(len);
            }
            next = dd & 3;
        } else if t >= 16 {
            // A match from 16 to 48 KiB back, a zero run or the end.
            // SAFETY: ip + 3 <= ip + IN_ROOM <= in_end.
            let dd = usize::from(unsafe { ip.add(1).cast::<u16>().read_unaligned() }.to_le());
            if rle && t & 0xf8 == 0x18 && dd & 0xfffc == 0xfffc {
                // SAFETY: ip + 4 <= in_end, as above.
                let high = usize::from(unsafe { *ip.add(3) });
                let len = ((t & 7) | high << 3) + MIN_ZERO_RUN;
                if len + 4 > left(op, out_end) {
                    return stop(start, op, state);
                }
                // SAFETY: `op + len + 4 <= out_end`, checked just above;
                // a run of up to 32 bytes is written as two 16-byte
                // stores, which end at op + 32 <= op + OUT_ROOM <= out_end
                // (the loop condition). Longer ones: `write_bytes` (a
                // call to memset costs more than two stores). The
                // instruction's 4 bytes are inside the IN_ROOM.
                unsafe {
                    if len <= 32 {
                        op.cast::<[u8; 16]>().write_unaligned([0; 16]);
                        op.add(16).cast::<[u8; 16]>().write_unaligned([0; 16]);
                    } else {
                        op.write_bytes(0, len);
                    }
                    ip = ip.add(4);
                    op = op.add(len);
                }
                next = dd & 3;
            } else {
                let mut len = (t & 7) + 2;
                ip = ip.wrapping_add(1);
                if len == 2 {
                    let Some((n, at)) = long_length(ip, in_end, 9) else {
                        return stop(start, op, state);
                    };
                    len = n;
                    ip = at;
                    if 6 > left(ip, in_end) {
                        return stop(start, op, state);
                    }
                }
                // SAFETY: ip + 2 <= in_end (the room, or checked above).
                let dd = usize::from(unsafe { ip.cast::<u16>().read_unaligned() }.to_le());
                let far = ((t & 8) << 11) + (dd >> 2);
                // `far == 0` is the end marker: the checked decoder's.
                if far == 0 || far + 0x4000 > left(out, op) || len + 16 > left(op, out_end) {
                    return stop(start, op, state);
                }
                // SAFETY: both conditions of `copy_match`, checked above;
                // `ip + 6 <= in_end` (the room, or checked above) and
                // `op + len + 16 <= out_end` cover the two steps.
                unsafe {
                    copy_match(op, far + 0x4000, len);
                    ip = ip.add(2);
                    op = op.add(len);
                }
                next = dd & 3;
            }
        } else if state == 0 {
            // A literal run.
            let mut n = t + 3;
            ip = ip.wrapping_add(1);
            if t == 0 {
                let Some((l, at)) = long_length(ip, in_end, 18) else {
                    return stop(start, op, state);
                };
                n = l;
                ip = at;
            }
            if n + 32 > left(ip, in_end) || n + 32 > left(op, out_end) {
                return stop(start, op, state);
            }
            // SAFETY: `ip + n + 32 <= in_end` and `op + n + 32 <= out_end`
            // (checked just above), so each 32-byte piece, starting before
            // `n`, is inside both slices, and so are the two steps; `src`
            // and `dst` do not overlap.
            unsafe {
                let mut i = 0;
                loop {
                    copy16(op.add(i), ip.add(i));
                    copy16(op.add(i + 16), ip.add(i + 16));
                    i += 32;
                    if i >= n {
                        break;
                    }
                }
                ip = ip.add(n);
                op = op.add(n);
            }
            state = 4;
            continue;
        } else {
            // 2 bytes from up to 1 KiB back (after 1 to 3 literals), or 3
            // bytes from 2 to 3 KiB back (after a literal run).
            // SAFETY: ip + 1 < ip + IN_ROOM <= in_end.
            let b = usize::from(unsafe { *ip.add(1) });
            let near = (b << 2) + (t >> 2) + 1;
            let (dist, len) = if state == 4 {
                (near + 0x800, 3)
            } else {
                (near, 2)
            };
            if dist > left(out, op) {
                return stop(start, op, state);
            }
            // SAFETY: `dist <= op - out` (checked) and `op + 3 + 4 <=
            // out_end` by the loop condition; byte by byte, as the two may
            // overlap. The instruction's 2 bytes are inside the IN_ROOM.
            unsafe {
                let from = op.sub(dist);
                *op = *from;
                *op.add(1) = *from.add(1);
                *op.add(2) = *from.add(2);
                ip = ip.add(2);
                op = op.add(len);
            }
            next = t & 3;
        }
        // The state bits' 0 to 3 literals, as one 4-byte copy (the excess
        // is overwritten by what follows).
        debug_assert!(left(ip, in_end) >= 4 && left(op, out_end) >= 4);
        // SAFETY: every branch above left `ip + 4 <= in_end`: it read at
        // most 4 bytes of an instruction that started at least IN_ROOM
        // before the end, or after a long length checked `ip + 6 <=
        // in_end` with 2 bytes still to read. And each left `op + 4 <=
        // out_end`: at most 8 bytes written from at least OUT_ROOM before
        // the end, or its own `op + len + 16` / `op + len + 4` check. The
        // 0 to 3 literals are inside those 4 bytes of both.
        unsafe {
            op.cast::<u32>()
                .write_unaligned(ip.cast::<u32>().read_unaligned());
            ip = ip.add(next);
            op = op.add(next);
        }
        state = next;
    }
    stop(ip, op, state)
}

/// A long length from `ip`: zero bytes each adding 255, then a nonzero
/// byte, all added to `base`. The length and the position after it, or
/// `None` if the input (which ends at `end`) ends first.
#[inline(always)]
fn long_length(mut ip: *const u8, end: *const u8, base: usize) -> Option<(usize, *const u8)> {
    let mut n = base;
    while ip < end {
        // SAFETY: `ip < end`, the input's end, and `ip` is at or after
        // the input's start (it starts at a cursor and only moves up).
        match unsafe { *ip } {
            0 => n += 255,
            b => return Some((n + usize::from(b), ip.wrapping_add(1))),
        }
        ip = ip.wrapping_add(1);
    }
    None
}
