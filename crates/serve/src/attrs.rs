//! The control surface's attribute table, in the shape of zram's
//! `DEVICE_ATTR` list (`zram_disk_attrs` in drivers/block/zram/zram_drv.c).
//!
//! This module owns what each control command is: one [`Attr`] per name in
//! [`ATTRS`], with the function that reads it ([`Show`]), the one that
//! writes it ([`Store`]) — either missing makes it write-only or read-only,
//! as the kernel's `DEVICE_ATTR_WO` / `DEVICE_ATTR_RO` do — and the state
//! rule: a function given for an uninitialised export (before `disksize`,
//! reading or writing its [`Settings`]) and one for an initialised export
//! (its store). A command an export's state has no function for fails with
//! the entry's [`Attr::wrong_state`] errno, the kernel's: `EBUSY` for what is
//! fixed once the disk is initialised (`comp_algorithm`), `EINVAL` for what
//! needs a store (`compact`, `idle`, ...). Values are checked before the
//! state, as the kernel parses a value before it takes `init_lock`.
//!
//! | command | kernel attribute | effect |
//! |---|---|---|
//! | `mm_stat`, `io_stat`, `debug_stat` | same | the statistics line(s); `debug_stat` adds an `auto_compact:` line with the background compactor's counters when it is or was on |
//! | `classes` | debugfs `zsmalloc/<pool>/classes` | the allocator's class table |
//! | `disksize`, `comp_algorithm`, `initstate` | same (read) | size in bytes (0 before init), `[algo]`, `1` or `0` |
//! | `disksize SIZE` | `disksize` | initialises an uninitialised export: makes its store (memparse suffixes, rounded up to a 4 KiB page as the kernel's `PAGE_ALIGN`; `EINVAL` for 0, `EBUSY` once initialised) |
//! | `comp_algorithm NAME`, `algorithm_params PARAMS` | same | before init only (`EBUSY` after, as in the kernel): any zcomp name (`EINVAL` otherwise, `E2BIG` for 128 bytes or more), which resets the primary's parameters; `level=N dict=FILE deflate.winbits=N` for it, each write replacing the whole set, checked against the algorithm by `disksize` (Linux 7.x); with `priority=N` (1 to 3) or `algo=NAME` (a secondary's) the parameters of that recompression compressor, taken until the store's first write |
//! | `hot_add NAME [SIZE] [ro]`, `hot_remove NAME` | `/sys/class/zram-control/hot_add`, `hot_remove` | adds an export (uninitialised without SIZE; read-only for its whole life with `ro`) or removes one; `EEXIST`, `EINVAL` for a bad name, `ENOENT`, `EBUSY` while a client is connected to it |
//! | `objs_moved` | (zmem's; from the fine-grained fullness series) | objects moved by compaction |
//! | `compact` | `compact` | compacts the allocator |
//! | `auto_compact [WORDS]` | (zmem's) | reads the background compactor's policy (`on cpu=5 min_gain=32 ...`); writes `on`, `off`, `shrinker` and/or `cpu=PCT min_gain=PAGES min_gain_percent=PCT limit=PCT pressure=AVG10 postpone_ms=MS` |
//! | `retain_divisor [N]` | (zmem's) | the allocator's retained share: freed pages up to one in N of the pages it holds stay resident for reuse (0: only the 1 MiB cache); writing lowers or raises it at once, until `reset` |
//! | `idle all`, `idle N` | `idle` | marks slots idle (all, or unused for N s) |
//! | `reset [1]` | `reset` | frees the store and returns the export to uninitialised with the server's default settings; `EBUSY` while a client is connected to it |
//! | `mem_limit SIZE` | `mem_limit` | K/M/G/T/P/E suffixes (memparse); 0 removes it |
//! | `mem_used_max 0` | `mem_used_max` | resets the maximum to the current use |
//! | `exports` | (none) | one line per export: name, label (`uninitialised` before init), disksize |
//! | `backing_dev [PATH]` | `backing_dev` | the backing file or block device (`none`); set only before the store holds data (`EBUSY`) |
//! | `writeback MODE` | `writeback` | `idle`, `huge`, `huge_idle`, `incompressible`, `type=...`, `page_index=N`, `page_indexes=N-M`; `ENODEV` without a backing_dev |
//! | `writeback_limit [N]`, `writeback_limit_enable [0/1]` | same | the writeback budget in 4 KiB units |
//! | `writeback_batch_size [N]` | same (Linux 7.0) | pages written back with one call, 1 to 256 (32 by default); also a setting before init, as in the kernel |
//! | `compressed_writeback [0/1]` (alias `writeback_compressed`) | same (Linux 7.0, which renamed `writeback_compressed` before its release) | write pages back compressed (zmem packs several objects into a block); set only before the store holds data (`EBUSY`) |
//! | `bd_stat` | `bd_stat` | `bd_count bd_reads bd_writes` in 4 KiB units |
//! | `recomp_algorithm ["algo=NAME priority=N"]` | `recomp_algorithm` | secondary compressors, `#N: [name]` lines |
//! | `recompress PARAMS` | `recompress` | `type=idle\|huge\|huge_idle threshold=N max_pages=N algo=NAME priority=N` |
//! | `block_state` | debugfs `zram/zramN/block_state` | one line per allocated slot: index, access time, flags `swhirn` |
//!
//! An uninitialised export answers reads as zram does before `disksize`
//! (zeros, `initstate 0`, its settings) and takes `mem_limit`,
//! `backing_dev` (the file must open for reading and writing now; it is set
//! up on `disksize`), `recomp_algorithm` and the other settings. On an
//! initialised export, `backing_dev`, `recomp_algorithm`,
//! `compressed_writeback` and a secondary's `algorithm_params` stay writable
//! until its first page write (the store answers `EBUSY` after it), as
//! zmem's stores allow. The exports' life itself (`hot_add`, `disksize`,
//! `reset`, `hot_remove`) is in [`crate::registry`]; the dispatch is in
//! [`crate::control`].

