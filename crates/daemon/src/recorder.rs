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

use crate::page_history::PageHistory;
use crate::source::AccessKind;
use objtier_profile::levels::LevelAccesses;
use objtier_profile::profile::{Lifetime, LifetimeHistogram, PageMoves, PageMovesFollowed, Series};
use objtier_profile::{Site, SiteKind};
use objtier_sys::perf::datasrc::{DataSource, MemLevel};
use std::collections::BTreeMap;
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

    /// The key of a record of site `site` at `start`: a record of no site inside one of the
    /// small-object `blocks` (start to length) is theirs.
    pub fn of_record(
        site: u64,
        start: u64,
        blocks: &std::collections::BTreeMap<u64, u64>,
    ) -> SiteKey {
        let in_block = site == 0
            && blocks
                .range(..=start)
                .next_back()
                .is_some_and(|(&s, &l)| start < s + l);
        if in_block {
            SiteKey::SmallObjects
        } else {
            SiteKey::of_object(site)
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
    /// Pages of the site found moved at the looks of this interval.
    moves: PageMoves,
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
    /// Samples by the level that served them, and the tier their page was in (`None`: not
    /// located yet).
    levels: HashMap<(Option<usize>, MemLevel), LevelAccesses>,
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
        self.now.peak_live_bytes > 0
            || self.now.accesses > 0.0
            || self.now.allocations > 0
            || !self.now.moves.is_zero()
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
    /// Each located page's tier, for the moves and the tier of a sampled page.
    pages: PageHistory,
    /// Whether any record's pages were located (the profile then says how they were followed).
    located_pages: bool,
}

/// The most bytes a process's page history holds: a byte per page, 256 GiB of records.
const PAGE_HISTORY_BYTES_MAX: u64 = 64 << 20;

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
            pages: PageHistory::new(PAGE_HISTORY_BYTES_MAX),
            located_pages: false,
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

    /// The samples of [`Recorder::accessed`] (`weight` of them, `latency` their weight) were
    /// served by the level `source` names, from a page in `tier` where it is known.
    pub fn served_by(
        &mut self,
        key: SiteKey,
        source: DataSource,
        weight: f64,
        latency: Option<f64>,
        tier: Option<usize>,
    ) {
        let counts = self
            .site(key)
            .levels
            .entry((tier, source.level))
            .or_default();
        let latency = latency.unwrap_or(0.0);
        counts.accesses += weight;
        counts.weight += latency;
        if source.tlb_miss {
            counts.tlb_misses += weight;
            counts.tlb_miss_weight += latency;
        }
        if source.hitm {
            counts.hitm += weight;
        }
    }

    /// The record of `key` at `start` was located, its pages in `tiers` (in order; `None`: not
    /// present): the pages that changed tier since its last look count in this interval.
    pub fn pages_located(
        &mut self,
        key: SiteKey,
        start: u64,
        tiers: impl ExactSizeIterator<Item = Option<usize>>,
    ) {
        self.located_pages = true;
        let moves = self.pages.located(start, tiers);
        if !moves.is_zero() {
            self.site(key).now.moves.add(moves);
        }
    }

    /// The tier of the page at `addr` of the record at `start`, as last located.
    pub fn page_tier(&self, start: u64, addr: u64) -> Option<usize> {
        self.pages.tier_of(start, addr)
    }

    /// A look at the process's pages is over: `alive(start, pages)` says whether a record of
    /// that many pages still starts there (the others' histories are dropped).
    pub fn pages_look_done(&mut self, alive: impl Fn(u64, usize) -> bool) {
        self.pages.look_done(alive);
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
                site.series.add_to_last_page_moves(site.now.moves);
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
            page_moves: self.located_pages.then(|| self.pages.followed()),
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
            let (memory_levels, memory_levels_by_tier) = levels_of(&record.levels);
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
                memory_levels,
                memory_levels_by_tier,
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

type Levels = BTreeMap<String, LevelAccesses>;

/// A site's samples by level as the profile has them: all of them, and by tier.
fn levels_of(counts: &HashMap<(Option<usize>, MemLevel), LevelAccesses>) -> (Levels, Vec<Levels>) {
    let mut all = Levels::new();
    let mut by_tier: Vec<Levels> = Vec::new();
    for (&(tier, level), c) in counts {
        all.entry(level.name().to_string()).or_default().add(c, 1.0);
        if let Some(t) = tier {
            if by_tier.len() <= t {
                by_tier.resize_with(t + 1, Levels::new);
            }
            by_tier[t]
                .entry(level.name().to_string())
                .or_default()
                .add(c, 1.0);
        }
    }
    (all, by_tier)
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
    /// How its pages' moves were followed, where they were located.
    pub page_moves: Option<PageMovesFollowed>,
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
    fn page_moves_and_ping_pong_land_in_their_interval_and_site() {
        let mut r = recorder();
        let (a, b) = (SiteKey::Site(1), SiteKey::Site(2));
        r.allocated(a, 2 * 4096);
        r.allocated(b, 4096);
        r.pages_located(a, 0, [Some(1), Some(1)].into_iter());
        r.pages_located(b, 1 << 20, [Some(0)].into_iter());
        r.pages_look_done(|_, _| true);
        r.end_interval(0, &HashMap::new());
        // Interval 1: both of a's pages promoted, b's demoted.
        r.pages_located(a, 0, [Some(0), Some(0)].into_iter());
        r.pages_located(b, 1 << 20, [Some(1)].into_iter());
        r.end_interval(1, &HashMap::new());
        // Interval 2: one of a's pages demoted again (ping-pong), b's promoted back (too).
        r.pages_located(a, 0, [Some(1), Some(0)].into_iter());
        r.pages_located(b, 1 << 20, [Some(0)].into_iter());
        r.end_interval(2, &HashMap::new());
        assert_eq!(r.page_tier(0, 4096), Some(0));
        assert_eq!(r.page_tier(0, 0), Some(1));
        let done = r.finish(
            |id| Some(vec![format!("/bin/x+{id:#x}")]),
            std::iter::empty(),
            None,
        );
        let site = |f: &str| {
            done.sites
                .iter()
                .find(|s| s.frames[0] == f)
                .unwrap()
                .series
                .clone()
        };
        let (sa, sb) = (site("/bin/x+0x1"), site("/bin/x+0x2"));
        assert_eq!(sa.promoted_pages, Some(vec![0, 2, 0]));
        assert_eq!(sa.demoted_pages, Some(vec![0, 0, 1]));
        assert_eq!(sa.ping_pong_pages, Some(vec![0, 0, 1]));
        assert_eq!(sb.promoted_pages, Some(vec![0, 0, 1]));
        assert_eq!(sb.demoted_pages, Some(vec![0, 1, 0]));
        assert_eq!(sb.ping_pong_pages, Some(vec![0, 0, 1]));
        let followed = done.page_moves.unwrap();
        assert_eq!(followed.pages_not_followed, 0);
        assert_eq!(followed.history_bytes_max, PAGE_HISTORY_BYTES_MAX);
        // A recorder that never located a page says nothing of moves.
        assert!(recorder()
            .finish(|_| None, std::iter::empty(), None)
            .page_moves
            .is_none());
    }

    #[test]
    fn data_sources_and_latency_add_up_by_level_and_tier() {
        let mut r = recorder();
        let a = SiteKey::Site(1);
        r.allocated(a, 4096);
        let ram = DataSource {
            level: MemLevel::Ram,
            ..DataSource::default()
        };
        let far = DataSource {
            level: MemLevel::RemoteRam,
            tlb_miss: true,
            hitm: true,
        };
        let l1 = DataSource {
            level: MemLevel::L1,
            ..DataSource::default()
        };
        r.accessed(a, AccessKind::Load, 2.0, Some(400.0));
        r.served_by(a, ram, 2.0, Some(400.0), Some(0));
        r.accessed(a, AccessKind::Load, 1.0, Some(700.0));
        r.served_by(a, far, 1.0, Some(700.0), Some(1));
        r.accessed(a, AccessKind::Load, 1.0, Some(500.0));
        r.served_by(a, far, 1.0, Some(500.0), None);
        r.accessed(a, AccessKind::Load, 4.0, Some(20.0));
        r.served_by(a, l1, 4.0, Some(20.0), Some(1));
        r.end_interval(0, &HashMap::new());
        let done = r.finish(
            |_| Some(vec!["/bin/x+0x1".into()]),
            std::iter::empty(),
            None,
        );
        let s = &done.sites[0];
        assert_eq!(s.weight, Some(1620.0));
        let all = &s.memory_levels;
        assert_eq!(all.len(), 3);
        assert_eq!(all["ram"].accesses, 2.0);
        assert_eq!(all["ram"].weight, 400.0);
        assert_eq!(all["remote-ram"].accesses, 2.0, "located or not");
        assert_eq!(all["remote-ram"].weight, 1200.0);
        assert_eq!(all["remote-ram"].tlb_misses, 2.0);
        assert_eq!(all["remote-ram"].tlb_miss_weight, 1200.0);
        assert_eq!((all["remote-ram"].hitm, all["ram"].hitm), (2.0, 0.0));
        assert_eq!(all["l1"].weight, 20.0);
        let by_tier = &s.memory_levels_by_tier;
        assert_eq!(by_tier.len(), 2);
        assert_eq!(by_tier[0].keys().collect::<Vec<_>>(), ["ram"]);
        assert_eq!(
            by_tier[1]["remote-ram"].accesses, 1.0,
            "the unlocated one left out"
        );
        assert_eq!(by_tier[1]["remote-ram"].weight, 700.0);
        assert_eq!(by_tier[1]["l1"].accesses, 4.0);
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
