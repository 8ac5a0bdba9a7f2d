//! Kernel-compat mode against Debian's Linux 7.3 zram, in a guest: the
//! newest kernel Debian ships (trixie-backports), whose zram offers lz4 (its
//! default), lz4hc, zstd and deflate, no lzo, and writeback with
//! `compressed_writeback`.
//!
//! One guest boots 7.3 (scripts/vm-run `--kernel 7.3`, unpacked by
//! scripts/install-deps) and uses its own zram (hot-added devices, never
//! zram0):
//!
//! - scripts/kernel-zram-replay for three corpora (an excerpt of the Linux
//!   source tar, the system's binaries, the memory of a python3 process's
//!   core dump) and four compressors: fill, discard a seeded half, compact.
//!   The host replays the same pages with `zmem replay --mode kernel-compat
//!   --raw --comp X` and its discard list; all nine mm_stat columns must be
//!   equal after every stage, deflate's too (kernel-compat compresses it
//!   with the C zlib at the kernel's memLevel, whose encoder is the kernel's
//!   lib/zlib_deflate's).
//! - writeback on the binaries with lz4, a loop device on a file as
//!   backing_dev: fill, `idle` all, `writeback` (idle, huge, incompressible,
//!   a page_indexes range), a read of every page, a fixed half discarded,
//!   compact, each with `compressed_writeback` 0 and 1; mm_stat, bd_stat and
//!   io_stat after every stage equal to the host's, from the engine `zmem
//!   replay` runs (tune::replay) driven in this order. With
//!   `compressed_writeback` 7.3 writes each object into a block of its own,
//!   and so do kernel-compat stores ([`check_writeback`]).
//!
//! The default test uses 2 MiB corpora: 16 s on this 2-core machine when
//! it is otherwise idle, 53 s while other builds run (most of it the guest
//! under TCG). `cargo test --release -p
//! zmem-cli --test vm_kernel73 -- --ignored` runs the same on 24 MiB
//! corpora. Where no guest can run (no qemu, no 7.3 kernel unpacked, not
//! root) or a corpus cannot be made (no linux-source-6.1, no gcore), the
//! test says why and passes without running.
//!
//! This file owns its corpora (made in the tests' target folder, which the
//! guest sees) and the comparison; it never touches the host's zram.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use std::time::Duration;

use testkit::vm::Guest;

const PAGE: usize = 4096;
const COMPS: [&str; 4] = ["lz4", "lz4hc", "zstd", "deflate"];
const STAGES: [&str; 3] = ["fill", "discard", "compact"];
const MM_STAT: [&str; 9] = zram::MM_STAT_COLUMNS;

/// One corpus and compressor: the host's figures and the discards.
struct Case {
    corpus: String,
    comp: &'static str,
    file: PathBuf,
    discards: PathBuf,
    ours: Vec<Vec<u64>>,
}

/// mm_stat's nine columns from a JSON object keyed by the kernel's names.
fn columns(v: &serde_json::Value) -> Vec<u64> {
    MM_STAT
        .iter()
        .map(|name| {
            v[*name]
                .as_u64()
                .unwrap_or_else(|| panic!("no {name} in {v}"))
        })
        .collect()
}

/// The host's side: `zmem replay --mode kernel-compat` with a seeded half
/// discard and compaction, which writes its discards for the guest.
fn host_case(corpus: &str, file: &Path, comp: &'static str, dir: &Path) -> Case {
    let discards = dir.join(format!("{corpus}-{comp}.discards"));
    let report = common::kernel_compat_replay(file, comp, &discards, &["--no-verify"]);
    let stages = report["stages"].as_array().unwrap();
    let names: Vec<&str> = stages.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, STAGES, "{report}");
    let ours = stages
        .iter()
        .map(|s| columns(&s["results"][0]["mm_stat"]))
        .collect();
    Case {
        corpus: corpus.to_string(),
        comp,
        file: file.to_path_buf(),
        discards,
        ours,
    }
}

