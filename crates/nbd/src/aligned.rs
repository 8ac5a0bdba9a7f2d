//! `BlockAligned`: serves any byte range on a device that only does whole
//! blocks, by read-modify-write.
//!
//! This module owns the adapter that turns a device which accepts only
//! block-aligned requests (say a compressed store that keeps whole 4 KiB
//! pages) into one that accepts any offset and length. A request is cut into
//! an unaligned *head* block, an aligned *middle* passed straight through, and
//! an unaligned *tail* block; head and tail are read whole, patched, and
//! written back whole. It knows nothing of the protocol or the server.
//!
//! Locking: the block index picks one of `STRIPES` `RwLock<()>` stripes. A
//! read-modify-write holds its block's stripe exclusively from the read to the
//! write-back, so two partial writes to one block cannot lose each other's
//! bytes; a whole-block write holds the stripes of its blocks shared, so it
//! cannot slip between another request's read and write-back of the same
//! block (which would revert bytes only it wrote). Every request takes all
//! its stripes at once, in ascending stripe order, and releases them when it
//! is done, so there is no lock-order cycle. Reads take no lock: a
//! write-back rewrites bytes outside its patch with the values they already
//! had, so a concurrent reader sees either old or new bytes only where the
//! two requests overlap, which the protocol leaves unspecified anyway.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::device::{check_range, forward_capabilities, BlockDevice, BlockSize, Extent};
use crate::error::{DeviceError, DeviceResult};

/// Number of lock stripes.
const STRIPES: usize = 64;

/// A part of a request that covers a block only partly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Partial {
    /// Device offset of the block.
    block_off: u64,
    /// First byte of the request inside the block.
    in_block: usize,
    /// Bytes of the request inside the block.
    len: usize,
    /// Where this part starts, counted from the request's offset.
    req_start: usize,
}

/// A request cut at block boundaries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Split {
    head: Option<Partial>,
    /// Aligned `(offset, len)` in the middle, with its start counted from the
    /// request's offset.
    middle: Option<(u64, u64, usize)>,
    tail: Option<Partial>,
}

impl Split {
    fn partials(&self) -> impl Iterator<Item = Partial> {
        self.head.into_iter().chain(self.tail)
    }
}

