//! objtier's tiering logic, pure: snapshot in, plan out.
//!
//! Nothing here touches the kernel or the clock, so every rule is unit-tested with synthetic
//! objects and tiers. The daemon gathers a [`Candidate`] per object record (its access estimate,
//! its size, where its pages are now); a [`Policy`] of five routines ([`routines`]) decides
//! whether to act, orders the records, gives each a tier ([`assign_tiers`]) and turns that into
//! page moves ([`migration`]). The design follows the MAT daemon (Kammerdiener et al., sections
//! 3.4.1–3.4.4): an exponential moving average of sampled accesses per interval ([`ema`]), an
//! ordering of objects ([`Prioritization`]), and an enforcement routine that fills each tier,
//! fastest first, up to a budget (90 % of its capacity by default), leaving the rest to slower
//! tiers. Also here: proactive placement by allocation site, short-lived sites ([`lifetimes`]),
//! and the offline advisor's algorithms ([`advise`]).

pub mod advise;
mod assign;
mod candidate;
pub mod lifetimes;
pub mod migration;
mod prioritize;
mod proactive;
#[cfg(test)]
mod properties;
mod radix;
pub mod routines;
#[cfg(test)]
mod test_support;
pub mod units;

pub use assign::{
    assign_tiers, fill_reserve, min_part_bytes, tier_budget, Assignment, Part, ProcessPolicy,
    TierBudget, KEEP_SLACK, MIN_PART_BYTES, RANK_STICKINESS,
};
pub use candidate::{Candidate, TierBytes};
pub use prioritize::{prioritize, Prioritization};
pub use proactive::{
    accessed_by_the_program, proactive_placements, PlacementStreaks, SitePlacement, SiteRecord,
    DEFAULT_SITE_THRESHOLD, SETTLED_INTERVALS,
};

pub use routines::{
    Aggregate, AllocationThreshold, AllocationTrigger, Circumstances, Decision, Ema, Enforce,
    FillFastestFirst, LlcMpiTrigger, Migrate, Policy, PressureTrigger, Prioritize, RoomFirst,
    Signals, TierRoom, TimeTrigger, Trigger, TriggerSpec,
};

/// Default smoothing factor of the access EMA (the paper's alpha).
pub const DEFAULT_ALPHA: f64 = 0.1;
/// Default share of a tier's capacity objtier fills.
pub const DEFAULT_FILL: f64 = 0.9;
/// The start-up interval the evaluation measured (see [`next_interval`]); the daemon's default
/// is off.
pub const DEFAULT_STARTUP_INTERVAL_MS: u64 = 500;
/// Default time after a process attaches during which it counts as young.
pub const DEFAULT_STARTUP_WINDOW_MS: u64 = 10_000;

/// How long the next profiling interval lasts. A process's objects become records at the
/// interval after they are allocated, its first accesses are sampled in the one after that, and
/// only then can a plan be informed: two intervals of 2 s are much of a program that runs for
/// twenty. So while some process waiting for its first informed plan is younger than
/// `startup_window` (`youngest_age`: the age of the youngest such process, None when there is
/// none), the interval is `startup_interval` instead; an interval never grows beyond `interval`
/// because of this. `startup_interval` None keeps `interval` throughout. Only the first plan
/// comes early: planning every 500 ms after it made objtier swap pages back and forth on
/// programs whose hot set moves while they load their data (redis, sqlite in the evaluation).
/// It is off by default: a first plan made while a program still allocates sees only part of
/// its objects, so the plan that sees them all came later than with 2 s intervals throughout
/// (the tiered-VM tests reached 0.9 fast in 7-14 s instead of 5 s), and whether hpcc's table
/// was planned early depended on when its first plan fell.
pub fn next_interval(
    interval: std::time::Duration,
    startup_interval: Option<std::time::Duration>,
    startup_window: std::time::Duration,
    youngest_age: Option<std::time::Duration>,
) -> std::time::Duration {
    match (startup_interval, youngest_age) {
        (Some(short), Some(age)) if age < startup_window => short.min(interval),
        _ => interval,
    }
}

/// Default size above which an object is tracked as several records (the paper's), and the
/// most [`auto_split_bytes`] picks.
pub const DEFAULT_SPLIT_BYTES: u64 = 64 << 20;

/// How many records of the automatic split size the smallest contested tier holds at least.
pub const AUTO_SPLIT_RECORDS_PER_TIER: u64 = 32;

/// The least size [`auto_split_bytes`] picks, and the unit it rounds down to: a transparent huge
/// page, so that records of a huge-page-aligned object (mimalloc's arenas are) do not share one.
pub const AUTO_SPLIT_UNIT: u64 = 2 << 20;

