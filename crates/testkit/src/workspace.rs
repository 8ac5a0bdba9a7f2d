//! The workspace as cargo and the file tree describe it, for the tests that
//! check the repository's own rules (the layers, the module towers, the map
//! in docs/layout.md): running `cargo` at the workspace root, its
//! `cargo metadata`, and each member's directory and top-level modules.
//!
//! Reads files and runs `cargo metadata` or `cargo tree` only; it changes
//! nothing in the tree.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The workspace root (two levels above this crate's manifest).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

/// The stdout of `cargo ARGS` run at the workspace root, which must succeed
/// (panics with its stderr otherwise).
pub fn cargo(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("run cargo {args:?}: {e}"));
    assert!(
        out.status.success(),
        "cargo {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("cargo's stdout is UTF-8")
}

/// `cargo metadata` of the workspace (without its dependencies).
pub fn metadata() -> Value {
    let out = cargo(&[
        "metadata",
        "--format-version",
        "1",
        "--no-deps",
        "--offline",
    ]);
    serde_json::from_str(&out).expect("cargo metadata is JSON")
}

/// One workspace member as `cargo metadata` lists it.
#[derive(Debug, Clone)]
pub struct Member {
    /// The package name (`zmem-region`).
    pub package: String,
    /// The library target's name (`region`), if the package has one.
    pub lib: Option<String>,
    /// The directory holding its manifest.
    pub dir: PathBuf,
}

/// Every workspace member, by package name.
pub fn members() -> Vec<Member> {
    let meta = metadata();
    let mut out: Vec<Member> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let manifest = PathBuf::from(p["manifest_path"].as_str().expect("manifest_path"));
            let lib = p["targets"]
                .as_array()
                .expect("targets")
                .iter()
                .find(|t| {
                    t["kind"].as_array().is_some_and(|k| {
                        k.iter()
                            .any(|k| matches!(k.as_str(), Some("lib" | "cdylib" | "staticlib")))
                    })
                })
                .map(|t| t["name"].as_str().expect("target name").to_string());
            Member {
                package: p["name"].as_str().expect("name").to_string(),
                lib,
                dir: manifest
                    .parent()
                    .expect("manifest's directory")
                    .to_path_buf(),
            }
        })
        .collect();
    out.sort_by(|a, b| a.package.cmp(&b.package));
    out
}

/// The top-level modules of the crate whose sources are in `src`, as paths
/// relative to `src`: every `NAME.rs` but the roots (`lib.rs`, `main.rs`)
/// and every `NAME/` directory holding a `mod.rs` (written `NAME/`), sorted.
pub fn top_modules(src: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(src).unwrap_or_else(|e| panic!("read {}: {e}", src.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        let name = path
            .file_name()
            .expect("a file name")
            .to_string_lossy()
            .into_owned();
        if path.is_dir() {
            if path.join("mod.rs").is_file() {
                out.push(format!("{name}/"));
            }
        } else if name.ends_with(".rs") && name != "lib.rs" && name != "main.rs" {
            out.push(name);
        }
    }
    out.sort();
    out
}

/// The file holding the module written `module` by [`top_modules`] in `src`.
pub fn module_file(src: &Path, module: &str) -> PathBuf {
    match module.strip_suffix('/') {
        Some(dir) => src.join(dir).join("mod.rs"),
        None => src.join(module),
    }
}