enum Guard<'a> {
    Shared(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

/// Wraps a device that only accepts whole, aligned blocks and serves any
/// byte range with read-modify-write. It advertises a minimum block size of 1
/// (or the one set with [`BlockAligned::with_advertised_minimum`]) and a
/// preferred block size of at least its block.
///
/// The exported size is the inner size rounded down to a whole block.
pub struct BlockAligned<D> {
    inner: D,
    block: u64,
    /// The minimum block size advertised (requests below it are still served).
    minimum: u32,
    stripes: Box<[RwLock<()>]>,
}

impl<D: BlockDevice> BlockAligned<D> {
    /// Aligns to the inner device's minimum block size.
    pub fn new(inner: D) -> BlockAligned<D> {
        let block = inner.block_size().minimum.max(1);
        BlockAligned::with_block(inner, block)
    }

    /// Advertises `minimum` as the minimum block size (a power of two, at
    /// most the block): clients are asked not to send smaller requests,
    /// though any byte range is still served with read-modify-write.
    ///
    /// # Panics
    /// If `minimum` is not a power of two or is above the block (a
    /// programming error).
    pub fn with_advertised_minimum(mut self, minimum: u32) -> BlockAligned<D> {
        assert!(
            minimum.is_power_of_two() && u64::from(minimum) <= self.block,
            "minimum {minimum} must be a power of two and at most the block"
        );
        self.minimum = minimum;
        self
    }

    /// Aligns to `block` bytes, which the inner device sees as its only
    /// request granularity.
    ///
    /// # Panics
    /// If `block` is not a power of two or is smaller than the inner
    /// device's minimum block size (a programming error).
    pub fn with_block(inner: D, block: u32) -> BlockAligned<D> {
        assert!(
            block.is_power_of_two() && block >= inner.block_size().minimum,
            "block {block} must be a power of two and at least the inner minimum"
        );
        BlockAligned {
            inner,
            block: block as u64,
            minimum: 1,
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
        }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The wrapped device, unwrapped.
    pub fn into_inner(self) -> D {
        self.inner
    }

    fn split(&self, offset: u64, len: u64) -> Split {
        let b = self.block;
        let end = offset + len;
        let mut s = Split::default();
        if len == 0 {
            return s;
        }
        let first_block = offset & !(b - 1);
        let last_block = (end - 1) & !(b - 1);
        if first_block == last_block && (offset % b != 0 || end % b != 0) {
            s.head = Some(Partial {
                block_off: first_block,
                in_block: (offset - first_block) as usize,
                len: len as usize,
                req_start: 0,
            });
            return s;
        }
        let full_start = offset.next_multiple_of(b);
        let full_end = end & !(b - 1);
        if offset % b != 0 {
            s.head = Some(Partial {
                block_off: first_block,
                in_block: (offset - first_block) as usize,
                len: (full_start - offset) as usize,
                req_start: 0,
            });
        }
        if full_end > full_start {
            s.middle = Some((
                full_start,
                full_end - full_start,
                (full_start - offset) as usize,
            ));
        }
        if end % b != 0 {
            s.tail = Some(Partial {
                block_off: full_end,
                in_block: 0,
                len: (end - full_end) as usize,
                req_start: (full_end - offset) as usize,
            });
        }
        s
    }

    fn stripe_of(&self, block_off: u64) -> usize {
        ((block_off / self.block) % STRIPES as u64) as usize
    }

    /// Takes the stripes of a write-like request: partial blocks exclusive,
    /// whole blocks shared, in ascending stripe order.
    fn lock(&self, split: &Split) -> Vec<Guard<'_>> {
        // 0 = untouched, 1 = shared, 2 = exclusive.
        let mut mode = [0u8; STRIPES];
        if let Some((off, len, _)) = split.middle {
            let blocks = len / self.block;
            if blocks >= STRIPES as u64 {
                mode = [1; STRIPES];
            } else {
                for i in 0..blocks {
                    mode[self.stripe_of(off + i * self.block)] = 1;
                }
            }
        }
        for p in split.partials() {
            mode[self.stripe_of(p.block_off)] = 2;
        }
        mode.iter()
            .zip(self.stripes.iter())
            .filter_map(|(m, l)| match m {
                1 => Some(Guard::Shared(l.read().unwrap_or_else(|e| e.into_inner()))),
                2 => Some(Guard::Exclusive(
                    l.write().unwrap_or_else(|e| e.into_inner()),
                )),
                _ => None,
            })
            .collect()
    }

    /// Reads the block of `p`, lets `patch` change the request's part of it,
    /// and writes the block back. The caller holds the stripe exclusively.
    fn modify(&self, p: Partial, fua: bool, patch: impl FnOnce(&mut [u8])) -> DeviceResult<()> {
        let mut block = vec![0u8; self.block as usize];
        self.inner.read_at(p.block_off, &mut block)?;
        patch(&mut block[p.in_block..p.in_block + p.len]);
        self.inner.write_at(p.block_off, &block, fua)
    }
}

impl<D: BlockDevice> BlockDevice for BlockAligned<D> {
    fn size(&self) -> u64 {
        self.inner.size() & !(self.block - 1)
    }

    fn block_size(&self) -> BlockSize {
        let inner = self.inner.block_size();
        let block = self.block as u32;
        BlockSize {
            minimum: self.minimum,
            preferred: inner.preferred.max(block).max(512),
            maximum: inner.maximum.max(block),
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DeviceResult<()> {
        check_range(self.size(), offset, buf.len() as u64)?;
        let split = self.split(offset, buf.len() as u64);
        if let Some((off, len, start)) = split.middle {
            self.inner
                .read_at(off, &mut buf[start..start + len as usize])?;
        }
        let mut block = Vec::new();
        for p in split.partials() {
            block.resize(self.block as usize, 0);
            self.inner.read_at(p.block_off, &mut block)?;
            buf[p.req_start..p.req_start + p.len]
                .copy_from_slice(&block[p.in_block..p.in_block + p.len]);
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> DeviceResult<()> {
        check_range(self.size(), offset, data.len() as u64)?;
        let split = self.split(offset, data.len() as u64);
        let _guards = self.lock(&split);
        if let Some((off, len, start)) = split.middle {
            self.inner
                .write_at(off, &data[start..start + len as usize], fua)?;
        }
        for p in split.partials() {
            self.modify(p, fua, |dst| {
                dst.copy_from_slice(&data[p.req_start..p.req_start + p.len])
            })?;
        }
        Ok(())
    }

    fn flush(&self) -> DeviceResult<()> {
        self.inner.flush()
    }

    /// Trims only the whole blocks in the range (trim is a hint; partial
    /// blocks keep their data).
    fn trim(&self, offset: u64, len: u64) -> DeviceResult<()> {
        check_range(self.size(), offset, len)?;
        let split = self.split(offset, len);
        match split.middle {
            Some((off, len, _)) => {
                let _guards = self.lock(&Split {
                    middle: split.middle,
                    ..Split::default()
                });
                self.inner.trim(off, len)
            }
            None => Ok(()),
        }
    }

    /// Zeroes whole blocks with the inner device's `write_zeroes` and partial
    /// blocks by read-modify-write. A fast zero that touches a partial block
    /// fails with [`DeviceError::not_fast`] before changing anything.
    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fast: bool) -> DeviceResult<()> {
        check_range(self.size(), offset, len)?;
        let split = self.split(offset, len);
        if fast && split.partials().next().is_some() {
            return Err(DeviceError::not_fast());
        }
        let _guards = self.lock(&split);
        if let Some((off, len, _)) = split.middle {
            self.inner.write_zeroes(off, len, may_trim, fast)?;
        }
        for p in split.partials() {
            self.modify(p, false, |dst| dst.fill(0))?;
        }
        Ok(())
    }

    fn cache(&self, offset: u64, len: u64) -> DeviceResult<()> {
        check_range(self.size(), offset, len)?;
        let start = offset & !(self.block - 1);
        let end = (offset + len).next_multiple_of(self.block);
        self.inner.cache(start, end - start)
    }

    fn block_status(&self, offset: u64, len: u64) -> DeviceResult<Vec<Extent>> {
        check_range(self.size(), offset, len)?;
        let start = offset & !(self.block - 1);
        let end = (offset + len).next_multiple_of(self.block);
        let inner = self.inner.block_status(start, end - start)?;
        let mut skip = offset - start;
        let mut left = len;
        let mut out = Vec::with_capacity(inner.len());
        for e in inner {
            if left == 0 {
                break;
            }
            let mut n = e.length;
            let cut = skip.min(n);
            skip -= cut;
            n -= cut;
            let n = n.min(left);
            if n > 0 {
                out.push(Extent {
                    length: n,
                    flags: e.flags,
                });
                left -= n;
            }
        }
        if out.is_empty() {
            out.push(Extent::data(len));
        }
        Ok(out)
    }

    forward_capabilities!(self => self.inner);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;

    /// Only whole 4 KiB blocks, like a page store.
    struct Strict(MemDevice);

    impl Strict {
        fn aligned(&self, off: u64, len: u64) -> DeviceResult<()> {
            if off % 4096 != 0 || len % 4096 != 0 || len == 0 {
                return Err(DeviceError::invalid(format!("unaligned {off}+{len}")));
            }
            Ok(())
        }
    }

    impl BlockDevice for Strict {
        fn size(&self) -> u64 {
            self.0.size()
        }
        fn block_size(&self) -> BlockSize {
            BlockSize {
                minimum: 4096,
                preferred: 4096,
                maximum: 1 << 20,
            }
        }
        fn read_at(&self, off: u64, buf: &mut [u8]) -> DeviceResult<()> {
            self.aligned(off, buf.len() as u64)?;
            self.0.read_at(off, buf)
        }
        fn write_at(&self, off: u64, data: &[u8], fua: bool) -> DeviceResult<()> {
            self.aligned(off, data.len() as u64)?;
            self.0.write_at(off, data, fua)
        }
        fn write_zeroes(&self, off: u64, len: u64, t: bool, f: bool) -> DeviceResult<()> {
            self.aligned(off, len)?;
            self.0.write_zeroes(off, len, t, f)
        }
        fn block_status(&self, off: u64, len: u64) -> DeviceResult<Vec<Extent>> {
            self.aligned(off, len)?;
            self.0.block_status(off, len)
        }
        fn can_fast_zero(&self) -> bool {
            true
        }
    }

    #[test]
    fn split_shapes() {
        let a = BlockAligned::new(Strict(MemDevice::new(1 << 20)));
        assert_eq!(a.split(4096, 8192).middle, Some((4096, 8192, 0)));
        let s = a.split(10, 20);
        assert_eq!(
            s.head.map(|p| (p.block_off, p.in_block, p.len)),
            Some((0, 10, 20))
        );
        assert!(s.middle.is_none() && s.tail.is_none());
        let s = a.split(4000, 10000);
        assert_eq!(s.head.map(|p| (p.in_block, p.len)), Some((4000, 96)));
        assert_eq!(s.middle, Some((4096, 8192, 96)));
        assert_eq!(
            s.tail.map(|p| (p.block_off, p.len, p.req_start)),
            Some((12288, 1712, 8288))
        );
    }

    #[test]
    fn unaligned_io_matches_model() {
        let a = BlockAligned::new(Strict(MemDevice::new(64 * 1024)));
        let mut model = vec![0u8; 64 * 1024];
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        for round in 0..500 {
            let off = next() % 60000;
            let len = 1 + next() % (64 * 1024 - off).min(9000);
            match round % 3 {
                0 => {
                    let data: Vec<u8> = (0..len).map(|i| (i as u8) ^ (round as u8)).collect();
                    a.write_at(off, &data, false).unwrap();
                    model[off as usize..(off + len) as usize].copy_from_slice(&data);
                }
                1 => {
                    a.write_zeroes(off, len, true, false).unwrap();
                    model[off as usize..(off + len) as usize].fill(0);
                }
                _ => {
                    let mut buf = vec![0u8; len as usize];
                    a.read_at(off, &mut buf).unwrap();
                    assert_eq!(buf, &model[off as usize..(off + len) as usize]);
                }
            }
        }
        let mut all = vec![0u8; 64 * 1024];
        a.read_at(0, &mut all).unwrap();
        assert_eq!(all, model);
        assert_eq!(
            a.write_zeroes(1, 10, true, true).unwrap_err().errno(),
            crate::Errno::EOPNOTSUPP
        );
    }

    #[test]
    fn concurrent_partial_writes_keep_each_others_bytes() {
        // Many threads each own a disjoint set of bytes interleaved inside
        // the same blocks; no byte may be lost to a racing write-back.
        let a = std::sync::Arc::new(BlockAligned::new(Strict(MemDevice::new(8 * 4096))));
        let threads = 8u64;
        std::thread::scope(|s| {
            for t in 0..threads {
                let a = a.clone();
                s.spawn(move || {
                    let slots = 8 * 4096 / (2 * threads);
                    for i in 0..2000u64 {
                        let k = (i * 7919) % slots;
                        let off = 2 * (k * threads + t);
                        a.write_at(off, &[t as u8 + 1, t as u8 + 1], false).unwrap();
                    }
                });
            }
        });
        let mut all = vec![0u8; 8 * 4096];
        a.read_at(0, &mut all).unwrap();
        for (i, &b) in all.iter().enumerate() {
            let owner = (i as u64 / 2) % threads;
            assert!(b == 0 || b == owner as u8 + 1, "byte {i} = {b}");
        }
        assert!(all.iter().filter(|&&b| b != 0).count() > 8 * 4096 / 2);
    }

    #[test]
    fn status_is_clipped() {
        let a = BlockAligned::new(Strict(MemDevice::new(1 << 16)));
        a.write_at(4096, &[1u8; 4096], false).unwrap();
        let ext = a.block_status(100, 9000).unwrap();
        assert_eq!(ext.iter().map(|e| e.length).sum::<u64>(), 9000);
        assert_eq!(ext[0], Extent::hole(3996));
        assert_eq!(ext[1], Extent::data(4096));
    }
}
