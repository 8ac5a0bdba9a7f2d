//! Termination signals, received synchronously.
//!
//! This module owns zmem's only signal handling: `zmem serve` blocks SIGINT
//! and SIGTERM in its main thread before it starts any other thread (so
//! every thread inherits the mask and none is interrupted), then waits for
//! one with `sigwait` and shuts down in ordinary code. No handler runs in
//! signal context, so nothing here has to be async-signal-safe.

use std::io;
use std::mem::MaybeUninit;

/// A set of signals blocked in the calling thread (and the threads it
/// starts afterwards).
pub struct Blocked {
    set: libc::sigset_t,
}

/// Blocks SIGINT and SIGTERM in the calling thread. Call it before any
/// thread is started.
pub fn block_termination() -> io::Result<Blocked> {
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set it is given; the pointer is
    // to a live, writable sigset_t.
    if unsafe { libc::sigemptyset(set.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: sigemptyset succeeded, so the set is initialised.
    let mut set = unsafe { set.assume_init() };
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `set` is an initialised sigset_t and `sig` a valid signal.
        if unsafe { libc::sigaddset(&mut set, sig) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: `set` is initialised; the old mask is not asked for (null).
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(Blocked { set })
}

impl Blocked {
    /// Waits for one of the blocked signals; returns its number.
    pub fn wait(&self) -> io::Result<i32> {
        let mut sig: libc::c_int = 0;
        loop {
            // SAFETY: `self.set` is an initialised sigset_t and `sig` a
            // valid place for the result.
            let rc = unsafe { libc::sigwait(&self.set, &mut sig) };
            match rc {
                0 => return Ok(sig),
                libc::EINTR => continue,
                e => return Err(io::Error::from_raw_os_error(e)),
            }
        }
    }
}

/// The signal's name, for logs.
pub fn name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}
