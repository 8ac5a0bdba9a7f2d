//! z3fold's in-page compaction: the queue of pages that a free left with
//! objects, and the work on one page (move a lone object to another page, or
//! slide a MIDDLE buddy to close a gap).
//!
//! This module owns the compaction policy and the moves of object bytes. It
//! may not change a page's layout other than through the pool's `place`,
//! `relist` and `release_page`, and never moves an object with read holds.

use zpool::ZCompacted;

use super::page::{FIRST, HEADER_CHUNKS, MIDDLE, NIL, TOTAL_CHUNKS};
use super::pool::{Inner, Z3Fold};

/// In-page compaction slides a MIDDLE buddy only to close a gap of at least
/// this many chunks (moving bytes is not free).
pub const BIG_CHUNK_GAP: usize = 3;

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

    /// Works through the compaction queue as it is at the call, one page
    /// per hold of the pool mutex (pages queued meanwhile wait for the next
    /// call, so a steady stream of frees cannot keep it running). Pages with
    /// an object being read are queued again.
    pub(super) fn compact_queue(&self) -> ZCompacted {
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
    pub(super) fn single_object_pages(&self) -> u64 {
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
}
