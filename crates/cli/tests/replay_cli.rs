//! `zmem replay`, `zmem exp chain` and `zmem exp merge` through the binary.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{assert_ok, report, zmem};

/// A fresh directory of its own for one test, removed when dropped (also
/// when the test fails).
fn tmp(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("zmem-replay-{tag}-"))
        .tempdir()
        .unwrap()
}

/// A tree of text and binary-like files under two top-level directories.
fn tree(root: &Path) {
    for (dir, n) in [("big", 40), ("small", 10)] {
        fs::create_dir_all(root.join(dir).join("sub")).unwrap();
        for i in 0..n {
            let text: String = (0..(i * 997 % 20000 + 1))
                .map(|k| char::from(b"abcdefgh ijk\n"[(k * 7 + i) % 13]))
                .collect();
            fs::write(root.join(dir).join(format!("f{i}.txt")), text).unwrap();
            let bin: Vec<u8> = (0..(i * 3001 % 9000)).map(|k| (k * k + i) as u8).collect();
            fs::write(root.join(dir).join("sub").join(format!("b{i}")), bin).unwrap();
        }
    }
}

/// Lays out [`tree`] at `d/name` and archives it as `d/name.tar`, its
/// members under `name/`.
fn tree_tar(d: &Path, name: &str) -> PathBuf {
    tree(&d.join(name));
    let tar = d.join(format!("{name}.tar"));
    let st = Command::new("tar")
        .arg("-cf")
        .arg(&tar)
        .arg("-C")
        .arg(d)
        .arg(name)
        .status()
        .unwrap();
    assert!(st.success());
    tar
}

#[test]
fn default_corpus_runs_and_says_what_it_used() {
    let out = zmem(&["replay", "--default-size", "4M"]);
    assert_ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    // The first line says which kernel kernel-compat stands for, the
    // second what was read, by input; the third the corpus.
    let mut lines = text.lines();
    let kernel = lines.next().unwrap_or("");
    assert!(kernel.starts_with("kernel-compat: "), "{text}");
    let comp = kernel
        .split("defaults to ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no default compressor in {kernel:?}"));
    let read = lines.next().unwrap_or("");
    assert!(
        read.starts_with("read ") && read.contains(" from /usr/"),
        "{text}"
    );
    assert!(
        lines
            .next()
            .unwrap_or("")
            .starts_with("corpus: built-in default corpus"),
        "{text}"
    );
    assert!(text.contains("mm_stat zsmalloc/default/lz4/4K:"), "{text}");
    // Kernel-compat, what the kernel's zram would use, beside default mode,
    // and the difference in one line.
    assert!(
        text.contains(&format!("mm_stat zsmalloc/kernel-compat/{comp}/4K:")),
        "{text}"
    );
    assert!(
        text.contains("verify: every page of every store read back identical"),
        "{text}"
    );
    let last = text.lines().last().unwrap_or("");
    assert!(
        last.starts_with("default mode: mem_used_total ")
            && last.contains(" MiB after fill, ")
            && (last.contains("% less than kernel-compat's ")
                || last.contains("% more than kernel-compat's ")),
        "{text}"
    );
}

/// `--kernel-comp` answers for another kernel: its default compressor in
/// kernel-compat, said first; a compressor named with `--comp` still wins.
#[test]
fn kernel_compat_stands_for_the_kernel_given() {
    let text = common::stdout_of(&["replay", "--default-size", "1M", "--kernel-comp", "lz4"]);
    let first = text.lines().next().unwrap_or("");
    assert_eq!(
        first, "kernel-compat: a kernel whose zram defaults to lz4 (--kernel-comp)",
        "{text}"
    );
    assert!(
        text.contains("mm_stat zsmalloc/kernel-compat/lz4/4K:"),
        "{text}"
    );
    let text = common::stdout_of(&[
        "replay",
        "--default-size",
        "1M",
        "--kernel-comp",
        "lz4",
        "--mode",
        "kernel-compat",
        "--comp",
        "zstd",
    ]);
    assert!(
        text.contains("mm_stat zsmalloc/kernel-compat/zstd/4K:"),
        "{text}"
    );
    // Only kernel-compat stands for a kernel.
    let text = common::stdout_of(&["replay", "--default-size", "1M", "--mode", "default"]);
    assert!(text.starts_with("read "), "{text}");
}

