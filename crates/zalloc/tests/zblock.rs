//! zblock through its own API: the type for each size, the computed tables
//! and refused handles (`zalloc::zblock`; the shared suite is `suite.rs`).

mod common;

use zalloc::zblock::*;
use zpool::{ZHandle, ZPool};

#[test]
fn sizes_go_to_the_smallest_slot_that_holds_them() {
    let pool = ZBlock::new(4096, None).unwrap();
    let types = pool.block_types();
    assert_eq!(types.len(), 37);
    assert_eq!(pool.type_for(1).unwrap(), 0);
    assert_eq!(pool.type_for(144).unwrap(), 0, "equal to a slot: that slot");
    assert_eq!(pool.type_for(145).unwrap(), 1);
    // The largest-slot edge case: 4080 fits the last type, 4081 nothing.
    assert_eq!(pool.type_for(4080).unwrap(), 36);
    common::assert_too_large(&pool, 4080);
    let h = pool.malloc(4080).unwrap();
    pool.write(h, &[0xee; 4080]).unwrap();
    assert_eq!(common::read_vec(&pool, h, 4080), vec![0xee; 4080]);
    assert_eq!(pool.total_pages(), 4, "4080 B x 4 slots in 4 pages");
    pool.free(h).unwrap();
    assert_eq!(pool.total_pages(), 0);
    for (i, t) in types.iter().enumerate() {
        assert_eq!(pool.type_for(t.slot_size as usize).unwrap(), i);
    }
}

#[test]
fn larger_pages_have_computed_tables() {
    for ps in [8192, 16384, 65536] {
        let pool = ZBlock::new(ps, None).unwrap();
        assert!(pool.max_object_size() >= ps - 16);
        let h = pool.malloc(pool.max_object_size()).unwrap();
        let small = pool.malloc(1).unwrap();
        pool.write(small, b"x").unwrap();
        pool.free(h).unwrap();
        pool.free(small).unwrap();
        assert_eq!(pool.total_pages(), 0);
    }
}

#[test]
fn stale_and_foreign_handles_are_refused() {
    let pool = ZBlock::new(4096, None).unwrap();
    let other = ZBlock::new(4096, None).unwrap();
    let h = pool.malloc(100).unwrap();
    let keep = pool.malloc(100).unwrap();
    let h2 = common::assert_handle_refusals(&pool, &other, h);
    // A slot index past the type's slot count.
    let forged = ZHandle::from_raw(keep.to_raw() | 0xff).unwrap();
    assert_eq!(pool.free(forged).unwrap_err(), common::FOREIGN);
    pool.free(h2).unwrap();
    pool.free(keep).unwrap();
    pool.check_invariants().unwrap();
}
