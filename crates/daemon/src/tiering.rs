//! One profiling interval: sample, aggregate, find pages, plan, migrate.
//!
//! 1. Buffered allocations that survived the interval become records.
//! 2. The access source's regions are attributed to the records they overlap; each record's
//!    EMA of sampled accesses is updated (equation 1, alpha 0.1): in step 4's pass over the
//!    records when the interval enforces (one walk of the records fewer), else after step 3.
//! 3. The policy's triggers decide whether to enforce a new assignment now (at every interval
//!    by default); if none fires, the interval ends here.
//! 4. `move_pages` with no target reports where the pages of the records are, so budgets are
//!    charged with what is really resident and moves name only pages that must move. While the
//!    records hold at most `LOCATE_PAGES_MIN` pages, all are located every time; beyond, a
//!    rotating share of them (a quarter, at most `LOCATE_PAGES_MAX` pages; plus the new and the
//!    just-moved ones), the others counted where they were when last located, which keeps the
//!    kernel's query time per interval bounded however large the job.
//! 5. The policy orders the records and assigns each a tier, filling tiers fastest first up to
//!    their budget.
//! 6. Pages are moved in batches, hottest promotions first, each preceded by just the demotions
//!    (coldest first) that make its room in the fast tier; the other demotions follow. Moving
//!    every demotion before any promotion would keep the hottest pages waiting behind a whole
//!    eviction, many seconds when a high-priority program displaces another. A step migrates
//!    for at most two intervals; the rest is planned again at once, with fresh samples.
//!    Before any page moves, each transparent huge page that the step moves only in part is
//!    split (`move_pages` moves a huge page whole: its other base pages would come along, and
//!    go back at the next step).

use crate::process::ResidentPages;
use crate::source::Target;
use crate::Daemon;
use objtier_policy::{
    proactive_placements, tier_budget, Candidate, ProcessPolicy, Signals, SiteRecord, TierBudget,
    TierBytes,
};
use objtier_sys::damon::coalesce_ranges;
use objtier_sys::pages::{MoveError, PageMover, PageStatus, BATCH_PAGES};
use objtier_wire::PAGE_SIZE;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

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

/// How long one step may migrate, in intervals, before it plans again with fresh samples. One
/// makes re-planning frequent but pays a full page query each time; two lets a typical
/// promotion finish in one step while a long eviction still yields every few seconds.
const MIGRATION_INTERVALS_PER_STEP: u32 = 2;

/// Appends `pages` for (process, tier) to `out`, extending the last entry when it is the same.
fn push_merged(
    out: &mut Vec<(usize, usize, Vec<u64>)>,
    process: usize,
    tier: usize,
    pages: Vec<u64>,
) {
    if pages.is_empty() {
        return;
    }
    match out.last_mut() {
        Some((p, t, list)) if *p == process && *t == tier => list.extend(pages),
        _ => out.push((process, tier, pages)),
    }
}

/// Intervals a record must have lived before its accesses keep its site fast, and intervals a
/// proactive placement decision must hold before it is applied.
const PROACTIVE_SETTLED_INTERVALS: u32 = 2;

/// Whether a record `age_ns` old was seen accessed, in the last interval (`recent` accesses) or
/// the one before (`previous`), when what was seen tells of the program:
/// - not in the interval it was born in: an object is written when it is initialised, so that
///   interval says nothing of whether it stays cold. Without this, a placed site that keeps
///   allocating (a new object written once every 500 ms, the VM's warm-start scenario) had its
///   placement disproved whenever sampling caught a birth, and the site store forgot it.
/// - not in an interval in which the daemon moved its pages (`moved`: in the last interval, in
///   the one before). In the same scenario a cold object demoted (its huge pages split) was
///   sampled accessed in the interval of its demotion, never again: 1 run in 13 of a quiet
///   host, and the site store forgot the placement.
fn accessed_by_the_program(
    recent: f64,
    previous: f64,
    age_ns: u64,
    interval_ns: u64,
    moved: [bool; 2],
) -> bool {
    (recent > 0.0 && age_ns >= interval_ns && !moved[0])
        || (previous > 0.0 && age_ns >= 2 * interval_ns && !moved[1])
}

/// Most ranges handed to DAMON per process; beyond, the closest records share a region.
const MAX_RANGES_PER_PROCESS: usize = 2000;

/// Splits both move lists into batches of at most `BATCH_PAGES` and orders them so that the
/// hottest pages move first, each promotion into the fastest tier preceded by just enough
/// demotions to make its room there (`fast_room_pages`: free pages of the fastest tier beyond
/// the fill reserve); the demotions that no promotion needed follow. Yields
/// (process, tier, pages, is_demotion).
fn schedule_batches(
    demotions: Vec<(usize, usize, Vec<u64>)>,
    promotions: Vec<(usize, usize, Vec<u64>)>,
    mut fast_room_pages: i64,
) -> Vec<(usize, usize, Vec<u64>, bool)> {
    let split = |list: Vec<(usize, usize, Vec<u64>)>, demote: bool| {
        list.into_iter()
            .flat_map(move |(pi, tier, pages)| {
                pages
                    .chunks(BATCH_PAGES)
                    .map(|c| (pi, tier, c.to_vec(), demote))
                    .collect::<Vec<_>>()
            })
            .collect::<std::collections::VecDeque<_>>()
    };
    let (mut down, up) = (split(demotions, true), split(promotions, false));
    let mut out = Vec::with_capacity(down.len() + up.len());
    for batch in up {
        if batch.1 == 0 {
            while fast_room_pages < batch.2.len() as i64 {
                let Some(demotion) = down.pop_front() else {
                    break;
                };
                fast_room_pages += demotion.2.len() as i64;
                out.push(demotion);
            }
            fast_room_pages -= batch.2.len() as i64;
        }
        out.push(batch);
    }
    out.extend(down);
    out
}

/// Where to split huge pages before a step's moves. `move_pages(2)` moves a transparent huge
/// page whole, so moving some of its base pages and not others (two objects sharing it that
/// the plan puts in different tiers, the end of a record part) would carry the others along,
/// and the next step would move them back: 2 MiB each way at every other enforcement. For each
/// `huge`-aligned block that the moves (process, tier, pages) cover only in part, or send to
/// different tiers, one page to split it at ([`PageMover::split_huge`], which deactivates that
/// page): a demoted page of the block if it has one, else a page beside the promoted ones,
/// which stays behind on the slower node. Per process index, pages ascending.
fn huge_page_splits(
    demotions: &[(usize, usize, Vec<u64>)],
    promotions: &[(usize, usize, Vec<u64>)],
    huge: u64,
) -> Vec<(usize, Vec<u64>)> {
    struct Block {
        pages: u64,
        /// The tier every moved page goes to, `usize::MAX` when they go to several.
        tier: usize,
        demoted: Option<u64>,
        lowest: u64,
        highest: u64,
    }
    let page = PAGE_SIZE as u64;
    let mut blocks: HashMap<(usize, u64), Block> = HashMap::new();
    let lists = demotions.iter().map(|l| (l, true));
    for ((process, tier, pages), demote) in lists.chain(promotions.iter().map(|l| (l, false))) {
        for &address in pages {
            let block = blocks
                .entry((*process, address / huge * huge))
                .or_insert(Block {
                    pages: 0,
                    tier: *tier,
                    demoted: None,
                    lowest: address,
                    highest: address,
                });
            block.pages += 1;
            if block.tier != *tier {
                block.tier = usize::MAX;
            }
            if demote && block.demoted.is_none() {
                block.demoted = Some(address);
            }
            block.lowest = block.lowest.min(address);
            block.highest = block.highest.max(address);
        }
    }
    let mut splits: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for ((process, start), block) in blocks {
        if block.pages == huge / page && block.tier != usize::MAX {
            continue;
        }
        let at = block.demoted.unwrap_or(if block.lowest > start {
            block.lowest - page
        } else if block.highest + page < start + huge {
            block.highest + page
        } else {
            block.lowest
        });
        splits.entry(process).or_default().push(at);
    }
    splits
        .into_iter()
        .map(|(process, mut pages)| {
            pages.sort_unstable();
            (process, pages)
        })
        .collect()
}

/// Pages of one record, located in the per-process status list.
struct RecordPages {
    process: usize,
    /// Address of the first page.
    start: u64,
    /// Index of its first page's status, or [`NOT_LOCATED`] when it was counted from its last
    /// location instead.
    first_page: usize,
    pages: usize,
    site: u64,
}

/// An enforcement's per-record buffers, kept by the daemon from one enforcement to the next:
/// at 10^6 records they are about 150 MB, and fresh ones every interval cost more in page
/// faults than the work done in them (docs/performance.md, "Engine planning cost").
#[derive(Default)]
pub(crate) struct IntervalBuffers {
    candidates: Vec<objtier_policy::Candidate>,
    spans: Vec<RecordPages>,
    /// Per process, the statuses of its located pages.
    statuses: Vec<Vec<PageStatus>>,
}

impl IntervalBuffers {
    /// Empties the buffers for an enforcement over `records` records of `processes` processes.
    fn prepare(&mut self, records: usize, processes: usize) {
        self.candidates.clear();
        self.spans.clear();
        self.candidates.reserve(records);
        self.spans.reserve(records);
        self.statuses.resize_with(processes, Vec::new);
        self.statuses.iter_mut().for_each(Vec::clear);
    }

    /// Gives memory back when a buffer holds far more than this enforcement used (the records
    /// went away, or a first enforcement located every page).
    fn trim(&mut self) {
        fn trim<T>(v: &mut Vec<T>) {
            if v.capacity() > 4 * v.len() + 65536 {
                v.shrink_to(2 * v.len());
            }
        }
        trim(&mut self.candidates);
        trim(&mut self.spans);
        self.statuses.iter_mut().for_each(trim);
    }
}

/// A part of a record planned in a faster tier than the rest of it, in pages.
#[derive(Clone, Copy, Debug)]
struct PartPages {
    tier: usize,
    pages: usize,
    /// How many pages fewer than `pages` it may hold before any move up.
    below: usize,
    /// How many pages more than `pages` it may hold before any move down: none in the fastest
    /// tier for a process with a fast-tier cap, which is a promise (`objtier run
    /// --fast-capacity`), where the tolerance once let a part that filled the cap keep 4 MiB
    /// beyond it.
    above: usize,
}

/// The pages of a record part, for a record starting at `start`: shortened to end on a boundary
/// of the system's transparent huge pages (`huge` bytes) where that leaves it any. A part's
/// tier gets the record's first pages (`moves_of`), and `move_pages` moves a huge page whole,
/// so a part that ends inside one splits it (`huge_page_splits`): the pages on either side then
/// stay apart, and the program's accesses to them each need a TLB entry of their own. A part
/// is shortened by less than a huge page, which its tier keeps as room.
fn part_on_huge_boundary(start: u64, pages: usize, huge: Option<u64>) -> usize {
    let Some(huge) = huge.filter(|&huge| huge > PAGE_SIZE as u64) else {
        return pages;
    };
    let end = start + pages as u64 * PAGE_SIZE as u64;
    let boundary = end / huge * huge;
    if boundary > start {
        ((boundary - start) / PAGE_SIZE as u64) as usize
    } else {
        pages
    }
}

/// `RecordPages::first_page` of a record not located this interval.
const NOT_LOCATED: usize = usize::MAX;

/// Pages the kernel is asked to locate per interval, at most (plus the records whose location is
/// not known): about 60 ms of `move_pages` status queries at the ~230 ns a page measured on the
/// development host, for 1 GiB of records.
const LOCATE_PAGES_MAX: u64 = 1 << 18;

/// Records of up to this many pages (64 MiB) are all located every interval.
const LOCATE_PAGES_MIN: u64 = 1 << 14;

/// Between the two, each interval locates this share of the records' pages: every record is
/// located at least every fourth interval (8 s at the default interval).
const LOCATE_TURNS: u64 = 4;

/// How many of `record_pages` pages one interval locates. Locating is not free where it counts:
/// reading a page's entry walks its page table and `struct page` (the evaluation's oracle
/// counted 1.8-2.2 M cache misses a run for programs of ~200 MiB located every interval, as
/// much as a tenth of the kernel's traffic, docs/evaluation.md), while a record's pages move
/// only when the daemon moves them (which it knows: moved records are located at the next
/// interval) or when the program touches or frees pages.
fn locate_pages_per_interval(record_pages: u64) -> u64 {
    (record_pages / LOCATE_TURNS).clamp(LOCATE_PAGES_MIN, LOCATE_PAGES_MAX)
}

/// Whether a record not needing it is located at this enforcement: one in `share` of them, by
/// address, a different share each time. The unit is the 2 MiB block a record starts in: the
/// records located together lie together, so that the kernel is asked about runs of pages
/// (what reading `/proc/PID/pagemap` is cheap for, and a huge page is located whole).
pub fn locate_in_turn(start: u64, share: u64, turn: u64) -> bool {
    // Fibonacci hashing of the block number spreads neighbouring blocks over the turns.
    let spread = (start >> 21).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
    share <= 1 || spread % share == turn % share
}

impl Daemon {
    /// Splits the huge pages that this step's moves cover in part ([`huge_page_splits`]).
    /// Failing to is not an error: the step goes on, and the pages of such a huge page move
    /// together, as they would without the split.
    fn split_huge_pages(
        &mut self,
        process_ids: &[u64],
        demotions: &[(usize, usize, Vec<u64>)],
        promotions: &[(usize, usize, Vec<u64>)],
        huge: u64,
        report: &mut IntervalReport,
    ) {
        for (pi, pages) in huge_page_splits(demotions, promotions, huge) {
            let process = &self.processes[&process_ids[pi]];
            if process.exited() {
                continue;
            }
            let pid = process.pid;
            tracing::debug!(
                pid,
                count = pages.len(),
                "splitting huge pages at {:x?}",
                &pages[..pages.len().min(8)]
            );
            match self.mover.split_huge(pid, &pages) {
                Ok(_) => report.huge_page_splits += pages.len() as u64,
                Err(MoveError::ProcessGone { .. }) => {}
                Err(e) if !self.huge_split_failed => {
                    self.huge_split_failed = true;
                    tracing::warn!(pid, "{e}");
                }
                Err(e) => tracing::debug!(pid, "{e}"),
            }
        }
    }

