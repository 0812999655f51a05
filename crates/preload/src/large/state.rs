//! One shard's allocator state: its chunks, placements and free extents, and the core of
//! allocation (finding pages, carving them, giving them back, mapping new chunks).

use super::*;

/// Until this coarse tick no ordinary chunk is tried: the last try's address space was refused
/// (a program under `ulimit -v`), and trying again on every allocation would cost an mmap each.
pub(super) static NO_CHUNK_BEFORE_TICK: AtomicU64 = AtomicU64::new(0);
/// Whether a chunk has been refused once (said once, with `OBJTIER_DEBUG`).
pub(super) static CHUNK_REFUSED: AtomicBool = AtomicBool::new(false);

/// A set of NUMA nodes chunks are bound to (0 for the default placement), and the chunk of that
/// placement with never-used pages at its end, where new extents are cut when nothing fits.
pub(super) struct Placement {
    pub(super) nodes: u64,
    pub(super) current: Option<usize>,
}

pub(super) struct State {
    /// Which of the `SHARDS` this is.
    pub(super) id: usize,
    pub(super) chunks: Vec<Chunk>,
    /// Clean free extents.
    pub(super) free: FreeIndex,
    /// Dirty free extents.
    pub(super) dirty: FreeIndex,
    pub(super) dirty_bytes: usize,
    /// Dirty extents of a few pages kept out of the index for reuse by size.
    pub(super) quick: Quick,
    /// Index 0 is the default placement (created on first use).
    pub(super) placements: Vec<Placement>,
}

// SAFETY: the raw tag pointers are only dereferenced under the state lock.
unsafe impl Send for State {}

impl State {
    /// The placement for chunks bound to `nodes`, created on first use; the default placement
    /// when `nodes` is 0 or too many placements exist already.
    pub(super) fn placement_for(&mut self, nodes: u64) -> u32 {
        if self.placements.is_empty() {
            self.placements.push(Placement {
                nodes: 0,
                current: None,
            });
        }
        if let Some(i) = self.placements.iter().position(|p| p.nodes == nodes) {
            return i as u32;
        }
        if self.placements.len() >= MAX_PLACEMENTS {
            return DEFAULT_PLACEMENT;
        }
        self.placements.push(Placement {
            nodes,
            current: None,
        });
        (self.placements.len() - 1) as u32
    }

    pub(super) fn allocated_extent(&self, chunk: usize, addr: usize) -> Option<Extent> {
        let c = self.chunks.get(chunk)?;
        if !addr.is_multiple_of(PAGE_SIZE) || addr < c.base {
            return None;
        }
        let page = (addr - c.base) / PAGE_SIZE;
        if page >= c.bump {
            return None;
        }
        let tag = c.tag(page);
        if !is_live(tag) || tag & TAG_TAIL != 0 {
            return None;
        }
        Some(Extent {
            addr,
            len: (tag >> TAG_PAGES_SHIFT) as usize * PAGE_SIZE,
        })
    }

    /// Finds `pages` pages aligned to `align_pages`, marks them allocated, and returns
    /// (chunk, start, contents): a dirty extent of a fitting size first, then a clean one, then
    /// never-used pages.
    pub(super) fn take(
        &mut self,
        placement: u32,
        pages: usize,
        align_pages: usize,
        now: u64,
    ) -> Option<(usize, usize, Contents)> {
        if placement == DEFAULT_PLACEMENT && align_pages == 1 {
            if let Some((chunk, start)) = self.quick.pop(pages) {
                self.sub_dirty_bytes(pages * PAGE_SIZE);
                self.chunks[chunk].mark(start, pages, TAG_ALLOCATED);
                return Some((chunk, start, Contents::Dirty));
            }
        }
        if let Some((chunk, start)) = self.take_dirty(placement, pages, align_pages, now) {
            return Some((chunk, start, Contents::Dirty));
        }
        if let Some((chunk, start)) = self.take_free(placement, pages, align_pages) {
            return Some((chunk, start, Contents::Zeroed));
        }
        if let Some((chunk, start)) = self.take_bump(placement, pages, align_pages) {
            return Some((chunk, start, Contents::Zeroed));
        }
        self.new_chunk(placement, pages + align_pages - 1, now)?;
        let (chunk, start) = self.take_bump(placement, pages, align_pages)?;
        Some((chunk, start, Contents::Zeroed))
    }

