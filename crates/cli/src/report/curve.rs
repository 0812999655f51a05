//! How much fast memory the program needs (section 2): for a fast tier of 1 to 100 % of the
//! profile's peak footprint, the share of all the profile's accesses that tier would serve
//! under each advise algorithm, the slow tier unbounded. It is `objtier advise` run at every
//! capacity: the profile's sites become `objtier_policy::advise::SiteDemand`s as advise makes
//! them, each algorithm places them ([`advise::advise`]) and [`advise::evaluate`] splits their
//! accesses by where their bytes went. A user without a tiered machine reads off it what a
//! CXL expander behind a given amount of DRAM would give.
//!
//! Where the profiled run had tiers, the share it actually got is beside the curve: each
//! interval's accesses of each site weighted by the share of the site's bytes in tier 0 at
//! the interval's end (`series.tier_bytes`), at the most tier-0 bytes the run held at once.

use super::figures::{tier_count, tier_fractions};
use objtier_policy::advise::{self, Algorithm, TierSpec, Timeline};
use objtier_profile::Profile;
use serde::Serialize;

/// The fast tier's capacities the curve is computed at, as percentages of the footprint.
pub const CAPACITY_PERCENTS: [u32; 100] = {
    let mut p = [0u32; 100];
    let mut i = 0;
    while i < 100 {
        p[i] = i as u32 + 1;
        i += 1;
    }
    p
};

/// Shares of the accesses the "needed" table looks for.
pub const TARGETS: [f64; 5] = [0.5, 0.8, 0.9, 0.95, 0.99];

#[derive(Clone, Debug, Serialize)]
pub struct Curve {
    pub footprint_bytes: u64,
    /// The capacities, as percentages of the footprint and in bytes.
    pub percents: Vec<u32>,
    pub capacities_bytes: Vec<u64>,
    pub algorithms: Vec<AlgorithmCurve>,
    /// Load and store cost of the fast and the slow tier (the profile's tier latencies in ns
    /// where it has them, else 1 and 4).
    pub costs: [(f64, f64); 2],
    /// Accesses to objects of unknown site, which no placement can place: the curve's ceiling
    /// is 1 less this.
    pub unplaceable_share: f64,
    pub total_accesses: f64,
    /// The smallest capacity at which each algorithm serves each target share.
    pub needed: Vec<Needed>,
    /// What the profiled run got, where it had tiers and its pages were located.
    pub observed: Option<Observed>,
}

