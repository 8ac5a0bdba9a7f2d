//! The raw userfaultfd interface: opening a userfaultfd, the API handshake,
//! registration, and the range ioctls the region uses (copy, zero page,
//! write-protect, wake, poison), with the kernel's structures and numbers from
//! `<linux/userfaultfd.h>` (x86-64 and arm64 share them).
//!
//! Owns the file descriptor's system calls and nothing else: it knows no
//! page states, no store and no thread. Every function here is safe to call
//! from the fault handler: none allocates.

use std::io;

use serde::Serialize;

use crate::error::RegionError;

/// `UFFD_API`.
const UFFD_API: u64 = 0xAA;
/// `_IOWR(0xAA, 0x3F, struct uffdio_api)`.
const UFFDIO_API: libc::c_ulong = 0xC018_AA3F;
/// `_IOWR(0xAA, 0x00, struct uffdio_register)`.
const UFFDIO_REGISTER: libc::c_ulong = 0xC020_AA00;
/// `_IOR(0xAA, 0x01, struct uffdio_range)`.
const UFFDIO_UNREGISTER: libc::c_ulong = 0x8010_AA01;
/// `_IOR(0xAA, 0x02, struct uffdio_range)`.
const UFFDIO_WAKE: libc::c_ulong = 0x8010_AA02;
/// `_IOWR(0xAA, 0x03, struct uffdio_copy)`.
const UFFDIO_COPY: libc::c_ulong = 0xC028_AA03;
/// `_IOWR(0xAA, 0x04, struct uffdio_zeropage)`.
const UFFDIO_ZEROPAGE: libc::c_ulong = 0xC020_AA04;
/// `_IOWR(0xAA, 0x06, struct uffdio_writeprotect)`.
const UFFDIO_WRITEPROTECT: libc::c_ulong = 0xC018_AA06;
/// `_IOWR(0xAA, 0x08, struct uffdio_poison)` (Linux 6.6).
const UFFDIO_POISON: libc::c_ulong = 0xC020_AA08;
/// `_IO(0xAA, 0x00)` on /dev/userfaultfd (Linux 6.1).
const USERFAULTFD_IOC_NEW: libc::c_ulong = 0xAA00;
/// `UFFD_USER_MODE_ONLY` (Linux 5.11).
const UFFD_USER_MODE_ONLY: libc::c_int = 1;

/// `UFFD_EVENT_PAGEFAULT`.
pub(crate) const EVENT_PAGEFAULT: u8 = 0x12;
/// `UFFD_EVENT_REMAP` (mremap).
pub(crate) const EVENT_REMAP: u8 = 0x14;
/// `UFFD_EVENT_REMOVE` (madvise DONTNEED or FREE).
pub(crate) const EVENT_REMOVE: u8 = 0x15;
/// `UFFD_EVENT_UNMAP` (munmap).
pub(crate) const EVENT_UNMAP: u8 = 0x16;
/// `UFFD_PAGEFAULT_FLAG_WRITE`.
pub(crate) const FLAG_WRITE: u64 = 1;
/// `UFFD_PAGEFAULT_FLAG_WP`.
pub(crate) const FLAG_WP: u64 = 2;

/// `UFFD_FEATURE_PAGEFAULT_FLAG_WP`.
const FEATURE_PAGEFAULT_FLAG_WP: u64 = 1 << 0;
/// `UFFD_FEATURE_EVENT_REMAP`.
const FEATURE_EVENT_REMAP: u64 = 1 << 2;
/// `UFFD_FEATURE_EVENT_REMOVE`.
const FEATURE_EVENT_REMOVE: u64 = 1 << 3;
/// `UFFD_FEATURE_EVENT_UNMAP`.
const FEATURE_EVENT_UNMAP: u64 = 1 << 6;
/// `UFFD_FEATURE_SIGBUS`: a fault sends `SIGBUS` to the faulting thread
/// instead of a message (events still come as messages).
const FEATURE_SIGBUS: u64 = 1 << 7;
/// `UFFD_FEATURE_THREAD_ID`: a page fault's message names the faulting
/// thread (`arg[2]`, low 32 bits).
const FEATURE_THREAD_ID: u64 = 1 << 8;
/// `UFFD_FEATURE_POISON` (Linux 6.6): `UFFDIO_POISON`, which maps a
/// marker that makes every access of the page a `SIGBUS`.
const FEATURE_POISON: u64 = 1 << 14;

