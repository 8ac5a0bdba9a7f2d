//! Gives the shared library the soname `libzmem_region.so.0`, so programs
//! linked against an installed copy keep working across compatible upgrades
//! (see `scripts/install-clib`, which installs the versioned file and its links).
//!
//! Owns the link arguments of the cdylib; builds no code.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libzmem_region.so.0");
    }
}
