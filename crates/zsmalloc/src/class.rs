//! One physical size class: its zspages, fullness lists, handle table and
//! counters.
//!
//! Everything that changes which zspage or slot an object occupies happens
//! here, with the class lock held (the `&mut ClassInner` every method takes
//! is the proof). The lock-free tables (`handles`, `bases`) are read by
//! object accessors without the lock; this module is the only writer of their
//! locations and publishes a zspage's base before any entry points into it.
//!
//! It does not lock objects (callers hold the object exclusive where a live
//! object's bytes are touched) and does not keep pool-wide totals (it returns
//! page deltas to the pool). In a framed pool its zspages take and give back
//! frames of the pool's [`FrameArena`] (`frames.rs` decides which frame);
//! the class counts frames, the deltas it returns are system pages.

use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use ilist::Lists;
use pages::{PageSource, PagesError, Run};

use crate::config::Mode;
use crate::frames::{FrameArena, FrameId, FrameOwner, FRAME_SIZE, NO_FRAME};
use crate::fullness::{FullnessScheme, NR_GROUPS};
use crate::geometry::SizeClass;
use crate::handle::{next_generation, Entry, EntryCell, MAX_SLOTS, MAX_ZSPAGES, NO_SLOT};
use crate::segvec::SegVec;
use crate::zspage::{
    FramedMemory, ObjectMemory, SlotMemory, ZsPageBase, ZsPageMeta, END_OF_LIST, NO_OWNER,
};

/// Where [`Class::list_push`] puts a zspage in its fullness list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListInsertion {
    /// At the head (the kernel since 6.4).
    Head,
    /// At the head, or second when it has fewer objects in use than the
    /// head, to keep the fuller one first (the kernel before 6.4, which ran
    /// the drain-source compaction).
    FullerFirst,
}

/// A class cannot take another object.
#[derive(Debug)]
pub(crate) enum ClassFull {
    /// No handle slot or zspage id is left.
    Table,
    /// The page source refused.
    Pages(PagesError),
}

/// How long compaction, having released a class lock for a waiter, waits
/// for it to take the lock before carrying on (a waiter that is not
/// running then gets it at compaction's next pause).
pub(crate) const HANDOFF_LIMIT: std::time::Duration = std::time::Duration::from_micros(50);

/// Busy checks before compaction, waiting for a waiter to take the lock,
/// yields its CPU instead: a waiter still spinning in the lock takes it
/// within a few hundred nanoseconds.
const HANDOFF_SPINS: u32 = 256;

/// The class-locked state.
pub(crate) struct ClassInner {
    pub(crate) metas: Vec<ZsPageMeta>,
    /// Ids of freed zspages, reused first.
    pub(crate) vacant: Vec<u32>,
    /// The fullness lists, one per group, linked through `metas`.
    pub(crate) lists: Lists<NR_GROUPS>,
    /// Zspages in each fullness list.
    pub(crate) counts: [u32; NR_GROUPS],
    /// Head of the free handle-slot list.
    pub(crate) handle_free: u32,
    /// Live zspages.
    pub(crate) zspages: u32,
    /// Live objects.
    pub(crate) objs_used: u64,
    /// Pages counted for this class (sum of `populated`).
    pub(crate) pages: u64,
    /// Pages freed by compaction.
    pub(crate) pages_compacted: u64,
    /// Objects moved by compaction.
    pub(crate) objs_moved: u64,
    /// Framed pools: the frame of each zspage's frame entry (zspage id
    /// times pages per zspage, plus the frame's index), [`NO_FRAME`] above
    /// its populated frames.
    pub(crate) frame_ids: Vec<FrameId>,
}

/// One physical class.
pub(crate) struct Class {
    pub(crate) info: SizeClass,
    pub(crate) page_size: u32,
    /// Bytes before the caller's data in each object (8 for the kernel's
    /// handle header, 0 for huge classes and default mode).
    pub(crate) header: u32,
    /// The pool's mode: kernel-compat keeps free slots in the kernel's
    /// in-object free list, default mode in a bitmap.
    pub(crate) mode: Mode,
    pub(crate) scheme: FullnessScheme,
    /// Where a zspage goes in its list (see [`Self::list_push`]).
    pub(crate) insertion: ListInsertion,
    pub(crate) handles: SegVec<EntryCell>,
    pub(crate) bases: SegVec<ZsPageBase>,
    /// The class's number in the pool (frames name their owner by it).
    pub(crate) id: u32,
    /// Framed pools: the arena the zspages' frames come from (`page_size`
    /// is then [`FRAME_SIZE`]), and the first byte of each zspage's frames,
    /// published as `frame_ids` (null for none), read without the lock.
    pub(crate) frames: Option<Arc<FrameArena>>,
    pub(crate) frame_ptrs: SegVec<AtomicPtr<u8>>,
    inner: Mutex<ClassInner>,
    /// Threads waiting for the lock after finding it taken (the kernel's
    /// `spin_is_contended`): compaction lets them in after the object it is
    /// moving (the kernel's algorithms: after the source zspage).
    waiters: AtomicU32,
    /// Times a waiter got the lock (wrapping): compaction, having let
    /// waiters in, waits for this to change before it locks again.
    granted: AtomicU32,
}

