//! Entry points for fuzzers and the seed corpus (not a stable API).
//!
//! This module owns what `fuzz/` and the corpus test call: [`connection()`]
//! feeds arbitrary bytes to a whole connection (handshake, then
//! transmission) as if a client had sent them, serving requests inline on a
//! small [`MemDevice`]; [`parsers`] feeds them to every wire parser; and
//! [`seeds`] builds valid sessions that exercise every option and command,
//! the starting points of a fuzzing corpus. Nothing here may panic on any
//! input; that is the property being fuzzed.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::budget::ServerBudget;
use crate::connection;
use crate::export::{Config, Export, Exports};
use crate::wire::{
    self, cf, cmd, hs, info, opt, ExtendedRequestHeader, InfoRequest, MetaContextRequest,
    OptionHeader, RequestHeader,
};
use crate::MemDevice;

/// Size of the fuzzed export.
const DEVICE_SIZE: u64 = 1 << 20;

/// Runs one connection over `data` (the client's bytes); returns what the
/// server sent.
pub fn connection(data: &[u8]) -> Vec<u8> {
    let mut exports = Exports::new();
    let ok = exports
        .add(Export::new("", Arc::new(MemDevice::new(DEVICE_SIZE))).with_description("fuzz"))
        .and_then(|()| {
            exports.add(Export::new(
                "ro",
                Arc::new(MemDevice::new(DEVICE_SIZE).into_read_only()),
            ))
        });
    debug_assert!(ok.is_ok());
    let config = Config {
        workers: 0,
        max_request: 64 * 1024,
        inflight_bytes: 64 * 1024,
        ..Config::default()
    };
    let mut out = Vec::new();
    connection::run(
        data,
        &mut out,
        exports,
        &config,
        &AtomicBool::new(false),
        &connection::Hooks {
            admit: &|_| Ok(()),
            on_dead: &|| {},
            budget: &ServerBudget::unlimited(),
            sessions: &Default::default(),
        },
        crate::handshake::Start::Greeting,
        0,
    );
    out
}

/// Feeds `data` to every parser of the wire module.
pub fn parsers(data: &[u8]) {
    let _ = wire::parse_greeting(data);
    let _ = wire::OptionHeader::parse(data);
    let _ = wire::OptionReplyHeader::parse(data);
    let _ = wire::InfoRequest::parse(data);
    let _ = wire::MetaContextRequest::parse(data);
    let _ = wire::Info::parse(data);
    let _ = wire::RequestHeader::parse(data);
    let _ = wire::ExtendedRequestHeader::parse(data);
    let _ = wire::ExtendedChunkHeader::parse(data);
    let _ = wire::parse_block_status_ext_payload(data);
    let _ = wire::SimpleReply::parse(data);
    let _ = wire::ChunkHeader::parse(data);
    let _ = wire::parse_error_payload(data);
    let _ = wire::parse_block_status_payload(data);
    let _ = wire::parse_string(data);
}

fn option(out: &mut Vec<u8>, code: u32, data: &[u8]) {
    out.extend_from_slice(
        &OptionHeader {
            option: code,
            length: data.len() as u32,
        }
        .encode(),
    );
    out.extend_from_slice(data);
}

fn request(out: &mut Vec<u8>, command: u16, flags: u16, offset: u64, length: u32) {
    let cookie = out.len() as u64;
    out.extend_from_slice(
        &RequestHeader {
            flags,
            command,
            cookie,
            offset,
            length,
        }
        .encode(),
    );
}

fn extended_request(out: &mut Vec<u8>, command: u16, flags: u16, offset: u64, length: u64) {
    let cookie = out.len() as u64;
    out.extend_from_slice(
        &ExtendedRequestHeader {
            flags,
            command,
            cookie,
            offset,
            length,
        }
        .encode(),
    );
}

