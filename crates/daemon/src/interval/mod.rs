//! One profiling interval, as a pipeline of stages with plain data between them.
//!
//! 1. **Observe** ([`observe`]): allocations that survived become records, the access source's
//!    observations are attributed to the records they overlap, new sites are named, and the
//!    source follows the records as they are now.
//! 2. **Decide** ([`decide`]): the policy's triggers, and the rules every policy keeps
//!    ([`objtier_policy::Policy::decide`]), say whether to enforce now. If not, each record's
//!    access estimate moves on by one interval and the interval ends.
//! 3. **Snapshot** ([`snapshot`]): where the records' pages are (`move_pages` with no target;
//!    with many records a rotating share of them), each record aged and made a
//!    [`objtier_policy::Candidate`]: everything the plan needs, as plain data.
//! 4. **Plan** ([`plan`]): the policy's budgets, order and assignment; proactive placement by
//!    site ([`proactive`]); the records' pages that must move, as a
//!    [`objtier_policy::migration::MovePlan`] (pure: [`plan::plan_moves`]).
//! 5. **Execute** ([`execute`]): huge pages moved in part are split, then the moves go through
//!    the [`objtier_sys::pages::PageMover`] in the policy's order, within the step's deadline
//!    and the rate limit; what is left is planned again.
//!
//! The kernel is asked only in stages 1, 3 and 5; stages 2 and 4 are the policy's, on data.

pub(crate) mod buffers;
pub mod decide;
pub mod execute;
pub mod observe;
pub mod plan;
pub mod proactive;
pub(crate) mod report;
pub mod snapshot;
#[cfg(test)]
mod tests;

pub use report::{IntervalReport, SinceEnforcement, Totals};
pub use snapshot::locate_in_turn;

use crate::daemon::Daemon;
use std::time::Instant;

impl Daemon {
    /// Runs one interval (see the module doc).
    pub fn interval(&mut self) {
        let started = Instant::now();
        let mut report = IntervalReport {
            seconds_since_start: self.started.elapsed().as_secs_f64(),
            interval_ms: self.interval_length.as_millis() as u64,
            ..IntervalReport::default()
        };
        self.observe(&mut report);
        if !self.decide(&mut report) {
            self.age_records();
            self.log_hottest();
            self.totals.intervals += 1;
            report.duration_ms = started.elapsed().as_millis() as u64;
            tracing::debug!(?report, "interval (no trigger fired)");
            self.last_interval = Some(report);
            return;
        }
        self.totals.enforcements += 1;
        let mut snapshot = self.snapshot();
        self.log_hottest();
        let plan = self.plan(&mut snapshot, &mut report);
        self.execute(plan.moves, &snapshot, plan.huge_page_size, &mut report);
        self.remember_moves(&snapshot.process_ids, plan.moving);
        let process_ids = std::mem::take(&mut snapshot.process_ids);
        self.buffers = snapshot.into_buffers();
        self.end_enforcement(report, started);
        // Placements learnt this interval are saved now, so a killed daemon loses little.
        for id in process_ids {
            self.save_sites(id, false);
        }
    }

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
