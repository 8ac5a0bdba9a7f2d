//! The LZ4HC compressor, as the kernel's `LZ4_compress_HC` and its
//! streaming form (`LZ4_loadDictHC`, `LZ4_compress_HC_continue`) run.
//!
//! This module owns the compressor's hash and chain tables ([`HcCompressor`]),
//! the prepared dictionary zram loads before each page ([`HcDict`]), the
//! stream ([`HcStream`]) and the encoder they share. It reads only its
//! input, dictionary and tables, and writes only its output and tables. It
//! knows nothing of decoding or of the fast compressor.
//!
//! What decides the output bytes, all as the kernel has them: positions
//! are indices from 64 KiB on (the dictionary first, then the block); a
//! table of 32768 last positions by a 4-byte hash and a chain of 65536
//! 16-bit steps back, indexed by the low 16 bits of the position (so a
//! long stream overwrites old steps); `2^(level-1)` candidates tried per
//! search; and the kernel's three-match lookahead (a match is kept, cut or
//! dropped for a longer one found from two or three bytes before its end).
//! Where a corrupted chain step leads to a candidate in the last three
//! bytes of a dictionary, the kernel reads past its dictionary buffer;
//! here those bytes read as zeros.

use crate::{
    common_prefix, compress_bound, read32, Error, Out, DICT_MAX, HC_DEFAULT_LEVEL, HC_MAX_LEVEL,
    LASTLITERALS, MAX_DISTANCE, MAX_INPUT_SIZE, MFLIMIT, MINMATCH, PRIME32,
};

/// log2 of the hash table's entries (`LZ4HC_HASH_LOG`).
const HASH_LOG: u32 = 15;
/// Entries of the hash table.
const HASH_SIZE: usize = 1 << HASH_LOG;
/// Entries of the chain table (`LZ4HC_MAXD`).
const MAXD: usize = 1 << 16;
/// Where positions start (the kernel's `64 * KB` offsets).
const START: u32 = 64 * 1024;
/// The length up to which a match is cut for a better next one.
const OPTIMAL_ML: isize = (RUN_MASK - 1 + MINMATCH) as isize;
use crate::RUN_MASK;

#[inline(always)]
fn hash(seq: u32) -> usize {
    (seq.wrapping_mul(PRIME32) >> (32 - HASH_LOG)) as usize
}

/// Four dictionary bytes at `at`, those past its end read as zeros.
#[inline(always)]
fn dict32(dict: &[u8], at: usize) -> u32 {
    if at + 4 <= dict.len() {
        return read32(dict, at);
    }
    let mut b = [0u8; 4];
    for (i, slot) in b.iter_mut().enumerate() {
        *slot = dict.get(at + i).copied().unwrap_or(0);
    }
    u32::from_le_bytes(b)
}

/// The kernel's `LZ4HC_CCtx_internal`, without its pointers: positions are
/// indices, the segments are passed in.
#[derive(Clone)]
struct State {
    hash: Box<[u32; HASH_SIZE]>,
    chain: Box<[u16; MAXD]>,
    next_to_update: u32,
    /// The index of the current segment's first byte (`dictLimit`).
    dict_limit: u32,
    /// The index of the dictionary segment's first byte (`lowLimit`).
    low_limit: u32,
    /// The index one past the current segment (`end - base`).
    end: u32,
}

/// A match: its index (`ref`), where it starts in the block, its length.
#[derive(Clone, Copy, Default)]
struct Found {
    at: u32,
    start: isize,
    len: isize,
}

impl Found {
    /// The same match, its first `by` bytes left to the match before it
    /// (the `correction` of `LZ4HC_compress_hashChain`).
    fn skip(&mut self, by: isize) {
        self.start += by;
        self.at = self.at.wrapping_add(by as u32);
        self.len -= by;
    }
}

