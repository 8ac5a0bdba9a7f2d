//! `zmem run` end to end: an unmodified Python program (the word index of
//! `workloads/word_index.py` over the Linux source's text) and a C program
//! (`workloads/page_trace.c`, a skewed page trace over one malloc'd buffer)
//! give the same output in a region a quarter of their size, the first
//! with the kernel reading and writing region pages (its `read` of the
//! text, its `write` of the copy);
//! threads, a forked child and a program it runs work; a child made by a
//! path glibc's fork() handlers do not see (`_Fork`, `clone` without
//! `CLONE_VM`, the raw clone, clone3 and fork system calls;
//! `workloads/fork_paths.c`) reads its own copy of every page too; the
//! exit code is the program's; bad input is one line and a non-zero exit.
//!
//! The binary carries its preload library (a copy of zmem alone in a
//! directory runs a program in a region); a program it runs sees only the
//! descriptors it was given, and its standard error stays its own; a child
//! forked from a thread that is not the main one ends when its thread does.
//!
//! The region needs a userfaultfd that serves the kernel's faults (root or
//! /dev/userfaultfd here); elsewhere `zmem run` must refuse, which the
//! tests check instead.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ZMEM: &str = env!("CARGO_BIN_EXE_zmem");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The running Python interpreter's own path (not a shim script).
fn python() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    let p = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!p.is_empty()).then(|| PathBuf::from(p))
}

fn full_userfaultfd() -> bool {
    testkit::userfaultfd_serves_kernel()
}

/// Whether `zmem run` can serve a program here (after saying why not).
fn region_or_skip() -> bool {
    let here = full_userfaultfd();
    if !here {
        eprintln!("skipped: no access to /dev/userfaultfd");
    }
    here
}

/// The Python interpreter, where `zmem run` can serve it here (after
/// saying why not).
fn python_in_a_region() -> Option<PathBuf> {
    if !region_or_skip() {
        return None;
    }
    let py = python();
    if py.is_none() {
        eprintln!("skipped: no python3");
    }
    py
}

