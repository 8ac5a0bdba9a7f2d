//! The kernel's zcomp split: a shared immutable [`Compressor`] and a
//! per-thread mutable [`Context`].
//!
//! This module owns that split and the buffer rules of the public calls.
//! A [`Compressor`] is the algorithm plus validated, resolved settings and
//! any prepared dictionary; it is cheap to clone (one `Arc`), `Send + Sync`,
//! and never changes. A [`Context`] is what the kernel calls a stream: the
//! backend's mutable state plus a scratch buffer, used by one thread at a time
//! (`Send`, not shared), made with [`Compressor::context`] once per thread.
//! Validation of settings against an algorithm happens here, in
//! [`Compressor::new`]; the library calls themselves live in
//! the private `backend` module. Nothing here knows about pages, slots or
//! same-filled pages: that is the zram store's business.

use std::fmt;
use std::sync::Arc;

use crate::algorithm::{Algorithm, DEFLATE_DEFAULT_WINBITS};
pub use crate::backend::Encoder;
use crate::backend::{self, Prepared, State};
use crate::error::{Error, Result};
use crate::params::{AlgorithmParams, Dictionary, Params};
use crate::zlib;

/// An algorithm with its settings, shared by all the contexts made from it.
#[derive(Clone)]
pub struct Compressor {
    prepared: Arc<Prepared>,
}

impl Compressor {
    /// Validates `params` for `algorithm` (zram's `-EINVAL` cases: a level out
    /// of range, a dictionary or a window the algorithm does not take) and
    /// prepares the dictionary.
    pub fn new(algorithm: Algorithm, params: &Params) -> Result<Compressor> {
        let level = match params.level {
            None => algorithm.default_level(),
            Some(level) => {
                let range = algorithm.level_range();
                if !range.contains(&level) {
                    return Err(Error::BadValue {
                        key: "level".to_string(),
                        value: level.to_string(),
                        expected: format!("{} to {} for {algorithm}", range.start(), range.end()),
                    });
                }
                level
            }
        };
        // Resolve the libraries' own "default" levels so that level() tells.
        let level = match (algorithm, level) {
            (Algorithm::Zstd, 0) => algorithm.default_level(),
            (Algorithm::Deflate, -1) => algorithm.default_level(),
            _ => level,
        };
        if params.dict.is_some() && !algorithm.supports_dictionary() {
            return Err(Error::Unsupported {
                algorithm,
                key: "dict",
            });
        }
        if params.window_bits.is_some() && !algorithm.supports_window_bits() {
            return Err(Error::Unsupported {
                algorithm,
                key: "deflate.winbits",
            });
        }
        let window_bits = params.window_bits.unwrap_or(DEFLATE_DEFAULT_WINBITS);
        let prepared = Prepared::new(algorithm, level, window_bits, params.dict.clone())?;
        Ok(Compressor {
            prepared: Arc::new(prepared),
        })
    }

    /// `algorithm` with zram's default settings.
    pub fn with_defaults(algorithm: Algorithm) -> Compressor {
        let prepared = Prepared::plain(
            algorithm,
            algorithm.default_level(),
            DEFLATE_DEFAULT_WINBITS,
        );
        Compressor {
            prepared: Arc::new(prepared),
        }
    }

    /// The algorithm called `name` (as zram's `comp_algorithm`) with the
    /// settings of an `algorithm_params` string. `algo=`, if given, must name
    /// the same algorithm; `priority=` is refused (it picks a zram slot, which
    /// the store resolves before it asks for a compressor).
    pub fn parse(name: &str, params: &str) -> Result<Compressor> {
        Compressor::with_params(Algorithm::from_name(name)?, params)
    }

