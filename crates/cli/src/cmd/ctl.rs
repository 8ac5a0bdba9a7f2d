//! `zmem ctl`: reads and writes a running server's zram attributes.
//!
//! This module owns the client side of the control socket as a command:
//! it sends one command (to one export) and prints the answer exactly as
//! the sysfs file reads, so `zmem ctl mm_stat` prints what
//! `cat /sys/block/zram0/mm_stat` would. A refused command prints the errno
//! and the reason on standard error and exits with 1. The commands are
//! listed in `serve::control`.

use std::path::PathBuf;

use clap::Args;

use serve::paths::{ctl_path_for, default_socket};

use crate::error::CliError;

/// Arguments of `zmem ctl`.
#[derive(Args, Debug)]
#[command(after_long_help = "\
COMMANDS (as zram's sysfs attributes; reads print the file's text)
  mm_stat | io_stat | debug_stat | classes | disksize | comp_algorithm
  | initstate | objs_moved | exports
  compact | idle all | idle SECONDS | reset | mem_limit SIZE | mem_used_max 0
  auto_compact (the background compactor's policy) | auto_compact 'on|off|shrinker
  [cpu=PCT] [min_gain=PAGES] [min_gain_percent=PCT] [limit=PCT] [pressure=AVG10]
  [postpone_ms=MS]'
  (one quoted value)
  (reset is refused with EBUSY while NBD clients are connected, as zram's
  reset is while the device is open)

EXAMPLES
  zmem ctl mm_stat
  zmem ctl --export zram1 mem_limit 512M
  zmem ctl auto_compact 'cpu=10 min_gain=64'
  zmem ctl --socket /tmp/s.sock.ctl idle all")]
pub struct CtlArgs {
    /// The server's control socket (default: the default NBD socket's path
    /// plus .ctl).
    #[arg(long, value_name = "CTL_PATH")]
    socket: Option<PathBuf>,
    /// The export to act on (default: the first).
    #[arg(long, value_name = "NAME")]
    export: Option<String>,
    /// The command and its value, e.g. `mm_stat` or `mem_limit 64M`.
    #[arg(required = true, num_args = 1..=2, value_name = "COMMAND [VALUE]")]
    command: Vec<String>,
}

/// Runs `zmem ctl`.
pub fn run(args: &CtlArgs) -> Result<(), CliError> {
    let path = args
        .socket
        .clone()
        .unwrap_or_else(|| ctl_path_for(&default_socket()));
    let line = args.command.join(" ");
    let reply = serve::request(&path, args.export.as_deref(), &line).map_err(|e| {
        CliError::Failed(format!(
            "cannot talk to the control socket {}: {e} (is `zmem serve` running?)",
            path.display()
        ))
    })?;
    match reply {
        Ok(body) => Ok(lab::output::write_stdout(&body)?),
        Err(e) => Err(CliError::Failed(format!("{line}: {e}"))),
    }
}
