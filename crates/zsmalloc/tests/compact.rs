//! Compaction: every algorithm frees every freeable zspage, objects survive
//! byte for byte with their old handles, also while other threads work.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use testkit::{pattern, Rng};
use zsmalloc::{AutoCompact, CompactionAlgo, FullnessScheme, Handle, Mode, Pool, PoolConfig};

fn variants() -> Vec<(Mode, FullnessScheme, CompactionAlgo)> {
    let mut v = Vec::new();
    for mode in [Mode::KernelCompat, Mode::Default] {
        v.push((
            mode,
            FullnessScheme::ThreeQuarters,
            CompactionAlgo::DrainSource,
        ));
        v.push((
            mode,
            FullnessScheme::ThreeQuarters,
            CompactionAlgo::KeepDestination,
        ));
        v.push((
            mode,
            FullnessScheme::InuseRatio,
            CompactionAlgo::KeepDestination,
        ));
        v.push((mode, FullnessScheme::InuseRatio, CompactionAlgo::Optimal));
    }
    v
}

fn pool_for(mode: Mode, fullness: FullnessScheme, compaction: CompactionAlgo) -> Pool {
    let mut cfg = PoolConfig::of_mode(mode);
    cfg.fullness = fullness;
    cfg.compaction = compaction;
    Pool::new(cfg).unwrap()
}

/// Fills a pool with objects of random sizes and frees a random `free_pct`.
fn fragment(pool: &Pool, seed: u64, n: usize, free_pct: u64) -> Vec<(Handle, u64, usize)> {
    let mut rng = Rng(seed);
    let mut live = Vec::new();
    for id in 0..n as u64 {
        let len = (rng.next_u64() % 3000 + 20) as usize;
        let h = pool.malloc(len).unwrap();
        pool.write(h, &pattern(id, len)).unwrap();
        live.push((h, id, len));
    }
    live.retain(|&(h, _, _)| {
        if rng.next_u64() % 100 < free_pct {
            pool.free(h).unwrap();
            false
        } else {
            true
        }
    });
    live
}

fn verify(pool: &Pool, live: &[(Handle, u64, usize)]) {
    for &(h, id, len) in live {
        assert_eq!(&*pool.read(h, len).unwrap(), &pattern(id, len)[..]);
    }
}

#[test]
#[cfg_attr(miri, ignore = "thousands of objects: slow under Miri")]
fn every_variant_frees_every_freeable_zspage() {
    for (mode, fullness, algo) in variants() {
        let pool = pool_for(mode, fullness, algo);
        let live = fragment(&pool, 42, 20_000, 60);
        let freeable = pool.can_compact();
        assert!(
            freeable > 100,
            "{mode:?} {algo:?}: fragmentation made only {freeable} freeable pages"
        );
        let lower_bound = pool.compaction_lower_bound();
        let before = pool.total_pages();
        let r = pool.compact();
        assert_eq!(
            pool.can_compact(),
            0,
            "{mode:?} {fullness:?} {algo:?} left freeable pages"
        );
        assert_eq!(before - pool.total_pages(), r.pages_freed as usize);
        assert!(
            r.objs_moved >= lower_bound,
            "{algo:?} moved fewer than the lower bound"
        );
        if algo == CompactionAlgo::Optimal {
            // Default mode's trim moves come on top, counted apart.
            assert_eq!(
                r.objs_moved - r.objs_moved_trim,
                lower_bound,
                "{mode:?}: optimal meets the lower bound"
            );
        } else {
            assert_eq!(r.objs_moved_trim, 0);
        }
        if mode == Mode::KernelCompat {
            assert_eq!(
                r.pages_freed, freeable,
                "kernel-compat frees exactly zs_can_compact pages"
            );
        }
        let stats = pool.stats();
        assert_eq!(
            (stats.pages_compacted, stats.objs_moved),
            (r.pages_freed, r.objs_moved)
        );
        pool.check_invariants().unwrap();
        verify(&pool, &live);
        // A second compaction has nothing to do.
        assert_eq!(pool.compact().objs_moved, 0);
    }
}