use nbd::Errno;
use zram::IdleCutoff;

use crate::ctl_error::{disksize_bytes, memparse, store_error, CtlError};
use crate::registry::{Registry, Served, Settings};

/// Reads an attribute of an uninitialised export, from its settings.
pub(crate) type ShowSettings = fn(&Settings) -> Result<String, CtlError>;
/// Reads an attribute of an initialised export, from its store.
pub(crate) type ShowStore = fn(&Served) -> Result<String, CtlError>;
/// Reads a server-wide attribute.
pub(crate) type ShowServer = fn(&Registry) -> String;
/// Checks a value before the export's state is looked at.
pub(crate) type Check = fn(&str) -> Result<(), CtlError>;
/// Writes an attribute of an uninitialised export: one of its settings.
pub(crate) type StoreSettings = fn(&mut Settings, &str) -> Result<(), CtlError>;
/// Writes an attribute of an initialised export.
pub(crate) type StoreStore = fn(&Served, &str) -> Result<(), CtlError>;
/// Writes a server-wide attribute or an export's life: the registry, the
/// export named (`None`: the first) and the value.
pub(crate) type StoreServer = fn(&Registry, Option<&str>, &str) -> Result<(), CtlError>;

/// How an attribute is read (`COMMAND` alone).
pub(crate) enum Show {
    /// Write-only (the kernel's `DEVICE_ATTR_WO`).
    None,
    /// An export's attribute: its function in each state (`None`: the
    /// attribute cannot be read in that state).
    Export {
        /// Before `disksize`.
        before: Option<ShowSettings>,
        /// After `disksize`.
        after: Option<ShowStore>,
    },
    /// The server's (in either state of every export).
    Server(ShowServer),
}

/// How an attribute is written (`COMMAND VALUE`; a write-only attribute
/// written without a value is given the empty string).
pub(crate) enum Store {
    /// Read-only (the kernel's `DEVICE_ATTR_RO`).
    None,
    /// An export's attribute.
    Export {
        /// Checks the value first, in either state.
        check: Option<Check>,
        /// Before `disksize`: sets one of the export's settings.
        before: Option<StoreSettings>,
        /// After `disksize`: changes the store.
        after: Option<StoreStore>,
    },
    /// The server's, or an export's life (the registry checks the state).
    Server(StoreServer),
}

/// An export's state, as the table's rules name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Before `disksize` (`initstate 0`).
    Uninitialised,
    /// After `disksize` (`initstate 1`).
    Initialised,
}

/// One control command: a zram attribute (or one of zmem's own).
pub(crate) struct Attr {
    /// The name (the sysfs file's).
    pub name: &'static str,
    /// An older name it also answers to.
    pub alias: Option<&'static str>,
    /// How it is read.
    pub show: Show,
    /// How it is written.
    pub store: Store,
    /// The errno for a command in a state with no function for it: the
    /// kernel's (`EBUSY` once initialised, `EINVAL` before).
    pub wrong_state: Errno,
}

impl Attr {
    /// Whether it answers to `name` (its name or its alias).
    pub(crate) fn is_called(&self, name: &str) -> bool {
        self.name == name || self.alias == Some(name)
    }

    /// Whether it can be read in `state`.
    pub(crate) fn readable(&self, state: State) -> bool {
        match (&self.show, state) {
            (Show::None, _) => false,
            (Show::Server(_), _) => true,
            (Show::Export { before, .. }, State::Uninitialised) => before.is_some(),
            (Show::Export { after, .. }, State::Initialised) => after.is_some(),
        }
    }

    /// Whether it can be written in `state` (for [`Store::Server`] the
    /// registry still checks the export's life).
    #[cfg(test)]
    pub(crate) fn writable(&self, state: State) -> bool {
        match (&self.store, state) {
            (Store::None, _) => false,
            (Store::Server(_), _) => true,
            (Store::Export { before, .. }, State::Uninitialised) => before.is_some(),
            (Store::Export { after, .. }, State::Initialised) => after.is_some(),
        }
    }

    /// The error for `cmd` (its name as given) on the export `export` in
    /// `state`, which has no function for it: [`Attr::wrong_state`].
    pub(crate) fn wrong_state_error(&self, cmd: &str, export: &str, state: State) -> CtlError {
        let message = match state {
            State::Uninitialised => {
                format!("{cmd}: export {export:?} is not initialised (set its disksize first)")
            }
            State::Initialised => {
                format!("cannot change {cmd} of initialised export {export:?}; reset it first")
            }
        };
        CtlError::new(self.wrong_state, message)
    }
}

/// A read in either state.
const fn show(before: ShowSettings, after: ShowStore) -> Show {
    Show::Export {
        before: Some(before),
        after: Some(after),
    }
}

/// A read that needs a store.
const fn show_after(after: ShowStore) -> Show {
    Show::Export {
        before: None,
        after: Some(after),
    }
}

