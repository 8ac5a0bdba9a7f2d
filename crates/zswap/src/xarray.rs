//! The nodes of zswap's xarrays: how many `struct xa_node`s the kernel's
//! trees hold for a set of swap offsets.
//!
//! zswap keeps one xarray per 64 MiB of a swap area
//! (`ZSWAP_ADDRESS_SPACE_SHIFT`, 2^14 pages), indexed by the whole swap
//! offset. An xarray of one entry at index 0 keeps it in its head, with no
//! node; otherwise it is a tree of 64-slot nodes just tall enough for its
//! largest index (a node emptied is freed, and a top node with only slot 0
//! used is removed by `xas_shrink`), with one node per 64-index run, per
//! 4096-index run, and so on up that height, wherever an index is present.
//!
//! Owns that count; pure: it is told the offsets, in ascending order, and
//! touches nothing.

/// `ZSWAP_ADDRESS_SPACE_SHIFT`: pages of swap per xarray.
pub const TREE_SHIFT: u32 = 14;

/// `XA_CHUNK_SHIFT`: slots per node, as a power of two.
pub const CHUNK_SHIFT: u32 = 6;

/// The nodes of one xarray holding `indexes` (ascending, distinct).
fn tree_nodes(indexes: &[u64]) -> u64 {
    let Some(&max) = indexes.last() else {
        return 0;
    };
    if max == 0 {
        // A single entry at index 0 lives in the head.
        return 0;
    }
    let bits = 64 - max.leading_zeros();
    let height = bits.div_ceil(CHUNK_SHIFT);
    let mut nodes = 0;
    for level in 0..height {
        let shift = CHUNK_SHIFT * (level + 1);
        let mut last = None;
        for &i in indexes {
            let prefix = if shift >= 64 { 0 } else { i >> shift };
            if last != Some(prefix) {
                nodes += 1;
                last = Some(prefix);
            }
        }
    }
    nodes
}

/// The nodes of zswap's xarrays holding entries at `offsets` (swap
/// offsets of one swap area, ascending and distinct).
pub fn nodes<I: IntoIterator<Item = u64>>(offsets: I) -> u64 {
    let mut total = 0;
    let mut tree = Vec::new();
    let mut current = None;
    for off in offsets {
        let t = off >> TREE_SHIFT;
        if current != Some(t) {
            total += tree_nodes(&tree);
            tree.clear();
            current = Some(t);
        }
        tree.push(off);
    }
    total + tree_nodes(&tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_and_heights() {
        assert_eq!(nodes([]), 0);
        // Index 0 alone: in the head.
        assert_eq!(nodes([0]), 0);
        // Any other index needs a node; 0..=63 share one.
        assert_eq!(nodes([5]), 1);
        assert_eq!(nodes([0, 63]), 1);
        // 64 needs a second level: a root and two leaves.
        assert_eq!(nodes([0, 64]), 3);
        assert_eq!(nodes([64]), 2);
        // 4096 = 64^2: three levels.
        assert_eq!(nodes([4096]), 3);
    }

    #[test]
    fn full_trees_count_every_node() {
        // A full first tree (16384 offsets): 256 leaves, 4 middle nodes, a
        // root.
        assert_eq!(nodes(0..1 << TREE_SHIFT), 256 + 4 + 1);
        // The second tree's indexes start at 16384: height 3 as well, its
        // own root.
        let second = (1u64 << TREE_SHIFT)..(2 << TREE_SHIFT);
        assert_eq!(nodes(second.clone()), 256 + 4 + 1);
        assert_eq!(nodes((0..1 << TREE_SHIFT).chain(second)), 2 * 261);
    }
}
