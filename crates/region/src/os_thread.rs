//! Threads made with `pthread_create`, not `std::thread`: the region's
//! own threads. A std thread's start registers a thread-local destructor,
//! which in glibc takes the dynamic loader's lock, and a region is often
//! made (its threads started) by a library's constructor while a thread of
//! the program is inside `dlopen`, holding that lock, and faults on the
//! region. A handler thread waiting for the lock would never serve that
//! fault (a JVM loading libjvm.so hung so). The bodies run here use no
//! thread-local with a destructor.
//!
//! Each starts with every signal blocked but those a fault raises in the
//! thread itself (`SIGSEGV`, `SIGBUS`, `SIGFPE`, `SIGILL`, `SIGTRAP`): a
//! signal sent to the process (`kill(getpid(), SIGALRM)` with the signal
//! blocked in the program's own thread, to be taken by `sigtimedwait`) is
//! the program's, and must never be taken by one of the region's threads,
//! where its handler would run unasked.
//!
//! Owns starting, naming and joining such a thread; knows nothing of the
//! region's state. Each runs as the region's own code (`own`).

use std::ffi::CStr;

use crate::own::OwnCode;

/// A thread made by [`OsThread::spawn`], to join.
#[derive(Debug)]
pub(crate) struct OsThread {
    thread: libc::pthread_t,
}

/// What a new thread runs.
type Body = Box<dyn FnOnce() + Send>;

/// The new thread's first Rust frame.
extern "C" fn trampoline(arg: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `arg` is the `Box<Body>` that `spawn` leaked for this thread
    // alone; taken back once, here.
    let body = unsafe { Box::from_raw(arg.cast::<Body>()) };
    let _own = OwnCode::enter();
    // A panic must not unwind into the C frame that called this one.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
    std::ptr::null_mut()
}

impl OsThread {
    /// Starts `body` on a new thread named `name` (at most 15 bytes) with
    /// a stack of `stack` bytes.
    pub(crate) fn spawn(
        name: &CStr,
        stack: usize,
        body: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<OsThread> {
        let body: Box<Body> = Box::new(Box::new(body));
        let arg = Box::into_raw(body);
        // SAFETY: an attribute object initialised, used and destroyed
        // here; `trampoline` owns `arg` only if the thread was made, and
        // it is taken back here otherwise.
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            let rc = libc::pthread_attr_init(&mut attr);
            if rc != 0 {
                drop(Box::from_raw(arg));
                return Err(std::io::Error::from_raw_os_error(rc));
            }
            libc::pthread_attr_setstacksize(&mut attr, stack);
            // The new thread inherits the mask in force here; the caller's
            // own is put back at once.
            let mut blocked: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut blocked);
            for sig in [
                libc::SIGSEGV,
                libc::SIGBUS,
                libc::SIGFPE,
                libc::SIGILL,
                libc::SIGTRAP,
            ] {
                libc::sigdelset(&mut blocked, sig);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &blocked, &mut old);
            let mut thread: libc::pthread_t = std::mem::zeroed();
            let rc = libc::pthread_create(&mut thread, &attr, trampoline, arg.cast());
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            libc::pthread_attr_destroy(&mut attr);
            if rc != 0 {
                drop(Box::from_raw(arg));
                return Err(std::io::Error::from_raw_os_error(rc));
            }
            libc::pthread_setname_np(thread, name.as_ptr());
            Ok(OsThread { thread })
        }
    }

    /// Waits for the thread to end.
    pub(crate) fn join(self) {
        // SAFETY: a thread made by `spawn`, joinable, joined once (`self`
        // is consumed).
        unsafe { libc::pthread_join(self.thread, std::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_thread_runs_as_the_regions_own_code_and_is_joined() {
        let ran = Arc::new(AtomicBool::new(false));
        let r = Arc::clone(&ran);
        let t = OsThread::spawn(c"zmem-test", 64 * 1024, move || {
            r.store(crate::own::in_own_code(), Ordering::SeqCst);
        })
        .unwrap();
        t.join();
        assert!(ran.load(Ordering::SeqCst));
    }

    /// A signal sent to the process is never the region's thread's: the
    /// thread starts with it blocked, and the caller's own mask is as it
    /// was.
    #[test]
    fn a_thread_starts_with_the_processs_signals_blocked() {
        fn blocked(sig: libc::c_int) -> bool {
            // SAFETY: reads this thread's mask into a zeroed set.
            unsafe {
                let mut now: libc::sigset_t = std::mem::zeroed();
                libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut now);
                libc::sigismember(&now, sig) == 1
            }
        }
        let before = (blocked(libc::SIGALRM), blocked(libc::SIGUSR1));
        let seen = Arc::new(std::sync::Mutex::new(None));
        let s = Arc::clone(&seen);
        let t = OsThread::spawn(c"zmem-test", 64 * 1024, move || {
            *s.lock().unwrap() = Some((
                blocked(libc::SIGALRM),
                blocked(libc::SIGUSR1),
                blocked(libc::SIGTERM),
                blocked(libc::SIGBUS),
            ));
        })
        .unwrap();
        t.join();
        assert_eq!(*seen.lock().unwrap(), Some((true, true, true, false)));
        assert_eq!((blocked(libc::SIGALRM), blocked(libc::SIGUSR1)), before);
    }
}
