//! The NBD wire format: constants, and pure functions between messages and
//! bytes.
//!
//! This module owns every number and byte layout of the protocol
//! (<https://github.com/NetworkBlockDevice/nbd/blob/master/doc/proto.md>):
//! magics, flags, option and command codes, and the encoders and parsers of
//! each message, for both directions (the client side is used by tests, the
//! fuzzer and anyone writing a client). Parsers take byte slices and return a
//! [`WireError`] for anything malformed; they never panic and never read past
//! the slice. This module does no I/O and keeps no state: which message may
//! come when is the business of `handshake` and `transmission`.
//!
//! All integers are big-endian ("network byte order"). The protocol's request
//! "handle" is called *cookie* here, as in the current spec.

use std::fmt;

use crate::device::BlockSize;

/// `NBDMAGIC`: first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: newstyle magic, also the prefix of every client option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request (`NBD_REQUEST_MAGIC`).
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply (`NBD_SIMPLE_REPLY_MAGIC`).
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk (`NBD_STRUCTURED_REPLY_MAGIC`).
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;
/// Magic of a request with extended headers (`NBD_EXTENDED_REQUEST_MAGIC`).
pub const EXTENDED_REQUEST_MAGIC: u32 = 0x21e4_1c71;
/// Magic of a reply chunk with extended headers (`NBD_EXTENDED_REPLY_MAGIC`).
pub const EXTENDED_REPLY_MAGIC: u32 = 0x6e8a_278c;
/// Longest string (export name, description, message) the spec allows.
pub const MAX_STRING: usize = 4096;

/// Handshake flags (server, 16 bits) and client flags (32 bits).
pub mod hs {
    /// `NBD_FLAG_FIXED_NEWSTYLE`.
    pub const FIXED_NEWSTYLE: u16 = 1 << 0;
    /// `NBD_FLAG_NO_ZEROES`.
    pub const NO_ZEROES: u16 = 1 << 1;
    /// `NBD_FLAG_C_FIXED_NEWSTYLE`.
    pub const C_FIXED_NEWSTYLE: u32 = 1 << 0;
    /// `NBD_FLAG_C_NO_ZEROES`.
    pub const C_NO_ZEROES: u32 = 1 << 1;
}

/// Option codes (`NBD_OPT_*`).
pub mod opt {
    /// Choose an export and enter transmission (no reply on failure).
    pub const EXPORT_NAME: u32 = 1;
    /// End the negotiation.
    pub const ABORT: u32 = 2;
    /// List the exports.
    pub const LIST: u32 = 3;
    /// Upgrade to TLS.
    pub const STARTTLS: u32 = 5;
    /// Ask about an export.
    pub const INFO: u32 = 6;
    /// Ask about an export and enter transmission.
    pub const GO: u32 = 7;
    /// Use structured replies.
    pub const STRUCTURED_REPLY: u32 = 8;
    /// List metadata contexts.
    pub const LIST_META_CONTEXT: u32 = 9;
    /// Select metadata contexts.
    pub const SET_META_CONTEXT: u32 = 10;
    /// Use 32-byte request and reply headers with 64-bit lengths.
    pub const EXTENDED_HEADERS: u32 = 11;
}

/// Option reply types (`NBD_REP_*`).
pub mod rep {
    /// The option succeeded (or the list is complete).
    pub const ACK: u32 = 1;
    /// One export of a list.
    pub const SERVER: u32 = 2;
    /// One piece of export information.
    pub const INFO: u32 = 3;
    /// One metadata context.
    pub const META_CONTEXT: u32 = 4;
    /// Bit set in every error reply.
    pub const ERR: u32 = 1 << 31;
    /// Unknown option.
    pub const ERR_UNSUP: u32 = ERR | 1;
    /// Forbidden by policy.
    pub const ERR_POLICY: u32 = ERR | 2;
    /// Syntactically invalid.
    pub const ERR_INVALID: u32 = ERR | 3;
    /// Not supported on this platform.
    pub const ERR_PLATFORM: u32 = ERR | 4;
    /// TLS required first.
    pub const ERR_TLS_REQD: u32 = ERR | 5;
    /// No such export.
    pub const ERR_UNKNOWN: u32 = ERR | 6;
    /// The server is shutting down.
    pub const ERR_SHUTDOWN: u32 = ERR | 7;
    /// The client must ask for block sizes.
    pub const ERR_BLOCK_SIZE_REQD: u32 = ERR | 8;
    /// The option data is too large.
    pub const ERR_TOO_BIG: u32 = ERR | 9;
    /// Extended headers are required, or cannot be downgraded to
    /// structured replies once on.
    pub const ERR_EXT_HEADER_REQD: u32 = ERR | 10;
}

