//! Page runs from the operating system for zmem's allocators.
//!
//! This crate owns every call that maps, advises or unmaps memory. An
//! allocator asks a [`PageSource`] for a [`Run`]: `n` contiguous pages of the
//! source's page size, zero-filled. Freeing a run hands its pages back to the
//! kernel at once (`MADV_DONTNEED`), so the process's resident set follows
//! what the allocators hold, and keeps the address range for reuse.
//! [`PageSource::discard`] gives back part of a run that stays in use (its
//! pages read as zero when touched again).
//!
//! Address space is reserved in large chunks with `MAP_NORESERVE`; a page costs
//! memory only once it is touched. Free runs are kept by length and split when
//! a shorter run is wanted, so the address space a source holds is bounded by
//! its peak use.
//!
//! What it must not do: look inside the memory it hands out, or know what an
//! allocator keeps there. Any read or write through a [`Run`]'s pointer is the
//! caller's business and its own `unsafe`.
//!
//! Lock order: the source's mutex is a leaf; nothing is locked under it.

use std::fmt;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

/// The longest run, in pages, a source hands out (zsmalloc's longest chain).
pub const MAX_RUN_PAGES: u32 = 16;

/// Bytes reserved per mapping; runs are carved out of these.
const CHUNK_BYTES: usize = 64 << 20;

/// A failure to provide pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PagesError {
    /// The page size is not a power of two multiple of the OS page size, or
    /// larger than 64 KiB.
    PageSize(usize),
    /// The run length is 0 or above [`MAX_RUN_PAGES`].
    RunLength(u32),
    /// The operating system refused to map more memory (errno given).
    OutOfMemory(i32),
    /// The source's page limit would be passed.
    LimitReached {
        /// The limit, in pages.
        limit: usize,
    },
}

impl fmt::Display for PagesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PagesError::PageSize(p) => write!(
                f,
                "page size {p} is not a power-of-two multiple of the system page size up to 65536"
            ),
            PagesError::RunLength(n) => {
                write!(f, "run of {n} pages is outside 1..={MAX_RUN_PAGES}")
            }
            PagesError::OutOfMemory(errno) => write!(
                f,
                "the system refused more memory: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            PagesError::LimitReached { limit } => {
                write!(f, "the page limit of {limit} pages is reached")
            }
        }
    }
}

impl std::error::Error for PagesError {}

/// `n` contiguous pages handed out by a [`PageSource`].
///
/// A run is a token: it does not free itself when dropped (pass it back to
/// [`PageSource::free`]); a run still out when its source is dropped is
/// unmapped with the source.
#[derive(Debug)]
pub struct Run {
    ptr: NonNull<u8>,
    pages: u32,
}

// SAFETY: a `Run` is an address and a length; it grants no access by itself
// (dereferencing its pointer is the holder's own unsafe operation), so moving
// or sharing it between threads cannot cause a data race.
unsafe impl Send for Run {}
// SAFETY: as for `Send`: `&Run` only exposes the address and the length.
unsafe impl Sync for Run {}

impl Run {
    /// The first byte of the run.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in pages.
    pub fn pages(&self) -> u32 {
        self.pages
    }
}

struct Chunk {
    base: NonNull<u8>,
    len: usize,
}

struct Inner {
    /// Every mapping made; unmapped when the source drops.
    chunks: Vec<Chunk>,
    /// Free runs by length in pages (index 0 unused). Their pages are not resident.
    free: Vec<Vec<NonNull<u8>>>,
    /// Bytes of the newest chunk already carved into runs.
    bump: usize,
    /// Pages in runs currently handed out.
    pages_out: usize,
}

/// A source of page runs of one page size.
pub struct PageSource {
    page_size: usize,
    limit_pages: Option<usize>,
    inner: Mutex<Inner>,
}

// SAFETY: the raw pointers in `Inner` are only touched under the mutex, and
// the memory they point to is handed out as `Run` tokens whose use is the
// holder's responsibility.
unsafe impl Send for PageSource {}
// SAFETY: every method takes the mutex before touching `Inner`.
unsafe impl Sync for PageSource {}

impl fmt::Debug for PageSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageSource")
            .field("page_size", &self.page_size)
            .field("limit_pages", &self.limit_pages)
            .field("pages_out", &self.pages_out())
            .finish()
    }
}

