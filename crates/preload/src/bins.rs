//! An index of free extents by size, in constant time: segregated fits in the manner of TLSF
//! (two-level segregated fit).
//!
//! Extents are binned by page count into classes: one per count below 8 pages, then 8 classes
//! per power of two (8, 9, ..., 15; 16-17, ..., 30-31; 32-35, ...), so a class spans at most an
//! eighth of its sizes. Two levels of bitmaps (which powers of two have a non-empty class, and
//! which of their 8 classes are non-empty) find the first non-empty class at or above a size in
//! a few instructions. A request is rounded up to the next class boundary, so that any extent
//! of the class found fits; the request's own class is searched too, a few entries of it, when
//! nothing larger is free. Within a class extents are kept in a stack: the most recently freed,
//! whose pages are likeliest still in the caches, is reused first.
//!
//! Each extent's position in its class is returned to the caller, who keeps it with the extent
//! (`large` keeps it in the extent's side-table slot), so that removing any extent, as when a
//! neighbour merges with it, costs one swap, not a search. The caller is told which extent moved
//! into the removed one's position.
//!
//! It replaced an ordered set of `(placement, pages, chunk, start)` (best fit, lowest address
//! first): in bench/alloc `fragmentation`, the set's inserts and removals were half of the
//! program's instructions.

use alloc::vec::Vec;

/// Exact classes below this many pages; 8 classes per power of two above.
const LINEAR: u32 = 8;
const SUB_BITS: u32 = 3;
/// Powers of two: level 0 (1-7 pages), then 2^3 ... 2^29 pages (the largest extent tag).
const LEVELS: usize = 28;
const CLASSES: usize = LEVELS << SUB_BITS;
/// Entries of the request's own class examined when no larger class has any.
const OWN_CLASS_SCAN: usize = 8;

/// A free extent: `pages` pages from page `start` of chunk `chunk`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub chunk: u32,
    pub start: u32,
    pub pages: u32,
}

/// Where an entry is: its class and its position in the class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    class: u16,
    pos: u32,
}

impl Slot {
    /// The position alone, which is what callers keep (the class follows from the size).
    pub fn pos(self) -> u32 {
        self.pos
    }
}

/// The (level, class within level) of extents of `pages` pages.
#[inline]
fn level_of(pages: u32) -> (usize, usize) {
    debug_assert!(pages >= 1);
    if pages < LINEAR {
        (0, pages as usize)
    } else {
        let log = 31 - pages.leading_zeros();
        (
            (log - SUB_BITS + 1) as usize,
            ((pages >> (log - SUB_BITS)) as usize) & ((1 << SUB_BITS) - 1),
        )
    }
}

#[inline]
fn class_of(pages: u32) -> usize {
    let (level, sub) = level_of(pages);
    (level << SUB_BITS) | sub
}

/// The free extents of one placement.
struct Classes {
    stacks: Vec<Vec<Entry>>,
    /// Bit `l`: level `l` has a non-empty class.
    levels: u32,
    /// Bit `s` of `subs[l]`: class `s` of level `l` is non-empty.
    subs: [u8; LEVELS],
}

impl Classes {
    fn new() -> Self {
        Classes {
            stacks: (0..CLASSES).map(|_| Vec::new()).collect(),
            levels: 0,
            subs: [0; LEVELS],
        }
    }

    fn mark(&mut self, class: usize) {
        let (level, sub) = (class >> SUB_BITS, class & ((1 << SUB_BITS) - 1));
        self.subs[level] |= 1 << sub;
        self.levels |= 1 << level;
    }

    fn unmark_if_empty(&mut self, class: usize) {
        if self.stacks[class].is_empty() {
            let (level, sub) = (class >> SUB_BITS, class & ((1 << SUB_BITS) - 1));
            self.subs[level] &= !(1 << sub);
            if self.subs[level] == 0 {
                self.levels &= !(1 << level);
            }
        }
    }

