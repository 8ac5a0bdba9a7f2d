//! The transmission phase: requests in, replies out, many in flight.
//!
//! This module owns the request loop of one connection after the handshake.
//! The connection's thread reads request headers (and WRITE payloads,
//! straight into the buffer the device is given) off the stream, checks each request against the negotiated [`Session`] (flags,
//! capabilities, bounds, alignment, size cap) and hands it to a small pool of
//! scoped worker threads; each worker calls the device and writes the whole
//! reply under the connection's writer lock, so replies go out in completion
//! order, never interleaved. When every worker is busy and their queue is
//! full, the reading thread serves the request itself instead of sleeping
//! until a worker takes one: on a busy connection that saves a sleep and a
//! wake-up per request.
//!
//! Memory: a per-connection byte budget bounds the read data and write
//! payloads in flight; the reader takes a request's bytes from it *before*
//! reading the payload or queueing the READ, and waits while it is used up,
//! so a client that does not read its replies stops being read. The buffers
//! themselves are allocated only once the server-wide budget grants their
//! bytes (see `budget`). A reply that makes no progress for
//! `Config::stall_timeout` while others wait for that budget ends its
//! connection. It knows nothing of sockets or listeners: it reads a generic
//! `Read`, writes a generic `Write` (a `WouldBlock` from a write is a send
//! timeout and is retried), and calls `on_dead` when a reply cannot be
//! written (the caller then closes the stream so the reader wakes up).
//!
//! Extended headers (when the session negotiated them): requests are 32
//! bytes with a 64-bit length, which is a payload length when the request
//! has `NBD_CMD_FLAG_PAYLOAD_LEN` (every WRITE) and otherwise the length of
//! the range acted on (TRIM, WRITE_ZEROES, CACHE and BLOCK_STATUS may span
//! more than 4 GiB); every reply is an extended chunk carrying the request's
//! offset, and block status uses 64-bit descriptors. The spec says a WRITE
//! must carry the flag; QEMU 10's client leaves it off, so a WRITE's length
//! is taken as its payload's either way (the only reading that keeps the
//! stream in step). A compact request is
//! widened to the same form as soon as it is read, so the checks below run
//! on one shape.
//!
//! Errors in a request (bad flags, out of range, device failure) get an error
//! reply and the connection goes on. Bytes that are not a request (bad magic,
//! a truncated header or payload) end the connection after the requests
//! already read are answered.

use std::fmt;
use std::io::{self, Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use log::{debug, error, trace, warn};

use crate::budget::{ConnBudget, ServerBudget};
use crate::buffers::{Buffers, Lease, SLACK_BYTES};
use crate::conn_error::ConnError;
use crate::device::{BlockDevice, Extent};
use crate::error::{DeviceError, DeviceResult};
use crate::export::Config;
use crate::handshake::Session;
use crate::readahead::ReadAhead;
use crate::wire::{
    self, cf, chunk, cmd, tf, ChunkHeader, ExtendedChunkHeader, ExtendedRequestHeader,
    RequestHeader, SimpleReply,
};

/// Room kept in front of read data for the largest reply header (an
/// extended chunk header and the 8-byte offset of
/// `NBD_REPLY_TYPE_OFFSET_DATA`), so the reply goes out in one write
/// without copying the data.
const READ_ROOM: usize = ExtendedChunkHeader::LEN + 8;
/// Most block status descriptors in one reply.
const MAX_DESCRIPTORS: usize = 4096;

/// How the transmission phase ended without an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// The client sent `NBD_CMD_DISC`.
    Disconnect,
    /// The client closed the stream between requests (or the server shut the
    /// reading side down).
    Eof,
    /// A reply could not be written.
    WriteFailed,
}

impl fmt::Display for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            End::Disconnect => "client disconnected (NBD_CMD_DISC)",
            End::Eof => "connection closed between requests",
            End::WriteFailed => "reply could not be sent",
        })
    }
}

/// A checked request, ready for the device.
enum Op<'b> {
    Read {
        offset: u64,
        len: u32,
    },
    Write {
        offset: u64,
        data: Lease<'b>,
        fua: bool,
    },
    Flush,
    Trim {
        offset: u64,
        len: u64,
        fua: bool,
    },
    Zero {
        offset: u64,
        len: u64,
        may_trim: bool,
        fast: bool,
        fua: bool,
    },
    Cache {
        offset: u64,
        len: u64,
    },
    BlockStatus {
        offset: u64,
        len: u64,
        req_one: bool,
    },
    /// Refused before reaching the device.
    Fail(DeviceError),
}

