//! The four placement algorithms behind [`advise`](super::advise), and what they share.
//!
//! Conventions common to all four, chosen so that no input makes them panic or overfill a tier:
//! - The tiers come fastest first; the slowest takes every site the faster ones do not, whatever
//!   its capacity says (objects have to go somewhere; it is usually `u64::MAX`). Every other
//!   tier's capacity is never exceeded, counting a spilled site's rest in the tier below.
//! - A site with no accesses goes to the slowest tier: a fast tier gains nothing from it, and the
//!   capacity it would take is better left to the objects the profile did not see.
//! - Accesses, loads and stores that are NaN, infinite or negative count as 0.
//! - With no tiers at all, every site goes whole to tier 0.
//! - Ties are broken by site index, so the same profile always gives the same advice.

use super::occupancy::Occupancy;
use super::{Advice, SiteDemand, SitePlacement, TierSpec, Timeline};

/// A measured count as the algorithms use it: NaN, infinite and negative counts are 0, so one
/// bad sample cannot poison a sum or a comparison.
pub(crate) fn count(measured: f64) -> f64 {
    if measured.is_finite() && measured > 0.0 {
        measured
    } else {
        0.0
    }
}

/// The tier that takes everything left (0 when there are no tiers).
fn slowest_tier(tiers: &[TierSpec]) -> usize {
    tiers.len().saturating_sub(1)
}

/// Every site whole in `tier`: the starting point each algorithm improves on.
fn all_whole_in(sites: &[SiteDemand], tier: usize) -> Vec<SitePlacement> {
    sites
        .iter()
        .map(|site| SitePlacement {
            tier,
            tier_bytes: site.bytes,
        })
        .collect()
}

/// A value per byte for ranking; a site of no bytes ranks first, as it costs no capacity.
fn per_byte(value: f64, bytes: u64) -> f64 {
    if bytes == 0 {
        f64::INFINITY
    } else {
        value / bytes as f64
    }
}

/// Sorts (site, value) pairs by value per byte of the site descending, ties by index.
fn by_density_descending(candidates: &mut [(usize, f64)], sites: &[SiteDemand]) {
    candidates.sort_by(|&(a, value_a), &(b, value_b)| {
        per_byte(value_b, sites[b].bytes)
            .total_cmp(&per_byte(value_a, sites[a].bytes))
            .then(a.cmp(&b))
    });
}

/// Effler et al.'s *hotset* (§3.1), with Moura et al.'s spill-over (§7): sites ranked by
/// accesses per byte, hottest first (ties by index), each put in the fastest tier with room;
/// the site that crosses a tier's capacity gets the part that fits (`tier_bytes < bytes`) and
/// its rest counts against the next tier, which the following sites then fill. Room is counted
/// per interval of the profile's timeline (`Occupancy`): sites live at different times share
/// it, where the paper's sum of peaks would keep all but one of them out.
///
/// Ranking by density but letting the crossing site spill is the paper's answer to knapsack's
/// weakness: a very hot site larger than the room left still gets the room, instead of the room
/// going to colder sites.
///
/// A site spills into one tier only (that is what a [`SitePlacement`] can say), so a site whose
/// rest would not fit the next tier either (when that one is not the slowest) is not split there:
/// it goes to the first later tier from which it fits whole or spills into the next, and the room
/// it left stays for the sites after it. With two tiers, or whenever every crossing site's rest
/// fits the next tier, this is exactly the paper's fill-until-crossed.
///
/// Sites with no accesses go to the slowest tier; sites of no bytes with accesses to tier 0.
pub fn hotset(sites: &[SiteDemand], tiers: &[TierSpec]) -> Advice {
    let slowest = slowest_tier(tiers);
    let mut placements = all_whole_in(sites, slowest);
    if slowest == 0 {
        return Advice { sites: placements };
    }
    let intervals = Occupancy::intervals_of(sites);
    let mut room: Vec<Occupancy> = tiers
        .iter()
        .map(|t| Occupancy::new(t.capacity_bytes, intervals))
        .collect();
    let mut ranked: Vec<(usize, f64)> = sites
        .iter()
        .enumerate()
        .map(|(i, site)| (i, count(site.accesses)))
        .filter(|&(_, accesses)| accesses > 0.0)
        .collect();
    by_density_descending(&mut ranked, sites);
    for (i, _) in ranked {
        let site = &sites[i];
        let bytes = site.bytes;
        for tier in 0..slowest {
            let held = room[tier].room_for(site, bytes);
            if held >= bytes {
                room[tier].take(site, bytes);
                placements[i] = SitePlacement {
                    tier,
                    tier_bytes: bytes,
                };
                break;
            }
            if held > 0 && (tier + 1 == slowest || room[tier + 1].room_for_rest(site, held)) {
                room[tier].take(site, held);
                room[tier + 1].take_rest(site, held);
                placements[i] = SitePlacement {
                    tier,
                    tier_bytes: held,
                };
                break;
            }
        }
    }
    Advice { sites: placements }
}

/// Most cells (candidates × capacity buckets) one tier's knapsack table holds: it bounds the
/// solver's time and its decision bits (8 MiB).
const KNAPSACK_CELLS: u64 = 1 << 26;
/// The finest scale a knapsack's capacity is divided into, in buckets.
const KNAPSACK_MAX_BUCKETS: u64 = 1 << 20;
/// The coarsest: even a tier contested by very many sites is scaled to this many buckets.
const KNAPSACK_MIN_BUCKETS: u64 = 1 << 10;

/// Bytes per bucket of the knapsack over `candidates` sites for a tier of `capacity_bytes`: 1
/// (exact) while the capacity has no more bytes than the table has buckets, and coarser beyond,
/// the table having 2^26 / `candidates` buckets, but at least 2^10 and at most 2^20 (so a tier
/// contested by 64 sites or fewer is scaled to 2^20 buckets, by 4096 sites to 2^14).
pub fn knapsack_bucket_bytes(candidates: usize, capacity_bytes: u64) -> u64 {
    let buckets = (KNAPSACK_CELLS / (candidates.max(1) as u64))
        .clamp(KNAPSACK_MIN_BUCKETS, KNAPSACK_MAX_BUCKETS);
    capacity_bytes.div_ceil(buckets).max(1)
}

