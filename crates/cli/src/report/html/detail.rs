//! Sections 5 and 6: pages (touches and reuse, where the source has page detail), and latency
//! and data source by level and tier (where the source records them).

use super::{capitalized, chart, count, esc, pct_axis, source_note};
use crate::report::charts;
use crate::report::pages::PagesFigure;
use crate::report::{human_seconds, percent, Report};
use std::fmt::Write;
pub(super) fn pages(
    h: &mut String,
    r: &Report,
    width: u32,
) -> Result<(), Box<dyn std::error::Error>> {
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

pub(super) fn latency(h: &mut String, r: &Report) -> Result<(), Box<dyn std::error::Error>> {
    let l = &r.latency;
    if l.weight_unit.is_none() && l.levels.is_none() {
        write!(h, "<p class=\"absent\">{}</p>", esc(&l.note))?;
        return Ok(());
    }
    source_note(h, r)?;
    write!(h, "<p class=\"note\">{}</p>", esc(&l.note))?;
    let unit = l.weight_unit.as_deref().unwrap_or("weight");
    if l.weight_unit.is_some() {
        write!(
            h,
            "<p>{:.0} {} over the samples{}.</p>",
            l.total_weight,
            esc(unit),
            l.mean_weight
                .map_or(String::new(), |m| format!(", {m:.0} per sample on average"))
        )?;
    }
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
            h.push_str(if l.by_tier_from == Some("recorded") {
                "<p class=\"note\">By tier as recorded: each sample counted in the tier its \
                 page was in when the daemon last located it (samples of pages not yet located \
                 are left out).</p>"
            } else {
                "<p class=\"note\">The profile does not record each sample's tier: latency is \
                 split among the tiers as the sites' accesses are, by where their pages were.</p>"
            });
        }
        None if l.weight_unit.is_some() => h.push_str(
            "<p class=\"absent\">Latency by tier is not known: the profile does not say where \
             its pages were.</p>",
        ),
        None => {}
    }
    if let Some(levels) = &l.levels {
        h.push_str("<h3>Data source: the memory level that served the samples</h3>");
        level_table(h, levels, unit)?;
    }
    for (tier, levels) in l.levels_by_tier.iter().flatten().enumerate() {
        if !levels.is_empty() {
            write!(
                h,
                "<h3>Data source of the samples of pages in tier {tier}</h3>"
            )?;
            level_table(h, levels, unit)?;
        }
    }
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

/// Samples by memory level, nearest the core first.
fn level_table(
    h: &mut String,
    levels: &[crate::report::latency::LevelRow],
    unit: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    write!(
        h,
        "<table><tr><th>level</th><th class=\"n\">samples</th><th class=\"n\">share</th>\
         <th class=\"n\">mean {}</th><th class=\"n\">TLB misses</th>\
         <th class=\"n\" title=\"the line was modified in another core's cache\">HITM</th></tr>",
        esc(unit)
    )?;
    for row in levels {
        write!(
            h,
            "<tr><td title=\"{}\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&row.meaning),
            esc(&row.level),
            count(row.accesses),
            percent(row.share),
            row.mean_weight.map_or("-".into(), |m| format!("{m:.0}")),
            percent(row.tlb_miss_share),
            percent(row.hitm_share)
        )?;
    }
    h.push_str("</table>");
    Ok(())
}
