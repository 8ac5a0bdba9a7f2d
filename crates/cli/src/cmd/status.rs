//! `zmem ctl status`: zramctl's status table for a running server's exports.
//!
//! This module owns the table: which columns exist (zramctl's names, order
//! and alignment), how a size is written (util-linux's one-letter suffixes:
//! `1.5G`, `28.6M`, `0B`), the `--bytes`, `--raw`, `--noheadings`,
//! `--output` and `--output-all` flags, and the JSON form zramctl lacks. It
//! reads each export through the control socket's sysfs-like commands
//! (`exports`, `comp_algorithm`, `mm_stat`, `max_comp_streams`), as zramctl
//! reads sysfs files one by one; it never talks NBD and changes nothing.
//! `max_comp_streams` is gone from Linux 7.x's zram and from zmem's control
//! table; as zramctl does where the file is missing, STREAMS is then empty.

use std::path::Path;

use serde::Serialize;

use crate::error::CliError;

/// One column of the table, in zramctl's order for `--output-all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    /// The export's name (zramctl: the device's path).
    Name,
    /// `disksize`.
    DiskSize,
    /// `orig_data_size`.
    Data,
    /// `compr_data_size`.
    Compr,
    /// The selected algorithm of `comp_algorithm`.
    Algorithm,
    /// `max_comp_streams`.
    Streams,
    /// `same_pages`, a count.
    ZeroPages,
    /// `mem_used_total`.
    Total,
    /// `mem_limit`.
    MemLimit,
    /// `mem_used_max`.
    MemUsed,
    /// `pages_compacted` (zramctl prints it as a size, and so does this).
    Migrated,
    /// `orig_data_size / compr_data_size` (newer zramctl's COMP-RATIO).
    CompRatio,
    /// Where the export's ublk block device is mounted, `[SWAP]` when it
    /// is swapped on (zramctl's forms); empty for NBD exports.
    Mountpoint,
}

/// Every column, in `--output-all` order.
pub const ALL: [Column; 13] = [
    Column::Name,
    Column::DiskSize,
    Column::Data,
    Column::Compr,
    Column::Algorithm,
    Column::Streams,
    Column::ZeroPages,
    Column::Total,
    Column::MemLimit,
    Column::MemUsed,
    Column::Migrated,
    Column::CompRatio,
    Column::Mountpoint,
];

/// zramctl's default columns.
pub const DEFAULT: [Column; 8] = [
    Column::Name,
    Column::Algorithm,
    Column::DiskSize,
    Column::Data,
    Column::Compr,
    Column::Total,
    Column::Streams,
    Column::Mountpoint,
];

impl Column {
    /// The heading, as zramctl prints it.
    pub fn heading(self) -> &'static str {
        match self {
            Column::Name => "NAME",
            Column::DiskSize => "DISKSIZE",
            Column::Data => "DATA",
            Column::Compr => "COMPR",
            Column::Algorithm => "ALGORITHM",
            Column::Streams => "STREAMS",
            Column::ZeroPages => "ZERO-PAGES",
            Column::Total => "TOTAL",
            Column::MemLimit => "MEM-LIMIT",
            Column::MemUsed => "MEM-USED",
            Column::Migrated => "MIGRATED",
            Column::CompRatio => "COMP-RATIO",
            Column::Mountpoint => "MOUNTPOINT",
        }
    }

    /// Numbers are right-aligned, names left-aligned.
    fn right(self) -> bool {
        !matches!(self, Column::Name | Column::Algorithm | Column::Mountpoint)
    }

    /// Parses a heading, case-insensitively, as `--output` takes it.
    pub fn parse(s: &str) -> Option<Column> {
        ALL.into_iter()
            .find(|c| c.heading().eq_ignore_ascii_case(s.trim()))
    }

    /// This column's cell for `row`.
    fn cell(self, row: &Row, bytes: bool) -> String {
        let size = |n: u64| {
            if bytes {
                n.to_string()
            } else {
                human_size(n)
            }
        };
        match self {
            Column::Name => row.name.clone(),
            Column::DiskSize => size(row.disksize),
            Column::Data => size(row.data),
            Column::Compr => size(row.compr),
            Column::Algorithm => row.algorithm.clone(),
            Column::Streams => row.streams.map_or(String::new(), |n| n.to_string()),
            Column::ZeroPages => row.zero_pages.to_string(),
            Column::Total => size(row.total),
            Column::MemLimit => size(row.mem_limit),
            Column::MemUsed => size(row.mem_used),
            Column::Migrated => size(row.migrated),
            Column::CompRatio => row.comp_ratio.map_or(String::new(), |r| format!("{r:.2}")),
            Column::Mountpoint => row.mountpoint.clone().unwrap_or_default(),
        }
    }
}

