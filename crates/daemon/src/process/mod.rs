//! One attached process: its ring, its objects, and the records the policy sees.
//!
//! A `Process` is composed of parts, each in its own file with its state private to it:
//!
//! - [`objects`]: the object table (objects, their records, this interval's allocations, the
//!   small-object blocks, the advice);
//! - [`lifetimes`]: how each site's objects live, and which sites are short-lived;
//! - [`placements`]: where each site's new objects start, and the evidence for the placements
//!   the site store may remember;
//! - [`resync`]: lost events, and the resyncs that recover from them.
//!
//! [`events`] applies what the ring says to them; [`sites`] names the sites the library
//! describes; [`warm`] is the warm start (placements remembered from an earlier run of the same
//! program, applied by call path, and what this run learnt, saved).

pub mod events;
pub mod frames;
pub mod lifetimes;
pub mod objects;
pub mod placements;
pub mod remembered;
pub mod resync;
pub mod sites;
#[cfg(test)]
pub(crate) mod tests;
pub mod warm;

pub use crate::record::{Object, Record, ResidentPages};
pub use crate::records::Records;
pub use frames::{SiteFrames, Sites};
pub use lifetimes::{SiteLifetimes, SiteLives, SiteMap};
pub use objects::{advice_for, ObjectTable};
pub use objtier_sys::ring::RingMapping;
pub use placements::{Evidence, PlacedBy, SitePlacements, REMEMBER_AFTER_PLANS};
pub use remembered::{Remembered, WarmStart, Warmed};
pub use resync::{Resync, ResyncState};

