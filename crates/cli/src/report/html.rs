//! The report as one self-contained HTML file: an inline stylesheet, inline SVG charts, plain
//! tables, no JavaScript, and a Content-Security-Policy that forbids fetching anything, so the
//! file reads the same offline, from a mail attachment or a CI artifact. With several
//! profiles, each section shows them side by side, labelled by file name.

use super::charts::{self, Axes, Line, Marker, PALETTE};
use super::figures::SiteFigure;
use super::pages::PagesFigure;
use super::{human_bytes, human_seconds, percent, Report};
use plotters::style::RGBColor;
use std::fmt::Write;

/// Sites listed in the top table of each profile.
pub const TOP_SITES: usize = 20;

const STYLE: &str = r#"
:root { --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --soft: #f6f8fa; --fast: #1f77b4; --slow: #e6550d; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: var(--ink); background: #fff; }
main { max-width: 1240px; margin: 0 auto; padding: 0 20px 48px; }
header { background: var(--soft); border-bottom: 1px solid var(--line); margin-bottom: 8px; }
header .inner { max-width: 1240px; margin: 0 auto; padding: 20px 20px 12px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 21px; margin: 36px 0 8px; padding-bottom: 6px; border-bottom: 1px solid var(--line); }
h3 { font-size: 16px; margin: 20px 0 6px; }
nav a { color: var(--fast); margin-right: 16px; text-decoration: none; font-size: 14px; }
p { margin: 6px 0; max-width: 980px; }
.muted, .note { color: var(--muted); font-size: 13.5px; }
.source { background: #fff8e6; border-left: 4px solid #e3b341; padding: 6px 10px; font-size: 13.5px; max-width: none; }
.absent { background: var(--soft); border-left: 4px solid var(--line); padding: 8px 12px; }
.cols { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 24px; }
.profile > h3:first-child { margin-top: 12px; color: var(--fast); }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 13.5px; margin: 6px 0 10px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: var(--soft); font-weight: 600; white-space: nowrap; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.kv th { width: 190px; background: none; color: var(--muted); font-weight: 500; white-space: normal; }
details summary { cursor: pointer; }
table.sites td.site { max-width: 380px; }
details ol { margin: 4px 0 0; padding-left: 22px; font: 12px/1.45 ui-monospace, SFMono-Regular, Menlo, monospace; color: var(--muted); }
.chart svg { width: 100%; height: auto; display: block; }
.chart { margin: 8px 0; border: 1px solid var(--line); border-radius: 6px; padding: 4px; }
.scale { display: flex; align-items: center; gap: 8px; font-size: 13px; color: var(--muted); margin: -2px 0 10px; }
.scale span.bar { display: inline-block; width: 160px; height: 12px; border-radius: 2px; }
.bar-in { display: inline-block; height: 10px; background: var(--fast); vertical-align: middle; margin-right: 4px; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 18px; font-size: 13px; margin: -2px 4px 12px; }
.legend span { display: inline-flex; align-items: center; gap: 6px; }
.legend i { display: inline-block; width: 18px; height: 12px; }
.legend i.line { height: 3px; background: var(--c); }
.legend i.dashed { height: 0; border-top: 3px dashed var(--c); }
.legend i.area { background: var(--c); border-radius: 2px; }
.legend i.diamond { width: 11px; height: 11px; background: var(--c); transform: rotate(45deg); border: 1px solid #000; margin: 0 3px; }
footer { color: var(--muted); font-size: 13px; margin-top: 40px; }
"#;

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
    section(&mut h, "summary", "1. Summary", reports, |h, r| {
        summary(h, r)
    })?;
    fast_memory(&mut h, reports, width)?;
    section(
        &mut h,
        "sites",
        "3. Top allocation sites and objects",
        reports,
        |h, r| sites(h, r, width),
    )?;
    section(&mut h, "over-time", "4. Over time", reports, |h, r| {
        over_time(h, r, width)
    })?;
    section(
        &mut h,
        "pages",
        "5. Pages: touches and reuse",
        reports,
        |h, r| pages(h, r, width),
    )?;
    section(
        &mut h,
        "latency",
        "6. Latency and data source by tier",
        reports,
        latency,
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
fn section(
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

fn columns(
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
fn source_note(h: &mut String, r: &Report) -> std::fmt::Result {
    write!(
        h,
        "<p class=\"source\"><b>Measured by {}</b>: {}.</p>",
        esc(measured_by(r)),
        esc(r.summary.precision_brief)
    )
}

fn measured_by(r: &Report) -> &str {
    if r.summary.source_description.is_empty() {
        r.summary.source
    } else {
        &r.summary.source_description
    }
}

/// A chart's legend, in HTML below it: site names are longer than a chart's corner.
fn legend(h: &mut String, items: &[(String, RGBColor, Swatch)]) {
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
enum Swatch {
    Line,
    Dashed,
    Area,
    Diamond,
}

fn summary(h: &mut String, r: &Report) -> Result<(), Box<dyn std::error::Error>> {
    let s = &r.summary;
    write!(
        h,
        "<p class=\"source\"><b>Measured by {}</b>: {}.</p>",
        esc(measured_by(r)),
        esc(s.precision)
    )?;
    h.push_str("<table class=\"kv\">");
    let mut row = |k: &str, v: String| {
        let _ = write!(h, "<tr><th>{}</th><td>{v}</td></tr>", esc(k));
    };
    row("Profile", esc(&s.label));
    row(
        "Program",
        format!(
            "<b>{}</b> <span class=\"muted\">{}</span>",
            esc(&s.program),
            esc(&s.exe)
        ),
    );
    if !s.command.is_empty() {
        row(
            "Command",
            format!("<code>{}</code>", esc(&s.command.join(" "))),
        );
    }
    if let Some(live) = &s.live {
        row(
            "Live process",
            if live.profiled {
                format!(
                    "pid {}: profiled from its start; this is its recording so far",
                    live.pid
                )
            } else {
                format!(
                    "pid {}: not profiled from its start; a live snapshot of its objects now \
                     and of the daemon's access estimates of their records (one interval)",
                    live.pid
                )
            },
        );
    }
    row("Run length", human_seconds(s.duration_s));
    row(
        "Source",
        format!(
            "{}; one access is one {}",
            esc(s.source),
            esc(if s.access_unit.is_empty() {
                "access"
            } else {
                &s.access_unit
            })
        ),
    );
    row(
        "Attributed",
        match s.attributed_share {
            Some(share) => format!(
                "{} of what the source reported fell on tracked objects \
                 <span class=\"muted\">({:.0} of {:.0}; the rest: stacks, static data, files, \
                 untracked memory)</span>",
                percent(share),
                s.attributed,
                s.sampled
            ),
            None => "not recorded".to_string(),
        },
    );
    row(
        "Accesses",
        format!(
            "{:.0} attributed to {} sites{}",
            s.total_accesses,
            s.sites,
            if s.loads_and_stores {
                ", loads and stores apart"
            } else {
                ""
            }
        ),
    );
    row("Peak footprint", human_bytes(s.peak_footprint_bytes));
    let tiers: Vec<String> = s
        .tiers
        .iter()
        .map(|t| {
            format!(
                "tier {} (node{} {}): {}{}",
                t.tier,
                if t.nodes.len() == 1 { "" } else { "s" },
                t.nodes
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                human_bytes(t.capacity_bytes),
                t.read_latency_ns
                    .map_or(String::new(), |l| format!(", {l} ns read latency"))
            )
        })
        .collect();
    row(
        "Tiers",
        if tiers.is_empty() {
            "not recorded".into()
        } else {
            esc(&tiers.join("; "))
        },
    );
    row(
        "Timeline",
        format!(
            "{} intervals of {}{}",
            s.intervals,
            human_seconds(s.interval_s),
            if s.located {
                "; where each site's pages were is known at every interval's end"
            } else {
                "; where pages were is not recorded"
            }
        ),
    );
    row(
        "Processes",
        format!(
            "{}{}{}",
            s.processes,
            if s.dropped_events > 0 {
                format!(" ({} events dropped: counts are short)", s.dropped_events)
            } else {
                String::new()
            },
            if s.merged_runs > 1 {
                format!("; {} runs merged", s.merged_runs)
            } else {
                String::new()
            }
        ),
    );
    if s.created_unix_s > 0.0 {
        row(
            "Taken",
            format!(
                "{} by objtier {}",
                utc_date(s.created_unix_s),
                esc(&s.objtier_version)
            ),
        );
    }
    h.push_str("</table>");
    Ok(())
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

fn pct_axis(x: &f64) -> String {
    format!("{x:.0} %")
}

fn fast_memory(
    h: &mut String,
    reports: &[Report],
    width: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    h.push_str(
        "<section id=\"fast-memory\"><h2>2. How much fast memory this program needs</h2>\
         <p>For a fast tier of 1 to 100 % of the peak footprint (the slow tier unbounded), the \
         share of all accesses the fast tier would serve if each advise algorithm placed the \
         sites (<code>objtier advise --fast-capacity N%</code> at every N). The curve's ceiling \
         is below 100 % by the accesses to objects of unknown site, which no placement can \
         place. Where the run had tiers, the diamond is what it actually got: each interval's \
         accesses of each site weighted by the share of the site's bytes in tier 0 at the \
         interval's end, at the most bytes tier 0 held at once. A user without a tiered \
         machine reads off the curve what a CXL expander behind a given amount of DRAM would \
         give.</p>\n",
    );
    if reports.len() > 1 {
        let lines: Vec<Line> = reports
            .iter()
            .enumerate()
            .map(|(i, r)| curve_line(r, "hotset", &r.summary.label, PALETTE[i % PALETTE.len()]))
            .collect();
        let markers: Vec<Marker> = reports
            .iter()
            .enumerate()
            .filter_map(|(i, r)| observed_marker(r, PALETTE[i % PALETTE.len()]))
            .collect();
        chart(
            h,
            charts::line_chart(
                (1180, 440),
                &Axes {
                    title: "Fast tier needed, hotset, per profile",
                    x_label: "fast tier capacity (% of each profile's peak footprint)",
                    y_label: "accesses served by the fast tier (%)",
                    x: 0.0..100.0,
                    y: 0.0..100.0,
                    x_format: &pct_axis,
                    y_format: &pct_axis,
                },
                &lines,
                &markers,
            )?,
        );
        legend(h, &line_legend(&lines, &markers));
    }
    columns(h, reports, &mut |h, r| fast_memory_of(h, r, width))?;
    h.push_str("</section>\n");
    Ok(())
}

fn line_legend(lines: &[Line], markers: &[Marker]) -> Vec<(String, RGBColor, Swatch)> {
    lines
        .iter()
        .map(|l| {
            let swatch = if l.dashed {
                Swatch::Dashed
            } else {
                Swatch::Line
            };
            (l.name.clone(), l.color, swatch)
        })
        .chain(
            markers
                .iter()
                .map(|m| (m.name.clone(), m.color, Swatch::Diamond)),
        )
        .collect()
}

fn curve_line(r: &Report, algorithm: &str, name: &str, color: RGBColor) -> Line {
    let shares = r
        .curve
        .algorithms
        .iter()
        .find(|a| a.algorithm == algorithm)
        .map(|a| a.shares.clone())
        .unwrap_or_default();
    let mut points = vec![(0.0, 0.0)];
    points.extend(
        r.curve
            .percents
            .iter()
            .zip(shares)
            .map(|(&p, s)| (p as f64, 100.0 * s)),
    );
    Line {
        name: name.to_string(),
        points,
        color,
        // bandwidth starts from multi-knapsack's placement and often keeps it.
        dashed: algorithm == "bandwidth",
    }
}

fn observed_marker(r: &Report, color: RGBColor) -> Option<Marker> {
    let o = r.curve.observed.as_ref().filter(|o| o.tiers >= 2)?;
    Some(Marker {
        name: format!("{}: this run", r.summary.label),
        at: (
            (100.0 * o.fast_share_of_footprint).min(100.0),
            100.0 * o.share,
        ),
        color,
    })
}

fn fast_memory_of(
    h: &mut String,
    r: &Report,
    width: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    source_note(h, r)?;
    let c = &r.curve;
    if c.total_accesses <= 0.0 {
        write!(
            h,
            "<p class=\"absent\">The profile has no accesses (source {}): no algorithm can \
             rank its sites. Profile with an access source (see <code>objtier doctor</code>).</p>",
            esc(r.summary.source)
        )?;
        return Ok(());
    }
    let lines: Vec<Line> = c
        .algorithms
        .iter()
        .enumerate()
        .map(|(i, a)| curve_line(r, a.algorithm, a.algorithm, PALETTE[i]))
        .collect();
    let marker: Vec<Marker> = observed_marker(r, PALETTE[3])
        .map(|mut m| {
            m.name = "this run (observed)".into();
            m
        })
        .into_iter()
        .collect();
    let title = format!(
        "Fast tier needed: {} (100 % = {})",
        r.summary.program,
        human_bytes(c.footprint_bytes)
    );
    chart(
        h,
        charts::line_chart(
            (width, 420),
            &Axes {
                title: &title,
                x_label: "fast tier capacity (% of the peak footprint)",
                y_label: "accesses served by the fast tier (%)",
                x: 0.0..100.0,
                y: 0.0..100.0,
                x_format: &pct_axis,
                y_format: &pct_axis,
            },
            &lines,
            &marker,
        )?,
    );
    legend(h, &line_legend(&lines, &marker));
    h.push_str("<div class=\"scroll\"><table><tr><th>fast tier needed to serve</th>");
    for t in super::curve::TARGETS {
        write!(h, "<th class=\"n\">{:.0} %</th>", 100.0 * t)?;
    }
    h.push_str("</tr>");
    for a in &c.algorithms {
        write!(h, "<tr><td>{}</td>", esc(a.algorithm))?;
        for t in super::curve::TARGETS {
            let n = c
                .needed
                .iter()
                .find(|n| n.algorithm == a.algorithm && n.target == t);
            match n.and_then(|n| n.percent.zip(n.bytes)) {
                Some((p, b)) => write!(
                    h,
                    "<td class=\"n\">{p} %<br><span class=\"muted\">{}</span></td>",
                    human_bytes(b)
                )?,
                None => h.push_str("<td class=\"n\">not reached</td>"),
            }
        }
        h.push_str("</tr>");
    }
    h.push_str("</table></div>");
    write!(
        h,
        "<p class=\"note\">Costs: fast tier {:.0}, slow tier {:.0} per load (the profile's \
         tier latencies in ns where recorded; they weigh multi-knapsack and bandwidth). \
         Accesses of unknown site: {}.</p>",
        c.costs[0].0,
        c.costs[1].0,
        percent(c.unplaceable_share)
    )?;
    match &c.observed {
        Some(o) if o.tiers >= 2 => write!(
            h,
            "<p><b>This run got {}</b> of its accesses from tier 0, holding at most {} there \
             ({} of the footprint); {} of the accesses were of sites whose pages were located \
             (the others count as not served by tier 0).</p>",
            percent(o.share),
            human_bytes(o.fast_bytes_peak),
            percent(o.fast_share_of_footprint),
            percent(o.located_share)
        )?,
        Some(_) => h.push_str(
            "<p class=\"absent\">The run had one tier: every access was served by it. The \
             curve is what a fast tier of each size, in front of a slower one, would give.</p>",
        ),
        None => h.push_str(
            "<p class=\"absent\">The profile does not say where its pages were \
             (<code>series.tier_bytes</code> is empty), so what the run actually got is not \
             known; a profile taken by this objtier on a tiered machine records it.</p>",
        ),
    }
    Ok(())
}

fn chart(h: &mut String, svg: String) {
    h.push_str("<div class=\"chart\">");
    h.push_str(&svg);
    h.push_str("</div>\n");
}

fn opt_seconds(s: Option<f64>) -> String {
    s.map_or("-".into(), human_seconds)
}

fn count(v: f64) -> String {
    if v >= 100.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn site_cell(s: &SiteFigure) -> String {
    let frames: String = s
        .frames
        .iter()
        .map(|f| format!("<li>{}</li>", esc(f)))
        .collect();
    if frames.is_empty() {
        format!("<b>{}</b> {}", esc(&s.id), esc(&s.label))
    } else {
        format!(
            "<details><summary><b>{}</b> {}</summary><ol>{frames}</ol></details>",
            esc(&s.id),
            esc(&s.label)
        )
    }
}

fn sites(h: &mut String, r: &Report, width: u32) -> Result<(), Box<dyn std::error::Error>> {
    source_note(h, r)?;
    let located = r.sites.iter().any(|s| s.tier_accesses.is_some());
    let moved = r.over_time.migrations.as_ref();
    write!(
        h,
        "<p>The {} most accessed of {} sites (click a site for its call path, innermost frame \
         first). Accesses per MiB rank sites as the seed's object-level mapping does; \
         lifetimes are of the objects freed while profiled (the median to its histogram \
         bucket, a quarter of a power of two).</p>",
        TOP_SITES.min(r.sites.len()),
        r.sites.len()
    )?;
    let loads_and_stores = r.summary.loads_and_stores;
    h.push_str(
        "<div class=\"scroll\"><table class=\"sites\"><tr><th>site</th>\
         <th class=\"n\">peak live</th><th class=\"n\">objects</th><th class=\"n\">accesses</th>\
         <th class=\"n\">share</th><th class=\"n\">per MiB</th>",
    );
    if loads_and_stores {
        h.push_str("<th class=\"n\">loads / stores</th>");
    }
    h.push_str(
        "<th class=\"n\">lifetime min / median / max</th>\
         <th class=\"n\" title=\"objects that lived longer than one interval\">&gt; 1 interval</th>\
         <th class=\"n\" title=\"objects still live at exit\">at exit</th>",
    );
    if located {
        h.push_str("<th class=\"n\">served by tier 0</th><th class=\"n\">moved in / out</th>");
    }
    h.push_str("</tr>");
    for s in r.sites.iter().take(TOP_SITES) {
        write!(
            h,
            "<tr><td class=\"site\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\"><span class=\"bar-in\" style=\"width:{:.0}px\"></span>{}</td>\
             <td class=\"n\">{}</td>",
            site_cell(s),
            human_bytes(s.peak_live_bytes),
            s.allocations,
            count(s.accesses),
            (40.0 * s.access_share).round(),
            percent(s.access_share),
            count(s.accesses_per_mib),
        )?;
        if loads_and_stores {
            let loads = match (s.loads, s.stores) {
                (Some(l), Some(st)) => format!("{} / {}", count(l), count(st)),
                _ => "-".into(),
            };
            write!(h, "<td class=\"n\">{loads}</td>")?;
        }
        write!(
            h,
            "<td class=\"n\">{} / {} / {}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>",
            opt_seconds(s.lifetime.min_s),
            opt_seconds(s.lifetime.median_s),
            opt_seconds(s.lifetime.max_s),
            s.lifetime.past_one_interval,
            s.lifetime.live_at_exit
        )?;
        if located {
            let fast = s.tier_accesses.as_ref().and_then(|t| t.first().copied());
            let served = match fast {
                Some(f) if s.accesses > 0.0 => percent(f / s.accesses),
                _ => "-".into(),
            };
            let moves = moved
                .and_then(|m| m.sites.iter().find(|m| m.id == s.id))
                .map_or("-".into(), |m| {
                    format!(
                        "{} / {}",
                        human_bytes(m.promoted_bytes),
                        human_bytes(m.demoted_bytes)
                    )
                });
            write!(
                h,
                "<td class=\"n\">{served}</td><td class=\"n\">{moves}</td>"
            )?;
        }
        h.push_str("</tr>");
    }
    h.push_str("</table></div>");
    if !r.summary.loads_and_stores {
        write!(
            h,
            "<p class=\"note\">Loads and stores are not told apart by this source ({}).</p>",
            esc(r.summary.source)
        )?;
    }
    h.push_str("<h3>Each tier's top sites</h3>");
    match &r.tier_top {
        Some(tiers) => {
            h.push_str(
                "<p>The share of each tier's accesses each site took (the seed's Fig. 6: a \
                 few objects take most of the slow tier's accesses). A site's accesses in an \
                 interval are split among the tiers as its bytes were at the interval's end.</p>",
            );
            h.push_str("<div class=\"cols\">");
            for t in tiers {
                let categories: Vec<String> = t.sites.iter().map(|s| s.id.clone()).collect();
                let values: Vec<f64> = t.sites.iter().map(|s| 100.0 * s.share).collect();
                let title = format!(
                    "Tier {}: top sites ({} of the located accesses)",
                    t.tier,
                    percent(t.share_of_located)
                );
                h.push_str("<div>");
                if t.sites.is_empty() {
                    write!(
                        h,
                        "<p class=\"absent\">Tier {} served no access.</p>",
                        t.tier
                    )?;
                } else {
                    chart(
                        h,
                        charts::bars(
                            ((width / 2).max(560), 320),
                            &charts::Bars {
                                title: &title,
                                x_label: "site",
                                y_label: "share of the tier's accesses (%)",
                                categories: &categories,
                                values: &values,
                                color: tier_color(t.tier),
                                y_format: &pct_axis,
                            },
                        )?,
                    );
                }
                h.push_str("</div>");
            }
            h.push_str("</div>");
        }
        None => h.push_str(
            "<p class=\"absent\">Not known: the profile does not say where its pages were \
             (<code>series.tier_bytes</code>). Profiles taken by this objtier record it.</p>",
        ),
    }
    Ok(())
}

/// The unit a byte axis whose largest value is `max` counts in: its size and name.
fn byte_unit(max: f64) -> (f64, &'static str) {
    match max {
        m if m >= (1u64 << 30) as f64 => ((1u64 << 30) as f64, "GiB"),
        m if m >= (1u64 << 20) as f64 => ((1u64 << 20) as f64, "MiB"),
        m if m >= 1024.0 => (1024.0, "KiB"),
        _ => (1.0, "bytes"),
    }
}

/// `series` in the unit of their stacked maximum, and that unit's name.
fn in_byte_unit(series: &mut [(String, Vec<f64>, RGBColor)]) -> &'static str {
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

fn number_axis(y: &f64) -> String {
    let y = y.abs();
    if y != 0.0 && y < 10.0 && y.fract() != 0.0 {
        format!("{y:.1}")
    } else {
        format!("{y:.0}")
    }
}

fn over_time(h: &mut String, r: &Report, width: u32) -> Result<(), Box<dyn std::error::Error>> {
    let t = &r.over_time;
    source_note(h, r)?;
    if t.intervals.is_empty() {
        h.push_str("<p class=\"absent\">The profile has no timeline (no intervals).</p>");
        return Ok(());
    }
    let rows: Vec<String> = t
        .heat
        .iter()
        .map(|s| format!("{} {}", s.id, s.label))
        .collect();
    if rows.is_empty() {
        h.push_str("<p class=\"absent\">No site was seen accessed: no heat map.</p>");
    } else {
        let max = t
            .heat
            .iter()
            .flat_map(|s| &s.values)
            .copied()
            .fold(0.0, f64::max);
        let values: Vec<Vec<Option<f64>>> = t
            .heat
            .iter()
            .map(|s| {
                s.values
                    .iter()
                    .map(|&v| (v > 0.0).then(|| (1.0 + v).ln() / (1.0 + max).ln()))
                    .collect()
            })
            .collect();
        chart(
            h,
            charts::heat_map(
                width,
                &charts::Heat {
                    title: "Accesses per site and interval",
                    x_label: "time since the profile began (s)",
                    rows: &rows,
                    intervals: &t.intervals,
                    values: &values,
                    color: &charts::sequential,
                },
            )?,
        );
        write!(
            h,
            "<div class=\"scale\">0 <span class=\"bar\" style=\"background:linear-gradient(90deg,#fde725,#5ec962,#21918c,#3b528b,#440154)\"></span> {:.0} accesses in an interval (logarithmic; grey: none)</div>",
            max
        )?;
    }
    match &t.resident_by_tier {
        Some(resident) => {
            let mut series: Vec<(String, Vec<f64>, RGBColor)> = resident
                .iter()
                .enumerate()
                .map(|(tier, v)| {
                    (
                        format!("tier {tier}"),
                        v.iter().map(|&b| b as f64).collect(),
                        tier_color(tier),
                    )
                })
                .chain(std::iter::once((
                    "not located".to_string(),
                    t.unlocated_bytes.iter().map(|&b| b as f64).collect(),
                    RGBColor(190, 190, 190),
                )))
                .collect();
            let unit = format!("bytes ({})", in_byte_unit(&mut series));
            chart(
                h,
                charts::stacked(
                    (width, 340),
                    &charts::Stack {
                        title: "Where the bytes were: per tier, at each interval's end",
                        y_label: &unit,
                        intervals: &t.intervals,
                        series: &series,
                        y_format: &number_axis,
                    },
                )?,
            );
            legend(h, &area_legend(&series));
            let fast_rows: Vec<String> = t
                .fast_share
                .iter()
                .map(|s| format!("{} {}", s.id, s.label))
                .collect();
            let values: Vec<Vec<Option<f64>>> =
                t.fast_share.iter().map(|s| s.values.clone()).collect();
            if !fast_rows.is_empty() {
                chart(
                    h,
                    charts::heat_map(
                        width,
                        &charts::Heat {
                            title: "Which tier the hottest sites lived in",
                            x_label: "time since the profile began (s)",
                            rows: &fast_rows,
                            intervals: &t.intervals,
                            values: &values,
                            color: &charts::fast_to_slow,
                        },
                    )?,
                );
                h.push_str(
                    "<div class=\"scale\">all in the slower tiers <span class=\"bar\" style=\"background:linear-gradient(90deg,#e6550d,#963c96,#1f77b4)\"></span> all in tier 0 (grey: nothing live, or not located)</div>",
                );
            }
        }
        None => h.push_str(
            "<p class=\"absent\">Where the bytes were over time is not known: the profile does \
             not record its sites' bytes per tier (<code>series.tier_bytes</code>). Profiles \
             taken by this objtier do, under its tiering or the kernel's \
             (<code>objtier profile --observe-only</code>).</p>",
        ),
    }
    let mut series: Vec<(String, Vec<f64>, RGBColor)> = t
        .live_by_site
        .iter()
        .enumerate()
        .map(|(i, s)| {
            (
                charts::truncate(&format!("{} {}", s.id, s.label), 70),
                s.values.iter().map(|&b| b as f64).collect(),
                charts::SITE_PALETTE[i % charts::SITE_PALETTE.len()],
            )
        })
        .collect();
    if t.live_other.iter().any(|&b| b > 0) {
        series.push((
            "all other sites".into(),
            t.live_other.iter().map(|&b| b as f64).collect(),
            RGBColor(200, 200, 200),
        ));
    }
    let unit = format!("live bytes ({})", in_byte_unit(&mut series));
    chart(
        h,
        charts::stacked(
            (width, 380),
            &charts::Stack {
                title: "Allocation timeline: live bytes per site (each interval's peak)",
                y_label: &unit,
                intervals: &t.intervals,
                series: &series,
                y_format: &number_axis,
            },
        )?,
    );
    legend(h, &area_legend(&series));
    let allocations = [(
        "objects allocated".to_string(),
        t.allocations
            .iter()
            .map(|&a| a as f64)
            .collect::<Vec<f64>>(),
        PALETTE[4],
    )];
    chart(
        h,
        charts::stacked(
            (width, 260),
            &charts::Stack {
                title: "Objects allocated per interval, all sites",
                y_label: "objects",
                intervals: &t.intervals,
                series: &allocations,
                y_format: &|y| format!("{y:.0}"),
            },
        )?,
    );
    h.push_str("<h3>Migrations</h3>");
    match &t.migrations {
        Some(m) => {
            let most = m
                .promoted_bytes
                .iter()
                .chain(&m.demoted_bytes)
                .copied()
                .max()
                .unwrap_or(0);
            let (size, name) = byte_unit(most as f64);
            let up: Vec<f64> = m.promoted_bytes.iter().map(|&b| b as f64 / size).collect();
            let down: Vec<f64> = m.demoted_bytes.iter().map(|&b| b as f64 / size).collect();
            let unit = format!("bytes moved ({name})");
            chart(
                h,
                charts::up_down(
                    (width, 320),
                    &charts::UpDown {
                        title: "Promoted (up) and demoted (down) bytes per interval, derived",
                        y_label: &unit,
                        intervals: &t.intervals,
                        up: ("promoted into tier 0", &up, charts::FAST),
                        down: ("demoted out of tier 0", &down, charts::SLOW),
                        y_format: &number_axis,
                    },
                )?,
            );
            legend(
                h,
                &[
                    ("promoted into tier 0".into(), charts::FAST, Swatch::Area),
                    ("demoted out of tier 0".into(), charts::SLOW, Swatch::Area),
                ],
            );
            write!(
                h,
                "<p>{} promoted into tier 0 and {} demoted out of it, over the run. \
                 <b>Derived and approximate</b>: from each site's bytes per tier at consecutive \
                 interval ends (tier 0 gaining what the slower tiers lost); moves within an \
                 interval, and objects born and freed between two looks, are not seen.</p>",
                human_bytes(m.total_promoted_bytes),
                human_bytes(m.total_demoted_bytes)
            )?;
        }
        None => h.push_str(
            "<p class=\"absent\">Not known: migrations are derived from the sites' bytes per \
             tier over time, which this profile does not record.</p>",
        ),
    }
    h.push_str(
        "<p class=\"note\">Pages moved more than once (ping-pong) are not in the profile yet: \
         it records where each site's pages were at every interval's end, not each page's \
         moves, so this report gives no number for them.</p>",
    );
    Ok(())
}

/// Tier 0 is blue and tier 1 orange everywhere; tiers beyond get colours of their own.
fn tier_color(tier: usize) -> RGBColor {
    match tier {
        0 => charts::FAST,
        1 => charts::SLOW,
        t => PALETTE[(t + 2) % PALETTE.len()],
    }
}

fn area_legend(series: &[(String, Vec<f64>, RGBColor)]) -> Vec<(String, RGBColor, Swatch)> {
    series
        .iter()
        .map(|(name, _, color)| (name.clone(), *color, Swatch::Area))
        .collect()
}

fn pages(h: &mut String, r: &Report, width: u32) -> Result<(), Box<dyn std::error::Error>> {
    match &r.pages {
        PagesFigure::Absent { why, .. } => {
            write!(h, "<p class=\"absent\">{}.</p>", esc(&capitalized(why)))?;
        }
        PagesFigure::Present(p) => {
            source_note(h, r)?;
            let total = p.pages.max(1) as f64;
            let categories = ["1".to_string(), "2".to_string(), "3+".to_string()];
            let values = [
                100.0 * p.touched_once as f64 / total,
                100.0 * p.touched_twice as f64 / total,
                100.0 * p.touched_more as f64 / total,
            ];
            chart(
                h,
                charts::bars(
                    ((width / 2).max(560), 320),
                    &charts::Bars {
                        title: "Touches per page (the seed's Fig. 4)",
                        x_label: "touches",
                        y_label: "pages (%)",
                        categories: &categories,
                        values: &values,
                        color: charts::FAST,
                        y_format: &pct_axis,
                    },
                )?,
            );
            write!(h, "<p>{} pages touched.</p>", p.pages)?;
            if let Some(q) = &p.reuse_s {
                let site = p
                    .reuse_site
                    .and_then(|i| r.sites.iter().find(|s| s.index == i))
                    .map_or(String::new(), |s| format!("{} {}", s.id, s.label));
                write!(
                    h,
                    "<p>Time between the two touches of the {} pages touched twice of {} \
                     (the seed's Fig. 5):</p><table><tr><th>min</th><th>25th</th><th>median</th>\
                     <th>mean</th><th>75th</th><th>max</th></tr><tr>{}</tr></table>",
                    q.count,
                    esc(&site),
                    [q.min, q.p25, q.median, q.mean, q.p75, q.max]
                        .iter()
                        .map(|&v| format!("<td class=\"n\">{}</td>", human_seconds(v)))
                        .collect::<String>()
                )?;
            }
        }
    }
    Ok(())
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map_or(String::new(), |c| c.to_uppercase().chain(chars).collect())
}

fn latency(h: &mut String, r: &Report) -> Result<(), Box<dyn std::error::Error>> {
    let l = &r.latency;
    let Some(unit) = &l.weight_unit else {
        write!(
            h,
            "<p class=\"absent\">Source {} records no latency: only perf profiles have it (the \
             load latency PEBS reports with each sample, <code>site.weight</code>). Profile \
             with <code>--source perf</code> on a machine with PEBS for this section.</p>",
            esc(r.summary.source)
        )?;
        return Ok(());
    };
    source_note(h, r)?;
    write!(
        h,
        "<p>{:.0} {} over the samples{}.</p>",
        l.total_weight,
        esc(unit),
        l.mean_weight
            .map_or(String::new(), |m| format!(", {m:.0} per sample on average"))
    )?;
    match &l.by_tier {
        Some(tiers) => {
            h.push_str(
                "<table><tr><th>tier</th><th class=\"n\">accesses</th><th class=\"n\">latency</th>\
                 <th class=\"n\">share of the latency</th><th class=\"n\">mean per access</th></tr>",
            );
            for t in tiers {
                write!(
                    h,
                    "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.0}</td>\
                     <td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                    t.tier,
                    count(t.accesses),
                    t.weight,
                    percent(t.share),
                    t.mean_weight.map_or("-".into(), |m| format!("{m:.0}"))
                )?;
            }
            h.push_str("</table>");
        }
        None => h.push_str(
            "<p class=\"absent\">Latency by tier is not known: the profile does not say where \
             its pages were.</p>",
        ),
    }
    h.push_str(
        "<p class=\"note\">The profile does not record each sample's data source (the memory \
         level perf reports): latency is split among the tiers as the sites' accesses are, by \
         where their pages were.</p>",
    );
    if !l.sites.is_empty() {
        h.push_str(
            "<table><tr><th>site</th><th class=\"n\">latency</th><th class=\"n\">share</th>\
             <th class=\"n\">mean per access</th></tr>",
        );
        for s in &l.sites {
            write!(
                h,
                "<tr><td><b>{}</b> {}</td><td class=\"n\">{:.0}</td><td class=\"n\">{}</td>\
                 <td class=\"n\">{}</td></tr>",
                esc(&s.id),
                esc(&s.label),
                s.weight,
                percent(s.share),
                s.mean_weight.map_or("-".into(), |m| format!("{m:.0}"))
            )?;
        }
        h.push_str("</table>");
    }
    Ok(())
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
}
