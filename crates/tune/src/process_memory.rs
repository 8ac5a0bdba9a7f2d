//! A live process's private anonymous memory, read page by page.
//!
//! The mappings are those of `/proc/PID/maps` that are private and
//! anonymous: the heap, the stacks, anonymous `mmap`s (named or not). For
//! each page, `/proc/PID/pagemap` says whether it is present in RAM, swapped
//! out or was never touched; untouched pages are skipped (they hold nothing),
//! present and swapped-out pages are read through `/proc/PID/mem` (reading a
//! swapped-out page brings it back in, as any access would) and counted
//! apart. Reading needs ptrace access to the process: the same user with
//! ptrace allowed (kernel.yama.ptrace_scope), or CAP_SYS_PTRACE.
//!
//! This module only reads another process's memory into a file the caller
//! gives; it knows nothing of stores, and it never writes to the process.

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::FileExt;

use recipe::Error;

/// `/proc/PID/pagemap`: the page is present in RAM.
const PM_PRESENT: u64 = 1 << 63;
/// `/proc/PID/pagemap`: the page is in swap.
const PM_SWAPPED: u64 = 1 << 62;
/// Pages whose pagemap entries are read at once.
const CHUNK_PAGES: u64 = 1024;

/// One anonymous mapping's pages in the spool file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    /// `[heap]`, `[stack]`, `[anon:NAME]` or `anon`, with its address range.
    pub name: String,
    /// Where its pages start in the spool file.
    pub offset: u64,
    /// Bytes of its pages there (touched pages only).
    pub len: u64,
}

/// What was read from a process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ProcessMemory {
    /// The process's page size in bytes.
    pub page_size: u64,
    /// Pages present in RAM, read.
    pub present: u64,
    /// Pages in swap, read (which swaps them back in).
    pub swapped: u64,
    /// Pages never touched, skipped.
    pub untouched: u64,
    /// Touched pages that could not be read (an I/O error from the kernel,
    /// e.g. a mapping that went away while it was read), skipped.
    pub unreadable: u64,
    /// The mappings read, in address order.
    pub regions: Vec<Region>,
}

/// One line of `/proc/PID/maps` that is a private anonymous mapping:
/// (start, end, name).
pub(crate) fn anonymous_mapping(line: &str) -> Option<(u64, u64, String)> {
    let mut fields = line.splitn(6, char::is_whitespace);
    let range = fields.next()?;
    let perms = fields.next()?;
    let _offset = fields.next()?;
    let _dev = fields.next()?;
    let inode = fields.next()?;
    let path = fields.next().unwrap_or("").trim();
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    if perms.as_bytes().get(3) != Some(&b'p') || inode != "0" {
        return None;
    }
    let kind = match path {
        "" => "anon".to_string(),
        "[heap]" | "[stack]" => path.to_string(),
        p if p.starts_with("[anon:") || p.starts_with("[stack:") => p.to_string(),
        // [vdso], [vvar], [vsyscall], [uprobes] and the like are the
        // kernel's, not the process's data.
        _ => return None,
    };
    Some((start, end, format!("{kind} {start:#x}-{end:#x}")))
}

