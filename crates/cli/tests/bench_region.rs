//! `zmem bench region` on 4 MiB of real data at a 25% limit: every fault
//! kind has its row with ordered percentiles, every data set, pattern and
//! compressor its memory row, the region's reads equal the data's (the
//! benchmark fails otherwise), and compressible data takes less memory
//! than its size; its promotion-rate mode samples, judges both phases and
//! draws its plots; a zstd dictionary trained on the data's pages
//! (`--algorithm-params dict=FILE`) reaches the region's store, which keeps
//! the pages smaller with it, and a
//! settings string the compressors cannot take is refused on one line. It
//! needs a userfaultfd; elsewhere it says why and passes.

mod common;

use std::path::{Path, PathBuf};

use common::report;

/// 4 MiB of real data in a file of a fresh directory (kept while the
/// directory lives): the directory, the file and the data; `None`, having
/// said why, where no userfaultfd serves the kernel's faults.
fn real_data_file() -> Option<(tempfile::TempDir, PathBuf, Vec<u8>)> {
    if !testkit::userfaultfd_serves_kernel() {
        eprintln!("skipped: no access to /dev/userfaultfd");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let real = testkit::real_data(4 << 20);
    let path = dir.path().join("real.bin");
    std::fs::write(&path, &real).unwrap();
    Some((dir, path, real))
}

/// `zmem bench region` on the 4 MiB data file at `path`, then `extra`.
fn region_args<'a>(path: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "bench",
        "region",
        "--data",
        path.to_str().unwrap(),
        "--size",
        "4M",
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn faults_and_memory_at_the_limit() {
    let Some((_dir, path, _)) = real_data_file() else {
        return;
    };
    let r = report(&region_args(
        &path,
        &["--accesses", "20000", "--comp", "lz4,zstd"],
    ));
    let faults = r["faults"].as_array().unwrap();
    // Two compressors from the store, the first three times more (served
    // in the faulting thread, a handler that follows the faulting thread,
    // one that sleeps between faults), the zero page, the kernel's fault,
    // the wake-up and signal ceilings.
    let kinds: Vec<String> = faults
        .iter()
        .map(|f| format!("{} {}", f["kind"], f["compressor"]))
        .collect();
    assert_eq!(
        kinds,
        [
            r#""from the store" "lz4""#,
            r#""from the store" "zstd""#,
            r#""from the store, in the faulting thread" "lz4""#,
            r#""from the store, handler following" "lz4""#,
            r#""from the store, handler sleeping" "lz4""#,
            r#""never written (zero page)" null"#,
            r#""reference: the kernel's anonymous fault" null"#,
            r#""ceiling: a thread woken by a polling one" null"#,
            r#""ceiling: a signal to the thread itself" null"#,
        ],
        "{r}"
    );
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
    let Some((dir, path, _)) = real_data_file() else {
        return;
    };
    let stem = dir.path().join("promo");
    let out = common::zmem(&region_args(
        &path,
        &[
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
        ],
    ));
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

    let bad = common::zmem(&region_args(
        &path,
        &["--promotion-run", "4", "--sample-every", "2", "--no-plot"],
    ));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("--sample-every"), "{err}");
    assert!(bad.stdout.is_empty());
}

/// Compressed bytes per stored byte of each memory row.
fn stored_ratios(r: &serde_json::Value) -> Vec<f64> {
    r["at_limit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let orig = l["orig_data_size"].as_u64().unwrap();
            assert!(orig > 2 << 20, "{l}");
            let settled = l["settled_memory_ratio"].as_f64().unwrap();
            assert!(settled > 0.25 && settled < 1.0, "{l}");
            l["compr_data_size"].as_u64().unwrap() as f64 / orig as f64
        })
        .collect()
}

/// A dictionary from `zstd`'s trainer on the data's 4 KiB pages makes the
/// region's zstd pages smaller (the settings reach the region's store); a
/// missing file, an `algo=` and a compressor that takes no dictionary are
/// refused on one line.
#[test]
fn dictionary_stores_pages_smaller() {
    let Some((dir, path, real)) = real_data_file() else {
        return;
    };
    let pages: Vec<&[u8]> = real.chunks(4096).collect();
    let dict = zstd::dict::from_samples(&pages, 64 << 10).unwrap();
    let dict_path = dir.path().join("pages.dict");
    std::fs::write(&dict_path, dict).unwrap();
    let params = format!("dict={}", dict_path.display());
    let run = |extra: &[&str]| {
        let mut args = region_args(&path, &["--accesses", "20000", "--comp", "zstd"]);
        args.extend_from_slice(extra);
        report(&args)
    };
    let plain = stored_ratios(&run(&[]));
    let with_dict = stored_ratios(&run(&["--algorithm-params", &params]));
    assert_eq!(plain.len(), 2);
    for (p, d) in plain.iter().zip(&with_dict) {
        assert!(d < p, "with the dictionary {d}, without {p}");
    }

    for (comp, params, code, says) in [
        (
            "zstd",
            "dict=/nonexistent/pages.dict",
            2,
            "/nonexistent/pages.dict",
        ),
        ("zstd", "algo=zstd level=3", 2, "algo="),
        (
            "lzo",
            params.as_str(),
            1,
            "lzo does not take the parameter dict",
        ),
    ] {
        let out = common::zmem(&region_args(
            &path,
            &["--comp", comp, "--algorithm-params", params],
        ));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{params}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{err}");
    }
}
