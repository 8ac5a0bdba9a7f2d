//! The fault handler thread: reads the userfaultfd and serves each message.
//!
//! - a fault (missing or write-protect): served by the rule both fault
//!   services share (`fault`); one that must wait (for room under the
//!   limit, for the page's holder) stays blocked in the kernel and waits
//!   in this thread's list;
//! - remove (the program's `madvise(DONTNEED|FREE)`): the pages read as
//!   zeros after, their copies freed; the region's own eviction zaps are
//!   recognised by their exact range (`zaps`) and passed over;
//! - unmap (`munmap`): the pages are gone, their copies freed;
//! - remap (`mremap`): the moved pages' addresses follow.
//!
//! A batch's events are served before its faults, with the events lock
//! held for writing from the read to the last event (`Shared::events`);
//! the faults come after, without it. A fault and a drop of the same page
//! in one batch were concurrent in the program, and the page reading as
//! dropped is one of their two orders; an evicting thread whose zap the
//! batch read waits for the lock, so it no longer waits for the batch's
//! faults (BENCHMARKS.md, "`zmem run` against the kernel's zram", where
//! the evictor's time goes).
//!
//! A fault that cannot be served now (`EAGAIN`: an event is still unread;
//! another thread holds the page) waits in a fixed list and is tried again
//! after the next read; one that has waited past `stuck_after` is reported
//! once (`watchdog`). One that can never be served (the store cannot read
//! the page) becomes the program's own `SIGBUS`, as does every fault after
//! a panic of this thread, which the region's log reports (`report_log`).
//!
//! When one thread sends most faults, the handler runs on that thread's
//! CPU (`follow`) and sleeps in `ppoll` as soon as it has served them.
//! Otherwise, after a message it polls the descriptor without sleeping for
//! `RegionConfig::poll_window` (by default twice what waking a sleeping
//! thread costs on the machine, `wake_cost`) before it sleeps again: in a
//! burst, the next fault finds it awake.
//!
//! Owns the thread's loop and its preallocated memory (a message array, a
//! list of waiting faults, one locked page buffer); never allocates while
//! serving (the store's own read is the only allocation, and lz4 and lzo
//! decode without one). Takes the events lock for writing over each batch
//! it reads until its events are served (`Shared::events`), the mapping's
//! lock (written only by this thread) and, through the store, the
//! store's.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::buf::{lock_memory, lock_stack, LockedBuf};
use crate::evict::drop_page;
use crate::fault::{self, Missing, Outcome, Service};
use crate::follow::Follow;
use crate::gate::Side;
use crate::report_log;
use crate::shared::{drain, kick, Shared};
use crate::stats::Counters;
use crate::table::{EVICTING, GONE, UNTOUCHED};
use crate::uffd::{
    Msg, Uffd, EVENT_PAGEFAULT, EVENT_REMAP, EVENT_REMOVE, EVENT_UNMAP, FLAG_WP, FLAG_WRITE,
};
use crate::watchdog;

/// Faults that can wait at once (more than the threads of most programs;
/// beyond it a fault is woken to fault again).
const WAITING: usize = 1024;

/// A fault put off: its address, when it first arrived, its kind and its
/// thread.
#[derive(Clone, Copy, Default)]
struct Waiting {
    addr: usize,
    since: u64,
    write: bool,
    tid: u32,
    /// Whether the watchdog has reported it.
    reported: bool,
}

/// The handler's own memory.
struct Handler {
    sh: Arc<Shared>,
    buf: LockedBuf,
    msgs: [Msg; 64],
    waiting: [Waiting; WAITING],
    nwaiting: usize,
    /// The waiting faults being tried again (a copy of the first `n`).
    retrying: [Waiting; WAITING],
    follow: Follow,
    /// Inside the fork gate (left after a panic, or a fork would wait for
    /// this thread forever).
    in_gate: bool,
}

/// The thread's body.
pub(crate) fn run(sh: Arc<Shared>) {
    // The handler's own state (about 50 KiB of fixed arrays) is boxed
    // below; the stack holds only the call frames of serving a fault.
    lock_stack(64 * 1024);
    // Short waits mean short: the default timer slack (50 µs) would stretch
    // a 20 µs wait for room fourfold.
    // SAFETY: sets this thread's timer slack to 1 µs.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
    // Faults served in their own threads never reach this one: nothing
    // to follow.
    let follows = sh.config.handler_follows
        && sh.config.fault_service == crate::config::FaultService::HandlerThread;
    let follow = Follow::new(follows, 0, &sh.follow);
    let buf = match LockedBuf::new(sh.page_size) {
        Ok(b) => b,
        Err(_) => return,
    };
    let mut h = Box::new(Handler {
        sh,
        buf,
        msgs: [Msg::default(); 64],
        waiting: [Waiting::default(); WAITING],
        nwaiting: 0,
        retrying: [Waiting::default(); WAITING],
        follow,
        in_gate: false,
    });
    lock_memory(&*h);
    // A panic here is a bug; it must not leave the program's faults
    // asleep in the kernel with nobody to serve them.
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.main()));
    if let Err(panic) = ran {
        h.stopped(&*panic);
    }
}

