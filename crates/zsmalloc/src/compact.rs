//! Compaction: moving objects out of sparse zspages so whole zspages can be
//! freed, and the automatic policy that triggers it.
//!
//! Three algorithms, one per generation:
//! - [`CompactionAlgo::DrainSource`] (kernel before 6.4): take a source from
//!   the emptiest group, then destinations from the fullest, one after
//!   another, until the source is empty; stop when no destination is left.
//! - [`CompactionAlgo::KeepDestination`] (kernel 6.4 and later, from the
//!   fine-grained fullness series): keep one destination
//!   (fullest non-full group) across sources (emptiest group); move until
//!   the destination is full or the source empty; stop when
//!   `zs_can_compact` says no zspage can be freed.
//! - [`CompactionAlgo::Optimal`] (zmem's default mode): empty exactly the
//!   `floor(free slots / objs)` zspages with the fewest live objects into the
//!   others, fullest first. That moves the least possible number of objects
//!   to free every freeable zspage ([`Pool::compaction_lower_bound`]). In
//!   default mode a *trim* follows: the holes left in the class are gathered
//!   at the end of one zspage, whose pages there go back to the OS (default
//!   mode counts only the pages up to a zspage's highest live object). It
//!   costs fewer than two zspages' worth of moves per class and removes the
//!   partly used zspages that dominate the kernel's overhead after frees.
//!
//! Moving an object: with the class lock held, *try* the object's exclusive
//! hold (a reader or writer keeps its object, and thus its zspage, in place;
//! compaction skips it and never waits), copy the slot, point the handle
//! entry at the copy (one atomic store that also drops the hold), free the
//! old slot. Only one compaction runs per pool at a time.
//!
//! Letting others in: compaction holds the class lock, so a `malloc` or
//! `free` in the class waits for it. It checks whether a thread found the
//! lock taken: the kernel's algorithms after each source zspage, as the
//! kernel does (`spin_is_contended` in `__zs_compact`); the optimal
//! algorithm and the trim after every object moved. If so it puts every
//! zspage it holds back in the lists, unlocks, waits until a waiter has
//! taken the lock (at most 50 µs: without it compaction, still running,
//! would usually retake the lock before the woken waiter got there), locks
//! again and carries on from where it was (keep-destination and drain-source pick
//! their next zspages afresh; the optimal plan and the trim's target are
//! kept and each zspage re-checked). A waiter thus waits for one object's
//! move in default mode, one source zspage's moves in kernel-compat, not a
//! whole class's compaction. The optimal plan is sorted with the lock
//! released.
//!
//! Framed pools (default mode on system pages above 4 KiB, `frames.rs`):
//! after the classes, compaction empties sparsely used system pages. It
//! takes the most sparsely used one whose frames the other partly used
//! pages have room for, and moves each of its frames into the fullest of
//! them: with the frame's class lock held it *tries* the exclusive hold of
//! every object on the frame (one held by a reader or writer keeps the
//! frame, and the page, where they are), copies the frame, republishes the
//! zspage's frame entry and drops the holds. A page with a frame it could
//! not move is not tried again in that compaction.
//!
//! This module owns the choice of source and destination zspages (and
//! system pages); placing and freeing slots is `class.rs`'s, which frame a
//! zspage gets is `frames.rs`'s.

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use serde::Serialize;

use crate::class::{Class, ClassInner};
use crate::config::CompactionAlgo;
use crate::frames::{FrameArena, FrameId, FrameOwner, FRAME_SIZE};
use crate::handle::Entry;
use crate::pool::Pool;

/// What one compaction did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CompactResult {
    /// Pages given back (net, over the classes compacted).
    pub pages_freed: u64,
    /// Objects moved.
    pub objs_moved: u64,
    /// Of `objs_moved`, those moved by default mode's trim (to give back
    /// pages of zspages that stay), not to free whole zspages.
    pub objs_moved_trim: u64,
    /// Times compaction unlocked a class to let a waiting thread in
    /// (between two objects, or two source zspages with the kernel's
    /// algorithms).
    pub pauses: u64,
}

impl CompactResult {
    fn add(&mut self, other: CompactResult) {
        self.pages_freed += other.pages_freed;
        self.objs_moved += other.objs_moved;
        self.objs_moved_trim += other.objs_moved_trim;
        self.pauses += other.pauses;
    }
}

/// `zs_can_compact` of a class: pages of the zspages its free slots add up to.
fn can_compact(class: &Class, inner: &ClassInner) -> u64 {
    let objs = u64::from(class.objs());
    let allocated = u64::from(inner.zspages) * objs;
    (allocated - inner.objs_used) / objs * u64::from(class.info.pages_per_zspage)
}

