//! zmem's lzo and lzo-rle against the kernel's, page for page: each page is
//! written alone over page 0 of a hot-added kernel zram device (direct I/O,
//! so the write reaches zram), and the device's `compr_data_size` (the
//! size of that one page) must equal zcomp's compressed length of the same
//! page. Same-filled pages, which zram stores without compressing, are
//! skipped; pages the kernel stores raw (huge) must be the ones zcomp
//! compresses worst: one threshold must separate them from the rest.
//!
//! The pages: a synthetic set (zero runs at the start, middle and end,
//! literal runs of every length class, long matches at every distance a
//! page has, incompressible pages) and a seeded sample of 4096 pages of the
//! files under /usr/bin and /usr/lib. Without root or the zram module it
//! skips with a message.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use lab::kernel_zram::{KernelZram, PageBuffer};
use testkit::SplitMix64 as Rng;
use zcomp::Compressor;

const PAGE: usize = 4096;
/// mm_stat columns.
const COMPR_DATA_SIZE: usize = 1;
const SAME_PAGES: usize = 5;
const HUGE_PAGES: usize = 7;

/// Pages that exercise every instruction and every threshold of the format.
fn synthetic_pages() -> Vec<Vec<u8>> {
    let mut rng = Rng(0x1f0);
    let mut pages = Vec::new();
    let random = |rng: &mut Rng| {
        let mut p = vec![0u8; PAGE];
        rng.fill(&mut p);
        p
    };
    // Zero runs of many lengths at the start, in the middle and at the end
    // of random data and of four-letter text (runs of 4..2051 are one
    // instruction, longer ones two).
    for run in [4, 5, 8, 20, 21, 100, 2047, 2051, 2052, 3000, 4000, 4076] {
        for at in [0, 1, 5, (PAGE - run) / 2, PAGE - run - 1, PAGE - run] {
            let mut p = random(&mut rng);
            p[at..at + run].fill(0);
            pages.push(p);
            let mut p: Vec<u8> = (0..PAGE).map(|_| b"ACGT"[rng.below(4)]).collect();
            p[at..at + run].fill(0);
            pages.push(p);
        }
    }
    // Several zero runs among text-like bytes.
    for gaps in [2, 7, 31] {
        let mut p: Vec<u8> = (0..PAGE).map(|_| b"etaoin shrdlu"[rng.below(13)]).collect();
        for _ in 0..gaps {
            let len = 4 + rng.below(200);
            let at = rng.below(PAGE - len);
            p[at..at + len].fill(0);
        }
        pages.push(p);
    }
    // Literal runs of one length between repeats: every length class of a
    // literal run (1..3 in the state bits, 4..18 one byte, 19..273 a second
    // byte, longer ones more) and the 238-literal first-run limit.
    for lit in [
        1, 2, 3, 4, 5, 15, 16, 17, 18, 19, 20, 200, 238, 239, 273, 274, 300, 600, 1200,
    ] {
        let mut p = Vec::with_capacity(PAGE);
        let chunk = b"0123456789abcdef";
        while p.len() < PAGE {
            let mut l = vec![0u8; lit];
            rng.fill(&mut l);
            p.extend(l);
            p.extend_from_slice(chunk);
        }
        p.truncate(PAGE);
        pages.push(p);
    }
    // Matches of every length class at every distance a page has: a random
    // head repeated with period `dist`.
    for dist in [1, 2, 3, 4, 7, 8, 9, 33, 34, 64, 255, 256, 2048, 2049, 3000] {
        let mut p = vec![0u8; PAGE];
        rng.fill(&mut p[..dist]);
        for i in dist..PAGE {
            p[i] = p[i - dist];
        }
        // Break some matches so that their lengths vary.
        for _ in 0..rng.below(20) {
            let i = rng.below(PAGE);
            p[i] ^= 0x5a;
        }
        pages.push(p);
    }
    // Small alphabets: short matches everywhere, some zero runs.
    for alphabet in [
        &b"ab"[..],
        b"abcd",
        b"\0\0\0a",
        b"\0\x01\x02\x03\x04\x05\x06\x07",
    ] {
        pages.push(
            (0..PAGE)
                .map(|_| alphabet[rng.below(alphabet.len())])
                .collect(),
        );
    }
    // Incompressible pages, and nearly so.
    for k in 0..8 {
        let mut p = random(&mut rng);
        let rep = k * 64;
        if rep > 0 {
            let at = rng.below(PAGE - 2 * rep);
            p.copy_within(at..at + rep, at + rep);
        }
        pages.push(p);
    }
    pages
}

