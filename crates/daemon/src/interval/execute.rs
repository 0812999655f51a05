//! Stage 5 of an interval: the plan's moves, through the page mover.
//!
//! Before any page moves, each transparent huge page that the step moves only in part is split
//! (`move_pages` moves a huge page whole: its other base pages would come along, and go back at
//! the next step). Then the batches go in the policy's order ([`objtier_policy::Migrate::order`]).
//! A step migrates for at most `MIGRATION_INTERVALS_PER_STEP` (two) intervals and at most the rate
//! limit's bytes; what is left is planned again with fresh samples. A tier that refused a
//! promotion for lack of memory gets no more until a demotion out of it succeeds.

use super::plan::{HugePageSize, MovingRecord};
use super::snapshot::Snapshot;
use super::IntervalReport;
use crate::daemon::Daemon;
use crate::process::ResidentPages;
use objtier_policy::migration::MovePlan;
use objtier_sys::pages::{MoveError, BATCH_PAGES};
use objtier_wire::PAGE_SIZE;
use std::time::Instant;

/// How long one step may migrate, in intervals, before it plans again with fresh samples. One
/// makes re-planning frequent but pays a full page query each time; two lets a typical
/// promotion finish in one step while a long eviction still yields every few seconds.
const MIGRATION_INTERVALS_PER_STEP: u32 = 2;

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
    /// Stage 5 (see the module doc): splits the huge pages the moves cover in part, then moves
    /// the pages, and counts what happened in `report`.
    pub(super) fn execute(
        &mut self,
        moves: MovePlan,
        snapshot: &Snapshot,
        mut huge_page_size: HugePageSize,
        report: &mut IntervalReport,
    ) {
        let process_ids = &snapshot.process_ids;
        let tiers = self.topology.tiers.len();
        let target_nodes: Vec<u32> = (0..tiers).map(|t| self.target_node(t)).collect();
        let mut dead = vec![false; process_ids.len()];
        if !moves.is_empty() {
            if let Some(huge) = huge_page_size.get(self.mover.as_mut()) {
                self.split_huge_pages(process_ids, &moves, huge, report);
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
        // its room (see docs/design/migration-order.md).
        let fast_room_pages = {
            let (capacity, free) = self.topology.tier_bytes(0);
            let reserve = objtier_policy::fill_reserve(capacity, self.config.fill);
            (free as i64 - reserve as i64) / PAGE_SIZE as i64
        };
        let batches = self
            .policy
            .migrate
            .order(moves, fast_room_pages, BATCH_PAGES);
        for batch in batches {
            let (pi, tier, pages, demote) =
                (batch.process, batch.tier, batch.pages, batch.demotion);
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
    }

    /// Splits the huge pages that this step's moves cover in part (the policy's
    /// [`objtier_policy::Migrate::huge_page_splits`]). Failing to is not an error: the step goes
    /// on, and the pages of such a huge page move together, as they would without the split.
    fn split_huge_pages(
        &mut self,
        process_ids: &[u64],
        moves: &MovePlan,
        huge: u64,
        report: &mut IntervalReport,
    ) {
        for split in self.policy.migrate.huge_page_splits(moves, huge) {
            let (pi, pages) = (split.process, split.pages);
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

    /// After the moves: the records that had pages to move are located again at the next
    /// interval, and those of watched sites remember that they moved (their accesses in this
    /// interval and the next are no evidence against their site's placement).
    pub(super) fn remember_moves(&mut self, process_ids: &[u64], moving: Vec<MovingRecord>) {
        let this = self.totals.intervals;
        for p in self.processes.values_mut() {
            p.placements.forget_moves_before(this);
        }
        for MovingRecord { process, start } in moving {
            let Some(p) = self.processes.get_mut(&process_ids[process]) else {
                continue;
            };
            let Some(record) = p.records_mut().get_mut(start) else {
                continue;
            };
            record.resident = ResidentPages::UNKNOWN;
            let site = record.site;
            p.placements.moved(start, site, this);
        }
    }

    /// The enforcement's totals, its log line, and its report for `objtier status`.
    pub(super) fn end_enforcement(&mut self, mut report: IntervalReport, started: Instant) {
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
    }
}
