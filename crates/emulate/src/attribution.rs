//! Which object each modeled cache miss falls on.
//!
//! The library reports every tracked object (4 KiB and more, on pages of its own) and every
//! block of small-object memory as it is born and freed; the plugin hands each report here as
//! it is published, on the thread that published it, before the program's next access. A miss
//! is counted on its 4 KiB page; a page is owned by the object that covered it when its first
//! miss of the object's life came. An object's pages are closed when it is freed (their misses
//! go to its site then, and the page starts afresh for whatever comes next) and at each
//! interval's end (their misses go to the owners' sites, per interval): so each object gets
//! exactly its own misses, even when a page holds several objects one after another within an
//! interval. Pages that no object covers (stacks, static data, mapped files) count as
//! unattributed.
//!
//! Each owned page also remembers in how many intervals it had misses (1, 2, 3 or more) and,
//! for its first two, when: what a page-level tiering that looks once an interval would see
//! (`objtier report`'s page section: touches per page, reuse times).

use crate::trace::{Key, Record, Sink};
use objtier_wire::{Event, EventKind, PAGE_SIZE};
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

const PAGE_SHIFT: u32 = 12;
const NO_OWNER: u64 = u64::MAX;
/// Reuse gaps kept per site at most (twice as many are held before halving).
pub const REUSE_SAMPLES: usize = 4096;

#[derive(Clone, Copy, Debug)]
struct Object {
    end: u64,
    key: Key,
    block: bool,
}

/// One page's counts since it was last closed.
#[derive(Clone, Copy, Debug)]
struct Page {
    /// The start of the object that owns it, or [`NO_OWNER`].
    owner: u64,
    /// For an unowned page, the object generation it was looked up in: a page is looked up
    /// again once objects have appeared since.
    generation: u64,
    loads: u64,
    stores: u64,
    /// Intervals with misses in the owner's life (at most 3 counted), the last of them plus
    /// one, and when the first two began.
    touches: u8,
    last_interval: u32,
    first: u64,
    second: u64,
}

/// Page numbers are spread well enough by one multiplication (SipHash would cost more than
/// the rest of a miss).
#[derive(Default)]
struct PageHasher(u64);

impl Hasher for PageHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Pages = HashMap<u64, Page, BuildHasherDefault<PageHasher>>;

/// Touches per page, summed over a site's pages.
#[derive(Clone, Debug, Default, PartialEq)]
struct PageStats {
    once: u64,
    twice: u64,
    more: u64,
    /// Gaps of pages touched exactly twice: one of every `stride` of them.
    gaps: Vec<u64>,
    stride: u64,
    seen: u64,
}

impl PageStats {
    fn add(&mut self, page: &Page) {
        match page.touches {
            0 => {}
            1 => self.once += 1,
            2 => {
                self.twice += 1;
                self.stride = self.stride.max(1);
                if self.seen.is_multiple_of(self.stride) {
                    self.gaps.push(page.second - page.first);
                    if self.gaps.len() >= 2 * REUSE_SAMPLES {
                        // Keep every other one: the samples stay evenly spread.
                        let mut i = 0;
                        self.gaps.retain(|_| {
                            i += 1;
                            i % 2 == 1
                        });
                        self.stride *= 2;
                    }
                }
                self.seen += 1;
            }
            _ => self.more += 1,
        }
    }
}

/// The attribution of one process's misses, writing its trace to `S`.
pub struct Attribution<S: Sink> {
    sink: S,
    interval_ns: u64,
    /// The interval under way.
    interval: u32,
    objects: BTreeMap<u64, Object>,
    generation: u64,
    pages: Pages,
    unattributed: (u64, u64),
    stats: HashMap<Key, PageStats>,
    /// Pages of small-object blocks that have had misses: the pseudo-site's bytes.
    small_pages: u64,
}

impl<S: Sink> Attribution<S> {
    /// Intervals of `interval_ns` on the emulated clock, from 0.
    pub fn new(sink: S, interval_ns: u64) -> Self {
        Attribution {
            sink,
            interval_ns: interval_ns.max(1),
            interval: 0,
            objects: BTreeMap::new(),
            generation: 0,
            pages: Pages::default(),
            unattributed: (0, 0),
            stats: HashMap::new(),
            small_pages: 0,
        }
    }

    pub fn sink(&mut self) -> &mut S {
        &mut self.sink
    }

    /// Writes a record of the plugin's own (start, attach, exec).
    pub fn record(&mut self, record: Record) {
        self.sink.record(record);
    }

