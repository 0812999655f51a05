//! Sections 1 and 2: the run's summary, and how much fast memory the program needs (the
//! curve of every advise algorithm, the table of what each needs, what the run got).

use super::{chart, columns, esc, legend, measured_by, pct_axis, source_note, utc_date, Swatch};
use crate::report::charts::{self, Axes, Line, Marker, PALETTE};
use crate::report::{human_bytes, human_seconds, percent, Report};
use plotters::style::RGBColor;
use std::fmt::Write;
pub(super) fn summary(h: &mut String, r: &Report) -> Result<(), Box<dyn std::error::Error>> {
    let s = &r.summary;
    write!(
        h,
        "<p class=\"source\">{}: {}.</p>",
        measured_by(r),
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

pub(super) fn fast_memory(
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

pub(super) fn line_legend(lines: &[Line], markers: &[Marker]) -> Vec<(String, RGBColor, Swatch)> {
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

pub(super) fn curve_line(r: &Report, algorithm: &str, name: &str, color: RGBColor) -> Line {
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

pub(super) fn observed_marker(r: &Report, color: RGBColor) -> Option<Marker> {
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

pub(super) fn fast_memory_of(
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
    for t in crate::report::curve::TARGETS {
        write!(h, "<th class=\"n\">{:.0} %</th>", 100.0 * t)?;
    }
    h.push_str("</tr>");
    for a in &c.algorithms {
        write!(h, "<tr><td>{}</td>", esc(a.algorithm))?;
        for t in crate::report::curve::TARGETS {
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