/// The columns `--output` names, in its order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnList(pub Vec<Column>);

/// Parses `--output`'s comma-separated list.
pub fn parse_columns(list: &str) -> Result<ColumnList, String> {
    let cols: Vec<Column> = list
        .split(',')
        .map(|name| {
            Column::parse(name).ok_or_else(|| {
                let known: Vec<&str> = ALL.iter().map(|c| c.heading()).collect();
                format!("unknown column {name:?} (columns: {})", known.join(","))
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(ColumnList(cols))
}

/// One export's figures, in bytes (JSON keys are zramctl's headings in
/// lower case with `_`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// Export name.
    pub name: String,
    /// Selected compressor.
    pub algorithm: String,
    /// `disksize`.
    pub disksize: u64,
    /// `orig_data_size`.
    pub data: u64,
    /// `compr_data_size`.
    pub compr: u64,
    /// `mem_used_total`.
    pub total: u64,
    /// `max_comp_streams`, where the server still has it (none since
    /// zmem follows Linux 7.x; zramctl leaves the cell empty then).
    pub streams: Option<u64>,
    /// `same_pages`.
    pub zero_pages: u64,
    /// `mem_limit` (0: none).
    pub mem_limit: u64,
    /// `mem_used_max`.
    pub mem_used: u64,
    /// `pages_compacted`.
    pub migrated: u64,
    /// `data / compr`; absent while nothing is stored.
    pub comp_ratio: Option<f64>,
    /// Where the export's ublk device is mounted (`[SWAP]` for swap); null
    /// for an NBD export (its clients' mounts are not the server's to see).
    pub mountpoint: Option<String>,
}

/// A size the way util-linux writes it with one-letter suffixes: the
/// largest power of 1024 not above the value, one decimal rounded half up
/// and dropped when it is 0 (`1.5G`, `28.6M`, `4K`, `0B`).
pub fn human_size(bytes: u64) -> String {
    const LETTERS: &[u8] = b"BKMGTPE";
    let mut exp = 0u32;
    while exp < 60 && bytes >= 1u64 << (exp + 10) {
        exp += 10;
    }
    let letter = LETTERS[(exp / 10) as usize] as char;
    if exp == 0 {
        return format!("{bytes}{letter}");
    }
    let mut whole = bytes >> exp;
    let rest = bytes & ((1u64 << exp) - 1);
    // Thousandths of the unit (in u128: `rest * 1000` overflows for E),
    // then rounded to tenths.
    let mut tenths = (((u128::from(rest) * 1000) >> exp) as u64 + 50) / 100;
    if tenths == 10 {
        whole += 1;
        tenths = 0;
    }
    if tenths == 0 {
        format!("{whole}{letter}")
    } else {
        format!("{whole}.{tenths}{letter}")
    }
}

/// How the table is printed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Style {
    /// Sizes in bytes.
    pub bytes: bool,
    /// No alignment: cells separated by one space (libsmartcols' raw mode).
    pub raw: bool,
    /// No heading line.
    pub noheadings: bool,
}

/// The table: columns separated by one space, each but the last padded to
/// its widest cell (right-aligned for numbers), as zramctl prints it.
pub fn format_table(rows: &[Row], cols: &[Column], style: Style) -> String {
    let mut lines: Vec<Vec<String>> = Vec::new();
    if !style.noheadings {
        lines.push(cols.iter().map(|c| c.heading().to_string()).collect());
    }
    for row in rows {
        lines.push(
            cols.iter()
                .map(|c| {
                    let cell = c.cell(row, style.bytes);
                    if style.raw {
                        raw_escape(&cell)
                    } else {
                        cell
                    }
                })
                .collect(),
        );
    }
    let widths: Vec<usize> = (0..cols.len())
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in &lines {
        let last = cols.len() - 1;
        for (i, cell) in line.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            if style.raw || (i == last && !cols[i].right()) {
                // A left-aligned last cell is not padded.
                out.push_str(cell);
            } else if cols[i].right() {
                out.push_str(&format!("{cell:>w$}", w = widths[i]));
            } else {
                out.push_str(&format!("{cell:<w$}", w = widths[i]));
            }
        }
        out.push('\n');
    }
    out
}

/// libsmartcols' raw mode writes blanks, backslashes and control bytes as
/// `\xHH` so that cells stay one word each.
fn raw_escape(cell: &str) -> String {
    let mut out = String::new();
    for b in cell.bytes() {
        if b <= b' ' || b == b'\\' || b == 0x7f {
            out.push_str(&format!("\\x{b:02x}"));
        } else {
            out.push(b as char);
        }
    }
    out
}

/// Reads every export's row through the control socket at `path`.
pub fn read_rows(path: &Path) -> Result<Vec<Row>, CliError> {
    let ask = |export: Option<&str>, line: &str| -> Result<String, CliError> {
        match serve::request(path, export, line) {
            Ok(Ok(body)) => Ok(body),
            Ok(Err(e)) => Err(CliError::Failed(format!("{line}: {e}"))),
            Err(e) => Err(CliError::Failed(format!(
                "cannot talk to the control socket {}: {e} (is `zmem serve` running?)",
                path.display()
            ))),
        }
    };
    let listing = ask(None, "exports")?;
    let mut rows = Vec::new();
    for line in listing.lines().filter(|l| !l.is_empty()) {
        let mut fields = line.split('\t');
        let shown = fields.next().unwrap_or_default();
        // With --ublk, the fourth field is the export's block device.
        let device = fields.nth(2);
        // The listing quotes the empty (default) name.
        let name = if shown == "\"\"" { "" } else { shown };
        let export = Some(name);
        let mm = ask(export, "mm_stat")?;
        let mm: Vec<u64> = mm
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|e| CliError::Failed(format!("mm_stat of {shown}: {e}")))?;
        if mm.len() < 7 {
            return Err(CliError::Failed(format!(
                "mm_stat of {shown}: {} columns, expected 9",
                mm.len()
            )));
        }
        let number = |cmd: &str| -> Result<u64, CliError> {
            let text = ask(export, cmd)?;
            text.trim()
                .parse()
                .map_err(|e| CliError::Failed(format!("{cmd} of {shown}: {e}")))
        };
        let algorithm = selected_algorithm(&ask(export, "comp_algorithm")?);
        let (data, compr) = (mm[0], mm[1]);
        rows.push(Row {
            name: shown.to_string(),
            algorithm,
            disksize: number("disksize")?,
            data,
            compr,
            total: mm[2],
            streams: ask(export, "max_comp_streams")
                .ok()
                .and_then(|t| t.trim().parse().ok()),
            zero_pages: mm[5],
            mem_limit: mm[3],
            mem_used: mm[4],
            migrated: mm[6],
            comp_ratio: (compr > 0).then(|| data as f64 / compr as f64),
            mountpoint: device.and_then(mountpoint),
        });
    }
    Ok(rows)
}

