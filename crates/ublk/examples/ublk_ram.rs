//! Adds a ublk device backed by a RAM target, writes a pattern through
//! /dev/ublkbN with O_DIRECT from a second thread (several request
//! sizes, a flush, a discard and a write-zeroes), reads it back and
//! checks it against both what was written and the target's own bytes,
//! then stops and deletes the device and checks that it is gone. Then a
//! second device whose target fails every read with EIO: a read of
//! /dev/ublkbN fails with EIO, and dropping the running device (no
//! explicit stop) deletes it too. SIGTERM and SIGINT are held until the
//! run ends (which deletes what it added) rather than killing it. Prints
//! one `ublk_ram:` line per step and exits 0 when every check held, 1
//! otherwise. Needs ublk_drv (`modprobe ublk_drv`) and root.
//!
//!     ublk_ram [SIZE_MIB] [QUEUES]

use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::Arc;
use std::time::Instant;

use ublk::{device_info, stop_on_signals, Device, Options, RamTarget, ReadsWith};

/// A device whose reads fail: the reader sees EIO; then the running
/// device is dropped, which must delete it.
fn failing_then_dropped() -> Result<(), String> {
    let mut opts = Options::new(1 << 20);
    // The partition scan's reads fail too; the kernel only logs them.
    opts.discard = false;
    let dev = Device::add(&opts).map_err(|e| e.to_string())?;
    let id = dev.id();
    let running = dev
        .start(Arc::new(ReadsWith::new(|_, _| Err(libc::EIO))))
        .map_err(|e| e.to_string())?;
    let path = running.block_path();
    let read = std::thread::spawn(move || -> io::Result<()> {
        let f = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)?;
        let mut buf = Aligned::new(4096);
        f.read_exact_at(buf.as_mut(), 8192)
    })
    .join()
    .map_err(|_| "the reader panicked")?;
    match read {
        Err(e) if e.raw_os_error() == Some(libc::EIO) => {
            println!("ublk_ram: a read the target fails gives the reader: {e}");
        }
        other => return Err(format!("a failing read gave {other:?}, want EIO")),
    }
    drop(running);
    match device_info(id) {
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
            println!("ublk_ram: device {id} dropped while running is deleted: {e}");
            Ok(())
        }
        other => Err(format!("GET_DEV_INFO after drop: {other:?}")),
    }
}

/// `BLKGETSIZE64`: `_IOR(0x12, 114, size_t)`.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
/// `BLKDISCARD`: `_IO(0x12, 119)`.
const BLKDISCARD: libc::c_ulong = 0x1277;
/// `BLKZEROOUT`: `_IO(0x12, 127)`.
const BLKZEROOUT: libc::c_ulong = 0x127f;

/// A page-aligned buffer for O_DIRECT.
struct Aligned {
    ptr: *mut u8,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len, 4096).expect("layout");
        // SAFETY: a non-zero size (every caller asks for at least a block).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        Aligned { ptr, len }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes this value owns, borrowed mutably with it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, 4096).expect("layout");
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

/// The pattern's byte at `off`: differs between blocks and within one.
fn pattern(off: u64) -> u8 {
    let block = off / 512;
    (block.wrapping_mul(131) ^ (off % 512).wrapping_mul(7) ^ 0x5a) as u8
}

