//! A process's records in address order, in flat arrays.
//!
//! Every interval walks all the records (attribution, the EMA, the candidates), so the store is
//! laid out for the walk: the starts in one array, sorted, and the records in another, in the
//! same order (64 bytes an entry), read front to back at memory speed instead of chasing a
//! B-tree's pointers. A lookup by address is a binary search of the starts alone (8 bytes an
//! entry, where the records take 56).
//!
//! Records come and go between the walks (frees, new objects at the end of an interval,
//! resyncs, new small-object blocks), and an insertion or removal in the middle of an array
//! moves everything after it. So changes are batched:
//!
//! - **a removal** leaves a *tombstone* in place (a record whose location reads
//!   `ResidentPages::REMOVED`, which no real location packs to), which lookups and walks skip,
//!   and an insertion at the same start revives;
//! - **an insertion** past the last entry is appended; one elsewhere is *staged* in a small
//!   sorted map, which lookups and walks read alongside the array;
//! - [`Records::tidy`], once per interval, folds the staged records into the array (one
//!   backward merge) and drops the tombstones (one compacting pass) when either has grown to a
//!   noticeable share of the array; [`Records::settle`] does both unconditionally.
//!
//! Walks are correct whatever was staged or removed; they are fastest when the store is
//! settled, which it mostly is.

use crate::record::{Record, ResidentPages};
use std::collections::{btree_map, BTreeMap};
use std::ops::Range;

/// What a removed entry holds until the next settle.
const TOMBSTONE: Record = Record {
    resident: ResidentPages::REMOVED,
    ..Record::new(0, 0, 0)
};

/// Staged records are folded in once they are more than 1/STAGED_SHARE of the array.
const STAGED_SHARE: usize = 64;
/// Tombstones are dropped once they are more than 1/TOMBSTONE_SHARE of the array.
const TOMBSTONE_SHARE: usize = 8;

/// Records by start address (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct Records {
    /// Ascending, unique.
    starts: Vec<u64>,
    /// The record at each start; removed ones are tombstones.
    records: Vec<Record>,
    /// Inserted since the last settle, not at the end: no start is both here and in `starts`.
    staged: BTreeMap<u64, Record>,
    /// Tombstones in `records`.
    tombstones: usize,
}

fn is_tombstone(record: &Record) -> bool {
    record.resident == ResidentPages::REMOVED
}

impl Records {
    pub fn new() -> Records {
        Records::default()
    }

