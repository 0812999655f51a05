//! Stage 4 of an interval: the plan. The policy gives the tiers' budgets, the records' order and
//! a tier per record (or a part of one in a faster tier); sites are placed proactively from it
//! ([`super::proactive`]); and [`plan_moves`] works out, from the snapshot alone, which pages
//! must move where, in one pass over the records in rank order: demotions coldest first,
//! promotions hottest first.

use super::snapshot::{RecordPages, Snapshot, NOT_LOCATED};
use super::IntervalReport;
use crate::daemon::Daemon;
use objtier_policy::migration::{moves_of, MovePlan, PartRequest};
use objtier_policy::{Assignment, Migrate, TierBudget, TierRoom};
use objtier_sys::pages::PageMover;

/// A record with pages to move this step: its location is unknown after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MovingRecord {
    /// The process's index in the snapshot.
    pub process: usize,
    pub start: u64,
}

/// What an enforcement does: the moves, and the records they touch.
#[derive(Debug, Default)]
pub struct Plan {
    /// Demotions coldest first, promotions hottest first.
    pub moves: MovePlan,
    pub moving: Vec<MovingRecord>,
    /// The system's huge page size, if the plan read it.
    pub huge_page_size: HugePageSize,
}

/// The system's transparent huge page size, read from the page mover (sysfs) at most once a
/// step, and only when something needs it: record parts, and the splits before the moves.
#[derive(Clone, Copy, Debug, Default)]
pub struct HugePageSize(Option<Option<u64>>);

impl HugePageSize {
    pub fn get(&mut self, mover: &mut dyn PageMover) -> Option<u64> {
        *self.0.get_or_insert_with(|| mover.huge_page_size())
    }
}

/// Which records may have pages to move, by candidate: those with pages in a tier other than
/// their target, and those with a part. Most records are already where they belong, so the
/// walk in rank order reads one byte of each record that does not move, not its candidate. A
/// process whose pages must not move keeps every page where it is, a record whose object
/// spilled across two tiers included.
pub fn records_that_may_move(snapshot: &Snapshot, assignment: &Assignment) -> Vec<bool> {
    let mut may_move: Vec<bool> = snapshot
        .candidates
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
    for (may, span) in may_move.iter_mut().zip(snapshot.spans.iter()) {
        if snapshot.pinned[span.process] {
            *may = false;
        }
    }
    may_move
}

/// The pages that must move for the records to be where `assignment` puts them (the pure half
/// of the plan): in `order` (the policy's, hottest first), each record that may move and whose
/// pages were located is compared page by page with its target and its part
/// ([`objtier_policy::migration::moves_of`]; the part's pages by the policy's
/// [`Migrate::part_pages`]). `huge` is the huge page size when the plan has parts.
pub fn plan_moves(
    snapshot: &Snapshot,
    order: &[usize],
    assignment: &Assignment,
    may_move: &[bool],
    budgets: &[TierBudget],
    huge: Option<u64>,
    migrate: &dyn Migrate,
) -> (MovePlan, Vec<MovingRecord>) {
    let mut plan = MovePlan::default();
    let mut moving = Vec::new();
    for &ci in order {
        if !may_move[ci] {
            continue;
        }
        let target = assignment.tiers[ci];
        let span: &RecordPages = &snapshot.spans[ci];
        let part = assignment.part_of(ci).map(|p| {
            migrate.part_pages(PartRequest {
                record_start: span.start,
                tier: p.tier,
                bytes: p.bytes,
                budget_bytes: budgets[p.tier].budget_bytes,
                capped: snapshot.policies[span.process].fast_cap_bytes.is_some(),
                huge_bytes: huge,
            })
        });
        if span.first_page == NOT_LOCATED {
            // Its process exited, or its pages could not be located.
            continue;
        }
        let moves = moves_of(span.start, target, part, snapshot.statuses_of(span), |s| {
            snapshot.tier_of(s)
        });
        if moves.is_empty() {
            continue;
        }
        moving.push(MovingRecord {
            process: span.process,
            start: span.start,
        });
        plan.add(span.process, moves);
    }
    (plan.finish(), moving)
}

impl Daemon {
    /// Stage 4 (see the module doc).
    pub(super) fn plan(&mut self, snapshot: &mut Snapshot, report: &mut IntervalReport) -> Plan {
        let budgets = self.budgets(snapshot);
        report.budget_bytes_by_tier = budgets.iter().map(|b| b.budget_bytes).collect();
        let order = self.policy.prioritize.order(&snapshot.candidates);
        let assignment =
            self.policy
                .enforce
                .assign(&snapshot.candidates, &order, &budgets, &snapshot.policies);
        report.record_parts = assignment.parts.len();
        report.record_part_bytes = assignment.parts.iter().map(|p| p.bytes).sum();

        // Proactive placement: sites whose objects are planned below the fastest tier start
        // new ones there. Only with samples: without them, "planned slow" means "not seen".
        if self.source.samples() {
            self.place_sites_proactively(snapshot, &assignment.tiers);
        }

        let may_move = records_that_may_move(snapshot, &assignment);
        self.locate_stale_movers(snapshot, &may_move);
        let mut huge_page_size = HugePageSize::default();
        let huge = if assignment.parts.is_empty() {
            None
        } else {
            huge_page_size.get(self.mover.as_mut())
        };
        let (moves, moving) = plan_moves(
            snapshot,
            &order,
            &assignment,
            &may_move,
            &budgets,
            huge,
            self.policy.migrate.as_ref(),
        );
        Plan {
            moves,
            moving,
            huge_page_size,
        }
    }

