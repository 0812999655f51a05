//! The routines of a tiering policy, as traits (paper §3.4, and one for the moves).
//!
//! At every interval the daemon runs, in order:
//!
//! 1. [`Aggregate`]: fold the interval's sampled accesses of each record into its running
//!    estimate (built-in: [`Ema`], equation 1 with alpha 0.1).
//! 2. [`Trigger`]: decide whether to enforce a new assignment now (built-ins: [`TimeTrigger`],
//!    [`AllocationTrigger`], [`PressureTrigger`], [`LlcMpiTrigger`]; several may be combined,
//!    and any one firing is enough). [`Policy::decide`] adds the rules every policy keeps: wait
//!    for a sampling source's first samples, re-plan when programs of different priority come
//!    or go, and finish a migration left unfinished.
//! 3. [`Prioritize`]: order the records, hottest first (built-ins: [`Prioritization`]'s FIFO,
//!    LRU and APB).
//! 4. [`Enforce`]: the tiers' budgets, and a tier per record (built-in: [`FillFastestFirst`],
//!    which fills each tier, fastest first, up to its budget).
//! 5. [`Migrate`]: how the assignment becomes page moves: the pages of a record's part, the
//!    order of a step's batches, and the huge pages split first (built-in: [`RoomFirst`]).
//!
//! Every routine sees only plain data ([`Candidate`]s, [`TierBudget`]s, [`Signals`], a
//! [`MovePlan`]) and returns plain data, so a policy is tested without a kernel and a custom one
//! is a short file: see `examples/custom-policy` in the repository. The daemon owns everything
//! else: sampling, locating pages, executing the moves (with its step deadline and rate limit),
//! and proactive placement by site.

use crate::migration::{self, Batch, HugeSplits, MovePlan, PartPages, PartRequest};
use crate::{
    assign_tiers, prioritize, tier_budget, Assignment, Candidate, Prioritization, ProcessPolicy,
    TierBudget,
};
use std::collections::VecDeque;

/// Routine 1: a record's running access estimate.
pub trait Aggregate: Send {
    /// Short name for logs and `objtier status`.
    fn name(&self) -> String;
    /// The new estimate from the previous one and the accesses sampled this interval.
    fn aggregate(&self, previous: f64, sampled: f64) -> f64;
}

/// Exponential moving average (paper equation 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ema {
    pub alpha: f64,
}

impl Aggregate for Ema {
    fn name(&self) -> String {
        format!("ema(alpha={})", self.alpha)
    }
    fn aggregate(&self, previous: f64, sampled: f64) -> f64 {
        crate::ema(previous, sampled, self.alpha)
    }
}

/// Routine 3: the order in which records compete for the fastest tiers.
pub trait Prioritize: Send {
    fn name(&self) -> String;
    /// Indices into `candidates`, hottest first; every index exactly once.
    fn order(&self, candidates: &[Candidate]) -> Vec<usize>;
}

impl Prioritize for Prioritization {
    fn name(&self) -> String {
        match self {
            Prioritization::Fifo => "fifo",
            Prioritization::Lru => "lru",
            Prioritization::Apb => "apb",
        }
        .into()
    }
    fn order(&self, candidates: &[Candidate]) -> Vec<usize> {
        prioritize(candidates, *self)
    }
}

/// What a trigger may look at, measured by the daemon at the end of an interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Signals {
    /// Intervals completed since the last enforcement (1 right after one).
    pub intervals_since_enforcement: u32,
    /// Bytes of tracked objects allocated, by all attached processes, since the last
    /// enforcement.
    pub allocated_bytes_since_enforcement: u64,
    /// The fastest tier's capacity and free memory, in bytes. Free counts the tier's cold
    /// file cache too when the daemon does (its `reclaim_cache` setting, on by default): room
    /// as the budgets see it.
    pub fast_capacity_bytes: u64,
    pub fast_free_bytes: u64,
    /// Last-level-cache misses and instructions retired during this interval, when the daemon
    /// counts them (only for a trigger that asks, see [`Trigger::needs_llc_counters`]).
    pub llc_misses: Option<u64>,
    pub instructions: Option<u64>,
}