/// A write in either state.
const fn store(before: StoreSettings, after: StoreStore) -> Store {
    Store::Export {
        check: None,
        before: Some(before),
        after: Some(after),
    }
}

/// A write that needs a store.
const fn store_after(after: StoreStore) -> Store {
    Store::Export {
        check: None,
        before: None,
        after: Some(after),
    }
}

/// The name Linux 7.0 released for compressed writeback (its release
/// candidates called it `writeback_compressed`, kept as an alias).
const COMPRESSED_WRITEBACK: &str = "compressed_writeback";

/// The table: every control command, once.
pub(crate) static ATTRS: [Attr; 30] = [
    Attr {
        name: "mm_stat",
        alias: None,
        show: show(
            |s| {
                Ok(line(zram::MmStat {
                    mem_limit: s.mem_limit,
                    ..zram::MmStat::default()
                }))
            },
            |s| Ok(line(s.store.mm_stat())),
        ),
        store: Store::None,
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "io_stat",
        alias: None,
        show: show(
            |_| Ok(line(zram::IoStat::default())),
            |s| Ok(line(s.store.io_stat())),
        ),
        store: Store::None,
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "debug_stat",
        alias: None,
        show: show(
            |_| Ok(line(zram::DebugStat::default())),
            |s| Ok(line(s.store.debug_stat())),
        ),
        store: Store::None,
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "classes",
        alias: None,
        show: show_after(classes),
        store: Store::None,
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "disksize",
        alias: None,
        show: show(|_| Ok(line(0)), |s| Ok(line(s.store.disk_size()))),
        store: Store::Server(disksize),
        wrong_state: Errno::EBUSY,
    },
    Attr {
        name: "comp_algorithm",
        alias: None,
        show: show(
            |s| Ok(format!("[{}]\n", s.comp)),
            |s| Ok(format!("[{}]\n", s.store.compressor().algorithm().name())),
        ),
        store: Store::Export {
            check: Some(check_comp),
            before: Some(set_comp_algorithm),
            after: None,
        },
        wrong_state: Errno::EBUSY,
    },
    Attr {
        name: "initstate",
        alias: None,
        show: show(|_| Ok(line(0)), |_| Ok(line(1))),
        store: Store::None,
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "objs_moved",
        alias: None,
        show: show(|_| Ok(line(0)), |s| Ok(line(s.store.mm_stat().objs_moved))),
        store: Store::None,
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "compact",
        alias: None,
        show: Show::None,
        store: store_after(compact),
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "auto_compact",
        alias: None,
        show: show_after(|s| Ok(line(s.store.auto_compact()))),
        store: store_after(auto_compact),
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "retain_divisor",
        alias: None,
        show: show_after(|s| Ok(line(s.store.retain_divisor()))),
        store: store_after(retain_divisor),
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "idle",
        alias: None,
        show: Show::None,
        store: store_after(idle),
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "reset",
        alias: None,
        show: Show::None,
        store: Store::Server(reset),
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "mem_limit",
        alias: None,
        show: Show::None,
        store: store(
            |s, v| {
                s.mem_limit = mem_limit_bytes(v)?;
                Ok(())
            },
            |s, v| {
                let bytes = mem_limit_bytes(v)?;
                s.store.set_mem_limit(bytes);
                log::info!("ctl: {}: mem_limit {bytes}", s.name);
                Ok(())
            },
        ),
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "mem_used_max",
        alias: None,
        show: Show::None,
        store: Store::Export {
            check: Some(|v| match v {
                "0" => Ok(()),
                _ => Err(CtlError::inval("mem_used_max only takes 0")),
            }),
            before: Some(|_, _| Ok(())),
            after: Some(|s, _| {
                s.store.reset_mem_used_max();
                Ok(())
            }),
        },
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "exports",
        alias: None,
        show: Show::Server(exports),
        store: Store::None,
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "swap_mode",
        alias: None,
        show: Show::Server(swap_mode),
        store: Store::None,
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "backing_dev",
        alias: None,
        show: show(
            |s| {
                Ok(line(s.backing_dev.as_ref().map_or_else(
                    || "none".to_string(),
                    |p| p.display().to_string(),
                )))
            },
            |s| Ok(line(s.store.backing_dev())),
        ),
        store: store(set_backing_dev, |s, path| {
            s.store
                .set_backing_dev(std::path::Path::new(path))
                .map_err(|e| store_error(&e))?;
            log::info!("ctl: {}: backing_dev {path}", s.name);
            Ok(())
        }),
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "writeback",
        alias: None,
        show: Show::None,
        store: store_after(writeback),
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "writeback_limit",
        alias: None,
        show: show_after(|s| Ok(line(s.store.writeback_limit().limit))),
        store: store_after(|s, v| {
            let n = v.parse::<u64>().map_err(|_| {
                CtlError::inval(format!(
                    "writeback_limit takes a number of 4 KiB units, not {v:?}"
                ))
            })?;
            s.store.set_writeback_limit(n);
            Ok(())
        }),
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "writeback_limit_enable",
        alias: None,
        show: show_after(|s| Ok(line(u8::from(s.store.writeback_limit().enabled)))),
        store: store_after(|s, v| {
            let n = v.parse::<u64>().map_err(|_| {
                CtlError::inval(format!("writeback_limit_enable takes a number, not {v:?}"))
            })?;
            s.store.set_writeback_limit_enable(n != 0);
            Ok(())
        }),
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "writeback_batch_size",
        alias: None,
        show: show(
            |s| {
                Ok(line(
                    s.writeback_batch_size
                        .unwrap_or(zram::DEFAULT_WRITEBACK_BATCH as u64),
                ))
            },
            |s| Ok(line(s.store.writeback_batch_size())),
        ),
        store: store(set_writeback_batch_size, |s, v| {
            let n = v.parse::<u64>().map_err(|_| {
                CtlError::inval(format!(
                    "writeback_batch_size takes a number of pages, not {v:?}"
                ))
            })?;
            s.store
                .set_writeback_batch_size(n)
                .map_err(|e| store_error(&e))
        }),
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: COMPRESSED_WRITEBACK,
        alias: Some("writeback_compressed"),
        show: show(
            |s| Ok(line(u8::from(s.writeback_compressed))),
            |s| Ok(line(u8::from(s.store.writeback_compressed()))),
        ),
        store: store(
            |s, v| {
                s.writeback_compressed = kstrtobool(COMPRESSED_WRITEBACK, v)?;
                Ok(())
            },
            |s, v| {
                s.store
                    .set_writeback_compressed(kstrtobool(COMPRESSED_WRITEBACK, v)?)
                    .map_err(|e| store_error(&e))?;
                log::info!("ctl: {}: {COMPRESSED_WRITEBACK} {v}", s.name);
                Ok(())
            },
        ),
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "bd_stat",
        alias: None,
        show: show(
            |_| Ok(line(zram::BdStat::default())),
            |s| Ok(line(s.store.bd_stat())),
        ),
        store: Store::None,
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "recomp_algorithm",
        alias: None,
        show: show(recomp_algorithms, |s| {
            Ok(s.store
                .recomp_algorithms()
                .iter()
                .map(|(p, name)| format!("#{p}: [{name}]\n"))
                .collect())
        }),
        store: store(
            |s, v| {
                let recomp = zram::RecompAlgorithm::parse(v).map_err(|e| store_error(&e))?;
                s.recomp.push(recomp);
                // Linux 7.x: a priority's new algorithm starts from its
                // default settings.
                if let Some(params) = s.recomp_params.get_mut(recomp.priority - 1) {
                    params.clear();
                }
                Ok(())
            },
            |s, v| {
                s.store
                    .set_recomp_algorithm(v)
                    .map_err(|e| store_error(&e))?;
                log::info!("ctl: {}: recomp_algorithm {v}", s.name);
                Ok(())
            },
        ),
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "recompress",
        alias: None,
        show: Show::None,
        store: store_after(recompress),
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "block_state",
        alias: None,
        show: show_after(|s| Ok(block_state(&s.store))),
        store: Store::None,
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "algorithm_params",
        alias: None,
        show: Show::None,
        store: Store::Export {
            check: Some(|v| match v {
                "" => Err(CtlError::inval(
                    "algorithm_params takes a value (write-only)",
                )),
                _ => Ok(()),
            }),
            before: Some(set_algorithm_params),
            after: Some(algorithm_params),
        },
        wrong_state: Errno::EBUSY,
    },
    Attr {
        name: "hot_add",
        alias: None,
        show: Show::None,
        store: Store::Server(hot_add),
        wrong_state: Errno::EINVAL,
    },
    Attr {
        name: "hot_remove",
        alias: None,
        show: Show::None,
        store: Store::Server(|reg, _, v| {
            let words: Vec<&str> = v.split_whitespace().collect();
            match words[..] {
                [name] => reg.hot_remove(name),
                _ => Err(CtlError::inval("hot_remove takes one NAME")),
            }
        }),
        wrong_state: Errno::EINVAL,
    },
];

