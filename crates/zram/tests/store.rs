//! The store against a model of the disk, under threads, at its limits.

use std::sync::Arc;

use proptest::prelude::*;
use zpool::ZPool;
use zram::{IdleCutoff, SlotState, Store, StoreError};
use zsmalloc::{Mode, Pool, PoolConfig};

/// Deterministic page contents: `kind` picks same-filled, zero, compressible,
/// half-random or random (incompressible) pages.
fn page(page_size: usize, kind: u8, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    match kind % 5 {
        0 => vec![(seed % 251) as u8; page_size],
        1 => vec![0; page_size],
        2 => (0..page_size)
            .map(|i| b"zram stores pages "[(i + seed as usize) % 18])
            .collect(),
        3 => {
            let k = (next() % page_size as u64) as usize;
            let mut p: Vec<u8> = (0..page_size).map(|_| next() as u8).collect();
            p[k..].fill(0);
            p
        }
        _ => (0..page_size).map(|_| next() as u8).collect(),
    }
}

fn pool(mode: Mode, page_size: usize) -> Arc<dyn ZPool> {
    unit_pool(mode, page_size, page_size)
}

/// A pool on `page_size` pages whose objects go up to `unit` bytes.
fn unit_pool(mode: Mode, page_size: usize, unit: usize) -> Arc<dyn ZPool> {
    let mut config = match mode {
        Mode::KernelCompat => PoolConfig {
            geometry: zsmalloc::GeometryConfig {
                page_size: page_size as u32,
                ..PoolConfig::kernel_compat().geometry
            },
            ..PoolConfig::kernel_compat()
        },
        Mode::Default => PoolConfig::default_mode(page_size as u32),
    };
    config.geometry.unit = unit as u32;
    Arc::new(Pool::new(config).expect("pool"))
}

/// A store of `pages` blocks of `unit` bytes over `page_size` pages.
fn unit_store(mode: Mode, page_size: usize, unit: usize, pages: u64, comp: &str) -> Store {
    Store::with_block_size(
        unit_pool(mode, page_size, unit),
        zcomp::Compressor::parse(comp, "").expect("compressor"),
        pages,
        unit,
    )
    .expect("store")
}

fn store(mode: Mode, page_size: usize, pages: u64, comp: &str) -> Store {
    Store::new(
        pool(mode, page_size),
        zcomp::Compressor::parse(comp, "").expect("compressor"),
        pages,
    )
    .expect("store")
}

#[derive(Clone, Debug)]
enum Op {
    Write { index: u64, kind: u8, seed: u64 },
    Discard { first: u64, count: u64 },
    Zeroes { first: u64, count: u64 },
    Compact,
    Reset,
    Read { index: u64 },
}

fn op(pages: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..pages, any::<u8>(), any::<u64>()).prop_map(|(index, kind, seed)| Op::Write { index, kind, seed }),
        2 => (0..pages, 0..8u64).prop_map(move |(first, count)| Op::Discard { first, count: count.min(pages - first) }),
        1 => (0..pages, 0..8u64).prop_map(move |(first, count)| Op::Zeroes { first, count: count.min(pages - first) }),
        1 => Just(Op::Compact),
        1 => Just(Op::Reset),
        3 => (0..pages).prop_map(|index| Op::Read { index }),
    ]
}

