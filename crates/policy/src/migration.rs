//! From an assignment to page moves: which pages of a record move, in what order a step moves
//! them, and which huge pages it splits first. Pure: the daemon locates the pages, hands their
//! tiers in, and executes what comes out through its page mover.
//!
//! These are the built-in rules of the [`Migrate`](crate::Migrate) routine; a policy of its own
//! may replace any of them.

use objtier_wire::PAGE_SIZE;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Pages of one process to move to one tier, in the order they should move.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageMoves {
    /// The process's index (as `Candidate::process`).
    pub process: usize,
    pub tier: usize,
    /// Page addresses.
    pub pages: Vec<u64>,
}

/// What one record's pages must do for it to be where the plan puts it: the pages per target
/// tier going down (to a slower tier) and up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordMoves {
    /// (tier, pages) pairs, one per target tier.
    pub down: Vec<(usize, Vec<u64>)>,
    pub up: Vec<(usize, Vec<u64>)>,
}

impl RecordMoves {
    pub fn is_empty(&self) -> bool {
        self.down.is_empty() && self.up.is_empty()
    }
}

/// A step's moves: demotions coldest first, promotions hottest first. Build it by
/// [`MovePlan::add`]ing each moving record in rank order (hottest first), then
/// [`MovePlan::finish`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MovePlan {
    pub demotions: Vec<PageMoves>,
    pub promotions: Vec<PageMoves>,
    /// Demotions in rank order until `finish` reverses them.
    down_by_rank: Vec<PageMoves>,
}

impl MovePlan {
    /// Adds the moves of a record of process `process`, the next in rank order.
    pub fn add(&mut self, process: usize, moves: RecordMoves) {
        for (tier, pages) in moves.up {
            push_merged(&mut self.promotions, process, tier, pages);
        }
        for (tier, pages) in moves.down {
            self.down_by_rank.push(PageMoves {
                process,
                tier,
                pages,
            });
        }
    }

    /// Puts the demotions coldest first (merging neighbours of the same process and tier).
    pub fn finish(mut self) -> MovePlan {
        for m in std::mem::take(&mut self.down_by_rank).into_iter().rev() {
            push_merged(&mut self.demotions, m.process, m.tier, m.pages);
        }
        self
    }

    pub fn is_empty(&self) -> bool {
        self.demotions.is_empty() && self.promotions.is_empty() && self.down_by_rank.is_empty()
    }
}

/// Appends `pages` for (process, tier) to `out`, extending the last entry when it is the same.
fn push_merged(out: &mut Vec<PageMoves>, process: usize, tier: usize, pages: Vec<u64>) {
    if pages.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(last) if last.process == process && last.tier == tier => last.pages.extend(pages),
        _ => out.push(PageMoves {
            process,
            tier,
            pages,
        }),
    }
}

/// One `move_pages` call of a step: pages of one process to one tier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub process: usize,
    pub tier: usize,
    pub pages: Vec<u64>,
    /// Whether the pages go to a slower tier.
    pub demotion: bool,
}

/// A part of a record planned in a faster tier than the rest of it, in pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartPages {
    pub tier: usize,
    pub pages: usize,
    /// How many pages fewer than `pages` it may hold before any move up.
    pub below: usize,
    /// How many pages more than `pages` it may hold before any move down.
    pub above: usize,
}

/// What the planner knows when it turns a [`Part`](crate::Part) into pages.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PartRequest {
    /// The record's first page's address.
    pub record_start: u64,
    pub tier: usize,
    pub bytes: u64,
    /// The budget of the part's tier this plan.
    pub budget_bytes: u64,
    /// The process has a fast-tier cap (`objtier run --fast-capacity`).
    pub capped: bool,
    /// The system's transparent huge page size, when the planner knows it.
    pub huge_bytes: Option<u64>,
}

/// The built-in part rule: the part ends on a huge page boundary where that leaves it any
/// ([`part_on_huge_boundary`]), and within a tolerance (the budget's slack, at most a quarter
/// of the part) it keeps what it holds, so a budget that moves a little moves no page. A part
/// in the fastest tier of a capped process has no tolerance above it: the cap is a promise.
pub fn part_pages(request: PartRequest) -> PartPages {
    let pages = part_on_huge_boundary(
        request.record_start,
        (request.bytes / PAGE_SIZE as u64) as usize,
        request.huge_bytes,
    );
    // The budget's slack, but at most a quarter of the part: a part that a cap (not the
    // budget) limits can be far smaller than the slack of a large tier.
    let slack = (request.budget_bytes as f64 * crate::KEEP_SLACK) as usize / PAGE_SIZE;
    let tolerance = slack.min(pages / 4);
    PartPages {
        tier: request.tier,
        pages,
        below: tolerance,
        above: if request.capped && request.tier == 0 {
            0
        } else {
            tolerance
        },
    }
}

