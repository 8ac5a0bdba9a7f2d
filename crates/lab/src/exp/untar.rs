//! `zmem exp untar`: the class-merging patch's workload on a real file
//! system, as root.
//!
//! For each configuration, one after another: a device (a `zmem serve`
//! export, started as a child process on a Unix socket and reached through
//! `nbdfuse` and a loop device, or a `hot_add`ed kernel zram device with
//! lz4), `mkfs.ext4 -E nodiscard`, `mount -o discard`, untar the Linux source
//! tar (`exp merge`'s), remove the ten directories drivers, arch, fs, sound,
//! include, net, Documentation, firmware, kernel, tools in that order
//! (`--tar` and `--remove` take others), and after each step `sync` and wait
//! until mm_stat has not changed for `--settle-ms` (the discards have
//! reached the device and a background compactor is idle), then read
//! mm_stat and the overhead ratio `mem_used_total / compr_data_size - 1`. A
//! manual `compact` ends each run. The configurations: the kernel's zram
//! (where there is one), zmem kernel-compat (its default lzo-rle, no
//! automatic compaction), zmem default mode without automatic compaction,
//! and default mode with it (lz4).
//!
//! The cost of automatic compaction, from the same run: its thread's CPU
//! time (the store's counter) against the server process's CPU time
//! (`/proc/PID/stat` utime + stime) from the untar to the last removal, and
//! the objects it moved against their lower bound. The lower bound: before
//! each compaction step (one size class), the fewest objects any compaction
//! must move to free every zspage the step could free: the live objects of
//! that many of the class's emptiest zspages (`ZPool::step_lower_bound`,
//! zsmalloc's `class_compaction_lower_bound`), summed over the steps run.
//! Default mode's trim (gathering a class's holes at the end of one zspage
//! to give back its pages) moves objects beyond that bound; they are
//! counted apart (`objs_moved_trim`), and the moves made to free whole
//! zspages (`objs_moved - objs_moved_trim`) are set against the bound.
//!
//! Everything it makes (mount, loop device, FUSE mount, server, zram
//! device, the temporary directory) is taken down when a run ends, also on
//! failure and on SIGINT or SIGTERM (a handler sets a flag the run checks
//! while it waits; children run in their own process group, so a Ctrl-C
//! reaches only this process, which stops them in order). Without root or
//! one of the tools it says what is missing in one line and runs nothing,
//! as the kernel peer is skipped elsewhere; without the kernel's zram that
//! configuration is skipped with a line saying why.
//!
//! This module owns the experiment and its report; it changes no store.

use std::fs::{self, File};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::kernel_zram::KernelZram;
use crate::plot::Series;
use crate::Error;
use recipe::output::{write_json, write_stdout, Format, FormatArg};
use tune::corpus;

/// The directories removed, in the seed's order (firmware is absent from
/// the 6.1 tar: that step changes nothing).
pub const REMOVE: [&str; 10] = [
    "drivers",
    "arch",
    "fs",
    "sound",
    "include",
    "net",
    "Documentation",
    "firmware",
    "kernel",
    "tools",
];

/// The overhead ratio default mode with automatic compaction must stay
/// within after every step.
const TARGET_RATIO: f64 = 0.03;

/// The compactor's CPU share of the server's the issue allows.
const TARGET_CPU_SHARE: f64 = 0.05;

