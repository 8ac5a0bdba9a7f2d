//! z3fold in user space: up to three compressed objects per page.
//!
//! z3fold was zbud's denser successor in the kernel (deprecated in 6.12,
//! removed in 6.15). A page is cut into 64 chunks like zbud's (64 bytes on
//! 4 KiB pages); chunk 0 is the header's, and the other 63 hold up to three
//! *buddies*:
//!
//! ```text
//!   | hdr | FIRST -->   | MIDDLE |        <-- LAST |
//!   0     1             start_middle          page_size
//! ```
//!
//! FIRST starts after the header, LAST ends at the end of the page, MIDDLE
//! starts at a recorded chunk. An object larger than
//! `page_size - header - chunk` (3968 bytes on 4 KiB pages) gets a
//! *headless* page of its own (no header, one object), so any size up to a
//! page is accepted.
//!
//! # Placement
//!
//! A page that can take another object sits on the *unbuddied* list indexed
//! by the largest object it can take now, in chunks:
//! - with a MIDDLE: FIRST can take the space before it (if FIRST is free),
//!   LAST the space after it (if LAST is free);
//! - without: FIRST can take everything but LAST, LAST everything but FIRST,
//!   and MIDDLE (only when FIRST and LAST are both used) the gap between
//!   them, placed right after FIRST.
//!
//! `malloc` of `n` chunks scans the lists from `n` upward, takes the first
//! page found and fills the first buddy that fits in the order FIRST, LAST,
//! MIDDLE; if every list is empty it takes a new page. The kernel kept these
//! lists per CPU; here there is one set (a user-space thread has no stable
//! CPU), which is what the kernel's lists amount to on one CPU. The lists
//! themselves (linking, the scan, their check) are `lists::ChunkLists`
//! (private to this crate), which zbud uses too; this module says which list a page belongs on.
//!
//! # Compaction
//!
//! Every free that leaves objects in a page queues the page for compaction,
//! as the kernel queued a work item. [`ZPool::compact`] (zram's `compact`,
//! or a background thread) works through the queue one page at a time, each
//! under the pool mutex for one page's work only:
//! - a page with a single object moves it to another page with room, if one
//!   is listed, and gives its own page back;
//! - otherwise a MIDDLE alone in its page moves to the FIRST position; a
//!   MIDDLE next to only FIRST (or only LAST) slides against it when that
//!   closes a gap of at least [`BIG_CHUNK_GAP`] chunks.
//!
//! An object with an outstanding read is not moved; its page is queued
//! again. Objects can move because handles are indirect: a handle names an
//! entry of the pool's handle table, and the entry holds the object's page
//! and buddy. (The kernel used a per-page `buddy_slots` block for the same
//! purpose.)
//!
//! # Handles
//!
//! Bits: tag (7) | generation (25) | entry index + 1 (32). Freeing an object
//! bumps its entry's generation, so freed and stale handles are refused with
//! [`ZPoolError::InvalidHandle`]; the tag catches handles of other pools.
//!
//! # Lock order
//!
//! ```text
//!   pool mutex (`Z3Fold::inner`: page records, lists, handle table,
//!               compaction queue, counters, read holds)
//!     -> page source mutex (leaf, inside `PageSource`)
//! ```
//!
//! `read_begin` counts a *read hold* on the object's entry and `read_end`
//! drops it; the bytes are read with the mutex released. `write` and `free`
//! wait (on the condition variable of `Z3Fold::inner`, a
//! `holds::HoldLock`, private to this crate) until an object has no read holds, and
//! compaction skips held objects, so a reader's bytes never move or change.
//! Every update under the mutex completes before anything that can panic, so
//! a poisoned mutex still guards consistent state.

use std::fmt;
use std::ptr::NonNull;

use crate::holds::HoldLock;
use crate::lists::ChunkLists;
use pages::{PageSource, Run};
use zpool::{ZCompacted, ZHandle, ZPool, ZPoolError, ZPoolStats};

/// Chunks per page.
pub const TOTAL_CHUNKS: usize = 64;
/// Chunks the page header takes.
pub const HEADER_CHUNKS: usize = 1;
/// Chunks left for objects (63).
pub const NCHUNKS: usize = TOTAL_CHUNKS - HEADER_CHUNKS;
/// In-page compaction slides a MIDDLE buddy only to close a gap of at least
/// this many chunks (moving bytes is not free).
pub const BIG_CHUNK_GAP: usize = 3;