/// Pages compacting a class would give back now: its `zs_can_compact`,
/// and in default mode with the optimal algorithm also what the trim gives
/// back, i.e. the class's counted pages over the fewest that hold its live
/// objects (full zspages counted up to their last object, plus the rest
/// packed at the front of one zspage).
fn reclaimable(pool: &Pool, class: &Class, inner: &ClassInner) -> u64 {
    if class.in_object_list() || pool.config().compaction != CompactionAlgo::Optimal {
        return can_compact(class, inner);
    }
    let (objs, size, page) = (
        u64::from(class.objs()),
        u64::from(class.info.size),
        u64::from(class.page_size),
    );
    let (full, rest) = (inner.objs_used / objs, inner.objs_used % objs);
    let fewest = full * (objs * size).div_ceil(page) + (rest * size).div_ceil(page);
    let reclaimable = inner.pages.saturating_sub(fewest);
    // A framed class counts frames: in system pages, what they add up to,
    // rounded up so that a class with any frame to give back is compacted
    // (the system-page step then gathers the freed frames into pages).
    match &pool.frames {
        Some(arena) => reclaimable.div_ceil(u64::from(arena.per_page())),
        None => reclaimable,
    }
}

fn is_full(class: &Class, inner: &ClassInner, zid: u32) -> bool {
    inner.metas[zid as usize].inuse == class.objs()
}

/// Moves the object in slot `idx` of `src` into the lowest free slot of
/// `dst` (which may be `src` itself when the free slot is lower). Returns
/// false, moving nothing, if somebody holds the object.
fn move_object(
    pool: &Pool,
    class: &Class,
    inner: &mut ClassInner,
    src: u32,
    idx: u32,
    dst: u32,
    tally: &mut Tally,
) -> bool {
    let owner = class.owner(inner, src, idx);
    let cell = class
        .handles
        .get(owner as usize)
        .expect("owners name table slots");
    let Some(loc) = cell.try_lock_exclusive() else {
        return false; // held by a reader or writer: it stays
    };
    debug_assert_eq!((loc.zspage, loc.obj), (src, idx));
    let generation = cell.load().generation();
    let Ok((new_idx, delta)) = class.place(inner, dst, owner, &pool.pages) else {
        // A framed destination could not have a frame: the object stays.
        cell.unlock_exclusive();
        return false;
    };
    debug_assert!(src != dst || new_idx != idx);
    pool.add_pages(delta);
    tally.pages += delta;
    let from = class.slot_memory(inner, src);
    let to = class.slot_memory(inner, dst);
    // SAFETY: the source object is held exclusive, so nobody reads or writes
    // it; the destination slot was just taken from the free slots under the
    // class lock and no entry points at it yet; the two slots are distinct.
    unsafe { from.copy_slot(idx, to, new_idx) };
    cell.replace_exclusive(Entry::Allocated {
        generation,
        zspage: dst,
        obj: new_idx,
    });
    let delta = class.unplace(inner, src, idx, &pool.pages);
    pool.add_pages(delta);
    tally.pages += delta;
    tally.moved += 1;
    true
}

/// What one class's compaction has done so far.
#[derive(Default)]
struct Tally {
    /// Objects moved.
    moved: u64,
    /// Change in the class's counted pages caused by the moves (negative:
    /// freed), so that pages others allocate or free while compaction lets
    /// them in are not counted as compacted.
    pages: i64,
}

/// Whether an algorithm finished or stopped (after an object, or at a
/// zspage boundary) to let a waiting thread take the lock.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    Done,
    Paused,
}

fn step_after_source(class: &Class) -> Step {
    if class.contended() {
        Step::Paused
    } else {
        Step::Done
    }
}

/// What [`migrate`] did.
struct Migrated {
    /// Objects moved.
    moved: u64,
    /// `src` still exists (it is released when emptied).
    src_alive: bool,
    /// It stopped early, after a move, because a thread waits for the
    /// class lock (only when asked to yield per object).
    paused: bool,
}

/// Moves live objects of `src` into `dst`, in slot order, until `dst` is full
/// or `src` has none left, or, with `yield_per_object`, until a thread waits
/// for the class lock (checked after every move).
fn migrate(
    pool: &Pool,
    class: &Class,
    inner: &mut ClassInner,
    src: u32,
    dst: u32,
    tally: &mut Tally,
    yield_per_object: bool,
) -> Migrated {
    let mut moved = 0;
    // `src` only loses objects here, so its live slots stay below this.
    for idx in 0..class.slot_end(inner, src) {
        if is_full(class, inner, dst) {
            break;
        }
        if !class.is_live(inner, src, idx) {
            continue;
        }
        let last = inner.metas[src as usize].inuse == 1;
        if move_object(pool, class, inner, src, idx, dst, tally) {
            moved += 1;
            if last {
                return Migrated {
                    moved,
                    src_alive: false,
                    paused: false,
                };
            }
            if yield_per_object && class.contended() {
                return Migrated {
                    moved,
                    src_alive: true,
                    paused: true,
                };
            }
        }
    }
    Migrated {
        moved,
        src_alive: true,
        paused: false,
    }
}

