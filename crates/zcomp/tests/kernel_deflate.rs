//! deflate as kernel-compat mode runs it (the C zlib at the kernel's
//! memLevel) against the kernel's own lib/zlib_deflate, set up as zram's
//! deflate backend sets it up: the same pages (real ones from the machine,
//! and inputs of every shape) at every level from 1 to 9 and every window
//! must give the same bytes, and decode to their input. Default mode's
//! zlib-rs is shown to differ, so the comparison can fail.
//!
//! The oracle is tests/oracle/deflate.c, compiled at test time
//! (`testkit::kernel_oracle`) with the kernel's lib/zlib_deflate/deflate.c
//! and deftree.c and its include/linux/zlib.h, zutil.h and zconf.h
//! (GPL-2.0 / zlib licence, never in zmem's tree) from $ZMEM_KERNEL_SRC,
//! else from the Linux 7.3 source scripts/install-deps unpacks into
//! ~/.cache/zmem/linux-source-7.3.
//! Without either, each test says so in one line and passes without
//! checking.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use common::{edge_inputs, real_pages, PAGE};
use testkit::kernel_oracle;
use zcomp::{Compressor, Encoder};

/// The oracle's binary, built once per test run; `None` (and one line on
/// stderr) without the kernel's sources.
fn oracle() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let sources = ["lib/zlib_deflate/deflate.c", "lib/zlib_deflate/deftree.c"];
            let headers = ["linux/zlib.h", "linux/zutil.h", "linux/zconf.h"];
            let needed: Vec<String> = sources
                .iter()
                .map(|s| s.to_string())
                .chain(headers.iter().map(|h| format!("include/{h}")))
                .collect();
            let needed: Vec<&str> = needed.iter().map(String::as_str).collect();
            let src = kernel_oracle::source_or_skip("lib/zlib_deflate", &needed)?;
            Some(kernel_oracle::build(
                &src,
                &Path::new(env!("CARGO_TARGET_TMPDIR")).join("deflate-oracle"),
                "deflate",
                &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/deflate.c"),
                &sources,
                &headers,
                &[],
            ))
        })
        .as_deref()
}