/// The guest's side of the mm_stat comparison: scripts/kernel-zram-replay
/// (argv[1]) for each job of the JSON list in argv[2] (file, discards,
/// comp), run in this one Python process (a Python start costs about a
/// second under TCG), one `K73 INDEX JSON` line per job.
const REPLAY_GUEST: &str = r#"
import contextlib, io, json, runpy, sys
replay = sys.argv[1]
for i, job in enumerate(json.load(open(sys.argv[2]))):
    sys.argv = [replay, job["file"], job["discards"], "--comp", job["comp"]]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(replay, run_name="__main__")
    print(f"K73 {i}", json.dumps(json.loads(out.getvalue())), flush=True)
"#;

/// The JSON object on the line `TAG INDEX JSON` of the guest's output.
fn tagged(out: &str, tag: &str, i: usize) -> serde_json::Value {
    let head = format!("{tag} {i} ");
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix(&head))
        .unwrap_or_else(|| panic!("no {head:?} line:\n{out}"));
    serde_json::from_str(line).unwrap()
}

/// The kernel's mm_stat after each stage of case `i`.
fn kernel_mm(out: &str, i: usize, case: &Case) -> Vec<Vec<u64>> {
    let v = tagged(out, "K73", i);
    assert_eq!(v["comp"], case.comp, "{v}");
    let stages = v["stages"].as_array().unwrap();
    let names: Vec<&str> = stages.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, STAGES, "{v}");
    stages.iter().map(|s| columns(&s["mm_stat"])).collect()
}

/// The guest's side of the writeback comparison: for each job of the JSON
/// list in argv[1] (file, discards, comp, request, compressed), a
/// hot-added zram device (never zram0) with a loop device on a file in the
/// guest's /run as its backing_dev, `compressed_writeback` set, then fill,
/// `idle` all, `writeback REQUEST`, a direct read of every page, the
/// discards one page per request, `compact`; mm_stat, bd_stat and io_stat
/// after each stage, one `WB INDEX JSON` line per job.
const WRITEBACK_GUEST: &str = r#"
import fcntl, json, os, struct, subprocess, sys

PAGE = 4096
BLKDISCARD = 0x1277

def run(i, job):
    size = (os.path.getsize(job["file"]) + PAGE - 1) // PAGE * PAGE
    back = f"/run/backing{i}"
    with open(back, "wb") as f:
        f.truncate(size)
    loop = subprocess.run(["losetup", "-f", "--show", back], check=True,
                          capture_output=True, text=True).stdout.strip()
    dev_id = int(open("/sys/class/zram-control/hot_add").read())
    assert dev_id != 0
    sysfs = f"/sys/block/zram{dev_id}"
    node = f"/dev/zram{dev_id}"
    def attr(name, value):
        with open(f"{sysfs}/{name}", "w") as f:
            f.write(value)
    def cols(name):
        return [int(v) for v in open(f"{sysfs}/{name}").read().split()]
    stages = []
    def snap(name):
        stages.append({"name": name, "mm_stat": cols("mm_stat"),
                       "bd_stat": cols("bd_stat"), "io_stat": cols("io_stat")})
    try:
        attr("backing_dev", loop)
        attr("compressed_writeback", "1" if job["compressed"] else "0")
        attr("comp_algorithm", job["comp"])
        attr("disksize", str(size))
        subprocess.run(["dd", f"if={job['file']}", f"of={node}", "bs=1M",
                        "oflag=direct", "conv=fsync", "status=none"], check=True)
        snap("fill")
        attr("idle", "all")
        snap("idle")
        error = None
        try:
            attr("writeback", job["request"])
        except OSError as e:
            error = e.strerror
        snap("writeback")
        subprocess.run(["dd", f"if={node}", "of=/dev/null", "bs=1M", "iflag=direct",
                        "status=none"], check=True)
        snap("read")
        fd = os.open(node, os.O_WRONLY | os.O_DIRECT)
        try:
            for line in open(job["discards"]):
                if line.strip():
                    fcntl.ioctl(fd, BLKDISCARD, struct.pack("QQ", int(line) * PAGE, PAGE))
        finally:
            os.close(fd)
        snap("discard")
        attr("compact", "1")
        snap("compact")
    finally:
        attr("reset", "1")
        with open("/sys/class/zram-control/hot_remove", "w") as f:
            f.write(str(dev_id))
        subprocess.run(["losetup", "-d", loop], check=True)
        os.unlink(back)
    print(f"WB {i}", json.dumps({"stages": stages, "error": error}), flush=True)

