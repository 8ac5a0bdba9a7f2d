//! Protocol tests with a raw client written against the spec: exact error
//! numbers, pipelining, export selection, block status, shutdown, limits,
//! and a property test of random operations against a model. They need no
//! external program.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{closed_within, read_all, wait_for, PlainDevice, RawClient, StrictDevice, TestServer};
use nbd::wire::{self, cf, cmd, hs, info, opt, rep, Info, InfoRequest, OptionHeader};
use nbd::{
    BlockAligned, BlockDevice, Config, DeviceResult, Export, Exports, ListenAddr, MemDevice, Server,
};
use proptest::prelude::*;

const MIB: u64 = 1 << 20;
const EPERM: u32 = 1;
const EIO: u32 = 5;
const EINVAL: u32 = 22;
const ENOSPC: u32 = 28;

fn three_exports() -> TestServer {
    TestServer::start(
        vec![
            ("rw", Arc::new(MemDevice::new(MIB))),
            ("ro", Arc::new(MemDevice::new(MIB).into_read_only())),
            ("plain", Arc::new(PlainDevice(MemDevice::new(MIB)))),
        ],
        Config::default(),
    )
}

#[test]
fn bad_requests_get_the_right_error_and_the_connection_lives() {
    let ts = three_exports();
    for structured in [false, true] {
        let mut c = RawClient::go(&ts.path, "rw", structured, false);
        let check = |c: &mut RawClient,
                     cmd: u16,
                     flags: u16,
                     off: u64,
                     len: u32,
                     payload: &[u8],
                     want: u32| {
            c.request(cmd, flags, 77, off, len, payload);
            let r = c.reply();
            assert_eq!(r.cookie, 77);
            assert_eq!(
                r.error, want,
                "cmd {cmd} flags {flags:#x} {off}+{len}: {}",
                r.message
            );
            if structured && want != 0 {
                assert!(!r.message.is_empty());
            }
            // The connection still serves a good request.
            c.request(cmd::READ, 0, 78, 0, 8, &[]);
            let r = c.reply();
            assert_eq!((r.cookie, r.error, r.data.len()), (78, 0, 8));
        };
        check(&mut c, cmd::READ, 0, MIB - 4, 8, &[], EINVAL);
        check(&mut c, cmd::READ, 0, u64::MAX - 2, 8, &[], EINVAL);
        check(&mut c, cmd::WRITE, 0, MIB - 4, 8, &[1; 8], ENOSPC);
        check(&mut c, cmd::WRITE_ZEROES, 0, MIB, 1, &[], ENOSPC);
        check(&mut c, cmd::TRIM, 0, MIB - 1, 2, &[], ENOSPC);
        check(&mut c, cmd::READ, 0, 0, 0, &[], EINVAL);
        check(&mut c, cmd::READ, 0, 0, 32 << 20 | 1, &[], EINVAL);
        check(&mut c, 99, 0, 0, 8, &[], EINVAL);
        check(&mut c, cmd::READ, cf::NO_HOLE, 0, 8, &[], EINVAL);
        check(&mut c, cmd::READ, 1 << 9, 0, 8, &[], EINVAL);
        check(&mut c, cmd::FLUSH, 0, 4096, 0, &[], EINVAL);
        check(&mut c, cmd::FLUSH, 0, 0, 0, &[], 0);
        check(&mut c, cmd::BLOCK_STATUS, 0, 0, 4096, &[], EINVAL);
        check(
            &mut c,
            cmd::WRITE_ZEROES,
            cf::FAST_ZERO | cf::NO_HOLE,
            10,
            5000,
            &[],
            0,
        );
        if !structured {
            // DF needs structured replies.
            check(&mut c, cmd::READ, cf::DF, 0, 8, &[], EINVAL);
        }
        // An oversize write whose payload is sent in full is skipped.
        let big = vec![0xabu8; (32 << 20) + 512];
        check(&mut c, cmd::WRITE, 0, 0, big.len() as u32, &big, EINVAL);
        c.request(cmd::READ, 0, 5, 0, 512, &[]);
        assert!(c.reply().data.iter().all(|&b| b != 0xab));
    }
    let mut ro = RawClient::go(&ts.path, "ro", true, false);
    for (command, payload) in [
        (cmd::WRITE, &[1u8; 4][..]),
        (cmd::TRIM, &[][..]),
        (cmd::WRITE_ZEROES, &[][..]),
    ] {
        ro.request(command, 0, 1, 0, 4, payload);
        assert_eq!(ro.reply().error, EPERM, "command {command}");
    }
    let mut plain = RawClient::go(&ts.path, "plain", false, false);
    assert_eq!(plain.flags & wire::tf::SEND_FUA, 0);
    for (command, flags) in [
        (cmd::WRITE_ZEROES, cf::FAST_ZERO),
        (cmd::TRIM, 0),
        (cmd::FLUSH, 0),
    ] {
        plain.request(
            command,
            flags,
            1,
            0,
            if command == cmd::FLUSH { 0 } else { 4 },
            &[],
        );
        assert_eq!(plain.reply().error, EINVAL, "command {command}");
    }
    plain.request(cmd::WRITE, cf::FUA, 2, 0, 4, b"abcd");
    assert_eq!(plain.reply().error, EINVAL);
    // The default write_zeroes (buffers of zeroes) works.
    plain.request(cmd::WRITE_ZEROES, 0, 3, 0, 4, &[]);
    assert_eq!(plain.reply().error, 0);
}

