//! The anonymous memory of a whole machine, of one cgroup or of chosen
//! processes, as zram would receive it when the kernel swaps: scanned page
//! table by page table, then sampled.
//!
//! `scan` walks `/proc` (or a cgroup's `cgroup.procs`, or the pids given)
//! and, for every user process but this one, reads which pages of its
//! private anonymous mappings are in RAM or in swap (`/proc/PID/pagemap`).
//! A page mapped by several processes (shared after `fork`, or the shared
//! zero page) is counted once, by its page frame, since the kernel swaps
//! it once. Kernel threads have no such memory and are left out. What it
//! keeps is the list of runs of counted pages, 16 bytes a run: the pages
//! themselves are read only when sampled (`sample`) or, for `zmem advise
//! --verify`, all of them once (`for_each_chunk`).
//!
//! Each process weighs in the sample by its counted pages (its anonymous
//! resident size plus what it has in swap): the sample takes runs of
//! [`RUN_PAGES`] pages at even steps over all counted pages, from a seeded
//! random start (systematic sampling, which spreads the sample over every
//! process in proportion to its size).
//!
//! This module reads other processes' memory and page tables; it writes
//! nothing, and knows nothing of stores or compressors.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use recipe::Error;
use serde::Serialize;

use crate::advise::{Sample, RUN_PAGES};
use crate::process_memory::{anonymous_mapping, system_page_size as page_size};
use crate::rng::Rng;

/// `/proc/PID/pagemap`: the page is present in RAM.
const PM_PRESENT: u64 = 1 << 63;
/// `/proc/PID/pagemap`: the page is in swap.
const PM_SWAPPED: u64 = 1 << 62;
/// `/proc/PID/pagemap`: the page frame number (bits 0-54, root only).
const PM_PFN: u64 = (1 << 55) - 1;
/// `/proc/PID/stat` flags: the task is a kernel thread.
const PF_KTHREAD: u64 = 0x0020_0000;
/// Pagemap entries read at once.
const CHUNK_PAGES: u64 = 1024;

/// Whose memory to scan.
#[derive(Clone, Debug)]
pub enum Scope {
    /// Every process (root only).
    System,
    /// The processes of a cgroup and its descendants (a path under
    /// `/sys/fs/cgroup`, absolute or relative to it).
    Cgroup(PathBuf),
    /// These processes.
    Pids(Vec<u32>),
}

impl Scope {
    /// `the whole machine`, `cgroup /sys/fs/cgroup/user.slice`, `pids 12 34`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Scope::System => "the whole machine".into(),
            Scope::Cgroup(p) => format!("cgroup {}", p.display()),
            Scope::Pids(p) => format!(
                "pid{} {}",
                if p.len() > 1 { "s" } else { "" },
                p.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
            ),
        }
    }
}

/// Consecutive counted pages of one process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    addr: u64,
    pages: u64,
}

/// One process's counted memory.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ProcessPages {
    /// Its pid.
    pub pid: u32,
    /// Its name (`/proc/PID/comm`).
    pub comm: String,
    /// Pages counted: private anonymous, in RAM or in swap, not already
    /// counted for another process.
    pub pages: u64,
    /// Of those, pages in swap.
    pub swapped: u64,
    /// Pages it maps that another process's count already holds.
    pub shared: u64,
    /// Pages of it in the sample.
    pub sampled: u64,
    #[serde(skip)]
    runs: Vec<Run>,
}

/// A process the scan or the sample could not read, and why.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Skipped {
    /// Its pid.
    pub pid: u32,
    /// Its name, where it could still be read.
    pub comm: String,
    /// Why, in words.
    pub reason: String,
}

/// What [`scan`] found.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Scan {
    /// Whose memory, in words.
    pub scope: String,
    /// The page size.
    pub page_size: u64,
    /// Processes whose pages are counted, most pages first.
    pub processes: Vec<ProcessPages>,
    /// Processes left out for a reason other than being a kernel thread or
    /// this process.
    pub skipped: Vec<Skipped>,
    /// Kernel threads passed over (they own no user memory).
    pub kernel_threads: u64,
    /// Pages counted, all processes together.
    pub pages: u64,
    /// Pages mapped by more than one process, counted once.
    pub shared_pages: u64,
    /// Seconds the scan took.
    pub seconds: f64,
}

