//! `zmem bench compressors` on a small generated input: its table has its
//! columns and a line per compressor, its JSON figures are positive and each
//! ratio is the input over the compressed bytes; without data it names the
//! script that makes the data sets.

mod common;

use common::{report, stdout_of};

/// The default set's rows, in order: the kernel's compressors by their
/// names, lz4, lz4hc and deflate also by the encoders whose output is the
/// kernel's.
const ROWS: [&str; 9] = [
    "lzo-rle",
    "lzo",
    "lz4",
    "lz4 [kernel]",
    "lz4hc",
    "lz4hc [kernel]",
    "zstd level=-1",
    "deflate",
    "deflate [kernel]",
];

/// 2 MiB of real data (system libraries), a few zero pages and a few pages
/// of noise, in a file of the temporary directory.
fn input(dir: &std::path::Path) -> std::path::PathBuf {
    let mut data = testkit::real_data(2 << 20);
    data[4096..3 * 4096].fill(0);
    data.extend(testkit::noise(4 * 4096, 17));
    let path = dir.join("small.bin");
    std::fs::write(&path, &data).unwrap();
    path
}

#[test]
fn table_json_and_missing_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = input(dir.path());
    let file = path.to_str().unwrap();

    let table = stdout_of(&[
        "bench",
        "compressors",
        "--data",
        file,
        "--rounds",
        "1",
        "--no-kernel",
    ]);
    let header = table
        .lines()
        .find(|l| l.starts_with("corpus"))
        .expect("a header line");
    let columns: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(
        columns,
        [
            "corpus",
            "compressor",
            "pages",
            "ratio",
            "compress",
            "MB/s",
            "decompress",
            "MB/s",
            "kernel",
            "write",
            "kernel",
            "read"
        ]
    );
    for comp in ROWS {
        assert!(
            table
                .lines()
                .any(|l| l.starts_with("small.bin") && l.contains(&format!(" {comp} "))),
            "no line for {comp} in\n{table}"
        );
    }

    // --input is the same as --data; --comp adds a compressor. The kernel's
    // zram runs where it can (root and zram-control), else says why not.
    let r = report(&[
        "bench",
        "compressors",
        "--input",
        file,
        "--rounds",
        "2",
        "--comp",
        "lz4hc,lz4",
    ]);
    assert_eq!(r["page_size"], 4096);
    assert_eq!(r["rounds"], 2);
    let rows = r["rows"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|row| row["compressor"].as_str().unwrap())
        .collect();
    assert_eq!(names, ROWS);
    let implementations: Vec<&str> = rows
        .iter()
        .map(|row| row["implementation"].as_str().unwrap())
        .collect();
    assert_eq!(
        implementations[..8],
        [
            "zmem-lzo",
            "zmem-lzo",
            "liblz4 1.10",
            "zmem-lz4",
            "liblz4 1.10",
            "zmem-lz4",
            "libzstd 1.5.7",
            "zlib-rs",
        ]
    );
    // The C zlib, named with the version it reports.
    assert!(
        implementations[8].starts_with("zlib 1."),
        "{implementations:?}"
    );
    let len = std::fs::metadata(&path).unwrap().len();
    for row in rows {
        let name = row["compressor"].as_str().unwrap();
        assert_eq!(row["corpus"], file);
        assert_eq!(row["pages"].as_u64().unwrap() * 4096, len);
        assert_eq!(row["input_bytes"].as_u64().unwrap(), len);
        let compressed = row["compressed_bytes"].as_u64().unwrap();
        // Compressible data overall, and the noise pages cost at least their size.
        assert!(
            compressed < len && compressed > 4 * 4096,
            "{name}: {compressed}"
        );
        let ratio = row["ratio"].as_f64().unwrap();
        assert!(
            (ratio - len as f64 / compressed as f64).abs() < 1e-9,
            "{name}: ratio {ratio} for {len} / {compressed}"
        );
        for key in ["compress_mb_s", "decompress_mb_s"] {
            let v = row[key].as_f64().unwrap();
            assert!(v.is_finite() && v > 0.0, "{name} {key} {v}");
        }
        match row["kernel_skipped"].as_str() {
            Some(why) => {
                assert!(!why.is_empty());
                assert!(row["kernel_write_mb_s"].is_null() && row["kernel_read_mb_s"].is_null());
            }
            None => {
                for key in ["kernel_write_mb_s", "kernel_read_mb_s"] {
                    let v = row[key].as_f64().unwrap();
                    assert!(v.is_finite() && v > 0.0, "{name} {key} {v}");
                }
                // The kernel stores no bytes for the zero pages, so its
                // compressed size is positive and the data's is larger.
                let kernel = row["kernel_compr_data_size"].as_u64().unwrap();
                assert!(kernel > 0 && kernel <= len, "{name}: kernel {kernel}");
            }
        }
    }
    // lzo-rle and lzo compress the same data to within a few bytes a page,
    // and so do liblz4 and the kernel's lz4 (an older import of the same
    // algorithm).
    let size = |i: usize| rows[i]["compressed_bytes"].as_u64().unwrap() as f64;
    assert!((size(0) / size(1) - 1.0).abs() < 0.02);
    assert!((size(2) / size(3) - 1.0).abs() < 0.01);
    assert!((size(4) / size(5) - 1.0).abs() < 0.01);

    // Without --data and without the data sets: one clear error.
    let empty = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_zmem"))
        .args(["bench", "compressors", "--rounds", "1"])
        .env("ZMEM_DATA", empty.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("scripts/make-corpus") && err.contains("linux256.bin"),
        "{err}"
    );
}
