//! `zmem serve` as a service: the systemd units in contrib/systemd pass
//! `systemd-analyze verify` with no warning, and a socket-activated server
//! (systemd-socket-activate hands it the listening socket, as systemd does)
//! serves a real client and leaves the socket file, which is systemd's, in
//! place.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use testkit::clients::{run_ok, run_tool};
use testkit::require_tools;

const UNITS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../contrib/systemd");

#[test]
fn the_units_verify_without_a_warning() {
    require_tools!("systemd-analyze");
    let dir = tempfile::tempdir().unwrap();
    for unit in ["zmem.socket", "zmem.service"] {
        let text = std::fs::read_to_string(Path::new(UNITS).join(unit)).unwrap();
        // The unit names the installed binary; verify against this build's.
        let text = text.replace("/usr/local/bin/zmem", env!("CARGO_BIN_EXE_zmem"));
        std::fs::write(dir.path().join(unit), text).unwrap();
    }
    let o = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(dir.path().join("zmem.socket"))
        .arg(dir.path().join("zmem.service"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.trim().is_empty(), "warnings: {err}");
}

/// Kills the activator (and the server it became) when dropped.
struct Activated(Child);

impl Activated {
    /// systemd-socket-activate listening on `sockets` for `zmem serve ARGS`
    /// (its stderr to `log`), once the first socket exists: the activator
    /// binds at once; the server starts on the first client.
    fn start(sockets: &[&Path], args: &[&str], log: std::fs::File) -> Activated {
        let mut activate = Command::new("systemd-socket-activate");
        for s in sockets {
            activate.arg("-l").arg(s);
        }
        let child = activate
            .arg(env!("CARGO_BIN_EXE_zmem"))
            .arg("serve")
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let activated = Activated(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !sockets[0].exists() {
            assert!(Instant::now() < deadline, "the activator never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        activated
    }
}

impl Drop for Activated {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_socket_activated_server_serves_the_socket_it_was_given() {
    require_tools!("systemd-socket-activate", "nbdinfo", "nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("nbd.sock");
    let ctl = dir.path().join("ctl.sock");
    let log = std::fs::File::create(dir.path().join("log")).unwrap();
    let server = Activated::start(
        &[&sock],
        &["--size", "8M", "--ctl-socket", ctl.to_str().unwrap()],
        log,
    );
    let uri = format!("nbd+unix:///zram0?socket={}", sock.display());
    let list = run_ok("nbdinfo", &["--list", &uri]);
    assert!(list.contains("export=\"zram0\""), "{list}");
    let data: Vec<u8> = (0..4u32 << 20)
        .map(|i| (i / 4096 % 251) as u8 ^ (i as u8))
        .collect();
    let src = dir.path().join("src");
    let back = dir.path().join("back");
    std::fs::write(&src, &data).unwrap();
    run_ok("nbdcopy", &[src.to_str().unwrap(), &uri]);
    std::fs::write(&back, b"").unwrap();
    let o = run_tool("nbdcopy", &[&uri, back.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = std::fs::read(&back).unwrap();
    assert_eq!(&got[..data.len()], &data[..], "read back differs");
    // The control socket came up beside it.
    let status = Command::new(env!("CARGO_BIN_EXE_zmem"))
        .args(["ctl", "--socket", ctl.to_str().unwrap(), "mm_stat"])
        .output()
        .unwrap();
    assert!(status.status.success());
    let orig: u64 = String::from_utf8_lossy(&status.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(orig > 0);
    drop(server);
    assert!(sock.exists(), "the socket file is systemd's: left in place");
}

#[test]
fn two_sockets_from_systemd_are_refused_with_one_line() {
    require_tools!("systemd-socket-activate", "nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let log_path = dir.path().join("log");
    let log = std::fs::File::create(&log_path).unwrap();
    let _server = Activated::start(&[&a, &b], &["--size", "8M"], log);
    // The first client makes the activator start zmem, which refuses.
    let _ = run_tool(
        "nbdinfo",
        &[&format!("nbd+unix:///?socket={}", a.display())],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = std::fs::read_to_string(&log_path).unwrap();
        if log.contains("passed 2 sockets") {
            break;
        }
        assert!(Instant::now() < deadline, "no refusal in the log: {log}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_install_script_puts_everything_in_place_and_the_example_config_starts_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("stage");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/install");
    let o = Command::new("bash")
        .arg(script)
        .arg("/opt/zmem")
        .env("ZMEM_BIN", env!("CARGO_BIN_EXE_zmem"))
        .env("DESTDIR", &root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p = root.join("opt/zmem");
    for f in [
        "bin/zmem",
        "share/man/man1/zmem.1",
        "share/man/man1/zmem-serve.1",
        "share/bash-completion/completions/zmem",
        "share/zsh/site-functions/_zmem",
        "share/fish/vendor_completions.d/zmem.fish",
        "lib/systemd/system/zmem.service",
        "lib/systemd/system/zmem.socket",
        "share/doc/zmem/zmem.toml",
    ] {
        assert!(std::fs::metadata(p.join(f)).unwrap().len() > 0, "{f}");
    }
    let unit = std::fs::read_to_string(p.join("lib/systemd/system/zmem.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/opt/zmem/bin/zmem serve"),
        "{unit}"
    );
    // The example configuration is valid: a server starts from it (on a
    // socket of the test's) and serves both its exports.
    let z_dir = tempfile::tempdir().unwrap();
    let sock = z_dir.path().join("nbd.sock");
    let ctl = z_dir.path().join("ctl.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_zmem"))
        .args(["serve", "--config"])
        .arg(p.join("share/doc/zmem/zmem.toml"))
        .arg("--socket")
        .arg(&sock)
        .arg("--ctl-socket")
        .arg(&ctl)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        let o = Command::new(env!("CARGO_BIN_EXE_zmem"))
            .args([
                "ctl",
                "--socket",
                ctl.to_str().unwrap(),
                "status",
                "--raw",
                "-n",
            ])
            .output()
            .unwrap();
        if o.status.success() {
            break String::from_utf8_lossy(&o.stdout).into_owned();
        }
        if let Some(exit) = child.try_wait().unwrap() {
            panic!("zmem serve --config exited: {exit}");
        }
        assert!(
            Instant::now() < deadline,
            "no server from the example config"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let _ = child.wait();
    let names: Vec<&str> = status
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(names, ["zram0", "zram1"], "{status}");
    assert!(status.contains("zram0 zstd 4G"), "{status}");
}
