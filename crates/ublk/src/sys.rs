//! The ublk uapi, by hand: the structures, command numbers and flags of
//! include/uapi/linux/ublk_cmd.h (torvalds/linux; the layouts below are
//! those of kernel 6.12, and later kernels only append to them). Owns
//! nothing but these definitions and their size checks; it makes no
//! system call.
//!
//! The control commands are the ioctl-encoded `UBLK_U_CMD_*` numbers
//! (`_IOR`/`_IOWR('u', nr, struct ublksrv_ctrl_cmd)`), which every kernel
//! since 6.0's ublk_drv accepts; the legacy bare numbers (`UBLK_CMD_*`)
//! need CONFIG_BLKDEV_UBLK_LEGACY_OPCODES and are not used. The same holds
//! for the I/O commands (`UBLK_U_IO_*`, over `struct ublksrv_io_cmd`).

/// `_IOC_WRITE` of include/uapi/asm-generic/ioctl.h.
const IOC_WRITE: u32 = 1;
/// `_IOC_READ`.
const IOC_READ: u32 = 2;

/// `_IOC(dir, 'u', nr, size)`: direction in bits 30-31, size in 16-29,
/// type in 8-15, number in 0-7.
const fn ioc(dir: u32, nr: u32, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((b'u' as u32) << 8) | nr
}

const fn ior_ctrl(nr: u32) -> u32 {
    ioc(IOC_READ, nr, size_of::<CtrlCmd>())
}

const fn iowr_ctrl(nr: u32) -> u32 {
    ioc(IOC_READ | IOC_WRITE, nr, size_of::<CtrlCmd>())
}

const fn iowr_io(nr: u32) -> u32 {
    ioc(IOC_READ | IOC_WRITE, nr, size_of::<IoCmd>())
}

/// `UBLK_U_CMD_GET_QUEUE_AFFINITY`: the CPUs whose requests a queue gets
/// (blk-mq's mapping), as a CPU mask.
pub const U_CMD_GET_QUEUE_AFFINITY: u32 = ior_ctrl(0x01);
/// `UBLK_U_CMD_GET_DEV_INFO`: the device's `ublksrv_ctrl_dev_info`.
pub const U_CMD_GET_DEV_INFO: u32 = ior_ctrl(0x02);
/// `UBLK_U_CMD_ADD_DEV`: creates /dev/ublkcN from a `ublksrv_ctrl_dev_info`.
pub const U_CMD_ADD_DEV: u32 = iowr_ctrl(0x04);
/// `UBLK_U_CMD_DEL_DEV`: removes the device once nothing holds /dev/ublkcN.
pub const U_CMD_DEL_DEV: u32 = iowr_ctrl(0x05);
/// `UBLK_U_CMD_START_DEV`: creates /dev/ublkbN once every queue fetched.
pub const U_CMD_START_DEV: u32 = iowr_ctrl(0x06);
/// `UBLK_U_CMD_STOP_DEV`: removes /dev/ublkbN and aborts the fetches.
pub const U_CMD_STOP_DEV: u32 = iowr_ctrl(0x07);
/// `UBLK_U_CMD_SET_PARAMS`: the device's `ublk_params`, before START_DEV.
pub const U_CMD_SET_PARAMS: u32 = iowr_ctrl(0x08);
/// `UBLK_U_CMD_GET_PARAMS`.
pub const U_CMD_GET_PARAMS: u32 = ior_ctrl(0x09);
/// `UBLK_U_CMD_GET_FEATURES` (Linux 6.5): the `UBLK_F_*` flags the driver
/// supports, as one u64 at the command's buffer; not for a device.
pub const U_CMD_GET_FEATURES: u32 = ior_ctrl(0x13);

/// `UBLK_U_IO_FETCH_REQ`: hands the driver a tag's buffer and waits for a
/// request.
pub const U_IO_FETCH_REQ: u32 = iowr_io(0x20);
/// `UBLK_U_IO_COMMIT_AND_FETCH_REQ`: completes a tag's request with a
/// result and waits for the next one.
pub const U_IO_COMMIT_AND_FETCH_REQ: u32 = iowr_io(0x21);

