//! The process's resident set follows every allocator: pages come from the
//! OS as objects are stored and go back when they are freed.
//!
//! One test in its own binary, so nothing else allocates while RSS is read.

mod common;

use common::SUBJECTS;
use testkit::rss::{free_every_other, rss_kib};
use testkit::Rng;
use zpool::ZHandle;

#[test]
fn rss_follows_every_allocator() {
    const MIB: u64 = 1024;
    let data: Vec<u8> = (0..65536u32).map(|i| (i * 7 + 3) as u8).collect();
    for s in SUBJECTS {
        let pool = s.open(4096);
        let max = pool.max_object_size();
        // The handle list is made (and touched) before the first reading.
        let mut handles = vec![ZHandle::from_raw(1).unwrap(); 150_000];
        handles.clear();
        let start = rss_kib();
        let mut rng = Rng(7);
        let mut stored = 0;
        while stored < 128 << 20 {
            let len = rng.range(64, max);
            let h = pool.malloc(len).unwrap();
            pool.write(h, &data[..len]).unwrap();
            handles.push(h);
            stored += len;
        }
        let pool_kib = pool.total_pages() as u64 * 4;
        let full = rss_kib();
        let grew = full.saturating_sub(start);
        eprintln!(
            "{}: pool {pool_kib} KiB, RSS {start} -> {full} KiB",
            s.label
        );
        assert!(pool_kib >= 128 * MIB, "{}", s.label);
        assert!(
            grew + 2 * MIB >= pool_kib && grew <= pool_kib + 12 * MIB,
            "{}: RSS grew {grew} KiB for a {pool_kib} KiB pool",
            s.label
        );

        // Free every other object (and compact where the allocator can):
        // whatever pages the pool gives back leave the resident set.
        free_every_other(&mut handles, |h| pool.free(h).unwrap());
        pool.compact();
        let half_kib = pool.total_pages() as u64 * 4;
        let half = rss_kib();
        eprintln!(
            "{}: half freed: pool {half_kib} KiB, RSS {half} KiB",
            s.label
        );
        assert!(
            half <= start + half_kib + 12 * MIB,
            "{}: RSS {half} KiB for a {half_kib} KiB pool",
            s.label
        );

        for h in handles.drain(..) {
            pool.free(h).unwrap();
        }
        assert_eq!(pool.total_pages(), 0);
        let end = rss_kib();
        eprintln!("{}: all freed: RSS {end} KiB (started at {start})", s.label);
        // What may stay: page records, handle tables and slot metadata sized
        // for the peak, and what the C allocator keeps of them.
        assert!(
            end <= start + 8 * MIB,
            "{}: RSS {end} KiB did not fall back to {start} KiB",
            s.label
        );
    }
}
