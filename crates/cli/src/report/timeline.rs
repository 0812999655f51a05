//! The run over time (section 4): accesses per site and interval (a heat map), where the
//! bytes were per tier, live bytes per site (the seed's allocation timeline, Fig. 7), and the
//! migrations the tiering made (Figs. 9 and 10), derived from each site's bytes per tier.
//!
//! Migrations are recorded where the daemon followed each page's tier (`measurement.page_moves`
//! set, objtier since issue 44): each site's pages found in a faster tier than at their last
//! look (promoted), in a slower one (demoted), and of those, the pages that had changed tier
//! before (moved more than once: ping-pong), per interval. Older profiles have only each site's
//! bytes per tier at every interval's end, from which the moves are derived: between two
//! consecutive looks, tier 0 gaining bytes while the slower tiers lose them is a promotion of
//! the smaller of the two amounts, and the reverse a demotion. That is a lower bound and an
//! approximation (pages moved and moved back within an interval, and objects born in one tier
//! while others of the site die in another, read as no move or as a move), and it says nothing
//! of ping-pong: the report says so rather than guess.

use super::figures::{tier_count, SiteFigure};
use objtier_profile::{Profile, Site};
use serde::Serialize;

/// Sites in the heat maps.
pub const HEAT_SITES: usize = 20;
/// Sites drawn apart in the allocation timeline (the rest are summed).
pub const TIMELINE_SITES: usize = 8;

#[derive(Clone, Debug, Serialize)]
pub struct OverTime {
    /// `[start_s, end_s]` of each interval.
    pub intervals: Vec<[f64; 2]>,
    /// Accesses per interval of the most accessed sites.
    pub heat: Vec<SiteRow<f64>>,
    /// Where the top sites' bytes were: the share in tier 0 at each interval's end (`None`
    /// where the site had nothing live, or its pages were not located). Empty without
    /// locations.
    pub fast_share: Vec<SiteRow<Option<f64>>>,
    /// Bytes per tier at each interval's end, summed over the sites (`[tier][interval]`);
    /// `None` without locations.
    pub resident_by_tier: Option<Vec<Vec<u64>>>,
    /// Live bytes of the sites whose pages were not located, per interval.
    pub unlocated_bytes: Vec<u64>,
    /// Live bytes (each interval's peak) of the sites with the most, and of all the others.
    pub live_by_site: Vec<SiteRow<u64>>,
    pub live_other: Vec<u64>,
    /// Objects allocated per interval, all sites.
    pub allocations: Vec<u64>,
    pub migrations: Option<Migrations>,
}

/// One site's values per interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteRow<T> {
    pub id: String,
    pub label: String,
    pub values: Vec<T>,
}

