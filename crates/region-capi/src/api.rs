//! The opaque region C sees and the exported `extern "C"` functions, one
//! per prototype in `include/zmem_region.h`, in the header's order.
//!
//! Every function:
//! - accepts a NULL region and returns its documented error (or does
//!   nothing);
//! - checks byte ranges against the region before the region sees them (an
//!   `off + len` that overflows is out of range too);
//! - runs its body under `catch_unwind`, so a panic becomes the error
//!   return (errno `EIO`) instead of unwinding into C;
//! - on failure sets `errno` last, after everything it dropped.
//!
//! What no check can catch is the caller's to avoid, and is listed under
//! `# Safety`: a non-NULL region pointer that is not a live region, and a
//! compressor name that is not NUL-terminated.
//!
//! This module owns argument checking and the compressor name's
//! translation into a [`RegionConfig`]; the numbers are `errno.rs`'s, the
//! memory and its threads the `region` crate's.

use std::ffi::{c_char, c_int, c_long, c_uint, c_void, CStr};
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use region::{FaultService, Region, RegionConfig};

use crate::errno::{errno_of, set_errno, EINVAL, EIO, ENOMEM};

/// The object behind `struct zmem_region *`: a [`Region`], boxed by
/// `zmem_region_new` and freed by `zmem_region_free`.
#[derive(Debug)]
pub struct ZmemRegion {
    region: Region,
}

// The C API lets any thread call any function but `zmem_region_free` on a
// region; the region's own threads already share it.
const _: () = {
    const fn shared_across_threads<T: Send + Sync>() {}
    shared_across_threads::<ZmemRegion>();
};

/// Runs `body`, turning a panic into `Err(EIO)` so it never unwinds into C.
///
/// `AssertUnwindSafe` is sound here: a region keeps its state in atomics
/// and locks that it reads past poisoning, and a panic in a call leaves at
/// worst that call undone; the next call either works or fails (and is
/// caught) the same way.
fn ffi<T>(body: impl FnOnce() -> Result<T, c_int>) -> Result<T, c_int> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(Err(EIO))
}

/// The value of `result`, or `on_error` with `errno` set to its error.
fn finish<T>(result: Result<T, c_int>, on_error: T) -> T {
    match result {
        Ok(v) => v,
        Err(errno) => {
            set_errno(errno);
            on_error
        }
    }
}

/// The region behind a C pointer, `Err(EINVAL)` for NULL.
///
/// # Safety
///
/// `r` is NULL or a pointer returned by `zmem_region_new` and not yet given
/// to `zmem_region_free`, and stays so for `'a`.
unsafe fn region_ref<'a>(r: *const ZmemRegion) -> Result<&'a Region, c_int> {
    // SAFETY: by the contract, a non-NULL `r` points at a live `ZmemRegion`
    // (made by `Box::into_raw`), which only `zmem_region_free` frees.
    match unsafe { r.as_ref() } {
        Some(r) => Ok(&r.region),
        None => Err(EINVAL),
    }
}

/// The byte range `off..off + len`, `Err(EINVAL)` if it overflows or ends
/// past the region.
fn range_of(region: &Region, off: usize, len: usize) -> Result<Range<usize>, c_int> {
    match off.checked_add(len) {
        Some(end) if end <= region.len() => Ok(off..end),
        _ => Err(EINVAL),
    }
}

/// The settings for a resident limit and a compressor name: the region's
/// defaults (zsmalloc in default mode) with the system's page size and the
/// named compressor, lz4 for NULL. `Err(EINVAL)` for a name `recipe` (that
/// is, `zcomp`) does not know.
///
/// # Safety
///
/// `comp` is NULL or a NUL-terminated string.
unsafe fn config_of(resident_limit: usize, comp: *const c_char) -> Result<RegionConfig, c_int> {
    let mut config = RegionConfig::new(resident_limit);
    config.store.page_size = region::page_size();
    if !comp.is_null() {
        // SAFETY: by the contract, a non-NULL `comp` is NUL-terminated.
        let name = unsafe { CStr::from_ptr(comp) };
        let name = name.to_str().map_err(|_| EINVAL)?;
        config.store.comp = recipe::spec::parse_comp(name).map_err(|_| EINVAL)?;
    }
    Ok(config)
}