/// Default mode, after the zspages that can be freed are: gathers the class's
/// remaining free slots into the end of one zspage so its pages there go back
/// to the OS. The zspage with the fewest live objects (the *target*, chosen
/// on the first call and kept in `target` across pauses while it lives)
/// fills the holes of the others from its highest slots, then packs what is
/// left to its front. After every move it stops if a thread waits for the
/// class lock ([`Step::Paused`]); called again, it carries on.
fn trim(
    pool: &Pool,
    class: &Class,
    inner: &mut ClassInner,
    tally: &mut Tally,
    target: &mut Option<u32>,
) -> Step {
    let objs = class.objs();
    let live = |inner: &ClassInner, z: u32| {
        inner
            .metas
            .get(z as usize)
            .is_some_and(|m| m.holds_zspage())
    };
    let t = match *target {
        Some(t) if live(inner, t) => t,
        _ => {
            let Some(t) = (0..inner.metas.len() as u32)
                .filter(|&z| inner.metas[z as usize].holds_zspage())
                .min_by_key(|&z| inner.metas[z as usize].inuse)
            else {
                return Step::Done;
            };
            *target = Some(t);
            t
        }
    };
    let others: Vec<u32> = (0..inner.metas.len() as u32)
        .filter(|&z| z != t && inner.metas[z as usize].holds_zspage())
        .filter(|&z| inner.metas[z as usize].inuse < objs)
        .collect();
    // Highest live slot of the target first; a held object is skipped.
    let mut next = class.slot_end(inner, t);
    'fill: for z in others {
        while inner.metas[z as usize].inuse < objs {
            let Some(idx) = (0..next)
                .rev()
                .find(|&i| inner.metas[t as usize].is_live(i))
            else {
                break 'fill;
            };
            next = idx;
            let last = inner.metas[t as usize].inuse == 1;
            if move_object(pool, class, inner, t, idx, z, tally) {
                if last {
                    return Step::Done; // the target emptied and was released
                }
                if class.contended() {
                    return Step::Paused;
                }
            }
        }
    }
    // Pack the target: its highest live objects into its lowest free slots.
    loop {
        let m = &inner.metas[t as usize];
        let Some(free) = m.lowest_free(objs) else {
            break;
        };
        let Some(high) = (free + 1..m.slots()).rev().find(|&i| m.is_live(i)) else {
            break;
        };
        if !move_object(pool, class, inner, t, high, t, tally) {
            break;
        }
        if class.contended() {
            return Step::Paused;
        }
    }
    Step::Done
}

/// Takes the first zspage of the first non-empty group in `groups` out of
/// the lists.
fn isolate(class: &Class, inner: &mut ClassInner, groups: impl Iterator<Item = u8>) -> Option<u32> {
    for g in groups {
        if let Some(z) = inner.lists.head(g as usize) {
            class.isolate(inner, z);
            return Some(z);
        }
    }
    None
}

impl Pool {
    fn partial_groups(&self) -> std::ops::Range<u8> {
        1..self.config().fullness.full_group()
    }

    /// Pages compaction could free now, over all classes (the kernel's
    /// shrinker count: the sum of `zs_can_compact`). In a framed pool the
    /// classes count frames: their sum in system pages (rounded up), plus
    /// the sparsely used system pages compaction would empty.
    pub fn can_compact(&self) -> u64 {
        let sum = self.classes.iter().map(|c| can_compact(c, &c.lock())).sum();
        match &self.frames {
            Some(arena) => u64::div_ceil(sum, u64::from(arena.per_page())) + arena.reclaimable(),
            None => sum,
        }
    }

    /// Pages [`Pool::compact_class`] would give back now (0 if there is no
    /// such class): the class's `zs_can_compact`, plus, in default mode with
    /// the optimal algorithm, what its trim gives back (the class's counted
    /// pages over the fewest that can hold its live objects). In a framed
    /// pool, the frames it would give back, in system pages rounded up (the
    /// pages come back through [`Pool::compact_system_pages`]). The measure
    /// the store's background compactor decides on.
    pub fn class_reclaimable(&self, class_id: usize) -> u64 {
        self.classes
            .get(class_id)
            .map_or(0, |c| reclaimable(self, c, &c.lock()))
    }

