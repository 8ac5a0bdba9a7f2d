//! The z3fold allocator proper: [`Z3Fold`], its handles and handle table,
//! the pool mutex with everything under it, and the object API (malloc,
//! free, write, reads), with the invariant walk.
//!
//! This module owns the pool's state. It places objects through `page.rs`'s
//! layout and leaves moving them to `compact.rs`; it reads and writes page
//! memory only for an object's own bytes, under the pool mutex.

use std::ptr::NonNull;

use pages::PageSource;
use zpool::{ZCompacted, ZHandle, ZPool, ZPoolError, ZPoolStats};

use super::page::{Page, FIRST, HEADER_CHUNKS, HEADLESS, MIDDLE, NCHUNKS, NIL, TOTAL_CHUNKS};
use crate::bookkeeping::{FOREIGN, FREED, STALE};
use crate::holds::HoldLock;
use crate::lists::ChunkLists;

const TAG_SHIFT: u32 = 57;
const GEN_SHIFT: u32 = 32;
const GEN_MASK: u32 = (1 << 25) - 1;
const MAX_RECORDS: usize = (u32::MAX - 1) as usize;

/// One handle-table entry.
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    /// Bumped by every free of the entry's object.
    pub(super) generation: u32,
    /// The object's page, [`NIL`] when the entry is free.
    pub(super) page: u32,
    /// FIRST, MIDDLE, LAST or [`HEADLESS`].
    pub(super) bud: u8,
    /// Outstanding `read_begin`s.
    pub(super) readers: u32,
    /// Next free entry (while free).
    pub(super) next_free: u32,
}

/// Everything under the pool mutex.
pub(super) struct Inner {
    pub(super) pages: Vec<Page>,
    pub(super) free_pages: Vec<u32>,
    /// List `i`: the pages that can take `i` chunks (by index in `pages`).
    pub(super) lists: ChunkLists<NCHUNKS>,
    pub(super) entries: Vec<Entry>,
    pub(super) free_entry: u32,
    /// Pages to compact, oldest first.
    pub(super) queue: std::collections::VecDeque<u32>,
    pub(super) live_pages: usize,
    pub(super) objects: u64,
    pub(super) pages_compacted: u64,
    pub(super) objs_moved: u64,
}

/// A z3fold pool. See the [module documentation](super).
pub struct Z3Fold {
    source: PageSource,
    page_size: usize,
    pub(super) chunk_shift: u32,
    tag: u8,
    /// The pool mutex, and the condition variable read holds are waited
    /// out on.
    pub(super) inner: HoldLock<Inner>,
}

impl std::fmt::Debug for Z3Fold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Z3Fold")
            .field("page_size", &self.page_size)
            .field("total_pages", &self.total_pages())
            .finish_non_exhaustive()
    }
}

impl Z3Fold {
    /// An empty pool on pages of `page_size` bytes (a power of two from the
    /// OS page size up to 64 KiB), holding at most `limit` pages at once if
    /// given: `malloc` fails with
    /// [`ZPoolError::OutOfMemory`] beyond it.
    pub fn new(page_size: usize, limit: Option<usize>) -> Result<Z3Fold, ZPoolError> {
        let (source, tag) = crate::bookkeeping::source_and_tag(page_size, limit)?;
        Ok(Z3Fold {
            source,
            page_size,
            chunk_shift: page_size.trailing_zeros() - TOTAL_CHUNKS.trailing_zeros(),
            tag,
            inner: HoldLock::new(Inner {
                pages: Vec::new(),
                free_pages: Vec::new(),
                lists: ChunkLists::new(),
                entries: Vec::new(),
                free_entry: NIL,
                queue: std::collections::VecDeque::new(),
                live_pages: 0,
                objects: 0,
                pages_compacted: 0,
                objs_moved: 0,
            }),
        })
    }

    /// Bytes per chunk (`page_size / 64`).
    pub fn chunk_size(&self) -> usize {
        1 << self.chunk_shift
    }

    /// Objects larger than this get a headless page.
    pub fn headless_threshold(&self) -> usize {
        self.page_size - (HEADER_CHUNKS + 1) * self.chunk_size()
    }

    /// Bytes an object of `len` bytes may hold: whole chunks, or the whole
    /// page for a headless object.
    pub fn capacity_for(&self, len: usize) -> Result<usize, ZPoolError> {
        self.check_len(len)?;
        if len > self.headless_threshold() {
            Ok(self.page_size)
        } else {
            Ok(len.div_ceil(self.chunk_size()) << self.chunk_shift)
        }
    }

    /// Pages waiting for compaction.
    pub fn queued_pages(&self) -> usize {
        self.inner.lock().queue.len()
    }

