//! A ublk server: block devices whose I/O this process serves, through
//! the kernel's ublk driver (ublk_drv, /dev/ublk-control, /dev/ublkcN,
//! /dev/ublkbN).
//!
//! A [`Device`] is added with ADD_DEV and SET_PARAMS on
//! /dev/ublk-control ([`Device::add`]), then started ([`Device::start`]):
//! one thread per queue, each with its own io_uring, hands the driver a
//! FETCH_REQ per tag, reads each request's descriptor from its queue's
//! mmap'd descriptor area of /dev/ublkcN, serves it from a
//! [`BlockTarget`] and answers with COMMIT_AND_FETCH_REQ; START_DEV then
//! makes /dev/ublkbN. [`Running::stop`] (or dropping it, or SIGTERM
//! under [`stop_on_signals`] and [`Running::wait`]) sends STOP_DEV, waits
//! for the queue threads, closes /dev/ublkcN and sends DEL_DEV.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ublk::{Device, Options, RamTarget};
//!
//! let dev = Device::add(&Options::new(64 << 20)).unwrap();
//! let running = dev.start(Arc::new(RamTarget::new(64 << 20))).unwrap();
//! // /dev/ublkb<N> serves the RAM disk until:
//! running.stop().unwrap();
//! ```
//!
//! **Why hand-written structures over the `io-uring` crate, not
//! `libublk`.** libublk 0.4 (by the ublk maintainers) generates its uapi
//! bindings at build time with bindgen, which needs libclang on every
//! machine that builds zmem (CI included), and brings an async runtime
//! (smol) the NBD side does not use. The uapi this crate needs is small
//! and stable: five structures and ten command numbers, written out in
//! [`sys`] from include/uapi/linux/ublk_cmd.h with their sizes and
//! offsets checked at compile and test time. io-uring 0.7 (rust-version
//! 1.63) builds at the workspace's rust-version and offers what the
//! protocol needs: `UringCmd80` on a ring of 128-byte SQEs for the
//! control commands (`struct ublksrv_ctrl_cmd` is 32 bytes, past a plain
//! SQE's 16-byte command area) and `UringCmd16` on plain SQEs for the
//! per-queue commands (`struct ublksrv_io_cmd` is 16 bytes).
//!
//! The data path copies. With `UBLK_F_USER_COPY` (Linux 6.5, used where
//! GET_FEATURES offers it unless [`Options::user_copy`] is off), a queue
//! thread has one buffer and moves each request's data itself: a write's
//! with one `pread` of /dev/ublkcN before it serves it, a read's with one
//! `pwrite` after. Without it, each tag has a buffer, the driver copies
//! each write into it before the fetch completes and each read out of it
//! after the commit.
//!
//! Modules:
//! - [`sys`]: the uapi (structures, command numbers, flags), no calls.
//! - [`ctrl`]: /dev/ublk-control and its ring.
//! - [`target`]: [`BlockTarget`], [`NullTarget`], [`ReadsWith`], [`RamTarget`].
//! - `queue`: a queue thread's ring and loop.
//! - [`device`]: a device's life, signals.

pub mod ctrl;
pub mod device;
mod queue;
pub mod sys;
pub mod target;

pub use ctrl::{Control, CONTROL_PATH};
pub use device::{
    device_ids, device_info, remove_abandoned, signalled, stop_on_signals, Abandoned, Device,
    DeviceInfo, Options, Running, Stats, Stopper,
};
pub use queue::QueueStats;
pub use target::{BlockTarget, Errno, NullTarget, RamTarget, ReadsWith};
