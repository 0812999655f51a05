//! Per-phase guidance (Effler et al. §3.2, Fig. 1): the profile's timeline split into phases
//! by which sites take the accesses, a placement per phase, and the sites grouped into arenas
//! that each sit in one tier per phase.
//!
//! A phase is a cluster of intervals, not a stretch of time: a program that alternates between
//! two loops has two phases, each recurring. An interval is described by the share of its
//! accesses each site took, so that a phase is told by *where* the program accesses, not by how
//! much; the distance between two such vectors is L1 (from 0, the same shares, to 2, disjoint
//! sites). [`segment`] clusters the intervals with a deterministic k-means (farthest-point
//! seeds, the first interval's shares first) and merges clusters closer than
//! [`PHASE_MERGE_DISTANCE`], so that a program that never changes gives one phase however many
//! are allowed, and sampling noise does not split one.
//!
//! [`per_phase`] then runs an [`Algorithm`] on each phase's demands and groups the sites with
//! the same tier in every phase into one arena: the seed's "one arena per distinct bit vector",
//! generalised to tiers. On a phase change, detected online by [`classify`], the daemon moves
//! whole arenas.

use super::algorithms::count;
use super::{advise, Algorithm, IntervalDemand, SiteDemand, SitePlacement, TierSpec, Timeline};
use std::collections::HashMap;

/// Two clusters whose centroids are nearer than this (L1 distance between access shares) are
/// one phase: 0.2 is a tenth of the accesses having moved between sites, less than a real
/// change of loop moves, and more than sampling noise does in a steady program whose intervals
/// hold a few hundred samples or more (a share p of n samples varies by about
/// sqrt(p(1 - p) / n): 0.03 at n = 250). Intervals of a few dozen samples are noisy enough to
/// be split into phases that are not there.
pub const PHASE_MERGE_DISTANCE: f64 = 0.2;

/// Rounds of k-means at most: it settles in a few, and the bound keeps an oscillating case
/// finite.
const MAX_ROUNDS: usize = 100;

/// A profile's timeline split into phases.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Phases {
    /// The phase of each interval of the timeline, numbered in order of first appearance (the
    /// first interval's phase is 0).
    pub interval_phase: Vec<usize>,
    /// Per phase, the share of the phase's accesses each site took: one entry per site, summing
    /// to 1, or all 0 for a phase with no accesses.
    pub centroids: Vec<Vec<f64>>,
}

/// Per-phase guidance: arenas that each sit in one tier per phase.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PhaseAdvice {
    /// Per arena, its tier in each phase (one entry per phase of the [`Phases`] it was made
    /// for).
    pub arenas: Vec<Vec<usize>>,
    /// Per site, in the input's order, the index of its arena in `arenas`.
    pub site_arena: Vec<usize>,
}

/// One interval's accesses, per site that had some: (site, accesses), by site.
type SparseAccesses = Vec<(usize, f64)>;

