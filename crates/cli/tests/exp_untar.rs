//! `zmem exp untar` end to end on a small generated tar (a 2 MB tree with
//! the ten top-level directories the experiment removes), where root,
//! nbdfuse and mkfs.ext4 are there: a row per step per configuration, the
//! figures consistent, and nothing it made left behind (no mount, loop
//! device, FUSE mount, zram device or temporary directory), also when it is
//! interrupted with SIGINT. Elsewhere the command must say in one line what
//! is missing, and the test stops there.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{assert_ok, json, spawn_zmem, zmem};

/// The directories the experiment removes, in its order: the generated
/// tree has each of them.
const DIRS: [&str; 10] = lab::exp::untar::REMOVE;

/// One run at a time: the interrupt test finds its run by its mount.
static SERIAL: Mutex<()> = Mutex::new(());

/// A tar of `src/` holding the ten directories, each with a few files of
/// compressible pseudo-text of varied lengths, and one top-level file; the
/// bytes of the files in the ten directories.
fn make_tar(dir: &Path) -> (PathBuf, u64) {
    let mut bytes = 0;
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let src = dir.join("src");
    for d in DIRS {
        for f in 0..8 {
            let sub = src.join(d).join(format!("sub{}", f % 2));
            fs::create_dir_all(&sub).unwrap();
            let len = 3_000 + (next() % 45_000) as usize;
            let mut text = String::with_capacity(len + 16);
            while text.len() < len {
                text.push_str(&format!("w{} ", next() % 400));
            }
            bytes += text.len() as u64;
            fs::write(sub.join(format!("f{f}.c")), text).unwrap();
        }
    }
    fs::write(src.join("Makefile"), "all:\n").unwrap();
    let tar = dir.join("small.tar");
    let st = Command::new("tar")
        .arg("-C")
        .arg(dir)
        .arg("-cf")
        .arg(&tar)
        .arg("src")
        .status()
        .expect("run tar");
    assert!(st.success());
    (tar, bytes)
}

/// The arguments of `zmem exp untar --tar TAR` followed by `args`.
fn untar<'a>(tar: &'a Path, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["exp", "untar", "--tar", tar.to_str().unwrap()];
    all.extend_from_slice(args);
    all
}

/// Why the experiment cannot run here (its own one-line answer), or `None`.
fn not_runnable(tar: &Path) -> Option<String> {
    let out = zmem(&untar(
        tar,
        &[
            "--config",
            "kernel-compat",
            "--remove",
            "drivers",
            "--size",
            "64M",
            "--settle-ms",
            "100",
            "--no-plot",
        ],
    ));
    assert_ok(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text.lines().next().unwrap_or("");
    line.starts_with("exp untar not run: it needs ")
        .then(|| line.to_string())
}

/// Mount points whose path contains `part`.
fn mounts_with(part: &str) -> Vec<String> {
    fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|m| m.contains(part))
        .map(String::from)
        .collect()
}

/// Loop devices whose backing file is under `dir`.
fn loops_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for e in fs::read_dir("/sys/block").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Ok(back) = fs::read_to_string(e.path().join("loop/backing_file")) {
            if back.trim().starts_with(&*dir.to_string_lossy()) {
                found.push(name);
            }
        }
    }
    found
}

fn assert_gone(work: &Path, zram: Option<u64>) {
    let w = work.to_string_lossy();
    assert!(
        mounts_with(&w).is_empty(),
        "mounts left: {:?}",
        mounts_with(&w)
    );
    assert!(
        loops_under(work).is_empty(),
        "loop devices left: {:?}",
        loops_under(work)
    );
    assert!(!work.exists(), "{w} left");
    if let Some(id) = zram {
        assert!(
            !Path::new(&format!("/sys/block/zram{id}")).exists(),
            "zram{id} left"
        );
    }
}

