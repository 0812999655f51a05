//! The report's charts, drawn by plotters into SVG text that the HTML inlines (nothing is
//! fetched when the report is viewed). Each chart has a title, axis labels with units, and a
//! legend where it has several series (written in HTML beside the chart, where long site
//! names fit); sizes are in CSS pixels of a 1280 px wide page.
//!
//! Charts take plain numbers, not report types: what to draw is decided in `html.rs`, how to
//! draw it here.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Tableau's ten colours: distinct, and readable by most colour-blind readers.
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];
/// Colours of sites, where a chart tells them apart: the palette without the tiers' blue and
/// orange, so that a site is never read as a tier.
pub const SITE_PALETTE: [RGBColor; 8] = [
    PALETTE[2], PALETTE[4], PALETTE[3], PALETTE[5], PALETTE[6], PALETTE[8], PALETTE[9], PALETTE[7],
];
/// Tier 0 and the slower tiers, wherever a chart tells them apart.
pub const FAST: RGBColor = RGBColor(31, 119, 180);
pub const SLOW: RGBColor = RGBColor(230, 85, 13);
/// Cells with nothing to show (no row, not located).
pub const EMPTY: RGBColor = RGBColor(238, 238, 238);

const FONT: &str = "sans-serif";
const TITLE_SIZE: u32 = 20;
const LABEL_SIZE: u32 = 16;
const AXIS_SIZE: u32 = 17;

type Error = Box<dyn std::error::Error>;

fn svg_of(
    size: (u32, u32),
    draw: impl FnOnce(DrawingArea<SVGBackend, plotters::coord::Shift>) -> Result<(), Error>,
) -> Result<String, Error> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)?;
        draw(root.clone())?;
        root.present()?;
    }
    Ok(svg)
}

/// A line of a line chart.
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub color: RGBColor,
    /// Drawn dashed, so that a line on top of another lets it show.
    pub dashed: bool,
}

/// A single point of a line chart, drawn as a labelled diamond.
pub struct Marker {
    pub name: String,
    pub at: (f64, f64),
    pub color: RGBColor,
}

pub struct Axes<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub x: std::ops::Range<f64>,
    pub y: std::ops::Range<f64>,
    pub x_format: &'a dyn Fn(&f64) -> String,
    pub y_format: &'a dyn Fn(&f64) -> String,
}

/// Lines and markers over the same axes.
pub fn line_chart(
    size: (u32, u32),
    axes: &Axes,
    lines: &[Line],
    markers: &[Marker],
) -> Result<String, Error> {
    svg_of(size, |root| {
        let mut chart = ChartBuilder::on(&root)
            .caption(axes.title, (FONT, TITLE_SIZE))
            .margin(14)
            .margin_right(30)
            .x_label_area_size(52)
            .y_label_area_size(72)
            .build_cartesian_2d(axes.x.clone(), axes.y.clone())?;
        chart
            .configure_mesh()
            .x_desc(axes.x_label)
            .y_desc(axes.y_label)
            .x_label_formatter(axes.x_format)
            .y_label_formatter(axes.y_format)
            .axis_desc_style((FONT, AXIS_SIZE))
            .label_style((FONT, LABEL_SIZE))
            .light_line_style(RGBColor(240, 240, 240))
            .draw()?;
        for line in lines {
            let style = line.color.stroke_width(if line.dashed { 2 } else { 3 });
            let points = line.points.iter().copied();
            if line.dashed {
                chart.draw_series(DashedLineSeries::new(points, 7, 5, style))?;
            } else {
                chart.draw_series(LineSeries::new(points, style))?;
            }
        }
        for marker in markers {
            let color = marker.color;
            chart.draw_series(std::iter::once(
                EmptyElement::at(marker.at)
                    + Polygon::new(vec![(0, -9), (9, 0), (0, 9), (-9, 0)], color.filled())
                    + PathElement::new(
                        vec![(0, -9), (9, 0), (0, 9), (-9, 0), (0, -9)],
                        BLACK.stroke_width(1),
                    ),
            ))?;
        }
        Ok(())
    })
}