    pub(super) fn take_free(
        &mut self,
        placement: u32,
        pages: usize,
        align_pages: usize,
    ) -> Option<(usize, usize)> {
        let key = self.free.fitting(placement, pages + align_pages - 1)?;
        self.free.remove(key);
        let (chunk, start, free_pages) =
            (key.chunk as usize, key.start as usize, key.pages as usize);
        let base_page = self.chunks[chunk].base / PAGE_SIZE;
        let aligned = start_in(base_page, start, start + free_pages, pages, align_pages);
        self.carve(chunk, start, free_pages, aligned, pages);
        Some((chunk, aligned))
    }

    pub(super) fn take_bump(
        &mut self,
        placement: u32,
        pages: usize,
        align_pages: usize,
    ) -> Option<(usize, usize)> {
        let chunk = self.placements[placement as usize].current?;
        let c = &self.chunks[chunk];
        let base_page = c.base / PAGE_SIZE;
        let aligned = start_in(base_page, c.bump, c.pages, pages, align_pages);
        if aligned + pages > c.pages {
            return None;
        }
        let start = c.bump;
        self.chunks[chunk].bump = aligned + pages;
        self.carve(chunk, start, aligned + pages - start, aligned, pages);
        Some((chunk, aligned))
    }

    /// Splits the free run `[start, start + run)` into an allocated `[aligned, aligned + pages)`
    /// and free leftovers before and after it.
    pub(super) fn carve(
        &mut self,
        chunk: usize,
        start: usize,
        run: usize,
        aligned: usize,
        pages: usize,
    ) {
        if aligned > start {
            self.insert_free(chunk, start, aligned - start);
        }
        self.chunks[chunk].mark(aligned, pages, TAG_ALLOCATED);
        let end = aligned + pages;
        if end < start + run {
            self.insert_free(chunk, end, start + run - end);
        }
    }

    pub(super) fn insert_free(&mut self, chunk: usize, start: usize, pages: usize) {
        self.chunks[chunk].mark(start, pages, 0);
        self.free.insert(free_key(chunk, start, pages));
    }

    /// Returns an allocated (already zeroed) extent to the clean free set, merging it with
    /// clean free neighbours.
    pub(super) fn release(&mut self, chunk: usize, mut start: usize, mut pages: usize) {
        let c = &mut self.chunks[chunk];
        c.mark(start, pages, 0);
        if start > 0 {
            let before = c.tag(start - 1);
            if before & (TAG_ALLOCATED | TAG_DIRTY) == 0 {
                let before_pages = (before >> TAG_PAGES_SHIFT) as usize;
                let before_start = start - before_pages;
                self.free
                    .remove(free_key(chunk, before_start, before_pages));
                start = before_start;
                pages += before_pages;
            }
        }
        let c = &mut self.chunks[chunk];
        let end = start + pages;
        if end == c.bump {
            // Give the run back to the never-used tail: it is zero and non-resident either way.
            c.bump = start;
            return;
        }
        let after = c.tag(end);
        if after & (TAG_ALLOCATED | TAG_DIRTY) == 0 {
            let after_pages = (after >> TAG_PAGES_SHIFT) as usize;
            self.free.remove(free_key(chunk, end, after_pages));
            pages += after_pages;
        }
        self.insert_free(chunk, start, pages);
    }

