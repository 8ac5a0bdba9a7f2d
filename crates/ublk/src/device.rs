//! A device's life: ADD_DEV and SET_PARAMS ([`Device::add`]), the queue
//! threads and START_DEV ([`Device::start`]), and STOP_DEV, the threads'
//! end and DEL_DEV ([`Running::stop`], on drop, on SIGTERM). Owns the
//! device's control channel and its /dev/ublkcN descriptor; the queues'
//! rings and mappings are the queue threads' own.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::ctrl::Control;
use crate::queue::{self, QueueSetup, QueueStats};
use crate::sys;
use crate::target::BlockTarget;

/// A queue thread's stack: room for a target's deepest call (a store's
/// compressor included) without the 2 MiB default, which a server that
/// locks its memory (`mlockall`) would populate whole for every queue.
pub const QUEUE_STACK_BYTES: usize = 512 << 10;

/// A device to add.
#[derive(Clone, Debug)]
pub struct Options {
    /// The device number N (/dev/ublkbN), or `None` for the first free.
    pub dev_id: Option<u32>,
    /// Size, bytes (a multiple of the logical block size).
    pub size: u64,
    /// Queues, each served by a thread (at most the machine's CPUs).
    pub queues: u16,
    /// Requests in flight per queue (at most 4096).
    pub depth: u16,
    /// The largest request, bytes (each tag has a buffer this large, or
    /// with user copy each queue thread one).
    pub max_io_bytes: u32,
    /// log2 of the logical block size (9: 512 bytes, 12: 4 KiB).
    pub logical_block_shift: u8,
    /// The device has a volatile write cache: the block layer sends
    /// flushes (and the target's `flush` makes writes durable).
    pub volatile_cache: bool,
    /// Announce discard and write-zeroes.
    pub discard: bool,
    /// The block device is read-only.
    pub read_only: bool,
    /// Each queue's thread runs on the CPUs whose requests the queue gets
    /// (GET_QUEUE_AFFINITY): a request is then served on the CPU that
    /// issued it, with no wake-up of another CPU on the way.
    pub pin_queues: bool,
    /// Ask for `UBLK_F_USER_COPY` where the driver offers it
    /// (GET_FEATURES, Linux 6.5): each queue thread then copies a
    /// request's data with one `pread`/`pwrite` on /dev/ublkcN into its one
    /// buffer, instead of the driver copying into a buffer per tag. Where
    /// it is not offered (or with `false`), each tag has its buffer.
    pub user_copy: bool,
}

impl Options {
    /// A device of `size` bytes: the first free number, one queue of 64
    /// requests of at most 512 KiB, 512-byte blocks, a volatile cache,
    /// discard and write-zeroes.
    pub fn new(size: u64) -> Options {
        Options {
            dev_id: None,
            size,
            queues: 1,
            depth: 64,
            max_io_bytes: 512 << 10,
            logical_block_shift: 9,
            volatile_cache: true,
            discard: true,
            read_only: false,
            pin_queues: true,
            user_copy: true,
        }
    }

    fn params(&self, max_io_bytes: u32) -> sys::Params {
        let mut attrs = 0;
        if self.volatile_cache {
            attrs |= sys::ATTR_VOLATILE_CACHE;
        }
        if self.read_only {
            attrs |= sys::ATTR_READ_ONLY;
        }
        let mut p = sys::Params {
            len: size_of::<sys::Params>() as u32,
            types: sys::PARAM_TYPE_BASIC,
            basic: sys::ParamBasic {
                attrs,
                logical_bs_shift: self.logical_block_shift,
                physical_bs_shift: self.logical_block_shift.max(12),
                io_opt_shift: self.logical_block_shift.max(12),
                io_min_shift: self.logical_block_shift,
                max_sectors: max_io_bytes >> 9,
                chunk_sectors: 0,
                dev_sectors: self.size >> 9,
                virt_boundary_mask: 0,
            },
            ..Default::default()
        };
        if self.discard {
            p.types |= sys::PARAM_TYPE_DISCARD;
            p.discard = sys::ParamDiscard {
                discard_alignment: 0,
                discard_granularity: 1 << self.logical_block_shift.max(12),
                max_discard_sectors: u32::MAX >> 9,
                max_write_zeroes_sectors: u32::MAX >> 9,
                max_discard_segments: 1,
                reserved0: 0,
            };
        }
        p
    }
}

