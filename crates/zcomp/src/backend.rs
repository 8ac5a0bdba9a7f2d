//! The backends: their shared prepared state and their per-thread state.
//!
//! This module owns everything that touches a compression library: the
//! prepared zstd and lz4 dictionaries shared by all contexts ([`Prepared`]),
//! which encoder runs lz4, lz4hc and deflate ([`Encoder`]: liblz4 and
//! zlib-rs, or the kernel's output from zmem-lz4 and the C zlib), each
//! context's library state ([`State`]: zstd's CCtx/DCtx, zlib-rs's deflate
//! and inflate streams, lz4_flex's, zmem-lz4's and LZO1X-1's tables), the
//! worst-case output size
//! of each algorithm, and the translation of library failures into
//! [`Error`]s. It assumes its callers (the [`crate::Context`] methods) have
//! validated the parameters and pass an output buffer of at least
//! [`compress_bound`] bytes to [`State::compress`]; it does not check sizes
//! against the caller's expectations beyond what decompression needs.
//!
//! No `unsafe` here: the libraries' safe Rust APIs are enough (the C
//! zlib's calls are the `zlib` module's). One-shot
//! calls with a prepared dictionary (`ZSTD_compress_usingCDict`) borrow the
//! shared dictionary per call, so a context needs no self-reference.

use flate2::{Compression, FlushCompress, FlushDecompress, Status};
use lz4::block::CompressionMode;
use lz4_flex::block::CompressTable;
use zstd::zstd_safe::{self, CCtx, CDict, DCtx, DDict};

use crate::algorithm::{Algorithm, DEFLATE_MAX_WINBITS};
use crate::error::{Error, Result};
use crate::params::Dictionary;
use crate::zlib;

/// liblz4's `LZ4_MAX_INPUT_SIZE`.
const LZ4_MAX_INPUT_SIZE: usize = 0x7E00_0000;

/// The largest output `algorithm` can produce from `len` input bytes.
pub(crate) fn compress_bound(algorithm: Algorithm, len: usize) -> usize {
    match algorithm {
        // The kernel's lzo1x_worst_compress, plus lzo-rle's 2-byte marker.
        Algorithm::LzoRle | Algorithm::Lzo => lzo::compress_bound(len),
        // LZ4_COMPRESSBOUND.
        Algorithm::Lz4 | Algorithm::Lz4Hc => len + len / 255 + 16,
        // lz4_flex asks for this much room before it starts.
        Algorithm::Lz4Flex => lz4_flex::block::get_maximum_output_size(len),
        Algorithm::Zstd => zstd_safe::compress_bound(len),
        // zlib's conservative deflateBound (used for windows under 2^15):
        // stored blocks as small as the window, 5 header bytes each.
        Algorithm::Deflate => len + len.div_ceil(8) + len.div_ceil(64) + 5,
    }
}

/// Which code compresses the algorithms zmem has two encoders for (lz4,
/// lz4hc and deflate; each reads the other's data). The others have one
/// encoder, whatever is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoder {
    /// The faster: liblz4 1.10 through the `lz4` crate (no dictionaries)
    /// and zlib-rs through `flate2` (default mode).
    Fastest,
    /// The kernel's output, byte for byte: zmem-lz4 (the kernel's lib/lz4)
    /// and the C zlib at the kernel's memLevel (its lib/zlib_deflate's
    /// encoder) (kernel-compat mode).
    Kernel,
}

/// Whether `algorithm` has the two encoders of [`Encoder`].
fn has_two_encoders(algorithm: Algorithm) -> bool {
    matches!(
        algorithm,
        Algorithm::Lz4 | Algorithm::Lz4Hc | Algorithm::Deflate
    )
}

/// The lz4 and lz4hc dictionaries, as zmem-lz4 prepares them.
#[derive(Clone)]
pub(crate) enum Lz4Dict {
    Fast(lz4k::Dict),
    Hc(lz4k::HcDict),
}

