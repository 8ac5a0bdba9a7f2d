//! The span: the address range of the process's one region, handed out in
//! whole pages to the program's large mappings and allocations.
//!
//! Owns the bookkeeping of which pages are handed out (`live`, by start)
//! and which are free (`free_by_addr` and `free_by_size`, coalesced); it
//! makes no system call and touches no page. The rule its callers keep:
//! every free page reads as zeros (a fresh region page, or one the program
//! gave back and the caller dropped with `MADV_DONTNEED`).

use std::collections::{BTreeMap, BTreeSet};

/// The span's books. Lengths are whole pages; addresses page-aligned.
#[derive(Debug)]
pub struct Span {
    base: usize,
    len: usize,
    page: usize,
    live: BTreeMap<usize, usize>,
    free_by_addr: BTreeMap<usize, usize>,
    free_by_size: BTreeSet<(usize, usize)>,
    live_bytes: usize,
    peak_bytes: usize,
}

impl Span {
    /// `len` bytes at `base`, all free.
    pub fn new(base: usize, len: usize, page: usize) -> Span {
        let mut s = Span {
            base,
            len,
            page,
            live: BTreeMap::new(),
            free_by_addr: BTreeMap::new(),
            free_by_size: BTreeSet::new(),
            live_bytes: 0,
            peak_bytes: 0,
        };
        s.insert_free(base, len);
        s
    }

    /// Whether `addr` lies in the span.
    pub fn contains(&self, addr: usize) -> bool {
        addr.wrapping_sub(self.base) < self.len
    }

    /// `bytes` rounded up to whole pages (`None` on overflow).
    pub fn round(&self, bytes: usize) -> Option<usize> {
        bytes.checked_next_multiple_of(self.page)
    }

    /// Bytes handed out now, and at most so far.
    pub fn live_bytes(&self) -> (usize, usize) {
        (self.live_bytes, self.peak_bytes)
    }

    fn insert_free(&mut self, addr: usize, len: usize) {
        self.free_by_addr.insert(addr, len);
        self.free_by_size.insert((len, addr));
    }

    fn remove_free(&mut self, addr: usize, len: usize) {
        self.free_by_addr.remove(&addr);
        self.free_by_size.remove(&(len, addr));
    }

    fn count_live(&mut self, added: usize, removed: usize) {
        self.live_bytes = self.live_bytes + added - removed;
        self.peak_bytes = self.peak_bytes.max(self.live_bytes);
    }

    /// Hands out `len` bytes (whole pages, above 0): the smallest free run
    /// that fits, from its start.
    pub fn alloc(&mut self, len: usize) -> Option<usize> {
        debug_assert!(len > 0 && len % self.page == 0);
        let &(flen, faddr) = self.free_by_size.range((len, 0)..).next()?;
        self.remove_free(faddr, flen);
        if flen > len {
            self.insert_free(faddr + len, flen - len);
        }
        self.live.insert(faddr, len);
        self.count_live(len, 0);
        Some(faddr)
    }

    /// The length of the piece handed out at `addr`, if one starts there.
    pub fn live_len(&self, addr: usize) -> Option<usize> {
        self.live.get(&addr).copied()
    }

    /// Takes back the pages of `[addr, addr + len)` that are handed out
    /// (a piece may be cut in the middle, as `munmap` may); returns the
    /// runs taken back, which the caller must have dropped (they must read
    /// as zeros before the next `alloc` can return them) — so callers drop
    /// first and call this after.
    pub fn release(&mut self, addr: usize, len: usize) -> usize {
        let end = addr.saturating_add(len);
        let first = self
            .live
            .range(..=addr)
            .next_back()
            .map(|(&a, _)| a)
            .unwrap_or(addr);
        let pieces: Vec<(usize, usize)> = self
            .live
            .range(first..end)
            .map(|(&a, &l)| (a, l))
            .filter(|&(a, l)| a + l > addr)
            .collect();
        let mut taken = 0;
        for (a, l) in pieces {
            self.live.remove(&a);
            let (lo, hi) = (a.max(addr), (a + l).min(end));
            if lo > a {
                self.live.insert(a, lo - a);
            }
            if hi < a + l {
                self.live.insert(hi, a + l - hi);
            }
            self.free_run(lo, hi - lo);
            taken += hi - lo;
        }
        self.count_live(0, taken);
        taken
    }

