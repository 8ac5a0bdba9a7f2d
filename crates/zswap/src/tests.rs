//! The model's unit tests through its public API: a page stream with known
//! counts, loads, the limit and its hysteresis, the shrink worker's LRU
//! order, and the metadata's arithmetic.

use zcomp::Algorithm;
use zsmalloc::{Pool, PoolConfig};

use crate::{Loaded, Outcome, Reject, Zswap, ZswapConfig};

const PAGE: usize = 4096;

fn noise(seed: u32) -> Vec<u8> {
    testkit::noise(PAGE, seed)
}

/// A page that compresses a little (noise, then zeros): to more than
/// zsmalloc's huge class size, so one pool page each, and less than a page,
/// so it is stored compressed with writeback off too.
fn nearly_noise(seed: u32) -> Vec<u8> {
    let mut page = testkit::noise(3900, seed);
    page.resize(PAGE, 0);
    page
}

fn compressed(o: Outcome) -> bool {
    matches!(o, Outcome::Compressed { length } if length > 3700 && length < 4096)
}

fn text(seed: u32) -> Vec<u8> {
    let mut page = Vec::with_capacity(PAGE);
    let mut i = 0u32;
    while page.len() < PAGE {
        page.extend_from_slice(format!("line {i} of page {seed}: zswap keeps it\n").as_bytes());
        i += 1;
    }
    page.truncate(PAGE);
    page
}

fn model(totalram_pages: u64, writeback: bool) -> Zswap {
    let mut config = ZswapConfig::new(Algorithm::Lzo, totalram_pages, 2);
    config.writeback = writeback;
    Zswap::new(config).unwrap()
}

#[test]
fn a_page_stream_gives_known_counts() {
    let mut z = model(1 << 20, true);
    let mut lengths = Vec::new();
    let mut off = 0u64;
    let mut put = |z: &mut Zswap, page: &[u8]| {
        let o = z.store(off, page).unwrap();
        off += 1;
        o
    };
    for i in 0..10 {
        assert_eq!(put(&mut z, &vec![0u8; PAGE]), Outcome::ZeroFilled, "{i}");
    }
    for i in 0..7 {
        assert_eq!(put(&mut z, &noise(i + 1)), Outcome::Incompressible);
        lengths.push(PAGE);
    }
    for i in 0..20 {
        match put(&mut z, &text(i)) {
            Outcome::Compressed { length } => lengths.push(length as usize),
            other => panic!("text page {i}: {other:?}"),
        }
    }
    // A page of one non-zero byte: zswap (unlike zram) compresses it.
    match put(&mut z, &vec![0xa5u8; PAGE]) {
        Outcome::Compressed { length } => lengths.push(length as usize),
        other => panic!("same-filled page: {other:?}"),
    }
    let s = z.stats();
    assert_eq!(s.vmstat.swpout_zero, 10);
    assert_eq!(s.vmstat.zswpout, 28);
    assert_eq!(s.debugfs.stored_pages, 28);
    assert_eq!(s.debugfs.stored_incompressible_pages, 7);
    assert_eq!(s.compressed_bytes, lengths.iter().sum::<usize>() as u64);
    assert_eq!(s.vmstat.pswpout, 0);
    assert_eq!(s.debugfs.pool_limit_hit, 0);
    // The pool holds what a kernel-compat zsmalloc holds for these objects.
    let twin = Pool::new(PoolConfig::kernel_compat()).unwrap();
    let _handles: Vec<_> = lengths.iter().map(|&l| twin.malloc(l).unwrap()).collect();
    assert_eq!(s.debugfs.pool_total_size, twin.total_pages() as u64 * 4096);
    assert!(s.debugfs.pool_total_size >= 7 * 4096);
    // Every entry's metadata, apart from the pool.
    assert_eq!(s.metadata.entries, 28);
    assert!(s.metadata.total_bytes > 0);
    assert_eq!(
        s.memory_bytes(),
        s.debugfs.pool_total_size + s.metadata.total_bytes
    );
}

