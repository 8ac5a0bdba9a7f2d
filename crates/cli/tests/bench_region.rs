//! `zmem bench region` on 4 MiB of real data at a 25% limit: every fault
//! kind has its row with ordered percentiles, every data set, pattern and
//! compressor its memory row, the region's reads equal the data's (the
//! benchmark fails otherwise), and compressible data takes less memory
//! than its size. It needs a userfaultfd; elsewhere it says why and passes.

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
