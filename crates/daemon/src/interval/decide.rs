//! Stage 2 of an interval: whether to enforce a new assignment now. The daemon measures the
//! signals (allocation since the last enforcement, the fastest tier's room, LLC counters) and
//! the circumstances; the policy decides ([`objtier_policy::Policy::decide`]).

use super::{IntervalReport, SinceEnforcement};
use crate::daemon::Daemon;
use objtier_policy::{Circumstances, Signals};

impl Daemon {
    /// Asks the policy whether to enforce now; records why in `report`. When it does, the
    /// counts since the last enforcement start again.
    pub(super) fn decide(&mut self, report: &mut IntervalReport) -> bool {
        self.topology.refresh_free(&self.config.sys_root);
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
        let mut priorities: Vec<i32> = self.processes.values().map(|p| p.priority).collect();
        priorities.sort_unstable();
        priorities.dedup();
        let circumstances = Circumstances {
            source_samples: self.source.samples(),
            attributed_since_enforcement: since.attributed_weight,
            priorities,
            priorities_at_enforcement: std::mem::take(&mut since.priorities),
            migration_unfinished: self
                .last_interval
                .as_ref()
                .is_some_and(|r| r.deferred_pages + r.rate_limited_pages > 0),
        };
        let decision = self.policy.decide(&signals, &circumstances);
        let since = &mut self.since_enforcement;
        if !decision.waiting.is_empty() {
            tracing::debug!(
                reasons = ?decision.waiting,
                "a trigger fired before any access was sampled: waiting"
            );
        }
        if decision.reasons.is_empty() {
            since.priorities = circumstances.priorities_at_enforcement;
            return false;
        }
        tracing::debug!(reasons = ?decision.reasons, "enforcing");
        *since = SinceEnforcement {
            priorities: circumstances.priorities,
            ..SinceEnforcement::default()
        };
        report.enforced = true;
        // A process planned with samples of its own is no longer waiting for its first plan.
        for p in self.processes.values_mut() {
            p.planned |= p.sampled;
        }
        report.trigger_reasons = decision.reasons;
        true
    }
}