impl Scan {
    /// The pids whose pages are counted.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(|p| p.pid).collect()
    }

    /// One line: `read 1,234,567 pages (4.7 GiB) of 212 processes ...`.
    pub(crate) fn summary(&self) -> String {
        let mut s = format!(
            "{}: {} pages ({:.1} MiB) of private anonymous memory in {} processes",
            self.scope,
            self.pages,
            (self.pages * self.page_size) as f64 / (1u64 << 20) as f64,
            self.processes.len()
        );
        if self.shared_pages > 0 {
            s.push_str(&format!(
                " ({} pages mapped by several processes counted once)",
                self.shared_pages
            ));
        }
        if self.kernel_threads > 0 {
            s.push_str(&format!(
                "; {} kernel threads and this process left out",
                self.kernel_threads
            ));
        }
        if !self.skipped.is_empty() {
            s.push_str(&format!("; {} not read:", self.skipped.len()));
            for k in self.skipped.iter().take(8) {
                s.push_str(&format!(" {} ({}): {};", k.pid, k.comm, k.reason));
            }
            if self.skipped.len() > 8 {
                s.push_str(" ...");
            }
        }
        s
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and only reads process state.
    unsafe { libc::geteuid() == 0 }
}

/// Every pid of a cgroup and its descendants.
fn cgroup_pids(path: &Path) -> Result<Vec<u32>, Error> {
    let root = if path.is_absolute() {
        path.to_path_buf()
    } else {
        Path::new("/sys/fs/cgroup").join(path)
    };
    if !root.join("cgroup.procs").is_file() {
        return Err(Error::Usage(format!(
            "--cgroup {}: not a cgroup ({} has no cgroup.procs)",
            path.display(),
            root.display()
        )));
    }
    let mut pids = Vec::new();
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
    pids.sort_unstable();
    pids.dedup();
    Ok(pids)
}

fn all_pids() -> Result<Vec<u32>, Error> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .map_err(|e| Error::Failed(format!("reading /proc: {e}")))?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

/// `(comm, flags)` from `/proc/PID/stat`; `None` when the process is gone.
fn stat(pid: u32) -> Option<(String, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name is in parentheses and may hold spaces and parentheses: the
    // fields resume after the last ')'. flags is the 9th field, the 7th
    // after the name.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let flags = text[close + 1..].split_whitespace().nth(6)?.parse().ok()?;
    Some((comm, flags))
}

/// Page frames already counted, one bit each.
#[derive(Default)]
struct FrameSet {
    bits: Vec<u64>,
}

impl FrameSet {
    /// Marks `pfn`; true when it was not marked before.
    fn insert(&mut self, pfn: u64) -> bool {
        let (word, bit) = ((pfn / 64) as usize, pfn % 64);
        if word >= self.bits.len() {
            self.bits.resize(word + 1 + word / 8, 0);
        }
        let fresh = self.bits[word] & (1 << bit) == 0;
        self.bits[word] |= 1 << bit;
        fresh
    }
}

/// Why a process could not be read, in words.
fn reason(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::NotFound => "exited before it was read".into(),
        // SAFETY: geteuid has no arguments and cannot fail.
        ErrorKind::PermissionDenied if unsafe { libc::geteuid() } == 0 => {
            "permission denied even to root (a process of another user namespace, or one the \
             kernel's lockdown or a security module keeps its page tables from); its memory is \
             left out of the sizes"
                .into()
        }
        ErrorKind::PermissionDenied => {
            "permission denied (needs ptrace access or CAP_SYS_PTRACE)".into()
        }
        _ if e.raw_os_error() == Some(libc::ESRCH) => "exited while it was read".into(),
        _ => e.to_string(),
    }
}

