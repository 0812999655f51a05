//! Section 4: the run over time: accesses per site, bytes per tier and per site, objects
//! allocated, and the migrations (recorded with their ping-pong, or derived).

use super::{
    area_legend, byte_unit, chart, in_byte_unit, legend, number_axis, source_note, tier_color,
    Swatch,
};
use crate::report::charts::{self, PALETTE};
use crate::report::timeline::MovesKnown;
use crate::report::{human_bytes, Report};
use plotters::style::RGBColor;
use std::fmt::Write;
pub(super) fn over_time(
    h: &mut String,
    r: &Report,
    width: u32,
) -> Result<(), Box<dyn std::error::Error>> {
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
        PALETTE[7],
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
            let recorded = m.known == MovesKnown::Recorded;
            let (title, up_name, down_name) = if recorded {
                (
                    "Promoted (up) and demoted (down) bytes per interval, recorded page by page",
                    "promoted into a faster tier",
                    "demoted into a slower tier",
                )
            } else {
                (
                    "Promoted (up) and demoted (down) bytes per interval, derived",
                    "promoted into tier 0",
                    "demoted out of tier 0",
                )
            };
            chart(
                h,
                charts::up_down(
                    (width, 320),
                    &charts::UpDown {
                        title,
                        y_label: &unit,
                        intervals: &t.intervals,
                        up: (up_name, &up, charts::FAST),
                        down: (down_name, &down, charts::SLOW),
                        y_format: &number_axis,
                    },
                )?,
            );
            legend(
                h,
                &[
                    (up_name.into(), charts::FAST, Swatch::Area),
                    (down_name.into(), charts::SLOW, Swatch::Area),
                ],
            );
            if recorded {
                ping_pong(h, t, m, width)?;
            } else {
                write!(
                    h,
                    "<p>{} promoted into tier 0 and {} demoted out of it, over the run. \
                 <b>Derived and approximate</b>: from each site's bytes per tier at consecutive \
                 interval ends (tier 0 gaining what the slower tiers lost); moves within an \
                 interval, and objects born and freed between two looks, are not seen.</p>",
                    human_bytes(m.total_promoted_bytes),
                    human_bytes(m.total_demoted_bytes)
                )?;
                h.push_str(
                    "<p class=\"note\">Pages moved more than once (ping-pong) are not in this \
                     profile: it records where each site's pages were at every interval's end, \
                     not each page's moves (an objtier before page histories, or a profile \
                     without tiers), so this report gives no number for them.</p>",
                );
            }
        }
        None => h.push_str(
            "<p class=\"absent\">Not known: the profile records neither its pages' moves nor \
             its sites' bytes per tier over time, from which they could be derived.</p>",
        ),
    }
    Ok(())
}

/// Recorded moves: pages moved more than once, per interval and per site.
fn ping_pong(
    h: &mut String,
    t: &crate::report::timeline::OverTime,
    m: &crate::report::timeline::Migrations,
    width: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    let moved = m.total_moved_pages.unwrap_or(0);
    let twice = m.total_ping_pong_pages.unwrap_or(0);
    write!(
        h,
        "<p>{} promoted into a faster tier and {} demoted into a slower one, over the run \
         ({moved} page moves). <b>Recorded</b>: the daemon followed each page's tier from one \
         look to the next (at most every interval; a large record every few), whoever moved it \
         (objtier, or the kernel's NUMA balancing and reclaim); a page moved and moved back \
         between two looks is not seen.</p>",
        human_bytes(m.total_promoted_bytes),
        human_bytes(m.total_demoted_bytes),
    )?;
    let share = if moved > 0 {
        format!(
            " ({} of the moves)",
            crate::report::percent(twice as f64 / moved as f64)
        )
    } else {
        String::new()
    };
    write!(
        h,
        "<p><b>Ping-pong</b>: {twice} moves were of pages that had already changed tier \
         earlier in the run{share}.</p>"
    )?;
    if let Some(not) = m.pages_not_followed.filter(|&n| n > 0) {
        write!(
            h,
            "<p class=\"note\">Up to {not} pages of a process, at one look, found no room in \
             the daemon's page history: their moves are not counted.</p>"
        )?;
    }
    if let Some(per_interval) = m.ping_pong_pages.as_ref().filter(|_| twice > 0) {
        let series = [(
            "pages moved more than once".to_string(),
            per_interval.iter().map(|&p| p as f64).collect::<Vec<f64>>(),
            charts::SLOW,
        )];
        chart(
            h,
            charts::stacked(
                (width, 240),
                &charts::Stack {
                    title: "Ping-pong: moves of pages that had moved before, per interval",
                    y_label: "pages",
                    intervals: &t.intervals,
                    series: &series,
                    y_format: &|y| format!("{y:.0}"),
                },
            )?,
        );
    }
    if !m.sites.is_empty() {
        h.push_str(
            "<table><tr><th>site</th><th class=\"n\">promoted</th><th class=\"n\">demoted</th>\
             <th class=\"n\">ping-pong pages</th></tr>",
        );
        for s in m.sites.iter().take(10) {
            write!(
                h,
                "<tr><td><b>{}</b> {}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                 <td class=\"n\">{}</td></tr>",
                super::esc(&s.id),
                super::esc(&s.label),
                human_bytes(s.promoted_bytes),
                human_bytes(s.demoted_bytes),
                s.ping_pong_pages.unwrap_or(0)
            )?;
        }
        h.push_str("</table>");
    }
    Ok(())
}
