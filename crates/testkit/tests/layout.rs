//! docs/layout.md, the repository's map, checked against the tree.
//!
//! The map is the fenced block of docs/layout.md. A line starting in column
//! 0 names a path from the repository's root (`crates/zram/`, `scripts/`);
//! a line indented by two spaces names, in its first column (up to two
//! spaces), paths inside the crate above it: `src/pool.rs`, or a list such
//! as `src/stats.rs, check.rs` whose later names are beside the first. Other
//! lines describe. The test fails on:
//!
//! - a workspace member (`cargo metadata`) without its `crates/NAME/` line,
//!   or a `crates/NAME/` line that is no member;
//! - a top-level module of a member (`src/NAME.rs`, `src/NAME/mod.rs`, the
//!   crate roots aside) that the map does not list, or one without its
//!   `//!` header saying what it owns;
//! - a listed path that does not exist, or a `.rs` file a crate's lines
//!   name that the crate does not have;
//! - a `lib `NAME`` or `package NAME` in a crate's lines that is not the
//!   member's library or package.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use testkit::workspace::{self, Member};

/// One crate's part of the map: its paths (relative to the crate) and the
/// text of its lines.
#[derive(Default, Debug)]
struct Entry {
    paths: Vec<String>,
    text: String,
}

/// The map: paths named from the root, and the crates' entries by
/// directory (`crates/zram`).
#[derive(Default, Debug)]
struct Map {
    top: Vec<String>,
    crates: BTreeMap<String, Entry>,
}

/// The first column of a map line: the text before two spaces in a row.
fn first_column(line: &str) -> &str {
    line.split("  ").next().unwrap_or("").trim()
}

/// Parses the fenced block of `doc`.
fn parse(doc: &str) -> Map {
    let mut map = Map::default();
    let block = doc
        .split("```")
        .nth(1)
        .expect("docs/layout.md has a fenced block");
    let mut current: Option<String> = None;
    for line in block.lines().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(' ') {
            let path = first_column(line).to_string();
            current = path
                .strip_prefix("crates/")
                .map(|_| path.trim_end_matches('/').to_string());
            if let Some(dir) = &current {
                let entry = map.crates.entry(dir.clone()).or_default();
                entry.text.push_str(line);
                entry.text.push('\n');
            }
            map.top.push(path);
            continue;
        }
        let Some(dir) = &current else {
            continue;
        };
        let entry = map.crates.get_mut(dir).expect("the entry above");
        entry.text.push_str(line);
        entry.text.push('\n');
        let is_sub = line.starts_with("  ") && !line[2..].starts_with(' ');
        if !is_sub {
            continue;
        }
        let col = first_column(line.trim_start());
        let mut names = col.split(',').map(str::trim);
        let Some(first) = names.next() else { continue };
        let base = match first.trim_end_matches('/').rfind('/') {
            Some(at) => &first[..=at],
            None => "",
        };
        entry.paths.push(first.to_string());
        for n in names.filter(|n| !n.is_empty()) {
            entry.paths.push(format!("{base}{n}"));
        }
    }
    map
}

/// Every `.rs` file under `dir` by file name, and every path under it
/// relative to it.
fn files(dir: &Path) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut names, mut rel) = (BTreeSet::new(), BTreeSet::new());
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            if p.is_dir() {
                stack.push(p.clone());
            }
            let r = p.strip_prefix(dir).expect("under dir");
            rel.insert(r.to_string_lossy().into_owned());
            if let Some(n) = p.file_name().map(|n| n.to_string_lossy().into_owned()) {
                if n.ends_with(".rs") {
                    names.insert(n);
                }
            }
        }
    }
    (names, rel)
}

