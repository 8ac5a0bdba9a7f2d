//! The kernel's own C code built in user space as a test oracle: where its
//! sources are (`$ZMEM_KERNEL_SRC`, else the Linux 7.3 source that
//! scripts/install-deps unpacks into ~/.cache/zmem/linux-source-7.3), and
//! a C harness compiled with them over the shim headers in
//! crates/testkit/kernel-shim (the few kernel definitions lib/lz4 and
//! lib/zlib_deflate use), and the tests that compare with it
//! ([`oracle_test!`](crate::oracle_test)). The kernel's files are never
//! copied into zmem's tree; the harness is built in the test's own target
//! folder.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The kernel source tree that has every one of `files` (paths inside
/// it), or `None`.
pub fn source(files: &[&str]) -> Option<PathBuf> {
    let has = |d: &Path| files.iter().all(|f| d.join(f).is_file());
    if let Some(dir) = std::env::var_os("ZMEM_KERNEL_SRC") {
        return Some(PathBuf::from(dir)).filter(|d| has(d));
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(cache.join("zmem/linux-source-7.3")).filter(|d| has(d))
}

/// [`source`], or `None` after one line on stderr that says the test
/// skips for want of the kernel's `what` (`lib/lz4`).
pub fn source_or_skip(what: &str, files: &[&str]) -> Option<PathBuf> {
    let src = source(files);
    if src.is_none() {
        eprintln!("skipped: no kernel {what} source ($ZMEM_KERNEL_SRC or ~/.cache/zmem/linux-source-7.3, which scripts/install-deps unpacks)");
    }
    src
}

/// A test of zmem's code against the kernel's, built by `$oracle` (a
/// function that gives `None` where the kernel's sources are missing, the
/// test then passing without checking): `#[test]`, and ignored under Miri,
/// which cannot start the oracle's process.
#[macro_export]
macro_rules! oracle_test {
    ($oracle:ident, $(#[$attr:meta])* fn $name:ident() $body:block) => {
        $(#[$attr])*
        #[test]
        #[cfg_attr(
            miri,
            ignore = "runs the kernel's C in a process, which Miri cannot start"
        )]
        fn $name() {
            if $oracle().is_none() {
                return;
            }
            $body
        }
    };
}

/// Compiles `harness` with the kernel's `sources` (paths inside `src`)
/// into `out`/`name`, with the kernel's `headers` (paths inside `src`'s
/// include/) copied into `out` so that no other kernel header is seen,
/// and the shims before them; panics if the compiler fails.
pub fn build(
    src: &Path,
    out: &Path,
    name: &str,
    harness: &Path,
    sources: &[&str],
    headers: &[&str],
    flags: &[&str],
) -> PathBuf {
    for h in headers {
        let to = out.join(h);
        std::fs::create_dir_all(to.parent().expect("a header's folder"))
            .expect("oracle build directory");
        std::fs::copy(src.join("include").join(h), &to)
            .unwrap_or_else(|e| panic!("copy the kernel's {h}: {e}"));
    }
    let shims = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernel-shim");
    let bin = out.join(name);
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let status = Command::new(cc)
        .args(["-O2", "-w"])
        .args(flags)
        .arg("-I")
        .arg(&shims)
        .arg("-I")
        .arg(out)
        .arg("-o")
        .arg(&bin)
        .arg(harness)
        .args(sources.iter().map(|s| src.join(s)))
        .status()
        .expect("run the C compiler");
    assert!(
        status.success(),
        "the kernel's {sources:?} did not build from {}",
        src.display()
    );
    bin
}