#[test]
fn pipelined_requests_are_all_answered() {
    let (ts, dev) = TestServer::mem(4 * MIB);
    let mut c = RawClient::go(&ts.path, "", true, false);
    let mut sender = c.s.try_clone().unwrap();
    let n = 400u64;
    // Send everything from another thread while replies are read here.
    let t = std::thread::spawn(move || {
        let mut buf = Vec::new();
        for i in 0..n {
            let h = wire::RequestHeader {
                flags: 0,
                command: cmd::WRITE,
                cookie: i,
                offset: i * 8192 + 3,
                length: 5000,
            };
            buf.extend_from_slice(&h.encode());
            buf.extend(std::iter::repeat_n(i as u8, 5000));
        }
        for i in 0..n {
            let h = wire::RequestHeader {
                flags: 0,
                command: cmd::READ,
                cookie: n + i,
                offset: i * 8192,
                length: 5010,
            };
            buf.extend_from_slice(&h.encode());
        }
        sender.write_all(&buf).unwrap();
    });
    let mut seen = vec![false; 2 * n as usize];
    for _ in 0..2 * n {
        let r = c.reply();
        assert_eq!(r.error, 0);
        assert!(!seen[r.cookie as usize], "duplicate reply {}", r.cookie);
        seen[r.cookie as usize] = true;
        if r.cookie >= n {
            // A read may overtake the write of its slot, or run beside it
            // (a worker can be preempted mid-write while the others serve
            // hundreds of requests). The device copies page by page under
            // the page's lock, so each 4 KiB page of the slot reads wholly
            // before or wholly after the write.
            let i = (r.cookie - n) as u8;
            assert_eq!(r.data.len(), 5010);
            assert!(r.data[..3].iter().all(|&b| b == 0));
            assert!(r.data[5003..].iter().all(|&b| b == 0));
            for part in [&r.data[3..4096], &r.data[4096..5003]] {
                assert!(
                    part.iter().all(|&b| b == i) || part.iter().all(|&b| b == 0),
                    "read {} saw part of a page written",
                    r.cookie
                );
            }
        }
    }
    t.join().unwrap();
    let m = read_all(dev.as_ref());
    for i in 0..n as usize {
        assert!(m[i * 8192 + 3..i * 8192 + 5003]
            .iter()
            .all(|&b| b == i as u8));
    }
}