    /// Updates each process's proactive site placements from this interval's plan.
    fn place_sites_proactively(
        &mut self,
        process_ids: &[u64],
        spans: &[RecordPages],
        candidates: &[Candidate],
        assignment: &[usize],
    ) {
        let now = crate::monotonic_ns();
        // A record's first interval says little: it was just initialised (written), so it looks
        // hot whatever its future. Only records at least this old keep their site fast, and only
        // when accessed in each of the last two intervals: a page just migrated can look
        // accessed for one interval (the kernel may map the new copy young).
        let settled_ns =
            PROACTIVE_SETTLED_INTERVALS as u64 * self.interval_length.as_nanos() as u64;
        for (pi, id) in process_ids.iter().enumerate() {
            // A process whose pages are never moved is placed by its own placement only.
            if self.processes[id].no_migrate {
                continue;
            }
            // A process's records are consecutive in the plan.
            let mine = spans.partition_point(|s| s.process < pi)
                ..spans.partition_point(|s| s.process <= pi);
            // Watched placements whose site had a record seen accessed in either of the last
            // two intervals: this plan confirms the others (for the site store). Any access
            // counts, not only sustained ones as for the live placement: a remembered placement
            // applies to a next run's every object from the start, where sampling that misses a
            // hot object one interval in two would have it born slow (lammps's neighbour lists
            // under DAMON). Only watched sites are collected: a million records make no set.
            let (evidence, moved_in) = {
                let p = &self.processes[id];
                (&p.placement_evidence, &p.moved_in)
            };
            let interval_ns = self.interval_length.as_nanos() as u64;
            // This interval's number; the last one moved what the daemon planned then.
            let this = self.totals.intervals;
            let busy: std::collections::HashSet<u64> = spans[mine.clone()]
                .iter()
                .zip(&candidates[mine.clone()])
                .filter(|(span, c)| {
                    evidence.contains_key(&span.site) && {
                        let moves = moved_in.get(&span.start);
                        let moved_ago = |ago| {
                            this.checked_sub(ago)
                                .is_some_and(|i| moves.is_some_and(|n| n.contains(&i)))
                        };
                        let moved = [moved_ago(1), moved_ago(2)];
                        accessed_by_the_program(
                            c.recent_accesses,
                            c.previous_accesses,
                            now.saturating_sub(c.created_ns),
                            interval_ns,
                            moved,
                        )
                    }
                })
                .map(|(span, _)| span.site)
                .collect();
            let wishes = proactive_placements(
                self.config.proactive,
                spans[mine.clone()]
                    .iter()
                    .zip(&candidates[mine.clone()])
                    .zip(&assignment[mine])
                    .map(|((span, c), &tier)| {
                        let settled = now.saturating_sub(c.created_ns) >= settled_ns;
                        let sustained = c.recent_accesses > 0.0 && c.previous_accesses > 0.0;
                        SiteRecord {
                            site: span.site,
                            tier,
                            bytes: c.len_bytes,
                            warm: sustained && settled,
                        }
                    }),
            );
            let p = self
                .processes
                .get_mut(id)
                .expect("the ids were just read from the map");
            p.placement_plans_ended(|site| busy.contains(&site));
            // Sites placed earlier that have no live records now keep their placement: the
            // policy has nothing new to say about them. A wish must hold for
            // PROACTIVE_SETTLED_INTERVALS intervals in a row before it is applied, so that one
            // interval's sampling noise does not flip a site back and forth.
            for (site, tier) in wishes {
                let tier = tier.map(|t| t as u32);
                let streak = p.proactive_streaks.entry(site).or_insert((tier, 0));
                if streak.0 == tier {
                    streak.1 += 1;
                } else {
                    *streak = (tier, 1);
                }
                if streak.1 < PROACTIVE_SETTLED_INTERVALS {
                    continue;
                }
                if p.place_site_auto(site, tier) {
                    tracing::info!(
                        pid = p.pid,
                        site = format_args!("{site:#x}"),
                        ?tier,
                        "proactive placement"
                    );
                }
            }
        }
    }
}

impl Daemon {
    /// A tier's capacity and its room for objects: free memory, and its clean cold file cache
    /// unless `--reclaim-cache off` (moving pages in makes the kernel reclaim that cache). What
    /// the budgets and the pressure trigger both count.
    fn tier_room(&self, tier: usize) -> (u64, u64) {
        let (capacity, free) = self.topology.tier_bytes(tier);
        let cache = if self.config.reclaim_cache {
            self.topology.tier_cold_cache_bytes(tier)
        } else {
            0
        };
        (capacity, free + cache)
    }

    /// Step 3: asks the policy's triggers whether to enforce now; records why in `report`.
    /// Besides the triggers, a migration left unfinished by the last step (time or rate limit)
    /// goes on, and a change of the attached priorities that involves programs of different
    /// priority re-plans; the triggers wait for a sampling source's first samples.
    fn check_triggers(&mut self, report: &mut IntervalReport) -> bool {
        let (fast_capacity_bytes, fast_free_bytes) = if self.topology.tiers.is_empty() {
            (0, 0)
        } else {
            self.tier_room(0)
        };
        let since = &mut self.since_enforcement;
        since.intervals = since.intervals.saturating_add(1);
        for p in self.processes.values_mut() {
            since.allocated_bytes = since
                .allocated_bytes
                .saturating_add(std::mem::take(&mut p.allocated_unclaimed));
        }
        let (llc_misses, instructions) = match self.llc_counters.as_mut().map(|c| c.read()) {
            Some(Ok((misses, instructions))) => (Some(misses), Some(instructions)),
            Some(Err(e)) => {
                tracing::warn!("cannot read the LLC counters: {e}");
                (None, None)
            }
            None => (None, None),
        };
        if let (Some(m), Some(i)) = (llc_misses, instructions) {
            report.llc_misses_per_instruction = (i > 0).then(|| m as f64 / i as f64);
        }
        let signals = Signals {
            intervals_since_enforcement: since.intervals,
            allocated_bytes_since_enforcement: since.allocated_bytes,
            fast_capacity_bytes,
            fast_free_bytes,
            llc_misses,
            instructions,
        };
        let mut reasons = self.policy.check_triggers(&signals);
        // A trigger that fires before the source has seen any access (DAMON's first interval,
        // right after a program allocated its data) would plan blind, and use up what it
        // counted: the allocation trigger's bytes would then never come again for a program
        // that allocates once. It waits for the first samples instead.
        if !reasons.is_empty() && self.source.samples() && since.attributed_weight <= 0.0 {
            tracing::debug!(
                ?reasons,
                "a trigger fired before any access was sampled: waiting"
            );
            reasons.clear();
        }
        let mut priorities: Vec<i32> = self.processes.values().map(|p| p.priority).collect();
        priorities.sort_unstable();
        priorities.dedup();
        // Only a change that involves programs of different priority re-plans (one arriving or
        // leaving beside another): the first program attaching, or a lone program's priority,
        // has nobody to compete with. Planning then, before any access was sampled, would also
        // take the allocation trigger's bytes for a blind plan: a program that allocates at
        // start would never get an informed one.
        if priorities != since.priorities && (priorities.len() > 1 || since.priorities.len() > 1) {
            reasons.push("the attached application priorities changed".into());
        }
        if self
            .last_interval
            .as_ref()
            .is_some_and(|r| r.deferred_pages + r.rate_limited_pages > 0)
        {
            reasons.push("the last migration was left unfinished".into());
        }
        if reasons.is_empty() {
            return false;
        }
        tracing::debug!(?reasons, "enforcing");
        *since = SinceEnforcement {
            priorities,
            ..SinceEnforcement::default()
        };
        report.enforced = true;
        // A process planned with samples of its own is no longer waiting for its first plan.
        for p in self.processes.values_mut() {
            p.planned |= p.sampled;
        }
        report.trigger_reasons = reasons;
        true
    }
}

/// Step 2 for one record: its EMA of sampled accesses and its last two intervals' samples move
/// on by one interval (its last access time was set by attribution, from the observations').
fn age(aggregate: &dyn objtier_policy::Aggregate, record: &mut crate::process::Record) {
    // Below the smallest normal f32 (about 10^-38 accesses an interval) the EMA is 0: a decaying
    // value would otherwise end as a subnormal, slow to compute with, that never reaches 0 (0.9
    // times the smallest subnormal rounds back up to it).
    let aggregated =
        aggregate.aggregate(record.ema_accesses as f64, record.interval_accesses as f64) as f32;
    record.ema_accesses = if aggregated < f32::MIN_POSITIVE {
        0.0
    } else {
        aggregated
    };
    record.previous_accesses = record.recent_accesses;
    record.recent_accesses = record.interval_accesses;
    record.interval_accesses = 0.0;
}

impl Daemon {
    /// At debug level, each process's four hottest records.
    fn log_hottest(&self) {
        if !tracing::enabled!(tracing::Level::DEBUG) {
            return;
        }
        for p in self.processes.values() {
            let mut hottest: Vec<(u64, &crate::process::Record)> = p.records.iter().collect();
            hottest.sort_by(|a, b| b.1.ema_accesses.total_cmp(&a.1.ema_accesses));
            for (start, r) in hottest.iter().take(4) {
                tracing::debug!(
                    pid = p.pid,
                    start = format_args!("{start:#x}"),
                    len = r.len,
                    recent = r.recent_accesses,
                    ema = r.ema_accesses,
                    "hot record"
                );
            }
        }
    }
}

/// Pages of the record at `start`, whose pages have `statuses`, that must move for it to be
/// in `target`, but for `part` of it in a faster tier: (down, up), each as (tier, pages).
/// `current` is the tier a page's status says it is in (none: not present).
///
/// The part is the pages already in its tier (or faster), as many as it is planned to hold;
/// when it holds too few, the first pages of the record not in it join it. Within its
/// tolerance a part keeps what it holds: a budget that moves a little moves no page.
#[allow(clippy::type_complexity)]
fn moves_of(
    start: u64,
    target: usize,
    part: Option<PartPages>,
    statuses: &[PageStatus],
    current: impl Fn(PageStatus) -> Option<usize>,
) -> (Vec<(usize, Vec<u64>)>, Vec<(usize, Vec<u64>)>) {
    let (mut down, mut up): (Vec<(usize, Vec<u64>)>, Vec<(usize, Vec<u64>)>) =
        (Vec::new(), Vec::new());
    let mut send = |page: u64, from: usize, to: usize| {
        let list = if from < to { &mut down } else { &mut up };
        match list.iter_mut().find(|(t, _)| *t == to) {
            Some((_, pages)) => pages.push(page),
            None => list.push((to, vec![page])),
        }
    };
    let pages = (start..).step_by(PAGE_SIZE);
    let Some(part) = part else {
        for (page, &status) in pages.zip(statuses) {
            match current(status) {
                Some(from) if from != target => send(page, from, target),
                _ => {} // in place, not present, or the process is gone
            }
        }
        return (down, up);
    };
    let have = statuses
        .iter()
        .filter(|&&s| current(s).is_some_and(|t| t <= part.tier))
        .count();
    let keep = if have > part.pages + part.above {
        part.pages
    } else {
        have
    };
    let add = if part.pages > have + part.below {
        part.pages - have
    } else {
        0
    };
    let (mut kept, mut added) = (0, 0);
    for (page, &status) in pages.zip(statuses) {
        let Some(from) = current(status) else {
            continue;
        };
        if from <= part.tier && kept < keep {
            kept += 1;
            if from < part.tier {
                send(page, from, part.tier);
            }
        } else if from > part.tier && added < add {
            added += 1;
            send(page, from, part.tier);
        } else if from != target {
            send(page, from, target);
        }
    }
    (down, up)
}

/// The tier of each node id (`Topology::tier_of_node` as a table, for a lookup per page).
fn node_tier_table(topology: &objtier_sys::topology::Topology) -> Vec<Option<usize>> {
    let nodes = topology.tiers.iter().flat_map(|t| t.nodes.iter().copied());
    let len = nodes.max().map_or(0, |n| n as usize + 1);
    (0..len).map(|n| topology.tier_of_node(n as u32)).collect()
}

/// Asks `mover` where `batch`'s pages are, appends their statuses to `status` and empties
/// `batch`. Once the process is gone or its pages cannot be located, the rest of its pages are
/// marked with that error without asking again.
fn locate(
    mover: &mut dyn PageMover,
    pid: u32,
    batch: &mut Vec<u64>,
    status: &mut Vec<PageStatus>,
    failed: &mut Option<PageStatus>,
) {
    let from = status.len();
    status.resize(from + batch.len(), -libc::ENOENT);
    let result = match *failed {
        Some(errno) => Err(errno),
        None if batch.is_empty() => Ok(()),
        None => match mover.query(pid, batch, &mut status[from..]) {
            Ok(()) => Ok(()),
            Err(MoveError::ProcessGone { .. }) => Err(-libc::ESRCH),
            Err(e) => {
                tracing::warn!(pid, "cannot locate pages: {e}");
                Err(-libc::EIO)
            }
        },
    };
    if let Err(errno) = result {
        status[from..].fill(errno);
        *failed = Some(errno);
    }
    batch.clear();
}

fn errno_name(errno: i32) -> String {
    match errno {
        libc::ENOMEM => "ENOMEM".into(),
        libc::EBUSY => "EBUSY".into(),
        libc::EFAULT => "EFAULT".into(),
        libc::ENOENT => "ENOENT".into(),
        libc::EACCES => "EACCES".into(),
        libc::EINVAL => "EINVAL".into(),
        libc::EIO => "EIO".into(),
        other => format!("errno {other}"),
    }
}

impl Daemon {
    /// Makes the allocations buffered since the last call records, and has the access source
    /// follow every process's records. Called from the poll loop (`Daemon::serve`) once in the
    /// middle of each interval: an object allocated early in an interval is sampled in the
    /// aggregation that ends it and planned at its end, an interval sooner than if it became a
    /// record only there. (The interval itself does the two steps apart: it commits before
    /// attributing its samples, and follows after.) Errors are logged and returned.
    pub fn follow_new_objects(&mut self) -> Result<(), String> {
        self.commit_new_objects();
        self.follow_records()
    }

