//! The backend interface: what an exported block device must provide.
//!
//! This module owns the [`BlockDevice`] trait, shaped like nbdkit's backend
//! vtable: capability probes (`can_trim`, `can_zero`, ...) that decide which
//! transmission flags an export advertises, and data operations (`read_at`,
//! `write_at`, `flush`, `trim`, `write_zeroes`, `cache`, `block_status`). It
//! knows nothing of sockets, the wire format or threads; the server calls these
//! methods from several worker threads at once, hence `Send + Sync`.
//!
//! # The server's promises to a device
//! - Every range it passes lies inside `0..size()` (offset + length never
//!   overflows and never exceeds the size read when the request arrived) and
//!   has a non-zero length.
//! - If `block_size().minimum` is greater than 1, every offset and length is a
//!   multiple of it: the server answers unaligned requests with `EINVAL`
//!   itself. A device that can only do whole blocks but wants to serve any
//!   byte range should be wrapped in [`BlockAligned`](crate::BlockAligned),
//!   which advertises a minimum of 1 and does read-modify-write for partial
//!   blocks. Otherwise the device serves unaligned ranges itself, as
//!   [`MemDevice`](crate::MemDevice) does.
//! - `write_at`, `trim` and `write_zeroes` are only called when
//!   `is_read_only()` is false; `trim` only when `can_trim()`, `write_zeroes`
//!   only when `can_zero()`, `fast = true` only when `can_fast_zero()`,
//!   `fua = true` only when `can_fua()`, `flush` only when `can_flush()`.
//! - Requests run concurrently, also when they overlap. The NBD protocol gives
//!   no ordering between overlapping requests in flight, so the device only
//!   has to keep bytes *outside* the overlap intact.
//!
//! Capability probes are read once per connection, at the end of the
//! handshake; they should not change while a client is connected.

use crate::error::{DeviceError, DeviceResult};

/// Block size constraints, as sent in `NBD_INFO_BLOCK_SIZE`.
///
/// - `minimum`: a power of two from 1 to 64 KiB; offsets and lengths must be
///   multiples of it.
/// - `preferred`: a power of two, at least `minimum` (and at least 512);
///   requests of this size and alignment are fastest (no read-modify-write).
/// - `maximum`: the largest READ or WRITE payload; a multiple of `minimum`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSize {
    /// Smallest unit of I/O (offsets and lengths are multiples of it).
    pub minimum: u32,
    /// The size and alignment that avoid read-modify-write.
    pub preferred: u32,
    /// The largest data payload of one request.
    pub maximum: u32,
}

/// Largest `minimum` the protocol allows (64 KiB).
pub const MAX_MINIMUM_BLOCK: u32 = 64 * 1024;

impl BlockSize {
    /// Byte-granular access, 4 KiB preferred, 32 MiB maximum.
    pub const DEFAULT: BlockSize = BlockSize {
        minimum: 1,
        preferred: 4096,
        maximum: 32 * 1024 * 1024,
    };

    /// Checks the protocol's rules (see the type's documentation).
    pub fn validate(&self) -> Result<(), String> {
        let BlockSize {
            minimum,
            preferred,
            maximum,
        } = *self;
        if !minimum.is_power_of_two() || minimum > MAX_MINIMUM_BLOCK {
            return Err(format!(
                "minimum block size {minimum} is not a power of two up to 64 KiB"
            ));
        }
        if !preferred.is_power_of_two() || preferred < minimum.max(512) {
            return Err(format!(
                "preferred block size {preferred} is not a power of two >= max(minimum, 512)"
            ));
        }
        if maximum < minimum || maximum % minimum != 0 {
            return Err(format!(
                "maximum block size {maximum} is not a multiple of the minimum {minimum}"
            ));
        }
        Ok(())
    }

    /// These constraints with `maximum` lowered to `cap` (rounded down to a
    /// multiple of `minimum`, and never below `minimum`).
    pub fn capped(self, cap: u32) -> BlockSize {
        let mut max = self.maximum.min(cap);
        max -= max % self.minimum;
        BlockSize {
            maximum: max.max(self.minimum),
            ..self
        }
    }
}

impl Default for BlockSize {
    fn default() -> Self {
        BlockSize::DEFAULT
    }
}

/// Allocation state of a run of bytes (`base:allocation` metadata context).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Length of the run in bytes (non-zero).
    pub length: u64,
    /// `NBD_STATE_HOLE` (bit 0) and `NBD_STATE_ZERO` (bit 1) as defined by
    /// `base:allocation`; see [`Extent::HOLE`] and [`Extent::ZERO`].
    pub flags: u32,
}

impl Extent {
    /// `NBD_STATE_HOLE`: not allocated in the backing store.
    pub const HOLE: u32 = 1;
    /// `NBD_STATE_ZERO`: reads as zeroes.
    pub const ZERO: u32 = 2;

    /// A run of allocated data.
    pub fn data(length: u64) -> Extent {
        Extent { length, flags: 0 }
    }