impl State {
    fn new() -> State {
        State {
            hash: Box::new([0; HASH_SIZE]),
            chain: Box::new([0xFFFF; MAXD]),
            next_to_update: START,
            dict_limit: START,
            low_limit: START,
            end: START,
        }
    }

    /// `LZ4HC_init`: empty tables, positions from 64 KiB on.
    fn init(&mut self) {
        self.hash.fill(0);
        self.chain.fill(0xFFFF);
        self.next_to_update = START;
        self.dict_limit = START;
        self.low_limit = START;
        self.end = START;
    }

    /// `LZ4HC_Insert`: hashes every position up to `target` (excluded) of
    /// the segment `seg`, whose first byte has index `seg_at`.
    #[inline(always)]
    fn insert(&mut self, seg: &[u8], seg_at: u32, target: u32) {
        let mut idx = self.next_to_update;
        while idx < target {
            let h = hash(read32(seg, (idx - seg_at) as usize));
            let delta = idx.wrapping_sub(self.hash[h]).min(MAX_DISTANCE);
            self.chain[idx as u16 as usize] = delta as u16;
            self.hash[h] = idx;
            idx += 1;
        }
        self.next_to_update = target;
    }

    /// The oldest index a search at `ip_idx` may reach.
    #[inline(always)]
    fn window(&self, ip_idx: u32) -> u32 {
        if self.low_limit.wrapping_add(START) > ip_idx {
            self.low_limit
        } else {
            ip_idx - (START - 1)
        }
    }

    /// `LZ4HC_setExternalDict`: the current segment `prefix` becomes the
    /// dictionary of a block in another buffer.
    fn set_external_dict(&mut self, prefix: &[u8]) {
        if self.end >= 4 {
            self.insert(prefix, self.dict_limit, self.end - 3);
        }
        self.low_limit = self.dict_limit;
        self.dict_limit = self.end;
        self.next_to_update = self.dict_limit;
    }

    /// `LZ4HC_InsertAndFindBestMatch` at `ip`: the longest match (length 0
    /// for none) ending by `limit`.
    #[inline(always)]
    fn best_match(
        &mut self,
        src: &[u8],
        dict: &[u8],
        ip: usize,
        limit: usize,
        tries: u32,
    ) -> (usize, u32) {
        let dl = self.dict_limit;
        let ip_idx = dl + ip as u32;
        let low = self.window(ip_idx);
        self.insert(src, dl, ip_idx);
        let here = read32(src, ip);
        let mut m = self.hash[hash(here)];
        let mut tries = tries;
        let (mut ml, mut at) = (0usize, 0u32);
        while m >= low && tries > 0 {
            tries -= 1;
            if m >= dl {
                let ms = (m - dl) as usize;
                if src[ms + ml] == src[ip + ml] && read32(src, ms) == here {
                    let len =
                        MINMATCH + common_prefix(&src[ip + MINMATCH..limit], &src[ms + MINMATCH..]);
                    if len > ml {
                        ml = len;
                        at = m;
                    }
                }
            } else {
                let d = (m - self.low_limit) as usize;
                if dict32(dict, d) == here {
                    let len = dict_match_len(src, dict, ip, d, (dl - m) as usize, limit);
                    if len > ml {
                        ml = len;
                        at = m;
                    }
                }
            }
            m = m.wrapping_sub(u32::from(self.chain[m as u16 as usize]));
        }
        (ml, at)
    }

