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
//! for the wrong state. Errors are a [`CtlError`]: an [`nbd::Errno`] (the
//! errno type NBD replies use too) and a message.
//!
//! It does no I/O; the socket is in [`crate::ctl_socket`].

use std::fmt;

use nbd::Errno;

use crate::attrs::{self, Attr, Show, State, Store};
use crate::registry::{ExportView, Registry};

/// Why a control command failed: a Linux errno and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtlError {
    /// The errno, as the kernel's attribute would answer.
    pub errno: Errno,
    /// For a human.
    pub message: String,
}

impl CtlError {
    /// An error with `errno`.
    pub fn new(errno: Errno, message: impl Into<String>) -> CtlError {
        CtlError {
            errno,
            message: message.into(),
        }
    }

    /// An `EINVAL` error.
    pub fn inval(message: impl Into<String>) -> CtlError {
        CtlError::new(Errno::EINVAL, message)
    }
}

impl fmt::Display for CtlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.errno, self.message)
    }
}

impl std::error::Error for CtlError {}

/// The control error for a store error (its errno; one this crate does not
/// name is `EIO`).
pub(crate) fn store_error(e: &zram::StoreError) -> CtlError {
    CtlError::new(
        Errno::from_number(e.errno()).unwrap_or(Errno::EIO),
        e.to_string(),
    )
}

/// Parses a size the way the kernel's `memparse` does: a number with an
/// optional K, M, G, T, P or E suffix (powers of 1024, either case).
pub fn memparse(s: &str) -> Result<u64, CtlError> {
    let s = s.trim();
    let bad = || CtlError::inval(format!("'{s}' is not a size (a number with K, M, G or T)"));
    let (digits, shift) = match s.chars().last() {
        Some(c) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                'P' => 50,
                'E' => 60,
                _ => return Err(bad()),
            };
            (&s[..s.len() - 1], shift)
        }
        _ => (s, 0),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

