//! `fork` while regions live. A userfaultfd's registration does not reach
//! a child (without `UFFD_FEATURE_EVENT_FORK`, which would hand the child's
//! faults to the parent's handler), so a child's copy of an evicted page
//! would read as zeros. With `pthread_atfork`:
//! - prepare: each region's gate is frozen (the evicting side first, then
//!   the handler), so no page is half-evicted and no store lock is held
//!   when the address space is copied; the registry's lock is held across
//!   the fork, so no region is made or dropped meanwhile;
//! - parent: the gates open again;
//! - child: each region is rebuilt over the child's copy of its memory and
//!   store: the parent's threads are forgotten (they are not in the child),
//!   the inherited userfaultfd (the parent's context) and eventfds are
//!   closed, a new userfaultfd registers the region's segments, and new
//!   threads start. If the child cannot open or register one, every stored
//!   and probation page is written back into the (now ordinary) memory, so
//!   the child still reads its own copy, above the limit.
//!
//! glibc runs these handlers for `fork()` alone. A process copy it does
//! not see (`_Fork()`, glibc's `clone()` without `CLONE_VM`, the raw
//! `clone`, `clone3` and `fork` system calls) gets the same three steps
//! only if whoever makes it calls [`before_fork`], then
//! [`after_fork_parent`] or [`after_fork_child`] around it; `zmem run`'s
//! preload library does so from its interposed `_Fork`, `clone` and
//! `syscall`. Three functions, not one taking a closure that forks: the
//! child of glibc's `clone()` starts on a stack of its own in a function
//! of the caller's, and never returns through the closure. A copy made by
//! a system call no library call is on the way of (a static program's own
//! instruction, as Go's runtime makes them) is not seen at all: its child
//! reads the parent's evicted pages as zeros. A copy that shares the
//! memory (`CLONE_VM`: threads, `vfork`, `posix_spawn`) needs nothing.
//!
//! Owns the registry of live regions and the handlers; the threads are
//! `workers'`. A fork from inside the region's own threads is not
//! supported (they never fork).

use std::cell::UnsafeCell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Once, Weak};

use crate::config::FaultService;
use crate::gate::Side;
use crate::own::OwnCode;
use crate::shared::Shared;
use crate::signal;
use crate::stats::Counters;
use crate::table::{PROBATION, RESIDENT, STORED};
use crate::uffd::{Uffd, UffdMode, UffdOpen};
use crate::workers;

/// The live regions, under a pthread mutex (held from prepare to the
/// parent's or child's handler, which a std guard cannot be).
struct Registry {
    lock: UnsafeCell<libc::pthread_mutex_t>,
    list: UnsafeCell<Vec<Weak<Shared>>>,
}

// SAFETY: `list` is only touched with `lock` held.
unsafe impl Sync for Registry {}

static REGISTRY: Registry = Registry {
    lock: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
    list: UnsafeCell::new(Vec::new()),
};

static INSTALL: Once = Once::new();

fn lock() {
    // SAFETY: a statically initialised pthread mutex.
    unsafe { libc::pthread_mutex_lock(REGISTRY.lock.get()) };
}

fn unlock() {
    // SAFETY: held by this thread (in a child, by the thread that forked,
    // the child's only thread).
    unsafe { libc::pthread_mutex_unlock(REGISTRY.lock.get()) };
}

/// The list; only with the lock held.
#[allow(clippy::mut_from_ref)]
fn list() -> &'static mut Vec<Weak<Shared>> {
    // SAFETY: callers hold the registry lock, so this is the only view.
    unsafe { &mut *REGISTRY.list.get() }
}

/// Adds a region to the registry (installing the handlers once) and runs
/// `start` (which starts its threads) with the registry locked: a fork
/// waits for it, so no thread of the parent holds the region's list of
/// threads at the instant of the fork (the child's rebuild takes it). If
/// `start` fails the region leaves the registry.
pub(crate) fn register<E>(
    sh: &Arc<Shared>,
    start: impl FnOnce() -> Result<(), E>,
) -> Result<(), E> {
    INSTALL.call_once(|| {
        // SAFETY: three `extern "C"` functions that live for the program.
        unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    });
    lock();
    list().push(Arc::downgrade(sh));
    let started = start();
    if started.is_err() {
        remove(sh);
    }
    unlock();
    started
}

/// Takes a region out of the registry and runs `stop` (which stops its
/// threads) with the registry locked, as `register` starts them.
pub(crate) fn unregister(sh: &Shared, stop: impl FnOnce()) {
    lock();
    remove(sh);
    stop();
    unlock();
}

/// Takes a region (and any region dropped) out of the list; with the lock
/// held.
fn remove(sh: &Shared) {
    list().retain(|w| !std::ptr::eq(w.as_ptr(), sh) && w.strong_count() > 0);
}

extern "C" fn prepare() {
    before_fork(|| {});
}

