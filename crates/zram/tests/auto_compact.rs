//! The store's background compactor: it runs after frees, within its CPU
//! budget, never below its minimum gain, stops with the store, stays off
//! unless asked, and loses nothing while racing every other operation.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zpool::ZPool;
use zram::{AutoCompactMode, AutoCompactPolicy, Store, StoreError};
use zsmalloc::{Mode, Pool, PoolConfig};

/// A compressible page named by `seed`: 200 to 1700 random bytes, then a
/// repeated pattern.
fn page(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let random = 200 + (seed % 1500) as usize;
    (0..4096)
        .map(|i| {
            if i < random {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            } else {
                (i / 64) as u8
            }
        })
        .collect()
}

fn pool(mode: Mode) -> Arc<Pool> {
    let config = PoolConfig::of_mode(mode);
    Arc::new(Pool::new(config).expect("pool"))
}

fn store(pool: &Arc<Pool>, pages: u64) -> Store {
    let pool: Arc<dyn ZPool> = Arc::clone(pool) as Arc<dyn ZPool>;
    Store::new(pool, zcomp::Compressor::parse("lz4", "").unwrap(), pages).unwrap()
}

/// Turns `store`'s automatic compaction to `mode`, set by `words`.
fn set_policy(store: &Store, mode: AutoCompactMode, words: &str) {
    store
        .set_auto_compact(AutoCompactPolicy::new(mode).with_words(words).unwrap())
        .unwrap();
}

/// Fills `pages` pages, then discards all but every `keep`-th.
fn fill_and_thin(store: &Store, pages: u64, keep: u64) {
    for i in 0..pages {
        store.write_page(i, &page(i)).unwrap();
    }
    for i in 0..pages {
        if i % keep != 0 {
            store.discard(i, 1).unwrap();
        }
    }
}

fn verify(store: &Store, pages: u64, keep: u64) {
    let mut buf = vec![0u8; 4096];
    for i in 0..pages {
        store.read_page(i, &mut buf).unwrap();
        if i % keep == 0 {
            assert_eq!(buf, page(i), "page {i}");
        } else {
            assert!(buf.iter().all(|&b| b == 0), "page {i}");
        }
    }
}

/// Polls `done` every 10 ms for up to 60 s (the suite may run beside CPU
/// hogs); true if it came true.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(60);
    while Instant::now() < end {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    done()
}

#[test]
fn it_runs_after_frees_and_leaves_what_a_manual_compact_would() {
    let p = pool(Mode::Default);
    let s = store(&p, 8192);
    set_policy(&s, AutoCompactMode::On, "on");
    assert!(s.auto_compact_running());
    fill_and_thin(&s, 8192, 4);
    let min_gain = s.auto_compact().min_gain_pages;
    assert!(
        eventually(|| p.can_compact() < min_gain && s.auto_compact_stats().runs > 0),
        "{:?}",
        s.auto_compact_stats()
    );
    let st = s.auto_compact_stats();
    assert!(
        st.pages_freed > 0 && st.objs_moved > 0 && st.steps > 0,
        "{st:?}"
    );
    assert!(st.cpu_ns > 0 && st.longest_step_ns > 0, "{st:?}");
    let mm = s.mm_stat();
    assert_eq!(mm.pages_compacted, p.stats().pages_compacted);
    assert!(mm.pages_compacted >= st.pages_freed, "{mm:?} {st:?}");
    // The extra debug_stat line.
    let debug = s.debug_stat().to_string();
    assert!(
        debug
            .lines()
            .nth(2)
            .unwrap()
            .starts_with("auto_compact: wakeups "),
        "{debug}"
    );
    verify(&s, 8192, 4);
    p.check_invariants().unwrap();
}

#[test]
fn it_keeps_to_its_cpu_share() {
    let p = pool(Mode::Default);
    let s = store(&p, 32768);
    // Fragment first, then switch it on with 2% of a CPU: the compaction
    // takes more than the 2 ms burst, so the budget must hold it back.
    fill_and_thin(&s, 32768, 3);
    let start = Instant::now();
    set_policy(&s, AutoCompactMode::On, "cpu=2 min_gain=1");
    assert!(
        eventually(|| p.can_compact() == 0 && s.auto_compact_stats().runs > 0),
        "{:?}",
        s.auto_compact_stats()
    );
    let wall = start.elapsed();
    let st = s.auto_compact_stats();
    let cpu = Duration::from_nanos(st.cpu_ns);
    let step = Duration::from_nanos(st.longest_step_ns);
    // At most the share of the wall time, the burst and one step (a step
    // starts on a non-negative bucket), with room for clock granularity.
    let allowed = wall.mul_f64(0.02 * 1.5) + zram::compactor::BURST * 2 + step * 2;
    assert!(
        cpu <= allowed,
        "cpu {cpu:?} > {allowed:?} over {wall:?}: {st:?}"
    );
    if cpu > zram::compactor::BURST * 2 {
        assert!(st.budget_wait_ns > 0, "{st:?}");
    }
    verify(&s, 32768, 3);
}