#[test]
fn every_step_of_every_configuration_and_nothing_left_behind() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (tar, bytes) = make_tar(dir.path());
    let stem = dir.path().join("plot");
    let out = zmem(&untar(
        &tar,
        &[
            "--size",
            "64M",
            "--settle-ms",
            "150",
            "--plot",
            stem.to_str().unwrap(),
            "--format",
            "json",
        ],
    ));
    let r = json(&out);
    if let Some(why) = r["skipped"].as_str() {
        assert!(why.starts_with("exp untar not run: it needs "), "{why}");
        eprintln!("skipped: {why}");
        return;
    }
    let removed: Vec<&str> = r["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert_eq!(removed, DIRS);
    let runs = r["runs"].as_array().unwrap();
    let configs: Vec<&str> = runs.iter().map(|x| x["config"].as_str().unwrap()).collect();
    let skipped = r["skipped"].as_array().unwrap();
    let zmem_configs = ["kernel-compat", "default-no-auto", "default"];
    if configs.len() == 4 {
        assert_eq!(configs[0], "kernel");
    } else {
        assert_eq!(
            skipped.len(),
            1,
            "the kernel's zram is skipped with a reason"
        );
    }
    assert_eq!(&configs[configs.len() - 3..], zmem_configs);
    let mut steps = vec!["untar".to_string()];
    steps.extend(DIRS.iter().map(|d| format!("rm {d}")));
    steps.push("manual compact".into());
    for run in runs {
        let config = run["config"].as_str().unwrap();
        let rows = run["rows"].as_array().unwrap();
        let names: Vec<&str> = rows.iter().map(|x| x["step"].as_str().unwrap()).collect();
        assert_eq!(names, steps, "{config}");
        let orig: Vec<u64> = rows
            .iter()
            .map(|x| x["orig_data_size"].as_u64().unwrap())
            .collect();
        // The files went in, and the removals took their pages out again
        // (the discards reached the device before the figures were read);
        // ext4's own metadata stays.
        assert!(
            orig[0] >= bytes,
            "{config}: {orig:?}, {bytes} bytes of files"
        );
        assert!(
            orig[0] - orig[10] >= bytes * 3 / 4,
            "{config}: {orig:?}, {bytes} bytes"
        );
        for x in rows {
            let (compr, used) = (
                x["compr_data_size"].as_u64().unwrap(),
                x["mem_used_total"].as_u64().unwrap(),
            );
            let ratio = x["overhead_ratio"].as_f64().unwrap();
            assert!(compr > 0 && used > 0, "{config}: {x}");
            assert!(
                (ratio - (used as f64 / compr as f64 - 1.0)).abs() < 1e-9,
                "{config}: {x}"
            );
        }
        let auto = &run["auto_compact"];
        if config == "kernel" {
            assert!(auto.is_null() && run["server_cpu_s"].is_null());
        } else {
            assert!(run["server_cpu_s"].as_f64().unwrap() > 0.0, "{config}");
            let moved = auto["objs_moved"].as_u64().unwrap();
            let trim = auto["objs_moved_trim"].as_u64().unwrap();
            let bound = auto["objs_lower_bound"].as_u64().unwrap();
            // The bound is taken before each step; a step that skips an
            // object a reader holds frees a zspage fewer and may move fewer.
            assert!(trim <= moved, "{config}: {auto}");
            if config == "default" {
                assert!(auto["runs"].as_u64().unwrap() > 0, "{config}: {auto}");
                assert!(bound > 0 && bound <= moved, "{config}: {auto}");
                assert!(
                    auto["pages_freed"].as_u64().unwrap() > 0,
                    "{config}: {auto}"
                );
            } else {
                assert_eq!(auto["runs"].as_u64(), Some(0), "{config}: {auto}");
            }
        }
        let made = &run["made"];
        assert!(
            made["loop_device"].is_string() == (config != "kernel"),
            "{made}"
        );
        assert_gone(
            Path::new(made["work_dir"].as_str().unwrap()),
            made["zram_device"].as_u64(),
        );
    }
    let plot = r["plot"].as_array().unwrap();
    for p in plot {
        assert!(fs::metadata(p.as_str().unwrap()).unwrap().len() > 0);
    }
}

#[test]
fn ctrl_c_takes_everything_down() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (tar, _) = make_tar(dir.path());
    if let Some(why) = not_runnable(&tar) {
        eprintln!("skipped: {why}");
        return;
    }
    let before = mounts_with("/zmem-untar.");
    let child = spawn_zmem(&untar(
        &tar,
        &[
            "--config",
            "default",
            "--size",
            "64M",
            "--settle-ms",
            "3000",
            "--no-plot",
        ],
    ));
    // Wait for its filesystem to be mounted: then every layer is up.
    let deadline = Instant::now() + Duration::from_secs(30);
    let fs_mount = loop {
        let m: Vec<String> = mounts_with("/zmem-untar.")
            .into_iter()
            .filter(|m| m.ends_with("/fs") && !before.contains(m))
            .collect();
        if let [one] = m.as_slice() {
            break one.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the run never mounted its filesystem"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let work = PathBuf::from(fs_mount.trim_end_matches("/fs"));
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("interrupted"), "{err}");
    assert_gone(&work, None);
}