    /// [`Pool::class_reclaimable`] over all classes.
    pub fn reclaimable(&self) -> u64 {
        (0..self.classes.len())
            .map(|id| self.class_reclaimable(id))
            .sum()
    }

    /// The fewest objects that must move to free every freeable zspage now:
    /// per class, the live objects of its `floor(free slots / objs)` emptiest
    /// zspages.
    pub fn compaction_lower_bound(&self) -> u64 {
        (0..self.classes.len())
            .map(|id| self.class_compaction_lower_bound(id))
            .sum()
    }

    /// [`Pool::compaction_lower_bound`] of one physical class (0 if there is
    /// no such class).
    pub fn class_compaction_lower_bound(&self, class_id: usize) -> u64 {
        let Some(class) = self.classes.get(class_id) else {
            return 0;
        };
        let inner = class.lock();
        let freeable =
            (can_compact(class, &inner) / u64::from(class.info.pages_per_zspage)) as usize;
        let mut inuse: Vec<u32> = inner
            .metas
            .iter()
            .filter(|m| m.holds_zspage())
            .map(|m| m.inuse)
            .collect();
        inuse.sort_unstable();
        inuse[..freeable].iter().map(|&n| u64::from(n)).sum()
    }

    /// Compacts every class, largest first, with the pool's algorithm.
    /// Returns at once with nothing done if another compaction is running.
    /// Every page it frees, and every page the page source kept for reuse,
    /// goes back to the OS at its end (an operator who compacts expects the
    /// memory back).
    ///
    /// ```
    /// use zsmalloc::{Pool, PoolConfig};
    ///
    /// let pool = Pool::new(PoolConfig::kernel_compat()).unwrap();
    /// // Fill zspages of one class, then free seven objects in eight: every
    /// // zspage is left sparse, none empty.
    /// let handles: Vec<_> = (0..512u32)
    ///     .map(|i| {
    ///         let h = pool.malloc(1000).unwrap();
    ///         pool.write(h, &i.to_le_bytes()).unwrap();
    ///         h
    ///     })
    ///     .collect();
    /// let mut kept = Vec::new();
    /// for (i, h) in handles.into_iter().enumerate() {
    ///     if i % 8 == 0 {
    ///         kept.push((i as u32, h));
    ///     } else {
    ///         pool.free(h).unwrap();
    ///     }
    /// }
    /// let before = pool.total_pages();
    /// assert!(pool.can_compact() > 0);
    /// let done = pool.compact();
    /// assert!(done.pages_freed > 0 && done.objs_moved > 0);
    /// assert_eq!(pool.total_pages(), before - done.pages_freed as usize);
    /// assert_eq!(pool.can_compact(), 0);
    /// // The objects moved; their handles and bytes did not change.
    /// for (i, h) in kept {
    ///     assert_eq!(&*pool.read(h, 4).unwrap(), &i.to_le_bytes());
    /// }
    /// ```
    pub fn compact(&self) -> CompactResult {
        self.compact_all(Release::Flush)
    }

    /// As [`Pool::compact`], for a compaction nobody waits on the memory of
    /// (periodic or background): with a retained share
    /// ([`Pool::set_page_retain_divisor`]) the pages it frees stay resident
    /// within the share's bound, for the stores that fill them again, and
    /// go back to the OS by the bound or by the decay due by time (the
    /// page source's epochs; [`Pool::decay_page_cache`]), as after the steps
    /// of the store's background compactor. Without one, exactly
    /// [`Pool::compact`].
    pub fn compact_background(&self) -> CompactResult {
        self.compact_all(Release::Keep)
    }

    /// What the end of a compaction does with the page source's cached and
    /// pending pages.
    fn end_compaction(&self, release: Release) {
        match release {
            // A background compaction or one of its steps: the pages wait
            // for the bound, or for the decay due by time.
            Release::Keep if self.pages.retain_divisor() != 0 => {}
            Release::Flush | Release::Keep => {
                self.pages.flush();
            }
        }
    }

    fn compact_all(&self, release: Release) -> CompactResult {
        let Some(_token) = self.compaction_token() else {
            return CompactResult::default();
        };
        let mut total = CompactResult::default();
        // The zspages compaction frees stay in the page source's cache until
        // it ends (they were resident when it started), then go back to the
        // OS in one batch: one TLB shootdown where the kernel batches, not
        // one per zspage.
        let hold = self.pages.hold();
        for id in (0..self.classes.len()).rev() {
            total.add(self.compact_class_locked(id));
        }
        total.add(self.compact_system_pages_locked());
        drop(hold);
        self.end_compaction(release);
        total
    }