/// `zmem_region_new`: maps `len` bytes (rounded up to whole pages) of
/// compressed memory, at most `resident_limit` bytes (rounded down to whole
/// pages) of it mapped at once, compressing with `comp` (NULL: lz4).
/// Returns NULL with `errno` set on failure (see [`errno_of`] and the
/// header).
///
/// # Safety
///
/// `comp` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn zmem_region_new(
    len: usize,
    resident_limit: usize,
    comp: *const c_char,
) -> *mut ZmemRegion {
    // SAFETY: passed on from this function's contract.
    unsafe { zmem_region_new_flags(len, resident_limit, comp, 0) }
}

/// `ZMEM_REGION_FAULTING_THREAD`: faults are served in the faulting thread
/// (`FaultService::FaultingThread`).
pub const FAULTING_THREAD: c_uint = 1;

/// `zmem_region_new_flags`: `zmem_region_new` with `flags`
/// (`ZMEM_REGION_FAULTING_THREAD`, or 0); `EINVAL` for any other bit.
///
/// # Safety
///
/// `comp` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn zmem_region_new_flags(
    len: usize,
    resident_limit: usize,
    comp: *const c_char,
    flags: c_uint,
) -> *mut ZmemRegion {
    let made = ffi(|| {
        if flags & !FAULTING_THREAD != 0 {
            return Err(EINVAL);
        }
        // SAFETY: passed on from this function's contract.
        let mut config = unsafe { config_of(resident_limit, comp) }?;
        if flags & FAULTING_THREAD != 0 {
            config.fault_service = FaultService::FaultingThread;
        }
        let region = Region::new(len, config).map_err(|e| errno_of(&e))?;
        Ok(Box::into_raw(Box::new(ZmemRegion { region })))
    });
    finish(made, ptr::null_mut())
}

/// `zmem_region_ptr`: the region's first byte (after the program moves the
/// region with `mremap`, wherever it put it). NULL, `errno` `EINVAL`, for a
/// NULL region.
///
/// # Safety
///
/// `r` is NULL or a live region.
#[no_mangle]
pub unsafe extern "C" fn zmem_region_ptr(r: *const ZmemRegion) -> *mut c_void {
    let base = ffi(|| {
        // SAFETY: passed on from this function's contract.
        let region = unsafe { region_ref(r) }?;
        Ok(region.as_ptr().cast::<c_void>())
    });
    finish(base, ptr::null_mut())
}

/// `zmem_region_len`: the region's length in bytes (the `len` it was made
/// with, rounded up to whole pages). 0, `errno` `EINVAL`, for a NULL
/// region.
///
/// # Safety
///
/// `r` is NULL or a live region.
#[no_mangle]
pub unsafe extern "C" fn zmem_region_len(r: *const ZmemRegion) -> usize {
    let len = ffi(|| {
        // SAFETY: passed on from this function's contract.
        Ok(unsafe { region_ref(r) }?.len())
    });
    finish(len, 0)
}

/// A hint on `off..off + len` that returns a page count: -1 with `errno`
/// `EINVAL` for a NULL region or a range outside it.
///
/// # Safety
///
/// `r` is NULL or a live region.
unsafe fn hint(
    r: *const ZmemRegion,
    off: usize,
    len: usize,
    call: impl FnOnce(&Region, Range<usize>) -> Result<usize, region::RegionError>,
) -> c_long {
    let pages = ffi(|| {
        // SAFETY: passed on from this function's contract.
        let region = unsafe { region_ref(r) }?;
        let range = range_of(region, off, len)?;
        let pages = call(region, range).map_err(|e| errno_of(&e))?;
        Ok(c_long::try_from(pages).unwrap_or(c_long::MAX))
    });
    finish(pages, -1)
}

/// `zmem_region_cold`: compresses the resident pages of `off..off + len`
/// (partial pages included) now. Returns how many, or -1 with `errno`
/// `EINVAL` for a NULL region or a range outside it.
///
/// # Safety
///
/// `r` is NULL or a live region.
#[no_mangle]
pub unsafe extern "C" fn zmem_region_cold(r: *const ZmemRegion, off: usize, len: usize) -> c_long {
    // SAFETY: passed on from this function's contract.
    unsafe { hint(r, off, len, Region::cold) }
}

/// `zmem_region_hot`: as [`zmem_region_willneed`], and marks the range's
/// pages referenced now (the clock passes them over once).
///
/// # Safety
///
/// `r` is NULL or a live region.
#[no_mangle]
pub unsafe extern "C" fn zmem_region_hot(r: *const ZmemRegion, off: usize, len: usize) -> c_long {
    // SAFETY: passed on from this function's contract.
    unsafe { hint(r, off, len, Region::hot) }
}

