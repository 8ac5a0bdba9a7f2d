//! The C API from C: compiles `include/zsmalloc.h` strictly, builds
//! `tests/c/test_zsmalloc.c` against the libraries this very `cargo test`
//! built, runs it, runs it under valgrind, and installs the library with
//! `install.sh` to check the pkg-config file.
//!
//! # Finding the fresh libraries
//!
//! The C program must link the `libzsmalloc.a`/`.so` built from this tree,
//! not an installed or stale copy. Cargo builds this crate's library, with
//! every crate type in its manifest (`cdylib`, `staticlib`, `rlib`), before
//! it links any integration test, and writes the `.a` and `.so` into the
//! profile's `deps/` directory: the directory holding this test's own
//! executable. So the test looks next to `std::env::current_exe()` (then in
//! the profile directory above it, where cargo also copies them). Other
//! ways are worse: a `build.rs` runs *before* the library exists, a nested
//! `cargo build` would wait on the build-directory lock this `cargo test`
//! holds, and the `cc` crate is for build scripts.
//!
//! The C compiler is the system's `cc`; without it these tests print why
//! and pass. valgrind and pkg-config are installed by `scripts/install-deps`;
//! without them the tests that need them are skipped with a message.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const CRATE_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// Libraries the Rust standard library inside `libzsmalloc.a` needs
/// (`rustc --print native-static-libs`; also `Libs.private` in the .pc file).
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

/// The directory with the freshly built `libzsmalloc_capi.a` and `.so`
/// (installed as libzsmalloc by install.sh).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir").to_path_buf();
    let profile = deps.parent().expect("profile dir").to_path_buf();
    for dir in [deps, profile] {
        if dir.join("libzsmalloc_capi.a").is_file() && dir.join("libzsmalloc_capi.so").is_file() {
            return dir;
        }
    }
    panic!(
        "libzsmalloc_capi.a/.so not found next to {}: cargo should have built them",
        exe.display()
    );
}

/// A scratch directory for this test binary's outputs.
fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("zmem-capi");
    std::fs::create_dir_all(&dir).expect("create the scratch dir");
    dir
}

fn run(cmd: &mut Command) -> Output {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    if !out.status.success() {
        panic!(
            "{shown} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

fn c_test_source() -> PathBuf {
    Path::new(CRATE_DIR).join("tests/c/test_zsmalloc.c")
}

/// The C test linked statically against `libzsmalloc.a`, built once.
fn static_test_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = out_dir().join("test_zsmalloc_static");
        run(Command::new("cc")
            .args(CFLAGS)
            .arg("-I")
            .arg(Path::new(CRATE_DIR).join("include"))
            .arg(c_test_source())
            .arg(lib_dir().join("libzsmalloc_capi.a"))
            .arg("-pthread")
            .args(NATIVE_LIBS)
            .arg("-o")
            .arg(&bin));
        bin
    })
}

/// Checks the C test's output: a clean exit and no failed check.
fn assert_c_test_passed(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("c_api: ") && last.ends_with(" passed, 0 failed"),
        "unexpected end of output: {stdout}"
    );
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
        "#include <zsmalloc.h>\n#include <zsmalloc.h>\n\
         int main(void) { return zs_handle_is_err(0) + zs_handle_err(0); }\n",
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
        .arg(Path::new(CRATE_DIR).join("include"))
        .arg("-c")
        .arg(&src)
        .arg("-o")
        .arg(dir.join("header_only.o")));
}

/// The functions `include/zsmalloc.h` declares (static inline helpers aside).
fn header_functions() -> Vec<String> {
    let header = std::fs::read_to_string(Path::new(CRATE_DIR).join("include/zsmalloc.h")).unwrap();
    let mut names: Vec<String> = header
        .lines()
        .filter(|l| {
            // Prototypes start in column 0; comments, macros and the inline
            // helpers do not count.
            !l.starts_with(char::is_whitespace)
                && !l.starts_with(['/', '#', '}'])
                && !l.starts_with("static")
        })
        .filter_map(|l| {
            let open = l.find('(')?;
            let name = l[..open].rsplit([' ', '*']).next()?;
            name.starts_with("zs_").then(|| name.to_string())
        })
        .collect();
    names.sort();
    names
}

#[test]
fn library_exports_exactly_the_header_functions() {
    let declared = header_functions();
    assert_eq!(declared.len(), 20, "{declared:?}");
    if !have("nm") {
        eprintln!("SKIPPED: nm is not installed (binutils, from build-essential)");
        return;
    }
    let out = run(Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib_dir().join("libzsmalloc_capi.so")));
    let mut exported: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [_, "T", name] if name.starts_with("zs_") => Some(name.to_string()),
            _ => None,
        })
        .collect();
    exported.sort();
    assert_eq!(exported, declared);
}

#[test]
fn c_test_passes() {
    if !have_cc() {
        return;
    }
    let out = run(&mut Command::new(static_test_binary()));
    print!("{}", assert_c_test_passed(&out));
}

#[test]
fn c_test_is_clean_under_valgrind() {
    if !have_cc() {
        return;
    }
    if !have("valgrind") {
        eprintln!("SKIPPED: valgrind is not installed (scripts/install-deps installs it)");
        return;
    }
    let out = run(Command::new("valgrind")
        .args([
            "--leak-check=full",
            "--error-exitcode=1",
            "--errors-for-leak-kinds=all",
        ])
        .arg(static_test_binary()));
    assert_c_test_passed(&out);
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
        .env("ZSMALLOC_LIBDIR", lib_dir()));
    let pc_path = prefix.join("lib/pkgconfig");
    let flags = run(Command::new("pkg-config")
        .args(["--cflags", "--libs", "zsmalloc"])
        .env("PKG_CONFIG_PATH", &pc_path));
    let flags = String::from_utf8(flags.stdout).unwrap();
    let flags: Vec<&str> = flags.split_whitespace().collect();
    let include = format!("-I{}", prefix.join("include").display());
    let libs = format!("-L{}", prefix.join("lib").display());
    assert!(flags.contains(&include.as_str()), "{flags:?}");
    assert!(flags.contains(&libs.as_str()), "{flags:?}");
    assert!(flags.contains(&"-lzsmalloc"), "{flags:?}");
    let version = run(Command::new("pkg-config")
        .args(["--modversion", "zsmalloc"])
        .env("PKG_CONFIG_PATH", &pc_path));
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        env!("CARGO_PKG_VERSION")
    );

    // Link the shared library the way a user would, and run.
    let bin = out_dir().join("test_zsmalloc_shared");
    run(Command::new("cc")
        .args(CFLAGS)
        .arg(c_test_source())
        .arg("-pthread")
        .args(&flags)
        .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()))
        .arg("-o")
        .arg(&bin));
    let out = run(&mut Command::new(&bin));
    assert_c_test_passed(&out);
    // It loaded the installed copy, through its soname.
    let ldd = run(Command::new("ldd").arg(&bin));
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    let wanted = format!("libzsmalloc.so.0 => {}", prefix.join("lib").display());
    assert!(ldd.contains(&wanted), "{ldd}");
}
