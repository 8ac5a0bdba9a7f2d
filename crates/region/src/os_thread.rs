//! Threads made with `pthread_create`, not `std::thread`: the region's
//! own threads. A std thread's start registers a thread-local destructor,
//! which in glibc takes the dynamic loader's lock, and a region is often
//! made (its threads started) by a library's constructor while a thread of
//! the program is inside `dlopen`, holding that lock, and faults on the
//! region. A handler thread waiting for the lock would never serve that
//! fault (a JVM loading libjvm.so hung so). The bodies run here use no
//! thread-local with a destructor.
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
            let mut thread: libc::pthread_t = std::mem::zeroed();
            let rc = libc::pthread_create(&mut thread, &attr, trampoline, arg.cast());
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
}
