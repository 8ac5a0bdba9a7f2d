//! zbud in user space: at most two compressed objects per page.
//!
//! zbud was the kernel's simplest compressed-object allocator (removed in
//! 6.15). Every page is cut into 64 *chunks* (64 bytes each on 4 KiB pages,
//! `page_size / 64` in general). Chunk 0 is the page header's; the remaining
//! 63 hold at most two objects, the *buddies*:
//!
//! ```text
//!   | hdr | FIRST ------>          free          <------ LAST |
//!   0     1 chunk                                   page_size
//! ```
//!
//! The FIRST buddy starts right after the header, the LAST one ends at the
//! end of the page, and the free space between them is one region. An
//! object takes `ceil(len / chunk)` chunks, so the largest is
//! `page_size - 2 * chunk` bytes (3968 on 4 KiB pages); larger requests are
//! refused with [`ZPoolError::TooLarge`], as the kernel's `-ENOSPC`.
//!
//! # Placement
//!
//! A page with one buddy sits on the *unbuddied* list indexed by its free
//! chunks (1..=62). `malloc` of `n` chunks scans the lists from `n` upward,
//! takes the first page found and fills its free buddy (FIRST if free, else
//! LAST); if every list is empty it takes a new page. A page with two
//! buddies is on no list. Freeing a buddy puts its page back on the list of
//! its new free count, or returns the page to the OS at once when it was the
//! last. Nothing ever moves, so there is no compaction: allocation is a
//! bounded scan of 62 list heads, free is O(1). That is zbud's case for
//! determinism (the zbud-for-zram thread), and its density is
//! capped at two objects a page.
//! The lists themselves (linking, the scan, their check) are
//! `lists::ChunkLists` (private to this crate), which z3fold uses too; this
//! module says which list a page belongs on.
//!
//! # Differences from the kernel
//!
//! - Handles are not addresses. A [`ZHandle`] packs the page's index in the
//!   pool's page table, the buddy, the buddy's *generation* (bumped by every
//!   free) and the pool's tag, so a forged, foreign or stale handle is
//!   refused with [`ZPoolError::InvalidHandle`] instead of being followed.
//!   Bits: tag (7) | generation (24) | page index (31) | buddy (2).
//! - The header is kept outside the page (in page records); chunk 0 stays
//!   reserved so the geometry, and thus the density, is the kernel's.
//! - There is no LRU and no eviction (the kernel dropped them in 6.5).
//!
//! # Lock order
//!
//! ```text
//!   pool mutex (`ZBud::inner`: page table, lists, counters, read holds)
//!     -> page source mutex (leaf, inside `PageSource`)
//! ```
//!
//! One mutex guards the whole pool, like the kernel's single spinlock. A read
//! takes it twice, briefly: `read_begin` counts a *read hold* on the buddy and
//! `read_end` drops it. The bytes are read with the mutex released. `write`
//! and `free` wait (on the condition variable of `ZBud::inner`, a
//! `holds::HoldLock`, private to this crate) until an object has no read
//! holds, so the bytes a reader sees never change and its page is never freed
//! under it. `write` copies under the mutex. Every update under the mutex is
//! finished before anything that can panic, so a poisoned mutex still guards
//! consistent state.
//!
//! This module owns zbud's pages, handles and list placement; it may not map
//! memory (pages come from its `PageSource`) or know about other allocators.

use std::ptr::NonNull;

use crate::bookkeeping::{FOREIGN, FREED, STALE};
use crate::holds::HoldLock;
use crate::lists::ChunkLists;
use pages::{PageSource, Run};
use zpool::{ZHandle, ZPool, ZPoolError, ZPoolStats};

/// Chunks per page (`1 << NCHUNKS_ORDER` in the kernel).
pub const TOTAL_CHUNKS: usize = 64;
/// Chunks the page header takes.
pub const HEADER_CHUNKS: usize = 1;
/// Chunks left for objects (63).
pub const NCHUNKS: usize = TOTAL_CHUNKS - HEADER_CHUNKS;

const TAG_SHIFT: u32 = 57;
const GEN_SHIFT: u32 = 33;
const GEN_MASK: u32 = (1 << 24) - 1;
const PAGE_SHIFT: u32 = 2;
const PAGE_MASK: u64 = (1 << 31) - 1;
const MAX_PAGES: usize = PAGE_MASK as usize;