    /// `algorithm` with the settings of an `algorithm_params` string, as
    /// [`Compressor::parse`] takes them, for a caller that already holds
    /// the algorithm (a parsed `--comp` flag or `comp_algorithm` setting).
    pub fn with_params(algorithm: Algorithm, params: &str) -> Result<Compressor> {
        let parsed = AlgorithmParams::parse(params)?;
        if let Some(algo) = parsed.algo.filter(|&a| a != algorithm) {
            return Err(Error::BadValue {
                key: "algo".to_string(),
                value: algo.to_string(),
                expected: format!("{algorithm} (the algorithm being configured)"),
            });
        }
        if let Some(priority) = parsed.priority {
            return Err(Error::BadValue {
                key: "priority".to_string(),
                value: priority.to_string(),
                expected: "no priority: it selects a zram compressor slot".to_string(),
            });
        }
        Compressor::new(algorithm, &parsed.params)
    }

    /// Decompresses `src` into `dst` without a [`Context`], for the
    /// algorithms whose decoder keeps no state between calls (lzo, lzo-rle,
    /// lz4, lz4hc, lz4-flex): the same checks, result and errors as
    /// [`Context::decompress`], with no stream to take. `None` for the
    /// algorithms that need a context to decompress (zstd, deflate).
    pub fn decompress_stateless(&self, src: &[u8], dst: &mut [u8]) -> Option<Result<usize>> {
        backend::decompress_stateless(&self.prepared, src, dst)
    }

    /// A new per-thread context.
    pub fn context(&self) -> Result<Context> {
        Ok(Context {
            state: State::new(&self.prepared)?,
            compressor: self.clone(),
            scratch: Vec::new(),
        })
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.prepared.algorithm
    }

    /// The level in effect (the default if none was given; zstd's 0 and
    /// deflate's -1 resolved to 3 and 6).
    pub fn level(&self) -> i32 {
        self.prepared.level
    }

    /// The deflate window in bits, for deflate.
    pub fn window_bits(&self) -> Option<u8> {
        self.algorithm()
            .supports_window_bits()
            .then_some(self.prepared.window_bits)
    }

    /// The same compressor as kernel-compat mode runs it: lz4 and lz4hc
    /// through zmem-lz4, whose output is the kernel's lib/lz4's byte for
    /// byte, and deflate through the C zlib, whose output at the kernel's
    /// memLevel is its lib/zlib_deflate's (default mode runs liblz4 and
    /// zlib-rs, faster; see BENCHMARKS.md). The other algorithms have one
    /// encoder each and come back unchanged.
    pub fn kernel_compat(&self) -> Compressor {
        self.with_encoder(Encoder::Kernel)
    }

    /// The same compressor with lz4, lz4hc and deflate run by `encoder`
    /// (with an lz4 dictionary, always zmem-lz4, the one that takes one).
    pub fn with_encoder(&self, encoder: Encoder) -> Compressor {
        match self.prepared.with_encoder(encoder) {
            Some(p) => Compressor {
                prepared: Arc::new(p),
            },
            None => self.clone(),
        }
    }

    /// Which encoder compresses lz4, lz4hc and deflate (meaningless for the
    /// others).
    pub fn encoder(&self) -> Encoder {
        self.prepared.encoder
    }

    /// The code that compresses, as a report names it.
    pub fn implementation(&self) -> &'static str {
        match (self.algorithm(), self.prepared.encoder) {
            (Algorithm::LzoRle | Algorithm::Lzo, _) => "zmem-lzo",
            (Algorithm::Lz4 | Algorithm::Lz4Hc, Encoder::Kernel) => "zmem-lz4",
            (Algorithm::Lz4 | Algorithm::Lz4Hc, Encoder::Fastest) => "liblz4 1.10",
            (Algorithm::Zstd, _) => "libzstd 1.5.7",
            (Algorithm::Deflate, Encoder::Kernel) => zlib::version(),
            (Algorithm::Deflate, Encoder::Fastest) => "zlib-rs",
            (Algorithm::Lz4Flex, _) => "lz4_flex",
        }
    }

    /// The dictionary, if one was given.
    pub fn dictionary(&self) -> Option<&Dictionary> {
        self.prepared.dict.as_ref()
    }

    /// The largest compressed size of `len` input bytes: an output buffer of
    /// this size never makes [`Context::compress`] fail for lack of room.
    pub fn compress_bound(&self, len: usize) -> usize {
        backend::compress_bound(self.algorithm(), len)
    }
}

