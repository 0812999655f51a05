//! One attached process: its ring, its objects, and the records the policy sees.
//!
//! Events arrive from shared memory the process controls, so each is validated; a bad one is
//! counted and skipped. Allocations are buffered until the end of the interval (section 3.2.1):
//! an object freed before then never becomes a record. Objects larger than the split size become
//! several records (section 3.2.2), so the hot part of a huge array can move without the rest.
//!
//! **Lost events.** A full ring drops events (the library never blocks). When the drop counter
//! moves, the daemon asks the library for a resync through the control area; the library
//! re-announces every live object between `ResyncBegin` and `ResyncEnd`, under its allocator
//! lock, so the bracket holds exactly the live set: objects missing from it were freed (their
//! frees were lost) and are forgotten; objects already known keep their access history. If
//! events were dropped during the resync itself, another is requested.
//!
//! **Sites** arrive as raw return addresses, once per site; `objtier_sys::maps` turns them into
//! `module+offset` for people and for matching across runs: placements remembered from an
//! earlier run of the same program (`crate::sitestore`, warm start) are applied by call path.

use crate::pending::PendingObjects;
pub use crate::record::{Object, Record, ResidentPages};
pub use crate::records::Records;
use crate::sitestore::{Learnt, Program, Seen, StoredSite};
use objtier_policy::lifetimes::{self, Lifetimes};
use objtier_policy::split_ranges;
pub use objtier_sys::ring::RingMapping;
use objtier_wire::{advice, event_flags, Event, EventKind, PAGE_SIZE};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;

/// Largest object the daemon believes (the whole 47-bit user address space).
const MAX_OBJECT_BYTES: u64 = 1 << 47;
/// Events [`Process::drain`] takes from the ring at a time (2.5 KiB of them on its stack).
const DRAIN_BATCH: usize = 64;
/// Most sites (and advised ranges) kept per process: a bound on what a process can make the
/// daemon store.
const MAX_SITES: usize = 1 << 16;
const MAX_ADVICE_RANGES: usize = 1 << 16;
/// Most frames a site description may have (the library sends at most 64).
const MAX_SITE_FRAMES: u64 = 64;
/// Accepted priorities (as `objtier_set_priority` checks).
const PRIORITY_RANGE: std::ops::RangeInclusive<i64> = -1000..=1000;
/// Plans a proactive placement must survive, after the one that made it and with none of its
/// site's records seen accessed in the two intervals before each, before the site store
/// remembers it for the program's next runs. A placement is a guess about the objects the site
/// will allocate; the plans after it see those objects (born in the placed tier, made records,
/// sampled). The live policy also places a site whose records are accessed but lost the fast
/// tier's budget; from a next run's first allocation, with the fast tier still empty, that is
/// the wrong start. And a placement made in a program's last seconds was never checked at all,
/// yet a next run applies it from its first allocation. In the evaluation, igraph's first run
/// (7 s) placed 14 sites in the slow tier in its last 3 s, and its second runs, starting them
/// all there, had 19.0-32.7 % of their accesses in the fast tier against 25-50 % (mean 40 %)
/// without a warm start (docs/evaluation.md, "Warm start, measured").
pub const REMEMBER_AFTER_PLANS: u32 = 2;

/// What the plans since a proactive or warm-start placement have said of it, for the site store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evidence {
    /// This many plans kept it with its site's records unaccessed ([`REMEMBER_AFTER_PLANS`]
    /// confirm it; a warm start's placement starts confirmed).
    Quiet(u32),
    /// A plan saw its site's records accessed while it held: the store forgets the site,
    /// whatever an earlier save or run said of it.
    Disproved,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ProcessStats {
    pub events: u64,
    /// Bytes of tracked objects allocated since the process attached (snapshots not counted).
    pub allocated_bytes: u64,
    pub invalid_events: u64,
    pub ephemeral_objects: u64,
    pub frees_of_unknown: u64,
    /// Resyncs completed (the live set re-announced after dropped events).
    pub resyncs: u64,
    /// Objects forgotten by a resync: their frees had been dropped.
    pub resync_forgotten_objects: u64,
    /// Objects learnt from a resync: their allocations had been dropped.
    pub resync_learnt_objects: u64,
    pub advice_events: u64,
    /// Objects `realloc` moved or resized, which kept their history.
    pub moved_objects: u64,
    /// Allocations the library took back from the ring because the object was freed before
    /// the daemon read them (neither event reached the daemon; they count as ephemeral).
    pub cancelled_allocations: u64,
    /// Allocations of short-lived sites the library reported as samples (one in
    /// `SHORT_LIVED_SAMPLE`; the others it allocated unreported).
    pub sampled_allocations: u64,
}

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
/// early judgement (`Process::judge_early`): a test on the daemon's busiest path costs one
/// mask, and a site that makes temporaries fast is looked at every few milliseconds.
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

/// A site as the library described it: return addresses, innermost first.
#[derive(Clone, Debug, Default)]
pub struct SiteFrames {
    pub ips: Vec<u64>,
    /// Frames announced; the description is complete when `ips` has them all.
    pub count: usize,
    /// The frames as `module+offset` (`?+0xADDR` where no file maps the address), once named.
    pub names: Option<Vec<String>>,
}

impl SiteFrames {
    pub fn complete(&self) -> bool {
        self.count > 0 && self.ips.len() == self.count
    }
}

/// Who placed a site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlacedBy {
    /// `objtier place`.
    Hand,
    /// The proactive policy.
    Proactive,
    /// Warm start: remembered from an earlier run of the program (the proactive policy may
    /// override it, like its own placements).
    WarmStart,
    /// The placement the process was started with (`objtier run --placement`): the proactive
    /// policy leaves it alone.
    Guided,
}

impl PlacedBy {
    /// As `objtier status` shows it.
    pub fn describe(self) -> &'static str {
        match self {
            PlacedBy::Hand => "objtier place",
            PlacedBy::Proactive => "proactive",
            PlacedBy::WarmStart => "warm start",
            PlacedBy::Guided => "placement file",
        }
    }
}

/// A process's warm start (`crate::sitestore`): what was remembered for its program, and
/// whether what it learnt since was saved.
#[derive(Debug)]
pub struct WarmStart {
    pub program: Program,
    /// The store file of the program (for status).
    pub file: std::path::PathBuf,
    /// Remembered sites by call path.
    pub remembered: HashMap<Vec<String>, Remembered>,
    /// Sites placed or marked short-lived at attach, from remembered call paths and the memory
    /// map, before the library described them: site id -> call path.
    pub predicted: HashMap<u64, Vec<String>>,
    /// Something the store records (a placement, a short-lived mark) changed since the last
    /// save.
    pub unsaved: bool,
}

/// What the store remembers of one call path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Remembered {
    /// Its placement: tier, and who learnt it.
    pub placed: Option<(u32, Learnt)>,
    pub short_lived: bool,
}

/// What a warm start did to a site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Warmed {
    /// Placed in this tier.
    Placed(u32),
    /// Marked short-lived.
    ShortLived,
}

impl WarmStart {
    /// Remembered `sites` of `program`; placements in a tier this machine does not have are
    /// dropped.
    pub fn new(
        program: Program,
        file: std::path::PathBuf,
        sites: Vec<StoredSite>,
        tiers: usize,
    ) -> WarmStart {
        WarmStart {
            program,
            file,
            remembered: sites
                .into_iter()
                .filter_map(|s| {
                    let remembered = Remembered {
                        placed: s.placed().filter(|&(tier, _)| (tier as usize) < tiers),
                        short_lived: s.short_lived,
                    };
                    (remembered != Remembered::default()).then_some((s.frames, remembered))
                })
                .collect(),
            predicted: HashMap::new(),
            unsaved: false,
        }
    }
}

/// Progress of a resync (see the module doc).
#[derive(Debug, Default)]
pub enum Resync {
    #[default]
    Idle,
    /// Asked for `request` when the drop counter read `dropped_at_request`.
    Requested {
        request: u32,
        dropped_at_request: u64,
    },
    /// Inside one step (between its ResyncBegin and ResyncEnd), covering addresses from `lo`.
    Receiving {
        request: u32,
        dropped_at_request: u64,
        lo: u64,
        dropped_at_begin: u64,
        seen: HashSet<u64>,
    },
}

