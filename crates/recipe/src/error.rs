//! The error a run ends with (a replay, an advice, a report, an experiment).
//!
//! This module owns the two ways a run can end badly: the arguments are
//! wrong, or the run failed. It knows nothing of exit codes; the `zmem`
//! command maps the two kinds to its own (2 and 1).

use std::fmt;

/// An error that ends a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The arguments are wrong.
    Usage(String),
    /// The run failed.
    Failed(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(msg) | Error::Failed(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for Error {}
