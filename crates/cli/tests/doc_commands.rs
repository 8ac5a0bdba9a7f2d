//! The shell blocks of README.md and docs/*.md, which users paste.
//!
//! Every ```` ```sh ```` block carries a marker on the line before its
//! fence, an HTML comment the rendered page does not show:
//! `<!-- doc-test: runs -->`, or `<!-- doc-test: needs WHAT; TEST -->`
//! saying what the block needs that a test machine lacks and which test
//! covers it instead. A block without a marker, a marker without a block,
//! a marker of another kind and a test file a reason names that does not
//! exist all fail.
//!
//! Each `runs` block is run as written by `bash -e` with `pipefail`, in a
//! fresh temporary directory (also HOME) holding the fixtures it names, with
//! `zmem` the binary under test first in PATH and no XDG_RUNTIME_DIR (a root
//! shell without logind), in a process group of its own under a deadline. It
//! must exit 0; whatever it left running (`zmem serve ... &`) is stopped
//! with the whole group when it ends. The blocks use the default socket
//! directory and fixed paths such as /tmp/zmem.pid, so they run one at a
//! time, and a lock file keeps two runs of this test on one machine apart.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one block may run.
const DEADLINE: Duration = Duration::from_secs(120);

/// The files whose shell blocks are checked, from the repository's root.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("read docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What a block's marker says.
#[derive(Debug, Clone, PartialEq)]
enum Marker {
    Runs,
    Needs(String),
}

/// One shell block: where its fence is (1-based line), its marker and its
/// text.
#[derive(Debug)]
struct Block {
    file: String,
    line: usize,
    marker: Marker,
    text: String,
}

/// The marker a line holds, if it is one: `Ok(None)` for an ordinary line,
/// an error for a `doc-test` comment that says neither `runs` nor
/// `needs ...`.
fn parse_marker(line: &str) -> Result<Option<Marker>, String> {
    let t = line.trim();
    let Some(body) = t
        .strip_prefix("<!--")
        .and_then(|b| b.strip_suffix("-->"))
        .map(str::trim)
    else {
        return Ok(None);
    };
    let Some(what) = body.strip_prefix("doc-test:").map(str::trim) else {
        return Ok(None);
    };
    if what == "runs" {
        return Ok(Some(Marker::Runs));
    }
    match what.strip_prefix("needs ") {
        Some(reason) if !reason.trim().is_empty() => Ok(Some(Marker::Needs(what.to_string()))),
        _ => Err(format!("marker {t:?} says neither `runs` nor `needs WHAT`")),
    }
}

/// The shell blocks of `doc` (named `file`), and the problems with their
/// markers.
fn parse(file: &str, doc: &str) -> (Vec<Block>, Vec<String>) {
    let lines: Vec<&str> = doc.lines().collect();
    let mut blocks = Vec::new();
    let mut problems = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        match parse_marker(line) {
            Err(e) => problems.push(format!("{file}:{}: {e}", i + 1)),
            Ok(Some(_)) if !lines.get(i + 1).is_some_and(|l| is_shell_fence(l)) => {
                problems.push(format!(
                    "{file}:{}: a doc-test marker not followed by a ```sh block",
                    i + 1
                ))
            }
            _ => {}
        }
        if !is_shell_fence(line) {
            i += 1;
            continue;
        }
        let fence = i + 1;
        let marker = match i.checked_sub(1).map(|p| parse_marker(lines[p])) {
            Some(Ok(Some(m))) => Some(m),
            _ => {
                problems.push(format!(
                    "{file}:{fence}: a ```sh block without a `<!-- doc-test: runs -->` or \
                     `<!-- doc-test: needs ... -->` line before its fence"
                ));
                None
            }
        };
        let mut text = String::new();
        i += 1;
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            text.push_str(lines[i]);
            text.push('\n');
            i += 1;
        }
        if i == lines.len() {
            problems.push(format!("{file}:{fence}: the ```sh block is not closed"));
        }
        i += 1;
        if let Some(marker) = marker {
            blocks.push(Block {
                file: file.to_string(),
                line: fence,
                marker,
                text,
            });
        }
    }
    (blocks, problems)
}

/// A fence opening a shell block (```` ```sh ````, and its other spellings,
/// which must not slip past the check).
fn is_shell_fence(line: &str) -> bool {
    let Some(lang) = line.trim_start().strip_prefix("```") else {
        return false;
    };
    matches!(
        lang.trim(),
        "sh" | "bash" | "shell" | "console" | "shell-session"
    )
}

