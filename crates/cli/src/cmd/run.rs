//! `zmem run`: runs an unmodified, dynamically linked program with its
//! large anonymous memory in a compressed region, through the preload
//! library (`libzmem_preload.so`, the `preload` crate), and prints the
//! region's statistics when it exits.
//!
//! Owns the checks before the program starts (the program one
//! `LD_PRELOAD` can reach, a userfaultfd that serves the kernel's faults),
//! the place the program's loader finds the library (the copy built into
//! this binary, in a sealed memfd, or `ZMEM_PRELOAD`), the environment the
//! library reads, the wait and the report. It never links the preload
//! library (its interposed `malloc` would become zmem's own): the bytes it
//! carries are the cdylib `build.rs` builds.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use region::UffdOpen;
use serde_json::Value;
use zcomp::Algorithm;

use crate::error::CliError;

/// The environment the preload library reads (its `settings` module).
const ENV_LIMIT: &str = "ZMEM_RUN_LIMIT";
const ENV_SPAN: &str = "ZMEM_RUN_SPAN";
const ENV_COMP: &str = "ZMEM_RUN_COMP";
const ENV_PARAMS: &str = "ZMEM_RUN_ALGORITHM_PARAMS";
const ENV_MIN: &str = "ZMEM_RUN_MIN";
const ENV_STATS_DIR: &str = "ZMEM_RUN_STATS_DIR";
const ENV_HANDLER_POLL: &str = "ZMEM_RUN_HANDLER_POLL_US";
const ENV_HANDLER_CPU: &str = "ZMEM_RUN_HANDLER_CPU";
const ENV_LIMIT_COVERS: &str = "ZMEM_RUN_LIMIT_COVERS";
const ENV_SOFT_DIRTY: &str = "ZMEM_RUN_SOFT_DIRTY";
const ENV_PID: &str = "ZMEM_RUN_PID";
const ENV_VERBOSE: &str = "ZMEM_RUN_VERBOSE";
/// A preload library to use instead of the one built into `zmem`.
const ENV_PRELOAD: &str = "ZMEM_PRELOAD";
const LIBRARY: &str = "libzmem_preload.so";

