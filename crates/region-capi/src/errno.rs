//! Errno values, the one mapping of a region failure to an errno, and
//! setting the C caller's `errno`.
//!
//! This module owns the numbers the C API reports ([`errno_of`], documented
//! in `include/zmem_region.h`) and the one write to `errno`
//! ([`set_errno`]); it makes no region and calls nothing else. The numbers
//! are the `libc` crate's, the C library's own, so they equal the `EINVAL`,
//! `ENOMEM`, ... a C caller compares with (Linux numbering).

use std::ffi::c_int;

use region::RegionError;

/// Invalid argument: a NULL region, a bad length, limit, range or
/// compressor name.
pub const EINVAL: c_int = libc::EINVAL;
/// Out of memory: the store, its tables or the mapping could not be made.
pub const ENOMEM: c_int = libc::ENOMEM;
/// This kernel lacks what a region needs (userfaultfd, or its write-protect
/// and events on anonymous memory).
pub const ENOSYS: c_int = libc::ENOSYS;
/// A panic inside the library (a bug), caught before it reached C.
pub const EIO: c_int = libc::EIO;

/// The errno (positive) the C API reports for a region failure:
/// - a bad length, resident limit or byte range: `EINVAL`;
/// - no userfaultfd, or a system call that sets the region up refused: the
///   operating system's errno (`EPERM`, `EACCES`, `ENOSYS`, `EMFILE`,
///   `ENOMEM`, `EAGAIN`, ...), except that `ENOENT` (no /dev/userfaultfd
///   and no other way) and `EINVAL` (a flag or feature this kernel does not
///   know) become `ENOSYS`, so `EINVAL` always means the caller's argument;
/// - the store could not be made: `ENOMEM`;
/// - a mode this machine cannot serve: `ENOTSUP`.
pub fn errno_of(e: &RegionError) -> c_int {
    match e {
        RegionError::BadLength { .. }
        | RegionError::BadLimit { .. }
        | RegionError::OutOfRange { .. } => EINVAL,
        RegionError::Userfaultfd { .. } | RegionError::Os { .. } => {
            match e.os_errno().unwrap_or(ENOSYS) {
                n if n <= 0 || n == libc::ENOENT || n == libc::EINVAL => ENOSYS,
                n => n,
            }
        }
        RegionError::Store(_) => ENOMEM,
        RegionError::Unsupported(_) => libc::ENOTSUP,
    }
}

/// Sets the calling thread's `errno` to `value` (positive). Called last
/// before an entry point returns its error value, after everything it
/// dropped, so no later call can change it.
pub fn set_errno(value: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's `errno`,
    // valid and writable for the thread's life.
    unsafe { *libc::__errno_location() = value };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(errno: c_int) -> RegionError {
        RegionError::Os {
            what: "test",
            err: std::io::Error::from_raw_os_error(errno),
        }
    }

    fn uffd(errno: c_int) -> RegionError {
        RegionError::Userfaultfd {
            why: "test".into(),
            errno,
        }
    }

    #[test]
    fn failures_keep_the_documented_numbers() {
        // zmem_region.h documents these (Linux numbers).
        assert_eq!((EINVAL, ENOMEM, ENOSYS, EIO), (22, 12, 38, 5));
        assert_eq!(errno_of(&RegionError::BadLength { len: 0 }), EINVAL);
        let limit = RegionError::BadLimit {
            limit: 0,
            len: 4096,
        };
        assert_eq!(errno_of(&limit), EINVAL);
        let range = RegionError::OutOfRange {
            start: 0,
            end: 8192,
            len: 4096,
        };
        assert_eq!(errno_of(&range), EINVAL);
        assert_eq!(errno_of(&RegionError::Store("full".into())), ENOMEM);
        assert_eq!(libc::ENOTSUP, 95);
        let mode = RegionError::Unsupported("x86-64 only".into());
        assert_eq!(errno_of(&mode), libc::ENOTSUP);
    }

    #[test]
    fn the_operating_systems_errno_passes_except_the_ambiguous_ones() {
        assert_eq!(errno_of(&uffd(libc::EPERM)), libc::EPERM);
        assert_eq!(errno_of(&uffd(libc::EACCES)), libc::EACCES);
        assert_eq!(errno_of(&uffd(libc::ENOSYS)), ENOSYS);
        assert_eq!(errno_of(&uffd(libc::ENOENT)), ENOSYS);
        assert_eq!(errno_of(&uffd(libc::EINVAL)), ENOSYS);
        assert_eq!(errno_of(&uffd(0)), ENOSYS);
        assert_eq!(errno_of(&os(libc::ENOMEM)), ENOMEM);
        assert_eq!(errno_of(&os(libc::EAGAIN)), libc::EAGAIN);
        assert_eq!(errno_of(&os(libc::EINVAL)), ENOSYS);
    }

    #[test]
    fn set_errno_sets_this_threads_errno() {
        set_errno(libc::EMFILE);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EMFILE)
        );
    }
}
