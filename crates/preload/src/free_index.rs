//! The index of free extents that `large` reuses: the smallest extent that fits a request and,
//! among extents of that size, the one at the lowest (chunk, first page), found, added and
//! removed in a few word operations.
//!
//! That order keeps a program's peak memory down, where reusing the newest extent of a size
//! class did not; an ordered set gives it too, at a cost a churning program notices
//! (docs/design/free-extent-order.md). This index gives the ordered set's answers exactly, for
//! less:
//!
//! - **Extents of up to 64 pages** (most of them, in a heap of objects from 4 KiB up) are
//!   binned by exact size, so the first non-empty bin at or above a request is the best fit.
//!   Each chunk keeps, per bin, one bit per page where an extent of that size starts, in levels:
//!   a bit at level k+1 says a 64-bit word at level k is not zero. The lowest (or highest)
//!   member is one trailing (leading) zero count per level, three levels for a 1 GiB chunk, and
//!   an insert or removal goes up a level only when a word turns empty or non-empty.
//!   Per placement, a mask says which bins are non-empty and a bitmap per bin which chunks hold
//!   a member, so the lowest chunk is found before the lowest page, as in the set's key.
//! - **Larger extents**, few, stay in an ordered set.
//!
//! The bitmaps cost one bit per page per bin: 2 MiB of address space per GiB of chunk for each
//! index, reserved and not committed. A process touches the pages of them under the addresses
//! where extents of each size start (a page of a bin's bottom level covers 128 MiB of chunk):
//! python in bench/alloc ended with 0.4 MiB of them resident. Binning up to 256 pages saved
//! fragmentation another 2.5 % of its instructions for four times the bitmaps. The caller maps
//! them (`bitmap_words`, `add_chunk`), so this module makes no system calls and its tests run
//! on plain buffers. Pages of them never touched stay unmapped: a bit is set by writing the word
//! before reading it (`set_bit`), so such a page is faulted in once, writable.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;

/// Extents of at most this many pages are binned by exact size, one bin per page count.
pub const BINNED_PAGES: usize = 64;
const BINS: usize = BINNED_PAGES;
/// Words of a placement's mask of non-empty bins.
const MASK_WORDS: usize = BINS / 64;
/// Levels of a chunk's bitmaps: 64^6 pages is more than a 47-bit address space holds.
const MAX_LEVELS: usize = 6;

/// A free extent: `pages` pages from page `start` of chunk `chunk`. The derived order (size,
/// then chunk, then page) is the order of reuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Free {
    pub pages: u32,
    pub chunk: u32,
    pub start: u32,
}

impl Free {
    const MIN: Free = Free {
        pages: 0,
        chunk: 0,
        start: 0,
    };

    fn bin(self) -> Option<usize> {
        let pages = self.pages as usize;
        (1..=BINNED_PAGES).contains(&pages).then(|| pages - 1)
    }
}

/// Where each level of a chunk's bitmaps lies in its mapping.
#[derive(Clone, Copy)]
struct Layout {
    /// Level k of bin b is the `len[k]` words from `offset[k] + b * len[k]`. Level 0 has a bit
    /// per page; the top level is one word.
    offset: [usize; MAX_LEVELS],
    len: [usize; MAX_LEVELS],
    depth: usize,
    words: usize,
}

impl Layout {
    fn new(pages: usize) -> Layout {
        let mut layout = Layout {
            offset: [0; MAX_LEVELS],
            len: [0; MAX_LEVELS],
            depth: 0,
            words: 0,
        };
        let mut len = pages.div_ceil(64).max(1);
        loop {
            layout.len[layout.depth] = len;
            layout.depth += 1;
            if len == 1 {
                break;
            }
            len = len.div_ceil(64);
        }
        // Upper levels first: the words searched on every request share a few pages.
        for level in (0..layout.depth).rev() {
            layout.offset[level] = layout.words;
            layout.words += BINS * layout.len[level];
        }
        layout
    }
}

/// How many zeroed u64 words `add_chunk` needs for a chunk of `pages` pages.
pub fn bitmap_words(pages: usize) -> usize {
    Layout::new(pages).words
}

