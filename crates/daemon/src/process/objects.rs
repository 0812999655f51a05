//! A process's object table: its live objects, the records they are tracked as, this
//! interval's allocations not yet records, its small-object blocks, and the advice on its
//! memory.
//!
//! Allocations are buffered until the end of the interval (section 3.2.1): an object freed
//! before then never becomes a record. Objects larger than the split size become several
//! records (section 3.2.2), so the hot part of a huge array can move without the rest. The
//! table keeps the three in step: an object's records come and go with it, and so does the
//! advice inside it.

use crate::pending::PendingObjects;
use crate::record::{Object, Record};
use crate::records::Records;
use objtier_policy::split_ranges;
use std::collections::{BTreeMap, HashSet};

const PAGE_BYTES: u64 = objtier_wire::PAGE_SIZE as u64;

/// Most advised ranges kept per process: a bound on what a process can make the daemon store.
const MAX_ADVICE_RANGES: usize = 1 << 16;
/// Most records one object splits into: past 65,536 × the split (128 GiB at the smallest
/// split), an object's records are larger than the split. A process may announce an object of
/// any size up to the address space's: 2^47 bytes in 2 MiB records would be 2^26 records
/// (gigabytes of the daemon's memory, seconds of its time) for one event.
pub const MAX_RECORDS_PER_OBJECT: u64 = 1 << 16;

/// Advice from `objtier_advise`: start -> (len, advice bits).
pub type Advice = BTreeMap<u64, (u64, u32)>;

/// A process's objects, records, pending allocations, blocks and advice (see the module doc).
pub struct ObjectTable {
    objects: BTreeMap<u64, Object>,
    records: Records,
    /// Bumped whenever a record is added or removed, so that what is derived from the set of
    /// records (the access source's ranges) is recomputed only when it changed.
    generation: u64,
    /// Allocations of this interval not yet promoted to records: one insert and one remove for
    /// every tracked object a program allocates and frees (`pending.rs`).
    pending: PendingObjects,
    /// Small-object blocks (start -> length): also in `objects`, but a resync, which
    /// re-announces only objects, must not forget them.
    blocks: BTreeMap<u64, u64>,
    advice: Advice,
    split_bytes: u64,
}

