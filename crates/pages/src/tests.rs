//! Unit tests of the page source through its public API (and the frontier's
//! view of huge pages): residency, the cache and pending discards, limits,
//! holds and batches, the retained share and its decay. Tests only; they
//! hold every run they touch.

use std::sync::atomic::Ordering;

use super::*;

const PS: usize = 4096;

fn fill(run: &Run, value: u8) {
    // SAFETY: the run is `pages * PS` bytes long and held by this test alone.
    unsafe { std::ptr::write_bytes(run.as_ptr(), value, run.pages() as usize * PS) };
}

fn byte_at(run: &Run, offset: usize) -> u8 {
    assert!(offset < run.pages() as usize * PS);
    // SAFETY: `offset` is inside the run, which this test alone holds.
    unsafe { run.as_ptr().add(offset).read() }
}

/// Pages of `pages * PS` bytes from `addr` that are resident (mincore).
fn resident(addr: *mut u8, pages: u32) -> usize {
    let os = os_page_size();
    let len = pages as usize * PS;
    let mut v = vec![0u8; len.div_ceil(os)];
    // SAFETY: the range lies in a mapping of the source under test, which
    // outlives this call; mincore only writes `v`, one byte per OS page.
    let rc = unsafe { libc::mincore(addr.cast(), len, v.as_mut_ptr()) };
    assert_eq!(rc, 0);
    v.iter().filter(|&&b| b & 1 != 0).count() * os / PS
}

#[test]
#[cfg_attr(miri, ignore = "counts resident pages with mincore, which Miri lacks")]
fn fresh_runs_are_zeroed() {
    let src = PageSource::new(PS, None).unwrap();
    let a = src.alloc(3).unwrap();
    let b = src.alloc_clean(2).unwrap();
    assert_eq!(
        resident(b.as_ptr(), 2),
        0,
        "untouched clean pages cost nothing"
    );
    assert_eq!((byte_at(&a, 0), byte_at(&a, 3 * PS - 1)), (0, 0));
    assert_eq!((byte_at(&b, 0), byte_at(&b, PS + 5)), (0, 0));
}

/// `AnonHugePages` of the mapping that contains `addr`, in bytes.
fn anon_huge_bytes_at(addr: *mut u8) -> usize {
    let addr = addr as usize;
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        let head = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = head.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                inside = (a..b).contains(&addr);
                continue;
            }
        }
        if let (true, Some(v)) = (inside, line.strip_prefix("AnonHugePages:")) {
            let kb: usize = v.trim().trim_end_matches("kB").trim().parse().unwrap();
            return kb * 1024;
        }
    }
    panic!("no mapping contains {addr:#x}");
}