use placements::Placed;
use std::os::unix::net::UnixStream;

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
    /// Frames of site descriptions kept (bounded by `sites::MAX_FRAMES_PER_PROCESS`).
    pub site_frames: u64,
    /// Frames of new sites not kept: the process described more than the bound.
    pub sites_refused: u64,
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
    pub objects: ObjectTable,
    /// The access source's ranges for this process, and the object table's generation they
    /// were derived from.
    pub source_ranges: (u64, Vec<(u64, u64)>),
    pub stats: ProcessStats,
    /// Resident bytes per tier at the last placement query.
    pub resident_bytes_by_tier: Vec<u64>,
    /// Sites described by the library.
    pub sites: Sites,
    pub placements: SitePlacements,
    pub resync: ResyncState,
    /// Bytes allocated since the daemon last took them (for the allocation trigger).
    pub allocated_unclaimed: u64,
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
    pub lifetimes: SiteLifetimes,
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
    /// yet; priority 0, no fast-tier cap, no pidfd, no lifetimes watched, until the caller says
    /// otherwise.
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
            objects: ObjectTable::new(split_bytes),
            source_ranges: (u64::MAX, Vec::new()),
            stats: ProcessStats::default(),
            resident_bytes_by_tier: vec![],
            sites: Sites::new(),
            placements: SitePlacements::default(),
            resync: ResyncState::default(),
            allocated_unclaimed: 0,
            pidfd: None,
            warm: None,
            last_maps: None,
            lifetimes: SiteLifetimes::default(),
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

    /// Its records (see [`ObjectTable::records`]).
    pub fn records(&self) -> &Records {
        self.objects.records()
    }

    /// Its records' counters and locations (see [`ObjectTable::records_mut`]).
    pub fn records_mut(&mut self) -> &mut Records {
        self.objects.records_mut()
    }

    /// Advice bits that apply to `[start, start + len)` (the union of overlapping advice).
    pub fn advice_for(&self, start: u64, len: u64) -> u32 {
        self.objects.advice_for(start, len)
    }

    /// End of interval: buffered allocations that survived become records. With the
    /// lifetimes watched, objects at least the young age at `now_ns` count as having lived long
    /// for their sites, and the records made of younger ones are looked at again next time.
    pub fn commit_pending(&mut self, now_ns: u64) {
        let mut pending = self.objects.pending_mut().drain();
        // In address order: those past the last record are appended, not staged.
        pending.sort_unstable_by_key(|&(start, _)| start);
        self.lifetimes
            .commit(self.objects.objects(), &pending, now_ns);
        self.objects.commit(pending);
    }

    /// End of interval: judges each site by how its objects lived in the last intervals, and
    /// marks or unmarks it short-lived (see `SiteLifetimes::judge`). Returns the sites whose
    /// mark changed, with their new state.
    pub fn judge_sites(&mut self) -> Vec<(u64, bool)> {
        let placements = &self.placements;
        let changed = self
            .lifetimes
            .judge(self.ring.control(), |site| placements.contains_key(&site));
        // The site's objects allocated unreported while it was short-lived: those still live
        // are learnt from a resync.
        if changed.iter().any(|&(_, short_lived)| !short_lived) {
            self.resync.want();
        }
        if !changed.is_empty() {
            self.store_changed();
        }
        changed
    }

    /// Between intervals: marks short-lived the sites that are so before their window is
    /// complete (see `SiteLifetimes::judge_early`). Returns the sites marked.
    pub fn judge_early(&mut self, now_ns: u64) -> Vec<u64> {
        let placements = &self.placements;
        let marked = self.lifetimes.judge_early(
            now_ns,
            self.ring.control(),
            |site| placements.contains_key(&site),
            self.objects.objects(),
            self.objects.pending().values(),
        );
        if !marked.is_empty() {
            self.store_changed();
        }
        marked
    }

    /// Sites marked short-lived now, in order.
    pub fn short_lived_sites(&self) -> Vec<u64> {
        self.lifetimes.short_lived_sites()
    }

    /// Something the site store records (a placement, a short-lived mark) changed: the next
    /// save writes it.
    fn store_changed(&mut self) {
        if let Some(warm) = &mut self.warm {
            warm.unsaved = true;
        }
    }

    /// A plan has been made with this process's placements in force. A proactive placement
    /// whose site had a record seen accessed in the last two intervals (`busy`) is disproved:
    /// its objects, born in the placed tier or not, are not cold, and the store forgets the
    /// site (also when an earlier plan of this run had confirmed it, and saved it). Any other
    /// has held for one more plan, and one that has now held for [`REMEMBER_AFTER_PLANS`] is
    /// saved.
    pub fn placement_plans_ended(&mut self, busy: impl Fn(u64) -> bool) {
        if self.placements.plans_ended(self.pid, busy) {
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

    /// Sets (or clears) where `site`'s new objects start, on behalf of `by`. False if the
    /// control area's table is full around the site.
    pub(crate) fn set_placement(&mut self, site: u64, tier: Option<u32>, by: PlacedBy) -> bool {
        match self.placements.set(self.ring.control(), site, tier, by) {
            Placed::Refused => false,
            Placed::Quietly => true,
            Placed::ForTheStore => {
                self.store_changed();
                true
            }
        }
    }

    /// Adds `weight` sampled accesses spread over `[start, end)` to the overlapping records,
    /// in proportion to overlap. Returns the weight that landed on records.
    pub fn attribute(&mut self, start: u64, end: u64, weight: f64, time_ns: u64) -> f64 {
        self.attribute_observed(&crate::source::Observation {
            pid: self.pid,
            start,
            end,
            weight,
            kind: crate::source::AccessKind::Any,
            latency: None,
            data_source: None,
            time_ns,
        })
    }

    /// [`Process::attribute`] of an observation, with what it says of the kind of access, its
    /// latency and its data source: a profiled process's recorder hears of each share by site.
    pub fn attribute_observed(&mut self, o: &crate::source::Observation) -> f64 {
        let (start, end, weight, time_ns) = (o.start, o.end, o.weight, o.time_ns);
        if end <= start || weight <= 0.0 {
            return 0.0;
        }
        let recorder = &mut self.recorder;
        let (records, blocks) = self.objects.records_and_blocks_mut();
        let span = (end - start) as f64;
        let mut attributed = 0.0;
        // The first record that may overlap starts at or before `start`.
        let first = records.start_at_or_before(start).unwrap_or(start);
        for (record_start, record) in records.range_mut(first..end) {
            let overlap_start = record_start.max(start);
            let overlap_end = (record_start + record.len).min(end);
            if overlap_end > overlap_start {
                let share = weight * (overlap_end - overlap_start) as f64 / span;
                record.interval_accesses += share as f32;
                record.last_access_ns = record.last_access_ns.max(time_ns);
                attributed += share;
                if let Some(r) = recorder.as_mut() {
                    let key =
                        crate::recorder::SiteKey::of_record(record.site, record_start, blocks);
                    let latency = o.latency.map(|l| l * share / weight);
                    r.accessed(key, o.kind, share, latency);
                    if let Some(source) = o.data_source {
                        // The sampled page's tier: its own, where the pages were followed,
                        // else the record's where all its pages are in one.
                        let tier = r.page_tier(record_start, overlap_start).or_else(|| {
                            let mut tiers = (0..3).filter(|&t| record.resident.pages(t) > 0);
                            match (record.resident.known(), tiers.next(), tiers.next()) {
                                (true, Some(t), None) => Some(t),
                                _ => None,
                            }
                        });
                        r.served_by(key, source, share, latency, tier);
                    }
                }
            }
        }
        attributed
    }
}
