//! Stage 1 of an interval: what the processes and the access source said since the last one.
//!
//! Objects allocated since the last commit and still live become records first, so that the
//! interval's samples in their ranges count for them (a source may well have seen them: DAMON
//! keeps following a freed object's range until the next commit, and the allocator hands the
//! range to the next object of its size). Objects already freed are gone, and their samples
//! with them. Then the samples are attributed, new sites named (warm start places the
//! remembered ones), and the access source follows the records as they are now.

use super::IntervalReport;
use crate::daemon::Daemon;
use crate::source::Target;
use objtier_sys::damon::coalesce_ranges;
use std::collections::HashMap;

/// Most ranges handed to DAMON per process; beyond, the closest records share a region.
const MAX_RANGES_PER_PROCESS: usize = 2000;

impl Daemon {
    /// Stage 1 (see the module doc); what went wrong with the source goes into `report`.
    pub(super) fn observe(&mut self, report: &mut IntervalReport) {
        self.commit_new_objects();
        self.judge_sites();
        self.attribute_observations(report);
        // Profiled processes close this interval's row of their recording; processes with
        // per-phase guidance move the arenas of a phase they entered.
        self.profile_interval_ended();
        self.follow_phases();
        self.topology.refresh_free(&self.config.sys_root);
        self.keep_room_for_placements();
        self.name_new_sites();
        // The access source follows the records as they are now (those committed above among
        // them) right away, so the next snapshot already covers them.
        if let Err(e) = self.follow_records() {
            report.source_error = Some(e);
        }
    }

    /// The access source's observations, each added to the records it overlaps (of the newest
    /// connection of its pid).
    fn attribute_observations(&mut self, report: &mut IntervalReport) {
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
                        let mine = p.attribute_observed(&o);
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
    }

    /// Sites described since the last interval get their module+offset names, while the
    /// modules they point into are surely still mapped; those remembered from an earlier run
    /// of the program are placed as they were then (warm start).
    fn name_new_sites(&mut self) {
        let proc_root = self.config.proc_root.as_path();
        for p in self.processes.values_mut() {
            if p.has_unnamed_sites() {
                match objtier_sys::maps::Maps::read(proc_root, p.pid) {
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
    }

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
        let now = crate::clock::monotonic_ns();
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
        let now = crate::clock::monotonic_ns();
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
                if p.source_ranges.0 != p.objects.generation() {
                    let ranges: Vec<(u64, u64)> = p
                        .records()
                        .iter()
                        .map(|(start, r)| (start, start + r.len))
                        .collect();
                    p.source_ranges = (
                        p.objects.generation(),
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
}
