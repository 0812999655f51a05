//! Sections 5 and 6: pages (touches and reuse, where the source has page detail) and latency
//! by tier (where it weighs its samples).

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
