//! Builds the Linux kernel's own LZO code (lib/lzo: the safe decoder and the
//! LZO1X-1 / lzo-rle compressor) in user space, as the reference the speed
//! tool times zmem-lzo against. The kernel's files are GPL-2.0 and are not
//! in zmem's tree: they are read from the kernel source named by
//! ZMEM_KERNEL_SRC (a directory holding lib/lzo), else extracted from
//! Debian's linux-source package (/usr/src/linux-source-*.tar.xz) into
//! OUT_DIR. Without either, the tool runs without the kernel's columns.
//! Only kernel-shim/ (zmem's own few definitions) is zmem's.

use std::path::{Path, PathBuf};
use std::process::Command;

fn kernel_source(out: &Path) -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("ZMEM_KERNEL_SRC") {
        return Some(PathBuf::from(dir));
    }
    let mut tars: Vec<PathBuf> = std::fs::read_dir("/usr/src")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("linux-source-") && n.ends_with(".tar.xz"))
        })
        .collect();
    tars.sort();
    let tar = tars.pop()?;
    let top = tar
        .file_name()?
        .to_str()?
        .trim_end_matches(".tar.xz")
        .to_string();
    let dir = out.join(&top);
    if !dir.join("lib/lzo/lzo1x_decompress_safe.c").exists() {
        let ok = Command::new("tar")
            .arg("-xJf")
            .arg(&tar)
            .arg("-C")
            .arg(out)
            .arg("--wildcards")
            .arg(format!("{top}/lib/lzo/*"))
            .status()
            .ok()?
            .success();
        if !ok {
            return None;
        }
    }
    Some(dir)
}

fn main() {
    println!("cargo:rerun-if-env-changed=ZMEM_KERNEL_SRC");
    println!("cargo:rerun-if-changed=kernel-shim");
    println!("cargo::rustc-check-cfg=cfg(kernel_lzo)");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let Some(src) = kernel_source(&out) else {
        println!("cargo:warning=no kernel source (ZMEM_KERNEL_SRC or /usr/src/linux-source-*.tar.xz): no kernel columns");
        return;
    };
    let lzo = src.join("lib/lzo");
    // As the kernel builds them: -O2, no strict aliasing; the two public
    // entry points renamed so that they cannot clash with another library.
    cc::Build::new()
        .file(lzo.join("lzo1x_decompress_safe.c"))
        .file(lzo.join("lzo1x_compress.c"))
        .include("kernel-shim")
        .include(&lzo)
        .flag("-include")
        .flag("kernel-shim/kshim.h")
        .define("STATIC", None)
        .define("lzo1x_decompress_safe", "kernel_lzo1x_decompress_safe")
        .define("lzorle1x_1_compress", "kernel_lzorle1x_1_compress")
        .define("lzo1x_1_compress", "kernel_lzo1x_1_compress")
        .opt_level(2)
        .flag("-fno-strict-aliasing")
        .warnings(false)
        .compile("kernel_lzo");
    println!("cargo:rustc-cfg=kernel_lzo");
}
