//! Property tests of the planner's invariants, over plans drawn at random: no tier over its
//! budget (but for the documented slack of records that stay), no process over its fast-tier
//! cap, parts only above their record's tier; no page planned twice, and a promotion into the
//! fastest tier only once demotions made its room (or none are left).

use crate::migration::{moves_of, order_batches, MovePlan};
use crate::test_support::MIB;
use crate::{
    assign_tiers, prioritize, Candidate, FillFastestFirst, Prioritization, ProcessPolicy,
    TierBudget, TierBytes, KEEP_SLACK,
};
use objtier_wire::PAGE_SIZE;
use proptest::prelude::*;

/// A record of 1 to 64 MiB, resident in one of three tiers (or not at all), of one of three
/// processes, accessed or not.
fn candidate() -> impl Strategy<Value = (u64, Option<usize>, usize, f64, f64)> {
    (
        1..=64u64,
        prop::option::of(0..3usize),
        0..3usize,
        0.0..100.0f64,
        prop_oneof![Just(0.0), 0.0..100.0f64],
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn assignments_keep_budgets_caps_and_parts(
        drawn in prop::collection::vec(candidate(), 0..60),
        budgets in prop::collection::vec(0..512u64, 2),
        caps in prop::collection::vec(prop::option::of(0..256u64), 3),
        priorities in prop::collection::vec(0..2i32, 3),
        record_parts: bool,
        reserve in prop::option::of(0..256u64),
    ) {
        let candidates: Vec<Candidate> = drawn
            .iter()
            .enumerate()
            .map(|(id, &(mib, home, process, ema, recent))| {
                let mut tiers = [0u64; 3];
                if let Some(home) = home {
                    tiers[home] = mib * MIB;
                }
                Candidate {
                    id,
                    process,
                    len_bytes: mib * MIB,
                    created_ns: id as u64,
                    last_access_ns: u64::from(recent > 0.0),
                    ema_accesses: ema,
                    recent_accesses: recent,
                    previous_accesses: ema,
                    resident_bytes_by_tier: TierBytes::from_slice(&tiers),
                    advice: 0,
                }
            })
            .collect();
        let mut tier_budgets: Vec<TierBudget> =
            budgets.iter().map(|&b| TierBudget { budget_bytes: b * MIB }).collect();
        tier_budgets.push(TierBudget { budget_bytes: u64::MAX });
        let processes: Vec<ProcessPolicy> = caps
            .iter()
            .zip(&priorities)
            .map(|(cap, &priority)| ProcessPolicy {
                fast_cap_bytes: cap.map(|c| c * MIB),
                priority,
            })
            .collect();
        let options = FillFastestFirst {
            fast_reserve_bytes: reserve.map(|r| r * MIB),
            record_parts,
        };
        let order = prioritize(&candidates, Prioritization::Apb);
        let a = assign_tiers(&candidates, &order, &tier_budgets, &processes, &options);
        prop_assert_eq!(a.tiers.len(), candidates.len());
        let mut charged = [0u64; 3];
        let mut overstay = [0u64; 3];
        let mut fast_of_process = [0u64; 3];
        for (i, c) in candidates.iter().enumerate() {
            let tier = a.tiers[i];
            let parts: Vec<_> = a.parts.iter().filter(|p| p.candidate == i).collect();
            prop_assert!(parts.len() <= 1, "at most one part per record");
            let mut rest = c.resident_bytes();
            for part in parts {
                prop_assert!(record_parts);
                prop_assert!(part.tier < tier, "a part is faster than its record's tier");
                prop_assert!(part.bytes < rest && part.bytes % PAGE_SIZE as u64 == 0);
                charged[part.tier] += part.bytes;
                if part.tier == 0 {
                    fast_of_process[c.process] += part.bytes;
                }
                rest -= part.bytes;
            }
            charged[tier] += rest;
            if tier == 0 {
                fast_of_process[c.process] += rest;
            }
            if c.main_tier() == Some(tier) {
                // A record that stays may overstay the budget by the slack.
                overstay[tier] += (tier_budgets[tier].budget_bytes as f64 * KEEP_SLACK) as u64;
            }
            if c.recent_accesses == 0.0 {
                if let Some(home) = c.main_tier() {
                    prop_assert!(tier >= home, "a record not seen accessed never moves up");
                }
            }
        }
        for tier in 0..2 {
            prop_assert!(
                charged[tier] <= tier_budgets[tier].budget_bytes + overstay[tier],
                "tier {} holds {} bytes, budget {} (+{} slack)",
                tier, charged[tier], tier_budgets[tier].budget_bytes, overstay[tier]
            );
        }
        for (p, policy) in processes.iter().enumerate() {
            if let Some(cap) = policy.fast_cap_bytes {
                prop_assert!(fast_of_process[p] <= cap, "process {} over its cap", p);
            }
        }
    }

    #[test]
    fn steps_move_each_page_once_and_make_room_before_promoting(
        records in prop::collection::vec(
            (0..2usize, prop::collection::vec(prop::option::of(0..2usize), 1..32)),
            0..40,
        ),
        fast_room_pages in -64..64i64,
        batch_pages in 1..16usize,
    ) {
        let mut plan = MovePlan::default();
        let mut moving = 0;
        for (r, (target, statuses)) in records.iter().enumerate() {
            let start = (r as u64) << 32;
            let moves = moves_of(start, *target, None, statuses, |s| s);
            for (tier, pages) in moves.down.iter().chain(&moves.up) {
                prop_assert_eq!(*tier, *target);
                for page in pages {
                    let index = ((page - start) / PAGE_SIZE as u64) as usize;
                    prop_assert!(statuses[index].is_some_and(|t| t != *target));
                }
                moving += pages.len();
            }
            plan.add(0, moves);
        }
        let batches = order_batches(plan, fast_room_pages, batch_pages);
        let mut seen = std::collections::HashSet::new();
        for b in &batches {
            prop_assert!(!b.pages.is_empty() && b.pages.len() <= batch_pages);
            for &page in &b.pages {
                prop_assert!(seen.insert(page), "page {:#x} planned twice", page);
            }
        }
        prop_assert_eq!(seen.len(), moving);
        let mut room = fast_room_pages;
        let demotions_total = batches.iter().filter(|b| b.demotion).count();
        let mut demotions_done = 0;
        for b in &batches {
            if b.demotion {
                room += b.pages.len() as i64;
                demotions_done += 1;
            } else if b.tier == 0 {
                prop_assert!(
                    room >= b.pages.len() as i64 || demotions_done == demotions_total,
                    "a promotion of {} pages with room for {} while demotions wait",
                    b.pages.len(), room
                );
                room -= b.pages.len() as i64;
            }
        }
    }
}