/// Splits `timeline` into at most `max_phases` phases (at least one when it has intervals) by
/// the similarity of the intervals' per-site access shares; see the module doc. An interval with
/// no accesses joins the previous interval's phase (the first intervals, before any access,
/// join the first phase that has some); a timeline with no accesses at all is one phase, with
/// an all-zero centroid; an empty timeline has no phases. Deterministic.
pub fn segment(sites: &[SiteDemand], timeline: &Timeline, max_phases: usize) -> Phases {
    let interval_count = timeline.interval_seconds.len();
    if interval_count == 0 {
        return Phases::default();
    }
    let rows = accesses_by_interval(sites, interval_count);
    let active: Vec<usize> = (0..interval_count)
        .filter(|&i| !rows[i].is_empty())
        .collect();
    if active.is_empty() {
        return Phases {
            interval_phase: vec![0; interval_count],
            centroids: vec![vec![0.0; sites.len()]],
        };
    }
    let shares: Vec<SparseAccesses> = active.iter().map(|&i| to_shares(&rows[i])).collect();

    let mut centroids = farthest_point_seeds(&shares, sites.len(), max_phases.max(1));
    let mut cluster_of = vec![0usize; active.len()];
    for round in 0..MAX_ROUNDS {
        let changed = assign_nearest(&shares, &centroids, &mut cluster_of);
        centroids = weighted_centroids(&active, &rows, &cluster_of, &centroids, sites.len());
        if !changed && round > 0 {
            break;
        }
    }
    drop_empty(&mut cluster_of, &mut centroids);
    merge_close(&active, &rows, &mut cluster_of, &mut centroids, sites.len());
    // A last pass, so that each interval sits with the nearest of the phases that remain.
    assign_nearest(&shares, &centroids, &mut cluster_of);
    centroids = weighted_centroids(&active, &rows, &cluster_of, &centroids, sites.len());

    // Number the phases by first appearance, dropping clusters left empty.
    let mut number_of = vec![usize::MAX; centroids.len()];
    let mut numbered = Vec::new();
    for &cluster in &cluster_of {
        if number_of[cluster] == usize::MAX {
            number_of[cluster] = numbered.len();
            numbered.push(cluster);
        }
    }
    let mut interval_phase = vec![0; interval_count];
    let mut previous = number_of[cluster_of[0]];
    let mut next_active = active.iter().zip(&cluster_of).peekable();
    for (interval, phase) in interval_phase.iter_mut().enumerate() {
        if let Some((_, &cluster)) = next_active.next_if(|&(&a, _)| a == interval) {
            previous = number_of[cluster];
        }
        *phase = previous;
    }
    Phases {
        interval_phase,
        centroids: numbered
            .into_iter()
            .map(|c| std::mem::take(&mut centroids[c]))
            .collect(),
    }
}

/// Each interval's accesses per site, summed where a site's series repeats an interval.
fn accesses_by_interval(sites: &[SiteDemand], interval_count: usize) -> Vec<SparseAccesses> {
    let mut rows: Vec<SparseAccesses> = vec![Vec::new(); interval_count];
    for (site, demand) in sites.iter().enumerate() {
        for entry in &demand.series {
            let accesses = count(entry.accesses);
            let Some(row) = rows.get_mut(entry.interval) else {
                continue;
            };
            if accesses == 0.0 {
                continue;
            }
            match row.last_mut() {
                Some((last, sum)) if *last == site => *sum += accesses,
                _ => row.push((site, accesses)),
            }
        }
    }
    // Sites were visited in order, so each row is sorted unless a series was out of order.
    for row in &mut rows {
        row.sort_by_key(|&(site, _)| site);
        row.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 += later.1;
            }
            same
        });
    }
    rows
}

/// `row` as shares of its total.
fn to_shares(row: &[(usize, f64)]) -> SparseAccesses {
    let total: f64 = row.iter().map(|&(_, a)| a).sum();
    if total > 0.0 {
        row.iter().map(|&(s, a)| (s, a / total)).collect()
    } else {
        Vec::new()
    }
}

/// L1 distance between sparse shares and a dense centroid (whose entries sum to `centroid_sum`):
/// the centroid's sum, corrected on the entries `shares` has.
fn distance(shares: &[(usize, f64)], centroid: &[f64], centroid_sum: f64) -> f64 {
    shares.iter().fold(centroid_sum, |d, &(site, share)| {
        let c = centroid.get(site).copied().unwrap_or(0.0);
        d + (share - c).abs() - c.abs()
    })
}

/// Sparse shares as a dense vector of `site_count` entries.
fn dense(shares: &[(usize, f64)], site_count: usize) -> Vec<f64> {
    let mut vector = vec![0.0; site_count];
    for &(site, share) in shares {
        vector[site] = share;
    }
    vector
}

/// Up to `k` seeds: the first interval's shares, then repeatedly the interval farthest from its
/// nearest seed (the earliest on ties), while that one is farther than
/// [`PHASE_MERGE_DISTANCE`] (no seed is wasted on noise).
fn farthest_point_seeds(shares: &[SparseAccesses], site_count: usize, k: usize) -> Vec<Vec<f64>> {
    let mut seeds = vec![dense(&shares[0], site_count)];
    let mut nearest: Vec<f64> = shares.iter().map(|s| distance(s, &seeds[0], 1.0)).collect();
    while seeds.len() < k {
        let Some((farthest, &d)) =
            nearest
                .iter()
                .enumerate()
                .reduce(|best, next| if next.1 > best.1 { next } else { best })
        else {
            break;
        };
        if d <= PHASE_MERGE_DISTANCE {
            break;
        }
        let seed = dense(&shares[farthest], site_count);
        for (n, s) in nearest.iter_mut().zip(shares) {
            *n = n.min(distance(s, &seed, 1.0));
        }
        seeds.push(seed);
    }
    seeds
}

