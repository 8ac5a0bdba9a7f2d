//! `zmem`: the command-line front end of zmem.
//!
//! One module per subcommand under `cmd/`; this file only parses arguments
//! and maps errors to exit codes (2 for bad usage, 1 for a failed run).

mod cmd;
mod corpus;
mod logger;
mod ministat;
mod plot;
mod rng;
mod signals;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// zmem: the Linux compressed-memory stack (zsmalloc, zram) in user space.
#[derive(Parser, Debug)]
#[command(name = "zmem", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Store real data page by page in one or more zram-style stores and
    /// print the kernel's statistics after each stage (the default job: with
    /// no PATH it replays a built-in corpus of real files).
    Replay(cmd::replay::ReplayArgs),
    /// Print the zsmalloc size-class table of a configuration.
    Classes(cmd::classes::ClassesArgs),
    /// The experiments of the kernel patches zmem grew from, reproduced.
    #[command(subcommand)]
    Exp(cmd::exp::ExpCommand),
    /// Benchmarks run side by side with their peers.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// Serve compressed RAM disks (zram stores) over NBD.
    Serve(Box<cmd::serve::ServeArgs>),
    /// Read or change a running server's zram attributes (mm_stat, compact, ...).
    Ctl(cmd::ctl::CtlArgs),
}

/// An error that ends the run: usage errors exit with 2, others with 1.
#[derive(Debug)]
pub enum CliError {
    /// The arguments are wrong.
    Usage(String),
    /// The run failed.
    Failed(String),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
                || matches!(
                    e.kind(),
                    ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                )
            {
                let _ = e.print();
                return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                };
            }
            // One line: clap's first line names the flag and the problem.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("error: bad arguments");
            eprintln!("{first}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Replay(args) => cmd::replay::run(&args),
        Command::Classes(args) => cmd::classes::run(&args),
        Command::Bench(cmd) => cmd::bench::run(&cmd),
        Command::Exp(cmd) => cmd::exp::run(&cmd),
        Command::Serve(args) => cmd::serve::run(&args),
        Command::Ctl(args) => cmd::ctl::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Usage(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
        Err(CliError::Failed(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(1)
        }
    }
}
