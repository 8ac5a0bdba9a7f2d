//! Corrupt, truncated, foreign and garbage input, and wrong buffer sizes:
//! every call returns an error (or, for a corruption that still decodes,
//! a full page) and never panics.

mod common;

use common::{random_bytes, real_pages, Rng, PAGE};
use zcomp::{Algorithm, Compressor, Context, Error};

/// One default compressor per algorithm, plus a few other settings whose
/// formats differ (a small deflate window, a negative zstd level, lz4hc).
fn compressors() -> Vec<Compressor> {
    let mut v: Vec<Compressor> = Algorithm::ALL
        .into_iter()
        .map(Compressor::with_defaults)
        .collect();
    v.push(Compressor::parse("deflate", "level=9 deflate.winbits=9").unwrap());
    v.push(Compressor::parse("zstd", "level=-3").unwrap());
    v.push(Compressor::parse("lz4hc", "level=12").unwrap());
    v
}

/// Compressed real pages (and a zero page and a random one) with originals.
fn samples(ctx: &mut Context) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut inputs = real_pages(12);
    inputs.push(vec![0u8; PAGE]);
    inputs.push(random_bytes(77, PAGE));
    inputs
        .into_iter()
        .map(|page| {
            let z = ctx.compress_buffered(&page).unwrap().to_vec();
            (page, z)
        })
        .collect()
}

/// Decompresses into a page; a success must be a full page.
fn try_decompress(ctx: &mut Context, src: &[u8]) -> Result<Vec<u8>, Error> {
    let mut out = vec![0u8; PAGE];
    let n = ctx.decompress(src, &mut out)?;
    assert_eq!(n, PAGE);
    Ok(out)
}

#[test]
fn truncated_input_is_an_error() {
    for c in compressors() {
        let mut ctx = c.context().unwrap();
        for (_, z) in samples(&mut ctx) {
            for cut in [0, 1, 2, z.len() / 2, z.len().saturating_sub(2), z.len() - 1] {
                let result = try_decompress(&mut ctx, &z[..cut.min(z.len() - 1)]);
                assert!(result.is_err(), "{c:?}: {cut} of {} bytes decoded", z.len());
            }
        }
    }
}

#[test]
fn corrupt_input_never_panics() {
    let mut rng = Rng(2024);
    for c in compressors() {
        let mut ctx = c.context().unwrap();
        let (mut errors, mut decoded) = (0, 0);
        for (page, z) in samples(&mut ctx) {
            for _ in 0..300 {
                let mut bad = z.clone();
                // One to four flipped bytes, sometimes an inserted or removed one.
                for _ in 0..1 + rng.below(4) {
                    let i = rng.below(bad.len());
                    bad[i] ^= 1 + rng.below(255) as u8;
                }
                match rng.below(8) {
                    0 => bad.insert(rng.below(bad.len() + 1), rng.below(256) as u8),
                    1 if bad.len() > 1 => {
                        bad.remove(rng.below(bad.len()));
                    }
                    _ => {}
                }
                match try_decompress(&mut ctx, &bad) {
                    Err(_) => errors += 1,
                    Ok(_) => decoded += 1,
                }
            }
            // The context still works after all that.
            assert_eq!(try_decompress(&mut ctx, &z).unwrap(), page, "{c:?}");
        }
        assert!(
            errors > 0,
            "{c:?}: no corruption was noticed ({decoded} decoded)"
        );
    }
}

#[test]
fn garbage_never_panics() {
    for c in compressors() {
        let mut ctx = c.context().unwrap();
        for seed in 0..200u64 {
            let garbage = random_bytes(seed, (seed as usize * 37) % (2 * PAGE));
            let _ = try_decompress(&mut ctx, &garbage);
            // Short output buffers too.
            let mut small = vec![0u8; seed as usize % 17];
            let _ = ctx.decompress(&garbage, &mut small);
        }
    }
}