#[test]
fn loads_give_the_pages_back_and_free_them() {
    let mut z = model(1 << 20, true);
    let pages: Vec<Vec<u8>> = (0..12)
        .map(|i| match i % 3 {
            0 => vec![0u8; PAGE],
            1 => noise(i + 1),
            _ => text(i),
        })
        .collect();
    for (i, p) in pages.iter().enumerate() {
        z.store(i as u64, p).unwrap();
    }
    let mut back = vec![1u8; PAGE];
    for (i, p) in pages.iter().enumerate() {
        let from = z.load(i as u64, &mut back).unwrap();
        let want = if i % 3 == 0 {
            Loaded::ZeroFilled
        } else {
            Loaded::Zswap
        };
        assert_eq!(from, want, "page {i}");
        assert_eq!(&back, p, "page {i}");
    }
    let s = z.stats();
    assert_eq!(s.vmstat.zswpin, 8);
    assert_eq!(s.vmstat.swpin_zero, 4);
    assert_eq!(s.debugfs.stored_pages, 0);
    assert_eq!(s.debugfs.stored_incompressible_pages, 0);
    assert_eq!(s.debugfs.pool_total_size, 0);
    assert_eq!(s.compressed_bytes, 0);
    assert_eq!(z.load(99, &mut back).unwrap(), Loaded::Nothing);
    assert!(z.store(0, &[0u8; 100]).is_err());
}

#[test]
fn a_new_page_at_an_offset_replaces_the_old_one() {
    let mut z = model(1 << 20, true);
    z.store(5, &text(1)).unwrap();
    z.store(5, &noise(3)).unwrap();
    let s = z.stats();
    assert_eq!(s.debugfs.stored_pages, 1);
    assert_eq!(s.debugfs.stored_incompressible_pages, 1);
    // A zero page at an offset with an entry: the zero map wins on load,
    // the stale entry stays until the slot is invalidated.
    z.store(6, &text(2)).unwrap();
    z.store(6, &vec![0u8; PAGE]).unwrap();
    assert_eq!(z.stats().debugfs.stored_pages, 2);
    let mut back = vec![1u8; PAGE];
    assert_eq!(z.load(6, &mut back).unwrap(), Loaded::ZeroFilled);
    assert!(back.iter().all(|&b| b == 0));
    z.invalidate(6).unwrap();
    z.invalidate(5).unwrap();
    let s = z.stats();
    assert_eq!(s.debugfs.stored_pages, 0);
    assert_eq!(s.debugfs.pool_total_size, 0);
}

/// 100 pages of RAM: the pool may take 20 (`max_pool_percent` 20), and
/// stores come back at 18 (`accept_threshold_percent` 90). Each page here
/// takes one pool page.
#[test]
fn the_limit_and_its_hysteresis_without_writeback() {
    let mut z = model(100, false);
    let l = z.stats().limits;
    assert_eq!((l.max_pages, l.accept_thr_pages), (20, 18));
    for i in 0..20 {
        assert!(compressed(z.store(i, &nearly_noise(i as u32 + 1)).unwrap()));
    }
    assert_eq!(z.total_pages(), 20);
    // At the limit: refused, and counted.
    let r = Outcome::Rejected(Reject::PoolLimit);
    assert_eq!(z.store(20, &nearly_noise(100)).unwrap(), r);
    assert_eq!(z.store(21, &nearly_noise(101)).unwrap(), r);
    assert_eq!(z.stats().debugfs.pool_limit_hit, 2);
    // Below the limit but above the threshold: still refused, not counted.
    z.invalidate(0).unwrap();
    assert_eq!(z.total_pages(), 19);
    assert_eq!(z.store(22, &nearly_noise(102)).unwrap(), r);
    assert_eq!(z.stats().debugfs.pool_limit_hit, 2);
    assert!(z.stats().limits.reached_full);
    // At the threshold: accepted again, up to the limit.
    z.invalidate(1).unwrap();
    assert!(compressed(z.store(23, &nearly_noise(103)).unwrap()));
    assert!(compressed(z.store(24, &nearly_noise(104)).unwrap()));
    assert_eq!(z.store(25, &nearly_noise(105)).unwrap(), r);
    let s = z.stats();
    assert_eq!(s.debugfs.pool_limit_hit, 3);
    assert_eq!(s.debugfs.written_back_pages, 0);
    // Refused pages went to the swap device.
    assert_eq!(s.vmstat.pswpout, 4);
    assert_eq!(s.swap_device_pages, 4);
    let mut back = vec![0u8; PAGE];
    assert_eq!(z.load(25, &mut back).unwrap(), Loaded::SwapDevice);
    // Without writeback an incompressible page is refused, not kept as-is.
    let mut z = model(1 << 20, false);
    assert_eq!(
        z.store(0, &noise(7)).unwrap(),
        Outcome::Rejected(Reject::CompressFail)
    );
    assert_eq!(z.stats().debugfs.reject_compress_fail, 1);
}