    /// Marks and unmarks short-lived sites by how their objects lived (`Process::judge_sites`).
    fn judge_sites(&mut self) {
        for p in self.processes.values_mut() {
            for (site, short_lived) in p.judge_sites() {
                if short_lived {
                    tracing::info!(
                        pid = p.pid,
                        site = format_args!("{site:#x}"),
                        "short-lived site: its objects all died within half an interval; the library now reports one in {} of its new objects",
                        objtier_wire::SHORT_LIVED_SAMPLE
                    );
                } else {
                    tracing::info!(
                        pid = p.pid,
                        site = format_args!("{site:#x}"),
                        "site no longer short-lived: one of its objects lived longer; the library reports all of its new objects again"
                    );
                }
            }
        }
    }

    /// Marks the sites that are short-lived before their window is complete
    /// (`Process::judge_early`): called after every drain.
    pub fn judge_early(&mut self) {
        let now = crate::monotonic_ns();
        for p in self.processes.values_mut() {
            for site in p.judge_early(now) {
                tracing::info!(
                    pid = p.pid,
                    site = format_args!("{site:#x}"),
                    "short-lived site: its objects all died within a quarter of the time it was watched; the library now reports one in {} of its new objects",
                    objtier_wire::SHORT_LIVED_SAMPLE
                );
            }
        }
    }

    /// Makes the allocations buffered since the last call records.
    fn commit_new_objects(&mut self) {
        let now = crate::monotonic_ns();
        for p in self.processes.values_mut() {
            p.commit_pending(now);
        }
    }

    /// Which attached connection owns each pid: the newest (an exec re-attaches under the same
    /// pid, and the old connection may not have hung up yet).
    fn latest_connection_by_pid(&self) -> HashMap<u32, u64> {
        self.processes.values().map(|p| (p.pid, p.id)).collect()
    }

    /// Has the access source follow every process's records (a process's ranges are derived
    /// again only when its set of records changed). Errors are logged and returned.
    fn follow_records(&mut self) -> Result<(), String> {
        let latest_by_pid = self.latest_connection_by_pid();
        let mut targets: Vec<Target> = latest_by_pid
            .iter()
            .filter_map(|(&pid, id)| {
                let p = self.processes.get_mut(id)?;
                if p.source_ranges.0 != p.records_generation {
                    let ranges: Vec<(u64, u64)> = p
                        .records
                        .iter()
                        .map(|(start, r)| (start, start + r.len))
                        .collect();
                    p.source_ranges = (
                        p.records_generation,
                        coalesce_ranges(&ranges, MAX_RANGES_PER_PROCESS),
                    );
                }
                Some(Target {
                    pid,
                    ranges: p.source_ranges.1.clone(),
                })
            })
            .collect();
        targets.sort_by_key(|t| t.pid);
        self.source.follow(&targets).map_err(|e| {
            tracing::warn!("cannot update the access source's targets: {e}");
            e.to_string()
        })
    }

    pub fn interval(&mut self) {
        let started = Instant::now();
        let mut report = IntervalReport {
            seconds_since_start: self.started.elapsed().as_secs_f64(),
            interval_ms: self.interval_length.as_millis() as u64,
            ..IntervalReport::default()
        };
        // 1-2. Sample and aggregate.
        // Objects allocated since the last commit and still live become records first, so that
        // the interval's samples in their ranges count for them. A source may well have seen
        // them: DAMON keeps following a freed object's range until the next commit, and the
        // allocator hands the range to the next object of its size (hpcc's RandomAccess
        // tables, each 16 MiB and live for 1-2 s: several thousand sampled accesses an interval
        // fell on such a table and were dropped, and it was freed before the next plan); perf
        // samples every address. Objects already freed are gone, and their samples with them.
        self.commit_new_objects();
        self.judge_sites();
        let latest_by_pid = self.latest_connection_by_pid();
        match self.source.observe() {
            Ok(observations) => {
                report.observations = observations.len();
                let (mut sampled, mut attributed) = (0.0, 0.0);
                for o in observations {
                    sampled += o.weight;
                    let Some(id) = latest_by_pid.get(&o.pid) else {
                        continue;
                    };
                    if let Some(p) = self.processes.get_mut(id) {
                        let mine =
                            p.attribute_as(o.start, o.end, o.weight, o.time_ns, o.kind, o.latency);
                        p.sampled |= mine > 0.0;
                        attributed += mine;
                        if p.recorder.is_some() {
                            self.sessions.account(p.profile_token, o.weight, mine);
                        }
                    }
                }
                self.totals.sampled_weight += sampled;
                self.totals.attributed_weight += attributed;
                self.since_enforcement.attributed_weight += attributed;
                report.attributed_share = (sampled > 0.0).then(|| attributed / sampled);
            }
            Err(e) => {
                tracing::warn!("access sampling failed this interval: {e}");
                report.source_error = Some(e.to_string());
            }
        }
        // Profiled processes close this interval's row of their recording; processes with
        // per-phase guidance move the arenas of a phase they entered.
        self.profile_interval_ended();
        self.follow_phases();
        self.topology.refresh_free(&self.config.sys_root);
        self.keep_room_for_placements();
        // 2. Aggregation (the EMA of every record) happens once the trigger has spoken: in the
        // pass that builds the candidates when it enforces, else in a walk of its own.

        // Sites described since the last interval get their module+offset names, while the
        // modules they point into are surely still mapped; those remembered from an earlier run
        // of the program are placed as they were then (warm start).
        for p in self.processes.values_mut() {
            if p.has_unnamed_sites() {
                match objtier_sys::maps::Maps::read(std::path::Path::new("/proc"), p.pid) {
                    Ok(maps) => {
                        for (site, warmed) in p.name_sites(&maps) {
                            match warmed {
                                crate::process::Warmed::Placed(tier) => tracing::info!(
                                    pid = p.pid,
                                    site = format_args!("{site:#x}"),
                                    tier,
                                    "warm start placement"
                                ),
                                crate::process::Warmed::ShortLived => tracing::info!(
                                    pid = p.pid,
                                    site = format_args!("{site:#x}"),
                                    "warm start: short-lived site (its objects all died young in an earlier run)"
                                ),
                            }
                        }
                        p.last_maps = Some(maps);
                    }
                    Err(e) => tracing::debug!(pid = p.pid, "cannot read its memory map: {e}"),
                }
            }
        }
        // The access source follows the records as they are now (those committed above among
        // them) right away, so the next snapshot already covers them.
        if let Err(e) = self.follow_records() {
            report.source_error = Some(e);
        }

        // 3. Trigger.
        self.topology.refresh_free(&self.config.sys_root);
        if !self.check_triggers(&mut report) {
            let aggregate = &*self.policy.aggregate;
            for p in self.processes.values_mut() {
                for (_, record) in p.records.iter_mut() {
                    age(aggregate, record);
                }
            }
            self.log_hottest();
            self.totals.intervals += 1;
            report.duration_ms = started.elapsed().as_millis() as u64;
            tracing::debug!(?report, "interval (no trigger fired)");
            self.last_interval = Some(report);
            return;
        }
        self.totals.enforcements += 1;

        // 4. Where the pages are, asked a batch of records at a time. A record's pages are
        // consecutive, so only their statuses are kept (4 bytes a page); step 6 recomputes the
        // addresses. With more pages than one interval should locate, the records located are
        // those whose location is unknown and a rotating share of the others.
        let tiers = self.topology.tiers.len();
        let node_tiers = node_tier_table(&self.topology);
        let tier_of = |s: PageStatus| -> Option<usize> {
            usize::try_from(s)
                .ok()
                .and_then(|node| node_tiers.get(node).copied().flatten())
        };
        let share = if tiers > 3 {
            1
        } else {
            self.record_pages
                .div_ceil(locate_pages_per_interval(self.record_pages))
                .max(1)
        };
        let turn = self.totals.enforcements;
        let mut record_pages = 0u64;
        let process_ids: Vec<u64> = self.processes.keys().copied().collect();
        let record_count = self.processes.values().map(|p| p.records.len()).sum();
        // The interval's largest buffers are the daemon's between enforcements (see
        // `IntervalBuffers`): emptied, not freed.
        let mut buffers = std::mem::take(&mut self.buffers);
        buffers.prepare(record_count, process_ids.len());
        let IntervalBuffers {
            candidates,
            spans,
            statuses,
        } = &mut buffers;
        let mut policies = Vec::with_capacity(process_ids.len());
        // Resident bytes of all the records on each tier, which the budgets are charged with.
        let mut ours_by_tier = vec![0u64; tiers];
        let mut batch: Vec<u64> = Vec::with_capacity(BATCH_PAGES);
        let aggregate = &*self.policy.aggregate;
        for (pi, id) in process_ids.iter().enumerate() {
            let p = self
                .processes
                .get_mut(id)
                .expect("the ids were just read from the map");
            policies.push(ProcessPolicy {
                fast_cap_bytes: p.fast_capacity_bytes,
                priority: p.priority,
            });
            // One pass over the records: a batch of whole records' pages is located, then
            // those records become candidates.
            let status = &mut statuses[pi];
            // A process known to have exited is not asked (its pid may be another's now).
            let mut failed = p.exited().then_some(-libc::ESRCH);
            let pid = p.pid;
            let advice = &p.advice;
            // A process whose pages must not move (`--no-migrate`): every record stays where
            // it is, as scratch memory would, and counts against its tier's budget there.
            let pinned = if p.no_migrate {
                objtier_wire::advice::SCRATCH
            } else {
                0
            };
            let mut process_resident = vec![0u64; tiers];
            let mut candidate = |start: u64,
                                 record: &crate::process::Record,
                                 resident: TierBytes,
                                 first_page: usize| {
                for (sum, r) in process_resident.iter_mut().zip(&resident) {
                    *sum += r;
                }
                candidates.push(record.candidate(
                    candidates.len(),
                    pi,
                    resident,
                    crate::process::advice_for(advice, start, record.len) | pinned,
                ));
                spans.push(RecordPages {
                    process: pi,
                    start,
                    first_page,
                    pages: (record.len / PAGE_SIZE as u64) as usize,
                    site: record.site,
                });
            };
            // Each record is aged (step 2) as the pass reaches it, before it becomes a candidate.
            let mut records = p
                .records
                .iter_mut()
                .map(|(start, record)| {
                    age(aggregate, record);
                    (start, record)
                })
                .peekable();
            let mut located: Vec<(u64, &mut crate::process::Record)> = Vec::new();
            while records.peek().is_some() {
                while let Some(&(start, ref record)) = records.peek() {
                    let n = (record.len / PAGE_SIZE as u64) as usize;
                    if !record.resident.known() || locate_in_turn(start, share, turn) {
                        if !located.is_empty() && batch.len() + n > BATCH_PAGES {
                            break;
                        }
                        batch.extend((start..start + record.len).step_by(PAGE_SIZE));
                        let (start, record) = records.next().expect("peeked");
                        record_pages += n as u64;
                        located.push((start, record));
                    } else {
                        // Counted where it was when last located.
                        let (start, record) = records.next().expect("peeked");
                        record_pages += n as u64;
                        candidate(start, record, record.resident.bytes(tiers), NOT_LOCATED);
                    }
                }
                if located.is_empty() {
                    continue;
                }
                let mut first_page = status.len();
                locate(self.mover.as_mut(), pid, &mut batch, status, &mut failed);
                for (start, record) in located.drain(..) {
                    let n = (record.len / PAGE_SIZE as u64) as usize;
                    let mut resident = TierBytes::from_elem(0, tiers);
                    for &s in &status[first_page..first_page + n] {
                        if let Some(t) = tier_of(s) {
                            resident[t] += PAGE_SIZE as u64;
                        }
                    }
                    record.resident = if failed.is_some() {
                        ResidentPages::UNKNOWN
                    } else {
                        ResidentPages::from_bytes(&resident)
                    };
                    candidate(start, record, resident, first_page);
                    first_page += n;
                }
            }
            drop(records);
            for (ours, process) in ours_by_tier.iter_mut().zip(&process_resident) {
                *ours += process;
            }
            p.resident_bytes_by_tier = process_resident;
        }
        self.record_pages = record_pages;
        self.log_hottest();

        // 5. Plan.
        let mut budgets = Vec::with_capacity(tiers);
        for (tier, &ours) in ours_by_tier.iter().enumerate() {
            if tier + 1 == tiers {
                budgets.push(TierBudget {
                    budget_bytes: u64::MAX,
                });
                continue;
            }
            let (_, room) = self.tier_room(tier);
            let capacity = self.tier_capacity(tier);
            let budget_bytes = tier_budget(capacity, room, ours, self.config.fill);
            tracing::debug!(
                tier,
                capacity_mib = capacity >> 20,
                free_mib = self.topology.tier_bytes(tier).1 >> 20,
                room_mib = room >> 20,
                ours_mib = ours >> 20,
                budget_mib = budget_bytes >> 20,
                "tier budget"
            );
            budgets.push(TierBudget { budget_bytes });
        }
        report.budget_bytes_by_tier = budgets.iter().map(|b| b.budget_bytes).collect();
        let order = self.policy.prioritize.order(candidates);
        let assignment = self
            .policy
            .enforce
            .assign(candidates, &order, &budgets, &policies);

        report.record_parts = assignment.parts.len();
        report.record_part_bytes = assignment.parts.iter().map(|p| p.bytes).sum();

        // Proactive placement: sites whose objects are planned below the fastest tier start
        // new ones there. Only with samples: without them, "planned slow" means "not seen".
        if self.source.samples() {
            self.place_sites_proactively(&process_ids, spans, candidates, &assignment.tiers);
        }

        // 6. Migrate: work out, in one pass over every record's pages, what moves down and
        // what moves up; demotions go coldest first, promotions hottest first.
        let target_nodes: Vec<u32> = (0..tiers).map(|t| self.target_node(t)).collect();
        // (process index, target tier, pages), in the order they should move.
        let mut down_by_rank = Vec::new();
        let mut promotions: Vec<(usize, usize, Vec<u64>)> = Vec::new();
        // Records with pages to move: their location is unknown after this step.
        let mut moving: Vec<(usize, u64)> = Vec::new();
        let mut own_status: Vec<PageStatus> = Vec::new();
        // Most records are already where they belong: no page of theirs to look at. Which ones
        // are is found in candidate order (memory order), so that the walk in rank order below
        // reads one byte of each record that does not move, not its candidate.
        let mut may_move: Vec<bool> = candidates
            .iter()
            .zip(&assignment.tiers)
            .map(|(c, &target)| {
                c.resident_bytes_by_tier
                    .iter()
                    .enumerate()
                    .any(|(t, &b)| t != target && b > 0)
            })
            .collect();
        for part in &assignment.parts {
            if let Some(may) = may_move.get_mut(part.candidate) {
                *may = true;
            }
        }
        // A process whose pages must not move (`--no-migrate`) keeps every page where it is,
        // a record whose object spilled across two tiers included.
        let pinned: Vec<bool> = process_ids
            .iter()
            .map(|id| self.processes.get(id).is_some_and(|p| p.no_migrate))
            .collect();
        for (may, span) in may_move.iter_mut().zip(spans.iter()) {
            if pinned[span.process] {
                *may = false;
            }
        }
        // The huge page size, read (from sysfs) once a plan and only when something needs it:
        // the parts here, the splits before the moves below.
        let huge_size = (!assignment.parts.is_empty()).then(|| self.mover.huge_page_size());
        let huge = huge_size.flatten();
        for &ci in &order {
            if !may_move[ci] {
                continue;
            }
            let target = assignment.tiers[ci];
            let span = &spans[ci];
            let part = assignment.part_of(ci).map(|p| {
                let capped = self
                    .processes
                    .get(&process_ids[span.process])
                    .is_some_and(|p| p.fast_capacity_bytes.is_some());
                let pages =
                    part_on_huge_boundary(span.start, (p.bytes / PAGE_SIZE as u64) as usize, huge);
                // The budget's slack, but at most a quarter of the part: a part that a cap
                // (not the budget) limits can be far smaller than the slack of a large tier.
                let slack = (budgets[p.tier].budget_bytes as f64 * objtier_policy::KEEP_SLACK)
                    as usize
                    / PAGE_SIZE;
                let tolerance = slack.min(pages / 4);
                PartPages {
                    tier: p.tier,
                    pages,
                    below: tolerance,
                    above: if capped && p.tier == 0 { 0 } else { tolerance },
                }
            });
            let status = if span.first_page == NOT_LOCATED {
                // Counted from its last location: where its pages are now.
                let process = &self.processes[&process_ids[span.process]];
                if process.exited() {
                    continue;
                }
                let pages: Vec<u64> = (span.start..).step_by(PAGE_SIZE).take(span.pages).collect();
                own_status.clear();
                own_status.resize(span.pages, -libc::ENOENT);
                if let Err(e) = self.mover.query(process.pid, &pages, &mut own_status) {
                    tracing::debug!(pid = process.pid, "cannot locate a record's pages: {e}");
                    continue;
                }
                &own_status[..]
            } else {
                &statuses[span.process][span.first_page..span.first_page + span.pages]
            };
            let (down, up) = moves_of(span.start, target, part, status, tier_of);
            if down.is_empty() && up.is_empty() {
                continue;
            }
            moving.push((span.process, span.start));
            for (tier, pages) in up {
                push_merged(&mut promotions, span.process, tier, pages);
            }
            for (tier, pages) in down {
                down_by_rank.push((span.process, tier, pages));
            }
        }
        let mut demotions: Vec<(usize, usize, Vec<u64>)> = Vec::new();
        for (process, tier, pages) in down_by_rank.into_iter().rev() {
            push_merged(&mut demotions, process, tier, pages);
        }
        let mut dead = vec![false; process_ids.len()];
        if !(demotions.is_empty() && promotions.is_empty()) {
            let huge = huge_size.unwrap_or_else(|| self.mover.huge_page_size());
            if let Some(huge) = huge {
                self.split_huge_pages(&process_ids, &demotions, &promotions, huge, &mut report);
            }
        }
        let migration_started = Instant::now();
        let rate_limit_bytes = self
            .config
            .rate_limit_bytes_per_second
            .map(|rate| (rate as f64 * self.interval_length.as_secs_f64()) as u64);
        let (mut step_bytes, mut rate_limited) = (0u64, false);
        // Tiers that refused a promotion with ENOMEM, until a demotion out of them moves pages.
        let mut refused = vec![false; tiers];
        // Room for promotions before any demotion: free memory beyond the fill reserve,
        // negative when the tier is fuller than that (first touch leaves a node at the
        // kernel's watermark, and the budget then gives the reserve back). Demotions come first
        // until the reserve is free again; then each promotion follows the demotions that make
        // its room. With the room counted from zero, promotions had only the room of the
        // demotion before them, free memory stayed at the watermark through the step, and
        // thousands of pages a step failed with ENOMEM (the tiered-VM test small-fast). Twice
        // the reserve put 90 MiB of demotions before the first promotion there.
        let fast_room_pages = {
            let (capacity, free) = self.topology.tier_bytes(0);
            let reserve = objtier_policy::fill_reserve(capacity, self.config.fill);
            (free as i64 - reserve as i64) / PAGE_SIZE as i64
        };
        for (pi, tier, pages, demote) in schedule_batches(demotions, promotions, fast_room_pages) {
            // Migration work per interval is bounded by the interval: what is left is planned
            // again next interval with fresh samples (a new high-priority program, a phase
            // change), instead of the daemon going deaf for the whole of a long eviction.
            if migration_started.elapsed() >= MIGRATION_INTERVALS_PER_STEP * self.interval_length {
                report.deferred_pages += pages.len() as u64;
                continue;
            }
            // The rate limit allows one interval's worth of bytes per step; the rest waits for
            // the next interval (not an immediate re-plan, which would defeat the limit).
            // Once it is reached, nothing more moves this step: a later promotion may need the
            // room of a demotion the limit held back.
            let batch_bytes = pages.len() as u64 * PAGE_SIZE as u64;
            if rate_limited || rate_limit_bytes.is_some_and(|l| step_bytes + batch_bytes > l) {
                rate_limited = true;
                report.rate_limited_pages += pages.len() as u64;
                continue;
            }
            if !demote && refused[tier] {
                report.full_tier_pages += pages.len() as u64;
                continue;
            }
            step_bytes += batch_bytes;
            if dead[pi] {
                continue;
            }
            let process = &self.processes[&process_ids[pi]];
            let pid = process.pid;
            let node = target_nodes[tier];
            let mut status = vec![0; pages.len()];
            let moved = if process.exited() {
                Err(MoveError::ProcessGone { pid })
            } else {
                self.mover.move_to(pid, &pages, node, &mut status)
            };
            match moved {
                Ok(()) => {}
                Err(MoveError::ProcessGone { .. }) => {
                    tracing::info!(pid, "process exited during migration; skipping it");
                    self.totals.processes_gone_mid_migration += 1;
                    dead[pi] = true;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(pid, "migration failed: {e}");
                    status.fill(-libc::EIO);
                }
            }
            let moved = status.iter().filter(|&&s| s == node as i32).count() as u64;
            let failed = status.len() as u64 - moved;
            for &s in status.iter().filter(|&&s| s < 0) {
                let name = errno_name(-s);
                let direction = if demote { "demote" } else { "promote" };
                *report
                    .failures
                    .entry(format!("{direction} {name}"))
                    .or_default() += 1;
                *self.totals.failures_by_errno.entry(name).or_default() += 1;
            }
            if demote {
                report.demoted_pages += moved;
                if moved > 0 {
                    // Room in the tiers above the one the pages went to.
                    refused[..tier].fill(false);
                }
            } else {
                report.promoted_pages += moved;
                refused[tier] |= status.contains(&-libc::ENOMEM);
            }
            report.failed_pages += failed;
            if let Some(p) = self.processes.get_mut(&process_ids[pi]) {
                // Keep the status view roughly current until the next query.
                let moved_bytes = moved * PAGE_SIZE as u64;
                let to = &mut p.resident_bytes_by_tier;
                if tier < to.len() {
                    to[tier] += moved_bytes;
                    // Pages left a different tier; charge the nearest one on the other side.
                    let from = if demote {
                        tier.saturating_sub(1)
                    } else {
                        tier + 1
                    };
                    if from < to.len() {
                        to[from] = to[from].saturating_sub(moved_bytes);
                    }
                }
            }
        }
        let this = self.totals.intervals;
        for p in self.processes.values_mut() {
            // The next plan looks back at this interval and the last one.
            p.moved_in.retain(|_, n| n[0] + 1 >= this);
        }
        for (pi, start) in moving {
            let Some(p) = self.processes.get_mut(&process_ids[pi]) else {
                continue;
            };
            let Some(record) = p.records.get_mut(start) else {
                continue;
            };
            record.resident = ResidentPages::UNKNOWN;
            if p.placement_evidence.contains_key(&record.site) {
                let n = p.moved_in.entry(start).or_insert([this; 2]);
                *n = [this, n[0]];
            }
        }
        buffers.trim();
        self.buffers = buffers;
        self.totals.promoted_pages += report.promoted_pages;
        self.totals.demoted_pages += report.demoted_pages;
        self.totals.failed_pages += report.failed_pages;
        self.totals.huge_page_splits += report.huge_page_splits;
        self.totals.intervals += 1;
        report.duration_ms = started.elapsed().as_millis() as u64;
        if report.promoted_pages + report.demoted_pages + report.failed_pages > 0 {
            tracing::info!(
                promoted_pages = report.promoted_pages,
                demoted_pages = report.demoted_pages,
                failed_pages = report.failed_pages,
                deferred_pages = report.deferred_pages,
                rate_limited_pages = report.rate_limited_pages,
                full_tier_pages = report.full_tier_pages,
                huge_page_splits = report.huge_page_splits,
                duration_ms = report.duration_ms,
                failures = ?report.failures,
                "migrated"
            );
        }
        tracing::debug!(?report, "interval");
        self.last_interval = Some(report);
        // Placements learnt this interval are saved now, so a killed daemon loses little.
        for id in process_ids {
            self.save_sites(id, false);
        }
    }