/// Arguments of `zmem exp untar`.
#[derive(Args, Debug)]
pub struct UntarArgs {
    /// The tar to unpack (by default the Linux source tar `exp merge` uses,
    /// made from Debian's linux-source-6.1 when missing).
    #[arg(long, default_value = corpus::LINUX_TAR)]
    tar: PathBuf,
    /// Directories to remove in order, comma-separated (inside the tar's
    /// single top directory when it has one).
    #[arg(long, value_delimiter = ',', default_values_t = REMOVE.map(String::from))]
    remove: Vec<String>,
    /// Configurations to run, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "kernel,kernel-compat,default-no-auto,default"
    )]
    config: Vec<Config>,
    /// Size of each device (K, M, G, T suffixes; 64M to 1T).
    #[arg(long, default_value = "4G", value_parser = recipe::flags::size(64 << 20, 1 << 40))]
    size: u64,
    /// Milliseconds mm_stat must stay unchanged after a step's `sync` for
    /// the step to count as settled (100 to 60000).
    #[arg(long, default_value_t = 2000, value_parser = recipe::flags::whole::<u64>(100, 60_000))]
    settle_ms: u64,
    #[command(flatten)]
    format: FormatArg,
    /// Path stem of the plot (`.svg` and `.png` are added).
    #[arg(long, default_value = "out/exp-untar")]
    plot: PathBuf,
    /// Do not draw the plot.
    #[arg(long)]
    no_plot: bool,
}

/// A configuration of the experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Config {
    /// A `hot_add`ed device of the kernel's zram, lz4.
    Kernel,
    /// `zmem serve --mode kernel-compat` (lzo-rle, no automatic compaction).
    KernelCompat,
    /// `zmem serve --mode default --auto-compact off` (lz4).
    DefaultNoAuto,
    /// `zmem serve --mode default --auto-compact on` (lz4).
    Default,
}

impl Config {
    fn label(self) -> &'static str {
        match self {
            Config::Kernel => "kernel zram (lz4)",
            Config::KernelCompat => "zmem kernel-compat",
            Config::DefaultNoAuto => "zmem default, no auto compaction",
            Config::Default => "zmem default (auto compaction on)",
        }
    }

    /// `zmem serve`'s store flags (none for the kernel).
    fn serve_flags(self) -> &'static [&'static str] {
        match self {
            Config::Kernel => &[],
            Config::KernelCompat => &["--mode", "kernel-compat", "--auto-compact", "off"],
            Config::DefaultNoAuto => &["--mode", "default", "--auto-compact", "off"],
            Config::Default => &["--mode", "default", "--auto-compact", "on"],
        }
    }
}

/// The background compactor's counters (`debug_stat`'s `auto_compact:`
/// line).
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct AutoFigures {
    runs: u64,
    pages_freed: u64,
    objs_moved: u64,
    objs_lower_bound: u64,
    objs_moved_trim: u64,
    cpu_s: f64,
    longest_step_us: u64,
}

/// One step's figures.
#[derive(Debug, Serialize)]
struct Row {
    step: String,
    orig_data_size: u64,
    compr_data_size: u64,
    mem_used_total: u64,
    /// `mem_used_total / compr_data_size - 1`.
    overhead_ratio: f64,
    /// The background compactor's counters so far (zmem only).
    auto_compact: Option<AutoFigures>,
}

/// What one configuration measured, and what it made (for the check that
/// it all went away).
#[derive(Debug, Serialize)]
struct Run {
    config: Config,
    label: &'static str,
    rows: Vec<Row>,
    /// The server's CPU time from the untar to the last removal, seconds.
    server_cpu_s: Option<f64>,
    /// The compactor's counters over the same span.
    auto_compact: Option<AutoFigures>,
    made: Made,
}

/// What a run made, all of it gone when it ended.
#[derive(Debug, Default, Serialize)]
struct Made {
    work_dir: PathBuf,
    loop_device: Option<String>,
    zram_device: Option<u32>,
}