/// Sleeps in `ppoll` until the userfaultfd `uffd` has a message or the
/// eventfd `efd` is kicked, at most `timeout` (null: no limit); whether
/// each is ready.
fn sleep_on(uffd: libc::c_int, efd: libc::c_int, timeout: *const libc::timespec) -> (bool, bool) {
    let mut fds = [uffd, efd].map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    // SAFETY: two valid pollfd entries, a valid or null timeout, no signal
    // mask.
    unsafe { libc::ppoll(fds.as_mut_ptr(), 2, timeout, std::ptr::null()) };
    (fds[0].revents != 0, fds[1].revents != 0)
}

/// Turns the fault of thread `tid` at page address `addr` into the
/// program's own `SIGBUS`. The page is poisoned (Linux 6.6 and later): the
/// woken access runs again and takes a `SIGBUS` at that address, until
/// the program drops the page. On an older kernel the thread is sent `SIGBUS`, which
/// ends its wait in the kernel; the program's handler or the default
/// action takes it.
fn refuse(sh: &Shared, addr: usize, tid: u32) {
    match sh.uffd().poison(addr, sh.page_size) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) && !Uffd::poisons() => {
            // SAFETY: sends a signal to one thread of this process; no
            // memory is passed.
            unsafe {
                libc::syscall(
                    libc::SYS_tgkill,
                    libc::getpid(),
                    tid as libc::pid_t,
                    libc::SIGBUS,
                )
            };
        }
        // Mapped meanwhile (`EEXIST`), or the mapping is changing: the
        // access runs again and faults again if it must.
        Err(_) => {
            let _ = sh.uffd().wake(addr, sh.page_size);
        }
    }
}

impl Handler {
    fn now_ns(&self) -> u64 {
        fault::now_ns(&self.sh)
    }

    fn main(&mut self) {
        let efd = self.sh.handler_efd.load(Ordering::Acquire);
        loop {
            let uffd = self.sh.uffd();
            // Waiting faults are tried again after 20 µs, or as soon as the
            // evictor makes room (it kicks the eventfd) or a message comes.
            let wait = libc::timespec {
                tv_sec: 0,
                tv_nsec: 20_000,
            };
            // On a followed CPU it looks again once the CPU would count as
            // quiet.
            let quiet = self
                .follow
                .sleep_ns(self.now_ns())
                .map(|ns| libc::timespec {
                    tv_sec: (ns / 1_000_000_000) as libc::time_t,
                    tv_nsec: (ns % 1_000_000_000) as libc::c_long,
                });
            let timeout = if self.nwaiting > 0 {
                &wait as *const libc::timespec
            } else if let Some(q) = quiet.as_ref() {
                q as *const libc::timespec
            } else {
                std::ptr::null()
            };
            let (messages, kicked) = sleep_on(uffd.fd(), efd, timeout);
            if self.sh.stop_handler.load(Ordering::Acquire) {
                return;
            }
            if kicked {
                drain(efd);
            }
            self.sh.gate.enter(Side::Handler);
            self.in_gate = true;
            let served = self.read_all(!messages);
            self.retry();
            self.sh
                .handler_waiting
                .store(self.nwaiting as u32, Ordering::Relaxed);
            self.in_gate = false;
            self.sh.gate.leave(Side::Handler);
            let was_pinned = self.follow.pinned();
            let (moves, contended) = (self.follow.moves(), self.follow.contended());
            self.follow.tick(self.now_ns(), &self.sh.follow);
            if self.follow.pinned() && !was_pinned {
                // The evictor watches a pinned handler: it must wake to
                // start (it may be asleep until its next scan).
                kick(&self.sh.evictor_efd);
            }
            // Published when a tick changed them (rarely: a move, a
            // contended period).
            let c = &self.sh.counters;
            if self.follow.moves() != moves {
                c.handler_moves
                    .store(self.follow.moves(), Ordering::Relaxed);
            }
            if self.follow.contended() != contended {
                c.handler_contended
                    .store(self.follow.contended(), Ordering::Relaxed);
            }
            if served > 0 && !self.poll() {
                return;
            }
        }
    }