/// Arguments of `zmem run`.
#[derive(Args, Debug)]
#[command(
    after_help = "The limit is per process: a program the command runs gets a region of \
its own. It needs a userfaultfd that serves the kernel's faults (root, access to \
/dev/userfaultfd, or vm.unprivileged_userfaultfd=1). It cannot serve static binaries or \
set-user-ID programs (LD_PRELOAD does not reach them); memory a program maps with MAP_FIXED, \
MAP_SHARED or file mappings, its thread stacks and glibc's own heap below --min-size stay \
ordinary memory. The preload library is built into zmem; ZMEM_PRELOAD=PATH uses another copy \
of libzmem_preload.so."
)]
pub struct RunArgs {
    /// Bytes of the program's large memory kept uncompressed (the rest
    /// lives compressed) [default: a quarter of the machine's memory].
    #[arg(long, value_name = "SIZE", value_parser = recipe::flags::size(4096, 1 << 50))]
    limit: Option<u64>,
    /// What the limit covers: `region`, the region's uncompressed pages,
    /// or `process`, each process's memory except the compressed pool (as
    /// a memory cgroup's memory.max does with the kernel's zram as swap;
    /// the region keeps what the rest leaves, at least a quarter of the
    /// limit; the command's own process counts with its first child).
    #[arg(long, value_name = "WHAT", default_value = "region", value_parser = ["region", "process"])]
    limit_covers: String,
    /// The compressor (the kernel's names: lz4, lzo-rle, zstd, ...).
    #[arg(long, value_name = "ALG", default_value = "lz4", value_parser = recipe::spec::parse_comp)]
    comp: Algorithm,
    /// The compressor's settings, as zram's `algorithm_params` takes them:
    /// 'level=N dict=FILE' (a zstd dictionary, e.g. from `zstd --train` on
    /// 4 KiB pieces of data like the program's).
    #[arg(long, value_name = "PARAMS")]
    algorithm_params: Option<String>,
    /// Address space of the region: the most large memory it serves; past
    /// it, requests get ordinary memory [default: the machine's memory, at
    /// most 16G].
    #[arg(long, value_name = "SIZE", value_parser = recipe::flags::size(1 << 20, 1 << 46))]
    span: Option<u64>,
    /// The smallest mapping or allocation served from the region.
    #[arg(long, value_name = "SIZE", default_value = "64K", value_parser = recipe::flags::size(4096, 1 << 30))]
    min_size: u64,
    /// Microseconds each process's fault handler keeps polling for the
    /// next fault before it sleeps (0 to 10000; 0: it sleeps at once). A
    /// fault that finds it awake is served sooner; the cost is up to this
    /// much CPU after each burst of faults [default: twice what waking a
    /// sleeping thread costs on this machine, measured as each process
    /// starts, from 30 to 1000].
    #[arg(long, value_name = "US", value_parser = recipe::flags::whole::<u64>(0, 10_000))]
    handler_poll: Option<u64>,
    /// Where each process's fault handler runs: `any` leaves it to the
    /// scheduler; `follow` moves it onto the CPU of the thread that sends
    /// it three in four of its faults (at a low priority there, so that
    /// thread's wake-ups stay on its CPU), while no other work keeps the
    /// machine busy.
    #[arg(long, value_name = "WHERE", default_value = "any", value_parser = ["any", "follow"])]
    handler_cpu: String,
    /// Whether each process's region sees the program's writes through the
    /// kernel's soft-dirty bits as well as its faults, to choose what to
    /// compress (`on` where the kernel has them: CONFIG_MEM_SOFT_DIRTY).
    #[arg(long, value_name = "ON_OFF", default_value = "on", value_parser = ["on", "off"])]
    soft_dirty: String,
    /// Also write every process's statistics to FILE (a JSON array, the
    /// command's own process first).
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
    /// Print no statistics at exit.
    #[arg(long, short)]
    quiet: bool,
    /// Let the preload library write its messages (a process that runs
    /// without a region, and why) to the programs' standard error too;
    /// without it they reach the summary and --stats-json only.
    #[arg(long, short)]
    verbose: bool,
    /// The command and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<OsString>,
}

/// The machine's memory in bytes (`MemTotal`).
fn mem_total() -> Result<u64, CliError> {
    let text = std::fs::read_to_string("/proc/meminfo")
        .map_err(|e| CliError::Failed(format!("reading /proc/meminfo: {e}")))?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb << 10)
        .ok_or_else(|| CliError::Failed("no MemTotal in /proc/meminfo".into()))
}

/// The preload library built with this binary (`build.rs` compiles the
/// preload crate for it).
static EMBEDDED: &[u8] = include_bytes!(env!("ZMEM_PRELOAD_SO"));

/// Where the program's loader finds the preload library, and the
/// descriptor that keeps that place alive while zmem waits.
struct Library {
    path: PathBuf,
    _keep: Option<OwnedFd>,
}

