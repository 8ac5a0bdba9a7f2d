//! Compress and decompress throughput, one thread, of zmem-lzo (lzo-rle and
//! lzo) and of the `lzo1x` crate at level 1, page by page (4 KiB) over real
//! data: the first MIB (default 64) MiB of FILE if one is given (such as
//! scripts/make-corpus's /var/tmp/zmem-data/linux256.bin), else of the files
//! under /usr/lib and /usr/bin in sorted order. Each figure is the best of five passes, in MB/s
//! of uncompressed data. It also checks that each decoder reads the other
//! encoder's streams.
//!
//! This program owns only the measurement; it is not part of zmem.

use std::hint::black_box;
use std::io::Read;
use std::path::PathBuf;
use std::time::Instant;

const PAGE: usize = 4096;
const PASSES: usize = 5;

fn real_data(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    for dir in ["/usr/lib/x86_64-linux-gnu", "/usr/lib", "/usr/bin"] {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in files {
            if out.len() >= len {
                return out;
            }
            if f.is_file() {
                if let Ok(file) = std::fs::File::open(&f) {
                    let want = (len - out.len()).min(2 << 20) as u64;
                    let _ = file.take(want).read_to_end(&mut out);
                }
            }
        }
    }
    out.truncate(len - len % PAGE);
    out
}

/// Seconds of CPU time this thread has used: unlike wall time, it does not
/// count the time other processes of a busy machine run instead.
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill in.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Best-of-PASSES MB/s of `f` over `bytes` bytes, by wall time, or by the
/// thread's CPU time with ZMEM_SPEED_CPU_TIME=1 (for a busy machine).
fn best(bytes: usize, mut f: impl FnMut()) -> f64 {
    let cpu = std::env::var_os("ZMEM_SPEED_CPU_TIME").is_some_and(|v| v == "1");
    let mut best = f64::MAX;
    for _ in 0..PASSES {
        let (t, c) = (Instant::now(), thread_cpu_seconds());
        f();
        let s = if cpu {
            thread_cpu_seconds() - c
        } else {
            t.elapsed().as_secs_f64()
        };
        best = best.min(s);
    }
    bytes as f64 / best / 1e6
}

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("MiB"))
        .unwrap_or(64);
    let data = match std::env::args().nth(2) {
        Some(file) => {
            let mut v = Vec::new();
            std::fs::File::open(&file)
                .expect("FILE")
                .take((mib as u64) << 20)
                .read_to_end(&mut v)
                .expect("FILE");
            v
        }
        None => real_data(mib << 20),
    };
    let data = &data[..data.len() - data.len() % PAGE];
    let pages: Vec<&[u8]> = data.chunks(PAGE).collect();
    let bytes = data.len();
    println!("{} pages of real data ({} MiB)", pages.len(), bytes >> 20);

    let mut c = lzo::Compressor::new();
    let mut buf = vec![0u8; lzo::compress_bound(PAGE)];
    let mut out = vec![0u8; PAGE];
    let ours = |c: &mut lzo::Compressor, v| -> Vec<Vec<u8>> {
        let mut buf = vec![0u8; lzo::compress_bound(PAGE)];
        pages
            .iter()
            .map(|p| {
                let n = c.compress(v, p, &mut buf).unwrap();
                buf[..n].to_vec()
            })
            .collect()
    };
    let rle = ours(&mut c, lzo::Variant::LzoRle);
    let plain = ours(&mut c, lzo::Variant::Lzo);
    let level1 = lzo1x::CompressLevel::new(1);
    let theirs: Vec<Vec<u8>> = pages.iter().map(|p| lzo1x::compress(p, level1)).collect();

    // Each decoder reads the other's streams.
    for (i, p) in pages.iter().enumerate() {
        assert_eq!(lzo::decompress(&theirs[i], &mut out), Ok(PAGE));
        assert!(out == *p);
        lzo1x::decompress(&plain[i], &mut out).expect("lzo1x reads zmem-lzo");
        assert!(out == *p);
    }

    let size = |v: &[Vec<u8>]| v.iter().map(Vec::len).sum::<usize>();
    let row = |name: &str, compressed: &[Vec<u8>], comp: f64, decomp: f64| {
        println!(
            "{name:<22} ratio {:.3}  compress {comp:>7.0} MB/s  decompress {decomp:>7.0} MB/s",
            bytes as f64 / size(compressed) as f64
        );
    };

    let mut comp_speed = |v| {
        best(bytes, || {
            for p in &pages {
                black_box(c.compress(v, black_box(p), &mut buf).unwrap());
            }
        })
    };
    let rle_c = comp_speed(lzo::Variant::LzoRle);
    let plain_c = comp_speed(lzo::Variant::Lzo);
    let theirs_c = best(bytes, || {
        for p in &pages {
            black_box(lzo1x::compress(black_box(p), level1));
        }
    });
    let mut decomp_speed = |streams: &[Vec<u8>]| {
        best(bytes, || {
            for z in streams {
                black_box(lzo::decompress(black_box(z), &mut out).unwrap());
            }
        })
    };
    let rle_d = decomp_speed(&rle);
    let plain_d = decomp_speed(&plain);
    let theirs_d = best(bytes, || {
        for z in &theirs {
            lzo1x::decompress(black_box(z), &mut out).unwrap();
            black_box(&out);
        }
    });
    row("zmem-lzo lzo-rle", &rle, rle_c, rle_d);
    row("zmem-lzo lzo", &plain, plain_c, plain_d);
    row("lzo1x 0.2.2 level 1", &theirs, theirs_c, theirs_d);
    println!(
        "compress: lzo-rle {:.2}x, lzo {:.2}x lzo1x level 1; decompress: {:.2}x, {:.2}x",
        rle_c / theirs_c,
        plain_c / theirs_c,
        rle_d / theirs_d,
        plain_d / theirs_d
    );
}
