//! objtier's tiering logic, pure: snapshot in, plan out.
//!
//! Nothing here touches the kernel or the clock, so every rule is unit-tested with synthetic
//! objects and tiers. The daemon gathers a [`Candidate`] per object record (its access estimate,
//! its size, where its pages are now), and [`assign_tiers`] decides where each should be. The
//! design follows the MAT daemon (Kammerdiener et al., sections 3.4.1–3.4.4): an exponential
//! moving average of sampled accesses per interval ([`ema`]), an ordering of objects
//! ([`Prioritization`]), and an enforcement routine that fills each tier, fastest first, up to a
//! budget (90 % of its capacity by default), leaving the rest to slower tiers.

pub mod advise;
pub mod lifetimes;
mod radix;
pub mod routines;
pub mod units;

pub use routines::{
    Aggregate, AllocationThreshold, AllocationTrigger, Ema, Enforce, FillFastestFirst,
    LlcMpiTrigger, Policy, PressureTrigger, Prioritize, Signals, TimeTrigger, Trigger, TriggerSpec,
};

use objtier_wire::advice;

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
const PAGE_BYTES: u64 = objtier_wire::PAGE_SIZE as u64;

/// How objects are ordered for the fast tier (section 3.4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prioritization {
    /// Newest first (older objects have lower priority).
    Fifo,
    /// Most recently accessed first.
    Lru,
    /// Most accesses per byte first.
    Apb,
}

impl std::str::FromStr for Prioritization {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "fifo" => Ok(Self::Fifo),
            "lru" => Ok(Self::Lru),
            "apb" => Ok(Self::Apb),
            _ => Err(format!(
                "unknown prioritization {s:?}: use fifo, lru or apb"
            )),
        }
    }
}

/// Bytes per tier, fastest first. Up to three tiers are kept inline, so a million candidates
/// do not cost a million small allocations; more spill to the heap.
pub type TierBytes = smallvec::SmallVec<[u64; 3]>;

/// What the planner knows about one object record.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The caller's handle for this record.
    pub id: usize,
    /// Owning process's handle, for per-process fast-tier caps.
    pub process: usize,
    pub len_bytes: u64,
    pub created_ns: u64,
    /// Time of the last interval in which accesses were observed; 0 if never.
    pub last_access_ns: u64,
    /// EMA of sampled accesses per interval.
    pub ema_accesses: f64,
    /// Sampled accesses in the latest interval alone.
    pub recent_accesses: f64,
    /// Sampled accesses in the interval before the latest.
    pub previous_accesses: f64,
    /// Resident bytes on each tier now (index 0 = fastest).
    pub resident_bytes_by_tier: TierBytes,
    /// What the program advised about this memory (`objtier_wire::advice` bits; 0 for none).
    pub advice: u32,
}

impl Candidate {
    pub fn resident_bytes(&self) -> u64 {
        self.resident_bytes_by_tier.iter().sum()
    }

    /// The tier holding most of this record's resident bytes (the slowest on a tie).
    pub fn main_tier(&self) -> Option<usize> {
        let (tier, bytes) = self
            .resident_bytes_by_tier
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(&b.0)))?;
        (*bytes > 0).then_some(tier)
    }

    /// Seen accessed in the latest interval. Only such records are moved up: a record whose
    /// EMA is merely still decaying from an old burst is not worth the bandwidth, and letting it
    /// climb would make cold records bounce at the budget's edge.
    fn observed(&self) -> bool {
        self.recent_accesses > 0.0
    }

    /// Accesses per resident byte: untouched pages are neither accessed nor cost memory, so a
    /// sparse record (a small-object arena, a huge array touched at one end) is judged by what
    /// it holds. A record with nothing resident falls back to its length.
    fn accesses_per_byte(&self) -> f64 {
        let bytes = match self.resident_bytes() {
            0 => self.len_bytes,
            resident => resident,
        };
        self.ema_accesses / bytes.max(1) as f64
    }

    /// APB's ranking key: accesses per byte, raised by up to [`RANK_STICKINESS`] for the share
    /// of the record already in the fastest tier. Two records of about the same heat then keep
    /// their places instead of trading them (and their pages) whenever sampling noise swaps
    /// their estimates; a record must be that much hotter per byte to displace one already fast.
    pub fn apb_rank(&self) -> f64 {
        let resident = self.resident_bytes();
        let fast = self.resident_bytes_by_tier.first().copied().unwrap_or(0);
        let fast_share = if resident == 0 {
            0.0
        } else {
            fast as f64 / resident as f64
        };
        self.accesses_per_byte() * (1.0 + RANK_STICKINESS * fast_share)
    }

    /// Where the program's advice puts this record in the walk, within its process priority.
    fn advice_class(&self) -> AdviceClass {
        let a = self.advice;
        if a & advice::REQUIRE_FAST != 0 {
            AdviceClass::RequireFast
        } else if a & (advice::PREFER_FAST | advice::LATENCY_SENSITIVE | advice::HOT) != 0 {
            AdviceClass::PreferFast
        } else if a & (advice::PREFER_SLOW | advice::COLD) != 0 {
            AdviceClass::PreferSlow
        } else {
            AdviceClass::None
        }
    }
}

/// Advice classes in walk order: required fast first, preferred slow last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum AdviceClass {
    RequireFast,
    PreferFast,
    None,
    PreferSlow,
}

/// Orders candidates hottest first under `policy`. Ties go to the one already faster (fewer
/// moves), then by id for determinism.
pub fn prioritize(candidates: &[Candidate], policy: Prioritization) -> Vec<usize> {
    // When ids are indices (as the daemon numbers candidates), each candidate's sort key is
    // computed once, packed into 16 bytes, and the array radix-sorted (`radix`): a million
    // candidates sort in about 12 ms, several times quicker than a comparator that computes keys
    // (and main tiers) on every comparison. Other ids take the comparator.
    let mut keys = Vec::with_capacity(candidates.len());
    for (i, c) in candidates.iter().enumerate() {
        let tier = match c.main_tier() {
            None => TIER_FIELD_MAX,
            Some(t) if (t as u64) < TIER_FIELD_MAX => t as u64,
            Some(_) => return prioritize_by_comparator(candidates, policy),
        };
        if c.id != i || i as u64 > ID_FIELD_MAX {
            return prioritize_by_comparator(candidates, policy);
        }
        keys.push((
            descending(rank_key(c, policy)),
            tier << ID_FIELD_BITS | i as u64,
        ));
    }
    // The keys are in id order, which the stable sort keeps among equal (rank, tier) pairs.
    radix::sort_by_rank_then_high_bits(&mut keys, ID_FIELD_BITS);
    keys.into_iter()
        .map(|(_, tie)| (tie & ID_FIELD_MAX) as usize)
        .collect()
}