    /// A run that is not allocated and reads as zeroes.
    pub fn hole(length: u64) -> Extent {
        Extent {
            length,
            flags: Self::HOLE | Self::ZERO,
        }
    }
}

/// A block device the server exports: a range of `size()` bytes.
///
/// Only `size`, `read_at` and `write_at` are required. The defaults describe
/// a writable device without trim, flush, FUA or multi-connection safety,
/// whose `write_zeroes` writes zero buffers (so it is never *fast*), whose
/// `cache` does nothing and whose `block_status` reports everything as data.
///
/// See the [module documentation](self) for what the server guarantees about
/// the arguments.
///
/// A tiny in-memory device (the crate's [`MemDevice`](crate::MemDevice) is
/// the full one), and what the trait's defaults give it:
///
/// ```
/// use std::sync::Mutex;
///
/// use nbd::{check_range, BlockDevice, DeviceResult, Extent};
///
/// struct Ram(Mutex<Vec<u8>>);
///
/// impl BlockDevice for Ram {
///     fn size(&self) -> u64 {
///         self.0.lock().unwrap().len() as u64
///     }
///
///     fn read_at(&self, offset: u64, buf: &mut [u8]) -> DeviceResult<()> {
///         let bytes = self.0.lock().unwrap();
///         check_range(bytes.len() as u64, offset, buf.len() as u64)?;
///         let at = offset as usize;
///         buf.copy_from_slice(&bytes[at..at + buf.len()]);
///         Ok(())
///     }
///
///     fn write_at(&self, offset: u64, data: &[u8], _fua: bool) -> DeviceResult<()> {
///         let mut bytes = self.0.lock().unwrap();
///         check_range(bytes.len() as u64, offset, data.len() as u64)?;
///         let at = offset as usize;
///         bytes[at..at + data.len()].copy_from_slice(data);
///         Ok(())
///     }
/// }
///
/// let dev = Ram(Mutex::new(vec![0; 4096]));
/// dev.write_at(512, b"hello", false).unwrap();
/// let mut buf = [0u8; 5];
/// dev.read_at(512, &mut buf).unwrap();
/// assert_eq!(&buf, b"hello");
/// // Out of range: refused, nothing changed.
/// assert!(dev.write_at(4095, b"xy", false).is_err());
/// // The defaults: zeroes are written with write_at, trim is refused, and
/// // everything is data.
/// dev.write_zeroes(512, 5, true, false).unwrap();
/// dev.read_at(512, &mut buf).unwrap();
/// assert_eq!(buf, [0; 5]);
/// assert!(!dev.can_trim() && dev.trim(0, 4096).is_err());
/// assert_eq!(dev.block_status(0, 4096).unwrap(), vec![Extent::data(4096)]);
/// ```
pub trait BlockDevice: Send + Sync {
    /// Size of the device in bytes.
    fn size(&self) -> u64;

    /// Block size constraints (`NBD_INFO_BLOCK_SIZE`). The server caps the
    /// maximum at its own request limit.
    fn block_size(&self) -> BlockSize {
        BlockSize::DEFAULT
    }

    /// Fills `buf` with the bytes at `offset..offset + buf.len()`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DeviceResult<()>;

    /// Stores `data` at `offset`. With `fua` (force unit access) the data
    /// must be durable before this returns.
    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> DeviceResult<()>;

    /// Makes every write that has completed durable.
    fn flush(&self) -> DeviceResult<()> {
        Ok(())
    }

    /// Hints that `offset..offset + len` is no longer needed. Afterwards the
    /// range may read as anything until it is written again.
    fn trim(&self, offset: u64, len: u64) -> DeviceResult<()> {
        let _ = (offset, len);
        Err(DeviceError::not_supported("trim is not supported"))
    }

