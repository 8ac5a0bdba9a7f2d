//! The fast LZ4 compressor, as the kernel's `LZ4_compress_fast` and its
//! streaming form (`LZ4_loadDict`, `LZ4_compress_fast_continue`) run on
//! 64-bit little-endian machines.
//!
//! This module owns the compressor's hash tables ([`Compressor`]), the
//! prepared dictionary zram copies before each page ([`Dict`]), the stream
//! ([`Stream`]) and the one encoder loop all of them share. It reads only
//! its input, dictionary and table, and writes only its output and table.
//! It knows nothing of decoding or of LZ4HC.
//!
//! What decides the output bytes, all as the kernel has them: inputs under
//! 64 KiB + 11 bytes use a table of 8192 16-bit positions and a 4-byte
//! hash, larger ones (and every stream) 4096 32-bit positions and a hash
//! of the low 5 bytes of an 8-byte load; the search skips one more byte
//! for every 64 (times the acceleration) tries since the last match; a
//! found match is extended backwards over literals, then forwards; after
//! a match the position two bytes back is hashed and the next position is
//! tried at once as a match with no literals. Positions are kept in one
//! virtual space per stream: the dictionary right before the block, as
//! the kernel's `currentOffset` lays them out.

use crate::{
    common_prefix, compress_bound, read32, Error, Out, DICT_MAX, LASTLITERALS, MAX_DISTANCE,
    MAX_INPUT_SIZE, MFLIMIT, MINMATCH, PRIME32,
};

/// log2 of the 32-bit table's entries (`LZ4_HASHLOG`).
const HASH_LOG: u32 = 12;
/// Entries of the 32-bit table (16 KiB, the kernel's `LZ4_stream_t`).
const HASH_SIZE_U32: usize = 1 << HASH_LOG;
/// Entries of the 16-bit table (the same 16 KiB seen as 16-bit cells).
const HASH_SIZE_U16: usize = 1 << (HASH_LOG + 1);
/// Inputs below this use the 16-bit table (`LZ4_64Klimit`).
const LIMIT_64K: usize = 64 * 1024 + (MFLIMIT - 1);
/// Inputs below this are all literals (`LZ4_minLength`).
const MIN_LENGTH: usize = MFLIMIT + 1;
/// `LZ4_SKIPTRIGGER`.
const SKIP_TRIGGER: u32 = 6;
/// The 5-byte hash's multiplier.
const PRIME5: u64 = 889_523_592_379;

/// The 4-byte hash into the 16-bit table.
#[inline(always)]
fn hash4(seq: u32) -> usize {
    (seq.wrapping_mul(PRIME32) >> (32 - (HASH_LOG + 1))) as usize
}

/// The hash of the low 5 bytes of an 8-byte load, into the 32-bit table.
#[inline(always)]
fn hash5(seq: u64) -> usize {
    ((seq << 24).wrapping_mul(PRIME5) >> (64 - HASH_LOG)) as usize
}

/// One of the kernel's two table layouts, as the encoder sees it.
trait Table {
    /// The hash of the bytes at `s[at..]`.
    fn hash(s: &[u8], at: usize) -> usize;
    /// The position stored under `h`.
    fn get(&self, h: usize) -> u32;
    /// Stores position `v` under `h`.
    fn put(&mut self, h: usize, v: u32);
    /// Whether matches are checked against [`MAX_DISTANCE`] (the 16-bit
    /// table's inputs are too short to need it).
    const CHECK_DISTANCE: bool;
}

/// The 16-bit table (`byU16`).
struct Small<'a>(&'a mut [u16; HASH_SIZE_U16]);
/// The 32-bit table (`byU32`).
struct Large<'a>(&'a mut [u32; HASH_SIZE_U32]);

impl Table for Small<'_> {
    #[inline(always)]
    fn hash(s: &[u8], at: usize) -> usize {
        hash4(read32(s, at))
    }
    #[inline(always)]
    fn get(&self, h: usize) -> u32 {
        u32::from(self.0[h])
    }
    #[inline(always)]
    fn put(&mut self, h: usize, v: u32) {
        self.0[h] = v as u16;
    }
    const CHECK_DISTANCE: bool = false;
}

impl Table for Large<'_> {
    #[inline(always)]
    fn hash(s: &[u8], at: usize) -> usize {
        hash5(u64::from_le_bytes(
            s[at..at + 8].try_into().expect("8 bytes"),
        ))
    }
    #[inline(always)]
    fn get(&self, h: usize) -> u32 {
        self.0[h]
    }
    #[inline(always)]
    fn put(&mut self, h: usize, v: u32) {
        self.0[h] = v;
    }
    const CHECK_DISTANCE: bool = true;
}

