//! `zmem advise` on a machine's processes: the files `--emit` prints work
//! with what reads them (the installed zram-generator, a hot-added kernel
//! zram device, `zmem serve`), and bad input gets one line and a non-zero
//! exit, never a panic.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::holder::{kernel_zram_here, zram_devices, Holder};
use common::{assert_ok, spawn_zmem, zmem};

/// The tests that add a kernel zram device run one at a time: each counts
/// the devices before and after.
static KERNEL_DEVICES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The right to add kernel zram devices, held until dropped; `None`, after
/// saying why, where this machine cannot (not root, no zram-control).
fn kernel_devices() -> Option<std::sync::MutexGuard<'static, ()>> {
    if !kernel_zram_here() {
        eprintln!("skipped: needs root and /sys/class/zram-control");
        return None;
    }
    Some(KERNEL_DEVICES.lock().unwrap_or_else(|e| e.into_inner()))
}

fn ok(out: &Output) -> String {
    assert_ok(out);
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn one_line_error(out: &Output, code: i32, words: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(words), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

fn emit(pid: u32, extra: &[&str], kind: &str) -> String {
    let pid = pid.to_string();
    let mut args = vec![
        "advise",
        "--pid",
        &pid,
        "--comp",
        "lz4,lzo-rle,zstd:3",
        "--latency-reads",
        "500",
        "--emit",
        kind,
    ];
    args.extend_from_slice(extra);
    ok(&zmem(&args))
}

/// The keys systemd-zram-generator 1.1.2 knows (zram-generator.conf(5);
/// it passes over keys it does not know without a word, so the test checks
/// the file's keys itself).
const ZRAM_GENERATOR_1_1_2_KEYS: [&str; 8] = [
    "host-memory-limit",
    "zram-size",
    "compression-algorithm",
    "writeback-device",
    "swap-priority",
    "mount-point",
    "fs-type",
    "options",
];

#[test]
fn the_zram_generator_file_makes_its_units() {
    // Unpacked by scripts/install-deps, or installed.
    let Some(generator) = [
        "/var/tmp/zmem-deps/zram-generator/lib/systemd/system-generators/zram-generator",
        "/lib/systemd/system-generators/zram-generator",
    ]
    .into_iter()
    .map(Path::new)
    .find(|p| p.exists()) else {
        eprintln!("skipped: systemd-zram-generator is not there (scripts/install-deps unpacks it)");
        return;
    };
    let h = Holder::start("same", 32, Duration::from_secs(60));
    let conf = emit(h.pid(), &[], "zram-generator");
    // Only keys 1.1.2 knows, outside comments; the recompression chain and
    // the resident limit only as comments.
    for line in conf.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('[') {
            continue;
        }
        let key = line.split('=').next().unwrap().trim();
        assert!(ZRAM_GENERATOR_1_1_2_KEYS.contains(&key), "{key} in\n{conf}");
        if key == "compression-algorithm" {
            // 1.1.2 takes the whole value as one module name.
            let value = line.split('=').nth(1).unwrap();
            assert_eq!(value.split_whitespace().count(), 1, "{line}");
        }
    }
    assert!(conf.contains("# A newer zram-generator would also take:"));
    assert!(conf.contains("zram-resident-limit"));
    // The generator, in its test mode, on a scratch root holding the file
    // and this machine's meminfo.
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("etc/systemd")).unwrap();
    std::fs::create_dir_all(root.path().join("proc")).unwrap();
    std::fs::write(root.path().join("etc/systemd/zram-generator.conf"), &conf).unwrap();
    std::fs::copy("/proc/meminfo", root.path().join("proc/meminfo")).unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let run = Command::new(generator)
        .arg(out_dir.path())
        .env("ZRAM_GENERATOR_ROOT", root.path())
        .output()
        .unwrap();
    assert_ok(&run);
    let unit = std::fs::read_to_string(out_dir.path().join("dev-zram0.swap")).unwrap();
    assert!(unit.contains("What=/dev/zram0"), "{unit}");
    assert!(unit.contains("Priority=100"), "{unit}");
    let setup = out_dir
        .path()
        .join("systemd-zram-setup@zram0.service.d/bindings.conf");
    assert!(setup.exists());
    assert!(out_dir
        .path()
        .join("swap.target.wants/dev-zram0.swap")
        .exists());
}

/// A loop device over a sparse file, detached on drop.
struct Loop {
    dev: String,
    _file: tempfile::NamedTempFile,
}