/// Moves each interval to its nearest centroid (the lowest-numbered on ties); whether any moved.
fn assign_nearest(
    shares: &[SparseAccesses],
    centroids: &[Vec<f64>],
    cluster_of: &mut [usize],
) -> bool {
    let sums: Vec<f64> = centroids.iter().map(|c| c.iter().sum()).collect();
    let mut changed = false;
    for (interval_shares, cluster) in shares.iter().zip(cluster_of.iter_mut()) {
        let mut best = (0, f64::INFINITY);
        for (c, (centroid, &sum)) in centroids.iter().zip(&sums).enumerate() {
            let d = distance(interval_shares, centroid, sum);
            if d < best.1 {
                best = (c, d);
            }
        }
        if *cluster != best.0 {
            *cluster = best.0;
            changed = true;
        }
    }
    changed
}

/// Each cluster's centroid: the share of its intervals' accesses each site took (a cluster
/// left with no interval keeps its previous centroid, to be dropped at the end if still empty).
fn weighted_centroids(
    active: &[usize],
    rows: &[SparseAccesses],
    cluster_of: &[usize],
    previous: &[Vec<f64>],
    site_count: usize,
) -> Vec<Vec<f64>> {
    let mut sums = vec![vec![0.0; site_count]; previous.len()];
    for (&interval, &cluster) in active.iter().zip(cluster_of) {
        for &(site, accesses) in &rows[interval] {
            sums[cluster][site] += accesses;
        }
    }
    sums.into_iter()
        .zip(previous)
        .map(|(mut sum, previous)| {
            let total: f64 = sum.iter().sum();
            if total > 0.0 {
                sum.iter_mut().for_each(|a| *a /= total);
                sum
            } else {
                previous.clone()
            }
        })
        .collect()
}

/// Removes the clusters no interval is in (their stale centroids would otherwise attract
/// intervals again), keeping the others' order.
fn drop_empty(cluster_of: &mut [usize], centroids: &mut Vec<Vec<f64>>) {
    let mut occupied = vec![false; centroids.len()];
    for &c in cluster_of.iter() {
        occupied[c] = true;
    }
    let mut renumbered = vec![0; centroids.len()];
    let mut kept = 0;
    for old in 0..centroids.len() {
        if occupied[old] {
            // Every position from `kept` to `old` holds a dropped centroid.
            renumbered[old] = kept;
            centroids.swap(kept, old);
            kept += 1;
        }
    }
    centroids.truncate(kept);
    for c in cluster_of.iter_mut() {
        *c = renumbered[*c];
    }
}

/// Merges the two nearest clusters while they are nearer than [`PHASE_MERGE_DISTANCE`]; every
/// cluster has an interval, and keeps one.
fn merge_close(
    active: &[usize],
    rows: &[SparseAccesses],
    cluster_of: &mut [usize],
    centroids: &mut Vec<Vec<f64>>,
    site_count: usize,
) {
    loop {
        let mut nearest: Option<(usize, usize, f64)> = None;
        for a in 0..centroids.len() {
            for b in a + 1..centroids.len() {
                let d = l1(&centroids[a], &centroids[b]);
                if d < PHASE_MERGE_DISTANCE && nearest.is_none_or(|(_, _, best)| d < best) {
                    nearest = Some((a, b, d));
                }
            }
        }
        let Some((keep, gone, _)) = nearest else {
            return;
        };
        for c in cluster_of.iter_mut() {
            if *c == gone {
                *c = keep;
            }
        }
        drop_empty(cluster_of, centroids);
        *centroids = weighted_centroids(active, rows, cluster_of, centroids, site_count);
    }
}

/// L1 distance between two dense vectors, a missing entry counting as 0.
fn l1(a: &[f64], b: &[f64]) -> f64 {
    let (long, short) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    long.iter()
        .enumerate()
        .map(|(i, &x)| (x - short.get(i).copied().unwrap_or(0.0)).abs())
        .sum()
}

