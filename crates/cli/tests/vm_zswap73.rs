//! The zswap model (crates/zswap) against Debian's Linux 7.3 zswap, in a
//! guest.
//!
//! One guest boots 7.3 (scripts/vm-run `--kernel 7.3`) with a swap area on
//! a virtio disk (a sparse file in the tests' target folder: the guest
//! swaps, this machine never does), debugfs mounted, transparent huge
//! pages off, and zswap turned on at run time
//! (`/sys/module/zswap/parameters/enabled`). A small C program
//! (workloads/zswap_pages.c, built here with cc) maps anonymous memory,
//! fills it with a corpus's pages in file order and pages each out on its
//! own (`MADV_PAGEOUT`, checked in `/proc/self/pagemap`), then, with every
//! page out and still held, prints the debugfs files and the vmstat events.
//! The host stores the same pages in the same order into the model
//! ([`zswap::Zswap`]) and compares:
//!
//! - the three corpora of vm_kernel73 (tests/common/corpora.rs) with lz4
//!   and zstd, at 7.3's default `max_pool_percent` (never reached):
//!   `stored_pages`, `stored_incompressible_pages`, `pool_total_size`,
//!   every reject counter, `zswpout` and `swpout_zero` equal; the zero
//!   pages went to the zero map and nothing to the swap device;
//! - 8 MiB of the binaries with lz4 and a `max_pool_percent` of about half
//!   the pool they need: `pool_limit_hit`, `written_back_pages`, the stores refused
//!   and what stays stored, equal. The kernel's shrink worker is
//!   asynchronous (a workqueue item a refused store queues); the guest
//!   program waits, after each refused page, until `written_back_pages`
//!   has stopped moving, so that the worker's writebacks fall between the
//!   same two stores as in the model, which runs the worker at once;
//! - the `/sys/module/zswap/parameters/*` lines of `zmem advise --system
//!   --emit zswap` (a small sample, one candidate: the guest is slow), run
//!   in the guest on the guest: each written and read back.
//!
//! The default test uses 2 MiB corpora: 18 to 20 s on this 2-core machine
//! (the guest 17 to 19 s under TCG: boot and set-up 5 to 6, the limit's
//! waits 4.4, the advice 3), 49 s once while other builds ran; `cargo test
//! --release -p zmem-cli --test vm_zswap73 -- --ignored` runs the same on
//! 24 MiB ones (86 s). Where no
//! guest can run (no qemu, no 7.3 kernel unpacked, not root) or a corpus
//! cannot be made (no linux-source-6.1, no gcore), the test says why and
//! passes without running.
//!
//! This file owns the comparison and the guest's script; the corpora are
//! common::corpora's, the guest program workloads/zswap_pages.c's.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use testkit::vm::Guest;
use zswap::{Outcome, Zswap, ZswapConfig};

const PAGE: usize = 4096;
const COMPS: [&str; 2] = ["lz4", "zstd"];

/// The debugfs files and vmstat events that must equal the kernel's, by
/// the kernel's names (the C program prints them so).
const COMPARED: [&str; 15] = [
    "pool_total_size",
    "stored_pages",
    "stored_incompressible_pages",
    "pool_limit_hit",
    "reject_reclaim_fail",
    "reject_alloc_fail",
    "reject_kmemcache_fail",
    "reject_compress_fail",
    "reject_compress_poor",
    "decompress_fail",
    "written_back_pages",
    "zswpout",
    "zswpwb",
    "pswpout",
    "swpout_zero",
];

/// The largest difference of `pool_total_size` allowed between the model
/// and the kernel, in pages: none. Both store the same objects into a
/// zsmalloc pool of the same geometry without freeing any, and a pool that
/// only grows holds, per size class, the fewest zspages its objects need,
/// whatever their order; so the pages are equal exactly when every page's
/// compressed length falls into the same size class on both sides
/// (`zswap_compress` keeps `dlen`, the compressor's output length, or a
/// whole page when that is not below a page).
const POOL_PAGES_BOUND: u64 = 0;

/// The size of the binaries the limit is tried on, MiB (at least the
/// corpora's): with lz4 they take about 4 MiB of pool, twice one percent
/// of the guest's RAM.
const LIMIT_MIB: usize = 8;

/// The C program, built where the guest sees it.
fn zswap_pages() -> PathBuf {
    common::workload_binary("zswap_pages", "zswap_pages")
}

