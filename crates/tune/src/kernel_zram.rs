//! A device of the kernel's own zram driver: the peer zmem's store is
//! measured against (fidelity tests, `zmem bench store`) and the check of
//! `zmem advise --verify`'s prediction.
//!
//! [`KernelZram::create`] makes a new device with `hot_add` (never zram0,
//! never an existing device), sets its compressor and size, and the device
//! is reset and removed with `hot_remove` when the value drops. Nothing here
//! enables swap. It needs root and `/sys/class/zram-control`; where either
//! is missing, `create` says so and callers skip.
//!
//! I/O goes through the block device with `O_DIRECT` (the page cache would
//! otherwise absorb the writes), from and into [`PageBuffer`]s, whose
//! alignment direct I/O requires.
//!
//! This module owns the device's life and its sysfs attributes; it knows
//! nothing of the store.

use std::alloc::Layout;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::ops::{Deref, DerefMut, Range};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

const CONTROL: &str = "/sys/class/zram-control";

/// Bytes per direct I/O request (as `dd bs=1M`).
const IO_BYTES: usize = 1 << 20;

/// A device of the kernel's zram, removed when dropped.
#[derive(Debug)]
pub struct KernelZram {
    id: u32,
}

impl KernelZram {
    /// A new device of `bytes` compressing with `comp` (a name from its
    /// `comp_algorithm` list), or why the kernel's zram cannot be used here.
    pub fn create(comp: &str, bytes: u64) -> Result<KernelZram, String> {
        let dev = KernelZram::create_unsized()?;
        dev.configure(comp, bytes)?;
        Ok(dev)
    }

    /// The kernel's page size, the only page size its zram has.
    pub fn page_size() -> usize {
        // SAFETY: sysconf has no preconditions; it only reads a constant.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(n).unwrap_or(4096)
    }

    /// A new device as [`KernelZram::create`] makes it, with
    /// `algorithm_params` set before `disksize` (e.g. `level=9`) where
    /// `params` is given.
    pub(crate) fn create_with(
        comp: &str,
        params: Option<&str>,
        bytes: u64,
    ) -> Result<KernelZram, String> {
        let dev = KernelZram::create_unsized()?;
        dev.check_algorithm(comp)?;
        dev.set("comp_algorithm", comp)?;
        if let Some(p) = params {
            dev.set("algorithm_params", &format!("algo={comp} {p}"))?;
        }
        dev.set("disksize", &bytes.to_string())?;
        Ok(dev)
    }

    /// A new device with nothing set yet (for reading what this kernel's
    /// zram offers, or for applying lines in order).
    pub fn create_unsized() -> Result<KernelZram, String> {
        // SAFETY: geteuid has no preconditions and only reads process state.
        if unsafe { libc::geteuid() } != 0 {
            return Err("the kernel's zram needs root".into());
        }
        let hot_add = Path::new(CONTROL).join("hot_add");
        if !hot_add.exists() {
            return Err(format!("no {CONTROL} (zram module not loaded)"));
        }
        let id: u32 = fs::read_to_string(&hot_add)
            .map_err(|e| format!("hot_add: {e}"))?
            .trim()
            .parse()
            .map_err(|e| format!("hot_add: {e}"))?;
        if id == 0 {
            // hot_add never returns a device that exists, so this cannot be
            // the system's zram0; refuse it all the same.
            return Err("hot_add returned zram0, which zmem never uses".into());
        }
        Ok(KernelZram { id })
    }

    /// The device's sysfs attributes, by name.
    pub(crate) fn attributes(&self) -> Vec<String> {
        attribute_names(Path::new(&format!("/sys/block/zram{}", self.id)))
    }

    /// Opens the block device for direct-I/O writes at any 4 KiB-aligned
    /// offset, from 4 KiB-aligned buffers ([`PageBuffer`]).
    pub(crate) fn writer(&self) -> io::Result<File> {
        self.open(true)
    }

