//! One queue of a device: its thread's io_uring, the FETCH_REQ /
//! COMMIT_AND_FETCH_REQ loop, its mapping of the driver's descriptor
//! area (read only) and its data buffers: one per tag, which the driver
//! copies into and out of, or with `UBLK_F_USER_COPY` one for the thread,
//! which it fills and empties itself with `pread`/`pwrite` on /dev/ublkcN.
//! Owns those for the thread's life; it never sends a control command and
//! never opens a file (the device hands it its own descriptor of
//! /dev/ublkcN).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

use io_uring::{opcode, types, IoUring};

use crate::sys;
use crate::target::{BlockTarget, Errno};

/// What one queue served, by operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Reads served.
    pub reads: u64,
    /// Writes served.
    pub writes: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Flushes served.
    pub flushes: u64,
    /// Discards served.
    pub discards: u64,
    /// Write-zeroes served.
    pub write_zeroes: u64,
    /// Requests completed with an error (the target's, or an operation
    /// this server does not know), and fetches the driver failed.
    pub errors: u64,
    /// Tags the driver ended with `UBLK_IO_RES_ABORT` (the device
    /// stopped); the others end when the queue's ring closes.
    pub aborted: u64,
}

impl QueueStats {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &QueueStats) {
        self.reads += other.reads;
        self.writes += other.writes;
        self.read_bytes += other.read_bytes;
        self.write_bytes += other.write_bytes;
        self.flushes += other.flushes;
        self.discards += other.discards;
        self.write_zeroes += other.write_zeroes;
        self.errors += other.errors;
        self.aborted += other.aborted;
    }
}

/// Serves one request described by `desc` with `target`, `buf` being its
/// data buffer (the tag's, or with user copy the thread's, filled),
/// and returns the result to commit: the bytes moved for a
/// read or write, 0 for the others, or a negative errno. A target that
/// panics fails the request with EIO instead of ending the queue's
/// thread (which would leave the request pending in the driver).
pub(crate) fn serve<T: BlockTarget + ?Sized>(
    target: &T,
    desc: &sys::IoDesc,
    buf: &mut [u8],
    stats: &mut QueueStats,
) -> i32 {
    let op = (desc.op_flags & 0xff) as u8;
    let off = desc.start_sector << 9;
    let len = u64::from(desc.nr_sectors) << 9;
    let data = |buf: &mut [u8]| -> Result<usize, Errno> {
        usize::try_from(len)
            .ok()
            .filter(|&n| n <= buf.len())
            .ok_or(libc::EINVAL)
    };
    let call = std::panic::AssertUnwindSafe(|| -> Result<u64, Errno> {
        match op {
            sys::IO_OP_READ => data(buf).and_then(|n| {
                target.read(off, &mut buf[..n])?;
                stats.reads += 1;
                stats.read_bytes += len;
                Ok(len)
            }),
            sys::IO_OP_WRITE => data(buf).and_then(|n| {
                target.write(off, &buf[..n])?;
                stats.writes += 1;
                stats.write_bytes += len;
                Ok(len)
            }),
            sys::IO_OP_FLUSH => target.flush().map(|()| {
                stats.flushes += 1;
                0
            }),
            sys::IO_OP_DISCARD => target.discard(off, len).map(|()| {
                stats.discards += 1;
                0
            }),
            sys::IO_OP_WRITE_ZEROES => target.write_zeroes(off, len).map(|()| {
                stats.write_zeroes += 1;
                0
            }),
            _ => Err(libc::EOPNOTSUPP),
        }
    });
    let r = std::panic::catch_unwind(call).unwrap_or(Err(libc::EIO));
    match r {
        Ok(n) => n as i32,
        Err(e) => {
            stats.errors += 1;
            -e.abs()
        }
    }
}

