//! `zmem`: the command-line front end of zmem (the library half of the
//! `zmem` binary, so tests can walk the command tree: [`command`]).
//!
//! One module per subcommand under `cmd/`; this file only holds the command
//! tree and parses arguments (every flag that takes a value may take a
//! negative number, so its own parser refuses it with the flag's range
//! rather than clap mistaking it for a flag); `error` maps errors to exit codes (2 for bad
//! usage, 1 for a failed run). The store recipe is the `recipe` crate's;
//! the corpus, the replay engine and the advice are `tune`'s; the
//! experiments, the benchmarks and the figures are the lab crate's (`lab`),
//! an optional dependency: `exp`, `bench` and `advise --plot` are built with
//! the `lab` feature (on by default) only.

mod activation;
mod cmd;
mod config;
mod error;
mod logger;
mod signals;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

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
    /// no PATH it replays a built-in corpus of real files, in default mode
    /// beside kernel-compat, and says how much memory each used).
    Replay(Box<cmd::replay::ReplayArgs>),
    /// Measure every compressor, level and allocator on your own data (a
    /// file, a block device, a core file, a live process) and say which to
    /// give zram.
    Advise(Box<cmd::advise::AdviseArgs>),
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
    /// Run a program with its large memory compressed beyond a limit (a
    /// preload library puts it in a region; no root swap, no kernel module).
    Run(Box<cmd::run::RunArgs>),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd::docs::CompletionsArgs),
    /// Write man pages for zmem and every subcommand into a directory.
    Man(cmd::docs::ManArgs),
}

/// Lets every option that takes a value, in `cmd` and its subcommands,
/// take one that starts with `-` and a digit (its value parser judges it).
fn negative_values_reach_parsers(cmd: clap::Command) -> clap::Command {
    // A flag that takes no value is left alone: clap's debug builds refuse
    // the setting there.
    cmd.mut_args(|arg| {
        if arg.is_positional() || !arg.get_action().takes_values() {
            arg
        } else {
            arg.allow_negative_numbers(true)
        }
    })
    .mut_subcommands(negative_values_reach_parsers)
}

/// The whole command tree of `zmem`, as it parses arguments.
pub fn command() -> clap::Command {
    negative_values_reach_parsers(Cli::command())
}

/// clap's usage error as one line, with all it says before its usage
/// lines: the problem, the missing argument's name, a "did you mean" tip,
/// the list of valid values. (The usage and the pointer to `--help` are
/// left out: `--help` prints both.)
pub fn usage_error_line(text: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if !line.is_empty() {
            parts.push(line);
        }
    }
    if parts.is_empty() {
        return "error: bad arguments (see --help)".to_string();
    }
    let mut out = parts[0].trim_end_matches(':').to_string();
    let rest = &parts[1..];
    if !rest.is_empty() {
        // "...were not provided: <COMMAND>..."; a tip or a value list in
        // parentheses.
        let (named, notes): (Vec<&str>, Vec<&str>) = rest
            .iter()
            .partition(|l| !l.starts_with("tip:") && !l.starts_with('['));
        if !named.is_empty() {
            out.push_str(": ");
            out.push_str(&named.join(", "));
        }
        for n in notes {
            out.push_str(" (");
            out.push_str(n.trim_start_matches('[').trim_end_matches(']'));
            out.push(')');
        }
    }
    out
}

/// Runs `zmem` with the process's arguments; the exit code: 0, 1 for a
/// failed run, 2 for bad usage.
pub fn main() -> ExitCode {
    // `serve --config FILE` becomes the file's flags, before the command
    // line's (see `config`).
    let args = match config::expand(std::env::args_os().collect(), &command()) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let parsed = command()
        .try_get_matches_from(args)
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
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
            eprintln!("{}", usage_error_line(&e.to_string()));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Replay(args) => cmd::replay::run(&args),
        Command::Advise(args) => cmd::advise::run(&args),
        Command::Classes(args) => cmd::classes::run(&args),
        #[cfg(feature = "lab")]
        Command::Bench(cmd) => cmd::bench::run(&cmd),
        #[cfg(feature = "lab")]
        Command::Exp(cmd) => cmd::exp::run(&cmd),
        Command::Serve(args) => cmd::serve::run(&args),
        Command::Ctl(args) => cmd::ctl::run(&args),
        Command::Run(args) => match cmd::run::run(&args) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Completions(args) => cmd::docs::completions(&args, command()),
        Command::Man(args) => cmd::docs::man(&args, command()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(),
    }
}
