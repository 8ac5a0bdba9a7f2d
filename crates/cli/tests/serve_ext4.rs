//! A real kernel filesystem on a `zmem serve` export: nbdfuse exposes the
//! export as a file, losetup makes it a block device, mkfs.ext4 and mount
//! put ext4 on it; a directory tree is copied in, the whole stack is taken
//! down and brought up again (so nothing is read from a page cache), and
//! the tree is compared file by file. Deleting it and running fstrim then
//! frees the pages in the store.
//!
//! Needs root, /dev/fuse, a free loop device and nbdfuse, losetup,
//! mkfs.ext4, mount and umount; prints SKIP and passes where the machine
//! does not allow it.

mod serve_common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serve_common::Zmem;
use testkit::clients::{run_tool, tool};

fn skip(why: &str) {
    eprintln!("SKIP: {why}");
}

/// Runs a command; `Err` with its output if it fails.
fn sh(prog: &str, args: &[&str]) -> Result<String, String> {
    let o = run_tool(prog, args);
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        Err(format!(
            "{prog} {args:?}: {}: {}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ))
    }
}

/// nbdfuse, a loop device and a mount, taken down in reverse order when
/// dropped (also when the test fails half way).
struct Stack {
    fuse_dir: PathBuf,
    fs_dir: PathBuf,
    nbdfuse: Option<Child>,
    loop_dev: Option<String>,
    mounted: bool,
}

impl Stack {
    fn up(z: &Zmem, tag: &str, mkfs: bool) -> Result<Stack, String> {
        let fuse_dir = z.file(&format!("fuse-{tag}"));
        let fs_dir = z.file(&format!("fs-{tag}"));
        fs::create_dir_all(&fuse_dir).map_err(|e| e.to_string())?;
        fs::create_dir_all(&fs_dir).map_err(|e| e.to_string())?;
        let pid = z.file(&format!("nbdfuse-{tag}.pid"));
        let disk = fuse_dir.join("disk");
        let child = Command::new(tool("nbdfuse").ok_or("no nbdfuse")?)
            .arg("-P")
            .arg(&pid)
            .arg(&disk)
            .arg(z.uri("zram0"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        let mut stack = Stack {
            fuse_dir,
            fs_dir,
            nbdfuse: Some(child),
            loop_dev: None,
            mounted: false,
        };
        let start = Instant::now();
        while !(pid.exists() && disk.exists()) {
            if let Some(c) = stack.nbdfuse.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    stack.nbdfuse = None;
                    return Err(format!("nbdfuse exited: {st}"));
                }
            }
            if start.elapsed() > Duration::from_secs(60) {
                return Err("nbdfuse did not come up".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let dev = sh("losetup", &["-f", "--show", &disk.to_string_lossy()])?;
        stack.loop_dev = Some(dev.trim().to_string());
        let dev = dev.trim();
        if mkfs {
            sh("mkfs.ext4", &["-q", "-F", "-E", "nodiscard", dev])?;
        }
        sh("mount", &[dev, &stack.fs_dir.to_string_lossy()])?;
        stack.mounted = true;
        Ok(stack)
    }

    fn root(&self) -> &Path {
        &self.fs_dir
    }

    fn down(&mut self) {
        if self.mounted {
            if sh("umount", &[&self.fs_dir.to_string_lossy()]).is_err() {
                let _ = sh("umount", &["-l", &self.fs_dir.to_string_lossy()]);
            }
            self.mounted = false;
        }
        if let Some(dev) = self.loop_dev.take() {
            let _ = sh("losetup", &["-d", &dev]);
        }
        if let Some(mut c) = self.nbdfuse.take() {
            let dir = self.fuse_dir.to_string_lossy().into_owned();
            if sh("umount", &[&dir]).is_err() {
                let _ = sh("fusermount3", &["-u", &dir]);
            }
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(60) {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.down();
    }
}

/// The tree to copy: a few MiB of headers (many small files) and
/// documentation, whichever exist.
fn source_trees() -> Vec<PathBuf> {
    [
        "/usr/include/linux",
        "/usr/include/c++",
        "/usr/share/doc/git",
    ]
    .iter()
    .map(PathBuf::from)
    .filter(|p| p.is_dir())
    .collect()
}

/// Compares two trees: the same entries, file contents, symlink targets.
/// Returns the number of regular files compared.
fn compare_trees(a: &Path, b: &Path) -> Result<usize, String> {
    let mut files = 0;
    let mut entries: Vec<PathBuf> = fs::read_dir(a)
        .map_err(|e| format!("{}: {e}", a.display()))?
        .map(|e| e.map(|e| e.path()).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    let count_b = fs::read_dir(b).map_err(|e| e.to_string())?.count();
    if count_b != entries.len() {
        return Err(format!(
            "{} has {} entries, {} has {count_b}",
            a.display(),
            entries.len(),
            b.display()
        ));
    }
    for pa in entries {
        let pb = b.join(pa.file_name().ok_or("no name")?);
        let ma = fs::symlink_metadata(&pa).map_err(|e| e.to_string())?;
        let mb = fs::symlink_metadata(&pb).map_err(|e| format!("{}: {e}", pb.display()))?;
        if ma.file_type().is_symlink() {
            if fs::read_link(&pa).ok() != fs::read_link(&pb).ok() {
                return Err(format!("symlink {} differs", pb.display()));
            }
        } else if ma.is_dir() {
            if !mb.is_dir() {
                return Err(format!("{} is not a directory", pb.display()));
            }
            files += compare_trees(&pa, &pb)?;
        } else if ma.is_file() {
            let da = fs::read(&pa).map_err(|e| e.to_string())?;
            let db = fs::read(&pb).map_err(|e| e.to_string())?;
            if da != db {
                return Err(format!("{} differs", pb.display()));
            }
            files += 1;
        }
    }
    Ok(files)
}

#[test]
fn ext4_on_nbdfuse_and_a_loop_device() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip("not root (losetup and mount need it)");
    }
    if !Path::new("/dev/fuse").exists() {
        return skip("no /dev/fuse");
    }
    for t in ["nbdfuse", "losetup", "mkfs.ext4", "mount", "umount"] {
        if tool(t).is_none() {
            return skip(&format!("{t} is not installed"));
        }
    }
    if sh("losetup", &["-f"]).is_err() {
        return skip("no free loop device");
    }
    let trees = source_trees();
    if trees.is_empty() {
        return skip("no directory tree to copy");
    }

    let z = Zmem::start(&["--size", "256M", "--comp", "zstd"]);
    let mut stack = match Stack::up(&z, "a", true) {
        Ok(s) => s,
        Err(e) if e.contains("losetup") || e.contains("fuse") => {
            return skip(&format!("the machine refused: {e}"));
        }
        Err(e) => panic!("{e}\nzmem log:\n{}", z.log()),
    };
    for t in &trees {
        sh(
            "cp",
            &["-a", &t.to_string_lossy(), &stack.root().to_string_lossy()],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    sh("sync", &[]).unwrap();
    stack.down();
    let stored = z.mm_stat("zram0");
    assert!(
        stored[0] > 4 << 20,
        "the filesystem reached the store: {stored:?}"
    );

    // Fresh nbdfuse, loop device and mount: every byte comes from zmem.
    let mut stack = Stack::up(&z, "b", false).unwrap_or_else(|e| panic!("{e}"));
    let mut files = 0;
    for t in &trees {
        let name = t.file_name().unwrap();
        files += compare_trees(t, &stack.root().join(name)).unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(files > 100, "compared {files} files");

    // Deleting the tree and trimming the filesystem frees the store's pages.
    for t in &trees {
        let name = t.file_name().unwrap();
        fs::remove_dir_all(stack.root().join(name)).unwrap();
    }
    sh("sync", &[]).unwrap();
    if tool("fstrim").is_some() {
        if let Err(e) = sh("fstrim", &[&stack.root().to_string_lossy()]) {
            eprintln!("fstrim not supported here: {e}");
        } else {
            let after = z.mm_stat("zram0");
            assert!(
                after[0] < stored[0],
                "fstrim freed pages: {stored:?} -> {after:?}"
            );
        }
    }
    stack.down();
    eprintln!(
        "ext4 on zmem: {files} files compared; mm_stat after the copy: {:?}",
        stored
    );
}