/// The attribute called `name` (or with that alias).
pub(crate) fn find(name: &str) -> Option<&'static Attr> {
    ATTRS.iter().find(|a| a.is_called(name))
}

/// Every command name, in the table's order (aliases not included).
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    ATTRS.iter().map(|a| a.name)
}

/// A sysfs file's text: the value and a newline.
fn line(value: impl std::fmt::Display) -> String {
    format!("{value}\n")
}

/// `disksize SIZE`: checked and rounded up to a page before the state, as
/// the kernel parses before it takes `init_lock`; the registry answers
/// `EBUSY` on an initialised export.
fn disksize(reg: &Registry, export: Option<&str>, v: &str) -> Result<(), CtlError> {
    reg.initialise(export, disksize_bytes(v)?)
}

/// `hot_add NAME [SIZE] [ro]`.
fn hot_add(reg: &Registry, _: Option<&str>, v: &str) -> Result<(), CtlError> {
    let words: Vec<&str> = v.split_whitespace().collect();
    // A trailing `ro`: served read-only for the export's whole life.
    let (words, read_only) = match words.split_last() {
        Some((&"ro", rest)) => (rest, true),
        _ => (&words[..], false),
    };
    match words {
        [name] => reg.hot_add(name, None, read_only),
        [name, size] => reg.hot_add(name, Some(size), read_only),
        _ => Err(CtlError::inval(
            "hot_add takes NAME, an optional SIZE and an optional ro",
        )),
    }
}

/// `reset [N]`: any positive number (1 when not given).
fn reset(reg: &Registry, export: Option<&str>, v: &str) -> Result<(), CtlError> {
    let v = if v.is_empty() { "1" } else { v };
    match v.parse::<u64>() {
        Ok(n) if n > 0 => reg.reset(export),
        _ => Err(CtlError::inval(format!(
            "reset takes a positive number, not {v:?}"
        ))),
    }
}