impl Loop {
    fn new(bytes: u64) -> Option<Loop> {
        let file = tempfile::NamedTempFile::new().ok()?;
        file.as_file().set_len(bytes).ok()?;
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(file.path())
            .output()
            .ok()?;
        out.status.success().then(|| Loop {
            dev: String::from_utf8_lossy(&out.stdout).trim().to_string(),
            _file: file,
        })
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

#[test]
fn the_sysfs_lines_are_all_accepted_in_order_by_a_kernel_device() {
    let Some(_one_at_a_time) = kernel_devices() else {
        return;
    };
    let before = zram_devices();
    let h = Holder::start("same", 32, Duration::from_secs(60));
    // With a backing device and a watch, the script holds the writeback
    // lines too (backing_dev before disksize, the limits after).
    let backing = Loop::new(64 << 20);
    let mut extra = vec!["--watch", "2s"];
    if let Some(l) = &backing {
        extra.extend(["--backing-dev", l.dev.as_str()]);
    }
    let script = emit(h.pid(), &extra, "sysfs");
    assert!(script.starts_with("#!/bin/sh"));
    let at = |needle: &str| script.find(needle).unwrap_or(usize::MAX);
    assert!(at("/comp_algorithm\"") < at("/disksize\""), "{script}");
    assert!(at("/disksize\"") < at("/mem_limit\""), "{script}");
    if backing.is_some() {
        assert!(at("/backing_dev\"") < at("/disksize\""), "{script}");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zram.sh");
    std::fs::write(&path, &script).unwrap();
    // A hot-added device (never zram0), removed on drop.
    let dev = tune::kernel_zram::KernelZram::create_unsized().unwrap();
    let name = format!("zram{}", dev.id());
    eprintln!("{script}");
    let run = Command::new("sh").arg(&path).arg(&name).output().unwrap();
    assert!(
        run.status.success(),
        "{}\n{script}",
        String::from_utf8_lossy(&run.stderr)
    );
    // The device took every value written.
    let attr = |a: &str| std::fs::read_to_string(format!("/sys/block/{name}/{a}")).unwrap();
    for line in script.lines().filter(|l| l.starts_with("echo '")) {
        let value = line.split('\'').nth(1).unwrap();
        let a = line.rsplit('/').next().unwrap().trim_end_matches('"');
        // (mem_limit and the like are write-only: their write succeeding
        // is the check.)
        match a {
            "disksize" => {
                let mib: u64 = value.trim_end_matches('M').parse().unwrap();
                assert_eq!(attr(a).trim().parse::<u64>().unwrap(), mib << 20, "{a}");
            }
            "comp_algorithm" => {
                let got = attr(a);
                assert!(got.contains(&format!("[{value}]")), "{got}");
            }
            "backing_dev" => assert_eq!(attr(a).trim(), value),
            "writeback_limit" | "writeback_limit_enable" => {
                assert_eq!(attr(a).trim(), value, "{a}");
            }
            _ => {}
        }
    }
    drop(dev);
    drop(backing);
    drop(h);
    assert_eq!(zram_devices(), before);
}

/// `--emit zswap`: the kernel command line fragment and the module
/// parameters' lines, in the order the module takes them, with a
/// max_pool_percent within the target share.
#[test]
fn the_zswap_file_sets_the_module_parameters() {
    let h = Holder::start("same", 32, Duration::from_secs(60));
    let text = emit(
        h.pid(),
        &["--zswap-comp", "lz4", "--target-share", "15"],
        "zswap",
    );
    let cmdline = text
        .lines()
        .find(|l| l.starts_with("zswap.enabled=1 "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(cmdline.contains(" zswap.compressor=lz4 "), "{text}");
    let percent: u32 = cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix("zswap.max_pool_percent="))
        .unwrap_or_else(|| panic!("{text}"))
        .parse()
        .unwrap();
    assert!((1..=15).contains(&percent), "{text}");
    let p = "/sys/module/zswap/parameters";
    let order = [
        "echo lz4 > /sys/module/zswap/parameters/compressor".to_string(),
        format!("echo {percent} > {p}/max_pool_percent"),
        format!("echo Y > {p}/enabled"),
    ];
    let at: Vec<usize> = order
        .iter()
        .map(|l| {
            text.lines()
                .position(|t| t == l)
                .unwrap_or_else(|| panic!("no {l:?} in\n{text}"))
        })
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{text}");
    assert!(text.contains("# The advice: use z"), "{text}");
}

#[test]
fn the_sysctl_and_zmem_files_say_why_and_the_command_starts() {
    let h = Holder::start("same", 32, Duration::from_secs(60));
    let sysctl = emit(h.pid(), &[], "sysctl");
    let cluster = sysctl
        .lines()
        .position(|l| l.starts_with("vm.page-cluster = "))
        .unwrap_or_else(|| panic!("{sysctl}"));
    // Each setting comes after the comment that gives its reason.
    let lines: Vec<&str> = sysctl.lines().collect();
    assert!(
        lines[cluster - 1].starts_with("# eight consecutive pages cost"),
        "{sysctl}"
    );
    if let Some(s) = lines.iter().position(|l| l.starts_with("vm.swappiness = ")) {
        assert!(lines[s - 1].contains("200 *"), "{sysctl}");
        let v: u32 = lines[s].rsplit(' ').next().unwrap().parse().unwrap();
        assert!(v <= 200);
    }
    // The zmem command parses and serves.
    let cmd = emit(h.pid(), &[], "zmem");
    let line = cmd.lines().find(|l| l.starts_with("zmem serve ")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("nbd.sock");
    let args: Vec<&str> = line.split_whitespace().skip(1).collect();
    let mut serve = Command::new(env!("CARGO_BIN_EXE_zmem"))
        .args(&args)
        .arg("--socket")
        .arg(&sock)
        .spawn()
        .unwrap();
    let mut up = false;
    for _ in 0..100 {
        if sock.exists() {
            up = true;
            break;
        }
        if let Some(status) = serve.try_wait().unwrap() {
            panic!("{line} exited: {status}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = serve.kill();
    let _ = serve.wait();
    assert!(up, "{line} did not listen");
}

#[test]
fn bad_machine_input_gets_one_line() {
    // A cgroup that does not exist.
    one_line_error(
        &zmem(&["advise", "--cgroup", "/no/such/cgroup"]),
        2,
        "--cgroup",
    );
    // A process that does not exist.
    one_line_error(&zmem(&["advise", "--pid", "4000000"]), 2, "no such process");
    // --watch 0, and a machine flag with an input file.
    one_line_error(
        &zmem(&["advise", "--pid", "1", "--watch", "0"]),
        2,
        "--watch",
    );
    one_line_error(
        &zmem(&["advise", "/etc/hostname", "--verify"]),
        2,
        "--verify",
    );
    one_line_error(&zmem(&["advise", "--system", "--pid", "1"]), 2, "--system");
    // --system without root: run as nobody where this test is root.
    // SAFETY: geteuid has no preconditions and only reads process state.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::process::CommandExt;
        let out = Command::new(env!("CARGO_BIN_EXE_zmem"))
            .args(["advise", "--system"])
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        one_line_error(&out, 2, "needs root");
    }
}

#[test]
fn a_process_that_exits_while_watched_is_noted_and_the_rest_kept() {
    let stays = Holder::start("same", 16, Duration::from_secs(60));
    let mut leaves = Holder::start("same", 16, Duration::from_secs(60));
    let (a, b) = (stays.pid().to_string(), leaves.pid().to_string());
    let child = spawn_zmem(&[
        "advise",
        "--pid",
        &a,
        "--pid",
        &b,
        "--watch",
        "4s",
        "--comp",
        "lz4",
        "--latency-reads",
        "500",
        "--format",
        "json",
    ]);
    std::thread::sleep(Duration::from_secs(2));
    leaves.kill();
    let out = child.wait_with_output().unwrap();
    let m: serde_json::Value = serde_json::from_slice(&ok(&out).into_bytes()).unwrap();
    let exited = m["idle"]["exited"].as_array().unwrap();
    assert!(exited.iter().any(|p| p == leaves.pid()), "{exited:?}");
    let last = m["idle"]["points"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(last["resident"].as_u64().unwrap() > 0, "{last}");
    drop(stays);
}

#[test]
fn an_interrupted_verify_removes_its_kernel_device() {
    let Some(_one_at_a_time) = kernel_devices() else {
        return;
    };
    let before = zram_devices();
    let h = Holder::start("binaries", 1024, Duration::from_secs(120));
    let pid = h.pid().to_string();
    let child = spawn_zmem(&[
        "advise",
        "--pid",
        &pid,
        "--verify",
        "--comp",
        "lz4",
        "--latency-reads",
        "500",
    ]);
    // SIGTERM as soon as its device exists, while it writes 1 GiB there.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while zram_devices().len() == before.len() {
        assert!(std::time::Instant::now() < deadline, "no device appeared");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    one_line_error(&out, 1, "interrupted");
    assert_eq!(zram_devices(), before, "the device was left behind");
}