#[test]
#[cfg_attr(miri, ignore = "thousands of objects: slow under Miri")]
fn per_class_compaction_touches_one_class() {
    let pool = pool_for(
        Mode::KernelCompat,
        FullnessScheme::InuseRatio,
        CompactionAlgo::KeepDestination,
    );
    let live = fragment(&pool, 7, 10_000, 70);
    let rows = pool.class_stats();
    let (id, _) = rows
        .iter()
        .enumerate()
        .max_by_key(|(_, r)| r.freeable)
        .unwrap();
    // Pages freeable in every class but `id`.
    let elsewhere = |rows: &[zsmalloc::ClassStats]| -> u64 {
        rows.iter()
            .enumerate()
            .filter(|(i, _)| *i != id)
            .map(|(_, r)| r.freeable)
            .sum()
    };
    let others = elsewhere(&rows);
    let r = pool.compact_class(id);
    assert!(r.pages_freed > 0);
    let after = pool.class_stats();
    assert_eq!(after[id].freeable, 0);
    assert_eq!(after[id].objs_moved, r.objs_moved);
    assert_eq!(others, elsewhere(&after));
    pool.check_invariants().unwrap();
    verify(&pool, &live);
}

#[test]
fn a_held_object_keeps_its_zspage_and_compaction_does_not_wait() {
    let pool = pool_for(
        Mode::KernelCompat,
        FullnessScheme::InuseRatio,
        CompactionAlgo::KeepDestination,
    );
    // Two half-empty zspages of class 112 (256 objects each).
    let a: Vec<Handle> = (0..256).map(|_| pool.malloc(100).unwrap()).collect();
    let b: Vec<Handle> = (0..256).map(|_| pool.malloc(100).unwrap()).collect();
    for h in a[..200].iter().chain(&b[..100]) {
        pool.free(*h).unwrap();
    }
    for (i, h) in a[200..].iter().chain(&b[100..]).enumerate() {
        pool.write(*h, &pattern(i as u64, 100)).unwrap();
    }
    let held = pool.read(a[255], 100).unwrap();
    let r = pool.compact();
    // The held object could not move, so its zspage survives.
    assert_eq!(pool.total_pages(), 14);
    assert_eq!(&*held, &pattern(55, 100)[..]);
    drop(held);
    assert!(r.objs_moved < 56);
    pool.check_invariants().unwrap();
    let r2 = pool.compact();
    assert_eq!(pool.total_pages(), 7, "freed once nobody holds it");
    assert!(r2.pages_freed == 7);
    for (i, h) in a[200..].iter().chain(&b[100..]).enumerate() {
        assert_eq!(&*pool.read(*h, 100).unwrap(), &pattern(i as u64, 100)[..]);
    }
}

#[test]
#[cfg_attr(miri, ignore = "thousands of objects: slow under Miri")]
fn compaction_under_load_from_four_threads() {
    for (mode, fullness, algo) in variants() {
        let pool = Arc::new(pool_for(mode, fullness, algo));
        under_load(pool, &format!("{mode:?} {algo:?}"));
    }
}

/// Framed pools (default mode on 16 and 64 KiB pages): compaction also
/// moves frames out of sparse system pages while four threads read, write,
/// keep reads (`into_raw`) and free; every object keeps its bytes.
#[test]
#[cfg_attr(miri, ignore = "thousands of objects: slow under Miri")]
fn framed_compaction_under_load_from_four_threads() {
    for page in [16384u32, 65536] {
        let pool = Arc::new(Pool::new(PoolConfig::default_mode(page)).unwrap());
        assert!(pool.is_framed());
        under_load(pool, &format!("framed {page}"));
    }
}