    /// The first non-empty class at or above (level, sub).
    fn first_at_or_above(&self, level: usize, sub: usize) -> Option<usize> {
        if level >= LEVELS {
            return None;
        }
        let here = self.subs[level] & (u8::MAX << sub);
        if here != 0 {
            return Some((level << SUB_BITS) | here.trailing_zeros() as usize);
        }
        let above = self.levels & u32::MAX.checked_shl(level as u32 + 1).unwrap_or(0);
        if above == 0 {
            return None;
        }
        let level = above.trailing_zeros() as usize;
        Some((level << SUB_BITS) | self.subs[level].trailing_zeros() as usize)
    }
}

/// Free extents of every placement, by size.
pub struct Bins {
    placements: Vec<Classes>,
    len: usize,
}

impl Bins {
    pub const fn new() -> Self {
        Bins {
            placements: Vec::new(),
            len: 0,
        }
    }

    #[cfg(any(test, feature = "invariants"))]
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `entry` to `placement`'s extents; its slot, to be given back to `remove`.
    pub fn insert(&mut self, placement: u32, entry: Entry) -> Slot {
        let p = placement as usize;
        while self.placements.len() <= p {
            self.placements.push(Classes::new());
        }
        let classes = &mut self.placements[p];
        let class = class_of(entry.pages);
        let stack = &mut classes.stacks[class];
        stack.push(entry);
        let pos = (stack.len() - 1) as u32;
        classes.mark(class);
        self.len += 1;
        Slot {
            class: class as u16,
            pos,
        }
    }

    /// The slot of the extent of `pages` pages kept at position `pos`.
    pub fn slot(pages: u32, pos: u32) -> Slot {
        Slot {
            class: class_of(pages) as u16,
            pos,
        }
    }

    /// The entry at `slot` (for checks).
    #[cfg(any(test, feature = "invariants"))]
    pub fn get(&self, placement: u32, slot: Slot) -> Option<Entry> {
        self.placements
            .get(placement as usize)?
            .stacks
            .get(slot.class as usize)?
            .get(slot.pos as usize)
            .copied()
    }

    /// Removes the entry at `slot` and returns it, with the entry that took its position (whose
    /// owner must record the position), if any.
    pub fn remove(&mut self, placement: u32, slot: Slot) -> (Entry, Option<Entry>) {
        let classes = &mut self.placements[placement as usize];
        let class = slot.class as usize;
        let stack = &mut classes.stacks[class];
        let entry = stack.swap_remove(slot.pos as usize);
        let moved = stack.get(slot.pos as usize).copied();
        // A class that once held many extents does not keep their room forever.
        if stack.capacity() > 64 && stack.len() < stack.capacity() / 4 {
            stack.shrink_to(stack.len() * 2);
        }
        classes.unmark_if_empty(class);
        self.len -= 1;
        (entry, moved)
    }

    /// A free extent of `placement` with at least `pages` pages: from the first non-empty class
    /// above the request's own, else one of the request's own class that is large enough.
    pub fn fitting(&self, placement: u32, pages: u32) -> Option<(Entry, Slot)> {
        let classes = self.placements.get(placement as usize)?;
        let (own_level, own_sub) = level_of(pages);
        let own = (own_level << SUB_BITS) | own_sub;
        // Round up to the next class boundary: every extent from there on fits.
        let (level, sub) = if pages < LINEAR {
            (own_level, own_sub)
        } else {
            let below = (1u32 << (31 - pages.leading_zeros() - SUB_BITS)) - 1;
            match pages & below {
                0 => (own_level, own_sub),
                _ => level_of(pages.checked_add(below)?),
            }
        };
        if let Some(class) = classes.first_at_or_above(level, sub) {
            let stack = &classes.stacks[class];
            let pos = stack.len() - 1;
            return Some((
                stack[pos],
                Slot {
                    class: class as u16,
                    pos: pos as u32,
                },
            ));
        }
        let stack = &classes.stacks[own];
        stack
            .iter()
            .enumerate()
            .rev()
            .take(OWN_CLASS_SCAN)
            .find(|(_, e)| e.pages >= pages)
            .map(|(pos, &e)| {
                (
                    e,
                    Slot {
                        class: own as u16,
                        pos: pos as u32,
                    },
                )
            })
    }