    /// Compacts one physical class (by position in
    /// [`Geometry::classes`](crate::Geometry::classes)). Returns nothing done
    /// if another compaction is running or there is no such class.
    pub fn compact_class(&self, class_id: usize) -> CompactResult {
        self.compact_class_releasing(class_id, Release::Flush)
    }

    /// [`Pool::compact_class`] as one step of a background compactor: with
    /// a retained share, the pages it frees stay in the page source within
    /// its bound (released by the bound or the decay due by time).
    pub fn compact_class_background(&self, class_id: usize) -> CompactResult {
        self.compact_class_releasing(class_id, Release::Keep)
    }

    fn compact_class_releasing(&self, class_id: usize, release: Release) -> CompactResult {
        if class_id >= self.classes.len() {
            return CompactResult::default();
        }
        let Some(_token) = self.compaction_token() else {
            return CompactResult::default();
        };
        let hold = self.pages.hold();
        let result = self.compact_class_locked(class_id);
        drop(hold);
        self.end_compaction(release);
        result
    }

    /// Framed pools: empties sparsely used system pages by moving their
    /// frames into fuller ones (see the module's comment). Returns nothing
    /// done if another compaction is running or the pool is not framed.
    pub fn compact_system_pages(&self) -> CompactResult {
        self.compact_system_pages_releasing(Release::Flush)
    }

    /// [`Pool::compact_system_pages`] as one step of a background
    /// compactor (see [`Pool::compact_class_background`]).
    pub fn compact_system_pages_background(&self) -> CompactResult {
        self.compact_system_pages_releasing(Release::Keep)
    }

    fn compact_system_pages_releasing(&self, release: Release) -> CompactResult {
        let Some(_token) = self.compaction_token() else {
            return CompactResult::default();
        };
        let hold = self.pages.hold();
        let result = self.compact_system_pages_locked();
        drop(hold);
        self.end_compaction(release);
        result
    }

    /// Framed pools: system pages [`Pool::compact_system_pages`] would give
    /// back now (those in use over the fewest that hold every frame); 0 for
    /// other pools.
    pub fn system_pages_reclaimable(&self) -> u64 {
        self.frames.as_ref().map_or(0, |arena| arena.reclaimable())
    }

    fn compact_system_pages_locked(&self) -> CompactResult {
        let mut result = CompactResult::default();
        let Some(arena) = self.frames.as_ref() else {
            return result;
        };
        let mut tried = Vec::new();
        while let Some(frames) = arena.start_drain(&tried) {
            let page = FrameArena::page_of(frames[0].0);
            let mut emptied = true;
            for (id, owner) in frames {
                match self.move_frame(arena, id, owner) {
                    Some((moved, delta)) => {
                        result.objs_moved += moved;
                        result.pages_freed += u64::try_from(-delta).unwrap_or(0);
                    }
                    None => {
                        emptied = false;
                        break;
                    }
                }
            }
            arena.end_drain();
            if !emptied {
                tried.push(page);
            }
        }
        arena
            .pages_compacted
            .fetch_add(result.pages_freed, Ordering::Relaxed);
        arena
            .objs_moved
            .fetch_add(result.objs_moved, Ordering::Relaxed);
        result
    }

    /// Moves frame `id` of zspage `owner` to the fullest other partly used
    /// system page. Returns the objects it carried and the change in
    /// system pages, or `None` if it could not move (an object on it is
    /// held, or no other page has room); `Some((0, 0))` if the frame is no
    /// longer the zspage's (freed meanwhile).
    fn move_frame(&self, arena: &FrameArena, id: FrameId, owner: FrameOwner) -> Option<(u64, i64)> {
        let class = &self.classes[owner.class as usize];
        let mut inner = class.lock();
        let (zid, f) = (owner.zspage, owner.index);
        let at = zid as usize * class.info.pages_per_zspage as usize + f as usize;
        if inner.frame_ids.get(at) != Some(&id) {
            return Some((0, 0));
        }
        // Every slot with a byte on the frame.
        let size = class.info.size;
        let first = f * FRAME_SIZE / size;
        let last =
            (((f + 1) * FRAME_SIZE - 1) / size).min(class.slot_end(&inner, zid).saturating_sub(1));
        let mut held = Vec::new();
        let release =
            |held: &[&crate::handle::EntryCell]| held.iter().for_each(|c| c.unlock_exclusive());
        for idx in first..=last {
            if !class.is_live(&inner, zid, idx) {
                continue;
            }
            let cell = class
                .handles
                .get(class.owner(&inner, zid, idx) as usize)
                .expect("owners name table slots");
            if cell.try_lock_exclusive().is_none() {
                release(&held);
                return None; // held by a reader or writer: the frame stays
            }
            held.push(cell);
        }
        let Some((new_id, ptr)) = arena.take_shared(owner) else {
            release(&held);
            return None;
        };
        let old = class
            .frame_ptrs
            .get(at)
            .expect("published with the zspage")
            .load(Ordering::Acquire);
        // SAFETY: every live object with a byte on the old frame is held
        // exclusive, so no one reads or writes them; its free slots are
        // touched only under the class lock held here; the new frame was
        // just taken and nothing points at it yet. Frames never overlap.
        unsafe { std::ptr::copy_nonoverlapping(old, ptr, FRAME_SIZE as usize) };
        let replaced = class.swap_frame(&mut inner, zid, f, new_id, ptr);
        debug_assert_eq!(replaced, id);
        let delta = arena.give_back(&self.pages, replaced);
        release(&held);
        self.add_pages(delta);
        Some((held.len() as u64, delta))
    }