#[test]
fn the_default_comparison_is_in_the_json_too_and_not_with_a_mode() {
    let r = report(&["replay", "--default-size", "1M", "--no-verify"]);
    let configs: Vec<&str> = r["stages"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["config"].as_str().unwrap())
        .collect();
    assert_eq!(
        configs,
        [
            "zsmalloc/default/lz4/4K",
            "zsmalloc/kernel-compat/lzo-rle/4K"
        ]
    );
    let c = &r["vs_kernel_compat"][0];
    assert_eq!(c["stage"], "fill");
    assert_eq!(c["config"], configs[0]);
    assert_eq!(c["kernel_compat_config"], configs[1]);
    let fill = &r["stages"][0]["results"];
    assert_eq!(c["mem_used_total"], fill[0]["mm_stat"]["mem_used_total"]);
    assert_eq!(
        c["kernel_compat_mem_used_total"],
        fill[1]["mm_stat"]["mem_used_total"]
    );
    let (a, b) = (
        c["mem_used_total"].as_f64().unwrap(),
        c["kernel_compat_mem_used_total"].as_f64().unwrap(),
    );
    let pct = c["percent_less"].as_f64().unwrap();
    assert!((pct - (1.0 - a / b) * 100.0).abs() < 1e-9, "{c}");
    let one = report(&["replay", "--default-size", "1M", "--mode", "default"]);
    assert_eq!(one["stages"][0]["results"].as_array().unwrap().len(), 1);
    assert!(one.get("vs_kernel_compat").is_none(), "{one}");
}

#[test]
fn side_by_side_stages_add_up() {
    let dir = tmp("sbs");
    let d = dir.path();
    let t = d.join("t");
    tree(&t);
    let discards = d.join("discards.txt");
    // Two modes by two compressors, compacted: four stores side by side.
    let four = [
        "replay",
        t.to_str().unwrap(),
        "--mode",
        "default,kernel-compat",
        "--comp",
        "lz4,zstd",
        "--compact",
    ];
    let discards = discards.to_str().unwrap();
    let r = report(
        &[
            &four[..],
            &[
                "--free-fraction",
                "0.5",
                "--seed",
                "3",
                "--write-discards",
                discards,
            ],
        ]
        .concat(),
    );
    assert_eq!(stage_names(&r), ["fill", "discard", "compact"]);
    let stages = r["stages"].as_array().unwrap();
    let pages = r["verified_pages"].as_u64().unwrap();
    assert!(pages > 100);
    let discarded = fs::read_to_string(discards).unwrap().lines().count() as u64;
    assert!(
        discarded > pages / 4 && discarded < pages * 3 / 4,
        "{discarded} of {pages}"
    );
    for (i, res) in stages[0]["results"].as_array().unwrap().iter().enumerate() {
        let fill = &res["mm_stat"];
        let disc = &stages[1]["results"][i]["mm_stat"];
        let comp = &stages[2]["results"][i]["mm_stat"];
        assert_eq!(fill["orig_data_size"].as_u64().unwrap(), pages * 4096);
        assert_eq!(
            disc["orig_data_size"].as_u64().unwrap(),
            (pages - discarded) * 4096
        );
        assert!(comp["mem_used_total"].as_u64() <= disc["mem_used_total"].as_u64());
        assert!(comp["mem_used_total"].as_u64() >= comp["compr_data_size"].as_u64());
        assert_eq!(
            stages[2]["results"][i]["io_stat"]["notify_free"]
                .as_u64()
                .unwrap(),
            discarded
        );
    }
    // The same discards from the file give the same figures.
    let again = report(&[&four[..], &["--discard-pages", discards]].concat());
    for i in 0..4 {
        assert_eq!(
            again["stages"][2]["results"][i]["mm_stat"],
            r["stages"][2]["results"][i]["mm_stat"]
        );
    }
}

