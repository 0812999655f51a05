//! What an interval tells: counters since the daemon started, the last interval's report (for
//! `objtier status`), and what the triggers have seen since the last enforcement.

use serde::Serialize;
use std::collections::BTreeMap;

/// Counters since the daemon started.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Totals {
    pub intervals: u64,
    /// Intervals in which a trigger fired and a new assignment was enforced.
    pub enforcements: u64,
    pub promoted_pages: u64,
    pub demoted_pages: u64,
    pub failed_pages: u64,
    /// Failed page moves by errno name (ENOMEM: target full, EBUSY: page pinned, ...).
    pub failures_by_errno: BTreeMap<String, u64>,
    /// Processes that exited while their pages were being moved.
    pub processes_gone_mid_migration: u64,
    /// Huge pages split because a step moved only some of their base pages (asked for: a
    /// block the kernel had not backed by a huge page counts too).
    pub huge_page_splits: u64,
    pub sampled_weight: f64,
    pub attributed_weight: f64,
}

/// What the last interval did (for `objtier status`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct IntervalReport {
    pub seconds_since_start: f64,
    /// The interval's length: `--interval`, or `--startup-interval` while a process is young.
    pub interval_ms: u64,
    pub duration_ms: u64,
    /// Observations the access source delivered (DAMON regions, perf samples, ...).
    pub observations: usize,
    /// Share of sampled accesses that fell inside a tracked record.
    pub attributed_share: Option<f64>,
    /// Whether this interval enforced a new assignment, and why (the triggers that fired).
    pub enforced: bool,
    pub trigger_reasons: Vec<String>,
    /// LLC misses per instruction this interval, when counted.
    pub llc_misses_per_instruction: Option<f64>,
    pub budget_bytes_by_tier: Vec<u64>,
    /// Records the plan placed in part above the rest of them, and the bytes of those parts.
    pub record_parts: usize,
    pub record_part_bytes: u64,
    pub promoted_pages: u64,
    pub demoted_pages: u64,
    pub failed_pages: u64,
    /// This step's failed page moves by direction and errno name ("promote ENOMEM": the
    /// faster tier had no room for what the plan thought would fit).
    pub failures: BTreeMap<String, u64>,
    /// Pages left for the next interval because this one's migration time ran out.
    pub deferred_pages: u64,
    /// Pages left for the next interval by the migration rate limit (`--rate-limit`).
    pub rate_limited_pages: u64,
    /// Promotions not tried this step: their tier had refused one for lack of memory (ENOMEM)
    /// since the last demotion out of it, and would refuse these too, each after the kernel
    /// tried to reclaim for it. Planned again at the next interval, not right away.
    pub full_tier_pages: u64,
    /// Huge pages split before moving part of them (see [`Totals::huge_page_splits`]).
    pub huge_page_splits: u64,
    pub source_error: Option<String>,
}

/// What happened since the last enforcement, for the triggers.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SinceEnforcement {
    pub intervals: u32,
    /// Bytes of tracked objects allocated.
    pub allocated_bytes: u64,
    /// The distinct application priorities attached at the last enforcement: a change that
    /// involves programs of different priority (one arriving or leaving beside another)
    /// enforces, whatever the triggers say.
    pub priorities: Vec<i32>,
    /// Sampled accesses attributed to records: while a sampling source has seen none, a
    /// trigger's plan would rank on nothing, so it waits (keeping what the triggers counted).
    pub attributed_weight: f64,
}
