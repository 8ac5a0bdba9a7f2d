//! `zmem bench region` on 4 MiB of real data at a 25% limit: every fault
//! kind has its row with ordered percentiles, every data set, pattern and
//! compressor its memory row, the region's reads equal the data's (the
//! benchmark fails otherwise), and compressible data takes less memory
//! than its size; its promotion-rate mode samples, judges both phases and
//! draws its plots. It needs a userfaultfd; elsewhere it says why and passes.

mod common;

use common::report;

#[test]
fn faults_and_memory_at_the_limit() {
    if !testkit::userfaultfd_serves_kernel() {
        eprintln!("skipped: no access to /dev/userfaultfd");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("real.bin");
    std::fs::write(&path, testkit::real_data(4 << 20)).unwrap();
    let r = report(&[
        "bench",
        "region",
        "--data",
        path.to_str().unwrap(),
        "--size",
        "4M",
        "--accesses",
        "20000",
        "--comp",
        "lz4,zstd",
    ]);
    let faults = r["faults"].as_array().unwrap();
    // Two compressors from the store, the zero page, the kernel's fault.
    assert_eq!(faults.len(), 4, "{r}");
    for f in faults {
        assert_eq!(f["faults"].as_u64().unwrap(), 1024, "{f}");
        let (p50, p99, max) = (
            f["p50_us"].as_f64().unwrap(),
            f["p99_us"].as_f64().unwrap(),
            f["max_us"].as_f64().unwrap(),
        );
        assert!(p50 > 0.0 && p50 <= p99 && p99 <= max, "{f}");
    }
    let rows = r["at_limit"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{r}");
    for l in rows {
        assert_eq!(l["limit_bytes"].as_u64().unwrap(), 1 << 20, "{l}");
        assert!(
            l["resident_bytes"].as_u64().unwrap() <= (1 << 20) + (64 << 12),
            "{l}"
        );
        assert!(l["faults_from_store"].as_u64().unwrap() > 0, "{l}");
        let ratio = l["memory_ratio"].as_f64().unwrap();
        assert!(ratio > 0.25 && ratio < 1.0, "{l}");
    }
}

/// `--promotion-run` with tiny phases: a sample every half second with its
/// rate, target, threshold and memory, both phases judged, the plots drawn;
/// a run whose rate never settled (too short for the controller) says so on
/// one line and exits with 1, after the report. A shape that leaves too few
/// samples is refused on one line.
#[test]
fn promotion_run_samples_and_plots() {
    if !testkit::userfaultfd_serves_kernel() {
        eprintln!("skipped: no access to /dev/userfaultfd");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("real.bin");
    std::fs::write(&path, testkit::real_data(4 << 20)).unwrap();
    let stem = dir.path().join("promo");
    let out = common::zmem(&[
        "bench",
        "region",
        "--data",
        path.to_str().unwrap(),
        "--size",
        "4M",
        "--comp",
        "lz4",
        "--promotion-run",
        "4",
        "--controller-period",
        "0.5",
        "--sample-every",
        "0.5",
        "--read-rate",
        "20000",
        "--plot",
        stem.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => {}
        Some(1) => {
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
            assert!(err.contains("never settled"), "{err}");
        }
        other => panic!("status {other:?}: {err}"),
    }
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let samples = r["samples"].as_array().unwrap();
    assert!(samples.len() >= 7, "{r}");
    for s in samples {
        assert_eq!(s["target_percent"].as_f64().unwrap(), 0.2, "{s}");
        assert!(s["rate_percent"].as_f64().unwrap() >= 0.0, "{s}");
        assert!(s["threshold_s"].as_f64().unwrap() > 0.0, "{s}");
        assert!(s["working_set_pages"].as_u64().unwrap() > 0, "{s}");
        assert!(s["resident_bytes"].as_u64().unwrap() <= 4 << 20, "{s}");
    }
    assert!(samples.iter().any(|s| s["phase"] == "A"), "{r}");
    assert!(samples.iter().any(|s| s["phase"] == "B"), "{r}");
    assert_eq!(r["phases"].as_array().unwrap().len(), 2, "{r}");
    assert!(r["reads"].as_u64().unwrap() > 1000, "{r}");
    for ext in ["svg", "png"] {
        for name in ["promo", "promo-threshold"] {
            let f = dir.path().join(format!("{name}.{ext}"));
            assert!(std::fs::metadata(&f).unwrap().len() > 1000, "{f:?}");
        }
    }

    let bad = common::zmem(&[
        "bench",
        "region",
        "--data",
        path.to_str().unwrap(),
        "--size",
        "4M",
        "--promotion-run",
        "4",
        "--sample-every",
        "2",
        "--no-plot",
    ]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("--sample-every"), "{err}");
    assert!(bad.stdout.is_empty());
}