/// Routine 2: when to enforce. Every configured trigger is asked at every interval (so one
/// that keeps history sees every interval); the daemon enforces when any answers `Some`.
pub trait Trigger: Send {
    fn name(&self) -> String;
    /// `Some(reason)` to enforce now; the reason is logged.
    fn check(&mut self, signals: &Signals) -> Option<String>;
    /// Whether the daemon must count LLC misses and instructions for this trigger.
    fn needs_llc_counters(&self) -> bool {
        false
    }
}

/// Enforce every `n` intervals (the paper's time trigger; n = 1 re-plans at every interval).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeTrigger {
    pub intervals: u32,
}

impl Trigger for TimeTrigger {
    fn name(&self) -> String {
        format!("time:{}", self.intervals)
    }
    fn check(&mut self, s: &Signals) -> Option<String> {
        (s.intervals_since_enforcement >= self.intervals.max(1))
            .then(|| format!("{} interval(s) since the last migration", self.intervals))
    }
}

/// Enforce once this much was allocated since the last enforcement (the paper's allocation
/// trigger; 1 GiB by default, its best average).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AllocationTrigger {
    pub threshold: AllocationThreshold,
}

/// How much allocation fires the allocation trigger.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AllocationThreshold {
    /// A fixed number of bytes (`alloc:1G`).
    Bytes(u64),
    /// A share of the fastest tier's capacity (`alloc:10%`). The paper picked 1 GiB for fast
    /// tiers of 3 to 25 GB and 10 GiB at 192 GB, 4 to 40 % of the fast tier either way; a share
    /// keeps the trigger meaningful on a fast tier of any size.
    ShareOfFast(f64),
}

impl AllocationThreshold {
    /// The threshold in bytes for a fastest tier of `fast_capacity` bytes (at least 1 byte).
    pub fn bytes(&self, fast_capacity: u64) -> u64 {
        match *self {
            AllocationThreshold::Bytes(bytes) => bytes,
            AllocationThreshold::ShareOfFast(share) => {
                ((fast_capacity as f64 * share) as u64).max(1)
            }
        }
    }
}

/// The allocation trigger's default threshold.
pub const DEFAULT_ALLOCATION_TRIGGER_BYTES: u64 = 1 << 30;

impl Trigger for AllocationTrigger {
    fn name(&self) -> String {
        match self.threshold {
            AllocationThreshold::Bytes(bytes) => {
                format!("alloc:{}", crate::units::format_size(bytes))
            }
            AllocationThreshold::ShareOfFast(share) => format!("alloc:{}%", share * 100.0),
        }
    }
    fn check(&mut self, s: &Signals) -> Option<String> {
        let threshold = self.threshold.bytes(s.fast_capacity_bytes);
        (s.allocated_bytes_since_enforcement >= threshold).then(|| {
            format!(
                "{} allocated since the last migration",
                crate::units::format_size(s.allocated_bytes_since_enforcement)
            )
        })
    }
}

/// Enforce when the fastest tier's free memory falls below `free_share` of its capacity:
/// new data is about to spill into slower tiers by first touch, and colder data should make
/// room first.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PressureTrigger {
    pub free_share: f64,
}

/// The pressure trigger's default watermark: half of the room the default fill leaves free.
pub const DEFAULT_PRESSURE_FREE_SHARE: f64 = 0.05;

impl Trigger for PressureTrigger {
    fn name(&self) -> String {
        format!("pressure:{}", self.free_share)
    }
    fn check(&mut self, s: &Signals) -> Option<String> {
        if s.fast_capacity_bytes == 0 {
            return None;
        }
        let share = s.fast_free_bytes as f64 / s.fast_capacity_bytes as f64;
        (share < self.free_share).then(|| {
            format!(
                "the fastest tier is {:.1} % free (watermark {:.1} %)",
                share * 100.0,
                self.free_share * 100.0
            )
        })
    }
}

