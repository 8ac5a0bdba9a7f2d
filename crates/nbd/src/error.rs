//! Errors a block device reports, and the NBD error numbers they become.
//!
//! This module owns the mapping from a device failure to the `error` field of
//! an NBD reply. The protocol allows only a short list of values (they happen
//! to be the common Linux errno numbers); [`Errno`] is exactly that list and
//! [`DeviceError`] pairs one of them with a message for a human, which the
//! server sends in structured error chunks and writes to the log. It knows
//! nothing of sockets or of the wire layout of a reply.

use std::borrow::Cow;
use std::fmt;
use std::io;

/// An error value the NBD protocol allows in a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Errno {
    /// `EPERM` (1): the export is read-only, or policy forbids the operation.
    Perm,
    /// `EIO` (5): the device failed.
    Io,
    /// `ENOMEM` (12): out of memory (the spec says servers should avoid it).
    NoMem,
    /// `EINVAL` (22): a malformed or out-of-range request.
    Inval,
    /// `ENOSPC` (28): no space left, or a write past the end of the export.
    NoSpc,
    /// `EOVERFLOW` (75): a read too large to send unfragmented.
    Overflow,
    /// `ENOTSUP` (95): not supported; the required answer when a fast zero
    /// cannot be done quickly.
    NotSup,
    /// `ESHUTDOWN` (108): the server is shutting down.
    Shutdown,
}

impl Errno {
    /// The number sent on the wire.
    pub fn code(self) -> u32 {
        match self {
            Errno::Perm => 1,
            Errno::Io => 5,
            Errno::NoMem => 12,
            Errno::Inval => 22,
            Errno::NoSpc => 28,
            Errno::Overflow => 75,
            Errno::NotSup => 95,
            Errno::Shutdown => 108,
        }
    }

    /// The variant for a wire number, if the protocol defines it.
    pub fn from_code(code: u32) -> Option<Errno> {
        Some(match code {
            1 => Errno::Perm,
            5 => Errno::Io,
            12 => Errno::NoMem,
            22 => Errno::Inval,
            28 => Errno::NoSpc,
            75 => Errno::Overflow,
            95 => Errno::NotSup,
            108 => Errno::Shutdown,
            _ => return None,
        })
    }

    /// The C name (`"EIO"`, ...), for logs.
    pub fn name(self) -> &'static str {
        match self {
            Errno::Perm => "EPERM",
            Errno::Io => "EIO",
            Errno::NoMem => "ENOMEM",
            Errno::Inval => "EINVAL",
            Errno::NoSpc => "ENOSPC",
            Errno::Overflow => "EOVERFLOW",
            Errno::NotSup => "ENOTSUP",
            Errno::Shutdown => "ESHUTDOWN",
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed device operation: an [`Errno`] for the client and a message for a
/// human.
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
        Self::new(Errno::Io, message)
    }

    /// `EINVAL`: the request is malformed or out of range.
    pub fn invalid(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Errno::Inval, message)
    }

    /// `ENOSPC`: no space left (a full memory limit, or a write past the end).
    pub fn no_space(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Errno::NoSpc, message)
    }

    /// `EPERM`: the device is read-only.
    pub fn read_only() -> Self {
        Self::new(Errno::Perm, "the export is read-only")
    }

    /// `ENOTSUP`: the operation is not supported by this device.
    pub fn not_supported(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Errno::NotSup, message)
    }

    /// The answer to a fast-zero request the device cannot do quickly
    /// (`ENOTSUP`, as the protocol requires, so the client falls back to
    /// writing zeroes itself).
    pub fn not_fast() -> Self {
        Self::new(Errno::NotSup, "cannot zero this range quickly")
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
            io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => Errno::Perm,
            io::ErrorKind::InvalidInput => Errno::Inval,
            io::ErrorKind::StorageFull
            | io::ErrorKind::QuotaExceeded
            | io::ErrorKind::FileTooLarge => Errno::NoSpc,
            io::ErrorKind::OutOfMemory => Errno::NoMem,
            io::ErrorKind::Unsupported => Errno::NotSup,
            _ => Errno::Io,
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
            Errno::Perm,
            Errno::Io,
            Errno::NoMem,
            Errno::Inval,
            Errno::NoSpc,
            Errno::Overflow,
            Errno::NotSup,
            Errno::Shutdown,
        ] {
            assert_eq!(Errno::from_code(e.code()), Some(e));
        }
        assert_eq!(Errno::from_code(0), None);
        assert_eq!(Errno::from_code(2), None);
    }

    #[test]
    fn io_errors_map() {
        let e: DeviceError = io::Error::from(io::ErrorKind::PermissionDenied).into();
        assert_eq!(e.errno(), Errno::Perm);
        let e: DeviceError = io::Error::from(io::ErrorKind::StorageFull).into();
        assert_eq!(e.errno(), Errno::NoSpc);
        let e: DeviceError = io::Error::other("boom").into();
        assert_eq!(e.errno(), Errno::Io);
        assert_eq!(DeviceError::not_fast().errno(), Errno::NotSup);
    }
}