/// Which buddy of a page an object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buddy {
    /// Starts right after the header.
    First = 0,
    /// Ends at the end of the page.
    Last = 1,
}

/// One buddy's bookkeeping.
#[derive(Clone, Copy, Debug, Default)]
struct Bud {
    /// Generation of the slot; bumped by every free of it.
    generation: u32,
    /// Outstanding `read_begin`s of the object.
    readers: u32,
}

/// The header of one page (kept outside the page).
#[derive(Debug)]
struct Page {
    /// The memory; `None` while the record is unused (its index on the free list).
    run: Option<Run>,
    /// Chunks of the FIRST and LAST buddies, 0 when free.
    chunks: [u8; 2],
    bud: [Bud; 2],
}

impl Page {
    fn used_chunks(&self) -> usize {
        usize::from(self.chunks[0]) + usize::from(self.chunks[1])
    }

    /// The unbuddied list the page belongs on: that of its free chunks when
    /// it holds one buddy; none when it holds two (or is unused).
    fn want_list(&self) -> Option<usize> {
        let used = self.chunks.iter().filter(|&&c| c != 0).count();
        (self.run.is_some() && used == 1).then(|| NCHUNKS - self.used_chunks())
    }
}

/// Everything under the pool mutex.
struct Inner {
    /// Page records by index; unused ones have no run.
    pages: Vec<Page>,
    /// Indexes of unused page records.
    free_ids: Vec<u32>,
    /// List `i`: the pages with one buddy and `i` free chunks (list 0
    /// unused: a full page is on no list). Pages by index in `pages`.
    lists: ChunkLists<NCHUNKS>,
    /// Pages holding memory.
    live_pages: usize,
    /// Live objects.
    objects: u64,
}

/// A zbud pool. See the [module documentation](self).
pub struct ZBud {
    source: PageSource,
    page_size: usize,
    chunk_shift: u32,
    tag: u8,
    /// The pool mutex, and the condition variable read holds are waited
    /// out on.
    inner: HoldLock<Inner>,
}

impl std::fmt::Debug for ZBud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZBud")
            .field("page_size", &self.page_size)
            .field("total_pages", &self.total_pages())
            .finish_non_exhaustive()
    }
}

impl ZBud {
    /// An empty pool on pages of `page_size` bytes (a power of two from the
    /// OS page size up to 64 KiB), holding at most `limit` pages at once if
    /// given: `malloc` fails with
    /// [`ZPoolError::OutOfMemory`] beyond it.
    pub fn new(page_size: usize, limit: Option<usize>) -> Result<ZBud, ZPoolError> {
        let (source, tag) = crate::bookkeeping::source_and_tag(page_size, limit)?;
        Ok(ZBud {
            source,
            page_size,
            chunk_shift: page_size.trailing_zeros() - TOTAL_CHUNKS.trailing_zeros(),
            tag,
            inner: HoldLock::new(Inner {
                pages: Vec::new(),
                free_ids: Vec::new(),
                lists: ChunkLists::new(),
                live_pages: 0,
                objects: 0,
            }),
        })
    }

    /// Bytes per chunk (`page_size / 64`).
    pub fn chunk_size(&self) -> usize {
        1 << self.chunk_shift
    }

    /// Bytes an object of `len` bytes may hold (`len` rounded up to whole
    /// chunks), or an error if `malloc(len)` would fail for its size.
    pub fn capacity_for(&self, len: usize) -> Result<usize, ZPoolError> {
        Ok(self.chunks_for(len)? << self.chunk_shift)
    }

    fn chunks_for(&self, len: usize) -> Result<usize, ZPoolError> {
        if len == 0 {
            return Err(ZPoolError::ZeroSize);
        }
        let max = self.max_size();
        if len > max {
            return Err(ZPoolError::TooLarge { len, max });
        }
        Ok(len.div_ceil(self.chunk_size()))
    }

    fn max_size(&self) -> usize {
        self.page_size - 2 * self.chunk_size()
    }

    fn handle(&self, page: u32, bud: usize, generation: u32) -> ZHandle {
        let raw = u64::from(self.tag) << TAG_SHIFT
            | u64::from(generation & GEN_MASK) << GEN_SHIFT
            | u64::from(page) << PAGE_SHIFT
            | (bud as u64 + 1);
        ZHandle::from_raw(raw).expect("the buddy field is never 0")
    }