struct Job<'b> {
    cookie: u64,
    /// The request's offset, which an extended reply repeats.
    offset: u64,
    command: u16,
    op: Op<'b>,
    /// Budget bytes to give back once the reply is sent.
    charge: u64,
}

/// A reply ready to send: `buf[start..]`.
struct Reply<'b> {
    buf: ReplyBuf<'b>,
    start: usize,
}

/// A reply's bytes: its own for headers and errors, a lent payload buffer
/// for read data.
enum ReplyBuf<'b> {
    Own(Vec<u8>),
    Lent(Lease<'b>),
}

impl std::ops::Deref for ReplyBuf<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ReplyBuf::Own(v) => v,
            ReplyBuf::Lent(l) => l,
        }
    }
}

/// Shared state of one connection in transmission.
struct Conn<'a, W> {
    session: &'a Session,
    writer: Mutex<W>,
    dead: AtomicBool,
    budget: ConnBudget<'a>,
    buffers: Buffers<'a>,
    server: &'a ServerBudget,
    stall_timeout: Duration,
    on_dead: &'a (dyn Fn() + Sync),
    id: u64,
}

/// Serves requests until the client disconnects or the stream fails.
/// Payload memory is counted in the connection's own budget (from
/// `config`) and in `server`'s.
pub(crate) fn serve<R: Read, W: Write + Send>(
    reader: &mut ReadAhead<R>,
    writer: W,
    session: &Session,
    config: &Config,
    server: &ServerBudget,
    on_dead: &(dyn Fn() + Sync),
    id: u64,
) -> Result<End, ConnError> {
    let conn = Conn {
        session,
        writer: Mutex::new(writer),
        dead: AtomicBool::new(false),
        budget: ConnBudget::new(config.budget(), server),
        buffers: Buffers::new(config.budget() as usize + SLACK_BYTES, server),
        server,
        stall_timeout: config.stall_timeout,
        on_dead,
        id,
    };
    if config.workers == 0 {
        return read_loop(reader, &conn, &mut |job| conn.execute(job));
    }
    let (tx, rx) = mpsc::sync_channel::<Job>(config.workers * 4);
    let rx = Mutex::new(rx);
    thread::scope(|s| {
        let mut spawned = 0;
        for i in 0..config.workers {
            let (conn, rx) = (&conn, &rx);
            let mut b = thread::Builder::new().name(format!("nbd-{id}-w{i}"));
            if let Some(bytes) = config.conn_thread_stack {
                b = b.stack_size(bytes);
            }
            let start = config.on_conn_thread_start;
            match b.spawn_scoped(s, move || {
                if let Some(start) = start {
                    start();
                }
                conn.work(rx)
            }) {
                Ok(_) => spawned += 1,
                Err(e) => warn!("conn {id}: cannot start worker {i}: {e}"),
            }
        }
        let res = if spawned == 0 {
            read_loop(reader, &conn, &mut |job| conn.execute(job))
        } else {
            // A job goes to a worker if the queue has room; when every
            // worker is busy and the queue is full, the reader serves it
            // itself rather than sleeping until a worker takes one (a
            // sleep and a wake-up per request on a busy connection, and no
            // more requests could be read meanwhile anyway).
            read_loop(reader, &conn, &mut |job| match tx.try_send(job) {
                Ok(()) => {}
                Err(mpsc::TrySendError::Full(job) | mpsc::TrySendError::Disconnected(job)) => {
                    conn.execute(job)
                }
            })
        };
        // Workers finish what is queued, then see the channel closed.
        drop(tx);
        res
    })
}

/// Reads whole `buf`, or nothing if the stream ends first.
fn read_header<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn read_loop<'c, R: Read, W: Write>(
    r: &mut ReadAhead<R>,
    conn: &'c Conn<'_, W>,
    submit: &mut dyn FnMut(Job<'c>),
) -> Result<End, ConnError> {
    let extended = conn.session.extended;
    let mut hb = [0u8; ExtendedRequestHeader::LEN];
    let hb = if extended {
        &mut hb[..]
    } else {
        &mut hb[..RequestHeader::LEN]
    };
    loop {
        if conn.dead.load(Ordering::Relaxed) {
            return Ok(End::WriteFailed);
        }
        if !read_header(r, hb)? {
            return Ok(End::Eof);
        }
        let req = if extended {
            ExtendedRequestHeader::parse(hb)?
        } else {
            RequestHeader::parse(hb)?.into()
        };
        trace!(
            "conn {}: {} cookie {:#x} offset {} length {} flags {:#x}",
            conn.id,
            cmd::name(req.command),
            req.cookie,
            req.offset,
            req.length,
            req.flags
        );
        if req.command == cmd::DISC {
            return Ok(End::Disconnect);
        }
        let job = conn.decode(r, req)?;
        submit(job);
    }
}