/// Sets `bit` (not set yet) in the word at `word` and returns the word after.
///
/// It writes before it reads. The bitmaps are mapped untouched, and a page of them first read
/// is mapped to the kernel's shared zero page, so the write that follows faults again and the
/// kernel copies the page and flushes the old mapping from every CPU the process has run on: a
/// TLB shootdown interrupt to each. bench/alloc `cleaner` took 1,100-1,500 such faults a run
/// and as many shootdowns (the performance log, bench/alloc/results/LOG.md, 2026-12-01). A page first written is faulted in
/// once, writable.
///
/// # Safety
/// `word` must be valid for reads and writes, aligned, and not accessed by anyone else meanwhile.
#[inline]
unsafe fn set_bit(word: *mut u64, bit: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: one read-modify-write of the caller's word (an `or` to memory faults as a write).
    unsafe {
        core::arch::asm!("or qword ptr [{word}], {bit}", word = in(reg) word, bit = in(reg) bit,
            options(nostack))
    };
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above; an atomic read-modify-write whose result is unused is one store-like
    // instruction (aarch64's `stset`), which also faults as a write.
    unsafe {
        core::sync::atomic::AtomicU64::from_ptr(word)
            .fetch_or(bit, core::sync::atomic::Ordering::Relaxed)
    };
    // SAFETY: the caller's word, just written.
    unsafe { *word }
}

/// One chunk's bitmaps: per bin, which of its pages start a member.
struct ChunkBins {
    placement: u32,
    layout: Layout,
    words: *mut u64,
}

impl ChunkBins {
    fn word(&self, level: usize, bin: usize, index: usize) -> *mut u64 {
        debug_assert!(level < self.layout.depth && bin < BINS && index < self.layout.len[level]);
        let at = self.layout.offset[level] + bin * self.layout.len[level] + index;
        // SAFETY: with indices within the layout (asserted in debug builds) `at` < `layout.words`,
        // the size of the mapping `add_chunk` was given. They are: a page index comes from an
        // extent of this chunk (as `Chunk::tag`'s do in `large`), and every upper index is a
        // page index divided by 64 per level, or a set bit of the level above.
        unsafe { self.words.add(at) }
    }

    fn get(&self, level: usize, bin: usize, index: usize) -> u64 {
        // SAFETY: in bounds (`word`); the index's owner serializes all access.
        unsafe { *self.word(level, bin, index) }
    }

    fn set(&mut self, level: usize, bin: usize, index: usize, value: u64) {
        // SAFETY: as in `get`, and `&mut self` makes this the only access.
        unsafe { *self.word(level, bin, index) = value }
    }

    /// Adds `page` to `bin`; true if the bin was empty in this chunk.
    fn insert(&mut self, bin: usize, page: usize) -> bool {
        let mut index = page;
        for level in 0..self.layout.depth {
            let bit = 1 << (index % 64);
            // SAFETY: in bounds (`word`), and `&mut self` makes this the only access.
            if unsafe { set_bit(self.word(level, bin, index / 64), bit) } != bit {
                return false;
            }
            index /= 64;
        }
        true
    }

    /// Removes `page` from `bin`; true if the bin is now empty in this chunk.
    fn remove(&mut self, bin: usize, page: usize) -> bool {
        let mut index = page;
        for level in 0..self.layout.depth {
            let after = self.get(level, bin, index / 64) & !(1 << (index % 64));
            self.set(level, bin, index / 64, after);
            if after != 0 {
                return false;
            }
            index /= 64;
        }
        true
    }

    fn contains(&self, bin: usize, page: usize) -> bool {
        page / 64 < self.layout.len[0] && self.get(0, bin, page / 64) & 1 << (page % 64) != 0
    }

    /// The lowest (`highest` false) or highest member of `bin`.
    fn end(&self, bin: usize, highest: bool) -> Option<usize> {
        let mut index = 0;
        for level in (0..self.layout.depth).rev() {
            let word = self.get(level, bin, index);
            if word == 0 {
                return None;
            }
            let bit = if highest {
                63 - word.leading_zeros()
            } else {
                word.trailing_zeros()
            };
            index = index * 64 + bit as usize;
        }
        Some(index)
    }

    /// Calls `f` with every member of `bin`, in order; Err if a set bit of an upper level
    /// leads to a zero word.
    fn members(&self, bin: usize, f: &mut impl FnMut(usize)) -> Result<(), ()> {
        let top = self.layout.depth - 1;
        if self.get(top, bin, 0) == 0 {
            return Ok(());
        }
        self.visit(bin, top, 0, f)
    }

