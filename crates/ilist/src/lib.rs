//! Intrusive doubly linked lists of table indexes.
//!
//! zmem's allocators keep their pages (zbud, z3fold) and zspages (zsmalloc)
//! in a table, a `Vec` of records named by their index, and put the records
//! on lists: zsmalloc's fullness groups, the unbuddied lists of zbud and
//! z3fold. This crate is those lists, as the kernel's `list_head` is theirs:
//! [`Lists`] holds the first index of each of `N` lists, and each record
//! carries its [`Links`] (the indexes before and after it) where its owner
//! wants them, reached through [`Linked`]. The lists never allocate: every
//! operation is a few loads and stores into the owner's table, generic and
//! inlined, bounds-checked as any indexing of a slice is.
//!
//! A record is on at most one list at a time, and the lists do not record
//! which: the owner does (zsmalloc's fullness group, zbud's chunk count)
//! and names it to [`Lists::remove`]. [`Lists::check`] walks the lists and
//! compares them with what the owner says.
//!
//! ```
//! use ilist::{Links, Lists};
//!
//! // Three records, two lists.
//! let mut nodes = [Links::NONE; 3];
//! let mut lists = Lists::<2>::new();
//! lists.push_front(&mut nodes, 0, 2);
//! lists.push_front(&mut nodes, 0, 1);
//! lists.insert(&mut nodes, 1, None, 0);
//! assert_eq!(lists.iter(&nodes, 0).collect::<Vec<_>>(), [1, 2]);
//! lists.remove(&mut nodes, 0, 1);
//! assert_eq!(lists.head(0), Some(2));
//! // Record 0 is on list 1, record 2 on list 0, record 1 on none.
//! let on = [Some(1), None, Some(0)];
//! assert_eq!(lists.check(&nodes, |id, _| on[id as usize]), Ok([1, 1]));
//! ```

/// No record: the end of a list, or the head of an empty one.
const NIL: u32 = u32::MAX;

/// A record's place on a list: the records before and after it.
///
/// A record on no list has [`Links::NONE`], as has the only record of a
/// list. Eight bytes with no padding, to sit in a record without growing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Links {
    prev: u32,
    next: u32,
}

impl Links {
    /// Nothing before or after: the links of a record on no list.
    pub const NONE: Links = Links {
        prev: NIL,
        next: NIL,
    };

    /// The record before this one on its list, if any.
    #[inline]
    pub fn prev(&self) -> Option<u32> {
        (self.prev != NIL).then_some(self.prev)
    }

    /// The record after this one on its list, if any.
    #[inline]
    pub fn next(&self) -> Option<u32> {
        (self.next != NIL).then_some(self.next)
    }
}

impl Default for Links {
    fn default() -> Self {
        Links::NONE
    }
}

/// A record that carries its own [`Links`].
pub trait Linked {
    /// The record's links.
    fn links(&self) -> &Links;
    /// The record's links, to change.
    fn links_mut(&mut self) -> &mut Links;
}

/// Implements [`Linked`] for a record type whose links are one of its
/// fields: `ilist::impl_linked!(Record, links);`.
#[macro_export]
macro_rules! impl_linked {
    ($record:ty, $field:ident) => {
        impl $crate::Linked for $record {
            #[inline]
            fn links(&self) -> &$crate::Links {
                &self.$field
            }

            #[inline]
            fn links_mut(&mut self) -> &mut $crate::Links {
                &mut self.$field
            }
        }
    };
}

impl Linked for Links {
    #[inline]
    fn links(&self) -> &Links {
        self
    }

    #[inline]
    fn links_mut(&mut self) -> &mut Links {
        self
    }
}

/// `N` lists of the records of one table (`nodes`, passed to each call),
/// each named by its number `0..N`.
///
/// Record indexes are `u32`, `u32::MAX` excluded. Every call that takes a
/// record or a list panics if its index is past the table or `N`, as
/// indexing a slice does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lists<const N: usize> {
    /// `heads[i]`: the first record of list `i`, or [`NIL`].
    heads: [u32; N],
}

impl<const N: usize> Default for Lists<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Lists<N> {
    /// `N` empty lists.
    pub const fn new() -> Self {
        Lists { heads: [NIL; N] }
    }

    /// The first record of list `list`, if any.
    #[inline]
    pub fn head(&self, list: usize) -> Option<u32> {
        let head = self.heads[list];
        (head != NIL).then_some(head)
    }

    /// True if list `list` has no record.
    #[inline]
    pub fn is_empty(&self, list: usize) -> bool {
        self.heads[list] == NIL
    }

    /// The record after `id` on its list, if any.
    #[inline]
    pub fn next<T: Linked>(nodes: &[T], id: u32) -> Option<u32> {
        nodes[id as usize].links().next()
    }