    /// Where the next interval ends.
    pub fn next_boundary(&self) -> u64 {
        (self.interval as u64 + 1).saturating_mul(self.interval_ns)
    }

    /// Ends every interval that ended by `now`.
    pub fn advance(&mut self, now: u64) {
        while now >= self.next_boundary() {
            let end = self.next_boundary();
            self.close_interval();
            self.sink.record(Record::IntervalEnd {
                index: self.interval,
                time: end,
            });
            self.interval += 1;
        }
    }

    /// A load (or store) at `addr` missed the modeled cache at `now`.
    #[inline]
    pub fn miss(&mut self, addr: u64, store: bool, now: u64) {
        let Attribution {
            pages,
            objects,
            generation,
            small_pages,
            interval,
            unattributed,
            ..
        } = self;
        let page = pages.entry(addr >> PAGE_SHIFT).or_insert(Page {
            owner: NO_OWNER,
            generation: u64::MAX,
            loads: 0,
            stores: 0,
            touches: 0,
            last_interval: 0,
            first: 0,
            second: 0,
        });
        if page.owner == NO_OWNER && page.generation != *generation {
            page.generation = *generation;
            if let Some((&start, o)) = objects.range(..=addr).next_back() {
                if addr < o.end {
                    // What the page had before the object covered it was no object's.
                    unattributed.0 += std::mem::take(&mut page.loads);
                    unattributed.1 += std::mem::take(&mut page.stores);
                    page.owner = start;
                    *small_pages += o.block as u64;
                }
            }
        }
        if store {
            page.stores += 1;
        } else {
            page.loads += 1;
        }
        if page.owner != NO_OWNER && page.last_interval != *interval + 1 {
            page.last_interval = *interval + 1;
            match page.touches {
                0 => page.first = now,
                1 => page.second = now,
                _ => {}
            }
            page.touches = (page.touches + 1).min(3);
        }
    }

    /// One of the library's events, as published; `now` is when the plugin took it.
    pub fn event(&mut self, event: Event, now: u64) {
        self.advance(now);
        match EventKind::from_raw(event.kind) {
            Some(EventKind::Alloc) => {
                let key = if event.site == 0 {
                    Key::Unknown
                } else {
                    Key::Site(event.site)
                };
                self.born(event.addr, event.len, key, false);
            }
            Some(EventKind::BlockMap) => self.born(event.addr, event.len, Key::SmallObjects, true),
            Some(EventKind::Free) | Some(EventKind::BlockUnmap) => {
                self.died(event.addr);
            }
            Some(EventKind::Moved) => {
                let key = self.died(event.site).unwrap_or(Key::Unknown);
                self.born(event.addr, event.len, key, false);
            }
            _ => {}
        }
        self.sink.record(Record::Event(event));
    }

    fn born(&mut self, start: u64, len: u64, key: Key, block: bool) {
        if len == 0 {
            return;
        }
        // An object announced again (a forked child's library re-announcing what it
        // inherited): the earlier one is over.
        if self.objects.contains_key(&start) {
            self.died(start);
        }
        self.objects.insert(
            start,
            Object {
                end: start.saturating_add(len),
                key,
                block,
            },
        );
        self.generation += 1;
    }

    /// Closes the object at `start`: its pages' misses go to its site. Returns its key.
    fn died(&mut self, start: u64) -> Option<Key> {
        let object = self.objects.remove(&start)?;
        let (first, last) = (start >> PAGE_SHIFT, (object.end - 1) >> PAGE_SHIFT);
        let mut closed = Vec::new();
        if last - first < self.pages.len() as u64 {
            for page in first..=last {
                if let Some(p) = self.pages.remove(&page) {
                    closed.push(p);
                }
            }
        } else {
            self.pages.retain(|&page, p| {
                let mine = (first..=last).contains(&page);
                if mine {
                    closed.push(*p);
                }
                !mine
            });
        }
        let (mut loads, mut stores) = (0, 0);
        let stats = self.stats.entry(object.key).or_default();
        for p in &closed {
            if p.owner == start {
                loads += p.loads;
                stores += p.stores;
                stats.add(p);
                self.small_pages -= object.block as u64;
            } else {
                // Misses on the page before the object covered it.
                self.unattributed.0 += p.loads;
                self.unattributed.1 += p.stores;
            }
        }
        if loads + stores > 0 {
            self.sink.record(Record::Misses {
                key: object.key,
                loads,
                stores,
            });
        }
        Some(object.key)
    }