impl fmt::Debug for Compressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compressor")
            .field("algorithm", &self.algorithm())
            .field("level", &self.level())
            .field("window_bits", &self.window_bits())
            .field("dictionary", &self.dictionary())
            .field("implementation", &self.implementation())
            .finish()
    }
}

/// One thread's compression stream: the backend's state and a scratch
/// buffer. Move it into a thread or keep it thread-local: every call takes
/// `&mut self`, so one thread uses it at a time.
pub struct Context {
    compressor: Compressor,
    state: State,
    scratch: Vec<u8>,
}

impl Context {
    /// The compressor this context was made from.
    pub fn compressor(&self) -> &Compressor {
        &self.compressor
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.compressor.algorithm()
    }

    /// Compresses `src` into the start of `dst` and returns the compressed
    /// length. If the result does not fit, returns
    /// [`Error::OutputTooSmall`] (`dst` may then be overwritten); a `dst` of
    /// [`Compressor::compress_bound`] bytes always suffices.
    pub fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize> {
        let bound = self.compressor.compress_bound(src.len());
        if dst.len() >= bound {
            return self
                .state
                .compress(&self.compressor.prepared, src, &mut dst[..bound]);
        }
        // Some backends need worst-case room up front: go through scratch.
        let n = self.compress_scratch(src)?;
        let Some(out) = dst.get_mut(..n) else {
            return Err(Error::OutputTooSmall {
                algorithm: self.algorithm(),
                capacity: dst.len(),
            });
        };
        out.copy_from_slice(&self.scratch[..n]);
        Ok(n)
    }

    /// Compresses `src` into `dst`, replacing its contents, and returns the
    /// compressed length (`dst.len()` afterwards). Keeps `dst`'s capacity.
    pub fn compress_to_vec(&mut self, src: &[u8], dst: &mut Vec<u8>) -> Result<usize> {
        let bound = self.compressor.compress_bound(src.len());
        dst.clear();
        dst.resize(bound, 0);
        let result = self.state.compress(&self.compressor.prepared, src, dst);
        let n = *result.as_ref().unwrap_or(&0);
        dst.truncate(n);
        result
    }

    /// Compresses `src` into the context's own buffer and returns the
    /// compressed bytes, as zram compresses into its stream's buffer and
    /// then copies into an allocated object. Valid until the next call.
    pub fn compress_buffered(&mut self, src: &[u8]) -> Result<&[u8]> {
        let n = self.compress_scratch(src)?;
        Ok(&self.scratch[..n])
    }

    fn compress_scratch(&mut self, src: &[u8]) -> Result<usize> {
        let bound = self.compressor.compress_bound(src.len());
        if self.scratch.len() < bound {
            self.scratch.resize(bound, 0);
        }
        self.state
            .compress(&self.compressor.prepared, src, &mut self.scratch[..bound])
    }