    /// The live object `h` names: (page index, buddy index).
    fn locate(&self, inner: &Inner, h: ZHandle) -> Result<(usize, usize), ZPoolError> {
        let raw = h.to_raw();
        if (raw >> TAG_SHIFT) as u8 != self.tag {
            return Err(FOREIGN);
        }
        let bud = match raw & 3 {
            1 => 0,
            2 => 1,
            _ => return Err(FOREIGN),
        };
        let pid = ((raw >> PAGE_SHIFT) & PAGE_MASK) as usize;
        let generation = ((raw >> GEN_SHIFT) as u32) & GEN_MASK;
        let page = inner.pages.get(pid).ok_or(FOREIGN)?;
        if page.run.is_none() || page.chunks[bud] == 0 {
            return Err(FREED);
        }
        if page.bud[bud].generation != generation {
            return Err(STALE);
        }
        Ok((pid, bud))
    }

    /// Byte offset of a buddy in its page.
    fn offset(&self, page: &Page, bud: usize) -> usize {
        if bud == Buddy::First as usize {
            HEADER_CHUNKS << self.chunk_shift
        } else {
            self.page_size - (usize::from(page.chunks[1]) << self.chunk_shift)
        }
    }

    /// The address of a buddy's first byte.
    fn address(&self, page: &Page, bud: usize) -> *mut u8 {
        let run = page.run.as_ref().expect("a live page has memory");
        // SAFETY: `offset` is below `page_size`, inside the page's one-page run.
        unsafe { run.as_ptr().add(self.offset(page, bud)) }
    }

    /// Verifies every count, list and record. Returns the first violation.
    /// Call it while no other thread uses the pool.
    pub fn check_invariants(&self) -> Result<(), String> {
        let inner = self.inner.lock();
        let mut live = 0;
        let mut objects = 0;
        for (pid, page) in inner.pages.iter().enumerate() {
            if page.run.is_none() {
                if page.chunks != [0, 0] {
                    return Err(format!("unused page record {pid} has contents"));
                }
                continue;
            }
            live += 1;
            let used = page.chunks.iter().filter(|&&c| c != 0).count();
            objects += used as u64;
            if used == 0 {
                return Err(format!("page {pid} is held with no object"));
            }
            if page.used_chunks() > NCHUNKS {
                return Err(format!("page {pid}: buddies overlap"));
            }
            if page.bud.iter().any(|b| b.readers != 0) {
                return Err(format!("page {pid}: an object is still being read"));
            }
        }
        // Each page on the list its buddies call for (overlaps ruled out).
        inner
            .lists
            .check(inner.pages.len(), |pid| inner.pages[pid].want_list())?;
        let mut ids: Vec<u32> = inner.free_ids.clone();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != inner.free_ids.len()
            || ids.len() + live != inner.pages.len()
            || ids.iter().any(|&i| inner.pages[i as usize].run.is_some())
        {
            return Err("the free page-record list is not the unused records".into());
        }
        crate::bookkeeping::check_totals(
            (live, objects),
            (inner.live_pages, inner.objects),
            self.source.pages_out(),
        )
    }
}

impl Inner {
    /// A page record for new memory.
    fn new_record(&mut self, run: Run) -> Result<u32, Run> {
        if let Some(pid) = self.free_ids.pop() {
            self.pages[pid as usize].run = Some(run);
            return Ok(pid);
        }
        if self.pages.len() >= MAX_PAGES {
            return Err(run);
        }
        self.pages.push(Page {
            run: Some(run),
            chunks: [0, 0],
            bud: [Bud::default(); 2],
        });
        Ok((self.pages.len() - 1) as u32)
    }

    /// Puts a page on the list its contents call for (none when full).
    fn relist(&mut self, pid: u32) {
        let want = self.pages[pid as usize].want_list();
        self.lists.relist(pid, want);
    }
}

