//! Guided placement: a placement file (`objtier run --placement`, advised from a profile)
//! applied to a process, so that its objects are born in their tier.
//!
//! The library opens the file with the program's own rights and passes it with its hello
//! (`hello_flags::PLACEMENT`); the daemon reads it from that descriptor ([`read_placement`]:
//! a regular file of bounded size, parsed once per file version and shared by every process that
//! brings it) and turns its call paths into this run's site ids, as warm start does: frames are
//! `module+0xoffset`, the module matched by path or, where the path is not mapped (another
//! install prefix, another node), by file name, and the site id is the hash the library computes
//! of this run's return addresses. A module whose build-id differs from the one the profile saw
//! is another build: its call paths would name other code, so every site through it is skipped,
//! with one warning naming the module. Sites whose modules are mapped at attach are placed
//! before the daemon publishes the tiers (which the library waits for), the others when the
//! library describes them. The fallback tier and the small-object tier go into the control
//! area beside the site table.

mod apply;

use objtier_profile::{file_name, parse_frame, Placement, SiteKind};
use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

/// Largest placement file the daemon reads from a process (a bound on what a process can make
/// it parse).
pub const MAX_PLACEMENT_BYTES: u64 = 64 << 20;

/// A placement file as read: its name (what `/proc/self/fd` says the descriptor is) and content.
#[derive(Debug)]
pub struct PlacementFile {
    pub path: String,
    pub placement: Arc<Placement>,
}

/// Parsed placements by file identity (device, inode, size, modification time), so that the
/// ranks of an MPI job, each bringing the same file, cost one parse.
#[derive(Debug, Default)]
pub struct PlacementCache {
    files: HashMap<(u64, u64, u64, i64), Arc<Placement>>,
}

/// Most files the cache keeps (a bound on what processes can make it hold).
const CACHE_FILES: usize = 16;

/// Reads the placement a process passed as `fd`: a regular file of at most
/// [`MAX_PLACEMENT_BYTES`], parsed and checked. The error says which file and what is wrong.
pub fn read_placement(fd: OwnedFd, cache: &mut PlacementCache) -> Result<PlacementFile, String> {
    // The daemon's own descriptor: the real procfs, whatever root the processes are read under.
    let path = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "the placement file".into());
    let mut file = std::fs::File::from(fd);
    let meta = file
        .metadata()
        .map_err(|e| format!("{path}: cannot stat it: {e}"))?;
    if !meta.file_type().is_file() {
        return Err(format!("{path} is not a regular file"));
    }
    if meta.len() > MAX_PLACEMENT_BYTES {
        return Err(format!(
            "{path} is {} MiB, more than the {} MiB a placement may be",
            meta.len() >> 20,
            MAX_PLACEMENT_BYTES >> 20
        ));
    }
    use std::os::unix::fs::MetadataExt;
    let key = (
        meta.dev(),
        meta.ino(),
        meta.len(),
        meta.mtime_nsec() + meta.mtime() * 1_000_000_000,
    );
    if let Some(placement) = cache.files.get(&key) {
        return Ok(PlacementFile {
            path,
            placement: placement.clone(),
        });
    }
    let mut text = String::new();
    file.by_ref()
        .take(MAX_PLACEMENT_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| format!("{path}: cannot read it: {e}"))?;
    let placement =
        Arc::new(Placement::from_json(Path::new(&path), &text).map_err(|e| e.to_string())?);
    if cache.files.len() >= CACHE_FILES {
        cache.files.clear();
    }
    cache.files.insert(key, placement.clone());
    Ok(PlacementFile { path, placement })
}

/// A call path with each frame's module reduced to its file name: how placed frames and this
/// run's frames are matched (a module at another path is the same module; its build-id says
/// whether it is the same build).
fn by_file_name(frames: &[String]) -> Option<Vec<(String, u64)>> {
    frames
        .iter()
        .map(|f| parse_frame(f).map(|(module, offset)| (file_name(module).to_string(), offset)))
        .collect()
}

/// What a placement asks of one site, in this machine's tiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SitePlan {
    pub tier: u32,
    /// Its budget in `tier`, in pages; 0: none.
    pub budget_pages: u64,
    /// Its index in the placement's sites.
    pub index: usize,
}