/// Bits of the packed (main tier, id) tie-breaker given to the id.
const ID_FIELD_BITS: u32 = 48;
const ID_FIELD_MAX: u64 = (1 << ID_FIELD_BITS) - 1;
/// The tier field's value for "no resident pages" (sorts after every tier).
const TIER_FIELD_MAX: u64 = (1 << (64 - ID_FIELD_BITS)) - 1;

fn rank_key(c: &Candidate, policy: Prioritization) -> f64 {
    match policy {
        Prioritization::Fifo => c.created_ns as f64,
        Prioritization::Lru => c.last_access_ns as f64,
        Prioritization::Apb => c.apb_rank(),
    }
}

/// A key whose unsigned order is the descending order of `x` (-0.0 equal to 0.0; NaN, which no
/// candidate should have, last).
fn descending(x: f64) -> u64 {
    if x.is_nan() {
        return u64::MAX;
    }
    let bits = (x + 0.0).to_bits(); // -0.0 + 0.0 is +0.0
    let ascending = if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    };
    !ascending
}

/// [`prioritize`] as a plain comparator sort: what it falls back to when ids are not indices
/// (or too large to pack), and what the tests check it against.
fn prioritize_by_comparator(candidates: &[Candidate], policy: Prioritization) -> Vec<usize> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| {
        let (ca, cb) = (&candidates[a], &candidates[b]);
        descending(rank_key(ca, policy))
            .cmp(&descending(rank_key(cb, policy)))
            .then_with(|| {
                let ta = ca.main_tier().unwrap_or(usize::MAX);
                let tb = cb.main_tier().unwrap_or(usize::MAX);
                ta.cmp(&tb)
            })
            .then(ca.id.cmp(&cb.id))
    });
    order
}

/// Where each tier may put objects this interval.
#[derive(Clone, Debug, PartialEq)]
pub struct TierBudget {
    /// Bytes of object records the tier may hold after this plan.
    pub budget_bytes: u64,
}

/// How much hotter per byte (10 %) a record must be to displace one held in the fastest tier
/// under APB ([`Candidate::apb_rank`]).
pub const RANK_STICKINESS: f64 = 0.1;

/// Share of a tier's budget by which records already there may overstay it. Budgets move with
/// free memory, which the daemon's own demotions change; without this slack a record at the
/// edge would be demoted one interval and promoted back the next.
pub const KEEP_SLACK: f64 = 0.02;

/// What the planner knows about each process (indexed by `Candidate::process`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessPolicy {
    /// Cap on the bytes this process may hold in the fastest tier (`objtier run
    /// --fast-capacity`).
    pub fast_cap_bytes: Option<u64>,
    /// Application priority; higher wins the fastest tier (section 5.5).
    pub priority: i32,
}

