//! `zmem exp latency` end to end, small, on the built-in page generator (no
//! data file needed): every allocator measured, percentiles ordered, density
//! within each allocator's bound, the goal line and the plot there.
//!
//! Nothing here depends on timing: how often the background compaction
//! thread got to run is the scheduler's business, so the test checks the
//! compaction the experiment runs itself after every round.

mod common;

use common::{report, zmem};

#[test]
fn measures_every_allocator() {
    let dir = tempfile::tempdir().unwrap();
    let stem = dir.path().join("plot");
    let r = report(&[
        "exp",
        "latency",
        "--synthetic",
        "--pages",
        "1024",
        "--ops",
        "20000",
        "--rounds",
        "2",
        "--compact-ms",
        "2",
        "--plot",
        stem.to_str().unwrap(),
    ]);
    let allocs = r["allocators"].as_array().unwrap();
    let names: Vec<&str> = allocs.iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["zsmalloc", "zbud", "z3fold", "zblock"]);
    let objects = r["objects"].as_u64().unwrap();
    assert!(objects > 900, "{objects} objects");
    for a in allocs {
        let name = a["name"].as_str().unwrap();
        let all = &a["latency"]["all"];
        let count = all["count"].as_u64().unwrap();
        assert!(count >= 40_000, "{name}: {count} operations timed");
        let p: Vec<u64> = ["p50_ns", "p99_ns", "p999_ns", "p9999_ns", "max_ns"]
            .iter()
            .map(|k| all[k].as_u64().unwrap())
            .collect();
        assert!(p.windows(2).all(|w| w[0] <= w[1]), "{name}: {p:?}");
        let parts: u64 = ["store", "load", "free"]
            .iter()
            .map(|op| a["latency"][op]["count"].as_u64().unwrap())
            .sum();
        assert_eq!(parts, count, "{name}: every operation is one of the three");
        let m = &a["memory"];
        let per_page =
            m["objects_after_fill"].as_f64().unwrap() / m["pages_after_fill"].as_f64().unwrap();
        let bound = match name {
            "zbud" => 2.0,
            "z3fold" => 3.0,
            _ => f64::MAX,
        };
        assert!(per_page <= bound, "{name}: {per_page} objects a page");
        assert!(m["used_over_stored"].as_f64().unwrap() >= 1.0, "{name}");
        // One compaction after each round's timed phase, by construction;
        // the background runs are counted apart, however many there were.
        let c = &a["compaction"];
        let (runs, background, driven) = (
            c["runs"].as_u64().unwrap(),
            c["background_runs"].as_u64().unwrap(),
            c["driven_runs"].as_u64().unwrap(),
        );
        assert_eq!(driven, 2, "{name}: one driven compaction a round: {c}");
        assert_eq!(runs, background + driven, "{name}: {c}");
    }
    // Every allocator stored the same objects after the fill.
    let filled: Vec<f64> = allocs
        .iter()
        .map(|a| a["memory"]["objects_after_fill"].as_f64().unwrap())
        .collect();
    assert!(filled.iter().all(|&f| f == objects as f64), "{filled:?}");
    assert!(r["goal"]["density_ratio"].as_f64().unwrap() > 0.0);
    // The random frees fragment zsmalloc's zspages: compaction moves objects.
    assert!(allocs[0]["compaction"]["objs_moved"].as_u64().unwrap() > 0);
    assert!(stem.with_extension("svg").is_file());
    assert!(stem.with_extension("png").is_file());
}

#[test]
fn no_compaction_when_it_is_turned_off() {
    let r = report(&[
        "exp",
        "latency",
        "--synthetic",
        "--alloc",
        "zsmalloc",
        "--pages",
        "256",
        "--ops",
        "2000",
        "--compact-ms",
        "0",
        "--no-plot",
    ]);
    let c = &r["allocators"][0]["compaction"];
    for k in ["runs", "background_runs", "driven_runs", "objs_moved"] {
        assert_eq!(c[k].as_u64(), Some(0), "{k}: {c}");
    }
}

/// The report of `zmem exp latency` on the page generator for zsmalloc and
/// zbud, with `args` and no plot.
fn zsmalloc_and_zbud(args: &[&str]) -> serde_json::Value {
    let mut all = vec![
        "exp",
        "latency",
        "--synthetic",
        "--alloc",
        "zsmalloc,zbud",
        "--no-plot",
    ];
    all.extend(args);
    report(&all)
}

#[test]
fn compaction_every_n_operations_runs_exactly_that_many() {
    // 10,000 operations, one compaction asked for every 1,000: ten a round
    // whatever the machine's speed, plus the driven one after each round.
    let r = zsmalloc_and_zbud(&[
        "--pages",
        "512",
        "--ops",
        "10000",
        "--rounds",
        "2",
        "--compact-every-ops",
        "1000",
    ]);
    assert_eq!(r["compact_every_ops"].as_u64(), Some(1000));
    for a in r["allocators"].as_array().unwrap() {
        let c = &a["compaction"];
        assert_eq!(c["background_runs"].as_u64(), Some(20), "{c}");
        assert_eq!(c["driven_runs"].as_u64(), Some(2), "{c}");
        let m = &a["memory"];
        assert!(m["rss_over_used"].as_f64().unwrap() > 0.0, "{m}");
        // zsmalloc in default mode keeps a retained share; zbud only its
        // fixed cache unless asked (--retain-others).
        let divisor = m["retain_divisor"].as_u64().unwrap();
        match a["name"].as_str().unwrap() {
            "zsmalloc" => assert_eq!(divisor, zsmalloc::DEFAULT_RETAIN_DIVISOR as u64),
            _ => assert_eq!(divisor, 0),
        }
    }
    // The random frees fragment zsmalloc's zspages: compaction moves objects.
    assert!(
        r["allocators"][0]["compaction"]["objs_moved"]
            .as_u64()
            .unwrap()
            > 0
    );
}

#[test]
fn the_retained_share_is_set_per_allocator() {
    let r = zsmalloc_and_zbud(&[
        "--pages",
        "256",
        "--ops",
        "2000",
        "--retain-divisor",
        "16",
        "--retain-others",
        "--compact-every-ops",
        "500",
    ]);
    for a in r["allocators"].as_array().unwrap() {
        assert_eq!(a["memory"]["retain_divisor"].as_u64(), Some(16), "{a}");
    }
    let out = zmem(&[
        "exp",
        "latency",
        "--synthetic",
        "--compact-ms",
        "5",
        "--compact-every-ops",
        "500",
        "--no-plot",
    ]);
    assert_eq!(out.status.code(), Some(2), "the two timings conflict");
}

#[test]
fn unknown_allocators_are_usage_errors() {
    let out = zmem(&[
        "exp",
        "latency",
        "--synthetic",
        "--alloc",
        "slab",
        "--no-plot",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown allocator"));
}