fn under_load(pool: Arc<Pool>, label: &str) {
    {
        let stable = fragment(&pool, 99, 8_000, 50);
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let (pool, stop) = (pool.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut rng = Rng(t * 31 + 5);
                    let mut mine: Vec<(Handle, u64, usize)> = Vec::new();
                    let mut step = 0u64;
                    while !stop.load(Ordering::Relaxed) || step < 2_000 {
                        step += 1;
                        let r = rng.next_u64();
                        if mine.len() < 50 || r % 2 == 0 {
                            let len = (rng.next_u64() % 3000 + 1) as usize;
                            let id = 1 << 40 | t << 32 | step;
                            let h = pool.malloc(len).unwrap();
                            pool.write(h, &pattern(id, len)).unwrap();
                            mine.push((h, id, len));
                        } else {
                            let i = rng.next_u64() as usize % mine.len();
                            let (h, id, len) = mine[i];
                            if r % 5 == 0 {
                                // A kept read, as the C API and the store
                                // make: its bytes stay until released.
                                let raw = pool.read(h, len).unwrap().into_raw();
                                std::thread::yield_now();
                                // SAFETY: the hold kept by `into_raw` is
                                // outstanding until `release_read` below.
                                assert_eq!(unsafe { raw.as_ref() }, &pattern(id, len)[..]);
                                // SAFETY: released once; `raw` is not used after.
                                unsafe { pool.release_read(h) };
                            }
                            assert_eq!(&*pool.read(h, len).unwrap(), &pattern(id, len)[..]);
                            if r % 3 == 0 {
                                // Rewrite in place while compaction may move it.
                                let nid = id ^ 0xabc;
                                pool.write(h, &pattern(nid, len)).unwrap();
                                mine[i].1 = nid;
                            } else {
                                mine.swap_remove(i);
                                pool.free(h).unwrap();
                            }
                        }
                        if mine.len() > 300 {
                            let (h, _, _) = mine.swap_remove(0);
                            pool.free(h).unwrap();
                        }
                    }
                    mine
                })
            })
            .collect();
        let mut moved = 0;
        for _ in 0..20 {
            moved += pool.compact().objs_moved;
        }
        stop.store(true, Ordering::Relaxed);
        let mut all: Vec<_> = workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        assert!(moved > 0, "{label}: compaction moved nothing under load");
        pool.check_invariants().unwrap();
        all.extend(stable);
        verify(&pool, &all);
        pool.compact();
        assert_eq!(pool.can_compact(), 0);
        verify(&pool, &all);
        for (h, _, _) in all {
            pool.free(h).unwrap();
        }
        assert_eq!(pool.total_pages(), 0);
        pool.check_invariants().unwrap();
    }
}

#[test]
#[cfg_attr(miri, ignore = "thousands of objects: slow under Miri")]
fn automatic_compaction_keeps_freeable_pages_below_its_threshold() {
    let mut cfg = PoolConfig::kernel_compat();
    cfg.auto_compact = Some(AutoCompact {
        threshold_pages: 32,
    });
    let pool = Pool::new(cfg).unwrap();
    let mut live = fragment(&pool, 3, 30_000, 0);
    let mut rng = Rng(17);
    let mut runs = 0;
    let mut compacted = 0;
    while live.len() > 5_000 {
        let i = rng.next_u64() as usize % live.len();
        let (h, _, _) = live.swap_remove(i);
        pool.free(h).unwrap();
        for row in pool.class_stats() {
            assert!(
                row.freeable < 32 + u64::from(row.pages_per_zspage),
                "class {} at {} freeable",
                row.size,
                row.freeable
            );
        }
        let now = pool.stats().pages_compacted;
        if now > compacted {
            // Hysteresis: a run only starts at the threshold and frees all of it.
            assert!(
                now - compacted >= 32,
                "a run freed only {} pages",
                now - compacted
            );
            runs += 1;
            compacted = now;
        }
    }
    assert!(runs > 0 && pool.stats().objs_moved > 0);
    pool.check_invariants().unwrap();
    verify(&pool, &live);
}

