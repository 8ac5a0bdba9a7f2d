//! Test support: a server on a Unix socket in a temporary directory, test
//! devices, and a raw protocol client for the cases no well-behaved client
//! produces. Running the Debian NBD clients and real data come from
//! `testkit`, which `zmem serve`'s tests share.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use nbd::wire::{
    self, chunk, hs, info, opt, rep, ChunkHeader, ExtendedChunkHeader, ExtendedRequestHeader, Info,
    InfoRequest, MetaContextRequest, OptionHeader, OptionReplyHeader, RequestHeader, SimpleReply,
};
use nbd::{BlockDevice, Config, Export, Exports, ListenAddr, MemDevice, Server};

struct TestLog;

impl log::Log for TestLog {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        eprintln!("[{}] {}", r.level(), r.args());
    }
    fn flush(&self) {}
}

/// Sends the server's log to stderr when `NBD_TEST_LOG` is set (to a level
/// such as `debug`).
pub fn init_log() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if let Some(level) = std::env::var("NBD_TEST_LOG")
            .ok()
            .and_then(|l| l.parse::<log::LevelFilter>().ok())
        {
            let _ = log::set_logger(&TestLog);
            log::set_max_level(level);
        }
    });
}

/// A server on a Unix socket in its own temporary directory.
pub struct TestServer {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    pub server: Option<Server>,
}

impl TestServer {
    /// Serves `exports` (name, device) with `config`.
    pub fn start(exports: Vec<(&str, Arc<dyn BlockDevice>)>, config: Config) -> TestServer {
        init_log();
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("nbd.sock");
        let mut table = Exports::new();
        for (name, dev) in exports {
            table
                .add(Export::new(name, dev).with_description(format!("test export {name:?}")))
                .expect("export");
        }
        let server = Server::bind(ListenAddr::Unix(path.clone()), table, config).expect("bind");
        TestServer {
            dir,
            path,
            server: Some(server),
        }
    }

    /// Serves one `MemDevice` of `size` bytes as the default export.
    pub fn mem(size: u64) -> (TestServer, Arc<MemDevice>) {
        let dev = Arc::new(MemDevice::new(size));
        let s = TestServer::start(vec![("", dev.clone())], Config::default());
        (s, dev)
    }

    /// The NBD URI of `export`.
    pub fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.path.display())
    }

    /// A file path inside the temporary directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("running")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
    }
}

/// Reads the whole device.
pub fn read_all(dev: &dyn BlockDevice) -> Vec<u8> {
    let mut v = vec![0u8; dev.size() as usize];
    dev.read_at(0, &mut v).expect("read device");
    v
}

/// A reply as the raw client sees it.
#[derive(Debug, Default)]
pub struct RawReply {
    pub cookie: u64,
    /// 0 for success.
    pub error: u32,
    pub message: String,
    pub data: Vec<u8>,
    pub extents: Vec<(u32, u32)>,
    /// Descriptors of an `NBD_REPLY_TYPE_BLOCK_STATUS_EXT` chunk.
    pub extents64: Vec<(u64, u64)>,
    /// The offset an extended reply's header repeats.
    pub offset: Option<u64>,
}

/// A protocol client written against the spec, for misbehaving on purpose
/// and for checking exact replies.
pub struct RawClient {
    pub s: UnixStream,
    pub structured: bool,
    /// Extended headers were negotiated: requests and replies are 32-byte.
    pub extended: bool,
    pub size: u64,
    pub flags: u16,
    /// Lengths of reads in flight (simple replies carry no length).
    reads: HashMap<u64, u32>,
}

impl RawClient {
    /// Connects and reads the greeting; sends client flags.
    pub fn connect(path: &Path, client_flags: u32) -> RawClient {
        RawClient::try_connect(path, client_flags).expect("greeting")
    }

    /// As [`RawClient::connect`], but `None` if the server closes the
    /// connection instead of greeting it (as it does over its connection
    /// limit).
    pub fn try_connect(path: &Path, client_flags: u32) -> Option<RawClient> {
        let mut s = UnixStream::connect(path).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut g = [0u8; wire::GREETING_LEN];
        s.read_exact(&mut g).ok()?;
        let f = wire::parse_greeting(&g).expect("greeting");
        assert_eq!(f, hs::FIXED_NEWSTYLE | hs::NO_ZEROES);
        s.write_all(&client_flags.to_be_bytes()).unwrap();
        Some(RawClient {
            s,
            structured: false,
            extended: false,
            size: 0,
            flags: 0,
            reads: HashMap::new(),
        })
    }

    pub fn send_option(&mut self, code: u32, data: &[u8]) {
        let h = OptionHeader {
            option: code,
            length: data.len() as u32,
        };
        self.s.write_all(&h.encode()).unwrap();
        self.s.write_all(data).unwrap();
    }

    pub fn option_reply(&mut self) -> (OptionReplyHeader, Vec<u8>) {
        let mut h = [0u8; OptionReplyHeader::LEN];
        self.s.read_exact(&mut h).expect("option reply");
        let h = OptionReplyHeader::parse(&h).expect("option reply header");
        let mut d = vec![0u8; h.length as usize];
        self.s.read_exact(&mut d).unwrap();
        (h, d)
    }

