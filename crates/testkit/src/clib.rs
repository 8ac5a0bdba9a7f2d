//! The harness of the two C libraries' tests (`zmem-capi`'s libzsmalloc and
//! `zmem-region-capi`'s libzmem_region): finding the `.a` and `.so` this
//! very `cargo test` built, compiling the header strictly, comparing the
//! header's functions with the library's exports, building the C test
//! program (its checks in `c/check.h` beside this crate's manifest) and
//! reading its summary line, and installing the library with
//! `scripts/install-clib` to check its pkg-config file and soname.
//!
//! What each library's program checks stays in that crate's `tests/c/`.
//!
//! # Finding the fresh libraries
//!
//! The C program must link the libraries built from this tree, not an
//! installed or stale copy. Cargo builds a crate's library with every crate
//! type in its manifest (`cdylib`, `staticlib`, `rlib`) before it links any
//! integration test, into the profile's `deps/` directory: the directory
//! holding the test's own executable. So [`CLibrary::lib_dir`] looks next
//! to `std::env::current_exe()` (then in the profile directory above it,
//! where cargo also copies them). Other ways are worse: a `build.rs` runs
//! *before* the library exists, a nested `cargo build` would wait on the
//! build-directory lock the `cargo test` holds, and the `cc` crate is for
//! build scripts.
//!
//! The C compiler is the system's `cc`; without it the tests print why and
//! pass ([`have_cc`]). valgrind and pkg-config come from
//! `scripts/install-deps`; the tests that need them say so and pass without.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Libraries the Rust standard library inside a static library needs
/// (`rustc --print native-static-libs`, with the static unwinder
/// `-lgcc_eh` for its `-lgcc_s`, which `cc -static` cannot link; also
/// `Libs.private` in the .pc files).
pub const NATIVE_LIBS: &[&str] = &[
    "-lgcc_eh",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-ldl",
    "-lc",
];

/// Warnings are errors for everything compiled here.
pub const CFLAGS: &[&str] = &[
    "-std=c99",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-pedantic",
    "-O1",
    "-g",
];

/// Whether `tool --version` runs and succeeds.
pub fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether the system's `cc` is there; says once why the tests pass
/// without it.
pub fn have_cc() -> bool {
    static CC: OnceLock<bool> = OnceLock::new();
    *CC.get_or_init(|| {
        let ok = have("cc");
        if !ok {
            eprintln!("SKIPPED: no C compiler `cc` on PATH (scripts/install-deps installs one)");
        }
        ok
    })
}

/// Whether `tool` is there; prints a `SKIPPED:` line naming it when not.
pub fn have_or_skip(tool: &str, from: &str) -> bool {
    let ok = have(tool);
    if !ok {
        eprintln!("SKIPPED: {tool} is not installed ({from})");
    }
    ok
}

/// Runs `cmd`, which must exit with one of `codes` (panics with its output
/// otherwise).
pub fn run_expecting(cmd: &mut Command, codes: &[i32]) -> Output {
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

/// Runs `cmd`, which must succeed.
pub fn run(cmd: &mut Command) -> Output {
    run_expecting(cmd, &[0])
}

/// The stdout of `ldd BIN`.
pub fn ldd(bin: &Path) -> String {
    String::from_utf8_lossy(&run(Command::new("ldd").arg(bin)).stdout).into_owned()
}

/// The count of passed checks on the C program's last line, `c_api: N
/// passed, 0 failed` (panics on any other last line).
pub fn passed_checks(stdout: &str) -> u32 {
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("c_api: ") && last.ends_with(" passed, 0 failed"),
        "unexpected end of output: {stdout}"
    );
    last.trim_start_matches("c_api: ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count of passed checks")
}

/// The [`CLibrary`] of the crate whose integration test this is expanded
/// in (its manifest directory and scratch directory), given the name cargo
/// writes its files under, the name it installs as, its functions' prefix
/// and its C test program.
#[macro_export]
macro_rules! c_library {
    ($built:expr, $name:expr, $prefix:expr, $test_source:expr) => {
        $crate::clib::CLibrary {
            crate_dir: env!("CARGO_MANIFEST_DIR"),
            tmp_dir: env!("CARGO_TARGET_TMPDIR"),
            built: $built,
            name: $name,
            prefix: $prefix,
            test_source: $test_source,
        }
    };
}