#[test]
fn it_never_runs_below_the_minimum_gain() {
    let p = pool(Mode::Default);
    let s = store(&p, 4096);
    set_policy(&s, AutoCompactMode::On, "min_gain=100000");
    fill_and_thin(&s, 4096, 2);
    let freeable = p.can_compact();
    assert!(freeable > 0);
    assert!(
        eventually(|| s.auto_compact_stats().skipped > 0),
        "{:?}",
        s.auto_compact_stats()
    );
    let st = s.auto_compact_stats();
    assert_eq!(
        (st.runs, st.pages_freed, st.objs_moved),
        (0, 0, 0),
        "{st:?}"
    );
    assert_eq!(s.mm_stat().pages_compacted, 0);
    assert_eq!(p.can_compact(), freeable);
    // The share of compr_data_size counts too: 100% of it is never freeable.
    set_policy(&s, AutoCompactMode::On, "min_gain=1 min_gain_percent=100");
    assert!(eventually(|| s.auto_compact_stats().skipped > 1));
    assert_eq!(s.auto_compact_stats().runs, 0);
    // Lowered: it runs.
    set_policy(&s, AutoCompactMode::On, "min_gain=1 min_gain_percent=0");
    assert!(eventually(|| s.auto_compact_stats().runs > 0));
}

#[test]
fn it_stops_when_switched_off_and_when_the_store_drops() {
    let p = pool(Mode::Default);
    let s = store(&p, 1024);
    set_policy(&s, AutoCompactMode::On, "on");
    // The store and the thread each hold the pool.
    assert!(Arc::strong_count(&p) >= 3);
    set_policy(&s, AutoCompactMode::Off, "off");
    assert!(!s.auto_compact_running());
    assert_eq!(Arc::strong_count(&p), 2, "the thread let go of the pool");
    set_policy(&s, AutoCompactMode::On, "on");
    fill_and_thin(&s, 1024, 2);
    drop(s);
    assert_eq!(Arc::strong_count(&p), 1, "the thread ended with the store");
    assert_eq!(p.total_pages(), 0);
}

#[test]
fn it_is_off_unless_asked_and_kernel_compat_prints_the_kernels_debug_stat() {
    let p = pool(Mode::KernelCompat);
    let s = store(&p, 4096);
    assert_eq!(s.auto_compact().mode, AutoCompactMode::Off);
    assert!(!s.auto_compact_running());
    fill_and_thin(&s, 4096, 2);
    let freeable = p.can_compact();
    assert!(freeable > 0);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(p.can_compact(), freeable);
    assert_eq!(s.mm_stat().pages_compacted, 0);
    assert_eq!(s.debug_stat().to_string(), "version: 1\n0        0");
}

#[test]
fn the_shrinker_waits_for_tight_memory() {
    let p = pool(Mode::KernelCompat);
    let s = store(&p, 4096);
    // Pressure can never reach 100% of avg10 here, and there is no limit.
    set_policy(
        &s,
        AutoCompactMode::Shrinker,
        "shrinker min_gain=1 pressure=100",
    );
    fill_and_thin(&s, 4096, 2);
    assert!(eventually(|| s.auto_compact_stats().skipped > 0));
    assert_eq!(s.auto_compact_stats().runs, 0);
    assert!(p.can_compact() > 0);
    // A limit just above what is used: memory is tight, the next free wakes it.
    s.set_mem_limit(s.mm_stat().mem_used_total + 4096);
    s.discard(0, 1).unwrap();
    assert!(
        eventually(|| s.auto_compact_stats().runs > 0 && p.can_compact() == 0),
        "{:?}",
        s.auto_compact_stats()
    );
    verify_thinned_from(&s, 4096, 1);
}

fn verify_thinned_from(store: &Store, pages: u64, first: u64) {
    let mut buf = vec![0u8; 4096];
    for i in first..pages {
        store.read_page(i, &mut buf).unwrap();
        if i % 2 == 0 {
            assert_eq!(buf, page(i), "page {i}");
        }
    }
}

