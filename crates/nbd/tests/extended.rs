//! Extended headers (`NBD_OPT_EXTENDED_HEADERS`) with a raw client written
//! against the spec: the option's rules, 32-byte requests with 64-bit
//! lengths, every reply an extended chunk that repeats the request's offset,
//! 64-bit block status descriptors, and the payload-length flag's framing.
//! The same flow through a real client (qemu) is in `clients.rs`.

mod common;

use std::sync::Arc;

use common::{RawClient, TestServer};
use nbd::wire::{cf, cmd, hs, opt, rep, InfoRequest, MetaContextRequest};
use nbd::{BlockDevice, MemDevice};

const GIB: u64 = 1 << 30;
const EINVAL: u32 = 22;
const ENOSPC: u32 = 28;
/// `base:allocation` flags of a hole that reads as zeroes.
const HOLE_ZERO: u64 = 3;

fn big_server() -> (TestServer, Arc<MemDevice>) {
    // Sparse: only written pages take memory.
    TestServer::mem(8 * GIB)
}

/// Negotiates extended headers, `base:allocation` and GO on the default
/// export.
fn extended_client(ts: &TestServer) -> RawClient {
    let mut c = RawClient::connect(&ts.path, hs::C_FIXED_NEWSTYLE | hs::C_NO_ZEROES);
    c.extended_headers();
    c.go_on("", false, true)
}

#[test]
fn sixty_four_bit_lengths_and_extended_replies() {
    let (ts, dev) = big_server();
    let mut c = extended_client(&ts);
    assert_eq!(c.size, 8 * GIB);

    let at = 5 * GIB;
    c.request_ext(cmd::WRITE, cf::PAYLOAD_LEN, 1, at, 4096, &[7; 4096]);
    let r = c.reply();
    assert_eq!((r.cookie, r.error, r.offset), (1, 0, Some(at)));

    c.request_ext(cmd::READ, 0, 2, at - 100, 200, &[]);
    let r = c.reply();
    assert_eq!((r.error, r.offset), (0, Some(at - 100)));
    assert!(r.data[..100].iter().all(|&b| b == 0));
    assert!(r.data[100..].iter().all(|&b| b == 7));

    // One status request over 6 GiB: descriptors longer than 32 bits.
    c.request_ext(cmd::BLOCK_STATUS, 0, 3, 0, 6 * GIB, &[]);
    let r = c.reply();
    assert_eq!(r.error, 0);
    assert_eq!(
        r.extents64,
        [(at, HOLE_ZERO), (4096, 0), (GIB - 4096, HOLE_ZERO)]
    );
    c.request_ext(cmd::BLOCK_STATUS, cf::REQ_ONE, 4, 0, 6 * GIB, &[]);
    assert_eq!(c.reply().extents64, [(at, HOLE_ZERO)]);

    // A TRIM of 6 GiB in one request frees the page.
    c.request_ext(cmd::TRIM, 0, 5, 0, 6 * GIB, &[]);
    assert_eq!(c.reply().error, 0);
    let mut page = [1u8; 4096];
    dev.read_at(at, &mut page).unwrap();
    assert!(page.iter().all(|&b| b == 0));
    c.request_ext(cmd::BLOCK_STATUS, 0, 6, 0, 6 * GIB, &[]);
    assert_eq!(c.reply().extents64, [(6 * GIB, HOLE_ZERO)]);

    // Past the end, with a 64-bit length: the kernel's errno for writes.
    c.request_ext(cmd::TRIM, 0, 7, GIB, 8 * GIB, &[]);
    let r = c.reply();
    assert_eq!((r.error, r.offset), (ENOSPC, Some(GIB)));
    assert!(r.message.contains("past the end"), "{}", r.message);
}

