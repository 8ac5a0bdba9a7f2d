//! The watchdog of the faults the handler thread holds: a fault that has
//! waited longer than `RegionConfig::stuck_after` since it first arrived
//! is reported once, so that a program that hangs on the region says why
//! while it hangs, not at an exit that never comes.
//!
//! A report is one line in the region's log (`report_log`) and a count
//! (`FaultStats::stuck`): the fault's address and page, the page's state,
//! how long it has waited, the limit's state (resident pages against the
//! region's share), whether the evictor is awake, and how many faults wait
//! with it. Like every report there, it allocates nothing.
//!
//! Owns the report; which faults wait and for how long is the handler's
//! (`handler`), the rule that makes them wait is `fault`'s. Faults served
//! by the faulting thread itself (`signal`) are not watched: they are not
//! queued in the kernel, and the thread runs on between its attempts.

use std::io::Write;
use std::sync::atomic::Ordering;

use crate::report_log::{append, pid};
use crate::shared::Shared;
use crate::stats::Counters;
use crate::table::{EVICTING, GONE, LOADING, PROBATION, RESIDENT, STORED, UNTOUCHED};

/// The name of a page state, as the module documentation of `table` gives
/// them.
fn state_name(state: u8) -> &'static str {
    match state {
        UNTOUCHED => "untouched",
        RESIDENT => "resident",
        EVICTING => "evicting",
        STORED => "stored",
        PROBATION => "probation",
        LOADING => "loading",
        GONE => "gone",
        _ => "unknown",
    }
}

/// Whether a fault that first arrived at `since_ns` (the region's clock)
/// has waited past the threshold at `now_ns`.
pub(crate) fn overdue(sh: &Shared, since_ns: u64, now_ns: u64) -> bool {
    now_ns.saturating_sub(since_ns) >= sh.config.stuck_after.as_nanos() as u64
}

/// Reports the fault at `addr` (page `page`, if the mapping has it) that
/// first arrived at `since_ns`; `waiting` faults wait with it.
pub(crate) fn report(
    sh: &Shared,
    addr: usize,
    page: Option<usize>,
    since_ns: u64,
    now_ns: u64,
    waiting: usize,
) {
    Counters::bump(&sh.counters.stuck);
    let waited = now_ns.saturating_sub(since_ns);
    append(sh, |out| {
        let pid = pid();
        match page {
            Some(p) => write!(
                out,
                "zmem region (pid {pid}): a fault at {addr:#x} (page {p}, {}) has waited \
                 {}.{:03} s;",
                state_name(sh.table.state(p)),
                waited / 1_000_000_000,
                waited / 1_000_000 % 1000
            ),
            None => write!(
                out,
                "zmem region (pid {pid}): a fault at {addr:#x} (no page of the region's) has \
                 waited {}.{:03} s;",
                waited / 1_000_000_000,
                waited / 1_000_000 % 1000
            ),
        }?;
        write!(
            out,
            " resident {} of {} pages, the evictor {}, {waiting} fault(s) waiting",
            sh.resident.load(Ordering::Relaxed),
            sh.share_pages.load(Ordering::Relaxed),
            if sh.evictor_awake.load(Ordering::Relaxed) {
                "awake"
            } else {
                "asleep"
            },
        )
    });
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::evict::{settle_removed, zap};
    use crate::test_region::four_pages;

    /// A fault on a page an eviction took and never finished waits in the
    /// handler: the watchdog reports it once, with the page and its
    /// state, while it waits, and the fault is served when the eviction
    /// ends.
    #[test]
    fn a_fault_that_waits_past_the_threshold_is_reported_once_while_it_waits() {
        let ps = crate::page_size();
        let log = std::env::temp_dir().join(format!("zmem-watchdog-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&log);
        let Some(r) = four_pages(|c| {
            c.stuck_after = Duration::from_millis(200);
            c.report_log = Some(log.clone());
        }) else {
            return;
        };
        let sh = r.shared();
        let p = 2;
        let addr = r.as_ptr() as usize + p * ps;
        // SAFETY: page 2 of the region.
        unsafe { std::ptr::write_bytes(addr as *mut u8, 0x5a, ps) };
        let t0 = Instant::now();
        while sh.table.state(p) != RESIDENT {
            assert!(t0.elapsed() < Duration::from_secs(10), "never resident");
            std::thread::yield_now();
        }
        // An eviction takes the page, copies it out and zaps it, and then
        // stops: the page stays `EVICTING`, and a read of it waits.
        assert!(sh.table.cas(p, RESIDENT, EVICTING));
        // SAFETY: page 2 of the region, resident and held.
        let copy = unsafe { std::slice::from_raw_parts(addr as *const u8, ps) }.to_vec();
        sh.store.write_page(p as u64, &copy).unwrap();
        assert!(zap(sh, p, 1, addr));
        sh.resident.fetch_sub(1, Ordering::AcqRel);

        let mut report = String::new();
        let mut waited_at_report = false;
        let mut stuck_after_retries = 0;
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                // SAFETY: the last byte of page 2; blocks until served.
                unsafe { (addr as *const u8).add(ps - 1).read_volatile() }
            });
            // The report comes while the reader waits (up to 10 s).
            let t0 = Instant::now();
            while !report.ends_with('\n') && t0.elapsed() < Duration::from_secs(10) {
                report = std::fs::read_to_string(&log).unwrap_or_default();
                std::thread::sleep(Duration::from_millis(5));
            }
            waited_at_report = !reader.is_finished();
            // Many retries later, still one report.
            std::thread::sleep(Duration::from_millis(300));
            stuck_after_retries = r.stats().faults.stuck;
            // The eviction ends (also when the checks below fail: the
            // reader must not wait forever); the reader gets the page back.
            sh.table.set(p, STORED);
            sh.uffd().wake(addr, ps).unwrap();
            settle_removed(sh, p);
            assert_eq!(reader.join().unwrap(), 0x5a);
        });
        assert!(
            report.contains(&format!("page {p}, evicting)")) && report.contains("has waited"),
            "no report, or not of the page: {report:?}"
        );
        assert!(
            waited_at_report,
            "the fault was served before the eviction ended"
        );
        assert_eq!(stuck_after_retries, 1, "reported more than once, or never");
        assert_eq!(
            std::fs::read_to_string(&log).unwrap().lines().count(),
            1,
            "one line per stuck fault"
        );
        let _ = std::fs::remove_file(&log);
    }
}