#[test]
fn exports_are_chosen_by_name() {
    let ts = TestServer::start(
        vec![
            ("a", Arc::new(MemDevice::new(MIB))),
            ("b", Arc::new(MemDevice::new(2 * MIB))),
        ],
        Config::default(),
    );
    assert_eq!(RawClient::go(&ts.path, "b", false, false).size, 2 * MIB);
    assert_eq!(RawClient::go(&ts.path, "", false, false).size, MIB);

    // An unknown name in INFO is an error reply; the connection goes on.
    let mut c = RawClient::connect(&ts.path, hs::C_FIXED_NEWSTYLE);
    let req = InfoRequest {
        name: "zzz".into(),
        requests: vec![info::NAME],
    };
    c.send_option(opt::INFO, &req.encode());
    assert_eq!(c.option_reply().0.reply, rep::ERR_UNKNOWN);
    let req = InfoRequest {
        name: "".into(),
        requests: vec![info::NAME],
    };
    c.send_option(opt::INFO, &req.encode());
    let mut infos = Vec::new();
    loop {
        let (h, d) = c.option_reply();
        if h.reply == rep::ACK {
            break;
        }
        infos.push(Info::parse(&d).unwrap());
    }
    assert!(infos.contains(&Info::Name("a".into())), "{infos:?}");
    c.send_option(opt::LIST, &[]);
    let mut names = Vec::new();
    loop {
        let (h, d) = c.option_reply();
        if h.reply == rep::ACK {
            break;
        }
        let n = u32::from_be_bytes(d[..4].try_into().unwrap()) as usize;
        names.push(String::from_utf8(d[4..4 + n].to_vec()).unwrap());
    }
    assert_eq!(names, ["a", "b"]);
    // EXPORT_NAME cannot report an error: the server closes.
    c.send_option(opt::EXPORT_NAME, b"zzz");
    assert!(c.is_closed());

    // EXPORT_NAME with the 124 zero bytes (client did not set NO_ZEROES).
    let mut c = RawClient::connect(&ts.path, hs::C_FIXED_NEWSTYLE);
    c.send_option(opt::EXPORT_NAME, b"b");
    let mut r = [0u8; 134];
    c.s.read_exact(&mut r).unwrap();
    assert_eq!(u64::from_be_bytes(r[..8].try_into().unwrap()), 2 * MIB);
    assert!(r[10..].iter().all(|&b| b == 0));
    c.request(cmd::READ, 0, 1, 0, 4, &[]);
    assert_eq!(c.reply().data, [0; 4]);
}

#[test]
fn block_status_and_structured_reads() {
    let mem = Arc::new(MemDevice::new(MIB));
    let rmw = Arc::new(BlockAligned::new(StrictDevice::new(MIB, 4096)));
    let ts = TestServer::start(vec![("mem", mem), ("rmw", rmw)], Config::default());
    for name in ["mem", "rmw"] {
        let mut c = RawClient::go(&ts.path, name, true, true);
        c.request(cmd::WRITE, 0, 1, 4096, 4096, &[9; 4096]);
        assert_eq!(c.reply().error, 0);
        c.request(cmd::BLOCK_STATUS, 0, 2, 0, 16384, &[]);
        let r = c.reply();
        assert_eq!(r.extents, [(4096, 3), (4096, 0), (8192, 3)], "{name}");
        c.request(cmd::BLOCK_STATUS, cf::REQ_ONE, 3, 100, 16384, &[]);
        assert_eq!(c.reply().extents, [(3996, 3)], "{name}");
        c.request(cmd::BLOCK_STATUS, 0, 4, MIB - 10, 20, &[]);
        assert_eq!(c.reply().error, EINVAL);
        c.request(cmd::READ, cf::DF, 5, 4000, 200, &[]);
        let r = c.reply();
        assert_eq!(r.data.len(), 200);
        assert!(r.data[..96].iter().all(|&b| b == 0) && r.data[96..].iter().all(|&b| b == 9));
        c.request(cmd::CACHE, 0, 6, 0, 4096, &[]);
        assert_eq!(c.reply().error, 0);
    }
}