    fn compaction_token(&self) -> Option<CompactionToken<'_>> {
        self.compacting
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| CompactionToken(self))
    }

    fn compact_class_locked(&self, class_id: usize) -> CompactResult {
        let class = &self.classes[class_id];
        let mut tally = Tally::default();
        let algo = self.config().compaction;
        let mut pauses = 0;
        let (mut inner, mut plan) = if algo == CompactionAlgo::Optimal {
            let (plan, inner) = OptimalPlan::new(class);
            (inner, Some(plan))
        } else {
            (class.lock(), None)
        };
        // Every zspage is back in the lists: let the waiter in.
        let pause = |inner: MutexGuard<'_, ClassInner>| {
            let grants = class.grants();
            drop(inner);
            class.let_waiters_in(grants);
            class.lock()
        };
        loop {
            let step = match (algo, plan.as_mut()) {
                (CompactionAlgo::Optimal, Some(plan)) => {
                    self.compact_optimal(class, &mut inner, plan, &mut tally)
                }
                (CompactionAlgo::KeepDestination, _) => {
                    self.compact_keep_destination(class, &mut inner, &mut tally)
                }
                _ => self.compact_drain(class, &mut inner, &mut tally),
            };
            if step == Step::Done {
                break;
            }
            pauses += 1;
            inner = pause(inner);
        }
        let mut trimmed = 0;
        if algo == CompactionAlgo::Optimal && !class.in_object_list() {
            let before = tally.moved;
            let mut target = None;
            while trim(self, class, &mut inner, &mut tally, &mut target) == Step::Paused {
                pauses += 1;
                inner = pause(inner);
            }
            trimmed = tally.moved - before;
        }
        let freed = u64::try_from(-tally.pages).unwrap_or(0);
        inner.pages_compacted += freed;
        inner.objs_moved += tally.moved;
        CompactResult {
            pages_freed: freed,
            objs_moved: tally.moved,
            objs_moved_trim: trimmed,
            pauses,
        }
    }

    fn compact_keep_destination(
        &self,
        class: &Class,
        inner: &mut ClassInner,
        tally: &mut Tally,
    ) -> Step {
        let partial = self.partial_groups();
        let mut dst = None;
        while can_compact(class, inner) > 0 {
            let d = match dst {
                Some(d) => d,
                None => match isolate(class, inner, partial.clone().rev()) {
                    Some(d) => d,
                    None => break,
                },
            };
            dst = Some(d);
            let Some(src) = isolate(class, inner, partial.clone()) else {
                break;
            };
            let Migrated {
                moved: n,
                src_alive,
                ..
            } = migrate(self, class, inner, src, d, tally, false);
            if src_alive {
                class.putback(inner, src);
            }
            let step = step_after_source(class);
            if is_full(class, inner, d) || step == Step::Paused {
                class.putback(inner, d);
                dst = None;
            }
            if n == 0 {
                break; // every object left in the source is held by somebody
            }
            if step == Step::Paused {
                return Step::Paused;
            }
        }
        if let Some(d) = dst {
            class.putback(inner, d);
        }
        Step::Done
    }

    fn compact_drain(&self, class: &Class, inner: &mut ClassInner, tally: &mut Tally) -> Step {
        let partial = self.partial_groups();
        while let Some(src) = isolate(class, inner, partial.clone()) {
            if can_compact(class, inner) == 0 {
                class.putback(inner, src);
                break;
            }
            let mut round = 0;
            let mut src_alive = true;
            let mut out_of_dst = false;
            while src_alive {
                let Some(d) = isolate(class, inner, partial.clone().rev()) else {
                    out_of_dst = true;
                    break;
                };
                let Migrated {
                    moved: n,
                    src_alive: alive,
                    ..
                } = migrate(self, class, inner, src, d, tally, false);
                round += n;
                src_alive = alive;
                class.putback(inner, d);
                if alive && !is_full(class, inner, d) {
                    break; // the rest of the source is held by somebody
                }
            }
            if src_alive {
                class.putback(inner, src);
            }
            if out_of_dst || round == 0 {
                break;
            }
            if step_after_source(class) == Step::Paused {
                return Step::Paused;
            }
        }
        Step::Done
    }

    fn compact_optimal(
        &self,
        class: &Class,
        inner: &mut ClassInner,
        plan: &mut OptimalPlan,
        tally: &mut Tally,
    ) -> Step {
        while let Some(&src) = plan.sources.last() {
            // Pauses let others in: the class may have changed since the
            // plan was made. A released source is skipped; once nothing can
            // be freed, the rest of the plan would only move objects.
            // A class that emptied meanwhile gave its descriptors back
            // (`metas` is empty): its sources are gone too.
            let released = |z: u32| {
                inner
                    .metas
                    .get(z as usize)
                    .is_none_or(|m| !m.holds_zspage())
            };
            if released(src) || can_compact(class, inner) == 0 {
                plan.sources.pop();
                if can_compact(class, inner) == 0 {
                    plan.sources.clear();
                }
                continue;
            }
            class.isolate(inner, src);
            let mut alive = true;
            while alive {
                let Some(&d) = plan.dsts.last() else { break };
                if d == src
                    || inner
                        .metas
                        .get(d as usize)
                        .is_none_or(|m| !m.holds_zspage())
                    || is_full(class, inner, d)
                {
                    plan.dsts.pop();
                    continue;
                }
                class.isolate(inner, d);
                let m = migrate(self, class, inner, src, d, tally, true);
                alive = m.src_alive;
                let full = is_full(class, inner, d);
                class.putback(inner, d);
                if full {
                    plan.dsts.pop();
                }
                if m.paused {
                    // The source stays last in the plan: carried on after
                    // the pause.
                    class.putback(inner, src);
                    return Step::Paused;
                }
                if !full && alive {
                    break; // the rest of the source is held by somebody
                }
            }
            if alive {
                class.putback(inner, src);
            }
            plan.sources.pop();
            if step_after_source(class) == Step::Paused {
                return Step::Paused;
            }
        }
        Step::Done
    }
}