    /// Decompresses `src` into `dst`, whose length must be exactly the
    /// original length (zram always decompresses whole pages), and returns
    /// it. Malformed or truncated data, data made with another dictionary,
    /// and data of another length give an error, never a panic; `dst` may
    /// then hold anything.
    pub fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize> {
        self.state.decompress(&self.compressor.prepared, src, dst)
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("compressor", &self.compressor)
            .field("scratch", &self.scratch.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + Clone>() {}
    fn assert_send<T: Send>() {}

    #[test]
    fn compressor_is_shareable_and_context_movable() {
        assert_send_sync::<Compressor>();
        assert_send::<Context>();
    }

    #[test]
    fn defaults_are_zrams() {
        let expect = [
            (Algorithm::LzoRle, 1, None),
            (Algorithm::Lzo, 1, None),
            (Algorithm::Lz4, 1, None),
            (Algorithm::Lz4Hc, 9, None),
            (Algorithm::Zstd, 3, None),
            (Algorithm::Deflate, 6, Some(11)),
            (Algorithm::Lz4Flex, 1, None),
        ];
        for (algorithm, level, window_bits) in expect {
            let c = Compressor::with_defaults(algorithm);
            assert_eq!(c.algorithm(), algorithm);
            assert_eq!(c.level(), level, "{algorithm}");
            assert_eq!(c.window_bits(), window_bits, "{algorithm}");
            assert!(c.dictionary().is_none());
        }
    }

    #[test]
    fn library_default_levels_resolve() {
        assert_eq!(Compressor::parse("zstd", "level=0").unwrap().level(), 3);
        assert_eq!(Compressor::parse("deflate", "level=-1").unwrap().level(), 6);
        assert_eq!(Compressor::parse("zstd", "level=-7").unwrap().level(), -7);
    }

    #[test]
    fn settings_an_algorithm_lacks_are_refused() {
        let cases: [(&str, &str, &str); 10] = [
            ("lz4", "level=0", "bad value '0' for level: expected 1 to 65537 for lz4"),
            ("lz4hc", "level=17", "bad value '17' for level: expected 1 to 16 for lz4hc"),
            ("lz4-flex", "level=2", "bad value '2' for level: expected 1 to 1 for lz4-flex"),
            ("zstd", "level=23", "bad value '23' for level: expected -131072 to 22 for zstd"),
            ("deflate", "level=10", "bad value '10' for level: expected -1 to 9 for deflate"),
            ("zstd", "deflate.winbits=12", "zstd does not take the parameter deflate.winbits"),
            ("lz4", "algo=zstd", "bad value 'zstd' for algo: expected lz4 (the algorithm being configured)"),
            ("lz4", "priority=1", "bad value '1' for priority: expected no priority: it selects a zram compressor slot"),
            ("lzo-rle", "level=2", "bad value '2' for level: expected 1 to 1 for lzo-rle"),
            ("842", "", "unknown compression algorithm '842': use one of lzo-rle, lzo, lz4, lz4hc, zstd, deflate, lz4-flex"),
        ];
        for (name, params, message) in cases {
            let err = Compressor::parse(name, params).unwrap_err();
            assert_eq!(err.to_string(), message, "{name} {params}");
        }
        let dict = Dictionary::from_bytes(&b"some dictionary"[..]).unwrap();
        for algorithm in [Algorithm::LzoRle, Algorithm::Lzo, Algorithm::Deflate] {
            let params = Params {
                dict: Some(dict.clone()),
                ..Params::default()
            };
            let err = Compressor::new(algorithm, &params).unwrap_err();
            assert_eq!(
                err,
                Error::Unsupported {
                    algorithm,
                    key: "dict"
                }
            );
        }
    }

    #[test]
    fn small_outputs_go_through_scratch() {
        let text = b"hello hello hello hello hello hello hello hello hello".repeat(20);
        let kernel = [Algorithm::Lz4, Algorithm::Lz4Hc]
            .map(|a| Compressor::with_defaults(a).kernel_compat());
        let all = Algorithm::ALL.map(Compressor::with_defaults);
        for c in all.into_iter().chain(kernel) {
            let algorithm = c.algorithm();
            let mut ctx = c.context().unwrap();
            let mut big = vec![0u8; c.compress_bound(text.len())];
            let n = ctx.compress(&text, &mut big).unwrap();
            // Exactly enough room works even where the backend wants more.
            let mut exact = vec![0u8; n];
            assert_eq!(ctx.compress(&text, &mut exact).unwrap(), n, "{algorithm}");
            assert_eq!(exact, big[..n]);
            let mut short = vec![0u8; n - 1];
            let err = ctx.compress(&text, &mut short).unwrap_err();
            assert_eq!(
                err,
                Error::OutputTooSmall {
                    algorithm,
                    capacity: n - 1
                }
            );
            assert_eq!(ctx.compress_buffered(&text).unwrap(), &big[..n]);
            let mut v = vec![7u8; 3];
            assert_eq!(ctx.compress_to_vec(&text, &mut v).unwrap(), n);
            assert_eq!(v, big[..n]);
        }
    }
}