    /// Live records.
    pub fn len(&self) -> usize {
        self.starts.len() - self.tombstones + self.staged.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where `start` is in the arrays (Ok), or would go (Err).
    fn search(&self, start: u64) -> Result<usize, usize> {
        let i = self.starts.partition_point(|&s| s < start);
        match self.starts.get(i) {
            Some(&s) if s == start => Ok(i),
            _ => Err(i),
        }
    }

    /// Index of the live record at `start` in the arrays, if there is one.
    fn find(&self, start: u64) -> Option<usize> {
        self.search(start)
            .ok()
            .filter(|&i| !is_tombstone(&self.records[i]))
    }

    /// The record starting at `start`.
    pub fn get(&self, start: u64) -> Option<&Record> {
        match self.find(start) {
            Some(i) => Some(&self.records[i]),
            None => self.staged.get(&start),
        }
    }

    pub fn get_mut(&mut self, start: u64) -> Option<&mut Record> {
        match self.find(start) {
            Some(i) => Some(&mut self.records[i]),
            None => self.staged.get_mut(&start),
        }
    }

    /// Inserts the record starting at `start`; returns the one it replaces, if any.
    pub fn insert(&mut self, start: u64, record: Record) -> Option<Record> {
        debug_assert!(
            !is_tombstone(&record),
            "a removed record inserted at {start:#x}"
        );
        match self.search(start) {
            Ok(i) => {
                let old = std::mem::replace(&mut self.records[i], record);
                if is_tombstone(&old) {
                    self.tombstones -= 1;
                    None
                } else {
                    Some(old)
                }
            }
            Err(i) => {
                if let Some(staged) = self.staged.get_mut(&start) {
                    Some(std::mem::replace(staged, record))
                } else if i == self.starts.len() {
                    // Past the last entry (a process's addresses mostly grow): no move.
                    self.starts.push(start);
                    self.records.push(record);
                    None
                } else {
                    self.staged.insert(start, record)
                }
            }
        }
    }

    /// Removes the record starting at `start`.
    pub fn remove(&mut self, start: u64) -> Option<Record> {
        match self.find(start) {
            Some(i) => {
                self.tombstones += 1;
                Some(std::mem::replace(&mut self.records[i], TOMBSTONE))
            }
            None => self.staged.remove(&start),
        }
    }

    /// Removes every record starting in `starts`; returns how many there were.
    pub fn remove_range(&mut self, starts: Range<u64>) -> usize {
        if starts.is_empty() {
            return 0;
        }
        let (lo, hi) = self.bounds(&starts);
        let mut removed = 0;
        for record in &mut self.records[lo..hi] {
            if !is_tombstone(record) {
                *record = TOMBSTONE;
                removed += 1;
            }
        }
        self.tombstones += removed;
        let staged: Vec<u64> = self.staged.range(starts).map(|(&k, _)| k).collect();
        for k in &staged {
            self.staged.remove(k);
        }
        removed + staged.len()
    }

    /// Start of the last record that starts at or before `address`.
    pub fn start_at_or_before(&self, address: u64) -> Option<u64> {
        let i = self.starts.partition_point(|&s| s <= address);
        let in_array = self.records[..i]
            .iter()
            .rposition(|r| !is_tombstone(r))
            .map(|j| self.starts[j]);
        let in_staged = self.staged.range(..=address).next_back().map(|(&k, _)| k);
        in_array.max(in_staged)
    }

    /// The arrays' indices of the entries starting in `starts`.
    fn bounds(&self, starts: &Range<u64>) -> (usize, usize) {
        let lo = self.starts.partition_point(|&s| s < starts.start);
        let hi = lo + self.starts[lo..].partition_point(|&s| s < starts.end);
        (lo, hi)
    }

    /// Every record in address order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            starts: self.starts.iter(),
            records: self.records.iter(),
            staged: self.staged.range(..).peekable(),
        }
    }

    /// Every record in address order, without its start.
    pub fn values(&self) -> impl Iterator<Item = &Record> {
        self.iter().map(|(_, record)| record)
    }

    pub fn iter_mut(&mut self) -> IterMut<'_> {
        IterMut {
            starts: self.starts.iter(),
            records: self.records.iter_mut(),
            staged: self.staged.range_mut(..).peekable(),
        }
    }

    /// The records starting in `starts`, in address order.
    pub fn range(&self, starts: Range<u64>) -> Iter<'_> {
        let (lo, hi, staged) = self.span(starts);
        Iter {
            starts: self.starts[lo..hi].iter(),
            records: self.records[lo..hi].iter(),
            staged: self.staged.range(staged).peekable(),
        }
    }

    pub fn range_mut(&mut self, starts: Range<u64>) -> IterMut<'_> {
        let (lo, hi, staged) = self.span(starts);
        IterMut {
            starts: self.starts[lo..hi].iter(),
            records: self.records[lo..hi].iter_mut(),
            staged: self.staged.range_mut(staged).peekable(),
        }
    }

    /// The arrays' indices and the staged map's range of the records starting in `starts`
    /// (none for an empty range, which a `BTreeMap` range would refuse if reversed).
    fn span(&self, starts: Range<u64>) -> (usize, usize, Range<u64>) {
        if starts.is_empty() {
            return (0, 0, 0..0);
        }
        let (lo, hi) = self.bounds(&starts);
        (lo, hi, starts)
    }

    /// Settles the store when staged records or tombstones have grown past their share of the
    /// array: at most one pass over the array per call, and few calls that do one.
    pub fn tidy(&mut self) {
        if self.staged.len() * STAGED_SHARE > self.starts.len()
            || self.tombstones * TOMBSTONE_SHARE > self.starts.len()
        {
            self.settle();
        }
    }

    /// Drops the tombstones and merges the staged records into the array.
    pub fn settle(&mut self) {
        if self.tombstones > 0 {
            // Entries before the first tombstone stay where they are.
            let first = self.records.iter().position(is_tombstone).unwrap_or(0);
            let mut kept = first;
            for i in first..self.starts.len() {
                if !is_tombstone(&self.records[i]) {
                    self.starts[kept] = self.starts[i];
                    self.records[kept] = self.records[i].clone();
                    kept += 1;
                }
            }
            self.starts.truncate(kept);
            self.records.truncate(kept);
            self.tombstones = 0;
        }
        if self.staged.is_empty() {
            return;
        }
        let mut staged: Vec<(u64, Record)> = std::mem::take(&mut self.staged).into_iter().collect();
        let old = self.starts.len();
        // Backward merge in place: the arrays grow by the staged count (the new slots hold
        // copies, each overwritten below), then, from the top, each slot takes the larger of
        // the last unmerged entry and the last staged record.
        self.starts.extend(staged.iter().map(|(start, _)| start));
        self.records
            .extend(staged.iter().map(|(_, record)| record.clone()));
        let (mut unmerged, mut slot) = (old, self.starts.len());
        while let Some((start, record)) = staged.pop() {
            while unmerged > 0 && self.starts[unmerged - 1] > start {
                self.starts[slot - 1] = self.starts[unmerged - 1];
                self.records.swap(unmerged - 1, slot - 1);
                unmerged -= 1;
                slot -= 1;
            }
            slot -= 1;
            self.starts[slot] = start;
            self.records[slot] = record;
        }
    }
}

