//! The region's log: the one-line reports a region appends to
//! `RegionConfig::report_log` when something goes wrong that the program
//! would otherwise see only as a hang or a crash: a fault held past its
//! threshold (`watchdog` writes that one), a page the store could not
//! read, the handler thread stopping.
//!
//! A line is formatted on the stack and written with one `write(2)` to a
//! file opened for it and closed after: nothing is allocated and no
//! descriptor is kept, so the fault paths, the handler thread and the
//! faulting thread's signal handler may all report.
//!
//! Owns the file's writing and the wording of the two failure reports;
//! when to report is the callers'.

use std::fmt::Display;
use std::io::Write;

use crate::shared::Shared;

/// The longest line (a longer one is cut, and still ends the report).
const LINE: usize = 320;

/// Appends the line `write_line` formats (without its newline) to the
/// region's log, if it has one.
pub(crate) fn append(sh: &Shared, write_line: impl FnOnce(&mut &mut [u8]) -> std::io::Result<()>) {
    let Some(log) = &sh.config.report_log else {
        return;
    };
    let mut path = [0u8; 256];
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(log.as_os_str());
    if bytes.len() >= path.len() || bytes.contains(&0) {
        return;
    }
    path[..bytes.len()].copy_from_slice(bytes);
    let mut line = [0u8; LINE];
    let len = {
        let mut out = &mut line[..];
        let _ = write_line(&mut out).and_then(|()| writeln!(out));
        LINE - out.len()
    };
    if len == LINE {
        line[len - 1] = b'\n';
    }
    // SAFETY: `path` is NUL-terminated (its tail is zeros); the flags and
    // mode are plain values.
    let fd = unsafe {
        libc::open(
            path.as_ptr().cast(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        return;
    }
    // SAFETY: writes `len` initialised bytes of `line` to the descriptor
    // just opened, then closes it once.
    unsafe {
        libc::write(fd, line.as_ptr().cast(), len);
        libc::close(fd);
    }
}

/// The calling process's id.
pub(crate) fn pid() -> libc::pid_t {
    // SAFETY: getpid has no arguments.
    unsafe { libc::getpid() }
}

/// Page `page` at `addr` could not be read from the store (`why`): the
/// fault on it is refused.
pub(crate) fn unreadable(sh: &Shared, addr: usize, page: usize, why: &dyn Display) {
    append(sh, |out| {
        write!(
            out,
            "zmem region (pid {}): page {page} at {addr:#x} could not be read from the store \
             ({why}); the access gets SIGBUS",
            pid()
        )
    });
}

/// The handler thread stopped (`why`: its panic's message): every fault
/// it would have served is refused from now on.
pub(crate) fn handler_stopped(sh: &Shared, why: &str) {
    append(sh, |out| {
        write!(
            out,
            "zmem region (pid {}): the fault handler thread stopped ({why}); every later fault \
             of the region's gets SIGBUS",
            pid()
        )
    });
}
