//! zmem-lz4 against the kernel's own lib/lz4: both compress the same
//! inputs (corpus pages, inputs of every shape the encoders treat
//! differently, seeded random ones, as the fuzz target makes) with the same
//! settings, and every output must be equal, byte for byte, and decode to
//! its input.
//!
//! The inputs include the fuzz target's committed corpus.
//!
//! The oracle is tests/oracle/harness.c, compiled at test time with the
//! kernel's lib/lz4/lz4_compress.c and lz4hc_compress.c and its
//! include/linux/lz4.h (GPL-2.0 / BSD, never in zmem's tree) from
//! $ZMEM_KERNEL_SRC, else from the Linux 7.3 source scripts/install-deps
//! unpacks into ~/.cache/zmem/linux-source-7.3. Without either, each test
//! says so in one line and passes without checking. Corpus pages are read
//! from $ZMEM_DATA (scripts/make-corpus) where it has them, else from the
//! system's libraries, programs and headers: 4 MiB of each (1 MiB for
//! LZ4HC and the dictionaries), or $ZMEM_LZ4_MIB MiB of each.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use lz4k::{
    compress_bound, decompress, decompress_with_dict, Compressor, Dict, HcCompressor, HcDict,
    HcStream, Stream,
};
use testkit::kernel_oracle;
use testkit::SplitMix64 as Rng;

const PAGE: usize = 4096;

/// The oracle's binary, built once per test run; `None` (and one line on
/// stderr) without the kernel's sources.
fn harness() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let src = kernel_oracle::source_or_skip(
                "lib/lz4",
                &[
                    "lib/lz4/lz4_compress.c",
                    "lib/lz4/lz4hc_compress.c",
                    "include/linux/lz4.h",
                ],
            )?;
            Some(kernel_oracle::build(
                &src,
                &Path::new(env!("CARGO_TARGET_TMPDIR")).join("lz4-oracle"),
                "harness",
                &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/harness.c"),
                &["lib/lz4/lz4_compress.c", "lib/lz4/lz4hc_compress.c"],
                &["linux/lz4.h"],
                &[
                    "-fno-strict-aliasing",
                    "-DCONFIG_64BIT",
                    "-D__LITTLE_ENDIAN",
                ],
            ))
        })
        .as_deref()
}

/// One request to the oracle (see harness.c).
struct Req<'a> {
    kind: u8,
    level: i32,
    dict: &'a [u8],
    /// Each block with the output capacity offered.
    blocks: Vec<(usize, &'a [u8])>,
}

impl<'a> Req<'a> {
    /// One request of every input, each with its capacity from `caps`.
    fn all_blocks(
        kind: u8,
        level: i32,
        dict: &'a [u8],
        inputs: &'a [Vec<u8>],
        caps: &[usize],
    ) -> Req<'a> {
        Req {
            kind,
            level,
            dict,
            blocks: inputs.iter().zip(caps).map(|(p, &c)| (c, &p[..])).collect(),
        }
    }
}

/// The kernel's answers: per request, per block, its output (`None` where
/// it returned 0, `Some(vec![])` never) or -1 for a refused dictionary.
fn kernel(reqs: &[Req<'_>]) -> Vec<Vec<Result<Option<Vec<u8>>, ()>>> {
    let bin = harness().expect("harness");
    let mut input = Vec::new();
    for r in reqs {
        input.push(r.kind);
        input.extend(r.level.to_le_bytes());
        input.extend((r.dict.len() as u32).to_le_bytes());
        input.extend(r.dict);
        input.extend((r.blocks.len() as u32).to_le_bytes());
        for (cap, b) in &r.blocks {
            input.extend((*cap as u32).to_le_bytes());
            input.extend((b.len() as u32).to_le_bytes());
            input.extend(*b);
        }
    }
    let file = tempfile_with(&input);
    let out = Command::new(bin)
        .stdin(Stdio::from(
            std::fs::File::open(&file).expect("request file"),
        ))
        .output()
        .expect("run the oracle");
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "oracle: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut at = 0;
    let s = &out.stdout;
    reqs.iter()
        .map(|r| {
            r.blocks
                .iter()
                .map(|_| {
                    let ret = i32::from_le_bytes(s[at..at + 4].try_into().unwrap());
                    at += 4;
                    match ret {
                        -1 => Err(()),
                        0 => Ok(None),
                        n => {
                            let v = s[at..at + n as usize].to_vec();
                            at += n as usize;
                            Ok(Some(v))
                        }
                    }
                })
                .collect()
        })
        .collect()
}

fn tempfile_with(bytes: &[u8]) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let p =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lz4-req-{}-{n}", std::process::id()));
    std::fs::write(&p, bytes).expect("request file");
    p
}

