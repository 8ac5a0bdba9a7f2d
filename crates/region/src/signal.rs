//! Faults served in the faulting thread ([`FaultService::FaultingThread`]):
//! the userfaultfd is opened with `UFFD_FEATURE_SIGBUS`, so the kernel
//! sends a fault to the thread that took it as `SIGBUS` instead of a
//! message, and this module's signal handler brings the page back right
//! there (`evict::bring_in`: decompress, `UFFDIO_COPY`). A fault then costs
//! no thread switch and no cross-CPU wake-up; the handler thread still
//! reads the events (remove, unmap, remap).
//!
//! The signal handler is process-wide and installed once. It finds the
//! region an address belongs to in a fixed table of the regions served
//! this way; a `SIGBUS` at any other address goes to the handler that was
//! there before (or the default action). A region leaves the table before
//! it is torn down and waits until no thread is still inside the signal
//! handler with it (a count per table entry).
//!
//! What a fault waits for, and when it is served over the limit, is the
//! rule both services share (`fault`); here a fault that must wait for
//! the page's holder, or for an event not yet read, yields and faults
//! again, and one that must wait for room under the limit kicks the
//! evictor and sleeps on a futex until it makes room (its wait counted
//! across its faults). The service enters the fork gate's
//! fault side, so a fork never copies a page half brought back, and never
//! waits inside it: a fork waits for it to leave, and what it waits for
//! (the handler thread reading an event, the evictor) may be frozen.
//! A page a growing `mremap` added, which no region's mapping holds, gets
//! the zero page, as on the handler thread.
//!
//! Owns the table, its in-flight counts and the `SIGBUS` disposition.
//! Serves only faults (`BUS_ADRERR`); a `SIGBUS` sent by `kill` goes to the
//! previous disposition. A store fault with lz4 or lzo allocates nothing
//! (the page buffer is on the faulting thread's stack, about 20 KiB of it
//! with the frames); a slot freed inline (the discards ring full) or a
//! stateful decoder (zstd) may, which is sound as long as the program did
//! not fault inside the allocator. Makes only async-signal-safe system
//! calls and keeps `errno`.
//!
//! [`FaultService::FaultingThread`]: crate::FaultService::FaultingThread

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Once};

use crate::error::RegionError;
use crate::fault::{self, Missing, Outcome, Service};
use crate::gate::Side;
use crate::shared::{wait_for_room, Shared};
use crate::stats::Counters;

/// Regions served in their faulting threads at once.
const ENTRIES: usize = 64;

/// The largest page the signal handler brings back (its buffer is on the
/// faulting thread's stack).
pub(crate) const MAX_PAGE: usize = 16384;

/// The regions in the table (null: a free entry).
static REGIONS: [AtomicPtr<Shared>; ENTRIES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; ENTRIES];

/// Threads inside the signal handler with each entry's region.
static IN_FLIGHT: [AtomicUsize; ENTRIES] = [const { AtomicUsize::new(0) }; ENTRIES];

/// The `SIGBUS` action before ours, for addresses that are no region's.
struct Previous(UnsafeCell<libc::sigaction>);

// SAFETY: written once, inside `INSTALL`, before any region is in the
// table (so before the signal handler reads it); read-only after.
unsafe impl Sync for Previous {}

static PREVIOUS: Previous = Previous(UnsafeCell::new(
    // SAFETY: `sigaction` is plain data; all zeros is `SIG_DFL`, no flags.
    unsafe { std::mem::zeroed() },
));

static INSTALL: Once = Once::new();

/// 0 once the handler is installed, else the errno of `sigaction`.
static INSTALLED: AtomicI32 = AtomicI32::new(-1);

