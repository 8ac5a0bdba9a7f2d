//! The error a `zmem` run ends with, and its exit code.
//!
//! This module owns the mapping from errors to exit codes: 2 when the
//! arguments are wrong, 1 when the run failed. The recipe's error
//! ([`recipe::Error`], which the lab's runs end with too) has the same two
//! kinds and converts one to one; a store factory's
//! ([`recipe::FactoryError`]) converts through it.

use std::process::ExitCode;

/// An error that ends the run: usage errors exit with 2, others with 1.
#[derive(Debug)]
pub enum CliError {
    /// The arguments are wrong.
    Usage(String),
    /// The run failed.
    Failed(String),
}

impl CliError {
    /// Prints the error on standard error and gives the exit code.
    pub fn report(self) -> ExitCode {
        let (msg, code) = match self {
            CliError::Usage(msg) => (msg, 2),
            CliError::Failed(msg) => (msg, 1),
        };
        eprintln!("error: {msg}");
        ExitCode::from(code)
    }
}

impl From<recipe::Error> for CliError {
    fn from(e: recipe::Error) -> CliError {
        match e {
            recipe::Error::Usage(msg) => CliError::Usage(msg),
            recipe::Error::Failed(msg) => CliError::Failed(msg),
        }
    }
}

impl From<recipe::FactoryError> for CliError {
    fn from(e: recipe::FactoryError) -> CliError {
        recipe::Error::from(e).into()
    }
}