/// An empty directory of the test's own under the temp directory,
/// removed on drop unless the test is failing (what it holds then may
/// tell why).
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn scratch(name: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("zmem-run-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

fn zmem_run(args: &[&str]) -> Output {
    zmem_run_with(Path::new(ZMEM), args, &[])
}

/// `zmem run` of the binary at `zmem`, with `env` added to its
/// environment (and `ZMEM_PRELOAD` removed unless given).
fn zmem_run_with(zmem: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.arg("600")
        .arg(zmem)
        .arg("run")
        .args(args)
        .env_remove("ZMEM_PRELOAD");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// `zmem run`'s arguments: `--limit limit`, then `options`, then
/// `--stats-json stats`, then `--`, `program` and its `args`.
fn run_args<'a>(
    limit: &'a str,
    options: &[&'a str],
    stats: &'a Path,
    program: &'a Path,
    args: &[&'a str],
) -> Vec<&'a str> {
    let mut all = vec!["--limit", limit];
    all.extend(options);
    all.extend([
        "--stats-json",
        stats.to_str().unwrap(),
        "--",
        program.to_str().unwrap(),
    ]);
    all.extend(args);
    all
}

/// `workloads/NAME.c` compiled into `dir`; `None` (saying so) without a C
/// compiler.
fn compiled(dir: &Path, name: &str) -> Option<PathBuf> {
    let bin = dir.join(name);
    let built = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(root().join(format!("crates/cli/tests/workloads/{name}.c")))
        .output();
    match built {
        Err(e) => {
            eprintln!("skipped: no C compiler (cc: {e})");
            None
        }
        Ok(o) => {
            assert!(o.status.success(), "cc failed: {}", text(&o.stderr));
            Some(bin)
        }
    }
}

/// [`python_in_a_region`], and a scratch directory for the test's files.
fn python_with_scratch(name: &str) -> Option<(PathBuf, Scratch)> {
    let py = python_in_a_region()?;
    Some((py, scratch(name)))
}

/// `workloads/NAME.c` compiled into a scratch directory named after it,
/// where `zmem run` can serve it; `None` (saying why) otherwise.
fn workload_in_a_region(name: &str) -> Option<(Scratch, PathBuf)> {
    if !region_or_skip() {
        return None;
    }
    let dir = scratch(name);
    let bin = compiled(&dir, name)?;
    Some((dir, bin))
}

/// Every process's statistics that `--stats-json` wrote (the command's own
/// process first).
fn stats_of(path: &Path) -> Vec<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

#[test]
fn a_python_word_index_gives_the_same_answers_in_a_quarter_of_its_memory() {
    let Some((py, dir)) = python_with_scratch("words") else {
        return;
    };
    let words = dir.join("words.txt");
    let made = Command::new(root().join("scripts/linux-text"))
        .arg("8")
        .arg(&words)
        .status()
        .unwrap();
    assert!(made.success(), "scripts/linux-text failed");
    let workload = root().join("crates/cli/tests/workloads/word_index.py");
    let plain = Command::new(&py)
        .arg(&workload)
        .arg(&words)
        .args(["200000", "7"])
        .output()
        .unwrap();
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    let stats = dir.join("stats.json");
    let copy = dir.join("copy.txt");
    // About 145 MiB at its peak without zmem: 36M is a quarter.
    let run = zmem_run(&run_args(
        "36M",
        &[],
        &stats,
        &py,
        &[
            workload.to_str().unwrap(),
            words.to_str().unwrap(),
            "200000",
            "7",
            copy.to_str().unwrap(),
        ],
    ));
    let err = text(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert_eq!(text(&run.stdout), text(&plain.stdout), "{err}");
    assert!(
        std::fs::read(&copy).unwrap() == std::fs::read(&words).unwrap(),
        "the copy the kernel wrote from region pages differs"
    );
    assert!(err.starts_with("zmem run: "), "{err}");
    let all = stats_of(&stats);
    let own = &all[0];
    let r = &own["region"];
    let peak = own["handed_out_peak_bytes"].as_u64().unwrap();
    assert!(
        peak > 72 << 20,
        "the region held {peak} bytes at most: {own}"
    );
    assert_eq!(
        r["resident_limit_pages"].as_u64().unwrap(),
        (36 << 20) / 4096
    );
    assert!(
        r["faults"]["missing_store"].as_u64().unwrap() > 1000,
        "{own}"
    );
    assert!(r["mm_stat"]["mem_used_max"].as_u64().unwrap() > 0, "{own}");
}

#[test]
fn a_c_page_trace_gives_the_same_output_in_a_quarter_of_its_memory() {
    let Some((dir, bin)) = workload_in_a_region("page_trace") else {
        return;
    };
    // 16 MiB in one malloc, 100,000 Zipf page accesses, seed 7.
    let args = ["16", "100000", "7"];
    let plain = Command::new(&bin).args(args).output().unwrap();
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    assert!(
        text(&plain.stdout).contains(" 0 wrong,"),
        "{}",
        text(&plain.stdout)
    );
    let stats = dir.join("stats.json");
    let run = zmem_run(&run_args("4M", &[], &stats, &bin, &args));
    let err = text(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{err}");
    assert_eq!(text(&run.stdout), text(&plain.stdout), "{err}");
    let all = stats_of(&stats);
    let own = &all[0];
    let r = &own["region"];
    assert_eq!(
        own["handed_out_peak_bytes"].as_u64().unwrap() >> 20,
        16,
        "the buffer was not in the region: {own}"
    );
    assert_eq!(r["resident_limit_pages"].as_u64().unwrap(), 1024);
    assert!(
        r["faults"]["missing_store"].as_u64().unwrap() > 0,
        "the limit never bit: {own}"
    );

    // The compressor's settings reach every process's store: zstd at level
    // 19 holds the same pages in less memory at its peak than at level -5
    // (the program frees its buffer before it exits, so the peak is what
    // is left to compare).
    let peak_pool = |params: &str| {
        let run = zmem_run(&run_args(
            "4M",
            &["--comp", "zstd", "--algorithm-params", params],
            &stats,
            &bin,
            &["16", "20000", "7"],
        ));
        let err = text(&run.stderr);
        assert_eq!(run.status.code(), Some(0), "{params}: {err}");
        assert_eq!(text(&run.stdout).lines().count(), 1, "{params}: {err}");
        let all = stats_of(&stats);
        let m = &all[0]["region"]["mm_stat"];
        let peak = m["mem_used_max"].as_u64().unwrap();
        assert!(peak > 1 << 20, "{params}: {m}");
        peak
    };
    let (fast, small) = (peak_pool("level=-5"), peak_pool("level=19"));
    assert!(
        small < fast,
        "level 19 peaked at {small} bytes, level -5 at {fast}"
    );

    // A limit that covers the process: the region keeps what the rest of
    // the program and `zmem run` itself leave of it, never less than a
    // quarter; the output is the same. The handler placement options both
    // give the same output too, and so does a clock that sees faults only
    // (`--soft-dirty off`; tests/vm_run.rs runs it on a kernel that has
    // the bits).
    for extra in [
        &["--limit-covers", "process"][..],
        &["--handler-cpu", "any"],
        &["--handler-cpu", "follow"],
        &["--soft-dirty", "off"],
    ] {
        let run = zmem_run(&run_args("4M", extra, &stats, &bin, &args));
        let err = text(&run.stderr);
        assert_eq!(run.status.code(), Some(0), "{extra:?}: {err}");
        assert_eq!(text(&run.stdout), text(&plain.stdout), "{extra:?}: {err}");
        let all = stats_of(&stats);
        let r = &all[0]["region"];
        let share = r["region_share_pages"].as_u64().unwrap();
        let outside = r["outside_bytes"].as_u64().unwrap();
        if extra[0] == "--limit-covers" {
            assert_eq!(r["limit_covers"], "process", "{r}");
            // The program's own heap, the region's tables and threads, and
            // `zmem run`: at least a few hundred KiB.
            assert!(outside > 256 << 10, "{r}");
            assert!((256..1024).contains(&share), "{r}");
            // The share and the outside come from one measurement (read
            // while the evictor may take the next: a little slack).
            let rest = 1024u64.saturating_sub(outside.div_ceil(4096));
            assert!(share == 256 || share.abs_diff(rest) <= 64, "{r}");
        } else {
            assert_eq!(r["limit_covers"], "region", "{r}");
            assert_eq!((share, outside), (1024, 0), "{r}");
            if extra[0] == "--soft-dirty" {
                assert_eq!(r["soft_dirty"], false, "{r}");
                assert_eq!(r["evictions"]["written_spared"], 0, "{r}");
            }
            if extra[1] == "any" {
                assert_eq!(r["handler_follows"], false, "{r}");
                assert_eq!(r["handler_moves"], 0, "{r}");
            }
        }
    }
}

#[test]
fn threads_a_forked_child_and_a_program_it_runs_all_work() {
    let Some((py, dir)) = python_with_scratch("procs") else {
        return;
    };
    let stats = dir.join("stats.json");
    // Four threads each build 8 MiB of text in a bytearray and a list of
    // strings; a forked child checks its copy and changes it; a second
    // Python process (run by subprocess) has a region of its own.
    let script = r#"
import hashlib, os, subprocess, sys, threading
out = {}
def work(k):
    b = bytearray()
    for i in range(160000):
        b += b"thread %d line %d of a buffer\n" % (k, i)
    words = [("w%d-%d" % (k, i)) * 3 for i in range(100000)]
    out[k] = (b, words)
ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
digest = hashlib.sha256(b"".join(out[k][0] for k in range(4))).hexdigest()
pid = os.fork()
if pid == 0:
    ok = hashlib.sha256(b"".join(out[k][0] for k in range(4))).hexdigest() == digest
    out[0][0][:4] = b"XXXX"
    os._exit(0 if ok and out[3][1][99999] == "w3-99999" * 3 else 1)
_, st = os.waitpid(pid, 0)
assert st == 0, st
assert out[0][0][:6] == b"thread", "the child's write reached the parent"
sub = subprocess.run([sys.executable, "-c", "print(sum(len(bytearray(4 << 20)) for _ in range(8)))"], capture_output=True, text=True)
print(digest == hashlib.sha256(b"".join(out[k][0] for k in range(4))).hexdigest(), sub.stdout.strip())
"#;
    let run = zmem_run(&run_args("8M", &[], &stats, &py, &["-c", script]));
    let err = text(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert_eq!(text(&run.stdout).trim(), "True 33554432", "{err}");
    let all = stats_of(&stats);
    // The program and the one it ran (the forked child left by _exit).
    assert!(all.len() >= 2, "{all:?}");
    assert!(err.contains("more process(es)"), "{err}");
    let own = &all[0];
    assert!(
        own["region"]["fork_reinits"].as_u64().unwrap_or(0) == 0,
        "{own}"
    );
    assert!(
        own["region"]["faults"]["missing_store"].as_u64().unwrap() > 0,
        "{own}"
    );
}

/// Runs `program` with `args` under a 120 s deadline (`timeout`, which
/// kills its process group when it expires), its output in files, so a
/// process it leaves behind cannot hang the test; fails the test (after
/// killing them) if any process of the group is left when it ends. The
/// exit code, standard output and standard error.
fn within_deadline(dir: &Path, program: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = Command::new("timeout")
        .arg("120")
        .arg(program)
        .args(args)
        .env_remove("ZMEM_PRELOAD")
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let code = child.wait().unwrap().code();
    // `timeout` leads a process group of its own.
    let group = child.id() as libc::pid_t;
    std::thread::sleep(std::time::Duration::from_millis(200));
    // SAFETY: signal 0 only asks whether the group has a member.
    let left = unsafe { libc::kill(-group, 0) } == 0;
    if left {
        // SAFETY: the group `timeout` made for this program alone.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
    let (out, err) = (
        std::fs::read_to_string(&out).unwrap(),
        std::fs::read_to_string(&err).unwrap(),
    );
    assert!(!left, "{program:?} left a process behind: {out}{err}");
    (code, out, err)
}

#[test]
fn a_child_made_by_clone_clone3_fork_or_a_raw_fork_sees_its_own_memory() {
    let Some((dir, bin)) = workload_in_a_region("fork_paths") else {
        return;
    };
    // 64 MiB under a 16 MiB limit: three quarters of the pages are in the
    // store when each child is made (by fork(), _Fork(), clone() without
    // CLONE_VM, and the raw clone, clone3 and fork system calls). Each
    // child checks every page and writes some; the parent checks its own
    // after each. Each run takes a few seconds.
    let plain = within_deadline(&dir, &bin, &["64"]);
    assert_eq!(plain.0, Some(0), "{}", plain.2);
    let out = plain.1;
    assert_eq!(out.lines().count(), 7, "{out}");
    assert!(out.ends_with("16384 pages, all right\n"), "{out}");
    let stats = dir.join("stats.json");
    let mut args = vec!["run"];
    args.extend(run_args("16M", &[], &stats, &bin, &["64"]));
    let (code, run_out, err) = within_deadline(&dir, Path::new(ZMEM), &args);
    assert_eq!(run_out, out, "{err}");
    assert_eq!(code, Some(0), "{err}");
    let all = stats_of(&stats);
    let r = &all[0]["region"];
    assert!(
        all[0]["handed_out_peak_bytes"].as_u64().unwrap() >= 64 << 20,
        "the buffer was not in the region: {}",
        all[0]
    );
    assert_eq!(r["resident_limit_pages"].as_u64().unwrap(), 4096, "{r}");
    assert!(
        r["faults"]["missing_store"].as_u64().unwrap() > 0,
        "the limit never bit: {r}"
    );
}

#[test]
fn the_exit_code_is_the_programs() {
    if !full_userfaultfd() {
        return;
    }
    let run = zmem_run(&["--limit", "8M", "--", "sh", "-c", "exit 7"]);
    assert_eq!(run.status.code(), Some(7), "{}", text(&run.stderr));
    let run = zmem_run(&["--limit", "8M", "-q", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(run.status.code(), Some(137), "{}", text(&run.stderr));
    assert!(
        run.stderr.is_empty(),
        "--quiet printed {}",
        text(&run.stderr)
    );
}

#[test]
fn the_binary_carries_its_preload_library() {
    let Some((py, dir)) = python_with_scratch("alone") else {
        return;
    };
    // A copy of zmem alone in a directory: nothing beside it to find.
    let zmem = dir.join("zmem");
    std::fs::copy(ZMEM, &zmem).unwrap();
    let stats = dir.join("stats.json");
    // 48 MiB of bytearrays at a limit of 8M; the program prints where its
    // loader found the library and the descriptors it has below 256.
    let script = "import os\nb = [bytearray(os.urandom(1 << 16)) * 16 for _ in range(48)]\n\
        print(sum(len(x) for x in b), os.environ['LD_PRELOAD'])";
    let run = zmem_run_with(
        &zmem,
        &run_args("8M", &[], &stats, &py, &["-c", script]),
        &[],
    );
    let err = text(&run.stderr);
    assert!(run.status.success(), "{err}");
    let out = text(&run.stdout);
    let (bytes, preload) = out.trim().split_once(' ').expect("two words");
    assert_eq!(bytes, (48u64 << 20).to_string(), "{err}");
    // A sealed memfd of the zmem process, reached through /proc.
    assert!(
        preload.starts_with("/proc/") && preload.contains("/fd/"),
        "{preload}"
    );
    let own = &stats_of(&stats)[0];
    assert!(
        own["region"]["faults"]["missing_store"].as_u64().unwrap() > 0,
        "{own}"
    );
    // ZMEM_PRELOAD overrides it: a file that is no library reaches the
    // program's loader, which refuses it (and the program runs unserved).
    let not_a_library = dir.join("not-a-library.so");
    std::fs::write(&not_a_library, "text\n").unwrap();
    let run = zmem_run_with(
        &zmem,
        &["--limit", "8M", "--", "true"],
        &[("ZMEM_PRELOAD", not_a_library.to_str().unwrap())],
    );
    let err = text(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(err.contains("not-a-library.so"), "{err}");
    assert!(err.contains("no statistics from it"), "{err}");
    refused(
        &["--limit", "8M", "--", "true"],
        1,
        "ZMEM_PRELOAD=/nonexistent/lib.so is not a file",
        &[("ZMEM_PRELOAD", "/nonexistent/lib.so")],
    );
}

#[test]
fn a_program_it_runs_sees_only_the_descriptors_it_was_given() {
    let Some((py, dir)) = python_with_scratch("fds") else {
        return;
    };
    let stats = dir.join("stats.json");
    // The Python program lists what its children see: an unserved one
    // (`ls /proc/self/fd`), a served one by vfork and by fork (the numbers
    // below 256, as CPython's own tests scan them), one started by
    // posix_spawn with descriptor 0 closed, and one whose region cannot
    // start (its standard error must stay empty).
    let workload = root().join("crates/cli/tests/workloads/descriptors.py");
    let plain = Command::new(&py).arg(&workload).output().unwrap();
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    let run = zmem_run(&run_args(
        "8M",
        &[],
        &stats,
        &py,
        &[workload.to_str().unwrap()],
    ));
    let err = text(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert_eq!(text(&run.stdout), text(&plain.stdout), "{err}");
    assert!(text(&plain.stdout).contains("spawned 0 closed 9"));
    assert!(text(&plain.stdout).contains("unserved ok ''"));
    // The unserved child's reason is in the summary instead.
    assert!(
        err.contains("ran without one; the first: ZMEM_RUN_SOFT_DIRTY=maybe"),
        "{err}"
    );
    // Every served child had a region of its own: they were served.
    let served = stats_of(&stats)
        .iter()
        .filter(|v| v["region"].is_object())
        .count();
    assert!(served >= 4, "{served} served processes: {err}");
}

#[test]
fn a_child_forked_from_a_thread_that_is_not_the_main_one_ends() {
    let Some(py) = python_in_a_region() else {
        return;
    };
    // The child's one thread is the copy of the thread that forked; when
    // it returns, glibc ends the process, unless the region's threads in
    // the child keep it alive (the parent would wait for ever: the
    // command's deadline is 120 s, the program takes well under one).
    let workload = root().join("crates/cli/tests/workloads/fork_from_thread.py");
    let plain = Command::new(&py).arg(&workload).output().unwrap();
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    let run = Command::new("timeout")
        .arg("120")
        .arg(ZMEM)
        .args(["run", "-q", "--limit", "16M", "--"])
        .arg(&py)
        .arg(&workload)
        .env_remove("ZMEM_PRELOAD")
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert_eq!(text(&run.stdout), text(&plain.stdout));
    assert_eq!(
        text(&plain.stdout),
        "Thread-1 (func)\nTrue\nTrue\nchild status 0\n"
    );
}

/// One line on standard error and the exit code.
fn refused(args: &[&str], code: i32, says: &str, env: &[(&str, &str)]) {
    let run = zmem_run_with(Path::new(ZMEM), args, env);
    let err = text(&run.stderr);
    assert_eq!(run.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
    assert!(run.stdout.is_empty(), "{args:?}");
}

#[test]
fn bad_input_is_one_line_and_a_non_zero_exit() {
    refused(&["--limit", "0", "--", "true"], 2, "out of range", &[]);
    refused(
        &["--limit", "2G", "--span", "1G", "--", "true"],
        2,
        "above the region's span",
        &[],
    );
    refused(&["--comp", "nope", "--", "true"], 2, "nope", &[]);
    refused(
        &["--handler-cpu", "nowhere", "--", "true"],
        2,
        "nowhere",
        &[],
    );
    refused(
        &["--limit-covers", "machine", "--", "true"],
        2,
        "machine",
        &[],
    );
    refused(&["--soft-dirty", "maybe", "--", "true"], 2, "maybe", &[]);
    refused(
        &[
            "--comp",
            "zstd",
            "--algorithm-params",
            "dict=/nonexistent/d",
            "--",
            "true",
        ],
        2,
        "/nonexistent/d",
        &[],
    );
    refused(
        &[
            "--comp",
            "lz4",
            "--algorithm-params",
            "level=3 speed=9",
            "--",
            "true",
        ],
        2,
        "speed",
        &[],
    );
    refused(&["--", "/nonexistent/program"], 1, "no such file", &[]);
    refused(&["--", "no-such-command-zmem"], 1, "command not found", &[]);
    refused(&[], 2, "required", &[]);
    let dir = scratch("static");
    let src = dir.join("s.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    let bin = dir.join("s");
    let built = Command::new("cc")
        .args(["-static", "-o"])
        .arg(&bin)
        .arg(&src)
        .status();
    if built.map(|s| s.success()).unwrap_or(false) {
        refused(&["--", bin.to_str().unwrap()], 1, "a static binary", &[]);
    } else {
        eprintln!("no static C build here: the static-binary case is not run");
    }
    if !full_userfaultfd() {
        refused(
            &["--", "true"],
            1,
            "no userfaultfd that serves the kernel's faults",
            &[],
        );
    }
}

/// A JVM under `zmem run`: its launcher `dlopen`s libjvm.so, whose
/// constructors touch memory in the region while the dynamic loader's lock
/// is held; the region's threads must never wait for that lock. Three runs
/// under each limit rule, each under a deadline, the output the plain
/// run's. (Skipped where there is no `java`.)
#[test]
fn a_jvm_finishes_under_either_limit_rule() {
    if !region_or_skip() {
        return;
    }
    if Command::new("java").arg("-version").output().is_err() {
        eprintln!("skipped: no java");
        return;
    }
    let d = scratch("jvm");
    let src = d.join("Big.java");
    std::fs::write(
        &src,
        "import java.nio.ByteBuffer;\n\
         import java.util.HashMap;\n\
         public class Big {\n\
           public static void main(String[] a) {\n\
             HashMap<Integer, String> m = new HashMap<>();\n\
             for (int i = 0; i < 1_000_000; i++) m.put(i, \"value-\" + (i * 7919L));\n\
             ByteBuffer[] b = new ByteBuffer[100];\n\
             for (int i = 0; i < 100; i++) {\n\
               b[i] = ByteBuffer.allocateDirect(1 << 20);\n\
               for (int j = 0; j < (1 << 20); j += 4096) b[i].put(j, (byte) (i + j));\n\
             }\n\
             long sum = 0;\n\
             for (int i = 0; i < 1_000_000; i += 3) sum += m.get(i).length();\n\
             for (int i = 0; i < 100; i++)\n\
               for (int j = 0; j < (1 << 20); j += 4096) sum += b[i].get(j);\n\
             System.out.println(\"sum \" + sum + \" size \" + m.size());\n\
           }\n\
         }\n",
    )
    .unwrap();
    let java = ["java", "-Xmx512m", "-XX:MaxDirectMemorySize=512m"];
    let plain = Command::new("timeout")
        .arg("120")
        .args(java)
        .arg(&src)
        .output()
        .unwrap();
    assert!(plain.status.success(), "plain: {}", text(&plain.stderr));
    let want = text(&plain.stdout);
    assert!(want.starts_with("sum "), "plain: {want}");
    for rule in [&["--limit-covers", "process"][..], &[][..]] {
        for round in 0..3 {
            let mut args = vec!["--limit", "96M"];
            args.extend(rule);
            args.push("--");
            args.extend(java);
            args.push(src.to_str().unwrap());
            let out = Command::new("timeout")
                .arg("120")
                .arg(ZMEM)
                .arg("run")
                .args(&args)
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "zmem run {rule:?}, round {round} (124: the deadline): {}",
                text(&out.stderr)
            );
            assert_eq!(text(&out.stdout), want, "zmem run {rule:?}, round {round}");
        }
    }
}