impl ZPool for ZBud {
    fn name(&self) -> &'static str {
        "zbud"
    }

    fn page_size(&self) -> usize {
        self.page_size
    }

    fn max_object_size(&self) -> usize {
        self.max_size()
    }

    fn malloc(&self, len: usize) -> Result<ZHandle, ZPoolError> {
        let chunks = self.chunks_for(len)?;
        let mut inner = self.inner.lock();
        let found = inner.lists.find(chunks, None);
        let (pid, bud) = match found {
            Some(pid) => {
                let bud = if inner.pages[pid as usize].chunks[0] == 0 {
                    0
                } else {
                    1
                };
                (pid, bud)
            }
            None => {
                let run = self
                    .source
                    .alloc(1)
                    .map_err(|e| ZPoolError::OutOfMemory(e.to_string()))?;
                let pid = match inner.new_record(run) {
                    Ok(pid) => pid,
                    Err(run) => {
                        self.source.free(run);
                        return Err(ZPoolError::OutOfMemory("the page table is full".into()));
                    }
                };
                inner.live_pages += 1;
                (pid, 0)
            }
        };
        let page = &mut inner.pages[pid as usize];
        page.chunks[bud] = chunks as u8;
        let generation = page.bud[bud].generation;
        inner.relist(pid);
        inner.objects += 1;
        Ok(self.handle(pid, bud, generation))
    }

    fn free(&self, h: ZHandle) -> Result<(), ZPoolError> {
        let mut inner = self.inner.lock();
        let (pid, bud) = loop {
            let (pid, bud) = self.locate(&inner, h)?;
            if inner.pages[pid].bud[bud].readers == 0 {
                break (pid, bud);
            }
            inner = self.inner.wait(inner);
        };
        let page = &mut inner.pages[pid];
        page.chunks[bud] = 0;
        page.bud[bud].generation = (page.bud[bud].generation + 1) & GEN_MASK;
        inner.objects -= 1;
        if inner.pages[pid].chunks == [0, 0] {
            inner.lists.unlink(pid as u32);
            let run = inner.pages[pid].run.take().expect("a live page has memory");
            self.source.free(run);
            inner.free_ids.push(pid as u32);
            inner.live_pages -= 1;
        } else {
            inner.relist(pid as u32);
        }
        Ok(())
    }

    fn write(&self, h: ZHandle, data: &[u8]) -> Result<(), ZPoolError> {
        let mut inner = self.inner.lock();
        let (pid, bud) = loop {
            let (pid, bud) = self.locate(&inner, h)?;
            let capacity = usize::from(inner.pages[pid].chunks[bud]) << self.chunk_shift;
            if data.len() > capacity {
                return Err(ZPoolError::TooLong {
                    len: data.len(),
                    capacity,
                });
            }
            if inner.pages[pid].bud[bud].readers == 0 {
                break (pid, bud);
            }
            inner = self.inner.wait(inner);
        };
        let dst = self.address(&inner.pages[pid], bud);
        // SAFETY: the buddy is live and spans `capacity >= data.len()` bytes
        // from `dst` inside its page; nobody reads it (no read holds) and no
        // other write or free can run (we hold the pool mutex), and `data`
        // is caller memory, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        Ok(())
    }

    fn read_begin(&self, h: ZHandle, len: usize) -> Result<NonNull<[u8]>, ZPoolError> {
        let mut inner = self.inner.lock();
        let (pid, bud) = self.locate(&inner, h)?;
        let capacity = usize::from(inner.pages[pid].chunks[bud]) << self.chunk_shift;
        if len > capacity {
            return Err(ZPoolError::TooLong { len, capacity });
        }
        let page = &mut inner.pages[pid];
        page.bud[bud].readers =
            page.bud[bud]
                .readers
                .checked_add(1)
                .ok_or(ZPoolError::OutOfMemory(
                    "too many reads of one object".into(),
                ))?;
        let ptr = NonNull::new(self.address(page, bud)).expect("page memory is not null");
        Ok(NonNull::slice_from_raw_parts(ptr, len))
    }

    unsafe fn read_end(&self, h: ZHandle) {
        let mut inner = self.inner.lock();
        if let Ok((pid, bud)) = self.locate(&inner, h) {
            let b = &mut inner.pages[pid].bud[bud];
            b.readers = b.readers.saturating_sub(1);
            if b.readers == 0 {
                self.inner.released(&inner);
            }
        }
    }

    crate::bookkeeping::retained_page_methods!(source);

    fn total_pages(&self) -> usize {
        self.inner.lock().live_pages
    }

    fn stats(&self) -> ZPoolStats {
        let inner = self.inner.lock();
        ZPoolStats {
            total_pages: inner.live_pages as u64,
            objects: inner.objects,
            pages_compacted: 0,
            objs_moved: 0,
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        ZBud::check_invariants(self)
    }
}
