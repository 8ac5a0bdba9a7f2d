//! Starting and stopping the region's two threads (the fault handler and
//! the evictor) with their eventfds; used when a region is made, dropped,
//! and rebuilt in a forked child.
//!
//! The threads are POSIX threads made here, not `std::thread`s: a std
//! thread's start registers a thread-local destructor, which in glibc takes
//! the dynamic loader's lock, and a region is often made (and its threads
//! started) by a library's constructor while another thread, or the same
//! one, is inside `dlopen` holding that lock. Had the handler waited for
//! the lock, a fault of the `dlopen`ing thread on the region would never be
//! served (a JVM loading libjvm.so hung so). The loops use no thread-local
//! with a destructor.
//!
//! Owns the threads' lifetimes; their loops are `handler`'s and
//! `evictor`'s.

use std::ffi::CStr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::own::OwnCode;
use crate::shared::{kick, new_eventfd, Shared};

/// Stack of each worker thread (its loops lock the top 64 KiB).
const STACK: usize = 256 * 1024;

/// The fault handler thread's name (as `ps` and `/proc/PID/task/*/comm`
/// show it; at most 15 bytes).
pub(crate) const HANDLER_NAME: &CStr = c"zmem-fault";

/// The evictor thread's name.
pub(crate) const EVICTOR_NAME: &CStr = c"zmem-evict";

/// One of the region's threads, to join.
#[derive(Debug)]
pub(crate) struct Worker {
    thread: libc::pthread_t,
}

/// What a new thread runs: its loop, on the region.
struct Start {
    body: fn(Arc<Shared>),
    sh: Arc<Shared>,
}

/// The new thread's first Rust frame.
extern "C" fn trampoline(arg: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `arg` is the `Box<Start>` that `Worker::spawn` leaked for
    // this thread alone; taken back once, here.
    let start = unsafe { Box::from_raw(arg.cast::<Start>()) };
    let _own = OwnCode::enter();
    // A panic must not unwind into the C frame that called this one.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (start.body)(start.sh)));
    std::ptr::null_mut()
}

impl Worker {
    /// Starts `body(sh)` on a new thread named `name`.
    fn spawn(name: &CStr, body: fn(Arc<Shared>), sh: Arc<Shared>) -> std::io::Result<Worker> {
        let start = Box::into_raw(Box::new(Start { body, sh }));
        // SAFETY: an attribute object initialised, used and destroyed
        // here; `trampoline` takes ownership of `start` only if the thread
        // was made, and it is taken back here otherwise.
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            let rc = libc::pthread_attr_init(&mut attr);
            if rc != 0 {
                drop(Box::from_raw(start));
                return Err(std::io::Error::from_raw_os_error(rc));
            }
            libc::pthread_attr_setstacksize(&mut attr, STACK);
            let mut thread: libc::pthread_t = std::mem::zeroed();
            let rc = libc::pthread_create(&mut thread, &attr, trampoline, start.cast());
            libc::pthread_attr_destroy(&mut attr);
            if rc != 0 {
                drop(Box::from_raw(start));
                return Err(std::io::Error::from_raw_os_error(rc));
            }
            libc::pthread_setname_np(thread, name.as_ptr());
            Ok(Worker { thread })
        }
    }

    /// Waits for the thread to end.
    fn join(self) {
        // SAFETY: a thread made by `spawn`, joinable, joined once (`self`
        // is consumed).
        unsafe { libc::pthread_join(self.thread, std::ptr::null_mut()) };
    }
}

/// Makes fresh eventfds and starts both threads.
pub(crate) fn start(sh: &Arc<Shared>) -> std::io::Result<()> {
    sh.handler_efd.store(new_eventfd()?, Ordering::Release);
    sh.evictor_efd.store(new_eventfd()?, Ordering::Release);
    sh.stop.store(false, Ordering::Release);
    sh.stop_handler.store(false, Ordering::Release);
    let mut threads = sh.threads.lock().unwrap_or_else(|e| e.into_inner());
    threads.push(Worker::spawn(
        HANDLER_NAME,
        crate::handler::run,
        Arc::clone(sh),
    )?);
    threads.push(Worker::spawn(
        EVICTOR_NAME,
        crate::evictor::run,
        Arc::clone(sh),
    )?);
    Ok(())
}

/// Stops both threads (the evictor first: its evictions need the handler),
/// joins them and closes the eventfds.
pub(crate) fn stop(sh: &Shared) {
    let threads: Vec<_> =
        std::mem::take(&mut *sh.threads.lock().unwrap_or_else(|e| e.into_inner()));
    let mut threads = threads.into_iter();
    let (handler, evictor) = (threads.next(), threads.next());
    sh.stop.store(true, Ordering::Release);
    kick(&sh.evictor_efd);
    if let Some(t) = evictor {
        t.join();
    }
    sh.stop_handler.store(true, Ordering::Release);
    kick(&sh.handler_efd);
    if let Some(t) = handler {
        t.join();
    }
    close_eventfds(sh);
}

/// Closes the eventfds.
pub(crate) fn close_eventfds(sh: &Shared) {
    for fd in [&sh.handler_efd, &sh.evictor_efd] {
        let f = fd.swap(-1, Ordering::AcqRel);
        if f >= 0 {
            // SAFETY: the region's own eventfd, closed once (swapped out).
            unsafe { libc::close(f) };
        }
    }
}

/// In a forked child: forgets the parent's threads (they do not exist
/// here; joining them would be undefined).
pub(crate) fn forget_parent_threads(sh: &Shared) {
    sh.threads.lock().unwrap_or_else(|e| e.into_inner()).clear();
}
