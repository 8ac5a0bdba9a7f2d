//! A peer's own test suite under `zmem run`: modules of CPython's `test`
//! package (Debian's python3.11 and its `libpython3.11-testsuite`, which
//! scripts/install-deps installs) that stress fork, threads, signals,
//! subprocesses, mmap and system calls, run plainly and then under `zmem
//! run --limit` at a quarter of the plain run's largest process peak, then
//! at an eighth;
//! every test case's result (passed, failed, skipped) must be the same in
//! both runs, as regrtest's JUnit files record them.
//!
//! `test_pass_fds_redirected` lists a Python child's descriptors up to its
//! soft `RLIMIT_NOFILE`, and `test_close_fds_when_max_fd_is_lowered` checks
//! numbers a process held before it lowered that limit; a child with a
//! region of its own holds the region's descriptors (its userfaultfd and
//! eventfds), kept at or above both 1024 and that limit, where neither
//! looks (region's `out_of_the_way`). Where the hard limit equals the soft
//! one and is above 65536 that cannot be done (the band stays under 1024,
//! in reach of the first one's scan), and that case is left out of both
//! runs, saying so.
//!
//! Skips (saying why) where there is no userfaultfd that serves the
//! kernel's faults, no /usr/bin/python3.11 or no test package. It takes
//! about four minutes, mostly the suite's own sleeps, so
//! scripts/test-all runs it beside the lints, Miri and the fuzz steps
//! (hence `#[ignore]`: `cargo test --release -p zmem-cli --test run_cpython
//! -- --ignored` runs it alone).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const ZMEM: &str = env!("CARGO_BIN_EXE_zmem");
const PYTHON: &str = "/usr/bin/python3.11";

/// The modules: processes, threads, signals, descriptors, memory maps.
const MODULES: &[&str] = &[
    "test_subprocess",
    "test_posix",
    "test_threading",
    "test_os",
    "test_signal",
    "test_mmap",
    "test_fork1",
    "test_wait4",
    "test_wait3",
    "test_select",
    "test_poll",
    "test_fcntl",
    "test_pty",
    "test_resource",
    "test_tempfile",
    "test_shutil",
    "test_gc",
    "test_zlib",
    "test_json",
];

/// Cases left out of both runs on this machine, with the reason in the
/// module comment: the descriptor scan's case where the soft and hard
/// `RLIMIT_NOFILE` are equal and above 65536.
fn left_out() -> Vec<&'static str> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    if ok && lim.rlim_cur == lim.rlim_max && lim.rlim_cur > 65536 {
        eprintln!(
            "left out: test_pass_fds_redirected (RLIMIT_NOFILE {} soft and hard: \
             the region's descriptors stay in reach of its scan)",
            lim.rlim_cur
        );
        vec!["test_pass_fds_redirected"]
    } else {
        Vec::new()
    }
}

/// Every test case's result in a regrtest JUnit file: "ok", "skipped" or
/// "failed" by `class.name`.
fn results(xml: &Path) -> BTreeMap<String, &'static str> {
    let text = std::fs::read_to_string(xml).unwrap_or_else(|e| panic!("{}: {e}", xml.display()));
    let mut out = BTreeMap::new();
    // Each case is `<testcase ... name="N" ...>` followed by its children
    // up to `</testcase>` (or it closes itself: passed).
    let mut rest = text.as_str();
    while let Some(start) = rest.find("<testcase ") {
        rest = &rest[start..];
        let head_end = rest.find('>').expect("a testcase tag ends");
        let head = &rest[..head_end];
        let attr = |name: &str| -> String {
            let key = format!(" {name}=\"");
            head.find(&key)
                .map(|i| {
                    let v = &head[i + key.len()..];
                    v[..v.find('"').expect("a quoted value")].to_string()
                })
                .unwrap_or_default()
        };
        let name = format!("{}.{}", attr("classname"), attr("name"));
        let (body, next) = if head.ends_with('/') {
            ("", &rest[head_end..])
        } else {
            let end = rest.find("</testcase>").expect("a testcase closes");
            (&rest[head_end..end], &rest[end..])
        };
        let result = if body.contains("<failure") || body.contains("<error") {
            "failed"
        } else if body.contains("<skipped") {
            "skipped"
        } else {
            "ok"
        };
        out.insert(name, result);
        rest = &next[1..];
    }
    out
}

/// The largest peak resident set of the processes this one has waited
/// for, in bytes.
fn children_peak() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    ru.ru_maxrss as u64 * 1024
}

/// regrtest's arguments: two workers, JUnit results to `junit`, the cases
/// left out, the modules.
fn regrtest(junit: &str) -> Vec<String> {
    let mut args: Vec<String> = ["-m", "test", "-j2", "--junit-xml", junit]
        .map(String::from)
        .to_vec();
    for case in left_out() {
        args.push("--ignore".into());
        args.push(case.into());
    }
    args.extend(MODULES.iter().map(|m| m.to_string()));
    args
}

#[test]
#[ignore = "minutes long, mostly sleeping: scripts/test-all runs it beside the lints"]
fn cpythons_own_tests_give_the_same_results_in_a_quarter_and_an_eighth_of_their_memory() {
    if !testkit::userfaultfd_serves_kernel() {
        eprintln!("skipped: no access to /dev/userfaultfd");
        return;
    }
    let tests = Path::new("/usr/lib/python3.11/test/test_subprocess.py");
    if !Path::new(PYTHON).exists() || !tests.exists() {
        eprintln!("skipped: no {PYTHON} with its test package (libpython3.11-testsuite)");
        return;
    }
    let dir: PathBuf = std::env::temp_dir().join(format!("zmem-cpython-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    let plain = Command::new("timeout")
        .arg("900")
        .arg(PYTHON)
        .args(regrtest("plain.xml"))
        .current_dir(&dir)
        .output()
        .expect("run python3.11");
    let peak = children_peak();
    let plain_results = results(&dir.join("plain.xml"));
    assert!(
        plain_results.len() > 500,
        "only {} cases ran plainly: {}",
        plain_results.len(),
        String::from_utf8_lossy(&plain.stdout)
    );

    for share in [4, 8] {
        let limit = (peak / share).max(4 << 20);
        let xml = format!("zmem-{share}.xml");
        let zmem = Command::new("timeout")
            .arg("900")
            .arg(ZMEM)
            .args(["run", "--limit", &limit.to_string(), "--"])
            .arg(PYTHON)
            .args(regrtest(&xml))
            .current_dir(&dir)
            .output()
            .expect("run zmem run");
        let zmem_results = results(&dir.join(&xml));
        let differ: Vec<String> = plain_results
            .iter()
            .filter(|(case, r)| zmem_results.get(*case) != Some(*r))
            .map(|(case, r)| {
                format!(
                    "{case}: {r} plainly, {:?} under zmem run",
                    zmem_results.get(case)
                )
            })
            .collect();
        eprintln!(
            "{} cases; plain exit {}, largest process peak {:.1} MiB; zmem run --limit {:.1} MiB \
             (1/{share}) exit {}",
            plain_results.len(),
            plain.status,
            peak as f64 / 1048576.0,
            limit as f64 / 1048576.0,
            zmem.status
        );
        assert!(
            differ.is_empty() && zmem_results.len() == plain_results.len(),
            "1/{share}: {} of {} cases differ ({} under zmem run):\n{}\n{}",
            differ.len(),
            plain_results.len(),
            zmem_results.len(),
            differ.join("\n"),
            String::from_utf8_lossy(&zmem.stderr)
        );
        assert_eq!(
            plain.status.code(),
            zmem.status.code(),
            "1/{share}: the exit codes differ"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
