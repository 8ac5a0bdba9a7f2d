//! Test support for `zmem serve`: the real binary on sockets in a temporary
//! directory, the Debian NBD clients with a timeout, and real data.

#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// How long any client command may run.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

pub const MIB: usize = 1 << 20;

/// A `zmem serve` process. Killed (SIGKILL) if still running when dropped.
pub struct Zmem {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub sock: PathBuf,
    pub ctl: PathBuf,
    pub pid_file: PathBuf,
    pub log: PathBuf,
}

impl Zmem {
    /// Starts `zmem serve ARGS` on `DIR/nbd.sock` with a PID file and debug
    /// logs, and waits until it is ready.
    pub fn start(args: &[&str]) -> Zmem {
        Zmem::try_start(args).unwrap_or_else(|e| panic!("zmem serve {args:?}: {e}"))
    }

    /// As `start`, but returns the log if the server exits instead.
    pub fn try_start(args: &[&str]) -> Result<Zmem, String> {
        let dir = tempfile::tempdir().expect("temp dir");
        let sock = dir.path().join("nbd.sock");
        let pid_file = dir.path().join("zmem.pid");
        let log = dir.path().join("zmem.log");
        let mut full: Vec<String> = vec!["serve".into()];
        let own_socket = !args.iter().any(|a| *a == "--tcp" || *a == "--socket");
        if own_socket {
            full.push("--socket".into());
            full.push(sock.to_string_lossy().into_owned());
        }
        full.extend(
            [
                "--pid-file",
                &pid_file.to_string_lossy(),
                "--log-level",
                "debug",
            ]
            .map(String::from),
        );
        full.extend(args.iter().map(|s| s.to_string()));
        let child = Command::new(env!("CARGO_BIN_EXE_zmem"))
            .args(&full)
            .env("XDG_RUNTIME_DIR", dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start zmem serve");
        let ctl = if own_socket {
            dir.path().join("nbd.sock.ctl")
        } else {
            PathBuf::new()
        };
        let mut z = Zmem {
            child: Some(child),
            dir,
            sock,
            ctl,
            pid_file,
            log,
        };
        let start = Instant::now();
        while !z.pid_file.exists() {
            if let Some(st) = z.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                z.child = None;
                return Err(format!("exited with {st}: {}", z.log()));
            }
            if start.elapsed() > Duration::from_secs(30) {
                return Err(format!("not ready after 30 s: {}", z.log()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(z)
    }

    /// The NBD URI of `export` on the Unix socket.
    pub fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.sock.display())
    }

    /// A file path in the temporary directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// `zmem ctl --socket CTL ARGS`.
    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_zmem"))
            .arg("ctl")
            .arg("--socket")
            .arg(&self.ctl)
            .args(args)
            .output()
            .expect("run zmem ctl")
    }

    /// `zmem ctl` that must succeed; its stdout.
    pub fn ctl_ok(&self, args: &[&str]) -> String {
        let o = self.ctl(args);
        assert!(
            o.status.success(),
            "zmem ctl {args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).expect("utf-8")
    }

    /// mm_stat of `export` as numbers.
    pub fn mm_stat(&self, export: &str) -> Vec<u64> {
        self.ctl_ok(&["--export", export, "mm_stat"])
            .split_whitespace()
            .map(|v| v.parse().expect("a number"))
            .collect()
    }

    /// io_stat of `export` as numbers.
    pub fn io_stat(&self, export: &str) -> Vec<u64> {
        self.ctl_ok(&["--export", export, "io_stat"])
            .split_whitespace()
            .map(|v| v.parse().expect("a number"))
            .collect()
    }

    /// Sends `sig` to the server.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill has no memory-safety preconditions; the PID is our
        // own unreaped child.
        unsafe { libc::kill(self.pid() as libc::pid_t, sig) };
    }

    /// Waits for the server to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let start = Instant::now();
        let child = self.child.as_mut().expect("running");
        loop {
            if let Some(st) = child.try_wait().expect("wait") {
                self.child = None;
                return st;
            }
            assert!(
                start.elapsed() < timeout,
                "zmem did not exit: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => c.try_wait().expect("wait").is_none(),
            None => false,
        }
    }
}

impl Drop for Zmem {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The path of a program, if installed. `NBD_TEST_NO_CLIENTS=1` pretends
/// none is (to check that the tests skip cleanly).
pub fn tool(name: &str) -> Option<PathBuf> {
    if std::env::var_os("NBD_TEST_NO_CLIENTS").is_some() {
        return None;
    }
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Skips the test (it passes) when a program is missing.
#[macro_export]
macro_rules! require_tools {
    ($($t:expr),+) => {
        for t in [$($t),+] {
            if serve_common::tool(t).is_none() {
                eprintln!("SKIP: {t} is not installed (scripts/install-deps installs it)");
                return;
            }
        }
    };
}

/// Runs a program with a timeout; returns its output whatever the status.
pub fn run_tool(prog: &str, args: &[&str]) -> Output {
    let path = tool(prog).unwrap_or_else(|| PathBuf::from(prog));
    let mut child = Command::new(&path)
        .args(args)
        // nbdsh needs Debian's python3 first on PATH.
        .env(
            "PATH",
            format!(
                "/usr/bin:/bin:/usr/sbin:/sbin:{}",
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {prog}: {e}"));
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if start.elapsed() > TOOL_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{prog} {args:?} timed out");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output {
        status,
        stdout: t_out.join().expect("stdout reader"),
        stderr: t_err.join().expect("stderr reader"),
    }
}

/// Runs a program that must succeed; returns its stdout.
pub fn run_ok(prog: &str, args: &[&str]) -> String {
    let o = run_tool(prog, args);
    assert!(
        o.status.success(),
        "{prog} {args:?} failed ({}):\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `len` bytes of real data: system libraries and programs in a fixed
/// order (padded with a pattern on a very small system).
pub fn real_data(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    for dir in ["/usr/lib/x86_64-linux-gnu", "/usr/lib", "/usr/bin"] {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in files {
            if out.len() >= len {
                break;
            }
            if !f.is_file() {
                continue;
            }
            if let Ok(file) = std::fs::File::open(&f) {
                let want = (len - out.len()).min(2 << 20) as u64;
                let _ = file.take(want).read_to_end(&mut out);
            }
        }
    }
    let mut x = 0x9e37_79b9u32;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        out.push(x as u8);
    }
    out.truncate(len);
    out
}

/// Reads an export whole through `nbdcopy URI FILE`.
pub fn read_export(z: &Zmem, uri: &str) -> Vec<u8> {
    let out = z.file("readback.raw");
    let _ = std::fs::remove_file(&out);
    run_ok("nbdcopy", &[uri, &out.to_string_lossy()]);
    let v = std::fs::read(&out).expect("read back");
    let _ = std::fs::remove_file(&out);
    v
}

/// qemu-io with `-f raw`, each command as `-c`; fails the test on a
/// verification failure or error.
pub fn qemu_io(uri: &str, cmds: &[&str]) -> String {
    let mut args: Vec<&str> = vec!["-f", "raw"];
    for c in cmds {
        args.push("-c");
        args.push(c);
    }
    args.push(uri);
    let out = run_ok("qemu-io", &args);
    assert!(
        !out.contains("verification failed") && !out.contains("error") && !out.contains("failed"),
        "qemu-io reported a problem:\n{out}"
    );
    out
}
