//! The settings `zmem run` hands to the preload library, in its
//! environment: the resident limit, the span, the compressor and its
//! settings, the smallest
//! request served from the region, where to write the statistics and how
//! long the fault handler polls, and whether its messages may go to the
//! program's standard error.
//!
//! Owns the variable names and their parsing; it starts nothing.

use std::path::PathBuf;

use region::LimitCovers;
use zcomp::Algorithm;

/// The resident limit in bytes (its presence turns the library on).
pub const LIMIT: &str = "ZMEM_RUN_LIMIT";
/// Bytes of address space in the region.
pub const SPAN: &str = "ZMEM_RUN_SPAN";
/// The compressor's kernel name.
pub const COMP: &str = "ZMEM_RUN_COMP";
/// The compressor's settings (zram's `algorithm_params`: `level=N
/// dict=FILE`); unset or empty: the defaults.
pub const PARAMS: &str = "ZMEM_RUN_ALGORITHM_PARAMS";
/// The smallest mapping or allocation, in bytes, served from the region.
pub const MIN: &str = "ZMEM_RUN_MIN";
/// A directory for each process's statistics (`PID.json`) at exit.
pub const STATS_DIR: &str = "ZMEM_RUN_STATS_DIR";
/// Microseconds the fault handler polls before it sleeps; unset: the
/// region's default.
pub const HANDLER_POLL: &str = "ZMEM_RUN_HANDLER_POLL_US";
/// The pid of the `zmem run` that started the program.
pub const RUN_PID: &str = "ZMEM_RUN_PID";
/// What the limit covers: `process` or `region`.
pub const LIMIT_COVERS: &str = "ZMEM_RUN_LIMIT_COVERS";
/// Where the fault handler runs: `follow` or `any`.
pub const HANDLER_CPU: &str = "ZMEM_RUN_HANDLER_CPU";
/// Whether the clock sees writes through soft-dirty bits: `on` or `off`.
pub const SOFT_DIRTY: &str = "ZMEM_RUN_SOFT_DIRTY";
/// Set (to anything): the library's messages go to the program's standard
/// error as well as to the statistics.
pub const VERBOSE: &str = "ZMEM_RUN_VERBOSE";

/// What the library was told.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Bytes of the region that may stay mapped.
    pub limit: usize,
    /// Bytes of address space in the region.
    pub span: usize,
    /// The compressor.
    pub comp: Algorithm,
    /// Its settings (`algorithm_params`).
    pub params: String,
    /// The smallest request served from the region.
    pub min: usize,
    /// Where each process writes its statistics at exit.
    pub stats_dir: Option<PathBuf>,
    /// How long the fault handler polls before it sleeps; `None`: the
    /// region's default.
    pub handler_poll: Option<std::time::Duration>,
    /// Whether the fault handler follows the faulting thread's CPU;
    /// `None`: the region's default.
    pub handler_follows: Option<bool>,
    /// Whether the clock sees writes through soft-dirty bits; `None`: the
    /// region's default.
    pub soft_dirty: Option<bool>,
    /// What the limit covers; `None`: the region's default.
    pub limit_covers: Option<LimitCovers>,
    /// The pid of the `zmem run` that started the program, if given.
    pub run_pid: Option<u32>,
}

fn bytes(name: &str) -> Result<usize, String> {
    let v = std::env::var(name).map_err(|_| format!("{name} is not set"))?;
    v.parse::<usize>()
        .map_err(|_| format!("{name}={v} is not a number of bytes"))
}

impl Settings {
    /// The settings from the environment; `Ok(None)` when the library was
    /// loaded without `zmem run` (no limit given), which leaves it inert.
    pub fn from_env() -> Result<Option<Settings>, String> {
        if std::env::var_os(LIMIT).is_none() {
            return Ok(None);
        }
        let comp = match std::env::var(COMP) {
            Ok(name) => Algorithm::from_name(&name).map_err(|e| e.to_string())?,
            Err(_) => region::default_store().comp,
        };
        Ok(Some(Settings {
            limit: bytes(LIMIT)?,
            span: bytes(SPAN)?,
            comp,
            params: std::env::var(PARAMS).unwrap_or_default(),
            min: bytes(MIN)?,
            stats_dir: std::env::var_os(STATS_DIR).map(PathBuf::from),
            handler_poll: match std::env::var(HANDLER_POLL) {
                Ok(v) => Some(std::time::Duration::from_micros(v.parse().map_err(
                    |_| format!("{HANDLER_POLL}={v} is not a number of microseconds"),
                )?)),
                Err(_) => None,
            },
            run_pid: match std::env::var(RUN_PID) {
                Ok(v) => Some(
                    v.parse()
                        .map_err(|_| format!("{RUN_PID}={v} is not a process id"))?,
                ),
                Err(_) => None,
            },
            limit_covers: match std::env::var(LIMIT_COVERS).as_deref() {
                Ok("process") => Some(LimitCovers::Process),
                Ok("region") => Some(LimitCovers::Region),
                Ok(v) => return Err(format!("{LIMIT_COVERS}={v} is neither process nor region")),
                Err(_) => None,
            },
            soft_dirty: match std::env::var(SOFT_DIRTY).as_deref() {
                Ok("on") => Some(true),
                Ok("off") => Some(false),
                Ok(v) => return Err(format!("{SOFT_DIRTY}={v} is neither on nor off")),
                Err(_) => None,
            },
            handler_follows: match std::env::var(HANDLER_CPU).as_deref() {
                Ok("follow") => Some(true),
                Ok("any") => Some(false),
                Ok(v) => return Err(format!("{HANDLER_CPU}={v} is neither follow nor any")),
                Err(_) => None,
            },
        }))
    }
}
