//! Free runs indexed by length: address ranges a source mapped and holds,
//! whose pages are not resident, kept for reuse.
//!
//! This module owns the lists of free runs, the split of a longer run when
//! a shorter one is wanted, so the address space a source holds is bounded by
//! its peak use, and the count of free pages in each piece of the locked
//! reserve, so that a piece none of whose pages are out or cached can be
//! found and given back whole. It never maps, advises or touches memory: runs
//! arrive here already given back to the kernel (see `cache.rs` and
//! `release.rs`; in a reserve's piece, zeroed instead), and a run taken from
//! here is only an address.

use std::collections::HashMap;
use std::ptr::NonNull;

use crate::{reserve, MAX_RUN_PAGES};

/// Free runs by length in pages (index 0 unused).
///
/// Invariant: every entry starts a run of its list's length in pages that
/// lies inside one mapping of the source (the source's "chunks"), none of its
/// pages resident (or, in a piece of the locked reserve, all of them zero)
/// and none handed out. A run never crosses a piece of the reserve, since a
/// frontier carves each from one piece.
pub(crate) struct FreeRuns {
    by_length: Vec<Vec<NonNull<u8>>>,
    page_size: usize,
    /// Free pages in each piece of the reserve that holds a free run, by
    /// the piece's start.
    in_piece: HashMap<usize, usize>,
    /// Pieces whose every page became free, by their start (some may have
    /// been taken from again since).
    whole: Vec<usize>,
}

impl FreeRuns {
    /// No free runs of `page_size` pages, with a list for every length up
    /// to [`MAX_RUN_PAGES`].
    pub(crate) fn new(page_size: usize) -> FreeRuns {
        FreeRuns {
            by_length: (0..=MAX_RUN_PAGES).map(|_| Vec::new()).collect(),
            page_size,
            in_piece: HashMap::new(),
            whole: Vec::new(),
        }
    }

    /// Adds the free run of `pages` pages at `ptr` (see the type's invariant).
    pub(crate) fn push(&mut self, pages: u32, ptr: NonNull<u8>) {
        self.count(ptr, pages as isize);
        self.by_length[pages as usize].push(ptr);
    }

    /// Adds free runs of `pages` pages each.
    pub(crate) fn extend(&mut self, pages: u32, runs: impl IntoIterator<Item = NonNull<u8>>) {
        for ptr in runs {
            self.push(pages, ptr);
        }
    }

    /// A free run of exactly `pages`, or the front of a longer one split, its
    /// rest kept as a shorter free run.
    pub(crate) fn take(&mut self, pages: u32) -> Option<NonNull<u8>> {
        let want = pages as usize;
        let ptr = match self.by_length[want].pop() {
            Some(ptr) => ptr,
            None => {
                let longer =
                    (want + 1..self.by_length.len()).find(|&n| !self.by_length[n].is_empty())?;
                let ptr = self.by_length[longer].pop()?;
                // SAFETY: `ptr` starts a free run of `longer` pages inside one
                // chunk (the type's invariant), so the address `want` pages
                // further is inside the same chunk.
                let rest = unsafe { ptr.add(want * self.page_size) };
                self.by_length[longer - want].push(rest);
                ptr
            }
        };
        self.count(ptr, -(want as isize));
        Some(ptr)
    }

    /// Takes out every free run of each piece of the reserve whose pages
    /// are all free, and returns those pieces' starts: the source holds no
    /// page of them any more.
    pub(crate) fn take_whole_pieces(&mut self) -> Vec<usize> {
        let per_piece = reserve::PIECE_BYTES / self.page_size;
        let mut pieces = std::mem::take(&mut self.whole);
        pieces.retain(|p| self.in_piece.get(p) == Some(&per_piece));
        pieces.sort_unstable();
        pieces.dedup();
        if pieces.is_empty() {
            return pieces;
        }
        let inside = |ptr: &NonNull<u8>| {
            let a = ptr.as_ptr() as usize;
            pieces
                .binary_search_by(|&p| {
                    if a < p {
                        std::cmp::Ordering::Greater
                    } else if a >= p + reserve::PIECE_BYTES {
                        std::cmp::Ordering::Less
                    } else {
                        std::cmp::Ordering::Equal
                    }
                })
                .is_ok()
        };
        for list in &mut self.by_length {
            list.retain(|ptr| !inside(ptr));
        }
        for p in &pieces {
            self.in_piece.remove(p);
        }
        pieces
    }

    /// Adds `pages` (negative: takes them) to the free pages of the piece
    /// of the reserve `ptr` lies in, if any.
    fn count(&mut self, ptr: NonNull<u8>, pages: isize) {
        let Some(piece) = reserve::piece_of(ptr.as_ptr() as usize) else {
            return;
        };
        let free = self.in_piece.entry(piece).or_insert(0);
        *free = free
            .checked_add_signed(pages)
            .expect("free pages of a piece");
        if *free == 0 {
            self.in_piece.remove(&piece);
        } else if *free == reserve::PIECE_BYTES / self.page_size {
            self.whole.push(piece);
        }
    }
}
