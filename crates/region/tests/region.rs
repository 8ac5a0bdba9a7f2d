//! The region against real faults: contents after eviction, many threads,
//! writes racing eviction, the program's madvise, mremap and munmap,
//! teardown, user-mode-only mode, hints, age eviction, statistics. Each
//! test runs under a deadline and skips (printing why) where no
//! userfaultfd can be opened.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{
    check, check_pages, config, fill, fill_pages, filled_region, in_both_services, is_zero, ps,
    region_or_skip, reserve, Deadline, Ptr, Rng,
};
use region::{
    ControllerConfig, FaultService, Region, RegionConfig, RegionError, UffdMode, UffdOpen,
};

const MIB: usize = 1 << 20;

/// The resident pages are within the limit, unless the region served
/// faults over it because its evictor made no room in time (on a slow
/// machine: a guest under software emulation), and then by no more than
/// those faults.
fn assert_within_limit(s: &region::RegionStats) {
    assert!(
        s.resident_pages <= s.resident_limit_pages + s.faults.over_limit,
        "{s:?}"
    );
    if s.faults.over_limit > 0 {
        eprintln!("{} faults served over the limit", s.faults.over_limit);
    }
}

#[test]
fn bad_lengths_and_limits_are_typed_errors() {
    let e = Region::new(0, RegionConfig::new(4096)).unwrap_err();
    assert!(matches!(e, RegionError::BadLength { len: 0 }), "{e}");
    assert_eq!(
        e.to_string(),
        "region length 0 is not usable: it must be above 0 and mappable"
    );
    let e = Region::new(usize::MAX - 10, RegionConfig::new(4096)).unwrap_err();
    assert!(matches!(e, RegionError::BadLength { .. }), "{e}");
    let e = Region::new(MIB, RegionConfig::new(0)).unwrap_err();
    assert!(matches!(e, RegionError::BadLimit { limit: 0, .. }), "{e}");
    let e = Region::new(MIB, RegionConfig::new(2 * MIB)).unwrap_err();
    assert!(!e.to_string().contains('\n'));
    assert!(e.to_string().contains("at most the region's"), "{e}");
}

in_both_services!(
    pages_beyond_the_limit_are_stored_and_come_back_with():
    pages_beyond_the_limit_are_stored_and_come_back,
    pages_beyond_the_limit_are_stored_and_come_back_in_the_faulting_thread
);

fn pages_beyond_the_limit_are_stored_and_come_back_with(service: FaultService) {
    let _d = Deadline::new("pages_beyond_the_limit", 60);
    let Some(r) = region_or_skip(64 * MIB, config(service, 4 * MIB)) else {
        return;
    };
    let ps = ps();
    let n = r.len() / ps;
    let base = r.as_ptr();
    for i in 0..n {
        // SAFETY: page i of the region.
        let p = unsafe { base.add(i * ps) };
        if i % 7 == 0 {
            // Same-filled: the store keeps no object for it.
            // SAFETY: as above.
            unsafe { std::ptr::write_bytes(p, 0x5a, ps) };
        } else {
            fill(p, ps, i as u64, 1);
        }
    }
    let s = r.stats();
    assert_within_limit(&s);
    assert!(
        s.stored_pages as usize >= (n - 1024 - 64).saturating_sub(s.faults.over_limit as usize),
        "{s:?}"
    );
    assert!(s.mm_stat.same_pages > 0, "{:?}", s.mm_stat);
    assert!(s.mm_stat.compr_data_size < s.mm_stat.orig_data_size / 3);
    for round in 0..2 {
        for i in 0..n {
            // SAFETY: page i.
            let p = unsafe { base.add(i * ps) };
            if i % 7 == 0 {
                // SAFETY: page i, readable.
                let b = unsafe { std::slice::from_raw_parts(p, ps) };
                assert!(b.iter().all(|&x| x == 0x5a), "page {i} round {round}");
            } else {
                assert_eq!(check(p, ps), (i as u64, 1), "round {round}");
            }
        }
    }
    let s = r.stats();
    assert!(s.faults.missing_store as usize >= n, "{s:?}");
    assert!(s.faults.missing_zero as usize >= n - 1, "{s:?}");
    assert_within_limit(&s);
    assert!(s.fault_latency.count > 0 && s.fault_latency.p50_ns > 0);
}

