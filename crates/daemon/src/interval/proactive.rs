//! Part of stage 4: proactive placement by allocation site (paper §3.5). The policy says where
//! each site's new objects should start ([`objtier_policy::proactive_placements`]); a wish is
//! applied once it has held ([`objtier_policy::PlacementStreaks`]); and the placements the
//! site store may remember are checked against what the plan saw of their sites' records.

use super::snapshot::Snapshot;
use crate::daemon::Daemon;
use objtier_policy::{
    accessed_by_the_program, proactive_placements, SiteRecord, SETTLED_INTERVALS,
};

impl Daemon {
    /// Updates each process's proactive site placements from this interval's plan (`assignment`:
    /// a tier per candidate of `snapshot`).
    pub(super) fn place_sites_proactively(&mut self, snapshot: &Snapshot, assignment: &[usize]) {
        let (spans, candidates) = (&snapshot.spans, &snapshot.candidates);
        let now = crate::clock::monotonic_ns();
        // A record's first interval says little: it was just initialised (written), so it looks
        // hot whatever its future. Only records at least this old keep their site fast, and only
        // when accessed in each of the last two intervals: a page just migrated can look
        // accessed for one interval (the kernel may map the new copy young).
        let settled_ns = SETTLED_INTERVALS as u64 * self.interval_length.as_nanos() as u64;
        for (pi, id) in snapshot.process_ids.iter().enumerate() {
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
            // hot object one interval in two would have it born slow. Only watched sites are
            // collected: a million records make no set.
            let placements = &self.processes[id].placements;
            let interval_ns = self.interval_length.as_nanos() as u64;
            // This interval's number; the last one moved what the daemon planned then.
            let this = self.totals.intervals;
            let busy: std::collections::HashSet<u64> = spans[mine.clone()]
                .iter()
                .zip(&candidates[mine.clone()])
                .filter(|(span, c)| {
                    placements.watched(span.site) && {
                        let moves = placements.moved_in(span.start);
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
            // policy has nothing new to say about them.
            for (site, tier) in wishes {
                let tier = tier.map(|t| t as u32);
                if !p.placements.wish_settled(site, tier) {
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
