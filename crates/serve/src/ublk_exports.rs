//! Exports as ublk block devices: what `zmem serve --ublk` adds.
//!
//! This module owns the ublk devices of a server's initialised exports
//! (one `/dev/ublkbN` per export, made when its store is and removed when
//! it goes) and [`StoreTarget`], a store seen as a [`ublk::BlockTarget`].
//! The [`Registry`](crate::Registry) tells it when an export's store comes
//! and goes; it never changes a store's settings and never looks at the
//! NBD side.
//!
//! # Requests
//! The devices have 4 KiB logical blocks (zram's own: the block layer
//! never sends a partial page), so every request is whole pages:
//! - READ and WRITE are `read_page`/`write_page` straight from and into
//!   the request's buffer (the queue thread's with user copy, else the
//!   tag's);
//! - DISCARD and WRITE_ZEROES free the pages' slots (an empty slot reads
//!   as zeros), as zram maps both to its discard;
//! - FLUSH does nothing: the store is RAM;
//! - a full `mem_limit` or allocator fails a write with `ENOSPC` (the
//!   block layer's `BLK_STS_NOSPC`, an I/O error to a filesystem or swap),
//!   a page that does not decompress fails with `EIO`.
//!
//! In swap mode, [`warm_up`] runs each device's I/O path once before the
//! server announces it (swap mode locks code as it is touched).
//!
//! Read-only exports are read-only block devices (`UBLK_ATTR_READ_ONLY`):
//! the block layer refuses writes before they reach this server.
//!
//! # Life
//! A device is added and started when its export is initialised (at
//! start, `disksize`, `hot_add NAME SIZE`), and stopped and deleted when
//! it is reset or removed, and when the server stops (SIGTERM, SIGINT).
//! As the kernel refuses to reset a zram disk that is open, a reset or
//! removal is refused with `EBUSY` while the block device is held
//! exclusively (mounted, swapped on, or opened with `O_EXCL`). A server
//! killed with SIGKILL cannot delete its devices; the driver removes each
//! `/dev/ublkbN` once it sees the server gone and the next `zmem serve
//! --ublk` deletes the `/dev/ublkcN` left (see
//! [`ublk::remove_abandoned`]).

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use nbd::Errno;
use zram::Store;

use crate::ctl_error::CtlError;
use crate::page_range::PageRange;

pub(crate) use ublk::remove_abandoned;

/// The logical block of every device: one store page.
pub(crate) const BLOCK_SHIFT: u8 = 12;

/// The largest request, bytes (each queue thread has a buffer this large
/// with user copy, else each tag of each queue, touched only as requests
/// that large come).
pub(crate) const MAX_IO_BYTES: u32 = 512 << 10;

/// The default requests in flight per queue.
pub(crate) const DEFAULT_DEPTH: u16 = 128;

/// In swap mode every buffer is populated and locked from the start
/// (queues x the largest request with user copy, else queues x depth x
/// the largest request): smaller requests and fewer of them, 256 KiB or
/// 8 MiB for two queues (the block layer splits larger requests).
pub(crate) const SWAP_MAX_IO_BYTES: u32 = 128 << 10;

/// The default requests in flight per queue in swap mode.
pub(crate) const SWAP_DEPTH: u16 = 32;

/// A store as a ublk block device's contents.
pub(crate) struct StoreTarget {
    range: PageRange,
}

impl StoreTarget {
    /// The target over `store`, whose page must be the device's logical
    /// block (4 KiB).
    pub(crate) fn new(store: Arc<Store>) -> StoreTarget {
        StoreTarget {
            range: PageRange::new(store),
        }
    }
}

/// The driver only sends ranges of whole blocks inside the device; any
/// other is `EINVAL`.
impl ublk::BlockTarget for StoreTarget {
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), ublk::Errno> {
        self.range.read(off, buf).map_err(|e| e.errno())
    }

    fn write(&self, off: u64, buf: &[u8]) -> Result<(), ublk::Errno> {
        self.range.write(off, buf).map_err(|e| e.errno())
    }

    fn discard(&self, off: u64, len: u64) -> Result<(), ublk::Errno> {
        self.range.discard(off, len).map_err(|e| e.errno())
    }

    fn write_zeroes(&self, off: u64, len: u64) -> Result<(), ublk::Errno> {
        self.range.write_zeroes(off, len).map_err(|e| e.errno())
    }

    fn flush(&self) -> Result<(), ublk::Errno> {
        Ok(())
    }
}

/// How every device is made.
#[derive(Clone, Copy, Debug)]
pub struct UblkSettings {
    /// Queues per device, one thread each.
    pub queues: u16,
    /// Requests in flight per queue.
    pub depth: u16,
    /// The largest request, bytes.
    pub max_io_bytes: u32,
}