#[derive(Clone, Debug, Serialize)]
pub struct AlgorithmCurve {
    pub algorithm: &'static str,
    /// The fast tier's share of all accesses at each capacity.
    pub shares: Vec<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Needed {
    pub algorithm: &'static str,
    pub target: f64,
    /// `None`: not reached even at 100 % (the unplaceable accesses, or sites too large).
    pub percent: Option<u32>,
    pub bytes: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Observed {
    /// The tiers the run had.
    pub tiers: usize,
    /// The most bytes of the profile's sites tier 0 held at once, and that as a share of the
    /// footprint: where the run sits on the curve's axis.
    pub fast_bytes_peak: u64,
    pub fast_share_of_footprint: f64,
    /// The share of all accesses tier 0 served.
    pub share: f64,
    /// The share of all accesses whose site's location was known (the rest counts as not
    /// served by tier 0: a lower bound).
    pub located_share: f64,
}

/// The curve at `percents` of the footprint.
pub fn curve(profile: &Profile, percents: &[u32]) -> Curve {
    let (_, demands) = crate::advise_cmd::demands(profile);
    let footprint = profile.peak_footprint_bytes;
    let total = profile.total_accesses();
    let placeable: f64 = demands.iter().map(|d| d.accesses).sum();
    let timeline = Timeline {
        interval_seconds: profile.intervals.iter().map(|i| i.seconds()).collect(),
    };
    let cost = |tier: Option<&objtier_profile::profile::TierInfo>, default: f64| {
        let read = tier.and_then(|t| t.read_latency_ns).map(|l| l as f64);
        let write = tier.and_then(|t| t.write_latency_ns).map(|l| l as f64);
        let load = read.unwrap_or(default);
        (load, write.unwrap_or(load))
    };
    let costs = [
        cost(profile.tiers.first(), 1.0),
        cost(profile.tiers.get(1).and(profile.tiers.last()), 4.0),
    ];
    let capacities: Vec<u64> = percents
        .iter()
        .map(|&p| (footprint as f64 * p as f64 / 100.0) as u64)
        .collect();
    let share_at = |algorithm: Algorithm, capacity: u64| -> f64 {
        if total <= 0.0 {
            return 0.0;
        }
        let specs = [
            TierSpec {
                capacity_bytes: capacity,
                load_cost: costs[0].0,
                store_cost: costs[0].1,
            },
            TierSpec {
                capacity_bytes: u64::MAX,
                load_cost: costs[1].0,
                store_cost: costs[1].1,
            },
        ];
        let advice = advise::advise(algorithm, &demands, &specs, &timeline);
        advise::evaluate(&demands, &specs, &advice)[0].accesses / total
    };
    let algorithms: Vec<AlgorithmCurve> = Algorithm::ALL
        .iter()
        .map(|&algorithm| AlgorithmCurve {
            algorithm: algorithm.name(),
            shares: in_parallel(&capacities, |&c| share_at(algorithm, c)),
        })
        .collect();
    let needed = algorithms
        .iter()
        .flat_map(|a| {
            TARGETS.iter().map(|&target| {
                // A hair below the target, so that 0.9 of accesses summed in floating point
                // counts as 90 %.
                let at = a.shares.iter().position(|&s| s >= target - 1e-9);
                Needed {
                    algorithm: a.algorithm,
                    target,
                    percent: at.map(|i| percents[i]),
                    bytes: at.map(|i| capacities[i]),
                }
            })
        })
        .collect();
    Curve {
        footprint_bytes: footprint,
        percents: percents.to_vec(),
        capacities_bytes: capacities,
        algorithms,
        costs,
        unplaceable_share: if total > 0.0 {
            ((total - placeable) / total).max(0.0)
        } else {
            0.0
        },
        total_accesses: total,
        needed,
        observed: observed(profile),
    }
}

/// `f` of every item, on as many threads as the machine has (knapsack's table is 2^26 cells a
/// capacity: a hundred capacities take seconds on one core), in the items' order.
fn in_parallel<T: Sync, R: Send + Default + Clone>(
    items: &[T],
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len().max(1));
    let chunk = items.len().div_ceil(threads).max(1);
    let mut out = vec![R::default(); items.len()];
    std::thread::scope(|scope| {
        for (items, out) in items.chunks(chunk).zip(out.chunks_mut(chunk)) {
            let f = &f;
            scope.spawn(move || {
                for (item, slot) in items.iter().zip(out) {
                    *slot = f(item);
                }
            });
        }
    });
    out
}

/// What the run got from tier 0, where its pages were located.
pub fn observed(profile: &Profile) -> Option<Observed> {
    if !super::figures::located(profile) {
        return None;
    }
    let total = profile.total_accesses();
    let mut fast_by_interval = vec![0u64; profile.intervals.len()];
    let (mut fast_accesses, mut located_accesses) = (0.0, 0.0);
    for site in &profile.sites {
        let rows = site.series.tier_bytes.as_deref().unwrap_or(&[]);
        for (row, bytes) in rows.iter().enumerate() {
            let accesses = site.series.accesses.get(row).copied().unwrap_or(0.0);
            if let Some(fractions) = tier_fractions(bytes) {
                fast_accesses += accesses * fractions[0];
                located_accesses += accesses;
            }
            if let (Some(&interval), Some(&fast)) = (site.series.interval.get(row), bytes.first()) {
                if let Some(sum) = fast_by_interval.get_mut(interval) {
                    *sum += fast;
                }
            }
        }
    }
    let fast_bytes_peak = fast_by_interval.iter().copied().max().unwrap_or(0);
    let share = |x: f64| if total > 0.0 { x / total } else { 0.0 };
    Some(Observed {
        tiers: tier_count(profile),
        fast_bytes_peak,
        fast_share_of_footprint: if profile.peak_footprint_bytes > 0 {
            fast_bytes_peak as f64 / profile.peak_footprint_bytes as f64
        } else {
            0.0
        },
        share: share(fast_accesses),
        located_share: share(located_accesses),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_profiles::{profile, site};
    use objtier_profile::{Site, SiteKind};

    /// A hot 10 MiB site (90 accesses), a cold 90 MiB one (9), and 1 access of unknown site.
    fn two_sites() -> Profile {
        let mut p = profile(2, 2);
        p.sites = vec![
            site("/bin/app+0x10", 90 << 20, &[4.5, 4.5]),
            site("/bin/app+0x20", 10 << 20, &[45.0, 45.0]),
            Site {
                kind: SiteKind::Unknown,
                accesses: 1.0,
                ..Site::default()
            },
        ];
        p.peak_footprint_bytes = 100 << 20;
        p
    }

    #[test]
    fn the_curve_is_each_algorithms_fast_share_at_each_capacity() {
        let c = curve(&two_sites(), &[5, 10, 50, 100]);
        assert_eq!(c.capacities_bytes, [5 << 20, 10 << 20, 50 << 20, 100 << 20]);
        assert!((c.unplaceable_share - 0.01).abs() < 1e-12);
        let by = |name: &str| {
            &c.algorithms
                .iter()
                .find(|a| a.algorithm == name)
                .unwrap()
                .shares
        };
        // hotset spills: half the hot site fits in 5 %.
        let hotset = by("hotset");
        assert!((hotset[0] - 0.45).abs() < 1e-9, "{hotset:?}");
        assert!((hotset[1] - 0.90).abs() < 1e-9);
        // 50 %: the hot site and 40 of the cold site's 90 MiB (4 of its 9 accesses).
        assert!((hotset[2] - 0.94).abs() < 1e-9, "{hotset:?}");
        assert!(
            (hotset[3] - 0.99).abs() < 1e-9,
            "all but the unknown site's"
        );
        // knapsack places whole sites: nothing in 5 %, the hot site at 10 %.
        let knapsack = by("knapsack");
        assert_eq!(knapsack[0], 0.0);
        assert!((knapsack[1] - 0.90).abs() < 1e-9);
        assert!(
            (knapsack[2] - 0.90).abs() < 1e-9,
            "the cold site fits only whole"
        );
        assert!((knapsack[3] - 0.99).abs() < 1e-9);
        let needed = |name: &str, target: f64| {
            c.needed
                .iter()
                .find(|n| n.algorithm == name && n.target == target)
                .unwrap()
                .percent
        };
        assert_eq!(needed("hotset", 0.5), Some(10));
        assert_eq!(needed("hotset", 0.9), Some(10));
        assert_eq!(needed("hotset", 0.95), Some(100));
        assert_eq!(needed("hotset", 0.99), Some(100));
        assert_eq!(needed("knapsack", 0.5), Some(10));
        // Without locations nothing was observed.
        assert_eq!(c.observed, None);
    }

    #[test]
    fn a_profile_without_accesses_has_a_flat_curve() {
        let mut p = two_sites();
        for s in &mut p.sites {
            s.accesses = 0.0;
            s.series.accesses.iter_mut().for_each(|a| *a = 0.0);
        }
        let c = curve(&p, &[10, 100]);
        assert!(c.algorithms.iter().all(|a| a.shares == [0.0, 0.0]));
        assert!(c.needed.iter().all(|n| n.percent.is_none()));
        assert_eq!(c.unplaceable_share, 0.0);
    }

    #[test]
    fn the_observed_share_weights_each_interval_by_the_bytes_in_tier_0() {
        let mut p = two_sites();
        // The hot site: all in tier 0 in interval 0, a quarter in interval 1.
        p.sites[1].series.tier_bytes = Some(vec![vec![10 << 20, 0], vec![5 << 19, 15 << 19]]);
        // The cold site: in tier 1 throughout, but not located in interval 1.
        p.sites[0].series.tier_bytes = Some(vec![vec![0, 90 << 20], vec![]]);
        let o = observed(&p).unwrap();
        assert_eq!(o.tiers, 2);
        assert_eq!(o.fast_bytes_peak, 10 << 20);
        assert!((o.fast_share_of_footprint - 0.1).abs() < 1e-12);
        // 45 + 45 / 4 of 100 accesses.
        assert!((o.share - 0.5625).abs() < 1e-12, "{}", o.share);
        // The cold site's 4.5 of interval 1 and the unknown site's 1 were not located.
        assert!((o.located_share - 0.945).abs() < 1e-12);
    }

    #[test]
    fn work_in_parallel_keeps_the_order() {
        let items: Vec<u32> = (0..37).collect();
        assert_eq!(
            in_parallel(&items, |&i| i * 2),
            (0..37).map(|i| i * 2).collect::<Vec<_>>()
        );
        assert!(in_parallel(&[] as &[u32], |&i| i).is_empty());
    }

    #[test]
    fn the_percents_run_from_1_to_100() {
        assert_eq!(CAPACITY_PERCENTS[0], 1);
        assert_eq!(CAPACITY_PERCENTS[99], 100);
    }
}
