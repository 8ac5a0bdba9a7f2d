//! A connection's threads (its reader and each of its workers) run
//! `Config::on_conn_thread_start` before they serve anything, on stacks of
//! `Config::conn_thread_stack` bytes: what a server that locks its memory
//! relies on to populate each new thread's stack ahead of its I/O.

mod common;

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::adversary::negotiated;
use common::TestServer;
use nbd::wire::{cmd, RequestHeader, SimpleReply};
use nbd::{Config, MemDevice};

/// Each started thread's name and stack size, as the hook saw them.
static STARTED: Mutex<Vec<(String, usize)>> = Mutex::new(Vec::new());

/// The calling thread's stack size, bytes (`pthread_getattr_np`).
fn own_stack_size() -> usize {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    // SAFETY: the attributes are filled for the calling thread, read only
    // after that succeeded, and destroyed once read.
    unsafe {
        assert_eq!(
            libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()),
            0
        );
        let mut size = 0;
        assert_eq!(libc::pthread_attr_getstacksize(attr.as_ptr(), &mut size), 0);
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        size
    }
}

fn record() {
    let name = std::thread::current().name().unwrap_or("").to_string();
    let size = own_stack_size();
    STARTED.lock().unwrap().push((name, size));
}

#[test]
fn every_connection_thread_runs_the_start_hook_on_the_stack_asked_for() {
    const STACK: usize = 256 << 10;
    let dev = Arc::new(MemDevice::new(1 << 20));
    let ts = TestServer::start(
        vec![("", dev.clone())],
        Config {
            workers: 2,
            conn_thread_stack: Some(STACK),
            on_conn_thread_start: Some(record),
            ..Config::default()
        },
    );
    let mut s = negotiated(&ts.path, "");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // A write, and once it is answered (requests in flight may be served
    // in any order), a read of it back: the threads serve as before.
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    let request = |command, cookie| RequestHeader {
        flags: 0,
        command,
        cookie,
        offset: 8192,
        length: 4096,
    };
    let mut out = request(cmd::WRITE, 1).encode().to_vec();
    out.extend_from_slice(&data);
    s.write_all(&out).unwrap();
    let reply = |s: &mut std::os::unix::net::UnixStream| {
        let mut h = [0u8; SimpleReply::LEN];
        s.read_exact(&mut h).unwrap();
        SimpleReply::parse(&h).unwrap()
    };
    assert_eq!(
        reply(&mut s),
        SimpleReply {
            error: 0,
            cookie: 1
        }
    );
    s.write_all(&request(cmd::READ, 2).encode()).unwrap();
    assert_eq!(
        reply(&mut s),
        SimpleReply {
            error: 0,
            cookie: 2
        }
    );
    let mut back = vec![0u8; 4096];
    s.read_exact(&mut back).unwrap();
    assert_eq!(back, data);

    // A worker that has had nothing to serve may still be starting.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while STARTED.lock().unwrap().len() < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let started = STARTED.lock().unwrap().clone();
    let readers = started
        .iter()
        .filter(|(n, _)| n.starts_with("nbd-conn-"))
        .count();
    let workers = started
        .iter()
        .filter(|(n, _)| n.starts_with("nbd-") && n.contains("-w"))
        .count();
    assert_eq!((readers, workers), (1, 2), "{started:?}");
    for (name, size) in &started {
        // glibc may round the size to pages and leave the guard page out;
        // the default would be 2 MiB.
        assert!(
            (STACK - 8192..=STACK + 65536).contains(size),
            "{name}: a stack of {size} bytes, {STACK} asked for"
        );
    }
}