for i, job in enumerate(json.load(open(sys.argv[1]))):
    run(i, job)
"#;

/// The stages of the writeback comparison, in order.
const WB_STAGES: [&str; 6] = ["fill", "idle", "writeback", "read", "discard", "compact"];

/// One writeback job's figures after each stage: mm_stat, bd_stat,
/// io_stat (the kernel's columns, io_stat's constant 0 left out).
type WbFigures = Vec<(Vec<u64>, Vec<u64>, Vec<u64>)>;

/// The host's side of one writeback job: kernel-compat lz4 through the
/// engine `zmem replay` runs (tune::replay), whose stages `zmem replay`
/// itself runs in a fixed order (fill, discard, compact, mark-idle,
/// writeback) and without reads; here in the guest's order.
fn host_writeback(
    file: &Path,
    comp: &str,
    request: &str,
    compressed: bool,
    discards: &[u64],
    dir: &Path,
) -> WbFigures {
    use clap::Parser;
    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        store: recipe::spec::StoreArgs,
    }
    let flags = Flags::parse_from(["replay", "--mode", "kernel-compat", "--comp", comp]);
    let specs = flags.store.specs().unwrap();
    assert_eq!(specs.len(), 1);
    let corpus =
        tune::corpus::Corpus::from_paths(std::slice::from_ref(&file.to_path_buf()), true).unwrap();
    let mut replay = tune::replay::Replay::new(specs, corpus, false).unwrap();
    replay.set_writeback_compressed(&[compressed]).unwrap();
    let backing = dir.join(format!(
        "backing-{}-{compressed}",
        request.replace(['=', '-'], "_")
    ));
    let _ = fs::remove_file(&backing);
    let size = fs::metadata(file).unwrap().len().div_ceil(PAGE as u64) * PAGE as u64;
    fs::File::create(&backing).unwrap().set_len(size).unwrap();
    replay
        .set_backing_devs(std::slice::from_ref(&backing))
        .unwrap();
    let mut figures = Vec::new();
    let mut snap = |replay: &mut tune::replay::Replay, name: &str| {
        let stage = replay.snapshot(name);
        let r = &stage.results[0];
        assert!(r.error.is_none(), "{name}: {:?}", r.error);
        let mm = columns(&serde_json::to_value(r.mm_stat).unwrap());
        let bd = r.bd_stat.expect("a backing file");
        let io = r.io_stat;
        figures.push((
            mm,
            vec![bd.bd_count, bd.bd_reads, bd.bd_writes],
            vec![io.failed_reads, io.failed_writes, io.notify_free],
        ));
    };
    replay.fill().unwrap();
    snap(&mut replay, "fill");
    replay.mark_idle(zram::IdleCutoff::All);
    snap(&mut replay, "idle");
    replay.writeback(request).unwrap();
    snap(&mut replay, "writeback");
    replay.verify().unwrap();
    snap(&mut replay, "read");
    replay.discard(PAGE, discards).unwrap();
    snap(&mut replay, "discard");
    replay.compact();
    snap(&mut replay, "compact");
    fs::remove_file(&backing).unwrap();
    figures
}

/// Half of `pages` page indexes, chosen with a fixed xorshift, in a fixed
/// order.
fn seeded_half(pages: u64) -> Vec<u64> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..pages)
        .filter(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x & 1 == 1
        })
        .collect()
}

