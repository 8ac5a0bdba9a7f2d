//! Errors a block device reports, the Linux errno values they carry, and the
//! NBD error numbers they become.
//!
//! This module owns [`Errno`], the one typed Linux errno of zmem: a name and
//! a number (`Errno::EINVAL.name() == "EINVAL"`, `.number() == 22`). NBD
//! replies and the control surface's errors both carry it. The NBD protocol
//! allows only a short list of values in a reply's `error` field;
//! [`Errno::code`] maps every errno onto that list (the others become `EIO`).
//! [`DeviceError`] pairs an errno with a message for a human, which the
//! server sends in structured error chunks and writes to the log. It knows
//! nothing of sockets or of the wire layout of a reply.

use std::borrow::Cow;
use std::fmt;
use std::io;

/// Declares [`Errno`] from one list of names and Linux numbers.
macro_rules! errnos {
    ($($(#[doc = $doc:literal])* $name:ident = $number:literal,)*) => {
        /// A Linux error number, by its C name.
        ///
        /// The numbers are Linux's (asm-generic). `ENOTSUP` is
        /// [`Errno::ENOTSUP`], Linux's other name for `EOPNOTSUPP`.
        #[allow(clippy::upper_case_acronyms)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(i32)]
        pub enum Errno {
            $($(#[doc = $doc])* $name = $number,)*
        }

        impl Errno {
            /// Every errno this type names, in number order.
            pub const ALL: &'static [Errno] = &[$(Errno::$name),*];

            /// The C name (`"EINVAL"`, ...).
            pub fn name(self) -> &'static str {
                match self {
                    $(Errno::$name => stringify!($name),)*
                }
            }
        }
    };
}

errnos! {
    /// `EPERM` (1): operation not permitted (a read-only export).
    EPERM = 1,
    /// `ENOENT` (2): no such file, or no such export.
    ENOENT = 2,
    /// `EIO` (5): the device failed.
    EIO = 5,
    /// `E2BIG` (7): a value too long (a compressor name of 128 bytes or more).
    E2BIG = 7,
    /// `ENOMEM` (12): out of memory.
    ENOMEM = 12,
    /// `EACCES` (13): permission denied.
    EACCES = 13,
    /// `ENOTBLK` (15): a block device is required.
    ENOTBLK = 15,
    /// `EBUSY` (16): busy: a setting fixed once the disk is initialised, or
    /// an export with clients.
    EBUSY = 16,
    /// `EEXIST` (17): the name is in use.
    EEXIST = 17,
    /// `ENODEV` (19): no such device (writeback without a backing device).
    ENODEV = 19,
    /// `EISDIR` (21): a directory where a file is needed.
    EISDIR = 21,
    /// `EINVAL` (22): a malformed or out-of-range request.
    EINVAL = 22,
    /// `ENOSPC` (28): no space left, or a write past the end of the export.
    ENOSPC = 28,
    /// `ERANGE` (34): a value out of range (a page index past the disk).
    ERANGE = 34,
    /// `EOVERFLOW` (75): a read too large to send unfragmented.
    EOVERFLOW = 75,
    /// `EOPNOTSUPP` (95, also `ENOTSUP`): not supported; the required NBD
    /// answer when a fast zero cannot be done quickly.
    EOPNOTSUPP = 95,
    /// `ESHUTDOWN` (108): the server is shutting down.
    ESHUTDOWN = 108,
}

impl Errno {
    /// `ENOTSUP`: on Linux the same number (95) as `EOPNOTSUPP`, the name
    /// the NBD protocol uses.
    pub const ENOTSUP: Errno = Errno::EOPNOTSUPP;

    /// The Linux number (positive).
    pub fn number(self) -> i32 {
        self as i32
    }

    /// The errno with Linux number `number`, if this type names it.
    pub fn from_number(number: i32) -> Option<Errno> {
        Errno::ALL.iter().copied().find(|e| e.number() == number)
    }

    /// The errno called `name` (`"EINVAL"`; `"ENOTSUP"` is
    /// [`Errno::EOPNOTSUPP`]), if this type names it.
    pub fn from_name(name: &str) -> Option<Errno> {
        if name == "ENOTSUP" {
            return Some(Errno::ENOTSUP);
        }
        Errno::ALL.iter().copied().find(|e| e.name() == name)
    }

    /// The errno an NBD reply carries for this one: itself if the protocol
    /// defines it (`EPERM`, `EIO`, `ENOMEM`, `EINVAL`, `ENOSPC`,
    /// `EOVERFLOW`, `ENOTSUP`, `ESHUTDOWN`), `EIO` otherwise.
    pub fn nbd(self) -> Errno {
        match self {
            Errno::EPERM
            | Errno::EIO
            | Errno::ENOMEM
            | Errno::EINVAL
            | Errno::ENOSPC
            | Errno::EOVERFLOW
            | Errno::EOPNOTSUPP
            | Errno::ESHUTDOWN => self,
            _ => Errno::EIO,
        }
    }

    /// The number sent on the wire in an NBD reply (see [`Errno::nbd`]).
    pub fn code(self) -> u32 {
        self.nbd().number().unsigned_abs()
    }

    /// The errno for an NBD wire number, if the protocol defines it.
    pub fn from_code(code: u32) -> Option<Errno> {
        let e = Errno::from_number(i32::try_from(code).ok()?)?;
        (e.nbd() == e).then_some(e)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed device operation: an [`Errno`] for the client (sent as
/// [`Errno::code`]) and a message for a human.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceError {
    errno: Errno,
    message: Cow<'static, str>,
}

/// Result of a device operation.
pub type DeviceResult<T> = Result<T, DeviceError>;

impl DeviceError {
    /// An error with the given number and message.
    pub fn new(errno: Errno, message: impl Into<Cow<'static, str>>) -> Self {
        DeviceError {
            errno,
            message: message.into(),
        }
    }

    /// `EIO`: the device failed.
    pub fn io(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Errno::EIO, message)
    }

    /// `EINVAL`: the request is malformed or out of range.
    pub fn invalid(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Errno::EINVAL, message)
    }

    /// `ENOSPC`: no space left (a full memory limit, or a write past the end).
    pub fn no_space(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Errno::ENOSPC, message)
    }

    /// `EPERM`: the device is read-only.
    pub fn read_only() -> Self {
        Self::new(Errno::EPERM, "the export is read-only")
    }

    /// `ENOTSUP`: the operation is not supported by this device.
    pub fn not_supported(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Errno::EOPNOTSUPP, message)
    }

    /// The answer to a fast-zero request the device cannot do quickly
    /// (`ENOTSUP`, as the protocol requires, so the client falls back to
    /// writing zeroes itself).
    pub fn not_fast() -> Self {
        Self::new(Errno::EOPNOTSUPP, "cannot zero this range quickly")
    }

    /// The error number sent to the client.
    pub fn errno(&self) -> Errno {
        self.errno
    }

    /// The message for a human.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.errno, self.message)
    }
}

