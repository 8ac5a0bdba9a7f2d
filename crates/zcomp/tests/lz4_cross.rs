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

fn inputs() -> Vec<Vec<u8>> {
    let mut v = real_pages(128);
    v.extend(edge_inputs());
    v
}

#[test]
fn lz4_flex_reads_every_liblz4_setting() {
    let inputs = inputs();
    let mut flex = Compressor::with_defaults(Algorithm::Lz4Flex)
        .context()
        .unwrap();
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
    let mut flex = Compressor::with_defaults(Algorithm::Lz4Flex)
        .context()
        .unwrap();
    let mut lz4 = Compressor::with_defaults(Algorithm::Lz4).context().unwrap();
    let mut hc = Compressor::with_defaults(Algorithm::Lz4Hc)
        .context()
        .unwrap();
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
        let mut ctx = Compressor::with_defaults(algorithm).context().unwrap();
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

/// Every 4 KiB page of `path` that exists, or nothing.
fn corpus_pages(path: &str) -> Vec<Vec<u8>> {
    std::fs::read(path).map_or_else(
        |_| Vec::new(),
        |d| d.chunks_exact(4096).map(<[u8]>::to_vec).collect(),
    )
}

/// The context keeps liblz4's state from call to call and resets it with
/// `LZ4_compress_fast_extState_fastReset`: its output is byte for byte what
/// liblz4's one-shot `LZ4_compress_fast` (a fresh state per call) writes,
/// at every acceleration, on real pages in any order, on the edge inputs
/// and, where they exist, on every page of the three corpora.
#[test]
fn a_kept_lz4_state_writes_what_a_fresh_one_does() {
    let mut inputs = inputs();
    // Small inputs after large ones and back: each call sees the state the
    // previous one left.
    inputs.extend(real_pages(16).iter().map(|p| p[..700].to_vec()));
    inputs.extend(real_pages(8));
    let corpora = ["linux256", "usr256", "heap256"]
        .map(|c| corpus_pages(&format!("/var/tmp/zmem-data/{c}.bin")));
    if corpora.iter().any(Vec::is_empty) {
        eprintln!("a corpus in /var/tmp/zmem-data is missing: checking the others only");
    }
    for level in [1, 2, 7, 65537] {
        let c = Compressor::parse("lz4", &format!("level={level}")).unwrap();
        let mut ctx = c.context().unwrap();
        let all = inputs.iter().chain(corpora.iter().flatten());
        let (mut pages, mut bytes) = (0usize, 0usize);
        for input in all {
            let fresh =
                lz4::block::compress(input, Some(lz4::block::CompressionMode::FAST(level)), false)
                    .unwrap();
            let kept = ctx.compress_buffered(input).unwrap();
            assert_eq!(
                kept,
                &fresh[..],
                "level {level}, a {}-byte input",
                input.len()
            );
            pages += 1;
            bytes += kept.len();
        }
        assert!(pages >= inputs.len() && bytes > 0);
    }
}