/// Effler et al.'s *knapsack* (§3.1): per tier, fastest first, the set of sites not yet placed
/// that has the most accesses among those that fit the tier's capacity whole; the slowest tier
/// takes the rest. Whole sites only (`tier_bytes == bytes`); sites with no accesses never take
/// a fast tier, and sites of no bytes with accesses go to tier 0.
///
/// Each tier's 0/1 knapsack is solved by dynamic programming over its capacity divided into
/// buckets ([`knapsack_bucket_bytes`]: one byte each while the capacity is small, else at most
/// 2^20 buckets, fewer when thousands of sites compete). A site's size is rounded *up* to whole
/// buckets and the capacity *down*, so a solution of the table never exceeds the real capacity;
/// it is the exact optimum whenever the sizes are multiples of the bucket, and otherwise the
/// room the rounding wasted is filled afterwards with the densest sites that still fit whole.
/// Dynamic programming rather than branch and bound because its time is bounded by the table
/// (2^26 cells, about 0.1 s in a release build) whatever the profile: branch and bound is exponential when values grow
/// with sizes, as they do for arrays scanned in full, which profiles are full of.
pub fn knapsack(sites: &[SiteDemand], tiers: &[TierSpec]) -> Advice {
    let slowest = slowest_tier(tiers);
    let mut placements = all_whole_in(sites, slowest);
    if slowest == 0 {
        return Advice { sites: placements };
    }
    let mut unplaced: Vec<usize> = (0..sites.len())
        .filter(|&i| count(sites[i].accesses) > 0.0)
        .collect();
    for (tier, spec) in tiers.iter().enumerate().take(slowest) {
        let items: Vec<(u64, f64)> = unplaced
            .iter()
            .map(|&i| (sites[i].bytes, count(sites[i].accesses)))
            .collect();
        let taken = most_valuable_subset(&items, spec.capacity_bytes);
        let mut left = Vec::with_capacity(unplaced.len());
        for (i, taken) in unplaced.into_iter().zip(taken) {
            if taken {
                placements[i] = SitePlacement {
                    tier,
                    tier_bytes: sites[i].bytes,
                };
            } else {
                left.push(i);
            }
        }
        unplaced = left;
    }
    Advice { sites: placements }
}

/// The 0/1 knapsack: which of `items` (bytes, value) to take for the most value within
/// `capacity_bytes`. Items of no value are never taken; items of no bytes always are.
fn most_valuable_subset(items: &[(u64, f64)], capacity_bytes: u64) -> Vec<bool> {
    let mut taken = vec![false; items.len()];
    let candidates: Vec<usize> = (0..items.len())
        .filter(|&i| items[i].1 > 0.0 && items[i].0 <= capacity_bytes)
        .collect();
    // A total past u64::MAX does not fit any capacity.
    let total_bytes = candidates
        .iter()
        .try_fold(0u64, |sum, &i| sum.checked_add(items[i].0));
    if total_bytes.is_some_and(|total| total <= capacity_bytes) {
        for &i in &candidates {
            taken[i] = true;
        }
        return taken;
    }
    // All the candidates do not fit, so the capacity is below their total and the table
    // spans the capacity itself.
    let bucket_bytes = knapsack_bucket_bytes(candidates.len(), capacity_bytes);
    let buckets = usize::try_from(capacity_bytes / bucket_bytes).unwrap_or(usize::MAX);
    let weights: Vec<usize> = candidates
        .iter()
        .map(|&i| usize::try_from(items[i].0.div_ceil(bucket_bytes)).unwrap_or(usize::MAX))
        .collect();
    // best_value[c]: the most value within c buckets over the rows so far; a set bit
    // (row, c) says row's item is in that best set, which is all the backtrack needs.
    let mut best_value = vec![0.0f64; buckets + 1];
    let words_per_row = (buckets + 1).div_ceil(64);
    let mut decision = vec![0u64; words_per_row * candidates.len()];
    for (row, (&i, &weight)) in candidates.iter().zip(&weights).enumerate() {
        if weight > buckets {
            continue;
        }
        let value = items[i].1;
        let bits = &mut decision[row * words_per_row..(row + 1) * words_per_row];
        for c in (weight..=buckets).rev() {
            let with = best_value[c - weight] + value;
            if with > best_value[c] {
                best_value[c] = with;
                bits[c / 64] |= 1 << (c % 64);
            }
        }
    }
    let mut c = buckets;
    for row in (0..candidates.len()).rev() {
        if decision[row * words_per_row + c / 64] & (1 << (c % 64)) != 0 {
            taken[candidates[row]] = true;
            c -= weights[row];
        }
    }
    // The rounding may have left real bytes unused: give them to the densest items that fit.
    let mut used_bytes: u64 = candidates
        .iter()
        .filter(|&&i| taken[i])
        .fold(0, |sum, &i| sum.saturating_add(items[i].0));
    let mut rest: Vec<usize> = candidates.iter().copied().filter(|&i| !taken[i]).collect();
    rest.sort_by(|&a, &b| {
        per_byte(items[b].1, items[b].0)
            .total_cmp(&per_byte(items[a].1, items[a].0))
            .then(a.cmp(&b))
    });
    for i in rest {
        if items[i].0 <= capacity_bytes.saturating_sub(used_bytes) {
            taken[i] = true;
            used_bytes += items[i].0;
        }
    }
    taken
}

/// What placing `site` in `tier` instead of `slowest` saves: its loads and stores weighted by
/// the tiers' cost differences, or, where the profile did not tell loads from stores, all its
/// accesses weighted as loads (ecoHMEM §IV-B, §V). Never NaN.
pub fn benefit(site: &SiteDemand, tier: &TierSpec, slowest: &TierSpec) -> f64 {
    let gain = |slow: f64, fast: f64| {
        let saved = slow - fast;
        if saved.is_finite() {
            saved
        } else {
            0.0
        }
    };
    let load_gain = gain(slowest.load_cost, tier.load_cost);
    let store_gain = gain(slowest.store_cost, tier.store_cost);
    let value = match (site.loads, site.stores) {
        (Some(loads), Some(stores)) => count(loads) * load_gain + count(stores) * store_gain,
        _ => count(site.accesses) * load_gain,
    };
    if value.is_nan() {
        0.0
    } else {
        value
    }
}

