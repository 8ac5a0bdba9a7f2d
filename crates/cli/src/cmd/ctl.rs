//! `zmem ctl`: reads and writes a running server's zram attributes.
//!
//! This module owns the client side of the control socket as a command:
//! it sends one command (to one export) and prints the answer exactly as
//! the sysfs file reads, so `zmem ctl mm_stat` prints what
//! `cat /sys/block/zram0/mm_stat` would; with `--format json` it prints the
//! same answer as JSON, with the kernel's column names as keys. `zmem ctl
//! status` is zramctl's table of every export (the `status` module), and
//! `zmem ctl socket` prints the NBD socket's path for a client. A
//! refused command prints the errno and the reason on standard error and
//! exits with 1. The commands are listed in `serve::control`.

use std::path::PathBuf;

use clap::Args;
use serde_json::{json, Map, Value};

use recipe::output::{Format, FormatArg};
use serve::paths::{ctl_path_for, default_socket};

use crate::cmd::status::{self, Column, ColumnList, Style};
use crate::error::CliError;

/// Arguments of `zmem ctl`.
#[derive(Args, Debug)]
#[command(after_long_help = "\
COMMANDS (as zram's sysfs attributes; reads print the file's text)
  status (zramctl's table of every export; see its flags below)
  socket (the NBD socket's path that goes with the control socket, for a
  client: `socket=$(zmem ctl socket)`; asks no server)
  mm_stat | io_stat | debug_stat | classes | disksize | comp_algorithm
  | initstate | objs_moved | exports
  compact | idle all | idle SECONDS | reset | mem_limit SIZE | mem_used_max 0
  hot_add NAME [SIZE] [ro] | hot_remove NAME (as /sys/class/zram-control;
  without SIZE the new export is uninitialised; ro serves it read-only)
  disksize SIZE | comp_algorithm NAME | algorithm_params 'level=N dict=FILE'
  (only while uninitialised, else EBUSY; disksize initialises it)
  backing_dev PATH | compressed_writeback 0|1 (both before disksize;
  writeback_compressed is its old name)
  | writeback idle|huge|huge_idle|incompressible
  | writeback page_index=N | writeback page_indexes=N-M | writeback_limit N
  | writeback_limit_enable 0|1 | writeback_batch_size N | bd_stat | block_state
  recomp_algorithm 'algo=NAME priority=N' | algorithm_params 'priority=N level=L'
  | recompress 'type=idle|huge|huge_idle threshold=N max_pages=N algo=NAME'
  auto_compact (the background compactor's policy) | auto_compact 'on|off|shrinker
  [cpu=PCT] [min_gain=PAGES] [min_gain_percent=PCT] [limit=PCT] [pressure=AVG10]
  [postpone_ms=MS]'
  retain_divisor | retain_divisor N (freed pages kept resident for reuse, up to
  one in N of the pages held, over a 1 MiB cache; 0: the cache only)
  swap_mode (the server's: off, or on and the locked reserve's use)
  (one quoted value)
  (reset returns the export to uninitialised; it and hot_remove are refused
  with EBUSY while NBD clients are connected to it, as zram's are while the
  device is open)

EXAMPLES
  zmem ctl status
  zmem ctl status --output-all --bytes
  zmem ctl --format json mm_stat
  zmem ctl --export zram1 mem_limit 512M
  zmem ctl hot_add spare; zmem ctl --export spare comp_algorithm zstd
  zmem ctl --export spare disksize 4G
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
    #[command(flatten)]
    format: FormatArg,
    /// status: print sizes in bytes rather than in human-readable form.
    #[arg(short = 'b', long)]
    bytes: bool,
    /// status: raw output (no alignment, one space between cells).
    #[arg(long)]
    raw: bool,
    /// status: no heading line.
    #[arg(short = 'n', long)]
    noheadings: bool,
    /// status: the columns to show, comma-separated (NAME, DISKSIZE, DATA,
    /// COMPR, ALGORITHM, STREAMS, ZERO-PAGES, TOTAL, MEM-LIMIT, MEM-USED,
    /// MIGRATED, COMP-RATIO, MOUNTPOINT).
    #[arg(short = 'o', long, value_name = "LIST", value_parser = status::parse_columns)]
    output: Option<ColumnList>,
    /// status: every column.
    #[arg(long, conflicts_with = "output")]
    output_all: bool,
    /// The command and its value, e.g. `mm_stat`, `mem_limit 64M` or
    /// `hot_add NAME 1G ro`.
    #[arg(required = true, num_args = 1..=4, value_name = "COMMAND [VALUE]")]
    command: Vec<String>,
}

/// Runs `zmem ctl`.
pub fn run(args: &CtlArgs) -> Result<(), CliError> {
    let path = args
        .socket
        .clone()
        .unwrap_or_else(|| ctl_path_for(&default_socket()));
    let line = args.command.join(" ");
    let status_flags = args.bytes || args.raw || args.noheadings || args.output.is_some();
    if args.command[0] == "status" {
        return print_status(args, &path);
    }
    if args.command[0] == "socket" {
        return print_socket(args, &path);
    }
    if status_flags || args.output_all {
        return Err(CliError::Usage(
            "--bytes, --raw, --noheadings, --output and --output-all go with `status` only".into(),
        ));
    }
    let reply = serve::request(&path, args.export.as_deref(), &line).map_err(|e| {
        CliError::Failed(format!(
            "cannot talk to the control socket {}: {e} (is `zmem serve` running?)",
            path.display()
        ))
    })?;
    match reply {
        Ok(body) => match args.format.get() {
            Format::Table => Ok(recipe::output::write_stdout(&body)?),
            Format::Json => Ok(recipe::output::write_json(&to_json(
                &args.command[0],
                &body,
            ))?),
        },
        Err(e) => Err(CliError::Failed(format!("{line}: {e}"))),
    }
}

/// `zmem ctl socket`: the NBD socket that goes with the control socket,
/// the path an NBD client gives (`nbd+unix:///zram0?socket=...`). It asks
/// no server: the path follows the same rule as `zmem serve`'s default.
fn print_socket(args: &CtlArgs, ctl: &std::path::Path) -> Result<(), CliError> {
    if args.command.len() > 1 {
        return Err(CliError::Usage("socket takes no value".into()));
    }
    let text = ctl.to_string_lossy();
    let Some(nbd) = text.strip_suffix(".ctl").filter(|s| !s.is_empty()) else {
        return Err(CliError::Usage(format!(
            "{text}: a control socket's name ends in .ctl after its NBD socket's; \
             give the NBD socket's path to the client directly"
        )));
    };
    Ok(recipe::output::write_stdout(&format!("{nbd}\n"))?)
}

fn print_status(args: &CtlArgs, path: &std::path::Path) -> Result<(), CliError> {
    if args.command.len() > 1 {
        return Err(CliError::Usage("status takes no value".into()));
    }
    let mut rows = status::read_rows(path)?;
    // As zramctl, which lists only the disks in use: an uninitialised
    // export shows only when asked for by name.
    if args.export.is_none() {
        rows.retain(|r| r.disksize > 0);
    }
    if let Some(name) = &args.export {
        rows.retain(|r| r.name == *name || (name.is_empty() && r.name == "\"\""));
        if rows.is_empty() {
            return Err(CliError::Failed(format!("no export named {name:?}")));
        }
    }
    if args.format.get() == Format::Json {
        return Ok(recipe::output::write_json(&rows)?);
    }
    let cols: Vec<Column> = if args.output_all {
        status::ALL.to_vec()
    } else {
        args.output
            .clone()
            .map_or_else(|| status::DEFAULT.to_vec(), |l| l.0)
    };
    let style = Style {
        bytes: args.bytes,
        raw: args.raw,
        noheadings: args.noheadings,
    };
    let mut text = status::format_table(&rows, &cols, style);
    // A server-wide line under the table, only where it has something to
    // say and the table is for people (`zmem ctl swap_mode` is the
    // machine-readable form).
    if !args.raw && !args.noheadings {
        if let Some(line) = status::swap_line(path)? {
            text.push_str(&line);
        }
    }
    Ok(recipe::output::write_stdout(&text)?)
}

/// The kernel's names for the columns of the one-line statistics files.
fn columns_of(cmd: &str) -> Option<&'static [&'static str]> {
    match cmd {
        "mm_stat" => Some(&zram::MM_STAT_COLUMNS),
        "io_stat" => Some(&zram::IO_STAT_COLUMNS),
        "bd_stat" => Some(&zram::BD_STAT_COLUMNS),
        _ => None,
    }
}

