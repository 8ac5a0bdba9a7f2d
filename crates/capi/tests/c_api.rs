//! The C API from C: compiles `include/zsmalloc.h` strictly, checks the
//! shared library exports exactly the header's functions, builds
//! `tests/c/test_zsmalloc.c` against the `libzsmalloc_capi.a` this very
//! `cargo test` built, runs it, runs it under valgrind, and installs the
//! library with `scripts/install-clib` to check the pkg-config file and the
//! soname. How the fresh libraries are found, and the harness itself, are
//! `testkit::clib`'s; what the library does is this crate's unit tests'.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use testkit::clib::{have_cc, have_or_skip, passed_checks, run, CLibrary};

/// libzsmalloc: cargo writes it as libzsmalloc_capi (a lib named
/// `zsmalloc` would collide with the allocator crate's rlib).
const LIB: CLibrary = testkit::c_library!(
    "zsmalloc_capi",
    "zsmalloc",
    "zs_",
    "tests/c/test_zsmalloc.c"
);

/// The C test linked statically against `libzsmalloc_capi.a`, built once.
fn static_test_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| LIB.build_static("test_zsmalloc_static"))
}

/// Runs a build of the C test and checks it ran every check and failed
/// none; returns its stdout.
fn run_c_test(cmd: &mut Command) -> String {
    let stdout = String::from_utf8_lossy(&run(cmd).stdout).into_owned();
    assert!(passed_checks(&stdout) >= 100, "{stdout}");
    stdout
}

#[test]
fn the_header_compiles_strictly_and_is_what_the_library_exports() {
    LIB.check_header("return zs_handle_is_err(0) + zs_handle_err(0);", 20, "zs_");
}

#[test]
fn c_test_passes() {
    if have_cc() {
        print!("{}", run_c_test(&mut Command::new(static_test_binary())));
    }
}

#[test]
fn c_test_is_clean_under_valgrind() {
    if !have_cc() || !have_or_skip("valgrind", "scripts/install-deps installs it") {
        return;
    }
    let out = run(Command::new("valgrind")
        .args([
            "--leak-check=full",
            "--error-exitcode=1",
            "--errors-for-leak-kinds=all",
        ])
        .arg(static_test_binary()));
    passed_checks(&String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stderr
        .lines()
        .find(|l| l.contains("ERROR SUMMARY"))
        .expect("valgrind prints an error summary");
    assert!(summary.contains("ERROR SUMMARY: 0 errors"), "{stderr}");
    println!("valgrind: {}", summary.trim_start_matches(|c| c != 'E'));
}

#[test]
fn installed_library_works_through_pkg_config() {
    LIB.check_installed("test_zsmalloc", |cmd| {
        run_c_test(cmd);
    });
}
