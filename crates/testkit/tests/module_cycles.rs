//! No import cycle among the modules of one crate.
//!
//! docs/design.md draws each crate as a tower: a module may use the modules
//! below it, never one above. This test reads a crate's sources, finds every
//! path that names another module of the same crate (`crate::a::b`,
//! `super::x`, `self::y`, and `use` groups `crate::{a, b::c}`), resolves
//! names the parent module only re-exports (`pub use store::Store` in
//! lib.rs makes `crate::Store` an edge to `store`), and fails on any
//! strongly connected group of two or more modules, naming each edge and the
//! file that makes it.
//!
//! What it reads: code, not comments, string contents or `#[cfg(test)]`
//! modules (a test may reach anywhere). `mod` declarations and `pub use`
//! re-exports are not edges: a parent declaring a child is the tower's
//! shape, and a re-export only passes a name on.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module path from the crate root (`[]` is lib.rs).
type ModPath = Vec<String>;

/// One module's source with comments, strings and test modules removed.
struct Module {
    file: PathBuf,
    code: String,
}

/// Every module of the crate whose sources are in `src`, by path.
fn modules(src: &Path) -> BTreeMap<ModPath, Module> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = fs::read_dir(&dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n == "bin") {
                    continue;
                }
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src");
            let mut parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            let last = parts.pop().expect("a file name");
            let stem = last.trim_end_matches(".rs");
            if parts.is_empty() && stem == "main" {
                continue;
            }
            if !(stem == "mod" || (parts.is_empty() && stem == "lib")) {
                parts.push(stem.to_string());
            }
            let text = fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            out.insert(
                parts,
                Module {
                    file: path,
                    code: strip(&text),
                },
            );
        }
    }
    out
}

/// `text` without comments and string or char contents, cut before its
/// first `#[cfg(test)]` module.
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == b'"' {
            // A raw string r#"..."# is rare in these crates' paths of
            // interest; an ordinary string ends at an unescaped quote.
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' && b.get(i + 2) == Some(&b'\'') {
            // A char literal such as '{' or '"'.
            i += 3;
            out.push_str("' '");
        } else if c == b'\'' && b.get(i + 1) == Some(&b'\\') {
            // An escaped char literal such as '\n' or '\''.
            i += 2;
            while i < b.len() && b[i] != b'\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    let mut from = 0;
    while let Some(at) = out[from..].find("#[cfg(test)]").map(|a| a + from) {
        let after = out[at..].trim_start_matches("#[cfg(test)]").trim_start();
        if after.starts_with("mod ") || after.starts_with("pub mod ") {
            out.truncate(at);
            break;
        }
        from = at + 1;
    }
    out
}

/// The tokens the paths are made of: identifiers, `::`, braces, commas and
/// semicolons; anything else becomes a separator token.
fn tokens(code: &str) -> Vec<String> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphanumeric() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(code[start..i].to_string());
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            out.push("::".into());
            i += 2;
        } else if matches!(c, b'{' | b'}' | b',' | b';' | b'*') {
            out.push((c as char).to_string());
            i += 1;
        } else {
            if !c.is_ascii_whitespace() {
                out.push("#".into());
            }
            i += 1;
        }
    }
    out
}

/// Reads a path tree starting at `toks[i]` (an identifier or `{`) after
/// `prefix::`, pushing every full path it names; returns the index after it.
fn path_tree(
    toks: &[String],
    mut i: usize,
    prefix: &[String],
    out: &mut Vec<Vec<String>>,
) -> usize {
    let mut path = prefix.to_vec();
    loop {
        let Some(t) = toks.get(i) else {
            out.push(path);
            return i;
        };
        if t == "{" {
            i += 1;
            while i < toks.len() && toks[i] != "}" {
                if toks[i] == "," {
                    i += 1;
                    continue;
                }
                i = path_tree(toks, i, &path, out);
                // Skip an `as alias` and anything else up to the item's end.
                while i < toks.len() && toks[i] != "," && toks[i] != "}" {
                    i += 1;
                }
            }
            return i + 1;
        }
        if t == "*" {
            out.push(path);
            return i + 1;
        }
        if !t
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            out.push(path);
            return i;
        }
        path.push(t.clone());
        if toks.get(i + 1).is_some_and(|n| n == "::") {
            i += 2;
        } else {
            out.push(path);
            return i + 1;
        }
    }
}