/// Test files a `needs` reason names (`crates/cli/tests/vm_ublk.rs`, or
/// `bench_store.rs` beside the path before it) that do not exist.
fn missing_paths(root: &Path, reason: &str) -> Vec<String> {
    let mut missing = Vec::new();
    let mut dir = PathBuf::new();
    for word in reason.split_whitespace() {
        let word = word.trim_matches(|c: char| ",;:()'`".contains(c));
        if !(word.ends_with(".rs") || word.ends_with(".sh")) {
            continue;
        }
        let path = if word.contains('/') {
            PathBuf::from(word)
        } else {
            dir.join(word)
        };
        if let Some(parent) = path.parent() {
            dir = parent.to_path_buf();
        }
        if !root.join(&path).exists() {
            missing.push(path.display().to_string());
        }
    }
    missing
}

/// Every shell block of the docs, and every problem with the markers.
fn all_blocks() -> (Vec<Block>, Vec<String>) {
    let root = root();
    let mut blocks = Vec::new();
    let mut problems = Vec::new();
    for path in doc_files(&root) {
        let name = path
            .strip_prefix(&root)
            .expect("under the root")
            .display()
            .to_string();
        let doc = std::fs::read_to_string(&path).expect("read the doc");
        let (b, p) = parse(&name, &doc);
        blocks.extend(b);
        problems.extend(p);
    }
    for b in &blocks {
        if let Marker::Needs(reason) = &b.marker {
            for m in missing_paths(&root, reason) {
                problems.push(format!(
                    "{}:{}: the marker names {m}, which does not exist",
                    b.file, b.line
                ));
            }
        }
    }
    (blocks, problems)
}

#[test]
fn every_shell_block_says_whether_it_runs_here() {
    let (blocks, problems) = all_blocks();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        blocks.iter().any(|b| b.marker == Marker::Runs),
        "no block is marked runs"
    );
}

#[test]
fn the_marker_rules_catch_a_missing_marker_and_a_stray_one() {
    let doc = "text\n\n```sh\nzmem classes\n```\n\n<!-- doc-test: runs -->\nno block\n\n\
               <!-- doc-test: maybe -->\n```sh\ntrue\n```\n\
               <!-- doc-test: needs root; crates/cli/tests/nonexistent.rs -->\n```bash\ntrue\n```\n";
    let (blocks, problems) = parse("x.md", doc);
    assert!(
        problems[0].starts_with("x.md:3: a ```sh block without"),
        "{problems:?}"
    );
    assert!(
        problems[1].starts_with("x.md:7: a doc-test marker not"),
        "{problems:?}"
    );
    assert!(problems[2].starts_with("x.md:10: marker"), "{problems:?}");
    assert!(
        problems[3].starts_with("x.md:11: a ```sh block without"),
        "{problems:?}"
    );
    assert_eq!(problems.len(), 4, "{problems:?}");
    assert_eq!(blocks.len(), 1);
    let Marker::Needs(reason) = &blocks[0].marker else {
        panic!("{blocks:?}")
    };
    assert_eq!(
        missing_paths(&root(), reason),
        ["crates/cli/tests/nonexistent.rs"]
    );
    assert!(missing_paths(&root(), "crates/cli/tests/run.rs and inputs.rs").is_empty());
}

/// The fixture directory's files, made once: real data for the names the
/// docs use.
fn fixtures() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("doc-fixtures");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("fixture dir");
        // A disk image: 8 MiB of programs and libraries.
        std::fs::write(dir.join("disk.img"), testkit::real_data(8 << 20)).expect("disk.img");
        // A sample for zmem advise: 1 MiB, so that it measures in seconds.
        std::fs::write(dir.join("swap-sample.bin"), testkit::real_data(1 << 20))
            .expect("swap-sample.bin");
        // Part of the Linux tree: the kernel's UAPI headers (linux-libc-dev),
        // about 5 MiB as a tar.
        let ok = Command::new("tar")
            .arg("cf")
            .arg(dir.join("linux.tar"))
            .args(["-C", "/usr/include", "linux"])
            .status()
            .expect("run tar")
            .success();
        assert!(ok, "tar of /usr/include/linux");
        std::fs::write(dir.join("build_index.py"), BUILD_INDEX).expect("build_index.py");
        dir
    })
}

/// A Python program with a few tens of MiB of dict: the words of the C
/// headers, each with the places it occurs, and a checksum of the index.
const BUILD_INDEX: &str = r#""""An index of the words of /usr/include's headers, and its checksum."""

import os
import zlib

LIMIT = 1_000_000
index = {}
pos = 0
for root, dirs, files in os.walk("/usr/include"):
    dirs.sort()
    for name in sorted(files):
        if pos >= LIMIT:
            break
        try:
            with open(os.path.join(root, name), "rb") as f:
                words = f.read().split()
        except OSError:
            continue
        for w in words:
            index.setdefault(w, []).append(pos)
            pos += 1
