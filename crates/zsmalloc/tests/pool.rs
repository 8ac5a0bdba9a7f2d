//! The pool against a plain model, object sizes at every boundary, threads, and
//! bad input.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;
use testkit::{pattern, Rng};
use zsmalloc::{
    ChainRule, ClassDelta, CompactionAlgo, FullnessScheme, GeometryConfig, Handle, Mode, Pool,
    PoolConfig, PoolError,
};

fn config(page_size: u32, chain: u32, mode: Mode) -> PoolConfig {
    PoolConfig {
        geometry: GeometryConfig {
            page_size,
            chain,
            delta: ClassDelta::Kernel,
            chain_rule: ChainRule::MinWaste,
            merge: true,
            unit: 0,
        },
        mode,
        fullness: FullnessScheme::InuseRatio,
        page_limit: None,
        compaction: if mode == Mode::KernelCompat {
            CompactionAlgo::KeepDestination
        } else {
            CompactionAlgo::Optimal
        },
        auto_compact: None,
    }
}

#[test]
#[cfg_attr(miri, ignore = "megabytes of objects: slow under Miri")]
fn multi_page_objects_round_trip_and_compact() {
    for mode in [Mode::KernelCompat, Mode::Default] {
        for (ps, unit, step) in [
            (4096u32, 16384u32, 13usize),
            (4096, 65536, 97),
            (16384, 65536, 89),
        ] {
            let mut c = config(ps, 8, mode);
            c.geometry.unit = unit;
            let pool = Pool::new(c).unwrap();
            assert_eq!(pool.unit(), unit as usize);
            assert!(matches!(
                pool.malloc(unit as usize + 1),
                Err(PoolError::TooLarge { .. })
            ));
            let mut live: Vec<(Handle, u64, usize)> = Vec::new();
            let sizes = (1..=unit as usize)
                .step_by(step)
                .chain([ps as usize + 1, unit as usize]);
            for (id, len) in (0u64..).zip(sizes) {
                let h = pool.malloc(len).unwrap();
                assert!(pool.capacity(h).unwrap() >= len);
                pool.write(h, &pattern(id, len)).unwrap();
                live.push((h, id, len));
            }
            pool.check_invariants().unwrap();
            // Free every other object, compact, and read the rest back.
            let mut kept = Vec::new();
            for (i, entry) in live.into_iter().enumerate() {
                if i % 2 == 0 {
                    pool.free(entry.0).unwrap();
                } else {
                    kept.push(entry);
                }
            }
            pool.compact();
            pool.check_invariants().unwrap();
            for &(h, id, len) in &kept {
                assert_eq!(
                    &*pool.read(h, len).unwrap(),
                    &pattern(id, len)[..],
                    "{mode:?} {ps}/{unit} len {len}"
                );
            }
            for (h, _, _) in kept {
                pool.free(h).unwrap();
            }
            assert_eq!(pool.total_pages(), 0);
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "megabytes of objects: slow under Miri")]
fn every_size_and_position_round_trips() {
    for mode in [Mode::KernelCompat, Mode::Default] {
        for (ps, step) in [(4096u32, 1usize), (16384, 7), (65536, 61)] {
            let pool = Pool::new(config(ps, 8, mode)).unwrap();
            let mut live: Vec<(Handle, u64, usize)> = Vec::new();
            let sizes = (1..=ps as usize).step_by(step).chain([ps as usize]);
            for (id, len) in (0u64..).zip(sizes) {
                let h = pool.malloc(len).unwrap();
                assert!(pool.capacity(h).unwrap() >= len);
                pool.write(h, &pattern(id, len)).unwrap();
                live.push((h, id, len));
            }
            for &(h, id, len) in &live {
                assert_eq!(
                    &*pool.read(h, len).unwrap(),
                    &pattern(id, len)[..],
                    "{mode:?} {ps} len {len}"
                );
            }
            pool.check_invariants().unwrap();
            for (h, _, _) in live {
                pool.free(h).unwrap();
            }
            assert_eq!(pool.total_pages(), 0);
            pool.check_invariants().unwrap();
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "megabytes of objects: slow under Miri")]
fn full_zspages_of_every_class_round_trip() {
    // A whole zspage of each class puts objects at every offset, including
    // all the ones that straddle a page boundary.
    for mode in [Mode::KernelCompat, Mode::Default] {
        let pool = Pool::new(config(4096, 8, mode)).unwrap();
        let header = if mode == Mode::KernelCompat { 8 } else { 0 };
        let mut live = Vec::new();
        let mut id = 0;
        for class in pool.geometry().classes() {
            let len = if class.huge {
                class.size
            } else {
                class.size - header
            } as usize;
            for _ in 0..class.objs_per_zspage {
                let h = pool.malloc(len).unwrap();
                pool.write(h, &pattern(id, len)).unwrap();
                live.push((h, id, len));
                id += 1;
            }
        }
        let expected: u64 = pool
            .geometry()
            .classes()
            .iter()
            .map(|c| u64::from(c.pages_per_zspage))
            .sum();
        assert_eq!(
            pool.total_pages() as u64,
            expected,
            "{mode:?}: one full zspage per class"
        );
        pool.check_invariants().unwrap();
        for &(h, id, len) in &live {
            let mut buf = vec![0; len];
            pool.read_into(h, &mut buf).unwrap();
            assert_eq!(buf, pattern(id, len));
        }
        for (h, _, _) in live {
            pool.free(h).unwrap();
        }
        assert_eq!(pool.total_pages(), 0);
    }
}

#[test]
fn kernel_compat_counts_pages_as_the_kernel() {
    // 4 KiB, chain 8: a 100-byte object plus the 8-byte header lands in class
    // 112 (7 pages, 256 objects); 257 of them need two zspages.
    let pool = Pool::new(PoolConfig::kernel_compat()).unwrap();
    let handles: Vec<Handle> = (0..257).map(|_| pool.malloc(100).unwrap()).collect();
    assert_eq!(pool.total_pages(), 14);
    // Freeing the lone object of the second zspage frees it at once.
    pool.free(handles[256]).unwrap();
    assert_eq!(pool.total_pages(), 7);
    // 3625 is huge_class_size: 3624 + 8 fits class 3632; 3625 + 8 is huge.
    assert_eq!(pool.huge_class_size(), 3625);
    let a = pool.malloc(3624).unwrap();
    assert_eq!(pool.total_pages(), 7 + 8);
    let b = pool.malloc(3625).unwrap();
    assert_eq!(pool.total_pages(), 7 + 8 + 1);
    assert_eq!(
        pool.capacity(b).unwrap(),
        4096,
        "huge objects carry no header"
    );
    assert_eq!(pool.capacity(a).unwrap(), 3624);
    let stats = pool.class_stats();
    let huge = stats.iter().find(|r| r.size == 4096).unwrap();
    assert_eq!((huge.obj_used, huge.pages_used, huge.groups[11]), (1, 1, 1));
    pool.check_invariants().unwrap();
}

#[test]
fn kernel_compat_allocates_from_the_fullest_zspage() {
    // Two zspages of class 112 (256 objects each): fill both, then free 200
    // from the first and 10 from the second. The next allocations must go to
    // the fuller second zspage until it is full.
    let pool = Pool::new(PoolConfig::kernel_compat()).unwrap();
    let first: Vec<Handle> = (0..256).map(|_| pool.malloc(100).unwrap()).collect();
    let second: Vec<Handle> = (0..256).map(|_| pool.malloc(100).unwrap()).collect();
    for h in &first[..200] {
        pool.free(*h).unwrap();
    }
    for h in &second[..10] {
        pool.free(*h).unwrap();
    }
    let row = |pool: &Pool| *pool.class_stats().iter().find(|r| r.size == 112).unwrap();
    // 56/256 = 21% -> group 3; 246/256 = 96% -> group 10.
    assert_eq!((row(&pool).groups[3], row(&pool).groups[10]), (1, 1));
    for _ in 0..10 {
        pool.malloc(100).unwrap();
    }
    let r = row(&pool);
    assert_eq!(
        (r.groups[3], r.groups[11]),
        (1, 1),
        "the fuller zspage filled first"
    );
    assert_eq!(pool.total_pages(), 14);
    pool.check_invariants().unwrap();
}

#[test]
fn default_mode_counts_only_pages_in_use() {
    let pool = Pool::new(PoolConfig::default_mode(4096)).unwrap();
    let h = pool.malloc(1000).unwrap();
    assert_eq!(
        pool.total_pages(),
        1,
        "one object touches one page of its zspage"
    );
    let more: Vec<Handle> = (0..8).map(|_| pool.malloc(1000).unwrap()).collect();
    let pages = pool.total_pages();
    assert!(
        pages <= 3,
        "nine 1000-byte objects fit in three pages, counted {pages}"
    );
    for h in more {
        pool.free(h).unwrap();
    }
    assert_eq!(
        pool.total_pages(),
        1,
        "pages above the last live object go back"
    );
    pool.free(h).unwrap();
    assert_eq!(pool.total_pages(), 0);
    pool.check_invariants().unwrap();
}

/// Frames counted over all classes (a framed pool's rows count frames).
fn frames_used(pool: &Pool) -> usize {
    pool.class_stats()
        .iter()
        .map(|r| r.pages_used as usize)
        .sum()
}

#[test]
fn a_framed_pool_shares_system_pages_between_classes_and_empties_sparse_ones() {
    for page in [8192u32, 16384, 65536] {
        let pool = Pool::new(PoolConfig::default_mode(page)).unwrap();
        assert!(pool.is_framed());
        let per_page = (page / 4096) as usize;
        // One object in each of many classes: one 4 KiB frame each, and the
        // frames of all classes share system pages.
        let mut live: Vec<(Handle, Vec<u8>)> = (1..=40)
            .map(|k| {
                let len = k * 97;
                let h = pool.malloc(len).unwrap();
                let data = pattern(k as u64, len);
                pool.write(h, &data).unwrap();
                (h, data)
            })
            .collect();
        let frames = frames_used(&pool);
        assert!(frames >= 20, "{page}: objects of {frames} classes");
        assert_eq!(pool.total_pages(), frames.div_ceil(per_page), "{page}");
        pool.check_invariants().unwrap();
        // Free two in three: the system pages left are sparsely used until
        // compaction moves their frames together.
        let mut k = 0;
        live.retain(|(h, _)| {
            k += 1;
            k % 3 != 0 || {
                pool.free(*h).unwrap();
                false
            }
        });
        let (mut k, mut gone) = (0, Vec::new());
        live.retain(|(h, _)| {
            k += 1;
            k % 2 == 0 || {
                gone.push(*h);
                false
            }
        });
        for h in gone {
            pool.free(h).unwrap();
        }
        pool.check_invariants().unwrap();
        let before = pool.total_pages();
        let r = pool.compact();
        let frames = frames_used(&pool);
        assert_eq!(
            pool.total_pages(),
            frames.div_ceil(per_page),
            "{page}: {r:?}"
        );
        assert!(pool.total_pages() < before || before == frames.div_ceil(per_page));
        assert_eq!(pool.system_pages_reclaimable(), 0);
        pool.check_invariants().unwrap();
        for (h, data) in &live {
            assert_eq!(&*pool.read(*h, data.len()).unwrap(), &data[..]);
        }
        for (h, _) in live {
            pool.free(h).unwrap();
        }
        assert_eq!(pool.total_pages(), 0);
        pool.check_invariants().unwrap();
    }
}

#[test]
fn a_framed_pool_copies_only_objects_across_frames_and_keeps_held_frames() {
    let pool = Pool::new(PoolConfig::default_mode(65536)).unwrap();
    // Three 3000-byte objects of one class: the second crosses from the
    // first frame into the second.
    let objs: Vec<(Handle, Vec<u8>)> = (0..3)
        .map(|i| {
            let h = pool.malloc(3000).unwrap();
            let data = pattern(i, 3000);
            pool.write(h, &data).unwrap();
            (h, data)
        })
        .collect();
    for (h, data) in &objs {
        let a = pool.read(*h, data.len()).unwrap();
        assert_eq!(&*a, &data[..]);
        // A kept hold's bytes stay valid until released, copied or not.
        let raw = pool.read(*h, data.len()).unwrap().into_raw();
        drop(a);
        // SAFETY: the hold kept by `into_raw` is outstanding.
        assert_eq!(unsafe { raw.as_ref() }, &data[..]);
        // SAFETY: released once, and `raw` is not used after.
        unsafe { pool.release_read(*h) };
    }
    pool.check_invariants().unwrap();
}

#[test]
fn bad_input_is_refused_and_harms_nothing() {
    for mode in [Mode::KernelCompat, Mode::Default] {
        let pool = Pool::new(config(4096, 8, mode)).unwrap();
        let other = Pool::new(config(4096, 8, mode)).unwrap();
        let keep: Vec<(Handle, u64)> = (0..50u64)
            .map(|i| {
                let h = pool.malloc(300).unwrap();
                pool.write(h, &pattern(i, 300)).unwrap();
                (h, i)
            })
            .collect();
        let pages = pool.total_pages();

        assert_eq!(pool.malloc(0), Err(PoolError::ZeroSize));
        assert_eq!(
            pool.malloc(4097),
            Err(PoolError::TooLarge {
                len: 4097,
                max: 4096
            })
        );
        assert_eq!(PoolError::ZeroSize.errno(), 22);
        assert_eq!(PoolError::TooLarge { len: 1, max: 0 }.errno(), 28);

        let h = pool.malloc(300).unwrap();
        pool.free(h).unwrap();
        assert_eq!(pool.free(h), Err(PoolError::FreedHandle), "double free");
        assert_eq!(pool.read(h, 10).map(|_| ()), Err(PoolError::FreedHandle));
        assert_eq!(pool.write(h, b"x"), Err(PoolError::FreedHandle));
        // The freed slot is reused with a new generation: the old handle is stale.
        let reused = pool.malloc(300).unwrap();
        assert_eq!(pool.read(h, 10).map(|_| ()), Err(PoolError::StaleHandle));
        assert_eq!(pool.free(h), Err(PoolError::StaleHandle));
        pool.free(reused).unwrap();

        // Forged handles: random numbers, and another pool's handle.
        let mut forged = 0x1234_5678_9abc_def1u64;
        for _ in 0..10_000 {
            forged = forged
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let Some(f) = Handle::from_raw(forged) else {
                continue;
            };
            if keep.iter().any(|(k, _)| *k == f) {
                continue;
            }
            assert!(pool.read(f, 1).is_err());
            assert!(pool.free(f).is_err());
            assert!(pool.write(f, b"zz").is_err());
        }
        let foreign = other.malloc(300).unwrap();
        assert_eq!(pool.free(foreign), Err(PoolError::InvalidHandle));

        // Too long for the object.
        let (k, _) = keep[0];
        let cap = pool.capacity(k).unwrap();
        assert_eq!(
            pool.write(k, &vec![0; cap + 1]),
            Err(PoolError::TooLong {
                len: cap + 1,
                capacity: cap
            })
        );
        assert!(pool.read(k, cap + 1).is_err());

        assert_eq!(pool.total_pages(), pages);
        pool.check_invariants().unwrap();
        for (h, i) in keep {
            assert_eq!(&*pool.read(h, 300).unwrap(), &pattern(i, 300)[..]);
        }
    }
}

#[test]
fn page_limit_is_an_error_not_an_abort() {
    let mut cfg = PoolConfig::kernel_compat();
    cfg.page_limit = Some(16);
    let pool = Pool::new(cfg).unwrap();
    let mut live = Vec::new();
    let err = loop {
        match pool.malloc(4000) {
            Ok(h) => live.push(h),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, PoolError::OutOfMemory(_)), "{err:?}");
    assert_eq!(live.len(), 16);
    pool.check_invariants().unwrap();
    pool.free(live.pop().unwrap()).unwrap();
    assert!(pool.malloc(4000).is_ok(), "room again after a free");
}

#[test]
#[cfg_attr(miri, ignore = "8 threads of 20,000 steps: slow under Miri")]
fn threads_share_a_pool() {
    for mode in [Mode::KernelCompat, Mode::Default] {
        let pool = Arc::new(Pool::new(config(4096, 8, mode)).unwrap());
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    let mut rng = Rng(t * 7919 + 1);
                    let mut next = move || rng.next_u64();
                    let mut live: Vec<(Handle, u64, usize)> = Vec::new();
                    for step in 0..20_000u64 {
                        let r = next();
                        if live.len() < 64 || r % 3 != 0 {
                            let len = (next() % 4096 + 1) as usize;
                            let id = t << 32 | step;
                            let h = pool.malloc(len).unwrap();
                            pool.write(h, &pattern(id, len)).unwrap();
                            live.push((h, id, len));
                        } else {
                            let i = (next() as usize) % live.len();
                            let (h, id, len) = live.swap_remove(i);
                            assert_eq!(&*pool.read(h, len).unwrap(), &pattern(id, len)[..]);
                            pool.free(h).unwrap();
                        }
                        if live.len() > 400 {
                            let (h, _, _) = live.swap_remove(0);
                            pool.free(h).unwrap();
                        }
                    }
                    live
                })
            })
            .collect();
        let survivors: Vec<_> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        pool.check_invariants().unwrap();
        for (h, id, len) in survivors {
            assert_eq!(&*pool.read(h, len).unwrap(), &pattern(id, len)[..]);
            pool.free(h).unwrap();
        }
        assert_eq!(pool.total_pages(), 0);
        pool.check_invariants().unwrap();
    }
}

