//! The dirty cache: freed extents kept resident for quick reuse, bounded by a budget over the
//! process's high-water mark of live bytes, with per-size quick lists in front, and evicted from
//! the tails of the largest extents when a free would exceed the budget.

use super::*;

/// Quick lists: per shard, for each size of up to `QUICK_MAX_PAGES` pages of the default
/// placement, the last `QUICK_DEPTH` freed extents of exactly that size, reused last in, first
/// out by the next allocation of that size. A program that frees and allocates objects of a
/// few pages again and again then skips the dirty index: a free no longer merges with its neighbours and an allocation no longer searches,
/// removes and splits. Quick extents are dirty extents in all but the index: counted in the
/// dirty cache, evicted like it (from the index first: an eviction that finds the index empty
/// moves them all into it), and purged like it (the idle purge moves the idle ones into the
/// index, where they merge with their neighbours, and returns them to the kernel with the rest).
pub(super) const QUICK_MAX_PAGES: usize = 8;
pub(super) const QUICK_DEPTH: usize = 1024;

/// One shard's quick lists: `(chunk, first page)` of each extent, per size.
pub(super) struct Quick {
    pub(super) len: [u16; QUICK_MAX_PAGES],
    pub(super) entries: [[(u32, u32); QUICK_DEPTH]; QUICK_MAX_PAGES],
}

