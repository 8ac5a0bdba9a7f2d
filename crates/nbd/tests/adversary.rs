//! Adversary tests: raw-socket clients that stall at every handshake step,
//! send READs and never read the replies, flood tiny requests, or
//! disconnect at every point. Each checks that a correct client is served
//! meanwhile and that the server's payload memory stays within its budget
//! (the budget's own count, and the process's RSS with a stated margin).
//! The tests take a lock so they run one at a time: RSS is per process.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::adversary::{
    copy_in_and_out, flood, memory_dir, negotiated, non_reader, peak_rss_during, requests, stalled,
    FileDevice, Stall,
};
use common::{closed_within, wait_for, TestServer};
use nbd::wire::{self, cmd, hs, opt, InfoRequest, OptionHeader, RequestHeader};
use nbd::{Config, MemDevice};

const MIB: u64 = 1 << 20;
/// What a test's process may grow by beyond the payload budget: thread
/// stacks, read buffers (128 KiB a connection), the client's own buffers
/// and the allocator's slack.
const MARGIN: u64 = 32 * MIB;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A server on a tmpfs-backed device of `size` bytes, with 1 MiB requests,
/// 2 MiB per connection and `total` bytes server-wide.
fn server(size: u64, total: u64, config: Config) -> (TestServer, tempfile::TempDir) {
    let dir = memory_dir();
    let dev = Arc::new(FileDevice::new(dir.path(), size));
    let config = Config {
        max_request: MIB as u32,
        inflight_bytes: 2 * MIB,
        inflight_total: total,
        ..config
    };
    (TestServer::start(vec![("", dev)], config), dir)
}

#[test]
fn clients_stalled_at_every_handshake_step_are_closed_and_lock_nobody_out() {
    let _one = serial();
    let (ts, _dir) = server(
        16 * MIB,
        16 * MIB,
        Config {
            max_handshakes: 16,
            handshake_timeout: Duration::from_millis(300),
            ..Config::default()
        },
    );
    let before = testkit::rss::rss_kib();
    // Three of each step: more than the handshake slots.
    let mut stalls: Vec<(Stall, UnixStream)> = Stall::ALL
        .iter()
        .cycle()
        .take(3 * Stall::ALL.len())
        .map(|&step| (step, stalled(&ts.path, step)))
        .collect();
    let ((), peak) = peak_rss_during(|| copy_in_and_out(&ts.path, 8 * MIB, MIB as u32));
    for (step, s) in &mut stalls {
        assert!(
            closed_within(s, Duration::from_secs(20)),
            "a client stalled {step:?} is still open"
        );
    }
    wait_for("no connection left", || ts.server().connections() == 0);
    let growth = (peak.saturating_sub(before)) * 1024;
    assert!(growth < 16 * MIB + MARGIN, "RSS grew by {growth} bytes");
}

#[test]
fn clients_that_never_read_hold_their_bound_and_slow_nobody_else() {
    let _one = serial();
    const TOTAL: u64 = 40 * MIB;
    let (ts, _dir) = server(64 * MIB, TOTAL, Config::default());
    let before = testkit::rss::rss_kib();
    // Eight clients ask for 32 MiB each and read nothing.
    let mut readers: Vec<UnixStream> = (0..8)
        .map(|_| non_reader(&ts.path, 32, MIB as u32, 64 * MIB))
        .collect();
    wait_for("every non-reader to reach its bound", || {
        ts.server().budget_stats().connection_waits >= 8
    });
    let held = ts.server().budget_stats().in_use;
    // Each holds at most its 2 MiB (and the reply headers' room).
    assert!(held <= 8 * (2 * MIB + 4096), "held {held}");
    let ((), peak) = peak_rss_during(|| copy_in_and_out(&ts.path, 32 * MIB, MIB as u32));
    let stats = ts.server().budget_stats();
    assert!(stats.peak <= TOTAL);
    assert_eq!(stats.stalled_closed, 0);
    let growth = (peak.saturating_sub(before)) * 1024;
    assert!(growth < TOTAL + MARGIN, "RSS grew by {growth} bytes");
    // Once one reads, it gets every reply.
    let r = &mut readers[0];
    r.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut data = vec![0u8; MIB as usize];
    for _ in 0..32 {
        let mut h = [0u8; wire::SimpleReply::LEN];
        r.read_exact(&mut h).unwrap();
        assert_eq!(wire::SimpleReply::parse(&h).unwrap().error, 0);
        r.read_exact(&mut data).unwrap();
    }
    drop(readers);
    wait_for("the memory to come back", || {
        ts.server().budget_stats().in_use == 0
    });
}