#[test]
#[cfg_attr(miri, ignore = "thousands of objects: slow under Miri")]
fn compaction_with_a_thread_working_in_the_same_class() {
    for (mode, fullness, algo) in variants() {
        let pool = pool_for(mode, fullness, algo);
        // One class: every object the same size.
        let mut live = Vec::new();
        for id in 0..30_000u64 {
            let h = pool.malloc(200).unwrap();
            pool.write(h, &pattern(id, 200)).unwrap();
            live.push((h, id, 200));
        }
        let mut rng = Rng(11);
        live.retain(|&(h, _, _)| rng.next_u64() % 100 >= 70 || pool.free(h).is_err());
        let done = AtomicBool::new(false);
        let started = AtomicBool::new(false);
        let r = std::thread::scope(|s| {
            let worker = s.spawn(|| {
                // Allocates and frees in the class being compacted, so it
                // keeps finding the class lock taken.
                let mut n = 0u64;
                while !done.load(Ordering::Relaxed) {
                    let h = pool.malloc(200).unwrap();
                    pool.write(h, &pattern(1 << 40 | n, 200)).unwrap();
                    assert_eq!(&*pool.read(h, 200).unwrap(), &pattern(1 << 40 | n, 200)[..]);
                    pool.free(h).unwrap();
                    n += 1;
                    if n == 100 {
                        started.store(true, Ordering::Release);
                    }
                }
                n
            });
            while !started.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            let r = pool.compact();
            done.store(true, Ordering::Relaxed);
            assert!(worker.join().unwrap() >= 100);
            r
        });
        let label = format!("{mode:?}/{fullness:?}/{algo:?}");
        // How often it paused depends on the scheduler (the unit test in
        // compact.rs checks pausing deterministically); what it must do
        // whatever the timing is lose nothing and free what it can.
        eprintln!("{label}: {r:?}");
        assert!(r.pages_freed > 0, "{label}: {r:?}");
        pool.check_invariants().unwrap();
        verify(&pool, &live);
        // Alone again, it finishes the job.
        pool.compact();
        assert_eq!(pool.can_compact(), 0, "{label}");
        pool.check_invariants().unwrap();
        verify(&pool, &live);
    }
}

/// Checks one statistics snapshot against itself.
fn assert_consistent(pool: &Pool, mode: Mode) {
    let rows = pool.class_stats();
    for r in &rows {
        assert!(r.obj_used <= r.obj_allocated, "class {}: {r:?}", r.size);
        assert!(r.groups.iter().sum::<u64>() <= r.zspages, "{r:?}");
        assert_eq!(r.obj_allocated % r.zspages.max(1), 0, "{r:?}");
        if mode == Mode::KernelCompat {
            assert_eq!(
                r.pages_used,
                r.zspages * u64::from(r.pages_per_zspage),
                "{r:?}"
            );
        }
    }
    let s = pool.stats();
    assert!(s.objs_used <= s.objs_allocated, "{s:?}");
    if mode == Mode::KernelCompat {
        // Every zspage of a kernel-compat class holds all its pages.
        assert!(s.total_pages >= s.zspages, "{s:?}");
    }
}

