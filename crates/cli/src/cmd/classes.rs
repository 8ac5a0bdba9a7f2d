//! `zmem classes`: the size-class table of one geometry, as a readable table,
//! as JSON, or in the exact layout of the simulate-zsmalloc tool.
//!
//! Owns only presentation; every number comes from `zsmalloc::geometry`.

use std::fmt::Write as _;

use clap::{Args, ValueEnum};
use serde::Serialize;
use zsmalloc::{ChainRule, ClassDelta, Geometry, GeometryConfig};

use crate::error::CliError;

/// Output formats of `zmem classes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ClassesFormat {
    /// A readable table of the physical classes.
    Table,
    /// Everything, machine-readable.
    Json,
    /// The request view of simulate-zsmalloc, row for row.
    Simzs,
}

/// Arguments of `zmem classes`.
#[derive(Args, Debug)]
pub struct ClassesArgs {
    /// Page size in bytes: 4096, 8192, 16384, 32768 or 65536 (or 4K ... 64K).
    #[arg(long, default_value_t = 4096, value_parser = parse_page_size)]
    page_size: u32,
    /// Compression unit: the largest object, a power of two from 4K to 64K and at
    /// least the page size; classes above a page are multi-page [default: the page size]
    #[arg(long, value_name = "SIZE", value_parser = parse_unit)]
    unit: Option<u32>,
    /// Most pages per zspage (CONFIG_ZSMALLOC_CHAIN_SIZE), 1 to 16.
    #[arg(long, default_value_t = 8, value_parser = recipe::flags::whole::<u32>(1, 16))]
    chain: u32,
    /// Class step: `kernel` (the kernel's max(PAGE_SIZE>>8, 16); `legacy` is
    /// accepted too) or a multiple of 8 in bytes.
    #[arg(long, value_name = "BYTES|kernel", default_value = "kernel", value_parser = parse_delta)]
    delta: ClassDelta,
    /// Pages-per-zspage rule: min-waste (kernel >= 6.3), used-percent (< 6.3), balanced (a longer
    /// chain only for a large cut in waste; proposed with the patch that drops the limit of 256
    /// classes).
    #[arg(long, default_value = "min-waste", value_parser = parse_rule)]
    chain_rule: ChainRule,
    /// Do not merge neighbouring classes with equal pages and objects per zspage.
    #[arg(long)]
    no_merge: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ClassesFormat::Table)]
    format: ClassesFormat,
    /// The same as `--format json` (older spelling, kept for scripts; as
    /// `recipe::output::FormatArg` has it for the other subcommands).
    #[arg(long, hide = true, conflicts_with = "format")]
    json: bool,
}

fn parse_unit(s: &str) -> Result<u32, String> {
    recipe::spec::parse_unit(s).map(|n| n as u32)
}

fn parse_page_size(s: &str) -> Result<u32, String> {
    recipe::spec::parse_page_size(s).map(|n| n as u32)
}

/// `kernel` (or `legacy`) or a multiple of 8 bytes from 8 to the largest page size (a
/// step larger than `--page-size` itself is refused with the geometry).
fn parse_delta(s: &str) -> Result<ClassDelta, String> {
    let delta: ClassDelta = s
        .parse()
        .map_err(|e: zsmalloc::GeometryError| e.to_string())?;
    match delta {
        ClassDelta::Fixed(d) if d > 65536 => Err(format!(
            "class delta {d} is not a multiple of 8 from 8 to 65536 (the largest page size)"
        )),
        _ => Ok(delta),
    }
}

fn parse_rule(s: &str) -> Result<ChainRule, String> {
    s.parse()
        .map_err(|e: zsmalloc::GeometryError| e.to_string())
}

impl ClassesArgs {
    fn config(&self) -> GeometryConfig {
        GeometryConfig {
            page_size: self.page_size,
            chain: self.chain,
            delta: self.delta,
            chain_rule: self.chain_rule,
            merge: !self.no_merge,
            unit: self.unit.unwrap_or(0),
        }
    }
}

/// Runs `zmem classes`.
pub fn run(args: &ClassesArgs) -> Result<(), CliError> {
    let geometry = Geometry::new(args.config()).map_err(|e| CliError::Usage(e.to_string()))?;
    let format = if args.json {
        ClassesFormat::Json
    } else {
        args.format
    };
    let text = match format {
        ClassesFormat::Table => table(&geometry),
        ClassesFormat::Json => json(&geometry)?,
        ClassesFormat::Simzs => simzs(&geometry),
    };
    Ok(recipe::output::write_stdout(&text)?)
}

fn describe(config: &GeometryConfig, delta: u32) -> String {
    format!(
        "page size {}, chain {}, delta {} ({}), chain rule {}, merging {}",
        config.page_size,
        config.chain,
        delta,
        config.delta,
        config.chain_rule,
        if config.merge { "on" } else { "off" }
    )
}