/// The report.
#[derive(Serialize)]
struct Report {
    tar: PathBuf,
    removed: Vec<String>,
    runs: Vec<Run>,
    /// Configurations not run, and why.
    skipped: Vec<String>,
    plot: Option<(PathBuf, PathBuf)>,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT and SIGTERM set [`INTERRUPTED`] while this lives; the previous
/// handlers come back when it drops.
struct SignalGuard {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl SignalGuard {
    fn install() -> io::Result<SignalGuard> {
        INTERRUPTED.store(false, Ordering::SeqCst);
        let mut guard = SignalGuard { old: Vec::new() };
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: sigaction is plain data; all zeroes is a valid value
            // (no handler, empty flags) that is filled in below.
            let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
            act.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            act.sa_flags = libc::SA_RESTART;
            // SAFETY: sa_mask is a live sigset_t inside `act`.
            unsafe { libc::sigemptyset(&mut act.sa_mask) };
            // SAFETY: as above; `old` is written by sigaction.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: both pointers are to live sigaction values; the
            // handler only stores to an atomic, which is async-signal-safe.
            if unsafe { libc::sigaction(sig, &act, &mut old) } != 0 {
                return Err(io::Error::last_os_error());
            }
            guard.old.push((sig, old));
        }
        Ok(guard)
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for (sig, old) in &self.old {
            // SAFETY: `old` is the action sigaction returned for `sig`.
            unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
        }
    }
}

fn interrupted() -> Result<(), Error> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        Err(Error::Failed(
            "interrupted: everything the run made was taken down".into(),
        ))
    } else {
        Ok(())
    }
}

fn failed(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Failed(format!("{what}: {e}"))
}

/// Whether `tool` is an executable in `PATH` (or the sbin directories,
/// which a root shell has and some others lack).
fn have_tool(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .any(|d| d.join(tool).is_file())
}

/// What is missing for the experiment here, in words, or `None`.
fn missing() -> Option<String> {
    let mut gaps = Vec::new();
    // SAFETY: geteuid has no preconditions and only reads process state.
    if unsafe { libc::geteuid() } != 0 {
        gaps.push("root".to_string());
    }
    for tool in ["nbdfuse", "mkfs.ext4", "losetup", "mount", "umount", "tar"] {
        if !have_tool(tool) {
            gaps.push(tool.to_string());
        }
    }
    if !Path::new("/dev/fuse").exists() {
        gaps.push("/dev/fuse".to_string());
    }
    (!gaps.is_empty()).then(|| gaps.join(", "))
}

/// A command in its own process group (a terminal's Ctrl-C reaches only
/// zmem, which stops it), stdin closed, stderr to `log`.
fn command(program: &str, log: &Path) -> Result<Command, Error> {
    let mut cmd = Command::new(program);
    let err = File::create(log).map_err(|e| failed(&log.display().to_string(), e))?;
    cmd.process_group(0).stdin(Stdio::null()).stderr(err);
    Ok(cmd)
}