/// Up to `len` bytes of the file, or nothing.
fn head(path: &Path, len: usize) -> Vec<u8> {
    let mut v = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(len as u64).read_to_end(&mut v);
    }
    v
}

/// Text: the system's C headers in name order.
fn text(len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir("/usr/include")
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    for f in files {
        if out.len() >= len {
            break;
        }
        out.extend(head(&f, len - out.len()));
    }
    out
}

/// Pages of real data: the three corpora of scripts/make-corpus where
/// $ZMEM_DATA (or /var/tmp/zmem-data) has them, and always system
/// binaries and text; `mib` MiB of each.
fn corpus_pages(mib: usize) -> Vec<Vec<u8>> {
    let mib = std::env::var("ZMEM_LZ4_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(mib);
    let len = mib << 20;
    let dir = std::env::var_os("ZMEM_DATA")
        .map_or_else(|| PathBuf::from("/var/tmp/zmem-data"), PathBuf::from);
    let mut sets = Vec::new();
    for stem in ["linux", "usr", "heap"] {
        for size in ["32", "256"] {
            let v = head(&dir.join(format!("{stem}{size}.bin")), len);
            if !v.is_empty() {
                sets.push(v);
                break;
            }
        }
    }
    sets.push(testkit::real_data(len));
    sets.push(text(len));
    sets.iter()
        .flat_map(|s| s.chunks_exact(PAGE).map(<[u8]>::to_vec))
        .collect()
}

/// Inputs of every shape: lengths around each threshold of both encoders
/// (13 bytes, 64 KiB + 11), runs, small alphabets, copies near and far.
fn shapes() -> Vec<Vec<u8>> {
    let mut rng = Rng(17);
    let mut v = Vec::new();
    for n in 0..40 {
        v.push(rng.bytes(n));
        v.push(vec![0u8; n]);
        v.push((0..n).map(|i| b"ab"[i % 2]).collect());
    }
    for n in [4095, 4096, 4097, 65535, 65546, 65547, 65548, 70000, 200_000] {
        let mut r = Rng(n as u64);
        v.push((0..n).map(|_| b"abcd\0\0\0\0"[r.below(8)]).collect());
        v.push(vec![7u8; n]);
    }
    for dist in [1, 2, 3, 4, 7, 8, 15, 16, 100, 4000, 65535, 65536, 70000] {
        for len in [4, 5, 18, 19, 270, 271, 300, 1000, 70000] {
            v.push(rng.with_copy(dist, len, 30));
        }
    }
    v
}

/// Seeded random inputs as the fuzz target makes them: pieces of noise,
/// runs and copies of earlier pieces, up to 20 KiB.
fn random_inputs(seed: u64, count: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed);
    (0..count)
        .map(|_| {
            let want = rng.below(20_000);
            let mut p = Vec::new();
            while p.len() < want {
                let n = 1 + rng.below(300);
                match rng.below(4) {
                    0 => p.extend(rng.bytes(n)),
                    1 => p.extend(std::iter::repeat_n(rng.next_u64() as u8, n)),
                    _ if !p.is_empty() => {
                        let from = rng.below(p.len());
                        for i in 0..n {
                            p.push(p[from + i % (p.len() - from)]);
                        }
                    }
                    _ => p.extend((0..n).map(|_| b"xyz"[rng.below(3)])),
                }
            }
            p
        })
        .collect()
}

fn check(
    what: &str,
    i: usize,
    ours: Result<usize, lz4k::Error>,
    buf: &[u8],
    theirs: &Result<Option<Vec<u8>>, ()>,
) {
    match (ours, theirs) {
        (Ok(n), Ok(Some(k))) => assert!(
            buf[..n] == k[..],
            "{what} #{i}: {} bytes, the kernel's {}",
            n,
            k.len()
        ),
        (Err(_), Ok(None)) => {}
        (o, k) => panic!(
            "{what} #{i}: ours {o:?}, the kernel's {:?}",
            k.as_ref().map(|k| k.as_ref().map(Vec::len))
        ),
    }
}

