//! Round trips of both compressors (with and without a dictionary, one-shot
//! and streamed) over inputs of every shape the encoders treat differently,
//! the kernel's format rules seen in the output, and the decoder's answers
//! to streams that are cut, corrupted or aim outside the output. Runs
//! without the kernel's sources (tests/kernel.rs compares with those).

use lz4k::{
    compress_bound, decompress, decompress_with_dict, Compressor, DecodeError, Dict, Error,
    HcCompressor, HcDict, HcStream, Stream,
};
use testkit::SplitMix64 as Rng;

/// Inputs of every shape; under Miri, which runs this code some 10^4
/// times slower, the short ones only.
fn shapes() -> Vec<Vec<u8>> {
    let mut rng = Rng(17);
    let mut v = rng.short_inputs(30);
    for dist in [1, 2, 3, 8, 100, 2000] {
        for len in [4, 15, 19, 300] {
            v.push(rng.with_copy(dist, len, 20));
        }
    }
    let mut r = Rng(3);
    v.push((0..4096).map(|_| b"abcd\0\0\0\0"[r.below(8)]).collect());
    if !cfg!(miri) {
        for n in [65546, 65547, 100_000] {
            let mut r = Rng(n as u64);
            v.push((0..n).map(|_| b"abcd\0\0\0\0"[r.below(8)]).collect());
        }
        v.push(testkit::real_data(256 * 1024));
        v.push(vec![0u8; 300_000]);
    }
    v
}

fn check_round_trip(z: &[u8], input: &[u8], dict: &[u8]) {
    let mut back = vec![0xEEu8; input.len()];
    assert_eq!(decompress_with_dict(z, &mut back, dict), Ok(input.len()));
    assert!(back == input, "{} bytes differ", input.len());
}

#[test]
fn every_shape_round_trips() {
    let mut fast = Compressor::new();
    let mut hc = HcCompressor::new();
    let levels: &[i32] = if cfg!(miri) { &[2] } else { &[1, 4, 9, 16] };
    for input in shapes() {
        let mut z = vec![0u8; compress_bound(input.len())];
        for acc in [1, 3] {
            let n = fast.compress_fast(&input, &mut z, acc).unwrap();
            check_round_trip(&z[..n], &input, &[]);
        }
        for &level in levels {
            let n = hc.compress(&input, &mut z, level).unwrap();
            check_round_trip(&z[..n], &input, &[]);
        }
    }
}

#[test]
fn dictionaries_and_streams_round_trip() {
    let pages: Vec<Vec<u8>> = if cfg!(miri) {
        (0..3).map(|i| Rng(i).bytes(600).repeat(2)).collect()
    } else {
        testkit::real_data(64 * 4096)
            .chunks(4096)
            .map(<[u8]>::to_vec)
            .collect()
    };
    let dict = testkit::every_other_page(&pages, 64 * 1024);
    let (fd, hd) = (Dict::new(&dict), HcDict::new(&dict));
    assert!(fd.accepted_by_zram() && hd.accepted_by_zram());
    let mut fast = Compressor::new();
    let mut hc = HcCompressor::new();
    let mut z = vec![0u8; compress_bound(4096) * 2];
    let (mut plain, mut with) = (0, 0);
    for p in &pages {
        let n = fast.compress_fast_dict(&fd, p, &mut z, 1).unwrap();
        check_round_trip(&z[..n], p, fd.bytes());
        with += n;
        plain += fast.compress_fast(p, &mut z, 1).unwrap();
        let n = hc.compress_dict(&hd, p, &mut z, 4).unwrap();
        check_round_trip(&z[..n], p, hd.bytes());
    }
    // Half the pages are in the dictionary: it must help.
    assert!(with < plain, "{with} with the dictionary, {plain} without");

    // Streams: each block decodes with the previous block as dictionary.
    let mut s = Stream::new();
    let mut h = HcStream::new(9);
    assert_eq!(s.load_dict(&dict), dict.len());
    assert_eq!(h.load_dict(&dict), dict.len());
    let mut prev: &[u8] = &dict;
    for p in &pages {
        let n = s.compress_fast_continue(p, &mut z, 1).unwrap();
        check_round_trip(&z[..n], p, prev);
        let n = h.compress_continue(p, &mut z).unwrap();
        check_round_trip(&z[..n], p, prev);
        prev = p;
    }
}

#[test]
fn dictionary_sizes_zram_refuses() {
    let big = Rng(1).bytes(70_000);
    for (len, fast_ok, hc_ok) in [
        (0, false, false),
        (3, false, true),
        (7, false, true),
        (8, true, true),
        (65_536, true, true),
        (65_537, false, false),
    ] {
        let d = &big[..len];
        assert_eq!(Dict::new(d).accepted_by_zram(), fast_ok, "lz4, {len} bytes");
        assert_eq!(
            HcDict::new(d).accepted_by_zram(),
            hc_ok,
            "lz4hc, {len} bytes"
        );
        assert!(Dict::new(d).loaded_len() <= 65_536);
    }
}

