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
//!   the tag's buffer;
//! - DISCARD and WRITE_ZEROES free the pages' slots (an empty slot reads
//!   as zeros), as zram maps both to its discard;
//! - FLUSH does nothing: the store is RAM;
//! - a full `mem_limit` or allocator fails a write with `ENOSPC` (the
//!   block layer's `BLK_STS_NOSPC`, an I/O error to a filesystem or swap),
//!   a page that does not decompress fails with `EIO`.
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
use zram::{Store, StoreError};

use crate::ctl_error::CtlError;

pub use ublk::{remove_abandoned, Abandoned};

/// The logical block of every device: one store page.
pub const BLOCK_SHIFT: u8 = 12;

/// The largest request, bytes (each tag of each queue has a buffer this
/// large, touched only as requests that large come).
pub const MAX_IO_BYTES: u32 = 512 << 10;

/// The default requests in flight per queue.
pub const DEFAULT_DEPTH: u16 = 128;

/// In swap mode every buffer is locked from the start (queues x depth x
/// the largest request): smaller requests and fewer of them, 8 MiB for two
/// queues (the block layer splits larger requests).
pub const SWAP_MAX_IO_BYTES: u32 = 128 << 10;

/// The default requests in flight per queue in swap mode.
pub const SWAP_DEPTH: u16 = 32;

/// A store as a ublk block device's contents.
pub struct StoreTarget {
    store: Arc<Store>,
    page: usize,
}

impl StoreTarget {
    /// The target over `store`, whose page must be the device's logical
    /// block (4 KiB).
    pub fn new(store: Arc<Store>) -> StoreTarget {
        let page = store.page_size();
        StoreTarget { store, page }
    }

    /// `(first page, pages)` of a byte range; the driver only sends ranges
    /// of whole blocks inside the device.
    fn pages(&self, off: u64, len: u64) -> Result<(u64, u64), ublk::Errno> {
        let page = self.page as u64;
        let end = off.checked_add(len).ok_or(libc::EINVAL)?;
        if off % page != 0 || len % page != 0 || end > self.store.disk_size() {
            return Err(libc::EINVAL);
        }
        Ok((off / page, len / page))
    }
}

/// The errno a store error completes a request with: the NBD side's
/// ([`crate::device::store_errno`]).
pub fn ublk_errno(e: &StoreError) -> ublk::Errno {
    crate::device::store_errno(e).number()
}

impl ublk::BlockTarget for StoreTarget {
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), ublk::Errno> {
        let (first, _) = self.pages(off, buf.len() as u64)?;
        for (i, page) in buf.chunks_exact_mut(self.page).enumerate() {
            self.store
                .read_page(first + i as u64, page)
                .map_err(|e| ublk_errno(&e))?;
        }
        Ok(())
    }

    fn write(&self, off: u64, buf: &[u8]) -> Result<(), ublk::Errno> {
        let (first, _) = self.pages(off, buf.len() as u64)?;
        for (i, page) in buf.chunks_exact(self.page).enumerate() {
            self.store
                .write_page(first + i as u64, page)
                .map_err(|e| ublk_errno(&e))?;
        }
        Ok(())
    }

    fn discard(&self, off: u64, len: u64) -> Result<(), ublk::Errno> {
        let (first, count) = self.pages(off, len)?;
        self.store.discard(first, count).map_err(|e| ublk_errno(&e))
    }

    fn write_zeroes(&self, off: u64, len: u64) -> Result<(), ublk::Errno> {
        let (first, count) = self.pages(off, len)?;
        self.store
            .write_zeroes(first, count)
            .map_err(|e| ublk_errno(&e))
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

impl Drop for UblkExports {
    fn drop(&mut self) {
        self.stop_all();
    }
}
