//! The statistics each process writes at exit: `PID.json` in the
//! directory `zmem run` gave, one JSON object (the hooks' counts and the
//! region's statistics); and the library's messages, which go into the
//! same file (`{"pid", "exe", "error"}`) and to the program's standard
//! error only when `ZMEM_RUN_VERBOSE` is set.
//!
//! Owns the exit handler and where a message goes; it never unmaps the
//! region (the program's later exit handlers may still read its memory;
//! the kernel takes it all at exit).

use std::path::PathBuf;

use serde_json::json;

use crate::process::process;
use crate::settings::{STATS_DIR, VERBOSE};

/// Registers the exit handler.
pub fn at_exit() {
    // SAFETY: an `extern "C"` function that lives for the program.
    unsafe { libc::atexit(write_stats) };
}

/// Whether the library may write to the program's standard error.
fn verbose() -> bool {
    std::env::var_os(VERBOSE).is_some()
}

/// This process's statistics file, where `zmem run` gave a directory.
fn stats_path() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os(STATS_DIR)?);
    Some(dir.join(format!("{}.json", std::process::id())))
}

/// Says why the process runs without a region: in its statistics file for
/// `zmem run`'s report, and on standard error when verbose.
pub fn problem(msg: &str) {
    if verbose() {
        eprintln!("zmem run: {msg}");
    }
    let Some(path) = stats_path() else { return };
    let text = json!({
        "pid": std::process::id(),
        "exe": std::env::current_exe().ok(),
        "error": msg,
    });
    if let Err(e) = std::fs::write(&path, text.to_string()) {
        if verbose() {
            eprintln!("zmem run: writing {}: {e}", path.display());
        }
    }
}

extern "C" fn write_stats() {
    let Some(p) = process() else { return };
    if p.settings.stats_dir.is_none() {
        return;
    }
    let Some(path) = stats_path() else { return };
    let text = p.stats().to_string();
    if let Err(e) = std::fs::write(&path, text) {
        if verbose() {
            eprintln!("zmem run: writing {}: {e}", path.display());
        }
    }
}