#[test]
fn the_handler_follows_a_lone_faulting_thread() {
    let _d = Deadline::new("the_handler_follows", 60);
    let mut cfg = RegionConfig::new(2 * MIB);
    cfg.handler_follows = true;
    let Some((r, n)) = filled_region(32 * MIB, cfg, 0) else {
        return;
    };
    let ps = ps();
    let base = r.as_ptr();
    // Faults from this thread alone for at least a few periods; again
    // while other work keeps the machine busy (the handler does not
    // follow then), up to five times.
    let mut rng = Rng(7);
    let mut s = r.stats();
    for _ in 0..5 {
        let start = std::time::Instant::now();
        let mut touched = 0;
        while start.elapsed() < Duration::from_millis(300) || touched < 4096 {
            let i = rng.below(n as u64) as usize;
            // SAFETY: page i.
            assert_eq!(check(unsafe { base.add(i * ps) }, ps), (i as u64, 0));
            touched += 1;
        }
        s = r.stats();
        if !s.handler_follows || s.handler_moves > 0 {
            break;
        }
    }
    assert!(s.faults.missing_store > 1000, "{s:?}");
    if !s.handler_follows {
        eprintln!(
            "skipped: the handler cannot follow here (one CPU, or no way back from SCHED_IDLE)"
        );
        return;
    }
    if s.handler_moves == 0 {
        eprintln!("skipped: other work kept the machine busy, so the handler never followed");
        return;
    }
    // Off (the default), it never moves.
    let r = Region::new(8 * MIB, RegionConfig::new(2 * MIB)).unwrap();
    let base = r.as_ptr();
    for round in 0..3 {
        for i in 0..r.len() / ps {
            // SAFETY: page i of the second region.
            fill(unsafe { base.add(i * ps) }, ps, i as u64, round);
        }
    }
    let s = r.stats();
    assert!(!s.handler_follows && s.handler_moves == 0, "{s:?}");
}

#[test]
fn a_limit_that_covers_the_process_leaves_the_region_the_rest() {
    let _d = Deadline::new("a_limit_that_covers_the_process", 60);
    let mut cfg = RegionConfig::new(24 * MIB);
    cfg.limit_covers = region::LimitCovers::Process;
    let Some(r) = region_or_skip(64 * MIB, cfg) else {
        return;
    };
    // 12 MiB of ordinary memory outside the region (other tests of this
    // binary add theirs: the outside only grows).
    let mut outside = vec![0u8; 12 * MIB];
    for (k, b) in outside.iter_mut().enumerate().step_by(ps()) {
        *b = k as u8 | 1;
    }
    std::hint::black_box(&mut outside);
    let ps = ps();
    let n = r.len() / ps;
    let base = r.as_ptr();
    for round in 0..3 {
        for i in 0..n {
            // SAFETY: page i.
            fill(unsafe { base.add(i * ps) }, ps, i as u64, round);
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    check_pages(base, n, 2);
    let s = r.stats();
    let cap = s.resident_limit_pages;
    assert_eq!(s.limit_covers, "process");
    assert!(s.outside_bytes >= 12 * MIB as u64, "{s:?}");
    assert!(
        s.region_share_pages <= cap - (12 * MIB / ps) as u64 && s.region_share_pages >= cap / 4,
        "{s:?}"
    );
    // The evictor leaves a batch of room under the share; a fault may be
    // served over it when the evictor is late, and a share just lowered
    // (other tests grew) takes the evictor a moment: up to a second.
    let mut s = s;
    let waited = std::time::Instant::now();
    while s.resident_pages > s.region_share_pages + 64 + s.faults.over_limit
        && waited.elapsed() < Duration::from_secs(1)
    {
        std::thread::sleep(Duration::from_millis(10));
        s = r.stats();
    }
    assert!(
        s.resident_pages <= s.region_share_pages + 64 + s.faults.over_limit,
        "{s:?}"
    );
    assert!(outside
        .iter()
        .step_by(ps)
        .enumerate()
        .all(|(k, &b)| b == (k * ps) as u8 | 1));
    drop(outside);
}

in_both_services!(
    many_threads_fault_random_pages_with_checksums_with():
    many_threads_fault_random_pages_with_checksums,
    many_threads_fault_random_pages_with_checksums_in_the_faulting_thread
);

fn many_threads_fault_random_pages_with_checksums_with(service: FaultService) {
    let _d = Deadline::new("many_threads", 120);
    let Some((r, n)) = filled_region(32 * MIB, config(service, 2 * MIB), 0) else {
        return;
    };
    let ps = ps();
    let base = Ptr(r.as_ptr());
    const THREADS: usize = 8;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let base = base;
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t as u64 + 1));
                let mut version = vec![0u64; n];
                for _ in 0..20_000 {
                    let i = rng.below(n as u64) as usize;
                    // SAFETY: page i.
                    let p = unsafe { base.0.add(i * ps) };
                    if i % THREADS == t {
                        // Ours: check the version we wrote, write the next.
                        assert_eq!(check(p, ps), (i as u64, version[i]));
                        version[i] += 1;
                        fill(p, ps, i as u64, version[i]);
                    } else {
                        // Another thread's: any version, intact. A torn
                        // read of a page its owner rewrites is possible,
                        // so only the index is checked here.
                        // SAFETY: page i, readable.
                        let idx = unsafe { std::ptr::read_volatile(p as *const u64) };
                        assert_eq!(idx, i as u64);
                    }
                }
                version
            })
        })
        .collect();
    let versions: Vec<Vec<u64>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for i in 0..n {
        // SAFETY: page i.
        let p = unsafe { base.0.add(i * ps) };
        assert_eq!(check(p, ps), (i as u64, versions[i % THREADS][i]));
    }
    let s = r.stats();
    assert!(s.faults.missing_store > 1000, "{s:?}");
    assert_within_limit(&s);
    eprintln!("{}", r.stats_json());
}