/// Valid client sessions, named, as seeds for a fuzzing corpus.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut v = Vec::new();

    // GO with structured replies and base:allocation, then every command.
    let mut s = (hs::C_FIXED_NEWSTYLE | hs::C_NO_ZEROES)
        .to_be_bytes()
        .to_vec();
    option(&mut s, opt::STRUCTURED_REPLY, &[]);
    let meta = MetaContextRequest {
        export: String::new(),
        queries: vec!["base:allocation".into()],
    };
    option(&mut s, opt::SET_META_CONTEXT, &meta.encode());
    let go = InfoRequest {
        name: String::new(),
        requests: vec![info::NAME, info::DESCRIPTION, info::BLOCK_SIZE],
    };
    option(&mut s, opt::GO, &go.encode());
    request(&mut s, cmd::WRITE, cf::FUA, 1000, 16);
    s.extend_from_slice(b"0123456789abcdef");
    request(&mut s, cmd::READ, cf::DF, 990, 40);
    request(&mut s, cmd::TRIM, 0, 0, 8192);
    request(
        &mut s,
        cmd::WRITE_ZEROES,
        cf::NO_HOLE | cf::FAST_ZERO,
        4096,
        5000,
    );
    request(&mut s, cmd::BLOCK_STATUS, cf::REQ_ONE, 0, 65536);
    request(&mut s, cmd::CACHE, 0, 0, 4096);
    request(&mut s, cmd::FLUSH, 0, 0, 0);
    request(&mut s, cmd::READ, 0, DEVICE_SIZE - 10, 20);
    request(&mut s, 99, 0, 0, 1);
    request(&mut s, cmd::DISC, 0, 0, 0);
    v.push(("go-structured-all-commands", s));

    // Extended headers, base:allocation, GO, then every command with 64-bit
    // lengths (and a payload where the flag says so).
    let mut s = (hs::C_FIXED_NEWSTYLE | hs::C_NO_ZEROES)
        .to_be_bytes()
        .to_vec();
    option(&mut s, opt::EXTENDED_HEADERS, &[]);
    let meta = MetaContextRequest {
        export: String::new(),
        queries: vec!["base:allocation".into()],
    };
    option(&mut s, opt::SET_META_CONTEXT, &meta.encode());
    let go = InfoRequest {
        name: String::new(),
        requests: vec![info::BLOCK_SIZE],
    };
    option(&mut s, opt::GO, &go.encode());
    extended_request(&mut s, cmd::WRITE, cf::PAYLOAD_LEN, 100, 8);
    s.extend_from_slice(b"extended");
    extended_request(&mut s, cmd::READ, 0, 96, 16);
    extended_request(&mut s, cmd::READ, cf::PAYLOAD_LEN, 0, 4);
    s.extend_from_slice(b"junk");
    extended_request(&mut s, cmd::BLOCK_STATUS, 0, 0, 1 << 33);
    extended_request(&mut s, cmd::TRIM, 0, 0, DEVICE_SIZE);
    extended_request(&mut s, cmd::DISC, 0, 0, 0);
    v.push(("go-extended-all-commands", s));

    // Old-fashioned EXPORT_NAME with simple replies.
    let mut s = hs::C_FIXED_NEWSTYLE.to_be_bytes().to_vec();
    option(&mut s, opt::EXPORT_NAME, b"");
    request(&mut s, cmd::WRITE, 0, 4095, 3);
    s.extend_from_slice(b"xyz");
    request(&mut s, cmd::READ, 0, 4090, 10);
    request(&mut s, cmd::WRITE, 0, DEVICE_SIZE - 1, 2);
    s.extend_from_slice(b"!!");
    request(&mut s, cmd::DISC, 0, 0, 0);
    v.push(("export-name-simple", s));

    // Listing, info, unknown options, abort.
    let mut s = hs::C_FIXED_NEWSTYLE.to_be_bytes().to_vec();
    option(&mut s, opt::LIST, &[]);
    let inf = InfoRequest {
        name: "ro".into(),
        requests: vec![info::BLOCK_SIZE],
    };
    option(&mut s, opt::INFO, &inf.encode());
    option(&mut s, opt::STARTTLS, &[]);
    option(&mut s, 0x1234, b"junk");
    option(&mut s, opt::STRUCTURED_REPLY, &[]);
    let meta = MetaContextRequest {
        export: "ro".into(),
        queries: vec![],
    };
    option(&mut s, opt::LIST_META_CONTEXT, &meta.encode());
    option(&mut s, opt::ABORT, &[]);
    v.push(("list-info-abort", s));

    // Writes to the read-only export.
    let mut s = hs::C_FIXED_NEWSTYLE.to_be_bytes().to_vec();
    let go = InfoRequest {
        name: "ro".into(),
        requests: vec![],
    };
    option(&mut s, opt::GO, &go.encode());
    request(&mut s, cmd::WRITE, 0, 0, 4);
    s.extend_from_slice(b"nope");
    request(&mut s, cmd::TRIM, 0, 0, 4);
    request(&mut s, cmd::READ, 0, 0, 4);
    v.push(("read-only", s));
    v
}
