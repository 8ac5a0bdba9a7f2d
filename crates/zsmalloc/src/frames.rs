//! Frames: 4 KiB pieces of shared system pages, from which default mode
//! builds its zspages on system pages above 4 KiB.
//!
//! A class that owns whole system pages keeps one partly filled page per
//! occupied class: on 16 and 64 KiB pages that alone is several percent of
//! the compressed bytes (BENCHMARKS.md, "Page sizes and compression
//! units"). A *framed* pool instead builds each zspage from 4 KiB
//! frames, and the frames of one system page may belong to zspages of any
//! class. The pool counts a system page (`mem_used_total`, `pages_used`,
//! the resident set) while any frame of it is taken. A new frame comes from
//! the fullest system page that has a free one (best fit), so a fill leaves
//! at most one partly used system page beyond what the classes leave;
//! compaction (`compact.rs`) empties sparsely used system pages by moving
//! their frames into fuller ones.
//!
//! This module owns the system pages (runs of one page from the pool's page
//! source), which of their frames are taken and by which zspage. It does not
//! know what a frame holds and never touches a frame's bytes. Its mutex is
//! taken inside a class lock and takes only the page source's inside it:
//! it never takes a class lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use pages::{PageSource, PagesError, Run};

/// Bytes per frame.
pub(crate) const FRAME_SIZE: u32 = 4096;

/// Most frames in one system page (64 KiB pages, the largest).
const MAX_PER_PAGE: u32 = 16;

/// A frame's number: its system page's number times [`MAX_PER_PAGE`], plus
/// its place in the page.
pub(crate) type FrameId = u32;

/// No frame, in a zspage's frame table.
pub(crate) const NO_FRAME: FrameId = u32::MAX;

/// The zspage a taken frame belongs to, and its place in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FrameOwner {
    /// Physical class.
    pub(crate) class: u32,
    /// Zspage id in the class.
    pub(crate) zspage: u32,
    /// The frame's index in the zspage.
    pub(crate) index: u32,
}

/// One system page and its frames.
struct SystemPage {
    /// The page; `None` while the number is vacant.
    run: Option<Run>,
    /// Bit `i` set: frame `i` is taken.
    taken: u16,
    /// Position in the list of partly used pages with as many frames taken.
    pos: u32,
    /// The owner of each taken frame.
    owners: [FrameOwner; MAX_PER_PAGE as usize],
}

impl SystemPage {
    fn used(&self) -> u32 {
        self.taken.count_ones()
    }
}

/// The arena's state, under its mutex.
struct State {
    pages: Vec<SystemPage>,
    /// Numbers of released pages, reused first.
    vacant: Vec<u32>,
    /// Partly used pages by frames taken (index 1 to `per_page - 1`).
    partial: Vec<Vec<u32>>,
    /// A page compaction is emptying: no frame is taken from it.
    draining: Option<u32>,
    /// Frames taken.
    frames: u64,
}

/// The system pages of a framed pool, shared by all its classes.
pub(crate) struct FrameArena {
    per_page: u32,
    state: Mutex<State>,
    /// System pages holding a taken frame (read without the mutex).
    used_pages: AtomicU64,
    /// System pages freed, and objects moved, by emptying sparse pages
    /// (the pool's statistics add them to the classes').
    pub(crate) pages_compacted: AtomicU64,
    pub(crate) objs_moved: AtomicU64,
}