/// Runs `line` (`COMMAND [VALUE]`) on the export called `export` (`None`:
/// the first). Returns the text a read answers, empty for a write.
pub fn execute(reg: &Registry, export: Option<&str>, line: &str) -> Result<String, CtlError> {
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

<<<<<<< HEAD
/// The largest retained-share divisor (as `--retain-divisor` takes).
const MAX_RETAIN_DIVISOR: usize = 1 << 20;

/// The longest compressor name zram takes (`CRYPTO_MAX_ALG_NAME` less one).
const MAX_ALGO_NAME: usize = 127;

/// Checks a compressor name as `comp_algorithm` does.
fn check_comp(name: &str) -> Result<(), CtlError> {
    if name.len() > MAX_ALGO_NAME {
        return Err(CtlError::new(
            "E2BIG",
            format!("a compressor name has at most {MAX_ALGO_NAME} bytes"),
        ));
    }
    zcomp::Compressor::parse(name, "")
        .map(drop)
        .map_err(|e| CtlError::inval(format!("comp_algorithm: {e}")))
}

/// `(priority, algorithm)` of a `recomp_algorithm` value (`algo=NAME
/// priority=N`, priority 1 when not given), checked as the store checks it.
fn recomp_entry(text: &str) -> Result<(u32, String), CtlError> {
    let mut algo = None;
    let mut priority = 1u32;
    for word in text.split_whitespace() {
        match word.split_once('=') {
            Some(("algo", v)) if !v.is_empty() => algo = Some(v),
            Some(("priority", v)) => {
                priority = v
                    .parse()
                    .ok()
                    .filter(|p| (1..=3).contains(p))
                    .ok_or_else(|| {
                        CtlError::inval(format!("recomp_algorithm: priority {v:?} is not 1 to 3"))
                    })?
            }
            _ => {
                return Err(CtlError::inval(format!(
                    "recomp_algorithm: {word:?} is not algo=NAME or priority=N"
                )))
            }
        }
    }
    let algo = algo.ok_or_else(|| CtlError::inval("recomp_algorithm: algo=NAME is required"))?;
    check_comp(algo)?;
    Ok((priority, algo.to_string()))
}

/// Whether an `algorithm_params` value is for a secondary compressor: it
/// gives a priority from 1, or an algorithm other than `primary` without a
/// priority. `EINVAL` if it does not parse.
fn for_secondary(v: &str, primary: &str) -> Result<bool, CtlError> {
    let parsed = zcomp::AlgorithmParams::parse(v)
        .map_err(|e| CtlError::inval(format!("algorithm_params: {e}")))?;
    Ok(match (parsed.priority, parsed.algo) {
        (Some(p), _) => p > 0,
        (None, Some(a)) => a.name() != primary,
        (None, None) => false,
    })
}

/// Writes the setting `cmd` of an uninitialised export.
fn set(settings: &mut Settings, cmd: &str, v: &str) -> Result<(), CtlError> {
    match cmd {
        "comp_algorithm" => {
            check_comp(v)?;
            zcomp::Compressor::parse(v, &settings.comp_params).map_err(|e| {
                CtlError::inval(format!(
                    "algorithm_params {:?} do not fit {v}: {e}",
                    settings.comp_params
                ))
            })?;
            settings.comp = zcomp::Algorithm::from_name(v)
                .map_err(|e| CtlError::inval(format!("comp_algorithm: {e}")))?;
        }
        "algorithm_params" if for_secondary(v, settings.comp.name())? => {
            // Checked for syntax, range and the algorithm's own limits when
            // the store is made (`disksize`), as the kernel applies them.
            let parsed = zcomp::AlgorithmParams::parse(v)
                .map_err(|e| CtlError::inval(format!("algorithm_params: {e}")))?;
            if parsed.priority.is_some_and(|p| p > 3) {
                return Err(CtlError::inval(format!(
                    "algorithm_params: priority {} is not 0 to 3",
                    parsed.priority.unwrap_or_default()
                )));
            }
            if let Some(a) = parsed.algo {
                zcomp::Compressor::new(a, &parsed.params)
                    .map_err(|e| CtlError::inval(format!("algorithm_params: {e}")))?;
            }
            settings.recomp_params.push(v.to_string());
        }
        "algorithm_params" => {
            zcomp::Compressor::parse(settings.comp.name(), v)
                .map_err(|e| CtlError::inval(format!("algorithm_params: {e}")))?;
            settings.comp_params = v.to_string();
        }
        "mem_limit" => settings.mem_limit = memparse(v)?,
        "backing_dev" => {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(v)
                .map_err(|e| {
                    CtlError::new(
                        errno_name(e.raw_os_error().unwrap_or(libc::EIO)),
                        format!("backing_dev {v}: {e}"),
                    )
                })?;
            settings.backing_dev = Some(v.into());
        }
        "writeback_compressed" => settings.writeback_compressed = kstrtobool(cmd, v)?,
        "writeback_batch_size" => {
            let max = zram::MAX_WRITEBACK_BATCH as u64;
            match v.parse::<u64>() {
                Ok(n) if (1..=max).contains(&n) => settings.writeback_batch_size = Some(n),
                _ => {
                    return Err(CtlError::inval(format!(
                        "writeback_batch_size takes a number of pages from 1 to {max}, not {v:?}"
                    )))
                }
            }
        }
        "recomp_algorithm" => {
            recomp_entry(v)?;
            settings.recomp.push(v.to_string());
        }
        other => return Err(CtlError::inval(format!("{other} is not a setting"))),
    }
    Ok(())
}

/// A command on an uninitialised export: reads answer what zram's do
/// before `disksize`; what needs a store is `EINVAL`.
fn run_uninitialised(
    name: &str,
    settings: &Settings,
    cmd: &str,
    arg: Option<&str>,
) -> Result<String, CtlError> {
    let read = |text: String| -> Result<String, CtlError> {
        no_value(cmd, arg)?;
        Ok(text + "\n")
    };
    match cmd {
        "mm_stat" => read(
            zram::MmStat {
                mem_limit: settings.mem_limit,
                ..zram::MmStat::default()
            }
            .to_string(),
        ),
        "io_stat" => read(zram::IoStat::default().to_string()),
        "debug_stat" => read(zram::DebugStat::default().to_string()),
        "bd_stat" => read(zram::BdStat::default().to_string()),
        "disksize" | "initstate" | "objs_moved" => read("0".to_string()),
        "max_comp_streams" => read(
            std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .to_string(),
        ),
        "comp_algorithm" => read(format!("[{}]", settings.comp)),
        "backing_dev" => read(
            settings
                .backing_dev
                .as_ref()
                .map_or_else(|| "none".to_string(), |p| p.display().to_string()),
        ),
        "writeback_compressed" => read(u8::from(settings.writeback_compressed).to_string()),
        "writeback_batch_size" => read(
            settings
                .writeback_batch_size
                .unwrap_or(zram::DEFAULT_WRITEBACK_BATCH as u64)
                .to_string(),
        ),
        "recomp_algorithm" => {
            no_value(cmd, arg)?;
            let mut slots: [Option<String>; 4] = Default::default();
            for text in &settings.recomp {
                let (p, algo) = recomp_entry(text)?;
                slots[p as usize] = Some(algo);
            }
            Ok(slots
                .iter()
                .enumerate()
                .filter_map(|(p, a)| a.as_ref().map(|a| format!("#{p}: [{a}]\n")))
                .collect())
        }
        "mem_used_max" => match arg {
            Some("0") => Ok(String::new()),
            _ => Err(CtlError::inval("mem_used_max only takes 0")),
        },
        "algorithm_params" => Err(CtlError::inval(
            "algorithm_params takes a value (write-only)",
        )),
        c if COMMANDS.contains(&c) => Err(CtlError::inval(format!(
            "{c}: export {name:?} is not initialised (set its disksize first)"
        ))),
        other => Err(CtlError::inval(format!(
            "unknown command {other:?}; commands: {}",
            COMMANDS.join(" ")
        ))),
    }
}

/// A boolean as the kernel's `kstrtobool` reads one: `1`, `y`, `on` (any
/// case) or `0`, `n`, `off`; anything else is `EINVAL`.
fn kstrtobool(cmd: &str, v: &str) -> Result<bool, CtlError> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "y" | "yes" | "on" => Ok(true),
        "0" | "n" | "no" | "off" => Ok(false),
        _ => Err(CtlError::inval(format!("{cmd} takes 0 or 1, not {v:?}"))),
    }
}

