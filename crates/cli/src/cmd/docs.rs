//! `zmem completions SHELL` and `zmem man DIR`: shell completions and man
//! pages generated from the command tree itself, so they never drift from
//! the flags.
//!
//! This module owns only the generation; it takes the clap `Command` from
//! `main` and never parses or runs anything else.

use std::path::{Path, PathBuf};

use clap::{Args, Command};
use clap_complete::Shell;

use crate::error::CliError;

/// Arguments of `zmem completions`.
#[derive(Args, Debug)]
#[command(after_long_help = "\
EXAMPLES
  zmem completions bash > /etc/bash_completion.d/zmem
  zmem completions zsh > \"${fpath[1]}/_zmem\"
  zmem completions fish > ~/.config/fish/completions/zmem.fish")]
pub struct CompletionsArgs {
    /// The shell to write completions for.
    #[arg(value_enum)]
    shell: Shell,
}

/// Arguments of `zmem man`.
#[derive(Args, Debug)]
#[command(after_long_help = "\
EXAMPLES
  zmem man /usr/local/share/man/man1 && mandb -q
  zmem man /tmp/m && man -l /tmp/m/zmem-serve.1")]
pub struct ManArgs {
    /// The directory to write the pages into (made if missing): zmem.1 and
    /// one zmem-SUBCOMMAND.1 per subcommand.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
}

/// Writes the completion script for `args.shell` to standard output.
pub fn completions(args: &CompletionsArgs, mut cmd: Command) -> Result<(), CliError> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "zmem", &mut out);
    let text = String::from_utf8(out)
        .map_err(|e| CliError::Failed(format!("completion script is not UTF-8: {e}")))?;
    Ok(recipe::output::write_stdout(&text)?)
}

/// Writes one man page per command into `args.dir` and lists them.
pub fn man(args: &ManArgs, cmd: Command) -> Result<(), CliError> {
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| CliError::Failed(format!("cannot make {}: {e}", args.dir.display())))?;
    let mut written = Vec::new();
    write_pages(&args.dir, cmd, "zmem", &mut written)?;
    let list: String = written
        .iter()
        .map(|p| format!("{}\n", p.display()))
        .collect();
    Ok(recipe::output::write_stdout(&list)?)
}

/// Writes `cmd`'s page as `NAME.1`, then its subcommands' as
/// `NAME-SUB.1`, depth first.
fn write_pages(
    dir: &Path,
    cmd: Command,
    name: &str,
    written: &mut Vec<PathBuf>,
) -> Result<(), CliError> {
    let cmd = cmd.name(name.to_string()).bin_name(name.replace('-', " "));
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut page)
        .map_err(|e| CliError::Failed(format!("man page of {name}: {e}")))?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, page)
        .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", path.display())))?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let sub_name = format!("{name}-{}", sub.get_name());
        write_pages(dir, sub.clone(), &sub_name, written)?;
    }
    Ok(())
}