impl Class {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: u32,
        info: SizeClass,
        page_size: u32,
        header: u32,
        mode: Mode,
        scheme: FullnessScheme,
        insertion: ListInsertion,
        frames: Option<Arc<FrameArena>>,
    ) -> Class {
        debug_assert!(frames.is_none() || (page_size == FRAME_SIZE && mode == Mode::Default));
        Class {
            info,
            page_size,
            header,
            mode,
            scheme,
            insertion,
            handles: SegVec::new(),
            bases: SegVec::new(),
            id,
            frames,
            frame_ptrs: SegVec::new(),
            waiters: AtomicU32::new(0),
            granted: AtomicU32::new(0),
            inner: Mutex::new(ClassInner {
                metas: Vec::new(),
                vacant: Vec::new(),
                lists: Lists::new(),
                counts: [0; NR_GROUPS],
                handle_free: NO_SLOT,
                zspages: 0,
                objs_used: 0,
                pages: 0,
                pages_compacted: 0,
                objs_moved: 0,
                frame_ids: Vec::new(),
            }),
        }
    }

    /// True if free slots are kept in the kernel's in-object free list
    /// (kernel-compat mode), false if in a bitmap (default mode).
    pub(crate) fn in_object_list(&self) -> bool {
        self.mode == Mode::KernelCompat
    }

    /// Takes the class lock. No class-locked update can panic half-way
    /// without a bug, so a poisoned lock is taken as is (the invariant checker
    /// would report the damage).
    pub(crate) fn lock(&self) -> MutexGuard<'_, ClassInner> {
        match self.inner.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                // Only the slow path counts itself: an uncontended lock
                // costs what it did.
                self.waiters.fetch_add(1, Ordering::Relaxed);
                let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
                self.granted.fetch_add(1, Ordering::Release);
                self.waiters.fetch_sub(1, Ordering::Relaxed);
                guard
            }
        }
    }

    /// True if a thread is waiting for the class lock.
    pub(crate) fn contended(&self) -> bool {
        self.waiters.load(Ordering::Relaxed) > 0
    }

    /// How many waiters have got the lock so far (wrapping); read before
    /// unlocking for [`Class::let_waiters_in`].
    pub(crate) fn grants(&self) -> u32 {
        self.granted.load(Ordering::Acquire)
    }

    /// Called by compaction with the lock released (it was held when
    /// `before` was read from [`Class::grants`]) because a thread waits for
    /// it: returns once a waiter has taken the lock, nobody waits any more,
    /// or [`HANDOFF_LIMIT`] has passed. Without this the compactor, still
    /// running, would usually take the lock back before the waiter, woken
    /// from its sleep, got to it, and the waiter would sleep again.
    pub(crate) fn let_waiters_in(&self, before: u32) {
        let start = std::time::Instant::now();
        let mut spins = 0u32;
        while self.contended() && self.grants() == before {
            if spins < HANDOFF_SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                if start.elapsed() >= HANDOFF_LIMIT {
                    break;
                }
                std::thread::yield_now();
            }
        }
    }

    /// Counts (or uncounts) a waiter that never comes: tests use it to make
    /// compaction pause at every zspage without depending on scheduling.
    #[cfg(test)]
    pub(crate) fn fake_waiter(&self, on: bool) {
        if on {
            self.waiters.fetch_add(1, Ordering::Relaxed);
        } else {
            self.waiters.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Bytes a caller may store in one object of this class.
    pub(crate) fn capacity(&self) -> u32 {
        self.info.size - self.header
    }

    pub(crate) fn objs(&self) -> u32 {
        self.info.objs_per_zspage
    }

    /// The memory of a live zspage of either kind (class-locked callers).
    pub(crate) fn slot_memory(&self, inner: &ClassInner, zid: u32) -> SlotMemory<'_> {
        match self.frames {
            Some(_) => SlotMemory::Frames(self.framed_memory(zid)),
            None => SlotMemory::Run(self.memory(inner, zid)),
        }
    }

    /// The frames of zspage `zid` of a framed class.
    pub(crate) fn framed_memory(&self, zid: u32) -> FramedMemory<'_> {
        FramedMemory {
            frames: &self.frame_ptrs,
            first: zid as usize * self.info.pages_per_zspage as usize,
            size: self.info.size,
        }
    }

    /// Object memory of a live zspage with a run (not framed).
    pub(crate) fn memory(&self, inner: &ClassInner, zid: u32) -> ObjectMemory {
        let run = inner.metas[zid as usize].run.as_ref().expect("live zspage");
        ObjectMemory {
            base: run.as_ptr(),
            size: self.info.size,
        }
    }

    /// Object memory reached without the class lock, for a holder of one of
    /// the zspage's objects.
    pub(crate) fn memory_unlocked(&self, zid: u32) -> SlotMemory<'_> {
        if self.frames.is_some() {
            return SlotMemory::Frames(self.framed_memory(zid));
        }
        let base = self
            .bases
            .get(zid as usize)
            .expect("an entry points only at published zspages")
            .load(Ordering::Acquire);
        debug_assert!(!base.is_null());
        SlotMemory::Run(ObjectMemory {
            base,
            size: self.info.size,
        })
    }

    // ---- fullness lists -------------------------------------------------

    fn list_remove(inner: &mut ClassInner, zid: u32) {
        let group = inner.metas[zid as usize].group as usize;
        inner.lists.remove(&mut inner.metas, group, zid);
        inner.counts[group] -= 1;
    }

    /// Inserts at the head of `group`'s list, as the kernel's `insert_zspage`.
    /// Before 6.4 the kernel put a zspage with fewer objects in use than the
    /// head second instead, to keep the fuller one first
    /// ([`ListInsertion::FullerFirst`]; 6.4's fine-grained fullness series
    /// removed it).
    fn list_push(&self, inner: &mut ClassInner, zid: u32, group: u8) {
        let after = inner.lists.head(group as usize).filter(|&head| {
            self.insertion == ListInsertion::FullerFirst
                && inner.metas[zid as usize].inuse < inner.metas[head as usize].inuse
        });
        inner
            .lists
            .insert(&mut inner.metas, group as usize, after, zid);
        inner.metas[zid as usize].group = group;
        inner.counts[group as usize] += 1;
    }

    /// Moves a zspage to the list its in-use count calls for, if it changed.
    /// An isolated zspage stays out of the lists until [`Self::putback`].
    pub(crate) fn fix_group(&self, inner: &mut ClassInner, zid: u32) {
        let m = &inner.metas[zid as usize];
        if m.isolated {
            return;
        }
        let group = self.scheme.group(m.inuse, self.objs());
        if group != m.group {
            Self::list_remove(inner, zid);
            self.list_push(inner, zid, group);
        }
    }

    /// Takes a zspage out of its fullness list (compaction's source or
    /// destination), as the kernel's `isolate_*_zspage`.
    pub(crate) fn isolate(&self, inner: &mut ClassInner, zid: u32) {
        debug_assert!(!inner.metas[zid as usize].isolated);
        Self::list_remove(inner, zid);
        inner.metas[zid as usize].isolated = true;
    }

    /// Puts an isolated zspage back at the head of the list of its group.
    pub(crate) fn putback(&self, inner: &mut ClassInner, zid: u32) {
        let m = &mut inner.metas[zid as usize];
        debug_assert!(m.isolated);
        m.isolated = false;
        let group = self.scheme.group(m.inuse, self.objs());
        self.list_push(inner, zid, group);
    }

    /// First zspage of the fullest non-full group.
    pub(crate) fn find_zspage(&self, inner: &ClassInner) -> Option<u32> {
        self.scheme
            .alloc_order()
            .iter()
            .find_map(|&g| inner.lists.head(g as usize))
    }

    // ---- zspages --------------------------------------------------------

    /// A new empty zspage (not yet in any list). Returns its id and the pages
    /// counted for it.
    pub(crate) fn new_zspage(
        &self,
        inner: &mut ClassInner,
        pages: &PageSource,
    ) -> Result<(u32, u32), ClassFull> {
        let zid = match inner.vacant.last() {
            Some(&z) => z,
            None => {
                if inner.metas.len() as u32 >= MAX_ZSPAGES {
                    return Err(ClassFull::Table);
                }
                inner.metas.len() as u32
            }
        };
        // kernel-compat writes a link into every slot at once, so a cached
        // run (stale bytes, resident pages) serves it as well as a fresh one
        // and saves the page faults, and a fresh one is populated ahead.
        // Default mode counts only the pages up to its highest object: it
        // takes a cached run with all its pages pending and reclaims them as
        // objects reach them (no fault for those), the rest going back with
        // the source's next batch; or a fresh run none of whose pages is
        // resident yet.
        // A framed zspage has no run: it takes frames as objects reach them.
        let run = if self.frames.is_some() {
            None
        } else if self.in_object_list() {
            Some(
                pages
                    .alloc(self.info.pages_per_zspage)
                    .map_err(ClassFull::Pages)?,
            )
        } else {
            Some(
                pages
                    .alloc_pending(self.info.pages_per_zspage)
                    .map_err(ClassFull::Pages)?,
            )
        };
        if zid as usize == inner.metas.len() {
            // Grow by a quarter rather than doubling: the descriptors of a
            // large pool are megabytes, and each abandoned buffer is memory
            // the C allocator may keep. Start with 4: most classes of a
            // large-page pool hold 1-3 zspages (16 at a time cost 206 KiB
            // over 181 classes of a 32 KiB-page server).
            if inner.metas.len() == inner.metas.capacity() {
                let more = (inner.metas.len() / 4).max(4);
                inner.metas.reserve_exact(more);
            }
            inner.metas.push(ZsPageMeta::vacant());
            // The base slot may exist from before the class last emptied.
            if zid as usize >= self.bases.len() {
                let published = self.bases.push_default();
                debug_assert_eq!(published, Some(zid as usize));
            }
            if self.frames.is_some() {
                let per = self.info.pages_per_zspage as usize;
                // So may the frame entries (null: no frame).
                while self.frame_ptrs.len() < (zid as usize + 1) * per {
                    if self.frame_ptrs.push_default().is_none() {
                        inner.metas.pop();
                        return Err(ClassFull::Table);
                    }
                }
                inner.frame_ids.resize((zid as usize + 1) * per, NO_FRAME);
            }
        } else {
            inner.vacant.pop();
        }
        let objs = self.objs();
        let base = run.as_ref().map_or(std::ptr::null_mut(), Run::as_ptr);
        let mem = ObjectMemory {
            base,
            size: self.info.size,
        };
        let counted = if self.in_object_list() {
            // The kernel links every slot at creation, touching every page.
            for i in 0..objs {
                let next = if i + 1 < objs { i + 1 } else { END_OF_LIST };
                // SAFETY: the run is new, holds `objs` slots of `size` bytes and
                // no handle points into it yet, so nobody else can touch it.
                unsafe { mem.write_word(i, u64::from(next) << 1) };
            }
            self.info.pages_per_zspage
        } else {
            0
        };
        let m = &mut inner.metas[zid as usize];
        *m = ZsPageMeta::vacant();
        m.tail_pending = !self.in_object_list() && run.is_some();
        m.run = run;
        m.free_head = 0;
        m.set_populated(counted);
        // Default mode: a reused run's pages are pending until reclaimed.
        // Default mode's owner array and bitmap grow as objects are placed;
        // kernel-compat's huge classes get their owner array whole.
        if self.in_object_list() && self.header == 0 {
            m.give_all_owners(objs);
        }
        self.bases
            .get(zid as usize)
            .expect("published above")
            .store(base, Ordering::Release);
        inner.zspages += 1;
        inner.pages += u64::from(counted);
        // Listed as empty until its first object is placed.
        self.list_push(inner, zid, 0);
        Ok((zid, counted))
    }

    /// Gives an empty zspage's pages (or frames) back. Returns the change in
    /// the pool's pages (negative).
    pub(crate) fn release_zspage(
        &self,
        inner: &mut ClassInner,
        zid: u32,
        pages: &PageSource,
    ) -> i64 {
        debug_assert_eq!(inner.metas[zid as usize].inuse, 0);
        if !inner.metas[zid as usize].isolated {
            Self::list_remove(inner, zid);
        }
        self.bases
            .get(zid as usize)
            .expect("live zspage")
            .store(std::ptr::null_mut(), Ordering::Release);
        let counted = inner.metas[zid as usize].populated();
        let pool_delta = match &self.frames {
            Some(_) => self.drop_frames(inner, zid, 0, pages),
            None => -i64::from(counted),
        };
        let m = &mut inner.metas[zid as usize];
        let run = m.run.take();
        *m = ZsPageMeta::vacant();
        if let Some(run) = run {
            // Only the counted pages may be resident: default mode discarded
            // the rest as its objects went.
            pages.free_resident(run, counted);
        }
        inner.vacant.push(zid);
        inner.zspages -= 1;
        inner.pages -= u64::from(counted);
        if inner.zspages == 0 {
            // An empty class gives its descriptors back. The lock-free tables
            // of bases and frames keep their (null) slots: readers may be
            // looking at them.
            inner.metas = Vec::new();
            inner.vacant = Vec::new();
            inner.frame_ids = Vec::new();
        }
        pool_delta
    }

    /// Framed zspage `zid`: gives back its frames from `keep` up to its
    /// populated count (which the caller then lowers to `keep`). Returns the
    /// change in the pool's system pages.
    fn drop_frames(&self, inner: &mut ClassInner, zid: u32, keep: u32, pages: &PageSource) -> i64 {
        let populated = inner.metas[zid as usize].populated();
        self.give_back_frames(inner, zid, keep..populated, pages)
    }

    /// Framed zspage `zid`: unpublishes its frames `frames` and gives them
    /// back to the arena. Returns the change in the pool's system pages.
    fn give_back_frames(
        &self,
        inner: &mut ClassInner,
        zid: u32,
        frames: std::ops::Range<u32>,
        pages: &PageSource,
    ) -> i64 {
        let arena = self.frames.as_ref().expect("a framed class");
        let first = zid as usize * self.info.pages_per_zspage as usize;
        let mut delta = 0;
        for f in frames {
            let at = first + f as usize;
            self.frame_ptrs
                .get(at)
                .expect("published with the zspage")
                .store(std::ptr::null_mut(), Ordering::Release);
            let id = std::mem::replace(&mut inner.frame_ids[at], NO_FRAME);
            delta += arena.give_back(pages, id);
        }
        delta
    }

    /// Framed zspage `zid`: takes frames for it up to `need`, above its
    /// populated count (which the caller then raises to `need`). Returns the
    /// change in the pool's system pages; on failure gives back what it took.
    fn take_frames(
        &self,
        inner: &mut ClassInner,
        zid: u32,
        need: u32,
        pages: &PageSource,
    ) -> Result<i64, ClassFull> {
        let arena = self.frames.as_ref().expect("a framed class");
        let first = zid as usize * self.info.pages_per_zspage as usize;
        let from = inner.metas[zid as usize].populated();
        let mut delta = 0;
        for f in from..need {
            let owner = FrameOwner {
                class: self.id,
                zspage: zid,
                index: f,
            };
            match arena.take(pages, owner) {
                Ok((id, ptr, added)) => {
                    let at = first + f as usize;
                    inner.frame_ids[at] = id;
                    self.frame_ptrs
                        .get(at)
                        .expect("published with the zspage")
                        .store(ptr, Ordering::Release);
                    delta += added;
                }
                Err(e) => {
                    // Back to where it was: the frames taken so far go.
                    self.give_back_frames(inner, zid, from..f, pages);
                    return Err(ClassFull::Pages(e));
                }
            }
        }
        Ok(delta)
    }

    /// Framed zspage `zid`: moves its frame `f` to `id` at `ptr` (taken from
    /// the arena by the caller, who copied the frame's bytes there holding
    /// every object on it exclusive). Returns the frame it had.
    pub(crate) fn swap_frame(
        &self,
        inner: &mut ClassInner,
        zid: u32,
        f: u32,
        id: FrameId,
        ptr: *mut u8,
    ) -> FrameId {
        let at = zid as usize * self.info.pages_per_zspage as usize + f as usize;
        self.frame_ptrs
            .get(at)
            .expect("published with the zspage")
            .store(ptr, Ordering::Release);
        std::mem::replace(&mut inner.frame_ids[at], id)
    }

    // ---- objects ----------------------------------------------------------

    /// Takes a free slot of `zid` for the object of handle slot `owner`.
    /// Returns the slot and the change in the pool's pages. Fails, changing
    /// nothing, only in a framed pool, when a frame the object needs cannot
    /// be had.
    pub(crate) fn place(
        &self,
        inner: &mut ClassInner,
        zid: u32,
        owner: u32,
        pages: &PageSource,
    ) -> Result<(u32, i64), ClassFull> {
        let objs = self.objs();
        let header = self.header;
        let page_size = u64::from(self.page_size);
        let size = u64::from(self.info.size);
        debug_assert!(inner.metas[zid as usize].inuse < objs);
        let mut delta = 0i64;
        let mut pool_delta = 0i64;
        let idx = if self.in_object_list() {
            let mem = self.memory(inner, zid);
            let m = &mut inner.metas[zid as usize];
            let idx = m.free_head;
            // SAFETY: `idx` heads the free list of a live zspage, so it is a
            // free slot below `objs`; its link word is read under the class
            // lock and no one else touches free slots.
            let link = unsafe { mem.read_word(idx) };
            m.free_head = (link >> 1) as u32;
            if header > 0 {
                // SAFETY: the slot was free and becomes this owner's; no
                // reader can reach it before the entry is stored.
                unsafe { mem.write_word(idx, u64::from(owner) << 1 | 1) };
            }
            idx
        } else {
            let idx = inner.metas[zid as usize]
                .lowest_free(objs)
                .expect("a zspage with room has a free slot");
            let need = ((u64::from(idx) + 1) * size).div_ceil(page_size) as u32;
            let populated = inner.metas[zid as usize].populated();
            if need > populated && self.frames.is_some() {
                // Fallible, so first: nothing is changed if it fails.
                pool_delta = self.take_frames(inner, zid, need, pages)?;
            }
            let m = &mut inner.metas[zid as usize];
            if idx >= m.slots() {
                // The lowest free slot is the first past the owner array.
                m.grow(idx, objs);
            }
            m.set_live(idx, true);
            if need > populated {
                if m.tail_pending {
                    // Take back pages given up but perhaps not yet released
                    // before the caller writes the object into them.
                    let run = m.run.as_ref().expect("live zspage");
                    m.tail_pending = pages.reclaim(run, need);
                }
                delta = i64::from(need - populated);
                m.set_populated(need);
            }
            idx
        };
        let m = &mut inner.metas[zid as usize];
        if header == 0 {
            m.set_owner(idx, owner);
        }
        m.inuse += 1;
        inner.objs_used += 1;
        inner.pages = inner.pages.wrapping_add_signed(delta);
        self.fix_group(inner, zid);
        if self.frames.is_none() {
            pool_delta = delta;
        }
        Ok((idx, pool_delta))
    }

    /// Returns slot `idx` of `zid` to the free slots. The caller holds the
    /// object exclusive (or it was moved away). Returns the change in the
    /// pool's pages, including the zspage's release when it became empty.
    pub(crate) fn unplace(
        &self,
        inner: &mut ClassInner,
        zid: u32,
        idx: u32,
        pages: &PageSource,
    ) -> i64 {
        let page_size = u64::from(self.page_size);
        let size = u64::from(self.info.size);
        if self.in_object_list() {
            let mem = self.memory(inner, zid);
            let m = &mut inner.metas[zid as usize];
            // SAFETY: slot `idx` is live and held exclusive by the caller (or
            // its object has been copied away), so no one reads it; writing
            // its first word makes it the head of the free list.
            unsafe { mem.write_word(idx, u64::from(m.free_head) << 1) };
            m.free_head = idx;
        } else {
            inner.metas[zid as usize].set_live(idx, false);
        }
        let m = &mut inner.metas[zid as usize];
        if self.header == 0 {
            m.set_owner(idx, NO_OWNER);
        }
        m.inuse -= 1;
        inner.objs_used -= 1;
        if m.inuse == 0 {
            return self.release_zspage(inner, zid, pages);
        }
        let mut delta = 0i64;
        let mut pool_delta = 0i64;
        if !self.in_object_list() {
            // Give back the pages above the highest live object: with the
            // page source's next batch (one TLB shootdown for many), or, in
            // a framed pool, the frames to the arena.
            let need = (u64::from(m.live_end()) * size).div_ceil(page_size) as u32;
            let populated = m.populated();
            if need < populated {
                if self.frames.is_some() {
                    pool_delta = self.drop_frames(inner, zid, need, pages);
                } else {
                    let run = m.run.as_ref().expect("live zspage");
                    pages.discard_later(run, need, populated - need);
                    m.tail_pending = true;
                }
                delta = -i64::from(populated - need);
                inner.metas[zid as usize].set_populated(need);
            }
        }
        inner.pages = inner.pages.wrapping_add_signed(delta);
        self.fix_group(inner, zid);
        if self.frames.is_none() {
            pool_delta = delta;
        }
        pool_delta
    }

    /// True if slot `idx` of `zid` holds a live object (the kernel tells by the
    /// tag bit of the first word; huge and default-mode slots by the owner).
    pub(crate) fn is_live(&self, inner: &ClassInner, zid: u32, idx: u32) -> bool {
        if self.header == 0 {
            inner.metas[zid as usize].owner(idx) != NO_OWNER
        } else {
            // SAFETY: slot `idx` of a live zspage; its first word is a header
            // or a free link, both written only under the class lock held here.
            unsafe { self.memory(inner, zid).read_word(idx) & 1 == 1 }
        }
    }

    /// One past the highest slot of `zid` that may be live: the object count
    /// in kernel-compat mode, the slots its owner array covers in default
    /// mode. Loops over a zspage's slots stop there.
    pub(crate) fn slot_end(&self, inner: &ClassInner, zid: u32) -> u32 {
        if self.in_object_list() {
            self.objs()
        } else {
            inner.metas[zid as usize].slots()
        }
    }

    /// The handle slot owning live slot `idx` of `zid`.
    pub(crate) fn owner(&self, inner: &ClassInner, zid: u32, idx: u32) -> u32 {
        if self.header == 0 {
            inner.metas[zid as usize].owner(idx)
        } else {
            // SAFETY: slot `idx` is live; its header word is written only at
            // placement, under the class lock we hold.
            let word = unsafe { self.memory(inner, zid).read_word(idx) };
            (word >> 1) as u32
        }
    }

    // ---- handle slots -----------------------------------------------------

    /// A free handle slot, growing the table if needed. Not yet linked to an
    /// object: the caller stores its entry.
    pub(crate) fn take_handle_slot(&self, inner: &mut ClassInner) -> Result<(u32, u32), ClassFull> {
        if inner.handle_free != NO_SLOT {
            let slot = inner.handle_free;
            match self.handles.get(slot as usize).expect("listed slot").load() {
                Entry::Free { generation, next } => {
                    inner.handle_free = next;
                    return Ok((slot, generation));
                }
                Entry::Allocated { .. } => unreachable!("the free list holds free slots only"),
            }
        }
        if self.handles.len() as u32 > MAX_SLOTS {
            return Err(ClassFull::Table);
        }
        let slot = self.handles.push_default().ok_or(ClassFull::Table)? as u32;
        Ok((slot, 0))
    }

    /// Puts back a slot taken by [`Self::take_handle_slot`] and never used.
    pub(crate) fn return_handle_slot(&self, inner: &mut ClassInner, slot: u32, generation: u32) {
        self.handles
            .get(slot as usize)
            .expect("taken slot")
            .store(Entry::Free {
                generation,
                next: inner.handle_free,
            });
        inner.handle_free = slot;
    }

    /// The free entry a freed object's handle slot gets: the next generation,
    /// linked at the head of the free list.
    pub(crate) fn freed_entry(inner: &mut ClassInner, slot: u32, generation: u32) -> Entry {
        let e = Entry::Free {
            generation: next_generation(generation),
            next: inner.handle_free,
        };
        inner.handle_free = slot;
        e
    }
}

