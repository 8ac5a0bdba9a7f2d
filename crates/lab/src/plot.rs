//! Line charts as SVG and PNG, for the experiments' figures.
//!
//! Owns drawing only: callers pass named series of (x, y) points and get two
//! files. Text is drawn with the system's sans-serif font (fontconfig).

use std::ops::Range;
use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use crate::Error;

/// One named line.
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// What to draw.
pub struct Chart<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// Label of the x axis.
    pub x_label: &'a str,
    /// Label of the y axis.
    pub y_label: &'a str,
    /// The lines.
    pub series: &'a [Series],
}

const COLORS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// The x range of every point, and the y range (from 0, with headroom) of
/// a linear axis.
fn linear_ranges(chart: &Chart<'_>) -> (Range<f64>, Range<f64>) {
    let points = chart.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0f64);
    for &(x, y) in points {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if x0 == x1 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 <= 0.0 { 1.0 } else { y1 * 1.05 };
    (x0..x1, 0.0..y1)
}

/// The x range of every point, and the y range of the positive ones with
/// headroom, for a logarithmic axis.
fn log_y_ranges(chart: &Chart<'_>) -> (Range<f64>, Range<f64>) {
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in chart.series.iter().flat_map(|s| s.points.iter()) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        if y > 0.0 {
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    if x0 >= x1 {
        (x0, x1) = (x0.min(0.0), x0.max(0.0) + 1.0);
    }
    if y0 > y1 {
        (y0, y1) = (1.0, 10.0);
    }
    (x0..x1, y0 / 1.5..y1 * 1.5)
}

/// Draws the chart on `root`, with a linear or logarithmic y axis (points
/// with `y <= 0` are left out of a logarithmic one).
fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    chart: &Chart<'_>,
    log_y: bool,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    if log_y {
        let (x, y) = log_y_ranges(chart);
        draw_lines(&root, chart, x, y.log_scale(), |y| y > 0.0)?;
    } else {
        let (x, y) = linear_ranges(chart);
        draw_lines(&root, chart, x, y, |_| true)?;
    }
    root.present().map_err(|e| e.to_string())
}

/// The caption, mesh, lines (of the points whose y passes `keep`) and
/// legend, on a y axis of any scale.
fn draw_lines<DB: DrawingBackend, Y>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    chart: &Chart<'_>,
    x: Range<f64>,
    y: Y,
    keep: impl Fn(f64) -> bool,
) -> Result<(), String>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut ctx = ChartBuilder::on(root)
        .caption(chart.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)
        .map_err(|e| e.to_string())?;
    ctx.configure_mesh()
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, s) in chart.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        ctx.draw_series(LineSeries::new(
            s.points.iter().copied().filter(|&(_, y)| keep(y)),
            color.stroke_width(2),
        ))
        .map_err(|e| e.to_string())?
        .label(s.name.clone())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    ctx.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| e.to_string())
}

/// Draws `chart` to `<stem>.svg` and `<stem>.png` and returns both paths.
pub fn line_chart(stem: &Path, chart: &Chart<'_>) -> Result<(PathBuf, PathBuf), Error> {
    render(stem, chart, false)
}

/// Like [`line_chart`], with a logarithmic y axis (points with `y <= 0` are
/// left out): for latencies, whose tails span orders of magnitude.
pub fn line_chart_log_y(stem: &Path, chart: &Chart<'_>) -> Result<(PathBuf, PathBuf), Error> {
    render(stem, chart, true)
}

/// Writes both files, with a linear or logarithmic y axis.
fn render(stem: &Path, chart: &Chart<'_>, log_y: bool) -> Result<(PathBuf, PathBuf), Error> {
    if let Some(dir) = stem.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Failed(format!("cannot create {}: {e}", dir.display())))?;
    }
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    let fail =
        |what: &Path, e: String| Error::Failed(format!("cannot draw {}: {e}", what.display()));
    draw(
        SVGBackend::new(&svg, (1000, 600)).into_drawing_area(),
        chart,
        log_y,
    )
    .map_err(|e| fail(&svg, e))?;
    draw(
        BitMapBackend::new(&png, (1000, 600)).into_drawing_area(),
        chart,
        log_y,
    )
    .map_err(|e| fail(&png, e))?;
    Ok((svg, png))
}