    /// Polls the descriptor (without sleeping) until `poll_ns` has
    /// passed since the last message, serving what comes. A thread asleep
    /// in `ppoll` costs the next fault a wake-up of the handler's CPU,
    /// which on a virtual machine whose idle CPUs halt is a VM exit and an
    /// interrupt (BENCHMARKS.md, "A region's faults and cold policy", the
    /// handler's poll). Not while faults wait for room: the evictor
    /// needs the CPU then; nor on a followed thread's CPU, which the
    /// thread needs. False when the region is stopping.
    fn poll(&mut self) -> bool {
        // Zero when faults are served in their own threads (only events
        // come here: nothing to be quick for).
        let window = if self.follow.pinned() {
            0
        } else {
            self.sh.poll_ns
        };
        if window == 0 {
            return true;
        }
        // The clock is read every few looks, not at each: in a guest whose
        // clock is an emulated device each read costs microseconds.
        let mut last = self.now_ns();
        let mut now = last;
        let mut looks = 0u32;
        while self.nwaiting == 0 && now.saturating_sub(last) < window {
            if self.sh.stop_handler.load(Ordering::Acquire) {
                return false;
            }
            std::hint::spin_loop();
            self.sh.gate.enter(Side::Handler);
            let n = self.read_all(true);
            self.sh.gate.leave(Side::Handler);
            looks += 1;
            if n > 0 {
                last = self.now_ns();
                now = last;
            } else if looks % 8 == 0 {
                now = self.now_ns();
            }
        }
        true
    }

    /// Reads and serves every message there is; returns how many.
    /// `look_first`: whether to check that one is waiting before the first
    /// read (not right after a `ppoll` that woke for the descriptor).
    fn read_all(&mut self, look_first: bool) -> usize {
        let uffd = self.sh.uffd();
        let sh = Arc::clone(&self.sh);
        let mut total = 0;
        let mut look = look_first;
        loop {
            // Looked at before the lock (but after a `ppoll` that said so):
            // while it polls, the handler would otherwise take the lock for
            // writing a million times a second and hold off the threads
            // that wait to read it.
            if look && !uffd.readable() {
                return total;
            }
            look = true;
            // A batch's events are read and served before another thread
            // brings a page back (`Shared::events`); its faults after.
            let batch = sh.events.write().unwrap_or_else(|e| e.into_inner());
            self.sh.follow.woke();
            let n = match uffd.read(&mut self.msgs) {
                Ok(n) => n,
                Err(_) => return total,
            };
            if n == 0 {
                return total;
            }
            total += n;
            // One clock read for the batch: its faults' start, and the
            // follower's busy mark (both on the region's clock).
            let start = fault::now_ns(&self.sh);
            self.sh.follow.busy(start);
            for i in 0..n {
                let m = self.msgs[i];
                if m.event != EVENT_PAGEFAULT {
                    self.serve_event(m);
                }
            }
            // The lock goes before the faults: an evicting thread whose zap
            // this batch read waits for the lock, not for the faults.
            drop(batch);
            for i in 0..n {
                let m = self.msgs[i];
                if m.event == EVENT_PAGEFAULT {
                    self.serve_fault(m, start);
                }
            }
            self.sh.follow.done();
        }
    }

    /// A page fault message (`start`: when its batch was read).
    fn serve_fault(&mut self, m: Msg, start: u64) {
        let sh = &self.sh;
        let ps = sh.page_size;
        let addr = (m.arg[1] as usize) & !(ps - 1);
        self.follow.fault(m.arg[2] as u32, start);
        if m.arg[0] & FLAG_WP != 0 {
            Counters::bump(&sh.counters.wp);
            self.write_protect_fault(addr);
        } else {
            let fault = Waiting {
                addr,
                since: start,
                write: m.arg[0] & FLAG_WRITE != 0,
                tid: m.arg[2] as u32,
                reported: false,
            };
            self.missing(fault, true);
        }
    }

    /// An event message: a drop, an unmap or a move of the program's.
    fn serve_event(&mut self, m: Msg) {
        let sh = &self.sh;
        let ps = sh.page_size;
        match m.event {
            EVENT_REMOVE | EVENT_UNMAP => {
                let (start_a, end_a) = (m.arg[0] as usize, m.arg[1] as usize);
                let map = sh.read_mapping();
                if m.event == EVENT_REMOVE {
                    if let Some(p) = map.page_of(start_a) {
                        if sh.zaps.take(p, end_a.saturating_sub(start_a) / ps) {
                            // The region's own eviction (a page or a run).
                            return;
                        }
                    }
                }
                let to = if m.event == EVENT_UNMAP {
                    GONE
                } else {
                    UNTOUCHED
                };
                let mut a = start_a;
                while a < end_a {
                    if let Some(p) = map.page_of(a) {
                        if drop_page(sh, p, to) {
                            Counters::bump(&sh.counters.removed_by_program);
                        }
                    }
                    a += ps;
                }
                drop(map);
                if m.event == EVENT_UNMAP {
                    let mut map = sh.write_mapping();
                    map.cut(start_a, end_a);
                }
            }
            EVENT_REMAP => {
                let (from, to, len) = (m.arg[0] as usize, m.arg[1] as usize, m.arg[2] as usize);
                sh.write_mapping().remap(from, to, len);
                Counters::bump(&sh.counters.remaps);
            }
            _ => {}
        }
    }

