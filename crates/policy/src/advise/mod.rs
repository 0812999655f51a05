//! Offline placement advice: which allocation sites go to which tier, computed once from a
//! profile of an earlier run (`objtier advise`), so that a later run's objects are born in
//! their tier and little has to move.
//!
//! The input is one [`SiteDemand`] per allocation site (what the profile measured: the bytes the
//! site needs at once, its accesses, loads and stores where the source told them apart, how
//! many objects it allocated, and the same per interval of the profile's [`Timeline`]), and the
//! tiers, fastest first, each with a capacity and load and store cost coefficients
//! ([`TierSpec`]). The output is an [`Advice`]: for every site, the tier its objects start in
//! and how many of its bytes that tier holds; a site whose bytes do not all fit there *spills*
//! the rest into the next slower tier (the library fills the site's budget in the tier first,
//! then places its further objects, or the tail of the object that crosses the budget, one
//! tier down).
//!
//! The algorithms (see [`Algorithm`]) come from the seeds:
//! - [`hotset`] (Effler et al. §3.1): sites by accesses per byte, each tier filled fastest
//!   first until it is crossed, the crossing site spilling (Moura et al. §7);
//! - [`knapsack`] (Effler et al. §3.1): a 0/1 knapsack per tier, fastest first, over the sites
//!   left, maximising accesses;
//! - [`multi_knapsack`] (ecoHMEM §IV-B, §V): the greedy relaxation of the 0/1 multiple knapsack,
//!   fastest tier first, a site's value its load and store misses weighted by the tiers' cost
//!   coefficients, per byte;
//! - [`bandwidth`] (ecoHMEM §VII, Algorithm 1): the multi-knapsack's placement, then sites
//!   re-classified by the slow tier's bandwidth at their allocation (Fitting, Streaming-D,
//!   Thrashing) and swapped.
//!
//! [`phases`] splits a profile's timeline into phases by the similarity of per-site access
//! vectors and gives each site a tier per phase (Effler et al. §3.2, per-phase arenas).
//!
//! Everything here is pure and deterministic: the same input gives the same advice (ties are
//! broken by site index), so placements are reproducible and unit-tested on hand-made sites
//! whose optimum is known.

mod algorithms;
mod occupancy;
pub mod phases;

pub use algorithms::{
    bandwidth, benefit, hotset, knapsack, knapsack_bucket_bytes, multi_knapsack, BandwidthParams,
};

/// One allocation site as the advisor sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SiteDemand {
    /// Bytes the site needs to hold all its live objects at once: its peak live bytes.
    pub bytes: u64,
    /// Accesses the profile attributed to the site's objects over the whole run, in the
    /// profile's unit (misses for sources that see misses). Loads plus stores where known.
    pub accesses: f64,
    /// Of `accesses`, the loads and the stores, where the source told them apart.
    pub loads: Option<f64>,
    /// See `loads`.
    pub stores: Option<f64>,
    /// Objects the site allocated over the run.
    pub allocations: u64,
    /// The same per interval of the timeline, for the intervals in which the site had live
    /// objects, accesses or allocations (others are all zero), in increasing interval order.
    pub series: Vec<IntervalDemand>,
}

/// One site in one interval of the timeline.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IntervalDemand {
    /// Index into [`Timeline::interval_seconds`].
    pub interval: usize,
    /// Peak bytes of the site's live objects during the interval.
    pub live_bytes: u64,
    /// The site's accesses in the interval, as [`SiteDemand::accesses`].
    pub accesses: f64,
    /// Of them, the loads, where told apart.
    pub loads: Option<f64>,
    /// Of them, the stores, where told apart.
    pub stores: Option<f64>,
    /// Objects the site allocated in the interval.
    pub allocations: u64,
}

impl SiteDemand {
    /// Accesses per byte (0 for a site of no bytes).
    pub fn accesses_per_byte(&self) -> f64 {
        if self.bytes == 0 {
            0.0
        } else {
            self.accesses / self.bytes as f64
        }
    }
}

/// The profile's intervals: how long each lasted, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    /// Each interval's duration in seconds, the profile's first interval first.
    pub interval_seconds: Vec<f64>,
}

/// One tier the advice fills, fastest first.
#[derive(Clone, Debug, PartialEq)]
pub struct TierSpec {
    /// Bytes of the program's objects the tier may hold (`u64::MAX`: unbounded, as the slowest
    /// tier usually is).
    pub capacity_bytes: u64,
    /// Cost of one load, and one store, served by this tier (relative units: only ratios
    /// between tiers matter; e.g. the tier's latency in ns).
    pub load_cost: f64,
    /// See `load_cost`.
    pub store_cost: f64,
}

/// Where one site's objects go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SitePlacement {
    /// The tier its objects start in.
    pub tier: usize,
    /// Bytes of the site `tier` holds: the site's `bytes` when all of it fits, less when it
    /// spills (the rest goes to `tier + 1`), never more.
    pub tier_bytes: u64,
}

/// An algorithm's answer: one [`SitePlacement`] per input site, in the input's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Advice {
    /// One placement per site, in the input's order.
    pub sites: Vec<SitePlacement>,
}