/// The system's page size, bytes.
pub(crate) fn system_page_size() -> u64 {
    // SAFETY: sysconf has no preconditions; it only reads a constant.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// The one-line error for a failure to open or read `what` of process `pid`.
fn access_error(pid: u32, what: &str, e: &std::io::Error) -> Error {
    match e.kind() {
        ErrorKind::NotFound => Error::Failed(format!("--pid {pid}: no such process")),
        ErrorKind::PermissionDenied => Error::Failed(format!(
            "--pid {pid}: permission denied reading its {what}: needs ptrace access to the \
             process (the same user, with kernel.yama.ptrace_scope allowing it) or CAP_SYS_PTRACE"
        )),
        _ => Error::Failed(format!("--pid {pid}: reading /proc/{pid}/{what}: {e}")),
    }
}

/// Reads the private anonymous memory of process `pid` into `spool`
/// (appending from its current end, page after page, mapping after
/// mapping) and says what it read.
pub(crate) fn read(pid: u32, spool: &mut File) -> Result<ProcessMemory, Error> {
    let proc_dir = format!("/proc/{pid}");
    let maps = std::fs::read_to_string(format!("{proc_dir}/maps"))
        .map_err(|e| access_error(pid, "maps", &e))?;
    let pagemap =
        File::open(format!("{proc_dir}/pagemap")).map_err(|e| access_error(pid, "pagemap", &e))?;
    let mem = File::open(format!("{proc_dir}/mem")).map_err(|e| access_error(pid, "mem", &e))?;
    let spool_err = |e: std::io::Error| Error::Failed(format!("spooling process memory: {e}"));
    let ps = system_page_size();
    let mut out = ProcessMemory {
        page_size: ps,
        ..ProcessMemory::default()
    };
    let mut at = spool.metadata().map_err(spool_err)?.len();
    let mut entries = vec![0u8; (CHUNK_PAGES * 8) as usize];
    let mut page = vec![0u8; ps as usize];
    for (start, end, name) in maps.lines().filter_map(anonymous_mapping) {
        let region_start = at;
        let mut addr = start;
        while addr < end {
            let n = ((end - addr) / ps).min(CHUNK_PAGES);
            let want = &mut entries[..(n * 8) as usize];
            let got = pagemap
                .read_at(want, addr / ps * 8)
                .map_err(|e| access_error(pid, "pagemap", &e))?;
            let n = (got / 8) as u64;
            if n == 0 {
                break;
            }
            for k in 0..n {
                let i = (k * 8) as usize;
                let entry = u64::from_le_bytes(want[i..i + 8].try_into().expect("eight bytes"));
                let page_addr = addr + k * ps;
                if entry & (PM_PRESENT | PM_SWAPPED) == 0 {
                    out.untouched += 1;
                    continue;
                }
                match mem.read_exact_at(&mut page, page_addr) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::PermissionDenied => {
                        return Err(access_error(pid, "mem", &e));
                    }
                    Err(_) => {
                        out.unreadable += 1;
                        continue;
                    }
                }
                if entry & PM_PRESENT != 0 {
                    out.present += 1;
                } else {
                    out.swapped += 1;
                }
                spool.write_all(&page).map_err(spool_err)?;
                at += ps;
            }
            addr += n * ps;
        }
        if at > region_start {
            out.regions.push(Region {
                name,
                offset: region_start,
                len: at - region_start,
            });
        }
    }
    spool.flush().map_err(spool_err)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_private_anonymous_mappings_are_taken() {
        let take = anonymous_mapping;
        assert_eq!(
            take("55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]"),
            Some((
                0x55d0c0a00000,
                0x55d0c0a21000,
                "[heap] 0x55d0c0a00000-0x55d0c0a21000".into()
            ))
        );
        assert!(take("7f0000000000-7f0000001000 rw-p 00000000 00:00 0 ").is_some());
        assert!(take("7ffd0000-7ffd1000 rw-p 00000000 00:00 0   [stack]").is_some());
        assert!(take("7f00-7f01 rw-p 00000000 00:00 0   [anon:arena]").is_some());
        // Shared anonymous, file-backed, and the kernel's pages are not.
        assert!(take("7f00-7f01 rw-s 00000000 00:01 1234 /dev/zero (deleted)").is_none());
        assert!(take("7f00-7f01 r-xp 00000000 08:01 5678 /usr/bin/cat").is_none());
        assert!(take("7f00-7f01 r--p 00000000 00:00 0   [vvar]").is_none());
        assert!(take("7f00-7f01 r-xp 00000000 00:00 0   [vdso]").is_none());
    }

    #[test]
    fn own_memory_is_read_and_touched_pages_found() {
        // This process's own heap: a buffer written with a pattern must be
        // among the pages read, byte for byte.
        let ps = system_page_size() as usize;
        // Page-aligned, so its pages are the memory's pages.
        let layout = std::alloc::Layout::from_size_align(64 * ps, ps).unwrap();
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        assert!(!ptr.is_null());
        // SAFETY: `ptr` is a fresh allocation of `64 * ps` bytes, written
        // below before it is read and freed at the end of the test.
        let buf = unsafe { std::slice::from_raw_parts_mut(ptr, 64 * ps) };
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i / ps) as u8 ^ 0xa5;
        }
        let mut spool = tempfile::tempfile().unwrap();
        let got = read(std::process::id(), &mut spool).unwrap();
        assert!(got.present >= 64, "{got:?}");
        let mut data = Vec::new();
        use std::io::{Read, Seek};
        spool.rewind().unwrap();
        spool.read_to_end(&mut data).unwrap();
        let total: u64 = got.regions.iter().map(|r| r.len).sum();
        assert_eq!(total, data.len() as u64);
        assert_eq!(total, (got.present + got.swapped) * ps as u64);
        let pages: std::collections::HashSet<&[u8]> = data.chunks(ps).collect();
        for p in buf.chunks(ps) {
            assert!(pages.contains(p), "a written page was not read: {got:?}");
        }
        // SAFETY: allocated above with this layout, not used after.
        unsafe { std::alloc::dealloc(ptr, layout) };
    }
}