in_both_services!(
    writes_racing_eviction_are_never_lost_with():
    writes_racing_eviction_are_never_lost,
    writes_racing_eviction_are_never_lost_in_the_faulting_thread
);

fn writes_racing_eviction_are_never_lost_with(service: FaultService) {
    let _d = Deadline::new("writes_racing_eviction", 90);
    let Some(r) = region_or_skip(4 * MIB, config(service, 4 * MIB)) else {
        return;
    };
    let ps = ps();
    let pages = 64;
    let base = Ptr(r.as_ptr());
    let r = Arc::new(r);
    let stop = Arc::new(AtomicBool::new(false));
    // Four writers, each incrementing a counter in each of its own pages
    // (all eight bytes of a word, and a copy of it at the page's end).
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let base = base;
                let mut count = vec![0u64; pages];
                let mut rounds = 0u64;
                while !stop.load(Ordering::Relaxed) || rounds < 2000 {
                    for (k, c) in count.iter_mut().enumerate() {
                        if k % 4 != t {
                            continue;
                        }
                        // SAFETY: page k, written by this thread only.
                        let p = unsafe { base.0.add(k * ps) } as *mut u64;
                        // SAFETY: as above; the last word of the page.
                        let q = unsafe { base.0.add(k * ps + ps - 8) } as *mut u64;
                        // SAFETY: aligned words of page k.
                        unsafe {
                            assert_eq!(std::ptr::read_volatile(p), *c, "page {k}");
                            assert_eq!(std::ptr::read_volatile(q), *c, "page {k} end");
                            *c += 1;
                            std::ptr::write_volatile(p, *c);
                            std::ptr::write_volatile(q, *c);
                        }
                    }
                    rounds += 1;
                }
                count
            })
        })
        .collect();
    // Meanwhile, evict those pages over and over, until thousands went and
    // writes met evictions in progress (write-protect faults), or 40 s.
    let mut evicted = 0;
    let end = std::time::Instant::now() + Duration::from_secs(40);
    while (evicted < 5000 || r.stats().faults.wp < 20) && std::time::Instant::now() < end {
        evicted += r.cold(0..pages * ps).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let counts: Vec<Vec<u64>> = writers.into_iter().map(|h| h.join().unwrap()).collect();
    for k in 0..pages {
        let want = counts[k % 4][k];
        // SAFETY: page k.
        let got = unsafe { std::ptr::read_volatile(base.0.add(k * ps) as *const u64) };
        assert_eq!(got, want, "page {k}");
    }
    let s = r.stats();
    eprintln!(
        "evicted {evicted}, wp faults {}, store faults {}",
        s.faults.wp, s.faults.missing_store
    );
    assert!(evicted >= 5000, "{s:?}");
    assert!(s.faults.wp >= 20, "writes never met an eviction: {s:?}");
    assert!(s.faults.missing_store > 1000, "{s:?}");
}

in_both_services!(
    madvise_dontneed_reads_zeros_and_frees_the_stored_copies_with():
    madvise_dontneed_reads_zeros_and_frees_the_stored_copies,
    madvise_dontneed_reads_zeros_and_frees_the_stored_copies_in_the_faulting_thread
);

fn madvise_dontneed_reads_zeros_and_frees_the_stored_copies_with(service: FaultService) {
    let _d = Deadline::new("madvise_dontneed", 60);
    let Some((r, n)) = filled_region(8 * MIB, config(service, 8 * MIB), 7) else {
        return;
    };
    let ps = ps();
    let base = r.as_ptr();
    // Pages 0..n/2 go to the store; n/4..3n/4 are then dropped by the
    // program: half of them stored, half resident.
    assert_eq!(r.cold(0..n / 2 * ps).unwrap(), n / 2);
    let before = r.stats();
    assert_eq!(before.mm_stat.orig_data_size as usize, n / 2 * ps);
    // SAFETY: a range of the region; the program gives up its contents.
    let rc = unsafe { libc::madvise(base.add(n / 4 * ps).cast(), n / 2 * ps, libc::MADV_DONTNEED) };
    assert_eq!(rc, 0);
    for i in 0..n {
        // SAFETY: page i.
        let p = unsafe { base.add(i * ps) };
        if (n / 4..3 * n / 4).contains(&i) {
            assert!(is_zero(p, ps), "page {i} after DONTNEED");
        } else {
            assert_eq!(check(p, ps), (i as u64, 7));
        }
    }
    let s = r.stats();
    assert_eq!(s.removed_by_program as usize, n / 2, "{s:?}");
    assert_eq!(s.stored_pages, 0, "the rest were read back");
    assert_eq!(s.mm_stat.orig_data_size, 0, "{:?}", s.mm_stat);
    // The dropped pages can be written again and evicted again.
    for i in n / 4..3 * n / 4 {
        // SAFETY: page i.
        fill(unsafe { base.add(i * ps) }, ps, i as u64, 8);
    }
    r.cold(0..r.len()).unwrap();
    for i in n / 4..3 * n / 4 {
        // SAFETY: page i.
        assert_eq!(check(unsafe { base.add(i * ps) }, ps), (i as u64, 8));
    }
}