    /// Makes `offset..offset + len` read as zeroes.
    ///
    /// - `may_trim`: the device may deallocate the range (the client did not
    ///   set `NBD_CMD_FLAG_NO_HOLE`).
    /// - `fast`: the client set `NBD_CMD_FLAG_FAST_ZERO`: if zeroing would be
    ///   no faster than writing zeroes, fail at once with
    ///   [`DeviceError::not_fast`] and change nothing.
    ///
    /// The default writes buffers of zeroes with `write_at` (never fast).
    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fast: bool) -> DeviceResult<()> {
        let _ = may_trim;
        if fast {
            return Err(DeviceError::not_fast());
        }
        let chunk = len.min(1 << 20) as usize;
        let zeroes = vec![0u8; chunk];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(chunk as u64) as usize;
            self.write_at(offset + done, &zeroes[..n], false)?;
            done += n as u64;
        }
        Ok(())
    }

    /// Hints that `offset..offset + len` will be read soon (`NBD_CMD_CACHE`).
    fn cache(&self, offset: u64, len: u64) -> DeviceResult<()> {
        let _ = (offset, len);
        Ok(())
    }

    /// Allocation state of `offset..offset + len`, as consecutive extents from
    /// `offset`. The list may stop early (covering less than `len`) but must
    /// not be empty; lengths must be non-zero. The default reports one data
    /// extent.
    fn block_status(&self, offset: u64, len: u64) -> DeviceResult<Vec<Extent>> {
        let _ = offset;
        Ok(vec![Extent::data(len)])
    }

    /// Whether `trim` works (advertised as `NBD_FLAG_SEND_TRIM`).
    fn can_trim(&self) -> bool {
        false
    }

    /// Whether `write_zeroes` works (advertised as
    /// `NBD_FLAG_SEND_WRITE_ZEROES`). The default implementation does.
    fn can_zero(&self) -> bool {
        true
    }

    /// Whether `write_zeroes` honours `fast` (advertised as
    /// `NBD_FLAG_SEND_FAST_ZERO`).
    fn can_fast_zero(&self) -> bool {
        false
    }

    /// Whether `flush` is meaningful (advertised as `NBD_FLAG_SEND_FLUSH`).
    fn can_flush(&self) -> bool {
        false
    }

    /// Whether `write_at` honours `fua` (advertised as `NBD_FLAG_SEND_FUA`).
    fn can_fua(&self) -> bool {
        false
    }

    /// Whether several connections may use the device at once and see each
    /// other's completed writes and flushes (`NBD_FLAG_CAN_MULTI_CONN`).
    fn can_multi_conn(&self) -> bool {
        false
    }

    /// Whether `cache` is advertised (`NBD_FLAG_SEND_CACHE`). A no-op cache
    /// is a valid answer, so the default is yes.
    fn can_cache(&self) -> bool {
        true
    }

    /// Whether the device refuses writes (advertised as `NBD_FLAG_READ_ONLY`).
    fn is_read_only(&self) -> bool {
        false
    }
}

/// The capability queries of a [`BlockDevice`] that wraps another, each
/// answered by the device `$inner` names (an expression of `$self`): what
/// the wrapped device offers, the wrapper offers.
macro_rules! forward_capabilities {
    ($self:ident => $inner:expr) => {
        forward_capabilities!(@each $self => $inner; can_trim, can_zero,
            can_fast_zero, can_flush, can_fua, can_multi_conn, can_cache, is_read_only);
    };
    (@each $self:ident => $inner:expr; $($query:ident),+) => {
        $(
            fn $query(&$self) -> bool {
                $inner.$query()
            }
        )+
    };
}
pub(crate) use forward_capabilities;

impl<T: BlockDevice + ?Sized> BlockDevice for std::sync::Arc<T> {
    fn size(&self) -> u64 {
        (**self).size()
    }
    fn block_size(&self) -> BlockSize {
        (**self).block_size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DeviceResult<()> {
        (**self).read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> DeviceResult<()> {
        (**self).write_at(offset, data, fua)
    }
    fn flush(&self) -> DeviceResult<()> {
        (**self).flush()
    }
    fn trim(&self, offset: u64, len: u64) -> DeviceResult<()> {
        (**self).trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fast: bool) -> DeviceResult<()> {
        (**self).write_zeroes(offset, len, may_trim, fast)
    }
    fn cache(&self, offset: u64, len: u64) -> DeviceResult<()> {
        (**self).cache(offset, len)
    }
    fn block_status(&self, offset: u64, len: u64) -> DeviceResult<Vec<Extent>> {
        (**self).block_status(offset, len)
    }
    forward_capabilities!(self => (**self));
}

/// Checks that `offset..offset + len` lies inside a device of `size` bytes;
/// for devices that want to defend their own entry points.
pub fn check_range(size: u64, offset: u64, len: u64) -> DeviceResult<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(DeviceError::invalid(format!(
            "range {offset}+{len} is outside the device ({size} bytes)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_size_rules() {
        assert!(BlockSize::DEFAULT.validate().is_ok());
        let bad_min = BlockSize {
            minimum: 3,
            ..BlockSize::DEFAULT
        };
        assert!(bad_min.validate().is_err());
        let bad_pref = BlockSize {
            minimum: 4096,
            preferred: 512,
            maximum: 1 << 20,
        };
        assert!(bad_pref.validate().is_err());
        let bad_max = BlockSize {
            minimum: 4096,
            preferred: 4096,
            maximum: 5000,
        };
        assert!(bad_max.validate().is_err());
        let capped = BlockSize {
            minimum: 4096,
            preferred: 4096,
            maximum: u32::MAX - 4095,
        }
        .capped(1_000_000);
        assert_eq!(capped.maximum, 1_000_000 / 4096 * 4096);
    }

    #[test]
    fn ranges() {
        assert!(check_range(100, 0, 100).is_ok());
        assert!(check_range(100, 100, 0).is_ok());
        assert!(check_range(100, 1, 100).is_err());
        assert!(check_range(100, u64::MAX, 2).is_err());
    }
}