/// What the driver says of a device (GET_DEV_INFO).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device number N.
    pub id: u32,
    /// Queues.
    pub queues: u16,
    /// Requests in flight per queue.
    pub depth: u16,
    /// The largest request, bytes.
    pub max_io_bytes: u32,
    /// The device is live (started, /dev/ublkbN exists).
    pub live: bool,
    /// The serving process, once started.
    pub server_pid: i32,
    /// The `UBLK_F_*` flags in force.
    pub flags: u64,
}

impl From<sys::CtrlDevInfo> for DeviceInfo {
    fn from(i: sys::CtrlDevInfo) -> DeviceInfo {
        DeviceInfo {
            id: i.dev_id,
            queues: i.nr_hw_queues,
            depth: i.queue_depth,
            max_io_bytes: i.max_io_buf_bytes,
            live: i.state == sys::S_DEV_LIVE,
            server_pid: i.ublksrv_pid,
            flags: i.flags,
        }
    }
}

/// The result of GET_DEV_INFO for device `id`: `Err` with ENODEV once it
/// is deleted.
pub fn device_info(id: u32) -> io::Result<DeviceInfo> {
    Control::open()?.get_dev_info(id).map(DeviceInfo::from)
}

/// A device whose server is gone, deleted by [`remove_abandoned`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Abandoned {
    /// The device number N.
    pub id: u32,
}

/// The device numbers the driver has now (from /dev/ublkcN, which every
/// device has from ADD_DEV to DEL_DEV).
pub fn device_ids() -> io::Result<Vec<u32>> {
    let mut ids: Vec<u32> = std::fs::read_dir("/dev")?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("ublkc")?.parse().ok())
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Deletes (DEL_DEV) every device left by a server that no longer runs.
/// A server killed with SIGKILL cannot delete its devices: the driver
/// removes /dev/ublkbN once it sees the server gone, marks the device
/// dead (`UBLK_S_DEV_DEAD`, server pid -1) and keeps it, /dev/ublkcN
/// included, until someone deletes it. Deleted here: dead devices without
/// user recovery (`UBLK_F_USER_RECOVERY*`, whose server may come back)
/// whose /dev/ublkcN nobody holds (the driver lets one process open it: a
/// live server, started or still adding its device, holds it). Only a
/// device another server adds at this very moment, between its ADD_DEV and
/// its open of /dev/ublkcN, could be taken for abandoned.
pub fn remove_abandoned() -> io::Result<Vec<Abandoned>> {
    let mut ctrl = Control::open()?;
    let mut removed = Vec::new();
    for id in device_ids()? {
        let info = match ctrl.get_dev_info(id) {
            Ok(i) => i,
            // Deleted since the listing.
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => continue,
            Err(e) => return Err(io::Error::new(e.kind(), format!("GET_DEV_INFO {id}: {e}"))),
        };
        if info.state != sys::S_DEV_DEAD || info.flags & sys::F_USER_RECOVERY_ANY != 0 {
            continue;
        }
        // Opened and closed at once: DEL_DEV waits for every opener.
        match OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/dev/ublkc{id}"))
        {
            Ok(f) => drop(f),
            // Held by a live server, or deleted since the listing.
            Err(_) => continue,
        }
        match ctrl.del_dev(id) {
            Ok(()) => removed.push(Abandoned { id }),
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {}
            Err(e) => return Err(io::Error::new(e.kind(), format!("DEL_DEV {id}: {e}"))),
        }
    }
    Ok(removed)
}

/// Waits up to `limit` for `path` to open (devtmpfs or udev makes the
/// node shortly after the driver adds the device).
fn open_when_there(path: &PathBuf, limit: Duration) -> io::Result<File> {
    let start = Instant::now();
    loop {
        match OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => return Ok(f),
            Err(e) if e.kind() == io::ErrorKind::NotFound && start.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("open {}: {e}", path.display()),
                ))
            }
        }
    }
}

/// A device added to the driver, not yet started: /dev/ublkcN exists,
/// /dev/ublkbN not yet. Dropping it deletes it.
pub struct Device {
    ctrl: Control,
    info: sys::CtrlDevInfo,
    size: u64,
    cdev: Option<File>,
    deleted: bool,
    pin_queues: bool,
}