/// ecoHMEM's base algorithm (§IV-B, §V): the greedy relaxation of the 0/1 multiple knapsack.
/// For each tier, fastest first, but the slowest: the sites not yet placed, by [`benefit`] per
/// byte descending (ties by index), each taken whole if it fits the room left (one that does not
/// is skipped and smaller ones still tried). The slowest tier takes the rest. Sites with no
/// accesses, or no benefit from the tier, are not taken.
///
/// Unlike [`knapsack`] it weighs stores apart from loads (a slow tier's writes cost more than
/// its reads on PMEM), and it is greedy: fast, but not always the optimum. As [`hotset`], it
/// counts room per interval (`Occupancy`), so sites live at different times share it.
pub fn multi_knapsack(sites: &[SiteDemand], tiers: &[TierSpec]) -> Advice {
    greedy_multi_knapsack(sites, tiers, Occupancy::intervals_of(sites))
}

/// [`multi_knapsack`] over a timeline of `intervals` intervals; with none, every site counts
/// its peak throughout (the paper's sums of peaks, which [`bandwidth`] builds on: its swaps
/// trade whole sites' bytes).
fn greedy_multi_knapsack(sites: &[SiteDemand], tiers: &[TierSpec], intervals: usize) -> Advice {
    let slowest = slowest_tier(tiers);
    let mut placements = all_whole_in(sites, slowest);
    let Some(slowest_spec) = tiers.last() else {
        return Advice { sites: placements };
    };
    let mut placed = vec![false; sites.len()];
    for (tier, spec) in tiers.iter().enumerate().take(slowest) {
        let mut candidates: Vec<(usize, f64)> = (0..sites.len())
            .filter(|&i| !placed[i] && count(sites[i].accesses) > 0.0)
            .map(|i| (i, benefit(&sites[i], spec, slowest_spec)))
            .filter(|&(_, value)| value > 0.0)
            .collect();
        by_density_descending(&mut candidates, sites);
        let mut room = Occupancy::new(spec.capacity_bytes, intervals);
        for (i, _) in candidates {
            // Without a timeline every site is "always" live: its peak counts throughout.
            let site = if intervals == 0 {
                &SiteDemand {
                    series: Vec::new(),
                    ..sites[i].clone()
                }
            } else {
                &sites[i]
            };
            if room.room_for(site, site.bytes) >= site.bytes {
                room.take(site, site.bytes);
                placed[i] = true;
                placements[i] = SitePlacement {
                    tier,
                    tier_bytes: sites[i].bytes,
                };
            }
        }
    }
    Advice { sites: placements }
}

/// The thresholds of ecoHMEM's bandwidth-aware placement (§VII, Table IV), with the paper's
/// values as defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BandwidthParams {
    /// `T_ALLOC`: a site allocating fewer objects than this is long-lived (a Fitting candidate),
    /// one allocating more is short-lived (Streaming-D or Thrashing).
    pub t_alloc: u64,
    /// `T_PMEMLOW`: below this share of the slow tier's peak bandwidth, the slow tier is idle
    /// enough at a site's allocations for the site to live there.
    pub low_share: f64,
    /// `T_PMEMHIGH`: above this share, a slow site allocating then is thrashing the slow tier.
    pub high_share: f64,
}

impl Default for BandwidthParams {
    fn default() -> Self {
        BandwidthParams {
            t_alloc: 2,
            low_share: 0.2,
            high_share: 0.4,
        }
    }
}

/// How Table IV classifies a site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// Fast, long-lived, allocated while the slow tier was idle: may give its room away.
    Fitting,
    /// Fast, short-lived, never written, allocated while the slow tier was idle: moves out.
    StreamingD,
    /// Slow, short-lived, allocated while the slow tier was busy: wants to move in.
    Thrashing,
    Other,
}