/// Capacities: the bound, and for every third input one that may be too
/// small (the kernel's limited-output checks).
fn caps(inputs: &[Vec<u8>], rng: &mut Rng) -> Vec<usize> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let bound = compress_bound(p.len());
            if i % 3 == 2 {
                rng.below(bound + 1)
            } else {
                bound
            }
        })
        .collect()
}

/// One request per input, of one block with its capacity from `caps`,
/// compressed as `kind` at `level` with no dictionary.
fn one_block_each<'a>(inputs: &'a [Vec<u8>], caps: &[usize], kind: u8, level: i32) -> Vec<Req<'a>> {
    inputs
        .iter()
        .zip(caps)
        .map(|(p, &cap)| Req {
            kind,
            level,
            dict: &[],
            blocks: vec![(cap, p)],
        })
        .collect()
}

/// `compressed` decompresses to exactly `p`.
fn assert_decompresses_to(compressed: &[u8], p: &[u8], what: &str) {
    let mut back = vec![0u8; p.len()];
    assert_eq!(decompress(compressed, &mut back), Ok(p.len()), "{what}");
    assert!(back == p, "{what}");
}

/// The fuzz target's committed corpus (fuzz/corpus/lz4), whole files.
fn fuzz_corpus() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/lz4");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    let v: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(f).expect("corpus file"))
        .collect();
    assert!(!v.is_empty(), "no fuzz corpus in {}", dir.display());
    v
}

fn all_inputs() -> Vec<Vec<u8>> {
    let mut v = corpus_pages(4);
    v.extend(shapes());
    v.extend(fuzz_corpus());
    v.extend(random_inputs(5, 600));
    v
}

testkit::oracle_test!(
    harness,
    fn fast_equals_the_kernel() {
        let inputs = all_inputs();
        let mut rng = Rng(1);
        let caps = caps(&inputs, &mut rng);
        let mut c = Compressor::new();
        for acc in [1, 2, 7, 65537, 1 << 26, 0, -3] {
            let reqs = one_block_each(&inputs, &caps, 0, acc);
            let theirs = kernel(&reqs);
            let mut equal = 0;
            for (i, (r, k)) in reqs.iter().zip(&theirs).enumerate() {
                let (cap, p) = r.blocks[0];
                let mut buf = vec![0u8; cap];
                let ours = c.compress_fast(p, &mut buf, acc);
                check(&format!("fast acceleration {acc}"), i, ours, &buf, &k[0]);
                // From 2^26 on, the kernel's `acceleration << 6` wraps to a
                // search step of 0, which finds each position as its own match
                // at offset 0: no decoder reads that (zram takes such a level
                // and stores pages it cannot read back); the bytes are equal
                // all the same.
                if let (Ok(n), true) = (ours, acc < 1 << 26) {
                    assert_decompresses_to(&buf[..n], p, &format!("acceleration {acc} #{i}"));
                    equal += 1;
                }
            }
            if acc < 1 << 26 {
                assert!(
                    equal > inputs.len() / 2,
                    "acceleration {acc}: only {equal} compressed"
                );
            }
        }
    }
);

testkit::oracle_test!(
    harness,
    fn hc_equals_the_kernel() {
        let pages = corpus_pages(1);
        let mut inputs: Vec<Vec<u8>> = pages.into_iter().step_by(2).collect();
        inputs.extend(shapes());
        inputs.extend(fuzz_corpus());
        inputs.extend(random_inputs(6, 200));
        let mut rng = Rng(2);
        let caps = caps(&inputs, &mut rng);
        let mut c = HcCompressor::new();
        for level in [9, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 17, 0] {
            let reqs = one_block_each(&inputs, &caps, 2, level);
            let theirs = kernel(&reqs);
            for (i, (r, k)) in reqs.iter().zip(&theirs).enumerate() {
                let (cap, p) = r.blocks[0];
                let mut buf = vec![0u8; cap];
                let ours = c.compress(p, &mut buf, level);
                check(&format!("hc level {level}"), i, ours, &buf, &k[0]);
                if let Ok(n) = ours {
                    assert_decompresses_to(&buf[..n], p, &format!("hc level {level} #{i}"));
                }
            }
        }
    }
);

