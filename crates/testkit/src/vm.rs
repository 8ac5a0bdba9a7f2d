//! A command run inside a qemu guest, for the tests of what only a kernel
//! of its own can show: swap onto zmem, nbd.ko, ublk. It runs
//! `scripts/vm-run` (which boots Debian's 7.3 kernel, or 6.12, or 6.1, with
//! this machine's filesystem as the guest's root, kills qemu on any failure
//! or deadline, and exits with the command's status) and says what came of
//! it. A guest boots and powers off in 11 to 15 s under TCG on a busy
//! 2-core machine, whichever the kernel.
//!
//! Files a guest command needs must lie outside `/tmp` and `/var/tmp`
//! (the guest has its own): a test's `CARGO_TARGET_TMPDIR` is the place.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// A guest to start.
#[derive(Clone, Debug)]
pub struct Guest {
    /// Its RAM, MiB.
    pub mem_mib: u32,
    /// Its CPUs.
    pub cpus: u32,
    /// Seconds it may run before it is killed.
    pub timeout: Duration,
}

/// What came of a command in a guest.
#[derive(Debug)]
pub enum Outcome {
    /// It ran: its exit status and its output (the guest's console: the
    /// command's standard output and error, and the kernel's messages).
    Ran {
        /// The command's exit status.
        code: i32,
        /// Its output.
        output: String,
        /// How long the guest lived, boot included.
        took: Duration,
    },
    /// The guest did not finish within its timeout and was killed.
    TimedOut {
        /// What it printed until then.
        output: String,
    },
    /// No guest can run here (no qemu, no guest kernel, not root), with
    /// the reason: the test skips.
    Unavailable(String),
}

impl Outcome {
    /// The command's output if it ran and exited with `want_code`; `None`,
    /// after saying why, where no guest can run. Panics on a timeout or
    /// another exit code, with the guest's output.
    pub fn output_if_exited(self, want_code: i32) -> Option<String> {
        match self {
            Outcome::Unavailable(why) => {
                eprintln!("skipped: {why}");
                None
            }
            Outcome::TimedOut { output } => panic!("the guest timed out:\n{output}"),
            Outcome::Ran { code, output, took } => {
                eprintln!("guest ran in {took:?}");
                assert_eq!(code, want_code, "{output}");
                Some(output)
            }
        }
    }
}

impl Guest {
    /// Runs `sh -c SCRIPT` in a fresh guest.
    pub fn run(&self, script: &str) -> Outcome {
        self.run_with_disks(script, &[])
    }

    /// Runs `sh -c SCRIPT` in a fresh guest with virtio disks of qemu's
    /// `-blockdev SPEC`s (each with its `node-name=`): /dev/vda, /dev/vdb,
    /// ... in order, once the script loads virtio_blk.
    pub fn run_with_disks(&self, script: &str, blockdevs: &[String]) -> Outcome {
        self.launch(None, script, blockdevs)
    }

    /// Runs `sh -c SCRIPT` in a fresh guest booted with the kernel series
    /// `kernel` (`"6.1"`, `"6.12"` or `"7.3"`, scripts/vm-run's
    /// `--kernel`): 6.12 has ublk_drv; 7.3 is Debian's newest (trixie-backports),
    /// whose zram has lz4 as its default, lz4hc, zstd and deflate, writeback
    /// with compressed_writeback, and no lzo. A series scripts/install-deps
    /// has not unpacked gives [`Outcome::Unavailable`].
    pub fn run_on(&self, kernel: &str, script: &str) -> Outcome {
        self.launch(Some(kernel), script, &[])
    }

    /// [`Guest::run_on`] with virtio disks, as [`Guest::run_with_disks`]
    /// gives them.
    pub fn run_on_with_disks(&self, kernel: &str, script: &str, blockdevs: &[String]) -> Outcome {
        self.launch(Some(kernel), script, blockdevs)
    }

    fn launch(&self, kernel: Option<&str>, script: &str, blockdevs: &[String]) -> Outcome {
        let vm_run = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/vm-run");
        let start = Instant::now();
        let mut cmd = Command::new(vm_run);
        cmd.args([
            "--mem",
            &self.mem_mib.to_string(),
            "--cpus",
            &self.cpus.to_string(),
            "--timeout",
            &self.timeout.as_secs().to_string(),
        ]);
        if let Some(k) = kernel {
            cmd.args(["--kernel", k]);
        }
        for b in blockdevs {
            cmd.args(["--blockdev", b]);
        }
        let out = cmd
            .args(["--", "sh", "-c", script])
            .output()
            .expect("scripts/vm-run runs");
        let output = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        match out.status.code() {
            Some(125) => Outcome::Unavailable(err.trim().to_string()),
            Some(124) if err.contains("did not finish") => Outcome::TimedOut { output },
            Some(code) => Outcome::Ran {
                code,
                output,
                took: start.elapsed(),
            },
            None => Outcome::Ran {
                code: -1,
                output,
                took: start.elapsed(),
            },
        }
    }
}
