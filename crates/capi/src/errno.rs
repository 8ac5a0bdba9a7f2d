//! Errno values and the kernel's error encoding of handles.
//!
//! `zs_malloc` returns either a handle or `(unsigned long)-errno`, an "error
//! pointer" value: the top [`MAX_ERRNO`] values of the type
//! (`IS_ERR_VALUE`). Real handles never fall there: the allocator keeps every
//! raw handle below [`zs::Handle::RAW_LIMIT`], and a compile-time assertion
//! below ties the two together.
//!
//! This module owns only the numbers; it calls nothing.

use std::ffi::{c_int, c_ulong};

use zs::Handle;

/// Out of memory (Linux numbering, as all below).
pub const ENOMEM: c_int = 12;
/// The object is held by a read that has not ended.
pub const EBUSY: c_int = 16;
/// Invalid argument: no pool, a bad handle, a bad length.
pub const EINVAL: c_int = 22;
/// The requested size is larger than a page.
pub const ENOSPC: c_int = 28;
/// The pool's bookkeeping is inconsistent (`zs_check_invariants`).
pub const EUCLEAN: c_int = 117;

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