/// The pages of `file`, the last padded with zeros (as the guest program
/// copies them).
fn pages(file: &Path) -> Vec<Vec<u8>> {
    let data = fs::read(file).unwrap();
    data.chunks(PAGE)
        .map(|c| {
            let mut p = c.to_vec();
            p.resize(PAGE, 0);
            p
        })
        .collect()
}

/// The model's figures for `file`'s pages stored in order at offsets 0, 1,
/// ..., by the kernel's names; and the outcomes' tally.
fn model(file: &Path, config: ZswapConfig) -> (serde_json::Value, [u64; 4]) {
    let mut z = Zswap::new(config).unwrap();
    let mut tally = [0u64; 4];
    for (i, p) in pages(file).iter().enumerate() {
        let slot = match z.store(i as u64, p).unwrap() {
            Outcome::Compressed { .. } => 0,
            Outcome::Incompressible => 1,
            Outcome::ZeroFilled => 2,
            Outcome::Rejected(_) => 3,
        };
        tally[slot] += 1;
    }
    let s = z.stats();
    let mut v = serde_json::to_value(s.debugfs).unwrap();
    let events = serde_json::to_value(s.vmstat).unwrap();
    for (k, x) in events.as_object().unwrap() {
        v[k] = x.clone();
    }
    (v, tally)
}

/// The `ZSWAP {json}` lines of the guest's output, in order.
fn kernel_runs(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .filter_map(|l| l.strip_prefix("ZSWAP "))
        .map(|j| serde_json::from_str(j).unwrap_or_else(|e| panic!("{e}: {j}")))
        .collect()
}

/// The number after `key=` on the guest's line starting with `tag`.
fn guest_value(out: &str, tag: &str, key: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(tag))
        .unwrap_or_else(|| panic!("no {tag:?} line:\n{out}"));
    let head = format!("{key}=");
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&head))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

/// The `/sys/module/zswap/parameters/*` writes of the `zmem advise
/// --system --emit zswap` the guest ran (its lines, `ADV `-prefixed):
/// (parameter, value).
fn emitted_parameters(out: &str) -> Vec<(String, String)> {
    let params: Vec<(String, String)> = out
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("ADV echo ")?;
            let (value, path) = rest.split_once(" > ")?;
            let name = path.trim().strip_prefix("/sys/module/zswap/parameters/")?;
            Some((name.to_string(), value.trim().to_string()))
        })
        .collect();
    assert!(
        params.iter().any(|(n, _)| n == "max_pool_percent"),
        "no max_pool_percent line in the advice:\n{out}"
    );
    params
}

/// Where the guest's time went: the seconds between its `STAMP NAME
/// UPTIME` lines (the first one, `ready`, after boot and set-up).
fn print_stamps(out: &str) {
    let mut last = None;
    let mut line = String::from("guest seconds:");
    for l in out.lines().filter_map(|l| l.strip_prefix("STAMP ")) {
        let (name, t) = l.split_once(' ').unwrap();
        let t: f64 = t.trim().parse().unwrap();
        match last {
            None => line.push_str(&format!(" {name} at {t:.1}")),
            Some(l) => line.push_str(&format!(", {name} {:.1}", t - l)),
        }
        last = Some(t);
    }
    eprintln!("{line}");
}

/// Panics unless every compared figure of `ours` equals `kernel`'s
/// (`pool_total_size` within [`POOL_PAGES_BOUND`] pages); prints both.
fn check(label: &str, ours: &serde_json::Value, kernel: &serde_json::Value) -> Vec<String> {
    let mut unequal = Vec::new();
    let mut line = format!("{label}:");
    for name in COMPARED {
        let o = ours[name]
            .as_u64()
            .unwrap_or_else(|| panic!("model: no {name}"));
        let k = kernel[name]
            .as_i64()
            .unwrap_or_else(|| panic!("7.3: no {name}"));
        line.push_str(&format!(" {name} {o}/{k}"));
        if k < 0 {
            // A vmstat line this kernel lacks.
            continue;
        }
        let k = k as u64;
        let ok = if name == "pool_total_size" {
            o.abs_diff(k) <= POOL_PAGES_BOUND * PAGE as u64
        } else {
            o == k
        };
        if !ok {
            unequal.push(format!("{label} {name}: model {o}, 7.3 {k}"));
        }
    }
    eprintln!("{line} (model/7.3)");
    unequal
}

