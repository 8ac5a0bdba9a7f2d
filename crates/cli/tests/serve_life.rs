//! Exports that come and go, and their life as zram disks, end to end: the
//! real `zmem serve` and `zmem ctl`, with nbdcopy and nbdinfo as clients.
//! A test whose client is missing prints SKIP and passes.

mod serve_common;

use std::time::{Duration, Instant};

use serve_common::{read_export, serve_usage_error, Zmem, MIB};
use testkit::clients::{nbdinfo_export_names, raw_go, run_ok, run_tool};
use testkit::rss::rss_kib_of;
use testkit::{real_data, require_tools};

/// The errno name a refused `zmem ctl` printed (its exit status is 1).
fn refused(z: &Zmem, args: &[&str]) -> String {
    let o = z.ctl(args);
    assert_eq!(o.status.code(), Some(1), "zmem ctl {args:?} succeeded");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    ["EBUSY", "EEXIST", "EINVAL", "ENOENT", "E2BIG"]
        .into_iter()
        .find(|e| err.contains(e))
        .unwrap_or_else(|| panic!("zmem ctl {args:?}: no errno in {err:?}"))
        .to_string()
}

/// Retries `ctl` while it is refused with EBUSY (the server notices a
/// client that left in its own time), with a deadline no loaded machine
/// comes near.
fn until_not_busy(z: &Zmem, args: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = z.ctl(args);
        if o.status.success() {
            return;
        }
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("EBUSY"), "{args:?} failed otherwise: {err}");
        assert!(Instant::now() < deadline, "{args:?} still EBUSY after 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn hot_add_configure_copy_and_hot_remove() {
    require_tools!("nbdcopy", "nbdinfo");
    let z = Zmem::start(&["--export", "base:4M"]);
    let list = format!("nbd+unix://?socket={}", z.sock.display());
    assert_eq!(nbdinfo_export_names(&list), ["base"]);

    // hot_add without a size: uninitialised, as a hot-added zram disk.
    assert_eq!(z.ctl_ok(&["hot_add", "hot"]), "");
    let hot = ["--export", "hot"];
    assert_eq!(z.ctl_ok(&[&hot[..], &["initstate"]].concat()), "0\n");
    assert_eq!(z.ctl_ok(&[&hot[..], &["disksize"]].concat()), "0\n");
    // Not listed (nbdinfo --list would fail on it), and a client asking for
    // it is refused; the server says why.
    assert_eq!(nbdinfo_export_names(&list), ["base"]);
    let why = raw_go(&z.sock, "hot").unwrap_err();
    assert!(
        why.starts_with("0x80000006: "),
        "NBD_REP_ERR_UNKNOWN: {why}"
    );
    assert!(why.contains("not initialised"), "{why}");
    let o = run_tool("nbdinfo", &[&z.uri("hot")]);
    assert!(
        !o.status.success(),
        "nbdinfo reached an uninitialised export"
    );

    // Settings before disksize, with the kernel's errnos for bad values.
    assert_eq!(
        refused(&z, &[&hot[..], &["comp_algorithm", "lzma"]].concat()),
        "EINVAL"
    );
    let long = "z".repeat(128);
    assert_eq!(
        refused(&z, &[&hot[..], &["comp_algorithm", &long]].concat()),
        "E2BIG"
    );
    assert_eq!(
        refused(&z, &[&hot[..], &["disksize", "0"]].concat()),
        "EINVAL"
    );
    assert_eq!(refused(&z, &[&hot[..], &["compact"]].concat()), "EINVAL");
    z.ctl_ok(&[&hot[..], &["comp_algorithm", "zstd"]].concat());
    z.ctl_ok(&[&hot[..], &["algorithm_params", "level=5"]].concat());
    z.ctl_ok(&[&hot[..], &["mem_limit", "64M"]].concat());
    z.ctl_ok(&[&hot[..], &["disksize", "8M"]].concat());
    assert_eq!(z.ctl_ok(&[&hot[..], &["initstate"]].concat()), "1\n");
    assert_eq!(
        z.ctl_ok(&[&hot[..], &["comp_algorithm"]].concat()),
        "[zstd]\n"
    );
    // After init they are EBUSY, as in the kernel.
    for args in [
        ["disksize", "16M"],
        ["comp_algorithm", "lz4"],
        ["algorithm_params", "level=1"],
    ] {
        assert_eq!(refused(&z, &[&hot[..], &args[..]].concat()), "EBUSY");
    }
    assert_eq!(nbdinfo_export_names(&list), ["base", "hot"]);

    // Data in and out with nbdcopy; status shows it.
    let data = real_data(6 * MIB);
    let src = z.file("src.raw");
    std::fs::write(&src, &data).unwrap();
    run_ok("nbdcopy", &[&src.to_string_lossy(), &z.uri("hot")]);
    let back = read_export(&z, &z.uri("hot"));
    assert!(back[..data.len()] == data[..], "data differs");
    let status = z.ctl_ok(&["status", "--bytes", "--raw", "--noheadings"]);
    let row = status
        .lines()
        .find(|l| l.starts_with("hot "))
        .unwrap_or_else(|| panic!("{status}"));
    let cells: Vec<&str> = row.split(' ').collect();
    assert_eq!(cells[1..3], ["zstd", "8388608"], "{row}");
    assert!(
        cells[3].parse::<u64>().unwrap() >= data.len() as u64 - 4096,
        "{row}"
    );
    let mm = z.mm_stat("hot");
    assert_eq!(mm[3], 64 << 20, "mem_limit from before init: {mm:?}");
    assert!(mm[1] < mm[0], "zstd compresses: {mm:?}");

    // hot_remove: EBUSY while a client is connected to it, ENOENT for an
    // unknown name, EEXIST for a duplicate hot_add, EINVAL for bad names.
    let client = raw_go(&z.sock, "hot").unwrap();
    assert_eq!(refused(&z, &["hot_remove", "hot"]), "EBUSY");
    assert_eq!(refused(&z, &["--export", "hot", "reset"]), "EBUSY");
    assert_eq!(refused(&z, &["hot_remove", "nope"]), "ENOENT");
    assert_eq!(refused(&z, &["hot_add", "hot"]), "EEXIST");
    assert_eq!(refused(&z, &["hot_add", "a:b"]), "EINVAL");
    assert_eq!(refused(&z, &["hot_add", "c", "0"]), "EINVAL");
    // The other export is undisturbed, and exports come and go beside it.
    assert_eq!(z.ctl_ok(&["hot_add", "more", "1M"]), "");
    assert_eq!(nbdinfo_export_names(&list), ["base", "hot", "more"]);
    assert_eq!(z.ctl_ok(&["--export", "base", "reset"]), "");
    assert_eq!(z.ctl_ok(&["hot_remove", "more"]), "");
    drop(client);
    until_not_busy(&z, &["hot_remove", "hot"]);
    // base was reset: uninitialised, so nothing is listed.
    assert!(nbdinfo_export_names(&list).is_empty());
    assert_eq!(refused(&z, &[&hot[..], &["initstate"]].concat()), "ENOENT");
    // disksize brings base back, listed and empty.
    assert_eq!(z.ctl_ok(&["--export", "base", "initstate"]), "0\n");
    z.ctl_ok(&["--export", "base", "disksize", "4M"]);
    assert_eq!(nbdinfo_export_names(&list), ["base"]);
    assert!(read_export(&z, &z.uri("base")).iter().all(|&b| b == 0));
}