#[test]
fn format_rules_in_the_output() {
    let mut fast = Compressor::new();
    let mut z = vec![0u8; 64];
    // Empty input: one token, no literals. Under 13 bytes: all literals.
    assert_eq!(fast.compress_fast(&[], &mut z, 1), Ok(1));
    assert_eq!(z[0], 0);
    assert_eq!(fast.compress_fast(b"aaaaaaaaaaaa", &mut z, 1), Ok(13));
    assert_eq!(z[0], 12 << 4);
    // 13 bytes: the search's first step is already past the last place a
    // match may start, so all literals too.
    assert_eq!(fast.compress_fast(&[9u8; 13], &mut z, 1), Ok(14));
    // 20 equal bytes: one literal, a match of 14 at offset 1 (the last 5
    // bytes are literals).
    assert_eq!(
        fast.compress_fast(&[9u8; 20], &mut z, 1),
        Ok(1 + 1 + 2 + 1 + 5)
    );
    assert_eq!(z[..4], [0x1A, 9, 1, 0]);
    assert_eq!(z[4], 5 << 4);
    // A zero page: one literal, one match to 5 bytes before the end.
    let n = fast.compress_fast(&[0u8; 4096], &mut z, 1).unwrap();
    let code = 4096 - 1 - 5 - 4 - 15;
    assert_eq!(n, 1 + 1 + 2 + code / 255 + 1 + 1 + 5);
    assert_eq!(z[..4], [0x1F, 0, 1, 0]);
}

#[test]
fn small_outputs_fail_as_the_kernel_checks() {
    let input = Rng(3).bytes(1000);
    let mut fast = Compressor::new();
    let mut hc = HcCompressor::new();
    for cap in [0, 1, 999, 1000, 1003] {
        let mut dst = vec![0u8; cap];
        assert_eq!(
            fast.compress_fast(&input, &mut dst, 1),
            Err(Error::OutputFull { capacity: cap })
        );
        assert_eq!(
            hc.compress(&input, &mut dst, 9),
            Err(Error::OutputFull { capacity: cap })
        );
    }
    // Compressible data fits in less than the bound, as it does unlimited.
    let text = b"the quick brown fox jumps over the lazy dog ".repeat(40);
    let mut full = vec![0u8; compress_bound(text.len())];
    let n = fast.compress_fast(&text, &mut full, 1).unwrap();
    let mut tight = vec![0u8; n + 16];
    assert_eq!(fast.compress_fast(&text, &mut tight, 1), Ok(n));
    assert_eq!(tight[..n], full[..n]);
}

#[test]
fn bad_blocks_are_errors() {
    let mut out = [0u8; 64];
    assert_eq!(decompress(&[], &mut out), Err(DecodeError::Truncated));
    // Literals promised but missing.
    assert_eq!(
        decompress(&[0x50, 1, 2], &mut out),
        Err(DecodeError::Truncated)
    );
    // A long literal length cut off.
    assert_eq!(
        decompress(&[0xF0, 255], &mut out),
        Err(DecodeError::Truncated)
    );
    // Offset 0, and an offset before the output.
    assert_eq!(
        decompress(&[0x10, 7, 0, 0, 0x50, 1, 2, 3, 4, 5], &mut out),
        Err(DecodeError::BadOffset)
    );
    assert_eq!(
        decompress(&[0x10, 7, 2, 0, 0x50, 1, 2, 3, 4, 5], &mut out),
        Err(DecodeError::BadOffset)
    );
    // ... which a dictionary makes good.
    assert_eq!(
        decompress_with_dict(&[0x10, 7, 2, 0, 0x00], &mut out, b"xy"),
        Ok(5)
    );
    assert_eq!(out[..5], [7, b'y', 7, b'y', 7]);
    // A match after which the input ends (no last literals).
    assert_eq!(
        decompress(&[0x10, 7, 1, 0], &mut out),
        Err(DecodeError::Truncated)
    );
    // More output than room.
    assert_eq!(
        decompress(&[0x1F, 7, 1, 0, 200, 0x00], &mut out),
        Err(DecodeError::OutputFull)
    );
    assert_eq!(
        decompress(&[0x50, 1, 2, 3, 4, 5], &mut out[..4]),
        Err(DecodeError::OutputFull)
    );
}

#[test]
fn corrupted_blocks_never_panic() {
    let mut fast = Compressor::new();
    let mut rng = Rng(7);
    let mut noticed = 0;
    let step = if cfg!(miri) { 9 } else { 1 };
    for input in shapes().into_iter().step_by(step) {
        let mut z = vec![0u8; compress_bound(input.len())];
        let n = fast.compress_fast(&input, &mut z, 1).unwrap();
        z.truncate(n);
        let mut out = vec![0u8; input.len()];
        for cut in (0..n).step_by(1 + n / 16) {
            assert!(decompress(&z[..cut], &mut out) != Ok(input.len()) || cut == n);
        }
        for _ in 0..if cfg!(miri) { 2 } else { 20 } {
            let mut bad = z.clone();
            let i = rng.below(bad.len());
            bad[i] ^= 1 + rng.below(255) as u8;
            match decompress(&bad, &mut out) {
                Ok(k) => assert!(k <= out.len()),
                Err(_) => noticed += 1,
            }
        }
    }
    assert!(noticed > 0);
}