pub struct Process {
    /// Unique per connection (pids can be reused; an exec re-attaches under the same pid).
    pub id: u64,
    pub pid: u32,
    pub uid: u32,
    pub priority: i32,
    pub fast_capacity_bytes: Option<u64>,
    pub socket: UnixStream,
    pub ring: RingMapping,
    pub attached_ns: u64,
    /// Whether an enforcement has planned this process's records with some of their accesses
    /// sampled: until then, a young process keeps the daemon at its startup interval.
    pub planned: bool,
    /// Whether any sampled access has been attributed to its records.
    pub sampled: bool,
    pub objects: BTreeMap<u64, Object>,
    pub records: Records,
    /// Bumped whenever a record is added or removed, so that what is derived from the set of
    /// records (the access source's ranges) is recomputed only when it changed.
    pub records_generation: u64,
    /// The access source's ranges for this process, and the generation they were derived from.
    pub source_ranges: (u64, Vec<(u64, u64)>),
    /// Allocations of this interval not yet promoted to records: one insert and one remove for
    /// every tracked object a program allocates and frees (`pending.rs`).
    pub pending: PendingObjects,
    pub stats: ProcessStats,
    /// Resident bytes per tier at the last placement query.
    pub resident_bytes_by_tier: Vec<u64>,
    pub split_bytes: u64,
    /// Sites described by the library.
    pub sites: HashMap<u64, SiteFrames>,
    /// Advice from `objtier_advise`: start -> (len, advice bits).
    pub advice: BTreeMap<u64, (u64, u32)>,
    /// Starting tiers set for sites (mirrors the control area's table, for status), and who
    /// set each: the proactive policy never overrides a placement made with `objtier place`.
    pub placements: BTreeMap<u64, (u32, PlacedBy)>,
    /// Per site: the proactive policy's latest wish and for how many intervals in a row.
    pub proactive_streaks: objtier_policy::PlacementStreaks,
    /// Per site placed by the proactive policy or the warm start: what the plans since have
    /// said of the placement.
    pub placement_evidence: HashMap<u64, Evidence>,
    /// Records (by start) of watched sites (`placement_evidence`) the daemon moved lately: the
    /// numbers (`Totals::intervals`) of the last two intervals that moved each, the latest
    /// first. Pages can look accessed in the interval they were moved in, so those intervals'
    /// accesses are no evidence (see `objtier_policy::accessed_by_the_program`).
    pub moved_in: HashMap<u64, [u64; 2]>,
    pub resync: Resync,
    /// Drop counter value the daemon has accounted for.
    pub dropped_seen: u64,
    /// Bytes allocated since the daemon last took them (for the allocation trigger).
    pub allocated_unclaimed: u64,
    /// Small-object blocks (start -> length): also in `objects`, but a resync, which
    /// re-announces only objects, must not forget them.
    pub blocks: BTreeMap<u64, u64>,
    /// A pidfd for the process (None on kernels before 5.3): it stays bound to this process if
    /// the pid is reused, and tells when the process exits even while a child that inherited
    /// its socket keeps the connection open.
    pub pidfd: Option<std::os::fd::OwnedFd>,
    /// Warm start, when the daemon keeps a site store and knows the program.
    pub warm: Option<WarmStart>,
    /// The memory map as last read for naming sites (at attach, with a site store, and when
    /// sites were named): sites still unnamed when the process exits, whose map is then gone,
    /// are named with it, so that a run shorter than an interval is remembered too.
    pub last_maps: Option<objtier_sys::maps::Maps>,
    /// The age under which an object's death is young (`objtier_policy::lifetimes::young_ns`);
    /// None when the daemon does not look for short-lived sites (`--short-lived-sites off`).
    pub young_ns: Option<u64>,
    /// The daemon's interval (for the lifetimes' verdict over a whole run).
    pub interval_ns: u64,
    /// Per site, how its objects lived (only with `young_ns`).
    pub site_lives: SiteMap<SiteLives>,
    /// Records made of objects still young (with `young_ns`): the next commits look at those
    /// still live again, and count them old once they are.
    pub young_records: Vec<(u64, Object)>,
    /// Ask for a resync at the next drain, drops or not: a site is no longer short-lived, and
    /// objects of it the library allocated unreported may still live.
    pub resync_wanted: bool,
    /// Sites to judge early at the next `judge_early` (pushed as their young deaths mount;
    /// may repeat).
    pub early_candidates: Vec<u64>,
    /// The profile session it belongs to (`objtier profile`; 0: none), and its recording.
    pub profile_token: u64,
    pub recorder: Option<crate::recorder::Recorder>,
    /// Never move its pages (`objtier run --no-migrate`, `objtier profile --observe-only`):
    /// its records are planned where they are, and only placements at allocation apply.
    pub no_migrate: bool,
    /// The placement it was started with (`objtier run --placement`), as applied.
    pub guided: Option<crate::guided::Guided>,
    /// The phase the program last said it entered (`objtier_phase`), not yet acted on.
    pub phase_mark: Option<u32>,
}

/// The advice bits of every advised range (start -> (len, bits)) that overlaps [start, start + len).
pub fn advice_for(advice: &BTreeMap<u64, (u64, u32)>, start: u64, len: u64) -> u32 {
    if advice.is_empty() {
        return 0;
    }
    let end = start + len;
    advice
        .range(..end)
        .rev()
        // Ranges never overlap each other, so ends ascend with starts: stop at the first that
        // ends before `start`.
        .take_while(|(&s, &(l, _))| s + l > start)
        .fold(0, |acc, (_, &(_, hints))| acc | hints)
}

impl Process {
    /// A process as the daemon has it after a hello, without a real peer: a fresh ring of
    /// `ring_capacity` events (a power of two) in a sealed memfd, and one end of a socket pair
    /// (the other end is returned; dropping it reads as the process hanging up). For tests and
    /// benches, which play the library by pushing events into `ring.header()` and draining.
    pub fn synthetic(
        id: u64,
        pid: u32,
        ring_capacity: u32,
        split_bytes: u64,
    ) -> anyhow::Result<(Process, UnixStream)> {
        let ring = RingMapping::create(ring_capacity, pid)?;
        let (ours, theirs) = UnixStream::pair()?;
        let process = Process::new(id, pid, 0, ours, ring, split_bytes);
        Ok((process, theirs))
    }

    /// A process just attached on `socket` with `ring`: no objects, no sites, no placements
    /// yet; priority 0, no fast-tier cap, no pidfd, until the caller says otherwise.
    pub fn new(
        id: u64,
        pid: u32,
        uid: u32,
        socket: UnixStream,
        ring: RingMapping,
        split_bytes: u64,
    ) -> Process {
        Process {
            id,
            pid,
            uid,
            priority: 0,
            fast_capacity_bytes: None,
            socket,
            ring,
            attached_ns: 0,
            planned: false,
            sampled: false,
            objects: BTreeMap::new(),
            records: Records::new(),
            records_generation: 0,
            source_ranges: (u64::MAX, Vec::new()),
            pending: PendingObjects::new(),
            stats: ProcessStats::default(),
            resident_bytes_by_tier: vec![],
            split_bytes,
            sites: HashMap::new(),
            advice: BTreeMap::new(),
            placements: BTreeMap::new(),
            proactive_streaks: Default::default(),
            placement_evidence: HashMap::new(),
            moved_in: HashMap::new(),
            resync: Resync::Idle,
            dropped_seen: 0,
            allocated_unclaimed: 0,
            blocks: BTreeMap::new(),
            pidfd: None,
            warm: None,
            last_maps: None,
            young_ns: None,
            interval_ns: 0,
            site_lives: SiteMap::default(),
            young_records: Vec::new(),
            resync_wanted: false,
            early_candidates: Vec::new(),
            profile_token: 0,
            recorder: None,
            no_migrate: false,
            guided: None,
            phase_mark: None,
        }
    }

    /// Whether the process is known to have exited (by its pidfd). Checked before every page
    /// query and move, so a reused pid never has another program's pages moved.
    pub fn exited(&self) -> bool {
        self.pidfd
            .as_ref()
            .is_some_and(objtier_sys::socket::pidfd_exited)
    }

    /// Consumes everything in the ring. Returns the number of events read.
    ///
    /// Events are taken a batch at a time, and the `pending` slots of the whole batch are asked
    /// of the memory before any event is applied: an allocation-heavy program frees its objects
    /// long after allocating them, when their entries have left the caches, and waiting for one
    /// miss after another was most of the daemon's time per event (`pending.rs`).
    pub fn drain(&mut self) -> usize {
        // Read before the ring: a resync the library finished before this read has all its
        // steps in the ring, and this drain reads them before it counts the resync done.
        let served = self.ring.control().resync_served.load(Ordering::Acquire);
        let mut n = 0;
        let mut batch = [Event::default(); DRAIN_BATCH];
        // Bound the work per call so one flooding process cannot starve the others.
        while n < 1 << 20 {
            let mut len = 0;
            while len < DRAIN_BATCH {
                // An allocation taken back still counts as allocated, for the allocation
                // trigger (its length validated as an `Alloc`'s would be).
                let (stats, unclaimed) = (&mut self.stats, &mut self.allocated_unclaimed);
                let (lives, candidates, young_ns) = (
                    &mut self.site_lives,
                    &mut self.early_candidates,
                    self.young_ns,
                );
                let recorder = &mut self.recorder;
                let taken_back = |event: &Event| {
                    stats.cancelled_allocations += 1;
                    let len = event.len.min(MAX_OBJECT_BYTES);
                    stats.allocated_bytes = stats.allocated_bytes.saturating_add(len);
                    *unclaimed = unclaimed.saturating_add(len);
                    // (A profiled process takes nothing back; one attached before the daemon
                    // set the flag may have: it lived less than the daemon's reading took.)
                    if let Some(r) = recorder.as_mut() {
                        let key = crate::recorder::SiteKey::of_object(event.site);
                        r.allocated(key, len);
                        r.freed(key, len, event.time_ns, event.time_ns);
                    }
                    // Freed before the daemon could read it: it died young.
                    if let Some(young_ns) = young_ns {
                        let t = event.time_ns;
                        count_life(lives, candidates, young_ns, event.site, t, t, true);
                    }
                };
                match self.ring.pop(taken_back) {
                    Some(event) => {
                        batch[len] = event;
                        len += 1;
                    }
                    None => break,
                }
            }
            if len == 0 {
                break;
            }
            n += len;
            for event in &batch[..len] {
                // A move looks up the object it moved from.
                let start = if event.kind == EventKind::Moved as u32 {
                    event.site
                } else {
                    event.addr
                };
                self.pending.prefetch(start);
            }
            for event in &batch[..len] {
                self.apply(event);
            }
            if len < DRAIN_BATCH {
                break;
            }
        }
        self.request_resync_if_dropped(served);
        n
    }