impl FrameArena {
    /// An empty arena of system pages of `page_size` bytes (8 to 64 KiB).
    pub(crate) fn new(page_size: u32) -> FrameArena {
        let per_page = page_size / FRAME_SIZE;
        debug_assert!((2..=MAX_PER_PAGE).contains(&per_page));
        FrameArena {
            per_page,
            state: Mutex::new(State {
                pages: Vec::new(),
                vacant: Vec::new(),
                partial: (0..per_page).map(|_| Vec::new()).collect(),
                draining: None,
                frames: 0,
            }),
            used_pages: AtomicU64::new(0),
            pages_compacted: AtomicU64::new(0),
            objs_moved: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Frames per system page.
    pub(crate) fn per_page(&self) -> u32 {
        self.per_page
    }

    /// System pages holding at least one taken frame.
    pub(crate) fn used_pages(&self) -> u64 {
        self.used_pages.load(Ordering::Relaxed)
    }

    /// System pages that emptying sparsely used ones would give back now:
    /// those in use over the fewest that hold every taken frame.
    pub(crate) fn reclaimable(&self) -> u64 {
        let state = self.lock();
        let fewest = state.frames.div_ceil(u64::from(self.per_page));
        (state.pages.len() - state.vacant.len()) as u64 - fewest
    }

    fn unlist(&self, state: &mut State, page: u32) {
        let p = &state.pages[page as usize];
        let (used, pos) = (p.used(), p.pos as usize);
        if used == 0 || used == self.per_page {
            return;
        }
        let list = &mut state.partial[used as usize];
        list.swap_remove(pos);
        if let Some(&moved) = list.get(pos) {
            state.pages[moved as usize].pos = pos as u32;
        }
    }

    fn list(&self, state: &mut State, page: u32) {
        let used = state.pages[page as usize].used();
        if used == 0 || used == self.per_page {
            return;
        }
        let list = &mut state.partial[used as usize];
        state.pages[page as usize].pos = list.len() as u32;
        list.push(page);
    }

    /// Takes a free frame for `owner`, from the fullest partly used system
    /// page (a new one if none has a free frame). Returns the frame, its
    /// first byte, and the change in system pages used (0 or 1).
    pub(crate) fn take(
        &self,
        source: &PageSource,
        owner: FrameOwner,
    ) -> Result<(FrameId, *mut u8, i64), PagesError> {
        let mut state = self.lock();
        if let Some(page) = self.fullest(&state) {
            let (id, ptr) = self.take_on(&mut state, page, owner);
            return Ok((id, ptr, 0));
        }
        let run = source.alloc(1)?;
        let fresh = SystemPage {
            run: Some(run),
            taken: 0,
            pos: 0,
            owners: [FrameOwner::default(); MAX_PER_PAGE as usize],
        };
        let page = match state.vacant.pop() {
            Some(page) => {
                state.pages[page as usize] = fresh;
                page
            }
            None => {
                state.pages.push(fresh);
                state.pages.len() as u32 - 1
            }
        };
        self.used_pages.fetch_add(1, Ordering::Relaxed);
        let (id, ptr) = self.take_on(&mut state, page, owner);
        Ok((id, ptr, 1))
    }

    /// Takes a free frame for `owner` from the fullest partly used system
    /// page, never a new one (compaction's destinations); `None` if no page
    /// but the one being emptied has a free frame.
    pub(crate) fn take_shared(&self, owner: FrameOwner) -> Option<(FrameId, *mut u8)> {
        let mut state = self.lock();
        let page = self.fullest(&state)?;
        Some(self.take_on(&mut state, page, owner))
    }

    /// The fullest partly used page other than the one being emptied.
    fn fullest(&self, state: &State) -> Option<u32> {
        (1..self.per_page).rev().find_map(|used| {
            state.partial[used as usize]
                .iter()
                .rev()
                .copied()
                .find(|&p| Some(p) != state.draining)
        })
    }

    /// Takes the lowest free frame of `page`, which has one.
    fn take_on(&self, state: &mut State, page: u32, owner: FrameOwner) -> (FrameId, *mut u8) {
        self.unlist(state, page);
        let p = &mut state.pages[page as usize];
        let frame = (!p.taken).trailing_zeros();
        debug_assert!(frame < self.per_page);
        p.taken |= 1 << frame;
        p.owners[frame as usize] = owner;
        let base = p.run.as_ref().expect("a used page has its run").as_ptr();
        // SAFETY: `frame` is below `per_page`, so the frame lies inside the
        // system page's run of `per_page * FRAME_SIZE` bytes.
        let ptr = unsafe { base.add((frame * FRAME_SIZE) as usize) };
        self.list(state, page);
        state.frames += 1;
        (page * MAX_PER_PAGE + frame, ptr)
    }

    /// Gives a taken frame back; its system page goes back to the page
    /// source when it was the last. Returns the change in system pages used
    /// (0 or -1). The caller no longer touches the frame.
    pub(crate) fn give_back(&self, source: &PageSource, id: FrameId) -> i64 {
        let (page, frame) = (id / MAX_PER_PAGE, id % MAX_PER_PAGE);
        let mut state = self.lock();
        self.unlist(&mut state, page);
        let p = &mut state.pages[page as usize];
        debug_assert!(p.taken & (1 << frame) != 0, "frame {id} is not taken");
        p.taken &= !(1 << frame);
        p.owners[frame as usize] = FrameOwner::default();
        let empty = p.taken == 0;
        state.frames -= 1;
        if !empty {
            self.list(&mut state, page);
            return 0;
        }
        let run = state.pages[page as usize]
            .run
            .take()
            .expect("a used page has its run");
        source.free(run);
        state.vacant.push(page);
        if state.draining == Some(page) {
            state.draining = None;
        }
        self.used_pages.fetch_sub(1, Ordering::Relaxed);
        -1
    }

    /// Picks the most sparsely used system page whose frames the other
    /// partly used pages have room for, marks it as being emptied (no frame
    /// is taken from it until [`Self::end_drain`]) and returns its taken
    /// frames with their owners. `skip` lists pages already tried.
    pub(crate) fn start_drain(&self, skip: &[u32]) -> Option<Vec<(FrameId, FrameOwner)>> {
        let mut state = self.lock();
        debug_assert!(state.draining.is_none());
        let room: u64 = (1..self.per_page)
            .map(|used| u64::from(self.per_page - used) * state.partial[used as usize].len() as u64)
            .sum();
        // A page with `used` frames taken and `per_page - used` free fits in
        // the others' room exactly when the room of all of them is a page.
        if room < u64::from(self.per_page) {
            return None;
        }
        let page = (1..self.per_page).find_map(|used| {
            state.partial[used as usize]
                .iter()
                .copied()
                .find(|p| !skip.contains(p))
        })?;
        state.draining = Some(page);
        let p = &state.pages[page as usize];
        let frames = (0..self.per_page)
            .filter(|f| p.taken & (1 << f) != 0)
            .map(|f| (page * MAX_PER_PAGE + f, p.owners[f as usize]))
            .collect();
        Some(frames)
    }

    /// Ends [`Self::start_drain`]: the page may give frames again.
    pub(crate) fn end_drain(&self) {
        self.lock().draining = None;
    }

    /// The system page of a frame (for tests and the invariant walk).
    pub(crate) fn page_of(id: FrameId) -> u32 {
        id / MAX_PER_PAGE
    }

    /// Every taken frame with its owner and first byte, after checking the
    /// arena's own counts: the partly used lists hold exactly the partly
    /// used pages at their positions, the frame count and the used pages
    /// match the taken bits, and `pages_out` (the page source's count) is
    /// the pages used. For the invariant walk.
    pub(crate) fn check(
        &self,
        pages_out: usize,
    ) -> Result<Vec<(FrameId, FrameOwner, *mut u8)>, String> {
        let state = self.lock();
        let mut taken = Vec::new();
        let mut used_pages = 0u64;
        for (n, p) in state.pages.iter().enumerate() {
            let n = n as u32;
            let Some(run) = p.run.as_ref() else {
                if p.taken != 0 || !state.vacant.contains(&n) {
                    return Err(format!("system page {n} has no run but is not vacant"));
                }
                continue;
            };
            if p.taken == 0 || u32::from(p.taken) >> self.per_page != 0 {
                return Err(format!(
                    "system page {n} is held with frames {:#x} taken",
                    p.taken
                ));
            }
            used_pages += 1;
            let used = p.used();
            if used < self.per_page {
                let list = &state.partial[used as usize];
                if list.get(p.pos as usize) != Some(&n) {
                    return Err(format!(
                        "system page {n} ({used} frames taken) is not in its list"
                    ));
                }
            }
            for f in (0..self.per_page).filter(|f| p.taken & (1 << f) != 0) {
                // SAFETY: `f` is below `per_page`: inside the run.
                let ptr = unsafe { run.as_ptr().add((f * FRAME_SIZE) as usize) };
                taken.push((n * MAX_PER_PAGE + f, p.owners[f as usize], ptr));
            }
        }
        let listed: usize = state.partial.iter().map(Vec::len).sum();
        let partly = state
            .pages
            .iter()
            .filter(|p| p.run.is_some() && p.used() < self.per_page)
            .count();
        if listed != partly {
            return Err(format!(
                "{listed} pages listed as partly used, {partly} are"
            ));
        }
        if taken.len() as u64 != state.frames {
            return Err(format!(
                "arena counts {} frames, {} are taken",
                state.frames,
                taken.len()
            ));
        }
        if used_pages != self.used_pages() || used_pages != pages_out as u64 {
            return Err(format!(
                "arena counts {} system pages, {used_pages} hold frames, the page source has {pages_out} out",
                self.used_pages()
            ));
        }
        if state.draining.is_some() {
            return Err("a system page is still being emptied".into());
        }
        Ok(taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(zspage: u32) -> FrameOwner {
        FrameOwner {
            class: 1,
            zspage,
            index: 0,
        }
    }

    #[test]
    fn frames_fill_the_fullest_page_first_and_pages_go_back_empty() {
        let source = PageSource::new(16384, None).unwrap();
        let arena = FrameArena::new(16384);
        let mut ids = Vec::new();
        for z in 0..6 {
            let (id, _, added) = arena.take(&source, owner(z)).unwrap();
            assert_eq!(added, i64::from(z == 0 || z == 4), "{z}");
            ids.push(id);
        }
        assert_eq!(arena.used_pages(), 2);
        assert_eq!(arena.check(source.pages_out()).unwrap().len(), 6);
        // A full page (4 frames) and one with 2: freeing one of the full
        // page's frames makes it the fullest partly used page, which the
        // next frame comes from.
        assert_eq!(arena.give_back(&source, ids[0]), 0);
        assert_eq!(arena.reclaimable(), 0, "5 frames need both pages");
        let (id, _, added) = arena.take(&source, owner(9)).unwrap();
        assert_eq!(
            (FrameArena::page_of(id), added),
            (FrameArena::page_of(ids[1]), 0)
        );
        for &gone in &ids[1..4] {
            assert_eq!(arena.give_back(&source, gone), 0);
        }
        assert_eq!(arena.reclaimable(), 1, "3 frames fit in one page");
        // The sparsest page is the one to empty; its frames are listed.
        let drain = arena.start_drain(&[]).unwrap();
        assert_eq!(drain, vec![(id, owner(9))]);
        arena.end_drain();
        assert_eq!(arena.give_back(&source, id), -1);
        assert_eq!(arena.used_pages(), 1);
        assert_eq!(arena.reclaimable(), 0);
        arena.check(source.pages_out()).unwrap();
    }
}
