//! The control commands: zram's sysfs attributes, on a running server.
//!
//! This module owns how a control command runs. Each command is named after
//! the zram attribute it mirrors and reads or writes it the way
//! `cat /sys/block/zramN/ATTR` or `echo VALUE > /sys/block/zramN/ATTR` does:
//! reads answer exactly the file's text (with its trailing newline), writes
//! answer nothing, and bad values fail with the errno the kernel returns.
//! What each command is and in which state of an export it is valid is the
//! table in [`crate::attrs`]; [`execute`] looks the command up there and
//! calls the function for the export's state, or answers the entry's errno
//! for the wrong state. Errors are a [`CtlError`] (in [`crate::ctl_error`]).
//!
//! It does no I/O; the socket is in [`crate::ctl_socket`].

use crate::attrs::{self, Attr, Show, State, Store};
use crate::ctl_error::CtlError;
use crate::registry::{ExportView, Registry};

/// Runs `line` (`COMMAND [VALUE]`) on the export called `export` (`None`:
/// the first). Returns the text a read answers, empty for a write.
pub(crate) fn execute(
    reg: &Registry,
    export: Option<&str>,
    line: &str,
) -> Result<String, CtlError> {
    let line = line.trim();
    let (cmd, arg) = match line.split_once(char::is_whitespace) {
        Some((c, a)) => (c, Some(a.trim())),
        None => (line, None),
    };
    let attr = attrs::find(cmd).ok_or_else(|| {
        CtlError::inval(format!(
            "unknown command {cmd:?}; commands: {}",
            attrs::names().collect::<Vec<_>>().join(" ")
        ))
    })?;
    match (arg, &attr.show, &attr.store) {
        (None, Show::Server(show), _) => Ok(show(reg)),
        (None, Show::Export { before, after }, _) => {
            reg.with_export(export, |name, view| match view {
                ExportView::Uninitialised(settings) => match before {
                    Some(show) => show(settings),
                    None => Err(attr.wrong_state_error(cmd, name, State::Uninitialised)),
                },
                ExportView::Initialised(served) => match after {
                    Some(show) => show(served),
                    None => Err(attr.wrong_state_error(cmd, name, State::Initialised)),
                },
            })
        }
        (Some(v), Show::Server(_), Store::None) => Err(read_only(cmd, v)),
        (v, _, Store::None) => reg.with_export(export, |name, view| {
            let state = state_of(&view);
            match attr.readable(state) {
                true => Err(read_only(cmd, v.unwrap_or_default())),
                false => Err(attr.wrong_state_error(cmd, name, state)),
            }
        }),
        (v, _, Store::Server(store)) => store(reg, export, v.unwrap_or("")).map(|()| String::new()),
        (v, _, Store::Export { .. }) => write(reg, export, attr, cmd, v.unwrap_or("")),
    }
}

/// The state an export's view is in.
fn state_of(view: &ExportView<'_>) -> State {
    match view {
        ExportView::Uninitialised(_) => State::Uninitialised,
        ExportView::Initialised(_) => State::Initialised,
    }
}

/// The error for a value given to a read-only attribute.
fn read_only(cmd: &str, v: &str) -> CtlError {
    CtlError::inval(format!("{cmd} is read-only (got value {v:?})"))
}