/// Moves all of `buf` from (`to_device` false: `pread`) or to (`pwrite`)
/// /dev/ublkcN at `pos`, the user-copy offset of a request's data.
fn copy_all(cdev: i32, buf: &mut [u8], mut pos: u64, to_device: bool) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is valid for `rest.len()` bytes for reading and
        // writing; the kernel copies into or out of it and keeps no
        // reference once the call returns.
        let n = unsafe {
            if to_device {
                libc::pwrite(cdev, rest.as_ptr().cast(), rest.len(), pos as libc::off_t)
            } else {
                libc::pread(
                    cdev,
                    rest.as_mut_ptr().cast(),
                    rest.len(),
                    pos as libc::off_t,
                )
            }
        };
        match n {
            n if n > 0 => {
                done += n as usize;
                pos += n as u64;
            }
            0 => return Err(io::Error::from_raw_os_error(libc::EIO)),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// [`serve`] with user copy: a write's data are read from /dev/ublkcN at
/// `pos` into `buf` first, a read's written there after. A copy that
/// fails fails the request with EIO.
fn serve_copied<T: BlockTarget + ?Sized>(
    target: &T,
    desc: &sys::IoDesc,
    buf: &mut [u8],
    stats: &mut QueueStats,
    cdev: i32,
    pos: u64,
) -> i32 {
    let op = (desc.op_flags & 0xff) as u8;
    let len = (desc.nr_sectors as usize) << 9;
    if op == sys::IO_OP_WRITE
        && len <= buf.len()
        && copy_all(cdev, &mut buf[..len], pos, false).is_err()
    {
        stats.errors += 1;
        return -libc::EIO;
    }
    let r = serve(target, desc, buf, stats);
    if op == sys::IO_OP_READ && r > 0 && copy_all(cdev, &mut buf[..r as usize], pos, true).is_err()
    {
        stats.errors += 1;
        return -libc::EIO;
    }
    r
}

/// An anonymous or file mapping, unmapped on drop.
struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    fn new(len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> io::Result<Mapping> {
        // SAFETY: a fresh mapping at an address the kernel picks; nothing
        // else refers to it.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, off) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping this value made, no longer used once it
        // drops (the ring that named its buffers is dropped first).
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// The bytes of `cmd` as the 16-byte command area of an SQE.
fn io_cmd_bytes(cmd: &sys::IoCmd) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[0..2].copy_from_slice(&cmd.q_id.to_ne_bytes());
    out[2..4].copy_from_slice(&cmd.tag.to_ne_bytes());
    out[4..8].copy_from_slice(&cmd.result.to_ne_bytes());
    out[8..16].copy_from_slice(&cmd.addr.to_ne_bytes());
    out
}

/// What a queue thread is given.
pub(crate) struct QueueSetup {
    pub q_id: u16,
    pub depth: u16,
    pub buf_bytes: u32,
    /// `UBLK_F_USER_COPY` is in force: one buffer for the thread, which
    /// copies each request's data itself.
    pub user_copy: bool,
    /// The thread's own descriptor of /dev/ublkcN.
    pub cdev: File,
    /// The CPUs to run on (the queue's affinity), or `None` to leave the
    /// thread where the scheduler puts it.
    pub cpus: Option<libc::cpu_set_t>,
}

/// How long a queue thread sleeps in the ring before it looks at the
/// stop flag.
const POLL: Duration = Duration::from_millis(200);

/// A queue thread's body: maps the descriptors, fetches every tag, says
/// so on `ready`, then serves requests until each tag is aborted (the
/// device stopped), or `stopped` is set (STOP_DEV returned) and a wait
/// brings nothing more, and returns what it served.
pub(crate) fn run<T: BlockTarget + ?Sized>(
    setup: QueueSetup,
    target: &T,
    ready: Sender<io::Result<()>>,
    stopped: &AtomicBool,
) -> io::Result<QueueStats> {
    if let Some(set) = &setup.cpus {
        // SAFETY: `set` is a valid cpu_set_t of the size given; pid 0 is
        // this thread. A failure (no CPU of the set allowed to this
        // process) leaves the thread unpinned, which only costs speed.
        unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), set) };
    }
    let prepared = prepare(&setup);
    let (descs, bufs, mut ring) = match prepared {
        Ok(p) => p,
        Err(e) => {
            let _ = ready.send(Err(io::Error::new(e.kind(), e.to_string())));
            return Err(e);
        }
    };
    let _ = ready.send(Ok(()));
    let depth = usize::from(setup.depth);
    let buf_bytes = setup.buf_bytes as usize;
    let fd = types::Fd(setup.cdev.as_raw_fd());
    let mut stats = QueueStats::default();
    let mut live = depth;
    // At most one completion per tag: sized once, never grown on the I/O
    // path.
    let mut done: Vec<(u64, i32)> = Vec::with_capacity(depth);
    let ts = types::Timespec::from(POLL);
    let args = types::SubmitArgs::new().timespec(&ts);
    while live > 0 {
        // Read before waiting: once STOP_DEV has returned, a wait that
        // brings nothing means the driver has no abort left to send (the
        // ring's closing cancels what is still queued).
        let stopping = stopped.load(Ordering::Acquire);
        match ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                ) => {}
            Err(e) => return Err(e),
        }
        done.clear();
        done.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        if done.is_empty() && stopping {
            break;
        }
        for &(tag, res) in &done {
            let tag = tag as usize;
            if tag >= depth {
                continue;
            }
            match res {
                sys::IO_RES_OK => {
                    // SAFETY: the driver's descriptor area holds `depth`
                    // descriptors; the tag's one is stable until this
                    // thread commits the tag, and is read by value.
                    let desc = unsafe {
                        std::ptr::read_volatile(descs.ptr.cast::<sys::IoDesc>().add(tag))
                    };
                    // With user copy, the thread's one buffer (the driver
                    // never touches it); without, the tag's buffer.
                    let at = if setup.user_copy { 0 } else { tag * buf_bytes };
                    // SAFETY: a `buf_bytes` slice of the buffers' mapping:
                    // the thread's own (user copy), or the tag's, disjoint
                    // from the others', that only this thread touches
                    // while it owns the tag (the driver copies into or out
                    // of it only before it completes the fetch and after
                    // the commit).
                    let buf = unsafe {
                        std::slice::from_raw_parts_mut(bufs.ptr.cast::<u8>().add(at), buf_bytes)
                    };
                    let result = if setup.user_copy {
                        let pos = sys::user_copy_pos(setup.q_id, tag as u16);
                        serve_copied(target, &desc, buf, &mut stats, fd.0, pos)
                    } else {
                        serve(target, &desc, buf, &mut stats)
                    };
                    let cmd = sys::IoCmd {
                        q_id: setup.q_id,
                        tag: tag as u16,
                        result,
                        // User copy: no buffer (the driver refuses one).
                        addr: if setup.user_copy {
                            0
                        } else {
                            buf.as_ptr() as u64
                        },
                    };
                    let sqe = opcode::UringCmd16::new(fd, sys::U_IO_COMMIT_AND_FETCH_REQ)
                        .cmd(io_cmd_bytes(&cmd))
                        .build()
                        .user_data(tag as u64);
                    // SAFETY: the buffer the command names lives in
                    // `bufs`, which outlives the ring (dropped after it).
                    unsafe { ring.submission().push(&sqe) }
                        .map_err(|_| io::Error::other("queue ring full"))?;
                }
                _ => {
                    // UBLK_IO_RES_ABORT (the device stops) or a failed
                    // command: the tag is not fetched again.
                    if res == sys::IO_RES_ABORT {
                        stats.aborted += 1;
                    } else {
                        stats.errors += 1;
                    }
                    live -= 1;
                }
            }
        }
    }
    // The ring goes first: closing it cancels any command still queued,
    // and the buffers they name must outlive it.
    drop(ring);
    drop(bufs);
    drop(descs);
    Ok(stats)
}

