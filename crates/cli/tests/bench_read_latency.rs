//! `zmem bench read-latency` on a small input: both pool phases and both
//! store phases (background compaction off, then on) are measured, every
//! figure is a real count, and the ratios are the phases' own.

mod common;

use common::{json, zmem};

#[test]
fn pool_and_store_phases_are_measured() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.bin");
    std::fs::write(&path, testkit::real_data(4 << 20)).unwrap();
    let out = zmem(&[
        "bench",
        "read-latency",
        "--data",
        path.to_str().unwrap(),
        "--seconds",
        "0.3",
        "--mode",
        "default",
        "--format",
        "json",
    ]);
    let r = json(&out);
    let phases = r["phases"].as_array().unwrap();
    let store = r["store_phases"].as_array().unwrap();
    assert_eq!(phases.len(), 2);
    assert_eq!(store.len(), 2);
    for p in phases.iter().chain(store) {
        assert!(p["reads"].as_u64().unwrap() > 0, "{p}");
        let (p50, p999) = (
            p["p50_ns"].as_u64().unwrap(),
            p["p999_ns"].as_u64().unwrap(),
        );
        assert!(p50 > 0 && p999 >= p50, "{p}");
    }
    for p in store {
        assert!(p["churn_rounds"].as_u64().unwrap() > 0, "{p}");
    }
    // Background compaction was off in the first store phase.
    assert_eq!(store[0]["compactions"], 0);
    let ratio = r["auto_p999_ratio"].as_f64().unwrap();
    let own = store[1]["p999_ns"].as_f64().unwrap() / store[0]["p999_ns"].as_f64().unwrap();
    assert!((ratio - own).abs() < 1e-9, "{ratio} vs {own}");
}
