//! Latency where the source weighs its samples (section 6; the seed's Table 2): perf's sample
//! weights (PEBS load latency, `site.weight`) summed, per sample, per tier and per site. A
//! site's weight is split among the tiers as its accesses are (`figures::SiteFigure::
//! tier_accesses`): the profile does not record each sample's data source.

use super::figures::SiteFigure;
use objtier_profile::Profile;
use serde::Serialize;

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
    /// The sites that cost the most, with their mean latency per access.
    pub sites: Vec<SiteLatency>,
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
    let mut costly = weighed.clone();
    costly.sort_by(|a, b| b.weight.unwrap_or(0.0).total_cmp(&a.weight.unwrap_or(0.0)));
    Latency {
        weight_unit: profile.measurement.weight_unit.clone(),
        total_weight,
        mean_weight: mean(total_weight, weighed_accesses),
        by_tier,
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
}
