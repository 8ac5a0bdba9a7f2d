//! `zmem run` in a guest whose kernel has soft-dirty bits
//! (`CONFIG_MEM_SOFT_DIRTY`, as Debian's 7.3, which the guest boots, has;
//! this project's host kernel has none, so only a guest shows the clock
//! seeing writes).
//!
//! A C page trace (`workloads/page_trace.c`) runs in a region a quarter of
//! its size with `--soft-dirty on` and `off`: the same output as without
//! zmem both times; with the bits on, the region says it uses them, ended
//! epochs (clears) and spared pages for writes it saw; off, none of that.
//! The guest runs under TCG emulation where /dev/kvm cannot run a stock
//! kernel; where no guest can run (no qemu, no guest kernel, not root) the
//! test says why and passes without running.

use std::path::PathBuf;
use std::time::Duration;

use testkit::vm::Guest;

const ZMEM: &str = env!("CARGO_BIN_EXE_zmem");

mod common;

/// `workloads/page_trace.c`, compiled where the guest can see it.
fn page_trace() -> PathBuf {
    common::workload_binary("page_trace", "page_trace_vm")
}

/// The fields of the `STATS <mode> ...` line the guest printed.
fn stats_line<'a>(out: &'a str, mode: &str) -> Vec<&'a str> {
    let head = format!("STATS {mode} ");
    let line = out
        .lines()
        .find(|l| l.starts_with(&head))
        .unwrap_or_else(|| panic!("no {head:?} line:\n{out}"));
    line.split_whitespace().skip(2).collect()
}

#[test]
fn the_clock_sees_writes_through_soft_dirty_bits_in_a_guest() {
    let prog = page_trace();
    let prog = prog.display();
    // 32 MiB, 150,000 accesses: long enough under TCG (about 15 s) for
    // several epochs at the limit. The statistics: soft_dirty, pages
    // spared for a write, clears, pages evicted at the limit, faults from
    // the store.
    let script = format!(
        r#"set -e
        {prog} 32 150000 3 > /tmp/plain
        grep -q ' 0 wrong,' /tmp/plain
        for sd in on off; do
            {ZMEM} run --limit 8M --comp lz4 --soft-dirty $sd --quiet \
                --stats-json /tmp/$sd.json -- {prog} 32 150000 3 > /tmp/$sd.out
            cmp /tmp/plain /tmp/$sd.out && echo "same output: $sd"
            python3 -c "import json; r = json.load(open('/tmp/$sd.json'))[0]['region']; \
e = r['evictions']; print('STATS $sd', r['soft_dirty'], e['written_spared'], \
e['soft_dirty_epochs'], e['limit'], r['faults']['missing_store'])"
        done"#
    );
    let guest = Guest {
        mem_mib: 512,
        cpus: 2,
        timeout: Duration::from_secs(600),
    };
    let Some(out) = guest.run_on("7.3", &script).output_if_exited(0) else {
        return;
    };
    for sd in ["on", "off"] {
        assert!(out.contains(&format!("same output: {sd}")), "{out}");
    }
    let num = |f: &str| f.parse::<u64>().unwrap();
    let on = stats_line(&out, "on");
    assert_eq!(on[0], "True", "the guest's kernel has the bits: {out}");
    assert!(num(on[1]) > 0, "no page spared for a write: {out}");
    assert!(num(on[2]) > 0, "no epoch ended: {out}");
    assert!(
        num(on[3]) > 1000,
        "too few evictions to see anything: {out}"
    );
    let off = stats_line(&out, "off");
    assert_eq!(&off[..3], ["False", "0", "0"], "{out}");
    assert!(num(off[3]) > 1000, "{out}");
}