/// A placement applied to one process.
#[derive(Debug)]
pub struct Guided {
    pub file: String,
    pub placement: Arc<Placement>,
    /// Placed call paths (modules by file name) → what to do.
    plans: HashMap<Vec<(String, u64)>, SitePlan>,
    /// Modules (by file name) whose build-id differs from the placement's: skipped.
    pub skipped_modules: BTreeSet<String>,
    /// Sites placed, by site id → index in the placement.
    pub placed: HashMap<u64, usize>,
    /// Sites the site table had no room for.
    pub table_full: usize,
    pub fallback_tier: Option<u32>,
    pub small_objects_tier: Option<u32>,
    /// The phase the daemon believes the process is in (per-phase guidance), and a new one
    /// the samples have shown for this many intervals in a row.
    pub phase: Option<usize>,
    pub phase_streak: Option<(usize, u32)>,
    /// How many modules the memory map had when the placed call paths were last predicted.
    predicted_modules: usize,
    /// Room made in the fastest tier for the placement (`crate::room`), and what its placed
    /// objects held there when it was last made.
    pub room_made_bytes: u64,
    pub room_held_bytes: Option<u64>,
}

impl Guided {
    /// `placement` for a process on a machine of `tiers` tiers. `build_id_of` gives the
    /// build-id of a module the process maps (by file name), where it can be read.
    pub fn new(
        file: String,
        placement: Arc<Placement>,
        tiers: usize,
        build_id_of: impl Fn(&str) -> Option<String>,
    ) -> Guided {
        let placement_tiers = placement.computed_for.tiers.len().max(1);
        // The placement's slowest tier is this machine's slowest; the others keep their
        // numbers where this machine has them.
        let tier_here = |t: u32| -> u32 {
            let last = tiers.saturating_sub(1) as u32;
            if t as usize + 1 >= placement_tiers {
                last
            } else {
                t.min(last)
            }
        };
        let mut skipped_modules = BTreeSet::new();
        for module in &placement.modules {
            let (Some(expected), Some(found)) =
                (&module.build_id, build_id_of(file_name(&module.path)))
            else {
                continue;
            };
            if *expected != found {
                skipped_modules.insert(file_name(&module.path).to_string());
            }
        }
        let mut plans = HashMap::new();
        for (index, site) in placement.sites.iter().enumerate() {
            if site.kind != SiteKind::Site {
                continue;
            }
            let Some(key) = by_file_name(&site.frames) else {
                continue;
            };
            if key.iter().any(|(m, _)| skipped_modules.contains(m)) {
                continue;
            }
            let mut tier = tier_here(site.tier);
            let mut budget_pages = 0;
            match site.budget_bytes {
                // Nothing of it in its tier: the next one down, whole.
                Some(0) => tier = (tier + 1).min(tiers.saturating_sub(1) as u32),
                Some(bytes) if (tier as usize) + 1 < tiers => {
                    budget_pages = bytes
                        .div_ceil(objtier_wire::PAGE_SIZE as u64)
                        .min(objtier_wire::MAX_BUDGET_PAGES)
                }
                _ => {}
            }
            plans.insert(
                key,
                SitePlan {
                    tier,
                    budget_pages,
                    index,
                },
            );
        }
        let pseudo_tier = |kind| {
            placement
                .sites
                .iter()
                .find(|s| s.kind == kind)
                .map(|s| tier_here(s.tier))
        };
        Guided {
            file,
            small_objects_tier: pseudo_tier(SiteKind::SmallObjects),
            fallback_tier: placement.fallback_tier.map(tier_here),
            phase: placement.phases.as_ref().map(|p| p.initial),
            phase_streak: None,
            placement,
            plans,
            skipped_modules,
            placed: HashMap::new(),
            table_full: 0,
            predicted_modules: 0,
            room_made_bytes: 0,
            room_held_bytes: None,
        }
    }

    /// What the placement asks of the call path `frames` (this run's `module+0xoffset`).
    pub fn plan_for(&self, frames: &[String]) -> Option<SitePlan> {
        self.plans.get(&by_file_name(frames)?).copied()
    }