impl Device {
    /// ADD_DEV then SET_PARAMS, and opens /dev/ublkcN.
    pub fn add(opts: &Options) -> io::Result<Device> {
        let lbs = 1u64 << opts.logical_block_shift;
        if opts.size == 0 || opts.size % lbs != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("size {} is not a positive multiple of {lbs}", opts.size),
            ));
        }
        if opts.depth == 0 || opts.depth > sys::MAX_QUEUE_DEPTH || opts.queues == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "queues and depth (1..=4096) must be positive",
            ));
        }
        let mut ctrl = Control::open()?;
        // A driver without GET_FEATURES (before 6.5) has no user copy.
        let user_copy =
            opts.user_copy && ctrl.get_features().is_ok_and(|f| f & sys::F_USER_COPY != 0);
        let mut info = sys::CtrlDevInfo {
            nr_hw_queues: opts.queues,
            queue_depth: opts.depth,
            max_io_buf_bytes: opts.max_io_bytes,
            dev_id: opts.dev_id.unwrap_or(u32::MAX),
            flags: sys::F_CMD_IOCTL_ENCODE | if user_copy { sys::F_USER_COPY } else { 0 },
            ..Default::default()
        };
        ctrl.add_dev(&mut info)
            .map_err(|e| io::Error::new(e.kind(), format!("ADD_DEV: {e}")))?;
        // From here on, dropping `dev` deletes the device.
        let mut dev = Device {
            ctrl,
            info,
            size: opts.size,
            cdev: None,
            deleted: false,
            pin_queues: opts.pin_queues,
        };
        let params = opts.params(dev.info.max_io_buf_bytes);
        dev.ctrl
            .set_params(dev.info.dev_id, &params)
            .map_err(|e| io::Error::new(e.kind(), format!("SET_PARAMS: {e}")))?;
        dev.cdev = Some(open_when_there(&dev.char_path(), Duration::from_secs(5))?);
        Ok(dev)
    }

    /// The device number N.
    pub fn id(&self) -> u32 {
        self.info.dev_id
    }

    /// Size, bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// What ADD_DEV settled (the largest request may be lowered).
    pub fn info(&self) -> DeviceInfo {
        DeviceInfo::from(self.info)
    }

    /// /dev/ublkcN, the server's side.
    pub fn char_path(&self) -> PathBuf {
        PathBuf::from(format!("/dev/ublkc{}", self.info.dev_id))
    }

    /// /dev/ublkbN, the block device (once started).
    pub fn block_path(&self) -> PathBuf {
        PathBuf::from(format!("/dev/ublkb{}", self.info.dev_id))
    }

    /// Starts a thread per queue serving `target`, waits until each has
    /// fetched its tags, then START_DEV: /dev/ublkbN exists when this
    /// returns.
    pub fn start<T: BlockTarget + ?Sized + 'static>(self, target: Arc<T>) -> io::Result<Running> {
        let stopped = Arc::new(AtomicBool::new(false));
        let mut running = Running {
            dev: self,
            queues: Vec::new(),
            stopped: stopped.clone(),
            stop_request: Stopper(Arc::new(AtomicBool::new(false))),
            started: false,
            done: false,
        };
        let (tx, rx) = mpsc::channel();
        let cdev = running
            .dev
            .cdev
            .as_ref()
            .expect("an added device has its cdev");
        for q_id in 0..running.dev.info.nr_hw_queues {
            let id = running.dev.info.dev_id;
            let cpus = if running.dev.pin_queues {
                let set = running.dev.ctrl.get_queue_affinity(id, q_id).map_err(|e| {
                    io::Error::new(e.kind(), format!("GET_QUEUE_AFFINITY {q_id}: {e}"))
                })?;
                Some(set)
            } else {
                None
            };
            let setup = QueueSetup {
                cpus,
                q_id,
                depth: running.dev.info.queue_depth,
                buf_bytes: running.dev.info.max_io_buf_bytes,
                // As the driver settled it in ADD_DEV.
                user_copy: running.dev.info.flags & sys::F_USER_COPY != 0,
                cdev: cdev.try_clone()?,
            };
            let target = target.clone();
            let tx = tx.clone();
            let stopped = stopped.clone();
            let handle = std::thread::Builder::new()
                .name(format!("ublk{}q{q_id}", running.dev.info.dev_id))
                .stack_size(QUEUE_STACK_BYTES)
                .spawn(move || queue::run(setup, &*target, tx, &stopped))?;
            running.queues.push(handle);
        }
        drop(tx);
        for _ in 0..running.queues.len() {
            match rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(io::Error::other("a queue thread ended before it fetched")),
            }
        }
        let id = running.dev.info.dev_id;
        running
            .dev
            .ctrl
            .start_dev(id, std::process::id() as i32)
            .map_err(|e| io::Error::new(e.kind(), format!("START_DEV: {e}")))?;
        running.started = true;
        Ok(running)
    }

    /// DEL_DEV, once nothing holds /dev/ublkcN.
    fn delete(&mut self) -> io::Result<()> {
        if self.deleted {
            return Ok(());
        }
        self.deleted = true;
        self.cdev = None;
        self.ctrl.del_dev(self.info.dev_id)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Err(e) = self.delete() {
            eprintln!("ublk: DEL_DEV of device {}: {e}", self.info.dev_id);
        }
    }
}

