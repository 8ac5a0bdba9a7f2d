//! `zmem bench store` on a small generated input, without the kernel's zram:
//! every figure of its JSON report is a positive speed, the ceiling lines
//! (compression plus the one copy a store makes, into resident and into
//! fresh memory) are in its table, and each ratio is the quotient of the
//! figures it names.

mod common;

use common::{report, stdout_of};

#[test]
fn figures_ceiling_and_ratios() {
    let dir = tempfile::tempdir().unwrap();
    let mut data = testkit::real_data(1 << 20);
    data[8192..5 * 4096].fill(0);
    let path = dir.path().join("small.bin");
    std::fs::write(&path, &data).unwrap();
    let file = path.to_str().unwrap();
    let args = [
        "bench",
        "store",
        file,
        "--size",
        "1M",
        "--rounds",
        "1",
        "--no-kernel",
        "--comp",
        "lzo-rle",
    ];

    let table = stdout_of(&args);
    for line in [
        "ceiling: compress + one copy into resident memory",
        "into fresh memory, 4 KiB pages",
    ] {
        assert!(table.contains(line), "no {line:?} in\n{table}");
    }

    let r = report(&args);
    let f = &r.as_array().expect("one entry per configuration")[0];
    assert_eq!(f["pages"], 256);
    for key in [
        "raw_compress",
        "compress_copy_1t",
        "compress_copy_2t",
        "compress_copy_fresh_small",
        "compress_copy_fresh_huge",
        "store_write_1t",
        "store_write_2t",
        "store_overwrite_1t",
        "store_churn_1t",
        "raw_decompress",
        "store_read_1t",
        "store_read_2t",
    ] {
        let v = f[key].as_f64().unwrap_or_else(|| panic!("{key} in {f}"));
        assert!(v.is_finite() && v > 0.0, "{key} = {v}");
    }
    let ratio = |a: &str, b: &str| f[a].as_f64().unwrap() / f[b].as_f64().unwrap();
    for (r, a, b) in [
        ("write_vs_raw", "store_write_1t", "raw_compress"),
        ("read_vs_raw", "store_read_1t", "raw_decompress"),
        ("write_2t_vs_1t", "store_write_2t", "store_write_1t"),
    ] {
        let got = f[r].as_f64().unwrap();
        assert!((got - ratio(a, b)).abs() < 1e-9, "{r} = {got}");
    }
    assert!(f["kernel_write"].is_null());
    assert!(f["kernel_skipped"]
        .as_str()
        .unwrap()
        .contains("--no-kernel"));
}