    /// The placed call paths whose modules `maps` shows, with this run's site id of each: the
    /// hash of the return addresses the library will unwind. A module is looked up by the
    /// placement's path, else by its file name among the mapped modules.
    pub fn predict(&self, maps: &objtier_sys::maps::Maps) -> Vec<(u64, SitePlan)> {
        let mut out = Vec::new();
        for (key, plan) in &self.plans {
            let site = &self.placement.sites[plan.index];
            let ips: Option<Vec<u64>> = site
                .frames
                .iter()
                .zip(key)
                .map(|(frame, (name, offset))| {
                    maps.address_of(frame).or_else(|| {
                        let path = maps.path_named(name)?;
                        maps.address_of(&format!("{path}+{offset:#x}"))
                    })
                })
                .collect();
            if let Some(ips) = ips {
                out.push((objtier_wire::site_id::of(&ips), *plan));
            }
        }
        out
    }

    /// [`Guided::predict`], fastest tiers and then the most accessed first (if the site table
    /// fills, what is left out is what matters least), leaving out the sites placed already.
    fn predict_in_order(&mut self, maps: &objtier_sys::maps::Maps) -> Vec<(u64, SitePlan)> {
        self.predicted_modules = maps.modules().len();
        let mut predicted: Vec<(u64, SitePlan)> = self
            .predict(maps)
            .into_iter()
            .filter(|(site, _)| !self.placed.contains_key(site))
            .collect();
        predicted.sort_by(|a, b| {
            let accesses = |plan: &SitePlan| self.placement.sites[plan.index].accesses;
            a.1.tier
                .cmp(&b.1.tier)
                .then(accesses(&b.1).total_cmp(&accesses(&a.1)))
                .then(a.1.index.cmp(&b.1.index))
        });
        predicted
    }

    /// Bytes the placement plans in each of this machine's tiers, and (given each placed site's
    /// resident bytes by tier) what they hold there now; for status.
    pub fn planned_bytes(&self, tiers: usize) -> Vec<u64> {
        let mut out = vec![0; tiers.max(1)];
        for plan in self.plans.values() {
            let site = &self.placement.sites[plan.index];
            let planned = match plan.budget_pages {
                0 => site.bytes,
                pages => site.bytes.min(pages * objtier_wire::PAGE_SIZE as u64),
            };
            if let Some(slot) = out.get_mut(plan.tier as usize) {
                *slot += planned;
            }
        }
        out
    }
}