/// One process's counted pages, or why it could not be read.
fn scan_process(
    pid: u32,
    comm: String,
    ps: u64,
    frames: &mut FrameSet,
) -> Result<ProcessPages, std::io::Error> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let pagemap = File::open(format!("/proc/{pid}/pagemap"))?;
    let mut out = ProcessPages {
        pid,
        comm,
        pages: 0,
        swapped: 0,
        shared: 0,
        sampled: 0,
        runs: Vec::new(),
    };
    let mut entries = vec![0u8; (CHUNK_PAGES * 8) as usize];
    for (start, end, _) in maps.lines().filter_map(anonymous_mapping) {
        let mut addr = start;
        while addr < end {
            let n = ((end - addr) / ps).min(CHUNK_PAGES);
            let want = &mut entries[..(n * 8) as usize];
            let got = pagemap.read_at(want, addr / ps * 8)? / 8;
            if got == 0 {
                break;
            }
            for k in 0..got as u64 {
                let i = (k * 8) as usize;
                let e = u64::from_le_bytes(want[i..i + 8].try_into().expect("eight bytes"));
                let page = addr + k * ps;
                if e & PM_PRESENT != 0 {
                    let pfn = e & PM_PFN;
                    // Without CAP_SYS_ADMIN the frame reads as 0: then no
                    // page can be recognised as shared, and each counts.
                    if pfn != 0 && !frames.insert(pfn) {
                        out.shared += 1;
                        continue;
                    }
                } else if e & PM_SWAPPED != 0 {
                    out.swapped += 1;
                } else {
                    continue;
                }
                out.pages += 1;
                match out.runs.last_mut() {
                    Some(r) if r.addr + r.pages * ps == page => r.pages += 1,
                    _ => out.runs.push(Run {
                        addr: page,
                        pages: 1,
                    }),
                }
            }
            addr += got as u64 * ps;
        }
    }
    Ok(out)
}

/// Scans the private anonymous memory of `scope`'s processes.
///
/// `--system` and `--cgroup` need root (every process's page tables and
/// memory); a named pid that does not exist is an error, as is a scope that
/// yields no pages. A process that exits while it is scanned is skipped
/// with that reason.
pub(crate) fn scan(scope: &Scope) -> Result<Scan, Error> {
    let start = Instant::now();
    let (pids, named) = match scope {
        Scope::System | Scope::Cgroup(_) if !is_root() => {
            let flag = match scope {
                Scope::System => "--system",
                _ => "--cgroup",
            };
            return Err(Error::Usage(format!(
                "{flag} needs root: it reads every process's page tables and memory \
                 (/proc/PID/pagemap and /proc/PID/mem); run it as root, or name your own \
                 processes with --pid"
            )));
        }
        Scope::System => (all_pids()?, false),
        Scope::Cgroup(p) => (cgroup_pids(p)?, false),
        Scope::Pids(p) => (p.clone(), true),
    };
    let me = std::process::id();
    let ps = page_size();
    let mut frames = FrameSet::default();
    let mut scan = Scan {
        scope: scope.describe(),
        page_size: ps,
        processes: Vec::new(),
        skipped: Vec::new(),
        kernel_threads: 0,
        pages: 0,
        shared_pages: 0,
        seconds: 0.0,
    };
    for pid in pids {
        if pid == me {
            if named {
                return Err(Error::Usage(format!(
                    "--pid {pid} is this zmem process itself, which advise leaves out"
                )));
            }
            continue;
        }
        let Some((comm, flags)) = stat(pid) else {
            if named {
                return Err(Error::Usage(format!("--pid {pid}: no such process")));
            }
            // Gone between the listing and now: nothing to count.
            continue;
        };
        if flags & PF_KTHREAD != 0 {
            if named {
                return Err(Error::Usage(format!(
                    "--pid {pid} ({comm}) is a kernel thread: it has no user memory"
                )));
            }
            scan.kernel_threads += 1;
            continue;
        }
        match scan_process(pid, comm.clone(), ps, &mut frames) {
            Ok(p) => {
                scan.pages += p.pages;
                scan.shared_pages += p.shared;
                if p.pages > 0 {
                    scan.processes.push(p);
                }
            }
            Err(e) if named && e.kind() == ErrorKind::PermissionDenied => {
                return Err(Error::Usage(format!(
                    "--pid {pid} ({comm}): permission denied reading its page tables: needs \
                     ptrace access to the process (the same user, with kernel.yama.ptrace_scope \
                     allowing it) or CAP_SYS_PTRACE"
                )));
            }
            Err(e) => scan.skipped.push(Skipped {
                pid,
                comm,
                reason: reason(&e),
            }),
        }
    }
    scan.processes
        .sort_by(|a, b| b.pages.cmp(&a.pages).then(a.pid.cmp(&b.pid)));
    scan.seconds = start.elapsed().as_secs_f64();
    if scan.pages == 0 {
        return Err(Error::Failed(format!(
            "{}: no private anonymous pages to measure{}",
            scan.scope,
            if scan.skipped.is_empty() {
                String::new()
            } else {
                format!(" ({} processes could not be read)", scan.skipped.len())
            }
        )));
    }
    Ok(scan)
}

/// Where one sampled page came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PageRef {
    /// The process.
    pub pid: u32,
    /// The page's address in it.
    pub addr: u64,
}