/// The ublk devices of a server's exports, by export name.
pub struct UblkExports {
    settings: UblkSettings,
    devices: Mutex<BTreeMap<String, ublk::Running>>,
}

impl UblkExports {
    /// A front end making devices with `settings`; fails with one line
    /// naming the driver where ublk_drv is missing.
    pub fn new(settings: UblkSettings) -> io::Result<UblkExports> {
        // Opening the control device checks the driver and the privilege.
        ublk::Control::open()?;
        Ok(UblkExports {
            settings,
            devices: Mutex::new(BTreeMap::new()),
        })
    }

    /// Locks the device table: after the registry's list and an export's
    /// life lock, before the driver's own.
    fn devices(&self) -> MutexGuard<'_, BTreeMap<String, ublk::Running>> {
        self.devices.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `/dev/ublkbN` for export `name` over `store` (read-only if
    /// asked), replacing any device it had.
    pub fn start(
        &self,
        name: &str,
        store: &Arc<Store>,
        read_only: bool,
    ) -> Result<PathBuf, CtlError> {
        self.stop(name)?;
        if store.page_size() != 1 << BLOCK_SHIFT {
            return Err(CtlError::new(
                Errno::EINVAL,
                format!(
                    "export {name:?}: a ublk device needs 4 KiB pages, the store has {}",
                    store.page_size()
                ),
            ));
        }
        let mut opts = ublk::Options::new(store.disk_size());
        opts.queues = self.settings.queues;
        opts.depth = self.settings.depth;
        opts.max_io_bytes = self.settings.max_io_bytes;
        opts.logical_block_shift = BLOCK_SHIFT;
        opts.volatile_cache = false;
        opts.read_only = read_only;
        let fail = |what: &str, e: io::Error| {
            CtlError::new(
                Errno::ENOMEM,
                format!("export {name:?}: ublk device {what}: {e}"),
            )
        };
        let device = ublk::Device::add(&opts).map_err(|e| fail("add", e))?;
        let running = device
            .start(Arc::new(StoreTarget::new(store.clone())))
            .map_err(|e| fail("start", e))?;
        let path = running.block_path();
        log::info!(
            "export {name:?}: {} ({} queue(s) of {} requests{})",
            path.display(),
            opts.queues,
            opts.depth,
            if read_only { ", read-only" } else { "" }
        );
        self.devices().insert(name.to_string(), running);
        Ok(path)
    }

    /// Stops and deletes export `name`'s device, if it has one: its
    /// requests in flight finish first.
    pub fn stop(&self, name: &str) -> Result<(), CtlError> {
        let Some(running) = self.devices().remove(name) else {
            return Ok(());
        };
        let path = running.block_path();
        match running.stop() {
            Ok(stats) => {
                log::info!(
                    "export {name:?}: {} removed ({} reads, {} writes, {} errors)",
                    path.display(),
                    stats.total.reads,
                    stats.total.writes,
                    stats.total.errors
                );
                Ok(())
            }
            Err(e) => Err(CtlError::new(
                Errno::EIO,
                format!("export {name:?}: removing {}: {e}", path.display()),
            )),
        }
    }

    /// Why export `name`'s device may not go now: held exclusively
    /// (mounted, swapped on, `O_EXCL`), as the kernel refuses to reset an
    /// open zram disk. `None` when it has no device or nobody holds it.
    pub fn busy(&self, name: &str) -> Option<String> {
        let path = self.device_path(name)?;
        match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL)
            .open(&path)
        {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Some(format!(
                "{} is in use (mounted, swapped on or held open exclusively)",
                path.display()
            )),
            _ => None,
        }
    }

    /// Export `name`'s block device, if it has one.
    pub fn device_path(&self, name: &str) -> Option<PathBuf> {
        self.devices().get(name).map(ublk::Running::block_path)
    }

    /// Runs `warm_up` on every device, before swap mode announces them.
    pub fn warm_up_all(&self) -> io::Result<()> {
        let paths: Vec<PathBuf> = self
            .devices()
            .values()
            .map(ublk::Running::block_path)
            .collect();
        for path in paths {
            warm_up(&path)?;
        }
        Ok(())
    }

    /// Stops and deletes every device (the server is stopping); returns
    /// how many failed to go cleanly (each logged).
    pub fn stop_all(&self) -> usize {
        let names: Vec<String> = self.devices().keys().cloned().collect();
        names
            .iter()
            .filter(|n| match self.stop(n) {
                Ok(()) => false,
                Err(e) => {
                    log::error!("{e}");
                    true
                }
            })
            .count()
    }
}

