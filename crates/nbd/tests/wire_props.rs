//! Property tests of the wire format: every message survives an encode and
//! parse round trip, and no input, however malformed, makes a parser or a
//! whole connection panic. The fuzz target's entry points are exercised
//! here over the seed corpus and random mutations of it.

use nbd::fuzzing;
use nbd::wire::{
    self, ChunkHeader, InfoRequest, MetaContextRequest, OptionHeader, RequestHeader, SimpleReply,
    WireError,
};
use proptest::prelude::*;

/// Strings the protocol allows: no NUL, at most 4096 bytes.
fn proto_string() -> impl Strategy<Value = String> {
    "[^\u{0}]{0,64}".prop_filter("at most 4096 bytes", |s| s.len() <= 4096)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn request_header_round_trips(flags: u16, command: u16, cookie: u64, offset: u64, length: u32) {
        let h = RequestHeader { flags, command, cookie, offset, length };
        prop_assert_eq!(RequestHeader::parse(&h.encode()), Ok(h));
    }

    #[test]
    fn option_header_round_trips(option: u32, length: u32) {
        let h = OptionHeader { option, length };
        prop_assert_eq!(OptionHeader::parse(&h.encode()), Ok(h));
    }

    #[test]
    fn replies_round_trip(flags: u16, kind: u16, cookie: u64, length: u32, error: u32) {
        let c = ChunkHeader { flags, kind, cookie, length };
        prop_assert_eq!(ChunkHeader::parse(&c.encode()), Ok(c));
        let s = SimpleReply { error, cookie };
        prop_assert_eq!(SimpleReply::parse(&s.encode()), Ok(s));
    }

    #[test]
    fn info_request_round_trips(name in proto_string(), requests in prop::collection::vec(any::<u16>(), 0..20)) {
        let r = InfoRequest { name, requests };
        prop_assert_eq!(InfoRequest::parse(&r.encode()), Ok(r));
    }

    #[test]
    fn meta_context_request_round_trips(
        export in proto_string(),
        queries in prop::collection::vec(proto_string(), 0..8),
    ) {
        let r = MetaContextRequest { export, queries };
        prop_assert_eq!(MetaContextRequest::parse(&r.encode()), Ok(r));
    }

    #[test]
    fn payloads_round_trip(
        error: u32,
        message in proto_string(),
        context: u32,
        extents in prop::collection::vec((any::<u32>(), any::<u32>()), 0..50),
    ) {
        let p = wire::encode_error_payload(error, &message);
        prop_assert_eq!(wire::parse_error_payload(&p), Ok((error, message)));
        let p = wire::encode_block_status_payload(context, &extents);
        prop_assert_eq!(wire::parse_block_status_payload(&p), Ok((context, extents)));
    }

    /// A truncated message is an error, never a panic or a partial success.
    #[test]
    fn truncation_is_detected(name in proto_string(), cut in 0usize..100) {
        let r = InfoRequest { name, requests: vec![1, 2, 3] };
        let b = r.encode();
        let cut = cut % b.len();
        let is_truncated = matches!(InfoRequest::parse(&b[..cut]), Err(WireError::Truncated { .. }));
        prop_assert!(is_truncated);
    }

    #[test]
    fn parsers_never_panic(data in prop::collection::vec(any::<u8>(), 0..200)) {
        fuzzing::parsers(&data);
    }

    #[test]
    fn connections_never_panic_on_garbage(data in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = fuzzing::connection(&data);
    }

    /// Garbage that starts like a real client gets further into the server.
    #[test]
    fn connections_never_panic_on_mutated_sessions(
        seed in 0usize..5,
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        cut in any::<prop::sample::Index>(),
        insert in prop::collection::vec(any::<u8>(), 0..40),
        at in any::<prop::sample::Index>(),
    ) {
        let seeds = fuzzing::seeds();
        let mut data = seeds[seed % seeds.len()].1.clone();
        for (i, v) in flips {
            let i = i.index(data.len());
            data[i] ^= v;
        }
        let at = at.index(data.len());
        data.splice(at..at, insert);
        data.truncate(cut.index(data.len() + 1));
        let _ = fuzzing::connection(&data);
    }
}

#[test]
fn seeds_run_clean() {
    for (name, data) in fuzzing::seeds() {
        let out = fuzzing::connection(&data);
        // The sessions really reach transmission and read their writes back.
        let expect: &[u8] = match name {
            "go-structured-all-commands" => b"0123456789abcdef",
            "export-name-simple" => b"xyz",
            "go-extended-all-commands" => b"extended",
            _ => b"NBDMAGIC",
        };
        assert!(
            out.windows(expect.len()).any(|w| w == expect),
            "{name}: reply lacks {expect:?}"
        );
        // Every prefix is a client that disconnected at that byte.
        for cut in (0..data.len()).step_by(7) {
            let _ = fuzzing::connection(&data[..cut]);
        }
        assert!(!data.is_empty(), "{name}");
    }
}

/// Runs the fuzz target's entry points over the committed corpus (the
/// files in `fuzz/corpus/`), so the corpus is exercised on every test run
/// even where cargo-fuzz is not available. `NBD_WRITE_CORPUS=1` refreshes
/// the seed files from `fuzzing::seeds()`.
#[test]
fn committed_corpus_runs_clean() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let dir = root.join("connection");
    if std::env::var_os("NBD_WRITE_CORPUS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, data) in fuzzing::seeds() {
            std::fs::write(dir.join(name), data).unwrap();
        }
    }
    let Ok(rd) = std::fs::read_dir(&root) else {
        eprintln!("SKIP: no corpus at {}", root.display());
        return;
    };
    let mut n = 0;
    for target in rd.flatten() {
        for f in std::fs::read_dir(target.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let data = std::fs::read(f.path()).unwrap();
            let _ = fuzzing::connection(&data);
            fuzzing::parsers(&data);
            n += 1;
        }
    }
    eprintln!("ran {n} corpus files");
}