/// The queue's mappings and ring, with a FETCH_REQ submitted for every
/// tag.
fn prepare(setup: &QueueSetup) -> io::Result<(Mapping, Mapping, IoUring)> {
    let page = page_size();
    let depth = usize::from(setup.depth);
    let desc_len = round_up(depth * size_of::<sys::IoDesc>(), page);
    let desc_stride = round_up(
        usize::from(sys::MAX_QUEUE_DEPTH) * size_of::<sys::IoDesc>(),
        page,
    );
    let descs = Mapping::new(
        desc_len,
        libc::PROT_READ,
        libc::MAP_SHARED | libc::MAP_POPULATE,
        setup.cdev.as_raw_fd(),
        sys::CMD_BUF_OFFSET + (usize::from(setup.q_id) * desc_stride) as i64,
    )
    .map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("mmap queue {}'s descriptors: {e}", setup.q_id),
        )
    })?;
    let buf_bytes = setup.buf_bytes as usize;
    let bufs = Mapping::new(
        if setup.user_copy {
            buf_bytes
        } else {
            depth * buf_bytes
        },
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        -1,
        0,
    )?;
    let mut ring = IoUring::builder().build(u32::from(setup.depth).next_power_of_two())?;
    let fd = types::Fd(setup.cdev.as_raw_fd());
    for tag in 0..setup.depth {
        let cmd = sys::IoCmd {
            q_id: setup.q_id,
            tag,
            result: -1,
            addr: if setup.user_copy {
                0
            } else {
                // SAFETY: within the buffers' mapping (tag < depth).
                unsafe { bufs.ptr.cast::<u8>().add(usize::from(tag) * buf_bytes) as u64 }
            },
        };
        let sqe = opcode::UringCmd16::new(fd, sys::U_IO_FETCH_REQ)
            .cmd(io_cmd_bytes(&cmd))
            .build()
            .user_data(u64::from(tag));
        // SAFETY: the buffer lives in `bufs`, which the caller drops only
        // after the ring.
        unsafe { ring.submission().push(&sqe) }.map_err(|_| io::Error::other("queue ring full"))?;
    }
    ring.submit()?;
    Ok((descs, bufs, ring))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{RamTarget, ReadsWith};

    fn desc(op: u8, sector: u64, sectors: u32) -> sys::IoDesc {
        sys::IoDesc {
            op_flags: u32::from(op),
            nr_sectors: sectors,
            start_sector: sector,
            addr: 0,
        }
    }

    #[test]
    fn serve_dispatches_each_operation() {
        let t = RamTarget::new(1 << 20);
        let mut stats = QueueStats::default();
        let mut buf = vec![0xabu8; 8192];
        assert_eq!(
            serve(&t, &desc(sys::IO_OP_WRITE, 8, 16), &mut buf, &mut stats),
            8192
        );
        assert_eq!(t.snapshot(4096, 8192).unwrap(), vec![0xab; 8192]);
        buf.fill(0);
        assert_eq!(
            serve(&t, &desc(sys::IO_OP_READ, 8, 4), &mut buf, &mut stats),
            2048
        );
        assert_eq!(&buf[..2048], &[0xab; 2048][..]);
        assert_eq!(
            serve(
                &t,
                &desc(sys::IO_OP_WRITE_ZEROES, 8, 1),
                &mut buf,
                &mut stats
            ),
            0
        );
        assert_eq!(
            serve(&t, &desc(sys::IO_OP_DISCARD, 9, 1), &mut buf, &mut stats),
            0
        );
        assert_eq!(t.snapshot(4096, 1024).unwrap(), vec![0; 1024]);
        assert_eq!(
            serve(&t, &desc(sys::IO_OP_FLUSH, 0, 0), &mut buf, &mut stats),
            0
        );
        // Larger than the tag's buffer, past the end, unknown operation.
        assert_eq!(
            serve(&t, &desc(sys::IO_OP_READ, 0, 17), &mut buf, &mut stats),
            -libc::EINVAL
        );
        assert_eq!(
            serve(&t, &desc(sys::IO_OP_READ, 2047, 2), &mut buf, &mut stats),
            -libc::EIO
        );
        assert_eq!(
            serve(&t, &desc(18, 0, 1), &mut buf, &mut stats),
            -libc::EOPNOTSUPP
        );
        assert_eq!(
            stats,
            QueueStats {
                reads: 1,
                writes: 1,
                read_bytes: 2048,
                write_bytes: 8192,
                flushes: 1,
                discards: 1,
                write_zeroes: 1,
                errors: 3,
                aborted: 0,
            }
        );
    }

    #[test]
    fn a_panicking_target_fails_the_request_with_eio() {
        let panics = ReadsWith::new(|_, _| panic!("a target's bug"));
        let mut stats = QueueStats::default();
        let mut buf = vec![0u8; 4096];
        assert_eq!(
            serve(&panics, &desc(sys::IO_OP_READ, 0, 8), &mut buf, &mut stats),
            -libc::EIO
        );
        assert_eq!(
            serve(&panics, &desc(sys::IO_OP_WRITE, 0, 8), &mut buf, &mut stats),
            4096
        );
        assert_eq!((stats.errors, stats.writes), (1, 1));
    }

    /// User copy against a plain file standing in for /dev/ublkcN: a
    /// write's data are read from the request's offset, a read's written
    /// there; a copy that cannot complete fails the request with EIO.
    #[test]
    fn user_copy_moves_the_data_at_the_requests_offset() {
        use std::os::unix::fs::FileExt;
        let path = std::env::temp_dir().join(format!("ublk-user-copy-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        let fd = file.as_raw_fd();
        let pos = 3 << 12;
        file.write_all_at(&[0x5a; 4096], pos).unwrap();
        let t = RamTarget::new(1 << 20);
        let mut stats = QueueStats::default();
        let mut buf = vec![0u8; 8192];
        let w = desc(sys::IO_OP_WRITE, 16, 8);
        assert_eq!(serve_copied(&t, &w, &mut buf, &mut stats, fd, pos), 4096);
        assert_eq!(t.snapshot(8192, 4096).unwrap(), vec![0x5a; 4096]);
        buf.fill(0);
        let r = desc(sys::IO_OP_READ, 16, 8);
        assert_eq!(
            serve_copied(&t, &r, &mut buf, &mut stats, fd, 9 << 12),
            4096
        );
        let mut back = vec![0u8; 4096];
        file.read_exact_at(&mut back, 9 << 12).unwrap();
        assert_eq!(back, vec![0x5a; 4096]);
        // Past the file's end a write's data cannot be read whole.
        assert_eq!(
            serve_copied(&t, &w, &mut buf, &mut stats, fd, 64 << 12),
            -libc::EIO
        );
        assert_eq!((stats.writes, stats.reads, stats.errors), (1, 1, 1));
    }

    #[test]
    fn io_cmd_bytes_match_the_struct() {
        let cmd = sys::IoCmd {
            q_id: 3,
            tag: 0x102,
            result: -5,
            addr: 0x1122_3344_5566_7788,
        };
        // SAFETY: IoCmd is 16 bytes of plain old data.
        let raw: [u8; 16] = unsafe { std::mem::transmute(cmd) };
        assert_eq!(io_cmd_bytes(&cmd), raw);
    }
}