/// ecoHMEM's bandwidth-aware placement (§VII, Algorithm 1): [`multi_knapsack`]'s placement
/// (with sums of peaks, as the paper's: the swaps below trade whole sites' bytes), corrected
/// where the slow tier's bandwidth, not its latency, is what hurts.
///
/// The slow tier's demand in each interval is the accesses of the sites placed there (a spilled
/// site's in proportion to its bytes there) per second, and a site's *bandwidth at allocation*
/// the most of that demand, as a share of its peak, over the intervals in which the site
/// allocated (a site that allocated in no interval of its series is not classified). By Table
/// IV, against [`BandwidthParams`]:
/// - *Fitting*: a fast site with fewer than `t_alloc` allocations, at below `low_share`;
/// - *Streaming-D*: a fast site with no stores (`stores == Some(0)`: unknown stores are not
///   none), more than `t_alloc` allocations, at below `low_share`;
/// - *Thrashing*: a slow site with accesses, more than `t_alloc` allocations, at above
///   `high_share`.
///
/// Then every Streaming-D site moves to the slow tier, and each Thrashing site, by its own
/// bandwidth (accesses per second of its lifetime, the intervals in which it had live bytes)
/// descending, then by its first allocation's interval, moves to the fastest tier with room for
/// it whole (the room the Streaming-D sites left, or any left before), or failing that swaps
/// with the smallest Fitting site at least its size. No tier's capacity is ever exceeded.
///
/// The paper has two tiers, DRAM and PMEM. With more, "fast" is every tier but the slowest and
/// "slow" is the slowest: the boundary that bandwidth crosses is the one to the tier of least
/// bandwidth, and a swap keeps the Fitting site's tier for the Thrashing one.
pub fn bandwidth(
    sites: &[SiteDemand],
    tiers: &[TierSpec],
    timeline: &Timeline,
    params: &BandwidthParams,
) -> Advice {
    let mut advice = greedy_multi_knapsack(sites, tiers, 0);
    let slowest = slowest_tier(tiers);
    if slowest == 0 {
        return advice;
    }
    let demand = slow_demand_per_second(sites, &advice, slowest, timeline);
    let peak = demand.iter().copied().fold(0.0, f64::max);
    let classes: Vec<Class> = sites
        .iter()
        .zip(&advice.sites)
        .map(|(site, placement)| {
            let fast = placement.tier < slowest;
            let Some(at_allocation) = share_at_allocation(site, &demand, peak) else {
                return Class::Other;
            };
            let short_lived = site.allocations > params.t_alloc;
            let no_stores = site.stores.is_some_and(|stores| count(stores) == 0.0);
            if fast && site.allocations < params.t_alloc && at_allocation < params.low_share {
                Class::Fitting
            } else if fast && no_stores && short_lived && at_allocation < params.low_share {
                Class::StreamingD
            } else if !fast
                && short_lived
                && count(site.accesses) > 0.0
                && at_allocation > params.high_share
            {
                Class::Thrashing
            } else {
                Class::Other
            }
        })
        .collect();

    let mut free_bytes = free_bytes(sites, tiers, &advice);
    let whole = |site: &SiteDemand, tier| SitePlacement {
        tier,
        tier_bytes: site.bytes,
    };
    for (i, site) in sites.iter().enumerate() {
        if classes[i] == Class::StreamingD {
            let tier = advice.sites[i].tier;
            free_bytes[tier] = free_bytes[tier].saturating_add(site.bytes);
            advice.sites[i] = whole(site, slowest);
        }
    }
    let mut fitting: Vec<usize> = (0..sites.len())
        .filter(|&i| classes[i] == Class::Fitting)
        .collect();
    let mut thrashing: Vec<(usize, f64, usize)> = (0..sites.len())
        .filter(|&i| classes[i] == Class::Thrashing)
        .map(|i| {
            let first_allocation = sites[i]
                .series
                .iter()
                .filter(|e| e.allocations > 0)
                .map(|e| e.interval)
                .min()
                .unwrap_or(usize::MAX);
            (i, own_bandwidth(&sites[i], timeline), first_allocation)
        })
        .collect();
    thrashing.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)).then(a.0.cmp(&b.0)));
    for (i, _, _) in thrashing {
        let bytes = sites[i].bytes;
        if let Some(tier) = (0..slowest).find(|&t| free_bytes[t] >= bytes) {
            free_bytes[tier] -= bytes;
            advice.sites[i] = whole(&sites[i], tier);
            continue;
        }
        let smallest_fitting = fitting
            .iter()
            .enumerate()
            .filter(|&(_, &j)| sites[j].bytes >= bytes)
            .min_by_key(|&(_, &j)| (sites[j].bytes, j))
            .map(|(position, &j)| (position, j));
        if let Some((position, j)) = smallest_fitting {
            fitting.remove(position);
            let tier = advice.sites[j].tier;
            free_bytes[tier] = free_bytes[tier].saturating_add(sites[j].bytes - bytes);
            advice.sites[i] = whole(&sites[i], tier);
            advice.sites[j] = whole(&sites[j], slowest);
        }
    }
    advice
}

/// The share of a site's bytes that `placement` puts in the slowest tier.
fn slow_fraction(site: &SiteDemand, placement: &SitePlacement, slowest: usize) -> f64 {
    if placement.tier >= slowest {
        1.0
    } else if placement.tier + 1 == slowest && placement.tier_bytes < site.bytes {
        (site.bytes - placement.tier_bytes) as f64 / site.bytes as f64
    } else {
        0.0
    }
}

/// Accesses per second the slowest tier serves in each interval of `timeline` under `advice`
/// (0 in an interval of no positive duration, where no rate can be told).
fn slow_demand_per_second(
    sites: &[SiteDemand],
    advice: &Advice,
    slowest: usize,
    timeline: &Timeline,
) -> Vec<f64> {
    let mut accesses = vec![0.0; timeline.interval_seconds.len()];
    for (site, placement) in sites.iter().zip(&advice.sites) {
        let fraction = slow_fraction(site, placement, slowest);
        if fraction == 0.0 {
            continue;
        }
        for entry in &site.series {
            if let Some(sum) = accesses.get_mut(entry.interval) {
                *sum += count(entry.accesses) * fraction;
            }
        }
    }
    accesses
        .iter()
        .zip(&timeline.interval_seconds)
        .map(|(&accesses, &seconds)| {
            let seconds = count(seconds);
            if seconds > 0.0 {
                accesses / seconds
            } else {
                0.0
            }
        })
        .collect()
}

/// A site's bandwidth at allocation: the slow tier's demand as a share of `peak`, the most over
/// the intervals in which the site allocated (None if it allocated in none of its series).
fn share_at_allocation(site: &SiteDemand, demand: &[f64], peak: f64) -> Option<f64> {
    let mut allocating = site.series.iter().filter(|e| e.allocations > 0).peekable();
    allocating.peek()?;
    let most = allocating
        .map(|e| demand.get(e.interval).copied().unwrap_or(0.0))
        .fold(0.0, f64::max);
    Some(if peak > 0.0 { most / peak } else { 0.0 })
}

/// A site's own bandwidth: its accesses per second of its lifetime (the summed durations of the
/// intervals in which it had live bytes), 0 for a site that never lived.
fn own_bandwidth(site: &SiteDemand, timeline: &Timeline) -> f64 {
    let lifetime_seconds: f64 = site
        .series
        .iter()
        .filter(|e| e.live_bytes > 0)
        .map(|e| {
            count(
                timeline
                    .interval_seconds
                    .get(e.interval)
                    .copied()
                    .unwrap_or(0.0),
            )
        })
        .sum();
    if lifetime_seconds > 0.0 {
        count(site.accesses) / lifetime_seconds
    } else {
        0.0
    }
}