/// The preload library: `$ZMEM_PRELOAD` if set, else the one built into
/// this binary, in a sealed memfd that the program's loader opens as
/// `/proc/PID/fd/N` (PID: this process, which outlives the program); where
/// no memfd can be made, a file in `dir` (this run's private directory).
fn library(dir: &Path) -> Result<Library, CliError> {
    if let Some(p) = std::env::var_os(ENV_PRELOAD) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(Library {
                path: p.canonicalize().unwrap_or(p),
                _keep: None,
            })
        } else {
            Err(CliError::Failed(format!(
                "{ENV_PRELOAD}={} is not a file",
                p.display()
            )))
        };
    }
    let memfd = sealed_memfd(EMBEDDED).and_then(|fd| {
        let path = PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            fd.as_raw_fd()
        ));
        // The path the program will open, opened once here.
        std::fs::File::open(&path).map(|_| Library {
            path,
            _keep: Some(fd),
        })
    });
    let memfd_err = match memfd {
        Ok(lib) => return Ok(lib),
        Err(e) => e,
    };
    let path = dir.join(LIBRARY);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o500)
        .open(&path)
        .and_then(|mut f| f.write_all(EMBEDDED))
        .map_err(|e| {
            CliError::Failed(format!(
                "no place for the preload library (a memfd: {memfd_err}; {}: {e}); set \
                 {ENV_PRELOAD} to a copy of {LIBRARY}",
                path.display()
            ))
        })?;
    Ok(Library { path, _keep: None })
}

/// `bytes` in a new memfd, sealed against any change (close-on-exec: the
/// program reaches it by its /proc path only).
fn sealed_memfd(bytes: &[u8]) -> std::io::Result<OwnedFd> {
    let name = c"libzmem_preload.so";
    let base = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // Not executable as a program (the loader only maps it), which also
    // keeps a kernel with memfd_noexec from warning; kernels before 6.3
    // know no such flag and refuse it.
    // SAFETY: a NUL-terminated name and flags; the result is checked.
    let mut fd = unsafe { libc::memfd_create(name.as_ptr(), base | libc::MFD_NOEXEC_SEAL) };
    if fd < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // SAFETY: as above.
        fd = unsafe { libc::memfd_create(name.as_ptr(), base) };
    }
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just made and owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on our own descriptor; no writable mapping of it exists.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file.into())
}