#[test]
fn a_stalled_reader_gives_its_memory_back_when_others_wait_for_it() {
    let _one = serial();
    // Room for two stalled clients and not a third request.
    let (ts, _dir) = server(
        16 * MIB,
        5 * MIB,
        Config {
            stall_timeout: Duration::from_millis(300),
            ..Config::default()
        },
    );
    let mut stuck: Vec<UnixStream> = (0..2)
        .map(|_| non_reader(&ts.path, 8, MIB as u32, 16 * MIB))
        .collect();
    wait_for("both stalled clients to hold their bound", || {
        ts.server().budget_stats().connection_waits >= 2
    });
    let started = Instant::now();
    copy_in_and_out(&ts.path, 4 * MIB, MIB as u32);
    let stats = ts.server().budget_stats();
    assert!(stats.server_waits >= 1, "{stats:?}");
    assert!(stats.stalled_closed >= 1, "{stats:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(stats.peak <= 5 * MIB);
    // At least one stalled client was closed to make room.
    let closed = stuck
        .iter_mut()
        .map(|s| closed_within(s, Duration::from_secs(20)))
        .filter(|&c| c)
        .count();
    assert!(closed >= 1);
}

#[test]
fn floods_of_tiny_requests_are_bounded_and_others_are_served() {
    let _one = serial();
    const TOTAL: u64 = 16 * MIB;
    let (ts, _dir) = server(16 * MIB, TOTAL, Config::default());
    let before = testkit::rss::rss_kib();
    // Four clients send 1-byte READs as fast as they can and read nothing,
    // until the server stops reading them.
    let mut flooders: Vec<UnixStream> = (0..4).map(|_| negotiated(&ts.path, "")).collect();
    for f in &mut flooders {
        let sent = flood(f, Duration::from_millis(200), 16 * MIB);
        assert!(sent > 1000, "only {sent} requests went out");
    }
    // One more floods and reads every reply.
    let mut busy = negotiated(&ts.path, "");
    let n = 20_000;
    let mut r = busy.try_clone().unwrap();
    r.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let ((), peak) = peak_rss_during(|| {
        std::thread::scope(|sc| {
            sc.spawn(|| {
                busy.write_all(&requests(cmd::FLUSH, n, 0, 16 * MIB))
                    .unwrap();
            });
            sc.spawn(|| copy_in_and_out(&ts.path, 8 * MIB, MIB as u32));
            let mut h = [0u8; wire::SimpleReply::LEN];
            for _ in 0..n {
                r.read_exact(&mut h).unwrap();
                let h = wire::SimpleReply::parse(&h).unwrap();
                // This device does not offer FLUSH: each gets its error.
                assert_ne!(h.error, 0);
            }
        })
    });
    let stats = ts.server().budget_stats();
    assert!(stats.peak <= TOTAL);
    let growth = (peak.saturating_sub(before)) * 1024;
    assert!(growth < TOTAL + MARGIN, "RSS grew by {growth} bytes");
    drop(flooders);
    wait_for("the memory to come back", || {
        ts.server().budget_stats().in_use == 0
    });
}

/// A whole session as a client sends it: flags, GO, a WRITE, a READ, a
/// FLUSH, DISC.
fn session_script() -> Vec<u8> {
    let mut s = (hs::C_FIXED_NEWSTYLE | hs::C_NO_ZEROES)
        .to_be_bytes()
        .to_vec();
    let go = InfoRequest {
        name: String::new(),
        requests: vec![],
    }
    .encode();
    s.extend_from_slice(
        &OptionHeader {
            option: opt::GO,
            length: go.len() as u32,
        }
        .encode(),
    );
    s.extend_from_slice(&go);
    for (command, length) in [(cmd::WRITE, 512u32), (cmd::READ, 512), (cmd::FLUSH, 0)] {
        let h = RequestHeader {
            flags: 0,
            command,
            cookie: 7,
            offset: 0,
            length,
        };
        s.extend_from_slice(&h.encode());
        if command == cmd::WRITE {
            s.extend_from_slice(&[0x5a; 512]);
        }
    }
    s.extend_from_slice(
        &RequestHeader {
            flags: 0,
            command: cmd::DISC,
            cookie: 8,
            offset: 0,
            length: 0,
        }
        .encode(),
    );
    s
}

#[test]
fn clients_that_disconnect_at_every_point_leave_nothing_behind() {
    let _one = serial();
    let dev = Arc::new(MemDevice::new(MIB));
    let ts = TestServer::start(vec![("", dev)], Config::default());
    let script = session_script();
    for cut in 0..=script.len() {
        let mut s = UnixStream::connect(&ts.path).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let mut g = [0u8; wire::GREETING_LEN];
        if cut % 3 == 0 {
            // Some read the greeting first, some leave before it is read.
            s.read_exact(&mut g).unwrap();
        }
        let _ = s.write_all(&script[..cut]);
        if cut % 2 == 0 {
            // Some leave with a half-read reply, some without reading.
            let _ = s.read(&mut [0u8; 40]);
        }
        drop(s);
    }
    wait_for("every cut-off client to be gone", || {
        ts.server().connections() == 0
    });
    assert_eq!(ts.server().budget_stats().in_use, 0);
    let mut c = negotiated(&ts.path, "");
    c.write_all(&requests(cmd::READ, 1, 512, MIB)).unwrap();
    let mut reply = [0u8; wire::SimpleReply::LEN + 512];
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.read_exact(&mut reply).unwrap();
    assert_eq!(wire::SimpleReply::parse(&reply[..16]).unwrap().error, 0);
    assert!(
        reply[16..].iter().all(|&b| b == 0x5a),
        "the full sessions wrote"
    );
}