    fn check_len(&self, len: usize) -> Result<(), ZPoolError> {
        if len == 0 {
            return Err(ZPoolError::ZeroSize);
        }
        if len > self.page_size {
            return Err(ZPoolError::TooLarge {
                len,
                max: self.page_size,
            });
        }
        Ok(())
    }

    fn handle(&self, slot: u32, generation: u32) -> ZHandle {
        let raw = u64::from(self.tag) << TAG_SHIFT
            | u64::from(generation & GEN_MASK) << GEN_SHIFT
            | u64::from(slot + 1);
        ZHandle::from_raw(raw).expect("slot + 1 is never 0")
    }

    /// The live entry `h` names.
    fn locate(&self, inner: &Inner, h: ZHandle) -> Result<usize, ZPoolError> {
        let raw = h.to_raw();
        if (raw >> TAG_SHIFT) as u8 != self.tag {
            return Err(FOREIGN);
        }
        let slot = (raw as u32).checked_sub(1).ok_or(FOREIGN)? as usize;
        let generation = ((raw >> GEN_SHIFT) as u32) & GEN_MASK;
        let e = inner.entries.get(slot).ok_or(FOREIGN)?;
        if e.page == NIL {
            return Err(FREED);
        }
        if e.generation != generation {
            return Err(STALE);
        }
        Ok(slot)
    }

    /// Byte offset and capacity of entry `slot`'s object.
    pub(super) fn extent(&self, inner: &Inner, slot: usize) -> (usize, usize) {
        let e = inner.entries[slot];
        if e.bud == HEADLESS {
            return (0, self.page_size);
        }
        let page = &inner.pages[e.page as usize];
        let bud = usize::from(e.bud);
        (
            page.start(bud) << self.chunk_shift,
            usize::from(page.chunks[bud]) << self.chunk_shift,
        )
    }

    pub(super) fn base(inner: &Inner, pid: u32) -> *mut u8 {
        inner.pages[pid as usize]
            .run
            .as_ref()
            .expect("a live page has memory")
            .as_ptr()
    }

    fn new_page(&self, inner: &mut Inner) -> Result<u32, ZPoolError> {
        let run = self
            .source
            .alloc(1)
            .map_err(|e| ZPoolError::OutOfMemory(e.to_string()))?;
        let pid = if let Some(pid) = inner.free_pages.pop() {
            pid
        } else if inner.pages.len() < MAX_RECORDS {
            inner.pages.push(Page {
                run: None,
                headless: false,
                chunks: [0; 3],
                start_middle: 0,
                owner: [NIL; 3],
                queued: false,
            });
            (inner.pages.len() - 1) as u32
        } else {
            self.source.free(run);
            return Err(ZPoolError::OutOfMemory("the page table is full".into()));
        };
        inner.pages[pid as usize].run = Some(run);
        inner.live_pages += 1;
        Ok(pid)
    }

    pub(super) fn release_page(&self, inner: &mut Inner, pid: u32) {
        inner.lists.unlink(pid);
        let page = &mut inner.pages[pid as usize];
        let run = page.run.take().expect("a live page has memory");
        page.headless = false;
        page.chunks = [0; 3];
        page.start_middle = 0;
        page.owner = [NIL; 3];
        // A queued record stays queued; the queue skips pages without memory
        // and a reused record is merely looked at once more.
        self.source.free(run);
        inner.free_pages.push(pid);
        inner.live_pages -= 1;
    }