/// The kernel's count of huge-page faults that fell back to small pages.
fn thp_fallbacks() -> u64 {
    let vmstat = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
    vmstat
        .lines()
        .find_map(|l| l.strip_prefix("thp_fault_fallback "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
#[cfg_attr(miri, ignore = "huge pages and mincore: Miri has neither")]
fn the_dense_frontier_stays_within_one_window_of_what_is_out() {
    let src = PageSource::new(PS, None).unwrap();
    let runs: Vec<Run> = (0..300).map(|_| src.alloc(4).unwrap()).collect();
    let first = runs[0].as_ptr();
    // Runs are carved in address order from one chunk.
    let span = runs[299].as_ptr() as usize + 4 * PS - first as usize;
    assert_eq!(span, 1200 * PS);
    let window = frontier::huge_page_bytes().unwrap_or(0) / PS;
    let held = resident(first, (1200 + window) as u32);
    assert!(
        held <= 1200 + window,
        "{held} pages resident for 1200 out and a window of {window}"
    );
    if window > 0 {
        assert!(held >= 1200, "populated ahead: {held} of 1200");
    }
    for r in runs {
        src.free(r);
    }
    src.flush();
    assert_eq!(
        resident(first, 1200),
        0,
        "released parts of huge pages are dropped"
    );
}

#[test]
#[cfg_attr(miri, ignore = "huge pages and mincore: Miri has neither")]
fn dense_runs_use_huge_pages_where_the_system_offers_them() {
    let Some(window) = frontier::huge_page_bytes() else {
        eprintln!("skipped: transparent huge pages are not offered here");
        return;
    };
    let src = PageSource::new(PS, None).unwrap();
    let fallbacks = thp_fallbacks();
    let run = src.alloc(8).unwrap();
    let clean = src.alloc_clean(8).unwrap();
    // SAFETY: the run is 8 pages long and held by this test alone.
    unsafe { clean.as_ptr().write(1) };
    let huge = anon_huge_bytes_at(run.as_ptr());
    if huge == 0 {
        // The kernel may have had no free 2 MiB block; then it says so.
        assert!(
            thp_fallbacks() > fallbacks,
            "no huge page and no fallback counted: the window was not populated"
        );
        eprintln!("the kernel had no huge page to give (thp_fault_fallback rose)");
    } else {
        assert!(huge >= window, "{huge} bytes of huge pages");
    }
    // Mappings merge, so the clean run's may be the same as the dense
    // one's; its residency tells that no huge page backs it.
    assert_eq!(
        resident(clean.as_ptr(), 8),
        1,
        "touching a clean page faults in that page only"
    );
    src.free(run);
    src.free(clean);
}

#[test]
#[cfg_attr(miri, ignore = "counts resident pages with mincore, which Miri lacks")]
fn a_cached_run_is_reused_without_a_system_call() {
    let src = PageSource::new(PS, None).unwrap();
    let a = src.alloc(3).unwrap();
    fill(&a, 0xab);
    let addr = a.as_ptr();
    src.free(a);
    assert_eq!(src.cached_pages(), 3);
    assert_eq!(src.pages_out(), 0);
    let b = src.alloc(3).unwrap();
    assert_eq!(
        b.as_ptr(),
        addr,
        "the cached run of the same length is reused"
    );
    assert_eq!(
        byte_at(&b, 2 * PS),
        0xab,
        "stale bytes: alloc does not zero"
    );
    assert_eq!(resident(addr, 3), 3);
    let st = src.stats();
    assert_eq!((st.cache_hits, st.advise_calls, st.cached_pages), (1, 0, 0));
    assert_eq!(st.pages_out, 3);
}

#[test]
fn alloc_clean_never_takes_from_the_cache() {
    let src = PageSource::new(PS, None).unwrap();
    let a = src.alloc(3).unwrap();
    fill(&a, 0xab);
    let addr = a.as_ptr();
    src.free(a);
    let b = src.alloc_clean(3).unwrap();
    assert_ne!(b.as_ptr(), addr);
    assert_eq!(byte_at(&b, 0), 0);
    assert_eq!(src.cached_pages(), 3);
    // Once released, the run is clean and alloc_clean may have it.
    src.flush();
    let c = src.alloc_clean(3).unwrap();
    assert_eq!(c.as_ptr(), addr);
    assert_eq!((byte_at(&c, 0), byte_at(&c, 2 * PS)), (0, 0));
}

#[test]
#[cfg_attr(miri, ignore = "counts resident pages with mincore, which Miri lacks")]
fn alloc_pending_reuses_a_cached_run_with_every_page_pending() {
    let src = PageSource::new(PS, None).unwrap();
    let a = src.alloc(4).unwrap();
    fill(&a, 0xcd);
    let addr = a.as_ptr();
    src.free(a);
    let b = src.alloc_pending(4).unwrap();
    assert_eq!(b.as_ptr(), addr, "the cached run is reused");
    let st = src.stats();
    assert_eq!(
        (st.cached_pages, st.pending_pages, st.cache_hits),
        (0, 4, 1)
    );
    // Taking back the first two pages: no system call, bytes kept.
    let calls = src.stats().advise_calls;
    assert!(src.reclaim(&b, 2), "pages 2 and 3 are still pending");
    assert_eq!(byte_at(&b, PS + 7), 0xcd);
    assert_eq!(src.stats().pending_pages, 2);
    // The rest goes with the next batch; the pages taken back stay.
    src.flush();
    assert_eq!(src.stats().advise_calls, calls + 1);
    assert_eq!(resident(b.as_ptr(), 4), 2);
    assert!(!src.reclaim(&b, 4), "nothing is pending after the batch");
    assert_eq!(byte_at(&b, 3 * PS), 0, "a released page reads as zero");
    src.free(b);
    // With nothing cached it is a clean fresh run.
    src.flush();
    let c = src.alloc_pending(2).unwrap();
    assert_eq!(resident(c.as_ptr(), 2), 0);
    assert_eq!(src.stats().pending_pages, 0);
    src.free(c);
}

#[test]
fn the_bound_is_respected_and_released_in_batches() {
    let src = PageSource::new(PS, None).unwrap();
    src.set_cache_limit(8);
    let runs: Vec<Run> = (0..10).map(|_| src.alloc(2).unwrap()).collect();
    for r in &runs {
        fill(r, 1);
    }
    for (i, r) in runs.into_iter().enumerate() {
        src.free(r);
        let st = src.stats();
        assert!(
            st.cached_pages <= 8,
            "{} cached after free {i}",
            st.cached_pages
        );
    }
    // 5 runs (10 pages) pass the bound of 8: two batches of 5 runs.
    let st = src.stats();
    assert_eq!((st.batches, st.runs_released, st.cached_pages), (2, 10, 0));
    // The 10 runs were carved back to back: each batch is one range.
    assert_eq!(st.ranges_advised, 2);
}

#[test]
#[cfg_attr(miri, ignore = "counts resident pages with mincore, which Miri lacks")]
fn adjacent_runs_are_released_as_one_range() {
    let src = PageSource::new(PS, None).unwrap();
    let runs: Vec<Run> = (0..4).map(|_| src.alloc(2).unwrap()).collect();
    let base = runs[0].as_ptr();
    for r in &runs {
        fill(r, 9);
    }
    assert_eq!(resident(base, 8), 8);
    // Freed out of address order: sorted, they still touch.
    let mut runs: Vec<Option<Run>> = runs.into_iter().map(Some).collect();
    for i in [2, 0, 3, 1] {
        src.free(runs[i].take().unwrap());
    }
    assert_eq!(src.flush(), 8);
    let st = src.stats();
    assert_eq!((st.ranges_advised, st.advise_calls), (1, 1));
    assert_eq!(resident(base, 8), 0);

    // Two runs with one still out between them: two ranges, given to the
    // kernel in one call where process_madvise works, one each otherwise.
    // (Runs of 3 pages: freshly carved, back to back.)
    let a = src.alloc(3).unwrap();
    let b = src.alloc(3).unwrap();
    let c = src.alloc(3).unwrap();
    assert_eq!(c.as_ptr(), a.as_ptr().wrapping_add(6 * PS));
    src.free(a);
    src.free(c);
    src.flush();
    let st2 = src.stats();
    assert_eq!(st2.ranges_advised - st.ranges_advised, 2);
    assert!((1..=2).contains(&(st2.advise_calls - st.advise_calls)));
    src.free(b);
}

#[test]
#[cfg_attr(miri, ignore = "counts resident pages with mincore, which Miri lacks")]
fn flush_releases_everything() {
    let src = PageSource::new(PS, None).unwrap();
    let runs: Vec<Run> = (0..6).map(|i| src.alloc(1 + i % 3).unwrap()).collect();
    let spans: Vec<(*mut u8, u32)> = runs.iter().map(|r| (r.as_ptr(), r.pages())).collect();
    for r in &runs {
        fill(r, 5);
    }
    for r in runs {
        src.free(r);
    }
    let total: u32 = spans.iter().map(|s| s.1).sum();
    assert_eq!(src.cached_pages(), total as usize);
    assert!(spans.iter().all(|&(p, n)| resident(p, n) == n as usize));
    assert_eq!(src.flush(), total as usize);
    assert_eq!(src.cached_pages(), 0);
    assert!(spans.iter().all(|&(p, n)| resident(p, n) == 0));
    assert_eq!(src.flush(), 0, "nothing left");
    assert_eq!(src.stats().batches, 1, "an empty flush makes no batch");
}

#[test]
#[cfg_attr(miri, ignore = "counts resident pages with mincore, which Miri lacks")]
fn a_zero_bound_releases_every_free_at_once() {
    let src = PageSource::new(PS, None).unwrap();
    src.set_cache_limit(0);
    let a = src.alloc(2).unwrap();
    fill(&a, 1);
    let addr = a.as_ptr();
    src.free(a);
    let st = src.stats();
    assert_eq!(
        (st.cached_pages, st.advise_calls, st.runs_released),
        (0, 1, 1)
    );
    assert_eq!(resident(addr, 2), 0);
}

#[test]
fn lowering_the_bound_releases_what_is_over_it() {
    let src = PageSource::new(PS, None).unwrap();
    let a = src.alloc(4).unwrap();
    src.free(a);
    src.set_cache_limit(8);
    assert_eq!(src.cached_pages(), 4);
    src.set_cache_limit(2);
    assert_eq!(src.cached_pages(), 0);
}

#[test]
fn a_hold_raises_the_bound_until_dropped() {
    let src = PageSource::new(PS, None).unwrap();
    src.set_cache_limit(4);
    src.set_hold_limit(100);
    let runs: Vec<Run> = (0..5).map(|_| src.alloc(2).unwrap()).collect();
    let hold = src.hold();
    for r in runs {
        src.free(r);
    }
    assert_eq!(src.cached_pages(), 10, "kept while held");
    assert_eq!(src.stats().batches, 0);
    drop(hold);
    let st = src.stats();
    assert_eq!(
        (st.cached_pages, st.batches),
        (0, 1),
        "one batch at the end"
    );
}

#[test]
fn the_limit_counts_cached_pages_but_never_fails_because_of_them() {
    let src = PageSource::new(PS, Some(10)).unwrap();
    let a = src.alloc(8).unwrap();
    assert_eq!(
        src.alloc(3).unwrap_err(),
        PagesError::LimitReached { limit: 10 }
    );
    src.free(a);
    assert_eq!(src.cached_pages(), 8);
    // 3 fresh pages and 8 cached would pass 10: the cache goes first.
    let b = src.alloc(3).unwrap();
    assert_eq!(src.cached_pages(), 0);
    assert_eq!(src.pages_out(), 3);
    src.free(b);
    // A cached run of the right length is taken without a release.
    let c = src.alloc(3).unwrap();
    assert_eq!(src.stats().cache_hits, 1);
    src.free(c);
    assert!(src.alloc(10).is_ok());
}

#[test]
fn bad_requests_are_errors() {
    let src = PageSource::new(PS, None).unwrap();
    assert_eq!(src.alloc(0).unwrap_err(), PagesError::RunLength(0));
    let over = MAX_RUN_PAGES + 1;
    assert_eq!(
        src.alloc_clean(over).unwrap_err(),
        PagesError::RunLength(over)
    );
    assert!(src.alloc_clean(MAX_RUN_PAGES).is_ok());
    assert_eq!(
        PageSource::new(1000, None).unwrap_err(),
        PagesError::PageSize(1000)
    );
    assert_eq!(
        PageSource::new(131072, None).unwrap_err(),
        PagesError::PageSize(131072)
    );
}

#[test]
fn longer_free_runs_are_split() {
    let src = PageSource::new(PS, None).unwrap();
    let a = src.alloc(8).unwrap();
    let base = a.as_ptr();
    src.free(a);
    src.flush();
    let b = src.alloc(3).unwrap();
    let c = src.alloc(5).unwrap();
    assert_eq!(b.as_ptr(), base);
    assert_eq!(c.as_ptr(), base.wrapping_add(3 * PS));
}

#[test]
fn discard_zeroes_part_of_a_run_at_once() {
    let src = PageSource::new(PS, None).unwrap();
    let a = src.alloc(4).unwrap();
    fill(&a, 7);
    src.discard(&a, 2, 5);
    assert_eq!((byte_at(&a, PS), byte_at(&a, 2 * PS)), (7, 0));
    assert_eq!(src.stats().advise_calls, 1);
}

#[test]
#[cfg_attr(miri, ignore = "counts resident pages with mincore, which Miri lacks")]
fn discard_later_is_released_with_the_next_batch() {
    let src = PageSource::new(PS, None).unwrap();
    let a = src.alloc(8).unwrap();
    fill(&a, 7);
    src.discard_later(&a, 6, 2);
    src.discard_later(&a, 4, 2); // touches the pending tail: merged
    let st = src.stats();
    assert_eq!((st.pending_pages, st.advise_calls), (4, 0));
    assert_eq!(byte_at(&a, 7 * PS), 7, "not released yet");
    // Pages 4 and 5 are wanted again.
    assert!(src.reclaim(&a, 6), "pages 6.. stay pending");
    assert!(src.reclaim(&a, 3), "nothing below 6 is pending");
    assert_eq!(src.stats().pending_pages, 2);
    assert_eq!(src.flush(), 2);
    assert_eq!(resident(a.as_ptr(), 8), 6);
    assert_eq!(
        (
            byte_at(&a, 5 * PS),
            byte_at(&a, 6 * PS),
            byte_at(&a, 7 * PS)
        ),
        (7, 0, 0)
    );
    assert!(!src.reclaim(&a, 8), "nothing pending after the batch");
    assert_eq!(src.stats().advise_calls, 1);
}

#[test]
#[cfg_attr(miri, ignore = "counts resident pages with mincore, which Miri lacks")]
fn pending_pages_share_the_bound() {
    let src = PageSource::new(PS, None).unwrap();
    src.set_cache_limit(6);
    let a = src.alloc(8).unwrap();
    let b = src.alloc(4).unwrap();
    fill(&a, 1);
    src.discard_later(&a, 4, 4);
    src.free(b); // 4 pending + 4 cached > 6
    let st = src.stats();
    assert_eq!((st.pending_pages, st.cached_pages, st.batches), (0, 0, 1));
    assert_eq!(st.ranges_advised, 1, "a's tail and b touch: one range");
    assert_eq!(resident(a.as_ptr(), 4), 4);
}

#[test]
fn a_freed_run_takes_its_pending_tail_along() {
    let src = PageSource::new(PS, None).unwrap();
    let a = src.alloc(8).unwrap();
    fill(&a, 1);
    src.discard_later(&a, 3, 5);
    src.free_resident(a, 3);
    let st = src.stats();
    assert_eq!((st.pending_pages, st.cached_pages), (0, 8));
    // A run whose tail was really released counts only its prefix.
    let b = src.alloc_clean(8).unwrap();
    fill(&b, 1);
    src.discard(&b, 2, 6);
    src.free_resident(b, 2);
    assert_eq!(src.cached_pages(), 10);
}

/// A thread that flushes a source all the time, until stopped.
struct Flusher {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Flusher {
    fn start(src: &std::sync::Arc<PageSource>) -> Flusher {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (src, flag) = (src.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                src.flush();
            }
        });
        Flusher { stop, thread }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
    }
}

#[test]
#[cfg_attr(miri, ignore = "20,000 rounds of a race: slow under Miri")]
fn reclaimed_pages_are_never_dropped_under_a_writer() {
    // One thread gives up a run's tail and reclaims it to write a pattern,
    // which it checks; another flushes all the time. Whatever the
    // interleaving, a reclaimed page keeps what is written to it.
    let src = std::sync::Arc::new(PageSource::new(PS, None).unwrap());
    src.set_cache_limit(1 << 20);
    let run = src.alloc(8).unwrap();
    let flusher = Flusher::start(&src);
    for round in 0..20_000u32 {
        let value = (round % 250) as u8 + 1;
        src.discard_later(&run, 2, 6);
        if round % 2 == 0 {
            std::thread::yield_now(); // a window for the flusher
        }
        src.reclaim(&run, 8);
        // SAFETY: pages 2..8 were reclaimed and the run is ours.
        unsafe { std::ptr::write_bytes(run.as_ptr().add(2 * PS), value, 6 * PS) };
        for page in 2..8 {
            assert_eq!(byte_at(&run, page * PS + 17), value, "round {round}");
        }
    }
    flusher.stop();
}

#[test]
#[cfg_attr(miri, ignore = "counts resident pages with mincore, which Miri lacks")]
fn a_large_batch_is_one_batch_released_in_chunks() {
    let src = PageSource::new(PS, None).unwrap();
    src.set_cache_limit(1 << 20);
    let runs: Vec<Run> = (0..64).map(|_| src.alloc(16).unwrap()).collect();
    let spans: Vec<(*mut u8, u32)> = runs.iter().map(|r| (r.as_ptr(), r.pages())).collect();
    for r in &runs {
        fill(r, 9);
    }
    for r in runs {
        src.free(r);
    }
    assert_eq!(src.cached_pages(), 1024);
    let before = src.stats();
    assert_eq!(src.flush(), 1024);
    let after = src.stats();
    assert_eq!(after.cached_pages, 0);
    assert!(spans.iter().all(|&(p, n)| resident(p, n) == 0));
    assert_eq!(after.batches, before.batches + 1, "one batch");
    // Adjacent runs coalesce into one range, yet the batch takes a system
    // call per chunk of at most RELEASE_CHUNK_PAGES pages (the old single
    // call made 1 here: `process_madvise` is taken on this kernel and the
    // runs are adjacent).
    let calls = after.advise_calls - before.advise_calls;
    assert!(calls >= 1024 / 256, "{calls} calls");
    assert_eq!(after.runs_released - before.runs_released, 64);
}

#[test]
#[cfg_attr(miri, ignore = "300 rounds over 3 MiB of runs: slow under Miri")]
fn reclaimed_pages_are_never_dropped_by_a_batch_in_chunks() {
    // Many runs give up their tails at once, more pages than one chunk, and
    // are reclaimed one by one while another thread flushes all the time:
    // the flush lets the reclaiming thread in between its chunks, and a
    // reclaimed page keeps what is written to it.
    let src = std::sync::Arc::new(PageSource::new(PS, None).unwrap());
    src.set_cache_limit(1 << 20);
    let runs: Vec<Run> = (0..48).map(|_| src.alloc(16).unwrap()).collect();
    let flusher = Flusher::start(&src);
    for round in 0..300u32 {
        let value = (round % 250) as u8 + 1;
        for run in &runs {
            src.discard_later(run, 1, 15);
        }
        for run in &runs {
            src.reclaim(run, 16);
            // SAFETY: pages 1..16 were reclaimed and the run is ours.
            unsafe { std::ptr::write_bytes(run.as_ptr().add(PS), value, 15 * PS) };
        }
        for run in &runs {
            for page in 1..16 {
                assert_eq!(byte_at(run, page * PS + 33), value, "round {round}");
            }
        }
    }
    flusher.stop();
}

#[test]
#[cfg_attr(miri, ignore = "48 MiB of runs and a race: slow under Miri")]
fn a_decay_by_time_is_not_due_again_while_a_decay_lets_a_free_in() {
    // A decay releases a batch larger than a chunk while its interval has
    // passed; a free that gets the lock between two chunks must neither
    // find a decay due again nor start a batch of its own.
    let src = std::sync::Arc::new(PageSource::new(PS, None).unwrap());
    src.set_retain_divisor(32);
    // Long enough that the decay's own batch never takes it.
    let interval = std::time::Duration::from_millis(300);
    src.set_decay_interval(interval);
    for _ in 0..3 {
        let runs: Vec<Run> = (0..256).map(|_| src.alloc(16).unwrap()).collect();
        for r in &runs {
            fill(r, 1);
        }
        let hold = src.hold();
        for r in runs {
            src.free(r);
        }
        // A new epoch: the pages just freed are older than it, so the next
        // decay releases them (4,096 pages: 16 chunks).
        src.decay();
        let mine = src.alloc_clean(4).unwrap();
        fill(&mine, 1);
        std::thread::sleep(interval + std::time::Duration::from_millis(10));
        let st = src.stats();
        let go = std::sync::Arc::new(std::sync::Barrier::new(2));
        let freer = {
            let (src, go) = (src.clone(), go.clone());
            std::thread::spawn(move || {
                go.wait();
                // Wait (on the lock) until the decay's batch has begun, then
                // free a run between two of its chunks.
                while src.stats().batches == st.batches {
                    std::hint::spin_loop();
                }
                src.free(mine);
            })
        };
        go.wait();
        src.decay();
        freer.join().unwrap();
        let now = src.stats();
        assert_eq!(now.decays, st.decays + 1, "{now:?}");
        drop(hold);
        src.flush();
    }
}

#[test]
fn many_chunks() {
    let src = PageSource::new(65536, None).unwrap();
    let runs: Vec<Run> = (0..100).map(|_| src.alloc(16).unwrap()).collect();
    assert_eq!(src.pages_out(), 1600);
    for r in runs {
        src.free(r);
    }
    assert_eq!(src.pages_out(), 0);
    assert!(src.cached_pages() <= src.cache_limit());
}

/// A source with a fixed bound of `fixed` pages, a retained share of one
/// page in `divisor` of the pages out, no decay by time, and `out` pages out
/// in runs of 4 (kept by the caller).
fn retaining(fixed: usize, divisor: usize, out: usize) -> (PageSource, Vec<Run>) {
    let src = PageSource::new(PS, None).unwrap();
    src.set_cache_limit(fixed);
    src.set_retain_divisor(divisor);
    src.set_decay_interval(std::time::Duration::ZERO);
    let held: Vec<Run> = (0..out / 4).map(|_| src.alloc(4).unwrap()).collect();
    (src, held)
}

#[test]
fn the_retained_share_scales_the_bound_with_the_pages_out() {
    let (src, held) = retaining(4, 8, 64);
    let st = src.stats();
    assert_eq!((st.retain_divisor, st.bound_pages), (8, 4 + 64 / 8));
    // 12 pages cached fit the bound: no batch.
    let freed: Vec<Run> = (0..3).map(|_| src.alloc(4).unwrap()).collect();
    for r in &freed {
        fill(r, 1);
    }
    for r in freed {
        src.free(r);
    }
    let st = src.stats();
    assert_eq!((st.cached_pages, st.batches), (12, 0));
    // Without the share, the same pages are over the fixed bound.
    src.set_retain_divisor(0);
    let st = src.stats();
    assert_eq!((st.cached_pages, st.batches, st.bound_pages), (0, 1, 4));
    drop(held);
}

#[test]
#[cfg_attr(miri, ignore = "counts resident pages with mincore, which Miri lacks")]
fn over_the_bound_the_oldest_go_first_and_the_newest_stay() {
    let (src, _held) = retaining(0, 4, 64);
    // Bound 16 pages: free five runs of 4, oldest first.
    let runs: Vec<Run> = (0..5).map(|_| src.alloc(4).unwrap()).collect();
    let addrs: Vec<*mut u8> = runs.iter().map(Run::as_ptr).collect();
    for r in &runs {
        fill(r, 7);
    }
    for r in runs {
        src.free(r);
    }
    // The fifth took 20 pages over the bound of 16 (pages out back at 64):
    // one batch released the oldest, down to three quarters of the bound.
    let st = src.stats();
    assert_eq!((st.batches, st.cached_pages), (1, 12));
    for (i, &a) in addrs.iter().enumerate() {
        let want = if i < 2 { 0 } else { 4 };
        assert_eq!(resident(a, 4), want, "run {i}");
    }
}

#[test]
#[cfg_attr(miri, ignore = "counts resident pages with mincore, which Miri lacks")]
fn a_decay_releases_what_was_not_reused_since_the_previous_one() {
    let (src, _held) = retaining(0, 2, 64);
    let a = src.alloc(4).unwrap();
    let b = src.alloc(4).unwrap();
    fill(&a, 1);
    fill(&b, 2);
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    src.free(a);
    // The first decay ends the epoch `a` was freed in: nothing was given up
    // before it, so nothing goes.
    assert_eq!(src.decay(), 0);
    src.free(b);
    assert_eq!(src.stats().cached_pages, 8);
    // The second releases `a` (not reused for a whole epoch) and keeps `b`.
    assert_eq!(src.decay(), 4);
    assert_eq!((resident(pa, 4), resident(pb, 4)), (0, 4));
    let st = src.stats();
    assert_eq!((st.decays, st.cached_pages), (2, 4));
    // A flush still releases everything.
    assert_eq!(src.flush(), 4);
    assert_eq!(resident(pb, 4), 0);
}

#[test]
#[cfg_attr(miri, ignore = "counts resident pages with mincore, which Miri lacks")]
fn pending_tails_decay_like_cached_runs() {
    let (src, _held) = retaining(0, 2, 64);
    let run = src.alloc(4).unwrap();
    fill(&run, 3);
    src.discard_later(&run, 2, 2);
    assert_eq!(src.decay(), 0);
    assert_eq!(resident(run.as_ptr(), 4), 4, "kept through its own epoch");
    assert_eq!(src.decay(), 2);
    assert_eq!(resident(run.as_ptr(), 4), 2);
    assert!(!src.reclaim(&run, 4), "nothing pending any more");
    src.free(run);
}

#[test]
fn a_retaining_source_splits_a_longer_cached_run() {
    let (src, _held) = retaining(0, 1, 64);
    let long = src.alloc(6).unwrap();
    fill(&long, 9);
    let addr = long.as_ptr();
    src.free(long);
    let short = src.alloc_pending(4).unwrap();
    assert_eq!(short.as_ptr(), addr, "the front of the cached run");
    let st = src.stats();
    assert_eq!(
        (st.cache_hits, st.cached_pages, st.pending_pages),
        (1, 2, 4)
    );
    // Its pages are pending until reclaimed, and keep their bytes.
    assert!(!src.reclaim(&short, 4));
    assert_eq!(byte_at(&short, 3 * PS), 9);
    // The rest is a cached run of 2 the next request of 2 takes.
    let rest = src.alloc(2).unwrap();
    // SAFETY: both runs lie in one mapping of the source.
    assert_eq!(rest.as_ptr(), unsafe { addr.add(4 * PS) });
    assert_eq!(byte_at(&rest, PS), 9);
    // Without a retained share, lengths must match (as before).
    src.free(rest);
    src.set_retain_divisor(0);
    let plain = PageSource::new(PS, None).unwrap();
    let l = plain.alloc(6).unwrap();
    fill(&l, 1);
    let la = l.as_ptr();
    plain.free(l);
    let s = plain.alloc_pending(4).unwrap();
    assert_ne!(s.as_ptr(), la);
    assert_eq!(plain.stats().cache_hits, 0);
    src.free(short);
}

#[test]
#[cfg_attr(miri, ignore = "20,000 rounds of a race: slow under Miri")]
fn reclaimed_pages_are_never_dropped_by_a_decay_or_a_partial_batch() {
    // As above, with a retained share: one thread gives up a run's tail and
    // reclaims it to write a pattern; another decays all the time, and
    // frees and allocates runs that take the source over its bound (partial
    // batches, oldest first). A reclaimed page keeps what is written to it.
    let src = std::sync::Arc::new(PageSource::new(PS, None).unwrap());
    src.set_cache_limit(4);
    src.set_retain_divisor(2);
    src.set_decay_interval(std::time::Duration::ZERO);
    let run = src.alloc(8).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The other thread's passes: the writer goes on until there were some,
    // however the scheduler runs the two threads.
    let passes = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let other = {
        let (src, stop, passes) = (src.clone(), stop.clone(), passes.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let runs: Vec<Run> = (0..4).map(|_| src.alloc(3).unwrap()).collect();
                for r in runs {
                    fill(&r, 5);
                    src.free(r);
                }
                src.decay();
                passes.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let mut round = 0u32;
    while round < 20_000 || passes.load(Ordering::Relaxed) < 100 {
        round += 1;
        let value = (round % 250) as u8 + 1;
        src.discard_later(&run, 2, 6);
        if round % 2 == 0 {
            std::thread::yield_now(); // a window for the other thread
        }
        src.reclaim(&run, 8);
        // SAFETY: pages 2..8 were reclaimed and the run is ours.
        unsafe { std::ptr::write_bytes(run.as_ptr().add(2 * PS), value, 6 * PS) };
        for page in 2..8 {
            assert_eq!(byte_at(&run, page * PS + 17), value, "round {round}");
        }
    }
    stop.store(true, Ordering::Relaxed);
    other.join().unwrap();
    let st = src.stats();
    assert!(st.decays > 0 && st.batches > 0, "{st:?}");
}