#[cfg(test)]
mod tests {
    use crate::handle::Entry;
    use crate::{Handle, Pool, PoolConfig};

    /// Bytes of the `i`th test object: its number, then a pattern of it.
    fn content(i: u32, len: usize) -> Vec<u8> {
        let mut v: Vec<u8> = (0..len as u32).map(|k| (i * 31 + k * 7) as u8).collect();
        v[..4].copy_from_slice(&i.to_le_bytes());
        v
    }

    fn put(pool: &Pool, i: u32, len: usize) -> Handle {
        let h = pool.malloc(len).unwrap();
        pool.write(h, &content(i, len)).unwrap();
        h
    }

    fn verify(pool: &Pool, objs: &[(u32, Handle)], len: usize) {
        for &(i, h) in objs {
            assert_eq!(
                &*pool.read(h, len).unwrap(),
                &content(i, len)[..],
                "object {i}"
            );
        }
        pool.check_invariants().unwrap();
    }

    /// (zspage, slot) of a handle's object.
    fn loc(pool: &Pool, h: Handle) -> (u32, u32) {
        let cell = pool.classes[h.class()]
            .handles
            .get(h.slot().unwrap() as usize);
        match cell.unwrap().load() {
            Entry::Allocated { zspage, obj, .. } => (zspage, obj),
            Entry::Free { .. } => panic!("freed"),
        }
    }

