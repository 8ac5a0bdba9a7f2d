//! Hostile clients for the adversary tests: raw sockets that stall at each
//! step of the handshake, clients that send requests and never read the
//! replies, floods of tiny requests, a device backed by a file (so a test's
//! data does not count in the process's resident set), and data made chunk
//! by chunk so that neither does the client's.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use nbd::wire::{self, cmd, hs, opt, InfoRequest, OptionHeader, RequestHeader};
use nbd::{BlockDevice, DeviceError, DeviceResult};

/// A device whose bytes live in a file: in a tmpfs they are neither on
/// disk nor in this process's resident set.
pub struct FileDevice {
    file: File,
    size: u64,
}

impl FileDevice {
    /// A sparse file of `size` bytes in `dir`.
    pub fn new(dir: &Path, size: u64) -> FileDevice {
        let file = tempfile::tempfile_in(dir).expect("device file");
        file.set_len(size).expect("device size");
        FileDevice { file, size }
    }
}

impl BlockDevice for FileDevice {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DeviceResult<()> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| DeviceError::io(e.to_string()))
    }
    fn write_at(&self, offset: u64, data: &[u8], _fua: bool) -> DeviceResult<()> {
        self.file
            .write_all_at(data, offset)
            .map_err(|e| DeviceError::io(e.to_string()))
    }
}

/// A directory in a tmpfs when there is one (/dev/shm), else the default
/// temporary directory.
pub fn memory_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("temp dir")
}

/// Chunk `i` of a test's data: `len` bytes that differ for every `i`.
pub fn chunk(i: u64, len: usize) -> Vec<u8> {
    let mut g = testkit::SplitMix64(i.wrapping_mul(0x9E37_79B9).wrapping_add(1));
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&g.next_u64().to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Where a client stops in the handshake.
#[derive(Clone, Copy, Debug)]
pub enum Stall {
    /// Connects and sends nothing, not even reading the greeting.
    AfterConnect,
    /// Reads the greeting, sends nothing.
    AfterGreeting,
    /// Sends its flags, then nothing.
    AfterFlags,
    /// Sends the option magic, then nothing.
    AfterMagic,
    /// Sends half an option header.
    MidOptionHeader,
    /// Sends an option header announcing 100 bytes of data, and 10.
    MidOptionData,
    /// Sends a whole option and never reads the reply.
    AfterOption,
    /// Sends a whole option, reads the reply, then nothing.
    AfterOptionReply,
}

impl Stall {
    /// Every step.
    pub const ALL: [Stall; 8] = [
        Stall::AfterConnect,
        Stall::AfterGreeting,
        Stall::AfterFlags,
        Stall::AfterMagic,
        Stall::MidOptionHeader,
        Stall::MidOptionData,
        Stall::AfterOption,
        Stall::AfterOptionReply,
    ];
}

/// A client stalled at `step`.
pub fn stalled(path: &Path, step: Stall) -> UnixStream {
    let mut s = UnixStream::connect(path).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    if matches!(step, Stall::AfterConnect) {
        return s;
    }
    let mut g = [0u8; wire::GREETING_LEN];
    s.read_exact(&mut g).expect("greeting");
    if matches!(step, Stall::AfterGreeting) {
        return s;
    }
    s.write_all(&(hs::C_FIXED_NEWSTYLE | hs::C_NO_ZEROES).to_be_bytes())
        .unwrap();
    let list = OptionHeader {
        option: opt::LIST,
        length: 0,
    }
    .encode();
    match step {
        Stall::AfterFlags => {}
        Stall::AfterMagic => s.write_all(&list[..8]).unwrap(),
        Stall::MidOptionHeader => s.write_all(&list[..12]).unwrap(),
        Stall::MidOptionData => {
            let h = OptionHeader {
                option: opt::GO,
                length: 100,
            };
            s.write_all(&h.encode()).unwrap();
            s.write_all(&[0; 10]).unwrap();
        }
        Stall::AfterOption => s.write_all(&list).unwrap(),
        Stall::AfterOptionReply => {
            let h = OptionHeader {
                option: opt::STRUCTURED_REPLY,
                length: 0,
            };
            s.write_all(&h.encode()).unwrap();
            let mut r = [0u8; wire::OptionReplyHeader::LEN];
            s.read_exact(&mut r).expect("option reply");
        }
        Stall::AfterConnect | Stall::AfterGreeting => unreachable!(),
    }
    s
}

/// Negotiates `export` with GO (simple replies) on a raw socket.
pub fn negotiated(path: &Path, export: &str) -> UnixStream {
    let mut s = stalled(path, Stall::AfterFlags);
    let req = InfoRequest {
        name: export.into(),
        requests: vec![],
    };
    let data = req.encode();
    let h = OptionHeader {
        option: opt::GO,
        length: data.len() as u32,
    };
    s.write_all(&h.encode()).unwrap();
    s.write_all(&data).unwrap();
    loop {
        let mut b = [0u8; wire::OptionReplyHeader::LEN];
        s.read_exact(&mut b).expect("GO reply");
        let h = wire::OptionReplyHeader::parse(&b).unwrap();
        let mut d = vec![0u8; h.length as usize];
        s.read_exact(&mut d).unwrap();
        match h.reply {
            wire::rep::INFO => {}
            wire::rep::ACK => return s,
            other => panic!("GO refused: {other:#x}"),
        }
    }
}

/// The bytes of `n` requests `command` of `len` bytes at offsets that step
/// by `len` through a device of `size` bytes.
pub fn requests(command: u16, n: usize, len: u32, size: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * RequestHeader::LEN);
    for i in 0..n as u64 {
        let h = RequestHeader {
            flags: 0,
            command,
            cookie: i,
            offset: (i * len as u64) % (size - len as u64 + 1),
            length: len,
        };
        out.extend_from_slice(&h.encode());
    }
    out
}