/// How a profile's migrations are known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MovesKnown {
    /// Page by page, as the daemon saw them at its looks (ping-pong included).
    Recorded,
    /// From each site's bytes per tier at consecutive interval ends (no ping-pong).
    Derived,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Migrations {
    pub known: MovesKnown,
    /// Bytes promoted and demoted per interval: recorded, into a faster tier and into a
    /// slower one; derived, into tier 0 from slower tiers and out of it.
    pub promoted_bytes: Vec<u64>,
    pub demoted_bytes: Vec<u64>,
    pub total_promoted_bytes: u64,
    pub total_demoted_bytes: u64,
    /// Pages moved more than once (ping-pong) per interval: of the pages promoted or demoted
    /// in it, those that had changed tier before. `None` where derived.
    pub ping_pong_pages: Option<Vec<u64>>,
    pub total_ping_pong_pages: Option<u64>,
    /// Pages moved over the run (promoted and demoted), where recorded.
    pub total_moved_pages: Option<u64>,
    /// The most pages of one process, at one look, that the daemon had no room to follow
    /// (their moves are not counted), where recorded.
    pub pages_not_followed: Option<u64>,
    /// Every site that moved, the most moved first.
    pub sites: Vec<SiteMoves>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteMoves {
    pub id: String,
    pub label: String,
    pub promoted_bytes: u64,
    pub demoted_bytes: u64,
    /// Its pages moved more than once, where recorded.
    pub ping_pong_pages: Option<u64>,
}

pub fn over_time(profile: &Profile, sites: &[SiteFigure]) -> OverTime {
    let n = profile.intervals.len();
    let site_of = |f: &SiteFigure| &profile.sites[f.index];
    let per_interval = |f: &SiteFigure, column: &dyn Fn(&Site, usize) -> f64| -> Vec<f64> {
        let site = site_of(f);
        let mut values = vec![0.0; n];
        for (row, &interval) in site.series.interval.iter().enumerate() {
            if let Some(v) = values.get_mut(interval) {
                *v = column(site, row);
            }
        }
        values
    };
    let heat_sites: Vec<&SiteFigure> = sites
        .iter()
        .filter(|s| s.accesses > 0.0)
        .take(HEAT_SITES)
        .collect();
    let row = |f: &SiteFigure| (f.id.clone(), f.label.clone());
    let heat = heat_sites
        .iter()
        .map(|f| {
            let (id, label) = row(f);
            SiteRow {
                id,
                label,
                values: per_interval(f, &|s, r| s.series.accesses[r]),
            }
        })
        .collect();
    let located = super::figures::located(profile);
    let fast_share = if located {
        heat_sites
            .iter()
            .map(|f| {
                let (id, label) = row(f);
                let site = site_of(f);
                let mut values = vec![None; n];
                for (r, &interval) in site.series.interval.iter().enumerate() {
                    let fractions = site
                        .series
                        .tier_bytes
                        .as_ref()
                        .and_then(|rows| rows.get(r))
                        .and_then(|b| super::figures::tier_fractions(b));
                    if let (Some(v), Some(f)) = (values.get_mut(interval), fractions) {
                        *v = Some(f[0]);
                    }
                }
                SiteRow { id, label, values }
            })
            .collect()
    } else {
        Vec::new()
    };
    let tiers = tier_count(profile);
    let mut resident = vec![vec![0u64; n]; tiers];
    let mut unlocated = vec![0u64; n];
    let mut allocations = vec![0u64; n];
    for site in &profile.sites {
        for (r, &interval) in site.series.interval.iter().enumerate() {
            if interval >= n {
                continue;
            }
            allocations[interval] += site.series.allocations[r];
            match site.series.tier_bytes.as_ref().and_then(|rows| rows.get(r)) {
                Some(bytes) if !bytes.is_empty() => {
                    for (t, &b) in bytes.iter().enumerate().take(tiers) {
                        resident[t][interval] += b;
                    }
                }
                _ => unlocated[interval] += site.series.live_bytes[r],
            }
        }
    }
    let mut by_peak: Vec<&SiteFigure> = sites.iter().filter(|s| s.peak_live_bytes > 0).collect();
    by_peak.sort_by_key(|s| std::cmp::Reverse(s.peak_live_bytes));
    let live_of = |f: &SiteFigure| -> Vec<u64> {
        per_interval(f, &|s, r| s.series.live_bytes[r] as f64)
            .into_iter()
            .map(|v| v as u64)
            .collect()
    };
    let live_by_site: Vec<SiteRow<u64>> = by_peak
        .iter()
        .take(TIMELINE_SITES)
        .map(|f| {
            let (id, label) = row(f);
            SiteRow {
                id,
                label,
                values: live_of(f),
            }
        })
        .collect();
    let mut live_other = vec![0u64; n];
    for f in by_peak.iter().skip(TIMELINE_SITES) {
        for (sum, v) in live_other.iter_mut().zip(live_of(f)) {
            *sum += v;
        }
    }
    OverTime {
        intervals: profile
            .intervals
            .iter()
            .map(|i| [i.start_s, i.end_s])
            .collect(),
        heat,
        fast_share,
        resident_by_tier: located.then_some(resident),
        unlocated_bytes: unlocated,
        live_by_site,
        live_other,
        allocations,
        migrations: if profile.measurement.page_moves.is_some() {
            Some(recorded_migrations(profile, sites))
        } else {
            located.then(|| migrations(profile, sites))
        },
    }
}

/// Each site's bytes per tier at every interval's end: `None` where not located, all zeros
/// where the site has no row (nothing live, no access, no allocation).
fn locations(site: &Site, intervals: usize, tiers: usize) -> Vec<Option<Vec<u64>>> {
    let mut at = vec![Some(vec![0u64; tiers]); intervals];
    for (r, &interval) in site.series.interval.iter().enumerate() {
        let Some(slot) = at.get_mut(interval) else {
            continue;
        };
        *slot = site
            .series
            .tier_bytes
            .as_ref()
            .and_then(|rows| rows.get(r))
            .filter(|b| !b.is_empty())
            .map(|b| {
                let mut b = b.clone();
                b.resize(tiers, 0);
                b
            });
    }
    at
}

/// Bytes promoted into tier 0 and demoted out of it between two looks at a site: the smaller
/// of what tier 0 gained and what the slower tiers lost, and the reverse.
pub fn moves_between(before: &[u64], after: &[u64]) -> (u64, u64) {
    let fast = |b: &[u64]| b.first().copied().unwrap_or(0) as i128;
    let slow = |b: &[u64]| b.iter().skip(1).map(|&x| x as i128).sum::<i128>();
    let fast_gain = fast(after) - fast(before);
    let slow_gain = slow(after) - slow(before);
    let promoted = fast_gain.min(-slow_gain).max(0);
    let demoted = (-fast_gain).min(slow_gain).max(0);
    (promoted as u64, demoted as u64)
}

fn migrations(profile: &Profile, sites: &[SiteFigure]) -> Migrations {
    let n = profile.intervals.len();
    let tiers = tier_count(profile);
    let mut promoted = vec![0u64; n];
    let mut demoted = vec![0u64; n];
    let mut by_site = Vec::new();
    for f in sites {
        let at = locations(&profile.sites[f.index], n, tiers);
        let (mut site_promoted, mut site_demoted) = (0u64, 0u64);
        for i in 1..n {
            if let (Some(before), Some(after)) = (&at[i - 1], &at[i]) {
                let (p, d) = moves_between(before, after);
                promoted[i] += p;
                demoted[i] += d;
                site_promoted += p;
                site_demoted += d;
            }
        }
        if site_promoted + site_demoted > 0 {
            by_site.push(SiteMoves {
                id: f.id.clone(),
                label: f.label.clone(),
                promoted_bytes: site_promoted,
                demoted_bytes: site_demoted,
                ping_pong_pages: None,
            });
        }
    }
    by_site.sort_by_key(|s| std::cmp::Reverse(s.promoted_bytes + s.demoted_bytes));
    Migrations {
        known: MovesKnown::Derived,
        total_promoted_bytes: promoted.iter().sum(),
        total_demoted_bytes: demoted.iter().sum(),
        promoted_bytes: promoted,
        demoted_bytes: demoted,
        ping_pong_pages: None,
        total_ping_pong_pages: None,
        total_moved_pages: None,
        pages_not_followed: None,
        sites: by_site,
    }
}

/// The moves the daemon recorded page by page (`series.promoted_pages` and the columns beside).
fn recorded_migrations(profile: &Profile, sites: &[SiteFigure]) -> Migrations {
    const PAGE: u64 = objtier_wire::PAGE_SIZE as u64;
    let n = profile.intervals.len();
    let (mut promoted, mut demoted, mut ping_pong) = (vec![0u64; n], vec![0u64; n], vec![0u64; n]);
    let mut by_site = Vec::new();
    for f in sites {
        let series = &profile.sites[f.index].series;
        let mut total = objtier_profile::profile::PageMoves::default();
        for (row, &interval) in series.interval.iter().enumerate() {
            let moves = series.page_moves(row);
            if interval < n {
                promoted[interval] += moves.promoted * PAGE;
                demoted[interval] += moves.demoted * PAGE;
                ping_pong[interval] += moves.ping_pong;
            }
            total.add(moves);
        }
        if !total.is_zero() {
            by_site.push(SiteMoves {
                id: f.id.clone(),
                label: f.label.clone(),
                promoted_bytes: total.promoted * PAGE,
                demoted_bytes: total.demoted * PAGE,
                ping_pong_pages: Some(total.ping_pong),
            });
        }
    }
    by_site.sort_by_key(|s| std::cmp::Reverse(s.promoted_bytes + s.demoted_bytes));
    let (total_promoted_bytes, total_demoted_bytes) =
        (promoted.iter().sum::<u64>(), demoted.iter().sum::<u64>());
    Migrations {
        known: MovesKnown::Recorded,
        total_promoted_bytes,
        total_demoted_bytes,
        total_moved_pages: Some((total_promoted_bytes + total_demoted_bytes) / PAGE),
        total_ping_pong_pages: Some(ping_pong.iter().sum()),
        ping_pong_pages: Some(ping_pong),
        pages_not_followed: profile
            .measurement
            .page_moves
            .as_ref()
            .map(|f| f.pages_not_followed),
        promoted_bytes: promoted,
        demoted_bytes: demoted,
        sites: by_site,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::figures::sites;
    use crate::report::test_profiles::{profile, site};

    #[test]
    fn moves_are_what_one_side_gained_and_the_other_lost() {
        assert_eq!(moves_between(&[0, 100], &[60, 40]), (60, 0));
        assert_eq!(moves_between(&[60, 40], &[0, 100]), (0, 60));
        // Growth in tier 0 and no loss below: an allocation, not a move.
        assert_eq!(moves_between(&[10, 10], &[50, 10]), (0, 0));
        // 40 in, 20 out below: at least 20 moved up (the other 20 were born there).
        assert_eq!(moves_between(&[0, 100], &[40, 80]), (20, 0));
        // Three tiers: tier 2 to tier 0 is a promotion.
        assert_eq!(moves_between(&[0, 0, 8], &[8, 0, 0]), (8, 0));
        // Everything freed: no move.
        assert_eq!(moves_between(&[5, 5], &[0, 0]), (0, 0));
        assert_eq!(moves_between(&[], &[3]), (0, 0));
    }

    /// A site born in tier 1, promoted in interval 1, demoted half in interval 3 after an
    /// interval that was not located, then freed.
    fn moving_profile() -> Profile {
        let mut p = profile(2, 5);
        let mut s = site("/bin/app+0x10", 100, &[1.0, 2.0, 3.0, 4.0]);
        s.series.tier_bytes = Some(vec![vec![0, 100], vec![100, 0], vec![], vec![50, 50]]);
        let mut other = site("/bin/app+0x20", 10, &[0.5, 0.0]);
        other.series.tier_bytes = Some(vec![vec![10, 0], vec![0, 10]]);
        p.sites = vec![s, other];
        p
    }

    #[test]
    fn migrations_are_derived_per_interval_and_site() {
        let p = moving_profile();
        let s = sites(&p);
        let m = over_time(&p, &s).migrations.unwrap();
        assert_eq!(m.promoted_bytes, [0, 100, 0, 0, 0]);
        // Interval 3 follows one not located: its half demotion is not seen.
        assert_eq!(m.demoted_bytes, [0, 10, 0, 0, 0]);
        assert_eq!(m.total_promoted_bytes, 100);
        assert_eq!(m.total_demoted_bytes, 10);
        assert_eq!(m.sites[0].id, "S1");
        assert_eq!(m.sites[0].promoted_bytes, 100);
        assert_eq!(m.sites[1].demoted_bytes, 10);
    }

    #[test]
    fn recorded_moves_and_ping_pong_are_read_not_derived() {
        use objtier_profile::profile::{PageMoves, PageMovesFollowed};
        let mut p = moving_profile();
        p.measurement.page_moves = Some(PageMovesFollowed {
            history_bytes_max: 1 << 20,
            pages_not_followed: 3,
        });
        // Site 0: 2 pages promoted in interval 1, 1 demoted in 3 that had moved before.
        p.sites[0].series = objtier_profile::profile::Series::default();
        for (i, moves) in [(0, (0, 0, 0)), (1, (2, 0, 0)), (3, (0, 1, 1))] {
            p.sites[0].series.push(i, 100, 1.0, None, None, 0);
            p.sites[0].series.add_to_last_page_moves(PageMoves {
                promoted: moves.0,
                demoted: moves.1,
                ping_pong: moves.2,
            });
        }
        let s = sites(&p);
        let m = over_time(&p, &s).migrations.unwrap();
        assert_eq!(m.known, MovesKnown::Recorded);
        assert_eq!(m.promoted_bytes, [0, 8192, 0, 0, 0]);
        // The other site's bytes per tier changed too, but recorded moves are not derived.
        assert_eq!(m.demoted_bytes, [0, 0, 0, 4096, 0]);
        assert_eq!(m.ping_pong_pages, Some(vec![0, 0, 0, 1, 0]));
        assert_eq!(m.total_ping_pong_pages, Some(1));
        assert_eq!(m.total_moved_pages, Some(3));
        assert_eq!(m.pages_not_followed, Some(3));
        assert_eq!(m.sites.len(), 1);
        assert_eq!(m.sites[0].ping_pong_pages, Some(1));
        // A derived one says it has no ping-pong.
        let d = over_time(&moving_profile(), &sites(&moving_profile()))
            .migrations
            .unwrap();
        assert_eq!((d.known, d.ping_pong_pages), (MovesKnown::Derived, None));
    }

    #[test]
    fn bytes_per_tier_and_per_site_over_time() {
        let p = moving_profile();
        let s = sites(&p);
        let t = over_time(&p, &s);
        assert_eq!(t.intervals.len(), 5);
        let resident = t.resident_by_tier.unwrap();
        assert_eq!(resident[0], [10, 100, 0, 50, 0]);
        assert_eq!(resident[1], [100, 10, 0, 50, 0]);
        assert_eq!(t.unlocated_bytes, [0, 0, 100, 0, 0]);
        assert_eq!(t.allocations, [2, 0, 0, 0, 0]);
        assert_eq!(t.heat.len(), 2);
        assert_eq!(t.heat[0].values, [1.0, 2.0, 3.0, 4.0, 0.0]);
        assert_eq!(t.heat[1].values, [0.5, 0.0, 0.0, 0.0, 0.0]);
        assert_eq!(
            t.fast_share[0].values,
            [Some(0.0), Some(1.0), None, Some(0.5), None]
        );
        assert_eq!(t.live_by_site[0].values, [100, 100, 100, 100, 0]);
        assert_eq!(t.live_other, [0; 5]);
    }

    #[test]
    fn without_locations_nothing_is_derived() {
        let mut p = profile(2, 3);
        for i in 0..(TIMELINE_SITES + 2) {
            p.sites.push(site(
                &format!("/bin/app+{:#x}", i + 1),
                10 + i as u64,
                &[1.0, 1.0],
            ));
        }
        let s = sites(&p);
        let t = over_time(&p, &s);
        assert!(t.migrations.is_none());
        assert!(t.resident_by_tier.is_none());
        assert!(t.fast_share.is_empty());
        assert_eq!(t.unlocated_bytes[0], (0..10).map(|i| 10 + i).sum::<u64>());
        assert_eq!(t.live_by_site.len(), TIMELINE_SITES);
        // The two smallest sites are summed.
        assert_eq!(t.live_other, [21, 21, 0]);
    }
}