    /// The node of a tier that new pages should go to: the one with most free memory.
    pub(crate) fn target_node(&self, tier: usize) -> u32 {
        self.topology.tiers[tier]
            .nodes
            .iter()
            .copied()
            .max_by_key(|id| self.topology.node(*id).map_or(0, |n| n.free_bytes))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::DaemonConfig;
    use crate::process::tests::{process, push};
    use crate::source::AccessSource;
    use crate::tiering::{accessed_by_the_program, huge_page_splits};
    use crate::Daemon;
    use objtier_sys::pages::{RecordedCall, RecordingPageMover};
    use objtier_sys::topology::Topology;
    use objtier_wire::{event_flags, EventKind};
    use std::sync::{Arc, Mutex};

    const MIB: u64 = 1 << 20;

    fn two_tiers(fast_total: u64, fast_free: u64) -> Topology {
        Topology::two_tiers(fast_total, fast_free, 100 * fast_total)
    }

    /// A daemon with one process, a synthetic topology, no access source, and `fake` as its
    /// kernel; sysfs is an empty directory, so free memory stays as the topology says.
    fn daemon_with(
        topology: Topology,
        process: crate::process::Process,
        fake: &Arc<Mutex<RecordingPageMover>>,
        sys: &tempfile::TempDir,
    ) -> Daemon {
        let mut config = DaemonConfig::new(sys.path().join("sock"));
        config.sys_root = sys.path().to_owned();
        let policy = crate::builtin_policy(&config);
        let source = AccessSource::none("test");
        let mut daemon = Daemon::new(config, topology, source, Box::new(fake.clone()), policy);
        daemon.processes.insert(process.id, process);
        daemon
    }

    /// Announces a live object of `p` at `[start, start + len)` and puts its pages on `node` of
    /// `fake`.
    fn object_on(
        p: &crate::process::Process,
        fake: &Arc<Mutex<RecordingPageMover>>,
        start: u64,
        len: u64,
        node: u32,
    ) {
        push(p, EventKind::Alloc, start, len, event_flags::SNAPSHOT);
        fake.lock().unwrap().place(p.pid, start, len, node);
    }

    /// Nine cold 1 MiB objects filling a 10 MiB fast tier to its 0.9 fill (the 1 MiB reserve
    /// free) and a hot 2 MiB object in the slow tier, placed in `fake`. Returns the daemon and
    /// the hot object.
    fn hot_object_behind_a_full_fast_tier(
        fake: &Arc<Mutex<RecordingPageMover>>,
        sys: &tempfile::TempDir,
    ) -> (Daemon, u64) {
        let (mut p, _peer) = process();
        let base = 0x7000_0000_0000u64;
        for i in 0..9 {
            let start = base + i * MIB;
            object_on(&p, fake, start, MIB, 0);
        }
        let hot = base + 64 * MIB;
        object_on(&p, fake, hot, 2 * MIB, 1);
        p.drain();
        p.records.get_mut(hot).unwrap().interval_accesses = 100.0;
        (daemon_with(two_tiers(10 * MIB, MIB), p, fake, sys), hot)
    }

    /// Records are a 32nd of the fast tier at most (64 MiB beside a large one), a fast-tier cap
    /// counts as its size, and `--split` overrides both.
    #[test]
    fn the_split_follows_the_fast_tier_unless_given() {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (p, _peer) = process();
        let mut daemon = daemon_with(two_tiers(92_000_000, 0), p, &fake, &sys);
        assert_eq!(daemon.split_bytes(), 2 * MIB);
        daemon.topology = two_tiers(8 << 30, 0);
        assert_eq!(daemon.split_bytes(), 64 * MIB);
        daemon.config.fast_capacity_bytes = Some(512 * MIB);
        assert_eq!(daemon.split_bytes(), 16 * MIB);
        daemon.config.split_bytes = Some(128 * MIB);
        assert_eq!(daemon.split_bytes(), 128 * MIB);
    }

    /// A record's accesses in the interval of its birth (its initialising writes), or in one in
    /// which the daemon moved its pages, do not disprove its site's placement; other accesses do.
    #[test]
    fn only_accesses_that_tell_of_the_program_disprove_a_placement() {
        let i = 2_000_000_000;
        let still = [false; 2];
        // Born within the last interval: neither interval's accesses count.
        assert!(!accessed_by_the_program(1.0, 1.0, i / 2, i, still));
        // Born in the interval before the last: its last interval's accesses count, the
        // previous one's (its birth) do not.
        assert!(accessed_by_the_program(1.0, 0.0, i + i / 2, i, still));
        assert!(!accessed_by_the_program(0.0, 1.0, i + i / 2, i, still));
        // Older: both count.
        assert!(accessed_by_the_program(0.0, 1.0, 2 * i, i, still));
        assert!(accessed_by_the_program(1.0, 0.0, 5 * i, i, still));
        // Never accessed: never evidence.
        assert!(!accessed_by_the_program(0.0, 0.0, 5 * i, i, still));
        // Moved in the last interval: its accesses then do not count, the one before's do.
        assert!(!accessed_by_the_program(1.0, 0.0, 5 * i, i, [true, false]));
        assert!(accessed_by_the_program(1.0, 1.0, 5 * i, i, [true, false]));
        // Moved in the interval before: the last one's accesses count.
        assert!(!accessed_by_the_program(0.0, 1.0, 5 * i, i, [false, true]));
        assert!(accessed_by_the_program(1.0, 1.0, 5 * i, i, [false, true]));
        assert!(!accessed_by_the_program(1.0, 1.0, 5 * i, i, [true, true]));
    }

    /// The access source's ranges are derived again when, and only when, records come or go.
    #[test]
    fn intervals_are_short_while_a_process_is_young() {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (p, _peer) = process();
        let id = p.id;
        let mut daemon = daemon_with(two_tiers(64 * MIB, 64 * MIB), p, &fake, &sys);
        let long = daemon.config.interval;
        daemon.processes.get_mut(&id).unwrap().attached_ns = crate::monotonic_ns();
        assert_eq!(daemon.config.startup_interval, None, "off by default");
        assert_eq!(daemon.next_interval_length(), long, "turned off");
        let short = Some(std::time::Duration::from_millis(
            objtier_policy::DEFAULT_STARTUP_INTERVAL_MS,
        ));
        daemon.config.startup_interval = short;
        assert_eq!(Some(daemon.next_interval_length()), short, "just attached");
        daemon.processes.get_mut(&id).unwrap().planned = true;
        assert_eq!(daemon.next_interval_length(), long, "planned once already");
        daemon.processes.get_mut(&id).unwrap().planned = false;
        let window = daemon.config.startup_window.as_nanos() as u64;
        daemon.processes.get_mut(&id).unwrap().attached_ns =
            crate::monotonic_ns().saturating_sub(window + 1);
        assert_eq!(daemon.next_interval_length(), long, "grown up");
        daemon.processes.clear();
        assert_eq!(daemon.next_interval_length(), long, "nobody attached");
    }

    #[test]
    fn source_ranges_follow_the_records() {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (p, _peer) = process();
        let id = p.id;
        let base = 0x7000_0000_0000u64;
        push(&p, EventKind::Alloc, base, MIB, event_flags::SNAPSHOT);
        push(
            &p,
            EventKind::Alloc,
            base + 4 * MIB,
            MIB,
            event_flags::SNAPSHOT,
        );
        let mut daemon = daemon_with(two_tiers(64 * MIB, 64 * MIB), p, &fake, &sys);
        daemon.processes.get_mut(&id).unwrap().drain();
        daemon.interval();
        let p = &daemon.processes[&id];
        let generation = p.records_generation;
        assert_eq!(
            p.source_ranges,
            (
                generation,
                vec![(base, base + MIB), (base + 4 * MIB, base + 5 * MIB)]
            )
        );
        daemon.interval();
        assert_eq!(
            daemon.processes[&id].records_generation, generation,
            "nothing changed"
        );
        let p = daemon.processes.get_mut(&id).unwrap();
        push(p, EventKind::Free, base, 0, 0);
        p.drain();
        daemon.interval();
        let p = &daemon.processes[&id];
        assert!(p.records_generation > generation);
        assert_eq!(
            p.source_ranges,
            (p.records_generation, vec![(base + 4 * MIB, base + 5 * MIB)])
        );
    }

    #[test]
    fn a_quarter_of_the_records_is_located_between_the_bounds() {
        let mib = |m: u64| m * 256; // pages
        assert_eq!(
            super::locate_pages_per_interval(mib(10)),
            mib(64),
            "small jobs: all of it"
        );
        assert_eq!(super::locate_pages_per_interval(mib(200)), mib(64));
        assert_eq!(
            super::locate_pages_per_interval(mib(2048)),
            mib(512),
            "a quarter"
        );
        assert_eq!(
            super::locate_pages_per_interval(mib(100 << 10)),
            mib(1024),
            "at most 1 GiB"
        );
    }

    /// With more record pages than one interval locates, each interval locates a rotating share
    /// of the records plus those whose location is unknown (new, or moved by the last step),
    /// and counts the others where they were last seen.
    #[test]
    fn many_records_are_located_a_share_at_a_time() {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (mut p, _peer) = process();
        let base = 0x7000_0000_0000u64;
        // 32 cold objects of 64 MiB in the slow tier: 2^19 pages, four times what one interval
        // locates (a quarter of them).
        for i in 0..32 {
            let start = base + i * 64 * MIB;
            object_on(&p, &fake, start, 64 * MIB, 1);
        }
        p.drain();
        let id = p.id;
        let mut daemon = daemon_with(two_tiers(4096 * MIB, 4096 * MIB), p, &fake, &sys);
        let queried = || {
            let mut fake = fake.lock().unwrap();
            let pages = fake.queried_pages();
            fake.calls.clear();
            pages
        };
        let all = 32 * 64 * MIB / 4096;
        daemon.interval();
        assert_eq!(queried(), all, "nothing known yet: every record is located");
        let turns: Vec<u64> = (0..4)
            .map(|_| {
                daemon.interval();
                queried()
            })
            .collect();
        assert!(turns.iter().all(|&t| t > 0), "{turns:?}");
        assert_eq!(
            turns.iter().sum::<u64>(),
            all,
            "four turns locate each record once"
        );
        assert!(
            turns.iter().all(|t| t % (64 * MIB / 4096) == 0),
            "whole records only"
        );
        let process = &daemon.processes[&id];
        assert!(process.records.values().all(|r| r.resident.known()));
        assert_eq!(process.resident_bytes_by_tier, vec![0, 32 * 64 * MIB]);

        // A record turns hot: it moves up, is unknown until located again, and is located at
        // the next interval whatever the turn.
        let hot = base + 5 * 64 * MIB;
        let record = daemon
            .processes
            .get_mut(&id)
            .unwrap()
            .records
            .get_mut(hot)
            .unwrap();
        record.interval_accesses = 100.0;
        daemon.interval();
        assert_eq!(
            daemon.last_interval.as_ref().unwrap().promoted_pages,
            64 * MIB / 4096
        );
        assert!(!daemon.processes[&id].records[&hot].resident.known());
        queried();
        daemon.interval();
        let record = &daemon.processes[&id].records[&hot];
        assert_eq!(record.resident.pages(0), 64 * MIB / 4096);
        assert_eq!(
            daemon.processes[&id].resident_bytes_by_tier,
            vec![64 * MIB, 31 * 64 * MIB]
        );
        assert_eq!(daemon.last_interval.as_ref().unwrap().promoted_pages, 0);
    }

    #[test]
    fn the_rate_limit_holds_back_what_does_not_fit_the_interval() {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (mut daemon, _hot) = hot_object_behind_a_full_fast_tier(&fake, &sys);
        // 3 MiB per 2 s interval: the 2 MiB demotion fits, the 2 MiB promotion after it does not.
        daemon.config.rate_limit_bytes_per_second = Some(3 * MIB / 2);
        daemon.interval();
        let report = daemon.last_interval.as_ref().unwrap();
        assert_eq!(report.demoted_pages, 512);
        assert_eq!(report.promoted_pages, 0);
        assert_eq!(report.rate_limited_pages, 512);
        assert_eq!(
            report.deferred_pages, 0,
            "held back for the next interval, not re-planned"
        );
        assert_eq!(fake.lock().unwrap().moves().len(), 1);
    }

    /// Blocks moved whole need no split; a block moved in part is split at a demoted page, or
    /// beside the promoted ones; a block whose pages go to different tiers is split too.
    #[test]
    fn huge_pages_moved_in_part_are_split() {
        let huge = 2 * MIB;
        let page = 4096;
        let pages = |start: u64, n: u64| (0..n).map(|i| start + i * page).collect::<Vec<_>>();
        // Process 0: block 0 demoted whole; block 1 demoted in part.
        // Process 1: block 2's middle promoted; block 3's start promoted; block 4 promoted to
        // tier 0 and tier 1 halves.
        let demotions = vec![(0, 1, pages(0, 512)), (0, 1, pages(huge + 100 * page, 10))];
        let promotions = vec![
            (1, 0, pages(2 * huge + 8 * page, 4)),
            (1, 0, pages(3 * huge, 4)),
            (1, 0, pages(4 * huge, 256)),
            (1, 1, pages(4 * huge + huge / 2, 256)),
        ];
        assert_eq!(
            huge_page_splits(&demotions, &promotions, huge),
            vec![
                (0, vec![huge + 100 * page]),
                (1, vec![2 * huge + 7 * page, 3 * huge + 4 * page, 4 * huge]),
            ]
        );
        assert!(huge_page_splits(&demotions[..1], &[], huge).is_empty());
    }

    /// Nine cold objects of 1 MiB share five huge pages: making room for a hot object demotes
    /// two of them, and must not carry their neighbours along (which the next step would bring
    /// back, and so on at every other step).
    #[test]
    fn demotions_leave_the_rest_of_a_huge_page_in_place() {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (mut daemon, hot) = hot_object_behind_a_full_fast_tier(&fake, &sys);
        let base = 0x7000_0000_0000u64;
        let pid = daemon.processes.values().next().unwrap().pid;
        {
            let mut fake = fake.lock().unwrap();
            fake.huge_page_size = Some(2 * MIB);
            fake.huge_pages
                .extend((0..5).map(|i| (pid, base + i * 2 * MIB)));
            fake.huge_pages.insert((pid, hot));
        }
        daemon.interval();
        let report = daemon.last_interval.clone().unwrap();
        assert_eq!((report.demoted_pages, report.promoted_pages), (512, 512));
        let fake_now = fake.lock().unwrap();
        assert_eq!(
            fake_now.pages_on(0) as u64,
            9 * MIB / 4096,
            "exactly the planned pages left the fast tier"
        );
        assert!(
            (0..2 * MIB)
                .step_by(4096)
                .all(|o| fake_now.placement[&(pid, hot + o)] == 0),
            "the hot object is in the fast tier"
        );
        let splits: Vec<_> = fake_now
            .calls
            .iter()
            .filter(|c| matches!(c, RecordedCall::SplitHuge { .. }))
            .collect();
        assert!(
            report.huge_page_splits >= 1 && splits.len() == 1,
            "the blocks moved in part were split, in one call: {splits:?}"
        );
        drop(fake_now);
        let id = *daemon.processes.keys().next().unwrap();
        let record = daemon.processes.get_mut(&id).unwrap().records.get_mut(hot);
        record.unwrap().interval_accesses = 50.0;
        daemon.interval();
        let report = daemon.last_interval.as_ref().unwrap();
        assert_eq!(
            (report.promoted_pages, report.demoted_pages),
            (0, 0),
            "nothing to move back"
        );
    }

    /// Promotions wait for the demotions that make their room, and for those that bring a
    /// fuller tier back to its reserve (negative room); the rest of the demotions follow.
    #[test]
    fn batches_make_room_before_each_promotion() {
        let pages = |n: usize, from: u64| (0..n as u64).map(|i| from + i).collect::<Vec<u64>>();
        use super::{schedule_batches, BATCH_PAGES};
        let down = vec![(0, 1, pages(4 * BATCH_PAGES, 0))];
        let up = vec![(0, 0, pages(BATCH_PAGES, 1 << 40))];
        let order = |room: i64| {
            schedule_batches(down.clone(), up.clone(), room)
                .iter()
                .map(|(_, _, _, demote)| if *demote { 'd' } else { 'p' })
                .collect::<String>()
        };
        assert_eq!(
            order(BATCH_PAGES as i64),
            "pdddd",
            "room enough: promote first"
        );
        assert_eq!(order(0), "dpddd", "each promotion after its room");
        assert_eq!(
            order(-2 * BATCH_PAGES as i64),
            "dddpd",
            "the reserve back first"
        );
    }

    /// First touch filled the fast tier past its fill (nothing free, as the kernel leaves a
    /// node at its watermark): the plan gives the reserve back, and the demotions that free it
    /// come before the promotion, so the promotion never meets a full node.
    #[test]
    fn a_tier_filled_past_its_reserve_gives_the_reserve_back_first() {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (mut daemon, hot) = hot_object_behind_a_full_fast_tier(&fake, &sys);
        daemon.topology = two_tiers(10 * MIB, 0);
        daemon.interval();

        let fake = fake.lock().unwrap();
        let moves = fake.moves();
        let promotion = moves.iter().position(|(node, _)| *node == 0).unwrap();
        let demoted_before: usize = moves[..promotion].iter().map(|(_, p)| p.len()).sum();
        assert_eq!(
            demoted_before as u64,
            3 * MIB / 4096,
            "the hot object's room and the reserve, before it moves: {moves:?}"
        );
        assert!(moves[promotion]
            .1
            .iter()
            .all(|&a| a >= hot && a < hot + 2 * MIB));
        assert_eq!(fake.pages_on(0) as u64, 8 * MIB / 4096, "1 MiB free again");
        let report = daemon.last_interval.as_ref().unwrap();
        assert_eq!((report.demoted_pages, report.promoted_pages), (768, 512));
    }

    /// The fast node is fuller than the kernel said (its free memory went to someone else):
    /// the first promotion batch meets ENOMEM, and the others are not tried, since each page
    /// would fail the same way after the kernel tried to reclaim for it. They are planned
    /// again at the next interval, not at once (unlike pages the step's time ran out for).
    #[test]
    fn a_tier_that_refused_a_promotion_gets_no_more_until_a_demotion() {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (mut p, _peer) = process();
        let base = 0x7000_0000_0000u64;
        for i in 0..4 {
            let start = base + i * 4 * MIB;
            object_on(&p, &fake, start, 4 * MIB, 1);
        }
        p.drain();
        for (_, record) in p.records.iter_mut() {
            record.interval_accesses = 100.0;
        }
        fake.lock().unwrap().node_capacity_pages.insert(0, 100);
        let mut daemon = daemon_with(two_tiers(64 * MIB, 40 * MIB), p, &fake, &sys);
        daemon.interval();

        let report = daemon.last_interval.clone().unwrap();
        let fake = fake.lock().unwrap();
        let promotions: Vec<_> = fake.moves().into_iter().filter(|(n, _)| *n == 0).collect();
        assert_eq!(promotions.len(), 1, "one batch tried: {:?}", report);
        assert_eq!(report.promoted_pages, 100);
        assert_eq!(report.failures.get("promote ENOMEM"), Some(&(1024 - 100)));
        assert_eq!(report.full_tier_pages, 3 * 1024, "the other three batches");
        assert_eq!(report.deferred_pages, 0, "not re-planned at once");
    }

    /// The whole interval against a recording fake kernel: a hot object in the slow tier and a
    /// fast tier full of cold ones. Exactly enough cold pages are demoted, before the hot object
    /// is promoted, and nothing else moves.
    #[test]
    fn interval_demotes_then_promotes_through_the_page_mover() {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (mut daemon, hot) = hot_object_behind_a_full_fast_tier(&fake, &sys);
        let base = 0x7000_0000_0000u64;
        daemon.interval();

        let fake = fake.lock().unwrap();
        let moves = fake.moves();
        assert_eq!(
            moves.len(),
            2,
            "one demotion batch, one promotion batch: {moves:?}"
        );
        let (demote_node, demoted) = &moves[0];
        let (promote_node, promoted) = &moves[1];
        assert_eq!(*demote_node, 1, "demotions come first");
        assert_eq!(
            demoted.len() as u64,
            2 * MIB / 4096,
            "2 MiB of cold pages make room"
        );
        assert!(demoted.iter().all(|&a| a >= base && a < base + 9 * MIB));
        assert_eq!(*promote_node, 0);
        assert_eq!(promoted.len() as u64, 2 * MIB / 4096);
        assert!(promoted.iter().all(|&a| a >= hot && a < hot + 2 * MIB));
        assert!(matches!(fake.calls[0], RecordedCall::Query { .. }));
        let mut every_page: Vec<u64> = moves.iter().flat_map(|(_, pages)| pages.clone()).collect();
        let moved = every_page.len();
        every_page.sort_unstable();
        every_page.dedup();
        assert_eq!(every_page.len(), moved, "no page moves twice in one plan");
        let report = daemon.last_interval.as_ref().unwrap();
        assert_eq!(report.demoted_pages, 512);
        assert_eq!(report.promoted_pages, 512);
        assert_eq!(
            fake.pages_on(0) as u64,
            9 * MIB / 4096,
            "the fast tier stays at 90 %"
        );
        drop(fake);

        // Steady state: a second interval moves nothing (the hot object was seen again).
        let id = *daemon.processes.keys().next().unwrap();
        daemon
            .processes
            .get_mut(&id)
            .unwrap()
            .records
            .get_mut(hot)
            .unwrap()
            .interval_accesses = 50.0;
        daemon.interval();
        let report = daemon.last_interval.as_ref().unwrap();
        assert_eq!((report.promoted_pages, report.demoted_pages), (0, 0));
    }

    /// Where `LargeHotRecord` puts its object.
    const LARGE_HOT: u64 = 0x7000_0000_0000;

    /// A daemon over two tiers of `fast_bytes` free fast memory each way, whose one process
    /// holds a 48 MiB object at `LARGE_HOT` in the slow tier, with record parts as
    /// `record_parts` and the page mover's huge pages of `huge` bytes.
    struct LargeHotRecord {
        daemon: Daemon,
        fake: Arc<Mutex<RecordingPageMover>>,
        pid: u32,
        id: u64,
        // Kept for the daemon's life: the library's end of the socket, and the sysfs stand-in.
        _peer: std::os::unix::net::UnixStream,
        _sys: tempfile::TempDir,
    }

    impl LargeHotRecord {
        fn new(fast_bytes: u64, record_parts: bool, huge: Option<u64>) -> Self {
            let sys = tempfile::tempdir().unwrap();
            let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
            fake.lock().unwrap().huge_page_size = huge;
            let (mut p, peer) = process();
            let (pid, id) = (p.pid, p.id);
            object_on(&p, &fake, LARGE_HOT, 48 * MIB, 1);
            p.drain();
            let mut daemon = daemon_with(two_tiers(fast_bytes, fast_bytes), p, &fake, &sys);
            daemon.config.record_parts = record_parts;
            daemon.policy = crate::builtin_policy(&daemon.config);
            Self {
                daemon,
                fake,
                pid,
                id,
                _peer: peer,
                _sys: sys,
            }
        }

        /// Marks the object hot, runs an interval, and returns its pages in the fast tier.
        fn interval(&mut self) -> Vec<u64> {
            let p = self.daemon.processes.get_mut(&self.id).unwrap();
            p.records.get_mut(LARGE_HOT).unwrap().interval_accesses = 100.0;
            self.daemon.interval();
            (LARGE_HOT..LARGE_HOT + 48 * MIB)
                .step_by(4096)
                .filter(|&a| self.fake.lock().unwrap().placement.get(&(self.pid, a)) == Some(&0))
                .collect()
        }
    }

    /// A hot record larger than the fast tier's budget: the part that fits is promoted (its
    /// first pages); a budget that shrinks within the slack moves nothing; one that shrinks
    /// more demotes the end of the part. With whole records nothing of it moves.
    #[test]
    fn a_hot_record_larger_than_the_budget_gets_the_part_that_fits() {
        let run = |record_parts: bool| {
            let mut setup = LargeHotRecord::new(40 * MIB, record_parts, None);
            let mut interval = |fast_cap: Option<u64>| {
                setup.daemon.config.fast_capacity_bytes = fast_cap;
                let fast = setup.interval();
                let report = setup.daemon.last_interval.clone().unwrap();
                let parts = (report.record_parts, report.record_part_bytes);
                assert_eq!(parts.0, usize::from(record_parts), "{parts:?}");
                (fast, report.promoted_pages, report.demoted_pages)
            };
            (
                interval(None),
                interval(Some(39 * MIB + 512 * 1024)),
                interval(Some(30 * MIB)),
            )
        };
        let page = |mib: u64| mib * MIB / 4096;
        let (first, within, beyond) = run(true);
        // 90 % of 40 MiB: a 36 MiB part, the record's first 36 MiB.
        let first_36: Vec<u64> = (0x7000_0000_0000u64..)
            .step_by(4096)
            .take(page(36) as usize)
            .collect();
        assert_eq!(first, (first_36.clone(), page(36), 0));
        // 90 % of 39.5 MiB is 35.55 MiB: within the 2 % slack of the 36 MiB held.
        assert_eq!(within, (first_36.clone(), 0, 0));
        // 90 % of 30 MiB: 27 MiB stay, the part's last 9 MiB go.
        assert_eq!(beyond, (first_36[..page(27) as usize].to_vec(), 0, page(9)));
        let (first, _, _) = run(false);
        assert_eq!(first, (vec![], 0, 0), "whole records: 48 MiB never fits");
    }

    #[test]
    fn a_part_is_shortened_to_the_last_huge_page_boundary_inside_it() {
        use crate::tiering::part_on_huge_boundary;
        let (huge, page) = (Some(2 * MIB), 4096u64);
        let aligned = 0x7000_0000_0000u64;
        // From 3 pages into a huge page, 1,000 pages end 491 pages into the next but one.
        assert_eq!(part_on_huge_boundary(aligned + 3 * page, 1000, huge), 509);
        assert_eq!(part_on_huge_boundary(aligned, 1024, huge), 1024);
        // No boundary inside: as it was.
        assert_eq!(part_on_huge_boundary(aligned, 100, huge), 100);
        assert_eq!(part_on_huge_boundary(aligned + page, 511, huge), 511);
        assert_eq!(part_on_huge_boundary(aligned + 3 * page, 1000, None), 1000);
    }

    /// With transparent huge pages, a part ends on a huge page boundary: a fast tier of 41 MiB
    /// has room for 36.9 MiB of a hot 48 MiB record, and the part promoted is its first 36 MiB,
    /// so no huge page is split; without them, the 36.9 MiB, to the page.
    #[test]
    fn a_part_ends_on_a_huge_page_boundary() {
        let run = |huge: Option<u64>| {
            let mut setup = LargeHotRecord::new(41 * MIB, true, huge);
            let fast = setup.interval().len() as u64;
            let report = setup.daemon.last_interval.clone().unwrap();
            (fast, report.promoted_pages, report.huge_page_splits)
        };
        let page = |bytes: u64| bytes / 4096;
        assert_eq!(run(Some(2 * MIB)), (page(36 * MIB), page(36 * MIB), 0));
        let part = page((41 * MIB) * 9 / 10);
        assert_eq!(run(None), (part, part, 0));
    }

    /// A fast tier with no free memory but 20 MiB of cold file cache: by default the cache is
    /// room (the kernel reclaims it as pages move in), so a hot 8 MiB object is promoted; with
    /// `reclaim_cache` off the budget is free memory only, and nothing moves. What hpcc met in
    /// the evaluation: the libraries it had just read filled the fast node with file cache.
    #[test]
    fn cold_file_cache_in_the_fast_tier_is_room() {
        let run = |reclaim_cache: bool| {
            let sys = tempfile::tempdir().unwrap();
            let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
            let (mut p, _peer) = process();
            let hot = 0x7000_0000_0000u64;
            object_on(&p, &fake, hot, 8 * MIB, 1);
            p.drain();
            let id = p.id;
            let mut topology = two_tiers(40 * MIB, 0);
            topology.nodes[0].cold_cache_bytes = 20 * MIB;
            let mut daemon = daemon_with(topology, p, &fake, &sys);
            daemon.config.reclaim_cache = reclaim_cache;
            let p = daemon.processes.get_mut(&id).unwrap();
            p.records.get_mut(hot).unwrap().interval_accesses = 100.0;
            daemon.interval();
            let report = daemon.last_interval.clone().unwrap();
            (report.budget_bytes_by_tier[0], report.promoted_pages)
        };
        // 20 MiB of cache less the 4 MiB reserve the 90 % fill keeps.
        assert_eq!(run(true), (16 * MIB, 8 * MIB / 4096));
        assert_eq!(run(false), (0, 0));
    }

    /// A process capped at 80 MiB of the fast tier with two hot 48 MiB records in the slow
    /// one: one is promoted whole and the first 32 MiB of the other (the cap's part).
    #[test]
    fn a_capped_process_gets_the_part_its_cap_allows() {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (mut p, _peer) = process();
        let (a, b) = (0x7000_0000_0000u64, 0x7000_1000_0000u64);
        for start in [a, b] {
            object_on(&p, &fake, start, 48 * MIB, 1);
        }
        p.drain();
        p.fast_capacity_bytes = Some(80 * MIB);
        let id = p.id;
        let mut daemon = daemon_with(two_tiers(2048 * MIB, 2000 * MIB), p, &fake, &sys);
        for _ in 0..3 {
            let p = daemon.processes.get_mut(&id).unwrap();
            for start in [a, b] {
                p.records.get_mut(start).unwrap().interval_accesses = 1000.0;
            }
            daemon.interval();
        }
        let fake = fake.lock().unwrap();
        assert_eq!(fake.pages_on(0) as u64, 80 * MIB / 4096, "48 + 32 MiB fast");
        let report = daemon.last_interval.as_ref().unwrap();
        assert_eq!((report.promoted_pages, report.demoted_pages), (0, 0));
    }

    /// A source that delivers the observations it is given, one list per interval, and keeps
    /// the targets it was last asked to follow.
    struct Scripted {
        observations: std::collections::VecDeque<Vec<crate::source::Observation>>,
        targets: Arc<Mutex<Vec<crate::source::Target>>>,
    }

    impl Scripted {
        fn new(observations: Vec<Vec<crate::source::Observation>>) -> Scripted {
            Scripted {
                observations: observations.into(),
                targets: Arc::default(),
            }
        }
    }

    impl crate::source::Source for Scripted {
        fn name(&self) -> &'static str {
            "scripted"
        }
        fn describe(&self) -> String {
            "scripted".into()
        }
        fn follow(&mut self, targets: &[crate::source::Target]) -> anyhow::Result<()> {
            *self.targets.lock().unwrap() = targets.to_vec();
            Ok(())
        }
        fn observe(&mut self) -> anyhow::Result<Vec<crate::source::Observation>> {
            Ok(self.observations.pop_front().unwrap_or_default())
        }
    }