/// Reads take `delay`; counts the reads begun.
struct SlowDevice {
    inner: MemDevice,
    delay: Duration,
    begun: AtomicU64,
}

impl BlockDevice for SlowDevice {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> DeviceResult<()> {
        self.begun.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        self.inner.read_at(off, buf)
    }
    fn write_at(&self, off: u64, data: &[u8], fua: bool) -> DeviceResult<()> {
        self.inner.write_at(off, data, fua)
    }
}

#[test]
fn shutdown_finishes_in_flight_requests() {
    let dev = Arc::new(SlowDevice {
        inner: MemDevice::new(MIB),
        delay: Duration::from_millis(300),
        begun: AtomicU64::new(0),
    });
    // A grace far longer than any wait below: a shutdown that waited it out
    // (for the idle client) cannot pass for a slow machine.
    let config = Config {
        shutdown_grace: Duration::from_secs(600),
        ..Config::default()
    };
    let mut ts = TestServer::start(vec![("", dev.clone())], config);
    let mut c = RawClient::go(&ts.path, "", false, false);
    for i in 0..3 {
        c.request(cmd::READ, 0, i, i * 10, 10, &[]);
    }
    // A client stuck in the handshake must not hold the shutdown up.
    let mut idle = RawClient::connect(&ts.path, hs::C_FIXED_NEWSTYLE);
    // The requests are in flight once the server has begun the first one.
    wait_for("the first read to begin", || {
        dev.begun.load(Ordering::SeqCst) > 0
    });
    let server = ts.server.take().unwrap();
    let stopper = std::thread::spawn(move || server.shutdown());
    let mut got = Vec::new();
    for _ in 0..3 {
        let r = c.reply();
        assert_eq!(r.error, 0);
        got.push(r.cookie);
    }
    got.sort();
    assert_eq!(got, [0, 1, 2]);
    assert!(c.is_closed(), "connection must close after shutdown");
    assert!(idle.is_closed());
    wait_for("the shutdown to end", || stopper.is_finished());
    stopper.join().unwrap();
    assert!(!ts.path.exists(), "socket file left behind");
    assert!(std::os::unix::net::UnixStream::connect(&ts.path).is_err());
}

#[test]
fn tcp_is_loopback_only_by_default() {
    let exports = || Exports::single(Export::new("", Arc::new(MemDevice::new(MIB)))).unwrap();
    let any: std::net::SocketAddr = "0.0.0.0:0".parse().unwrap();
    let e = Server::bind(ListenAddr::Tcp(any), exports(), Config::default())
        .err()
        .unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(Server::bind_unix("/nonexistent-dir/x.sock", exports()).is_err());
    assert!(Server::bind_unix("/tmp/unused.sock", Exports::new()).is_err());

    let server = Server::bind_tcp("127.0.0.1:0".parse().unwrap(), exports()).unwrap();
    let ListenAddr::Tcp(addr) = server.local_addr().clone() else {
        panic!()
    };
    assert_ne!(addr.port(), 0);
    let mut s = TcpStream::connect(addr).unwrap();
    let mut g = [0u8; wire::GREETING_LEN];
    s.read_exact(&mut g).unwrap();
    assert!(wire::parse_greeting(&g).is_ok());
    s.write_all(&hs::C_FIXED_NEWSTYLE.to_be_bytes()).unwrap();
    let h = OptionHeader {
        option: opt::ABORT,
        length: 0,
    };
    s.write_all(&h.encode()).unwrap();
    let mut r = [0u8; 20];
    s.read_exact(&mut r).unwrap();
    assert_eq!(wire::OptionReplyHeader::parse(&r).unwrap().reply, rep::ACK);
    server.shutdown();
}

/// Panics on reads at offset 666.
struct PanicDevice(MemDevice);

impl BlockDevice for PanicDevice {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> DeviceResult<()> {
        assert_ne!(off, 666, "device bug (deliberate, for the test)");
        self.0.read_at(off, buf)
    }
    fn write_at(&self, off: u64, data: &[u8], fua: bool) -> DeviceResult<()> {
        self.0.write_at(off, data, fua)
    }
}