#[test]
fn wrong_output_sizes_are_errors() {
    for c in compressors() {
        let mut ctx = c.context().unwrap();
        for (page, z) in samples(&mut ctx) {
            for len in [0, 1, PAGE / 2, PAGE - 1, PAGE + 1, 2 * PAGE] {
                let mut out = vec![0u8; len];
                let err = ctx.decompress(&z, &mut out).unwrap_err();
                assert!(
                    matches!(err, Error::WrongSize { .. } | Error::Corrupt { .. }),
                    "{c:?} into {len}: {err}"
                );
                if len > PAGE {
                    // Too much room: the data itself decodes, to the wrong size.
                    assert_eq!(
                        err,
                        Error::WrongSize {
                            algorithm: c.algorithm(),
                            expected: len,
                            actual: PAGE
                        }
                    );
                    assert_eq!(out[..PAGE], page[..]);
                }
            }
        }
    }
}

/// The four formats: LZO1X streams (either variant), lz4 blocks, zstd
/// frames, raw deflate.
fn family(a: Algorithm) -> &'static str {
    match a {
        Algorithm::LzoRle | Algorithm::Lzo => "lzo",
        Algorithm::Lz4 | Algorithm::Lz4Hc | Algorithm::Lz4Flex => "lz4",
        Algorithm::Zstd => "zstd",
        Algorithm::Deflate => "deflate",
    }
}

/// Data of one format is read by every setting of that format and by no
/// other (or, if another happens to decode it, without a panic).
#[test]
fn another_algorithms_data_never_panics() {
    let all = compressors();
    let mut ctxs: Vec<Context> = all.iter().map(|c| c.context().unwrap()).collect();
    let pages = real_pages(8);
    for i in 0..ctxs.len() {
        for page in &pages {
            let z = ctxs[i].compress_buffered(page).unwrap().to_vec();
            for (j, ctx) in ctxs.iter_mut().enumerate() {
                let same_format = family(all[i].algorithm()) == family(all[j].algorithm());
                match try_decompress(ctx, &z) {
                    Ok(back) => assert!(
                        back == *page || !same_format,
                        "{:?} read {:?} data wrongly",
                        all[j],
                        all[i]
                    ),
                    Err(_) => assert!(
                        !same_format,
                        "{:?} could not read {:?} data",
                        all[j], all[i]
                    ),
                }
            }
        }
    }
}

#[test]
fn small_compress_buffers_are_errors() {
    let pages = real_pages(8);
    for c in compressors() {
        let mut ctx = c.context().unwrap();
        for page in &pages {
            let n = ctx.compress_buffered(page).unwrap().len();
            for len in [0, 1, n / 2, n - 1] {
                let mut out = vec![0u8; len];
                let err = ctx.compress(page, &mut out).unwrap_err();
                assert_eq!(
                    err,
                    Error::OutputTooSmall {
                        algorithm: c.algorithm(),
                        capacity: len
                    }
                );
            }
            let mut out = vec![0u8; n];
            assert_eq!(ctx.compress(page, &mut out).unwrap(), n);
        }
    }
}

#[test]
fn stateless_decompression_matches_the_contexts() {
    // Without a context where the decoder keeps no state, and with the same
    // result, bytes and error as the context, for good, cut, corrupt and
    // foreign input and wrong output sizes.
    let mut rng = Rng(17);
    for c in compressors() {
        let stateless = matches!(
            c.algorithm(),
            Algorithm::LzoRle
                | Algorithm::Lzo
                | Algorithm::Lz4
                | Algorithm::Lz4Hc
                | Algorithm::Lz4Flex
        );
        let mut ctx = c.context().unwrap();
        let mut inputs = Vec::new();
        for (_, z) in samples(&mut ctx) {
            let mut bad = z.clone();
            let i = rng.below(bad.len());
            bad[i] ^= 1 + rng.below(255) as u8;
            inputs.extend([z[..z.len() / 2].to_vec(), bad, z]);
        }
        inputs.push(random_bytes(5, 300));
        for src in &inputs {
            for len in [PAGE, PAGE - 1, PAGE + 1, 7] {
                let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
                let with_context = ctx.decompress(src, &mut a);
                match c.decompress_stateless(src, &mut b) {
                    None => assert!(!stateless, "{c:?} needs no context"),
                    Some(without) => {
                        assert!(stateless, "{c:?} decoded without its context");
                        assert_eq!(without, with_context, "{c:?}");
                        if with_context.is_ok() {
                            assert_eq!(a, b, "{c:?}");
                        }
                    }
                }
            }
        }
    }
}
