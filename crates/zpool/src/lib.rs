//! One allocator trait for compressed objects.
//!
//! The kernel once put zsmalloc, zbud and z3fold behind one `zpool` driver so
//! that zswap could choose one by name. [`ZPool`] is that driver's shape in
//! Rust: `malloc`, `free`, `write`, a read that is begun and ended, total
//! pages, compaction where the allocator has it, counters and a name. The zram
//! store, `zmem replay`, `zmem serve` and `zmem exp latency` see allocators
//! only through it.
//!
//! This crate owns the trait, the handle and error types every allocator
//! shares, and [`ObjectRead`], the guard that ends a read. It implements no
//! allocator, keeps no allocator's bookkeeping (zbud, z3fold and zblock share
//! theirs privately in crate `zalloc`) and maps no memory.

#![warn(missing_docs)]

use std::fmt;
use std::num::NonZeroU64;
use std::ops::Deref;
use std::ptr::NonNull;

use serde::Serialize;

/// An allocator's name for one object. Opaque: each allocator encodes its own
/// location in it and must reject handles it did not issue (and, as far as it
/// can tell, handles of freed objects) with an error, never a crash.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ZHandle(NonZeroU64);

impl ZHandle {
    /// The handle of a raw value, or `None` for 0 (never a handle).
    pub const fn from_raw(raw: u64) -> Option<ZHandle> {
        match NonZeroU64::new(raw) {
            Some(v) => Some(ZHandle(v)),
            None => None,
        }
    }

    /// The raw value (never 0).
    pub const fn to_raw(self) -> u64 {
        self.0.get()
    }
}

impl fmt::Debug for ZHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ZHandle({:#x})", self.0)
    }
}

/// Why an allocator call failed. Every failure leaves the allocator and every
/// other object as they were.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZPoolError {
    /// `malloc(0)`.
    ZeroSize,
    /// `malloc` of more than the largest object.
    TooLarge {
        /// Requested bytes.
        len: usize,
        /// Largest allowed.
        max: usize,
    },
    /// No memory: the OS refused, a limit was reached, or a table is full.
    OutOfMemory(String),
    /// A handle this allocator never issued, or one of a freed object.
    InvalidHandle(&'static str),
    /// A read or write longer than the object.
    TooLong {
        /// Bytes asked for.
        len: usize,
        /// Bytes the object holds.
        capacity: usize,
    },
    /// The allocator cannot be made with these settings.
    Config(String),
}

/// The kind of an allocator failure: what callers decide on (the block
/// device's answer to a client, the C API's errno), whatever the allocator.
/// zsmalloc's own error and the zram store's error expose it too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A bad argument: a size of 0, a read or write longer than the object,
    /// settings the allocator cannot be made with.
    InvalidArgument,
    /// A handle the allocator never issued, or one of a freed object.
    InvalidHandle,
    /// More bytes than the largest object.
    TooLarge,
    /// No memory: the OS refused, a page limit was reached, or a table is
    /// full.
    NoMemory,
}

impl ErrorKind {
    /// The kernel's errno for this kind (positive): `EINVAL`, `ENOSPC` or
    /// `ENOMEM`. The numbers are the `libc` crate's, the C library's own, so
    /// they are what a C caller compares with (Linux numbering on Linux).
    pub fn errno(self) -> i32 {
        match self {
            ErrorKind::InvalidArgument | ErrorKind::InvalidHandle => libc::EINVAL,
            ErrorKind::TooLarge => libc::ENOSPC,
            ErrorKind::NoMemory => libc::ENOMEM,
        }
    }
}

impl ZPoolError {
    /// The kind of this failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ZPoolError::ZeroSize | ZPoolError::TooLong { .. } | ZPoolError::Config(_) => {
                ErrorKind::InvalidArgument
            }
            ZPoolError::InvalidHandle(_) => ErrorKind::InvalidHandle,
            ZPoolError::TooLarge { .. } => ErrorKind::TooLarge,
            ZPoolError::OutOfMemory(_) => ErrorKind::NoMemory,
        }
    }

    /// The kernel's errno for this failure (positive): its kind's.
    pub fn errno(&self) -> i32 {
        self.kind().errno()
    }
}

impl fmt::Display for ZPoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZPoolError::ZeroSize => f.write_str("cannot allocate 0 bytes"),
            ZPoolError::TooLarge { len, max } => {
                write!(
                    f,
                    "{len} bytes is more than the largest object, {max} bytes"
                )
            }
            ZPoolError::OutOfMemory(why) => write!(f, "out of memory: {why}"),
            ZPoolError::InvalidHandle(why) => write!(f, "invalid handle: {why}"),
            ZPoolError::TooLong { len, capacity } => {
                write!(f, "{len} bytes do not fit in an object of {capacity} bytes")
            }
            ZPoolError::Config(why) => write!(f, "invalid allocator settings: {why}"),
        }
    }
}

