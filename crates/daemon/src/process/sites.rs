//! A process's allocation sites as the library describes them: raw return addresses, once per
//! site, which `objtier_sys::maps` turns into `module+offset` for people and for matching
//! across runs (warm start, placements).

use super::remembered::Warmed;
use super::Process;

/// Most sites kept per process: a bound on what a process can make the daemon store.
const MAX_SITES: usize = 1 << 16;
/// Most frames a site description may have (the library sends at most 64).
const MAX_SITE_FRAMES: u64 = 64;
/// Most frames kept per process, all sites together: with their names, about 40 MiB at most
/// (a program of 20,000 sites 16 frames deep keeps 320,000).
pub const MAX_FRAMES_PER_PROCESS: u64 = 1 << 19;

impl Process {
    /// One frame of a site's description (`index_and_count`: the frame's index and how many
    /// there are, 32 bits each).
    pub(super) fn site_frame(&mut self, site: u64, ip: u64, index_and_count: u64) {
        let (index, count) = (index_and_count >> 32, index_and_count & 0xffff_ffff);
        if site == 0 || count == 0 || count > MAX_SITE_FRAMES || index >= count {
            self.stats.invalid_events += 1;
            return;
        }
        let new_site = !self.sites.contains_key(&site);
        if new_site
            && (self.sites.len() >= MAX_SITES || self.stats.site_frames >= MAX_FRAMES_PER_PROCESS)
        {
            if self.stats.sites_refused == 0 {
                tracing::warn!(
                    pid = self.pid,
                    sites = self.sites.len(),
                    frames = self.stats.site_frames,
                    "this process described more sites than the daemon keeps for one process \
                     (at most {MAX_SITES} sites and {MAX_FRAMES_PER_PROCESS} frames): its further \
                     sites go unnamed"
                );
            }
            self.stats.sites_refused += 1;
            return;
        }
        let frames = self.sites.entry(site).or_default();
        if index == 0 {
            // A fresh description (the library describes a site again after re-attaching).
            self.stats.site_frames -= frames.ips.len() as u64;
            frames.ips.clear();
            frames.count = count as usize;
            frames.names = None;
        }
        if frames.count == count as usize && frames.ips.len() == index as usize {
            frames.ips.push(ip);
            self.stats.site_frames += 1;
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
