//! The one rule for a page fault of the region's, whichever thread serves
//! it: the handler thread, which reads faults from the userfaultfd as
//! messages, or the faulting thread itself, in its `SIGBUS` handler
//! (`signal`). Both services call these two functions and differ only in
//! how they wait (the handler keeps a list of faults to try again; the
//! faulting thread returns and faults again, or sleeps on the `room`
//! futex) and in how the faulting thread is let go (the handler wakes it
//! through the descriptor; a faulting thread simply runs on).
//!
//! A missing fault:
//! - on a page another thread holds (`EVICTING`, `LOADING`), waits its
//!   turn; the one exception is an evicting thread's own copy of a page
//!   the program dropped meanwhile (`copies`), which `evict::bring_in`
//!   serves on the handler thread;
//! - on a page that must be mapped (never written, stored, in probation)
//!   while the region is at its resident limit, wakes the evictor and
//!   waits for room, at most [`LIMIT_WAIT_NS`] from its first arrival,
//!   then is served over the limit (counted) rather than hang;
//! - otherwise is brought back (`evict::bring_in`); its latency, from its
//!   first arrival, is recorded;
//! - on a page the store cannot read (its data is lost), is refused: the
//!   service turns it into the program's own `SIGBUS`, never a wait.
//!
//! A write-protect fault is a write to a page an eviction protected. The
//! eviction in progress lets the writer go after its zap; a page found
//! `RESIDENT` has no eviction in progress (the protection is stale: left
//! by one that was abandoned) and is unprotected, **held** (`RESIDENT` ->
//! `EVICTING`) for that while. Without the hold, an eviction could take
//! the page between the state read and the unprotect and lose its own
//! protection to it: the program's write between that eviction's copy and
//! its zap would be thrown away by the zap.
//!
//! Owns these decisions and the counts and latency they record; the moves
//! themselves are `evict`'s, the page states `table`'s, the waits the
//! services'. Allocates nothing.

use std::sync::atomic::Ordering;

use crate::evict::{bring_in, settle_removed, BringIn};
use crate::evictor::needs_room;
use crate::shared::{wake_evictor, Shared};
use crate::stats::Counters;
use crate::table::{EVICTING, GONE, LOADING, PROBATION, RESIDENT, STORED, UNTOUCHED};

/// How long a fault waits for room under the limit, from its first
/// arrival, before it is served over the limit.
pub(crate) const LIMIT_WAIT_NS: u64 = 5_000_000;

/// The longest single sleep of a faulting thread waiting for room: the
/// limit may move without the evictor making room (a limit that covers
/// the process), so the wait looks again at least this often.
const ROOM_SLEEP_NS: u64 = 1_000_000;

/// Which thread serves a fault.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Service {
    /// The region's handler thread, from a userfaultfd message.
    HandlerThread,
    /// The faulting thread, in its `SIGBUS` handler.
    FaultingThread,
}

/// A missing fault to serve.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Missing {
    /// The region's page.
    pub page: usize,
    /// Its address (page-aligned).
    pub addr: usize,
    /// A write (a never-written page gets a page of zeros of its own, not
    /// the zero page).
    pub write: bool,
    /// When the fault first arrived (ns since `Shared::started`).
    pub since: u64,
    /// Seen for the first time (not a fault tried again after a wait).
    pub first: bool,
    /// The fault is an evicting thread's own copy (`copies`).
    pub holders_copy: bool,
}

/// What the service must do next.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Outcome {
    /// Served (mapped, unprotected, or nothing left to do): the faulting
    /// thread runs on (the handler thread has woken it where it had to).
    Served,
    /// Another thread holds the page, or an event is still to be read:
    /// try again after a turn.
    Turn,
    /// At the resident limit: wait for room, at most `ns`; `seen` is the
    /// `room` futex word read before the limit was checked.
    Room {
        /// `Shared::room` as seen.
        seen: u32,
        /// How long to sleep at most.
        ns: u64,
    },
    /// A write-protect fault left to the eviction holding the page, which
    /// wakes the writer after its zap (handler thread only: a faulting
    /// thread takes a turn instead).
    LeftToHolder,
    /// The page cannot be brought back (the store could not read it): the
    /// program's access must end in its own `SIGBUS` (counted in
    /// `refused`, reported in the region's log), not in a wait that never
    /// ends.
    Refused,
}

