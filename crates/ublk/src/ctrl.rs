//! The control channel: /dev/ublk-control and the io_uring (128-byte
//! SQEs) its commands go through, one command at a time. Owns that file
//! and that ring; it never touches a device's /dev/ublkcN or its queues.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::sys;

/// Where the driver's control device lives.
pub const CONTROL_PATH: &str = "/dev/ublk-control";

/// An open /dev/ublk-control: the commands that add, configure, start,
/// stop and delete ublk devices.
pub struct Control {
    file: File,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
}

impl Control {
    /// Opens /dev/ublk-control (needs ublk_drv loaded and, for these
    /// privileged devices, CAP_SYS_ADMIN).
    pub fn open() -> io::Result<Control> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(CONTROL_PATH)
            .map_err(|e| {
                let why = if e.kind() == io::ErrorKind::NotFound {
                    " (the kernel's ublk driver, ublk_drv, is not loaded: modprobe ublk_drv; \
                     it needs CONFIG_BLK_DEV_UBLK, Linux 6.0 or later)"
                } else {
                    ""
                };
                io::Error::new(e.kind(), format!("open {CONTROL_PATH}: {e}{why}"))
            })?;
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(4)?;
        Ok(Control { file, ring })
    }

    /// Runs one control command and returns its non-negative result.
    fn command(&mut self, op: u32, cmd: sys::CtrlCmd) -> io::Result<i32> {
        let mut area = [0u8; 80];
        // SAFETY: CtrlCmd is plain old data of 32 bytes (checked in sys),
        // read as bytes into the front of the 80-byte command area.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&cmd as *const sys::CtrlCmd).cast::<u8>(),
                size_of::<sys::CtrlCmd>(),
            )
        };
        area[..bytes.len()].copy_from_slice(bytes);
        let sqe = opcode::UringCmd80::new(types::Fd(self.file.as_raw_fd()), op)
            .cmd(area)
            .build()
            .user_data(u64::from(op));
        // SAFETY: the buffer `cmd.addr` points to (if any) belongs to the
        // caller, which keeps it alive and unaliased until this function
        // returns, and this function waits for the command's completion.
        unsafe { self.ring.submission().push(&sqe) }
            .map_err(|_| io::Error::other("control ring full"))?;
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if let Some(cqe) = self.ring.completion().next() {
                let res = cqe.result();
                return if res < 0 {
                    Err(io::Error::from_raw_os_error(-res))
                } else {
                    Ok(res)
                };
            }
        }
    }

    /// GET_FEATURES (Linux 6.5): the `UBLK_F_*` flags the driver
    /// supports; an error on older drivers, which know none of the later
    /// flags.
    pub fn get_features(&mut self) -> io::Result<u64> {
        let mut features: u64 = 0;
        // No device: the driver's.
        self.command(sys::U_CMD_GET_FEATURES, buffer_cmd(u32::MAX, &mut features))?;
        Ok(features)
    }

    /// ADD_DEV: creates a device (and its /dev/ublkcN) from `info`
    /// (`dev_id` `u32::MAX` for any free number), which the driver
    /// updates: the id, the flags it forces, its limits.
    pub fn add_dev(&mut self, info: &mut sys::CtrlDevInfo) -> io::Result<()> {
        let cmd = buffer_cmd(info.dev_id, info);
        self.command(sys::U_CMD_ADD_DEV, cmd).map(drop)
    }

    /// SET_PARAMS: the device's sizes and limits, before START_DEV.
    pub fn set_params(&mut self, dev_id: u32, params: &sys::Params) -> io::Result<()> {
        // The driver only reads the parameters.
        let params = (params as *const sys::Params).cast_mut();
        self.command(sys::U_CMD_SET_PARAMS, buffer_cmd(dev_id, params))
            .map(drop)
    }

    /// GET_PARAMS: the parameters in force (with the device numbers).
    pub fn get_params(&mut self, dev_id: u32) -> io::Result<sys::Params> {
        let mut params = sys::Params {
            len: size_of::<sys::Params>() as u32,
            ..Default::default()
        };
        self.command(sys::U_CMD_GET_PARAMS, buffer_cmd(dev_id, &mut params))?;
        Ok(params)
    }

    /// GET_QUEUE_AFFINITY: the CPUs whose requests queue `q_id` gets (the
    /// block layer's mapping of CPUs to queues, fixed once the device is
    /// added).
    pub fn get_queue_affinity(&mut self, dev_id: u32, q_id: u16) -> io::Result<libc::cpu_set_t> {
        // SAFETY: cpu_set_t is a plain bit array; all zeros is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let cmd = sys::CtrlCmd {
            queue_id: q_id,
            ..buffer_cmd(dev_id, &mut set)
        };
        self.command(sys::U_CMD_GET_QUEUE_AFFINITY, cmd)?;
        Ok(set)
    }

    /// GET_DEV_INFO: the device's state, queues, owner and server pid.
    pub fn get_dev_info(&mut self, dev_id: u32) -> io::Result<sys::CtrlDevInfo> {
        let mut info = sys::CtrlDevInfo::default();
        self.command(sys::U_CMD_GET_DEV_INFO, buffer_cmd(dev_id, &mut info))?;
        Ok(info)
    }

    /// START_DEV: waits until every tag of every queue has been fetched,
    /// then creates /dev/ublkbN served by process `pid`.
    pub fn start_dev(&mut self, dev_id: u32, pid: i32) -> io::Result<()> {
        let cmd = sys::CtrlCmd {
            data: [pid as u64],
            ..device_cmd(dev_id)
        };
        self.command(sys::U_CMD_START_DEV, cmd).map(drop)
    }

    /// STOP_DEV: removes /dev/ublkbN (after its requests drain) and
    /// completes the queues' outstanding fetches with `UBLK_IO_RES_ABORT`.
    pub fn stop_dev(&mut self, dev_id: u32) -> io::Result<()> {
        self.command(sys::U_CMD_STOP_DEV, device_cmd(dev_id))
            .map(drop)
    }

    /// DEL_DEV: removes the device; waits until nothing holds its
    /// /dev/ublkcN (close it and the queues' rings first).
    pub fn del_dev(&mut self, dev_id: u32) -> io::Result<()> {
        self.command(sys::U_CMD_DEL_DEV, device_cmd(dev_id))
            .map(drop)
    }
}

/// A command for device `dev_id` as a whole (no one queue) with no buffer
/// and no data: what a command needs besides is set over it.
fn device_cmd(dev_id: u32) -> sys::CtrlCmd {
    sys::CtrlCmd {
        dev_id,
        queue_id: u16::MAX,
        ..Default::default()
    }
}

/// A command for device `dev_id` (no one queue) whose buffer is the `T` at
/// `buf`, which the driver reads or fills.
fn buffer_cmd<T>(dev_id: u32, buf: *mut T) -> sys::CtrlCmd {
    sys::CtrlCmd {
        len: size_of::<T>() as u16,
        addr: buf as u64,
        ..device_cmd(dev_id)
    }
}
