//! Errno values and the kernel's error encoding of handles.
//!
//! `zs_malloc` returns either a handle or `(unsigned long)-errno`, an "error
//! pointer" value: the top [`MAX_ERRNO`] values of the type
//! (`IS_ERR_VALUE`). Real handles never fall there: the allocator keeps every
//! raw handle below [`zs::Handle::RAW_LIMIT`], and a compile-time assertion
//! below ties the two together.
//!
//! This module owns the errno values the C API returns and the one mapping
//! of a pool failure to its errno ([`errno_of`]); it calls nothing. The
//! numbers are the `libc` crate's, the C library's own, so they equal the
//! `ENOMEM`, `EINVAL`, ... a C caller compares with (Linux numbering).

use std::ffi::{c_int, c_ulong};

use zs::{ErrorKind, Handle};

/// Out of memory.
pub const ENOMEM: c_int = libc::ENOMEM;
/// The object is held by a read that has not ended.
pub const EBUSY: c_int = libc::EBUSY;
/// Invalid argument: no pool, a bad handle, a bad length.
pub const EINVAL: c_int = libc::EINVAL;
/// The requested size is larger than a page.
pub const ENOSPC: c_int = libc::ENOSPC;
/// The pool's bookkeeping is inconsistent (`zs_check_invariants`).
pub const EUCLEAN: c_int = libc::EUCLEAN;

/// The errno (positive) the C API returns for a pool failure of `kind`:
/// `EINVAL` for a bad argument or handle, `ENOSPC` for more than the largest
/// object, `ENOMEM` when out of memory or over the page limit. The one place
/// the C API turns a pool error into a number: it takes the allocator's
/// own mapping, [`ErrorKind::errno`].
pub fn errno_of(kind: ErrorKind) -> c_int {
    kind.errno()
}

/// Errno values an error handle can carry: `1..=MAX_ERRNO` (the kernel's).
pub const MAX_ERRNO: c_ulong = 4095;

/// The smallest error value: `(unsigned long)-MAX_ERRNO`.
pub const FIRST_ERR_VALUE: c_ulong = MAX_ERRNO.wrapping_neg();

const _: () = assert!(
    Handle::RAW_LIMIT <= FIRST_ERR_VALUE,
    "a handle could be read as an error value"
);

/// The handle value that carries `errno` (positive): `(unsigned long)-errno`.
pub fn err_value(errno: c_int) -> c_ulong {
    debug_assert!(errno > 0 && errno as c_ulong <= MAX_ERRNO);
    (errno as c_ulong).wrapping_neg()
}

/// True if `value` is an error value, as the kernel's `IS_ERR_VALUE`.
pub fn is_err_value(value: c_ulong) -> bool {
    value >= FIRST_ERR_VALUE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_failures_keep_the_documented_numbers() {
        // zsmalloc.h documents -EINVAL, -ENOSPC and -ENOMEM (Linux numbers).
        assert_eq!(errno_of(ErrorKind::InvalidArgument), 22);
        assert_eq!(errno_of(ErrorKind::InvalidHandle), 22);
        assert_eq!(errno_of(ErrorKind::TooLarge), 28);
        assert_eq!(errno_of(ErrorKind::NoMemory), 12);
        assert_eq!(
            (ENOMEM, EBUSY, EINVAL, ENOSPC, EUCLEAN),
            (12, 16, 22, 28, 117)
        );
    }

    #[test]
    fn encoding_matches_the_kernel() {
        assert_eq!(err_value(EINVAL), c_ulong::MAX - 21);
        assert_eq!(err_value(EINVAL) as i64, -22);
        assert!(is_err_value(err_value(1)));
        assert!(is_err_value(err_value(MAX_ERRNO as c_int)));
        assert!(!is_err_value(FIRST_ERR_VALUE - 1));
        assert!(!is_err_value(0));
        assert!(!is_err_value(Handle::RAW_LIMIT - 1));
    }
}