/// Whether this kernel's userfaultfd takes `UFFD_FEATURE_POISON`: unknown
/// (0) until the first handshake, then yes (1) or no (2). One answer per
/// process: every descriptor of a process is opened on the same kernel.
static POISON: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
/// What the region needs: write-protect faults, and the events that tell it
/// the program changed its mapping.
pub(crate) const FEATURES: u64 = FEATURE_PAGEFAULT_FLAG_WP
    | FEATURE_EVENT_REMAP
    | FEATURE_EVENT_REMOVE
    | FEATURE_EVENT_UNMAP
    | FEATURE_THREAD_ID;

/// `UFFDIO_REGISTER_MODE_MISSING`.
const REGISTER_MODE_MISSING: u64 = 1;
/// `UFFDIO_REGISTER_MODE_WP`.
const REGISTER_MODE_WP: u64 = 2;
/// `UFFDIO_COPY_MODE_DONTWAKE`.
const COPY_MODE_DONTWAKE: u64 = 1;
/// `UFFDIO_COPY_MODE_WP`: the page is mapped write-protected.
const COPY_MODE_WP: u64 = 2;
/// `UFFDIO_ZEROPAGE_MODE_DONTWAKE`.
const ZEROPAGE_MODE_DONTWAKE: u64 = 1;
/// `UFFDIO_WRITEPROTECT_MODE_WP`.
const WRITEPROTECT_MODE_WP: u64 = 1;

/// `struct uffdio_api`.
#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

/// `struct uffdio_range`.
#[repr(C)]
#[derive(Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

impl UffdioRange {
    fn new(start: usize, len: usize) -> UffdioRange {
        UffdioRange {
            start: start as u64,
            len: len as u64,
        }
    }
}

/// `struct uffdio_register`.
#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

/// `struct uffdio_copy`.
#[repr(C)]
struct UffdioCopy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

/// `struct uffdio_zeropage`.
#[repr(C)]
struct UffdioZeropage {
    range: UffdioRange,
    mode: u64,
    zeropage: i64,
}

/// `struct uffdio_poison`.
#[repr(C)]
struct UffdioPoison {
    range: UffdioRange,
    mode: u64,
    updated: i64,
}

/// `struct uffdio_writeprotect`.
#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

/// `struct uffd_msg`: the event byte and its three 64-bit arguments
/// (a page fault's flags and address; a remap's from, to and length; a
/// remove's or unmap's start and end).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Msg {
    /// `UFFD_EVENT_*`.
    pub event: u8,
    _reserved1: u8,
    _reserved2: u16,
    _reserved3: u32,
    /// The event's arguments.
    pub arg: [u64; 3],
}

const _: () = assert!(std::mem::size_of::<Msg>() == 32);

/// How the userfaultfd was opened, which decides whether the kernel's own
/// accesses to a missing page (a `read(2)` into it, say) are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum UffdMode {
    /// Through /dev/userfaultfd (`USERFAULTFD_IOC_NEW`): all faults.
    Device,
    /// The `userfaultfd` system call without `UFFD_USER_MODE_ONLY`
    /// (`CAP_SYS_PTRACE` or `vm.unprivileged_userfaultfd=1`): all faults.
    Syscall,
    /// `UFFD_USER_MODE_ONLY`: faults from user mode only. A system call that
    /// reads or writes a page kept in the store fails with `EFAULT`; fault
    /// the range in first (`Region::touch`).
    UserModeOnly,
}

/// Which ways of opening a userfaultfd to try, in order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum UffdOpen {
    /// /dev/userfaultfd, then the system call, then user mode only.
    #[default]
    Auto,
    /// /dev/userfaultfd only.
    Device,
    /// The system call for all faults only.
    Syscall,
    /// The system call with `UFFD_USER_MODE_ONLY` only.
    UserModeOnly,
}

/// An open userfaultfd: a descriptor and how it was opened, copied freely
/// by the workers; its owner closes it once ([`Uffd::close`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Uffd {
    fd: libc::c_int,
    mode: UffdMode,
}

fn last_err() -> io::Error {
    io::Error::last_os_error()
}