/// `cmd` as `execvp` would find it.
fn resolve(cmd: &OsStr) -> Result<PathBuf, CliError> {
    let p = Path::new(cmd);
    if p.components().count() > 1 || cmd.as_encoded_bytes().contains(&b'/') {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(CliError::Failed(format!("{}: no such file", p.display())))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| {
            c.metadata()
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
        .ok_or_else(|| CliError::Failed(format!("{}: command not found", p.display())))
}

/// Refuses a program the preload library cannot reach: a static binary,
/// a set-user-ID or set-group-ID one, a script whose interpreter is one of
/// those. Follows `#!` lines (at most four deep).
fn check_program(path: &Path, depth: u32) -> Result<(), CliError> {
    let refuse = |why: &str| CliError::Failed(format!("{}: {why}", path.display()));
    let meta = path.metadata().map_err(|e| refuse(&e.to_string()))?;
    if meta.permissions().mode() & 0o6000 != 0 {
        return Err(refuse(
            "a set-user-ID or set-group-ID program: LD_PRELOAD does not reach it",
        ));
    }
    let mut head = Vec::with_capacity(4096);
    std::fs::File::open(path)
        .and_then(|f| f.take(256 * 1024).read_to_end(&mut head))
        .map_err(|e| refuse(&e.to_string()))?;
    if let Some(line) = head.strip_prefix(b"#!") {
        let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
        let text = String::from_utf8_lossy(line);
        let interp = text
            .split_whitespace()
            .next()
            .ok_or_else(|| refuse("a #! line without an interpreter"))?;
        if depth >= 4 {
            return Err(refuse("#! interpreters nested too deep"));
        }
        return check_program(Path::new(interp), depth + 1);
    }
    match elf_is_dynamic(&head) {
        Some(true) => Ok(()),
        Some(false) => Err(refuse(
            "a static binary: LD_PRELOAD does not reach it (it has no program interpreter)",
        )),
        None => Err(refuse("not an ELF program or a #! script")),
    }
}

/// Whether a 64-bit little-endian ELF file (its first bytes) has a program
/// interpreter (`PT_INTERP`): `None` if it is not one.
fn elf_is_dynamic(b: &[u8]) -> Option<bool> {
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
        return None;
    }
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(b[32..40].try_into().ok()?) as usize;
    let (phentsize, phnum) = (u16_at(54), u16_at(56));
    for i in 0..phnum {
        let o = phoff.checked_add(i.checked_mul(phentsize)?)?;
        let t = b.get(o..o + 4)?;
        if u32::from_le_bytes(t.try_into().ok()?) == 3 {
            return Some(true);
        }
    }
    Some(false)
}

/// Refuses to start when no userfaultfd can serve the kernel's faults: a
/// system call on a compressed page would fail with EFAULT.
fn check_userfaultfd() -> Result<(), CliError> {
    let mut why = Vec::new();
    for how in [UffdOpen::Device, UffdOpen::Syscall] {
        match region::probe_userfaultfd(how) {
            Ok(_) => return Ok(()),
            Err(e) => why.push(e.to_string()),
        }
    }
    Err(CliError::Failed(format!(
        "no userfaultfd that serves the kernel's faults ({}): run as root, give access to \
         /dev/userfaultfd, or set vm.unprivileged_userfaultfd=1",
        why.join("; ")
    )))
}

/// A fresh directory for the processes' statistics.
fn stats_dir() -> Result<PathBuf, CliError> {
    let base = std::env::temp_dir();
    for n in 0..100u32 {
        let d = base.join(format!("zmem-run-{}-{n}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(CliError::Failed(format!("creating {}: {e}", d.display())));
            }
        }
    }
    Err(CliError::Failed("no fresh directory for statistics".into()))
}

/// Runs the command; its exit code is the program's (128 + the signal that
/// ended it).
pub fn run(args: &RunArgs) -> Result<ExitCode, CliError> {
    let total = mem_total()?;
    let limit = args.limit.unwrap_or(total / 4).max(4096);
    let span = args.span.unwrap_or(total.min(16 << 30));
    if limit > span {
        return Err(CliError::Usage(format!(
            "--limit {} is above the region's span {} (--span)",
            recipe::size::words(limit),
            recipe::size::words(span)
        )));
    }
    let params = args.algorithm_params.as_deref().unwrap_or("");
    // Checked here, dictionary read and all: the library can only report a
    // setting it cannot take, not refuse to run.
    zcomp::Compressor::with_params(args.comp, params)
        .map_err(|e| CliError::Usage(format!("--algorithm-params '{params}': {e}")))?;
    let program = resolve(&args.command[0])?;
    check_program(&program, 0)?;
    check_userfaultfd()?;
    let dir = stats_dir()?;
    let library = library(&dir).inspect_err(|_| {
        let _ = std::fs::remove_dir_all(&dir);
    })?;
    let mut preload = library.path.clone().into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let started = Instant::now();
    let mut command = std::process::Command::new(&program);
    match args.handler_poll {
        Some(us) => command.env(ENV_HANDLER_POLL, us.to_string()),
        None => command.env_remove(ENV_HANDLER_POLL),
    };
    if args.verbose {
        command.env(ENV_VERBOSE, "1");
    } else {
        command.env_remove(ENV_VERBOSE);
    }
    let spawned = command
        .arg0(&args.command[0])
        .args(&args.command[1..])
        .env("LD_PRELOAD", &preload)
        .env(ENV_LIMIT, limit.to_string())
        .env(ENV_SPAN, span.to_string())
        .env(ENV_COMP, args.comp.name())
        .env(ENV_PARAMS, params)
        .env(ENV_MIN, args.min_size.to_string())
        .env(ENV_HANDLER_CPU, &args.handler_cpu)
        .env(ENV_LIMIT_COVERS, &args.limit_covers)
        .env(ENV_SOFT_DIRTY, &args.soft_dirty)
        .env(ENV_PID, std::process::id().to_string())
        .env(ENV_STATS_DIR, &dir)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(CliError::Failed(format!("{}: {e}", program.display())));
        }
    };
    // The terminal's interrupt reaches the program; zmem waits for it.
    // SAFETY: sets this process's dispositions to ignore; no handler runs.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
    // What zmem's own set-up allocated and freed (the program's ELF read,
    // the compressor's check) goes back to the OS: zmem waits for the
    // program in whatever memory cgroup runs them both, and counts there.
    serve::trim::release_free_heap();
    // The program is waited for on a thread of its own, so the watchdog's
    // logs are shown while it runs and its exit is seen at once.
    let child_pid = child.id();
    let (exited, exit) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = exited.send(child.wait());
    });
    let mut logs = Logs::default();
    let status = loop {
        match exit.recv_timeout(std::time::Duration::from_secs(1)) {
            Ok(waited) => {
                break waited
                    .map_err(|e| CliError::Failed(format!("waiting for the program: {e}")))?
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => logs.show_new(&dir),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(CliError::Failed(
                    "waiting for the program: no answer".into(),
                ))
            }
        }
    };
    logs.show_new(&dir);
    let secs = started.elapsed().as_secs_f64();
    let stats = collect(&dir, child_pid);
    let _ = std::fs::remove_dir_all(&dir);
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    };
    if !args.quiet {
        eprint!(
            "{}",
            report(&args.command[0], child_pid, code, secs, &stats)
        );
    }
    if let Some(path) = &args.stats_json {
        let text = serde_json::to_string_pretty(&Value::Array(stats)).unwrap_or_default();
        std::fs::write(path, text + "\n")
            .map_err(|e| CliError::Failed(format!("writing {}: {e}", path.display())))?;
    }
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// The watchdog's logs (`PID.log` in the statistics directory, one line per
/// fault a region's handler saw waiting too long), shown on zmem's standard
/// error as they grow, while the program runs: a program that hangs on its
/// region says why while it hangs.
#[derive(Default)]
struct Logs {
    /// How much of each log has been shown.
    shown: std::collections::HashMap<PathBuf, usize>,
}

