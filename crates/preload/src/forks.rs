//! Copies of the process that glibc's `fork()` handlers do not see: the
//! interposed `_Fork`, `clone` and `syscall`. glibc runs the `pthread_atfork`
//! handlers (the region's rebuild in the child, `process`'s span lock,
//! `threads`' count) for `fork()` alone; a child made by `_Fork()`, by
//! glibc's `clone()` without `CLONE_VM` or by the raw `clone`, `clone3` or
//! `fork` system call would otherwise read every evicted page as zeros.
//! Around such a call the same sequence runs as for `fork()`: the span
//! locked, the region's [`region::fork::before_fork`], the call, then in
//! the parent [`region::fork::after_fork_parent`] and the span unlocked,
//! in the child [`region::fork::after_fork_child`], the thread count
//! reset and the span unlocked. Every other call, and every call while the
//! library is inert (no region), goes straight to glibc's function (found
//! with `dlsym(RTLD_NEXT)`), errno and all.
//!
//! A child's one program thread that ends by the `exit` system call (as
//! glibc's `clone()` ends its child when the function returns, or the
//! program's own `syscall(SYS_exit, ...)` in its last thread) would leave
//! the process alive on the region's threads: it ends the process instead
//! (`exit_group`, as the kernel would for a process of one thread).
//!
//! Not covered, and passed through unchanged:
//! - a raw `clone` or `clone3` without `CLONE_VM` on a stack of its own
//!   (the child cannot return into this code on another stack), and any
//!   copy with `CLONE_SETTLS` (this code's thread-locals would be the
//!   program's new ones);
//! - a system call made by the program's own instruction (a static
//!   program, Go's runtime), which no library call is on the way of.
//!
//! `_Fork()` is async-signal-safe in glibc; with the region it is not (it
//! takes the span's and the registry's locks, as `fork()`'s handlers do).
//! In the child nothing here allocates before the region's rebuild (which
//! does, as in a `fork()` child).
//!
//! Owns these three symbols and the look-up of glibc's; the sequence's
//! steps are `process`', `threads`' and the region's.

// Elsewhere only `_Fork` is interposed (`clone` and `syscall` are declared
// for these two architectures' calling conventions).
#![cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_int, c_long, c_void, pid_t};

use crate::process::{self, process};

/// glibc's `_Fork`, `clone` and `syscall` (0 until looked up).
static REAL_FORK: AtomicUsize = AtomicUsize::new(0);
static REAL_CLONE: AtomicUsize = AtomicUsize::new(0);
static REAL_SYSCALL: AtomicUsize = AtomicUsize::new(0);

type ForkFn = unsafe extern "C" fn() -> pid_t;
type CloneStart = extern "C" fn(*mut c_void) -> c_int;
type CloneFn = unsafe extern "C" fn(
    Option<CloneStart>,
    *mut c_void,
    c_int,
    *mut c_void,
    *mut pid_t,
    *mut c_void,
    *mut pid_t,
) -> c_int;
type SyscallFn =
    unsafe extern "C" fn(c_long, c_long, c_long, c_long, c_long, c_long, c_long) -> c_long;

/// The next definition of `name` (glibc's), cached in `slot`; 0 if none.
fn next(slot: &AtomicUsize, name: &std::ffi::CStr) -> usize {
    let mut f = slot.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: a NUL-terminated name; RTLD_NEXT finds the definition
        // after this library's.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        slot.store(f, Ordering::Release);
    }
    f
}

/// [`next`], or `None` with errno set to `ENOSYS` where there is none: a
/// call that must fail as the system call it stands for would.
fn next_or_enosys(slot: &AtomicUsize, name: &std::ffi::CStr) -> Option<usize> {
    let f = next(slot, name);
    if f == 0 {
        set_errno(libc::ENOSYS);
        return None;
    }
    Some(f)
}

/// Looks up glibc's three functions, at load (so no later call, from a
/// signal handler or a child, needs `dlsym`).
pub fn find() {
    next(&REAL_FORK, c"_Fork");
    next(&REAL_CLONE, c"clone");
    next(&REAL_SYSCALL, c"syscall");
}