/// A heat map: one row per labelled item, one cell per interval `[start, end]`, coloured by
/// `color` of its value (`None`: nothing to show).
pub struct Heat<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub rows: &'a [String],
    pub intervals: &'a [[f64; 2]],
    pub values: &'a [Vec<Option<f64>>],
    pub color: &'a dyn Fn(f64) -> RGBColor,
}

/// Pixels per row of a heat map.
const HEAT_ROW: u32 = 22;

pub fn heat_map(width: u32, heat: &Heat) -> Result<String, Error> {
    let rows = heat.rows.len().max(1);
    let height = 130 + HEAT_ROW * rows as u32;
    let start = heat.intervals.first().map_or(0.0, |i| i[0]);
    let end = heat
        .intervals
        .last()
        .map_or(1.0, |i| i[1])
        .max(start + 1e-3);
    svg_of((width, height), |root| {
        let mut chart = ChartBuilder::on(&root)
            .caption(heat.title, (FONT, TITLE_SIZE))
            .margin(14)
            .margin_right(24)
            .x_label_area_size(52)
            .y_label_area_size(330)
            .build_cartesian_2d(start..end, 0.0..rows as f64)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc(heat.x_label)
            .x_label_formatter(&seconds_label(end - start))
            .y_labels(0)
            .axis_desc_style((FONT, AXIS_SIZE))
            .label_style((FONT, LABEL_SIZE))
            .draw()?;
        // Row 0 at the top.
        let top = |i: usize| (rows - i) as f64;
        chart.draw_series(heat.values.iter().enumerate().flat_map(|(i, values)| {
            values.iter().zip(heat.intervals).map(move |(v, interval)| {
                Rectangle::new(
                    [(interval[0], top(i) - 1.0), (interval[1], top(i))],
                    v.map_or(EMPTY, heat.color).filled(),
                )
            })
        }))?;
        // Labels by hand: a discrete axis of plotters' would want a range of one more row.
        let style = TextStyle::from((FONT, LABEL_SIZE))
            .pos(Pos::new(HPos::Right, VPos::Center))
            .color(&BLACK);
        for (i, label) in heat.rows.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(start, top(i) - 0.5));
            root.draw(&Text::new(truncate(label, 42), (x - 8, y), style.clone()))?;
        }
        Ok(())
    })
}

