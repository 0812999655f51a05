//! The report as one self-contained HTML file: an inline stylesheet (`style.css`), inline SVG
//! charts, plain tables, no JavaScript, and a Content-Security-Policy that forbids fetching
//! anything, so the file reads the same offline, from a mail attachment or a CI artifact. With
//! several profiles, each section shows them side by side, labelled by file name.
//!
//! This file lays out the document and holds what every section uses; each section is drawn
//! by a file of its own: [`overview`] (the summary and the fast tier needed), [`sites`],
//! [`time`] (over time) and [`detail`] (pages and latency).

mod detail;
mod overview;
mod sites;
mod time;

use super::charts::{self, PALETTE};
use super::{human_seconds, Report};
use plotters::style::RGBColor;
use std::fmt::Write;

const STYLE: &str = include_str!("style.css");

/// Escapes text for HTML.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The whole document.
pub fn document(reports: &[Report]) -> Result<String, Box<dyn std::error::Error>> {
    let width = if reports.len() == 1 { 1180 } else { 620 };
    let programs: Vec<String> = reports.iter().map(|r| r.summary.program.clone()).collect();
    let mut programs_unique = programs.clone();
    programs_unique.dedup();
    let title = format!("objtier report: {}", programs_unique.join(", "));
    let mut h = String::new();
    write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"objtier {}\">\n<title>{}</title>\n<style>{STYLE}</style></head>\n<body>\n",
        env!("CARGO_PKG_VERSION"),
        esc(&title)
    )?;
    write!(
        h,
        "<header><div class=\"inner\"><h1>{}</h1><p class=\"muted\">{} · where memory goes, \
         object by object: which allocation sites are hot, where they lived, how much fast \
         memory the program needs, and what the tiering moved. The study of Moura et al., \
         “Performance Characterization of AutoNUMA Memory Tiering on Graph Analytics”, for \
         any profile.</p><nav>\
         <a href=\"#summary\">1 Summary</a><a href=\"#fast-memory\">2 Fast memory needed</a>\
         <a href=\"#sites\">3 Top sites</a><a href=\"#over-time\">4 Over time</a>\
         <a href=\"#pages\">5 Pages</a><a href=\"#latency\">6 Latency</a></nav></div></header>\n<main>\n",
        esc(&title),
        esc(&reports
            .iter()
            .map(|r| r.summary.label.clone())
            .collect::<Vec<_>>()
            .join(", "))
    )?;
    section(&mut h, "summary", "1. Summary", reports, overview::summary)?;
    overview::fast_memory(&mut h, reports, width)?;
    section(
        &mut h,
        "sites",
        "3. Top allocation sites and objects",
        reports,
        |h, r| sites::sites(h, r, width),
    )?;
    section(&mut h, "over-time", "4. Over time", reports, |h, r| {
        time::over_time(h, r, width)
    })?;
    section(
        &mut h,
        "pages",
        "5. Pages: touches and reuse",
        reports,
        |h, r| detail::pages(h, r, width),
    )?;
    section(
        &mut h,
        "latency",
        "6. Latency and data source by tier",
        reports,
        detail::latency,
    )?;
    write!(
        h,
        "<footer>Made by objtier {} (<code>objtier report</code>); what each section means: \
         docs/report.md. The same figures as JSON: <code>objtier report --json</code>; as CSV: \
         <code>--csv DIR</code>.</footer>\n</main></body></html>\n",
        env!("CARGO_PKG_VERSION")
    )?;
    Ok(h)
}

type Body<'a> = dyn FnMut(&mut String, &Report) -> Result<(), Box<dyn std::error::Error>> + 'a;
/// A section with each profile's part side by side.
pub(super) fn section(
    h: &mut String,
    id: &str,
    title: &str,
    reports: &[Report],
    mut body: impl FnMut(&mut String, &Report) -> Result<(), Box<dyn std::error::Error>>,
) -> Result<(), Box<dyn std::error::Error>> {
    writeln!(h, "<section id=\"{id}\"><h2>{}</h2>", esc(title))?;
    columns(h, reports, &mut body)?;
    h.push_str("</section>\n");
    Ok(())
}

