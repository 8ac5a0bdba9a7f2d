//! A small logger for the `log` crate: levelled lines on standard error.
//!
//! This module owns how zmem's long-running commands (`zmem serve`) log:
//! one line per record, `2026-11-21T10:00:00.123Z INFO  target: message`,
//! written whole so lines from different threads never interleave. The
//! level comes from a flag, else the `ZMEM_LOG` environment variable
//! (`error`, `warn`, `info`, `debug`, `trace`, `off`), else `info`.
//!
//! When standard error is the journal's stream (systemd sets
//! `JOURNAL_STREAM` to its device and inode), lines carry the syslog
//! priority prefix journald reads (`<3>` error, `<4>` warn, `<6>` info, `<7>`
//! debug and trace) and no timestamp, since the journal stamps each line.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use log::{LevelFilter, Log, Metadata, Record};

struct StderrLogger;

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = if to_journal() {
            format!(
                "<{}>{}: {}\n",
                priority(record.level()),
                record.target(),
                record.args()
            )
        } else {
            format!(
                "{} {:<5} {}: {}\n",
                utc_now(),
                record.level(),
                record.target(),
                record.args()
            )
        };
        // A closed or full stderr must not take the server down.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

static LOGGER: StderrLogger = StderrLogger;

/// syslog's priority of a level, as journald reads it from a `<N>` prefix.
fn priority(level: log::Level) -> u8 {
    match level {
        log::Level::Error => 3,
        log::Level::Warn => 4,
        log::Level::Info => 6,
        log::Level::Debug | log::Level::Trace => 7,
    }
}

/// Whether standard error is the journal's stream: `JOURNAL_STREAM` is
/// `DEVICE:INODE` of it (checked once).
fn to_journal() -> bool {
    static JOURNAL: OnceLock<bool> = OnceLock::new();
    *JOURNAL.get_or_init(|| {
        let Ok(v) = std::env::var("JOURNAL_STREAM") else {
            return false;
        };
        let Ok(m) = std::fs::metadata("/proc/self/fd/2") else {
            return false;
        };
        journal_stream_is(&v, m.dev(), m.ino())
    })
}

/// Whether `JOURNAL_STREAM`'s `DEVICE:INODE` names this device and inode.
fn journal_stream_is(value: &str, dev: u64, ino: u64) -> bool {
    value
        .split_once(':')
        .and_then(|(d, i)| Some((d.parse::<u64>().ok()?, i.parse::<u64>().ok()?)))
        == Some((dev, ino))
}

/// The level to use: `flag` if given, else `ZMEM_LOG`, else info. A bad
/// `ZMEM_LOG` is reported and ignored.
pub fn level(flag: Option<LevelFilter>) -> LevelFilter {
    if let Some(l) = flag {
        return l;
    }
    match std::env::var("ZMEM_LOG") {
        Ok(v) if !v.is_empty() => v.parse().unwrap_or_else(|_| {
            eprintln!("warning: ZMEM_LOG={v:?} is not a log level; using info");
            LevelFilter::Info
        }),
        _ => LevelFilter::Info,
    }
}

/// Installs the logger at `level` (once; later calls only change the level).
pub fn init(level: LevelFilter) {
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}

/// Now as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn utc_now() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_journal_is_recognised_by_its_device_and_inode() {
        assert!(journal_stream_is("8:1234", 8, 1234));
        assert!(!journal_stream_is("8:1234", 8, 1235));
        assert!(!journal_stream_is("garbage", 8, 1234));
        assert_eq!(priority(log::Level::Error), 3);
        assert_eq!(priority(log::Level::Info), 6);
        assert_eq!(priority(log::Level::Trace), 7);
    }

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
        assert_eq!(utc_now().len(), 24);
    }
}