impl std::error::Error for ZPoolError {}

/// Counters every allocator keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ZPoolStats {
    /// Pages (of [`ZPool::page_size`]) the allocator holds.
    pub total_pages: u64,
    /// Live objects.
    pub objects: u64,
    /// Pages freed by compaction since the allocator was made.
    pub pages_compacted: u64,
    /// Objects moved by compaction since the allocator was made.
    pub objs_moved: u64,
}

/// What one compaction did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ZCompacted {
    /// Pages given back.
    pub pages_freed: u64,
    /// Objects moved.
    pub objs_moved: u64,
    /// Of `objs_moved`, those moved not to free whole zspages but to give
    /// back pages of zspages that stay (zsmalloc default mode's trim); 0
    /// for allocators without one.
    pub objs_moved_trim: u64,
}

/// Pages an allocator gave back and keeps resident for its next
/// allocations ([`ZPool::retained_pages`]): the resident set may exceed
/// [`ZPool::total_pages`] by up to `bound` pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetainedPages {
    /// Pages kept now (freed runs and given-up tails not yet released).
    pub pages: usize,
    /// The most it keeps now: the fixed cache plus the pages held over
    /// `divisor`.
    pub bound: usize,
    /// The retained share's divisor (0: only the fixed cache).
    pub divisor: usize,
}

/// An allocator of compressed objects (the kernel's former `zpool_driver`).
///
/// All methods take `&self`: implementations are safe to share between
/// threads, and calls on different objects never wait long on each other.
pub trait ZPool: Send + Sync {
    /// The allocator's name, as `--alloc` takes it (`"zsmalloc"`, `"zbud"`, ...).
    fn name(&self) -> &'static str;

    /// Bytes per page.
    fn page_size(&self) -> usize;

    /// The largest object `malloc` accepts.
    fn max_object_size(&self) -> usize;

    /// Objects of at least this many bytes take a page of their own (a store
    /// keeps pages that compress to this size or more uncompressed). Equal to
    /// `page_size` when the allocator has no such threshold.
    fn huge_class_size(&self) -> usize {
        self.page_size()
    }

    /// The bytes the allocator sets aside for an object of `len` bytes: its
    /// size class's slot, for allocators with size classes; `len` itself
    /// otherwise. zram's recompression keeps a new object only if this is
    /// smaller than the old one's (the kernel compares zsmalloc class
    /// indexes).
    fn class_size(&self, len: usize) -> usize {
        len
    }

    /// Allocates an object of `len` bytes (contents unspecified).
    fn malloc(&self, len: usize) -> Result<ZHandle, ZPoolError>;

    /// Frees an object. Waits for reads of it to end.
    fn free(&self, handle: ZHandle) -> Result<(), ZPoolError>;

    /// Writes `data` at the start of the object.
    fn write(&self, handle: ZHandle, data: &[u8]) -> Result<(), ZPoolError>;

    /// Begins a read of the object's first `len` bytes: until
    /// [`ZPool::read_end`], the bytes stay where they are and unchanged (no
    /// write, free or compaction moves them). Prefer [`ObjectRead::begin`],
    /// which ends the read when dropped.
    fn read_begin(&self, handle: ZHandle, len: usize) -> Result<NonNull<[u8]>, ZPoolError>;

    /// Ends a read.
    ///
    /// # Safety
    ///
    /// A read of `handle` begun by this allocator's [`ZPool::read_begin`] must
    /// be outstanding; each is ended exactly once, and its bytes are not used
    /// afterwards.
    unsafe fn read_end(&self, handle: ZHandle);

