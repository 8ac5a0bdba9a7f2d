//! `zmem classes` end to end: the shared simulate-zsmalloc vectors, every other
//! page size and chain against an independent reference model written from the
//! vectors' README, the kernel's figures, and bad flags.

mod common;

use std::path::PathBuf;

use common::{report, stdout_of, zmem};

/// `zmem classes` for one geometry, in simulate-zsmalloc's format.
fn simzs(page_size: &str, chain: &str, delta: &str, rule: &str) -> String {
    stdout_of(&[
        "classes",
        "--page-size",
        page_size,
        "--chain",
        chain,
        "--delta",
        delta,
        "--chain-rule",
        rule,
        "--format",
        "simzs",
    ])
}

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/simzs")
}

/// Lines with runs of whitespace collapsed and blank lines dropped.
fn normalise(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn reproduces_the_five_shared_vectors() {
    let cases = [
        (
            "ps4096-chain8-delta16-legacy.txt",
            "4096",
            "8",
            "legacy",
            "min-waste",
        ),
        (
            "ps4096-chain4-delta16-legacy.txt",
            "4096",
            "4",
            "legacy",
            "min-waste",
        ),
        (
            "ps16384-chain8-delta64-legacy.txt",
            "16384",
            "8",
            "legacy",
            "min-waste",
        ),
        (
            "ps4096-chain8-delta16-new.txt",
            "4096",
            "8",
            "16",
            "balanced",
        ),
        (
            "ps16384-chain8-delta16-new.txt",
            "16384",
            "8",
            "16",
            "balanced",
        ),
    ];
    for (file, ps, chain, delta, rule) in cases {
        let want = std::fs::read_to_string(vectors_dir().join(file)).unwrap();
        let got = simzs(ps, chain, delta, rule);
        let (want, got) = (normalise(&want), normalise(&got));
        // Line 2 ("Building Pool ... NumClasses") is documented as unreliable.
        assert_eq!(got.len(), want.len(), "{file}: line count");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            if w.starts_with("Building Pool") {
                continue;
            }
            assert_eq!(g, w, "{file}: line {}", i + 1);
        }
    }
}

// ---- An independent reference model, straight from the vectors' README. ----

fn tail(k: u32, ps: u32, size: u32) -> u32 {
    (k * ps) % size
}

fn ref_chain_min_waste(size: u32, ps: u32, c: u32) -> u32 {
    if size.is_power_of_two() {
        return 1;
    }
    // The smallest tail, the smaller k on a tie.
    (1..=c).min_by_key(|&k| (tail(k, ps, size), k)).unwrap()
}

fn ref_chain_balanced(size: u32, ps: u32, c: u32) -> u32 {
    if size.is_power_of_two() {
        return 1;
    }
    let mut best: Option<(u32, u32)> = None;
    for k in 1..=c {
        let t = tail(k, ps, size);
        if t == 0 {
            return k;
        }
        best = Some(match best {
            None => (k, t),
            Some((bk, bt)) => {
                let take = if bt * 10 > bk * ps {
                    t < bt
                } else {
                    4 * t < 3 * bt
                };
                if take {
                    (k, t)
                } else {
                    (bk, bt)
                }
            }
        });
        let (bk, bt) = best.unwrap();
        if bt <= bk * ps / 64 {
            break;
        }
    }
    best.unwrap().0
}

struct RefClass {
    size: u32,
    pages: u32,
    objs: u32,
    span: u32,
}

/// Per logical index, its physical class.
fn ref_pool(ps: u32, c: u32, delta: u32, balanced: bool) -> Vec<RefClass> {
    let n = (ps - 32).div_ceil(delta) + 1;
    let mut by_index: Vec<Option<RefClass>> = (0..n).map(|_| None).collect();
    let mut current: Option<(u32, u32, u32, u32)> = None; // size, pages, objs, span
    for i in (0..n).rev() {
        let size = (32 + i * delta).min(ps);
        let pages = if balanced {
            ref_chain_balanced(size, ps, c)
        } else {
            ref_chain_min_waste(size, ps, c)
        };
        let objs = pages * ps / size;
        let keep = matches!(current, Some((_, p, o, _)) if p == pages && o == objs);
        if !keep {
            let span = (0..objs)
                .filter(|j| (j * size) / ps != (j * size + size - 1) / ps)
                .count();
            current = Some((size, pages, objs, span as u32));
        }
        let (size, pages, objs, span) = current.unwrap();
        by_index[i as usize] = Some(RefClass {
            size,
            pages,
            objs,
            span,
        });
    }
    by_index.into_iter().map(Option::unwrap).collect()
}