in_both_services!(
    drops_racing_eviction_at_the_limit_never_hang_with():
    drops_racing_eviction_at_the_limit_never_hang,
    drops_racing_eviction_at_the_limit_never_hang_in_the_faulting_thread
);

/// The program drops pages (`madvise(DONTNEED)`, as a freeing allocator
/// does) while the evictor, at the limit, is taking those same pages: the
/// eviction's copy then faults on a page the kernel zapped, and the handler
/// must serve it rather than wait for the eviction to end (a `cold` hint
/// on a third thread evicts the dropper's pages too). Dropped pages
/// read as zeros, the other pages keep their contents, nothing hangs. The
/// dropper writes some dropped pages again at once (as an allocator
/// reuses what it freed): an eviction's zap, still to come, must not throw
/// those writes away.
fn drops_racing_eviction_at_the_limit_never_hang_with(service: FaultService) {
    let _d = Deadline::new("drops_racing_eviction", 120);
    let Some(r) = region_or_skip(32 * MIB, config(service, 2 * MIB)) else {
        return;
    };
    let ps = ps();
    let n = r.len() / ps;
    let half = n / 2;
    let base = Ptr(r.as_ptr());
    let writing = AtomicBool::new(true);
    // What each of the dropper's pages holds at the end: 0 for zeros, else
    // the round of its last fill.
    let expect = std::sync::Mutex::new(vec![0u64; n - half]);
    std::thread::scope(|s| {
        s.spawn(|| {
            let base = &base;
            for round in 1..=3u64 {
                for i in 0..half {
                    // SAFETY: page i, the writer's half.
                    fill(unsafe { base.0.add(i * ps) }, ps, i as u64, round);
                }
            }
            writing.store(false, Ordering::Release);
        });
        // Evictions of the dropper's pages on a thread of their own, beside
        // the evictor's.
        s.spawn(|| {
            while writing.load(Ordering::Acquire) {
                let _ = r.cold(half * ps..n * ps);
            }
        });
        s.spawn(|| {
            let base = &base;
            let mut expect = expect.lock().unwrap();
            let mut rng = Rng(0x5eed);
            let chunk = 64;
            let mut drops = 0;
            while writing.load(Ordering::Acquire) || drops < 50 {
                let first = half + rng.below(((n - half) / chunk) as u64) as usize * chunk;
                for i in first..first + chunk {
                    // SAFETY: page i, the dropper's half.
                    fill(unsafe { base.0.add(i * ps) }, ps, i as u64, 1);
                }
                // SAFETY: pages of the dropper's half, given up.
                let rc = unsafe {
                    libc::madvise(
                        base.0.add(first * ps).cast(),
                        chunk * ps,
                        libc::MADV_DONTNEED,
                    )
                };
                assert_eq!(rc, 0);
                for i in first..first + chunk {
                    // SAFETY: page i.
                    let page = unsafe { base.0.add(i * ps) };
                    assert!(is_zero(page, ps), "page {i} after DONTNEED");
                    expect[i - half] = 0;
                }
                drops += 1;
                // Every other drop, half the chunk is written again at once.
                if drops % 2 == 0 {
                    for i in first..first + chunk / 2 {
                        let round = 2 + drops as u64;
                        // SAFETY: page i, the dropper's half.
                        fill(unsafe { base.0.add(i * ps) }, ps, i as u64, round);
                        expect[i - half] = round;
                    }
                }
            }
        });
    });
    for i in 0..half {
        // SAFETY: page i.
        let page = unsafe { base.0.add(i * ps) };
        assert_eq!(check(page, ps), (i as u64, 3), "page {i}");
    }
    let expect = expect.into_inner().unwrap();
    for i in half..n {
        // SAFETY: page i.
        let page = unsafe { base.0.add(i * ps) };
        // (Each fill of round 1 is dropped at once: a page left by a drop
        // reads as zeros.)
        match expect[i - half] {
            0 => assert!(is_zero(page, ps), "page {i}: dropped last"),
            round => assert_eq!(check(page, ps), (i as u64, round), "page {i}"),
        }
    }
    let st = r.stats();
    assert!(st.removed_by_program > 0, "{st:?}");
}

in_both_services!(
    hot_pages_in_windows_with(false):
    hot_pages_a_window_maps_back_keep_their_contents,
    hot_pages_a_window_maps_back_keep_their_contents_in_the_faulting_thread
);

in_both_services!(
    hot_pages_in_windows_with(true):
    hot_pages_a_window_maps_back_keep_their_contents_and_drops_win,
    hot_pages_a_window_maps_back_keep_their_contents_and_drops_win_in_the_faulting_thread
);