/// Information types of `NBD_OPT_INFO` / `NBD_OPT_GO` (`NBD_INFO_*`).
pub mod info {
    /// Size and transmission flags.
    pub const EXPORT: u16 = 0;
    /// Canonical export name.
    pub const NAME: u16 = 1;
    /// Description for humans.
    pub const DESCRIPTION: u16 = 2;
    /// Block size constraints.
    pub const BLOCK_SIZE: u16 = 3;
}

/// Transmission flags (`NBD_FLAG_*`, 16 bits).
pub mod tf {
    /// Always set.
    pub const HAS_FLAGS: u16 = 1 << 0;
    /// The export refuses writes.
    pub const READ_ONLY: u16 = 1 << 1;
    /// `NBD_CMD_FLUSH` is supported.
    pub const SEND_FLUSH: u16 = 1 << 2;
    /// `NBD_CMD_FLAG_FUA` is supported.
    pub const SEND_FUA: u16 = 1 << 3;
    /// Rotational medium (a scheduling hint).
    pub const ROTATIONAL: u16 = 1 << 4;
    /// `NBD_CMD_TRIM` is supported.
    pub const SEND_TRIM: u16 = 1 << 5;
    /// `NBD_CMD_WRITE_ZEROES` is supported.
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    /// `NBD_CMD_FLAG_DF` is supported (needs structured replies).
    pub const SEND_DF: u16 = 1 << 7;
    /// Several connections may share the export.
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
    /// `NBD_CMD_RESIZE` is supported.
    pub const SEND_RESIZE: u16 = 1 << 9;
    /// `NBD_CMD_CACHE` is supported.
    pub const SEND_CACHE: u16 = 1 << 10;
    /// `NBD_CMD_FLAG_FAST_ZERO` is supported.
    pub const SEND_FAST_ZERO: u16 = 1 << 11;
}

/// Command types (`NBD_CMD_*`).
pub mod cmd {
    /// Read.
    pub const READ: u16 = 0;
    /// Write (a payload follows the header).
    pub const WRITE: u16 = 1;
    /// Disconnect (no reply).
    pub const DISC: u16 = 2;
    /// Flush.
    pub const FLUSH: u16 = 3;
    /// Trim (discard).
    pub const TRIM: u16 = 4;
    /// Prefetch.
    pub const CACHE: u16 = 5;
    /// Write zeroes.
    pub const WRITE_ZEROES: u16 = 6;
    /// Query metadata (block status).
    pub const BLOCK_STATUS: u16 = 7;

    /// A name for logs.
    pub fn name(command: u16) -> &'static str {
        match command {
            READ => "READ",
            WRITE => "WRITE",
            DISC => "DISC",
            FLUSH => "FLUSH",
            TRIM => "TRIM",
            CACHE => "CACHE",
            WRITE_ZEROES => "WRITE_ZEROES",
            BLOCK_STATUS => "BLOCK_STATUS",
            _ => "unknown",
        }
    }
}

/// Command flags (`NBD_CMD_FLAG_*`).
pub mod cf {
    /// Force unit access.
    pub const FUA: u16 = 1 << 0;
    /// Write zeroes without deallocating.
    pub const NO_HOLE: u16 = 1 << 1;
    /// Do not fragment the read reply.
    pub const DF: u16 = 1 << 2;
    /// Block status: one extent is enough.
    pub const REQ_ONE: u16 = 1 << 3;
    /// Write zeroes only if it is fast.
    pub const FAST_ZERO: u16 = 1 << 4;
    /// The length is a payload length (extended headers only).
    pub const PAYLOAD_LEN: u16 = 1 << 5;
}