impl Quick {
    pub(super) const fn new() -> Self {
        Self {
            len: [0; QUICK_MAX_PAGES],
            entries: [[(0, 0); QUICK_DEPTH]; QUICK_MAX_PAGES],
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len.iter().all(|&n| n == 0)
    }

    /// Room for an extent of `pages` pages.
    pub(super) fn has_room(&self, pages: usize) -> bool {
        (1..=QUICK_MAX_PAGES).contains(&pages) && (self.len[pages - 1] as usize) < QUICK_DEPTH
    }

    pub(super) fn push(&mut self, pages: usize, chunk: usize, start: usize) {
        let n = &mut self.len[pages - 1];
        self.entries[pages - 1][*n as usize] = (chunk as u32, start as u32);
        *n += 1;
    }

    pub(super) fn pop(&mut self, pages: usize) -> Option<(usize, usize)> {
        let n = self.len.get_mut(pages.wrapping_sub(1))?;
        *n = n.checked_sub(1)?;
        let (chunk, start) = self.entries[pages - 1][*n as usize];
        Some((chunk as usize, start as usize))
    }

    /// Takes out the extent of `pages` pages at `start` of `chunk`; false if not listed.
    pub(super) fn remove(&mut self, pages: usize, chunk: usize, start: usize) -> bool {
        if !(1..=QUICK_MAX_PAGES).contains(&pages) {
            return false;
        }
        let n = self.len[pages - 1] as usize;
        let list = &mut self.entries[pages - 1];
        match list[..n]
            .iter()
            .position(|&e| e == (chunk as u32, start as u32))
        {
            Some(i) => {
                list.copy_within(i + 1..n, i);
                self.len[pages - 1] -= 1;
                true
            }
            None => false,
        }
    }

    /// Takes out, per size, the oldest extents (a list is in the order they were freed) for
    /// which `idle(chunk, start)` holds, as (chunk, first page, pages).
    pub(super) fn take_idle(
        &mut self,
        mut idle: impl FnMut(usize, usize) -> bool,
        mut out: impl FnMut(usize, usize, usize),
    ) {
        for size in 0..QUICK_MAX_PAGES {
            let n = self.len[size] as usize;
            let list = &mut self.entries[size];
            let old = list[..n]
                .iter()
                .take_while(|&&(chunk, start)| idle(chunk as usize, start as usize))
                .count();
            for &(chunk, start) in &list[..old] {
                out(chunk as usize, start as usize, size + 1);
            }
            list.copy_within(old..n, 0);
            self.len[size] = (n - old) as u16;
        }
    }

    #[cfg(any(test, feature = "invariants"))]
    pub(super) fn contains(&self, chunk: usize, start: usize, pages: usize) -> bool {
        (1..=QUICK_MAX_PAGES).contains(&pages)
            && self.entries[pages - 1][..self.len[pages - 1] as usize]
                .contains(&(chunk as u32, start as u32))
    }

    #[cfg(any(test, feature = "invariants"))]
    pub(super) fn count(&self) -> usize {
        self.len.iter().map(|&n| n as usize).sum()
    }
}

/// Freed memory kept resident for reuse, per process: at least this much...
pub(super) const DIRTY_BUDGET_BYTES: usize = 64 << 20;

/// ...and as much as keeps live plus cached bytes within a quarter over the process's own
/// high-water mark of live tracked bytes: a program that churns through its working set reuses
/// its pages, and one steady at its mark, freeing sizes other than it asks for next, still
/// finds room (docs/design/dirty-cache.md). Idle cached memory is returned by `purge_idle`, so
/// the room over the mark is kept only while the program reuses it.
pub(super) const DIRTY_OVER_PEAK_DIVISOR: u64 = 4;

/// The dirty cache's budget, for `leaving`, the bytes of an object being freed (still counted
/// live; 0 when nothing is): counting the object both live and cached would evict as much as
/// its free caches.
pub(super) fn dirty_budget_bytes(leaving: usize) -> usize {
    #[cfg(test)]
    match tests::BUDGET.load(Ordering::Relaxed) {
        0 => {}
        budget => return budget,
    }
    dirty_budget(
        LIVE_BYTES.load(Ordering::Relaxed),
        PEAK_LIVE_BYTES.load(Ordering::Relaxed),
        leaving,
    )
}

pub(super) fn dirty_budget(live: u64, peak: u64, leaving: usize) -> usize {
    let bound = peak.saturating_add(peak / DIRTY_OVER_PEAK_DIVISOR);
    DIRTY_BUDGET_BYTES.max(bound.saturating_sub(live.saturating_sub(leaving as u64)) as usize)
}

/// Larger frees are always returned to the kernel at once. 32 MiB, glibc's largest dynamic mmap
/// threshold on 64-bit: a program that frees and grows buffers of several MiB again and again
/// (vectors, read buffers) reuses their pages instead of faulting them in each time
/// (docs/design/dirty-cache.md). The budget above still bounds the cache.
pub(super) const DIRTY_MAX_EXTENT_BYTES: usize = 32 << 20;

/// Dirty extents taken out of the cache to be given back to the kernel together
/// (`State::give_back`): their pages, and `(chunk, first page, pages)` of each.
pub(super) struct Evicted {
    pub(super) discards: discard::Batch,
    pub(super) extents: [(u32, u32, u32); discard::BATCH],
}

impl Evicted {
    pub(super) fn new() -> Self {
        Self {
            discards: discard::Batch::new(),
            extents: [(0, 0, 0); discard::BATCH],
        }
    }
}

impl State {
    /// Counts `bytes` more cached dirty memory, in this shard and process-wide.
    pub(super) fn add_dirty_bytes(&mut self, bytes: usize) {
        self.dirty_bytes += bytes;
        DIRTY_BYTES.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts `bytes` (at most what this shard has) less cached dirty memory.
    pub(super) fn sub_dirty_bytes(&mut self, bytes: usize) {
        let bytes = bytes.min(self.dirty_bytes);
        self.dirty_bytes -= bytes;
        DIRTY_BYTES.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Reuses the smallest dirty extent of `placement` that fits; the rest stays dirty, cached
    /// anew at tick `now`.
    pub(super) fn take_dirty(
        &mut self,
        placement: u32,
        pages: usize,
        align_pages: usize,
        now: u64,
    ) -> Option<(usize, usize)> {
        if align_pages > 1 {
            return None;
        }
        let key = self.dirty.fitting(placement, pages)?;
        self.dirty.remove(key);
        let (chunk, start, dirty_pages) =
            (key.chunk as usize, key.start as usize, key.pages as usize);
        self.sub_dirty_bytes(dirty_pages * PAGE_SIZE);
        self.chunks[chunk].mark(start, pages, TAG_ALLOCATED);
        if dirty_pages > pages {
            self.insert_dirty(chunk, start + pages, dirty_pages - pages, now);
        }
        Some((chunk, start))
    }

    /// Caches a freed extent: in its size's quick list if it has one with room, else in the
    /// dirty index (`insert_dirty`). `cached` is when, in coarse ticks.
    pub(super) fn cache_dirty(&mut self, chunk: usize, start: usize, pages: usize, cached: u64) {
        if self.chunks[chunk].placement != DEFAULT_PLACEMENT || !self.quick.has_room(pages) {
            self.insert_dirty(chunk, start, pages, cached);
            return;
        }
        self.add_dirty_bytes(pages * PAGE_SIZE);
        let c = &mut self.chunks[chunk];
        c.mark(start, pages, TAG_QUICK);
        c.set_site(start, cached);
        self.quick.push(pages, chunk, start);
    }

    /// Moves every quick-listed extent into the dirty index, where it merges with its dirty
    /// neighbours and can be evicted or purged.
    pub(super) fn flush_quick(&mut self) {
        // One at a time, in place: the lists are too large to copy onto an allocating thread's
        // stack, which may be small.
        for pages in 1..=QUICK_MAX_PAGES {
            while let Some((chunk, start)) = self.quick.pop(pages) {
                self.quick_to_index(chunk, start, pages);
            }
        }
    }

    /// Puts an extent taken out of a quick list into the dirty index, with its cache time.
    pub(super) fn quick_to_index(&mut self, chunk: usize, start: usize, pages: usize) {
        let cached = self.chunks[chunk].site(start);
        // `insert_dirty` counts the bytes again.
        self.sub_dirty_bytes(pages * PAGE_SIZE);
        self.insert_dirty(chunk, start, pages, cached);
    }

    /// Adds a dirty free extent, merged with dirty free neighbours (as clean ones are merged
    /// with clean ones): without merging, reuse by best fit splits the cache into ever smaller
    /// pieces that larger requests miss. `cached` is when it was cached, in coarse ticks.
    pub(super) fn insert_dirty(
        &mut self,
        chunk: usize,
        mut start: usize,
        mut pages: usize,
        cached: u64,
    ) {
        self.add_dirty_bytes(pages * PAGE_SIZE);
        // Its own tags first, as `release` does: merged into the extent before it, its head
        // page becomes an interior page whose tag nothing rewrites, and a stale "allocated"
        // tag there would let a second free of the same pointer through.
        self.chunks[chunk].mark(start, pages, TAG_DIRTY);
        let c = &self.chunks[chunk];
        if start > 0 {
            let before = c.tag(start - 1);
            if before & (TAG_ALLOCATED | TAG_DIRTY) == TAG_DIRTY {
                let before_pages = (before >> TAG_PAGES_SHIFT) as usize;
                self.dirty
                    .remove(free_key(chunk, start - before_pages, before_pages));
                start -= before_pages;
                pages += before_pages;
            }
        }
        let c = &self.chunks[chunk];
        let end = start + pages;
        if end < c.bump {
            let after = c.tag(end);
            if after & (TAG_ALLOCATED | TAG_DIRTY) == TAG_DIRTY {
                let after_pages = (after >> TAG_PAGES_SHIFT) as usize;
                self.dirty.remove(free_key(chunk, end, after_pages));
                pages += after_pages;
            }
        }
        self.chunks[chunk].mark(start, pages, TAG_DIRTY);
        // A free extent has no site: its slot in the side table holds when it was cached.
        self.chunks[chunk].set_site(start, cached);
        self.dirty.insert(free_key(chunk, start, pages));
    }

    /// Returns at least `bytes` of cached dirty memory to the kernel, from the largest extents,
    /// taking only the tail of an extent larger than what is still needed. Dirty neighbours
    /// merge, so the largest extent can hold most of the cache: evicting it whole would turn
    /// one over-budget free into a cold start for every size the program reuses.
    pub(super) fn evict_dirty(&mut self, bytes: usize) {
        let mut needed_pages = bytes.div_ceil(PAGE_SIZE);
        let mut evicted = Evicted::new();
        while needed_pages > 0 {
            let largest = (0..self.placements.len() as u32)
                .filter_map(|p| self.dirty.largest(p))
                .max_by_key(|key| key.pages);
            let Some(key) = largest else {
                // Quick-listed extents merge with their neighbours' tags: the evicted ones must
                // be clean free space first.
                self.give_back(&mut evicted);
                if !self.quick.is_empty() {
                    self.flush_quick();
                    continue;
                }
                self.sub_dirty_bytes(self.dirty_bytes);
                return;
            };
            let evict = (key.pages as usize).min(needed_pages);
            self.evict_dirty_extent(key, evict, &mut evicted);
            needed_pages -= evict;
        }
        self.give_back(&mut evicted);
    }

    /// Takes the last `evict` pages of the dirty extent `key` out of the cache, into `evicted`
    /// (given back to the kernel, then clean free space, by `give_back`); the rest of it stays
    /// cached. Until then the evicted pages are in no set and keep their old tags, which nothing
    /// reads: only `give_back` may touch them, in the same hold of the lock.
    pub(super) fn evict_dirty_extent(&mut self, key: Free, evict: usize, evicted: &mut Evicted) {
        if evicted.discards.is_full() {
            self.give_back(evicted);
        }
        self.dirty.remove(key);
        let (pages, chunk, start) = (key.pages as usize, key.chunk as usize, key.start as usize);
        let evict = evict.min(pages);
        let keep = pages - evict;
        self.sub_dirty_bytes(evict * PAGE_SIZE);
        if keep > 0 {
            // The head stays dirty (same start, fewer pages, same cache time).
            self.chunks[chunk].mark(start, keep, TAG_DIRTY);
            self.dirty.insert(free_key(chunk, start, keep));
        }
        let tail = start + keep;
        let addr = self.chunks[chunk].base + tail * PAGE_SIZE;
        evicted.extents[evicted.discards.len()] = (chunk as u32, tail as u32, evict as u32);
        evicted.discards.push(addr, evict * PAGE_SIZE);
    }

    /// Gives the pages of the extents in `evicted` back to the kernel, together, then makes
    /// them clean free space (merged with their clean neighbours, which may be each other).
    pub(super) fn give_back(&mut self, evicted: &mut Evicted) {
        let count = evicted.discards.len();
        if count == 0 {
            return;
        }
        // SAFETY: free extents nobody may use: they are in no set while we hold the lock.
        unsafe { evicted.discards.discard() };
        for &(chunk, start, pages) in &evicted.extents[..count] {
            self.release(chunk as usize, start as usize, pages as usize);
        }
    }
}