check = 0
for w in sorted(index):
    places = index[w]
    check = zlib.crc32(b"%s %d %d" % (w, len(places), places[len(places) // 2]), check)
print(f"{pos} words, {len(index)} distinct, checksum {check:08x}")
"#;

/// Makes a temporary directory holding the fixtures `text` names.
fn block_dir(text: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("doc-block-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("temp dir");
    for entry in std::fs::read_dir(fixtures()).expect("read fixtures") {
        let path = entry.expect("fixture").path();
        let name = path.file_name().expect("a name").to_string_lossy();
        if text.contains(name.as_ref()) {
            std::fs::copy(&path, dir.path().join(name.as_ref())).expect("copy fixture");
        }
    }
    dir
}

/// Whether any process of group `pgid` is left (after reaping those that
/// are our children: orphans come to us, the subreaper).
fn group_alive(pgid: libc::pid_t) -> bool {
    loop {
        let mut status = 0;
        // SAFETY: waitpid only writes the status through the valid pointer.
        let r = unsafe { libc::waitpid(-pgid, &mut status, libc::WNOHANG) };
        if r <= 0 {
            break;
        }
    }
    // SAFETY: signal 0 only checks that the group exists.
    unsafe { libc::kill(-pgid, 0) == 0 }
}

/// Stops every process of group `pgid`: SIGTERM, so that servers remove
/// their sockets, then SIGKILL after 10 s. Whether it had to kill.
fn stop_group(pgid: libc::pid_t) -> bool {
    // SAFETY: kill has no memory-safety preconditions; the group is ours.
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    let until = Instant::now() + Duration::from_secs(10);
    while group_alive(pgid) {
        if Instant::now() > until {
            // SAFETY: as above.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            while group_alive(pgid) {
                std::thread::sleep(Duration::from_millis(20));
            }
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Runs one block; an error describing its failure.
fn run_block(block: &Block, bin_dir: &Path) -> Result<Duration, String> {
    let dir = block_dir(&block.text);
    let log_path = dir.path().join("..").join(format!(
        "{}.log",
        dir.path().file_name().unwrap().to_string_lossy()
    ));
    let log = File::create(&log_path).expect("log file");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let start = Instant::now();
    let mut child = Command::new("bash")
        .args(["-e", "-o", "pipefail", "-c", &block.text])
        .current_dir(dir.path())
        .env_remove("XDG_RUNTIME_DIR")
        .env("HOME", dir.path())
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("start bash");
    let pgid = child.id() as libc::pid_t;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for bash") {
            break Some(st);
        }
        if start.elapsed() > DEADLINE {
            // SAFETY: kill has no memory-safety preconditions; the group is ours.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = start.elapsed();
    let killed = stop_group(pgid);
    let output = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_file(&log_path);
    let what = match status {
        Some(st) if st.success() => {
            eprintln!(
                "{}:{}: ran in {:.1} s{}",
                block.file,
                block.line,
                took.as_secs_f64(),
                if killed {
                    " (a background job needed SIGKILL)"
                } else {
                    ""
                }
            );
            return Ok(took);
        }
        Some(st) => format!("exited with {st}"),
        None => format!("did not finish within {} s", DEADLINE.as_secs()),
    };
    Err(format!(
        "{}:{}: the block {what} after {:.1} s:\n{}--- its output:\n{}",
        block.file,
        block.line,
        took.as_secs_f64(),
        block.text,
        tail(&output, 16 << 10)
    ))
}

/// The last `max` bytes of `s` (at a character boundary).
fn tail(s: &str, max: usize) -> &str {
    let mut from = s.len().saturating_sub(max);
    while !s.is_char_boundary(from) {
        from += 1;
    }
    &s[from..]
}

/// Holds an exclusive lock on a file in /tmp while it lives, for the
/// default socket directory (/tmp/zmem-UID) the blocks share with any other
/// run of this test.
struct MachineLock {
    _file: File,
}

impl MachineLock {
    fn take() -> MachineLock {
        // SAFETY: getuid has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        let file = File::create(format!("/tmp/zmem-{uid}.doc-test.lock")).expect("lock file");
        // SAFETY: flock on an open descriptor we own.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(r, 0, "flock: {}", std::io::Error::last_os_error());
        MachineLock { _file: file }
    }
}

#[test]
fn the_blocks_marked_runs_run_as_written() {
    let (blocks, _) = all_blocks();
    let runs: Vec<&Block> = blocks.iter().filter(|b| b.marker == Marker::Runs).collect();
    assert!(!runs.is_empty(), "no block is marked runs");
    // Orphaned background jobs come to this process, which reaps them.
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer argument.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(r, 0, "PR_SET_CHILD_SUBREAPER");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_zmem"))
        .parent()
        .expect("the binary's directory");
    fixtures();
    let _lock = MachineLock::take();
    let failures: Vec<String> = runs
        .iter()
        .filter_map(|b| run_block(b, bin_dir).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} blocks failed:\n\n{}",
        failures.len(),
        runs.len(),
        failures.join("\n\n")
    );
}