/// One of the C libraries, as its crate's tests describe it.
#[derive(Debug, Clone, Copy)]
pub struct CLibrary {
    /// The crate's directory (its `CARGO_MANIFEST_DIR`).
    pub crate_dir: &'static str,
    /// The test's scratch directory (its `CARGO_TARGET_TMPDIR`).
    pub tmp_dir: &'static str,
    /// The name cargo gives its files: `lib{built}.a` and `.so`.
    pub built: &'static str,
    /// The name it installs as: `lib{name}`, `{name}.h`, `{name}.pc`.
    pub name: &'static str,
    /// What every function the header declares starts with.
    pub prefix: &'static str,
    /// The C test program, relative to the crate.
    pub test_source: &'static str,
}

impl CLibrary {
    /// The crate's `include/` directory.
    pub fn include_dir(&self) -> PathBuf {
        Path::new(self.crate_dir).join("include")
    }

    /// The C test program's source.
    pub fn test_source(&self) -> PathBuf {
        Path::new(self.crate_dir).join(self.test_source)
    }

    /// The directory of `check.h`, the test programs' checks.
    pub fn check_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("c")
    }

    /// The directory with the freshly built `.a` and `.so`.
    pub fn lib_dir(&self) -> PathBuf {
        let exe = std::env::current_exe().expect("test executable path");
        let deps = exe.parent().expect("deps dir").to_path_buf();
        let profile = deps.parent().expect("profile dir").to_path_buf();
        let (a, so) = (self.file("a"), self.file("so"));
        for dir in [deps, profile] {
            if dir.join(&a).is_file() && dir.join(&so).is_file() {
                return dir;
            }
        }
        panic!(
            "{a}/.so not found next to {}: cargo should have built them",
            exe.display()
        );
    }

    /// `lib{built}.{ext}`.
    pub fn file(&self, ext: &str) -> String {
        format!("lib{}.{ext}", self.built)
    }

    /// A scratch directory for the test's outputs.
    pub fn out_dir(&self) -> PathBuf {
        let dir = Path::new(self.tmp_dir).join(format!("clib-{}", self.name));
        std::fs::create_dir_all(&dir).expect("create the scratch dir");
        dir
    }

    /// Compiles `main_body` (the body of `int main(void)`) after including
    /// the header twice, with every warning that matters an error.
    pub fn compile_header_strictly(&self, main_body: &str) {
        let dir = self.out_dir();
        let src = dir.join("header_only.c");
        let h = self.name;
        std::fs::write(
            &src,
            format!("#include <{h}.h>\n#include <{h}.h>\nint main(void) {{ {main_body} }}\n"),
        )
        .expect("write the header test");
        run(Command::new("cc")
            .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"])
            .args([
                "-Wstrict-prototypes",
                "-Wmissing-prototypes",
                "-Wconversion",
            ])
            .arg("-I")
            .arg(self.include_dir())
            .arg("-c")
            .arg(&src)
            .arg("-o")
            .arg(dir.join("header_only.o")));
    }

    /// The functions the header declares (prototypes start in column 0;
    /// comments, macros and `static` inline helpers do not count), sorted.
    pub fn header_functions(&self) -> Vec<String> {
        let path = self.include_dir().join(format!("{}.h", self.name));
        let header = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let mut names: Vec<String> = header
            .lines()
            .filter(|l| {
                !l.starts_with(char::is_whitespace)
                    && !l.starts_with(['/', '#', '}'])
                    && !l.starts_with("static")
            })
            .filter_map(|l| {
                let open = l.find('(')?;
                let name = l[..open].rsplit([' ', '*']).next()?;
                name.starts_with(self.prefix).then(|| name.to_string())
            })
            .collect();
        names.sort();
        names
    }

    /// The functions the fresh `.so` exports whose names start with
    /// `prefix`, sorted; `None` (with a `SKIPPED:` line) without `nm`.
    pub fn exported_functions(&self, prefix: &str) -> Option<Vec<String>> {
        if !have_or_skip("nm", "binutils, from build-essential") {
            return None;
        }
        let out = run(Command::new("nm")
            .args(["-D", "--defined-only"])
            .arg(self.lib_dir().join(self.file("so"))));
        let mut exported: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
                [_, "T", name] if name.starts_with(prefix) => Some(name.to_string()),
                _ => None,
            })
            .collect();
        exported.sort();
        Some(exported)
    }

    /// The header's checks: it compiles strictly around `main_body` (where
    /// there is a C compiler), and declares exactly the `count` functions
    /// the fresh `.so` exports among its symbols starting with
    /// `export_prefix` ([`Self::assert_exports_match_the_header`]).
    pub fn check_header(&self, main_body: &str, count: usize, export_prefix: &str) {
        if have_cc() {
            self.compile_header_strictly(main_body);
        }
        self.assert_exports_match_the_header(count, export_prefix);
    }

    /// Panics unless the header declares `count` functions and the fresh
    /// `.so` exports exactly those among its symbols starting with
    /// `export_prefix` (the export check is skipped, with a line, without
    /// `nm`). The count makes a parser that finds nothing fail.
    pub fn assert_exports_match_the_header(&self, count: usize, export_prefix: &str) {
        let declared = self.header_functions();
        assert_eq!(declared.len(), count, "{declared:?}");
        if let Some(exported) = self.exported_functions(export_prefix) {
            assert_eq!(exported, declared);
        }
    }

    /// `cc` with [`CFLAGS`], the include directories and the C test
    /// program, writing `bin`; the caller adds what it links.
    fn cc_test(&self, bin: &Path) -> Command {
        let mut cc = Command::new("cc");
        cc.args(CFLAGS)
            .arg("-I")
            .arg(self.include_dir())
            .arg("-I")
            .arg(Self::check_dir())
            .arg(self.test_source())
            .arg("-pthread")
            .arg("-o")
            .arg(bin);
        cc
    }

    /// The C test program linked statically against the fresh `.a`, as
    /// `out_dir()/bin_name`.
    pub fn build_static(&self, bin_name: &str) -> PathBuf {
        let bin = self.out_dir().join(bin_name);
        run(self
            .cc_test(&bin)
            .arg(self.lib_dir().join(self.file("a")))
            .args(NATIVE_LIBS));
        bin
    }

    /// The C test program linked against the shared library found in
    /// `dir` (as `-l{name}`, run from there), with any other `flags`.
    pub fn build_shared(&self, bin_name: &str, dir: &Path, flags: &[&str]) -> PathBuf {
        let bin = self.out_dir().join(bin_name);
        run(self
            .cc_test(&bin)
            .arg(format!("-L{}", dir.display()))
            .arg(format!("-l{}", self.name))
            .args(flags)
            .arg(format!("-Wl,-rpath,{}", dir.display())));
        bin
    }

    /// The C test program linked the way a user links a program that
    /// needs no library at run time: `cc -static` with `pkg-config
    /// --static`'s flags for the installed library (`None` where
    /// [`Self::install`] gives none, or glibc's static libraries are
    /// missing, with a `SKIPPED:` line).
    pub fn build_installed_static(&self, bin_name: &str) -> Option<PathBuf> {
        let (prefix, _) = self.install()?;
        let flags = run(Command::new("pkg-config")
            .args(["--static", "--cflags", "--libs", self.name])
            .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")))
        .stdout;
        let flags = String::from_utf8(flags).expect("pkg-config's output is UTF-8");
        let bin = self.out_dir().join(bin_name);
        let mut cmd = self.cc_test(&bin);
        cmd.arg("-static").args(flags.split_whitespace());
        let out = cmd.output().expect("run cc");
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            if err.contains("cannot find -lc") {
                eprintln!("SKIPPED: no static glibc (libc6-dev's libc.a)");
                return None;
            }
            panic!("{cmd:?} failed:\n{err}");
        }
        Some(bin)
    }

    /// Panics unless `bin` loads `lib{name}.so.0` from `dir`.
    pub fn assert_loads_from(&self, bin: &Path, dir: &Path) {
        let ldd = ldd(bin);
        let wanted = format!("lib{}.so.0 => {}", self.name, dir.display());
        assert!(ldd.contains(&wanted), "{ldd}");
    }

    /// The C test program installed the way a user would build it: the
    /// library installed by [`Self::install`], the program linked with
    /// pkg-config's flags and checked to load the installed copy through
    /// its soname. `None` where [`Self::install`] gives none.
    pub fn build_installed(&self, bin_name: &str) -> Option<PathBuf> {
        let (prefix, flags) = self.install()?;
        let lib = prefix.join("lib");
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let bin = self.build_shared(bin_name, &lib, &flags);
        self.assert_loads_from(&bin, &lib);
        Some(bin)
    }

    /// Builds the C test program twice as a user of the installed library
    /// would, and gives each build to `check` to run: linked with
    /// pkg-config's flags against the installed shared library
    /// ([`Self::build_installed`], `{stem}_installed`), and with `cc
    /// -static` and `pkg-config --static`, a program that needs no library
    /// at run time ([`Self::build_installed_static`],
    /// `{stem}_installed_static`). A build this machine has no tools for is
    /// skipped with a `SKIPPED:` line; without a C compiler, both are.
    pub fn check_installed(&self, stem: &str, check: impl Fn(&mut Command)) {
        if !have_cc() {
            return;
        }
        if let Some(bin) = self.build_installed(&format!("{stem}_installed")) {
            check(&mut Command::new(&bin));
        }
        if let Some(bin) = self.build_installed_static(&format!("{stem}_installed_static")) {
            check(&mut Command::new(&bin));
        }
    }

    /// Installs the fresh library under `out_dir()/prefix` with
    /// `scripts/install-clib`, checks the installed files and what
    /// `pkg-config` says of them (the include and library directories, the
    /// library, the crate's version), and returns the prefix and
    /// pkg-config's `--cflags --libs`. `None` (with a `SKIPPED:` line)
    /// without pkg-config.
    pub fn install(&self) -> Option<(PathBuf, Vec<String>)> {
        if !have_or_skip("pkg-config", "scripts/install-deps installs it") {
            return None;
        }
        let prefix = self.out_dir().join("prefix");
        let _ = std::fs::remove_dir_all(&prefix);
        let script = Path::new(self.crate_dir).join("../../scripts/install-clib");
        run(Command::new(script)
            .arg(self.name)
            .arg(&prefix)
            .env("ZMEM_CLIB_LIBDIR", self.lib_dir()));
        let n = self.name;
        for f in [
            format!("include/{n}.h"),
            format!("lib/lib{n}.a"),
            format!("lib/lib{n}.so"),
            format!("lib/lib{n}.so.0"),
        ] {
            assert!(prefix.join(&f).exists(), "{f} not installed");
        }
        let pkg_config = |args: &[&str]| {
            let out = run(Command::new("pkg-config")
                .args(args)
                .arg(n)
                .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")));
            String::from_utf8(out.stdout).expect("pkg-config's output is UTF-8")
        };
        let flags: Vec<String> = pkg_config(&["--cflags", "--libs"])
            .split_whitespace()
            .map(str::to_string)
            .collect();
        for want in [
            format!("-I{}", prefix.join("include").display()),
            format!("-L{}", prefix.join("lib").display()),
            format!("-l{n}"),
        ] {
            assert!(flags.contains(&want), "{want} not in {flags:?}");
        }
        assert_eq!(
            pkg_config(&["--modversion"]).trim(),
            env!("CARGO_PKG_VERSION"),
            "the .pc file's version"
        );
        // `--static` adds what the standard library inside the `.a` needs.
        let static_flags = pkg_config(&["--static", "--libs"]);
        for want in NATIVE_LIBS {
            assert!(
                static_flags.split_whitespace().any(|f| f == *want),
                "{want} not in pkg-config --static --libs: {static_flags}"
            );
        }
        // The installer fills in the placeholders, and nothing else: its
        // comments read as written.
        let pc = prefix.join(format!("lib/pkgconfig/{n}.pc"));
        let text = std::fs::read_to_string(&pc).expect("the installed .pc file");
        let prefix_text = prefix.display().to_string();
        for line in text.lines().filter(|l| l.starts_with('#')) {
            assert!(
                !line.contains(&prefix_text),
                "{}: a comment the installer changed: {line}",
                pc.display()
            );
        }
        Some((prefix, flags))
    }
}
