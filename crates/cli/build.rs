//! Builds the preload library of `zmem run` (the `zmem-preload` crate's
//! cdylib, `libzmem_preload.so`) so the `zmem` binary can carry it: the
//! library is compiled by a second cargo with the outer build's profile and
//! target, in a target directory of its own beside the outer build's
//! profile directories (the outer cargo holds the lock of the profile
//! directory it builds in while this script runs), and `ZMEM_PRELOAD_SO`
//! names the file `cmd/run.rs` embeds. The inner directory is one per outer
//! target directory, not one per `OUT_DIR`, so `cargo check`, `clippy`,
//! `doc` and `test` of one profile share one inner build.
//! `ZMEM_PRELOAD_PREBUILT=PATH` carries a library built before instead.
//!
//! It owns this build step only; what the binary does with the bytes is
//! `cmd/run.rs`'s. The inner build's dep-info lists every source file the
//! library was made from, so the script runs again when one changes.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Variables of the outer build that must not steer the inner one: its
/// target directory (the inner one has its own) and clippy's or another
/// tool's wrapper of the outer workspace's crates.
const CLEARED: &[&str] = &[
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
];

/// A `libzmem_preload.so` already built (by a packager, or by the test
/// suite, which builds it once for every check of the workspace): carried
/// as it is, and nothing is built.
const PREBUILT: &str = "ZMEM_PRELOAD_PREBUILT";

fn main() {
    println!("cargo:rerun-if-env-changed={PREBUILT}");
    if let Some(so) = env::var_os(PREBUILT) {
        let so = PathBuf::from(so);
        assert!(
            so.is_file(),
            "{PREBUILT}={}: no such file (a libzmem_preload.so to carry)",
            so.display()
        );
        println!("cargo:rerun-if-changed={}", so.display());
        println!("cargo:rustc-env=ZMEM_PRELOAD_SO={}", so.display());
        return;
    }
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let preload = manifest_dir.join("../preload/Cargo.toml");
    let target_dir = inner_target_dir(&out_dir);
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // PROFILE is `release` for any profile that inherits from it, else
    // `debug`; the inner build uses the same two.
    let release = env::var("PROFILE").as_deref() == Ok("release");
    let target = env::var("TARGET").expect("TARGET");
    let host = env::var("HOST").expect("HOST");

    let mut cmd = Command::new(&cargo);
    cmd.arg("build")
        .arg("--manifest-path")
        .arg(&preload)
        .arg("--lib")
        .arg("--target-dir")
        .arg(&target_dir)
        .args(["--profile", if release { "release" } else { "dev" }])
        // The copy zmem carries (and writes out for every run) has no
        // debuginfo; its symbols stay, for backtraces. A library with
        // line tables is the preload crate's own build, for ZMEM_PRELOAD.
        .args([
            "--config",
            &format!(
                "profile.{}.strip=\"debuginfo\"",
                if release { "release" } else { "dev" }
            ),
        ]);
    if target != host {
        cmd.args(["--target", &target]);
    }
    for v in CLEARED {
        cmd.env_remove(v);
    }
    // The inner cargo's messages go to this script's stderr (shown when
    // the build fails); its stdout would be read as this script's
    // instructions.
    cmd.stdout(std::io::stderr());
    let status = cmd.status().unwrap_or_else(|e| {
        panic!(
            "running {} for the preload library: {e}",
            Path::new(&cargo).display()
        )
    });
    assert!(
        status.success(),
        "building the preload library (crates/preload) failed: {status}"
    );

    let mut dir = target_dir.clone();
    if target != host {
        dir.push(&target);
    }
    dir.push(if release { "release" } else { "debug" });
    let so = dir.join("libzmem_preload.so");
    assert!(so.is_file(), "{} was not built", so.display());
    println!("cargo:rustc-env=ZMEM_PRELOAD_SO={}", so.display());

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", preload.display());
    for f in ["../../Cargo.toml", "../../Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", manifest_dir.join(f).display());
    }
    let deps = std::fs::read_to_string(dir.join("libzmem_preload.d"))
        .expect("the preload library's dep-info");
    // Each source, and the manifest and build script of each of the
    // workspace's crates they belong to (the dep-info names sources only).
    let crates = manifest_dir.join("..").canonicalize().expect("crates/");
    let mut manifests = std::collections::BTreeSet::new();
    for path in dep_info_sources(&deps) {
        if let Ok(rest) = Path::new(&path).strip_prefix(&crates) {
            if let Some(name) = rest.components().next() {
                manifests.insert(crates.join(name).join("Cargo.toml"));
                manifests.insert(crates.join(name).join("build.rs"));
            }
        }
        println!("cargo:rerun-if-changed={path}");
    }
    for m in manifests {
        println!("cargo:rerun-if-changed={}", m.display());
    }
}

/// The inner build's target directory: `zmem-preload` in the outer target
/// directory (`OUT_DIR` is `<target>[/<triple>]/<profile>/build/<pkg>/out`),
/// or inside `OUT_DIR` when it is laid out otherwise.
fn inner_target_dir(out_dir: &Path) -> PathBuf {
    let mut up = out_dir.ancestors();
    match (up.nth(2), up.nth(1)) {
        (Some(build), Some(target)) if build.file_name() == Some("build".as_ref()) => {
            target.join("zmem-preload")
        }
        _ => out_dir.join("preload-target"),
    }
}

/// The prerequisites of a Makefile-style dep-info file (`out: a b\ c`),
/// with `\ ` read as a space in a name.
fn dep_info_sources(text: &str) -> Vec<String> {
    let mut all = Vec::new();
    for line in text.lines() {
        let Some((_, deps)) = line.split_once(": ") else {
            continue;
        };
        let mut cur = String::new();
        let mut chars = deps.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&' ') => {
                    cur.push(' ');
                    chars.next();
                }
                ' ' => {
                    if !cur.is_empty() {
                        all.push(std::mem::take(&mut cur));
                    }
                }
                c => cur.push(c),
            }
        }
        if !cur.is_empty() {
            all.push(cur);
        }
    }
    all
}