/// A number when the text is one, else the text.
fn scalar(text: &str) -> Value {
    text.parse::<u64>()
        .map_or_else(|_| Value::String(text.to_string()), Value::from)
}

/// A command's answer as JSON: named columns for the statistics files,
/// `name: value` lines as an object, the selected and offered algorithms,
/// rows of the exports listing and of the classes table, a number or a
/// string for the one-value files, and `{}` for a write.
fn to_json(cmd: &str, body: &str) -> Value {
    if let Some(names) = columns_of(cmd) {
        let mut obj = Map::new();
        for (name, v) in names.iter().zip(body.split_whitespace()) {
            obj.insert((*name).to_string(), scalar(v));
        }
        return Value::Object(obj);
    }
    match cmd {
        "debug_stat" => {
            // `version: 1`, then `0 miss_free`, then any `name: value` lines.
            let mut obj = Map::new();
            for line in body.lines() {
                if let Some((k, v)) = line.split_once(':') {
                    obj.insert(k.trim().to_string(), scalar(v.trim()));
                } else {
                    let cols: Vec<&str> = line.split_whitespace().collect();
                    if cols.len() == 2 {
                        obj.insert("writestall".into(), scalar(cols[0]));
                        obj.insert("miss_free".into(), scalar(cols[1]));
                    }
                }
            }
            Value::Object(obj)
        }
        "comp_algorithm" => {
            let offered: Vec<String> = body
                .split_whitespace()
                .map(|w| w.trim_matches(|c| c == '[' || c == ']').to_string())
                .collect();
            let selected = body
                .split_whitespace()
                .find(|w| w.starts_with('['))
                .map(|w| w.trim_matches(|c| c == '[' || c == ']').to_string());
            json!({ "selected": selected, "offered": offered })
        }
        "exports" => Value::Array(
            body.lines()
                .filter(|l| !l.is_empty())
                .map(|l| {
                    let f: Vec<&str> = l.split('\t').collect();
                    json!({
                        "name": f.first().map(|n| if *n == "\"\"" { "" } else { n }),
                        "label": f.get(1),
                        "disksize": f.get(2).map(|v| scalar(v)),
                    })
                })
                .collect(),
        ),
        "classes" => {
            let mut lines = body.lines();
            let heads: Vec<&str> = lines
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .collect();
            Value::Array(
                lines
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| {
                        let mut obj = Map::new();
                        for (h, v) in heads.iter().zip(l.split_whitespace()) {
                            obj.insert((*h).to_string(), scalar(v));
                        }
                        Value::Object(obj)
                    })
                    .collect(),
            )
        }
        _ if body.trim().is_empty() => json!({}),
        _ => scalar(body.trim()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_files_become_objects_with_the_kernels_names() {
        let mm = to_json(
            "mm_stat",
            "    4096      100     8192        0     8192        1        0        0        2\n",
        );
        assert_eq!(mm["orig_data_size"], 4096);
        assert_eq!(mm["huge_pages_since"], 2);
        let io = to_json("io_stat", "       0        1 0        7\n");
        assert_eq!(io["failed_writes"], 1);
        assert_eq!(io["notify_free"], 7);
        let bd = to_json("bd_stat", "       3        1        4\n");
        assert_eq!(
            (bd["bd_count"].as_u64(), bd["bd_writes"].as_u64()),
            (Some(3), Some(4))
        );
        let dbg = to_json("debug_stat", "version: 1\n0        3\n");
        assert_eq!(dbg["version"], 1);
        assert_eq!(dbg["miss_free"], 3);
        let alg = to_json("comp_algorithm", "lzo [lz4] zstd\n");
        assert_eq!(alg["selected"], "lz4");
        assert_eq!(alg["offered"].as_array().unwrap().len(), 3);
        assert_eq!(to_json("disksize", "1073741824\n"), json!(1_073_741_824u64));
        assert_eq!(to_json("compact", ""), json!({}));
        let ex = to_json("exports", "\"\"\tzsmalloc/default/lz4/4K\t4096\n");
        assert_eq!(ex[0]["name"], "");
        assert_eq!(ex[0]["disksize"], 4096);
    }
}