    /// The first record of list `list` other than `skip`.
    #[inline]
    pub fn first_except<T: Linked>(
        &self,
        nodes: &[T],
        list: usize,
        skip: Option<u32>,
    ) -> Option<u32> {
        let mut cur = self.heads[list];
        while cur != NIL && Some(cur) == skip {
            cur = nodes[cur as usize].links().next;
        }
        (cur != NIL).then_some(cur)
    }

    /// Puts record `id`, which is on no list, at the head of list `list`.
    #[inline]
    pub fn push_front<T: Linked>(&mut self, nodes: &mut [T], list: usize, id: u32) {
        self.insert(nodes, list, None, id);
    }

    /// Puts record `id`, which is on no list, on list `list` just after
    /// record `after` (which must be on `list`), or at its head if `after`
    /// is `None`.
    #[inline]
    pub fn insert<T: Linked>(&mut self, nodes: &mut [T], list: usize, after: Option<u32>, id: u32) {
        debug_assert!(id != NIL && Some(id) != after);
        let (prev, next) = match after {
            Some(at) => (at, nodes[at as usize].links().next),
            None => (NIL, self.heads[list]),
        };
        if prev == NIL {
            self.heads[list] = id;
        } else {
            nodes[prev as usize].links_mut().next = id;
        }
        if next != NIL {
            nodes[next as usize].links_mut().prev = id;
        }
        *nodes[id as usize].links_mut() = Links { prev, next };
    }

    /// Takes record `id` off list `list`, which it must be on, and leaves it
    /// [`Links::NONE`].
    #[inline]
    pub fn remove<T: Linked>(&mut self, nodes: &mut [T], list: usize, id: u32) {
        let Links { prev, next } = std::mem::replace(nodes[id as usize].links_mut(), Links::NONE);
        if prev == NIL {
            debug_assert_eq!(self.heads[list], id, "record {id} is not on list {list}");
            self.heads[list] = next;
        } else {
            nodes[prev as usize].links_mut().next = next;
        }
        if next != NIL {
            nodes[next as usize].links_mut().prev = prev;
        }
    }

    /// The records of list `list`, head first.
    pub fn iter<'a, T: Linked>(&self, nodes: &'a [T], list: usize) -> Iter<'a, T> {
        Iter {
            nodes,
            cur: self.heads[list],
        }
    }

    /// Walks every list and checks it against `list_of`, the list each
    /// record should be on (`None`: on none), called with the record's index
    /// and the record: every record reached is in the table, reached once,
    /// its `prev` link names the record before it, and `list_of` names the
    /// list it is on; every record not reached has [`Links::NONE`] and
    /// `list_of` says `None`. Returns the length of each list, or the first
    /// violation.
    pub fn check<T: Linked>(
        &self,
        nodes: &[T],
        list_of: impl Fn(u32, &T) -> Option<usize>,
    ) -> Result<[u32; N], String> {
        let mut reached = vec![false; nodes.len()];
        let mut lens = [0; N];
        for (list, &head) in self.heads.iter().enumerate() {
            let (mut prev, mut cur) = (NIL, head);
            while cur != NIL {
                let (Some(seen), Some(node)) =
                    (reached.get_mut(cur as usize), nodes.get(cur as usize))
                else {
                    return Err(format!(
                        "list {list} links to {cur}, past the table of {}",
                        nodes.len()
                    ));
                };
                if std::mem::replace(seen, true) {
                    return Err(format!("{cur} is on a list twice (list {list})"));
                }
                let links = node.links();
                if links.prev != prev {
                    return Err(format!(
                        "{cur} on list {list}: prev link {:?}, should be {:?}",
                        links.prev(),
                        (prev != NIL).then_some(prev)
                    ));
                }
                let says = list_of(cur, node);
                if says != Some(list) {
                    return Err(format!("{cur} is on list {list}, should be on {says:?}"));
                }
                lens[list] += 1;
                prev = cur;
                cur = links.next;
            }
        }
        for (id, (node, &seen)) in nodes.iter().zip(&reached).enumerate() {
            if seen {
                continue;
            }
            if let Some(list) = list_of(id as u32, node) {
                return Err(format!("{id} is on no list, should be on {list}"));
            }
            if *node.links() != Links::NONE {
                return Err(format!(
                    "{id} is on no list but has links {:?}",
                    node.links()
                ));
            }
        }
        Ok(lens)
    }
}

/// The records of one list, head first ([`Lists::iter`]).
#[derive(Debug)]
pub struct Iter<'a, T> {
    nodes: &'a [T],
    cur: u32,
}