    /// (slots covered, table elements) of zspage `zid` of `h`'s class.
    fn table(pool: &Pool, h: Handle, zid: u32) -> (u32, usize) {
        let inner = pool.classes[h.class()].lock();
        let m = &inner.metas[zid as usize];
        (m.slots(), m.table_len())
    }

    /// A 48-byte class: 256 slots in a zspage of three 4 KiB pages, the most
    /// a default-mode zspage has (on larger pages zspages are made of 4 KiB
    /// frames, so the same).
    const LEN: usize = 40;

    #[test]
    fn few_objects_of_a_small_class_keep_a_small_owner_table() {
        let pool = Pool::new(PoolConfig::default_mode(4096)).unwrap();
        let live: Vec<_> = (0..12).map(|i| (i, put(&pool, i, LEN))).collect();
        let h = live[0].1;
        let objs = pool.classes[h.class()].objs();
        assert_eq!(objs, 256);
        assert!(live.iter().all(|&(_, h)| loc(&pool, h).0 == 0));
        // 16 owners and one bitmap word, not `objs` of each.
        assert_eq!(table(&pool, h, 0), (16, 17));
        // Freeing does not shrink it; placement refills the holes first.
        let (gone, mut live): (Vec<_>, Vec<_>) = live.into_iter().partition(|&(i, _)| i % 3 == 0);
        for (_, h) in gone {
            pool.free(h).unwrap();
        }
        assert_eq!(table(&pool, h, 0), (16, 17));
        live.extend((100..104).map(|i| (i, put(&pool, i, LEN))));
        assert_eq!(table(&pool, h, 0), (16, 17));
        assert!(live.iter().all(|&(_, h)| loc(&pool, h).1 < 12));
        verify(&pool, &live, LEN);
        // One past the table: it doubles.
        live.extend((200..206).map(|i| (i, put(&pool, i, LEN))));
        assert_eq!(table(&pool, h, 0), (32, 33));
        verify(&pool, &live, LEN);
    }