/// Opens a userfaultfd in one way, without the API handshake.
fn open_raw(mode: UffdMode) -> io::Result<libc::c_int> {
    let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
    match mode {
        UffdMode::Device => {
            // SAFETY: a NUL-terminated path and plain flags.
            let dev =
                unsafe { libc::open(c"/dev/userfaultfd".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
            if dev < 0 {
                return Err(last_err());
            }
            // SAFETY: USERFAULTFD_IOC_NEW takes the new descriptor's flags as
            // its argument and returns a descriptor.
            let fd = unsafe { libc::ioctl(dev, USERFAULTFD_IOC_NEW, flags) };
            let err = last_err();
            // SAFETY: `dev` is ours and open.
            unsafe { libc::close(dev) };
            if fd < 0 {
                Err(err)
            } else {
                Ok(crate::descriptors::out_of_the_way(fd))
            }
        }
        UffdMode::Syscall | UffdMode::UserModeOnly => {
            let extra = if mode == UffdMode::UserModeOnly {
                UFFD_USER_MODE_ONLY
            } else {
                0
            };
            // SAFETY: the userfaultfd system call takes flags only.
            let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags | extra) };
            if fd < 0 {
                Err(last_err())
            } else {
                Ok(crate::descriptors::out_of_the_way(fd as libc::c_int))
            }
        }
    }
}

/// Of the errnos of the ways tried, in order, the one that says best why
/// none worked: the first that is neither `ENOENT` (no /dev/userfaultfd)
/// nor `EINVAL` (a flag this kernel does not know), else the last.
fn telling_errno(errnos: &[i32]) -> i32 {
    errnos
        .iter()
        .copied()
        .find(|&e| e != libc::ENOENT && e != libc::EINVAL)
        .or_else(|| errnos.last().copied())
        .unwrap_or(libc::ENOSYS)
}

/// Whether a userfaultfd with the region's features can be opened the ways
/// `how` allows: the mode that opened one (it is closed again), or why
/// none could be.
pub fn probe(how: UffdOpen) -> Result<UffdMode, RegionError> {
    let uffd = Uffd::open(how, false)?;
    let mode = uffd.mode();
    uffd.close();
    Ok(mode)
}