/// Structured reply chunk types (`NBD_REPLY_TYPE_*`) and flags.
pub mod chunk {
    /// The final chunk of a reply.
    pub const FLAG_DONE: u16 = 1 << 0;
    /// No payload.
    pub const NONE: u16 = 0;
    /// Data at an offset.
    pub const OFFSET_DATA: u16 = 1;
    /// A hole at an offset.
    pub const OFFSET_HOLE: u16 = 2;
    /// Block status descriptors (32-bit lengths and flags).
    pub const BLOCK_STATUS: u16 = 5;
    /// Block status descriptors with 64-bit lengths and flags (extended
    /// headers only).
    pub const BLOCK_STATUS_EXT: u16 = 6;
    /// An error.
    pub const ERROR: u16 = (1 << 15) | 1;
    /// An error at an offset.
    pub const ERROR_OFFSET: u16 = (1 << 15) | 2;
}

/// A malformed message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// A magic number did not match.
    BadMagic {
        /// The magic that was expected.
        expected: u64,
        /// The value found.
        found: u64,
    },
    /// The message ended early.
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        got: usize,
    },
    /// Bytes were left over after the message.
    Trailing(usize),
    /// A string is not valid UTF-8, contains NUL, or is too long.
    BadString(&'static str),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::BadMagic { expected, found } => {
                write!(f, "bad magic {found:#x} (expected {expected:#x})")
            }
            WireError::Truncated { needed, got } => {
                write!(f, "message truncated: needed {needed} bytes, got {got}")
            }
            WireError::Trailing(n) => write!(f, "{n} unexpected bytes after the message"),
            WireError::BadString(why) => write!(f, "bad string: {why}"),
        }
    }
}

impl std::error::Error for WireError {}

/// Result of a parser.
pub type WireResult<T> = Result<T, WireError>;

/// A cursor over a byte slice that reads big-endian integers.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    fn take(&mut self, n: usize) -> WireResult<&'a [u8]> {
        let rest = &self.buf[self.pos..];
        if rest.len() < n {
            return Err(WireError::Truncated {
                needed: self.pos + n,
                got: self.buf.len(),
            });
        }
        self.pos += n;
        Ok(&rest[..n])
    }

    fn array<const N: usize>(&mut self) -> WireResult<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u16(&mut self) -> WireResult<u16> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    fn u32(&mut self) -> WireResult<u32> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn u64(&mut self) -> WireResult<u64> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn rest(&mut self) -> &'a [u8] {
        let r = &self.buf[self.pos..];
        self.pos = self.buf.len();
        r
    }

    fn finish(&self) -> WireResult<()> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(WireError::Trailing(n)),
        }
    }
}

/// Parses a protocol string: UTF-8, no NUL, at most [`MAX_STRING`] bytes.
pub fn parse_string(bytes: &[u8]) -> WireResult<String> {
    if bytes.len() > MAX_STRING {
        return Err(WireError::BadString("longer than 4096 bytes"));
    }
    if bytes.contains(&0) {
        return Err(WireError::BadString("contains NUL"));
    }
    String::from_utf8(bytes.to_vec()).map_err(|_| WireError::BadString("not UTF-8"))
}

/// Cuts `s` to at most `max` bytes on a character boundary.
pub fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn put_str32(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

// ---------------------------------------------------------------------------
// Handshake

/// Length of the server greeting.
pub const GREETING_LEN: usize = 18;

/// The server's first message: `NBDMAGIC`, `IHAVEOPT`, handshake flags.
pub fn encode_greeting(flags: u16) -> [u8; GREETING_LEN] {
    let mut b = [0u8; GREETING_LEN];
    b[..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..].copy_from_slice(&flags.to_be_bytes());
    b
}

/// Client side: checks the greeting and returns the handshake flags.
pub fn parse_greeting(b: &[u8]) -> WireResult<u16> {
    let mut c = Cursor::new(b);
    let m = c.u64()?;
    if m != NBDMAGIC {
        return Err(WireError::BadMagic {
            expected: NBDMAGIC,
            found: m,
        });
    }
    let m = c.u64()?;
    if m != IHAVEOPT {
        return Err(WireError::BadMagic {
            expected: IHAVEOPT,
            found: m,
        });
    }
    let flags = c.u16()?;
    c.finish()?;
    Ok(flags)
}

/// The header of a client option: `IHAVEOPT`, option code, data length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionHeader {
    /// Option code (`opt::*`).
    pub option: u32,
    /// Length of the option data that follows.
    pub length: u32,
}

impl OptionHeader {
    /// Encoded length.
    pub const LEN: usize = 16;