/// `zmem_region_willneed`: brings the compressed pages of `off..off + len`
/// back ahead of use, as far as the resident limit allows. Returns how
/// many, or -1 with `errno` `EINVAL` for a NULL region or a range outside
/// it.
///
/// # Safety
///
/// `r` is NULL or a live region.
#[no_mangle]
pub unsafe extern "C" fn zmem_region_willneed(
    r: *const ZmemRegion,
    off: usize,
    len: usize,
) -> c_long {
    // SAFETY: passed on from this function's contract.
    unsafe { hint(r, off, len, Region::willneed) }
}

/// `zmem_region_touch`: faults `off..off + len` in from user mode (a read
/// of one byte a page), so a system call on the range finds its pages
/// mapped. Returns 0, or -1 with `errno` `EINVAL` for a NULL region or a
/// range outside it.
///
/// # Safety
///
/// `r` is NULL or a live region.
#[no_mangle]
pub unsafe extern "C" fn zmem_region_touch(r: *const ZmemRegion, off: usize, len: usize) -> c_int {
    let done = ffi(|| {
        // SAFETY: passed on from this function's contract.
        let region = unsafe { region_ref(r) }?;
        let range = range_of(region, off, len)?;
        region.touch(range).map_err(|e| errno_of(&e))
    });
    finish(done.map(|()| 0), -1)
}

/// `zmem_region_user_mode_only`: 1 if the region serves faults from user
/// mode only (its userfaultfd was opened so, or its faults are served in
/// the faulting thread; a system call on a page not mapped then fails with
/// `EFAULT`: touch the range first), 0 if it serves the kernel's too; -1
/// with `errno` `EINVAL` for a NULL region.
///
/// # Safety
///
/// `r` is NULL or a live region.
#[no_mangle]
pub unsafe extern "C" fn zmem_region_user_mode_only(r: *const ZmemRegion) -> c_int {
    let mode = ffi(|| {
        // SAFETY: passed on from this function's contract.
        let region = unsafe { region_ref(r) }?;
        Ok(c_int::from(!region.serves_the_kernels_accesses()))
    });
    finish(mode, -1)
}

/// `zmem_region_stats_json`: the region's statistics as one line of JSON
/// (`Region::stats_json`), in memory from `malloc` that the caller frees
/// with `free`. NULL with `errno` `EINVAL` for a NULL region, `ENOMEM` if
/// `malloc` fails.
///
/// # Safety
///
/// `r` is NULL or a live region.
#[no_mangle]
pub unsafe extern "C" fn zmem_region_stats_json(r: *const ZmemRegion) -> *mut c_char {
    let json = ffi(|| {
        // SAFETY: passed on from this function's contract.
        let json = unsafe { region_ref(r) }?.stats_json();
        // SAFETY: malloc takes a size and returns NULL or that many bytes.
        let out = unsafe { libc::malloc(json.len() + 1) }.cast::<u8>();
        if out.is_null() {
            return Err(ENOMEM);
        }
        // SAFETY: `out` has `json.len() + 1` writable bytes, and `json` is a
        // separate Rust allocation; JSON text has no NUL byte, so the one
        // written last ends the C string.
        unsafe {
            ptr::copy_nonoverlapping(json.as_ptr(), out, json.len());
            *out.add(json.len()) = 0;
        }
        Ok(out.cast::<c_char>())
    });
    finish(json, ptr::null_mut())
}

