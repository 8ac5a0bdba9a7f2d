//! Starting and stopping the region's two threads (the fault handler and
//! the evictor) with their eventfds; used when a region is made, dropped,
//! and rebuilt in a forked child.
//!
//! The threads are `os_thread`'s, not `std::thread`s (why: there).
//!
//! Owns the threads' lifetimes; their loops are `handler`'s and
//! `evictor`'s.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::os_thread::OsThread;
use crate::shared::{kick, new_eventfd, Shared};

/// Stack of each worker thread (its loops lock the top 64 KiB).
const STACK: usize = 256 * 1024;

/// The fault handler thread's name (as `ps` and `/proc/PID/task/*/comm`
/// show it; at most 15 bytes).
const HANDLER_NAME: &std::ffi::CStr = c"zmem-fault";

/// The evictor thread's name.
const EVICTOR_NAME: &std::ffi::CStr = c"zmem-evict";

/// Makes fresh eventfds and starts both threads.
pub(crate) fn start(sh: &Arc<Shared>) -> std::io::Result<()> {
    sh.handler_efd.store(new_eventfd()?, Ordering::Release);
    sh.evictor_efd.store(new_eventfd()?, Ordering::Release);
    sh.stop.store(false, Ordering::Release);
    sh.stop_handler.store(false, Ordering::Release);
    let mut threads = sh.threads.lock().unwrap_or_else(|e| e.into_inner());
    let h = Arc::clone(sh);
    threads.push(OsThread::spawn(HANDLER_NAME, STACK, move || {
        crate::handler::run(h)
    })?);
    let e = Arc::clone(sh);
    threads.push(OsThread::spawn(EVICTOR_NAME, STACK, move || {
        crate::evictor::run(e)
    })?);
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
