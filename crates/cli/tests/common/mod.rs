//! Test support for running the `zmem` binary: its output, starting one
//! to act on while it runs, the check that a run succeeded, the stdout of
//! a run that must succeed and the JSON report of one (or of a run asked
//! for `--format json`). (`zmem serve`, a server rather than a run, has its
//! own: `serve_common`.)

#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

/// Runs `zmem ARGS` to the end; its output, whatever the exit status.
pub fn zmem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zmem"))
        .args(args)
        .output()
        .expect("run zmem")
}

/// Starts `zmem ARGS` with its stdout and stderr piped, for a test that
/// acts while it runs.
pub fn spawn_zmem(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_zmem"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start zmem")
}

/// The stdout of `zmem ARGS`, which must succeed (the test fails with its
/// stderr otherwise).
pub fn stdout_of(args: &[&str]) -> String {
    let out = zmem(args);
    assert!(
        out.status.success(),
        "zmem {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Fails the test with the run's stderr unless the run succeeded.
pub fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The JSON report of a run that must have succeeded (the test fails with
/// its stderr otherwise).
pub fn json(out: &Output) -> serde_json::Value {
    assert_ok(out);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The JSON report of `zmem ARGS --format json`, which must succeed (the
/// test fails with its stderr otherwise).
pub fn report(args: &[&str]) -> serde_json::Value {
    let mut args = args.to_vec();
    args.extend(["--format", "json"]);
    json(&zmem(&args))
}

/// The JSON report of `zmem replay FILE --raw --mode kernel-compat --comp
/// COMP` with a seeded half discard and compaction, its discards written
/// to `discards` for a kernel's zram to replay, and `extra` flags: the run
/// the fidelity tests compare a kernel's mm_stat with.
pub fn kernel_compat_replay(
    file: &Path,
    comp: &str,
    discards: &Path,
    extra: &[&str],
) -> serde_json::Value {
    let file = file.to_str().unwrap();
    let mut args = vec![
        "replay",
        file,
        "--raw",
        "--mode",
        "kernel-compat",
        "--comp",
        comp,
    ];
    args.extend(["--free-fraction", "0.5", "--seed", "7", "--compact"]);
    args.extend(["--write-discards", discards.to_str().unwrap()]);
    args.extend(extra);
    report(&args)
}

pub mod corpora;
pub mod holder;

/// `workloads/NAME.c` compiled to `NAME_OUT` in the tests' target folder,
/// where a qemu guest (which sees this machine's files, but a /tmp of its
/// own) can run it too.
pub fn workload_binary(name: &str, out_name: &str) -> std::path::PathBuf {
    let out = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(out_name);
    let src = format!("{}/tests/workloads/{name}.c", env!("CARGO_MANIFEST_DIR"));
    let ok = Command::new("cc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap()
        .success();
    assert!(ok, "cc {src}");
    out
}
