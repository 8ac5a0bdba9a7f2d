//! lz4 (liblz4) and lz4-flex (lz4_flex) write the same block format: each
//! decompresses the other's output, for every lz4 and lz4hc level.

mod common;

use common::{configurations, edge_inputs, real_pages};
use zcomp::{Algorithm, Compressor, Context};

fn decode(ctx: &mut Context, z: &[u8], len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    ctx.decompress(z, &mut out).unwrap_or_else(|e| {
        panic!(
            "{:?} could not read {} bytes: {e}",
            ctx.algorithm(),
            z.len()
        )
    });
    out
}

/// A context of `algorithm` at its defaults.
fn context_of(algorithm: Algorithm) -> Context {
    Compressor::with_defaults(algorithm).context().unwrap()
}

fn inputs() -> Vec<Vec<u8>> {
    let mut v = real_pages(128);
    v.extend(edge_inputs());
    v
}

#[test]
fn lz4_flex_reads_every_liblz4_setting() {
    let inputs = inputs();
    let mut flex = context_of(Algorithm::Lz4Flex);
    let liblz4 = configurations()
        .into_iter()
        .filter(|c| matches!(c.algorithm(), Algorithm::Lz4 | Algorithm::Lz4Hc));
    for c in liblz4 {
        let mut ctx = c.context().unwrap();
        for input in &inputs {
            let z = ctx.compress_buffered(input).unwrap().to_vec();
            assert!(decode(&mut flex, &z, input.len()) == *input, "{c:?}");
        }
    }
}

#[test]
fn liblz4_reads_lz4_flex() {
    let inputs = inputs();
    let mut flex = context_of(Algorithm::Lz4Flex);
    let mut lz4 = context_of(Algorithm::Lz4);
    let mut hc = context_of(Algorithm::Lz4Hc);
    for input in &inputs {
        let z = flex.compress_buffered(input).unwrap().to_vec();
        assert!(decode(&mut lz4, &z, input.len()) == *input);
        assert!(decode(&mut hc, &z, input.len()) == *input);
    }
}

#[test]
fn both_compress_real_pages_about_equally() {
    let pages = real_pages(128);
    let total = |algorithm| {
        let mut ctx = context_of(algorithm);
        pages
            .iter()
            .map(|p| ctx.compress_buffered(p).unwrap().len())
            .sum::<usize>() as f64
    };
    let (lz4, flex) = (total(Algorithm::Lz4), total(Algorithm::Lz4Flex));
    assert!(
        (flex / lz4 - 1.0).abs() < 0.03,
        "lz4 {lz4} bytes, lz4-flex {flex}"
    );
}