/// `UBLK_IO_RES_OK`: a fetch's completion carries a request.
pub const IO_RES_OK: i32 = 0;
/// `UBLK_IO_RES_NEED_GET_DATA` (only with `UBLK_F_NEED_GET_DATA`, unused).
pub const IO_RES_NEED_GET_DATA: i32 = 1;
/// `UBLK_IO_RES_ABORT`: the device is stopping; the tag is not refetched.
pub const IO_RES_ABORT: i32 = -libc::ENODEV;

/// `UBLKSRV_CMD_BUF_OFFSET`: where the descriptor areas start in
/// /dev/ublkcN's mmap offsets.
pub const CMD_BUF_OFFSET: i64 = 0;
/// `UBLK_MAX_QUEUE_DEPTH`.
pub const MAX_QUEUE_DEPTH: u16 = 4096;

/// `UBLK_F_URING_CMD_COMP_IN_TASK`.
pub const F_URING_CMD_COMP_IN_TASK: u64 = 1 << 1;
/// `UBLK_F_CMD_IOCTL_ENCODE`: the ioctl-encoded command numbers.
pub const F_CMD_IOCTL_ENCODE: u64 = 1 << 6;

/// `UBLK_F_USER_COPY` (Linux 6.5): the driver copies no data; the server
/// reads a write's data from, and writes a read's data to, /dev/ublkcN at
/// [`user_copy_pos`] while it owns the tag, and fetches with no buffer.
pub const F_USER_COPY: u64 = 1 << 7;

/// `UBLKSRV_IO_BUF_OFFSET`: where the requests' data start in
/// /dev/ublkcN's file offsets (user copy).
pub const IO_BUF_OFFSET: u64 = 0x8000_0000;
/// `UBLK_TAG_OFF` (`UBLK_IO_BUF_BITS`, 25: at most 32 MiB a request).
pub const TAG_OFF: u32 = 25;
/// `UBLK_QID_OFF` (`UBLK_TAG_OFF + UBLK_TAG_BITS`, 16 bits of tag).
pub const QID_OFF: u32 = TAG_OFF + 16;

/// The file offset of byte 0 of request `tag` of queue `q_id` in
/// /dev/ublkcN, with `UBLK_F_USER_COPY`.
pub const fn user_copy_pos(q_id: u16, tag: u16) -> u64 {
    IO_BUF_OFFSET + ((q_id as u64) << QID_OFF) + ((tag as u64) << TAG_OFF)
}

/// `UBLK_F_USER_RECOVERY`, `UBLK_F_USER_RECOVERY_REISSUE` and
/// `UBLK_F_USER_RECOVERY_FAIL_IO`: a device its server may come back for.
pub const F_USER_RECOVERY_ANY: u64 = (1 << 3) | (1 << 4) | (1 << 9);

/// `UBLK_S_DEV_DEAD`.
pub const S_DEV_DEAD: u16 = 0;
/// `UBLK_S_DEV_LIVE`.
pub const S_DEV_LIVE: u16 = 1;

/// `UBLK_IO_OP_READ`.
pub const IO_OP_READ: u8 = 0;
/// `UBLK_IO_OP_WRITE`.
pub const IO_OP_WRITE: u8 = 1;
/// `UBLK_IO_OP_FLUSH`.
pub const IO_OP_FLUSH: u8 = 2;
/// `UBLK_IO_OP_DISCARD`.
pub const IO_OP_DISCARD: u8 = 3;
/// `UBLK_IO_OP_WRITE_ZEROES`.
pub const IO_OP_WRITE_ZEROES: u8 = 5;

/// `UBLK_ATTR_READ_ONLY`.
pub const ATTR_READ_ONLY: u32 = 1 << 0;
/// `UBLK_ATTR_VOLATILE_CACHE`: the device has a write cache, so the block
/// layer sends flushes.
pub const ATTR_VOLATILE_CACHE: u32 = 1 << 2;

/// `UBLK_PARAM_TYPE_BASIC`.
pub const PARAM_TYPE_BASIC: u32 = 1 << 0;
/// `UBLK_PARAM_TYPE_DISCARD`.
pub const PARAM_TYPE_DISCARD: u32 = 1 << 1;