#[test]
fn a_panicking_device_gives_eio_not_a_dead_server() {
    let ts = TestServer::start(
        vec![("", Arc::new(PanicDevice(MemDevice::new(MIB))))],
        Config::default(),
    );
    let mut c = RawClient::go(&ts.path, "", true, false);
    c.request(cmd::READ, 0, 1, 666, 10, &[]);
    assert_eq!(c.reply().error, EIO);
    c.request(cmd::READ, 0, 2, 0, 10, &[]);
    assert_eq!(c.reply().error, 0);
    assert_eq!(RawClient::go(&ts.path, "", false, false).size, MIB);
}

#[test]
fn handshake_rules() {
    let (ts, _) = TestServer::mem(MIB);
    // Unknown client flags: the server must drop the connection.
    let mut c = RawClient::connect(&ts.path, 1 << 7);
    assert!(c.is_closed());
    // Meta contexts need structured replies first.
    let mut c = RawClient::connect(&ts.path, hs::C_FIXED_NEWSTYLE);
    let m = wire::MetaContextRequest {
        export: "".into(),
        queries: vec![],
    };
    c.send_option(opt::LIST_META_CONTEXT, &m.encode());
    assert_eq!(c.option_reply().0.reply, rep::ERR_INVALID);
    c.send_option(opt::STRUCTURED_REPLY, &[]);
    assert_eq!(c.option_reply().0.reply, rep::ACK);
    c.send_option(opt::LIST_META_CONTEXT, &m.encode());
    let (h, d) = c.option_reply();
    assert_eq!(h.reply, rep::META_CONTEXT);
    assert_eq!(&d[4..], b"base:allocation");
    assert_eq!(c.option_reply().0.reply, rep::ACK);
    // Truncated GO data.
    c.send_option(opt::GO, &[0, 0, 0, 9, b'x']);
    assert_eq!(c.option_reply().0.reply, rep::ERR_INVALID);
    // Oversized option data is skipped and refused.
    c.send_option(1000, &vec![0u8; 100_000]);
    assert_eq!(c.option_reply().0.reply, rep::ERR_TOO_BIG);
    c.send_option(opt::STARTTLS, &[]);
    assert_eq!(c.option_reply().0.reply, rep::ERR_UNSUP);
    c.send_option(opt::ABORT, &[]);
    assert_eq!(c.option_reply().0.reply, rep::ACK);
    assert!(c.is_closed());
}

/// A 1 MiB memory device as the default export, served with `config`.
fn mib_served_with(config: Config) -> TestServer {
    TestServer::start(vec![("", Arc::new(MemDevice::new(MIB)))], config)
}

/// The same served to at most `max_connections` clients at once.
fn mib_served_to_at_most(max_connections: usize) -> TestServer {
    mib_served_with(Config {
        max_connections,
        ..Config::default()
    })
}

#[test]
fn connection_limit() {
    let ts = mib_served_to_at_most(2);
    let a = RawClient::go(&ts.path, "", false, false);
    let _b = RawClient::go(&ts.path, "", false, false);
    let mut s = std::os::unix::net::UnixStream::connect(&ts.path).unwrap();
    let mut g = [0u8; 1];
    assert!(
        matches!(s.read(&mut g), Ok(0) | Err(_)),
        "third connection served"
    );
    drop(a);
    // Its place is free once the server has seen it go, in the server's
    // own time: connect until it greets again.
    let mut c = None;
    wait_for("a place after a client left", || {
        c = RawClient::try_connect(&ts.path, hs::C_FIXED_NEWSTYLE | hs::C_NO_ZEROES);
        c.is_some()
    });
    let c = c.unwrap().go_on("", false, false);
    assert_eq!(c.size, MIB);
}

