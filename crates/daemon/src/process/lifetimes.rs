//! How long a process's objects live, per allocation site, and which sites are short-lived
//! (`objtier_policy::lifetimes` has the rules; this keeps the counts and the marks).
//!
//! A short-lived site's objects all die young: the library then reports only a sample of them.
//! Objects are counted young or old when they die, or old once a commit finds them live past
//! the young age; a site is judged at each interval's end over a window of intervals, or
//! earlier when it is busy (after a drain: `SiteLifetimes::judge_early`).

use crate::record::Object;
use objtier_policy::lifetimes::{self, Lifetimes};
use objtier_wire::Control;
use std::collections::{BTreeMap, HashMap};

/// How one allocation site's objects have lived lately (`objtier_policy::lifetimes`).
#[derive(Clone, Debug, Default)]
pub struct SiteLives {
    /// This interval so far.
    pub current: Lifetimes,
    /// The intervals before, the latest last (at most `lifetimes::SHORT_LIVED_WINDOW`).
    pub past: Vec<Lifetimes>,
    /// The intervals before this one, all of them (for the site store's verdict).
    pub run: Lifetimes,
    /// Marked short-lived in the control area's site table.
    pub short_lived: bool,
    /// Marked so by warm start, from an earlier run, rather than judged in this one.
    pub remembered: bool,
    /// When the first object counted in its window was allocated: how long the site has been
    /// watched, for the early judgement (`lifetimes::short_lived_early`).
    pub since_ns: Option<u64>,
    /// No early judgement of the site before this time (each one that fails waits for the
    /// watch to grow by a quarter).
    pub next_early_ns: u64,
}

impl SiteLives {
    /// Its lifetimes over its window so far: the past intervals kept and this one.
    pub fn window(&self) -> Lifetimes {
        let mut window = self.current;
        self.past.iter().for_each(|p| window.add(*p));
        window
    }

    /// How long it has been watched at `now_ns` (0 before its first counted object).
    pub fn watched_ns(&self, now_ns: u64) -> u64 {
        now_ns.saturating_sub(self.since_ns.unwrap_or(now_ns))
    }
}

/// Every this many young deaths of a site in an interval, the site is a candidate for the
/// early judgement (`SiteLifetimes::judge_early`): a test on the daemon's busiest path costs
/// one mask, and a site that makes temporaries fast is looked at every few milliseconds.
const EARLY_CANDIDATE_EVERY: u64 = 4096;

/// Hashes a site id, which is a hash of a call path already, to itself: the lifetimes of a
/// site are counted on every free, in the daemon's busiest loop.
#[derive(Default)]
pub struct SiteIdHasher(u64);

impl std::hash::Hasher for SiteIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id;
    }
}

pub type SiteMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<SiteIdHasher>>;

/// A process's site lifetimes (see the module doc).
#[derive(Default)]
pub struct SiteLifetimes {
    /// The age under which an object's death is young (`objtier_policy::lifetimes::young_ns`);
    /// None when the daemon does not look for short-lived sites (`--short-lived-sites off`).
    young_ns: Option<u64>,
    /// The daemon's interval (for the lifetimes' verdict over a whole run).
    interval_ns: u64,
    /// Per site, how its objects lived (only with `young_ns`).
    lives: SiteMap<SiteLives>,
    /// Records made of objects still young: the next commits look at those still live again,
    /// and count them old once they are.
    young_records: Vec<(u64, Object)>,
    /// Sites to judge early at the next `judge_early` (pushed as their young deaths mount;
    /// may repeat).
    early_candidates: Vec<u64>,
}

impl SiteLifetimes {
    /// Lifetimes for a daemon of `interval_ns` intervals; `watch`: look for short-lived sites.
    pub fn new(interval_ns: u64, watch: bool) -> SiteLifetimes {
        SiteLifetimes {
            young_ns: watch.then(|| lifetimes::young_ns(interval_ns)),
            interval_ns,
            ..SiteLifetimes::default()
        }
    }

    /// The age under which an object's death is young; None when sites are not watched.
    pub fn young_ns(&self) -> Option<u64> {
        self.young_ns
    }

    /// Watches sites with this young age from now on, or (None) no longer.
    pub fn set_young_ns(&mut self, young_ns: Option<u64>) {
        self.young_ns = young_ns;
    }

    /// Sets the daemon's interval the verdicts over a run count in.
    pub fn set_interval_ns(&mut self, interval_ns: u64) {
        self.interval_ns = interval_ns;
    }

    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// How `site`'s objects have lived, if it was seen.
    pub fn get(&self, site: u64) -> Option<&SiteLives> {
        self.lives.get(&site)
    }

    /// Whether no site's objects were counted yet.
    pub fn is_empty(&self) -> bool {
        self.lives.is_empty()
    }

