//! The C API from C: compiles `include/zmem_region.h` strictly, checks the
//! shared library exports exactly the header's functions, builds
//! `tests/c/test_region.c` against the `libzmem_region.a` and the
//! `libzmem_region.so` this very `cargo test` built and runs both (as root,
//! also as user `nobody`, whose region is user-mode-only), and installs the
//! library with `install.sh` to check the pkg-config file and the soname.
//!
//! Owns these checks only: what a region does is the `zmem-region` crate's
//! tests'; this file touches no Rust API of the crate.
//!
//! # Finding the fresh libraries
//!
//! As in `crates/capi/tests/c_api.rs`: cargo builds this crate's library,
//! with every crate type in its manifest (`cdylib`, `staticlib`, `rlib`),
//! before it links any integration test, into the profile's `deps/`
//! directory, the directory holding this test's own executable; so the
//! test looks next to `std::env::current_exe()` (then in the profile
//! directory above it).
//!
//! The C compiler is the system's `cc`; without it these tests print why
//! and pass. Where no userfaultfd can be opened the C program checks only
//! the bad input, prints a `SKIPPED:` line and exits 77; the test prints
//! that and passes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const CRATE_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// Libraries the Rust standard library inside `libzmem_region.a` needs
/// (`rustc --print native-static-libs`; also `Libs.private` in the .pc
/// file).
const NATIVE_LIBS: &[&str] = &[
    "-lgcc_s",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-ldl",
    "-lc",
];

/// Warnings are errors for everything compiled here.
const CFLAGS: &[&str] = &[
    "-std=c99",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-pedantic",
    "-O1",
    "-g",
];

/// The C program's exit code where no userfaultfd can be opened.
const SKIPPED: i32 = 77;

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn have_cc() -> bool {
    static CC: OnceLock<bool> = OnceLock::new();
    *CC.get_or_init(|| {
        let ok = have("cc");
        if !ok {
            eprintln!("SKIPPED: no C compiler `cc` on PATH (scripts/install-deps installs one)");
        }
        ok
    })
}

/// The directory with the freshly built `libzmem_region.a` and `.so`.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir").to_path_buf();
    let profile = deps.parent().expect("profile dir").to_path_buf();
    for dir in [deps, profile] {
        if dir.join("libzmem_region.a").is_file() && dir.join("libzmem_region.so").is_file() {
            return dir;
        }
    }
    panic!(
        "libzmem_region.a/.so not found next to {}: cargo should have built them",
        exe.display()
    );
}

/// A scratch directory for this test binary's outputs.
fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("zmem-region-capi");
    std::fs::create_dir_all(&dir).expect("create the scratch dir");
    dir
}

/// Runs `cmd`, which must exit with one of `codes`.
fn run_expecting(cmd: &mut Command, codes: &[i32]) -> Output {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    if !out.status.code().is_some_and(|c| codes.contains(&c)) {
        panic!(
            "{shown} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

fn run(cmd: &mut Command) -> Output {
    run_expecting(cmd, &[0])
}

fn c_test_source() -> PathBuf {
    Path::new(CRATE_DIR).join("tests/c/test_region.c")
}

fn include_dir() -> PathBuf {
    Path::new(CRATE_DIR).join("include")
}

/// Runs a build of the C test (`cmd`) and checks its output: a clean exit
/// (or the skip code, with its line) and no failed check. Returns the
/// output.
fn run_c_test(cmd: &mut Command) -> String {
    let out = run_expecting(cmd, &[0, SKIPPED]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("c_api: ") && last.ends_with(" passed, 0 failed"),
        "unexpected end of output: {stdout}"
    );
    let passed: u32 = last
        .trim_start_matches("c_api: ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count of passed checks");
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
fn header_compiles_strictly() {
    if !have_cc() {
        return;
    }
    let dir = out_dir();
    let src = dir.join("header_only.c");
    std::fs::write(
        &src,
        "#include <zmem_region.h>\n#include <zmem_region.h>\n\
         int main(void) { return zmem_region_len((const struct zmem_region *)0) != 0; }\n",
    )
    .unwrap();
    run(Command::new("cc")
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"])
        .args([
            "-Wstrict-prototypes",
            "-Wmissing-prototypes",
            "-Wconversion",
        ])
        .arg("-I")
        .arg(include_dir())
        .arg("-c")
        .arg(&src)
        .arg("-o")
        .arg(dir.join("header_only.o")));
}

/// The functions `include/zmem_region.h` declares.
fn header_functions() -> Vec<String> {
    let header = std::fs::read_to_string(include_dir().join("zmem_region.h")).unwrap();
    let mut names: Vec<String> = header
        .lines()
        .filter(|l| !l.starts_with(char::is_whitespace) && !l.starts_with(['/', '#', '}']))
        .filter_map(|l| {
            let open = l.find('(')?;
            let name = l[..open].rsplit([' ', '*']).next()?;
            name.starts_with("zmem_region_").then(|| name.to_string())
        })
        .collect();
    names.sort();
    names
}

#[test]
fn library_exports_exactly_the_header_functions() {
    let declared = header_functions();
    assert_eq!(declared.len(), 11, "{declared:?}");
    if !have("nm") {
        eprintln!("SKIPPED: nm is not installed (binutils, from build-essential)");
        return;
    }
    let out = run(Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib_dir().join("libzmem_region.so")));
    let mut exported: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [_, "T", name] if name.starts_with("zmem_") => Some(name.to_string()),
            _ => None,
        })
        .collect();
    exported.sort();
    assert_eq!(exported, declared);
}

/// The C test linked statically against `libzmem_region.a`, built once.
fn static_test_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = out_dir().join("test_region_static");
        run(Command::new("cc")
            .args(CFLAGS)
            .arg("-I")
            .arg(include_dir())
            .arg(c_test_source())
            .arg(lib_dir().join("libzmem_region.a"))
            .arg("-pthread")
            .args(NATIVE_LIBS)
            .arg("-o")
            .arg(&bin));
        bin
    })
}