impl std::error::Error for DeviceError {}

impl From<io::Error> for DeviceError {
    /// Maps an I/O error the way nbdkit does: permission to `EPERM`, invalid
    /// input to `EINVAL`, a full disk or quota to `ENOSPC`, out of memory to
    /// `ENOMEM`, unsupported to `ENOTSUP`, anything else to `EIO`.
    fn from(e: io::Error) -> Self {
        let errno = match e.kind() {
            io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => Errno::EPERM,
            io::ErrorKind::InvalidInput => Errno::EINVAL,
            io::ErrorKind::StorageFull
            | io::ErrorKind::QuotaExceeded
            | io::ErrorKind::FileTooLarge => Errno::ENOSPC,
            io::ErrorKind::OutOfMemory => Errno::ENOMEM,
            io::ErrorKind::Unsupported => Errno::EOPNOTSUPP,
            _ => Errno::EIO,
        };
        DeviceError::new(errno, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for e in [
            Errno::EPERM,
            Errno::EIO,
            Errno::ENOMEM,
            Errno::EINVAL,
            Errno::ENOSPC,
            Errno::EOVERFLOW,
            Errno::EOPNOTSUPP,
            Errno::ESHUTDOWN,
        ] {
            assert_eq!(Errno::from_code(e.code()), Some(e));
        }
        assert_eq!(Errno::from_code(0), None);
        assert_eq!(Errno::from_code(2), None);
        assert_eq!(Errno::from_code(16), None, "EBUSY is not on the wire");
    }

    #[test]
    fn names_and_numbers_are_linuxs() {
        for (e, name, number) in [
            (Errno::EPERM, "EPERM", 1),
            (Errno::ENOENT, "ENOENT", 2),
            (Errno::EIO, "EIO", 5),
            (Errno::E2BIG, "E2BIG", 7),
            (Errno::ENOMEM, "ENOMEM", 12),
            (Errno::EACCES, "EACCES", 13),
            (Errno::ENOTBLK, "ENOTBLK", 15),
            (Errno::EBUSY, "EBUSY", 16),
            (Errno::EEXIST, "EEXIST", 17),
            (Errno::ENODEV, "ENODEV", 19),
            (Errno::EISDIR, "EISDIR", 21),
            (Errno::EINVAL, "EINVAL", 22),
            (Errno::ENOSPC, "ENOSPC", 28),
            (Errno::ERANGE, "ERANGE", 34),
            (Errno::EOVERFLOW, "EOVERFLOW", 75),
            (Errno::EOPNOTSUPP, "EOPNOTSUPP", 95),
            (Errno::ESHUTDOWN, "ESHUTDOWN", 108),
        ] {
            assert_eq!((e.name(), e.number()), (name, number));
            assert_eq!(e.to_string(), name);
            assert_eq!(Errno::from_name(name), Some(e));
            assert_eq!(Errno::from_number(number), Some(e));
        }
        assert_eq!(Errno::ALL.len(), 17);
        assert!(Errno::ALL.windows(2).all(|w| w[0].number() < w[1].number()));
        assert_eq!(Errno::ENOTSUP, Errno::EOPNOTSUPP);
        assert_eq!(Errno::from_name("ENOTSUP"), Some(Errno::EOPNOTSUPP));
        assert_eq!(Errno::from_name("EWHATEVER"), None);
        assert_eq!(Errno::from_number(0), None);
    }

    #[test]
    fn errnos_the_protocol_lacks_go_on_the_wire_as_eio() {
        assert_eq!(Errno::EINVAL.code(), 22);
        assert_eq!(Errno::EOPNOTSUPP.code(), 95);
        for e in [Errno::EBUSY, Errno::ENOENT, Errno::E2BIG, Errno::ERANGE] {
            assert_eq!(e.nbd(), Errno::EIO, "{e}");
            assert_eq!(e.code(), 5, "{e}");
        }
        let e = DeviceError::new(Errno::EBUSY, "busy");
        assert_eq!(e.to_string(), "EBUSY: busy");
        assert_eq!(e.errno().code(), 5);
    }

    #[test]
    fn io_errors_map() {
        let e: DeviceError = io::Error::from(io::ErrorKind::PermissionDenied).into();
        assert_eq!(e.errno(), Errno::EPERM);
        let e: DeviceError = io::Error::from(io::ErrorKind::StorageFull).into();
        assert_eq!(e.errno(), Errno::ENOSPC);
        let e: DeviceError = io::Error::other("boom").into();
        assert_eq!(e.errno(), Errno::EIO);
        assert_eq!(DeviceError::not_fast().errno(), Errno::EOPNOTSUPP);
    }
}
