//! z3fold through its own API: where the three buddies go, headless pages,
//! in-page compaction and refused handles (`zalloc::z3fold`; the shared
//! suite is `suite.rs`).

mod common;

use zalloc::z3fold::*;
use zpool::{ZHandle, ZPool, ZPoolError};

fn offset_of(pool: &Z3Fold, h: ZHandle) -> usize {
    let p = pool.read_begin(h, 0).unwrap().cast::<u8>().as_ptr() as usize;
    // SAFETY: the read was just begun and is ended once.
    unsafe { pool.read_end(h) };
    p % pool.page_size()
}

/// A 4 KiB pool and the three objects of its one page, made in this order:
/// FIRST and LAST of 640 bytes (10 chunks), and a MIDDLE of `middle` bytes
/// after FIRST.
fn first_last_middle(middle: usize) -> (Z3Fold, ZHandle, ZHandle, ZHandle) {
    let pool = Z3Fold::new(4096, None).unwrap();
    let first = pool.malloc(640).unwrap();
    let last = pool.malloc(640).unwrap();
    let middle = pool.malloc(middle).unwrap();
    (pool, first, last, middle)
}

#[test]
fn three_buddies_share_a_page() {
    let (pool, a, b, c) = first_last_middle(640);
    assert_eq!(pool.total_pages(), 1);
    assert_eq!(offset_of(&pool, a), 64);
    assert_eq!(offset_of(&pool, b), 4096 - 640);
    assert_eq!(offset_of(&pool, c), 64 + 640);
    let d = pool.malloc(64).unwrap();
    assert_eq!(pool.total_pages(), 2, "a page never has a fourth object");
    pool.check_invariants().unwrap();
    for h in [a, b, c, d] {
        pool.free(h).unwrap();
    }
    assert_eq!(pool.total_pages(), 0);
    pool.check_invariants().unwrap();
}

#[test]
fn big_objects_go_headless() {
    let pool = Z3Fold::new(4096, None).unwrap();
    assert_eq!(pool.headless_threshold(), 3968);
    let a = pool.malloc(3968).unwrap();
    let b = pool.malloc(3969).unwrap();
    let c = pool.malloc(4096).unwrap();
    assert_eq!(pool.total_pages(), 3);
    pool.write(c, &[5; 4096]).unwrap();
    assert_eq!(offset_of(&pool, c), 0);
    assert_eq!(common::read_vec(&pool, c, 4096), vec![5; 4096]);
    assert!(matches!(
        pool.malloc(4097),
        Err(ZPoolError::TooLarge { .. })
    ));
    for h in [a, b, c] {
        pool.free(h).unwrap();
    }
    pool.check_invariants().unwrap();
}

#[test]
fn a_lone_middle_moves_to_first_and_keeps_its_bytes() {
    let (pool, a, b, c) = first_last_middle(1000);
    pool.write(c, &[0xc3; 1000]).unwrap();
    // Keep the middle alone with a second page holding nothing that fits.
    pool.free(a).unwrap();
    pool.free(b).unwrap();
    assert_eq!(pool.total_pages(), 1);
    let r = pool.compact();
    // Single object, no other page: it slides to FIRST in place.
    assert_eq!((r.objs_moved, r.pages_freed), (1, 0));
    assert_eq!(offset_of(&pool, c), 64);
    assert_eq!(common::read_vec(&pool, c, 1000), vec![0xc3; 1000]);
    pool.check_invariants().unwrap();
    pool.free(c).unwrap();
}

#[test]
fn a_single_object_moves_to_another_page() {
    let pool = Z3Fold::new(4096, None).unwrap();
    let a = pool.malloc(2000).unwrap(); // page 1 FIRST
    let b = pool.malloc(1900).unwrap(); // page 1 LAST
    let c = pool.malloc(2000).unwrap(); // page 2 FIRST
    let d = pool.malloc(1900).unwrap(); // page 2 LAST
    assert_eq!(pool.total_pages(), 2);
    pool.write(d, &[0xdd; 1900]).unwrap();
    pool.free(b).unwrap(); // page 1 can take 31 chunks
    pool.free(c).unwrap(); // page 2 holds d alone
    let r = pool.compact();
    assert_eq!(r.pages_freed, 1);
    assert_eq!(pool.total_pages(), 1);
    assert_eq!(common::read_vec(&pool, d, 1900), vec![0xdd; 1900]);
    assert_eq!(pool.stats().pages_compacted, 1);
    pool.check_invariants().unwrap();
    pool.free(a).unwrap();
    pool.free(d).unwrap();
    assert_eq!(pool.total_pages(), 0);
}

#[test]
fn a_read_object_is_not_moved() {
    let (pool, a, b, c) = first_last_middle(640);
    pool.free(a).unwrap();
    pool.free(b).unwrap();
    let _held = pool.read_begin(c, 10).unwrap();
    assert_eq!(pool.compact().objs_moved, 0);
    assert_eq!(pool.queued_pages(), 1, "queued again");
    // SAFETY: the read begun above is outstanding and ended once.
    unsafe { pool.read_end(c) };
    assert_eq!(pool.compact().objs_moved, 1);
    pool.free(c).unwrap();
    pool.check_invariants().unwrap();
}

#[test]
fn stale_and_foreign_handles_are_refused() {
    let pool = Z3Fold::new(4096, None).unwrap();
    let other = Z3Fold::new(4096, None).unwrap();
    let h = pool.malloc(100).unwrap();
    let h2 = common::assert_handle_refusals(&pool, &other, h);
    pool.free(h2).unwrap();
    pool.check_invariants().unwrap();
}