impl Lz4Dict {
    fn bytes(&self) -> &[u8] {
        match self {
            Lz4Dict::Fast(d) => d.bytes(),
            Lz4Dict::Hc(d) => d.bytes(),
        }
    }
}

/// What every context of one compressor shares: the resolved settings and
/// the prepared dictionaries.
pub(crate) struct Prepared {
    pub(crate) algorithm: Algorithm,
    pub(crate) level: i32,
    pub(crate) window_bits: u8,
    pub(crate) dict: Option<Dictionary>,
    /// Which encoder compresses (lz4, lz4hc and deflate only).
    pub(crate) encoder: Encoder,
    lz4_dict: Option<Lz4Dict>,
    zstd: Option<(CDict<'static>, DDict<'static>)>,
}

impl Prepared {
    /// Settings without a dictionary (valid ones: nothing can fail).
    pub(crate) fn plain(algorithm: Algorithm, level: i32, window_bits: u8) -> Prepared {
        Prepared {
            algorithm,
            level,
            window_bits,
            dict: None,
            encoder: Encoder::Fastest,
            lz4_dict: None,
            zstd: None,
        }
    }

    /// The same settings compressed by `encoder` (lz4, lz4hc and deflate;
    /// the others have one encoder and keep it). An lz4 dictionary needs
    /// zmem-lz4.
    pub(crate) fn with_encoder(&self, encoder: Encoder) -> Option<Prepared> {
        if !has_two_encoders(self.algorithm) {
            return None;
        }
        Some(Prepared {
            algorithm: self.algorithm,
            level: self.level,
            window_bits: self.window_bits,
            dict: self.dict.clone(),
            encoder: if self.lz4_dict.is_some() {
                Encoder::Kernel
            } else {
                encoder
            },
            lz4_dict: self.lz4_dict.clone(),
            zstd: None,
        })
    }

    /// Prepares the dictionary for `algorithm`; the settings are valid.
    pub(crate) fn new(
        algorithm: Algorithm,
        level: i32,
        window_bits: u8,
        dict: Option<Dictionary>,
    ) -> Result<Prepared> {
        let zstd = match (&dict, algorithm) {
            (Some(d), Algorithm::Zstd) => {
                let refused = || Error::Dictionary {
                    path: d.source().to_string(),
                    reason: "zstd could not prepare it".to_string(),
                };
                let cdict = CDict::try_create(d.bytes(), level).ok_or_else(refused)?;
                let ddict = DDict::try_create(d.bytes()).ok_or_else(refused)?;
                Some((cdict, ddict))
            }
            _ => None,
        };
        // zram's lz4 backends take a dictionary only if the kernel's
        // LZ4_loadDict / LZ4_loadDictHC keep all of it (-EINVAL otherwise).
        let too_long = |d: &Dictionary, takes: &str| Error::Dictionary {
            path: d.source().to_string(),
            reason: format!("{takes}, not {} bytes", d.bytes().len()),
        };
        let lz4_dict = match (&dict, algorithm) {
            (Some(d), Algorithm::Lz4) => {
                let fast = lz4k::Dict::new(d.bytes());
                if !fast.accepted_by_zram() {
                    return Err(too_long(d, "lz4 takes a dictionary of 8 bytes to 64 KiB"));
                }
                Some(Lz4Dict::Fast(fast))
            }
            (Some(d), Algorithm::Lz4Hc) => {
                let hc = lz4k::HcDict::new(d.bytes());
                if !hc.accepted_by_zram() {
                    return Err(too_long(d, "lz4hc takes a dictionary of at most 64 KiB"));
                }
                Some(Lz4Dict::Hc(hc))
            }
            _ => None,
        };
        Ok(Prepared {
            algorithm,
            level,
            window_bits,
            dict,
            encoder: if lz4_dict.is_some() {
                Encoder::Kernel
            } else {
                Encoder::Fastest
            },
            lz4_dict,
            zstd,
        })
    }
}

