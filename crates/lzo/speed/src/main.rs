//! Compress and decompress throughput, one thread, of zmem-lzo (lzo-rle and
//! lzo), of the `lzo1x` crate at level 1 and (when build.rs found a kernel
//! source) of the Linux kernel's own lib/lzo C code built in user space,
//! page by page (4 KiB) over real data: the first MIB (default 64) MiB of
//! FILE if one is given (such as scripts/make-corpus's
//! /var/tmp/zmem-data/linux256.bin), else testkit's `real_data` (the files
//! under /usr/lib and /usr/bin in sorted order). Each figure is the best of
//! five passes, in MB/s of uncompressed data. It also checks that each
//! decoder reads the other encoders' streams, and that zmem-lzo's streams
//! equal the kernel's byte for byte. ZMEM_SPEED_CPU_TIME=1 times by the
//! thread's CPU time instead of wall time; ZMEM_SPEED_KERNEL_ONLY=1 runs
//! only the timing against the kernel's C (after the same checks), for
//! quick A/B runs.
//!
//! This program owns only the measurement; it is not part of zmem.

use std::hint::black_box;
use std::io::Read;
use std::time::Instant;

const PAGE: usize = 4096;

/// The kernel's lib/lzo, renamed by build.rs (`kernel_` prefix).
#[cfg(kernel_lzo)]
mod kernel {
    extern "C" {
        fn kernel_lzo1x_decompress_safe(
            src: *const u8,
            src_len: usize,
            dst: *mut u8,
            dst_len: *mut usize,
        ) -> i32;
        fn kernel_lzorle1x_1_compress(
            src: *const u8,
            src_len: usize,
            dst: *mut u8,
            dst_len: *mut usize,
            wrkmem: *mut u8,
        ) -> i32;
    }

    /// The kernel's decoder: the decoded length, or its error code.
    pub fn decompress(src: &[u8], dst: &mut [u8]) -> Result<usize, i32> {
        let mut len = dst.len();
        // SAFETY: both pointers and lengths come from live slices; the
        // kernel's safe decoder reads and writes only within them.
        let rc = unsafe {
            kernel_lzo1x_decompress_safe(src.as_ptr(), src.len(), dst.as_mut_ptr(), &mut len)
        };
        if rc == 0 {
            Ok(len)
        } else {
            Err(rc)
        }
    }