/// What a placement would give, per tier: judged against the profile it was computed from.
#[derive(Clone, Debug, PartialEq)]
pub struct TierOutcome {
    /// Bytes planned in the tier.
    pub bytes: u64,
    /// Accesses the tier would serve, and their share of all accesses (0 when there are none).
    pub accesses: f64,
    /// See `accesses`.
    pub share: f64,
}

/// The advise algorithms, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// [`hotset`]: by accesses per byte, the crossing site spilling.
    Hotset,
    /// [`knapsack`]: the most accesses per tier, whole sites.
    Knapsack,
    /// [`multi_knapsack`]: ecoHMEM's greedy, load and store costs weighed.
    MultiKnapsack,
    /// [`bandwidth`]: ecoHMEM's bandwidth-aware correction of the greedy.
    Bandwidth,
}

impl Algorithm {
    /// Every algorithm, in the order the CLI lists them.
    pub const ALL: [Algorithm; 4] = [
        Algorithm::Hotset,
        Algorithm::Knapsack,
        Algorithm::MultiKnapsack,
        Algorithm::Bandwidth,
    ];

    /// The name the CLI takes and prints (what [`FromStr`](std::str::FromStr) parses).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Hotset => "hotset",
            Algorithm::Knapsack => "knapsack",
            Algorithm::MultiKnapsack => "multi-knapsack",
            Algorithm::Bandwidth => "bandwidth",
        }
    }
}

impl std::str::FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown algorithm {s:?}: use hotset, knapsack, multi-knapsack or bandwidth"
                )
            })
    }
}

/// Runs `algorithm` with its default parameters.
pub fn advise(
    algorithm: Algorithm,
    sites: &[SiteDemand],
    tiers: &[TierSpec],
    timeline: &Timeline,
) -> Advice {
    match algorithm {
        Algorithm::Hotset => hotset(sites, tiers),
        Algorithm::Knapsack => knapsack(sites, tiers),
        Algorithm::MultiKnapsack => multi_knapsack(sites, tiers),
        Algorithm::Bandwidth => bandwidth(sites, tiers, timeline, &BandwidthParams::default()),
    }
}

/// Bytes and accesses each tier would hold under `advice`: a spilling site's accesses are
/// split between its tier and the next in proportion to its bytes in each. Byte sums saturate
/// at `u64::MAX`, and NaN, infinite or negative accesses count as 0, as in the algorithms.
pub fn evaluate(sites: &[SiteDemand], tiers: &[TierSpec], advice: &Advice) -> Vec<TierOutcome> {
    let mut out = vec![
        TierOutcome {
            bytes: 0,
            accesses: 0.0,
            share: 0.0,
        };
        tiers.len().max(1)
    ];
    let last = out.len() - 1;
    let mut total = 0.0;
    for (site, placement) in sites.iter().zip(&advice.sites) {
        let accesses = algorithms::count(site.accesses);
        total += accesses;
        let tier = placement.tier.min(last);
        let held = placement.tier_bytes.min(site.bytes);
        let fraction = if site.bytes == 0 {
            1.0
        } else {
            held as f64 / site.bytes as f64
        };
        out[tier].bytes = out[tier].bytes.saturating_add(held);
        out[tier].accesses += accesses * fraction;
        let next = (tier + 1).min(last);
        out[next].bytes = out[next].bytes.saturating_add(site.bytes - held);
        out[next].accesses += accesses * (1.0 - fraction);
    }
    for tier in &mut out {
        tier.share = if total > 0.0 {
            tier.accesses / total
        } else {
            0.0
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(bytes: u64, accesses: f64) -> SiteDemand {
        SiteDemand {
            bytes,
            accesses,
            ..SiteDemand::default()
        }
    }

    fn tiers() -> Vec<TierSpec> {
        let tier = |capacity_bytes, cost| TierSpec {
            capacity_bytes,
            load_cost: cost,
            store_cost: cost,
        };
        vec![tier(100, 1.0), tier(u64::MAX, 3.0)]
    }

    #[test]
    fn evaluate_splits_a_spilled_site_by_its_bytes() {
        let sites = [site(100, 30.0), site(50, 10.0)];
        let advice = Advice {
            sites: vec![
                SitePlacement {
                    tier: 0,
                    tier_bytes: 60,
                },
                SitePlacement {
                    tier: 1,
                    tier_bytes: 50,
                },
            ],
        };
        let outcome = evaluate(&sites, &tiers(), &advice);
        assert_eq!(outcome[0].bytes, 60);
        assert_eq!(outcome[1].bytes, 90);
        assert!((outcome[0].accesses - 18.0).abs() < 1e-9);
        assert!((outcome[1].share - 22.0 / 40.0).abs() < 1e-9);
    }

    #[test]
    fn evaluate_survives_huge_sites_and_bad_counts() {
        let sites = [site(u64::MAX, 1.0), site(u64::MAX, f64::NAN), site(1, -4.0)];
        let advice = Advice {
            sites: vec![
                SitePlacement {
                    tier: 1,
                    tier_bytes: u64::MAX,
                };
                3
            ],
        };
        let outcome = evaluate(&sites, &tiers(), &advice);
        assert_eq!(outcome[1].bytes, u64::MAX, "saturates");
        assert_eq!(outcome[1].accesses, 1.0);
        assert_eq!(outcome[1].share, 1.0);
        assert_eq!(outcome[0].share, 0.0);
    }
}