/// One context's library state.
pub(crate) enum State {
    /// LZO1X-1's hash table (lzo and lzo-rle).
    Lzo(Box<lzo::Compressor>),
    /// liblz4 keeps its 16 KiB state on the stack of each call.
    Lz4,
    /// liblz4's HC state is allocated by each call (LZ4HC_HEAPMODE).
    Lz4Hc,
    /// zmem-lz4's fast compressor: its 16 KiB of tables.
    Lz4Kernel(Box<lz4k::Compressor>),
    /// zmem-lz4's LZ4HC: its 256 KiB of tables.
    Lz4HcKernel(Box<lz4k::HcCompressor>),
    /// The reusable hash table (dictionary-less compression only).
    Lz4Flex(Box<CompressTable>),
    /// zstd's compression and decompression contexts.
    Zstd {
        cctx: CCtx<'static>,
        dctx: DCtx<'static>,
    },
    /// A raw deflate stream and a raw inflate stream (window 2^15, which
    /// reads data made with any smaller window).
    Deflate {
        deflate: Box<flate2::Compress>,
        inflate: Box<flate2::Decompress>,
    },
    /// The C zlib's raw deflate stream, and zlib-rs's inflate.
    DeflateKernel {
        deflate: zlib::Deflate,
        inflate: Box<flate2::Decompress>,
    },
}

fn out_of_memory(algorithm: Algorithm) -> Error {
    Error::Backend {
        algorithm,
        detail: "could not allocate a context".to_string(),
    }
}

fn corrupt(algorithm: Algorithm, detail: impl ToString) -> Error {
    Error::Corrupt {
        algorithm,
        detail: detail.to_string(),
    }
}

fn exact(algorithm: Algorithm, expected: usize, actual: usize) -> Result<usize> {
    if actual == expected {
        Ok(actual)
    } else {
        Err(Error::WrongSize {
            algorithm,
            expected,
            actual,
        })
    }
}

/// Decompresses `src` into all of `dst` for the algorithms whose decoder
/// keeps no state between calls (lzo, lzo-rle, lz4, lz4hc, lz4-flex), so
/// that a reader needs no context; `None` for the others (zstd's DCtx,
/// zlib's inflate stream).
#[inline]
pub(crate) fn decompress_stateless(
    p: &Prepared,
    src: &[u8],
    dst: &mut [u8],
) -> Option<Result<usize>> {
    let algorithm = p.algorithm;
    let expected = dst.len();
    Some(match algorithm {
        Algorithm::LzoRle | Algorithm::Lzo => lzo::decompress(src, dst)
            .map_err(|e| corrupt(algorithm, e))
            .and_then(|n| exact(algorithm, expected, n)),
        Algorithm::Lz4 | Algorithm::Lz4Hc if p.lz4_dict.is_some() => {
            let dict = p.lz4_dict.as_ref().map_or(&[][..], Lz4Dict::bytes);
            lz4k::decompress_with_dict(src, dst, dict)
                .map_err(|e| corrupt(algorithm, e))
                .and_then(|n| exact(algorithm, expected, n))
        }
        Algorithm::Lz4 | Algorithm::Lz4Hc => {
            let Some(size) = i32::try_from(expected)
                .ok()
                .filter(|&n| n as usize <= LZ4_MAX_INPUT_SIZE)
            else {
                return Some(Err(Error::InputTooLarge {
                    algorithm,
                    len: expected,
                }));
            };
            lz4::block::decompress_to_buffer(src, Some(size), dst)
                .map_err(|e| corrupt(algorithm, e))
                .and_then(|n| exact(algorithm, expected, n))
        }
        Algorithm::Lz4Flex => {
            let result = match &p.dict {
                Some(d) => lz4_flex::block::decompress_into_with_dict(src, dst, d.bytes()),
                None => lz4_flex::block::decompress_into(src, dst),
            };
            result
                .map_err(|e| corrupt(algorithm, e))
                .and_then(|n| exact(algorithm, expected, n))
        }
        Algorithm::Zstd | Algorithm::Deflate => return None,
    })
}