fn ref_report(ps: u32, c: u32, delta: u32, balanced: bool) -> (Vec<[u32; 7]>, [String; 4]) {
    let pool = ref_pool(ps, c, delta, balanced);
    let n = pool.len() as u32;
    let mut rows = Vec::new();
    let mut waste_sum = 0.0f64;
    for req in (32..=ps).step_by(16) {
        let idx = ((req - 32).div_ceil(delta)).min(n - 1);
        let p = &pool[idx as usize];
        let t = p.pages * ps - p.objs * p.size;
        rows.push([
            req,
            p.size,
            p.pages,
            p.objs,
            t,
            (p.size - req) * p.objs,
            p.span,
        ]);
        let per_obj = f64::from(p.size - req) + f64::from(t) / f64::from(p.objs);
        waste_sum += per_obj / (f64::from(p.pages * ps) / f64::from(p.objs)) * 100.0;
    }
    let mut sizes: Vec<u32> = pool.iter().map(|p| p.size).collect();
    sizes.dedup();
    let span: u64 = pool.iter().map(|p| u64::from(p.span)).sum();
    let summary = [
        format!("{:.2}%", waste_sum / rows.len() as f64),
        n.to_string(),
        sizes.len().to_string(),
        span.to_string(),
    ];
    (rows, summary)
}

fn parse_simzs(text: &str) -> (Vec<[u32; 7]>, [String; 4]) {
    let mut rows = Vec::new();
    let mut summary: Vec<String> = Vec::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() == 7 && cells[0].parse::<u32>().is_ok() {
            let v: Vec<u32> = cells.iter().map(|c| c.parse().unwrap()).collect();
            rows.push(v.try_into().unwrap());
        } else if line.starts_with("BEFORE") || line.starts_with("AFTER") {
            summary.push(line.rsplit(' ').next().unwrap().to_string());
        }
    }
    (rows, summary.try_into().unwrap())
}

#[test]
fn every_page_size_and_chain_matches_the_reference_model() {
    for ps in [4096u32, 8192, 16384, 32768, 65536] {
        for chain in 1..=16u32 {
            for (delta, rule) in [("legacy", "min-waste"), ("16", "balanced")] {
                let text = simzs(&ps.to_string(), &chain.to_string(), delta, rule);
                let d = if delta == "legacy" {
                    (ps >> 8).max(16)
                } else {
                    16
                };
                let want = ref_report(ps, chain, d, rule == "balanced");
                let got = parse_simzs(&text);
                assert_eq!(got.0.len(), ((ps - 32) / 16 + 1) as usize);
                assert_eq!(got.0, want.0, "rows, ps {ps} chain {chain} {rule}");
                assert_eq!(got.1, want.1, "summary, ps {ps} chain {chain} {rule}");
            }
        }
    }
}

#[test]
fn kernel_default_counts_in_table_and_json() {
    for (chain, classes, huge) in [("4", 69, 3257), ("8", 119, 3625), ("16", 192, 3833)] {
        let table = stdout_of(&["classes", "--chain", chain, "--delta", "16"]);
        let line = format!("physical classes: {classes} ");
        assert!(table.contains(&line), "chain {chain}: {table}");
        assert!(table.contains(&format!("huge_class_size: {huge}")));
        let json = report(&["classes", "--chain", chain]);
        assert_eq!(json["physical_classes"], classes);
        assert_eq!(json["huge_class_size"], huge);
        assert_eq!(json["classes"].as_array().unwrap().len(), classes);
        assert_eq!(json["logical"].as_array().unwrap().len(), 255);
    }
    // No arguments at all is the kernel default.
    assert!(stdout_of(&["classes"]).contains("physical classes: 119 (1 huge)"));
}

#[test]
fn no_merge_keeps_every_logical_class() {
    let json = report(&["classes", "--no-merge"]);
    assert_eq!(json["physical_classes"], 255);
}

#[test]
fn bad_flags_exit_2_with_one_line() {
    for args in [
        &["classes", "--page-size", "5000"][..],
        &["classes", "--page-size", "2048"],
        &["classes", "--page-size", "131072"],
        &["classes", "--chain", "0"],
        &["classes", "--chain", "17"],
        &["classes", "--delta", "12"],
        &["classes", "--delta", "0"],
        &["classes", "--delta", "wide"],
        &["classes", "--chain-rule", "fastest"],
        &["classes", "--format", "xml"],
        &["classes", "--chain", "-3"],
    ] {
        let out = zmem(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error:"), "{args:?}: {err}");
        assert!(!err.contains("panicked"));
        assert!(out.stdout.is_empty());
    }
}