/// `zmem_region_free`: stops the region's threads and unmaps it. NULL is a
/// no-op.
///
/// # Safety
///
/// `r` is NULL or a live region that no other thread is using; neither it
/// nor any pointer into its memory is used afterwards.
#[no_mangle]
pub unsafe extern "C" fn zmem_region_free(r: *mut ZmemRegion) {
    let done = ffi(|| {
        if !r.is_null() {
            // SAFETY: by the contract, `r` came from `Box::into_raw` in
            // `zmem_region_new` and is freed once, with no other user.
            drop(unsafe { Box::from_raw(r) });
        }
        Ok(())
    });
    finish(done, ());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each line restates a prototype of `include/zmem_region.h` in Rust
    /// types (`size_t` = `usize`, `long` = `c_long`): changing a Rust
    /// signature without the header fails to compile here.
    /// `tests/c_api.rs` checks that both list the same functions.
    #[test]
    fn signatures_match_the_header() {
        type P = *const ZmemRegion;
        let _: unsafe extern "C" fn(usize, usize, *const c_char) -> *mut ZmemRegion =
            zmem_region_new;
        let _: unsafe extern "C" fn(P) -> *mut c_void = zmem_region_ptr;
        let _: unsafe extern "C" fn(P) -> usize = zmem_region_len;
        let _: unsafe extern "C" fn(P, usize, usize) -> c_long = zmem_region_cold;
        let _: unsafe extern "C" fn(P, usize, usize) -> c_long = zmem_region_hot;
        let _: unsafe extern "C" fn(P, usize, usize) -> c_long = zmem_region_willneed;
        let _: unsafe extern "C" fn(P, usize, usize) -> c_int = zmem_region_touch;
        let _: unsafe extern "C" fn(P) -> c_int = zmem_region_user_mode_only;
        let _: unsafe extern "C" fn(P) -> *mut c_char = zmem_region_stats_json;
        let _: unsafe extern "C" fn(*mut ZmemRegion) = zmem_region_free;
    }

    /// Reads `errno` right after a call.
    fn errno() -> c_int {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    #[test]
    fn null_regions_fail_with_einval() {
        // SAFETY: every function accepts a NULL region.
        unsafe {
            set_errno(0);
            assert!(zmem_region_ptr(ptr::null()).is_null());
            assert_eq!(errno(), EINVAL);
            set_errno(0);
            assert_eq!(zmem_region_len(ptr::null()), 0);
            assert_eq!(errno(), EINVAL);
            set_errno(0);
            assert_eq!(zmem_region_cold(ptr::null(), 0, 1), -1);
            assert_eq!(errno(), EINVAL);
            assert_eq!(zmem_region_hot(ptr::null(), 0, 1), -1);
            assert_eq!(zmem_region_willneed(ptr::null(), 0, 1), -1);
            assert_eq!(zmem_region_touch(ptr::null(), 0, 1), -1);
            assert_eq!(zmem_region_user_mode_only(ptr::null()), -1);
            set_errno(0);
            assert!(zmem_region_stats_json(ptr::null()).is_null());
            assert_eq!(errno(), EINVAL);
            zmem_region_free(ptr::null_mut());
        }
    }

    #[test]
    fn bad_arguments_fail_with_einval_before_any_userfaultfd() {
        let mib = 1 << 20;
        let cases = [
            (0, mib, ptr::null()),
            (usize::MAX, mib, ptr::null()),
            (8 * mib, 0, ptr::null()),
            (8 * mib, 16 * mib, ptr::null()),
            (8 * mib, mib, c"nope".as_ptr()),
            (8 * mib, mib, c"".as_ptr()),
            (8 * mib, mib, c"\xff".as_ptr()),
        ];
        for (len, limit, comp) in cases {
            set_errno(0);
            // SAFETY: `comp` is NULL or NUL-terminated.
            let r = unsafe { zmem_region_new(len, limit, comp) };
            assert!(r.is_null(), "{len} {limit}");
            assert_eq!(errno(), EINVAL, "{len} {limit}");
        }
    }

    #[test]
    fn every_kernel_compressor_name_is_accepted() {
        for name in [
            c"lzo-rle",
            c"lzo",
            c"lz4",
            c"lz4hc",
            c"zstd",
            c"deflate",
            c"lz4-flex",
        ] {
            // SAFETY: a NUL-terminated name.
            let config = unsafe { config_of(1 << 20, name.as_ptr()) }.unwrap();
            assert_eq!(config.store.comp.name(), name.to_str().unwrap());
        }
        // SAFETY: NULL is the default.
        let config = unsafe { config_of(1 << 20, ptr::null()) }.unwrap();
        assert_eq!(config.store.comp.name(), "lz4");
        assert_eq!(config.store.page_size, region::page_size());
    }

    #[test]
    fn ranges_that_overflow_are_out_of_range() {
        let r = match Region::new(1 << 20, RegionConfig::new(1 << 19)) {
            Ok(r) => r,
            Err(e @ region::RegionError::Userfaultfd { .. }) => {
                eprintln!("skipped: {e}");
                return;
            }
            Err(e) => panic!("region: {e}"),
        };
        assert_eq!(range_of(&r, 0, 1 << 20), Ok(0..1 << 20));
        assert_eq!(range_of(&r, 1 << 20, 0), Ok(1 << 20..1 << 20));
        assert_eq!(range_of(&r, 1, 1 << 20), Err(EINVAL));
        assert_eq!(range_of(&r, usize::MAX, 2), Err(EINVAL));
    }
}