    /// Every page's misses of the interval under way go to its owner's site (or to the
    /// unattributed), one record per site.
    fn close_interval(&mut self) {
        let mut by_key: BTreeMap<Key, (u64, u64)> = BTreeMap::new();
        for p in self.pages.values_mut() {
            if p.loads + p.stores == 0 {
                continue;
            }
            match self.objects.get(&p.owner) {
                Some(o) if p.owner != NO_OWNER => {
                    let e = by_key.entry(o.key).or_default();
                    e.0 += p.loads;
                    e.1 += p.stores;
                }
                _ => {
                    self.unattributed.0 += p.loads;
                    self.unattributed.1 += p.stores;
                }
            }
            p.loads = 0;
            p.stores = 0;
        }
        for (key, (loads, stores)) in by_key {
            self.sink.record(Record::Misses { key, loads, stores });
        }
        let (loads, stores) = std::mem::take(&mut self.unattributed);
        if loads + stores > 0 {
            self.sink.record(Record::Unattributed { loads, stores });
        }
        self.sink.record(Record::SmallObjectBytes {
            bytes: self.small_pages * PAGE_SIZE as u64,
        });
    }

    /// This process was forked from the one whose state this is: what was counted belongs to
    /// the parent's trace. The objects it inherited stay known until its library re-announces
    /// them.
    pub fn forked(&mut self, sink: S) -> S {
        for p in self.pages.values_mut() {
            p.loads = 0;
            p.stores = 0;
            p.touches = 0;
            p.last_interval = 0;
        }
        self.unattributed = (0, 0);
        self.stats.clear();
        std::mem::replace(&mut self.sink, sink)
    }

    /// The library (re-)attached: what it announces next is every live object, so the objects
    /// known so far (a forked child's inheritance) are closed.
    pub fn attached(&mut self) {
        let starts: Vec<u64> = self.objects.keys().copied().collect();
        for start in starts {
            self.died(start);
        }
    }

