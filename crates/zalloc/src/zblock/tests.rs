//! zblock's unit tests that need its internals (the parts of a handle);
//! the tests through its public API are `tests/zblock.rs`.

use super::*;

#[test]
fn a_block_fills_then_a_new_one_starts() {
    let pool = ZBlock::new(4096, None).unwrap();
    // Type 0: 28 slots of 144 bytes in one page.
    let hs: Vec<ZHandle> = (0..29).map(|_| pool.malloc(100).unwrap()).collect();
    assert_eq!(pool.total_pages(), 2);
    pool.check_invariants().unwrap();
    // Free one from the full first block: it goes to the list's tail, so
    // the next object still goes to the second block (the head).
    pool.free(hs[3]).unwrap();
    let h = pool.malloc(100).unwrap();
    let (_, (_, block, _, _)) = pool.parse(h).unwrap();
    assert_eq!(block, 1);
    pool.check_invariants().unwrap();
    for (i, h) in hs.into_iter().enumerate().chain([(99, h)]) {
        if i != 3 {
            pool.free(h).unwrap();
        }
    }
    assert_eq!(pool.total_pages(), 0);
    pool.check_invariants().unwrap();
}
