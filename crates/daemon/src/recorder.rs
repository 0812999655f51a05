//! The profile recorder: what a profiled process's objects did, per allocation site.
//!
//! A process attached with a profile token (`objtier profile`) gets one. The process's event
//! handling tells it of every allocation, free and move as it applies them, and attribution of
//! every share of sampled accesses that lands on a record; at the end of each interval it closes
//! a row of each active site's time series. When the process detaches, [`Recorder::finish`]
//! turns it into profile sites named by their frames, which the session ([`crate::sessions`])
//! merges with its other processes' into the profile file.
//!
//! Everything is counted as the events arrive, in constant memory per site (a lifetime
//! histogram, not a list of lifetimes), so a program of millions of objects costs a few hundred
//! bytes per site and interval, not per object.

use crate::source::AccessKind;
use objtier_profile::profile::{Lifetime, LifetimeHistogram, Series};
use objtier_profile::{Site, SiteKind};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Which site a thing belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SiteKey {
    /// An allocation site (its id, the hash of its call path).
    Site(u64),
    /// The small-object allocator's blocks.
    SmallObjects,
    /// Tracked objects whose site the library did not know.
    Unknown,
}

impl SiteKey {
    /// The key of a tracked object of site `site` (0: unknown).
    pub fn of_object(site: u64) -> SiteKey {
        if site == 0 {
            SiteKey::Unknown
        } else {
            SiteKey::Site(site)
        }
    }
}

/// Live and peak bytes of every process of a session together: the profile's footprint.
#[derive(Debug, Default)]
pub struct Footprint {
    live: AtomicU64,
    peak: AtomicU64,
}

impl Footprint {
    fn grow(&self, bytes: u64) {
        let live = self.live.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(live, Ordering::Relaxed);
    }

