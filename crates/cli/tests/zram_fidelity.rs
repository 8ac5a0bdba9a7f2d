//! Fidelity against the kernel's zram: the same pages, discards and
//! compaction on a kernel zram device and on a kernel-compat store
//! (`zmem replay`), with mm_stat compared after each stage: lz4 (to the
//! byte on synthetic pages, within liblz4's version differences on real
//! data), and lzo-rle and lzo (to the byte on real data).
//!
//! Runs only as root where /sys/class/zram-control exists and the kernel's
//! zram offers the compressor; skips (with a message) elsewhere. It creates its own
//! device with hot_add, never touches zram0, never enables swap, and
//! removes the device at the end, even when an assertion fails.

mod common;
mod serve_common;

use std::fs;
use std::path::{Path, PathBuf};

use common::kernel_compat_replay;
use lab::kernel_zram::{KernelZram, PageBuffer};

const PAGE: usize = 4096;

/// mm_stat's columns in the kernel's order: the keys of the JSON report's
/// `mm_stat`.
const MM_STAT: [&str; 9] = zram::MM_STAT_COLUMNS;

/// mm_stat columns the real-data test compares (indexes into the kernel's
/// line).
const COMPR: usize = 1;
const USED: usize = 2;
const SAME: usize = 5;

struct Stages {
    ours: Vec<serde_json::Value>,
    kernel: Vec<Vec<u64>>,
}

/// Runs the same fill, seeded half discard and compact on both sides, with
/// the compressor `comp`.
fn run_both(file: &Path, comp: &str) -> Option<Stages> {
    let len = fs::metadata(file).unwrap().len();
    let bytes = len.div_ceil(PAGE as u64) * PAGE as u64;
    let dev = match KernelZram::create(comp, bytes) {
        Ok(d) => d,
        Err(why) => {
            eprintln!("skipping the kernel zram comparison: {why}");
            return None;
        }
    };
    let tmp = tempfile::tempdir().unwrap();
    let discards = tmp.path().join("discards.txt");
    let report = kernel_compat_replay(file, comp, &discards, &[]);
    let ours: Vec<serde_json::Value> = report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["results"][0]["mm_stat"].clone())
        .collect();
    let pages: Vec<u64> = fs::read_to_string(&discards)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let mut kernel = Vec::new();
    // The last page padded with zeros, as replay pads it.
    let mut input = PageBuffer::zeroed(bytes as usize);
    input[..len as usize].copy_from_slice(&fs::read(file).unwrap());
    dev.write_all(&input).unwrap();
    kernel.push(dev.mm_stat().unwrap());
    dev.discard_pages(&pages, PAGE).unwrap();
    kernel.push(dev.mm_stat().unwrap());
    dev.set("compact", "1").unwrap();
    kernel.push(dev.mm_stat().unwrap());
    Some(Stages { ours, kernel })
}

/// Column `i` of a JSON `mm_stat`.
fn col(v: &serde_json::Value, i: usize) -> u64 {
    v[MM_STAT[i]].as_u64().unwrap()
}

/// Pages of k random bytes followed by zeros, k drawn per page: lz4's
/// output for them is the same under every lz4 version.
fn synthetic(path: &Path, pages: usize) {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut data = vec![0u8; pages * PAGE];
    for page in data.chunks_exact_mut(PAGE) {
        // One page in 16 is all zeros (same-filled); the rest have k
        // random bytes, 1 <= k <= PAGE, so every class and huge pages occur.
        let r = next();
        let k = if r % 16 == 0 {
            0
        } else {
            1 + (r >> 8) as usize % PAGE
        };
        for b in &mut page[..k] {
            *b = next() as u8;
        }
    }
    fs::write(path, data).unwrap();
}

#[test]
fn synthetic_pages_match_the_kernel_to_the_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("synthetic.bin");
    synthetic(&file, 8192);
    let stages = run_both(&file, "lz4");
    let Some(Stages { ours, kernel }) = stages else {
        return;
    };
    assert_every_column_equal("lz4", &ours, &kernel);
}

/// Panics unless each of the three stages (fill, discard, compact) gave
/// zmem's `mm_stat` (`ours`, JSON) every column of the kernel's: the same
/// pages, discards and compaction give the kernel's numbers exactly.
fn assert_every_column_equal(label: &str, ours: &[serde_json::Value], kernel: &[Vec<u64>]) {
    assert_eq!((ours.len(), kernel.len()), (3, 3));
    for (stage, (o, k)) in ["fill", "discard", "compact"]
        .iter()
        .zip(ours.iter().zip(kernel))
    {
        eprintln!("{label} {stage}: zmem {o}\n{label} {stage}: kernel mm_stat {k:?}");
        for (i, name) in MM_STAT.iter().enumerate() {
            assert_eq!(
                col(o, i),
                k[i],
                "{label} {stage}: {name}: zmem {o} vs kernel {k:?}"
            );
        }
    }
}