/// Four threads race the compactor (at full speed) with writes,
/// overwrites, discards, reads, `mem_limit` changes and resets; every page
/// read back is the last one written to it, or zeros after a reset or a
/// discard, and the allocator's invariants hold at the end.
#[test]
fn racing_writes_discards_resets_and_limits_loses_nothing() {
    const PAGES: u64 = 4096;
    const THREADS: u64 = 4;
    let p = pool(Mode::Default);
    let s = Arc::new(store(&p, PAGES));
    set_policy(
        &s,
        AutoCompactMode::On,
        "cpu=100 min_gain=1 min_gain_percent=0 postpone_ms=0",
    );
    // Bumped by every reset: a page may read as zeros only if a reset came
    // after it was written.
    let resets = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let controller = {
        let (s, resets, stop) = (Arc::clone(&s), Arc::clone(&resets), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(40));
                round += 1;
                match round % 4 {
                    0 => {
                        resets.fetch_add(1, Ordering::SeqCst);
                        s.reset();
                        resets.fetch_add(1, Ordering::SeqCst);
                    }
                    1 => s.set_mem_limit(s.mm_stat().mem_used_total + (1 << 20)),
                    _ => s.set_mem_limit(0),
                }
            }
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (s, resets) = (Arc::clone(&s), Arc::clone(&resets));
            std::thread::spawn(move || {
                // This thread's pages: t, t + THREADS, ...
                let mine: Vec<u64> = (t..PAGES).step_by(THREADS as usize).collect();
                // (seed of the last write, resets before it), or None.
                let mut model: Vec<Option<(u64, u64)>> = vec![None; mine.len()];
                let mut buf = vec![0u8; 4096];
                let mut x = t + 1;
                let end = Instant::now() + Duration::from_millis(1500);
                let mut round = 0u64;
                while Instant::now() < end {
                    round += 1;
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let k = ((x >> 33) as usize) % mine.len();
                    let index = mine[k];
                    match (x >> 20) % 10 {
                        0..=4 => {
                            let seed = round * THREADS + t;
                            let epoch = resets.load(Ordering::SeqCst);
                            match s.write_page(index, &page(seed)) {
                                Ok(()) => model[k] = Some((seed, epoch)),
                                Err(StoreError::MemLimit { .. }) => {}
                                Err(e) => panic!("write: {e}"),
                            }
                        }
                        5..=6 => {
                            let n = ((x >> 40) % 4).min((mine.len() - k) as u64);
                            for j in 0..n as usize {
                                s.discard(mine[k + j], 1).unwrap();
                                model[k + j] = None;
                            }
                        }
                        _ => {
                            s.read_page(index, &mut buf).unwrap();
                            let epoch_after = resets.load(Ordering::SeqCst);
                            let zeros = buf.iter().all(|&b| b == 0);
                            match model[k] {
                                None => assert!(zeros, "page {index} should be zeros"),
                                Some((seed, epoch)) => {
                                    if buf != page(seed) {
                                        assert!(
                                            zeros && (epoch_after > epoch || epoch % 2 == 1),
                                            "page {index}: neither its last write nor a reset's zeros"
                                        );
                                        model[k] = None;
                                    }
                                }
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    controller.join().unwrap();
    set_policy(&s, AutoCompactMode::Off, "off");
    p.check_invariants().unwrap();
    let st = s.auto_compact_stats();
    assert!(st.wakeups > 0 && st.runs > 0, "{st:?}");
    s.reset();
    assert_eq!(p.total_pages(), 0);
}

/// Default mode's pool keeps pages it frees for reuse (its retained share);
/// an idle store gives every one of them back within two idle epochs of
/// the compactor, with no write, free or `compact` to prompt it.
#[test]
fn an_idle_store_gives_back_the_pages_kept_for_reuse() {
    let p = pool(Mode::Default);
    let s = store(&p, 8192);
    // A minimum gain no run reaches: only the idle epochs give pages back.
    set_policy(&s, AutoCompactMode::On, "min_gain=100000");
    for i in 0..8192 {
        s.write_page(i, &page(i)).unwrap();
    }
    // Whole runs of pages freed: their zspages empty and are kept.
    s.discard(0, 4096).unwrap();
    assert!(s.retained_bytes().0 > 0, "freed zspages kept for reuse");
    let idle_since = Instant::now();
    assert!(
        eventually(|| s.retained_bytes().0 == 0),
        "{} bytes still kept after {:?} idle: {:?}",
        s.retained_bytes().0,
        idle_since.elapsed(),
        s.auto_compact_stats()
    );
    let st = s.auto_compact_stats();
    assert!(st.idle_decays >= 1, "{st:?}");
    assert_eq!(st.runs, 0, "{st:?}");
    // Idle with nothing kept: no more epochs.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(s.auto_compact_stats().idle_decays, st.idle_decays);
    // Everything still reads back.
    let mut buf = vec![0u8; 4096];
    for i in (4096..8192).step_by(97) {
        s.read_page(i, &mut buf).unwrap();
        assert_eq!(buf, page(i), "page {i}");
    }
}