    fn shrink(&self, bytes: u64) {
        // Saturating: a process's bytes leave at most once, but a lost event may make a free
        // of something never counted.
        let _ = self
            .live
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
                Some(l.saturating_sub(bytes))
            });
    }

    pub fn peak_bytes(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

/// Counts of one site in the interval under way.
#[derive(Clone, Debug, Default)]
struct Now {
    peak_live_bytes: u64,
    accesses: f64,
    loads: f64,
    stores: f64,
    allocations: u64,
}

/// Everything recorded about one site.
#[derive(Clone, Debug, Default)]
struct SiteRecord {
    allocations: u64,
    bytes_allocated: u64,
    live_bytes: u64,
    peak_live_bytes: u64,
    lifetimes: LifetimeHistogram,
    freed: u64,
    min_life_ns: Option<u64>,
    max_life_ns: u64,
    past_one_interval: u64,
    live_at_exit: u64,
    accesses: f64,
    loads: f64,
    stores: f64,
    /// Accesses whose kind the source could not tell.
    unknown_kind: f64,
    weight: f64,
    now: Now,
    series: Series,
    /// Whether any row of `series` (or `now`) had accesses of unknown kind.
    unknown_kind_in_series: bool,
}

impl SiteRecord {
    fn grow(&mut self, bytes: u64) {
        self.live_bytes += bytes;
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
        self.now.peak_live_bytes = self.now.peak_live_bytes.max(self.live_bytes);
    }

    fn shrink(&mut self, bytes: u64) {
        self.live_bytes = self.live_bytes.saturating_sub(bytes);
    }

    fn active(&self) -> bool {
        self.now.peak_live_bytes > 0 || self.now.accesses > 0.0 || self.now.allocations > 0
    }
}

/// A profiled process's recording.
#[derive(Clone, Debug)]
pub struct Recorder {
    sites: HashMap<SiteKey, SiteRecord>,
    live_bytes: u64,
    peak_live_bytes: u64,
    /// An object older than this lived "past one interval".
    interval_ns: u64,
    footprint: Arc<Footprint>,
    /// Whether the source ever told loads and stores apart for this process, and whether it
    /// ever could not.
    saw_kinds: bool,
    saw_unknown_kind: bool,
    saw_weight: bool,
}

impl Recorder {
    pub fn new(interval_ns: u64, footprint: Arc<Footprint>) -> Recorder {
        Recorder {
            sites: HashMap::new(),
            live_bytes: 0,
            peak_live_bytes: 0,
            interval_ns,
            footprint,
            saw_kinds: false,
            saw_unknown_kind: false,
            saw_weight: false,
        }
    }

    fn site(&mut self, key: SiteKey) -> &mut SiteRecord {
        self.sites.entry(key).or_default()
    }

    fn grow(&mut self, key: SiteKey, bytes: u64) {
        self.live_bytes += bytes;
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
        self.footprint.grow(bytes);
        self.site(key).grow(bytes);
    }

    fn shrink(&mut self, key: SiteKey, bytes: u64) {
        self.live_bytes = self.live_bytes.saturating_sub(bytes);
        self.footprint.shrink(bytes);
        self.site(key).shrink(bytes);
    }

    /// A new object (or one live before the process attached, re-announced) of `bytes`.
    pub fn allocated(&mut self, key: SiteKey, bytes: u64) {
        let site = self.site(key);
        site.allocations += 1;
        site.bytes_allocated += bytes;
        site.now.allocations += 1;
        self.grow(key, bytes);
    }

    /// An object of `bytes` allocated at `created_ns` was freed at `freed_ns`.
    pub fn freed(&mut self, key: SiteKey, bytes: u64, created_ns: u64, freed_ns: u64) {
        let life = freed_ns.saturating_sub(created_ns);
        let interval_ns = self.interval_ns;
        let site = self.site(key);
        site.freed += 1;
        site.lifetimes.add(life);
        site.min_life_ns = Some(site.min_life_ns.map_or(life, |m| m.min(life)));
        site.max_life_ns = site.max_life_ns.max(life);
        if life > interval_ns {
            site.past_one_interval += 1;
        }
        self.shrink(key, bytes);
    }

    /// An object moved or resized by `realloc`: it keeps its site; only a growth is new memory.
    pub fn resized(&mut self, key: SiteKey, old_bytes: u64, new_bytes: u64) {
        if new_bytes >= old_bytes {
            let grown = new_bytes - old_bytes;
            self.site(key).bytes_allocated += grown;
            self.grow(key, grown);
        } else {
            self.shrink(key, old_bytes - new_bytes);
        }
    }

    /// A block of small-object memory (one of the allocator's arenas) was announced. Its bytes
    /// are what of it is resident ([`Recorder::small_objects_resident`]), not its length: an
    /// arena reserves 64 MiB at a time and fills as the program allocates.
    pub fn block_mapped(&mut self) {
        let site = self.site(SiteKey::SmallObjects);
        site.allocations += 1;
        site.now.allocations += 1;
    }

    /// The small-object blocks hold `bytes` resident now (as the daemon last located them).
    pub fn small_objects_resident(&mut self, bytes: u64) {
        let live = self.site(SiteKey::SmallObjects).live_bytes;
        if bytes > live {
            self.site(SiteKey::SmallObjects).bytes_allocated += bytes - live;
            self.grow(SiteKey::SmallObjects, bytes - live);
        } else {
            self.shrink(SiteKey::SmallObjects, live - bytes);
        }
    }

    /// `weight` of the source's accesses (of `kind`, with `latency` of its weight where it
    /// has one) landed on an object of `key`.
    pub fn accessed(&mut self, key: SiteKey, kind: AccessKind, weight: f64, latency: Option<f64>) {
        match kind {
            AccessKind::Load | AccessKind::Store => self.saw_kinds = true,
            AccessKind::Any => self.saw_unknown_kind = true,
        }
        self.saw_weight |= latency.is_some();
        let site = self.site(key);
        site.accesses += weight;
        site.now.accesses += weight;
        match kind {
            AccessKind::Load => {
                site.loads += weight;
                site.now.loads += weight;
            }
            AccessKind::Store => {
                site.stores += weight;
                site.now.stores += weight;
            }
            AccessKind::Any => {
                site.unknown_kind += weight;
                site.unknown_kind_in_series = true;
            }
        }
        site.weight += latency.unwrap_or(0.0);
    }

    /// Closes interval `index` of the session's timeline: a row for every site active in it,
    /// with where its pages are (`tier_bytes`: bytes per tier by site, as last located).
    pub fn end_interval(&mut self, index: usize, tier_bytes: &HashMap<SiteKey, Vec<u64>>) {
        let kinds = self.saw_kinds;
        for (key, site) in self.sites.iter_mut() {
            if site.active() {
                let known = kinds && !site.unknown_kind_in_series;
                site.series.push(
                    index,
                    site.now.peak_live_bytes,
                    site.now.accesses,
                    known.then_some(site.now.loads),
                    known.then_some(site.now.stores),
                    site.now.allocations,
                );
                if let Some(bytes) = tier_bytes.get(key) {
                    site.series.set_last_tier_bytes(bytes.clone());
                }
            }
            // The next interval starts with what is live now.
            site.now = Now {
                peak_live_bytes: site.live_bytes,
                ..Now::default()
            };
        }
    }

    /// The most bytes the process held in tracked objects and blocks at once.
    pub fn peak_live_bytes(&self) -> u64 {
        self.peak_live_bytes
    }

    /// The recording as profile sites: `frames_of` names a site's frames (None for a site whose
    /// description never arrived: it is left out, its bytes and accesses counted in
    /// `unnamed`). `live` gives the objects still live at the end, as (key, age in ns).
    pub fn finish(
        mut self,
        frames_of: impl Fn(u64) -> Option<Vec<String>>,
        live: impl Iterator<Item = (SiteKey, u64)>,
        last_interval: Option<usize>,
    ) -> Finished {
        for (key, age_ns) in live {
            let interval_ns = self.interval_ns;
            let site = self.site(key);
            site.lifetime_live_at_exit(age_ns > interval_ns);
        }
        if let Some(index) = last_interval {
            if self.sites.values().any(SiteRecord::active) {
                self.end_interval(index, &HashMap::new());
            }
        }
        let kinds = self.saw_kinds;
        let weights = self.saw_weight;
        let mut out = Finished {
            sites: Vec::new(),
            unnamed_sites: 0,
            peak_live_bytes: self.peak_live_bytes,
            saw_kinds: self.saw_kinds,
            saw_unknown_kind: self.saw_unknown_kind,
        };
        for (key, record) in self.sites {
            let (kind, frames) = match key {
                SiteKey::Site(id) => match frames_of(id) {
                    Some(frames) => (SiteKind::Site, frames),
                    None => {
                        out.unnamed_sites += 1;
                        (SiteKind::Unknown, Vec::new())
                    }
                },
                SiteKey::SmallObjects => (SiteKind::SmallObjects, Vec::new()),
                SiteKey::Unknown => (SiteKind::Unknown, Vec::new()),
            };
            let known = kinds && record.unknown_kind == 0.0;
            let buckets = record.lifetimes.buckets();
            out.sites.push(Site {
                kind,
                frames,
                symbols: Vec::new(),
                allocations: record.allocations,
                bytes_allocated: record.bytes_allocated,
                peak_live_bytes: record.peak_live_bytes,
                accesses: record.accesses,
                loads: known.then_some(record.loads),
                stores: known.then_some(record.stores),
                weight: weights.then_some(record.weight),
                lifetime: Lifetime {
                    freed: record.freed,
                    min_s: record.min_life_ns.map(|ns| ns as f64 / 1e9),
                    median_s: objtier_profile::profile::median_of_histogram(&buckets),
                    max_s: (record.freed > 0).then(|| record.max_life_ns as f64 / 1e9),
                    past_one_interval: record.past_one_interval,
                    live_at_exit: record.live_at_exit,
                    histogram: buckets,
                },
                series: record.series,
            });
        }
        out
    }
}

impl SiteRecord {
    fn lifetime_live_at_exit(&mut self, past_one_interval: bool) {
        self.live_at_exit += 1;
        if past_one_interval {
            self.past_one_interval += 1;
        }
    }
}

/// A process's recording, finished: sites as the profile has them.
#[derive(Debug, Default)]
pub struct Finished {
    pub sites: Vec<Site>,
    /// Sites left without frames (their description never arrived), folded into "unknown".
    pub unnamed_sites: usize,
    pub peak_live_bytes: u64,
    pub saw_kinds: bool,
    pub saw_unknown_kind: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder() -> Recorder {
        Recorder::new(2_000_000_000, Arc::new(Footprint::default()))
    }

    #[test]
    fn counts_allocations_lifetimes_and_peaks_per_site() {
        let mut r = recorder();
        let a = SiteKey::Site(7);
        r.allocated(a, 4096);
        r.allocated(a, 8192);
        r.freed(a, 4096, 0, 1_000);
        r.allocated(a, 4096);
        r.freed(a, 8192, 0, 3_000_000_000);
        r.block_mapped();
        r.small_objects_resident(1 << 20);
        r.accessed(a, AccessKind::Any, 10.0, None);
        r.end_interval(0, &HashMap::new());
        r.accessed(a, AccessKind::Any, 5.0, None);
        let mut where_ = HashMap::new();
        where_.insert(a, vec![4096, 0]);
        r.end_interval(1, &where_);
        r.end_interval(2, &HashMap::new());
        assert_eq!(
            r.peak_live_bytes(),
            4096 + (1 << 20),
            "the blocks came after two frees"
        );
        let done = r.finish(
            |id| (id == 7).then(|| vec!["/bin/x+0x10".to_string()]),
            [(a, 5)].into_iter(),
            None,
        );
        let site = done
            .sites
            .iter()
            .find(|s| s.kind == SiteKind::Site)
            .unwrap();
        assert_eq!(
            (site.allocations, site.bytes_allocated, site.peak_live_bytes),
            (3, 16384, 12288)
        );
        assert_eq!(site.accesses, 15.0);
        assert_eq!((site.loads, site.stores), (None, None));
        assert_eq!(site.lifetime.freed, 2);
        assert_eq!(site.lifetime.min_s, Some(1e-6));
        assert_eq!(site.lifetime.max_s, Some(3.0));
        assert_eq!(
            (site.lifetime.past_one_interval, site.lifetime.live_at_exit),
            (1, 1)
        );
        // Interval 2 had live bytes (one object), so it has a row; accesses only in 0 and 1.
        assert_eq!(site.series.interval, vec![0, 1, 2]);
        assert_eq!(site.series.accesses, vec![10.0, 5.0, 0.0]);
        assert_eq!(site.series.live_bytes, vec![12288, 4096, 4096]);
        assert_eq!(site.series.allocations, vec![3, 0, 0]);
        assert_eq!(
            site.series.tier_bytes,
            Some(vec![vec![], vec![4096, 0], vec![]])
        );
        let small = done
            .sites
            .iter()
            .find(|s| s.kind == SiteKind::SmallObjects)
            .unwrap();
        assert_eq!(small.peak_live_bytes, 1 << 20);
    }

    #[test]
    fn loads_and_stores_are_kept_apart_when_the_source_says() {
        let mut r = recorder();
        let a = SiteKey::Site(1);
        r.allocated(a, 4096);
        r.accessed(a, AccessKind::Load, 3.0, Some(300.0));
        r.accessed(a, AccessKind::Store, 1.0, Some(50.0));
        r.end_interval(0, &HashMap::new());
        let done = r.finish(
            |_| Some(vec!["/bin/x+0x1".into()]),
            std::iter::empty(),
            None,
        );
        let s = &done.sites[0];
        assert_eq!(
            (s.loads, s.stores, s.weight),
            (Some(3.0), Some(1.0), Some(350.0))
        );
        assert_eq!(s.series.loads, Some(vec![3.0]));
        assert_eq!(s.series.stores, Some(vec![1.0]));
    }

    #[test]
    fn the_footprint_is_every_process_together() {
        let footprint = Arc::new(Footprint::default());
        let mut a = Recorder::new(1, footprint.clone());
        let mut b = Recorder::new(1, footprint.clone());
        a.allocated(SiteKey::Site(1), 100);
        b.allocated(SiteKey::Site(1), 50);
        a.freed(SiteKey::Site(1), 100, 0, 1);
        b.allocated(SiteKey::Site(1), 20);
        assert_eq!(footprint.peak_bytes(), 150);
        assert_eq!((a.peak_live_bytes(), b.peak_live_bytes()), (100, 70));
    }

    #[test]
    fn a_site_never_described_is_counted_as_unknown() {
        let mut r = recorder();
        r.allocated(SiteKey::Site(3), 4096);
        let done = r.finish(|_| None, std::iter::empty(), None);
        assert_eq!(done.unnamed_sites, 1);
        assert_eq!(done.sites[0].kind, SiteKind::Unknown);
    }
}
