//! Fidelity against the kernel's zram: the same pages, discards and
//! compaction on a kernel zram device (lz4) and on a kernel-compat store
//! (`zmem replay`), with mm_stat compared after each stage.
//!
//! Runs only as root where /sys/class/zram-control exists and the kernel's
//! zram offers lz4; skips (with a message) elsewhere. It creates its own
//! device with hot_add, never touches zram0, never enables swap, and
//! removes the device at the end, even when an assertion fails.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

const PAGE: usize = 4096;

/// A kernel zram device made for one test, removed on drop.
struct KernelZram {
    id: u32,
}

impl KernelZram {
    /// A new device of `bytes` with lz4, or why the kernel's zram cannot be
    /// used here.
    fn new(bytes: u64) -> Result<KernelZram, String> {
        // SAFETY: geteuid has no preconditions and only reads process state.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        let ctl = Path::new("/sys/class/zram-control/hot_add");
        if !ctl.exists() {
            return Err("no /sys/class/zram-control".into());
        }
        let id: u32 = fs::read_to_string(ctl)
            .map_err(|e| format!("hot_add: {e}"))?
            .trim()
            .parse()
            .map_err(|e| format!("hot_add: {e}"))?;
        // hot_add never returns an existing device; zram0 is never ours.
        assert_ne!(id, 0, "hot_add returned zram0");
        let dev = KernelZram { id };
        let algos = fs::read_to_string(dev.attr("comp_algorithm")).unwrap_or_default();
        if !algos
            .split_whitespace()
            .any(|a| a.trim_matches(['[', ']']) == "lz4")
        {
            return Err(format!("the kernel's zram has no lz4 ({})", algos.trim()));
        }
        dev.set("comp_algorithm", "lz4")?;
        dev.set("disksize", &bytes.to_string())?;
        Ok(dev)
    }

    fn attr(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/sys/block/zram{}/{name}", self.id))
    }

    fn set(&self, name: &str, value: &str) -> Result<(), String> {
        fs::write(self.attr(name), value).map_err(|e| format!("zram{} {name}: {e}", self.id))
    }

    fn node(&self) -> String {
        format!("/dev/zram{}", self.id)
    }

    fn mm_stat(&self) -> Vec<u64> {
        fs::read_to_string(self.attr("mm_stat"))
            .unwrap()
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect()
    }

    /// Writes `file` to the device with direct I/O, in order.
    fn fill(&self, file: &Path) {
        let st = Command::new("dd")
            .arg(format!("if={}", file.display()))
            .arg(format!("of={}", self.node()))
            .args(["bs=1M", "oflag=direct", "conv=fsync", "status=none"])
            .status()
            .unwrap();
        assert!(st.success(), "dd to {}", self.node());
    }

    /// Discards each page, one request per page, in the order given.
    fn discard(&self, pages: &[u64]) {
        let dev = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(self.node())
            .unwrap();
        const BLKDISCARD: libc::c_ulong = 0x1277; // _IO(0x12, 119)
        for &p in pages {
            let range: [u64; 2] = [p * PAGE as u64, PAGE as u64];
            // SAFETY: BLKDISCARD reads two u64s (offset, length) from the
            // pointer, which points at `range`, alive for the call.
            let rc = unsafe { libc::ioctl(dev.as_raw_fd(), BLKDISCARD, range.as_ptr()) };
            assert_eq!(
                rc,
                0,
                "BLKDISCARD page {p}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

impl Drop for KernelZram {
    fn drop(&mut self) {
        let _ = self.set("reset", "1");
        let _ = fs::write("/sys/class/zram-control/hot_remove", self.id.to_string());
    }
}

/// mm_stat columns the real-data test compares (indexes into the kernel's
/// line).
const COMPR: usize = 1;
const USED: usize = 2;
const SAME: usize = 5;

struct Stages {
    ours: Vec<serde_json::Value>,
    kernel: Vec<Vec<u64>>,
}

/// Runs the same fill, seeded half discard and compact on both sides.
fn run_both(file: &Path, tag: &str) -> Option<Stages> {
    let len = fs::metadata(file).unwrap().len();
    let dev = match KernelZram::new(len.div_ceil(PAGE as u64) * PAGE as u64) {
        Ok(d) => d,
        Err(why) => {
            eprintln!("skipping the kernel zram comparison: {why}");
            return None;
        }
    };
    let discards =
        std::env::temp_dir().join(format!("zmem-fidelity-{tag}-{}.txt", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_zmem"))
        .arg("replay")
        .arg(file)
        .args([
            "--raw",
            "--mode",
            "kernel-compat",
            "--comp",
            "lz4",
            "--free-fraction",
            "0.5",
            "--seed",
            "7",
            "--compact",
            "--format",
            "json",
            "--write-discards",
        ])
        .arg(&discards)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
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
    let _ = fs::remove_file(&discards);
    let mut kernel = Vec::new();
    dev.fill(file);
    kernel.push(dev.mm_stat());
    dev.discard(&pages);
    kernel.push(dev.mm_stat());
    dev.set("compact", "1").unwrap();
    kernel.push(dev.mm_stat());
    Some(Stages { ours, kernel })
}

fn col(v: &serde_json::Value, i: usize) -> u64 {
    let key = [
        "orig_data_size",
        "compr_data_size",
        "mem_used_total",
        "mem_limit",
        "mem_used_max",
        "same_pages",
        "pages_compacted",
        "huge_pages",
    ][i];
    v[key].as_u64().unwrap()
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
    let file = std::env::temp_dir().join(format!("zmem-fidelity-syn-{}.bin", std::process::id()));
    synthetic(&file, 8192);
    let stages = run_both(&file, "syn");
    let _ = fs::remove_file(&file);
    let Some(Stages { ours, kernel }) = stages else {
        return;
    };
    assert_eq!((ours.len(), kernel.len()), (3, 3));
    for (stage, (o, k)) in ["fill", "discard", "compact"]
        .iter()
        .zip(ours.iter().zip(&kernel))
    {
        eprintln!("{stage}: zmem {o}\n{stage}: kernel mm_stat {k:?}");
        // Every column: the same pages, discards and compaction give the
        // kernel's numbers exactly.
        let names = [
            "orig_data_size",
            "compr_data_size",
            "mem_used_total",
            "mem_limit",
            "mem_used_max",
            "same_pages",
            "pages_compacted",
            "huge_pages",
            "huge_pages_since",
        ];
        for (i, name) in names.iter().enumerate() {
            assert_eq!(
                o[name].as_u64().unwrap(),
                k[i],
                "{stage}: {name}: zmem {o} vs kernel {k:?}"
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
    let bins = std::env::temp_dir().join(format!("zmem-fidelity-bin-{}.bin", std::process::id()));
    let mut data = Vec::new();
    let mut entries: Vec<_> = fs::read_dir("/usr/bin")
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if data.len() >= 32 << 20 {
            break;
        }
        if let Ok(bytes) = fs::read(&p) {
            data.extend_from_slice(&bytes);
        }
    }
    data.resize(data.len().div_ceil(PAGE) * PAGE, 0);
    fs::write(&bins, &data).unwrap();
    inputs.push((bins.clone(), true));
    for (file, _) in &inputs {
        let Some(Stages { ours, kernel }) = run_both(file, "real") else {
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
    let _ = fs::remove_file(&bins);
}