    /// A new object is planned at the end of the interval in which it was sampled. Allocated in
    /// the first half, it becomes a record halfway through (`follow_new_objects`, as `serve`
    /// calls it) and the source follows its range; allocated later, it is still pending when
    /// the interval ends, and becomes a record before the interval's samples are attributed,
    /// so those that fell in its range (DAMON follows a freed predecessor's range, which the
    /// allocator reuses) count for it. One freed before the end takes nothing.
    #[test]
    fn a_new_object_is_planned_at_the_end_of_the_interval_it_was_sampled_in() {
        for (mid_interval, freed) in [(true, false), (false, false), (false, true)] {
            let sys = tempfile::tempdir().unwrap();
            let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
            let (mut daemon, _) = hot_object_behind_a_full_fast_tier(&fake, &sys);
            daemon.interval(); // the fixture's hot object moves up; nothing else is hot
            let id = *daemon.processes.keys().next().unwrap();
            let pid = daemon.processes[&id].pid;
            let new = 0x7000_0000_0000u64 + 128 * MIB;
            fake.lock().unwrap().place(pid, new, MIB, 1);
            let p = daemon.processes.get_mut(&id).unwrap();
            push(p, EventKind::Alloc, new, MIB, 0);
            p.drain();
            assert!(p.records.get_mut(new).is_none(), "pending until committed");
            let seen = crate::source::Observation {
                latency: None,
                pid,
                start: new,
                end: new + MIB,
                weight: 1000.0,
                kind: crate::source::AccessKind::Any,
                time_ns: 1,
            };
            let source = Scripted::new(vec![vec![seen]]);
            let targets = source.targets.clone();
            daemon.source = AccessSource::new(Box::new(source));
            if mid_interval {
                daemon.follow_new_objects().unwrap();
                let followed = targets.lock().unwrap().clone();
                assert!(
                    followed
                        .iter()
                        .any(|t| t.pid == pid && t.ranges.contains(&(new, new + MIB))),
                    "{followed:?}"
                );
            }
            if freed {
                let p = daemon.processes.get_mut(&id).unwrap();
                push(p, EventKind::Free, new, 0, 0);
                p.drain();
            }
            daemon.interval();
            let report = daemon.last_interval.clone().unwrap();
            let promoted = if freed { 0 } else { 256 };
            assert_eq!(report.promoted_pages, promoted, "{report:?}");
            let attributed = report.attributed_share.unwrap();
            assert_eq!(attributed, if freed { 0.0 } else { 1.0 }, "{report:?}");
        }
    }