/// Checks every page and the counters that follow from the model.
fn check(store: &Store, model: &[Option<Vec<u8>>]) {
    let ps = store.page_size();
    let mut buf = vec![0u8; ps];
    let (mut stored, mut same, mut huge) = (0u64, 0u64, 0u64);
    for (i, want) in model.iter().enumerate() {
        store.read_page(i as u64, &mut buf).expect("read");
        match want {
            Some(p) => {
                assert_eq!(&buf, p, "page {i}");
                stored += 1;
            }
            None => assert!(buf.iter().all(|&b| b == 0), "page {i} should be zeros"),
        }
        match store.slot_info(i as u64).expect("slot").state {
            SlotState::Same(_) => same += 1,
            SlotState::Huge => huge += 1,
            _ => {}
        }
    }
    let mm = store.mm_stat();
    assert_eq!(mm.orig_data_size, stored * ps as u64);
    assert_eq!(mm.same_pages, same);
    assert_eq!(mm.huge_pages, huge);
    assert!(mm.mem_used_total >= mm.compr_data_size);
    assert!(mm.mem_used_max >= mm.mem_used_total);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_a_model_disk(
        kernel in any::<bool>(),
        auto in any::<bool>(),
        ps_shift in prop_oneof![Just(12u32), Just(14), Just(16)],
        unit_shift in prop_oneof![Just(0u32), 1u32..=4],
        comp in prop_oneof![Just("lz4"), Just("zstd"), Just("lz4hc"), Just("deflate")],
        ops in prop::collection::vec(op(24), 1..80),
    ) {
        // The store's block is the compression unit: the page, or up to 16
        // pages (at most 64 KiB) whose objects span pages (`--unit`).
        let page_size = 1usize << ps_shift;
        let ps = (page_size << unit_shift).min(65536);
        let mode = if kernel { Mode::KernelCompat } else { Mode::Default };
        let store = unit_store(mode, page_size, ps, 24, comp);
        prop_assert_eq!(store.page_size(), ps);
        prop_assert_eq!(store.mem_page_size(), page_size);
        if auto {
            // The background compactor at full speed, for every free.
            let policy = zram::AutoCompactPolicy::new(zram::AutoCompactMode::On)
                .with_words("cpu=100 min_gain=1 min_gain_percent=0 postpone_ms=0")
                .expect("policy");
            store.set_auto_compact(policy).expect("compactor");
        }
        let mut model: Vec<Option<Vec<u8>>> = vec![None; 24];
        let mut buf = vec![0u8; ps];
        for op in ops {
            match op {
                Op::Write { index, kind, seed } => {
                    let p = page(ps, kind, seed);
                    store.write_page(index, &p).expect("write");
                    model[index as usize] = Some(p);
                }
                Op::Discard { first, count } => {
                    store.discard(first, count).expect("discard");
                    model[first as usize..(first + count) as usize].fill(None);
                }
                Op::Zeroes { first, count } => {
                    store.write_zeroes(first, count).expect("zeroes");
                    model[first as usize..(first + count) as usize].fill(None);
                }
                Op::Compact => {
                    store.compact();
                    // A manual compact returns at once while the background
                    // one runs; otherwise it leaves nothing to free.
                    if !auto {
                        prop_assert_eq!(store.allocator().can_compact(), 0);
                    }
                }
                Op::Reset => {
                    store.reset();
                    model.fill(None);
                    prop_assert_eq!(store.mm_stat().mem_used_total, 0);
                }
                Op::Read { index } => {
                    store.read_page(index, &mut buf).expect("read");
                    match &model[index as usize] {
                        Some(p) => prop_assert_eq!(&buf, p),
                        None => prop_assert!(buf.iter().all(|&b| b == 0)),
                    }
                }
            }
        }
        check(&store, &model);
        // Stopped before the last check, which wants the compaction
        // counters to stay at the reset's 0.
        store
            .set_auto_compact(zram::AutoCompactPolicy::new(zram::AutoCompactMode::Off))
            .expect("off");
        prop_assert!(!store.auto_compact_running());
        check(&store, &model);
        store.allocator().check_invariants().map_err(TestCaseError::fail)?;
        store.reset();
        prop_assert_eq!(store.mm_stat(), zram::MmStat::default());
        prop_assert_eq!(store.allocator().total_pages(), 0);
    }
}