/// Global page indexes (over all processes' counted pages, in scan order)
/// to the pages they name, for indexes in increasing order.
fn locate(scan: &Scan, sorted: &[u64]) -> Vec<PageRef> {
    let mut out = Vec::with_capacity(sorted.len());
    let mut next = sorted.iter().peekable();
    let mut base = 0u64;
    'procs: for p in &scan.processes {
        for r in &p.runs {
            while let Some(&&g) = next.peek() {
                if g >= base + r.pages {
                    break;
                }
                out.push(PageRef {
                    pid: p.pid,
                    addr: r.addr + (g - base) * scan.page_size,
                });
                next.next();
            }
            base += r.pages;
            if next.peek().is_none() {
                break 'procs;
            }
        }
    }
    out
}

/// The sampled pages' origins, in sample order.
pub(crate) struct SampleOrigin {
    /// Each page of the sample's bytes, in order.
    pub pages: Vec<PageRef>,
    /// Pages chosen that could no longer be read (their process exited or
    /// unmapped them), left out. Read only by the tests, which check that
    /// kept and lost pages account for every page chosen (the sample's
    /// `how` already says it to the user).
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the tests' accounting"))]
    pub lost: u64,
}

/// Reads the pages at `refs` into `out`, a page each; returns the refs
/// read (those that could not be read are left out and noted in
/// `skipped`).
fn read_pages(
    refs: &[PageRef],
    ps: usize,
    out: &mut Vec<u8>,
    skipped: &mut BTreeMap<u32, String>,
) -> Vec<PageRef> {
    let mut kept = Vec::with_capacity(refs.len());
    let mut files: BTreeMap<u32, Option<File>> = BTreeMap::new();
    let mut page = vec![0u8; ps];
    for r in refs {
        let file = files.entry(r.pid).or_insert_with(|| {
            File::open(format!("/proc/{}/mem", r.pid))
                .map_err(|e| skipped.insert(r.pid, reason(&e)))
                .ok()
        });
        let Some(f) = file else { continue };
        match f.read_exact_at(&mut page, r.addr) {
            Ok(()) => {
                out.extend_from_slice(&page);
                kept.push(*r);
            }
            Err(e) => {
                let why = if e.raw_os_error() == Some(libc::EIO)
                    || e.kind() == ErrorKind::UnexpectedEof
                {
                    "exited or unmapped pages while it was sampled".to_string()
                } else {
                    reason(&e)
                };
                skipped.entry(r.pid).or_insert(why);
            }
        }
    }
    kept
}

/// Takes `sample_pages` pages (all of them if there are no more) in runs
/// of [`RUN_PAGES`] at even steps over the scan's counted pages from a
/// start chosen with `seed`, reads them, and returns the sample (with
/// training pages for a zstd dictionary from the runs halfway between) and
/// where each page came from. Processes that exit meanwhile are noted in
/// the scan's `skipped`, with the rest of the sample kept.
pub(crate) fn sample(
    scan: &mut Scan,
    sample_pages: u64,
    seed: u64,
) -> Result<(Sample, SampleOrigin), Error> {
    let ps = scan.page_size as usize;
    let n = scan.pages;
    let runs = n.div_ceil(RUN_PAGES);
    let want = (sample_pages / RUN_PAGES).max(1).min(runs);
    let step = runs as f64 / want as f64;
    let mut rng = Rng::new(seed, 0x5157_e3a1);
    let offset = rng.unit() * step;
    let run_pages = |r: u64| r * RUN_PAGES..((r + 1) * RUN_PAGES).min(n);
    let chosen: Vec<u64> = (0..want)
        .map(|i| ((offset + i as f64 * step) as u64).min(runs - 1))
        .collect();
    let mut idx: Vec<u64> = chosen.iter().flat_map(|&r| run_pages(r)).collect();
    idx.dedup();
    // Training runs: an eighth as many, halfway between the chosen ones
    // (none when the sample is everything).
    let mut train_idx: Vec<u64> = if want < runs {
        chosen
            .iter()
            .step_by(8)
            .map(|&r| ((r as f64 + step / 2.0) as u64).min(runs - 1))
            .filter(|r| chosen.binary_search(r).is_err())
            .flat_map(run_pages)
            .collect()
    } else {
        chosen
            .iter()
            .step_by(8)
            .flat_map(|&r| run_pages(r))
            .collect()
    };
    train_idx.dedup();
    let mut skipped = BTreeMap::new();
    let mut bytes = Vec::with_capacity(idx.len() * ps);
    let refs = locate(scan, &idx);
    let kept = read_pages(&refs, ps, &mut bytes, &mut skipped);
    let mut training = Vec::with_capacity(train_idx.len() * ps);
    read_pages(
        &locate(scan, &train_idx),
        ps,
        &mut training,
        &mut BTreeMap::new(),
    );
    for p in &mut scan.processes {
        p.sampled = kept.iter().filter(|r| r.pid == p.pid).count() as u64;
    }
    for (pid, why) in skipped {
        let comm = scan
            .processes
            .iter()
            .find(|p| p.pid == pid)
            .map(|p| p.comm.clone())
            .unwrap_or_default();
        scan.skipped.push(Skipped {
            pid,
            comm,
            reason: why,
        });
    }
    if kept.is_empty() {
        return Err(Error::Failed(format!(
            "{}: every sampled process exited before its pages could be read",
            scan.scope
        )));
    }
    let lost = refs.len() as u64 - kept.len() as u64;
    let how = if want == runs {
        format!("all {n} pages")
    } else {
        format!(
            "{} of {n} pages: {want} runs of {RUN_PAGES} consecutive pages at even steps over \
             every process's pages, from a start chosen with seed {seed}, so each process is \
             sampled in proportion to its anonymous memory",
            kept.len()
        )
    } + &if lost > 0 {
        format!(" ({lost} chosen pages were gone when read)")
    } else {
        String::new()
    };
    Ok((
        Sample {
            bytes,
            page_size: ps,
            input_pages: n,
            how,
            training,
        },
        SampleOrigin { pages: kept, lost },
    ))
}