    /// Connects, negotiates and enters transmission on `export` with GO.
    pub fn go(path: &Path, export: &str, structured: bool, meta: bool) -> RawClient {
        let c = RawClient::connect(path, hs::C_FIXED_NEWSTYLE | hs::C_NO_ZEROES);
        c.go_on(export, structured, meta)
    }

    /// Negotiates and enters transmission on `export` with GO, on a client
    /// connected with `C_FIXED_NEWSTYLE | C_NO_ZEROES`.
    pub fn go_on(self, export: &str, structured: bool, meta: bool) -> RawClient {
        let mut c = self;
        if structured {
            c.send_option(opt::STRUCTURED_REPLY, &[]);
            assert_eq!(c.option_reply().0.reply, rep::ACK);
            c.structured = true;
        }
        if meta {
            let m = MetaContextRequest {
                export: export.into(),
                queries: vec!["base:allocation".into()],
            };
            c.send_option(opt::SET_META_CONTEXT, &m.encode());
            assert_eq!(c.option_reply().0.reply, rep::META_CONTEXT);
            assert_eq!(c.option_reply().0.reply, rep::ACK);
        }
        let r = InfoRequest {
            name: export.into(),
            requests: vec![info::BLOCK_SIZE],
        };
        c.send_option(opt::GO, &r.encode());
        loop {
            let (h, d) = c.option_reply();
            match h.reply {
                rep::INFO => {
                    if let Info::Export { size, flags } = Info::parse(&d).unwrap() {
                        c.size = size;
                        c.flags = flags;
                    }
                }
                rep::ACK => break,
                other => panic!("GO failed: {other:#x} {}", String::from_utf8_lossy(&d)),
            }
        }
        c
    }

    /// Negotiates extended headers (and nothing else yet).
    pub fn extended_headers(&mut self) {
        self.send_option(opt::EXTENDED_HEADERS, &[]);
        let (h, d) = self.option_reply();
        assert_eq!(h.reply, rep::ACK, "{}", String::from_utf8_lossy(&d));
        self.extended = true;
        self.structured = true;
    }

    /// Sends an extended request (and `payload` after it, whatever the
    /// flags say).
    pub fn request_ext(
        &mut self,
        command: u16,
        flags: u16,
        cookie: u64,
        offset: u64,
        length: u64,
        payload: &[u8],
    ) {
        let h = ExtendedRequestHeader {
            flags,
            command,
            cookie,
            offset,
            length,
        };
        self.send(&h.encode(), payload);
    }

    /// Writes an encoded request header and its payload in one write.
    fn send(&mut self, header: &[u8], payload: &[u8]) {
        let mut b = header.to_vec();
        b.extend_from_slice(payload);
        self.s.write_all(&b).unwrap();
    }

    /// Sends a request (and its payload, for writes).
    pub fn request(
        &mut self,
        command: u16,
        flags: u16,
        cookie: u64,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) {
        if command == wire::cmd::READ {
            self.reads.insert(cookie, length);
        }
        let h = RequestHeader {
            flags,
            command,
            cookie,
            offset,
            length,
        };
        self.send(&h.encode(), payload);
    }

    /// Reads one whole reply (all chunks of a structured one).
    pub fn reply(&mut self) -> RawReply {
        if !self.structured {
            let mut h = [0u8; SimpleReply::LEN];
            self.s.read_exact(&mut h).expect("simple reply");
            let h = SimpleReply::parse(&h).expect("simple reply header");
            let mut r = RawReply {
                cookie: h.cookie,
                error: h.error,
                ..RawReply::default()
            };
            if let Some(len) = self.reads.remove(&h.cookie) {
                if h.error == 0 {
                    r.data = vec![0u8; len as usize];
                    self.s.read_exact(&mut r.data).unwrap();
                }
            }
            return r;
        }
        let mut r = RawReply::default();
        loop {
            let mut magic = [0u8; 4];
            self.s.read_exact(&mut magic).expect("reply");
            if u32::from_be_bytes(magic) == wire::SIMPLE_REPLY_MAGIC {
                assert!(!self.extended, "a simple reply under extended headers");
                let mut rest = [0u8; SimpleReply::LEN - 4];
                self.s.read_exact(&mut rest).unwrap();
                let mut all = magic.to_vec();
                all.extend_from_slice(&rest);
                let h = SimpleReply::parse(&all).unwrap();
                r.cookie = h.cookie;
                r.error = h.error;
                return r;
            }
            let h = if self.extended {
                let mut rest = [0u8; ExtendedChunkHeader::LEN - 4];
                self.s.read_exact(&mut rest).unwrap();
                let mut all = magic.to_vec();
                all.extend_from_slice(&rest);
                let h = ExtendedChunkHeader::parse(&all).expect("extended chunk header");
                r.offset = Some(h.offset);
                ChunkHeader {
                    flags: h.flags,
                    kind: h.kind,
                    cookie: h.cookie,
                    length: u32::try_from(h.length).expect("a reply length over 32 bits"),
                }
            } else {
                let mut rest = [0u8; ChunkHeader::LEN - 4];
                self.s.read_exact(&mut rest).unwrap();
                let mut all = magic.to_vec();
                all.extend_from_slice(&rest);
                ChunkHeader::parse(&all).expect("chunk header")
            };
            let mut p = vec![0u8; h.length as usize];
            self.s.read_exact(&mut p).unwrap();
            r.cookie = h.cookie;
            match h.kind {
                chunk::OFFSET_DATA => r.data.extend_from_slice(&p[8..]),
                chunk::ERROR => {
                    let (e, m) = wire::parse_error_payload(&p).unwrap();
                    r.error = e;
                    r.message = m;
                }
                chunk::BLOCK_STATUS if !self.extended => {
                    r.extents = wire::parse_block_status_payload(&p).unwrap().1;
                }
                chunk::BLOCK_STATUS_EXT if self.extended => {
                    r.extents64 = wire::parse_block_status_ext_payload(&p).unwrap().1;
                }
                chunk::NONE => {}
                other => panic!("unexpected chunk type {other}"),
            }
            if h.flags & chunk::FLAG_DONE != 0 {
                self.reads.remove(&h.cookie);
                return r;
            }
        }
    }