    fn check_algorithm(&self, comp: &str) -> Result<(), String> {
        let algos = self.read("comp_algorithm").unwrap_or_default();
        if !algorithm_names(&algos).iter().any(|a| a == comp) {
            return Err(format!(
                "the kernel's zram has no {comp} (it offers: {})",
                algos.trim()
            ));
        }
        Ok(())
    }

    fn configure(&self, comp: &str, bytes: u64) -> Result<(), String> {
        self.check_algorithm(comp)?;
        self.set("comp_algorithm", comp)?;
        self.set("disksize", &bytes.to_string())
    }

    /// Empties the device and sets it up again (`reset`, then the
    /// compressor and size), as a fresh device.
    pub fn reinit(&self, comp: &str, bytes: u64) -> Result<(), String> {
        self.set("reset", "1")?;
        self.configure(comp, bytes)
    }

    /// The device number (`zramN`).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The block device node.
    pub fn node(&self) -> PathBuf {
        PathBuf::from(format!("/dev/zram{}", self.id))
    }

    fn attr(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/sys/block/zram{}/{name}", self.id))
    }

    /// Reads a sysfs attribute.
    pub(crate) fn read(&self, name: &str) -> Result<String, String> {
        fs::read_to_string(self.attr(name)).map_err(|e| format!("zram{} {name}: {e}", self.id))
    }

    /// Writes a sysfs attribute.
    pub fn set(&self, name: &str, value: &str) -> Result<(), String> {
        fs::write(self.attr(name), value).map_err(|e| format!("zram{} {name}: {e}", self.id))
    }

    /// The `mm_stat` columns, in the kernel's order.
    pub fn mm_stat(&self) -> Result<Vec<u64>, String> {
        self.read("mm_stat")?
            .split_whitespace()
            .map(|v| v.parse().map_err(|e| format!("mm_stat {v:?}: {e}")))
            .collect()
    }