/// Enforce when the LLC misses per instruction of the latest interval differ from the
/// average of the previous ten by more than `threshold` times that average (the paper's
/// LLCMPI trigger; threshold 2, its best choice). A change of miss rate marks a new phase.
#[derive(Clone, Debug, PartialEq)]
pub struct LlcMpiTrigger {
    pub threshold: f64,
    history: VecDeque<f64>,
}

/// How many earlier intervals the LLCMPI trigger averages.
pub const LLC_MPI_HISTORY: usize = 10;
/// The LLCMPI trigger's default threshold.
pub const DEFAULT_LLC_MPI_THRESHOLD: f64 = 2.0;

impl LlcMpiTrigger {
    pub fn new(threshold: f64) -> Self {
        Self {
            threshold,
            history: VecDeque::with_capacity(LLC_MPI_HISTORY + 1),
        }
    }
}

impl Trigger for LlcMpiTrigger {
    fn name(&self) -> String {
        format!("llc-mpi:{}", self.threshold)
    }
    fn needs_llc_counters(&self) -> bool {
        true
    }
    fn check(&mut self, s: &Signals) -> Option<String> {
        let (Some(misses), Some(instructions)) = (s.llc_misses, s.instructions) else {
            return None;
        };
        if instructions == 0 {
            return None; // an idle interval says nothing about the miss rate
        }
        let mpi = misses as f64 / instructions as f64;
        let verdict = if self.history.is_empty() {
            None
        } else {
            let average = self.history.iter().sum::<f64>() / self.history.len() as f64;
            let change = if average > 0.0 {
                (mpi - average).abs() / average
            } else if mpi > 0.0 {
                f64::INFINITY
            } else {
                0.0
            };
            (change > self.threshold).then(|| {
                format!(
                    "LLC misses per instruction {mpi:.2e}, {change:.1}x away from the average \
                     {average:.2e} of the last {} intervals",
                    self.history.len()
                )
            })
        };
        self.history.push_back(mpi);
        if self.history.len() > LLC_MPI_HISTORY {
            self.history.pop_front();
        }
        verdict
    }
}

/// A trigger by name, as the command line and the config file give it: `time[:N]`,
/// `alloc[:SIZE|:PERCENT%]`, `pressure[:SHARE]` or `llc-mpi[:THRESHOLD]`.
#[derive(Clone, Debug, PartialEq)]
pub enum TriggerSpec {
    Time(u32),
    Allocation(u64),
    /// The allocation trigger with a threshold of this share of the fastest tier.
    AllocationShare(f64),
    Pressure(f64),
    LlcMpi(f64),
}

impl TriggerSpec {
    pub fn build(&self) -> Box<dyn Trigger> {
        match *self {
            TriggerSpec::Time(intervals) => Box::new(TimeTrigger { intervals }),
            TriggerSpec::Allocation(bytes) => Box::new(AllocationTrigger {
                threshold: AllocationThreshold::Bytes(bytes),
            }),
            TriggerSpec::AllocationShare(share) => Box::new(AllocationTrigger {
                threshold: AllocationThreshold::ShareOfFast(share),
            }),
            TriggerSpec::Pressure(free_share) => Box::new(PressureTrigger { free_share }),
            TriggerSpec::LlcMpi(threshold) => Box::new(LlcMpiTrigger::new(threshold)),
        }
    }
}