impl Uffd {
    /// Opens a userfaultfd the ways `how` allows and completes the API
    /// handshake with the region's features ([`FEATURES`]).
    /// With `sigbus`, faults are sent to the faulting thread as `SIGBUS`
    /// (`UFFD_FEATURE_SIGBUS`).
    pub(crate) fn open(how: UffdOpen, sigbus: bool) -> Result<Uffd, RegionError> {
        let order: &[UffdMode] = match how {
            UffdOpen::Auto => &[UffdMode::Device, UffdMode::Syscall, UffdMode::UserModeOnly],
            UffdOpen::Device => &[UffdMode::Device],
            UffdOpen::Syscall => &[UffdMode::Syscall],
            UffdOpen::UserModeOnly => &[UffdMode::UserModeOnly],
        };
        let mut tried = Vec::new();
        let mut errnos = Vec::new();
        for &mode in order {
            match open_raw(mode) {
                Ok(fd) => {
                    let uffd = Uffd { fd, mode };
                    let poison = POISON.load(std::sync::atomic::Ordering::Relaxed) != 2;
                    match uffd.handshake(sigbus, poison) {
                        Ok(()) => {
                            if poison {
                                POISON.store(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            return Ok(uffd);
                        }
                        Err(RegionError::Userfaultfd { errno, .. })
                            if poison && errno == libc::EINVAL =>
                        {
                            // A kernel before 6.6: the handshake is made
                            // once per descriptor, so on a new one.
                            uffd.close();
                            POISON.store(2, std::sync::atomic::Ordering::Relaxed);
                            return Uffd::open_mode(mode, sigbus);
                        }
                        Err(e) => {
                            uffd.close();
                            return Err(e);
                        }
                    }
                }
                Err(e) => {
                    tried.push(format!("{mode:?}: {e}"));
                    errnos.push(e.raw_os_error().unwrap_or(libc::ENOSYS));
                }
            }
        }
        Err(RegionError::Userfaultfd {
            why: tried.join("; "),
            errno: telling_errno(&errnos),
        })
    }

    /// Opens one in `mode` on a kernel whose answer on `UFFD_FEATURE_POISON`
    /// is known.
    fn open_mode(mode: UffdMode, sigbus: bool) -> Result<Uffd, RegionError> {
        let fd = open_raw(mode).map_err(|e| RegionError::Userfaultfd {
            why: format!("{mode:?}: {e}"),
            errno: e.raw_os_error().unwrap_or(libc::ENOSYS),
        })?;
        let uffd = Uffd { fd, mode };
        let poison = POISON.load(std::sync::atomic::Ordering::Relaxed) == 1;
        if let Err(e) = uffd.handshake(sigbus, poison) {
            uffd.close();
            return Err(e);
        }
        Ok(uffd)
    }

    /// `UFFDIO_API` with the region's features (and `UFFD_FEATURE_SIGBUS`
    /// when `sigbus`, `UFFD_FEATURE_POISON` when `poison`).
    fn handshake(&self, sigbus: bool, poison: bool) -> Result<(), RegionError> {
        let mut api = UffdioApi {
            api: UFFD_API,
            features: FEATURES
                | if sigbus { FEATURE_SIGBUS } else { 0 }
                | if poison { FEATURE_POISON } else { 0 },
            ioctls: 0,
        };
        // SAFETY: `api` is a valid `struct uffdio_api` the kernel reads and
        // writes.
        let r = unsafe { libc::ioctl(self.fd, UFFDIO_API, &mut api) };
        if r < 0 {
            let err = last_err();
            return Err(RegionError::Userfaultfd {
                why: format!(
                    "UFFDIO_API with write-protect and the remap, remove and unmap events{}: {err}",
                    if sigbus { " and SIGBUS faults" } else { "" }
                ),
                errno: err.raw_os_error().unwrap_or(libc::ENOSYS),
            });
        }
        Ok(())
    }

    /// Whether a message is waiting to be read (a `poll` that does not
    /// sleep).
    pub(crate) fn readable(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no timeout.
        unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents & libc::POLLIN != 0 }
    }

    /// How it was opened.
    pub(crate) fn mode(&self) -> UffdMode {
        self.mode
    }

    /// The descriptor.
    pub(crate) fn fd(&self) -> libc::c_int {
        self.fd
    }

    /// The value for a descriptor opened in `mode`.
    pub(crate) fn from_raw(fd: libc::c_int, mode: UffdMode) -> Uffd {
        Uffd { fd, mode }
    }

    /// Registers `[start, start + len)` for missing and write-protect faults.
    pub(crate) fn register(&self, start: usize, len: usize) -> io::Result<()> {
        let mut reg = UffdioRegister {
            range: UffdioRange::new(start, len),
            mode: REGISTER_MODE_MISSING | REGISTER_MODE_WP,
            ioctls: 0,
        };
        // SAFETY: a valid `struct uffdio_register`.
        unsafe { self.ioctl(UFFDIO_REGISTER, &mut reg) }
    }

    /// Unregisters a range (waking any thread waiting on it).
    pub(crate) fn unregister(&self, start: usize, len: usize) -> io::Result<()> {
        // SAFETY: a valid `struct uffdio_range`.
        unsafe { self.ioctl(UFFDIO_UNREGISTER, &mut UffdioRange::new(start, len)) }
    }

    /// `ioctl(fd, request, arg)`; its failure as the error.
    ///
    /// # Safety
    ///
    /// `arg` is the argument `request` takes, valid for what the kernel
    /// reads and writes through it.
    unsafe fn ioctl<T>(&self, request: libc::c_ulong, arg: *mut T) -> io::Result<()> {
        // SAFETY: the caller's: `arg` is what `request` takes.
        if unsafe { libc::ioctl(self.fd, request, arg) } < 0 {
            return Err(last_err());
        }
        Ok(())
    }

    /// `UFFDIO_COPY` of `len` bytes from `src` to the missing page(s) at
    /// `dst`, waking the threads waiting on them. `EEXIST`: already mapped;
    /// `EAGAIN`: the mapping is changing (an event is unread), try again
    /// after reading events.
    pub(crate) fn copy(&self, dst: usize, src: *const u8, len: usize) -> io::Result<()> {
        self.copy_mode(dst, src, len, true)
    }

    /// `UFFDIO_COPY`, waking the waiters only when `wake` (otherwise
    /// `UFFDIO_COPY_MODE_DONTWAKE`: the caller wakes them).
    pub(crate) fn copy_mode(
        &self,
        dst: usize,
        src: *const u8,
        len: usize,
        wake: bool,
    ) -> io::Result<()> {
        self.copy_with(dst, src, len, if wake { 0 } else { COPY_MODE_DONTWAKE })
    }

    /// `UFFDIO_COPY` with `UFFDIO_COPY_MODE_WP`: the page is mapped
    /// write-protected, so a write to it blocks in a write-protect fault
    /// (the zero page of `UFFDIO_ZEROPAGE` would be copied on write by the
    /// kernel alone, unseen); wakes the waiters.
    pub(crate) fn copy_protected(&self, dst: usize, src: *const u8, len: usize) -> io::Result<()> {
        self.copy_with(dst, src, len, COPY_MODE_WP)
    }

    /// `UFFDIO_COPY` with the mode bits `mode`.
    fn copy_with(&self, dst: usize, src: *const u8, len: usize, mode: u64) -> io::Result<()> {
        let mut c = UffdioCopy {
            dst: dst as u64,
            src: src as u64,
            len: len as u64,
            mode,
            copy: 0,
        };
        // SAFETY: a valid `struct uffdio_copy`; the kernel reads `len` bytes
        // at `src`, which the caller owns.
        unsafe { self.ioctl(UFFDIO_COPY, &mut c) }
    }

    /// `UFFDIO_ZEROPAGE`: maps the zero page at `dst` (read-only until the
    /// first write, which the kernel then handles alone), waking waiters.
    pub(crate) fn zeropage(&self, dst: usize, len: usize) -> io::Result<()> {
        self.zeropage_mode(dst, len, true)
    }

    /// `UFFDIO_ZEROPAGE`, waking the waiters only when `wake`.
    pub(crate) fn zeropage_mode(&self, dst: usize, len: usize, wake: bool) -> io::Result<()> {
        let mut z = UffdioZeropage {
            range: UffdioRange::new(dst, len),
            mode: if wake { 0 } else { ZEROPAGE_MODE_DONTWAKE },
            zeropage: 0,
        };
        // SAFETY: a valid `struct uffdio_zeropage`.
        unsafe { self.ioctl(UFFDIO_ZEROPAGE, &mut z) }
    }

    /// Write-protects (`protect`) or unprotects a range. Unprotecting wakes
    /// the threads blocked on its write-protect faults.
    pub(crate) fn write_protect(&self, start: usize, len: usize, protect: bool) -> io::Result<()> {
        let mut wp = UffdioWriteprotect {
            range: UffdioRange::new(start, len),
            mode: if protect { WRITEPROTECT_MODE_WP } else { 0 },
        };
        // SAFETY: a valid `struct uffdio_writeprotect`.
        unsafe { self.ioctl(UFFDIO_WRITEPROTECT, &mut wp) }
    }

    /// `UFFDIO_POISON` of the missing page(s) at `[start, start + len)`:
    /// every access of them is a `SIGBUS` until the program drops them;
    /// wakes the threads waiting on them, which take that `SIGBUS`.
    /// `EINVAL` on a kernel before 6.6 (see [`Uffd::poisons`]).
    pub(crate) fn poison(&self, start: usize, len: usize) -> io::Result<()> {
        if !Uffd::poisons() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut p = UffdioPoison {
            range: UffdioRange::new(start, len),
            mode: 0,
            updated: 0,
        };
        // SAFETY: a valid `struct uffdio_poison`.
        unsafe { self.ioctl(UFFDIO_POISON, &mut p) }
    }

    /// Whether this process's userfaultfds were opened with
    /// `UFFD_FEATURE_POISON` (Linux 6.6 and later).
    pub(crate) fn poisons() -> bool {
        POISON.load(std::sync::atomic::Ordering::Relaxed) == 1
    }

    /// Wakes the threads waiting on faults in a range; they fault again.
    pub(crate) fn wake(&self, start: usize, len: usize) -> io::Result<()> {
        // SAFETY: a valid `struct uffdio_range`.
        unsafe { self.ioctl(UFFDIO_WAKE, &mut UffdioRange::new(start, len)) }
    }

    /// Reads up to `out.len()` messages without blocking; 0 when none.
    pub(crate) fn read(&self, out: &mut [Msg]) -> io::Result<usize> {
        // SAFETY: `out` is writable for its whole length in bytes, and `Msg`
        // is plain data of the kernel's layout.
        let n = unsafe { libc::read(self.fd, out.as_mut_ptr().cast(), std::mem::size_of_val(out)) };
        if n < 0 {
            let e = last_err();
            if e.raw_os_error() == Some(libc::EAGAIN) {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(n as usize / std::mem::size_of::<Msg>())
    }

    /// Closes the descriptor. Copies of this value must not be used after.
    pub(crate) fn close(self) {
        // SAFETY: the descriptor is the region's, closed once, by its owner.
        unsafe { libc::close(self.fd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_telling_errno_skips_a_missing_device_and_an_unknown_flag() {
        // No device, the system call refused, user mode only unknown (5.4).
        let refused = [libc::ENOENT, libc::EPERM, libc::EINVAL];
        assert_eq!(telling_errno(&refused), libc::EPERM);
        // A kernel without userfaultfd.
        let missing = [libc::ENOENT, libc::ENOSYS, libc::ENOSYS];
        assert_eq!(telling_errno(&missing), libc::ENOSYS);
        assert_eq!(telling_errno(&[libc::ENOENT, libc::EINVAL]), libc::EINVAL);
        assert_eq!(telling_errno(&[]), libc::ENOSYS);
    }
}
