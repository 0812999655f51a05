//! A placement file at work: applied to a process at attach ([`crate::daemon::Daemon`]), and its
//! sites placed as the process's modules are mapped and named ([`crate::process::Process`]).

use super::{read_placement, Guided, PlacedResident, PlacementFile, SitePlan};
use objtier_profile::file_name;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::Path;

impl crate::daemon::Daemon {
    /// Process `id` brought a placement file (`fd`): read it, and place every site it lists
    /// whose modules are mapped, before the tiers are published. A file that cannot be used is
    /// said in the log, and the process runs on without it.
    pub(crate) fn apply_placement(&mut self, id: u64, fd: OwnedFd) {
        let file = match read_placement(fd, &mut self.placement_cache) {
            Ok(file) => file,
            Err(e) => {
                let pid = self.processes.get(&id).map_or(0, |p| p.pid);
                tracing::warn!(pid, "placement not applied: {e}");
                return;
            }
        };
        let Some(pid) = self.processes.get(&id).map(|p| p.pid) else {
            return;
        };
        let proc_root = self.config.proc_root.clone();
        let exe = std::fs::read_link(proc_root.join(pid.to_string()).join("exe"))
            .map(|e| e.display().to_string())
            .unwrap_or_default();
        let maps = objtier_sys::maps::Maps::read(&proc_root, pid)
            .map_err(|e| tracing::warn!(pid, "cannot read its memory map: {e}"))
            .ok();
        let paths = maps.clone();
        self.place_by(id, file, &exe, maps, |name| {
            let path = paths.as_ref()?.path_named(name)?;
            let through_root = format!("{}/{pid}/root{path}", proc_root.display());
            objtier_sys::elf::build_id(Path::new(&through_root))
                .or_else(|_| objtier_sys::elf::build_id(Path::new(path)))
                .ok()
                .flatten()
        });
    }

    /// Applies placement `file` to process `id`, which runs `exe` with memory map `maps`
    /// (`build_id_of` gives the build-id of a module it maps, by file name): what
    /// `Daemon::apply_placement` does once it has read them, and what tests call with their
    /// own.
    pub fn place_by(
        &mut self,
        id: u64,
        file: PlacementFile,
        exe: &str,
        maps: Option<objtier_sys::maps::Maps>,
        build_id_of: impl Fn(&str) -> Option<String>,
    ) {
        let tiers = self.topology.tiers.len();
        let Some(p) = self.processes.get_mut(&id) else {
            return;
        };
        let pid = p.pid;
        let program = &file.placement.program;
        if !program.name.is_empty() && file_name(exe) != program.name {
            // A wrapper that kept the environment (a shell, mpirun, env) is not the program.
            tracing::debug!(
                pid,
                exe,
                "placement {} is for {}: not applied to this process",
                file.path,
                program.name
            );
            return;
        }
        let mut guided = Guided::new(
            file.path.clone(),
            file.placement.clone(),
            tiers,
            build_id_of,
        );
        for module in &guided.skipped_modules {
            tracing::warn!(
                pid,
                module,
                "placement {}: {module} is another build than the one profiled (its build-id \
                 differs): its sites are not placed; profile this build again",
                file.path
            );
        }
        let control = p.ring.control();
        if let Some(tier) = guided.fallback_tier {
            control
                .default_tier
                .store(tier + 1, std::sync::atomic::Ordering::Release);
        }
        if let Some(tier) = guided.small_objects_tier {
            control
                .small_objects_tier
                .store(tier + 1, std::sync::atomic::Ordering::Release);
        }
        let predicted = maps
            .as_ref()
            .map(|m| guided.predict_in_order(m))
            .unwrap_or_default();
        p.guided = Some(guided);
        let mut placed = 0;
        for (site, plan) in predicted {
            placed += usize::from(p.place_guided(site, plan));
        }
        let g = p.guided.as_ref().expect("set above");
        tracing::info!(
            pid,
            file = g.file,
            algorithm = g.placement.algorithm,
            sites = g.placement.sites.len(),
            placed,
            table_full = g.table_full,
            skipped_modules = g.skipped_modules.len(),
            fallback_tier = ?g.fallback_tier,
            "placement applied (sites in modules not mapped yet are placed when first seen)"
        );
        p.last_maps = maps;
    }
}

impl crate::process::Process {
    /// Places `site` as its placement `plan` says: its tier and budget in the site table. False
    /// when the table has no room (counted, for status).
    pub fn place_guided(&mut self, site: u64, plan: SitePlan) -> bool {
        let Some(guided) = self.guided.as_mut() else {
            return false;
        };
        if !self
            .placements
            .set_guided(self.ring.control(), site, plan.tier, plan.budget_pages)
        {
            guided.table_full += 1;
            return false;
        }
        guided.placed.insert(site, plan.index);
        true
    }

    /// The placed call paths of modules mapped since the last prediction (a library loaded
    /// later, as Python imports an extension) are predicted with `maps`: their sites are placed
    /// before their first objects are born, not after (igraph's vectors, allocated once each,
    /// were born in the fallback tier).
    pub fn predict_new_modules(&mut self, maps: &objtier_sys::maps::Maps) {
        let Some(guided) = self.guided.as_mut() else {
            return;
        };
        if maps.modules().len() == guided.predicted_modules {
            return;
        }
        let predicted = guided.predict_in_order(maps);
        let placed = predicted
            .into_iter()
            .filter(|&(site, plan)| self.place_guided(site, plan))
            .count();
        if placed > 0 {
            tracing::debug!(
                pid = self.pid,
                placed,
                "placed the sites of modules mapped since"
            );
        }
    }

    /// What the placed sites' objects hold in each tier (as last located), the bytes of those
    /// not located yet, and per placed site its live bytes and those in its tier or a faster
    /// one.
    pub fn placed_resident_bytes(&self, tiers: usize) -> PlacedResident {
        let mut held = vec![0u64; tiers.max(1)];
        let mut unlocated = 0u64;
        let mut by_site: HashMap<u64, (u64, u64)> = HashMap::new();
        let Some(g) = self.guided.as_ref() else {
            return (held, unlocated, by_site);
        };
        for (_, record) in self.records().iter() {
            let Some(&(tier, _)) = self
                .placements
                .get(&record.site)
                .filter(|_| g.placed.contains_key(&record.site))
            else {
                continue;
            };
            if !record.resident.known() {
                unlocated += record.len;
                continue;
            }
            let bytes = record.resident.bytes(tiers);
            let entry = by_site.entry(record.site).or_default();
            for (t, (sum, b)) in held.iter_mut().zip(&bytes).enumerate() {
                *sum += b;
                entry.0 += b;
                if t <= tier as usize {
                    entry.1 += b;
                }
            }
        }
        (held, unlocated, by_site)
    }

    /// Sites just named (`names`) that the placement lists, and not placed yet: placed now.
    pub fn place_named_guided(&mut self, named: &[u64]) {
        let Some(guided) = &self.guided else {
            return;
        };
        let wanted: Vec<(u64, SitePlan)> = named
            .iter()
            .filter(|site| !guided.placed.contains_key(site))
            .filter_map(|&site| {
                let names = self.sites.get(&site)?.names.as_ref()?;
                Some((site, guided.plan_for(names)?))
            })
            .collect();
        for (site, plan) in wanted {
            if self.place_guided(site, plan) {
                tracing::debug!(
                    pid = self.pid,
                    site = format_args!("{site:#x}"),
                    tier = plan.tier,
                    "placement: site placed when first seen"
                );
            }
        }
    }
}