#[test]
fn tar_members_are_laid_out_like_files_and_raw_is_not() {
    let dir = tmp("tar");
    let d = dir.path();
    let tar = tree_tar(d, "t");
    let tree_run = report(&["replay", d.join("t").to_str().unwrap()]);
    let tar_run = report(&["replay", tar.to_str().unwrap()]);
    let raw_run = report(&["replay", tar.to_str().unwrap(), "--raw"]);
    let orig = |r: &serde_json::Value| {
        r["stages"][0]["results"][0]["mm_stat"]["orig_data_size"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(orig(&tree_run), orig(&tar_run), "same files, same pages");
    let tar_len = fs::metadata(&tar).unwrap().len();
    assert_eq!(orig(&raw_run), tar_len.div_ceil(4096) * 4096);
}

#[test]
fn bad_input_gets_one_clear_error() {
    let dir = tmp("bad");
    let d = dir.path();
    fs::write(d.join("f"), vec![1u8; 10000]).unwrap();
    let f = d.join("f");
    let f = f.to_str().unwrap();
    let cases: [(&[&str], i32, &str); 6] = [
        (&["replay", f, "--free-fraction", "2"], 2, "fraction"),
        (&["replay", f, "--alloc", "slab"], 2, "unknown allocator"),
        (&["replay", f, "--page-size", "3000"], 2, "page size"),
        (&["replay", "/nonexistent/zmem"], 1, "No such file"),
        (&["replay", f, "--comp", "lzma"], 2, "lzma"),
        (
            &["replay", f, "--chain", "0", "--mode", "kernel-compat"],
            2,
            "chain",
        ),
    ];
    assert_refused(&cases);
    let list = d.join("list");
    fs::write(&list, "0\n99\n").unwrap();
    let out = zmem(&["replay", f, "--discard-pages", list.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("page 99"));
    fs::write(&list, "0\nx\n").unwrap();
    let out = zmem(&["replay", f, "--discard-pages", list.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 2"));
}

#[test]
fn exp_chain_runs_small_and_draws() {
    let dir = tmp("chain");
    let d = dir.path();
    let r = report(&[
        "exp",
        "chain",
        "--rounds",
        "1",
        "--max-size",
        "64K",
        "--step",
        "4K",
        "--repeat",
        "20",
        "--plot",
        d.join("c").to_str().unwrap(),
    ]);
    let rows = r["rows"].as_array().unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| r["chain"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [4, 5, 6, 8]
    );
    let orig = rows[0]["mm_stat"]["orig_data_size"].as_u64().unwrap();
    assert!(rows
        .iter()
        .all(|r| r["mm_stat"]["orig_data_size"].as_u64() == Some(orig)));
    assert!(rows
        .iter()
        .all(|r| r["mm_stat"]["compr_data_size"] == rows[0]["mm_stat"]["compr_data_size"]));
    assert!(d.join("c.svg").exists() && d.join("c.png").exists());
}

#[test]
fn exp_merge_removes_directories_largest_first() {
    let dir = tmp("merge");
    let d = dir.path();
    let tar = tree_tar(d, "src");
    let r = report(&["exp", "merge", "--tar", tar.to_str().unwrap(), "--no-plot"]);
    assert_eq!(r["removed"], serde_json::json!(["big", "small"]));
    for c in r["configs"].as_array().unwrap() {
        let rows = c["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[2]["orig"].as_u64(), Some(0), "everything removed");
        assert!(rows[1]["orig"].as_u64() < rows[0]["orig"].as_u64());
    }
    // A tar that is missing is made where --tar says (from Debian's
    // linux-source-6.1); one that cannot be made there is one clear error.
    let file = d.join("a-file");
    fs::write(&file, b"not a directory").unwrap();
    let under_a_file = file.join("linux.tar");
    let missing = zmem(&["exp", "merge", "--tar", under_a_file.to_str().unwrap()]);
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains(&file.display().to_string()), "{err}");
    assert_eq!(
        err.trim_end()
            .lines()
            .filter(|l| l.starts_with("error"))
            .count(),
        1,
        "{err}"
    );
}

#[test]
fn units_are_compressed_whole_over_system_pages() {
    let dir = tmp("unit");
    let tar = tree_tar(dir.path(), "t");
    let r = report(&[
        "replay",
        tar.to_str().unwrap(),
        "--raw",
        "--unit",
        "4K,16K,64K",
        "--mode",
        "default,kernel-compat",
    ]);
    let configs = r["configs"].as_array().unwrap();
    assert_eq!(configs.len(), 6);
    let fill = r["stages"][0]["results"].as_array().unwrap();
    // Every block was read back identical, and each store counts its
    // blocks in units and its memory in 4 KiB pages.
    assert!(r["verified_pages"].as_u64().unwrap() > 0);
    for (c, res) in configs.iter().zip(fill) {
        let unit = c["unit"].as_u64().unwrap_or(4096);
        assert_eq!(c["page_size"].as_u64(), Some(4096));
        let label = res["config"].as_str().unwrap();
        assert_eq!(
            label.ends_with("/unit16K") || label.ends_with("/unit64K"),
            unit > 4096,
            "{label}"
        );
        let mm = &res["mm_stat"];
        assert_eq!(mm["orig_data_size"].as_u64().unwrap() % unit, 0, "{label}");
        assert_eq!(mm["mem_used_total"].as_u64().unwrap() % 4096, 0, "{label}");
        assert!(
            mm["mem_used_total"].as_u64() >= mm["compr_data_size"].as_u64(),
            "{label}"
        );
    }
    // Larger units compress better: default mode at 64 KiB stores fewer
    // bytes than at 4 KiB, in less memory.
    let default = |unit: &str| {
        fill.iter()
            .find(|res| res["config"].as_str().unwrap() == format!("zsmalloc/default/lz4/4K{unit}"))
            .map(|res| res["mm_stat"].clone())
            .unwrap()
    };
    let (small, large) = (default(""), default("/unit64K"));
    assert!(large["compr_data_size"].as_u64() < small["compr_data_size"].as_u64());
    assert!(large["mem_used_total"].as_u64() < small["mem_used_total"].as_u64());
    // A unit below the page is a one-line usage error.
    let out = zmem(&["replay", "--unit", "4K", "--page-size", "16K"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("--unit"), "{err}");
}

#[test]
fn bad_page_sizes_and_export_sizes_are_one_line_usage_errors() {
    for (args, flag) in [
        (&["replay", "--page-size", "0"][..], "--page-size"),
        (&["replay", "--page-size", "12K"][..], "--page-size"),
        (&["replay", "--unit", "12K"][..], "--unit"),
        (&["serve", "--export", "a:xx"][..], "--export"),
        (&["serve", "--export", "a:2T"][..], "--export"),
    ] {
        let out = zmem(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}

/// 240 pages: every tenth zero (same-filled), every seventh noise (stored
/// raw, "huge"), the rest text.
fn mixed_pages(path: &Path) {
    let mut data = Vec::new();
    for i in 0..240usize {
        let page: Vec<u8> = if i % 10 == 0 {
            vec![0; 4096]
        } else if i % 7 == 0 {
            testkit::noise(4096, 0x9e37_79b9 ^ i as u32)
        } else {
            (0..4096)
                .map(|k| b"the quick brown fox, page "[(k * 3 + i) % 26])
                .collect()
        };
        data.extend(page);
    }
    fs::write(path, data).unwrap();
}

/// Runs each case's arguments, which must exit with its code and one line on
/// standard error containing its text.
fn assert_refused(cases: &[(&[&str], i32, &str)]) {
    for &(args, code, needle) in cases {
        let out = zmem(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

/// The names of a report's stages, in order.
fn stage_names(r: &serde_json::Value) -> Vec<&str> {
    r["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect()
}

/// The stage named `name` (the `n`th of that name, from 0).
fn stage<'a>(r: &'a serde_json::Value, name: &str, n: usize) -> &'a serde_json::Value {
    r["stages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == name)
        .nth(n)
        .unwrap_or_else(|| panic!("no stage {name} #{n}: {r}"))
}

/// The report of `zmem replay` over [`mixed_pages`] with every page marked
/// idle and written back (`--mark-idle all --writeback idle`), with `extra`
/// flags; `tag` names its scratch directory.
fn idle_writeback_report(tag: &str, extra: &[&str]) -> serde_json::Value {
    let dir = tmp(tag);
    let f = dir.path().join("mixed");
    mixed_pages(&f);
    let mut args = vec!["replay", f.to_str().unwrap()];
    args.extend(extra);
    args.extend(["--mark-idle", "all", "--writeback", "idle"]);
    report(&args)
}

#[test]
fn writeback_idle_takes_every_idle_page_that_is_not_same_filled() {
    let r = idle_writeback_report("wb", &["--mode", "default,kernel-compat"]);
    let names = stage_names(&r);
    assert_eq!(names, ["fill", "mark-idle", "writeback"]);
    assert_eq!(r["backing_devs"].as_array().unwrap().len(), 2);
    assert_eq!(r["backing_devs_temporary"], true);
    for c in 0..2 {
        let fill = &stage(&r, "fill", 0)["results"][c];
        let idle = &stage(&r, "mark-idle", 0)["results"][c];
        let wb = &stage(&r, "writeback", 0)["results"][c];
        let stored = fill["mm_stat"]["orig_data_size"].as_u64().unwrap() / 4096;
        let same = fill["mm_stat"]["same_pages"].as_u64().unwrap();
        assert_eq!((stored, same), (240, 24), "{fill}");
        assert_eq!(idle["pages"]["marked"], stored - same, "{idle}");
        assert_eq!(idle["bd_stat"]["bd_count"], 0, "{idle}");
        assert_eq!(wb["pages"]["written"], stored - same, "{wb}");
        assert_eq!(wb["bd_stat"]["bd_count"], stored - same, "{wb}");
        assert_eq!(wb["bd_stat"]["bd_writes"], stored - same, "{wb}");
        assert_eq!(wb["mm_stat"]["compr_data_size"], 0, "{wb}");
        assert_eq!(wb["mm_stat"]["huge_pages"], 0, "{wb}");
        assert_eq!(wb["mm_stat"]["same_pages"], same, "{wb}");
        assert_eq!(wb["error"], serde_json::Value::Null, "{wb}");
    }
    // Verify read every page back, the written-back ones from the files.
    assert_eq!(r["verified_pages"], 240);
}

#[test]
fn writeback_compressed_side_by_side_writes_fewer_blocks_and_reads_back() {
    let r = idle_writeback_report(
        "wbc",
        &[
            "--comp",
            "lz4",
            "--mode",
            "default",
            "--writeback-compressed",
            "0,1",
        ],
    );
    let fill = &stage(&r, "fill", 0)["results"];
    let wb = &stage(&r, "writeback", 0)["results"];
    assert_eq!(
        wb.as_array().unwrap().len(),
        2,
        "each configuration both ways"
    );
    let plain = &wb[0];
    let packed = &wb[1];
    assert!(
        packed["config"]
            .as_str()
            .unwrap()
            .ends_with("/wb-compressed"),
        "{packed}"
    );
    assert!(!plain["config"].as_str().unwrap().contains("wb-compressed"));
    assert_eq!(plain["pages"]["written"], packed["pages"]["written"]);
    let count = |w: &serde_json::Value| w["bd_stat"]["bd_count"].as_u64().unwrap();
    let huge = fill[1]["mm_stat"]["huge_pages"].as_u64().unwrap();
    let compressed_bytes = fill[1]["mm_stat"]["compr_data_size"].as_u64().unwrap() - huge * 4096;
    // Huge pages take a block each; the objects are packed back to back
    // (a block more per batch of 32 at most).
    let least = huge + compressed_bytes.div_ceil(4096);
    assert!(
        (least..=least + count(plain).div_ceil(32)).contains(&count(packed)),
        "{packed} against {least}"
    );
    assert!(count(packed) < count(plain), "{packed} {plain}");
    assert_eq!(
        packed["bd_stat"]["bd_writes"],
        packed["bd_stat"]["bd_count"]
    );
    // The settings each store wrote back with, beside the backing files.
    assert_eq!(
        r["writeback"],
        serde_json::json!([
            {"writeback_compressed": false, "writeback_batch_size": 32},
            {"writeback_compressed": true, "writeback_batch_size": 32},
        ])
    );
    assert_eq!(r["verified_pages"], 240);
}

#[test]
fn recompress_then_writeback_huge_and_the_table_says_what_it_used() {
    let dir = tmp("recomp");
    let f = dir.path().join("mixed");
    mixed_pages(&f);
    let back = dir.path().join("back.img");
    fs::File::create(&back)
        .unwrap()
        .set_len(240 * 4096)
        .unwrap();
    let args = [
        "replay",
        f.to_str().unwrap(),
        "--mode",
        "kernel-compat",
        "--comp",
        "lz4",
        "--mark-idle",
        "0",
        "--recompress",
        "type=idle",
        "--recomp-algorithm",
        "algo=zstd priority=1",
        "--writeback",
        "huge",
        "--backing-dev",
        back.to_str().unwrap(),
    ];
    let r = report(&args);
    assert_eq!(r["backing_devs_temporary"], false);
    let fill = &stage(&r, "fill", 0)["results"][0];
    let rec = &stage(&r, "recompress", 0)["results"][0];
    let wb = &stage(&r, "writeback", 0)["results"][0];
    let mm = |s: &serde_json::Value, k: &str| s["mm_stat"][k].as_u64().unwrap();
    assert_eq!(rec["pages"]["chosen"], 216, "{rec}");
    assert!(
        mm(rec, "compr_data_size") < mm(fill, "compr_data_size"),
        "zstd after lz4: {rec} {fill}"
    );
    // The pages are marked idle again inside the writeback stage (the one
    // --mark-idle asked for), not in a stage of their own.
    let names = stage_names(&r);
    assert_eq!(names, ["fill", "mark-idle", "recompress", "writeback"]);
    // Noise stays raw under zstd too: writeback huge takes exactly those.
    let huge = mm(rec, "huge_pages");
    assert!(huge > 0, "{rec}");
    assert_eq!(wb["pages"]["written"], huge, "{wb}");
    assert_eq!(wb["bd_stat"]["bd_count"], huge, "{wb}");
    assert_eq!(mm(wb, "huge_pages"), 0, "{wb}");
    assert_eq!(r["verified_pages"], 240);
    // The table names the backing file and prints bd_stat after writeback.
    let out = common::stdout_of(&args);
    assert!(
        out.contains("backing_dev zsmalloc/kernel-compat/lz4/4K: "),
        "{out}"
    );
    assert!(out.contains(back.to_str().unwrap()), "{out}");
    assert!(out.contains("== writeback =="), "{out}");
    assert!(
        out.contains("writeback: the pages marked idle again first"),
        "{out}"
    );
    assert!(out.contains("bd_stat "), "{out}");
    assert!(out.contains("verify: every page"), "{out}");
}

/// The summary compares default mode with kernel-compat after each stage
/// asked for, also with `--mode` naming both; a stage that leaves both
/// stores empty says so rather than a percentage of nothing; the auto
/// compactor's rows show only where it ran, and the ratio row is there.
#[test]
fn the_summary_compares_every_stage_and_the_table_has_no_empty_rows() {
    let text = common::stdout_of(&[
        "replay",
        "--default-size",
        "1M",
        "--mode",
        "default,kernel-compat",
        "--free-fraction",
        "0.5",
        "--compact",
        "--no-verify",
    ]);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("default mode: mem_used_total "))
        .collect();
    assert_eq!(lines.len(), 3, "{text}");
    for (line, stage) in lines.iter().zip(["fill", "discard", "compact"]) {
        assert!(line.contains(&format!(" MiB after {stage}, ")), "{text}");
    }
    assert!(!text.contains("auto runs"), "{text}");
    // The fill's ratio row is orig_data_size over mem_used_total.
    let row = |name: &str| -> Vec<f64> {
        text.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} row: {text}"))
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap())
            .collect()
    };
    let (orig, used, ratio) = (row("orig_data_size"), row("mem_used_total"), row("ratio"));
    assert_eq!(ratio.len(), 2, "{text}");
    for i in 0..2 {
        assert!((ratio[i] - orig[i] / used[i]).abs() < 0.006, "{text}");
    }
    let everything = common::stdout_of(&[
        "replay",
        "--default-size",
        "1M",
        "--free-fraction",
        "1",
        "--no-verify",
    ]);
    let last = everything.lines().last().unwrap_or("");
    assert_eq!(
        last, "default mode and kernel-compat: mem_used_total 0 after discard (nothing held)",
        "{everything}"
    );
}

#[test]
fn bad_writeback_and_recompress_flags_get_one_clear_error() {
    let dir = tmp("badwb");
    let f = dir.path().join("f");
    fs::write(&f, vec![1u8; 10000]).unwrap();
    let f = f.to_str().unwrap();
    let cases: [(&[&str], i32, &str); 8] = [
        (
            &["replay", f, "--recompress", "type=idle"],
            2,
            "--recomp-algorithm",
        ),
        (
            &[
                "replay",
                f,
                "--recompress",
                "type=sleepy",
                "--recomp-algorithm",
                "algo=zstd",
            ],
            2,
            "sleepy",
        ),
        (
            &[
                "replay",
                f,
                "--recompress",
                "type=idle",
                "--recomp-algorithm",
                "algo=zstd priority=4",
            ],
            2,
            "priority",
        ),
        (&["replay", f, "--writeback", "sleepy"], 2, "sleepy"),
        (&["replay", f, "--backing-dev", "/tmp/x"], 2, "--writeback"),
        (&["replay", f, "--mark-idle", "soon"], 2, "all"),
        (
            &["replay", f, "--writeback-compressed", "1"],
            2,
            "--writeback",
        ),
        (
            &[
                "replay",
                f,
                "--writeback",
                "idle",
                "--writeback-compressed",
                "2",
            ],
            2,
            "0 or 1",
        ),
    ];
    assert_refused(&cases);
    // One configuration (no kernel-compat beside it): one backing file.
    let out = zmem(&[
        "replay",
        f,
        "--mode",
        "default",
        "--writeback",
        "idle",
        "--backing-dev",
        "/nonexistent/b",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("/nonexistent/b"), "{err}");
}

/// `--front zswap` over [`mixed_pages`] (240 pages: 24 zero-filled, 31 of
/// noise, the rest text): zswap's counters beside zram's for the same pages,
/// without a limit and with one that makes the shrink worker write back.
#[test]
fn front_zswap_counts_the_pages_as_zswap_would() {
    let dir = tmp("zswap");
    let f = dir.path().join("mixed");
    mixed_pages(&f);
    let path = f.to_str().unwrap();
    let base = [
        "replay",
        path,
        "--mode",
        "kernel-compat",
        "--front",
        "zswap",
        "--zswap-comp",
        "lzo",
    ];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend(extra);
        report(&args)
    };
    // 1 GiB of RAM: the pool's limit is far away.
    let r = run(&["--ram", "1G"]);
    let z = &r["zswap"];
    assert_eq!(z["settings"]["compressor"], "lzo", "{z}");
    let fill = &z["stages"][0];
    assert_eq!(fill["name"], "fill");
    let d = &fill["stats"]["debugfs"];
    assert_eq!(d["stored_pages"], 216, "{d}");
    assert_eq!(d["stored_incompressible_pages"], 31, "{d}");
    assert_eq!(d["written_back_pages"], 0, "{d}");
    assert_eq!(d["pool_limit_hit"], 0, "{d}");
    assert_eq!(fill["stats"]["vmstat"]["swpout_zero"], 24);
    let pool = d["pool_total_size"].as_u64().unwrap();
    // At least the noise pages' own pages, less than a page per page.
    assert!((31 * 4096..216 * 4096).contains(&pool), "{pool}");
    assert_eq!(pool % 4096, 0);
    assert!(fill["stats"]["metadata"]["total_bytes"].as_u64().unwrap() > 0);
    // zram's kernel-compat store of the same pages: the zero pages are its
    // same_pages, and the beside line names it.
    assert_eq!(
        stage(&r, "fill", 0)["results"][0]["mm_stat"]["same_pages"],
        24
    );
    assert!(
        z["beside"][0]
            .as_str()
            .unwrap()
            .starts_with("zswap after fill: "),
        "{z}"
    );
    assert_eq!(z["verify"]["zswap"], 216);
    assert_eq!(z["verify"]["zero_filled"], 24);
    assert_eq!(z["verify"]["swap_device"], 0);
    // 100 pages of RAM, 20% of it: the pool may take 20 pages; the store
    // that finds it full is refused and the shrink worker writes back.
    let r = run(&["--ram", "400K", "--max-pool-percent", "20"]);
    let z = &r["zswap"];
    let s = &z["stages"][0]["stats"];
    let d = &s["debugfs"];
    assert!(d["pool_limit_hit"].as_u64().unwrap() > 0, "{d}");
    assert!(d["written_back_pages"].as_u64().unwrap() > 0, "{d}");
    let pool_pages = d["pool_total_size"].as_u64().unwrap() / 4096;
    assert!(pool_pages <= 20 + 8, "{d}");
    let stored = d["stored_pages"].as_u64().unwrap();
    let device = s["swap_device_pages"].as_u64().unwrap();
    assert_eq!(stored + device, 216, "{s}");
    assert_eq!(
        s["vmstat"]["pswpout"].as_u64().unwrap(),
        device,
        "every page on the swap device was written there once: {s}"
    );
    assert_eq!(z["verify"]["zswap"], stored);
    assert_eq!(z["verify"]["swap_device"], device);
    // The table has zswap's own rows and the line beside zram.
    let out = zmem(
        &base
            .iter()
            .chain(&["--ram", "1G"])
            .copied()
            .collect::<Vec<_>>(),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_ok(&out);
    assert!(text.contains("== zswap/lzo =="), "{text}");
    assert!(text.contains("\nstored_incompressible_pages "), "{text}");
    assert!(text.contains("\nzswap after fill: "), "{text}");
    // zswap's flags without --front zswap, and a compressor zswap lacks.
    assert_refused(&[
        (
            &["replay", path, "--ram", "1G"],
            2,
            "--ram is for --front zswap",
        ),
        (
            &["replay", path, "--front", "zswap", "--zswap-comp", "842"],
            2,
            "zswap compressor \"842\"",
        ),
    ]);
}
