//! A modeled last-level cache: which accesses reach memory.
//!
//! Emulators have no caches. Without one, every stack spill counts as a memory access and data
//! with locality drowns the traffic that tiering is about; the misses of a cache model are
//! what reaches memory on a real machine. The model is a set-associative cache of 64-byte lines
//! with least-recently-used replacement, its set chosen by a hash of the line's address.
//!
//! Why hashed ([`Cache::set_of`]): indexed by the address's low bits, two buffers a multiple of
//! the cache's size apart use the same sets, and TCG runs `rep movsb` (a page copy) a byte at a
//! time, alternating source and destination. Last-level caches hash their slices too. The hash
//! is Fibonacci hashing (the line times 2^64 / phi), reduced to the number of sets by a multiply
//! and shift, so a set count need not be a power of two (a 20-way 300 MiB cache has 245,760);
//! for a power of two it is the top bits of the product.
//!
//! Why associative: a direct-mapped cache lets two hot lines that happen to share a slot evict
//! each other on every access, and which lines share a slot depends on where the data lands
//! (docs/evaluation.md tells how one such pair multiplied a run's misses by 5.7).
//!
//! The ways are atomics: several threads may use one cache (the emulation plugin models one
//! last-level cache per process, shared by its threads as a real one is by its cores). A set
//! updated by two threads at the same instant may lose one of the two updates of its LRU
//! order; it never loses memory safety, and a single thread's sequence is exact.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Bytes per line.
pub const LINE_BYTES: u64 = 64;
/// `log2(LINE_BYTES)`.
pub const LINE_SHIFT: u32 = 6;

/// A modeled cache of `sets` x `ways` lines.
pub struct Cache {
    sets: usize,
    ways: usize,
    /// Per set, `ways` tags (line number + 1; 0 is empty), most recently used first, set
    /// after set, in host cache lines (an 8-way set is one of them, so a lookup touches one).
    tags: Box<[HostLine]>,
}

#[repr(align(64))]
#[derive(Default)]
struct HostLine([AtomicU64; 8]);

impl Cache {
    /// A cache of `sets` sets of `ways` lines each (both at least 1).
    pub fn new(sets: usize, ways: usize) -> Cache {
        assert!(
            sets > 0 && ways > 0,
            "a cache needs at least one set and one way"
        );
        Cache {
            sets,
            ways,
            tags: (0..(sets * ways).div_ceil(8))
                .map(|_| HostLine::default())
                .collect(),
        }
    }

    /// A cache of `bytes` (a multiple of `ways` lines) and `ways`-way associativity.
    pub fn with_size(bytes: u64, ways: usize) -> Result<Cache, String> {
        let sets = Cache::sets_for(bytes, ways)?;
        Ok(Cache::new(sets, ways))
    }

    /// The sets of a cache of `bytes` and `ways`, or why there is no such cache.
    pub fn sets_for(bytes: u64, ways: usize) -> Result<usize, String> {
        let lines = bytes / LINE_BYTES;
        if ways == 0
            || lines == 0
            || !lines.is_multiple_of(ways as u64)
            || !bytes.is_multiple_of(LINE_BYTES)
        {
            return Err(format!(
                "a cache of {bytes} bytes cannot have {ways} ways of 64-byte lines (the size \
                 must be a whole number of ways x 64 bytes)"
            ));
        }
        Ok((lines / ways as u64) as usize)
    }

    pub fn sets(&self) -> usize {
        self.sets
    }

    pub fn ways(&self) -> usize {
        self.ways
    }

    /// Bytes the cache holds.
    pub fn bytes(&self) -> u64 {
        (self.sets * self.ways) as u64 * LINE_BYTES
    }

    /// The set of a line number in a cache of `sets` sets.
    #[inline]
    pub fn set_of(line: u64, sets: usize) -> usize {
        let hash = line.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((hash as u128 * sets as u128) >> 64) as usize
    }

    /// Looks the line holding byte `addr` up and makes it the most recently used of its set;
    /// true when it was not there (a miss: the least recently used line, if the set was full,
    /// is evicted).
    #[inline]
    pub fn touch(&self, addr: u64) -> bool {
        self.touch_line(addr >> LINE_SHIFT)
    }

    /// As [`Cache::touch`], for a line number.
    #[inline]
    pub fn touch_line(&self, line: u64) -> bool {
        let first = Cache::set_of(line, self.sets) * self.ways;
        self.touch_in_set(line, first)
    }

