//! `zmem advise` end to end: real compressors and stores on a small input.

mod common;

use common::{json, zmem};

#[test]
fn advise_measures_the_candidates_and_ranks_them_by_memory() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data.bin");
    // 1 MiB of real text and binaries: the test's own executable's bytes
    // and this source tree's README, repeated to size.
    let mut data = std::fs::read(env!("CARGO_BIN_EXE_zmem")).unwrap();
    data.truncate(768 * 1024);
    data.extend(std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap());
    data.resize(1 << 20, 0);
    std::fs::write(&input, &data).unwrap();
    let out = zmem(&[
        "advise",
        input.to_str().unwrap(),
        "--comp",
        "lz4,lzo-rle,zstd:3,zstd:1:dict",
        "--sample-pages",
        "128",
        "--latency-reads",
        "500",
        "--format",
        "json",
        "--plot",
        dir.path().join("fronts").to_str().unwrap(),
    ]);
    let a = json(&out);
    // Both Pareto fronts drawn, as SVG and PNG.
    for f in ["fronts-write.svg", "fronts-read.svg"] {
        let svg = std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert!(svg.contains("<svg"), "{f}");
    }
    for f in ["fronts-write.png", "fronts-read.png"] {
        let png = std::fs::read(dir.path().join(f)).unwrap();
        assert_eq!(&png[1..4], b"PNG", "{f}");
    }
    assert_eq!(a["recommendations"].as_array().unwrap().len(), 3);
    assert!(!a["pareto_memory_read"].as_array().unwrap().is_empty());
    assert_eq!(a["sample_pages"], 128);
    assert!(
        a["sample"].as_str().unwrap().contains("of 256 pages"),
        "{}",
        a["sample"]
    );
    let c = a["candidates"].as_array().unwrap();
    assert_eq!(c.len(), 4);
    let mem: Vec<u64> = c
        .iter()
        .map(|r| r["mem_used_total"].as_u64().unwrap())
        .collect();
    assert!(mem.windows(2).all(|w| w[0] <= w[1]), "{mem:?}");
    for r in c {
        assert!(r["ratio"].as_f64().unwrap() > 1.0, "{r}");
        assert!(r["compress_mbps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["compr_data_size"].as_u64().unwrap() <= r["mem_used_total"].as_u64().unwrap());
    }
    assert_eq!(a["allocators"].as_array().unwrap().len(), 10);
    assert!(a["advice"][0]
        .as_str()
        .unwrap()
        .starts_with("least memory: "));

    // Bad candidates are usage errors naming the problem; no pages is a failure.
    for (bad, what) in [
        ("zstd:99", "level"),
        ("lzo:1:dict", "dictionary"),
        ("lzma", "lzma"),
    ] {
        let o = zmem(&["advise", input.to_str().unwrap(), "--comp", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(what), "{bad}: {err}");
    }
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let o = zmem(&["advise", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
}