impl State {
    /// A fresh state for the compressor `p`.
    pub(crate) fn new(p: &Prepared) -> Result<State> {
        Ok(match p.algorithm {
            Algorithm::LzoRle | Algorithm::Lzo => State::Lzo(Box::default()),
            Algorithm::Lz4 if p.encoder == Encoder::Kernel => State::Lz4Kernel(Box::default()),
            Algorithm::Lz4Hc if p.encoder == Encoder::Kernel => State::Lz4HcKernel(Box::default()),
            Algorithm::Lz4 => State::Lz4,
            Algorithm::Lz4Hc => State::Lz4Hc,
            Algorithm::Lz4Flex => State::Lz4Flex(Box::default()),
            Algorithm::Zstd => State::Zstd {
                cctx: CCtx::try_create().ok_or_else(|| out_of_memory(p.algorithm))?,
                dctx: DCtx::try_create().ok_or_else(|| out_of_memory(p.algorithm))?,
            },
            Algorithm::Deflate if p.encoder == Encoder::Kernel => State::DeflateKernel {
                deflate: zlib::Deflate::new(p.level, p.window_bits)
                    .ok_or_else(|| out_of_memory(p.algorithm))?,
                inflate: Box::new(flate2::Decompress::new_with_window_bits(
                    false,
                    DEFLATE_MAX_WINBITS,
                )),
            },
            Algorithm::Deflate => {
                // The level is in 0..=9 here.
                let level = Compression::new(p.level.unsigned_abs());
                State::Deflate {
                    deflate: Box::new(flate2::Compress::new_with_window_bits(
                        level,
                        false,
                        p.window_bits,
                    )),
                    inflate: Box::new(flate2::Decompress::new_with_window_bits(
                        false,
                        DEFLATE_MAX_WINBITS,
                    )),
                }
            }
        })
    }

    /// Compresses `src` into `dst`, which holds at least
    /// `compress_bound(src.len())` bytes; returns the compressed length.
    pub(crate) fn compress(&mut self, p: &Prepared, src: &[u8], dst: &mut [u8]) -> Result<usize> {
        let algorithm = p.algorithm;
        let failed = |detail: String| Error::Backend { algorithm, detail };
        match self {
            State::Lzo(lzo) => {
                let variant = if algorithm == Algorithm::LzoRle {
                    lzo::Variant::LzoRle
                } else {
                    lzo::Variant::Lzo
                };
                lzo.compress(variant, src, dst)
                    .map_err(|e| Error::OutputTooSmall {
                        algorithm,
                        capacity: e.capacity,
                    })
            }
            State::Lz4 | State::Lz4Hc => {
                if src.len() > LZ4_MAX_INPUT_SIZE {
                    return Err(Error::InputTooLarge {
                        algorithm,
                        len: src.len(),
                    });
                }
                let mode = if algorithm == Algorithm::Lz4 {
                    CompressionMode::FAST(p.level)
                } else {
                    CompressionMode::HIGHCOMPRESSION(p.level)
                };
                let bound = compress_bound(algorithm, src.len());
                lz4::block::compress_to_buffer(src, Some(mode), false, &mut dst[..bound])
                    .map_err(|e| failed(e.to_string()))
            }
            State::Lz4Kernel(c) => {
                let result = match &p.lz4_dict {
                    Some(Lz4Dict::Fast(d)) => c.compress_fast_dict(d, src, dst, p.level),
                    _ => c.compress_fast(src, dst, p.level),
                };
                result.map_err(|e| lz4k_error(algorithm, e))
            }
            State::Lz4HcKernel(c) => {
                let result = match &p.lz4_dict {
                    Some(Lz4Dict::Hc(d)) => c.compress_dict(d, src, dst, p.level),
                    _ => c.compress(src, dst, p.level),
                };
                result.map_err(|e| lz4k_error(algorithm, e))
            }
            State::Lz4Flex(table) => {
                let result = match &p.dict {
                    Some(d) => lz4_flex::block::compress_into_with_dict(src, dst, d.bytes()),
                    None => lz4_flex::block::compress_into_with_table(src, dst, table),
                };
                result.map_err(|e| failed(e.to_string()))
            }
            State::Zstd { cctx, .. } => {
                let result = match &p.zstd {
                    Some((cdict, _)) => cctx.compress_using_cdict(dst, src, cdict),
                    None => cctx.compress(dst, src, p.level),
                };
                result.map_err(|code| failed(zstd_safe::get_error_name(code).to_string()))
            }
            State::Deflate { deflate, .. } => {
                deflate.reset();
                match deflate.compress(src, dst, FlushCompress::Finish) {
                    Ok(Status::StreamEnd) => Ok(total(deflate.total_out())),
                    Ok(_) => Err(Error::OutputTooSmall {
                        algorithm,
                        capacity: dst.len(),
                    }),
                    Err(e) => Err(failed(e.to_string())),
                }
            }
            State::DeflateKernel { deflate, .. } => match deflate.compress(src, dst) {
                Ok(n) => Ok(n),
                Err(zlib::DeflateError::OutputFull) => Err(Error::OutputTooSmall {
                    algorithm,
                    capacity: dst.len(),
                }),
                Err(zlib::DeflateError::Library(code)) => {
                    Err(failed(format!("zlib's deflate returned {code}")))
                }
            },
        }
    }

