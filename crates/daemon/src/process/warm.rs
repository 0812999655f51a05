//! Warm start (`crate::sitestore`): what the site store remembers of a process's program,
//! applied to its sites from the start (placements, short-lived marks), and what this run
//! learnt, saved for the next.

use super::placements::{Evidence, PlacedBy, REMEMBER_AFTER_PLANS};
use super::remembered::{Remembered, Warmed};
use super::Process;
use crate::sitestore::{Learnt, Seen};

impl Process {
    /// Sites just `named`: those whose call path the store remembers, and that are not placed
    /// yet, get the remembered placement, or else the short-lived mark. Returns what was done.
    pub(super) fn warm_start_named(&mut self, named: Vec<u64>) -> Vec<(u64, Warmed)> {
        let Some(warm) = &self.warm else {
            return Vec::new();
        };
        let wanted: Vec<(u64, Remembered)> = named
            .into_iter()
            .filter(|site| !self.placements.contains_key(site))
            .filter_map(|site| {
                let names = self.sites[&site].names.as_ref()?;
                warm.remembered.get(names).map(|&r| (site, r))
            })
            .collect();
        wanted
            .into_iter()
            .filter_map(|(site, remembered)| Some((site, self.apply_remembered(site, remembered)?)))
            .collect()
    }

    /// Applies what the store remembers of `site`: its placement, or else its short-lived mark
    /// (when the daemon looks for short-lived sites). Returns what was done.
    fn apply_remembered(&mut self, site: u64, remembered: Remembered) -> Option<Warmed> {
        if let Some((tier, _)) = remembered.placed {
            if self.set_placement(site, Some(tier), PlacedBy::WarmStart) {
                return Some(Warmed::Placed(tier));
            }
        }
        if !remembered.short_lived || self.placements.contains_key(&site) {
            return None;
        }
        self.lifetimes
            .mark_remembered(site, self.ring.control())
            .then_some(Warmed::ShortLived)
    }

    /// Warm start at attach: places (or marks short-lived) every remembered call path whose
    /// modules are all mapped already, under the site id the library will compute for it (the
    /// hash of this run's return addresses, which the memory map gives back from
    /// `module+offset`), so that the site's objects start in their tier, or sampled, from the
    /// first one allocated after this. Paths through modules loaded later are placed when the
    /// library describes them ([`Process::name_sites`]). Returns the number of sites placed and
    /// marked short-lived.
    pub fn predict_sites(&mut self, maps: &objtier_sys::maps::Maps) -> (usize, usize) {
        let Some(warm) = &self.warm else {
            return (0, 0);
        };
        let found: Vec<(u64, Remembered, Vec<String>)> = warm
            .remembered
            .iter()
            .filter_map(|(frames, &remembered)| {
                let ips: Option<Vec<u64>> = frames.iter().map(|f| maps.address_of(f)).collect();
                Some((objtier_wire::site_id::of(&ips?), remembered, frames.clone()))
            })
            .collect();
        let (mut placed, mut marked) = (0, 0);
        for (site, remembered, frames) in found {
            if self.placements.contains_key(&site) {
                continue;
            }
            match self.apply_remembered(site, remembered) {
                Some(Warmed::Placed(_)) => placed += 1,
                Some(Warmed::ShortLived) => marked += 1,
                None => continue,
            }
            if let Some(warm) = &mut self.warm {
                warm.predicted.insert(site, frames);
            }
        }
        (placed, marked)
    }

    /// Whether the site is short-lived, as far as this run can tell so far
    /// (`objtier_policy::lifetimes::run_verdict`); None for a placed site, or without the
    /// lifetimes.
    fn short_lived_verdict(&self, site: u64, now_ns: u64) -> Option<bool> {
        if self.placements.contains_key(&site) {
            return None;
        }
        self.lifetimes.verdict(site, self.attached_ns, now_ns)
    }

    /// The call paths this run has seen, each with its placement and its verdict on being
    /// short-lived at `now_ns`: what a save merges into the store. Paths with a frame no file
    /// maps are left out (their names hold raw addresses), and so are sites whose proactive
    /// placement has not held for [`REMEMBER_AFTER_PLANS`].
    pub fn seen_sites(&self, now_ns: u64) -> Vec<Seen> {
        self.sites
            .iter()
            .filter_map(|(&site, frames)| {
                let names = frames.names.as_ref()?;
                if names.iter().any(|n| n.starts_with("?+")) {
                    return None;
                }
                let mut placed = self.placements.get(&site);
                if placed.is_some_and(|&(_, by)| by != PlacedBy::Hand) {
                    match self.placements.evidence(site) {
                        // Its objects are not cold: forget the site.
                        Some(Evidence::Disproved) => placed = None,
                        Some(Evidence::Quiet(plans)) if plans >= REMEMBER_AFTER_PLANS => {}
                        // Not confirmed yet: the store keeps what it knew of the site.
                        _ => return None,
                    }
                }
                let placed = placed.map(|&(tier, by)| {
                    let learnt = match by {
                        // (A process with a placement file has no warm start to save to.)
                        PlacedBy::Hand | PlacedBy::Guided => Learnt::Hand,
                        PlacedBy::Proactive => Learnt::Proactive,
                        // Whoever learnt it first.
                        PlacedBy::WarmStart => self
                            .warm
                            .as_ref()
                            .and_then(|w| w.remembered.get(names)?.placed)
                            .map_or(Learnt::Proactive, |(_, learnt)| learnt),
                    };
                    (tier, learnt)
                });
                Some(Seen {
                    frames: names.clone(),
                    placed,
                    short_lived: self.short_lived_verdict(site, now_ns),
                })
            })
            .collect()
    }

    /// Saves what this run learnt into `store`, if something changed since the last save
    /// (`finally`: the process is gone or the daemon stops; what its lifetimes say of its sites
    /// is saved too, and sites described since the last naming are named with the last map).
    pub fn save_sites(&mut self, store: &crate::sitestore::SiteStore, now_ns: u64, finally: bool) {
        let Some(warm) = &mut self.warm else {
            return;
        };
        if finally {
            // Whether the store agrees with the verdicts is for its merge to tell.
            warm.unsaved |= !self.lifetimes.is_empty();
            if let Some(maps) = self.last_maps.take() {
                if self.has_unnamed_sites() {
                    self.name_sites(&maps);
                }
                self.last_maps = Some(maps);
            }
        }
        let Some(warm) = &self.warm else {
            return;
        };
        if !warm.unsaved {
            return;
        }
        let seen = self.seen_sites(now_ns);
        // A site placed before its frames were named is saved once they are (at the next
        // interval).
        let unnamed_placed = self.placements.iter().any(|(site, &(_, by))| {
            by != PlacedBy::WarmStart
                && self
                    .sites
                    .get(site)
                    .is_some_and(|f| f.complete() && f.names.is_none())
        });
        match store.save(&warm.program, &seen) {
            Ok(written) => {
                if written {
                    tracing::debug!(pid = self.pid, file = %warm.file.display(), "site store saved");
                }
                if let Some(warm) = &mut self.warm {
                    warm.unsaved = unnamed_placed;
                }
            }
            Err(e) => {
                store.report_failure(&warm.file, &e);
                // Tried once per change: the next change tries again.
                if let Some(warm) = &mut self.warm {
                    warm.unsaved = false;
                }
            }
        }
    }
}
