//! `zmem`: the command-line front end of zmem.
//!
//! One module per subcommand under `cmd/`; this file only holds the command
//! tree and parses arguments; `error` maps errors to exit codes (2 for bad
//! usage, 1 for a failed run). The corpus, the replay engine, the
//! experiments and the benchmarks are the lab crate's (`lab`); `exp` and
//! `bench` are built with the `lab` feature (on by default), which also
//! brings the figures' plotting library.

mod cmd;
mod config;
mod error;
mod logger;
mod signals;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

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
    Replay(Box<cmd::replay::ReplayArgs>),
    /// Print the zsmalloc size-class table of a configuration.
    Classes(cmd::classes::ClassesArgs),
    /// The experiments of the kernel patches zmem grew from, reproduced.
    #[cfg(feature = "lab")]
    #[command(subcommand)]
    Exp(cmd::exp::ExpCommand),
    /// Benchmarks run side by side with their peers.
    #[cfg(feature = "lab")]
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// Serve compressed RAM disks (zram stores) over NBD.
    Serve(Box<cmd::serve::ServeArgs>),
    /// Read or change a running server's zram attributes (mm_stat, compact, ...).
    Ctl(cmd::ctl::CtlArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd::docs::CompletionsArgs),
    /// Write man pages for zmem and every subcommand into a directory.
    Man(cmd::docs::ManArgs),
}

fn main() -> ExitCode {
    let args = match config::expand(std::env::args_os().collect(), &Cli::command()) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let cli = match Cli::try_parse_from(args) {
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
        #[cfg(feature = "lab")]
        Command::Bench(cmd) => cmd::bench::run(&cmd),
        #[cfg(feature = "lab")]
        Command::Exp(cmd) => cmd::exp::run(&cmd),
        Command::Serve(args) => cmd::serve::run(&args),
        Command::Ctl(args) => cmd::ctl::run(&args),
        Command::Completions(args) => cmd::docs::completions(&args, Cli::command()),
        Command::Man(args) => cmd::docs::man(&args, Cli::command()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(),
    }
}