    fn visit(
        &self,
        bin: usize,
        level: usize,
        index: usize,
        f: &mut impl FnMut(usize),
    ) -> Result<(), ()> {
        let mut word = self.get(level, bin, index);
        if word == 0 {
            return Err(());
        }
        while word != 0 {
            let below = index * 64 + word.trailing_zeros() as usize;
            word &= word - 1;
            if level == 0 {
                f(below);
            } else {
                self.visit(bin, level - 1, below, f)?;
            }
        }
        Ok(())
    }
}

/// One placement's binned extents: which bins are non-empty, and per bin which chunks hold a
/// member.
#[derive(Default)]
struct PlacementBins {
    /// Bit b % 64 of word b / 64: bin b (extents of b + 1 pages) is not empty.
    nonempty: [u64; MASK_WORDS],
    /// Word w, bin b: bit i says chunk 64w + i holds a member of bin b.
    chunks: Vec<[u64; BINS]>,
}

impl PlacementBins {
    /// The lowest (`highest` false) or highest chunk holding a member of `bin`.
    fn chunk(&self, bin: usize, highest: bool) -> Option<usize> {
        let word_of =
            |(w, words): (usize, &[u64; BINS])| (words[bin] != 0).then_some((w, words[bin]));
        let (w, word) = if highest {
            self.chunks.iter().enumerate().rev().find_map(word_of)?
        } else {
            self.chunks.iter().enumerate().find_map(word_of)?
        };
        let bit = if highest {
            63 - word.leading_zeros()
        } else {
            word.trailing_zeros()
        };
        Some(w * 64 + bit as usize)
    }
}

/// Free extents of one kind (`large` keeps one index of clean and one of dirty extents).
pub struct FreeIndex {
    chunks: Vec<ChunkBins>,
    placements: Vec<PlacementBins>,
    /// Extents of more than `BINNED_PAGES` pages, keyed by placement first.
    large: BTreeSet<(u32, Free)>,
    len: usize,
}

impl FreeIndex {
    pub const fn new() -> FreeIndex {
        FreeIndex {
            chunks: Vec::new(),
            placements: Vec::new(),
            large: BTreeSet::new(),
            len: 0,
        }
    }

    /// Registers the next chunk (chunks are numbered in the order they are added) of
    /// `placement`, `pages` pages long, whose bitmaps are at `words`.
    ///
    /// # Safety
    /// `words` points to `bitmap_words(pages)` zeroed u64s, writable, used by nothing else and
    /// valid for as long as this index is.
    pub unsafe fn add_chunk(&mut self, placement: u32, pages: usize, words: *mut u64) {
        let chunk = self.chunks.len();
        self.chunks.push(ChunkBins {
            placement,
            layout: Layout::new(pages),
            words,
        });
        let placement = placement as usize;
        if self.placements.len() <= placement {
            self.placements
                .resize_with(placement + 1, PlacementBins::default);
        }
        let bins = &mut self.placements[placement];
        if bins.chunks.len() <= chunk / 64 {
            bins.chunks.resize(chunk / 64 + 1, [0; BINS]);
        }
    }

    #[cfg(any(test, feature = "invariants"))]
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn insert(&mut self, free: Free) {
        let chunk = free.chunk as usize;
        let placement = self.chunks[chunk].placement;
        match free.bin() {
            Some(bin) => {
                debug_assert!(!self.chunks[chunk].contains(bin, free.start as usize));
                if self.chunks[chunk].insert(bin, free.start as usize) {
                    let bins = &mut self.placements[placement as usize];
                    bins.chunks[chunk / 64][bin] |= 1 << (chunk % 64);
                    bins.nonempty[bin / 64] |= 1 << (bin % 64);
                }
            }
            None => {
                let inserted = self.large.insert((placement, free));
                debug_assert!(inserted);
            }
        }
        self.len += 1;
    }