/// The paths a module's code names that start at `crate`, `super` or
/// `self`, split into those of `pub use` re-exports and all others.
fn paths(code: &str) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let toks = tokens(code);
    let (mut reexports, mut uses) = (Vec::new(), Vec::new());
    let mut statement_is_pub_use = false;
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i].as_str();
        if t == ";" || t == "{" || t == "}" {
            statement_is_pub_use = false;
        }
        if t == "pub" {
            // `pub use` or `pub(crate) use` / `pub(super) use`.
            let mut j = i + 1;
            while toks.get(j).is_some_and(|n| {
                n == "#" || n == "crate" || n == "super" || n == "self" || n == "in"
            }) {
                j += 1;
            }
            if toks.get(j).is_some_and(|n| n == "use") {
                statement_is_pub_use = true;
                i = j;
                continue;
            }
        }
        if t == "use" {
            // A `use` path may start at a child module in scope without
            // `self::` (`pub use store::Store` in lib.rs).
            let first = toks.get(i + 1).map(String::as_str).unwrap_or("");
            let relative = first == "{"
                || (first
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphabetic() || c == '_')
                    && !matches!(first, "crate" | "super" | "self"));
            if relative {
                let target = if statement_is_pub_use {
                    &mut reexports
                } else {
                    &mut uses
                };
                i = path_tree(&toks, i + 1, &["self".to_string()], target);
                continue;
            }
            i += 1;
            continue;
        }
        if (t == "crate" || t == "super" || t == "self")
            && toks.get(i + 1).is_some_and(|n| n == "::")
        {
            // `super::super::x` and `self::x` stay whole in the path.
            let target = if statement_is_pub_use {
                &mut reexports
            } else {
                &mut uses
            };
            i = path_tree(&toks, i, &[], target);
            continue;
        }
        i += 1;
    }
    (reexports, uses)
}

/// Resolves `path` (starting with `crate`, `super` or `self`) named in
/// module `at` to the module that defines what it names.
fn resolve(
    at: &ModPath,
    path: &[String],
    mods: &BTreeSet<ModPath>,
    reexports: &BTreeMap<ModPath, BTreeMap<String, Vec<String>>>,
    depth: u32,
) -> Option<ModPath> {
    let mut base: ModPath = match path.first()?.as_str() {
        "crate" => Vec::new(),
        "self" => at.clone(),
        "super" => {
            let mut b = at.clone();
            b.pop()?;
            b
        }
        _ => return None,
    };
    let mut rest = &path[1..];
    while rest.first().is_some_and(|s| s == "super") {
        base.pop()?;
        rest = &rest[1..];
    }
    while let Some(seg) = rest.first() {
        let mut next = base.clone();
        next.push(seg.clone());
        if !mods.contains(&next) {
            break;
        }
        base = next;
        rest = &rest[1..];
    }
    if let (Some(name), true) = (rest.first(), depth < 8) {
        if let Some(target) = reexports.get(&base).and_then(|r| r.get(name)) {
            return resolve(&base, target, mods, reexports, depth + 1).or(Some(base));
        }
    }
    Some(base)
}

/// The module graph's edges (from, to) with the file that makes each.
fn edges(src: &Path) -> BTreeMap<(ModPath, ModPath), PathBuf> {
    let mods = modules(src);
    let names: BTreeSet<ModPath> = mods.keys().cloned().collect();
    let mut reexports: BTreeMap<ModPath, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut uses: BTreeMap<ModPath, Vec<Vec<String>>> = BTreeMap::new();
    for (path, m) in &mods {
        let (re, us) = paths(&m.code);
        let map = reexports.entry(path.clone()).or_default();
        for p in re {
            if let Some(last) = p.last() {
                map.insert(last.clone(), p.clone());
            }
        }
        uses.insert(path.clone(), us);
    }
    let mut out = BTreeMap::new();
    for (from, list) in &uses {
        for p in list {
            let Some(to) = resolve(from, p, &names, &reexports, 0) else {
                continue;
            };
            // A module naming its own ancestor's items through the root of
            // the crate is an edge only when the ancestor defines them.
            if &to != from {
                out.entry((from.clone(), to))
                    .or_insert_with(|| mods[from].file.clone());
            }
        }
    }
    out
}

/// The strongly connected groups of two or more modules (Tarjan).
fn cycles(edges: &BTreeMap<(ModPath, ModPath), PathBuf>) -> Vec<Vec<ModPath>> {
    let mut nodes: BTreeSet<&ModPath> = BTreeSet::new();
    let mut next: BTreeMap<&ModPath, Vec<&ModPath>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        nodes.insert(from);
        nodes.insert(to);
        next.entry(from).or_default().push(to);
    }
    struct State<'a> {
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on: BTreeSet<&'a ModPath>,
        groups: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(
        v: &'a ModPath,
        next: &BTreeMap<&'a ModPath, Vec<&'a ModPath>>,
        s: &mut State<'a>,
    ) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on.insert(v);
        for &w in next.get(v).map(Vec::as_slice).unwrap_or(&[]) {
            if !s.index.contains_key(w) {
                visit(w, next, s);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = Vec::new();
            loop {
                let w = s.stack.pop().expect("on the stack");
                s.on.remove(w);
                group.push(w.clone());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                s.groups.push(group);
            }
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        groups: Vec::new(),
    };
    for v in nodes {
        if !s.index.contains_key(v) {
            visit(v, &next, &mut s);
        }
    }
    s.groups
}

