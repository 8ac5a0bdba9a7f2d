//! The locked reserve gives memory back, in a process of its own (it is
//! locked once per process): a piece none of whose pages a source holds any
//! more goes back to the reserve, ready, and the refill thread gives the
//! kernel the ready pieces beyond the resident part, unlocked and dropped,
//! once free memory is calm; a piece with one run still out stays, its
//! bytes intact; and the refill thread populates the pieces given back
//! again when pieces are wanted, which read as zero.

use std::time::{Duration, Instant};

mod common;

use common::{locked_bytes, proc_kib_field};
use pages::reserve::{self, ReserveStats, PIECE_BYTES};
use pages::{PageSource, Run};

const PAGE: usize = 4096;
/// Pages of each run: 16 runs a piece.
const RUN_PAGES: u32 = 16;
const RUNS_PER_PIECE: usize = PIECE_BYTES / (RUN_PAGES as usize * PAGE);

/// The bytes of `run`.
fn bytes(run: &mut Run) -> &mut [u8] {
    // SAFETY: the run is the test's, `RUN_PAGES` pages long, borrowed
    // mutably for as long as the slice lives.
    unsafe { std::slice::from_raw_parts_mut(run.as_ptr(), RUN_PAGES as usize * PAGE) }
}

/// Takes `n` runs from `source`, waiting for the refill thread when no
/// piece is ready; each read as zero, then filled with its own byte.
fn carve(source: &PageSource, n: usize, runs: &mut Vec<Run>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while runs.len() < n {
        match source.alloc_clean(RUN_PAGES) {
            Ok(mut run) => {
                let b = bytes(&mut run);
                assert!(b.iter().all(|&x| x == 0), "run {} is not zero", runs.len());
                b.fill(runs.len() as u8 | 1);
                runs.push(run);
            }
            Err(e) => {
                let s = reserve::stats().unwrap();
                assert!(Instant::now() < deadline, "no refill: {e}, {s:?}");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// The reserve's stats once the refill thread has the resident part ready.
fn settled() -> ReserveStats {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = reserve::stats().unwrap();
        if s.ready == s.resident {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "the refill did not settle: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether free memory is above the zones' high watermarks by a few
/// pieces: where the refill thread gives the kernel back ready pieces
/// beyond the resident part (after `reserve::CALM_FOR`).
fn calm() -> bool {
    let free = proc_kib_field("/proc/meminfo", "MemFree");
    let zoneinfo = std::fs::read_to_string("/proc/zoneinfo").unwrap();
    let high_pages: u64 = zoneinfo
        .lines()
        .filter_map(|l| l.trim().strip_prefix("high"))
        .filter_map(|v| v.trim().parse::<u64>().ok())
        .sum();
    free > high_pages * PAGE as u64 + (16 << 20)
}

/// The reserve's stats once `bytes` have gone back to the kernel in all.
fn returned(bytes: u64) -> ReserveStats {
    let deadline = Instant::now() + reserve::CALM_FOR + Duration::from_secs(30);
    loop {
        let s = reserve::stats().unwrap();
        if s.returned == bytes {
            return s;
        }
        assert!(s.returned < bytes, "too much went back: {s:?}");
        assert!(Instant::now() < deadline, "not given back: {s:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[cfg_attr(miri, ignore = "Miri maps no locked or populated memory")]
fn whole_free_pieces_go_back_to_the_kernel_and_are_populated_again_when_wanted() {
    let piece = PIECE_BYTES as u64;
    let (pieces, resident) = (8u64, 2u64);
    let base = locked_bytes();
    if let Err(e) = reserve::lock_reserve(pieces * piece, resident * piece) {
        // An unprivileged user under a small RLIMIT_MEMLOCK.
        eprintln!("skipped: {e}");
        return;
    }
    reserve::start_refill(|| (), || (), false).unwrap();
    let source = PageSource::new(PAGE, None).unwrap();

    // Six pieces taken, two ready: the whole reserve locked.
    let mut runs = Vec::new();
    carve(&source, 6 * RUNS_PER_PIECE, &mut runs);
    let full = settled();
    assert_eq!((full.taken, full.locked), (6 * piece, pieces * piece));
    assert_eq!(full.returned, 0);
    let locked_full = locked_bytes();
    assert!(
        locked_full >= base + pieces * piece,
        "{base} -> {locked_full}"
    );

    // A source carves a piece whole before the next: runs
    // `i * RUNS_PER_PIECE..` are piece i. Free the first three pieces
    // through the cache, the fourth by discarding each run first, and all
    // but the last run of the fifth; the sixth stays out.
    let mut runs: Vec<Option<Run>> = runs.into_iter().map(Some).collect();
    for (i, slot) in runs.iter_mut().enumerate().take(5 * RUNS_PER_PIECE - 1) {
        let run = slot.take().unwrap();
        if i / RUNS_PER_PIECE == 3 {
            source.discard(&run, 0, RUN_PAGES);
            source.free_resident(run, 0);
        } else {
            source.free(run);
        }
    }
    source.flush();
    let back = reserve::stats().unwrap();
    assert_eq!(
        (back.taken, back.ready + back.returned),
        (2 * piece, 6 * piece),
        "four whole pieces back, ready or returned; the fifth stays, one run of it out: {back:?}"
    );
    if !calm() {
        eprintln!("skipped the rest: free memory is not above the high watermarks here");
        return;
    }
    let freed = returned(4 * piece);
    assert_eq!(
        (freed.taken, freed.ready, freed.locked),
        (2 * piece, 2 * piece, 4 * piece),
        "the resident part stays ready: {freed:?}"
    );
    let locked_freed = locked_bytes();
    assert!(
        locked_freed + 4 * piece <= locked_full,
        "four pieces unlocked: {locked_full} -> {locked_freed}"
    );
    for (i, run) in runs.iter_mut().enumerate() {
        if let Some(run) = run {
            let want = i as u8 | 1;
            assert!(bytes(run).iter().all(|&x| x == want), "run {i} changed");
        }
    }

    // Pieces wanted again: the ready ones go out, and the refill thread
    // populates the pieces given back (the address space past them is used
    // up), which read as zero.
    let mut again = Vec::new();
    carve(&source, 4 * RUNS_PER_PIECE, &mut again);
    let refilled = settled();
    assert_eq!(
        (refilled.taken, refilled.locked),
        (6 * piece, pieces * piece),
        "{refilled:?}"
    );
    assert_eq!(refilled.returned, 4 * piece, "nothing more went back");
    assert!(locked_bytes() >= locked_full, "all of it locked again");

    // A source that drops gives every piece back: the resident part stays
    // ready and locked, the rest goes to the kernel.
    drop(again);
    drop(runs);
    drop(source);
    let dropped = returned(10 * piece);
    assert_eq!(
        (dropped.taken, dropped.ready, dropped.locked),
        (0, 2 * piece, 2 * piece),
        "{dropped:?}"
    );
    assert!(
        locked_bytes() + 6 * piece <= locked_full,
        "{locked_full} -> {}",
        locked_bytes()
    );
}