    /// Parses a header (exactly [`Self::LEN`] bytes).
    pub fn parse(b: &[u8]) -> WireResult<OptionHeader> {
        let mut c = Cursor::new(b);
        let m = c.u64()?;
        if m != IHAVEOPT {
            return Err(WireError::BadMagic {
                expected: IHAVEOPT,
                found: m,
            });
        }
        let h = OptionHeader {
            option: c.u32()?,
            length: c.u32()?,
        };
        c.finish()?;
        Ok(h)
    }

    /// Encodes the header.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
        b[8..12].copy_from_slice(&self.option.to_be_bytes());
        b[12..].copy_from_slice(&self.length.to_be_bytes());
        b
    }
}

/// The data of `NBD_OPT_INFO` and `NBD_OPT_GO`: an export name and the
/// information types the client asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InfoRequest {
    /// Export name (`""` is the default export).
    pub name: String,
    /// Requested `info::*` types.
    pub requests: Vec<u16>,
}

impl InfoRequest {
    /// Parses the option data.
    pub fn parse(b: &[u8]) -> WireResult<InfoRequest> {
        let mut c = Cursor::new(b);
        let n = c.u32()? as usize;
        if n > MAX_STRING {
            return Err(WireError::BadString("export name longer than 4096 bytes"));
        }
        let name = parse_string(c.take(n)?)?;
        let count = c.u16()? as usize;
        let mut requests = Vec::with_capacity(count.min(c.remaining() / 2));
        for _ in 0..count {
            requests.push(c.u16()?);
        }
        c.finish()?;
        Ok(InfoRequest { name, requests })
    }

    /// Encodes the option data.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(6 + self.name.len() + 2 * self.requests.len());
        put_str32(&mut out, &self.name);
        out.extend_from_slice(&(self.requests.len() as u16).to_be_bytes());
        for r in &self.requests {
            out.extend_from_slice(&r.to_be_bytes());
        }
        out
    }
}

/// The data of `NBD_OPT_LIST_META_CONTEXT` and `NBD_OPT_SET_META_CONTEXT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaContextRequest {
    /// Export name.
    pub export: String,
    /// Queries such as `base:allocation`.
    pub queries: Vec<String>,
}

impl MetaContextRequest {
    /// Parses the option data.
    pub fn parse(b: &[u8]) -> WireResult<MetaContextRequest> {
        let mut c = Cursor::new(b);
        let n = c.u32()? as usize;
        if n > MAX_STRING {
            return Err(WireError::BadString("export name longer than 4096 bytes"));
        }
        let export = parse_string(c.take(n)?)?;
        let count = c.u32()? as usize;
        let mut queries = Vec::with_capacity(count.min(c.remaining() / 4));
        for _ in 0..count {
            let n = c.u32()? as usize;
            if n > MAX_STRING {
                return Err(WireError::BadString("query longer than 4096 bytes"));
            }
            queries.push(parse_string(c.take(n)?)?);
        }
        c.finish()?;
        Ok(MetaContextRequest { export, queries })
    }

    /// Encodes the option data.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_str32(&mut out, &self.export);
        out.extend_from_slice(&(self.queries.len() as u32).to_be_bytes());
        for q in &self.queries {
            put_str32(&mut out, q);
        }
        out
    }
}

/// Header of an option reply (its data follows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionReplyHeader {
    /// The option this answers.
    pub option: u32,
    /// Reply type (`rep::*`).
    pub reply: u32,
    /// Length of the data that follows.
    pub length: u32,
}

impl OptionReplyHeader {
    /// Encoded length.
    pub const LEN: usize = 20;

    /// Client side: parses a header.
    pub fn parse(b: &[u8]) -> WireResult<OptionReplyHeader> {
        let mut c = Cursor::new(b);
        let m = c.u64()?;
        if m != OPTION_REPLY_MAGIC {
            return Err(WireError::BadMagic {
                expected: OPTION_REPLY_MAGIC,
                found: m,
            });
        }
        let h = OptionReplyHeader {
            option: c.u32()?,
            reply: c.u32()?,
            length: c.u32()?,
        };
        c.finish()?;
        Ok(h)
    }
}