#[test]
fn same_filled_and_huge_pages_use_the_kernels_rules() {
    let s = store(Mode::KernelCompat, 4096, 8, "lz4");
    s.write_page(0, &vec![0xAB; 4096]).unwrap();
    assert_eq!(
        s.slot_info(0).unwrap().state,
        SlotState::Same(u64::from_ne_bytes([0xAB; 8]))
    );
    // A repeated 8-byte word that is not one repeated byte is same-filled too.
    let word: Vec<u8> = (0..4096).map(|i| (i % 8) as u8).collect();
    s.write_page(1, &word).unwrap();
    assert!(matches!(s.slot_info(1).unwrap().state, SlotState::Same(_)));
    s.write_page(2, &page(4096, 4, 9)).unwrap();
    assert_eq!(s.slot_info(2).unwrap().state, SlotState::Huge);
    let text = page(4096, 2, 1);
    s.write_page(3, &text).unwrap();
    let lz4 = zcomp::Compressor::parse("lz4", "")
        .unwrap()
        .context()
        .unwrap()
        .compress_buffered(&text)
        .unwrap()
        .len();
    assert_eq!(s.slot_info(3).unwrap().state, SlotState::Compressed(lz4));
    let mm = s.mm_stat();
    assert_eq!(mm.orig_data_size, 4 * 4096);
    assert_eq!(mm.compr_data_size, 4096 + lz4 as u64);
    assert_eq!(
        (mm.same_pages, mm.huge_pages, mm.huge_pages_since),
        (2, 1, 1)
    );
    // Overwriting the huge page with a small one keeps huge_pages_since.
    s.write_page(2, &text).unwrap();
    let mm = s.mm_stat();
    assert_eq!((mm.huge_pages, mm.huge_pages_since), (0, 1));
    assert_eq!(mm.compr_data_size, 2 * lz4 as u64);
}

#[test]
fn kernel_compat_page_counts_follow_the_classes() {
    // Pages compressing to k random bytes then zeros; with kernel-compat
    // geometry the pool's pages are exactly what the class table predicts.
    let s = store(Mode::KernelCompat, 4096, 64, "lz4");
    for i in 0..64 {
        s.write_page(i, &page(4096, 3, i + 100)).unwrap();
    }
    let mm = s.mm_stat();
    let pool_pages = s.allocator().stats().total_pages;
    assert_eq!(mm.mem_used_total, pool_pages * 4096);
    assert_eq!(mm.mem_used_max, mm.mem_used_total);
    s.discard(0, 64).unwrap();
    let mm = s.mm_stat();
    assert_eq!((mm.orig_data_size, mm.compr_data_size), (0, 0));
    assert_eq!(mm.mem_used_total, 0);
    assert_eq!(s.io_stat().notify_free, 64);
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let s = store(Mode::Default, 4096, 4, "lz4");
    let p = page(4096, 2, 5);
    s.write_page(0, &p).unwrap();
    let before = s.mm_stat();
    assert!(matches!(
        s.write_page(4, &p),
        Err(StoreError::OutOfRange { index: 4, pages: 4 })
    ));
    assert!(matches!(
        s.write_page(u64::MAX, &p),
        Err(StoreError::OutOfRange { .. })
    ));
    assert!(matches!(
        s.write_page(1, &p[..100]),
        Err(StoreError::BadLength { len: 100, .. })
    ));
    let mut small = vec![0u8; 512];
    assert!(matches!(
        s.read_page(0, &mut small),
        Err(StoreError::BadLength { .. })
    ));
    assert!(matches!(
        s.discard(3, 2),
        Err(StoreError::OutOfRange { .. })
    ));
    assert!(matches!(
        s.discard(u64::MAX, 2),
        Err(StoreError::OutOfRange { .. })
    ));
    assert_eq!(s.mm_stat(), before);
    let mut back = vec![0u8; 4096];
    s.read_page(0, &mut back).unwrap();
    assert_eq!(back, p);
    assert!(Store::new(
        pool(Mode::Default, 4096),
        zcomp::Compressor::parse("lz4", "").unwrap(),
        u64::MAX
    )
    .is_err());
}