#[test]
fn readers_of_one_object_do_not_block_writers_of_another() {
    let pool = Pool::new(PoolConfig::kernel_compat()).unwrap();
    let a = pool.malloc(100).unwrap();
    let b = pool.malloc(100).unwrap(); // same zspage as `a`
    pool.write(a, &[1; 100]).unwrap();
    let guard = pool.read(a, 100).unwrap();
    pool.write(b, &[2; 100]).unwrap();
    pool.free(b).unwrap();
    assert_eq!(&*guard, &[1; 100][..]);
    drop(guard);
    pool.free(a).unwrap();
}

#[test]
fn a_kept_hold_pins_the_object_until_released() {
    let pool = Pool::new(PoolConfig::kernel_compat()).unwrap();
    // 200 + 8 bytes: class 208, 59 objects in a 3-page zspage; 300 objects
    // fill five zspages and start a sixth.
    let handles: Vec<Handle> = (0..300u32)
        .map(|i| {
            let h = pool.malloc(200).unwrap();
            pool.write(h, &[i as u8; 200]).unwrap();
            h
        })
        .collect();
    let kept = handles[1];
    let raw = pool.read(kept, 200).unwrap().into_raw();
    // Empty the first zspages but for the held object: compaction would move
    // it out, freeing the first zspage, but must not. Nothing else is worth
    // moving while it stays.
    for &h in handles[..128].iter().filter(|&&h| h != kept) {
        pool.free(h).unwrap();
    }
    assert!(pool.can_compact() > 0);
    assert_eq!(pool.compact().objs_moved, 0, "a held object is not moved");
    assert!(
        pool.check_invariants().is_err(),
        "the checker sees the kept hold"
    );
    // SAFETY: the hold kept by `into_raw` is outstanding, so the bytes are
    // mapped, unmoved and unwritten.
    let bytes = unsafe { raw.as_ref() };
    assert_eq!(bytes, &[1; 200][..]);
    assert_eq!(&*pool.read(kept, 200).unwrap(), &[1; 200][..]);
    // SAFETY: the one hold kept above, released once; `bytes` is not used
    // after this.
    unsafe { pool.release_read(kept) };
    pool.check_invariants().unwrap();
    let done = pool.compact();
    assert!(done.objs_moved > 0 && done.pages_freed > 0, "{done:?}");
    assert_eq!(pool.can_compact(), 0);
    assert_eq!(&*pool.read(kept, 200).unwrap(), &[1; 200][..]);
    pool.write(kept, &[9; 200]).unwrap();
    for &h in handles[128..].iter().chain([&kept]) {
        pool.free(h).unwrap();
    }
    assert_eq!(pool.total_pages(), 0, "every page is given back");
    pool.check_invariants().unwrap();
}