impl Logs {
    fn show_new(&mut self, dir: &Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for path in entries.flatten().map(|e| e.path()) {
            if path.extension().is_none_or(|x| x != "log") {
                continue;
            }
            let Ok(text) = std::fs::read(&path) else {
                continue;
            };
            let shown = self.shown.entry(path).or_insert(0);
            // Whole lines only: the rest comes with the next look.
            let end = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            if end > *shown {
                eprint!("{}", String::from_utf8_lossy(&text[*shown..end]));
                *shown = end;
            }
        }
    }
}

/// Every process's statistics, the command's own (`pid`) first.
fn collect(dir: &Path, pid: u32) -> Vec<Value> {
    let mut all: Vec<Value> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|t| serde_json::from_str(&t).ok())
        .collect();
    all.sort_by_key(|v| (v["pid"].as_u64() != Some(pid as u64), v["pid"].as_u64()));
    all
}

fn mib(v: &Value) -> String {
    format!("{:.1} MiB", v.as_f64().unwrap_or(0.0) / (1u64 << 20) as f64)
}

/// The summary printed at exit (standard error).
fn report(cmd: &OsStr, pid: u32, code: i32, secs: f64, stats: &[Value]) -> String {
    let name = cmd.to_string_lossy();
    let mut out = format!("zmem run: {name} (pid {pid}) exited with {code} after {secs:.2} s\n");
    let own = stats.iter().find(|v| v["pid"].as_u64() == Some(pid as u64));
    let Some(s) = own else {
        out.push_str(
            "  no statistics from it: it ended without running exit handlers (a signal, _exit) \
             or never loaded the library\n",
        );
        return out + &others(stats, pid);
    };
    if let Some(why) = s["error"].as_str() {
        out.push_str(&format!("  {why}\n"));
        return out + &others(stats, pid);
    }
    let r = &s["region"];
    let page = r["page_size"].as_u64().unwrap_or(4096) as f64;
    let pages = |v: &Value| Value::from(v.as_f64().unwrap_or(0.0) * page);
    let f = &r["faults"];
    let l = &r["fault_latency"];
    let us = |v: &Value| v.as_f64().unwrap_or(0.0) / 1000.0;
    out.push_str(&format!(
        "  region: limit {}, span {}; handed out at most {} ({} mappings, {} allocations, {} moved, {} refused: span full)\n",
        mib(&pages(&r["resident_limit_pages"])),
        mib(&s["span_bytes"]),
        mib(&s["handed_out_peak_bytes"]),
        s["served"]["mmaps"],
        s["served"]["allocs"],
        s["served"]["moves"],
        s["served"]["span_full"],
    ));
    out.push_str(&format!(
        "  compressed: mem_used_max {}; at exit {} resident, {} stored in {}\n",
        mib(&r["mm_stat"]["mem_used_max"]),
        mib(&pages(&r["resident_pages"])),
        mib(&pages(&r["stored_pages"])),
        mib(&r["mm_stat"]["mem_used_total"]),
    ));
    out.push_str(&format!(
        "  faults: {} from the store, {} from probation, {} zero; {} waited for room{}; \
         service p50 <= {:.1} us, p99 <= {:.1} us (bounds of power-of-two buckets), max {:.1} us\n",
        f["missing_store"],
        f["missing_probation"],
        f["missing_zero"],
        f["deferred"],
        match f["stuck"].as_u64() {
            Some(n) if n > 0 => format!(", {n} past the watchdog's threshold (reported above)"),
            _ => String::new(),
        },
        us(&l["p50_ns"]),
        us(&l["p99_ns"]),
        us(&l["max_ns"]),
    ));
    let e = &r["evictions"];
    let refs = if r["soft_dirty"].as_bool() == Some(true) {
        format!(
            "faults and writes (soft-dirty: {} pages spared for a write, {} clears taking {:.1} ms)",
            e["written_spared"],
            e["soft_dirty_epochs"],
            e["soft_dirty_us"].as_f64().unwrap_or(0.0) / 1000.0
        )
    } else {
        "faults only (soft-dirty off, or not in this kernel)".to_string()
    };
    out.push_str(&format!(
        "  evicted: {} at the limit, {} past the age threshold; the clock saw {refs}\n",
        e["limit"], e["age"],
    ));
    out + &others(stats, pid)
}