/// `struct ublksrv_ctrl_cmd`: a control command, in the SQE's command
/// area (which is why the control ring has 128-byte SQEs).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CtrlCmd {
    /// The device the command is for (`u32::MAX`: a new one, any id).
    pub dev_id: u32,
    /// The queue, `u16::MAX` for a command that is not for one queue.
    pub queue_id: u16,
    /// Length of the buffer at `addr`.
    pub len: u16,
    /// A buffer in or out.
    pub addr: u64,
    /// Inline data (START_DEV: the server's pid).
    pub data: [u64; 1],
    /// For unprivileged devices and GET_DEV_INFO2 only.
    pub dev_path_len: u16,
    /// Padding.
    pub pad: u16,
    /// Reserved.
    pub reserved: u32,
}

/// `struct ublksrv_ctrl_dev_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CtrlDevInfo {
    /// Queues.
    pub nr_hw_queues: u16,
    /// Tags per queue.
    pub queue_depth: u16,
    /// `UBLK_S_DEV_*`.
    pub state: u16,
    /// Padding.
    pub pad0: u16,
    /// The largest request, bytes: each data buffer's size.
    pub max_io_buf_bytes: u32,
    /// The device number N of /dev/ublkcN and /dev/ublkbN.
    pub dev_id: u32,
    /// The server's pid, from START_DEV.
    pub ublksrv_pid: i32,
    /// Padding.
    pub pad1: u32,
    /// `UBLK_F_*`.
    pub flags: u64,
    /// The server's own, unseen by the driver.
    pub ublksrv_flags: u64,
    /// Owner, stored by the kernel.
    pub owner_uid: u32,
    /// Owner's group, stored by the kernel.
    pub owner_gid: u32,
    /// Reserved.
    pub reserved1: u64,
    /// Reserved.
    pub reserved2: u64,
}

/// `struct ublksrv_io_desc`: one request, in the mmap'd descriptor area
/// of its queue, indexed by tag.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IoDesc {
    /// Operation in bits 0-7, `UBLK_IO_F_*` flags above.
    pub op_flags: u32,
    /// Length in 512-byte sectors.
    pub nr_sectors: u32,
    /// First sector.
    pub start_sector: u64,
    /// The tag's buffer address, as fetched.
    pub addr: u64,
}

/// `struct ublksrv_io_cmd`: a per-queue command, in the SQE's 16-byte
/// command area (a plain 64-byte SQE holds it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IoCmd {
    /// Queue.
    pub q_id: u16,
    /// Tag.
    pub tag: u16,
    /// The request's result (COMMIT only): bytes, or a negative errno.
    pub result: i32,
    /// The tag's buffer in this process.
    pub addr: u64,
}

/// `struct ublk_param_basic`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ParamBasic {
    /// `UBLK_ATTR_*`.
    pub attrs: u32,
    /// log2 of the logical block size.
    pub logical_bs_shift: u8,
    /// log2 of the physical block size.
    pub physical_bs_shift: u8,
    /// log2 of the optimal I/O size.
    pub io_opt_shift: u8,
    /// log2 of the minimum I/O size.
    pub io_min_shift: u8,
    /// Largest request, sectors (at most `max_io_buf_bytes >> 9`).
    pub max_sectors: u32,
    /// Chunk size, sectors (0: none).
    pub chunk_sectors: u32,
    /// The device's size, sectors.
    pub dev_sectors: u64,
    /// DMA boundary mask (0: none).
    pub virt_boundary_mask: u64,
}

/// `struct ublk_param_discard`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ParamDiscard {
    /// Alignment, bytes.
    pub discard_alignment: u32,
    /// Granularity, bytes.
    pub discard_granularity: u32,
    /// Largest discard, sectors.
    pub max_discard_sectors: u32,
    /// Largest write-zeroes, sectors.
    pub max_write_zeroes_sectors: u32,
    /// Segments per discard.
    pub max_discard_segments: u16,
    /// Reserved.
    pub reserved0: u16,
}

/// `struct ublk_param_devt` (read-only: filled by GET_PARAMS).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ParamDevt {
    /// /dev/ublkcN's major.
    pub char_major: u32,
    /// /dev/ublkcN's minor.
    pub char_minor: u32,
    /// /dev/ublkbN's major (once started).
    pub disk_major: u32,
    /// /dev/ublkbN's minor.
    pub disk_minor: u32,
}

