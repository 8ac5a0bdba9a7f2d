//! Fresh address space: chunks mapped from the kernel and carved, in address
//! order, into runs that have never been handed out.
//!
//! A source keeps two frontiers, because fresh runs are used in two ways:
//!
//! - **sparse**: the holder touches the pages of a run one by one, as it
//!   fills them (zsmalloc's default mode), and counts only those. Such a run
//!   must cost nothing until touched, so its pages fault in one at a time.
//! - **dense**: the holder writes every page of the run at once (zsmalloc's
//!   kernel-compat mode links every slot at creation). Faulting its pages
//!   one by one costs a trap, a page allocation, a zeroing and a memory-cgroup
//!   charge per 4 KiB: measured, a fifth of a fresh store write. So the dense
//!   frontier populates its chunk ahead, one transparent huge page
//!   (normally 2 MiB) at a time: the kernel allocates, zeroes and charges it
//!   as one folio.
//!
//! # Keeping the resident set honest
//!
//! A huge page is resident as a whole, so it must never cover pages a
//! holder does not count. Every chunk is mapped with `MADV_NOHUGEPAGE`, so
//! the kernel never backs it with huge pages by itself, in particular not
//! where the system's THP mode is `always`, and `khugepaged` never collapses
//! a range whose pages were given back into a huge page again. The dense
//! frontier lifts that flag for one aligned window only while it populates
//! the window (`MADV_HUGEPAGE`, `MADV_POPULATE_WRITE`, `MADV_NOHUGEPAGE`):
//! the huge page stays mapped, the range is excluded from collapse again.
//! Giving back part of it later (`MADV_DONTNEED`) splits it and frees those
//! pages, as for any page.
//!
//! So the resident set exceeds what the holders were handed by at most one
//! window: the populated part of the dense frontier not yet carved. Huge
//! pages are used only where the system offers them (`enabled` is `always`
//! or `madvise`), the OS page is 4 KiB and `MADV_POPULATE_WRITE` exists
//! (Linux 5.14); elsewhere, and with `ZMEM_NO_THP=1` in the environment, the
//! dense frontier behaves as the sparse one.
//!
//! This module owns the mappings' creation and the population of fresh
//! windows; which runs are free, cached or out is the source's business
//! (`lib.rs`), and it never reads or writes the memory it maps.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::{reserve, PagesError};

/// Bytes reserved per mapping; runs are carved out of these.
pub(crate) const CHUNK_BYTES: usize = 64 << 20;

/// `MADV_POPULATE_WRITE` (Linux 5.14), which the libc crate may not name.
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// One mapping, unmapped when its source drops.
pub(crate) struct Chunk {
    pub(crate) base: NonNull<u8>,
    pub(crate) len: usize,
    /// A piece of the locked reserve (given back, not unmapped).
    pub(crate) reserved: bool,
}

/// How a frontier's runs are used (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Use {
    /// Pages touched one by one: fault them in one by one.
    Sparse,
    /// Every page written at once: populate ahead with huge pages.
    Dense,
}

/// The carving point in the newest chunk of one kind.
pub(crate) struct Frontier {
    kind: Use,
    /// The chunk being carved: its first usable byte and usable length.
    current: Option<(NonNull<u8>, usize)>,
    /// Bytes of the current chunk already carved into runs.
    bump: usize,
    /// Bytes of the current chunk populated (dense only).
    ready: usize,
}

impl Frontier {
    /// A frontier with no chunk yet.
    pub(crate) fn new(kind: Use) -> Frontier {
        Frontier {
            kind,
            current: None,
            bump: 0,
            ready: 0,
        }
    }

    /// `bytes` of fresh address space (at most a chunk), mapping a new chunk
    /// (recorded in `chunks`) when the current one is used up. The bytes read
    /// as zero; for a dense frontier they may be resident already.
    pub(crate) fn carve(
        &mut self,
        bytes: usize,
        chunks: &mut Vec<Chunk>,
    ) -> Result<NonNull<u8>, PagesError> {
        // A piece of the locked reserve is resident already.
        let huge = match self.kind {
            Use::Dense if !reserve::active() => huge_page_bytes(),
            _ => None,
        };
        let fits = matches!(self.current, Some((_, len)) if self.bump + bytes <= len);
        if !fits {
            self.current = Some(map_chunk(huge, bytes, chunks)?);
            self.bump = 0;
            self.ready = 0;
        }
        let (base, len) = self.current.expect("a chunk was just ensured");
        if let Some(window) = huge {
            while self.ready < self.bump + bytes && self.ready < len {
                let end = (self.ready + window).min(len);
                // SAFETY: `ready..end` lies inside the current chunk, a private
                // anonymous mapping this source made and holds, and no run has
                // been carved from it yet (`ready >= bump`), so nobody holds a
                // reference into it; populating writes nothing visible (the
                // pages read as zero either way).
                unsafe { populate_huge(base.as_ptr().add(self.ready), end - self.ready) };
                self.ready = end;
            }
        }
        // SAFETY: `bump + bytes <= len`, so the run lies inside the chunk.
        let ptr = unsafe { base.add(self.bump) };
        self.bump += bytes;
        Ok(ptr)
    }
}