/// Decides a tier for every candidate: walk them in priority order and place each in the
/// fastest tier whose remaining budget (and the owning process's fast-tier cap) fits it; the
/// slowest tier takes the rest. Two refinements over the paper's routine keep migrations honest:
/// a record not seen accessed in the latest interval is never moved *up* (no reason to spend
/// bandwidth on it), and budgets are charged by resident bytes (untouched pages cost no memory).
///
/// Priorities (section 5.5): while processes of different priority are attached, only the
/// highest-priority processes' objects compete for the fastest tier; the others' are kept out
/// of it (and so demoted). With `fast_reserve_bytes` (the paper's suggested refinement) the
/// others may still use the fastest tier, except for that many bytes of its budget, reserved
/// for the highest-priority processes.
///
/// Records move whole, except with `record_parts`: then a record ranked for a tier whose
/// remaining budget (or cap, or allowance) no longer fits it whole gets a part there, as much of
/// it as fits, and the rest goes where the walk would put the whole (the greedy fill of a
/// fractional knapsack, which APB's accesses-per-byte order makes the best fill for the samples
/// seen). Parts below [`min_part_bytes`] are not worth it: they would come and go with the
/// budget's own movement.
///
/// Returns the chosen tier per candidate, indexed like `candidates`, and the parts.
pub fn assign_tiers(
    candidates: &[Candidate],
    order: &[usize],
    budgets: &[TierBudget],
    processes: &[ProcessPolicy],
    options: &FillFastestFirst,
) -> Assignment {
    let slowest = budgets.len().saturating_sub(1);
    let mut remaining: Vec<u64> = budgets.iter().map(|b| b.budget_bytes).collect();
    let slack: Vec<u64> = budgets
        .iter()
        .map(|b| (b.budget_bytes as f64 * KEEP_SLACK) as u64)
        .collect();
    let priority_of = |c: &Candidate| processes.get(c.process).map(|p| p.priority);
    // Higher priorities pick first; within a priority, the ranking decides (stable sort).
    // Advice reorders within a priority: required-fast records pick first, preferred-slow last.
    let walk_key = |c: &Candidate| {
        (
            std::cmp::Reverse(priority_of(c).unwrap_or(0)),
            c.advice_class(),
        )
    };
    // One pass in candidate order (memory order): the top priority, and whether any walk key
    // differs (without priorities or advice there is nothing to reorder).
    let (mut top_priority, mut first_key, mut reorder) = (None, None, false);
    for c in candidates {
        top_priority = top_priority.max(priority_of(c));
        let key = walk_key(c);
        reorder |= *first_key.get_or_insert(key) != key;
    }
    let top_priority = top_priority.unwrap_or(0);
    // Fastest-tier bytes the lower-priority processes may use together.
    let mut lower_fast_allowance = match options.fast_reserve_bytes {
        Some(reserve) => budgets
            .first()
            .map_or(0, |b| b.budget_bytes.saturating_sub(reserve)),
        None => 0,
    };
    let mut process_fast_used = vec![0u64; processes.len()];
    let mut assignment = Assignment {
        tiers: vec![slowest; candidates.len()],
        parts: Vec::new(),
    };
    let reordered;
    let walk = if reorder {
        let keys: Vec<_> = candidates.iter().map(walk_key).collect();
        let mut walk = order.to_vec();
        walk.sort_by_key(|&i| keys[i]);
        reordered = walk;
        &reordered[..]
    } else {
        order
    };
    for (position, &index) in walk.iter().enumerate() {
        // The walk is in rank order, random order in memory: the candidates a few steps ahead
        // are fetched while this one is placed.
        if let Some(&ahead) = walk.get(position + PREFETCH_DISTANCE) {
            prefetch(&candidates[ahead]);
        }
        let c = &candidates[index];
        let mut bytes = c.resident_bytes();
        let policy = processes.get(c.process).cloned().unwrap_or_default();
        let lower = policy.priority < top_priority;
        let home = c.main_tier();
        if c.advice & advice::REQUIRE_SLOW != 0 {
            assignment.tiers[index] = slowest;
            continue;
        }
        if c.advice & advice::SCRATCH != 0 {
            // Not worth the bandwidth: it stays where it is, and counts against that tier.
            let stay = home.unwrap_or(slowest);
            remaining[stay] = remaining[stay].saturating_sub(bytes);
            assignment.tiers[index] = stay;
            continue;
        }
        // Advised fast records may move up before samples show them accessed.
        let lowest_allowed = if c.observed() || c.advice_class() < AdviceClass::None {
            0
        } else {
            home.unwrap_or(slowest)
        };
        // What the fastest tier may still take of this record beyond the tier's budget: the
        // process's cap, and the allowance of the lower priorities.
        let fast_room = |used: &[u64], allowance: u64| {
            let cap = policy
                .fast_cap_bytes
                .map_or(u64::MAX, |cap| cap.saturating_sub(used[c.process]));
            if lower {
                cap.min(allowance)
            } else {
                cap
            }
        };
        let (mut chosen, mut has_part) = (slowest, false);
        for tier in lowest_allowed..slowest {
            let allowance = if home == Some(tier) {
                remaining[tier] + slack[tier]
            } else {
                remaining[tier]
            };
            let other_room = if tier == 0 {
                fast_room(&process_fast_used, lower_fast_allowance)
            } else {
                u64::MAX
            };
            let take = if bytes <= allowance.min(other_room) {
                bytes
            } else if options.record_parts && !has_part {
                // Room for a part, not the whole: it takes all there is (page-aligned). A part
                // the budget limits must be large enough not to come and go with the budget;
                // caps and allowances do not move by themselves.
                let part = remaining[tier].min(other_room) / PAGE_BYTES * PAGE_BYTES;
                let least = if remaining[tier] <= other_room {
                    min_part_bytes(budgets[tier].budget_bytes)
                } else {
                    MIN_PART_BYTES
                };
                if part < least {
                    continue;
                }
                part
            } else {
                continue;
            };
            remaining[tier] = remaining[tier].saturating_sub(take);
            if tier == 0 {
                if let Some(used) = process_fast_used.get_mut(c.process) {
                    *used += take;
                }
                if lower {
                    lower_fast_allowance = lower_fast_allowance.saturating_sub(take);
                }
            }
            if take == bytes {
                chosen = tier;
                break;
            }
            assignment.parts.push(Part {
                candidate: index,
                tier,
                bytes: take,
            });
            has_part = true;
            bytes -= take;
        }
        assignment.tiers[index] = chosen;
    }
    assignment
}

/// How many steps ahead [`assign_tiers`]'s walk fetches candidates.
const PREFETCH_DISTANCE: usize = 16;

/// Brings a candidate into the processor's caches ahead of its use: loads of the fields the walk
/// reads, whose values nothing waits for, let the processor fetch the candidate's cache lines
/// while it places the records before it (without `unsafe` prefetch instructions).
#[inline]
fn prefetch(c: &Candidate) {
    std::hint::black_box((
        c.advice,
        c.process,
        c.recent_accesses,
        c.resident_bytes_by_tier.len(),
    ));
}

/// The smallest part of a record worth placing at all.
pub const MIN_PART_BYTES: u64 = 1 << 20;

/// The smallest part of a record worth placing in what is left of a tier's `budget_bytes`:
/// twice the slack (smaller parts would come and go with the budget), and at least
/// [`MIN_PART_BYTES`].
pub fn min_part_bytes(budget_bytes: u64) -> u64 {
    ((2.0 * KEEP_SLACK * budget_bytes as f64) as u64).max(MIN_PART_BYTES)
}

/// An enforcement's plan: a tier per candidate, and the parts of records placed above it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assignment {
    /// The tier of each candidate (of all of it, or of what its parts leave), indexed like the
    /// candidates.
    pub tiers: Vec<usize>,
    /// At most one per candidate, in the walk's order.
    pub parts: Vec<Part>,
}

impl Assignment {
    /// The part of candidate `index`, if it has one.
    pub fn part_of(&self, index: usize) -> Option<&Part> {
        self.parts.iter().find(|p| p.candidate == index)
    }
}

/// `bytes` of a candidate's record placed in `tier`, faster than the tier of the rest of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub candidate: usize,
    pub tier: usize,
    pub bytes: u64,
}

/// What `fill` leaves free of a tier's capacity for new allocations.
pub fn fill_reserve(capacity_bytes: u64, fill: f64) -> u64 {
    capacity_bytes.saturating_sub((capacity_bytes as f64 * fill) as u64)
}

/// Budget of a tier: `fill` of its capacity, but never more than what objtier already holds
/// there plus what is free, less the reserve the fill leaves for new allocations. A tier
/// fuller than that (first touch fills a node to the kernel's watermark) gets a budget below
/// what objtier holds there, so the plan gives the reserve back: with free memory at the
/// watermark, promotions into the tier fail with ENOMEM.
pub fn tier_budget(
    capacity_bytes: u64,
    free_bytes: u64,
    objtier_resident_bytes: u64,
    fill: f64,
) -> u64 {
    let by_fill = (capacity_bytes as f64 * fill) as u64;
    let reserve = fill_reserve(capacity_bytes, fill);
    let physically = (objtier_resident_bytes + free_bytes).saturating_sub(reserve);
    by_fill.min(physically)
}

