//! How reports are printed: the one output option and writing to stdout.
//!
//! This module owns the `--format table|json` convention every subcommand
//! that prints results follows ([`FormatArg`], flattened into its
//! arguments), with `--json` kept, hidden, as another spelling of
//! `--format json` for older scripts; and writing a report to standard
//! output, where a closed pipe is not an error. It knows nothing of what
//! the reports hold.

use std::io::Write;

use serde::Serialize;

use crate::Error;

/// Output formats of the reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Tables for people.
    Table,
    /// Everything, machine-readable.
    Json,
}

/// The output option: `--format table|json` (and the hidden `--json`).
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct FormatArg {
    /// Output format.
    #[arg(long = "format", value_enum, default_value_t = Format::Table)]
    format: Format,
    /// The same as `--format json` (older spelling, kept for scripts).
    #[arg(long = "json", hide = true, conflicts_with = "format")]
    json: bool,
}

impl FormatArg {
    /// The format asked for.
    pub fn get(&self) -> Format {
        if self.json {
            Format::Json
        } else {
            self.format
        }
    }
}

/// Writes a report to standard output; a closed pipe (`zmem ... | head`) is not
/// an error.
pub fn write_stdout(text: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::Failed(format!("cannot write output: {e}"))),
    }
}

/// Writes a report to standard output as pretty-printed JSON and a newline
/// (as [`write_stdout`]).
pub fn write_json(report: &impl Serialize) -> Result<(), Error> {
    let text =
        serde_json::to_string_pretty(report).map_err(|e| Error::Failed(format!("json: {e}")))?;
    write_stdout(&(text + "\n"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        out: FormatArg,
    }

    fn parse(args: &[&str]) -> Result<Format, clap::Error> {
        Cmd::try_parse_from(std::iter::once("cmd").chain(args.iter().copied())).map(|c| c.out.get())
    }

    #[test]
    fn json_is_another_spelling_of_format_json() {
        assert_eq!(parse(&[]).unwrap(), Format::Table);
        assert_eq!(parse(&["--format", "table"]).unwrap(), Format::Table);
        assert_eq!(parse(&["--format", "json"]).unwrap(), Format::Json);
        assert_eq!(parse(&["--json"]).unwrap(), Format::Json);
        assert!(parse(&["--json", "--format", "table"]).is_err());
    }
}