/// The operating system's page size.
pub fn os_page_size() -> usize {
    // SAFETY: sysconf has no preconditions; it only reads a constant.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

impl PageSource {
    /// A source of pages of `page_size` bytes with no limit.
    pub fn new(page_size: usize) -> Result<Self, PagesError> {
        Self::build(page_size, None)
    }

    /// A source that refuses to have more than `limit_pages` pages out at once.
    pub fn with_limit(page_size: usize, limit_pages: usize) -> Result<Self, PagesError> {
        Self::build(page_size, Some(limit_pages))
    }

    fn build(page_size: usize, limit_pages: Option<usize>) -> Result<Self, PagesError> {
        let os = os_page_size();
        if !page_size.is_power_of_two() || page_size < os || page_size > 65536 {
            return Err(PagesError::PageSize(page_size));
        }
        Ok(PageSource {
            page_size,
            limit_pages,
            inner: Mutex::new(Inner {
                chunks: Vec::new(),
                free: (0..=MAX_RUN_PAGES).map(|_| Vec::new()).collect(),
                bump: CHUNK_BYTES,
                pages_out: 0,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic under this lock leaves `Inner` consistent (every update is a
        // single push, pop or add), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Pages in runs currently handed out.
    pub fn pages_out(&self) -> usize {
        self.lock().pages_out
    }

    /// The page limit, if any.
    pub fn limit_pages(&self) -> Option<usize> {
        self.limit_pages
    }

    /// Hands out `pages` contiguous zero-filled pages.
    pub fn alloc(&self, pages: u32) -> Result<Run, PagesError> {
        if pages == 0 || pages > MAX_RUN_PAGES {
            return Err(PagesError::RunLength(pages));
        }
        let mut inner = self.lock();
        if let Some(limit) = self.limit_pages {
            if inner.pages_out + pages as usize > limit {
                return Err(PagesError::LimitReached { limit });
            }
        }
        let ptr = match self.take_free(&mut inner, pages) {
            Some(ptr) => ptr,
            None => self.carve(&mut inner, pages)?,
        };
        inner.pages_out += pages as usize;
        Ok(Run { ptr, pages })
    }

    /// A free run of exactly `pages`, or the front of a longer one split.
    fn take_free(&self, inner: &mut Inner, pages: u32) -> Option<NonNull<u8>> {
        let want = pages as usize;
        if let Some(ptr) = inner.free[want].pop() {
            return Some(ptr);
        }
        let longer = (want + 1..inner.free.len()).find(|&n| !inner.free[n].is_empty())?;
        let ptr = inner.free[longer].pop()?;
        // SAFETY: `ptr` starts a free run of `longer` pages inside one chunk,
        // so the address `want` pages further is inside the same chunk.
        let rest = unsafe { ptr.add(want * self.page_size) };
        inner.free[longer - want].push(rest);
        Some(ptr)
    }

    /// A fresh run from the newest chunk, mapping a new chunk if needed.
    fn carve(&self, inner: &mut Inner, pages: u32) -> Result<NonNull<u8>, PagesError> {
        let bytes = pages as usize * self.page_size;
        if inner.bump + bytes > CHUNK_BYTES || inner.chunks.is_empty() {
            // SAFETY: an anonymous private mapping at an address of the
            // kernel's choosing; no existing memory is affected.
            let addr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    CHUNK_BYTES,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if addr == libc::MAP_FAILED {
                let errno = std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::ENOMEM);
                return Err(PagesError::OutOfMemory(errno));
            }
            let base = NonNull::new(addr.cast::<u8>()).ok_or(PagesError::OutOfMemory(0))?;
            inner.chunks.push(Chunk {
                base,
                len: CHUNK_BYTES,
            });
            inner.bump = 0;
        }
        let chunk = inner.chunks.last().expect("a chunk was just ensured");
        // SAFETY: `bump + bytes <= CHUNK_BYTES`, so the run lies inside the chunk.
        let ptr = unsafe { chunk.base.add(inner.bump) };
        inner.bump += bytes;
        Ok(ptr)
    }

    /// Takes a run back: its pages are returned to the kernel at once and its
    /// addresses are kept for reuse.
    ///
    /// The caller must hold no reference into the run's memory (the pages are
    /// zeroed); the type system cannot check this for raw pointers, which is
    /// why dereferencing them was `unsafe` in the first place.
    pub fn free(&self, run: Run) {
        self.advise_dontneed(run.ptr, run.pages as usize * self.page_size);
        let mut inner = self.lock();
        inner.pages_out -= run.pages as usize;
        inner.free[run.pages as usize].push(run.ptr);
    }

    /// Returns pages `first..first + count` of `run` to the kernel while the run
    /// stays out. They read as zero when touched again. Out-of-range pages are
    /// clamped to the run.
    pub fn discard(&self, run: &Run, first: u32, count: u32) {
        let end = first.saturating_add(count).min(run.pages);
        if first >= end {
            return;
        }
        // SAFETY: `first < run.pages`, so the address is inside the run.
        let start = unsafe { run.ptr.add(first as usize * self.page_size) };
        self.advise_dontneed(start, (end - first) as usize * self.page_size);
    }

    fn advise_dontneed(&self, ptr: NonNull<u8>, len: usize) {
        // SAFETY: `ptr..ptr+len` lies in a mapping this source made and
        // still holds; MADV_DONTNEED on private anonymous memory only drops
        // its contents (later reads see zeros).
        let rc = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_DONTNEED) };
        debug_assert_eq!(rc, 0, "madvise(MADV_DONTNEED) failed");
    }
}

impl Drop for PageSource {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        for chunk in inner.chunks.drain(..) {
            // SAFETY: each chunk is a mapping made by `carve` and unmapped
            // only here; `&mut self` means no run of this source is in use
            // through it (runs outliving the source are documented as unmapped).
            unsafe {
                libc::munmap(chunk.base.as_ptr().cast(), chunk.len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(run: &Run, bytes: usize, value: u8) {
        // SAFETY: the run is `bytes` long and held by this test alone.
        unsafe { std::ptr::write_bytes(run.as_ptr(), value, bytes) };
    }

    fn byte_at(run: &Run, offset: usize) -> u8 {
        assert!(offset < run.pages() as usize * 4096);
        // SAFETY: `offset` is inside the run, which this test alone holds.
        unsafe { run.as_ptr().add(offset).read() }
    }

    fn first_byte(run: &Run) -> u8 {
        byte_at(run, 0)
    }

    #[test]
    fn runs_are_zeroed_and_reused_zeroed() {
        let src = PageSource::new(4096).unwrap();
        let a = src.alloc(3).unwrap();
        assert_eq!(first_byte(&a), 0);
        fill(&a, 3 * 4096, 0xab);
        let addr = a.as_ptr();
        src.free(a);
        let b = src.alloc(3).unwrap();
        assert_eq!(b.as_ptr(), addr, "a free run of the same length is reused");
        assert_eq!(first_byte(&b), 0, "a reused run reads as zero");
        assert_eq!(src.pages_out(), 3);
        src.free(b);
        assert_eq!(src.pages_out(), 0);
    }

    #[test]
    fn longer_free_runs_are_split() {
        let src = PageSource::new(4096).unwrap();
        let a = src.alloc(8).unwrap();
        let base = a.as_ptr();
        src.free(a);
        let b = src.alloc(3).unwrap();
        let c = src.alloc(5).unwrap();
        assert_eq!(b.as_ptr(), base);
        assert_eq!(c.as_ptr(), base.wrapping_add(3 * 4096));
    }

    #[test]
    fn limits_and_bad_requests_are_errors() {
        let src = PageSource::with_limit(4096, 10).unwrap();
        let a = src.alloc(8).unwrap();
        assert_eq!(
            src.alloc(3).unwrap_err(),
            PagesError::LimitReached { limit: 10 }
        );
        assert_eq!(src.alloc(0).unwrap_err(), PagesError::RunLength(0));
        assert_eq!(src.alloc(17).unwrap_err(), PagesError::RunLength(17));
        src.free(a);
        assert!(src.alloc(3).is_ok());
        assert_eq!(
            PageSource::new(1000).unwrap_err(),
            PagesError::PageSize(1000)
        );
        assert_eq!(
            PageSource::new(131072).unwrap_err(),
            PagesError::PageSize(131072)
        );
    }

    #[test]
    fn discard_zeroes_part_of_a_run() {
        let src = PageSource::new(4096).unwrap();
        let a = src.alloc(4).unwrap();
        fill(&a, 4 * 4096, 7);
        src.discard(&a, 2, 5);
        assert_eq!((byte_at(&a, 4096), byte_at(&a, 2 * 4096)), (7, 0));
    }

    #[test]
    fn many_chunks() {
        let src = PageSource::new(65536).unwrap();
        let runs: Vec<Run> = (0..100).map(|_| src.alloc(16).unwrap()).collect();
        assert_eq!(src.pages_out(), 1600);
        for r in runs {
            src.free(r);
        }
        assert_eq!(src.pages_out(), 0);
    }
}