/// Scattered hot pages: the windows that evict under the limit take them
/// with their victims and map them back. One thread writes and checks
/// three pages in four (a hot one in every 64 taken most often, so they
/// stay referenced between the clock's passes); another keeps the fourth
/// pages hot and, with `drops`, drops them (`MADV_DONTNEED`), then writes
/// half of them again. Every page must end as its last writer left it, or
/// as zeros after a drop.
fn hot_pages_in_windows_with(service: FaultService, drops: bool) {
    let _d = Deadline::new("hot_pages_in_windows", 120);
    let Some(r) = region_or_skip(32 * MIB, config(service, 2 * MIB)) else {
        return;
    };
    let ps = ps();
    let n = r.len() / ps;
    let base = Ptr(r.as_ptr());
    let running = AtomicBool::new(true);
    let dropper = |i: usize| i % 4 == 1;
    // Pick a page of one thread's own: a hot one (every 64th) half the
    // time.
    let pick = |rng: &mut Rng, own: &dyn Fn(usize) -> bool| loop {
        let i = if rng.below(2) == 0 {
            rng.below((n / 64) as u64) as usize * 64 + rng.below(4) as usize
        } else {
            rng.below(n as u64) as usize
        };
        if own(i) {
            return i;
        }
    };
    let (written, dropped) = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let base = &base;
            let mut version = vec![0u64; n];
            let mut rng = Rng(0xfeed);
            for _ in 0..60_000 {
                let i = pick(&mut rng, &|i| !dropper(i));
                // SAFETY: page i, one of the writer's.
                let page = unsafe { base.0.add(i * ps) };
                match version[i] {
                    0 => assert!(is_zero(page, ps), "page {i} never written"),
                    v => assert_eq!(check(page, ps), (i as u64, v), "page {i}"),
                }
                version[i] += 1;
                fill(page, ps, i as u64, version[i]);
            }
            running.store(false, Ordering::Release);
            version
        });
        let dropping = s.spawn(|| {
            let base = &base;
            let mut expect = vec![0u64; n];
            let mut rng = Rng(0xd209);
            let mut round = 1;
            while running.load(Ordering::Acquire) {
                let i = pick(&mut rng, &dropper);
                // SAFETY: page i, one of the dropper's.
                let page = unsafe { base.0.add(i * ps) };
                round += 1;
                fill(page, ps, i as u64, round);
                // Kept hot a while: referenced when the hand passes.
                for _ in 0..8 {
                    assert_eq!(check(page, ps), (i as u64, round), "page {i}");
                }
                expect[i] = round;
                if !drops {
                    continue;
                }
                // SAFETY: one of the dropper's pages, given up.
                let rc = unsafe { libc::madvise(page.cast(), ps, libc::MADV_DONTNEED) };
                assert_eq!(rc, 0);
                assert!(
                    is_zero(page, ps),
                    "page {i} after DONTNEED of round {round}: {:?}",
                    check(page, ps)
                );
                expect[i] = 0;
                if round % 2 == 0 {
                    fill(page, ps, i as u64, round);
                    expect[i] = round;
                }
            }
            expect
        });
        (writer.join().unwrap(), dropping.join().unwrap())
    });
    for i in 0..n {
        // SAFETY: page i.
        let page = unsafe { base.0.add(i * ps) };
        let v = if dropper(i) { dropped[i] } else { written[i] };
        match v {
            0 => assert!(is_zero(page, ps), "page {i}: zeros"),
            v => {
                assert!(
                    !is_zero(page, ps),
                    "page {i} (dropper's: {}) reads zeros, not version {v}",
                    dropper(i)
                );
                assert_eq!(check(page, ps), (i as u64, v), "page {i}");
            }
        }
    }
    let st = r.stats();
    assert!(st.evictions.window_zaps > 0, "{st:?}");
    assert!(
        st.evictions.window_spared > 0,
        "no window spared a hot page: {:?}",
        st.evictions
    );
    assert!(!drops || st.removed_by_program > 0, "{st:?}");
}

in_both_services!(
    mremap_moves_pages_with_their_contents_with():
    mremap_moves_pages_with_their_contents,
    mremap_moves_pages_with_their_contents_in_the_faulting_thread
);

fn mremap_moves_pages_with_their_contents_with(service: FaultService) {
    let _d = Deadline::new("mremap", 60);
    let Some(r) = region_or_skip(4 * MIB, config(service, 4 * MIB)) else {
        return;
    };
    let ps = ps();
    let n = r.len() / ps;
    let old = r.as_ptr();
    fill_pages(old, n, 3);
    assert_eq!(r.cold(0..r.len() / 2).unwrap(), n / 2);
    // A place to move to.
    let to = reserve(r.len());
    // SAFETY: moves the whole region onto the reservation.
    let moved = unsafe {
        libc::mremap(
            old.cast(),
            r.len(),
            r.len(),
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            to,
        )
    };
    assert_eq!(moved, to, "{}", std::io::Error::last_os_error());
    assert_eq!(r.as_ptr(), to as *mut u8, "the region follows");
    let base = r.as_ptr();
    check_pages(base, n, 3);
    // Evicted again at the new address, and back.
    assert_eq!(r.cold(0..r.len()).unwrap(), n);
    check_pages(base, n, 3);
    assert_eq!(r.stats().remaps, 1);
}

in_both_services!(
    reads_right_after_mremap_with():
    reads_right_after_mremap_find_the_moved_pages,
    reads_right_after_mremap_find_the_moved_pages_in_the_faulting_thread
);