/// `exports`: one line per export: name, configuration (or
/// `uninitialised`), disk size, and with `--ublk` its block device.
fn exports(reg: &Registry) -> String {
    reg.listing()
        .into_iter()
        .map(|(name, served)| {
            let shown = if name.is_empty() { "\"\"" } else { &name };
            // A fourth field with --ublk: the export's block device.
            let device = reg
                .ublk_device(&name)
                .map(|p| format!("\t{}", p.display()))
                .unwrap_or_default();
            match served {
                Some(s) => format!("{shown}\t{}\t{}{device}\n", s.label, s.store.disk_size()),
                None => format!("{shown}\tuninitialised\t0\n"),
            }
        })
        .collect()
}

/// The server's swap mode (`zmem serve --swap`): `off`, or `on` and what it
/// set, the locked reserve's bytes and how many are taken.
fn swap_mode(reg: &Registry) -> String {
    match reg.swap_mode() {
        Some(m) => format!("{m}\n"),
        None => "off\n".to_string(),
    }
}

/// The largest retained-share divisor (as `--retain-divisor` takes).
const MAX_RETAIN_DIVISOR: usize = 1 << 20;

/// The longest compressor name zram takes (`CRYPTO_MAX_ALG_NAME` less one).
const MAX_ALGO_NAME: usize = 127;

/// Checks a compressor name as `comp_algorithm` does.
fn check_comp(name: &str) -> Result<(), CtlError> {
    if name.len() > MAX_ALGO_NAME {
        return Err(CtlError::new(
            Errno::E2BIG,
            format!("a compressor name has at most {MAX_ALGO_NAME} bytes"),
        ));
    }
    zcomp::Compressor::parse(name, "")
        .map(drop)
        .map_err(|e| CtlError::inval(format!("comp_algorithm: {e}")))
}

/// `comp_algorithm NAME` before init (the name is checked already). As in
/// Linux 7.x, the new algorithm starts from its default settings: the
/// primary's `algorithm_params` are reset, even for the same name.
fn set_comp_algorithm(settings: &mut Settings, v: &str) -> Result<(), CtlError> {
    settings.comp = zcomp::Algorithm::from_name(v)
        .map_err(|e| CtlError::inval(format!("comp_algorithm: {e}")))?;
    settings.comp_params.clear();
    Ok(())
}

/// `recomp_algorithm` before init: the secondaries the settings name.
fn recomp_algorithms(settings: &Settings) -> Result<String, CtlError> {
    let mut slots: [Option<zcomp::Algorithm>; 4] = Default::default();
    for r in &settings.recomp {
        slots[r.priority] = Some(r.algorithm);
    }
    Ok(slots
        .iter()
        .enumerate()
        .filter_map(|(p, a)| a.as_ref().map(|a| format!("#{p}: [{a}]\n")))
        .collect())
}

/// Whether an `algorithm_params` value is for a secondary compressor: it
/// gives a priority from 1, or an algorithm other than `primary` without a
/// priority. `EINVAL` if it does not parse.
fn for_secondary(v: &str, primary: zcomp::Algorithm) -> Result<bool, CtlError> {
    let parsed = zcomp::AlgorithmParams::parse(v)
        .map_err(|e| CtlError::inval(format!("algorithm_params: {e}")))?;
    Ok(match (parsed.priority, parsed.algo) {
        (Some(p), _) => p > 0,
        (None, Some(a)) => a != primary,
        (None, None) => false,
    })
}

/// `algorithm_params PARAMS` before init, by Linux 7.x's rules: the words
/// are parsed now (a malformed or unknown one, or an unreadable or empty
/// `dict`, is `EINVAL` or the file's errno); `priority=N` (0 to 3) or
/// `algo=NAME` (the algorithm of some priority; with both, the one at
/// that priority) choose the compressor, the primary without either; the
/// write replaces that priority's whole set of settings, and whether its
/// algorithm takes them is said by `disksize`, when the store is made.
fn set_algorithm_params(settings: &mut Settings, v: &str) -> Result<(), CtlError> {
    let inval = |e: String| CtlError::inval(format!("algorithm_params: {e}"));
    let parsed = zcomp::AlgorithmParams::parse(v).map_err(|e| inval(e.to_string()))?;
    let algorithm_at = |p: usize| match p {
        0 => Some(settings.comp),
        _ => settings
            .recomp
            .iter()
            .rev()
            .find(|r| r.priority == p)
            .map(|r| r.algorithm),
    };
    let priority = match (parsed.priority.map(|p| p as usize), parsed.algo) {
        (Some(p), _) if p > zram::MAX_SECONDARIES => {
            return Err(inval(format!(
                "priority {p} is not 0 to {}",
                zram::MAX_SECONDARIES
            )))
        }
        (Some(p), Some(a)) if algorithm_at(p) != Some(a) => {
            return Err(inval(format!("{a} is not the priority {p} algorithm")))
        }
        (Some(p), _) => p,
        (None, Some(a)) => (0..=zram::MAX_SECONDARIES)
            .find(|&p| algorithm_at(p) == Some(a))
            .ok_or_else(|| {
                inval(format!(
                    "no compressor {a} (set it with comp_algorithm or recomp_algorithm first)"
                ))
            })?,
        (None, None) => 0,
    };
    let kept = zcomp::AlgorithmParams::settings_text(v).map_err(|e| inval(e.to_string()))?;
    match priority {
        0 => settings.comp_params = kept,
        p => settings.recomp_params[p - 1] = kept,
    }
    Ok(())
}