#[test]
fn stalled_handshakes_neither_lock_out_clients_nor_outlive_the_deadline() {
    let config = Config {
        max_connections: 4,
        max_handshakes: 8,
        handshake_timeout: Duration::from_millis(300),
        ..Config::default()
    };
    let ts = mib_served_with(config);
    // Twice as many stalled clients as there are handshake slots: some
    // connect and send nothing, some send their flags and half an option.
    let mut stalled: Vec<std::os::unix::net::UnixStream> = (0..16)
        .map(|i| {
            let mut s = std::os::unix::net::UnixStream::connect(&ts.path).unwrap();
            if i % 2 == 1 {
                let mut g = [0u8; wire::GREETING_LEN];
                s.read_exact(&mut g).unwrap();
                s.write_all(&hs::C_FIXED_NEWSTYLE.to_be_bytes()).unwrap();
                s.write_all(&wire::IHAVEOPT.to_be_bytes()).unwrap();
            }
            s
        })
        .collect();
    // A correct client still gets in and is served.
    let mut c = RawClient::go(&ts.path, "", false, false);
    c.request(cmd::WRITE, 0, 1, 4096, 4, b"live");
    assert_eq!(c.reply().error, 0);
    c.request(cmd::READ, 0, 2, 4096, 4, &[]);
    assert_eq!(c.reply().data, b"live");
    // Every stalled client is closed: shed to admit others, or by the
    // deadline. The limit here is generous; the deadline is 300 ms.
    for (i, s) in stalled.iter_mut().enumerate() {
        assert!(
            closed_within(s, Duration::from_secs(20)),
            "stalled client {i} still open"
        );
    }
    // Only the correct client is left, and it still works.
    let deadline = Instant::now() + Duration::from_secs(20);
    while ts.server().connections() > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(ts.server().connections(), 1);
    assert_eq!(ts.server().negotiating(), 0);
    c.request(cmd::READ, 0, 3, 4096, 4, &[]);
    assert_eq!(c.reply().data, b"live");
}

#[test]
fn a_client_finishing_its_handshake_beyond_the_limit_is_refused() {
    let ts = mib_served_to_at_most(1);
    // `late` starts negotiating while nobody is served; `first` finishes
    // first and takes the only place.
    let mut late = RawClient::connect(&ts.path, hs::C_FIXED_NEWSTYLE | hs::C_NO_ZEROES);
    let mut first = RawClient::go(&ts.path, "", false, false);
    assert_eq!(first.size, MIB);
    let r = InfoRequest {
        name: String::new(),
        requests: vec![],
    };
    late.send_option(opt::GO, &r.encode());
    // The server finds no place: GO is refused by policy, with the reason,
    // and the connection closed.
    let (h, why) = late.option_reply();
    assert_eq!(h.reply, rep::ERR_POLICY);
    assert!(String::from_utf8_lossy(&why).contains("connections are served already"));
    assert!(
        closed_within(&mut late.s, Duration::from_secs(20)),
        "a client beyond the limit was served"
    );
    // The admitted client is untouched.
    first.request(cmd::READ, 0, 1, 0, 512, &[]);
    assert_eq!(first.reply().error, 0);
}

#[test]
fn many_connections_at_once() {
    let (ts, dev) = TestServer::mem(16 * MIB);
    let failed = Arc::new(AtomicBool::new(false));
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let path = ts.path.clone();
            let failed = failed.clone();
            s.spawn(move || {
                let mut c = RawClient::go(&path, "", t % 2 == 0, false);
                let base = t * 2 * MIB;
                for i in 0..50u64 {
                    let off = base + (i * 37_123) % (2 * MIB - 70_000);
                    let len = 1 + ((i * 7919) % 65_536) as u32;
                    let data: Vec<u8> = (0..len).map(|k| (k as u64 ^ t ^ i) as u8).collect();
                    c.request(cmd::WRITE, 0, i, off, len, &data);
                    if c.reply().error != 0 {
                        failed.store(true, Ordering::Relaxed);
                    }
                    c.request(cmd::READ, 0, i, off, len, &[]);
                    if c.reply().data != data {
                        failed.store(true, Ordering::Relaxed);
                    }
                }
                // Leave a signature.
                c.request(cmd::WRITE, 0, 999, base, 8, &[t as u8 + 1; 8]);
                assert_eq!(c.reply().error, 0);
            });
        }
    });
    assert!(!failed.load(Ordering::Relaxed));
    let m = read_all(dev.as_ref());
    for t in 0..8usize {
        assert_eq!(m[t * 2 * MIB as usize..][..8], [t as u8 + 1; 8]);
    }
}

