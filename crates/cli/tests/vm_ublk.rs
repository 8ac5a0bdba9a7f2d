//! `zmem serve --ublk`: the exports as the kernel's block devices.
//!
//! In a qemu guest booted with Debian's 7.3 kernel (the newest it ships,
//! with ublk_drv; scripts/vm-run through `testkit::vm`),
//! `tests/guest/serve_ublk.sh`
//! drives the real binary through an export's whole life: data through
//! `/dev/ublkbN` compressed in the store, discard and write-zeroes,
//! read-only devices, a mounted ext4 refusing reset and removal, disksize,
//! hot_add and hot_remove making and removing devices, SIGTERM removing
//! them all, SIGKILL mid-write (the writer sees I/O errors, the next
//! server deletes the device left), and swap mode (`--swap`: memory locked
//! ahead, data from the locked reserve, the heap kept ahead). The guest
//! runs under TCG emulation where /dev/kvm cannot run a stock kernel
//! (about 2 minutes on two cores); where no guest can run (no qemu, no
//! guest kernel, not root) it says why and passes without running.
//!
//! On this machine itself, `--ublk` without the driver is one line naming
//! it and exit 1.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use testkit::vm::{Guest, Outcome};

const ZMEM: &str = env!("CARGO_BIN_EXE_zmem");

#[test]
fn exports_live_as_ublk_block_devices_in_a_guest() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/guest/serve_ublk.sh");
    let guest = Guest {
        mem_mib: 512,
        cpus: 2,
        timeout: Duration::from_secs(600),
    };
    // The data written is the zmem binary itself: real, mixed content.
    match guest.run_on("7.3", &format!("bash {script} {ZMEM} {ZMEM}")) {
        Outcome::Unavailable(why) => eprintln!("skipped: {why}"),
        Outcome::TimedOut { output } => panic!("the guest timed out:\n{output}"),
        Outcome::Ran { code, output, took } => {
            eprintln!("guest ran in {took:?}:\n{output}");
            assert_eq!(code, 0, "{output}");
            for line in [
                "exports: a /dev/ublkb0 64 MiB, ro /dev/ublkb1, spare none",
                "read-only: a write fails",
                "reset after umount: /dev/ublkb0 gone",
                "SIGTERM: exit 0, no /dev/ublkb* or /dev/ublkc* left",
                "writer after SIGKILL: dd: error writing '/dev/ublkb0': Input/output error",
                "next start removed the device a killed server left",
                "swap mode: 16 MiB through /dev/ublkb0 from the locked reserve, heap kept ahead",
                "serve_ublk: PASS",
            ] {
                assert!(output.contains(line), "missing {line:?}:\n{output}");
            }
        }
    }
}

#[test]
fn ublk_without_the_driver_is_one_line_naming_it() {
    if Path::new("/dev/ublk-control").exists() {
        eprintln!("skipped: this machine has ublk_drv loaded");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ctl = dir.path().join("ctl");
    let out = Command::new(ZMEM)
        .args(["serve", "--ublk", "--size", "16M", "--ctl-socket"])
        .arg(&ctl)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("--ublk"), "{err}");
    assert!(lines[0].contains("ublk_drv"), "{err}");
    assert!(!ctl.exists(), "the control socket was bound anyway");
}