impl std::str::FromStr for TriggerSpec {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let (name, value) = match text.trim().split_once(':') {
            Some((n, v)) => (n.trim(), Some(v.trim())),
            None => (text.trim(), None),
        };
        let bad = |what: &str| format!("trigger {text:?}: {what}");
        match name {
            "time" => {
                let n = match value {
                    None => 1,
                    Some(v) => v
                        .parse::<u32>()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| bad("time:N needs a whole number of intervals ≥ 1"))?,
                };
                Ok(TriggerSpec::Time(n))
            }
            "alloc" | "allocation" => match value {
                None => Ok(TriggerSpec::Allocation(DEFAULT_ALLOCATION_TRIGGER_BYTES)),
                Some(v) if v.ends_with('%') => parse_share(v)
                    .map(TriggerSpec::AllocationShare)
                    .ok_or_else(|| bad("alloc:PERCENT% needs a share of the fast tier in (0, 100), e.g. 10%")),
                Some(v) => crate::units::parse_size(v)
                    .ok()
                    .filter(|&b| b > 0)
                    .map(TriggerSpec::Allocation)
                    .ok_or_else(|| bad("alloc:SIZE needs a size such as 512M or 1G, or a share of the fast tier such as 10%")),
            },
            "pressure" => {
                let share = match value {
                    None => DEFAULT_PRESSURE_FREE_SHARE,
                    Some(v) => parse_share(v)
                        .ok_or_else(|| bad("pressure:SHARE needs a share of free memory in (0, 1), e.g. 0.05 or 5%"))?,
                };
                Ok(TriggerSpec::Pressure(share))
            }
            "llc-mpi" | "llcmpi" => {
                let threshold = match value {
                    None => DEFAULT_LLC_MPI_THRESHOLD,
                    Some(v) => v
                        .parse::<f64>()
                        .ok()
                        .filter(|t| t.is_finite() && *t > 0.0)
                        .ok_or_else(|| bad("llc-mpi:THRESHOLD needs a positive number, e.g. 2"))?,
                };
                Ok(TriggerSpec::LlcMpi(threshold))
            }
            _ => Err(format!(
                "unknown trigger {text:?}: use time[:N], alloc[:SIZE|:PERCENT%], pressure[:SHARE] \
                 or llc-mpi[:THRESHOLD]"
            )),
        }
    }
}

/// "0.05" or "5%" → 0.05, in (0, 1).
fn parse_share(text: &str) -> Option<f64> {
    let value = match text.strip_suffix('%') {
        Some(percent) => percent.trim().parse::<f64>().ok()? / 100.0,
        None => text.parse::<f64>().ok()?,
    };
    (value > 0.0 && value < 1.0).then_some(value)
}

/// A tier as the budgets see it, fastest first.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TierRoom {
    /// What objtier may fill of the tier (its memory, the fastest capped by `--fast-capacity`).
    pub capacity_bytes: u64,
    /// Its free memory, with its clean cold file cache when the daemon counts that as room.
    pub room_bytes: u64,
    /// Resident bytes of all the records on it now.
    pub objtier_bytes: u64,
}

/// Routine 4: the tiers' budgets, and a tier per record.
pub trait Enforce: Send {
    fn name(&self) -> String;
    /// The bytes of records each tier may hold after this plan, fastest first; the slowest is
    /// unbounded. `fill` is the share of a tier's capacity objtier fills (`--fill`). Built-in:
    /// [`tier_budget`] for each tier but the slowest.
    fn budgets(&self, tiers: &[TierRoom], fill: f64) -> Vec<TierBudget> {
        tiers
            .iter()
            .enumerate()
            .map(|(tier, t)| TierBudget {
                budget_bytes: if tier + 1 == tiers.len() {
                    u64::MAX
                } else {
                    tier_budget(t.capacity_bytes, t.room_bytes, t.objtier_bytes, fill)
                },
            })
            .collect()
    }
    /// The tier (0 = fastest) for each candidate, indexed like `candidates`, and any parts of
    /// records placed in a faster tier than the rest of them. `order` is the prioritization's;
    /// `budgets` are per tier, fastest first (the slowest is unbounded); `processes` are indexed
    /// by `Candidate::process`.
    fn assign(
        &self,
        candidates: &[Candidate],
        order: &[usize],
        budgets: &[TierBudget],
        processes: &[ProcessPolicy],
    ) -> Assignment;
}

/// The paper's enforcement for N tiers, see [`assign_tiers`]: walk the records in priority
/// order and place each in the fastest tier whose budget still fits it, honouring application
/// priorities, per-process fast-tier caps, the program's advice, and an optional fast-tier
/// reservation for the highest priority.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FillFastestFirst {
    pub fast_reserve_bytes: Option<u64>,
    /// Place the part of a record that fits a tier when the whole does not (on by default; off
    /// moves records whole, as the paper's daemon does).
    pub record_parts: bool,
}

