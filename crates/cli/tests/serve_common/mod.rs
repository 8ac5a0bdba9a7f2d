//! Test support for `zmem serve`: the real binary on sockets in a temporary
//! directory, its usage errors, and reading an export back. The Debian NBD clients (run with a
//! timeout) and real data come from `testkit`, which the nbd crate's tests
//! share.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use testkit::clients::run_ok;

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
            if start.elapsed() > Duration::from_secs(60) {
                return Err(format!("not ready after 60 s: {}", z.log()));
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

/// The one line of stderr with which `zmem serve ARGS` refuses its settings
/// as a usage error (exit code 2).
pub fn serve_usage_error(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_zmem"))
        .arg("serve")
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "zmem serve {args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "zmem serve {args:?}: {err}");
    err
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