#[test]
fn mem_limit_fails_the_write_and_keeps_the_old_page() {
    let s = store(Mode::KernelCompat, 4096, 64, "lz4");
    s.set_mem_limit(8 * 4096);
    assert_eq!(s.mem_limit(), 8 * 4096);
    let mut written = Vec::new();
    let mut refused = None;
    for i in 0..64 {
        let p = page(4096, 4, i);
        match s.write_page(i, &p) {
            Ok(()) => written.push(p),
            Err(e) => {
                assert!(
                    matches!(e, StoreError::MemLimit { limit_pages: 8, .. }),
                    "{e}"
                );
                refused = Some(i);
                break;
            }
        }
    }
    let refused = refused.expect("the limit must stop the writes");
    let mm = s.mm_stat();
    assert!(mm.mem_used_total <= 8 * 4096);
    assert_eq!(s.io_stat().failed_writes, 1);
    // Overwriting a stored page past the limit keeps its old contents.
    assert!(s.write_page(0, &page(4096, 4, 999)).is_err());
    let mut back = vec![0u8; 4096];
    for (i, p) in written.iter().enumerate() {
        s.read_page(i as u64, &mut back).unwrap();
        assert_eq!(&back, p);
    }
    s.read_page(refused, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0));
    // Same-filled pages take no memory, so they still go in.
    s.write_page(refused, &vec![7; 4096]).unwrap();
    s.set_mem_limit(0);
    s.write_page(refused + 1, &page(4096, 4, 1)).unwrap();
    assert_eq!(s.mm_stat().mem_limit, 0);
}

#[test]
fn mem_used_max_follows_the_peak_and_resets_to_now() {
    let s = store(Mode::KernelCompat, 4096, 32, "lz4");
    for i in 0..32 {
        s.write_page(i, &page(4096, 4, i)).unwrap();
    }
    let peak = s.mm_stat().mem_used_max;
    assert_eq!(peak, 32 * 4096);
    s.discard(0, 16).unwrap();
    assert_eq!(s.mm_stat().mem_used_max, peak);
    s.reset_mem_used_max();
    let mm = s.mm_stat();
    assert_eq!(mm.mem_used_max, mm.mem_used_total);
    assert!(mm.mem_used_max < peak);
}

#[test]
fn idle_marking_skips_same_pages_and_clears_on_access() {
    let s = store(Mode::Default, 4096, 4, "lz4");
    s.write_page(0, &page(4096, 2, 1)).unwrap();
    s.write_page(1, &vec![0; 4096]).unwrap();
    assert_eq!(s.mark_idle(IdleCutoff::All), 1);
    assert!(s.slot_info(0).unwrap().idle);
    assert!(!s.slot_info(1).unwrap().idle);
    let mut b = vec![0u8; 4096];
    s.read_page(0, &mut b).unwrap();
    assert!(!s.slot_info(0).unwrap().idle);
    assert_eq!(
        s.mark_idle(IdleCutoff::OlderThan(std::time::Duration::from_secs(3600))),
        0
    );
    assert_eq!(
        s.mark_idle(IdleCutoff::OlderThan(std::time::Duration::ZERO)),
        1
    );
}

#[test]
fn four_threads_on_their_own_and_shared_pages() {
    for mode in [Mode::KernelCompat, Mode::Default] {
        // Pages 0..512 belong to one thread each; 512..516 are shared.
        let s = store(mode, 4096, 516, "lz4");
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                let s = &s;
                scope.spawn(move || {
                    let mut back = vec![0u8; 4096];
                    // Own pages: t, t+4, ... ; checked exactly.
                    for round in 0..6u64 {
                        for i in (t..512).step_by(4) {
                            let p = page(4096, (i + round) as u8, i * 7 + round);
                            s.write_page(i, &p).unwrap();
                            s.read_page(i, &mut back).unwrap();
                            assert_eq!(back, p);
                            if (i + round) % 11 == 0 {
                                s.discard(i, 1).unwrap();
                                s.read_page(i, &mut back).unwrap();
                                assert!(back.iter().all(|&b| b == 0));
                            }
                        }
                        if t == 0 {
                            s.compact();
                        }
                    }
                    // Shared pages 512..516 (apart from every thread's own
                    // pages, which others may still be checking): whatever is read is one of the
                    // versions written, whole.
                    for k in 0..200u64 {
                        let i = 512 + k % 4;
                        let p = vec![(t * 50 + k % 50) as u8; 4096];
                        s.write_page(i, &p).unwrap();
                        s.read_page(i, &mut back).unwrap();
                        assert!(back.iter().all(|&b| b == back[0]), "torn page");
                    }
                });
            }
        });
        let mut back = vec![0u8; 4096];
        for i in 0..512u64 {
            let last = 5u64;
            let p = page(4096, (i + last) as u8, i * 7 + last);
            s.read_page(i, &mut back).unwrap();
            if (i + last) % 11 == 0 {
                assert!(back.iter().all(|&b| b == 0));
            } else {
                assert_eq!(back, p, "page {i}");
            }
        }
        assert_eq!(s.io_stat().failed_writes + s.io_stat().failed_reads, 0);
    }
}