/// The phase an interval belongs to: the one whose centroid is nearest (L1) to the interval's
/// per-site `accesses` as shares of their total (the lowest-numbered phase on ties). None when
/// the interval had no accesses or there are no phases. The daemon runs this each interval to
/// tell that the program changed phase.
pub fn classify(centroids: &[Vec<f64>], accesses: &[f64]) -> Option<usize> {
    let total: f64 = accesses.iter().map(|&a| count(a)).sum();
    if total <= 0.0 {
        return None;
    }
    let shares: Vec<f64> = accesses.iter().map(|&a| count(a) / total).collect();
    let mut best: Option<(usize, f64)> = None;
    for (phase, centroid) in centroids.iter().enumerate() {
        let d = l1(&shares, centroid);
        if best.is_none_or(|(_, nearest)| d < nearest) {
            best = Some((phase, d));
        }
    }
    best.map(|(phase, _)| phase)
}

/// A tier per phase for every site by `algorithm`, and the sites grouped into arenas.
///
/// Each phase's demands are the sites' restricted to the phase's intervals: accesses, loads,
/// stores and allocations summed, bytes the peak live bytes within the phase, and the series
/// cut to the phase. A site with no live bytes in the phase keeps its overall bytes and has no
/// accesses there, so it goes to the slowest tier (an arena holding it then must be able to
/// hold all of it).
///
/// An arena lives in one tier at a time, so a site the algorithm spills counts as in its tier
/// only if at least half its bytes are there, and as in the next tier otherwise. That can put
/// up to half a spilled site more in a tier than its capacity, or leave up to half of one
/// unused: rounding to the nearer whole is what keeps an arena's accesses closest to the
/// advice.
///
/// Sites with the same tier in every phase share an arena; arenas are numbered by their first
/// site. The tier vectors have one entry per phase of `phases` (its centroids).
pub fn per_phase(
    algorithm: Algorithm,
    sites: &[SiteDemand],
    tiers: &[TierSpec],
    timeline: &Timeline,
    phases: &Phases,
) -> PhaseAdvice {
    let slowest = tiers.len().saturating_sub(1);
    let phase_count = phases.centroids.len();
    let mut site_tiers: Vec<Vec<usize>> = vec![Vec::with_capacity(phase_count); sites.len()];
    for phase in 0..phase_count {
        let in_phase =
            |interval: usize| phases.interval_phase.get(interval).copied() == Some(phase);
        let demands: Vec<SiteDemand> = sites.iter().map(|s| restrict(s, &in_phase)).collect();
        let advice = advise(algorithm, &demands, tiers, timeline);
        for (i, (demand, tiers_of_site)) in demands.iter().zip(&mut site_tiers).enumerate() {
            let tier = advice
                .sites
                .get(i)
                .map_or(slowest, |placement| arena_tier(demand, placement, slowest));
            tiers_of_site.push(tier);
        }
    }
    let mut arena_of: HashMap<Vec<usize>, usize> = HashMap::new();
    let mut arenas = Vec::new();
    let site_arena = site_tiers
        .into_iter()
        .map(|tiers_of_site| {
            *arena_of.entry(tiers_of_site).or_insert_with_key(|vector| {
                arenas.push(vector.clone());
                arenas.len() - 1
            })
        })
        .collect();
    PhaseAdvice { arenas, site_arena }
}