    /// Applies one event from the ring.
    fn apply(&mut self, event: &Event) {
        self.stats.events += 1;
        let kind = EventKind::from_raw(event.kind);
        // No object starts at address 0 (mmap never places one there), and `pending` takes 0
        // for an empty slot.
        let valid_range = event.addr != 0
            && event.addr.is_multiple_of(PAGE_SIZE as u64)
            && event.addr.checked_add(event.len).is_some()
            && event.len <= MAX_OBJECT_BYTES;
        match kind {
            Some(EventKind::Alloc)
                if valid_range && event.len > 0 && event.len.is_multiple_of(PAGE_SIZE as u64) =>
            {
                let object = Object {
                    len: event.len,
                    site: event.site,
                    created_ns: event.time_ns,
                };
                if event.flags & event_flags::SAMPLED != 0 {
                    self.stats.sampled_allocations += 1;
                }
                if event.flags & event_flags::SNAPSHOT != 0 {
                    self.snapshot_object(event.addr, object);
                } else {
                    if let Some(r) = &mut self.recorder {
                        r.allocated(crate::recorder::SiteKey::of_object(object.site), object.len);
                    }
                    self.allocated(event.addr, object);
                }
            }
            Some(EventKind::Free) if valid_range => {
                let object = if let Some(object) = self.pending.remove(&event.addr) {
                    self.stats.ephemeral_objects += 1;
                    Some(object)
                } else {
                    let object = self.take_object(event.addr);
                    if object.is_none() {
                        self.stats.frees_of_unknown += 1;
                    }
                    object
                };
                if let (Some(object), Some(r)) = (object, &mut self.recorder) {
                    let key = crate::recorder::SiteKey::of_object(object.site);
                    r.freed(key, object.len, object.created_ns, event.time_ns);
                }
                if let (Some(object), Some(young_ns)) = (object, self.young_ns) {
                    count_life(
                        &mut self.site_lives,
                        &mut self.early_candidates,
                        young_ns,
                        object.site,
                        object.created_ns,
                        event.time_ns,
                        true,
                    );
                }
            }
            // `site` is the start of the object moved from.
            Some(EventKind::Moved)
                if valid_range
                    && event.len > 0
                    && event.len.is_multiple_of(PAGE_SIZE as u64)
                    && event.site.is_multiple_of(PAGE_SIZE as u64) =>
            {
                self.moved(event.site, event.addr, event.len, event.time_ns);
            }
            // Small-object memory (the allocator's arenas): tracked and tiered like an
            // object of no site, from the start (arenas live as long as the process).
            Some(EventKind::BlockMap)
                if valid_range && event.len > 0 && event.len.is_multiple_of(PAGE_SIZE as u64) =>
            {
                self.remove_object(event.addr);
                if let Some(r) = &mut self.recorder {
                    if !self.blocks.contains_key(&event.addr) {
                        r.block_mapped();
                    }
                }
                self.blocks.insert(event.addr, event.len);
                self.insert_object(
                    event.addr,
                    Object {
                        len: event.len,
                        site: 0,
                        created_ns: event.time_ns,
                    },
                );
            }
            Some(EventKind::BlockUnmap) if valid_range => {
                if self.blocks.remove(&event.addr).is_some() {
                    self.remove_object(event.addr);
                }
            }
            Some(EventKind::Phase) if event.addr <= u32::MAX as u64 => {
                self.phase_mark = Some(event.addr as u32);
            }
            Some(EventKind::SiteFrame) => self.site_frame(event.site, event.addr, event.len),
            Some(EventKind::Priority) if PRIORITY_RANGE.contains(&(event.addr as i64)) => {
                self.priority = event.addr as i64 as i32;
            }
            Some(EventKind::Advise)
                if valid_range && event.len > 0 && event.flags & !advice::ALL == 0 =>
            {
                self.advise(event.addr, event.len, event.flags);
            }
            Some(EventKind::ResyncBegin) => self.resync_begin(event.addr, event.len),
            Some(EventKind::ResyncEnd) => self.resync_end(event.addr, event.len),
            _ => self.stats.invalid_events += 1,
        }
    }

    /// An object re-announced at attach or in a resync. A known object (same start and length)
    /// keeps its records and their access history.
    fn snapshot_object(&mut self, start: u64, object: Object) {
        let known = self
            .objects
            .get(&start)
            .is_some_and(|o| o.len == object.len)
            || self
                .pending
                .get(&start)
                .is_some_and(|o| o.len == object.len);
        if let Resync::Receiving { seen, .. } = &mut self.resync {
            seen.insert(start);
            if !known {
                self.stats.resync_learnt_objects += 1;
            }
        }
        if known {
            return;
        }
        if let Some(r) = &mut self.recorder {
            r.allocated(crate::recorder::SiteKey::of_object(object.site), object.len);
        }
        self.pending.remove(&start);
        self.remove_object(start);
        self.insert_object(start, object);
    }

    /// A new object of this interval at `start`. An address can only hold one object: a new one
    /// replaces the old.
    fn allocated(&mut self, start: u64, object: Object) {
        self.remove_object(start);
        self.stats.allocated_bytes += object.len;
        self.allocated_unclaimed += object.len;
        self.pending.insert(start, object);
    }

    /// The object at `from` now occupies `[start, start + len)` (`realloc` moved or resized it).
    /// It keeps its site and age, and its records' history goes with the bytes: each new record
    /// takes the accesses of the old records over the same offsets (the data a move keeps), so
    /// a grown array is ranked as before, and a new tail starts with none. An object not yet a
    /// record stays one of this interval's allocations. The advice on it moves with it. A move
    /// from an unknown start (its allocation was dropped) is an allocation.
    fn moved(&mut self, from: u64, start: u64, len: u64, time_ns: u64) {
        let pending = self.pending.remove(&from);
        let known = pending.or_else(|| {
            let object = self.objects.get(&from).copied();
            object.filter(|_| !self.blocks.contains_key(&from))
        });
        let Some(old) = known else {
            let created_ns = time_ns;
            if let Some(r) = &mut self.recorder {
                r.allocated(crate::recorder::SiteKey::Unknown, len);
            }
            self.allocated(
                start,
                Object {
                    len,
                    site: 0,
                    created_ns,
                },
            );
            return;
        };
        // Only the growth is new memory when it grew in place.
        let grown = if from == start {
            len.saturating_sub(old.len)
        } else {
            len
        };
        self.stats.moved_objects += 1;
        self.stats.allocated_bytes += grown;
        self.allocated_unclaimed += grown;
        if let Some(r) = &mut self.recorder {
            r.resized(crate::recorder::SiteKey::of_object(old.site), old.len, len);
        }
        if pending.is_some() {
            self.remove_object(start);
            self.pending.insert(start, Object { len, ..old });
            return;
        }
        let history: Vec<(u64, Record)> = self
            .records
            .range(from..from + old.len)
            .map(|(s, r)| (s - from, r.clone()))
            .collect();
        let advice: Vec<(u64, u64, u32)> = self
            .advice
            .range(from..from + old.len)
            .filter(|(&s, &(l, _))| s + l <= from + old.len)
            .map(|(&s, &(l, hints))| (s - from, l, hints))
            .collect();
        self.remove_object(from);
        self.remove_object(start);
        self.insert_object(start, Object { len, ..old });
        // Still young, so not yet counted for its site: looked at again by the next commits at
        // its new start and length (the entry under the old ones no longer matches).
        if self
            .young_ns
            .is_some_and(|young_ns| time_ns.saturating_sub(old.created_ns) < young_ns)
        {
            self.young_records.push((start, Object { len, ..old }));
        }
        for (record_start, record) in self.records.range_mut(start..start + len) {
            let (lo, hi) = (record_start - start, record_start - start + record.len);
            for (offset, old) in &history {
                let overlap = (offset + old.len).min(hi).saturating_sub((*offset).max(lo));
                if overlap == 0 {
                    continue;
                }
                let share = overlap as f32 / old.len as f32;
                record.ema_accesses += old.ema_accesses * share;
                record.interval_accesses += old.interval_accesses * share;
                record.recent_accesses += old.recent_accesses * share;
                record.previous_accesses += old.previous_accesses * share;
                record.last_access_ns = record.last_access_ns.max(old.last_access_ns);
            }
        }
        for (offset, advised_len, hints) in advice {
            if offset + advised_len <= len {
                self.set_advice(start + offset, advised_len, hints);
            }
        }
    }