/// `algorithm_params PARAMS` after init: a secondary's until the first
/// write; the primary's is fixed (`EBUSY`, the table's errno).
fn algorithm_params(s: &Served, v: &str) -> Result<(), CtlError> {
    if !for_secondary(v, s.store.compressor().algorithm())? {
        let attr = find("algorithm_params").expect("in the table");
        return Err(attr.wrong_state_error(attr.name, &s.name, State::Initialised));
    }
    s.store.set_algorithm_params(v).map_err(|e| store_error(&e))
}

/// `mem_limit SIZE` in bytes.
fn mem_limit_bytes(v: &str) -> Result<u64, CtlError> {
    if v.is_empty() {
        return Err(CtlError::inval(
            "mem_limit takes a size (e.g. 64M, 0 for none)",
        ));
    }
    memparse(v)
}

/// `backing_dev PATH` before init: the file must open for reading and
/// writing now (the OS's errno otherwise).
fn set_backing_dev(settings: &mut Settings, v: &str) -> Result<(), CtlError> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(v)
        .map_err(|e| {
            let errno = e
                .raw_os_error()
                .and_then(Errno::from_number)
                .unwrap_or(Errno::EIO);
            CtlError::new(errno, format!("backing_dev {v}: {e}"))
        })?;
    settings.backing_dev = Some(v.into());
    Ok(())
}

/// `writeback_batch_size N` before init: 1 to the store's maximum.
fn set_writeback_batch_size(settings: &mut Settings, v: &str) -> Result<(), CtlError> {
    let max = zram::MAX_WRITEBACK_BATCH as u64;
    match v.parse::<u64>() {
        Ok(n) if (1..=max).contains(&n) => {
            settings.writeback_batch_size = Some(n);
            Ok(())
        }
        _ => Err(CtlError::inval(format!(
            "writeback_batch_size takes a number of pages from 1 to {max}, not {v:?}"
        ))),
    }
}

/// A boolean as the kernel's `kstrtobool` reads one: `1`, `y`, `on` (any
/// case) or `0`, `n`, `off`; anything else is `EINVAL`.
fn kstrtobool(name: &str, v: &str) -> Result<bool, CtlError> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "y" | "yes" | "on" => Ok(true),
        "0" | "n" | "no" | "off" => Ok(false),
        _ => Err(CtlError::inval(format!("{name} takes 0 or 1, not {v:?}"))),
    }
}

/// `classes`: the allocator's class table (`EOPNOTSUPP` without one).
fn classes(s: &Served) -> Result<String, CtlError> {
    let mut t = s.store.allocator().format_classes().ok_or_else(|| {
        CtlError::new(
            Errno::EOPNOTSUPP,
            format!(
                "allocator {} has no size classes",
                s.store.allocator().name()
            ),
        )
    })?;
    if !t.ends_with('\n') {
        t.push('\n');
    }
    Ok(t)
}

/// `compact` (any value).
fn compact(s: &Served, _: &str) -> Result<(), CtlError> {
    let c = s.store.compact();
    log::info!(
        "ctl: {}: compact freed {} pages, moved {} objects",
        s.name,
        c.pages_freed,
        c.objs_moved
    );
    Ok(())
}

/// `auto_compact WORDS`.
fn auto_compact(s: &Served, words: &str) -> Result<(), CtlError> {
    let policy = s
        .store
        .auto_compact()
        .with_words(words)
        .map_err(CtlError::inval)?;
    s.store
        .set_auto_compact(policy)
        .map_err(|e| CtlError::inval(e.to_string()))?;
    log::info!("ctl: {}: auto_compact {policy}", s.name);
    Ok(())
}

/// `retain_divisor N`.
fn retain_divisor(s: &Served, v: &str) -> Result<(), CtlError> {
    let divisor = v
        .parse::<usize>()
        .ok()
        .filter(|&d| d <= MAX_RETAIN_DIVISOR)
        .ok_or_else(|| {
            CtlError::inval(format!(
                "retain_divisor takes 0 to {MAX_RETAIN_DIVISOR}, not {v:?}"
            ))
        })?;
    s.store.set_retain_divisor(divisor);
    log::info!("ctl: {}: retain_divisor {divisor}", s.name);
    Ok(())
}

/// `idle all` or `idle SECONDS`.
fn idle(s: &Served, v: &str) -> Result<(), CtlError> {
    let cutoff = match v {
        "" => return Err(CtlError::inval("idle takes 'all' or a number of seconds")),
        v => IdleCutoff::parse(v).map_err(|e| store_error(&e))?,
    };
    let marked = s.store.mark_idle(cutoff);
    log::info!("ctl: {}: idle marked {marked} slots", s.name);
    Ok(())
}

/// `writeback MODE`.
fn writeback(s: &Served, text: &str) -> Result<(), CtlError> {
    if text.is_empty() {
        return Err(CtlError::inval(
            "writeback takes idle, huge, huge_idle, incompressible, type=, page_index= or page_indexes=",
        ));
    }
    let req =
        zram::WritebackRequest::parse(text, s.store.disk_pages()).map_err(|e| store_error(&e))?;
    let r = s.store.writeback(&req).map_err(|e| store_error(&e))?;
    log::info!(
        "ctl: {}: writeback {text}: {} of {} pages written",
        s.name,
        r.written,
        r.chosen
    );
    Ok(())
}