/// `site`'s demand within the intervals `in_phase` accepts.
fn restrict(site: &SiteDemand, in_phase: &dyn Fn(usize) -> bool) -> SiteDemand {
    let mut series: Vec<IntervalDemand> = site
        .series
        .iter()
        .filter(|e| in_phase(e.interval))
        .cloned()
        .collect();
    let allocations = series
        .iter()
        .fold(0u64, |sum, e| sum.saturating_add(e.allocations));
    let peak_live_bytes = series.iter().map(|e| e.live_bytes).max().unwrap_or(0);
    if peak_live_bytes == 0 {
        for entry in &mut series {
            entry.accesses = 0.0;
            entry.loads = entry.loads.map(|_| 0.0);
            entry.stores = entry.stores.map(|_| 0.0);
        }
        return SiteDemand {
            bytes: site.bytes,
            accesses: 0.0,
            loads: site.loads.map(|_| 0.0),
            stores: site.stores.map(|_| 0.0),
            allocations,
            series,
        };
    }
    // Loads and stores are known in the phase only where every interval of it told them.
    let sum_known = |part: fn(&IntervalDemand) -> Option<f64>| {
        series
            .iter()
            .try_fold(0.0, |sum, e| part(e).map(|x| sum + count(x)))
    };
    SiteDemand {
        bytes: peak_live_bytes,
        accesses: series.iter().map(|e| count(e.accesses)).sum(),
        loads: sum_known(|e| e.loads),
        stores: sum_known(|e| e.stores),
        allocations,
        series,
    }
}

