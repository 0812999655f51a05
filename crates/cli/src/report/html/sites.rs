//! Section 3: the top sites, and each tier's top sites (the seed's Fig. 6).

use super::{chart, count, esc, opt_seconds, pct_axis, source_note, tier_color};
use crate::report::charts;
use crate::report::figures::SiteFigure;
use crate::report::{human_bytes, percent, Report};
use std::fmt::Write;
/// Sites listed in the top table of each profile.
pub const TOP_SITES: usize = 20;
pub(super) fn site_cell(s: &SiteFigure) -> String {
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

pub(super) fn sites(
    h: &mut String,
    r: &Report,
    width: u32,
) -> Result<(), Box<dyn std::error::Error>> {
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