    /// Whether the server has closed the connection: a read sees EOF or a
    /// reset. A read that times out (see [`RawClient::try_connect`]) found
    /// the connection still open, and so did one that got a byte.
    pub fn is_closed(&mut self) -> bool {
        testkit::peer_closed(&mut self.s)
    }
}

/// A device that, like a page store, accepts only whole aligned blocks and
/// answers anything else with `EINVAL`. Wrapped in `BlockAligned` it must
/// still serve every byte range.
pub struct StrictDevice {
    pub inner: MemDevice,
    pub block: u64,
}

impl StrictDevice {
    pub fn new(size: u64, block: u32) -> StrictDevice {
        StrictDevice {
            inner: MemDevice::new(size),
            block: block as u64,
        }
    }

    fn aligned(&self, off: u64, len: u64) -> nbd::DeviceResult<()> {
        if off % self.block != 0 || len % self.block != 0 || len == 0 {
            return Err(nbd::DeviceError::invalid(format!(
                "unaligned request {off}+{len} reached the strict device"
            )));
        }
        Ok(())
    }
}

impl BlockDevice for StrictDevice {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn block_size(&self) -> nbd::BlockSize {
        nbd::BlockSize {
            minimum: self.block as u32,
            preferred: self.block as u32,
            maximum: 32 << 20,
        }
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> nbd::DeviceResult<()> {
        self.aligned(off, buf.len() as u64)?;
        self.inner.read_at(off, buf)
    }
    fn write_at(&self, off: u64, data: &[u8], fua: bool) -> nbd::DeviceResult<()> {
        self.aligned(off, data.len() as u64)?;
        self.inner.write_at(off, data, fua)
    }
    fn trim(&self, off: u64, len: u64) -> nbd::DeviceResult<()> {
        self.aligned(off, len)?;
        self.inner.trim(off, len)
    }
    fn write_zeroes(
        &self,
        off: u64,
        len: u64,
        may_trim: bool,
        fast: bool,
    ) -> nbd::DeviceResult<()> {
        self.aligned(off, len)?;
        self.inner.write_zeroes(off, len, may_trim, fast)
    }
    fn block_status(&self, off: u64, len: u64) -> nbd::DeviceResult<Vec<nbd::Extent>> {
        self.aligned(off, len)?;
        self.inner.block_status(off, len)
    }
    fn can_trim(&self) -> bool {
        true
    }
    fn can_fast_zero(&self) -> bool {
        true
    }
    fn can_flush(&self) -> bool {
        true
    }
    fn can_multi_conn(&self) -> bool {
        true
    }
}

/// A device with only the trait's defaults: no trim, flush, FUA, fast zero
/// or multi-connection.
pub struct PlainDevice(pub MemDevice);

impl BlockDevice for PlainDevice {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> nbd::DeviceResult<()> {
        self.0.read_at(off, buf)
    }
    fn write_at(&self, off: u64, data: &[u8], fua: bool) -> nbd::DeviceResult<()> {
        self.0.write_at(off, data, fua)
    }
}

/// Polls `done` until it holds; fails the test after a minute, a deadline
/// that only a hang reaches, however loaded the machine.
pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "waited 60 s for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits (up to a generous deadline) until the server closes `s`.
pub fn closed_within(s: &mut UnixStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 256];
    let deadline = Instant::now() + limit;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
        if Instant::now() >= deadline {
            return false;
        }
    }
}

pub mod adversary;

/// Checks what a client read back into `file`: `len` bytes, `data` first and
/// zeros after it (the export's untouched tail).
pub fn assert_read_back(file: &std::path::Path, data: &[u8], len: usize) {
    let back = std::fs::read(file).unwrap();
    assert_eq!(back.len(), len);
    assert!(
        back[..data.len()] == data[..],
        "the client read back different bytes"
    );
    assert!(back[data.len()..].iter().all(|&b| b == 0));
}
