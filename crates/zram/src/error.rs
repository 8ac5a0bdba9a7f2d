//! The store's error type.
//!
//! Owns the error type and its errno mapping (one, with its narrowing for
//! block requests); may not touch any other module
//! (floor 0).

use std::fmt;

use zpool::ZPoolError;

/// Why a store call failed. A failed call changes no page and no counter
/// other than `failed_reads` / `failed_writes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// A page index past the end of the disk.
    OutOfRange {
        /// The first index asked for that is out of range.
        index: u64,
        /// Pages on the disk.
        pages: u64,
    },
    /// A buffer that is not exactly one page.
    BadLength {
        /// The buffer's length.
        len: usize,
        /// The page size.
        page_size: usize,
    },
    /// The write would take the allocator past the memory limit.
    MemLimit {
        /// Pages the allocator would hold.
        used_pages: u64,
        /// The limit, in pages.
        limit_pages: u64,
    },
    /// The allocator refused.
    Alloc(ZPoolError),
    /// The compressor failed.
    Compress(zcomp::Error),
    /// A stored page did not decompress (a bug or memory corruption).
    Corrupt {
        /// The page.
        index: u64,
        /// The decompressor's complaint.
        reason: String,
    },
    /// The store cannot be made with these settings.
    Config(String),
    /// The operating system, the backing store or the kernel's rules for an
    /// attribute refused, with the errno the kernel gives (`EBUSY` for a
    /// backing device set once the store holds data, `ENODEV` for
    /// writeback without one, `EIO` or `ENOSPC` from the backing store, ...).
    Os {
        /// The errno (positive).
        errno: i32,
        /// One line for a human.
        reason: String,
    },
}

impl StoreError {
    /// The errno a block device would report (positive; the `libc`
    /// crate's numbers, as [`zpool::ErrorKind::errno`]'s; an allocator's refusal
    /// keeps its kind's: [`ZPoolError::kind`]).
    pub fn errno(&self) -> i32 {
        match self {
            StoreError::OutOfRange { .. } => libc::ENOSPC,
            StoreError::BadLength { .. } | StoreError::Config(_) => libc::EINVAL,
            StoreError::MemLimit { .. } => libc::ENOMEM,
            StoreError::Alloc(e) => e.errno(),
            StoreError::Compress(_) | StoreError::Corrupt { .. } => libc::EIO,
            StoreError::Os { errno, .. } => *errno,
        }
    }

    /// The errno a block request (an NBD command, a ublk I/O) fails with:
    /// [`StoreError::errno`] narrowed to what a block device reports. A
    /// full device, whether past its end, at `mem_limit` or with the
    /// allocator out of memory, is `ENOSPC` (as a thin-provisioned disk
    /// that is full answers; NBD asks servers to avoid `ENOMEM`); a
    /// malformed request is `EINVAL`; anything else, an allocator refusing
    /// its arguments included (a bug of the store, not of the request), is
    /// `EIO`.
    pub fn block_errno(&self) -> i32 {
        if let StoreError::Alloc(a) = self {
            if a.errno() == libc::EINVAL {
                return libc::EIO;
            }
        }
        match self.errno() {
            libc::ENOSPC | libc::ENOMEM => libc::ENOSPC,
            libc::EINVAL => libc::EINVAL,
            _ => libc::EIO,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::OutOfRange { index, pages } => {
                write!(f, "page {index} is past the end of a {pages}-page disk")
            }
            StoreError::BadLength { len, page_size } => {
                write!(f, "a buffer of {len} bytes is not one {page_size}-byte page")
            }
            StoreError::MemLimit {
                used_pages,
                limit_pages,
            } => write!(
                f,
                "memory limit reached: the write needs {used_pages} pages, the limit is {limit_pages}"
            ),
            StoreError::Alloc(e) => write!(f, "allocator: {e}"),
            StoreError::Compress(e) => write!(f, "compressor: {e}"),
            StoreError::Corrupt { index, reason } => {
                write!(f, "page {index} does not decompress: {reason}")
            }
            StoreError::Config(why) => write!(f, "invalid store settings: {why}"),
            StoreError::Os { reason, .. } => f.write_str(reason),
        }
    }
}

impl std::error::Error for StoreError {}

impl StoreError {
    /// An [`StoreError::Os`] error.
    pub(crate) fn os(errno: i32, reason: impl Into<String>) -> StoreError {
        StoreError::Os {
            errno,
            reason: reason.into(),
        }
    }
}

impl From<ZPoolError> for StoreError {
    fn from(e: ZPoolError) -> Self {
        StoreError::Alloc(e)
    }
}

impl From<zcomp::Error> for StoreError {
    fn from(e: zcomp::Error) -> Self {
        StoreError::Compress(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_requests_see_full_invalid_or_io() {
        let full = [
            StoreError::OutOfRange { index: 9, pages: 8 },
            StoreError::MemLimit {
                used_pages: 2,
                limit_pages: 1,
            },
            StoreError::Alloc(ZPoolError::OutOfMemory("test".into())),
            StoreError::os(libc::ENOSPC, "backing store full"),
        ];
        for e in &full {
            assert_eq!(e.block_errno(), libc::ENOSPC, "{e:?}");
        }
        assert_eq!(
            StoreError::MemLimit {
                used_pages: 2,
                limit_pages: 1
            }
            .errno(),
            libc::ENOMEM
        );
        let bad = StoreError::BadLength {
            len: 1,
            page_size: 4096,
        };
        assert_eq!(bad.block_errno(), libc::EINVAL);
        for e in [
            StoreError::Alloc(ZPoolError::ZeroSize),
            StoreError::os(libc::EBUSY, "busy"),
            StoreError::Corrupt {
                index: 0,
                reason: "test".into(),
            },
        ] {
            assert_eq!(e.block_errno(), libc::EIO, "{e:?}");
        }
        assert_eq!(
            StoreError::Alloc(ZPoolError::ZeroSize).errno(),
            libc::EINVAL
        );
    }
}