/// With writeback, the store that finds the pool full is refused and the
/// shrink worker walks 32 entries from the LRU's head: the 20 entries are
/// referenced, so it rotates them all, then writes back the first 12 it
/// meets again, oldest first, leaving 8 pool pages.
#[test]
fn the_shrink_worker_writes_back_in_lru_order() {
    let mut z = model(100, true);
    for i in 0..20 {
        assert_eq!(
            z.store(i, &noise(i as u32 + 1)).unwrap(),
            Outcome::Incompressible
        );
    }
    assert_eq!(
        z.store(20, &noise(200)).unwrap(),
        Outcome::Rejected(Reject::PoolLimit)
    );
    let s = z.stats();
    assert_eq!(s.debugfs.pool_limit_hit, 1);
    assert_eq!(s.debugfs.written_back_pages, 12);
    assert_eq!(s.vmstat.zswpwb, 12);
    assert_eq!(s.vmstat.pswpout, 13);
    assert_eq!(s.debugfs.stored_pages, 8);
    assert_eq!(s.debugfs.pool_total_size, 8 * 4096);
    // The flag stays until the next store's check finds the threshold.
    assert!(s.limits.reached_full);
    let mut back = vec![0u8; PAGE];
    for i in 0..12 {
        assert_eq!(z.load(i, &mut back).unwrap(), Loaded::SwapDevice, "{i}");
    }
    for i in 12..20 {
        assert_eq!(z.load(i, &mut back).unwrap(), Loaded::Zswap, "{i}");
        assert_eq!(back, noise(i as u32 + 1));
    }
    // Below the threshold now: the next store is accepted.
    assert_eq!(z.store(30, &noise(300)).unwrap(), Outcome::Incompressible);
    assert!(!z.stats().limits.reached_full);
}

/// Entries loaded between two walks are gone from the LRU; an entry
/// rotated once is written back at its next visit.
#[test]
fn a_second_chance_is_one_rotation() {
    let mut z = model(100, true);
    for i in 0..20 {
        z.store(i, &noise(i as u32 + 1)).unwrap();
    }
    let mut back = vec![0u8; PAGE];
    // Offsets 0..4 come back in before the pool fills.
    for i in 0..4 {
        z.load(i, &mut back).unwrap();
    }
    for i in 20..24 {
        z.store(i, &noise(i as u32 + 1)).unwrap();
    }
    assert_eq!(z.total_pages(), 20);
    z.store(24, &noise(500)).unwrap();
    // 20 live entries rotated, then 12 written back: 4..16 in LRU order.
    let s = z.stats();
    assert_eq!(s.debugfs.written_back_pages, 12);
    for i in 4..16 {
        assert_eq!(z.load(i, &mut back).unwrap(), Loaded::SwapDevice, "{i}");
    }
    assert_eq!(z.load(16, &mut back).unwrap(), Loaded::Zswap);
}

#[test]
fn metadata_is_counted_apart_from_the_pool() {
    let mut z = model(1 << 20, true);
    for i in 0..100 {
        z.store(i, &text(i as u32)).unwrap();
    }
    let m = z.stats().metadata;
    assert_eq!(m.entries, 100);
    // Offsets 0..99: a root and two leaves.
    assert_eq!(m.xa_nodes, 3);
    // 73 entries a page: two pages; 512 handles a page: one; three nodes
    // in one 2-page slab (2 CPUs).
    assert_eq!(m.zswap_entry_bytes, 8192);
    assert_eq!(m.zs_handle_bytes, 4096);
    assert_eq!(m.xa_node_bytes, 8192);
    assert_eq!(m.total_bytes, 8192 + 4096 + 8192);
}

#[test]
fn percentages_above_100_are_refused() {
    let mut config = ZswapConfig::new(Algorithm::Lzo, 1000, 2);
    config.accept_threshold_percent = 101;
    assert!(Zswap::new(config).is_err());
}
