//! The region's one error type.
//!
//! Owns the error kinds and their one-line messages; depends on nothing in
//! the crate.

use std::fmt;

/// Why a region could not be made or a call on it failed.
#[derive(Debug)]
pub enum RegionError {
    /// The length is zero or not a whole number of pages once rounded, or
    /// too large to map.
    BadLength {
        /// The length asked for.
        len: usize,
    },
    /// The resident limit is zero or above the length.
    BadLimit {
        /// The limit asked for, in bytes.
        limit: usize,
        /// The region's length.
        len: usize,
    },
    /// No userfaultfd could be opened, or its handshake failed.
    Userfaultfd {
        /// Each way tried and why it failed, or the handshake's failure.
        why: String,
        /// The errno that says why best (positive): the handshake's, or of
        /// the ways tried the first that failed with neither `ENOENT` (no
        /// /dev/userfaultfd) nor `EINVAL` (a flag this kernel does not
        /// know), else the last.
        errno: i32,
    },
    /// A system call on the region's memory failed.
    Os {
        /// What was being done.
        what: &'static str,
        /// The error.
        err: std::io::Error,
    },
    /// The store could not be made or refused a page.
    Store(String),
    /// This machine cannot serve what the configuration asks for (faults
    /// served in the faulting thread off x86-64, or with pages too large).
    Unsupported(String),
    /// A byte range outside the region.
    OutOfRange {
        /// Start offset.
        start: usize,
        /// End offset.
        end: usize,
        /// The region's length.
        len: usize,
    },
}

impl fmt::Display for RegionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegionError::BadLength { len } => write!(
                f,
                "region length {len} is not usable: it must be above 0 and mappable"
            ),
            RegionError::BadLimit { limit, len } => write!(
                f,
                "resident limit {limit} is not usable: it must be above 0 and at most the region's {len} bytes"
            ),
            RegionError::Userfaultfd { why, .. } => write!(f, "no userfaultfd: {why}"),
            RegionError::Os { what, err } => write!(f, "{what}: {err}"),
            RegionError::Store(why) => write!(f, "store: {why}"),
            RegionError::Unsupported(why) => write!(f, "not supported here: {why}"),
            RegionError::OutOfRange { start, end, len } => write!(
                f,
                "range {start}..{end} is outside the region's {len} bytes"
            ),
        }
    }
}

impl RegionError {
    /// The operating system's errno behind the error (positive), if the
    /// operating system refused: the userfaultfd's or a system call's.
    pub fn os_errno(&self) -> Option<i32> {
        match self {
            RegionError::Userfaultfd { errno, .. } => Some(*errno),
            RegionError::Os { err, .. } => err.raw_os_error(),
            _ => None,
        }
    }
}

impl std::error::Error for RegionError {}