/// A whole option reply: header and `data`.
pub fn encode_option_reply(option: u32, reply: u32, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(OptionReplyHeader::LEN + data.len());
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// Data of an `NBD_REP_SERVER` reply: the name, then a description.
pub fn encode_rep_server(name: &str, description: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    put_str32(&mut out, name);
    if let Some(d) = description {
        out.extend_from_slice(d.as_bytes());
    }
    out
}

/// Data of an `NBD_REP_META_CONTEXT` reply.
pub fn encode_rep_meta_context(id: u32, name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out
}

/// Data of an `NBD_REP_INFO` reply with `NBD_INFO_EXPORT`.
pub fn encode_info_export(size: u64, flags: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    out.extend_from_slice(&info::EXPORT.to_be_bytes());
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out
}

/// Data of an `NBD_REP_INFO` reply with `NBD_INFO_NAME` or
/// `NBD_INFO_DESCRIPTION`.
pub fn encode_info_string(kind: u16, s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + s.len());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    out
}

/// Data of an `NBD_REP_INFO` reply with `NBD_INFO_BLOCK_SIZE`.
pub fn encode_info_block_size(b: BlockSize) -> Vec<u8> {
    let mut out = Vec::with_capacity(14);
    out.extend_from_slice(&info::BLOCK_SIZE.to_be_bytes());
    out.extend_from_slice(&b.minimum.to_be_bytes());
    out.extend_from_slice(&b.preferred.to_be_bytes());
    out.extend_from_slice(&b.maximum.to_be_bytes());
    out
}

/// A decoded `NBD_REP_INFO` payload (client side).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Info {
    /// `NBD_INFO_EXPORT`.
    Export {
        /// Export size.
        size: u64,
        /// Transmission flags.
        flags: u16,
    },
    /// `NBD_INFO_NAME`.
    Name(String),
    /// `NBD_INFO_DESCRIPTION`.
    Description(String),
    /// `NBD_INFO_BLOCK_SIZE`.
    BlockSize(BlockSize),
    /// Another type, with its raw data.
    Other(u16, Vec<u8>),
}

impl Info {
    /// Client side: parses the data of an `NBD_REP_INFO` reply.
    pub fn parse(b: &[u8]) -> WireResult<Info> {
        let mut c = Cursor::new(b);
        let kind = c.u16()?;
        let info = match kind {
            info::EXPORT => Info::Export {
                size: c.u64()?,
                flags: c.u16()?,
            },
            info::NAME => Info::Name(parse_string(c.rest())?),
            info::DESCRIPTION => Info::Description(parse_string(c.rest())?),
            info::BLOCK_SIZE => Info::BlockSize(BlockSize {
                minimum: c.u32()?,
                preferred: c.u32()?,
                maximum: c.u32()?,
            }),
            other => Info::Other(other, c.rest().to_vec()),
        };
        c.finish()?;
        Ok(info)
    }
}

/// The reply to `NBD_OPT_EXPORT_NAME`: size, transmission flags and, unless
/// the client set `NBD_FLAG_C_NO_ZEROES`, 124 zero bytes.
pub fn encode_export_name_reply(size: u64, flags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(134);
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    if !no_zeroes {
        out.resize(out.len() + 124, 0);
    }
    out
}

// ---------------------------------------------------------------------------
// Transmission

/// A transmission request header in the compact form (28 bytes, 32-bit
/// length), used unless extended headers were negotiated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    /// Command flags (`cf::*`).
    pub flags: u16,
    /// Command type (`cmd::*`).
    pub command: u16,
    /// Opaque value echoed in the reply (the spec's "handle").
    pub cookie: u64,
    /// Byte offset.
    pub offset: u64,
    /// Byte length (for WRITE, the payload length).
    pub length: u32,
}

impl RequestHeader {
    /// Encoded length.
    pub const LEN: usize = 28;

    /// Parses a header (exactly [`Self::LEN`] bytes).
    pub fn parse(b: &[u8]) -> WireResult<RequestHeader> {
        let mut c = Cursor::new(b);
        let m = c.u32()?;
        if m != REQUEST_MAGIC {
            return Err(WireError::BadMagic {
                expected: REQUEST_MAGIC as u64,
                found: m as u64,
            });
        }
        let h = RequestHeader {
            flags: c.u16()?,
            command: c.u16()?,
            cookie: c.u64()?,
            offset: c.u64()?,
            length: c.u32()?,
        };
        c.finish()?;
        Ok(h)
    }

    /// Encodes the header.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.command.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..].copy_from_slice(&self.length.to_be_bytes());
        b
    }
}

/// The layout extended requests and extended reply chunks share after
/// their magic: flags, type, cookie, offset and a 64-bit length.
struct Wide {
    flags: u16,
    kind: u16,
    cookie: u64,
    offset: u64,
    length: u64,
}

