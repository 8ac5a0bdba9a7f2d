//! A z3fold page's layout: the header record kept for each page (outside
//! the page), where each buddy starts, how much room a free buddy has and
//! the unbuddied list the page belongs on.
//!
//! This module owns the layout arithmetic only. It may not touch page memory,
//! the handle table or the lists themselves (`pool.rs` and `compact.rs` do,
//! under the pool mutex).

use pages::Run;

/// Chunks per page.
pub const TOTAL_CHUNKS: usize = 64;
/// Chunks the page header takes.
pub const HEADER_CHUNKS: usize = 1;
/// Chunks left for objects (63).
pub const NCHUNKS: usize = TOTAL_CHUNKS - HEADER_CHUNKS;

pub(super) const FIRST: usize = 0;
pub(super) const MIDDLE: usize = 1;
pub(super) const LAST: usize = 2;
/// `Entry::bud` of an object in a headless page.
pub(super) const HEADLESS: u8 = 3;

pub(super) const NIL: u32 = u32::MAX;

/// One page's header (kept outside the page).
#[derive(Debug)]
pub(super) struct Page {
    /// The memory; `None` while the record is unused.
    pub(super) run: Option<Run>,
    /// One object taking the whole page.
    pub(super) headless: bool,
    /// Chunks of FIRST, MIDDLE and LAST; 0 when free.
    pub(super) chunks: [u8; 3],
    /// First chunk of MIDDLE (0 without one).
    pub(super) start_middle: u8,
    /// Handle-table entry of each buddy, [`NIL`] when free (a headless page's
    /// object is `owner[FIRST]`).
    pub(super) owner: [u32; 3],
    /// On the compaction queue.
    pub(super) queued: bool,
}

impl Page {
    pub(super) fn objects(&self) -> usize {
        if self.headless {
            1
        } else {
            self.chunks.iter().filter(|&&c| c != 0).count()
        }
    }

    /// Chunks an object placed in free buddy `bud` may take now (0 if `bud`
    /// is used or cannot be placed).
    pub(super) fn room(&self, bud: usize) -> usize {
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
    pub(super) fn choose(&self, chunks: usize) -> Option<usize> {
        [FIRST, LAST, MIDDLE]
            .into_iter()
            .find(|&b| self.room(b) >= chunks)
    }

    /// The largest object the page can take now, in chunks.
    pub(super) fn placeable(&self) -> usize {
        [FIRST, MIDDLE, LAST]
            .into_iter()
            .map(|b| self.room(b))
            .max()
            .unwrap_or(0)
    }

    /// The unbuddied list the page belongs on: that of the largest object
    /// it can take now; none if it can take none (or is unused).
    pub(super) fn want_list(&self) -> Option<usize> {
        self.run
            .is_some()
            .then(|| self.placeable())
            .filter(|&p| p > 0)
    }

    /// First chunk of buddy `bud` (which is used).
    pub(super) fn start(&self, bud: usize) -> usize {
        match bud {
            FIRST => HEADER_CHUNKS,
            MIDDLE => usize::from(self.start_middle),
            _ => TOTAL_CHUNKS - usize::from(self.chunks[LAST]),
        }
    }
}