    /// Decompresses `src` into all of `dst`; any other outcome is an error.
    pub(crate) fn decompress(&mut self, p: &Prepared, src: &[u8], dst: &mut [u8]) -> Result<usize> {
        let algorithm = p.algorithm;
        let expected = dst.len();
        match self {
            State::Lzo(_)
            | State::Lz4
            | State::Lz4Hc
            | State::Lz4Kernel(_)
            | State::Lz4HcKernel(_)
            | State::Lz4Flex(_) => decompress_stateless(p, src, dst)
                .expect("these algorithms decompress without a context"),
            State::Zstd { dctx, .. } => {
                let result = match &p.zstd {
                    Some((_, ddict)) => dctx.decompress_using_ddict(dst, src, ddict),
                    None => dctx.decompress(dst, src),
                };
                let n =
                    result.map_err(|code| corrupt(algorithm, zstd_safe::get_error_name(code)))?;
                exact(algorithm, expected, n)
            }
            State::Deflate { inflate, .. } | State::DeflateKernel { inflate, .. } => {
                inflate.reset(false);
                let status = inflate
                    .decompress(src, dst, FlushDecompress::Finish)
                    .map_err(|e| corrupt(algorithm, e))?;
                let (read, written) = (total(inflate.total_in()), total(inflate.total_out()));
                match status {
                    Status::StreamEnd if read != src.len() => Err(corrupt(
                        algorithm,
                        format!("{} bytes after the end of the stream", src.len() - read),
                    )),
                    Status::StreamEnd => exact(algorithm, expected, written),
                    _ if written == expected => Err(corrupt(
                        algorithm,
                        format!("decompresses to more than {expected} bytes"),
                    )),
                    _ => Err(corrupt(algorithm, "truncated stream")),
                }
            }
        }
    }
}

/// zmem-lz4's refusals as the crate's errors.
fn lz4k_error(algorithm: Algorithm, e: lz4k::Error) -> Error {
    match e {
        lz4k::Error::InputTooLarge { len } => Error::InputTooLarge { algorithm, len },
        lz4k::Error::OutputFull { capacity } => Error::OutputTooSmall {
            algorithm,
            capacity,
        },
    }
}

/// A stream counter of one call: it never exceeds the buffer it counts.
fn total(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}