#[test]
fn reset_returns_to_uninitialised_and_frees_the_memory() {
    require_tools!("nbdcopy");
    // Incompressible data, so the store holds about as much as it is given.
    let z = Zmem::start(&["--export", "d:64M", "--export", "spare:0"]);
    assert_eq!(z.ctl_ok(&["--export", "spare", "initstate"]), "0\n");
    assert_eq!(z.ctl_ok(&["--export", "d", "initstate"]), "1\n");
    let idle = rss_kib_of(z.pid());
    let data = testkit::noise(48 * MIB, 7);
    let src = z.file("src.raw");
    std::fs::write(&src, &data).unwrap();
    run_ok("nbdcopy", &[&src.to_string_lossy(), &z.uri("d")]);
    let full = rss_kib_of(z.pid());
    assert!(full > idle + 40 * 1024, "RSS {idle} -> {full} KiB");
    // reset: refused while a client is connected to d, then uninitialised
    // and the store's memory back to the OS.
    let client = raw_go(&z.sock, "d").unwrap();
    assert_eq!(refused(&z, &["--export", "d", "reset"]), "EBUSY");
    drop(client);
    until_not_busy(&z, &["--export", "d", "reset"]);
    assert_eq!(z.ctl_ok(&["--export", "d", "initstate"]), "0\n");
    assert_eq!(z.ctl_ok(&["--export", "d", "disksize"]), "0\n");
    assert_eq!(z.mm_stat("d"), vec![0; 9]);
    let why = raw_go(&z.sock, "d").unwrap_err();
    assert!(why.contains("not initialised"), "{why}");
    // The trimmer gives freed heap back after a quiet tick; allow for it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut after = rss_kib_of(z.pid());
    while after > idle + 8 * 1024 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        after = rss_kib_of(z.pid());
    }
    assert!(
        after <= idle + 8 * 1024,
        "RSS after reset: {idle} -> {full} -> {after} KiB"
    );
    // Initialised again, with the server's settings, and empty.
    z.ctl_ok(&["--export", "d", "disksize", "16M"]);
    assert_eq!(z.ctl_ok(&["--export", "d", "disksize"]), "16777216\n");
    assert!(read_export(&z, &z.uri("d")).iter().all(|&b| b == 0));
}