/// Maps a chunk excluded from transparent huge pages, for a run of `bytes`.
/// With `huge` (a window size), the usable part starts at a window boundary,
/// so that each window can be one huge page. Once the locked reserve exists,
/// takes one of its pieces instead. Returns the usable start and length.
fn map_chunk(
    huge: Option<usize>,
    bytes: usize,
    chunks: &mut Vec<Chunk>,
) -> Result<(NonNull<u8>, usize), PagesError> {
    if reserve::active() {
        if bytes > reserve::PIECE_BYTES {
            return Err(PagesError::Reserve(format!(
                "a run of {bytes} bytes is longer than a piece of the reserve ({})",
                reserve::PIECE_BYTES
            )));
        }
        let base = reserve::take_piece()?;
        chunks.push(Chunk {
            base,
            len: reserve::PIECE_BYTES,
            reserved: true,
        });
        return Ok((base, reserve::PIECE_BYTES));
    }
    let slack = huge.unwrap_or(0);
    let len = CHUNK_BYTES + slack;
    // Miri maps only `MAP_PRIVATE | MAP_ANONYMOUS`; `MAP_NORESERVE` changes
    // nothing but the kernel's swap accounting.
    let flags = if cfg!(miri) {
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS
    } else {
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE
    };
    // SAFETY: an anonymous private mapping at an address of the kernel's
    // choosing; no existing memory is affected.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
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
    chunks.push(Chunk {
        base,
        len,
        reserved: false,
    });
    // Miri has no `madvise` (and no huge pages).
    if !cfg!(miri) {
        // SAFETY: `addr..addr + len` is the mapping just made. Failure (a kernel
        // without THP) leaves the mapping as it was, which is what is wanted.
        unsafe { libc::madvise(addr, len, libc::MADV_NOHUGEPAGE) };
    }
    let skip = match huge {
        Some(w) => (w - (addr as usize) % w) % w,
        None => 0,
    };
    // SAFETY: `skip < slack` (or 0), so the start stays inside the mapping
    // and `CHUNK_BYTES` usable bytes follow it.
    Ok((unsafe { base.add(skip) }, CHUNK_BYTES))
}

/// Populates `len` bytes at `addr` with huge pages where the kernel can
/// give them (4 KiB pages where it cannot), then excludes the range from
/// `khugepaged` again.
///
/// # Safety
/// `addr..addr + len` must lie in a private anonymous mapping of this
/// process that nobody holds a reference into.
unsafe fn populate_huge(addr: *mut u8, len: usize) {
    let a = addr.cast::<libc::c_void>();
    // SAFETY: the caller guarantees the range is part of one of our
    // anonymous mappings that no one uses; this only sets its huge-page flag.
    unsafe { libc::madvise(a, len, libc::MADV_HUGEPAGE) };
    // SAFETY: as above; populating faults the pages in without changing
    // their contents (zero-filled before and after).
    // A kernel that does not know the advice says EINVAL; other failures
    // (no memory now) leave the pages to fault in as they are touched.
    if unsafe { libc::madvise(a, len, MADV_POPULATE_WRITE) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)
    {
        POPULATE_REFUSED.store(true, Ordering::Relaxed);
    }
    // SAFETY: as above; this clears the flag again (mapped huge pages stay).
    unsafe { libc::madvise(a, len, libc::MADV_NOHUGEPAGE) };
}

/// Set once `MADV_POPULATE_WRITE` was refused (a kernel before 5.14): the dense
/// frontier stops populating ahead.
static POPULATE_REFUSED: AtomicBool = AtomicBool::new(false);

/// The huge-page size the dense frontier populates by, if it should.
pub(crate) fn huge_page_bytes() -> Option<usize> {
    static SIZE: OnceLock<Option<usize>> = OnceLock::new();
    if POPULATE_REFUSED.load(Ordering::Relaxed) {
        return None;
    }
    *SIZE.get_or_init(|| {
        // Miri has no huge pages, no `madvise` and no /sys.
        if cfg!(miri) || std::env::var_os("ZMEM_NO_THP").is_some_and(|v| v != "0") {
            return None;
        }
        if crate::os_page_size() != 4096 {
            return None;
        }
        let dir = "/sys/kernel/mm/transparent_hugepage";
        let enabled = std::fs::read_to_string(format!("{dir}/enabled")).ok()?;
        if !(enabled.contains("[always]") || enabled.contains("[madvise]")) {
            return None;
        }
        let size: usize = std::fs::read_to_string(format!("{dir}/hpage_pmd_size"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        // A window larger than a few chunks' worth of slack, or not a power
        // of two, is not a layout this module knows.
        (size.is_power_of_two() && size <= CHUNK_BYTES / 8).then_some(size)
    })
}
