//! The Debian NBD clients (qemu-utils, libnbd-bin) and other system
//! programs, run with a timeout; and the qemu-io scenario at odd offsets
//! that the nbd crate's server and `zmem serve` are both put through; and a
//! minimal raw client that only negotiates an export ([`raw_go`]), for tests
//! that need a client connected to one export.
//!
//! A test whose program is missing skips (prints SKIP and passes) through
//! [`require_tools!`](crate::require_tools).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long any client command may run.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

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
            if $crate::clients::tool(t).is_none() {
                eprintln!("SKIP: {t} is not installed (scripts/install-deps installs it)");
                return;
            }
        }
    };
}

/// Runs a program with a timeout; returns its output (whatever the exit
/// status).
pub fn run_tool(prog: &str, args: &[&str]) -> Output {
    let path = tool(prog).unwrap_or_else(|| PathBuf::from(prog));
    let mut child = Command::new(&path)
        .args(args)
        // nbdsh needs Debian's python3, which must come first on PATH.
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

/// Runs a program and asserts it succeeded; returns its stdout.
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

/// qemu-io with `-f raw`, each command as `-c`, then the URI; fails the
/// test on a verification failure or error. Returns qemu-io's stdout.
pub fn qemu_io<S: AsRef<str>>(uri: &str, cmds: &[S]) -> String {
    let mut args: Vec<&str> = vec!["-f", "raw"];
    for c in cmds {
        args.push("-c");
        args.push(c.as_ref());
    }
    args.push(uri);
    let out = run_ok("qemu-io", &args);
    assert!(
        !out.contains("verification failed") && !out.contains("error") && !out.contains("failed"),
        "qemu-io reported a problem:\n{out}"
    );
    out
}

/// The names of the exports `nbdinfo --list` finds at `uri`, in the order
/// the server lists them.
pub fn nbdinfo_export_names(uri: &str) -> Vec<String> {
    let out = run_ok("nbdinfo", &["--list", "--json", uri]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["exports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["export-name"].as_str().unwrap().to_string())
        .collect()
}

/// The size of the export [`ODD_OFFSETS`] is written for.
pub const ODD_OFFSETS_SIZE: usize = 4 << 20;

/// qemu-io commands that write, and read back with a check, ranges at odd
/// offsets and of odd lengths: inside a 4 KiB block, across block and
/// 64 KiB boundaries, and the last byte of an export of
/// [`ODD_OFFSETS_SIZE`] bytes. Give them to [`qemu_io`] (with `flush` or
/// more commands after them); [`odd_offsets_model`] is what the export then
/// holds.
pub const ODD_OFFSETS: [&str; 13] = [
    "write -P 0x5a 1000 3333",
    "read -P 0x5a 1000 3333",
    "write -P 0xa5 4095 2",
    "read -P 0x5a 1000 3095",
    "read -P 0xa5 4095 2",
    "read -P 0x5a 4097 236",
    "read -P 0 0 1000",
    "read -P 0 4333 10000",
    "write -P 0x33 65535 131073",
    "read -P 0x33 65535 131073",
    "read -P 0 196608 1",
    "write -P 0x77 4194303 1",
    "read -P 0x77 4194303 1",
];

/// The contents of a zeroed export of [`ODD_OFFSETS_SIZE`] bytes after
/// [`ODD_OFFSETS`].
pub fn odd_offsets_model() -> Vec<u8> {
    let mut model = vec![0u8; ODD_OFFSETS_SIZE];
    model[1000..4333].fill(0x5a);
    model[4095..4097].fill(0xa5);
    model[65535..65535 + 131073].fill(0x33);
    model[ODD_OFFSETS_SIZE - 1] = 0x77;
    model
}

/// Asserts that a qemu-io write running past the end of an export of
/// [`ODD_OFFSETS_SIZE`] bytes is refused, by the client or the server.
/// (That nothing changed is for the caller to check.)
pub fn assert_write_past_end_refused(uri: &str) {
    let o = run_tool(
        "qemu-io",
        &["-f", "raw", "-c", "write -P 1 4194000 1000", uri],
    );
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() || text.contains("error") || text.contains("out of"),
        "{text}"
    );
}

/// Connects to the NBD server on the Unix socket `sock` and negotiates the
/// export `name` with `NBD_OPT_GO` (fixed newstyle, no structured replies):
/// the stream in the transmission phase, or the server's error reply as
/// `"0x<code>: <message>"`. Dropping the stream disconnects.
pub fn raw_go(sock: &Path, name: &str) -> Result<std::os::unix::net::UnixStream, String> {
    use std::io::Write;
    const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
    const OPT_GO: u32 = 7;
    const REP_ACK: u32 = 1;
    let mut s = std::os::unix::net::UnixStream::connect(sock).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(TOOL_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let io = |e: std::io::Error| e.to_string();
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).map_err(io)?;
    assert_eq!(&greeting[..8], b"NBDMAGIC", "not an NBD server");
    // Client flags: fixed newstyle, no zeroes.
    s.write_all(&3u32.to_be_bytes()).map_err(io)?;
    let mut data = (name.len() as u32).to_be_bytes().to_vec();
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(&0u16.to_be_bytes());
    let mut option = IHAVEOPT.to_be_bytes().to_vec();
    option.extend_from_slice(&OPT_GO.to_be_bytes());
    option.extend_from_slice(&(data.len() as u32).to_be_bytes());
    option.extend_from_slice(&data);
    s.write_all(&option).map_err(io)?;
    loop {
        let mut head = [0u8; 20];
        s.read_exact(&mut head).map_err(io)?;
        let reply = u32::from_be_bytes(head[12..16].try_into().expect("4 bytes"));
        let len = u32::from_be_bytes(head[16..20].try_into().expect("4 bytes"));
        let mut body = vec![0u8; len as usize];
        s.read_exact(&mut body).map_err(io)?;
        if reply == REP_ACK {
            return Ok(s);
        }
        if reply & (1 << 31) != 0 {
            return Err(format!("{reply:#x}: {}", String::from_utf8_lossy(&body)));
        }
    }
}
