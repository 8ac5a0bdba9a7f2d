//! What the locked reserve's tests share: each runs in a process of its
//! own, since a reserve is locked once per process.

/// Bytes of this process's locked mappings (`VmLck` of /proc/self/status).
pub fn locked_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib << 10
}