/// Installs the process's `SIGBUS` handler (once).
fn install() -> Result<(), RegionError> {
    INSTALL.call_once(|| {
        // SAFETY: an all-zero `sigaction` is valid; it is filled in below.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_sigbus as *const () as usize;
        // Every other signal is held off while a page is brought back: a
        // signal handler of the program that touched the region now would
        // fault with `SIGBUS` blocked, which kills the process.
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        // SAFETY: `sa_mask` is a valid signal set of `sa`; `PREVIOUS` is
        // written here only, before any region can be looked up.
        let rc = unsafe {
            libc::sigfillset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGBUS, &sa, PREVIOUS.0.get())
        };
        let errno = if rc == 0 {
            0
        } else {
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL)
        };
        INSTALLED.store(errno, Ordering::Release);
    });
    match INSTALLED.load(Ordering::Acquire) {
        0 => Ok(()),
        errno => Err(RegionError::Os {
            what: "sigaction(SIGBUS)",
            err: std::io::Error::from_raw_os_error(errno),
        }),
    }
}

/// Puts `sh` in the table (installing the signal handler first).
pub(crate) fn register(sh: &Arc<Shared>) -> Result<(), RegionError> {
    install()?;
    let ptr = Arc::as_ptr(sh).cast_mut();
    for entry in &REGIONS {
        if entry
            .compare_exchange(
                std::ptr::null_mut(),
                ptr,
                Ordering::SeqCst,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            return Ok(());
        }
    }
    Err(RegionError::Os {
        what: "serving faults in the faulting thread (64 such regions at most)",
        err: std::io::Error::from_raw_os_error(libc::ENFILE),
    })
}

/// Takes `sh` out of the table and waits until no thread is inside the
/// signal handler with it. No-op for a region not in the table.
pub(crate) fn unregister(sh: &Shared) {
    let ptr = (sh as *const Shared).cast_mut();
    for (i, entry) in REGIONS.iter().enumerate() {
        if entry
            .compare_exchange(
                ptr,
                std::ptr::null_mut(),
                Ordering::SeqCst,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            while IN_FLIGHT[i].load(Ordering::SeqCst) != 0 {
                std::thread::yield_now();
            }
        }
    }
}

/// In a forked child (one thread, not inside the signal handler): the
/// in-flight counts of the parent's other threads are not the child's.
pub(crate) fn forget_parent_threads() {
    for n in &IN_FLIGHT {
        n.store(0, Ordering::SeqCst);
    }
}

/// What the page fault behind a `SIGBUS` was.
#[derive(Clone, Copy)]
struct Fault {
    /// A write.
    write: bool,
    /// On a present page (write-protected by an eviction), not a missing
    /// one.
    present: bool,
}

/// The page fault behind this signal's context.
fn fault_of(ctx: *mut libc::c_void) -> Fault {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the kernel passes a `ucontext_t` to an `SA_SIGINFO`
        // handler; on x86-64 its `REG_ERR` is the page fault's error code:
        // bit 0 set for a present page, bit 1 for a write.
        let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
        let err = uc.uc_mcontext.gregs[libc::REG_ERR as usize];
        Fault {
            write: err & 2 != 0,
            present: err & 1 != 0,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // Unknown: served as a read of a missing page (a write-protected
        // page is then found mapped, and the write runs again until its
        // eviction has dropped it; a zero page is write-faulted by the
        // kernel afterwards).
        let _ = ctx;
        Fault {
            write: false,
            present: false,
        }
    }
}

/// `BUS_ADRERR`: the `si_code` of a `SIGBUS` from a fault (a
/// userfaultfd's among them).
const BUS_ADRERR: libc::c_int = 2;