#[test]
#[cfg_attr(miri, ignore = "200 pools of 64 MiB mappings: slow under Miri")]
fn no_handle_is_in_the_c_error_range() {
    // Pool tags cycle through 7 bits; 200 pools see every tag the pools hand
    // out, and no handle may reach the top 4095 values of a u64.
    for _ in 0..200 {
        let pool = Pool::new(PoolConfig::kernel_compat()).unwrap();
        let h = pool.malloc(1).unwrap();
        assert!(h.to_raw() < Handle::RAW_LIMIT, "{h:?}");
        assert!(h.to_raw() < u64::MAX - 4094);
        pool.free(h).unwrap();
    }
}

// ---- model-based property test ------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Malloc(usize),
    Write(usize, u8),
    Read(usize),
    Free(usize),
    Compact,
    /// Compacts one class (the store's background compactor's step).
    CompactClass(usize),
    /// Compacts while one object is read (held shared): it stays where it
    /// is, and so does its zspage's frame or page.
    CompactWhileRead(usize),
}

fn any_pool_config() -> impl Strategy<Value = PoolConfig> {
    prop_oneof![
        3 => any_tuned_pool_config(),
        1 => any_product_pool_config(),
    ]
}

/// The configurations the product makes: default mode (with its class
/// step for the page and the unit) and the kernel's, on every page size
/// from 4 to 64 KiB and every unit from the page to 64 KiB.
fn any_product_pool_config() -> impl Strategy<Value = PoolConfig> {
    (
        prop::sample::select(vec![4096u32, 8192, 16384, 32768, 65536]),
        0u32..=4,
        prop::sample::select(vec![Mode::KernelCompat, Mode::Default]),
    )
        .prop_map(|(page_size, shift, mode)| {
            let unit = (page_size << shift).min(65536);
            match mode {
                Mode::Default => PoolConfig::default_mode_for_unit(page_size, unit),
                Mode::KernelCompat => {
                    let mut c = PoolConfig::kernel_compat();
                    c.geometry.page_size = page_size;
                    c.geometry.unit = unit;
                    c
                }
            }
        })
}