    /// Calls `f` with the object's first `len` bytes, held as between
    /// [`ZPool::read_begin`] and [`ZPool::read_end`], and ends the read when
    /// `f` returns (or panics). The same as [`ObjectRead`], for a reader
    /// whose read ends where it began (a store reading a page), which lets an
    /// allocator end it without looking the handle up a second time.
    fn read_with(
        &self,
        handle: ZHandle,
        len: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<(), ZPoolError> {
        /// Ends the read when dropped, also if `f` panics.
        struct End<'a, P: ZPool + ?Sized>(&'a P, ZHandle);
        impl<P: ZPool + ?Sized> Drop for End<'_, P> {
            fn drop(&mut self) {
                // SAFETY: the read begun just before this guard was made is
                // outstanding and ended only here.
                unsafe { self.0.read_end(self.1) }
            }
        }
        let bytes = self.read_begin(handle, len)?;
        let _end = End(self, handle);
        // SAFETY: `read_begin` promised these bytes stay valid and unchanged
        // until `read_end`, which `_end` calls after `f` has returned.
        f(unsafe { bytes.as_ref() });
        Ok(())
    }

    /// Pages held now.
    fn total_pages(&self) -> usize;

    /// Counters.
    fn stats(&self) -> ZPoolStats;

    /// Moves objects to give pages back, if the allocator can.
    fn compact(&self) -> ZCompacted {
        ZCompacted::default()
    }

    /// As [`ZPool::compact`], for a compaction nobody waits on the memory
    /// of (periodic or background): the allocator may keep the pages it
    /// frees resident for reuse, within its retained share (see
    /// [`ZPool::retained_pages`]), where [`ZPool::compact`] gives every one
    /// back. By default, [`ZPool::compact`].
    fn compact_background(&self) -> ZCompacted {
        self.compact()
    }

    /// Pages [`ZPool::compact`] could give back now.
    fn can_compact(&self) -> u64 {
        0
    }

    /// Pages the allocator gave back to its page source and keeps resident
    /// for reuse (not counted in [`ZPool::total_pages`]), and their bound.
    /// Zero for an allocator that keeps none.
    fn retained_pages(&self) -> RetainedPages {
        RetainedPages::default()
    }

    /// Sets the retained share: freed pages up to one in `divisor` of the
    /// pages held stay resident for reuse, on top of the page source's fixed
    /// cache (0: none). For allocators that take pages from a
    /// `pages::PageSource`; a no-op for others.
    fn set_page_retain_divisor(&self, divisor: usize) {
        let _ = divisor;
    }

    /// Ends an epoch of the pages kept for reuse: gives back those not
    /// reused since the previous call (the store's background compactor
    /// calls it each second it sits idle with pages kept). Returns the pages
    /// released.
    fn decay_retained_pages(&self) -> usize {
        0
    }

    /// Gives every page kept for reuse back to the OS now (memory is
    /// tight). Returns the pages released.
    fn release_retained_pages(&self) -> usize {
        0
    }

    /// How many bounded steps [`ZPool::compact`] splits into (zsmalloc: one
    /// per size class), for a caller that compacts a little at a time, such
    /// as the store's background compactor. Allocators without steps have
    /// one, the whole compaction.
    fn compaction_steps(&self) -> usize {
        1
    }

    /// Pages step `step` of the compaction could give back now (0 for a step
    /// past [`ZPool::compaction_steps`]).
    fn step_can_compact(&self, step: usize) -> u64 {
        if step == 0 {
            self.can_compact()
        } else {
            0
        }
    }

    /// The fewest objects any compaction must move to free every whole
    /// zspage (or page) step `step` could free now, for allocators that can
    /// tell (zsmalloc: the live objects of the class's emptiest zspages,
    /// as many as it could free); `None` when the allocator cannot.
    fn step_lower_bound(&self, step: usize) -> Option<u64> {
        let _ = step;
        None
    }

    /// Runs one step of the compaction (nothing for a step past
    /// [`ZPool::compaction_steps`]).
    fn compact_step(&self, step: usize) -> ZCompacted {
        if step == 0 {
            self.compact()
        } else {
            ZCompacted::default()
        }
    }

    /// A per-class table in the style of the kernel's debugfs `classes`
    /// file, for allocators that have size classes.
    fn format_classes(&self) -> Option<String> {
        None
    }

    /// Walks the allocator and verifies its bookkeeping (counts, lists,
    /// handles), returning the first violation. For tests and debugging: call
    /// it while no other thread uses the allocator. Allocators without a
    /// checker report `Ok`.
    fn check_invariants(&self) -> Result<(), String> {
        Ok(())
    }
}

/// A begun read that ends when dropped.
pub struct ObjectRead<'a> {
    pool: &'a dyn ZPool,
    handle: ZHandle,
    bytes: NonNull<[u8]>,
}

impl<'a> ObjectRead<'a> {
    /// Begins a read of `handle`'s first `len` bytes.
    pub fn begin(pool: &'a dyn ZPool, handle: ZHandle, len: usize) -> Result<Self, ZPoolError> {
        let bytes = pool.read_begin(handle, len)?;
        Ok(ObjectRead {
            pool,
            handle,
            bytes,
        })
    }
}

impl Deref for ObjectRead<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `read_begin` promised these bytes stay valid and unchanged
        // until `read_end`, which only `drop` calls, after the last borrow.
        unsafe { self.bytes.as_ref() }
    }
}

impl Drop for ObjectRead<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard's read is outstanding and ended only here.
        unsafe { self.pool.read_end(self.handle) }
    }
}

impl fmt::Debug for ObjectRead<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectRead")
            .field("allocator", &self.pool.name())
            .field("handle", &self.handle)
            .field("len", &self.bytes.len())
            .finish()
    }
}

/// Copies the first `buf.len()` bytes of an object into `buf`.
pub fn read_into(pool: &dyn ZPool, handle: ZHandle, buf: &mut [u8]) -> Result<(), ZPoolError> {
    let obj = ObjectRead::begin(pool, handle, buf.len())?;
    buf.copy_from_slice(&obj);
    Ok(())
}