const FIRST: usize = 0;
const MIDDLE: usize = 1;
const LAST: usize = 2;
/// `Entry::bud` of an object in a headless page.
const HEADLESS: u8 = 3;

const NIL: u32 = u32::MAX;

const TAG_SHIFT: u32 = 57;
const GEN_SHIFT: u32 = 32;
const GEN_MASK: u32 = (1 << 25) - 1;
const MAX_RECORDS: usize = (u32::MAX - 1) as usize;

const FOREIGN: ZPoolError = ZPoolError::InvalidHandle("not a handle of this pool");
const FREED: ZPoolError = ZPoolError::InvalidHandle("the object was freed");
const STALE: ZPoolError = ZPoolError::InvalidHandle("stale: its slot holds another object");

/// One page's header (kept outside the page).
#[derive(Debug)]
struct Page {
    /// The memory; `None` while the record is unused.
    run: Option<Run>,
    /// One object taking the whole page.
    headless: bool,
    /// Chunks of FIRST, MIDDLE and LAST; 0 when free.
    chunks: [u8; 3],
    /// First chunk of MIDDLE (0 without one).
    start_middle: u8,
    /// Handle-table entry of each buddy, [`NIL`] when free (a headless page's
    /// object is `owner[FIRST]`).
    owner: [u32; 3],
    /// On the compaction queue.
    queued: bool,
}

impl Page {
    fn objects(&self) -> usize {
        if self.headless {
            1
        } else {
            self.chunks.iter().filter(|&&c| c != 0).count()
        }
    }

    /// Chunks an object placed in free buddy `bud` may take now (0 if `bud`
    /// is used or cannot be placed).
    fn room(&self, bud: usize) -> usize {
        if self.headless || self.chunks[bud] != 0 {
            return 0;
        }
        let [f, m, l] = self.chunks.map(usize::from);
        let sm = usize::from(self.start_middle);
        match bud {
            FIRST if m != 0 => sm - HEADER_CHUNKS,
            FIRST => NCHUNKS - l,
            LAST if m != 0 => TOTAL_CHUNKS - sm - m,
            LAST => NCHUNKS - f,
            _ if f != 0 && l != 0 => NCHUNKS - f - l,
            _ => 0,
        }
    }

    /// The buddy an object of `chunks` chunks goes to: FIRST, LAST, MIDDLE,
    /// the first that fits.
    fn choose(&self, chunks: usize) -> Option<usize> {
        [FIRST, LAST, MIDDLE]
            .into_iter()
            .find(|&b| self.room(b) >= chunks)
    }

    /// The largest object the page can take now, in chunks.
    fn placeable(&self) -> usize {
        [FIRST, MIDDLE, LAST]
            .into_iter()
            .map(|b| self.room(b))
            .max()
            .unwrap_or(0)
    }

    /// The unbuddied list the page belongs on: that of the largest object
    /// it can take now; none if it can take none (or is unused).
    fn want_list(&self) -> Option<usize> {
        self.run
            .is_some()
            .then(|| self.placeable())
            .filter(|&p| p > 0)
    }

    /// First chunk of buddy `bud` (which is used).
    fn start(&self, bud: usize) -> usize {
        match bud {
            FIRST => HEADER_CHUNKS,
            MIDDLE => usize::from(self.start_middle),
            _ => TOTAL_CHUNKS - usize::from(self.chunks[LAST]),
        }
    }
}

/// One handle-table entry.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Bumped by every free of the entry's object.
    generation: u32,
    /// The object's page, [`NIL`] when the entry is free.
    page: u32,
    /// FIRST, MIDDLE, LAST or [`HEADLESS`].
    bud: u8,
    /// Outstanding `read_begin`s.
    readers: u32,
    /// Next free entry (while free).
    next_free: u32,
}

/// Everything under the pool mutex.
struct Inner {
    pages: Vec<Page>,
    free_pages: Vec<u32>,
    /// List `i`: the pages that can take `i` chunks (by index in `pages`).
    lists: ChunkLists<NCHUNKS>,
    entries: Vec<Entry>,
    free_entry: u32,
    /// Pages to compact, oldest first.
    queue: std::collections::VecDeque<u32>,
    live_pages: usize,
    objects: u64,
    pages_compacted: u64,
    objs_moved: u64,
}

