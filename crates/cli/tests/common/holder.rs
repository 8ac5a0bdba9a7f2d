//! Processes that hold real data in memory for `zmem advise --system`'s
//! tests (crates/cli/tests/workloads/hold_memory.py): started, waited for
//! until they hold it, and killed when the value drops, also when the test
//! fails.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// A running holder; killed on drop.
pub struct Holder {
    child: Child,
    /// Kept open: the holder exits when it closes.
    _stdin: ChildStdin,
    /// The pages it reported holding.
    pub pages: u64,
}

impl Holder {
    /// Starts `hold_memory.py KIND MIB` and waits (up to `deadline`) until
    /// it says it holds its data.
    pub fn start(kind: &str, mib: u64, deadline: Duration) -> Holder {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/workloads/hold_memory.py"
        );
        let mut child = Command::new("python3")
            .args([script, kind, &mib.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let start = Instant::now();
        let line = rx
            .recv_timeout(deadline)
            .unwrap_or_else(|_| panic!("{kind} holder not ready after {:?}", start.elapsed()));
        let pages = line
            .strip_prefix("ready ")
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("{kind} holder said {line:?}"));
        Holder {
            child,
            _stdin: stdin,
            pages,
        }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it now and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether this process is root and the kernel's zram can be hot-added.
pub fn kernel_zram_here() -> bool {
    // SAFETY: geteuid has no preconditions and only reads process state.
    let root = unsafe { libc::geteuid() } == 0;
    root && std::path::Path::new("/sys/class/zram-control/hot_add").exists()
}

/// `MemAvailable`, bytes.
pub fn mem_available() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap()
        * 1024
}

/// The zram devices that exist, by name.
pub fn zram_devices() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/sys/block")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("zram"))
        .collect();
    v.sort();
    v
}