    /// Accesses sampled in the interval in which the daemon moved a record are no evidence
    /// against its site's placement (pages can look accessed as they move); accesses of a
    /// record it did not move are.
    #[test]
    fn a_record_seen_accessed_as_it_moves_does_not_disprove_its_sites_placement() {
        use crate::process::Evidence;
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (mut daemon, hot) = hot_object_behind_a_full_fast_tier(&fake, &sys);
        let id = *daemon.processes.keys().next().unwrap();
        let site = 0x5173;
        let p = daemon.processes.get_mut(&id).unwrap();
        let cold: Vec<u64> = p
            .records
            .iter()
            .map(|(s, _)| s)
            .filter(|&s| s != hot)
            .collect();
        for (_, r) in p.records.iter_mut() {
            r.created_ns = 1; // old: no birth interval in sight
        }
        for &start in &cold {
            p.records.get_mut(start).unwrap().site = site;
        }
        assert!(p.place_site_auto(site, Some(1)));
        // The hot object comes up; cold ones of the watched site make its room.
        daemon.interval();
        let p = &daemon.processes[&id];
        let moved: Vec<u64> = p.moved_in.keys().copied().collect();
        assert!(!moved.is_empty(), "{:?}", daemon.last_interval);
        let still = *cold.iter().find(|s| !moved.contains(s)).unwrap();
        let pid = p.pid;
        let seen = |start: u64| crate::source::Observation {
            latency: None,
            pid,
            start,
            end: start + MIB,
            weight: 100.0,
            kind: crate::source::AccessKind::Any,
            time_ns: 1,
        };
        daemon.source = AccessSource::new(Box::new(Scripted::new(vec![
            moved.iter().map(|&s| seen(s)).collect(),
            vec![seen(still)],
        ])));
        daemon.interval();
        let evidence = |d: &Daemon| d.processes[&id].placement_evidence[&site];
        assert_eq!(evidence(&daemon), Evidence::Quiet(1), "seen as it moved");
        daemon.interval();
        assert_eq!(
            evidence(&daemon),
            Evidence::Disproved,
            "seen where it stayed"
        );
    }