impl<W: Write> Conn<'_, W> {
    fn device(&self) -> &dyn BlockDevice {
        self.session.export.device().as_ref()
    }

    /// Checks a request against the negotiated session. `Err` is the answer
    /// to send instead of calling the device.
    fn check(&self, req: &ExtendedRequestHeader) -> DeviceResult<()> {
        let f = self.session.flags;
        let has = |flag: u16| f & flag != 0;
        let (allowed, negotiated, write_like) = match req.command {
            cmd::READ => (cf::FUA | cf::DF, true, false),
            cmd::WRITE => (cf::FUA | cf::PAYLOAD_LEN, true, true),
            cmd::FLUSH => (cf::FUA, has(tf::SEND_FLUSH), false),
            cmd::TRIM => (cf::FUA, has(tf::SEND_TRIM), true),
            cmd::WRITE_ZEROES => (
                cf::FUA | cf::NO_HOLE | cf::FAST_ZERO,
                has(tf::SEND_WRITE_ZEROES),
                true,
            ),
            cmd::CACHE => (cf::FUA, has(tf::SEND_CACHE), false),
            cmd::BLOCK_STATUS => (
                cf::FUA | cf::REQ_ONE,
                self.session.meta_context.is_some(),
                false,
            ),
            other => return Err(DeviceError::invalid(format!("unknown command {other}"))),
        };
        let name = cmd::name(req.command);
        if req.flags & !allowed != 0 {
            return Err(DeviceError::invalid(format!(
                "flags {:#x} are not valid for {name}",
                req.flags & !allowed
            )));
        }
        let unnegotiated = [
            (cf::FUA, tf::SEND_FUA),
            (cf::DF, tf::SEND_DF),
            (cf::FAST_ZERO, tf::SEND_FAST_ZERO),
        ];
        for (flag, needs) in unnegotiated {
            if req.flags & flag != 0 && !has(needs) {
                return Err(DeviceError::invalid(format!(
                    "command flag {flag:#x} was not negotiated"
                )));
            }
        }
        if write_like && has(tf::READ_ONLY) {
            return Err(DeviceError::read_only());
        }
        if !negotiated {
            return Err(DeviceError::invalid(format!("{name} was not negotiated")));
        }
        if req.command == cmd::FLUSH {
            if req.offset != 0 || req.length != 0 {
                return Err(DeviceError::invalid("FLUSH with non-zero offset or length"));
            }
            return Ok(());
        }
        if req.length == 0 {
            return Err(DeviceError::invalid(format!("{name} of length 0")));
        }
        let payload = matches!(req.command, cmd::READ | cmd::WRITE);
        if payload && req.length > self.session.block.maximum as u64 {
            return Err(DeviceError::invalid(format!(
                "{name} of {} bytes is over the maximum of {}",
                req.length, self.session.block.maximum
            )));
        }
        let size = self.device().size();
        let end = req.offset.checked_add(req.length);
        if end.is_none_or(|end| end > size) {
            let msg = format!(
                "{name} at {}+{} is past the end of the export ({size} bytes)",
                req.offset, req.length
            );
            return Err(if write_like {
                DeviceError::no_space(msg)
            } else {
                DeviceError::invalid(msg)
            });
        }
        let min = self.session.block.minimum as u64;
        if min > 1 && (req.offset % min != 0 || req.length % min != 0) {
            return Err(DeviceError::invalid(format!(
                "{name} at {}+{} is not aligned to the minimum block size {min}",
                req.offset, req.length
            )));
        }
        Ok(())
    }

    /// Turns a header into a job, reading (or skipping) a WRITE payload.
    fn decode<R: Read>(
        &self,
        r: &mut ReadAhead<R>,
        req: ExtendedRequestHeader,
    ) -> Result<Job<'_>, ConnError> {
        let job = |op, charge| Job {
            cookie: req.cookie,
            offset: req.offset,
            command: req.command,
            op,
            charge,
        };
        // A payload follows every WRITE, and an extended request that says
        // so (whatever its command).
        let has_payload = req.command == cmd::WRITE
            || (self.session.extended && req.flags & cf::PAYLOAD_LEN != 0);
        if let Err(e) = self.check(&req) {
            if has_payload {
                if self.session.extended && req.length > self.session.block.maximum as u64 {
                    // The spec's answer to a payload over the maximum: a
                    // hard disconnect rather than skipping it.
                    return Err(ConnError::Protocol(format!(
                        "{} with a payload of {} bytes, over the maximum of {}",
                        cmd::name(req.command),
                        req.length,
                        self.session.block.maximum
                    )));
                }
                // The payload is framed by the length; skip it to stay in step.
                let n = io::copy(&mut r.by_ref().take(req.length), &mut io::sink())?;
                if n < req.length {
                    return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
                }
            }
            return Ok(job(Op::Fail(e), 0));
        }
        let (offset, len) = (req.offset, req.length);
        let fua = req.flags & cf::FUA != 0;
        let op = match req.command {
            // `check` bounded READ and WRITE lengths by the maximum block
            // size, a u32.
            cmd::READ => {
                self.budget.acquire(len);
                let len = len as u32;
                return Ok(job(Op::Read { offset, len }, len as u64));
            }
            cmd::WRITE => {
                self.budget.acquire(len);
                // Straight from the socket into the buffer the device
                // reads, without a pass through the read-ahead buffer.
                let mut data = self.buffers.take(len as usize);
                if let Err(e) = r.read_payload(&mut data) {
                    self.budget.release(len);
                    return Err(e.into());
                }
                return Ok(job(Op::Write { offset, data, fua }, len));
            }
            cmd::FLUSH => Op::Flush,
            cmd::TRIM => Op::Trim { offset, len, fua },
            cmd::WRITE_ZEROES => Op::Zero {
                offset,
                len,
                may_trim: req.flags & cf::NO_HOLE == 0,
                fast: req.flags & cf::FAST_ZERO != 0,
                fua,
            },
            cmd::CACHE => Op::Cache { offset, len },
            cmd::BLOCK_STATUS => Op::BlockStatus {
                offset,
                len,
                req_one: req.flags & cf::REQ_ONE != 0,
            },
            other => Op::Fail(DeviceError::invalid(format!("unknown command {other}"))),
        };
        Ok(job(op, 0))
    }

    /// A worker: serves jobs until the reader closes the queue.
    fn work<'c>(&'c self, rx: &Mutex<mpsc::Receiver<Job<'c>>>) {
        loop {
            let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
            match job {
                Ok(job) => self.execute(job),
                Err(_) => return,
            }
        }
    }

    fn execute(&self, job: Job<'_>) {
        let charge = job.charge;
        if self.dead.load(Ordering::Relaxed) && matches!(job.op, Op::Read { .. }) {
            // Nobody will read the data: do not allocate it.
            drop(job);
            self.budget.release(charge);
            return;
        }
        let reply = self.perform(job);
        self.send(&reply);
        // The payload buffer goes back before the budget, so a reader that
        // was waiting for room finds it to reuse.
        drop(reply);
        self.budget.release(charge);
    }

    fn perform(&self, job: Job<'_>) -> Reply<'_> {
        let Job {
            cookie,
            offset: req_offset,
            command,
            op,
            ..
        } = job;
        let dev = self.device();
        let run = || -> DeviceResult<Reply<'_>> {
            match op {
                Op::Read { offset, len } => {
                    // The device fills every byte after the room (its
                    // contract), so a lent buffer's old bytes never go out.
                    let mut buf = self.buffers.take(READ_ROOM + len as usize);
                    dev.read_at(offset, &mut buf[READ_ROOM..])?;
                    return Ok(self.read_reply(cookie, offset, buf));
                }
                Op::Write { offset, data, fua } => dev.write_at(offset, &data, fua),
                Op::Flush => dev.flush(),
                Op::Trim { offset, len, fua } => {
                    dev.trim(offset, len)?;
                    if fua {
                        dev.flush()?;
                    }
                    Ok(())
                }
                Op::Zero {
                    offset,
                    len,
                    may_trim,
                    fast,
                    fua,
                } => {
                    dev.write_zeroes(offset, len, may_trim, fast)?;
                    if fua {
                        dev.flush()?;
                    }
                    Ok(())
                }
                Op::Cache { offset, len } => dev.cache(offset, len),
                Op::BlockStatus {
                    offset,
                    len,
                    req_one,
                } => {
                    let extents = dev.block_status(offset, len)?;
                    return Ok(self.status_reply(cookie, offset, len, req_one, &extents));
                }
                Op::Fail(e) => Err(e),
            }
            .map(|()| self.ok_reply(cookie, req_offset))
        };
        let result = catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|_| {
            error!(
                "conn {}: the device panicked in {}",
                self.id,
                cmd::name(command)
            );
            Err(DeviceError::io("the device failed"))
        });
        result.unwrap_or_else(|e| {
            debug!(
                "conn {}: {} cookie {cookie:#x} failed: {e}",
                self.id,
                cmd::name(command)
            );
            self.error_reply(cookie, req_offset, &e)
        })
    }

    fn ok_reply(&self, cookie: u64, offset: u64) -> Reply<'static> {
        if self.session.extended {
            return self.chunk_reply(cookie, offset, chunk::NONE, &[]);
        }
        Reply {
            buf: ReplyBuf::Own(SimpleReply { error: 0, cookie }.encode().to_vec()),
            start: 0,
        }
    }

    /// `buf` holds the data after `READ_ROOM` bytes of room; the reply's
    /// header is written into the end of that room.
    fn read_reply<'b>(&self, cookie: u64, offset: u64, mut buf: Lease<'b>) -> Reply<'b> {
        let len = buf.len() - READ_ROOM;
        let offset_field = READ_ROOM - 8;
        let start = if self.session.structured {
            // An OFFSET_DATA chunk: its header, then the offset, then data.
            let (header, n) = self.chunk_header(cookie, offset, chunk::OFFSET_DATA, 8 + len);
            let start = offset_field - n;
            buf[start..offset_field].copy_from_slice(&header[..n]);
            buf[offset_field..READ_ROOM].copy_from_slice(&offset.to_be_bytes());
            start
        } else {
            let start = READ_ROOM - SimpleReply::LEN;
            buf[start..READ_ROOM].copy_from_slice(&SimpleReply { error: 0, cookie }.encode());
            start
        };
        Reply {
            buf: ReplyBuf::Lent(buf),
            start,
        }
    }

    fn error_reply(&self, cookie: u64, offset: u64, e: &DeviceError) -> Reply<'static> {
        let error = e.errno().code();
        if !self.session.structured {
            return Reply {
                buf: ReplyBuf::Own(SimpleReply { error, cookie }.encode().to_vec()),
                start: 0,
            };
        }
        let payload = wire::encode_error_payload(error, e.message());
        self.chunk_reply(cookie, offset, chunk::ERROR, &payload)
    }

    /// One block status chunk for `len` bytes from the device's extents:
    /// neighbours with the same flags merged, at most `MAX_DESCRIPTORS`, a
    /// single one for `REQ_ONE`. Descriptors are 64-bit under extended
    /// headers; otherwise `len` came from a 32-bit field, so every length
    /// fits 32 bits.
    fn status_reply(
        &self,
        cookie: u64,
        offset: u64,
        len: u64,
        req_one: bool,
        extents: &[Extent],
    ) -> Reply<'static> {
        let mut left = len;
        let mut out: Vec<(u64, u32)> = Vec::new();
        for e in extents {
            if left == 0 || out.len() == MAX_DESCRIPTORS {
                break;
            }
            let n = e.length.min(left);
            if n == 0 {
                continue;
            }
            match out.last_mut() {
                Some(last) if last.1 == e.flags => last.0 += n,
                _ => out.push((n, e.flags)),
            }
            left -= n;
        }
        if out.is_empty() {
            out.push((len, 0));
        }
        if req_one {
            out.truncate(1);
        }
        let id = self.session.meta_context.unwrap_or(0);
        if self.session.extended {
            let wide: Vec<(u64, u64)> = out.iter().map(|&(n, f)| (n, f as u64)).collect();
            let payload = wire::encode_block_status_ext_payload(id, &wide);
            return self.chunk_reply(cookie, offset, chunk::BLOCK_STATUS_EXT, &payload);
        }
        let narrow: Vec<(u32, u32)> = out.iter().map(|&(n, f)| (n as u32, f)).collect();
        let payload = wire::encode_block_status_payload(id, &narrow);
        self.chunk_reply(cookie, offset, chunk::BLOCK_STATUS, &payload)
    }

    /// The header of a final chunk of `kind` with `payload_len` bytes of
    /// payload, in the negotiated form (extended, or structured): the bytes
    /// are `.0[.. .1]`, on the stack, as this runs for every read.
    fn chunk_header(
        &self,
        cookie: u64,
        offset: u64,
        kind: u16,
        payload_len: usize,
    ) -> ([u8; ExtendedChunkHeader::LEN], usize) {
        let mut out = [0u8; ExtendedChunkHeader::LEN];
        if self.session.extended {
            let h = ExtendedChunkHeader {
                flags: chunk::FLAG_DONE,
                kind,
                cookie,
                offset,
                length: payload_len as u64,
            };
            out.copy_from_slice(&h.encode());
            (out, ExtendedChunkHeader::LEN)
        } else {
            let h = ChunkHeader {
                flags: chunk::FLAG_DONE,
                kind,
                cookie,
                length: payload_len as u32,
            };
            out[..ChunkHeader::LEN].copy_from_slice(&h.encode());
            (out, ChunkHeader::LEN)
        }
    }

    /// A final chunk with `payload`, in the negotiated header form.
    fn chunk_reply(&self, cookie: u64, offset: u64, kind: u16, payload: &[u8]) -> Reply<'static> {
        let (header, n) = self.chunk_header(cookie, offset, kind, payload.len());
        let mut buf = Vec::with_capacity(n + payload.len());
        buf.extend_from_slice(&header[..n]);
        buf.extend_from_slice(payload);
        Reply {
            buf: ReplyBuf::Own(buf),
            start: 0,
        }
    }

    /// Writes a reply unless the connection is already dead; on failure marks
    /// it dead and lets the owner close the stream.
    fn send(&self, reply: &Reply<'_>) {
        if self.dead.load(Ordering::Relaxed) {
            return;
        }
        let res = {
            let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
            self.write_reply(&mut *w, &reply.buf[reply.start..])
        };
        if let Err(e) = res {
            if !self.dead.swap(true, Ordering::Relaxed) {
                if e.kind() == io::ErrorKind::TimedOut {
                    self.server.count_stalled_close();
                    warn!("conn {}: closed: {e}", self.id);
                } else {
                    debug!("conn {}: cannot send a reply: {e}", self.id);
                }
                (self.on_dead)();
            }
        }
    }

    /// Writes all of `buf`, then flushes (a TLS writer sends the
    /// ciphertext it kept; a socket has nothing to flush). The server gives
    /// the socket a short send timeout, so a write to a client that reads
    /// nothing returns `WouldBlock` now and then; it is retried, unless
    /// nothing at all was sent for `stall_timeout` while other requests
    /// wait for the server-wide budget: then the connection ends
    /// (`TimedOut`) and gives its memory back.
    fn write_reply(&self, w: &mut W, mut buf: &[u8]) -> io::Result<()> {
        let mut progress = Instant::now();
        while !buf.is_empty() {
            match w.write(buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    buf = &buf[n..];
                    progress = Instant::now();
                }
                Err(e) => self.retry_or_fail(e, progress)?,
            }
        }
        loop {
            match w.flush() {
                Ok(()) => return Ok(()),
                Err(e) => self.retry_or_fail(e, progress)?,
            }
        }
    }

    /// Whether a failed write may be tried again: `Ok` for an interrupted
    /// or timed-out one, unless it stalled too long (see `write_reply`).
    fn retry_or_fail(&self, e: io::Error, progress: Instant) -> io::Result<()> {
        match e.kind() {
            io::ErrorKind::Interrupted => Ok(()),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                let stalled = progress.elapsed();
                if stalled >= self.stall_timeout && self.server.has_waiters() {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "the client read none of its replies for {stalled:?} while \
                             other requests waited for memory"
                        ),
                    ));
                }
                Ok(())
            }
            _ => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::io::IoSlice;
    use std::sync::Arc;

    use super::*;
    use crate::device::BlockSize;
    use crate::export::Export;
    use crate::MemDevice;

    /// A client's side of the stream: takes at most 7 bytes per call,
    /// across as many slices as it is given, and says `WouldBlock` on every
    /// third call (a send timeout), so replies go out in many pieces.
    #[derive(Default)]
    struct Narrow {
        out: Vec<u8>,
        calls: usize,
    }

    impl Write for Narrow {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[IoSlice::new(buf)])
        }

        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.calls += 1;
            if self.calls % 3 == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut n = 0;
            for b in bufs {
                let k = b.len().min(7 - n);
                self.out.extend_from_slice(&b[..k]);
                n += k;
                if n == 7 {
                    break;
                }
            }
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn request(command: u16, cookie: u64, offset: u64, length: u32) -> Vec<u8> {
        RequestHeader {
            flags: 0,
            command,
            cookie,
            offset,
            length,
        }
        .encode()
        .to_vec()
    }

    /// Serves `input` on `device` with `workers` workers; returns how it
    /// ended and every byte the client received.
    fn run(device: &Arc<MemDevice>, input: &[u8], workers: usize) -> (End, Vec<u8>) {
        let device = device.clone();
        let session = Session {
            export: Arc::new(Export::new("", device)),
            structured: false,
            extended: false,
            meta_context: None,
            flags: tf::HAS_FLAGS | tf::SEND_FLUSH,
            block: BlockSize {
                minimum: 1,
                preferred: 4096,
                maximum: 64 * 1024,
            },
        };
        let config = Config {
            workers,
            ..Config::default()
        };
        let server = ServerBudget::unlimited();
        let writer = Arc::new(Mutex::new(Narrow::default()));
        let end = serve(
            &mut ReadAhead::new(input),
            Client(writer.clone()),
            &session,
            &config,
            &server,
            &|| {},
            0,
        )
        .unwrap();
        assert_eq!(server.stats().in_use, 0, "every buffer went back");
        let out = std::mem::take(&mut writer.lock().unwrap().out);
        (end, out)
    }

    /// The server's end of the stream, which the test reads afterwards.
    struct Client(Arc<Mutex<Narrow>>);

    impl Write for Client {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().write(buf)
        }

        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.0.lock().unwrap().write_vectored(bufs)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// The data written at `offset` by the test below.
    fn block(offset: u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (offset as usize / 512 + i * 3) as u8)
            .collect()
    }

    #[test]
    fn every_reply_arrives_once_and_whole_whoever_sends_it() {
        for workers in [0, 1, 4] {
            // 40 writes of 4 KiB and a flush: replies finish in any order
            // on any thread, and each must go out once and whole through a
            // writer that takes a few bytes at a time.
            let mut input = Vec::new();
            for i in 0..40u64 {
                let offset = i * 8192;
                input.extend(request(cmd::WRITE, 1000 + i, offset, 4096));
                input.extend(block(offset, 4096));
            }
            input.extend(request(cmd::FLUSH, 1, 0, 0));
            let device = Arc::new(MemDevice::new(1 << 20));
            let (end, out) = run(&device, &input, workers);
            assert_eq!(end, End::Eof);
            assert_eq!(out.len(), 41 * SimpleReply::LEN);
            let mut seen = HashMap::new();
            for r in out.chunks(SimpleReply::LEN) {
                let reply = SimpleReply::parse(r).unwrap();
                assert_eq!(reply.error, 0, "workers {workers}");
                *seen.entry(reply.cookie).or_insert(0) += 1;
            }
            assert_eq!(seen.len(), 41, "workers {workers}");
            assert!(seen.values().all(|&n| n == 1), "workers {workers}");

            // A second connection reads them back: each read's data
            // follows its own reply header, whichever thread sent it.
            let mut input = Vec::new();
            for i in 0..40u64 {
                input.extend(request(cmd::READ, 2000 + i, i * 8192, 4096));
            }
            input.extend(request(cmd::DISC, 0, 0, 0));
            let (end, out) = run(&device, &input, workers);
            assert_eq!(end, End::Disconnect);
            assert_eq!(out.len(), 40 * (SimpleReply::LEN + 4096));
            let mut seen = 0;
            for r in out.chunks(SimpleReply::LEN + 4096) {
                let reply = SimpleReply::parse(&r[..SimpleReply::LEN]).unwrap();
                assert_eq!(reply.error, 0);
                let i = reply.cookie - 2000;
                assert!(i < 40, "workers {workers}: cookie {}", reply.cookie);
                assert!(
                    r[SimpleReply::LEN..] == block(i * 8192, 4096)[..],
                    "workers {workers}: read {i}"
                );
                seen |= 1u64 << i;
            }
            assert_eq!(seen, (1u64 << 40) - 1, "workers {workers}: every read once");
        }
    }
}