impl Wide {
    fn parse(b: &[u8], magic: u32) -> WireResult<Wide> {
        let mut c = Cursor::new(b);
        let m = c.u32()?;
        if m != magic {
            return Err(WireError::BadMagic {
                expected: magic as u64,
                found: m as u64,
            });
        }
        let w = Wide {
            flags: c.u16()?,
            kind: c.u16()?,
            cookie: c.u64()?,
            offset: c.u64()?,
            length: c.u64()?,
        };
        c.finish()?;
        Ok(w)
    }

    fn encode(&self, magic: u32) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..4].copy_from_slice(&magic.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..].copy_from_slice(&self.length.to_be_bytes());
        b
    }
}

/// A transmission request header in the extended form (32 bytes, 64-bit
/// length), used once `NBD_OPT_EXTENDED_HEADERS` is acknowledged. The
/// length is a payload length when `flags` has [`cf::PAYLOAD_LEN`] (a WRITE
/// always has it), otherwise the length of the range the command acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtendedRequestHeader {
    /// Command flags (`cf::*`).
    pub flags: u16,
    /// Command type (`cmd::*`).
    pub command: u16,
    /// Opaque value echoed in the reply.
    pub cookie: u64,
    /// Byte offset.
    pub offset: u64,
    /// Payload length or effect length (see the type's comment).
    pub length: u64,
}

impl ExtendedRequestHeader {
    /// Encoded length.
    pub const LEN: usize = 32;

    /// Parses a header (exactly [`Self::LEN`] bytes).
    pub fn parse(b: &[u8]) -> WireResult<ExtendedRequestHeader> {
        let w = Wide::parse(b, EXTENDED_REQUEST_MAGIC)?;
        Ok(ExtendedRequestHeader {
            flags: w.flags,
            command: w.kind,
            cookie: w.cookie,
            offset: w.offset,
            length: w.length,
        })
    }

    /// Encodes the header.
    pub fn encode(&self) -> [u8; Self::LEN] {
        Wide {
            flags: self.flags,
            kind: self.command,
            cookie: self.cookie,
            offset: self.offset,
            length: self.length,
        }
        .encode(EXTENDED_REQUEST_MAGIC)
    }
}

impl From<RequestHeader> for ExtendedRequestHeader {
    /// The compact header's fields; a compact WRITE's length is its
    /// payload's, so it gets [`cf::PAYLOAD_LEN`].
    fn from(h: RequestHeader) -> Self {
        let payload = if h.command == cmd::WRITE {
            cf::PAYLOAD_LEN
        } else {
            0
        };
        ExtendedRequestHeader {
            flags: h.flags | payload,
            command: h.command,
            cookie: h.cookie,
            offset: h.offset,
            length: h.length as u64,
        }
    }
}

/// A simple reply header (read data, if any, follows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimpleReply {
    /// Error number, 0 for success.
    pub error: u32,
    /// The request's cookie.
    pub cookie: u64,
}

impl SimpleReply {
    /// Encoded length.
    pub const LEN: usize = 16;

    /// Encodes the header.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
        b[4..8].copy_from_slice(&self.error.to_be_bytes());
        b[8..].copy_from_slice(&self.cookie.to_be_bytes());
        b
    }

    /// Client side: parses a header.
    pub fn parse(b: &[u8]) -> WireResult<SimpleReply> {
        let mut c = Cursor::new(b);
        let m = c.u32()?;
        if m != SIMPLE_REPLY_MAGIC {
            return Err(WireError::BadMagic {
                expected: SIMPLE_REPLY_MAGIC as u64,
                found: m as u64,
            });
        }
        let r = SimpleReply {
            error: c.u32()?,
            cookie: c.u64()?,
        };
        c.finish()?;
        Ok(r)
    }
}

/// A structured reply chunk header (its payload follows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Chunk flags (`chunk::FLAG_DONE`).
    pub flags: u16,
    /// Chunk type (`chunk::*`).
    pub kind: u16,
    /// The request's cookie.
    pub cookie: u64,
    /// Payload length.
    pub length: u32,
}

impl ChunkHeader {
    /// Encoded length.
    pub const LEN: usize = 20;

