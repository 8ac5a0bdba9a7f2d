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

/// The kernel-compat `mem_used_total` of `zmem replay --mode kernel-compat`
/// on `input`, with `extra` flags.
fn replay_kernel_compat(input: &str, extra: &[&str]) -> (u64, String) {
    let mut args = vec![
        "replay",
        input,
        "--mode",
        "kernel-compat",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let r = json(&zmem(&args));
    let result = &r["stages"][0]["results"][0];
    (
        result["mm_stat"]["mem_used_total"].as_u64().unwrap(),
        result["config"].as_str().unwrap().to_string(),
    )
}

/// "What zram would use" is one figure: `zmem advise` reports the same
/// kernel-compat mem_used_total as `zmem replay`, with the running kernel's
/// compressor and with one given by --kernel-comp (also one that is not
/// among the candidates measured), in JSON to the byte and in the table to
/// a tenth of a MiB, and names the same kernel in its first line.
#[test]
fn advise_and_replay_agree_on_what_zram_would_use() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("real.bin");
    // 3 MiB of real data: 768 pages, taken whole (no sampling).
    std::fs::write(&input, testkit::real_data(3 << 20)).unwrap();
    let input = input.to_str().unwrap();
    for kernel in [None, Some("lz4"), Some("zstd"), Some("lzo-rle")] {
        let extra: Vec<&str> = kernel.map_or(Vec::new(), |k| vec!["--kernel-comp", k]);
        let (replayed, config) = replay_kernel_compat(input, &extra);
        let mut args = vec![
            "advise",
            input,
            "--comp",
            "lz4,zstd:3",
            "--latency-reads",
            "200",
        ];
        args.extend_from_slice(&extra);
        let mut json_args = args.clone();
        json_args.extend(["--format", "json"]);
        let a = json(&zmem(&json_args));
        assert!(
            a["sample"].as_str().unwrap().starts_with("all 768 pages"),
            "{}",
            a["sample"]
        );
        let z = &a["zram_default"];
        assert_eq!(z["store"].as_str().unwrap(), config, "{kernel:?}");
        assert_eq!(
            z["mem_used_total"].as_u64().unwrap(),
            replayed,
            "{kernel:?}"
        );
        assert_eq!(
            z["predicted_mem_used_total"].as_u64().unwrap(),
            replayed,
            "{kernel:?}"
        );
        if let Some(k) = kernel {
            assert_eq!(z["comp"], k);
        }
        // The table: the same MiB and the same kernel line as replay's.
        let text = String::from_utf8(zmem(&args).stdout).unwrap();
        let mib = format!("would use {:.1} MiB", replayed as f64 / 1048576.0);
        assert!(text.contains(&mib), "{kernel:?}: no '{mib}' in\n{text}");
        let mut replay_args = vec!["replay", input, "--mode", "kernel-compat"];
        replay_args.extend_from_slice(&extra);
        let replay_text = String::from_utf8(zmem(&replay_args).stdout).unwrap();
        assert_eq!(
            text.lines().next(),
            replay_text.lines().next(),
            "{kernel:?}"
        );
        assert!(text.lines().next().unwrap().starts_with("kernel-compat: "));
    }
    // A compressor zram does not know is one line and exit 2.
    let o = zmem(&["advise", input, "--kernel-comp", "lzma"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--kernel-comp") && err.contains("lzma"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// zram or zswap: `zmem advise` stores the sample in the kernel's zram and
/// in zswap, and its figures are `zmem replay`'s for the same pages (the
/// sample is the whole input here): zram's pool is "what zram would use",
/// zswap's pool is `replay --front zswap`'s pool_total_size; the parts of
/// the difference add up, and it recommends one of the two with a reason.
#[test]
fn advise_compares_zram_and_zswap_with_replays_figures() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("real.bin");
    let mut data = testkit::real_data(2 << 20);
    data.extend(vec![0u8; 64 << 10]);
    std::fs::write(&input, data).unwrap();
    let input = input.to_str().unwrap();
    let zswap = ["--zswap-comp", "lzo", "--ram", "1G"];
    let mut args = vec![
        "advise",
        input,
        "--comp",
        "lz4",
        "--latency-reads",
        "200",
        "--kernel-comp",
        "lz4",
        "--format",
        "json",
    ];
    args.extend(zswap);
    let a = json(&zmem(&args));
    let c = &a["zram_or_zswap"];
    assert_eq!(c["pages"], 528, "{c}");
    assert_eq!(c["zero_pages"], 16, "{c}");
    assert_eq!(c["zram"]["comp"], "lz4");
    assert_eq!(c["zswap"]["comp"], "lzo");
    assert_eq!(
        c["zram"]["pool_bytes"], a["zram_default"]["mem_used_total"],
        "{c}"
    );
    let mut replay = vec![
        "replay",
        input,
        "--mode",
        "kernel-compat",
        "--front",
        "zswap",
        "--format",
        "json",
    ];
    replay.extend(zswap);
    let r = json(&zmem(&replay));
    assert_eq!(
        c["zswap"]["pool_bytes"], r["zswap"]["stages"][0]["stats"]["debugfs"]["pool_total_size"],
        "{c}"
    );
    let total = |m: &serde_json::Value| m["total_bytes"].as_i64().unwrap();
    let parts: i64 = c["difference"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["bytes"].as_i64().unwrap())
        .sum();
    assert_eq!(parts, total(&c["zswap"]) - total(&c["zram"]), "{c}");
    assert!(["zram", "zswap"].contains(&c["recommend"].as_str().unwrap()));
    assert!(!c["reason"].as_str().unwrap().is_empty());
    // The table says it in words.
    let text = String::from_utf8(
        zmem(
            &args[..args.len() - 2 - zswap.len()]
                .iter()
                .chain(&zswap)
                .copied()
                .collect::<Vec<_>>(),
        )
        .stdout,
    )
    .unwrap();
    assert!(
        text.contains("zram or zswap, for the sampled pages"),
        "{text}"
    );
    assert!(
        text.contains("\n  use zram: ") || text.contains("\n  use zswap: "),
        "{text}"
    );
}
