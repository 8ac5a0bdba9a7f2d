//! The descriptors the region keeps for long (its userfaultfd, its
//! eventfds, its soft-dirty files, a watchdog log its owner gives): moved
//! to high numbers, close-on-exec, so a program the process runs never
//! sees them and a program that closes or `dup2`s onto "its" low numbers
//! does not hit them.
//!
//! Owns that one move; opening and closing each descriptor is its owner's.

/// How many numbers below the top of the band the region's descriptors
/// move to: the top is the soft `RLIMIT_NOFILE`, at most 1024 (`select`'s
/// `FD_SETSIZE`, below which most programs keep their own).
const BAND: libc::rlim_t = 64;

/// Moves a descriptor the region keeps for long (`fd`, just opened) to the
/// lowest free number of the band below the top of the process's
/// descriptor numbers, close-on-exec, and closes `fd`; returns the number
/// it has now. Where no number of the band is free it keeps `fd`, moved
/// above 0, 1 and 2 if it is one of those.
pub fn out_of_the_way(fd: libc::c_int) -> libc::c_int {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    let top = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur.min(1024)
    } else {
        1024
    };
    let floor = top.saturating_sub(BAND).max(3) as libc::c_int;
    if fd < 0 || fd >= floor {
        return fd;
    }
    for min in [floor, 3] {
        if fd >= min {
            break;
        }
        // SAFETY: fcntl on a descriptor of ours; the copy shares its open
        // file (its flags, O_NONBLOCK included), and the result is checked.
        let moved = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) };
        if moved >= 0 {
            // SAFETY: `fd` is ours and now has a copy; closed once.
            unsafe { libc::close(fd) };
            return moved;
        }
    }
    fd
}