/// See [`crate::process::Process::placed_resident_bytes`].
pub type PlacedResident = (Vec<u64>, u64, HashMap<u64, (u64, u64)>);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use objtier_profile::placement::{ComputedFor, PlacedSite, PlannedTier};
    use objtier_profile::{Module, Program};

    pub(crate) fn placement() -> Arc<Placement> {
        let tier = |capacity| PlannedTier {
            capacity_bytes: capacity,
            load_cost: 1.0,
            store_cost: 1.0,
            nodes: vec![],
        };
        let mut p = Placement::new(
            Program::of_exe("/opt/app/bin/app", None),
            "hotset",
            ComputedFor {
                tiers: vec![tier(Some(1 << 20)), tier(None)],
                ..ComputedFor::default()
            },
        );
        p.modules = vec![
            Module {
                path: "/opt/app/bin/app".into(),
                build_id: Some("aa".into()),
            },
            Module {
                path: "/usr/lib/libc.so.6".into(),
                build_id: None,
            },
            Module {
                path: "/opt/app/lib/libold.so".into(),
                build_id: Some("01".into()),
            },
        ];
        let site = |frames: &[&str], tier, budget| PlacedSite {
            frames: frames.iter().map(|f| f.to_string()).collect(),
            tier,
            budget_bytes: budget,
            bytes: 3 << 20,
            ..PlacedSite::default()
        };
        p.sites = vec![
            site(
                &["/opt/app/bin/app+0x1010", "/usr/lib/libc.so.6+0x2000"],
                0,
                Some(1 << 20),
            ),
            site(&["/opt/app/bin/app+0x2020"], 1, None),
            site(&["/opt/app/lib/libold.so+0x10"], 0, None),
            site(&["/opt/app/bin/app+0x3030"], 0, Some(0)),
            PlacedSite {
                kind: SiteKind::SmallObjects,
                tier: 1,
                ..PlacedSite::default()
            },
        ];
        p.fallback_tier = Some(1);
        Arc::new(p)
    }

    #[test]
    fn sites_are_found_by_module_file_name_and_other_builds_are_skipped() {
        let g = Guided::new("p.json".into(), placement(), 2, |name| match name {
            "app" => Some("aa".into()),
            "libold.so" => Some("02".into()),
            _ => None,
        });
        assert_eq!(
            g.skipped_modules.iter().collect::<Vec<_>>(),
            vec!["libold.so"]
        );
        assert_eq!((g.fallback_tier, g.small_objects_tier), (Some(1), Some(1)));
        // The same binary installed elsewhere, libc at its usual place.
        let maps = objtier_sys::maps::Maps::parse(
            "555500000000-555500010000 r-xp 00000000 fe:00 7 /home/u/app/bin/app\n\
             7f0000000000-7f0000100000 r-xp 00000000 fe:00 9 /usr/lib/libc.so.6\n\
             7f1000000000-7f1000001000 r-xp 00000000 fe:00 9 /opt/app/lib/libold.so\n",
        );
        let mut predicted = g.predict(&maps);
        predicted.sort_by_key(|(_, plan)| plan.index);
        assert_eq!(predicted.len(), 3, "the other build's site is skipped");
        assert_eq!(
            predicted[0].0,
            objtier_wire::site_id::of(&[0x5555_0000_1010, 0x7f00_0000_2000])
        );
        assert_eq!((predicted[0].1.tier, predicted[0].1.budget_pages), (0, 256));
        assert_eq!((predicted[1].1.tier, predicted[1].1.budget_pages), (1, 0));
        // A budget of nothing in tier 0 is tier 1, whole.
        assert_eq!((predicted[2].1.tier, predicted[2].1.budget_pages), (1, 0));
        // This run's names of the same frames find the plan too.
        let names = vec!["/home/u/app/bin/app+0x2020".to_string()];
        assert_eq!(g.plan_for(&names).map(|p| p.tier), Some(1));
        assert_eq!(g.planned_bytes(2), vec![1 << 20, 6 << 20]);
    }

    #[test]
    fn the_slowest_tier_of_the_placement_is_the_slowest_here() {
        let g = Guided::new("p.json".into(), placement(), 3, |_| None);
        let maps = objtier_sys::maps::Maps::parse(
            "555500000000-555500010000 r-xp 00000000 fe:00 7 /opt/app/bin/app\n",
        );
        let predicted = g.predict(&maps);
        let slow = predicted.iter().find(|(_, p)| p.index == 1).unwrap();
        assert_eq!(slow.1.tier, 2);
        assert_eq!(g.fallback_tier, Some(2));
    }

    /// A daemon with one synthetic process, two tiers and a recording page mover.
    pub(crate) fn daemon() -> (
        crate::daemon::Daemon,
        std::os::unix::net::UnixStream,
        tempfile::TempDir,
    ) {
        let sys = tempfile::tempdir().unwrap();
        let mut config = crate::config::DaemonConfig::new(sys.path().join("sock"));
        config.sys_root = sys.path().to_owned();
        let mut d = crate::daemon::Daemon::on_fake_kernel(
            config,
            objtier_sys::topology::Topology::two_tiers(64 << 20, 64 << 20, 1 << 30),
        );
        let (p, peer) = crate::process::tests::process();
        d.processes.insert(p.id, p);
        (d, peer, sys)
    }

    /// Two runs of the program, its code loaded at other addresses each time (ASLR): the same
    /// placement places the same call paths, under each run's own site ids (the hash of its
    /// return addresses, as the library computes them), in the control area before the tiers are
    /// published, with the budget, the fallback tier and the small-object tier.
    #[test]
    fn a_placement_places_the_same_sites_whatever_the_load_addresses() {
        for (app, libc) in [
            (0x5555_0000_0000u64, 0x7f00_0000_0000u64),
            (0x5612_3400_0000, 0x7fa9_0000_0000),
        ] {
            let (mut d, _peer, _sys) = daemon();
            let maps = objtier_sys::maps::Maps::parse(&format!(
                "{app:x}-{:x} r-xp 00000000 fe:00 7 /opt/app/bin/app\n\
                 {libc:x}-{:x} r-xp 00000000 fe:00 9 /usr/lib/libc.so.6\n",
                app + 0x10000,
                libc + 0x100000
            ));
            let file = PlacementFile {
                path: "app.placement.json".into(),
                placement: placement(),
            };
            d.place_by(1, file, "/opt/app/bin/app", Some(maps), |name| match name {
                "app" => Some("aa".to_string()),
                "libold.so" => Some("02".to_string()),
                _ => None,
            });
            let p = &d.processes[&1];
            let c = p.ring.control();
            let cold = objtier_wire::site_id::of(&[app + 0x1010, libc + 0x2000]);
            assert_eq!(c.site_advice(cold).tier, Some(0));
            assert_eq!(c.site_advice(cold).budget_pages, 256);
            assert_eq!(
                c.site_tier(objtier_wire::site_id::of(&[app + 0x2020])),
                Some(1)
            );
            assert_eq!(
                (c.default_tier(), c.small_objects_tier()),
                (Some(1), Some(1))
            );
            assert_eq!(
                p.placements.get(&cold),
                Some(&(0, crate::process::PlacedBy::Guided))
            );
            let status = crate::status::status_json(&d, None);
            let placement = &status["processes"][0]["placement"];
            assert_eq!(placement["sites_placed"], 3);
            assert_eq!(placement["skipped_modules"][0], "libold.so");
        }
    }

    /// A site in a module the process maps only later (dlopen) is placed once the library
    /// describes it and its frames are named.
    #[test]
    fn a_site_of_a_module_loaded_later_is_placed_when_named() {
        let (mut d, _peer, _sys) = daemon();
        let file = PlacementFile {
            path: "p.json".into(),
            placement: placement(),
        };
        d.place_by(
            1,
            file,
            "/opt/app/bin/app",
            Some(objtier_sys::maps::Maps::parse("")),
            |_| None,
        );
        let p = d.processes.get_mut(&1).unwrap();
        assert!(p.placements.is_empty(), "nothing is mapped yet");
        let site = 0xabcdu64;
        crate::process::tests::push_site(p, site, &[0x70_0000_2020]);
        p.drain();
        let later = objtier_sys::maps::Maps::parse(
            "7000000000-7000010000 r-xp 00000000 fe:00 7 /elsewhere/app\n",
        );
        p.name_sites(&later);
        assert_eq!(p.ring.control().site_tier(site), Some(1));
        assert_eq!(p.guided.as_ref().unwrap().placed.get(&site), Some(&1));
    }

    /// A module mapped later (dlopen) has its listed sites placed as soon as the daemon names
    /// any site with a map that shows it: before their own first objects are described.
    #[test]
    fn the_sites_of_a_module_loaded_later_are_placed_before_their_first_objects() {
        let (mut d, _peer, _sys) = daemon();
        let file = PlacementFile {
            path: "p.json".into(),
            placement: placement(),
        };
        d.place_by(
            1,
            file,
            "/opt/app/bin/app",
            Some(objtier_sys::maps::Maps::parse("")),
            |_| None,
        );
        let p = d.processes.get_mut(&1).unwrap();
        // Another site of the program, which the placement does not list, is described.
        crate::process::tests::push_site(p, 0x1234, &[0x70_0000_5050]);
        p.drain();
        let later = objtier_sys::maps::Maps::parse(
            "7000000000-7000010000 r-xp 00000000 fe:00 7 /elsewhere/app\n",
        );
        p.name_sites(&later);
        // app+0x2020 (tier 1) and app+0x3030 (tier 0) are placed, by their predicted ids.
        let predicted = objtier_wire::site_id::of(&[0x70_0000_2020]);
        assert_eq!(p.ring.control().site_tier(predicted), Some(1));
        assert_eq!(p.guided.as_ref().unwrap().placed.len(), 2);
        assert_eq!(p.ring.control().site_tier(0x1234), None);
    }

    /// A placement for another program is not applied to a process that kept the environment
    /// (a shell, mpirun).
    #[test]
    fn a_placement_for_another_program_is_left_alone() {
        let (mut d, _peer, _sys) = daemon();
        let file = PlacementFile {
            path: "p.json".into(),
            placement: placement(),
        };
        d.place_by(1, file, "/usr/bin/mpirun", None, |_| None);
        let p = &d.processes[&1];
        assert!(p.guided.is_none());
        assert_eq!(p.ring.control().default_tier(), None);
    }
}
