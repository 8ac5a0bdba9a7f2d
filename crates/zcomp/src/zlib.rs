//! zlib's own deflate (the C library, built from the source `libz-sys`
//! bundles), as kernel-compat mode compresses with it.
//!
//! The kernel's lib/zlib_deflate is zlib 1.1's deflate, and zlib has kept
//! that encoder's choices since: at memLevel 8 (the kernel's
//! `MAX_MEM_LEVEL`, which zram's deflate backend passes) the C library's
//! raw deflate stream is the kernel's byte for byte at every level from 1
//! to 9 and every window (tests/kernel_deflate.rs checks it against the
//! kernel's own code). Level 0 differs in how stored blocks are split
//! (zlib 1.2.11 rewrote `deflate_stored`); a level-0 page never fits in a
//! page, so zram keeps it as a huge page either way.
//!
//! This module owns the one stream and its unsafe calls; the other
//! backends and all decompression (any inflate reads any deflate) stay in
//! `backend`, through safe crates.

use std::ffi::CStr;
use std::os::raw::{c_int, c_uint, c_void};
use std::sync::OnceLock;

use libz_sys as z;

/// zram's `DEFLATE_DEF_MEMLEVEL`: the kernel's `MAX_MEM_LEVEL`, 8 (the C
/// library's own is 9, whose matches differ).
const KERNEL_MEM_LEVEL: c_int = 8;

/// Why a stream could not compress.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DeflateError {
    /// The output buffer ended before the stream did.
    OutputFull,
    /// zlib refused (its return code).
    Library(c_int),
}

/// A raw deflate stream of zlib's, set up as zram's deflate backend sets
/// up the kernel's.
pub(crate) struct Deflate {
    /// Boxed: zlib's state points back at its stream, which must not move.
    strm: Box<z::z_stream>,
}

// SAFETY: the stream and the state zlib allocated for it are owned by this
// value alone (no other pointer to them leaves this module), and zlib keeps
// no thread-local or global state for a stream.
unsafe impl Send for Deflate {}

unsafe extern "C" fn alloc(_opaque: *mut c_void, items: c_uint, size: c_uint) -> *mut c_void {
    // SAFETY: calloc with any sizes is sound; it returns null or memory of
    // at least items * size bytes (zlib checks for null).
    unsafe { libc::calloc(items as usize, size as usize) }
}

unsafe extern "C" fn free(_opaque: *mut c_void, address: *mut c_void) {
    // SAFETY: zlib frees only what `alloc` returned, once.
    unsafe { libc::free(address) }
}

impl Deflate {
    /// A stream at `level` (0..=9) with a window of 2^`window_bits`
    /// (9..=15); `None` if zlib cannot allocate its state.
    pub(crate) fn new(level: i32, window_bits: u8) -> Option<Deflate> {
        let mut strm = Box::new(z::z_stream {
            next_in: std::ptr::null_mut(),
            avail_in: 0,
            total_in: 0,
            next_out: std::ptr::null_mut(),
            avail_out: 0,
            total_out: 0,
            msg: std::ptr::null_mut(),
            state: std::ptr::null_mut(),
            zalloc: alloc,
            zfree: free,
            opaque: std::ptr::null_mut(),
            data_type: 0,
            adler: 0,
            reserved: 0,
        });
        // SAFETY: `strm` is an empty stream with its allocator set, at an
        // address that stays fixed (boxed); the version string and struct
        // size are the ones this binding was built against. Negative window
        // bits ask for raw deflate, as zram's backend does.
        let ret = unsafe {
            z::deflateInit2_(
                &mut *strm,
                level,
                z::Z_DEFLATED,
                -c_int::from(window_bits),
                KERNEL_MEM_LEVEL,
                z::Z_DEFAULT_STRATEGY,
                z::zlibVersion(),
                std::mem::size_of::<z::z_stream>() as c_int,
            )
        };
        (ret == z::Z_OK).then_some(Deflate { strm })
    }