/// The one tier an arena holding this site would sit in for the placement: its tier if at
/// least half its bytes are there, the next (no further than the slowest) otherwise.
fn arena_tier(demand: &SiteDemand, placement: &SitePlacement, slowest: usize) -> usize {
    let held = placement.tier_bytes.min(demand.bytes);
    if held >= demand.bytes - held {
        placement.tier.min(slowest)
    } else {
        (placement.tier + 1).min(slowest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::xorshift;

    /// A site of `bytes`, live and allocated in interval 0, with `accesses[i]` in interval `i`.
    fn site(bytes: u64, accesses: &[f64]) -> SiteDemand {
        let series: Vec<IntervalDemand> = accesses
            .iter()
            .enumerate()
            .map(|(interval, &accesses)| IntervalDemand {
                interval,
                live_bytes: bytes,
                accesses,
                allocations: u64::from(interval == 0),
                ..IntervalDemand::default()
            })
            .collect();
        SiteDemand {
            bytes,
            accesses: accesses.iter().sum(),
            allocations: 1,
            series,
            ..SiteDemand::default()
        }
    }

    fn seconds(intervals: usize) -> Timeline {
        Timeline {
            interval_seconds: vec![1.0; intervals],
        }
    }

    fn two_tiers(fast_bytes: u64) -> Vec<TierSpec> {
        vec![
            TierSpec {
                capacity_bytes: fast_bytes,
                load_cost: 1.0,
                store_cost: 1.0,
            },
            TierSpec {
                capacity_bytes: u64::MAX,
                load_cost: 3.0,
                store_cost: 3.0,
            },
        ]
    }

    /// `hot` in the intervals of `hot_in`, `cold` in the others, over `intervals`.
    fn pattern(intervals: usize, hot_in: std::ops::Range<usize>, hot: f64, cold: f64) -> Vec<f64> {
        (0..intervals)
            .map(|i| if hot_in.contains(&i) { hot } else { cold })
            .collect()
    }

    /// A hot in intervals 0-9, B in 10-19, C never accessed, D (small) hot along with A.
    fn two_phase_sites() -> Vec<SiteDemand> {
        vec![
            site(100, &pattern(20, 0..10, 1000.0, 10.0)),
            site(100, &pattern(20, 10..20, 1000.0, 10.0)),
            site(50, &[0.0; 20]),
            site(10, &pattern(20, 0..10, 50.0, 0.0)),
        ]
    }

    #[test]
    fn two_phases_are_found_at_their_boundary_and_their_hot_sites_swap_tiers() {
        let sites = two_phase_sites();
        let timeline = seconds(20);
        let phases = segment(&sites, &timeline, 4);
        let expected: Vec<usize> = (0..20).map(|i| usize::from(i >= 10)).collect();
        assert_eq!(phases.interval_phase, expected);
        assert_eq!(phases.centroids.len(), 2);
        assert!((phases.centroids[0][0] - 1000.0 / 1060.0).abs() < 1e-12);
        assert!((phases.centroids[1][1] - 1000.0 / 1010.0).abs() < 1e-12);
        for centroid in &phases.centroids {
            assert!((centroid.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }

        // The fast tier holds A and D, or B, not both hot sets.
        for algorithm in Algorithm::ALL {
            let advice = per_phase(algorithm, &sites, &two_tiers(110), &timeline, &phases);
            assert_eq!(
                advice,
                PhaseAdvice {
                    arenas: vec![vec![0, 1], vec![1, 0], vec![1, 1]],
                    site_arena: vec![0, 1, 2, 0],
                },
                "{}",
                algorithm.name()
            );
        }

        for interval in 0..20 {
            let accesses: Vec<f64> = sites.iter().map(|s| s.series[interval].accesses).collect();
            assert_eq!(
                classify(&phases.centroids, &accesses),
                Some(phases.interval_phase[interval]),
                "interval {interval}"
            );
        }
    }

    #[test]
    fn a_phase_that_recurs_is_one_phase() {
        let a: Vec<f64> = (0..15)
            .map(|i| if (5..10).contains(&i) { 5.0 } else { 500.0 })
            .collect();
        let b: Vec<f64> = a.iter().map(|&x| 505.0 - x).collect();
        let phases = segment(&[site(1, &a), site(1, &b)], &seconds(15), 8);
        let expected: Vec<usize> = (0..15).map(|i| usize::from((5..10).contains(&i))).collect();
        assert_eq!(phases.interval_phase, expected);
        assert_eq!(phases.centroids.len(), 2);
    }

    #[test]
    fn a_steady_profile_is_one_phase() {
        let mut next = xorshift(0xdead_beef_cafe_f00d);
        let mut noise = || (next() % 161) as f64 - 80.0;
        let a: Vec<f64> = (0..30).map(|_| 600.0 + noise()).collect();
        let b: Vec<f64> = (0..30).map(|_| 400.0 + noise()).collect();
        let sites = [site(10, &a), site(10, &b)];
        let phases = segment(&sites, &seconds(30), 8);
        assert_eq!(phases.interval_phase, vec![0; 30]);
        assert_eq!(phases.centroids.len(), 1);
        let advice = per_phase(
            Algorithm::Knapsack,
            &sites,
            &two_tiers(10),
            &seconds(30),
            &phases,
        );
        assert_eq!(advice.arenas, vec![vec![0], vec![1]]);
    }

    #[test]
    fn one_phase_allowed_gives_one_phase() {
        let phases = segment(&two_phase_sites(), &seconds(20), 1);
        assert_eq!(phases.interval_phase, vec![0; 20]);
        assert_eq!(phases.centroids.len(), 1);
        let zero_allowed = segment(&two_phase_sites(), &seconds(20), 0);
        assert_eq!(zero_allowed, phases, "0 phases allowed is read as 1");
    }

    #[test]
    fn segmentation_and_advice_are_deterministic() {
        let sites = two_phase_sites();
        let first = segment(&sites, &seconds(20), 3);
        assert_eq!(first, segment(&sites, &seconds(20), 3));
        let advise_once = || {
            per_phase(
                Algorithm::Bandwidth,
                &sites,
                &two_tiers(110),
                &seconds(20),
                &first,
            )
        };
        assert_eq!(advise_once(), advise_once());
    }

    #[test]
    fn intervals_without_accesses_join_the_previous_phase() {
        let a = [0.0, 0.0, 9.0, 9.0, 9.0, 0.0, 0.0, 0.0, 0.0];
        let b = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 9.0, 9.0, 0.0];
        let phases = segment(&[site(1, &a), site(1, &b)], &seconds(9), 4);
        assert_eq!(phases.interval_phase, [0, 0, 0, 0, 0, 0, 1, 1, 1]);
        assert_eq!(phases.centroids, [vec![1.0, 0.0], vec![0.0, 1.0]]);
    }

    #[test]
    fn degenerate_timelines() {
        let quiet = [site(1, &[0.0; 4])];
        let phases = segment(&quiet, &seconds(4), 4);
        assert_eq!(
            phases,
            Phases {
                interval_phase: vec![0; 4],
                centroids: vec![vec![0.0]],
            },
            "no accesses at all: one phase"
        );
        assert_eq!(segment(&quiet, &Timeline::default(), 4), Phases::default());
        assert_eq!(segment(&[], &seconds(3), 4).interval_phase, [0, 0, 0]);
        let none = per_phase(
            Algorithm::Hotset,
            &quiet,
            &two_tiers(1),
            &Timeline::default(),
            &Phases::default(),
        );
        assert_eq!(none.arenas, vec![Vec::<usize>::new()]);
        assert_eq!(none.site_arena, [0]);
    }

    #[test]
    fn classify_needs_accesses_and_phases() {
        let centroids = vec![vec![1.0, 0.0], vec![0.0, 1.0]];
        assert_eq!(classify(&centroids, &[0.0, 0.0]), None);
        assert_eq!(classify(&centroids, &[f64::NAN, -1.0]), None);
        assert_eq!(classify(&[], &[1.0, 2.0]), None);
        assert_eq!(classify(&centroids, &[1.0, 3.0]), Some(1));
        assert_eq!(
            classify(&centroids, &[1.0, 1.0]),
            Some(0),
            "ties: the first"
        );
        assert_eq!(
            classify(&centroids, &[0.0, 0.0, 5.0]),
            Some(0),
            "a new site"
        );
    }

    #[test]
    fn a_spilled_site_counts_in_the_tier_holding_at_least_half_of_it() {
        let sites = [site(100, &[10.0; 4])];
        let phases = segment(&sites, &seconds(4), 2);
        let with_fast = |fast_bytes| {
            per_phase(
                Algorithm::Hotset,
                &sites,
                &two_tiers(fast_bytes),
                &seconds(4),
                &phases,
            )
            .arenas
        };
        assert_eq!(with_fast(50), [vec![0]], "half fits");
        assert_eq!(with_fast(49), [vec![1]]);
    }

    #[test]
    fn a_site_absent_from_a_phase_keeps_its_bytes_and_goes_slow_there() {
        let mut late = site(60, &pattern(10, 5..10, 100.0, 0.0));
        for entry in &mut late.series[..5] {
            entry.live_bytes = 0;
        }
        let early = site(50, &pattern(10, 0..5, 100.0, 1.0));
        let sites = [early, late];
        let phases = segment(&sites, &seconds(10), 2);
        assert_eq!(phases.centroids.len(), 2);
        let advice = per_phase(
            Algorithm::Knapsack,
            &sites,
            &two_tiers(60),
            &seconds(10),
            &phases,
        );
        assert_eq!(advice.arenas, [vec![0, 1], vec![1, 0]]);
    }

    #[test]
    fn random_profiles_give_well_formed_phases_and_arenas() {
        let mut next = xorshift(0x0123_4567_89ab_cdef);
        for instance in 0..200 {
            let intervals = (next() % 12) as usize;
            let sites: Vec<SiteDemand> = (0..next() % 6)
                .map(|_| {
                    let accesses: Vec<f64> = (0..intervals)
                        .map(|_| match next() % 4 {
                            0 => 0.0,
                            1 => f64::NAN,
                            _ => (next() % 100) as f64,
                        })
                        .collect();
                    site(next() % 200, &accesses)
                })
                .collect();
            let max_phases = (next() % 5) as usize;
            let timeline = seconds(intervals);
            let phases = segment(&sites, &timeline, max_phases);
            let context = format!("instance {instance}");
            assert_eq!(phases.interval_phase.len(), intervals, "{context}");
            assert!(phases.centroids.len() <= max_phases.max(1), "{context}");
            assert!(
                phases
                    .interval_phase
                    .iter()
                    .all(|&p| p < phases.centroids.len()),
                "{context}"
            );
            for centroid in &phases.centroids {
                assert_eq!(centroid.len(), sites.len(), "{context}");
                let sum: f64 = centroid.iter().sum();
                assert!(sum == 0.0 || (sum - 1.0).abs() < 1e-9, "{context}");
            }
            let tiers = two_tiers(next() % 400);
            for algorithm in Algorithm::ALL {
                let advice = per_phase(algorithm, &sites, &tiers, &timeline, &phases);
                assert_eq!(advice.site_arena.len(), sites.len(), "{context}");
                assert!(
                    advice.site_arena.iter().all(|&a| a < advice.arenas.len()),
                    "{context}"
                );
                assert!(
                    advice
                        .arenas
                        .iter()
                        .all(|a| a.len() == phases.centroids.len() && a.iter().all(|&t| t < 2)),
                    "{context}"
                );
            }
        }
    }
}
