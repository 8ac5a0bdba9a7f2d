//! The C API from C: compiles `include/zmem_region.h` strictly, checks the
//! shared library exports exactly the header's functions, builds
//! `tests/c/test_region.c` against the `libzmem_region.a` and the
//! `libzmem_region.so` this very `cargo test` built and runs both (as root,
//! also as user `nobody`, whose region is user-mode-only), and installs the
//! library with `scripts/install-clib` to check the pkg-config file and the
//! soname. How the fresh libraries are found, and the harness itself, are
//! `testkit::clib`'s.
//!
//! Owns these checks only: what a region does is the `zmem-region` crate's
//! tests'; this file touches no Rust API of the crate. Where no
//! userfaultfd can be opened the C program checks only the bad input,
//! prints a `SKIPPED:` line and exits 77; the test prints that and passes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use testkit::clib::{have_cc, ldd, passed_checks, run_expecting, CLibrary};

/// libzmem_region, written by cargo under the name it installs as.
const LIB: CLibrary = testkit::c_library!(
    "zmem_region",
    "zmem_region",
    "zmem_region_",
    "tests/c/test_region.c"
);

/// The C program's exit code where no userfaultfd can be opened.
const SKIPPED: i32 = 77;

/// Runs a build of the C test (`cmd`) and checks its output: a clean exit
/// (or the skip code, with its line) and no failed check. Returns the
/// output.
fn run_c_test(cmd: &mut Command) -> String {
    let out = run_expecting(cmd, &[0, SKIPPED]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let passed = passed_checks(&stdout);
    if out.status.code() == Some(SKIPPED) {
        assert!(stdout.contains("SKIPPED: no userfaultfd"), "{stdout}");
        // The bad-input checks ran all the same.
        assert!(passed >= 14, "{stdout}");
    } else {
        assert!(
            stdout.contains(" pages written and read back, 0 wrong"),
            "{stdout}"
        );
        assert!(passed >= 60, "{stdout}");
    }
    stdout
}

#[test]
fn the_header_compiles_strictly_and_is_what_the_library_exports() {
    let main_body = "return zmem_region_len((const struct zmem_region *)0) != 0;";
    LIB.check_header(main_body, 11, "zmem_");
}

/// The C test linked statically against `libzmem_region.a`, built once.
fn static_test_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| LIB.build_static("test_region_static"))
}

#[test]
fn c_test_passes_linked_statically() {
    if !have_cc() {
        return;
    }
    let bin = static_test_binary();
    // No dependency on the shared library.
    let ldd = ldd(bin);
    assert!(!ldd.contains("libzmem_region"), "{ldd}");
    print!("{}", run_c_test(&mut Command::new(bin)));
}

/// As root, the C test again as user `nobody`: where neither
/// /dev/userfaultfd (mode 0600) nor the full system call
/// (`vm.unprivileged_userfaultfd=0`) is open to it, its region is
/// user-mode-only and the test checks that `write(2)` and `read(2)` on
/// compressed pages fail with `EFAULT` until touched.
#[test]
fn c_test_passes_as_an_unprivileged_user() {
    if !have_cc() {
        return;
    }
    // SAFETY: geteuid takes nothing and cannot fail.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/usr/bin/setpriv").exists() {
        eprintln!("SKIPPED: needs root and setpriv(1) to drop to user nobody");
        return;
    }
    // A copy the user can reach (the target directory may not be).
    let dir = std::env::temp_dir().join(format!("zmem-region-capi-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("test_region_static");
    std::fs::copy(static_test_binary(), &bin).unwrap();
    for path in [&dir, &bin] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let stdout = run_c_test(
        Command::new("/usr/bin/setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin),
    );
    let _ = std::fs::remove_dir_all(&dir);
    let strict = std::fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd")
        .is_ok_and(|v| v.trim() == "0");
    if strict && !stdout.contains("SKIPPED") {
        assert!(
            stdout.contains("user-mode-only userfaultfd: yes"),
            "{stdout}"
        );
    }
    print!("{stdout}");
}

#[test]
fn c_test_passes_linked_dynamically() {
    if !have_cc() {
        return;
    }
    // The executable asks for the soname, libzmem_region.so.0, which cargo
    // does not write: a private directory gets that link to the fresh .so.
    let dir = LIB.out_dir().join("shared");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let so = LIB.lib_dir().join(LIB.file("so"));
    std::os::unix::fs::symlink(&so, dir.join("libzmem_region.so.0")).unwrap();
    std::os::unix::fs::symlink(&so, dir.join("libzmem_region.so")).unwrap();
    let bin = LIB.build_shared("test_region_shared", &dir, &[]);
    LIB.assert_loads_from(&bin, &dir);
    print!("{}", run_c_test(&mut Command::new(&bin)));
}

#[test]
fn installed_library_works_through_pkg_config() {
    LIB.check_installed("test_region", |cmd| {
        run_c_test(cmd);
    });
}