/// The physical classes, one per line, with the summary below.
pub fn table(g: &Geometry) -> String {
    let ps = g.page_size();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "zsmalloc size classes: {}",
        describe(g.config(), g.delta())
    );
    let _ = writeln!(
        out,
        "{:>5} {:>5} {:>6} {:>13} {:>5} {:>5} {:>6} {:>7} {:>4} {:>6}",
        "class", "index", "size", "serves", "pages", "objs", "tail", "tail%", "span", "huge"
    );
    for c in g.classes() {
        // Stored sizes served: one past the class below, up to the slot size.
        let lowest = match c.first_index {
            0 => 1,
            i => g.logical()[i as usize - 1].size + 1,
        };
        let serves = format!("{lowest}-{}", c.size);
        let _ = writeln!(
            out,
            "{:>5} {:>5} {:>6} {:>13} {:>5} {:>5} {:>6} {:>6.2}% {:>4} {:>6}",
            c.id,
            c.index,
            c.size,
            serves,
            c.pages_per_zspage,
            c.objs_per_zspage,
            c.tail_waste,
            f64::from(c.tail_waste) * 100.0 / f64::from(c.zspage_bytes(ps)),
            c.span,
            if c.huge { "huge" } else { "" }
        );
    }
    let summary = g.request_summary();
    let _ = writeln!(
        out,
        "physical classes: {} ({} huge), logical classes: {}, huge_class_size: {}",
        g.classes().len(),
        g.huge_classes(),
        g.logical().len(),
        g.huge_class_size()
    );
    let _ = writeln!(
        out,
        "average effective waste over requests 32..{} (step 16): {:.2}%, total span: {}",
        g.unit(),
        summary.avg_effective_waste_percent,
        summary.total_span
    );
    out
}

#[derive(Serialize)]
struct JsonReport<'a> {
    config: &'a GeometryConfig,
    delta_bytes: u32,
    huge_class_size: u32,
    physical_classes: usize,
    huge_classes: usize,
    logical_classes: usize,
    summary: zsmalloc::RequestSummary,
    classes: &'a [zsmalloc::SizeClass],
    logical: &'a [zsmalloc::LogicalClass],
    requests: Vec<zsmalloc::RequestRow>,
}

/// Everything the geometry knows, as JSON.
pub fn json(g: &Geometry) -> Result<String, CliError> {
    let report = JsonReport {
        config: g.config(),
        delta_bytes: g.delta(),
        huge_class_size: g.huge_class_size(),
        physical_classes: g.classes().len(),
        huge_classes: g.huge_classes(),
        logical_classes: g.logical().len(),
        summary: g.request_summary(),
        classes: g.classes(),
        logical: g.logical(),
        requests: g.request_rows(),
    };
    let mut s = serde_json::to_string_pretty(&report)
        .map_err(|e| CliError::Failed(format!("cannot encode JSON: {e}")))?;
    s.push('\n');
    Ok(s)
}

/// Right-pads `" <value>"` to `width`, as C's `% -<width>d` does.
fn cell(value: u32, width: usize) -> String {
    format!("{:<width$}", format!(" {value}"))
}

/// The request view in simulate-zsmalloc's layout: header, one row per
/// request size 32..=PAGE_SIZE in steps of 16, and the four summary lines.
/// The label is `BEFORE` for the kernel's rules and `AFTER` for the balanced
/// rule, as the simulator labels its two pools.
pub fn simzs(g: &Geometry) -> String {
    let config = g.config();
    let label = if config.chain_rule == ChainRule::Balanced {
        "AFTER"
    } else {
        "BEFORE"
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "PAGE_SIZE: {}, CHAIN_SIZE: {}",
        config.page_size, config.chain
    );
    let _ = writeln!(out);
    // The simulator's NumClasses counts delta steps, one less than the classes.
    let _ = writeln!(
        out,
        "Building Pool: Delta={}, NumClasses={}",
        g.delta(),
        g.logical().len() - 1
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "--- {label} (Detailed Request View) ---");
    let _ = writeln!(
        out,
        "{:<5} | {:<5} | {:<5} | {:<9} | {:<10} | {:<10} | {:<5}",
        "Req", "Phys", "Chain", "Objs/Page", "TailWaste", "MergeWaste", "Span"
    );
    let _ = writeln!(out, "{}", "-".repeat(76));
    for r in g.request_rows() {
        let _ = writeln!(
            out,
            "{} | {} | {} | {} | {} | {} | {}",
            cell(r.req, 5),
            cell(r.phys, 5),
            cell(r.chain, 5),
            cell(r.objs, 9),
            cell(r.tail_waste, 10),
            cell(r.merge_waste, 10),
            cell(r.span, 5)
        );
    }
    let s = g.request_summary();
    let label = format!("{label:<6}");
    let _ = writeln!(
        out,
        "{label} Avg Effective Waste (User Requests): {:.2}%",
        s.avg_effective_waste_percent
    );
    let _ = writeln!(out, "{label} Total Logical Classes: {}", s.logical_classes);
    let _ = writeln!(
        out,
        "{label} Total Physical Classes: {}",
        s.physical_classes
    );
    let _ = writeln!(out, "{label} Total Span (All Logicals): {}", s.total_span);
    out
}
