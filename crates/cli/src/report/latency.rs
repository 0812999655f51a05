//! Latency and data source where the source records them (section 6; the seed's Fig. 3 and
//! Tables 1 to 3): perf's sample weights (PEBS load latency, `site.weight`) summed, per
//! sample, per tier and per site, and the samples by the memory level that served them
//! (`site.memory_levels`, from perf's data source) with their latency and TLB misses, for all
//! tiers and per tier. Per tier is what the daemon recorded where it knew each sampled page's
//! tier (`site.memory_levels_by_tier`); in profiles without it, a site's weight is split among
//! the tiers as its accesses are (`figures::SiteFigure::tier_accesses`), and the report says so.

use super::figures::SiteFigure;
use objtier_profile::levels::{
    level_rank, merge as merge_levels, merge_by_tier, LevelAccesses, MEMORY_LEVELS,
};
use objtier_profile::Profile;
use serde::Serialize;
use std::collections::BTreeMap;

/// Latency where the source weighs its samples (section 6; the seed's Table 2).
#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    /// What `weight` sums (e.g. latency cycles); `None`: the source records none.
    pub weight_unit: Option<String>,
    pub total_weight: f64,
    /// Mean weight of a sample (an access), over the sites with a weight.
    pub mean_weight: Option<f64>,
    /// Per tier: the weight of the accesses it served (split as the accesses are), its share,
    /// and the mean per access; `None` where no page was located.
    pub by_tier: Option<Vec<TierLatency>>,
    /// How `by_tier` is known: "recorded" (each sample by its page's tier) or "split" (each
    /// site's weight split among the tiers as its accesses are).
    pub by_tier_from: Option<&'static str>,
    /// The sites that cost the most, with their mean latency per access.
    pub sites: Vec<SiteLatency>,
    /// Samples by the memory level that served them, all tiers together; `None`: the source
    /// records no data source.
    pub levels: Option<Vec<LevelRow>>,
    /// The same per tier (index: tier), for the samples whose page's tier was known.
    pub levels_by_tier: Option<Vec<Vec<LevelRow>>>,
    /// What the source records of latency and data source, in a sentence.
    pub note: String,
}