/// Regular files of the directories, sorted.
fn files() -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    for dir in ["/usr/bin", "/usr/lib", "/usr/lib/x86_64-linux-gnu"] {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in rd.flatten() {
            let path = e.path();
            if let Ok(m) = std::fs::metadata(&path) {
                if m.is_file() && m.len() >= PAGE as u64 {
                    out.push((path, m.len()));
                }
            }
        }
    }
    out.sort();
    out
}

/// `n` pages of system files, chosen with a seed: a file, then a page of it.
fn real_pages(n: usize, seed: u64) -> Vec<Vec<u8>> {
    let files = files();
    assert!(!files.is_empty(), "no files under /usr/bin or /usr/lib");
    let mut rng = Rng(seed);
    let mut pages = Vec::with_capacity(n);
    while pages.len() < n {
        let (path, len) = &files[rng.below(files.len())];
        let page = rng.below((*len / PAGE as u64) as usize) as u64;
        let mut buf = vec![0u8; PAGE];
        let Ok(f) = File::open(path) else { continue };
        if f.read_exact_at(&mut buf, page * PAGE as u64).is_ok() {
            pages.push(buf);
        }
    }
    pages
}

/// What the kernel did with one set of pages.
#[derive(Debug, Default)]
struct Tally {
    compared: usize,
    equal: usize,
    same_filled: usize,
    huge: usize,
    /// zcomp's largest size among pages the kernel compressed, and its
    /// smallest among pages the kernel stored raw.
    largest_compressed: usize,
    smallest_huge: Option<usize>,
    mismatches: Vec<(usize, u64, usize)>,
}

fn compare(dev: &KernelZram, comp: &str, pages: &[Vec<u8>]) -> Tally {
    let mut ctx = Compressor::parse(comp, "").unwrap().context().unwrap();
    let mut buf = PageBuffer::zeroed(PAGE);
    let mut tally = Tally::default();
    for (i, page) in pages.iter().enumerate() {
        buf.copy_from_slice(page);
        dev.write_range(&buf, 0..PAGE)
            .expect("direct write to zram");
        let stat = dev.mm_stat().expect("mm_stat");
        let ours = ctx.compress_buffered(page).unwrap().len();
        if stat[SAME_PAGES] == 1 {
            tally.same_filled += 1;
            continue;
        }
        if stat[HUGE_PAGES] == 1 {
            tally.huge += 1;
            tally.smallest_huge = Some(tally.smallest_huge.map_or(ours, |s| s.min(ours)));
            continue;
        }
        tally.compared += 1;
        tally.largest_compressed = tally.largest_compressed.max(ours);
        if stat[COMPR_DATA_SIZE] == ours as u64 {
            tally.equal += 1;
        } else {
            tally.mismatches.push((i, stat[COMPR_DATA_SIZE], ours));
        }
    }
    tally
}

#[test]
fn every_page_is_the_kernels_size() {
    let dev = match KernelZram::create("lzo-rle", 1 << 20) {
        Ok(dev) => dev,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let sets = [
        ("synthetic", synthetic_pages()),
        ("real", real_pages(4096, 0x5eed)),
    ];
    for comp in ["lzo-rle", "lzo"] {
        dev.reinit(comp, 1 << 20).expect("reinit the device");
        for (name, pages) in &sets {
            let t = compare(&dev, comp, pages);
            eprintln!(
                "{comp} {name}: {} pages, {} compared, {} equal, {} same-filled, {} huge \
                 (zcomp: largest kernel-compressed {}, smallest kernel-huge {:?})",
                pages.len(),
                t.compared,
                t.equal,
                t.same_filled,
                t.huge,
                t.largest_compressed,
                t.smallest_huge
            );
            assert!(
                t.mismatches.is_empty(),
                "{comp} {name}: (page, kernel, zcomp) differ: {:?}",
                &t.mismatches[..t.mismatches.len().min(20)]
            );
            assert_eq!(t.equal + t.same_filled + t.huge, pages.len());
            if let Some(smallest) = t.smallest_huge {
                assert!(
                    t.largest_compressed < smallest,
                    "{comp} {name}: no one threshold separates the kernel's huge pages"
                );
            }
            assert!(t.compared > pages.len() / 2, "{comp} {name}: {t:?}");
        }
    }
}
