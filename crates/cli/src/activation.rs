//! Socket activation: the listening socket systemd (or `systemd-socket-
//! activate`) hands to `zmem serve`.
//!
//! This module owns the `sd_listen_fds` protocol and nothing else: when
//! `LISTEN_PID` is this process and `LISTEN_FDS` is 1, file descriptor 3 is
//! a listening socket that is now ours; it is told apart as Unix or TCP and
//! handed to the NBD server, and the variables are removed so that no child
//! sees them. It binds nothing itself.

use std::net::TcpListener;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixListener;

use nbd::InheritedListener;

/// The first descriptor the protocol passes (SD_LISTEN_FDS_START).
const FIRST_FD: i32 = 3;

/// The socket passed to this process, if it was started socket-activated.
/// More than one socket, or one that is not a listening stream socket, is an
/// error saying so.
pub fn inherited_listener() -> Result<Option<InheritedListener>, String> {
    let pid = std::env::var("LISTEN_PID").ok();
    let fds = std::env::var("LISTEN_FDS").ok();
    let (Some(pid), Some(fds)) = (pid, fds) else {
        return Ok(None);
    };
    if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
        // Meant for another process (an ancestor's leftovers): not ours.
        return Ok(None);
    }
    std::env::remove_var("LISTEN_PID");
    std::env::remove_var("LISTEN_FDS");
    std::env::remove_var("LISTEN_FDNAMES");
    let n: u32 = fds
        .trim()
        .parse()
        .map_err(|_| format!("LISTEN_FDS={fds:?} is not a number"))?;
    match n {
        0 => return Ok(None),
        1 => {}
        _ => {
            return Err(format!(
                "systemd passed {n} sockets; zmem serve takes one (the NBD socket; the control \
                 socket is --ctl-socket)"
            ))
        }
    }
    // SAFETY: fcntl(F_GETFD) only reads the descriptor's flags; it is
    // harmless on any number and tells whether descriptor 3 is open.
    let flags = unsafe { libc::fcntl(FIRST_FD, libc::F_GETFD) };
    if flags < 0 {
        return Err("LISTEN_FDS=1 but descriptor 3 is not open".into());
    }
    // SAFETY: descriptor 3 is open (checked above) and, by the protocol,
    // passed to this process (LISTEN_PID matched) for it to own; nothing else
    // in the process uses it, and the variables are gone, so it is taken once.
    let fd = unsafe { OwnedFd::from_raw_fd(FIRST_FD) };
    // SAFETY: sets close-on-exec on the descriptor this function now owns.
    unsafe { libc::fcntl(FIRST_FD, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
    let tcp = TcpListener::from(fd);
    if tcp.local_addr().is_ok() {
        return Ok(Some(InheritedListener::Tcp(tcp)));
    }
    let unix = UnixListener::from(OwnedFd::from(tcp));
    match unix.local_addr() {
        Ok(_) => Ok(Some(InheritedListener::Unix(unix))),
        Err(e) => Err(format!(
            "descriptor 3 from systemd is neither a TCP nor a Unix socket: {e}"
        )),
    }
}