/// The optimal algorithm's choice, made once per class compaction and kept
/// across pauses: the zspages to empty and where their objects go.
struct OptimalPlan {
    /// The `floor(free slots / objs)` zspages with the fewest live objects,
    /// the emptiest last (taken first).
    sources: Vec<u32>,
    /// The other non-full zspages, the fullest last (filled first).
    dsts: Vec<u32>,
}

impl OptimalPlan {
    /// Takes the class lock, notes every zspage's objects in use, and makes
    /// the plan with the lock released (sorting thousands of zspages takes
    /// tens of microseconds); returns it with the lock taken again. The plan
    /// is checked zspage by zspage as it is carried out, as after a pause,
    /// so changes made meanwhile cost at most some optimality.
    fn new(class: &Class) -> (OptimalPlan, MutexGuard<'_, ClassInner>) {
        let inner = class.lock();
        let freeable =
            (can_compact(class, &inner) / u64::from(class.info.pages_per_zspage)) as usize;
        if freeable == 0 {
            let plan = OptimalPlan {
                sources: Vec::new(),
                dsts: Vec::new(),
            };
            return (plan, inner);
        }
        let mut live: Vec<(u32, u32)> = inner
            .metas
            .iter()
            .enumerate()
            .filter(|(_, m)| m.holds_zspage())
            .map(|(z, m)| (m.inuse, z as u32))
            .collect();
        drop(inner);
        live.sort_unstable();
        let (sources, rest) = live.split_at(freeable);
        let plan = OptimalPlan {
            sources: sources.iter().rev().map(|&(_, z)| z).collect(),
            dsts: rest
                .iter()
                .filter(|&&(n, _)| n < class.objs())
                .map(|&(_, z)| z)
                .collect(),
        };
        (plan, class.lock())
    }
}

/// What a compaction does at its end with the pages the page source keeps.
#[derive(Clone, Copy)]
enum Release {
    /// Gives them all back (a manual compaction).
    Flush,
    /// With a retained share, nothing (a background compaction or one of
    /// its steps); without, as `Flush`.
    Keep,
}

/// Proof of being the pool's one compactor; releases the flag when dropped.
struct CompactionToken<'a>(&'a Pool);