    /// A trigger that fires before the source has seen any access waits for the first samples
    /// (DAMON's first interval has none), keeping what it counted, instead of planning blind.
    #[test]
    fn triggers_wait_for_the_first_samples() {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (mut daemon, hot) = hot_object_behind_a_full_fast_tier(&fake, &sys);
        let pid = daemon.processes.values().next().unwrap().pid;
        let seen = crate::source::Observation {
            latency: None,
            pid,
            start: hot,
            end: hot + 2 * MIB,
            weight: 100.0,
            kind: crate::source::AccessKind::Any,
            time_ns: 1,
        };
        daemon.source = AccessSource::new(Box::new(Scripted::new(vec![vec![], vec![seen]])));
        // Just attached: the daemon runs short intervals until the first informed plan.
        let id = *daemon.processes.keys().next().unwrap();
        daemon.processes.get_mut(&id).unwrap().attached_ns = crate::monotonic_ns();
        let short = Some(std::time::Duration::from_millis(500));
        daemon.config.startup_interval = short;
        daemon.interval();
        let report = daemon.last_interval.clone().unwrap();
        assert!(!report.enforced && report.promoted_pages == 0, "{report:?}");
        assert_eq!(
            Some(daemon.next_interval_length()),
            short,
            "nothing sampled yet"
        );
        daemon.interval();
        let report = daemon.last_interval.clone().unwrap();
        assert!(report.enforced, "{report:?}");
        assert_eq!(report.promoted_pages, 512, "the hot object, once seen");
        assert_eq!(
            daemon.next_interval_length(),
            daemon.config.interval,
            "planned with samples: back to the long interval"
        );
    }

    /// With `time:3` nothing moves until the third interval; with `alloc:SIZE` nothing moves
    /// until that much was allocated, however the program's first interval went. Priorities
    /// re-plan when programs of different priority come or go.
    #[test]
    fn triggers_gate_enforcement() {
        use objtier_policy::TriggerSpec;
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (mut daemon, hot) = hot_object_behind_a_full_fast_tier(&fake, &sys);
        daemon.policy = objtier_policy::Policy::builtin(
            0.1,
            objtier_policy::Prioritization::Apb,
            &[TriggerSpec::Time(3)],
            Default::default(),
        );
        let id = *daemon.processes.keys().next().unwrap();
        let heat = |d: &mut Daemon| {
            d.processes
                .get_mut(&id)
                .unwrap()
                .records
                .get_mut(hot)
                .unwrap()
                .interval_accesses = 100.0;
        };
        for expected in [false, false, true] {
            heat(&mut daemon);
            daemon.interval();
            let report = daemon.last_interval.as_ref().unwrap();
            assert_eq!(report.enforced, expected, "{report:?}");
            assert_eq!(report.promoted_pages > 0, expected);
        }
        assert_eq!(daemon.totals.enforcements, 1);
        assert!(daemon.last_interval.as_ref().unwrap().trigger_reasons[0].contains("3 interval"));

        // Allocation trigger: 2 MiB allocated against a 4 MiB threshold, then 2 more.
        daemon.policy.triggers = vec![TriggerSpec::Allocation(4 * MIB).build()];
        let p = daemon.processes.get_mut(&id).unwrap();
        push(p, EventKind::Alloc, 0x7100_0000_0000, 2 * MIB, 0);
        p.drain();
        daemon.interval();
        assert!(!daemon.last_interval.as_ref().unwrap().enforced);
        let p = daemon.processes.get_mut(&id).unwrap();
        push(p, EventKind::Alloc, 0x7200_0000_0000, 2 * MIB, 0);
        p.drain();
        daemon.interval();
        let report = daemon.last_interval.as_ref().unwrap();
        assert!(report.enforced);
        assert!(
            report.trigger_reasons[0].contains("4M allocated"),
            "{report:?}"
        );

        // A lone program's priority has nobody to compete with...
        daemon.processes.get_mut(&id).unwrap().priority = 5;
        daemon.interval();
        assert!(!daemon.last_interval.as_ref().unwrap().enforced);
        // ...a second program of another priority re-plans, and so does its leaving.
        let (other, _peer) = crate::process::Process::synthetic(2, 2, 64, 64 << 20).unwrap();
        daemon.processes.insert(other.id, other);
        daemon.interval();
        let report = daemon.last_interval.as_ref().unwrap();
        assert!(report.enforced);
        assert!(report.trigger_reasons[0].contains("priorities changed"));
        daemon.processes.remove(&2);
        daemon.interval();
        let report = daemon.last_interval.as_ref().unwrap();
        assert!(report.enforced && report.trigger_reasons[0].contains("priorities changed"));
        daemon.interval();
        assert!(!daemon.last_interval.as_ref().unwrap().enforced);
    }

    /// A process whose pidfd says it exited is never queried nor moved, even if the fake
    /// kernel still answers for its pid (as it would for another program reusing the pid).
    #[test]
    fn an_exited_process_is_never_touched_even_if_its_pid_answers() {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (mut daemon, _hot) = hot_object_behind_a_full_fast_tier(&fake, &sys);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pidfd = objtier_sys::socket::pidfd_open(child.id());
        child.wait().unwrap();
        let Ok(pidfd) = pidfd else {
            return; // a kernel without pidfds: nothing to test
        };
        let id = *daemon.processes.keys().next().unwrap();
        daemon.processes.get_mut(&id).unwrap().pidfd = Some(pidfd);
        fake.lock().unwrap().calls.clear();
        daemon.interval();
        assert!(fake.lock().unwrap().calls.is_empty());
        let report = daemon.last_interval.as_ref().unwrap();
        assert_eq!(report.promoted_pages + report.demoted_pages, 0);
    }

    /// An EMA decayed below the smallest normal `f32` becomes 0, not a subnormal that would
    /// never leave (0.9 times the smallest subnormal rounds back to it).
    #[test]
    fn a_vanishing_ema_becomes_zero() {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (mut p, _peer) = process();
        push(&p, EventKind::Alloc, 0x10_0000, MIB, event_flags::SNAPSHOT);
        push(&p, EventKind::Alloc, 0x20_0000, MIB, event_flags::SNAPSHOT);
        p.drain();
        p.records.get_mut(0x10_0000).unwrap().ema_accesses = f32::MIN_POSITIVE;
        p.records.get_mut(0x20_0000).unwrap().ema_accesses = 2.0 * f32::MIN_POSITIVE;
        let mut daemon = daemon_with(two_tiers(10 * MIB, 10 * MIB), p, &fake, &sys);
        daemon.interval();
        let records = &daemon.processes.values().next().unwrap().records;
        assert_eq!(records[&0x10_0000].ema_accesses, 0.0);
        assert_eq!(records[&0x20_0000].ema_accesses, 1.8 * f32::MIN_POSITIVE);
    }

    /// A process that vanishes mid-migration is skipped without disturbing the daemon.
    #[test]
    fn a_vanished_process_is_skipped() {
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let (mut p, _peer) = process();
        push(&p, EventKind::Alloc, 0x10_0000, MIB, event_flags::SNAPSHOT);
        p.drain();
        fake.lock().unwrap().gone.push(p.pid);
        let mut daemon = daemon_with(two_tiers(10 * MIB, 10 * MIB), p, &fake, &sys);
        daemon.interval();
        assert_eq!(daemon.totals.intervals, 1);
        assert!(fake.lock().unwrap().moves().is_empty());
    }

    /// Describes a site to `p` as the library would: its frames, one event each.
    fn describe_site(p: &crate::process::Process, ips: &[u64]) -> u64 {
        let site = objtier_wire::site_id::of(ips);
        for (i, &ip) in ips.iter().enumerate() {
            assert!(p.ring.header().push(&objtier_wire::Event {
                kind: EventKind::SiteFrame as u32,
                addr: ip,
                len: (i as u64) << 32 | ips.len() as u64,
                site,
                ..Default::default()
            }));
        }
        site
    }

    /// A memory map with the program at `app` and libc at `libc` (None: not loaded yet).
    fn maps(app: u64, libc: Option<u64>) -> objtier_sys::maps::Maps {
        let mut text = format!(
            "{:x}-{:x} r-xp 00001000 fe:00 7 /usr/bin/app\n",
            app + 0x1000,
            app + 0x3000
        );
        if let Some(libc) = libc {
            text += &format!(
                "{:x}-{:x} r-xp 00028000 fe:00 9 /usr/lib/libc.so.6\n",
                libc + 0x28000,
                libc + 0x1a0000
            );
        }
        objtier_sys::maps::Maps::parse(&text)
    }

    /// A part keeps what it holds within its tolerances; with none above (a process's fast-tier
    /// cap), the pages beyond its plan go down.
    #[test]
    fn a_part_beyond_a_cap_gives_back_what_it_holds_over_its_plan() {
        // 16 pages: the first 10 in tier 0, the rest in tier 1; the plan: 8 in tier 0.
        use super::{moves_of, PartPages};
        use objtier_sys::pages::PageStatus;
        let statuses: Vec<PageStatus> = (0..16).map(|i| if i < 10 { 0 } else { 1 }).collect();
        let tier_of = |s: PageStatus| (s >= 0).then_some(s as usize);
        let part = |below, above| {
            Some(PartPages {
                tier: 0,
                pages: 8,
                below,
                above,
            })
        };
        let (down, up) = moves_of(0, 1, part(4, 4), &statuses, tier_of);
        assert!(down.is_empty() && up.is_empty(), "within the tolerance");
        let (down, up) = moves_of(0, 1, part(4, 0), &statuses, tier_of);
        assert!(up.is_empty());
        assert_eq!(down.len(), 1);
        assert_eq!(
            (down[0].0, down[0].1.len()),
            (1, 2),
            "two pages over the plan go down"
        );
        // Fewer than planned, within what may be missing: nothing comes up.
        let few: Vec<PageStatus> = (0..16).map(|i| if i < 6 { 0 } else { 1 }).collect();
        let (down, up) = moves_of(0, 1, part(4, 0), &few, tier_of);
        assert!(down.is_empty() && up.is_empty());
    }