/// A client that negotiates, sends `n` READs of `len` bytes and never reads
/// a reply.
pub fn non_reader(path: &Path, n: usize, len: u32, size: u64) -> UnixStream {
    let mut s = negotiated(path, "");
    s.write_all(&requests(cmd::READ, n, len, size)).unwrap();
    s
}

/// Sends tiny requests (1-byte READs) until the server stops reading them
/// (the write blocks for `patience`); returns how many went out.
pub fn flood(s: &mut UnixStream, patience: Duration, size: u64) -> usize {
    s.set_write_timeout(Some(patience)).unwrap();
    let batch = requests(cmd::READ, 4096, 1, size);
    let mut sent = 0;
    let mut buf: &[u8] = &batch;
    loop {
        match s.write(buf) {
            Ok(n) => {
                sent += n;
                buf = &buf[n..];
                if buf.is_empty() {
                    buf = &batch;
                }
            }
            Err(_) => return sent / RequestHeader::LEN,
        }
    }
}

/// A correct client: writes `total` bytes in requests of `len` through a
/// fresh connection, all pipelined, then reads them back, also pipelined,
/// and checks every byte against [`chunk`]; then disconnects. Neither side
/// holds more than a request's data at once.
pub fn copy_in_and_out(path: &Path, total: u64, len: u32) {
    let s = negotiated(path, "");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let n = total / len as u64;
    let header = |command, i: u64| {
        RequestHeader {
            flags: 0,
            command,
            cookie: i,
            offset: i * len as u64,
            length: len,
        }
        .encode()
    };
    let reply = |r: &mut UnixStream, seen: &mut Vec<bool>| {
        let mut h = [0u8; wire::SimpleReply::LEN];
        r.read_exact(&mut h).expect("reply");
        let h = wire::SimpleReply::parse(&h).expect("simple reply");
        assert_eq!(h.error, 0, "request {} failed", h.cookie);
        assert!(!seen[h.cookie as usize], "two replies to {}", h.cookie);
        seen[h.cookie as usize] = true;
        h.cookie
    };
    let mut r = s.try_clone().unwrap();
    let mut w = s;
    let mut seen = vec![false; n as usize];
    std::thread::scope(|sc| {
        let sender = sc.spawn(|| {
            for i in 0..n {
                w.write_all(&header(cmd::WRITE, i)).unwrap();
                w.write_all(&chunk(i, len as usize)).unwrap();
            }
        });
        for _ in 0..n {
            reply(&mut r, &mut seen);
        }
        sender.join().unwrap();
    });
    seen.fill(false);
    let mut data = vec![0u8; len as usize];
    std::thread::scope(|sc| {
        let sender = sc.spawn(|| {
            for i in 0..n {
                w.write_all(&header(cmd::READ, i)).unwrap();
            }
        });
        for _ in 0..n {
            let i = reply(&mut r, &mut seen);
            r.read_exact(&mut data).expect("read data");
            assert!(data == chunk(i, len as usize), "chunk {i} differs");
        }
        sender.join().unwrap();
    });
    w.write_all(&header(cmd::DISC, 0)).unwrap();
}

/// Samples the process's resident set every 10 ms while `f` runs; returns
/// `f`'s result and the highest reading, in KiB.
pub fn peak_rss_during<T>(f: impl FnOnce() -> T) -> (T, u64) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let done = AtomicBool::new(false);
    let peak = AtomicU64::new(testkit::rss::rss_kib());
    let out = std::thread::scope(|sc| {
        sc.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(testkit::rss::rss_kib(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let out = f();
        done.store(true, Ordering::Relaxed);
        out
    });
    peak.fetch_max(testkit::rss::rss_kib(), Ordering::Relaxed);
    (out, peak.into_inner())
}