/// How proactive placement by allocation site (paper §3.5) decides where a site's new objects
/// start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SitePlacement {
    /// No proactive placement: new objects go where first touch puts them.
    Off,
    /// The paper's conservative scheme (§5.4.1): a site starts its new objects below the
    /// fastest tier only when none of its live records keeps it fast.
    Conservative,
    /// A site starts its new objects in a tier when at least this share of its live records'
    /// bytes is planned there (0.5..=1).
    Threshold(f64),
}

/// The threshold scheme's default share.
pub const DEFAULT_SITE_THRESHOLD: f64 = 0.8;

impl std::str::FromStr for SitePlacement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "unknown proactive placement {s:?}: use off, conservative (or on), or \
                 threshold[:SHARE] with SHARE in [0.5, 1] (default {DEFAULT_SITE_THRESHOLD})"
            )
        };
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "false" => Ok(Self::Off),
            "on" | "true" | "conservative" => Ok(Self::Conservative),
            "threshold" => Ok(Self::Threshold(DEFAULT_SITE_THRESHOLD)),
            other => {
                let share = other
                    .strip_prefix("threshold:")
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .filter(|v| (0.5..=1.0).contains(v))
                    .ok_or_else(bad)?;
                Ok(Self::Threshold(share))
            }
        }
    }
}

impl std::fmt::Display for SitePlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SitePlacement::Off => f.write_str("off"),
            SitePlacement::Conservative => f.write_str("conservative"),
            SitePlacement::Threshold(share) => write!(f, "threshold:{share}"),
        }
    }
}

/// The hash of [`proactive_placements`]' site counts: one 128-bit multiply of the id, folded,
/// with a key and a multiplier drawn from std's random hash keys for each map, instead of
/// SipHash's rounds (most of the time proactive placement took at 10^6 records). Site ids come
/// from the processes, so the hash is keyed like std's: ids chosen to collide for one map's
/// keys collide by chance for the next map's. It is not SipHash's cryptographic strength; a
/// process that could make the daemon's maps degrade would only slow this count down.
#[derive(Clone, Copy)]
struct SiteIds {
    key: u64,
    multiplier: u64,
}

impl SiteIds {
    fn new() -> SiteIds {
        use std::hash::BuildHasher;
        let random = std::collections::hash_map::RandomState::new();
        SiteIds {
            key: random.hash_one(0u64),
            multiplier: random.hash_one(1u64) | 1,
        }
    }
}

impl std::hash::BuildHasher for SiteIds {
    type Hasher = SiteIdHasher;

    fn build_hasher(&self) -> SiteIdHasher {
        SiteIdHasher {
            ids: *self,
            hash: 0,
        }
    }
}

struct SiteIdHasher {
    ids: SiteIds,
    hash: u64,
}