    /// One of the largest free extents of `placement` (of its largest non-empty class, which
    /// spans at most an eighth of its sizes).
    pub fn largest(&self, placement: u32) -> Option<(Entry, Slot)> {
        let classes = self.placements.get(placement as usize)?;
        if classes.levels == 0 {
            return None;
        }
        let level = 31 - classes.levels.leading_zeros() as usize;
        let sub = 7 - classes.subs[level].leading_zeros() as usize;
        let class = (level << SUB_BITS) | sub;
        let stack = &classes.stacks[class];
        let (pos, &entry) = stack.iter().enumerate().max_by_key(|(_, e)| e.pages)?;
        Some((
            entry,
            Slot {
                class: class as u16,
                pos: pos as u32,
            },
        ))
    }

    /// The placements' extents that have any, placement by placement.
    pub fn placements(&self) -> impl Iterator<Item = u32> + '_ {
        self.placements
            .iter()
            .enumerate()
            .filter(|(_, c)| c.levels != 0)
            .map(|(p, _)| p as u32)
    }

    /// Every entry, with its placement.
    pub fn iter(&self) -> impl Iterator<Item = (u32, Entry)> + '_ {
        self.placements.iter().enumerate().flat_map(|(p, c)| {
            c.stacks
                .iter()
                .flat_map(move |s| s.iter().map(move |&e| (p as u32, e)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn classes_are_ordered_and_narrow() {
        let mut last = 0;
        for pages in 1..(1u32 << 16) {
            let class = class_of(pages);
            assert!(class >= last, "class of {pages} went down");
            last = class;
        }
        // Exact below 16 pages; at most an eighth of the sizes above.
        for pages in 1..16 {
            assert_ne!(class_of(pages), class_of(pages + 1));
        }
        assert_eq!(class_of(16), class_of(17));
        assert_ne!(class_of(17), class_of(18));
        assert_eq!(class_of(1 << 29), CLASSES - 8);
    }

    #[test]
    fn fitting_finds_a_large_enough_extent_when_there_is_one() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..200 {
            let mut bins = Bins::new();
            let mut sizes = Vec::new();
            for start in 0..(next() % 40) as u32 {
                let pages = 1 + (next() % 300) as u32;
                bins.insert(
                    1,
                    Entry {
                        chunk: 0,
                        start,
                        pages,
                    },
                );
                sizes.push(pages);
            }
            for _ in 0..50 {
                let want = 1 + (next() % 320) as u32;
                let got = bins.fitting(1, want);
                if let Some((e, slot)) = got {
                    assert!(e.pages >= want);
                    assert_eq!(bins.get(1, slot), Some(e));
                }
                // A fit exists beyond the request's class, or within the few entries of it
                // that are scanned: then one is found.
                let beyond = sizes
                    .iter()
                    .any(|&s| s >= want && class_of(s) != class_of(want));
                if beyond {
                    assert!(got.is_some(), "{want} pages in {sizes:?}");
                }
                assert!(bins.fitting(0, 1).is_none());
            }
        }
    }

    #[test]
    fn removal_by_slot_keeps_every_position_right() {
        // A model: each entry's position as the owner would track it.
        let mut bins = Bins::new();
        let mut positions: BTreeMap<u32, Slot> = BTreeMap::new();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..20_000u32 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if !rng.is_multiple_of(3) || positions.is_empty() {
                let e = Entry {
                    chunk: 0,
                    start: step,
                    pages: 1 + (rng >> 8) as u32 % 100,
                };
                positions.insert(step, bins.insert(0, e));
            } else {
                let (&start, &slot) = positions
                    .iter()
                    .nth((rng >> 20) as usize % positions.len())
                    .unwrap();
                let (e, moved) = bins.remove(0, slot);
                assert_eq!(e.start, start);
                positions.remove(&start);
                if let Some(m) = moved {
                    positions.insert(m.start, Bins::slot(m.pages, slot.pos()));
                }
            }
            assert_eq!(bins.len(), positions.len());
        }
        for (&start, &slot) in &positions {
            assert_eq!(bins.get(0, slot).map(|e| e.start), Some(start));
        }
        let largest = bins.largest(0).unwrap().0.pages;
        assert_eq!(largest, bins.iter().map(|(_, e)| e.pages).max().unwrap());
    }
}
