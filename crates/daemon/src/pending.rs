//! This interval's new objects, by start address, until they become records.
//!
//! Every tracked allocation a program makes is inserted here and, if the program frees it before
//! the next commit, removed again: millions of times a second under an allocation-heavy program
//! (bench/alloc `cleaner` sends 2.2 M events in 1.3 s). The removal comes long after the
//! insertion, when the program has written hundreds of MiB since and the entry has left every
//! cache, so each one waited for memory; with a standard hash map that wait was a third of the
//! daemon's time and the largest part of its cost per event (bench/engine `--events-only`).
//!
//! So this is an open-addressing table whose slot for a key can be computed before it is
//! looked up: [`PendingObjects::prefetch`] asks the processor for the slot's line, and the
//! daemon does that for a whole batch of events before applying any, so the misses of a batch
//! overlap instead of coming one at a time. Linear probing (a key's neighbours share its cache
//! line), at most half full, deletion by shifting the entries after it back (no tombstones to
//! lengthen the probes of a table that sees as many removals as insertions). The hash is a
//! multiplication by a per-table random odd number: the keys come from the program, which must
//! not be able to choose addresses that collide.

use crate::record::Object;

/// A slot: `start` 0 is empty (no object starts at address 0). Aligned to its size, so that no
/// slot straddles two cache lines (a vector's memory is only 16-byte aligned otherwise).
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Slot {
    start: u64,
    object: Object,
}

const EMPTY: Slot = Slot {
    start: 0,
    object: Object {
        len: 0,
        site: 0,
        created_ns: 0,
    },
};

/// Fewest slots a table has.
const MIN_SLOTS: usize = 16;

/// Objects by start address (see the module doc).
pub struct PendingObjects {
    slots: Vec<Slot>,
    len: usize,
    /// The most objects held since the last [`drain`](Self::drain).
    peak_len: usize,
    /// Odd; the hash is `start * multiplier`, its top `bits` bits the first slot to probe.
    multiplier: u64,
    bits: u32,
}

impl Default for PendingObjects {
    fn default() -> Self {
        Self::new()
    }
}

impl PendingObjects {
    pub fn new() -> Self {
        use std::hash::BuildHasher;
        let random = std::collections::hash_map::RandomState::new().hash_one(0x0b7_1e4u64);
        Self {
            slots: vec![EMPTY; MIN_SLOTS],
            len: 0,
            peak_len: 0,
            multiplier: random | 1,
            bits: MIN_SLOTS.trailing_zeros(),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot where the probe for `start` begins.
    #[inline]
    fn home(&self, start: u64) -> usize {
        // The top bits of the product: every bit of the start reaches them, the page offset's
        // zeros included.
        (start.wrapping_mul(self.multiplier) >> (64 - self.bits)) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot holding `start`, if any.
    #[inline]
    fn find(&self, start: u64) -> Option<usize> {
        if start == 0 {
            return None;
        }
        let mut i = self.home(start);
        loop {
            match self.slots[i].start {
                s if s == start => return Some(i),
                0 => return None,
                _ => i = (i + 1) & self.mask(),
            }
        }
    }

    /// Asks the processor to bring in the slot where `start`'s probe begins, and the one after
    /// it (which a removal reads, and which every other slot starts another cache line),
    /// without waiting for them: a later `get`, `insert` or `remove` of `start` then finds them
    /// in the cache.
    #[inline]
    pub fn prefetch(&self, start: u64) {
        let home = self.home(start);
        for i in [home, (home + 1) & self.mask()] {
            let slot: *const Slot = &self.slots[i];
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch is only a hint; the address is of a slot of our own vector.
            unsafe {
                core::arch::x86_64::_mm_prefetch(slot as *const i8, core::arch::x86_64::_MM_HINT_T0)
            };
            #[cfg(not(target_arch = "x86_64"))]
            let _ = slot;
        }
    }

    pub fn get(&self, start: &u64) -> Option<&Object> {
        self.find(*start).map(|i| &self.slots[i].object)
    }

    pub fn contains_key(&self, start: &u64) -> bool {
        self.find(*start).is_some()
    }

    /// Inserts or replaces the object at `start` (which must not be 0: no object starts there);
    /// returns the one it replaced.
    pub fn insert(&mut self, start: u64, object: Object) -> Option<Object> {
        assert_ne!(start, 0, "an object at address 0");
        if (self.len + 1) * 2 > self.slots.len() {
            self.resize(self.slots.len() * 2);
        }
        let mut i = self.home(start);
        loop {
            let slot = &mut self.slots[i];
            if slot.start == start {
                return Some(std::mem::replace(&mut slot.object, object));
            }
            if slot.start == 0 {
                *slot = Slot { start, object };
                self.len += 1;
                self.peak_len = self.peak_len.max(self.len);
                return None;
            }
            i = (i + 1) & self.mask();
        }
    }

    pub fn remove(&mut self, start: &u64) -> Option<Object> {
        let mut hole = self.find(*start)?;
        let removed = self.slots[hole].object;
        self.len -= 1;
        // Shift back each later entry of the run whose home is not between the hole and it, so
        // that no probe meets an empty slot before its key.
        let mask = self.mask();
        let mut i = hole;
        loop {
            i = (i + 1) & mask;
            let slot = self.slots[i];
            if slot.start == 0 {
                break;
            }
            let home = self.home(slot.start);
            // Distance from home to i, and from the hole to i, around the ring.
            if (i.wrapping_sub(home) & mask) >= (i.wrapping_sub(hole) & mask) {
                self.slots[hole] = slot;
                hole = i;
            }
        }
        self.slots[hole] = EMPTY;
        Some(removed)
    }

    /// The starts of every object, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = &u64> + '_ {
        self.slots.iter().filter(|s| s.start != 0).map(|s| &s.start)
    }

    /// Every object, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &Object> + '_ {
        self.slots
            .iter()
            .filter(|s| s.start != 0)
            .map(|s| &s.object)
    }

    /// Takes every object out, leaving the table empty. It keeps its slots for the next
    /// interval's objects, unless it held fewer than an eighth of them at its fullest since the
    /// last drain: each interval would otherwise grow it again, by doubling, into fresh memory
    /// the kernel must fault in and clear (a quarter of the daemon's time under bench/alloc
    /// `cleaner`, when every commit started the table over).
    pub fn drain(&mut self) -> Vec<(u64, Object)> {
        let taken: Vec<(u64, Object)> = self
            .slots
            .iter()
            .filter(|s| s.start != 0)
            .map(|s| (s.start, s.object))
            .collect();
        let enough = (self.peak_len * 2).next_power_of_two().max(MIN_SLOTS);
        if enough * 4 <= self.slots.len() {
            self.slots = vec![EMPTY; enough];
            self.bits = enough.trailing_zeros();
        } else {
            self.slots.fill(EMPTY);
        }
        self.len = 0;
        self.peak_len = 0;
        taken
    }

    fn resize(&mut self, slots: usize) {
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; slots]);
        self.bits = slots.trailing_zeros();
        self.len = 0;
        for slot in old.into_iter().filter(|s| s.start != 0) {
            self.insert(slot.start, slot.object);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn object(n: u64) -> Object {
        Object {
            len: n * 4096,
            site: n,
            created_ns: n + 1,
        }
    }

    #[test]
    fn behaves_as_a_map_under_random_inserts_and_removes() {
        let mut table = PendingObjects::new();
        let mut reference = HashMap::new();
        let mut x = 0x1234_5678u64;
        for step in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct keys, so that removals hit and runs form and break.
            let start = (1 + x % 3000) * 4096;
            match x >> 62 {
                0 | 1 => assert_eq!(
                    table.insert(start, object(step)),
                    reference.insert(start, object(step))
                ),
                2 => assert_eq!(table.remove(&start), reference.remove(&start)),
                _ => assert_eq!(table.get(&start), reference.get(&start)),
            }
            assert_eq!(table.len(), reference.len());
        }
        let mut keys: Vec<u64> = table.keys().copied().collect();
        let mut expected: Vec<u64> = reference.keys().copied().collect();
        keys.sort_unstable();
        expected.sort_unstable();
        assert_eq!(keys, expected);
        for (start, o) in &reference {
            assert_eq!(table.get(start), Some(o));
            table.prefetch(*start);
        }
    }

