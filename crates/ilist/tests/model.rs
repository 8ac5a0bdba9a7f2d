//! The lists against a model: one `VecDeque` per list, under random pushes,
//! insertions after a record and removals.

use std::collections::VecDeque;

use ilist::{Links, Lists};
use proptest::prelude::*;

/// Lists under test.
const N: usize = 4;
/// Records in the table.
const RECORDS: u32 = 12;

#[derive(Clone, Debug)]
enum Op {
    /// Put a record at the head of a list (if it is on none).
    Push(u32, usize),
    /// Put a record after the `n`-th record of a list, modulo its length
    /// (at the head of an empty one), if it is on none.
    InsertAfter(u32, usize, usize),
    /// Take a record off its list, if it is on one.
    Remove(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..RECORDS, 0..N).prop_map(|(id, l)| Op::Push(id, l)),
        (0..RECORDS, 0..N, 0..RECORDS as usize).prop_map(|(id, l, n)| Op::InsertAfter(id, l, n)),
        (0..RECORDS).prop_map(Op::Remove),
    ]
}

proptest! {
    #[test]
    fn lists_match_a_vecdeque_model(ops in prop::collection::vec(op(), 1..200)) {
        let mut nodes = vec![Links::NONE; RECORDS as usize];
        let mut lists = Lists::<N>::new();
        let mut model: [VecDeque<u32>; N] = Default::default();
        // The list each record is on.
        let mut on: Vec<Option<usize>> = vec![None; RECORDS as usize];
        for op in ops {
            match op {
                Op::Push(id, l) if on[id as usize].is_none() => {
                    lists.push_front(&mut nodes, l, id);
                    model[l].push_front(id);
                    on[id as usize] = Some(l);
                }
                Op::InsertAfter(id, l, n) if on[id as usize].is_none() => {
                    if model[l].is_empty() {
                        lists.insert(&mut nodes, l, None, id);
                        model[l].push_front(id);
                    } else {
                        let at = n % model[l].len();
                        lists.insert(&mut nodes, l, Some(model[l][at]), id);
                        model[l].insert(at + 1, id);
                    }
                    on[id as usize] = Some(l);
                }
                Op::Remove(id) => {
                    if let Some(l) = on[id as usize].take() {
                        lists.remove(&mut nodes, l, id);
                        model[l].retain(|&x| x != id);
                    }
                }
                _ => {}
            }
            for (l, want) in model.iter().enumerate() {
                let have: Vec<u32> = lists.iter(&nodes, l).collect();
                prop_assert_eq!(&have, &Vec::from(want.clone()));
                prop_assert_eq!(lists.head(l), want.front().copied());
                prop_assert_eq!(lists.is_empty(l), want.is_empty());
                let front = want.front().copied();
                prop_assert_eq!(
                    lists.first_except(&nodes, l, front),
                    want.iter().copied().find(|&x| Some(x) != front)
                );
            }
            let lens = lists.check(&nodes, |id, _| on[id as usize]).map_err(TestCaseError::fail)?;
            prop_assert_eq!(lens.to_vec(), model.iter().map(|d| d.len() as u32).collect::<Vec<_>>());
        }
    }
}