/// The advice bits of every advised range (start -> (len, bits)) that overlaps [start, start + len).
pub fn advice_for(advice: &Advice, start: u64, len: u64) -> u32 {
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

impl ObjectTable {
    /// An empty table whose objects larger than `split_bytes` become several records.
    pub fn new(split_bytes: u64) -> ObjectTable {
        ObjectTable {
            objects: BTreeMap::new(),
            records: Records::new(),
            generation: 0,
            pending: PendingObjects::new(),
            blocks: BTreeMap::new(),
            advice: BTreeMap::new(),
            split_bytes,
        }
    }

    pub fn split_bytes(&self) -> u64 {
        self.split_bytes
    }

    /// The live objects (blocks among them), by start.
    pub fn objects(&self) -> &BTreeMap<u64, Object> {
        &self.objects
    }

    pub fn records(&self) -> &Records {
        &self.records
    }

    /// The records, for their access counters and locations (not to add or remove any: the
    /// table does that with the objects).
    pub fn records_mut(&mut self) -> &mut Records {
        &mut self.records
    }

    /// The records and the advice on them, at once (the interval's snapshot walks the first
    /// and reads the second).
    pub fn records_and_advice_mut(&mut self) -> (&mut Records, &Advice) {
        (&mut self.records, &self.advice)
    }

    /// The records and the small-object blocks, at once (attribution counts a block's
    /// accesses apart for a profile).
    pub fn records_and_blocks_mut(&mut self) -> (&mut Records, &BTreeMap<u64, u64>) {
        (&mut self.records, &self.blocks)
    }

    /// Takes the records out, leaving the table inconsistent: only for measuring what they
    /// hold (bench/engine), on a table about to be dropped.
    pub fn take_records(&mut self) -> Records {
        std::mem::take(&mut self.records)
    }

    /// Takes the objects out, as [`ObjectTable::take_records`] does the records.
    pub fn take_objects(&mut self) -> BTreeMap<u64, Object> {
        std::mem::take(&mut self.objects)
    }

    /// Changes whenever a record is added or removed.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// This interval's allocations, not yet records.
    pub fn pending(&self) -> &PendingObjects {
        &self.pending
    }

    pub(super) fn pending_mut(&mut self) -> &mut PendingObjects {
        &mut self.pending
    }

    /// The small-object blocks, start -> length.
    pub fn blocks(&self) -> &BTreeMap<u64, u64> {
        &self.blocks
    }

    pub fn advice(&self) -> &Advice {
        &self.advice
    }

    /// Advice bits that apply to `[start, start + len)` (the union of overlapping advice).
    pub fn advice_for(&self, start: u64, len: u64) -> u32 {
        advice_for(&self.advice, start, len)
    }

    /// Sets advice for `[start, start + len)`; advice 0 clears what overlaps the range.
    pub(super) fn set_advice(&mut self, start: u64, len: u64, hints: u32) {
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

    /// A live object at `start` and its records (no access history yet).
    pub(super) fn insert(&mut self, start: u64, object: Object) {
        self.generation += 1;
        let split = self.split_bytes.max(
            object
                .len
                .div_ceil(MAX_RECORDS_PER_OBJECT)
                .next_multiple_of(PAGE_BYTES),
        );
        for (record_start, len) in split_ranges(start, object.len, split) {
            self.records.insert(
                record_start,
                Record::new(len, object.site, object.created_ns),
            );
        }
        self.objects.insert(start, object);
    }

    /// Removes the object at `start`, if any; true if there was one.
    pub(super) fn remove(&mut self, start: u64) -> bool {
        self.take(start).is_some()
    }

    /// Removes the object at `start` and its records and advice; returns it.
    pub(super) fn take(&mut self, start: u64) -> Option<Object> {
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
            self.generation += 1;
        }
        Some(object)
    }

    /// A small-object block at `start`: tracked and tiered like an object of no site, from the
    /// start. True if it was not known as a block before.
    pub(super) fn map_block(&mut self, start: u64, len: u64, created_ns: u64) -> bool {
        self.remove(start);
        let new = self.blocks.insert(start, len).is_none();
        self.insert(
            start,
            Object {
                len,
                site: 0,
                created_ns,
            },
        );
        new
    }

    /// The block at `start` was unmapped.
    pub(super) fn unmap_block(&mut self, start: u64) {
        if self.blocks.remove(&start).is_some() {
            self.remove(start);
        }
    }

    /// Whether `start` holds an object, or a pending allocation, of `len` bytes.
    pub(super) fn knows(&self, start: u64, len: u64) -> bool {
        self.objects.get(&start).is_some_and(|o| o.len == len)
            || self.pending.get(&start).is_some_and(|o| o.len == len)
    }

    /// The objects and pending allocations starting in `[lo, hi)` that `seen` does not hold
    /// (blocks excepted) are forgotten: a resync step did not re-announce them. Returns how
    /// many.
    pub(super) fn forget_unseen(&mut self, lo: u64, hi: u64, seen: &HashSet<u64>) -> u64 {
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
        let forgotten = gone.len() as u64;
        for start in gone {
            if self.pending.remove(&start).is_none() {
                self.remove(start);
            }
        }
        forgotten
    }

    /// End of interval: `pending` (this interval's surviving allocations, in address order)
    /// become records. New records in the middle of the address space are staged; they are
    /// merged, and the records removed since are dropped, once they are enough to be worth a
    /// pass ([`Records::tidy`]).
    pub(super) fn commit(&mut self, pending: Vec<(u64, Object)>) {
        for (start, object) in pending {
            self.insert(start, object);
        }
        self.records.tidy();
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