#[test]
fn c_test_passes_linked_statically() {
    if !have_cc() {
        return;
    }
    let bin = static_test_binary();
    // No dependency on the shared library.
    let ldd = run(Command::new("ldd").arg(bin));
    assert!(
        !String::from_utf8_lossy(&ldd.stdout).contains("libzmem_region"),
        "{}",
        String::from_utf8_lossy(&ldd.stdout)
    );
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
    let dir = out_dir().join("shared");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let so = lib_dir().join("libzmem_region.so");
    std::os::unix::fs::symlink(&so, dir.join("libzmem_region.so.0")).unwrap();
    std::os::unix::fs::symlink(&so, dir.join("libzmem_region.so")).unwrap();
    let bin = out_dir().join("test_region_shared");
    run(Command::new("cc")
        .args(CFLAGS)
        .arg("-I")
        .arg(include_dir())
        .arg(c_test_source())
        .arg("-pthread")
        .arg(format!("-L{}", dir.display()))
        .arg("-lzmem_region")
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .arg("-o")
        .arg(&bin));
    let ldd = run(Command::new("ldd").arg(&bin));
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    let wanted = format!("libzmem_region.so.0 => {}", dir.display());
    assert!(ldd.contains(&wanted), "{ldd}");
    print!("{}", run_c_test(&mut Command::new(&bin)));
}

#[test]
fn installed_library_works_through_pkg_config() {
    if !have_cc() {
        return;
    }
    if !have("pkg-config") {
        eprintln!("SKIPPED: pkg-config is not installed (scripts/install-deps installs it)");
        return;
    }
    let prefix = out_dir().join("prefix");
    let _ = std::fs::remove_dir_all(&prefix);
    run(Command::new(Path::new(CRATE_DIR).join("install.sh"))
        .arg(&prefix)
        .env("ZMEM_REGION_LIBDIR", lib_dir()));
    for f in [
        "include/zmem_region.h",
        "lib/libzmem_region.a",
        "lib/libzmem_region.so",
        "lib/libzmem_region.so.0",
    ] {
        assert!(prefix.join(f).exists(), "{f} not installed");
    }
    let pc_path = prefix.join("lib/pkgconfig");
    let flags = run(Command::new("pkg-config")
        .args(["--cflags", "--libs", "zmem_region"])
        .env("PKG_CONFIG_PATH", &pc_path));
    let flags = String::from_utf8(flags.stdout).unwrap();
    let flags: Vec<&str> = flags.split_whitespace().collect();
    let include = format!("-I{}", prefix.join("include").display());
    let libs = format!("-L{}", prefix.join("lib").display());
    assert!(flags.contains(&include.as_str()), "{flags:?}");
    assert!(flags.contains(&libs.as_str()), "{flags:?}");
    assert!(flags.contains(&"-lzmem_region"), "{flags:?}");
    let version = run(Command::new("pkg-config")
        .args(["--modversion", "zmem_region"])
        .env("PKG_CONFIG_PATH", &pc_path));
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        env!("CARGO_PKG_VERSION")
    );
    // The header compiles and the library links the way a user would; the
    // C test itself ran against the same files above.
    let src = out_dir().join("installed.c");
    std::fs::write(
        &src,
        "#include <zmem_region.h>\n\
         int main(void) { zmem_region_free((struct zmem_region *)0); return 0; }\n",
    )
    .unwrap();
    let bin = out_dir().join("installed");
    run(Command::new("cc")
        .args(CFLAGS)
        .arg(&src)
        .arg("-pthread")
        .args(&flags)
        .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()))
        .arg("-o")
        .arg(&bin));
    run(&mut Command::new(&bin));
    let ldd = run(Command::new("ldd").arg(&bin));
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    let wanted = format!("libzmem_region.so.0 => {}", prefix.join("lib").display());
    assert!(ldd.contains(&wanted), "{ldd}");
}