fn no_value(cmd: &str, arg: Option<&str>) -> Result<(), CtlError> {
    match arg {
        None => Ok(()),
        Some(v) => Err(CtlError::inval(format!(
            "{cmd} is read-only (got value {v:?})"
        ))),
    }
}

/// A command on an initialised export.
fn run(s: &Served, cmd: &str, arg: Option<&str>) -> Result<String, CtlError> {
    let store = &s.store;
    let read = |text: String| -> Result<String, CtlError> {
        no_value(cmd, arg)?;
        Ok(text + "\n")
    };
    match cmd {
        "mm_stat" => read(store.mm_stat().to_string()),
        "io_stat" => read(store.io_stat().to_string()),
        "debug_stat" => read(store.debug_stat().to_string()),
        "disksize" => read(store.disk_size().to_string()),
        "initstate" => read("1".to_string()),
        "algorithm_params"
            if for_secondary(
                arg.unwrap_or_default(),
                store.compressor().algorithm().name(),
            )? =>
        {
            store
                .set_algorithm_params(arg.unwrap_or_default())
                .map_err(|e| store_error(&e))?;
            Ok(String::new())
        }
        "comp_algorithm" | "algorithm_params" if arg.is_some() => {
            if cmd == "comp_algorithm" {
                check_comp(arg.unwrap_or_default())?;
            }
            Err(CtlError::new(
                "EBUSY",
                format!(
                    "cannot change {cmd} of initialised export {:?}; reset it first",
                    s.name
                ),
            ))
        }
        "algorithm_params" => Err(CtlError::inval(
            "algorithm_params takes a value (write-only)",
        )),
        "objs_moved" => read(store.mm_stat().objs_moved.to_string()),
        "max_comp_streams" => read(store.max_comp_streams().to_string()),
        "comp_algorithm" => read(format!("[{}]", store.compressor().algorithm().name())),
        "classes" => {
            no_value(cmd, arg)?;
            let mut t = store.allocator().format_classes().ok_or_else(|| {
                CtlError::new(
                    "EOPNOTSUPP",
                    format!("allocator {} has no size classes", store.allocator().name()),
                )
            })?;
            if !t.ends_with('\n') {
                t.push('\n');
            }
            Ok(t)
        }
        "compact" => {
            let c = store.compact();
            log::info!(
                "ctl: {}: compact freed {} pages, moved {} objects",
                s.name,
                c.pages_freed,
                c.objs_moved
            );
            Ok(String::new())
        }
        "auto_compact" => match arg {
            None => Ok(format!("{}\n", store.auto_compact())),
            Some(words) => {
                let policy = store
                    .auto_compact()
                    .with_words(words)
                    .map_err(CtlError::inval)?;
                store
                    .set_auto_compact(policy)
                    .map_err(|e| CtlError::inval(e.to_string()))?;
                log::info!("ctl: {}: auto_compact {policy}", s.name);
                Ok(String::new())
            }
        },
        "retain_divisor" => match arg {
            None => read(store.retain_divisor().to_string()),
            Some(v) => {
                let divisor = v
                    .parse::<usize>()
                    .ok()
                    .filter(|&d| d <= MAX_RETAIN_DIVISOR)
                    .ok_or_else(|| {
                        CtlError::inval(format!(
                            "retain_divisor takes 0 to {MAX_RETAIN_DIVISOR}, not {v:?}"
                        ))
                    })?;
                store.set_retain_divisor(divisor);
                log::info!("ctl: {}: retain_divisor {divisor}", s.name);
                Ok(String::new())
            }
        },
        "idle" => {
            let cutoff = match arg {
                Some(v) => IdleCutoff::parse(v).map_err(|e| store_error(&e))?,
                None => return Err(CtlError::inval("idle takes 'all' or a number of seconds")),
            };
            let marked = store.mark_idle(cutoff);
            log::info!("ctl: {}: idle marked {marked} slots", s.name);
            Ok(String::new())
        }
        "mem_limit" => {
            let v = arg
                .ok_or_else(|| CtlError::inval("mem_limit takes a size (e.g. 64M, 0 for none)"))?;
            let bytes = memparse(v)?;
            store.set_mem_limit(bytes);
            log::info!("ctl: {}: mem_limit {bytes}", s.name);
            Ok(String::new())
        }
        "mem_used_max" => match arg {
            Some("0") => {
                store.reset_mem_used_max();
                Ok(String::new())
            }
            _ => Err(CtlError::inval("mem_used_max only takes 0")),
        },
        "bd_stat" => read(store.bd_stat().to_string()),
        "block_state" => {
            no_value(cmd, arg)?;
            Ok(block_state(store))
        }
        "backing_dev" => match arg {
            None => Ok(store.backing_dev() + "\n"),
            Some(path) => {
                store
                    .set_backing_dev(std::path::Path::new(path))
                    .map_err(|e| store_error(&e))?;
                log::info!("ctl: {}: backing_dev {path}", s.name);
                Ok(String::new())
            }
        },
        "writeback" => {
            let text = arg.ok_or_else(|| {
                CtlError::inval("writeback takes idle, huge, huge_idle, incompressible, type=, page_index= or page_indexes=")
            })?;
            let req = zram::WritebackRequest::parse(text, store.disk_pages())
                .map_err(|e| store_error(&e))?;
            let r = store.writeback(&req).map_err(|e| store_error(&e))?;
            log::info!(
                "ctl: {}: writeback {text}: {} of {} pages written",
                s.name,
                r.written,
                r.chosen
            );
            Ok(String::new())
        }
        "writeback_limit" => match arg {
            None => Ok(format!("{}\n", store.writeback_limit().limit)),
            Some(v) => {
                let n = v.parse::<u64>().map_err(|_| {
                    CtlError::inval(format!(
                        "writeback_limit takes a number of 4 KiB units, not {v:?}"
                    ))
                })?;
                store.set_writeback_limit(n);
                Ok(String::new())
            }
        },
        "writeback_batch_size" => match arg {
            None => Ok(format!("{}\n", store.writeback_batch_size())),
            Some(v) => {
                let n = v.parse::<u64>().map_err(|_| {
                    CtlError::inval(format!(
                        "writeback_batch_size takes a number of pages, not {v:?}"
                    ))
                })?;
                store
                    .set_writeback_batch_size(n)
                    .map_err(|e| store_error(&e))?;
                Ok(String::new())
            }
        },
        "writeback_compressed" => match arg {
            None => Ok(format!("{}\n", u8::from(store.writeback_compressed()))),
            Some(v) => {
                store
                    .set_writeback_compressed(kstrtobool(cmd, v)?)
                    .map_err(|e| store_error(&e))?;
                log::info!("ctl: {}: writeback_compressed {v}", s.name);
                Ok(String::new())
            }
        },
        "writeback_limit_enable" => match arg {
            None => Ok(format!("{}\n", u8::from(store.writeback_limit().enabled))),
            Some(v) => {
                let n = v.parse::<u64>().map_err(|_| {
                    CtlError::inval(format!("writeback_limit_enable takes a number, not {v:?}"))
                })?;
                store.set_writeback_limit_enable(n != 0);
                Ok(String::new())
            }
        },
        "recomp_algorithm" => match arg {
            None => Ok(store
                .recomp_algorithms()
                .iter()
                .map(|(p, name)| format!("#{p}: [{name}]\n"))
                .collect()),
            Some(v) => {
                store.set_recomp_algorithm(v).map_err(|e| store_error(&e))?;
                log::info!("ctl: {}: recomp_algorithm {v}", s.name);
                Ok(String::new())
            }
        },
        "recompress" => {
            let req =
                zram::RecompressRequest::parse(arg.unwrap_or("")).map_err(|e| store_error(&e))?;
            let r = store.recompress(&req).map_err(|e| store_error(&e))?;
            log::info!(
                "ctl: {}: recompress: {} of {} pages smaller, {} incompressible",
                s.name,
                r.recompressed,
                r.chosen,
                r.incompressible
            );
            Ok(String::new())
        }
        other => Err(CtlError::inval(format!(
            "unknown command {other:?}; commands: {}",
            COMMANDS.join(" ")
        ))),
    }
}

=======
>>>>>>> redesign-control
#[cfg(test)]
mod tests {
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