    /// `LZ4HC_InsertAndGetWiderMatch` at `ip`: a match longer than
    /// `longest` that may start as far back as `low_ip`, or `None`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn wider_match(
        &mut self,
        src: &[u8],
        dict: &[u8],
        ip: usize,
        low_ip: usize,
        high: usize,
        longest: isize,
        tries: u32,
    ) -> Option<Found> {
        let dl = self.dict_limit;
        let ip_idx = dl + ip as u32;
        let low = self.window(ip_idx);
        let delta = ip - low_ip;
        self.insert(src, dl, ip_idx);
        let here = read32(src, ip);
        let mut m = self.hash[hash(here)];
        let mut tries = tries;
        let mut best: Option<Found> = None;
        let mut longest = longest;
        while m >= low && tries > 0 {
            tries -= 1;
            // The match at `m` as (length, bytes it reaches back), if any.
            let found = if m >= dl {
                let ms = (m - dl) as usize;
                let probe = longest as usize;
                if src[low_ip + probe] == src[ms + probe - delta] && read32(src, ms) == here {
                    let len =
                        MINMATCH + common_prefix(&src[ip + MINMATCH..high], &src[ms + MINMATCH..]);
                    let mut back = 0usize;
                    while ip - back > low_ip
                        && ms - back > 0
                        && src[ip - back - 1] == src[ms - back - 1]
                    {
                        back += 1;
                    }
                    Some((len, back))
                } else {
                    None
                }
            } else {
                let d = (m - self.low_limit) as usize;
                if dict32(dict, d) == here {
                    let len = dict_match_len(src, dict, ip, d, (dl - m) as usize, high);
                    let mut back = 0usize;
                    while ip - back > low_ip
                        && m - back as u32 > low
                        && src[ip - back - 1] == dict[d - back - 1]
                    {
                        back += 1;
                    }
                    Some((len, back))
                } else {
                    None
                }
            };
            if let Some((len, back)) = found {
                let len = (len + back) as isize;
                if len > longest {
                    longest = len;
                    best = Some(Found {
                        at: m - back as u32,
                        start: (ip - back) as isize,
                        len,
                    });
                }
            }
            m = m.wrapping_sub(u32::from(self.chain[m as u16 as usize]));
        }
        best
    }
}

/// The common prefix of `src[from..to]` and `dict[at..]`, 0 when `to` is
/// before `from` (the kernel's `LZ4_count` with a limit already passed).
#[inline(always)]
fn prefix_to(src: &[u8], from: usize, to: usize, dict: &[u8], at: usize) -> usize {
    if to <= from {
        return 0;
    }
    common_prefix(&src[from..to], &dict[at..])
}

/// The length of a match at `ip` on the dictionary's byte `d`, which is
/// `to_dict_end` bytes before the dictionary's end: it may run on past
/// that end into `src` from its start, up to `limit`.
#[inline(always)]
fn dict_match_len(
    src: &[u8],
    dict: &[u8],
    ip: usize,
    d: usize,
    to_dict_end: usize,
    limit: usize,
) -> usize {
    let v = (ip + to_dict_end).min(limit);
    let mut len = MINMATCH + prefix_to(src, ip + MINMATCH, v, dict, d + MINMATCH);
    if ip + len == v && v < limit {
        len += common_prefix(&src[ip + len..limit], src);
    }
    len
}

/// Where the encoder is: the output, the block and its literal anchor.
struct Seq<'a, 'b> {
    out: Out<'a>,
    src: &'b [u8],
    anchor: usize,
    dict_limit: u32,
    limited: bool,
}

impl Seq<'_, '_> {
    /// `LZ4HC_encodeSequence`: the literals up to `ip`, then a match of
    /// `len` at index `at`; returns where the next sequence starts.
    fn encode(&mut self, ip: isize, len: isize, at: u32) -> Result<isize, Error> {
        let ip = ip as usize;
        let len = len as usize;
        let lit = ip - self.anchor;
        let olimit = self.out.buf.len();
        if self.limited && self.out.pos + 1 + (lit >> 8) + lit + (2 + 1 + LASTLITERALS) > olimit {
            return Err(self.out.full());
        }
        let token = self.out.literals(&self.src[self.anchor..ip])?;
        let code = len - MINMATCH;
        if self.limited && self.out.pos + 2 + (code >> 8) + (1 + LASTLITERALS) > olimit {
            return Err(self.out.full());
        }
        let offset = (self.dict_limit + ip as u32).wrapping_sub(at) as u16;
        self.out.matched(token, offset, code)?;
        self.anchor = ip + len;
        Ok(self.anchor as isize)
    }
}