/// The region moved 200 times, its pages evicted before each move and one
/// read at once after it: `mremap` returns as soon as
/// its event is read, and the fault (and `as_ptr`) must wait for the
/// handler to have moved the mapping.
fn reads_right_after_mremap_with(service: FaultService) {
    let _d = Deadline::new("reads_right_after_mremap", 60);
    let Some(r) = region_or_skip(MIB, config(service, MIB)) else {
        return;
    };
    let ps = ps();
    let n = r.len() / ps;
    let first = r.as_ptr();
    fill_pages(first, n, 4);
    // A fresh reservation for each move (a range the region left may be
    // mapped again by another test's thread at once).
    let places: Vec<*mut u8> = (0..200).map(|_| reserve(r.len()).cast()).collect();
    for (round, &to) in places.iter().enumerate() {
        r.cold(0..r.len()).unwrap();
        // SAFETY: moves the whole region onto a reservation of its own.
        let moved = unsafe {
            libc::mremap(
                r.as_ptr().cast(),
                r.len(),
                r.len(),
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                to.cast::<libc::c_void>(),
            )
        };
        assert_eq!(
            moved.cast::<u8>(),
            to,
            "{}",
            std::io::Error::last_os_error()
        );
        let page = round % n;
        // SAFETY: a page of the region at its new place.
        assert_eq!(check(unsafe { to.add(page * ps) }, ps), (page as u64, 4));
        assert_eq!(r.as_ptr(), to, "round {round}");
    }
    assert_eq!(r.stats().remaps, 200);
}

in_both_services!(
    growing_mremap_with():
    a_growing_mremap_gives_the_program_zero_pages,
    a_growing_mremap_gives_the_program_zero_pages_in_the_faulting_thread
);

/// The pages a growing `mremap` adds are the program's: registered with the
/// userfaultfd but no page of the region, they read as zeros.
fn growing_mremap_with(service: FaultService) {
    let _d = Deadline::new("growing_mremap", 60);
    let Some(r) = region_or_skip(4 * MIB, config(service, 4 * MIB)) else {
        return;
    };
    let ps = ps();
    let len = r.len();
    let old = r.as_ptr();
    for i in 0..len / ps {
        // SAFETY: page i.
        fill(unsafe { old.add(i * ps) }, ps, i as u64, 3);
    }
    let to = reserve(2 * len);
    // SAFETY: moves the region onto the reservation, growing it twofold.
    let moved = unsafe {
        libc::mremap(
            old.cast(),
            len,
            2 * len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            to,
        )
    };
    assert_eq!(moved, to, "{}", std::io::Error::last_os_error());
    let to = to.cast::<u8>();
    for i in len / ps..2 * len / ps {
        // SAFETY: a page the growing mremap added.
        assert!(is_zero(unsafe { to.add(i * ps) }, ps), "added page {i}");
    }
    for i in 0..len / ps {
        // SAFETY: page i at its new place.
        assert_eq!(check(unsafe { to.add(i * ps) }, ps), (i as u64, 3));
    }
    assert!(r.stats().faults.missing_foreign >= (len / ps) as u64);
}

in_both_services!(
    probation_race_with():
    faults_racing_probation_settles_read_their_pages,
    faults_racing_probation_settles_read_their_pages_in_the_faulting_thread
);

/// Pages go to probation after 2 ms untouched and are compressed from
/// there while two threads read them and a third evicts runs of them: a
/// fault on a probation page being compressed (held `EVICTING`) must wait
/// for it, not take the zero page.
fn probation_race_with(service: FaultService) {
    let _d = Deadline::new("probation_race", 60);
    let len = 4 * MIB;
    let mut c = config(service, len);
    c.probation_pages = Some(512);
    c.scan_interval = Duration::from_millis(1);
    c.controller = ControllerConfig::fixed(Duration::from_millis(2));
    let Some(r) = region_or_skip(len, c) else {
        return;
    };
    let ps = ps();
    let n = len / ps;
    let base = Ptr(r.as_ptr());
    fill_pages(base.0, n, 1);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (base, stop) = (&base, &stop);
            s.spawn(move || {
                let mut rng = Rng(0x77 + t);
                while !stop.load(Ordering::Relaxed) {
                    let i = rng.below(n as u64) as usize;
                    // SAFETY: page i.
                    assert_eq!(check(unsafe { base.0.add(i * ps) }, ps), (i as u64, 1));
                    if rng.below(64) == 0 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            });
        }
        let (r, stop) = (&r, &stop);
        s.spawn(move || {
            let mut rng = Rng(5);
            while !stop.load(Ordering::Relaxed) {
                let i = rng.below(n as u64 - 8) as usize;
                let _ = r.cold(i * ps..(i + 8) * ps);
            }
        });
        std::thread::sleep(Duration::from_secs(4));
        stop.store(true, Ordering::Relaxed);
    });
    let st = r.stats();
    assert!(st.evictions.probed > 0, "{st:?}");
}

in_both_services!(
    munmap_of_part_drops_those_pages_with():
    munmap_of_part_drops_those_pages,
    munmap_of_part_drops_those_pages_in_the_faulting_thread
);