fn range_ioctl(fd: i32, req: libc::c_ulong, off: u64, len: u64) -> io::Result<()> {
    let range = [off, len];
    // SAFETY: BLKDISCARD and BLKZEROOUT read two u64s from the pointer.
    if unsafe { libc::ioctl(fd, req, range.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The I/O through the block device; returns the bytes of the pattern
/// written (the region `0..written`), with `zeroed` ranges zero.
fn exercise(path: &std::path::Path, size: u64, zeroed: &[(u64, u64)]) -> Result<u64, String> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| format!("open {} O_DIRECT: {e}", path.display()))?;
    let mut dev_size = 0u64;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer.
    if unsafe { libc::ioctl(f.as_raw_fd(), BLKGETSIZE64, &mut dev_size) } != 0 {
        return Err(format!("BLKGETSIZE64: {}", io::Error::last_os_error()));
    }
    if dev_size != size {
        return Err(format!("BLKGETSIZE64 says {dev_size}, want {size}"));
    }
    // Writes of growing sizes, the last two larger than one request (the
    // block layer splits them at max_sectors).
    let sizes = [4096usize, 8192, 65536, 512 << 10, 1 << 20, 2 << 20];
    let mut off = 0u64;
    for &n in &sizes {
        let mut buf = Aligned::new(n);
        for (i, b) in buf.as_mut().iter_mut().enumerate() {
            *b = pattern(off + i as u64);
        }
        f.write_all_at(buf.as_mut(), off)
            .map_err(|e| format!("write {n} at {off}: {e}"))?;
        off += n as u64;
    }
    let written = off;
    f.sync_all().map_err(|e| format!("fsync: {e}"))?;
    for &(zo, zl) in zeroed {
        let (req, name) = if zo == zeroed[0].0 {
            (BLKDISCARD, "BLKDISCARD")
        } else {
            (BLKZEROOUT, "BLKZEROOUT")
        };
        range_ioctl(f.as_raw_fd(), req, zo, zl).map_err(|e| format!("{name} {zo}+{zl}: {e}"))?;
    }
    // Read back in another set of sizes.
    let mut off = 0u64;
    for &n in [1usize << 20, 4096, 128 << 10].iter().cycle() {
        if off >= written {
            break;
        }
        let n = n.min((written - off) as usize);
        let mut buf = Aligned::new(n);
        f.read_exact_at(buf.as_mut(), off)
            .map_err(|e| format!("read {n} at {off}: {e}"))?;
        for (i, &b) in buf.as_mut().iter().enumerate() {
            let at = off + i as u64;
            let zero = zeroed.iter().any(|&(zo, zl)| at >= zo && at < zo + zl);
            let want = if zero { 0 } else { pattern(at) };
            if b != want {
                return Err(format!("byte {at}: read {b:#x}, want {want:#x}"));
            }
        }
        off += n as u64;
    }
    Ok(written)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let size_mib: u64 = args.next().map_or(16, |a| a.parse().expect("SIZE_MIB"));
    let queues: u16 = args.next().map_or(1, |a| a.parse().expect("QUEUES"));
    let size = size_mib << 20;
    std::process::exit(match run(size, queues) {
        Ok(()) => {
            println!("ublk_ram: PASS");
            0
        }
        Err(e) => {
            println!("ublk_ram: FAIL: {e}");
            1
        }
    });
}

fn run(size: u64, queues: u16) -> Result<(), String> {
    stop_on_signals().map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let target = Arc::new(RamTarget::new(size as usize));
    let mut opts = Options::new(size);
    opts.queues = queues;
    let dev = Device::add(&opts).map_err(|e| e.to_string())?;
    let id = dev.id();
    println!(
        "ublk_ram: added device {id}: {:?}, {} bytes",
        dev.info(),
        dev.size()
    );
    let mut running = dev.start(target.clone()).map_err(|e| e.to_string())?;
    let info = running.info().map_err(|e| format!("GET_DEV_INFO: {e}"))?;
    let devt = running
        .disk_devt()
        .map_err(|e| format!("GET_PARAMS: {e}"))?;
    println!(
        "ublk_ram: started {} in {:?}: live {}, server pid {} (ours {}), disk {}:{}",
        running.block_path().display(),
        t0.elapsed(),
        info.live,
        info.server_pid,
        std::process::id(),
        devt.0,
        devt.1
    );
    if !info.live || info.server_pid != std::process::id() as i32 {
        return Err(format!("GET_DEV_INFO after START_DEV: {info:?}"));
    }
    // One range discarded, one zeroed out, inside the written region.
    let zeroed = [(1u64 << 20, 256u64 << 10), (3u64 << 20, 64u64 << 10)];
    let path = running.block_path();
    let t1 = Instant::now();
    let io = std::thread::spawn(move || exercise(&path, size, &zeroed));
    let written = io.join().map_err(|_| "the I/O thread panicked")??;
    println!(
        "ublk_ram: wrote, flushed, discarded, zeroed and read back {written} bytes through O_DIRECT in {:?}",
        t1.elapsed()
    );
    // The target holds what was written.
    let held = target.snapshot(0, written as usize).ok_or("snapshot")?;
    for (i, &b) in held.iter().enumerate() {
        let at = i as u64;
        let zero = zeroed.iter().any(|&(zo, zl)| at >= zo && at < zo + zl);
        let want = if zero { 0 } else { pattern(at) };
        if b != want {
            return Err(format!("the target's byte {at} is {b:#x}, want {want:#x}"));
        }
    }
    println!("ublk_ram: the RAM target holds the same bytes");
    let block = running.block_path();
    let stats = running.stop().map_err(|e| e.to_string())?;
    println!("ublk_ram: stopped and deleted: {:?}", stats.total);
    let t = stats.total;
    if t.writes == 0 || t.reads == 0 || t.flushes == 0 || t.discards == 0 || t.write_zeroes == 0 {
        return Err(format!("an operation never reached the target: {t:?}"));
    }
    // STOP_DEV completes every tag's pending fetch with UBLK_IO_RES_ABORT.
    let tags = u64::from(queues) * u64::from(opts.depth);
    if t.aborted != tags {
        return Err(format!(
            "{} of {tags} tags were aborted by STOP_DEV",
            t.aborted
        ));
    }
    if t.write_bytes < written || t.errors != 0 {
        return Err(format!("wrote {written}, the target saw {t:?}"));
    }
    if block.exists() {
        return Err(format!("{} still exists", block.display()));
    }
    match device_info(id) {
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
            println!("ublk_ram: GET_DEV_INFO of device {id} after DEL_DEV: {e}");
        }
        other => return Err(format!("GET_DEV_INFO after DEL_DEV: {other:?}")),
    }
    failing_then_dropped()
}