impl std::hash::Hasher for SiteIdHasher {
    #[inline]
    fn write_u64(&mut self, id: u64) {
        let product = ((self.hash ^ id ^ self.ids.key) as u128) * self.ids.multiplier as u128;
        self.hash = product as u64 ^ (product >> 64) as u64;
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

/// One record, as proactive placement sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SiteRecord {
    /// Allocation site id; 0 (unknown) is never placed.
    pub site: u64,
    /// Tier the plan assigned.
    pub tier: usize,
    pub bytes: u64,
    /// Accessed for real and lastingly (the daemon asks for accesses in each of the last two
    /// intervals, after the record's first two).
    pub warm: bool,
}

/// Proactive placement by allocation site (paper §3.5, for any number of tiers): where each
/// site's new objects should start, from where the plan puts its live records. `None` means no
/// placement (new objects go where first touch puts them, normally the fastest tier while it
/// has room). Cold sites then stop taking the fast tier's free room only to be demoted an
/// interval later.
///
/// [`SitePlacement::Conservative`]: the paper places a site only when *all* its live objects
/// are planned slow. With budgets filled by resident bytes, small cold objects often stay
/// planned fast only because they fit the budget's leftover next to a hot object that did not,
/// so a record keeps its site fast only if it is planned into the fastest tier *and* warm. A
/// site is placed, in the fastest tier any of its records is planned into below the fastest,
/// when at least one record is planned below the fastest tier and none keeps it fast; it loses
/// the placement as soon as one does.
///
/// [`SitePlacement::Threshold`]: a site is placed in the tier holding at least the given share
/// of its records' planned bytes (none when that tier is the fastest, or no tier has the share).
/// It places sites whose objects are *mostly* cold, where the conservative scheme waits for all.
pub fn proactive_placements(
    scheme: SitePlacement,
    records: impl IntoIterator<Item = SiteRecord>,
) -> std::collections::BTreeMap<u64, Option<usize>> {
    use std::collections::{BTreeMap, HashMap};
    match scheme {
        SitePlacement::Off => BTreeMap::new(),
        SitePlacement::Conservative => {
            // Per site: whether a record keeps it fast, and the fastest tier below the fastest.
            // Hashed while records are counted, which a million times over is several times
            // quicker than a search tree; ordered once at the end.
            let mut sites = HashMap::<u64, (bool, Option<usize>), _>::with_hasher(SiteIds::new());
            for r in records.into_iter().filter(|r| r.site != 0) {
                let (keeps_fast, slow_tier) = sites.entry(r.site).or_default();
                if r.tier == 0 {
                    *keeps_fast |= r.warm;
                } else {
                    *slow_tier = Some(slow_tier.map_or(r.tier, |t: usize| t.min(r.tier)));
                }
            }
            sites
                .into_iter()
                .map(|(site, (keeps_fast, slow_tier))| (site, slow_tier.filter(|_| !keeps_fast)))
                .collect()
        }
        SitePlacement::Threshold(share) => {
            let mut sites = HashMap::<u64, Vec<u64>, _>::with_hasher(SiteIds::new());
            for r in records.into_iter().filter(|r| r.site != 0) {
                let by_tier = sites.entry(r.site).or_default();
                if by_tier.len() <= r.tier {
                    by_tier.resize(r.tier + 1, 0);
                }
                by_tier[r.tier] += r.bytes;
            }
            sites
                .into_iter()
                .map(|(site, by_tier)| {
                    let total: u64 = by_tier.iter().sum();
                    let tier = by_tier
                        .iter()
                        .position(|&b| total > 0 && b as f64 >= share * total as f64)
                        .filter(|&t| t > 0);
                    (site, tier)
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    const MIB: u64 = 1 << 20;

    /// A deterministic stream of pseudo-random words (xorshift64) from a nonzero `state`.
    pub(crate) fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    /// Records moved whole (the paper's enforcement), as most tests below expect.
    const WHOLE: FillFastestFirst = FillFastestFirst {
        fast_reserve_bytes: None,
        record_parts: false,
    };

    fn reserve(bytes: u64) -> FillFastestFirst {
        FillFastestFirst {
            fast_reserve_bytes: Some(bytes),
            ..WHOLE
        }
    }

    /// A fast tier with `fast_bytes` of budget, and a slow one that takes the rest.
    fn fast_and_slow(fast_bytes: u64) -> [TierBudget; 2] {
        [
            TierBudget {
                budget_bytes: fast_bytes,
            },
            TierBudget {
                budget_bytes: u64::MAX,
            },
        ]
    }

    fn cand(id: usize, len: u64, ema: f64, tiers: [u64; 2]) -> Candidate {
        Candidate {
            id,
            process: 0,
            len_bytes: len,
            created_ns: id as u64,
            last_access_ns: if ema > 0.0 { 100 } else { 0 },
            ema_accesses: ema,
            recent_accesses: ema,
            previous_accesses: ema,
            resident_bytes_by_tier: TierBytes::from_slice(&tiers),
            advice: 0,
        }
    }

    /// Both ways of ranking (packed keys when ids are indices, a comparator otherwise) order
    /// exactly as the comparator the daemon used before (key descending, then main tier, then
    /// id, then input order), with many ties, repeated ids, records with no resident pages,
    /// and -0.0.
    #[test]
    fn prioritize_matches_the_plain_comparator() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let c: Vec<Candidate> = (0..2000)
            .map(|i| {
                let ema = [0.0, -0.0, 1.0, 2.5, 1e-30, 7.0][(next() % 6) as usize];
                let mut tiers = [0u64; 2];
                match next() % 3 {
                    0 => tiers[0] = MIB,
                    1 => tiers[1] = MIB,
                    _ => {}
                }
                let id = if i < 1000 { i } else { (next() % 500) as usize };
                let mut c = cand(id, MIB * (1 + next() % 3), ema, tiers);
                c.created_ns = next() % 7;
                c.last_access_ns = if i % 2 == 0 { 100 } else { next() % 3 };
                c
            })
            .collect();
        for policy in [
            Prioritization::Apb,
            Prioritization::Lru,
            Prioritization::Fifo,
        ] {
            let key = |c: &Candidate| match policy {
                Prioritization::Fifo => c.created_ns as f64,
                Prioritization::Lru => c.last_access_ns as f64,
                Prioritization::Apb => c.apb_rank(),
            };
            let by_comparator = |a: usize, b: usize| {
                key(&c[b])
                    .partial_cmp(&key(&c[a]))
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then_with(|| {
                        let ta = c[a].main_tier().unwrap_or(usize::MAX);
                        let tb = c[b].main_tier().unwrap_or(usize::MAX);
                        ta.cmp(&tb)
                    })
                    .then(c[a].id.cmp(&c[b].id))
            };
            let mut expected: Vec<usize> = (0..c.len()).collect();
            expected.sort_by(|&a, &b| by_comparator(a, b));
            assert_eq!(prioritize(&c, policy), expected, "{policy:?}");
            // The first 1,000 have ids equal to their indices: the packed keys.
            let mut head: Vec<usize> = (0..1000).collect();
            head.sort_by(|&a, &b| by_comparator(a, b));
            assert_eq!(prioritize(&c[..1000], policy), head, "{policy:?}");
        }
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

    /// APB divides by resident bytes: a 64 MiB arena record holding 1 MiB ranks above a fully
    /// resident 8 MiB object with the same accesses.
    #[test]
    fn apb_judges_sparse_records_by_what_they_hold() {
        let c = vec![
            cand(0, 8 * MIB, 10.0, [0, 8 * MIB]),
            cand(1, 64 * MIB, 10.0, [0, MIB]),
            cand(2, 64 * MIB, 10.0, [0, 0]), // nothing resident: by its length
        ];
        assert_eq!(prioritize(&c, Prioritization::Apb), vec![1, 0, 2]);
    }

    #[test]
    fn hot_objects_in_the_slow_tier_are_promoted_and_cold_ones_demoted() {
        // Fast tier: budget for 2 objects. Hot ones start slow; cold ones fill the fast tier.
        let c = vec![
            cand(0, 96 * MIB, 0.0, [96 * MIB, 0]),
            cand(1, 96 * MIB, 0.0, [96 * MIB, 0]),
            cand(2, 96 * MIB, 0.0, [0, 96 * MIB]),
            cand(3, 96 * MIB, 50.0, [0, 96 * MIB]),
            cand(4, 96 * MIB, 80.0, [0, 96 * MIB]),
        ];
        let order = prioritize(&c, Prioritization::Apb);
        assert_eq!(&order[..2], &[4, 3]);
        let budgets = fast_and_slow(2 * 96 * MIB);
        let a = assign_tiers(&c, &order, &budgets, &[ProcessPolicy::default()], &WHOLE).tiers;
        assert_eq!(a, vec![1, 1, 1, 0, 0]);
    }

    #[test]
    fn unobserved_records_are_never_promoted_but_may_stay() {
        let c = vec![cand(0, MIB, 0.0, [0, MIB]), cand(1, MIB, 0.0, [MIB, 0])];
        let order = prioritize(&c, Prioritization::Apb);
        let budgets = fast_and_slow(10 * MIB);
        assert_eq!(
            assign_tiers(&c, &order, &budgets, &[ProcessPolicy::default()], &WHOLE).tiers,
            vec![1, 0]
        );
    }

    #[test]
    fn decaying_records_stay_put_rather_than_climb() {
        let mut c = vec![cand(0, MIB, 0.5, [0, MIB])];
        c[0].recent_accesses = 0.0;
        let order = prioritize(&c, Prioritization::Apb);
        let budgets = fast_and_slow(10 * MIB);
        assert_eq!(
            assign_tiers(&c, &order, &budgets, &[ProcessPolicy::default()], &WHOLE).tiers,
            vec![1]
        );
    }

    #[test]
    fn records_at_the_budget_edge_stay_put() {
        // Budget 100 MiB; 99 MiB of hotter records come first; a 2 MiB record already in the
        // fast tier stays (within the 2 % slack), one in the slow tier is not promoted.
        let hotter = cand(0, 99 * MIB, 1000.0, [99 * MIB, 0]);
        let resident = cand(1, 2 * MIB, 1.0, [2 * MIB, 0]);
        let outside = cand(2, 2 * MIB, 1.0, [0, 2 * MIB]);
        let budgets = fast_and_slow(100 * MIB);
        let c = vec![hotter.clone(), resident];
        let order = prioritize(&c, Prioritization::Apb);
        assert_eq!(
            assign_tiers(&c, &order, &budgets, &[ProcessPolicy::default()], &WHOLE).tiers,
            vec![0, 0]
        );
        let c = vec![hotter, outside];
        let order = prioritize(&c, Prioritization::Apb);
        assert_eq!(
            assign_tiers(&c, &order, &budgets, &[ProcessPolicy::default()], &WHOLE).tiers,
            vec![0, 1]
        );
    }

    #[test]
    fn a_record_too_large_for_the_rest_of_a_budget_gets_the_part_that_fits() {
        // 12 MiB of budget; a hot 32 MiB record and a cooler 1 MiB one, both slow.
        let c = vec![
            cand(0, 32 * MIB, 320.0, [0, 32 * MIB]),
            cand(1, MIB, 1.0, [0, MIB]),
        ];
        let order = prioritize(&c, Prioritization::Apb);
        let budgets = fast_and_slow(12 * MIB);
        let opts = FillFastestFirst::default();
        let a = assign_tiers(&c, &order, &budgets, &[ProcessPolicy::default()], &opts);
        assert_eq!(a.tiers, vec![1, 1]);
        let part = Part {
            candidate: 0,
            tier: 0,
            bytes: 12 * MIB,
        };
        assert_eq!(a.parts, vec![part]);
        assert_eq!(a.part_of(0), Some(&part));
        assert_eq!(a.part_of(1), None);
        // Whole records: the 32 MiB never fits, and the 1 MiB one takes its place.
        let a = assign_tiers(&c, &order, &budgets, &[ProcessPolicy::default()], &WHOLE);
        assert_eq!((a.tiers, a.parts), (vec![1, 0], vec![]));
        // A record already partly fast that still ranks there keeps a part as large as the
        // budget, whatever it holds now.
        let c = vec![cand(0, 32 * MIB, 320.0, [20 * MIB, 12 * MIB])];
        let a = assign_tiers(&c, &[0], &budgets, &[ProcessPolicy::default()], &opts);
        assert_eq!(a.parts[0].bytes, 12 * MIB);
    }

    #[test]
    fn a_record_in_the_fast_tier_keeps_its_place_against_one_barely_hotter() {
        // Same size; the slow one 5 % hotter per byte: the fast one stays first. 20 %: it wins.
        let fast = cand(0, MIB, 100.0, [MIB, 0]);
        let slow = |ema| cand(1, MIB, ema, [0, MIB]);
        let c = vec![fast.clone(), slow(105.0)];
        assert_eq!(prioritize(&c, Prioritization::Apb), vec![0, 1]);
        let c = vec![fast.clone(), slow(120.0)];
        assert_eq!(prioritize(&c, Prioritization::Apb), vec![1, 0]);
        // Half in the fast tier: half the advantage.
        let mut half = fast.clone();
        half.resident_bytes_by_tier = TierBytes::from_slice(&[MIB / 2, MIB / 2]);
        assert!((half.apb_rank() / half.accesses_per_byte() - 1.05).abs() < 1e-9);
        let c = vec![half, slow(104.0)];
        assert_eq!(prioritize(&c, Prioritization::Apb), vec![0, 1]);
        // With two hot records and room for one and a half, a small swap of estimates moves
        // nothing: the one fast stays whole, the other keeps its part.
        let budgets = fast_and_slow(72 * MIB);
        let opts = FillFastestFirst::default();
        let procs = [ProcessPolicy::default()];
        let whole = cand(0, 48 * MIB, 100.0 * 48.0, [48 * MIB, 0]);
        let part = cand(1, 48 * MIB, 104.0 * 48.0, [24 * MIB, 24 * MIB]);
        let c = vec![whole, part];
        let a = assign_tiers(
            &c,
            &prioritize(&c, Prioritization::Apb),
            &budgets,
            &procs,
            &opts,
        );
        assert_eq!(a.tiers, vec![0, 1]);
        assert_eq!(
            a.parts,
            vec![Part {
                candidate: 1,
                tier: 0,
                bytes: 24 * MIB
            }]
        );
    }

    #[test]
    fn parts_are_page_aligned_and_not_too_small() {
        // 99 MiB of hotter records leave 1 MiB: less than twice the 2 % slack (4 MiB), no part.
        let hotter = cand(0, 99 * MIB, 1000.0, [99 * MIB, 0]);
        let outside = cand(1, 8 * MIB, 1.0, [0, 8 * MIB]);
        let c = vec![hotter, outside];
        let order = prioritize(&c, Prioritization::Apb);
        let opts = FillFastestFirst::default();
        let procs = [ProcessPolicy::default()];
        let a = assign_tiers(&c, &order, &fast_and_slow(100 * MIB), &procs, &opts);
        assert_eq!((a.tiers, a.parts), (vec![0, 1], vec![]));
        // With 5.5 MiB + 100 bytes left, the part is 5.5 MiB.
        let budgets = fast_and_slow(104 * MIB + 512 * 1024 + 100);
        let a = assign_tiers(&c, &order, &budgets, &procs, &opts);
        assert_eq!(a.parts[0].bytes, 5 * MIB + 512 * 1024);
        assert_eq!(min_part_bytes(1 << 30), (0.04 * (1u64 << 30) as f64) as u64);
        assert_eq!(min_part_bytes(10 * MIB), MIB);
    }

    #[test]
    fn parts_honour_caps_and_priorities() {
        // A process capped at 32 MiB in the fastest tier gets a 32 MiB part of its 64 MiB record.
        let c = vec![cand(0, 64 * MIB, 9.0, [0, 64 * MIB])];
        let capped = ProcessPolicy {
            fast_cap_bytes: Some(32 * MIB),
            priority: 0,
        };
        let opts = FillFastestFirst::default();
        let a = assign_tiers(&c, &[0], &fast_and_slow(u64::MAX), &[capped], &opts);
        assert_eq!(
            a.parts,
            vec![Part {
                candidate: 0,
                tier: 0,
                bytes: 32 * MIB
            }]
        );
        // A lower priority gets no part without a reservation, and a part of what the
        // reservation leaves it with one.
        let mut c = vec![
            cand(0, 64 * MIB, 90.0, [64 * MIB, 0]),
            cand(1, 64 * MIB, 10.0, [0, 64 * MIB]),
        ];
        c[1].process = 1;
        let order = prioritize(&c, Prioritization::Apb);
        let procs = [
            ProcessPolicy::default(),
            ProcessPolicy {
                fast_cap_bytes: None,
                priority: 5,
            },
        ];
        let budgets = fast_and_slow(200 * MIB);
        let a = assign_tiers(&c, &order, &budgets, &procs, &opts);
        assert_eq!((a.tiers, a.parts), (vec![1, 0], vec![]));
        let opts = FillFastestFirst {
            fast_reserve_bytes: Some(150 * MIB),
            record_parts: true,
        };
        let a = assign_tiers(&c, &order, &budgets, &procs, &opts);
        assert_eq!(a.tiers, vec![1, 0]);
        assert_eq!(
            a.parts,
            vec![Part {
                candidate: 0,
                tier: 0,
                bytes: 50 * MIB
            }]
        );
        // Required-slow and scratch records never get a part.
        let mut c = vec![cand(0, 32 * MIB, 320.0, [0, 32 * MIB])];
        for advice in [advice::REQUIRE_SLOW, advice::SCRATCH] {
            c[0].advice = advice;
            let a = assign_tiers(&c, &[0], &fast_and_slow(12 * MIB), &procs[..1], &opts);
            assert_eq!((a.tiers.clone(), a.parts), (vec![1], vec![]), "{advice:#x}");
        }
    }

    #[test]
    fn per_process_fast_cap_is_honoured() {
        let mut c = vec![
            cand(0, 64 * MIB, 9.0, [0, 64 * MIB]),
            cand(1, 64 * MIB, 8.0, [0, 64 * MIB]),
        ];
        c[1].process = 1;
        let order = prioritize(&c, Prioritization::Apb);
        let budgets = fast_and_slow(u64::MAX);
        let capped = ProcessPolicy {
            fast_cap_bytes: Some(32 * MIB),
            priority: 0,
        };
        let a = assign_tiers(
            &c,
            &order,
            &budgets,
            &[capped, ProcessPolicy::default()],
            &WHOLE,
        )
        .tiers;
        assert_eq!(a, vec![1, 0]);
    }

    #[test]
    fn only_the_highest_priority_competes_for_the_fast_tier() {
        // Process 0 (priority 0) is hotter, process 1 (priority 5) is attached too.
        let mut c = vec![
            cand(0, 64 * MIB, 90.0, [64 * MIB, 0]),
            cand(1, 64 * MIB, 10.0, [0, 64 * MIB]),
        ];
        c[1].process = 1;
        let order = prioritize(&c, Prioritization::Apb);
        let budgets = fast_and_slow(100 * MIB);
        let procs = [
            ProcessPolicy::default(),
            ProcessPolicy {
                fast_cap_bytes: None,
                priority: 5,
            },
        ];
        // All or nothing (the paper's policy): the low-priority object leaves the fast tier,
        // even though it ranks hotter and there is room for both.
        let roomy = [
            TierBudget {
                budget_bytes: 200 * MIB,
            },
            TierBudget {
                budget_bytes: u64::MAX,
            },
        ];
        assert_eq!(
            assign_tiers(&c, &order, &roomy, &procs, &WHOLE).tiers,
            vec![1, 0]
        );
        // With a reservation (the refinement), the others may use what the top priority does
        // not need beyond it: 200 - 64 reserved = 136 MiB for them.
        assert_eq!(
            assign_tiers(&c, &order, &roomy, &procs, &reserve(64 * MIB)).tiers,
            vec![0, 0]
        );
        assert_eq!(
            assign_tiers(&c, &order, &roomy, &procs, &reserve(150 * MIB)).tiers,
            vec![1, 0]
        );
        // The top priority picks first: with room for one record, it gets it.
        assert_eq!(
            assign_tiers(&c, &order, &budgets, &procs, &reserve(16 * MIB)).tiers,
            vec![1, 0]
        );
        // When the high-priority process is gone, the other gets the fast tier back.
        let alone = vec![c[0].clone()];
        let order = prioritize(&alone, Prioritization::Apb);
        assert_eq!(
            assign_tiers(&alone, &order, &budgets, &procs, &WHOLE).tiers,
            vec![0]
        );
    }

    #[test]
    fn three_tiers_fill_fastest_first() {
        let mk = |id, ema| Candidate {
            id,
            process: 0,
            len_bytes: MIB,
            created_ns: 0,
            last_access_ns: 1,
            ema_accesses: ema,
            recent_accesses: ema,
            previous_accesses: ema,
            resident_bytes_by_tier: TierBytes::from_slice(&[0, 0, MIB]),
            advice: 0,
        };
        let c = vec![mk(0, 1.0), mk(1, 3.0), mk(2, 2.0)];
        let order = prioritize(&c, Prioritization::Apb);
        let budgets = [
            TierBudget { budget_bytes: MIB },
            TierBudget { budget_bytes: MIB },
            TierBudget {
                budget_bytes: u64::MAX,
            },
        ];
        assert_eq!(
            assign_tiers(&c, &order, &budgets, &[ProcessPolicy::default()], &WHOLE).tiers,
            vec![2, 0, 1]
        );
    }

    #[test]
    fn lru_and_fifo_orders() {
        let mut c = vec![cand(0, MIB, 1.0, [0, MIB]), cand(1, MIB, 1.0, [0, MIB])];
        c[0].last_access_ns = 500;
        assert_eq!(prioritize(&c, Prioritization::Lru), vec![0, 1]);
        assert_eq!(prioritize(&c, Prioritization::Fifo), vec![1, 0]);
        assert!("APB".parse::<Prioritization>().is_ok());
        assert!("hot".parse::<Prioritization>().is_err());
    }

    #[test]
    fn budget_respects_fill_and_free_memory() {
        // 512 MiB node, 90 %: 460.8 MiB by fill; only 100 MiB free and we hold 50 MiB there.
        let b = tier_budget(512 * MIB, 100 * MIB, 50 * MIB, 0.9);
        assert!(b < 100 * MIB && b > 90 * MIB, "{b}");
        assert_eq!(tier_budget(1000, 1000, 0, 0.9), 900);
        // First touch filled the node: 14 MiB free of 512, 415 MiB ours. The budget gives the
        // reserve (51.2 MiB) back.
        let b = tier_budget(512 * MIB, 14 * MIB, 415 * MIB, 0.9);
        assert_eq!(
            b,
            415 * MIB + 14 * MIB - (512 * MIB - (512.0 * MIB as f64 * 0.9) as u64)
        );
        assert!(b < 415 * MIB - 37 * MIB, "{b}");
        assert_eq!(
            tier_budget(1000, 10, 50, 0.9),
            0,
            "less than the reserve in all"
        );
    }

    #[test]
    fn advice_reorders_and_pins_within_a_priority() {
        let budgets = [
            TierBudget { budget_bytes: 200 },
            TierBudget {
                budget_bytes: u64::MAX,
            },
        ];
        let hot = |id| cand(id, 100, 50.0, [0, 100]);
        let mut c = vec![hot(0), hot(1), cand(2, 100, 0.0, [0, 100]), hot(3), hot(4)];
        c[2].advice = advice::REQUIRE_FAST; // never sampled, but required: goes first
        c[3].advice = advice::COLD; // sampled hot, but advised cold: picks last
        c[4].advice = advice::REQUIRE_SLOW;
        c[1].advice = advice::SCRATCH; // stays where it is (slow), whatever its heat
        let order = prioritize(&c, Prioritization::Apb);
        let got = assign_tiers(&c, &order, &budgets, &[ProcessPolicy::default()], &WHOLE).tiers;
        assert_eq!(got, vec![0, 1, 0, 1, 1]);
    }

    fn rec(site: u64, tier: usize, bytes: u64, warm: bool) -> SiteRecord {
        SiteRecord {
            site,
            tier,
            bytes,
            warm,
        }
    }

    /// Structured site ids (consecutive, or apart by a power of two) hash apart, and two maps
    /// hash them differently.
    #[test]
    fn site_ids_hash_apart_and_differently_per_map() {
        use std::hash::BuildHasher;
        let (one, other) = (SiteIds::new(), SiteIds::new());
        let ids: std::collections::BTreeSet<u64> = [0, 12, 32, 48]
            .iter()
            .flat_map(|&shift| (1..=4096u64).map(move |i| i << shift))
            .collect();
        let mut hashes = std::collections::HashSet::new();
        let mut differ = 0;
        for &id in &ids {
            assert!(hashes.insert(one.hash_one(id)), "{id:#x} collides");
            differ += usize::from(one.hash_one(id) != other.hash_one(id));
        }
        assert!(differ > ids.len() - 4);
    }

    #[test]
    fn proactive_placement_for_sites_kept_out_of_the_fast_tier() {
        let got = proactive_placements(
            SitePlacement::Conservative,
            [
                rec(1, 1, MIB, false),
                rec(1, 1, MIB, true), // all planned slow: starts slow
                rec(2, 1, MIB, false),
                rec(2, 0, MIB, true), // one record planned fast and accessed: no placement
                rec(3, 2, MIB, false),
                rec(3, 1, MIB, false), // three tiers: the fastest of its tiers below the fastest
                rec(4, 0, MIB, false),
                rec(4, 1, MIB, false), // fast only by the budget's leftover, not by use: slow
                rec(5, 0, MIB, false), // nothing planned slow: no evidence, no placement
                rec(0, 1, MIB, false), // unknown site: never placed
            ],
        );
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            vec![
                (1, Some(1)),
                (2, None),
                (3, Some(1)),
                (4, Some(1)),
                (5, None)
            ]
        );
        assert!(proactive_placements(SitePlacement::Off, [rec(1, 1, MIB, false)]).is_empty());
    }

    #[test]
    fn threshold_placement_follows_the_share_of_bytes() {
        let got = proactive_placements(
            SitePlacement::Threshold(0.8),
            [
                // 9 of 10 MiB planned slow, one warm MiB fast: placed slow (conservative would not).
                rec(1, 1, 9 * MIB, false),
                rec(1, 0, MIB, true),
                // 7 of 10 MiB slow: under the share, no placement.
                rec(2, 1, 7 * MIB, false),
                rec(2, 0, 3 * MIB, false),
                // Mostly fast: no placement.
                rec(3, 0, 9 * MIB, true),
                rec(3, 1, MIB, false),
                // Three tiers, the middle one holds the share.
                rec(4, 1, 8 * MIB, false),
                rec(4, 2, 2 * MIB, false),
            ],
        );
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            vec![(1, Some(1)), (2, None), (3, None), (4, Some(1))]
        );
        assert_eq!("threshold".parse(), Ok(SitePlacement::Threshold(0.8)));
        assert_eq!("threshold:0.6".parse(), Ok(SitePlacement::Threshold(0.6)));
        assert_eq!("on".parse(), Ok(SitePlacement::Conservative));
        assert!("threshold:0.2".parse::<SitePlacement>().is_err());
        assert!("sometimes"
            .parse::<SitePlacement>()
            .unwrap_err()
            .contains("conservative"));
    }
}