/// The pages of a record part, for a record starting at `start`: shortened to end on a boundary
/// of the system's transparent huge pages (`huge` bytes) where that leaves it any. A part's
/// tier gets the record's first pages ([`moves_of`]), and `move_pages` moves a huge page whole,
/// so a part that ends inside one splits it ([`huge_page_splits`]): the pages on either side
/// then stay apart, and the program's accesses to them each need a TLB entry of their own. A
/// part is shortened by less than a huge page, which its tier keeps as room.
pub fn part_on_huge_boundary(start: u64, pages: usize, huge: Option<u64>) -> usize {
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

/// Pages of the record at `start`, whose pages have `statuses`, that must move for it to be
/// in `target`, but for `part` of it in a faster tier. `current` is the tier a page's status
/// says it is in (none: not present, or the process is gone).
///
/// The part is the pages already in its tier (or faster), as many as it is planned to hold;
/// when it holds too few, the first pages of the record not in it join it. Within its
/// tolerance a part keeps what it holds.
pub fn moves_of<S: Copy>(
    start: u64,
    target: usize,
    part: Option<PartPages>,
    statuses: &[S],
    current: impl Fn(S) -> Option<usize>,
) -> RecordMoves {
    let mut moves = RecordMoves::default();
    let mut send = |page: u64, from: usize, to: usize| {
        let list = if from < to {
            &mut moves.down
        } else {
            &mut moves.up
        };
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
        return moves;
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
    moves
}

/// The built-in batch order: both move lists cut into batches of at most `batch_pages`, the
/// hottest pages first, each promotion into the fastest tier preceded by just enough demotions
/// to make its room there (`fast_room_pages`: free pages of the fastest tier beyond the fill
/// reserve, negative when it is fuller than that); the demotions that no promotion needed
/// follow. Moving every demotion before any promotion would keep the hottest pages waiting
/// behind a whole eviction.
pub fn order_batches(plan: MovePlan, mut fast_room_pages: i64, batch_pages: usize) -> Vec<Batch> {
    let plan = plan.finish();
    let split = |list: Vec<PageMoves>, demotion: bool| {
        list.into_iter()
            .flat_map(move |m| {
                m.pages
                    .chunks(batch_pages)
                    .map(|c| Batch {
                        process: m.process,
                        tier: m.tier,
                        pages: c.to_vec(),
                        demotion,
                    })
                    .collect::<Vec<_>>()
            })
            .collect::<VecDeque<_>>()
    };
    let (mut down, up) = (split(plan.demotions, true), split(plan.promotions, false));
    let mut out = Vec::with_capacity(down.len() + up.len());
    for batch in up {
        if batch.tier == 0 {
            while fast_room_pages < batch.pages.len() as i64 {
                let Some(demotion) = down.pop_front() else {
                    break;
                };
                fast_room_pages += demotion.pages.len() as i64;
                out.push(demotion);
            }
            fast_room_pages -= batch.pages.len() as i64;
        }
        out.push(batch);
    }
    out.extend(down);
    out
}

/// Pages at which to split a process's huge pages before a step's moves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugeSplits {
    pub process: usize,
    /// One page per huge page to split, ascending.
    pub pages: Vec<u64>,
}

/// Where to split huge pages before a step's moves. `move_pages(2)` moves a transparent huge
/// page whole, so moving some of its base pages and not others (two objects sharing it that
/// the plan puts in different tiers, the end of a record part) would carry the others along,
/// and the next step would move them back. For each `huge`-aligned block that the moves cover
/// only in part, or send to different tiers, one page to split it at (the daemon's page mover
/// deactivates that page): a demoted page of the block if it has one, else a page beside the
/// promoted ones, which stays behind on the slower node. Per process, in process order.
pub fn huge_page_splits(plan: &MovePlan, huge: u64) -> Vec<HugeSplits> {
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
    let lists = plan.demotions.iter().map(|m| (m, true));
    for (m, demote) in lists.chain(plan.promotions.iter().map(|m| (m, false))) {
        for &address in &m.pages {
            let block = blocks
                .entry((m.process, address / huge * huge))
                .or_insert(Block {
                    pages: 0,
                    tier: m.tier,
                    demoted: None,
                    lowest: address,
                    highest: address,
                });
            block.pages += 1;
            if block.tier != m.tier {
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
            HugeSplits { process, pages }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const BATCH_PAGES: usize = 1024;

    fn moves(process: usize, tier: usize, pages: Vec<u64>) -> PageMoves {
        PageMoves {
            process,
            tier,
            pages,
        }
    }

    fn plan(demotions: Vec<PageMoves>, promotions: Vec<PageMoves>) -> MovePlan {
        MovePlan {
            demotions,
            promotions,
            ..MovePlan::default()
        }
    }

    #[test]
    fn a_part_is_shortened_to_the_last_huge_page_boundary_inside_it() {
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

    /// Promotions wait for the demotions that make their room, and for those that bring a
    /// fuller tier back to its reserve (negative room); the rest of the demotions follow.
    #[test]
    fn batches_make_room_before_each_promotion() {
        let pages = |n: usize, from: u64| (0..n as u64).map(|i| from + i).collect::<Vec<u64>>();
        let down = vec![moves(0, 1, pages(4 * BATCH_PAGES, 0))];
        let up = vec![moves(0, 0, pages(BATCH_PAGES, 1 << 40))];
        let order = |room: i64| {
            order_batches(plan(down.clone(), up.clone()), room, BATCH_PAGES)
                .iter()
                .map(|b| if b.demotion { 'd' } else { 'p' })
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
        let demotions = vec![
            moves(0, 1, pages(0, 512)),
            moves(0, 1, pages(huge + 100 * page, 10)),
        ];
        let promotions = vec![
            moves(1, 0, pages(2 * huge + 8 * page, 4)),
            moves(1, 0, pages(3 * huge, 4)),
            moves(1, 0, pages(4 * huge, 256)),
            moves(1, 1, pages(4 * huge + huge / 2, 256)),
        ];
        let split = |process, pages| HugeSplits { process, pages };
        assert_eq!(
            huge_page_splits(&plan(demotions.clone(), promotions), huge),
            vec![
                split(0, vec![huge + 100 * page]),
                split(1, vec![2 * huge + 7 * page, 3 * huge + 4 * page, 4 * huge]),
            ]
        );
        assert!(huge_page_splits(&plan(demotions[..1].to_vec(), vec![]), huge).is_empty());
    }

    /// Records are added in rank order: promotions keep it (hottest first), demotions are
    /// reversed (coldest first), and neighbours of the same process and tier merge.
    #[test]
    fn a_plan_promotes_hottest_first_and_demotes_coldest_first() {
        let mut plan = MovePlan::default();
        let record =
            |down: Vec<(usize, Vec<u64>)>, up: Vec<(usize, Vec<u64>)>| RecordMoves { down, up };
        plan.add(0, record(vec![], vec![(0, vec![1, 2])]));
        plan.add(0, record(vec![], vec![(0, vec![3])]));
        plan.add(1, record(vec![(1, vec![10])], vec![]));
        plan.add(1, record(vec![(1, vec![20])], vec![]));
        plan.add(0, record(vec![(1, vec![30])], vec![]));
        let plan = plan.finish();
        assert_eq!(plan.promotions, vec![moves(0, 0, vec![1, 2, 3])]);
        assert_eq!(
            plan.demotions,
            vec![moves(0, 1, vec![30]), moves(1, 1, vec![20, 10])]
        );
    }

    /// Without a part a record's pages go to its target; a part keeps what it holds within its
    /// tolerance and takes the record's first pages when it holds too few.
    #[test]
    fn a_records_pages_move_to_its_target_and_its_part() {
        let page = PAGE_SIZE as u64;
        // Four pages: on tiers 1, 1, 0, absent.
        let statuses = [1, 1, 0, -2];
        let tier = |s: i32| usize::try_from(s).ok();
        let whole = moves_of(0, 0, None, &statuses, tier);
        assert_eq!(whole.up, vec![(0, vec![0, page])]);
        assert!(whole.down.is_empty());
        let part = |pages, below, above| PartPages {
            tier: 0,
            pages,
            below,
            above,
        };
        let two_fast = moves_of(0, 1, Some(part(2, 0, 0)), &statuses, tier);
        assert_eq!(
            two_fast.up,
            vec![(0, vec![0])],
            "the first page joins the part"
        );
        assert!(two_fast.down.is_empty());
        let tolerant = moves_of(0, 1, Some(part(2, 1, 1)), &statuses, tier);
        assert!(tolerant.is_empty(), "one page short, within the tolerance");
    }

    /// A part keeps what it holds within its tolerances; with none above (a process's fast-tier
    /// cap), the pages beyond its plan go down.
    #[test]
    fn a_part_beyond_a_cap_gives_back_what_it_holds_over_its_plan() {
        // 16 pages: the first 10 in tier 0, the rest in tier 1; the plan: 8 in tier 0.
        type PageStatus = i32;
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
        let RecordMoves { down, up } = moves_of(0, 1, part(4, 4), &statuses, tier_of);
        assert!(down.is_empty() && up.is_empty(), "within the tolerance");
        let RecordMoves { down, up } = moves_of(0, 1, part(4, 0), &statuses, tier_of);
        assert!(up.is_empty());
        assert_eq!(down.len(), 1);
        assert_eq!(
            (down[0].0, down[0].1.len()),
            (1, 2),
            "two pages over the plan go down"
        );
        // Fewer than planned, within what may be missing: nothing comes up.
        let few: Vec<PageStatus> = (0..16).map(|i| if i < 6 { 0 } else { 1 }).collect();
        let RecordMoves { down, up } = moves_of(0, 1, part(4, 0), &few, tier_of);
        assert!(down.is_empty() && up.is_empty());
    }
}