extern "C" fn parent() {
    after_fork_parent();
}

extern "C" fn child() {
    after_fork_child();
}

/// Before a copy of the process that glibc's `fork()` handlers do not see
/// (`_Fork()`, `clone()` or a raw `clone`, `clone3` or `fork` system call
/// without `CLONE_VM`): what the prepare handler does for `fork()`. Every
/// region's evicting side stops, then `touch` runs, then every region's
/// fault service stops, until [`after_fork_parent`] in the parent or
/// [`after_fork_child`] in the child, one of which must follow on this
/// thread (the registry's lock is held meanwhile).
///
/// `touch` reads or writes every page of region memory the forking call
/// itself will write once this returns (glibc's `clone()` writes its
/// function and argument at the top of the child's stack): a page it
/// brings back stays resident until the fault service resumes, so the
/// call never faults on a region with no one to serve the fault. It runs
/// once before anything stops too (where the fault is cheapest), so it
/// must be harmless to repeat. Nothing else of region memory may be
/// touched on this thread until the copy is made.
pub fn before_fork(touch: impl Fn()) {
    touch();
    let _own = OwnCode::enter();
    lock();
    for w in list().iter() {
        if let Some(sh) = w.upgrade() {
            sh.gate.freeze_side(Side::Evict);
        }
    }
    touch();
    for w in list().iter() {
        if let Some(sh) = w.upgrade() {
            sh.gate.freeze_side(Side::Handler);
        }
    }
}

/// In the parent after a copy [`before_fork`] prepared (made or failed):
/// every region runs again.
pub fn after_fork_parent() {
    let _own = OwnCode::enter();
    for w in list().iter() {
        if let Some(sh) = w.upgrade() {
            sh.gate.thaw();
        }
    }
    unlock();
}

/// In the child of a copy [`before_fork`] prepared, before anything else
/// touches region memory: every region is rebuilt over the child's copy
/// (a new userfaultfd and threads, or every stored page written back), as
/// in a `fork()` child. The rebuild allocates and starts threads, as the
/// child handler of `fork()` does; glibc's `fork()` resets its allocator's
/// locks in the child before its handlers run, a copy it does not see
/// does not, so in a child copied while another thread held glibc's
/// allocator lock the rebuild waits for ever.
pub fn after_fork_child() {
    let _own = OwnCode::enter();
    signal::forget_parent_threads();
    for w in list().iter() {
        if let Some(sh) = w.upgrade() {
            rebuild(&sh);
        }
    }
    unlock();
}

/// Rebuilds one region in a forked child.
fn rebuild(sh: &Arc<Shared>) {
    workers::forget_parent_threads(sh);
    workers::close_eventfds(sh);
    let old = sh.uffd_fd.swap(-1, Ordering::AcqRel);
    if old >= 0 {
        Uffd::from_raw(old, sh.uffd_mode).close();
    }
    sh.gate.reset();
    sh.soft_dirty.reopen_in_child();
    let how = match sh.uffd_mode {
        UffdMode::Device => UffdOpen::Device,
        UffdMode::Syscall => UffdOpen::Syscall,
        UffdMode::UserModeOnly => UffdOpen::UserModeOnly,
    };
    let in_thread = sh.config.fault_service == FaultService::FaultingThread;
    let registered = Uffd::open(how, in_thread).ok().and_then(|u| {
        let segs: Vec<_> = sh.read_mapping().segments().to_vec();
        for s in segs {
            if u.register(s.addr, s.len).is_err() {
                u.close();
                return None;
            }
        }
        Some(u)
    });
    match registered {
        Some(u) => {
            sh.uffd_fd.store(u.fd(), Ordering::Release);
            if workers::start(sh).is_err() {
                materialise(sh);
            }
        }
        None => materialise(sh),
    }
    Counters::bump(&sh.counters.fork_reinits);
}

/// Writes every stored and probation page back into the child's memory,
/// which no userfaultfd watches any more.
fn materialise(sh: &Shared) {
    let ps = sh.page_size;
    let mut buf = vec![0u8; ps];
    let map = sh.read_mapping().clone();
    for p in 0..sh.pages() {
        let s = sh.table.state(p);
        let Some(addr) = map.addr_of(p) else { continue };
        let src = match s {
            STORED => {
                if sh.store.read_page(p as u64, &mut buf).is_err() {
                    continue;
                }
                buf.as_ptr()
            }
            PROBATION => sh.probation.slot_ptr(sh.table.stamp(p)),
            _ => continue,
        };
        // SAFETY: `addr` is a page of the region in this process, now
        // ordinary anonymous memory; `src` is one page of ours.
        unsafe { std::ptr::copy_nonoverlapping(src, addr as *mut u8, ps) };
        sh.table.set(p, RESIDENT);
        sh.resident.fetch_add(1, Ordering::Relaxed);
    }
}
