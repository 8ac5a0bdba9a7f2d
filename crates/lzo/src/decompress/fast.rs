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
//! Bounds: every pointer it reads or writes through is proven inside its
//! slice by the checks named in each `// SAFETY:` comment, all of which come
//! down to three facts checked before use: `ip + IN_ROOM <= ip_end` at the
//! top of each instruction, `op + OUT_ROOM <= op_end` likewise, and for
//! runs and matches longer than those rooms, `ip + n + 16 <= ip_end` /
//! `op + n + 16 <= op_end` checked against the decoded length `n`.
#![allow(unsafe_code)]

use crate::MIN_ZERO_RUN;

/// Input bytes every instruction may read without a further check: its
/// first byte, up to three more of its own, and four state-bit literals
/// (copied as one 4-byte load whatever their number).
const IN_ROOM: usize = 8;
/// Output bytes every instruction may write without a further check: a
/// match of up to 8 bytes copied as one 8-byte store, then the 4-byte
/// store of its state literals. Longer runs check their own length.
const OUT_ROOM: usize = 16;

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

/// For a distance `d` of 1 to 7, the smallest multiple of `d` that is at
/// least 8.
const STEP: [usize; 8] = [0, 8, 8, 9, 8, 10, 12, 14];

/// Decodes instructions from `ip` (a boundary, with `state`) while each is
/// plainly valid and has room, and returns where it stopped. `rle` says
/// whether the stream is lzo-rle's (zero-run instructions). Never reads
/// outside `src` nor writes outside `dst`, for any bytes in them.
#[inline(never)]
pub(super) fn run(
    src: &[u8],
    dst: &mut [u8],
    rle: bool,
    mut ip: usize,
    mut op: usize,
    mut state: usize,
) -> Stop {
    let (in_len, out_len) = (src.len(), dst.len());
    let inp = src.as_ptr();
    let out = dst.as_mut_ptr();
    // The last instruction starts from which the rooms hold.
    if in_len < IN_ROOM || out_len < OUT_ROOM {
        return Stop { ip, op, state };
    }
    let (in_last, out_last) = (in_len - IN_ROOM, out_len - OUT_ROOM);
    while ip <= in_last && op <= out_last {
        let start = ip;
        // SAFETY: `ip + IN_ROOM <= in_len` by the loop condition (which
        // also covers the instruction's next 3 bytes read below).
        let t = usize::from(unsafe { *inp.add(ip) });
        let next;
        if t >= 64 {
            // 3 to 8 bytes from up to 2 KiB back.
            // SAFETY: ip + 1 < ip + IN_ROOM <= in_len.
            let b = usize::from(unsafe { *inp.add(ip + 1) });
            let dist = 1 + ((t >> 2) & 7) + (b << 3);
            if dist > op {
                return Stop {
                    ip: start,
                    op,
                    state,
                };
            }
            let len = (t >> 5) + 1;
            // SAFETY: `dist <= op` (checked) and `op + 8 + 4 <= op + OUT_ROOM
            // <= out_len` (the loop condition), so an 8-byte chunk fits.
            unsafe {
                let o = out.add(op);
                if dist >= 8 {
                    copy8(o, o.sub(dist));
                } else {
                    let from = o.sub(dist);
                    for i in 0..len {
                        *o.add(i) = *from.add(i);
                    }
                }
            }
            ip += 2;
            op += len;
            next = t & 3;
        } else if t >= 32 {
            // A match from up to 16 KiB back.
            let mut len = (t & 31) + 2;
            ip += 1;
            if len == 2 {
                let Some((n, at)) = long_length(src, ip, 33) else {
                    return Stop {
                        ip: start,
                        op,
                        state,
                    };
                };
                len = n;
                ip = at;
                if ip + 6 > in_len {
                    return Stop {
                        ip: start,
                        op,
                        state,
                    };
                }
            }
            // SAFETY: ip + 2 <= in_len (the room, or checked just above).
            let dd = usize::from(unsafe { inp.add(ip).cast::<u16>().read_unaligned() }.to_le());
            let dist = 1 + (dd >> 2);
            if dist > op || op + len + 16 > out_len {
                return Stop {
                    ip: start,
                    op,
                    state,
                };
            }
            // SAFETY: both conditions of `copy_match`, checked just above.
            unsafe { copy_match(out.add(op), dist, len) };
            ip += 2;
            op += len;
            next = dd & 3;
        } else if t >= 16 {
            // A match from 16 to 48 KiB back, a zero run or the end.
            // SAFETY: ip + 3 <= ip + IN_ROOM <= in_len.
            let dd = usize::from(unsafe { inp.add(ip + 1).cast::<u16>().read_unaligned() }.to_le());
            if rle && t & 0xf8 == 0x18 && dd & 0xfffc == 0xfffc {
                // SAFETY: ip + 4 <= in_len, as above.
                let high = usize::from(unsafe { *inp.add(ip + 3) });
                let len = ((t & 7) | high << 3) + MIN_ZERO_RUN;
                if op + len > out_len - 4 {
                    return Stop {
                        ip: start,
                        op,
                        state,
                    };
                }
                // SAFETY: `op + len + 4 <= out_len`, checked just above.
                unsafe { out.add(op).write_bytes(0, len) };
                ip += 4;
                op += len;
                next = dd & 3;
            } else {
                let mut len = (t & 7) + 2;
                ip += 1;
                if len == 2 {
                    let Some((n, at)) = long_length(src, ip, 9) else {
                        return Stop {
                            ip: start,
                            op,
                            state,
                        };
                    };
                    len = n;
                    ip = at;
                    if ip + 6 > in_len {
                        return Stop {
                            ip: start,
                            op,
                            state,
                        };
                    }
                }
                // SAFETY: ip + 2 <= in_len (the room, or checked above).
                let dd = usize::from(unsafe { inp.add(ip).cast::<u16>().read_unaligned() }.to_le());
                let far = ((t & 8) << 11) + (dd >> 2);
                // `far == 0` is the end marker: the checked decoder's.
                if far == 0 || far + 0x4000 > op || op + len + 16 > out_len {
                    return Stop {
                        ip: start,
                        op,
                        state,
                    };
                }
                // SAFETY: both conditions of `copy_match`, checked above.
                unsafe { copy_match(out.add(op), far + 0x4000, len) };
                ip += 2;
                op += len;
                next = dd & 3;
            }
        } else if state == 0 {
            // A literal run.
            let mut n = t + 3;
            ip += 1;
            if t == 0 {
                let Some((l, at)) = long_length(src, ip, 18) else {
                    return Stop {
                        ip: start,
                        op,
                        state,
                    };
                };
                n = l;
                ip = at;
            }
            if ip + n + 16 > in_len || op + n + 16 > out_len {
                return Stop {
                    ip: start,
                    op,
                    state,
                };
            }
            // SAFETY: `ip + n + 16 <= in_len` and `op + n + 16 <= out_len`
            // (checked just above), so each 16-byte chunk, starting before
            // `n`, is inside both slices; `src` and `dst` do not overlap.
            unsafe {
                let (s, d) = (inp.add(ip), out.add(op));
                let mut i = 0;
                loop {
                    copy16(d.add(i), s.add(i));
                    i += 16;
                    if i >= n {
                        break;
                    }
                }
            }
            ip += n;
            op += n;
            state = 4;
            continue;
        } else {
            // 2 bytes from up to 1 KiB back (after 1 to 3 literals), or 3
            // bytes from 2 to 3 KiB back (after a literal run).
            // SAFETY: ip + 1 < ip + IN_ROOM <= in_len.
            let b = usize::from(unsafe { *inp.add(ip + 1) });
            let near = (b << 2) + (t >> 2) + 1;
            let (dist, len) = if state == 4 {
                (near + 0x800, 3)
            } else {
                (near, 2)
            };
            if dist > op {
                return Stop {
                    ip: start,
                    op,
                    state,
                };
            }
            // SAFETY: `dist <= op` (checked) and `op + 3 + 4 <= out_len` by
            // the loop condition; byte by byte, as the two may overlap.
            unsafe {
                let o = out.add(op);
                let from = o.sub(dist);
                *o = *from;
                *o.add(1) = *from.add(1);
                *o.add(2) = *from.add(2);
            }
            ip += 2;
            op += len;
            next = t & 3;
        }
        // The state bits' 0 to 3 literals, as one 4-byte copy (the excess
        // is overwritten by what follows).
        debug_assert!(ip + 4 <= in_len && op + 4 <= out_len);
        // SAFETY: every branch above left `ip + 4 <= in_len`: it read at
        // most 4 bytes of an instruction that started at least IN_ROOM = 8
        // before the end, or after a long length checked `ip + 6 <= in_len`
        // with 2 bytes still to read. And each left `op + 4 <= out_len`: at
        // most 8 bytes written from at least OUT_ROOM = 16 before the end,
        // or its own `op + len + 16` / `op + len + 4` check.
        unsafe {
            out.add(op)
                .cast::<u32>()
                .write_unaligned(inp.add(ip).cast::<u32>().read_unaligned())
        };
        ip += next;
        op += next;
        state = next;
    }
    Stop { ip, op, state }
}

/// A long length from `ip`: zero bytes each adding 255, then a nonzero
/// byte, all added to `base`. The length and the position after it, or
/// `None` if the input ends first.
#[inline(always)]
fn long_length(src: &[u8], mut ip: usize, base: usize) -> Option<(usize, usize)> {
    let mut n = base;
    loop {
        match *src.get(ip)? {
            0 => n += 255,
            b => return Some((n + usize::from(b), ip + 1)),
        }
        ip += 1;
    }
}