#[test]
fn dropping_the_store_frees_the_allocators_memory() {
    let pool = pool(Mode::KernelCompat, 4096);
    let s = Store::new(
        pool.clone(),
        zcomp::Compressor::parse("lz4", "").unwrap(),
        16,
    )
    .unwrap();
    for i in 0..16 {
        s.write_page(i, &page(4096, 3, i)).unwrap();
    }
    assert!(pool.total_pages() > 0);
    drop(s);
    assert_eq!(pool.total_pages(), 0);
}

/// zsmalloc posing as an allocator whose largest object is smaller than a
/// page (as zbud's and zblock's are).
struct SmallObjects(Pool);

impl ZPool for SmallObjects {
    fn name(&self) -> &'static str {
        "small-objects"
    }
    fn page_size(&self) -> usize {
        4096
    }
    fn max_object_size(&self) -> usize {
        4096 - 128
    }
    fn malloc(&self, len: usize) -> Result<zpool::ZHandle, zpool::ZPoolError> {
        if len > self.max_object_size() {
            return Err(zpool::ZPoolError::TooLarge {
                len,
                max: self.max_object_size(),
            });
        }
        ZPool::malloc(&self.0, len)
    }
    fn free(&self, h: zpool::ZHandle) -> Result<(), zpool::ZPoolError> {
        ZPool::free(&self.0, h)
    }
    fn write(&self, h: zpool::ZHandle, data: &[u8]) -> Result<(), zpool::ZPoolError> {
        ZPool::write(&self.0, h, data)
    }
    fn read_begin(
        &self,
        h: zpool::ZHandle,
        len: usize,
    ) -> Result<std::ptr::NonNull<[u8]>, zpool::ZPoolError> {
        self.0.read_begin(h, len)
    }
    unsafe fn read_end(&self, h: zpool::ZHandle) {
        // SAFETY: forwarded from our caller's contract.
        unsafe { self.0.read_end(h) }
    }
    fn total_pages(&self) -> usize {
        ZPool::total_pages(&self.0)
    }
    fn stats(&self) -> zpool::ZPoolStats {
        ZPool::stats(&self.0)
    }
}

#[test]
fn allocators_that_cannot_hold_a_page_get_raw_pages_beside_them() {
    let pool: Arc<dyn ZPool> = Arc::new(SmallObjects(
        Pool::new(PoolConfig::kernel_compat()).expect("pool"),
    ));
    let s = Store::new(
        pool.clone(),
        zcomp::Compressor::parse("lz4", "").unwrap(),
        8,
    )
    .unwrap();
    // No huge_class_size of its own: one past its largest object.
    assert_eq!(s.huge_class_size(), 4096 - 128 + 1);
    let random = page(4096, 4, 1);
    let text = page(4096, 2, 1);
    s.write_page(0, &random).unwrap();
    s.write_page(1, &text).unwrap();
    assert_eq!(s.slot_info(0).unwrap().state, SlotState::Huge);
    let mm = s.mm_stat();
    assert_eq!(mm.huge_pages, 1);
    // The raw page's own page is counted with the allocator's.
    assert_eq!(mm.mem_used_total, (pool.total_pages() as u64 + 1) * 4096);
    let mut back = vec![0u8; 4096];
    s.read_page(0, &mut back).unwrap();
    assert_eq!(back, random);
    s.read_page(1, &mut back).unwrap();
    assert_eq!(back, text);
    // A limit counts those pages too.
    s.set_mem_limit(mm.mem_used_total);
    assert!(matches!(
        s.write_page(2, &page(4096, 4, 2)),
        Err(StoreError::MemLimit { .. })
    ));
    s.set_mem_limit(0);
    s.write_page(0, &text).unwrap();
    assert_eq!(s.mm_stat().huge_pages, 0);
    s.discard(0, 8).unwrap();
    assert_eq!(s.mm_stat().mem_used_total, 0);
}

