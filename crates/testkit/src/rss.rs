//! The resident set of this process (or of a server a test started), for
//! the tests that check that an allocator's pages come from the OS and go
//! back to it. Such a test runs alone in its
//! binary, so nothing else allocates between readings.

/// The process's resident set (`VmRSS` of `/proc/self/status`), in KiB.
pub fn rss_kib() -> u64 {
    vm_rss("/proc/self/status")
}

/// The resident set of process `pid` (a server a test started), in KiB.
pub fn rss_kib_of(pid: u32) -> u64 {
    vm_rss(&format!("/proc/{pid}/status"))
}

fn vm_rss(path: &str) -> u64 {
    let status = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line")
}

/// Frees every other object: `free` gets the 2nd, 4th, ... of `handles`,
/// and the 1st, 3rd, ... stay in `handles`, in order.
pub fn free_every_other<H: Copy>(handles: &mut Vec<H>, mut free: impl FnMut(H)) {
    let mut i = 0;
    handles.retain(|&h| {
        i += 1;
        if i % 2 == 0 {
            free(h);
        }
        i % 2 == 1
    });
}