/// A sequential colour for `t` in [0, 1]: pale yellow to dark blue (viridis' ends, through
/// green), so that little and much are told apart in grey too.
pub fn sequential(t: f64) -> RGBColor {
    const STOPS: [(f64, (f64, f64, f64)); 5] = [
        (0.0, (253.0, 231.0, 37.0)),
        (0.25, (94.0, 201.0, 98.0)),
        (0.5, (33.0, 145.0, 140.0)),
        (0.75, (59.0, 82.0, 139.0)),
        (1.0, (68.0, 1.0, 84.0)),
    ];
    let t = t.clamp(0.0, 1.0);
    let i = STOPS
        .iter()
        .rposition(|s| s.0 <= t)
        .unwrap_or(0)
        .min(STOPS.len() - 2);
    let (t0, a) = STOPS[i];
    let (t1, b) = STOPS[i + 1];
    let f = (t - t0) / (t1 - t0);
    let mix = |x: f64, y: f64| (x + (y - x) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// The midpoint of [`fast_to_slow`]: saturated, so that half and half is not read as the
/// grey of an empty cell.
pub const HALF: RGBColor = RGBColor(150, 60, 150);

/// A colour between the slow tier's (0) and the fast tier's (1), through [`HALF`].
pub fn fast_to_slow(fast_share: f64) -> RGBColor {
    let f = fast_share.clamp(0.0, 1.0);
    let (a, b, t) = if f < 0.5 {
        (SLOW, HALF, 2.0 * f)
    } else {
        (HALF, FAST, 2.0 * f - 1.0)
    };
    let mix = |s: u8, e: u8| (s as f64 + (e as f64 - s as f64) * t).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// Stacked step areas over intervals: each series is constant over each interval.
pub struct Stack<'a> {
    pub title: &'a str,
    pub y_label: &'a str,
    pub intervals: &'a [[f64; 2]],
    pub series: &'a [(String, Vec<f64>, RGBColor)],
    pub y_format: &'a dyn Fn(&f64) -> String,
}

pub fn stacked(size: (u32, u32), stack: &Stack) -> Result<String, Error> {
    let n = stack.intervals.len();
    let start = stack.intervals.first().map_or(0.0, |i| i[0]);
    let end = stack
        .intervals
        .last()
        .map_or(1.0, |i| i[1])
        .max(start + 1e-3);
    let mut base = vec![0.0; n];
    let mut layers = Vec::new();
    for (name, values, color) in stack.series {
        let top: Vec<f64> = base
            .iter()
            .zip(values.iter().chain(std::iter::repeat(&0.0)))
            .map(|(b, v)| b + v)
            .collect();
        layers.push((name, base.clone(), top.clone(), *color));
        base = top;
    }
    let max = base.iter().copied().fold(0.0, f64::max).max(1.0) * 1.05;
    svg_of(size, |root| {
        let mut chart = ChartBuilder::on(&root)
            .caption(stack.title, (FONT, TITLE_SIZE))
            .margin(14)
            .x_label_area_size(52)
            .y_label_area_size(80)
            .build_cartesian_2d(start..end, 0.0..max)?;
        chart
            .configure_mesh()
            .x_desc("time since the profile began (s)")
            .y_desc(stack.y_label)
            .x_label_formatter(&seconds_label(end - start))
            .y_label_formatter(stack.y_format)
            .axis_desc_style((FONT, AXIS_SIZE))
            .label_style((FONT, LABEL_SIZE))
            .light_line_style(RGBColor(240, 240, 240))
            .draw()?;
        for (_, lower, upper, color) in &layers {
            let mut outline = Vec::with_capacity(4 * n);
            for (i, interval) in stack.intervals.iter().enumerate() {
                outline.push((interval[0], upper[i]));
                outline.push((interval[1], upper[i]));
            }
            for (i, interval) in stack.intervals.iter().enumerate().rev() {
                outline.push((interval[1], lower[i]));
                outline.push((interval[0], lower[i]));
            }
            chart.draw_series(std::iter::once(Polygon::new(outline, color.filled())))?;
        }
        Ok(())
    })
}

/// Bars up (`up`) and down (`down`) per interval: promotions above the axis, demotions below.
pub struct UpDown<'a> {
    pub title: &'a str,
    pub y_label: &'a str,
    pub intervals: &'a [[f64; 2]],
    pub up: (&'a str, &'a [f64], RGBColor),
    pub down: (&'a str, &'a [f64], RGBColor),
    pub y_format: &'a dyn Fn(&f64) -> String,
}

pub fn up_down(size: (u32, u32), bars: &UpDown) -> Result<String, Error> {
    let start = bars.intervals.first().map_or(0.0, |i| i[0]);
    let end = bars
        .intervals
        .last()
        .map_or(1.0, |i| i[1])
        .max(start + 1e-3);
    let most = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let max = most(bars.up.1).max(most(bars.down.1)).max(1.0) * 1.1;
    svg_of(size, |root| {
        let mut chart = ChartBuilder::on(&root)
            .caption(bars.title, (FONT, TITLE_SIZE))
            .margin(14)
            .x_label_area_size(52)
            .y_label_area_size(80)
            .build_cartesian_2d(start..end, -max..max)?;
        chart
            .configure_mesh()
            .x_desc("time since the profile began (s)")
            .y_desc(bars.y_label)
            .x_label_formatter(&seconds_label(end - start))
            .y_label_formatter(bars.y_format)
            .axis_desc_style((FONT, AXIS_SIZE))
            .label_style((FONT, LABEL_SIZE))
            .light_line_style(RGBColor(240, 240, 240))
            .draw()?;
        for ((_, values, color), sign) in [(bars.up, 1.0), (bars.down, -1.0)] {
            chart.draw_series(values.iter().zip(bars.intervals).map(|(&v, interval)| {
                let pad = (interval[1] - interval[0]) * 0.1;
                Rectangle::new(
                    [(interval[0] + pad, 0.0), (interval[1] - pad, sign * v)],
                    color.filled(),
                )
            }))?;
        }
        chart.draw_series(LineSeries::new(
            [(start, 0.0), (end, 0.0)],
            BLACK.stroke_width(1),
        ))?;
        Ok(())
    })
}

/// Vertical bars, one per category.
pub struct Bars<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub categories: &'a [String],
    pub values: &'a [f64],
    pub color: RGBColor,
    pub y_format: &'a dyn Fn(&f64) -> String,
}