/// The timed policy's runs so far, from `debug_stat`'s policy line (`None`
/// while the store has no policy).
fn policy_ticks(z: &Zmem, export: &str) -> Option<u64> {
    let text = z.ctl_ok(&["--export", export, "debug_stat"]);
    let line = text.lines().find(|l| l.starts_with("policy: ticks "))?;
    line["policy: ticks ".len()..]
        .split(' ')
        .next()?
        .parse()
        .ok()
}

/// Waits (with a deadline no loaded machine comes near) until the export's
/// policy thread has run at least once more than `after` times.
fn wait_for_tick(z: &Zmem, export: &str, after: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(t) = policy_ticks(z, export).filter(|&t| t > after) {
            return t;
        }
        assert!(Instant::now() < deadline, "{export}: no policy run in 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn is_read_only(uri: &str) -> bool {
    let json = run_ok("nbdinfo", &["--json", uri]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("nbdinfo --json");
    v["exports"][0]["is_read_only"]
        .as_bool()
        .unwrap_or_else(|| panic!("no is_read_only in {json}"))
}

#[test]
fn read_only_and_policies_hold_for_every_store_an_export_gets() {
    require_tools!("nbdinfo");
    let z = Zmem::start(&[
        "--export",
        "frozen:1M:ro",
        "--export",
        "open:1M",
        "--idle-after",
        "1",
        "--policy-interval",
        "1",
    ]);
    assert!(is_read_only(&z.uri("frozen")));
    assert!(!is_read_only(&z.uri("open")));
    wait_for_tick(&z, "frozen", 0);

    // A reset and a new disksize: still read-only, and a new policy thread
    // runs on the new store.
    z.ctl_ok(&["--export", "frozen", "reset"]);
    assert_eq!(policy_ticks(&z, "frozen"), None, "an uninitialised export");
    z.ctl_ok(&["--export", "frozen", "disksize", "2M"]);
    assert!(is_read_only(&z.uri("frozen")));
    wait_for_tick(&z, "frozen", 0);

    // Hot-added exports get the server's policy; `ro` makes one read-only
    // for its whole life.
    z.ctl_ok(&["hot_add", "hot", "1M"]);
    z.ctl_ok(&["hot_add", "cold", "1M", "ro"]);
    z.ctl_ok(&["hot_add", "later", "ro"]);
    assert!(!is_read_only(&z.uri("hot")));
    assert!(is_read_only(&z.uri("cold")));
    wait_for_tick(&z, "hot", 0);
    wait_for_tick(&z, "cold", 0);
    z.ctl_ok(&["--export", "later", "disksize", "1M"]);
    assert!(is_read_only(&z.uri("later")));
    wait_for_tick(&z, "later", 0);
    let o = z.ctl(&["hot_add", "bad", "1M", "rw"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("EINVAL"));
}

/// `--swap` without a mem_limit is refused before anything starts, and so
/// is a resident reserve larger than the reserve; with one, a process the
/// kernel lets lock memory and set the I/O-flusher flag (root with
/// CAP_IPC_LOCK and CAP_SYS_RESOURCE) serves in swap mode with its resident
/// reserve locked and ready before it is ready, says so in its ready line,
/// and stops on SIGTERM with vm.min_free_kbytes as it found it; any other
/// gets one line naming what the kernel refused.
#[test]
fn serve_swap_needs_a_mem_limit_and_says_what_the_kernel_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("nbd.sock");
    let zmem = env!("CARGO_BIN_EXE_zmem");
    let sock_arg = sock.to_str().unwrap();
    let err = serve_usage_error(&["--swap", "--size", "64M", "--socket", sock_arg]);
    assert!(err.contains("--swap needs --mem-limit"), "{err}");
    let err = serve_usage_error(&[
        "--swap",
        "--size",
        "64M",
        "--mem-limit",
        "16M",
        "--swap-reserve",
        "64M",
        "--socket",
        sock_arg,
    ]);
    assert!(
        err.contains("--swap-reserve 67108864 is more than"),
        "{err}"
    );

    let min_free_before = std::fs::read_to_string("/proc/sys/vm/min_free_kbytes").ok();
    let mut child = std::process::Command::new(zmem)
        .args(["serve", "--swap", "--size", "64M", "--mem-limit", "16M"])
        .args(["--swap-reserve", "8M", "--socket"])
        .arg(&sock)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            assert_eq!(status.code(), Some(1), "{err}");
            let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
            assert_eq!(errors.len(), 1, "{err}");
            assert!(errors[0].contains("--swap: "), "{err}");
            eprintln!("swap mode refused here: {}", errors[0]);
            return;
        }
        if sock.with_extension("sock.ctl").exists() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "zmem serve --swap neither started nor failed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let ctl = std::process::Command::new(zmem)
        .arg("ctl")
        .arg("--socket")
        .arg(sock.with_extension("sock.ctl"))
        .arg("swap_mode")
        .output()
        .unwrap();
    let vm_lck_kib: u64 = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    // SAFETY: kill(2) on the child this test started and has not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/vm/min_free_kbytes").ok(),
        min_free_before,
        "vm.min_free_kbytes is as it was: {err}"
    );
    let ready = err
        .lines()
        .find(|l| l.contains("ready: NBD on"))
        .unwrap_or_else(|| panic!("no ready line: {err}"));
    assert!(
        ready.contains("swap reserve resident=8388608 locked=8388608 ready=8388608"),
        "{ready}"
    );
    assert!(vm_lck_kib >= 8 << 10, "VmLck {vm_lck_kib} kB");
    let text = String::from_utf8_lossy(&ctl.stdout);
    assert!(text.starts_with("on reserve="), "{text}");
    assert!(
        text.contains(" resident=8388608 ") && text.contains(" ready=8388608 "),
        "{text}"
    );
    assert!(text.contains("oom_score_adj=-1000"), "{text}");
    // The heap is kept ahead of the stores' bookkeeping: its free top is
    // at least 1 MiB once the server is ready, and allocations use some of
    // it (the slot table, the compression contexts).
    let field = |name: &str| -> u64 {
        text.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    assert!(field("heap_top=") >= 1 << 20, "{text}");
    assert!(field("heap_in_use=") > 0, "{text}");
}

/// `zmem ctl socket` in the environment the server ran in.
fn ctl_socket(runtime_dir: Option<&std::path::Path>) -> String {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_zmem"));
    cmd.args(["ctl", "socket"]);
    match runtime_dir {
        Some(d) => cmd.env("XDG_RUNTIME_DIR", d),
        None => cmd.env_remove("XDG_RUNTIME_DIR"),
    };
    let o = cmd.output().expect("run zmem ctl socket");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .expect("utf-8")
        .trim_end()
        .to_string()
}

#[test]
fn the_default_socket_is_the_one_zmem_ctl_socket_prints_and_its_directory_goes_at_stop() {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    assert_eq!(ctl_socket(None), format!("/tmp/zmem-{uid}/nbd.sock"));

    // The server and the client agree on the default, and the directory the
    // server made is gone once it stops.
    let runtime = tempfile::tempdir().expect("temp dir");
    let dir = runtime.path().join("zmem");
    let log = runtime.path().join("zmem.log");
    let pid_file = runtime.path().join("zmem.pid");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_zmem"))
        .args(["serve", "--size", "16M", "--pid-file"])
        .arg(&pid_file)
        .env("XDG_RUNTIME_DIR", runtime.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start zmem serve");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !pid_file.exists() {
        assert!(child.try_wait().expect("wait").is_none(), "exited: {}", {
            std::fs::read_to_string(&log).unwrap_or_default()
        });
        assert!(Instant::now() < deadline, "not ready after 60 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    let sock = ctl_socket(Some(runtime.path()));
    assert_eq!(sock, dir.join("nbd.sock").to_string_lossy());
    let conn = raw_go(std::path::Path::new(&sock), "zram0").expect("an NBD client on it");
    drop(conn);
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_zmem"))
        .args(["ctl", "status"])
        .env("XDG_RUNTIME_DIR", runtime.path())
        .output()
        .expect("zmem ctl status");
    assert!(status.status.success(), "{status:?}");
    assert!(String::from_utf8_lossy(&status.stdout).contains("zram0"));
    // SAFETY: kill has no memory-safety preconditions; the PID is our own
    // unreaped child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            assert!(st.success(), "{st}");
            break;
        }
        assert!(Instant::now() < deadline, "zmem serve did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !dir.exists(),
        "{} is left behind: {:?}",
        dir.display(),
        std::fs::read_dir(&dir).map(|d| d.count())
    );
}