/// The encoder (`LZ4HC_compress_generic`): `src` is the current segment,
/// `dict` the dictionary segment before it.
fn compress_generic(
    st: &mut State,
    src: &[u8],
    dict: &[u8],
    dst: &mut [u8],
    level: i32,
    limited: bool,
) -> Result<usize, Error> {
    let level = if level > HC_MAX_LEVEL {
        HC_MAX_LEVEL
    } else if level < 1 {
        HC_DEFAULT_LEVEL
    } else {
        level
    };
    let tries = 1u32 << (level - 1);
    st.end = st.end.wrapping_add(src.len() as u32);
    let len = src.len() as isize;
    let mflimit = len - MFLIMIT as isize;
    let matchlimit = (len - LASTLITERALS as isize).max(0) as usize;
    let mut seq = Seq {
        out: Out { buf: dst, pos: 0 },
        src,
        anchor: 0,
        dict_limit: st.dict_limit,
        limited,
    };

    let mut ip: isize = 1;
    'main: while ip < mflimit {
        let (found, at) = st.best_match(src, dict, ip as usize, matchlimit, tries);
        if found == 0 {
            ip += 1;
            continue;
        }
        let mut ml = found as isize;
        let mut r = at;
        let (mut start0, mut ref0, mut ml0) = (ip, r, ml);
        let mut m2 = Found::default();
        let mut m3;
        let mut search3 = false;
        loop {
            if !search3 {
                // _Search2
                let wider = if ip + ml < mflimit {
                    st.wider_match(
                        src,
                        dict,
                        (ip + ml - 2) as usize,
                        ip as usize,
                        matchlimit,
                        ml,
                        tries,
                    )
                } else {
                    None
                };
                let Some(w) = wider else {
                    ip = seq.encode(ip, ml, r)?;
                    continue 'main;
                };
                m2 = w;
                if start0 < ip && m2.start < ip + ml0 {
                    ip = start0;
                    r = ref0;
                    ml = ml0;
                }
                if m2.start - ip < 3 {
                    ml = m2.len;
                    ip = m2.start;
                    r = m2.at;
                    continue;
                }
            }
            // _Search3
            if m2.start - ip < OPTIMAL_ML {
                let mut new_ml = ml.min(OPTIMAL_ML);
                if ip + new_ml > m2.start + m2.len - MINMATCH as isize {
                    new_ml = (m2.start - ip) + m2.len - MINMATCH as isize;
                }
                let correction = new_ml - (m2.start - ip);
                if correction > 0 {
                    m2.skip(correction);
                }
            }
            let wider = if m2.start + m2.len < mflimit {
                st.wider_match(
                    src,
                    dict,
                    (m2.start + m2.len - 3) as usize,
                    m2.start as usize,
                    matchlimit,
                    m2.len,
                    tries,
                )
            } else {
                None
            };
            let Some(w) = wider else {
                // Two sequences to write.
                if m2.start < ip + ml {
                    ml = m2.start - ip;
                }
                seq.encode(ip, ml, r)?;
                ip = seq.encode(m2.start, m2.len, m2.at)?;
                continue 'main;
            };
            m3 = w;
            if m3.start < ip + ml + 3 {
                // No room for the second match: drop it.
                if m3.start >= ip + ml {
                    if m2.start < ip + ml {
                        let correction = ip + ml - m2.start;
                        m2.skip(correction);
                        if m2.len < MINMATCH as isize {
                            m2 = m3;
                        }
                    }
                    seq.encode(ip, ml, r)?;
                    ip = m3.start;
                    r = m3.at;
                    ml = m3.len;
                    start0 = m2.start;
                    ref0 = m2.at;
                    ml0 = m2.len;
                    search3 = false;
                    continue;
                }
                m2 = m3;
                search3 = true;
                continue;
            }
            // Three ascending matches: write the first.
            if m2.start < ip + ml {
                if m2.start - ip < RUN_MASK as isize {
                    if ml > OPTIMAL_ML {
                        ml = OPTIMAL_ML;
                    }
                    if ip + ml > m2.start + m2.len - MINMATCH as isize {
                        ml = (m2.start - ip) + m2.len - MINMATCH as isize;
                    }
                    let correction = ml - (m2.start - ip);
                    if correction > 0 {
                        m2.skip(correction);
                    }
                } else {
                    ml = m2.start - ip;
                }
            }
            seq.encode(ip, ml, r)?;
            ip = m2.start;
            r = m2.at;
            ml = m2.len;
            m2 = m3;
            search3 = true;
        }
    }

    // The last literals.
    let last = src.len() - seq.anchor;
    if limited && seq.out.pos + last + 1 + (last + 255 - 15) / 255 > seq.out.buf.len() {
        return Err(seq.out.full());
    }
    seq.out.literals(&src[seq.anchor..])?;
    Ok(seq.out.pos)
}