/// What precedes a block in the virtual position space.
#[derive(Clone, Copy)]
struct Before<'a> {
    /// The dictionary (empty without one); its last byte is at virtual
    /// position `offset - 1`.
    dict: &'a [u8],
    /// The virtual position of the block's first byte (`currentOffset`).
    offset: u32,
    /// Whether candidates older than the dictionary are possible and must
    /// be refused (`dictSmall`: a dictionary under 64 KiB).
    small: bool,
}

/// The encoder (the kernel's `LZ4_compress_generic`), with `EXT` for a
/// block after a dictionary in another buffer (`usingExtDict`); `limited`
/// applies the kernel's output checks for an output under the bound.
fn encode<T: Table, const EXT: bool>(
    table: &mut T,
    src: &[u8],
    dst: &mut [u8],
    limited: bool,
    before: Before<'_>,
    acceleration: u32,
) -> Result<usize, Error> {
    let len = src.len();
    let olimit = dst.len();
    let mut out = Out { buf: dst, pos: 0 };
    let off = before.offset;
    let dict = before.dict;
    let dict_len = dict.len() as u32;
    // The virtual position where the dictionary starts (`lowRefLimit`).
    let dict_start = off.wrapping_sub(dict_len);
    let mut anchor = 0usize;

    if len >= MIN_LENGTH {
        let mflimit = len - MFLIMIT;
        let matchlimit = len - LASTLITERALS;
        let vpos = |i: usize| off.wrapping_add(i as u32);
        // A candidate is usable if it is inside the window and its first
        // four bytes equal those at `ip`; checked in the kernel's order,
        // which also keeps every read inside the dictionary or the block.
        let usable = |m: u32, ip: usize| -> bool {
            if EXT && before.small && m < dict_start {
                return false;
            }
            if T::CHECK_DISTANCE && m.wrapping_add(MAX_DISTANCE) < vpos(ip) {
                return false;
            }
            let here = read32(src, ip);
            if EXT && m < off {
                read32(dict, (m - dict_start) as usize) == here
            } else {
                read32(src, (m - off) as usize) == here
            }
        };

        let mut ip = 0usize;
        table.put(T::hash(src, ip), vpos(ip));
        ip += 1;
        let mut forward_h = T::hash(src, ip);

        'sequences: loop {
            // Find a match.
            let mut forward = ip;
            let mut step = 1usize;
            let mut search = acceleration << SKIP_TRIGGER;
            let mut m;
            loop {
                let h = forward_h;
                ip = forward;
                forward += step;
                step = (search >> SKIP_TRIGGER) as usize;
                search = search.wrapping_add(1);
                if forward > mflimit {
                    break 'sequences;
                }
                m = table.get(h);
                forward_h = T::hash(src, forward);
                table.put(h, vpos(ip));
                if usable(m, ip) {
                    break;
                }
            }

            // Catch up: extend the match backwards over the literals, not
            // past the start of the segment (dictionary or block) it is in.
            let in_dict = EXT && m < off;
            let low = if in_dict { dict_start } else { off };
            while ip > anchor && m > low {
                let prev = if in_dict {
                    dict[(m - 1 - dict_start) as usize]
                } else {
                    src[(m - 1 - off) as usize]
                };
                if src[ip - 1] != prev {
                    break;
                }
                ip -= 1;
                m -= 1;
            }

            // The literals.
            let lit = ip - anchor;
            if limited && out.pos + 1 + lit + (2 + 1 + LASTLITERALS) + lit / 255 > olimit {
                return Err(out.full());
            }
            let mut token = out.literals(&src[anchor..ip])?;

            // The match (and each one found at once after it).
            loop {
                let offset = vpos(ip).wrapping_sub(m) as u16;
                let mut code;
                if EXT && m < off {
                    let di = (m - dict_start) as usize;
                    let limit = (ip + (dict.len() - di)).min(matchlimit);
                    code = common_prefix(&src[ip + MINMATCH..limit], &dict[di + MINMATCH..]);
                    ip += MINMATCH + code;
                    if ip == limit {
                        let more = common_prefix(&src[ip..matchlimit], src);
                        code += more;
                        ip += more;
                    }
                } else {
                    let ms = (m - off) as usize;
                    code = common_prefix(&src[ip + MINMATCH..matchlimit], &src[ms + MINMATCH..]);
                    ip += MINMATCH + code;
                }
                if limited && out.pos + 2 + (1 + LASTLITERALS) + (code >> 8) > olimit {
                    return Err(out.full());
                }
                out.matched(token, offset, code)?;
                anchor = ip;

                if ip > mflimit {
                    break 'sequences;
                }
                table.put(T::hash(src, ip - 2), vpos(ip - 2));
                let h = T::hash(src, ip);
                m = table.get(h);
                table.put(h, vpos(ip));
                if usable(m, ip) {
                    token = out.pos;
                    out.byte(0)?;
                    continue;
                }
                ip += 1;
                forward_h = T::hash(src, ip);
                break;
            }
        }
    }

    // The last literals.
    let last = len - anchor;
    if limited && out.pos + last + 1 + (last + 255 - 15) / 255 > olimit {
        return Err(out.full());
    }
    out.literals(&src[anchor..])?;
    Ok(out.pos)
}

