//! `zmem exp latency` end to end, small, on the built-in page generator (no
//! data file needed): every allocator measured, percentiles ordered, density
//! within each allocator's bound, the goal line and the plot there.

mod common;

use common::{json, zmem};

#[test]
fn measures_every_allocator() {
    let dir = std::env::temp_dir().join(format!("zmem-exp-latency-{}", std::process::id()));
    let stem = dir.join("plot");
    let r = json(&zmem(&[
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
        "--format",
        "json",
        "--plot",
        stem.to_str().unwrap(),
    ]));
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
    }
    // Every allocator stored the same objects after the fill.
    let filled: Vec<f64> = allocs
        .iter()
        .map(|a| a["memory"]["objects_after_fill"].as_f64().unwrap())
        .collect();
    assert!(filled.iter().all(|&f| f == objects as f64), "{filled:?}");
    assert!(r["goal"]["density_ratio"].as_f64().unwrap() > 0.0);
    assert!(allocs[0]["compaction"]["runs"].as_u64().unwrap() > 0);
    assert!(stem.with_extension("svg").is_file());
    assert!(stem.with_extension("png").is_file());
    let _ = std::fs::remove_dir_all(&dir);
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