    #[test]
    fn kernel_compat_keeps_whole_owner_arrays_for_huge_classes_only() {
        let pool = Pool::new(PoolConfig::kernel_compat()).unwrap();
        let small = pool.malloc(100).unwrap();
        let huge = pool.malloc(4000).unwrap();
        assert_eq!(table(&pool, small, 0), (0, 0), "the header names the owner");
        let objs = pool.classes[huge.class()].objs();
        assert_eq!(table(&pool, huge, 0), (objs, objs as usize), "no bitmap");
        pool.check_invariants().unwrap();
    }

    #[test]
    fn compaction_moves_objects_into_partly_grown_owner_tables() {
        let pool = Pool::new(PoolConfig::default_mode(4096)).unwrap();
        let first = put(&pool, 0, LEN);
        let objs = pool.classes[first.class()].objs();
        assert_eq!(objs, 256);
        // Zspage A full (its table grown to `objs`), B holding 40 (64 slots).
        let mut all = vec![(0, first)];
        all.extend((1..objs + 40).map(|i| (i, put(&pool, i, LEN))));
        let (a, b) = (loc(&pool, all[0].1).0, loc(&pool, all[objs as usize].1).0);
        assert_ne!(a, b);
        assert_eq!(table(&pool, first, a).0, objs);
        assert_eq!(table(&pool, first, b).0, 64);
        // Holes at B's slots 5..8; A keeps 30 objects spread to its last slot.
        let keep_a: Vec<u32> = (0..30).map(|k| objs - 1 - k * (objs / 31)).collect();
        let mut live = Vec::new();
        for (i, h) in all {
            let (z, slot) = loc(&pool, h);
            let keep = if z == a {
                keep_a.contains(&slot)
            } else {
                !(5..8).contains(&slot)
            };
            if keep {
                live.push((i, h));
            } else {
                pool.free(h).unwrap();
            }
        }
        assert_eq!(live.len(), 30 + 37);
        verify(&pool, &live, LEN);

        // A (30 objects) empties into B (37): 3 into its holes, 27 above its
        // table's 64 slots, which grows to 128 on the way.
        let r = pool.compact();
        assert_eq!((r.objs_moved, r.objs_moved_trim), (30, 0), "{r:?}");
        assert!(live.iter().all(|&(_, h)| loc(&pool, h).0 == b));
        assert_eq!(pool.classes[first.class()].lock().zspages, 1);
        assert_eq!(table(&pool, first, b).0, 128);
        let slots: Vec<u32> = live.iter().map(|&(_, h)| loc(&pool, h).1).collect();
        assert_eq!(slots.iter().max(), Some(&66), "packed lowest first");
        verify(&pool, &live, LEN);

        // Refill B past 128 slots, then free its low slots: the trim packs
        // its highest objects down into them.
        live.extend((1_000_000..1_000_150).map(|i| (i, put(&pool, i, LEN))));
        assert_eq!(table(&pool, first, b).0, objs, "capped at the slots");
        verify(&pool, &live, LEN);
        let (gone, live): (Vec<_>, Vec<_>) = live
            .into_iter()
            .partition(|&(_, h)| loc(&pool, h).1 % 4 == 1);
        for (_, h) in gone {
            pool.free(h).unwrap();
        }
        let high = live.iter().map(|&(_, h)| loc(&pool, h).1).max().unwrap();
        let r = pool.compact();
        assert!(r.objs_moved_trim > 0, "{r:?}");
        let packed = live.iter().map(|&(_, h)| loc(&pool, h).1).max().unwrap();
        assert_eq!(packed as usize, live.len() - 1, "packed from {high}");
        assert_eq!(table(&pool, first, b).0, objs, "kept, not shrunk");
        verify(&pool, &live, LEN);
    }
}