impl Drop for CompactionToken<'_> {
    fn drop(&mut self) {
        self.0.compacting.store(false, Ordering::Release);
    }
}

impl Pool {
    /// Runs the automatic policy for one class after a free.
    pub(crate) fn auto_compact(&self, class_id: usize) {
        let Some(policy) = self.config().auto_compact else {
            return;
        };
        let class = &self.classes[class_id];
        let due = can_compact(class, &class.lock()) >= policy.threshold_pages.max(1);
        if due {
            if let Some(_token) = self.compaction_token() {
                let _hold = self.pages.hold();
                self.compact_class_locked(class_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FullnessScheme, Mode, PoolConfig};

    /// A pool of one class (200-byte objects), 70% of them freed, the same
    /// every call.
    fn fragmented(mode: Mode, fullness: FullnessScheme, algo: CompactionAlgo) -> Pool {
        let mut cfg = PoolConfig::of_mode(mode);
        cfg.fullness = fullness;
        cfg.compaction = algo;
        let pool = Pool::new(cfg).unwrap();
        let handles: Vec<_> = (0..6000u32)
            .map(|i| {
                let h = pool.malloc(200).unwrap();
                pool.write(h, &[i as u8; 200]).unwrap();
                h
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            if (i * 7919) % 10 < 7 {
                pool.free(h).unwrap();
            }
        }
        pool
    }

    #[test]
    #[cfg_attr(miri, ignore = "thousands of objects: slow under Miri")]
    fn reclaimable_is_what_compaction_gives_back() {
        for (mode, algo) in [
            (Mode::KernelCompat, CompactionAlgo::KeepDestination),
            (Mode::Default, CompactionAlgo::Optimal),
            (Mode::Default, CompactionAlgo::KeepDestination),
        ] {
            let pool = fragmented(mode, FullnessScheme::InuseRatio, algo);
            let before = pool.reclaimable();
            assert!(before >= pool.can_compact(), "{mode:?}/{algo:?}");
            let r = pool.compact();
            if algo == CompactionAlgo::Optimal || mode == Mode::KernelCompat {
                assert_eq!(r.pages_freed, before, "{mode:?}/{algo:?}");
            } else {
                // Without the trim, default mode's partly counted zspages
                // make zs_can_compact an estimate.
                assert!(
                    r.pages_freed.abs_diff(before) * 10 < before,
                    "{r:?} {before}"
                );
            }
            assert_eq!(pool.reclaimable(), 0, "{mode:?}/{algo:?}");
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "thousands of objects: slow under Miri")]
    fn a_waiter_makes_compaction_pause_at_every_step_and_lose_nothing() {
        for (mode, fullness, algo) in [
            (
                Mode::KernelCompat,
                FullnessScheme::ThreeQuarters,
                CompactionAlgo::DrainSource,
            ),
            (
                Mode::KernelCompat,
                FullnessScheme::InuseRatio,
                CompactionAlgo::KeepDestination,
            ),
            (
                Mode::KernelCompat,
                FullnessScheme::InuseRatio,
                CompactionAlgo::Optimal,
            ),
            (
                Mode::Default,
                FullnessScheme::InuseRatio,
                CompactionAlgo::KeepDestination,
            ),
            (
                Mode::Default,
                FullnessScheme::InuseRatio,
                CompactionAlgo::Optimal,
            ),
        ] {
            let label = format!("{mode:?}/{fullness:?}/{algo:?}");
            let alone = fragmented(mode, fullness, algo);
            let freeable = alone.can_compact();
            assert!(freeable > 0, "{label}");
            let quiet = alone.compact();
            assert_eq!(quiet.pauses, 0, "{label}: nobody waited");

            let busy = fragmented(mode, fullness, algo);
            let id = (0..busy.classes.len())
                .find(|&i| busy.classes[i].lock().objs_used > 0)
                .unwrap();
            busy.classes[id].fake_waiter(true);
            let r = busy.compact();
            busy.classes[id].fake_waiter(false);
            assert!(r.pauses > 1, "{label}: {r:?}");
            assert_eq!(
                busy.can_compact(),
                0,
                "{label}: everything freeable was freed"
            );
            assert_eq!(r.pages_freed, quiet.pages_freed, "{label}");
            if algo == CompactionAlgo::Optimal {
                // The plan and the trim's target are kept across pauses:
                // the very same moves.
                assert_eq!(r.objs_moved, quiet.objs_moved, "{label}");
                // A pause after every object moved, but the one that
                // empties the trim's target (a source emptied pauses at the
                // zspage boundary instead).
                assert!(r.pauses + 1 >= r.objs_moved, "{label}: {r:?}");
            }
            busy.check_invariants().unwrap();
        }
    }
}
