//! A control command's error: a Linux errno and a message.
//!
//! This module owns [`CtlError`] (an [`nbd::Errno`], the errno type NBD
//! replies use too, and a message), the errno a store error answers with,
//! and the size parser every control command that takes a size goes through
//! (the recipe's one `memparse`). It is the bottom of the control surface:
//! the registry, the attribute table and the dispatch use it, and it uses
//! none of them.

use std::fmt;

use nbd::Errno;

/// Why a control command failed: a Linux errno and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtlError {
    /// The errno, as the kernel's attribute would answer.
    pub errno: Errno,
    /// For a human.
    pub message: String,
}

impl CtlError {
    /// An error with `errno`.
    pub fn new(errno: Errno, message: impl Into<String>) -> CtlError {
        CtlError {
            errno,
            message: message.into(),
        }
    }

    /// An `EINVAL` error.
    pub fn inval(message: impl Into<String>) -> CtlError {
        CtlError::new(Errno::EINVAL, message)
    }
}

impl fmt::Display for CtlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.errno, self.message)
    }
}

impl std::error::Error for CtlError {}

/// The control error for a store error (its errno; one this crate does not
/// name is `EIO`).
pub(crate) fn store_error(e: &zram::StoreError) -> CtlError {
    CtlError::new(
        Errno::from_number(e.errno()).unwrap_or(Errno::EIO),
        e.to_string(),
    )
}

/// Parses a size with the one size parser (`recipe::size`, the kernel's
/// `memparse`: K, M, G, T, P or E); a refusal is `EINVAL` with its text.
pub(crate) fn memparse(s: &str) -> Result<u64, CtlError> {
    recipe::size::parse(s).map_err(|e| CtlError::inval(e.to_string()))
}

/// A `disksize` value in bytes: memparse, refused if 0 (`EINVAL`, as in
/// zram), rounded up to a page as the kernel's `PAGE_ALIGN` (`1000` makes a
/// 4096-byte disk, as `echo 1000 > disksize` does).
pub(crate) fn disksize_bytes(v: &str) -> Result<u64, CtlError> {
    let bytes = memparse(v)?;
    if bytes == 0 {
        return Err(CtlError::inval("disksize must be more than 0"));
    }
    recipe::size::round_up_to_page(bytes, recipe::size::PAGE_SIZE)
        .ok_or_else(|| CtlError::inval(format!("disksize {} is too large", v.trim())))
}