/// The kernel's output for each block at `level` and 2^`bits` (`None`
/// where it did not finish within `cap` bytes).
fn kernel(level: i32, bits: u8, cap: usize, blocks: &[Vec<u8>]) -> Vec<Option<Vec<u8>>> {
    let bin = oracle().expect("oracle");
    let mut input = Vec::new();
    input.extend(level.to_le_bytes());
    input.extend(u32::from(bits).to_le_bytes());
    input.extend((blocks.len() as u32).to_le_bytes());
    for b in blocks {
        input.extend((cap as u32).to_le_bytes());
        input.extend((b.len() as u32).to_le_bytes());
        input.extend(b);
    }
    let mut child = Command::new(bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the oracle");
    let mut stdin = child.stdin.take().expect("oracle stdin");
    let feeder = std::thread::spawn(move || stdin.write_all(&input).expect("feed the oracle"));
    let out = child.wait_with_output().expect("oracle output");
    feeder.join().expect("feeder");
    assert!(
        out.status.success(),
        "oracle: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = &out.stdout;
    let mut at = 0;
    let answers: Vec<Option<Vec<u8>>> = blocks
        .iter()
        .map(|_| {
            let n = i32::from_le_bytes(s[at..at + 4].try_into().unwrap());
            at += 4;
            (n >= 0).then(|| {
                let bytes = s[at..at + n as usize].to_vec();
                at += n as usize;
                bytes
            })
        })
        .collect();
    assert_eq!(at, s.len(), "the oracle's answer has bytes left over");
    answers
}

fn compressor(level: i32, bits: u8, encoder: Encoder) -> Compressor {
    Compressor::parse("deflate", &format!("level={level} deflate.winbits={bits}"))
        .expect("valid settings")
        .with_encoder(encoder)
}

/// The pages compared: real ones and the edge cases of the other tests.
fn inputs() -> Vec<Vec<u8>> {
    let mut v = real_pages(160);
    v.extend(edge_inputs());
    v
}

testkit::oracle_test!(
    oracle,
    fn kernel_compat_deflate_is_the_kernels_at_every_level_and_window() {
        let inputs = inputs();
        let mut settings: Vec<(i32, u8)> =
            (1..=9).flat_map(|l| [(l, 9), (l, 11), (l, 15)]).collect();
        settings.extend((10..=14).map(|b| (6, b)));
        let mut back = vec![0u8; 0];
        for (level, bits) in settings {
            let comp = compressor(level, bits, Encoder::Kernel);
            assert!(comp.implementation().starts_with("zlib "));
            let mut ctx = comp.context().unwrap();
            // zram's compression buffer: two pages, as big as any input here
            // needs.
            let cap = inputs
                .iter()
                .map(|p| comp.compress_bound(p.len()))
                .max()
                .unwrap();
            let theirs = kernel(level, bits, cap, &inputs);
            for (i, (p, k)) in inputs.iter().zip(&theirs).enumerate() {
                let ours = ctx.compress_buffered(p).unwrap().to_vec();
                let k = k
                    .as_ref()
                    .unwrap_or_else(|| panic!("the kernel failed on input {i}"));
                assert!(
                    ours == *k,
                    "level {level} window {bits} input {i} ({} bytes): ours {} bytes, the kernel's {}",
                    p.len(),
                    ours.len(),
                    k.len()
                );
                back.resize(p.len(), 0);
                assert_eq!(ctx.decompress(&ours, &mut back).unwrap(), p.len());
                assert!(back == *p);
            }
        }
    }
);

testkit::oracle_test!(
    oracle,
    fn default_modes_zlib_rs_is_not_the_kernels_but_reads_it() {
        let inputs = real_pages(160);
        let theirs = kernel(6, 11, 2 * PAGE, &inputs);
        let fast = compressor(6, 11, Encoder::Fastest);
        assert_eq!(fast.implementation(), "zlib-rs");
        let mut ctx = fast.context().unwrap();
        let mut differ = 0;
        let mut back = vec![0u8; PAGE];
        for (p, k) in inputs.iter().zip(&theirs) {
            let k = k.as_ref().expect("a page fits in two");
            if ctx.compress_buffered(p).unwrap() != &k[..] {
                differ += 1;
            }
            // Either encoder's data reads with the other's decoder.
            assert_eq!(ctx.decompress(k, &mut back).unwrap(), PAGE);
            assert!(back == *p);
        }
        assert!(
            differ > inputs.len() / 4,
            "zlib-rs gave the kernel's bytes on {} of {} pages: the comparison would not tell them apart",
            inputs.len() - differ,
            inputs.len()
        );
    }
);

testkit::oracle_test!(
    oracle,
    fn level_0_differs_only_where_zram_stores_the_page_whole() {
        // zlib 1.2.11 split stored blocks differently from zlib 1.1's (the
        // kernel's); a level-0 page is always longer than a page, so zram
        // keeps it uncompressed (a huge page) with either.
        let inputs = real_pages(16);
        let theirs = kernel(0, 11, 2 * PAGE, &inputs);
        let mut ctx = compressor(0, 11, Encoder::Kernel).context().unwrap();
        let mut back = vec![0u8; PAGE];
        for (p, k) in inputs.iter().zip(&theirs) {
            let k = k.as_ref().expect("a page fits in two");
            let ours = ctx.compress_buffered(p).unwrap().len();
            assert!(
                ours > PAGE && k.len() > PAGE,
                "{ours} and {} bytes",
                k.len()
            );
            assert_eq!(ctx.decompress(k, &mut back).unwrap(), PAGE);
            assert!(back == *p);
        }
    }
);
