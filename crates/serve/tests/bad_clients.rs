//! zram stores behind the NBD server, against clients that misbehave: out
//! of range offsets, oversize lengths, unknown commands, flags and options,
//! bad magic, a client that leaves half way through a write, a full
//! mem_limit. Each gets the right NBD error or loses only its own
//! connection; the server stays up and no other byte changes.
//!
//! A raw client written against the protocol (simple replies) drives the
//! same export table `zmem serve` builds.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nbd::wire::{
    self, cmd, hs, opt, rep, Info, InfoRequest, OptionHeader, OptionReplyHeader, RequestHeader,
    SimpleReply,
};
use nbd::{Config, ListenAddr, Server};
use serve::{Registry, Served};
use zram::Store;

const EINVAL: u32 = 22;
const ENOSPC: u32 = 28;

struct Raw {
    s: UnixStream,
    size: u64,
}

impl Raw {
    fn connect(path: &Path) -> Raw {
        let mut s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut g = [0u8; wire::GREETING_LEN];
        s.read_exact(&mut g).unwrap();
        wire::parse_greeting(&g).unwrap();
        s.write_all(&(hs::C_FIXED_NEWSTYLE | hs::C_NO_ZEROES).to_be_bytes())
            .unwrap();
        Raw { s, size: 0 }
    }

    fn option(&mut self, code: u32, data: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let h = OptionHeader {
            option: code,
            length: data.len() as u32,
        };
        self.s.write_all(&h.encode()).unwrap();
        self.s.write_all(data).unwrap();
        let mut replies = Vec::new();
        loop {
            let mut b = [0u8; OptionReplyHeader::LEN];
            self.s.read_exact(&mut b).unwrap();
            let h = OptionReplyHeader::parse(&b).unwrap();
            let mut d = vec![0u8; h.length as usize];
            self.s.read_exact(&mut d).unwrap();
            let last = h.reply == rep::ACK || h.reply & rep::ERR != 0 || code != opt::GO;
            replies.push((h.reply, d));
            if last && h.reply != rep::INFO {
                return replies;
            }
        }
    }

    fn go(path: &Path, export: &str) -> Raw {
        let mut c = Raw::connect(path);
        // An option the server does not know is refused; haggling goes on.
        let r = c.option(77, b"whatever");
        assert_eq!(r[0].0, rep::ERR_UNSUP);
        let req = InfoRequest {
            name: export.into(),
            requests: vec![],
        };
        for (reply, data) in c.option(opt::GO, &req.encode()) {
            if reply == rep::INFO {
                if let Ok(Info::Export { size, .. }) = Info::parse(&data) {
                    c.size = size;
                }
            } else {
                assert_eq!(reply, rep::ACK);
            }
        }
        c
    }

    fn send(&mut self, command: u16, flags: u16, offset: u64, length: u32, payload: &[u8]) {
        let h = RequestHeader {
            flags,
            command,
            cookie: offset ^ 0x5555,
            offset,
            length,
        };
        let mut b = h.encode().to_vec();
        b.extend_from_slice(payload);
        self.s.write_all(&b).unwrap();
    }

    /// Sends a request and reads its reply: (error, data of a read).
    fn call(&mut self, command: u16, offset: u64, length: u32, payload: &[u8]) -> (u32, Vec<u8>) {
        self.send(command, 0, offset, length, payload);
        self.reply(command == cmd::READ, length)
    }

    fn reply(&mut self, read: bool, length: u32) -> (u32, Vec<u8>) {
        let mut h = [0u8; SimpleReply::LEN];
        self.s.read_exact(&mut h).unwrap();
        let h = SimpleReply::parse(&h).unwrap();
        let mut data = Vec::new();
        if read && h.error == 0 {
            data = vec![0u8; length as usize];
            self.s.read_exact(&mut data).unwrap();
        }
        (h.error, data)
    }

    /// Whether the server has closed the connection: a read sees EOF or a
    /// reset. A read that times out (30 s) found it still open.
    fn closed(&mut self) -> bool {
        testkit::peer_closed(&mut self.s)
    }
}

fn text(len: usize) -> Vec<u8> {
    let words = b"zram keeps pages compressed in a zsmalloc pool; ";
    (0..len)
        .map(|i| words[i % words.len()] ^ ((i / 4096) as u8 & 7))
        .collect()
}

fn noise(len: usize) -> Vec<u8> {
    testkit::noise(len, 0x1234_5678)
}