#[test]
fn every_allocator_stores_units_larger_than_a_page() {
    // zsmalloc holds a 64 KiB unit in its multi-page classes; the others
    // keep units that do not fit them raw beside them, counted in pages.
    for name in zalloc::NAMES {
        let opts = zalloc::AllocOptions {
            unit: Some(65536),
            ..zalloc::AllocOptions::default()
        };
        let pool = zalloc::open(name, &opts).expect(name);
        let s = Store::with_block_size(
            pool.clone(),
            zcomp::Compressor::parse("lz4", "").unwrap(),
            16,
            65536,
        )
        .expect(name);
        let mut model = vec![None; 16];
        for i in 0..16u64 {
            let p = page(65536, i as u8, i * 7 + 1);
            s.write_page(i, &p)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            model[i as usize] = Some(p);
        }
        check(&s, &model);
        let mm = s.mm_stat();
        assert_eq!(
            mm.mem_used_total % 4096,
            0,
            "{name}: counted in 4 KiB pages"
        );
        // Raw units beside an allocator whose objects end below the unit
        // count 16 pages each; zsmalloc keeps them in its own huge class.
        let beside = if name == "zsmalloc" { 0 } else { mm.huge_pages };
        assert_eq!(
            mm.mem_used_total,
            (s.allocator().total_pages() as u64 + beside * 16) * 4096,
            "{name}"
        );
        assert!(
            s.write_page(0, &vec![1u8; 4096]).is_err(),
            "{name}: a page is not a block"
        );
        s.reset();
        assert_eq!(s.mm_stat().mem_used_total, 0, "{name}");
        assert_eq!(pool.total_pages(), 0, "{name}");
    }
    // A unit below the page, or not a power of two, is refused.
    for (page_size, block) in [(16384, 4096), (4096, 12288), (4096, 131072)] {
        let opts = zalloc::AllocOptions {
            page_size,
            ..zalloc::AllocOptions::default()
        };
        let pool = zalloc::open("zsmalloc", &opts).unwrap();
        let comp = zcomp::Compressor::parse("lz4", "").unwrap();
        assert!(
            Store::with_block_size(pool, comp, 4, block).is_err(),
            "{page_size}/{block}"
        );
    }
}

#[test]
fn every_allocator_stores_and_reads_back_every_kind_of_page() {
    for name in zalloc::NAMES {
        let pool = zalloc::open(name, &zalloc::AllocOptions::default()).expect(name);
        let s = Store::new(
            pool.clone(),
            zcomp::Compressor::parse("lz4", "").unwrap(),
            64,
        )
        .expect(name);
        let mut model = vec![None; 64];
        for round in 0..3u64 {
            for i in 0..64u64 {
                let p = page(4096, (i + round) as u8, i * 31 + round);
                s.write_page(i, &p)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                model[i as usize] = Some(p);
            }
            s.discard(round * 7, 5).unwrap();
            model[(round * 7) as usize..(round * 7 + 5) as usize].fill(None);
            s.compact();
        }
        check(&s, &model);
        assert!(
            s.mm_stat().huge_pages > 0,
            "{name}: random pages are stored raw"
        );
        s.reset();
        assert_eq!(s.mm_stat().mem_used_total, 0, "{name}");
        assert_eq!(pool.total_pages(), 0, "{name}");
    }
}