/// The writeback requests compared: every type 7.3 takes and a page range.
const WB_REQUESTS: [&str; 4] = ["idle", "huge", "incompressible", "page_indexes=64-191"];

/// Panics unless every mm_stat column of every case and stage equals the
/// kernel's.
fn check_mm_stat(cases: &[Case], kernel: &[Vec<Vec<u64>>]) {
    let mut unequal = Vec::new();
    for (c, k) in cases.iter().zip(kernel) {
        for (s, stage) in STAGES.iter().enumerate() {
            eprintln!(
                "{} {} {stage}: zmem {:?}\n{} {} {stage}: 7.3  {:?}",
                c.corpus, c.comp, c.ours[s], c.corpus, c.comp, k[s]
            );
            for (col, name) in MM_STAT.iter().enumerate() {
                if c.ours[s][col] != k[s][col] {
                    unequal.push((c.corpus.as_str(), c.comp, *stage, *name));
                }
            }
        }
        // Compaction must have had something to do, or the last stage
        // shows nothing new.
        assert!(
            k[2][6] > 0,
            "{} {}: 7.3 compacted nothing",
            c.corpus,
            c.comp
        );
    }
    assert!(
        unequal.is_empty(),
        "columns unequal to 7.3's (corpus, comp, stage, column): {unequal:?}"
    );
}

/// One writeback job: its request, whether compressed, both sides'
/// figures.
struct WbJob {
    request: &'static str,
    compressed: bool,
    ours: WbFigures,
}

/// The kernel's figures of writeback job `i`.
fn kernel_wb(out: &str, i: usize) -> WbFigures {
    let v = tagged(out, "WB", i);
    let figures: WbFigures = v["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let c = |name: &str| -> Vec<u64> {
                s[name]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap())
                    .collect()
            };
            let io = c("io_stat");
            (c("mm_stat"), c("bd_stat"), vec![io[0], io[1], io[3]])
        })
        .collect();
    assert_eq!(figures.len(), WB_STAGES.len(), "{v}");
    assert!(v["error"].is_null(), "7.3's writeback failed: {v}");
    figures
}

/// Panics unless, for every writeback job and stage, mm_stat, bd_stat and
/// io_stat equal the kernel's. With `compressed_writeback` 7.3 writes each
/// compressed object into a block of its own (its `zram_writeback_slots`
/// reserves one block per slot), so its bd_stat is the same as without,
/// which the test also checks; kernel-compat stores lay objects out the
/// same way (default mode packs them: crates/zram/src/writeback.rs).
fn check_writeback(jobs: &[WbJob], kernel: &[WbFigures]) {
    let mut unequal = Vec::new();
    for (i, (job, k)) in jobs.iter().zip(kernel).enumerate() {
        let label = format!(
            "{} compressed_writeback={}",
            job.request, job.compressed as u8
        );
        let o = &job.ours;
        for (s, stage) in WB_STAGES.iter().enumerate() {
            eprintln!(
                "{label} {stage}: zmem mm {:?} bd {:?} io {:?}\n{label} {stage}: 7.3  mm {:?} bd {:?} io {:?}",
                o[s].0, o[s].1, o[s].2, k[s].0, k[s].1, k[s].2
            );
            let compared = [
                ("mm_stat", &o[s].0, &k[s].0),
                ("bd_stat", &o[s].1, &k[s].1),
                ("io_stat", &o[s].2, &k[s].2),
            ];
            if job.compressed {
                // The uncompressed twin of this job is the one before it.
                assert!(!jobs[i - 1].compressed && jobs[i - 1].request == job.request);
                assert_eq!(
                    k[s].1, kernel[i - 1][s].1,
                    "{label} {stage}: 7.3's bd_stat with compressed_writeback is not the same as without"
                );
            }
            for (what, a, b) in compared {
                for (col, (x, y)) in a.iter().zip(b.iter()).enumerate() {
                    if x != y {
                        unequal.push(format!("{label} {stage} {what}[{col}]: zmem {x}, 7.3 {y}"));
                    }
                }
            }
        }
    }
    assert!(unequal.is_empty(), "unequal:\n{}", unequal.join("\n"));
    // Something was written back, read back and freed.
    let idle = &kernel[0];
    assert!(idle[2].1[2] > 0 && idle[3].1[1] > 0 && idle[4].1[0] < idle[3].1[0]);
}