    /// Encodes the header.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..].copy_from_slice(&self.length.to_be_bytes());
        b
    }

    /// Client side: parses a header.
    pub fn parse(b: &[u8]) -> WireResult<ChunkHeader> {
        let mut c = Cursor::new(b);
        let m = c.u32()?;
        if m != STRUCTURED_REPLY_MAGIC {
            return Err(WireError::BadMagic {
                expected: STRUCTURED_REPLY_MAGIC as u64,
                found: m as u64,
            });
        }
        let h = ChunkHeader {
            flags: c.u16()?,
            kind: c.u16()?,
            cookie: c.u64()?,
            length: c.u32()?,
        };
        c.finish()?;
        Ok(h)
    }
}

/// A reply chunk header in the extended form (32 bytes): a structured
/// chunk's fields plus the request's offset, with a 64-bit length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtendedChunkHeader {
    /// Chunk flags (`chunk::FLAG_DONE`).
    pub flags: u16,
    /// Chunk type (`chunk::*`).
    pub kind: u16,
    /// The request's cookie.
    pub cookie: u64,
    /// The request's offset (for every chunk type).
    pub offset: u64,
    /// Payload length.
    pub length: u64,
}

impl ExtendedChunkHeader {
    /// Encoded length.
    pub const LEN: usize = 32;

    /// Encodes the header.
    pub fn encode(&self) -> [u8; Self::LEN] {
        Wide {
            flags: self.flags,
            kind: self.kind,
            cookie: self.cookie,
            offset: self.offset,
            length: self.length,
        }
        .encode(EXTENDED_REPLY_MAGIC)
    }

    /// Client side: parses a header.
    pub fn parse(b: &[u8]) -> WireResult<ExtendedChunkHeader> {
        let w = Wide::parse(b, EXTENDED_REPLY_MAGIC)?;
        Ok(ExtendedChunkHeader {
            flags: w.flags,
            kind: w.kind,
            cookie: w.cookie,
            offset: w.offset,
            length: w.length,
        })
    }
}

/// Payload of an `NBD_REPLY_TYPE_ERROR` chunk: error number and a message
/// (cut to 4096 bytes).
pub fn encode_error_payload(error: u32, message: &str) -> Vec<u8> {
    let msg = truncate_str(message, MAX_STRING);
    let mut out = Vec::with_capacity(6 + msg.len());
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    out.extend_from_slice(msg.as_bytes());
    out
}

/// Client side: parses an `NBD_REPLY_TYPE_ERROR` payload into the error
/// number and message.
pub fn parse_error_payload(b: &[u8]) -> WireResult<(u32, String)> {
    let mut c = Cursor::new(b);
    let error = c.u32()?;
    let n = c.u16()? as usize;
    let msg = String::from_utf8_lossy(c.take(n)?).into_owned();
    c.finish()?;
    Ok((error, msg))
}

/// Payload of an `NBD_REPLY_TYPE_BLOCK_STATUS` chunk: the context id, then
/// `(length, flags)` descriptors.
pub fn encode_block_status_payload(context: u32, extents: &[(u32, u32)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + 8 * extents.len());
    out.extend_from_slice(&context.to_be_bytes());
    for (len, flags) in extents {
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&flags.to_be_bytes());
    }
    out
}

/// Client side: parses an `NBD_REPLY_TYPE_BLOCK_STATUS` payload.
pub fn parse_block_status_payload(b: &[u8]) -> WireResult<(u32, Vec<(u32, u32)>)> {
    let mut c = Cursor::new(b);
    let context = c.u32()?;
    let mut extents = Vec::with_capacity(c.remaining() / 8);
    while c.remaining() > 0 {
        extents.push((c.u32()?, c.u32()?));
    }
    Ok((context, extents))
}

/// Payload of an `NBD_REPLY_TYPE_BLOCK_STATUS_EXT` chunk: the context id,
/// the descriptor count, then `(length, flags)` descriptors of 64 bits each.
pub fn encode_block_status_ext_payload(context: u32, extents: &[(u64, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + 16 * extents.len());
    out.extend_from_slice(&context.to_be_bytes());
    out.extend_from_slice(&(extents.len() as u32).to_be_bytes());
    for (len, flags) in extents {
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&flags.to_be_bytes());
    }
    out
}