/// `recompress PARAMS`.
fn recompress(s: &Served, text: &str) -> Result<(), CtlError> {
    let req = zram::RecompressRequest::parse(text).map_err(|e| store_error(&e))?;
    let r = s.store.recompress(&req).map_err(|e| store_error(&e))?;
    log::info!(
        "ctl: {}: recompress: {} of {} pages smaller, {} incompressible",
        s.name,
        r.recompressed,
        r.chosen,
        r.incompressible
    );
    Ok(())
}

/// The debugfs `block_state` text: one line per allocated slot.
fn block_state(store: &zram::Store) -> String {
    use zram::SlotState;
    let mut out = String::new();
    for index in 0..store.disk_pages() {
        let Ok(info) = store.slot_info(index) else {
            break;
        };
        if info.state == SlotState::Empty {
            continue;
        }
        let flag = |on: bool, c: char| if on { c } else { '.' };
        out.push_str(&format!(
            "{index:12} {:12}.{:06} {}{}{}{}{}{}\n",
            info.ac_time,
            0,
            flag(matches!(info.state, SlotState::Same(_)), 's'),
            flag(matches!(info.state, SlotState::WrittenBack(_)), 'w'),
            flag(info.huge, 'h'),
            flag(info.idle, 'i'),
            flag(info.priority > 0, 'r'),
            flag(info.incompressible, 'n'),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::control::execute;

    /// A registry with an uninitialised export `u` and an initialised `i`.
    fn registry() -> Registry {
        let reg = crate::test_factory::registry(true);
        reg.hot_add("u", None, false).unwrap();
        reg.hot_add("i", Some("1M"), false).unwrap();
        reg
    }

    /// The attribute's kernel mode: `RO`, `WO` or `RW`.
    fn mode(a: &Attr) -> &'static str {
        match (&a.show, &a.store) {
            (Show::None, _) => "WO",
            (_, Store::None) => "RO",
            _ => "RW",
        }
    }

    #[test]
    fn every_attribute_is_listed_once() {
        let mut seen = HashSet::new();
        for a in &ATTRS {
            assert!(seen.insert(a.name), "{} twice", a.name);
            if let Some(alias) = a.alias {
                assert!(seen.insert(alias), "{alias} twice");
            }
            assert!(
                !matches!((&a.show, &a.store), (Show::None, Store::None)),
                "{} can be neither read nor written",
                a.name
            );
            assert!(std::ptr::eq(find(a.name).unwrap(), a));
        }
        assert_eq!(seen.len(), ATTRS.len() + 1, "one alias");
        assert_eq!(names().count(), 30);
        assert!(find("frobnicate").is_none());
        // Linux 7.0 renamed writeback_compressed before its release.
        assert_eq!(
            find("writeback_compressed").unwrap().name,
            "compressed_writeback"
        );
        assert!(!names().any(|n| n == "writeback_compressed"));
        // Linux 7.3's zram_disk_attrs, each with the kernel's
        // DEVICE_ATTR_RO/WO/RW (max_comp_streams, a no-op since 4.7, is gone).
        for (name, kernel_mode) in [
            ("disksize", "RW"),
            ("initstate", "RO"),
            ("reset", "WO"),
            ("compact", "WO"),
            ("mem_limit", "WO"),
            ("mem_used_max", "WO"),
            ("idle", "WO"),
            ("comp_algorithm", "RW"),
            ("backing_dev", "RW"),
            ("writeback", "WO"),
            ("writeback_limit", "RW"),
            ("writeback_limit_enable", "RW"),
            ("writeback_batch_size", "RW"),
            ("compressed_writeback", "RW"),
            ("io_stat", "RO"),
            ("mm_stat", "RO"),
            ("bd_stat", "RO"),
            ("debug_stat", "RO"),
            ("recomp_algorithm", "RW"),
            ("recompress", "WO"),
            ("algorithm_params", "WO"),
        ] {
            let a = find(name).unwrap_or_else(|| panic!("{name} is missing"));
            assert_eq!(mode(a), kernel_mode, "{name}");
        }
        assert!(find("max_comp_streams").is_none());
    }

    #[test]
    fn wrong_state_errnos_are_the_kernels() {
        for a in &ATTRS {
            let before = a.readable(State::Uninitialised) || a.writable(State::Uninitialised);
            let missing_before = matches!(a.show, Show::Export { before: None, .. })
                || matches!(a.store, Store::Export { before: None, .. });
            let missing_after = matches!(a.show, Show::Export { after: None, .. })
                || matches!(a.store, Store::Export { after: None, .. });
            assert!(!(missing_before && missing_after), "{}", a.name);
            if missing_before {
                // What needs a store: EINVAL, as zram's `!init_done()`.
                assert_eq!(a.wrong_state, Errno::EINVAL, "{}", a.name);
            }
            if missing_after {
                // What is fixed at init: EBUSY.
                assert_eq!(a.wrong_state, Errno::EBUSY, "{}", a.name);
                assert!(before, "{}", a.name);
            }
        }
        for (name, errno) in [
            ("comp_algorithm", Errno::EBUSY),
            ("algorithm_params", Errno::EBUSY),
            ("disksize", Errno::EBUSY),
            ("compact", Errno::EINVAL),
            ("idle", Errno::EINVAL),
            ("writeback", Errno::EINVAL),
            ("recompress", Errno::EINVAL),
            ("classes", Errno::EINVAL),
            ("block_state", Errno::EINVAL),
        ] {
            assert_eq!(find(name).unwrap().wrong_state, errno, "{name}");
        }
    }

    #[test]
    fn each_state_rule_is_enforced_with_the_tables_errno() {
        let reg = registry();
        let mut checked = 0;
        for a in &ATTRS {
            let name = a.name;
            if matches!(a.show, Show::Export { before: None, .. }) {
                let e = execute(&reg, Some("u"), name).unwrap_err();
                assert_eq!(e.errno, Errno::EINVAL, "{name}");
                assert_eq!(
                    e.message,
                    format!("{name}: export \"u\" is not initialised (set its disksize first)")
                );
                assert!(execute(&reg, Some("i"), name).is_ok(), "{name}");
                checked += 1;
            }
            if matches!(a.store, Store::Export { before: None, .. }) {
                let e = execute(&reg, Some("u"), &format!("{name} 1")).unwrap_err();
                assert_eq!(e.errno, a.wrong_state, "{name}");
                assert_eq!(
                    e.message,
                    format!("{name}: export \"u\" is not initialised (set its disksize first)")
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 6 + 8, "reads and writes that need a store");
        // Fixed once initialised: the value is checked first, then EBUSY.
        for line in ["comp_algorithm zstd", "algorithm_params level=1"] {
            let e = execute(&reg, Some("i"), line).unwrap_err();
            let cmd = line.split(' ').next().unwrap();
            assert_eq!(e.errno, Errno::EBUSY, "{line}");
            assert_eq!(
                e.message,
                format!("cannot change {cmd} of initialised export \"i\"; reset it first")
            );
            assert_eq!(execute(&reg, Some("u"), line).unwrap(), "", "{line}");
        }
        assert_eq!(
            execute(&reg, Some("u"), "comp_algorithm").unwrap(),
            "[zstd]\n"
        );
        assert_eq!(
            execute(&reg, Some("i"), "comp_algorithm").unwrap(),
            "[lz4]\n"
        );
        let e = execute(&reg, Some("i"), "comp_algorithm lzma").unwrap_err();
        assert_eq!(e.errno, Errno::EINVAL, "{e}");
        let e = execute(
            &reg,
            Some("i"),
            &format!("comp_algorithm {}", "z".repeat(128)),
        )
        .unwrap_err();
        assert_eq!(
            e,
            CtlError::new(Errno::E2BIG, "a compressor name has at most 127 bytes")
        );
        let e = execute(&reg, Some("i"), "disksize 2M").unwrap_err();
        assert_eq!(
            e,
            CtlError::new(Errno::EBUSY, "export \"i\" is initialised; reset it first")
        );
        // Read-only attributes refuse a value (in a state they are valid in).
        assert_eq!(
            execute(&reg, Some("i"), "initstate 1").unwrap_err(),
            CtlError::inval("initstate is read-only (got value \"1\")")
        );
        assert_eq!(
            execute(&reg, None, "exports x").unwrap_err(),
            CtlError::inval("exports is read-only (got value \"x\")")
        );
        // What zram takes at any time.
        for export in ["u", "i"] {
            let run = |line: &str| execute(&reg, Some(export), line);
            assert_eq!(run("mem_limit 1M").unwrap(), "", "{export}");
            assert!(run("mm_stat").unwrap().contains(" 1048576 "), "{export}");
            assert_eq!(run("mem_used_max 0").unwrap(), "", "{export}");
            assert_eq!(
                run("mem_used_max 1").unwrap_err(),
                CtlError::inval("mem_used_max only takes 0")
            );
            assert_eq!(
                run("mem_limit").unwrap_err(),
                CtlError::inval("mem_limit takes a size (e.g. 64M, 0 for none)")
            );
            assert_eq!(run("writeback_batch_size 8").unwrap(), "", "{export}");
            assert_eq!(run("writeback_batch_size").unwrap(), "8\n", "{export}");
        }
        let e = execute(&reg, None, "frobnicate").unwrap_err();
        assert_eq!(e.errno, Errno::EINVAL);
        assert!(
            e.message
                .starts_with("unknown command \"frobnicate\"; commands: mm_stat io_stat "),
            "{e}"
        );
    }

    #[test]
    fn disksize_rounds_up_to_a_page() {
        let reg = registry();
        assert_eq!(
            execute(&reg, Some("u"), "disksize 0").unwrap_err(),
            CtlError::inval("disksize must be more than 0")
        );
        assert_eq!(execute(&reg, Some("u"), "disksize").unwrap(), "0\n");
        assert_eq!(execute(&reg, Some("u"), "disksize 1000").unwrap(), "");
        assert_eq!(execute(&reg, Some("u"), "disksize").unwrap(), "4096\n");
        assert_eq!(execute(&reg, Some("u"), "initstate").unwrap(), "1\n");
        assert_eq!(
            execute(&reg, Some("u"), "disksize 1000").unwrap_err().errno,
            Errno::EBUSY
        );
        execute(&reg, Some("u"), "reset").unwrap();
        assert_eq!(execute(&reg, Some("u"), "disksize 4097").unwrap(), "");
        assert_eq!(execute(&reg, Some("u"), "disksize").unwrap(), "8192\n");
        execute(&reg, Some("u"), "reset").unwrap();
        assert_eq!(execute(&reg, Some("u"), "disksize 1k").unwrap(), "");
        assert_eq!(execute(&reg, Some("u"), "disksize").unwrap(), "4096\n");
    }
}