fn errno() -> c_int {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// Before the copy: what `fork()`'s prepare handlers do, in their order
/// (the last registered first: the span, then the region). `touch` as
/// [`region::fork::before_fork`]'s.
fn prepare(touch: impl Fn()) {
    process::fork_prepare();
    region::fork::before_fork(touch);
}

/// In the parent after the copy (made or failed), errno kept.
fn parent() {
    let e = errno();
    region::fork::after_fork_parent();
    process::fork_after();
    set_errno(e);
}

/// In the child, before anything else.
fn child() {
    region::fork::after_fork_child();
    process::fork_child();
}

/// Runs `copy` (a call that copies the process and returns in both, 0 in
/// the child) inside the sequence; `touch` as [`prepare`]'s.
fn around<R: PartialEq + From<i8>>(touch: impl Fn(), copy: impl FnOnce() -> R) -> R {
    prepare(touch);
    let r = copy();
    if r == R::from(0) {
        child();
    } else {
        parent();
    }
    r
}

/// # Safety
/// As _Fork(3).
#[no_mangle]
pub unsafe extern "C" fn _Fork() -> pid_t {
    let Some(f) = next_or_enosys(&REAL_FORK, c"_Fork") else {
        return -1;
    };
    // SAFETY: glibc's _Fork, found by dlsym, has this type.
    let real = unsafe { std::mem::transmute::<usize, ForkFn>(f) };
    if process().is_none() {
        // SAFETY: the caller's request.
        return unsafe { real() };
    }
    // SAFETY: as _Fork(3); the child's side runs the rebuild first.
    around(|| {}, || unsafe { real() })
}

/// What the child of an interposed `clone` starts with: the program's
/// function and argument. It lives on the parent's stack during the call
/// (the child reads its own copy).
struct Launch {
    start: CloneStart,
    arg: *mut c_void,
}

/// The child's first function, on the program's stack for it. When the
/// program's function returns, glibc would end the child's one thread
/// (the `exit` system call), which ends a process of one thread; the
/// child's region threads would keep it alive, so the whole process ends
/// here, with the function's value (as `_exit`, no exit handlers).
extern "C" fn launch(p: *mut c_void) -> c_int {
    // SAFETY: `p` is the `Launch` of the `clone` below, in the child's
    // copy of the parent's stack, made resident by `prepare`'s touch.
    let l = unsafe { std::ptr::read(p.cast::<Launch>()) };
    child();
    let r = (l.start)(l.arg);
    // SAFETY: ends the process (`exit_group`).
    unsafe { libc::_exit(r) }
}

/// Reads and writes back one byte, so its page is resident.
///
/// # Safety
/// `p` is writable and no other thread writes it meanwhile.
unsafe fn touch(p: *mut u8) {
    // SAFETY: the caller's contract.
    unsafe { p.write_volatile(p.read_volatile()) };
}

/// glibc's clone(2) wrapper. Declared with its optional arguments (the
/// parent's thread id, the TLS, the child's thread id) as fixed ones:
/// SAFETY: on x86-64 and AArch64 Linux a variadic call passes its integer
/// and pointer arguments exactly where a fixed call passes them, and
/// glibc's `clone` reads them so (from the registers, whichever the flags
/// ask for); passing all seven on to it is the same.
///
/// # Safety
/// As clone(2).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[no_mangle]
pub unsafe extern "C" fn clone(
    start: Option<CloneStart>,
    stack: *mut c_void,
    flags: c_int,
    arg: *mut c_void,
    ptid: *mut pid_t,
    tls: *mut c_void,
    ctid: *mut pid_t,
) -> c_int {
    let Some(f) = next_or_enosys(&REAL_CLONE, c"clone") else {
        return -1;
    };
    // SAFETY: glibc's clone, found by dlsym, has this type.
    let real = unsafe { std::mem::transmute::<usize, CloneFn>(f) };
    let copies = flags & (libc::CLONE_VM | libc::CLONE_SETTLS) == 0;
    let (Some(start), true, true, Some(_)) = (start, stack as usize >= 4096, copies, process())
    else {
        // SAFETY: the caller's request, as clone(2) (glibc refuses a null
        // function or stack itself).
        return unsafe { real(start, stack, flags, arg, ptid, tls, ctid) };
    };
    let mut l = Launch { start, arg };
    let lp: *mut Launch = &mut l;
    // glibc writes the function and its argument in the 16 bytes below
    // the stack's top (aligned down to 16) before the system call, one
    // page. (The child's deeper frames, before its rebuild, land on fresh
    // zero pages where the parent's copies were evicted: what lies below
    // a new stack's top is no one's.)
    let slot = ((stack as usize & !15) - 16) as *mut u8;
    let written = libc::CLONE_PARENT_SETTID | libc::CLONE_PIDFD;
    let ptid_touched = if flags & written != 0 {
        ptid.cast::<u8>()
    } else {
        std::ptr::null_mut()
    };
    let t = Touched([slot, lp.cast(), ptid_touched]);
    // SAFETY: the stack is the program's for the child (clone(2)), `ptid`
    // the program's for the kernel to write; `l` is this frame's.
    prepare(|| unsafe { t.touch() });
    // SAFETY: as clone(2), with `launch` and `l` for the program's
    // function and argument; `l` outlives the call (the child has a copy).
    let r = unsafe { real(Some(launch), stack, flags, lp.cast(), ptid, tls, ctid) };
    parent();
    r
}

/// Memory of the program's that a copying system call reads or writes in
/// the parent (null where none): `prepare` touches it, so the kernel never
/// faults on a region page once the fault service has stopped.
#[derive(Clone, Copy)]
struct Touched([*mut u8; 3]);

impl Touched {
    const NONE: Touched = Touched([std::ptr::null_mut(); 3]);

    /// Touches each.
    ///
    /// # Safety
    /// Each is null or writable memory of the program's that no other
    /// thread writes during the call (the caller hands it to the kernel).
    unsafe fn touch(self) {
        for p in self.0 {
            if !p.is_null() {
                // SAFETY: the caller's contract.
                unsafe { touch(p) };
            }
        }
    }
}

/// Whether a raw system call copies the process and returns in the child
/// on this stack (`clone` and `clone3` without `CLONE_VM`, `CLONE_SETTLS`
/// or a stack of their own; `fork`), and if so what of the program's it
/// hands the kernel in the parent: the thread id or pidfd it asks written
/// (`CLONE_PARENT_SETTID`, `CLONE_PIDFD`), `clone3`'s arguments.
fn copies_here(n: c_long, a1: c_long, a2: c_long, a3: c_long) -> Option<Touched> {
    let not = (libc::CLONE_VM | libc::CLONE_SETTLS) as u64;
    let written = (libc::CLONE_PARENT_SETTID | libc::CLONE_PIDFD) as u64;
    if n == libc::SYS_clone {
        // clone(flags, stack, parent_tid, ...) on both architectures.
        let flags = a1 as u64;
        if flags & not != 0 || a2 != 0 {
            return None;
        }
        let mut t = Touched::NONE;
        if flags & written != 0 {
            t.0[0] = a3 as usize as *mut u8;
        }
        return Some(t);
    }
    if n == libc::SYS_clone3 {
        // clone3(args, size): a struct clone_args of at least 64 bytes
        // (its first version): flags at 0, pidfd at 8, parent_tid at 24,
        // the stack at 40.
        let p = a1 as usize as *mut u64;
        if p.is_null() || (a2 as usize) < 64 || p as usize % 8 != 0 {
            return None;
        }
        // SAFETY: the program gives the kernel these bytes to read (a bad
        // pointer faults here rather than failing with EFAULT).
        let (flags, pidfd, ptid, stack) = unsafe {
            (
                p.read_volatile(),
                p.add(1).read_volatile(),
                p.add(3).read_volatile(),
                p.add(5).read_volatile(),
            )
        };
        if flags & not != 0 || stack != 0 {
            return None;
        }
        let mut t = Touched([p.cast(), std::ptr::null_mut(), std::ptr::null_mut()]);
        if flags & libc::CLONE_PIDFD as u64 != 0 {
            t.0[1] = pidfd as usize as *mut u8;
        }
        if flags & libc::CLONE_PARENT_SETTID as u64 != 0 {
            t.0[2] = ptid as usize as *mut u8;
        }
        return Some(t);
    }
    // `fork` (x86-64) hands the kernel nothing.
    copy_number(n).then_some(Touched::NONE)
}

/// glibc's syscall(2), for the calls that copy the process; every other
/// goes straight to glibc's.
///
/// SAFETY: `syscall` is variadic in C; on x86-64 and AArch64 Linux a
/// variadic call passes integer arguments in the registers a fixed call
/// with six more `long`s uses, so this reads them correctly (the unused
/// ones hold whatever the caller left there and are passed on unread, as
/// glibc's own `syscall` passes them to the kernel). glibc's `syscall`
/// returns -1 with errno set on failure; passing through to it keeps that.
///
/// # Safety
/// As syscall(2).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[no_mangle]
pub unsafe extern "C" fn syscall(
    n: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    let Some(f) = next_or_enosys(&REAL_SYSCALL, c"syscall") else {
        return -1;
    };
    // SAFETY: glibc's syscall, found by dlsym, called with the arguments
    // as this function received them (see above).
    let real = unsafe { std::mem::transmute::<usize, SyscallFn>(f) };
    if n == libc::SYS_exit && crate::threads::last() && !region::in_own_code() {
        // The program's last thread ends: the process would end with it,
        // but for the region's threads (as `threads`' count does for a
        // thread that returns or calls `pthread_exit`).
        // SAFETY: ends the process (`exit_group`) with the thread's value.
        unsafe { libc::_exit(a1 as c_int) };
    }
    if copy_number(n) && process().is_some() {
        if let Some(t) = copies_here(n, a1, a2, a3) {
            // SAFETY: memory the program hands the kernel for this call.
            let touch = || unsafe { t.touch() };
            // SAFETY: as syscall(2); the child returns here on its copy
            // of this stack and runs the rebuild first.
            return around(touch, || unsafe { real(n, a1, a2, a3, a4, a5, a6) });
        }
    }
    // SAFETY: the caller's request, as syscall(2).
    unsafe { real(n, a1, a2, a3, a4, a5, a6) }
}

/// Whether `n` is a system call that may copy the process: `clone`,
/// `clone3`, and `fork` where the architecture has one (x86-64; AArch64
/// forks by `clone`).
fn copy_number(n: c_long) -> bool {
    #[cfg(target_arch = "x86_64")]
    if n == libc::SYS_fork {
        return true;
    }
    n == libc::SYS_clone || n == libc::SYS_clone3
}