    #[test]
    fn drain_empties_and_the_table_is_usable_after() {
        let mut table = PendingObjects::new();
        for i in 1..=1000 {
            table.insert(i * 4096, object(i));
        }
        let mut drained = table.drain();
        drained.sort_unstable_by_key(|&(start, _)| start);
        assert_eq!(drained.len(), 1000);
        assert_eq!(drained[0], (4096, object(1)));
        assert!(table.is_empty() && table.keys().next().is_none());
        assert_eq!(table.get(&4096), None);
        table.insert(4096, object(7));
        assert_eq!(table.remove(&4096), Some(object(7)));
        assert_eq!(table.remove(&4096), None);
    }

    #[test]
    fn drain_keeps_the_slots_of_a_busy_interval_and_gives_back_those_of_a_quiet_one() {
        let mut table = PendingObjects::new();
        for i in 1..=1000 {
            table.insert(i * 4096, object(i));
        }
        let busy = table.slots.len();
        table.drain();
        assert_eq!(table.slots.len(), busy, "kept for the next interval");
        for i in 1..=10 {
            table.insert(i * 4096, object(i));
        }
        table.drain();
        assert!(
            table.slots.len() < busy / 4,
            "{} slots kept",
            table.slots.len()
        );
        table.insert(4096, object(1));
        assert_eq!(table.get(&4096), Some(&object(1)));
    }

    #[test]
    fn address_zero_is_never_found() {
        let table = PendingObjects::new();
        assert_eq!(table.get(&0), None);
        assert!(!table.contains_key(&0));
    }

    #[test]
    fn keys_spaced_by_powers_of_two_spread_over_the_table() {
        // Objects of 2^k pages allocated back to back: starts that share their low bits.
        let mut table = PendingObjects::new();
        for i in 1..=4096u64 {
            table.insert(i << 24, object(i));
        }
        let longest_probe = (1..=4096u64)
            .map(|i| {
                let start = i << 24;
                let found = table.find(start).unwrap();
                found.wrapping_sub(table.home(start)) & table.mask()
            })
            .max()
            .unwrap();
        assert!(longest_probe < 64, "a probe of {longest_probe} slots");
    }
}