/// Dictionaries: usable sizes (8 bytes to 64 KiB) cut from the corpus, and
/// sizes zram refuses.
fn dicts(pages: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let flat: Vec<u8> = pages.iter().step_by(7).flatten().copied().collect();
    let mut v: Vec<Vec<u8>> = [
        1usize, 3, 4, 7, 8, 9, 100, 4096, 30_000, 65_535, 65_536, 65_537, 100_000,
    ]
    .iter()
    .map(|&n| flat[..n.min(flat.len())].to_vec())
    .collect();
    v.push(vec![0u8; 65_536]);
    v
}

testkit::oracle_test!(
    harness,
    fn dictionaries_equal_the_kernel() {
        let pages = corpus_pages(1);
        let mut inputs: Vec<Vec<u8>> = pages.iter().step_by(3).cloned().collect();
        inputs.extend(random_inputs(7, 100));
        inputs.extend(shapes().into_iter().step_by(5));
        let mut rng = Rng(3);
        let caps = caps(&inputs, &mut rng);
        let mut fast = Compressor::new();
        let mut hc = HcCompressor::new();
        for dict in dicts(&pages) {
            for (kind, level) in [(1u8, 1), (1, 4), (3, 9), (3, 2), (3, 16)] {
                let req = Req::all_blocks(kind, level, &dict, &inputs, &caps);
                let theirs = &kernel(std::slice::from_ref(&req))[0];
                let what = format!("kind {kind} level {level} dictionary of {}", dict.len());
                let fd = Dict::new(&dict);
                let hd = HcDict::new(&dict);
                let (accepted, kept) = if kind == 1 {
                    (fd.accepted_by_zram(), fd.bytes().to_vec())
                } else {
                    (hd.accepted_by_zram(), hd.bytes().to_vec())
                };
                for (i, (cap, p)) in req.blocks.iter().enumerate() {
                    if !accepted {
                        assert_eq!(theirs[i], Err(()), "{what}: the kernel took it");
                        continue;
                    }
                    let mut buf = vec![0u8; *cap];
                    let ours = if kind == 1 {
                        fast.compress_fast_dict(&fd, p, &mut buf, level)
                    } else {
                        hc.compress_dict(&hd, p, &mut buf, level)
                    };
                    check(&what, i, ours, &buf, &theirs[i]);
                    if let Ok(n) = ours {
                        let mut back = vec![0u8; p.len()];
                        assert_eq!(
                            decompress_with_dict(&buf[..n], &mut back, &kept),
                            Ok(p.len()),
                            "{what} #{i}"
                        );
                        assert!(back == *p, "{what} #{i}");
                    }
                }
            }
        }
    }
);

testkit::oracle_test!(
    harness,
    fn streams_equal_the_kernel() {
        let pages = corpus_pages(1);
        let mut blocks: Vec<Vec<u8>> = pages.iter().step_by(5).take(60).cloned().collect();
        blocks.extend(random_inputs(8, 40));
        let mut r = Rng(9);
        blocks.push((0..200_000).map(|_| b"abcd\0\0\0\0"[r.below(8)]).collect());
        let mut rng = Rng(4);
        let caps = caps(&blocks, &mut rng);
        for dict in [
            Vec::new(),
            pages[1].clone(),
            pages.iter().take(20).flatten().copied().collect(),
        ] {
            for (kind, level) in [(4u8, 1), (4, 3), (5, 9), (5, 4)] {
                let req = Req::all_blocks(kind, level, &dict, &blocks, &caps);
                let theirs = &kernel(std::slice::from_ref(&req))[0];
                let what = format!(
                    "stream kind {kind} level {level} dictionary of {}",
                    dict.len()
                );
                let mut fast = Stream::new();
                let mut hc = HcStream::new(level);
                if kind == 4 {
                    fast.load_dict(&dict);
                } else if !dict.is_empty() {
                    hc.load_dict(&dict);
                }
                for (i, (cap, p)) in req.blocks.iter().enumerate() {
                    let mut buf = vec![0u8; *cap];
                    let ours = if kind == 4 {
                        fast.compress_fast_continue(p, &mut buf, level)
                    } else {
                        hc.compress_continue(p, &mut buf)
                    };
                    check(&what, i, ours, &buf, &theirs[i]);
                }
            }
        }
    }
);
