//! Round trips of both variants over synthetic inputs of every shape the
//! encoder treats differently, and the decoder's answers to streams that
//! are cut, padded, corrupted or aimed outside the output.

use lzo::{
    compress, compress_bound, decompress, decompress_checked, Compressor, DecodeError, Variant,
};
use testkit::SplitMix64 as Rng;

const VARIANTS: [Variant; 2] = [Variant::Lzo, Variant::LzoRle];

fn round_trip(c: &mut Compressor, variant: Variant, input: &[u8]) -> Vec<u8> {
    let mut z = vec![0u8; compress_bound(input.len())];
    let n = c.compress(variant, input, &mut z).unwrap();
    z.truncate(n);
    let mut back = vec![0xEEu8; input.len()];
    let got = decompress(&z, &mut back);
    assert_eq!(got, Ok(input.len()), "{variant:?} on {} bytes", input.len());
    assert!(
        back == input,
        "{variant:?} on {} bytes differs",
        input.len()
    );
    z
}

/// Inputs mixing literals, matches near and far, and zero runs of lengths
/// around every threshold of the format. Under Miri, which runs this code
/// some 10^4 times slower, the ones of at most a few KiB: every instruction
/// kind, matches up to 2049 bytes back, one block.
fn shapes() -> Vec<Vec<u8>> {
    let mut rng = Rng(17);
    let mut v = rng.short_inputs(80);
    for lit in [1, 2, 3, 4, 15, 16, 17, 18, 19, 238, 239, 273, 274, 1000] {
        let mut p = rng.bytes(lit);
        p.extend_from_slice(&[0u8; 64]);
        p.extend(rng.bytes(lit));
        p.extend_from_slice(&p.clone()[..lit.min(40)]);
        v.push(p);
    }
    for run in [
        3, 4, 5, 11, 12, 31, 32, 33, 36, 2050, 2051, 2052, 4000, 5000,
    ] {
        for at in [0, 1, 100] {
            let mut p = rng.bytes(at);
            p.extend(vec![0u8; run]);
            p.extend(rng.bytes(50));
            v.push(p);
        }
    }
    for len in [3, 8, 9, 33, 34, 260, 261, 264, 265, 300, 1000] {
        for dist in [
            1, 2, 7, 8, 9, 15, 16, 17, 2048, 2049, 16384, 16385, 20000, 49151,
        ] {
            if cfg!(miri) && dist > 2049 {
                continue;
            }
            v.push(rng.with_copy(dist, len, 30));
        }
    }
    // Small alphabets make every kind of match; long inputs span blocks.
    for (seed, len) in [(1u64, 4096), (2, 49151), (3, 49152), (4, 200_000)] {
        if cfg!(miri) && len > 4096 {
            continue;
        }
        let mut r = Rng(seed);
        v.push((0..len).map(|_| b"abcd\0\0\0\0"[r.below(8)]).collect());
    }
    if !cfg!(miri) {
        v.push(vec![0u8; 200_000]);
        v.push(Rng(5).bytes(100_000));
    }
    v
}

#[test]
#[cfg_attr(miri, ignore = "slow; fast_and_checked_decoders_agree covers it")]
fn every_shape_round_trips_in_both_variants() {
    let mut c = Compressor::new();
    for input in shapes() {
        for variant in VARIANTS {
            let z = round_trip(&mut c, variant, &input);
            assert!(z.len() <= compress_bound(input.len()));
            // A fresh compressor gives the same bytes: no state leaks.
            let mut again = vec![0u8; compress_bound(input.len())];
            let n = compress(variant, &input, &mut again).unwrap();
            assert_eq!(again[..n], z[..]);
        }
    }
}

