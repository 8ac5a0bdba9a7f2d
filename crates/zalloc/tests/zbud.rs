//! zbud through its own API: the kernel's geometry, where buddies go, the
//! list scan and refused handles (`zalloc::zbud`; the shared suite is
//! `suite.rs`).

mod common;

use zalloc::zbud::*;
use zpool::ZPool;

#[test]
fn geometry_is_the_kernels() {
    let pool = ZBud::new(4096, None).unwrap();
    assert_eq!(pool.chunk_size(), 64);
    common::assert_too_large(&pool, 3968);
    let big = ZBud::new(65536, None).unwrap();
    assert_eq!(big.chunk_size(), 1024);
    assert_eq!(big.max_object_size(), 65536 - 2048);
}

#[test]
fn buddies_pair_up_first_then_last() {
    let pool = ZBud::new(4096, None).unwrap();
    // 62 chunks + 1 chunk fill a page; the next object needs a new one.
    let a = pool.malloc(3968).unwrap();
    let b = pool.malloc(64).unwrap();
    assert_eq!(pool.total_pages(), 1);
    let c = pool.malloc(1).unwrap();
    assert_eq!(pool.total_pages(), 2);
    // FIRST at offset 64, LAST right-justified.
    let pa = pool.read_begin(a, 1).unwrap().cast::<u8>().as_ptr() as usize;
    let pb = pool.read_begin(b, 1).unwrap().cast::<u8>().as_ptr() as usize;
    // SAFETY: both reads are outstanding and ended once here.
    unsafe {
        pool.read_end(a);
        pool.read_end(b);
    }
    assert_eq!(pa % 4096, 64);
    assert_eq!(pb % 4096, 4096 - 64);
    assert_eq!(pa / 4096, pb / 4096);
    pool.write(a, &[7; 3968]).unwrap();
    pool.write(b, &[9; 64]).unwrap();
    pool.free(a).unwrap();
    // The first buddy's space (62 chunks free) takes a 3000-byte object.
    let d = pool.malloc(3000).unwrap();
    assert_eq!(pool.total_pages(), 2);
    assert_eq!(common::read_vec(&pool, b, 64), [9; 64]);
    for h in [b, c, d] {
        pool.free(h).unwrap();
    }
    assert_eq!(pool.total_pages(), 0);
    pool.check_invariants().unwrap();
}

#[test]
fn lists_are_scanned_from_the_needed_size_up() {
    let pool = ZBud::new(4096, None).unwrap();
    // Two pages with one buddy each: 10 and 40 chunks free.
    let a = pool.malloc(53 * 64).unwrap(); // page 1: 10 free
    let b = pool.malloc(23 * 64).unwrap(); // page 2: 40 free
    assert_eq!(pool.total_pages(), 2);
    let c = pool.malloc(20 * 64).unwrap(); // only page 2 fits
    assert_eq!(pool.total_pages(), 2);
    let d = pool.malloc(11 * 64).unwrap(); // page 1 has 10: new page
    assert_eq!(pool.total_pages(), 3);
    pool.check_invariants().unwrap();
    for h in [a, b, c, d] {
        pool.free(h).unwrap();
    }
    pool.check_invariants().unwrap();
}

#[test]
fn stale_and_foreign_handles_are_refused() {
    let pool = ZBud::new(4096, None).unwrap();
    let other = ZBud::new(4096, None).unwrap();
    let h = pool.malloc(100).unwrap();
    let h2 = common::assert_handle_refusals(&pool, &other, h);
    assert!(pool.read_begin(h, 1).is_err());
    pool.free(h2).unwrap();
    pool.check_invariants().unwrap();
}