    /// Records made of objects still young, to be looked at again by the next commits.
    pub fn young_records(&self) -> &[(u64, Object)] {
        &self.young_records
    }

    /// An object of `site` allocated at `created_ns` died at `end_ns`.
    #[inline]
    pub(super) fn died(&mut self, site: u64, created_ns: u64, end_ns: u64) {
        if let Some(young_ns) = self.young_ns {
            count_life(
                &mut self.lives,
                &mut self.early_candidates,
                young_ns,
                site,
                created_ns,
                end_ns,
                true,
            );
        }
    }

    /// An object `realloc` moved to `start` (now `object`) at `time_ns`: one still young is
    /// looked at again by the next commits at its new start and length.
    pub(super) fn moved(&mut self, start: u64, object: Object, time_ns: u64) {
        if self
            .young_ns
            .is_some_and(|young_ns| time_ns.saturating_sub(object.created_ns) < young_ns)
        {
            self.young_records.push((start, object));
        }
    }

    /// At a commit (`now_ns`): objects at least the young age count as having lived long for
    /// their sites, and the records made of younger ones (`pending`, about to become records,
    /// and those young at earlier commits that `objects` still holds) are looked at again next
    /// time.
    pub(super) fn commit(
        &mut self,
        objects: &BTreeMap<u64, Object>,
        pending: &[(u64, Object)],
        now_ns: u64,
    ) {
        let Some(young_ns) = self.young_ns else {
            return;
        };
        let (lives, candidates) = (&mut self.lives, &mut self.early_candidates);
        // Counted once old; true while still young.
        let mut count = |object: &Object| {
            count_life(
                lives,
                candidates,
                young_ns,
                object.site,
                object.created_ns,
                now_ns,
                false,
            )
        };
        // Records made young at earlier commits, if they live on (the same object: a new one
        // at the same start was made at another time), may be old by now.
        self.young_records.retain(|(start, object)| {
            objects.get(start).is_some_and(|o| o == object) && count(object)
        });
        for (start, object) in pending {
            if count(object) {
                self.young_records.push((*start, *object));
            }
        }
    }

    /// End of interval: judges each site by how its objects lived in the last intervals
    /// (`objtier_policy::lifetimes::short_lived`), and marks or unmarks it short-lived in
    /// `control`. A site `placed` in a tier is never short-lived: its placement would be
    /// ignored. Returns the sites whose mark changed, with their new state.
    pub(super) fn judge(
        &mut self,
        control: &Control,
        placed: impl Fn(u64) -> bool,
    ) -> Vec<(u64, bool)> {
        let mut changed = Vec::new();
        if self.young_ns.is_none() {
            return changed;
        }
        for (&site, lives) in self.lives.iter_mut() {
            lives.run.add(lives.current);
            lives.past.push(std::mem::take(&mut lives.current));
            if lives.past.len() > lifetimes::SHORT_LIVED_WINDOW {
                lives.past.remove(0);
            }
            let short_lived =
                !placed(site) && lifetimes::short_lived(lives.short_lived, &lives.past);
            if short_lived != lives.short_lived && control.set_site_short_lived(site, short_lived) {
                lives.short_lived = short_lived;
                lives.remembered = false;
                changed.push((site, short_lived));
            }
            // A site's counts are kept for the run, as its sites are (the store's verdict is on
            // the whole run); but one that was quiet for the whole window starts its window
            // afresh when it is busy again, so that it is judged on two intervals of its objects.
            if !lives.short_lived && lives.past.iter().all(|p| p.young + p.old == 0) {
                lives.past.clear();
                lives.since_ns = None;
            }
        }
        changed
    }