    /// Maps a new chunk of `placement` able to hold at least `pages` pages and makes it the
    /// placement's current chunk.
    pub(super) fn new_chunk(&mut self, placement: u32, pages: usize, now: u64) -> Option<()> {
        if self.chunks.len() >= CHUNKS_PER_SHARD {
            return None;
        }
        let bytes = (pages.checked_mul(PAGE_SIZE)?).next_multiple_of(CHUNK_BYTES);
        if bytes == CHUNK_BYTES && now < NO_CHUNK_BEFORE_TICK.load(Ordering::Relaxed) {
            return None;
        }
        // A chunk of its own for one huge object is mapped without MAP_NORESERVE, so the
        // kernel's overcommit policy judges it as it would glibc's mmap: `malloc(1 TiB)` on a
        // 24 GiB machine fails with ENOMEM instead of succeeding on paper.
        let Some(base) = map_aligned(bytes, bytes > CHUNK_BYTES) else {
            if bytes == CHUNK_BYTES {
                // Not one failed mmap per allocation: the caller serves them from mimalloc.
                NO_CHUNK_BEFORE_TICK.store(now + TICKS_PER_SECOND, Ordering::Relaxed);
                if !CHUNK_REFUSED.swap(true, Ordering::Relaxed) {
                    log!(
                        "cannot reserve {} MiB of address space for tracked objects (ulimit -v?): objects go untracked to mimalloc until it can",
                        bytes >> 20
                    );
                }
            }
            return None;
        };
        let chunk_pages = bytes / PAGE_SIZE;
        let tags_bytes = chunk_pages * core::mem::size_of::<u32>();
        let sites_bytes = SIDE_WORDS * chunk_pages * core::mem::size_of::<u64>();
        // The clean and the dirty index's bitmaps for this chunk, one after the other.
        let bitmap_words = free_index::bitmap_words(chunk_pages);
        let bitmaps_bytes = 2 * bitmap_words * core::mem::size_of::<u64>();
        // Side tables are written a word per extent, sparsely: with huge pages `always`, each
        // first write would fault in 2 MiB (see `map_metadata`).
        let tags = map_metadata(tags_bytes);
        let sites = map_metadata(sites_bytes);
        let bitmaps = map_metadata(bitmaps_bytes);
        if tags.is_null() || sites.is_null() || bitmaps.is_null() {
            // SAFETY: unmapping the regions we just mapped and never published.
            unsafe {
                crate::os::munmap(base as *mut libc::c_void, bytes);
                for (side, len) in [
                    (tags, tags_bytes),
                    (sites, sites_bytes),
                    (bitmaps, bitmaps_bytes),
                ] {
                    if !side.is_null() {
                        crate::os::munmap(side as *mut libc::c_void, len);
                    }
                }
            }
            return None;
        }
        let bitmaps = bitmaps as *mut u64;
        // SAFETY: a fresh zeroed mapping of 2 * bitmap_words words, never unmapped, split
        // between the two indexes; the chunk is numbered `self.chunks.len()` in both, as below.
        unsafe {
            self.free.add_chunk(placement, chunk_pages, bitmaps);
            self.dirty
                .add_chunk(placement, chunk_pages, bitmaps.add(bitmap_words));
        }
        if bytes == CHUNK_BYTES {
            // A thread's first tracked objects, often a process's only ones (a shell, a helper,
            // a short tool), go at the start of its shard's first chunk: under
            // `transparent_hugepage=always` the first of them would make 2 MiB resident, taken
            // where first touch puts it, in the fast tier, as mimalloc's first arena would
            // (`arenas::keep_first_off_huge_pages`). The rest of the chunk keeps the system's
            // setting, so large arrays still get huge pages.
            keep_off_huge_pages(base, HUGE_PAGE_BYTES);
        }
        let nodes = self.placements[placement as usize].nodes;
        if nodes != 0 {
            bind_preferred(base, bytes, nodes);
        }
        // Retire the old current chunk's never-used tail into the free set so it stays usable.
        if let Some(old) = self.placements[placement as usize].current {
            let c = &self.chunks[old];
            let (bump, total) = (c.bump, c.pages);
            if bump < total {
                self.chunks[old].bump = total;
                self.insert_free(old, bump, total - bump);
            }
        }
        let index = self.chunks.len();
        let code = (index << SHARD_BITS | self.id) + 1;
        self.chunks.push(Chunk {
            base,
            pages: chunk_pages,
            tags: tags as *mut u32,
            sites: sites as *mut u64,
            bump: 0,
            placement,
        });
        for owner in &GRANULE_OWNER[(base >> CHUNK_SHIFT)..((base + bytes) >> CHUNK_SHIFT)] {
            owner.store(code as u16, Ordering::Release);
        }
        self.placements[placement as usize].current = Some(index);
        Some(())
    }
}