/// The bytes [`warm_up`] writes: 32 pages, swap mode's largest request.
const WARM_BYTES: usize = SWAP_MAX_IO_BYTES as usize;

/// `BLKDISCARD`, `_IO(0x12, 119)`.
const BLKDISCARD: libc::c_ulong = 0x1277;

/// A page-aligned buffer for `O_DIRECT`, freed on drop.
struct Aligned {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Aligned {
    fn new(len: usize) -> io::Result<Aligned> {
        let layout = std::alloc::Layout::from_size_align(len, 4096)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        // SAFETY: `layout` has a non-zero size (callers pass WARM_BYTES).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        Ok(Aligned { ptr, layout })
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is a live, zero-initialised allocation of
        // `layout.size()` bytes that only this value refers to.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// Runs a device's whole I/O path once, from every CPU in turn (so every
/// queue thread serves it), before swap mode announces the device: in the
/// last 128 KiB of `path`, one request of text-like pages, a page of
/// random bytes (a huge page), a zero page and a same-filled one is
/// written, written again (the old objects freed), read back and compared,
/// discarded, and read again as zeros. Every code and data page a swap
/// write, read or discard touches is then present, and with swap mode's
/// `MCL_ONFAULT` locked, before the first swap-out. The device ends as it
/// began (the range reads as zeros; its io_stat counts these requests).
pub(crate) fn warm_up(path: &std::path::Path) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let fail = |what: &str, e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("warm-up of {}: {what}: {e}", path.display()),
        )
    };
    let dev = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| fail("open", e))?;
    let size =
        std::io::Seek::seek(&mut &dev, std::io::SeekFrom::End(0)).map_err(|e| fail("size", e))?;
    if size < WARM_BYTES as u64 {
        return Ok(());
    }
    let off = size - WARM_BYTES as u64;
    let mut data = Aligned::new(WARM_BYTES)?;
    let mut back = Aligned::new(WARM_BYTES)?;
    let page = 1 << BLOCK_SHIFT;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for (i, p) in data.bytes().chunks_mut(page).enumerate() {
        match i {
            29 => p.iter_mut().for_each(|b| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }),
            30 => p.fill(0),
            31 => p.fill(0xab),
            _ => {
                let line =
                    format!("warm-up page {i}: the quick brown fox jumps over the lazy dog\n");
                for (b, c) in p.iter_mut().zip(line.bytes().cycle()) {
                    *b = c;
                }
            }
        }
    }
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity fills it for
    // this thread (pid 0).
    let mut saved: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `saved` is a valid cpu_set_t of the size given.
    let got = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut saved) };
    let cpus: Vec<usize> = if got == 0 {
        // SAFETY: CPU_ISSET reads the set filled above.
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &saved) })
            .collect()
    } else {
        vec![]
    };
    let mut result = Ok(());
    for cpu in cpus.iter().map(Some).chain(cpus.is_empty().then_some(None)) {
        if let Some(&c) = cpu {
            // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes within it.
            let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: `c` is below CPU_SETSIZE (it came from the set).
            unsafe { libc::CPU_SET(c, &mut one) };
            // SAFETY: `one` is a valid cpu_set_t of the size given; pid 0
            // is this thread.
            unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &one) };
        }
        result = (|| {
            dev.write_all_at(data.bytes(), off)
                .map_err(|e| fail("write", e))?;
            dev.write_all_at(data.bytes(), off)
                .map_err(|e| fail("rewrite", e))?;
            dev.read_exact_at(back.bytes(), off)
                .map_err(|e| fail("read", e))?;
            if back.bytes() != data.bytes() {
                return Err(fail("read", io::Error::other("the data read back differ")));
            }
            let range: [u64; 2] = [off, WARM_BYTES as u64];
            // SAFETY: BLKDISCARD reads two u64s (start, length) from the
            // pointer given, which `range` holds.
            if unsafe {
                libc::ioctl(
                    std::os::fd::AsRawFd::as_raw_fd(&dev),
                    BLKDISCARD as _,
                    &range,
                )
            } != 0
            {
                return Err(fail("discard", io::Error::last_os_error()));
            }
            dev.read_exact_at(back.bytes(), off)
                .map_err(|e| fail("read after discard", e))?;
            if back.bytes().iter().any(|&b| b != 0) {
                return Err(fail(
                    "discard",
                    io::Error::other("a discarded page reads as non-zero"),
                ));
            }
            Ok(())
        })();
        if result.is_err() {
            break;
        }
    }
    if got == 0 {
        // SAFETY: `saved` is the set read above; pid 0 is this thread.
        unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &saved) };
    }
    result
}

impl Drop for UblkExports {
    fn drop(&mut self) {
        self.stop_all();
    }
}
