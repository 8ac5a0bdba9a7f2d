//! The descriptors the region keeps for long (its userfaultfd, its
//! eventfds, its soft-dirty files): moved above the numbers the program
//! counts as its own, close-on-exec, so a program the process runs never
//! sees them, a scan of the process's descriptors up to its limit does not
//! meet them, and a program that closes or `dup2`s onto "its" numbers does
//! not hit them.
//!
//! Owns that one move; opening and closing each descriptor is its owner's.

/// How many numbers the region's descriptors may take: a band of them,
/// at the top of the numbers a program counts as its own.
const BAND: libc::rlim_t = 64;

/// The largest soft `RLIMIT_NOFILE` the region lowers by `BAND` (64) when the
/// hard limit leaves no room above it: a descriptor numbered near the
/// limit makes the kernel's table of the process's descriptors that large
/// (8 bytes a number, copied by each fork), so above this the band stays
/// below 1024 instead, where a scan up to the limit sees it.
const LOWER_UP_TO: libc::rlim_t = 65536;

/// Moves a descriptor the region keeps for long (`fd`, just opened) out of
/// the program's way, close-on-exec, and closes `fd`; returns the number it
/// has now. A program that scans its descriptors up to its soft
/// `RLIMIT_NOFILE` (`sysconf(_SC_OPEN_MAX)`: CPython's tests, `close_fds`
/// loops), or checks numbers it held before it lowered that limit, must
/// never meet it, so it goes:
/// - at or above the larger of the soft limit and 1024, where the hard
///   limit allows: the soft limit is raised for the moment of the move and
///   put back (a number above it stays valid);
/// - else, where the hard limit is above the soft one, into the top
///   `BAND` (64) numbers under the hard limit, the same way;
/// - else, where the soft limit is from 1024 to `LOWER_UP_TO` (65536), into the
///   top `BAND` (64) numbers under it, and the soft limit is lowered below
///   them (the program sees a limit 64 lower than it was given; its
///   children inherit that, and their own regions then take the first
///   way);
/// - else into the band under the soft limit (at most 1024, `select`'s
///   `FD_SETSIZE`, below which most programs keep their own), and where
///   that is full, anywhere above 0, 1 and 2.
pub fn out_of_the_way(fd: libc::c_int) -> libc::c_int {
    if fd < 0 {
        return fd;
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return under(fd, 1024);
    }
    let (soft, hard) = (lim.rlim_cur, lim.rlim_max);
    let above = soft.max(1024);
    if fd as libc::rlim_t >= above {
        return fd;
    }
    if hard > soft {
        let min = if hard > above {
            above
        } else {
            hard.saturating_sub(BAND).max(soft)
        };
        let raised = libc::rlimit {
            rlim_cur: hard.min(min + BAND),
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads the struct it is given; the soft limit
        // is put back right after the move.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            let moved = moved_to(fd, min as libc::c_int);
            // SAFETY: as above, the limits read before.
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
            if let Some(moved) = moved {
                return moved;
            }
        }
    } else if (1024..=LOWER_UP_TO).contains(&soft) {
        let floor = soft - BAND;
        if let Some(moved) = moved_to(fd, floor as libc::c_int) {
            let lowered = libc::rlimit {
                rlim_cur: floor,
                rlim_max: hard,
            };
            // SAFETY: setrlimit reads the struct it is given.
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lowered) };
            return moved;
        }
    }
    under(fd, soft.min(1024))
}

/// Moves `fd` to the lowest free number at or above `min`, close-on-exec,
/// closing `fd`; `None` (and `fd` kept) where there is none.
fn moved_to(fd: libc::c_int, min: libc::c_int) -> Option<libc::c_int> {
    // SAFETY: fcntl on a descriptor of ours; the copy shares its open file
    // (its flags, O_NONBLOCK included), and the result is checked.
    let moved = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) };
    if moved < 0 {
        return None;
    }
    // SAFETY: `fd` is ours and now has a copy; closed once.
    unsafe { libc::close(fd) };
    Some(moved)
}

/// Moves `fd` into the band under `top`, or else above 0, 1 and 2.
fn under(fd: libc::c_int, top: libc::rlim_t) -> libc::c_int {
    let floor = top.saturating_sub(BAND).max(3) as libc::c_int;
    if fd >= floor {
        return fd;
    }
    for min in [floor, 3] {
        if fd >= min {
            break;
        }
        if let Some(moved) = moved_to(fd, min) {
            return moved;
        }
    }
    fd
}