/// Every corpus with lz4 and zstd, the limit, and the emitted parameters,
/// in one guest, against the model.
fn compare_with_7_3(mib: usize, timeout: Duration) {
    let Some((dir, corpora)) = common::corpora::corpora_or_skip("vm_zswap73", mib) else {
        return;
    };
    let prog = zswap_pages();
    let bins = &corpora[1].1;
    // The limit's corpus: more binaries, so that a pool of whole percents
    // of the guest's RAM is reached.
    let limit_mib = LIMIT_MIB.max(mib);
    let limit_file = dir.join(format!("usr-bin{limit_mib}.bin"));
    common::corpora::binaries(&limit_file, limit_mib << 20);
    let limit_file = &limit_file;
    // The swap area: a sparse file, twice what every corpus could need.
    let swap = dir.join("swap.img");
    let _ = fs::remove_file(&swap);
    fs::File::create(&swap)
        .unwrap()
        .set_len(((2 * (mib.max(LIMIT_MIB) as u64)) + 16) << 20)
        .unwrap();

    let mut script = String::from(
        "set -e\nuname -r\nmodprobe virtio_blk\nmodprobe zstd\n\
         mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug\n\
         echo never > /sys/kernel/mm/transparent_hugepage/enabled\n\
         mkswap /dev/vda >/dev/null\nswapon /dev/vda\n\
         P=/sys/module/zswap/parameters\nD=/sys/kernel/debug/zswap\n\
         echo Y > $P/enabled\n[ \"$(cat $P/enabled)\" = Y ]\n\
         drain() { i=0; while [ \"$(cat $D/stored_pages)\" != 0 ] || [ \"$(cat $D/pool_total_size)\" != 0 ]; do \
         sleep 0.1; i=$((i+1)); [ $i -lt 100 ] || { echo zswap did not drain; exit 1; }; done; }\n\
         stamp() { echo \"STAMP $1 $(cut -d' ' -f1 /proc/uptime)\"; }\nstamp ready\n\
         echo \"MEM totalram_kb=$(awk '/^MemTotal/ {print $2}' /proc/meminfo) max_pool_percent=$(cat $P/max_pool_percent) accept_threshold_percent=$(cat $P/accept_threshold_percent)\"\n",
    );
    for comp in COMPS {
        script.push_str(&format!(
            "echo {comp} > $P/compressor\n[ \"$(cat $P/compressor)\" = {comp} ]\n"
        ));
        for (name, file) in &corpora {
            script.push_str(&format!(
                "drain\nout=$({} {}) || {{ echo \"$out\"; echo zswap_pages failed; exit 1; }}\necho \"$out\"\nstamp {name}-{comp}\n",
                prog.display(),
                file.display()
            ));
            if comp == "lz4" && file == bins {
                script.push_str(
                    "pool=$(echo \"$out\" | sed 's/.*\"pool_total_size\": \\([0-9]*\\).*/\\1/')\n",
                );
            }
        }
    }
    // The limit: about half the pool the limit's corpus takes with lz4
    // (the binaries' pool, scaled).
    script.push_str(&format!(
        "echo lz4 > $P/compressor\n\
         pool=$(( pool * {limit_mib} / {mib} ))\n\
         kb=$(awk '/^MemTotal/ {{print $2}}' /proc/meminfo)\n\
         pct=$(( pool / 1024 * 100 / 2 / kb ))\n[ $pct -ge 1 ] || pct=1\n\
         echo $pct > $P/max_pool_percent\n\
         echo \"LIMIT max_pool_percent=$pct\"\n\
         drain\n{} {} settle\nstamp limit\n\
         echo 20 > $P/max_pool_percent\n",
        prog.display(),
        limit_file.display()
    ));
    // The advice for this guest, applied line by line.
    script.push_str(&format!(
        "{} advise --system --emit zswap --sample-pages 1024 --comp lz4 --latency-reads 100 > /run/emit.txt || {{ cat /run/emit.txt; echo advise failed; exit 1; }}\n\
         sed 's/^/ADV /' /run/emit.txt\n\
         grep -E '^echo [^ ]+ > /sys/module/zswap/parameters/[a-z_]+$' /run/emit.txt | \
         while read -r _ value _ path; do echo \"$value\" > \"$path\"; \
         echo \"EMIT ${{path##*/}} wrote=$value read=$(cat $path)\"; done\nstamp advise\n",
        env!("CARGO_BIN_EXE_zmem")
    ));
    script.push_str("drain\nswapoff /dev/vda\n");

    let guest = Guest {
        mem_mib: 256,
        cpus: 2,
        timeout,
    };
    let disk = format!("driver=file,filename={},node-name=swap0", swap.display());
    let outcome = guest.run_on_with_disks("7.3", &script, &[disk]);
    let out = outcome.output_if_exited(0);
    let _ = fs::remove_file(&swap);
    let Some(out) = out else { return };
    assert!(out.lines().any(|l| l.starts_with("7.3.")), "{out}");
    print_stamps(&out);

    let totalram_pages = guest_value(&out, "MEM ", "totalram_kb") / 4;
    assert_eq!(guest_value(&out, "MEM ", "max_pool_percent"), 20, "{out}");
    assert_eq!(
        guest_value(&out, "MEM ", "accept_threshold_percent"),
        90,
        "{out}"
    );
    let runs = kernel_runs(&out);
    assert_eq!(runs.len(), COMPS.len() * corpora.len() + 1, "{out}");
    let mut unequal = Vec::new();
    let mut k = runs.iter();
    for comp in COMPS {
        let algorithm = zcomp::Algorithm::from_name(comp).unwrap();
        for (name, file) in &corpora {
            let kernel = k.next().unwrap();
            let config = ZswapConfig::new(algorithm, totalram_pages, guest.cpus);
            let (ours, tally) = model(file, config);
            let label = format!("{name} {comp}");
            // Every page went out: stored, or (zero-filled) marked in
            // the zero map; none refused, none on the swap device.
            let pages = kernel["pages"].as_u64().unwrap();
            assert_eq!(kernel["missing"], 0, "{label}: {kernel}");
            assert_eq!(tally[3], 0, "{label}: the model refused pages");
            assert_eq!(tally.iter().sum::<u64>(), pages, "{label}");
            assert_eq!(
                kernel["stored_pages"].as_u64().unwrap() + kernel["swpout_zero"].as_u64().unwrap(),
                pages,
                "{label}: not every page went to zswap or the zero map: {kernel}"
            );
            assert_eq!(kernel["pswpout"], 0, "{label}: {kernel}");
            eprintln!(
                "{label}: {pages} pages, {} zero, {} incompressible, retried {}",
                tally[2], tally[1], kernel["retried"]
            );
            unequal.extend(check(&label, &ours, kernel));
        }
    }

    // The limit.
    let pct = guest_value(&out, "LIMIT ", "max_pool_percent") as u32;
    let kernel = k.next().unwrap();
    let mut config = ZswapConfig::new(zcomp::Algorithm::Lz4, totalram_pages, guest.cpus);
    config.max_pool_percent = pct;
    let (ours, tally) = model(limit_file, config);
    let label = format!("usr-bin{limit_mib} lz4 max_pool_percent={pct}");
    assert_eq!(kernel["missing"], 0, "{label}: {kernel}");
    eprintln!(
        "{label}: totalram_pages {totalram_pages}, max_pages {}, accept_thr_pages {}, model refused {} pages",
        config.max_pages(),
        config.accept_thr_pages(),
        tally[3]
    );
    unequal.extend(check(&label, &ours, kernel));
    let hits = kernel["pool_limit_hit"].as_u64().unwrap();
    let written = kernel["written_back_pages"].as_u64().unwrap();
    assert!(
        hits > 0 && written > 0,
        "{label}: 7.3 never reached the limit or wrote nothing back: {kernel}"
    );

    // The emitted parameters: each accepted as written.
    let params = emitted_parameters(&out);
    eprintln!("advise --system --emit zswap in the guest wrote, and 7.3 kept: {params:?}");
    for (name, value) in &params {
        let head = format!("EMIT {name} wrote={value} read=");
        let line = out
            .lines()
            .find(|l| l.starts_with(&head))
            .unwrap_or_else(|| panic!("no {head:?} line:\n{out}"));
        assert_eq!(
            line.strip_prefix(&head).unwrap().trim(),
            value,
            "7.3 did not keep {name}"
        );
    }
    assert!(unequal.is_empty(), "unequal:\n{}", unequal.join("\n"));
}

common::corpora::on_2_and_24_mib_corpora!(
    compare_with_7_3: zswap_model_equals_linux_7_3_zswap,
    zswap_model_equals_linux_7_3_zswap_on_larger_corpora,
    "minutes: cargo test --release -p zmem-cli --test vm_zswap73 -- --ignored"
);