/// The process's `SIGBUS` handler.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the calling thread's errno, kept across the handler.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid `siginfo_t`; for a fault
    // (`BUS_ADRERR`) its address field is the faulting address (for a
    // signal sent by `kill`, the same bytes are the sender's pid and uid).
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // A fault the region refuses (its page cannot be read) is the
    // program's own `SIGBUS`, passed on as it came: at its address.
    if code != BUS_ADRERR || serve_any(addr, ctx) != Answer::Served {
        pass_on(sig, info, ctx);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

thread_local! {
    /// The fault this thread is waiting to have served (page address) and
    /// since when (ns of `EPOCH`): a wait happens outside the fork gate,
    /// by returning and faulting again, and keeps its start across the
    /// faults. A const-initialised `Cell`: no allocation, no destructor.
    static WAITING: std::cell::Cell<(usize, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// What a fault needs before it can be served.
enum Wait {
    /// Nothing: served (or not the region's to serve).
    No,
    /// Another thread holds the page, or an event is still to be read.
    Turn,
    /// Room under the limit: the `room` futex word as seen, and how long
    /// at most.
    Room(u32, u64),
    /// Never: the page cannot be brought back (`Outcome::Refused`).
    Refused,
}

/// What became of a fault.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Served, or to be tried again: the instruction runs again.
    Served,
    /// A region's, refused: the program's own `SIGBUS`.
    Refused,
    /// No region's.
    NotOurs,
}

/// Serves `addr` if a region in the table holds it.
fn serve_any(addr: usize, ctx: *mut libc::c_void) -> Answer {
    let mut answer = Answer::NotOurs;
    any_region(|sh| {
        answer = serve(sh, addr, ctx);
        answer != Answer::NotOurs
    });
    if answer == Answer::NotOurs && any_region(|sh| grown(sh, addr)) {
        answer = Answer::Served;
    }
    answer
}

/// Calls `f` on each region in the table, in turn, until it returns true;
/// whether one did. Each region is counted in flight around the call:
/// `unregister` clears the entry and then waits for the count, so a region
/// seen here stays alive until the count drops.
fn any_region(mut f: impl FnMut(&Shared) -> bool) -> bool {
    for (i, entry) in REGIONS.iter().enumerate() {
        let ptr = entry.load(Ordering::Acquire);
        if ptr.is_null() {
            continue;
        }
        IN_FLIGHT[i].fetch_add(1, Ordering::SeqCst);
        // Checked again after counting (see above).
        let done = entry.load(Ordering::SeqCst) == ptr && {
            // SAFETY: in the table and counted in flight: `unregister` has
            // not returned, so the region (and its `Shared`) is alive.
            f(unsafe { &*ptr })
        };
        IN_FLIGHT[i].fetch_sub(1, Ordering::SeqCst);
        if done {
            return true;
        }
    }
    false
}

/// Serves a fault at `addr` if region `sh` holds the page.
fn serve(sh: &Shared, addr: usize, ctx: *mut libc::c_void) -> Answer {
    // The gate before any lock (a fork copies no lock held here), and
    // every wait after it (a fork waits for this thread to leave, and what
    // it waits for may be frozen meanwhile).
    sh.gate.enter(Side::Handler);
    // After the batch the handler is serving: an `mremap` returns once its
    // event is read, and a fault at the new address must find the mapping
    // moved.
    let batch = sh.events.read().unwrap_or_else(|e| e.into_inner());
    let page = sh.read_mapping().page_of(addr);
    drop(batch);
    let wait = match page {
        Some(p) => {
            let ps = sh.page_size;
            let f = fault_of(ctx);
            if f.present {
                write_protected(sh, p, addr & !(ps - 1))
            } else {
                missing(sh, p, addr & !(ps - 1), f.write)
            }
        }
        None => Wait::No,
    };
    sh.gate.leave(Side::Handler);
    match wait {
        Wait::No => {}
        Wait::Turn => std::thread::yield_now(),
        Wait::Room(seen, ns) => wait_for_room(sh, seen, ns),
        Wait::Refused => return Answer::Refused,
    }
    if page.is_some() {
        Answer::Served
    } else {
        Answer::NotOurs
    }
}

/// A page no region's mapping holds, in a range registered with one of
/// their userfaultfds: what a growing `mremap` of a region adds. It is the
/// program's: the zero page, as on the handler thread.
fn grown(sh: &Shared, addr: usize) -> bool {
    let ps = sh.page_size;
    match sh.uffd().zeropage(addr & !(ps - 1), ps) {
        Ok(()) => {
            Counters::bump(&sh.counters.missing_foreign);
            true
        }
        // Mapped meanwhile, or the mapping is changing: fault again.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EEXIST | libc::EAGAIN)) => true,
        // Not registered with this region's descriptor.
        Err(_) => false,
    }
}

/// A `SIGBUS` that is no region's: to the handler that was there before.
/// If that was to ignore it, a signal sent by another process (`si_code`
/// <= 0) is dropped; if it was the default action, that action is put back
/// and takes the signal: a fault's by running the instruction again, a
/// sent one by raising it again (delivered when this handler returns).
/// (A fault's `SIGBUS` cannot be ignored: the kernel kills.)
fn pass_on(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: read-only after installation (see `Previous`).
    let prev = unsafe { &*PREVIOUS.0.get() };
    // SAFETY: a valid `siginfo_t`, as in `on_sigbus`.
    let sent = unsafe { (*info).si_code } <= 0;
    let h = prev.sa_sigaction;
    if h == libc::SIG_IGN && sent {
        return;
    }
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // SAFETY: restores the saved action; `raise` is async-signal-safe.
        unsafe {
            libc::sigaction(libc::SIGBUS, prev, std::ptr::null_mut());
            if sent {
                libc::raise(libc::SIGBUS);
            }
        }
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler, installed with `SA_SIGINFO`, takes
        // these three arguments.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the previous handler, installed without `SA_SIGINFO`,
        // takes the signal number.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

/// A write to page `p` (at page address `addr`) while it is
/// write-protected (the rule: `fault`).
fn write_protected(sh: &Shared, p: usize, addr: usize) -> Wait {
    let now = fault::now_ns(sh);
    let waiting = waiting_since(addr, now);
    if waiting.is_none() {
        // Counted once per write, not per time it runs again.
        Counters::bump(&sh.counters.wp);
    }
    match fault::write_protected(sh, p, addr, Service::FaultingThread) {
        Outcome::Served => done(),
        _ => wait(addr, waiting.unwrap_or(now), Wait::Turn),
    }
}

/// Brings missing page `p` (at page address `addr`) back in the calling
/// thread (the rule: `fault`).
fn missing(sh: &Shared, p: usize, addr: usize, write: bool) -> Wait {
    // The wait's start, kept across the faults of one wait.
    let now = fault::now_ns(sh);
    let waiting = waiting_since(addr, now);
    let since = waiting.unwrap_or(now);
    let mut buf = [0u8; MAX_PAGE];
    let f = Missing {
        page: p,
        addr,
        write,
        since,
        first: waiting.is_none(),
        // Never an evicting thread's copy: a kernel access of a page not
        // mapped fails (`EFAULT`) in this mode instead of faulting here.
        holders_copy: false,
    };
    match fault::missing(sh, f, &mut buf[..sh.page_size], Service::FaultingThread) {
        Outcome::Served | Outcome::LeftToHolder => done(),
        // Another thread holds the page, or an event is still to be read:
        // the instruction faults again, outside the gate meanwhile.
        Outcome::Turn => wait(addr, since, Wait::Turn),
        Outcome::Room { seen, ns } => wait(addr, since, Wait::Room(seen, ns)),
        Outcome::Refused => {
            done();
            Wait::Refused
        }
    }
}

/// When the fault at `addr` began waiting, if this thread's last fault was
/// there and waited. (An entry left by a fault that another thread served
/// meanwhile, its instruction run again without a fault, is stale after
/// 100 ms.)
fn waiting_since(addr: usize, now: u64) -> Option<u64> {
    let (was, since) = WAITING.with(|w| w.get());
    (was == addr && now.saturating_sub(since) < 100_000_000).then_some(since)
}

/// Remembers that the fault at `addr`, first seen at `start`, waits.
fn wait(addr: usize, start: u64, w: Wait) -> Wait {
    WAITING.with(|c| c.set((addr, start)));
    w
}

/// The fault is served (or needs no service): no wait to remember.
fn done() -> Wait {
    WAITING.with(|c| c.set((0, 0)));
    Wait::No
}