/// The working memory of the kernel's `LZ4_compress_fast` (its 16 KiB
/// `LZ4_stream_t`), reused from call to call. One per thread.
#[derive(Clone)]
pub struct Compressor {
    small: Box<[u16; HASH_SIZE_U16]>,
    large: Box<[u32; HASH_SIZE_U32]>,
}

impl Default for Compressor {
    fn default() -> Self {
        Compressor::new()
    }
}

impl std::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compressor").finish_non_exhaustive()
    }
}

/// The acceleration the kernel runs for a requested one (below 1: 1).
fn acceleration(requested: i32) -> u32 {
    if requested < 1 {
        1
    } else {
        requested as u32
    }
}

fn check_input(src: &[u8]) -> Result<(), Error> {
    if src.len() > MAX_INPUT_SIZE {
        return Err(Error::InputTooLarge { len: src.len() });
    }
    Ok(())
}

impl Compressor {
    /// A compressor with its tables.
    pub fn new() -> Compressor {
        Compressor {
            small: Box::new([0; HASH_SIZE_U16]),
            large: Box::new([0; HASH_SIZE_U32]),
        }
    }

    /// Compresses `src` into `dst` as the kernel's `LZ4_compress_fast`
    /// with `acceleration` (zram's `level`; below 1 counts as 1); returns
    /// the compressed length. With `dst` at least [`compress_bound`] long
    /// it cannot fail for an input up to [`MAX_INPUT_SIZE`]; with less,
    /// the kernel's limited-output checks decide.
    ///
    /// From an acceleration of 2^26 on, the kernel's search step
    /// (`acceleration << 6` in 32 bits) wraps to 0 and each position is
    /// found as its own match, at offset 0: the output, the kernel's to the
    /// byte, is no valid block (zram takes such a level and stores pages it
    /// cannot read back).
    pub fn compress_fast(
        &mut self,
        src: &[u8],
        dst: &mut [u8],
        acceleration: i32,
    ) -> Result<usize, Error> {
        check_input(src)?;
        let acc = self::acceleration(acceleration);
        let limited = dst.len() < compress_bound(src.len());
        let none = Before {
            dict: &[],
            offset: 0,
            small: false,
        };
        if src.len() < LIMIT_64K {
            self.small.fill(0);
            encode::<_, false>(&mut Small(&mut self.small), src, dst, limited, none, acc)
        } else {
            self.large.fill(0);
            encode::<_, false>(&mut Large(&mut self.large), src, dst, limited, none, acc)
        }
    }

    /// Compresses `src` after the dictionary `dict` as zram does for `lz4`
    /// with `dict=`: a copy of the stream `dict` was loaded into, then one
    /// `LZ4_compress_fast_continue` (the block in a buffer of its own).
    pub fn compress_fast_dict(
        &mut self,
        dict: &Dict,
        src: &[u8],
        dst: &mut [u8],
        acceleration: i32,
    ) -> Result<usize, Error> {
        self.large.copy_from_slice(&dict.stream.table[..]);
        continue_ext(
            &mut self.large,
            &dict.stream.dict,
            dict.stream.current_offset,
            src,
            dst,
            acceleration,
        )
    }
}

/// One `LZ4_compress_fast_continue` on a block in its own buffer, after
/// `dict` ending at virtual position `offset` (the stream's state).
fn continue_ext(
    table: &mut [u32; HASH_SIZE_U32],
    dict: &[u8],
    offset: u32,
    src: &[u8],
    dst: &mut [u8],
    acceleration: i32,
) -> Result<usize, Error> {
    check_input(src)?;
    let before = Before {
        dict,
        offset,
        small: dict.len() < DICT_MAX && (dict.len() as u32) < offset,
    };
    // The stream calls always run the limited-output checks.
    encode::<_, true>(
        &mut Large(table),
        src,
        dst,
        true,
        before,
        self::acceleration(acceleration),
    )
}