/// Client side: parses an `NBD_REPLY_TYPE_BLOCK_STATUS_EXT` payload; the
/// descriptor count must match the descriptors present.
pub fn parse_block_status_ext_payload(b: &[u8]) -> WireResult<(u32, Vec<(u64, u64)>)> {
    let mut c = Cursor::new(b);
    let context = c.u32()?;
    let count = c.u32()? as usize;
    let mut extents = Vec::with_capacity(count.min(c.remaining() / 16));
    for _ in 0..count {
        extents.push((c.u64()?, c.u64()?));
    }
    c.finish()?;
    Ok((context, extents))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greeting_layout() {
        let g = encode_greeting(hs::FIXED_NEWSTYLE | hs::NO_ZEROES);
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(parse_greeting(&g), Ok(3));
        assert!(parse_greeting(&g[..17]).is_err());
    }

    #[test]
    fn request_layout() {
        let h = RequestHeader {
            flags: cf::FUA,
            command: cmd::WRITE,
            cookie: 0x0102_0304_0506_0708,
            offset: 4096,
            length: 512,
        };
        let b = h.encode();
        assert_eq!(&b[..4], &[0x25, 0x60, 0x95, 0x13]);
        assert_eq!(RequestHeader::parse(&b), Ok(h));
        let mut bad = b;
        bad[0] = 0;
        assert!(matches!(
            RequestHeader::parse(&bad),
            Err(WireError::BadMagic { .. })
        ));
    }

    #[test]
    fn extended_request_and_reply_layout() {
        let h = ExtendedRequestHeader {
            flags: cf::PAYLOAD_LEN,
            command: cmd::WRITE,
            cookie: 7,
            offset: 1 << 40,
            length: (1 << 33) + 5,
        };
        let b = h.encode();
        assert_eq!(&b[..4], &[0x21, 0xe4, 0x1c, 0x71]);
        assert_eq!(&b[24..], &((1u64 << 33) + 5).to_be_bytes());
        assert_eq!(ExtendedRequestHeader::parse(&b), Ok(h));
        // A compact header is not an extended one.
        let compact = RequestHeader {
            flags: 0,
            command: cmd::READ,
            cookie: 1,
            offset: 0,
            length: 512,
        };
        let mut padded = compact.encode().to_vec();
        padded.extend_from_slice(&[0; 4]);
        assert!(matches!(
            ExtendedRequestHeader::parse(&padded),
            Err(WireError::BadMagic { .. })
        ));
        let widened = ExtendedRequestHeader::from(compact);
        assert_eq!((widened.length, widened.flags), (512, 0));
        let write = RequestHeader {
            command: cmd::WRITE,
            ..compact
        };
        assert_eq!(ExtendedRequestHeader::from(write).flags, cf::PAYLOAD_LEN);

        let r = ExtendedChunkHeader {
            flags: chunk::FLAG_DONE,
            kind: chunk::OFFSET_DATA,
            cookie: 9,
            offset: 4096,
            length: 8 + 4096,
        };
        let rb = r.encode();
        assert_eq!(&rb[..4], &[0x6e, 0x8a, 0x27, 0x8c]);
        assert_eq!(ExtendedChunkHeader::parse(&rb), Ok(r));

        let p = encode_block_status_ext_payload(1, &[(1 << 35, 3), (4096, 0)]);
        assert_eq!(p.len(), 8 + 2 * 16);
        assert_eq!(
            parse_block_status_ext_payload(&p),
            Ok((1, vec![(1 << 35, 3), (4096, 0)]))
        );
        // A count that claims more descriptors than are present.
        let mut short = p.clone();
        short[7] = 3;
        assert!(parse_block_status_ext_payload(&short).is_err());
    }

    #[test]
    fn info_request_rejects_bad_counts() {
        let r = InfoRequest {
            name: "disk".into(),
            requests: vec![info::NAME, info::BLOCK_SIZE],
        };
        let mut b = r.encode();
        assert_eq!(InfoRequest::parse(&b), Ok(r));
        b.push(0);
        assert_eq!(InfoRequest::parse(&b), Err(WireError::Trailing(1)));
        b.truncate(b.len() - 2);
        assert!(matches!(
            InfoRequest::parse(&b),
            Err(WireError::Truncated { .. })
        ));
        // Name length pointing past the end.
        assert!(InfoRequest::parse(&[0xff, 0xff, 0xff, 0xff, 0, 0]).is_err());
    }

    #[test]
    fn strings() {
        assert!(parse_string(b"a\0b").is_err());
        assert!(parse_string(&[0xff]).is_err());
        assert!(parse_string(&vec![b'a'; 4097]).is_err());
        assert_eq!(truncate_str("héllo", 2), "h");
    }
}
