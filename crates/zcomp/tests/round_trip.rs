//! Round trips of real and synthetic data through every backend at a range
//! of levels, through all three compress calls, and from several threads.

mod common;

use common::{configurations, edge_inputs, real_pages, PAGE};
use zcomp::{Algorithm, Compressor, Context};

fn round_trip(ctx: &mut Context, input: &[u8]) -> usize {
    let c = ctx.compressor().clone();
    let label = format!("{c:?} on {} bytes", input.len());
    let mut compressed = Vec::new();
    let n = ctx.compress_to_vec(input, &mut compressed).expect(&label);
    assert_eq!(n, compressed.len(), "{label}");
    assert!(
        n <= c.compress_bound(input.len()),
        "{label}: {n} over the bound"
    );
    let mut back = vec![0xEEu8; input.len()];
    assert_eq!(
        ctx.decompress(&compressed, &mut back).expect(&label),
        input.len()
    );
    assert!(back == input, "{label}: data differs after the round trip");
    n
}

#[test]
fn real_pages_round_trip_at_every_level() {
    let pages = real_pages(96);
    for c in configurations() {
        let mut ctx = c.context().unwrap();
        let mut total = 0;
        for page in &pages {
            total += round_trip(&mut ctx, page);
        }
        // Real files compress, except where the setting gives up: deflate
        // level 0 stores, lz4 and zstd at extreme speed skip most matches.
        let gives_up = match c.algorithm() {
            Algorithm::Deflate => c.level() == 0,
            Algorithm::Lz4 => c.level() > 8,
            Algorithm::Zstd => c.level() < -1000,
            _ => false,
        };
        assert!(
            gives_up || total < pages.len() * PAGE,
            "{c:?}: {total} bytes for {} pages",
            pages.len()
        );
    }
}

#[test]
fn edge_inputs_round_trip_at_every_level() {
    let inputs = edge_inputs();
    for c in configurations() {
        let mut ctx = c.context().unwrap();
        for input in &inputs {
            round_trip(&mut ctx, input);
        }
    }
}

#[test]
fn zero_pages_shrink_and_random_pages_do_not() {
    let zero = vec![0u8; PAGE];
    let random = common::random_bytes(9, PAGE);
    for algorithm in Algorithm::ALL {
        let mut ctx = Compressor::with_defaults(algorithm).context().unwrap();
        assert!(round_trip(&mut ctx, &zero) < 64, "{algorithm}");
        assert!(round_trip(&mut ctx, &random) >= PAGE, "{algorithm}");
    }
}

#[test]
fn the_three_compress_calls_agree() {
    let pages = real_pages(16);
    for algorithm in Algorithm::ALL {
        let c = Compressor::with_defaults(algorithm);
        let mut ctx = c.context().unwrap();
        let mut buf = vec![0u8; c.compress_bound(PAGE)];
        let mut v = Vec::new();
        for page in &pages {
            let n = ctx.compress(page, &mut buf).unwrap();
            assert_eq!(
                ctx.compress_buffered(page).unwrap(),
                &buf[..n],
                "{algorithm}"
            );
            ctx.compress_to_vec(page, &mut v).unwrap();
            assert_eq!(v, &buf[..n], "{algorithm}");
        }
    }
}

#[test]
fn contexts_on_many_threads_share_one_compressor() {
    let pages = real_pages(32);
    for algorithm in Algorithm::ALL {
        let c = Compressor::with_defaults(algorithm);
        // Reference output from one context: every context compresses alike.
        let mut reference_ctx = c.context().unwrap();
        let reference: Vec<Vec<u8>> = pages
            .iter()
            .map(|p| reference_ctx.compress_buffered(p).unwrap().to_vec())
            .collect();
        std::thread::scope(|s| {
            for t in 0..4 {
                let c = c.clone();
                let (pages, reference) = (&pages, &reference);
                s.spawn(move || {
                    let mut ctx = c.context().unwrap();
                    let mut back = vec![0u8; PAGE];
                    for round in 0..4 {
                        for (i, page) in pages.iter().enumerate().skip((t + round) % 3) {
                            let z = ctx.compress_buffered(page).unwrap().to_vec();
                            assert_eq!(z, reference[i], "{algorithm} thread {t}");
                            ctx.decompress(&reference[i], &mut back).unwrap();
                            assert!(back == *page);
                        }
                    }
                });
            }
        });
    }
}

#[test]
fn a_context_moves_into_a_thread() {
    let c = Compressor::parse("zstd", "level=1").unwrap();
    let mut ctx = c.context().unwrap();
    let page = vec![3u8; PAGE];
    let z = ctx.compress_buffered(&page).unwrap().to_vec();
    let back = std::thread::spawn(move || {
        let mut back = vec![0u8; PAGE];
        ctx.decompress(&z, &mut back).unwrap();
        back
    })
    .join()
    .unwrap();
    assert_eq!(back, page);
}