/// The kernel's `LZ4_stream_t` used as a stream: a dictionary (the last
/// block, or one loaded with [`Stream::load_dict`]) and the table of
/// positions in it. Each block is in a buffer of its own (the kernel's
/// external-dictionary path, the one zram takes); the stream keeps a copy
/// of the last block as the next one's dictionary.
#[derive(Clone)]
pub struct Stream {
    table: Box<[u32; HASH_SIZE_U32]>,
    /// `currentOffset`: the virtual position the next block starts at.
    current_offset: u32,
    /// The dictionary (`dictionary`, `dictSize`).
    dict: Vec<u8>,
}

impl Default for Stream {
    fn default() -> Self {
        Stream::new()
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("current_offset", &self.current_offset)
            .field("dict_len", &self.dict.len())
            .finish_non_exhaustive()
    }
}

impl Stream {
    /// A fresh stream (`LZ4_resetStream`).
    pub fn new() -> Stream {
        Stream {
            table: Box::new([0; HASH_SIZE_U32]),
            current_offset: 0,
            dict: Vec::new(),
        }
    }

    /// Back to a fresh stream (`LZ4_resetStream`).
    pub fn reset(&mut self) {
        self.table.fill(0);
        self.current_offset = 0;
        self.dict.clear();
    }

    /// `LZ4_loadDict`: the last 64 KiB of `dict` become the dictionary, and
    /// every third position of it that has 8 bytes after it is hashed.
    /// Returns the length kept: 0 for a dictionary under 8 bytes (then
    /// none), at most 64 KiB.
    pub fn load_dict(&mut self, dict: &[u8]) -> usize {
        if self.current_offset > 1 << 30 {
            self.reset();
        }
        if dict.len() < 8 {
            self.dict.clear();
            return 0;
        }
        let kept = &dict[dict.len().saturating_sub(DICT_MAX)..];
        self.current_offset += DICT_MAX as u32;
        let base = self.current_offset;
        let mut table = Large(&mut self.table);
        let mut p = 0;
        while p + 8 <= kept.len() {
            table.put(Large::hash(kept, p), base + p as u32);
            p += 3;
        }
        self.dict.clear();
        self.dict.extend_from_slice(kept);
        self.current_offset += kept.len() as u32;
        kept.len()
    }

    /// `LZ4_compress_fast_continue`: compresses `src` after the stream's
    /// dictionary, which `src` then replaces.
    pub fn compress_fast_continue(
        &mut self,
        src: &[u8],
        dst: &mut [u8],
        acceleration: i32,
    ) -> Result<usize, Error> {
        // The kernel rescales its table when its offsets near 2 GiB
        // (`LZ4_renormDictT`); its other trigger compares an offset with a
        // buffer's address and never fires at real addresses.
        if self.current_offset > 0x8000_0000 {
            let delta = self.current_offset - DICT_MAX as u32;
            for v in self.table.iter_mut() {
                *v = v.saturating_sub(delta);
            }
            self.current_offset = DICT_MAX as u32;
            if self.dict.len() > DICT_MAX {
                let cut = self.dict.len() - DICT_MAX;
                self.dict.drain(..cut);
            }
        }
        let result = continue_ext(
            &mut self.table,
            &self.dict,
            self.current_offset,
            src,
            dst,
            acceleration,
        );
        if src.len() <= MAX_INPUT_SIZE {
            self.dict.clear();
            self.dict.extend_from_slice(src);
            self.current_offset = self.current_offset.wrapping_add(src.len() as u32);
        }
        result
    }
}

/// A dictionary prepared as zram prepares one for `lz4` (`LZ4_loadDict` on
/// a fresh stream, kept for the device's life and copied before each page).
#[derive(Clone)]
pub struct Dict {
    stream: Stream,
    requested: usize,
}

impl std::fmt::Debug for Dict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dict")
            .field("loaded", &self.stream.dict.len())
            .field("requested", &self.requested)
            .finish()
    }
}

impl Dict {
    /// Loads `dict` into a fresh stream.
    pub fn new(dict: &[u8]) -> Dict {
        let mut stream = Stream::new();
        stream.load_dict(dict);
        Dict {
            stream,
            requested: dict.len(),
        }
    }

    /// The bytes kept (what `LZ4_loadDict` returned): zram refuses a
    /// dictionary (`-EINVAL`) unless this is its whole length, so only
    /// dictionaries of 8 bytes to 64 KiB are usable there.
    pub fn loaded_len(&self) -> usize {
        self.stream.dict.len()
    }

    /// Whether zram would take this dictionary ([`Dict::loaded_len`] is the
    /// file's length).
    pub fn accepted_by_zram(&self) -> bool {
        self.requested > 0 && self.loaded_len() == self.requested
    }

    /// The dictionary's bytes as kept (a decoder needs them).
    pub fn bytes(&self) -> &[u8] {
        &self.stream.dict
    }
}