/// The samples one memory level served.
#[derive(Clone, Debug, Serialize)]
pub struct LevelRow {
    /// Its name in the profile (`l1`, `ram`, `cxl`...).
    pub level: String,
    /// What it is, for people.
    pub meaning: String,
    pub accesses: f64,
    /// Its share of the samples (of the tier's, per tier).
    pub share: f64,
    pub weight: f64,
    pub mean_weight: Option<f64>,
    /// The share of its samples whose address translation missed the TLB.
    pub tlb_miss_share: f64,
    /// The share of its samples whose line was modified in another core's cache (HITM).
    pub hitm_share: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TierLatency {
    pub tier: usize,
    pub weight: f64,
    pub share: f64,
    pub accesses: f64,
    pub mean_weight: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SiteLatency {
    pub id: String,
    pub label: String,
    pub weight: f64,
    pub share: f64,
    pub mean_weight: Option<f64>,
}

/// Sites listed by latency.
const LATENCY_SITES: usize = 10;

/// The rows of some levels' counts, nearest the core first.
fn level_rows(levels: &BTreeMap<String, LevelAccesses>) -> Vec<LevelRow> {
    let total: f64 = levels.values().map(|c| c.accesses).sum();
    let mut rows: Vec<LevelRow> = levels
        .iter()
        .map(|(name, c)| LevelRow {
            level: name.clone(),
            meaning: MEMORY_LEVELS
                .iter()
                .find(|(n, _)| n == name)
                .map_or("a level this objtier does not know", |(_, m)| m)
                .to_string(),
            accesses: c.accesses,
            share: if total > 0.0 { c.accesses / total } else { 0.0 },
            weight: c.weight,
            mean_weight: (c.accesses > 0.0 && c.weight > 0.0).then(|| c.weight / c.accesses),
            tlb_miss_share: if c.accesses > 0.0 {
                c.tlb_misses / c.accesses
            } else {
                0.0
            },
            hitm_share: if c.accesses > 0.0 {
                c.hitm / c.accesses
            } else {
                0.0
            },
        })
        .collect();
    rows.sort_by_key(|r| level_rank(&r.level));
    rows
}

/// The sentence on what the source records, for a profile of `source`.
fn note(profile: &Profile, levels: bool, by_tier: bool) -> String {
    let source = profile.source.name();
    match (profile.measurement.weight_unit.is_some(), levels) {
        (_, true) if by_tier => format!(
            "Source {source} records each sample's data source (the memory level that served              it) and the tier of its page as the daemon last located it."
        ),
        (_, true) => format!(
            "Source {source} records each sample's data source (the memory level that served              it); the tier of its page was not known (no tiers, or pages not located)."
        ),
        (true, false) => format!(
            "Source {source} records latency but no data source in this profile (an objtier              before data sources, or a PMU that gives none): latency by tier is split as the              accesses are."
        ),
        (false, false) => format!(
            "Source {source} records neither latency nor data source: only perf on a PMU that              reports them (Intel PEBS; AMD IBS and Arm SPE as the kernel decodes them) does.              Profile with --source perf on such a machine for this section."
        ),
    }
}

pub fn latency(profile: &Profile, sites: &[SiteFigure]) -> Latency {
    let weighed: Vec<&SiteFigure> = sites.iter().filter(|s| s.weight.is_some()).collect();
    let total_weight: f64 = weighed.iter().filter_map(|s| s.weight).sum();
    let weighed_accesses: f64 = weighed.iter().map(|s| s.accesses).sum();
    let mean = |weight: f64, accesses: f64| (accesses > 0.0).then(|| weight / accesses);
    let mut by_tier: Option<Vec<TierLatency>> = None;
    for s in &weighed {
        let (Some(per_tier), Some(weight)) = (&s.tier_accesses, s.weight) else {
            continue;
        };
        let rows = by_tier.get_or_insert_with(Vec::new);
        if rows.len() < per_tier.len() {
            rows.resize_with(per_tier.len(), || TierLatency {
                tier: 0,
                weight: 0.0,
                share: 0.0,
                accesses: 0.0,
                mean_weight: None,
            });
        }
        // Each tier's part of the site's weight is its part of the site's accesses.
        for (t, &accesses) in per_tier.iter().enumerate() {
            if s.accesses > 0.0 {
                rows[t].weight += weight * accesses / s.accesses;
            }
            rows[t].accesses += accesses;
        }
    }
    if let Some(rows) = &mut by_tier {
        let located: f64 = rows.iter().map(|r| r.weight).sum();
        for (t, row) in rows.iter_mut().enumerate() {
            row.tier = t;
            row.share = if located > 0.0 {
                row.weight / located
            } else {
                0.0
            };
            row.mean_weight = mean(row.weight, row.accesses);
        }
    }
    let mut by_tier_from = by_tier.is_some().then_some("split");
    let all_levels = merge_levels(profile.sites.iter().map(|s| &s.memory_levels), 1.0);
    let tier_levels = merge_by_tier(profile.sites.iter().map(|s| &s.memory_levels_by_tier), 1.0);
    if !tier_levels.is_empty() {
        // Recorded: each tier's samples and their weight, as the daemon saw them.
        let rows: Vec<TierLatency> = tier_levels
            .iter()
            .enumerate()
            .map(|(tier, levels)| {
                let accesses = levels.values().map(|c| c.accesses).sum();
                let weight = levels.values().map(|c| c.weight).sum();
                TierLatency {
                    tier,
                    weight,
                    share: 0.0,
                    accesses,
                    mean_weight: mean(weight, accesses),
                }
            })
            .collect();
        let located: f64 = rows.iter().map(|r| r.weight).sum();
        by_tier = Some(
            rows.into_iter()
                .map(|mut r| {
                    r.share = if located > 0.0 {
                        r.weight / located
                    } else {
                        0.0
                    };
                    r
                })
                .collect(),
        );
        by_tier_from = Some("recorded");
    }
    let mut costly = weighed.clone();
    costly.sort_by(|a, b| b.weight.unwrap_or(0.0).total_cmp(&a.weight.unwrap_or(0.0)));
    Latency {
        weight_unit: profile.measurement.weight_unit.clone(),
        total_weight,
        mean_weight: mean(total_weight, weighed_accesses),
        by_tier,
        by_tier_from,
        note: note(profile, !all_levels.is_empty(), !tier_levels.is_empty()),
        levels: (!all_levels.is_empty()).then(|| level_rows(&all_levels)),
        levels_by_tier: (!tier_levels.is_empty())
            .then(|| tier_levels.iter().map(level_rows).collect()),
        sites: costly
            .into_iter()
            .take(LATENCY_SITES)
            .map(|s| {
                let weight = s.weight.unwrap_or(0.0);
                SiteLatency {
                    id: s.id.clone(),
                    label: s.label.clone(),
                    weight,
                    share: if total_weight > 0.0 {
                        weight / total_weight
                    } else {
                        0.0
                    },
                    mean_weight: mean(weight, s.accesses),
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::figures::sites;
    use crate::report::test_profiles::{profile, site};

    #[test]
    fn latency_splits_the_weight_as_the_accesses() {
        let mut p = profile(2, 1);
        p.measurement.weight_unit = Some("latency cycles".into());
        let mut a = site("/bin/app+0x10", 4096, &[10.0]);
        a.weight = Some(1000.0);
        a.series.tier_bytes = Some(vec![vec![1024, 3072]]);
        let mut b = site("/bin/app+0x20", 4096, &[10.0]);
        b.weight = Some(3000.0);
        b.series.tier_bytes = Some(vec![vec![0, 4096]]);
        p.sites = vec![a, b];
        let s = sites(&p);
        let l = latency(&p, &s);
        assert_eq!(l.total_weight, 4000.0);
        assert_eq!(l.mean_weight, Some(200.0));
        let t = l.by_tier.unwrap();
        assert_eq!(t[0].weight, 250.0);
        assert_eq!(t[0].accesses, 2.5);
        assert_eq!(t[0].mean_weight, Some(100.0));
        assert_eq!(t[1].weight, 3750.0);
        assert!((t[1].share - 3750.0 / 4000.0).abs() < 1e-12);
        assert_eq!(l.sites[0].weight, 3000.0, "the costliest first");
        assert_eq!(l.sites[0].mean_weight, Some(300.0));
    }

    #[test]
    fn recorded_data_sources_give_latency_by_tier_and_level() {
        let p = crate::report::test_profiles::recorded();
        let l = latency(&p, &sites(&p));
        assert_eq!(l.by_tier_from, Some("recorded"));
        let t = l.by_tier.unwrap();
        assert_eq!((t[0].accesses, t[0].weight), (6.0, 1200.0));
        assert_eq!(t[0].mean_weight, Some(200.0));
        assert_eq!(t[1].mean_weight, Some(600.0));
        assert_eq!(t[1].share, 0.5);
        let levels = l.levels.unwrap();
        let names: Vec<&str> = levels.iter().map(|r| r.level.as_str()).collect();
        assert_eq!(names, ["l1", "ram", "cxl"], "nearest the core first");
        assert_eq!(levels[1].share, 0.6);
        assert_eq!(levels[2].tlb_miss_share, 0.5);
        assert_eq!(levels[2].meaning, "CXL-attached memory");
        let per_tier = l.levels_by_tier.unwrap();
        assert_eq!(per_tier[1][0].level, "cxl");
        assert_eq!(per_tier[1][0].share, 1.0);
        assert!(l.note.contains("tier of its page"), "{}", l.note);
        // A profile with neither says so plainly.
        let damon = crate::report::test_profiles::profile(2, 1);
        let none = latency(&damon, &sites(&damon));
        assert!(none.levels.is_none() && none.by_tier.is_none());
        assert!(
            none.note
                .contains("records neither latency nor data source"),
            "{}",
            none.note
        );
    }
}