pub(super) fn columns(
    h: &mut String,
    reports: &[Report],
    body: &mut Body,
) -> Result<(), Box<dyn std::error::Error>> {
    let several = reports.len() > 1;
    if several {
        h.push_str("<div class=\"cols\">");
    }
    for r in reports {
        h.push_str("<div class=\"profile\">");
        if several {
            write!(h, "<h3>{}</h3>", esc(&r.summary.label))?;
        }
        body(h, r)?;
        h.push_str("</div>\n");
    }
    if several {
        h.push_str("</div>\n");
    }
    Ok(())
}

/// "Measured by ...": the source and how far to trust it, in full in the summary and in a
/// line in the other sections.
pub(super) fn source_note(h: &mut String, r: &Report) -> std::fmt::Result {
    write!(
        h,
        "<p class=\"source\">{}: {}.</p>",
        measured_by(r),
        esc(r.summary.precision_brief)
    )
}

/// "Measured by SOURCE (how it was set up)", in HTML: the daemon's description of its source
/// starts with the source's name, which the bold part says already.
pub(super) fn measured_by(r: &Report) -> String {
    let source = r.summary.source;
    let detail = r.summary.source_description.trim();
    let detail = detail.strip_prefix(source).unwrap_or(detail).trim();
    if detail.is_empty() {
        format!("<b>Measured by {}</b>", esc(source))
    } else {
        format!(
            "<b>Measured by {}</b> <span class=\"muted\">{}</span>",
            esc(source),
            esc(detail)
        )
    }
}

/// A chart's legend, in HTML below it: site names are longer than a chart's corner.
pub(super) fn legend(h: &mut String, items: &[(String, RGBColor, Swatch)]) {
    h.push_str("<div class=\"legend\">");
    for (name, color, swatch) in items {
        let class = match swatch {
            Swatch::Line => "line",
            Swatch::Dashed => "dashed",
            Swatch::Area => "area",
            Swatch::Diamond => "diamond",
        };
        let _ = write!(
            h,
            "<span><i class=\"{class}\" style=\"--c:#{:02x}{:02x}{:02x}\"></i>{}</span>",
            color.0,
            color.1,
            color.2,
            esc(name)
        );
    }
    h.push_str("</div>\n");
}

#[derive(Clone, Copy)]
pub(super) enum Swatch {
    Line,
    Dashed,
    Area,
    Diamond,
}

pub(super) fn chart(h: &mut String, svg: String) {
    h.push_str("<div class=\"chart\">");
    h.push_str(&svg);
    h.push_str("</div>\n");
}

pub(super) fn pct_axis(x: &f64) -> String {
    format!("{x:.0} %")
}

pub(super) fn opt_seconds(s: Option<f64>) -> String {
    s.map_or("-".into(), human_seconds)
}

pub(super) fn count(v: f64) -> String {
    if v >= 100.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The unit a byte axis whose largest value is `max` counts in: its size and name.
pub(super) fn byte_unit(max: f64) -> (f64, &'static str) {
    match max {
        m if m >= (1u64 << 30) as f64 => ((1u64 << 30) as f64, "GiB"),
        m if m >= (1u64 << 20) as f64 => ((1u64 << 20) as f64, "MiB"),
        m if m >= 1024.0 => (1024.0, "KiB"),
        _ => (1.0, "bytes"),
    }
}

/// `series` in the unit of their stacked maximum, and that unit's name.
pub(super) fn in_byte_unit(series: &mut [(String, Vec<f64>, RGBColor)]) -> &'static str {
    let n = series.iter().map(|s| s.1.len()).max().unwrap_or(0);
    let max = (0..n)
        .map(|i| {
            series
                .iter()
                .map(|s| s.1.get(i).copied().unwrap_or(0.0))
                .sum::<f64>()
        })
        .fold(0.0, f64::max);
    let (size, name) = byte_unit(max);
    for s in series.iter_mut() {
        s.1.iter_mut().for_each(|v| *v /= size);
    }
    name
}