#[test]
fn misbehaving_clients_touch_nothing_else() {
    let pool = zalloc::open("zsmalloc", &zalloc::AllocOptions::default()).unwrap();
    let comp = zcomp::Compressor::parse("lz4", "").unwrap();
    let store = Arc::new(Store::new(pool, comp, 1024).unwrap());
    let reg = Arc::new(Registry::new(vec![Served {
        name: "d".into(),
        label: "test".into(),
        store: store.clone(),
        policy: None,
    }]));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nbd.sock");
    let server = Arc::new(
        Server::bind(
            ListenAddr::Unix(path.clone()),
            reg.nbd_exports().unwrap(),
            Config {
                max_request: 1 << 20,
                ..Config::default()
            },
        )
        .unwrap(),
    );
    reg.attach(&server);

    let mut good = Raw::go(&path, "d");
    assert_eq!(good.size, 4 << 20);
    let data = text(64 * 1024);
    assert_eq!(good.call(cmd::WRITE, 8192, data.len() as u32, &data).0, 0);

    // Out of range: writes ENOSPC, reads EINVAL; an offset that overflows.
    let size = good.size;
    assert_eq!(good.call(cmd::WRITE, size - 100, 200, &[1; 200]).0, ENOSPC);
    assert_eq!(good.call(cmd::READ, size, 1, &[]).0, EINVAL);
    assert_eq!(good.call(cmd::READ, u64::MAX - 10, 100, &[]).0, EINVAL);
    assert_eq!(good.call(cmd::TRIM, size - 4096, 8192, &[]).0, ENOSPC);
    // Oversize: a read or write over the maximum (the payload is skipped).
    assert_eq!(good.call(cmd::READ, 0, 2 << 20, &[]).0, EINVAL);
    let big = vec![9u8; 2 << 20];
    assert_eq!(good.call(cmd::WRITE, 0, big.len() as u32, &big).0, EINVAL);
    // Unknown command and unknown flags.
    assert_eq!(good.call(99, 0, 10, &[]).0, EINVAL);
    good.send(cmd::WRITE, 1 << 12, 0, 4, &[7, 7, 7, 7]);
    assert_eq!(good.reply(false, 0).0, EINVAL);
    // Zero length.
    assert_eq!(good.call(cmd::READ, 0, 0, &[]).0, EINVAL);
    let (e, back) = good.call(cmd::READ, 8192, data.len() as u32, &[]);
    assert_eq!(e, 0);
    assert!(back == data, "nothing changed");

    // A client that leaves in the middle of a write's payload.
    let mut quitter = Raw::go(&path, "d");
    let h = RequestHeader {
        flags: 0,
        command: cmd::WRITE,
        cookie: 1,
        offset: 8192,
        length: 65536,
    };
    quitter.s.write_all(&h.encode()).unwrap();
    quitter.s.write_all(&[0xee; 1000]).unwrap();
    drop(quitter);

    // Bad magic ends only that connection.
    let mut liar = Raw::go(&path, "d");
    liar.s.write_all(&[0xab; 28]).unwrap();
    assert!(liar.closed(), "bad magic closes the connection");

    // The first client goes on, and sees the same bytes.
    let (e, back) = good.call(cmd::READ, 8192, data.len() as u32, &[]);
    assert_eq!(e, 0);
    assert!(back == data, "untouched by the others");

    // mem_limit: incompressible writes fail with ENOSPC, old data stays.
    store.set_mem_limit(store.mm_stat().mem_used_total + 16384);
    let junk = noise(512 * 1024);
    let (e, _) = good.call(cmd::WRITE, 1 << 20, junk.len() as u32, &junk);
    assert_eq!(e, ENOSPC);
    assert!(store.io_stat().failed_writes > 0);
    let (e, back) = good.call(cmd::READ, 8192, data.len() as u32, &[]);
    assert_eq!(e, 0);
    assert!(back == data, "kept after a failed write");
    // Partial pages through read-modify-write obey the limit too.
    let (e, _) = good.call(cmd::WRITE, (2 << 20) + 100, 3000, &noise(3000));
    assert!(e == 0 || e == ENOSPC);
    store.set_mem_limit(0);
    assert_eq!(
        good.call(cmd::WRITE, 1 << 20, junk.len() as u32, &junk).0,
        0
    );
    let (e, back) = good.call(cmd::READ, 1 << 20, junk.len() as u32, &[]);
    assert_eq!(e, 0);
    assert!(back == junk);

    // /metrics shows the in-flight budget: its bound, and nothing held
    // between requests (the worker gives the read's buffer back just after
    // the client has the reply, so allow it a moment).
    let start = std::time::Instant::now();
    let mut text = serve::render(&reg);
    while !text.contains("zmem_nbd_inflight_bytes 0\n") && start.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        text = serve::render(&reg);
    }
    let limit = Config::default().inflight_total;
    assert!(text.contains(&format!("zmem_nbd_inflight_limit_bytes {limit}\n")));
    assert!(text.contains("zmem_nbd_inflight_bytes 0\n"), "{text}");
    assert!(text.contains("zmem_nbd_inflight_connection_waits_total "));

    good.send(cmd::DISC, 0, 0, 0, &[]);
    assert!(good.closed());
    // Still serving.
    let mut again = Raw::go(&path, "d");
    let (e, back) = again.call(cmd::READ, 8192, data.len() as u32, &[]);
    assert_eq!(e, 0);
    assert!(back == data);
    drop(again);
    drop(reg);
    match Arc::try_unwrap(server) {
        Ok(s) => s.shutdown(),
        Err(_) => panic!("server still shared"),
    }
}