    /// As [`Cache::touch_line`], for a caller that keeps a [`Hint`] (one per thread): an access
    /// to the line the hint holds, still the most recently used of its set, is a hit found
    /// without hashing. Exactly [`Cache::touch_line`]'s answer.
    #[inline]
    pub fn touch_line_hinted(&self, line: u64, hint: &Hint) -> bool {
        let (last, first) = (hint.line.load(Relaxed), hint.first.load(Relaxed));
        if last == line + 1 && self.way(first).load(Relaxed) == line + 1 {
            return false;
        }
        let first = Cache::set_of(line, self.sets) * self.ways;
        hint.line.store(line + 1, Relaxed);
        hint.first.store(first, Relaxed);
        self.touch_in_set(line, first)
    }

    #[inline(always)]
    fn way(&self, t: usize) -> &AtomicU64 {
        &self.tags[t >> 3].0[t & 7]
    }

    #[inline(always)]
    fn touch_in_set(&self, line: u64, first: usize) -> bool {
        let want = line + 1;
        if self.way(first).load(Relaxed) == want {
            return false;
        }
        // Where the line is, or the last way (whose line is evicted) when it is not there.
        let found = (1..self.ways).find(|&i| self.way(first + i).load(Relaxed) == want);
        let end = found.unwrap_or(self.ways - 1);
        for i in (1..=end).rev() {
            self.way(first + i)
                .store(self.way(first + i - 1).load(Relaxed), Relaxed);
        }
        self.way(first).store(want, Relaxed);
        found.is_none()
    }
}

/// The last line a thread touched and where its set begins (see
/// [`Cache::touch_line_hinted`]).
#[derive(Default)]
pub struct Hint {
    line: AtomicU64,
    first: std::sync::atomic::AtomicUsize,
}

impl Hint {
    /// No line yet.
    pub const fn new() -> Hint {
        Hint {
            line: AtomicU64::new(0),
            first: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines of one set: up to `ways` of them stay; one more evicts the least recently used.
    fn lines_of_one_set(cache: &Cache, n: usize) -> Vec<u64> {
        let first = 64;
        let set = Cache::set_of(first, cache.sets());
        (first..)
            .filter(|&l| Cache::set_of(l, cache.sets()) == set)
            .take(n)
            .collect()
    }

    #[test]
    fn each_line_misses_once_until_evicted() {
        let c = Cache::new(4096, 8);
        let misses = (0..3)
            .flat_map(|_| (0..4096u64).step_by(8))
            .filter(|off| c.touch(4096 + off))
            .count();
        assert_eq!(misses, 64);
    }

    #[test]
    fn least_recently_used_is_evicted() {
        let c = Cache::new(64, 4);
        let lines = lines_of_one_set(&c, 5);
        for &l in &lines[..4] {
            assert!(c.touch_line(l));
        }
        assert!(!c.touch_line(lines[0]), "four ways hold four lines");
        // lines[1] is the least recently used now: the fifth line evicts it and only it.
        assert!(c.touch_line(lines[4]));
        assert!(!c.touch_line(lines[0]) && !c.touch_line(lines[2]) && !c.touch_line(lines[3]));
        assert!(c.touch_line(lines[1]));
    }

    #[test]
    fn power_of_two_sets_take_the_top_bits_of_the_hash() {
        for line in [0u64, 1, 12345, u64::MAX / 3] {
            let top = (line.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - 12)) as usize;
            assert_eq!(Cache::set_of(line, 4096), top);
        }
        // Any number of sets: every set is in range and used.
        let sets = 245_760;
        let mut seen = vec![false; sets];
        for line in 0..(sets as u64 * 8) {
            seen[Cache::set_of(line, sets)] = true;
        }
        assert!(seen.iter().filter(|&&s| s).count() > sets * 99 / 100);
    }

    #[test]
    fn hints_change_no_answer() {
        let (plain, hinted) = (Cache::new(16, 2), Cache::new(16, 2));
        let hint = Hint::default();
        let mut x = 12345u64;
        for _ in 0..20_000 {
            // Runs of the same line, as programs make, among lines that collide.
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let line = (x >> 60) % 40;
            for _ in 0..(x >> 58 & 3) + 1 {
                assert_eq!(
                    plain.touch_line(line),
                    hinted.touch_line_hinted(line, &hint)
                );
            }
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(Cache::sets_for(300 << 20, 20), Ok(245_760));
        let c = Cache::with_size(3 << 20, 12).unwrap();
        assert_eq!((c.sets(), c.ways(), c.bytes()), (4096, 12, 3 << 20));
        assert_eq!(Cache::with_size(2 << 20, 8).unwrap().sets(), 4096);
        assert!(Cache::with_size(1000, 8).is_err());
        assert!(Cache::with_size(2 << 20, 0).is_err());
        assert!(Cache::with_size(64 * 9, 8).is_err());
    }
}
