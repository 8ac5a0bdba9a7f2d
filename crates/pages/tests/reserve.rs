//! The locked reserve, in a process of its own (it is locked once per
//! process): its resident part is locked before anything is taken, sources
//! carve from it, a take that finds no piece ready fails at once rather
//! than waiting, the refill thread brings the ready pieces back from free
//! memory, a source runs out of it with an error rather than mapping more,
//! reads zeros where it released pages, and gives its pieces back when
//! dropped.

use std::time::{Duration, Instant};

mod common;

use common::locked_bytes;
use pages::reserve::{self, PIECE_BYTES};
use pages::{PageSource, PagesError, MAX_RUN_PAGES};

#[test]
#[cfg_attr(miri, ignore = "Miri maps no locked or populated memory")]
fn sources_carve_from_the_locked_reserve_and_fail_cleanly_past_it() {
    let piece = PIECE_BYTES as u64;
    assert!(!reserve::active());
    assert!(matches!(
        reserve::lock_reserve(0, 0),
        Err(PagesError::Reserve(_))
    ));
    let pieces = 8u64;
    let resident = 2u64;
    let before = locked_bytes();
    let stats = match reserve::lock_reserve(pieces * piece - 1, resident * piece) {
        Ok(s) => s,
        Err(e) => {
            // An unprivileged user under a small RLIMIT_MEMLOCK.
            eprintln!("skipped: {e}");
            return;
        }
    };
    assert_eq!(stats.limit, pieces * piece, "whole pieces");
    assert_eq!(stats.locked, resident * piece);
    assert_eq!(stats.resident, resident * piece);
    assert_eq!(stats.ready, resident * piece);
    assert_eq!(stats.taken, 0);
    assert!(reserve::active());
    assert!(
        locked_bytes() >= before + stats.locked,
        "the resident part is locked: {} -> {}",
        before,
        locked_bytes()
    );
    assert!(matches!(
        reserve::lock_reserve(piece, 0),
        Err(PagesError::Reserve(_))
    ));

    let page = 4096;
    let source = PageSource::new(page, None).unwrap();
    let run_pages = MAX_RUN_PAGES;
    let per_piece = PIECE_BYTES / (run_pages as usize * page);
    let mut runs = Vec::new();
    let carve = |runs: &mut Vec<pages::Run>| -> PagesError {
        loop {
            match source.alloc_clean(run_pages) {
                Ok(run) => {
                    // Fresh pages read as zero; fill them.
                    // SAFETY: the run is ours, `run_pages` pages long.
                    let bytes = unsafe {
                        std::slice::from_raw_parts_mut(run.as_ptr(), run_pages as usize * page)
                    };
                    assert!(bytes.iter().all(|&b| b == 0));
                    bytes.fill(0xa5);
                    runs.push(run);
                }
                Err(e) => break e,
            }
        }
    };
    // No refill thread yet: the resident pieces, then an error at once.
    let t = Instant::now();
    let err = carve(&mut runs);
    assert_eq!(
        err,
        PagesError::ReserveExhausted {
            bytes: resident * piece
        }
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(runs.len(), resident as usize * per_piece);
    let dry = reserve::stats().unwrap();
    assert_eq!((dry.ready, dry.taken), (0, resident * piece));
    assert!(dry.exhausted >= 1, "{dry:?}");

    // The refill thread brings the ready pieces back to the resident part
    // from free memory (this machine has plenty), until the address space
    // is used up.
    reserve::start_refill(|| (), || (), false).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let err = loop {
        let err = carve(&mut runs);
        let s = reserve::stats().unwrap();
        if s.locked == s.limit && s.ready == 0 {
            break err;
        }
        assert!(Instant::now() < deadline, "no refill: {s:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(err, PagesError::ReserveExhausted { bytes: stats.limit });
    assert!(err.to_string().contains("locked reserve"), "{err}");
    assert_eq!(
        runs.len(),
        pieces as usize * per_piece,
        "every piece carved, nothing more"
    );
    let full = reserve::stats().unwrap();
    assert_eq!((full.locked, full.taken), (stats.limit, stats.limit));
    assert!(locked_bytes() >= before + stats.limit);

    // Released pages stay locked and read as zero when handed out again.
    let run = runs.pop().unwrap();
    source.discard(&run, 0, run_pages);
    // SAFETY: the run is still ours.
    let bytes = unsafe { std::slice::from_raw_parts(run.as_ptr(), run_pages as usize * page) };
    assert!(
        bytes.iter().all(|&b| b == 0),
        "a discarded run reads as zero"
    );
    source.free(run);
    for run in runs.drain(..) {
        source.free(run);
    }
    source.flush();
    let again = source.alloc_clean(run_pages).unwrap();
    // SAFETY: the run is ours.
    let bytes = unsafe { std::slice::from_raw_parts(again.as_ptr(), run_pages as usize * page) };
    assert!(
        bytes.iter().all(|&b| b == 0),
        "a released run reads as zero"
    );
    source.free(again);

    // A dropped source gives its pieces back, zeroed, for the next one.
    drop(source);
    assert_eq!(reserve::stats().unwrap().taken, 0);
    let next = PageSource::new(page, None).unwrap();
    let dense = next.alloc(run_pages).unwrap();
    // SAFETY: the run is ours.
    let bytes = unsafe { std::slice::from_raw_parts(dense.as_ptr(), run_pages as usize * page) };
    assert!(
        bytes.iter().all(|&b| b == 0),
        "a given-back piece reads as zero"
    );
    assert_eq!(reserve::stats().unwrap().taken, piece);
    next.free(dense);
}