impl Default for FillFastestFirst {
    fn default() -> Self {
        FillFastestFirst {
            fast_reserve_bytes: None,
            record_parts: true,
        }
    }
}

impl Enforce for FillFastestFirst {
    fn name(&self) -> String {
        "fill-fastest-first".into()
    }
    fn assign(
        &self,
        candidates: &[Candidate],
        order: &[usize],
        budgets: &[TierBudget],
        processes: &[ProcessPolicy],
    ) -> Assignment {
        assign_tiers(candidates, order, budgets, processes, self)
    }
}

/// Routine 5: how an assignment becomes page moves. Every method has the built-in rule
/// ([`crate::migration`]) as its default, so a policy replaces only what it means to change.
pub trait Migrate: Send {
    fn name(&self) -> String;
    /// The pages a record's part holds, and how far from that it may stray before pages move
    /// (built-in: [`migration::part_pages`]).
    fn part_pages(&self, request: PartRequest) -> PartPages {
        migration::part_pages(request)
    }
    /// The step's moves in the order they are made, in batches of at most `batch_pages`;
    /// `fast_room_pages` is the fastest tier's free memory beyond its fill reserve (built-in:
    /// [`migration::order_batches`], room made just before each promotion).
    fn order(&self, plan: MovePlan, fast_room_pages: i64, batch_pages: usize) -> Vec<Batch> {
        migration::order_batches(plan, fast_room_pages, batch_pages)
    }
    /// The huge pages (of `huge_bytes`) to split before the step moves part of one (built-in:
    /// [`migration::huge_page_splits`]).
    fn huge_page_splits(&self, plan: &MovePlan, huge_bytes: u64) -> Vec<HugeSplits> {
        migration::huge_page_splits(plan, huge_bytes)
    }
}

/// The built-in [`Migrate`]: hottest promotions first, each after just the demotions that make
/// its room in the fastest tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoomFirst;

impl Migrate for RoomFirst {
    fn name(&self) -> String {
        "room-first".into()
    }
}

/// A complete policy: one routine of each kind (any number of triggers). A policy of its own
/// changes the routines it means to and takes the rest from [`Policy::default`].
pub struct Policy {
    pub aggregate: Box<dyn Aggregate>,
    pub prioritize: Box<dyn Prioritize>,
    pub triggers: Vec<Box<dyn Trigger>>,
    pub enforce: Box<dyn Enforce>,
    pub migrate: Box<dyn Migrate>,
}

impl Default for Policy {
    /// The daemon's defaults: EMA (alpha 0.1), APB, the time trigger every interval, fill
    /// fastest first, room first.
    fn default() -> Policy {
        Policy::builtin(
            crate::DEFAULT_ALPHA,
            Prioritization::Apb,
            &[TriggerSpec::Time(1)],
            FillFastestFirst::default(),
        )
    }
}

/// What the daemon knows, besides the triggers' [`Signals`], when it decides whether to
/// enforce (see [`Policy::decide`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Circumstances {
    /// The access source samples accesses (DAMON, perf, proc); false for none.
    pub source_samples: bool,
    /// Sampled accesses attributed to records since the last enforcement.
    pub attributed_since_enforcement: f64,
    /// The distinct application priorities attached now, and at the last enforcement (sorted).
    pub priorities: Vec<i32>,
    pub priorities_at_enforcement: Vec<i32>,
    /// The last step left pages unmoved (its time ran out, or the rate limit held them back).
    pub migration_unfinished: bool,
}

/// Whether to enforce now ([`Policy::decide`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// Why it enforces; empty: it does not.
    pub reasons: Vec<String>,
    /// Triggers that fired but were held back: no access has been sampled yet.
    pub waiting: Vec<String>,
}

impl Policy {
    /// The built-in routines chosen by name.
    pub fn builtin(
        alpha: f64,
        prioritization: Prioritization,
        triggers: &[TriggerSpec],
        enforce: FillFastestFirst,
    ) -> Policy {
        Policy {
            aggregate: Box::new(Ema { alpha }),
            prioritize: Box::new(prioritization),
            triggers: triggers.iter().map(TriggerSpec::build).collect(),
            enforce: Box::new(enforce),
            migrate: Box::new(RoomFirst),
        }
    }

