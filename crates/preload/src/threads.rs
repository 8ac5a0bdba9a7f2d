//! The program's threads, counted, so the region's own threads never keep
//! a process alive: glibc ends a process with `exit(0)` when its last
//! thread ends (a `main` that called `pthread_exit`, or a forked child
//! whose one thread, forked from a thread that was not the main one,
//! returns), and the region's fault and eviction threads would otherwise
//! be that last thread forever.
//!
//! Owns the interposed `pthread_create` and the count: each thread the
//! program makes (not the region's, which are made in its own code) and
//! the main thread carry a thread-specific value whose destructor, run
//! however the thread ends, takes it off the count; the last one calls
//! `exit(0)`, as glibc would. A forked child starts again at one (the
//! thread that forked).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use libc::{c_int, c_void, pthread_attr_t, pthread_t};

/// The program's threads alive now.
static LIVE: AtomicUsize = AtomicUsize::new(1);
/// Whether the count is kept (a region runs in this process).
static ON: AtomicBool = AtomicBool::new(false);
/// The thread-specific key whose destructor counts a thread out.
static KEY: AtomicU32 = AtomicU32::new(0);
/// glibc's `pthread_create`.
static REAL: AtomicUsize = AtomicUsize::new(0);

type Start = extern "C" fn(*mut c_void) -> *mut c_void;
type Create =
    unsafe extern "C" fn(*mut pthread_t, *const pthread_attr_t, Start, *mut c_void) -> c_int;

/// glibc's `pthread_create`, looked up on first use (`None` if absent).
fn real() -> Option<Create> {
    let mut f = REAL.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: a NUL-terminated name; RTLD_NEXT finds the definition
        // after this library's.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_create".as_ptr()) } as usize;
        REAL.store(f, Ordering::Release);
    }
    // SAFETY: glibc's pthread_create, found by dlsym, has this type.
    (f != 0).then(|| unsafe { std::mem::transmute::<usize, Create>(f) })
}

/// Starts counting, the calling (main) thread as the one alive.
pub fn start() {
    if real().is_none() {
        return;
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: a key with a destructor that lives for the program.
    if unsafe { libc::pthread_key_create(&mut key, Some(leaves)) } != 0 {
        return;
    }
    KEY.store(key, Ordering::Release);
    mark();
    ON.store(true, Ordering::Release);
}

/// In a forked child: the thread that forked is the only one.
pub fn after_fork_child() {
    LIVE.store(1, Ordering::Release);
}

/// Whether the calling thread is the program's last one (the count is
/// kept, and it is one).
pub fn last() -> bool {
    ON.load(Ordering::Acquire) && LIVE.load(Ordering::Acquire) == 1
}

/// Gives the calling thread the value whose destructor counts it out.
fn mark() {
    // SAFETY: a key made by `start`; any non-null value.
    unsafe {
        libc::pthread_setspecific(KEY.load(Ordering::Acquire), std::ptr::dangling::<c_void>())
    };
}

/// Runs as a counted thread ends.
extern "C" fn leaves(_: *mut c_void) {
    if LIVE.fetch_sub(1, Ordering::AcqRel) == 1 {
        // The last of the program's threads: what glibc does then.
        // SAFETY: exit runs the exit handlers and ends the process.
        unsafe { libc::exit(0) };
    }
}

/// What a counted thread starts with.
struct Launch {
    start: Start,
    arg: *mut c_void,
}

extern "C" fn launch(p: *mut c_void) -> *mut c_void {
    // SAFETY: made by `pthread_create` below for this thread alone.
    let l = unsafe { Box::from_raw(p.cast::<Launch>()) };
    mark();
    (l.start)(l.arg)
}

/// # Safety
/// As pthread_create(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut pthread_t,
    attr: *const pthread_attr_t,
    start: Start,
    arg: *mut c_void,
) -> c_int {
    let Some(real) = real() else {
        return libc::EAGAIN;
    };
    if !ON.load(Ordering::Acquire) || region::in_own_code() {
        // SAFETY: the caller's request, as pthread_create(3).
        return unsafe { real(thread, attr, start, arg) };
    }
    let l = Box::into_raw(Box::new(Launch { start, arg }));
    LIVE.fetch_add(1, Ordering::AcqRel);
    // SAFETY: as pthread_create(3); `launch` takes `l` over.
    let r = unsafe { real(thread, attr, launch, l.cast()) };
    if r != 0 {
        LIVE.fetch_sub(1, Ordering::AcqRel);
        // SAFETY: the thread was not made: `l` is still ours.
        drop(unsafe { Box::from_raw(l) });
    }
    r
}