    fn open(&self, write: bool) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(libc::O_DIRECT)
            .open(self.node())
    }

    /// Writes `data` from offset 0 with direct I/O, 1 MiB a request, and
    /// waits until the device has it.
    pub fn write_all(&self, data: &PageBuffer) -> io::Result<()> {
        self.write_range(data, 0..data.len())?;
        self.open(true)?.sync_all()
    }

    /// Writes `data[range]` at offset `range.start` with direct I/O, 1 MiB a
    /// request (threads may write disjoint ranges at once). `range.start`
    /// must be a multiple of 4 KiB.
    pub fn write_range(&self, data: &PageBuffer, range: Range<usize>) -> io::Result<()> {
        let dev = self.open(true)?;
        let mut at = range.start;
        while at < range.end {
            let end = (at + IO_BYTES).min(range.end);
            dev.write_all_at(&data[at..end], at as u64)?;
            at = end;
        }
        Ok(())
    }

    /// Reads `out.len()` bytes from offset 0 with direct I/O.
    pub fn read_all(&self, out: &mut PageBuffer) -> io::Result<()> {
        self.read_range(&mut out[..], 0)
    }

    /// Reads `out.len()` bytes at `offset` with direct I/O, 1 MiB a request.
    /// `out` must start on a 4 KiB boundary (a [`PageBuffer`], or a part of
    /// one split at a 4 KiB multiple), and `offset` be a 4 KiB multiple.
    pub fn read_range(&self, out: &mut [u8], offset: usize) -> io::Result<()> {
        let dev = self.open(false)?;
        for (i, block) in out.chunks_mut(IO_BYTES).enumerate() {
            dev.read_exact_at(block, (offset + i * IO_BYTES) as u64)?;
        }
        Ok(())
    }

    /// Discards each page of `page_size` bytes, one request per page, in
    /// the order given.
    pub fn discard_pages(&self, pages: &[u64], page_size: usize) -> io::Result<()> {
        let dev = self.open(true)?;
        const BLKDISCARD: libc::c_ulong = 0x1277; // _IO(0x12, 119)
        for &p in pages {
            let range: [u64; 2] = [p * page_size as u64, page_size as u64];
            // SAFETY: BLKDISCARD reads two u64s (offset, length) from the
            // pointer, which points at `range`, alive for the call.
            let rc = unsafe { libc::ioctl(dev.as_raw_fd(), BLKDISCARD, range.as_ptr()) };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// The sysfs attributes of a zram device's directory
/// (`/sys/block/zramN`), by name, sorted; none where it cannot be read.
pub(crate) fn attribute_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The compressors a `comp_algorithm` value lists (`lzo [lz4] zstd`: the
/// one in use in brackets), by name.
pub(crate) fn algorithm_names(value: &str) -> Vec<String> {
    value
        .split_whitespace()
        .map(|a| a.trim_matches(['[', ']']).to_string())
        .collect()
}

impl Drop for KernelZram {
    fn drop(&mut self) {
        // The kernel refuses `reset` and `hot_remove` (EBUSY) while anyone
        // has the device open, and udev's blkid opens a block device for a
        // moment after it was written to: retry for a while rather than
        // leave the device behind.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let _ = self.set("reset", "1");
            match fs::write(Path::new(CONTROL).join("hot_remove"), self.id.to_string()) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => return,
            }
        }
    }
}

/// Zero-filled bytes aligned to 4 KiB, as direct I/O needs.
pub struct PageBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a PageBuffer owns its allocation exclusively, as a Vec<u8> does.
unsafe impl Send for PageBuffer {}
// SAFETY: shared access only reads, as for &[u8].
unsafe impl Sync for PageBuffer {}

impl PageBuffer {
    const ALIGN: usize = 4096;

    /// `len` zero bytes (`len` greater than 0).
    pub fn zeroed(len: usize) -> PageBuffer {
        let layout = Self::layout(len);
        // SAFETY: the layout has a nonzero size (at least one alignment unit).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        PageBuffer { ptr, len }
    }

    /// A copy of `bytes`.
    pub fn copy_of(bytes: &[u8]) -> PageBuffer {
        let mut b = PageBuffer::zeroed(bytes.len());
        b.copy_from_slice(bytes);
        b
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len.max(1), Self::ALIGN).expect("a buffer below isize::MAX")
    }
}

impl Deref for PageBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is a live allocation of at least `len` initialised
        // (zeroed, then written only through `&mut self`) bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for PageBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for PageBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this same layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) };
    }
}

impl std::fmt::Debug for PageBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageBuffer({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_buffers_are_aligned_and_hold_what_was_copied() {
        let b = PageBuffer::copy_of(&[7u8; 10_000]);
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert_eq!((b.len(), b[0], b[9_999]), (10_000, 7, 7));
        let z = PageBuffer::zeroed(3);
        assert_eq!(&z[..], &[0, 0, 0]);
    }

    #[test]
    fn a_device_round_trips_and_is_removed_on_drop() {
        let dev = match KernelZram::create("lz4", 1 << 20) {
            Ok(d) => d,
            Err(why) => {
                eprintln!("skipped: {why}");
                return;
            }
        };
        assert_ne!(dev.id(), 0);
        let mut data = PageBuffer::zeroed(1 << 20);
        for (i, b) in data.iter_mut().enumerate() {
            *b = (i / 4096 * 7 + i % 13) as u8;
        }
        dev.write_all(&data).unwrap();
        assert_eq!(dev.mm_stat().unwrap()[0], 1 << 20, "orig_data_size");
        let mut back = PageBuffer::zeroed(1 << 20);
        dev.read_all(&mut back).unwrap();
        assert!(back[..] == data[..]);
        dev.discard_pages(&[0, 5], 4096).unwrap();
        assert_eq!(dev.mm_stat().unwrap()[0], (1 << 20) - 2 * 4096);
        let sys = PathBuf::from(format!("/sys/block/zram{}", dev.id()));
        assert!(sys.exists());
        drop(dev);
        assert!(!sys.exists(), "hot_remove took the device away");
    }
}