/// Any geometry, mode, grouping and compaction algorithm.
fn any_tuned_pool_config() -> impl Strategy<Value = PoolConfig> {
    (
        common::any_geometry(8),
        prop::sample::select(vec![Mode::KernelCompat, Mode::Default]),
        prop::sample::select(vec![
            FullnessScheme::InuseRatio,
            FullnessScheme::ThreeQuarters,
        ]),
        prop::sample::select(vec![
            CompactionAlgo::DrainSource,
            CompactionAlgo::KeepDestination,
            CompactionAlgo::Optimal,
        ]),
        // The compression unit: the page (half the cases) or up to 16 pages,
        // at most 64 KiB, so objects span pages.
        prop_oneof![Just(0u32), 1u32..=4],
    )
        .prop_map(|(mut geometry, mode, fullness, compaction, shift)| {
            geometry.unit = (geometry.page_size << shift).min(65536);
            PoolConfig {
                geometry,
                mode,
                fullness,
                page_limit: None,
                compaction,
                auto_compact: None,
            }
        })
}

fn any_ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (1usize..=70000).prop_map(Op::Malloc),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Op::Write(i, b)),
        2 => any::<usize>().prop_map(Op::Read),
        3 => any::<usize>().prop_map(Op::Free),
        1 => Just(Op::Compact),
        1 => any::<usize>().prop_map(Op::CompactClass),
        1 => any::<usize>().prop_map(Op::CompactWhileRead),
    ];
    prop::collection::vec(op, 1..120)
}