    /// Compresses all of `src` into `dst` as one raw deflate stream, as
    /// zram's `deflate_compress` does (reset, one `Z_FINISH`); returns the
    /// length written.
    pub(crate) fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, DeflateError> {
        let (Ok(avail_in), Ok(avail_out)) =
            (c_uint::try_from(src.len()), c_uint::try_from(dst.len()))
        else {
            return Err(DeflateError::Library(z::Z_BUF_ERROR));
        };
        // SAFETY: the stream was initialised by deflateInit2_ and is not
        // shared.
        let ret = unsafe { z::deflateReset(&mut *self.strm) };
        if ret != z::Z_OK {
            return Err(DeflateError::Library(ret));
        }
        self.strm.next_in = src.as_ptr().cast_mut();
        self.strm.avail_in = avail_in;
        self.strm.next_out = dst.as_mut_ptr();
        self.strm.avail_out = avail_out;
        // SAFETY: next_in/avail_in describe `src` (zlib only reads through
        // next_in) and next_out/avail_out `dst`, both borrowed for this call;
        // the cursors are cleared before the borrows end.
        let ret = unsafe { z::deflate(&mut *self.strm, z::Z_FINISH) };
        let written = dst.len() - self.strm.avail_out as usize;
        self.strm.next_in = std::ptr::null_mut();
        self.strm.avail_in = 0;
        self.strm.next_out = std::ptr::null_mut();
        self.strm.avail_out = 0;
        match ret {
            z::Z_STREAM_END => Ok(written),
            z::Z_OK | z::Z_BUF_ERROR => Err(DeflateError::OutputFull),
            code => Err(DeflateError::Library(code)),
        }
    }
}

impl Drop for Deflate {
    fn drop(&mut self) {
        // SAFETY: initialised by deflateInit2_ and ended once, here.
        unsafe { z::deflateEnd(&mut *self.strm) };
    }
}

/// The C library's version, as `zlibVersion()` reports it.
pub(crate) fn version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        // SAFETY: zlibVersion returns a pointer to a static NUL-terminated
        // string.
        let v = unsafe { CStr::from_ptr(z::zlibVersion()) };
        format!("zlib {}", v.to_string_lossy())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_round_trips_through_flate2s_inflate() {
        let page: Vec<u8> = (0..4096u32)
            .map(|i| (i % 251) as u8 ^ (i / 97) as u8)
            .collect();
        let mut d = Deflate::new(6, 11).expect("stream");
        let mut out = vec![0u8; 8192];
        let n = d.compress(&page, &mut out).unwrap();
        assert!(n > 0 && n < page.len());
        // The same stream again gives the same bytes (reset between calls).
        let mut again = vec![0u8; 8192];
        assert_eq!(d.compress(&page, &mut again).unwrap(), n);
        assert_eq!(out[..n], again[..n]);
        let mut inflate = flate2::Decompress::new_with_window_bits(false, 15);
        let mut back = vec![0u8; 4096];
        let status = inflate
            .decompress(&out[..n], &mut back, flate2::FlushDecompress::Finish)
            .unwrap();
        assert_eq!(status, flate2::Status::StreamEnd);
        assert_eq!(back, page);
    }

    #[test]
    fn a_short_output_is_reported_not_overrun() {
        let page: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let mut d = Deflate::new(6, 11).expect("stream");
        let mut out = [0xAAu8; 101];
        assert_eq!(
            d.compress(&page, &mut out[..100]),
            Err(DeflateError::OutputFull)
        );
        assert_eq!(out[100], 0xAA);
        // The stream is usable after a failure.
        let mut big = vec![0u8; 8192];
        assert!(d.compress(&page, &mut big).is_ok());
    }

    #[test]
    fn the_version_names_the_library() {
        assert!(version().starts_with("zlib 1."), "{}", version());
    }
}
