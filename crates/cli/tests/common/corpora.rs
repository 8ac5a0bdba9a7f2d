//! The corpora the tests against a guest's kernel share (vm_kernel73,
//! vm_zswap73): an excerpt of the Linux source tar, the system's binaries,
//! the memory of a python3 process's core dump, each made in a folder the
//! caller gives (one the guest sees), and the pair of tests each such file
//! runs on them. Owns only the making of these files, and of their parts
//! other tests use too (the binaries, a gcore dump).

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The first `bytes` of the Linux 6.1 source tar (Debian's
/// linux-source-6.1), the text workload of scripts/make-corpus.
pub fn linux_excerpt(path: &Path, bytes: usize) -> Result<(), String> {
    let tar = Path::new("/usr/src/linux-source-6.1.tar.xz");
    if !tar.exists() {
        return Err(format!("{} is missing (linux-source-6.1)", tar.display()));
    }
    let mut xz = Command::new("xz")
        .arg("-dc")
        .arg(tar)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("xz: {e}"))?;
    let mut data = vec![0u8; bytes];
    let read = xz.stdout.take().unwrap().read_exact(&mut data);
    let _ = xz.kill();
    let _ = xz.wait();
    read.map_err(|e| format!("xz -dc {}: {e}", tar.display()))?;
    fs::write(path, data).unwrap();
    Ok(())
}

/// The system's binaries (`/usr/bin`), whole files in name order, up to
/// the first that reaches `bytes` in all.
pub fn usr_bin(bytes: usize) -> Vec<u8> {
    let mut entries: Vec<_> = fs::read_dir("/usr/bin")
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    let mut data = Vec::new();
    for p in entries {
        if data.len() >= bytes {
            break;
        }
        if let Ok(b) = fs::read(&p) {
            data.extend_from_slice(&b);
        }
    }
    data
}

/// About `bytes` of the system's binaries, whole files in name order, cut
/// to `bytes`.
pub fn binaries(path: &Path, bytes: usize) {
    let mut data = usr_bin(bytes);
    data.truncate(bytes);
    fs::write(path, &data).unwrap();
}

/// Dumps process `pid` with gcore to `PREFIX.PID`: that file, or `None`
/// where gcore did not make it (or could not run).
pub fn gcore(prefix: &Path, pid: u32) -> Option<PathBuf> {
    let dumped = Command::new("gcore")
        .arg("-o")
        .arg(prefix)
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let core = PathBuf::from(format!("{}.{pid}", prefix.display()));
    if dumped && core.exists() {
        Some(core)
    } else {
        let _ = fs::remove_file(&core);
        None
    }
}

/// `bytes` of a process's memory from its core dump: a python3 that holds
/// the words of `text` (a list and a dict counting them) is dumped with
/// gcore, and the contents of its largest PT_LOAD segments, largest first,
/// are cut to `bytes`.
pub fn core_memory(path: &Path, text: &Path, bytes: usize) -> Result<(), String> {
    let program = r#"
import sys
words = open(sys.argv[1], 'rb').read().decode('latin-1').split()
counts = {}
for w in words:
    counts[w] = counts.get(w, 0) + 1
kept = [w.upper() for w in words]
print('ready', flush=True)
sys.stdin.read()
"#;
    let mut child = Command::new("python3")
        .args(["-c", program])
        .arg(text)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("python3: {e}"))?;
    let mut line = [0u8; 6];
    let ready = child.stdout.take().unwrap().read_exact(&mut line);
    let core = match ready {
        Ok(()) => gcore(&path.with_extension("core"), child.id()),
        Err(_) => None,
    };
    drop(child.stdin.take());
    let _ = child.kill();
    let _ = child.wait();
    let Some(core) = core else {
        return Err("gcore could not dump a python3 process".into());
    };
    let elf = fs::read(&core).unwrap();
    fs::remove_file(&core).unwrap();
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&elf[..5], b"\x7fELF\x02", "a 64-bit ELF core");
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    let mut segments: Vec<(usize, usize)> = (0..phnum)
        .map(|i| phoff + i * phentsize)
        .filter(|&h| u32::from_le_bytes(elf[h..h + 4].try_into().unwrap()) == 1)
        .map(|h| (u64_at(h + 8), u64_at(h + 32)))
        .filter(|&(_, filesz)| filesz > 0)
        .collect();
    segments.sort_by_key(|&(off, size)| (std::cmp::Reverse(size), off));
    let mut data = Vec::new();
    for (off, size) in segments {
        if data.len() >= bytes {
            break;
        }
        data.extend_from_slice(&elf[off..off + size]);
    }
    if data.len() < bytes {
        return Err(format!("the core holds only {} bytes", data.len()));
    }
    data.truncate(bytes);
    fs::write(path, &data).unwrap();
    Ok(())
}

/// The folder `TEST_MIB` in the tests' target folder (which a guest sees)
/// and the three [`corpora`] of `mib` MiB each in it; `None`, printing
/// why, where a corpus cannot be made (the test then passes without
/// running).
pub fn corpora_or_skip(test: &str, mib: usize) -> Option<(PathBuf, Vec<(String, PathBuf)>)> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{test}_{mib}"));
    fs::create_dir_all(&dir).unwrap();
    match corpora(&dir, mib) {
        Ok(c) => Some((dir, c)),
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}

/// The three corpora of `mib` MiB each, in `dir` (which the guest sees).
pub fn corpora(dir: &Path, mib: usize) -> Result<Vec<(String, PathBuf)>, String> {
    let bytes = mib << 20;
    let linux = dir.join(format!("linux{mib}.bin"));
    linux_excerpt(&linux, bytes)?;
    let bins = dir.join(format!("usr-bin{mib}.bin"));
    binaries(&bins, bytes);
    let core = dir.join(format!("core{mib}.bin"));
    core_memory(&core, &linux, bytes)?;
    Ok(vec![
        ("linux-tar".into(), linux),
        ("usr-bin".into(), bins),
        ("core".into(), core),
    ])
}

/// The two tests of a comparison with a guest's kernel, `$compare(mib,
/// timeout)`: `$test` on 2 MiB corpora within 5 minutes, and `$larger`,
/// ignored (`$how` says how to run it), on 24 MiB corpora within 30.
// Only the tests against a guest's kernel use it.
#[allow(unused_macros)]
macro_rules! on_2_and_24_mib_corpora {
    ($compare:ident: $test:ident, $larger:ident, $how:literal) => {
        #[test]
        fn $test() {
            $compare(2, std::time::Duration::from_secs(300));
        }

        /// The same on 24 MiB corpora.
        #[test]
        #[ignore = $how]
        fn $larger() {
            $compare(24, std::time::Duration::from_secs(1800));
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_2_and_24_mib_corpora;