    fn site_frame(&mut self, site: u64, ip: u64, index_and_count: u64) {
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

    /// Records advice for `[start, start + len)`; advice 0 clears what overlaps the range.
    fn advise(&mut self, start: u64, len: u64, hints: u32) {
        self.stats.advice_events += 1;
        self.set_advice(start, len, hints);
    }

    fn set_advice(&mut self, start: u64, len: u64, hints: u32) {
        let end = start + len;
        let overlapping: Vec<u64> = self
            .advice
            .range(..end)
            .filter(|(&s, &(l, _))| s + l > start)
            .map(|(&s, _)| s)
            .collect();
        for s in overlapping {
            self.advice.remove(&s);
        }
        if hints != 0 && self.advice.len() < MAX_ADVICE_RANGES {
            self.advice.insert(start, (len, hints));
        }
    }

    /// Advice bits that apply to `[start, start + len)` (the union of overlapping advice).
    pub fn advice_for(&self, start: u64, len: u64) -> u32 {
        advice_for(&self.advice, start, len)
    }

    /// Notices a finished resync (the library had served it when `served` was read, before
    /// the drain), and asks for one when events were dropped since the last.
    fn request_resync_if_dropped(&mut self, served: u32) {
        let control = self.ring.control();
        if let Resync::Requested {
            request,
            dropped_at_request,
        } = self.resync
        {
            if served == request {
                self.stats.resyncs += 1;
                self.dropped_seen = dropped_at_request;
                self.resync = Resync::Idle;
            }
        }
        let dropped = self.ring.header().dropped.load(Ordering::Relaxed);
        if (dropped == self.dropped_seen && !self.resync_wanted)
            || !matches!(self.resync, Resync::Idle)
        {
            return;
        }
        self.resync_wanted = false;
        let request = control
            .resync_served
            .load(Ordering::Acquire)
            .wrapping_add(1);
        control.resync_request.store(request, Ordering::Release);
        self.resync = Resync::Requested {
            request,
            dropped_at_request: dropped,
        };
    }

    fn resync_begin(&mut self, lo: u64, request: u64) {
        match self.resync {
            // A Begin while Receiving means the previous step's End was dropped: start over.
            Resync::Requested {
                request: r,
                dropped_at_request,
            }
            | Resync::Receiving {
                request: r,
                dropped_at_request,
                ..
            } if r as u64 == request => {
                self.resync = Resync::Receiving {
                    request: r,
                    dropped_at_request,
                    lo,
                    dropped_at_begin: self.ring.header().dropped.load(Ordering::Relaxed),
                    seen: HashSet::new(),
                };
            }
            _ => self.stats.invalid_events += 1,
        }
    }

    /// Ends a step: objects starting in `[lo, hi)` that the step did not re-announce are gone
    /// (their frees were dropped), unless the step itself lost events.
    fn resync_end(&mut self, hi: u64, request: u64) {
        let state = std::mem::take(&mut self.resync);
        let Resync::Receiving {
            request: r,
            dropped_at_request,
            lo,
            dropped_at_begin,
            seen,
        } = state
        else {
            // An End without its Begin (the Begin was dropped): the step proves nothing.
            self.resync = state;
            self.stats.invalid_events += 1;
            return;
        };
        self.resync = Resync::Requested {
            request: r,
            dropped_at_request,
        };
        if r as u64 != request || hi < lo {
            self.stats.invalid_events += 1;
            return;
        }
        if self.ring.header().dropped.load(Ordering::Relaxed) != dropped_at_begin {
            // The step lost events: it is not the whole truth about its range. The drop counter
            // moved, so another resync follows this one.
            return;
        }
        let gone: Vec<u64> = self
            .objects
            .range(lo..hi)
            .map(|(&start, _)| start)
            .chain(
                self.pending
                    .keys()
                    .copied()
                    .filter(|start| (lo..hi).contains(start)),
            )
            .filter(|start| !seen.contains(start) && !self.blocks.contains_key(start))
            .collect();
        for start in gone {
            if self.pending.remove(&start).is_none() {
                self.remove_object(start);
            }
            self.stats.resync_forgotten_objects += 1;
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
        if !remembered.short_lived || self.young_ns.is_none() || self.placements.contains_key(&site)
        {
            return None;
        }
        let lives = self.site_lives.entry(site).or_default();
        if lives.short_lived || !self.ring.control().set_site_short_lived(site, true) {
            return None;
        }
        lives.short_lived = true;
        lives.remembered = true;
        Some(Warmed::ShortLived)
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
        if self.young_ns.is_none() || self.placements.contains_key(&site) {
            return None;
        }
        let lives = self.site_lives.get(&site)?;
        let mut run = lives.run;
        run.add(lives.current);
        lifetimes::run_verdict(
            lives.short_lived,
            run,
            now_ns.saturating_sub(self.attached_ns),
            self.interval_ns,
        )
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
                    match self.placement_evidence.get(&site) {
                        // Its objects are not cold: forget the site.
                        Some(Evidence::Disproved) => placed = None,
                        Some(&Evidence::Quiet(plans)) if plans >= REMEMBER_AFTER_PLANS => {}
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
            warm.unsaved |= !self.site_lives.is_empty();
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

    /// A plan has been made with this process's placements in force. A proactive placement
    /// whose site had a record seen accessed in the last two intervals (`busy`) is disproved:
    /// its objects, born in the placed tier or not, are not cold, and the store forgets the
    /// site (also when an earlier plan of this run had confirmed it, and saved it). Any other
    /// has held for one more plan, and one that has now held for [`REMEMBER_AFTER_PLANS`] is
    /// saved.
    pub fn placement_plans_ended(&mut self, busy: impl Fn(u64) -> bool) {
        let mut changed = false;
        for (&site, evidence) in self.placement_evidence.iter_mut() {
            let Evidence::Quiet(plans) = evidence else {
                continue;
            };
            if busy(site) {
                tracing::info!(
                    pid = self.pid,
                    site = format_args!("{site:#x}"),
                    held_plans = *plans,
                    "proactive placement disproved: a record of its site was seen accessed (not as it was born or moved); the site store will not keep it"
                );
                *evidence = Evidence::Disproved;
                changed = true;
            } else {
                *plans += 1;
                changed |= *plans == REMEMBER_AFTER_PLANS;
            }
        }
        if changed {
            self.store_changed();
        }
    }

    /// Applies the proactive policy's wish for `site` (see `objtier_policy::proactive_placements`)
    /// unless the site was placed by hand. Returns true if the placement changed.
    pub fn place_site_auto(&mut self, site: u64, tier: Option<u32>) -> bool {
        match self.placements.get(&site) {
            Some((_, PlacedBy::Hand | PlacedBy::Guided)) => false,
            current if current.map(|&(t, _)| t) == tier => false,
            _ => self.set_placement(site, tier, PlacedBy::Proactive),
        }
    }

    /// Sets (or clears) the tier new objects of `site` start in, by hand (`objtier place`): the
    /// proactive policy leaves the site alone from then on. False if the table is full.
    pub fn place_site(&mut self, site: u64, tier: Option<u32>) -> bool {
        self.set_placement(site, tier, PlacedBy::Hand)
    }

    fn set_placement(&mut self, site: u64, tier: Option<u32>, by: PlacedBy) -> bool {
        if !self.ring.control().set_site_tier(site, tier) {
            return false;
        }
        match tier {
            Some(t) => self.placements.insert(site, (t, by)),
            None => self.placements.remove(&site),
        };
        // Placements the policy or the store made are watched (`placement_plans_ended`); one
        // from the store was confirmed in an earlier run.
        let proactive = tier.is_some() && by == PlacedBy::Proactive;
        match (tier, by) {
            (Some(_), PlacedBy::Proactive) => {
                self.placement_evidence.insert(site, Evidence::Quiet(0))
            }
            (Some(_), PlacedBy::WarmStart) => self
                .placement_evidence
                .insert(site, Evidence::Quiet(REMEMBER_AFTER_PLANS)),
            _ => self.placement_evidence.remove(&site),
        };
        // Learnt in this run (or a remembered placement undone): the store should hear of it,
        // a proactive placement once it has held (`placement_plans_ended`).
        if by != PlacedBy::WarmStart && !proactive {
            self.store_changed();
        }
        true
    }

    fn insert_object(&mut self, start: u64, object: Object) {
        self.records_generation += 1;
        for (record_start, len) in split_ranges(start, object.len, self.split_bytes) {
            self.records.insert(
                record_start,
                Record::new(len, object.site, object.created_ns),
            );
        }
        self.objects.insert(start, object);
    }

    fn remove_object(&mut self, start: u64) -> bool {
        self.take_object(start).is_some()
    }

    /// Removes the object at `start` and its records and advice; returns it.
    fn take_object(&mut self, start: u64) -> Option<Object> {
        let object = self.objects.remove(&start)?;
        // Advice was about this object's memory; the next object there is another story.
        if !self.advice.is_empty() {
            let end = start + object.len;
            let inside: Vec<u64> = self
                .advice
                .range(start..end)
                .filter(|(&s, &(l, _))| s + l <= end)
                .map(|(&s, _)| s)
                .collect();
            for s in inside {
                self.advice.remove(&s);
            }
        }
        if self.records.remove_range(start..start + object.len) > 0 {
            self.records_generation += 1;
        }
        Some(object)
    }

    /// End of interval: buffered allocations that survived become records.
    /// New records in the middle of the address space are staged; they are merged, and the
    /// records removed since are dropped, once they are enough to be worth a pass
    /// ([`Records::tidy`]).
    ///
    /// With `young_ns`, objects at least that old at `now_ns` count as having lived long for
    /// their sites, and the records made of younger ones are looked at again next time.
    pub fn commit_pending(&mut self, now_ns: u64) {
        let mut pending = self.pending.drain();
        // In address order: those past the last record are appended, not staged.
        pending.sort_unstable_by_key(|&(start, _)| start);
        if let Some(young_ns) = self.young_ns {
            // Records made young at earlier commits, if they live on (the same object: a new
            // one at the same start was made at another time), may be old by now.
            let (objects, lives, candidates) = (
                &self.objects,
                &mut self.site_lives,
                &mut self.early_candidates,
            );
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
            self.young_records.retain(|(start, object)| {
                objects.get(start).is_some_and(|o| o == object) && count(object)
            });
            for (start, object) in &pending {
                if count(object) {
                    self.young_records.push((*start, *object));
                }
            }
        }
        for (start, object) in pending {
            self.insert_object(start, object);
        }
        self.records.tidy();
    }

    /// End of interval: judges each site by how its objects lived in the last intervals
    /// (`objtier_policy::lifetimes::short_lived`), and marks or unmarks it short-lived in the
    /// control area. A site placed in a tier is never short-lived: its placement would be
    /// ignored. Returns the sites whose mark changed, with their new state.
    pub fn judge_sites(&mut self) -> Vec<(u64, bool)> {
        let mut changed = Vec::new();
        if self.young_ns.is_none() {
            return changed;
        }
        let control = self.ring.control();
        for (&site, lives) in self.site_lives.iter_mut() {
            lives.run.add(lives.current);
            lives.past.push(std::mem::take(&mut lives.current));
            if lives.past.len() > lifetimes::SHORT_LIVED_WINDOW {
                lives.past.remove(0);
            }
            let short_lived = !self.placements.contains_key(&site)
                && lifetimes::short_lived(lives.short_lived, &lives.past);
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
        // The site's objects allocated unreported while it was short-lived: those still live
        // are learnt from a resync.
        self.resync_wanted |= changed.iter().any(|&(_, short_lived)| !short_lived);
        if !changed.is_empty() {
            self.store_changed();
        }
        changed
    }

    /// Something the site store records (a placement, a short-lived mark) changed: the next
    /// save writes it.
    fn store_changed(&mut self) {
        if let Some(warm) = &mut self.warm {
            warm.unsaved = true;
        }
    }

    /// Between intervals: marks short-lived the sites among the candidates that
    /// `lifetimes::short_lived_early` finds so by now (`now_ns`), before their window is
    /// complete. Returns the sites marked.
    pub fn judge_early(&mut self, now_ns: u64) -> Vec<u64> {
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
            self.site_lives.get(site).is_some_and(|lives| {
                let window = lives.window();
                !lives.short_lived
                    && now_ns >= lives.next_early_ns
                    && lifetimes::early_judgement_applies(lives.watched_ns(now_ns), young_ns)
                    && window.old == 0
                    && window.young >= lifetimes::SHORT_LIVED_MIN_YOUNG
            }) && !self.placements.contains_key(site)
        });
        if candidates.is_empty() {
            return marked;
        }
        // The oldest live object of each candidate, among those not yet counted: this
        // interval's, and records still young. A live object older than `young_ns` was counted
        // old at a commit (which keeps its site from being a candidate in that window), so a
        // pass over these finds every one that matters, however many records the process has.
        let mut oldest: SiteMap<u64> = candidates.iter().map(|&s| (s, u64::MAX)).collect();
        let (objects, sites) = (&self.objects, &candidates);
        let still_young = self
            .young_records
            .iter()
            // Of a candidate, and live (not freed since the last commit, its start not reused).
            .filter(|(start, object)| {
                sites.binary_search(&object.site).is_ok() && objects.get(start) == Some(object)
            })
            .map(|(_, object)| object);
        for object in self.pending.values().chain(still_young) {
            if let Some(created) = oldest.get_mut(&object.site) {
                *created = (*created).min(object.created_ns);
            }
        }
        let control = self.ring.control();
        for site in candidates {
            let lives = self.site_lives.get_mut(&site).expect("kept above");
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
        if !marked.is_empty() {
            self.store_changed();
        }
        marked
    }

    /// Sites marked short-lived now, in order.
    pub fn short_lived_sites(&self) -> Vec<u64> {
        let mut sites: Vec<u64> = self
            .site_lives
            .iter()
            .filter(|(_, lives)| lives.short_lived)
            .map(|(&site, _)| site)
            .collect();
        sites.sort_unstable();
        sites
    }

    /// Adds `weight` sampled accesses spread over `[start, end)` to the overlapping records,
    /// in proportion to overlap. Returns the weight that landed on records.
    pub fn attribute(&mut self, start: u64, end: u64, weight: f64, time_ns: u64) -> f64 {
        self.attribute_as(
            start,
            end,
            weight,
            time_ns,
            crate::source::AccessKind::Any,
            None,
        )
    }

    /// [`Process::attribute`], for accesses of `kind` with a `latency` weight where the source
    /// has one: a profiled process's recorder hears of each share by site.
    pub fn attribute_as(
        &mut self,
        start: u64,
        end: u64,
        weight: f64,
        time_ns: u64,
        kind: crate::source::AccessKind,
        latency: Option<f64>,
    ) -> f64 {
        if end <= start || weight <= 0.0 {
            return 0.0;
        }
        let (recorder, blocks) = (&mut self.recorder, &self.blocks);
        let span = (end - start) as f64;
        let mut attributed = 0.0;
        // The first record that may overlap starts at or before `start`.
        let first = self.records.start_at_or_before(start).unwrap_or(start);
        for (record_start, record) in self.records.range_mut(first..end) {
            let overlap_start = record_start.max(start);
            let overlap_end = (record_start + record.len).min(end);
            if overlap_end > overlap_start {
                let share = weight * (overlap_end - overlap_start) as f64 / span;
                record.interval_accesses += share as f32;
                record.last_access_ns = record.last_access_ns.max(time_ns);
                attributed += share;
                if let Some(r) = recorder.as_mut() {
                    let in_block = record.site == 0
                        && blocks
                            .range(..=record_start)
                            .next_back()
                            .is_some_and(|(&s, &l)| record_start < s + l);
                    let key = if in_block {
                        crate::recorder::SiteKey::SmallObjects
                    } else {
                        crate::recorder::SiteKey::of_object(record.site)
                    };
                    r.accessed(key, kind, share, latency.map(|l| l * share / weight));
                }
            }
        }
        attributed
    }

    /// Start of the object a record starting at `start` belongs to (records do not store it:
    /// a split object's records lie inside it, so the object map finds it).
    pub fn object_start_of(&self, start: u64) -> u64 {
        self.objects
            .range(..=start)
            .next_back()
            .filter(|(&s, o)| start < s + o.len)
            .map_or(start, |(&s, _)| s)
    }

    /// Resident bytes of the small-object blocks, as their records were last located (a
    /// record never located counts none).
    pub fn small_object_resident_bytes(&self, tiers: usize) -> u64 {
        self.blocks
            .iter()
            .flat_map(|(&start, &len)| self.records.range(start..start + len))
            .filter(|(_, r)| r.resident.known())
            .map(|(_, r)| r.resident.bytes(tiers).iter().sum::<u64>())
            .sum()
    }

    /// Tracked bytes (records).
    pub fn tracked_bytes(&self) -> u64 {
        self.objects.values().map(|o| o.len).sum()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use objtier_wire::Event;

    /// A process with a real ring and socket pair, as the daemon would have after a hello.
    pub(crate) fn process() -> (Process, UnixStream) {
        Process::synthetic(1, 1, 64, 64 << 20).unwrap()
    }

    /// Describes `site` as the library does, one `SiteFrame` event per return address.
    pub(crate) fn push_site(p: &Process, site: u64, ips: &[u64]) {
        for (i, &ip) in ips.iter().enumerate() {
            assert!(p.ring.header().push(&Event {
                kind: EventKind::SiteFrame as u32,
                flags: 0,
                addr: ip,
                len: (i as u64) << 32 | ips.len() as u64,
                time_ns: 5,
                site,
            }));
        }
    }

    pub(crate) fn push(p: &Process, kind: EventKind, addr: u64, len: u64, flags: u32) {
        assert!(p.ring.header().push(&Event {
            kind: kind as u32,
            flags,
            addr,
            len,
            time_ns: 5,
            site: 9,
        }));
    }

    /// Small-object blocks become records at once, split like objects; a resync (which only
    /// re-announces objects) does not forget them; an unmap does.
    #[test]
    fn small_object_blocks_are_tracked_and_survive_resyncs() {
        let (mut p, _peer) = process();
        let arena = 0x7f00_0000_0000u64;
        push(&p, EventKind::BlockMap, arena, 1 << 30, 0);
        push(&p, EventKind::Alloc, 0x10000, 4096, event_flags::SNAPSHOT);
        p.drain();
        assert_eq!(
            p.records.len(),
            17,
            "1 GiB at the 64 MiB split, and the object"
        );
        assert_eq!(p.blocks.len(), 1);
        // A resync step over the whole address space that announces nothing.
        p.resync = Resync::Requested {
            request: 1,
            dropped_at_request: 0,
        };
        push(&p, EventKind::ResyncBegin, 0, 1, 0);
        push(&p, EventKind::ResyncEnd, !0xfff, 1, 0);
        p.drain();
        assert_eq!(
            p.stats.resync_forgotten_objects, 1,
            "the step ran: the object is gone"
        );
        assert_eq!(p.records.len(), 16, "blocks are not forgotten by a resync");
        push(&p, EventKind::BlockUnmap, arena, 0, 0);
        p.drain();
        assert!(p.records.is_empty() && p.blocks.is_empty());
    }

    #[test]
    fn allocations_taken_back_are_never_seen_but_count_as_allocated() {
        let (mut p, _peer) = process();
        let alloc = |addr| Event {
            kind: EventKind::Alloc as u32,
            addr,
            len: 8192,
            ..Event::default()
        };
        let header = p.ring.header();
        let taken_back = header.push_at(&alloc(0x10000)).unwrap();
        assert!(header.push(&alloc(0x20000)));
        // The library frees the first object before the daemon looks: it takes the report
        // back and sends no free.
        assert!(header.cancel(taken_back));
        assert_eq!(p.drain(), 1);
        p.commit_pending(0);
        assert_eq!(p.objects.keys().copied().collect::<Vec<_>>(), [0x20000]);
        assert_eq!(p.stats.cancelled_allocations, 1);
        assert_eq!(
            p.stats.allocated_bytes,
            2 * 8192,
            "for the allocation trigger"
        );
        assert_eq!(p.allocated_unclaimed, 2 * 8192);
        assert_eq!(p.stats.invalid_events + p.stats.frees_of_unknown, 0);
    }

    #[test]
    fn a_ring_capacity_changed_after_the_attach_is_not_believed() {
        let (mut p, _peer) = process();
        push(&p, EventKind::Alloc, 0x10000, 4096, 0);
        // SAFETY: the test plays a hostile library scribbling on its own ring header, in the
        // shared mapping.
        unsafe { (*p.ring.as_ptr()).capacity = objtier_wire::MAX_RING_CAPACITY };
        assert_eq!(p.drain(), 1, "the capacity validated at the attach is used");
        p.ring.control().set_site_tier(5, Some(1));
        assert_eq!(p.ring.control().site_tier(5), Some(1));
    }

    /// Pushes a `kind` event of `site` at `time_ns`, draining first if the ring is full.
    pub(crate) fn push_at(
        p: &mut Process,
        kind: EventKind,
        addr: u64,
        time_ns: u64,
        site: u64,
        flags: u32,
    ) {
        let event = Event {
            kind: kind as u32,
            flags,
            addr,
            len: if kind == EventKind::Alloc { 8192 } else { 0 },
            time_ns,
            site,
        };
        // Drained before the ring (of 64 slots) fills: a refused push counts as a drop.
        if p.ring.header().backlog() >= 60 {
            p.drain();
        }
        assert!(p.ring.header().push(&event));
    }

    /// `n` objects of `site`, each freed 10 ns after its allocation, from `t` on.
    pub(crate) fn churn(p: &mut Process, site: u64, n: u64, t: u64) {
        for i in 0..n {
            let addr = 0x1000_0000 + (i % 50) * 0x10000;
            push_at(p, EventKind::Alloc, addr, t + i, site, 0);
            push_at(p, EventKind::Free, addr, t + i + 10, 0, 0);
        }
        p.drain();
    }

    #[test]
    fn a_site_whose_objects_all_die_young_is_short_lived_until_a_sample_lives_long() {
        let (mut p, _peer) = process();
        let young_ns = 1_000_000;
        p.young_ns = Some(young_ns);
        let (churning, keeping, placed) = (0x7007, 0x8008, 0x9009);
        p.place_site(placed, Some(1));
        for interval in 0..2 {
            let t = interval * 10 * young_ns;
            churn(&mut p, churning, 6_000, t);
            churn(&mut p, placed, 6_000, t);
            // The keeping site churns as much, but one of its objects lives long.
            churn(&mut p, keeping, 6_000, t);
            let kept = 0x5000_0000 + interval * 0x10000;
            push_at(&mut p, EventKind::Alloc, kept, t, keeping, 0);
            p.drain();
            p.commit_pending(t + 2 * young_ns);
            let judged = p.judge_sites();
            if interval == 0 {
                assert!(judged.is_empty(), "one interval is not enough: {judged:?}");
            } else {
                assert_eq!(judged, [(churning, true)]);
            }
        }
        let control = p.ring.control();
        assert!(control.site_advice(churning).short_lived);
        assert!(!control.site_advice(keeping).short_lived);
        assert_eq!(
            control.site_advice(placed),
            objtier_wire::SiteAdvice {
                tier: Some(1),
                short_lived: false,
                budget_pages: 0,
            },
            "a placed site keeps its placement"
        );
        assert_eq!(p.short_lived_sites(), [churning]);
        // The library now sends one sample in 64; a quiet interval or a young sample keeps the
        // mark, a sample that lives long ends it.
        assert!(p.judge_sites().is_empty());
        let t = 100 * young_ns;
        push_at(
            &mut p,
            EventKind::Alloc,
            0x6000_0000,
            t,
            churning,
            event_flags::SAMPLED,
        );
        push_at(&mut p, EventKind::Free, 0x6000_0000, t + 5, 0, 0);
        push_at(
            &mut p,
            EventKind::Alloc,
            0x6001_0000,
            t,
            churning,
            event_flags::SAMPLED,
        );
        p.drain();
        p.commit_pending(t + young_ns / 2);
        assert!(p.judge_sites().is_empty(), "still young at the commit");
        assert_eq!(p.stats.sampled_allocations, 2);
        // Never freed: the next commit finds it old.
        p.commit_pending(t + young_ns);
        assert_eq!(p.judge_sites(), [(churning, false)], "lived on");
        assert!(!p.ring.control().site_advice(churning).short_lived);
        assert!(p.short_lived_sites().is_empty());
        // Its objects allocated unreported meanwhile may live: the library is asked to
        // re-announce every live object.
        assert_eq!(p.stats.resyncs, 0, "no drops");
        assert_eq!(p.ring.control().resync_request.load(Ordering::Relaxed), 0);
        p.drain();
        assert_eq!(p.ring.control().resync_request.load(Ordering::Relaxed), 1);
        assert!(!p.resync_wanted);
    }

    /// A busy site of temporaries is marked between intervals, once it has been watched long
    /// enough for its objects' lives to be a small part of the watch; a site that keeps one
    /// object, or a placed one, is not; an object live at the mark that lives on unmarks it.
    #[test]
    fn a_busy_site_of_temporaries_is_short_lived_before_its_window() {
        let (mut p, _peer) = process();
        let ms = 1_000_000;
        let young_ns = 1_000 * ms;
        p.young_ns = Some(young_ns);
        let (churning, keeping, placed) = (0x7007, 0x8008, 0x9009);
        p.place_site(placed, Some(1));
        let t = 5_000 * ms;
        churn(&mut p, churning, 20_000, t);
        churn(&mut p, placed, 20_000, t);
        churn(&mut p, keeping, 20_000, t);
        push_at(&mut p, EventKind::Alloc, 0x5000_0000, t, keeping, 0);
        // An object of the churning site still live, allocated late in the watch.
        push_at(
            &mut p,
            EventKind::Alloc,
            0x6000_0000,
            t + 250 * ms,
            churning,
            0,
        );
        p.drain();
        // Both live objects become records, still young: the early judgement finds them there.
        p.commit_pending(t + 260 * ms);
        assert_eq!(p.young_records.len(), 2);
        assert!(
            p.judge_early(t + 200 * ms).is_empty(),
            "watched for less than a quarter of young_ns"
        );
        assert!(
            p.judge_early(t + 300 * ms).is_empty(),
            "not candidates again yet"
        );
        churn(&mut p, churning, 4_096, t + 300 * ms);
        churn(&mut p, keeping, 4_096, t + 300 * ms);
        churn(&mut p, placed, 4_096, t + 300 * ms);
        assert_eq!(p.judge_early(t + 300 * ms), [churning]);
        let control = p.ring.control();
        assert!(control.site_advice(churning).short_lived);
        assert!(
            !control.site_advice(keeping).short_lived,
            "its object is as old as the watch"
        );
        assert_eq!(control.site_advice(placed).tier, Some(1));
        assert!(!control.site_advice(placed).short_lived);
        assert!(!p.site_lives[&churning].remembered);
        // The interval's own judgement keeps the mark.
        p.commit_pending(t + 400 * ms);
        assert!(p.judge_sites().is_empty());
        // The object live at the mark lives on: the site is unmarked, and a resync asked.
        p.commit_pending(t + 1_300 * ms);
        assert_eq!(p.judge_sites(), [(churning, false)]);
        assert!(p.resync_wanted);
    }

    /// A site's counts last the run (for the store's verdict), but a site quiet for a whole
    /// window is judged on two intervals of its objects again when it is busy again.
    #[test]
    fn a_site_busy_again_after_a_quiet_window_waits_for_a_full_window() {
        let (mut p, _peer) = process();
        let young_ns = 1_000_000;
        p.young_ns = Some(young_ns);
        let site = 0x7007;
        churn(&mut p, site, 100, 0);
        p.commit_pending(2 * young_ns);
        for _ in 0..3 {
            assert!(p.judge_sites().is_empty(), "too few, then quiet");
        }
        let t = 100 * young_ns;
        churn(&mut p, site, 20_000, t);
        p.commit_pending(t + 2 * young_ns);
        assert!(
            p.judge_sites().is_empty(),
            "one busy interval is not a window"
        );
        churn(&mut p, site, 20_000, t + 10 * young_ns);
        p.commit_pending(t + 12 * young_ns);
        assert_eq!(p.judge_sites(), [(site, true)]);
        assert_eq!(
            p.site_lives[&site].run.young, 40_100,
            "counted over the run"
        );
    }

    #[test]
    fn without_young_ns_no_site_is_judged() {
        let (mut p, _peer) = process();
        churn(&mut p, 0x7007, 20_000, 0);
        p.commit_pending(0);
        assert!(p.judge_sites().is_empty());
        assert!(p.site_lives.is_empty(), "nothing counted");
    }

    #[test]
    fn ephemeral_objects_never_become_records() {
        let (mut p, _peer) = process();
        push(&p, EventKind::Alloc, 0x10000, 8192, 0);
        push(&p, EventKind::Alloc, 0x20000, 4096, 0);
        push(&p, EventKind::Free, 0x10000, 0, 0);
        assert_eq!(p.drain(), 3);
        p.commit_pending(0);
        assert_eq!(p.records.len(), 1);
        assert_eq!(p.stats.ephemeral_objects, 1);
        push(&p, EventKind::Free, 0x20000, 0, 0);
        push(&p, EventKind::Free, 0x30000, 0, 0);
        p.drain();
        assert!(p.records.is_empty());
        assert_eq!(p.stats.frees_of_unknown, 1);
    }

    #[test]
    fn large_objects_split_and_snapshots_are_immediate() {
        let (mut p, _peer) = process();
        push(
            &p,
            EventKind::Alloc,
            0x4000_0000,
            96 << 20,
            event_flags::SNAPSHOT,
        );
        p.drain();
        assert_eq!(p.records.len(), 2, "96 MiB at 64 MiB split = 2 records");
        assert_eq!(p.object_start_of(0x4000_0000 + (64 << 20)), 0x4000_0000);
        // Accesses over the second half land on the second record only.
        let second = 0x4000_0000 + (64 << 20);
        let got = p.attribute(second, second + (32 << 20), 10.0, 7_000);
        assert!((got - 10.0).abs() < 1e-9);
        assert_eq!(p.records[&second].interval_accesses, 10.0);
        assert_eq!(p.records[&0x4000_0000].interval_accesses, 0.0);
        // The last access is the observation's time, the latest when several fall on it.
        assert_eq!(p.records[&second].last_access_ns, 7_000);
        assert_eq!(p.records[&0x4000_0000].last_access_ns, 0);
        // A region half outside every record attributes half.
        let half = p.attribute(second - 4096 * 4, second - 4096 * 2, 2.0, 5_000);
        assert!((half - 2.0).abs() < 1e-9);
        assert_eq!(p.records[&0x4000_0000].last_access_ns, 5_000);
        p.attribute(second, second + 4096, 1.0, 6_000);
        assert_eq!(
            p.records[&second].last_access_ns, 7_000,
            "an older one changes nothing"
        );
        assert_eq!(p.attribute(0x1000, 0x2000, 1.0, 1), 0.0);
    }

    /// The record layout docs/architecture.md describes: at most 64 bytes with its key.
    #[test]
    fn a_record_is_56_bytes_and_64_with_its_key() {
        assert_eq!(std::mem::size_of::<Record>(), 56);
        assert_eq!(std::mem::size_of::<(u64, Record)>(), 64);
    }

    #[test]
    fn resident_pages_pack_three_tiers_or_say_unknown() {
        let r = ResidentPages::pack(&[5, 0, (1 << 21) - 1]);
        assert!(r.known());
        assert_eq!(
            (r.pages(0), r.pages(1), r.pages(2), r.pages(3)),
            (5, 0, (1 << 21) - 1, 0)
        );
        assert_eq!(ResidentPages::pack(&[1, 2]).pages(1), 2);
        assert!(!ResidentPages::pack(&[0, 1 << 21]).known());
        assert!(!ResidentPages::pack(&[0, 0, 0, 0]).known());
        assert!(ResidentPages::pack(&[]).known());
        let bytes = ResidentPages::from_bytes(&[2 * 4096, 4096]).bytes(2);
        assert_eq!(bytes.as_slice(), [2 * 4096, 4096]);
    }

    /// `f32` counters: a region as large as the address space, sampled as often as DAMON can,
    /// neither overflows a record nor rounds a one-page share of a single access to zero.
    #[test]
    fn f32_counters_keep_huge_weights_and_tiny_shares() {
        let (mut p, _peer) = process();
        push(&p, EventKind::Alloc, 0x10000, 4096, event_flags::SNAPSHOT);
        p.drain();
        let (start, end) = (0x10000u64, 0x10000u64 + MAX_OBJECT_BYTES);
        let pages = (MAX_OBJECT_BYTES / PAGE_SIZE as u64) as f64;
        p.attribute(start, end, 1.0, 1);
        let tiny = p.records[&0x10000].interval_accesses;
        assert!(tiny > 0.0 && (tiny as f64 - 1.0 / pages).abs() < 1e-6 / pages);
        p.records.get_mut(0x10000).unwrap().interval_accesses = 0.0;
        p.attribute(0x10000, 0x11000, 1000.0 * pages, 1);
        let huge = p.records[&0x10000].interval_accesses;
        assert!(huge.is_finite() && (huge as f64 / (1000.0 * pages) - 1.0).abs() < 1e-7);
    }

    /// The daemon's objects (this interval's, pending, and the committed ones) are exactly the
    /// library's live objects after any stream of allocations, frees and moves, whatever the
    /// commits in between: a model of the library's heap against `drain`.
    #[test]
    fn the_objects_follow_the_librarys_heap_through_any_stream_of_events() {
        use std::collections::BTreeMap as Model;
        const PAGES: u64 = 256;
        let page = PAGE_SIZE as u64;
        let base = 0x7f00_0000_0000u64;
        let (mut p, _peer) = process();
        let mut live: Model<u64, u64> = Model::new();
        let mut x = 0x9e37_79b9u64;
        let mut random = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        // A free run of `pages` pages starting at a random page, if there is one there.
        let free_at = |live: &Model<u64, u64>, first: u64, pages: u64| -> Option<u64> {
            let start = base + first * page;
            let end = start + pages * page;
            let clear = first + pages <= PAGES
                && live
                    .range(..end)
                    .next_back()
                    .is_none_or(|(&s, &len)| s + len <= start);
            clear.then_some(start)
        };
        for step in 0..20_000u64 {
            let pages = 1 + random(4);
            match random(8) {
                0..=3 => {
                    if let Some(start) = free_at(&live, random(PAGES), pages) {
                        push(&p, EventKind::Alloc, start, pages * page, 0);
                        live.insert(start, pages * page);
                    }
                }
                4 | 5 => {
                    if let Some((&start, _)) =
                        live.iter().nth(random(live.len() as u64 + 1) as usize)
                    {
                        push(&p, EventKind::Free, start, 0, 0);
                        live.remove(&start);
                    }
                }
                _ => {
                    let Some((&from, &len)) =
                        live.iter().nth(random(live.len() as u64 + 1) as usize)
                    else {
                        continue;
                    };
                    // The new extent is taken while the old one is still held, as `realloc`
                    // does; with none free, the object stays where it is.
                    let to = free_at(&live, random(PAGES), pages).unwrap_or(from);
                    let len = if to == from { len } else { pages * page };
                    live.remove(&from);
                    push_event(&p, moved(from, to, len));
                    live.insert(to, len);
                }
            }
            if step % 16 == 0 {
                p.drain();
            }
            if step % 997 == 0 {
                p.commit_pending(0);
            }
            if step % 16 == 0 {
                let mut known: Model<u64, u64> =
                    p.objects.iter().map(|(&s, o)| (s, o.len)).collect();
                for start in p.pending.keys() {
                    let object = p.pending.get(start).unwrap();
                    assert!(
                        known.insert(*start, object.len).is_none(),
                        "pending and committed"
                    );
                }
                assert_eq!(known, live, "after step {step}");
            }
        }
        assert_eq!(p.stats.invalid_events, 0);
    }

    #[test]
    fn malformed_events_are_counted_not_trusted() {
        let (mut p, _peer) = process();
        push(&p, EventKind::Alloc, 0x1001, 4096, 0); // unaligned
        push(&p, EventKind::Alloc, u64::MAX - 4095, 8192, 0); // wraps
        push(&p, EventKind::Alloc, 0x1000, 0, 0); // empty
        push(&p, EventKind::Alloc, 0, 4096, 0); // at address 0
        push_event(
            &p,
            Event {
                kind: EventKind::Moved as u32,
                addr: 0,
                len: 4096,
                site: 0x10000,
                ..Event::default()
            },
        ); // to address 0
        assert!(p.ring.header().push(&Event {
            kind: 77,
            ..Event::default()
        }));
        p.drain();
        p.commit_pending(0);
        assert_eq!(p.stats.invalid_events, 6);
        assert!(p.records.is_empty());
    }

    fn push_event(p: &Process, event: Event) {
        assert!(p.ring.header().push(&event));
    }

    fn moved(from: u64, start: u64, len: u64) -> Event {
        Event {
            kind: EventKind::Moved as u32,
            addr: start,
            len,
            time_ns: 7,
            site: from,
            ..Event::default()
        }
    }

    /// A moved object keeps its site, age, history and advice; a record of a split object takes
    /// the history of the old records over the same offsets, so a new tail starts with none.
    #[test]
    fn a_moved_object_carries_its_history_over_by_offset() {
        const MIB: u64 = 1 << 20;
        let (mut p, _peer) = Process::synthetic(1, 1, 64, 4 * MIB).unwrap();
        push(
            &p,
            EventKind::Alloc,
            0x100_0000,
            8 * MIB,
            event_flags::SNAPSHOT,
        );
        p.drain();
        p.advise(0x100_0000 + MIB, MIB, advice::HOT);
        for (i, start) in [0x100_0000, 0x100_0000 + 4 * MIB].into_iter().enumerate() {
            let record = p.records.get_mut(start).unwrap();
            record.ema_accesses = 10.0 * (i + 1) as f32;
            record.recent_accesses = 4.0;
            record.last_access_ns = 3;
        }
        // Doubled to a new place: 16 MiB in four 4 MiB records.
        push_event(&p, moved(0x100_0000, 0x800_0000, 16 * MIB));
        p.drain();
        assert_eq!(p.stats.moved_objects, 1);
        assert!(!p.objects.contains_key(&0x100_0000));
        assert!(
            p.pending.is_empty(),
            "a record at once, not an allocation of the interval"
        );
        assert_eq!(
            p.objects.get(&0x800_0000),
            Some(&Object {
                len: 16 * MIB,
                site: 9,
                created_ns: 5
            })
        );
        let emas: Vec<f32> = p
            .records
            .range(0x800_0000..0x800_0000 + 16 * MIB)
            .map(|(_, r)| r.ema_accesses)
            .collect();
        assert_eq!(emas, [10.0, 20.0, 0.0, 0.0]);
        let first = p.records.get(0x800_0000).unwrap();
        assert_eq!(
            (first.recent_accesses, first.last_access_ns, first.site),
            (4.0, 3, 9)
        );
        assert_eq!(p.advice_for(0x800_0000 + MIB, MIB), advice::HOT);
        assert_eq!(p.advice_for(0x100_0000, 8 * MIB), 0);
        assert_eq!(p.stats.allocated_bytes, 16 * MIB);

        // Grown in place by 2 MiB: the records over the old bytes keep theirs.
        p.records
            .get_mut(0x800_0000 + 12 * MIB)
            .unwrap()
            .ema_accesses = 8.0;
        push_event(&p, moved(0x800_0000, 0x800_0000, 18 * MIB));
        p.drain();
        let emas: Vec<f32> = p
            .records
            .range(0x800_0000..0x800_0000 + 18 * MIB)
            .map(|(_, r)| r.ema_accesses)
            .collect();
        assert_eq!(emas, [10.0, 20.0, 0.0, 8.0, 0.0]);
        assert_eq!(
            p.stats.allocated_bytes,
            18 * MIB,
            "in place, only the growth is new"
        );

        // Shrunk and moved: the new record covers half of the first old one, and takes half.
        push_event(&p, moved(0x800_0000, 0x400_0000, 2 * MIB));
        p.drain();
        assert_eq!(p.records.len(), 1);
        assert_eq!(p.records.get(0x400_0000).unwrap().ema_accesses, 5.0);
    }

    /// An allocation of this interval that moves stays one (with its site); a move from a start
    /// the daemon never heard of (a dropped allocation) is an allocation of no known site.
    /// A record still young when `realloc` moves or grows it is looked at again by the next
    /// commits under its new start and length, and counted old for its site once it is.
    #[test]
    fn a_young_record_moved_is_still_counted_for_its_site() {
        let (mut p, _peer) = process();
        let young_ns = 1_000;
        p.young_ns = Some(young_ns);
        let site = 0x7007;
        push_at(&mut p, EventKind::Alloc, 0x10000, 0, site, 0);
        push_at(&mut p, EventKind::Alloc, 0x30000, 0, site, 0);
        p.drain();
        p.commit_pending(500);
        assert_eq!(p.young_records.len(), 2);
        // One moves (its time: 7 ns), the other grows in place.
        push_event(&p, moved(0x10000, 0x40000, 16384));
        push_event(&p, moved(0x30000, 0x30000, 16384));
        p.drain();
        p.commit_pending(2_000);
        assert_eq!(p.site_lives[&site].current.old, 2, "both lived on");
        assert!(p.young_records.is_empty());
    }

    #[test]
    fn a_moved_new_or_unknown_object_is_an_allocation() {
        let (mut p, _peer) = process();
        push(&p, EventKind::Alloc, 0x10000, 8192, 0);
        push_event(&p, moved(0x10000, 0x40000, 16384));
        push_event(&p, moved(0x90000, 0xa0000, 4096));
        // Malformed: the old start is not page-aligned.
        push_event(&p, moved(0x10001, 0xb0000, 4096));
        p.drain();
        assert_eq!(p.stats.invalid_events, 1);
        assert_eq!(p.stats.moved_objects, 1);
        assert_eq!(
            p.pending.get(&0x40000).map(|o| (o.len, o.site)),
            Some((16384, 9))
        );
        assert_eq!(p.pending.get(&0xa0000).map(|o| o.site), Some(0));
        assert!(!p.pending.contains_key(&0x10000));
        p.commit_pending(0);
        assert_eq!(p.records.len(), 2);
    }

    fn marker(kind: EventKind, addr: u64, request: u32) -> Event {
        Event {
            kind: kind as u32,
            addr,
            len: request as u64,
            ..Event::default()
        }
    }

    #[test]
    fn resync_learns_lost_allocations_and_forgets_lost_frees_keeping_history() {
        let (mut p, _peer) = process();
        // Known objects at 0x10000 (live) and 0x20000 (its free will be "lost").
        push(&p, EventKind::Alloc, 0x10000, 4096, event_flags::SNAPSHOT);
        push(&p, EventKind::Alloc, 0x20000, 4096, event_flags::SNAPSHOT);
        p.drain();
        p.records.get_mut(0x10000).unwrap().ema_accesses = 3.0;
        // The ring overflowed: the daemon notices and asks.
        p.ring.header().dropped.fetch_add(5, Ordering::Relaxed);
        p.drain();
        let request = p.ring.control().resync_request.load(Ordering::Relaxed);
        assert_eq!(request, 1, "a resync is requested once drops are seen");
        // Step 1 covers [0, 0x18000): 0x10000 is still live.
        push_event(&p, marker(EventKind::ResyncBegin, 0, request));
        push(&p, EventKind::Alloc, 0x10000, 4096, event_flags::SNAPSHOT);
        push_event(&p, marker(EventKind::ResyncEnd, 0x18000, request));
        // Step 2 covers [0x18000, 0x100000): 0x20000 is gone, 0x30000 is new (lost alloc).
        push_event(&p, marker(EventKind::ResyncBegin, 0x18000, request));
        push(&p, EventKind::Alloc, 0x30000, 8192, event_flags::SNAPSHOT);
        push_event(&p, marker(EventKind::ResyncEnd, 0x100000, request));
        p.drain();
        assert!(p.objects.contains_key(&0x10000));
        assert!(!p.objects.contains_key(&0x20000), "lost free reconciled");
        assert!(p.objects.contains_key(&0x30000), "lost alloc reconciled");
        assert_eq!(
            p.records[&0x10000].ema_accesses, 3.0,
            "a known object keeps its access history"
        );
        assert_eq!(p.stats.resync_forgotten_objects, 1);
        assert_eq!(p.stats.resync_learnt_objects, 1);
        assert_eq!(p.stats.resyncs, 0, "not done until the library says so");
        p.ring
            .control()
            .resync_served
            .store(request, Ordering::Relaxed);
        p.drain();
        assert_eq!(p.stats.resyncs, 1);
        assert!(matches!(p.resync, Resync::Idle));
        assert_eq!(p.ring.control().resync_request.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_resync_step_that_lost_events_forgets_nothing() {
        let (mut p, _peer) = process();
        push(&p, EventKind::Alloc, 0x20000, 4096, event_flags::SNAPSHOT);
        p.drain();
        p.ring.header().dropped.fetch_add(1, Ordering::Relaxed);
        p.drain();
        let request = p.ring.control().resync_request.load(Ordering::Relaxed);
        push_event(&p, marker(EventKind::ResyncBegin, 0, request));
        p.drain();
        p.ring.header().dropped.fetch_add(1, Ordering::Relaxed); // lost inside the step
        push_event(&p, marker(EventKind::ResyncEnd, 0x100000, request));
        p.ring
            .control()
            .resync_served
            .store(request, Ordering::Relaxed);
        p.drain();
        assert!(
            p.objects.contains_key(&0x20000),
            "an incomplete step proves nothing"
        );
        assert_eq!(
            p.ring.control().resync_request.load(Ordering::Relaxed),
            request + 1,
            "drops since the request ask for another"
        );
    }

    #[test]
    fn sites_advice_priority_and_placement() {
        let (mut p, _peer) = process();
        for (i, ip) in [0x401000u64, 0x402000].into_iter().enumerate() {
            push_event(
                &p,
                Event {
                    kind: EventKind::SiteFrame as u32,
                    addr: ip,
                    len: (i as u64) << 32 | 2,
                    site: 77,
                    ..Event::default()
                },
            );
        }
        push_event(
            &p,
            Event {
                kind: EventKind::Priority as u32,
                addr: 7,
                ..Event::default()
            },
        );
        push_event(
            &p,
            Event {
                kind: EventKind::Priority as u32,
                addr: 1 << 40, // out of range: refused
                ..Event::default()
            },
        );
        push(
            &p,
            EventKind::Alloc,
            0x10000,
            3 * 4096,
            event_flags::SNAPSHOT,
        );
        push(&p, EventKind::Advise, 0x11000, 4096, advice::HOT);
        push(&p, EventKind::Advise, 0x50000, 4096, 1 << 31); // unknown bit: refused
        p.drain();
        assert!(p.sites[&77].complete());
        assert_eq!(p.sites[&77].ips, vec![0x401000, 0x402000]);
        assert_eq!(p.priority, 7);
        assert_eq!(p.stats.invalid_events, 2);
        assert_eq!(p.advice_for(0x10000, 3 * 4096), advice::HOT);
        assert_eq!(p.advice_for(0x12000, 4096), 0);
        let maps =
            objtier_sys::maps::Maps::parse("400000-403000 r-xp 00000000 fe:00 1 /usr/bin/app\n");
        p.name_sites(&maps);
        assert_eq!(
            p.sites[&77].names.as_deref(),
            Some(
                &[
                    "/usr/bin/app+0x1000".to_string(),
                    "/usr/bin/app+0x2000".to_string()
                ][..]
            )
        );
        assert!(p.place_site(77, Some(1)));
        assert_eq!(p.ring.control().site_tier(77), Some(1));
        assert!(p.place_site(77, None));
        assert_eq!(p.ring.control().site_tier(77), None);
        // Freeing the object drops the advice about its memory.
        push(&p, EventKind::Free, 0x10000, 0, 0);
        p.drain();
        assert!(p.advice.is_empty());
    }
}
