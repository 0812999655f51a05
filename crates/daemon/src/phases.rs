//! Per-phase guidance at run time (Effler et al. §3.2, `objtier advise --phases`): a placement
//! that groups its sites into arenas, each with a tier per phase, and the phases' access
//! vectors. After each interval's attribution the daemon tells which phase a guided process
//! is in, from the same per-site access shares the advice computed its phases from
//! (`objtier_policy::advise::phases::classify`), or from the program's own word
//! (`objtier_phase`); at a change it moves every arena whose tier changes, whole: the site
//! table sends the arena's new objects to the new tier, and its live objects' pages move there.
//!
//! A change detected from samples must hold for two intervals in a row before anything moves
//! (one interval's sampling noise would otherwise move whole arenas back and forth); a phase
//! the program announces is acted on at once. The moves are the placement's own: `--no-migrate`
//! keeps the online policy from moving pages, not the arenas the placement says move.

use crate::daemon::Daemon;
use objtier_policy::advise::phases::classify;
use objtier_wire::PAGE_SIZE;

/// Intervals in a row a phase seen in the samples must hold before the arenas move.
const PHASE_SETTLED_INTERVALS: u32 = 2;
/// Pages moved per `move_pages` call.
const BATCH_PAGES: usize = 1024;

impl Daemon {
    /// Tells each guided process's phase, and moves the arenas of a new one.
    pub(crate) fn follow_phases(&mut self) {
        let tiers = self.topology.tiers.len();
        let ids: Vec<u64> = self
            .processes
            .iter()
            .filter(|(_, p)| {
                p.guided
                    .as_ref()
                    .is_some_and(|g| g.placement.phases.is_some())
            })
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            let Some(change) = self.phase_change(id) else {
                continue;
            };
            self.enter_phase(id, change, tiers);
        }
    }

    /// The phase process `id` has entered, if it has: the program's mark, or what this
    /// interval's accesses say once they have said it long enough.
    fn phase_change(&mut self, id: u64) -> Option<usize> {
        let p = self.processes.get_mut(&id)?;
        let mark = p.phase_mark.take();
        let g = p.guided.as_ref()?;
        let plan = g.placement.phases.as_ref()?;
        let count = plan.centroids.len();
        if let Some(mark) = mark.map(|m| m as usize).filter(|&m| m < count) {
            return (Some(mark) != g.phase).then_some(mark);
        }
        let mut accesses = vec![0.0; g.placement.sites.len()];
        for (_, record) in p.records().iter() {
            if let Some(&index) = g.placed.get(&record.site) {
                accesses[index] += record.interval_accesses as f64;
            }
        }
        let seen = classify(&plan.centroids, &accesses)?;
        let g = p.guided.as_mut()?;
        if Some(seen) == g.phase {
            g.phase_streak = None;
            return None;
        }
        let streak = match g.phase_streak {
            Some((phase, n)) if phase == seen => n + 1,
            _ => 1,
        };
        g.phase_streak = Some((seen, streak));
        (streak >= PHASE_SETTLED_INTERVALS).then_some(seen)
    }

    /// Moves process `id` into `phase`: each arena whose tier changes gets its new objects, and
    /// its live objects' pages, in the new tier.
    fn enter_phase(&mut self, id: u64, phase: usize, tiers: usize) {
        let Some(p) = self.processes.get_mut(&id) else {
            return;
        };
        let Some(g) = p.guided.as_mut() else {
            return;
        };
        let Some(plan) = g.placement.phases.clone() else {
            return;
        };
        let old = g.phase.unwrap_or(plan.initial);
        g.phase = Some(phase);
        g.phase_streak = None;
        let here = |t: u32| -> u32 {
            let last = tiers.saturating_sub(1) as u32;
            if t as usize + 1 >= g.placement.computed_for.tiers.len().max(1) {
                last
            } else {
                t.min(last)
            }
        };
        // Site id → its arena's new tier, for the arenas that change.
        let moving: std::collections::HashMap<u64, u32> = g
            .placed
            .iter()
            .filter_map(|(&site, &index)| {
                let arena = g.placement.sites.get(index)?.arena?;
                let tiers = plan.arenas.get(arena)?;
                let (from, to) = (*tiers.get(old)?, *tiers.get(phase)?);
                (from != to).then(|| (site, here(to)))
            })
            .collect();
        tracing::info!(
            pid = p.pid,
            from = old,
            to = phase,
            sites = moving.len(),
            "phase change: moving the arenas whose tier changes"
        );
        for (&site, &tier) in &moving {
            // (Moving an arena's site, already in the table, always finds its entry.)
            p.placements.set_guided(p.ring.control(), site, tier, 0);
        }
        if moving.is_empty() || p.exited() {
            return;
        }
        let pid = p.pid;
        let mut by_tier: std::collections::BTreeMap<u32, Vec<u64>> = Default::default();
        for (start, record) in p.records_mut().iter_mut() {
            if let Some(&tier) = moving.get(&record.site) {
                by_tier
                    .entry(tier)
                    .or_default()
                    .extend((start..start + record.len).step_by(PAGE_SIZE));
                record.resident = crate::process::ResidentPages::UNKNOWN;
            }
        }
        for (tier, pages) in by_tier {
            let node = self.target_node(tier as usize);
            let mut status = vec![0; BATCH_PAGES];
            let mut moved = 0u64;
            for batch in pages.chunks(BATCH_PAGES) {
                let status = &mut status[..batch.len()];
                match self.mover.move_to(pid, batch, node, status) {
                    Ok(()) => moved += status.iter().filter(|&&s| s == node as i32).count() as u64,
                    Err(e) => {
                        tracing::warn!(pid, "moving an arena to tier {tier}: {e}");
                        break;
                    }
                }
            }
            if tier == 0 {
                self.totals.promoted_pages += moved;
            } else {
                self.totals.demoted_pages += moved;
            }
            tracing::info!(pid, tier, pages = moved, "arena pages moved");
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::guided::PlacementFile;
    use objtier_profile::placement::{ComputedFor, PhasePlan, PlacedSite, PlannedTier};
    use objtier_profile::{Placement, Program};
    use objtier_sys::pages::RecordingPageMover;
    use objtier_wire::{event_flags, Event, EventKind};
    use std::sync::{Arc, Mutex};

    /// Two sites, each fast in one of two phases: the samples of the second phase, two
    /// intervals in a row, move each arena to its tier there (new objects and live pages), and
    /// the program's own mark moves them back at once.
    #[test]
    fn arenas_move_whole_at_a_phase_change() {
        let sys = tempfile::tempdir().unwrap();
        let mut config = crate::config::DaemonConfig::new(sys.path().join("sock"));
        config.sys_root = sys.path().to_owned();
        let policy = crate::config::builtin_policy(&config);
        let fake = Arc::new(Mutex::new(RecordingPageMover::default()));
        let topology = objtier_sys::topology::Topology::two_tiers(64 << 20, 64 << 20, 1 << 30);
        let mut d = crate::daemon::Daemon::new(
            config,
            topology,
            crate::source::AccessSource::none("test"),
            Box::new(fake.clone()),
            policy,
        );
        let (p, _peer) = crate::process::tests::process();
        let pid = p.pid;
        d.processes.insert(p.id, p);
        let tier = |capacity| PlannedTier {
            capacity_bytes: capacity,
            load_cost: 1.0,
            store_cost: 1.0,
            nodes: vec![],
        };
        let mut placement = Placement::new(
            Program::default(),
            "hotset",
            ComputedFor {
                tiers: vec![tier(Some(1 << 20)), tier(None)],
                ..ComputedFor::default()
            },
        );
        for (offset, arena, tier) in [(0x10, 0, 0), (0x20, 1, 1)] {
            placement.sites.push(PlacedSite {
                frames: vec![format!("/usr/bin/app+{offset:#x}")],
                tier,
                arena: Some(arena),
                ..PlacedSite::default()
            });
        }
        placement.phases = Some(PhasePlan {
            arenas: vec![vec![0, 1], vec![1, 0]],
            centroids: vec![vec![1.0, 0.0], vec![0.0, 1.0]],
            initial: 0,
        });
        let maps = objtier_sys::maps::Maps::parse(
            "555500000000-555500010000 r-xp 00000000 fe:00 7 /usr/bin/app\n",
        );
        let file = PlacementFile {
            path: "p.json".into(),
            placement: Arc::new(placement),
        };
        d.place_by(1, file, "/usr/bin/app", Some(maps), |_| None);
        let (a, b) = (
            objtier_wire::site_id::of(&[0x5555_0000_0010]),
            objtier_wire::site_id::of(&[0x5555_0000_0020]),
        );
        let p = d.processes.get_mut(&1).unwrap();
        assert_eq!(
            (p.ring.control().site_tier(a), p.ring.control().site_tier(b)),
            (Some(0), Some(1))
        );
        for (start, site, node) in [(0x10_0000u64, a, 0), (0x20_0000, b, 1)] {
            assert!(p.ring.header().push(&Event {
                kind: EventKind::Alloc as u32,
                flags: event_flags::SNAPSHOT,
                addr: start,
                len: 0x4000,
                time_ns: 1,
                site,
            }));
            fake.lock().unwrap().place(pid, start, 0x4000, node);
        }
        p.drain();
        let hot_b = |d: &mut crate::daemon::Daemon| {
            let p = d.processes.get_mut(&1).unwrap();
            for (_, r) in p.records_mut().iter_mut() {
                r.interval_accesses = if r.site == b { 10.0 } else { 0.0 };
            }
        };
        hot_b(&mut d);
        d.follow_phases();
        assert!(
            fake.lock().unwrap().moves().is_empty(),
            "one interval is not enough"
        );
        hot_b(&mut d);
        d.follow_phases();
        let moves = fake.lock().unwrap().moves();
        assert_eq!(moves.len(), 2, "{moves:?}");
        assert!(moves.contains(&(1, (0x10_0000..0x10_4000).step_by(4096).collect())));
        assert!(moves.contains(&(0, (0x20_0000..0x20_4000).step_by(4096).collect())));
        let p = d.processes.get_mut(&1).unwrap();
        assert_eq!(
            (p.ring.control().site_tier(a), p.ring.control().site_tier(b)),
            (Some(1), Some(0))
        );
        assert_eq!(p.guided.as_ref().unwrap().phase, Some(1));
        // The program says it is back in phase 0: at once, whatever the samples say.
        p.phase_mark = Some(0);
        d.follow_phases();
        let p = &d.processes[&1];
        assert_eq!(
            (p.ring.control().site_tier(a), p.ring.control().site_tier(b)),
            (Some(0), Some(1))
        );
        assert_eq!(fake.lock().unwrap().moves().len(), 4);
    }
}