/// Nanoseconds since the region started: the clock of `Missing::since`.
pub(crate) fn now_ns(sh: &Shared) -> u64 {
    sh.started.elapsed().as_nanos() as u64
}

/// Serves missing fault `f`, decompressing into `buf` (one page).
pub(crate) fn missing(sh: &Shared, f: Missing, buf: &mut [u8], service: Service) -> Outcome {
    #[cfg(test)]
    hook::at(sh, hook::Point::Missing);
    let c = &sh.counters;
    let state = sh.table.state(f.page);
    match state {
        EVICTING if !f.holders_copy => return put_off(sh, f, Outcome::Turn),
        LOADING => return put_off(sh, f, Outcome::Turn),
        GONE => {
            // Unmapped by the program meanwhile: the instruction, run
            // again, gets the program's own `SIGSEGV`.
            if service == Service::HandlerThread {
                let _ = sh.uffd().wake(f.addr, sh.page_size);
            }
            return Outcome::Served;
        }
        _ => {}
    }
    let maps = matches!(state, UNTOUCHED | STORED | PROBATION);
    // Read before the limit: room made after this read ends the wait.
    let seen = sh.room.load(Ordering::SeqCst);
    if maps && sh.at_limit() {
        wake_evictor(sh);
        let waited = now_ns(sh).saturating_sub(f.since);
        if waited < LIMIT_WAIT_NS {
            let ns = (LIMIT_WAIT_NS - waited).min(ROOM_SLEEP_NS);
            return put_off(sh, f, Outcome::Room { seen, ns });
        }
    }
    // A faulting thread brings a page back after the batch of events the
    // handler thread is serving (an `mremap` returns once its event is
    // read, and a fault at the new address must find the mapping moved);
    // the handler thread serves a batch's events before its faults.
    let batch = (service == Service::FaultingThread)
        .then(|| sh.events.read().unwrap_or_else(|e| e.into_inner()));
    let got = bring_in(sh, f.page, f.addr, buf, true, f.write, f.holders_copy);
    drop(batch);
    match got {
        BringIn::Done | BringIn::AlreadyThere => {
            if maps && sh.resident.load(Ordering::Relaxed) > sh.limit_pages() {
                Counters::bump(&c.over_limit);
            }
            c.latency.record(now_ns(sh).saturating_sub(f.since));
            if needs_room(sh) || sh.discards.half_full() {
                wake_evictor(sh);
            }
            Outcome::Served
        }
        // The mapping is changing, or another thread took the page first.
        BringIn::Later => put_off(sh, f, Outcome::Turn),
        BringIn::Unreadable => {
            Counters::bump(&c.refused);
            Outcome::Refused
        }
    }
}

/// A fault that must wait: counted once, at its first arrival.
fn put_off(sh: &Shared, f: Missing, wait: Outcome) -> Outcome {
    if f.first {
        Counters::bump(&sh.counters.deferred);
    }
    wait
}

/// Serves a write-protect fault on page `p` at page address `addr`.
/// (Counted by the caller, once per write.)
pub(crate) fn write_protected(sh: &Shared, p: usize, addr: usize, service: Service) -> Outcome {
    let ps = sh.page_size;
    #[cfg(test)]
    hook::at(sh, hook::Point::WriteProtectFault);
    loop {
        let state = sh.table.state(p);
        #[cfg(test)]
        hook::at(sh, hook::Point::StateRead { state });
        match state {
            RESIDENT => {
                if !sh.table.cas(p, RESIDENT, EVICTING) {
                    // Taken meanwhile (an eviction, a fault's service):
                    // look again.
                    continue;
                }
                let unprotected = sh.uffd().write_protect(addr, ps, false).is_ok();
                sh.table.set(p, RESIDENT);
                settle_removed(sh, p);
                return if unprotected {
                    // The unprotect woke the writer.
                    Outcome::Served
                } else {
                    // `EAGAIN` while the program changes its mapping: the
                    // write faults again.
                    Outcome::Turn
                };
            }
            EVICTING | STORED | PROBATION if service == Service::HandlerThread => {
                return Outcome::LeftToHolder;
            }
            // No waiter to wake in the faulting thread (it runs the write
            // again, which faults as missing once the page is dropped);
            // on the handler thread, a page no longer mapped (never
            // written, being brought back, gone): the writer faults again.
            _ => return Outcome::Turn,
        }
    }
}

