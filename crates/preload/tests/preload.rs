//! The library loaded into a C program (`tests/c/hooks.c`) that uses every
//! hook well past the region's limit, with a forked reader, a forked child
//! and the kernel reading region pages; and left inert without the
//! settings.
//!
//! Cargo builds this crate's library, every crate type in its manifest,
//! before it links an integration test, into the profile's `deps/`
//! directory beside this test's executable: that fresh
//! `libzmem_preload.so` is the one loaded. The C compiler is the system's
//! `cc`; without it, or without a userfaultfd that serves the kernel's
//! faults (root, /dev/userfaultfd), the tests print why and pass.

use std::path::{Path, PathBuf};
use std::process::Command;

fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("deps/");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let p = dir.join("libzmem_preload.so");
        if p.is_file() {
            return p;
        }
    }
    panic!("libzmem_preload.so is not beside {}", exe.display());
}

/// `tests/c/hooks.c` compiled into `dir`, or `None` without `cc`.
fn hooks_program(dir: &Path) -> Option<PathBuf> {
    let out = dir.join("hooks");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/hooks.c");
    let status = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-o"])
        .arg(&out)
        .arg(&src)
        .status();
    match status {
        Ok(s) if s.success() => Some(out),
        Ok(s) => panic!("cc failed on hooks.c: {s}"),
        Err(e) => {
            eprintln!("skipped: no C compiler ({e})");
            None
        }
    }
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("zmem-preload-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn every_hook_keeps_every_byte_past_the_limit() {
    if !testkit::userfaultfd_serves_kernel() {
        eprintln!("skipped: no access to /dev/userfaultfd");
        return;
    }
    let dir = scratch("hooks");
    let Some(prog) = hooks_program(&dir) else {
        return;
    };
    let stats = dir.join("stats");
    std::fs::create_dir(&stats).unwrap();
    // `env` sets the preload for the program alone (it execs it, leaving
    // no statistics of its own); `timeout` runs without it.
    let out = Command::new("timeout")
        .arg("300")
        .arg("env")
        .arg(format!("LD_PRELOAD={}", library().display()))
        .arg(&prog)
        .env("ZMEM_RUN_LIMIT", (16u64 << 20).to_string())
        .env("ZMEM_RUN_SPAN", (1u64 << 30).to_string())
        .env("ZMEM_RUN_COMP", "lz4")
        .env("ZMEM_RUN_MIN", "65536")
        .env("ZMEM_RUN_STATS_DIR", &stats)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "hooks.c: {} {stdout} {stderr}",
        out.status
    );
    assert_eq!(stdout.trim(), "ok");
    // The parent, the reader and the child each wrote theirs at exit.
    let files: Vec<_> = std::fs::read_dir(&stats).unwrap().flatten().collect();
    assert_eq!(files.len(), 3, "{files:?}");
    let all: Vec<serde_json::Value> = files
        .iter()
        .map(|f| serde_json::from_str(&std::fs::read_to_string(f.path()).unwrap()).unwrap())
        .collect();
    let parent = all
        .iter()
        .max_by_key(|v| v["served"]["allocs"].as_u64().unwrap_or(0))
        .unwrap();
    let r = &parent["region"];
    assert!(parent["served"]["mmaps"].as_u64().unwrap() >= 8, "{parent}");
    assert!(
        parent["served"]["allocs"].as_u64().unwrap() >= 16,
        "{parent}"
    );
    assert!(
        parent["handed_out_peak_bytes"].as_u64().unwrap() >= 96 << 20,
        "{parent}"
    );
    assert!(
        r["faults"]["missing_store"].as_u64().unwrap() > 0,
        "{parent}"
    );
    assert!(
        r["mm_stat"]["mem_used_max"].as_u64().unwrap() > 0,
        "{parent}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_settings_the_library_does_nothing() {
    let dir = scratch("inert");
    let Some(prog) = hooks_program(&dir) else {
        return;
    };
    let out = Command::new("timeout")
        .arg("120")
        .arg("env")
        .arg(format!("LD_PRELOAD={}", library().display()))
        .arg(&prog)
        .env_remove("ZMEM_RUN_LIMIT")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
