//! Block types: how many slots of which size a block of how many pages has.
//!
//! On 4 KiB pages the table is the one of the zblock v4 patch: 37 types,
//! at most 64 slots a block (`SLOT_BITS` 6), blocks of 1 to 8 pages. For
//! other page sizes the patch's tables are not in our brief, so zmem computes
//! its own (see [`computed_table`]); they are zmem's, not the kernel's.
//!
//! A slot's size follows from the block: `round_down((pages * PAGE_SIZE -
//! header) / slots, 8)` with a 48-byte block header.

use serde::Serialize;

/// Bytes of the header at the start of every block (slot bitmap, list link,
/// RCU head, type and free count in the kernel: 48 bytes on 64-bit).
pub const BLOCK_HEADER: usize = 48;

/// Most pages a block may have.
pub const MAX_BLOCK_PAGES: u32 = 8;

/// Slots and pages of each 4 KiB block type, in ascending slot size, from the
/// zblock v4 patch.
pub const KERNEL_4K: [(u32, u32); 37] = [
    (28, 1),
    (18, 1),
    (12, 1),
    (10, 1),
    (17, 2),
    (15, 2),
    (13, 2),
    (6, 1),
    (11, 2),
    (5, 1),
    (19, 4),
    (9, 2),
    (17, 4),
    (4, 1),
    (23, 6),
    (11, 3),
    (7, 2),
    (10, 3),
    (19, 6),
    (6, 2),
    (14, 5),
    (8, 3),
    (5, 2),
    (12, 5),
    (9, 4),
    (15, 7),
    (2, 1),
    (15, 8),
    (9, 5),
    (12, 7),
    (13, 8),
    (6, 4),
    (11, 8),
    (9, 7),
    (6, 5),
    (9, 8),
    (4, 4),
];

/// One block type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BlockType {
    /// Bytes per slot (a multiple of 8).
    pub slot_size: u32,
    /// Slots per block.
    pub slots: u32,
    /// Pages per block.
    pub pages: u32,
}

impl BlockType {
    /// The type of a block of `pages` pages of `page_size` bytes cut into
    /// `slots` slots.
    pub fn new(page_size: usize, slots: u32, pages: u32) -> BlockType {
        let usable = pages as usize * page_size - BLOCK_HEADER;
        BlockType {
            slot_size: ((usable / slots as usize) & !7) as u32,
            slots,
            pages,
        }
    }
}

/// Most slots a block may have on pages of `page_size` bytes: 64 on 4 KiB
/// pages (the patch's `SLOT_BITS` 6), 256 on larger ones (`SLOT_BITS` 8, as
/// the patch had for 16 KiB pages).
pub fn max_slots(page_size: usize) -> u32 {
    if page_size <= 4096 {
        64
    } else {
        256
    }
}

/// The block-type table for pages of `page_size` bytes, ascending in slot
/// size.
pub fn block_types(page_size: usize) -> Vec<BlockType> {
    if page_size == 4096 {
        KERNEL_4K
            .iter()
            .map(|&(slots, pages)| BlockType::new(page_size, slots, pages))
            .collect()
    } else {
        computed_table(page_size)
    }
}

/// Types zmem computes for page sizes the patch's table does not cover.
const COMPUTED_TYPES: usize = 60;

/// zmem's block-type table for any page size: 60 target sizes spaced
/// geometrically from the smallest slot a one-page block can have
/// ([`max_slots`] slots) to `page_size - 8`; for each target, the block
/// (1..=8 pages, 1..=max slots) whose slots are at least that large and cost
/// the fewest block bytes per slot (fewer pages on a tie); duplicates merged.
/// On 16 KiB pages it gives 60 types from 56 to 16376 bytes, about 10%
/// apart, with 99.6% of a block in slots on average (the 4 KiB patch table:
/// 99.2%).
pub fn computed_table(page_size: usize) -> Vec<BlockType> {
    let max = max_slots(page_size);
    let mut candidates = Vec::new();
    for pages in 1..=MAX_BLOCK_PAGES {
        for slots in 1..=max {
            let t = BlockType::new(page_size, slots, pages);
            if t.slot_size >= 8 {
                candidates.push(t);
            }
        }
    }
    let lo = f64::from(BlockType::new(page_size, max, 1).slot_size);
    let hi = (page_size - 8) as f64;
    let ratio = (hi / lo).powf(1.0 / (COMPUTED_TYPES - 1) as f64);
    let mut table: Vec<BlockType> = Vec::new();
    for i in 0..COMPUTED_TYPES {
        let target = if i == COMPUTED_TYPES - 1 {
            hi
        } else {
            lo * ratio.powi(i as i32)
        }
        .ceil() as u32;
        let best = candidates
            .iter()
            .filter(|c| c.slot_size >= target)
            .min_by_key(|c| {
                (
                    u64::from(c.pages) * page_size as u64 * 1024 / u64::from(c.slots),
                    c.pages,
                )
            })
            .copied();
        if let Some(best) = best {
            if table.last().is_none_or(|l| l.slot_size < best.slot_size) {
                table.push(best);
            }
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_4k_table_has_the_patchs_slot_sizes() {
        let sizes: Vec<u32> = block_types(4096).iter().map(|t| t.slot_size).collect();
        assert_eq!(
            sizes,
            [
                144, 224, 336, 400, 472, 536, 624, 672, 736, 808, 856, 904, 960, 1008, 1064, 1112,
                1160, 1224, 1288, 1352, 1456, 1528, 1624, 1696, 1808, 1904, 2024, 2176, 2264, 2384,
                2512, 2720, 2968, 3176, 3400, 3632, 4080
            ]
        );
    }

    #[test]
    fn every_table_ascends_and_fits_its_blocks() {
        for ps in [4096, 8192, 16384, 32768, 65536] {
            let t = block_types(ps);
            assert!(t.len() <= 64, "{ps}: {} types", t.len());
            assert!(t.windows(2).all(|w| w[0].slot_size < w[1].slot_size));
            for b in &t {
                assert!(b.slots >= 1 && b.slots <= max_slots(ps));
                assert!((1..=MAX_BLOCK_PAGES).contains(&b.pages));
                assert!(BLOCK_HEADER + (b.slots * b.slot_size) as usize <= b.pages as usize * ps);
            }
            assert!(t.last().unwrap().slot_size as usize >= ps - 16, "{ps}");
        }
    }
}