/// Waits for `child`, polling so a signal is noticed: on one the child is
/// killed and reaped.
fn wait_interruptibly(child: &mut Child, what: &str) -> Result<ExitStatus, Error> {
    loop {
        if let Some(st) = child.try_wait().map_err(|e| failed(what, e))? {
            return Ok(st);
        }
        if INTERRUPTED.load(Ordering::SeqCst) {
            let _ = child.kill();
            let _ = child.wait();
            interrupted()?;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` to the end; its stdout, or an error with the end of its
/// stderr (in `log`).
fn run_tool(cmd: &mut Command, log: &Path, what: &str) -> Result<String, Error> {
    let out_path = log.with_extension("out");
    let out = File::create(&out_path).map_err(|e| failed(what, e))?;
    let mut child = cmd.stdout(out).spawn().map_err(|e| failed(what, e))?;
    let status = wait_interruptibly(&mut child, what)?;
    let stdout = fs::read_to_string(&out_path).unwrap_or_default();
    if !status.success() {
        let err = fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(Error::Failed(format!(
            "{what} failed ({status}): {}",
            tail.join(" / ")
        )));
    }
    Ok(stdout)
}

/// Polls `ready` every 20 ms for up to `secs` seconds, failing early if
/// `child` exits or a signal comes.
fn wait_until(
    secs: u64,
    child: &mut Option<Child>,
    what: &str,
    ready: impl Fn() -> bool,
) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ready() {
        interrupted()?;
        if let Some(c) = child.as_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                return Err(Error::Failed(format!("{what} exited ({st})")));
            }
        }
        if Instant::now() > deadline {
            return Err(Error::Failed(format!("{what}: not ready after {secs} s")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Sends SIGTERM to `child` and waits up to `secs` seconds for it, then
/// kills it.
fn stop(child: &mut Child, secs: u64) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill has no memory preconditions; `pid` is our own child,
        // not yet reaped (so the number is not reused).
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Whether `path` is a mount point now (in /proc/self/mounts).
fn mounted(path: &Path) -> bool {
    let p = path.to_string_lossy();
    fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(&*p))
}

/// Runs a teardown command quietly; whether it succeeded.
fn quietly(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The device stack of one run; dropping it takes down whatever of it
/// exists, in order: the mount, the loop device, the FUSE mount and
/// nbdfuse, the server, the kernel device, the temporary directory.
struct Rig {
    work: tempfile::TempDir,
    mnt: PathBuf,
    fuse_dir: PathBuf,
    ctl: PathBuf,
    loop_dev: Option<String>,
    fuse: Option<Child>,
    server: Option<Child>,
    kernel: Option<KernelZram>,
}

impl Rig {
    fn new() -> Result<Rig, Error> {
        let work = tempfile::Builder::new()
            .prefix("zmem-untar.")
            .tempdir_in("/tmp")
            .map_err(|e| failed("temporary directory", e))?;
        let mnt = work.path().join("fs");
        let fuse_dir = work.path().join("fuse");
        for d in [&mnt, &fuse_dir] {
            fs::create_dir(d).map_err(|e| failed(&d.display().to_string(), e))?;
        }
        let ctl = work.path().join("nbd.sock.ctl");
        Ok(Rig {
            work,
            mnt,
            fuse_dir,
            ctl,
            loop_dev: None,
            fuse: None,
            server: None,
            kernel: None,
        })
    }

    fn log(&self, name: &str) -> PathBuf {
        self.work.path().join(format!("{name}.log"))
    }

    /// Starts the device for `config`; returns its block device node.
    fn start(&mut self, config: Config, size: u64) -> Result<String, Error> {
        if config == Config::Kernel {
            let dev = KernelZram::create("lz4", size).map_err(Error::Failed)?;
            let node = dev.node().display().to_string();
            self.kernel = Some(dev);
            return Ok(node);
        }
        let exe = std::env::current_exe().map_err(|e| failed("the zmem binary", e))?;
        let sock = self.work.path().join("nbd.sock");
        let mut serve = command(&exe.to_string_lossy(), &self.log("serve"))?;
        serve
            .arg("serve")
            .arg("--size")
            .arg(size.to_string())
            .arg("--socket")
            .arg(&sock)
            .arg("--ctl-socket")
            .arg(&self.ctl)
            .args(config.serve_flags())
            .stdout(Stdio::null());
        self.server = Some(serve.spawn().map_err(|e| failed("zmem serve", e))?);
        let ctl = self.ctl.clone();
        wait_until(30, &mut self.server, "zmem serve", || {
            sock.exists() && ctl.exists()
        })?;
        let disk = self.fuse_dir.join("disk");
        let uri = format!("nbd+unix:///zram0?socket={}", sock.display());
        let mut fuse = command("nbdfuse", &self.log("nbdfuse"))?;
        fuse.arg(&disk).arg(&uri).stdout(Stdio::null());
        self.fuse = Some(fuse.spawn().map_err(|e| failed("nbdfuse", e))?);
        let fuse_dir = self.fuse_dir.clone();
        wait_until(30, &mut self.fuse, "nbdfuse", || {
            mounted(&fuse_dir) && disk.exists()
        })?;
        let log = self.log("losetup");
        let out = run_tool(
            command("losetup", &log)?.args(["-f", "--show"]).arg(&disk),
            &log,
            "losetup",
        )?;
        let dev = out.trim().to_string();
        if !dev.starts_with("/dev/loop") {
            return Err(Error::Failed(format!("losetup printed {dev:?}")));
        }
        self.loop_dev = Some(dev.clone());
        Ok(dev)
    }

    /// mm_stat's columns.
    fn mm_stat(&self) -> Result<Vec<u64>, Error> {
        if let Some(k) = &self.kernel {
            return k.mm_stat().map_err(Error::Failed);
        }
        self.ctl("mm_stat")?
            .split_whitespace()
            .map(|v| v.parse().map_err(|e| failed("mm_stat", e)))
            .collect()
    }

    /// One control command's reply.
    fn ctl(&self, line: &str) -> Result<String, Error> {
        serve::ctl_socket::request(&self.ctl, None, line)
            .map_err(|e| failed(line, e))?
            .map_err(|e| failed(line, e))
    }

    fn compact(&self) -> Result<(), Error> {
        match &self.kernel {
            Some(k) => k.set("compact", "1").map_err(Error::Failed),
            None => self.ctl("compact").map(drop),
        }
    }

    /// The background compactor's counters (zmem only; zeroes until it
    /// first ran).
    fn auto(&self) -> Result<Option<AutoFigures>, Error> {
        if self.kernel.is_some() {
            return Ok(None);
        }
        let body = self.ctl("debug_stat")?;
        let Some(line) = body.lines().find_map(|l| l.strip_prefix("auto_compact:")) else {
            return Ok(Some(AutoFigures::default()));
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        let get = |key: &str| -> u64 {
            words
                .windows(2)
                .find(|w| w[0] == key)
                .and_then(|w| w[1].parse().ok())
                .unwrap_or(0)
        };
        Ok(Some(AutoFigures {
            runs: get("runs"),
            pages_freed: get("pages_freed"),
            objs_moved: get("objs_moved"),
            objs_lower_bound: get("objs_lower_bound"),
            objs_moved_trim: get("objs_moved_trim"),
            cpu_s: get("cpu_us") as f64 / 1e6,
            longest_step_us: get("longest_step_us"),
        }))
    }

    /// The server process's CPU time so far, seconds.
    fn server_cpu(&self) -> Option<f64> {
        let pid = self.server.as_ref()?.id();
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let after = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = after.split_whitespace().collect();
        // Fields 14 and 15 of the whole line; `after` starts at field 3.
        let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        // SAFETY: sysconf has no preconditions; it only reads a constant.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (hz > 0).then(|| ticks as f64 / hz as f64)
    }

    /// Requests in flight on the block device `dev` (`/sys/block/NAME/inflight`:
    /// reads and writes, discards counted as writes).
    fn inflight(dev: &str) -> u64 {
        let name = dev.trim_start_matches("/dev/");
        fs::read_to_string(format!("/sys/block/{name}/inflight"))
            .map(|s| {
                s.split_whitespace()
                    .filter_map(|v| v.parse::<u64>().ok())
                    .sum()
            })
            .unwrap_or(0)
    }

    /// `sync`, then waits until the device has nothing in flight and
    /// mm_stat has not changed for `settle`. ext4 issues its discards from a
    /// worker after the commit `sync` waits for (since Linux 5.18), and
    /// through the loop device, FUSE and NBD a large discard can take
    /// seconds with mm_stat still, so an unchanged mm_stat alone is not
    /// enough.
    fn settle(&self, dev: &str, settle: Duration) -> Result<Vec<u64>, Error> {
        // SAFETY: sync has no preconditions.
        unsafe { libc::sync() };
        let mut last = self.mm_stat()?;
        let mut quiet_since = Instant::now();
        loop {
            interrupted()?;
            std::thread::sleep(Duration::from_millis(50));
            let now = self.mm_stat()?;
            if now != last || Self::inflight(dev) > 0 {
                last = now;
                quiet_since = Instant::now();
            } else if quiet_since.elapsed() >= settle {
                return Ok(now);
            }
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // A mount busy for a moment (udev, a late writer) is retried, then
        // detached lazily rather than left behind.
        let mnt = self.mnt.to_string_lossy().into_owned();
        for _ in 0..50 {
            if !mounted(&self.mnt) || quietly("umount", &[&mnt]) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if mounted(&self.mnt) {
            quietly("umount", &["-l", &mnt]);
        }
        if let Some(dev) = self.loop_dev.take() {
            quietly("losetup", &["-d", &dev]);
        }
        if let Some(mut fuse) = self.fuse.take() {
            let dir = self.fuse_dir.to_string_lossy().into_owned();
            if mounted(&self.fuse_dir) && !quietly("umount", &[&dir]) {
                quietly("umount", &["-l", &dir]);
            }
            stop(&mut fuse, 10);
        }
        if let Some(mut server) = self.server.take() {
            stop(&mut server, 30);
        }
        // Drops the kernel device: reset and hot_remove.
        self.kernel = None;
    }
}

/// The tree the steps remove from: the tar's single top directory, or the
/// mount itself.
fn tree_root(mnt: &Path) -> PathBuf {
    let entries: Vec<PathBuf> = fs::read_dir(mnt)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name() != "lost+found")
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    match entries.as_slice() {
        [one] if one.is_dir() => one.clone(),
        _ => mnt.to_path_buf(),
    }
}

fn row(step: &str, mm: &[u64], auto: Option<AutoFigures>) -> Row {
    let col = |i: usize| mm.get(i).copied().unwrap_or(0);
    let (orig, compr, used) = (col(0), col(1), col(2));
    Row {
        step: step.to_string(),
        orig_data_size: orig,
        compr_data_size: compr,
        mem_used_total: used,
        overhead_ratio: if compr == 0 {
            0.0
        } else {
            used as f64 / compr as f64 - 1.0
        },
        auto_compact: auto,
    }
}

/// One configuration, start to end; the rig is taken down when it returns,
/// whatever happened.
fn run_config(args: &UntarArgs, tar: &Path, config: Config) -> Result<Run, Error> {
    let mut rig = Rig::new()?;
    let mut made = Made {
        work_dir: rig.work.path().to_path_buf(),
        ..Made::default()
    };
    let dev = rig.start(config, args.size);
    made.loop_device = rig.loop_dev.clone();
    made.zram_device = rig.kernel.as_ref().map(KernelZram::id);
    let dev = dev?;
    let settle = Duration::from_millis(args.settle_ms);
    let log = rig.log("mkfs");
    run_tool(
        command("mkfs.ext4", &log)?.args(["-q", "-F", "-E", "nodiscard", &dev]),
        &log,
        "mkfs.ext4",
    )?;
    let log = rig.log("mount");
    let mnt = rig.mnt.clone();
    run_tool(
        command("mount", &log)?
            .args(["-o", "discard", &dev])
            .arg(&mnt),
        &log,
        "mount",
    )?;
    rig.settle(&dev, settle)?;
    let cpu0 = rig.server_cpu();
    let auto0 = rig.auto()?;
    let mut rows = Vec::new();
    let log = rig.log("tar");
    run_tool(
        command("tar", &log)?
            .arg("-C")
            .arg(&mnt)
            .arg("-xf")
            .arg(tar),
        &log,
        "tar",
    )?;
    rows.push(row("untar", &rig.settle(&dev, settle)?, rig.auto()?));
    progress(config, "untar", &rows);
    let root = tree_root(&mnt);
    for dir in &args.remove {
        let path = root.join(dir);
        if path.exists() {
            let log = rig.log("rm");
            run_tool(command("rm", &log)?.arg("-rf").arg(&path), &log, "rm")?;
        }
        let step = format!("rm {dir}");
        rows.push(row(&step, &rig.settle(&dev, settle)?, rig.auto()?));
        progress(config, &step, &rows);
    }
    let server_cpu_s = match (cpu0, rig.server_cpu()) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let auto = match (auto0, rig.auto()?) {
        (Some(a), Some(b)) => Some(AutoFigures {
            runs: b.runs - a.runs,
            pages_freed: b.pages_freed - a.pages_freed,
            objs_moved: b.objs_moved - a.objs_moved,
            objs_lower_bound: b.objs_lower_bound - a.objs_lower_bound,
            objs_moved_trim: b.objs_moved_trim - a.objs_moved_trim,
            cpu_s: b.cpu_s - a.cpu_s,
            longest_step_us: b.longest_step_us,
        }),
        _ => None,
    };
    rig.compact()?;
    rows.push(row(
        "manual compact",
        &rig.settle(&dev, settle)?,
        rig.auto()?,
    ));
    progress(config, "manual compact", &rows);
    drop(rig);
    Ok(Run {
        config,
        label: config.label(),
        rows,
        server_cpu_s,
        auto_compact: auto,
        made,
    })
}

/// A progress line on stderr, when it is a terminal.
fn progress(config: Config, step: &str, rows: &[Row]) {
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        if let Some(r) = rows.last() {
            eprintln!(
                "{}: {step}: overhead {:.2}%",
                config.label(),
                r.overhead_ratio * 100.0
            );
        }
    }
}

fn pct(x: f64) -> String {
    format!("{:.2}%", x * 100.0)
}

fn table(report: &Report) -> String {
    let mut out = format!(
        "tar: {}\nremoved in order: {}\nafter each step: sync, then mm_stat unchanged for the settling time\n",
        report.tar.display(),
        report.removed.join(" ")
    );
    for r in &report.runs {
        out.push_str(&format!(
            "\n* {}\n{:>22} {:>15} {:>15} {:>15} {:>14}\n",
            r.label,
            "step",
            "orig_data_size",
            "compr_data_size",
            "mem_used_total",
            "overhead_ratio"
        ));
        for row in &r.rows {
            out.push_str(&format!(
                "{:>22} {:>15} {:>15} {:>15} {:>14}\n",
                row.step,
                row.orig_data_size,
                row.compr_data_size,
                row.mem_used_total,
                pct(row.overhead_ratio)
            ));
        }
    }
    if let Some(first) = report.runs.first() {
        out.push_str("\noverhead ratio (mem_used_total / compr_data_size - 1):\n");
        out.push_str(&format!("{:>22}", "step"));
        for r in &report.runs {
            out.push_str(&format!(" | {:>34}", r.label));
        }
        out.push('\n');
        for (i, row) in first.rows.iter().enumerate() {
            out.push_str(&format!("{:>22}", row.step));
            for r in &report.runs {
                let v = r.rows.get(i).map(|x| pct(x.overhead_ratio));
                out.push_str(&format!(" | {:>34}", v.unwrap_or_default()));
            }
            out.push('\n');
        }
    }
    // Every configuration stores the same files: orig_data_size differing
    // by more than 2% from the first one's means discards had not all
    // arrived when a step's figures were read.
    if let Some(first) = report.runs.first() {
        for r in &report.runs[1..] {
            let off: Vec<&str> = r
                .rows
                .iter()
                .zip(&first.rows)
                .filter(|(x, y)| {
                    let (a, b) = (x.orig_data_size as f64, y.orig_data_size as f64);
                    (a - b).abs() > 0.02 * b.max(1.0)
                })
                .map(|(x, _)| x.step.as_str())
                .collect();
            if !off.is_empty() {
                out.push_str(&format!(
                    "warning: {}: orig_data_size differs from {}'s by more than 2% at {} (discards still arriving?)\n",
                    r.label,
                    first.label,
                    off.join(", ")
                ));
            }
        }
    }
    for r in &report.runs {
        let (Some(a), Some(cpu)) = (r.auto_compact, r.server_cpu_s) else {
            continue;
        };
        if a.runs == 0 && r.config != Config::Default {
            continue;
        }
        let share = if cpu > 0.0 { a.cpu_s / cpu } else { 0.0 };
        let whole = a.objs_moved - a.objs_moved_trim;
        out.push_str(&format!(
            "\n{}: automatic compaction from the untar to the last removal: CPU {:.3} s of the server's {:.3} s ({}; target at most {}); {} runs, {} pages freed, longest step {} us\n  objects moved {}: {} to free whole zspages against a lower bound of {}{}, and {} by the trim\n",
            r.label,
            a.cpu_s,
            cpu,
            pct(share),
            pct(TARGET_CPU_SHARE),
            a.runs,
            a.pages_freed,
            a.longest_step_us,
            a.objs_moved,
            whole,
            a.objs_lower_bound,
            if a.objs_lower_bound > 0 {
                format!(" ({:.3}x)", whole as f64 / a.objs_lower_bound as f64)
            } else {
                String::new()
            },
            a.objs_moved_trim,
        ));
        out.push_str(
            "  (lower bound: before each step, the live objects of the class's emptiest zspages, as many as the step could free; the trim gathers a class's holes at the end of one zspage to give back its pages, beyond that bound)\n",
        );
        if r.config == Config::Default {
            let steps = &r.rows[..r.rows.len().saturating_sub(1)];
            if let Some(worst) = steps
                .iter()
                .max_by(|x, y| x.overhead_ratio.total_cmp(&y.overhead_ratio))
            {
                out.push_str(&format!(
                    "  overhead after every step at most {} ({}; target within {}): {}\n",
                    pct(worst.overhead_ratio),
                    worst.step,
                    pct(TARGET_RATIO),
                    if worst.overhead_ratio <= TARGET_RATIO {
                        "met"
                    } else {
                        "not met"
                    }
                ));
            }
        }
    }
    for s in &report.skipped {
        out.push_str(&format!("{s}\n"));
    }
    if let Some((svg, png)) = &report.plot {
        out.push_str(&format!("plot: {} {}\n", svg.display(), png.display()));
    }
    out
}

/// Runs `zmem exp untar`.
pub fn run(args: &UntarArgs) -> Result<(), Error> {
    if let Some(what) = missing() {
        let line = format!("exp untar not run: it needs {what}");
        return match args.format.get() {
            Format::Json => write_json(&serde_json::json!({ "skipped": line })),
            Format::Table => write_stdout(&format!("{line}\n")),
        };
    }
    let tar = corpus::linux_tar(&args.tar)?;
    let _signals = SignalGuard::install().map_err(|e| failed("signal handlers", e))?;
    let mut runs = Vec::new();
    let mut skipped = Vec::new();
    for &config in &args.config {
        if config == Config::Kernel {
            // Probe first, so a missing kernel zram is a skip, not a
            // failure (the probe device is removed at once).
            if let Err(why) = KernelZram::create("lz4", args.size) {
                skipped.push(format!("kernel zram not run: {why}"));
                continue;
            }
        }
        runs.push(run_config(args, &tar, config)?);
    }
    let plot = super::line_chart_unless(
        args.no_plot || runs.is_empty(),
        &args.plot,
        [
            "Class merging on ext4: overhead ratio after each step",
            "step (0: untar, then each removal, last: manual compact)",
            "mem_used_total / compr_data_size - 1, %",
        ],
        || {
            runs.iter()
                .map(|r| Series {
                    name: r.label.to_string(),
                    points: r
                        .rows
                        .iter()
                        .enumerate()
                        .map(|(k, x)| (k as f64, x.overhead_ratio * 100.0))
                        .collect(),
                })
                .collect()
        },
    )?;
    let report = Report {
        tar,
        removed: args.remove.clone(),
        runs,
        skipped,
        plot,
    };
    match args.format.get() {
        Format::Json => write_json(&report),
        Format::Table => write_stdout(&table(&report)),
    }
}