    /// Asks the triggers ([`Policy::check_triggers`]) and applies the rules every policy keeps:
    ///
    /// - A trigger that fires before a sampling source has seen any access (DAMON's first
    ///   interval, right after a program allocated its data) would plan blind, and use up what
    ///   it counted: the allocation trigger's bytes would then never come again for a program
    ///   that allocates once. It waits for the first samples instead.
    /// - A change of the attached priorities re-plans when it involves programs of different
    ///   priority (one arriving or leaving beside another). The first program attaching, or a
    ///   lone program's priority, has nobody to compete with, and planning then, before any
    ///   access was sampled, would take the allocation trigger's bytes for a blind plan.
    /// - A migration left unfinished goes on.
    pub fn decide(&mut self, signals: &Signals, now: &Circumstances) -> Decision {
        let mut reasons = self.check_triggers(signals);
        let mut waiting = Vec::new();
        if !reasons.is_empty() && now.source_samples && now.attributed_since_enforcement <= 0.0 {
            waiting = std::mem::take(&mut reasons);
        }
        if now.priorities != now.priorities_at_enforcement
            && (now.priorities.len() > 1 || now.priorities_at_enforcement.len() > 1)
        {
            reasons.push("the attached application priorities changed".into());
        }
        if now.migration_unfinished {
            reasons.push("the last migration was left unfinished".into());
        }
        Decision { reasons, waiting }
    }

    /// Asks every trigger (each sees every interval); the reasons of those that fired.
    pub fn check_triggers(&mut self, signals: &Signals) -> Vec<String> {
        self.triggers
            .iter_mut()
            .filter_map(|t| t.check(signals))
            .collect()
    }

    pub fn needs_llc_counters(&self) -> bool {
        self.triggers.iter().any(|t| t.needs_llc_counters())
    }

