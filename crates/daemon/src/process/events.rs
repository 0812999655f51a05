//! The event protocol: what a process's ring says, applied to its state.
//!
//! Events arrive from shared memory the process controls, so each is validated; a bad one is
//! counted and skipped.

use super::resync::StepEnd;
use super::Process;
use crate::record::{Object, Record};
use crate::recorder::SiteKey;
use objtier_wire::{advice, event_flags, Event, EventKind, PAGE_SIZE};
use std::sync::atomic::Ordering;

/// Largest object the daemon believes (the whole 47-bit user address space).
pub(super) const MAX_OBJECT_BYTES: u64 = 1 << 47;
/// Events [`Process::drain`] takes from the ring at a time (2.5 KiB of them on its stack).
const DRAIN_BATCH: usize = 64;
/// Accepted priorities (as `objtier_set_priority` checks).
const PRIORITY_RANGE: std::ops::RangeInclusive<i64> = -1000..=1000;

impl Process {
    /// Consumes everything in the ring. Returns the number of events read.
    ///
    /// Events are taken a batch at a time, and the pending slots of the whole batch are asked
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
                let lifetimes = &mut self.lifetimes;
                let recorder = &mut self.recorder;
                let taken_back = |event: &Event| {
                    stats.cancelled_allocations += 1;
                    let len = event.len.min(MAX_OBJECT_BYTES);
                    stats.allocated_bytes = stats.allocated_bytes.saturating_add(len);
                    *unclaimed = unclaimed.saturating_add(len);
                    // (A profiled process takes nothing back; one attached before the daemon
                    // set the flag may have: it lived less than the daemon's reading took.)
                    if let Some(r) = recorder.as_mut() {
                        let key = SiteKey::of_object(event.site);
                        r.allocated(key, len);
                        r.freed(key, len, event.time_ns, event.time_ns);
                    }
                    // Freed before the daemon could read it: it died young.
                    let t = event.time_ns;
                    lifetimes.died(event.site, t, t);
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
                self.objects.pending().prefetch(start);
            }
            for event in &batch[..len] {
                self.apply(event);
            }
            if len < DRAIN_BATCH {
                break;
            }
        }
        if self.resync.request_if_dropped(&self.ring, served) {
            self.stats.resyncs += 1;
        }
        n
    }

    /// Applies one event from the ring.
    fn apply(&mut self, event: &Event) {
        self.stats.events += 1;
        let kind = EventKind::from_raw(event.kind);
        // No object starts at address 0 (mmap never places one there), and the pending table
        // takes 0 for an empty slot.
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
                        r.allocated(SiteKey::of_object(object.site), object.len);
                    }
                    self.allocated(event.addr, object);
                }
            }
            Some(EventKind::Free) if valid_range => {
                let object = if let Some(object) = self.objects.pending_mut().remove(&event.addr) {
                    self.stats.ephemeral_objects += 1;
                    Some(object)
                } else {
                    let object = self.objects.take(event.addr);
                    if object.is_none() {
                        self.stats.frees_of_unknown += 1;
                    }
                    object
                };
                if let (Some(object), Some(r)) = (object, &mut self.recorder) {
                    let key = SiteKey::of_object(object.site);
                    r.freed(key, object.len, object.created_ns, event.time_ns);
                }
                if let Some(object) = object {
                    self.lifetimes
                        .died(object.site, object.created_ns, event.time_ns);
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
                if self.objects.map_block(event.addr, event.len, event.time_ns) {
                    if let Some(r) = &mut self.recorder {
                        r.block_mapped();
                    }
                }
            }
            Some(EventKind::BlockUnmap) if valid_range => self.objects.unmap_block(event.addr),
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
            Some(EventKind::ResyncBegin) => {
                let dropped = self.ring.header().dropped.load(Ordering::Relaxed);
                if !self.resync.begin(event.addr, event.len, dropped) {
                    self.stats.invalid_events += 1;
                }
            }
            Some(EventKind::ResyncEnd) => self.resync_end(event.addr, event.len),
            _ => self.stats.invalid_events += 1,
        }
    }

    /// Records advice for `[start, start + len)`; advice 0 clears what overlaps the range.
    pub(super) fn advise(&mut self, start: u64, len: u64, hints: u32) {
        self.stats.advice_events += 1;
        self.objects.set_advice(start, len, hints);
    }

    /// An object re-announced at attach or in a resync. A known object (same start and length)
    /// keeps its records and their access history.
    fn snapshot_object(&mut self, start: u64, object: Object) {
        let known = self.objects.knows(start, object.len);
        if self.resync.saw(start) && !known {
            self.stats.resync_learnt_objects += 1;
        }
        if known {
            return;
        }
        if let Some(r) = &mut self.recorder {
            r.allocated(SiteKey::of_object(object.site), object.len);
        }
        self.objects.pending_mut().remove(&start);
        self.objects.remove(start);
        self.objects.insert(start, object);
    }

    /// A new object of this interval at `start`. An address can only hold one object: a new one
    /// replaces the old.
    fn allocated(&mut self, start: u64, object: Object) {
        self.objects.remove(start);
        self.stats.allocated_bytes += object.len;
        self.allocated_unclaimed += object.len;
        self.objects.pending_mut().insert(start, object);
    }

    /// The object at `from` now occupies `[start, start + len)` (`realloc` moved or resized it).
    /// It keeps its site and age, and its records' history goes with the bytes: each new record
    /// takes the accesses of the old records over the same offsets (the data a move keeps), so
    /// a grown array is ranked as before, and a new tail starts with none. An object not yet a
    /// record stays one of this interval's allocations. The advice on it moves with it. A move
    /// from an unknown start (its allocation was dropped) is an allocation.
    fn moved(&mut self, from: u64, start: u64, len: u64, time_ns: u64) {
        let pending = self.objects.pending_mut().remove(&from);
        let known = pending.or_else(|| {
            let object = self.objects.objects().get(&from).copied();
            object.filter(|_| !self.objects.blocks().contains_key(&from))
        });
        let Some(old) = known else {
            let created_ns = time_ns;
            if let Some(r) = &mut self.recorder {
                r.allocated(SiteKey::Unknown, len);
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
            r.resized(SiteKey::of_object(old.site), old.len, len);
        }
        if pending.is_some() {
            self.objects.remove(start);
            self.objects
                .pending_mut()
                .insert(start, Object { len, ..old });
            return;
        }
        let history: Vec<(u64, Record)> = self
            .objects
            .records()
            .range(from..from + old.len)
            .map(|(s, r)| (s - from, r.clone()))
            .collect();
        let advice: Vec<(u64, u64, u32)> = self
            .objects
            .advice()
            .range(from..from + old.len)
            .filter(|(&s, &(l, _))| s + l <= from + old.len)
            .map(|(&s, &(l, hints))| (s - from, l, hints))
            .collect();
        self.objects.remove(from);
        self.objects.remove(start);
        self.objects.insert(start, Object { len, ..old });
        // Still young, so not yet counted for its site: looked at again by the next commits at
        // its new start and length (the entry under the old ones no longer matches).
        self.lifetimes.moved(start, Object { len, ..old }, time_ns);
        for (record_start, record) in self.objects.records_mut().range_mut(start..start + len) {
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
                self.objects.set_advice(start + offset, advised_len, hints);
            }
        }
    }

    /// Ends a resync step: objects starting in `[lo, hi)` that the step did not re-announce are
    /// gone (their frees were dropped), unless the step itself lost events.
    fn resync_end(&mut self, hi: u64, request: u64) {
        let dropped = self.ring.header().dropped.load(Ordering::Relaxed);
        match self.resync.end(hi, request, dropped) {
            StepEnd::Invalid => self.stats.invalid_events += 1,
            StepEnd::Incomplete => {}
            StepEnd::Complete { lo, seen } => {
                self.stats.resync_forgotten_objects += self.objects.forget_unseen(lo, hi, &seen);
            }
        }
    }
}