    /// Returns a run to the free books, joined with free neighbours.
    fn free_run(&mut self, mut addr: usize, mut len: usize) {
        if let Some((&pa, &pl)) = self.free_by_addr.range(..addr).next_back() {
            if pa + pl == addr {
                self.remove_free(pa, pl);
                addr = pa;
                len += pl;
            }
        }
        if let Some(&nl) = self.free_by_addr.get(&(addr + len)) {
            self.remove_free(addr + len, nl);
            len += nl;
        }
        self.insert_free(addr, len);
    }

    /// Grows the piece at `addr` from `old` to `new` bytes in place, if the
    /// pages after it are free.
    pub fn grow_in_place(&mut self, addr: usize, old: usize, new: usize) -> bool {
        debug_assert!(new > old);
        if self.live.get(&addr) != Some(&old) {
            return false;
        }
        let next = addr + old;
        let Some(&flen) = self.free_by_addr.get(&next) else {
            return false;
        };
        let need = new - old;
        if flen < need {
            return false;
        }
        self.remove_free(next, flen);
        if flen > need {
            self.insert_free(next + need, flen - need);
        }
        self.live.insert(addr, new);
        self.count_live(need, 0);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: usize = 4096;

    fn whole(s: &Span) -> Vec<(usize, usize)> {
        s.free_by_addr.iter().map(|(&a, &l)| (a, l)).collect()
    }

    #[test]
    fn pieces_come_and_go_and_free_runs_join() {
        let mut s = Span::new(0x1000_0000, 64 * P, P);
        let a = s.alloc(4 * P).unwrap();
        let b = s.alloc(8 * P).unwrap();
        let c = s.alloc(4 * P).unwrap();
        assert_eq!((a, b, c), (0x1000_0000, a + 4 * P, a + 12 * P));
        assert_eq!(s.live_bytes(), (16 * P, 16 * P));
        assert_eq!(s.release(b, 8 * P), 8 * P);
        // The smallest run that fits: b's hole, not the tail.
        assert_eq!(s.alloc(2 * P), Some(b));
        assert_eq!(s.release(b, 2 * P), 2 * P);
        assert_eq!(s.release(a, 4 * P), 4 * P);
        assert_eq!(s.release(c, 4 * P), 4 * P);
        assert_eq!(whole(&s), vec![(0x1000_0000, 64 * P)]);
        assert_eq!(s.live_bytes(), (0, 16 * P));
    }

    #[test]
    fn a_release_may_cut_a_piece_and_skip_free_pages() {
        let mut s = Span::new(0, 32 * P, P);
        let a = s.alloc(10 * P).unwrap();
        // The middle of the piece, and past its end into free pages.
        assert_eq!(s.release(a + 2 * P, 3 * P), 3 * P);
        assert_eq!(s.live_len(a), Some(2 * P));
        assert_eq!(s.live_len(a + 5 * P), Some(5 * P));
        assert_eq!(s.release(a + 8 * P, 20 * P), 2 * P);
        assert_eq!(s.live_len(a + 5 * P), Some(3 * P));
        // Twice the same range takes nothing the second time.
        assert_eq!(s.release(a + 2 * P, 3 * P), 0);
        assert_eq!(s.live_bytes().0, 5 * P);
    }

    #[test]
    fn growing_in_place_needs_the_next_pages_free() {
        let mut s = Span::new(0, 16 * P, P);
        let a = s.alloc(2 * P).unwrap();
        let b = s.alloc(2 * P).unwrap();
        assert!(!s.grow_in_place(a, 2 * P, 3 * P));
        assert!(s.grow_in_place(b, 2 * P, 12 * P));
        assert!(!s.grow_in_place(b, 12 * P, 15 * P));
        assert_eq!(s.live_len(b), Some(12 * P));
        assert_eq!(s.alloc(3 * P), None);
        assert!(s.contains(b + 11 * P) && !s.contains(16 * P));
    }
}