pub fn bars(size: (u32, u32), bars: &Bars) -> Result<String, Error> {
    let n = bars.categories.len().max(1);
    let max = bars.values.iter().copied().fold(0.0, f64::max).max(1e-9) * 1.1;
    svg_of(size, |root| {
        let mut chart = ChartBuilder::on(&root)
            .caption(bars.title, (FONT, TITLE_SIZE))
            .margin(14)
            .x_label_area_size(60)
            .y_label_area_size(72)
            .build_cartesian_2d(0.0..n as f64, 0.0..max)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc(bars.x_label)
            .y_desc(bars.y_label)
            .x_labels(0)
            .y_label_formatter(bars.y_format)
            .axis_desc_style((FONT, AXIS_SIZE))
            .label_style((FONT, LABEL_SIZE))
            .light_line_style(RGBColor(240, 240, 240))
            .draw()?;
        let color = bars.color;
        chart.draw_series(bars.values.iter().enumerate().map(|(i, &v)| {
            let i = i as f64;
            Rectangle::new([(i + 0.15, 0.0), (i + 0.85, v)], color.filled())
        }))?;
        let style = TextStyle::from((FONT, LABEL_SIZE))
            .pos(Pos::new(HPos::Center, VPos::Top))
            .color(&BLACK);
        for (i, category) in bars.categories.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
            root.draw(&Text::new(category.clone(), (x, y + 6), style.clone()))?;
        }
        Ok(())
    })
}

/// Tick labels of a time axis `span_s` long: as many decimals as tell its ticks apart.
fn seconds_label(span_s: f64) -> impl Fn(&f64) -> String {
    let decimals = if span_s < 2.0 {
        2
    } else if span_s < 20.0 {
        1
    } else {
        0
    };
    move |x| format!("{x:.decimals$}")
}

/// At most `max` characters of `text`, an ellipsis marking the cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let kept: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{kept}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_their_titles_and_labels() {
        let axes = Axes {
            title: "fast tier <needed>",
            x_label: "capacity (% of footprint)",
            y_label: "accesses served (%)",
            x: 0.0..100.0,
            y: 0.0..100.0,
            x_format: &|x| format!("{x:.0} %"),
            y_format: &|y| format!("{y:.0} %"),
        };
        let svg = line_chart(
            (600, 300),
            &axes,
            &[Line {
                name: "hotset".into(),
                points: vec![(1.0, 10.0), (100.0, 99.0)],
                color: PALETTE[0],
                dashed: false,
            }],
            &[Marker {
                name: "this run".into(),
                at: (20.0, 50.0),
                color: PALETTE[3],
            }],
        )
        .unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(
            svg.contains("fast tier &lt;needed&gt;"),
            "titles are escaped"
        );
        for text in ["capacity (% of footprint)", "accesses served (%)"] {
            assert!(svg.contains(text), "{text}");
        }
        let rows = ["S1 main".to_string(), "S2 helper".to_string()];
        let svg = heat_map(
            800,
            &Heat {
                title: "accesses",
                x_label: "time (s)",
                rows: &rows,
                intervals: &[[0.0, 1.0], [1.0, 2.0]],
                values: &[vec![Some(1.0), None], vec![Some(0.5), Some(0.0)]],
                color: &sequential,
            },
        )
        .unwrap();
        assert!(svg.contains("S1 main") && svg.contains("S2 helper"));
        assert!(svg.contains(r##"fill="#EEEEEE""##), "an empty cell is grey");
    }

    #[test]
    fn colours_run_their_scales() {
        assert_eq!(sequential(0.0), RGBColor(253, 231, 37));
        assert_eq!(sequential(1.0), RGBColor(68, 1, 84));
        assert_eq!(sequential(7.0), sequential(1.0));
        assert_eq!(fast_to_slow(1.0), FAST);
        assert_eq!(fast_to_slow(0.0), SLOW);
        assert_eq!(fast_to_slow(0.5), HALF);
        assert_eq!(seconds_label(1.0)(&0.5), "0.50");
        assert_eq!(seconds_label(12.0)(&2.5), "2.5");
        assert_eq!(seconds_label(300.0)(&120.0), "120");
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
    }
}