fn munmap_of_part_drops_those_pages_with(service: FaultService) {
    let _d = Deadline::new("munmap_part", 60);
    let Some((r, n)) = filled_region(4 * MIB, config(service, 4 * MIB), 1) else {
        return;
    };
    let ps = ps();
    let base = r.as_ptr();
    r.cold(0..r.len()).unwrap();
    // SAFETY: the program unmaps the last quarter of the region.
    let rc = unsafe { libc::munmap(base.add(3 * n / 4 * ps).cast(), n / 4 * ps) };
    assert_eq!(rc, 0);
    for i in 0..3 * n / 4 {
        // SAFETY: page i, still mapped.
        assert_eq!(check(unsafe { base.add(i * ps) }, ps), (i as u64, 1));
    }
    let s = r.stats();
    assert_eq!(s.removed_by_program as usize, n / 4, "{s:?}");
    assert_eq!(s.stored_pages, 0);
    // The region evicts and serves the rest as before.
    assert_eq!(r.cold(0..r.len()).unwrap(), 3 * n / 4);
    // SAFETY: page 1.
    assert_eq!(check(unsafe { base.add(ps) }, ps), (1, 1));
}

#[test]
fn user_mode_only_system_calls_fail_until_touched() {
    let mut cfg = RegionConfig::new(MIB);
    cfg.uffd = UffdOpen::UserModeOnly;
    system_calls_fail_until_touched(cfg, |r| assert_eq!(r.uffd_mode(), UffdMode::UserModeOnly));
}

/// However the userfaultfd was opened, the kernel's own accesses are not
/// served when faults are served in the faulting thread.
#[test]
fn in_the_faulting_thread_system_calls_fail_until_touched() {
    system_calls_fail_until_touched(config(FaultService::FaultingThread, MIB), |r| {
        assert_eq!(r.stats().fault_service, "faulting-thread")
    });
}