#[test]
fn stream_headers_and_zero_runs() {
    let mut c = Compressor::new();
    // Empty input: the end marker alone; lzo-rle adds its version marker.
    assert_eq!(round_trip(&mut c, Variant::Lzo, &[]), [0x11, 0, 0]);
    assert_eq!(
        round_trip(&mut c, Variant::LzoRle, &[]),
        [17, 1, 0x11, 0, 0]
    );
    // A short input is one literal run flagged in the first byte.
    assert_eq!(
        round_trip(&mut c, Variant::Lzo, b"abc"),
        [17 + 3, b'a', b'b', b'c', 0x11, 0, 0]
    );
    // A zero page in lzo-rle: 5 literals (the search starts at byte 5),
    // a run of 2051 (the longest), a run of 2020 (up to the last 20 bytes,
    // which are never searched) and those 20 as literals. Zero runs are
    // 0001 1RRR, 1111 11SS, 1111 1111, RRRR RRRR (run less 4).
    let zero = vec![0u8; 4096];
    let rle = round_trip(&mut c, Variant::LzoRle, &zero);
    let mut expect = vec![17, 1, 5 - 3, 0, 0, 0, 0, 0];
    expect.extend([0x18 | 7, 0xfc, 0xff, 0xff]);
    expect.extend([0x18, 0xfc, 0xff, (2016 >> 3) as u8]);
    expect.extend([0, 2]);
    expect.extend([0u8; 20]);
    expect.extend([0x11, 0, 0]);
    assert_eq!(rle, expect);
    let plain = round_trip(&mut c, Variant::Lzo, &zero);
    assert!(rle.len() < plain.len(), "{} vs {}", rle.len(), plain.len());
}

#[test]
fn small_output_buffers_are_refused_before_writing() {
    let input = Rng(3).bytes(1000);
    let mut dst = vec![0x55u8; compress_bound(1000) - 1];
    let err = compress(Variant::Lzo, &input, &mut dst).unwrap_err();
    assert_eq!(err.needed, compress_bound(1000));
    assert!(dst.iter().all(|&b| b == 0x55));
}

#[test]
#[cfg_attr(miri, ignore = "slow; fast_and_checked_decoders_agree covers it")]
fn cut_and_padded_streams_are_errors() {
    let mut c = Compressor::new();
    let mut rng = Rng(99);
    for input in shapes().into_iter().step_by(7) {
        for variant in VARIANTS {
            let z = round_trip(&mut c, variant, &input);
            let mut out = vec![0u8; input.len()];
            for cut in 0..z.len() {
                assert!(
                    decompress(&z[..cut], &mut out).is_err(),
                    "{variant:?} {z:?} cut at {cut}"
                );
            }
            let mut longer = z.clone();
            longer.push(rng.next_u64() as u8);
            assert_eq!(
                decompress(&longer, &mut out),
                Err(DecodeError::TrailingBytes)
            );
            if !input.is_empty() {
                let mut short = vec![0u8; input.len() - 1];
                assert_eq!(decompress(&z, &mut short), Err(DecodeError::OutputFull));
            }
        }
    }
}

#[test]
fn hand_made_bad_streams() {
    let mut out = [0u8; 64];
    // After one literal, a 3-byte match 48 bytes back.
    assert_eq!(
        decompress(&[17 + 1, b'x', 0x40 | 7 << 2, 5, 0x11, 0, 0], &mut out),
        Err(DecodeError::BadDistance)
    );
    // An end marker with a long length.
    assert_eq!(
        decompress(&[17 + 1, b'x', 0x10, 5, 0, 0], &mut out),
        Err(DecodeError::BadEndMarker)
    );
    // An end marker with state bits.
    assert_eq!(
        decompress(&[0x11, 1, 0], &mut out),
        Err(DecodeError::BadEndMarker)
    );
    // A zero run longer than the output.
    assert_eq!(
        decompress(
            &[17, 1, 18, b'x', 0x18, 0xfc, 0xff, 0xff, 0x11, 0, 0],
            &mut out
        ),
        Err(DecodeError::OutputFull)
    );
    // The same run, in a plain stream, is a far match before the output.
    assert_eq!(
        decompress(&[18, b'x', 0x18, 0xfc, 0xff, 0x11, 0, 0], &mut out),
        Err(DecodeError::BadDistance)
    );
    // A literal run claiming far more than the input has.
    assert_eq!(
        decompress(&[0, 0, 0, 0, 200], &mut out),
        Err(DecodeError::Truncated)
    );
}