/// The invariant walk, as a property-test failure.
fn continue_checks(pool: &Pool) -> Result<(), TestCaseError> {
    if let Err(e) = pool.check_invariants() {
        prop_assert!(false, "invariant broken: {}", e);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 2 } else { 1000 }))]

    #[test]
    fn pool_matches_a_model(config in any_pool_config(), ops in any_ops()) {
        let pool = Pool::new(config).unwrap();
        // Objects up to the unit: above a page they span pages.
        let ps = config.geometry.unit_bytes() as usize;
        let mut model: HashMap<u64, (Handle, Vec<u8>)> = HashMap::new();
        let mut order: Vec<u64> = Vec::new();
        let mut freed: Vec<Handle> = Vec::new();
        for op in ops {
            match op {
                Op::Malloc(n) => {
                    let len = (n - 1) % ps + 1;
                    let h = pool.malloc(len).unwrap();
                    prop_assert!(pool.capacity(h).unwrap() >= len);
                    let data = pattern(h.to_raw(), len);
                    pool.write(h, &data).unwrap();
                    prop_assert!(model.insert(h.to_raw(), (h, data)).is_none(), "handle reused while live");
                    order.push(h.to_raw());
                }
                Op::Write(i, b) if !order.is_empty() => {
                    let key = order[i % order.len()];
                    let (h, data) = model.get_mut(&key).unwrap();
                    let n = data.len().div_ceil(2);
                    data[..n].fill(b);
                    pool.write(*h, &data[..n]).unwrap();
                }
                Op::Read(i) if !order.is_empty() => {
                    let (h, data) = &model[&order[i % order.len()]];
                    prop_assert_eq!(&*pool.read(*h, data.len()).unwrap(), &data[..]);
                }
                Op::Compact => {
                    let before = pool.total_pages();
                    pool.compact();
                    prop_assert_eq!(pool.can_compact(), 0);
                    // Framed pools: no sparsely used system page is left.
                    prop_assert_eq!(pool.system_pages_reclaimable(), 0);
                    prop_assert!(pool.total_pages() <= before, "compaction added pages");
                }
                Op::CompactWhileRead(i) if !order.is_empty() => {
                    let (h, data) = &model[&order[i % order.len()]];
                    let guard = pool.read(*h, data.len()).unwrap();
                    let before = pool.total_pages();
                    pool.compact();
                    prop_assert_eq!(&*guard, &data[..]);
                    drop(guard);
                    prop_assert!(pool.total_pages() <= before, "compaction added pages");
                    prop_assert_eq!(&*pool.read(*h, data.len()).unwrap(), &data[..]);
                }
                Op::CompactClass(i) => {
                    // As the store's compactor: the classes, and in a framed
                    // pool a last step that empties sparse system pages.
                    let steps = pool.geometry().classes().len();
                    if pool.is_framed() && i % (steps + 1) == steps {
                        let before = pool.total_pages();
                        pool.compact_system_pages();
                        prop_assert_eq!(pool.system_pages_reclaimable(), 0);
                        prop_assert!(pool.total_pages() <= before, "compaction added pages");
                        continue_checks(&pool)?;
                        continue;
                    }
                    let id = i % steps;
                    let before = pool.total_pages();
                    pool.compact_class(id);
                    prop_assert_eq!(pool.class_reclaimable(id), 0, "class {} left reclaimable pages", id);
                    prop_assert!(pool.total_pages() <= before, "compaction added pages");
                }
                Op::Free(i) if !order.is_empty() => {
                    let key = order.swap_remove(i % order.len());
                    let (h, _) = model.remove(&key).unwrap();
                    pool.free(h).unwrap();
                    freed.push(h);
                }
                _ => {
                    if let Some(h) = freed.last() {
                        prop_assert!(pool.free(*h).is_err(), "a freed handle must be refused");
                    }
                }
            }
            if let Err(e) = pool.check_invariants() {
                prop_assert!(false, "invariant broken: {}", e);
            }
        }
        for (h, data) in model.values() {
            prop_assert_eq!(&*pool.read(*h, data.len()).unwrap(), &data[..]);
            pool.free(*h).unwrap();
        }
        prop_assert_eq!(pool.total_pages(), 0);
        prop_assert!(pool.check_invariants().is_ok());
    }
}
