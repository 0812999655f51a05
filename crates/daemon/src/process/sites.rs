//! A process's allocation sites as the library describes them: raw return addresses, once per
//! site, which `objtier_sys::maps` turns into `module+offset` for people and for matching
//! across runs (warm start, placements).

use super::remembered::Warmed;
use super::Process;

/// Most sites kept per process: a bound on what a process can make the daemon store.
const MAX_SITES: usize = 1 << 16;
/// Most frames a site description may have (the library sends at most 64).
const MAX_SITE_FRAMES: u64 = 64;

impl Process {
    /// One frame of a site's description (`index_and_count`: the frame's index and how many
    /// there are, 32 bits each).
    pub(super) fn site_frame(&mut self, site: u64, ip: u64, index_and_count: u64) {
        let (index, count) = (index_and_count >> 32, index_and_count & 0xffff_ffff);
        if site == 0 || count == 0 || count > MAX_SITE_FRAMES || index >= count {
            self.stats.invalid_events += 1;
            return;
        }
        if !self.sites.contains_key(&site) && self.sites.len() >= MAX_SITES {
            return;
        }
        let frames = self.sites.entry(site).or_default();
        if index == 0 {
            // A fresh description (the library describes a site again after re-attaching).
            frames.ips.clear();
            frames.count = count as usize;
            frames.names = None;
        }
        if frames.count == count as usize && frames.ips.len() == index as usize {
            frames.ips.push(ip);
        }
    }

    /// True if some completely described site has no names yet.
    pub fn has_unnamed_sites(&self) -> bool {
        self.sites
            .values()
            .any(|s| s.complete() && s.names.is_none())
    }

    /// Names the frames of every complete, unnamed site with the process's memory map. A newly
    /// named site whose call path is remembered from an earlier run, and that is not placed yet,
    /// gets the remembered placement, or else is marked short-lived if it was then (warm
    /// start); those are returned with what was done.
    pub fn name_sites(&mut self, maps: &objtier_sys::maps::Maps) -> Vec<(u64, Warmed)> {
        let mut named = Vec::new();
        for (&id, site) in self.sites.iter_mut() {
            if site.complete() && site.names.is_none() {
                let names = site
                    .ips
                    .iter()
                    .map(|&ip| maps.describe(ip).unwrap_or_else(|| format!("?+{ip:#x}")))
                    .collect();
                site.names = Some(names);
                named.push(id);
            }
        }
        self.predict_new_modules(maps);
        self.place_named_guided(&named);
        self.warm_start_named(named)
    }
}