#[derive(Clone, Debug)]
enum ModelOp {
    Write(u64, Vec<u8>),
    Read(u64, u32),
    Trim(u64, u32),
    Zero(u64, u32, bool),
}

fn model_op(size: u64) -> impl Strategy<Value = ModelOp> {
    let range =
        (0..size - 1).prop_flat_map(move |off| (Just(off), 1..=(size - off).min(20_000) as u32));
    prop_oneof![
        4 => range.clone().prop_flat_map(|(off, len)| {
            (Just(off), prop::collection::vec(any::<u8>(), len as usize))
        }).prop_map(|(o, d)| ModelOp::Write(o, d)),
        4 => range.clone().prop_map(|(o, l)| ModelOp::Read(o, l)),
        1 => range.clone().prop_map(|(o, l)| ModelOp::Trim(o, l)),
        1 => (range, any::<bool>()).prop_map(|((o, l), h)| ModelOp::Zero(o, l, h)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Random operations through the protocol agree with a byte-array model
    /// on a byte-granular device and on a whole-block device behind
    /// `BlockAligned`.
    #[test]
    fn random_operations_match_a_model(
        ops in prop::collection::vec(model_op(96 * 1024), 1..40),
        structured in any::<bool>(),
        rmw in any::<bool>(),
    ) {
        let size = 96 * 1024u64;
        let dev: Arc<dyn BlockDevice> = if rmw {
            Arc::new(BlockAligned::new(StrictDevice::new(size, 4096)))
        } else {
            Arc::new(MemDevice::new(size))
        };
        let ts = TestServer::start(vec![("", dev.clone())], Config::default());
        let mut c = RawClient::go(&ts.path, "", structured, false);
        let mut model = vec![0u8; size as usize];
        for (i, op) in ops.iter().enumerate() {
            let cookie = i as u64;
            match op {
                ModelOp::Write(o, d) => {
                    // FUA only where advertised (the server refuses it otherwise).
                    let fua = if c.flags & wire::tf::SEND_FUA != 0 { cf::FUA } else { 0 };
                    c.request(cmd::WRITE, fua, cookie, *o, d.len() as u32, d);
                    prop_assert_eq!(c.reply().error, 0);
                    model[*o as usize..*o as usize + d.len()].copy_from_slice(d);
                }
                ModelOp::Read(o, l) => {
                    c.request(cmd::READ, 0, cookie, *o, *l, &[]);
                    let r = c.reply();
                    prop_assert_eq!(r.error, 0);
                    prop_assert!(r.data == model[*o as usize..(*o + *l as u64) as usize]);
                }
                ModelOp::Trim(o, l) => {
                    c.request(cmd::TRIM, 0, cookie, *o, *l, &[]);
                    prop_assert_eq!(c.reply().error, 0);
                    // Trimmed bytes are unspecified: take the device's word.
                    let mut now = vec![0u8; *l as usize];
                    dev.read_at(*o, &mut now).unwrap();
                    model[*o as usize..(*o + *l as u64) as usize].copy_from_slice(&now);
                }
                ModelOp::Zero(o, l, no_hole) => {
                    let f = if *no_hole { cf::NO_HOLE } else { 0 };
                    c.request(cmd::WRITE_ZEROES, f, cookie, *o, *l, &[]);
                    prop_assert_eq!(c.reply().error, 0);
                    model[*o as usize..(*o + *l as u64) as usize].fill(0);
                }
            }
        }
        prop_assert!(read_all(dev.as_ref()) == model);
    }
}
