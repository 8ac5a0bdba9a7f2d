//! The subcommands of `zmem`, one module each.

pub mod bench;
pub mod classes;
pub mod ctl;
pub mod exp;
pub mod replay;
pub mod serve;
pub mod store_opts;

use std::io::Write;

use serde::Serialize;

use crate::CliError;

/// Output formats of the reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Tables for people.
    Table,
    /// Everything, machine-readable.
    Json,
}

/// Writes a report to standard output; a closed pipe (`zmem ... | head`) is not
/// an error.
pub fn write_stdout(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::Failed(format!("cannot write output: {e}"))),
    }
}

/// Writes a report to standard output as pretty-printed JSON and a newline
/// (as [`write_stdout`]).
pub fn write_json(report: &impl Serialize) -> Result<(), CliError> {
    let text =
        serde_json::to_string_pretty(report).map_err(|e| CliError::Failed(format!("json: {e}")))?;
    write_stdout(&(text + "\n"))
}