/// Writes `v` to the export attribute `attr` (called `cmd`): a setting of an
/// uninitialised export, or its store once initialised.
fn write(
    reg: &Registry,
    export: Option<&str>,
    attr: &Attr,
    cmd: &str,
    v: &str,
) -> Result<String, CtlError> {
    let Store::Export {
        check,
        before,
        after,
    } = &attr.store
    else {
        unreachable!("only export attributes are written here");
    };
    let check = |v: &str| check.map_or(Ok(()), |check| check(v));
    if let Some(set) = before {
        // Taken if the export is uninitialised; an initialised one answers
        // below, from its store.
        if reg.update_settings(export, |settings| {
            check(v)?;
            set(settings, v)
        })? {
            log::info!("ctl: {:?}: {cmd} {v}", export.unwrap_or(""));
            return Ok(String::new());
        }
    }
    reg.with_export(export, |name, view| match view {
        ExportView::Uninitialised(_) => {
            Err(attr.wrong_state_error(cmd, name, State::Uninitialised))
        }
        ExportView::Initialised(served) => {
            check(v)?;
            match after {
                Some(store) => store(served, v).map(|()| String::new()),
                None => Err(attr.wrong_state_error(cmd, name, State::Initialised)),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use nbd::Errno;

    use crate::ctl_error::memparse;
    use std::sync::Arc;

    use super::*;
    use crate::registry::Served;
    use zram::Store;

    fn registry() -> Registry {
        let served = |name: &str| {
            let pool = zalloc::open("zsmalloc", &zalloc::AllocOptions::default()).unwrap();
            let comp = zcomp::Compressor::parse("lz4", "").unwrap();
            Served {
                name: name.to_string(),
                label: "zsmalloc/default/lz4/4K".to_string(),
                store: Arc::new(Store::new(pool, comp, 256).unwrap()),
                policy: None,
            }
        };
        Registry::new(vec![served("a"), served("b")])
    }

    #[test]
    fn reads_answer_the_sysfs_text() {
        let reg = registry();
        let page: Vec<u8> = (0..4096).map(|i| (i % 251) as u8).collect();
        reg.get(Some("b"))
            .unwrap()
            .store
            .write_page(3, &page)
            .unwrap();
        let mm = execute(&reg, Some("b"), "mm_stat").unwrap();
        assert!(mm.starts_with("    4096 "), "{mm:?}");
        assert!(mm.ends_with('\n') && mm.lines().count() == 1);
        assert_eq!(mm.split_whitespace().count(), 9);
        // The default export is the first, which is empty.
        assert!(execute(&reg, None, "mm_stat")
            .unwrap()
            .starts_with("       0 "));
        assert_eq!(
            execute(&reg, None, "io_stat").unwrap(),
            "       0        0 0        0\n"
        );
        assert_eq!(
            execute(&reg, None, "debug_stat").unwrap(),
            "version: 1\n0        0\n"
        );
        assert_eq!(execute(&reg, None, "disksize").unwrap(), "1048576\n");
        assert_eq!(execute(&reg, None, "comp_algorithm").unwrap(), "[lz4]\n");
        assert!(execute(&reg, Some("b"), "classes")
            .unwrap()
            .starts_with(" class  size"));
        let ex = execute(&reg, None, "exports").unwrap();
        assert_eq!(ex.lines().count(), 2);
    }

    #[test]
    fn writes_change_the_store_and_bad_values_are_einval() {
        let reg = registry();
        let store = &reg.get(None).unwrap().store;
        assert_eq!(execute(&reg, None, "mem_limit 64M").unwrap(), "");
        assert_eq!(store.mem_limit(), 64 << 20);
        assert_eq!(execute(&reg, None, "mem_limit 0").unwrap(), "");
        assert_eq!(store.mem_limit(), 0);
        let page: Vec<u8> = (0..4096).map(|i| (i % 13) as u8 ^ (i / 97) as u8).collect();
        store.write_page(0, &page).unwrap();
        assert_eq!(execute(&reg, None, "idle all").unwrap(), "");
        assert!(store.slot_info(0).unwrap().idle);
        assert_eq!(execute(&reg, None, "idle 3600").unwrap(), "");
        assert_eq!(execute(&reg, None, "compact").unwrap(), "");
        assert_eq!(
            execute(&reg, None, "auto_compact").unwrap(),
            "off cpu=5 min_gain=32 min_gain_percent=0.5 limit=90 pressure=10 postpone_ms=2000\n"
        );
        assert_eq!(
            execute(&reg, None, "auto_compact on cpu=2 min_gain=8").unwrap(),
            ""
        );
        assert!(store.auto_compact_running());
        assert_eq!(store.auto_compact().cpu_percent, 2.0);
        assert!(execute(&reg, None, "debug_stat")
            .unwrap()
            .contains("\nauto_compact: wakeups "));
        assert_eq!(execute(&reg, None, "auto_compact off").unwrap(), "");
        assert!(!store.auto_compact_running());
        // The retained share: default mode keeps 1/8 of its pages.
        assert_eq!(execute(&reg, None, "retain_divisor").unwrap(), "8\n");
        let (_, bound) = store.retained_bytes();
        assert_eq!(execute(&reg, None, "retain_divisor 0").unwrap(), "");
        assert_eq!(store.retain_divisor(), 0);
        assert_eq!(store.retained_bytes().1, 1 << 20, "the fixed cache only");
        assert!(bound >= 1 << 20);
        assert_eq!(execute(&reg, None, "retain_divisor 8").unwrap(), "");
        assert_eq!(execute(&reg, None, "retain_divisor").unwrap(), "8\n");
        assert_eq!(execute(&reg, None, "mem_used_max 0").unwrap(), "");
        assert_eq!(execute(&reg, None, "reset").unwrap(), "");
        assert_eq!(store.mm_stat().orig_data_size, 0);
        for bad in [
            "mem_limit",
            "mem_limit 12Q",
            "mem_used_max 5",
            "idle",
            "idle soon",
            "reset 0",
            "mm_stat 1",
            "auto_compact sometimes",
            "auto_compact cpu=0",
            "auto_compact min_gain=0",
            "retain_divisor -1",
            "retain_divisor 1048577",
            "retain_divisor some",
            "frobnicate",
        ] {
            let e = execute(&reg, None, bad).unwrap_err();
            assert_eq!(e.errno.name(), "EINVAL", "{bad}: {e}");
        }
        assert_eq!(
            execute(&reg, Some("zz"), "mm_stat")
                .unwrap_err()
                .errno
                .name(),
            "ENOENT"
        );
    }

    /// A sparse 64-page backing file in a temporary directory, removed with
    /// the directory guard (also when a test fails).
    fn backing_file() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("backing");
        std::fs::File::create(&path)
            .unwrap()
            .set_len(64 * 4096)
            .unwrap();
        (dir, path)
    }

    #[test]
    fn writeback_and_recompression_commands_use_the_sysfs_names() {
        let reg = registry();
        let (_dir, path) = backing_file();
        let run = |line: &str| execute(&reg, None, line);
        assert_eq!(run("backing_dev").unwrap(), "none\n");
        assert_eq!(run("writeback idle").unwrap_err().errno.name(), "ENODEV");
        assert_eq!(
            run("backing_dev /nonexistent/zmem")
                .unwrap_err()
                .errno
                .name(),
            "ENOENT"
        );
        run(&format!("backing_dev {}", path.display())).unwrap();
        assert_eq!(run("backing_dev").unwrap(), format!("{}\n", path.display()));
        run("recomp_algorithm algo=zstd priority=1").unwrap();
        assert_eq!(run("recomp_algorithm").unwrap(), "#1: [zstd]\n");
        let store = &reg.get(None).unwrap().store;
        let page: Vec<u8> = (0..4096).map(|i| (i % 13) as u8 ^ (i / 97) as u8).collect();
        for i in 0..4 {
            store.write_page(i, &page).unwrap();
        }
        assert_eq!(
            run(&format!("backing_dev {}", path.display()))
                .unwrap_err()
                .errno
                .name(),
            "EBUSY"
        );
        assert_eq!(
            run("recomp_algorithm algo=deflate priority=2")
                .unwrap_err()
                .errno
                .name(),
            "EBUSY"
        );
        run("idle all").unwrap();
        assert!(run("block_state")
            .unwrap()
            .lines()
            .all(|l| l.ends_with(" ...i..")));
        run("recompress type=idle").unwrap();
        assert_eq!(run("writeback_batch_size").unwrap(), "32\n");
        run("writeback_batch_size 8").unwrap();
        assert_eq!(run("writeback_batch_size").unwrap(), "8\n");
        run("writeback_limit_enable 1").unwrap();
        run("writeback_limit 2").unwrap();
        run("idle all").unwrap();
        assert_eq!(run("writeback idle").unwrap_err().errno.name(), "EIO");
        assert_eq!(run("writeback_limit").unwrap(), "0\n");
        assert_eq!(run("writeback_limit_enable").unwrap(), "1\n");
        assert_eq!(run("bd_stat").unwrap(), "       2        0        2\n");
        assert_eq!(
            run("block_state")
                .unwrap()
                .lines()
                .filter(|l| l.contains(".w"))
                .count(),
            2
        );
        for (bad, errno) in [
            ("writeback sleepy", "EINVAL"),
            ("writeback page_index=256", "ERANGE"),
            ("recompress priority=5", "EINVAL"),
            ("recompress type=cold", "EINVAL"),
            ("recompress idle", "EINVAL"),
            ("writeback_limit x", "EINVAL"),
            ("writeback_batch_size 0", "EINVAL"),
            ("writeback_batch_size 257", "EINVAL"),
            ("writeback_batch_size x", "EINVAL"),
            ("bd_stat 1", "EINVAL"),
        ] {
            assert_eq!(run(bad).unwrap_err().errno.name(), errno, "{bad}");
        }
    }

    #[test]
    fn compressed_writeback_is_a_setting_before_the_first_write() {
        let reg = registry();
        let (_dir, path) = backing_file();
        let run = |line: &str| execute(&reg, None, line);
        // The released name and the old one are one attribute.
        assert_eq!(run("compressed_writeback").unwrap(), "0\n");
        assert_eq!(run("writeback_compressed").unwrap(), "0\n");
        for bad in ["compressed_writeback maybe", "writeback_compressed maybe"] {
            let e = run(bad).unwrap_err();
            assert_eq!(e.errno, Errno::EINVAL, "{bad}");
            assert_eq!(
                e.message, "compressed_writeback takes 0 or 1, not \"maybe\"",
                "{bad}"
            );
        }
        run("writeback_compressed 1").unwrap();
        assert_eq!(run("compressed_writeback").unwrap(), "1\n");
        run("compressed_writeback 0").unwrap();
        assert_eq!(run("writeback_compressed").unwrap(), "0\n");
        run("compressed_writeback 1").unwrap();
        assert_eq!(run("writeback_compressed").unwrap(), "1\n");
        run(&format!("backing_dev {}", path.display())).unwrap();
        let store = &reg.get(None).unwrap().store;
        let page: Vec<u8> = (0..4096).map(|i| b"zmem packs objects "[i % 19]).collect();
        for i in 0..8 {
            store.write_page(i, &page).unwrap();
        }
        for name in ["writeback_compressed", "compressed_writeback"] {
            assert_eq!(
                run(&format!("{name} 0")).unwrap_err().errno,
                Errno::EBUSY,
                "{name}: set only before the store holds data"
            );
        }
        run("idle all").unwrap();
        run("writeback idle").unwrap();
        // Eight small objects share one block.
        assert_eq!(run("bd_stat").unwrap(), "       1        0        1\n");
        let mut back = vec![0; 4096];
        for i in 0..8 {
            store.read_page(i, &mut back).unwrap();
            assert!(back == page, "page {i}");
        }
    }

    #[test]
    fn memparse_takes_kernel_suffixes() {
        assert_eq!(memparse("0").unwrap(), 0);
        assert_eq!(memparse("4k").unwrap(), 4096);
        assert_eq!(memparse("2G").unwrap(), 2 << 30);
        for (text, bytes) in [("1K", 1u64 << 10), ("1m", 1 << 20), ("3T", 3 << 40)] {
            assert_eq!(memparse(text).unwrap(), bytes, "{text}");
        }
        assert_eq!(memparse("1P").unwrap(), 1 << 50);
        assert_eq!(memparse("2e").unwrap(), 2 << 60);
        assert!(memparse("").is_err());
        assert!(memparse("16E").is_err(), "past u64");
        assert!(memparse("99999999999999E").is_err());
    }
}