/// `n` single pages (all of them if there are no more) at even steps over
/// the scan's counted pages, from a start chosen with `seed`: the sample a
/// prediction for one configuration is made from, larger than the
/// candidates' and with no runs (neighbouring pages resemble each other,
/// so single pages spread the same number further).
pub(crate) fn even_pages(scan: &Scan, n: u64, seed: u64) -> Vec<PageRef> {
    let total = scan.pages;
    let n = n.min(total).max(1);
    let step = total as f64 / n as f64;
    let offset = Rng::new(seed, 0x0e7e_7a9e).unit() * step;
    let idx: Vec<u64> = (0..n)
        .map(|i| ((offset + i as f64 * step) as u64).min(total - 1))
        .collect();
    locate(scan, &idx)
}

/// Reads the pages at `refs` into `out` (appending a page each) and says
/// how many could be read; pages whose process exited or unmapped them
/// meanwhile are left out.
pub(crate) fn read_into(refs: &[PageRef], page_size: usize, out: &mut Vec<u8>) -> usize {
    read_pages(refs, page_size, out, &mut BTreeMap::new()).len()
}

/// Calls `f` with every counted page, up to `max_pages` at a time, in scan
/// order (for writing them all to a kernel zram device). Pages that can no
/// longer be read are passed over; returns how many were.
pub(crate) fn for_each_chunk(
    scan: &Scan,
    max_pages: usize,
    mut f: impl FnMut(&[u8]) -> Result<(), Error>,
) -> Result<u64, Error> {
    let ps = scan.page_size;
    let mut buf = vec![0u8; max_pages * ps as usize];
    let mut missed = 0u64;
    for p in &scan.processes {
        let Ok(mem) = File::open(format!("/proc/{}/mem", p.pid)) else {
            missed += p.pages;
            continue;
        };
        for r in &p.runs {
            let mut done = 0u64;
            while done < r.pages {
                let n = (r.pages - done).min(max_pages as u64);
                let chunk = &mut buf[..(n * ps) as usize];
                match mem.read_exact_at(chunk, r.addr + done * ps) {
                    Ok(()) => f(chunk)?,
                    Err(_) => missed += n,
                }
                done += n;
            }
        }
    }
    Ok(missed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own_scan() -> Scan {
        // This test process's own pages, scanned as another process's
        // would be: the scan leaves its caller out, so name the pid in a
        // scan built by hand.
        let mut frames = FrameSet::default();
        let p = scan_process(std::process::id(), "self".into(), page_size(), &mut frames).unwrap();
        Scan {
            scope: "self".into(),
            page_size: page_size(),
            pages: p.pages,
            processes: vec![p],
            skipped: Vec::new(),
            kernel_threads: 0,
            shared_pages: 0,
            seconds: 0.0,
        }
    }

    #[test]
    fn stat_reads_names_with_spaces_and_parentheses() {
        let (comm, flags) = stat(std::process::id()).unwrap();
        assert!(!comm.is_empty());
        assert_eq!(flags & PF_KTHREAD, 0);
        // kthreadd, pid 2, is a kernel thread wherever /proc shows it.
        if let Some((name, flags)) = stat(2) {
            if name == "kthreadd" {
                assert_ne!(flags & PF_KTHREAD, 0);
            }
        }
    }

    #[test]
    fn frames_are_counted_once() {
        let mut f = FrameSet::default();
        assert!(f.insert(7));
        assert!(f.insert(1 << 20));
        assert!(!f.insert(7));
        assert!(!f.insert(1 << 20));
        assert!(f.insert(8));
    }

    #[test]
    fn the_sample_holds_written_pages_and_names_where_they_came_from() {
        let ps = page_size() as usize;
        let pages = 256;
        let layout = std::alloc::Layout::from_size_align(pages * ps, ps).unwrap();
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        assert!(!ptr.is_null());
        // SAFETY: a fresh allocation of `pages * ps` bytes, written before
        // it is read and freed at the end of the test.
        let buf = unsafe { std::slice::from_raw_parts_mut(ptr, pages * ps) };
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i / ps) as u8 ^ 0x5a;
        }
        let mut scan = own_scan();
        assert!(scan.pages >= pages as u64);
        // All of it when the sample is larger than the memory.
        let (all, origin) = sample(&mut scan, 1 << 22, 3).unwrap();
        assert_eq!(all.pages() as u64 + origin.lost, scan.pages);
        assert_eq!(origin.pages.len(), all.pages());
        // Each sampled page is what its origin holds now (this process's
        // own memory, read back directly, for the pages of `buf`).
        let base = ptr as u64;
        let mut seen = 0;
        for (i, r) in origin.pages.iter().enumerate() {
            if r.addr >= base && r.addr < base + (pages * ps) as u64 {
                let k = ((r.addr - base) as usize) / ps;
                assert_eq!(&all.bytes[i * ps..(i + 1) * ps], &buf[k * ps..(k + 1) * ps]);
                seen += 1;
            }
        }
        assert_eq!(seen, pages, "every page of the buffer is in a full sample");
        // A smaller sample: whole runs, spread over the memory, in order.
        let (part, origin) = sample(&mut scan, 64, 3).unwrap();
        assert_eq!(part.pages() as u64 + origin.lost, 64);
        assert!(origin.pages.windows(2).all(|w| w[0].addr < w[1].addr));
        assert_eq!(scan.processes[0].sampled, part.pages() as u64);
        // SAFETY: allocated above with this layout, not used after.
        unsafe { std::alloc::dealloc(ptr, layout) };
    }

    #[test]
    fn even_pages_are_spread_over_every_page_in_order() {
        let scan = own_scan();
        let refs = even_pages(&scan, 10, 5);
        assert_eq!(refs.len(), 10.min(scan.pages as usize));
        assert!(refs.windows(2).all(|w| w[0].addr < w[1].addr));
        let all = even_pages(&scan, u64::MAX, 5);
        assert_eq!(all.len() as u64, scan.pages);
        let mut out = Vec::new();
        let got = read_into(&refs, scan.page_size as usize, &mut out);
        assert_eq!(out.len(), got * scan.page_size as usize);
        assert!(got > 0);
    }

    #[test]
    fn every_counted_page_is_passed_once() {
        let scan = own_scan();
        let mut pages = 0u64;
        let missed = for_each_chunk(&scan, 64, |c| {
            assert_eq!(c.len() % scan.page_size as usize, 0);
            pages += (c.len() / scan.page_size as usize) as u64;
            Ok(())
        })
        .unwrap();
        assert_eq!(pages + missed, scan.pages);
    }

    #[test]
    fn bad_scopes_are_refused_in_one_line() {
        let e = scan(&Scope::Cgroup("/no/such/cgroup".into())).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("--cgroup") && !s.contains('\n'), "{s}");
        let e = scan(&Scope::Pids(vec![std::process::id()])).unwrap_err();
        assert!(e.to_string().contains("itself"), "{e}");
        let e = scan(&Scope::Pids(vec![4_000_000])).unwrap_err();
        assert!(e.to_string().contains("no such process"), "{e}");
    }
}