impl std::ops::Index<&u64> for Records {
    type Output = Record;

    fn index(&self, start: &u64) -> &Record {
        self.get(*start)
            .unwrap_or_else(|| panic!("no record starts at {start:#x}"))
    }
}

impl<'a> IntoIterator for &'a Records {
    type Item = (u64, &'a Record);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Records in address order: the arrays' live entries (tombstones skipped) merged with the
/// staged ones. `A` walks the records array and `S` the staged map, both by reference or both
/// by mutable reference: [`Iter`] and [`IterMut`].
pub struct Merged<'a, A, S: Iterator> {
    starts: std::slice::Iter<'a, u64>,
    records: A,
    staged: std::iter::Peekable<S>,
}

/// Records in address order.
pub type Iter<'a> = Merged<'a, std::slice::Iter<'a, Record>, btree_map::Range<'a, u64, Record>>;

/// Records in address order, mutable.
pub type IterMut<'a> =
    Merged<'a, std::slice::IterMut<'a, Record>, btree_map::RangeMut<'a, u64, Record>>;

impl<'a, R, A, S> Iterator for Merged<'a, A, S>
where
    R: std::ops::Deref<Target = Record>,
    A: Iterator<Item = R>,
    S: Iterator<Item = (&'a u64, R)>,
{
    type Item = (u64, R);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let next_staged = self.staged.peek().map(|(&k, _)| k);
        loop {
            match self.starts.as_slice().first() {
                Some(&start) if next_staged.is_none_or(|s| start < s) => {
                    self.starts.next();
                    let record = self.records.next().expect("as many records as starts");
                    if !is_tombstone(&record) {
                        return Some((start, record));
                    }
                }
                _ => return self.staged.next().map(|(&k, r)| (k, r)),
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (_, staged) = self.staged.size_hint();
        (0, staged.map(|s| s + self.starts.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record(len: u64) -> Record {
        Record::new(len, len, 0)
    }

    /// The store against a `BTreeMap` given the same operations.
    fn same(records: &Records, model: &BTreeMap<u64, Record>) {
        assert_eq!(records.len(), model.len());
        let got: Vec<(u64, Record)> = records.iter().map(|(k, r)| (k, r.clone())).collect();
        let want: Vec<(u64, Record)> = model.iter().map(|(&k, r)| (k, r.clone())).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn walks_in_address_order_whatever_the_insertion_order() {
        let mut records = Records::new();
        for start in [0x5000, 0x1000, 0x9000, 0x3000, 0xa000, 0x2000] {
            assert!(records.insert(start, record(1)).is_none());
        }
        let starts: Vec<u64> = records.iter().map(|(k, _)| k).collect();
        assert_eq!(starts, [0x1000, 0x2000, 0x3000, 0x5000, 0x9000, 0xa000]);
        records.settle();
        let settled: Vec<u64> = records.iter().map(|(k, _)| k).collect();
        assert_eq!(settled, starts);
        assert_eq!(records.len(), 6);
    }

    #[test]
    fn insert_replaces_and_remove_forgets() {
        let mut records = Records::new();
        records.insert(0x1000, record(1));
        records.insert(0x3000, record(1));
        records.insert(0x2000, record(1)); // staged
        assert_eq!(records.insert(0x1000, record(2)).map(|r| r.len), Some(1));
        assert_eq!(records.insert(0x2000, record(3)).map(|r| r.len), Some(1));
        assert_eq!(records.len(), 3);
        assert_eq!(records.remove(0x1000).map(|r| r.len), Some(2));
        assert_eq!(records.remove(0x2000).map(|r| r.len), Some(3));
        assert!(records.remove(0x1000).is_none(), "removed already");
        assert!(records.get(0x1000).is_none() && records.get(0x2000).is_none());
        assert_eq!(records.len(), 1);
        // A removed start comes back in place.
        assert!(records.insert(0x1000, record(4)).is_none());
        assert_eq!(records[&0x1000].len, 4);
        assert_eq!(records.len(), 2);
    }

    /// A record of no pages (a `--split` that is not a whole number of pages can make one) is a
    /// record like any other.
    #[test]
    fn a_record_of_no_pages_is_kept() {
        let mut records = Records::new();
        records.insert(0x2000, record(1));
        records.insert(0x1000, record(0)); // staged
        records.insert(0x3000, record(0));
        assert_eq!(records.len(), 3);
        records.settle();
        let starts: Vec<u64> = records.iter().map(|(k, _)| k).collect();
        assert_eq!(starts, [0x1000, 0x2000, 0x3000]);
        assert_eq!(records[&0x3000].len, 0);
        assert_eq!(records.remove(0x3000).map(|r| r.len), Some(0));
        assert_eq!(records.len(), 2);
    }

    #[test]
    fn lookups_of_missing_addresses_find_nothing() {
        let mut records = Records::new();
        assert!(records.get(0x1000).is_none());
        assert!(records.get_mut(0x1000).is_none());
        assert!(records.remove(0x1000).is_none());
        assert_eq!(records.start_at_or_before(0x1000), None);
        records.insert(0x2000, record(2));
        records.insert(0x8000, record(1));
        records.insert(0x5000, record(1)); // staged
        for missing in [0, 0x1000, 0x2001, 0x3000, 0x4fff, 0x6000, 0x9000, u64::MAX] {
            assert!(records.get(missing).is_none(), "{missing:#x}");
            assert!(records.get_mut(missing).is_none(), "{missing:#x}");
        }
        assert_eq!(records.start_at_or_before(0x1fff), None);
        assert_eq!(records.start_at_or_before(0x2000), Some(0x2000));
        assert_eq!(records.start_at_or_before(0x4fff), Some(0x2000));
        assert_eq!(records.start_at_or_before(0x5000), Some(0x5000));
        assert_eq!(records.start_at_or_before(0x7fff), Some(0x5000));
        assert_eq!(records.start_at_or_before(u64::MAX), Some(0x8000));
        records.remove(0x8000);
        assert_eq!(
            records.start_at_or_before(u64::MAX),
            Some(0x5000),
            "a tombstone"
        );
    }

    #[test]
    fn ranges_include_their_start_and_exclude_their_end() {
        let mut records = Records::new();
        for start in [0x1000, 0x2000, 0x4000] {
            records.insert(start, record(1));
        }
        records.insert(0x3000, record(1)); // staged
        let range = |r: &Records, lo: u64, hi: u64| -> Vec<u64> {
            r.range(lo..hi).map(|(k, _)| k).collect()
        };
        assert_eq!(range(&records, 0x1000, 0x4000), [0x1000, 0x2000, 0x3000]);
        assert_eq!(range(&records, 0x1001, 0x4001), [0x2000, 0x3000, 0x4000]);
        assert_eq!(range(&records, 0x3000, 0x3001), [0x3000]);
        assert_eq!(range(&records, 0, 0x1000), Vec::<u64>::new());
        assert_eq!(range(&records, 0x5000, u64::MAX), Vec::<u64>::new());
        assert_eq!(range(&records, 0x3000, 0x3000), Vec::<u64>::new());
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = records.range(0x4000..0x1000).count();
        assert_eq!(backwards, 0);
        for (_, r) in records.range_mut(0x2000..0x4000) {
            r.site = 7;
        }
        let sites: Vec<u64> = records.iter().map(|(_, r)| r.site).collect();
        assert_eq!(sites, [1, 7, 7, 1]);
    }

    #[test]
    fn remove_range_takes_every_record_starting_inside() {
        let mut records = Records::new();
        for start in [0x1000, 0x2000, 0x4000, 0x5000] {
            records.insert(start, record(1));
        }
        records.insert(0x3000, record(1)); // staged
        assert_eq!(records.remove_range(0x2000..0x5000), 3);
        assert_eq!(records.remove_range(0x2000..0x5000), 0, "removed already");
        let starts: Vec<u64> = records.iter().map(|(k, _)| k).collect();
        assert_eq!(starts, [0x1000, 0x5000]);
        assert_eq!(records.len(), 2);
        records.settle();
        assert_eq!(records.len(), 2);
        assert_eq!(records.starts.len(), 2, "tombstones dropped");
        assert_eq!(records.records.len(), 2);
    }

    /// One change or lookup of the store, as the property test below draws them.
    #[derive(Clone, Debug)]
    enum Op {
        Insert(u64, u64),
        Remove(u64),
        RemoveRange(u64, u64),
        Look(u64, u64),
        Tidy,
        Settle,
    }

    fn op() -> impl Strategy<Value = Op> {
        let start = (0..128u64).prop_map(|page| page * 0x1000);
        prop_oneof![
            8 => (start.clone(), 1..17u64).prop_map(|(s, len)| Op::Insert(s, len)),
            5 => start.clone().prop_map(Op::Remove),
            1 => (start.clone(), 0..0x10_000u64).prop_map(|(s, len)| Op::RemoveRange(s, len)),
            2 => (start, 0..0x10_000u64).prop_map(|(s, len)| Op::Look(s, len)),
            1 => Just(Op::Tidy),
            1 => Just(Op::Settle),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any sequence of changes and lookups, settled now and then, agrees with a
        /// `BTreeMap` after every step.
        #[test]
        fn changes_agree_with_a_btree_map(ops in proptest::collection::vec(op(), 0..400)) {
            let mut records = Records::new();
            let mut model = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(start, len) => {
                        let r = record(len);
                        prop_assert_eq!(records.insert(start, r.clone()), model.insert(start, r));
                    }
                    Op::Remove(start) => {
                        prop_assert_eq!(records.remove(start), model.remove(&start));
                    }
                    Op::RemoveRange(start, len) => {
                        let end = start + len;
                        let doomed: Vec<u64> = model.range(start..end).map(|(&k, _)| k).collect();
                        for k in &doomed {
                            model.remove(k);
                        }
                        prop_assert_eq!(records.remove_range(start..end), doomed.len());
                    }
                    Op::Look(start, len) => {
                        prop_assert_eq!(records.get(start), model.get(&start));
                        let end = start + len;
                        let got: Vec<u64> = records.range(start..end).map(|(k, _)| k).collect();
                        let want: Vec<u64> = model.range(start..end).map(|(&k, _)| k).collect();
                        prop_assert_eq!(got, want);
                        let floor = model.range(..=start).next_back().map(|(&k, _)| k);
                        prop_assert_eq!(records.start_at_or_before(start), floor);
                    }
                    Op::Tidy => records.tidy(),
                    Op::Settle => {
                        records.settle();
                        prop_assert_eq!(records.tombstones, 0);
                        prop_assert!(records.staged.is_empty());
                        prop_assert!(records.starts.windows(2).all(|w| w[0] < w[1]));
                        prop_assert_eq!(records.starts.len(), records.records.len());
                    }
                }
                same(&records, &model);
            }
        }
    }
}
