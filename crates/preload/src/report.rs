//! The statistics each process writes at exit: `PID.json` in the
//! directory `zmem run` gave, one JSON object (the hooks' counts and the
//! region's statistics).
//!
//! Owns the exit handler; it never unmaps the region (the program's later
//! exit handlers may still read its memory; the kernel takes it all at
//! exit).

use crate::process::process;

/// Registers the exit handler.
pub fn at_exit() {
    // SAFETY: an `extern "C"` function that lives for the program.
    unsafe { libc::atexit(write_stats) };
}

extern "C" fn write_stats() {
    let Some(p) = process() else { return };
    let Some(dir) = p.settings.stats_dir.as_ref() else {
        return;
    };
    let path = dir.join(format!("{}.json", std::process::id()));
    let text = p.stats().to_string();
    if let Err(e) = std::fs::write(&path, text) {
        eprintln!("zmem run: writing {}: {e}", path.display());
    }
}
