//! Where the region's pages are: segments of addresses, each a run of
//! page indexes. A region starts as one segment; the program's `mremap`
//! moves pieces (the remap event) and its `munmap` removes them (the unmap
//! event).
//!
//! Owns the address arithmetic between a page index and its address; makes
//! no system call.

/// A run of pages at one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Address of the first page.
    pub addr: usize,
    /// Bytes.
    pub len: usize,
    /// Index of the first page.
    pub first_page: usize,
}

/// The region's segments.
#[derive(Clone, Debug)]
pub(crate) struct Mapping {
    page_size: usize,
    segs: Vec<Segment>,
}

impl Mapping {
    /// One segment of `len` bytes at `addr`.
    pub(crate) fn new(addr: usize, len: usize, page_size: usize) -> Mapping {
        let mut segs = Vec::with_capacity(16);
        segs.push(Segment {
            addr,
            len,
            first_page: 0,
        });
        Mapping { page_size, segs }
    }

    /// The segments.
    pub(crate) fn segments(&self) -> &[Segment] {
        &self.segs
    }

    /// The page at `addr`, if it is one of the region's.
    pub(crate) fn page_of(&self, addr: usize) -> Option<usize> {
        self.segs
            .iter()
            .find(|s| addr >= s.addr && addr < s.addr + s.len)
            .map(|s| s.first_page + (addr - s.addr) / self.page_size)
    }

    /// The address of page `p`, if it is still mapped.
    pub(crate) fn addr_of(&self, p: usize) -> Option<usize> {
        let ps = self.page_size;
        self.segs
            .iter()
            .find(|s| p >= s.first_page && p < s.first_page + s.len / ps)
            .map(|s| s.addr + (p - s.first_page) * ps)
    }

    /// Takes `[start, end)` out, returning the pieces removed (their own
    /// page numbering kept).
    pub(crate) fn cut(&mut self, start: usize, end: usize) -> Vec<Segment> {
        let ps = self.page_size;
        let mut kept = Vec::with_capacity(self.segs.len() + 2);
        let mut cut = Vec::new();
        for s in self.segs.drain(..) {
            let (a, b) = (s.addr, s.addr + s.len);
            let (lo, hi) = (start.max(a), end.min(b));
            if lo >= hi {
                kept.push(s);
                continue;
            }
            if lo > a {
                kept.push(Segment {
                    addr: a,
                    len: lo - a,
                    first_page: s.first_page,
                });
            }
            cut.push(Segment {
                addr: lo,
                len: hi - lo,
                first_page: s.first_page + (lo - a) / ps,
            });
            if hi < b {
                kept.push(Segment {
                    addr: hi,
                    len: b - hi,
                    first_page: s.first_page + (hi - a) / ps,
                });
            }
        }
        self.segs = kept;
        cut
    }

    /// Follows an mremap of `[from, from + len)` to `to`.
    pub(crate) fn remap(&mut self, from: usize, to: usize, len: usize) {
        let moved = self.cut(from, from + len);
        for m in moved {
            self.segs.push(Segment {
                addr: m.addr - from + to,
                ..m
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_move_and_go() {
        let ps = 4096;
        let mut m = Mapping::new(0x10000, 8 * ps, ps);
        assert_eq!(m.page_of(0x10000 + 3 * ps + 5), Some(3));
        m.remap(0x10000 + 2 * ps, 0x90000, 2 * ps);
        assert_eq!(m.addr_of(2), Some(0x90000));
        assert_eq!(m.addr_of(3), Some(0x90000 + ps));
        assert_eq!(m.page_of(0x90000 + ps), Some(3));
        assert_eq!(m.page_of(0x10000 + 2 * ps), None);
        assert_eq!(m.addr_of(4), Some(0x10000 + 4 * ps));
        let gone = m.cut(0x10000 + 7 * ps, 0x10000 + 9 * ps);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].first_page, 7);
        assert_eq!(m.addr_of(7), None);
        assert_eq!(m.segments().len(), 3);
    }
}