    /// Verifies every count, list, page layout and handle entry. Returns the
    /// first violation. Call it while no other thread uses the pool.
    pub fn check_invariants(&self) -> Result<(), String> {
        let inner = self.inner.lock();
        let (mut live, mut objects) = (0, 0u64);
        for (pid, page) in inner.pages.iter().enumerate() {
            if page.run.is_none() {
                if page.chunks != [0; 3] || page.owner != [NIL; 3] {
                    return Err(format!("unused page record {pid} has contents"));
                }
                continue;
            }
            live += 1;
            objects += page.objects() as u64;
            let mut owned = Vec::new();
            if page.headless {
                if page.owner[1..] != [NIL, NIL] {
                    return Err(format!("headless page {pid} has buddies"));
                }
                owned.push((page.owner[FIRST], HEADLESS));
            } else {
                let [f, m, l] = page.chunks.map(usize::from);
                let sm = usize::from(page.start_middle);
                let fits = if m != 0 {
                    HEADER_CHUNKS + f <= sm && sm + m <= TOTAL_CHUNKS - l
                } else {
                    sm == 0 && f + l <= NCHUNKS
                };
                if !fits || page.objects() == 0 {
                    return Err(format!("page {pid}: bad layout {:?} at {sm}", page.chunks));
                }
                for b in 0..3 {
                    if (page.chunks[b] != 0) != (page.owner[b] != NIL) {
                        return Err(format!("page {pid}: buddy {b} owner mismatch"));
                    }
                    if page.owner[b] != NIL {
                        owned.push((page.owner[b], b as u8));
                    }
                }
            }
            for (slot, bud) in owned {
                let e = inner
                    .entries
                    .get(slot as usize)
                    .ok_or(format!("page {pid}: owner {slot} past the table"))?;
                if e.page != pid as u32 || e.bud != bud {
                    return Err(format!("page {pid}: entry {slot} does not point back"));
                }
            }
        }
        // Now that the layouts are known to be sound (`want_list` reads them).
        inner
            .lists
            .check(inner.pages.len(), |pid| inner.pages[pid].want_list())?;
        let mut free_entries = 0;
        let mut cur = inner.free_entry;
        while cur != NIL {
            let e = inner
                .entries
                .get(cur as usize)
                .ok_or("the free entry list leaves the table")?;
            if e.page != NIL || free_entries > inner.entries.len() {
                return Err("the free entry list is corrupt".into());
            }
            free_entries += 1;
            cur = e.next_free;
        }
        let used = inner.entries.iter().filter(|e| e.page != NIL).count();
        if used + free_entries != inner.entries.len() || used as u64 != objects {
            return Err(format!(
                "{used} used + {free_entries} free entries of {}; {objects} objects in pages",
                inner.entries.len()
            ));
        }
        if inner.entries.iter().any(|e| e.readers != 0) {
            return Err("an object is still being read".into());
        }
        crate::bookkeeping::check_totals(
            (live, objects),
            (inner.live_pages, inner.objects),
            self.source.pages_out(),
        )
    }
}

impl Inner {
    /// Puts a page on the list of the largest object it can take.
    pub(super) fn relist(&mut self, pid: u32) {
        let want = self.pages[pid as usize].want_list();
        self.lists.relist(pid, want);
    }

    /// A listed page other than `not` that can take `chunks` chunks.
    pub(super) fn find_page(&self, chunks: usize, not: Option<u32>) -> Option<u32> {
        self.lists.find(chunks, not)
    }

    /// Records entry `slot`'s object as buddy `bud` of page `pid`.
    pub(super) fn place(&mut self, pid: u32, bud: usize, chunks: usize, slot: u32) {
        let page = &mut self.pages[pid as usize];
        if bud == MIDDLE {
            page.start_middle = (HEADER_CHUNKS + usize::from(page.chunks[FIRST])) as u8;
        }
        page.chunks[bud] = chunks as u8;
        page.owner[bud] = slot;
        let e = &mut self.entries[slot as usize];
        e.page = pid;
        e.bud = bud as u8;
        self.relist(pid);
    }

    /// Removes buddy `bud` from page `pid` (which is not headless).
    fn unplace(&mut self, pid: u32, bud: usize) {
        let page = &mut self.pages[pid as usize];
        page.chunks[bud] = 0;
        page.owner[bud] = NIL;
        if bud == MIDDLE {
            page.start_middle = 0;
        }
    }

    fn take_entry(&mut self) -> Result<u32, ZPoolError> {
        if self.free_entry != NIL {
            let slot = self.free_entry;
            self.free_entry = self.entries[slot as usize].next_free;
            return Ok(slot);
        }
        if self.entries.len() >= MAX_RECORDS {
            return Err(ZPoolError::OutOfMemory("the handle table is full".into()));
        }
        self.entries.push(Entry {
            generation: 0,
            page: NIL,
            bud: 0,
            readers: 0,
            next_free: NIL,
        });
        Ok((self.entries.len() - 1) as u32)
    }

    /// Returns an entry to the free list; `retire` bumps its generation
    /// (a handle was issued for it).
    fn put_entry(&mut self, slot: u32, retire: bool) {
        let head = self.free_entry;
        let e = &mut self.entries[slot as usize];
        if retire {
            e.generation = (e.generation + 1) & GEN_MASK;
        }
        e.page = NIL;
        e.next_free = head;
        self.free_entry = slot;
    }
}

