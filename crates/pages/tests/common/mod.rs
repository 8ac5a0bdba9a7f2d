//! What the locked reserve's tests share: each runs in a process of its
//! own, since a reserve is locked once per process.

/// A field of a `/proc` file in the `Name:   123 kB` form, in bytes.
pub fn proc_kib_field(file: &str, field: &str) -> u64 {
    let text = std::fs::read_to_string(file).unwrap();
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {file}"));
    kib << 10
}

/// Bytes of this process's locked mappings (`VmLck` of /proc/self/status).
pub fn locked_bytes() -> u64 {
    proc_kib_field("/proc/self/status", "VmLck")
}