pub(super) fn number_axis(y: &f64) -> String {
    let y = y.abs();
    if y != 0.0 && y < 10.0 && y.fract() != 0.0 {
        format!("{y:.1}")
    } else {
        format!("{y:.0}")
    }
}

/// Tier 0 is blue and tier 1 orange everywhere; tiers beyond get colours of their own.
pub(super) fn tier_color(tier: usize) -> RGBColor {
    match tier {
        0 => charts::FAST,
        1 => charts::SLOW,
        t => PALETTE[(t + 2) % PALETTE.len()],
    }
}

pub(super) fn area_legend(
    series: &[(String, Vec<f64>, RGBColor)],
) -> Vec<(String, RGBColor, Swatch)> {
    series
        .iter()
        .map(|(name, _, color)| (name.clone(), *color, Swatch::Area))
        .collect()
}

pub(super) fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map_or(String::new(), |c| c.to_uppercase().chain(chars).collect())
}

/// `YYYY-MM-DD HH:MM UTC` of a Unix time (the civil calendar from days, Howard Hinnant's).
pub fn utc_date(unix_s: f64) -> String {
    let secs = unix_s.max(0.0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_dates_are_civil() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(utc_date(0.0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_date(1_709_251_200.0 + 3723.0), "2024-03-01 01:02 UTC");
        assert_eq!(capitalized("this profile"), "This profile");
    }

    /// Every section, whatever the profile lacks; nothing to fetch; several profiles labelled.
    #[test]
    fn the_document_has_every_section_and_needs_nothing_else() {
        use crate::report::test_profiles::{profile, site};
        use crate::report::{build, Input};
        let mut located = profile(2, 3);
        let mut s = site("/bin/app+0x10", 4 << 20, &[5.0, 1.0, 0.0]);
        s.series.tier_bytes = Some(vec![vec![0, 4 << 20], vec![4 << 20, 0], vec![4 << 20, 0]]);
        located.sites = vec![s, site("/bin/app+0x20", 1 << 20, &[1.0, 1.0, 1.0])];
        located.peak_footprint_bytes = 5 << 20;
        let mut bare = profile(1, 0);
        bare.sites = vec![site("/bin/app+0x10", 4096, &[])];
        let reports: Vec<Report> = [
            ("a.json", located),
            ("b.json", bare),
            ("c.json", crate::report::test_profiles::recorded()),
        ]
        .into_iter()
        .map(|(label, profile)| {
            build(&Input {
                label: label.into(),
                profile,
                live: None,
            })
        })
        .collect();
        let html = document(&reports).unwrap();
        for id in [
            "summary",
            "fast-memory",
            "sites",
            "over-time",
            "pages",
            "latency",
        ] {
            assert_eq!(
                html.matches(&format!("<section id=\"{id}\">")).count(),
                1,
                "{id}"
            );
        }
        assert!(html.contains("Content-Security-Policy\" content=\"default-src 'none'"));
        assert!(!html.contains("<script") && !html.contains("src=\"http"));
        assert!(html.contains("<h3>a.json</h3>") && html.contains("<h3>b.json</h3>"));
        assert!(
            html.contains("Promoted (up) and demoted (down)"),
            "a's migrations"
        );
        assert!(html.contains("The profile has no accesses"), "b has none");
        assert!(html.contains("Pages moved more than once (ping-pong) are not in this profile"));
        assert!(html.contains("This profile has no page detail (source damon)"));
        assert!(html.contains("Source damon records neither latency nor data source"));
        // c: moves recorded page by page, with ping-pong; data sources by tier.
        assert!(html.contains("recorded page by page"));
        assert!(html.contains("<b>Ping-pong</b>: 3 moves were of pages"));
        assert!(html.contains("Ping-pong: moves of pages that had moved before"));
        assert!(html.contains("Data source: the memory level that served the samples"));
        assert!(html.contains("Data source of the samples of pages in tier 1"));
        assert!(html.contains("title=\"CXL-attached memory\">cxl</td>"));
        assert!(html.contains("By tier as recorded"));
    }
}