impl ZPool for Z3Fold {
    fn name(&self) -> &'static str {
        "z3fold"
    }

    fn page_size(&self) -> usize {
        self.page_size
    }

    fn max_object_size(&self) -> usize {
        self.page_size
    }

    fn huge_class_size(&self) -> usize {
        self.headless_threshold() + 1
    }

    fn malloc(&self, len: usize) -> Result<ZHandle, ZPoolError> {
        self.check_len(len)?;
        let mut inner = self.inner.lock();
        let slot = inner.take_entry()?;
        if len > self.headless_threshold() {
            let pid = match self.new_page(&mut inner) {
                Ok(pid) => pid,
                Err(e) => {
                    inner.put_entry(slot, false);
                    return Err(e);
                }
            };
            let page = &mut inner.pages[pid as usize];
            page.headless = true;
            page.owner[FIRST] = slot;
            let e = &mut inner.entries[slot as usize];
            e.page = pid;
            e.bud = HEADLESS;
        } else {
            let chunks = len.div_ceil(self.chunk_size());
            let (pid, bud) = match inner.find_page(chunks, None) {
                Some(pid) => {
                    let bud = inner.pages[pid as usize]
                        .choose(chunks)
                        .expect("a listed page has room");
                    (pid, bud)
                }
                None => match self.new_page(&mut inner) {
                    Ok(pid) => (pid, FIRST),
                    Err(e) => {
                        inner.put_entry(slot, false);
                        return Err(e);
                    }
                },
            };
            inner.place(pid, bud, chunks, slot);
        }
        inner.objects += 1;
        Ok(self.handle(slot, inner.entries[slot as usize].generation))
    }

    fn free(&self, h: ZHandle) -> Result<(), ZPoolError> {
        let mut inner = self.inner.lock();
        let slot = loop {
            let slot = self.locate(&inner, h)?;
            if inner.entries[slot].readers == 0 {
                break slot;
            }
            inner = self.inner.wait(inner);
        };
        let Entry { page: pid, bud, .. } = inner.entries[slot];
        inner.put_entry(slot as u32, true);
        inner.objects -= 1;
        if bud == HEADLESS {
            self.release_page(&mut inner, pid);
            return Ok(());
        }
        inner.unplace(pid, usize::from(bud));
        if inner.pages[pid as usize].objects() == 0 {
            self.release_page(&mut inner, pid);
        } else {
            inner.relist(pid);
            let page = &mut inner.pages[pid as usize];
            if !page.queued {
                page.queued = true;
                inner.queue.push_back(pid);
            }
        }
        Ok(())
    }

    fn write(&self, h: ZHandle, data: &[u8]) -> Result<(), ZPoolError> {
        let mut inner = self.inner.lock();
        let (offset, pid) = loop {
            let slot = self.locate(&inner, h)?;
            let (offset, capacity) = self.extent(&inner, slot);
            if data.len() > capacity {
                return Err(ZPoolError::TooLong {
                    len: data.len(),
                    capacity,
                });
            }
            if inner.entries[slot].readers == 0 {
                break (offset, inner.entries[slot].page);
            }
            inner = self.inner.wait(inner);
        };
        // SAFETY: the object spans `capacity >= data.len()` bytes from
        // `offset` inside its page's run; it has no read holds and we hold
        // the pool mutex (no write, free or move can run), and `data` is
        // caller memory, so the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                Self::base(&inner, pid).add(offset),
                data.len(),
            );
        }
        Ok(())
    }

    fn read_begin(&self, h: ZHandle, len: usize) -> Result<NonNull<[u8]>, ZPoolError> {
        let mut inner = self.inner.lock();
        let slot = self.locate(&inner, h)?;
        let (offset, capacity) = self.extent(&inner, slot);
        if len > capacity {
            return Err(ZPoolError::TooLong { len, capacity });
        }
        let e = &mut inner.entries[slot];
        e.readers = e.readers.checked_add(1).ok_or(ZPoolError::OutOfMemory(
            "too many reads of one object".into(),
        ))?;
        let pid = e.page;
        // SAFETY: `offset + len <= page_size`: inside the page's run.
        let ptr = unsafe { Self::base(&inner, pid).add(offset) };
        let ptr = NonNull::new(ptr).expect("page memory is not null");
        Ok(NonNull::slice_from_raw_parts(ptr, len))
    }

    unsafe fn read_end(&self, h: ZHandle) {
        let mut inner = self.inner.lock();
        if let Ok(slot) = self.locate(&inner, h) {
            let e = &mut inner.entries[slot];
            e.readers = e.readers.saturating_sub(1);
            if e.readers == 0 {
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
            pages_compacted: inner.pages_compacted,
            objs_moved: inner.objs_moved,
        }
    }

    /// Works through the compaction queue as it is at the call (see
    /// `compact.rs`).
    fn compact(&self) -> ZCompacted {
        self.compact_queue()
    }

    /// Queued pages holding a single object (see `compact.rs`).
    fn can_compact(&self) -> u64 {
        self.single_object_pages()
    }

    fn check_invariants(&self) -> Result<(), String> {
        Z3Fold::check_invariants(self)
    }
}