/// A test's hook at the points of a fault's service where another thread
/// may act, to make a race happen every time. Compiled in tests only; it
/// fires for one region's faults only, so the crate's other tests (each
/// with regions of its own, in the same process) never see it.
#[cfg(test)]
pub(crate) mod hook {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use crate::shared::Shared;

    /// Where the hook is called.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum Point {
        /// A write-protect fault's service begins (it has read the
        /// page's address, not yet its state).
        WriteProtectFault,
        /// A write-protect fault's service read the page's state and has
        /// not acted on it yet.
        StateRead {
            /// The state read.
            state: u8,
        },
        /// A missing fault's service begins.
        Missing,
    }

    type Hook = Box<dyn FnMut(&Shared, Point) + Send>;

    /// The region the hook is for (its `Shared`'s address; 0: none).
    static FOR: AtomicUsize = AtomicUsize::new(0);
    static HOOK: Mutex<Option<Hook>> = Mutex::new(None);

    /// Calls the hook if it is set for `sh`'s region.
    pub(crate) fn at(sh: &Shared, point: Point) {
        if FOR.load(Ordering::Acquire) != sh as *const Shared as usize {
            return;
        }
        if let Some(h) = HOOK.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            h(sh, point);
        }
    }

    /// Sets the hook for `sh`'s region; it stays until `clear`.
    pub(crate) fn set(sh: &Shared, h: impl FnMut(&Shared, Point) + Send + 'static) {
        *HOOK.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(h));
        FOR.store(sh as *const Shared as usize, Ordering::Release);
    }

    /// Takes the hook away.
    pub(crate) fn clear() {
        FOR.store(0, Ordering::Release);
        *HOOK.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU8};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use super::hook::{self, Point};
    use super::*;
    use crate::evict::read_own_ranges;
    use crate::test_region::{finish_eviction, four_pages, page_one_filled, wait_until};

    /// An eviction is abandoned while a write waits on its protection, and
    /// a second eviction of the same page starts while the write's fault is
    /// being served: the service must not take the second eviction's
    /// protection away, or a write between that eviction's copy and its
    /// zap is thrown away by the zap. The hook makes each step happen at
    /// the point of the service where the race opens; every byte of the
    /// page is checked after.
    #[test]
    fn a_stale_protection_never_unprotects_a_later_eviction() {
        let ps = crate::page_size();
        let Some((r, addr)) = page_one_filled(0x11) else {
            return;
        };
        let sh = r.shared();
        let p = 1;
        wait_until("resident", || sh.table.state(p) == RESIDENT);

        // The first eviction takes the page and protects it.
        assert!(sh.table.cas(p, RESIDENT, EVICTING));
        sh.uffd().write_protect(addr, ps, true).unwrap();

        // Steps the hook takes on the handler thread, in the service of
        // the first writer's fault: it abandons the first eviction (as
        // `evict` does when the store refuses a page: unprotect, which
        // wakes the writer, then `RESIDENT`), and once the service has
        // read the page's state, starts the second eviction (take,
        // protect, copy out).
        let first_wrote = Arc::new(AtomicBool::new(false));
        let copy = Arc::new(Mutex::new(vec![0u8; ps]));
        let second_took = Arc::new(AtomicBool::new(false));
        let step = Arc::new(AtomicU8::new(0));
        {
            let (first_wrote, copy, second_took, step) = (
                Arc::clone(&first_wrote),
                Arc::clone(&copy),
                Arc::clone(&second_took),
                Arc::clone(&step),
            );
            hook::set(sh, move |sh, point| {
                match (step.load(Ordering::SeqCst), point) {
                    (0, Point::WriteProtectFault) => {
                        step.store(1, Ordering::SeqCst);
                        let _ = sh.uffd().write_protect(addr, ps, false);
                        sh.table.set(p, RESIDENT);
                        wait_until("written by the first writer", || {
                            first_wrote.load(Ordering::Acquire)
                        });
                    }
                    (1, Point::StateRead { state: RESIDENT }) => {
                        step.store(2, Ordering::SeqCst);
                        if sh.table.cas(p, RESIDENT, EVICTING) {
                            sh.uffd().write_protect(addr, ps, true).unwrap();
                            let remote = [libc::iovec {
                                iov_base: addr as *mut libc::c_void,
                                iov_len: ps,
                            }];
                            let mut c = copy.lock().unwrap();
                            read_own_ranges(sh, &remote, c.as_mut_ptr(), ps).unwrap();
                            second_took.store(true, Ordering::Release);
                        }
                    }
                    _ => {}
                }
            });
        }

        let second_wrote = AtomicBool::new(false);
        let mut early = false;
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: the first byte of page 1; blocks on the first
                // eviction's protection.
                unsafe { (addr as *mut u8).write_volatile(0x22) };
                first_wrote.store(true, Ordering::Release);
            });
            wait_until("taken by the second eviction", || {
                second_took.load(Ordering::Acquire)
            });
            s.spawn(|| {
                // SAFETY: the second byte of page 1, written after the
                // second eviction's copy.
                unsafe { (addr as *mut u8).add(1).write_volatile(0x33) };
                second_wrote.store(true, Ordering::Release);
            });
            std::thread::sleep(Duration::from_millis(100));
            early = second_wrote.load(Ordering::Acquire);
            // The second eviction goes on: store, zap, publish, wake, let
            // go.
            let c = copy.lock().unwrap().clone();
            finish_eviction(sh, p, addr, &c);
        });
        hook::clear();
        // SAFETY: page 1 of the region, read whole.
        let page = unsafe { std::slice::from_raw_parts(addr as *const u8, ps) };
        assert_eq!(page[0], 0x22, "the first write was lost");
        assert_eq!(
            page[1], 0x33,
            "the write after the second eviction's copy was lost to its zap"
        );
        assert!(
            page[2..].iter().all(|&b| b == 0x11),
            "the rest of the page changed"
        );
        assert!(
            !early,
            "a write landed on a page held for eviction, before its zap"
        );
    }

    /// The program's own `SIGBUS` handler, installed by a refusal child
    /// before its region: writes `sigbus addr=0x... code=N` to standard
    /// output and exits with 7. Async-signal-safe (formats on the stack).
    extern "C" fn on_programs_sigbus(
        _sig: libc::c_int,
        info: *mut libc::siginfo_t,
        _ctx: *mut libc::c_void,
    ) {
        // SAFETY: the kernel passes a valid `siginfo_t`.
        let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
        let mut line = *b"sigbus addr=0x0000000000000000 code=-00\n";
        for i in 0..16 {
            line[14 + i] = b"0123456789abcdef"[(addr >> (60 - 4 * i)) & 15];
        }
        line[36] = if code < 0 { b'-' } else { b'+' };
        line[37] = b'0' + (code.unsigned_abs() / 10 % 10) as u8;
        line[38] = b'0' + (code.unsigned_abs() % 10) as u8;
        // SAFETY: writes the line to standard output, then exits at once.
        unsafe {
            libc::write(1, line.as_ptr().cast(), line.len());
            libc::_exit(7);
        }
    }

    /// The child's side of a refusal test (`case`: which service, which
    /// failure): a region with a page in the store, the failure made to
    /// happen, then a read of the page, which must end in the program's
    /// `SIGBUS` handler, never return and never hang.
    fn refusal_child(case: &str) -> ! {
        let ps = crate::page_size();
        // SAFETY: installs a plain `SA_SIGINFO` handler for `SIGBUS`
        // before any region exists (a region serving faults in the
        // faulting thread passes other `SIGBUS`es on to it).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_programs_sigbus as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
        }
        let Some(r) = four_pages(|c| {
            c.report_log = std::env::var_os("ZMEM_REFUSAL_LOG").map(Into::into);
            if case == "faulting-thread-read" {
                c.fault_service = crate::FaultService::FaultingThread;
            }
        }) else {
            std::process::exit(77);
        };
        let sh = r.shared();
        let p = 2;
        let addr = r.as_ptr() as usize + p * ps;
        // SAFETY: page 2 of the region.
        unsafe { std::ptr::write_bytes(addr as *mut u8, 0x5a, ps) };
        wait_until("resident", || sh.table.state(p) == RESIDENT);
        assert_eq!(r.cold(p * ps..(p + 1) * ps).unwrap(), 1);
        wait_until("stored", || sh.table.state(p) == STORED);
        match case {
            "handler-panic" => hook::set(sh, |_, point| {
                if point == Point::Missing {
                    panic!("a test's panic in the fault's service");
                }
            }),
            _ => crate::evict::failing_reads::set(sh, p),
        }
        println!("page at {addr:#018x}");
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        // SAFETY: page 2 of the region; must end in `SIGBUS`.
        let b = unsafe { (addr as *const u8).read_volatile() };
        println!("the read returned {b:#x}");
        std::process::exit(0);
    }

    /// Runs refusal case `case` in a child (this test binary, test `name`
    /// only) under a deadline; checks that its read ended in its own
    /// `SIGBUS` handler at the page's address, with the code `codes`
    /// allows, and that the region's log says `why`.
    fn refusal(name: &str, case: &str, codes: &[i32], why: &str) {
        if let Ok(case) = std::env::var("ZMEM_REFUSAL_CHILD") {
            refusal_child(&case);
        }
        let log =
            std::env::temp_dir().join(format!("zmem-refusal-{}-{case}.log", std::process::id()));
        let _ = std::fs::remove_file(&log);
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env("ZMEM_REFUSAL_CHILD", case)
            .env("ZMEM_REFUSAL_LOG", &log)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if t0.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{case}: the child hung on a fault that cannot be served");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if status.code() == Some(77) {
            eprintln!("{}", stderr.trim());
            return;
        }
        let log_text = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        assert_eq!(
            status.code(),
            Some(7),
            "{case}: not the program's SIGBUS handler ({status}):\n{stdout}\n{stderr}"
        );
        let page = stdout
            .lines()
            .find_map(|l| l.split("page at ").nth(1))
            .unwrap_or_else(|| panic!("{case}: no page line in {stdout}"));
        let line = stdout
            .lines()
            .find(|l| l.starts_with("sigbus "))
            .unwrap_or_else(|| panic!("{case}: no SIGBUS line in {stdout}"));
        let code: i32 = line.rsplit("code=").next().unwrap().parse().unwrap();
        assert!(codes.contains(&code), "{case}: si_code {code} ({line})");
        // A signal sent by `tgkill` (a kernel without poison) has no address.
        if code > 0 {
            assert_eq!(line, format!("sigbus addr={page} code=+0{code}"), "{case}");
        }
        assert!(log_text.contains(why), "{case}: the log says {log_text:?}");
        eprintln!("{case}: {line}; log: {}", log_text.trim());
    }

    /// `BUS_ADRERR` (a fault's; Linux 6.18 gives it for a poisoned page
    /// too), `BUS_MCEERR_AR` (a memory error's, which a poisoned page
    /// stands for) and `SI_TKILL` (the signal sent to the thread).
    const BUS_ADRERR: i32 = 2;
    const BUS_MCEERR_AR: i32 = 4;
    const SI_TKILL: i32 = -6;

    /// A page the store cannot read, faulted on the handler thread: the
    /// program's own `SIGBUS` at the page (poisoned, or the thread sent the
    /// signal on a kernel before 6.6), and the log says which page.
    #[test]
    fn an_unreadable_page_is_the_programs_sigbus_on_the_handler_thread() {
        refusal(
            "fault::tests::an_unreadable_page_is_the_programs_sigbus_on_the_handler_thread",
            "handler-thread-read",
            &[BUS_ADRERR, BUS_MCEERR_AR, SI_TKILL],
            "could not be read from the store (page 2 does not decompress: made to fail by a test)",
        );
    }

    /// The same fault served in the faulting thread: the `SIGBUS` the
    /// kernel sent for it goes on to the program's handler, at its address.
    #[test]
    fn an_unreadable_page_is_the_programs_sigbus_in_the_faulting_thread() {
        refusal(
            "fault::tests::an_unreadable_page_is_the_programs_sigbus_in_the_faulting_thread",
            "faulting-thread-read",
            &[BUS_ADRERR],
            "could not be read from the store",
        );
    }

    /// The handler thread panics while serving a fault: the fault it had
    /// read, and every later one, ends in the program's `SIGBUS`; the log
    /// says the handler stopped, and why.
    #[test]
    fn a_fault_after_the_handler_stopped_is_the_programs_sigbus() {
        refusal(
            "fault::tests::a_fault_after_the_handler_stopped_is_the_programs_sigbus",
            "handler-panic",
            &[BUS_ADRERR, BUS_MCEERR_AR, SI_TKILL],
            "the fault handler thread stopped (a test's panic in the fault's service)",
        );
    }
}