/// Real data: about 32 MiB of the system's binaries (and the Linux source
/// slice, when the corpus has been made).
#[test]
fn real_data_is_within_the_lz4_version_tolerance() {
    let mut inputs: Vec<(PathBuf, bool)> = Vec::new();
    let linux = Path::new("/var/tmp/zmem-data/linux256.bin");
    if linux.exists() {
        inputs.push((linux.to_path_buf(), false));
    }
    let tmp = tempfile::tempdir().unwrap();
    let bins = tmp.path().join("usr-bin.bin");
    usr_bin_cut(&bins, 32 << 20);
    inputs.push((bins.clone(), true));
    for (file, _) in &inputs {
        let Some(Stages { ours, kernel }) = run_both(file, "lz4") else {
            break;
        };
        let rel = |a: u64, b: u64| (a as f64 - b as f64).abs() / (b.max(1) as f64);
        assert_eq!((ours.len(), kernel.len()), (3, 3));
        for (s, (o, k)) in ["fill", "discard", "compact"]
            .iter()
            .zip(ours.iter().zip(&kernel))
        {
            let used_tol = if *s == "fill" { 0.001 } else { 0.005 };
            let (c, u) = (rel(col(o, COMPR), k[COMPR]), rel(col(o, USED), k[USED]));
            eprintln!(
                "{}: {s}: compr diff {:.4}%, used diff {:.4}%",
                file.display(),
                c * 100.0,
                u * 100.0
            );
            assert!(
                c <= 0.0001,
                "{}: {s}: compr_data_size {} vs kernel {}",
                file.display(),
                col(o, COMPR),
                k[COMPR]
            );
            assert!(
                u <= used_tol,
                "{}: {s}: mem_used_total {} vs kernel {}",
                file.display(),
                col(o, USED),
                k[USED]
            );
            assert_eq!(col(o, SAME), k[SAME], "{s}: same_pages");
        }
    }
}

/// About `bytes` of the system's binaries, whole files in name order, padded
/// with zeros to whole pages, written to `path`.
fn usr_bin_cut(path: &Path, bytes: usize) {
    let mut data = common::corpora::usr_bin(bytes);
    data.resize(data.len().div_ceil(PAGE) * PAGE, 0);
    fs::write(path, &data).unwrap();
}

/// lzo-rle and lzo, which zmem compresses to the kernel's bytes: 24 MiB of
/// the system's binaries give every mm_stat column the kernel's value after
/// the fill, the seeded half discard and compaction.
#[test]
fn lzo_real_data_matches_the_kernel_to_the_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let bins = tmp.path().join("usr-bin.bin");
    usr_bin_cut(&bins, 24 << 20);
    for comp in ["lzo-rle", "lzo"] {
        let Some(Stages { ours, kernel }) = run_both(&bins, comp) else {
            return;
        };
        assert_every_column_equal(comp, &ours, &kernel);
        // The test means something only if pages were moved.
        assert!(col(&ours[2], 6) > 0, "{comp}: nothing compacted");
    }
}

/// `zmem ctl status` equals zramctl: the same synthetic pages written to a
/// kernel zram device and, through NBD, to a kernel-compat export; zramctl
/// and `zmem ctl status` with the same flags print the same numbers,
/// column for column (the name column aside).
#[test]
fn ctl_status_prints_what_zramctl_prints_for_the_same_pages() {
    if testkit::clients::tool("zramctl").is_none() || testkit::clients::tool("nbdcopy").is_none() {
        eprintln!("SKIP: zramctl (util-linux) or nbdcopy (libnbd-bin) is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("synthetic.bin");
    synthetic(&file, 4096);
    let bytes = fs::metadata(&file).unwrap().len();
    let dev = match KernelZram::create("lz4", bytes) {
        Ok(d) => d,
        Err(why) => {
            eprintln!("skipping the zramctl comparison: {why}");
            return;
        }
    };
    let data = fs::read(&file).unwrap();
    dev.write_all(&PageBuffer::copy_of(&data)).unwrap();

    let size = bytes.to_string();
    let z = serve_common::Zmem::start(&[
        "--mode",
        "kernel-compat",
        "--comp",
        "lz4",
        "--size",
        &size,
        "--export",
        "k",
    ]);
    // --allocated: zero pages are written as zeros (same-filled pages, as
    // the kernel device got them), not skipped as holes.
    testkit::clients::run_ok(
        "nbdcopy",
        &["--allocated", file.to_str().unwrap(), &z.uri("k")],
    );

    let cols = "DISKSIZE,DATA,COMPR,TOTAL,ZERO-PAGES,MIGRATED";
    let flags = ["--bytes", "--raw", "--noheadings", "--output", cols];
    let node = format!("/dev/zram{}", dev.id());
    let kernel =
        testkit::clients::run_ok("zramctl", &[flags.as_slice(), &[node.as_str()]].concat());
    let ours = z.ctl_ok(&[&["status"], flags.as_slice()].concat());
    eprintln!("zramctl: {kernel}zmem:    {ours}");
    let k: Vec<&str> = kernel.split_whitespace().collect();
    let o: Vec<&str> = ours.split_whitespace().collect();
    assert_eq!(k.len(), 6, "{kernel}");
    assert_eq!(o, k, "column for column: {cols}");
}