fn check_input(src: &[u8]) -> Result<(), Error> {
    if src.len() > MAX_INPUT_SIZE {
        return Err(Error::InputTooLarge { len: src.len() });
    }
    Ok(())
}

/// The working memory of the kernel's `LZ4_compress_HC` (its 256 KiB
/// `LZ4_streamHC_t`), reused from call to call. One per thread.
#[derive(Clone)]
pub struct HcCompressor {
    st: State,
}

impl Default for HcCompressor {
    fn default() -> Self {
        HcCompressor::new()
    }
}

impl std::fmt::Debug for HcCompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HcCompressor").finish_non_exhaustive()
    }
}

impl HcCompressor {
    /// A compressor with its tables.
    pub fn new() -> HcCompressor {
        HcCompressor { st: State::new() }
    }

    /// Compresses `src` into `dst` as the kernel's `LZ4_compress_HC` at
    /// `level` (above 16: 16; below 1: 9); returns the compressed length.
    /// With `dst` at least [`compress_bound`] long it cannot fail for an
    /// input up to [`MAX_INPUT_SIZE`].
    pub fn compress(&mut self, src: &[u8], dst: &mut [u8], level: i32) -> Result<usize, Error> {
        check_input(src)?;
        self.st.init();
        let limited = dst.len() < compress_bound(src.len());
        compress_generic(&mut self.st, src, &[], dst, level, limited)
    }

    /// Compresses `src` after `dict` as zram does for `lz4hc` with `dict=`:
    /// `LZ4_resetStreamHC`, `LZ4_loadDictHC`, then one
    /// `LZ4_compress_HC_continue` (the block in a buffer of its own).
    pub fn compress_dict(
        &mut self,
        dict: &HcDict,
        src: &[u8],
        dst: &mut [u8],
        level: i32,
    ) -> Result<usize, Error> {
        check_input(src)?;
        self.st.hash.copy_from_slice(&dict.st.hash[..]);
        self.st.chain.copy_from_slice(&dict.st.chain[..]);
        self.st.next_to_update = dict.st.next_to_update;
        self.st.dict_limit = dict.st.dict_limit;
        self.st.low_limit = dict.st.low_limit;
        self.st.end = dict.st.end;
        let limited = dst.len() < compress_bound(src.len());
        compress_generic(&mut self.st, src, &dict.bytes, dst, level, limited)
    }
}

/// `LZ4_loadDictHC` into `st`: the last 64 KiB of `dict` become the
/// current segment, every position with 4 bytes after it hashed.
fn load_dict(st: &mut State, dict: &[u8]) -> Vec<u8> {
    let kept = &dict[dict.len().saturating_sub(DICT_MAX)..];
    st.init();
    if kept.len() >= 4 {
        st.insert(kept, START, START + kept.len() as u32 - 3);
    }
    st.end = START + kept.len() as u32;
    kept.to_vec()
}