/// `a::b`, or `crate` for the root.
fn name(p: &ModPath) -> String {
    if p.is_empty() {
        "crate".into()
    } else {
        p.join("::")
    }
}

/// One line per cycle, with the edges inside it and their files.
fn report(src: &Path) -> Vec<String> {
    let e = edges(src);
    cycles(&e)
        .into_iter()
        .map(|group| {
            let set: BTreeSet<&ModPath> = group.iter().collect();
            let inner: Vec<String> = e
                .iter()
                .filter(|((f, t), _)| set.contains(f) && set.contains(t))
                .map(|((f, t), file)| {
                    let file = file.file_name().map(|n| n.to_string_lossy().into_owned());
                    format!("{} -> {} ({})", name(f), name(t), file.unwrap_or_default())
                })
                .collect();
            format!(
                "cycle among {{{}}}: {}",
                group.iter().map(name).collect::<Vec<_>>().join(", "),
                inner.join("; ")
            )
        })
        .collect()
}

#[test]
fn no_crate_has_an_import_cycle_among_its_modules() {
    // Every workspace member, as `cargo metadata` lists them: a crate added
    // later is checked without a list to update.
    let members = testkit::workspace::members();
    assert!(members.len() > 10, "{members:?}");
    let (mut bad, mut total) = (Vec::new(), 0);
    for m in &members {
        let src = m.dir.join("src");
        assert!(src.is_dir(), "{} is missing", src.display());
        // The check reads something: every crate has its root module.
        assert!(
            !modules(&src).is_empty(),
            "no modules found in {}",
            src.display()
        );
        total += edges(&src).len();
        bad.extend(
            report(&src)
                .into_iter()
                .map(|l| format!("{}: {l}", m.package)),
        );
    }
    // And the crates' modules do use each other.
    assert!(total > 100, "only {total} module edges in the workspace");
    assert!(bad.is_empty(), "import cycles:\n{}", bad.join("\n"));
}

#[test]
fn a_cycle_made_by_hand_is_found_and_named() {
    let dir = std::env::temp_dir().join(format!("zmem-cycles-{}", std::process::id()));
    let src = dir.join("src");
    fs::create_dir_all(src.join("post")).unwrap();
    let write = |p: &str, s: &str| fs::write(src.join(p), s).unwrap();
    write(
        "lib.rs",
        "pub mod store;\npub mod post;\npub mod stats;\npub use store::Store;\n",
    );
    write(
        "stats.rs",
        "// crate::store::Store is named here only in a comment.\npub struct MmStat;\n\
         const S: &str = \"crate::post::x\";\n",
    );
    write(
        "store.rs",
        "use crate::{stats::MmStat, post::writeback::{self, Report as R}};\npub struct Store;\n\
         #[cfg(test)]\nmod tests { use crate::post::*; }\n",
    );
    write(
        "post/mod.rs",
        "pub mod writeback;\npub use writeback::Report;\n",
    );
    write(
        "post/writeback.rs",
        "pub struct Report;\nfn f(_: &crate::Store) -> super::super::stats::MmStat { todo!() }\n",
    );
    let e = edges(&src);
    let has = |f: &[&str], t: &[&str]| {
        let v = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<ModPath>();
        e.contains_key(&(v(f), v(t)))
    };
    assert!(has(&["store"], &["stats"]), "{:?}", e.keys());
    assert!(has(&["store"], &["post", "writeback"]), "{:?}", e.keys());
    // `crate::Store` is lib.rs's re-export of store's Store.
    assert!(has(&["post", "writeback"], &["store"]), "{:?}", e.keys());
    assert!(has(&["post", "writeback"], &["stats"]), "{:?}", e.keys());
    // Comments and strings are not edges.
    assert!(
        !e.keys().any(|(f, _)| f == &vec!["stats".to_string()]),
        "{:?}",
        e.keys()
    );
    let lines = report(&src);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("cycle among {post::writeback, store}"),
        "{lines:?}"
    );
    // Break the cycle: the report is empty.
    write(
        "post/writeback.rs",
        "pub struct Report;\nfn f() -> super::super::stats::MmStat { todo!() }\n",
    );
    assert!(report(&src).is_empty(), "{:?}", report(&src));
    fs::remove_dir_all(&dir).unwrap();
}