    /// A write to a write-protected page (the rule: `fault`).
    fn write_protect_fault(&mut self, addr: usize) {
        let sh = &self.sh;
        let ps = sh.page_size;
        let page = sh.read_mapping().page_of(addr);
        let outcome = match page {
            Some(p) => fault::write_protected(sh, p, addr, Service::HandlerThread),
            None => Outcome::Turn,
        };
        if outcome == Outcome::Turn {
            // The writer faults again, and its fault comes back as a
            // message.
            let _ = sh.uffd().wake(addr, ps);
        }
    }

    /// A missing fault (`first`: seen now, not a retry).
    fn missing(&mut self, f: Waiting, first: bool) {
        let Waiting {
            addr, since, write, ..
        } = f;
        let sh = Arc::clone(&self.sh);
        let ps = sh.page_size;
        let page = sh.read_mapping().page_of(addr);
        let Some(p) = page else {
            // Not one of the region's pages (the program grew the mapping).
            // Counted first: the zero page wakes the faulting thread, which
            // may read the counters at once.
            Counters::bump(&sh.counters.missing_foreign);
            let uffd = sh.uffd();
            if uffd.zeropage(addr, ps).is_err() {
                let _ = uffd.wake(addr, ps);
            }
            return;
        };
        // Only a page held `EVICTING` asks whose fault it is.
        let holders_copy = sh.table.state(p) == EVICTING && sh.copies.by(f.tid);
        let m = Missing {
            page: p,
            addr,
            write,
            since,
            first,
            holders_copy,
        };
        match fault::missing(&sh, m, self.buf.bytes(), Service::HandlerThread) {
            Outcome::Served | Outcome::LeftToHolder => {}
            // Tried again after the next read, or when the evictor makes
            // room (it kicks the handler's eventfd).
            Outcome::Turn | Outcome::Room { .. } => self.put_off(f),
            Outcome::Refused => refuse(&sh, addr, f.tid),
        }
    }

    /// After a panic in `main` (`panic`: its payload): the region can no
    /// longer be served, and says so once in its log; from then on every
    /// fault is refused (`refuse`) and every event read (an unread event
    /// holds the program's `madvise`, `munmap` or `mremap`), until the
    /// region stops.
    fn stopped(&mut self, panic: &(dyn std::any::Any + Send)) {
        if self.in_gate {
            self.in_gate = false;
            self.sh.gate.leave(Side::Handler);
        }
        let why = panic
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("a panic");
        report_log::handler_stopped(&self.sh, why);
        let sh = Arc::clone(&self.sh);
        // The faults read before the panic sleep in the kernel: woken, they
        // fault again and come back as messages.
        let uffd = sh.uffd();
        for seg in sh.read_mapping().segments() {
            let _ = uffd.wake(seg.addr, seg.len);
        }
        let efd = sh.handler_efd.load(Ordering::Acquire);
        loop {
            let (_, kicked) = sleep_on(uffd.fd(), efd, std::ptr::null());
            if sh.stop_handler.load(Ordering::Acquire) {
                return;
            }
            if kicked {
                drain(efd);
            }
            let n = uffd.read(&mut self.msgs).unwrap_or(0);
            for m in &self.msgs[..n] {
                if m.event == EVENT_PAGEFAULT {
                    Counters::bump(&sh.counters.refused);
                    refuse(
                        &sh,
                        (m.arg[1] as usize) & !(sh.page_size - 1),
                        m.arg[2] as u32,
                    );
                }
            }
        }
    }

    /// Keeps fault `f` in the list of waiting faults (counted by `fault`).
    fn put_off(&mut self, f: Waiting) {
        if self.nwaiting == WAITING {
            // No room: the thread faults again and comes back as a message.
            let _ = self.sh.uffd().wake(f.addr, self.sh.page_size);
            return;
        }
        self.waiting[self.nwaiting] = f;
        self.nwaiting += 1;
    }

    /// Tries the waiting faults again (each keeps its first arrival time,
    /// so its latency counts the wait).
    fn retry(&mut self) {
        let n = self.nwaiting;
        if n == 0 {
            return;
        }
        self.retrying[..n].copy_from_slice(&self.waiting[..n]);
        self.nwaiting = 0;
        let now = self.now_ns();
        for k in 0..n {
            let mut w = self.retrying[k];
            if !w.reported && watchdog::overdue(&self.sh, w.since, now) {
                let page = self.sh.read_mapping().page_of(w.addr);
                watchdog::report(&self.sh, w.addr, page, w.since, now, n);
                w.reported = true;
            }
            self.missing(w, false);
        }
    }
}