#[test]
#[cfg_attr(miri, ignore = "thousands of objects: slow under Miri")]
fn statistics_stay_consistent_while_other_threads_write_free_and_compact() {
    for mode in [Mode::KernelCompat, Mode::Default] {
        let pool = Arc::new(pool_for(
            mode,
            FullnessScheme::InuseRatio,
            CompactionAlgo::KeepDestination,
        ));
        let stable = fragment(&pool, 7, 6_000, 60);
        let done = Arc::new(AtomicBool::new(false));
        let churn = {
            let (pool, done) = (pool.clone(), done.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(11);
                let mut mine: Vec<Handle> = Vec::new();
                for step in 0..200_000u64 {
                    if rng.next_u64() % 3 != 0 || mine.is_empty() {
                        let len = (rng.next_u64() % 3000 + 20) as usize;
                        mine.push(pool.malloc(len).unwrap());
                    } else {
                        let i = (rng.next_u64() as usize) % mine.len();
                        pool.free(mine.swap_remove(i)).unwrap();
                    }
                    if step % 2_000 == 0 {
                        // Free most of what this thread holds so that
                        // compaction finds sparse zspages.
                        for h in mine.drain(..mine.len() * 3 / 4) {
                            pool.free(h).unwrap();
                        }
                    }
                }
                for h in mine {
                    pool.free(h).unwrap();
                }
                done.store(true, Ordering::Release);
            })
        };
        let compactor = {
            let (pool, done) = (pool.clone(), done.clone());
            std::thread::spawn(move || {
                let mut runs = 0u64;
                while !done.load(Ordering::Acquire) || runs < 20 {
                    pool.compact();
                    runs += 1;
                }
            })
        };
        let mut reads = 0u64;
        while !done.load(Ordering::Acquire) || reads < 2_000 {
            assert_consistent(&pool, mode);
            reads += 1;
        }
        churn.join().unwrap();
        compactor.join().unwrap();
        pool.check_invariants().unwrap();
        let end = pool.stats();
        assert_eq!(end.total_pages, pool.total_pages() as u64);
        assert!(
            end.objs_moved > 0,
            "compaction ran beside the reads: {end:?}"
        );
        eprintln!("{mode:?}: {reads} snapshots, {end:?}");
        verify(&pool, &stable);
    }
}

/// A background compaction frees exactly what a manual one does and counts
/// the same pages; only what happens to the freed pages differs: default
/// mode keeps some resident for reuse (within its bound, not counted), a
/// manual compaction and kernel-compat keep none.
#[test]
#[cfg_attr(miri, ignore = "thousands of objects: slow under Miri")]
fn background_compaction_counts_like_a_manual_one_and_keeps_within_the_bound() {
    for mode in [Mode::KernelCompat, Mode::Default] {
        let manual = pool_for(mode, FullnessScheme::InuseRatio, CompactionAlgo::Optimal);
        let background = pool_for(mode, FullnessScheme::InuseRatio, CompactionAlgo::Optimal);
        manual.set_page_cache_limit(0);
        background.set_page_cache_limit(0);
        let live_m = fragment(&manual, 11, 20_000, 70);
        let live_b = fragment(&background, 11, 20_000, 70);
        assert_eq!(manual.total_pages(), background.total_pages());
        let rm = manual.compact();
        let rb = background.compact_background();
        assert_eq!(
            (rm.pages_freed, rm.objs_moved),
            (rb.pages_freed, rb.objs_moved),
            "{mode:?}"
        );
        assert!(rb.pages_freed > 0, "{mode:?}: the workload fragments");
        assert_eq!(manual.total_pages(), background.total_pages(), "{mode:?}");
        let m = manual.page_stats();
        assert_eq!((m.cached_pages, m.pending_pages), (0, 0), "{mode:?}");
        let b = background.page_stats();
        let kept = b.cached_pages + b.pending_pages;
        match mode {
            Mode::KernelCompat => assert_eq!((kept, b.retain_divisor), (0, 0)),
            Mode::Default => {
                assert_eq!(b.retain_divisor, zsmalloc::DEFAULT_RETAIN_DIVISOR);
                assert!(kept > 0, "freed pages kept for reuse");
                assert!(
                    kept <= b.bound_pages,
                    "{kept} kept, bound {}",
                    b.bound_pages
                );
                assert_eq!(b.bound_pages, b.pages_out / b.retain_divisor);
            }
        }
        verify(&manual, &live_m);
        verify(&background, &live_b);
        background.check_invariants().unwrap();
        // A manual compaction after it gives the kept pages back.
        background.compact();
        let b = background.page_stats();
        assert_eq!((b.cached_pages, b.pending_pages), (0, 0), "{mode:?}");
    }
}