/// Where block device `dev` is in use as zramctl reports it: its mount
/// point (from /proc/self/mounts, octal escapes undone) or `[SWAP]` (from
/// /proc/swaps); `None` when neither.
fn mountpoint(dev: &str) -> Option<String> {
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    if swaps
        .lines()
        .skip(1)
        .any(|l| l.split_whitespace().next() == Some(dev))
    {
        return Some("[SWAP]".into());
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        (f.next() == Some(dev)).then(|| f.next().map(unescape_mount))?
    })
}

/// Undoes /proc/self/mounts' octal escapes (`\040` for a space).
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .and_then(|d| {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                u8::try_from(v).ok()
            });
        match (b[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The line `zmem ctl status` prints under its table for a server in swap
/// mode (`swap_mode` other than `off`), sizes in util-linux's form; `None`
/// for a server not in swap mode.
pub fn swap_line(path: &Path) -> Result<Option<String>, CliError> {
    let text = match serve::request(path, None, "swap_mode") {
        Ok(Ok(body)) => body,
        Ok(Err(e)) => return Err(CliError::Failed(format!("swap_mode: {e}"))),
        Err(e) => return Err(CliError::Failed(format!("swap_mode: {e}"))),
    };
    let text = text.trim();
    if text == "off" {
        return Ok(None);
    }
    let field = |key: &str| -> Option<&str> {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
    };
    let bytes = |key: &str| field(key).unwrap_or("?");
    let was = match (field("min_free_kbytes"), field("min_free_kbytes_was")) {
        (Some(now), Some(was)) if now != was => format!(" (was {was})"),
        _ => String::new(),
    };
    Ok(Some(format!(
        "swap mode: reserve resident={} locked={} ready={} taken={} of {} bytes \
         ({} given back), exhausted={}, heap={} ahead, mlockall, PR_SET_IO_FLUSHER, oom_score_adj {}, \
         vm.min_free_kbytes {}{was}\n",
        bytes("resident"),
        bytes("locked"),
        bytes("ready"),
        bytes("taken"),
        bytes("reserve"),
        bytes("returned"),
        bytes("exhausted"),
        bytes("heap"),
        bytes("oom_score_adj"),
        bytes("min_free_kbytes"),
    )))
}

/// The bracketed name of a `comp_algorithm` answer (`lzo [lz4] zstd`).
fn selected_algorithm(text: &str) -> String {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
        .unwrap_or_else(|| text.trim())
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_written_as_util_linux_writes_them() {
        // Figures zramctl 2.38.1 printed on this machine for a kernel zram
        // device (1610616832, 30003200, 13899642, 15269888 bytes).
        assert_eq!(human_size(1_610_616_832), "1.5G");
        assert_eq!(human_size(30_003_200), "28.6M");
        assert_eq!(human_size(13_899_642), "13.3M");
        assert_eq!(human_size(15_269_888), "14.6M");
        assert_eq!(human_size(0), "0B");
        assert_eq!(human_size(1023), "1023B");
        assert_eq!(human_size(1024), "1K");
        assert_eq!(human_size(4096), "4K");
        // 1.96 rounds up to the next unit.
        assert_eq!(human_size(2 * 1024 * 1024 - 40 * 1024), "2M");
        assert_eq!(human_size(u64::MAX), "16E");
    }

    fn row() -> Row {
        Row {
            name: "zram1".into(),
            algorithm: "lz4".into(),
            disksize: 1_610_616_832,
            data: 30_003_200,
            compr: 13_899_642,
            total: 15_269_888,
            streams: Some(4),
            zero_pages: 0,
            mem_limit: 0,
            mem_used: 15_269_888,
            migrated: 0,
            comp_ratio: Some(30_003_200.0 / 13_899_642.0),
            mountpoint: None,
        }
    }

    #[test]
    fn the_table_is_aligned_as_zramctl_aligns_it() {
        let t = format_table(&[row()], &DEFAULT, Style::default());
        assert_eq!(
            t,
            "NAME  ALGORITHM DISKSIZE  DATA COMPR TOTAL STREAMS MOUNTPOINT\n\
             zram1 lz4           1.5G 28.6M 13.3M 14.6M       4 \n"
        );
        let raw = format_table(
            &[row()],
            &ALL,
            Style {
                raw: true,
                noheadings: true,
                bytes: true,
            },
        );
        assert_eq!(
            raw,
            "zram1 1610616832 30003200 13899642 lz4 4 0 15269888 0 15269888 0 2.16 \n"
        );
    }

    #[test]
    fn columns_parse_case_insensitively_and_unknown_ones_are_named() {
        assert_eq!(
            parse_columns("name,comp-ratio").unwrap().0,
            vec![Column::Name, Column::CompRatio]
        );
        let e = parse_columns("NAME,BOGUS").unwrap_err();
        assert!(e.contains("\"BOGUS\""), "{e}");
    }

    #[test]
    fn mount_points_are_unescaped_as_the_kernel_escapes_them() {
        assert_eq!(unescape_mount("/mnt/a\\040b\\011c"), "/mnt/a b\tc");
        assert_eq!(unescape_mount("/plain"), "/plain");
        assert_eq!(unescape_mount("/odd\\09"), "/odd\\09");
        assert_eq!(unescape_mount("/big\\777"), "/big\\777");
        assert_eq!(mountpoint("/dev/no-such-device-here"), None);
    }

    #[test]
    fn the_selected_algorithm_is_the_bracketed_one() {
        assert_eq!(selected_algorithm("lzo [lz4] zstd\n"), "lz4");
        assert_eq!(selected_algorithm("[lzo-rle]\n"), "lzo-rle");
    }
}