/// Every corpus and compressor, and every writeback job, on both sides in
/// one guest, compared.
fn compare_with_7_3(mib: usize, timeout: Duration) {
    let Some((dir, corpora)) = common::corpora::corpora_or_skip("vm_kernel73", mib) else {
        return;
    };
    let mut cases = Vec::new();
    for (name, file) in &corpora {
        for comp in COMPS {
            cases.push(host_case(name, file, comp, &dir));
        }
    }
    let replay_jobs: Vec<_> = cases
        .iter()
        .map(|c| serde_json::json!({"file": c.file, "discards": c.discards, "comp": c.comp}))
        .collect();

    // Writeback: the system's binaries, lz4, a fixed half discarded.
    let wb_file = &corpora[1].1;
    let pages = fs::metadata(wb_file).unwrap().len().div_ceil(PAGE as u64);
    let discards = seeded_half(pages);
    let wb_list = dir.join("wb.discards");
    let text: String = discards.iter().map(|p| format!("{p}\n")).collect();
    fs::write(&wb_list, text).unwrap();
    let mut wb_jobs = Vec::new();
    let mut wb_json = Vec::new();
    for request in WB_REQUESTS {
        for compressed in [false, true] {
            let ours = host_writeback(wb_file, "lz4", request, compressed, &discards, &dir);
            wb_jobs.push(WbJob {
                request,
                compressed,
                ours,
            });
            wb_json.push(serde_json::json!({
                "file": wb_file, "discards": wb_list, "comp": "lz4",
                "request": request, "compressed": compressed,
            }));
        }
    }

    let write = |name: &str, text: &str| -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, text).unwrap();
        path
    };
    let replay_py = write("replay-guest.py", REPLAY_GUEST);
    let replay_list = write(
        "replay-jobs.json",
        &serde_json::to_string(&replay_jobs).unwrap(),
    );
    let wb_py = write("writeback-guest.py", WRITEBACK_GUEST);
    let wb_jobs_file = write(
        "writeback-jobs.json",
        &serde_json::to_string(&wb_json).unwrap(),
    );
    let kernel_zram_replay =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kernel-zram-replay");
    let script = format!(
        "set -e\nuname -r\nmodprobe zram\nmodprobe loop\n\
         python3 {} {} {}\npython3 {} {}\n",
        replay_py.display(),
        kernel_zram_replay.display(),
        replay_list.display(),
        wb_py.display(),
        wb_jobs_file.display(),
    );
    let guest = Guest {
        mem_mib: 768,
        cpus: 2,
        timeout,
    };
    let Some(out) = guest.run_on("7.3", &script).output_if_exited(0) else {
        return;
    };
    assert!(out.lines().any(|l| l.starts_with("7.3.")), "{out}");
    let kernel: Vec<_> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| kernel_mm(&out, i, c))
        .collect();
    let kernel_wb: Vec<_> = (0..wb_jobs.len()).map(|i| kernel_wb(&out, i)).collect();
    check_mm_stat(&cases, &kernel);
    check_writeback(&wb_jobs, &kernel_wb);
}

common::corpora::on_2_and_24_mib_corpora!(
    compare_with_7_3: kernel_compat_and_writeback_equal_linux_7_3_zram,
    kernel_compat_and_writeback_equal_linux_7_3_zram_on_larger_corpora,
    "minutes: cargo test --release -p zmem-cli --test vm_kernel73 -- --ignored"
);