impl<T: Linked> Iterator for Iter<'_, T> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if self.cur == NIL {
            return None;
        }
        let id = self.cur;
        self.cur = self.nodes[id as usize].links().next;
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record with other fields around its links, as the allocators'.
    #[derive(Clone, Copy, Debug, Default)]
    struct Record {
        list: Option<usize>,
        links: Links,
    }

    crate::impl_linked!(Record, links);

    fn contents<const N: usize>(lists: &Lists<N>, nodes: &[Record]) -> Vec<Vec<u32>> {
        (0..N).map(|l| lists.iter(nodes, l).collect()).collect()
    }

    #[test]
    fn push_insert_remove() {
        let mut nodes = [Record::default(); 5];
        let mut lists = Lists::<3>::new();
        assert!((0..3).all(|l| lists.is_empty(l) && lists.head(l).is_none()));
        for (id, list) in [(0, 1), (1, 1), (2, 1), (3, 2)] {
            lists.push_front(&mut nodes, list, id);
            nodes[id as usize].list = Some(list);
        }
        assert_eq!(contents(&lists, &nodes), [vec![], vec![2, 1, 0], vec![3]]);
        // After the head, after the tail.
        lists.insert(&mut nodes, 2, Some(3), 4);
        nodes[4].list = Some(2);
        assert_eq!(contents(&lists, &nodes)[2], [3, 4]);
        assert_eq!(lists.check(&nodes, |_, r| r.list), Ok([0, 3, 2]));
        assert_eq!(nodes[1].links.prev(), Some(2));
        assert_eq!(nodes[1].links.next(), Some(0));
        assert_eq!(Lists::<3>::next(&nodes, 2), Some(1));
        // Middle, head and tail.
        for (id, list) in [(1, 1), (2, 1), (4, 2)] {
            lists.remove(&mut nodes, list, id);
            nodes[id as usize].list = None;
            assert_eq!(nodes[id as usize].links, Links::NONE);
        }
        assert_eq!(contents(&lists, &nodes), [vec![], vec![0], vec![3]]);
        assert_eq!(lists.check(&nodes, |_, r| r.list), Ok([0, 1, 1]));
        lists.remove(&mut nodes, 1, 0);
        lists.remove(&mut nodes, 2, 3);
        assert!((0..3).all(|l| lists.is_empty(l)));
        assert_eq!(lists.check(&nodes, |_, _| None), Ok([0, 0, 0]));
    }

    #[test]
    fn first_except_passes_over_one_record() {
        let mut nodes = [Links::NONE; 3];
        let mut lists = Lists::<1>::new();
        assert_eq!(lists.first_except(&nodes, 0, None), None);
        lists.push_front(&mut nodes, 0, 0);
        assert_eq!(lists.first_except(&nodes, 0, Some(0)), None);
        assert_eq!(lists.first_except(&nodes, 0, Some(2)), Some(0));
        lists.push_front(&mut nodes, 0, 1);
        assert_eq!(lists.first_except(&nodes, 0, None), Some(1));
        assert_eq!(lists.first_except(&nodes, 0, Some(1)), Some(0));
    }

    #[test]
    fn check_reports_each_violation() {
        let mut nodes = [Record::default(); 4];
        let mut lists = Lists::<2>::new();
        for id in [0, 1] {
            lists.push_front(&mut nodes, 0, id);
            nodes[id as usize].list = Some(0);
        }
        assert_eq!(lists.check(&nodes, |_, r| r.list), Ok([2, 0]));
        // The owner says another list, or none.
        assert_eq!(
            lists.check(&nodes, |id, r| if id == 0 { Some(1) } else { r.list }),
            Err("0 is on list 0, should be on Some(1)".into())
        );
        assert_eq!(
            lists.check(&nodes, |id, r| if id == 3 { Some(1) } else { r.list }),
            Err("3 is on no list, should be on 1".into())
        );
        // A table too short for the lists.
        assert_eq!(
            lists.check(&nodes[..1], |_, r| r.list),
            Err("list 0 links to 1, past the table of 1".into())
        );
        // Broken links: a stale prev, a cycle, links left on an unlisted record.
        let mut bad = nodes;
        bad[0].links.prev = 3;
        assert_eq!(
            lists.check(&bad, |_, r| r.list),
            Err("0 on list 0: prev link Some(3), should be Some(1)".into())
        );
        let mut bad = nodes;
        bad[0].links.next = 1;
        assert_eq!(
            lists.check(&bad, |_, r| r.list),
            Err("1 is on a list twice (list 0)".into())
        );
        let mut bad = nodes;
        bad[2].links.next = 0;
        assert_eq!(
            lists.check(&bad, |_, r| r.list),
            Err(format!("2 is on no list but has links {:?}", bad[2].links))
        );
    }

    #[test]
    fn links_fit_a_record_without_padding() {
        assert_eq!(std::mem::size_of::<Links>(), 8);
        assert_eq!(std::mem::align_of::<Links>(), 4);
    }
}