/// Asks a running device to stop: [`Running::wait`] returns once one of
/// these is told to.
#[derive(Clone, Debug)]
pub struct Stopper(Arc<AtomicBool>);

impl Stopper {
    /// Makes [`Running::wait`] stop the device and return.
    pub fn stop(&self) {
        self.0.store(true, Ordering::Release);
    }

    fn requested(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Set by the handler [`stop_on_signals`] installs.
static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::Release);
}

/// Makes SIGTERM and SIGINT stop every [`Running::wait`] of this process
/// (which then stops and deletes its device) instead of killing it.
pub fn stop_on_signals() -> io::Result<()> {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: a zeroed sigaction is valid; the handler only stores to
        // an atomic, which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Whether a signal [`stop_on_signals`] handles has arrived.
pub fn signalled() -> bool {
    SIGNALLED.load(Ordering::Acquire)
}

/// What a device served over its life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// All queues' counts together.
    pub total: QueueStats,
}

/// A started device: /dev/ublkbN is served until [`Running::stop`] (or a
/// [`Stopper`], or a signal under [`stop_on_signals`], ends
/// [`Running::wait`]). Dropping it stops and deletes the device.
pub struct Running {
    dev: Device,
    queues: Vec<JoinHandle<io::Result<QueueStats>>>,
    stopped: Arc<AtomicBool>,
    stop_request: Stopper,
    /// START_DEV succeeded (so STOP_DEV is due).
    started: bool,
    done: bool,
}

impl Running {
    /// The device number N.
    pub fn id(&self) -> u32 {
        self.dev.id()
    }

    /// /dev/ublkbN.
    pub fn block_path(&self) -> PathBuf {
        self.dev.block_path()
    }

    /// GET_DEV_INFO: the driver's view (live, the server's pid).
    pub fn info(&mut self) -> io::Result<DeviceInfo> {
        self.dev
            .ctrl
            .get_dev_info(self.dev.info.dev_id)
            .map(DeviceInfo::from)
    }

    /// The (major, minor) of /dev/ublkbN (GET_PARAMS).
    pub fn disk_devt(&mut self) -> io::Result<(u32, u32)> {
        let p = self.dev.ctrl.get_params(self.dev.info.dev_id)?;
        Ok((p.devt.disk_major, p.devt.disk_minor))
    }

    /// A handle another thread stops the device with.
    pub fn stopper(&self) -> Stopper {
        self.stop_request.clone()
    }

    /// Serves until a [`Stopper`] or a signal handled by
    /// [`stop_on_signals`] asks to stop, or a queue thread ends by itself;
    /// then stops and deletes the device.
    pub fn wait(mut self) -> io::Result<Stats> {
        while !self.stop_request.requested()
            && !signalled()
            && !self.queues.iter().any(|q| q.is_finished())
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.shutdown()
    }

    /// STOP_DEV (/dev/ublkbN goes once its requests drain), waits for the
    /// queue threads, closes /dev/ublkcN, DEL_DEV.
    pub fn stop(mut self) -> io::Result<Stats> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> io::Result<Stats> {
        if self.done {
            return Ok(Stats::default());
        }
        self.done = true;
        let id = self.dev.info.dev_id;
        let stop = if self.started {
            self.dev.ctrl.stop_dev(id)
        } else {
            Ok(())
        };
        // Whatever STOP_DEV said, the queues may end now: the disk is gone
        // or never came, and no request is in flight.
        self.stopped.store(true, Ordering::Release);
        let mut stats = Stats::default();
        let mut first_err = stop
            .err()
            .map(|e| io::Error::new(e.kind(), format!("STOP_DEV: {e}")));
        for q in self.queues.drain(..) {
            match q.join() {
                Ok(Ok(s)) => stats.total.add(&s),
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(io::Error::other("a queue thread panicked"));
                }
            }
        }
        if let Err(e) = self.dev.delete() {
            first_err.get_or_insert(io::Error::new(e.kind(), format!("DEL_DEV: {e}")));
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(stats),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            eprintln!("ublk: stopping device {}: {e}", self.dev.info.dev_id);
        }
    }
}