    pub fn remove(&mut self, free: Free) {
        let chunk = free.chunk as usize;
        let placement = self.chunks[chunk].placement;
        match free.bin() {
            Some(bin) => {
                debug_assert!(self.chunks[chunk].contains(bin, free.start as usize));
                if self.chunks[chunk].remove(bin, free.start as usize) {
                    let bins = &mut self.placements[placement as usize];
                    bins.chunks[chunk / 64][bin] &= !(1 << (chunk % 64));
                    if bins.chunks.iter().all(|words| words[bin] == 0) {
                        bins.nonempty[bin / 64] &= !(1 << (bin % 64));
                    }
                }
            }
            None => {
                let removed = self.large.remove(&(placement, free));
                debug_assert!(removed);
            }
        }
        self.len -= 1;
    }

    #[cfg(any(test, feature = "invariants"))]
    pub fn contains(&self, free: Free) -> bool {
        let Some(chunk) = self.chunks.get(free.chunk as usize) else {
            return false;
        };
        match free.bin() {
            Some(bin) => chunk.contains(bin, free.start as usize),
            None => self.large.contains(&(chunk.placement, free)),
        }
    }

    /// The smallest extent of `placement` with at least `pages` pages, the one at the lowest
    /// (chunk, start) among those of its size.
    pub fn fitting(&self, placement: u32, pages: usize) -> Option<Free> {
        if let (Some(bins), true) = (self.placements.get(placement as usize), pages <= BINS) {
            let first = pages.max(1) - 1;
            let mut w = first / 64;
            let mut fits = bins.nonempty[w] & (u64::MAX << (first % 64));
            while fits == 0 && w + 1 < MASK_WORDS {
                w += 1;
                fits = bins.nonempty[w];
            }
            if fits != 0 {
                let bin = w * 64 + fits.trailing_zeros() as usize;
                return self.binned(bins, bin, false);
            }
        }
        let from = Free {
            pages: pages.max(BINNED_PAGES + 1).min(u32::MAX as usize) as u32,
            ..Free::MIN
        };
        let (_, free) = self
            .large
            .range((placement, from)..(placement + 1, Free::MIN))
            .next()?;
        Some(*free)
    }

    /// The largest extent of `placement`, the one at the highest (chunk, start) among those of
    /// its size.
    pub fn largest(&self, placement: u32) -> Option<Free> {
        let largest = self
            .large
            .range((placement, Free::MIN)..(placement + 1, Free::MIN))
            .next_back();
        if let Some(&(_, free)) = largest {
            return Some(free);
        }
        let bins = self.placements.get(placement as usize)?;
        let w = (0..MASK_WORDS).rev().find(|&w| bins.nonempty[w] != 0)?;
        let bin = w * 64 + 63 - bins.nonempty[w].leading_zeros() as usize;
        self.binned(bins, bin, true)
    }

    /// The lowest or highest member of a bin marked non-empty; None only if the marks lie
    /// (which `for_each` reports to the invariant checker).
    fn binned(&self, bins: &PlacementBins, bin: usize, highest: bool) -> Option<Free> {
        let chunk = bins.chunk(bin, highest);
        debug_assert!(chunk.is_some(), "bin {bin} is marked non-empty");
        let start = self.chunks[chunk?].end(bin, highest);
        debug_assert!(start.is_some(), "chunk {chunk:?} is marked in bin {bin}");
        Some(Free {
            pages: bin as u32 + 1,
            chunk: chunk? as u32,
            start: start? as u32,
        })
    }