    /// The kernel's lzo-rle compressor (`wrkmem` is its 16 KiB hash
    /// table); `dst` must hold lzo1x_worst_compress(src.len()) bytes.
    pub fn compress_rle(src: &[u8], dst: &mut [u8], wrkmem: &mut [u8; 16384]) -> usize {
        assert!(dst.len() >= lzo::compress_bound(src.len()));
        let mut len = dst.len();
        // SAFETY: the slices are live; `dst` has the worst-case room the
        // kernel's compressor assumes (checked above) and `wrkmem` its
        // LZO1X_1_MEM_COMPRESS bytes.
        let rc = unsafe {
            kernel_lzorle1x_1_compress(
                src.as_ptr(),
                src.len(),
                dst.as_mut_ptr(),
                &mut len,
                wrkmem.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0, "kernel lzorle1x_1_compress");
        len
    }
}
const PASSES: usize = 5;

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

/// Best-of-`passes` MB/s of `f` over `bytes` bytes, by wall time, or by
/// the thread's CPU time with ZMEM_SPEED_CPU_TIME=1 (for a busy machine).
fn best_of(passes: usize, bytes: usize, mut f: impl FnMut()) -> f64 {
    let cpu = std::env::var_os("ZMEM_SPEED_CPU_TIME").is_some_and(|v| v == "1");
    let mut best = f64::MAX;
    for _ in 0..passes {
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

/// Best-of-PASSES MB/s of `f` and of `g`, timed as `best_of` times, the two
/// run alternately (f, g, f, g, ...) so that a busy machine slows both.
#[cfg(kernel_lzo)]
fn best_pair(bytes: usize, mut f: impl FnMut(), mut g: impl FnMut()) -> (f64, f64) {
    let (mut bf, mut bg) = (0f64, 0f64);
    for _ in 0..PASSES {
        bf = bf.max(best_of(1, bytes, &mut f));
        bg = bg.max(best_of(1, bytes, &mut g));
    }
    (bf, bg)
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
        None => testkit::real_data(mib << 20),
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

    // ZMEM_SPEED_KERNEL_ONLY=1: only the pass-for-pass timing against the
    // kernel's C (the checks above still run), for quick A/B runs.
    let kernel_only = std::env::var_os("ZMEM_SPEED_KERNEL_ONLY").is_some_and(|v| v == "1");
    let passes = if kernel_only { 0 } else { PASSES };
    let mut comp_speed = |v| {
        best_of(passes, bytes, || {
            for p in &pages {
                black_box(c.compress(v, black_box(p), &mut buf).unwrap());
            }
        })
    };
    let rle_c = comp_speed(lzo::Variant::LzoRle);
    let plain_c = comp_speed(lzo::Variant::Lzo);
    let theirs_c = best_of(passes, bytes, || {
        for p in &pages {
            black_box(lzo1x::compress(black_box(p), level1));
        }
    });
    let mut decomp_speed = |streams: &[Vec<u8>]| {
        best_of(passes, bytes, || {
            for z in streams {
                black_box(lzo::decompress(black_box(z), &mut out).unwrap());
            }
        })
    };
    let rle_d = decomp_speed(&rle);
    let plain_d = decomp_speed(&plain);
    let theirs_d = best_of(passes, bytes, || {
        for z in &theirs {
            lzo1x::decompress(black_box(z), &mut out).unwrap();
            black_box(&out);
        }
    });
    #[cfg(kernel_lzo)]
    let kernel_row = {
        // The kernel's streams equal zmem-lzo's byte for byte, and each
        // decoder reads the other's.
        let mut wrk = Box::new([0u8; 16384]);
        let mut kbuf = vec![0u8; lzo::compress_bound(PAGE)];
        for (i, p) in pages.iter().enumerate() {
            let n = kernel::compress_rle(p, &mut kbuf, &mut wrk);
            assert!(kbuf[..n] == rle[i][..], "page {i}: kernel's stream differs");
            assert_eq!(kernel::decompress(&rle[i], &mut out), Ok(PAGE));
            assert!(out == *p);
            assert_eq!(kernel::decompress(&plain[i], &mut out), Ok(PAGE));
            assert!(out == *p);
        }
        // Timed pass for pass against zmem-lzo's lzo-rle (zmem-lzo, then
        // the kernel, five times), so that both see the same machine.
        let kc = best_pair(
            bytes,
            || {
                for p in &pages {
                    black_box(
                        c.compress(lzo::Variant::LzoRle, black_box(p), &mut buf)
                            .unwrap(),
                    );
                }
            },
            || {
                for p in &pages {
                    black_box(kernel::compress_rle(black_box(p), &mut kbuf, &mut wrk));
                }
            },
        );
        let mut out2 = vec![0u8; PAGE];
        let kd = best_pair(
            bytes,
            || {
                for z in &rle {
                    black_box(lzo::decompress(black_box(z), &mut out).unwrap());
                }
            },
            || {
                for z in &rle {
                    black_box(kernel::decompress(black_box(z), &mut out2).unwrap());
                }
            },
        );
        (kc, kd)
    };
    if !kernel_only {
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
    #[cfg(kernel_lzo)]
    {
        let ((zc, kc), (zd, kd)) = kernel_row;
        row("kernel lib/lzo lzo-rle", &rle, kc, kd);
        println!(
            "against the kernel's C, timed pass for pass: lzo-rle compress {zc:.0} / {kc:.0} = {:.2}x, decompress {zd:.0} / {kd:.0} = {:.2}x",
            zc / kc,
            zd / kd
        );
    }
}