/// The words of `text` after `marker` (`lib `), each cut at a backquote,
/// comma or parenthesis.
fn named_after<'a>(text: &'a str, marker: &str) -> Vec<&'a str> {
    text.match_indices(marker)
        .map(|(at, m)| {
            let rest = &text[at + m.len()..];
            let rest = rest.trim_start_matches('`');
            let end = rest
                .find(|c: char| c == '`' || c == ',' || c == ')' || c.is_whitespace())
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

/// Every way the map and the tree disagree, one line each.
fn disagreements(root: &Path, map: &Map, members: &[Member]) -> Vec<String> {
    let mut bad = Vec::new();
    for p in &map.top {
        if !root.join(p).exists() {
            bad.push(format!("{p}: listed, does not exist"));
        }
    }
    let by_dir: BTreeMap<String, &Member> = members
        .iter()
        .filter_map(|m| {
            let rel = m.dir.strip_prefix(root).ok()?;
            Some((rel.to_string_lossy().into_owned(), m))
        })
        .collect();
    for (dir, m) in &by_dir {
        if !map.crates.contains_key(dir) {
            bad.push(format!(
                "{dir}/ ({}): a member the map does not list",
                m.package
            ));
        }
    }
    for (dir, entry) in &map.crates {
        let Some(m) = by_dir.get(dir) else {
            bad.push(format!("{dir}/: listed, but no workspace member"));
            continue;
        };
        let cdir = root.join(dir);
        for p in &entry.paths {
            if !cdir.join(p).exists() {
                bad.push(format!("{dir}/{p}: listed, does not exist"));
            }
        }
        let (rs_names, _) = files(&cdir);
        for word in entry.text.split(|c: char| {
            !(c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '/' || c == '-')
        }) {
            let word = word.trim_end_matches('.');
            let Some(file) = word.rsplit('/').next() else {
                continue;
            };
            if word.ends_with(".rs") && !rs_names.contains(file) {
                bad.push(format!(
                    "{dir}: names {word}, which the crate does not have"
                ));
            }
        }
        for lib in named_after(&entry.text, "lib `") {
            if m.lib.as_deref() != Some(lib) {
                bad.push(format!("{dir}: says lib `{lib}`, cargo says {:?}", m.lib));
            }
        }
        for package in named_after(&entry.text, "package ") {
            if package.starts_with("zmem") && package != m.package {
                bad.push(format!(
                    "{dir}: says package {package}, cargo says {}",
                    m.package
                ));
            }
        }
        let src = cdir.join("src");
        if !src.is_dir() {
            continue;
        }
        let listed: BTreeSet<&str> = entry
            .paths
            .iter()
            .filter_map(|p| p.strip_prefix("src/"))
            .collect();
        for module in workspace::top_modules(&src) {
            if !listed.contains(module.as_str()) {
                bad.push(format!(
                    "{dir}/src/{module}: a module the map does not list"
                ));
            }
            let file = workspace::module_file(&src, &module);
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let header: Vec<&str> = text.lines().take_while(|l| l.starts_with("//!")).collect();
            if header.join(" ").len() < 40 {
                bad.push(format!(
                    "{}: no `//!` header saying what the module owns",
                    file.display()
                ));
            }
        }
    }
    bad
}

#[test]
fn the_map_lists_every_crate_and_module_and_nothing_else() {
    let root = workspace::root();
    let doc = std::fs::read_to_string(root.join("docs/layout.md")).expect("docs/layout.md");
    let map = parse(&doc);
    let members = workspace::members();
    // It reads something: the map has the allocator with its pool module.
    assert!(
        map.crates
            .get("crates/zsmalloc")
            .is_some_and(|e| e.paths.iter().any(|p| p == "src/pool.rs")),
        "{map:?}"
    );
    assert!(
        members.iter().any(|m| m.package == "zmem-cli"),
        "{members:?}"
    );
    let bad = disagreements(&root, &map, &members);
    assert!(
        bad.is_empty(),
        "docs/layout.md and the tree disagree:\n{}",
        bad.join("\n")
    );
}

#[test]
fn a_map_made_by_hand_is_checked_both_ways() {
    let root = std::env::temp_dir().join(format!("zmem-layout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let src = root.join("crates/a/src");
    std::fs::create_dir_all(src.join("dir")).unwrap();
    std::fs::write(src.join("lib.rs"), "//! The root.\n").unwrap();
    std::fs::write(
        src.join("kept.rs"),
        "//! Owns the kept things and touches nothing else at all.\n",
    )
    .unwrap();
    std::fs::write(src.join("unlisted.rs"), "fn f() {}\n").unwrap();
    std::fs::write(
        src.join("dir/mod.rs"),
        "//! Owns the directory's things and touches nothing else.\n",
    )
    .unwrap();
    let doc = "# Map\n\n```\nREADME.md   the front page\n\
               crates/a/   the crate (package zmem-a, lib `b`), see gone.rs\n\
               \x20 src/kept.rs, dir/   what it keeps\n\
               \x20 tests/   its tests\n\
               crates/ghost/   no such member\n```\n";
    let map = parse(doc);
    let members = vec![Member {
        package: "zmem-a".into(),
        lib: Some("a".into()),
        dir: root.join("crates/a"),
    }];
    let bad = disagreements(&root, &map, &members);
    let want = [
        "README.md: listed, does not exist",
        "crates/ghost/: listed, does not exist",
        "crates/a/tests/: listed, does not exist",
        "crates/a: names gone.rs",
        "crates/a: says lib `b`",
        "crates/a/src/unlisted.rs: a module the map does not list",
        "unlisted.rs: no `//!` header",
        "crates/ghost/: listed, but no workspace member",
    ];
    for w in want {
        assert!(bad.iter().any(|b| b.contains(w)), "{w:?} not in {bad:#?}");
    }
    assert_eq!(bad.len(), want.len(), "{bad:#?}");
    std::fs::remove_dir_all(&root).unwrap();
}