    /// Calls `f` with every extent in the index. Err, describing it, if the summaries (the
    /// placements' masks and chunk bitmaps, the upper levels of the chunks' bitmaps) promise a
    /// member that is not there, or if fewer extents are reachable than the index holds: what
    /// the invariant checker needs to know that lookups see every member and only members.
    pub fn for_each(&self, mut f: impl FnMut(Free)) -> Result<(), alloc::string::String> {
        use alloc::format;
        let mut reached = 0;
        for &(_, free) in &self.large {
            f(free);
            reached += 1;
        }
        for (placement, bins) in self.placements.iter().enumerate() {
            for bin in (0..BINS).filter(|&b| bins.nonempty[b / 64] & 1 << (b % 64) != 0) {
                let mut found = false;
                for (w, words) in bins.chunks.iter().enumerate() {
                    let mut chunk_bits = words[bin];
                    while chunk_bits != 0 {
                        let chunk = w * 64 + chunk_bits.trailing_zeros() as usize;
                        chunk_bits &= chunk_bits - 1;
                        let Some(c) = self.chunks.get(chunk) else {
                            return Err(format!("bin {bin} names chunk {chunk}, which is not"));
                        };
                        if c.placement as usize != placement {
                            return Err(format!(
                                "chunk {chunk} of placement {} is in placement {placement}'s bin {bin}",
                                c.placement
                            ));
                        }
                        let mut members = 0;
                        c.members(bin, &mut |start| {
                            members += 1;
                            f(Free {
                                pages: bin as u32 + 1,
                                chunk: chunk as u32,
                                start: start as u32,
                            })
                        })
                        .map_err(|()| {
                            format!("chunk {chunk} bin {bin}: a summary bit over an empty word")
                        })?;
                        if members == 0 {
                            return Err(format!(
                                "chunk {chunk} is marked in bin {bin} but holds none"
                            ));
                        }
                        reached += members;
                        found = true;
                    }
                }
                if !found {
                    return Err(format!(
                        "placement {placement}'s bin {bin} is marked non-empty but names no chunk"
                    ));
                }
            }
        }
        if reached != self.len {
            return Err(format!(
                "the index holds {} extents, {reached} of them reachable",
                self.len
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet as Model;
    use std::vec;
    use std::vec::Vec;

    /// An index over chunks of the given (placement, pages), with its bitmaps in a Vec.
    fn index(chunks: &[(u32, usize)]) -> (FreeIndex, Vec<Vec<u64>>) {
        let mut index = FreeIndex::new();
        let mut buffers = Vec::new();
        for &(placement, pages) in chunks {
            let mut words = vec![0u64; bitmap_words(pages)];
            // SAFETY: a zeroed buffer of the right size, kept alive with the index by the caller
            // (a Vec's heap buffer does not move when the Vec does).
            unsafe { index.add_chunk(placement, pages, words.as_mut_ptr()) };
            buffers.push(words);
        }
        (index, buffers)
    }

    #[test]
    fn layouts_cover_every_page() {
        for (pages, depth) in [(1, 1), (64, 1), (65, 2), (4096, 2), (4097, 3), (1 << 18, 3)] {
            let layout = Layout::new(pages);
            assert_eq!(layout.depth, depth, "{pages} pages");
            assert_eq!(layout.len[layout.depth - 1], 1);
            assert!(layout.len[0] * 64 >= pages);
        }
        // A 1 GiB chunk: each bin 4096 + 64 + 1 words.
        assert_eq!(bitmap_words(1 << 18), BINS * 4161);
    }

    #[test]
    fn best_fit_then_lowest_chunk_then_lowest_page() {
        let (mut index, _buffers) = index(&[(0, 1 << 18), (1, 4096), (0, 300)]);
        let e = |pages, chunk, start| Free {
            pages,
            chunk,
            start,
        };
        for free in [
            e(3, 2, 10),
            e(3, 0, 5000),
            e(3, 0, 200_000),
            e(5, 0, 7),
            e(100, 0, 9000),
        ] {
            index.insert(free);
        }
        index.insert(e(2, 1, 0)); // another placement
        assert_eq!(index.fitting(0, 1), Some(e(3, 0, 5000)));
        assert_eq!(index.fitting(0, 4), Some(e(5, 0, 7)));
        assert_eq!(index.fitting(0, 6), Some(e(100, 0, 9000)));
        assert_eq!(index.fitting(0, 101), None);
        assert_eq!(index.fitting(1, 1), Some(e(2, 1, 0)));
        assert_eq!(index.fitting(2, 1), None);
        assert_eq!(index.largest(0), Some(e(100, 0, 9000)));
        index.remove(e(100, 0, 9000));
        assert_eq!(index.largest(0), Some(e(5, 0, 7)));
        index.remove(e(5, 0, 7));
        assert_eq!(index.largest(0), Some(e(3, 2, 10)));
        index.remove(e(3, 0, 5000));
        assert_eq!(index.fitting(0, 1), Some(e(3, 0, 200_000)));
        index.remove(e(3, 0, 200_000));
        assert_eq!(index.fitting(0, 1), Some(e(3, 2, 10)));
        assert_eq!(index.len(), 2);
        index.for_each(|_| {}).unwrap();
    }

    /// Random inserts and removals answer as an ordered set of (placement, pages, chunk, start)
    /// does, the order the index replaced.
    #[test]
    fn answers_as_the_ordered_set_does() {
        let chunks = [(0, 1 << 18), (0, 5000), (1, 1 << 18), (0, 1 << 18)];
        let (mut index, _buffers) = index(&chunks);
        let mut model: Model<(u32, u32, u32, u32)> = Model::new();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut starts = std::collections::HashSet::new();
        for step in 0..100_000 {
            if next(5) < 2 && !model.is_empty() {
                // Remove the member at or after a random key (or the last one).
                let probe = (next(3) as u32, 1 + next(300) as u32, 0, 0);
                let key = *model
                    .range(probe..)
                    .next()
                    .unwrap_or_else(|| model.last().unwrap());
                model.remove(&key);
                starts.remove(&(key.2, key.3));
                let (_, pages, chunk, start) = key;
                index.remove(Free {
                    pages,
                    chunk,
                    start,
                });
            } else {
                let chunk = next(chunks.len() as u64) as u32;
                let (placement, chunk_pages) = chunks[chunk as usize];
                let pages = if next(8) == 0 {
                    1 + next(300)
                } else {
                    1 + next(70)
                } as u32;
                let start = next(chunk_pages as u64) as u32;
                // Members are distinct extents: one per (chunk, start).
                if starts.insert((chunk, start)) {
                    model.insert((placement, pages, chunk, start));
                    index.insert(Free {
                        pages,
                        chunk,
                        start,
                    });
                }
            }
            let placement = next(3) as u32;
            let wanted = 1 + next(320) as u32;
            let expected = model
                .range((placement, wanted, 0, 0)..(placement + 1, 0, 0, 0))
                .next()
                .map(|&(_, pages, chunk, start)| Free {
                    pages,
                    chunk,
                    start,
                });
            assert_eq!(
                index.fitting(placement, wanted as usize),
                expected,
                "step {step}"
            );
            let largest = model
                .range((placement, 0, 0, 0)..(placement + 1, 0, 0, 0))
                .next_back()
                .map(|&(_, pages, chunk, start)| Free {
                    pages,
                    chunk,
                    start,
                });
            assert_eq!(index.largest(placement), largest, "step {step}");
            assert_eq!(index.len(), model.len());
            if step % 5000 == 0 {
                let mut seen = Model::new();
                index
                    .for_each(|f| {
                        seen.insert((chunks[f.chunk as usize].0, f.pages, f.chunk, f.start));
                    })
                    .unwrap();
                assert_eq!(seen, model);
            }
        }
    }

    #[test]
    fn the_checker_finds_a_summary_without_members() {
        let (mut index, mut buffers) = index(&[(0, 1 << 18)]);
        index.insert(Free {
            pages: 2,
            chunk: 0,
            start: 70,
        });
        index.for_each(|_| {}).unwrap();
        // Clear the bottom word behind the index's back.
        let layout = Layout::new(1 << 18);
        buffers[0][layout.offset[0] + layout.len[0] + 1] = 0;
        assert!(index.for_each(|_| {}).is_err());
    }

    /// Minor page faults of the calling thread so far.
    fn thread_faults() -> i64 {
        // SAFETY: getrusage writes into our struct.
        unsafe {
            let mut usage: libc::rusage = core::mem::zeroed();
            libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
            usage.ru_minflt
        }
    }

    #[test]
    fn setting_a_bit_in_an_untouched_page_faults_once() {
        // Untouched pages, as the bitmaps are mapped: a read first would fault each in as the
        // zero page, and the write after it would fault it again (and copy it).
        const PAGES: usize = 32;
        let page = 4096;
        // SAFETY: a fresh private anonymous mapping, unmapped below.
        let base = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                PAGES * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let before = thread_faults();
        for i in 0..PAGES {
            let word = (base as usize + i * page + 8 * (i % 512)) as *mut u64;
            // SAFETY: a word of the mapping, ours alone.
            assert_eq!(unsafe { set_bit(word, 1 << (i % 64)) }, 1 << (i % 64));
        }
        let faults = thread_faults() - before;
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(base, PAGES * page) };
        assert!(
            faults <= PAGES as i64 + 2,
            "{faults} page faults for {PAGES} untouched pages: read before written?"
        );
    }
}