/// `struct ublk_param_zoned`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ParamZoned {
    /// Open zones.
    pub max_open_zones: u32,
    /// Active zones.
    pub max_active_zones: u32,
    /// Largest zone append, sectors.
    pub max_zone_append_sectors: u32,
    /// Reserved.
    pub reserved: [u8; 20],
}

/// `struct ublk_params` as of 6.12 (later kernels append more types; the
/// driver takes a shorter `len` as the older layout).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Params {
    /// `size_of::<Params>()`.
    pub len: u32,
    /// `UBLK_PARAM_TYPE_*` of the parts that are set.
    pub types: u32,
    /// Sizes and attributes.
    pub basic: ParamBasic,
    /// Discard and write-zeroes limits.
    pub discard: ParamDiscard,
    /// Device numbers.
    pub devt: ParamDevt,
    /// Zoned limits.
    pub zoned: ParamZoned,
}

// The layouts of the header, checked where they are built.
const _: () = assert!(size_of::<CtrlCmd>() == 32);
const _: () = assert!(size_of::<CtrlDevInfo>() == 64);
const _: () = assert!(size_of::<IoDesc>() == 24);
const _: () = assert!(size_of::<IoCmd>() == 16);
const _: () = assert!(size_of::<ParamBasic>() == 32);
const _: () = assert!(size_of::<ParamDiscard>() == 20);
const _: () = assert!(size_of::<ParamDevt>() == 16);
const _: () = assert!(size_of::<ParamZoned>() == 32);
const _: () = assert!(size_of::<Params>() == 112);

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers the C macros give (worked by hand from
    /// include/uapi/asm-generic/ioctl.h).
    #[test]
    fn ioctl_encoded_numbers() {
        assert_eq!(U_CMD_GET_DEV_INFO, 0x8020_7502);
        assert_eq!(U_CMD_ADD_DEV, 0xc020_7504);
        assert_eq!(U_CMD_DEL_DEV, 0xc020_7505);
        assert_eq!(U_CMD_START_DEV, 0xc020_7506);
        assert_eq!(U_CMD_STOP_DEV, 0xc020_7507);
        assert_eq!(U_CMD_SET_PARAMS, 0xc020_7508);
        assert_eq!(U_CMD_GET_PARAMS, 0x8020_7509);
        assert_eq!(U_IO_FETCH_REQ, 0xc010_7520);
        assert_eq!(U_IO_COMMIT_AND_FETCH_REQ, 0xc010_7521);
        assert_eq!(U_CMD_GET_FEATURES, 0x8020_7513);
    }

    /// `UBLKSRV_IO_BUF_OFFSET + (q_id << UBLK_QID_OFF) + (tag <<
    /// UBLK_TAG_OFF)`, with the header's 25 bits of offset and 16 of tag.
    #[test]
    fn user_copy_positions() {
        assert_eq!(user_copy_pos(0, 0), 0x8000_0000);
        assert_eq!(user_copy_pos(0, 1), 0x8000_0000 + (1 << 25));
        assert_eq!(user_copy_pos(1, 0), 0x8000_0000 + (1 << 41));
        assert_eq!(user_copy_pos(3, 31), 0x8000_0000 + (3 << 41) + (31 << 25));
    }

    #[test]
    fn field_offsets() {
        assert_eq!(std::mem::offset_of!(CtrlCmd, addr), 8);
        assert_eq!(std::mem::offset_of!(CtrlCmd, data), 16);
        assert_eq!(std::mem::offset_of!(CtrlDevInfo, flags), 24);
        assert_eq!(std::mem::offset_of!(CtrlDevInfo, owner_uid), 40);
        assert_eq!(std::mem::offset_of!(Params, basic), 8);
        assert_eq!(std::mem::offset_of!(Params, discard), 40);
        assert_eq!(std::mem::offset_of!(Params, devt), 60);
        assert_eq!(std::mem::offset_of!(Params, zoned), 76);
        assert_eq!(std::mem::offset_of!(IoDesc, start_sector), 8);
    }
}
