//! The ublk server against a real ublk_drv: the examples run in a qemu
//! guest booted with Debian's 7.3 kernel (scripts/vm-run through
//! `testkit::vm`), with this machine's filesystem as its root, so the
//! example binaries cargo built run inside it.
//!
//! Guests run under TCG emulation where /dev/kvm cannot run a stock
//! kernel: a guest of `ublk_ram` takes about 12 s on two cores, the fio
//! one about 40 s. Only outcomes are checked, never speed (the fio
//! figures are printed, and are TCG figures). Where no guest can run (no
//! qemu, no guest kernel, not root), each test says why and passes
//! without running.

use std::path::PathBuf;
use std::time::Duration;

use testkit::vm::Guest;

/// An example binary of this crate, built by `cargo test` beside the
/// test binaries (target/PROFILE/examples/), outside /tmp as the guest
/// needs.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/PROFILE/deps/TEST");
    let path = profile_dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: cargo test builds the examples",
        path.display()
    );
    path
}

fn guest(timeout_s: u64) -> Guest {
    Guest {
        mem_mib: 512,
        cpus: 2,
        timeout: Duration::from_secs(timeout_s),
    }
}

/// A RAM-backed device with two queues: a pattern written through
/// /dev/ublkb0 with O_DIRECT reads back, and the target holds it; flush,
/// discard and write-zeroes reach the target; after stop the block
/// device and the device itself are gone. A target's EIO reaches the
/// reader, and a running device dropped without a stop is deleted.
#[test]
fn ram_device_round_trip_in_guest() {
    let bin = example("ublk_ram");
    let script = format!("modprobe ublk_drv && {} 32 2", bin.display());
    let Some(out) = guest(300).run_on("7.3", &script).output_if_exited(0) else {
        return;
    };
    assert!(out.contains("ublk_ram: PASS"), "{out}");
    assert!(out.contains("live true"), "{out}");
    assert!(out.contains("the RAM target holds the same bytes"), "{out}");
    assert!(out.contains("after DEL_DEV: No such device"), "{out}");
    assert!(
        out.contains("gives the reader: Input/output error"),
        "{out}"
    );
    assert!(out.contains("dropped while running is deleted"), "{out}");
}

/// A null device under fio (when this machine has fio) from a second
/// process, then SIGTERM: the server stops and deletes the device by
/// itself and exits 0 with what it served.
#[test]
fn null_device_under_fio_stops_on_sigterm_in_guest() {
    if !std::process::Command::new("sh")
        .args(["-c", "command -v fio"])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        eprintln!("skipped: no fio on this machine");
        return;
    }
    let bin = example("ublk_null");
    let script = format!(
        r#"modprobe ublk_drv || exit 1
{bin} 1024 2 64 &
pid=$!
for i in $(seq 100); do [ -b /dev/ublkb0 ] && break; sleep 0.1; done
[ -b /dev/ublkb0 ] || {{ echo "no /dev/ublkb0"; exit 1; }}
for rw in randread randwrite; do
  fio --name=$rw --filename=/dev/ublkb0 --direct=1 --rw=$rw --bs=4k --iodepth=32 \
      --ioengine=libaio --runtime=5 --time_based --output-format=terse --terse-version=3 \
    | awk -F';' -v rw=$rw '{{ if (rw == "randread") print "fio " rw " iops " $8; else print "fio " rw " iops " $49 }}'
done
kill -TERM $pid
wait $pid
echo "server exit $?"
[ -e /dev/ublkb0 ] && echo "/dev/ublkb0 still there"
exit 0
"#,
        bin = bin.display()
    );
    let Some(out) = guest(300).run_on("7.3", &script).output_if_exited(0) else {
        return;
    };
    assert!(out.contains("ublk_null: serving /dev/ublkb0"), "{out}");
    assert!(out.contains("server exit 0"), "{out}");
    assert!(out.contains("ublk_null: stopped and deleted"), "{out}");
    assert!(!out.contains("still there"), "{out}");
    for rw in ["randread", "randwrite"] {
        let iops: f64 = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("fio {rw} iops ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no fio {rw} figure:\n{out}"));
        assert!(iops > 0.0, "{out}");
        eprintln!("null target, 4 KiB {rw}, depth 32, under TCG: {iops} IOPS");
    }
}