    /// "apb, ema(alpha=0.1), time:1, fill-fastest-first" for logs and status.
    pub fn describe(&self) -> String {
        let triggers: Vec<String> = self.triggers.iter().map(|t| t.name()).collect();
        format!(
            "{} / {} / {} / {}",
            self.aggregate.name(),
            self.prioritize.name(),
            triggers.join("+"),
            self.enforce.name()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn signals() -> Signals {
        Signals {
            intervals_since_enforcement: 1,
            fast_capacity_bytes: 100,
            fast_free_bytes: 50,
            ..Signals::default()
        }
    }

    #[test]
    fn time_trigger_fires_every_n_intervals() {
        let mut t = TimeTrigger { intervals: 3 };
        let fired: Vec<bool> = (1..=4)
            .map(|n| {
                t.check(&Signals {
                    intervals_since_enforcement: n,
                    ..signals()
                })
                .is_some()
            })
            .collect();
        assert_eq!(fired, [false, false, true, true]);
        assert!(TimeTrigger { intervals: 1 }.check(&signals()).is_some());
    }

    #[test]
    fn allocation_trigger_counts_bytes_since_the_last_migration() {
        let mut t = AllocationTrigger {
            threshold: AllocationThreshold::Bytes(GIB),
        };
        let at = |bytes| Signals {
            allocated_bytes_since_enforcement: bytes,
            ..signals()
        };
        assert!(t.check(&at(GIB - 1)).is_none());
        let reason = t.check(&at(GIB)).unwrap();
        assert!(reason.contains("1G allocated"), "{reason}");
        assert_eq!(t.name(), "alloc:1G");
    }

    #[test]
    fn allocation_trigger_can_scale_with_the_fast_tier() {
        let mut t = AllocationTrigger {
            threshold: AllocationThreshold::ShareOfFast(0.1),
        };
        assert_eq!(t.name(), "alloc:10%");
        let at = |allocated, fast| Signals {
            allocated_bytes_since_enforcement: allocated,
            fast_capacity_bytes: fast,
            ..signals()
        };
        assert!(t.check(&at(99 << 20, 1000 << 20)).is_none());
        assert!(t.check(&at(100 << 20, 1000 << 20)).is_some());
        assert!(t.check(&at(100 << 20, 2000 << 20)).is_none());
        // No fast tier known: any allocation fires rather than none.
        assert!(t.check(&at(1, 0)).is_some());
        assert!(t.check(&at(0, 0)).is_none());
    }

    #[test]
    fn pressure_trigger_fires_below_the_watermark() {
        let mut t = PressureTrigger { free_share: 0.05 };
        let free = |bytes| Signals {
            fast_capacity_bytes: 1000,
            fast_free_bytes: bytes,
            ..signals()
        };
        assert!(t.check(&free(50)).is_none());
        assert!(t.check(&free(49)).is_some());
        assert!(
            t.check(&Signals::default()).is_none(),
            "no fast tier, no pressure"
        );
    }

    #[test]
    fn llc_mpi_trigger_fires_on_a_change_of_miss_rate() {
        let mut t = LlcMpiTrigger::new(2.0);
        let at = |misses, instructions| Signals {
            llc_misses: Some(misses),
            instructions: Some(instructions),
            ..signals()
        };
        // A steady rate never fires, the first interval included (no history yet).
        for _ in 0..12 {
            assert!(t.check(&at(1_000, 1_000_000)).is_none());
        }
        assert_eq!(t.history.len(), LLC_MPI_HISTORY);
        // Twice the average is a change of 1.0: below the threshold of 2.
        assert!(t.check(&at(2_000, 1_000_000)).is_none());
        // Five times the average fires.
        let reason = t.check(&at(5_000, 1_000_000)).unwrap();
        assert!(reason.contains("LLC misses per instruction"), "{reason}");
        // Idle intervals and missing counters say nothing.
        assert!(t.check(&at(5_000, 0)).is_none());
        assert!(t.check(&signals()).is_none());
        assert!(t.needs_llc_counters());
    }

    #[test]
    fn triggers_parse_from_their_names() {
        assert_eq!("time".parse(), Ok(TriggerSpec::Time(1)));
        assert_eq!("time:5".parse(), Ok(TriggerSpec::Time(5)));
        assert_eq!("alloc".parse(), Ok(TriggerSpec::Allocation(GIB)));
        assert_eq!("alloc:512M".parse(), Ok(TriggerSpec::Allocation(512 << 20)));
        assert_eq!("alloc:10%".parse(), Ok(TriggerSpec::AllocationShare(0.1)));
        assert_eq!("pressure:5%".parse(), Ok(TriggerSpec::Pressure(0.05)));
        assert_eq!("pressure".parse(), Ok(TriggerSpec::Pressure(0.05)));
        assert_eq!("llc-mpi:2".parse(), Ok(TriggerSpec::LlcMpi(2.0)));
        for bad in [
            "time:0",
            "alloc:lots",
            "alloc:150%",
            "alloc:0%",
            "pressure:1.5",
            "llc-mpi:-1",
            "sometimes",
        ] {
            let err = bad.parse::<TriggerSpec>().unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
        assert!("sometimes"
            .parse::<TriggerSpec>()
            .unwrap_err()
            .contains("time[:N], alloc[:SIZE|:PERCENT%]"));
    }

    #[test]
    fn a_policy_asks_every_trigger_and_describes_itself() {
        let mut policy = Policy::builtin(
            0.1,
            Prioritization::Apb,
            &[TriggerSpec::Time(2), TriggerSpec::Allocation(GIB)],
            Default::default(),
        );
        assert_eq!(
            policy.describe(),
            "ema(alpha=0.1) / apb / time:2+alloc:1G / fill-fastest-first"
        );
        assert!(policy.check_triggers(&signals()).is_empty());
        let both = Signals {
            intervals_since_enforcement: 2,
            allocated_bytes_since_enforcement: 2 * GIB,
            ..signals()
        };
        assert_eq!(policy.check_triggers(&both).len(), 2);
        assert!(!policy.needs_llc_counters());
    }
}