#[test]
#[cfg_attr(miri, ignore = "slow; fast_and_checked_decoders_agree covers it")]
fn corrupted_streams_never_panic() {
    let mut c = Compressor::new();
    let mut rng = Rng(7);
    let (mut errors, mut decoded) = (0, 0);
    for input in shapes().into_iter().step_by(5) {
        for variant in VARIANTS {
            let z = round_trip(&mut c, variant, &input);
            let mut out = vec![0u8; input.len()];
            for _ in 0..50 {
                let mut bad = z.clone();
                for _ in 0..1 + rng.below(3) {
                    let i = rng.below(bad.len());
                    bad[i] ^= 1 + rng.below(255) as u8;
                }
                // A full-length result counts as decoded (the corruption may
                // have hit a literal); anything else was noticed.
                match decompress(&bad, &mut out) {
                    Ok(n) if n == input.len() => decoded += 1,
                    _ => errors += 1,
                }
            }
        }
    }
    // Many shapes are mostly literals, where a flipped byte still decodes.
    assert!(errors > 0, "no corruption noticed in {decoded}");
}

/// `decompress` (with its fast loop) and `decompress_checked` (without)
/// give the same result and the same decoded bytes; the bytes past the
/// decoded length may differ (the fast loop's chunks overshoot).
fn same_as_checked(src: &[u8], cap: usize) -> Result<usize, DecodeError> {
    let (mut a, mut b) = (vec![0xA5u8; cap], vec![0x5Au8; cap]);
    let (ra, rb) = (decompress(src, &mut a), decompress_checked(src, &mut b));
    assert_eq!(ra, rb, "{src:?} into {cap}");
    if let Ok(n) = ra {
        assert!(a[..n] == b[..n], "{src:?} into {cap}");
    }
    ra
}

#[test]
fn fast_and_checked_decoders_agree() {
    let mut c = Compressor::new();
    let mut rng = Rng(11);
    // Under Miri, one shape in 25 (each kind still comes several times).
    for input in shapes()
        .into_iter()
        .step_by(if cfg!(miri) { 25 } else { 1 })
    {
        for variant in VARIANTS {
            let z = round_trip(&mut c, variant, &input);
            assert_eq!(same_as_checked(&z, input.len()), Ok(input.len()));
            // Room to spare, and too little.
            assert_eq!(same_as_checked(&z, input.len() + 40), Ok(input.len()));
            if !input.is_empty() {
                for short in [1, 2, 3, 4, 8, 15, 16, 17, 31] {
                    let cap = input.len().saturating_sub(short);
                    assert!(same_as_checked(&z, cap).is_err());
                }
            }
            // Cut, and corrupted (every instruction kind, near and far
            // from the ends of both buffers).
            for cut in (0..z.len()).step_by(1 + z.len() / 64) {
                assert!(same_as_checked(&z[..cut], input.len()).is_err());
            }
            for _ in 0..20 {
                let mut bad = z.clone();
                for _ in 0..1 + rng.below(3) {
                    let i = rng.below(bad.len());
                    bad[i] ^= 1 + rng.below(255) as u8;
                }
                let _ = same_as_checked(&bad, input.len());
            }
        }
    }
    // Found by the fuzz target: a match 1 byte back of more than 8 bytes,
    // whose pattern copy once computed a position before its start.
    let found = [
        2, 120, 120, 120, 120, 120, 32, 62, 17, 0, 0, 32, 126, 0, 0, 50, 248, 3, 0, 2, 120, 120,
        120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120, 120,
        17, 0, 0,
    ];
    assert_eq!(same_as_checked(&found, 300), Ok(300));
    // Arbitrary bytes.
    for len in 0..300 {
        let junk = rng.bytes(len);
        let _ = same_as_checked(&junk, rng.below(5000));
    }
}