    /// The process exits at `now`: the interval under way is closed (without its end, which
    /// the profile takes from the exit), then each site's page figures.
    pub fn exit(&mut self, now: u64) {
        self.advance(now);
        self.close_interval();
        let objects = std::mem::take(&mut self.objects);
        for p in self.pages.values() {
            if let Some(o) = objects.get(&p.owner) {
                self.stats.entry(o.key).or_default().add(p);
            }
        }
        let mut keys: Vec<&Key> = self.stats.keys().collect();
        keys.sort();
        for key in keys {
            let s = &self.stats[key];
            if s.once + s.twice + s.more == 0 {
                continue;
            }
            self.sink.record(Record::Pages {
                key: *key,
                once: s.once,
                twice: s.twice,
                more: s.more,
            });
            for &gap in &s.gaps {
                self.sink.record(Record::Reuse { key: *key, gap });
            }
        }
        self.sink.record(Record::Exit { time: now });
        self.objects = objects;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SITE: Key = Key::Site(7);

    fn alloc(addr: u64, len: u64, site: u64) -> Event {
        Event {
            kind: EventKind::Alloc as u32,
            flags: 0,
            addr,
            len,
            time_ns: 0,
            site,
        }
    }

    fn free(addr: u64) -> Event {
        Event {
            kind: EventKind::Free as u32,
            addr,
            ..Event::default()
        }
    }

    fn misses(records: &[Record]) -> Vec<(Key, u64, u64)> {
        records
            .iter()
            .filter_map(|r| match *r {
                Record::Misses { key, loads, stores } => Some((key, loads, stores)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn misses_go_to_the_object_that_covered_the_page_at_the_time() {
        let mut a = Attribution::new(Vec::new(), 1000);
        a.miss(0x10_0000, false, 1); // before any object: unattributed
        a.event(alloc(0x10_0000, 0x2000, 7), 2);
        a.miss(0x10_0040, false, 3);
        a.miss(0x10_1000, true, 4);
        a.miss(0x90_0000, true, 5); // the stack, say
        a.event(free(0x10_0000), 6);
        // The same pages, another site, within the same interval.
        a.event(alloc(0x10_0000, 0x1000, 8), 7);
        a.miss(0x10_0000, true, 8);
        a.miss(0x10_0000, true, 9);
        a.advance(1000);
        let r = a.sink().clone();
        assert_eq!(
            misses(&r),
            vec![(SITE, 1, 1), (Key::Site(8), 0, 2)],
            "each object its own, the freed one's at its free"
        );
        assert!(r.contains(&Record::Unattributed {
            loads: 1,
            stores: 1
        }));
        assert!(r.contains(&Record::IntervalEnd {
            index: 0,
            time: 1000
        }));
    }

    #[test]
    fn intervals_close_each_sites_misses() {
        let mut a = Attribution::new(Vec::new(), 100);
        a.event(alloc(0x4000, 0x1000, 7), 0);
        a.miss(0x4000, false, 10);
        a.advance(250); // two intervals end
        a.miss(0x4008, true, 260);
        a.exit(270);
        let r = a.sink().clone();
        let shape: Vec<String> = r
            .iter()
            .filter(|r| !matches!(r, Record::Event(_) | Record::SmallObjectBytes { .. }))
            .map(|r| format!("{r:?}"))
            .collect();
        assert_eq!(
            shape,
            [
                "Misses { key: Site(7), loads: 1, stores: 0 }",
                "IntervalEnd { index: 0, time: 100 }",
                "IntervalEnd { index: 1, time: 200 }",
                "Misses { key: Site(7), loads: 0, stores: 1 }",
                "Pages { key: Site(7), once: 0, twice: 1, more: 0 }",
                "Reuse { key: Site(7), gap: 250 }",
                "Exit { time: 270 }",
            ]
        );
    }

    #[test]
    fn pages_count_the_intervals_they_missed_in_over_one_life() {
        let mut a = Attribution::new(Vec::new(), 10);
        a.event(alloc(0, 3 * 4096, 7), 0);
        for t in 0..40 {
            a.advance(t);
            a.miss(0, false, t); // every interval: 3+
            if t == 5 {
                a.miss(4096, false, t); // once
            }
        }
        a.event(free(0), 41);
        a.event(alloc(0, 4096, 7), 42); // a new life: counted afresh
        a.miss(0, true, 42);
        a.exit(43);
        let pages: Vec<Record> = a
            .sink()
            .iter()
            .filter(|r| matches!(r, Record::Pages { .. }))
            .copied()
            .collect();
        assert_eq!(
            pages,
            [Record::Pages {
                key: SITE,
                once: 2,
                twice: 0,
                more: 1
            }]
        );
    }

    #[test]
    fn blocks_are_the_small_objects_and_moves_keep_the_site() {
        let mut a = Attribution::new(Vec::new(), 1000);
        a.event(
            Event {
                kind: EventKind::BlockMap as u32,
                addr: 0x100_0000,
                len: 0x10_0000,
                ..Event::default()
            },
            0,
        );
        a.miss(0x100_0000, false, 1);
        a.miss(0x100_2000, false, 1);
        a.event(alloc(0x4000, 0x1000, 7), 2);
        a.miss(0x4000, false, 3);
        a.event(
            Event {
                kind: EventKind::Moved as u32,
                addr: 0x8000,
                len: 0x2000,
                site: 0x4000,
                ..Event::default()
            },
            4,
        );
        a.miss(0x9000, true, 5);
        a.advance(1000);
        let r = a.sink().clone();
        assert_eq!(
            misses(&r),
            vec![(SITE, 1, 0), (SITE, 0, 1), (Key::SmallObjects, 2, 0)]
        );
        assert!(r.contains(&Record::SmallObjectBytes { bytes: 8192 }));
    }

    #[test]
    fn a_fork_starts_afresh_and_an_attach_closes_the_inheritance() {
        let mut a = Attribution::new(Vec::new(), 1000);
        a.event(alloc(0x4000, 0x1000, 7), 0);
        a.miss(0x4000, false, 1);
        let parent = a.forked(Vec::new());
        assert_eq!(parent.len(), 1, "the parent's trace keeps what came before");
        a.miss(0x4000, false, 2); // the child's, on its inherited object
        a.attached();
        a.event(alloc(0x4000, 0x1000, 7), 3);
        a.miss(0x4000, true, 4);
        a.advance(1000);
        assert_eq!(misses(a.sink()), vec![(SITE, 1, 0), (SITE, 0, 1)]);
    }

    #[test]
    fn reuse_samples_stay_bounded_and_spread() {
        let mut s = PageStats::default();
        let page = |gap| Page {
            owner: 0,
            generation: 0,
            loads: 0,
            stores: 0,
            touches: 2,
            last_interval: 0,
            first: 0,
            second: gap,
        };
        for gap in 0..(10 * REUSE_SAMPLES as u64) {
            s.add(&page(gap));
        }
        assert_eq!(s.twice, 10 * REUSE_SAMPLES as u64);
        assert!(s.gaps.len() < 2 * REUSE_SAMPLES && s.gaps.len() >= REUSE_SAMPLES / 2);
        assert!(
            *s.gaps.last().unwrap() > 8 * REUSE_SAMPLES as u64,
            "spread to the end"
        );
    }
}