    /// The site store hears of a proactive placement only once two plans after it saw none of
    /// its site's records accessed, and forgets the site as soon as one does, also after that.
    #[test]
    fn a_placement_is_remembered_only_while_its_objects_stay_unaccessed() {
        use crate::process::tests::process;
        use crate::sitestore::Learnt;
        let (mut p, _peer) = process();
        let (app, libc) = (0x5555_0000_0000, 0x7f00_0000_0000);
        let site = |offset: u64| [app + offset, libc + 0x29d90];
        let cold = describe_site(&p, &site(0x1234));
        let late_busy = describe_site(&p, &site(0x1300));
        let early_busy = describe_site(&p, &site(0x1400));
        p.drain();
        assert!(p.name_sites(&maps(app, Some(libc))).is_empty());
        for s in [cold, late_busy, early_busy] {
            assert!(p.place_site_auto(s, Some(1)));
        }
        let remembered = |p: &crate::process::Process| {
            let mut seen: Vec<(String, Option<(u32, Learnt)>)> = p
                .seen_sites(crate::monotonic_ns())
                .into_iter()
                .map(|seen| (seen.frames[0].clone(), seen.placed))
                .collect();
            seen.sort_by(|a, b| a.0.cmp(&b.0));
            seen
        };
        let name = |offset: u64| format!("/usr/bin/app+{offset:#x}");
        assert!(
            remembered(&p).is_empty(),
            "nothing confirmed yet: the store keeps its own"
        );
        p.placement_plans_ended(|s| s == early_busy);
        assert_eq!(
            remembered(&p),
            [(name(0x1400), None)],
            "disproved: forgotten"
        );
        p.placement_plans_ended(|_| false);
        let confirmed = Some((1, Learnt::Proactive));
        assert_eq!(
            remembered(&p),
            [
                (name(0x1234), confirmed),
                (name(0x1300), confirmed),
                (name(0x1400), None)
            ]
        );
        // Seen accessed after it was confirmed (and saved): forgotten again.
        p.placement_plans_ended(|s| s == late_busy);
        p.placement_plans_ended(|_| false);
        assert_eq!(
            remembered(&p),
            [
                (name(0x1234), confirmed),
                (name(0x1300), None),
                (name(0x1400), None)
            ]
        );
    }

    /// The program of the warm-start tests' process.
    fn app_program() -> crate::sitestore::Program {
        crate::sitestore::Program {
            exe: "/usr/bin/app".into(),
            uid: 0,
            exe_size: 8192,
            exe_mtime_ns: 1,
        }
    }

    /// Warm start end to end through the daemon: a placement learnt in one run is saved (at
    /// the interval, and at detach) and applied in the next run of the same program, whose
    /// addresses and site ids ASLR changed, at attach when the call path's modules are mapped,
    /// else once the library describes the site; the live policy can undo it, and the store
    /// forgets it then.
    #[test]
    fn a_learnt_placement_is_saved_and_applied_in_the_next_run() {
        use crate::process::PlacedBy;
        use crate::sitestore::{Learnt, SiteStore};
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let program = app_program();
        let store_dir = sys.path().join("sites");
        // The cold site's call path: app+0x1234 called from libc+0x29d90, and a hot one.
        let path_at = |app: u64, libc: u64| vec![app + 0x1234, libc + 0x29d90];
        let cold_names = vec![
            "/usr/bin/app+0x1234".to_string(),
            "/usr/lib/libc.so.6+0x29d90".to_string(),
        ];
        let run = |app: u64, libc: u64, mapped_at_attach: bool| {
            let (p, peer) = process();
            let mut daemon = daemon_with(two_tiers(10 * MIB, 10 * MIB), p, &fake, &sys);
            daemon.site_store = Some(SiteStore::new(store_dir.clone()));
            let at_attach = maps(app, mapped_at_attach.then_some(libc));
            daemon.warm_start(1, program.clone(), |_| Some(at_attach));
            (daemon, peer)
        };

        // Run 1 learns that the cold site starts in tier 1.
        let (app, libc) = (0x5555_0000_0000, 0x7f00_0000_0000);
        let (mut daemon, _peer) = run(app, libc, true);
        let p = daemon.processes.get_mut(&1).unwrap();
        assert!(p.placements.is_empty(), "nothing remembered yet");
        let cold = describe_site(p, &path_at(app, libc));
        let other = describe_site(p, &[app + 0x1300, libc + 0x29d90]);
        let late = describe_site(p, &[app + 0x1400, libc + 0x29d90]);
        let busy = describe_site(p, &[app + 0x1500, libc + 0x29d90]);
        p.drain();
        assert!(p.name_sites(&maps(app, Some(libc))).is_empty());
        assert_eq!(p.sites[&cold].names.as_ref(), Some(&cold_names));
        assert!(
            p.place_site_auto(cold, Some(1)),
            "as the proactive policy does"
        );
        // Placed too, but its records stay accessed (they lost the fast tier's budget): the
        // placement is not confirmed, whatever the live policy keeps.
        assert!(p.place_site_auto(busy, Some(1)));
        let file = daemon.site_store.as_ref().unwrap().file_of(&program);
        assert!(!file.exists());
        daemon.interval();
        assert!(!file.exists(), "no plan has kept the placement yet");
        // The next plan keeps it (this test's source samples nothing, so the plans that would
        // call this do not run); a detach now would not save it either.
        let p = daemon.processes.get_mut(&1).unwrap();
        p.placement_plans_ended(|site| site == busy);
        daemon.interval();
        assert!(!file.exists(), "one plan kept it: not yet");
        let p = daemon.processes.get_mut(&1).unwrap();
        p.placement_plans_ended(|site| site == busy);
        daemon.interval();
        assert!(
            file.exists(),
            "saved at the interval of the second plan that kept it"
        );
        let stored = SiteStore::new(store_dir.clone()).load(&program);
        assert_eq!(
            stored.len(),
            1,
            "the other site has no placement to remember, the busy one no confirmed one"
        );
        assert_eq!(
            (&stored[0].frames, stored[0].tier, stored[0].learnt),
            (&cold_names, Some(1), Some(Learnt::Proactive))
        );
        // A placement by hand after the last interval is saved when the process detaches; a
        // proactive one no plan has kept is not (the program's last seconds, unchecked).
        let p = daemon.processes.get_mut(&1).unwrap();
        assert!(p.place_site(other, Some(0)));
        assert!(p.place_site_auto(late, Some(1)));
        daemon.detach(1);
        let stored = SiteStore::new(store_dir.clone()).load(&program);
        assert_eq!(stored.len(), 2, "{stored:?}");
        assert_eq!(
            (&stored[1].frames[0], stored[1].tier, stored[1].learnt),
            (
                &"/usr/bin/app+0x1300".to_string(),
                Some(0),
                Some(Learnt::Hand)
            )
        );

        // Run 2, another ASLR layout: the same call path has other addresses and another id,
        // and is placed at attach, before the library describes it.
        let (app, libc) = (0x5611_0000_0000, 0x7f11_0000_0000);
        let (mut daemon, _peer) = run(app, libc, true);
        let cold2 = objtier_wire::site_id::of(&path_at(app, libc));
        assert_ne!(cold2, cold);
        let p = daemon.processes.get_mut(&1).unwrap();
        assert_eq!(p.ring.control().site_tier(cold2), Some(1));
        assert_eq!(p.placements.get(&cold2), Some(&(1, PlacedBy::WarmStart)));
        let status = crate::status::status_json(&daemon);
        let sites = status["processes"][0]["sites"].as_array().unwrap();
        let site = sites
            .iter()
            .find(|s| s["site"] == format!("{cold2:#018x}"))
            .unwrap();
        assert_eq!(site["placed_by"], "warm start");
        assert_eq!(site["start_tier"], 1);
        assert_eq!(
            site["frames"][0], "/usr/bin/app+0x1234",
            "remembered frames"
        );
        assert_eq!(status["processes"][0]["warm_start"]["placed_at_attach"], 2);
        // Described later, it keeps the placement (named, nothing new to place).
        let p = daemon.processes.get_mut(&1).unwrap();
        assert_eq!(describe_site(p, &path_at(app, libc)), cold2);
        p.drain();
        assert!(p.name_sites(&maps(app, Some(libc))).is_empty());
        assert_eq!(p.placements.get(&cold2), Some(&(1, PlacedBy::WarmStart)));
        // Nothing learnt: detaching writes nothing.
        let modified = std::fs::metadata(&file).unwrap().modified().unwrap();
        daemon.detach(1);
        assert_eq!(
            std::fs::metadata(&file).unwrap().modified().unwrap(),
            modified
        );

        // Run 3: libc is not mapped at attach, so the site is placed when it is named.
        let (app, libc) = (0x5622_0000_0000, 0x7f22_0000_0000);
        let (mut daemon, _peer) = run(app, libc, false);
        let p = daemon.processes.get_mut(&1).unwrap();
        assert!(p.placements.is_empty());
        let cold3 = describe_site(p, &path_at(app, libc));
        p.drain();
        assert_eq!(
            p.name_sites(&maps(app, Some(libc))),
            vec![(cold3, crate::process::Warmed::Placed(1))]
        );
        assert_eq!(p.ring.control().site_tier(cold3), Some(1));
        assert_eq!(p.placements.get(&cold3), Some(&(1, PlacedBy::WarmStart)));
        // The live policy overrides it (the site's objects turned out hot); the store forgets it
        // and keeps what this run did not see.
        assert!(p.place_site_auto(cold3, None));
        assert_eq!(p.ring.control().site_tier(cold3), None);
        daemon.detach(1);
        let stored = SiteStore::new(store_dir).load(&program);
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].frames[0], "/usr/bin/app+0x1300");
    }

    /// Warm start of short-lived sites: a run shorter than an interval, whose sites were never
    /// named by an interval nor judged live, still leaves its short-lived site in the store
    /// (named with the map read at attach, judged over the whole run); the next run samples
    /// the site from its attach, and a sample that lives long unmarks it and makes the store
    /// forget it.
    #[test]
    fn a_short_lived_site_is_remembered_and_sampled_from_the_next_runs_start() {
        use crate::process::tests::{churn, push_at};
        use crate::sitestore::SiteStore;
        let sys = tempfile::tempdir().unwrap();
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let program = app_program();
        let store_dir = sys.path().join("sites");
        let temp_at = |app: u64, libc: u64| vec![app + 0x1234, libc + 0x29d90];
        let kept_at = |app: u64, libc: u64| vec![app + 0x1300, libc + 0x29d90];
        let run = |app: u64, libc: u64| {
            let (p, peer) = process();
            let mut daemon = daemon_with(two_tiers(10 * MIB, 10 * MIB), p, &fake, &sys);
            daemon.site_store = Some(SiteStore::new(store_dir.clone()));
            let p = daemon.processes.get_mut(&1).unwrap();
            // As attach sets them (the test's young age is short, so churn() dies young).
            p.interval_ns = 2_000_000_000;
            p.young_ns = Some(1_000_000);
            p.attached_ns = crate::monotonic_ns();
            daemon.warm_start(1, program.clone(), |_| Some(maps(app, Some(libc))));
            (daemon, peer)
        };

        // Run 1: half a second, no interval; 20,000 temporaries at one site, and a few at
        // another whose objects are kept.
        let (app, libc) = (0x5555_0000_0000, 0x7f00_0000_0000);
        let (mut daemon, _peer) = run(app, libc);
        let p = daemon.processes.get_mut(&1).unwrap();
        let temp = describe_site(p, &temp_at(app, libc));
        let kept = describe_site(p, &kept_at(app, libc));
        p.drain();
        churn(p, temp, 20_000, 0);
        push_at(p, EventKind::Alloc, 0x5000_0000, 0, kept, 0);
        p.drain();
        p.commit_pending(10_000_000);
        assert!(
            p.short_lived_sites().is_empty(),
            "not judged live: no interval"
        );
        daemon.detach(1);
        let stored = SiteStore::new(store_dir.clone()).load(&program);
        assert_eq!(stored.len(), 1, "{stored:?}");
        assert_eq!(stored[0].frames[0], "/usr/bin/app+0x1234");
        assert!(stored[0].short_lived && stored[0].placed().is_none());

        // Run 2, another layout: the site is marked at attach, before its first object.
        let (app, libc) = (0x5611_0000_0000, 0x7f11_0000_0000);
        let (mut daemon, _peer) = run(app, libc);
        let temp2 = objtier_wire::site_id::of(&temp_at(app, libc));
        let p = daemon.processes.get_mut(&1).unwrap();
        assert!(p.ring.control().site_advice(temp2).short_lived);
        assert_eq!(p.short_lived_sites(), [temp2]);
        let status = crate::status::status_json(&daemon);
        assert_eq!(status["processes"][0]["warm_start"]["placed_at_attach"], 1);
        assert_eq!(
            status["processes"][0]["short_lived_sites"][0]["remembered"],
            true
        );
        // Samples that die young keep it so, across intervals.
        let p = daemon.processes.get_mut(&1).unwrap();
        assert_eq!(describe_site(p, &temp_at(app, libc)), temp2);
        p.drain();
        // (As the interval does, from /proc, which has no map for this test's process.)
        assert!(
            p.name_sites(&maps(app, Some(libc))).is_empty(),
            "marked already"
        );
        push_at(
            p,
            EventKind::Alloc,
            0x6000_0000,
            0,
            temp2,
            event_flags::SAMPLED,
        );
        push_at(p, EventKind::Free, 0x6000_0000, 5, 0, 0);
        p.drain();
        daemon.interval();
        let p = daemon.processes.get_mut(&1).unwrap();
        assert_eq!(p.short_lived_sites(), [temp2], "still short-lived");
        // A sample lives long: the site is unmarked, and the store forgets it at once.
        push_at(
            p,
            EventKind::Alloc,
            0x6001_0000,
            0,
            temp2,
            event_flags::SAMPLED,
        );
        p.drain();
        p.commit_pending(2_000_000);
        daemon.interval();
        let p = daemon.processes.get_mut(&1).unwrap();
        assert!(!p.ring.control().site_advice(temp2).short_lived);
        let stored = SiteStore::new(store_dir.clone()).load(&program);
        assert!(stored.is_empty(), "saved at the interval: {stored:?}");
        daemon.detach(1);
        assert!(SiteStore::new(store_dir).load(&program).is_empty());
    }
}