/// The split size when none is configured: [`DEFAULT_SPLIT_BYTES`], but no more than
/// 1/[`AUTO_SPLIT_RECORDS_PER_TIER`] of the smallest tier objects compete for (every tier but
/// the slowest; `contested_capacities` are their sizes in bytes), rounded down to
/// [`AUTO_SPLIT_UNIT`] and at least that.
///
/// A record is the unit the planner places, so it must be small beside the tier it competes for.
/// The paper's 64 MiB is 1/48 of its smallest fast tier (3 GB) and less beyond; on a fast tier
/// of 92 MB a 64 MiB record does not fit whole, and the planner could only give it a part whose
/// pages it picks blind to which of them are hot (a program's small objects live in 64 MiB
/// arenas, so its whole heap may be three such records).
pub fn auto_split_bytes(contested_capacities: impl IntoIterator<Item = u64>) -> u64 {
    let smallest = contested_capacities.into_iter().min().unwrap_or(u64::MAX);
    let share = smallest / AUTO_SPLIT_RECORDS_PER_TIER / AUTO_SPLIT_UNIT * AUTO_SPLIT_UNIT;
    share.clamp(AUTO_SPLIT_UNIT, DEFAULT_SPLIT_BYTES)
}

/// Equation 1 of the paper: tau_{n+1} = alpha * t_n + (1 - alpha) * tau_n.
#[inline]
pub fn ema(previous: f64, sampled: f64, alpha: f64) -> f64 {
    alpha * sampled + (1.0 - alpha) * previous
}

/// Splits `[start, start + len)` into records of at most `split` bytes (the last may be shorter):
/// ceil(len / split) records, as in section 3.2.2.
pub fn split_ranges(start: u64, len: u64, split: u64) -> impl Iterator<Item = (u64, u64)> {
    let split = split.max(PAGE_BYTES);
    (0..len.div_ceil(split)).map(move |i| {
        let offset = i * split;
        (start + offset, split.min(len - offset))
    })
}

/// The page size records, parts and splits are whole numbers of.
pub(crate) const PAGE_BYTES: u64 = objtier_wire::PAGE_SIZE as u64;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::MIB;

    #[test]
    fn a_young_process_is_profiled_at_the_startup_interval() {
        use std::time::Duration;
        let (interval, short, window) = (
            Duration::from_secs(2),
            Duration::from_millis(500),
            Duration::from_secs(10),
        );
        let at = |startup, age| next_interval(interval, startup, window, age);
        assert_eq!(at(Some(short), Some(Duration::from_secs(3))), short);
        assert_eq!(
            at(Some(short), Some(window)),
            interval,
            "young until the window ends"
        );
        assert_eq!(at(Some(short), None), interval, "nobody attached");
        assert_eq!(at(None, Some(Duration::ZERO)), interval, "turned off");
        assert_eq!(
            at(Some(Duration::from_secs(5)), Some(Duration::ZERO)),
            interval,
            "never longer than the interval"
        );
    }

    #[test]
    fn ema_matches_equation_1() {
        assert_eq!(ema(0.0, 10.0, 0.1), 1.0);
        assert!((ema(1.0, 10.0, 0.1) - 1.9).abs() < 1e-12);
    }

    #[test]
    fn splits_like_the_paper() {
        let parts: Vec<_> = split_ranges(0, 96 * MIB, 64 * MIB).collect();
        assert_eq!(parts, vec![(0, 64 * MIB), (64 * MIB, 32 * MIB)]);
        assert_eq!(split_ranges(4096, 4096, 64 * MIB).count(), 1);
    }

    /// The automatic split keeps records small beside the smallest contested tier: the paper's
    /// 64 MiB beside fast tiers of GBs, 2 MiB (a huge page) beside a 92 MB one.
    #[test]
    fn automatic_split_is_small_beside_the_fast_tier() {
        const GIB: u64 = 1 << 30;
        assert_eq!(auto_split_bytes([16 * GIB]), 64 * MIB);
        assert_eq!(auto_split_bytes([2 * GIB]), 64 * MIB);
        assert_eq!(auto_split_bytes([GIB]), 32 * MIB);
        assert_eq!(auto_split_bytes([512 * MIB]), 16 * MIB);
        // 92 MB / 32 is 2.9 MB: rounded down to whole huge pages.
        assert_eq!(auto_split_bytes([92_000_000]), 2 * MIB);
        // Never below a huge page, however small the tier.
        assert_eq!(auto_split_bytes([16 * MIB]), 2 * MIB);
        // The smallest contested tier decides; with none (one tier), the paper's size.
        assert_eq!(auto_split_bytes([16 * GIB, 512 * MIB]), 16 * MIB);
        assert_eq!(auto_split_bytes([]), 64 * MIB);
    }
}