/// A z3fold pool. See the [module documentation](self).
pub struct Z3Fold {
    source: PageSource,
    page_size: usize,
    chunk_shift: u32,
    tag: u8,
    /// The pool mutex, and the condition variable read holds are waited
    /// out on.
    inner: HoldLock<Inner>,
}

impl fmt::Debug for Z3Fold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Z3Fold")
            .field("page_size", &self.page_size)
            .field("total_pages", &self.total_pages())
            .finish_non_exhaustive()
    }
}

/// What compacting one page did.
enum PageWork {
    /// Nothing to do (or the page is gone).
    Nothing,
    /// An object is being read; try again later.
    Busy,
    /// Moved an object, freeing the page if `true`.
    Moved(bool),
}

impl Z3Fold {
    /// An empty pool on pages of `page_size` bytes (a power of two from the
    /// OS page size up to 64 KiB).
    pub fn new(page_size: usize) -> Result<Z3Fold, ZPoolError> {
        Self::build(page_size, None)
    }

    /// An empty pool that holds at most `limit` pages at once.
    pub fn with_page_limit(page_size: usize, limit: usize) -> Result<Z3Fold, ZPoolError> {
        Self::build(page_size, Some(limit))
    }

    fn build(page_size: usize, limit: Option<usize>) -> Result<Z3Fold, ZPoolError> {
        let source =
            PageSource::new(page_size, limit).map_err(|e| ZPoolError::Config(e.to_string()))?;
        Ok(Z3Fold {
            source,
            page_size,
            chunk_shift: page_size.trailing_zeros() - TOTAL_CHUNKS.trailing_zeros(),
            tag: crate::bookkeeping::next_pool_tag(),
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
    fn extent(&self, inner: &Inner, slot: usize) -> (usize, usize) {
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

    fn base(inner: &Inner, pid: u32) -> *mut u8 {
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

    fn release_page(&self, inner: &mut Inner, pid: u32) {
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

    /// Does one page's compaction work. The caller holds the pool mutex.
    fn compact_page(&self, inner: &mut Inner, pid: u32) -> PageWork {
        let Some(page) = inner.pages.get(pid as usize) else {
            return PageWork::Nothing;
        };
        if page.run.is_none() || page.headless {
            return PageWork::Nothing;
        }
        if page.objects() == 1 {
            let bud = (0..3).find(|&b| page.chunks[b] != 0).expect("one object");
            let slot = page.owner[bud];
            if inner.entries[slot as usize].readers != 0 {
                return PageWork::Busy;
            }
            let chunks = usize::from(page.chunks[bud]);
            if let Some(dst) = inner.find_page(chunks, Some(pid)) {
                let (src_off, len) = self.extent(inner, slot as usize);
                let dbud = inner.pages[dst as usize]
                    .choose(chunks)
                    .expect("a listed page has room");
                inner.place(dst, dbud, chunks, slot);
                let (dst_off, _) = self.extent(inner, slot as usize);
                // SAFETY: source and destination are `len` bytes inside two
                // different live one-page runs (`dst != pid`); the object has
                // no read holds and we hold the pool mutex, so nobody else
                // touches either range.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        Self::base(inner, pid).add(src_off),
                        Self::base(inner, dst).add(dst_off),
                        len,
                    );
                }
                self.release_page(inner, pid);
                inner.objs_moved += 1;
                inner.pages_compacted += 1;
                return PageWork::Moved(true);
            }
        }
        let page = &inner.pages[pid as usize];
        let [f, m, l] = page.chunks.map(usize::from);
        let sm = usize::from(page.start_middle);
        if m == 0 {
            return PageWork::Nothing;
        }
        let slot = page.owner[MIDDLE];
        let new_start = if f == 0 && l == 0 {
            HEADER_CHUNKS
        } else if f != 0 && l == 0 && sm - (f + HEADER_CHUNKS) >= BIG_CHUNK_GAP {
            f + HEADER_CHUNKS
        } else if l != 0 && f == 0 && TOTAL_CHUNKS - (l + sm + m) >= BIG_CHUNK_GAP {
            TOTAL_CHUNKS - l - m
        } else {
            return PageWork::Nothing;
        };
        if new_start == sm {
            return PageWork::Nothing;
        }
        if inner.entries[slot as usize].readers != 0 {
            return PageWork::Busy;
        }
        let base = Self::base(inner, pid);
        // SAFETY: both ranges are `m` chunks inside the page's one-page run
        // (`new_start + m <= TOTAL_CHUNKS` in every case above); they may
        // overlap, hence `copy`. The object has no read holds and we hold the
        // pool mutex; the destination chunks are free space of this page.
        unsafe {
            std::ptr::copy(
                base.add(sm << self.chunk_shift),
                base.add(new_start << self.chunk_shift),
                m << self.chunk_shift,
            );
        }
        let page = &mut inner.pages[pid as usize];
        if f == 0 && l == 0 {
            // The lone MIDDLE becomes FIRST.
            page.chunks = [m as u8, 0, 0];
            page.start_middle = 0;
            page.owner = [slot, NIL, NIL];
            inner.entries[slot as usize].bud = FIRST as u8;
        } else {
            page.start_middle = new_start as u8;
        }
        inner.relist(pid);
        inner.objs_moved += 1;
        PageWork::Moved(false)
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
    fn relist(&mut self, pid: u32) {
        let want = self.pages[pid as usize].want_list();
        self.lists.relist(pid, want);
    }

    /// A listed page other than `not` that can take `chunks` chunks.
    fn find_page(&self, chunks: usize, not: Option<u32>) -> Option<u32> {
        self.lists.find(chunks, not)
    }

    /// Records entry `slot`'s object as buddy `bud` of page `pid`.
    fn place(&mut self, pid: u32, bud: usize, chunks: usize, slot: u32) {
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

    /// Works through the compaction queue as it is at the call, one page
    /// per hold of the pool mutex (pages queued meanwhile wait for the next
    /// call, so a steady stream of frees cannot keep it running). Pages with
    /// an object being read are queued again.
    fn compact(&self) -> ZCompacted {
        let mut done = ZCompacted::default();
        let mut busy = Vec::new();
        let mut budget = self.inner.lock().queue.len();
        loop {
            let mut inner = self.inner.lock();
            let next = if budget == 0 {
                None
            } else {
                budget -= 1;
                inner.queue.pop_front()
            };
            let Some(pid) = next else {
                inner.queue.extend(busy.iter().copied());
                return done;
            };
            inner.pages[pid as usize].queued = false;
            match self.compact_page(&mut inner, pid) {
                PageWork::Nothing => {}
                PageWork::Busy => {
                    inner.pages[pid as usize].queued = true;
                    busy.push(pid);
                }
                PageWork::Moved(freed) => {
                    done.objs_moved += 1;
                    done.pages_freed += u64::from(freed);
                }
            }
        }
    }

    /// Queued pages holding a single object: each can be emptied if another
    /// page has room.
    fn can_compact(&self) -> u64 {
        let inner = self.inner.lock();
        inner
            .queue
            .iter()
            .filter(|&&pid| {
                let p = &inner.pages[pid as usize];
                p.run.is_some() && !p.headless && p.objects() == 1
            })
            .count() as u64
    }

    fn check_invariants(&self) -> Result<(), String> {
        Z3Fold::check_invariants(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zpool::read_into;

    fn offset_of(pool: &Z3Fold, h: ZHandle) -> usize {
        let p = pool.read_begin(h, 0).unwrap().cast::<u8>().as_ptr() as usize;
        // SAFETY: the read was just begun and is ended once.
        unsafe { pool.read_end(h) };
        p % pool.page_size()
    }

    #[test]
    fn three_buddies_share_a_page() {
        let pool = Z3Fold::new(4096).unwrap();
        let a = pool.malloc(640).unwrap(); // FIRST, 10 chunks
        let b = pool.malloc(640).unwrap(); // LAST
        let c = pool.malloc(640).unwrap(); // MIDDLE, after FIRST
        assert_eq!(pool.total_pages(), 1);
        assert_eq!(offset_of(&pool, a), 64);
        assert_eq!(offset_of(&pool, b), 4096 - 640);
        assert_eq!(offset_of(&pool, c), 64 + 640);
        let d = pool.malloc(64).unwrap();
        assert_eq!(pool.total_pages(), 2, "a page never has a fourth object");
        pool.check_invariants().unwrap();
        for h in [a, b, c, d] {
            pool.free(h).unwrap();
        }
        assert_eq!(pool.total_pages(), 0);
        pool.check_invariants().unwrap();
    }

    #[test]
    fn big_objects_go_headless() {
        let pool = Z3Fold::new(4096).unwrap();
        assert_eq!(pool.headless_threshold(), 3968);
        let a = pool.malloc(3968).unwrap();
        let b = pool.malloc(3969).unwrap();
        let c = pool.malloc(4096).unwrap();
        assert_eq!(pool.total_pages(), 3);
        pool.write(c, &[5; 4096]).unwrap();
        assert_eq!(offset_of(&pool, c), 0);
        let mut buf = vec![0; 4096];
        read_into(&pool, c, &mut buf).unwrap();
        assert_eq!(buf, vec![5; 4096]);
        assert!(matches!(
            pool.malloc(4097),
            Err(ZPoolError::TooLarge { .. })
        ));
        for h in [a, b, c] {
            pool.free(h).unwrap();
        }
        pool.check_invariants().unwrap();
    }

    #[test]
    fn a_lone_middle_moves_to_first_and_keeps_its_bytes() {
        let pool = Z3Fold::new(4096).unwrap();
        let a = pool.malloc(640).unwrap();
        let b = pool.malloc(640).unwrap();
        let c = pool.malloc(1000).unwrap();
        pool.write(c, &[0xc3; 1000]).unwrap();
        // Keep the middle alone with a second page holding nothing that fits.
        pool.free(a).unwrap();
        pool.free(b).unwrap();
        assert_eq!(pool.total_pages(), 1);
        let r = pool.compact();
        // Single object, no other page: it slides to FIRST in place.
        assert_eq!((r.objs_moved, r.pages_freed), (1, 0));
        assert_eq!(offset_of(&pool, c), 64);
        let mut buf = vec![0; 1000];
        read_into(&pool, c, &mut buf).unwrap();
        assert_eq!(buf, vec![0xc3; 1000]);
        pool.check_invariants().unwrap();
        pool.free(c).unwrap();
    }

    #[test]
    fn a_single_object_moves_to_another_page() {
        let pool = Z3Fold::new(4096).unwrap();
        let a = pool.malloc(2000).unwrap(); // page 1 FIRST
        let b = pool.malloc(1900).unwrap(); // page 1 LAST
        let c = pool.malloc(2000).unwrap(); // page 2 FIRST
        let d = pool.malloc(1900).unwrap(); // page 2 LAST
        assert_eq!(pool.total_pages(), 2);
        pool.write(d, &[0xdd; 1900]).unwrap();
        pool.free(b).unwrap(); // page 1 can take 31 chunks
        pool.free(c).unwrap(); // page 2 holds d alone
        let r = pool.compact();
        assert_eq!(r.pages_freed, 1);
        assert_eq!(pool.total_pages(), 1);
        let mut buf = vec![0; 1900];
        read_into(&pool, d, &mut buf).unwrap();
        assert_eq!(buf, vec![0xdd; 1900]);
        assert_eq!(pool.stats().pages_compacted, 1);
        pool.check_invariants().unwrap();
        pool.free(a).unwrap();
        pool.free(d).unwrap();
        assert_eq!(pool.total_pages(), 0);
    }

    #[test]
    fn a_read_object_is_not_moved() {
        let pool = Z3Fold::new(4096).unwrap();
        let a = pool.malloc(640).unwrap();
        let b = pool.malloc(640).unwrap();
        let c = pool.malloc(640).unwrap();
        pool.free(a).unwrap();
        pool.free(b).unwrap();
        let _held = pool.read_begin(c, 10).unwrap();
        assert_eq!(pool.compact().objs_moved, 0);
        assert_eq!(pool.queued_pages(), 1, "queued again");
        // SAFETY: the read begun above is outstanding and ended once.
        unsafe { pool.read_end(c) };
        assert_eq!(pool.compact().objs_moved, 1);
        pool.free(c).unwrap();
        pool.check_invariants().unwrap();
    }

    #[test]
    fn stale_and_foreign_handles_are_refused() {
        let pool = Z3Fold::new(4096).unwrap();
        let other = Z3Fold::new(4096).unwrap();
        let h = pool.malloc(100).unwrap();
        assert_eq!(other.free(h).unwrap_err(), FOREIGN);
        pool.free(h).unwrap();
        assert_eq!(pool.free(h).unwrap_err(), FREED);
        let h2 = pool.malloc(100).unwrap();
        assert_eq!(pool.write(h, b"x").unwrap_err(), STALE);
        pool.free(h2).unwrap();
        pool.check_invariants().unwrap();
    }
}