#[test]
fn idle_streams_are_released_and_made_again_by_threads() {
    let store = Arc::new(store(Mode::Default, 32768, 64, "zstd"));
    assert_eq!(store.live_streams(), 0, "no context before the first page");
    let pages: Vec<Vec<u8>> = (0..64).map(|i| page(32768, 2, i)).collect();
    std::thread::scope(|sc| {
        for t in 0..4u64 {
            let (store, pages) = (&store, &pages);
            sc.spawn(move || {
                for i in (t..64).step_by(4) {
                    store.write_page(i, &pages[i as usize]).unwrap();
                }
            });
        }
    });
    let made = store.live_streams();
    assert!(made >= 1);
    assert_eq!(store.release_idle_streams(), made);
    assert_eq!(store.live_streams(), 0);
    // Reading and writing again makes contexts that read the old pages.
    let mut back = vec![0u8; 32768];
    for i in 0..64u64 {
        store.read_page(i, &mut back).unwrap();
        assert!(back == pages[i as usize], "page {i}");
    }
    assert!(store.live_streams() >= 1);
    store.write_page(0, &pages[1]).unwrap();
    store.read_page(0, &mut back).unwrap();
    assert!(back == pages[1]);
}

#[test]
fn mm_stat_is_consistent_while_threads_write_discard_and_compact() {
    for mode in [Mode::KernelCompat, Mode::Default] {
        let s = store(mode, 4096, 1024, "lz4");
        let writers_done = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for t in 0..2u64 {
                let (s, writers_done) = (&s, &writers_done);
                scope.spawn(move || {
                    // Each writer stores every kind of page on pages the
                    // other writer frees, so gauges go up in one thread's
                    // shard and down in another's.
                    for round in 0..20u64 {
                        for i in 0..1024u64 {
                            if (i + t) % 2 == 0 {
                                let p = page(4096, (i + round) as u8, i * 3 + round);
                                s.write_page(i, &p).unwrap();
                            } else {
                                s.discard(i, 1).unwrap();
                            }
                        }
                        if t == 0 {
                            s.compact();
                        }
                    }
                    writers_done.fetch_add(1, std::sync::atomic::Ordering::Release);
                });
            }
            let mut reads = 0u64;
            while writers_done.load(std::sync::atomic::Ordering::Acquire) < 2 || reads < 100 {
                let m = s.mm_stat();
                let stored = m.orig_data_size / 4096;
                assert!(m.same_pages <= stored, "{m:?}");
                assert!(m.huge_pages <= stored, "{m:?}");
                assert!(m.mem_used_max >= m.mem_used_total, "{m:?}");
                assert!(stored <= 1024, "{m:?}");
                reads += 1;
            }
        });
    }
}

/// Default mode's pool keeps freed pages resident for reuse, outside
/// `mem_used_total` and within the bound the store reports; a write near
/// `mem_limit` gives them back first.
#[test]
fn kept_pages_are_given_back_near_the_memory_limit() {
    let s = store(Mode::Default, 4096, 8192, "lz4");
    for i in 0..8192 {
        s.write_page(i, &page(4096, 3, i)).unwrap();
    }
    // Whole runs of pages freed: their zspages empty and are kept.
    s.discard(0, 4096).unwrap();
    let (kept, bound) = s.retained_bytes();
    assert!(kept > 0, "freed zspages kept for reuse");
    assert!(kept <= bound, "{kept} kept over the bound {bound}");
    let used = s.mm_stat().mem_used_total;
    // A limit just above what is used: the next write is within 1/16 of it.
    s.set_mem_limit(used + 4096);
    let _ = s.write_page(0, &page(4096, 3, 0));
    assert_eq!(s.retained_bytes().0, 0, "kept pages given back");
    // kernel-compat keeps only the fixed cache, and no retained share.
    let k = store(Mode::KernelCompat, 4096, 1024, "lz4");
    for i in 0..1024 {
        k.write_page(i, &page(4096, 3, i)).unwrap();
    }
    k.discard(0, 1024).unwrap();
    let (kept, bound) = k.retained_bytes();
    assert!(kept <= bound && bound <= 1 << 20, "{kept} / {bound}");
}
