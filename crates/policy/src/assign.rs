//! Routine 4's built-in enforcement: budgets per tier, and a tier (or a part in a faster one)
//! for every record, fastest tiers filled first.

use crate::candidate::AdviceClass;
use crate::{Candidate, FillFastestFirst, PAGE_BYTES};
use objtier_wire::advice;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use crate::{prioritize, Prioritization, TierBytes};

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
}
