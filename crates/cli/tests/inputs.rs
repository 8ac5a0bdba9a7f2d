//! `zmem replay` of every kind of input: pipes, FIFOs, standard input,
//! empty inputs, loop devices, ELF core files (built here, and from `gcore`
//! when gdb is installed) and live processes (`--pid`).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::zmem;
use tune::corpus::Corpus;

fn zmem_cmd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zmem"))
}

fn tmp(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("zmem-inputs-{tag}-"))
        .tempdir()
        .unwrap()
}

/// Real-looking data of `len` bytes.
fn data(len: usize) -> Vec<u8> {
    testkit::real_data(len)
}

/// The first line of a successful run's report after the kernel line (the test fails with its
/// stderr otherwise), and the whole stdout.
fn first_line(out: &std::process::Output) -> (String, String) {
    assert!(
        out.status.success(),
        "zmem failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // The line that says which kernel kernel-compat stands for comes
    // before what was read.
    let mut lines = text.lines();
    let mut first = lines.next().unwrap_or("");
    if first.starts_with("kernel-compat: ") {
        first = lines.next().unwrap_or("");
    }
    let first = first.to_string();
    assert!(
        text.contains("verify: every page of every store read back identical"),
        "{text}"
    );
    (first, text)
}

/// The `mm_stat` line of a run's table output.
fn mm_stat(text: &str) -> String {
    text.lines()
        .find(|l| l.starts_with("mm_stat "))
        .unwrap_or_else(|| panic!("no mm_stat line: {text}"))
        .to_string()
}

/// Runs `zmem replay ARGS` with `input` written to its standard input
/// through a pipe.
fn replay_piped(args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = zmem_cmd()
        .arg("replay")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

#[test]
fn stdin_and_pipes_are_read_to_their_end() {
    let bytes = data(1_000_000);
    let pages = bytes.len().div_ceil(4096);
    let (first, _) = first_line(&replay_piped(&["-"], &bytes));
    assert_eq!(
        first,
        format!("read {pages} pages of 4 KiB: {pages} from - (standard input)")
    );
    // /dev/stdin is a link to the pipe, as `<(cmd)` gives /dev/fd/63.
    let (first, piped) = first_line(&replay_piped(&["/dev/stdin"], &bytes));
    assert_eq!(
        first,
        format!("read {pages} pages of 4 KiB: {pages} from /dev/stdin (pipe)")
    );
    // The same bytes from a file give the same figures.
    let dir = tmp("pipe");
    let file = dir.path().join("data");
    std::fs::write(&file, &bytes).unwrap();
    let (_, from_file) = first_line(&zmem(&["replay", file.to_str().unwrap()]));
    assert_eq!(mm_stat(&piped), mm_stat(&from_file));
}

#[test]
fn a_fifo_without_a_writer_says_it_waits_then_reads() {
    let dir = tmp("fifo");
    let fifo = dir.path().join("fifo");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let mut child = zmem_cmd()
        .args(["replay", fifo.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The message comes while nothing has opened the FIFO for writing.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(
        line.contains("waiting for a writer on the FIFO"),
        "stderr: {line}"
    );
    let bytes = data(300_000);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .unwrap()
        .write_all(&bytes)
        .unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    let (first, _) = first_line(&out);
    let pages = bytes.len().div_ceil(4096);
    assert_eq!(
        first,
        format!(
            "read {pages} pages of 4 KiB: {pages} from {} (FIFO)",
            fifo.display()
        )
    );
    assert!(rest.is_empty(), "more on stderr: {rest}");
}

/// Asserts a run failed with exit status 1 and one line on stderr
/// containing `what`.
fn fails_with(out: &std::process::Output, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "stderr: {err}");
    assert!(err.contains(what), "stderr: {err}");
    assert!(!err.contains("panicked"), "stderr: {err}");
}

#[test]
fn inputs_without_pages_are_errors() {
    let dir = tmp("empty");
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    std::fs::write(tree.join("sub").join("nothing"), b"").unwrap();
    fails_with(
        &zmem(&["replay", empty.to_str().unwrap()]),
        "yields no pages",
    );
    fails_with(
        &zmem(&["replay", tree.to_str().unwrap()]),
        "yields no pages",
    );
    fails_with(&replay_piped(&["-"], b""), "yields no pages");
    fails_with(&zmem(&["replay", "/dev/null"]), "a character device");
}

#[test]
fn elf_core_files_give_their_segments_and_truncation_is_an_error() {
    let dir = tmp("core");
    let a = data(40_960);
    let b = data(12_288);
    let core = dir.path().join("core.1234");
    let bytes = testkit::elf_core(&[(0x10000, &a), (0x7f00_0000_0000, &b)]);
    std::fs::write(&core, &bytes).unwrap();
    let (first, with_core) = first_line(&zmem(&["replay", core.to_str().unwrap()]));
    assert_eq!(
        first,
        format!(
            "read 13 pages of 4 KiB: 13 from {} (ELF core, 2 segments)",
            core.display()
        )
    );
    // The segments are stored as the same bytes in files would be.
    let segs = dir.path().join("segs");
    std::fs::create_dir(&segs).unwrap();
    std::fs::write(segs.join("1"), &a).unwrap();
    std::fs::write(segs.join("2"), &b).unwrap();
    let (_, from_files) = first_line(&zmem(&["replay", segs.to_str().unwrap()]));
    assert_eq!(mm_stat(&with_core), mm_stat(&from_files));
    // A core cut short is refused with one line that names --raw.
    std::fs::write(&core, &bytes[..bytes.len() - 100]).unwrap();
    fails_with(&zmem(&["replay", core.to_str().unwrap()]), "truncated");
    let raw = zmem(&["replay", "--raw", core.to_str().unwrap()]);
    assert!(raw.status.success(), "--raw takes the bytes as they are");
}

/// A loop device over a file, detached when dropped (also when the test
/// fails).
struct Loop(String);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

#[test]
fn a_loop_device_replays_as_its_file() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !Path::new("/dev/loop-control").exists() {
        eprintln!("skipped: loop devices need root and /dev/loop-control");
        return;
    }
    let dir = tmp("loop");
    let file = dir.path().join("disk.img");
    let bytes = data(2 << 20);
    std::fs::write(&file, &bytes).unwrap();
    let out = Command::new("losetup")
        .args(["--find", "--show"])
        .arg(&file)
        .output();
    let dev = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        other => {
            eprintln!("skipped: losetup could not attach a loop device: {other:?}");
            return;
        }
    };
    let guard = Loop(dev);
    let (first, from_dev) = first_line(&zmem(&["replay", &guard.0]));
    assert_eq!(
        first,
        format!(
            "read 512 pages of 4 KiB: 512 from {} (block device)",
            guard.0
        )
    );
    let (_, from_file) = first_line(&zmem(&["replay", file.to_str().unwrap()]));
    assert_eq!(mm_stat(&from_dev), mm_stat(&from_file));
}

/// A python3 process holding a private anonymous mapping of `PAGES` pages
/// of which every other one is written with a known pattern; it allows any
/// process to ptrace it (for kernel.yama.ptrace_scope 1) and waits for its
/// stdin to close.
struct Holder {
    child: Child,
    /// The mapping's address.
    addr: u64,
}

const PAGES: u64 = 64;

/// The pattern of touched page `i` of the holder's mapping.
fn pattern(i: u64) -> Vec<u8> {
    (0..4096u64)
        .map(|k| (k.wrapping_mul(31) ^ i.wrapping_mul(131) ^ (k >> 5)) as u8)
        .collect()
}

const HOLDER: &str = r#"
import ctypes, mmap, sys
try:
    ctypes.CDLL(None).prctl(0x59616d61, ctypes.c_ulong(-1), 0, 0, 0)
except Exception:
    pass
pages = int(sys.argv[1])
m = mmap.mmap(-1, pages * 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for i in range(0, pages, 2):
    m[i * 4096:(i + 1) * 4096] = bytes(((k * 31) ^ (i * 131) ^ (k >> 5)) & 0xff for k in range(4096))
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
print(hex(addr), flush=True)
sys.stdin.read()
"#;

impl Holder {
    fn start() -> Option<Holder> {
        let mut child = Command::new("python3")
            .args(["-c", HOLDER, &PAGES.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .ok()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = u64::from_str_radix(line.trim().trim_start_matches("0x"), 16)
            .unwrap_or_else(|_| panic!("holder said {line:?}"));
        Some(Holder { child, addr })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pages of `corpus`'s item whose name contains `name`, in order.
fn item_pages(corpus: &Corpus, name: &str) -> Vec<Vec<u8>> {
    let k = corpus
        .items
        .iter()
        .position(|i| i.name.contains(name))
        .unwrap_or_else(|| {
            let names: Vec<_> = corpus.items.iter().map(|i| &i.name).collect();
            panic!("no item {name}: {names:?}")
        });
    let (first, n) = corpus.extents(4096)[k];
    let mut pages = Vec::new();
    corpus
        .for_each_page(4096, |i, page| {
            if (first..first + n).contains(&i) {
                pages.push(page.to_vec());
            }
            Ok(())
        })
        .unwrap();
    pages
}

#[test]
fn a_live_process_gives_exactly_its_touched_anonymous_pages() {
    let Some(holder) = Holder::start() else {
        eprintln!("skipped: no python3");
        return;
    };
    let corpus = Corpus::from_inputs(&[], &[holder.pid()], false).unwrap();
    let name = format!("anon {:#x}-{:#x}", holder.addr, holder.addr + PAGES * 4096);
    let pages = item_pages(&corpus, &name);
    // Exactly the touched half, each identical; the untouched are skipped.
    assert_eq!(pages.len() as u64, PAGES / 2);
    for (k, page) in pages.iter().enumerate() {
        assert!(*page == pattern(2 * k as u64), "page {} differs", 2 * k);
    }
    let first = corpus.read_line(4096);
    assert!(
        first.starts_with(&format!(
            "read {} pages of 4 KiB: {} from pid {} (process memory: ",
            corpus.pages(4096),
            corpus.pages(4096),
            holder.pid()
        )),
        "{first}"
    );
    // Through the command: the first line counts present, untouched and
    // swapped-out pages, and every page reads back.
    let pid = holder.pid().to_string();
    let (first, _) = first_line(&zmem(&["replay", "--pid", &pid]));
    let counts = first
        .split_once("(process memory: ")
        .unwrap_or_else(|| panic!("{first}"))
        .1;
    let number = |what: &str| -> u64 {
        let at = counts
            .find(what)
            .unwrap_or_else(|| panic!("{what}: {first}"));
        counts[..at]
            .trim_end()
            .rsplit([' ', ','])
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(number(" present") >= PAGES / 2, "{first}");
    assert!(number(" untouched skipped") >= PAGES / 2, "{first}");
    let _ = number(" swapped out");
}

#[test]
fn a_gcore_file_holds_the_same_pages_as_the_live_process() {
    let gcore_ok = Command::new("gcore")
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !gcore_ok {
        eprintln!("skipped: no gcore (gdb)");
        return;
    }
    let Some(holder) = Holder::start() else {
        eprintln!("skipped: no python3");
        return;
    };
    let dir = tmp("gcore");
    let prefix = dir.path().join("core");
    let started = Instant::now();
    let Some(core) = common::corpora::gcore(&prefix, holder.pid()) else {
        eprintln!("skipped: gcore could not dump the process");
        return;
    };
    assert!(started.elapsed() < Duration::from_secs(120));
    let corpus = Corpus::from_paths(std::slice::from_ref(&core), false).unwrap();
    // gcore dumps the whole mapping: untouched pages read as zeros.
    let pages = item_pages(&corpus, &format!("@{:#x}", holder.addr));
    assert_eq!(pages.len() as u64, PAGES);
    for (i, page) in pages.iter().enumerate() {
        if i % 2 == 0 {
            assert!(*page == pattern(i as u64), "page {i} differs");
        } else {
            assert!(page.iter().all(|&b| b == 0), "page {i} is not zero");
        }
    }
    let (first, _) = first_line(&zmem(&["replay", core.to_str().unwrap()]));
    assert!(first.contains("(ELF core, "), "{first}");
}

#[test]
fn a_process_it_may_not_read_is_a_one_line_error() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        eprintln!("skipped: root may read any process");
        return;
    }
    let out = zmem(&["replay", "--pid", "1"]);
    fails_with(&out, "CAP_SYS_PTRACE");
}

#[test]
fn a_process_that_does_not_exist_is_a_one_line_error() {
    // Linux never gives out its PID_MAX_LIMIT itself.
    fails_with(
        &zmem(&["replay", "--pid", "4194304"]),
        "--pid 4194304: no such process",
    );
}