    /// Between intervals: marks short-lived the sites among the candidates that
    /// `lifetimes::short_lived_early` finds so by now (`now_ns`), before their window is
    /// complete. `objects` and `pending` are the process's live objects and this interval's
    /// allocations. Returns the sites marked.
    pub(super) fn judge_early<'a>(
        &'a mut self,
        now_ns: u64,
        control: &Control,
        placed: impl Fn(u64) -> bool,
        objects: &BTreeMap<u64, Object>,
        pending: impl Iterator<Item = &'a Object>,
    ) -> Vec<u64> {
        let mut marked = Vec::new();
        let Some(young_ns) = self.young_ns else {
            self.early_candidates.clear();
            return marked;
        };
        if self.early_candidates.is_empty() {
            return marked;
        }
        let mut candidates = std::mem::take(&mut self.early_candidates);
        candidates.sort_unstable();
        candidates.dedup();
        // Those whose counts allow it and whose time has come: cheap tests before the pass
        // over the objects below.
        candidates.retain(|site| {
            self.lives.get(site).is_some_and(|lives| {
                let window = lives.window();
                !lives.short_lived
                    && now_ns >= lives.next_early_ns
                    && lifetimes::early_judgement_applies(lives.watched_ns(now_ns), young_ns)
                    && window.old == 0
                    && window.young >= lifetimes::SHORT_LIVED_MIN_YOUNG
            }) && !placed(*site)
        });
        if candidates.is_empty() {
            return marked;
        }
        // The oldest live object of each candidate, among those not yet counted: this
        // interval's, and records still young. A live object older than `young_ns` was counted
        // old at a commit (which keeps its site from being a candidate in that window), so a
        // pass over these finds every one that matters, however many records the process has.
        let mut oldest: SiteMap<u64> = candidates.iter().map(|&s| (s, u64::MAX)).collect();
        let sites = &candidates;
        let still_young = self
            .young_records
            .iter()
            // Of a candidate, and live (not freed since the last commit, its start not reused).
            .filter(|(start, object)| {
                sites.binary_search(&object.site).is_ok() && objects.get(start) == Some(object)
            })
            .map(|(_, object)| object);
        for object in pending.chain(still_young) {
            if let Some(created) = oldest.get_mut(&object.site) {
                *created = (*created).min(object.created_ns);
            }
        }
        for site in candidates {
            let lives = self.lives.get_mut(&site).expect("kept above");
            let (window, watched_ns) = (lives.window(), lives.watched_ns(now_ns));
            let oldest_live_ns = match oldest[&site] {
                u64::MAX => 0,
                created => now_ns.saturating_sub(created),
            };
            tracing::debug!(
                site = format_args!("{site:#x}"),
                ?watched_ns,
                ?oldest_live_ns,
                ?window,
                "early judgement"
            );
            if lifetimes::short_lived_early(window, watched_ns, oldest_live_ns, young_ns)
                && control.set_site_short_lived(site, true)
            {
                lives.short_lived = true;
                lives.remembered = false;
                marked.push(site);
            } else {
                // Judged again once the watch is a quarter longer.
                lives.next_early_ns = now_ns.saturating_add(watched_ns / 4);
            }
        }
        marked
    }

    /// Marks `site` short-lived because an earlier run found it so (warm start), when sites
    /// are watched and `control` takes the mark. True if it is marked now.
    pub(super) fn mark_remembered(&mut self, site: u64, control: &Control) -> bool {
        if self.young_ns.is_none() {
            return false;
        }
        let lives = self.lives.entry(site).or_default();
        if lives.short_lived || !control.set_site_short_lived(site, true) {
            return false;
        }
        lives.short_lived = true;
        lives.remembered = true;
        true
    }

    /// Whether `site` is short-lived, as far as this run (attached at `attached_ns`) can tell at
    /// `now_ns` (`objtier_policy::lifetimes::run_verdict`); None without the lifetimes.
    pub fn verdict(&self, site: u64, attached_ns: u64, now_ns: u64) -> Option<bool> {
        self.young_ns?;
        let lives = self.lives.get(&site)?;
        let mut run = lives.run;
        run.add(lives.current);
        lifetimes::run_verdict(
            lives.short_lived,
            run,
            now_ns.saturating_sub(attached_ns),
            self.interval_ns,
        )
    }

    /// Sites marked short-lived now, in order.
    pub fn short_lived_sites(&self) -> Vec<u64> {
        let mut sites: Vec<u64> = self
            .lives
            .iter()
            .filter(|(_, lives)| lives.short_lived)
            .map(|(&site, _)| site)
            .collect();
        sites.sort_unstable();
        sites
    }
}

/// Counts an object of `site` that lived from `created_ns` to `end_ns` (now, if it still
/// lives), young or old for `young_ns`. One still young and live is not counted yet: true for
/// it (to be looked at again), false once counted or for site 0. A site that is not
/// short-lived is pushed to `candidates` every `EARLY_CANDIDATE_EVERY` young deaths.
#[inline]
fn count_life(
    lives: &mut SiteMap<SiteLives>,
    candidates: &mut Vec<u64>,
    young_ns: u64,
    site: u64,
    created_ns: u64,
    end_ns: u64,
    ended: bool,
) -> bool {
    if site == 0 {
        return false;
    }
    let age = end_ns.saturating_sub(created_ns);
    let young = age < young_ns;
    if young && !ended {
        return true;
    }
    let lives = lives.entry(site).or_default();
    lives.since_ns = Some(lives.since_ns.map_or(created_ns, |t| t.min(created_ns)));
    let current = &mut lives.current;
    if young {
        current.young += 1;
        current.longest_young_ns = current.longest_young_ns.max(age);
        if current.young.is_multiple_of(EARLY_CANDIDATE_EVERY) && !lives.short_lived {
            candidates.push(site);
        }
    } else {
        current.old += 1;
    }
    false
}