/// A stored page passed to `write(2)` fails with `EFAULT` until
/// `Region::touch` brings it back.
fn system_calls_fail_until_touched(cfg: RegionConfig, mode: impl Fn(&Region)) {
    let _d = Deadline::new("system_calls_fail_until_touched", 60);
    let Some(r) = region_or_skip(MIB, cfg) else {
        return;
    };
    mode(&r);
    let ps = ps();
    let base = r.as_ptr();
    fill(base, ps, 0, 5);
    assert_eq!(r.cold(0..ps).unwrap(), 1);
    let mut fds = [0; 2];
    // SAFETY: a pipe for the test.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // The kernel reads the stored page: EFAULT.
    // SAFETY: writes one page from the region to the pipe.
    let n = unsafe { libc::write(fds[1], base.cast(), ps) };
    let err = std::io::Error::last_os_error();
    assert_eq!(n, -1, "the kernel read a page it had to fault in");
    assert_eq!(err.raw_os_error(), Some(libc::EFAULT), "{err}");
    r.touch(0..ps).unwrap();
    // SAFETY: as above, now mapped.
    let n = unsafe { libc::write(fds[1], base.cast(), ps) };
    assert_eq!(n as usize, ps);
    let mut back = vec![0u8; ps];
    // SAFETY: reads the page back from the pipe into a Vec.
    let got = unsafe { libc::read(fds[0], back.as_mut_ptr().cast(), ps) };
    assert_eq!(got as usize, ps);
    check(back.as_ptr(), ps);
    // SAFETY: our pipe.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

#[test]
fn full_mode_serves_the_kernels_own_accesses() {
    let _d = Deadline::new("full_mode", 60);
    let Some(r) = region_or_skip(MIB, RegionConfig::new(MIB)) else {
        return;
    };
    if r.uffd_mode() == UffdMode::UserModeOnly {
        eprintln!("skipped: only user-mode-only userfaultfd here");
        return;
    }
    let ps = ps();
    let base = r.as_ptr();
    fill(base, ps, 0, 5);
    assert_eq!(r.cold(0..ps).unwrap(), 1);
    let mut fds = [0; 2];
    // SAFETY: a pipe for the test.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the kernel reads a stored page of the region.
    assert_eq!(unsafe { libc::write(fds[1], base.cast(), ps) } as usize, ps);
    // And writes into another stored page.
    fill(
        // SAFETY: page 1.
        unsafe { base.add(ps) },
        ps,
        1,
        1,
    );
    assert_eq!(r.cold(ps..2 * ps).unwrap(), 1);
    // SAFETY: the kernel writes the pipe's page into page 1.
    let got = unsafe { libc::read(fds[0], base.add(ps).cast(), ps) };
    assert_eq!(got as usize, ps);
    // SAFETY: page 1.
    assert_eq!(check(unsafe { base.add(ps) }, ps), (0, 5));
    // SAFETY: our pipe.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

#[test]
fn store_faults_are_timed_part_by_part_in_a_sample() {
    for service in [FaultService::HandlerThread, FaultService::FaultingThread] {
        let _d = Deadline::new("split", 60);
        let Some(r) = region_or_skip(4 * MIB, config(service, 4 * MIB)) else {
            return;
        };
        let ps = ps();
        let n = r.len() / ps;
        let base = r.as_ptr();
        fill_pages(base, n, 1);
        assert_eq!(r.cold(0..r.len()).unwrap(), n);
        check_pages(base, n, 1);
        let s = r.stats();
        assert_eq!(s.faults.missing_store as usize, n, "{service:?}");
        let t = &s.store_fault_time;
        assert!(t.decompress_ns > 0 && t.copy_ns > 0, "{service:?}: {t:?}");
        // Means over the sample: each part well under a whole fault's
        // latency at the 99.9th percentile.
        let ceiling = s.fault_latency.p999_ns.max(1);
        assert!(
            t.decompress_ns + t.copy_ns <= ceiling,
            "{service:?}: {t:?} {ceiling}"
        );
    }
}

#[test]
fn hints_move_pages_and_stats_are_json() {
    let _d = Deadline::new("hints", 60);
    let Some((r, n)) = filled_region(4 * MIB, RegionConfig::new(4 * MIB), 2) else {
        return;
    };
    let base = r.as_ptr();
    assert_eq!(r.cold(0..r.len()).unwrap(), n);
    assert_eq!(r.stats().stored_pages as usize, n);
    assert_eq!(r.willneed(0..r.len() / 2).unwrap(), n / 2);
    assert_eq!(r.hot(r.len() / 2..r.len()).unwrap(), n / 2);
    let faults_before = r.stats().faults.missing_store;
    check_pages(base, n, 2);
    let s = r.stats();
    assert_eq!(s.faults.missing_store, faults_before, "all prefetched");
    assert_eq!(s.evictions.prefetched as usize, n);
    assert!(r.cold(0..r.len() + 1).is_err());
    let json: serde_json::Value = serde_json::from_str(&r.stats_json()).unwrap();
    assert_eq!(json["resident_pages"], n as u64);
    assert!(json["mm_stat"]["orig_data_size"].is_u64());
    assert!(json["fault_latency"]["buckets_log2_ns"].is_array());
}

#[test]
fn untouched_pages_are_probed_then_compressed() {
    let _d = Deadline::new("age_eviction", 60);
    let mut cfg = RegionConfig::new(MIB);
    cfg.scan_interval = Duration::from_millis(20);
    cfg.controller = ControllerConfig::fixed(Duration::from_millis(200));
    cfg.probation_pages = Some(64);
    let Some((r, n)) = filled_region(MIB, cfg, 4) else {
        return;
    };
    let ps = ps();
    let base = r.as_ptr();
    // Keep the first eight pages in use by touching them (a probe's fault
    // brings each back from its probation copy).
    let end = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < end {
        for i in 0..8 {
            // SAFETY: page i.
            assert_eq!(check(unsafe { base.add(i * ps) }, ps), (i as u64, 4));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for i in 0..8 {
        // SAFETY: page i, touched once more (mapped when this returns).
        assert_eq!(check(unsafe { base.add(i * ps) }, ps), (i as u64, 4));
    }
    let s = r.stats();
    assert!(s.evictions.probed as usize >= n, "{s:?}");
    assert!(s.evictions.age as usize >= n - 8 - 64, "{s:?}");
    assert!(s.faults.missing_probation > 0, "{s:?}");
    assert!(s.resident_pages >= 8 && s.resident_pages <= 16, "{s:?}");
    check_pages(base, n, 4);
}

#[test]
fn the_controller_steers_the_age_threshold_from_promotions() {
    let _d = Deadline::new("controller", 60);
    let mut cfg = RegionConfig::new(MIB);
    cfg.scan_interval = Duration::from_millis(10);
    cfg.controller = ControllerConfig {
        period: Duration::from_millis(100),
        initial: Duration::from_secs(10),
        min: Duration::from_secs(1),
        max: Duration::from_secs(1000),
        ..ControllerConfig::default()
    };
    let Some(r) = region_or_skip(4 * MIB, cfg) else {
        return;
    };
    let ps = ps();
    let n = r.len() / ps;
    let base = r.as_ptr();
    for i in 0..64 {
        // SAFETY: page i.
        fill(unsafe { base.add(i * ps) }, ps, i as u64, 1);
    }
    // No promotions: the threshold comes down, a quarter each period.
    std::thread::sleep(Duration::from_millis(800));
    let quiet = r.stats();
    assert!(quiet.age_threshold_ms < 10_000, "{quiet:?}");
    // Every page of the region in and out of the store, over and over:
    // promotions far above 0.2% of the working set a minute.
    fill_pages(base, n, 2);
    let end = std::time::Instant::now() + Duration::from_millis(800);
    while std::time::Instant::now() < end {
        for i in (0..n).step_by(3) {
            // SAFETY: page i.
            assert_eq!(check(unsafe { base.add(i * ps) }, ps), (i as u64, 2));
        }
    }
    let busy = r.stats();
    assert!(busy.faults.missing_store > 1000, "{busy:?}");
    assert!(busy.promotion_rate > 0.002, "{busy:?}");
    assert!(
        busy.age_threshold_ms > quiet.age_threshold_ms,
        "{} -> {}: {busy:?}",
        quiet.age_threshold_ms,
        busy.age_threshold_ms
    );
}
