//! A chunk of address space and its side tables: boundary tags at each extent's first and last
//! page (allocated or free, dirty or clean, its length), and per page the live object's site,
//! the event that announced it and what it keeps of its cache.

use super::*;

pub(super) const TAG_ALLOCATED: u32 = 1;
pub(super) const TAG_TAIL: u32 = 2;
/// A free extent whose pages are still resident (not zeroed).
pub(super) const TAG_DIRTY: u32 = 4;
/// Both bits: a dirty free extent held in a quick list (see `Quick`), not in the dirty index.
/// To every test written before quick lists it reads as neither a live object nor a free
/// extent to merge with; `is_live` is what tells a live object.
pub(super) const TAG_QUICK: u32 = TAG_ALLOCATED | TAG_DIRTY;
pub(super) const TAG_PAGES_SHIFT: u32 = 3;

/// Whether a head tag is a live object's (not a free extent's, nor a quick-listed one's).
#[inline]
pub(super) fn is_live(tag: u32) -> bool {
    tag & (TAG_ALLOCATED | TAG_DIRTY) == TAG_ALLOCATED
}

pub(super) struct Chunk {
    pub(super) base: usize,
    pub(super) pages: usize,
    /// Boundary tags, one u32 per page of the chunk, in a mapping of their own.
    pub(super) tags: *mut u32,
    /// Allocation site, allocation event (`alloc`'s `on_alloc`) and what the caller keeps with
    /// the object starting at each page, `SIDE_WORDS` u64 a page (only head pages are
    /// meaningful), in a mapping of its own; touched only for pages where objects start.
    pub(super) sites: *mut u64,
    /// Pages `[bump, pages)` have never been handed out.
    pub(super) bump: usize,
    /// The placement it belongs to.
    pub(super) placement: u32,
}

impl Chunk {
    pub(super) fn tag(&self, page: usize) -> u32 {
        debug_assert!(page < self.pages);
        // SAFETY: `tags` maps `pages` u32 entries and `page < pages`.
        unsafe { *self.tags.add(page) }
    }

    pub(super) fn set_tag(&mut self, page: usize, value: u32) {
        debug_assert!(page < self.pages);
        // SAFETY: as in `tag`; we hold the state lock, so no one else writes.
        unsafe { *self.tags.add(page) = value }
    }

    /// Writes head (and tail) tags for the extent `[start, start + pages)`; `flags` is
    /// `TAG_ALLOCATED`, `TAG_DIRTY` or 0 (clean free).
    pub(super) fn mark(&mut self, start: usize, pages: usize, flags: u32) {
        debug_assert!((1..=MAX_EXTENT_PAGES).contains(&pages) && start + pages <= self.pages);
        let value = ((pages as u32) << TAG_PAGES_SHIFT) | flags;
        self.set_tag(start, value);
        if pages > 1 {
            self.set_tag(start + pages - 1, value | TAG_TAIL);
        }
    }

    /// The extents from page `from` (which must be an extent head) up to the bump, as
    /// (first page, pages, tag); stops early at a corrupted tag rather than loop forever.
    pub(super) fn extents(&self, from: usize) -> impl Iterator<Item = (usize, usize, u32)> + '_ {
        let mut page = from;
        core::iter::from_fn(move || {
            if page >= self.bump {
                return None;
            }
            let tag = self.tag(page);
            let pages = (tag >> TAG_PAGES_SHIFT) as usize;
            if pages == 0 {
                return None;
            }
            let here = page;
            page += pages;
            Some((here, pages, tag))
        })
    }

    /// The live object whose extent starts at `page`.
    pub(super) fn object(&self, page: usize, pages: usize) -> Extent {
        Extent {
            addr: self.base + page * PAGE_SIZE,
            len: pages * PAGE_SIZE,
        }
    }

    pub(super) fn site(&self, page: usize) -> u64 {
        self.side(page, SIDE_SITE)
    }

    pub(super) fn set_site(&mut self, page: usize, site: u64) {
        self.set_side(page, SIDE_SITE, site)
    }

    /// What `on_alloc` returned for the object starting at `page` (0 when it is known to the
    /// daemon some other way: moved, grown, or re-announced since).
    pub(super) fn event(&self, page: usize) -> u64 {
        self.side(page, SIDE_EVENT)
    }

    /// (`&self`: the side table is not the chunk's; a walk over the extents clears entries as
    /// it goes. Callers hold the state lock, as for every other write.)
    pub(super) fn set_event(&self, page: usize, event: u64) {
        self.set_side(page, SIDE_EVENT, event)
    }

    /// What the caller keeps with the object starting at `page` (`alloc`'s `kept`).
    pub(super) fn kept(&self, page: usize) -> u64 {
        self.side(page, SIDE_KEPT)
    }

    pub(super) fn side(&self, page: usize, word: usize) -> u64 {
        debug_assert!(page < self.pages && word < SIDE_WORDS);
        // SAFETY: `sites` maps `SIDE_WORDS * pages` u64 entries; callers hold the state lock.
        unsafe { *self.sites.add(SIDE_WORDS * page + word) }
    }

    pub(super) fn set_side(&self, page: usize, word: usize, value: u64) {
        debug_assert!(page < self.pages && word < SIDE_WORDS);
        // SAFETY: as in `side`.
        unsafe { *self.sites.add(SIDE_WORDS * page + word) = value }
    }
}

/// The side table's words per page: the object's site, its allocation event, and what the
/// caller keeps with it.
pub(super) const SIDE_WORDS: usize = 3;
pub(super) const SIDE_SITE: usize = 0;
pub(super) const SIDE_EVENT: usize = 1;
pub(super) const SIDE_KEPT: usize = 2;

/// The free extent of `pages` pages from page `start` of `chunk`, as the indexes know it.
pub(super) fn free_key(chunk: usize, start: usize, pages: usize) -> Free {
    Free {
        pages: pages as u32,
        chunk: chunk as u32,
        start: start as u32,
    }
}
