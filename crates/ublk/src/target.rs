//! What serves a device's requests: the [`BlockTarget`] trait, the null
//! target (and the null target whose reads do what a test says) and the
//! RAM target. Owns neither rings nor the driver's files:
//! a target only sees offsets and buffers.

use std::sync::RwLock;

/// A positive Linux errno (`libc::EIO`, `libc::ENOSPC`, ...): what a
/// target's failure completes the request with.
pub type Errno = i32;

/// A block device's contents, served to the kernel's ublk driver.
/// Offsets and lengths are bytes, multiples of the logical block size and
/// within the device's size; a queue thread calls these, several at once
/// when the device has several queues.
pub trait BlockTarget: Send + Sync {
    /// Fills `buf` with the bytes at `off`.
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), Errno>;
    /// Stores `buf` at `off`.
    fn write(&self, off: u64, buf: &[u8]) -> Result<(), Errno>;
    /// Forgets `len` bytes at `off` (later reads may return anything).
    fn discard(&self, off: u64, len: u64) -> Result<(), Errno>;
    /// Makes `len` bytes at `off` read as zeros.
    fn write_zeroes(&self, off: u64, len: u64) -> Result<(), Errno>;
    /// Makes every completed write durable.
    fn flush(&self) -> Result<(), Errno>;
}

/// A target that does no work: every request succeeds at once, and a
/// read leaves its buffer as it was (its contents are unspecified). The
/// ceiling of the front end itself, the driver and the rings.
#[derive(Clone, Copy, Debug, Default)]
pub struct NullTarget;

impl BlockTarget for NullTarget {
    fn read(&self, _off: u64, _buf: &mut [u8]) -> Result<(), Errno> {
        Ok(())
    }
    fn write(&self, _off: u64, _buf: &[u8]) -> Result<(), Errno> {
        Ok(())
    }
    fn discard(&self, _off: u64, _len: u64) -> Result<(), Errno> {
        Ok(())
    }
    fn write_zeroes(&self, _off: u64, _len: u64) -> Result<(), Errno> {
        Ok(())
    }
    fn flush(&self) -> Result<(), Errno> {
        Ok(())
    }
}

/// The null target with reads of its own: each read calls the function
/// (to fail or panic as a test needs); every other request succeeds at
/// once, as [`NullTarget`]'s.
#[derive(Clone, Copy)]
pub struct ReadsWith<F>(F);

impl<F> ReadsWith<F>
where
    F: Fn(u64, &mut [u8]) -> Result<(), Errno> + Send + Sync,
{
    /// The null target whose read of `buf` at `off` is `read(off, buf)`.
    pub fn new(read: F) -> ReadsWith<F> {
        ReadsWith(read)
    }
}

impl<F> BlockTarget for ReadsWith<F>
where
    F: Fn(u64, &mut [u8]) -> Result<(), Errno> + Send + Sync,
{
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), Errno> {
        (self.0)(off, buf)
    }
    fn write(&self, off: u64, buf: &[u8]) -> Result<(), Errno> {
        NullTarget.write(off, buf)
    }
    fn discard(&self, off: u64, len: u64) -> Result<(), Errno> {
        NullTarget.discard(off, len)
    }
    fn write_zeroes(&self, off: u64, len: u64) -> Result<(), Errno> {
        NullTarget.write_zeroes(off, len)
    }
    fn flush(&self) -> Result<(), Errno> {
        NullTarget.flush()
    }
}

/// A disk in a `Vec<u8>`, for tests: discarded and zeroed ranges read as
/// zeros.
#[derive(Debug)]
pub struct RamTarget {
    data: RwLock<Vec<u8>>,
}

impl RamTarget {
    /// A zeroed disk of `size` bytes.
    pub fn new(size: usize) -> RamTarget {
        RamTarget {
            data: RwLock::new(vec![0; size]),
        }
    }

    /// The disk's size, bytes.
    pub fn size(&self) -> u64 {
        self.data.read().unwrap_or_else(|e| e.into_inner()).len() as u64
    }

    /// A copy of `len` bytes at `off`, for a test to compare with what it
    /// wrote through the block device (`None` past the end).
    pub fn snapshot(&self, off: u64, len: usize) -> Option<Vec<u8>> {
        let data = self.data.read().unwrap_or_else(|e| e.into_inner());
        let r = range(off, len as u64, data.len())?;
        Some(data[r].to_vec())
    }

    fn zero(&self, off: u64, len: u64) -> Result<(), Errno> {
        let mut data = self.data.write().unwrap_or_else(|e| e.into_inner());
        let r = range(off, len, data.len()).ok_or(libc::EIO)?;
        data[r].fill(0);
        Ok(())
    }
}

/// `off..off + len` as indexes of a `size`-byte disk, if it lies inside.
fn range(off: u64, len: u64, size: usize) -> Option<std::ops::Range<usize>> {
    let end = off.checked_add(len)?;
    if end > size as u64 {
        return None;
    }
    Some(off as usize..end as usize)
}

impl BlockTarget for RamTarget {
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), Errno> {
        let data = self.data.read().unwrap_or_else(|e| e.into_inner());
        let r = range(off, buf.len() as u64, data.len()).ok_or(libc::EIO)?;
        buf.copy_from_slice(&data[r]);
        Ok(())
    }
    fn write(&self, off: u64, buf: &[u8]) -> Result<(), Errno> {
        let mut data = self.data.write().unwrap_or_else(|e| e.into_inner());
        let r = range(off, buf.len() as u64, data.len()).ok_or(libc::EIO)?;
        data[r].copy_from_slice(buf);
        Ok(())
    }
    fn discard(&self, off: u64, len: u64) -> Result<(), Errno> {
        self.zero(off, len)
    }
    fn write_zeroes(&self, off: u64, len: u64) -> Result<(), Errno> {
        self.zero(off, len)
    }
    fn flush(&self) -> Result<(), Errno> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ram_target_round_trip_and_bounds() {
        let t = RamTarget::new(8192);
        t.write(512, &[7u8; 1024]).unwrap();
        let mut buf = [0u8; 2048];
        t.read(0, &mut buf).unwrap();
        assert!(buf[..512].iter().all(|&b| b == 0));
        assert!(buf[512..1536].iter().all(|&b| b == 7));
        assert!(buf[1536..].iter().all(|&b| b == 0));
        t.write_zeroes(1024, 512).unwrap();
        assert_eq!(t.snapshot(1024, 512).unwrap(), vec![0; 512]);
        assert_eq!(t.snapshot(512, 512).unwrap(), vec![7; 512]);
        t.discard(512, 512).unwrap();
        assert_eq!(t.snapshot(512, 512).unwrap(), vec![0; 512]);
        assert_eq!(t.read(8192 - 512, &mut [0u8; 1024]), Err(libc::EIO));
        assert_eq!(t.write(u64::MAX, &[0u8; 1]), Err(libc::EIO));
        assert_eq!(t.snapshot(8192, 1), None);
        assert_eq!(t.size(), 8192);
    }

    #[test]
    fn null_target_succeeds_without_touching_buffers() {
        let mut buf = [9u8; 64];
        NullTarget.read(0, &mut buf).unwrap();
        assert_eq!(buf, [9u8; 64]);
        assert_eq!(NullTarget.flush(), Ok(()));
        assert_eq!(NullTarget.discard(0, 1 << 40), Ok(()));
    }
}