/// Room left in each tier under `advice` (a spilled site's rest counted in the tier below); the
/// slowest tier's entry is never used.
fn free_bytes(sites: &[SiteDemand], tiers: &[TierSpec], advice: &Advice) -> Vec<u64> {
    let mut free: Vec<u64> = tiers.iter().map(|t| t.capacity_bytes).collect();
    for (site, placement) in sites.iter().zip(&advice.sites) {
        let held = placement.tier_bytes.min(site.bytes);
        if let Some(room) = free.get_mut(placement.tier) {
            *room = room.saturating_sub(held);
        }
        if let Some(room) = free.get_mut(placement.tier + 1) {
            *room = room.saturating_sub(site.bytes - held);
        }
    }
    free
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::{advise, evaluate, Algorithm, IntervalDemand};
    use crate::test_support::xorshift;

    fn site(bytes: u64, accesses: f64) -> SiteDemand {
        SiteDemand {
            bytes,
            accesses,
            ..SiteDemand::default()
        }
    }

    fn tier(capacity_bytes: u64, cost: f64) -> TierSpec {
        TierSpec {
            capacity_bytes,
            load_cost: cost,
            store_cost: cost,
        }
    }

    /// A fast tier of `fast_bytes` over an unbounded slow one of three times the cost.
    fn two_tiers(fast_bytes: u64) -> Vec<TierSpec> {
        vec![tier(fast_bytes, 1.0), tier(u64::MAX, 3.0)]
    }

    fn whole(tier: usize, tier_bytes: u64) -> SitePlacement {
        SitePlacement { tier, tier_bytes }
    }

    fn tiers_of(advice: &Advice) -> Vec<usize> {
        advice.sites.iter().map(|p| p.tier).collect()
    }

    const WHOLE_SITE: [Algorithm; 3] = [
        Algorithm::Knapsack,
        Algorithm::MultiKnapsack,
        Algorithm::Bandwidth,
    ];

    #[test]
    fn knapsack_finds_the_optimum_where_density_order_does_not() {
        // A is the densest, but B and C together hold more accesses in the 10 bytes.
        let sites = [site(6, 60.0), site(5, 45.0), site(5, 45.0)];
        let tiers = two_tiers(10);
        assert_eq!(tiers_of(&knapsack(&sites, &tiers)), [1, 0, 0]);
        assert_eq!(
            evaluate(&sites, &tiers, &knapsack(&sites, &tiers))[0].accesses,
            90.0
        );
        assert_eq!(
            tiers_of(&multi_knapsack(&sites, &tiers)),
            [0, 1, 1],
            "greedy takes A, then neither B nor C fits"
        );
        assert_eq!(
            hotset(&sites, &tiers).sites,
            [whole(0, 6), whole(0, 4), whole(1, 5)],
            "hotset: A whole, B crosses with 4 of its 5 bytes, C below"
        );
    }

    #[test]
    fn hotset_spills_the_crossing_site_and_fills_the_next_tier_with_its_rest() {
        let tiers = vec![tier(100, 1.0), tier(50, 2.0), tier(u64::MAX, 3.0)];
        // Accesses per byte: 10, 5, 4, 2.
        let sites = [
            site(80, 800.0),
            site(60, 300.0),
            site(40, 160.0),
            site(30, 60.0),
        ];
        let advice = hotset(&sites, &tiers);
        assert_eq!(
            advice.sites,
            [whole(0, 80), whole(0, 20), whole(1, 10), whole(2, 30)],
            "the second site's rest (40) leaves 10 of tier 1 for the third, whose rest (30) \
             goes to the slowest tier"
        );
        let bytes: Vec<u64> = evaluate(&sites, &tiers, &advice)
            .iter()
            .map(|t| t.bytes)
            .collect();
        assert_eq!(bytes, [100, 50, 60]);
    }

    #[test]
    fn three_tiers_are_filled_fastest_first_by_the_whole_site_algorithms() {
        let tiers = vec![tier(100, 1.0), tier(100, 2.0), tier(u64::MAX, 3.0)];
        let sites = [
            site(100, 1000.0),
            site(100, 500.0),
            site(100, 100.0),
            site(50, 1.0),
        ];
        for algorithm in WHOLE_SITE {
            let advice = advise(algorithm, &sites, &tiers, &Timeline::default());
            assert_eq!(tiers_of(&advice), [0, 1, 2, 2], "{}", algorithm.name());
        }
        assert_eq!(tiers_of(&hotset(&sites, &tiers)), [0, 1, 2, 2]);
    }

    #[test]
    fn a_tier_of_no_capacity_takes_only_sites_of_no_bytes() {
        let tiers = two_tiers(0);
        let sites = [site(10, 100.0), site(0, 5.0), site(0, 0.0)];
        for algorithm in Algorithm::ALL {
            let advice = advise(algorithm, &sites, &tiers, &Timeline::default());
            assert_eq!(tiers_of(&advice), [1, 0, 1], "{}", algorithm.name());
            assert_eq!(advice.sites[0].tier_bytes, 10, "{}", algorithm.name());
        }
    }

    #[test]
    fn sites_without_accesses_stay_in_the_slowest_tier() {
        let tiers = two_tiers(1000);
        let sites = [
            site(10, 0.0),
            site(0, 0.0),
            site(10, f64::NAN),
            site(10, -5.0),
        ];
        for algorithm in Algorithm::ALL {
            let advice = advise(algorithm, &sites, &tiers, &Timeline::default());
            assert_eq!(tiers_of(&advice), [1, 1, 1, 1], "{}", algorithm.name());
        }
    }

    #[test]
    fn a_site_larger_than_every_tier() {
        // Even the slowest tier is too small: it takes what is left all the same.
        let tiers = vec![tier(10, 1.0), tier(20, 2.0), tier(30, 3.0)];
        let sites = [site(100, 1000.0), site(5, 10.0)];
        assert_eq!(
            hotset(&sites, &tiers).sites,
            [whole(1, 20), whole(0, 5)],
            "its rest past tier 0 would not fit tier 1, so it spills from tier 1, and tier 0 \
             goes to the next site"
        );
        for algorithm in WHOLE_SITE {
            let advice = advise(algorithm, &sites, &tiers, &Timeline::default());
            assert_eq!(
                advice.sites,
                [whole(2, 100), whole(0, 5)],
                "{}",
                algorithm.name()
            );
        }
        let two = two_tiers(10);
        assert_eq!(hotset(&sites, &two).sites, [whole(0, 10), whole(1, 5)]);
    }

    #[test]
    fn capacities_of_u64_max_do_not_overflow() {
        let half = u64::MAX / 2;
        let tiers = vec![tier(u64::MAX, 1.0), tier(u64::MAX, 3.0)];
        let sites = [site(half, 3.0), site(half, 2.0), site(half, 1.0)];
        assert_eq!(
            hotset(&sites, &tiers).sites,
            [whole(0, half), whole(0, half), whole(0, 1)]
        );
        for algorithm in WHOLE_SITE {
            let advice = advise(algorithm, &sites, &tiers, &Timeline::default());
            assert_eq!(tiers_of(&advice), [0, 0, 1], "{}", algorithm.name());
        }
        let outcome = evaluate(&sites, &tiers, &hotset(&sites, &tiers));
        assert_eq!(outcome[0].bytes, u64::MAX);
    }

    #[test]
    fn ties_go_to_the_lower_index() {
        let tiers = two_tiers(10);
        let sites = [site(10, 50.0), site(10, 50.0), site(10, 50.0)];
        for algorithm in Algorithm::ALL {
            let first = advise(algorithm, &sites, &tiers, &Timeline::default());
            assert_eq!(tiers_of(&first), [0, 1, 1], "{}", algorithm.name());
            assert_eq!(
                first,
                advise(algorithm, &sites, &tiers, &Timeline::default())
            );
        }
    }

    #[test]
    fn no_tiers_or_one_tier_put_everything_in_tier_0() {
        let sites = [site(10, 5.0), site(0, 0.0)];
        for tiers in [vec![], vec![tier(1, 1.0)]] {
            for algorithm in Algorithm::ALL {
                let advice = advise(algorithm, &sites, &tiers, &Timeline::default());
                assert_eq!(
                    advice.sites,
                    [whole(0, 10), whole(0, 0)],
                    "{}",
                    algorithm.name()
                );
            }
        }
        for algorithm in Algorithm::ALL {
            let advice = advise(algorithm, &[], &two_tiers(10), &Timeline::default());
            assert!(advice.sites.is_empty());
        }
    }

    #[test]
    fn multi_knapsack_weighs_stores_by_their_cost() {
        // Same accesses, same size; the slow tier's stores cost 10 times its loads' gap.
        let tiers = vec![
            TierSpec {
                capacity_bytes: 10,
                load_cost: 1.0,
                store_cost: 1.0,
            },
            TierSpec {
                capacity_bytes: u64::MAX,
                load_cost: 2.0,
                store_cost: 11.0,
            },
        ];
        let reader = SiteDemand {
            loads: Some(100.0),
            stores: Some(0.0),
            ..site(10, 100.0)
        };
        let writer = SiteDemand {
            loads: Some(50.0),
            stores: Some(50.0),
            ..site(10, 100.0)
        };
        let advice = multi_knapsack(&[reader.clone(), writer.clone()], &tiers);
        assert_eq!(tiers_of(&advice), [1, 0]);
        assert_eq!(benefit(&writer, &tiers[0], &tiers[1]), 550.0);
        assert_eq!(
            benefit(&site(10, 100.0), &tiers[0], &tiers[1]),
            100.0,
            "unknown loads and stores: all accesses weighted as loads"
        );
    }

    /// Series entries over `intervals`, each with `live_bytes` live and `accesses` and
    /// `allocations` each.
    fn series(
        intervals: std::ops::Range<usize>,
        live_bytes: u64,
        accesses: f64,
        allocations: u64,
    ) -> Vec<IntervalDemand> {
        intervals
            .map(|interval| IntervalDemand {
                interval,
                live_bytes,
                accesses,
                allocations,
                ..IntervalDemand::default()
            })
            .collect()
    }

    /// A long-lived site allocated once in interval 0 and accessed throughout 10 intervals.
    fn long_lived(bytes: u64, accesses_per_interval: f64) -> SiteDemand {
        let mut series = series(0..10, bytes, accesses_per_interval, 0);
        series[0].allocations = 1;
        SiteDemand {
            bytes,
            accesses: accesses_per_interval * 10.0,
            allocations: 1,
            series,
            ..SiteDemand::default()
        }
    }

    /// A site allocating 10 objects over `intervals` (5 of them), `accesses` in each.
    fn short_lived(
        bytes: u64,
        intervals: std::ops::Range<usize>,
        accesses: f64,
        stores: Option<f64>,
    ) -> SiteDemand {
        let series = series(
            intervals.clone(),
            bytes,
            accesses,
            10 / intervals.len() as u64,
        );
        let total = accesses * intervals.len() as f64;
        SiteDemand {
            bytes,
            accesses: total,
            loads: stores.map(|_| total),
            stores,
            allocations: 10,
            series,
        }
    }

    fn ten_seconds() -> Timeline {
        Timeline {
            interval_seconds: vec![1.0; 10],
        }
    }

    /// hpcc's RandomAccess variants: three 16-byte tables, each live while the one before is
    /// not, and a 4-byte buffer live throughout. Over the timeline all fit a tier of 18 with
    /// the buffer spilling what meets a table, where sums of peaks would keep two tables out.
    #[test]
    fn sites_live_at_different_times_share_the_fast_tier() {
        let table = |intervals: std::ops::Range<usize>, accesses| SiteDemand {
            bytes: 16,
            accesses,
            allocations: 1,
            series: series(intervals, 16, accesses, 1),
            ..SiteDemand::default()
        };
        let sites = [
            table(0..2, 300.0),
            table(2..4, 200.0),
            table(4..6, 100.0),
            SiteDemand {
                bytes: 4,
                accesses: 12.0,
                allocations: 1,
                series: series(0..6, 4, 2.0, 1),
                ..SiteDemand::default()
            },
        ];
        let tiers = two_tiers(18);
        let hotset = hotset(&sites, &tiers);
        assert_eq!(
            hotset.sites,
            [whole(0, 16), whole(0, 16), whole(0, 16), whole(0, 2)],
            "every table fast in its turn; the buffer gets what the tables leave"
        );
        assert_eq!(
            tiers_of(&multi_knapsack(&sites, &tiers)),
            [0, 0, 0, 1],
            "whole sites: the buffer meets every table"
        );
        assert_eq!(
            tiers_of(&knapsack(&sites, &tiers)),
            [0, 1, 1, 1],
            "knapsack sums peaks: one table"
        );
    }

    #[test]
    fn bandwidth_moves_streaming_out_and_thrashing_in_by_room_then_by_swap() {
        let tiers = two_tiers(200);
        let sites = [
            long_lived(60, 600.0),                    // Fitting
            long_lived(80, 800.0),                    // Fitting
            short_lived(40, 0..2, 2000.0, Some(0.0)), // Streaming-D: no stores
            short_lived(50, 5..10, 100.0, None),      // Thrashing, 100 accesses/s
            short_lived(30, 5..10, 120.0, None),      // Thrashing, 120 accesses/s
        ];
        assert_eq!(
            tiers_of(&greedy_multi_knapsack(&sites, &tiers, 0)),
            [0, 0, 0, 1, 1],
            "the two short-lived ones are the least dense and do not fit the 20 bytes left"
        );
        assert_eq!(
            tiers_of(&multi_knapsack(&sites, &tiers)),
            [0, 0, 0, 1, 0],
            "over the timeline the 30-byte one fits: it is live when the Streaming-D one is not"
        );
        let advice = bandwidth(&sites, &tiers, &ten_seconds(), &BandwidthParams::default());
        // The 30-byte Thrashing site (the busier) takes the room the Streaming-D one left; the
        // 50-byte one then swaps with the smaller Fitting site of at least 50 bytes, the 60.
        assert_eq!(tiers_of(&advice), [1, 0, 1, 0, 0]);
        assert_eq!(evaluate(&sites, &tiers, &advice)[0].bytes, 160);
    }

    #[test]
    fn bandwidth_keeps_a_thrashing_site_out_when_nothing_can_make_room() {
        let tiers = two_tiers(200);
        let thrashing = short_lived(100, 5..10, 100.0, None);
        // Unknown stores: not Streaming-D, so nothing moves out; no Fitting site holds 100.
        let unknown_stores = [
            long_lived(60, 600.0),
            long_lived(80, 800.0),
            short_lived(40, 0..2, 2000.0, None),
            thrashing.clone(),
        ];
        let advice = bandwidth(
            &unknown_stores,
            &tiers,
            &ten_seconds(),
            &BandwidthParams::default(),
        );
        assert_eq!(advice, multi_knapsack(&unknown_stores, &tiers));
        assert_eq!(tiers_of(&advice), [0, 0, 0, 1]);
        // No stores: it moves out, but the 60 bytes it leaves still do not hold 100.
        let no_stores = [
            long_lived(60, 600.0),
            long_lived(80, 800.0),
            short_lived(40, 0..2, 2000.0, Some(0.0)),
            thrashing,
        ];
        let advice = bandwidth(
            &no_stores,
            &tiers,
            &ten_seconds(),
            &BandwidthParams::default(),
        );
        assert_eq!(tiers_of(&advice), [0, 0, 1, 1]);
    }

    #[test]
    fn bandwidth_leaves_sites_allocated_t_alloc_times_unclassified() {
        let tiers = two_tiers(200);
        let mut streaming = short_lived(40, 0..2, 2000.0, Some(0.0));
        streaming.allocations = 2;
        let sites = [long_lived(60, 600.0), long_lived(80, 800.0), streaming];
        let advice = bandwidth(&sites, &tiers, &ten_seconds(), &BandwidthParams::default());
        assert_eq!(tiers_of(&advice), [0, 0, 0]);
    }

    /// The most accesses any set of whole `sites` holds within `capacity_bytes`, by trying
    /// every set.
    fn brute_force_best(sites: &[SiteDemand], capacity_bytes: u64) -> f64 {
        let mut best = 0.0f64;
        for set in 0u32..1 << sites.len() {
            let (mut bytes, mut accesses) = (0u64, 0.0);
            for (i, s) in sites.iter().enumerate() {
                if set & (1 << i) != 0 {
                    bytes += s.bytes;
                    accesses += count(s.accesses);
                }
            }
            if bytes <= capacity_bytes {
                best = best.max(accesses);
            }
        }
        best
    }

    /// A random profile of up to `max_sites` sites over 8 intervals: sizes below `max_bytes`
    /// (some 0), integer accesses (some 0, NaN or negative), loads and stores sometimes told.
    fn random_sites(
        next: &mut impl FnMut() -> u64,
        max_sites: u64,
        max_bytes: u64,
    ) -> Vec<SiteDemand> {
        let site_count = next() % (max_sites + 1);
        (0..site_count)
            .map(|_| {
                let bytes = if next().is_multiple_of(8) {
                    0
                } else {
                    next() % max_bytes
                };
                let accesses = match next() % 10 {
                    0 => 0.0,
                    1 => f64::NAN,
                    2 => -3.0,
                    _ => (next() % 1000) as f64,
                };
                let (loads, stores) = match next() % 3 {
                    0 => (None, None),
                    1 => (
                        Some(count_half(accesses)),
                        Some(count(accesses) - count_half(accesses)),
                    ),
                    _ => (Some(count(accesses)), Some(0.0)),
                };
                let first = (next() % 8) as usize;
                let last = first + (next() % (8 - first as u64)) as usize;
                let allocations = next() % 6;
                let per_interval = count(accesses) / (last - first + 1) as f64;
                let mut series = series(first..last + 1, bytes, per_interval, 0);
                series[0].allocations = allocations;
                SiteDemand {
                    bytes,
                    accesses,
                    loads,
                    stores,
                    allocations,
                    series,
                }
            })
            .collect()
    }

    /// The most bytes `tier` holds in any interval under `advice`: its sites' (at most their
    /// `tier_bytes` each), and the rests of the sites above that spilled into it (sites without
    /// a series hold theirs throughout).
    fn busiest_interval(sites: &[SiteDemand], advice: &Advice, tier: usize) -> u64 {
        let intervals = Occupancy::intervals_of(sites).max(1);
        let held = |s: &SiteDemand, i: usize, part: &dyn Fn(u64) -> u64| -> u64 {
            if s.series.is_empty() {
                part(s.bytes)
            } else {
                s.series
                    .iter()
                    .filter(|r| r.interval == i)
                    .map(|r| part(r.live_bytes))
                    .sum()
            }
        };
        (0..intervals)
            .map(|i| {
                sites
                    .iter()
                    .zip(&advice.sites)
                    .map(|(s, p)| {
                        if p.tier == tier {
                            held(s, i, &|live| live.min(p.tier_bytes))
                        } else if p.tier + 1 == tier && p.tier_bytes < s.bytes {
                            held(s, i, &|live| live.saturating_sub(p.tier_bytes))
                        } else {
                            0
                        }
                    })
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0)
    }

    fn count_half(accesses: f64) -> f64 {
        (count(accesses) / 2.0).floor()
    }

    /// One to three tiers (rarely none) of random capacities below `max_bytes`, the slowest
    /// unbounded, costs rising.
    fn random_tiers(next: &mut impl FnMut() -> u64, max_bytes: u64) -> Vec<TierSpec> {
        let tier_count = if next().is_multiple_of(20) {
            0
        } else {
            1 + next() % 3
        };
        (0..tier_count)
            .map(|t| {
                let capacity = if t + 1 == tier_count {
                    u64::MAX
                } else {
                    next() % max_bytes
                };
                tier(capacity, 1.0 + t as f64 + (next() % 3) as f64)
            })
            .collect()
    }

    #[test]
    fn no_algorithm_overfills_a_tier_and_knapsack_is_the_best_whole_site_one() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let timeline = Timeline {
            interval_seconds: vec![0.5; 8],
        };
        for instance in 0..400 {
            let sites = random_sites(&mut next, 12, 500);
            let tiers = random_tiers(&mut next, 3000);
            let last = tiers.len().saturating_sub(1);
            let mut fast_accesses = Vec::new();
            for algorithm in Algorithm::ALL {
                let advice = advise(algorithm, &sites, &tiers, &timeline);
                let context = format!("instance {instance}, {}", algorithm.name());
                assert_eq!(advice.sites.len(), sites.len(), "{context}");
                for (s, p) in sites.iter().zip(&advice.sites) {
                    assert!(p.tier_bytes <= s.bytes, "{context}");
                    assert!(p.tier <= last, "{context}");
                    if algorithm != Algorithm::Hotset {
                        assert_eq!(p.tier_bytes, s.bytes, "{context}: whole sites only");
                    }
                    if count(s.accesses) == 0.0 {
                        assert_eq!(p.tier, last, "{context}: no accesses, no fast tier");
                    }
                }
                let outcome = evaluate(&sites, &tiers, &advice);
                for (t, spec) in tiers.iter().enumerate().take(last) {
                    // Hotset and multi-knapsack count room over the timeline: what a tier holds
                    // in each interval; the others sum peaks.
                    let held = if matches!(algorithm, Algorithm::Hotset | Algorithm::MultiKnapsack)
                    {
                        busiest_interval(&sites, &advice, t)
                    } else {
                        outcome[t].bytes
                    };
                    assert!(held <= spec.capacity_bytes, "{context}: tier {t}");
                }
                fast_accesses.push((algorithm, outcome[0].accesses));
            }
            if tiers.len() >= 2 {
                let optimum = brute_force_best(&sites, tiers[0].capacity_bytes);
                let knapsack = fast_accesses[1].1;
                assert_eq!(knapsack, optimum, "instance {instance}: knapsack is exact");
                // The other whole-site one by sums of peaks (multi-knapsack over the timeline may
                // hold more than any set of peaks that fits).
                for &(algorithm, accesses) in &fast_accesses[3..] {
                    assert!(
                        accesses <= knapsack,
                        "instance {instance}: {}",
                        algorithm.name()
                    );
                }
            }
        }
    }

    #[test]
    fn the_rounded_knapsack_never_exceeds_a_real_capacity() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        // Few and small: a table of rounded sizes has 2^20 buckets, slow in a debug build.
        for instance in 0..10 {
            let sites = random_sites(&mut next, 30, 1 << 40);
            let total: u64 = sites.iter().map(|s| s.bytes).sum();
            let tiers = vec![
                tier(total / (2 + next() % 6), 1.0),
                tier(total / (2 + next() % 6), 2.0),
                tier(u64::MAX, 3.0),
            ];
            let outcome = evaluate(&sites, &tiers, &knapsack(&sites, &tiers));
            for t in 0..2 {
                assert!(
                    outcome[t].bytes <= tiers[t].capacity_bytes,
                    "instance {instance}: tier {t}"
                );
            }
        }
    }

    #[test]
    fn knapsack_over_thousands_of_sites() {
        let mut next = xorshift(0x1234_5678_9abc_def1);
        let sites: Vec<SiteDemand> = (0..4000)
            .map(|_| site(1 + next() % (1 << 30), (next() % 100_000) as f64))
            .collect();
        let total: u64 = sites.iter().map(|s| s.bytes).sum();
        let tiers = two_tiers(total / 4);
        let advice = knapsack(&sites, &tiers);
        let outcome = evaluate(&sites, &tiers, &advice);
        assert!(outcome[0].bytes <= total / 4);
        let greedy = evaluate(&sites, &tiers, &multi_knapsack(&sites, &tiers));
        assert!(outcome[0].accesses >= greedy[0].accesses);
    }

    #[test]
    fn the_bucket_is_one_byte_for_small_capacities() {
        assert_eq!(knapsack_bucket_bytes(10, 3000), 1);
        assert_eq!(knapsack_bucket_bytes(0, 1 << 20), 1);
        assert_eq!(knapsack_bucket_bytes(10, (1 << 20) + 1), 2);
        assert_eq!(knapsack_bucket_bytes(4096, 1 << 30), 1 << 16);
        assert_eq!(knapsack_bucket_bytes(1 << 30, 1 << 30), 1 << 20);
        assert_eq!(knapsack_bucket_bytes(1, u64::MAX), 1 << 44);
    }
}