/// A dictionary prepared for zram's `lz4hc` with `dict=`: the tables as
/// `LZ4_loadDictHC` leaves them and a block in another buffer finds them,
/// copied before each page (the kernel rebuilds the same tables each time).
#[derive(Clone)]
pub struct HcDict {
    st: State,
    bytes: Vec<u8>,
    requested: usize,
}

impl std::fmt::Debug for HcDict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HcDict")
            .field("loaded", &self.bytes.len())
            .field("requested", &self.requested)
            .finish()
    }
}

impl HcDict {
    /// Loads `dict`.
    pub fn new(dict: &[u8]) -> HcDict {
        let mut st = State::new();
        let bytes = load_dict(&mut st, dict);
        st.set_external_dict(&bytes);
        HcDict {
            st,
            bytes,
            requested: dict.len(),
        }
    }

    /// The bytes kept (what `LZ4_loadDictHC` returned, at most 64 KiB):
    /// zram refuses a dictionary unless this is its whole length.
    pub fn loaded_len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether zram would take this dictionary (not empty, at most 64 KiB).
    pub fn accepted_by_zram(&self) -> bool {
        self.requested > 0 && self.loaded_len() == self.requested
    }

    /// The dictionary's bytes as kept (a decoder needs them).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// The kernel's `LZ4_streamHC_t` used as a stream: each block in a buffer
/// of its own, the previous block (or a loaded dictionary) its dictionary.
/// The stream keeps a copy of the last block.
#[derive(Clone)]
pub struct HcStream {
    st: State,
    /// Whether the tables are set up (`base != NULL`).
    started: bool,
    /// The current segment: the last block, or the loaded dictionary.
    prefix: Vec<u8>,
    /// The dictionary segment of the last block.
    dict: Vec<u8>,
    level: i32,
}

impl std::fmt::Debug for HcStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HcStream")
            .field("level", &self.level)
            .field("prefix_len", &self.prefix.len())
            .finish_non_exhaustive()
    }
}

impl HcStream {
    /// A stream at `level` (`LZ4_resetStreamHC`).
    pub fn new(level: i32) -> HcStream {
        HcStream {
            st: State::new(),
            started: false,
            prefix: Vec::new(),
            dict: Vec::new(),
            level,
        }
    }

    /// `LZ4_resetStreamHC`: the next block starts afresh, at `level`.
    pub fn reset(&mut self, level: i32) {
        self.started = false;
        self.prefix.clear();
        self.dict.clear();
        self.level = level;
    }

    /// `LZ4_loadDictHC`: the last 64 KiB of `dict` become the dictionary;
    /// returns the length kept.
    pub fn load_dict(&mut self, dict: &[u8]) -> usize {
        self.prefix = load_dict(&mut self.st, dict);
        self.dict.clear();
        self.started = true;
        self.prefix.len()
    }

    /// `LZ4_compress_HC_continue`: compresses `src` after the stream's
    /// dictionary, which `src` then replaces.
    pub fn compress_continue(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, Error> {
        check_input(src)?;
        let limited = dst.len() < compress_bound(src.len());
        if !self.started {
            self.st.init();
            self.started = true;
            self.dict.clear();
        } else {
            if self.st.end > 1 << 31 {
                // The kernel reloads the last 64 KiB as a dictionary
                // before its indices overflow.
                let keep = (self.st.end - self.st.dict_limit) as usize;
                let tail = self.prefix[self.prefix.len() - keep.min(DICT_MAX)..].to_vec();
                self.load_dict(&tail);
            }
            self.st.set_external_dict(&self.prefix);
            self.dict = std::mem::take(&mut self.prefix);
        }
        let result = compress_generic(&mut self.st, src, &self.dict, dst, self.level, limited);
        self.prefix.clear();
        self.prefix.extend_from_slice(src);
        result
    }
}