    /// The policy's budget for each tier, from its room and what the records hold there.
    fn budgets(&self, snapshot: &Snapshot) -> Vec<TierBudget> {
        let rooms: Vec<TierRoom> = snapshot
            .ours_by_tier
            .iter()
            .enumerate()
            .map(|(tier, &ours)| TierRoom {
                capacity_bytes: self.tier_capacity(tier),
                room_bytes: self.tier_room(tier).1,
                objtier_bytes: ours,
            })
            .collect();
        let budgets = self.policy.enforce.budgets(&rooms, self.config.fill);
        for (tier, (room, budget)) in rooms.iter().zip(&budgets).enumerate() {
            if tier + 1 == rooms.len() {
                break;
            }
            tracing::debug!(
                tier,
                capacity_mib = room.capacity_bytes >> 20,
                free_mib = self.topology.tier_bytes(tier).1 >> 20,
                room_mib = room.room_bytes >> 20,
                ours_mib = room.objtier_bytes >> 20,
                budget_mib = budget.budget_bytes >> 20,
                "tier budget"
            );
        }
        budgets
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use objtier_policy::{Candidate, Part, ProcessPolicy, RoomFirst, TierBytes};
    use objtier_wire::PAGE_SIZE;

    const PAGE: u64 = PAGE_SIZE as u64;

    /// A snapshot of two processes on two tiers (node n is tier n), without a daemon: process 0
    /// has records a (2 pages, tier 1), b (2 pages, tier 0) and c (1 page, tier 1, not located);
    /// process 1, whose pages must not move, has d (1 page, tier 1).
    fn snapshot() -> Snapshot {
        let record = |id: usize, process: usize, start: u64, tiers: &[i32], first_page: usize| {
            let mut resident = TierBytes::from_elem(0, 2);
            for &t in tiers {
                resident[t as usize] += PAGE;
            }
            let candidate = Candidate {
                id,
                process,
                len_bytes: tiers.len() as u64 * PAGE,
                created_ns: 0,
                last_access_ns: 0,
                ema_accesses: 0.0,
                recent_accesses: 0.0,
                previous_accesses: 0.0,
                resident_bytes_by_tier: resident,
                advice: 0,
            };
            let span = RecordPages {
                process,
                start,
                first_page,
                pages: tiers.len(),
                site: 0,
            };
            (candidate, span)
        };
        let (a, b, c, d) = (0x10000, 0x20000, 0x30000, 0x40000);
        let records = [
            record(0, 0, a, &[1, 1], 0),
            record(1, 0, b, &[0, 0], 2),
            record(2, 0, c, &[1], NOT_LOCATED),
            record(3, 1, d, &[1], 0),
        ];
        Snapshot {
            process_ids: vec![1, 2],
            policies: vec![ProcessPolicy::default(); 2],
            pinned: vec![false, true],
            candidates: records.iter().map(|(c, _)| c.clone()).collect(),
            spans: records.into_iter().map(|(_, s)| s).collect(),
            statuses: vec![vec![1, 1, 0, 0], vec![1]],
            ours_by_tier: vec![2 * PAGE, 4 * PAGE],
            node_tiers: vec![Some(0), Some(1)],
        }
    }

    /// Everything up, then everything down: a and c would go up and b down; c was not located
    /// and d's process is pinned, so neither moves. Promotions come in rank order, and a's
    /// pages before b's demotion (coldest first, alone here).
    #[test]
    fn the_plan_moves_what_is_not_where_the_assignment_puts_it() {
        let snapshot = snapshot();
        let assignment = Assignment {
            tiers: vec![0, 1, 0, 0],
            parts: vec![],
        };
        let may_move = records_that_may_move(&snapshot, &assignment);
        assert_eq!(may_move, [true, true, true, false], "d's process is pinned");
        let budgets = [
            TierBudget { budget_bytes: 0 },
            TierBudget { budget_bytes: 0 },
        ];
        let (plan, moving) = plan_moves(
            &snapshot,
            &[0, 2, 3, 1],
            &assignment,
            &may_move,
            &budgets,
            None,
            &RoomFirst,
        );
        assert_eq!(plan.promotions.len(), 1);
        assert_eq!(plan.promotions[0].pages, [0x10000, 0x10000 + PAGE]);
        assert_eq!(plan.demotions.len(), 1);
        assert_eq!(plan.demotions[0].pages, [0x20000, 0x20000 + PAGE]);
        assert_eq!(
            moving,
            [
                MovingRecord {
                    process: 0,
                    start: 0x10000
                },
                MovingRecord {
                    process: 0,
                    start: 0x20000
                }
            ],
            "c was not located: it waits"
        );
    }

    /// A part in the fastest tier takes the record's first pages: a 2-page record in tier 1
    /// with a 1-page part in tier 0 promotes its first page only.
    #[test]
    fn a_part_takes_the_first_pages_of_its_record() {
        let snapshot = snapshot();
        let assignment = Assignment {
            tiers: vec![1, 0, 1, 1],
            parts: vec![Part {
                candidate: 0,
                tier: 0,
                bytes: PAGE,
            }],
        };
        let may_move = records_that_may_move(&snapshot, &assignment);
        assert!(may_move[0], "a record with a part may move");
        let budgets = [
            TierBudget { budget_bytes: 0 },
            TierBudget {
                budget_bytes: u64::MAX,
            },
        ];
        let (plan, _) = plan_moves(
            &snapshot,
            &[0, 1, 2, 3],
            &assignment,
            &may_move,
            &budgets,
            None,
            &RoomFirst,
        );
        assert_eq!(plan.promotions.len(), 1);
        assert_eq!(plan.promotions[0].pages, [0x10000]);
        assert!(plan.demotions.is_empty());
    }
}