#[test]
fn the_payload_flag_frames_every_request() {
    let (ts, _dev) = big_server();
    let mut c = extended_client(&ts);
    // The spec asks WRITE to carry the flag; QEMU's client does not, and a
    // WRITE always has a payload, so both forms are accepted.
    c.request_ext(cmd::WRITE, 0, 1, 0, 4096, &[3; 4096]);
    assert_eq!(c.reply().error, 0);
    c.request_ext(cmd::READ, 0, 11, 0, 4096, &[]);
    assert_eq!(c.reply().data, vec![3; 4096]);
    // A READ with a payload: refused, and the payload is consumed so the
    // next request is read in step.
    c.request_ext(cmd::READ, cf::PAYLOAD_LEN, 2, 0, 12, b"twelve bytes");
    assert_eq!(c.reply().error, EINVAL);
    c.request_ext(cmd::WRITE, cf::PAYLOAD_LEN, 3, 4096, 512, &[5; 512]);
    assert_eq!(c.reply().error, 0);
    c.request_ext(cmd::READ, 0, 4, 4096, 512, &[]);
    assert_eq!(c.reply().data, vec![5; 512]);
    // A payload over the maximum block size is not skipped: the spec asks
    // for a hard disconnect.
    c.request_ext(cmd::WRITE, cf::PAYLOAD_LEN, 5, 0, 1 << 40, &[]);
    assert!(c.is_closed());
}

#[test]
fn negotiation_rules() {
    let (ts, _dev) = big_server();
    // Data with the option, and asking twice, are invalid.
    let mut c = RawClient::connect(&ts.path, hs::C_FIXED_NEWSTYLE | hs::C_NO_ZEROES);
    c.send_option(opt::EXTENDED_HEADERS, &[1]);
    assert_eq!(c.option_reply().0.reply, rep::ERR_INVALID);
    c.extended_headers();
    c.send_option(opt::EXTENDED_HEADERS, &[]);
    assert_eq!(c.option_reply().0.reply, rep::ERR_INVALID);
    // No downgrade to structured replies.
    c.send_option(opt::STRUCTURED_REPLY, &[]);
    assert_eq!(c.option_reply().0.reply, rep::ERR_EXT_HEADER_REQD);
    // Metadata contexts need no structured replies once extended headers are on.
    let m = MetaContextRequest {
        export: "".into(),
        queries: vec![],
    };
    c.send_option(opt::LIST_META_CONTEXT, &m.encode());
    assert_eq!(c.option_reply().0.reply, rep::META_CONTEXT);
    assert_eq!(c.option_reply().0.reply, rep::ACK);
    // EXPORT_NAME after extended headers is forbidden and has no error
    // reply: the server closes.
    c.send_option(opt::EXPORT_NAME, b"");
    assert!(c.is_closed());

    // Structured replies first, then extended headers: both acknowledged,
    // and the transmission uses extended replies.
    let mut c = RawClient::connect(&ts.path, hs::C_FIXED_NEWSTYLE | hs::C_NO_ZEROES);
    c.send_option(opt::STRUCTURED_REPLY, &[]);
    assert_eq!(c.option_reply().0.reply, rep::ACK);
    c.extended_headers();
    let mut c = c.go_on("", false, false);
    c.request_ext(cmd::FLUSH, 0, 9, 0, 0, &[]);
    let r = c.reply();
    assert_eq!((r.cookie, r.error, r.offset), (9, 0, Some(0)));

    // A client that never asks keeps compact headers.
    let mut c = RawClient::go(&ts.path, "", true, false);
    c.request(cmd::WRITE, 0, 1, 0, 512, &[1; 512]);
    let r = c.reply();
    assert_eq!((r.error, r.offset), (0, None));

    // INFO after extended headers still answers.
    let mut c = RawClient::connect(&ts.path, hs::C_FIXED_NEWSTYLE | hs::C_NO_ZEROES);
    c.extended_headers();
    let req = InfoRequest {
        name: "".into(),
        requests: vec![],
    };
    c.send_option(opt::INFO, &req.encode());
    loop {
        let (h, _) = c.option_reply();
        if h.reply == rep::ACK {
            break;
        }
        assert_eq!(h.reply, rep::INFO);
    }
}
