//! The unbuddied lists of zbud and z3fold: the pages that can take another
//! object, on doubly linked lists indexed by a size in chunks (zbud: the
//! free chunks of a page with one buddy; z3fold: the largest object a page
//! can take now). `malloc` of `n` chunks scans the lists from `n` upward.
//!
//! A page is named by its index in the allocator's table of page records.
//! This module keeps the pages' links (here, beside the records rather than
//! in them) and which list each page is on; linking, unlinking and the walk
//! that checks the lists are `ilist`'s, as they are for zsmalloc's fullness
//! lists. Which list a page belongs on is the allocator's to say.

use ilist::{Links, Lists};

/// `PageLinks::list` of a page on no list.
const NO_LIST: u8 = u8::MAX;

/// A page's place on the lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PageLinks {
    /// The list the page is on, or [`NO_LIST`].
    list: u8,
    links: Links,
}

impl PageLinks {
    /// On no list.
    const NONE: PageLinks = PageLinks {
        list: NO_LIST,
        links: Links::NONE,
    };

    fn list(&self) -> Option<usize> {
        (self.list != NO_LIST).then_some(usize::from(self.list))
    }
}

ilist::impl_linked!(PageLinks, links);

/// `N` lists (fewer than 255) of the pages of one record table.
#[derive(Debug)]
pub struct ChunkLists<const N: usize> {
    lists: Lists<N>,
    /// `links[id]`: page `id`'s place; pages past the end are on no list.
    links: Vec<PageLinks>,
}

impl<const N: usize> Default for ChunkLists<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> ChunkLists<N> {
    /// `N` empty lists.
    pub const fn new() -> Self {
        assert!(N < NO_LIST as usize, "list indexes must fit a u8");
        ChunkLists {
            lists: Lists::new(),
            links: Vec::new(),
        }
    }

    /// The list page `id` is on, if any.
    pub fn list_of(&self, id: u32) -> Option<usize> {
        self.links.get(id as usize).and_then(PageLinks::list)
    }

    /// Moves page `id` to the head of list `want`, or takes it off the
    /// lists if `want` is `None`.
    pub fn relist(&mut self, id: u32, want: Option<usize>) {
        self.unlink(id);
        if let Some(list) = want {
            self.link(id, list);
        }
    }

    /// Takes page `id` off its list, if it is on one.
    pub fn unlink(&mut self, id: u32) {
        let Some(page) = self.links.get_mut(id as usize) else {
            return;
        };
        let Some(list) = page.list() else {
            return;
        };
        page.list = NO_LIST;
        self.lists.remove(&mut self.links, list, id);
    }

    /// Puts page `id`, which is on no list, at the head of list `list`.
    fn link(&mut self, id: u32, list: usize) {
        let i = id as usize;
        if i >= self.links.len() {
            self.links.resize(i + 1, PageLinks::NONE);
        }
        self.links[i].list = list as u8;
        self.lists.push_front(&mut self.links, list, id);
    }

    /// The first page found scanning lists `min..N` upward, each from its
    /// head, passing over page `skip`.
    pub fn find(&self, min: usize, skip: Option<u32>) -> Option<u32> {
        (min..N).find_map(|i| self.lists.first_except(&self.links, i, skip))
    }

    /// Walks every list, then checks that each of the table's `pages`
    /// pages is on the list `want` gives for it (`None`: on none), and on it
    /// exactly once. Returns the first violation.
    pub fn check(&self, pages: usize, want: impl Fn(usize) -> Option<usize>) -> Result<(), String> {
        let table = &self.links[..pages.min(self.links.len())];
        self.lists
            .check(table, |_, page| page.list())
            .map_err(|e| format!("page lists: {e}"))?;
        for id in 0..pages {
            let (want, have) = (want(id), self.list_of(id as u32));
            if want != have {
                return Err(format!(
                    "page {id}: on list {have:?}, should be on {want:?}"
                ));
            }
        }
        match (pages..self.links.len()).find(|&id| self.links[id].list().is_some()) {
            Some(id) => Err(format!("page {id}, past the table, has list links")),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relist_find_and_check() {
        let mut lists = ChunkLists::<8>::new();
        // What each of 4 pages should be on.
        let mut want = [None; 4];
        lists.check(4, |id| want[id]).unwrap();
        for (id, list) in [(0, 3), (1, 3), (2, 5)] {
            want[id as usize] = Some(list);
            lists.relist(id, Some(list));
        }
        lists.check(4, |id| want[id]).unwrap();
        // Newest first; from 4 up only list 5; `skip` passes over a head.
        assert_eq!(lists.find(0, None), Some(1));
        assert_eq!(lists.find(0, Some(1)), Some(0));
        assert_eq!(lists.find(4, None), Some(2));
        assert_eq!(lists.find(4, Some(2)), None);
        assert_eq!(lists.find(6, None), None);
        // Moving a page between lists, and off them.
        lists.relist(0, Some(6));
        want[0] = Some(6);
        assert_eq!(lists.find(6, None), Some(0));
        lists.relist(1, None);
        lists.unlink(1);
        lists.unlink(3);
        want[1] = None;
        assert_eq!(lists.list_of(1), None);
        assert_eq!(lists.find(0, None), Some(2));
        lists.check(4, |id| want[id]).unwrap();
        // A page that belongs on a list but is not on it, and one on a list
        // past the table.
        want[3] = Some(3);
        assert_eq!(
            lists.check(4, |id| want[id]).unwrap_err(),
            "page 3: on list None, should be on Some(3)"
        );
        want[3] = None;
        assert_eq!(
            lists.check(2, |id| want[id]).unwrap_err(),
            "page lists: list 5 links to 2, past the table of 2"
        );
        for id in [0, 2] {
            lists.relist(id, None);
        }
        assert_eq!(lists.find(0, None), None);
        lists.check(4, |_| None).unwrap();
    }
}