/// The summary's line on the command's other processes: how many had
/// regions of their own, how many ran without one, and the first reason.
fn others(stats: &[Value], pid: u32) -> String {
    let rest = || {
        stats
            .iter()
            .filter(|v| v["pid"].as_u64() != Some(pid as u64))
    };
    let without: Vec<&str> = rest().filter_map(|v| v["error"].as_str()).collect();
    let with = rest().count() - without.len();
    let mut out = String::new();
    if with > 0 {
        out.push_str(&format!(
            "  {with} more process(es) had regions of their own (--stats-json has them)\n"
        ));
    }
    if let Some(first) = without.first() {
        out.push_str(&format!(
            "  {} more process(es) ran without one; the first: {first}\n",
            without.len()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_is_dynamic_and_a_script_is_followed() {
        let exe = std::env::current_exe().unwrap();
        let mut head = Vec::new();
        std::fs::File::open(&exe)
            .unwrap()
            .take(256 * 1024)
            .read_to_end(&mut head)
            .unwrap();
        assert_eq!(elf_is_dynamic(&head), Some(true));
        assert_eq!(elf_is_dynamic(b"#!/bin/sh\n"), None);
        // A 64-bit ELF header with no program headers: static.
        let mut fake = vec![0u8; 64];
        fake[..6].copy_from_slice(b"\x7fELF\x02\x01");
        assert_eq!(elf_is_dynamic(&fake), Some(false));
        assert!(check_program(Path::new("/bin/sh"), 0).is_ok());
    }
}
